/*
 * iso_worker: one isolate, one context, one tenant's modules, and the
 * bookkeeping of the requests running in it.
 *
 * Every entry into JavaScript goes through run(): it arms the CPU watchdog,
 * calls into the runtime, runs the microtask checkpoint, and afterwards turns
 * a termination (CPU or heap limit) into failures of the requests concerned.
 */
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "natives.h"

namespace iso {

/* ---- ArrayBuffer contents, capped per isolate ---- */

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

iso_worker *worker_of(v8::Local<v8::Context> context) {
  /* The snapshot's own contexts never had the slot: reading past the end
   * is not checked by V8. */
  if (context->GetNumberOfEmbedderDataFields() <= (uint32_t)kWorkerSlot)
    return nullptr;
  return static_cast<iso_worker *>(context->GetAlignedPointerFromEmbedderData(kWorkerSlot));
}

/* ---- requests in flight ---- */

namespace {

pending_request *pending_find(iso_worker *w, uint64_t token) {
  for (pending_request &p : w->pending)
    if (p.token == token)
      return &p;
  return nullptr;
}

void pending_remove(iso_worker *w, uint64_t token) {
  for (size_t i = 0; i < w->pending.size(); i++) {
    if (w->pending[i].token == token) {
      w->pending[i] = w->pending.back();
      w->pending.pop_back();
      return;
    }
  }
}

}  // namespace

void request_respond(iso_worker *w, uint64_t token, const iso_response *res,
                     const iso_error *err) {
  if (w->free_requested)
    return;
  pending_request *p = pending_find(w, token);
  if (p == nullptr || p->responded)
    return;
  p->responded = true;
  iso_error hit;
  if (err != nullptr && err->kind == ISO_ERR_EXCEPTION &&
      w->array_buffers->refusals() != p->refusals) {
    /* The ArrayBuffer cap refused memory while this request ran, and it
     * failed: that is the memory limit, whatever exception it ended with.
     * As after a heap-limit hit the isolate is discarded (its buffers may be
     * held by module state, and disposing returns them at once), but the
     * other requests in it were not cut short: they may finish. */
    hit = *err;
    hit.kind = ISO_ERR_MEMORY;
    hit.message = const_cast<char *>("exceeded memory limit");
    err = &hit;
    w->retiring = true;
  }
  w->host.respond(w->host.data, token, res, err);
}

void request_done(iso_worker *w, uint64_t token) {
  if (w->free_requested)
    return;
  pending_request *p = pending_find(w, token);
  if (p == nullptr)
    return;
  if (!p->responded) {
    iso_error err = {};
    if (w->heap_hit)
      error_set(&err, ISO_ERR_MEMORY, "exceeded memory limit");
    else
      error_set(&err, ISO_ERR_INTERNAL, "the request ended without a response");
    request_respond(w, token, nullptr, &err);
    iso_error_clear(&err);
    if (w->free_requested)
      return;
  }
  /* Forgotten before the host hears of it, so that done may reuse the token
   * at once; its CPU time stays readable during the callback. */
  pending_request finished = *pending_find(w, token);
  if (w->depth > 0 && w->charged == token) {
    /* The entry that finishes it is still on: what it used so far is the
     * request's, the rest of it is not (entry_end). */
    w->charged_reported_ns = watchdog_used(&w->watch);
    finished.cpu_ns += w->charged_reported_ns;
  }
  pending_request *outer = w->finishing;
  pending_remove(w, token);
  w->finishing = &finished;
  w->host.done(w->host.data, token);
  w->finishing = outer;
}

/* The request whose code ran last: promise reactions carry the token that
 * was current when they were registered (V8's continuation-preserved
 * embedder data), so a continuation of request A run while the host entered
 * for request B is still A's.
 * (Hot: on every facet exec; see hostcalls.cc.) */
__attribute__((hot))
uint64_t running_token(iso_worker *w, v8::Local<v8::Context> context) {
  if (w->entry_token_valid)
    return w->entry_token;
  if (context.IsEmpty())
    context = w->isolate->GetCurrentContext();
  v8::Local<v8::Value> v = context->GetContinuationPreservedEmbedderData();
  if (!w->token_seen.IsEmpty() && w->token_seen == v)
    return w->token_seen_value;
  if (v->IsNumber()) {
    double d = v.As<v8::Number>()->Value();
    if (d >= 0 && d < (double)kMaxSafeToken) {
      w->token_seen.Reset(w->isolate, v);
      w->token_seen_value = (uint64_t)d;
      return (uint64_t)d;
    }
  }
  return w->token;
}

namespace {

/* Ends a request the runtime can no longer finish. */
void request_fail(iso_worker *w, uint64_t token, iso_error_kind kind, const char *message) {
  iso_error err = {};
  error_set(&err, kind, message);
  request_respond(w, token, nullptr, &err);
  iso_error_clear(&err);
  request_done(w, token);
}

void fail_all(iso_worker *w, iso_error_kind kind, const char *message) {
  while (!w->pending.empty() && !w->free_requested)
    request_fail(w, w->pending.back().token, kind, message);
}

/* ---- entering JavaScript ---- */

struct entry {
  uint64_t saved_token;
  bool outer;
};

/* Tasks a cleanup callback posts run at a later entry, not in a loop here. */
constexpr int kForegroundTasksPerEntry = 8;

/* The CPU limit is per request, over every entry made for it: what is left
 * of `token`'s. A token that is no running request (the load, code that
 * outlived its request) gets a whole limit for each entry. */
uint64_t cpu_budget(iso_worker *w, uint64_t token) {
  pending_request *p = pending_find(w, token);
  if (p == nullptr)
    return w->cpu_limit_ns;
  return p->cpu_ns < w->cpu_limit_ns ? w->cpu_limit_ns - p->cpu_ns : 0;
}

/* A host callback may call back into this worker: nested entries share the
 * outer one's CPU budget, accounting and checkpoint. */
void entry_begin(iso_worker *w, entry *e, uint64_t token, uint64_t cpu_limit_ns) {
  e->saved_token = w->token;
  e->outer = w->depth++ == 0;
  w->token = token;
  if (e->outer) {
    w->heap_hit = false;
    w->charged = token;
    w->charged_reported_ns = 0;
    watchdog_arm(&w->watch, cpu_limit_ns);
  }
}

/* Charges the outermost entry's CPU to its request, or, when it was made
 * for no running request (the load, code that outlived its request), to
 * the worker: what ran after its request was done is the part not reported
 * with it. */
void charge_entry(iso_worker *w, uint64_t used) {
  pending_request *p = pending_find(w, w->charged);
  if (p != nullptr)
    p->cpu_ns += used;
  else
    w->outside_cpu_ns += used > w->charged_reported_ns ? used - w->charged_reported_ns : 0;
}

/* Returns why JavaScript was cut short: ISO_OK, ISO_ERR_CPU or ISO_ERR_MEMORY. */
iso_error_kind entry_end(iso_worker *w, entry *e) {
  iso_error_kind why = ISO_OK;
  if (e->outer) {
    /* Its verdict is read below, as heap_hit, with V8's own. */
    (void)heap_check(w);
    bool fired;
    charge_entry(w, watchdog_disarm(&w->watch, &fired));
    /* A termination that arrived after JavaScript returned would hit the
     * next entry instead: always clear it. */
    w->isolate->CancelTerminateExecution();
    if (w->heap_hit)
      why = ISO_ERR_MEMORY;
    else if (fired)
      why = ISO_ERR_CPU;
  }
  w->depth--;
  w->token = e->saved_token;
  return why;
}

/* Whether the current entry was cut short: JavaScript must not run again
 * in it, even where V8 has already forgotten the termination. */
bool entry_stopped(iso_worker *w) {
  return w->heap_hit || w->isolate->IsExecutionTerminating() || watchdog_fired(&w->watch);
}

/* V8's own work for the isolate that it queued while JavaScript ran (the
 * callbacks of a FinalizationRegistry whose targets were collected), run in
 * the same entry: its CPU time counts as the entry's. False when a
 * microtask checkpoint was cut short, which loses what was queued. */
bool run_foreground_tasks(iso_worker *w) {
  for (int i = 0; i < kForegroundTasksPerEntry; i++) {
    if (w->tasks->queued.load(std::memory_order_relaxed) == 0 || entry_stopped(w))
      return true;
    w->running_task = w->tasks->take_due();
    if (w->running_task == nullptr)
      return true;
    entry_token_forget(w);
    w->running_task->Run();
    w->running_task.reset();
    if (entry_stopped(w))
      return true;
    w->isolate->PerformMicrotaskCheckpoint();
    if (entry_stopped(w))
      return false;
  }
  return true;
}

/* Enters JavaScript on behalf of `token`: `call` (which returns false when
 * it threw), then the microtasks, then V8's tasks. */
template <typename F>
void run(iso_worker *w, v8::Local<v8::Context> context, uint64_t token, F &&call) {
  v8::Isolate *isolate = w->isolate;
  uint64_t budget = cpu_budget(w, token);
  if (budget == 0 && w->depth == 0) {
    request_fail(w, token, ISO_ERR_CPU, "exceeded CPU limit");
    return;
  }
  entry e;
  entry_begin(w, &e, token, budget);
  context->SetContinuationPreservedEmbedderData(v8::Number::New(isolate, (double)token));
  w->entry_token = token;
  w->entry_token_valid = token < kMaxSafeToken;
  uint64_t blamed;
  bool queue_lost = false;
  {
    v8::TryCatch tc(isolate);
    if (!call() && tc.HasCaught() && !tc.HasTerminated()) {
      /* The runtime reports the tenant's errors itself: this is its own. */
      iso_error err = {};
      error_from_try_catch(w, context, ISO_ERR_EXCEPTION, tc, &err);
      request_respond(w, token, nullptr, &err);
      iso_error_clear(&err);
      request_done(w, token);
    }
    /* After a termination in the call the queued microtasks stay for the
     * next entry; a termination inside the checkpoint discards them all. */
    if (e.outer && !tc.HasTerminated()) {
      entry_token_forget(w);
      isolate->PerformMicrotaskCheckpoint();
      queue_lost = tc.HasTerminated();
      if (!queue_lost)
        queue_lost = !run_foreground_tasks(w);
    }
    blamed = running_token(w, context);
  }
  entry_token_forget(w);
  if (e.outer)
    context->SetContinuationPreservedEmbedderData(v8::Undefined(isolate));
  switch (entry_end(w, &e)) {
  case ISO_ERR_CPU: {
    /* Code that outlived its request, or its response (ctx.waitUntil): no
     * response carries the hit, so the worker counts it. */
    pending_request *p = blamed != 0 ? pending_find(w, blamed) : nullptr;
    if (blamed != 0 && (p == nullptr || p->responded))
      w->outside_cpu_limit_hits++;
    request_fail(w, blamed, ISO_ERR_CPU, "exceeded CPU limit");
    /* V8 drops every queued continuation when it stops the microtasks, and
     * which requests had one there is not known: none could finish. */
    if (queue_lost)
      fail_all(w, ISO_ERR_CANCELLED, "another request on this worker exceeded the CPU limit");
    break;
  }
  case ISO_ERR_MEMORY:
    fail_all(w, ISO_ERR_MEMORY, "exceeded memory limit");
    break;
  default:
    break;
  }
}

/* Calls a runtime function on behalf of `token`, then the microtasks. */
void run_function(iso_worker *w, v8::Local<v8::Context> context, uint64_t token,
                  const v8::Global<v8::Function> &fn, int argc, v8::Local<v8::Value> argv[]) {
  v8::Isolate *isolate = w->isolate;
  run(w, context, token, [&]() {
    return !fn.Get(isolate)->Call(context, v8::Undefined(isolate), argc, argv).IsEmpty();
  });
}

/* ---- isolate set-up ---- */

}  // namespace

/* V8 enforces the heap limit only when it collects garbage, and one builtin
 * (Array.from of a huge array-like, from warm code) can grow the heap far
 * past it with no collection in between, even to the end of the request.
 * So, when some heap grew since the last look, the heap is measured before
 * a response leaves and after every entry: over the limit, the worker has
 * hit it. */
bool heap_check(iso_worker *w) {
  if (w->heap_hit)
    return false;
  uint64_t growths = pages_heap_growths();
  if (growths == w->growths_seen)
    return true;
  w->growths_seen = growths;
  v8::HeapStatistics hs;
  w->isolate->GetHeapStatistics(&hs);
  if (hs.used_heap_size() <= hs.heap_size_limit())
    return true;
  w->broken = true;
  w->heap_hit = true;
  w->isolate->TerminateExecution();
  return false;
}

namespace {

size_t near_heap_limit(void *data, size_t current_limit, size_t) {
  iso_worker *w = static_cast<iso_worker *>(data);
  /* Called again in the same entry: a builtin is growing the heap in C++,
   * where the termination is never looked at. Refusing makes V8 give up,
   * which the worker's guard turns into this worker's failure. */
  if (w->heap_hit && w->oom != nullptr)
    return current_limit;
  w->broken = true;
  w->heap_hit = true;
  w->isolate->TerminateExecution();
  /* Returning the same limit here makes V8 give up at once: give it room to
   * unwind; the worker is discarded afterwards. */
  return current_limit + (32u << 20);
}

/* ---- V8 out of memory: the worker's loss, not the process's ----
 *
 * V8 gives up when one allocation does not fit under the heap limit even
 * after the callback above (Array.prototype.fill growing a dictionary, a
 * builtin that never looks at the termination): it calls the OOM handler,
 * and aborts the process if that returns. The handler instead jumps back to
 * the outermost call into the worker that was running, past V8's frames and
 * the shim's scopes in between. That isolate never runs JavaScript again:
 * its requests fail with the memory limit and it is disposed (its heap is
 * whole: the allocation that failed is all that did not happen). */
}  // namespace

struct oom_guard {
  sigjmp_buf jmp;
  iso_worker *w;
  oom_guard *outer;  /* another worker's, entered from a host callback */
};

namespace {

thread_local oom_guard *oom_top;

void oom_handler(const char *location, bool) {
  /* Only the innermost guard: jumping to an outer one would also skip
   * another worker's frames, which nothing would then undo. */
  if (oom_top != nullptr && oom_top->w->isolate == v8::Isolate::GetCurrent()) {
    log_warn("V8 ran out of memory in a worker (%s): it is discarded", location);
    siglongjmp(oom_top->jmp, 1);
  }
  log_error("V8 ran out of memory outside a worker's call (%s): the process ends", location);
}

/* After the jump: what the skipped frames would have undone. */
void oom_recover(iso_worker *w) {
  w->running_task.reset();
  bool fired;
  charge_entry(w, watchdog_disarm(&w->watch, &fired));
  while (v8::Isolate::GetCurrent() == w->isolate)
    w->isolate->Exit();
  w->depth = 0;
  w->token = 0;
  w->broken = true;
  w->heap_hit = true;
  fail_all(w, ISO_ERR_MEMORY, "exceeded memory limit");
}

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

bool no_wasm(v8::Local<v8::Context>, v8::Local<v8::String>) {
  return false;
}

/* A new context from the snapshot, the runtime already in it, made this
 * worker's: what a snapshot cannot hold is set up here. */
/* Atomics.waitAsync's timeout is a task V8 posts to the platform, which
 * never runs it between a worker's entries, so a wait with a timeout hung
 * to the wall-time limit; and nothing but the worker itself could notify
 * it. Atomics, like WebAssembly, is installed in each new context. */
bool remove_atomics_wait_async(v8::Local<v8::Context> context) {
  v8::Isolate *isolate = context->GetIsolate();
  v8::Local<v8::Value> atomics;
  if (!context->Global()->Get(context, str(isolate, "Atomics")).ToLocal(&atomics))
    return false;
  return !atomics->IsObject() ||
         atomics.As<v8::Object>()->Delete(context, str(isolate, "waitAsync")).IsJust();
}

bool context_start(iso_worker *w, v8::Local<v8::Context> context, iso_error *err) {
  v8::Isolate *isolate = w->isolate;
  context->SetAlignedPointerInEmbedderData(kWorkerSlot, w);
  /* eval() and new Function() throw EvalError, as on Workers. */
  context->AllowCodeGenerationFromStrings(false);
  v8::Context::Scope context_scope(context);
  v8::TryCatch tc(isolate);
  /* V8 installs WebAssembly in every new context, snapshot or not. With wasm
   * compilation off, all it still offers is Memory, whose pages count
   * against neither the heap limit nor the ArrayBuffer cap. */
  if (context->Global()->Delete(context, str(isolate, "WebAssembly")).IsNothing() ||
      !remove_atomics_wait_async(context)) {
    error_set(err, ISO_ERR_INTERNAL, "could not set up the context");
    return false;
  }
  v8::Local<v8::Function> fns[3];
  v8::Local<v8::Object> native;
  if (!context->GetDataFromSnapshotOnce<v8::Function>(snapshot_index(kSlotSetHandler))
           .ToLocal(&fns[0]) ||
      !context->GetDataFromSnapshotOnce<v8::Function>(snapshot_index(kSlotDispatch))
           .ToLocal(&fns[1]) ||
      !context->GetDataFromSnapshotOnce<v8::Function>(snapshot_index(kSlotFireTimer))
           .ToLocal(&fns[2]) ||
      !context->GetDataFromSnapshotOnce<v8::Object>(snapshot_index(kSlotNative))
           .ToLocal(&native)) {
    error_set(err, ISO_ERR_INTERNAL, "the snapshot has no runtime");
    return false;
  }
  /* Natives outside the core table are not in the snapshot's references. */
  if (!natives_add(context, native)) {
    error_from_try_catch(w, context, ISO_ERR_INTERNAL, tc, err);
    return false;
  }
  w->set_handler.Reset(isolate, fns[0]);
  w->dispatch.Reset(isolate, fns[1]);
  w->fire_timer.Reset(isolate, fns[2]);
  w->object_proto.Reset(isolate, v8::Object::New(isolate)->GetPrototype());
  w->context.Reset(isolate, context);
  return true;
}

/* A JSON object text (or NULL: undefined) as a value. */
bool parse_object(iso_worker *w, v8::Local<v8::Context> context, const char *json,
                  const char *what, v8::Local<v8::Value> *out, iso_error *err) {
  v8::Isolate *isolate = w->isolate;
  *out = v8::Undefined(isolate);
  if (json == nullptr)
    return true;
  v8::TryCatch tc(isolate);
  if (!v8::JSON::Parse(context, str(isolate, json)).ToLocal(out)) {
    error_from_try_catch(w, context, ISO_ERR_INTERNAL, tc, err);
    return false;
  }
  if (!(*out)->IsObject() || (*out)->IsArray()) {
    char *msg = xasprintf("%s is not a JSON object", what);
    error_set(err, ISO_ERR_INTERNAL, msg);
    free(msg);
    return false;
  }
  return true;
}

/* Whether `def` has a fetch function: a failed setHandler() is then about
 * the bindings, not the handler. */
bool has_fetch(v8::Local<v8::Context> context, v8::Local<v8::Value> def) {
  v8::TryCatch tc(context->GetIsolate());
  v8::Local<v8::Value> fetch;
  return def->IsObject() &&
         def.As<v8::Object>()->Get(context, str(context->GetIsolate(), "fetch")).ToLocal(&fetch) &&
         fetch->IsFunction();
}

/* Loads the tenant's modules and hands the default export to the runtime. */
bool handler_install(iso_worker *w, v8::Local<v8::Context> context,
                     const iso_worker_options *o, iso_error *err) {
  v8::Isolate *isolate = w->isolate;
  v8::Local<v8::Value> def, env, bindings;
  if (!parse_object(w, context, o->env_json, "env", &env, err) ||
      !parse_object(w, context, o->bindings_json, "bindings", &bindings, err))
    return false;
  if (env->IsUndefined())
    env = v8::Object::New(isolate);
  if (!modules_load(w, context, o->modules, o->n_modules, o->main_module, err).ToLocal(&def))
    return false;
  v8::TryCatch tc(isolate);
  v8::Local<v8::Value> argv[3] = {def, env, bindings};
  if (w->set_handler.Get(isolate)->Call(context, v8::Undefined(isolate), 3, argv).IsEmpty()) {
    bool handler = !tc.HasTerminated() && has_fetch(context, def);
    error_from_try_catch(w, context, handler ? ISO_ERR_EXCEPTION : ISO_ERR_NO_HANDLER, tc, err);
    if (err->module == nullptr)
      err->module = xstrdup(o->main_module);
    return false;
  }
  return true;
}

}  // namespace

/* One of V8's heap pages. */
constexpr size_t kSemiSpaceStartBytes = 256u << 10;
/* What a semispace may grow to, at most (a 16th of the heap below 128 MiB). */
constexpr size_t kSemiSpaceMaxBytes = 8u << 20;

/* V8 sizes the young generation of a heap under 256 MiB for a phone: at
 * 128 MiB its semispaces stop at 1 MiB, and a loop that makes a string and
 * a cursor per row (a few dozen bytes) is scavenged every thousand or so
 * turns. With 8 MiB semispaces such a loop ran about 14% faster; with 2
 * or 4, no faster (docs/benchmarks.md, "The young generation"). V8 doubles a
 * semispace whenever what survived its scavenges since the last growth adds
 * up to its size, so a busy worker reaches the maximum; a compacted idle
 * one is shrunk back to one page (iso_worker_compact). The heap's limit
 * stays heap_cap: what the young generation gains, the old one gives up,
 * and with it the live data a worker can hold before its near-limit stop
 * (at 128 MiB, 104 MiB instead of 125). V8 10.2 rounds a semispace's
 * maximum up to a power of two (Heap::ConfigureHeap): anything else would
 * end past heap_cap, so the power of two at or below is asked for. */
static void size_young_generation(v8::ResourceConstraints *c, size_t heap_cap) {
  size_t young_now = c->max_young_generation_size_in_bytes();
  size_t total = young_now + c->max_old_generation_size_in_bytes();
  /* two semispaces, and as much again for young large objects */
  size_t want = std::max(young_now / 3, std::min(kSemiSpaceMaxBytes, heap_cap / 16));
  size_t semi = kSemiSpaceStartBytes;
  while (semi * 2 <= want)
    semi *= 2;
  size_t young = 3 * semi;
  if (young == young_now || young >= total / 2)
    return;
  c->set_max_young_generation_size_in_bytes(young);
  c->set_max_old_generation_size_in_bytes(total - young);
}

iso_worker *worker_blank(uint32_t memory_mb, iso_error *err) {
  iso_worker *w = new iso_worker();
  w->memory_cap = (size_t)memory_mb << 20;
  w->pkey = mpk_key_take();
  w->array_buffers = new allocator(w->memory_cap, arena_new(w->pkey));
  /* From here every page of the isolate gets its key. */
  mpk_scope inside(w);

  v8::Isolate::CreateParams params;
  params.array_buffer_allocator = w->array_buffers;
  params.constraints.ConfigureDefaultsFromHeapSize(0, w->memory_cap);
  size_young_generation(&params.constraints, w->memory_cap);
  /* V8 would start each semispace at four heap pages, and writes the header
   * and marking bitmap of each page it commits: 24 KiB resident in every idle
   * worker for three pages it does not use. A worker that has served
   * traffic keeps both semispaces' pages touched when it goes idle (up to
   * 16 MiB, see size_young_generation) until it is compacted. One page each
   * to start with: V8 grows them as what survives its scavenges adds up
   * (docs/benchmarks.md, "Memory per idle worker").
   * The young generation is the two semispaces and as much again for young
   * large objects. */
  params.constraints.set_initial_young_generation_size_in_bytes(3 * kSemiSpaceStartBytes);
  params.snapshot_blob = snapshot_blob();
  params.external_references = snapshot_references();
  /* Allocated first, so that the platform finds the worker when V8 asks for
   * the isolate's task runner while it sets the isolate up. */
  w->isolate = v8::Isolate::Allocate();
  w->isolate->SetData(kIsolateWorkerSlot, w);
  v8::Isolate::Initialize(w->isolate, params);
  w->watch.isolate = w->isolate;
  w->isolate->SetMicrotasksPolicy(v8::MicrotasksPolicy::kExplicit);
  w->isolate->AddNearHeapLimitCallback(near_heap_limit, w);
  w->isolate->SetOOMErrorHandler(oom_handler);
  w->isolate->SetAllowWasmCodeGenerationCallback(no_wasm);
  w->isolate->SetHostImportModuleDynamicallyCallback(module_import_dynamic);
  /* A blocked futex uses no CPU: the watchdog would never stop it. */
  w->isolate->SetAllowAtomicsWait(false);
  /* Errors remember where they were created: the tenant's line, not the runtime's. */
  w->isolate->SetCaptureStackTraceForUncaughtExceptions(true, 16, v8::StackTrace::kOverview);

  bool ok;
  {
    v8::Isolate::Scope isolate_scope(w->isolate);
    v8::HandleScope handles(w->isolate);
    /* The isolate's only context: host calls rely on that (worker_running). */
    v8::Local<v8::Context> context = v8::Context::New(w->isolate);
    ok = !context.IsEmpty() && context_start(w, context, err);
  }
  if (!ok) {
    if (err->kind == ISO_OK)
      error_set(err, ISO_ERR_INTERNAL, "could not create a context");
    worker_destroy(w);  /* outside the isolate's scopes */
    return nullptr;
  }
  pages_share_code(w->isolate);
  return w;
}

namespace {

/* Makes a blank worker the tenant's: its host, its limits, its modules. */
bool worker_load(iso_worker *w, const iso_worker_options *o, iso_error *err) {
  w->host = *o->host;
  if (o->calls != nullptr)
    w->host_calls = *o->calls;
  w->cpu_limit_ns = (uint64_t)(o->limits.cpu_ms ? o->limits.cpu_ms : 50) * 1000000u;
  v8::Isolate *isolate = w->isolate;
  v8::Isolate::Scope isolate_scope(isolate);
  v8::HandleScope handles(isolate);
  v8::Local<v8::Context> context = w->context.Get(isolate);
  v8::Context::Scope context_scope(context);
  entry e;
  entry_begin(w, &e, 0, w->cpu_limit_ns);
  bool ok = handler_install(w, context, o, err);
  iso_error_kind why = entry_end(w, &e);
  if (why == ISO_ERR_CPU)
    error_set(err, ISO_ERR_CPU, "exceeded CPU limit");
  else if (why == ISO_ERR_MEMORY)
    error_set(err, ISO_ERR_MEMORY, "exceeded memory limit");
  return ok && why == ISO_OK;
}

}  // namespace

void worker_destroy(iso_worker *w) {
  int pkey = w->pkey;
  /* The host has let go of its data: a fault report made while V8 tears the
   * isolate down (mpk) must not follow it. */
  w->host.data = nullptr;
  mpk_scope inside(w);
  if (w->isolate != nullptr) {
    w->modules.clear();
    w->async_calls.clear();
    w->object_proto.Reset();
    for (iso::name_memo &memo : w->direct_names)
      memo.js.Reset();
    w->direct_numbers.Reset();
    w->direct_numbers_store.reset();
    w->direct_numbers_data = nullptr;
    w->token_seen.Reset();
    w->set_handler.Reset();
    w->dispatch.Reset();
    w->fire_timer.Reset();
    w->context.Reset();
    pages_teardown_scope tearing_down;
    w->isolate->Dispose();
  }
  w->tasks->clear();
  delete w->array_buffers;  /* after Dispose: the isolate frees its buffers through it */
  free(w->out.data);
  delete w;
  mpk_key_release(pkey);
}

size_t worker_held_bytes(iso_worker *w) {
  if (w->isolate == nullptr)
    return 0;
  mpk_scope inside(w);  /* the statistics are read from its pages */
  v8::HeapStatistics hs;
  w->isolate->GetHeapStatistics(&hs);
  return hs.total_physical_size() + w->array_buffers->used();
}

namespace {

/* Disposing of an isolate takes half a millisecond or more of the calling
 * thread, most of it V8 tearing its heap down: the pool's thread does it
 * when it can, off the loop that serves requests. */
void worker_release(iso_worker *w) {
  if (w->jumped_out || !pool_retire(w))
    worker_destroy(w);
}

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

/* The runtime's dispatch() arguments. Empty when they cannot be built (the
 * body is over the worker's ArrayBuffer cap). */
bool request_args(iso_worker *w, uint64_t token, const iso_request *req,
                  v8::Local<v8::Value> argv[5]) {
  v8::Isolate *isolate = w->isolate;
  v8::TryCatch tc(isolate);
  if (req->n_headers > (size_t)INT32_MAX / 2)
    return false;
  v8::Local<v8::Value> few[64];
  std::vector<v8::Local<v8::Value>> many;
  v8::Local<v8::Value> *flat = few;
  if (req->n_headers * 2 > ARRAY_SIZE(few)) {
    many.resize(req->n_headers * 2);
    flat = many.data();
  }
  for (size_t i = 0; i < req->n_headers; i++) {
    const iso_header *h = &req->headers[i];
    v8::Local<v8::String> name, value;
    /* HTTP header bytes are Latin-1 to JavaScript (ByteString). */
    if (!v8::String::NewFromOneByte(isolate, (const uint8_t *)h->name, v8::NewStringType::kNormal,
                                    (int)h->name_len).ToLocal(&name) ||
        !v8::String::NewFromOneByte(isolate, (const uint8_t *)h->value,
                                    v8::NewStringType::kNormal, (int)h->value_len).ToLocal(&value))
      return false;
    flat[2 * i] = name;
    flat[2 * i + 1] = value;
  }
  v8::Local<v8::String> method, url;
  if (!v8::String::NewFromUtf8(isolate, req->method, v8::NewStringType::kNormal,
                               (int)req->method_len).ToLocal(&method) ||
      !v8::String::NewFromUtf8(isolate, req->url, v8::NewStringType::kNormal, (int)req->url_len)
           .ToLocal(&url))
    return false;
  argv[0] = v8::Number::New(isolate, (double)token);
  argv[1] = method;
  argv[2] = url;
  argv[3] = v8::Array::New(isolate, flat, req->n_headers * 2);
  bool streamed = req->body == ISO_BODY_STREAMED;
  argv[4] = streamed ? v8::True(isolate).As<v8::Value>() : v8::Null(isolate).As<v8::Value>();
  if (!streamed && req->body_len > 0) {
    uint8_t *data;
    v8::Local<v8::Uint8Array> body;
    if (!new_bytes(w, req->body_len, &data).ToLocal(&body))
      return false;
    memcpy(data, req->body, req->body_len);
    argv[4] = body;
  }
  return true;
}

int worker_dispatch(iso_worker *w, uint64_t token, const iso_request *req, bool *started) {
  v8::Isolate *isolate = w->isolate;
  v8::Isolate::Scope isolate_scope(isolate);
  v8::HandleScope handles(isolate);
  v8::Local<v8::Context> context = w->context.Get(isolate);
  v8::Context::Scope context_scope(context);
  v8::Local<v8::Value> argv[5];
  if (!request_args(w, token, req, argv) || w->broken) {
    /* The heap limit may have been hit right here, outside any entry. */
    isolate->CancelTerminateExecution();
    if (w->broken)
      fail_all(w, ISO_ERR_MEMORY, "exceeded memory limit");
    return -1;
  }
  w->pending.push_back(pending_request{token, false, 0, w->array_buffers->refusals()});
  *started = true;
  run_function(w, context, token, w->dispatch, 5, argv);
  return 0;
}

void worker_fire_timer(iso_worker *w, uint64_t token, uint32_t timer_id) {
  v8::Isolate *isolate = w->isolate;
  v8::Isolate::Scope isolate_scope(isolate);
  v8::HandleScope handles(isolate);
  v8::Local<v8::Context> context = w->context.Get(isolate);
  v8::Context::Scope context_scope(context);
  v8::Local<v8::Value> argv[1] = {v8::Integer::NewFromUnsigned(isolate, timer_id)};
  run_function(w, context, token, w->fire_timer, 1, argv);
}

void worker_complete(iso_worker *w, uint64_t token, uint32_t call_id, int ok,
                     const uint8_t *value, size_t value_len) {
  v8::Isolate *isolate = w->isolate;
  v8::Isolate::Scope isolate_scope(isolate);
  v8::HandleScope handles(isolate);
  v8::Local<v8::Context> context = w->context.Get(isolate);
  v8::Context::Scope context_scope(context);
  run(w, context, token,
      [&]() { return hostcall_settle(w, context, call_id, ok != 0, value, value_len); });
}

void host_log(void *, uint64_t, iso_log_level, const char *, size_t) {}
int host_timer_start(void *, uint64_t, uint32_t, double) { return 0; }
void host_timer_cancel(void *, uint32_t) {}
void host_respond(void *, uint64_t, const iso_response *, const iso_error *) {}
void host_done(void *, uint64_t) {}

}  // namespace
}  // namespace iso

using namespace iso;

iso_worker *iso_worker_create(const iso_worker_options *o, iso_error *err) {
  iso_error local = {};
  if (err == nullptr)
    err = &local;
  memset(err, 0, sizeof(*err));
  if (!platform_ready()) {
    error_set(err, ISO_ERR_INTERNAL, "iso_platform_init() was not called");
    return nullptr;
  }
  if (o == nullptr || o->host == nullptr || o->host->respond == nullptr ||
      o->host->done == nullptr) {
    error_set(err, ISO_ERR_INTERNAL, "the host has no respond or done callback");
    return nullptr;
  }
  uint32_t memory_mb = o->limits.memory_mb ? o->limits.memory_mb : kDefaultMemoryMb;
  iso_worker *w = pool_take(memory_mb);
  if (w == nullptr && (w = worker_blank(memory_mb, err)) == nullptr) {
    iso_error_clear(&local);
    return nullptr;
  }
  mpk_scope inside(w);
  bool loaded = false;
  if (!guarded(w, [&]() { loaded = worker_load(w, o, err); }))
    error_set(err, ISO_ERR_MEMORY, "exceeded memory limit");
  if (!loaded) {
    /* Top-level code that ran into a limit still used the CPU: the host
     * charges it to its tenant like any other. */
    err->cpu_ns = w->outside_cpu_ns;
    worker_release(w);
    iso_error_clear(&local);
    return nullptr;
  }
  return w;
}

iso_worker *iso_worker_new(const iso_host *host, const iso_limits *limits,
                           const iso_module *modules, size_t n_modules, const char *main_module,
                           const char *env_json, iso_error *err) {
  iso_worker_options o = {};
  o.host = host;
  if (limits != nullptr)
    o.limits = *limits;
  o.modules = modules;
  o.n_modules = n_modules;
  o.main_module = main_module;
  o.env_json = env_json;
  return iso_worker_create(&o, err);
}

void iso_worker_free(iso_worker *w) {
  if (w == nullptr)
    return;
  if (w->calls > 0) {
    w->free_requested = true;
    return;
  }
  worker_release(w);
}

int iso_worker_dispatch(iso_worker *w, uint64_t token, const iso_request *req) {
  if (w == nullptr || req == nullptr || w->broken || w->retiring || w->free_requested ||
      token >= (1ull << 53) || pending_find(w, token) != nullptr)
    return -1;
  mpk_scope inside(w);  /* outlives the guard, which may free w */
  call_guard guard(w);
  int rc = -1;
  bool started = false;
  if (!guarded(w, [&]() { rc = worker_dispatch(w, token, req, &started); }))
    rc = started ? 0 : -1;  /* started: it was failed, respond was called */
  return rc;
}

void iso_worker_fire_timer(iso_worker *w, uint64_t token, uint32_t timer_id) {
  if (w == nullptr || w->broken || w->free_requested)
    return;
  mpk_scope inside(w);  /* outlives the guard, which may free w */
  call_guard guard(w);
  guarded(w, [&]() { worker_fire_timer(w, token, timer_id); });
}

void iso_worker_complete(iso_worker *w, uint64_t token, uint32_t call_id, int ok,
                         const uint8_t *value, size_t value_len) {
  if (w == nullptr || w->broken || w->free_requested || w->async_calls.count(call_id) == 0)
    return;
  mpk_scope inside(w);  /* outlives the guard, which may free w */
  call_guard guard(w);
  guarded(w, [&]() { worker_complete(w, token, call_id, ok, value, value_len); });
}

size_t iso_worker_pending(const iso_worker *w) {
  return w->pending.size();
}

uint64_t iso_worker_request_cpu_ns(const iso_worker *w, uint64_t token) {
  if (w == nullptr)
    return 0;
  if (w->finishing != nullptr && w->finishing->token == token)
    return w->finishing->cpu_ns;  /* with the finishing entry's part (request_done) */
  const pending_request *p = nullptr;
  for (size_t i = 0; p == nullptr && i < w->pending.size(); i++)
    if (w->pending[i].token == token)
      p = &w->pending[i];
  if (p == nullptr)
    return 0;
  /* Called from respond or done: the entry that called it is still on. */
  if (w->depth > 0 && w->charged == token)
    return p->cpu_ns + watchdog_used(&w->watch);
  return p->cpu_ns;
}

void iso_worker_outside_stats(const iso_worker *w, uint64_t *cpu_ns, uint64_t *cpu_limit_hits) {
  *cpu_ns = w ? w->outside_cpu_ns : 0;
  *cpu_limit_hits = w ? w->outside_cpu_limit_hits : 0;
}

size_t iso_worker_pending_calls(const iso_worker *w) {
  return w->async_calls.size();
}

void iso_worker_external_memory(iso_worker *w, int64_t change_bytes) {
  if (w == nullptr || change_bytes == 0)
    return;
  mpk_scope inside(w);
  w->isolate->AdjustAmountOfExternalAllocatedMemory(change_bytes);
}

int iso_worker_broken(const iso_worker *w) {
  return w->broken || w->retiring ? 1 : 0;
}

void iso_worker_heap_stats(iso_worker *w, iso_heap_stats *out) {
  memset(out, 0, sizeof(*out));
  if (w == nullptr)
    return;
  mpk_scope inside(w);  /* the statistics are read from its pages */
  v8::HeapStatistics hs;
  w->isolate->GetHeapStatistics(&hs);
  out->used_bytes = hs.used_heap_size();
  out->total_bytes = hs.total_heap_size();
  out->limit_bytes = hs.heap_size_limit();
  out->external_bytes = hs.external_memory();
}

void iso_worker_compact(iso_worker *w) {
  if (w == nullptr || w->calls > 0 || w->broken || w->free_requested)
    return;
  mpk_scope inside(w);
  call_guard guard(w);
  v8::Isolate::Scope isolate_scope(w->isolate);
  /* Not MemoryPressureNotification(kCritical): cheaper, but it left a busy
   * worker's young generation as large and as resident as it was. */
  w->isolate->LowMemoryNotification();
  /* The collection read every builtin's code object, each a page of memory
   * again. */
  pages_share_code(w->isolate);
}

int iso_validate(const iso_limits *limits, const iso_module *modules, size_t n_modules,
                 const char *main_module, iso_error *err) {
  static const iso_host quiet = {nullptr, host_log, host_timer_start, host_timer_cancel,
                                 host_respond, host_done};
  iso_worker *w = iso_worker_new(&quiet, limits, modules, n_modules, main_module, nullptr, err);
  if (w == nullptr)
    return -1;
  iso_worker_free(w);
  return 0;
}

/* Only its address matters: iso_request.body == ISO_BODY_STREAMED. */
const uint8_t iso_body_streamed_marker[1] = {0};
