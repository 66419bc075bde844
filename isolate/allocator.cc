/*
 * ArrayBuffer contents, capped per isolate: V8 keeps them outside its heap,
 * so the heap limit does not see them and only this allocator stops them
 * (JavaScript then gets a RangeError). Also the buffers the shim itself
 * makes for a worker (new_buffer, new_bytes), which count against the same
 * cap, and the growable scratch buffer responses are assembled in.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

namespace iso {

bool allocator::reserve(size_t length) {
  size_t used = used_.load(std::memory_order_relaxed);
  do {
    if (length > cap_ - used) {
      refused_.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
  } while (!used_.compare_exchange_weak(used, used + length, std::memory_order_relaxed));
  return true;
}

void *allocator::Allocate(size_t length) {
  if (!reserve(length))
    return nullptr;
  void *p = keyed_ ? arena_alloc(keyed_, length, true) : calloc(1, length ? length : 1);
  if (p == nullptr)
    used_.fetch_sub(length, std::memory_order_relaxed);
  return p;
}

void *allocator::AllocateUninitialized(size_t length) {
  if (!reserve(length))
    return nullptr;
  void *p = keyed_ ? arena_alloc(keyed_, length, false) : malloc(length ? length : 1);
  if (p == nullptr)
    used_.fetch_sub(length, std::memory_order_relaxed);
  return p;
}

void allocator::Free(void *data, size_t length) {
  if (data == nullptr)
    return;
  if (keyed_)
    arena_release(keyed_, data, length);
  else
    free(data);
  used_.fetch_sub(length, std::memory_order_relaxed);
}

allocator::~allocator() {
  arena_free(keyed_);
}

char *scratch::reserve(size_t more) {
  if (cap - len < more) {
    size_t want = cap ? cap : 1024;
    while (want - len < more)
      want *= 2;
    data = (char *)xrealloc(data, want);
    cap = want;
  }
  return data + len;
}

namespace {

void free_bytes(void *data, size_t length, void *deleter_data) {
  static_cast<allocator *>(deleter_data)->Free(data, length);
}

}  // namespace

v8::MaybeLocal<v8::ArrayBuffer> new_buffer(iso_worker *w, size_t len, uint8_t **data) {
  *data = nullptr;
  if (w == nullptr) {
    v8::Local<v8::ArrayBuffer> ab = v8::ArrayBuffer::New(v8::Isolate::GetCurrent(), len);
    *data = (uint8_t *)ab->Data();
    return ab;
  }
  v8::Isolate *isolate = w->isolate;
  if (len == 0)
    return v8::ArrayBuffer::New(isolate, 0);
  /* ArrayBuffer::New(isolate, len) aborts the process when the allocator
   * refuses; owning the memory keeps a refusal a RangeError. */
  void *p = w->array_buffers->AllocateUninitialized(len);
  if (p == nullptr) {
    /* Buffers nothing reaches still count until a collection frees them
     * (V8 collects before it refuses JavaScript's own allocations): after a
     * request stopped at a limit, the next one's body was refused. */
    isolate->MemoryPressureNotification(v8::MemoryPressureLevel::kCritical);
    p = w->array_buffers->AllocateUninitialized(len);
  }
  if (p == nullptr) {
    isolate->ThrowException(
        v8::Exception::RangeError(str(isolate, "Array buffer allocation failed")));
    return {};
  }
  std::unique_ptr<v8::BackingStore> store =
      v8::ArrayBuffer::NewBackingStore(p, len, free_bytes, w->array_buffers);
  *data = (uint8_t *)p;
  return v8::ArrayBuffer::New(isolate, std::move(store));
}

v8::MaybeLocal<v8::Uint8Array> new_bytes(iso_worker *w, size_t len, uint8_t **data) {
  v8::Local<v8::ArrayBuffer> ab;
  if (!new_buffer(w, len, data).ToLocal(&ab))
    return {};
  return v8::Uint8Array::New(ab, 0, len);
}

}  // namespace iso
