// URL Standard: the URL class. A URL is held as a record of components
// (scheme, userinfo, host, port, path, query, fragment: 33-url-parser.js);
// the getters read it and the setters run the parser with a state override.
//
// Takes from
//   30-url-encoding.js: urlEncoding (requireArgs, toUSV, formParse, percentEncode, SET_USERINFO,
//     webidlShape)
//   33-url-parser.js: urlParser (basicParse, fastParse, parseURL, parseWithBase, hrefOf, originOf,
//     cannotHaveCredentialsOrPort, ST_SCHEME_START, ST_HOST, ST_HOSTNAME, ST_PORT, ST_PATH_START,
//     ST_QUERY, ST_FRAGMENT)
//
// At call time, URL also uses what 35-url-search-params.js, written after it, gives
// through bindSearchParams when it loads: the two classes mirror each other.

const { URL, urlBridge } = (() => {
  const { requireArgs, toUSV, formParse, percentEncode, SET_USERINFO, webidlShape } = urlEncoding;
  const { basicParse, fastParse, parseURL, parseWithBase, hrefOf, originOf,
    cannotHaveCredentialsOrPort, ST_SCHEME_START, ST_HOST, ST_HOSTNAME, ST_PORT, ST_PATH_START,
    ST_QUERY, ST_FRAGMENT } = urlParser;

  const kInternal = Symbol('URL internal');

  // URLSearchParams (35-url-search-params.js) mirrors a URL's query: it
  // gives URL these two with bindSearchParams when it is defined. urlRecord
  // is filled in by URL's static block.
  let paramsCreate, paramsReset;
  let urlRecord;
  const bindSearchParams = (create, reset) => {
    paramsCreate = create;
    paramsReset = reset;
  };

  class URL {
    #r;
    #params = null;

    constructor(url, base = undefined) {
      if (url === kInternal) {
        this.#r = base;
        return;
      }
      requireArgs(arguments.length, 1, "Failed to construct 'URL'");
      let r;
      if (base === undefined && typeof url === 'string') {
        r = fastParse(url);
        if (r === null) r = basicParse(toUSV(url), null, null, 0);
      } else {
        r = parseWithBase(url, base);
      }
      if (r === null) {
        const b = base === undefined ? '' : toUSV(base);
        if (base !== undefined && parseURL(b, null) === null) throw new TypeError(`Invalid base URL: ${b}`);
        throw new TypeError(`Invalid URL: ${typeof url === 'string' ? url : toUSV(url)}`);
      }
      this.#r = r;
    }

    static canParse(url, base = undefined) {
      requireArgs(arguments.length, 1, "Failed to execute 'canParse' on 'URL'");
      return parseWithBase(url, base) !== null;
    }

    static parse(url, base = undefined) {
      requireArgs(arguments.length, 1, "Failed to execute 'parse' on 'URL'");
      const r = parseWithBase(url, base);
      return r === null ? null : new URL(kInternal, r);
    }

    static {
      urlRecord = (u) => u.#r;
    }

    get href() {
      return hrefOf(this.#r);
    }

    set href(value) {
      const v = toUSV(value);
      const r = parseURL(v, null);
      if (r === null) throw new TypeError(`Invalid URL: ${v}`);
      this.#r = r;
      if (this.#params !== null) paramsReset(this.#params, r.query === null ? [] : formParse(r.query));
    }

    get origin() {
      return originOf(this.#r);
    }

    get protocol() {
      return this.#r.scheme + ':';
    }

    set protocol(value) {
      const r = this.#r;
      basicParse(toUSV(value) + ':', null, r, ST_SCHEME_START);
      r.href = null;
    }

    get username() {
      return this.#r.username;
    }

    set username(value) {
      const v = toUSV(value);
      const r = this.#r;
      if (cannotHaveCredentialsOrPort(r)) return;
      r.username = percentEncode(v, SET_USERINFO);
      r.href = null;
    }

    get password() {
      return this.#r.password;
    }

    set password(value) {
      const v = toUSV(value);
      const r = this.#r;
      if (cannotHaveCredentialsOrPort(r)) return;
      r.password = percentEncode(v, SET_USERINFO);
      r.href = null;
    }

    get host() {
      const r = this.#r;
      if (r.host === null) return '';
      return r.port === null ? r.host : r.host + ':' + r.port;
    }

    set host(value) {
      const v = toUSV(value);
      const r = this.#r;
      if (r.opaque) return;
      basicParse(v, null, r, ST_HOST);
      r.href = null;
    }

    get hostname() {
      const h = this.#r.host;
      return h === null ? '' : h;
    }

    set hostname(value) {
      const v = toUSV(value);
      const r = this.#r;
      if (r.opaque) return;
      basicParse(v, null, r, ST_HOSTNAME);
      r.href = null;
    }

    get port() {
      const p = this.#r.port;
      return p === null ? '' : `${p}`;
    }

    set port(value) {
      const v = toUSV(value);
      const r = this.#r;
      if (cannotHaveCredentialsOrPort(r)) return;
      if (v === '') r.port = null;
      else basicParse(v, null, r, ST_PORT);
      r.href = null;
    }

    get pathname() {
      return this.#r.path;
    }

    set pathname(value) {
      const v = toUSV(value);
      const r = this.#r;
      if (r.opaque) return;
      r.path = '';
      basicParse(v, null, r, ST_PATH_START);
      r.href = null;
    }

    get search() {
      const q = this.#r.query;
      return q === null || q === '' ? '' : '?' + q;
    }

    set search(value) {
      const v = toUSV(value);
      const r = this.#r;
      r.href = null;
      if (v === '') {
        r.query = null;
        if (this.#params !== null) paramsReset(this.#params, []);
        return;
      }
      const input = v.charCodeAt(0) === 0x3f ? v.slice(1) : v;
      r.query = '';
      basicParse(input, null, r, ST_QUERY);
      if (this.#params !== null) paramsReset(this.#params, formParse(input));
    }

    get searchParams() {
      let params = this.#params;
      if (params === null) {
        const q = this.#r.query;
        params = this.#params = paramsCreate(this, q === null || q === '' ? [] : formParse(q));
      }
      return params;
    }

    get hash() {
      const f = this.#r.fragment;
      return f === null || f === '' ? '' : '#' + f;
    }

    set hash(value) {
      const v = toUSV(value);
      const r = this.#r;
      r.href = null;
      if (v === '') {
        r.fragment = null;
        return;
      }
      const input = v.charCodeAt(0) === 0x23 ? v.slice(1) : v;
      r.fragment = '';
      basicParse(input, null, r, ST_FRAGMENT);
    }

    toString() {
      return hrefOf(this.#r);
    }

    toJSON() {
      return hrefOf(this.#r);
    }
  }

  webidlShape(URL, 'URL');
  for (const key of ['canParse', 'parse']) {
    const d = Reflect.getOwnPropertyDescriptor(URL, key);
    d.enumerable = true;
    Reflect.defineProperty(URL, key, d);
  }
  Reflect.defineProperty(globalThis, 'URL', { value: URL, writable: true, configurable: true, enumerable: false });
  return { URL, urlBridge: { kInternal, urlRecord, bindSearchParams } };
})();
