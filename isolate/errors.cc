/*
 * Turning JavaScript exceptions into iso_error.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

namespace iso {

v8::Local<v8::String> str(v8::Isolate *isolate, const char *s, size_t len) {
  v8::Local<v8::String> out;
  if (len > (size_t)v8::String::kMaxLength ||
      !v8::String::NewFromUtf8(isolate, s, v8::NewStringType::kNormal, (int)len).ToLocal(&out))
    return v8::String::Empty(isolate);
  return out;
}

v8::Local<v8::String> str(v8::Isolate *isolate, const char *s) {
  return str(isolate, s, strlen(s));
}

/* A heap copy of a string value's UTF-8; NULL for anything else. */
char *dup_value(v8::Isolate *isolate, v8::Local<v8::Value> value) {
  if (value.IsEmpty() || !value->IsString())
    return nullptr;
  v8::String::Utf8Value utf8(isolate, value);
  return *utf8 == nullptr ? nullptr : xstrndup(*utf8, utf8.length());
}

void error_set(iso_error *err, iso_error_kind kind, const char *message) {
  iso_error_clear(err);
  err->kind = kind;
  err->message = xstrdup(message);
}

namespace {

bool is_tenant_module(iso_worker *w, v8::Isolate *isolate, v8::Local<v8::Value> name) {
  if (name.IsEmpty() || !name->IsString())
    return false;
  v8::String::Utf8Value utf8(isolate, name);
  if (*utf8 == nullptr)
    return false;
  for (const module_entry &m : w->modules)
    if (m.name.size() == (size_t)utf8.length() && memcmp(m.name.data(), *utf8, m.name.size()) == 0)
      return true;
  return false;
}

/* String(exception), which may itself throw or be terminated. */
char *describe(v8::Isolate *isolate, v8::Local<v8::Context> context, v8::Local<v8::Value> exc) {
  v8::TryCatch tc(isolate);
  v8::Local<v8::String> s;
  if (exc->ToString(context).ToLocal(&s) || exc->ToDetailString(context).ToLocal(&s))
    return dup_value(isolate, s);
  return nullptr;
}

char *stack_of(v8::Isolate *isolate, v8::Local<v8::Context> context, v8::Local<v8::Value> exc) {
  if (!exc->IsObject())
    return nullptr;
  v8::TryCatch tc(isolate);
  v8::Local<v8::Value> stack;
  if (!exc.As<v8::Object>()->Get(context, str(isolate, "stack")).ToLocal(&stack))
    return nullptr;
  return dup_value(isolate, stack);
}

/* The innermost frame in the tenant's own code, from the detailed stack
 * trace V8 captured when the error was created. */
bool locate_in_stack(iso_worker *w, v8::Isolate *isolate, v8::Local<v8::Value> exc,
                     iso_error *err) {
  v8::Local<v8::StackTrace> trace = v8::Exception::GetStackTrace(exc);
  if (trace.IsEmpty())
    return false;
  for (int i = 0; i < trace->GetFrameCount(); i++) {
    v8::Local<v8::StackFrame> frame = trace->GetFrame(isolate, (uint32_t)i);
    v8::Local<v8::String> name = frame->GetScriptName();
    if (!is_tenant_module(w, isolate, name))
      continue;
    err->module = dup_value(isolate, name);
    err->line = frame->GetLineNumber();
    err->column = frame->GetColumn();
    return true;
  }
  return false;
}

void locate_in_message(iso_worker *w, v8::Isolate *isolate, v8::Local<v8::Context> context,
                       v8::Local<v8::Message> message, iso_error *err) {
  v8::Local<v8::Value> name = message->GetScriptResourceName();
  if (!is_tenant_module(w, isolate, name))
    return;
  err->module = dup_value(isolate, name);
  err->line = message->GetLineNumber(context).FromMaybe(0);
  err->column = message->GetStartColumn(context).FromMaybe(-1) + 1;
}

}  // namespace

void error_from_exception(iso_worker *w, v8::Local<v8::Context> context, iso_error_kind kind,
                          v8::Local<v8::Value> exception, v8::Local<v8::Message> message,
                          iso_error *err) {
  v8::Isolate *isolate = context->GetIsolate();
  iso_error_clear(err);
  err->kind = kind;
  err->message = describe(isolate, context, exception);
  if (err->message == nullptr)
    err->message = xstrdup("uncaught exception");
  err->stack = stack_of(isolate, context, exception);
  if (locate_in_stack(w, isolate, exception, err))
    return;
  if (message.IsEmpty())
    message = v8::Exception::CreateMessage(isolate, exception);
  if (!message.IsEmpty())
    locate_in_message(w, isolate, context, message, err);
}

void error_from_try_catch(iso_worker *w, v8::Local<v8::Context> context, iso_error_kind kind,
                          v8::TryCatch &tc, iso_error *err) {
  if (tc.HasTerminated() || !tc.HasCaught()) {
    error_set(err, ISO_ERR_INTERNAL, "execution terminated");
    return;
  }
  error_from_exception(w, context, kind, tc.Exception(), tc.Message(), err);
}

}  // namespace iso

void iso_error_clear(iso_error *err) {
  if (err == nullptr)
    return;
  free(err->message);
  free(err->module);
  free(err->stack);
  memset(err, 0, sizeof(*err));
}
