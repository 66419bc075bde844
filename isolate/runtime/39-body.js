// The body of a Request or a Response: extracting one from what a script
// passes, reading it as text, JSON, bytes, a Blob or FormData, and Body, the
// one base class of Request and Response that holds it (the Fetch standard's
// Body mixin).
//
// A body's source is one of: null; a string (kept as is, encoded only when
// bytes are asked for, so a string response goes to native.respond
// untouched); a Uint8Array nobody else can write to; a Blob; a ReadableStream.
// FormData and URLSearchParams are serialised when the body is made.
//
// Takes from
//   00-util.js: loneSurrogateRe, toUSVString, isObjectLike, copyBufferSource, emptyBytes,
//     utf8Decode, toArrayBuffer, kPrivate, defineInterface
//   25-streams.js: isReadableStream, readableStreamDisturbed, streamsFragment,
//     readableStreamReadAll, readableStreamFromBytes, readableStreamUsed, readableStreamTee
//   26-blob.js: isBlob, blobBytesOf, blobFromBytes
//   35-url-search-params.js: URLSearchParams
//   37-formdata.js: isFormData, encodeMultipart, mimeEssence, parseHeaderParams, parseMultipart,
//     parseUrlEncodedForm
//
// The headers are Request's and Response's: for blob() and formData(), 40-request.js and
// 41-response.js fill in requestContentType and responseContentType when they load.

const bodyUsedMessage =
  'Body has already been used. It can only be used once. Use tee() first if you need to read it twice.';

// extractBody() leaves the content type it implies here (null for none), to
// spare an allocation per body.
let extractedContentType = null;

function extractBody(init) {
  if (typeof init === 'string') {
    extractedContentType = 'text/plain;charset=UTF-8';
    return loneSurrogateRe.test(init) ? toUSVString(init) : init;
  }
  extractedContentType = null;
  if (isObjectLike(init)) {
    const bytes = copyBufferSource(init);
    if (bytes !== null) return bytes;
    if (isBlob(init)) {
      const type = init.type;
      if (type !== '') extractedContentType = type;
      return init;
    }
    if (isReadableStream(init)) {
      if (readableStreamDisturbed(init)) {
        throw new TypeError('This ReadableStream is disturbed (has already been read from), and cannot be used as a body.');
      }
      if (init.locked) {
        throw new TypeError('This ReadableStream is currently locked to a reader, and cannot be used as a body.');
      }
      return init;
    }
    if (isFormData(init)) {
      const [bytes, type] = encodeMultipart(init);
      extractedContentType = type;
      return bytes;
    }
    if (init instanceof URLSearchParams) {
      extractedContentType = 'application/x-www-form-urlencoded;charset=UTF-8';
      return `${init}`;
    }
    // Workers also takes an async iterable (an async generator) of chunks.
    if (typeof init[Symbol.asyncIterator] === 'function') return streamsFragment().ReadableStream.from(init);
  }
  extractedContentType = 'text/plain;charset=UTF-8';
  return toUSVString(init);
}

// Whether a body source is known to hold no bytes (a stream is not).
function bodySourceIsEmpty(src) {
  if (src === null) return true;
  if (typeof src === 'string' || src instanceof Uint8Array) return src.length === 0;
  return isBlob(src) && src.size === 0;
}

// The bytes of a source that is not a stream (never mutated by the caller).
function bodySourceBytesSync(src) {
  if (src === null) return emptyBytes;
  if (typeof src === 'string') return native.utf8Encode(src);
  if (src instanceof Uint8Array) return src;
  return blobBytesOf(src);
}

function isStreamSource(src) {
  return src !== null && typeof src === 'object' && !(src instanceof Uint8Array) && !isBlob(src);
}

function bodyToBytes(src) {
  if (isStreamSource(src)) return readableStreamReadAll(src);
  return Promise.resolve(bodySourceBytesSync(src));
}

function bodyToText(src) {
  if (src === null) return Promise.resolve('');
  if (typeof src === 'string') return Promise.resolve(src);
  if (isStreamSource(src)) return readableStreamReadAll(src).then(utf8Decode);
  return Promise.resolve(utf8Decode(bodySourceBytesSync(src)));
}

function bodyToJSON(src) {
  if (typeof src === 'string') {
    try {
      return Promise.resolve(JSON.parse(src));
    } catch (err) {
      return Promise.reject(err);
    }
  }
  return bodyToText(src).then(JSON.parse);
}

function bodyToArrayBuffer(src) {
  if (isStreamSource(src)) return readableStreamReadAll(src).then((u8) => toArrayBuffer(u8));
  return Promise.resolve(toArrayBuffer(bodySourceBytesSync(src)));
}

function bodyToUint8Array(src) {
  if (isStreamSource(src)) return readableStreamReadAll(src).then((u8) => u8.slice());
  const bytes = bodySourceBytesSync(src);
  return Promise.resolve(typeof src === 'string' ? bytes : bytes.slice());
}

// MIME types (WHATWG MIME Sniffing): parsing and serialising normalise a
// Content-Type the way blob() reports it ("Text/Plain; a=b" is
// "text/plain;a=b"). '' when the value is not a MIME type.
const mimeTokenRe = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
const mimeQuotedValueRe = /^[\t\x20-\x7e\x80-\xff]*$/;
const mimeHttpWhitespaceRe = /^[\t\n\r ]+|[\t\n\r ]+$/g;

function normalizeMimeType(value) {
  const s = value.replace(mimeHttpWhitespaceRe, '');
  const slash = s.indexOf('/');
  if (slash <= 0) return '';
  const type = s.slice(0, slash);
  let at = s.indexOf(';', slash);
  if (at < 0) at = s.length;
  const subtype = s.slice(slash + 1, at).replace(mimeHttpWhitespaceRe, '');
  if (!mimeTokenRe.test(type) || !mimeTokenRe.test(subtype)) return '';
  let out = `${type}/${subtype}`.toLowerCase();
  const seen = new Set();
  while (at < s.length) {
    at++; // the ';'
    while (at < s.length && /[\t\n\r ]/.test(s[at])) at++;
    let end = at;
    while (end < s.length && s[end] !== ';' && s[end] !== '=') end++;
    const name = s.slice(at, end).toLowerCase();
    at = end;
    if (at >= s.length) break;
    if (s[at] === ';') continue;
    at++; // the '='
    if (at >= s.length) break;
    let paramValue;
    if (s[at] === '"') {
      paramValue = '';
      at++;
      while (at < s.length && s[at] !== '"') {
        if (s[at] === '\\' && at + 1 < s.length) at++;
        paramValue += s[at++];
      }
      while (at < s.length && s[at] !== ';') at++;
    } else {
      end = s.indexOf(';', at);
      if (end < 0) end = s.length;
      paramValue = s.slice(at, end).replace(mimeHttpWhitespaceRe, '');
      at = end;
      if (paramValue === '') continue;
    }
    if (name === '' || !mimeTokenRe.test(name) || !mimeQuotedValueRe.test(paramValue) || seen.has(name)) {
      continue;
    }
    seen.add(name);
    const quoted = paramValue === '' || !mimeTokenRe.test(paramValue);
    out += `;${name}=${quoted ? `"${paramValue.replace(/["\\]/g, '\\$&')}"` : paramValue}`;
  }
  return out;
}

// A body's Blob has the Content-Type as the MIME type serialises it, with
// the case of parameter values kept ("charset=UTF-8"); new Blob() is what
// lowercases a type. Outside printable ASCII it has none.
const bodyBlobTypeBadCharRe = /[^\x20-\x7e]/;

function bodyToBlob(src, contentType) {
  const mime = contentType === null ? '' : normalizeMimeType(contentType);
  const type = bodyBlobTypeBadCharRe.test(mime) ? '' : mime;
  if (isStreamSource(src)) return readableStreamReadAll(src).then((u8) => blobFromBytes(u8.slice(), type));
  return Promise.resolve(blobFromBytes(bodySourceBytesSync(src).slice(), type));
}

function bodyToFormData(src, contentType) {
  if (contentType === null) {
    return Promise.reject(new TypeError('Parsing a Body as FormData requires a Content-Type header.'));
  }
  const essence = mimeEssence(contentType);
  if (essence === 'multipart/form-data') {
    const boundary = parseHeaderParams(contentType).get('boundary');
    return bodyToBytes(src).then((bytes) => parseMultipart(bytes, boundary));
  }
  if (essence === 'application/x-www-form-urlencoded') {
    return bodyToText(src).then(parseUrlEncodedForm);
  }
  return Promise.reject(new TypeError(
    'Unrecognized Content-Type header value. FormData can only parse the following MIME types: multipart/form-data, application/x-www-form-urlencoded'));
}

// The body getter's value: streams are made on demand from other sources.
function bodySourceToStream(src) {
  if (isStreamSource(src)) return src;
  return readableStreamFromBytes(bodySourceBytesSync(src));
}

// Runs `fn(src)`, turning a synchronous throw into a rejected promise, as
// WebIDL does for promise-returning operations.
function bodyConsume(fn, src, arg) {
  try {
    return fn(src, arg);
  } catch (err) {
    return Promise.reject(err);
  }
}

// The Body mixin as one base class of Request and Response, as in workerd:
// the body's state and every member that reads it. The headers stay the
// subclasses' own; blob() and formData() ask them for the Content-Type
// through the readers their static blocks leave below.
let bodySourceOf;   // (Body) -> source
let bodySetSource;  // (Body, source) -> undefined
let bodyTake;       // (Body) -> source; marks the body used (throws if it was)
let bodyMove;       // (from, to): `to` takes the body of `from`, which becomes used
let bodyCloneInto;  // (from, to): `to` gets a body of its own with the bytes of `from`'s
let requestContentType = null;  // (v) -> Content-Type of a Request, undefined for others
let responseContentType = null; // (v) -> Content-Type of a Response, undefined for others

function bodyContentType(b) {
  const type = requestContentType(b);
  if (type !== undefined) return type;
  const t = responseContentType(b);
  return t === undefined ? null : t;
}

class Body {
  #body;
  #bodyUsed = false;

  // Only Request and Response make one: `source` is an extracted body source.
  constructor(token, source = null) {
    if (token !== kPrivate) throw new TypeError('Illegal constructor');
    this.#body = source;
  }

  #take() {
    const src = this.#body;
    if (this.#bodyUsed) throw new TypeError(bodyUsedMessage);
    if (src === null) return null;
    if (isStreamSource(src) && (readableStreamDisturbed(src) || src.locked)) {
      throw new TypeError(bodyUsedMessage);
    }
    this.#bodyUsed = true;
    return src;
  }

  get body() {
    const src = this.#body;
    if (src === null) return null;
    if (isStreamSource(src)) return src;
    const stream = this.#bodyUsed ? readableStreamUsed() : bodySourceToStream(src);
    this.#body = stream;
    return stream;
  }

  get bodyUsed() {
    if (this.#bodyUsed) return true;
    const src = this.#body;
    return isStreamSource(src) && readableStreamDisturbed(src);
  }

  text() {
    return bodyConsume(bodyToText, this.#take());
  }

  json() {
    return bodyConsume(bodyToJSON, this.#take());
  }

  arrayBuffer() {
    return bodyConsume(bodyToArrayBuffer, this.#take());
  }

  bytes() {
    return bodyConsume(bodyToUint8Array, this.#take());
  }

  blob() {
    const src = this.#take();
    return bodyConsume(bodyToBlob, src, bodyContentType(this));
  }

  formData() {
    const src = this.#take();
    return bodyConsume(bodyToFormData, src, bodyContentType(this));
  }

  static {
    bodySourceOf = (b) => b.#body;
    bodySetSource = (b, src) => {
      b.#body = src;
    };
    bodyTake = (b) => b.#take();
    bodyMove = (from, to) => {
      to.#body = from.#body;
      from.#bodyUsed = true;
    };
    // A source both bodies can read: a stream is teed.
    bodyCloneInto = (from, to) => {
      const src = from.#body;
      if (!isStreamSource(src)) {
        to.#body = src;
        return;
      }
      const [a, b] = readableStreamTee(src);
      from.#body = a;
      to.#body = b;
    };
  }
}
// The body methods throw synchronously only for a wrong `this`.
for (const name of ['text', 'json', 'arrayBuffer', 'bytes', 'blob', 'formData']) {
  const method = Body.prototype[name];
  Object.defineProperty(Body.prototype, name, {
    value: {
      [name]() {
        try {
          return method.call(this);
        } catch (err) {
          return Promise.reject(err);
        }
      },
    }[name],
    writable: true, configurable: true,
  });
}
defineInterface(Body, 'Body');
