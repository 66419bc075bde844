/* compat
[{"path": "/"}]
*/
// The DOMException names Web Crypto uses for each kind of mistake.
const enc = new TextEncoder();

export default {
  async fetch() {
    const out = {};
    const hmac = await crypto.subtle.importKey('raw', enc.encode('k'), { name: 'HMAC', hash: 'SHA-256' }, false, ['sign']);
    const aes = await crypto.subtle.importKey('raw', new Uint8Array(16), 'AES-GCM', false, ['encrypt']);
    const attempts = {
      unknownAlg: () => crypto.subtle.generateKey({ name: 'FOO' }, true, ['sign']),
      wrongAlgForKey: () => crypto.subtle.sign('HMAC', aes, enc.encode('x')),
      wrongOp: () => crypto.subtle.encrypt({ name: 'AES-GCM', iv: new Uint8Array(12) }, hmac, enc.encode('x')),
      missingUsage: () => crypto.subtle.decrypt({ name: 'AES-GCM', iv: new Uint8Array(12) }, aes, new Uint8Array(32)),
      badFormat: () => crypto.subtle.importKey('foo', new Uint8Array(16), 'AES-GCM', false, ['encrypt']),
      spkiForSecret: () => crypto.subtle.importKey('spki', new Uint8Array(16), 'AES-GCM', false, ['encrypt']),
      emptyUsages: () => crypto.subtle.importKey('raw', new Uint8Array(16), 'AES-GCM', false, []),
      badIv: () => crypto.subtle.encrypt({ name: 'AES-CBC', iv: new Uint8Array(3) }, aes, enc.encode('x')),
      missingHash: () => crypto.subtle.importKey('raw', enc.encode('k'), { name: 'HMAC' }, false, ['sign']),
      badJwk: () => crypto.subtle.importKey('jwk', { kty: 'oct', k: '***' }, 'AES-GCM', false, ['encrypt']),
      badTag: () => crypto.subtle.encrypt({ name: 'AES-GCM', iv: new Uint8Array(12), tagLength: 100 }, aes, enc.encode('x')),
      keyCtor: () => new CryptoKey(),
    };
    for (const [name, fn] of Object.entries(attempts)) {
      try {
        await fn();
        out[name] = 'ok';
      } catch (err) {
        out[name] = err.name;
      }
    }
    return Response.json(out);
  },
};
