/*
 * TypeScript modules (".ts", ".mts"): their types are stripped before they
 * are compiled, by amaro, the stripper Node.js itself uses (swc compiled
 * to WebAssembly, "strip-only" mode). Stripping replaces every piece of
 * type syntax with blanks and changes nothing else, so each line and
 * column of what runs is the line and column of what was written: stack
 * traces name the .ts module's own positions, with no source map.
 *
 * amaro runs in an isolate of its own, one per thread that loads modules
 * (the worker process's loop thread), made on the first TypeScript module
 * and kept: its wasm is compiled once (about 2.7 MB, most of the first
 * strip's cost). Each strip is an entry into that isolate under its own
 * CPU limit (kStripCpuMs) and memory limit (kStripMemoryMb), never the
 * tenant's: a tenant's cold start stays within its own cpu_ms. An isolate
 * that hit a limit is discarded and made again for the next module.
 * Stripped sources are kept (kCacheBytes at most, oldest dropped first), so
 * a worker loaded again in this process is not stripped again. The
 * stripper holds about 50 MiB once it has run (its wasm code and memory):
 * iso_typescript_trim() lets it and the cache go when idle.
 *
 * What cannot be stripped (enums, namespaces with values, parameter
 * properties, `<T>x` casts: syntax that would need code generated) and
 * syntax errors fail the load with the module, line and column amaro gives.
 */
#include <string.h>

#include "internal.h"

#ifdef EDGENODE_AMARO_JS
/* amaro's dist/internal.js, the CommonJS module that exports transformSync. */
__asm__(".section .rodata\n"
        ".balign 16\n"
        "iso_amaro_js:\n"
        ".incbin \"" EDGENODE_AMARO_JS "\"\n"
        "iso_amaro_js_end:\n"
        ".byte 0\n"
        ".previous\n");
extern "C" const char iso_amaro_js[] __asm__("iso_amaro_js");
extern "C" const char iso_amaro_js_end[] __asm__("iso_amaro_js_end");
#endif

namespace iso {
namespace {

constexpr uint32_t kStripMemoryMb = 512;
/* The first strip compiles amaro's wasm: hundreds of milliseconds on a slow machine. */
constexpr uint32_t kStripCpuMs = 5000;
constexpr size_t kCacheBytes = 32u << 20;

/* Gives amaro what it asks of Node (TextDecoder and TextEncoder from
 * "util", Buffer.from(base64) from "node:buffer") and returns
 * strip(source, filename): the stripped code, or [code, message, line,
 * column] for what amaro refused. */
const char kPrologue[] =
    "(function () {\n"
    "const module = { exports: {} };\n"
    "const exports = module.exports;\n"
    "function require(name) {\n"
    "  if (name === 'util') return { TextDecoder, TextEncoder };\n"
    "  if (name === 'node:buffer') return { Buffer: { from(text) {\n"
    "    const s = atob(text);\n"
    "    const b = new Uint8Array(s.length);\n"
    "    for (let i = 0; i < s.length; i++) b[i] = s.charCodeAt(i);\n"
    "    return b;\n"
    "  } } };\n"
    "  throw new Error('amaro needs ' + name);\n"
    "}\n"
    "(function (exports, module, require) {\n";
const char kEpilogue[] =
    "\n})(exports, module, require);\n"
    "const transformSync = module.exports.transformSync;\n"
    "return function strip(source, filename) {\n"
    "  try {\n"
    "    return transformSync(source, { mode: 'strip-only', sourceMap: false, filename }).code;\n"
    "  } catch (e) {\n"
    "    if (e === null || typeof e !== 'object') return ['Error', String(e), 0, 0];\n"
    "    return [String(e.code || e.name || 'Error'), String(e.message),\n"
    "            Number(e.startLine) || 0, Number(e.startColumn) || 0];\n"
    "  }\n"
    "};\n"
    "})";

struct stripper {
  iso_worker *w = nullptr;
  v8::Global<v8::Function> strip;
  uint64_t last_used_ns = 0;
};

thread_local stripper *current;

/* The cache of stripped sources: (name NUL source) -> code, oldest first out. */
struct strip_cache {
  std::unordered_map<std::string, std::string> code;
  std::deque<std::string> order;
  size_t bytes = 0;
};

thread_local strip_cache *cache;

#ifdef EDGENODE_AMARO_JS
class amaro_source : public v8::String::ExternalOneByteStringResource {
 public:
  const char *data() const override { return iso_amaro_js; }
  size_t length() const override { return (size_t)(iso_amaro_js_end - iso_amaro_js); }
  /* Static bytes: nothing to free when V8 lets go. */
  void Dispose() override {}
};

amaro_source amaro_bytes;
#endif

/* Runs fn(isolate, context) inside the stripper's isolate and context. */
template <typename F>
bool in_context(iso_worker *w, F &&fn) {
  v8::Isolate *isolate = w->isolate;
  v8::Isolate::Scope isolate_scope(isolate);
  v8::HandleScope handles(isolate);
  v8::Local<v8::Context> context = w->context.Get(isolate);
  v8::Context::Scope context_scope(context);
  return fn(isolate, context);
}

void stripper_free(stripper *s) {
  if (s->w != nullptr) {
    mpk_scope inside(s->w);
    s->strip.Reset();
    worker_destroy(s->w);
  }
  delete s;
}

#ifdef EDGENODE_AMARO_JS
/* Evaluates amaro's module in the stripper's context; keeps strip(). */
bool stripper_start(stripper *s, v8::Isolate *isolate, v8::Local<v8::Context> context,
                    iso_error *err) {
  iso_worker *w = s->w;
  v8::Local<v8::String> body;
  if (!v8::String::NewExternalOneByte(isolate, &amaro_bytes).ToLocal(&body)) {
    error_set(err, ISO_ERR_INTERNAL, "TypeScript: could not load the type stripper");
    return false;
  }
  v8::Local<v8::String> source = v8::String::Concat(
      isolate, v8::String::Concat(isolate, str(isolate, kPrologue), body), str(isolate, kEpilogue));
  v8::ScriptOrigin origin(isolate, str(isolate, "edgenode:typescript.js"));
  entry e;
  entry_begin(w, &e, 0, (uint64_t)kStripCpuMs * 1000000u);
  v8::TryCatch tc(isolate);
  v8::Local<v8::Script> script;
  v8::Local<v8::Value> outer, strip;
  bool ok = v8::Script::Compile(context, source, &origin).ToLocal(&script) &&
            script->Run(context).ToLocal(&outer) && outer->IsFunction() &&
            outer.As<v8::Function>()->Call(context, v8::Undefined(isolate), 0, nullptr)
                .ToLocal(&strip) &&
            strip->IsFunction();
  iso_error_kind why = entry_end(w, &e);
  if (!ok || why != ISO_OK) {
    v8::String::Utf8Value what(isolate, tc.Exception());
    char *msg = xasprintf("TypeScript: the type stripper failed to start: %s",
                          why == ISO_ERR_CPU      ? "CPU limit"
                          : why == ISO_ERR_MEMORY ? "memory limit"
                          : *what                 ? *what
                                                  : "unknown error");
    error_set(err, ISO_ERR_INTERNAL, msg);
    free(msg);
    return false;
  }
  s->strip.Reset(isolate, strip.As<v8::Function>());
  return true;
}
#endif

/* Runs amaro's module in a fresh blank worker: false with *err set. */
bool stripper_load(stripper *s, iso_error *err) {
#ifdef EDGENODE_AMARO_JS
  return in_context(s->w, [&](v8::Isolate *isolate, v8::Local<v8::Context> context) {
    return stripper_start(s, isolate, context, err);
  });
#else
  (void)s;
  error_set(err, ISO_ERR_SYNTAX,
            "TypeScript modules are not supported by this build: amaro was not found when it "
            "was built (deploy/setup.sh installs it)");
  return false;
#endif
}

stripper *stripper_get(iso_error *err) {
  if (current != nullptr) return current;
  stripper *s = new stripper();
  s->w = worker_blank(kStripMemoryMb, err);
  if (s->w == nullptr) {
    delete s;
    return nullptr;
  }
  bool ok = false;
  {
    mpk_scope inside(s->w);
    if (!guarded(s->w, [&]() { ok = stripper_load(s, err); }))
      error_set(err, ISO_ERR_INTERNAL, "TypeScript: the type stripper ran out of memory");
  }
  if (!ok) {
    stripper_free(s);
    return nullptr;
  }
  current = s;
  return s;
}

/* A refusal from amaro ([code, message, line, column]) as the load's error. */
void refused(v8::Isolate *isolate, v8::Local<v8::Context> context, v8::Local<v8::Array> why,
             const char *name, iso_error *err) {
  v8::Local<v8::Value> parts[4];
  for (uint32_t i = 0; i < 4; i++)
    if (!why->Get(context, i).ToLocal(&parts[i])) parts[i] = v8::Undefined(isolate);
  v8::String::Utf8Value code(isolate, parts[0]), message(isolate, parts[1]);
  int line = (int)parts[2]->NumberValue(context).FromMaybe(0);
  int column = (int)parts[3]->NumberValue(context).FromMaybe(0) + 1; /* amaro's are 0-based */
  bool syntax = *code && strcmp(*code, "InvalidSyntax") == 0;
  char *msg = xasprintf("%s%s (%s:%d:%d)", syntax ? "SyntaxError: " : "",
                        *message ? *message : "TypeScript could not be stripped", name, line, column);
  error_set(err, ISO_ERR_SYNTAX, msg);
  free(msg);
  err->module = xstrdup(name);
  err->line = line;
  err->column = column;
}

/* Strips one module's types into *out: false with *err set. */
bool strip_in(stripper *s, v8::Isolate *isolate, v8::Local<v8::Context> context,
              const iso_module *m, std::string *out, bool *broken, iso_error *err) {
  iso_worker *w = s->w;
  v8::Local<v8::String> source;
  if (m->source_len > (size_t)v8::String::kMaxLength ||
      !v8::String::NewFromUtf8(isolate, m->source ? m->source : "", v8::NewStringType::kNormal,
                               (int)m->source_len)
           .ToLocal(&source)) {
    error_set(err, ISO_ERR_SYNTAX, "module source is too long");
    err->module = xstrdup(m->name);
    return false;
  }
  v8::Local<v8::Value> argv[2] = {source, str(isolate, m->name)};
  entry e;
  entry_begin(w, &e, 0, (uint64_t)kStripCpuMs * 1000000u);
  v8::TryCatch tc(isolate);
  v8::Local<v8::Value> result;
  bool called = s->strip.Get(isolate)->Call(context, v8::Undefined(isolate), 2, argv).ToLocal(&result);
  iso_error_kind why = entry_end(w, &e);
  if (why != ISO_OK || !called) {
    *broken = true;
    char *msg = xasprintf("TypeScript: stripping the types of %s exceeded the stripper's %s", m->name,
                          why == ISO_ERR_MEMORY ? "memory limit (512 MB)" : "CPU limit (5000 ms)");
    error_set(err, why == ISO_ERR_MEMORY ? ISO_ERR_MEMORY : ISO_ERR_CPU, msg);
    free(msg);
    err->module = xstrdup(m->name);
    return false;
  }
  if (result->IsArray()) {
    refused(isolate, context, result.As<v8::Array>(), m->name, err);
    return false;
  }
  v8::String::Utf8Value code(isolate, result);
  out->assign(*code ? *code : "", *code ? (size_t)code.length() : 0);
  return true;
}

bool strip_one(stripper *s, const iso_module *m, std::string *out, bool *broken, iso_error *err) {
  return in_context(s->w, [&](v8::Isolate *isolate, v8::Local<v8::Context> context) {
    return strip_in(s, isolate, context, m, out, broken, err);
  });
}

std::string cache_key(const iso_module *m) {
  std::string key(m->name);
  key.push_back('\0');
  key.append(m->source ? m->source : "", m->source_len);
  return key;
}

void cache_put(std::string key, const std::string &code) {
  if (cache == nullptr) cache = new strip_cache();
  size_t size = key.size() + code.size();
  if (size > kCacheBytes / 4) return;
  while (cache->bytes + size > kCacheBytes && !cache->order.empty()) {
    auto it = cache->code.find(cache->order.front());
    cache->bytes -= it->first.size() + it->second.size();
    cache->code.erase(it);
    cache->order.pop_front();
  }
  cache->bytes += size;
  cache->order.push_back(key);
  cache->code.emplace(std::move(key), code);
}

}  // namespace

bool ts_strip_options(const iso_worker_options *o, ts_stripped *out, iso_error *err) {
  out->code.assign(o->n_modules, std::string());
  for (size_t i = 0; i < o->n_modules; i++) {
    const iso_module *m = &o->modules[i];
    if (m->name == nullptr || !ts_is_module_name(m->name)) continue;
    if (!ts_strip(m, &out->code[i], err)) return false;
    out->any = true;
  }
  if (!out->any) return true;
  out->modules.assign(o->modules, o->modules + o->n_modules);
  for (size_t i = 0; i < o->n_modules; i++) {
    if (o->modules[i].name == nullptr || !ts_is_module_name(o->modules[i].name)) continue;
    out->modules[i].source = out->code[i].data();
    out->modules[i].source_len = out->code[i].size();
  }
  out->options = *o;
  out->options.modules = out->modules.data();
  return true;
}

bool ts_is_module_name(const char *name) {
  size_t n = strlen(name);
  return (n > 3 && strcmp(name + n - 3, ".ts") == 0) || (n > 4 && strcmp(name + n - 4, ".mts") == 0);
}

bool ts_strip(const iso_module *m, std::string *out, iso_error *err) {
  std::string key = cache_key(m);
  if (cache != nullptr) {
    auto it = cache->code.find(key);
    if (it != cache->code.end()) {
      *out = it->second;
      return true;
    }
  }
  stripper *s = stripper_get(err);
  if (s == nullptr) {
    if (err->module == nullptr) err->module = xstrdup(m->name);
    return false;
  }
  bool ok = false, broken = false;
  s->last_used_ns = time_mono_ns();
  {
    mpk_scope inside(s->w);
    if (!guarded(s->w, [&]() { ok = strip_one(s, m, out, &broken, err); })) {
      broken = true;
      error_set(err, ISO_ERR_MEMORY, "TypeScript: the type stripper ran out of memory");
      err->module = xstrdup(m->name);
    }
  }
  if (broken) {
    current = nullptr;
    stripper_free(s);
  }
  if (ok) cache_put(std::move(key), *out);
  return ok;
}

}  // namespace iso

void iso_typescript_trim(uint64_t idle_ms) {
  using namespace iso;
  if (current == nullptr || time_mono_ns() - current->last_used_ns < idle_ms * 1000000u) return;
  stripper_free(current);
  current = nullptr;
  delete cache;
  cache = nullptr;
  log_info("TypeScript stripper let go after %llu s without a module to strip",
           (unsigned long long)(idle_ms / 1000));
}
