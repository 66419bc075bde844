/*
 * The extra natives (natives.h): registration, and helpers too small for a
 * file of their own.
 */
#include "internal.h"
#include "natives.h"

namespace iso {
namespace {

using Info = v8::FunctionCallbackInfo<v8::Value>;

/* detachArrayBuffer(ab): structuredClone's transfer list. The clone holds a
 * copy; the original becomes a zero-length, detached buffer. */
void natives_detach(const Info &info) {
  v8::Isolate *isolate = info.GetIsolate();
  if (!info[0]->IsArrayBuffer() || !info[0].As<v8::ArrayBuffer>()->IsDetachable()) {
    isolate->ThrowException(v8::Exception::TypeError(str(isolate, "expected a detachable ArrayBuffer")));
    return;
  }
  info[0].As<v8::ArrayBuffer>()->Detach();
}

}  // namespace

bool natives_set(v8::Local<v8::Context> context, v8::Local<v8::Object> target, const char *name,
                 v8::FunctionCallback fn) {
  v8::Isolate *isolate = context->GetIsolate();
  v8::Local<v8::FunctionTemplate> t = v8::FunctionTemplate::New(
      isolate, fn, v8::Local<v8::Value>(), v8::Local<v8::Signature>(), 0,
      v8::ConstructorBehavior::kThrow);
  v8::Local<v8::Function> f;
  v8::Local<v8::String> key = str(isolate, name);
  if (!t->GetFunction(context).ToLocal(&f) || target->Set(context, key, f).IsNothing())
    return false;
  f->SetName(key);
  return true;
}

bool natives_add(v8::Local<v8::Context> context, v8::Local<v8::Object> native) {
  return crypto_natives_add(context, native) && compress_natives_add(context, native) &&
         python_natives_add(context, native) &&
         natives_set(context, native, "detachArrayBuffer", natives_detach);
}

}  // namespace iso
