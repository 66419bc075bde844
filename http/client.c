/*
 * The HTTP/1.1 client: one connection, one request at a time, the response
 * streamed to its consumer with backpressure. Used by the worker processes'
 * handoff (relaying a dedicated process's answers, up to hundreds of MiB)
 * and the egress (upstream connections, TLS beneath through a transport).
 *
 * Memory per connection is the response head (bounded by
 * HTTP_CLIENT_MAX_HEADER_BYTES) plus, while the consumer is paused, the rest
 * of the one read that was being parsed when it paused (at most 64 KiB from a
 * stream transport): a body is never gathered here, whatever its size.
 *
 * The parser is stopped (HPE_PAUSED) at the end of each response, so that
 * bytes past it are seen as such (a connection with those is not reused),
 * and inside a body when the consumer pauses, keeping what is left of the
 * input until it resumes.
 */
#include <llhttp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base.h"
#include "http.h"

#define CLIENT_READ_BUF 65536

typedef enum {
  CL_IDLE,  /* no request waiting for an answer */
  CL_HEAD,  /* request sent, response head coming */
  CL_BODY,  /* head handed over, body coming */
} client_phase;

struct http_client {
  uv_loop_t *loop;
  http_client_transport tr;
  http_client_callbacks cb;
  void *arg;
  llhttp_t parser;
  uv_timer_t timer;           /* head and idle timeouts */
  uv_timer_t resume;          /* 0 ms: parses held input outside the caller's stack */
  int handles;                /* open timers */
  int writes;                 /* stream transport: uv_write requests in flight */
  uv_stream_t *stream;        /* the stream transport's, or NULL */
  /* the request */
  client_phase phase;
  int is_head;                /* HEAD: the response has no body */
  int keep_alive;             /* the request allowed reuse */
  int body_open;              /* a streamed request body is not ended yet */
  int usable;                 /* another request may follow on this connection */
  int closed;
  int paused;                 /* by the consumer */
  int stopped;                /* the parser stopped inside the response for it */
  int eof_held;               /* the input ended while input was held */
  int got_bytes;              /* any byte of this response */
  int complete;               /* the response ended (parser stopped at its end) */
  int leftover;               /* bytes followed the response */
  int interim;                /* the head being read is a 1xx */
  int fail_code;              /* set by a callback that stops the parser */
  uint64_t head_timeout_ms, idle_timeout_ms;
  uint64_t last_input;        /* loop time of the last byte, or of resuming */
  void (*drain_cb)(void *arg, int status);
  void *drain_arg;
  /* the head being read: NUL-terminated strings in one buffer */
  char *hbuf;
  size_t hlen, hcap;
  size_t span_start;          /* where the name or value being read starts */
  int in_field, in_value, have_name;
  size_t name_off, reason_off;
  size_t (*offs)[2];          /* name/value offsets of complete headers */
  size_t n_offs, cap_offs;
  http_header *hdrs;
  size_t head_bytes;          /* in the head's callbacks, against HTTP_CLIENT_MAX_HEADER_BYTES */
  size_t head_raw;            /* raw bytes fed while the head is incomplete */
  /* input kept while paused */
  char *held;
  size_t held_len, held_cap;
  char error[160];
};

static void client_finish(http_client *c, int status);
static void timer_arm(http_client *c);

/* ---- the head ---- */

static void hbuf_add(http_client *c, const char *at, size_t len) {
  if (c->hcap - c->hlen < len + 1) {
    size_t cap = c->hcap ? c->hcap : 1024;
    while (cap - c->hlen < len + 1) cap *= 2;
    c->hbuf = xrealloc(c->hbuf, cap);
    c->hcap = cap;
  }
  memcpy(c->hbuf + c->hlen, at, len);
  c->hlen += len;
}

static size_t hbuf_end_string(http_client *c) {
  hbuf_add(c, "", 1); /* the NUL */
  size_t start = c->span_start;
  c->span_start = c->hlen;
  return start;
}

static void push_header(http_client *c, size_t name, size_t value) {
  if (c->n_offs == c->cap_offs) {
    c->cap_offs = c->cap_offs ? c->cap_offs * 2 : 16;
    c->offs = xrealloc(c->offs, c->cap_offs * sizeof *c->offs);
  }
  c->offs[c->n_offs][0] = name;
  c->offs[c->n_offs][1] = value;
  c->n_offs++;
  c->have_name = 0;
}

static void head_reset(http_client *c) {
  c->hlen = c->span_start = 0;
  c->in_field = c->in_value = c->have_name = 0;
  c->n_offs = 0;
  c->head_bytes = c->head_raw = 0;
  c->reason_off = 0;
  hbuf_add(c, "", 1); /* offset 0: an empty string for empty values */
  c->span_start = c->hlen;
}

static int count_head(http_client *c, size_t len) {
  c->head_bytes += len;
  if (c->head_bytes <= HTTP_CLIENT_MAX_HEADER_BYTES) return 0;
  c->fail_code = UV_E2BIG;
  return -1;
}

static http_client *parser_client(llhttp_t *p) { return p->data; }

static int on_status(llhttp_t *p, const char *at, size_t len) {
  http_client *c = parser_client(p);
  if (count_head(c, len) != 0) return -1;
  hbuf_add(c, at, len);
  return 0;
}

static int on_status_complete(llhttp_t *p) {
  http_client *c = parser_client(p);
  c->reason_off = hbuf_end_string(c);
  return 0;
}

static int on_header_field(llhttp_t *p, const char *at, size_t len) {
  http_client *c = parser_client(p);
  if (count_head(c, len) != 0) return -1;
  if (!c->in_field) {
    /* llhttp calls no value callback for an empty value. */
    if (c->have_name) push_header(c, c->name_off, 0);
    c->in_field = 1;
    c->span_start = c->hlen;
  }
  hbuf_add(c, at, len);
  return 0;
}

static int on_header_field_complete(llhttp_t *p) {
  http_client *c = parser_client(p);
  c->name_off = hbuf_end_string(c);
  c->in_field = 0;
  c->have_name = 1;
  return 0;
}

static int on_header_value(llhttp_t *p, const char *at, size_t len) {
  http_client *c = parser_client(p);
  if (count_head(c, len) != 0) return -1;
  if (!c->in_value) {
    c->in_value = 1;
    c->span_start = c->hlen;
  }
  hbuf_add(c, at, len);
  return 0;
}

static int on_header_value_complete(llhttp_t *p) {
  http_client *c = parser_client(p);
  size_t value = hbuf_end_string(c);
  c->in_value = 0;
  if (c->have_name) push_header(c, c->name_off, value);
  return 0;
}

static int on_headers_complete(llhttp_t *p) {
  http_client *c = parser_client(p);
  if (c->have_name) push_header(c, c->name_off, 0);
  int status = p->status_code;
  if (status == 101) {
    c->fail_code = UV_ENOTSUP;
    return -1;
  }
  if (status >= 100 && status < 200) {
    c->interim = 1; /* 100 Continue, 103 Early Hints: the real one follows */
    return 0;
  }
  c->hdrs = xrealloc(c->hdrs, (c->n_offs ? c->n_offs : 1) * sizeof *c->hdrs);
  for (size_t i = 0; i < c->n_offs; i++) {
    c->hdrs[i].name = c->hbuf + c->offs[i][0];
    c->hdrs[i].value = c->hbuf + c->offs[i][1];
  }
  http_client_response res = {
      .status = status,
      .reason = c->hbuf + c->reason_off,
      .headers = c->hdrs,
      .n_headers = c->n_offs,
      .content_length = (p->flags & F_CONTENT_LENGTH) && !(p->flags & F_CHUNKED)
                            ? (int64_t)p->content_length
                            : -1,
      .keep_alive = llhttp_should_keep_alive(p),
  };
  c->phase = CL_BODY;
  /* From here on the idle timeout applies (stopped while paused). */
  c->last_input = uv_now(c->loop);
  timer_arm(c);
  c->cb.on_head(c, c->arg, &res);
  if (c->closed) return -1;
  if (c->is_head) return 1; /* no body, whatever Content-Length says */
  return c->paused ? HPE_PAUSED : 0;
}

static int on_body(llhttp_t *p, const char *at, size_t len) {
  http_client *c = parser_client(p);
  c->cb.on_body(c, c->arg, (const uint8_t *)at, len);
  if (c->closed) return -1;
  /* Never stop on a counted body's last bytes: the response completes right
   * after them with no more input, and with none held the parser would not
   * be run again to say so. */
  int last = (p->flags & F_CONTENT_LENGTH) && !(p->flags & F_CHUNKED) && p->content_length == 0;
  if (c->paused && !last) return HPE_PAUSED;
  return 0;
}

static int on_message_complete(llhttp_t *p) {
  http_client *c = parser_client(p);
  if (c->interim) {
    c->interim = 0;
    head_reset(c);
    return 0;
  }
  c->complete = 1;
  return HPE_PAUSED; /* what follows is not this response's */
}

static const llhttp_settings_t parser_settings = {
    .on_status = on_status,
    .on_status_complete = on_status_complete,
    .on_header_field = on_header_field,
    .on_header_field_complete = on_header_field_complete,
    .on_header_value = on_header_value,
    .on_header_value_complete = on_header_value_complete,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_message_complete = on_message_complete,
};

/* ---- timeouts ---- */

static void on_timer(uv_timer_t *t);

/* The idle timeout of a body: from the last byte, or from resuming. (The
 * head timeout is armed once, with the request.) */
static void timer_arm(http_client *c) {
  if (c->phase != CL_BODY) return;
  uv_timer_stop(&c->timer);
  if (c->closed) return;
  if (c->idle_timeout_ms && !c->paused) {
    uint64_t now = uv_now(c->loop), due = c->last_input + c->idle_timeout_ms;
    uv_timer_start(&c->timer, on_timer, due > now ? due - now : 0, 0);
  }
}

static void on_timer(uv_timer_t *t) {
  http_client *c = container_of(t, http_client, timer);
  if (c->closed) return;
  if (c->phase == CL_HEAD) {
    snprintf(c->error, sizeof c->error, "no response head within %llu ms",
             (unsigned long long)c->head_timeout_ms);
    client_finish(c, UV_ETIMEDOUT);
    return;
  }
  if (c->phase != CL_BODY || c->paused) return;
  if (uv_now(c->loop) - c->last_input >= c->idle_timeout_ms) {
    snprintf(c->error, sizeof c->error, "the response stopped arriving for %llu ms",
             (unsigned long long)c->idle_timeout_ms);
    client_finish(c, UV_ETIMEDOUT);
    return;
  }
  timer_arm(c);
}

/* ---- parsing ---- */

static void reading(http_client *c, int on) {
  if (c->tr.read) c->tr.read(c->tr.ctx, on);
}

static void hold(http_client *c, const char *data, size_t len) {
  if (len == 0) return;
  if (c->held_cap - c->held_len < len) {
    size_t cap = c->held_cap ? c->held_cap : 4096;
    while (cap - c->held_len < len) cap *= 2;
    c->held = xrealloc(c->held, cap);
    c->held_cap = cap;
  }
  memcpy(c->held + c->held_len, data, len);
  c->held_len += len;
}

/* Runs the parser over input of the current response. */
static void parse(http_client *c, const char *data, size_t len) {
  llhttp_errno_t err = llhttp_execute(&c->parser, data, len);
  if (c->closed) return;
  if (err == HPE_OK) {
    /* Callbacks do not see whitespace: the raw count bounds padding too. */
    c->head_raw += c->phase == CL_HEAD ? len : 0;
    if (c->head_raw > HTTP_CLIENT_MAX_HEADER_BYTES) {
      snprintf(c->error, sizeof c->error, "the response head is larger than %u bytes",
               HTTP_CLIENT_MAX_HEADER_BYTES);
      client_finish(c, UV_E2BIG);
    }
    return;
  }
  if (err == HPE_PAUSED) {
    const char *pos = llhttp_get_error_pos(&c->parser);
    llhttp_resume(&c->parser);
    size_t rest = (size_t)(data + len - pos);
    if (c->complete) {
      if (rest > 0) c->leftover = 1;
      client_finish(c, 0);
    } else {
      /* The consumer paused: what is left waits, and the parser is run
       * again on resuming even when nothing is (its next step may need no
       * input, as a response's end after its last byte). */
      c->stopped = 1;
      hold(c, pos, rest);
      reading(c, 0);
    }
    return;
  }
  int code = c->fail_code ? c->fail_code : UV_EPROTO;
  if (code == UV_E2BIG)
    snprintf(c->error, sizeof c->error, "the response head is larger than %u bytes",
             HTTP_CLIENT_MAX_HEADER_BYTES);
  else if (code == UV_ENOTSUP)
    snprintf(c->error, sizeof c->error, "the server switched protocols (101)");
  else
    snprintf(c->error, sizeof c->error, "%s", llhttp_get_error_reason(&c->parser));
  client_finish(c, code);
}

int http_client_feed(http_client *c, const void *data, size_t len) {
  if (c->closed) return UV_EINVAL;
  if (len == 0) return 0;
  if (c->phase == CL_IDLE) {
    /* Nothing was asked: a server talking out of turn is not reused. */
    c->usable = 0;
    reading(c, 0);
    return UV_EPROTO;
  }
  c->got_bytes = 1;
  c->last_input = uv_now(c->loop);
  if (c->paused || c->held_len > 0 || c->stopped) {
    hold(c, data, len); /* the transport may still deliver what it had */
    return 0;
  }
  parse(c, data, len);
  return 0;
}

static void input_end(http_client *c, int status) {
  if (status != UV_EOF) {
    snprintf(c->error, sizeof c->error, "%s", uv_strerror(status));
    client_finish(c, status);
    return;
  }
  if (!c->got_bytes) {
    snprintf(c->error, sizeof c->error, "the connection closed before any response");
    client_finish(c, UV_ECONNRESET);
    return;
  }
  /* A body delimited by the end of the connection completes here. */
  llhttp_errno_t err = llhttp_finish(&c->parser);
  if (c->closed) return;
  if ((err == HPE_OK || err == HPE_PAUSED) && c->complete) {
    client_finish(c, 0);
    return;
  }
  snprintf(c->error, sizeof c->error, "the connection closed before the response was complete");
  client_finish(c, UV_EOF);
}

void http_client_feed_end(http_client *c, int status) {
  if (c->closed) return;
  c->usable = 0;
  if (c->phase == CL_IDLE) return;
  if (status >= 0) status = UV_EOF;
  if (c->paused || c->held_len > 0 || c->stopped) {
    c->eof_held = status == UV_EOF; /* after what is held */
    if (status != UV_EOF) input_end(c, status);
    return;
  }
  input_end(c, status);
}

/* Ends the request: the consumer hears once, then the connection is idle. */
static void client_finish(http_client *c, int status) {
  if (c->phase == CL_IDLE) return;
  c->phase = CL_IDLE;
  uv_timer_stop(&c->timer);
  c->held_len = 0;
  c->eof_held = c->stopped = 0;
  if (status != 0 || !c->keep_alive || c->leftover || c->body_open ||
      !llhttp_should_keep_alive(&c->parser))
    c->usable = 0;
  if (!c->usable) reading(c, 0);
  c->body_open = 0;
  if (status != 0 && c->drain_cb) {
    void (*cb)(void *, int) = c->drain_cb;
    c->drain_cb = NULL;
    cb(c->drain_arg, status);
    if (c->closed) return;
  }
  c->drain_cb = NULL;
  c->cb.on_end(c, c->arg, status);
}

static void on_resume(uv_timer_t *t) {
  http_client *c = container_of(t, http_client, resume);
  if (c->closed || c->paused || c->phase == CL_IDLE) return;
  /* Parsing may pause again and hold what is left: take the buffer first. */
  char *data = c->held;
  size_t len = c->held_len;
  c->held = NULL;
  c->held_len = c->held_cap = 0;
  if (len > 0 || c->stopped) {
    c->stopped = 0;
    parse(c, data ? data : "", len);
  }
  free(data);
  if (c->closed || c->phase == CL_IDLE || c->paused || c->held_len > 0) return;
  if (c->eof_held) {
    c->eof_held = 0;
    input_end(c, UV_EOF);
    return;
  }
  reading(c, 1);
}

void http_client_pause(http_client *c) {
  if (c->closed || c->paused) return;
  c->paused = 1;
  if (c->phase == CL_BODY) uv_timer_stop(&c->timer);
  reading(c, 0);
}

void http_client_resume(http_client *c) {
  if (c->closed || !c->paused) return;
  c->paused = 0;
  c->last_input = uv_now(c->loop);
  if (c->phase == CL_IDLE) return;
  timer_arm(c);
  uv_timer_start(&c->resume, on_resume, 0, 0);
}

/* ---- the request ---- */

typedef struct outbuf {
  char *data;
  size_t len, cap;
} outbuf;

static void out_add(outbuf *o, const void *p, size_t n) {
  if (o->cap - o->len < n) {
    size_t cap = o->cap ? o->cap : 1024;
    while (cap - o->len < n) cap *= 2;
    char *grown = xmalloc(cap);
    if (o->len) memcpy(grown, o->data, o->len);
    if (o->data) memset(o->data, 0, o->cap); /* request heads may carry credentials */
    free(o->data);
    o->data = grown;
    o->cap = cap;
  }
  memcpy(o->data + o->len, p, n);
  o->len += n;
}

static void out_str(outbuf *o, const char *s) { out_add(o, s, strlen(s)); }

static void out_wipe(outbuf *o) {
  if (o->data) memset(o->data, 0, o->cap);
  free(o->data);
  o->data = NULL;
  o->len = o->cap = 0;
}

/* No CR, LF or other control byte but tab: nothing that could split the head. */
static int field_text_ok(const char *s) {
  for (; *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if ((ch < 0x20 && ch != '\t') || ch == 0x7f) return 0;
  }
  return 1;
}

static int target_ok(const char *s) {
  if (*s == '\0') return 0;
  for (; *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch <= 0x20 || ch == 0x7f) return 0;
  }
  return 1;
}

/* The framing is the client's: a caller's copy would make it ambiguous. */
static int header_framing(const char *name) {
  return strcasecmp(name, "content-length") == 0 || strcasecmp(name, "transfer-encoding") == 0 ||
         strcasecmp(name, "connection") == 0;
}

static int body_expected(const char *method) {
  return strcmp(method, "POST") == 0 || strcmp(method, "PUT") == 0 ||
         strcmp(method, "PATCH") == 0;
}

int http_client_send(http_client *c, const http_client_request *req) {
  if (c->closed || c->phase != CL_IDLE || !c->usable) return UV_EBUSY;
  if (req->method == NULL || req->target == NULL ||
      !http_token(req->method, strlen(req->method)) || !target_ok(req->target) ||
      (req->body_streamed && req->body_len > 0))
    return UV_EINVAL;
  for (size_t i = 0; i < req->n_headers; i++) {
    const http_header *h = &req->headers[i];
    if (!http_token(h->name, strlen(h->name)) || !field_text_ok(h->value) ||
        header_framing(h->name))
      return UV_EINVAL;
  }
  outbuf o = {0};
  out_str(&o, req->method);
  out_str(&o, " ");
  out_str(&o, req->target);
  out_str(&o, " HTTP/1.1\r\n");
  for (size_t i = 0; i < req->n_headers; i++) {
    out_str(&o, req->headers[i].name);
    out_str(&o, ": ");
    out_str(&o, req->headers[i].value);
    out_str(&o, "\r\n");
  }
  if (req->body_streamed) {
    out_str(&o, "Transfer-Encoding: chunked\r\n");
  } else if (req->body_len > 0 || body_expected(req->method)) {
    char cl[48];
    snprintf(cl, sizeof cl, "Content-Length: %zu\r\n", req->body_len);
    out_str(&o, cl);
  }
  if (!req->keep_alive) out_str(&o, "Connection: close\r\n");
  out_str(&o, "\r\n");
  if (req->body_len > 0) out_add(&o, req->body, req->body_len);

  llhttp_init(&c->parser, HTTP_RESPONSE, &parser_settings);
  c->parser.data = c;
  head_reset(c);
  c->phase = CL_HEAD;
  c->is_head = strcmp(req->method, "HEAD") == 0;
  c->keep_alive = req->keep_alive;
  c->body_open = req->body_streamed;
  c->got_bytes = c->complete = c->leftover = c->interim = c->fail_code = 0;
  c->paused = c->eof_held = c->stopped = 0;
  c->held_len = 0;
  c->error[0] = '\0';
  c->head_timeout_ms = req->head_timeout_ms;
  c->idle_timeout_ms = req->idle_timeout_ms;
  int rc = c->tr.write(c->tr.ctx, o.data, o.len);
  out_wipe(&o);
  if (rc != 0) {
    c->phase = CL_IDLE;
    c->usable = 0;
    c->body_open = 0;
    return rc;
  }
  if (c->head_timeout_ms) uv_timer_start(&c->timer, on_timer, c->head_timeout_ms, 0);
  reading(c, 1);
  return 0;
}

static int queue_full(http_client *c) {
  return c->tr.write_queued && c->tr.write_queued(c->tr.ctx) >= HTTP_CLIENT_WRITE_HIGH;
}

int http_client_write(http_client *c, const void *data, size_t len) {
  if (c->closed || !c->body_open) return UV_EINVAL;
  if (len == 0) return queue_full(c);
  outbuf o = {0};
  char size[24];
  snprintf(size, sizeof size, "%zx\r\n", len);
  out_str(&o, size);
  out_add(&o, data, len);
  out_str(&o, "\r\n");
  int rc = c->tr.write(c->tr.ctx, o.data, o.len);
  out_wipe(&o);
  if (rc != 0) {
    c->body_open = 0;
    c->usable = 0;
    return rc;
  }
  return queue_full(c);
}

int http_client_end(http_client *c) {
  if (c->closed || !c->body_open) return UV_EINVAL;
  c->body_open = 0;
  int rc = c->tr.write(c->tr.ctx, "0\r\n\r\n", 5);
  if (rc != 0) c->usable = 0;
  return rc;
}

int http_client_on_drain(http_client *c, void (*cb)(void *arg, int status), void *arg) {
  if (c->closed || !c->body_open || cb == NULL || !queue_full(c)) return UV_EINVAL;
  if (c->drain_cb) return UV_EBUSY;
  c->drain_cb = cb;
  c->drain_arg = arg;
  return 0;
}

void http_client_written(http_client *c, int status) {
  if (c->closed) return;
  if (status < 0) {
    c->usable = 0;
    c->body_open = 0;
    /* Before any answer the request is lost; after, the answer tells. */
    if (c->phase == CL_HEAD && !c->got_bytes) {
      snprintf(c->error, sizeof c->error, "could not send the request: %s", uv_strerror(status));
      client_finish(c, status);
    } else if (c->drain_cb) {
      void (*cb)(void *, int) = c->drain_cb;
      c->drain_cb = NULL;
      cb(c->drain_arg, status);
    }
    return;
  }
  if (c->drain_cb && (c->tr.write_queued == NULL ||
                      c->tr.write_queued(c->tr.ctx) < HTTP_CLIENT_WRITE_HIGH / 4)) {
    void (*cb)(void *, int) = c->drain_cb;
    c->drain_cb = NULL;
    cb(c->drain_arg, 0);
  }
}

int http_client_reusable(const http_client *c) {
  return !c->closed && c->usable && c->phase == CL_IDLE;
}

const char *http_client_error(const http_client *c) { return c->error; }

/* ---- lifetime ---- */

static void client_free(http_client *c) {
  free(c->hbuf);
  free(c->offs);
  free(c->hdrs);
  free(c->held);
  free(c);
}

static void on_timer_closed(uv_handle_t *h) {
  http_client *c = h->data;
  if (--c->handles == 0 && c->writes == 0) client_free(c);
}

http_client *http_client_new(uv_loop_t *loop, const http_client_transport *transport,
                             const http_client_callbacks *cb, void *arg) {
  http_client *c = xcalloc(1, sizeof *c);
  c->loop = loop;
  c->tr = *transport;
  c->cb = *cb;
  c->arg = arg;
  c->usable = 1;
  c->phase = CL_IDLE;
  uv_timer_init(loop, &c->timer);
  uv_timer_init(loop, &c->resume);
  c->timer.data = c->resume.data = c;
  c->handles = 2;
  return c;
}

void http_client_close(http_client *c) {
  if (c->closed) return;
  reading(c, 0);
  c->closed = 1;
  c->phase = CL_IDLE;
  c->usable = 0;
  c->drain_cb = NULL;
  if (c->stream) c->stream->data = NULL;
  uv_close((uv_handle_t *)&c->timer, on_timer_closed);
  uv_close((uv_handle_t *)&c->resume, on_timer_closed);
}

/* ---- the stream transport ---- */

typedef struct stream_write {
  uv_write_t req;
  http_client *c;
  size_t len;
  char data[];
} stream_write;

static void stream_on_written(uv_write_t *req, int status) {
  stream_write *w = container_of(req, stream_write, req);
  http_client *c = w->c;
  memset(w->data, 0, w->len);
  free(w);
  c->writes--;
  if (c->closed) {
    if (c->writes == 0 && c->handles == 0) client_free(c);
    return;
  }
  http_client_written(c, status == UV_ECANCELED ? 0 : status);
}

static int stream_write_bytes(void *ctx, const void *data, size_t len) {
  http_client *c = ctx;
  stream_write *w = xmalloc(sizeof *w + len);
  w->c = c;
  w->len = len;
  memcpy(w->data, data, len);
  uv_buf_t buf = uv_buf_init(w->data, (unsigned int)len);
  int rc = uv_write(&w->req, c->stream, &buf, 1, stream_on_written);
  if (rc != 0) {
    memset(w->data, 0, len);
    free(w);
    return rc;
  }
  c->writes++;
  return 0;
}

static size_t stream_write_queued(void *ctx) {
  http_client *c = ctx;
  return c->stream->write_queue_size;
}

static void stream_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  /* One buffer for every client: the parser copies what it keeps and a read
   * callback never runs inside another. */
  static char chunk[CLIENT_READ_BUF];
  (void)h;
  (void)suggested;
  *buf = uv_buf_init(chunk, sizeof chunk);
}

static void stream_on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  http_client *c = s->data;
  if (c == NULL || nread == 0) return;
  if (nread < 0) {
    uv_read_stop(s);
    http_client_feed_end(c, (int)nread);
    return;
  }
  http_client_feed(c, buf->base, (size_t)nread);
}

static void stream_read(void *ctx, int on) {
  http_client *c = ctx;
  if (c->closed) return;
  if (on) uv_read_start(c->stream, stream_alloc, stream_on_read);
  else uv_read_stop(c->stream);
}

http_client *http_client_new_stream(uv_loop_t *loop, uv_stream_t *stream,
                                    const http_client_callbacks *cb, void *arg) {
  http_client_transport tr = {
      .write = stream_write_bytes, .read = stream_read, .write_queued = stream_write_queued};
  http_client *c = http_client_new(loop, &tr, cb, arg);
  c->tr.ctx = c;
  c->stream = stream;
  stream->data = c;
  return c;
}
