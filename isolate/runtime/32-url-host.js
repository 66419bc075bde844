// URL Standard: host parsing. "Domain to ASCII" (through native.domainToASCII
// when the shim has it, 31-url-idna.js otherwise), IPv4 and IPv6 addresses
// and their serialization, opaque hosts.
//
// Like every url file, pure ASCII on purpose: every non-ASCII code point is
// written as an escape, so the embedded runtime does not depend on how the
// shim decodes its bytes.
//
// Takes from
//   30-url-encoding.js: urlEncoding (codeAt, lastIndexOfCode, hexValue, percentEncode,
//     percentDecode, SET_C0)
//   31-url-idna.js: urlIdna (idnaToASCIIJS)

const urlHost = (() => {
  const { codeAt, lastIndexOfCode, hexValue, percentEncode, percentDecode, SET_C0 } = urlEncoding;
  const { idnaToASCIIJS } = urlIdna;

  const ReflectApply = Reflect.apply;
  const nativeToASCII =
    typeof native === 'object' && native !== null &&
    typeof native.domainToASCII === 'function' ? native.domainToASCII : null;
  const nativeSelf = nativeToASCII !== null ? native : null;

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

  return { parseHost, serializeIPv6 };
})();
