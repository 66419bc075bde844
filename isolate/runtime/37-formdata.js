// FormData (XHR standard) and its multipart/form-data encoding and parsing.
//
// Takes from
//   00-util.js: lazyFragment, isObjectLike, toUSVString, requireArgs, kPrivate, defineInterface,
//     registerInspect, defineIteratorInterface, randomBytes, hexByte, concatBytes, utf8Decode,
//     defineLazyGlobals
//   26-blob.js: isBlob, blobBytesOf, fileFromBytes, isFile, normalizeBlobType
//   35-url-search-params.js: URLSearchParams

const mimeParamRe = /;\s*([^\s=;]+)\s*=\s*("(?:[^"\\]|\\.)*"|[^;]*)/g;

// The parameters of a Content-Type or Content-Disposition value.
function parseHeaderParams(value) {
  const params = new Map();
  mimeParamRe.lastIndex = 0;
  for (let m; (m = mimeParamRe.exec(value)) !== null;) {
    const key = m[1].toLowerCase();
    let v = m[2].trim();
    if (v.startsWith('"')) v = v.slice(1, -1).replace(/\\(.)/g, '$1');
    if (!params.has(key)) params.set(key, v);
  }
  return params;
}

function mimeEssence(value) {
  const semi = value.indexOf(';');
  return (semi < 0 ? value : value.slice(0, semi)).trim().toLowerCase();
}

// Made the first time a worker needs one (lazyFragment, 00-util.js). The
// body is not indented.
let formDataMade = false;
const formDataFragment = lazyFragment(() => {
formDataMade = true;
let formDataEntries; // (formData) -> flat [name, value, ...] (live)
let isFormData;      // (v) -> boolean

function formDataValue(value, filename, hasFilename, method) {
  if (isObjectLike(value) && isBlob(value)) {
    const bytes = blobBytesOf(value);
    if (hasFilename) {
      return fileFromBytes(bytes, toUSVString(filename), value.type,
        isFile(value) ? value.lastModified : Date.now());
    }
    if (isFile(value)) return value;
    return fileFromBytes(bytes, 'blob', value.type, Date.now());
  }
  if (hasFilename) {
    throw new TypeError(`Failed to execute '${method}' on 'FormData': parameter 2 is not of type 'Blob'.`);
  }
  return toUSVString(value);
}

class FormData {
  #list = []; // [name0, value0, ...]; a value is a string or a File

  constructor(form = undefined) {
    if (form !== undefined) {
      throw new TypeError("Failed to construct 'FormData': parameter 1 is not of type 'HTMLFormElement'.");
    }
  }

  append(name, value, filename = undefined) {
    requireArgs(arguments.length, 2, 'append', 'FormData');
    const n = toUSVString(name);
    this.#list.push(n, formDataValue(value, filename, arguments.length > 2, 'append'));
  }

  delete(name) {
    requireArgs(arguments.length, 1, 'delete', 'FormData');
    const n = toUSVString(name);
    const list = this.#list;
    let w = 0;
    for (let r = 0; r < list.length; r += 2) {
      if (list[r] === n) continue;
      list[w++] = list[r];
      list[w++] = list[r + 1];
    }
    list.length = w;
  }

  get(name) {
    requireArgs(arguments.length, 1, 'get', 'FormData');
    const n = toUSVString(name);
    const list = this.#list;
    for (let i = 0; i < list.length; i += 2) if (list[i] === n) return list[i + 1];
    return null;
  }

  getAll(name) {
    requireArgs(arguments.length, 1, 'getAll', 'FormData');
    const n = toUSVString(name);
    const list = this.#list;
    const out = [];
    for (let i = 0; i < list.length; i += 2) if (list[i] === n) out.push(list[i + 1]);
    return out;
  }

  has(name) {
    requireArgs(arguments.length, 1, 'has', 'FormData');
    const n = toUSVString(name);
    const list = this.#list;
    for (let i = 0; i < list.length; i += 2) if (list[i] === n) return true;
    return false;
  }

  set(name, value, filename = undefined) {
    requireArgs(arguments.length, 2, 'set', 'FormData');
    const n = toUSVString(name);
    const v = formDataValue(value, filename, arguments.length > 2, 'set');
    const list = this.#list;
    let w = -1;
    let out = 0;
    for (let r = 0; r < list.length; r += 2) {
      if (list[r] === n) {
        if (w >= 0) continue;
        w = out;
        list[out++] = n;
        list[out++] = v;
        continue;
      }
      list[out++] = list[r];
      list[out++] = list[r + 1];
    }
    list.length = out;
    if (w < 0) list.push(n, v);
  }

  forEach(callback, thisArg = undefined) {
    requireArgs(arguments.length, 1, 'forEach', 'FormData');
    if (typeof callback !== 'function') {
      throw new TypeError("Failed to execute 'forEach' on 'FormData': The callback provided as parameter 1 is not a function.");
    }
    const list = this.#list;
    for (let i = 0; i < list.length; i += 2) callback.call(thisArg, list[i + 1], list[i], this);
  }

  entries() {
    return new FormDataIterator(kPrivate, this.#list, 2);
  }

  keys() {
    return new FormDataIterator(kPrivate, this.#list, 0);
  }

  values() {
    return new FormDataIterator(kPrivate, this.#list, 1);
  }

  static {
    formDataEntries = (fd) => fd.#list;
    isFormData = (v) => #list in v;
  }
}
Object.defineProperty(FormData.prototype, Symbol.iterator, {
  value: FormData.prototype.entries, writable: true, configurable: true,
});
defineInterface(FormData, 'FormData');
registerInspect(FormData, (fd) => {
  const shown = {};
  const list = formDataEntries(fd);
  for (let i = 0; i < list.length; i += 2) {
    const prev = shown[list[i]];
    if (prev === undefined) shown[list[i]] = list[i + 1];
    else if (Array.isArray(prev)) prev.push(list[i + 1]);
    else shown[list[i]] = [prev, list[i + 1]];
  }
  return shown;
});

// Live iteration by index, as WebIDL iterables over a list.
class FormDataIterator {
  #list;
  #kind; // 0 keys, 1 values, 2 entries
  #index = 0;

  constructor(key, list, kind) {
    if (key !== kPrivate) throw new TypeError('Illegal constructor');
    this.#list = list;
    this.#kind = kind;
  }

  next() {
    const list = this.#list;
    const i = this.#index;
    if (i >= list.length) return { value: undefined, done: true };
    this.#index = i + 2;
    const kind = this.#kind;
    const value = kind === 0 ? list[i] : kind === 1 ? list[i + 1] : [list[i], list[i + 1]];
    return { value, done: false };
  }
}
defineIteratorInterface(FormDataIterator, 'FormData Iterator');

// Serialisation -------------------------------------------------------------

const formNameEscapeRe = /[\n\r"]/g;
const formNameEscapes = { '\n': '%0A', '\r': '%0D', '"': '%22' };

function escapeFormName(s) {
  return s.replace(formNameEscapeRe, (c) => formNameEscapes[c]);
}

function newMultipartBoundary() {
  const b = randomBytes(12);
  let s = '----EdgenodeFormBoundary';
  for (let i = 0; i < b.length; i++) s += hexByte[b[i]];
  return s;
}

// Encodes `formData` as multipart/form-data: [bytes, content type].
function encodeMultipart(formData) {
  const boundary = newMultipartBoundary();
  const list = formDataEntries(formData);
  const chunks = [];
  let total = 0;
  const add = (u8) => {
    chunks.push(u8);
    total += u8.length;
  };
  for (let i = 0; i < list.length; i += 2) {
    const value = list[i + 1];
    let head = `--${boundary}\r\nContent-Disposition: form-data; name="${escapeFormName(list[i])}"`;
    if (typeof value === 'string') {
      // Values go as they are: the HTML standard normalises line breaks when
      // a form builds its entry list, not when the list is encoded.
      add(native.utf8Encode(`${head}\r\n\r\n${value}\r\n`));
    } else {
      const type = value.type === '' ? 'application/octet-stream' : value.type;
      head += `; filename="${escapeFormName(value.name)}"\r\nContent-Type: ${type}\r\n\r\n`;
      add(native.utf8Encode(head));
      add(blobBytesOf(value));
      add(native.utf8Encode('\r\n'));
    }
  }
  add(native.utf8Encode(`--${boundary}--\r\n`));
  return [concatBytes(chunks, total), `multipart/form-data; boundary=${boundary}`];
}

// Parsing -------------------------------------------------------------------

function bytesIndexOf(hay, needle, from) {
  const n = needle.length;
  const last = hay.length - n;
  const first = needle[0];
  outer:
  for (let i = from; i <= last; i++) {
    if (hay[i] !== first) continue;
    for (let k = 1; k < n; k++) if (hay[i + k] !== needle[k]) continue outer;
    return i;
  }
  return -1;
}

const formNameUnescapeRe = /%0A|%0D|%22/gi;

function unescapeFormName(s) {
  return s.replace(formNameUnescapeRe, (m) => {
    const u = m.toUpperCase();
    return u === '%0A' ? '\n' : u === '%0D' ? '\r' : '"';
  });
}

function formDataParseError(detail) {
  return new TypeError(`Failed to parse body as FormData: ${detail}`);
}

// Parses a multipart/form-data body (bytes) into a new FormData.
function parseMultipart(bytes, boundary) {
  if (boundary === undefined || boundary === '' || boundary.length > 70) {
    throw formDataParseError('invalid multipart boundary.');
  }
  const fd = new FormData();
  const list = formDataEntries(fd);
  const delim = native.utf8Encode(`--${boundary}`);
  let pos = bytesIndexOf(bytes, delim, 0);
  if (pos < 0) throw formDataParseError('no boundary found.');
  for (;;) {
    pos += delim.length;
    if (bytes[pos] === 0x2d && bytes[pos + 1] === 0x2d) return fd; // closing "--"
    while (bytes[pos] === 0x20 || bytes[pos] === 0x09) pos++; // transport padding
    if (bytes[pos] === 0x0d && bytes[pos + 1] === 0x0a) pos += 2;
    else if (bytes[pos] === 0x0a) pos += 1;
    else throw formDataParseError('boundary not followed by a line break.');
    // Headers end at the first empty line.
    let name;
    let filename;
    let type = '';
    for (;;) {
      let eol = pos;
      while (eol < bytes.length && bytes[eol] !== 0x0a) eol++;
      if (eol >= bytes.length) throw formDataParseError('unterminated part headers.');
      let lineEnd = eol;
      if (lineEnd > pos && bytes[lineEnd - 1] === 0x0d) lineEnd--;
      const line = utf8Decode(bytes.subarray(pos, lineEnd));
      pos = eol + 1;
      if (line === '') break;
      const colon = line.indexOf(':');
      if (colon <= 0) throw formDataParseError('invalid part header.');
      const hname = line.slice(0, colon).trim().toLowerCase();
      const hvalue = line.slice(colon + 1).trim();
      if (hname === 'content-disposition') {
        if (mimeEssence(hvalue) !== 'form-data') throw formDataParseError('part is not form-data.');
        const params = parseHeaderParams(hvalue);
        if (params.has('name')) name = unescapeFormName(params.get('name'));
        if (params.has('filename')) filename = unescapeFormName(params.get('filename'));
      } else if (hname === 'content-type') {
        type = hvalue;
      }
    }
    if (name === undefined) throw formDataParseError('part has no name.');
    // The content ends at the line break before the next delimiter.
    let end = pos;
    for (;;) {
      end = bytesIndexOf(bytes, delim, end);
      if (end < 0) throw formDataParseError('no closing boundary.');
      if (end >= pos + 1 && bytes[end - 1] === 0x0a) break;
      if (end === pos) break; // empty content right after the headers
      end += 1;
    }
    let contentEnd = end;
    if (contentEnd > pos && bytes[contentEnd - 1] === 0x0a) contentEnd--;
    if (contentEnd > pos && bytes[contentEnd - 1] === 0x0d) contentEnd--;
    const content = bytes.subarray(pos, contentEnd);
    if (filename !== undefined) {
      list.push(name, fileFromBytes(content.slice(), filename,
        normalizeBlobType(type === '' ? 'text/plain' : type), Date.now()));
    } else {
      list.push(name, utf8Decode(content));
    }
    pos = end;
  }
}

function parseUrlEncodedForm(text) {
  const fd = new FormData();
  const list = formDataEntries(fd);
  for (const [name, value] of new URLSearchParams(text)) list.push(name, value);
  return fd;
}

return { FormData, isFormData, encodeMultipart, parseMultipart, parseUrlEncodedForm };
});
defineLazyGlobals(formDataFragment, ['FormData']);

// What the other files use; no form exists before the fragment is made.
function isFormData(v) {
  return formDataMade && formDataFragment().isFormData(v);
}

function encodeMultipart(formData) {
  return formDataFragment().encodeMultipart(formData);
}

function parseMultipart(bytes, boundary) {
  return formDataFragment().parseMultipart(bytes, boundary);
}

function parseUrlEncodedForm(text) {
  return formDataFragment().parseUrlEncodedForm(text);
}
