/*
 * http/'s client driven against real servers on 127.0.0.1: the project's own
 * http server (fixed, chunked and streamed bodies, keep-alive, request
 * bodies), and a raw server that answers whatever bytes a test scripts
 * (malformed responses, early closes, silence). Everything runs on one loop
 * on the test's thread; run_until() turns it until the test's condition holds.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "base.h"
#include "http.h"

static uv_loop_t loop;

/* ---- what the client saw ---- */

typedef struct seen {
  int heads;
  int status;
  int64_t content_length;
  int keep_alive;
  char header_x[64];           /* value of X-Test, if any */
  size_t n_headers;
  char *body;                  /* kept up to body_keep bytes */
  size_t body_len;             /* all bytes received */
  size_t body_keep;
  uint64_t sum;                /* sum of every byte times its position, mod 2^64 */
  int ended;
  int end_status;
  int bodies_while_paused;
  /* pacing: pause after every pause_every bytes, resume pause_ms later */
  size_t pause_every;
  size_t since_pause;
  uint64_t pause_ms;
  int paused;
  int pauses;
  int close_in_body;           /* close the client from the first on_body */
  int pause_in_head;           /* pause from on_head, resume pause_ms later */
  uv_timer_t resume_timer;
  http_client *client;
} seen;

static seen S;

static void on_resume_timer(uv_timer_t *t) {
  (void)t;
  S.paused = 0;
  if (S.client) http_client_resume(S.client);
}

static void on_head(http_client *c, void *arg, const http_client_response *res) {
  (void)arg;
  S.heads++;
  S.status = res->status;
  S.content_length = res->content_length;
  S.keep_alive = res->keep_alive;
  S.n_headers = res->n_headers;
  for (size_t i = 0; i < res->n_headers; i++)
    if (strcasecmp(res->headers[i].name, "x-test") == 0)
      snprintf(S.header_x, sizeof S.header_x, "%s", res->headers[i].value);
  if (S.pause_in_head) {
    S.paused = 1;
    S.pauses++;
    http_client_pause(c);
    uv_timer_start(&S.resume_timer, on_resume_timer, S.pause_ms, 0);
  }
}

static void on_body(http_client *c, void *arg, const uint8_t *data, size_t len) {
  (void)arg;
  if (S.paused) S.bodies_while_paused++;
  for (size_t i = 0; i < len; i++) S.sum += (uint64_t)data[i] * (S.body_len + i + 1);
  if (S.body_len < S.body_keep) {
    size_t n = len < S.body_keep - S.body_len ? len : S.body_keep - S.body_len;
    memcpy(S.body + S.body_len, data, n);
  }
  S.body_len += len;
  if (S.close_in_body) {
    http_client_close(c);
    S.client = NULL;
    S.ended = 1;
    S.end_status = 1; /* closed by the test */
    return;
  }
  if (S.pause_every) {
    S.since_pause += len;
    if (S.since_pause >= S.pause_every) {
      S.since_pause = 0;
      S.paused = 1;
      S.pauses++;
      http_client_pause(c);
      uv_timer_start(&S.resume_timer, on_resume_timer, S.pause_ms, 0);
    }
  }
}

static void on_end(http_client *c, void *arg, int status) {
  (void)c;
  (void)arg;
  S.ended++;
  S.end_status = status;
}

static const http_client_callbacks callbacks = {
    .on_head = on_head, .on_body = on_body, .on_end = on_end};

static void seen_reset(void) {
  http_client *c = S.client;
  uv_timer_t t = S.resume_timer;
  free(S.body);
  memset(&S, 0, sizeof S);
  S.client = c;
  S.resume_timer = t;
  S.body_keep = 1 << 16;
  S.body = calloc(1, S.body_keep + 1);
}

/* ---- the loop ---- */

static int deadline_hit;

static void on_deadline(uv_timer_t *t) {
  (void)t;
  deadline_hit = 1;
}

/* Runs the loop until *flag is set or ms pass. Returns 1 when it was set. */
static int run_until(const int *flag, uint64_t ms) {
  uv_timer_t deadline;
  uv_timer_init(&loop, &deadline);
  deadline_hit = 0;
  uv_timer_start(&deadline, on_deadline, ms, 0);
  while (!*flag && !deadline_hit) uv_run(&loop, UV_RUN_ONCE);
  uv_close((uv_handle_t *)&deadline, NULL);
  uv_run(&loop, UV_RUN_NOWAIT);
  return *flag != 0;
}

static void run_for(uint64_t ms) {
  int never = 0;
  run_until(&never, ms);
}

/* ---- the project's server ---- */

static http_server server;
static int server_port;
#define STREAM_TOTAL (64u << 20)

typedef struct streamer {
  http_request *req;
  size_t sent, total;
} streamer;

static uint8_t pattern_byte(size_t i) { return (uint8_t)((i * 131u + (i >> 16)) & 0xff); }

static void stream_more(void *arg, int status);

static void stream_pump(streamer *st) {
  uint8_t chunk[32768];
  while (st->sent < st->total) {
    size_t n = st->total - st->sent < sizeof chunk ? st->total - st->sent : sizeof chunk;
    for (size_t i = 0; i < n; i++) chunk[i] = pattern_byte(st->sent + i);
    int rc = http_respond_write(st->req, chunk, n);
    if (rc < 0) {
      http_respond_abort(st->req);
      free(st);
      return;
    }
    st->sent += n;
    if (rc == 1 && http_respond_on_drain(st->req, stream_more, st) == 0) return;
  }
  http_respond_end(st->req);
  free(st);
}

static void stream_more(void *arg, int status) {
  streamer *st = arg;
  if (status == UV_ECANCELED) return;
  if (status < 0) {
    http_respond_abort(st->req);
    free(st);
    return;
  }
  stream_pump(st);
}

static void handler(http_server *s, http_request *req) {
  (void)s;
  const char *t = req->target;
  if (strcmp(t, "/hello") == 0) {
    http_header hs[] = {{"X-Test", "yes"}, {"X-Empty", ""}};
    http_respond(req, 200, hs, 2, "hello", 5);
    return;
  }
  if (strcmp(t, "/echo") == 0) {
    http_respond(req, 200, NULL, 0, req->body, req->body_len);
    return;
  }
  if (strcmp(t, "/chunks") == 0) {
    http_respond_start(req, 201, NULL, 0, -1);
    http_respond_write(req, "one,", 4);
    http_respond_write(req, "two,", 4);
    http_respond_write(req, "three", 5);
    http_respond_end(req);
    return;
  }
  if (strcmp(t, "/stream") == 0) {
    streamer *st = calloc(1, sizeof *st);
    st->req = req;
    st->total = STREAM_TOTAL;
    http_respond_start(req, 200, NULL, 0, (int64_t)st->total);
    stream_pump(st);
    return;
  }
  http_respond(req, 404, NULL, 0, "no", 2);
}

/* ---- the raw server: answers each request with the scripted bytes ---- */

typedef struct script {
  const char *bytes;
  size_t len;
  int close_after;             /* close once the bytes are written */
} script;

static script current;
static uv_tcp_t raw_listener;
static int raw_port;
static int raw_requests;       /* request heads seen */

typedef struct raw_conn {
  uv_tcp_t tcp;
  char in[8192];
  size_t in_len;
} raw_conn;

static void raw_closed(uv_handle_t *h) { free(h->data); }

static void raw_written(uv_write_t *w, int status) {
  (void)status;
  raw_conn *rc = w->data;
  if (current.close_after && !uv_is_closing((uv_handle_t *)&rc->tcp))
    uv_close((uv_handle_t *)&rc->tcp, raw_closed);
  free(w);
}

static void raw_alloc(uv_handle_t *h, size_t s, uv_buf_t *buf) {
  (void)s;
  raw_conn *rc = h->data;
  *buf = uv_buf_init(rc->in + rc->in_len, (unsigned)(sizeof rc->in - rc->in_len));
}

static void raw_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  (void)buf;
  raw_conn *rc = s->data;
  if (n < 0 || rc->in_len + (size_t)n >= sizeof rc->in) {
    if (!uv_is_closing((uv_handle_t *)s)) uv_close((uv_handle_t *)s, raw_closed);
    return;
  }
  rc->in_len += (size_t)n;
  rc->in[rc->in_len] = '\0';
  char *end = strstr(rc->in, "\r\n\r\n");
  if (end == NULL) return;
  /* One request (no bodies here); what follows is the next one. */
  size_t used = (size_t)(end + 4 - rc->in);
  memmove(rc->in, rc->in + used, rc->in_len - used);
  rc->in_len -= used;
  raw_requests++;
  if (current.len == 0) {
    if (current.close_after) uv_close((uv_handle_t *)s, raw_closed);
    return; /* silence */
  }
  uv_write_t *w = malloc(sizeof *w);
  w->data = rc;
  uv_buf_t out = uv_buf_init((char *)current.bytes, (unsigned)current.len);
  uv_write(w, s, &out, 1, raw_written);
}

static void raw_on_connection(uv_stream_t *l, int status) {
  assert_int_equal(status, 0);
  raw_conn *rc = calloc(1, sizeof *rc);
  uv_tcp_init(&loop, &rc->tcp);
  rc->tcp.data = rc;
  assert_int_equal(uv_accept(l, (uv_stream_t *)&rc->tcp), 0);
  uv_read_start((uv_stream_t *)&rc->tcp, raw_alloc, raw_read);
}

static void script_set(const char *bytes, size_t len, int close_after) {
  current.bytes = bytes;
  current.len = len;
  current.close_after = close_after;
}

#define SCRIPT(lit, close_after) script_set((lit), sizeof(lit) - 1, (close_after))

/* ---- connections ---- */

typedef struct conn {
  uv_tcp_t tcp;
  uv_connect_t req;
  int connected;
  int closed;
} conn;

static conn *C;

static void on_connected(uv_connect_t *r, int status) {
  assert_int_equal(status, 0);
  conn *c = r->data;
  c->connected = 1;
}

/* A fresh connection to port with a client over it, in S.client. */
static void connect_to(int port) {
  C = calloc(1, sizeof *C);
  uv_tcp_init(&loop, &C->tcp);
  struct sockaddr_in addr;
  uv_ip4_addr("127.0.0.1", port, &addr);
  C->req.data = C;
  assert_int_equal(uv_tcp_connect(&C->req, &C->tcp, (const struct sockaddr *)&addr, on_connected), 0);
  assert_true(run_until(&C->connected, 5000));
  S.client = http_client_new_stream(&loop, (uv_stream_t *)&C->tcp, &callbacks, NULL);
}

static void conn_closed(uv_handle_t *h) {
  conn *c = container_of((uv_tcp_t *)h, conn, tcp);
  c->closed = 1;
}

static void disconnect(void) {
  if (S.client) http_client_close(S.client);
  S.client = NULL;
  uv_timer_stop(&S.resume_timer);
  uv_close((uv_handle_t *)&C->tcp, conn_closed);
  assert_true(run_until(&C->closed, 5000));
  free(C);
  C = NULL;
  run_for(5);
}

static int get(const char *target, uint64_t head_timeout, uint64_t idle_timeout) {
  http_header hs[] = {{"Host", "test.localhost"}};
  http_client_request req = {.method = "GET", .target = target, .headers = hs, .n_headers = 1,
                             .keep_alive = 1, .head_timeout_ms = head_timeout,
                             .idle_timeout_ms = idle_timeout};
  return http_client_send(S.client, &req);
}

/* ---- tests ---- */

static void test_fixed_length_and_reuse(void **state) {
  (void)state;
  seen_reset();
  connect_to(server_port);
  for (int i = 0; i < 3; i++) {
    seen_reset();
    assert_int_equal(get("/hello", 0, 0), 0);
    assert_int_equal(get("/hello", 0, 0), UV_EBUSY); /* one at a time */
    assert_true(run_until(&S.ended, 5000));
    assert_int_equal(S.end_status, 0);
    assert_int_equal(S.heads, 1);
    assert_int_equal(S.status, 200);
    assert_int_equal(S.content_length, 5);
    assert_true(S.keep_alive);
    assert_string_equal(S.header_x, "yes");
    assert_int_equal(S.body_len, 5);
    assert_memory_equal(S.body, "hello", 5);
    assert_true(http_client_reusable(S.client));
  }
  disconnect();
}

static void test_chunked(void **state) {
  (void)state;
  seen_reset();
  connect_to(server_port);
  assert_int_equal(get("/chunks", 0, 0), 0);
  assert_true(run_until(&S.ended, 5000));
  assert_int_equal(S.end_status, 0);
  assert_int_equal(S.status, 201);
  assert_int_equal(S.content_length, -1);
  assert_int_equal(S.body_len, 13);
  assert_memory_equal(S.body, "one,two,three", 13);
  assert_true(http_client_reusable(S.client));
  disconnect();
}

static size_t rss_now(void) { return (size_t)process_rss_bytes(getpid()); }

/* 64 MiB through a consumer that pauses every 256 KiB: no body callback
 * while paused, every byte in order, and memory stays far below the size. */
static void test_large_body_with_pause(void **state) {
  (void)state;
  seen_reset();
  connect_to(server_port);
  S.pause_every = 256u << 10;
  S.pause_ms = 1;
  size_t before = rss_now();
  assert_int_equal(get("/stream", 0, 2000), 0);
  assert_true(run_until(&S.ended, 60000));
  size_t after = rss_now();
  assert_int_equal(S.end_status, 0);
  assert_int_equal(S.content_length, STREAM_TOTAL);
  assert_int_equal(S.body_len, STREAM_TOTAL);
  assert_int_equal(S.bodies_while_paused, 0);
  assert_true(S.pauses >= 200);
  uint64_t sum = 0;
  for (size_t i = 0; i < STREAM_TOTAL; i++) sum += (uint64_t)pattern_byte(i) * (i + 1);
  assert_true(sum == S.sum);
  /* Server and client share this process: both must stay bounded. (Not
   * under AddressSanitizer, whose quarantine keeps what was freed.) */
#ifndef __SANITIZE_ADDRESS__
  assert_true(after < before + (16u << 20));
#else
  (void)before;
  (void)after;
#endif
  disconnect();
}

/* A response that arrives in one burst is still held back while paused. */
static void test_pause_holds_a_burst(void **state) {
  (void)state;
  static char burst[200000];
  size_t head = (size_t)snprintf(burst, sizeof burst,
                                 "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n\r\n",
                                 sizeof burst - 100);
  size_t body = sizeof burst - 100;
  memset(burst + head, 'b', body);
  seen_reset();
  script_set(burst, head + body, 0);
  connect_to(raw_port);
  S.pause_every = 1000;
  S.pause_ms = 2;
  assert_int_equal(get("/", 0, 0), 0);
  assert_true(run_until(&S.ended, 5000));
  assert_int_equal(S.end_status, 0);
  assert_int_equal(S.body_len, body);
  assert_int_equal(S.bodies_while_paused, 0);
  assert_true(S.pauses > 1);
  disconnect();
}

/* Paused from on_head: nothing follows until resumed, even a response whose
 * end needs no more input. */
static void test_pause_in_head(void **state) {
  (void)state;
  static const char *const scripts[] = {
      "HTTP/1.1 204 No Content\r\n\r\n",
      "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
      "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc",
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
  };
  for (size_t i = 0; i < ARRAY_SIZE(scripts); i++) {
    seen_reset();
    script_set(scripts[i], strlen(scripts[i]), 0);
    connect_to(raw_port);
    S.pause_in_head = 1;
    S.pause_ms = 100;
    assert_int_equal(get("/", 0, 0), 0);
    assert_true(run_until(&S.heads, 5000));
    run_for(50);
    assert_int_equal(S.ended, 0);
    assert_int_equal(S.body_len, 0);
    assert_true(run_until(&S.ended, 5000));
    assert_int_equal(S.end_status, 0);
    assert_int_equal(S.bodies_while_paused, 0);
    assert_int_equal(S.body_len, i >= 2 ? 3 : 0);
    assert_true(http_client_reusable(S.client));
    disconnect();
  }
}

static void expect_failure(const char *bytes, size_t len, int close_after, int expected) {
  seen_reset();
  script_set(bytes, len, close_after);
  connect_to(raw_port);
  assert_int_equal(get("/", 2000, 2000), 0);
  assert_true(run_until(&S.ended, 5000));
  assert_int_equal(S.ended, 1);
  if (S.end_status != expected)
    fail_msg("%.60s: expected %s, got %s (%s)", bytes, uv_err_name(expected),
             uv_err_name(S.end_status), http_client_error(S.client));
  assert_false(http_client_reusable(S.client));
  assert_true(http_client_error(S.client)[0] != '\0');
  run_for(20);
  assert_int_equal(S.ended, 1); /* once */
  disconnect();
}

#define EXPECT_FAILURE(lit, close_after, expected) \
  expect_failure((lit), sizeof(lit) - 1, (close_after), (expected))

static void test_malformed(void **state) {
  (void)state;
  EXPECT_FAILURE("HTTP/1.1 200 OK\r\nContent-Length: abc\r\n\r\n", 0, UV_EPROTO);
  EXPECT_FAILURE("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 0, UV_EPROTO);
  EXPECT_FAILURE("HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", 0,
                 UV_EPROTO);
  EXPECT_FAILURE("HTTQ/1.1 200 OK\r\n\r\n", 0, UV_EPROTO);
  EXPECT_FAILURE("HTTP/1.1 2x0 OK\r\nContent-Length: 0\r\n\r\n", 0, UV_EPROTO);
  EXPECT_FAILURE("HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n", 0, UV_ENOTSUP);
  /* A head over the limit, in a header far larger than one read. */
  size_t big = HTTP_CLIENT_MAX_HEADER_BYTES + 4096;
  char *huge = malloc(big + 64);
  size_t n = (size_t)sprintf(huge, "HTTP/1.1 200 OK\r\nX-Big: ");
  memset(huge + n, 'h', big);
  n += big;
  memcpy(huge + n, "\r\n\r\n", 4);
  expect_failure(huge, n + 4, 0, UV_E2BIG);
  free(huge);
}

static void test_interim_and_headers(void **state) {
  (void)state;
  seen_reset();
  SCRIPT("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
         "HTTP/1.1 200 OK\r\nX-Test: final\r\nX-Empty:\r\nContent-Length: 2\r\n\r\nok",
         0);
  connect_to(raw_port);
  assert_int_equal(get("/", 0, 0), 0);
  assert_true(run_until(&S.ended, 5000));
  assert_int_equal(S.end_status, 0);
  assert_int_equal(S.heads, 1);
  assert_int_equal(S.status, 200);
  assert_string_equal(S.header_x, "final");
  assert_int_equal(S.n_headers, 3);
  assert_memory_equal(S.body, "ok", 2);
  disconnect();
}

static void test_early_close(void **state) {
  (void)state;
  /* Nothing at all: the request may be retried on a fresh connection. */
  expect_failure("", 0, 1, UV_ECONNRESET);
  EXPECT_FAILURE("HTTP/1.1 200 OK\r\nContent-Le", 1, UV_EOF);
  EXPECT_FAILURE("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhalf", 1, UV_EOF);
  EXPECT_FAILURE("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nhalf\r\n", 1, UV_EOF);
  /* A body delimited by the close is complete, but the connection is done. */
  seen_reset();
  SCRIPT("HTTP/1.1 200 OK\r\n\r\nuntil the end", 1);
  connect_to(raw_port);
  assert_int_equal(get("/", 0, 0), 0);
  assert_true(run_until(&S.ended, 5000));
  assert_int_equal(S.end_status, 0);
  assert_int_equal(S.content_length, -1);
  assert_int_equal(S.body_len, 13);
  assert_false(http_client_reusable(S.client));
  disconnect();
}

static void test_not_reusable(void **state) {
  (void)state;
  /* Bytes past the response. */
  seen_reset();
  SCRIPT("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokEXTRA", 0);
  connect_to(raw_port);
  assert_int_equal(get("/", 0, 0), 0);
  assert_true(run_until(&S.ended, 5000));
  assert_int_equal(S.end_status, 0);
  assert_false(http_client_reusable(S.client));
  assert_int_equal(get("/", 0, 0), UV_EBUSY);
  disconnect();
  /* The server says close. */
  seen_reset();
  SCRIPT("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", 0);
  connect_to(raw_port);
  assert_int_equal(get("/", 0, 0), 0);
  assert_true(run_until(&S.ended, 5000));
  assert_int_equal(S.end_status, 0);
  assert_false(S.keep_alive);
  assert_false(http_client_reusable(S.client));
  disconnect();
}

static void test_timeouts(void **state) {
  (void)state;
  /* No head at all. */
  seen_reset();
  script_set("", 0, 0);
  connect_to(raw_port);
  uint64_t t0 = uv_now(&loop);
  assert_int_equal(get("/", 100, 0), 0);
  assert_true(run_until(&S.ended, 5000));
  assert_int_equal(S.end_status, UV_ETIMEDOUT);
  assert_true(uv_now(&loop) - t0 >= 100);
  disconnect();
  /* A body that stops. */
  seen_reset();
  SCRIPT("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhalf", 0);
  connect_to(raw_port);
  assert_int_equal(get("/", 0, 100), 0);
  assert_true(run_until(&S.ended, 5000));
  assert_int_equal(S.end_status, UV_ETIMEDOUT);
  assert_int_equal(S.body_len, 4);
  disconnect();
  /* Paused longer than the idle timeout: the consumer's wait does not count. */
  seen_reset();
  SCRIPT("HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nhalf", 0);
  connect_to(raw_port);
  S.pause_every = 1;
  S.pause_ms = 300;
  assert_int_equal(get("/", 0, 100), 0);
  run_for(250);
  assert_int_equal(S.ended, 0);
  assert_true(S.paused);
  assert_true(run_until(&S.ended, 5000)); /* resumed: then the silence counts */
  assert_int_equal(S.end_status, UV_ETIMEDOUT);
  disconnect();
}

static void on_drained(void *arg, int status) {
  int *flag = arg;
  *flag = status == 0 ? 1 : -1;
}

/* A streamed request body (chunked), paced by on_drain. */
static void test_streamed_request_body(void **state) {
  (void)state;
  seen_reset();
  S.body_keep = 4u << 20;
  free(S.body);
  S.body = calloc(1, S.body_keep);
  connect_to(server_port);
  /* Small socket buffers: the kernel must not absorb the whole body. */
  int small = 65536;
  assert_int_equal(uv_send_buffer_size((uv_handle_t *)&C->tcp, &small), 0);
  http_header hs[] = {{"Host", "test.localhost"}};
  http_client_request req = {.method = "POST", .target = "/echo", .headers = hs, .n_headers = 1,
                             .body_streamed = 1, .keep_alive = 1};
  assert_int_equal(http_client_send(S.client, &req), 0);
  static uint8_t chunk[65536];
  size_t total = 4u << 20, sent = 0;
  int waits = 0;
  while (sent < total) {
    for (size_t i = 0; i < sizeof chunk; i++) chunk[i] = pattern_byte(sent + i);
    int rc = http_client_write(S.client, chunk, sizeof chunk);
    assert_true(rc >= 0);
    sent += sizeof chunk;
    if (rc == 1) {
      int drained = 0;
      assert_int_equal(http_client_on_drain(S.client, on_drained, &drained), 0);
      assert_true(run_until(&drained, 10000));
      assert_int_equal(drained, 1);
      waits++;
    }
  }
  assert_int_equal(http_client_end(S.client), 0);
  assert_int_equal(http_client_write(S.client, "x", 1), UV_EINVAL);
  assert_true(run_until(&S.ended, 10000));
  assert_int_equal(S.end_status, 0);
  assert_int_equal(S.status, 200);
  assert_int_equal(S.body_len, total);
  for (size_t i = 0; i < total; i++)
    if ((uint8_t)S.body[i] != pattern_byte(i)) fail_msg("byte %zu differs", i);
  assert_true(waits > 0);
  assert_true(http_client_reusable(S.client));
  disconnect();
}

static void test_invalid_requests(void **state) {
  (void)state;
  seen_reset();
  connect_to(server_port);
  http_header framing[] = {{"Content-Length", "5"}};
  http_header split[] = {{"X-A", "1\r\nX-B: 2"}};
  http_header badname[] = {{"X A", "1"}};
  http_client_request req = {.method = "GET", .target = "/hello", .keep_alive = 1};
  req.headers = framing, req.n_headers = 1;
  assert_int_equal(http_client_send(S.client, &req), UV_EINVAL);
  req.headers = split;
  assert_int_equal(http_client_send(S.client, &req), UV_EINVAL);
  req.headers = badname;
  assert_int_equal(http_client_send(S.client, &req), UV_EINVAL);
  req.headers = NULL, req.n_headers = 0;
  req.target = "/a b";
  assert_int_equal(http_client_send(S.client, &req), UV_EINVAL);
  req.target = "/hello";
  req.method = "G T";
  assert_int_equal(http_client_send(S.client, &req), UV_EINVAL);
  /* None of that was sent: the connection still works. */
  assert_int_equal(get("/hello", 0, 0), 0);
  assert_true(run_until(&S.ended, 5000));
  assert_int_equal(S.end_status, 0);
  assert_int_equal(S.body_len, 5);
  disconnect();
}

/* Closing from inside a callback stops everything at once. */
static void test_close_in_callback(void **state) {
  (void)state;
  seen_reset();
  connect_to(server_port);
  S.close_in_body = 1;
  assert_int_equal(get("/chunks", 0, 0), 0);
  assert_true(run_until(&S.ended, 5000));
  assert_int_equal(S.end_status, 1);
  run_for(50);
  assert_int_equal(S.ended, 1);
  assert_int_equal(S.body_len, 4); /* the first chunk, then nothing */
  disconnect();
}

/* ---- a transport of the caller's (as the egress's TLS is) ---- */

typedef struct pipe_tr {
  char out[4096];
  size_t out_len;
  int reading;
} pipe_tr;

static int pipe_write(void *ctx, const void *data, size_t len) {
  pipe_tr *p = ctx;
  if (len > sizeof p->out - p->out_len) return UV_ENOBUFS;
  memcpy(p->out + p->out_len, data, len);
  p->out_len += len;
  return 0;
}

static void pipe_read(void *ctx, int on) {
  pipe_tr *p = ctx;
  p->reading = on;
}

static void test_custom_transport(void **state) {
  (void)state;
  seen_reset();
  pipe_tr p = {0};
  http_client_transport tr = {.write = pipe_write, .read = pipe_read, .ctx = &p};
  http_client *c = http_client_new(&loop, &tr, &callbacks, NULL);
  http_header hs[] = {{"Host", "example.com"}};
  http_client_request req = {.method = "HEAD", .target = "/x", .headers = hs, .n_headers = 1,
                             .keep_alive = 1};
  assert_int_equal(http_client_send(c, &req), 0);
  assert_true(p.reading);
  assert_string_equal(p.out, "HEAD /x HTTP/1.1\r\nHost: example.com\r\n\r\n");
  /* A HEAD answer has no body whatever its Content-Length says; fed byte by byte. */
  const char *resp = "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n";
  for (const char *q = resp; *q; q++) assert_int_equal(http_client_feed(c, q, 1), 0);
  assert_int_equal(S.ended, 1);
  assert_int_equal(S.end_status, 0);
  assert_int_equal(S.content_length, 1000);
  assert_int_equal(S.body_len, 0);
  assert_true(http_client_reusable(c));
  /* Input nobody asked for spoils the connection. */
  assert_true(http_client_feed(c, "x", 1) < 0);
  assert_false(http_client_reusable(c));
  http_client_close(c);
  run_for(5);
}

int main(void) {
  if (uv_loop_init(&loop) != 0) return 1;
  http_server_config cfg = {0};
  if (http_server_init(&server, &loop, &cfg, handler, NULL) != 0) return 1;
  if (http_server_listen(&server, "127.0.0.1", 0) != 0) return 1;
  server_port = http_server_port(&server);
  struct sockaddr_in addr;
  uv_ip4_addr("127.0.0.1", 0, &addr);
  uv_tcp_init(&loop, &raw_listener);
  if (uv_tcp_bind(&raw_listener, (const struct sockaddr *)&addr, 0) != 0) return 1;
  if (uv_listen((uv_stream_t *)&raw_listener, 64, raw_on_connection) != 0) return 1;
  struct sockaddr_storage bound;
  int len = sizeof bound;
  uv_tcp_getsockname(&raw_listener, (struct sockaddr *)&bound, &len);
  raw_port = ntohs(((struct sockaddr_in *)&bound)->sin_port);
  uv_timer_init(&loop, &S.resume_timer);

  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fixed_length_and_reuse),
      cmocka_unit_test(test_chunked),
      cmocka_unit_test(test_large_body_with_pause),
      cmocka_unit_test(test_pause_holds_a_burst),
      cmocka_unit_test(test_pause_in_head),
      cmocka_unit_test(test_malformed),
      cmocka_unit_test(test_interim_and_headers),
      cmocka_unit_test(test_early_close),
      cmocka_unit_test(test_not_reusable),
      cmocka_unit_test(test_timeouts),
      cmocka_unit_test(test_streamed_request_body),
      cmocka_unit_test(test_invalid_requests),
      cmocka_unit_test(test_close_in_callback),
      cmocka_unit_test(test_custom_transport),
  };
  int failed = cmocka_run_group_tests(tests, NULL, NULL);
  free(S.body);
  return failed;
}
