/*
 * ES modules: compile every module, link imports by name, evaluate the main
 * one. Module names are paths ("index.js", "lib/util.js"); an import
 * specifier is resolved against the importing module's directory, as
 * workerd does.
 *
 * All of it runs inside the load's entry, under the CPU watchdog. V8 looks
 * at a termination only while JavaScript runs, never while it compiles or
 * links, so the watchdog's verdict is read between modules here: a graph of
 * a thousand modules that takes seconds to compile (10 MiB of top-level
 * statements took 1.3 s) stops at the CPU limit, one module's compile past
 * it at most.
 */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include <openssl/evp.h>

#include "internal.h"

namespace iso {

std::string module_resolve_name(const std::string &referrer, const std::string &specifier) {
  std::vector<std::string> parts;
  auto push_segments = [&parts](const std::string &path, bool keep_last) {
    size_t start = 0;
    while (start <= path.size()) {
      size_t end = path.find('/', start);
      if (end == std::string::npos)
        end = path.size();
      bool last = end == path.size();
      if (!last || keep_last) {
        std::string seg = path.substr(start, end - start);
        if (seg == "..") {
          if (parts.empty())
            return false;
          parts.pop_back();
        } else if (!seg.empty() && seg != ".") {
          parts.push_back(std::move(seg));
        }
      }
      start = end + 1;
    }
    return true;
  };
  if (specifier.empty() || specifier[0] != '/')
    if (!push_segments(referrer, false))  /* the referrer's directory */
      return "";
  if (!push_segments(specifier, true))
    return "";
  std::string out;
  for (const std::string &p : parts) {
    if (!out.empty())
      out += '/';
    out += p;
  }
  return out;
}

namespace {

module_entry *find_module(iso_worker *w, const std::string &name) {
  auto it = w->module_by_name.find(name);
  return it == w->module_by_name.end() ? nullptr : &w->modules[it->second];
}

module_entry *entry_of(iso_worker *w, v8::Local<v8::Module> module) {
  auto range = w->module_by_hash.equal_range(module->GetIdentityHash());
  for (auto it = range.first; it != range.second; ++it)
    if (w->modules[it->second].module == module)
      return &w->modules[it->second];
  return nullptr;
}

/* A module by a name without its extension, or with .js for .ts, as
 * wrangler's bundler resolves them: "./util" is util.ts, util.mts, util.js,
 * util.mjs, util/index.ts or util/index.js (the first that exists), and
 * "./util.js" (.mjs) is util.ts (.mts) when there is no util.js. */
module_entry *find_like_bundler(iso_worker *w, const std::string &name) {
  size_t slash = name.rfind('/');
  std::string last = name.substr(slash == std::string::npos ? 0 : slash + 1);
  auto ends = [&name](const char *ext) {
    size_t n = strlen(ext);
    return name.size() > n && name.compare(name.size() - n, n, ext) == 0;
  };
  module_entry *found = nullptr;
  if (last.find('.') == std::string::npos) {
    for (const char *ext : {".ts", ".mts", ".js", ".mjs", "/index.ts", "/index.js"})
      if ((found = find_module(w, name + ext)) != nullptr) return found;
  } else if (ends(".js")) {
    found = find_module(w, name.substr(0, name.size() - 3) + ".ts");
  } else if (ends(".mjs")) {
    found = find_module(w, name.substr(0, name.size() - 4) + ".mts");
  }
  return found;
}

/* The module an import names, resolved against its importer's directory. */
module_entry *find_import(iso_worker *w, const std::string &from, const std::string &wanted) {
  std::string name = module_resolve_name(from, wanted);
  module_entry *found = find_module(w, name);
  if (found == nullptr) found = find_module(w, wanted); /* a bare name of a top-level module */
  if (found == nullptr && !name.empty()) found = find_like_bundler(w, name);
  return found;
}

v8::MaybeLocal<v8::Module> resolve(v8::Local<v8::Context> context, v8::Local<v8::String> specifier,
                                   v8::Local<v8::FixedArray>, v8::Local<v8::Module> referrer) {
  iso_worker *w = worker_of(context);
  v8::Isolate *isolate = context->GetIsolate();
  const module_entry *from = entry_of(w, referrer);
  v8::String::Utf8Value spec(isolate, specifier);
  std::string wanted(*spec ? *spec : "", *spec ? spec.length() : 0);
  std::string from_name = from ? from->name : "";

  module_entry *found = find_import(w, from_name, wanted);
  if (found != nullptr)
    return found->module.Get(isolate);

  w->link_error = "cannot resolve \"" + wanted + "\" imported from \"" + from_name + "\"";
  w->link_module = from_name;
  isolate->ThrowException(v8::Exception::Error(str(isolate, w->link_error.c_str())));
  return v8::MaybeLocal<v8::Module>();
}

bool is_wasm_name(const char *name) {
  size_t n = strlen(name);
  return n > 5 && strcmp(name + n - 5, ".wasm") == 0;
}

/* A .wasm module's evaluation: its one export, the compiled module. */
v8::MaybeLocal<v8::Value> wasm_evaluate(v8::Local<v8::Context> context,
                                        v8::Local<v8::Module> module) {
  v8::Isolate *isolate = context->GetIsolate();
  module_entry *e = entry_of(worker_of(context), module);
  v8::Local<v8::Promise::Resolver> done;
  if (e == nullptr || e->wasm.IsEmpty() ||
      module->SetSyntheticModuleExport(isolate, str(isolate, "default"), e->wasm.Get(isolate))
          .IsNothing() ||
      !v8::Promise::Resolver::New(context).ToLocal(&done) ||
      done->Resolve(context, v8::Undefined(isolate)).IsNothing())
    return {};
  return done->GetPromise();
}

/* The bytes of a .wasm module, whose source is them in base64 (the node
 * checked it is standard base64 with padding: node/spec.c). */
bool wasm_bytes(const iso_module *m, std::vector<uint8_t> *out) {
  size_t n = m->source_len;
  if (n == 0 || n % 4 != 0 || n > (size_t)INT_MAX)
    return false;
  out->resize(n / 4 * 3);
  int len = EVP_DecodeBlock(out->data(), (const unsigned char *)m->source, (int)n);
  if (len < 0)
    return false;
  size_t pad = m->source[n - 1] == '=' ? (m->source[n - 2] == '=' ? 2 : 1) : 0;
  out->resize((size_t)len - pad);
  return true;
}

/* A .wasm module, compiled here rather than by JavaScript decoding its
 * base64: for a 6 MiB module, that took most of a second of every cold
 * start. It becomes a synthetic module whose default export is the
 * WebAssembly.Module, as workerd's wasm modules are. */
bool compile_wasm(iso_worker *w, v8::Local<v8::Context> context, const iso_module *m,
                  iso_error *err) {
  v8::Isolate *isolate = context->GetIsolate();
  std::vector<uint8_t> bytes;
  if (!wasm_bytes(m, &bytes)) {
    error_set(err, ISO_ERR_SYNTAX, "a .wasm module's source must be its bytes in base64");
    err->module = xstrdup(m->name);
    return false;
  }
  v8::TryCatch tc(isolate);
  v8::Local<v8::WasmModuleObject> compiled;
  if (!v8::WasmModuleObject::Compile(isolate, v8::MemorySpan<const uint8_t>(bytes.data(),
                                                                            bytes.size()))
           .ToLocal(&compiled)) {
    error_from_try_catch(w, context, ISO_ERR_SYNTAX, tc, err);
    if (err->module == nullptr)
      err->module = xstrdup(m->name);
    return false;
  }
  std::vector<v8::Local<v8::String>> exports = {str(isolate, "default")};
  v8::Local<v8::Module> module = v8::Module::CreateSyntheticModule(
      isolate, str(isolate, m->name), exports, wasm_evaluate);
  w->modules.back().module.Reset(isolate, module);
  w->modules.back().wasm.Reset(isolate, compiled);
  w->module_by_hash.emplace(module->GetIdentityHash(), w->modules.size() - 1);
  return true;
}

bool is_python_name(const char *name) {
  size_t n = strlen(name);
  return n > 3 && strcmp(name + n - 3, ".py") == 0;
}

/* `s` as a JavaScript string literal. */
std::string js_quote(const char *s, size_t n) {
  std::string out = "\"";
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c == '"' || c == '\\') {
      out += '\\';
      out += (char)c;
    } else if (c < 0x20) {
      char esc[8];
      snprintf(esc, sizeof esc, "\\u%04x", c);
      out += esc;
    } else {
      out += (char)c;
    }
  }
  return out + "\"";
}

/* A .py module becomes the JavaScript that runs it on Pyodide
 * (runtime/46-python.js): its default export has fetch() calling the
 * module's on_fetch, and run() its run, so a deployed worker and
 * /v1/run's wrapper take it as they take a JavaScript module. The
 * bundle's other .py modules come with it, to be importable. */
std::string python_wrapper(const iso_module *m, const iso_module *all, size_t n_all) {
  std::string others = "{";
  for (size_t i = 0; i < n_all; i++) {
    const iso_module *o = &all[i];
    if (o == m || o->name == nullptr || !is_python_name(o->name))
      continue;
    others += js_quote(o->name, strlen(o->name)) + ": " +
              js_quote(o->source ? o->source : "", o->source_len) + ",";
  }
  return "const handler = globalThis[Symbol.for('edgenode.python')](" +
         js_quote(m->source ? m->source : "", m->source_len) + ", " +
         js_quote(m->name, strlen(m->name)) + ", " + others +
         "});\nexport default handler;\n"
         "export function run(input, env) { return handler.run(input, env); }\n";
}

bool compile_one(iso_worker *w, v8::Local<v8::Context> context, const iso_module *m,
                 const iso_module *all, size_t n_all, iso_error *err) {
  v8::Isolate *isolate = context->GetIsolate();
  if (m->name == nullptr || m->name[0] == '\0' || (m->source == nullptr && m->source_len > 0)) {
    error_set(err, ISO_ERR_INTERNAL, "a module has no name or no source");
    return false;
  }
  if (find_module(w, m->name) != nullptr) {
    error_set(err, ISO_ERR_LINK, "two modules have the same name");
    err->module = xstrdup(m->name);
    return false;
  }
  w->module_by_name.emplace(m->name, w->modules.size());
  w->modules.push_back(module_entry{m->name, {}, {}});
  if (is_wasm_name(m->name))
    return compile_wasm(w, context, m, err);

  std::string python;
  iso_module as_js = *m;
  if (is_python_name(m->name)) {
    python = python_wrapper(m, all, n_all);
    as_js.source = python.data();
    as_js.source_len = python.size();
    m = &as_js;
  }
  v8::Local<v8::String> source;
  if (m->source_len > (size_t)v8::String::kMaxLength ||
      !v8::String::NewFromUtf8(isolate, m->source ? m->source : "", v8::NewStringType::kNormal,
                               (int)m->source_len).ToLocal(&source)) {
    error_set(err, ISO_ERR_SYNTAX, "module source is too long");
    err->module = xstrdup(m->name);
    return false;
  }
  v8::ScriptOrigin origin(isolate, str(isolate, m->name), 0, 0, false, -1, v8::Local<v8::Value>(),
                          false, false, true);
  v8::ScriptCompiler::Source src(source, origin);
  v8::TryCatch tc(isolate);
  v8::Local<v8::Module> module;
  if (!v8::ScriptCompiler::CompileModule(isolate, &src).ToLocal(&module)) {
    error_from_try_catch(w, context, ISO_ERR_SYNTAX, tc, err);
    if (err->module == nullptr)
      err->module = xstrdup(m->name);
    return false;
  }
  w->modules.back().module.Reset(isolate, module);
  w->module_by_hash.emplace(module->GetIdentityHash(), w->modules.size() - 1);
  return true;
}

bool instantiate(iso_worker *w, v8::Local<v8::Context> context, v8::Local<v8::Module> main,
                 iso_error *err) {
  v8::TryCatch tc(context->GetIsolate());
  w->link_error.clear();
  if (main->InstantiateModule(context, resolve).FromMaybe(false))
    return true;
  if (!w->link_error.empty()) {
    error_set(err, ISO_ERR_LINK, w->link_error.c_str());
    if (!w->link_module.empty())
      err->module = xstrdup(w->link_module.c_str());
    return false;
  }
  /* A missing export is a SyntaxError thrown while linking. */
  error_from_try_catch(w, context, ISO_ERR_LINK, tc, err);
  return false;
}

bool evaluate(iso_worker *w, v8::Local<v8::Context> context, v8::Local<v8::Module> main,
              const char *main_name, iso_error *err) {
  v8::Isolate *isolate = context->GetIsolate();
  v8::TryCatch tc(isolate);
  v8::Local<v8::Value> result;
  if (!main->Evaluate(context).ToLocal(&result)) {
    error_from_try_catch(w, context, ISO_ERR_EXCEPTION, tc, err);
    return false;
  }
  /* With top-level await, Evaluate returns a promise that microtasks settle. */
  entry_token_forget(w);
  isolate->PerformMicrotaskCheckpoint();
  if (tc.HasTerminated() || isolate->IsExecutionTerminating()) {
    error_set(err, ISO_ERR_INTERNAL, "execution terminated");
    return false;
  }
  if (!result->IsPromise())
    return true;
  v8::Local<v8::Promise> promise = result.As<v8::Promise>();
  switch (promise->State()) {
  case v8::Promise::kFulfilled:
    return true;
  case v8::Promise::kRejected:
    error_from_exception(w, context, ISO_ERR_EXCEPTION, promise->Result(),
                         v8::Local<v8::Message>(), err);
    return false;
  case v8::Promise::kPending:
    break;
  }
  /* Nothing but a timer or a request could settle it, and neither exists yet. */
  error_set(err, ISO_ERR_EXCEPTION, "top-level await did not settle");
  err->module = xstrdup(main_name);
  return false;
}

/* Settles the import() promise with the namespace once evaluation is over. */
void import_fulfilled(const v8::FunctionCallbackInfo<v8::Value> &info) {
  info.GetReturnValue().Set(info.Data());
}

v8::MaybeLocal<v8::Promise> import_rejected(v8::Local<v8::Context> context,
                                            v8::Local<v8::Value> reason) {
  v8::Local<v8::Promise::Resolver> resolver;
  if (!v8::Promise::Resolver::New(context).ToLocal(&resolver) ||
      resolver->Reject(context, reason).IsNothing())
    return {};
  return resolver->GetPromise();
}

}  // namespace

/* import(): only modules deployed with the worker, already compiled. */
v8::MaybeLocal<v8::Promise> module_import_dynamic(v8::Local<v8::Context> context,
                                                  v8::Local<v8::Data>,
                                                  v8::Local<v8::Value> resource_name,
                                                  v8::Local<v8::String> specifier,
                                                  v8::Local<v8::FixedArray>) {
  v8::Isolate *isolate = context->GetIsolate();
  iso_worker *w = worker_of(context);
  v8::String::Utf8Value from(isolate, resource_name), spec(isolate, specifier);
  std::string wanted(*spec ? *spec : "", *spec ? spec.length() : 0);
  module_entry *found = find_import(w, *from ? *from : "", wanted);
  if (found == nullptr || found->module.IsEmpty()) {
    std::string msg = "cannot resolve \"" + wanted + "\" imported from \"" +
                      std::string(*from ? *from : "") + "\"";
    return import_rejected(context, v8::Exception::TypeError(str(isolate, msg.c_str())));
  }
  v8::Local<v8::Module> module = found->module.Get(isolate);
  v8::TryCatch tc(isolate);
  v8::Local<v8::Value> evaluated;
  if (module->GetStatus() == v8::Module::kUninstantiated &&
      !module->InstantiateModule(context, resolve).FromMaybe(false))
    return tc.HasTerminated() ? v8::MaybeLocal<v8::Promise>() : import_rejected(context, tc.Exception());
  if (!module->Evaluate(context).ToLocal(&evaluated))
    return tc.HasTerminated() ? v8::MaybeLocal<v8::Promise>() : import_rejected(context, tc.Exception());
  v8::Local<v8::Function> fulfilled;
  if (!evaluated->IsPromise() ||
      !v8::Function::New(context, import_fulfilled, module->GetModuleNamespace())
           .ToLocal(&fulfilled))
    return {};
  return evaluated.As<v8::Promise>()->Then(context, fulfilled);
}

/* Whether the load's entry ran out of CPU: its caller turns this into the
 * CPU limit's error (entry_end reads the same verdict). */
static bool out_of_cpu(iso_worker *w) {
  return watchdog_fired(&w->watch) || w->isolate->IsExecutionTerminating();
}

v8::MaybeLocal<v8::Value> modules_load(iso_worker *w, v8::Local<v8::Context> context,
                                       const iso_module *modules, size_t n_modules,
                                       const char *main_module, iso_error *err) {
  v8::Isolate *isolate = context->GetIsolate();
  if (n_modules == 0 || modules == nullptr || main_module == nullptr) {
    error_set(err, ISO_ERR_INTERNAL, "no modules");
    return {};
  }
  for (size_t i = 0; i < n_modules; i++)
    if (out_of_cpu(w) || !compile_one(w, context, &modules[i], modules, n_modules, err))
      return {};
  if (out_of_cpu(w))
    return {};
  module_entry *main = find_module(w, main_module);
  if (main == nullptr) {
    error_set(err, ISO_ERR_LINK, "the main module is not among the modules");
    err->module = xstrdup(main_module);
    return {};
  }
  v8::Local<v8::Module> module = main->module.Get(isolate);
  if (!instantiate(w, context, module, err) || out_of_cpu(w) ||
      !evaluate(w, context, module, main_module, err))
    return {};

  v8::Local<v8::Object> ns = module->GetModuleNamespace().As<v8::Object>();
  v8::TryCatch tc(isolate);
  v8::Local<v8::Value> def;
  if (!ns->Get(context, str(isolate, "default")).ToLocal(&def)) {
    error_from_try_catch(w, context, ISO_ERR_NO_HANDLER, tc, err);
    return {};
  }
  return def;
}

}  // namespace iso
