/*
 * The global fetch(): host calls with the empty binding name, forwarded to
 * the egress process over its unix socket (proto/ framing, see PROTO_FETCH).
 *
 * JavaScript (isolate/runtime/52-fetch.js) makes three calls:
 *   "fetch"  [handle, method, url, headers, body, redirect] -> the head
 *            [status, statusText, headers, url, redirected, done, body]
 *   "read"   [handle] -> [bytes, last]
 *   "cancel" [handle] -> undefined
 * where handle is a number the isolate picked for the fetch. A stream is
 * only reachable from the isolate and the request that began it.
 *
 * The connection is made on first use and again after it broke; when the
 * egress process dies, every fetch waiting on it rejects with a clear error.
 * Per request this file enforces the subrequest budget (limits.sub_requests,
 * redirects included) and at most EGRESS_MAX_CONCURRENT fetches in flight;
 * more wait for a slot.
 *
 * The budget is one count per request, and every upstream request is charged
 * to it before it is sent: a fetch() when it is called, each redirect hop
 * when the egress asks for it (PROTO_FETCH with the fetch's id, answered by
 * an empty PROTO_FETCH to go on or PROTO_FETCH_CANCEL when the count is
 * spent). Handing each fetch a budget of its own could not work: fetches in
 * flight at once would each get the whole remainder, and reserving budget up
 * front would make fetches that never redirect wait on each other. Asking
 * costs one local round trip per redirect, which makes an upstream request
 * anyway.
 *
 * A PROTO_FETCH payload over PROTO_MAX_PAYLOAD cannot be sent at all; such a
 * fetch is refused when it is called, with the limit named.
 *
 * Completions go straight into the isolate from the loop; a completion that
 * must follow a call still on the JavaScript stack (cancel) is deferred to
 * the next loop turn. Nothing is completed for a request that is over: its
 * token is gone from the token map, and with it any promise to keep.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "sandbox.h"

#define EGRESS_MAX_CONCURRENT 6
#define DEFAULT_SUB_REQUESTS 50
#define SWEEP_MS 1000

typedef enum stream_state {
  STREAM_QUEUED,   /* waiting for a slot or for the connection */
  STREAM_SENT,     /* PROTO_FETCH sent, head not yet back */
  STREAM_OPEN,     /* head delivered; body being read */
  STREAM_FAILED,   /* broke while JavaScript was not waiting: error at the next read */
} stream_state;

typedef struct egress_req egress_req;

/* One fetch() of one request. */
typedef struct stream {
  uint32_t id;           /* the PROTO_FETCH frame id; 0 until sent */
  double handle;         /* the isolate's name for it */
  sandbox *sb;            /* compared, never dereferenced once the token is gone */
  uint64_t token;
  egress_req *req;
  stream_state state;
  uint32_t call_id;      /* the JavaScript call waiting on this stream */
  int call_pending;
  uint8_t *frame;        /* PROTO_FETCH payload until sent */
  size_t frame_len;
  char *error;           /* STREAM_FAILED */
  int slot;              /* holds one of the request's concurrent slots */
  int doomed;            /* about to fail with the connection */
  int unsent;            /* its PROTO_FETCH could not be sent */
  struct stream *next;   /* in el->streams */
  struct stream *qnext;  /* in req->queue */
} stream;

/* Per request: its budget and its slots. */
struct egress_req {
  uint64_t token;
  unsigned used;         /* subrequests made or granted, redirects included */
  unsigned limit;        /* limits.sub_requests of the request's worker */
  unsigned active;       /* streams holding a slot */
  stream *queue, **queue_tail;
  egress_req *next;      /* in its hash bucket */
};

/* A completion for a call that was made while JavaScript was on the stack. */
typedef struct deferred {
  sandbox *sb;
  uint64_t token;
  uint32_t call_id;
  int ok;
  iso_wire value;
  struct deferred *next;
} deferred;

typedef struct egress_link egress_link;

typedef enum link_state { LINK_DOWN, LINK_CONNECTING, LINK_UP, LINK_CLOSING } link_state;

/* The process's link to the egress process (worker.egress), made on the first fetch(). */
struct egress_link {
  worker *w;
  link_state state;
  proto_channel ch;
  uv_connect_t connect_req;
  uint32_t next_id;
  stream *streams;
  egress_req **reqs;     /* hash table by token; chained */
  size_t reqs_cap;       /* buckets, a power of two */
  size_t n_reqs;
  deferred *deferred, **deferred_tail;
  uv_idle_t idle;        /* runs deferred completions */
  uv_timer_t sweep;      /* drops what finished requests left behind */
};

static void link_connect(worker *w);

/* ---- small helpers ---- */

static void wire_err(iso_wire *out, const char *name, const char *message) {
  sandbox_call_error(out, name, message);
}

static int token_live(worker *w, uint64_t token, sandbox *l) {
  sandbox_request *f = sandbox_request_of(w, token);
  return f != NULL && f->sb == l;
}

static unsigned sub_request_limit(const sandbox *l) {
  json_int_t n =
      json_integer_value(json_object_get(json_object_get(l->spec, "limits"), "sub_requests"));
  return n > 0 ? (unsigned)n : DEFAULT_SUB_REQUESTS;
}

/* Settles call_id now; the request's isolate must not be on the stack. */
static void complete(worker *w, sandbox *l, uint64_t token, uint32_t call_id, int ok,
                     iso_wire *value) {
  if (token_live(w, token, l)) {
    /* Its CPU time is the request's: iso_worker_request_cpu_ns counts it. */
    sandbox_enter(l);
    iso_worker_complete(l->iso, token, call_id, ok, value->data, value->len);
    /* The completion may have ended the request: l may go as it is left. */
    sandbox_leave(l);
  }
  iso_wire_free(value);
}

static void complete_error(worker *w, sandbox *l, uint64_t token, uint32_t call_id,
                           const char *name, const char *message) {
  iso_wire v;
  iso_wire_init(&v);
  wire_err(&v, name, message);
  complete(w, l, token, call_id, 0, &v);
}

static void on_idle(uv_idle_t *h) {
  egress_link *el = container_of(h, egress_link, idle);
  worker *w = el->w;
  deferred *d = el->deferred;
  el->deferred = NULL;
  el->deferred_tail = &el->deferred;
  uv_idle_stop(h);
  while (d) {
    deferred *next = d->next;
    complete(w, d->sb, d->token, d->call_id, d->ok, &d->value);
    free(d);
    d = next;
  }
}

/* Settles a call on the next loop turn; takes value over. */
static void defer(sandbox *l, uint64_t token, uint32_t call_id, int ok, iso_wire *value) {
  egress_link *el = l->w->egress;
  deferred *d = xcalloc(1, sizeof *d);
  d->sb = l;
  d->token = token;
  d->call_id = call_id;
  d->ok = ok;
  d->value = *value;
  *el->deferred_tail = d;
  el->deferred_tail = &d->next;
  uv_idle_start(&el->idle, on_idle);
}

/* ---- requests and streams ---- */

static size_t req_bucket(uint64_t token, size_t cap) {
  return (size_t)((token * 0x9E3779B97F4A7C15ull) >> 32) & (cap - 1);
}

static void reqs_grow(egress_link *el) {
  size_t cap = el->reqs_cap ? el->reqs_cap * 2 : 64;
  egress_req **buckets = xcalloc(cap, sizeof *buckets);
  for (size_t i = 0; i < el->reqs_cap; i++) {
    while (el->reqs[i]) {
      egress_req *r = el->reqs[i];
      el->reqs[i] = r->next;
      size_t b = req_bucket(r->token, cap);
      r->next = buckets[b];
      buckets[b] = r;
    }
  }
  free(el->reqs);
  el->reqs = buckets;
  el->reqs_cap = cap;
}

static egress_req *req_find(egress_link *el, uint64_t token) {
  if (el->reqs_cap == 0) return NULL;
  for (egress_req *r = el->reqs[req_bucket(token, el->reqs_cap)]; r; r = r->next)
    if (r->token == token) return r;
  return NULL;
}

static egress_req *req_get(egress_link *el, uint64_t token) {
  egress_req *r = req_find(el, token);
  if (r) return r;
  if (el->n_reqs >= el->reqs_cap) reqs_grow(el);
  r = xcalloc(1, sizeof *r);
  r->token = token;
  r->queue_tail = &r->queue;
  size_t b = req_bucket(token, el->reqs_cap);
  r->next = el->reqs[b];
  el->reqs[b] = r;
  el->n_reqs++;
  return r;
}

/* Frees the request records whose request is over and that hold nothing. */
static void reqs_collect(worker *w, uint64_t only) {
  egress_link *el = w->egress;
  size_t first = 0, end = el->reqs_cap;
  if (only && el->reqs_cap) {
    first = req_bucket(only, el->reqs_cap);
    end = first + 1;
  }
  for (size_t i = first; i < end; i++) {
    for (egress_req **pp = &el->reqs[i]; *pp;) {
      egress_req *r = *pp;
      int over = only ? r->token == only : id_map_get(&w->tokens, r->token) == NULL;
      if (over && r->active == 0 && r->queue == NULL) {
        *pp = r->next;
        free(r);
        el->n_reqs--;
      } else {
        pp = &r->next;
      }
    }
  }
}

static stream *stream_by_id(egress_link *el, uint32_t id) {
  for (stream *s = el->streams; s; s = s->next)
    if (s->id == id && s->state != STREAM_QUEUED) return s;
  return NULL;
}

/* Only streams of live requests: a stream left by an isolate that is gone
 * (until the sweep drops it) must not answer for a new one at its address. */
static stream *stream_by_handle(worker *w, sandbox *l, double handle) {
  egress_link *el = w->egress;
  for (stream *s = el->streams; s; s = s->next)
    if (s->sb == l && s->handle == handle && token_live(w, s->token, l)) return s;
  return NULL;
}

static void send_stream(worker *w, stream *s);
static void stream_fail(worker *w, stream *s, const char *message);

/* Gives up the stream's slot and lets the next queued fetch of the request go. */
static void release_slot(worker *w, stream *s) {
  egress_req *r = s->req;
  if (!s->slot) return;
  s->slot = 0;
  r->active--;
  while (r->active < EGRESS_MAX_CONCURRENT && r->queue) {
    stream *next = r->queue;
    r->queue = next->qnext;
    if (r->queue == NULL) r->queue_tail = &r->queue;
    r->active++;
    next->slot = 1;
    send_stream(w, next);
  }
}

static void stream_free(worker *w, stream *s) {
  egress_link *el = w->egress;
  for (stream **pp = &el->streams; *pp; pp = &(*pp)->next) {
    if (*pp == s) {
      *pp = s->next;
      break;
    }
  }
  egress_req *r = s->req;
  if (s->state == STREAM_QUEUED) {
    for (stream **pp = &r->queue; *pp; pp = &(*pp)->qnext) {
      if (*pp == s) {
        *pp = s->qnext;
        if (r->queue_tail == &s->qnext) r->queue_tail = pp;
        break;
      }
    }
  }
  release_slot(w, s);
  free(s->frame);
  free(s->error);
  free(s);
}

/* The stream broke: reject the waiting call, or keep the error for the next read. */
static void stream_fail(worker *w, stream *s, const char *message) {
  if (s->call_pending) {
    s->call_pending = 0;
    sandbox *l = s->sb;
    uint64_t token = s->token;
    uint32_t call_id = s->call_id;
    stream_free(w, s);
    complete_error(w, l, token, call_id, "TypeError", message);
    return;
  }
  free(s->error);
  s->error = xstrdup(message);
  s->unsent = 0;
  release_slot(w, s);
  s->state = STREAM_FAILED;
}

/* Sends the stream's PROTO_FETCH on the open connection. Returns 0 or an error. */
static int send_frame(egress_link *el, stream *s) {
  int rc = proto_channel_send(&el->ch, PROTO_FETCH, s->id, s->frame, s->frame_len);
  free(s->frame);
  s->frame = NULL;
  return rc;
}

static void unsent_message(char *msg, size_t size, int rc) {
  snprintf(msg, size, "fetch failed: could not send it to the egress process (%s)",
           proto_strerror(rc));
}

static void send_stream(worker *w, stream *s) {
  egress_link *el = w->egress;
  s->state = STREAM_SENT;
  if (++el->next_id == 0) el->next_id = 1;
  s->id = el->next_id;
  if (el->state != LINK_UP) {
    link_connect(w); /* sent once the connection is up */
    return;
  }
  int rc = send_frame(el, s);
  if (rc != 0) {
    char msg[160];
    unsent_message(msg, sizeof msg, rc);
    stream_fail(w, s, msg);
  }
}

/* ---- the connection ---- */

/*
 * Fails every stream that `pick` selects. Failing one runs JavaScript, which
 * may start or cancel other fetches, so the list is walked afresh each time.
 */
static void fail_picked(worker *w, int (*pick)(const stream *s), const char *message) {
  egress_link *el = w->egress;
  for (stream *s = el->streams; s; s = s->next) s->doomed = pick(s);
  for (;;) {
    stream *s = el->streams;
    while (s && !s->doomed) s = s->next;
    if (s == NULL) return;
    s->doomed = 0;
    stream_fail(w, s, message);
  }
}

/* Sent (or being read) on the connection that broke. */
static int on_the_wire(const stream *s) {
  return (s->state == STREAM_SENT && s->frame == NULL) || s->state == STREAM_OPEN;
}

/* Waiting for a connection that could not be made. */
static int awaiting_link(const stream *s) { return s->state == STREAM_SENT && s->frame != NULL; }

static json_t *head_json(const proto_frame *f, const uint8_t **bytes, size_t *n) {
  if (f->length < 4) return NULL;
  const uint8_t *p = f->payload;
  uint32_t len = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
  if (len > f->length - 4) return NULL;
  json_t *head = json_loadb((const char *)p + 4, len, 0, NULL);
  if (!json_is_object(head)) {
    json_decref(head);
    return NULL;
  }
  *bytes = p + 4 + len;
  *n = f->length - 4 - len;
  return head;
}

static void limit_message(char *msg, size_t size, unsigned limit) {
  snprintf(msg, size,
           "subrequest limit exceeded: a request may make at most %u subrequests "
           "(limits.sub_requests)",
           limit);
}

static void wire_json_string(iso_wire *v, json_t *s) {
  const char *text = json_string_value(s);
  iso_wire_string(v, text ? text : "", text ? json_string_length(s) : 0);
}

static void on_head(worker *w, stream *s, const proto_frame *frame) {
  const uint8_t *bytes = NULL;
  size_t n = 0;
  json_t *head = head_json(frame, &bytes, &n);
  if (head == NULL) {
    stream_fail(w, s, "fetch failed: malformed reply from the egress process");
    return;
  }
  int done = json_is_true(json_object_get(head, "done"));
  json_t *headers = json_object_get(head, "headers");
  /* An array, not an object: the isolate builds arrays without per-key lookups. */
  iso_wire v;
  iso_wire_init(&v);
  iso_wire_array(&v, 7);
  iso_wire_number(&v, (double)json_integer_value(json_object_get(head, "status")));
  wire_json_string(&v, json_object_get(head, "status_text"));
  iso_wire_array(&v, (uint32_t)json_array_size(headers));
  for (size_t i = 0; i < json_array_size(headers); i++)
    wire_json_string(&v, json_array_get(headers, i));
  wire_json_string(&v, json_object_get(head, "url"));
  iso_wire_bool(&v, json_is_true(json_object_get(head, "redirected")));
  iso_wire_bool(&v, done);
  iso_wire_bytes(&v, bytes, n);
  json_decref(head);
  s->state = STREAM_OPEN;
  int pending = s->call_pending;
  s->call_pending = 0;
  sandbox *l = s->sb;
  uint64_t token = s->token;
  uint32_t call_id = s->call_id;
  if (done) stream_free(w, s);
  if (pending) complete(w, l, token, call_id, 1, &v);
  else iso_wire_free(&v);
}

static void on_data(worker *w, stream *s, const proto_frame *frame) {
  if (frame->length < 1 || !s->call_pending) {
    stream_fail(w, s, "fetch failed: unexpected body data from the egress process");
    return;
  }
  int last = frame->payload[0] & 1;
  iso_wire v;
  iso_wire_init(&v);
  iso_wire_array(&v, 2);
  iso_wire_bytes(&v, frame->payload + 1, frame->length - 1);
  iso_wire_bool(&v, last);
  s->call_pending = 0;
  sandbox *l = s->sb;
  uint64_t token = s->token;
  uint32_t call_id = s->call_id;
  if (last) stream_free(w, s);
  complete(w, l, token, call_id, 1, &v);
}

static void on_error(worker *w, stream *s, const proto_frame *frame) {
  json_t *body = json_loadb((const char *)frame->payload, frame->length, 0, NULL);
  const char *msg = json_string_value(json_object_get(body, "error"));
  char *copy = xstrdup(msg ? msg : "fetch failed");
  json_decref(body);
  stream_fail(w, s, copy);
  free(copy);
}

/* The egress asks for one more subrequest: a redirect it is about to follow. */
static void on_hop(worker *w, stream *s) {
  egress_link *el = w->egress;
  egress_req *r = s->req;
  if (s->state == STREAM_SENT && token_live(w, s->token, s->sb) && r->used < r->limit) {
    r->used++;
    if (proto_channel_send(&el->ch, PROTO_FETCH, s->id, NULL, 0) != 0)
      stream_fail(w, s, "fetch failed: the egress process went away while the fetch was in progress");
    return;
  }
  /* Failing here either way: a link too broken to take the cancel fails the
   * egress's side of the fetch when it closes. */
  (void)proto_channel_send(&el->ch, PROTO_FETCH_CANCEL, s->id, NULL, 0);
  char msg[160];
  limit_message(msg, sizeof msg, r->limit);
  stream_fail(w, s, msg);
}

static void on_frame(proto_channel *ch, const proto_frame *frame) {
  egress_link *el = container_of(ch, egress_link, ch);
  worker *w = el->w;
  stream *s = stream_by_id(el, frame->id);
  if (s == NULL) return; /* cancelled meanwhile */
  switch (frame->type) {
    case PROTO_FETCH: on_hop(w, s); break;
    case PROTO_FETCH_HEAD: on_head(w, s, frame); break;
    case PROTO_FETCH_DATA: on_data(w, s, frame); break;
    case PROTO_ERROR: on_error(w, s, frame); break;
    default: log_debug("egress link: ignoring a %s frame", proto_type_name(frame->type));
  }
}

static void on_link_closed(proto_channel *ch, int reason) {
  egress_link *el = container_of(ch, egress_link, ch);
  worker *w = el->w;
  int was_up = el->state == LINK_UP;
  el->state = LINK_DOWN;
  if (was_up && !w->draining)
    log_warn("lost the connection to the egress process (%s)", reason ? uv_strerror(reason) : "closed");
  fail_picked(w, on_the_wire,
              "fetch failed: the egress process went away while the fetch was in progress");
  /* Fetches still queued (never sent) go out on a fresh connection. */
  for (stream *s = el->streams; s; s = s->next)
    if (s->state == STREAM_SENT && s->frame) {
      link_connect(w);
      break;
    }
}

static void on_pipe_closed(uv_handle_t *h) {
  egress_link *el = container_of((uv_pipe_t *)h, egress_link, ch.pipe);
  el->state = LINK_DOWN;
  /* Fetches that took a freed slot after the failure deserve their own attempt. */
  for (stream *s = el->streams; s; s = s->next) {
    if (awaiting_link(s)) {
      link_connect(el->w);
      return;
    }
  }
}

static int unsent(const stream *s) { return s->unsent; }

static void on_connected(uv_connect_t *req, int status) {
  egress_link *el = container_of(req, egress_link, connect_req);
  worker *w = el->w;
  if (status == 0 && proto_channel_start(&el->ch, on_frame, on_link_closed, NULL) == 0) {
    el->state = LINK_UP;
    /* A stream whose frame did not go fails on its own; the others still go
     * (a closed channel fails them in turn, through its close callback). */
    int failed = 0, last_rc = 0;
    for (stream *s = el->streams; s; s = s->next) {
      if (s->state != STREAM_SENT || s->frame == NULL) continue;
      int rc = send_frame(el, s);
      if (rc != 0) {
        s->unsent = 1;
        failed = 1;
        last_rc = rc;
      }
    }
    if (failed) {
      char msg[160];
      unsent_message(msg, sizeof msg, last_rc);
      fail_picked(w, unsent, msg);
    }
    return;
  }
  char msg[256];
  snprintf(msg, sizeof msg, "fetch failed: the egress process is not available (%s)",
           uv_strerror(status ? status : UV_EPROTO));
  log_warn("cannot connect to the egress process at %s: %s", w->config.egress_socket,
           uv_strerror(status ? status : UV_EPROTO));
  el->state = LINK_CLOSING;
  uv_close((uv_handle_t *)&el->ch.pipe, on_pipe_closed);
  /* Everything waiting to be sent fails: nobody is there to take it. */
  fail_picked(w, awaiting_link, msg);
}

static void link_connect(worker *w) {
  egress_link *el = w->egress;
  if (el->state != LINK_DOWN) return;
  memset(&el->ch, 0, sizeof el->ch);
  if (uv_pipe_init(w->loop, &el->ch.pipe, 0) != 0) return;
  el->state = LINK_CONNECTING;
  uv_pipe_connect(&el->connect_req, &el->ch.pipe, w->config.egress_socket, on_connected);
}

/* ---- leftovers of finished requests ---- */

/* Cancels and frees the streams `dead` selects; nothing here runs JavaScript. */
static void drop_streams(worker *w, int (*dead)(worker *w, const stream *s, uint64_t token),
                         uint64_t token) {
  egress_link *el = w->egress;
  stream *s = el->streams;
  while (s) {
    if (!dead(w, s, token)) {
      s = s->next;
      continue;
    }
    if ((s->state == STREAM_SENT || s->state == STREAM_OPEN) && el->state == LINK_UP &&
        s->frame == NULL)
      proto_channel_send(&el->ch, PROTO_FETCH_CANCEL, s->id, NULL, 0);
    s->call_pending = 0;
    stream_free(w, s);
    s = el->streams; /* freeing may have sent queued ones: start over */
  }
}

static int request_over(worker *w, const stream *s, uint64_t token) {
  (void)token;
  return !token_live(w, s->token, s->sb);
}

static int of_request(worker *w, const stream *s, uint64_t token) {
  (void)w;
  return s->token == token;
}

static void on_sweep(uv_timer_t *t) {
  egress_link *el = container_of(t, egress_link, sweep);
  worker *w = el->w;
  drop_streams(w, request_over, 0);
  reqs_collect(w, 0);
  if (el->streams == NULL && el->n_reqs == 0) uv_timer_stop(t);
}

void egress_link_request_done(worker *w, uint64_t token) {
  egress_link *el = w->egress;
  if (el == NULL) return;
  drop_streams(w, of_request, token);
  reqs_collect(w, token);
}

static void ensure_handles(worker *w) {
  if (w->egress) return;
  egress_link *el = xcalloc(1, sizeof *el);
  el->w = w;
  uv_idle_init(w->loop, &el->idle);
  uv_timer_init(w->loop, &el->sweep);
  uv_unref((uv_handle_t *)&el->sweep);
  el->deferred_tail = &el->deferred;
  w->egress = el;
}

void egress_link_free(worker *w) {
  free(w->egress);
  w->egress = NULL;
}

/* ---- the host calls ---- */

/* Reads args: [handle, method, url, headers, body, redirect]. */
typedef struct fetch_args {
  double handle;
  iso_wire_value method, url, redirect;
  json_t *headers;
  const char *body;
  size_t body_len;
} fetch_args;

static int read_string(iso_wire_reader *r, iso_wire_value *v) {
  return iso_wire_next(r, v) == 1 && v->type == ISO_WIRE_STRING ? 0 : -1;
}

static int parse_fetch_args(const iso_call *call, fetch_args *a) {
  iso_wire_reader r;
  iso_wire_value v;
  iso_wire_reader_init(&r, call->args, call->args_len);
  if (iso_wire_next(&r, &v) != 1 || v.type != ISO_WIRE_ARRAY || v.count != 6) return -1;
  if (iso_wire_next(&r, &v) != 1 || v.type != ISO_WIRE_NUMBER) return -1;
  a->handle = v.number;
  if (read_string(&r, &a->method) || read_string(&r, &a->url)) return -1;
  if (iso_wire_next(&r, &v) != 1 || v.type != ISO_WIRE_ARRAY || v.count % 2) return -1;
  a->headers = json_array();
  for (uint32_t i = 0; i < v.count; i++) {
    iso_wire_value h;
    json_t *s;
    if (read_string(&r, &h) || (s = json_stringn(h.ptr, h.len)) == NULL) return -1;
    json_array_append_new(a->headers, s);
  }
  if (iso_wire_next(&r, &v) != 1) return -1;
  if (v.type == ISO_WIRE_BYTES) {
    a->body = v.ptr;
    a->body_len = v.len;
  } else if (v.type != ISO_WIRE_NULL && v.type != ISO_WIRE_UNDEFINED) {
    return -1;
  }
  return read_string(&r, &a->redirect);
}

static int op_fetch(worker *w, sandbox *l, const iso_call *call, iso_wire *result) {
  egress_link *el = w->egress;
  sandbox_request *f = id_map_get(&w->tokens, call->token);
  if (f == NULL || f->sb != l) {
    wire_err(result, "Error",
             "fetch() can only be called while handling a request (not from the global scope "
             "or after the request ended)");
    return -1;
  }
  if (sandbox_principal(l) == NULL) {
    /* A run given a facet but no egress rules: nothing to fetch under. */
    wire_err(result, "TypeError", "this sandbox cannot make host calls");
    return -1;
  }
  fetch_args a = {0};
  if (parse_fetch_args(call, &a) != 0) {
    json_decref(a.headers);
    wire_err(result, "TypeError", "fetch: malformed arguments");
    return -1;
  }
  if (stream_by_handle(w, l, a.handle)) {
    json_decref(a.headers);
    wire_err(result, "TypeError", "fetch: handle in use");
    return -1;
  }
  egress_req *r = req_get(el, call->token);
  r->limit = sub_request_limit(l);
  if (r->used >= r->limit) {
    json_decref(a.headers);
    char msg[160];
    limit_message(msg, sizeof msg, r->limit);
    wire_err(result, "TypeError", msg);
    return -1;
  }
  /* The egress says how often the request has looped through it (CDN-Loop). */
  json_t *head = json_pack("{s:s, s:s?, s:s%, s:s%, s:o, s:s%, s:i}", "tenant", sandbox_principal(l),
                           "request_id", f->req ? f->req->id : NULL, "method", a.method.ptr,
                           a.method.len, "url", a.url.ptr, a.url.len, "headers", a.headers,
                           "redirect", a.redirect.ptr, a.redirect.len, "loop",
                           f->req ? route_loop_hops(f->req) : 0);
  char *text = head ? json_dumps(head, JSON_COMPACT) : NULL;
  json_decref(head);
  if (text == NULL) {
    wire_err(result, "TypeError", "fetch: malformed arguments");
    return -1;
  }
  size_t n = strlen(text);
  if (4 + n + a.body_len > PROTO_MAX_PAYLOAD) {
    /* One frame carries the whole request; the egress could not take more. */
    free(text);
    char msg[200];
    snprintf(msg, sizeof msg,
             "fetch failed: the request body is larger than %u MiB, the most a fetch can send "
             "(%zu bytes, URL and headers included)",
             PROTO_MAX_PAYLOAD / (1024u * 1024u), 4 + n + a.body_len);
    wire_err(result, "TypeError", msg);
    return -1;
  }
  r->used++; /* the first hop; redirects are charged when the egress asks */
  stream *s = xcalloc(1, sizeof *s);
  s->frame_len = 4 + n + a.body_len;
  s->frame = xmalloc(s->frame_len);
  s->frame[0] = (uint8_t)(n >> 24);
  s->frame[1] = (uint8_t)(n >> 16);
  s->frame[2] = (uint8_t)(n >> 8);
  s->frame[3] = (uint8_t)n;
  memcpy(s->frame + 4, text, n);
  if (a.body_len) memcpy(s->frame + 4 + n, a.body, a.body_len);
  free(text);
  s->handle = a.handle;
  s->sb = l;
  s->token = call->token;
  s->req = r;
  s->call_id = call->call_id;
  s->call_pending = 1;
  s->state = STREAM_QUEUED;
  s->next = el->streams;
  el->streams = s;
  if (!uv_is_active((uv_handle_t *)&el->sweep))
    uv_timer_start(&el->sweep, on_sweep, SWEEP_MS, SWEEP_MS);
  if (r->active < EGRESS_MAX_CONCURRENT) {
    r->active++;
    s->slot = 1;
    send_stream(w, s);
  } else {
    *r->queue_tail = s;
    r->queue_tail = &s->qnext;
  }
  return 0;
}

static int read_handle(const iso_call *call, double *handle) {
  iso_wire_reader r;
  iso_wire_value v;
  iso_wire_reader_init(&r, call->args, call->args_len);
  if (iso_wire_next(&r, &v) != 1 || v.type != ISO_WIRE_ARRAY || v.count != 1) return -1;
  if (iso_wire_next(&r, &v) != 1 || v.type != ISO_WIRE_NUMBER) return -1;
  *handle = v.number;
  return 0;
}

static int op_read(worker *w, sandbox *l, const iso_call *call, iso_wire *result) {
  egress_link *el = w->egress;
  double handle;
  stream *s = read_handle(call, &handle) == 0 ? stream_by_handle(w, l, handle) : NULL;
  if (s == NULL) {
    wire_err(result, "TypeError", "the response body is no longer available");
    return -1;
  }
  if (s->token != call->token) {
    wire_err(result, "Error",
             "Cannot perform I/O on behalf of a different request: a response body can only be "
             "read by the request that fetched it");
    return -1;
  }
  if (s->state == STREAM_FAILED) {
    wire_err(result, "TypeError", s->error ? s->error : "fetch failed");
    stream_free(w, s);
    return -1;
  }
  if (s->call_pending || s->state != STREAM_OPEN) {
    wire_err(result, "TypeError", "a read of this response body is already in progress");
    return -1;
  }
  if (el->state != LINK_UP ||
      proto_channel_send(&el->ch, PROTO_FETCH_READ, s->id, NULL, 0) != 0) {
    wire_err(result, "TypeError",
             "fetch failed: the egress process went away while the body was being read");
    stream_free(w, s);
    return -1;
  }
  s->call_id = call->call_id;
  s->call_pending = 1;
  return 0;
}

static int op_cancel(worker *w, sandbox *l, const iso_call *call, iso_wire *result) {
  egress_link *el = w->egress;
  (void)result;
  double handle;
  stream *s = read_handle(call, &handle) == 0 ? stream_by_handle(w, l, handle) : NULL;
  if (s) {
    if ((s->state == STREAM_SENT || s->state == STREAM_OPEN) && el->state == LINK_UP &&
        s->frame == NULL)
      proto_channel_send(&el->ch, PROTO_FETCH_CANCEL, s->id, NULL, 0);
    if (s->call_pending) {
      iso_wire v;
      iso_wire_init(&v);
      wire_err(&v, "AbortError", "The operation was aborted.");
      defer(l, s->token, s->call_id, 0, &v);
      s->call_pending = 0;
    }
    stream_free(w, s);
  }
  iso_wire v;
  iso_wire_init(&v);
  iso_wire_undefined(&v);
  defer(l, call->token, call->call_id, 1, &v);
  return 0;
}

int egress_link_call(sandbox *l, const iso_call *call, iso_wire *result) {
  worker *w = l->w;
  if (w->config.egress_socket == NULL) {
    wire_err(result, "TypeError", "fetch() is not available on this node (no egress process)");
    return -1;
  }
  ensure_handles(w);
  if (strcmp(call->op, "fetch") == 0) return op_fetch(w, l, call, result);
  if (strcmp(call->op, "read") == 0) return op_read(w, l, call, result);
  if (strcmp(call->op, "cancel") == 0) return op_cancel(w, l, call, result);
  wire_err(result, "TypeError", "unknown fetch operation");
  return -1;
}
