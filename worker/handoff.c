/*
 * Handoff: the requests of a cordoned tenant that reach a shared worker
 * process (they share one listening socket, so any of them may get one) are
 * forwarded to the tenant's dedicated process and its answer is relayed back.
 *
 * The dedicated process serves plain HTTP/1.1 on a private unix socket
 * (a worker process makes no other kind: its sandbox, jail/) that the
 * supervisor owns and keeps open across the process's restarts, so
 * it runs the very same ingress path as a shared process and a request sent
 * while it restarts waits in the socket's backlog. One connection per
 * request ("Connection: close"): nothing is ever sent twice, so a request
 * that the dedicated process may have run is never retried. A request that
 * was provably not sent (the connection was refused) goes wherever the
 * tenant is now: held, run here again, or refused as suspended.
 *
 * The client sees the dedicated process's status, headers and body; the
 * framing headers (Date, Content-Length, Connection) are this process's.
 * The body is relayed as it arrives, through http.h's client and streamed
 * response: reading from the dedicated process stops while the client's
 * connection holds more than the server's write threshold (256 KiB), so a
 * relayed response costs about that much here whatever its size.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base.h"
#include "worker.h"

#define HANDOFF_WAIT_MS 5000        /* held this long while the dedicated process is not ready */
#define HANDOFF_SWEEP_MS 50
#define HANDOFF_TIMEOUT_MS 120000   /* backstop: the dedicated process enforces the wall limit */

typedef struct handoff {
  uv_pipe_t conn;              /* to the dedicated process's unix socket */
  uv_connect_t connect;
  uv_timer_t timer;            /* until the response head: HANDOFF_TIMEOUT_MS */
  worker *w;
  tenant *t;
  http_request *req;
  uint64_t queued_ns;
  struct handoff *next;        /* in t->handoff_waiting */
  http_client *client;         /* NULL until connected */
  http_header *out_headers;    /* the request's headers as sent */
  size_t n_out_headers;
  int started;                 /* the response head went to the client */
  char *forward_path;          /* a forward to the owner node (through this relay), or NULL */
  int handles;                 /* open libuv handles */
  struct handoff *prev_live, *next_live; /* every handoff not yet ended */
} handoff;

static handoff *live;

/* ---- lifecycle ---- */

static void handoff_free(handoff *h) {
  free(h->forward_path);
  for (size_t i = 0; i < h->n_out_headers; i++) free(h->out_headers[i].name);
  free(h->out_headers);
  free(h);
}

static void on_handle_closed(uv_handle_t *handle) {
  handoff *h = handle->data;
  if (--h->handles > 0) return;
  worker *w = h->w;
  handoff_free(h);
  worker_maybe_exit(w);
}

/* The client got its answer (or left): the record goes once its handles closed. */
static void handoff_end(handoff *h) {
  tenant *t = h->t;
  h->req = NULL;
  if (h->prev_live) h->prev_live->next_live = h->next_live;
  else live = h->next_live;
  if (h->next_live) h->next_live->prev_live = h->prev_live;
  if (h->forward_path == NULL) {
    if (t->handoffs > 0) t->handoffs--;
    worker_cordon_settled(h->w, t);
  }
  if (h->client) {
    http_client_close(h->client);
    h->client = NULL;
    h->conn.data = h; /* the client's while it was open */
  }
  if (h->handles == 0) {
    worker *w = h->w;
    handoff_free(h);
    worker_maybe_exit(w);
    return;
  }
  /* Closing already when a retry was under way as the process shut down. */
  if (!uv_is_closing((uv_handle_t *)&h->conn)) uv_close((uv_handle_t *)&h->conn, on_handle_closed);
  if (!uv_is_closing((uv_handle_t *)&h->timer)) uv_close((uv_handle_t *)&h->timer, on_handle_closed);
}

/* Who the request went to, for the client's errors. */
static const char *peer(const handoff *h) {
  return h->forward_path ? "the node that owns the tenant's facets"
                         : "the tenant's dedicated process";
}

static void fail(handoff *h, int status, const char *message) {
  if (h->req) {
    json_t *extra = json_pack("{s:s, s:s}", "tenant", h->t->name, "request_id", h->req->id);
    char *text = json_dumps(extra, JSON_COMPACT);
    json_decref(extra);
    log_write(LOG_WARN, h->t->name, h->req->id, NULL, "handoff failed: %s", message);
    if (!h->started) stats_answered_here(h->t, status); /* else the answer was relayed */
    http_respond_error(h->req, status, message, text);
    free(text);
  }
  handoff_end(h);
}

static void fail_peer(handoff *h, int status, const char *what) {
  char message[160];
  snprintf(message, sizeof message, "%s %s", peer(h), what);
  fail(h, status, message);
}

/* ---- holding requests while the dedicated process is not ready ---- */

static void sweep(uv_timer_t *timer);

static void hold(handoff *h) {
  worker *w = h->w;
  h->next = h->t->handoff_waiting;
  h->t->handoff_waiting = h;
  if (!w->handoff_timer_on) {
    uv_timer_init(w->loop, &w->handoff_timer);
    w->handoff_timer_on = 1;
  }
  if (!uv_is_active((uv_handle_t *)&w->handoff_timer))
    uv_timer_start(&w->handoff_timer, sweep, HANDOFF_SWEEP_MS, HANDOFF_SWEEP_MS);
}

static void expire_waiting(tenant *t, uint64_t now, int *left) {
  handoff **link = &t->handoff_waiting;
  while (*link) {
    handoff *h = *link;
    if (now - h->queued_ns < (uint64_t)HANDOFF_WAIT_MS * 1000000u) {
      link = &h->next;
      (*left)++;
      continue;
    }
    *link = h->next;
    fail(h, 503, "the tenant's dedicated process is restarting; try again");
  }
}

static void sweep(uv_timer_t *timer) {
  worker *w = container_of(timer, worker, handoff_timer);
  uint64_t now = time_mono_ns();
  int left = 0;
  for (tenant *t = w->tenants; t; t = t->next)
    if (t->handoff_waiting) expire_waiting(t, now, &left);
  if (left == 0) uv_timer_stop(timer);
}

/* ---- the response ---- */

/* The response cannot go on: the client sees a cut connection (or has left). */
static void cut(handoff *h) {
  http_request *req = h->req;
  h->req = NULL;
  http_respond_abort(req);
  handoff_end(h);
}

static void on_client_drained(void *arg, int status);

static void on_head(http_client *c, void *arg, const http_client_response *res) {
  handoff *h = arg;
  uv_timer_stop(&h->timer);
  (void)c;
  /* The length the dedicated process announced, so the client sees it too
   * (for HEAD, the length a GET would get). */
  if (http_respond_start(h->req, res->status, res->headers, res->n_headers,
                         res->content_length) != 0) {
    cut(h); /* the client left: nothing more to read from the dedicated process */
    return;
  }
  h->started = 1;
}

static void on_body(http_client *c, void *arg, const uint8_t *data, size_t len) {
  handoff *h = arg;
  int rc = http_respond_write(h->req, data, len);
  if (rc == 1 && http_respond_on_drain(h->req, on_client_drained, h) == 0) {
    /* The client is behind: stop reading until its queue goes down. */
    http_client_pause(c);
    return;
  }
  if (rc < 0) {
    log_write(LOG_INFO, h->t->name, h->req->id, NULL,
              "handoff: the client went away during the response");
    cut(h);
  }
}

static void on_cut_later(uv_timer_t *timer) {
  handoff *h = timer->data;
  if (h->req) cut(h);
}

static void on_client_drained(void *arg, int status) {
  handoff *h = arg;
  /* UV_ECANCELED: from our own end or abort, the handoff is ending. */
  if (h->client == NULL || h->req == NULL || status == UV_ECANCELED) return;
  if (status == 0) {
    http_client_resume(h->client);
    return;
  }
  /* The client left. The server is still closing its connection and uses
   * the request after this call: it is freed from the next loop turn. */
  uv_timer_start(&h->timer, on_cut_later, 0, 0);
}

static void on_end(http_client *c, void *arg, int status) {
  handoff *h = arg;
  if (status == 0) {
    http_request *req = h->req;
    h->req = NULL;
    if (http_respond_end(req) == UV_EPROTO)
      log_write(LOG_WARN, h->t->name, NULL, NULL,
                "handoff: the dedicated process's response ended short of its Content-Length");
    handoff_end(h);
    return;
  }
  if (h->started) {
    /* Part of the body went out: the client must see a cut response. */
    log_write(LOG_WARN, h->t->name, h->req->id, NULL,
              "handoff: the dedicated process's response broke off: %s", http_client_error(c));
    cut(h);
    return;
  }
  /* It may have run the request: never send it again. */
  if (status == UV_ETIMEDOUT)
    fail_peer(h, 504, "did not answer in time");
  else if (status == UV_EPROTO || status == UV_E2BIG || status == UV_ENOTSUP)
    fail_peer(h, 502, "sent a malformed response");
  else
    fail_peer(h, 502, "failed while handling the request");
}

static const http_client_callbacks client_callbacks = {
    .on_head = on_head, .on_body = on_body, .on_end = on_end};

/* ---- the request ---- */

/* The client's headers as the dedicated process gets them; a forward to
 * another node is a plain request, its hop-by-hop headers dropped, with a
 * mark so that it is not forwarded again. */
static void build_headers(handoff *h) {
  http_request *req = h->req;
  size_t prefix = strlen(HANDOFF_HOP_PREFIX);
  h->out_headers = xcalloc(req->n_headers + 1, sizeof *h->out_headers);
  if (h->forward_path) {
    h->out_headers[h->n_out_headers++] = (http_header){xstrdup(FACET_FORWARDED_HEADER), "1"};
    for (size_t i = 0; i < req->n_headers; i++) {
      const http_header *hd = &req->headers[i];
      if (route_hop_by_hop(hd->name) || strcasecmp(hd->name, FACET_FORWARDED_HEADER) == 0) continue;
      h->out_headers[h->n_out_headers++] = (http_header){xstrdup(hd->name), hd->value};
    }
    return;
  }
  for (size_t i = 0; i < req->n_headers; i++) {
    const http_header *hd = &req->headers[i];
    /* The client's own framing goes under a prefix, so that the tenant sees
     * the headers it would have seen in a shared process; a client's header
     * that looks like one of those is not passed on. */
    if (strncasecmp(hd->name, HANDOFF_HOP_PREFIX, prefix) == 0) continue;
    http_header *out = &h->out_headers[h->n_out_headers++];
    out->name = route_hop_by_hop(hd->name) ? xasprintf("%s%s", HANDOFF_HOP_PREFIX, hd->name)
                                             : xstrdup(hd->name);
    out->value = hd->value; /* the request's, which outlives the sending */
  }
}

static void on_timeout(uv_timer_t *timer) {
  handoff *h = timer->data;
  if (!h->started) fail_peer(h, 504, "did not answer in time");
}

static void start(handoff *h);

/* Refused: nothing was sent, so the request goes where its tenant is now. */
static void on_closed_retry(uv_handle_t *handle) {
  handoff *h = handle->data;
  if (--h->handles > 0) return;
  tenant *t = h->t;
  worker *w = h->w;
  if (h->req == NULL) { /* cannot happen: nothing else ends a handoff before it connects */
    handoff_free(h);
    return;
  }
  if (h->forward_path) {
    /* Nothing was sent, but the owner is not reachable from here. */
    h->handles = 0;
    fail_peer(h, 503, "cannot be reached; try again");
    return;
  }
  if (t->placement == TENANT_CORDONED) {
    t->cordon_ready = 0; /* the supervisor will say when it is back */
    hold(h);
    return;
  }
  http_request *req = h->req;
  h->req = NULL;
  handoff_end(h);
  if (t->placement == TENANT_SUSPENDED) ingress_respond_suspended(t, req);
  else ingress_on_request(&w->ingress, req); /* back in the shared pool */
}

static void on_connect(uv_connect_t *c, int status) {
  handoff *h = c->data;
  if (h->req == NULL) return; /* ended meanwhile (timeout, shutdown): its handles are closing */
  if (status != 0) {
    uv_close((uv_handle_t *)&h->conn, on_closed_retry);
    uv_close((uv_handle_t *)&h->timer, on_closed_retry);
    return;
  }
  build_headers(h);
  http_client_request out = {
      .method = h->req->method,
      .target = h->req->target,
      .headers = h->out_headers,
      .n_headers = h->n_out_headers,
      .body = h->req->body,
      .body_len = h->req->body_len,
      .keep_alive = 0,
      /* The head is timed by h->timer (from before the connection). */
      .idle_timeout_ms = HANDOFF_TIMEOUT_MS,
  };
  h->client = http_client_new_stream(h->w->loop, (uv_stream_t *)&h->conn, &client_callbacks, h);
  int rc = http_client_send(h->client, &out);
  if (rc != 0) fail_peer(h, 502, "cannot be reached");
}

static void start(handoff *h) {
  worker *w = h->w;
  uv_pipe_init(w->loop, &h->conn, 0);
  uv_timer_init(w->loop, &h->timer);
  h->conn.data = h->timer.data = h;
  h->handles = 2;
  h->connect.data = h;
  uv_timer_start(&h->timer, on_timeout, HANDOFF_TIMEOUT_MS, 0);
  uv_pipe_connect(&h->connect, &h->conn, h->forward_path ? h->forward_path : h->t->cordon_socket,
                  on_connect);
}

/* A handoff of req to the tenant's dedicated process (path NULL) or to the
 * node that owns its facets, live from here; NULL when the request waits
 * for its body first. The body goes on whole (with a Content-Length): the
 * request comes back through ingress_on_request once it has all arrived. */
static handoff *handoff_begin(worker *w, tenant *t, http_request *req, const char *path) {
  if (req->body_streamed) {
    if (http_request_buffer_body(req) != 0)
      http_respond_error(req, 503, "the request cannot be handed on", NULL);
    return NULL;
  }
  handoff *h = xcalloc(1, sizeof *h);
  h->w = w;
  h->t = t;
  h->req = req;
  h->forward_path = path ? xstrdup(path) : NULL;
  h->queued_ns = time_mono_ns();
  h->next_live = live;
  if (live) live->prev_live = h;
  live = h;
  return h;
}

void handoff_submit(worker *w, tenant *t, http_request *req) {
  handoff *h = handoff_begin(w, t, req, NULL);
  if (h == NULL) return;
  t->handoffs++;
  if (t->cordon_ready) start(h);
  else hold(h);
}

void handoff_forward(worker *w, tenant *t, http_request *req, const char *path) {
  handoff *h = handoff_begin(w, t, req, path);
  if (h == NULL) return;
  log_write(LOG_DEBUG, t->name, req->id, NULL, "forwarded to the node that owns its facets");
  start(h);
}

void handoff_flush(worker *w, tenant *t) {
  (void)w;
  if (t->placement == TENANT_CORDONED && !t->cordon_ready) return;
  handoff *h = t->handoff_waiting;
  t->handoff_waiting = NULL;
  while (h) {
    handoff *next = h->next;
    h->next = NULL;
    if (t->placement == TENANT_CORDONED) {
      start(h);
    } else {
      http_request *req = h->req;
      h->req = NULL;
      handoff_end(h);
      if (t->placement == TENANT_SUSPENDED) ingress_respond_suspended(t, req);
      else ingress_on_request(&w->ingress, req);
    }
    h = next;
  }
}

void handoff_stop(worker *w) {
  for (tenant *t = w->tenants; t; t = t->next) t->handoff_waiting = NULL;
  while (live) fail(live, 503, "worker process shutting down");
  if (w->handoff_timer_on && !uv_is_closing((uv_handle_t *)&w->handoff_timer))
    uv_close((uv_handle_t *)&w->handoff_timer, NULL);
}
