/* compat
[{"path": "/"}]
*/
// PBKDF2 and HKDF: deriveBits and deriveKey.
const hex = (buf) => [...new Uint8Array(buf)].map((b) => b.toString(16).padStart(2, '0')).join('');
const enc = new TextEncoder();

export default {
  async fetch() {
    const out = {};
    const pw = await crypto.subtle.importKey('raw', enc.encode('password'), 'PBKDF2', false, ['deriveBits', 'deriveKey']);
    for (const [hash, iterations] of [['SHA-1', 1], ['SHA-256', 1000], ['SHA-512', 10]]) {
      out[`pbkdf2 ${hash} ${iterations}`] = hex(await crypto.subtle.deriveBits(
        { name: 'PBKDF2', hash, salt: enc.encode('salt'), iterations }, pw, 256));
    }
    const aes = await crypto.subtle.deriveKey({ name: 'PBKDF2', hash: 'SHA-256', salt: enc.encode('s'), iterations: 5 },
      pw, { name: 'AES-GCM', length: 128 }, true, ['encrypt']);
    out.derivedAes = [aes.algorithm, hex(await crypto.subtle.exportKey('raw', aes))];
    const ikm = await crypto.subtle.importKey('raw', new Uint8Array(22).fill(11), 'HKDF', false, ['deriveBits', 'deriveKey']);
    const salt = new Uint8Array(13).map((_, i) => i);
    const info = new Uint8Array(10).map((_, i) => 0xf0 + i);
    for (const hash of ['SHA-1', 'SHA-256', 'SHA-384']) {
      out[`hkdf ${hash}`] = hex(await crypto.subtle.deriveBits({ name: 'HKDF', hash, salt, info }, ikm, 336));
    }
    out.hkdfNoSalt = hex(await crypto.subtle.deriveBits({ name: 'HKDF', hash: 'SHA-256', salt: new Uint8Array(), info: new Uint8Array() }, ikm, 128));
    const hmac = await crypto.subtle.deriveKey({ name: 'HKDF', hash: 'SHA-256', salt, info }, ikm,
      { name: 'HMAC', hash: 'SHA-256', length: 256 }, true, ['sign']);
    out.derivedHmac = [hmac.algorithm, hex(await crypto.subtle.exportKey('raw', hmac))];
    for (const [what, fn] of [
      ['zeroIterations', () => crypto.subtle.deriveBits({ name: 'PBKDF2', hash: 'SHA-256', salt: enc.encode('s'), iterations: 0 }, pw, 128)],
      ['maxIterations', () => crypto.subtle.deriveBits({ name: 'PBKDF2', hash: 'SHA-1', salt: enc.encode('s'), iterations: 100000 }, pw, 128)],
      ['oddLength', () => crypto.subtle.deriveBits({ name: 'PBKDF2', hash: 'SHA-256', salt: enc.encode('s'), iterations: 1 }, pw, 7)],
      ['extractable', () => crypto.subtle.importKey('raw', enc.encode('p'), 'PBKDF2', true, ['deriveBits'])],
      ['exportKdf', () => crypto.subtle.exportKey('raw', pw)],
    ]) {
      try {
        await fn();
        out[what] = 'ok';
      } catch (err) {
        out[what] = err.name;
      }
    }
    return Response.json(out);
  },
};
