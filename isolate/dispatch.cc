/*
 * Requests in a worker: dispatching them into the runtime, firing their
 * timers and completing their host calls (each one entry through run()),
 * the bookkeeping of the requests in flight, and their ends (the host's
 * respond and done, once each). Also what the host may ask about them.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

namespace iso {

iso_worker *worker_of(v8::Local<v8::Context> context) {
  /* The snapshot's own contexts never had the slot: reading past the end
   * is not checked by V8. */
  if (context->GetNumberOfEmbedderDataFields() <= (uint32_t)kWorkerSlot)
    return nullptr;
  return static_cast<iso_worker *>(context->GetAlignedPointerFromEmbedderData(kWorkerSlot));
}

/* ---- requests in flight ---- */

namespace {

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
  if (!w->drains.empty())
    w->drains.erase(token);  /* its stream will not go on */
  w->finishing = &finished;
  w->host.done(w->host.data, token);
  w->finishing = outer;
}

/* The request whose code ran last: promise reactions carry the token that
 * was current when they were registered (V8's continuation-preserved
 * embedder data), so a continuation of request A run while the host entered
 * for request B is still A's. */
uint64_t running_token_read(iso_worker *w, v8::Local<v8::Context> context) {
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
  w->pending.push_back(pending_request{token, false, false, 0, w->array_buffers->refusals()});
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
  run_settle(w, context, token, call_id, ok, value, value_len);
}

}  // namespace
}  // namespace iso

using namespace iso;

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

int iso_worker_broken(const iso_worker *w) {
  return w->broken || w->retiring ? 1 : 0;
}


/* Only its address matters: iso_request.body == ISO_BODY_STREAMED. */
const uint8_t iso_body_streamed_marker[1] = {0};

