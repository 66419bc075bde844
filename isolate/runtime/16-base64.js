// atob / btoa (HTML "forgiving-base64"), on binary strings.
//
// Takes from
//   00-util.js: requireArgs, toDOMString, defineGlobal
//   05-domexception.js: DOMException
//   15-encoding.js: codeUnitsToString

const base64Alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';
const base64Digits = new Int16Array(128).fill(-1);
for (let i = 0; i < 64; i++) base64Digits[base64Alphabet.charCodeAt(i)] = i;
const base64Whitespace = /[\t\n\f\r ]/g;

function btoa(data) {
  requireArgs(arguments.length, 1, 'btoa', 'ServiceWorkerGlobalScope');
  const s = toDOMString(data);
  const n = s.length;
  const units = new Uint16Array(Math.ceil(n / 3) * 4);
  let o = 0;
  let i = 0;
  for (; i + 2 < n; i += 3) {
    const a = s.charCodeAt(i);
    const b = s.charCodeAt(i + 1);
    const c = s.charCodeAt(i + 2);
    if ((a | b | c) > 0xff) throw btoaError();
    units[o++] = base64Alphabet.charCodeAt(a >> 2);
    units[o++] = base64Alphabet.charCodeAt(((a & 3) << 4) | (b >> 4));
    units[o++] = base64Alphabet.charCodeAt(((b & 15) << 2) | (c >> 6));
    units[o++] = base64Alphabet.charCodeAt(c & 63);
  }
  if (i < n) {
    const a = s.charCodeAt(i);
    const b = i + 1 < n ? s.charCodeAt(i + 1) : 0;
    if ((a | b) > 0xff) throw btoaError();
    units[o++] = base64Alphabet.charCodeAt(a >> 2);
    units[o++] = base64Alphabet.charCodeAt(((a & 3) << 4) | (b >> 4));
    units[o++] = i + 1 < n ? base64Alphabet.charCodeAt((b & 15) << 2) : 61;
    units[o++] = 61; // '='
  }
  return codeUnitsToString(units, o);
}

function btoaError() {
  return new DOMException(
    'btoa() can only operate on characters in the Latin1 (ISO/IEC 8859-1) range.',
    'InvalidCharacterError');
}

function atobError() {
  return new DOMException(
    "atob() called with invalid base64-encoded data. (Only whitespace, '+', '/', alphanumeric " +
    "ASCII, and up to two terminal '=' signs when the input data length is divisible by 4 are " +
    'allowed.)', 'InvalidCharacterError');
}

function atob(data) {
  requireArgs(arguments.length, 1, 'atob', 'ServiceWorkerGlobalScope');
  let s = toDOMString(data);
  base64Whitespace.lastIndex = 0;
  if (base64Whitespace.test(s)) s = s.replace(base64Whitespace, '');
  let n = s.length;
  if (n % 4 === 0 && n > 0 && s.charCodeAt(n - 1) === 61) {
    n--;
    if (s.charCodeAt(n - 1) === 61) n--;
  }
  if (n % 4 === 1) throw atobError();
  const out = new Uint8Array((n >> 2) * 3 + ((n & 3) === 0 ? 0 : (n & 3) - 1));
  let o = 0;
  let acc = 0;
  let bits = 0;
  for (let i = 0; i < n; i++) {
    const c = s.charCodeAt(i);
    const d = c < 128 ? base64Digits[c] : -1;
    if (d < 0) throw atobError();
    acc = (acc << 6) | d;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out[o++] = (acc >> bits) & 0xff;
    }
    acc &= 0xfff;
  }
  return codeUnitsToString(out, o);
}

defineGlobal('atob', atob);
defineGlobal('btoa', btoa);
