/*
 * A worker's life outside its requests: its isolate made (or a blank one
 * taken from the pool) and its context set up from the snapshot, the
 * tenant's modules loaded into it, its heap measured and compacted, and its
 * disposal, on the pool's thread when it can.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "natives.h"

namespace iso {
namespace {

/* Wasm compiles from bytes, never from strings: what eval() being off
 * guards against does not apply. Its memory is charged to the worker
 * (wasm.cc). */
bool wasm_allowed(v8::Local<v8::Context>, v8::Local<v8::String>) {
  return true;
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
  if (!remove_atomics_wait_async(context)) {
    error_set(err, ISO_ERR_INTERNAL, "could not set up the context");
    return false;
  }
  v8::Local<v8::Function> fns[4];
  v8::Local<v8::Object> native;
  if (!context->GetDataFromSnapshotOnce<v8::Function>(snapshot_index(kSlotSetHandler))
           .ToLocal(&fns[0]) ||
      !context->GetDataFromSnapshotOnce<v8::Function>(snapshot_index(kSlotDispatch))
           .ToLocal(&fns[1]) ||
      !context->GetDataFromSnapshotOnce<v8::Function>(snapshot_index(kSlotFireTimer))
           .ToLocal(&fns[2]) ||
      !context->GetDataFromSnapshotOnce<v8::Function>(snapshot_index(kSlotInstallWasm))
           .ToLocal(&fns[3]) ||
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
  /* V8 installs WebAssembly in every new context, snapshot or not: the
   * runtime replaces its asynchronous forms there (42-wasm.js). */
  if (fns[3]->Call(context, v8::Undefined(isolate), 0, nullptr).IsEmpty()) {
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
  w->isolate->SetAllowWasmCodeGenerationCallback(wasm_allowed);
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
  if (o->stream != nullptr)
    w->host_stream = *o->stream;
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
    w->module_by_name.clear();
    w->module_by_hash.clear();
    w->async_calls.clear();
    w->drains.clear();
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
    wasm_forget(w);
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

/* Disposing of an isolate takes half a millisecond or more of the calling
 * thread, most of it V8 tearing its heap down: the pool's thread does it
 * when it can, off the loop that serves requests. */
void worker_release(iso_worker *w) {
  if (w->jumped_out || !pool_retire(w))
    worker_destroy(w);
}

namespace {

/* Inside iso_validate (the loop thread's only). */
bool validating = false;

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
  const iso_host_stream *st = o->stream;
  if (st != nullptr &&
      (st->start == nullptr || st->write == nullptr || st->end == nullptr || st->abort == nullptr)) {
    error_set(err, ISO_ERR_INTERNAL, "the host's stream callbacks are incomplete");
    return nullptr;
  }
  /* Before the tenant's isolate is entered: stripping is not its CPU. */
  ts_stripped ts;
  if (!ts_strip_options(o, &ts, err)) {
    iso_error_clear(&local);
    return nullptr;
  }
  if (ts.any) o = &ts.options;
  uint32_t memory_mb = o->limits.memory_mb ? o->limits.memory_mb : kDefaultMemoryMb;
  /* A deploy's validation only compiles: Python boots on the first request. */
  iso_worker *w = validating ? nullptr : python_take(memory_mb, o, err);
  if (w == nullptr && err->kind != ISO_OK) {
    iso_error_clear(&local);
    return nullptr;
  }
  if (w == nullptr)
    w = pool_take(memory_mb);
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


void iso_worker_external_memory(iso_worker *w, int64_t change_bytes) {
  if (w == nullptr || change_bytes == 0)
    return;
  mpk_scope inside(w);
  w->isolate->AdjustAmountOfExternalAllocatedMemory(change_bytes);
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
                                 host_respond, host_done, nullptr};
  validating = true;
  iso_worker *w = iso_worker_new(&quiet, limits, modules, n_modules, main_module, nullptr, err);
  validating = false;
  if (w == nullptr)
    return -1;
  iso_worker_free(w);
  return 0;
}

