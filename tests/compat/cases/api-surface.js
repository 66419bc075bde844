/* compat
[{"path": "/"}]
*/
// The API surface: every global this suite knows of, and the members of each
// interface (static and prototype). tests/compat/gen-compat-doc.mjs builds
// docs/compatibility.md's tables from both platforms' answers.
const globals = ['Request', 'Response', 'Headers', 'fetch', 'URL', 'URLSearchParams', 'URLPattern',
  'ReadableStream', 'ReadableStreamDefaultReader', 'ReadableStreamBYOBReader', 'ReadableStreamDefaultController',
  'ReadableByteStreamController', 'WritableStream', 'WritableStreamDefaultWriter', 'WritableStreamDefaultController',
  'TransformStream', 'TransformStreamDefaultController', 'ByteLengthQueuingStrategy', 'CountQueuingStrategy',
  'IdentityTransformStream', 'FixedLengthStream', 'TextEncoder', 'TextDecoder', 'TextEncoderStream',
  'TextDecoderStream', 'CompressionStream', 'DecompressionStream', 'Blob', 'File', 'FormData', 'atob', 'btoa',
  'structuredClone', 'Event', 'EventTarget', 'CustomEvent', 'AbortController', 'AbortSignal', 'DOMException',
  'crypto', 'Crypto', 'CryptoKey', 'SubtleCrypto', 'setTimeout', 'setInterval', 'clearTimeout', 'clearInterval',
  'queueMicrotask', 'performance', 'Performance', 'navigator', 'Navigator', 'self', 'globalThis', 'reportError',
  'console', 'scheduler', 'addEventListener', 'removeEventListener', 'dispatchEvent', 'caches', 'WebSocket',
  'HTMLRewriter', 'EventSource', 'MessageChannel', 'MessagePort', 'WebAssembly', 'Cache', 'CacheStorage',
  'ErrorEvent', 'PromiseRejectionEvent', 'TextDecoderStream', 'DigestStream'];

const interfaces = {
  Request: () => Request, Response: () => Response, Headers: () => Headers, URL: () => URL,
  URLSearchParams: () => URLSearchParams, URLPattern: () => URLPattern, Blob: () => Blob, File: () => File,
  FormData: () => FormData, ReadableStream: () => ReadableStream,
  ReadableStreamDefaultReader: () => ReadableStreamDefaultReader, WritableStream: () => WritableStream,
  WritableStreamDefaultWriter: () => WritableStreamDefaultWriter, TransformStream: () => TransformStream,
  TextEncoder: () => TextEncoder, TextDecoder: () => TextDecoder, TextEncoderStream: () => TextEncoderStream,
  TextDecoderStream: () => TextDecoderStream, CompressionStream: () => CompressionStream,
  DecompressionStream: () => DecompressionStream, Event: () => Event, EventTarget: () => EventTarget,
  CustomEvent: () => CustomEvent, AbortController: () => AbortController, AbortSignal: () => AbortSignal,
  DOMException: () => DOMException, CryptoKey: () => CryptoKey,
  crypto: () => crypto.constructor, 'crypto.subtle': () => crypto.subtle.constructor,
  'crypto.DigestStream': () => crypto.DigestStream,
  performance: () => performance.constructor, navigator: () => navigator.constructor,
  scheduler: () => scheduler.constructor, console: () => null,
};

const skip = new Set(['length', 'name', 'prototype', 'constructor', 'caller', 'arguments']);

function members(get) {
  let C;
  try {
    C = get();
  } catch {
    return null;
  }
  if (C === null) return Object.keys(console).filter((k) => typeof console[k] === 'function').sort();
  if (typeof C !== 'function') return null;
  // Inherited members count too: where an interface inherits from another
  // (a Body mixin, TransformStream) is an implementation choice.
  const out = new Set();
  const keep = (k) => !skip.has(k) && !/^[A-Z_]+$/.test(k);
  for (let c = C; c && c !== Function.prototype; c = Object.getPrototypeOf(c)) {
    for (const k of Object.getOwnPropertyNames(c)) if (keep(k)) out.add(`static ${k}`);
  }
  for (let p = C.prototype; p && p !== Object.prototype; p = Object.getPrototypeOf(p)) {
    for (const k of Object.getOwnPropertyNames(p)) if (keep(k)) out.add(k);
  }
  return [...out].sort();
}

export default {
  fetch() {
    const out = { globals: {}, members: {} };
    for (const g of globals) out.globals[g] = typeof globalThis[g];
    for (const [name, get] of Object.entries(interfaces)) out.members[name] = members(get);
    return Response.json(out);
  },
};
