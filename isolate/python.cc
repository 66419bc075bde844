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
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

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

}  // namespace

bool python_natives_add(v8::Local<v8::Context> context, v8::Local<v8::Object> native) {
  return natives_set(context, native, "pythonScript", python_script) &&
         natives_set(context, native, "pythonFile", python_file) &&
         natives_set(context, native, "pythonModule", python_module);
}

}  // namespace iso

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
