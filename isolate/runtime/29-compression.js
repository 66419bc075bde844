// CompressionStream and DecompressionStream (Compression Streams standard)
// over the host's zlib (native.zlib*, isolate/compress.cc), and the Workers
// runtime's crypto.DigestStream.
//
// A zlib stream's state lives in an ArrayBuffer ("arena") that only this
// file ever sees: the host runs zlib inside it, and it is collected with the
// stream.
//
// Takes from
//   00-util.js: lazyFragment, requireArgs, toDOMString, bufferSourceBytes, defineInterface,
//     concatBytes, defineLazyGlobals, defineLazyProperties
//   18-crypto.js: Crypto
//   19-subtle.js: subtleFragment
//   20-streams-queue.js: markHandled
//   25-streams.js: streamsFragment (WritableStream, TransformStream)

// Taken while the runtime loads, before any tenant code: a script that
// replaced globalThis.ArrayBuffer must never see (or forge) an arena, whose
// bytes hold the host's pointers.
const ArenaBuffer = ArrayBuffer;

// Made the first time a worker compresses or digests a stream (lazyFragment,
// 00-util.js), with the streams it builds on. The body is not indented.
const compressionFragment = lazyFragment(() => {
const { WritableStream, TransformStream } = streamsFragment();

const compressionFormats = new Set(['gzip', 'deflate', 'deflate-raw']);

const zlibSliceBytes = 256 * 1024;

function compressionFormat(format, iface) {
  requireArgs(format === undefined ? 0 : 1, 1, 'constructor', iface);
  const f = toDOMString(format);
  if (!compressionFormats.has(f)) {
    throw new TypeError(`Failed to construct '${iface}': Unsupported compression format: '${f}'`);
  }
  return f;
}

function compressionChunk(chunk) {
  const bytes = bufferSourceBytes(chunk);
  if (bytes === null) {
    throw new TypeError('The chunk must be an ArrayBuffer or an ArrayBufferView.');
  }
  return bytes.slice(); // the host reads it after the caller could have changed it
}

// A TransformStream running chunks through a new zlib stream.
function zlibTransform(format, compress) {
  let arena = new ArenaBuffer(native.zlibArenaSize(compress));
  native.zlibInit(arena, format, compress);
  const push = (input, finish, controller) => {
    // Large chunks go in slices: the CPU limit can stop a script only
    // between native calls.
    if (input !== null && input.length > zlibSliceBytes) {
      for (let at = 0; at < input.length; at += zlibSliceBytes) {
        const end = Math.min(input.length, at + zlibSliceBytes);
        push(input.subarray(at, end), finish && end === input.length, controller);
      }
      return;
    }
    if (arena === null) {
      if (input !== null && input.length > 0) {
        throw new TypeError('Trailing bytes after the end of the compressed data.');
      }
      return;
    }
    const out = native.zlibPush(arena, input, finish);
    for (let i = 2; i < out.length; i++) controller.enqueue(out[i]);
    if (out[0]) {
      arena = null; // the stream is complete: let its memory go
      if (out[1] > 0) throw new TypeError('Trailing bytes after the end of the compressed data.');
    }
  };
  return new TransformStream({
    transform(chunk, controller) {
      push(compressionChunk(chunk), false, controller);
    },
    flush(controller) {
      push(null, true, controller);
      arena = null;
    },
  });
}

class CompressionStream {
  #transform;

  constructor(format) {
    this.#transform = zlibTransform(compressionFormat(format, 'CompressionStream'), true);
  }

  get readable() {
    return this.#transform.readable;
  }

  get writable() {
    return this.#transform.writable;
  }
}
defineInterface(CompressionStream, 'CompressionStream');

class DecompressionStream {
  #transform;

  constructor(format) {
    this.#transform = zlibTransform(compressionFormat(format, 'DecompressionStream'), false);
  }

  get readable() {
    return this.#transform.readable;
  }

  get writable() {
    return this.#transform.writable;
  }
}
defineInterface(DecompressionStream, 'DecompressionStream');

// crypto.DigestStream: a WritableStream whose `digest` promise resolves to
// the hash of everything written once it is closed. The chunks are kept until
// then: the host's digest is one-shot.
class DigestStream extends WritableStream {
  #digest;
  #written = 0;

  constructor(algorithm) {
    requireArgs(arguments.length, 1, 'constructor', 'DigestStream');
    const alg = subtleFragment().normalizeAlgorithm(algorithm, 'digest');
    const chunks = [];
    let total = 0;
    let settle;
    let self = null; // `this`, once super() has made it
    const promise = new Promise((resolve, reject) => {
      settle = { resolve, reject };
    });
    markHandled(promise);
    super({
      write(chunk) {
        let bytes;
        if (typeof chunk === 'string') {
          bytes = native.utf8Encode(chunk);
        } else {
          bytes = bufferSourceBytes(chunk);
          if (bytes === null) throw new TypeError('DigestStream takes strings, ArrayBuffers and views.');
          bytes = bytes.slice();
        }
        chunks.push(bytes);
        total += bytes.length;
        if (self !== null) self.#written = total;
      },
      close() {
        try {
          settle.resolve(native.cryptoDigest(alg.name, concatBytes(chunks, total)).buffer);
        } catch (err) {
          settle.reject(err);
        }
        chunks.length = 0;
      },
      abort(reason) {
        settle.reject(reason);
        chunks.length = 0;
      },
    });
    this.#digest = promise;
    self = this;
  }

  get digest() {
    return this.#digest;
  }

  get bytesWritten() {
    return BigInt(this.#written);
  }
}
defineInterface(DigestStream, 'DigestStream');

return { CompressionStream, DecompressionStream, DigestStream };
});
defineLazyGlobals(compressionFragment, ['CompressionStream', 'DecompressionStream']);
defineLazyProperties(Crypto.prototype, compressionFragment, ['DigestStream']);
