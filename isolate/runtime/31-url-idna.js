// URL Standard: Punycode (RFC 3492) and the UTS #46 processing that
// "domain to ASCII" needs when the host's ICU does not give it
// (native.domainToASCII): mapping, the CheckJoiners and CheckBidi rules.
//
// Like every url file, pure ASCII on purpose: every non-ASCII code point is
// written as an escape, so the embedded runtime does not depend on how the
// shim decodes its bytes.
//
// Takes nothing from the files before it.

const urlIdna = (() => {
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

  return { idnaToASCIIJS };
})();
