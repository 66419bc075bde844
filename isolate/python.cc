/*
 * Pyodide's files for Python workers (runtime/46-python.js), and the natives
 * that hand them to a context.
 *
 * The files are mapped once per process, before the jail closes the file
 * system (iso_python_open): read-only file pages, shared with every other
 * worker process through the page cache, so an idle process pays nothing
 * for them. The 10 MB wasm module is compiled once per process, by the
 * first context that asks, and every later context instantiates the same
 * compiled code (CompiledWasmModule): compiling it took most of a cold
 * boot's CPU.
 *
 * Booting an interpreter still takes about two seconds of CPU (Pyodide's
 * JavaScript set-up and Python's own start), far from a cold start in
 * tens of milliseconds. So a thread of its own keeps a few workers with an
 * interpreter booted and nothing else (iso_python_pool_start): a request
 * for Python takes one (python_take), which is then its own for good, and
 * the thread boots the next. The thread starts with the process's first
 * Python sandbox. Each boot is separate: no two sandboxes share
 * an interpreter's state, hash() key or random state (docs/python.md).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <condition_variable>

#include "internal.h"
#include "natives.h"

namespace iso {
namespace {

using Info = v8::FunctionCallbackInfo<v8::Value>;

struct mapped_file {
  const char *name;
  const uint8_t *data;
  size_t len;
};

/* What 46-python.js asks for by name; nothing else of the directory is read. */
mapped_file files[] = {
    {"pyodide.js", nullptr, 0},
    {"pyodide.asm.js", nullptr, 0},
    {"pyodide.asm.wasm", nullptr, 0},
    {"python_stdlib.zip", nullptr, 0},
    {"pyodide-lock.json", nullptr, 0},
};

std::mutex compiled_mu;
std::shared_ptr<v8::CompiledWasmModule> compiled; /* under compiled_mu */
std::vector<uint8_t> snapshot;                    /* under compiled_mu; empty: none yet */
size_t snapshot_uses = 0;                         /* interpreters restored from it */

/* Interpreters restored from one snapshot share its hash() key (CPython's
 * secret is in the memory it restores): after this many the next boot is
 * whole again and makes a new snapshot, a new generation with its own key.
 * A whole boot costs about five restores, so this adds ~8% to the mean. */
constexpr size_t kSnapshotUses = 64;

const mapped_file *file_named(const char *name) {
  for (const mapped_file &f : files)
    if (strcmp(f.name, name) == 0 && f.data != nullptr)
      return &f;
  return nullptr;
}

int map_one(const char *dir, mapped_file *f) {
  char *path = xasprintf("%s/%s", dir, f->name);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  free(path);
  if (fd < 0)
    return -errno;
  struct stat st;
  int rc = 0;
  if (fstat(fd, &st) != 0 || st.st_size <= 0) {
    rc = -EINVAL;
  } else {
    void *p = mmap(nullptr, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      rc = -errno;
    } else {
      f->data = (const uint8_t *)p;
      f->len = (size_t)st.st_size;
    }
  }
  close(fd);
  return rc;
}

/* pythonScript(name): runs one of Pyodide's classic scripts in this context
 * (its importScripts). Returns the script's completion value. */
void python_script(const Info &info) {
  v8::Isolate *isolate = info.GetIsolate();
  v8::String::Utf8Value name(isolate, info[0]);
  const mapped_file *f = *name && (strcmp(*name, "pyodide.js") == 0 ||
                                   strcmp(*name, "pyodide.asm.js") == 0)
                             ? file_named(*name)
                             : nullptr;
  if (f == nullptr) {
    crypto::throw_error(isolate, "Python is not available in this process (no such Pyodide script)");
    return;
  }
  v8::Local<v8::Context> context = isolate->GetCurrentContext();
  v8::Local<v8::String> source;
  if (!v8::String::NewFromUtf8(isolate, (const char *)f->data, v8::NewStringType::kNormal,
                               (int)f->len).ToLocal(&source))
    return;
  v8::ScriptOrigin origin(isolate, str(isolate, f->name));
  v8::ScriptCompiler::Source src(source, origin);
  v8::Local<v8::Script> script;
  v8::Local<v8::Value> result;
  if (!v8::ScriptCompiler::Compile(context, &src).ToLocal(&script) ||
      !script->Run(context).ToLocal(&result))
    return;
  info.GetReturnValue().Set(result);
}

/* pythonFile(name): a copy of one of Pyodide's data files, as a Uint8Array
 * charged to the worker (Pyodide writes the standard library into its own
 * memory from it, then drops it). */
void python_file(const Info &info) {
  v8::Isolate *isolate = info.GetIsolate();
  v8::String::Utf8Value name(isolate, info[0]);
  const mapped_file *f = *name && (strcmp(*name, "python_stdlib.zip") == 0 ||
                                   strcmp(*name, "pyodide-lock.json") == 0)
                             ? file_named(*name)
                             : nullptr;
  if (f == nullptr) {
    crypto::throw_error(isolate, "Python is not available in this process (no such Pyodide file)");
    return;
  }
  uint8_t *data = nullptr;
  v8::Local<v8::Uint8Array> bytes;
  if (!new_bytes(worker_of(isolate->GetCurrentContext()), f->len, &data).ToLocal(&bytes))
    return;
  memcpy(data, f->data, f->len);
  info.GetReturnValue().Set(bytes);
}

/* pythonModule(): Pyodide's WebAssembly.Module, compiled once per process. */
void python_module(const Info &info) {
  v8::Isolate *isolate = info.GetIsolate();
  const mapped_file *f = file_named("pyodide.asm.wasm");
  if (f == nullptr) {
    crypto::throw_error(isolate, "Python is not available in this process (no Pyodide wasm module)");
    return;
  }
  iso_worker *w = worker_of(isolate->GetCurrentContext());
  if (w != nullptr)
    w->python = true;
  std::lock_guard<std::mutex> lock(compiled_mu);
  v8::Local<v8::WasmModuleObject> module;
  if (compiled) {
    if (!v8::WasmModuleObject::FromCompiledModule(isolate, *compiled).ToLocal(&module))
      return;
  } else {
    if (!v8::WasmModuleObject::Compile(isolate, v8::MemorySpan<const uint8_t>(f->data, f->len))
             .ToLocal(&module))
      return;
    compiled = std::make_shared<v8::CompiledWasmModule>(module->GetCompiledModule());
  }
  info.GetReturnValue().Set(module);
}

/* pythonSnapshot(): a copy of the process's memory snapshot of a booted
 * interpreter (Uint8Array, charged to the worker), or null before the
 * first boot made it. */
void python_snapshot(const Info &info) {
  v8::Isolate *isolate = info.GetIsolate();
  std::lock_guard<std::mutex> lock(compiled_mu);
  if (!snapshot.empty() && snapshot_uses >= kSnapshotUses) {
    std::vector<uint8_t>().swap(snapshot);
    snapshot_uses = 0;
  }
  if (snapshot.empty()) {
    info.GetReturnValue().SetNull();
    return;
  }
  snapshot_uses++;
  uint8_t *data = nullptr;
  v8::Local<v8::Uint8Array> bytes;
  if (!new_bytes(worker_of(isolate->GetCurrentContext()), snapshot.size(), &data).ToLocal(&bytes))
    return;
  memcpy(data, snapshot.data(), snapshot.size());
  info.GetReturnValue().Set(bytes);
}

/* pythonKeepSnapshot(bytes): the process's snapshot, unless one is kept. */
void python_keep_snapshot(const Info &info) {
  crypto::bytes b;
  if (!crypto::arg_bytes(info, 0, &b))
    return;
  size_t made = 0;
  {
    std::lock_guard<std::mutex> lock(compiled_mu);
    if (snapshot.empty()) {
      snapshot.assign(b.p, b.p + b.n);
      made = snapshot.size();
    }
  }
  /* Logged from the copy's size, outside the lock: GCC 12 at -O3 took the
   * log call for a use of the argument's pointer (-Wdangling-pointer). */
  if (made) log_info("Python memory snapshot made: %zu bytes", made);
}

/* ---- the pool of booted interpreters ---- */

constexpr int kBooterNice = 10;
constexpr auto kBootRetryAfter = std::chrono::seconds(5);

std::mutex pool_mu;
std::condition_variable pool_wanted;
std::vector<iso_worker *> pool_ready; /* under pool_mu, as all below */
size_t pool_target = 0;
uint32_t pool_memory_mb = 0;
bool pool_stopping = false;
bool pool_running = false;
pthread_t pool_thread;

void quiet_log(void *, uint64_t, iso_log_level, const char *, size_t) {}
int quiet_timer_start(void *, uint64_t, uint32_t, double) { return -1; }
void quiet_timer_cancel(void *, uint32_t) {}
void quiet_respond(void *, uint64_t, const iso_response *, const iso_error *) {}
void quiet_done(void *, uint64_t) {}
const iso_host quiet_host = {nullptr, quiet_log, quiet_timer_start, quiet_timer_cancel,
                             quiet_respond, quiet_done, nullptr};

/* Boots Pyodide in a blank worker (46-python.js, pythonPrepare). Its boot
 * settles on microtasks alone: nothing else runs here to settle it. */
bool python_boot(iso_worker *w) {
  w->host = quiet_host;
  mpk_scope inside(w);
  v8::Isolate *isolate = w->isolate;
  v8::Isolate::Scope isolate_scope(isolate);
  v8::HandleScope handles(isolate);
  v8::Local<v8::Context> context = w->context.Get(isolate);
  v8::Context::Scope context_scope(context);
  v8::TryCatch tc(isolate);
  v8::Local<v8::Value> prepare, result;
  v8::Local<v8::Symbol> key = v8::Symbol::For(isolate, str(isolate, "edgenode.python.prepare"));
  bool ok = context->Global()->Get(context, key).ToLocal(&prepare) && prepare->IsFunction() &&
            prepare.As<v8::Function>()->Call(context, v8::Undefined(isolate), 0, nullptr)
                .ToLocal(&result) && result->IsPromise();
  if (ok) {
    isolate->PerformMicrotaskCheckpoint();
    v8::Local<v8::Promise> p = result.As<v8::Promise>();
    ok = p->State() == v8::Promise::kFulfilled;
    if (!ok) {
      v8::String::Utf8Value why(isolate, p->State() == v8::Promise::kRejected
                                             ? p->Result()
                                             : str(isolate, "it waited for a timer").As<v8::Value>());
      log_error("could not boot a Python interpreter: %s", *why ? *why : "?");
    }
  }
  /* The boot's garbage (Pyodide's scripts' sources, the standard
   * library's copy) would stay resident in every ready worker until its
   * first request: collected here, off the request path. */
  if (ok)
    isolate->LowMemoryNotification();
  w->host = iso_host{};
  return ok;
}

void *booter_main(void *) {
  /* This thread only (0: see the isolate pool's maker_main). */
  if (setpriority(PRIO_PROCESS, 0, kBooterNice) != 0)
    log_debug("the Python pool's thread keeps its priority: %s", strerror(errno));
  mpk_thread_close();
  std::unique_lock<std::mutex> lock(pool_mu);
  while (!pool_stopping) {
    if (pool_ready.size() >= pool_target) {
      pool_wanted.wait(lock);
      continue;
    }
    uint32_t memory_mb = pool_memory_mb;
    lock.unlock();
    iso_error err = {};
    iso_worker *w = worker_blank(memory_mb, &err);
    if (w != nullptr && !python_boot(w)) {
      worker_destroy(w);
      w = nullptr;
    } else if (w == nullptr) {
      log_error("could not make an isolate for Python: %s", err.message ? err.message : "?");
    }
    iso_error_clear(&err);
    lock.lock();
    if (w == nullptr) {
      pool_wanted.wait_for(lock, kBootRetryAfter);
      continue;
    }
    if (memory_mb != pool_memory_mb || pool_stopping) {
      lock.unlock();
      worker_destroy(w);
      lock.lock();
      continue;
    }
    pool_ready.push_back(w);
  }
  return nullptr;
}

bool has_python(const iso_worker_options *o) {
  for (size_t i = 0; i < o->n_modules; i++) {
    const char *name = o->modules[i].name;
    size_t n = name ? strlen(name) : 0;
    if (n > 3 && strcmp(name + n - 3, ".py") == 0)
      return true;
  }
  return false;
}

}  // namespace

/* With pool_mu held: the pool's thread, from the process's first Python
 * sandbox on. Until then Python costs a process nothing: most processes
 * of a node never serve a Python tenant. */
void booter_start() {
  if (pool_running || pool_stopping || pool_target == 0)
    return;
  int rc = pthread_create(&pool_thread, nullptr, booter_main, nullptr);
  if (rc != 0) {
    log_warn("no Python pool: %s", strerror(rc));
    pool_stopping = true;  /* not again */
    return;
  }
  pool_running = true;
}

iso_worker *python_take(uint32_t memory_mb, const iso_worker_options *o, iso_error *err) {
  if (!has_python(o))
    return nullptr;
  iso_worker *w = nullptr;
  {
    std::lock_guard<std::mutex> lock(pool_mu);
    booter_start();
    if (!pool_ready.empty() && memory_mb == pool_memory_mb) {
      w = pool_ready.back();
      pool_ready.pop_back();
      pool_wanted.notify_one();
    }
  }
  if (w != nullptr) {
    mpk_scope inside(w);
    w->isolate->SetStackLimit(this_thread_stack_limit());
    return w;
  }
  /* None ready: booted here, outside any request's CPU limit (the boot is
   * the platform's cost, not the tenant's), which holds this thread for
   * the boot's two seconds. A boot that fails leaves the handler to boot
   * again in the request, where the failure is the request's error. */
  w = worker_blank(memory_mb, err);
  if (w != nullptr)
    (void)python_boot(w);
  return w;
}

bool python_natives_add(v8::Local<v8::Context> context, v8::Local<v8::Object> native) {
  return natives_set(context, native, "pythonScript", python_script) &&
         natives_set(context, native, "pythonFile", python_file) &&
         natives_set(context, native, "pythonModule", python_module) &&
         natives_set(context, native, "pythonSnapshot", python_snapshot) &&
         natives_set(context, native, "pythonKeepSnapshot", python_keep_snapshot);
}

}  // namespace iso

using namespace iso;

extern "C" int iso_python_pool_start(size_t keep_ready, uint32_t memory_mb) {
  if (file_named("pyodide.asm.wasm") == nullptr)
    return keep_ready == 0 ? 0 : -ENOENT;
  std::lock_guard<std::mutex> lock(pool_mu);
  pool_target = keep_ready;
  pool_memory_mb = memory_mb ? memory_mb : kDefaultMemoryMb;
  pool_wanted.notify_one();
  return 0;
}

extern "C" void iso_python_pool_stop(void) {
  bool was_running;
  {
    std::lock_guard<std::mutex> lock(pool_mu);
    was_running = pool_running;
    pool_running = false;
    pool_stopping = true;
    pool_wanted.notify_one();
  }
  if (was_running) {
    int rc = pthread_join(pool_thread, nullptr);
    if (rc != 0)
      log_error("could not join the Python pool's thread: %s", strerror(rc));
  }
  std::vector<iso_worker *> left;
  {
    std::lock_guard<std::mutex> lock(pool_mu);
    left.swap(pool_ready);
  }
  for (iso_worker *w : left)
    worker_destroy(w);
}

extern "C" size_t iso_python_pool_size(void) {
  std::lock_guard<std::mutex> lock(pool_mu);
  return pool_ready.size();
}

extern "C" int iso_python_open(const char *dir) {
  for (iso::mapped_file &f : iso::files) {
    int rc = iso::map_one(dir, &f);
    if (rc != 0) {
      log_info("Python workers are off: %s/%s: %s", dir, f.name, strerror(-rc));
      for (iso::mapped_file &g : iso::files) {
        if (g.data != nullptr)
          munmap((void *)g.data, g.len);
        g.data = nullptr;
        g.len = 0;
      }
      return rc;
    }
  }
  return 0;
}
