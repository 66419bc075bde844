// URL and URLSearchParams (WHATWG URL Standard).
//
// One IIFE keeps every helper private; only the two classes leave it.
// A URL is held as a record of components (scheme, userinfo, host, port,
// path, query, fragment). The path of a hierarchical URL is kept already
// serialized ("/a/b"), which makes pathname free and path shortening a
// lastIndexOf. href is serialized on demand and cached until a setter runs.
//
// new URL() of a plain ASCII http(s) URL that needs no percent-encoding,
// no IDNA and no dot-segment removal takes fastParse(), one regular
// expression match that yields the record the state machine would.
//
// The file is pure ASCII on purpose: every non-ASCII code point below is
// written as an escape, so the embedded runtime does not depend on how the
// shim decodes its bytes.
const { URL, URLSearchParams } = (() => {
  const ReflectApply = Reflect.apply;
  const nativeToASCII =
    typeof native === 'object' && native !== null &&
    typeof native.domainToASCII === 'function' ? native.domainToASCII : null;
  const nativeSelf = nativeToASCII !== null ? native : null;

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

  const PUNY_MAX = 0x7fffffff;

  function punyAdapt(delta, numPoints, first) {
    delta = first ? Math.floor(delta / 700) : delta >> 1;
    delta += Math.floor(delta / numPoints);
    let k = 0;
    while (delta > 455) { delta = Math.floor(delta / 35); k += 36; }
    return k + Math.floor((36 * delta) / (delta + 38));
  }

  // Code points (array) -> Punycode without the "xn--" prefix, or null.
  function punyEncode(cps) {
    const out = [];
    for (let j = 0; j < cps.length; j++) if (cps[j] < 0x80) out.push(cps[j]);
    const b = out.length;
    let h = b;
    if (b > 0) out.push(0x2d);
    let n = 0x80, delta = 0, bias = 72;
    while (h < cps.length) {
      let m = 0x10ffff + 1;
      for (let j = 0; j < cps.length; j++) if (cps[j] >= n && cps[j] < m) m = cps[j];
      if (m - n > Math.floor((PUNY_MAX - delta) / (h + 1))) return null;
      delta += (m - n) * (h + 1);
      n = m;
      for (let j = 0; j < cps.length; j++) {
        const c = cps[j];
        if (c < n && ++delta > PUNY_MAX) return null;
        if (c === n) {
          let q = delta;
          for (let k = 36; ; k += 36) {
            const t = k <= bias ? 1 : k >= bias + 26 ? 26 : k - bias;
            if (q < t) break;
            const d = t + ((q - t) % (36 - t));
            out.push(d < 26 ? 0x61 + d : 0x16 + d);
            q = Math.floor((q - t) / (36 - t));
          }
          out.push(q < 26 ? 0x61 + q : 0x16 + q);
          bias = punyAdapt(delta, h + 1, h === b);
          delta = 0;
          h++;
        }
      }
      delta++;
      n++;
    }
    return fromCodes(out);
  }

  // String.fromCharCode over an array of code units, in chunks small
  // enough for the argument list.
  function fromCodes(codes) {
    let out = '';
    for (let i = 0; i < codes.length; i += 4096) {
      out += String.fromCharCode.apply(null, codes.slice(i, i + 4096));
    }
    return out;
  }

  // Punycode (without "xn--") -> string, or null when invalid.
  function punyDecode(s) {
    const out = [];
    const b = s.lastIndexOf('-');
    for (let j = 0; j < b; j++) {
      const c = s.charCodeAt(j);
      if (c >= 0x80) return null;
      out.push(c);
    }
    let n = 0x80, i = 0, bias = 72;
    for (let pos = b > 0 ? b + 1 : 0; pos < s.length;) {
      const oldi = i;
      let w = 1;
      for (let k = 36; ; k += 36) {
        if (pos >= s.length) return null;
        const c = s.charCodeAt(pos++);
        const d = c >= 0x30 && c <= 0x39 ? c - 22 : c >= 0x41 && c <= 0x5a ? c - 0x41 :
          c >= 0x61 && c <= 0x7a ? c - 0x61 : 36;
        if (d >= 36) return null;
        if (d > Math.floor((PUNY_MAX - i) / w)) return null;
        i += d * w;
        const t = k <= bias ? 1 : k >= bias + 26 ? 26 : k - bias;
        if (d < t) break;
        if (w > Math.floor(PUNY_MAX / (36 - t))) return null;
        w *= 36 - t;
      }
      const count = out.length + 1;
      bias = punyAdapt(i - oldi, count, oldi === 0);
      if (Math.floor(i / count) > PUNY_MAX - n) return null;
      n += Math.floor(i / count);
      i %= count;
      if (n > 0x10ffff || (n >= 0xd800 && n <= 0xdfff)) return null;
      out.splice(i, 0, n);
      i++;
    }
    let r = '';
    for (let j = 0; j < out.length; j++) r += String.fromCodePoint(out[j]);
    return r;
  }

  // ------------------------------------------------------------------
  // IDNA: UTS #46 ToASCII with the URL Standard's flags (CheckHyphens off,
  // CheckBidi on, CheckJoiners on, UseSTD3ASCIIRules off, nontransitional,
  // no DNS length check). The mapping step is NFKC + lowercasing with the
  // few exceptions that differ from UTS #46; the native helper, when the
  // shim has one, is exact.
  // ------------------------------------------------------------------

  const NON_ASCII = /[^\x00-\x7f]/;
  const IDNA_IGNORED = /[\u00AD\u034F\u180B-\u180D\u180F\u200B\u2060\u2064\uFE00-\uFE0F\uFEFF\u{1BCA0}-\u{1BCA3}\u{E0100}-\u{E01EF}]/gu;
  const IDNA_DOTS = /[.\u3002\uFF0E\uFF61]/g;
  // Disallowed before mapping although NFKC and lowercasing would map
  // them: case pairs completed after Unicode 3.2, Hangul fillers, Khmer
  // inherent vowels, a few CJK compatibility ideographs.
  const IDNA_DISALLOWED_SOURCE = /[\u04C0\u10A0-\u10C5\u115F\u1160\u17B4\u17B5\u1806\u2132\u2183\u3164\uFFA0\u{2F868}\u{2F874}\u{2F91F}\u{2F95F}\u{2F9BF}]/u;
  // Disallowed after mapping: controls, surrogates, private use, unassigned,
  // line/paragraph separators, non-ASCII spaces, format characters other
  // than the joiners (which CheckJoiners judges) and the specials block.
  const IDNA_DISALLOWED = /[\p{Cc}\p{Cs}\p{Co}\p{Cn}\p{Zl}\p{Zp}\u00A0\u1680\u2000-\u200A\u202F\u205F\u3000\uFFF9-\uFFFD\u2FF0-\u2FFF]|(?![\u200C\u200D])\p{Cf}/u;
  // Compatibility forms of final sigma fold to sigma (only U+03C2 itself
  // is kept, as a deviation).
  const IDNA_SIGMA_FORMS = /[\u03A3\u03F2\u{1D6BA}\u{1D6D3}\u{1D6F4}\u{1D70D}\u{1D72E}\u{1D747}\u{1D768}\u{1D781}\u{1D7A2}\u{1D7BB}]/gu;
  // Where full case folding differs from toLowerCase(): upper-then-lower
  // case gives the folded form.
  const IDNA_FOLD = /[\u0345\u1C80-\u1C88\u1F80-\u1FAF\u1FB2-\u1FB4\u1FB7\u1FBC\u1FC2-\u1FC4\u1FC7\u1FCC\u1FF2-\u1FF4\u1FF7\u1FFC]/g;
  const CHEROKEE_SMALL = /[\uAB70-\uABBF\u13F8-\u13FD]/;
  const CHEROKEE_SMALL_G = /[\uAB70-\uABBF\u13F8-\u13FD]/g;

  function countDots(s) {
    const m = s.match(IDNA_DOTS);
    return m === null ? 0 : m.length;
  }

  // UTS #46 mapping of a whole domain; null when a code point is disallowed.
  function idnaMap(s) {
    if (!NON_ASCII.test(s)) return s.toLowerCase();
    s = s.replace(IDNA_IGNORED, '');
    if (IDNA_DISALLOWED_SOURCE.test(s)) return null;
    const dots = countDots(s);
    s = s.replace(IDNA_SIGMA_FORMS, '\u03C3').normalize('NFKC').replace(IDNA_SIGMA_FORMS, '\u03C3');
    // Capital sharp s folds to "ss"; small sharp s stays (a deviation).
    if (s.indexOf('\u1E9E') !== -1) s = s.replace(/\u1E9E/g, 'ss');
    s = s.toLowerCase().replace(IDNA_FOLD, (ch) => ch.toUpperCase().toLowerCase());
    // Cherokee case-folds to the capital letters.
    if (CHEROKEE_SMALL.test(s)) {
      s = s.replace(CHEROKEE_SMALL_G, (ch) => {
        const c = ch.charCodeAt(0);
        return String.fromCharCode(c >= 0xab70 ? c - 0xab70 + 0x13a0 : c - 8);
      });
    }
    s = s.normalize('NFC').replace(IDNA_DOTS, '.');
    // A code point whose mapping holds a full stop ("1." for U+2488) is
    // disallowed: mapping must not create label separators.
    if (countDots(s) !== dots) return null;
    if (IDNA_DISALLOWED.test(s)) return null;
    return s;
  }

  // Code points with Canonical_Combining_Class Virama (ccc = 9).
  const VIRAMA = /[\u094D\u09CD\u0A4D\u0ACD\u0B4D\u0BCD\u0C4D\u0CCD\u0D3B\u0D3C\u0D4D\u0DCA\u0E3A\u0EBA\u0F84\u1039\u103A\u1714\u1715\u1734\u17D2\u1A60\u1B44\u1BAA\u1BAB\u1BF2\u1BF3\u2D7F\uA806\uA82C\uA8C4\uA953\uA9C0\uAAF6\uABED\u{10A3F}\u{11046}\u{11070}\u{1107F}\u{110B9}\u{11133}\u{11134}\u{111C0}\u{11235}\u{112EA}\u{1134D}\u{11442}\u{114C2}\u{115BF}\u{1163F}\u{116B6}\u{1172B}\u{11839}\u{1193D}\u{1193E}\u{119E0}\u{11A34}\u{11A47}\u{11A99}\u{11C3F}\u{11D44}\u{11D45}\u{11D97}\u{11F41}\u{11F42}]/u;
  // Joining_Type classes for the ZWNJ context rule (RFC 5892 A.1).
  const JT_TRANSPARENT = /^(?![\u200C\u200D])[\p{Mn}\p{Me}\p{Cf}]$/u;
  const JT_RIGHT = /^[\u0622-\u0625\u0627\u0629\u062F-\u0632\u0648\u0671-\u0673\u0675-\u0677\u0688-\u0699\u06C0\u06C3-\u06CB\u06CD\u06CF\u06D2\u06D3\u06D5\u06EE\u06EF\u0710\u0715-\u0719\u071E\u0728\u072A\u072C\u072F\u074D\u0759-\u075B\u076B\u076C\u0771\u0773\u0774\u0778\u0779\u0840\u0846\u0847\u0849\u084E\u0854\u0856-\u0858\u0867\u0869-\u086A\u0870-\u0882\u088E\u08AA-\u08AC\u08AE\u08B1\u08B2\u08B9\u{10AC5}\u{10AC7}\u{10AC9}\u{10ACA}\u{10ACE}-\u{10AD2}\u{10ADD}\u{10AE1}\u{10AE4}\u{10B81}\u{10B83}-\u{10B85}\u{10B89}\u{10B8C}\u{10B8E}\u{10B8F}\u{10B91}\u{10F33}\u{10F54}]$/u;
  const JT_LEFT = /^[\uA872\u{10ACD}\u{10AD7}\u{10D00}]$/u;
  const JT_DUAL = /^[\u0620-\u064A\u066E-\u06FF\u0712-\u074F\u0750-\u077F\u07CA-\u07EA\u0841-\u0858\u0860-\u086A\u08A0-\u08C9\u1807\u1820-\u1878\u1887-\u18A8\u18AA\uA840-\uA871\u{10AC0}-\u{10AE4}\u{10B80}-\u{10BAF}\u{10D01}-\u{10D23}\u{10F30}-\u{10F54}\u{1E900}-\u{1E943}]$/u;
  const JT_NONJOINING = /^[\u0621\u0674\u06FD\u06FE]$/u;

  function joiningType(ch) {
    if (JT_TRANSPARENT.test(ch)) return 'T';
    if (JT_RIGHT.test(ch)) return 'R';
    if (JT_LEFT.test(ch)) return 'L';
    if (JT_NONJOINING.test(ch)) return 'U';
    if (JT_DUAL.test(ch) && /^\p{L}$/u.test(ch)) return 'D';
    return 'U';
  }

  // CheckJoiners (RFC 5892 Appendix A.1 and A.2) on an array of characters.
  function joinersOk(chars) {
    for (let i = 0; i < chars.length; i++) {
      const ch = chars[i];
      if (ch !== '\u200C' && ch !== '\u200D') continue;
      if (i > 0 && VIRAMA.test(chars[i - 1])) continue;
      if (ch === '\u200D') return false;
      let j = i - 1;
      while (j >= 0 && joiningType(chars[j]) === 'T') j--;
      if (j < 0) return false;
      const before = joiningType(chars[j]);
      if (before !== 'L' && before !== 'D') return false;
      j = i + 1;
      while (j < chars.length && joiningType(chars[j]) === 'T') j++;
      if (j >= chars.length) return false;
      const after = joiningType(chars[j]);
      if (after !== 'R' && after !== 'D') return false;
    }
    return true;
  }

  // Bidi_Class, to the precision the RFC 5893 rules need.
  const BIDI_AN = /^[\u0600-\u0605\u0660-\u0669\u066B\u066C\u06DD\u0890\u0891\u08E2\u{10D30}-\u{10D39}\u{10E60}-\u{10E7E}]$/u;
  const BIDI_EN = /^[0-9\u00B2\u00B3\u00B9\u06F0-\u06F9\u2070\u2074-\u2079\u2080-\u2089\u2488-\u249B\uFF10-\uFF19\u{102E1}-\u{102FB}\u{1D7CE}-\u{1D7FF}\u{1F100}-\u{1F10A}\u{1FBF0}-\u{1FBF9}]$/u;
  const BIDI_NSM = /^[\p{Mn}\p{Me}]$/u;
  // The right-to-left blocks; inside them every code point is R or AL
  // unless listed as ET, CS or ON.
  const BIDI_R = /^[\u0590-\u05FF\u07C0-\u085F\uFB1D-\uFB4F\u{10800}-\u{10CFF}\u{10D40}-\u{10EBF}\u{10F00}-\u{10F2F}\u{10F70}-\u{10FFF}\u{1E800}-\u{1EC6F}\u{1ECC0}-\u{1ECFF}\u{1ED50}-\u{1EDFF}\u{1EF00}-\u{1EFFF}]$/u;
  const BIDI_AL = /^[\u0600-\u07BF\u0860-\u08FF\uFB50-\uFDFF\uFE70-\uFEFF\u{10D00}-\u{10D3F}\u{10EC0}-\u{10EFF}\u{10F30}-\u{10F6F}\u{1EC70}-\u{1ECBF}\u{1ED00}-\u{1ED4F}\u{1EE00}-\u{1EEFF}]$/u;
  const BIDI_RTL_ET = /^[\u0609\u060A\u066A]$/u;
  const BIDI_RTL_CS = /^\u060C$/u;
  const BIDI_RTL_ON = /^[\u0606\u0607\u060E\u060F\u06DE\u06E9\u07F6-\u07F9\uFD3E-\uFD4F\uFDCF\uFDFD-\uFDFF\u{1091F}\u{10B39}-\u{10B3F}\u{1EEF0}\u{1EEF1}]$/u;
  const BIDI_ET = /^[#$%\u00A2-\u00A5\u00B0\u00B1\u2030-\u2034\u212E\u2213\p{Sc}]$/u;
  const BIDI_CS = /^[,./:\u00A0\u202F\u2044\uFE50\uFE52\uFE55\uFF0C\uFF0E\uFF0F\uFF1A]$/u;
  const BIDI_ES = /^[+\-\u207A\u207B\u208A\u208B\u2212\uFB29\uFE62\uFE63\uFF0B\uFF0D]$/u;
  const BIDI_ON = /^[\p{P}\p{S}\p{No}]$/u;

  function bidiClass(ch) {
    if (BIDI_AN.test(ch)) return 'AN';
    if (BIDI_EN.test(ch)) return 'EN';
    if (BIDI_NSM.test(ch)) return 'NSM';
    if (BIDI_R.test(ch) || BIDI_AL.test(ch)) {
      if (BIDI_RTL_ET.test(ch)) return 'ET';
      if (BIDI_RTL_CS.test(ch)) return 'CS';
      if (BIDI_RTL_ON.test(ch)) return 'ON';
      if (/^\p{Cf}$/u.test(ch)) return 'BN';
      return BIDI_R.test(ch) ? 'R' : 'AL';
    }
    if (BIDI_ES.test(ch)) return 'ES';
    if (BIDI_CS.test(ch)) return 'CS';
    if (BIDI_ET.test(ch)) return 'ET';
    if (/^\p{Cf}$/u.test(ch)) return 'BN';
    if (/^[\p{Zs}]$/u.test(ch)) return 'WS';
    if (/^\p{Cc}$/u.test(ch)) return 'BN';
    if (BIDI_ON.test(ch)) return 'ON';
    return 'L';
  }

  const RTL_CHAR = /[\u0590-\u08FF\uFB1D-\uFDFF\uFE70-\uFEFF\u{10800}-\u{10FFF}\u{1E800}-\u{1EFFF}]/u;

  // RFC 5893 section 2, applied to a label that holds R, AL or AN.
  function bidiLabelOk(classes) {
    const first = classes[0];
    let last = classes.length - 1;
    while (last > 0 && classes[last] === 'NSM') last--;
    if (first === 'R' || first === 'AL') {
      let en = false, an = false;
      for (const k of classes) {
        if (k === 'EN') en = true;
        else if (k === 'AN') an = true;
        else if (k !== 'R' && k !== 'AL' && k !== 'ES' && k !== 'CS' && k !== 'ET' &&
          k !== 'ON' && k !== 'BN' && k !== 'NSM') return false;
      }
      if (en && an) return false;
      const e = classes[last];
      return e === 'R' || e === 'AL' || e === 'EN' || e === 'AN';
    }
    if (first === 'L') {
      for (const k of classes) {
        if (k !== 'L' && k !== 'EN' && k !== 'ES' && k !== 'CS' && k !== 'ET' &&
          k !== 'ON' && k !== 'BN' && k !== 'NSM') return false;
      }
      const e = classes[last];
      return e === 'L' || e === 'EN';
    }
    return false;
  }

  const MARK_FIRST = /^\p{M}/u;

  // Validity criteria (UTS #46 section 4.1) for one Unicode label; the
  // label is already mapped and NFC.
  function idnaLabelOk(label) {
    if (label === '') return true;
    if (label.startsWith('xn--')) return false;
    if (MARK_FIRST.test(label)) return false;
    if (!NON_ASCII.test(label)) return true;
    const chars = Array.from(label);
    if ((label.indexOf('\u200C') !== -1 || label.indexOf('\u200D') !== -1) && !joinersOk(chars)) return false;
    if (RTL_CHAR.test(label)) {
      const classes = chars.map(bidiClass);
      if (classes.some((k) => k === 'R' || k === 'AL' || k === 'AN') && !bidiLabelOk(classes)) return false;
    }
    return true;
  }

  function idnaToASCIIJS(domain) {
    const mapped = idnaMap(domain);
    if (mapped === null) return null;
    const labels = mapped.split('.');
    for (let i = 0; i < labels.length; i++) {
      const label = labels[i];
      if (label.startsWith('xn--')) {
        if (NON_ASCII.test(label)) return null;
        const decoded = punyDecode(label.slice(4));
        if (decoded === null || decoded === '' || !NON_ASCII.test(decoded)) return null;
        if (decoded.normalize('NFC') !== decoded || idnaMap(decoded) !== decoded ||
          decoded.indexOf('.') !== -1 || !idnaLabelOk(decoded)) return null;
      } else {
        if (!idnaLabelOk(label)) return null;
        if (NON_ASCII.test(label)) {
          const cps = [];
          for (let j = 0; j < label.length; j++) {
            const cp = label.codePointAt(j);
            cps.push(cp);
            if (cp > 0xffff) j++;
          }
          const enc = punyEncode(cps);
          if (enc === null) return null;
          labels[i] = 'xn--' + enc;
        }
      }
    }
    return labels.join('.');
  }

  const FORBIDDEN_HOST = /[\x00\t\n\r #/:<>?@[\\\]^|]/;
  const FORBIDDEN_DOMAIN = /[\x00-\x20#%/:<>?@[\\\]^|\x7f]/;

  // Forbidden domain code points among ASCII.
  const FORBIDDEN_DOMAIN_ASCII = new Uint8Array(128);
  for (let c = 0; c <= 0x20; c++) FORBIDDEN_DOMAIN_ASCII[c] = 1;
  for (const ch of '#%/:<>?@[\\]^|\x7f') FORBIDDEN_DOMAIN_ASCII[ch.charCodeAt(0)] = 1;

  // The URL Standard's "domain to ASCII" with beStrict false.
  function domainToASCII(domain) {
    // ASCII without "xn--" labels: UTS #46 only lowercases.
    let i = 0, upper = false, bad = false, label = 0;
    const len = domain.length;
    for (; i < len; i++) {
      const c = domain.charCodeAt(i);
      if (c >= 0x80) break;
      if (i === label && (c | 0x20) === 0x78 && (codeAt(domain, i + 1) | 0x20) === 0x6e &&
        codeAt(domain, i + 2) === 0x2d && codeAt(domain, i + 3) === 0x2d) break;
      if (c >= 0x41 && c <= 0x5a) upper = true;
      else if (FORBIDDEN_DOMAIN_ASCII[c] === 1) bad = true;
      else if (c === 0x2e) label = i + 1;
    }
    if (i === len) {
      if (bad || len === 0) return null;
      return upper ? domain.toLowerCase() : domain;
    }
    let result;
    if (nativeToASCII !== null) {
      result = `${ReflectApply(nativeToASCII, nativeSelf, [domain])}`;
      if (result === '') return null;
    } else {
      result = idnaToASCIIJS(domain);
      if (result === null) return null;
    }
    if (result === '' || FORBIDDEN_DOMAIN.test(result)) return null;
    return result;
  }

  // ------------------------------------------------------------------
  // Hosts
  // ------------------------------------------------------------------

  // IPv4 number parser: value, or -1 on failure.
  function ipv4Number(s) {
    if (s === '') return -1;
    let radix = 10;
    if (s.length >= 2 && s.charCodeAt(0) === 0x30 && (s.charCodeAt(1) | 0x20) === 0x78) {
      s = s.slice(2);
      radix = 16;
    } else if (s.length >= 2 && s.charCodeAt(0) === 0x30) {
      s = s.slice(1);
      radix = 8;
    }
    if (s === '') return 0;
    const re = radix === 10 ? /^[0-9]+$/ : radix === 16 ? /^[0-9a-fA-F]+$/ : /^[0-7]+$/;
    if (!re.test(s)) return -1;
    return parseInt(s, radix);
  }

  function endsInANumber(s) {
    let end = s.length;
    if (end > 0 && s.charCodeAt(end - 1) === 0x2e) end--;
    const start = lastIndexOfCode(s, 0x2e, end - 1) + 1;
    // Both a decimal number and an IPv4 number start with a digit.
    const c = codeAt(s, start);
    if (start >= end || c < 0x30 || c > 0x39) return false;
    const last = s.slice(start, end);
    if (/^[0-9]+$/.test(last)) return true;
    return ipv4Number(last) !== -1;
  }

  // IPv4 parser; returns the serialized address or null.
  function parseIPv4(s) {
    const parts = s.split('.');
    if (parts[parts.length - 1] === '' && parts.length > 1) parts.pop();
    if (parts.length > 4) return null;
    const nums = [];
    for (const part of parts) {
      const n = ipv4Number(part);
      if (n === -1) return null;
      nums.push(n);
    }
    for (let i = 0; i < nums.length - 1; i++) if (nums[i] > 255) return null;
    const lastNum = nums[nums.length - 1];
    if (lastNum >= 256 ** (5 - nums.length)) return null;
    let ipv4 = lastNum;
    for (let i = 0; i < nums.length - 1; i++) ipv4 += nums[i] * 256 ** (3 - i);
    return `${Math.floor(ipv4 / 16777216)}.${Math.floor(ipv4 / 65536) % 256}.${Math.floor(ipv4 / 256) % 256}.${ipv4 % 256}`;
  }

  // IPv6 parser; returns the 8 pieces or null.
  function parseIPv6(s) {
    const address = [0, 0, 0, 0, 0, 0, 0, 0];
    const len = s.length;
    let pieceIndex = 0, compress = -1, p = 0;
    const at = (i) => (i < len ? s.charCodeAt(i) : -1);
    if (at(0) === 0x3a) {
      if (at(1) !== 0x3a) return null;
      p = 2;
      compress = ++pieceIndex;
    }
    while (at(p) !== -1) {
      if (pieceIndex === 8) return null;
      if (at(p) === 0x3a) {
        if (compress !== -1) return null;
        p++;
        compress = ++pieceIndex;
        continue;
      }
      let value = 0, length = 0;
      while (length < 4 && hexValue(at(p)) >= 0) {
        value = value * 16 + hexValue(at(p));
        p++;
        length++;
      }
      if (at(p) === 0x2e) {
        if (length === 0) return null;
        p -= length;
        if (pieceIndex > 6) return null;
        let numbersSeen = 0;
        while (at(p) !== -1) {
          let ipv4Piece = -1;
          if (numbersSeen > 0) {
            if (at(p) === 0x2e && numbersSeen < 4) p++;
            else return null;
          }
          let c = at(p);
          if (c < 0x30 || c > 0x39) return null;
          while (c >= 0x30 && c <= 0x39) {
            const number = c - 0x30;
            if (ipv4Piece === -1) ipv4Piece = number;
            else if (ipv4Piece === 0) return null;
            else ipv4Piece = ipv4Piece * 10 + number;
            if (ipv4Piece > 255) return null;
            c = at(++p);
          }
          address[pieceIndex] = address[pieceIndex] * 0x100 + ipv4Piece;
          numbersSeen++;
          if (numbersSeen === 2 || numbersSeen === 4) pieceIndex++;
        }
        if (numbersSeen !== 4) return null;
        break;
      } else if (at(p) === 0x3a) {
        p++;
        if (at(p) === -1) return null;
      } else if (at(p) !== -1) {
        return null;
      }
      address[pieceIndex++] = value;
    }
    if (compress !== -1) {
      let swaps = pieceIndex - compress;
      pieceIndex = 7;
      while (pieceIndex !== 0 && swaps > 0) {
        const t = address[pieceIndex];
        address[pieceIndex] = address[compress + swaps - 1];
        address[compress + swaps - 1] = t;
        pieceIndex--;
        swaps--;
      }
    } else if (pieceIndex !== 8) {
      return null;
    }
    return address;
  }

  function serializeIPv6(a) {
    // The first longest run of two or more zero pieces is compressed.
    let best = -1, bestLen = 1;
    for (let i = 0; i < 8;) {
      if (a[i] !== 0) { i++; continue; }
      let j = i;
      while (j < 8 && a[j] === 0) j++;
      if (j - i > bestLen) { best = i; bestLen = j - i; }
      i = j;
    }
    let out = '';
    for (let i = 0; i < 8; i++) {
      if (i === best) {
        out += i === 0 ? '::' : ':';
        i += bestLen - 1;
        continue;
      }
      out += a[i].toString(16);
      if (i !== 7) out += ':';
    }
    return out;
  }

  // Host parser; returns the serialized host or null.
  function parseHost(input, isOpaque) {
    if (codeAt(input, 0) === 0x5b) {
      if (codeAt(input, input.length - 1) !== 0x5d) return null;
      const a = parseIPv6(input.slice(1, -1));
      return a === null ? null : '[' + serializeIPv6(a) + ']';
    }
    if (isOpaque) {
      if (FORBIDDEN_HOST.test(input)) return null;
      return percentEncode(input, SET_C0);
    }
    const ascii = domainToASCII(percentDecode(input));
    if (ascii === null) return null;
    if (endsInANumber(ascii)) return parseIPv4(ascii);
    return ascii;
  }

  // ------------------------------------------------------------------
  // URL records and the basic URL parser
  // ------------------------------------------------------------------

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

  const kInternal = Symbol('URL internal');

  // Bridges between the classes, filled in by their static blocks.
  let paramsCreate, paramsReset;
  let urlRecord;

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

  // ------------------------------------------------------------------
  // URLSearchParams
  // ------------------------------------------------------------------

  // WebIDL sequence conversion: drains the iterator that `method` returns.
  function collect(obj, method) {
    const it = ReflectApply(method, obj, []);
    if ((typeof it !== 'object' || it === null) && typeof it !== 'function') {
      throw new TypeError('Result of the Symbol.iterator method is not an object');
    }
    const next = it.next;
    const out = [];
    for (;;) {
      const step = ReflectApply(next, it, []);
      if ((typeof step !== 'object' || step === null) && typeof step !== 'function') {
        throw new TypeError('Iterator result is not an object');
      }
      if (step.done) return out;
      out.push(step.value);
    }
  }

  const ITER_KEYS = 0, ITER_VALUES = 1, ITER_ENTRIES = 2;
  let iteratorCreate;

  class URLSearchParams {
    #list;        // flat [name, value, name, value, ...]
    #url = null;  // the URL whose query this object mirrors, or null

    constructor(init = '') {
      if (init === kInternal) {
        this.#list = [];
        return;
      }
      if ((typeof init === 'object' && init !== null) || typeof init === 'function') {
        const iter = init[Symbol.iterator];
        if (iter !== undefined && iter !== null) {
          if (typeof iter !== 'function') {
            throw new TypeError("Failed to construct 'URLSearchParams': The provided value is not iterable.");
          }
          const list = [];
          for (const pair of collect(init, iter)) {
            if ((typeof pair !== 'object' || pair === null) && typeof pair !== 'function') {
              throw new TypeError("Failed to construct 'URLSearchParams': The provided value cannot be converted to a sequence.");
            }
            const method = pair[Symbol.iterator];
            if (typeof method !== 'function') {
              throw new TypeError("Failed to construct 'URLSearchParams': The provided value cannot be converted to a sequence.");
            }
            const items = collect(pair, method);
            if (items.length !== 2) {
              throw new TypeError("Failed to construct 'URLSearchParams': Sequence initializer must only contain pair elements");
            }
            list.push(toUSV(items[0]), toUSV(items[1]));
          }
          this.#list = list;
        } else {
          const list = [];
          const index = new Map();
          for (const key of Reflect.ownKeys(init)) {
            const desc = Reflect.getOwnPropertyDescriptor(init, key);
            if (desc === undefined || !desc.enumerable) continue;
            const name = toUSV(key);
            const value = toUSV(init[key]);
            // A record keeps one entry per converted key (two lone
            // surrogates can convert to the same name).
            const at = index.get(name);
            if (at !== undefined) {
              list[at + 1] = value;
            } else {
              index.set(name, list.length);
              list.push(name, value);
            }
          }
          this.#list = list;
        }
      } else {
        let s = toUSV(init);
        if (codeAt(s, 0) === 0x3f) s = s.slice(1);
        this.#list = formParse(s);
      }
    }

    static {
      paramsCreate = (url, list) => {
        const p = new URLSearchParams(kInternal);
        p.#list = list;
        p.#url = url;
        return p;
      };
      paramsReset = (p, list) => { p.#list = list; };
      iteratorCreate = (p, kind) => new URLSearchParamsIterator(() => p.#list, kind);
    }

    // The update steps: mirror the list into the URL's query.
    #update() {
      const url = this.#url;
      if (url === null) return;
      const r = urlRecord(url);
      const s = formSerialize(this.#list);
      r.query = s === '' ? null : s;
      r.href = null;
    }

    get size() {
      return this.#list.length >> 1;
    }

    append(name, value) {
      requireArgs(arguments.length, 2, "Failed to execute 'append' on 'URLSearchParams'");
      this.#list.push(toUSV(name), toUSV(value));
      this.#update();
    }

    delete(name, value = undefined) {
      requireArgs(arguments.length, 1, "Failed to execute 'delete' on 'URLSearchParams'");
      const n = toUSV(name);
      const v = value === undefined ? undefined : toUSV(value);
      const list = this.#list;
      const out = [];
      for (let i = 0; i < list.length; i += 2) {
        if (list[i] === n && (v === undefined || list[i + 1] === v)) continue;
        out.push(list[i], list[i + 1]);
      }
      this.#list = out;
      this.#update();
    }

    get(name) {
      requireArgs(arguments.length, 1, "Failed to execute 'get' on 'URLSearchParams'");
      const n = toUSV(name);
      const list = this.#list;
      for (let i = 0; i < list.length; i += 2) if (list[i] === n) return list[i + 1];
      return null;
    }

    getAll(name) {
      requireArgs(arguments.length, 1, "Failed to execute 'getAll' on 'URLSearchParams'");
      const n = toUSV(name);
      const list = this.#list;
      const out = [];
      for (let i = 0; i < list.length; i += 2) if (list[i] === n) out.push(list[i + 1]);
      return out;
    }

    has(name, value = undefined) {
      requireArgs(arguments.length, 1, "Failed to execute 'has' on 'URLSearchParams'");
      const n = toUSV(name);
      const v = value === undefined ? undefined : toUSV(value);
      const list = this.#list;
      for (let i = 0; i < list.length; i += 2) {
        if (list[i] === n && (v === undefined || list[i + 1] === v)) return true;
      }
      return false;
    }

    set(name, value) {
      requireArgs(arguments.length, 2, "Failed to execute 'set' on 'URLSearchParams'");
      const n = toUSV(name);
      const v = toUSV(value);
      const list = this.#list;
      const out = [];
      let found = false;
      for (let i = 0; i < list.length; i += 2) {
        if (list[i] !== n) out.push(list[i], list[i + 1]);
        else if (!found) {
          found = true;
          out.push(n, v);
        }
      }
      if (!found) out.push(n, v);
      this.#list = out;
      this.#update();
    }

    sort() {
      const list = this.#list;
      const pairs = [];
      for (let i = 0; i < list.length; i += 2) pairs.push([list[i], list[i + 1]]);
      // Array.prototype.sort is stable; names compare by UTF-16 code units.
      pairs.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
      const out = [];
      for (const [n, v] of pairs) out.push(n, v);
      this.#list = out;
      this.#update();
    }

    forEach(callback, thisArg = undefined) {
      requireArgs(arguments.length, 1, "Failed to execute 'forEach' on 'URLSearchParams'");
      if (typeof callback !== 'function') {
        throw new TypeError("Failed to execute 'forEach' on 'URLSearchParams': The callback provided as parameter 1 is not a function.");
      }
      // Live iteration: the list may change under the callback.
      for (let i = 0; i < this.#list.length; i += 2) {
        const list = this.#list;
        ReflectApply(callback, thisArg, [list[i + 1], list[i], this]);
      }
    }

    keys() {
      return iteratorCreate(this, ITER_KEYS);
    }

    values() {
      return iteratorCreate(this, ITER_VALUES);
    }

    entries() {
      return iteratorCreate(this, ITER_ENTRIES);
    }

    toString() {
      return formSerialize(this.#list);
    }
  }

  const IteratorPrototype = Object.getPrototypeOf(Object.getPrototypeOf([][Symbol.iterator]()));

  class URLSearchParamsIterator {
    #source;
    #kind;
    #index = 0;

    constructor(source, kind) {
      this.#source = source;
      this.#kind = kind;
    }

    next() {
      const list = this.#source();
      const i = this.#index;
      if (i >= list.length) return { value: undefined, done: true };
      this.#index = i + 2;
      const kind = this.#kind;
      const value = kind === ITER_KEYS ? list[i] : kind === ITER_VALUES ? list[i + 1] : [list[i], list[i + 1]];
      return { value, done: false };
    }
  }
  Object.setPrototypeOf(URLSearchParamsIterator.prototype, IteratorPrototype);
  // The iterator prototype has no constructor of its own in WebIDL; the
  // class must not be reachable from tenant code.
  delete URLSearchParamsIterator.prototype.constructor;

  // WebIDL shapes: operations and attributes are enumerable, the class
  // string tags are set, and @@iterator is entries().
  function webidlShape(C, tag) {
    for (const key of Reflect.ownKeys(C.prototype)) {
      if (key === 'constructor') continue;
      const d = Reflect.getOwnPropertyDescriptor(C.prototype, key);
      d.enumerable = true;
      Reflect.defineProperty(C.prototype, key, d);
    }
    Reflect.defineProperty(C.prototype, Symbol.toStringTag, { value: tag, configurable: true });
  }
  webidlShape(URL, 'URL');
  webidlShape(URLSearchParams, 'URLSearchParams');
  for (const key of ['canParse', 'parse']) {
    const d = Reflect.getOwnPropertyDescriptor(URL, key);
    d.enumerable = true;
    Reflect.defineProperty(URL, key, d);
  }
  Reflect.defineProperty(URLSearchParams.prototype, Symbol.iterator, {
    value: URLSearchParams.prototype.entries, writable: true, configurable: true,
  });
  Reflect.defineProperty(URLSearchParamsIterator.prototype, 'next', { enumerable: true });
  Reflect.defineProperty(URLSearchParamsIterator.prototype, Symbol.toStringTag, {
    value: 'URLSearchParams Iterator', configurable: true,
  });

  for (const [name, value] of [['URL', URL], ['URLSearchParams', URLSearchParams]]) {
    Reflect.defineProperty(globalThis, name, { value, writable: true, configurable: true, enumerable: false });
  }
  return { URL, URLSearchParams };
})();
