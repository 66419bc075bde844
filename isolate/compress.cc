/*
 * zlib streams for CompressionStream / DecompressionStream (runtime/29-compression.js).
 *
 * A stream's whole state - the z_stream and everything zlib allocates for it
 * - lives in an ArrayBuffer the runtime allocates and keeps private: zlib's
 * allocator hands out pieces of it. So the state counts against the
 * isolate's memory cap, needs no finalizer, and dies with the buffer when
 * the stream is collected or the isolate goes away. V8 never moves an
 * ArrayBuffer's contents, so the pointers zlib keeps into it stay valid.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <zlib.h>

#include <vector>

#include "internal.h"
#include "natives.h"

namespace iso {
namespace {

using Info = v8::FunctionCallbackInfo<v8::Value>;

constexpr uint32_t kMagic = 0x7a6c6962; /* "zlib" */
/* What zlib needs at windowBits 15, memLevel 8 (zlib.h: deflate
 * 2^17 + 2^17 bytes plus its state; inflate a 32 KiB window plus its state),
 * with room to spare. */
constexpr size_t kDeflateArena = 300 * 1024;
constexpr size_t kInflateArena = 64 * 1024;
constexpr size_t kChunk = 64 * 1024; /* bytes of output per returned chunk */

struct arena {
  uint32_t magic;
  bool compress;
  bool ended;  /* the compressed stream is complete */
  size_t used; /* bytes of heap handed out */
  size_t cap;  /* bytes of heap */
  z_stream strm;
  alignas(16) unsigned char heap[1];
};

voidpf arena_alloc(voidpf opaque, uInt items, uInt size) {
  arena *a = static_cast<arena *>(opaque);
  size_t n = (size_t)items * size;
  n = (n + 15) & ~(size_t)15;
  if (n > a->cap - a->used)
    return Z_NULL;
  void *p = a->heap + a->used;
  a->used += n;
  return p;
}

void arena_free(voidpf, voidpf) {
  /* Everything goes at once, with the ArrayBuffer. */
}

void throw_type_error(v8::Isolate *isolate, const char *msg) {
  isolate->ThrowException(v8::Exception::TypeError(str(isolate, msg)));
}

/* The arena in argument 0; `fresh` for one not initialised yet. */
arena *arg_arena(const Info &info, bool fresh) {
  v8::Isolate *isolate = info.GetIsolate();
  if (!info[0]->IsArrayBuffer()) {
    throw_type_error(isolate, "expected a zlib arena");
    return nullptr;
  }
  v8::Local<v8::ArrayBuffer> ab = info[0].As<v8::ArrayBuffer>();
  size_t len = ab->ByteLength();
  void *data = ab->Data();
  if (len < sizeof(arena) || data == nullptr || (uintptr_t)data % alignof(arena) != 0) {
    throw_type_error(isolate, "expected a zlib arena");
    return nullptr;
  }
  arena *a = static_cast<arena *>(data);
  if (fresh ? a->magic == kMagic : (a->magic != kMagic || a->cap != len - offsetof(arena, heap))) {
    throw_type_error(isolate, fresh ? "the zlib arena is in use" : "expected a zlib arena");
    return nullptr;
  }
  return a;
}

/* zlibArenaSize(compress) -> bytes the runtime allocates for one stream */
void zlib_arena_size(const Info &info) {
  bool compress = info[0]->BooleanValue(info.GetIsolate());
  info.GetReturnValue().Set((double)(offsetof(arena, heap) + (compress ? kDeflateArena : kInflateArena)));
}

/* zlibInit(arena, format, compress): format "gzip" | "deflate" | "deflate-raw" */
void zlib_init(const Info &info) {
  v8::Isolate *isolate = info.GetIsolate();
  arena *a = arg_arena(info, true);
  if (a == nullptr)
    return;
  v8::String::Utf8Value format(isolate, info[1]);
  int bits;
  if (*format != nullptr && strcmp(*format, "gzip") == 0)
    bits = 15 + 16;
  else if (*format != nullptr && strcmp(*format, "deflate") == 0)
    bits = 15;
  else if (*format != nullptr && strcmp(*format, "deflate-raw") == 0)
    bits = -15;
  else {
    throw_type_error(isolate, "unsupported compression format");
    return;
  }
  size_t len = info[0].As<v8::ArrayBuffer>()->ByteLength();
  memset(a, 0, offsetof(arena, heap));
  a->compress = info[2]->BooleanValue(isolate);
  a->cap = len - offsetof(arena, heap);
  a->strm.zalloc = arena_alloc;
  a->strm.zfree = arena_free;
  a->strm.opaque = a;
  int rc = a->compress
               ? deflateInit2(&a->strm, Z_DEFAULT_COMPRESSION, Z_DEFLATED, bits, 8, Z_DEFAULT_STRATEGY)
               : inflateInit2(&a->strm, bits);
  if (rc != Z_OK) {
    throw_type_error(isolate, "zlib could not start a stream");
    return;
  }
  a->magic = kMagic;
}

/*
 * zlibPush(arena, input | null, finish) -> [ended, unused, chunk...]
 * Runs all of `input` through the stream (and ends it when `finish`).
 * `ended`: the compressed stream is complete; `unused`: input bytes after its
 * end (a decompressor's trailing garbage). Invalid or, with `finish`,
 * truncated compressed data throws a TypeError.
 */
void zlib_push(const Info &info) {
  v8::Isolate *isolate = info.GetIsolate();
  v8::Local<v8::Context> context = isolate->GetCurrentContext();
  iso_worker *w = worker_of(context);
  arena *a = arg_arena(info, false);
  if (a == nullptr)
    return;
  const uint8_t *in = nullptr;
  size_t in_len = 0;
  if (info[1]->IsArrayBufferView()) {
    v8::Local<v8::ArrayBufferView> view = info[1].As<v8::ArrayBufferView>();
    in_len = view->ByteLength();
    in = in_len ? (const uint8_t *)view->Buffer()->Data() + view->ByteOffset() : nullptr;
  } else if (!info[1]->IsNullOrUndefined()) {
    throw_type_error(isolate, "expected a Uint8Array");
    return;
  }
  bool finish = info[2]->BooleanValue(isolate);
  v8::Local<v8::Array> result = v8::Array::New(isolate);
  uint32_t n_out = 2;
  z_stream *s = &a->strm;
  std::vector<uint8_t> out(kChunk);
  const char *error = nullptr;
  size_t offset = 0;
  /* zlib's avail_in is a uInt: feed huge inputs in slices. */
  while (!a->ended && error == nullptr) {
    size_t slice = in_len - offset;
    if (slice > (1u << 30))
      slice = 1u << 30;
    s->next_in = const_cast<Bytef *>(in != nullptr ? in + offset : nullptr);
    s->avail_in = (uInt)slice;
    bool last_slice = offset + slice == in_len;
    int flush = finish && last_slice ? Z_FINISH : Z_NO_FLUSH;
    for (;;) {
      s->next_out = out.data();
      s->avail_out = (uInt)out.size();
      int rc = a->compress ? deflate(s, flush) : inflate(s, flush);
      size_t produced = out.size() - s->avail_out;
      if (produced > 0) {
        uint8_t *data;
        v8::Local<v8::Uint8Array> chunk;
        if (!new_bytes(w, produced, &data).ToLocal(&chunk))
          goto out;  /* RangeError pending: the isolate's memory cap */
        memcpy(data, out.data(), produced);
        if (result->Set(context, n_out++, chunk).IsNothing())
          goto out;
      }
      if (rc == Z_STREAM_END) {
        a->ended = true;
        break;
      }
      if (rc == Z_NEED_DICT || rc == Z_DATA_ERROR || rc == Z_STREAM_ERROR || rc == Z_MEM_ERROR) {
        error = rc == Z_MEM_ERROR ? "zlib ran out of memory" : "The compressed data is invalid";
        break;
      }
      /* Z_OK or Z_BUF_ERROR: go on while zlib filled the whole buffer. */
      if (s->avail_out != 0 || (rc == Z_BUF_ERROR && produced == 0))
        break;
    }
    offset += slice - s->avail_in;
    if (a->ended || error != nullptr || last_slice)
      break;
  }
  if (error == nullptr && finish && !a->ended) {
    /* A decompressor at the end of its input without the end of the stream. */
    error = a->compress ? "zlib could not finish the stream" : "The compressed data is truncated";
  }
  if (error != nullptr) {
    throw_type_error(isolate, error);
    goto out;
  }
  if (result->Set(context, 0, v8::Boolean::New(isolate, a->ended)).IsNothing() ||
      result->Set(context, 1, v8::Number::New(isolate, (double)(in_len - offset))).IsNothing())
    goto out;
  info.GetReturnValue().Set(result);
out:
  /* No pointer into this call's buffers may outlive it. */
  s->next_in = nullptr;
  s->avail_in = 0;
  s->next_out = nullptr;
  s->avail_out = 0;
}

}  // namespace

bool compress_natives_add(v8::Local<v8::Context> context, v8::Local<v8::Object> native) {
  return natives_set(context, native, "zlibArenaSize", zlib_arena_size) &&
         natives_set(context, native, "zlibInit", zlib_init) &&
         natives_set(context, native, "zlibPush", zlib_push);
}

}  // namespace iso
