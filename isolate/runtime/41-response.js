// Response (Fetch standard, as the Workers runtime shapes it: a zero-length
// body is accepted, and dropped, with a null body status; statusText is ""
// unless given, and the HTTP layer sends the standard reason phrase).
//
// Takes from
//   00-util.js: kPrivate, loneSurrogateRe, toUSVString, toDictionary, toUnsignedShort, requireArgs,
//     defineInterface, registerInspect, defineGlobal
//   34-url.js: URL
//   38-headers.js: GUARD_NONE, headerListFill, headerListHas, GUARD_IMMUTABLE, headersFromList,
//     headerListForWire, headerListGet
//   39-body.js: Body, extractBody, extractedContentType, bodySourceIsEmpty, bodySetSource,
//     bodyUsedMessage, bodyCloneInto, bodyTake, responseContentType

function isNullBodyStatus(status) {
  return status === 101 || status === 204 || status === 205 || status === 304;
}

function isRedirectStatus(status) {
  return status === 301 || status === 302 || status === 303 || status === 307 || status === 308;
}

const statusTextBadRe = /[\0-\x1f]/;

let isResponse;          // (v) -> boolean
let responseStatus;      // (r) -> number
let responseType;        // (r) -> 'default' | 'error'
let responseHeaderList;  // (r) -> flat list, to send
let responseTakeBody;    // (r) -> body source; marks the body used
let responseFreezeHeaders; // (r) -> r, its headers immutable (a fetched response)

class Response extends Body {
  #status = 200;
  #statusText = null; // null: none given
  #list = null;
  #headers = null;
  #guard = GUARD_NONE;
  #type = 'default';
  #cf = undefined;

  constructor(body = null, init = undefined) {
    if (body === kPrivate) {
      super(kPrivate);
      return;
    }
    if (init === undefined && typeof body === 'string') {
      // The common `new Response('text')`: nothing to validate.
      super(kPrivate, loneSurrogateRe.test(body) ? toUSVString(body) : body);
      this.#list = ['content-type', 'text/plain;charset=UTF-8'];
      return;
    }
    super(kPrivate);
    this.#setup(body, init, null);
  }

  #setup(body, init, contentType) {
    const opts = toDictionary(init, "Failed to construct 'Response': The 'init' argument");
    const list = [];
    let status = 200;
    let statusText = null;
    if (opts !== null && #status in opts) {
      // A Response as init (Workers accepts one): take its status and headers.
      status = opts.#status;
      statusText = opts.#statusText;
      const src = opts.#list;
      for (let i = 0; i < src.length; i++) list.push(src[i]);
      this.#cf = opts.#cf;
    } else if (opts !== null) {
      if (opts.cf !== undefined) this.#cf = opts.cf;
      if (opts.encodeBody !== undefined) {
        const e = `${opts.encodeBody}`;
        if (e !== 'automatic' && e !== 'manual') throw new TypeError(`encodeBody: unexpected value: ${e}`);
      }
      if (opts.headers !== undefined) headerListFill(list, opts.headers);
      if (opts.status !== undefined) status = toUnsignedShort(opts.status);
      if (opts.statusText !== undefined) statusText = `${opts.statusText}`;
      if (opts.webSocket !== undefined && opts.webSocket !== null) {
        throw new TypeError('WebSocket responses are not supported.');
      }
    }
    if (status < 200 || status > 599) {
      throw new RangeError('Responses may only be constructed with status codes in the range 200 to 599, inclusive.');
    }
    if (statusText !== null && statusTextBadRe.test(statusText)) throw new TypeError('Invalid statusText');
    this.#status = status;
    this.#statusText = statusText;
    if (body !== null && body !== undefined) {
      let src = extractBody(body);
      const type = contentType === null ? extractedContentType : contentType;
      if (isNullBodyStatus(status)) {
        if (!bodySourceIsEmpty(src)) {
          throw new TypeError('Response with null body status (101, 204, 205, or 304) cannot have a body.');
        }
        src = null;
      } else if (type !== null && !headerListHas(list, 'content-type')) {
        list.push('content-type', type);
      }
      bodySetSource(this, src);
    }
    this.#list = list;
  }

  static json(data, init = undefined) {
    const text = JSON.stringify(data);
    if (text === undefined) throw new TypeError('The value is not JSON serializable.');
    const r = new Response(kPrivate);
    r.#setup(text, init, 'application/json');
    return r;
  }

  static redirect(url, status = 302) {
    requireArgs(arguments.length, 1, 'redirect', 'Response');
    const code = toUnsignedShort(status);
    if (!isRedirectStatus(code)) {
      throw new RangeError(`${code} is not a redirect status code. It must be one of: 301, 302, 303, 307, or 308.`);
    }
    const s = toUSVString(url);
    let href;
    try {
      href = new URL(s).href;
    } catch {
      throw new TypeError(`Unable to parse URL: ${s}`);
    }
    const r = new Response(kPrivate);
    r.#status = code;
    r.#list = ['location', href];
    r.#guard = GUARD_IMMUTABLE;
    return r;
  }

  static error() {
    const r = new Response(kPrivate);
    r.#status = 0;
    r.#type = 'error';
    r.#list = [];
    r.#guard = GUARD_IMMUTABLE;
    return r;
  }

  get type() {
    return this.#type;
  }

  get url() {
    return '';
  }

  get redirected() {
    return false;
  }

  get status() {
    return this.#status;
  }

  get ok() {
    return this.#status >= 200 && this.#status <= 299;
  }

  get statusText() {
    const t = this.#statusText;
    return t === null ? '' : t;
  }

  get headers() {
    if (this.#headers === null) this.#headers = headersFromList(this.#list, this.#guard);
    return this.#headers;
  }

  get cf() {
    return this.#cf;
  }

  get webSocket() {
    return null;
  }

  clone() {
    if (this.bodyUsed) throw new TypeError(bodyUsedMessage);
    const r = new Response(kPrivate);
    r.#status = this.#status;
    r.#statusText = this.#statusText;
    r.#list = this.#list.slice();
    r.#guard = this.#guard;
    r.#type = this.#type;
    r.#cf = this.#cf;
    bodyCloneInto(this, r);
    return r;
  }

  static {
    isResponse = (v) => #status in v;
    responseStatus = (r) => r.#status;
    responseType = (r) => r.#type;
    responseHeaderList = (r) => headerListForWire(r.#list);
    responseTakeBody = bodyTake; // its callers know r is a Response
    responseContentType = (v) => (#status in v ? headerListGet(v.#list, 'content-type') : undefined);
    responseFreezeHeaders = (r) => {
      r.#guard = GUARD_IMMUTABLE;
      return r;
    };
  }
}
defineInterface(Response, 'Response');
registerInspect(Response, (r) => ({
  status: r.status, statusText: r.statusText, headers: r.headers, ok: r.ok,
  redirected: r.redirected, type: r.type, url: r.url, bodyUsed: r.bodyUsed,
}));

defineGlobal('Response', Response);
