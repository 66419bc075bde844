/*
 * WebAssembly memories under the worker's memory limit.
 *
 * V8 keeps a wasm Memory outside both its heap and the ArrayBuffer
 * allocator: it reserves the Memory's whole capacity through the platform's
 * page allocator (4 GiB of address space for a Memory without a maximum,
 * inaccessible; 10 GiB with guard regions if the trap handler were on,
 * which it is not: worker/mpk.c has SIGSEGV), opens the initial pages for
 * reading and writing, and opens more on each grow. Only what is open can
 * become resident, so what is open is what counts: each worker's open wasm
 * pages are charged to the same cap as its ArrayBuffers (allocator.cc), and
 * a grow that would pass it is refused, which wasm sees as memory.grow
 * returning -1 and JavaScript as a RangeError from Memory.prototype.grow.
 *
 * V8 cannot take a refusal everywhere. A new Memory's first pages that do
 * not fit would end the process (V8 treats that as the system out of
 * memory), so they are let through and the worker is stopped at once with
 * the memory limit, as when its heap passes it: nothing has touched those
 * pages yet. And a refused grow makes V8 try a bigger copy of the Memory:
 * after a refusal the worker's reservations that do not fit what is left
 * are refused too, until one of its Memories is freed.
 *
 * Reservations are address space, not memory, but V8 allows a process
 * about 1 TiB of them for all its isolates together: a worker holds at
 * most kMaxMemories live Memories, so that one tenant cannot use up what
 * its neighbours' wasm needs.
 */
#include <string.h>

#include <atomic>
#include <map>
#include <mutex>

#include "internal.h"

namespace iso {
namespace {

/* What V8 aligns a wasm Memory's reservation to (its 64 KiB wasm page);
 * nothing else it allocates is aligned so. */
constexpr size_t kWasmPageBytes = 64u << 10;
constexpr int kMaxMemories = 16;

struct wasm_region {
  allocator *owner;  /* the worker's ArrayBuffer cap, charged for `open` */
  iso_worker *worker;
  char *top;         /* the end of what is open; null before the first commit */
  size_t length;
  size_t open;       /* bytes charged */
};

/* The worker running JavaScript on this thread: wasm memories are only
 * made and grown from JavaScript. Null on V8's own threads. */
iso_worker *running_worker() {
  v8::Isolate *isolate = v8::Isolate::TryGetCurrent();
  return isolate ? static_cast<iso_worker *>(isolate->GetData(kIsolateWorkerSlot)) : nullptr;
}

class counted_pages final : public forwarding_pages {
 public:
  explicit counted_pages(v8::PageAllocator *inner) : forwarding_pages(inner) {}

  void *AllocatePages(void *hint, size_t length, size_t alignment,
                      Permission permissions) override {
    iso_worker *w = nullptr;
    if (alignment == kWasmPageBytes && permissions == kNoAccess)
      w = running_worker();
    if (w == nullptr)
      return inner_->AllocatePages(hint, length, alignment, permissions);
    if (!admit(w, length))
      return nullptr;
    void *p = inner_->AllocatePages(hint, length, alignment, permissions);
    std::lock_guard<std::mutex> lock(mu_);
    if (p != nullptr)
      regions_[(char *)p] = wasm_region{w->array_buffers, w, nullptr, length, 0};
    else
      w->wasm_memories--;
    live_.store(regions_.size(), std::memory_order_relaxed);
    return p;
  }

  /* Every heap page V8 opens comes through here too: without wasm
   * Memories, one atomic load is all it costs. */
  bool SetPermissions(void *address, size_t length, Permission permissions) override {
    if (permissions == kReadWrite && live_.load(std::memory_order_relaxed) > 0 &&
        !charge((char *)address, length))
      return false;
    return inner_->SetPermissions(address, length, permissions);
  }

  bool FreePages(void *address, size_t length) override {
    if (live_.load(std::memory_order_relaxed) > 0) {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = regions_.find((char *)address);
      if (it != regions_.end()) {
        it->second.owner->give_back(it->second.open);
        it->second.worker->wasm_memories--;
        it->second.worker->wasm_refused.store(false, std::memory_order_relaxed);
        regions_.erase(it);
        live_.store(regions_.size(), std::memory_order_relaxed);
      }
    }
    return inner_->FreePages(address, length);
  }

  void forget(const iso_worker *w) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = regions_.begin(); it != regions_.end();) {
      if (it->second.worker == w) {
        log_warn("a wasm memory of %zu bytes outlived its isolate", it->second.length);
        it = regions_.erase(it);
      } else {
        ++it;
      }
    }
    live_.store(regions_.size(), std::memory_order_relaxed);
  }

 private:
  /* Whether worker `w` may reserve a Memory of `length` bytes. */
  bool admit(iso_worker *w, size_t length) {
    std::lock_guard<std::mutex> lock(mu_);
    if (w->wasm_memories >= kMaxMemories) {
      w->array_buffers->note_refusal();
      return false;
    }
    /* Retrying a refused grow with a copy: it would not fit either. */
    if (w->wasm_refused.load(std::memory_order_relaxed) && length > w->array_buffers->left())
      return false;
    w->wasm_memories++;
    return true;
  }

  /* Charges what opening [address, address + length) adds to a wasm
   * region; false when the worker's cap refuses it. */
  bool charge(char *address, size_t length) {
    std::lock_guard<std::mutex> lock(mu_);
    wasm_region *r = region_of(address);
    if (r == nullptr)
      return true;
    char *from = r->top != nullptr && r->top > address ? r->top : address;
    char *end = address + length;
    if (end <= from)
      return true;
    size_t more = (size_t)(end - from);
    if (!r->owner->take(more)) {
      if (r->top != nullptr) {
        r->worker->wasm_refused.store(true, std::memory_order_relaxed);
        return false;
      }
      /* A new Memory: V8 would abort the process on a refusal here. */
      r->owner->take_anyway(more);
      memory_limit_hit(r->worker);
    }
    r->open += more;
    r->top = end;
    return true;
  }

  wasm_region *region_of(char *address) {
    auto it = regions_.upper_bound(address);
    if (it == regions_.begin())
      return nullptr;
    --it;
    return address < it->first + it->second.length ? &it->second : nullptr;
  }

  std::mutex mu_;
  std::map<char *, wasm_region> regions_;  /* by reservation start */
  std::atomic<size_t> live_{0};            /* regions_.size() */
};

counted_pages *counted;

}  // namespace

v8::PageAllocator *wasm_counted_pages(v8::PageAllocator *inner) {
  if (counted == nullptr)
    counted = new counted_pages(inner);
  return counted;
}

void wasm_forget(const iso_worker *w) {
  if (counted != nullptr)
    counted->forget(w);
}

}  // namespace iso
