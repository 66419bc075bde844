/* compat
[{"path": "/"}]
*/
// Ed25519 (deterministic signatures) and X25519 with fixed keys.
const hex = (buf) => [...new Uint8Array(buf)].map((b) => b.toString(16).padStart(2, '0')).join('');
const ed = { crv: 'Ed25519', d: 'hyPxnMXNqBs0zxqgt9Iq4nkl1VAQLiPAqrGkp6NJxR8', x: 'WbzU_HjYImoSih-YmnT58oLN66RzRHEu7Rhn1nmGEJk', kty: 'OKP' };
const x = { crv: 'X25519', d: 'GJ2lInSfgGYopYSXsp9jE6gctMXH4LKiwXHlqBd3zEA', x: 'iThGNTydQ3-fEviObc-K1BT96QF8qi26I7VC-TMLlns', kty: 'OKP' };

export default {
  async fetch() {
    const out = {};
    const priv = await crypto.subtle.importKey('jwk', ed, 'Ed25519', true, ['sign']);
    const pub = await crypto.subtle.importKey('jwk', { kty: 'OKP', crv: 'Ed25519', x: ed.x }, { name: 'Ed25519' }, true, ['verify']);
    const msg = new TextEncoder().encode('edwards');
    const sig = await crypto.subtle.sign('Ed25519', priv, msg);
    out.sig = hex(sig);
    out.verify = await crypto.subtle.verify('Ed25519', pub, sig, msg);
    out.raw = hex(await crypto.subtle.exportKey('raw', pub));
    out.spki = hex(await crypto.subtle.exportKey('spki', pub));
    out.pkcs8 = hex(await crypto.subtle.exportKey('pkcs8', priv));
    out.algorithm = priv.algorithm;
    out.jwk = await crypto.subtle.exportKey('jwk', priv);
    const xPriv = await crypto.subtle.importKey('jwk', x, { name: 'X25519' }, true, ['deriveBits']);
    const peer = await crypto.subtle.importKey('raw', await crypto.subtle.exportKey('raw', pub), { name: 'X25519' }, true, []);
    out.x25519 = hex(await crypto.subtle.deriveBits({ name: 'X25519', public: peer }, xPriv, 256));
    const gen = await crypto.subtle.generateKey('Ed25519', true, ['sign', 'verify']);
    out.generated = [gen.privateKey.type, gen.publicKey.usages, (await crypto.subtle.exportKey('raw', gen.publicKey)).byteLength];
    return Response.json(out);
  },
};
