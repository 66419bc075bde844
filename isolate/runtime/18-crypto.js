// crypto.getRandomValues and crypto.randomUUID (Web Crypto).
//
// Takes from
//   00-util.js: kPrivate, requireArgs, typedArrayKind, randomBytes, hexByte, defineInterface,
//     defineGlobal
//   05-domexception.js: DOMException

const integerTypedArrays = new Set([
  'Int8Array', 'Uint8Array', 'Uint8ClampedArray', 'Int16Array', 'Uint16Array', 'Int32Array',
  'Uint32Array', 'BigInt64Array', 'BigUint64Array',
]);

class Crypto {
  constructor(key) {
    if (key !== kPrivate) throw new TypeError('Illegal constructor');
  }

  getRandomValues(array) {
    requireArgs(arguments.length, 1, 'getRandomValues', 'Crypto');
    if (!ArrayBuffer.isView(array)) {
      throw new TypeError("Failed to execute 'getRandomValues' on 'Crypto': parameter 1 is not of type 'ArrayBufferView'.");
    }
    if (!integerTypedArrays.has(typedArrayKind.call(array))) {
      throw new DOMException(
        'ArrayBufferView argument to getRandomValues() must be an integer-typed view.',
        'TypeMismatchError');
    }
    const n = array.byteLength;
    if (n > 65536) {
      throw new DOMException(
        `getRandomValues() only accepts buffers of size <= 64K but provided ${n} bytes.`,
        'QuotaExceededError');
    }
    if (n > 0) native.randomFill(new Uint8Array(array.buffer, array.byteOffset, n));
    return array;
  }

  randomUUID() {
    const b = randomBytes(16);
    const h = hexByte;
    const v = (b[6] & 0x0f) | 0x40; // version 4
    const r = (b[8] & 0x3f) | 0x80; // RFC 4122 variant
    return h[b[0]] + h[b[1]] + h[b[2]] + h[b[3]] + '-' + h[b[4]] + h[b[5]] + '-' +
      h[v] + h[b[7]] + '-' + h[r] + h[b[9]] + '-' +
      h[b[10]] + h[b[11]] + h[b[12]] + h[b[13]] + h[b[14]] + h[b[15]];
  }
}
defineInterface(Crypto, 'Crypto');

const crypto = new Crypto(kPrivate);
defineGlobal('Crypto', Crypto);
// The global `crypto` is defined with the other enumerable globals (43-globals.js).
