/*
 * What the isolate/ sources share. Nothing here is visible outside the folder.
 */
#ifndef EDGENODE_ISOLATE_INTERNAL_H
#define EDGENODE_ISOLATE_INTERNAL_H

#include <setjmp.h>
#include <stdint.h>
#include <time.h>

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <openssl/types.h>
#include <v8.h>

extern "C" {
#include "base.h"
}
#include "isolate.h"

extern const unsigned char iso_runtime_js[];
extern const size_t iso_runtime_js_len;

namespace iso {

/* Resource name of the runtime script in stack traces. */
constexpr const char *kRuntimeName = "edgenode:runtime";
/* Context embedder data slot holding the iso_worker*. */
constexpr int kWorkerSlot = 1;

/* ---- watchdog.cc: the CPU limit ---- */

/*
 * One entry into JavaScript under a CPU limit. Embedded in its worker; linked
 * into the watchdog's list only while armed.
 */
struct watch {
  v8::Isolate *isolate;
  clockid_t clock;        /* CPU clock of the thread that armed it */
  uint64_t cpu_start_ns;  /* that clock when armed (an upper bound) */
  uint64_t cpu_base_ns;   /* the reading cpu_start_ns was derived from */
  uint64_t wall_start_ns; /* monotonic time when armed */
  uint64_t cpu_limit_ns;
  uint64_t wake_ns;       /* monotonic time at which to look again */
  uint64_t generation;    /* of the current arming */
  uint64_t fired;         /* generation that was terminated, 0 = none */
  watch *prev, *next;
};

void watchdog_arm(watch *wt, uint64_t cpu_limit_ns);
/* Returns the CPU time the entry used (erring high, never low), and sets
 * *fired if this arming ran out of CPU and its isolate was terminated. */
uint64_t watchdog_disarm(watch *wt, bool *fired);
/* CPU used since arming, as watchdog_disarm() would count it now. */
uint64_t watchdog_used(const watch *wt);
/* Whether the current arming ran out of CPU. V8 forgets a termination once
 * no JavaScript is left on the stack, so between two calls into it from C++
 * this is what still says that the entry is over. */
bool watchdog_fired(watch *wt);

/* ---- create.cc: making and disposing workers ---- */

/* The default memory limit: pooled isolates are made with it (a heap's
 * limit is fixed when the isolate is created). */
constexpr uint32_t kDefaultMemoryMb = 128;

/* A worker with its isolate and context ready and no tenant code in it:
 * what the pool holds. NULL (and *err filled) on failure. Any thread. */
iso_worker *worker_blank(uint32_t memory_mb, iso_error *err);
void worker_destroy(iso_worker *w);
/* What a worker's isolate holds: its heap and its ArrayBuffers, in bytes. */
size_t worker_held_bytes(iso_worker *w);
/* Destroys a worker nobody uses any more: on the pool's thread when it can
 * (disposing takes half a millisecond or more), here otherwise. */
void worker_release(iso_worker *w);

/* ---- pool.cc: blank workers made ahead ---- */

/* A blank worker from the pool, ready for the calling thread; NULL when
 * the pool is empty or the limit is not the default. */
iso_worker *pool_take(uint32_t memory_mb);
/* The stack limit V8 would have set had the calling thread made the
 * isolate: what a worker made on another thread takes when it moves. */
uintptr_t this_thread_stack_limit();
/* For options with a .py module: a worker with a Python interpreter
 * booted, from python.cc's pool or booted now (NULL and *err when no
 * isolate could be made). NULL without *err for options without Python. */
iso_worker *python_take(uint32_t memory_mb, const iso_worker_options *o, iso_error *err);
/* Hands a worker nobody uses any more to the pool's thread, which destroys
 * it before it makes the next blank one; false when that thread is not
 * running or has enough waiting, and the caller destroys it itself. */
bool pool_retire(iso_worker *w);
/* Asks the pool's thread to give back the kept heap pages older than
 * `older_than_ms` once it has made its blanks; false when it is not
 * running, and the caller trims them itself (pages_trim). */
bool pool_trim(uint64_t older_than_ms);

/* ---- platform.cc ---- */

bool platform_ready();
/* The platform's clock, in seconds. */
double platform_now();

/*
 * A worker's foreground tasks: what V8 queues for the isolate's own thread
 * (a FinalizationRegistry's callbacks, steps of the memory reducer and of
 * incremental marking). Posted from any thread; the worker runs those due
 * at the end of its outermost entries (run.cc). In the order posted.
 */
class task_queue {
 public:
  std::atomic<size_t> queued{0};  /* tasks in the queue, due or not */

  void post(std::unique_ptr<v8::Task> task, double delay_s);
  /* The first task that is due, or null. */
  std::unique_ptr<v8::Task> take_due();
  /* Drops every task: after Dispose, which has cancelled them. */
  void clear();

 private:
  struct queued_task {
    double due;  /* platform_now() seconds; 0 = at once */
    std::unique_ptr<v8::Task> task;
  };
  std::mutex mu_;
  std::deque<queued_task> tasks_;
};

/* The Isolate::GetData slot that holds the isolate's iso_worker. */
constexpr uint32_t kIsolateWorkerSlot = 0;

/* Request tokens cross into JavaScript as plain numbers: below 2^53 they
 * are exact. */
constexpr uint64_t kMaxSafeToken = 9007199254740992ull;

/* ---- snapshot.cc: the runtime, evaluated once per process ---- */

/* What the snapshot's context carries for the shim (Context::GetDataFromSnapshotOnce). */
enum snapshot_slot {
  kSlotSetHandler,  /* the runtime's entry points */
  kSlotDispatch,
  kSlotFireTimer,
  kSlotNative,      /* the `native` object the runtime was given */
  kSlotInstallWasm, /* makes a context's WebAssembly the runtime's (42-wasm.js) */
  kSnapshotSlots,
};

/* Evaluates the runtime and makes the blob; once, from iso_platform_init(). */
bool snapshot_build(std::string *error);
v8::StartupData *snapshot_blob();
/* Null-terminated; what CreateParams::external_references must be. */
const intptr_t *snapshot_references();
size_t snapshot_index(snapshot_slot slot);

/* ---- allocator.cc and the worker ---- */

struct arena;

/* ArrayBuffer contents live outside V8's heap: this caps them per isolate.
 * With memory protection keys they come from `keyed`, on pages of the
 * isolate's key (mpk.cc); otherwise from malloc. */
class allocator final : public v8::ArrayBuffer::Allocator {
 public:
  explicit allocator(size_t cap, arena *keyed = nullptr) : cap_(cap), keyed_(keyed) {}
  ~allocator() override;
  void *Allocate(size_t length) override;
  void *AllocateUninitialized(size_t length) override;
  void Free(void *data, size_t length) override;
  /* Allocations refused so far: a request that fails after one hit the cap. */
  uint64_t refusals() const { return refused_.load(std::memory_order_relaxed); }
  size_t used() const { return used_.load(std::memory_order_relaxed); }
  /* Memory the cap counts that is not an ArrayBuffer's (wasm.cc). */
  bool take(size_t length) { return reserve(length); }
  void take_anyway(size_t length) { used_.fetch_add(length, std::memory_order_relaxed); }
  void give_back(size_t length) { used_.fetch_sub(length, std::memory_order_relaxed); }
  size_t left() const {
    size_t used = this->used();
    return used < cap_ ? cap_ - used : 0;
  }
  void note_refusal() { refused_.fetch_add(1, std::memory_order_relaxed); }

 private:
  bool reserve(size_t length);
  size_t cap_;
  arena *keyed_;
  std::atomic<size_t> used_{0};  /* backing stores may be freed on V8's threads */
  std::atomic<uint64_t> refused_{0};
};

struct module_entry {
  std::string name;
  v8::Global<v8::Module> module;
  v8::Global<v8::Value> wasm;  /* a .wasm module's default export (modules.cc) */
};

struct pending_request {
  uint64_t token;
  bool responded;
  bool streaming;   /* its body is going out through iso_host_stream (respond.cc) */
  uint64_t cpu_ns;  /* used by the entries made for it, the current one excepted */
  uint64_t refusals; /* the allocator's refusals() when it started */
};

/* An async host call waiting for iso_worker_complete(). */
struct async_call {
  uint64_t token;
  v8::Global<v8::Promise::Resolver> resolver;
};

/* The outermost call into a worker, which V8 running out of memory returns to (run.cc). */
struct oom_guard {
  sigjmp_buf jmp;
  iso_worker *w;
  oom_guard *outer;  /* another worker's, entered from a host callback */
};

/* A name string the direct host calls saw last, by identity (see
 * hostcalls.cc: direct_name). */
struct name_memo {
  v8::Global<v8::String> js;
  std::string utf8;
};

/* A growable byte buffer reused across requests. */
struct scratch {
  char *data = nullptr;
  size_t len = 0;
  size_t cap = 0;
  char *reserve(size_t more);
};

}  // namespace iso

struct iso_worker {
  iso_host host;
  iso_host_calls host_calls{};  /* all NULL when the host gave none */
  iso_host_stream host_stream{}; /* all NULL when responses are not streamed */
  uint64_t cpu_limit_ns;
  size_t memory_cap;  /* bytes: V8's heap, and separately ArrayBuffer contents */
  v8::Isolate *isolate = nullptr;
  /* V8's foreground tasks for this isolate (shared with its task runners). */
  std::shared_ptr<iso::task_queue> tasks = std::make_shared<iso::task_queue>();
  /* The task being run: owned here so that, when V8 runs out of memory in
   * it and the OOM handler jumps past its frames, it is still destroyed,
   * which tells V8 it is over (Isolate::Dispose waits for it otherwise). */
  std::unique_ptr<v8::Task> running_task;
  iso::allocator *array_buffers = nullptr;
  int pkey = 0;  /* memory protection key of its pages; 0 without MPK */
  v8::Global<v8::Context> context;
  v8::Global<v8::Function> set_handler;  /* the runtime's entry points */
  v8::Global<v8::Function> dispatch;
  v8::Global<v8::Function> fire_timer;
  std::vector<iso::module_entry> modules;
  /* Lookups for a graph of many modules: by name, and by V8's identity hash
   * of the module (a referrer in the resolve callback); indices into modules. */
  std::unordered_map<std::string, size_t> module_by_name;
  std::unordered_multimap<int, size_t> module_by_hash;
  std::vector<iso::pending_request> pending;
  iso::pending_request *finishing = nullptr; /* during the done callback */
  std::unordered_map<uint32_t, iso::async_call> async_calls;
  /* Streamed responses waiting for iso_worker_stream_drained(), by token. */
  std::unordered_map<uint64_t, v8::Global<v8::Promise::Resolver>> drains;
  uint32_t last_call_id = 0;
  v8::Global<v8::Value> object_proto;  /* %Object.prototype%: what plain objects inherit */
  iso::name_memo direct_names[2];      /* the direct calls' binding and op */
  v8::Global<v8::Float64Array> direct_numbers;  /* native.directNumbers() */
  std::shared_ptr<v8::BackingStore> direct_numbers_store;  /* kept even if detached */
  double *direct_numbers_data = nullptr;  /* its bytes: asking the store is a call into V8 */
  /* The context's request token as running_token read it last, and what it
   * read: a facet's exec asks on every call, and reading a number is two
   * calls into V8 where comparing the same handle is none. */
  v8::Global<v8::Value> token_seen;
  uint64_t token_seen_value = 0;
  /* The token run() last stored as the context's continuation data, valid
   * until microtasks or V8's tasks run (which may store another): until
   * then running_token needs no call into V8. */
  uint64_t entry_token = 0;
  bool entry_token_valid = false;
  std::string link_error;  /* set by the resolve callback ... */
  std::string link_module; /* ... naming the importing module */
  iso::watch watch{};
  iso::scratch out;           /* response bytes */
  std::vector<iso_header> out_headers;
  uint64_t token = 0;         /* the token the current entry was made for */
  uint64_t charged = 0;       /* the token the outermost entry's CPU goes to */
  uint64_t charged_reported_ns = 0; /* of this entry's CPU, what went with its request's done */
  uint64_t outside_cpu_ns = 0;      /* see iso_worker_outside_stats() */
  uint64_t outside_cpu_limit_hits = 0;
  int depth = 0;              /* nested entries into JavaScript */
  int calls = 0;              /* public calls on the stack */
  bool broken = false;        /* the heap limit was hit */
  bool python = false;        /* a Python interpreter was booted here (python.cc) */
  bool retiring = false;      /* the ArrayBuffer cap failed a request: no new ones */
  iso::oom_guard *oom = nullptr; /* where V8 running out of memory returns to */
  bool heap_hit = false;      /* ... during the current entry */
  uint64_t growths_seen = 0;  /* pages_heap_growths() at its last heap_check */
  bool free_requested = false; /* iso_worker_free() came from a callback */
  /* V8 ran out of memory and was left by a jump (guarded()), past the
   * release of locks it holds: only this thread can dispose of it. */
  bool jumped_out = false;
  int wasm_memories = 0;      /* live wasm Memories (wasm.cc, under its lock) */
  /* A grow was refused: V8's retry with a copy must be refused too. */
  std::atomic<bool> wasm_refused{false};
};

namespace iso {

/* ---- dispatch.cc: requests in flight ---- */

inline pending_request *pending_find(iso_worker *w, uint64_t token) {
  for (pending_request &p : w->pending)
    if (p.token == token)
      return &p;
  return nullptr;
}
/* The worker a context belongs to; NULL in the snapshot's own contexts. */
iso_worker *worker_of(v8::Local<v8::Context> context);
/* The worker whose code runs in `isolate`, found without asking V8 for
 * the current context: a worker's isolate has one context, the worker's
 * (made where its isolate is), and the isolate's data names the worker. NULL until that
 * context is set up, and in isolates that are no worker's: ask
 * worker_of(context) then. */
inline iso_worker *worker_running(v8::Isolate *isolate) {
  auto *w = static_cast<iso_worker *>(isolate->GetData(kIsolateWorkerSlot));
  return w != nullptr && !w->context.IsEmpty() ? w : nullptr;
}
/* Microtasks and V8's tasks may run code of any request: running_token
 * asks V8 again afterwards. */
inline void entry_token_forget(iso_worker *w) {
  if (w != nullptr)
    w->entry_token_valid = false;
}
/* The request on whose behalf JavaScript runs right now; `context` (the
 * worker's) may be empty, and is then asked of V8 if it is needed. (The
 * entry's token inline: a facet's exec asks on every call.) */
uint64_t running_token_read(iso_worker *w, v8::Local<v8::Context> context);
inline uint64_t running_token(iso_worker *w, v8::Local<v8::Context> context) {
  return w->entry_token_valid ? w->entry_token : running_token_read(w, context);
}
/* The host's respond/done for `token`, once each, only while it is pending. */
void request_respond(iso_worker *w, uint64_t token, const iso_response *res,
                     const iso_error *err);
void request_done(iso_worker *w, uint64_t token);

/* Keeps the worker alive while a public call is on the stack, so that a host
 * callback may call iso_worker_free() safely. */
struct call_guard {
  iso_worker *w;
  explicit call_guard(iso_worker *worker) : w(worker) { w->calls++; }
  ~call_guard() {
    if (--w->calls == 0 && w->free_requested)
      worker_release(w);
  }
};

/* ---- allocator.cc ---- */

/* An ArrayBuffer whose contents count against the worker's cap; empty (with a
 * RangeError thrown) past it. *data points at its uninitialised contents.
 * Without a worker (the snapshot's contexts), a plain one. */
v8::MaybeLocal<v8::ArrayBuffer> new_buffer(iso_worker *w, size_t len, uint8_t **data);
/* The same as a Uint8Array over the whole buffer. */
v8::MaybeLocal<v8::Uint8Array> new_bytes(iso_worker *w, size_t len, uint8_t **data);

/* ---- run.cc: entering JavaScript ---- */

/* One entry into a worker's JavaScript: a host callback may call back into
 * the worker, and nested entries share the outer one's CPU budget,
 * accounting and checkpoint. */
struct entry {
  uint64_t saved_token;
  bool outer;
};
void entry_begin(iso_worker *w, entry *e, uint64_t token, uint64_t cpu_limit_ns);
/* Returns why JavaScript was cut short: ISO_OK, ISO_ERR_CPU or ISO_ERR_MEMORY. */
iso_error_kind entry_end(iso_worker *w, entry *e);
/* Calls a runtime function on behalf of `token`, then the microtasks (and
 * V8's tasks), under the CPU limit; failures end the requests concerned. */
void run_function(iso_worker *w, v8::Local<v8::Context> context, uint64_t token,
                  const v8::Global<v8::Function> &fn, int argc, v8::Local<v8::Value> argv[]);
/* The same for settling async host call `call_id` (hostcall_settle). */
void run_settle(iso_worker *w, v8::Local<v8::Context> context, uint64_t token, uint32_t call_id,
                int ok, const uint8_t *value, size_t value_len);
/* The same for a call of no hot path: `call(arg)` returns false when it threw. */
void run_call(iso_worker *w, v8::Local<v8::Context> context, uint64_t token,
              bool (*call)(void *arg), void *arg);
/* Fails every request still pending (the worker can finish none of them). */
void fail_all(iso_worker *w, iso_error_kind kind, const char *message);
/* Whether the worker's heap is within its limit; when it is not, the worker
 * has hit the limit (as V8's callback would have it) and its JavaScript is
 * being terminated. Measures only when some heap grew since the last time. */
bool heap_check(iso_worker *w);
/* The worker is past its memory limit: its entry ends with that error and
 * the worker is discarded. */
void memory_limit_hit(iso_worker *w);
/* V8's near-heap-limit and OOM callbacks for a worker's isolate. */
size_t near_heap_limit(void *data, size_t current_limit, size_t initial_limit);
void oom_handler(const char *location, bool is_heap_oom);
/* The innermost guard of this thread (see guarded()). __thread, not
 * thread_local: shared between files, a thread_local is reached through a
 * check for a dynamic initializer on every use. */
extern __thread oom_guard *oom_top;
/* After the jump: what the skipped frames would have undone. */
void oom_recover(iso_worker *w);

/* Runs fn(), which enters the worker's isolate. Returns false when V8 ran
 * out of memory in it: the worker is then broken and its requests failed. */
template <typename F>
bool guarded(iso_worker *w, F &&fn) {
  if (w->oom != nullptr) {  /* an outer call into this worker guards it */
    fn();
    return true;
  }
  /* Closing it after a jump frees the handle blocks the skipped scopes
   * would have (a builtin's loop can fill tens of megabytes of them). */
  v8::HandleScope handles(w->isolate);
  oom_guard g;
  g.w = w;
  g.outer = oom_top;
  if (sigsetjmp(g.jmp, 0) != 0) {
    oom_top = g.outer;
    w->oom = nullptr;
    w->jumped_out = true;
    oom_recover(w);
    return false;
  }
  oom_top = &g;
  w->oom = &g;
  fn();
  oom_top = g.outer;
  w->oom = nullptr;
  return true;
}

/* ---- errors.cc ---- */

void error_set(iso_error *err, iso_error_kind kind, const char *message);
/* Fills *err from a thrown value. `message` (V8's record of where it was
 * thrown) may be empty. Runs JavaScript (toString, a stack getter): call it
 * inside an armed entry. */
void error_from_exception(iso_worker *w, v8::Local<v8::Context> context, iso_error_kind kind,
                          v8::Local<v8::Value> exception, v8::Local<v8::Message> message,
                          iso_error *err);
/* Same from a TryCatch that caught something; termination gives ISO_ERR_INTERNAL. */
void error_from_try_catch(iso_worker *w, v8::Local<v8::Context> context, iso_error_kind kind,
                          v8::TryCatch &tc, iso_error *err);
char *dup_value(v8::Isolate *isolate, v8::Local<v8::Value> value);
v8::Local<v8::String> str(v8::Isolate *isolate, const char *s);
v8::Local<v8::String> str(v8::Isolate *isolate, const char *s, size_t len);

/* ---- modules.cc ---- */

/* Compiles, links and evaluates; returns the main module's default export. */
/* ---- typescript.cc: types stripped from .ts and .mts modules ---- */

/* Whether a module's name makes it TypeScript (".ts", ".mts"). */
bool ts_is_module_name(const char *name);
/* One module's source with its types blanked out (every line and column
 * kept), in amaro's isolate under its own limits: false with *err set
 * (kind ISO_ERR_SYNTAX with module, line and column for what amaro refused). */
bool ts_strip(const iso_module *m, std::string *out, iso_error *err);
/* A load's options with every TypeScript module stripped; `any` says
 * whether there was one (else use the original options). */
struct ts_stripped {
  std::vector<std::string> code;
  std::vector<iso_module> modules;
  iso_worker_options options = {};
  bool any = false;
};
bool ts_strip_options(const iso_worker_options *o, ts_stripped *out, iso_error *err);

v8::MaybeLocal<v8::Value> modules_load(iso_worker *w, v8::Local<v8::Context> context,
                                       const iso_module *modules, size_t n_modules,
                                       const char *main_module, iso_error *err);
v8::MaybeLocal<v8::Promise> module_import_dynamic(v8::Local<v8::Context> context,
                                                  v8::Local<v8::Data> options,
                                                  v8::Local<v8::Value> resource_name,
                                                  v8::Local<v8::String> specifier,
                                                  v8::Local<v8::FixedArray> assertions);
/* "./b.js" imported by "lib/a.js" is "lib/b.js"; "" when it climbs above the root. */
std::string module_resolve_name(const std::string &referrer, const std::string &specifier);

/* ---- wire.cc ---- */

/* Grows the buffer by `more` bytes and returns where they start. */
uint8_t *wire_append(iso_wire *w, size_t more);
/* Writes a tag and its u32 length or count: the five bytes at p. */
void wire_put_header(uint8_t *p, uint8_t tag, uint32_t n);

/* ---- hostcalls.cc ---- */

void hostcall_sync(const v8::FunctionCallbackInfo<v8::Value> &info);
void hostcall_sync_direct(const v8::FunctionCallbackInfo<v8::Value> &info);
void hostcall_sync_numbers(const v8::FunctionCallbackInfo<v8::Value> &info);
void hostcall_direct_numbers(const v8::FunctionCallbackInfo<v8::Value> &info);
void hostcall_async(const v8::FunctionCallbackInfo<v8::Value> &info);
/* Resolves async call `call_id` (if still waiting) with [ok, value]. Returns
 * false when JavaScript was terminated meanwhile. */
bool hostcall_settle(iso_worker *w, v8::Local<v8::Context> context, uint32_t call_id, bool ok,
                     const uint8_t *value, size_t value_len);

/* ---- native.cc and respond.cc: arguments of the natives ---- */

/* Tokens and timer ids are plain numbers (kMaxSafeToken). */
inline bool to_token(v8::Isolate *isolate, v8::Local<v8::Value> v, uint64_t *out) {
  if (v->IsNumber()) {
    double d = v.As<v8::Number>()->Value();
    if (d >= 0 && d < (double)kMaxSafeToken) {
      *out = (uint64_t)d;
      return true;
    }
  }
  isolate->ThrowException(v8::Exception::TypeError(str(isolate, "expected a request token")));
  return false;
}

/* The bytes of a view, without copying. */
inline bool view_bytes(v8::Local<v8::Value> v, uint8_t **data, size_t *len) {
  if (v->IsArrayBufferView()) {
    v8::Local<v8::ArrayBufferView> view = v.As<v8::ArrayBufferView>();
    *len = view->ByteLength();
    *data = *len ? (uint8_t *)view->Buffer()->Data() + view->ByteOffset() : nullptr;
    return true;
  }
  if (v->IsArrayBuffer()) {
    v8::Local<v8::ArrayBuffer> ab = v.As<v8::ArrayBuffer>();
    *len = ab->ByteLength();
    *data = *len ? (uint8_t *)ab->Data() : nullptr;
    return true;
  }
  return false;
}

/* ---- respond.cc: how a response leaves the worker ---- */

/* The core natives of a response: respond(token, status, headers, body)
 * whole, or streamed: respondStart, respondWrite, respondEnd, respondAbort
 * (the table in native.cc lists them for the snapshot). */
void respond_whole(const v8::FunctionCallbackInfo<v8::Value> &info);
void respond_start(const v8::FunctionCallbackInfo<v8::Value> &info);
void respond_write(const v8::FunctionCallbackInfo<v8::Value> &info);
void respond_end(const v8::FunctionCallbackInfo<v8::Value> &info);
void respond_abort(const v8::FunctionCallbackInfo<v8::Value> &info);

/* ---- native.cc ---- */

/* The `native` object the runtime is called with: the core functions, which
 * find their worker through their context (worker_of()) and do nothing
 * harmful where there is none (while the snapshot is made). */
v8::Local<v8::Object> native_new(v8::Local<v8::Context> context);
/* Their callbacks, null-terminated: the snapshot's external references. */
const intptr_t *native_references();

/* ---- crypto*.cc: the Web Crypto natives (crypto.cc says which file has what) ---- */

namespace crypto {

using Info = v8::FunctionCallbackInfo<v8::Value>;
using buf = std::vector<uint8_t>;

struct bytes {
  const uint8_t *p;
  size_t n;
};

/* A non-null pointer for zero-length inputs: some OpenSSL calls reject NULL. */
extern const uint8_t kEmpty[1];

/* A plain Error (OpenSSL's error queue is cleared first), or a TypeError. */
void throw_error(v8::Isolate *isolate, const char *msg);
void throw_type_error(v8::Isolate *isolate, const char *msg);
/* Argument i as bytes (an ArrayBuffer or a view), without copying. The
 * runtime passes copies it owns, so the bytes do not change during the call. */
bool arg_bytes(const Info &info, int i, bytes *out);
/* Same, where null or undefined stand for "absent" (out->p == nullptr). */
bool arg_bytes_opt(const Info &info, int i, bytes *out);
/* Argument i as a short ASCII string (an algorithm or format name). */
bool arg_name(const Info &info, int i, char *dst, size_t cap);
bool arg_uint(const Info &info, int i, uint32_t *out);
/* Argument i as a hash name ("SHA-256", ...); throws for others. */
bool arg_md(const Info &info, int i, const EVP_MD **md);
bool fits_int(const bytes &b);
/* A Uint8Array holding a copy of p[0..n). */
v8::MaybeLocal<v8::Uint8Array> to_js(v8::Isolate *isolate, const uint8_t *p, size_t n);
void return_bytes(const Info &info, const uint8_t *p, size_t n);
/* Returns [a, b, ...] of byte arrays; a null item stands for null. */
void return_list(const Info &info, const std::vector<const buf *> &items);
/* The whole of `der` as a private key (PKCS#8) or a public one (SPKI). */
EVP_PKEY *der_key(const bytes &der, bool is_private);
/* The DER of a key: PKCS#8 with is_private, else SPKI. */
bool der_of(EVP_PKEY *pkey, bool is_private, buf *out);

/* crypto_digest.cc */
void crypto_digest(const Info &info);
void crypto_hmac(const Info &info);
void crypto_pbkdf2(const Info &info);
void crypto_hkdf(const Info &info);
/* crypto_aes.cc */
void crypto_aes(const Info &info);
/* crypto_ec.cc */
void crypto_key_generate(const Info &info);
void crypto_key_import(const Info &info);
void crypto_key_export(const Info &info);
void crypto_sign(const Info &info);
void crypto_verify(const Info &info);
void crypto_derive(const Info &info);
/* crypto_rsa.cc */
void crypto_rsa_generate(const Info &info);
void crypto_rsa_import(const Info &info);
void crypto_rsa_export(const Info &info);
void crypto_rsa_sign(const Info &info);
void crypto_rsa_verify(const Info &info);
void crypto_rsa_oaep(const Info &info);

}  // namespace crypto

/* ---- pages.cc: heap pages kept from one isolate for the next ---- */

/* Passes every call to `inner`: the base of the page allocators here, which
 * override only what they change. */
class forwarding_pages : public v8::PageAllocator {
 public:
  explicit forwarding_pages(v8::PageAllocator *inner) : inner_(inner) {}

  size_t AllocatePageSize() override { return inner_->AllocatePageSize(); }
  size_t CommitPageSize() override { return inner_->CommitPageSize(); }
  void SetRandomMmapSeed(int64_t seed) override { inner_->SetRandomMmapSeed(seed); }
  void *GetRandomMmapAddr() override { return inner_->GetRandomMmapAddr(); }
  void *AllocatePages(void *hint, size_t length, size_t alignment,
                      Permission permissions) override {
    return inner_->AllocatePages(hint, length, alignment, permissions);
  }
  bool FreePages(void *address, size_t length) override {
    return inner_->FreePages(address, length);
  }
  bool ReleasePages(void *address, size_t length, size_t new_length) override {
    return inner_->ReleasePages(address, length, new_length);
  }
  bool SetPermissions(void *address, size_t length, Permission permissions) override {
    return inner_->SetPermissions(address, length, permissions);
  }
  bool DiscardSystemPages(void *address, size_t size) override {
    return inner_->DiscardSystemPages(address, size);
  }
  bool DecommitPages(void *address, size_t size) override {
    return inner_->DecommitPages(address, size);
  }
  bool ReserveForSharedMemoryMapping(void *address, size_t size) override {
    return inner_->ReserveForSharedMemoryMapping(address, size);
  }
  std::unique_ptr<SharedMemory> AllocateSharedPages(size_t length,
                                                    const void *original) override {
    return inner_->AllocateSharedPages(length, original);
  }
  bool CanAllocateSharedPages() override { return inner_->CanAllocateSharedPages(); }

 protected:
  v8::PageAllocator *inner_;
};

/* The mprotect() flags of a V8 page permission. */
int prot_of(v8::PageAllocator::Permission p);

/* The platform's page allocator over `inner` (made once per process);
 * `retagged`: the key allocator (MPK) is put over it. */
v8::PageAllocator *pages_reusing(v8::PageAllocator *inner, bool retagged);

/* The page allocator over `inner` that charges each worker's open wasm
 * Memory pages to its memory cap (wasm.cc); made once per process. */
v8::PageAllocator *wasm_counted_pages(v8::PageAllocator *inner);
/* Drops what is still noted of a worker's wasm Memories: after Dispose. */
void wasm_forget(const iso_worker *w);

/* How many times so far V8 asked for heap pages, in any isolate: a heap
 * grows only through them (heap_check). */
uint64_t pages_heap_growths();
/* Unmaps the kept pages no isolate took within `older_than_ms`. */
void pages_trim(uint64_t older_than_ms);
/* Lets the isolate's builtins' code pages be the process's one copy, until
 * written (pages.cc). Called where no JavaScript or collection runs in it. */
void pages_share_code(v8::Isolate *isolate);

/* While alive, this thread is disposing of an isolate: the pages V8 closes
 * are about to be freed, and are not discarded first. */
class pages_teardown_scope {
 public:
  pages_teardown_scope();
  ~pages_teardown_scope();
  pages_teardown_scope(const pages_teardown_scope &) = delete;
  pages_teardown_scope &operator=(const pages_teardown_scope &) = delete;

 private:
  bool saved_;
};

/* ---- mpk.cc: memory protection keys between isolates (docs/mpk.md) ---- */

/* Whether any of the below does anything ("on", or "dry" for tests). */
bool mpk_active();
/* iso_platform_init(), in this order: detects PKU and sets V8's flags,
 * makes the platform (keyed page allocator, open background tasks), then
 * takes the keys V8 left. */
void mpk_init_before_v8();
void mpk_init_after_v8();
/* The platform's page allocator over `inner`: every page tagged with the key
 * of the isolate it is for. `inner` itself when MPK is off. */
v8::PageAllocator *mpk_keyed_pages(v8::PageAllocator *inner);
/* V8's background work, let into every isolate's pages; as it is when off. */
std::unique_ptr<v8::Task> mpk_open_task(std::unique_ptr<v8::Task> task);
std::unique_ptr<v8::JobTask> mpk_open_job(std::unique_ptr<v8::JobTask> job);
/* After the snapshot is made: keeps V8's shared read-only heap on key 0. */
void mpk_pin_shared_heap();
/* A key for a new isolate: the one fewest live isolates hold; 0 without MPK. */
int mpk_key_take();
void mpk_key_release(int key);

/* While alive, the thread is in `w`: pages V8 allocates get w's key and
 * PKRU lets only key 0 and w's key through. Nests; restores on exit. */
class mpk_scope {
 public:
  explicit mpk_scope(iso_worker *w);
  ~mpk_scope();
  mpk_scope(const mpk_scope &) = delete;
  mpk_scope &operator=(const mpk_scope &) = delete;

 private:
  bool active_;
  uint32_t saved_pkru_ = 0;
  int saved_key_ = 0;
  iso_worker *saved_worker_ = nullptr;
};

/* While alive, every isolate's pages are accessible: V8's own background work. */
class mpk_open_scope {
 public:
  mpk_open_scope();
  ~mpk_open_scope();
  mpk_open_scope(const mpk_open_scope &) = delete;
  mpk_open_scope &operator=(const mpk_open_scope &) = delete;

 private:
  bool active_;
  uint32_t saved_pkru_ = 0;
};

/* A thread of ours that never enters an isolate (the watchdog) closes every key. */
void mpk_thread_close();

/* ArrayBuffer contents on pages of one key; NULL without MPK. */
arena *arena_new(int key);
void arena_free(arena *a);
void *arena_alloc(arena *a, size_t length, bool zero);
void arena_release(arena *a, void *data, size_t length);

}  // namespace iso

#endif
