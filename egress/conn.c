/*
 * Upstream connections: one TCP connection (TLS on top for https), the
 * HTTP/1.1 exchange through http.h's client over it, and the keep-alive pool.
 *
 * The client speaks through a transport of this file's: requests go out
 * through TLS (or straight to the socket), and what TLS decrypts is fed to
 * it. Reading stays this file's: the fetch's flow control stops it, and idle
 * pooled connections keep reading so that an upstream that closes one (or
 * sends anything) gets it dropped from the pool at once.
 *
 * A connection serves one fetch at a time. It reports to that fetch once
 * per batch of input (fetch_conn_progress), never from inside the client's
 * callbacks, so the fetch may release or close the connection from its
 * handler.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "egress_int.h"

#define READ_CHUNK (64 * 1024)
#define IDLE_TIMEOUT_MS 30000
#define MAX_IDLE_PER_ORIGIN 32
#define MAX_IDLE_TOTAL 1024

static void conn_fail(conn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- the response, from the client ---- */

/* Header bytes are Latin-1 by HTTP's rules; JSON wants UTF-8. */
static json_t *latin1_string(const char *s, size_t n) {
  char *u = xmalloc(2 * n + 1);
  json_t *j = json_stringn(u, latin1_to_utf8(s, n, u));
  free(u);
  return j ? j : json_string("");
}

static void response_reset(conn *c) {
  c->status = 0;
  free(c->reason);
  c->reason = NULL;
  json_decref(c->headers);
  c->headers = json_array();
  c->head_done = 0;
  c->complete = 0;
  c->leftover = 0;
  c->got_bytes = 0;
}

static void on_head(http_client *hc, void *arg, const http_client_response *res) {
  (void)hc;
  conn *c = arg;
  c->status = res->status;
  free(c->reason);
  size_t n = strlen(res->reason);
  c->reason = xmalloc(2 * n + 1);
  c->reason[latin1_to_utf8(res->reason, n, c->reason)] = '\0';
  for (size_t i = 0; i < res->n_headers; i++) {
    const http_header *h = &res->headers[i];
    json_array_append_new(c->headers, latin1_string(h->name, strlen(h->name)));
    json_array_append_new(c->headers, latin1_string(h->value, strlen(h->value)));
  }
  if (c->fetch == NULL) return; /* cannot happen: only a busy connection is fed */
  c->head_done = 1;
  fetch_on_head(c->fetch, c); /* a HEAD answer's body is skipped by the client itself */
}

static void on_body(http_client *hc, void *arg, const uint8_t *data, size_t len) {
  conn *c = arg;
  if (c->fetch != NULL && fetch_on_body(c->fetch, (const char *)data, len) == 0) return;
  /* Over the fetch's size limit: nothing more is read from this one. */
  c->broken = 1;
  http_client_close(hc);
  c->http = NULL;
}

static void on_end(http_client *hc, void *arg, int status) {
  conn *c = arg;
  if (status == 0) {
    c->complete = 1;
    /* Not reusable: bytes past the response, or the upstream closes it. */
    if (!http_client_reusable(hc)) c->eof = 1;
    return;
  }
  const char *why = http_client_error(hc);
  switch (status) {
    case UV_E2BIG:
      conn_fail(c, "malformed response from %s: the header block is larger than %u bytes", c->host,
                HTTP_CLIENT_MAX_HEADER_BYTES);
      break;
    case UV_ENOTSUP:
      conn_fail(c, "%s switched protocols (101), which fetch() does not support", c->host);
      break;
    case UV_EPROTO:
      conn_fail(c, "malformed response from %s: %s", c->host, why);
      break;
    case UV_ECONNRESET:
      conn_fail(c, "%s closed the connection without sending a response", c->host);
      break;
    case UV_EOF:
      conn_fail(c, "%s closed the connection before the response was complete", c->host);
      break;
    default:
      conn_fail(c, "connection to %s failed: %s", c->host, why);
  }
}

static const http_client_callbacks client_callbacks = {
    .on_head = on_head, .on_body = on_body, .on_end = on_end};

/* ---- lifetime ---- */

static void conn_free(conn *c) {
  tls_free(c->tls);
  free(c->reason);
  json_decref(c->headers);
  free(c->key);
  free(c);
}

static void on_handle_closed(uv_handle_t *h) {
  conn *c = h->data;
  if (--c->open_handles == 0) conn_free(c);
}

static void pool_unlink(conn *c) {
  pool_slot *s = c->slot;
  if (s == NULL) return;
  for (conn **pp = &s->idle; *pp; pp = &(*pp)->next_idle) {
    if (*pp == c) {
      *pp = c->next_idle;
      s->n_idle--;
      c->e->n_idle--;
      break;
    }
  }
  c->slot = NULL;
  c->next_idle = NULL;
}

void conn_close(conn *c) {
  if (c->state == CONN_CLOSED) return;
  if (c->state == CONN_IDLE) pool_unlink(c);
  c->state = CONN_CLOSED;
  c->fetch = NULL;
  if (c->http) http_client_close(c->http);
  c->http = NULL;
  uv_close((uv_handle_t *)&c->tcp, on_handle_closed);
  uv_close((uv_handle_t *)&c->timer, on_handle_closed);
}

/* Records why the connection failed; the fetch hears of it after the batch. */
static void conn_fail(conn *c, const char *fmt, ...) {
  if (c->broken && c->error) return; /* the first reason is the useful one */
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->error_buf, sizeof c->error_buf, fmt, ap);
  va_end(ap);
  c->error = c->error_buf;
  c->broken = 1;
}

/* Hands the outcome of a batch of input (or of a failure) to the fetch. */
static void report(conn *c) {
  fetch *f = c->fetch;
  if (f == NULL) {
    if (c->broken || c->eof) conn_close(c);
    return;
  }
  if (c->state == CONN_CONNECTING || c->state == CONN_HANDSHAKE ||
      (c->broken && !c->head_done)) {
    int retry = c->reused && !c->got_bytes && c->state == CONN_BUSY;
    fetch_conn_failed(f, c, c->error ? c->error : "connection failed", retry);
    return;
  }
  fetch_conn_progress(f, c);
}

/* ---- output ---- */

typedef struct conn_write {
  uv_write_t req;
  size_t len;
  uint8_t data[];
} conn_write;

static void on_written(uv_write_t *req, int status) {
  conn_write *w = container_of(req, conn_write, req);
  conn *c = req->handle->data;
  memset(w->data, 0, w->len); /* requests may carry injected credentials */
  free(w);
  if (status == 0 || status == UV_ECANCELED || c->state == CONN_CLOSED) return;
  conn_fail(c, "could not send the request to %s: %s", c->host, uv_strerror(status));
  report(c);
}

static int write_bytes(conn *c, const void *data, size_t len) {
  conn_write *w = xmalloc(sizeof *w + len);
  w->len = len;
  memcpy(w->data, data, len);
  uv_buf_t buf = uv_buf_init((char *)w->data, (unsigned int)len);
  int rc = uv_write(&w->req, (uv_stream_t *)&c->tcp, &buf, 1, on_written);
  if (rc != 0) {
    memset(w->data, 0, len);
    free(w);
  }
  return rc;
}

static int flush_tls(conn *c) {
  size_t len;
  uint8_t *out = tls_take_output(c->tls, &len);
  if (out == NULL) return 0;
  int rc = write_bytes(c, out, len);
  free(out);
  return rc;
}

/* The client's transport: its bytes through TLS, or straight to the socket. */
static int transport_write(void *ctx, const void *data, size_t len) {
  conn *c = ctx;
  if (c->tls == NULL) return write_bytes(c, data, len);
  if (tls_write(c->tls, data, len) != 0) return UV_EPROTO;
  return flush_tls(c);
}

/* Reading is this file's (see the top): the client's wish changes nothing. */
static void transport_read(void *ctx, int on) {
  (void)ctx;
  (void)on;
}

static size_t transport_queued(void *ctx) {
  conn *c = ctx;
  return c->tcp.write_queue_size;
}

int conn_send(conn *c, const http_client_request *req) {
  if (c->state != CONN_BUSY || c->http == NULL) return UV_EPIPE;
  int rc = http_client_send(c->http, req);
  return rc == UV_EBUSY ? UV_EPIPE : rc;
}

/* ---- input ---- */

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  static char chunk[READ_CHUNK];
  (void)h;
  (void)suggested;
  *buf = uv_buf_init(chunk, sizeof chunk);
}

static void parse(conn *c, const char *data, size_t len) {
  if (len == 0) return;
  if (c->broken) return;
  if (c->complete) {
    c->leftover = 1;
    return;
  }
  c->got_bytes = 1;
  if (c->http) http_client_feed(c->http, data, len);
}

static void handshake(conn *c);

static void on_tls_input(conn *c, const char *data, size_t len) {
  static char plain[READ_CHUNK];
  tls_feed(c->tls, data, len);
  if (c->state == CONN_HANDSHAKE) {
    handshake(c);
    if (c->state != CONN_BUSY) return;
  }
  for (;;) {
    int n = tls_read(c->tls, plain, sizeof plain);
    if (n > 0) {
      parse(c, plain, (size_t)n);
      continue;
    }
    if (n == -2) c->eof = 1;
    if (n == -1) conn_fail(c, "%s", tls_error(c->tls));
    break;
  }
  if (flush_tls(c) != 0) conn_fail(c, "could not write to %s", c->host);
}

/* The upstream closed its side (or the read failed). */
static void on_input_end(conn *c, ssize_t status) {
  c->eof = 1;
  uv_read_stop((uv_stream_t *)&c->tcp);
  if (c->state == CONN_IDLE || c->fetch == NULL) {
    conn_close(c);
    return;
  }
  if (c->state == CONN_HANDSHAKE) {
    conn_fail(c, "TLS handshake with %s failed: the connection was closed", c->host);
  } else if (!c->complete && !c->broken) {
    if (status != UV_EOF) {
      conn_fail(c, "connection to %s failed: %s", c->host, uv_strerror((int)status));
    } else if (c->http) {
      /* A body delimited by the end of the connection completes here. */
      http_client_feed_end(c->http, UV_EOF);
    }
  }
  report(c);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  conn *c = s->data;
  if (nread == 0 || c->state == CONN_CLOSED) return;
  if (nread < 0) {
    on_input_end(c, nread);
    return;
  }
  if (c->state == CONN_IDLE) {
    conn_close(c); /* an idle connection has nothing to say */
    return;
  }
  if (c->tls) on_tls_input(c, buf->base, (size_t)nread);
  else parse(c, buf->base, (size_t)nread);
  if (c->state == CONN_CLOSED) return;
  if (c->eof && !c->complete && !c->broken) {
    on_input_end(c, UV_EOF);
    return;
  }
  report(c);
}

void conn_pause(conn *c, int paused) {
  if (c->state != CONN_BUSY || c->paused == paused || c->eof) return;
  c->paused = paused;
  if (paused) uv_read_stop((uv_stream_t *)&c->tcp);
  else uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
}

/* ---- connecting ---- */

static void ready(conn *c) {
  uv_timer_stop(&c->timer);
  c->state = CONN_BUSY;
  fetch_conn_ready(c->fetch, c);
}

static void handshake(conn *c) {
  int rc = tls_handshake(c->tls);
  if (flush_tls(c) != 0) conn_fail(c, "could not write to %s", c->host);
  if (rc < 0) conn_fail(c, "%s", tls_error(c->tls));
  if (c->broken) {
    report(c);
    return;
  }
  if (rc == 1) ready(c);
}

static void on_connect_timeout(uv_timer_t *t) {
  conn *c = t->data;
  if (c->state != CONN_CONNECTING && c->state != CONN_HANDSHAKE) return;
  conn_fail(c, "connecting to %s timed out after %u ms", c->host, c->connect_timeout_ms);
  report(c);
}

static void on_connect(uv_connect_t *req, int status) {
  conn *c = container_of(req, conn, connect_req);
  if (status == UV_ECANCELED || c->state == CONN_CLOSED) return;
  if (status < 0) {
    conn_fail(c, "could not connect to %s: %s", c->host, uv_strerror(status));
    report(c);
    return;
  }
  int rc = uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
  if (rc != 0) {
    conn_fail(c, "could not read from %s: %s", c->host, uv_strerror(rc));
    report(c);
    return;
  }
  if (c->tls == NULL) {
    ready(c);
    return;
  }
  c->state = CONN_HANDSHAKE;
  handshake(c);
}

conn *conn_open(egress *e, fetch *f, const egress_url *url, const struct sockaddr *addr,
                uint32_t connect_timeout_ms, const char **why) {
  conn *c = xcalloc(1, sizeof *c);
  c->e = e;
  c->fetch = f;
  c->key = egress_url_origin(url);
  char *hh = egress_url_host_header(url);
  snprintf(c->host, sizeof c->host, "%s", hh);
  free(hh);
  c->headers = json_array();
  int rc = uv_tcp_init(e->loop, &c->tcp);
  if (rc != 0) {
    *why = uv_strerror(rc);
    conn_free(c);
    return NULL;
  }
  uv_timer_init(e->loop, &c->timer);
  c->tcp.data = c->timer.data = c;
  c->open_handles = 2;
  http_client_transport tr = {.write = transport_write, .read = transport_read,
                              .write_queued = transport_queued, .ctx = c};
  c->http = http_client_new(e->loop, &tr, &client_callbacks, c);
  c->state = CONN_CONNECTING;
  uv_tcp_nodelay(&c->tcp, 1);
  if (url->https) c->tls = tls_new(e->ssl_ctx, url->host, url->ip);
  rc = uv_tcp_connect(&c->connect_req, &c->tcp, addr, on_connect);
  if (rc != 0) {
    *why = uv_strerror(rc);
    conn_close(c);
    return NULL;
  }
  c->connect_timeout_ms = connect_timeout_ms;
  uv_timer_start(&c->timer, on_connect_timeout, connect_timeout_ms, 0);
  return c;
}

/* ---- the pool ---- */

static pool_slot *slot_for(egress *e, const char *key, int create) {
  for (pool_slot *s = e->pool; s; s = s->next)
    if (strcmp(s->key, key) == 0) return s;
  if (!create) return NULL;
  pool_slot *s = xcalloc(1, sizeof *s);
  s->key = xstrdup(key);
  s->next = e->pool;
  e->pool = s;
  return s;
}

/* The pool key of url's origin, as egress_url_origin() spells it, without allocating. */
static const char *origin_key(const egress_url *url, char *buf, size_t len) {
  char port[16];
  size_t n = 0;
  int p = url->port;
  do port[n++] = (char)('0' + p % 10); while ((p /= 10) > 0 && n < sizeof port);
  const char *parts[] = {url->https ? "https://" : "http://", url->ip == 6 ? "[" : "", url->host,
                         url->ip == 6 ? "]" : ""};
  size_t o = 0;
  for (size_t i = 0; i < ARRAY_SIZE(parts); i++) {
    size_t k = strlen(parts[i]);
    if (o + k + 1 >= len) return NULL;
    memcpy(buf + o, parts[i], k);
    o += k;
  }
  if (!url->default_port) {
    if (o + n + 2 >= len) return NULL;
    buf[o++] = ':';
    while (n > 0) buf[o++] = port[--n];
  }
  buf[o] = '\0';
  return buf;
}

conn *conn_take(egress *e, fetch *f, const egress_url *url) {
  char buf[300];
  const char *key = origin_key(url, buf, sizeof buf);
  pool_slot *s = key ? slot_for(e, key, 0) : NULL;
  if (s == NULL || s->idle == NULL) return NULL;
  conn *c = s->idle;
  pool_unlink(c);
  uv_timer_stop(&c->timer);
  c->state = CONN_BUSY;
  c->fetch = f;
  response_reset(c);
  return c;
}

static void on_idle_timeout(uv_timer_t *t) { conn_close(t->data); }

void conn_release(conn *c) {
  if (c->state == CONN_CLOSED) return;
  int reusable = c->state == CONN_BUSY && c->complete && !c->leftover && !c->broken && !c->eof &&
                 !c->e->stopping;
  c->fetch = NULL;
  if (!reusable) {
    conn_close(c);
    return;
  }
  egress *e = c->e;
  pool_slot *s = slot_for(e, c->key, 1);
  if (s->n_idle >= MAX_IDLE_PER_ORIGIN || e->n_idle >= MAX_IDLE_TOTAL) {
    conn_close(c);
    return;
  }
  if (c->paused) {
    c->paused = 0;
    uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
  }
  response_reset(c);
  c->reused = 1;
  c->state = CONN_IDLE;
  c->slot = s;
  c->next_idle = s->idle;
  s->idle = c;
  s->n_idle++;
  e->n_idle++;
  uv_timer_start(&c->timer, on_idle_timeout, IDLE_TIMEOUT_MS, 0);
}

void conn_pool_close(egress *e) {
  for (pool_slot *s = e->pool; s; s = s->next)
    while (s->idle) conn_close(s->idle);
}
