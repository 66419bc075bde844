/*
 * Upstream connections: one TCP connection (TLS on top for https), the
 * HTTP/1.1 response parser, and the keep-alive pool.
 *
 * A connection serves one fetch at a time. It reports to that fetch once
 * per batch of input (fetch_conn_progress), never from inside the parser,
 * so the fetch may release or close the connection from its handler. Idle
 * pooled connections keep reading: an upstream that closes one (or sends
 * anything) gets it dropped from the pool at once.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "egress_int.h"
#include "llhttp.h"

#define READ_CHUNK (64 * 1024)
#define MAX_HEADER_BYTES (64 * 1024)
#define IDLE_TIMEOUT_MS 30000
#define MAX_IDLE_PER_ORIGIN 32
#define MAX_IDLE_TOTAL 1024

static llhttp_settings_t parser_settings;
static int parser_settings_ready;

static void conn_fail(conn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- building the response head ---- */

/* Header bytes are Latin-1 by HTTP's rules; JSON wants UTF-8. */
static json_t *latin1_string(const char *s, size_t n) {
  char *u = xmalloc(2 * n + 1);
  json_t *j = json_stringn(u, latin1_to_utf8(s, n, u));
  free(u);
  return j;
}

static void hbuf_append(conn *c, const char *at, size_t len) {
  if (c->hbuf_len + len + 1 > c->hbuf_cap) {
    c->hbuf_cap = (c->hbuf_len + len + 1) * 2;
    c->hbuf = xrealloc(c->hbuf, c->hbuf_cap);
  }
  memcpy(c->hbuf + c->hbuf_len, at, len);
  c->hbuf_len += len;
}

static void response_reset(conn *c) {
  c->status = 0;
  free(c->reason);
  c->reason = NULL;
  json_decref(c->headers);
  c->headers = json_array();
  c->hbuf_len = 0;
  c->in_value = 0;
  c->header_bytes = 0;
  c->interim = 0;
  c->head_done = 0;
  c->complete = 0;
  c->leftover = 0;
  c->skip_body = 0;
  c->got_bytes = 0;
}

static conn *parser_conn(llhttp_t *p) { return p->data; }

static int count_header_bytes(conn *c, size_t len) {
  c->header_bytes += len;
  if (c->header_bytes <= MAX_HEADER_BYTES) return 0;
  conn_fail(c, "malformed response from %s: the header block is larger than %d bytes", c->host,
            MAX_HEADER_BYTES);
  return -1;
}

static int on_message_begin(llhttp_t *p) {
  conn *c = parser_conn(p);
  if (c->complete) {
    /* Bytes after a complete response: never reuse this connection. */
    c->leftover = 1;
    return -1;
  }
  return 0;
}

static int on_status(llhttp_t *p, const char *at, size_t len) {
  conn *c = parser_conn(p);
  if (count_header_bytes(c, len) != 0) return -1;
  hbuf_append(c, at, len);
  return 0;
}

static int on_status_complete(llhttp_t *p) {
  conn *c = parser_conn(p);
  free(c->reason);
  /* Latin-1 by HTTP's rules, like header values: UTF-8 for the JSON head. */
  c->reason = xmalloc(2 * c->hbuf_len + 1);
  size_t n = latin1_to_utf8(c->hbuf ? c->hbuf : "", c->hbuf_len, c->reason);
  c->reason[n] = '\0';
  c->hbuf_len = 0;
  return 0;
}

static int on_header_part(llhttp_t *p, const char *at, size_t len) {
  conn *c = parser_conn(p);
  if (count_header_bytes(c, len) != 0) return -1;
  hbuf_append(c, at, len);
  return 0;
}

static int on_header_part_complete(llhttp_t *p) {
  conn *c = parser_conn(p);
  json_t *s = latin1_string(c->hbuf ? c->hbuf : "", c->hbuf_len);
  json_array_append_new(c->headers, s ? s : json_string(""));
  c->hbuf_len = 0;
  c->in_value = !c->in_value;
  return 0;
}

/* llhttp skips the value callbacks for an empty value: keep the pairs even. */
static int on_header_field(llhttp_t *p, const char *at, size_t len) {
  conn *c = parser_conn(p);
  if (c->in_value) {
    json_array_append_new(c->headers, json_string(""));
    c->in_value = 0;
  }
  return on_header_part(p, at, len);
}

static int on_headers_complete(llhttp_t *p) {
  conn *c = parser_conn(p);
  if (c->in_value) {
    json_array_append_new(c->headers, json_string(""));
    c->in_value = 0;
  }
  c->status = p->status_code;
  if (c->status == 101) {
    conn_fail(c, "%s switched protocols (101), which fetch() does not support", c->host);
    return -1;
  }
  if (c->status >= 100 && c->status < 200) {
    c->interim = 1; /* 100 Continue, 103 Early Hints: wait for the real one */
    return 0;
  }
  if (c->fetch == NULL) {
    conn_fail(c, "unexpected response from %s", c->host);
    return -1;
  }
  c->head_done = 1;
  c->skip_body = fetch_on_head(c->fetch, c);
  return c->skip_body ? 1 : 0;
}

static int on_body(llhttp_t *p, const char *at, size_t len) {
  conn *c = parser_conn(p);
  if (c->fetch == NULL || fetch_on_body(c->fetch, at, len) != 0) {
    c->broken = 1;
    return -1;
  }
  return 0;
}

static int on_message_complete(llhttp_t *p) {
  conn *c = parser_conn(p);
  if (c->interim) {
    response_reset(c);
    return 0;
  }
  c->complete = 1;
  c->eof = c->eof || !llhttp_should_keep_alive(p);
  return 0;
}

static void settings_init(void) {
  if (parser_settings_ready) return;
  llhttp_settings_init(&parser_settings);
  parser_settings.on_message_begin = on_message_begin;
  parser_settings.on_status = on_status;
  parser_settings.on_status_complete = on_status_complete;
  parser_settings.on_header_field = on_header_field;
  parser_settings.on_header_field_complete = on_header_part_complete;
  parser_settings.on_header_value = on_header_part;
  parser_settings.on_header_value_complete = on_header_part_complete;
  parser_settings.on_headers_complete = on_headers_complete;
  parser_settings.on_body = on_body;
  parser_settings.on_message_complete = on_message_complete;
  parser_settings_ready = 1;
}

/* ---- lifetime ---- */

static void conn_free(conn *c) {
  tls_free(c->tls);
  free(c->parser);
  free(c->reason);
  free(c->hbuf);
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

int conn_send(conn *c, const void *data, size_t len) {
  if (c->state != CONN_BUSY) return UV_EPIPE;
  if (c->tls == NULL) return write_bytes(c, data, len);
  if (tls_write(c->tls, data, len) != 0) return UV_EPROTO;
  return flush_tls(c);
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
  llhttp_t *p = c->parser;
  llhttp_errno_t err = llhttp_execute(p, data, len);
  if (err == HPE_OK || c->leftover) return;
  if (!c->broken)
    conn_fail(c, "malformed response from %s: %s", c->host, llhttp_get_error_reason(p));
  c->broken = 1;
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
    } else if (!c->got_bytes) {
      conn_fail(c, "%s closed the connection without sending a response", c->host);
    } else if (llhttp_finish(c->parser) != HPE_OK || !c->complete) {
      /* A body delimited by the end of the connection completes here. */
      conn_fail(c, "%s closed the connection before the response was complete", c->host);
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
  settings_init();
  conn *c = xcalloc(1, sizeof *c);
  c->e = e;
  c->fetch = f;
  c->key = egress_url_origin(url);
  char *hh = egress_url_host_header(url);
  snprintf(c->host, sizeof c->host, "%s", hh);
  free(hh);
  c->headers = json_array();
  c->parser = xmalloc(sizeof(llhttp_t));
  llhttp_init(c->parser, HTTP_RESPONSE, &parser_settings);
  ((llhttp_t *)c->parser)->data = c;
  int rc = uv_tcp_init(e->loop, &c->tcp);
  if (rc != 0) {
    *why = uv_strerror(rc);
    conn_free(c);
    return NULL;
  }
  uv_timer_init(e->loop, &c->timer);
  c->tcp.data = c->timer.data = c;
  c->open_handles = 2;
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
