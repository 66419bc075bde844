/*
 * Memory protection keys (Intel MPK / PKU) between the isolates of one
 * process. See docs/mpk.md for what this does and does not protect against.
 *
 * Every page V8 asks the platform for, while an isolate is being created or
 * is entered on this thread, is tagged with that isolate's key; its
 * ArrayBuffer contents come from a per-isolate arena tagged the same way.
 * Entering an isolate writes PKRU so that only key 0 (malloc, stacks, V8's
 * shared read-only heap) and that isolate's key are accessible; leaving it
 * restores what was there. Code running outside any isolate (the event loop,
 * HTTP parsing) can then touch no isolate's pages at all.
 *
 * Modes: "on" when the CPU and kernel have PKU and keys could be allocated;
 * "dry" (EDGENODE_MPK=dry, for tests on machines without PKU) runs every
 * code path here except the key system calls and PKRU writes; "off"
 * otherwise, and then nothing here is in the way of V8 at all.
 */
#include <cpuid.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <map>
#include <mutex>
#include <vector>

#include "internal.h"

/* Present only in processes built with the sanitizers. */
extern "C" void __lsan_disable(void) __attribute__((weak));
extern "C" void __lsan_enable(void) __attribute__((weak));

namespace iso {
namespace {

enum class mode { off, on, dry };

/* Written once by mpk_init_*() before any isolate exists, read-only after. */
struct mpk_state {
  mode how = mode::off;
  int nkeys = 0;
  int keys[15];
  int resident[16];          /* isolates alive per key (index = key) */
  uint32_t mask = 0;         /* AD and WD bits of every key of ours */
  bool single_threaded = false;
  char reason[128] = "not initialised";
};
mpk_state state;
std::mutex keys_mu;          /* resident[] */

/* What this thread is in: the worker entered last, and the key its pages get. */
thread_local iso_worker *current_worker;
thread_local int current_key;

/* ---- PKRU ---- */

inline uint32_t pkru_read() {
  uint32_t eax, edx;
  __asm__ volatile(".byte 0x0f, 0x01, 0xee" : "=a"(eax), "=d"(edx) : "c"(0));
  return eax;
}

inline void pkru_write(uint32_t value) {
  __asm__ volatile(".byte 0x0f, 0x01, 0xef" : : "a"(value), "c"(0), "d"(0) : "memory");
}

/* Two bits per key: access-disable, write-disable. */
inline uint32_t key_bits(int key) {
  return 3u << (2 * key);
}

/* `now` with every key of ours closed except `key` (0: all closed). Keys
 * that are not ours (V8's own) keep whatever V8 set. */
inline uint32_t pkru_for(uint32_t now, int key) {
  uint32_t closed = (now & ~state.mask) | state.mask;
  return key > 0 ? closed & ~key_bits(key) : closed;
}

/* ---- detection ---- */

bool cpu_has_pku(const char **why) {
#if defined(__x86_64__)
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(c & (1u << 3))) {
    *why = "the CPU has no PKU";
    return false;
  }
  if (!(c & (1u << 4))) {
    *why = "the kernel did not enable PKU (no OSPKE)";
    return false;
  }
  return true;
#else
  *why = "not an x86-64 CPU";
  return false;
#endif
}

/* ---- tagging ---- */

/* Gives [p, p+len) key `key` with protection `prot`. */
bool tag(void *p, size_t len, int prot, int key) {
  if (state.how != mode::on)
    return true;
  return pkey_mprotect(p, len, prot, key) == 0;
}

/* ---- the page allocator: every page of every isolate's heap ---- */

class keyed_pages final : public forwarding_pages {
 public:
  explicit keyed_pages(v8::PageAllocator *inner) : forwarding_pages(inner) {}

  void *AllocatePages(void *hint, size_t length, size_t alignment,
                      Permission permissions) override {
    void *p = inner_->AllocatePages(hint, length, alignment, permissions);
    int key = current_key;
    if (p == nullptr || key == 0)
      return p;
    /* Fail closed: an untagged page would be readable by every isolate. */
    if (!tag(p, length, prot_of(permissions), key)) {
      inner_->FreePages(p, length);
      return nullptr;
    }
    std::lock_guard<std::mutex> lock(mu_);
    regions_[(uintptr_t)p] = region{length, key};
    return p;
  }

  /* The pages may be kept for another isolate (pages.cc): they go back to
   * key 0, which any isolate, or none, may be given next. */
  bool FreePages(void *address, size_t length) override {
    if (forget((uintptr_t)address, length) &&
        !tag(address, length, PROT_READ | PROT_WRITE, 0))
      log_error("pkey_mprotect of freed pages: %s", strerror(errno));
    return inner_->FreePages(address, length);
  }

  bool ReleasePages(void *address, size_t length, size_t new_length) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = regions_.find((uintptr_t)address);
      if (it != regions_.end())
        it->second.length = new_length;
    }
    return inner_->ReleasePages(address, length, new_length);
  }

  /* mprotect() keeps a mapping's key: permission changes pass through.
   * Decommitting, though, maps fresh pages over the range, which come with key 0:
   * give them their key back, or a later SetPermissions would open them to
   * every isolate. */
  bool DecommitPages(void *address, size_t size) override {
    if (!inner_->DecommitPages(address, size))
      return false;
    int key = key_of((uintptr_t)address);
    return key == 0 || tag(address, size, PROT_NONE, key);
  }

  /* The key of the region holding `a`, 0 when none. */
  int key_of(uintptr_t a) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = regions_.upper_bound(a);
    if (it == regions_.begin())
      return 0;
    --it;
    return a < it->first + it->second.length ? it->second.key : 0;
  }

 private:
  struct region {
    size_t length;
    int key;
  };

  /* Whether [a, a+length) was keyed, and so must go back to key 0. */
  bool forget(uintptr_t a, size_t length) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = regions_.find(a);
    if (it == regions_.end())
      return false;
    /* V8 frees whole allocations; keep any tail it did not free. */
    if (length < it->second.length)
      regions_[a + length] = region{it->second.length - length, it->second.key};
    regions_.erase(it);
    return true;
  }

  std::mutex mu_;
  std::map<uintptr_t, region> regions_;  /* keyed allocations only */
};

/* ---- V8's background work, allowed into every isolate (it is V8's own
 * code, and needs the pages of whichever isolate it works for) ---- */

class open_task final : public v8::Task {
 public:
  explicit open_task(std::unique_ptr<v8::Task> inner) : inner_(std::move(inner)) {}
  void Run() override {
    mpk_open_scope open;
    inner_->Run();
  }

 private:
  std::unique_ptr<v8::Task> inner_;
};

class open_job final : public v8::JobTask {
 public:
  explicit open_job(std::unique_ptr<v8::JobTask> inner) : inner_(std::move(inner)) {}
  void Run(v8::JobDelegate *delegate) override {
    mpk_open_scope open;
    inner_->Run(delegate);
  }
  size_t GetMaxConcurrency(size_t workers) const override {
    return inner_->GetMaxConcurrency(workers);
  }

 private:
  std::unique_ptr<v8::JobTask> inner_;
};

}  // namespace

/* ---- process start ---- */

bool mpk_active() {
  return state.how != mode::off;
}

void mpk_init_before_v8() {
  const char *env = getenv("EDGENODE_MPK");
  const char *why = nullptr;
  if (env != nullptr && strcmp(env, "off") == 0) {
    snprintf(state.reason, sizeof state.reason, "turned off (EDGENODE_MPK=off)");
    return;
  }
  if (env != nullptr && strcmp(env, "dry") == 0) {
    state.how = mode::dry;
  } else if (!cpu_has_pku(&why)) {
    snprintf(state.reason, sizeof state.reason, "%s", why);
    return;
  } else {
    /* A probe: the kernel may lack support, or another user of keys (a
     * preloaded library) may hold them all. */
    int key = pkey_alloc(0, 0);
    if (key < 0) {
      snprintf(state.reason, sizeof state.reason, "pkey_alloc: %s", strerror(errno));
      return;
    }
    pkey_free(key);
    state.how = mode::on;
  }
  if (state.how == mode::dry)
    snprintf(state.reason, sizeof state.reason, "dry run (EDGENODE_MPK=dry): no keys are used");
  else
    state.reason[0] = '\0';
  /* Pages allocated on V8's background threads belong to no isolate and
   * would stay on key 0; single-threaded, V8 allocates on the isolate's
   * own thread (docs/mpk.md has the measurements). */
  v8::V8::SetFlagsFromString("--single-threaded");
  state.single_threaded = true;
}

v8::PageAllocator *mpk_keyed_pages(v8::PageAllocator *inner) {
  static keyed_pages *pages;
  if (!mpk_active())
    return inner;
  if (pages == nullptr)
    pages = new keyed_pages(inner);
  return pages;
}

std::unique_ptr<v8::Task> mpk_open_task(std::unique_ptr<v8::Task> task) {
  if (!mpk_active())
    return task;
  return std::make_unique<open_task>(std::move(task));
}

std::unique_ptr<v8::JobTask> mpk_open_job(std::unique_ptr<v8::JobTask> job) {
  if (!mpk_active())
    return job;
  return std::make_unique<open_job>(std::move(job));
}

void mpk_init_after_v8() {
  if (state.how == mode::dry) {
    /* As many as a CPU with PKU would leave us, none of them real. */
    for (int k = 1; k <= 14; k++)
      state.keys[state.nkeys++] = k;
    return;
  }
  if (state.how != mode::on)
    return;
  /* V8 took its own key (wasm code protection) during Initialize(). */
  while (state.nkeys < 15) {
    int key = pkey_alloc(0, 0);
    if (key < 0)
      break;
    state.keys[state.nkeys++] = key;
    state.mask |= key_bits(key);
  }
  if (state.nkeys == 0) {
    snprintf(state.reason, sizeof state.reason, "pkey_alloc: %s", strerror(errno));
    state.how = mode::off;
    state.single_threaded = false;  /* already set in V8; harmless */
    return;
  }
  /* Outside any isolate, no isolate's pages are accessible. */
  pkru_write(pkru_for(pkru_read(), 0));
}

/* V8 shares one read-only heap among all isolates and makes it with the
 * first isolate there is, again whenever the last one went. Were that a
 * worker's, the heap would carry its key and every other isolate would
 * fault on it: one isolate made outside any worker holds it, on key 0, for
 * the life of the process. */
void mpk_pin_shared_heap() {
  /* Never disposed; held here so that leak checkers see it is meant to live. */
  static v8::ArrayBuffer::Allocator *pin_allocator;
  static v8::Isolate *pin;
  if (!mpk_active() || pin != nullptr)
    return;
  pin_allocator = v8::ArrayBuffer::Allocator::NewDefaultAllocator();
  v8::Isolate::CreateParams params;
  params.array_buffer_allocator = pin_allocator;
  params.snapshot_blob = snapshot_blob();
  params.external_references = snapshot_references();
  /* Its heap's bookkeeping is reachable only from page headers, which a
   * leak checker does not scan: under the sanitizers, tell it so. */
  if (__lsan_disable != nullptr)
    __lsan_disable();
  pin = v8::Isolate::New(params);
  if (__lsan_enable != nullptr)
    __lsan_enable();
}

/* ---- keys of isolates ---- */

int mpk_key_take() {
  if (!mpk_active() || state.nkeys == 0)
    return 0;
  std::lock_guard<std::mutex> lock(keys_mu);
  int best = state.keys[0];
  for (int i = 1; i < state.nkeys; i++)
    if (state.resident[state.keys[i]] < state.resident[best])
      best = state.keys[i];
  state.resident[best]++;
  return best;
}

void mpk_key_release(int key) {
  if (key <= 0)
    return;
  std::lock_guard<std::mutex> lock(keys_mu);
  state.resident[key]--;
}

/* ---- entering ---- */

mpk_scope::mpk_scope(iso_worker *w) {
  active_ = mpk_active();
  if (!active_)
    return;
  saved_worker_ = current_worker;
  saved_key_ = current_key;
  current_worker = w;
  current_key = w->pkey;
  if (state.how == mode::on) {
    /* Reading is cheap, writing less so: nested calls into the same
     * isolate write nothing. */
    saved_pkru_ = pkru_read();
    uint32_t want = pkru_for(saved_pkru_, w->pkey);
    if (want != saved_pkru_)
      pkru_write(want);
  }
}

mpk_scope::~mpk_scope() {
  if (!active_)
    return;
  if (state.how == mode::on && pkru_read() != saved_pkru_)
    pkru_write(saved_pkru_);
  current_worker = saved_worker_;
  current_key = saved_key_;
}

mpk_open_scope::mpk_open_scope() {
  active_ = state.how == mode::on;
  if (!active_)
    return;
  saved_pkru_ = pkru_read();
  pkru_write(saved_pkru_ & ~state.mask);
}

mpk_open_scope::~mpk_open_scope() {
  if (active_)
    pkru_write(saved_pkru_);
}

void mpk_thread_close() {
  if (state.how == mode::on)
    pkru_write(pkru_for(pkru_read(), 0));
}

/* ---- ArrayBuffer contents: a small arena per isolate on pages of its key ----
 *
 * Small buffers share 64 KiB chunks of one size class each; bookkeeping
 * lives in malloc'd memory (key 0), never in the chunks, so a free on a
 * thread that cannot access the key still works. Bigger buffers get pages
 * of their own. */

namespace {

constexpr size_t kChunkBytes = 64 * 1024;
constexpr size_t kMinSlot = 16;
constexpr size_t kMaxSlot = 2048;
constexpr int kClasses = 8;  /* 16, 32, ... 2048 */
constexpr size_t kPage = 4096;

int class_of(size_t length) {
  int c = 0;
  for (size_t size = kMinSlot; size < length; size <<= 1)
    c++;
  return c;
}

struct chunk {
  uint8_t *base;
  int cls;
  uint32_t slots;
  uint32_t used;
  bool listed;  /* in its class's list of chunks with room */
  uint64_t bits[kChunkBytes / kMinSlot / 64];
};

}  // namespace

struct arena {
  std::mutex mu;
  int key;
  std::map<uintptr_t, chunk *> chunks;
  std::vector<chunk *> room[kClasses];  /* chunks that may have a free slot */
};

namespace {

void *map_pages(size_t length, int key) {
  void *p = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return nullptr;
  if (key != 0 && !tag(p, length, PROT_READ | PROT_WRITE, key)) {
    munmap(p, length);
    return nullptr;
  }
  return p;
}

chunk *chunk_new(arena *a, int cls) {
  void *p = map_pages(kChunkBytes, a->key);
  if (p == nullptr)
    return nullptr;
  chunk *c = new chunk();
  c->base = (uint8_t *)p;
  c->cls = cls;
  c->slots = (uint32_t)(kChunkBytes / (kMinSlot << cls));
  a->chunks[(uintptr_t)p] = c;
  return c;
}

void *chunk_take(chunk *c) {
  for (uint32_t w = 0; w * 64 < c->slots; w++) {
    if (c->bits[w] == ~0ull)
      continue;
    int bit = __builtin_ctzll(~c->bits[w]);
    c->bits[w] |= 1ull << bit;
    c->used++;
    return c->base + (size_t)(w * 64 + (uint32_t)bit) * (kMinSlot << c->cls);
  }
  return nullptr;
}

void *small_alloc(arena *a, size_t length) {
  int cls = class_of(length);
  std::lock_guard<std::mutex> lock(a->mu);
  std::vector<chunk *> &room = a->room[cls];
  while (!room.empty() && room.back()->used == room.back()->slots) {
    room.back()->listed = false;
    room.pop_back();
  }
  if (room.empty()) {
    chunk *c = chunk_new(a, cls);
    if (c == nullptr)
      return nullptr;
    c->listed = true;
    room.push_back(c);
  }
  return chunk_take(room.back());
}

void small_free(arena *a, void *data) {
  std::lock_guard<std::mutex> lock(a->mu);
  auto it = a->chunks.upper_bound((uintptr_t)data);
  if (it == a->chunks.begin())
    abort();  /* not ours: a double free or a stray pointer */
  chunk *c = (--it)->second;
  size_t slot = ((uint8_t *)data - c->base) / (kMinSlot << c->cls);
  if (slot >= c->slots || !(c->bits[slot / 64] & (1ull << (slot % 64))))
    abort();
  c->bits[slot / 64] &= ~(1ull << (slot % 64));
  c->used--;
  if (!c->listed) {
    c->listed = true;
    a->room[c->cls].push_back(c);
  }
  /* An empty chunk gives its memory back but keeps its pages and key;
   * the one new buffers come from next keeps its memory too. */
  if (c->used == 0 && a->room[c->cls].back() != c)
    madvise(c->base, kChunkBytes, MADV_DONTNEED);
}

size_t page_round(size_t length) {
  return (length + kPage - 1) & ~(kPage - 1);
}

}  // namespace

arena *arena_new(int key) {
  if (!mpk_active())
    return nullptr;
  arena *a = new arena();
  a->key = key;
  return a;
}

void arena_free(arena *a) {
  if (a == nullptr)
    return;
  for (auto &entry : a->chunks) {
    munmap(entry.second->base, kChunkBytes);
    delete entry.second;
  }
  delete a;
}

void *arena_alloc(arena *a, size_t length, bool zero) {
  if (length == 0)
    length = 1;
  if (length > kMaxSlot)
    return map_pages(page_round(length), a->key);  /* fresh pages are zero */
  void *p = small_alloc(a, length);
  if (p != nullptr && zero)
    memset(p, 0, length);
  return p;
}

void arena_release(arena *a, void *data, size_t length) {
  if (length > kMaxSlot) {
    munmap(data, page_round(length));
    return;
  }
  small_free(a, data);
}

}  // namespace iso

using namespace iso;

void iso_mpk_status_get(iso_mpk_status *out) {
  out->enabled = state.how == mode::on;
  out->keys = state.how == mode::on ? state.nkeys : 0;
  out->single_threaded = state.single_threaded ? 1 : 0;
  out->reason = state.reason;
}

int iso_worker_pkey(const iso_worker *w) {
  return w == nullptr ? 0 : w->pkey;
}

iso_worker *iso_worker_current(void) {
  return current_worker;
}

void *iso_worker_host_data(const iso_worker *w) {
  return w == nullptr ? nullptr : w->host.data;
}

void iso_mpk_signal_enter(void) {
  /* The kernel already runs handlers with its default PKRU (key 0 only);
   * this makes it ours whatever the kernel does. */
  if (state.how == mode::on)
    pkru_write(pkru_for(pkru_read(), 0));
}

void iso_worker_call_inside(iso_worker *w, void (*fn)(void *arg), void *arg) {
  mpk_scope inside(w);
  v8::Isolate::Scope isolate_scope(w->isolate);
  fn(arg);
}

const void *iso_worker_address_of(iso_worker *w, const char *name) {
  mpk_scope inside(w);
  v8::Isolate *isolate = w->isolate;
  v8::Isolate::Scope isolate_scope(isolate);
  v8::HandleScope handles(isolate);
  v8::Local<v8::Context> context = w->context.Get(isolate);
  v8::Context::Scope context_scope(context);
  v8::Local<v8::Value> v;
  v8::Local<v8::Object> global = context->Global();
  /* GetRealNamedProperty runs no getter and no proxy trap. */
  if (!global->GetRealNamedProperty(context, str(isolate, name)).ToLocal(&v))
    return nullptr;
  if (v->IsArrayBufferView()) {
    v8::Local<v8::ArrayBufferView> view = v.As<v8::ArrayBufferView>();
    return (const uint8_t *)view->Buffer()->Data() + view->ByteOffset();
  }
  if (!v->IsObject())
    return nullptr;
  /* A Local is a slot (on key 0) holding the tagged pointer to the object. */
  uintptr_t tagged = *reinterpret_cast<const uintptr_t *>(*v);
  return reinterpret_cast<const void *>(tagged & ~(uintptr_t)1);
}
