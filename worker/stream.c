/*
 * Streamed bodies, in both directions.
 *
 * Responses: when a fetch handler returns a Response whose body is a
 * ReadableStream still being produced, the status and headers go out at once
 * and each chunk as it comes, through the isolate's iso_host_stream
 * callbacks (stream_response_host()): start sends the head, chunked or with a
 * Content-Length when the stream announced its length (a FixedLengthStream's
 * body); write queues a chunk and, when the client is behind, waits for the
 * connection to drain before iso_worker_stream_drained() lets the runtime
 * write on; end completes the body and abort cuts it short. Only requests
 * that came in through the ingress can stream; anything else (dynamic
 * workers, one-shot runs) gives the isolate no stream callbacks and the
 * runtime buffers the body as before.
 *
 * Requests: a large or chunked request body (http.h: body_streamed) is read
 * by request.body as it arrives, through host calls on the runtime's own
 * binding " request" (a name no deployed binding can have: those are
 * identifiers):
 *   read(token)   sync: bytes, null at the end, false when none are there yet
 *   wait(token)   async: resolves once read() has something to say
 * The token is the one the body belongs to, so a stream read from another
 * request's code still reads its own request's body.
 */
#include <stdio.h>
#include <string.h>

#include "base.h"
#include "sandbox.h"

/* A response waiting for its connection to drain (response_write), or a
 * wait() promise. */
typedef struct stream_wait {
  sched_unit unit;
  sandbox *loaded;
  uint64_t token;
  uint32_t call_id;
  int status;
  int resolve_always; /* wait(): the next read() tells what happened */
} stream_wait;

static const char *const closed_error = "the client closed the connection";

static int fail(iso_wire *result, const char *message) {
  sandbox_call_error(result, "TypeError", message);
  return -1;
}

static void wait_run(sched_unit *u);
static void on_ready(void *arg, int status);

/* ---- responses (iso_host_stream) ---- */

/* The ingress request `token` names, still waiting for (part of) its response. */
static sandbox_request *response_request(sandbox *l, uint64_t token) {
  sandbox_request *f = sandbox_request_of(l->w, token);
  if (f == NULL || f->sb != l || f->req == NULL) return NULL;
  return f;
}

static int response_start(void *data, uint64_t token, const iso_response *head, int64_t length) {
  sandbox_request *f = response_request(data, token);
  if (f == NULL) return -1;
  /* Declined after a failed gate: respond then answers the error. */
  if (facet_link_gate(data) < 0) return -1;
  http_header stack[16];
  size_t n = 0;
  http_header *hs = sandbox_http_headers(data, head, stack, ARRAY_SIZE(stack), &n);
  f->status = head->status;
  int rc = http_respond_start(f->req, head->status, hs, n, length);
  sandbox_http_headers_free(hs, n, stack);
  return rc == 0 ? 0 : -1;
}

static int response_write(void *data, uint64_t token, const uint8_t *bytes, size_t len,
                          const char **error) {
  sandbox *l = data;
  sandbox_request *f = response_request(l, token);
  if (f == NULL) {
    *error = "this request has no client to stream to";
    return -1;
  }
  if (facet_link_gate(l) < 0) {
    *error = "the worker's writes could not be stored";
    return -1;
  }
  int rc = http_respond_write(f->req, bytes, len);
  if (rc == UV_E2BIG) {
    *error = "the response body is longer than its announced length";
    return -1;
  }
  if (rc < 0) {
    *error = closed_error;
    return -1;
  }
  if (rc == 0) return 0;
  /* Behind: the runtime waits until the connection has drained. */
  stream_wait *d = xcalloc(1, sizeof *d);
  d->unit.run = wait_run;
  d->loaded = l;
  d->token = token;
  if (http_respond_on_drain(f->req, on_ready, d) != 0) {
    free(d);
    *error = closed_error;
    return -1;
  }
  /* Keeps this version alive until the drain has run. */
  l->units++;
  return 1;
}

static void response_end(void *data, uint64_t token) {
  sandbox_request *f = response_request(data, token);
  if (f == NULL) return;
  http_request *req = f->req;
  f->req = NULL;
  if (facet_link_gate(data) < 0) {
    log_write(LOG_ERROR, f->tenant->name, f->request_id, NULL,
              "the worker's writes could not be stored; the response was cut short");
    f->status = 500;
    http_respond_abort(req);
    return;
  }
  if (http_respond_end(req) == UV_EPROTO) {
    /* The runtime's FixedLengthStream checks its count before it closes:
     * the client saw a cut connection, so the request failed. */
    log_write(LOG_ERROR, f->tenant->name, f->request_id, NULL,
              "response body ended short of its Content-Length; the connection was closed");
    f->status = 500;
  }
}

static void response_abort(void *data, uint64_t token, const char *message, size_t len) {
  sandbox_request *f = response_request(data, token);
  if (f == NULL) return;
  log_write(LOG_ERROR, f->tenant->name, f->request_id, NULL,
            "response body failed after its head was sent: %.*s", (int)len, message);
  http_request *req = f->req;
  f->req = NULL;
  /* The client got a status it cannot trust: count the request as failed. */
  f->status = 500;
  http_respond_abort(req);
}

const iso_host_stream *stream_response_host(void) {
  static const iso_host_stream host = {
      .start = response_start,
      .write = response_write,
      .end = response_end,
      .abort = response_abort,
  };
  return &host;
}

/* ---- request bodies (the " request" binding) ---- */

/* The request whose body a read() or wait() is for: its token is the first argument. */
static sandbox_request *body_request(worker *w, sandbox *l, const iso_call *call) {
  iso_wire_reader args;
  iso_wire_value v;
  iso_wire_reader_init(&args, call->args, call->args_len);
  if (iso_wire_next(&args, &v) != 1 || v.type != ISO_WIRE_ARRAY || v.count < 1 ||
      iso_wire_next(&args, &v) != 1 || v.type != ISO_WIRE_NUMBER || v.number < 1)
    return NULL;
  sandbox_request *f = id_map_get(&w->tokens, (uint64_t)v.number);
  if (f == NULL || f->sb != l || f->req == NULL || !f->req->body_streamed) return NULL;
  return f;
}

static int body_error(worker *w, iso_wire *result, int rc) {
  if (rc == UV_E2BIG) {
    char message[96];
    snprintf(message, sizeof message, "The request body is larger than the node's limit of %zu bytes",
             w->config.max_body_bytes);
    return fail(result, message);
  }
  if (rc == UV_EPROTO) return fail(result, "The request body is malformed (chunked coding)");
  if (rc == UV_ETIMEDOUT) return fail(result, "The request body stopped arriving");
  return fail(result, "The client closed the connection before its request body was complete");
}

static int body_read(worker *w, sandbox *l, const iso_call *call, iso_wire *result) {
  sandbox_request *f = body_request(w, l, call);
  if (f == NULL) return fail(result, "The request body can no longer be read: the response was sent");
  const uint8_t *data = NULL;
  int rc = http_request_body_read(f->req, &data);
  if (rc > 0) iso_wire_bytes(result, data, (size_t)rc);
  else if (rc == 0) iso_wire_null(result);
  else if (rc == UV_EAGAIN) iso_wire_bool(result, 0);
  else return body_error(w, result, rc);
  return 0;
}

int stream_link_call_sync(worker *w, sandbox *l, const iso_call *call, iso_wire *result) {
  if (strcmp(call->op, "read") == 0) return body_read(w, l, call, result);
  return fail(result, "unknown request body operation");
}

/* The isolate's turn: let the response go on, or settle the wait() promise. */
static void wait_run(sched_unit *u) {
  stream_wait *d = container_of(u, stream_wait, unit);
  sandbox *l = d->loaded;
  l->units--;
  sandbox_request *f = sandbox_request_of(l->w, d->token);
  sandbox_enter(l);
  if (f != NULL && f->sb == l && !d->resolve_always) {
    iso_worker_stream_drained(l->iso, d->token, d->status == 0 ? NULL : closed_error);
  } else if (f != NULL && f->sb == l) {
    iso_wire v;
    iso_wire_init(&v);
    int ok = d->status == 0 || d->resolve_always;
    if (ok) iso_wire_undefined(&v);
    else sandbox_call_error(&v, "TypeError", "the client closed the connection");
    iso_worker_complete(l->iso, d->token, d->call_id, ok, v.data, v.len);
    iso_wire_free(&v);
  }
  free(d);
  sandbox_leave(l);
}

/* From the connection (progress or close), possibly with another isolate
 * on the stack: the completion waits for this isolate's turn. */
static void on_ready(void *arg, int status) {
  stream_wait *d = arg;
  d->status = status;
  sched_submit(&d->loaded->w->sched, &d->loaded->queue, &d->unit);
}

int stream_link_call_async(worker *w, sandbox *l, const iso_call *call, iso_wire *result) {
  sandbox_request *f = body_request(w, l, call);
  if (f == NULL) return fail(result, "this request has no client to stream to");
  if (strcmp(call->op, "wait") != 0) return fail(result, "unknown stream operation");
  stream_wait *d = xcalloc(1, sizeof *d);
  d->unit.run = wait_run;
  d->loaded = l;
  d->token = call->token;
  d->call_id = call->call_id;
  d->resolve_always = 1;
  int rc = http_request_body_wait(f->req, on_ready, d);
  if (rc != 0) {
    free(d);
    return fail(result, "the client closed the connection");
  }
  /* Keeps this version alive until the completion has run. */
  l->units++;
  return 0;
}

int stream_owns_unit(const sched_unit *u) { return u->run == wait_run; }

void stream_unit_dropped(sched_unit *u) {
  stream_wait *d = container_of(u, stream_wait, unit);
  d->loaded->units--;
  free(d);
}
