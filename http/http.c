/*
 * The HTTP/1.1 server: listener, connections and their state machine,
 * request parsing with llhttp into a per-request arena, and the handler
 * hand-off (one request per connection at a time).
 *
 * A connection moves NEW -> HEAD -> BODY -> HANDLER -> IDLE -> HEAD ... and
 * ends in CLOSING. One timer per connection serves every deadline; which one
 * it currently enforces is conn->timer_mode. Bytes that arrive while a
 * request is with the handler (pipelining) wait in conn->inbuf; the parser is
 * paused at each message end so that nothing past it is consumed.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <strings.h>
#include <unistd.h>

#include "base.h"
#include "http_int.h"

/* Reusing a connection's previous request saves the allocations of the hot
 * path, but would hide a handler's use-after-respond from AddressSanitizer. */
#if defined(__SANITIZE_ADDRESS__)
#define HTTP_RECYCLE 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HTTP_RECYCLE 0
#endif
#endif
#ifndef HTTP_RECYCLE
#define HTTP_RECYCLE 1
#endif

static void conn_close(http_conn *c);
static void conn_fail(http_conn *c, int status, const char *message);
static void conn_drain(http_conn *c);
static void conn_update_timer(http_conn *c);
static void conn_dispatch(http_conn *c);
static void server_maybe_closed(http_server *s);

/* ---- requests and their arena ---- */

static void req_reset(http_req *r) {
  /* Keep the buffers of ordinary requests; give back what a big one grew. */
  if (r->arena != r->arena_inline && r->arena_cap > 4 * HTTP_ARENA_INLINE) {
    free(r->arena);
    r->arena = r->arena_inline;
    r->arena_cap = sizeof r->arena_inline;
  }
  if (r->hdrs != r->hdrs_inline && r->hdr_cap > 4 * HTTP_HEADERS_INLINE) {
    free(r->hdrs);
    free(r->offs);
    r->hdrs = r->hdrs_inline;
    r->offs = r->offs_inline;
    r->hdr_cap = HTTP_HEADERS_INLINE;
  }
  if (r->body_cap > 65536) {
    free(r->body_buf);
    r->body_buf = NULL;
    r->body_cap = 0;
  }
  memset(r, 0, offsetof(http_req, arena));
}

static http_req *req_new(void) {
  http_req *r = xmalloc(sizeof *r);
  r->arena = r->arena_inline;
  r->arena_cap = sizeof r->arena_inline;
  r->offs = r->offs_inline;
  r->hdrs = r->hdrs_inline;
  r->hdr_cap = HTTP_HEADERS_INLINE;
  r->body_buf = NULL;
  r->body_cap = 0;
  req_reset(r);
  return r;
}

static void req_free(http_req *r) {
  if (r == NULL) return;
  if (r->arena != r->arena_inline) free(r->arena);
  if (r->hdrs != r->hdrs_inline) {
    free(r->hdrs);
    free(r->offs);
  }
  free(r->body_buf);
  free(r);
}

/* Room for n more bytes plus a terminating NUL. */
static void arena_reserve(http_req *r, size_t n) {
  if (r->arena_cap - r->arena_len > n) return;
  size_t cap = r->arena_cap * 2;
  while (cap - r->arena_len <= n) cap *= 2;
  if (r->arena == r->arena_inline) {
    char *a = xmalloc(cap);
    memcpy(a, r->arena, r->arena_len);
    r->arena = a;
  } else {
    r->arena = xrealloc(r->arena, cap);
  }
  r->arena_cap = cap;
}

static size_t arena_put(http_req *r, const char *p, size_t n) {
  arena_reserve(r, n);
  size_t off = r->arena_len;
  memcpy(r->arena + off, p, n);
  r->arena_len += n;
  return off;
}

static void arena_end_string(http_req *r) {
  arena_reserve(r, 0);
  r->arena[r->arena_len++] = '\0';
}

static void header_begin(http_req *r) {
  if (r->pub.n_headers == r->hdr_cap) {
    size_t cap = r->hdr_cap * 2;
    size_t(*offs)[2] = xmalloc(cap * sizeof *offs);
    http_header *hdrs = xmalloc(cap * sizeof *hdrs);
    memcpy(offs, r->offs, r->pub.n_headers * sizeof *offs);
    if (r->hdrs != r->hdrs_inline) {
      free(r->hdrs);
      free(r->offs);
    }
    r->offs = offs;
    r->hdrs = hdrs;
    r->hdr_cap = cap;
  }
  r->offs[r->pub.n_headers][0] = r->arena_len;
  r->offs[r->pub.n_headers][1] = r->arena_len;
  r->pub.n_headers++;
}

int http_request_peer(const http_request *req, char *buf, size_t len) {
  struct sockaddr_storage ss;
  int n = sizeof ss;
  if (req->conn == NULL || len == 0 ||
      uv_tcp_getpeername(&req->conn->tcp, (struct sockaddr *)&ss, &n) != 0)
    return -1;
  if (ss.ss_family == AF_INET)
    return uv_ip4_name((const struct sockaddr_in *)&ss, buf, len) == 0 ? 0 : -1;
  if (ss.ss_family == AF_INET6)
    return uv_ip6_name((const struct sockaddr_in6 *)&ss, buf, len) == 0 ? 0 : -1;
  return -1;
}

const char *http_request_header(const http_request *req, const char *name) {
  for (size_t i = 0; i < req->n_headers; i++)
    if (strcasecmp(req->headers[i].name, name) == 0) return req->headers[i].value;
  return NULL;
}

/* ---- parser callbacks: they only record; closing happens after llhttp_execute ---- */

static void set_fail(http_conn *c, int status, const char *text) {
  c->fail_status = status;
  snprintf(c->fail_text, sizeof c->fail_text, "%s", text);
}

static void set_fail_limit(http_conn *c, int status, const char *what, size_t limit) {
  c->fail_status = status;
  snprintf(c->fail_text, sizeof c->fail_text, "%s exceeds the limit of %zu bytes", what, limit);
}

/* The head is counted as it arrives: line breaks and separators included. */
static int head_grow(http_conn *c, size_t n) {
  c->head_bytes += n;
  size_t max = c->server->config.max_header_bytes;
  if (c->head_bytes <= max) return 0;
  set_fail_limit(c, 431, "request header block", max);
  return -1;
}

static int on_message_begin(llhttp_t *p) {
  http_conn *c = p->data;
  c->phase = HTTP_PH_HEAD;
  c->head_bytes = 0;
  c->field_open = 0;
  req_free(c->req);
  c->req = c->spare ? c->spare : req_new();
  c->spare = NULL;
  return 0;
}

static int on_url(llhttp_t *p, const char *at, size_t len) {
  http_conn *c = p->data;
  if (head_grow(c, len)) return -1;
  arena_put(c->req, at, len);
  return 0;
}

/* RFC 9112 section 3.2: no whitespace or control characters in a target.
 * llhttp lets a tab and DEL through, which would reach request.url raw. */
static int on_url_complete(llhttp_t *p) {
  http_conn *c = p->data;
  http_req *r = c->req;
  for (size_t i = r->target_off; i < r->arena_len; i++) {
    unsigned char ch = (unsigned char)r->arena[i];
    if (ch <= 0x20 || ch == 0x7f) {
      set_fail(c, 400, "malformed request: invalid character in the request target");
      return -1;
    }
  }
  arena_end_string(r);
  return 0;
}

/* RFC 9110 section 5.1: a field name is a token. llhttp 8 accepts spaces in
 * names ("Host : x", "X A: 1"), which section 5.1 of RFC 9112 says must be
 * refused: an intermediary may read such a line differently than we do. */
static int is_tchar(unsigned char ch) {
  if ((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z'))
    return 1;
  return ch != '\0' && strchr("!#$%&'*+-.^_`|~", ch) != NULL;
}

static int on_header_field(llhttp_t *p, const char *at, size_t len) {
  http_conn *c = p->data;
  if (head_grow(c, len)) return -1;
  if (c->phase != HTTP_PH_HEAD) return 0; /* trailers: counted, not kept */
  if (!c->field_open) {
    header_begin(c->req);
    c->field_open = 1;
  }
  arena_put(c->req, at, len);
  return 0;
}

static int on_header_field_complete(llhttp_t *p) {
  http_conn *c = p->data;
  if (c->phase != HTTP_PH_HEAD) return 0;
  http_req *r = c->req;
  if (!c->field_open) header_begin(r);
  c->field_open = 0;
  size_t name_off = r->offs[r->pub.n_headers - 1][0];
  if (name_off == r->arena_len) {
    set_fail(c, 400, "malformed request: empty header name");
    return -1;
  }
  for (size_t i = name_off; i < r->arena_len; i++) {
    if (!is_tchar((unsigned char)r->arena[i])) {
      set_fail(c, 400, "malformed request: invalid character in a header name");
      return -1;
    }
  }
  arena_end_string(r);
  /* An empty value gets no on_header_value at all: its start is here. */
  r->offs[r->pub.n_headers - 1][1] = r->arena_len;
  return 0;
}

static int on_header_value(llhttp_t *p, const char *at, size_t len) {
  http_conn *c = p->data;
  if (head_grow(c, len)) return -1;
  if (c->phase != HTTP_PH_HEAD) return 0;
  arena_put(c->req, at, len);
  return 0;
}

static int on_header_value_complete(llhttp_t *p) {
  http_conn *c = p->data;
  if (head_grow(c, 4)) return -1; /* ": " and CRLF */
  if (c->phase != HTTP_PH_HEAD) return 0;
  arena_end_string(c->req);
  return 0;
}

static int expects_continue(const http_request *req) {
  const char *e = http_request_header(req, "expect");
  return e != NULL && strcasecmp(e, "100-continue") == 0;
}

static int on_headers_complete(llhttp_t *p) {
  http_conn *c = p->data;
  http_req *r = c->req;
  const http_server_config *cfg = &c->server->config;
  const char *method = llhttp_method_name((llhttp_method_t)p->method);
  size_t method_len = strlen(method);
  /* Request line: method, two spaces, "HTTP/1.1", CRLF; the final CRLF. */
  if (head_grow(c, method_len + 14)) return -1;
  if (p->http_major != 1) {
    set_fail(c, 505, "HTTP version not supported: only HTTP/1.x is served");
    return -1;
  }
  size_t method_off = arena_put(r, method, method_len);
  arena_end_string(r);

  /* The arena is complete: offsets become pointers. */
  char *a = r->arena;
  r->pub.method = a + method_off;
  r->pub.target = a + r->target_off;
  for (size_t i = 0; i < r->pub.n_headers; i++) {
    r->hdrs[i].name = a + r->offs[i][0];
    r->hdrs[i].value = a + r->offs[i][1];
  }
  r->pub.headers = r->hdrs;
  /* Of two credentials, which one counts is anyone's guess along the way:
   * none does (RFC 9110 11.6.2 allows one Authorization field). */
  /* And of two framings, a proxy may use one and this server the other: a
   * request smuggled in the body. llhttp refuses most such pairs, but not
   * a Transfer-Encoding whose value is empty (RFC 9112 6.1: a server may
   * reject a message with both; it does). */
  size_t authorizations = 0, lengths = 0, encodings = 0;
  for (size_t i = 0; i < r->pub.n_headers; i++) {
    authorizations += strcasecmp(r->hdrs[i].name, "authorization") == 0;
    lengths += strcasecmp(r->hdrs[i].name, "content-length") == 0;
    encodings += strcasecmp(r->hdrs[i].name, "transfer-encoding") == 0;
  }
  if (authorizations > 1) {
    set_fail(c, 400, "malformed request: more than one Authorization header");
    return -1;
  }
  if (lengths > 1 || (lengths && encodings)) {
    set_fail(c, 400, "malformed request: Content-Length with Transfer-Encoding, or twice");
    return -1;
  }
  r->pub.start_ns = time_mono_ns();
  r->is_head = p->method == HTTP_HEAD;
  r->http10 = p->http_minor == 0;
  c->phase = HTTP_PH_BODY;

  int chunked = (p->flags & F_CHUNKED) != 0;
  if (!chunked && (p->flags & F_CONTENT_LENGTH) && p->content_length > cfg->max_body_bytes) {
    set_fail_limit(c, 413, "request body", cfg->max_body_bytes);
    return -1;
  }
  r->body_expect = chunked ? cfg->max_body_bytes : (size_t)p->content_length;
  int has_body = chunked || p->content_length > 0;
  if (has_body && p->http_minor >= 1 && expects_continue(&r->pub)) {
    static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
    if (http__write_raw(c, cont, sizeof cont - 1) != 0) {
      c->fail_status = -1; /* the socket is gone: close without a response */
      return -1;
    }
  }
  size_t above = cfg->stream_body_above;
  if (above > 0 && has_body && (chunked || p->content_length > above)) {
    /* The handler gets the request now and the body as it comes. */
    http_server_int *si = c->server->conns;
    r->pub.body_streamed = 1;
    r->pub.keep_alive = llhttp_should_keep_alive(p) && !p->upgrade && !si->draining;
    c->ready = 1;
    return HPE_PAUSED;
  }
  return 0;
}

static void body_too_large(http_conn *c) {
  set_fail_limit(c, 413, "request body", c->server->config.max_body_bytes);
}

/* Chunk sizes announce the excess before the bytes come. */
static int on_chunk_header(llhttp_t *p) {
  http_conn *c = p->data;
  size_t max = c->server->config.max_body_bytes;
  if (p->content_length > max - c->req->pub.body_len) {
    body_too_large(c);
    return -1;
  }
  return 0;
}

static int body_window_full(const http_conn *c) {
  const http_req *r = c->req;
  return r != NULL && r->pub.body_len - r->body_taken > HTTP_BODY_WINDOW;
}

static void body_notify(http_req *r, int status) {
  http_drain_cb cb = r->body_cb;
  if (cb == NULL) return;
  r->body_cb = NULL;
  cb(r->body_arg, status);
}

static int on_streamed_body(http_conn *c, http_req *r, const char *at, size_t len) {
  size_t max = c->server->config.max_body_bytes;
  if (len > max - r->body_total) {
    body_too_large(c);
    return -1;
  }
  r->body_total += len;
  if (r->body_taken == r->pub.body_len) r->body_taken = r->pub.body_len = 0;
  size_t need = r->pub.body_len + len;
  if (need > r->body_cap) {
    size_t cap = r->body_cap ? r->body_cap : 16384;
    while (cap < need) cap *= 2;
    r->body_buf = xrealloc(r->body_buf, cap);
    r->body_cap = cap;
  }
  memcpy(r->body_buf + r->pub.body_len, at, len);
  r->pub.body_len = need;
  body_notify(r, 0);
  /* Never pause on a body's last bytes: the message completes right after
   * them without reading more, and with nothing more to read the parser
   * would not be run again to say so. */
  int last = !(c->parser.flags & F_CHUNKED) && c->parser.content_length == 0;
  if (!last && r->pub.body_len - r->body_taken > HTTP_BODY_WINDOW) {
    c->body_paused = 1;
    return HPE_PAUSED;
  }
  return 0;
}

/* Checks what the current buffer holds of the CRLF that must follow a chunk's
 * data; the rest is checked when the next buffer comes. */
static int chunk_crlf_check(http_conn *c) {
  while (c->crlf_left > 0) {
    uint64_t off = c->crlf_off + (2u - c->crlf_left);
    if (off < c->exec_base || off - c->exec_base >= c->exec_len) return 0;
    if (c->exec_data[off - c->exec_base] != "\r\n"[2 - c->crlf_left]) {
      set_fail(c, 400, "malformed request: chunk data not followed by CRLF");
      return -1;
    }
    c->crlf_left--;
  }
  return 0;
}

static int on_body(llhttp_t *p, const char *at, size_t len) {
  http_conn *c = p->data;
  http_req *r = c->req;
  if ((p->flags & F_CHUNKED) && p->content_length == 0) {
    /* This span ends the chunk's data: its CRLF comes next. */
    c->crlf_off = c->exec_base + (uint64_t)(at + len - c->exec_data);
    c->crlf_left = 2;
    if (chunk_crlf_check(c) != 0) return -1;
  }
  if (r->pub.body_streamed) return on_streamed_body(c, r, at, len);
  size_t max = c->server->config.max_body_bytes;
  if (len > max - r->pub.body_len) {
    body_too_large(c);
    return -1;
  }
  size_t need = r->pub.body_len + len;
  if (need > r->body_cap) {
    /* Grow by doubling, but never past what the request said it would send. */
    size_t cap = r->body_cap ? r->body_cap : 4096;
    while (cap < need) cap *= 2;
    if (cap > r->body_expect) cap = r->body_expect;
    if (cap < need) cap = need;
    r->body_buf = xrealloc(r->body_buf, cap);
    r->body_cap = cap;
  }
  memcpy(r->body_buf + r->pub.body_len, at, len);
  r->pub.body_len = need;
  return 0;
}

static int on_message_complete(llhttp_t *p) {
  http_conn *c = p->data;
  c->fold_state = 0; /* the next request's head is scanned from its start */
  http_req *r = c->req;
  http_server_int *si = c->server->conns;
  if (r->pub.body_streamed) {
    /* The handler has had it since its head; what follows waits for the response. */
    r->body_done = 1;
    c->body_streaming = 0;
    c->body_paused = 1;
    body_notify(r, 0);
    return HPE_PAUSED;
  }
  r->pub.body = r->pub.body_len ? r->body_buf : NULL;
  /* An upgrade we do not perform leaves the byte stream undefined: close. */
  r->pub.keep_alive = llhttp_should_keep_alive(p) && !p->upgrade && !si->draining;
  c->ready = 1;
  /* Stop right after this message: what follows waits for the response. */
  return HPE_PAUSED;
}

static const llhttp_settings_t parser_settings = {
    .on_message_begin = on_message_begin,
    .on_url = on_url,
    .on_url_complete = on_url_complete,
    .on_header_field = on_header_field,
    .on_header_field_complete = on_header_field_complete,
    .on_header_value = on_header_value,
    .on_header_value_complete = on_header_value_complete,
    .on_headers_complete = on_headers_complete,
    .on_chunk_header = on_chunk_header,
    .on_body = on_body,
    .on_message_complete = on_message_complete,
};

/* ---- connection timer ---- */

static void on_timer(uv_timer_t *t);

/*
 * Sets the deadline of the connection's one timer. Moving a deadline later
 * does not touch the timer heap: the armed timer fires early, sees the new
 * deadline and re-arms. Keep-alive traffic thus costs no timer operation per
 * request in the steady state.
 */
static void conn_timer(http_conn *c, http_timer_mode mode, uint64_t ms) {
  uint64_t deadline = uv_now(c->server->loop) + ms;
  c->timer_mode = (uint8_t)mode;
  c->deadline = deadline;
  if (c->timer_armed && c->armed_deadline <= deadline) return;
  c->timer_armed = 1;
  c->armed_deadline = deadline;
  uv_timer_start(&c->timer, on_timer, ms, 0);
}

/* Lazy as well: a timer that fires with nothing to enforce does nothing. */
static void conn_timer_stop(http_conn *c) { c->timer_mode = HTTP_TM_NONE; }

/* Body bytes received so far on the connection's request. */
static size_t body_received(const http_conn *c) {
  const http_req *r = c->req;
  if (r == NULL) return 0;
  return r->pub.body_streamed ? r->body_total : r->pub.body_len;
}

/*
 * A trickling body holds its connection for as long as it trickles, so
 * progress alone is not enough: each body_timeout_ms window must bring
 * body_min_rate bytes a second, or the body must be complete by its end.
 * The check costs nothing per read: the timer looks once per window.
 */
static void body_window_start(http_conn *c) {
  c->body_window_at = uv_now(c->server->loop);
  c->body_window_bytes = body_received(c);
  conn_timer(c, HTTP_TM_BODY, c->server->config.body_timeout_ms);
}

/* The window is over: 1 when its bytes came at the minimum rate. */
static int body_window_met(const http_conn *c, uint64_t now) {
  const http_server_config *cfg = &c->server->config;
  if (cfg->body_min_rate == HTTP_NO_MIN_RATE) return 0;
  uint64_t ms = now - c->body_window_at;
  uint64_t got = body_received(c) - c->body_window_bytes;
  /* In doubles: got * 1000 and rate * ms may not fit 64 bits. */
  return (double)got * 1000.0 >= (double)cfg->body_min_rate * (double)ms;
}

/* Makes the timer enforce the deadline of the phase the connection is in. */
static void conn_update_timer(http_conn *c) {
  const http_server_config *cfg = &c->server->config;
  switch ((http_phase)c->phase) {
    case HTTP_PH_NEW: /* the header timeout runs since accept */
    case HTTP_PH_CLOSING:
      break;
    case HTTP_PH_IDLE:
      if (c->timer_mode != HTTP_TM_IDLE && c->timer_mode != HTTP_TM_RESUME)
        conn_timer(c, HTTP_TM_IDLE, cfg->idle_timeout_ms);
      break;
    case HTTP_PH_HEAD:
      if (c->timer_mode != HTTP_TM_HEADER) conn_timer(c, HTTP_TM_HEADER, cfg->header_timeout_ms);
      break;
    case HTTP_PH_BODY:
      if (c->timer_mode != HTTP_TM_RESUME && c->timer_mode != HTTP_TM_BODY) body_window_start(c);
      break;
    case HTTP_PH_HANDLER:
      /* A streamed body must keep moving, unless the handler is the one
       * behind: its wait is not the client's, and the window starts again
       * once the handler takes bytes. */
      if (c->timer_mode == HTTP_TM_RESUME) break;
      if (!c->body_streaming || body_window_full(c)) conn_timer_stop(c);
      else if (c->timer_mode != HTTP_TM_BODY) body_window_start(c);
      break;
  }
}

static void on_timer(uv_timer_t *t) {
  http_conn *c = t->data;
  c->timer_armed = 0;
  http_timer_mode mode = (http_timer_mode)c->timer_mode;
  if (mode == HTTP_TM_NONE) return;
  uint64_t now = uv_now(c->server->loop);
  if (now < c->deadline) {
    c->timer_armed = 1;
    c->armed_deadline = c->deadline;
    uv_timer_start(&c->timer, on_timer, c->deadline - now, 0);
    return;
  }
  /* One write request carries a whole response and completes once; libuv
   * lowers write_queue_size as the client takes its bytes. A client that
   * took some since the last look is slow, not idle: give it another period. */
  if ((mode == HTTP_TM_IDLE || (mode == HTTP_TM_LINGER && !c->fin_sent)) &&
      c->tcp.write_queue_size > 0 && c->tcp.write_queue_size != c->queue_mark) {
    c->queue_mark = c->tcp.write_queue_size;
    conn_timer(c, mode, c->server->config.idle_timeout_ms);
    return;
  }
  c->timer_mode = HTTP_TM_NONE;
  switch (mode) {
    case HTTP_TM_HEADER:
      conn_fail(c, 408, "request header timeout: the request head did not arrive in time");
      break;
    case HTTP_TM_BODY: {
      if (body_window_met(c, now)) {
        body_window_start(c);
        break;
      }
      const http_server_config *cfg = &c->server->config;
      char msg[160];
      if (cfg->body_min_rate == HTTP_NO_MIN_RATE)
        snprintf(msg, sizeof msg,
                 "request body timeout: the request body did not arrive within %llu ms",
                 (unsigned long long)cfg->body_timeout_ms);
      else
        snprintf(msg, sizeof msg,
                 "request body timeout: the request body arrived slower than %llu bytes/s "
                 "over %llu ms",
                 (unsigned long long)cfg->body_min_rate, (unsigned long long)cfg->body_timeout_ms);
      c->server->body_timeouts++;
      conn_fail(c, 408, msg);
      break;
    }
    case HTTP_TM_IDLE:
    case HTTP_TM_LINGER:
      conn_close(c);
      break;
    case HTTP_TM_RESUME:
      /* A request taken back whole by http_request_buffer_body waits here. */
      if (c->ready && c->req != NULL && !c->req->dispatched) conn_dispatch(c);
      else conn_drain(c);
      if (c->phase != HTTP_PH_CLOSING) conn_update_timer(c);
      break;
    case HTTP_TM_NONE:
      break;
  }
}

/* ---- connection lifecycle ---- */

static void on_conn_handle_closed(uv_handle_t *h) {
  http_conn *c = h->data;
  if (--c->handles_open > 0) return;
  http_server *s = c->server;
  http_server_int *si = s->conns;
  req_free(c->spare);
  free(c->inbuf);
  free(c);
  s->connections--;
  si->closed_pending--;
  server_maybe_closed(s);
}

/* Tells a streamed response's writer that it may go on (or must stop). */
static void drain_notify(http_req *r, int status) {
  http_drain_cb cb = r->drain_cb;
  if (cb == NULL) return;
  r->drain_cb = NULL;
  cb(r->drain_arg, status);
}

/*
 * Closes now. A request still with the handler is detached (conn = NULL) and
 * reported through on_abort; the handler's later http_respond just frees it.
 */
static void conn_close(http_conn *c) {
  if (c->closed) return;
  c->closed = 1;
  c->phase = HTTP_PH_CLOSING;
  c->inbuf_len = 0;
  http_server *s = c->server;
  http_server_int *si = s->conns;
  si->closed_pending++;
  if (c->prev) c->prev->next = c->next;
  else si->head = c->next;
  if (c->next) c->next->prev = c->prev;
  c->prev = c->next = NULL;
  if (c->addr_counted) http__addr_release(si->addrs, &c->addr);
  c->addr_counted = 0;
  uv_close((uv_handle_t *)&c->timer, on_conn_handle_closed);
  uv_close((uv_handle_t *)&c->tcp, on_conn_handle_closed);

  http_req *r = c->req;
  c->req = NULL;
  if (r == NULL) return;
  if (!r->dispatched) {
    req_free(r);
    return;
  }
  r->pub.conn = NULL;
  s->in_flight--;
  drain_notify(r, UV_ECONNRESET);
  if (r->pub.body_streamed && !r->body_done && r->body_error == 0) r->body_error = UV_ECONNRESET;
  body_notify(r, UV_ECONNRESET);
  if (s->on_abort) s->on_abort(s, &r->pub);
}

static void on_shutdown(uv_shutdown_t *req, int status) {
  http_conn *c = container_of(req, http_conn, shutdown);
  if (c->closed) return;
  c->fin_sent = 1;
  if (status < 0 || c->eof) {
    conn_close(c);
    return;
  }
  uint64_t idle = c->server->config.idle_timeout_ms;
  conn_timer(c, HTTP_TM_LINGER, idle < HTTP_LINGER_MS ? idle : HTTP_LINGER_MS);
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf);
static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);

static void conn_read_start(http_conn *c) {
  if (!c->read_stopped) return;
  c->read_stopped = 0;
  if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) != 0) conn_close(c);
}

/*
 * Closes gracefully after the last response: FIN once the queued writes are
 * out, then read and discard until the client closes too (or a short linger
 * passes), so that unread request bytes do not make the kernel reset the
 * connection under the response.
 */
static void conn_finish(http_conn *c) {
  c->phase = HTTP_PH_CLOSING;
  c->inbuf_len = 0;
  http_req *r = c->req;
  if (r != NULL && !r->dispatched) {
    req_free(r);
    c->req = NULL;
  }
  conn_read_start(c);
  if (c->closed) return;
  if (uv_shutdown(&c->shutdown, (uv_stream_t *)&c->tcp, on_shutdown) != 0) {
    conn_close(c);
    return;
  }
  /* Bounds the wait for a client that never reads the response. */
  conn_timer(c, HTTP_TM_LINGER, c->server->config.idle_timeout_ms);
}

/*
 * A request whose body broke while the handler read it as it came: the
 * server answers for it (the handler's response, if any, goes nowhere) and
 * the handler's reads fail with `error`.
 */
static void body_detach(http_conn *c, http_req *r, int error) {
  http_server *s = c->server;
  r->body_error = error;
  c->body_streaming = 0;
  c->req = NULL;
  r->pub.conn = NULL;
  s->in_flight--;
  drain_notify(r, UV_ECONNRESET);
  body_notify(r, error);
  if (s->on_abort) s->on_abort(s, &r->pub);
}

static int body_error_of(int status) {
  return status == 413 ? UV_E2BIG : status == 408 ? UV_ETIMEDOUT : UV_EPROTO;
}

/* Sends an error response of our own (JSON) and closes. */
static void conn_fail(http_conn *c, int status, const char *message) {
  if (c->phase == HTTP_PH_CLOSING) return;
  if (c->phase == HTTP_PH_HANDLER) {
    http_req *r = c->req;
    /* The handler owns the response, unless the body it is reading broke
     * before it started one. */
    if (r == NULL || !r->pub.body_streamed || r->streaming) {
      conn_close(c);
      return;
    }
    body_detach(c, r, body_error_of(status));
  }
  size_t len;
  char *body = http__error_json(message, NULL, &len);
  http_header ct = {"Content-Type", "application/json"};
  int rc = http__write_response(c, status, &ct, 1, body, len, 0, 0);
  free(body);
  if (rc != 0) conn_close(c);
  else conn_finish(c);
}

void http__conn_write_done(http_conn *c, int status) {
  if (c->closed) return;
  if (status < 0) {
    conn_close(c);
    return;
  }
  /* Bytes went out: a client still reading a large response is slow, not
   * idle, and is not cut off while it makes progress. */
  if (c->timer_mode == HTTP_TM_IDLE || (c->timer_mode == HTTP_TM_LINGER && !c->fin_sent))
    conn_timer(c, (http_timer_mode)c->timer_mode, c->server->config.idle_timeout_ms);
  if (c->write_blocked && c->tcp.write_queue_size <= HTTP_WRITE_LOW) {
    c->write_blocked = 0;
    if (c->phase == HTTP_PH_IDLE && c->inbuf_len > 0) conn_timer(c, HTTP_TM_RESUME, 0);
  }
  if (c->req != NULL && c->req->streaming && c->tcp.write_queue_size <= HTTP_WRITE_LOW)
    drain_notify(c->req, 0);
}

/* ---- parsing and dispatch ---- */

static int conn_can_parse(const http_conn *c) {
  if (c->phase == HTTP_PH_HANDLER) return c->body_streaming && !body_window_full(c);
  /* ready: a whole request waits to be handed over (http_request_buffer_body). */
  return c->phase != HTTP_PH_CLOSING && !c->write_blocked && !c->ready;
}

static void conn_dispatch(http_conn *c) {
  http_server *s = c->server;
  http_server_int *si = s->conns;
  http_req *r = c->req;
  static const char hex[] = "0123456789abcdef";
  uint64_t id = si->id_base + s->next_request_seq++;
  for (int i = 15; i >= 0; i--, id >>= 4) r->pub.id[i] = hex[id & 15];
  r->pub.id[16] = '\0';
  c->ready = 0;
  c->head_raw = 0;
  c->phase = HTTP_PH_HANDLER;
  r->dispatched = 1;
  r->pub.conn = c;
  c->body_streaming = (uint8_t)r->pub.body_streamed;
  s->in_flight++;
  s->on_request(s, &r->pub);
}

/*
 * RFC 9112 5.2: a server receiving obs-fold (a header line continued on the
 * next line after leading whitespace) must reject it or replace it; llhttp
 * joins the lines, so a folded header (an Authorization among them) would be
 * read one way here and another way by an intermediary. Whitespace between
 * the request line and the first header is the same case (RFC 9112 2.2).
 * Both are refused. Scans the head's bytes in this buffer, the state kept in
 * c->fold_state across buffers: 0 before the request line (blank lines
 * allowed), 1 inside a line, 2 at the start of a line, 4 after a CR at the
 * start of a line, 3 once the head is over. Returns 0, or -1 with the
 * failure set.
 */
static int head_fold_check(http_conn *c, const char *data, size_t len) {
  for (size_t i = 0; i < len && c->fold_state != 3; i++) {
    char ch = data[i];
    switch (c->fold_state) {
      case 0: if (ch != '\r' && ch != '\n') c->fold_state = 1; break;
      case 1: if (ch == '\n') c->fold_state = 2; break;
      case 2:
        if (ch == ' ' || ch == '\t') {
          set_fail(c, 400, "malformed request: a header line folded onto the next (obs-fold)");
          return -1;
        }
        c->fold_state = ch == '\r' ? 4 : ch == '\n' ? 3 : 1;
        break;
      case 4: c->fold_state = ch == '\n' ? 3 : 1; break;
    }
  }
  return 0;
}

/* Runs the parser; returns the bytes consumed, or -1 once the connection failed. */
static ssize_t conn_execute(http_conn *c, const char *data, size_t len) {
  if (c->phase <= HTTP_PH_HEAD && head_fold_check(c, data, len) != 0) {
    conn_fail(c, 400, c->fail_text);
    return -1;
  }
  c->exec_data = data;
  c->exec_len = len;
  llhttp_errno_t err = HPE_USER;
  /* The CRLF after a chunk that ended with the previous buffer. */
  if (chunk_crlf_check(c) == 0) err = llhttp_execute(&c->parser, data, len);
  c->exec_data = NULL;
  if (err == HPE_OK) c->exec_base += len;
  if (err == HPE_OK) {
    if (c->phase == HTTP_PH_HEAD) {
      /* Callbacks do not see whitespace: the raw count bounds padding too. */
      c->head_raw += len;
      size_t max = c->server->config.max_header_bytes;
      if (c->head_raw > max) {
        set_fail_limit(c, 431, "request header block", max);
        conn_fail(c, 431, c->fail_text);
        return -1;
      }
    }
    return (ssize_t)len;
  }
  if (err == HPE_PAUSED && (c->ready || c->body_paused)) {
    const char *pos = llhttp_get_error_pos(&c->parser);
    llhttp_resume(&c->parser);
    c->exec_base += (uint64_t)(pos - data);
    return pos - data;
  }
  if (c->fail_status < 0) {
    conn_close(c);
  } else if (err == HPE_PAUSED_H2_UPGRADE) { /* the HTTP/2 connection preface */
    conn_fail(c, 505, "HTTP version not supported: only HTTP/1.x is served");
  } else if (c->fail_status > 0) {
    conn_fail(c, c->fail_status, c->fail_text);
  } else {
    char msg[160];
    snprintf(msg, sizeof msg, "malformed request: %s", llhttp_get_error_reason(&c->parser));
    conn_fail(c, 400, msg);
  }
  return -1;
}

/*
 * Parses as much as may be parsed now, handing each complete request to the
 * handler. Returns how many bytes were consumed; the rest must be kept.
 */
static size_t conn_feed(http_conn *c, const char *data, size_t len) {
  size_t used = 0;
  c->in_parse = 1;
  while (used < len && conn_can_parse(c)) {
    ssize_t n = conn_execute(c, data + used, len - used);
    if (n < 0) break;
    used += (size_t)n;
    if (c->body_paused) {
      c->body_paused = 0;
      break;
    }
    if (!c->ready) break;
    conn_dispatch(c);
  }
  c->in_parse = 0;
  return used;
}

static void inbuf_append(http_conn *c, const char *data, size_t len) {
  if (c->inbuf_cap - c->inbuf_len < len) {
    size_t cap = c->inbuf_cap ? c->inbuf_cap : 4096;
    while (cap - c->inbuf_len < len) cap *= 2;
    c->inbuf = xrealloc(c->inbuf, cap);
    c->inbuf_cap = cap;
  }
  memcpy(c->inbuf + c->inbuf_len, data, len);
  c->inbuf_len += len;
}

/* Parses what was kept while the handler had the previous request. */
static void conn_drain(http_conn *c) {
  if (c->inbuf_len > 0 && conn_can_parse(c)) {
    size_t used = conn_feed(c, c->inbuf, c->inbuf_len);
    if (c->phase == HTTP_PH_CLOSING) return;
    memmove(c->inbuf, c->inbuf + used, c->inbuf_len - used);
    c->inbuf_len -= used;
    if (c->inbuf_len == 0 && c->inbuf_cap > HTTP_PIPELINE_MAX) { /* a burst is over */
      free(c->inbuf);
      c->inbuf = NULL;
      c->inbuf_cap = 0;
    }
  }
  if (c->inbuf_len < HTTP_PIPELINE_MAX) conn_read_start(c);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)suggested;
  http_conn *c = h->data;
  http_server_int *si = c->server->conns;
  *buf = uv_buf_init(si->readbuf, sizeof si->readbuf);
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf) {
  http_conn *c = stream->data;
  if (nread == 0) return;
  if (nread < 0) {
    /* A client that half-closes still gets the responses queued for it
     * (closing now would cancel their unsent bytes); one that leaves while
     * its request is with the handler aborts it. A request not complete
     * yet, or pipelined and not parsed yet, is dropped. libuv reads no
     * further after EOF. */
    if (nread == UV_EOF && c->phase == HTTP_PH_CLOSING) {
      if (c->fin_sent) conn_close(c);
      else c->eof = 1; /* on_shutdown closes once the response is out */
    } else if (nread == UV_EOF && c->phase != HTTP_PH_HANDLER && c->tcp.write_queue_size > 0) {
      c->eof = 1;
      conn_finish(c);
    } else {
      conn_close(c);
    }
    return;
  }
  if (c->phase == HTTP_PH_CLOSING) return; /* lingering: discard */
  size_t len = (size_t)nread;
  if (c->inbuf_len == 0 && conn_can_parse(c)) {
    size_t used = conn_feed(c, buf->base, len);
    if (used < len && c->phase != HTTP_PH_CLOSING) inbuf_append(c, buf->base + used, len - used);
  } else {
    inbuf_append(c, buf->base, len);
    if (conn_can_parse(c)) conn_drain(c);
  }
  if (c->phase == HTTP_PH_CLOSING) return;
  if (c->inbuf_len >= HTTP_PIPELINE_MAX && !c->read_stopped) {
    uv_read_stop(stream);
    c->read_stopped = 1;
  }
  conn_update_timer(c);
}

/* ---- accepting, within the caps ---- */

/* Takes a descriptor to give up when accept() finds none left. A duplicate
 * of the listener, since a worker process in its sandbox cannot open files. */
static void reserve_take(http_server *s) {
  http_server_int *si = s->conns;
  if (si->reserve_fd >= 0) return;
  uv_os_fd_t fd;
  if (uv_fileno((uv_handle_t *)&s->listener, &fd) != 0) return;
  si->reserve_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
}

static void reserve_release(http_server_int *si) {
  if (si->reserve_fd < 0) return;
  close(si->reserve_fd);
  si->reserve_fd = -1;
}

/* The connection open longest without a request under way, or NULL. */
static http_conn *oldest_waiting(http_server_int *si) {
  http_conn *found = NULL;
  for (http_conn *c = si->head; c != NULL; c = c->next)
    if (c->phase == HTTP_PH_NEW || c->phase == HTTP_PH_HEAD || c->phase == HTTP_PH_IDLE) found = c;
  return found;
}

/*
 * accept() failed for want of a descriptor. libuv then tries a spare of its
 * own and, without one (a sandboxed process cannot open the file it uses),
 * calls us again for the same waiting connection at once: the loop would
 * spin. Giving up the reserve lets the next accept() succeed, and
 * on_connection closes that connection at once and takes the reserve back,
 * so every call consumes one waiting connection. Should another thread have
 * taken the reserve's place meanwhile, the connection waiting longest for a
 * request of its own is closed instead.
 */
static void out_of_descriptors(http_server *s, int status) {
  http_server_int *si = s->conns;
  uint64_t now = uv_now(s->loop);
  if (si->fd_warned_ms == 0 || now - si->fd_warned_ms >= 10000) {
    si->fd_warned_ms = now;
    log_warn("http: accept failed: %s (%zu connections open): closing new connections until "
             "descriptors are free; raise RLIMIT_NOFILE or lower the connection caps",
             uv_strerror(status), s->connections);
  }
  if (si->reserve_fd >= 0) {
    reserve_release(si);
    return;
  }
  http_conn *victim = oldest_waiting(si);
  if (victim != NULL) {
    s->refused_fd++;
    conn_close(victim);
  }
}

/* The reason a just-accepted connection must be closed at once, or NULL. */
static uint64_t *refusal(http_server *s, http_conn *c) {
  http_server_int *si = s->conns;
  const http_server_config *cfg = &s->config;
  /* Without the reserve back, the process is still out of descriptors. */
  if (si->reserve_fd < 0) reserve_take(s);
  if (si->reserve_fd < 0) return &s->refused_fd;
  /* Connections closed in this same burst of accepts hold no descriptor
   * any more; this one is counted already. */
  if (cfg->max_connections > 0 && s->connections - si->closed_pending > cfg->max_connections)
    return &s->refused_cap;
  if (cfg->max_connections_per_addr == 0) return NULL;
  struct sockaddr_storage ss;
  int len = sizeof ss;
  if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &len) != 0 ||
      http__addr_key((const struct sockaddr *)&ss, &c->addr) != 0)
    return NULL;
  if (http__addr_acquire(si->addrs, &c->addr, cfg->max_connections_per_addr) != 0)
    return &s->refused_addr;
  c->addr_counted = 1;
  return NULL;
}

static void on_connection(uv_stream_t *listener, int status) {
  http_server *s = container_of((uv_tcp_t *)listener, http_server, listener);
  http_server_int *si = s->conns;
  if (status == UV_EMFILE || status == UV_ENFILE) {
    out_of_descriptors(s, status);
    return;
  }
  if (status < 0) {
    log_warn("http: accept failed: %s", uv_strerror(status));
    return;
  }
  http_conn *c = xcalloc(1, sizeof *c);
  c->server = s;
  int rc = uv_tcp_init(s->loop, &c->tcp);
  if (rc != 0) {
    log_error("http: cannot set up a connection: %s", uv_strerror(rc));
    free(c);
    return;
  }
  uv_timer_init(s->loop, &c->timer);
  c->tcp.data = c;
  c->timer.data = c;
  c->handles_open = 2;
  llhttp_init(&c->parser, HTTP_REQUEST, &parser_settings);
  c->parser.data = c;
  c->phase = HTTP_PH_NEW;
  c->next = si->head;
  if (si->head) si->head->prev = c;
  si->head = c;
  s->connections++;
  if ((rc = uv_accept(listener, (uv_stream_t *)&c->tcp)) != 0) {
    conn_close(c);
    return;
  }
  uint64_t *refused = refusal(s, c);
  if (refused != NULL) {
    /* Closed before a byte is read or written: a refusal costs no buffer
     * and no timer, and an answer could not be relied on anyway (closing
     * over a request not read resets the connection). */
    (*refused)++;
    conn_close(c);
    reserve_take(s);
    return;
  }
  if ((rc = uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read)) != 0) {
    conn_close(c);
    return;
  }
  uv_tcp_nodelay(&c->tcp, 1);
  conn_timer(c, HTTP_TM_HEADER, s->config.header_timeout_ms);
}

/* ---- responses ---- */

/* A request body still arriving when the response goes out is not read to
 * its end: the connection cannot carry another request after it. */
static int body_complete(const http_req *r) { return !r->pub.body_streamed || r->body_done; }

/* Detaches a request whose response is fully queued from its connection. */
static void conn_release_request(http_conn *c, http_req *r) {
  c->body_streaming = 0;
  body_notify(r, UV_ECANCELED);
  c->req = NULL;
  r->pub.conn = NULL;
  c->server->in_flight--;
  if (HTTP_RECYCLE && c->spare == NULL) {
    req_reset(r);
    c->spare = r;
  } else {
    req_free(r);
  }
}

/* After a response: close, or wait for (or parse) the next request. */
static void conn_after_response(http_conn *c, int keep) {
  http_server *s = c->server;
  if (c->tcp.write_queue_size > HTTP_WRITE_HIGH) c->write_blocked = 1;
  if (!keep) {
    conn_finish(c);
    return;
  }
  c->phase = HTTP_PH_IDLE;
  if (!c->in_parse && c->inbuf_len > 0 && !c->write_blocked) {
    /* Pipelined requests wait for the next loop turn rather than re-entering
     * the handler from inside this call. */
    conn_timer(c, HTTP_TM_RESUME, 0);
  } else {
    conn_timer(c, HTTP_TM_IDLE, s->config.idle_timeout_ms);
    if (c->inbuf_len < HTTP_PIPELINE_MAX) conn_read_start(c);
  }
}

/* The last bytes of r's response were queued with result rc. */
static int conn_response_queued(http_conn *c, http_req *r, int rc, int keep) {
  conn_release_request(c, r);
  if (rc != 0) {
    conn_close(c);
    return UV_ECONNRESET;
  }
  conn_after_response(c, keep);
  return 0;
}

int http_respond(http_request *req, int status, const http_header *headers, size_t n_headers,
                 const void *body, size_t body_len) {
  http_req *r = (http_req *)req;
  http_conn *c = req->conn;
  if (c == NULL) {
    req_free(r);
    return UV_ECONNRESET;
  }
  if (r->streaming) {
    http_respond_abort(req);
    return UV_ECONNRESET;
  }
  http_server_int *si = c->server->conns;
  if (status < 100 || status > 999) status = 500;
  int keep = req->keep_alive && !si->draining && body_complete(r);
  /* headers and body may point into the request: write before recycling it. */
  int rc = http__write_response(c, status, headers, n_headers, body, body_len, keep, r->is_head);
  return conn_response_queued(c, r, rc, keep);
}

int http_respond_start(http_request *req, int status, const http_header *headers,
                       size_t n_headers, int64_t length) {
  http_req *r = (http_req *)req;
  http_conn *c = req->conn;
  if (r->streaming) return UV_EINVAL;
  if (c == NULL) return UV_ECONNRESET;
  http_server_int *si = c->server->conns;
  if (status < 100 || status > 999) status = 500;
  r->streaming = 1;
  r->stream_bodyless = r->is_head || status < 200 || status == 204 || status == 304;
  r->stream_length = length >= 0 ? length : -1;
  r->stream_sent = 0;
  r->stream_chunked = !r->http10 && length < 0;
  /* Without a length, an HTTP/1.0 client learns where the body ends only
   * from the close. */
  r->stream_keep = req->keep_alive && !si->draining && body_complete(r) &&
                   (r->stream_chunked || r->stream_bodyless || length >= 0);
  int rc = http__write_stream_head(c, status, headers, n_headers, r->stream_keep,
                                   r->stream_chunked && !r->stream_bodyless, r->stream_length);
  if (rc != 0) {
    conn_close(c);
    return UV_ECONNRESET;
  }
  return 0;
}

int http_respond_write(http_request *req, const void *data, size_t len) {
  http_req *r = (http_req *)req;
  http_conn *c = req->conn;
  if (!r->streaming) return UV_EINVAL;
  if (c == NULL) return UV_ECONNRESET;
  if (r->stream_bodyless || len == 0) return 0;
  if (r->stream_length >= 0 && len > (uint64_t)r->stream_length - r->stream_sent) return UV_E2BIG;
  r->stream_sent += len;
  if (http__write_chunk(c, data, len, r->stream_chunked) != 0) {
    conn_close(c);
    return UV_ECONNRESET;
  }
  return c->tcp.write_queue_size > HTTP_WRITE_LOW ? 1 : 0;
}

int http_respond_on_drain(http_request *req, http_drain_cb cb, void *arg) {
  http_req *r = (http_req *)req;
  http_conn *c = req->conn;
  if (!r->streaming) return UV_EINVAL;
  if (c == NULL) return UV_ECONNRESET;
  if (r->drain_cb != NULL) return UV_EBUSY;
  if (c->tcp.write_queue_size <= HTTP_WRITE_LOW) return UV_EINVAL;
  r->drain_cb = cb;
  r->drain_arg = arg;
  return 0;
}

int http_respond_end(http_request *req) {
  http_req *r = (http_req *)req;
  http_conn *c = req->conn;
  if (c == NULL || !r->streaming) {
    if (c == NULL) {
      req_free(r);
      return UV_ECONNRESET;
    }
    return http_respond(req, 500, NULL, 0, NULL, 0);
  }
  if (r->stream_length >= 0 && !r->stream_bodyless &&
      r->stream_sent != (uint64_t)r->stream_length) {
    http_respond_abort(req);
    return UV_EPROTO;
  }
  int keep = r->stream_keep;
  int rc = 0;
  if (r->stream_chunked && !r->stream_bodyless) rc = http__write_chunk(c, NULL, 0, 1);
  drain_notify(r, UV_ECANCELED);
  return conn_response_queued(c, r, rc, keep);
}

void http_respond_abort(http_request *req) {
  http_req *r = (http_req *)req;
  http_conn *c = req->conn;
  if (c == NULL) {
    req_free(r);
    return;
  }
  /* Detach first so that closing does not report the request as aborted to
   * the handler that is aborting it. */
  drain_notify(r, UV_ECANCELED);
  c->req = NULL;
  r->pub.conn = NULL;
  c->server->in_flight--;
  req_free(r);
  conn_close(c);
}

int http_request_body_read(http_request *req, const uint8_t **data) {
  http_req *r = (http_req *)req;
  if (!req->body_streamed) return UV_EINVAL;
  size_t avail = req->body_len - r->body_taken;
  if (avail > 0) {
    *data = r->body_buf + r->body_taken;
    r->body_taken = req->body_len;
    http_conn *c = req->conn;
    /* Parsing stopped while the window was full: go on, outside this call. */
    if (c != NULL && c->body_streaming && (c->inbuf_len > 0 || c->read_stopped))
      conn_timer(c, HTTP_TM_RESUME, 0);
    return (int)avail;
  }
  if (r->body_error != 0) return r->body_error;
  if (r->body_done) return 0;
  if (req->conn == NULL) return UV_ECONNRESET;
  return UV_EAGAIN;
}

int http_request_buffer_body(http_request *req) {
  http_req *r = (http_req *)req;
  http_conn *c = req->conn;
  if (!req->body_streamed || r->streaming || r->body_taken > 0 || r->body_cb != NULL)
    return UV_EINVAL;
  if (c == NULL) return UV_ECONNRESET;
  /* Nothing was taken: body_buf holds the body from its first byte, as the
   * buffering path would have it, and parsing goes on that way. */
  req->body_streamed = 0;
  req->conn = NULL;
  r->dispatched = 0;
  c->server->in_flight--;
  c->body_streaming = 0;
  c->phase = HTTP_PH_BODY;
  if (r->body_done) {
    r->pub.body = req->body_len ? r->body_buf : NULL;
    c->ready = 1;
  }
  conn_timer(c, HTTP_TM_RESUME, 0);
  return 0;
}

int http_request_body_wait(http_request *req, http_drain_cb cb, void *arg) {
  http_req *r = (http_req *)req;
  if (!req->body_streamed || req->conn == NULL || r->body_error != 0 || r->body_done ||
      req->body_len > r->body_taken)
    return UV_EINVAL;
  if (r->body_cb != NULL) return UV_EBUSY;
  r->body_cb = cb;
  r->body_arg = arg;
  return 0;
}

int http_respond_error(http_request *req, int status, const char *message,
                       const char *extra_json) {
  if (req->conn == NULL) return http_respond(req, status, NULL, 0, NULL, 0);
  size_t len;
  char *body = http__error_json(message, extra_json, &len);
  http_header ct = {"Content-Type", "application/json"};
  int rc = http_respond(req, status, &ct, 1, body, len);
  free(body);
  return rc;
}

/* ---- server ---- */

int http_server_init(http_server *s, uv_loop_t *loop, const http_server_config *config,
                     http_handler on_request, void *data) {
  if (s == NULL || loop == NULL || on_request == NULL) return UV_EINVAL;
  memset(s, 0, sizeof *s);
  s->loop = loop;
  if (config) s->config = *config;
  if (s->config.max_header_bytes == 0) s->config.max_header_bytes = 65536;
  if (s->config.max_body_bytes == 0) s->config.max_body_bytes = 10 * 1024 * 1024 + 65536;
  if (s->config.header_timeout_ms == 0) s->config.header_timeout_ms = 10000;
  if (s->config.idle_timeout_ms == 0) s->config.idle_timeout_ms = 60000;
  if (s->config.body_timeout_ms == 0) s->config.body_timeout_ms = 30000;
  if (s->config.body_min_rate == 0) s->config.body_min_rate = HTTP_DEFAULT_BODY_MIN_RATE;
  s->on_request = on_request;
  s->data = data;

  /* Request ids: a random prefix keeps them apart across processes and
   * restarts, a counter within the run. */
  char hex[9];
  uint64_t prefix;
  if (random_hex(hex, 4) == 0) prefix = strtoull(hex, NULL, 16);
  else prefix = (uint64_t)(uv_hrtime() ^ ((uint64_t)uv_os_getpid() << 16)) & 0xffffffffu;

  int rc = uv_tcp_init(loop, &s->listener);
  if (rc != 0) return rc;
  http_server_int *si = xcalloc(1, sizeof *si);
  si->id_base = prefix << 32;
  si->reserve_fd = -1;
  if (s->config.max_connections_per_addr > 0) si->addrs = http__addr_table_new();
  s->conns = si;
  return 0;
}

static int listen_ready(const http_server *s) {
  const http_server_int *si = s->conns;
  return si != NULL && !s->closing && !si->listener_closing && !s->listening;
}

int http_server_listen(http_server *s, const char *host, int port) {
  if (!listen_ready(s) || port < 0 || port > 65535) return UV_EINVAL;
  char buf[64];
  if (host == NULL || host[0] == '\0') {
    host = "0.0.0.0";
  } else if (strcmp(host, "localhost") == 0) {
    host = "127.0.0.1";
  } else if (host[0] == '[') { /* "[::1]" */
    size_t n = strlen(host);
    if (n < 3 || n - 2 >= sizeof buf || host[n - 1] != ']') return UV_EINVAL;
    memcpy(buf, host + 1, n - 2);
    buf[n - 2] = '\0';
    host = buf;
  }
  struct sockaddr_storage ss;
  if (uv_ip4_addr(host, port, (struct sockaddr_in *)&ss) != 0 &&
      uv_ip6_addr(host, port, (struct sockaddr_in6 *)&ss) != 0)
    return UV_EINVAL;
  int rc = uv_tcp_bind(&s->listener, (const struct sockaddr *)&ss, 0);
  if (rc == 0) rc = uv_listen((uv_stream_t *)&s->listener, 1024, on_connection);
  if (rc != 0) return rc;
  s->listening = 1;
  reserve_take(s);
  return 0;
}

int http_server_listen_fd(http_server *s, int fd) {
  if (!listen_ready(s) || fd < 0) return UV_EINVAL;
  int rc = uv_tcp_open(&s->listener, (uv_os_sock_t)fd);
  if (rc == 0) rc = uv_listen((uv_stream_t *)&s->listener, 1024, on_connection);
  if (rc != 0) return rc;
  s->listening = 1;
  reserve_take(s);
  return 0;
}

int http_server_port(const http_server *s) {
  if (!s->listening) return -1;
  struct sockaddr_storage ss;
  int len = sizeof ss;
  if (uv_tcp_getsockname(&s->listener, (struct sockaddr *)&ss, &len) != 0) return -1;
  if (ss.ss_family == AF_INET) return ntohs(((const struct sockaddr_in *)&ss)->sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(((const struct sockaddr_in6 *)&ss)->sin6_port);
  return -1;
}

static void on_listener_closed(uv_handle_t *h) {
  http_server *s = container_of((uv_tcp_t *)h, http_server, listener);
  http_server_int *si = s->conns;
  si->listener_closed = 1;
  server_maybe_closed(s);
}

static void listener_close(http_server *s) {
  http_server_int *si = s->conns;
  if (si->listener_closing) return;
  si->listener_closing = 1;
  s->listening = 0;
  reserve_release(si); /* a duplicate of the listener would keep it listening */
  uv_close((uv_handle_t *)&s->listener, on_listener_closed);
}

static void server_maybe_closed(http_server *s) {
  http_server_int *si = s->conns;
  if (si == NULL || !s->closing || !si->listener_closed || s->connections > 0) return;
  reserve_release(si);
  http__addr_table_free(si->addrs);
  free(si);
  s->conns = NULL;
  if (s->on_closed) s->on_closed(s);
}

/* Bytes waiting in the kernel for this connection that the loop has not read yet. */
static int conn_has_unread_bytes(http_conn *c) {
  uv_os_fd_t fd;
  if (uv_fileno((uv_handle_t *)&c->tcp, &fd) != 0) return 0;
  char byte;
  ssize_t n = recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n > 0;
}

json_t *http_server_report(const http_server *s) {
  return json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "connections",
                   (json_int_t)s->connections, "max_connections",
                   (json_int_t)s->config.max_connections, "max_connections_per_addr",
                   (json_int_t)s->config.max_connections_per_addr, "refused_cap",
                   (json_int_t)s->refused_cap, "refused_addr", (json_int_t)s->refused_addr,
                   "refused_fd", (json_int_t)s->refused_fd, "body_timeouts",
                   (json_int_t)s->body_timeouts);
}

void http_server_stop_accepting(http_server *s) {
  http_server_int *si = s->conns;
  if (si == NULL || s->closing) return;
  si->draining = 1;
  listener_close(s);
  http_conn *next;
  for (http_conn *c = si->head; c != NULL; c = next) {
    next = c->next;
    switch ((http_phase)c->phase) {
      case HTTP_PH_NEW:
      case HTTP_PH_IDLE:
        if (c->inbuf_len > 0) break; /* a pipelined request is next: serve it */
        /* A client that connected just before the drain may have sent its
         * request already, unread by us: closing now would reset it. */
        if (c->phase == HTTP_PH_NEW && conn_has_unread_bytes(c)) break;
        /* A response may still be on its way out: let it finish. */
        if (c->tcp.write_queue_size > 0) conn_finish(c);
        else conn_close(c);
        break;
      case HTTP_PH_HANDLER:
        if (c->req) c->req->pub.keep_alive = 0;
        break;
      case HTTP_PH_HEAD:
      case HTTP_PH_BODY:
      case HTTP_PH_CLOSING:
        break;
    }
  }
}

void http_server_close(http_server *s, void (*on_closed)(http_server *s)) {
  http_server_int *si = s->conns;
  if (si == NULL || s->closing) return;
  s->closing = 1;
  s->on_closed = on_closed;
  si->draining = 1;
  listener_close(s);
  /* conn_close unlinks, and on_abort may close others: always take the head. */
  while (si->head != NULL) conn_close(si->head);
  server_maybe_closed(s);
}
