/* compat
[{"path": "/"}]
*/
// HMAC: import (raw, jwk), sign, verify, export, generate.
const hex = (buf) => [...new Uint8Array(buf)].map((b) => b.toString(16).padStart(2, '0')).join('');
const enc = new TextEncoder();

export default {
  async fetch() {
    const out = {};
    const data = enc.encode('message to authenticate');
    for (const hash of ['SHA-1', 'SHA-256', 'SHA-384', 'SHA-512']) {
      const key = await crypto.subtle.importKey('raw', enc.encode('secret key'), { name: 'HMAC', hash }, true, ['sign', 'verify']);
      const sig = await crypto.subtle.sign('HMAC', key, data);
      out[hash] = [hex(sig), await crypto.subtle.verify('HMAC', key, sig, data),
        await crypto.subtle.verify('HMAC', key, sig, enc.encode('tampered')), key.algorithm.length];
    }
    const key = await crypto.subtle.importKey('raw', enc.encode('k'), { name: 'HMAC', hash: 'SHA-256' }, true, ['sign']);
    out.jwk = await crypto.subtle.exportKey('jwk', key);
    out.raw = hex(await crypto.subtle.exportKey('raw', key));
    out.props = [key.type, key.extractable, key.algorithm, key.usages];
    const fromJwk = await crypto.subtle.importKey('jwk', { kty: 'oct', k: 'c2VjcmV0', alg: 'HS256' }, { name: 'HMAC', hash: 'SHA-256' }, false, ['sign']);
    out.fromJwk = hex(await crypto.subtle.sign('HMAC', fromJwk, data));
    const gen = await crypto.subtle.generateKey({ name: 'HMAC', hash: 'SHA-512' }, true, ['sign']);
    out.generated = [gen.algorithm.length, (await crypto.subtle.exportKey('raw', gen)).byteLength];
    try {
      await crypto.subtle.exportKey('raw', fromJwk);
    } catch (err) {
      out.notExtractable = err.name;
    }
    try {
      await crypto.subtle.verify('HMAC', key, new Uint8Array(32), data);
    } catch (err) {
      out.wrongUsage = err.name;
    }
    try {
      await crypto.subtle.importKey('raw', enc.encode('k'), { name: 'HMAC', hash: 'SHA-256' }, true, ['encrypt']);
    } catch (err) {
      out.badUsage = err.name;
    }
    return Response.json(out);
  },
};
