// crypto.subtle (Web Cryptography API) and CryptoKey, over the host's
// OpenSSL primitives (native.crypto*, isolate/crypto.cc). The primitives are
// synchronous; every method still answers with a promise, as the standard
// says, and turns every exception into a rejection.
//
// What a key holds (#material):
//   secret keys (HMAC, AES, PBKDF2, HKDF): { bytes }
//   EC / OKP keys (ECDSA, ECDH, Ed25519, X25519): { curve, priv | null, pub }
//   RSA keys: { rsa: [n, e] or [n, e, d, p, q, dp, dq, qi] } (big-endian bytes)
//
// Takes from
//   00-util.js: lazyFragment, isObjectLike, toDOMString, copyBufferSource, kPrivate,
//     defineInterface, registerInspect, toEnforcedUnsignedLongLong, concatBytes, toArrayBuffer,
//     typedArrayKind, utf8Decode, requireArgs, bufferSourceBytes, defineLazyGlobals
//   05-domexception.js: DOMException
//   16-base64.js: btoa, atob
//   18-crypto.js: Crypto

// Evaluated on first use (lazyFragment, 00-util.js); the body is not indented.
const subtleFragment = lazyFragment(() => {
const subtleAlgorithmNames = new Map();
for (const name of ['SHA-1', 'SHA-256', 'SHA-384', 'SHA-512', 'MD5', 'HMAC', 'AES-GCM', 'AES-CBC',
  'AES-CTR', 'AES-KW', 'PBKDF2', 'HKDF', 'ECDSA', 'ECDH', 'Ed25519', 'X25519', 'NODE-ED25519',
  'RSASSA-PKCS1-v1_5', 'RSA-PSS', 'RSA-OAEP']) {
  subtleAlgorithmNames.set(name.toLowerCase(), name);
}

const subtleHashNames = new Set(['SHA-1', 'SHA-256', 'SHA-384', 'SHA-512']);

// The algorithms each operation accepts.
const subtleOperations = {
  digest: new Set(['SHA-1', 'SHA-256', 'SHA-384', 'SHA-512', 'MD5']),
  sign: new Set(['HMAC', 'ECDSA', 'Ed25519', 'NODE-ED25519', 'RSASSA-PKCS1-v1_5', 'RSA-PSS']),
  encrypt: new Set(['AES-GCM', 'AES-CBC', 'AES-CTR', 'RSA-OAEP']),
  wrapKey: new Set(['AES-GCM', 'AES-CBC', 'AES-CTR', 'AES-KW', 'RSA-OAEP']),
  generateKey: new Set(['HMAC', 'AES-GCM', 'AES-CBC', 'AES-CTR', 'AES-KW', 'ECDSA', 'ECDH',
    'Ed25519', 'X25519', 'NODE-ED25519', 'RSASSA-PKCS1-v1_5', 'RSA-PSS', 'RSA-OAEP']),
  importKey: new Set(['HMAC', 'AES-GCM', 'AES-CBC', 'AES-CTR', 'AES-KW', 'PBKDF2', 'HKDF', 'ECDSA',
    'ECDH', 'Ed25519', 'X25519', 'NODE-ED25519', 'RSASSA-PKCS1-v1_5', 'RSA-PSS', 'RSA-OAEP']),
  deriveBits: new Set(['PBKDF2', 'HKDF', 'ECDH', 'X25519']),
};

// Usages a key of each algorithm may have: [secret or private, public].
const subtleUsages = {
  HMAC: [['sign', 'verify'], null],
  'AES-GCM': [['encrypt', 'decrypt', 'wrapKey', 'unwrapKey'], null],
  'AES-CBC': [['encrypt', 'decrypt', 'wrapKey', 'unwrapKey'], null],
  'AES-CTR': [['encrypt', 'decrypt', 'wrapKey', 'unwrapKey'], null],
  'AES-KW': [['wrapKey', 'unwrapKey'], null],
  PBKDF2: [['deriveKey', 'deriveBits'], null],
  HKDF: [['deriveKey', 'deriveBits'], null],
  ECDSA: [['sign'], ['verify']],
  Ed25519: [['sign'], ['verify']],
  'NODE-ED25519': [['sign'], ['verify']],
  'RSASSA-PKCS1-v1_5': [['sign'], ['verify']],
  'RSA-PSS': [['sign'], ['verify']],
  ECDH: [['deriveKey', 'deriveBits'], []],
  X25519: [['deriveKey', 'deriveBits'], []],
  'RSA-OAEP': [['decrypt', 'unwrapKey'], ['encrypt', 'wrapKey']],
};

const allKeyUsages = new Set(['encrypt', 'decrypt', 'sign', 'verify', 'deriveKey', 'deriveBits',
  'wrapKey', 'unwrapKey']);

function notSupported(what) {
  return new DOMException(`Unrecognized or unimplemented ${what}.`, 'NotSupportedError');
}

function dataError(message) {
  return new DOMException(message, 'DataError');
}

function operationError(message) {
  return new DOMException(message, 'OperationError');
}

function invalidAccess(message) {
  return new DOMException(message, 'InvalidAccessError');
}

// AlgorithmIdentifier -> {name, params}; params is the caller's dictionary.
function normalizeAlgorithm(algorithm, op) {
  let params = algorithm;
  if (typeof algorithm === 'string') {
    params = { name: algorithm };
  } else if (!isObjectLike(algorithm)) {
    throw new TypeError('Algorithm must be a string or an object with a name.');
  }
  if (params.name === undefined) throw new TypeError('Algorithm: the "name" member is required.');
  const name = subtleAlgorithmNames.get(toDOMString(params.name).toLowerCase());
  if (name === undefined || !subtleOperations[op].has(name)) {
    throw notSupported(`algorithm "${toDOMString(params.name)}" for ${op}`);
  }
  return { name, params };
}

function normalizeHash(hash, what = 'hash') {
  if (hash === undefined) throw new TypeError(`Algorithm: the "${what}" member is required.`);
  const name = typeof hash === 'string' ? hash : isObjectLike(hash) ? hash.name : undefined;
  const canonical = name === undefined ? undefined : subtleAlgorithmNames.get(`${name}`.toLowerCase());
  if (!subtleHashNames.has(canonical)) throw notSupported(`hash "${name}"`);
  return canonical;
}

function requireBytes(v, what) {
  const bytes = copyBufferSource(v);
  if (bytes === null) throw new TypeError(`${what} must be an ArrayBuffer or an ArrayBufferView.`);
  return bytes;
}

function optionalBytes(v, what) {
  return v === undefined ? null : requireBytes(v, what);
}

function hashBlockBits(hash) {
  return hash === 'SHA-384' || hash === 'SHA-512' ? 1024 : 512;
}

function hashBits(hash) {
  return { 'SHA-1': 160, 'SHA-256': 256, 'SHA-384': 384, 'SHA-512': 512 }[hash];
}

// base64url without padding (RFC 7515), for JWK members.
function base64urlEncode(u8) {
  let s = '';
  for (let i = 0; i < u8.length; i += 8192) {
    s += String.fromCharCode.apply(null, u8.subarray(i, Math.min(u8.length, i + 8192)));
  }
  return btoa(s).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

function base64urlDecode(s, member) {
  if (typeof s !== 'string' || /[^A-Za-z0-9_-]/.test(s)) {
    throw dataError(`The JWK member "${member}" is not base64url.`);
  }
  let bin;
  try {
    bin = atob(s.replace(/-/g, '+').replace(/_/g, '/'));
  } catch {
    throw dataError(`The JWK member "${member}" is not base64url.`);
  }
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

// CryptoKey -----------------------------------------------------------------

let cryptoKeyNew;      // (type, extractable, algorithm, usages, material) -> CryptoKey
let cryptoKeyMaterial; // (key) -> material
let isCryptoKey;       // (v) -> boolean

class CryptoKey {
  #type;
  #extractable;
  #algorithm;
  #usages;
  #material;

  constructor(key) {
    if (key !== kPrivate) throw new TypeError('Illegal constructor');
  }

  get type() {
    return this.#type;
  }

  get extractable() {
    return this.#extractable;
  }

  get algorithm() {
    return this.#algorithm;
  }

  get usages() {
    return this.#usages;
  }

  static {
    cryptoKeyNew = (type, extractable, algorithm, usages, material) => {
      const k = new CryptoKey(kPrivate);
      k.#type = type;
      k.#extractable = extractable;
      k.#algorithm = algorithm;
      k.#usages = usages;
      k.#material = material;
      return k;
    };
    cryptoKeyMaterial = (k) => k.#material;
    isCryptoKey = (v) => isObjectLike(v) && #material in v;
  }
}
defineInterface(CryptoKey, 'CryptoKey');
registerInspect(CryptoKey, (k) => ({
  type: k.type, extractable: k.extractable, algorithm: k.algorithm, usages: k.usages,
}));

// sequence<KeyUsage>: read once, each entry a valid usage.
function usageList(usages) {
  if (!isObjectLike(usages) || typeof usages[Symbol.iterator] !== 'function') {
    throw new TypeError('keyUsages must be a sequence of strings.');
  }
  const out = [];
  for (const u of usages) {
    const s = toDOMString(u);
    if (!allKeyUsages.has(s)) throw new TypeError(`'${s}' is not a valid key usage.`);
    out.push(s);
  }
  return out;
}

// The usages a new key gets: checked against what its algorithm and type
// allow (SyntaxError otherwise), deduplicated, in the standard's order.
function keyUsages(usages, algName, type) {
  const [privateOrSecret, pub] = subtleUsages[algName];
  const allowed = type === 'public' ? pub : privateOrSecret;
  const asked = new Set();
  for (const s of usages) {
    if (!allowed.includes(s)) {
      throw new DOMException(`Usage '${s}' is not valid for a ${type} ${algName} key.`, 'SyntaxError');
    }
    asked.add(s);
  }
  const out = [];
  for (const u of allKeyUsages) if (asked.has(u)) out.push(u);
  return out;
}

function newKey(type, extractable, algorithm, usages, material) {
  if (usages.length === 0 && type !== 'public') {
    throw new DOMException(`A ${type} key needs at least one usage.`, 'SyntaxError');
  }
  return cryptoKeyNew(type, !!extractable, Object.freeze(algorithm), Object.freeze(usages), material);
}

function checkKey(key, algName, usage) {
  if (!isCryptoKey(key)) throw new TypeError('The key is not a CryptoKey.');
  const keyAlg = key.algorithm.name;
  const same = keyAlg === algName || (keyAlg === 'NODE-ED25519' && algName === 'Ed25519') ||
    (keyAlg === 'Ed25519' && algName === 'NODE-ED25519');
  if (!same) {
    throw invalidAccess(`The requested operation is not valid for the provided key (a ${keyAlg} key, not ${algName}).`);
  }
  if (usage !== null && !key.usages.includes(usage)) {
    throw invalidAccess(`The key does not allow '${usage}'.`);
  }
  return cryptoKeyMaterial(key);
}

// Runs a native primitive; its plain Error becomes an OperationError.
function primitive(fn, ...args) {
  try {
    return fn(...args);
  } catch (err) {
    if (err instanceof RangeError || err instanceof TypeError) throw err;
    throw operationError(isObjectLike(err) ? `${err.message}` : 'The operation failed.');
  }
}

// Key import --------------------------------------------------------------

const ecCurves = new Set(['P-256', 'P-384', 'P-521']);
const okpAlgorithms = { Ed25519: 'Ed25519', 'NODE-ED25519': 'Ed25519', X25519: 'X25519' };
const rsaAlgorithms = new Set(['RSASSA-PKCS1-v1_5', 'RSA-PSS', 'RSA-OAEP']);

function jwkCheckCommon(jwk, kty, usages, extractable) {
  if (!isObjectLike(jwk)) throw new TypeError('A JWK must be an object.');
  if (jwk.kty !== kty) throw dataError(`The JWK "kty" member must be "${kty}".`);
  if (jwk.use !== undefined && usages.length > 0) {
    const want = usages.every((u) => u === 'encrypt' || u === 'decrypt' || u === 'wrapKey' ||
      u === 'unwrapKey') ? 'enc' : 'sig';
    if (jwk.use !== want) throw dataError(`The JWK "use" member must be "${want}".`);
  }
  if (jwk.key_ops !== undefined) {
    if (!Array.isArray(jwk.key_ops)) throw dataError('The JWK "key_ops" member must be an array.');
    for (const u of usages) {
      if (!jwk.key_ops.includes(u)) throw dataError(`The JWK "key_ops" member does not allow '${u}'.`);
    }
  }
  if (jwk.ext === false && extractable) throw dataError('The JWK is not extractable.');
}

function secretBytesFrom(format, keyData, usages, extractable, jwkAlg) {
  if (format === 'raw') return requireBytes(keyData, 'keyData');
  if (format === 'jwk') {
    jwkCheckCommon(keyData, 'oct', usages, extractable);
    const bytes = base64urlDecode(keyData.k, 'k');
    if (keyData.alg !== undefined && jwkAlg !== null && keyData.alg !== jwkAlg(bytes.length)) {
      throw dataError(`The JWK "alg" member must be "${jwkAlg(bytes.length)}".`);
    }
    return bytes;
  }
  throw notSupported(`key format "${format}" for this algorithm`);
}

const hmacJwkAlg = { 'SHA-1': 'HS1', 'SHA-256': 'HS256', 'SHA-384': 'HS384', 'SHA-512': 'HS512' };
const aesJwkSuffix = { 'AES-GCM': 'GCM', 'AES-CBC': 'CBC', 'AES-CTR': 'CTR', 'AES-KW': 'KW' };

function importSecret(format, keyData, alg, extractable, usagesIn) {
  const name = alg.name;
  const usages = keyUsages(usagesIn, name, 'secret');
  if (name === 'HMAC') {
    const hash = normalizeHash(alg.params.hash);
    const bytes = secretBytesFrom(format, keyData, usages, extractable, () => hmacJwkAlg[hash]);
    if (bytes.length === 0) throw dataError('An HMAC key cannot be empty.');
    let length = bytes.length * 8;
    if (alg.params.length !== undefined) {
      length = toEnforcedUnsignedLongLong(alg.params.length, 'length');
      if (length > bytes.length * 8 || length <= bytes.length * 8 - 8) {
        throw dataError('The HMAC key length does not match the key data.');
      }
    }
    return newKey('secret', extractable, { name, hash: { name: hash }, length }, usages, { bytes });
  }
  if (name === 'PBKDF2' || name === 'HKDF') {
    if (format !== 'raw') throw notSupported(`key format "${format}" for ${name}`);
    if (extractable) throw new DOMException(`${name} keys cannot be extractable.`, 'SyntaxError');
    return newKey('secret', false, { name }, usages, { bytes: requireBytes(keyData, 'keyData') });
  }
  const bytes = secretBytesFrom(format, keyData, usages, extractable,
    (n) => `A${n * 8}${aesJwkSuffix[name]}`);
  if (bytes.length !== 16 && bytes.length !== 24 && bytes.length !== 32) {
    throw dataError('AES keys must be 128, 192 or 256 bits long.');
  }
  return newKey('secret', extractable, { name, length: bytes.length * 8 }, usages, { bytes });
}

function importCurveKey(format, keyData, alg, extractable, usagesIn) {
  const name = alg.name;
  let curve;
  let algorithm;
  if (name === 'ECDSA' || name === 'ECDH') {
    const nc = alg.params.namedCurve;
    if (nc === undefined) throw new TypeError('Algorithm: the "namedCurve" member is required.');
    curve = `${nc}`;
    if (!ecCurves.has(curve)) throw notSupported(`curve "${curve}"`);
    algorithm = { name, namedCurve: curve };
  } else {
    curve = okpAlgorithms[name];
    algorithm = name === 'NODE-ED25519' ? { name, namedCurve: 'NODE-ED25519' } : { name };
  }
  let parts;
  let type;
  const native_ = (fmt, data, extra) => {
    try {
      return native.cryptoKeyImport(curve, fmt, data, extra);
    } catch (err) {
      if (err instanceof RangeError) throw err;
      throw dataError(`Invalid ${fmt === 'private' ? 'JWK' : fmt} key data for ${curve}.`);
    }
  };
  if (format === 'raw' || format === 'spki' || format === 'pkcs8') {
    type = format === 'pkcs8' ? 'private' : 'public';
    parts = native_(format, requireBytes(keyData, 'keyData'), null);
  } else if (format === 'jwk') {
    const isEc = ecCurves.has(curve);
    jwkCheckCommon(keyData, isEc ? 'EC' : 'OKP', usagesIn, extractable);
    if (keyData.crv !== curve) throw dataError(`The JWK "crv" member must be "${curve}".`);
    const x = base64urlDecode(keyData.x, 'x');
    let pub = x;
    if (isEc) {
      const y = base64urlDecode(keyData.y, 'y');
      pub = concatBytes([new Uint8Array([4]), x, y]);
    }
    if (keyData.d !== undefined) {
      type = 'private';
      parts = native_('private', base64urlDecode(keyData.d, 'd'), pub);
    } else {
      type = 'public';
      parts = native_('raw', pub, null);
    }
  } else {
    throw notSupported(`key format "${format}"`);
  }
  const usages = keyUsages(usagesIn, name, type);
  return newKey(type, extractable, algorithm, usages, { curve, priv: parts[0], pub: parts[1] });
}

const rsaJwkAlgs = {
  'RSASSA-PKCS1-v1_5': { 'SHA-1': 'RS1', 'SHA-256': 'RS256', 'SHA-384': 'RS384', 'SHA-512': 'RS512' },
  'RSA-PSS': { 'SHA-1': 'PS1', 'SHA-256': 'PS256', 'SHA-384': 'PS384', 'SHA-512': 'PS512' },
  'RSA-OAEP': { 'SHA-1': 'RSA-OAEP', 'SHA-256': 'RSA-OAEP-256', 'SHA-384': 'RSA-OAEP-384', 'SHA-512': 'RSA-OAEP-512' },
};

function rsaAlgorithm(name, hash, n, e) {
  return { name, modulusLength: n.length * 8 - Math.clz32(n[0]) + 24, publicExponent: e, hash: { name: hash } };
}

function importRsaKey(format, keyData, alg, extractable, usagesIn) {
  const name = alg.name;
  const hash = normalizeHash(alg.params.hash);
  let parts;
  let type;
  const call = (fmt, data) => {
    try {
      return native.cryptoRsaImport(fmt, data);
    } catch (err) {
      if (err instanceof RangeError) throw err;
      throw dataError('Invalid RSA key data.');
    }
  };
  if (format === 'spki' || format === 'pkcs8') {
    type = format === 'pkcs8' ? 'private' : 'public';
    parts = call(format, requireBytes(keyData, 'keyData'));
  } else if (format === 'jwk') {
    jwkCheckCommon(keyData, 'RSA', usagesIn, extractable);
    const want = rsaJwkAlgs[name][hash];
    if (keyData.alg !== undefined && keyData.alg !== want) {
      throw dataError(`The JWK "alg" member must be "${want}".`);
    }
    const members = keyData.d === undefined ? ['n', 'e'] : ['n', 'e', 'd', 'p', 'q', 'dp', 'dq', 'qi'];
    type = keyData.d === undefined ? 'public' : 'private';
    parts = call('jwk', members.map((m) => base64urlDecode(keyData[m], m)));
  } else {
    throw notSupported(`key format "${format}" for ${name}`);
  }
  const usages = keyUsages(usagesIn, name, type);
  return newKey(type, extractable, rsaAlgorithm(name, hash, parts[0], parts[1]), usages, { rsa: parts });
}

function importKeyNow(format, keyData, algorithm, extractable, usagesArg) {
  const usages = usageList(usagesArg);
  format = toDOMString(format);
  if (!['raw', 'spki', 'pkcs8', 'jwk'].includes(format)) throw notSupported(`key format "${format}"`);
  const alg = normalizeAlgorithm(algorithm, 'importKey');
  const name = alg.name;
  if (subtleUsages[name][1] === null) return importSecret(format, keyData, alg, extractable, usages);
  if (rsaAlgorithms.has(name)) return importRsaKey(format, keyData, alg, extractable, usages);
  return importCurveKey(format, keyData, alg, extractable, usages);
}

// Key export ----------------------------------------------------------------

// Members in the order the Workers runtime writes them.
function jwkBase(key, kty, alg = undefined) {
  const jwk = { kty, key_ops: [...key.usages] };
  if (alg !== undefined) jwk.alg = alg;
  jwk.ext = key.extractable;
  return jwk;
}

function exportKeyNow(format, key) {
  format = toDOMString(format);
  if (!isCryptoKey(key)) throw new TypeError('The key is not a CryptoKey.');
  if (!key.extractable) throw invalidAccess('The key is not extractable.');
  const m = cryptoKeyMaterial(key);
  const alg = key.algorithm;
  const name = alg.name;
  if (m.bytes !== undefined) {
    if (format === 'raw') return toArrayBuffer(m.bytes);
    if (format === 'jwk') {
      const jwk = jwkBase(key, 'oct', name === 'HMAC' ? hmacJwkAlg[alg.hash.name]
        : `A${m.bytes.length * 8}${aesJwkSuffix[name]}`);
      jwk.k = base64urlEncode(m.bytes);
      return jwk;
    }
    throw notSupported(`export format "${format}" for ${name}`);
  }
  if (m.rsa !== undefined) {
    if (format === 'spki' || format === 'pkcs8') {
      if ((format === 'spki') !== (key.type === 'public')) {
        throw invalidAccess(`A ${key.type} key does not export as ${format}.`);
      }
      return toArrayBuffer(primitive(native.cryptoRsaExport, format, m.rsa));
    }
    if (format === 'jwk') {
      const jwk = jwkBase(key, 'RSA', rsaJwkAlgs[name][alg.hash.name]);
      // d first, as the Workers runtime writes a private key.
      if (m.rsa.length === 8) jwk.d = base64urlEncode(m.rsa[2]);
      jwk.n = base64urlEncode(m.rsa[0]);
      jwk.e = base64urlEncode(m.rsa[1]);
      const members = ['n', 'e', 'd', 'p', 'q', 'dp', 'dq', 'qi'];
      for (let i = 3; i < m.rsa.length; i++) jwk[members[i]] = base64urlEncode(m.rsa[i]);
      return jwk;
    }
    throw notSupported(`export format "${format}" for ${name}`);
  }
  const isEc = ecCurves.has(m.curve);
  if (format === 'raw') {
    if (key.type !== 'public') throw invalidAccess('Only a public key exports as raw.');
    return toArrayBuffer(m.pub);
  }
  if (format === 'spki' || format === 'pkcs8') {
    if ((format === 'spki') !== (key.type === 'public')) {
      throw invalidAccess(`A ${key.type} key does not export as ${format}.`);
    }
    return toArrayBuffer(primitive(native.cryptoKeyExport, m.curve, format, m.priv, m.pub));
  }
  if (format === 'jwk') {
    const jwk = jwkBase(key, isEc ? 'EC' : 'OKP', m.curve === 'Ed25519' ? 'EdDSA' : undefined);
    jwk.crv = m.curve;
    if (isEc) {
      const size = (m.pub.length - 1) / 2;
      jwk.x = base64urlEncode(m.pub.subarray(1, 1 + size));
      jwk.y = base64urlEncode(m.pub.subarray(1 + size));
    } else {
      jwk.x = base64urlEncode(m.pub);
    }
    if (key.type === 'private') jwk.d = base64urlEncode(m.priv);
    return jwk;
  }
  throw notSupported(`export format "${format}"`);
}

// Key generation --------------------------------------------------------------

function generateKeyNow(algorithm, extractable, usagesArg) {
  const usagesIn = usageList(usagesArg);
  const alg = normalizeAlgorithm(algorithm, 'generateKey');
  const name = alg.name;
  const p = alg.params;
  if (name === 'HMAC') {
    const hash = normalizeHash(p.hash);
    let length = hashBlockBits(hash);
    if (p.length !== undefined) {
      length = toEnforcedUnsignedLongLong(p.length, 'length');
      if (length === 0) throw operationError('The HMAC key length must not be zero.');
    }
    const usages = keyUsages(usagesIn, name, 'secret');
    const bytes = randomKeyBytes(Math.ceil(length / 8));
    return newKey('secret', extractable, { name, hash: { name: hash }, length }, usages, { bytes });
  }
  if (name.startsWith('AES-')) {
    const length = p.length === undefined ? undefined : Number(p.length);
    if (length !== 128 && length !== 192 && length !== 256) {
      throw operationError('AES key length must be 128, 192 or 256 bits.');
    }
    const usages = keyUsages(usagesIn, name, 'secret');
    return newKey('secret', extractable, { name, length }, usages, { bytes: randomKeyBytes(length / 8) });
  }
  let privAlg;
  let pubAlg;
  let privMaterial;
  let pubMaterial;
  if (rsaAlgorithms.has(name)) {
    const hash = normalizeHash(p.hash);
    const bits = toEnforcedUnsignedLongLong(p.modulusLength, 'modulusLength');
    const exp = p.publicExponent;
    if (!ArrayBuffer.isView(exp) || typedArrayKind.call(exp) !== 'Uint8Array') {
      throw new TypeError('publicExponent must be a Uint8Array.');
    }
    let expBytes = exp.slice();
    while (expBytes.length > 1 && expBytes[0] === 0) expBytes = expBytes.subarray(1);
    const e = expBytes.length <= 4 ? expBytes.reduce((acc, b) => acc * 256 + b, 0) : 0;
    if (e !== 3 && e !== 65537) throw operationError('The public exponent must be 3 or 65537.');
    if (bits < 1024 || bits > rsaMaxModulusBits || bits % 8 !== 0) {
      throw operationError(`The modulus length must be a multiple of 8 from 1024 to ${rsaMaxModulusBits}.`);
    }
    const parts = primitive(native.cryptoRsaGenerate, bits, expBytes);
    privAlg = rsaAlgorithm(name, hash, parts[0], parts[1]);
    pubAlg = rsaAlgorithm(name, hash, parts[0], parts[1]);
    privMaterial = { rsa: parts };
    pubMaterial = { rsa: parts.slice(0, 2) };
  } else {
    let curve;
    if (name === 'ECDSA' || name === 'ECDH') {
      curve = p.namedCurve === undefined ? undefined : `${p.namedCurve}`;
      if (curve === undefined) throw new TypeError('Algorithm: the "namedCurve" member is required.');
      if (!ecCurves.has(curve)) throw notSupported(`curve "${curve}"`);
      privAlg = { name, namedCurve: curve };
      pubAlg = { name, namedCurve: curve };
    } else {
      curve = okpAlgorithms[name];
      privAlg = name === 'NODE-ED25519' ? { name, namedCurve: 'NODE-ED25519' } : { name };
      pubAlg = { ...privAlg };
    }
    const [priv, pub] = primitive(native.cryptoKeyGenerate, curve);
    privMaterial = { curve, priv, pub };
    pubMaterial = { curve, priv: null, pub };
  }
  const asked = usagesIn;
  for (const u of asked) {
    const [a, b] = subtleUsages[name];
    if (!a.includes(u) && !b.includes(u)) {
      throw new DOMException(`Usage '${u}' is not valid for ${name} keys.`, 'SyntaxError');
    }
  }
  const privUsages = keyUsages(asked.filter((u) => subtleUsages[name][0].includes(u)), name, 'private');
  const pubUsages = keyUsages(asked.filter((u) => subtleUsages[name][1].includes(u)), name, 'public');
  const privateKey = newKey('private', extractable, privAlg, privUsages, privMaterial);
  const publicKey = newKey('public', true, pubAlg, pubUsages, pubMaterial);
  return { publicKey, privateKey };
}

function randomKeyBytes(n) {
  const out = new Uint8Array(n);
  for (let at = 0; at < n; at += 65536) native.randomFill(out.subarray(at, Math.min(n, at + 65536)));
  return out;
}

// Operations --------------------------------------------------------------

const gcmTagLengths = new Set([32, 64, 96, 104, 112, 120, 128]);

// Work a single native call does cannot be interrupted by the CPU limit's
// watchdog: these bound it.
const pbkdf2MaxIterations = 100000;
const rsaMaxModulusBits = 4096;

// AES-CTR with a counter of `length` bits: OpenSSL counts with all 128 bits,
// so the data is cut where the low `length` bits would wrap around.
function aesCtr(key, counter, length, data) {
  if (counter.length !== 16) throw operationError('The AES-CTR counter must be 16 bytes long.');
  if (!(length >= 1 && length <= 128)) throw operationError('The AES-CTR length must be between 1 and 128.');
  if (length >= 64) return primitive(native.cryptoAes, 'AES-CTR', true, key, counter, data, null, 0);
  let ctr = 0n;
  for (let i = 8; i < 16; i++) ctr = (ctr << 8n) | BigInt(counter[i]);
  const mask = (1n << BigInt(length)) - 1n;
  const blocksToWrap = Number(mask - (ctr & mask) + 1n);
  if (data.length <= blocksToWrap * 16) {
    return primitive(native.cryptoAes, 'AES-CTR', true, key, counter, data, null, 0);
  }
  const first = primitive(native.cryptoAes, 'AES-CTR', true, key, counter,
    data.subarray(0, blocksToWrap * 16), null, 0);
  const wrapped = counter.slice();
  let low = ctr & ~mask;
  for (let i = 15; i >= 8; i--) {
    wrapped[i] = Number(low & 0xffn);
    low >>= 8n;
  }
  return concatBytes([first, aesCtr(key, wrapped, length, data.subarray(blocksToWrap * 16))]);
}

function cipherNow(encrypt, algorithm, key, data, op) {
  const alg = normalizeAlgorithm(algorithm, op === 'wrapKey' || op === 'unwrapKey' ? 'wrapKey' : 'encrypt');
  const m = checkKey(key, alg.name, op);
  const p = alg.params;
  switch (alg.name) {
    case 'AES-GCM': {
      const iv = requireBytes(p.iv, 'iv');
      const tagLength = p.tagLength === undefined ? 128 : Number(p.tagLength);
      if (!gcmTagLengths.has(tagLength)) throw operationError(`${tagLength} is not a valid AES-GCM tag length.`);
      if (iv.length === 0) throw operationError('The AES-GCM iv must not be empty.');
      return primitive(native.cryptoAes, 'AES-GCM', encrypt, m.bytes, iv, data,
        optionalBytes(p.additionalData, 'additionalData'), tagLength / 8);
    }
    case 'AES-CBC': {
      const iv = requireBytes(p.iv, 'iv');
      if (iv.length !== 16) throw operationError('The AES-CBC iv must be 16 bytes long.');
      return primitive(native.cryptoAes, 'AES-CBC', encrypt, m.bytes, iv, data, null, 0);
    }
    case 'AES-CTR':
      return aesCtr(m.bytes, requireBytes(p.counter, 'counter'), Number(p.length), data);
    case 'AES-KW':
      if (data.length % 8 !== 0 || data.length < (encrypt ? 16 : 24)) {
        throw operationError('AES-KW data must be a multiple of 8 bytes and at least 16 bytes long.');
      }
      return primitive(native.cryptoAes, 'AES-KW', encrypt, m.bytes, null, data, null, 0);
    default: { // RSA-OAEP
      if (encrypt !== (key.type === 'public')) {
        throw invalidAccess(`RSA-OAEP ${encrypt ? 'encrypts with a public' : 'decrypts with a private'} key.`);
      }
      return primitive(native.cryptoRsaOaep, encrypt, key.algorithm.hash.name, m.rsa, data,
        optionalBytes(p.label, 'label'));
    }
  }
}

function signNow(algorithm, key, data, signature) {
  const verify = signature !== undefined;
  const alg = normalizeAlgorithm(algorithm, 'sign');
  const m = checkKey(key, alg.name, verify ? 'verify' : 'sign');
  const name = alg.name;
  if (name === 'HMAC') {
    const mac = primitive(native.cryptoHmac, key.algorithm.hash.name, m.bytes, data);
    return verify ? native.cryptoTimingSafeEqual(mac, signature) : mac;
  }
  if (rsaAlgorithms.has(name)) {
    const pss = name === 'RSA-PSS';
    const salt = pss ? toEnforcedUnsignedLongLong(alg.params.saltLength, 'saltLength') : 0;
    const hash = key.algorithm.hash.name;
    if (verify) {
      return primitive(native.cryptoRsaVerify, pss ? 'pss' : 'pkcs1', hash, m.rsa, signature, data, salt);
    }
    return primitive(native.cryptoRsaSign, pss ? 'pss' : 'pkcs1', hash, m.rsa, data, salt);
  }
  const hash = name === 'ECDSA' ? normalizeHash(alg.params.hash) : null;
  if (verify) {
    if (key.type !== 'public') throw invalidAccess('Verifying needs a public key.');
    return primitive(native.cryptoVerify, m.curve, hash, m.pub, signature, data);
  }
  if (key.type !== 'private') throw invalidAccess('Signing needs a private key.');
  return primitive(native.cryptoSign, m.curve, hash, m.priv, m.pub, data);
}

// deriveBits; `length` null means "all the bits there are" (ECDH, X25519).
function deriveBitsNow(algorithm, baseKey, length, usage) {
  const alg = normalizeAlgorithm(algorithm, 'deriveBits');
  const m = checkKey(baseKey, alg.name, usage);
  const p = alg.params;
  if (alg.name === 'PBKDF2' || alg.name === 'HKDF') {
    if (length === null) throw operationError(`${alg.name} needs a length.`);
    if (length % 8 !== 0) throw operationError('The length must be a multiple of 8.');
    const hash = normalizeHash(p.hash);
    const salt = requireBytes(p.salt, 'salt');
    if (alg.name === 'PBKDF2') {
      const iterations = toEnforcedUnsignedLongLong(p.iterations, 'iterations');
      if (iterations === 0) throw operationError('PBKDF2 needs at least one iteration.');
      // One native call the CPU limit cannot cut short: bounded, as in workerd.
      if (iterations > pbkdf2MaxIterations) {
        throw new DOMException(`PBKDF2 iteration counts above ${pbkdf2MaxIterations} are not supported.`, 'NotSupportedError');
      }
      if (length === 0) return new Uint8Array(0);
      return primitive(native.cryptoPbkdf2, hash, m.bytes, salt, iterations, length / 8);
    }
    const info = requireBytes(p.info, 'info');
    if (length === 0) return new Uint8Array(0);
    if (length > 255 * hashBits(hash)) throw operationError('The HKDF length is too large.');
    return primitive(native.cryptoHkdf, hash, m.bytes, salt, info, length / 8);
  }
  // ECDH, X25519
  const peer = p.public;
  if (!isCryptoKey(peer)) throw new TypeError('Algorithm: the "public" member must be a CryptoKey.');
  if (peer.type !== 'public') throw invalidAccess('The "public" member must be a public key.');
  if (baseKey.type !== 'private') throw invalidAccess('Key agreement needs a private base key.');
  const pm = cryptoKeyMaterial(peer);
  if (peer.algorithm.name !== alg.name || pm.curve !== m.curve) {
    throw invalidAccess('The public key is not of the same algorithm and curve.');
  }
  const secret = primitive(native.cryptoDerive, m.curve, m.priv, m.pub, pm.pub);
  if (length === null) return secret;
  if (length > secret.length * 8) throw operationError('The length is larger than the shared secret.');
  const out = secret.slice(0, Math.ceil(length / 8));
  if (length % 8 !== 0) out[out.length - 1] &= 0xff << (8 - (length % 8));
  return out;
}

// The length in bits deriveKey derives for a key of `algorithm`.
function derivedKeyLength(algorithm) {
  const alg = normalizeAlgorithm(algorithm, 'importKey');
  const p = alg.params;
  if (alg.name.startsWith('AES-')) {
    const length = Number(p.length);
    if (length !== 128 && length !== 192 && length !== 256) {
      throw operationError('AES key length must be 128, 192 or 256 bits.');
    }
    return length;
  }
  if (alg.name === 'HMAC') {
    const hash = normalizeHash(p.hash);
    if (p.length === undefined) return hashBlockBits(hash);
    const length = toEnforcedUnsignedLongLong(p.length, 'length');
    if (length === 0) throw new TypeError('The HMAC key length must not be zero.');
    return length;
  }
  if (alg.name === 'HKDF' || alg.name === 'PBKDF2') return null;
  throw notSupported(`algorithm "${alg.name}" for deriveKey`);
}

function digestNow(algorithm, data) {
  const alg = normalizeAlgorithm(algorithm, 'digest');
  return native.cryptoDigest(alg.name, requireBytes(data, 'data'));
}

function keyFromJwkBytes(format, bytes) {
  if (format !== 'jwk') return bytes;
  try {
    return JSON.parse(utf8Decode(bytes));
  } catch {
    throw dataError('The unwrapped key is not a JSON Web Key.');
  }
}

class SubtleCrypto {
  constructor(key) {
    if (key !== kPrivate) throw new TypeError('Illegal constructor');
  }

  async digest(algorithm, data) {
    requireArgs(arguments.length, 2, 'digest', 'SubtleCrypto');
    return digestNow(algorithm, data).buffer;
  }

  async encrypt(algorithm, key, data) {
    requireArgs(arguments.length, 3, 'encrypt', 'SubtleCrypto');
    return cipherNow(true, algorithm, key, requireBytes(data, 'data'), 'encrypt').buffer;
  }

  async decrypt(algorithm, key, data) {
    requireArgs(arguments.length, 3, 'decrypt', 'SubtleCrypto');
    return cipherNow(false, algorithm, key, requireBytes(data, 'data'), 'decrypt').buffer;
  }

  async sign(algorithm, key, data) {
    requireArgs(arguments.length, 3, 'sign', 'SubtleCrypto');
    return signNow(algorithm, key, requireBytes(data, 'data')).buffer;
  }

  async verify(algorithm, key, signature, data) {
    requireArgs(arguments.length, 4, 'verify', 'SubtleCrypto');
    return signNow(algorithm, key, requireBytes(data, 'data'), requireBytes(signature, 'signature'));
  }

  async generateKey(algorithm, extractable, keyUsages) {
    requireArgs(arguments.length, 3, 'generateKey', 'SubtleCrypto');
    return generateKeyNow(algorithm, !!extractable, keyUsages);
  }

  async importKey(format, keyData, algorithm, extractable, keyUsages) {
    requireArgs(arguments.length, 5, 'importKey', 'SubtleCrypto');
    return importKeyNow(format, keyData, algorithm, !!extractable, keyUsages);
  }

  async exportKey(format, key) {
    requireArgs(arguments.length, 2, 'exportKey', 'SubtleCrypto');
    return exportKeyNow(format, key);
  }

  async deriveBits(algorithm, baseKey, length = null) {
    requireArgs(arguments.length, 2, 'deriveBits', 'SubtleCrypto');
    const bits = length === null || length === undefined ? null
      : toEnforcedUnsignedLongLong(length, 'length');
    return deriveBitsNow(algorithm, baseKey, bits, 'deriveBits').buffer;
  }

  async deriveKey(algorithm, baseKey, derivedKeyType, extractable, keyUsages) {
    requireArgs(arguments.length, 5, 'deriveKey', 'SubtleCrypto');
    const length = derivedKeyLength(derivedKeyType);
    const bits = deriveBitsNow(algorithm, baseKey, length, 'deriveKey');
    return importKeyNow('raw', bits, derivedKeyType, !!extractable, keyUsages);
  }

  async wrapKey(format, key, wrappingKey, wrapAlgorithm) {
    requireArgs(arguments.length, 4, 'wrapKey', 'SubtleCrypto');
    const exported = exportKeyNow(format, key);
    const bytes = toDOMString(format) === 'jwk'
      ? native.utf8Encode(JSON.stringify(exported)) : new Uint8Array(exported);
    return cipherNow(true, wrapAlgorithm, wrappingKey, bytes, 'wrapKey').buffer;
  }

  async unwrapKey(format, wrappedKey, unwrappingKey, unwrapAlgorithm, unwrappedKeyAlgorithm,
    extractable, keyUsages) {
    requireArgs(arguments.length, 7, 'unwrapKey', 'SubtleCrypto');
    const bytes = cipherNow(false, unwrapAlgorithm, unwrappingKey,
      requireBytes(wrappedKey, 'wrappedKey'), 'unwrapKey');
    return importKeyNow(format, keyFromJwkBytes(toDOMString(format), bytes), unwrappedKeyAlgorithm,
      !!extractable, keyUsages);
  }

  // Not in the standard; the Workers runtime has it.
  timingSafeEqual(a, b) {
    requireArgs(arguments.length, 2, 'timingSafeEqual', 'SubtleCrypto');
    const x = bufferSourceBytes(a);
    const y = bufferSourceBytes(b);
    if (x === null || y === null) throw new TypeError('timingSafeEqual() takes two BufferSources.');
    if (x.length !== y.length) throw new RangeError('Input buffers must have the same byte length.');
    return native.cryptoTimingSafeEqual(x, y);
  }
}
defineInterface(SubtleCrypto, 'SubtleCrypto');

return { SubtleCrypto, CryptoKey, subtle: new SubtleCrypto(kPrivate), normalizeAlgorithm };
});

Object.defineProperty(Crypto.prototype, 'subtle', {
  get: Object.getOwnPropertyDescriptor({ get subtle() { return subtleFragment().subtle; } }, 'subtle').get,
  enumerable: true, configurable: true,
});
defineLazyGlobals(subtleFragment, ['CryptoKey', 'SubtleCrypto']);
