/* compat
[{"path": "/"}]
*/
// Which crypto.subtle operations accept which algorithms (key generation
// and import with minimal parameters; "ok" or the error's name).
// tests/compat/gen-compat-doc.mjs turns the answers into a table.
const hmacKey = { name: 'HMAC', hash: 'SHA-256' };
const generate = {
  HMAC: hmacKey, 'AES-GCM': { name: 'AES-GCM', length: 128 }, 'AES-CBC': { name: 'AES-CBC', length: 128 },
  'AES-CTR': { name: 'AES-CTR', length: 128 }, 'AES-KW': { name: 'AES-KW', length: 128 },
  ECDSA: { name: 'ECDSA', namedCurve: 'P-256' }, ECDH: { name: 'ECDH', namedCurve: 'P-256' },
  Ed25519: { name: 'Ed25519' }, X25519: { name: 'X25519' },
  'RSASSA-PKCS1-v1_5': { name: 'RSASSA-PKCS1-v1_5', modulusLength: 1024, publicExponent: new Uint8Array([1, 0, 1]), hash: 'SHA-256' },
  'RSA-PSS': { name: 'RSA-PSS', modulusLength: 1024, publicExponent: new Uint8Array([1, 0, 1]), hash: 'SHA-256' },
  'RSA-OAEP': { name: 'RSA-OAEP', modulusLength: 1024, publicExponent: new Uint8Array([1, 0, 1]), hash: 'SHA-256' },
};
const usages = {
  HMAC: ['sign', 'verify'], 'AES-GCM': ['encrypt', 'decrypt'], 'AES-CBC': ['encrypt', 'decrypt'],
  'AES-CTR': ['encrypt', 'decrypt'], 'AES-KW': ['wrapKey', 'unwrapKey'], ECDSA: ['sign', 'verify'],
  ECDH: ['deriveBits'], Ed25519: ['sign', 'verify'], X25519: ['deriveBits'], 'RSASSA-PKCS1-v1_5': ['sign', 'verify'],
  'RSA-PSS': ['sign', 'verify'], 'RSA-OAEP': ['encrypt', 'decrypt'],
};

async function outcome(fn) {
  try {
    await fn();
    return 'ok';
  } catch (err) {
    return err.name;
  }
}

export default {
  async fetch() {
    const out = { digest: {}, generateKey: {}, importKey: {} };
    for (const alg of ['SHA-1', 'SHA-256', 'SHA-384', 'SHA-512', 'MD5']) {
      out.digest[alg] = await outcome(() => crypto.subtle.digest(alg, new Uint8Array(1)));
    }
    for (const [name, alg] of Object.entries(generate)) {
      out.generateKey[name] = await outcome(() => crypto.subtle.generateKey(alg, true, usages[name]));
    }
    for (const [name, alg] of [['PBKDF2', 'PBKDF2'], ['HKDF', 'HKDF']]) {
      out.importKey[name] = await outcome(() => crypto.subtle.importKey('raw', new Uint8Array(16), alg, false, ['deriveBits']));
    }
    out.importKey.HMAC = await outcome(() => crypto.subtle.importKey('raw', new Uint8Array(16), hmacKey, false, ['sign']));
    out.importKey['AES-GCM'] = await outcome(() => crypto.subtle.importKey('raw', new Uint8Array(16), 'AES-GCM', false, ['encrypt']));
    return Response.json(out);
  },
};
