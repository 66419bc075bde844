/* compat
[{"path": "/"}]
*/
// Which globals exist and what they are.
const names = ['Request', 'Response', 'Headers', 'fetch', 'URL', 'URLSearchParams', 'URLPattern',
  'ReadableStream', 'WritableStream', 'TransformStream', 'TextEncoderStream', 'TextDecoderStream',
  'CompressionStream', 'DecompressionStream', 'ReadableStreamDefaultReader', 'WritableStreamDefaultWriter',
  'ByteLengthQueuingStrategy', 'CountQueuingStrategy', 'IdentityTransformStream', 'FixedLengthStream',
  'TextEncoder', 'TextDecoder', 'Blob', 'File', 'FormData', 'atob', 'btoa', 'structuredClone',
  'Event', 'EventTarget', 'CustomEvent', 'AbortController', 'AbortSignal', 'DOMException',
  'crypto', 'Crypto', 'CryptoKey', 'SubtleCrypto', 'setTimeout', 'setInterval', 'clearTimeout',
  'clearInterval', 'queueMicrotask', 'performance', 'navigator', 'self', 'globalThis', 'reportError',
  'console', 'scheduler', 'addEventListener', 'removeEventListener', 'dispatchEvent',
  'MessageChannel', 'MessagePort', 'Navigator', 'ExecutionContext'];

export default {
  fetch() {
    const out = {};
    for (const n of names) out[n] = typeof globalThis[n];
    out.selfIsGlobal = self === globalThis;
    out.enumerable = Object.keys(globalThis).filter((k) => names.includes(k));
    out.perfNow = typeof performance.now();
    out.userAgentType = typeof navigator.userAgent;
    out.consoleMethods = ['log', 'info', 'warn', 'error', 'debug', 'trace', 'table', 'time', 'timeEnd', 'count', 'assert', 'dir', 'group', 'groupEnd']
      .filter((m) => typeof console[m] === 'function');
    out.subtleMethods = ['encrypt', 'decrypt', 'sign', 'verify', 'digest', 'generateKey', 'deriveKey', 'deriveBits',
      'importKey', 'exportKey', 'wrapKey', 'unwrapKey', 'timingSafeEqual'].filter((m) => typeof crypto.subtle[m] === 'function');
    return Response.json(out);
  },
};
