/* compat
[{"path": "/"}]
*/
// ECDSA P-256/P-384 and ECDH with fixed keys: import and export in every
// format, sign/verify round trips (ECDSA signatures are randomised).
const hex = (buf) => [...new Uint8Array(buf)].map((b) => b.toString(16).padStart(2, '0')).join('');
const p256 = { kty: 'EC', x: 'KGij5hiKJxRu-YlYE5rXabcK9L9vgvFuIhHZCMfQA_c', y: 'F5YeTHGO6K1Xlmg9TH4ctcBLx7a49nldn1M1lnxjmk0', crv: 'P-256', d: 'F2EnFYnU2jYFrRRFogSm7L6upKif95MLigdVFDmwwL8' };
const p384 = { kty: 'EC', x: 'EtnoU-Mo_ZG91SdPXznU-NqPwiYMtbxKHl6zFk3AT6Hdb9wKlmj8stQeFk-OiLPJ', y: 'Rbk8QncCULjDagLbqh_3fee5Nxc-enQ_9iM5yRUHc70GhKWkG2M2zYadREll6Pmq', crv: 'P-384', d: 'p2Jo_y1oLFrDD9FkOnbgno98r9P9za8m7VLMG84YLeXGUdxXdCUAg2cj44Y4UW56' };
const data = new TextEncoder().encode('signed data');

export default {
  async fetch() {
    const out = {};
    for (const [jwk, hash] of [[p256, 'SHA-256'], [p384, 'SHA-384']]) {
      const alg = { name: 'ECDSA', namedCurve: jwk.crv };
      const priv = await crypto.subtle.importKey('jwk', jwk, alg, true, ['sign']);
      const { d, ...pubJwk } = jwk;
      const pub = await crypto.subtle.importKey('jwk', pubJwk, alg, true, ['verify']);
      const sig = await crypto.subtle.sign({ name: 'ECDSA', hash }, priv, data);
      const r = {
        sigLength: sig.byteLength,
        verifies: await crypto.subtle.verify({ name: 'ECDSA', hash }, pub, sig, data),
        wrongData: await crypto.subtle.verify({ name: 'ECDSA', hash }, pub, sig, new Uint8Array(3)),
        spki: hex(await crypto.subtle.exportKey('spki', pub)),
        raw: hex(await crypto.subtle.exportKey('raw', pub)),
        jwk: await crypto.subtle.exportKey('jwk', priv),
        props: [priv.type, pub.type, priv.algorithm, pub.usages],
      };
      const pkcs8 = await crypto.subtle.exportKey('pkcs8', priv);
      const again = await crypto.subtle.importKey('pkcs8', pkcs8, alg, true, ['sign']);
      r.pkcs8RoundTrip = (await crypto.subtle.exportKey('jwk', again)).d === jwk.d;
      const rawPub = await crypto.subtle.importKey('raw', await crypto.subtle.exportKey('raw', pub), alg, true, ['verify']);
      r.rawVerifies = await crypto.subtle.verify({ name: 'ECDSA', hash }, rawPub, sig, data);
      const spkiPub = await crypto.subtle.importKey('spki', await crypto.subtle.exportKey('spki', pub), alg, true, ['verify']);
      r.spkiVerifies = await crypto.subtle.verify({ name: 'ECDSA', hash }, spkiPub, sig, data);
      r.pkcs8 = hex(pkcs8);
      out[jwk.crv] = r;
    }
    const gen = await crypto.subtle.generateKey({ name: 'ECDSA', namedCurve: 'P-256' }, false, ['sign', 'verify']);
    out.generated = [gen.privateKey.extractable, gen.publicKey.extractable, gen.privateKey.usages, gen.publicKey.usages];
    const a = await crypto.subtle.importKey('jwk', p256, { name: 'ECDH', namedCurve: 'P-256' }, false, ['deriveBits']);
    const other = await crypto.subtle.generateKey({ name: 'ECDH', namedCurve: 'P-256' }, true, ['deriveBits']);
    const { d, ...pubJwk } = p256;
    const aPub = await crypto.subtle.importKey('jwk', pubJwk, { name: 'ECDH', namedCurve: 'P-256' }, true, []);
    const s1 = await crypto.subtle.deriveBits({ name: 'ECDH', public: other.publicKey }, a, 256);
    const s2 = await crypto.subtle.deriveBits({ name: 'ECDH', public: aPub }, other.privateKey, 256);
    out.ecdhAgrees = hex(s1) === hex(s2);
    return Response.json(out);
  },
};
