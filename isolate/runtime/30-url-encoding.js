// URL Standard, first part: what the other url files share. USVString
// conversion and code-point helpers, percent-encoding and -decoding with the
// standard's encode sets, the application/x-www-form-urlencoded parser and
// serializer, and the WebIDL shape of the two classes.
//
// The URL files (30- to 35-url-*.js) need nothing from the rest of the
// runtime. Each is one function, run at load, that keeps its helpers private
// and returns what the files after it use; its first lines take what it
// needs of the objects the files before it returned.
//
// Like every url file, pure ASCII on purpose: every non-ASCII code point is
// written as an escape, so the embedded runtime does not depend on how the
// shim decodes its bytes.
//
// Takes nothing from the files before it.

const urlEncoding = (() => {

  // ------------------------------------------------------------------
  // Strings
  // ------------------------------------------------------------------

  const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
  const LONE_SURROGATE_G = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;

  // WebIDL USVString conversion: ToString (throws on symbols), then every
  // lone surrogate becomes U+FFFD.
  function toUSV(v) {
    const s = typeof v === 'string' ? v : `${v}`;
    for (let i = 0; i < s.length; i++) {
      const c = s.charCodeAt(i);
      if (c >= 0xd800 && c <= 0xdfff) {
        return LONE_SURROGATE.test(s) ? s.replace(LONE_SURROGATE_G, '\uFFFD') : s;
      }
    }
    return s;
  }

  // The code unit at i, or -1 past either end. Reading past the end with
  // charCodeAt yields NaN, and a single NaN turns the optimized code of
  // every comparison that sees it from integer to floating point.
  function codeAt(s, i) {
    return i >= 0 && i < s.length ? s.charCodeAt(i) : -1;
  }

  // String.prototype.lastIndexOf is a runtime call in V8; a loop over
  // char codes is several times faster for the short strings here.
  function lastIndexOfCode(s, code, from) {
    for (let i = from; i >= 0; i--) if (s.charCodeAt(i) === code) return i;
    return -1;
  }

  function requireArgs(got, need, what) {
    if (got < need) {
      throw new TypeError(`${what}: ${need} argument${need > 1 ? 's' : ''} required, but only ${got} present.`);
    }
  }

  // ------------------------------------------------------------------
  // Percent-encoding
  // ------------------------------------------------------------------

  const HEX = [];
  for (let i = 0; i < 256; i++) HEX.push((i < 16 ? '%0' : '%') + i.toString(16).toUpperCase());

  // One bit per percent-encode set; a set's bit is on for every ASCII code
  // point in it. Non-ASCII code points are in every set.
  const SET_C0 = 1, SET_FRAGMENT = 2, SET_QUERY = 4, SET_SPECIAL_QUERY = 8,
    SET_PATH = 16, SET_USERINFO = 32, SET_COMPONENT = 64, SET_FORM = 128;
  const ENCODE = new Uint8Array(128);
  (() => {
    const add = (bit, chars) => { for (let i = 0; i < chars.length; i++) ENCODE[chars.charCodeAt(i)] |= bit; };
    for (let c = 0; c < 0x20; c++) ENCODE[c] = 0xff;
    ENCODE[0x7f] = 0xff;
    add(SET_FRAGMENT, ' "<>`');
    add(SET_QUERY | SET_SPECIAL_QUERY | SET_PATH | SET_USERINFO | SET_COMPONENT | SET_FORM, ' "#<>');
    add(SET_SPECIAL_QUERY, "'");
    add(SET_PATH | SET_USERINFO | SET_COMPONENT | SET_FORM, '?`{}');
    add(SET_USERINFO | SET_COMPONENT | SET_FORM, '/:;=@[\\]^|');
    add(SET_COMPONENT | SET_FORM, '$%&+,');
    add(SET_FORM, "!'()~");
  })();

  // The UTF-8 percent-encoding of the non-ASCII code point c at s[i] (with
  // the low surrogate at s[i + 1] when c is a high one; lone surrogates
  // encode as U+FFFD).
  function encodeCodePoint(s, i, c) {
    if (c < 0x800) {
      return HEX[0xc0 | (c >> 6)] + HEX[0x80 | (c & 0x3f)];
    }
    if (c >= 0xd800 && c <= 0xdfff) {
      const d = codeAt(s, i + 1);
      if (c <= 0xdbff && d >= 0xdc00 && d <= 0xdfff) {
        const cp = 0x10000 + ((c - 0xd800) << 10) + (d - 0xdc00);
        return HEX[0xf0 | (cp >> 18)] + HEX[0x80 | ((cp >> 12) & 0x3f)] +
          HEX[0x80 | ((cp >> 6) & 0x3f)] + HEX[0x80 | (cp & 0x3f)];
      }
      c = 0xfffd;
    }
    return HEX[0xe0 | (c >> 12)] + HEX[0x80 | ((c >> 6) & 0x3f)] + HEX[0x80 | (c & 0x3f)];
  }

  // UTF-8 percent-encodes every code point of s that is in the set `bit`.
  function percentEncode(s, bit) {
    const len = s.length;
    let i = 0;
    for (; i < len; i++) {
      const c = s.charCodeAt(i);
      if (c >= 0x80 || (ENCODE[c] & bit) !== 0) break;
    }
    if (i === len) return s;
    let out = s.slice(0, i);
    let run = i;
    for (; i < len; i++) {
      const c = s.charCodeAt(i);
      if (c < 0x80) {
        if ((ENCODE[c] & bit) === 0) continue;
        out += s.slice(run, i) + HEX[c];
      } else {
        out += s.slice(run, i) + encodeCodePoint(s, i, c);
        if (c >= 0xd800 && c <= 0xdbff) {
          const d = codeAt(s, i + 1);
          if (d >= 0xdc00 && d <= 0xdfff) i++;
        }
      }
      run = i + 1;
    }
    return out + s.slice(run);
  }

  // application/x-www-form-urlencoded byte serializer for one string.
  function formEncode(s) {
    const len = s.length;
    let i = 0;
    for (; i < len; i++) {
      const c = s.charCodeAt(i);
      if (c >= 0x80 || (ENCODE[c] & SET_FORM) !== 0) break;
    }
    if (i === len) return s;
    let out = s.slice(0, i);
    let run = i;
    for (; i < len; i++) {
      const c = s.charCodeAt(i);
      if (c < 0x80) {
        if ((ENCODE[c] & SET_FORM) === 0) continue;
        out += s.slice(run, i) + (c === 0x20 ? '+' : HEX[c]);
      } else {
        out += s.slice(run, i) + encodeCodePoint(s, i, c);
        if (c >= 0xd800 && c <= 0xdbff) {
          const d = codeAt(s, i + 1);
          if (d >= 0xdc00 && d <= 0xdfff) i++;
        }
      }
      run = i + 1;
    }
    return out + s.slice(run);
  }

  function hexValue(c) {
    if (c >= 0x30 && c <= 0x39) return c - 0x30;
    c |= 0x20;
    if (c >= 0x61 && c <= 0x66) return c - 0x61 + 10;
    return -1;
  }

  // WHATWG "UTF-8 decode without BOM" of a byte array (errors become U+FFFD).
  function utf8DecodeBytes(bytes) {
    let out = '';
    let needed = 0, seen = 0, cp = 0, lower = 0x80, upper = 0xbf;
    for (let i = 0; i < bytes.length; i++) {
      const b = bytes[i];
      if (needed === 0) {
        if (b <= 0x7f) out += String.fromCharCode(b);
        else if (b >= 0xc2 && b <= 0xdf) { needed = 1; cp = b & 0x1f; }
        else if (b >= 0xe0 && b <= 0xef) {
          if (b === 0xe0) lower = 0xa0;
          if (b === 0xed) upper = 0x9f;
          needed = 2; cp = b & 0xf;
        } else if (b >= 0xf0 && b <= 0xf4) {
          if (b === 0xf0) lower = 0x90;
          if (b === 0xf4) upper = 0x8f;
          needed = 3; cp = b & 0x7;
        } else out += '\uFFFD';
        continue;
      }
      if (b < lower || b > upper) {
        needed = seen = cp = 0; lower = 0x80; upper = 0xbf;
        out += '\uFFFD';
        i--;
        continue;
      }
      lower = 0x80; upper = 0xbf;
      cp = (cp << 6) | (b & 0x3f);
      if (++seen === needed) {
        out += String.fromCodePoint(cp);
        needed = seen = cp = 0;
      }
    }
    if (needed !== 0) out += '\uFFFD';
    return out;
  }

  // Percent-decodes s (as UTF-8 bytes) and decodes the result as UTF-8.
  // Runs of %XX are decoded on their own: a literal code point between two
  // runs is a complete UTF-8 sequence, so the decoder would resynchronise
  // there anyway.
  function percentDecode(s) {
    let i = s.indexOf('%');
    if (i === -1) return s;
    const len = s.length;
    let out = '', last = 0;
    while (i !== -1) {
      if (i + 2 >= len) break;
      const h = hexValue(s.charCodeAt(i + 1)), l = hexValue(s.charCodeAt(i + 2));
      if (h < 0 || l < 0) { i = s.indexOf('%', i + 1); continue; }
      out += s.slice(last, i);
      const bytes = [];
      while (i + 2 < len && s.charCodeAt(i) === 0x25) {
        const a = hexValue(s.charCodeAt(i + 1)), b = hexValue(s.charCodeAt(i + 2));
        if (a < 0 || b < 0) break;
        bytes.push((a << 4) | b);
        i += 3;
      }
      out += utf8DecodeBytes(bytes);
      last = i;
      i = s.indexOf('%', i);
    }
    return out + s.slice(last);
  }

  // ------------------------------------------------------------------
  // application/x-www-form-urlencoded
  // ------------------------------------------------------------------

  function formDecode(s) {
    if (s.indexOf('+') !== -1) s = s.replace(/\+/g, ' ');
    return percentDecode(s);
  }

  // Parses into a flat [name0, value0, name1, value1, ...] list.
  function formParse(input) {
    const list = [];
    const len = input.length;
    let start = 0;
    while (start <= len) {
      let end = input.indexOf('&', start);
      if (end === -1) end = len;
      if (end > start) {
        // Look for "=" inside this sequence only: searching the rest of
        // the input would make "a&a&a..." quadratic.
        const seq = input.slice(start, end);
        const eq = seq.indexOf('=');
        if (eq !== -1) {
          list.push(formDecode(seq.slice(0, eq)), formDecode(seq.slice(eq + 1)));
        } else {
          list.push(formDecode(seq), '');
        }
      }
      start = end + 1;
    }
    return list;
  }

  function formSerialize(list) {
    let out = '';
    for (let i = 0; i < list.length; i += 2) {
      if (i !== 0) out += '&';
      out += formEncode(list[i]) + '=' + formEncode(list[i + 1]);
    }
    return out;
  }

  // ------------------------------------------------------------------
  // Punycode (RFC 3492)
  // ------------------------------------------------------------------

  // WebIDL shapes: operations and attributes are enumerable, and the class
  // string tags are set. (URLSearchParams' @@iterator, entries(), is added
  // after.)
  function webidlShape(C, tag) {
    for (const key of Reflect.ownKeys(C.prototype)) {
      if (key === 'constructor') continue;
      const d = Reflect.getOwnPropertyDescriptor(C.prototype, key);
      d.enumerable = true;
      Reflect.defineProperty(C.prototype, key, d);
    }
    Reflect.defineProperty(C.prototype, Symbol.toStringTag, { value: tag, configurable: true });
  }

  return { toUSV, codeAt, lastIndexOfCode, requireArgs, hexValue, percentEncode, percentDecode,
    SET_C0, SET_FRAGMENT, SET_QUERY, SET_SPECIAL_QUERY, SET_PATH, SET_USERINFO, formParse,
    formSerialize, webidlShape };
})();
