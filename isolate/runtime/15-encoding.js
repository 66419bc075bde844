// TextEncoder and TextDecoder (WHATWG Encoding): UTF-8 through the host,
// UTF-16LE/BE, windows-1252 (what "latin1" and "ascii" mean on the web) and
// the other single-byte encodings (14-single-byte.js) here.
//
// Takes from
//   00-util.js: lazyFragment, toDOMString, requireArgs, typedArrayKind, defineInterface,
//     registerInspect, toDictionary, emptyBytes, bufferSourceBytes, concatBytes, defineGlobal
//   14-single-byte.js: singleByteEncodings

// Label -> encoding name: a few hundred entries, made the first time a
// TextDecoder is asked for anything but UTF-8.
const encodingByLabel = lazyFragment(() => {
  const byLabel = new Map();
  const labels = {
    'utf-8': ['unicode-1-1-utf-8', 'unicode11utf8', 'unicode20utf8', 'utf-8', 'utf8',
      'x-unicode20utf8'],
    'utf-16be': ['unicodefffe', 'utf-16be'],
    'utf-16le': ['csunicode', 'iso-10646-ucs-2', 'ucs-2', 'unicode', 'unicodefeff', 'utf-16',
      'utf-16le'],
    'windows-1252': ['ansi_x3.4-1968', 'ascii', 'cp1252', 'cp819', 'csisolatin1', 'ibm819',
      'iso-8859-1', 'iso-ir-100', 'iso8859-1', 'iso88591', 'iso_8859-1', 'iso_8859-1:1987',
      'l1', 'latin1', 'us-ascii', 'windows-1252', 'x-cp1252'],
  };
  for (const name of Object.keys(labels)) {
    for (const label of labels[name]) byLabel.set(label, name);
  }
  const single = singleByteEncodings();
  for (const name of Object.keys(single)) {
    for (const label of single[name][0]) byLabel.set(label, name);
  }
  return byLabel;
});

// windows-1252 bytes 0x80..0x9F; every other byte is its own code point.
const windows1252High = [
  0x20ac, 0x81, 0x201a, 0x192, 0x201e, 0x2026, 0x2020, 0x2021, 0x2c6, 0x2030, 0x160, 0x2039,
  0x152, 0x8d, 0x17d, 0x8f, 0x90, 0x2018, 0x2019, 0x201c, 0x201d, 0x2022, 0x2013, 0x2014,
  0x2dc, 0x2122, 0x161, 0x203a, 0x153, 0x9d, 0x17e, 0x178,
];

const asciiWhitespaceTrimRe = /^[\t\n\f\r ]+|[\t\n\f\r ]+$/g;

function codeUnitsToString(units, n) {
  if (n <= 8192) return String.fromCharCode.apply(null, n === units.length ? units : units.subarray(0, n));
  let out = '';
  for (let i = 0; i < n; i += 8192) {
    out += String.fromCharCode.apply(null, units.subarray(i, Math.min(n, i + 8192)));
  }
  return out;
}

class TextEncoder {
  get encoding() {
    return 'utf-8';
  }

  encode(input = '') {
    return native.utf8Encode(toDOMString(input));
  }

  encodeInto(source, destination) {
    requireArgs(arguments.length, 2, 'encodeInto', 'TextEncoder');
    const src = toDOMString(source);
    if (!ArrayBuffer.isView(destination) || typedArrayKind.call(destination) !== 'Uint8Array') {
      throw new TypeError("Failed to execute 'encodeInto' on 'TextEncoder': parameter 2 is not of type 'Uint8Array'.");
    }
    const dest = destination;
    const cap = dest.length;
    const n = src.length;
    let read = 0;
    let written = 0;
    while (read < n) {
      let c = src.charCodeAt(read);
      if (c < 0x80) {
        if (written >= cap) break;
        dest[written++] = c;
        read++;
        continue;
      }
      let units = 1;
      if (c >= 0xd800 && c <= 0xdfff) {
        const d = read + 1 < n ? src.charCodeAt(read + 1) : 0;
        if (c <= 0xdbff && d >= 0xdc00 && d <= 0xdfff) {
          c = 0x10000 + ((c - 0xd800) << 10) + (d - 0xdc00);
          units = 2;
        } else {
          c = 0xfffd;
        }
      }
      if (c < 0x800) {
        if (written + 2 > cap) break;
        dest[written++] = 0xc0 | (c >> 6);
        dest[written++] = 0x80 | (c & 0x3f);
      } else if (c < 0x10000) {
        if (written + 3 > cap) break;
        dest[written++] = 0xe0 | (c >> 12);
        dest[written++] = 0x80 | ((c >> 6) & 0x3f);
        dest[written++] = 0x80 | (c & 0x3f);
      } else {
        if (written + 4 > cap) break;
        dest[written++] = 0xf0 | (c >> 18);
        dest[written++] = 0x80 | ((c >> 12) & 0x3f);
        dest[written++] = 0x80 | ((c >> 6) & 0x3f);
        dest[written++] = 0x80 | (c & 0x3f);
      }
      read += units;
    }
    return { read, written };
  }
}
defineInterface(TextEncoder, 'TextEncoder');
registerInspect(TextEncoder, () => ({ encoding: 'utf-8' }));

// How many bytes at the end of `u8` start a UTF-8 sequence that the next
// chunk may complete (0 when the tail is complete or already invalid).
function utf8IncompleteTail(u8) {
  const n = u8.length;
  for (let back = 1; back <= 3 && back <= n; back++) {
    const b = u8[n - back];
    if ((b & 0xc0) === 0x80) continue; // continuation byte: keep looking for the lead
    let need;
    if (b >= 0xc2 && b <= 0xdf) need = 2;
    else if (b >= 0xe0 && b <= 0xef) need = 3;
    else if (b >= 0xf0 && b <= 0xf4) need = 4;
    else return 0;
    if (back >= need) return 0;
    if (back >= 2) {
      // The second byte has a narrower range after some leads.
      const s = u8[n - back + 1];
      const lo = b === 0xe0 ? 0xa0 : b === 0xf0 ? 0x90 : 0x80;
      const hi = b === 0xed ? 0x9f : b === 0xf4 ? 0x8f : 0xbf;
      if (s < lo || s > hi) return 0;
    }
    return back;
  }
  return 0;
}

class TextDecoder {
  #encoding;
  #fatal;
  #ignoreBOM;
  #bomSeen = false;   // the stream's first code point has been handled
  #pending = null;    // bytes of an incomplete sequence (or UTF-16 lead byte)
  #leadSurrogate = -1; // UTF-16: a high surrogate waiting for its pair

  constructor(label = 'utf-8', options = undefined) {
    const key = toDOMString(label).replace(asciiWhitespaceTrimRe, '').toLowerCase();
    const encoding = key === 'utf-8' ? key : encodingByLabel().get(key);
    if (encoding === undefined) throw new RangeError(`"${label}" is not a valid encoding.`);
    const opts = toDictionary(options, "The 'options' argument");
    this.#encoding = encoding;
    this.#fatal = opts !== null && !!opts.fatal;
    this.#ignoreBOM = opts !== null && !!opts.ignoreBOM;
  }

  get encoding() {
    return this.#encoding;
  }

  get fatal() {
    return this.#fatal;
  }

  get ignoreBOM() {
    return this.#ignoreBOM;
  }

  decode(input = undefined, options = undefined) {
    let bytes;
    if (input === undefined) {
      bytes = emptyBytes;
    } else {
      bytes = bufferSourceBytes(input);
      if (bytes === null) {
        throw new TypeError("Failed to execute 'decode' on 'TextDecoder': parameter 1 is not of type '(ArrayBuffer or ArrayBufferView)'.");
      }
    }
    const opts = toDictionary(options, "The 'options' argument");
    const stream = opts !== null && !!opts.stream;
    switch (this.#encoding) {
      case 'utf-8': return this.#decodeUtf8(bytes, stream);
      case 'windows-1252': return decodeWindows1252(bytes);
      case 'utf-16le': return this.#decodeUtf16(bytes, stream, false);
      case 'utf-16be': return this.#decodeUtf16(bytes, stream, true);
      default: return decodeSingleByte(bytes, singleByteEncodings()[this.#encoding][1], this.#fatal);
    }
  }

  #decodeUtf8(bytes, stream) {
    if (this.#pending !== null) {
      bytes = concatBytes([this.#pending, bytes]);
      this.#pending = null;
    }
    if (stream) {
      const tail = utf8IncompleteTail(bytes);
      if (tail > 0) {
        this.#pending = bytes.slice(bytes.length - tail);
        bytes = bytes.subarray(0, bytes.length - tail);
      }
    }
    let out = '';
    if (bytes.length > 0) {
      try {
        out = native.utf8Decode(bytes, this.#fatal, this.#ignoreBOM || this.#bomSeen);
      } catch (err) {
        this.#reset();
        if (err instanceof TypeError) throw new TypeError('Failed to decode input.');
        throw err;
      }
      this.#bomSeen = true;
    }
    if (!stream) {
      this.#reset();
    }
    return out;
  }

  #decodeUtf16(bytes, stream, bigEndian) {
    const fatal = this.#fatal;
    // At most one unit per code unit read, plus a carried-over surrogate and
    // the replacement character of an unfinished stream.
    const units = new Uint16Array((bytes.length >> 1) + 4);
    let n = 0;
    let lead = this.#leadSurrogate;
    let i = 0;
    let byte0 = -1;
    if (this.#pending !== null) {
      byte0 = this.#pending[0];
      this.#pending = null;
    }
    const len = bytes.length;
    let error = false;
    while (true) {
      let cu;
      if (byte0 >= 0) {
        if (i >= len) break;
        cu = bigEndian ? (byte0 << 8) | bytes[i] : byte0 | (bytes[i] << 8);
        byte0 = -1;
        i++;
      } else {
        if (i + 1 >= len) {
          if (i < len) byte0 = bytes[i];
          break;
        }
        cu = bigEndian ? (bytes[i] << 8) | bytes[i + 1] : bytes[i] | (bytes[i + 1] << 8);
        i += 2;
      }
      if (lead >= 0) {
        if (cu >= 0xdc00 && cu <= 0xdfff) {
          units[n++] = lead;
          units[n++] = cu;
          lead = -1;
          continue;
        }
        lead = -1;
        if (fatal) {
          error = true;
          break;
        }
        units[n++] = 0xfffd;
      }
      if (cu >= 0xd800 && cu <= 0xdbff) {
        lead = cu;
        continue;
      }
      if (cu >= 0xdc00 && cu <= 0xdfff) {
        if (fatal) {
          error = true;
          break;
        }
        units[n++] = 0xfffd;
        continue;
      }
      units[n++] = cu;
    }
    if (!error && !stream && (byte0 >= 0 || lead >= 0)) {
      // End of stream inside a code unit or a surrogate pair.
      if (fatal) error = true;
      else units[n++] = 0xfffd;
      byte0 = -1;
      lead = -1;
    }
    if (error) {
      this.#reset();
      throw new TypeError('Failed to decode input.');
    }
    if (stream) {
      this.#leadSurrogate = lead;
      this.#pending = byte0 >= 0 ? new Uint8Array([byte0]) : null;
    }
    let start = 0;
    if (!this.#bomSeen && n > 0) {
      this.#bomSeen = true;
      if (!this.#ignoreBOM && units[0] === 0xfeff) start = 1;
    }
    const out = start === 0 ? codeUnitsToString(units, n)
      : codeUnitsToString(units.subarray(start), n - start);
    if (!stream) this.#reset();
    return out;
  }

  #reset() {
    this.#pending = null;
    this.#leadSurrogate = -1;
    this.#bomSeen = false;
  }
}
defineInterface(TextDecoder, 'TextDecoder');
registerInspect(TextDecoder, (d) => ({ encoding: d.encoding, fatal: d.fatal, ignoreBOM: d.ignoreBOM }));

function decodeWindows1252(bytes) {
  const n = bytes.length;
  let units = null;
  for (let i = 0; i < n; i++) {
    const b = bytes[i];
    if (b >= 0x80 && b <= 0x9f) {
      if (units === null) units = Uint16Array.from(bytes);
      units[i] = windows1252High[b - 0x80];
    }
  }
  return codeUnitsToString(units === null ? bytes : units, n);
}

// The other single-byte encodings: bytes below 0x80 are ASCII, the rest
// come from the encoding's table (U+FFFD where it has none: an error when
// fatal).
function decodeSingleByte(bytes, high, fatal) {
  const n = bytes.length;
  const units = new Uint16Array(n);
  for (let i = 0; i < n; i++) {
    const b = bytes[i];
    if (b < 0x80) {
      units[i] = b;
      continue;
    }
    const c = high.charCodeAt(b - 0x80);
    if (c === 0xfffd && fatal) throw new TypeError('Failed to decode input.');
    units[i] = c;
  }
  return codeUnitsToString(units, n);
}

defineGlobal('TextEncoder', TextEncoder);
defineGlobal('TextDecoder', TextDecoder);
