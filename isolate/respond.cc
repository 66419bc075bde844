/*
 * How a response leaves a worker: the respond native, which hands the host
 * a whole response (iso_host.respond), and the natives of a streamed one
 * (iso_host_stream): respondStart sends the head, respondWrite each chunk,
 * with a promise to wait for when the client is behind (settled by
 * iso_worker_stream_drained()), and respondEnd or respondAbort finish the
 * body. The runtime's 99-entry.js decides which way a Response goes.
 *
 * A streamed request stays pending, and respond owed, until its body is
 * over: a limit hit while it streams fails it through respond as any
 * other, and from then on the stream natives find no client.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

namespace iso {
namespace {

using Info = v8::FunctionCallbackInfo<v8::Value>;

/* What a stream native says when the request has no stream (any more). */
constexpr const char *kNoStream = "this request has no client to stream to";

inline iso_worker *worker(const Info &info) {
  return worker_of(info.GetIsolate()->GetCurrentContext());
}

void throw_type_error(v8::Isolate *isolate, const char *msg) {
  isolate->ThrowException(v8::Exception::TypeError(str(isolate, msg)));
}

/* Appends a string to `out`: Latin-1 when every character fits in a byte (the
 * ByteString convention of HTTP headers), UTF-8 otherwise. Returns its length. */
size_t append_bytes(v8::Isolate *isolate, scratch *out, v8::Local<v8::String> s) {
  int n = s->Length();
  if (n == 0)
    return 0;
  if (s->IsOneByte() || s->ContainsOnlyOneByte()) {
    char *dst = out->reserve((size_t)n);
    s->WriteOneByte(isolate, (uint8_t *)dst, 0, n, v8::String::NO_NULL_TERMINATION);
    out->len += (size_t)n;
    return (size_t)n;
  }
  size_t len = (size_t)s->Utf8Length(isolate);
  char *dst = out->reserve(len);
  s->WriteUtf8(isolate, dst, (int)len, nullptr,
               v8::String::NO_NULL_TERMINATION | v8::String::REPLACE_INVALID_UTF8);
  out->len += len;
  return len;
}

size_t append_utf8(v8::Isolate *isolate, scratch *out, v8::Local<v8::String> s) {
  size_t len = (size_t)s->Utf8Length(isolate);
  if (len == 0)
    return 0;
  char *dst = out->reserve(len);
  s->WriteUtf8(isolate, dst, (int)len, nullptr,
               v8::String::NO_NULL_TERMINATION | v8::String::REPLACE_INVALID_UTF8);
  out->len += len;
  return len;
}

/* Appends the flat [name, value, ...] array to `buf` and `headers`; the
 * header pointers are set by headers_fix() once the buffer stops moving. */
bool headers_collect(v8::Isolate *isolate, v8::Local<v8::Context> context, v8::Local<v8::Array> flat,
                     scratch *buf, std::vector<iso_header> *headers) {
  uint32_t n = flat->Length();
  for (uint32_t i = 0; i + 1 < n; i += 2) {
    v8::Local<v8::Value> name, value;
    if (!flat->Get(context, i).ToLocal(&name) || !flat->Get(context, i + 1).ToLocal(&value))
      return false;
    if (!name->IsString() || !value->IsString()) {
      throw_type_error(isolate, "header names and values must be strings");
      return false;
    }
    iso_header h = {nullptr, 0, nullptr, 0};
    h.name_len = append_bytes(isolate, buf, name.As<v8::String>());
    h.value_len = append_bytes(isolate, buf, value.As<v8::String>());
    headers->push_back(h);
  }
  return true;
}

void headers_fix(char *base, std::vector<iso_header> *headers) {
  for (iso_header &h : *headers) {
    h.name = base;
    h.value = base + h.name_len;
    base += h.name_len + h.value_len;
  }
}

/* Takes the worker's reusable head buffers (a host callback may re-enter
 * and respond meanwhile), and gives them back. */
struct head_buffers {
  iso_worker *w;
  scratch buf;
  std::vector<iso_header> headers;
  explicit head_buffers(iso_worker *worker)
      : w(worker), buf(worker->out), headers(std::move(worker->out_headers)) {
    w->out = scratch{};
    buf.len = 0;
    headers.clear();
  }
  ~head_buffers() {
    free(w->out.data);
    w->out = buf;
    w->out_headers = std::move(headers);
  }
};

/* The request `token` streams a response for, or null with a TypeError
 * thrown: none, or its stream is over (ended, aborted, or the request
 * failed). Not kept across a host callback: the host may re-enter. */
pending_request *streaming(iso_worker *w, v8::Isolate *isolate, v8::Local<v8::Value> v,
                           uint64_t *token) {
  if (!to_token(isolate, v, token))
    return nullptr;
  pending_request *p = w != nullptr && !w->free_requested ? pending_find(w, *token) : nullptr;
  if (p == nullptr || !p->streaming || p->responded) {
    throw_type_error(isolate, kNoStream);
    return nullptr;
  }
  return p;
}

/* The stream is over: no callback of it, nor respond, comes for it again. */
void stream_over(pending_request *p) {
  p->streaming = false;
  p->responded = true;
}

struct drained_call {
  iso_worker *w;
  v8::Local<v8::Context> context;
  uint64_t token;
  const char *error;
};

bool drained_settle(void *arg) {
  drained_call *d = static_cast<drained_call *>(arg);
  v8::Isolate *isolate = d->w->isolate;
  auto it = d->w->drains.find(d->token);
  if (it == d->w->drains.end())
    return true;
  v8::Local<v8::Promise::Resolver> resolver = it->second.Get(isolate);
  d->w->drains.erase(it);
  if (d->error == nullptr)
    return resolver->Resolve(d->context, v8::Undefined(isolate)).IsJust();
  return resolver->Reject(d->context, v8::Exception::TypeError(str(isolate, d->error))).IsJust();
}

void worker_drained(iso_worker *w, uint64_t token, const char *error) {
  v8::Isolate *isolate = w->isolate;
  v8::Isolate::Scope isolate_scope(isolate);
  v8::HandleScope handles(isolate);
  v8::Local<v8::Context> context = w->context.Get(isolate);
  v8::Context::Scope context_scope(context);
  drained_call d = {w, context, token, error};
  run_call(w, context, token, drained_settle, &d);
}

}  // namespace

/* respond(token, status, headers, body) */
void respond_whole(const Info &info) {
  iso_worker *w = worker(info);
  if (w == nullptr)
    return;
  v8::Isolate *isolate = info.GetIsolate();
  v8::Local<v8::Context> context = isolate->GetCurrentContext();
  uint64_t token;
  if (!to_token(isolate, info[0], &token))
    return;
  if (!info[1]->IsInt32() || !info[2]->IsArray()) {
    throw_type_error(isolate, "respond(token, status, headers, body)");
    return;
  }
  /* Taken, not borrowed: a host callback may re-enter and respond meanwhile. */
  scratch buf = w->out;
  std::vector<iso_header> headers = std::move(w->out_headers);
  w->out = scratch{};
  buf.len = 0;
  headers.clear();

  iso_response res = {info[1].As<v8::Int32>()->Value(), nullptr, 0, nullptr, 0};
  uint8_t *body = nullptr;
  bool ok = headers_collect(isolate, context, info[2].As<v8::Array>(), &buf, &headers);
  size_t body_at = buf.len;
  if (ok && info[3]->IsString()) {
    res.body_len = append_utf8(isolate, &buf, info[3].As<v8::String>());
    body = res.body_len ? (uint8_t *)buf.data + body_at : nullptr;
  } else if (ok && !info[3]->IsNullOrUndefined() && !view_bytes(info[3], &body, &res.body_len)) {
    throw_type_error(isolate, "the body must be a Uint8Array, a string or null");
    ok = false;
  }
  if (ok && !heap_check(w)) {
    /* The response is not given: the limit answers for it, now, before
     * the runtime's code after this call could end the request first. */
    iso_error err = {};
    error_set(&err, ISO_ERR_MEMORY, "exceeded memory limit");
    request_respond(w, token, nullptr, &err);
    iso_error_clear(&err);
  } else if (ok) {
    headers_fix(buf.data, &headers);
    res.headers = headers.data();
    res.n_headers = headers.size();
    res.body = res.body_len ? body : nullptr;
    request_respond(w, token, &res, nullptr);
  }
  free(w->out.data);
  w->out = buf;
  w->out_headers = std::move(headers);
}

/* respondStart(token, status, headers, length) -> true when the body is to
 * be streamed (respondWrite...), false when it goes to respond whole. */
void respond_start(const Info &info) {
  iso_worker *w = worker(info);
  v8::Isolate *isolate = info.GetIsolate();
  info.GetReturnValue().Set(false);
  if (w == nullptr || w->host_stream.start == nullptr || w->free_requested)
    return;
  uint64_t token;
  if (!to_token(isolate, info[0], &token))
    return;
  if (!info[1]->IsInt32() || !info[2]->IsArray()) {
    throw_type_error(isolate, "respondStart(token, status, headers, length)");
    return;
  }
  pending_request *p = pending_find(w, token);
  if (p == nullptr || p->responded || p->streaming)
    return;
  /* A FixedLengthStream's body announces its length (Content-Length). */
  int64_t length = -1;
  if (info[3]->IsNumber()) {
    double d = info[3].As<v8::Number>()->Value();
    if (d >= 0 && d <= 9007199254740991.0 && d == (double)(int64_t)d)
      length = (int64_t)d;
  }
  int rc;
  {
    head_buffers head(w);
    if (!headers_collect(isolate, isolate->GetCurrentContext(), info[2].As<v8::Array>(),
                         &head.buf, &head.headers))
      return;
    headers_fix(head.buf.data, &head.headers);
    iso_response res = {info[1].As<v8::Int32>()->Value(), head.headers.data(),
                        head.headers.size(), nullptr, 0};
    rc = w->host_stream.start(w->host.data, token, &res, length);
  }
  if (rc != 0 || w->free_requested || (p = pending_find(w, token)) == nullptr || p->responded)
    return;
  p->streaming = true;
  info.GetReturnValue().Set(true);
}

/* respondWrite(token, bytes) -> undefined, or when the client is behind a
 * promise to wait for before the next write (rejected when it went away). */
void respond_write(const Info &info) {
  iso_worker *w = worker(info);
  v8::Isolate *isolate = info.GetIsolate();
  uint64_t token;
  if (streaming(w, isolate, info[0], &token) == nullptr)
    return;
  uint8_t *data;
  size_t len;
  if (!view_bytes(info[1], &data, &len)) {
    throw_type_error(isolate, "a response chunk must be bytes");
    return;
  }
  const char *error = nullptr;
  int rc = w->host_stream.write(w->host.data, token, data, len, &error);
  if (rc < 0) {
    throw_type_error(isolate, error != nullptr ? error : "the response body cannot be written");
    return;
  }
  if (rc != 1 || w->free_requested)
    return;
  v8::Local<v8::Context> context = isolate->GetCurrentContext();
  v8::Local<v8::Promise::Resolver> resolver;
  if (!v8::Promise::Resolver::New(context).ToLocal(&resolver))
    return;
  w->drains[token].Reset(isolate, resolver);
  info.GetReturnValue().Set(resolver->GetPromise());
}

/* respondEnd(token): the body is complete. */
void respond_end(const Info &info) {
  iso_worker *w = worker(info);
  uint64_t token;
  pending_request *p = streaming(w, info.GetIsolate(), info[0], &token);
  if (p == nullptr)
    return;
  stream_over(p);
  w->host_stream.end(w->host.data, token);
}

/* respondAbort(token, message): the body failed after its head went out. */
void respond_abort(const Info &info) {
  iso_worker *w = worker(info);
  v8::Isolate *isolate = info.GetIsolate();
  uint64_t token;
  pending_request *p = streaming(w, isolate, info[0], &token);
  if (p == nullptr)
    return;
  stream_over(p);
  static const char kUnknown[] = "unknown";
  if (info[1]->IsString()) {
    v8::String::Utf8Value message(isolate, info[1]);
    if (*message != nullptr) {
      w->host_stream.abort(w->host.data, token, *message, (size_t)message.length());
      return;
    }
  }
  w->host_stream.abort(w->host.data, token, kUnknown, sizeof(kUnknown) - 1);
}

}  // namespace iso

using namespace iso;

void iso_worker_stream_drained(iso_worker *w, uint64_t token, const char *error) {
  if (w == nullptr || w->broken || w->free_requested || w->drains.count(token) == 0)
    return;
  mpk_scope inside(w);  /* outlives the guard, which may free w */
  call_guard guard(w);
  guarded(w, [&]() { worker_drained(w, token, error); });
}
