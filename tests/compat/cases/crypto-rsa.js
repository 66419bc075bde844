/* compat
[{"path": "/"}]
*/
// RSA with a fixed key: PKCS#1 v1.5 signatures are deterministic; PSS and
// OAEP are randomised, so those are checked by round trip.
const hex = (buf) => [...new Uint8Array(buf)].map((b) => b.toString(16).padStart(2, '0')).join('');
const jwk = { kty: 'RSA', n: '5okA2lRBdZ1GHMCzG_-qwDydcoHlTo30UVzyrxtjgsRUGIiAxMhldl_DgbseXUc0aqkpq3cU-BYVgAVD3z_ULeoKIVrDuMxM3BoToGSBeLHSj6yfIHGXUNiRcrCVwo5b_2gmha_ld86pVumvZJRnj1z2qZXiON4HpA0pBuCX8YU', e: 'AQAB', d: 'qLH2as2e_QbyaFXmewWSmIuCl2lQODSOZP-EIvkCz40FENLKj7Uo8f9PnF4l8RIK3EYfVPaV5JiccQrpSLN3eiIr58YS96vxxRTiLjhS4gqyVrc7w5Zw2MAK7ifxZtuJMcqGtLRJOqBgfMbw-lRblgZGzTaY8IU6qtOl6QzW7sE', p: '9QjOYfkkEB3FXfV0OygcsgD2vb-mTvRxQkOrNhn9j91LvLp9p606xdgdvCP_2Wt4TkD7qbrHmgVOeXVIxAgjlQ', q: '8NoW2UglP8AHeDyrKcwCbDDtuH2zJTDcY-MUdGqZDRQQ3ogkAlvZdZdpJjYUCaRuSy5H4zpZc5C9J_QjTrwaMQ', dp: 'yURleTYSeCZsAmRmB11ITLHb-jncWggQq7Q3gqXQj4Xe-vNX2Q3CM9XzfqE3Oxg6ZlScImsoHovzTHKYxWRGDQ', dq: '3fVeESd3jGR_fcMLSh2ELgh5SwgsTB3XPQZMF20VVwQi97Em3jWfFctPT7OOi8RJEGe6QCHJxcKhT2yiDTE0QQ', qi: 'VR8i9AGoHZxnmpNBRom6wYDEotSSYEb-cYkgpvq-0GYqOR1D2FBq5UAHwwMJgub7MPaVJjI6ADAcTs7C5UpE6w' };
const spkiB64 = 'MIGfMA0GCSqGSIb3DQEBAQUAA4GNADCBiQKBgQDmiQDaVEF1nUYcwLMb/6rAPJ1ygeVOjfRRXPKvG2OCxFQYiIDEyGV2X8OBux5dRzRqqSmrdxT4FhWABUPfP9Qt6gohWsO4zEzcGhOgZIF4sdKPrJ8gcZdQ2JFysJXCjlv/aCaFr+V3zqlW6a9klGePXPapleI43gekDSkG4JfxhQIDAQAB';
const data = new TextEncoder().encode('a JWT header.payload');

export default {
  async fetch() {
    const out = {};
    const spki = Uint8Array.from(atob(spkiB64), (c) => c.charCodeAt(0));
    for (const hash of ['SHA-1', 'SHA-256', 'SHA-512']) {
      const alg = { name: 'RSASSA-PKCS1-v1_5', hash };
      const priv = await crypto.subtle.importKey('jwk', { ...jwk, alg: undefined }, alg, true, ['sign']);
      const pub = await crypto.subtle.importKey('spki', spki, alg, true, ['verify']);
      const sig = await crypto.subtle.sign('RSASSA-PKCS1-v1_5', priv, data);
      out[`pkcs1 ${hash}`] = [hex(sig), await crypto.subtle.verify('RSASSA-PKCS1-v1_5', pub, sig, data)];
    }
    const pssAlg = { name: 'RSA-PSS', hash: 'SHA-256' };
    const pssPriv = await crypto.subtle.importKey('jwk', jwk, pssAlg, true, ['sign']);
    const pssPub = await crypto.subtle.importKey('spki', spki, pssAlg, true, ['verify']);
    const pssSig = await crypto.subtle.sign({ name: 'RSA-PSS', saltLength: 32 }, pssPriv, data);
    out.pss = [pssSig.byteLength, await crypto.subtle.verify({ name: 'RSA-PSS', saltLength: 32 }, pssPub, pssSig, data)];
    const oaepAlg = { name: 'RSA-OAEP', hash: 'SHA-256' };
    const oaepPub = await crypto.subtle.importKey('spki', spki, oaepAlg, false, ['encrypt']);
    const oaepPriv = await crypto.subtle.importKey('jwk', jwk, oaepAlg, false, ['decrypt']);
    const ct = await crypto.subtle.encrypt({ name: 'RSA-OAEP', label: new Uint8Array([1]) }, oaepPub, data);
    out.oaep = new TextDecoder().decode(await crypto.subtle.decrypt({ name: 'RSA-OAEP', label: new Uint8Array([1]) }, oaepPriv, ct));
    out.algorithm = { ...pssPub.algorithm, publicExponent: [...pssPub.algorithm.publicExponent] };
    const exported = await crypto.subtle.exportKey('jwk', pssPriv);
    out.jwkRoundTrip = ['n', 'e', 'd', 'p', 'q', 'dp', 'dq', 'qi'].every((k) => exported[k] === jwk[k]) && exported.alg;
    out.jwkMembers = Object.keys(exported);
    out.publicJwk = await crypto.subtle.exportKey('jwk', pssPub);
    out.spkiRoundTrip = btoa(String.fromCharCode(...new Uint8Array(await crypto.subtle.exportKey('spki', pssPub)))) === spkiB64;
    // A JWT signer's usual path: a PKCS#8 key (as from a PEM file).
    const pkcs8 = await crypto.subtle.exportKey('pkcs8', pssPriv);
    out.pkcs8 = hex(await crypto.subtle.digest('SHA-256', pkcs8));
    const rs256 = await crypto.subtle.importKey('pkcs8', pkcs8, { name: 'RSASSA-PKCS1-v1_5', hash: 'SHA-256' }, false, ['sign']);
    out.rs256 = hex(await crypto.subtle.sign('RSASSA-PKCS1-v1_5', rs256, data));
    return Response.json(out);
  },
};
