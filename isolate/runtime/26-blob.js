// Blob and File (File API). A Blob's bytes never change after construction,
// so slices and bodies share them without copying.
//
// Made the first time a worker needs one (lazyFragment, 00-util.js). The
// body is not indented.
//
// Takes from
//   00-util.js: lazyFragment, toDOMString, emptyBytes, isObjectLike, bufferSourceBytes,
//     toUSVString, concatBytes, toDictionary, kPrivate, utf8Decode, toArrayBuffer, defineInterface,
//     registerInspect, toLongLong, requireArgs, defineLazyGlobals
//   25-streams.js: readableStreamFromBytes

let blobMade = false;
const blobFragment = lazyFragment(() => {
blobMade = true;

const blobTypeBadCharRe = /[^\x20-\x7e]/;
const lineEndingsRe = /\r\n|\r/g;

let blobBytesOf;     // (blob) -> Uint8Array, not to be mutated
let blobFromBytes;   // (u8, type) -> Blob owning u8
let isBlob;          // (v) -> boolean
let fileFromBytes;   // (u8, name, type, lastModified) -> File owning u8

function normalizeBlobType(type) {
  const t = toDOMString(type);
  return blobTypeBadCharRe.test(t) ? '' : t.toLowerCase();
}

function blobPartsToBytes(parts, endings) {
  if (parts === undefined) return emptyBytes;
  if (!isObjectLike(parts) || typeof parts[Symbol.iterator] !== 'function') {
    throw new TypeError("Failed to construct 'Blob': The provided value cannot be converted to a sequence.");
  }
  const chunks = [];
  let total = 0;
  for (const part of parts) {
    let bytes;
    if (isObjectLike(part) && isBlob(part)) {
      bytes = blobBytesOf(part);
    } else {
      bytes = bufferSourceBytes(part);
      if (bytes === null) {
        let s = toUSVString(part);
        if (endings === 'native') s = s.replace(lineEndingsRe, '\n');
        bytes = native.utf8Encode(s);
      } else {
        bytes = bytes.slice();
      }
    }
    chunks.push(bytes);
    total += bytes.length;
  }
  if (chunks.length === 0) return emptyBytes;
  return concatBytes(chunks, total);
}

function blobOptions(options, what) {
  const opts = toDictionary(options, what);
  let endings = 'transparent';
  let type = '';
  if (opts !== null) {
    if (opts.endings !== undefined) {
      endings = toDOMString(opts.endings);
      if (endings !== 'transparent' && endings !== 'native') {
        throw new TypeError(`Failed to read the 'endings' property from 'BlobPropertyBag': The provided value '${endings}' is not a valid enum value of type EndingType.`);
      }
    }
    if (opts.type !== undefined) type = normalizeBlobType(opts.type);
  }
  return { endings, type };
}

class Blob {
  #bytes;
  #type;

  constructor(blobParts = undefined, options = undefined) {
    if (blobParts === kPrivate) return;
    const { endings, type } = blobOptions(options, "The 'options' argument");
    this.#bytes = blobPartsToBytes(blobParts, endings);
    this.#type = type;
  }

  get size() {
    return this.#bytes.length;
  }

  get type() {
    return this.#type;
  }

  slice(start = undefined, end = undefined, contentType = undefined) {
    const size = this.#bytes.length;
    const from = relativeIndex(start, size, 0);
    const to = relativeIndex(end, size, size);
    const type = contentType === undefined ? '' : normalizeBlobType(contentType);
    return blobFromBytes(this.#bytes.subarray(from, Math.max(from, to)), type);
  }

  text() {
    return Promise.resolve(utf8Decode(this.#bytes));
  }

  arrayBuffer() {
    return Promise.resolve(toArrayBuffer(this.#bytes));
  }

  bytes() {
    return Promise.resolve(this.#bytes.slice());
  }

  stream() {
    return readableStreamFromBytes(this.#bytes);
  }

  static {
    blobBytesOf = (b) => b.#bytes;
    isBlob = (v) => #bytes in v;
    blobFromBytes = (u8, type) => {
      const b = new Blob(kPrivate);
      b.#bytes = u8;
      b.#type = type;
      return b;
    };
    fileFromBytes = (u8, name, type, lastModified) => {
      const f = new File(kPrivate);
      f.#bytes = u8;
      f.#type = type;
      fileInit(f, name, lastModified);
      return f;
    };
  }
}
defineInterface(Blob, 'Blob');
registerInspect(Blob, (b) => ({ size: b.size, type: b.type }));

// WebIDL [Clamp]-free "long long" index relative to `size`.
function relativeIndex(v, size, dflt) {
  if (v === undefined) return dflt;
  const n = toLongLong(v);
  return n < 0 ? Math.max(size + n, 0) : Math.min(n, size);
}

let fileInit; // (file, name, lastModified)
let isFile;   // (v) -> boolean

class File extends Blob {
  #name;
  #lastModified;

  constructor(fileBits, fileName, options = undefined) {
    if (fileBits === kPrivate) {
      super(kPrivate);
      return;
    }
    requireArgs(arguments.length, 2, 'constructor', 'File');
    super(fileBits, options);
    this.#name = toUSVString(fileName);
    const opts = toDictionary(options, "The 'options' argument");
    this.#lastModified = opts !== null && opts.lastModified !== undefined
      ? toLongLong(opts.lastModified) : Date.now();
  }

  get name() {
    return this.#name;
  }

  get lastModified() {
    return this.#lastModified;
  }

  get webkitRelativePath() {
    return '';
  }

  static {
    fileInit = (f, name, lastModified) => {
      f.#name = name;
      f.#lastModified = lastModified;
    };
    isFile = (v) => #name in v;
  }
}
defineInterface(File, 'File');
registerInspect(File, (f) => ({ name: f.name, lastModified: f.lastModified, size: f.size, type: f.type }));

return { Blob, File, blobBytesOf, blobFromBytes, isBlob, fileFromBytes, isFile, normalizeBlobType };
});
defineLazyGlobals(blobFragment, ['Blob', 'File']);

// What the other files use; no blob exists before the fragment is made.
function isBlob(v) {
  return blobMade && blobFragment().isBlob(v);
}

function isFile(v) {
  return blobMade && blobFragment().isFile(v);
}

function blobBytesOf(blob) {
  return blobFragment().blobBytesOf(blob);
}

function blobFromBytes(u8, type) {
  return blobFragment().blobFromBytes(u8, type);
}

function fileFromBytes(u8, name, type, lastModified) {
  return blobFragment().fileFromBytes(u8, name, type, lastModified);
}

function normalizeBlobType(type) {
  return blobFragment().normalizeBlobType(type);
}
