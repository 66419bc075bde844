/*
 * Streamed bodies, in both directions, through host calls on two bindings of
 * the runtime's own (names no deployed binding can have: those are
 * identifiers).
 *
 * " response": when a fetch handler returns a Response whose body is a
 * ReadableStream still being produced, the status and headers go out at once
 * and each chunk as it comes:
 *   start(status, [name, value, ...], length)
 *                                      sync: the head goes out, chunked, or
 *                                      with a Content-Length when length >= 0
 *                                      (a FixedLengthStream's body)
 *   write(bytes)                       sync: true when the client is behind
 *   drain()                            async: resolves once it caught up
 *   end()                              sync: the body is complete
 *   abort(message)                     sync: the body failed; cut it short
 * Only requests that came in through the ingress can stream; anything else
 * (dynamic workers, one-shot runs) gets an error from start() and the
 * runtime buffers the body as before.
 *
 * " request": a large or chunked request body (http.h: body_streamed) is
 * read by request.body as it arrives:
 *   read(token)   sync: bytes, null at the end, false when none are there yet
 *   wait(token)   async: resolves once read() has something to say
 * The token is the one the body belongs to, so a stream read from another
 * request's code still reads its own request's body.
 */
#include <stdio.h>
#include <string.h>

#include "base.h"
#include "sandbox.h"

/* A drain() or wait() promise waiting for the connection. */
typedef struct stream_wait {
  sched_unit unit;
  sandbox *loaded;
  uint64_t token;
  uint32_t call_id;
  int status;
  int resolve_always; /* wait(): the next read() tells what happened */
} stream_wait;

static int fail(iso_wire *result, const char *message) {
  sandbox_call_error(result, "TypeError", message);
  return -1;
}

/* The ingress request a call speaks for, still waiting for (part of) its response. */
static sandbox_request *stream_request(worker *w, sandbox *l, const iso_call *call) {
  sandbox_request *f = id_map_get(&w->tokens, call->token);
  if (f == NULL || f->sb != l || f->req == NULL) return NULL;
  return f;
}

static int start(sandbox_request *f, iso_wire_reader *args, iso_wire *result) {
  iso_wire_value status, list, v;
  if (iso_wire_next(args, &status) != 1 || status.type != ISO_WIRE_NUMBER ||
      iso_wire_next(args, &list) != 1 || list.type != ISO_WIRE_ARRAY || list.count % 2 != 0)
    return fail(result, "malformed response head");
  size_t n = list.count / 2;
  http_header *hs = xcalloc(n ? n : 1, sizeof *hs);
  int rc = 0;
  for (size_t i = 0; i < list.count && rc == 0; i++) {
    if (iso_wire_next(args, &v) != 1 || v.type != ISO_WIRE_STRING) {
      rc = -1;
      break;
    }
    char *text = xstrndup(v.ptr, v.len);
    if (i % 2 == 0) hs[i / 2].name = text;
    else hs[i / 2].value = text;
  }
  /* A FixedLengthStream's body announces its length (Content-Length). */
  int64_t length = -1;
  if (rc == 0 && iso_wire_next(args, &v) == 1 && v.type == ISO_WIRE_NUMBER && v.number >= 0 &&
      v.number <= 9007199254740991.0 && v.number == (double)(int64_t)v.number)
    length = (int64_t)v.number;
  if (rc == 0) {
    int code = (int)status.number;
    f->status = code;
    if (http_respond_start(f->req, code, hs, n, length) != 0) rc = -2;
  }
  for (size_t i = 0; i < n; i++) {
    free(hs[i].name);
    free(hs[i].value);
  }
  free(hs);
  if (rc == -1) return fail(result, "malformed response headers");
  if (rc == -2) return fail(result, "the response cannot be streamed");
  iso_wire_undefined(result);
  return 0;
}

static int write_chunk(sandbox_request *f, iso_wire_reader *args, iso_wire *result) {
  iso_wire_value bytes;
  if (iso_wire_next(args, &bytes) != 1 || bytes.type != ISO_WIRE_BYTES)
    return fail(result, "a response chunk must be bytes");
  int rc = http_respond_write(f->req, bytes.ptr, bytes.len);
  if (rc == UV_E2BIG) return fail(result, "the response body is longer than its announced length");
  if (rc < 0) return fail(result, "the client closed the connection");
  iso_wire_bool(result, rc == 1);
  return 0;
}

static void end(sandbox_request *f, iso_wire *result) {
  http_request *req = f->req;
  f->req = NULL;
  if (http_respond_end(req) == UV_EPROTO) {
    /* The runtime's FixedLengthStream checks its count before it closes:
     * the client saw a cut connection, so the request failed. */
    log_write(LOG_ERROR, f->tenant->name, f->request_id, NULL,
              "response body ended short of its Content-Length; the connection was closed");
    f->status = 500;
  }
  iso_wire_undefined(result);
}

static void abort_stream(worker *w, sandbox_request *f, iso_wire_reader *args, iso_wire *result) {
  (void)w;
  iso_wire_value why;
  int has_why = iso_wire_next(args, &why) == 1 && why.type == ISO_WIRE_STRING;
  log_write(LOG_ERROR, f->tenant->name, f->request_id, NULL,
            "response body failed after its head was sent: %.*s", has_why ? (int)why.len : 7,
            has_why ? why.ptr : "unknown");
  http_request *req = f->req;
  f->req = NULL;
  /* The client got a status it cannot trust: count the request as failed. */
  f->status = 500;
  http_respond_abort(req);
  iso_wire_undefined(result);
}

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
  if (strcmp(call->binding, " request") == 0) {
    if (strcmp(call->op, "read") == 0) return body_read(w, l, call, result);
    return fail(result, "unknown request body operation");
  }
  sandbox_request *f = stream_request(w, l, call);
  if (f == NULL) return fail(result, "this request has no client to stream to");
  iso_wire_reader args;
  iso_wire_value array;
  iso_wire_reader_init(&args, call->args, call->args_len);
  if (iso_wire_next(&args, &array) != 1 || array.type != ISO_WIRE_ARRAY)
    return fail(result, "malformed arguments");
  if (strcmp(call->op, "start") == 0) return start(f, &args, result);
  if (strcmp(call->op, "write") == 0) return write_chunk(f, &args, result);
  if (strcmp(call->op, "end") == 0) {
    end(f, result);
    return 0;
  }
  if (strcmp(call->op, "abort") == 0) {
    abort_stream(w, f, &args, result);
    return 0;
  }
  return fail(result, "unknown response operation");
}

/* The isolate's turn: settle the drain() promise. */
static void wait_run(sched_unit *u) {
  stream_wait *d = container_of(u, stream_wait, unit);
  sandbox *l = d->loaded;
  l->units--;
  sandbox_request *f = sandbox_request_of(l->w, d->token);
  sandbox_enter(l);
  if (f != NULL && f->sb == l) {
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
  int request_body = strcmp(call->binding, " request") == 0;
  sandbox_request *f = request_body ? body_request(w, l, call) : stream_request(w, l, call);
  if (f == NULL) return fail(result, "this request has no client to stream to");
  if (strcmp(call->op, request_body ? "wait" : "drain") != 0)
    return fail(result, "unknown stream operation");
  stream_wait *d = xcalloc(1, sizeof *d);
  d->unit.run = wait_run;
  d->loaded = l;
  d->token = call->token;
  d->call_id = call->call_id;
  d->resolve_always = request_body;
  int rc = request_body ? http_request_body_wait(f->req, on_ready, d)
                        : http_respond_on_drain(f->req, on_ready, d);
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
