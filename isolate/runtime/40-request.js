// Request (Fetch standard, as the Workers runtime shapes it: no mode,
// credentials or referrer; cf, fetcher and the "follow"/"manual" redirects).
//
// An incoming request is built without parsing or copying anything: its URL
// is the absolute one the host gave, and its header list is the host's flat
// array, whose names are lowercased the first time anything reads them.
//
// Takes from
//   00-util.js: toUSVString, kPrivate, requireArgs, toDictionary, emptyBytes, defineInterface,
//     registerInspect, defineGlobal
//   17-events.js: isAbortSignal, abortSignalNew
//   34-url.js: URL
//   38-headers.js: headerNameRe, GUARD_NONE, headerListFill, headerListHas, headerListLowercase,
//     headersFromList, headerListGet, GUARD_IMMUTABLE
//   39-body.js: Body, extractBody, extractedContentType, bodySetSource, bodySourceOf, bodyMove,
//     bodyUsedMessage, bodyCloneInto, requestContentType

// The Fetch standard uppercases the first six; the Workers runtime every
// method it knows, PATCH included, so a script's 'patch' works the same here.
const normalizedMethods = new Set(['DELETE', 'GET', 'HEAD', 'OPTIONS', 'POST', 'PUT', 'PATCH',
  'PURGE', 'TRACE', 'COPY', 'LOCK', 'MKCOL', 'MOVE', 'PROPFIND', 'PROPPATCH', 'SEARCH', 'UNLOCK',
  'ACL', 'REPORT', 'MKACTIVITY', 'CHECKOUT', 'MERGE', 'M-SEARCH', 'NOTIFY', 'SUBSCRIBE',
  'UNSUBSCRIBE', 'QUERY']);

// The Fetch standard's forbidden methods: an upstream that answers TRACE
// echoes the request, injected credentials included, back to the worker.
const forbiddenMethods = new Set(['CONNECT', 'TRACE', 'TRACK']);

function normalizeMethod(m) {
  const s = typeof m === 'string' ? m : `${m}`;
  if (!headerNameRe.test(s)) throw new TypeError(`Invalid HTTP method string: ${s}`);
  const upper = s.toUpperCase();
  if (forbiddenMethods.has(upper)) throw new TypeError(`'${upper}' HTTP method is unsupported.`);
  return normalizedMethods.has(upper) ? upper : s;
}

// Whether a request head announces a body (which may still be empty).
function headAnnouncesBody(flatHeaders) {
  for (let i = 0; i < flatHeaders.length; i += 2) {
    const n = flatHeaders[i];
    if (n.length === 14 && n.toLowerCase() === 'content-length') return true;
    if (n.length === 17 && n.toLowerCase() === 'transfer-encoding') return true;
  }
  return false;
}

// The last URL string parsed and its href: code that asks for the same URL
// again and again (a parent fetching from the dynamic workers it loads)
// skips the parser, which a cold start spends tens of microseconds in.
let lastRequestURLInput = null;
let lastRequestURL = '';

function parseRequestURL(input) {
  if (typeof input === 'string' && input === lastRequestURLInput) return lastRequestURL;
  const s = toUSVString(input);
  let href;
  try {
    href = new URL(s).href;
  } catch {
    throw new TypeError(`Invalid URL: ${s}`);
  }
  if (typeof input === 'string') {
    lastRequestURLInput = input;
    lastRequestURL = href;
  }
  return href;
}

let isRequest;          // (v) -> boolean
let newIncomingRequest; // (method, url, flatHeaders, body) -> Request

class Request extends Body {
  #method = 'GET';
  #url = '';
  #list = null;        // flat header list
  #rawNames = false;   // #list came from the wire: names not yet lowercased
  #headers = null;     // the Headers object, made on first access
  #guard = GUARD_NONE;
  #redirect = 'follow';
  #signal = null;      // made on first access when null
  #cf = undefined;
  #cache = undefined;  // 'no-store', the one mode Workers accept, or not set

  // new Request(kPrivate, source): an internal one, its fields set by the caller.
  constructor(input, init = undefined) {
    if (input === kPrivate) {
      super(kPrivate, init);
      return;
    }
    super(kPrivate);
    requireArgs(arguments.length, 1, 'constructor', 'Request');
    let src = null;
    let list;
    if (typeof input === 'object' && input !== null && #method in input) {
      src = input;
      this.#url = src.#url;
      this.#method = src.#method;
      list = src.#headerList().slice();
      this.#redirect = src.#redirect;
      this.#signal = src.#signal;
      this.#cf = src.#cf;
      this.#cache = src.#cache;
    } else {
      this.#url = parseRequestURL(input);
      list = [];
    }
    const opts = toDictionary(init, "Failed to construct 'Request': The 'init' argument");
    let initBody;
    let body = null;
    let bodyType = null;
    let methodChanged = false;
    if (opts !== null) {
      initBody = opts.body;
      if (opts.cf !== undefined) this.#cf = opts.cf;
      if (opts.headers !== undefined) {
        list = [];
        headerListFill(list, opts.headers);
      }
      if (opts.cache !== undefined) {
        // Nothing is cached between a worker and its upstreams: "no-store"
        // is what every fetch does already; the rest would promise a cache.
        const c = `${opts.cache}`;
        if (c !== 'no-store') {
          throw new TypeError(`Unsupported cache mode: ${c}. Only "no-store" is supported.`);
        }
        this.#cache = c;
      }
      if (opts.integrity !== undefined && `${opts.integrity}` !== '') {
        throw new TypeError('Subrequest integrity checking is not implemented. The integrity option must be either undefined or an empty string.');
      }
      if (opts.method !== undefined) {
        this.#method = normalizeMethod(opts.method);
        methodChanged = true;
      }
      if (opts.redirect !== undefined) {
        const r = `${opts.redirect}`;
        if (r !== 'follow' && r !== 'manual' && r !== 'error') {
          throw new TypeError('Invalid redirect value, must be one of "follow" or "manual" ("error" won\'t be implemented since it does not make sense at the edge; use "manual" and check the response status code).');
        }
        this.#redirect = r;
      }
      if (opts.signal !== undefined) {
        const signal = opts.signal;
        if (signal !== null && !isAbortSignal(signal)) {
          throw new TypeError("Failed to construct 'Request': member signal is not of type AbortSignal.");
        }
        this.#signal = signal;
      }
      if (initBody !== undefined && initBody !== null) {
        body = extractBody(initBody);
        bodyType = extractedContentType;
        bodySetSource(this, body);
      }
    }
    if (initBody === undefined && src !== null) {
      const srcBody = bodySourceOf(src);
      if (srcBody !== null) {
        if (src.bodyUsed) throw new TypeError('Cannot reconstruct a Request with a used body.');
        bodyMove(src, this);
        body = srcBody;
      }
    }
    const m = this.#method;
    if ((methodChanged || initBody !== undefined) && body !== null && (m === 'GET' || m === 'HEAD')) {
      throw new TypeError('Request with a GET or HEAD method cannot have a body.');
    }
    if (bodyType !== null && !headerListHas(list, 'content-type')) list.push('content-type', bodyType);
    this.#list = list;
  }

  #headerList() {
    if (this.#rawNames) {
      headerListLowercase(this.#list);
      this.#rawNames = false;
    }
    return this.#list;
  }

  get method() {
    return this.#method;
  }

  get url() {
    return this.#url;
  }

  get headers() {
    if (this.#headers === null) this.#headers = headersFromList(this.#headerList(), this.#guard);
    return this.#headers;
  }

  get redirect() {
    return this.#redirect;
  }

  get signal() {
    if (this.#signal === null) this.#signal = abortSignalNew();
    return this.#signal;
  }

  get fetcher() {
    return null;
  }

  get cf() {
    return this.#cf;
  }

  get integrity() {
    return '';
  }

  get keepalive() {
    return false;
  }

  get cache() {
    return this.#cache;
  }

  clone() {
    if (this.bodyUsed) throw new TypeError(bodyUsedMessage);
    const r = new Request(kPrivate);
    r.#method = this.#method;
    r.#url = this.#url;
    r.#list = this.#headerList().slice();
    r.#guard = this.#guard;
    r.#redirect = this.#redirect;
    r.#signal = this.#signal;
    r.#cf = this.#cf;
    r.#cache = this.#cache;
    bodyCloneInto(this, r);
    return r;
  }

  static {
    isRequest = (v) => #method in v;
    requestContentType = (v) => (#method in v ? headerListGet(v.#headerList(), 'content-type') : undefined);
    newIncomingRequest = (method, url, flatHeaders, body) => {
      // The host passes no bytes for an empty body; a body that was announced
      // is still there, empty, unless the method cannot have one.
      if (body === null && method !== 'GET' && method !== 'HEAD' && headAnnouncesBody(flatHeaders)) {
        body = emptyBytes;
      }
      const r = new Request(kPrivate, body);
      r.#method = method;
      // A fragment is never part of what a server receives.
      const hash = url.indexOf('#');
      r.#url = hash < 0 ? url : url.slice(0, hash);
      r.#list = flatHeaders;
      r.#rawNames = true;
      r.#guard = GUARD_IMMUTABLE;
      // As on Workers: `return fetch(request)` hands an origin's redirect
      // to the client instead of following it.
      r.#redirect = 'manual';
      return r;
    };
  }
}
defineInterface(Request, 'Request');
registerInspect(Request, (r) => ({
  method: r.method, url: r.url, headers: r.headers, redirect: r.redirect, bodyUsed: r.bodyUsed,
}));

defineGlobal('Request', Request);
