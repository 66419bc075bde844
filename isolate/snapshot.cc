/*
 * The startup snapshot: the runtime (the files in runtime/) is evaluated once per
 * process, in iso_platform_init(), and every worker's context is
 * deserialized from the result instead of running it again.
 *
 * The blob is built at process start rather than at build time: it is tied
 * to the exact libnode and to this process's addresses (external
 * references), and it never leaves the process, so nothing can hand V8 a
 * stale or corrupted one.
 *
 * What a snapshot cannot hold is made per context after deserialization (see
 * context_start() in create.cc): the worker pointer (embedder data), the
 * natives outside the core table (natives_add()), and the code-generation
 * switch.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

namespace iso {
namespace {

/* The runtime's text, shared by every isolate without a copy: its bytes
 * when they are ASCII, else a UTF-16 copy decoded once. Their addresses are
 * external references, so that the snapshot keeps the source external
 * instead of copying it into every isolate's heap. */
class runtime_latin1 final : public v8::String::ExternalOneByteStringResource {
 public:
  const char *data() const override { return (const char *)iso_runtime_js; }
  size_t length() const override { return iso_runtime_js_len; }
  void Dispose() override {}  /* static storage */
};

class runtime_utf16 final : public v8::String::ExternalStringResource {
 public:
  const uint16_t *data() const override { return text_; }
  size_t length() const override { return len_; }
  void Dispose() override {}  /* kept for the life of the process */
  void set(uint16_t *text, size_t len) {
    text_ = text;
    len_ = len;
  }

 private:
  uint16_t *text_ = nullptr;
  size_t len_ = 0;
};

runtime_latin1 latin1;
runtime_utf16 utf16;

v8::StartupData blob = {nullptr, 0};
std::vector<intptr_t> references;
size_t data_index[kSnapshotSlots];

bool runtime_is_ascii() {
  for (size_t i = 0; i < iso_runtime_js_len; i++)
    if (iso_runtime_js[i] >= 0x80)
      return false;
  return true;
}

v8::MaybeLocal<v8::String> runtime_source(v8::Isolate *isolate) {
  if (runtime_is_ascii())
    return v8::String::NewExternalOneByte(isolate, &latin1);
  if (utf16.data() == nullptr) {
    v8::Local<v8::String> s;
    if (!v8::String::NewFromUtf8(isolate, (const char *)iso_runtime_js, v8::NewStringType::kNormal,
                                 (int)iso_runtime_js_len)
             .ToLocal(&s))
      return {};
    uint16_t *text = (uint16_t *)xmalloc(sizeof(uint16_t) * ((size_t)s->Length() + 1));
    s->Write(isolate, text, 0, s->Length(), v8::String::NO_NULL_TERMINATION);
    utf16.set(text, (size_t)s->Length());
  }
  return v8::String::NewExternalTwoByte(isolate, &utf16);
}

std::string describe(v8::Isolate *isolate, v8::TryCatch &tc) {
  if (!tc.HasCaught())
    return "the runtime did not load";
  v8::Local<v8::Context> context = isolate->GetCurrentContext();
  v8::Local<v8::Value> stack;
  if (tc.Exception()->IsObject() &&
      tc.Exception().As<v8::Object>()->Get(context, str(isolate, "stack")).ToLocal(&stack) &&
      stack->IsString()) {
    v8::String::Utf8Value s(isolate, stack);
    return *s ? *s : "?";
  }
  v8::String::Utf8Value s(isolate, tc.Exception());
  return *s ? *s : "?";
}

/* Runs the runtime in `context`: *api gets what it returned, *native the
 * object it was given. */
bool runtime_run(v8::Local<v8::Context> context, v8::Local<v8::UnboundScript> script,
                 v8::Local<v8::Object> *native, v8::Local<v8::Object> *api, std::string *error) {
  v8::Isolate *isolate = context->GetIsolate();
  v8::TryCatch tc(isolate);
  v8::Local<v8::Value> fn, out;
  *native = native_new(context);
  if (native->IsEmpty() || !script->BindToCurrentContext()->Run(context).ToLocal(&fn) ||
      !fn->IsFunction()) {
    *error = describe(isolate, tc);
    return false;
  }
  v8::Local<v8::Value> arg = *native;
  if (!fn.As<v8::Function>()->Call(context, v8::Undefined(isolate), 1, &arg).ToLocal(&out) ||
      !out->IsObject()) {
    *error = describe(isolate, tc);
    return false;
  }
  *api = out.As<v8::Object>();
  isolate->PerformMicrotaskCheckpoint();
  return true;
}

bool api_get(v8::Local<v8::Context> context, v8::Local<v8::Object> api, const char *name,
             v8::Local<v8::Function> *out) {
  v8::Local<v8::Value> v;
  if (!api->Get(context, str(context->GetIsolate(), name)).ToLocal(&v) || !v->IsFunction())
    return false;
  *out = v.As<v8::Function>();
  return true;
}

/* The kind of handler the warm-up runs: the request path a hello worker
 * takes (Request, Headers, URL, Response, the body's text). */
const char kWarmHandler[] =
    "({ async fetch(request, env, ctx) {\n"
    "  const url = new URL(request.url);\n"
    "  const body = request.method === 'POST' ? await request.text() : '';\n"
    "  ctx.waitUntil(Promise.resolve());\n"
    "  const headers = { 'content-type': 'text/plain', 'x-path': url.pathname };\n"
    "  if (request.headers.get('accept') === 'application/json')\n"
    "    return Response.json({ body, q: url.searchParams.get('q') });\n"
    "  return new Response('hello ' + body, { headers });\n"
    "} })";

/* Runs a few requests in a throwaway context of the same isolate. Functions
 * are compiled once per script, not per context: what they compile here is
 * kept in the snapshot, so that a worker's first request does not compile
 * the request path again. Best effort: a failure only costs that. */
void warm_up(v8::Isolate *isolate, v8::Local<v8::UnboundScript> script) {
  v8::HandleScope handles(isolate);
  v8::Local<v8::Context> context = v8::Context::New(isolate);
  v8::Context::Scope context_scope(context);
  v8::TryCatch tc(isolate);
  v8::Local<v8::Object> native, api;
  v8::Local<v8::Function> set_handler, dispatch;
  std::string error;
  v8::Local<v8::Script> handler_script;
  v8::Local<v8::Value> handler;
  if (!runtime_run(context, script, &native, &api, &error) ||
      !api_get(context, api, "setHandler", &set_handler) ||
      !api_get(context, api, "dispatch", &dispatch) ||
      !v8::Script::Compile(context, str(isolate, kWarmHandler)).ToLocal(&handler_script) ||
      !handler_script->Run(context).ToLocal(&handler))
    return;
  v8::Local<v8::Value> args[3] = {handler, v8::Object::New(isolate), v8::Undefined(isolate)};
  if (set_handler->Call(context, v8::Undefined(isolate), 3, args).IsEmpty())
    return;
  static const char *const kinds[][3] = {
      {"GET", "http://warm.localhost/?q=1", "*/*"},
      {"POST", "http://warm.localhost/items", "application/json"},
  };
  for (int round = 0; round < 3; round++) {
    for (const auto &k : kinds) {
      v8::Local<v8::Value> headers[] = {str(isolate, "host"), str(isolate, "warm.localhost"),
                                        str(isolate, "accept"), str(isolate, k[2])};
      v8::Local<v8::Value> body = v8::Null(isolate);
      if (strcmp(k[0], "POST") == 0)
        body = v8::Uint8Array::New(v8::ArrayBuffer::New(isolate, 4), 0, 4);
      v8::Local<v8::Value> argv[5] = {v8::Number::New(isolate, 1), str(isolate, k[0]),
                                      str(isolate, k[1]), v8::Array::New(isolate, headers, 4),
                                      body};
      if (dispatch->Call(context, v8::Undefined(isolate), 5, argv).IsEmpty())
        return;
      isolate->PerformMicrotaskCheckpoint();
    }
  }
}

}  // namespace

bool snapshot_build(std::string *error) {
  if (blob.data != nullptr)
    return true;
  references.clear();
  for (const intptr_t *r = native_references(); *r != 0; r++)
    references.push_back(*r);
  references.push_back((intptr_t)&latin1);
  references.push_back((intptr_t)&utf16);
  references.push_back(0);

  v8::SnapshotCreator creator(references.data());
  v8::Isolate *isolate = creator.GetIsolate();
  {
    v8::HandleScope handles(isolate);
    v8::Local<v8::Context> context = v8::Context::New(isolate);
    v8::Context::Scope context_scope(context);
    v8::TryCatch tc(isolate);
    v8::Local<v8::String> text;
    v8::Local<v8::Script> compiled;
    v8::ScriptOrigin origin(isolate, str(isolate, kRuntimeName));
    if (!runtime_source(isolate).ToLocal(&text)) {
      *error = "the runtime's source is not valid UTF-8";
      return false;
    }
    v8::ScriptCompiler::Source source(text, origin);
    if (!v8::ScriptCompiler::Compile(context, &source).ToLocal(&compiled)) {
      *error = describe(isolate, tc);
      return false;
    }
    v8::Local<v8::UnboundScript> script = compiled->GetUnboundScript();
    v8::Local<v8::Object> native, api;
    v8::Local<v8::Function> fns[4];
    if (!runtime_run(context, script, &native, &api, error))
      return false;
    if (!api_get(context, api, "setHandler", &fns[0]) ||
        !api_get(context, api, "dispatch", &fns[1]) ||
        !api_get(context, api, "fireTimer", &fns[2]) ||
        !api_get(context, api, "installWasm", &fns[3])) {
      *error = "the runtime does not return setHandler, dispatch, fireTimer and installWasm";
      return false;
    }
    warm_up(isolate, script);
    v8::Local<v8::Function> warm_path;
    v8::Local<v8::Value> kept;
    {
      v8::TryCatch tc(isolate);  /* best effort, as warm_up() */
      if (api_get(context, api, "warmRequestPath", &warm_path) &&
          warm_path->Call(context, v8::Undefined(isolate), 0, nullptr).ToLocal(&kept)) {
        isolate->PerformMicrotaskCheckpoint();
        creator.AddData(context, kept);  /* never taken: it keeps the maps alive */
      }
    }
    data_index[kSlotSetHandler] = creator.AddData(context, fns[0]);
    data_index[kSlotDispatch] = creator.AddData(context, fns[1]);
    data_index[kSlotFireTimer] = creator.AddData(context, fns[2]);
    data_index[kSlotNative] = creator.AddData(context, native);
    data_index[kSlotInstallWasm] = creator.AddData(context, fns[3]);
    creator.SetDefaultContext(context);
  }
  /* Outside any HandleScope. Keeping the compiled functions makes the first
   * request of a worker cheapest. */
  blob = creator.CreateBlob(v8::SnapshotCreator::FunctionCodeHandling::kKeep);
  if (blob.data == nullptr || blob.raw_size <= 0) {
    *error = "V8 could not create the snapshot";
    return false;
  }
  return true;
}

v8::StartupData *snapshot_blob() {
  return &blob;
}

const intptr_t *snapshot_references() {
  return references.data();
}

size_t snapshot_index(snapshot_slot slot) {
  return data_index[slot];
}

}  // namespace iso
