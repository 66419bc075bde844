// URL Standard: URL records, the basic URL parser (the standard's state
// machine, with state overrides for the setters), the serializer, origins.
// The path of a hierarchical URL is kept already serialized ("/a/b"), which
// makes pathname free and path shortening a lastIndexOf; href is serialized
// on demand and cached until a setter runs.
//
// A plain ASCII http(s) URL that needs no percent-encoding, no IDNA and no
// dot-segment removal takes fastParse(), one regular expression match that
// yields the record the state machine would.
//
// Like every url file, pure ASCII on purpose: every non-ASCII code point is
// written as an escape, so the embedded runtime does not depend on how the
// shim decodes its bytes.
//
// Takes from
//   30-url-encoding.js: urlEncoding (toUSV, codeAt, lastIndexOfCode, percentEncode, SET_C0,
//     SET_FRAGMENT, SET_QUERY, SET_SPECIAL_QUERY, SET_PATH, SET_USERINFO)
//   32-url-host.js: urlHost (parseHost)

const urlParser = (() => {
  const { toUSV, codeAt, lastIndexOfCode, percentEncode, SET_C0, SET_FRAGMENT, SET_QUERY,
    SET_SPECIAL_QUERY, SET_PATH, SET_USERINFO } = urlEncoding;
  const { parseHost } = urlHost;

  const NOT_SPECIAL = -1;

  // The special schemes and their default ports (null for file).
  function defaultPort(scheme) {
    switch (scheme) {
      case 'http': case 'ws': return 80;
      case 'https': case 'wss': return 443;
      case 'ftp': return 21;
      case 'file': return null;
      default: return NOT_SPECIAL;
    }
  }

  function asciiLower(s) {
    for (let i = 0; i < s.length; i++) {
      const c = s.charCodeAt(i);
      if (c >= 0x41 && c <= 0x5a) return s.toLowerCase();
    }
    return s;
  }

  class URLRecord {
    constructor(scheme, username, password, host, port, path, opaque, query, fragment, special, href) {
      this.scheme = scheme;
      this.username = username;
      this.password = password;
      this.host = host;          // serialized host, '' (empty host) or null
      this.port = port;          // number or null
      this.path = path;          // "/seg/seg" or the opaque path
      this.opaque = opaque;      // path is opaque
      this.query = query;        // string or null
      this.fragment = fragment;  // string or null
      this.special = special;    // scheme is special
      this.href = href;          // cached serialization or null
    }
  }

  function emptyRecord() {
    return new URLRecord('', '', '', null, null, '', false, null, null, false, null);
  }

  function serializeURL(r) {
    let out = r.scheme + ':';
    if (r.host !== null) {
      out += '//';
      if (r.username !== '' || r.password !== '') {
        out += r.username;
        if (r.password !== '') out += ':' + r.password;
        out += '@';
      }
      out += r.host;
      if (r.port !== null) out += ':' + r.port;
    } else if (!r.opaque && codeAt(r.path, 0) === 0x2f && codeAt(r.path, 1) === 0x2f) {
      out += '/.';
    }
    out += r.path;
    if (r.query !== null) out += '?' + r.query;
    if (r.fragment !== null) out += '#' + r.fragment;
    return out;
  }

  function hrefOf(r) {
    const h = r.href;
    return h !== null ? h : (r.href = serializeURL(r));
  }

  function isAlpha(c) {
    return (c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a);
  }

  function isWindowsDriveLetter(s) {
    return s.length === 2 && isAlpha(s.charCodeAt(0)) &&
      (s.charCodeAt(1) === 0x3a || s.charCodeAt(1) === 0x7c);
  }

  function isNormalizedDriveLetter(s) {
    return s.length === 2 && isAlpha(s.charCodeAt(0)) && s.charCodeAt(1) === 0x3a;
  }

  function startsWithWindowsDriveLetter(s, p) {
    if (s.length - p < 2) return false;
    if (!isAlpha(s.charCodeAt(p))) return false;
    const c1 = s.charCodeAt(p + 1);
    if (c1 !== 0x3a && c1 !== 0x7c) return false;
    if (s.length - p === 2) return true;
    const c2 = s.charCodeAt(p + 2);
    return c2 === 0x2f || c2 === 0x5c || c2 === 0x3f || c2 === 0x23;
  }

  function firstSegment(path) {
    const i = path.indexOf('/', 1);
    return i === -1 ? path.slice(1) : path.slice(1, i);
  }

  function shortenPath(r) {
    const path = r.path;
    const i = lastIndexOfCode(path, 0x2f, path.length - 1);
    if (i === -1) return;
    if (i === 0 && r.scheme === 'file' && isNormalizedDriveLetter(path.slice(1))) return;
    r.path = path.slice(0, i);
  }

  function isSingleDot(s) {
    return s === '.' || (s.length === 3 && s.toLowerCase() === '%2e');
  }

  function isDoubleDot(s) {
    switch (s.length) {
      case 2: return s === '..';
      case 4: { const l = s.toLowerCase(); return l === '.%2e' || l === '%2e.'; }
      case 6: return s.toLowerCase() === '%2e%2e';
      default: return false;
    }
  }

  const EOF = -1;
  // Parser states (the scheme state is folded into scheme start).
  const ST_SCHEME_START = 1, ST_NO_SCHEME = 2, ST_SPECIAL_RELATIVE_OR_AUTHORITY = 3,
    ST_PATH_OR_AUTHORITY = 4, ST_RELATIVE = 5, ST_RELATIVE_SLASH = 6, ST_SPECIAL_AUTHORITY_SLASHES = 7,
    ST_SPECIAL_AUTHORITY_IGNORE_SLASHES = 8, ST_AUTHORITY = 9, ST_HOST = 10, ST_HOSTNAME = 11,
    ST_PORT = 12, ST_FILE = 13, ST_FILE_SLASH = 14, ST_FILE_HOST = 15, ST_PATH_START = 16,
    ST_PATH = 17, ST_OPAQUE_PATH = 18, ST_QUERY = 19, ST_FRAGMENT = 20;

  const TAB_NL_G = /[\t\n\r]/g;

  function trimControlAndSpace(s) {
    let a = 0, b = s.length;
    while (a < b && s.charCodeAt(a) <= 0x20) a++;
    while (b > a && s.charCodeAt(b - 1) <= 0x20) b--;
    return a === 0 && b === s.length ? s : s.slice(a, b);
  }

  // Splits the userinfo of the authority state at its first ":" into the
  // record's username and password.
  function setUserinfo(r, userinfo) {
    const colon = userinfo.indexOf(':');
    if (colon === -1) {
      r.username += percentEncode(userinfo, SET_USERINFO);
    } else {
      r.username += percentEncode(userinfo.slice(0, colon), SET_USERINFO);
      r.password += percentEncode(userinfo.slice(colon + 1), SET_USERINFO);
    }
  }

  // The basic URL parser. Without `url` it returns a new record or null;
  // with `url` and `override` (a setter) it edits url in place and returns
  // null where the standard returns failure.
  function basicParse(input, base, url, override) {
    if (url === null) {
      input = trimControlAndSpace(input);
      url = emptyRecord();
    }
    for (let i = 0; i < input.length; i++) {
      const c = input.charCodeAt(i);
      if (c === 0x09 || c === 0x0a || c === 0x0d) {
        input = input.replace(TAB_NL_G, '');
        break;
      }
    }
    const len = input.length;
    let state = override || ST_SCHEME_START;
    let buf = '';      // carries a Windows drive letter from file host to path
    let segs = null;   // the path as segments while in the path state
    let p = 0;
    for (;;) {
      const c = p < len ? input.charCodeAt(p) : EOF;
      switch (state) {
        case ST_SCHEME_START: {
          // The scheme state, run as one scan: ASCII alphanumerics, "+",
          // "-" and "." up to the ":" make the scheme; anything else means
          // there is no scheme after all.
          if (!isAlpha(c)) {
            if (override) return null;
            state = ST_NO_SCHEME;
            p--;
            break;
          }
          let e = p + 1;
          for (; e < len; e++) {
            const d = input.charCodeAt(e);
            if (!(isAlpha(d) || (d >= 0x30 && d <= 0x39) || d === 0x2b || d === 0x2d || d === 0x2e)) break;
          }
          if (e >= len || input.charCodeAt(e) !== 0x3a) {
            if (override) return null;
            state = ST_NO_SCHEME;
            p = -1;
            break;
          }
          const scheme = asciiLower(input.slice(p, e));
          p = e;
          const special = defaultPort(scheme) !== NOT_SPECIAL;
          if (override) {
            if (url.special !== special) return url;
            if ((url.username !== '' || url.password !== '' || url.port !== null) && scheme === 'file') return url;
            if (url.scheme === 'file' && url.host === '') return url;
          }
          url.scheme = scheme;
          url.special = special;
          if (override) {
            if (url.port === defaultPort(scheme)) url.port = null;
            return url;
          }
          if (scheme === 'file') {
            state = ST_FILE;
          } else if (special && base !== null && base.scheme === scheme) {
            state = ST_SPECIAL_RELATIVE_OR_AUTHORITY;
          } else if (special) {
            state = ST_SPECIAL_AUTHORITY_SLASHES;
          } else if (codeAt(input, p + 1) === 0x2f) {
            state = ST_PATH_OR_AUTHORITY;
            p++;
          } else {
            url.path = '';
            url.opaque = true;
            state = ST_OPAQUE_PATH;
          }
          break;
        }

        case ST_NO_SCHEME:
          if (base === null || (base.opaque && c !== 0x23)) return null;
          if (base.opaque) {
            url.scheme = base.scheme;
            url.special = base.special;
            url.path = base.path;
            url.opaque = true;
            url.query = base.query;
            url.fragment = '';
            state = ST_FRAGMENT;
          } else if (base.scheme !== 'file') {
            state = ST_RELATIVE;
            p--;
          } else {
            state = ST_FILE;
            p--;
          }
          break;

        case ST_SPECIAL_RELATIVE_OR_AUTHORITY:
          if (c === 0x2f && codeAt(input, p + 1) === 0x2f) {
            state = ST_SPECIAL_AUTHORITY_IGNORE_SLASHES;
            p++;
          } else {
            state = ST_RELATIVE;
            p--;
          }
          break;

        case ST_PATH_OR_AUTHORITY:
          if (c === 0x2f) {
            state = ST_AUTHORITY;
          } else {
            state = ST_PATH;
            p--;
          }
          break;

        case ST_RELATIVE:
          url.scheme = base.scheme;
          url.special = base.special;
          if (c === 0x2f || (url.special && c === 0x5c)) {
            state = ST_RELATIVE_SLASH;
          } else {
            url.username = base.username;
            url.password = base.password;
            url.host = base.host;
            url.port = base.port;
            url.path = base.path;
            url.query = base.query;
            if (c === 0x3f) {
              url.query = '';
              state = ST_QUERY;
            } else if (c === 0x23) {
              url.fragment = '';
              state = ST_FRAGMENT;
            } else if (c !== EOF) {
              url.query = null;
              shortenPath(url);
              state = ST_PATH;
              p--;
            }
          }
          break;

        case ST_RELATIVE_SLASH:
          if (url.special && (c === 0x2f || c === 0x5c)) {
            state = ST_SPECIAL_AUTHORITY_IGNORE_SLASHES;
          } else if (c === 0x2f) {
            state = ST_AUTHORITY;
          } else {
            url.username = base.username;
            url.password = base.password;
            url.host = base.host;
            url.port = base.port;
            state = ST_PATH;
            p--;
          }
          break;

        case ST_SPECIAL_AUTHORITY_SLASHES:
          state = ST_SPECIAL_AUTHORITY_IGNORE_SLASHES;
          if (c === 0x2f && codeAt(input, p + 1) === 0x2f) p++;
          else p--;
          break;

        case ST_SPECIAL_AUTHORITY_IGNORE_SLASHES:
          if (c !== 0x2f && c !== 0x5c) {
            state = ST_AUTHORITY;
            p--;
          }
          break;

        case ST_AUTHORITY: {
          // Scan to the end of the authority, then split off the userinfo
          // at the last '@' (every earlier '@' becomes part of it, as the
          // character-wise algorithm does with its "%40" prefix).
          let e = p;
          for (; e < len; e++) {
            const d = input.charCodeAt(e);
            if (d === 0x2f || d === 0x3f || d === 0x23 || (url.special && d === 0x5c)) break;
          }
          const auth = input.slice(p, e);
          const at = lastIndexOfCode(auth, 0x40, auth.length - 1);
          if (at !== -1) {
            const userinfo = auth.slice(0, at).replace(/@/g, '%40');
            setUserinfo(url, userinfo);
            if (at === auth.length - 1) return null;
            p += at + 1;
          }
          state = ST_HOST;
          p--;
          break;
        }

        case ST_HOST:
        case ST_HOSTNAME: {
          if (override && url.scheme === 'file') {
            p--;
            state = ST_FILE_HOST;
            break;
          }
          // Scan to a ":" outside brackets or the end of the host.
          let e = p, inside = false;
          for (; e < len; e++) {
            const d = input.charCodeAt(e);
            if (d === 0x3a && !inside) break;
            if (d === 0x2f || d === 0x3f || d === 0x23 || (url.special && d === 0x5c)) break;
            if (d === 0x5b) inside = true;
            else if (d === 0x5d) inside = false;
          }
          const hostInput = input.slice(p, e);
          p = e;
          if (e < len && input.charCodeAt(e) === 0x3a) {
            if (hostInput === '') return null;
            if (override === ST_HOSTNAME) return null;
            const host = parseHost(hostInput, !url.special);
            if (host === null) return null;
            url.host = host;
            state = ST_PORT;
          } else {
            p--;
            if (url.special && hostInput === '') return null;
            if (override && hostInput === '' && (url.username !== '' || url.password !== '' || url.port !== null)) return null;
            const host = parseHost(hostInput, !url.special);
            if (host === null) return null;
            url.host = host;
            state = ST_PATH_START;
            if (override) return url;
          }
          break;
        }

        case ST_PORT: {
          let e = p;
          while (e < len && input.charCodeAt(e) >= 0x30 && input.charCodeAt(e) <= 0x39) e++;
          const digits = input.slice(p, e);
          p = e;
          const d = e < len ? input.charCodeAt(e) : EOF;
          if (d === EOF || d === 0x2f || d === 0x3f || d === 0x23 || (url.special && d === 0x5c) || override) {
            if (digits !== '') {
              const port = parseInt(digits, 10);
              if (port > 65535) return null;
              url.port = port === defaultPort(url.scheme) ? null : port;
              if (override) return url;
            }
            if (override) return null;
            state = ST_PATH_START;
            p--;
          } else {
            return null;
          }
          break;
        }

        case ST_FILE:
          url.scheme = 'file';
          url.special = true;
          url.host = '';
          if (c === 0x2f || c === 0x5c) {
            state = ST_FILE_SLASH;
          } else if (base !== null && base.scheme === 'file') {
            url.host = base.host;
            url.path = base.path;
            url.query = base.query;
            if (c === 0x3f) {
              url.query = '';
              state = ST_QUERY;
            } else if (c === 0x23) {
              url.fragment = '';
              state = ST_FRAGMENT;
            } else if (c !== EOF) {
              url.query = null;
              if (!startsWithWindowsDriveLetter(input, p)) shortenPath(url);
              else url.path = '';
              state = ST_PATH;
              p--;
            }
          } else {
            state = ST_PATH;
            p--;
          }
          break;

        case ST_FILE_SLASH:
          if (c === 0x2f || c === 0x5c) {
            state = ST_FILE_HOST;
          } else {
            if (base !== null && base.scheme === 'file') {
              url.host = base.host;
              if (!startsWithWindowsDriveLetter(input, p) && !base.opaque) {
                const first = firstSegment(base.path);
                if (isNormalizedDriveLetter(first)) url.path += '/' + first;
              }
            }
            state = ST_PATH;
            p--;
          }
          break;

        case ST_FILE_HOST: {
          let e = p;
          for (; e < len; e++) {
            const d = input.charCodeAt(e);
            if (d === 0x2f || d === 0x5c || d === 0x3f || d === 0x23) break;
          }
          const hostInput = input.slice(p, e);
          p = e - 1;
          if (!override && isWindowsDriveLetter(hostInput)) {
            buf = hostInput;   // carried over as the first path segment
            state = ST_PATH;
          } else if (hostInput === '') {
            url.host = '';
            if (override) return url;
            state = ST_PATH_START;
          } else {
            let host = parseHost(hostInput, !url.special);
            if (host === null) return null;
            if (host === 'localhost') host = '';
            url.host = host;
            if (override) return url;
            state = ST_PATH_START;
          }
          break;
        }

        case ST_PATH_START:
          if (url.special) {
            state = ST_PATH;
            if (c !== 0x2f && c !== 0x5c) p--;
          } else if (!override && c === 0x3f) {
            url.query = '';
            state = ST_QUERY;
          } else if (!override && c === 0x23) {
            url.fragment = '';
            state = ST_FRAGMENT;
          } else if (c !== EOF) {
            state = ST_PATH;
            if (c !== 0x2f) p--;
          } else if (override && url.host === null) {
            url.path += '/';
          }
          break;

        case ST_PATH: {
          // One segment per run: scan to its end instead of appending code
          // points one at a time. The segments live in an array while the
          // state repeats, so ".." costs a pop, not a copy of the path.
          if (segs === null) segs = url.path === '' ? [] : url.path.slice(1).split('/');
          let e = p;
          for (; e < len; e++) {
            const d = input.charCodeAt(e);
            if (d === 0x2f || (url.special && d === 0x5c) || (!override && (d === 0x3f || d === 0x23))) break;
          }
          let seg = buf + percentEncode(input.slice(p, e), SET_PATH);
          buf = '';
          p = e;
          const t = e < len ? input.charCodeAt(e) : EOF;
          const slash = t === 0x2f || (url.special && t === 0x5c);
          if (isDoubleDot(seg)) {
            if (!(url.scheme === 'file' && segs.length === 1 && isNormalizedDriveLetter(segs[0]))) segs.pop();
            if (!slash) segs.push('');
          } else if (isSingleDot(seg)) {
            if (!slash) segs.push('');
          } else {
            if (url.scheme === 'file' && segs.length === 0 && isWindowsDriveLetter(seg)) {
              seg = seg[0] + ':';
            }
            segs.push(seg);
          }
          if (!slash) {
            url.path = segs.length === 0 ? '' : '/' + segs.join('/');
            segs = null;
          }
          if (t === 0x3f) {
            url.query = '';
            state = ST_QUERY;
          } else if (t === 0x23) {
            url.fragment = '';
            state = ST_FRAGMENT;
          }
          break;
        }

        case ST_OPAQUE_PATH: {
          let e = p;
          for (; e < len; e++) {
            const d = input.charCodeAt(e);
            if (d === 0x3f || d === 0x23) break;
          }
          let seg = percentEncode(input.slice(p, e), SET_C0);
          // A space right before the query or fragment is encoded so that
          // the path never ends in a space once those are removed.
          if (e < len && codeAt(seg, seg.length - 1) === 0x20) seg = seg.slice(0, -1) + '%20';
          url.path += seg;
          p = e;
          if (e < len) {
            if (input.charCodeAt(e) === 0x3f) {
              url.query = '';
              state = ST_QUERY;
            } else {
              url.fragment = '';
              state = ST_FRAGMENT;
            }
          }
          break;
        }

        case ST_QUERY: {
          let e = override ? -1 : input.indexOf('#', p);
          if (e === -1) e = len;
          url.query += percentEncode(input.slice(p, e), url.special ? SET_SPECIAL_QUERY : SET_QUERY);
          p = e;
          if (e < len) {
            url.fragment = '';
            state = ST_FRAGMENT;
          }
          break;
        }

        case ST_FRAGMENT:
          if (p < len) url.fragment += percentEncode(input.slice(p), SET_FRAGMENT);
          p = len;
          break;
      }
      if (p >= len) break;
      p++;
    }
    return url;
  }

  // The fast path's grammar: an absolute http(s) URL whose host is lower-
  // case LDH labels (no "xn--" label, last label not starting with a digit,
  // so neither IDNA nor IPv4 applies), whose path segments need no percent-
  // encoding and cannot be dot segments (none starts with "." or "%"), and
  // whose query and fragment hold no code point of their encode sets.
  // A regular expression keeps the scan in irregexp's code, which stays
  // fast whatever mix of string representations (cons, sliced, two-byte)
  // the program passes; charCodeAt loops slow down once they have seen
  // many of them.
  const FAST_URL = /^(https?):\/\/((?:(?!xn--)[a-z0-9-]+\.)*(?!xn--|[0-9])[a-z0-9-]+)(?::([0-9]{0,5}))?((?:\/(?![.%])[!$%&'()*+,\-.0-9:;=@A-Z[\]^_a-z|~]*)*)(?:\?([!$%&()*+,\-./0-9:;=?@A-Z[\\\]^_`a-z{|}~]*))?(?:#([!#$%&'()*+,\-./0-9:;=?@A-Z[\\\]^_a-z{|}~]*))?$/;

  // Parses an absolute http(s) URL that matches FAST_URL into the record
  // the basic URL parser would produce; null when it does not match.
  function fastParse(s) {
    const m = FAST_URL.exec(s);
    if (m === null) return null;
    const scheme = m[1];
    let canonical = true;
    let port = null;
    const digits = m[3];
    if (digits !== undefined) {
      // ":" with no digits, leading zeros and the default port all
      // serialize differently from the input.
      canonical = false;
      if (digits !== '') {
        const v = +digits;
        if (v > 65535) return null;
        if (v !== (scheme === 'http' ? 80 : 443)) {
          port = v;
          canonical = digits.charCodeAt(0) !== 0x30;
        }
      }
    }
    let path = m[4];
    if (path === '') {
      path = '/';
      canonical = false;
    }
    const query = m[5], fragment = m[6];
    return new URLRecord(scheme, '', '', m[2], port, path, false,
      query === undefined ? null : query, fragment === undefined ? null : fragment, true,
      canonical ? s : null);
  }

  // A path-absolute reference ("/a/b?q#f") in the same grammar, resolved
  // against a special, non-file base (the common new URL(path, request.url)).
  const FAST_PATH_ABSOLUTE = /^(?!\/\/)((?:\/(?![.%])[!$%&'()*+,\-.0-9:;=@A-Z[\]^_a-z|~]*)+)(?:\?([!$%&()*+,\-./0-9:;=?@A-Z[\\\]^_`a-z{|}~]*))?(?:#([!#$%&'()*+,\-./0-9:;=?@A-Z[\\\]^_a-z{|}~]*))?$/;

  function fastParseRelative(s, base) {
    if (!base.special || base.scheme === 'file' || codeAt(s, 0) !== 0x2f) return null;
    const m = FAST_PATH_ABSOLUTE.exec(s);
    if (m === null) return null;
    const query = m[2], fragment = m[3];
    return new URLRecord(base.scheme, base.username, base.password, base.host, base.port, m[1], false,
      query === undefined ? null : query, fragment === undefined ? null : fragment, true, null);
  }

  function parseURL(input, base) {
    if (base === null) {
      const r = fastParse(input);
      if (r !== null) return r;
    }
    return basicParse(toUSV(input), base, null, 0);
  }

  function parseWithBase(url, base) {
    let baseRecord = null;
    if (base !== undefined) {
      baseRecord = parseURL(toUSV(base), null);
      if (baseRecord === null) return null;
    }
    const input = typeof url === 'string' ? url : toUSV(url);
    let r = fastParse(input);
    if (r === null && baseRecord !== null) r = fastParseRelative(input, baseRecord);
    if (r === null) r = basicParse(toUSV(input), baseRecord, null, 0);
    return r;
  }

  function originOf(r) {
    switch (r.scheme) {
      case 'ftp': case 'http': case 'https': case 'ws': case 'wss':
        return r.scheme + '://' + r.host + (r.port !== null ? ':' + r.port : '');
      case 'blob': {
        const inner = basicParse(r.path, null, null, 0);
        if (inner !== null && (inner.scheme === 'http' || inner.scheme === 'https')) return originOf(inner);
        return 'null';
      }
      default:
        return 'null';
    }
  }

  function cannotHaveCredentialsOrPort(r) {
    return r.host === null || r.host === '' || r.scheme === 'file';
  }

  return { basicParse, fastParse, parseURL, parseWithBase, hrefOf, originOf,
    cannotHaveCredentialsOrPort, ST_SCHEME_START, ST_HOST, ST_HOSTNAME, ST_PORT, ST_PATH_START,
    ST_QUERY, ST_FRAGMENT };
})();
