/*
 * Streamed responses. When a fetch handler returns a Response whose body is
 * a ReadableStream still being produced, the runtime sends the status and
 * headers at once and each chunk as it comes, through host calls on the
 * binding " response" (a name no deployed binding can have: binding names
 * are identifiers):
 *   start(status, [name, value, ...])  sync: the head goes out, chunked
 *   write(bytes)                       sync: true when the client is behind
 *   drain()                            async: resolves once it caught up
 *   end()                              sync: the body is complete
 *   abort(message)                     sync: the body failed; cut it short
 * Only requests that came in through the ingress can stream; anything else
 * (dynamic workers, one-shot runs) gets an error from start() and the
 * runtime buffers the body as before.
 */
#include <string.h>

#include "base.h"
#include "worker.h"

typedef struct drain_wait {
  sched_unit unit;
  loaded *loaded;
  uint64_t token;
  uint32_t call_id;
  int status;
} drain_wait;

static int fail(iso_wire *result, const char *message) {
  bindings_error(result, "TypeError", message);
  return -1;
}

/* The ingress request a call speaks for, still waiting for (part of) its response. */
static inflight *stream_request(worker *w, loaded *l, const iso_call *call) {
  inflight *f = token_map_get(&w->tokens, call->token);
  if (f == NULL || f->loaded != l || f->req == NULL) return NULL;
  return f;
}

static int start(inflight *f, iso_wire_reader *args, iso_wire *result) {
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
  if (rc == 0) {
    int code = (int)status.number;
    f->status = code;
    if (http_respond_start(f->req, code, hs, n) != 0) rc = -2;
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

static int write_chunk(inflight *f, iso_wire_reader *args, iso_wire *result) {
  iso_wire_value bytes;
  if (iso_wire_next(args, &bytes) != 1 || bytes.type != ISO_WIRE_BYTES)
    return fail(result, "a response chunk must be bytes");
  int rc = http_respond_write(f->req, bytes.ptr, bytes.len);
  if (rc < 0) return fail(result, "the client closed the connection");
  iso_wire_bool(result, rc == 1);
  return 0;
}

static void end(inflight *f, iso_wire *result) {
  http_request *req = f->req;
  f->req = NULL;
  http_respond_end(req);
  iso_wire_undefined(result);
}

static void abort_stream(worker *w, inflight *f, iso_wire_reader *args, iso_wire *result) {
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

int stream_link_call_sync(worker *w, loaded *l, const iso_call *call, iso_wire *result) {
  inflight *f = stream_request(w, l, call);
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
static void drain_run(sched_unit *u) {
  drain_wait *d = container_of(u, drain_wait, unit);
  worker *w = worker_self();
  loaded *l = d->loaded;
  l->units--;
  inflight *f = token_map_get(&w->tokens, d->token);
  if (f != NULL && f->loaded == l) {
    iso_wire v;
    iso_wire_init(&v);
    if (d->status == 0) iso_wire_undefined(&v);
    else bindings_error(&v, "TypeError", "the client closed the connection");
    iso_worker_complete(l->iso, d->token, d->call_id, d->status == 0, v.data, v.len);
    iso_wire_free(&v);
  }
  free(d);
  tenant_collect_retired(w);
}

/* From the connection (write done or closed), possibly with another
 * isolate on the stack: the completion waits for this isolate's turn. */
static void on_drain(void *arg, int status) {
  drain_wait *d = arg;
  d->status = status;
  sched_submit(&worker_self()->sched, &d->loaded->queue, &d->unit);
}

int stream_link_call_async(worker *w, loaded *l, const iso_call *call, iso_wire *result) {
  inflight *f = stream_request(w, l, call);
  if (f == NULL) return fail(result, "this request has no client to stream to");
  if (strcmp(call->op, "drain") != 0) return fail(result, "unknown response operation");
  drain_wait *d = xcalloc(1, sizeof *d);
  d->unit.run = drain_run;
  d->loaded = l;
  d->token = call->token;
  d->call_id = call->call_id;
  if (http_respond_on_drain(f->req, on_drain, d) != 0) {
    free(d);
    return fail(result, "the client closed the connection");
  }
  /* Keeps this version alive until the completion has run. */
  l->units++;
  return 0;
}

int stream_owns_unit(const sched_unit *u) { return u->run == drain_run; }

void stream_unit_dropped(sched_unit *u) {
  drain_wait *d = container_of(u, drain_wait, unit);
  d->loaded->units--;
  free(d);
}
