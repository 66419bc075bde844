/*
 * Handoff: the requests of a cordoned tenant that reach a shared worker
 * process (they share one listening socket, so any of them may get one) are
 * forwarded to the tenant's dedicated process and its answer is relayed back.
 *
 * The dedicated process serves plain HTTP/1.1 on a private loopback socket
 * that the supervisor owns and keeps open across the process's restarts, so
 * it runs the very same ingress path as a shared process and a request sent
 * while it restarts waits in the socket's backlog. One connection per
 * request ("Connection: close"): nothing is ever sent twice, so a request
 * that the dedicated process may have run is never retried. A request that
 * was provably not sent (the connection was refused) goes wherever the
 * tenant is now: held, run here again, or refused as suspended.
 *
 * The client sees the dedicated process's status, headers and body; the
 * framing headers (Date, Content-Length, Connection) are this process's.
 */
#include <llhttp.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base.h"
#include "worker.h"

#define HANDOFF_WAIT_MS 5000        /* held this long while the dedicated process is not ready */
#define HANDOFF_SWEEP_MS 50
#define HANDOFF_TIMEOUT_MS 120000   /* backstop: the dedicated process enforces the wall limit */
#define HANDOFF_MAX_RESPONSE (256u << 20)

typedef struct buffer_t buffer_t;

typedef struct handoff {
  uv_tcp_t tcp;
  uv_connect_t connect;
  uv_write_t write;
  uv_timer_t timer;
  worker *w;
  tenant *t;
  http_request *req;
  uint64_t queued_ns;
  struct handoff *next;        /* in t->handoff_waiting */
  char *out;                   /* the request as sent */
  size_t out_len;
  llhttp_t parser;
  int status;
  http_header *headers;
  size_t n_headers, cap_headers;
  buffer_t *field, *value;     /* the header being read, in pieces */
  int in_value;
  uint8_t *body;
  size_t body_len, body_cap;
  int complete;                /* the whole response is in */
  int handles;                 /* open libuv handles */
  struct handoff *prev_live, *next_live; /* every handoff not yet ended */
} handoff;

static handoff *live;

/* ---- small growable strings ---- */

struct buffer_t {
  char *data;
  size_t len, cap;
};

static void buf_append(buffer_t **b, const char *data, size_t len) {
  if (*b == NULL) *b = xcalloc(1, sizeof **b);
  buffer_t *x = *b;
  if (x->len + len + 1 > x->cap) {
    x->cap = (x->len + len + 1) * 2;
    x->data = xrealloc(x->data, x->cap);
  }
  memcpy(x->data + x->len, data, len);
  x->len += len;
  x->data[x->len] = '\0';
}

static char *buf_take(buffer_t **b) {
  if (*b == NULL) return xstrdup("");
  char *s = (*b)->data ? (*b)->data : xstrdup("");
  free(*b);
  *b = NULL;
  return s;
}

/* ---- lifecycle ---- */

static void handoff_free(handoff *h) {
  for (size_t i = 0; i < h->n_headers; i++) {
    free(h->headers[i].name);
    free(h->headers[i].value);
  }
  free(h->headers);
  free(buf_take(&h->field));
  free(buf_take(&h->value));
  free(h->body);
  free(h->out);
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
  if (t->handoffs > 0) t->handoffs--;
  worker_cordon_settled(h->w, t);
  if (h->handles == 0) {
    worker *w = h->w;
    handoff_free(h);
    worker_maybe_exit(w);
    return;
  }
  /* Closing already when a retry was under way as the process shut down. */
  if (!uv_is_closing((uv_handle_t *)&h->tcp)) uv_close((uv_handle_t *)&h->tcp, on_handle_closed);
  if (!uv_is_closing((uv_handle_t *)&h->timer)) uv_close((uv_handle_t *)&h->timer, on_handle_closed);
}

static void fail(handoff *h, int status, const char *message) {
  if (h->req) {
    json_t *extra = json_pack("{s:s, s:s}", "tenant", h->t->name, "request_id", h->req->id);
    char *text = json_dumps(extra, JSON_COMPACT);
    json_decref(extra);
    log_write(LOG_WARN, h->t->name, h->req->id, NULL, "handoff failed: %s", message);
    stats_answered_here(h->t, status);
    http_respond_error(h->req, status, message, text);
    free(text);
  }
  handoff_end(h);
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

static void push_header(handoff *h) {
  if (h->field == NULL) return;
  if (h->n_headers == h->cap_headers) {
    h->cap_headers = h->cap_headers ? h->cap_headers * 2 : 16;
    h->headers = xrealloc(h->headers, h->cap_headers * sizeof *h->headers);
  }
  h->headers[h->n_headers].name = buf_take(&h->field);
  h->headers[h->n_headers].value = buf_take(&h->value);
  h->n_headers++;
  h->in_value = 0;
}

static int on_header_field(llhttp_t *p, const char *at, size_t len) {
  handoff *h = p->data;
  if (h->in_value) push_header(h);
  buf_append(&h->field, at, len);
  return 0;
}

static int on_header_value(llhttp_t *p, const char *at, size_t len) {
  handoff *h = p->data;
  h->in_value = 1;
  buf_append(&h->value, at, len);
  return 0;
}

static int on_headers_complete(llhttp_t *p) {
  handoff *h = p->data;
  push_header(h);
  h->status = p->status_code;
  /* A HEAD answer has no body whatever its Content-Length says. */
  return h->req && strcmp(h->req->method, "HEAD") == 0 ? 1 : 0;
}

static int on_body(llhttp_t *p, const char *at, size_t len) {
  handoff *h = p->data;
  if (h->body_len + len > HANDOFF_MAX_RESPONSE) return -1;
  if (h->body_len + len > h->body_cap) {
    h->body_cap = (h->body_len + len) * 2;
    h->body = xrealloc(h->body, h->body_cap);
  }
  memcpy(h->body + h->body_len, at, len);
  h->body_len += len;
  return 0;
}

static int on_message_complete(llhttp_t *p) {
  handoff *h = p->data;
  h->complete = 1;
  return HPE_PAUSED;
}

static llhttp_settings_t parser_settings;

static void relay(handoff *h) {
  if (h->req) http_respond(h->req, h->status, h->headers, h->n_headers, h->body, h->body_len);
  handoff_end(h);
}

static void alloc_cb(uv_handle_t *handle, size_t suggested, uv_buf_t *buf) {
  (void)handle;
  buf->base = xmalloc(suggested);
  buf->len = suggested;
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  handoff *h = s->data;
  if (h->complete) {
    free(buf->base);
    return;
  }
  if (nread > 0) {
    llhttp_errno_t e = llhttp_execute(&h->parser, buf->base, (size_t)nread);
    free(buf->base);
    if (h->complete) relay(h);
    else if (e != HPE_OK) fail(h, 502, "the tenant's dedicated process sent a malformed response");
    return;
  }
  free(buf->base);
  if (nread == 0) return;
  if (nread == UV_EOF && llhttp_finish(&h->parser) == HPE_OK && h->complete) {
    relay(h);
    return;
  }
  /* It may have run the request: never send it again. */
  fail(h, 502, "the tenant's dedicated process failed while handling the request");
}

/* ---- the request ---- */

static void serialize(handoff *h) {
  http_request *req = h->req;
  buffer_t *b = NULL;
  char *line = xasprintf("%s %s HTTP/1.1\r\n", req->method, req->target);
  buf_append(&b, line, strlen(line));
  free(line);
  for (size_t i = 0; i < req->n_headers; i++) {
    const http_header *hd = &req->headers[i];
    /* The client's own framing goes under a prefix, so that the tenant sees
     * the headers it would have seen in a shared process; a client's header
     * that looks like one of those is not passed on. */
    if (strncasecmp(hd->name, HANDOFF_HOP_PREFIX, strlen(HANDOFF_HOP_PREFIX)) == 0) continue;
    if (route_hop_by_hop(hd->name)) buf_append(&b, HANDOFF_HOP_PREFIX, strlen(HANDOFF_HOP_PREFIX));
    buf_append(&b, hd->name, strlen(hd->name));
    buf_append(&b, ": ", 2);
    buf_append(&b, hd->value, strlen(hd->value));
    buf_append(&b, "\r\n", 2);
  }
  line = xasprintf("Content-Length: %zu\r\nConnection: close\r\n\r\n", req->body_len);
  buf_append(&b, line, strlen(line));
  free(line);
  if (req->body_len) buf_append(&b, (const char *)req->body, req->body_len);
  h->out_len = b->len;
  h->out = buf_take(&b);
}

static void on_write(uv_write_t *wr, int status) {
  handoff *h = wr->data;
  if (status != 0 && !h->complete && h->req)
    fail(h, 502, "the tenant's dedicated process closed the connection");
}

static void on_timeout(uv_timer_t *timer) {
  handoff *h = timer->data;
  if (!h->complete) fail(h, 504, "the tenant's dedicated process did not answer in time");
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
    uv_close((uv_handle_t *)&h->tcp, on_closed_retry);
    uv_close((uv_handle_t *)&h->timer, on_closed_retry);
    return;
  }
  serialize(h);
  uv_buf_t buf = uv_buf_init(h->out, (unsigned)h->out_len);
  h->write.data = h;
  int rc = uv_write(&h->write, (uv_stream_t *)&h->tcp, &buf, 1, on_write);
  if (rc == 0) rc = uv_read_start((uv_stream_t *)&h->tcp, alloc_cb, on_read);
  if (rc != 0) fail(h, 502, "cannot reach the tenant's dedicated process");
}

static void start(handoff *h) {
  worker *w = h->w;
  struct sockaddr_in addr;
  uv_ip4_addr("127.0.0.1", h->t->cordon_port, &addr);
  uv_tcp_init(w->loop, &h->tcp);
  uv_timer_init(w->loop, &h->timer);
  h->tcp.data = h->timer.data = h;
  h->handles = 2;
  llhttp_init(&h->parser, HTTP_RESPONSE, &parser_settings);
  h->parser.data = h;
  h->connect.data = h;
  uv_timer_start(&h->timer, on_timeout, HANDOFF_TIMEOUT_MS, 0);
  int rc = uv_tcp_connect(&h->connect, &h->tcp, (const struct sockaddr *)&addr, on_connect);
  if (rc != 0) fail(h, 503, "cannot reach the tenant's dedicated process");
}

void handoff_submit(worker *w, tenant *t, http_request *req) {
  /* The body goes on whole (with a Content-Length): the request comes back
   * through ingress_on_request once it has all arrived. */
  if (req->body_streamed) {
    if (http_request_buffer_body(req) != 0)
      http_respond_error(req, 503, "the request cannot be handed to the tenant's process", NULL);
    return;
  }
  if (parser_settings.on_message_complete == NULL) {
    llhttp_settings_init(&parser_settings);
    parser_settings.on_header_field = on_header_field;
    parser_settings.on_header_value = on_header_value;
    parser_settings.on_headers_complete = on_headers_complete;
    parser_settings.on_body = on_body;
    parser_settings.on_message_complete = on_message_complete;
  }
  handoff *h = xcalloc(1, sizeof *h);
  h->w = w;
  h->t = t;
  h->req = req;
  h->queued_ns = time_mono_ns();
  h->next_live = live;
  if (live) live->prev_live = h;
  live = h;
  t->handoffs++;
  if (t->cordon_ready) start(h);
  else hold(h);
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
