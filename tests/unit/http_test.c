/*
 * http/ driven as a client would: a real server on 127.0.0.1, port 0, runs
 * its uv loop on a thread; the test talks to it over blocking sockets and
 * reaches into the loop only through run_on_loop().
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "base.h"
#include "http.h"

/* ---- the server side: a loop on its own thread ---- */

typedef struct harness harness;
typedef void (*loop_fn)(harness *h, void *arg);

struct harness {
  uv_loop_t loop;
  http_server server;
  uv_async_t wake;
  uv_thread_t thread;
  uv_mutex_t mu;
  uv_cond_t cv;
  loop_fn cmd;
  void *cmd_arg;
  int cmd_done;
  int port;
  atomic_int requests;
  atomic_int aborts;
  http_request *held;  /* loop thread only */
  int held_rc;
};

static void on_wake(uv_async_t *a) {
  harness *h = a->data;
  uv_mutex_lock(&h->mu);
  loop_fn fn = h->cmd;
  void *arg = h->cmd_arg;
  uv_mutex_unlock(&h->mu);
  if (fn == NULL) return;
  fn(h, arg);
  uv_mutex_lock(&h->mu);
  h->cmd = NULL;
  h->cmd_done = 1;
  uv_cond_signal(&h->cv);
  uv_mutex_unlock(&h->mu);
}

/* Runs fn on the loop thread and waits for it. */
static void run_on_loop(harness *h, loop_fn fn, void *arg) {
  uv_mutex_lock(&h->mu);
  h->cmd = fn;
  h->cmd_arg = arg;
  h->cmd_done = 0;
  uv_mutex_unlock(&h->mu);
  uv_async_send(&h->wake);
  uv_mutex_lock(&h->mu);
  while (!h->cmd_done) uv_cond_wait(&h->cv, &h->mu);
  uv_mutex_unlock(&h->mu);
}

static char big_body[256 * 1024];
/* Larger than what the kernel's socket buffers absorb: most of it waits in
 * the server's write queue until the client reads. */
#define HUGE_LEN (16u << 20)
static char *huge_body;

static void handler(http_server *s, http_request *req) {
  harness *h = s->data;
  atomic_fetch_add(&h->requests, 1);
  const char *t = req->target;
  if (strncmp(t, "/hold", 5) == 0) {
    h->held = req;
    return;
  }
  if (strcmp(t, "/echo") == 0) {
    http_header hs[] = {{"X-Method", req->method}};
    http_respond(req, 200, hs, 1, req->body, req->body_len);
    return;
  }
  if (strcmp(t, "/headers") == 0) {
    char out[8192];
    size_t n = 0;
    for (size_t i = 0; i < req->n_headers && n < sizeof out - 512; i++)
      n += (size_t)snprintf(out + n, sizeof out - n, "%s=%s\n", req->headers[i].name,
                            req->headers[i].value);
    http_respond(req, 200, NULL, 0, out, n);
    return;
  }
  if (strcmp(t, "/nocontent") == 0) {
    http_respond(req, 204, NULL, 0, "ignored", 7);
    return;
  }
  if (strcmp(t, "/error") == 0) {
    http_respond_error(req, 422, "bad \"thing\"", "{\"detail\":1}");
    return;
  }
  if (strcmp(t, "/close") == 0) {
    req->keep_alive = 0;
    http_respond(req, 200, NULL, 0, "bye", 3);
    return;
  }
  if (strcmp(t, "/big") == 0) {
    http_respond(req, 200, NULL, 0, big_body, sizeof big_body);
    return;
  }
  if (strcmp(t, "/huge") == 0) {
    http_respond(req, 200, NULL, 0, huge_body, HUGE_LEN);
    return;
  }
  if (strcmp(t, "/inject") == 0) {
    http_header hs[] = {{"X-Bad", "a\r\nSet-Cookie: x=1"},
                        {"Content-Length", "999"},
                        {"X-Good", "yes"}};
    http_respond(req, 200, hs, 3, "ok", 2);
    return;
  }
  http_header hs[] = {{"X-Id", req->id}, {"X-Keep", req->keep_alive ? "1" : "0"}};
  http_respond(req, 200, hs, 2, t, strlen(t));
}

static void on_abort(http_server *s, http_request *req) {
  harness *h = s->data;
  (void)req;
  atomic_fetch_add(&h->aborts, 1);
}

static void loop_main(void *arg) {
  harness *h = arg;
  uv_run(&h->loop, UV_RUN_DEFAULT);
}

static harness *harness_start(const http_server_config *cfg) {
  harness *h = calloc(1, sizeof *h);
  assert_non_null(h);
  assert_int_equal(uv_loop_init(&h->loop), 0);
  assert_int_equal(http_server_init(&h->server, &h->loop, cfg, handler, h), 0);
  h->server.on_abort = on_abort;
  assert_int_equal(http_server_listen(&h->server, "localhost", 0), 0);
  h->port = http_server_port(&h->server);
  assert_true(h->port > 0);
  uv_mutex_init(&h->mu);
  uv_cond_init(&h->cv);
  assert_int_equal(uv_async_init(&h->loop, &h->wake, on_wake), 0);
  h->wake.data = h;
  assert_int_equal(uv_thread_create(&h->thread, loop_main, h), 0);
  return h;
}

static void on_server_closed(http_server *s) {
  harness *h = s->data;
  uv_close((uv_handle_t *)&h->wake, NULL);
}

static void cmd_close(harness *h, void *arg) {
  (void)arg;
  http_server_close(&h->server, on_server_closed);
  if (h->held) { /* the handler still answers what it holds */
    h->held_rc = http_respond(h->held, 200, NULL, 0, NULL, 0);
    h->held = NULL;
  }
}

static void harness_stop(harness *h) {
  run_on_loop(h, cmd_close, NULL);
  uv_thread_join(&h->thread);
  /* Every handle of the server is closed, or this fails with UV_EBUSY. */
  assert_int_equal(uv_loop_close(&h->loop), 0);
  uv_mutex_destroy(&h->mu);
  uv_cond_destroy(&h->cv);
  free(h);
}

typedef struct respond_args {
  int status;
  const char *body;
  int rc;
} respond_args;

static void cmd_respond_held(harness *h, void *arg) {
  respond_args *a = arg;
  a->rc = -12345;
  if (h->held == NULL) return;
  http_request *req = h->held;
  h->held = NULL;
  a->rc = http_respond(req, a->status, NULL, 0, a->body, a->body ? strlen(a->body) : 0);
}

static int respond_held(harness *h, int status, const char *body) {
  respond_args a = {status, body, 0};
  run_on_loop(h, cmd_respond_held, &a);
  return a.rc;
}

typedef struct server_stats {
  size_t connections;
  size_t in_flight;
  int held;
  int held_keep_alive;
  uint64_t refused_cap, refused_addr, refused_fd, body_timeouts;
} server_stats;

static void cmd_stats(harness *h, void *arg) {
  server_stats *st = arg;
  st->connections = h->server.connections;
  st->in_flight = h->server.in_flight;
  st->refused_cap = h->server.refused_cap;
  st->refused_addr = h->server.refused_addr;
  st->refused_fd = h->server.refused_fd;
  st->body_timeouts = h->server.body_timeouts;
  st->held = h->held != NULL;
  st->held_keep_alive = h->held ? h->held->keep_alive : -1;
}

static server_stats stats(harness *h) {
  server_stats st;
  run_on_loop(h, cmd_stats, &st);
  return st;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* Polls the loop until a request is held (or 3 s pass). */
static int wait_held(harness *h) {
  for (int i = 0; i < 600; i++) {
    if (stats(h).held) return 1;
    sleep_ms(5);
  }
  return 0;
}

static int wait_connections(harness *h, size_t n) {
  for (int i = 0; i < 600; i++) {
    if (stats(h).connections == n) return 1;
    sleep_ms(5);
  }
  return 0;
}

static void cmd_stop_accepting(harness *h, void *arg) {
  (void)arg;
  http_server_stop_accepting(&h->server);
}

/* ---- the client side: blocking sockets ---- */

typedef struct client {
  int fd;
  char *buf;
  size_t len;
  size_t cap;
} client;

/* rcvbuf > 0 fixes the receive buffer (no autotuning) to bound what the kernel absorbs. */
static int tcp_connect_buf(int port, int rcvbuf) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  if (rcvbuf > 0) setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
    close(fd);
    return -1;
  }
  struct timeval tv = {5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

static int tcp_connect(int port) { return tcp_connect_buf(port, 0); }

/* A connection from another loopback address (127.0.0.0/8 is all ours). */
static client *client_open_from(harness *h, const char *source) {
  client *cl = calloc(1, sizeof *cl);
  assert_non_null(cl);
  cl->fd = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(cl->fd >= 0);
  struct sockaddr_in from = {.sin_family = AF_INET};
  assert_int_equal(inet_pton(AF_INET, source, &from.sin_addr), 1);
  assert_int_equal(bind(cl->fd, (struct sockaddr *)&from, sizeof from), 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)h->port)};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(connect(cl->fd, (struct sockaddr *)&sa, sizeof sa), 0);
  struct timeval tv = {5, 0};
  setsockopt(cl->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return cl;
}

static client *client_open_buf(harness *h, int rcvbuf) {
  client *cl = calloc(1, sizeof *cl);
  assert_non_null(cl);
  cl->fd = tcp_connect_buf(h->port, rcvbuf);
  assert_true(cl->fd >= 0);
  return cl;
}

static client *client_open(harness *h) { return client_open_buf(h, 0); }

static void client_free(client *cl) {
  if (cl->fd >= 0) close(cl->fd);
  free(cl->buf);
  free(cl);
}

static void send_bytes(client *cl, const char *data, size_t len) {
  while (len > 0) {
    ssize_t n = send(cl->fd, data, len, MSG_NOSIGNAL);
    assert_true(n > 0);
    data += n;
    len -= (size_t)n;
  }
}

static void send_str(client *cl, const char *s) { send_bytes(cl, s, strlen(s)); }

/* Reads more bytes; returns what recv returned. */
static ssize_t client_fill(client *cl) {
  if (cl->cap - cl->len < 65536) {
    cl->cap = cl->cap ? cl->cap * 2 : 131072;
    cl->buf = realloc(cl->buf, cl->cap);
    assert_non_null(cl->buf);
  }
  ssize_t n = recv(cl->fd, cl->buf + cl->len, cl->cap - cl->len, 0);
  if (n > 0) cl->len += (size_t)n;
  return n;
}

static void client_consume(client *cl, size_t n) {
  memmove(cl->buf, cl->buf + n, cl->len - n);
  cl->len -= n;
}

typedef struct response {
  int status;
  char *head;
  char *body;
  size_t body_len;
} response;

static void response_free(response *r) {
  free(r->head);
  free(r->body);
  memset(r, 0, sizeof *r);
}

/* A header's value (first occurrence) copied into out; NULL when absent. */
static const char *header_of(const response *r, const char *name, char *out, size_t cap) {
  size_t nl = strlen(name);
  const char *line = strstr(r->head, "\r\n");
  while (line != NULL && line[2] != '\r') {
    line += 2;
    const char *end = strstr(line, "\r\n");
    if (strncasecmp(line, name, nl) == 0 && line[nl] == ':') {
      const char *v = line + nl + 1;
      while (*v == ' ') v++;
      size_t vl = (size_t)(end - v);
      if (vl >= cap) vl = cap - 1;
      memcpy(out, v, vl);
      out[vl] = '\0';
      return out;
    }
    line = end;
  }
  return NULL;
}

static int read_response(client *cl, response *r, int head_only) {
  memset(r, 0, sizeof *r);
  char *end;
  while (cl->buf == NULL || (end = memmem(cl->buf, cl->len, "\r\n\r\n", 4)) == NULL)
    if (client_fill(cl) <= 0) return -1;
  size_t hlen = (size_t)(end - cl->buf) + 4;
  r->head = strndup(cl->buf, hlen);
  client_consume(cl, hlen);
  if (strncmp(r->head, "HTTP/1.1 ", 9) != 0) return -1;
  r->status = atoi(r->head + 9);
  char v[64];
  size_t blen = 0;
  if (!head_only && header_of(r, "Content-Length", v, sizeof v)) blen = strtoul(v, NULL, 10);
  while (cl->len < blen)
    if (client_fill(cl) <= 0) return -1;
  r->body = malloc(blen + 1);
  memcpy(r->body, cl->buf, blen);
  r->body[blen] = '\0';
  r->body_len = blen;
  client_consume(cl, blen);
  return 0;
}

/* True when the server closed the connection with nothing more to read. */
static int server_closed(client *cl) {
  if (cl->len > 0) return 0;
  char c;
  ssize_t n = recv(cl->fd, &c, 1, 0);
  return n == 0 || (n < 0 && errno == ECONNRESET);
}

static void expect_response(client *cl, int status, const char *body) {
  response r;
  assert_int_equal(read_response(cl, &r, 0), 0);
  assert_int_equal(r.status, status);
  if (body) assert_string_equal(r.body, body);
  response_free(&r);
}

#define GET(path) "GET " path " HTTP/1.1\r\nHost: t\r\n\r\n"

/* ---- tests ---- */

static void test_simple_get(void **state) {
  (void)state;
  http_server_config cfg = {.server_name = "edgenode-test"};
  harness *h = harness_start(&cfg);
  client *cl = client_open(h);
  send_str(cl, GET("/hello?x=1"));
  response r;
  assert_int_equal(read_response(cl, &r, 0), 0);
  assert_int_equal(r.status, 200);
  assert_string_equal(r.body, "/hello?x=1");
  assert_non_null(strstr(r.head, "HTTP/1.1 200 OK\r\n"));
  char v[128];
  assert_string_equal(header_of(&r, "Content-Length", v, sizeof v), "10");
  assert_string_equal(header_of(&r, "Connection", v, sizeof v), "keep-alive");
  assert_string_equal(header_of(&r, "Server", v, sizeof v), "edgenode-test");
  assert_non_null(header_of(&r, "Date", v, sizeof v));
  assert_int_equal(strlen(v), 29);
  assert_true(strcmp(v + 26, "GMT") == 0);
  assert_string_equal(header_of(&r, "X-Keep", v, sizeof v), "1");
  assert_non_null(header_of(&r, "X-Id", v, sizeof v));
  assert_int_equal(strlen(v), 16);
  response_free(&r);
  client_free(cl);
  assert_true(wait_connections(h, 0));
  harness_stop(h);
}

static int cmp_str(const void *a, const void *b) { return strcmp(a, b); }

static void test_keep_alive_1000(void **state) {
  (void)state;
  harness *h = harness_start(NULL);
  client *cl = client_open(h);
  enum { N = 1000 };
  char(*ids)[17] = calloc(N, 17);
  for (int i = 0; i < N; i++) {
    char req[128], path[32];
    snprintf(path, sizeof path, "/r%d", i);
    snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: t\r\n\r\n", path);
    send_str(cl, req);
    response r;
    assert_int_equal(read_response(cl, &r, 0), 0);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, path);
    char v[64];
    assert_non_null(header_of(&r, "X-Id", v, sizeof v));
    assert_int_equal(strlen(v), 16);
    assert_int_equal(strspn(v, "0123456789abcdef"), 16);
    memcpy(ids[i], v, 17);
    response_free(&r);
  }
  qsort(ids, N, 17, cmp_str);
  for (int i = 1; i < N; i++) assert_true(strcmp(ids[i - 1], ids[i]) != 0);
  free(ids);
  assert_int_equal(atomic_load(&h->requests), N);
  assert_int_equal(stats(h).connections, 1);
  client_free(cl);
  harness_stop(h);
}

static void test_pipelining(void **state) {
  (void)state;
  harness *h = harness_start(NULL);
  client *cl = client_open(h);
  send_str(cl, GET("/a") GET("/b") GET("/c"));
  expect_response(cl, 200, "/a");
  expect_response(cl, 200, "/b");
  expect_response(cl, 200, "/c");
  /* Bodies in the middle of a pipeline: the parser stops exactly at message ends. */
  send_str(cl,
           "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello"
           "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
           "3\r\nabc\r\n0\r\n\r\n" GET("/d"));
  expect_response(cl, 200, "hello");
  expect_response(cl, 200, "abc");
  expect_response(cl, 200, "/d");
  client_free(cl);
  harness_stop(h);
}

/* The second request is not parsed while the handler holds the first. */
static void test_pipelining_waits_for_handler(void **state) {
  (void)state;
  harness *h = harness_start(NULL);
  client *cl = client_open(h);
  send_str(cl, GET("/hold") GET("/b") GET("/c"));
  assert_true(wait_held(h));
  sleep_ms(50);
  assert_int_equal(atomic_load(&h->requests), 1);
  assert_int_equal(stats(h).in_flight, 1);
  assert_int_equal(respond_held(h, 201, "held"), 0);
  expect_response(cl, 201, "held");
  expect_response(cl, 200, "/b");
  expect_response(cl, 200, "/c");
  assert_int_equal(atomic_load(&h->requests), 3);
  assert_int_equal(stats(h).in_flight, 0);
  client_free(cl);
  harness_stop(h);
}

typedef struct bulk_send {
  client *cl;
  char *data;
  size_t len;
} bulk_send;

static void bulk_sender(void *arg) {
  bulk_send *b = arg;
  send_bytes(b->cl, b->data, b->len);
}

/* More pipelined bytes than the server buffers: it stops reading, then resumes. */
static void test_pipelining_backpressure(void **state) {
  (void)state;
  harness *h = harness_start(NULL);
  client *cl = client_open(h);
  enum { N = 3000 };
  size_t cap = (size_t)N * 64 + 128, len = 0;
  char *data = malloc(cap);
  len += (size_t)snprintf(data + len, cap - len, GET("/hold"));
  for (int i = 0; i < N; i++)
    len += (size_t)snprintf(data + len, cap - len, "GET /p%d HTTP/1.1\r\nHost: t\r\n\r\n", i);
  bulk_send b = {cl, data, len};
  uv_thread_t t;
  assert_int_equal(uv_thread_create(&t, bulk_sender, &b), 0);
  assert_true(wait_held(h));
  sleep_ms(100);
  assert_int_equal(atomic_load(&h->requests), 1);
  assert_int_equal(respond_held(h, 200, "first"), 0);
  expect_response(cl, 200, "first");
  for (int i = 0; i < N; i++) {
    char path[32];
    snprintf(path, sizeof path, "/p%d", i);
    expect_response(cl, 200, path);
  }
  uv_thread_join(&t);
  free(data);
  client_free(cl);
  harness_stop(h);
}

/* ---- streamed request bodies ---- */

typedef struct body_take {
  size_t bytes;
  int rc; /* the last http_request_body_read() result */
} body_take;

static void cmd_take_body(harness *h, void *arg) {
  body_take *t = arg;
  const uint8_t *data;
  t->rc = UV_EINVAL;
  if (h->held == NULL) return;
  while ((t->rc = http_request_body_read(h->held, &data)) > 0) t->bytes += (size_t)t->rc;
}

/* The window of unread body bytes overfills exactly on the body's last
 * byte: the message must still complete (the end must be readable). */
static void test_streamed_body_overfills_on_last_byte(void **state) {
  (void)state;
  http_server_config cfg = {.stream_body_above = 16};
  harness *h = harness_start(&cfg);
  client *cl = client_open(h);
  enum { BODY = 256 * 1024 + 1 };
  char head[128];
  int n = snprintf(head, sizeof head, "POST /hold HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", BODY);
  char *body = malloc(BODY);
  memset(body, 'b', BODY);
  send_bytes(cl, head, (size_t)n);
  send_bytes(cl, body, BODY);
  free(body);
  assert_true(wait_held(h));
  sleep_ms(200); /* every byte is in and parsed; nothing was taken yet */
  body_take t = {0, UV_EAGAIN};
  for (int i = 0; i < 200 && t.rc != 0; i++) {
    run_on_loop(h, cmd_take_body, &t);
    if (t.rc == UV_EAGAIN) sleep_ms(10);
  }
  assert_int_equal(t.rc, 0);
  assert_int_equal(t.bytes, BODY);
  assert_int_equal(respond_held(h, 200, "ok"), 0);
  expect_response(cl, 200, "ok");
  client_free(cl);
  harness_stop(h);
}

/* A client that pipelines but does not read: the server stops parsing
 * instead of queueing responses without bound, and resumes as it reads. */
static void test_write_backpressure(void **state) {
  (void)state;
  memset(big_body, 'x', sizeof big_body);
  harness *h = harness_start(NULL);
  client *cl = client_open_buf(h, 65536);
  enum { N = 80 };
  char *data = malloc(N * 64);
  size_t len = 0;
  for (int i = 0; i < N; i++) len += (size_t)sprintf(data + len, GET("/big"));
  send_bytes(cl, data, len);
  free(data);
  sleep_ms(200);
  int seen = atomic_load(&h->requests);
  assert_true(seen < N);
  for (int i = 0; i < N; i++) {
    response r;
    assert_int_equal(read_response(cl, &r, 0), 0);
    assert_int_equal(r.status, 200);
    assert_int_equal(r.body_len, sizeof big_body);
    assert_int_equal(r.body[0], 'x');
    response_free(&r);
  }
  assert_int_equal(atomic_load(&h->requests), N);
  client_free(cl);
  harness_stop(h);
}

static void test_content_length_body(void **state) {
  (void)state;
  harness *h = harness_start(NULL);
  client *cl = client_open(h);
  send_str(cl, "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 11\r\n\r\nhello");
  sleep_ms(20);
  send_str(cl, " world");
  response r;
  assert_int_equal(read_response(cl, &r, 0), 0);
  assert_int_equal(r.status, 200);
  assert_string_equal(r.body, "hello world");
  char v[32];
  assert_string_equal(header_of(&r, "X-Method", v, sizeof v), "POST");
  response_free(&r);
  /* An empty body is NULL/0 and still answered. */
  send_str(cl, "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n");
  expect_response(cl, 200, "");
  client_free(cl);
  harness_stop(h);
}

static void test_chunked_body(void **state) {
  (void)state;
  harness *h = harness_start(NULL);
  client *cl = client_open(h);
  send_str(cl, "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel");
  sleep_ms(20);
  send_str(cl, "lo\r\n6;ext=1\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n");
  expect_response(cl, 200, "hello world");
  /* The CRLF after a chunk's data, split over packets, is checked across them. */
  send_str(cl, "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r");
  sleep_ms(20);
  send_str(cl, "\n0\r\n\r\n");
  expect_response(cl, 200, "ab");
  send_str(cl, "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r");
  sleep_ms(20);
  send_str(cl, "X0\r\n\r\n");
  expect_response(cl, 400, NULL);
  assert_true(server_closed(cl));
  client_free(cl);
  harness_stop(h);
}

/* Request line and headers arriving a byte at a time are accumulated. */
static void test_headers_in_pieces(void **state) {
  (void)state;
  harness *h = harness_start(NULL);
  client *cl = client_open(h);
  const char *req =
      "GET /headers HTTP/1.1\r\nHost: example\r\nX-Long-Name: some value\r\nX-Empty:\r\n"
      "x-lower: v\r\n\r\n";
  for (const char *p = req; *p; p++) {
    send_bytes(cl, p, 1);
    if ((p - req) % 7 == 0) sleep_ms(1);
  }
  expect_response(cl, 200, "Host=example\nX-Long-Name=some value\nX-Empty=\nx-lower=v\n");
  client_free(cl);
  harness_stop(h);
}

/* Repeated fields stay separate entries, so a handler can count them (the
 * ingress refuses more than one Host); leading whitespace is dropped, and
 * trailing whitespace kept for the handler to trim. */
static void test_repeated_headers(void **state) {
  (void)state;
  harness *h = harness_start(NULL);
  client *cl = client_open(h);
  send_str(cl, "GET /headers HTTP/1.1\r\nHost: a.x\r\nX-A: 1\r\nhost:  b.x \r\n\r\n");
  expect_response(cl, 200, "Host=a.x\nX-A=1\nhost=b.x \n");
  client_free(cl);
  harness_stop(h);
}

static void test_expect_continue(void **state) {
  (void)state;
  http_server_config cfg = {.max_body_bytes = 1024};
  harness *h = harness_start(&cfg);
  client *cl = client_open(h);
  send_str(cl, "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n");
  response r;
  assert_int_equal(read_response(cl, &r, 0), 0);
  assert_int_equal(r.status, 100);
  assert_string_equal(r.head, "HTTP/1.1 100 Continue\r\n\r\n");
  response_free(&r);
  send_str(cl, "hello");
  expect_response(cl, 200, "hello");
  client_free(cl);

  /* Too large: 413 instead of 100, and the body is never read. */
  cl = client_open(h);
  send_str(cl,
           "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5000\r\nExpect: 100-continue\r\n\r\n");
  assert_int_equal(read_response(cl, &r, 0), 0);
  assert_int_equal(r.status, 413);
  response_free(&r);
  assert_true(server_closed(cl));
  client_free(cl);
  assert_int_equal(atomic_load(&h->requests), 1);
  harness_stop(h);
}

static void test_413_content_length(void **state) {
  (void)state;
  http_server_config cfg = {.max_body_bytes = 1024};
  harness *h = harness_start(&cfg);
  client *cl = client_open(h);
  /* No body is sent: the answer must come from the header alone. */
  send_str(cl, "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 100000000\r\n\r\n");
  response r;
  assert_int_equal(read_response(cl, &r, 0), 0);
  assert_int_equal(r.status, 413);
  char v[64];
  assert_string_equal(header_of(&r, "Connection", v, sizeof v), "close");
  assert_string_equal(header_of(&r, "Content-Type", v, sizeof v), "application/json");
  assert_non_null(strstr(r.body, "\"error\":\"request body exceeds the limit of 1024 bytes\""));
  response_free(&r);
  assert_true(server_closed(cl));
  client_free(cl);

  /* At the limit is fine. */
  cl = client_open(h);
  char *req = malloc(2048);
  int n = sprintf(req, "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 1024\r\n\r\n");
  memset(req + n, 'b', 1024);
  send_bytes(cl, req, (size_t)n + 1024);
  assert_int_equal(read_response(cl, &r, 0), 0);
  assert_int_equal(r.status, 200);
  assert_int_equal(r.body_len, 1024);
  response_free(&r);
  free(req);
  client_free(cl);
  assert_int_equal(atomic_load(&h->requests), 1);
  harness_stop(h);
}

static void test_413_chunked(void **state) {
  (void)state;
  http_server_config cfg = {.max_body_bytes = 1024};
  harness *h = harness_start(&cfg);
  client *cl = client_open(h);
  /* Only the chunk size is sent: it alone exceeds the limit. */
  send_str(cl, "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n800\r\n");
  expect_response(cl, 413, NULL);
  assert_true(server_closed(cl));
  client_free(cl);

  /* Small chunks adding up past the limit. */
  cl = client_open(h);
  send_str(cl, "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n");
  char chunk[512 + 16];
  int n = sprintf(chunk, "200\r\n");
  memset(chunk + n, 'c', 512);
  memcpy(chunk + n + 512, "\r\n", 2);
  for (int i = 0; i < 3; i++) send_bytes(cl, chunk, (size_t)n + 514);
  expect_response(cl, 413, NULL);
  assert_true(server_closed(cl));
  client_free(cl);
  assert_int_equal(atomic_load(&h->requests), 0);
  harness_stop(h);
}

static void test_431(void **state) {
  (void)state;
  http_server_config cfg = {.max_header_bytes = 4096};
  harness *h = harness_start(&cfg);
  client *cl = client_open(h);
  char *req = malloc(8192);
  int n = sprintf(req, "GET / HTTP/1.1\r\nHost: t\r\nX-Big: ");
  memset(req + n, 'v', 5000);
  strcpy(req + n + 5000, "\r\n\r\n");
  send_str(cl, req);
  response r;
  assert_int_equal(read_response(cl, &r, 0), 0);
  assert_int_equal(r.status, 431);
  assert_non_null(strstr(r.head, "431 Request Header Fields Too Large"));
  response_free(&r);
  assert_true(server_closed(cl));
  client_free(cl);

  /* Many small headers add up the same way. */
  cl = client_open(h);
  send_str(cl, "GET / HTTP/1.1\r\nHost: t\r\n");
  for (int i = 0; i < 300; i++) send_str(cl, "X-Many: 0123456789\r\n");
  send_str(cl, "\r\n");
  expect_response(cl, 431, NULL);
  assert_true(server_closed(cl));
  client_free(cl);
  free(req);
  assert_int_equal(atomic_load(&h->requests), 0);
  harness_stop(h);
}

static void test_400_malformed(void **state) {
  (void)state;
  harness *h = harness_start(NULL);
  const char *bad[] = {
      "GET / HTTP/1.1\r\nHost: t\r\nBad Header\r\n\r\n",
      "G@T / HTTP/1.1\r\n\r\n",
      "GET / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello",
      "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
      /* llhttp 8 accepts these; RFC 9112 sections 5.1, 3.2 and 7.1 do not. */
      "GET / HTTP/1.1\r\nHost : t\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: t\r\nX A: 1\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: t\r\n: empty name\r\n\r\n",
      "GET /a\tb HTTP/1.1\r\nHost: t\r\n\r\n",
      "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloXX0\r\n\r\n",
      /* RFC 9112 5.2: obs-fold is refused, also in a credential, and so is
       * whitespace before the first header; of two credentials none counts. */
      "GET / HTTP/1.1\r\nHost: t\r\nX-A: 1\r\n 2\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer\r\n\tsecret\r\n\r\n",
      "GET / HTTP/1.1\r\n Host: t\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer a\r\nauthorization: Bearer b\r\n\r\n",
      /* Two framings (found by the fuzzer): llhttp takes an empty
       * Transfer-Encoding beside a Content-Length. */
      "POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding:\r\nContent-Length: 2\r\n\r\nhi",
  };
  for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
    client *cl = client_open(h);
    send_str(cl, bad[i]);
    response r;
    assert_int_equal(read_response(cl, &r, 0), 0);
    assert_int_equal(r.status, 400);
    assert_non_null(strstr(r.body, "{\"error\":\"malformed request: "));
    response_free(&r);
    assert_true(server_closed(cl));
    client_free(cl);
  }
  /* A fold is looked for in the head only: a body may hold "\n " freely,
   * also when the head comes a byte at a time. */
  client *body = client_open(h);
  send_str(body, "POST /b HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\n\r\na\n b");
  expect_response(body, 200, "/b");
  const char *slow = "GET /slow HTTP/1.1\r\nHost: t\r\n\r\n";
  for (const char *p = slow; *p; p++) {
    char one[2] = {*p, 0};
    send_str(body, one);
  }
  expect_response(body, 200, "/slow");
  client_free(body);
  /* A good request first, then garbage: the good one is answered. */
  client *cl = client_open(h);
  send_str(cl, GET("/ok") "BLAH\r\n\r\n");
  expect_response(cl, 200, "/ok");
  expect_response(cl, 400, NULL);
  assert_true(server_closed(cl));
  client_free(cl);
  assert_true(wait_connections(h, 0));
  harness_stop(h);
}

static void test_408_header_timeout(void **state) {
  (void)state;
  http_server_config cfg = {.header_timeout_ms = 200, .idle_timeout_ms = 400};
  harness *h = harness_start(&cfg);
  client *cl = client_open(h);
  uint64_t t0 = time_mono_ns();
  send_str(cl, "GET / HTTP/1.1\r\nHost: t\r\n");
  for (int i = 0; i < 3; i++) { /* trickling bytes do not extend it */
    sleep_ms(60);
    send_str(cl, "X: y\r\n");
  }
  response r;
  assert_int_equal(read_response(cl, &r, 0), 0);
  uint64_t ms = (time_mono_ns() - t0) / 1000000;
  assert_int_equal(r.status, 408);
  assert_true(ms >= 150 && ms < 2000);
  response_free(&r);
  assert_true(server_closed(cl));
  client_free(cl);

  /* A connection that never sends anything gets the same. */
  cl = client_open(h);
  expect_response(cl, 408, NULL);
  assert_true(server_closed(cl));
  client_free(cl);

  /* After a response, an idle keep-alive connection closes silently. */
  cl = client_open(h);
  send_str(cl, GET("/x"));
  expect_response(cl, 200, "/x");
  t0 = time_mono_ns();
  assert_true(server_closed(cl));
  ms = (time_mono_ns() - t0) / 1000000;
  assert_true(ms >= 300 && ms < 3000);
  client_free(cl);
  harness_stop(h);
}

/* One byte every 50 ms is progress, but far below the minimum rate: the
 * body gets 408 once its first window is over, not after the idle timeout. */
static void test_408_slow_body(void **state) {
  (void)state;
  http_server_config cfg = {.body_timeout_ms = 300, .body_min_rate = 1000};
  harness *h = harness_start(&cfg);
  client *cl = client_open(h);
  send_str(cl, "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 1000\r\n\r\n");
  int sent = 0;
  for (; sent < 100 && stats(h).body_timeouts == 0; sent++) {
    if (send(cl->fd, "x", 1, MSG_NOSIGNAL) != 1) break;
    sleep_ms(50);
  }
  assert_true(sent < 100); /* 5 s of trickling were not allowed */
  response r;
  assert_int_equal(read_response(cl, &r, 0), 0);
  assert_int_equal(r.status, 408);
  assert_non_null(strstr(r.body, "\"error\""));
  assert_non_null(strstr(r.body, "slower than 1000 bytes/s over 300 ms"));
  response_free(&r);
  assert_true(server_closed(cl));
  client_free(cl);
  assert_int_equal(stats(h).body_timeouts, 1);

  /* Without a rate, the body must simply be complete within the deadline. */
  harness_stop(h);
  cfg.body_min_rate = HTTP_NO_MIN_RATE;
  h = harness_start(&cfg);
  cl = client_open(h);
  send_str(cl, "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 1000000\r\n\r\n");
  char chunk[4096];
  memset(chunk, 'y', sizeof chunk);
  for (int i = 0; i < 200 && stats(h).body_timeouts == 0; i++) {
    if (send(cl->fd, chunk, sizeof chunk, MSG_NOSIGNAL) <= 0) break;
    sleep_ms(20);
  }
  assert_int_equal(read_response(cl, &r, 0), 0);
  assert_int_equal(r.status, 408);
  assert_non_null(strstr(r.body, "did not arrive within 300 ms"));
  response_free(&r);
  client_free(cl);
  harness_stop(h);
}

/* A body that keeps the rate goes on over many windows. */
static void test_body_at_rate_passes(void **state) {
  (void)state;
  http_server_config cfg = {.body_timeout_ms = 200, .body_min_rate = 100};
  harness *h = harness_start(&cfg);
  client *cl = client_open(h);
  enum { PIECES = 16, PIECE = 100 };
  char head[128];
  snprintf(head, sizeof head, "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n",
           PIECES * PIECE);
  send_str(cl, head);
  char piece[PIECE];
  memset(piece, 'z', sizeof piece);
  for (int i = 0; i < PIECES; i++) { /* about 2000 bytes/s, 20 times the minimum */
    send_bytes(cl, piece, sizeof piece);
    sleep_ms(50);
  }
  response r;
  assert_int_equal(read_response(cl, &r, 0), 0);
  assert_int_equal(r.status, 200);
  assert_int_equal(r.body_len, PIECES * PIECE);
  response_free(&r);
  assert_int_equal(stats(h).body_timeouts, 0);
  client_free(cl);
  harness_stop(h);
}

/* A streamed body below the rate: the server answers 408 itself and the
 * handler's read fails with UV_ETIMEDOUT. */
static void test_408_slow_streamed_body(void **state) {
  (void)state;
  http_server_config cfg = {.stream_body_above = 16, .body_timeout_ms = 300, .body_min_rate = 1000};
  harness *h = harness_start(&cfg);
  client *cl = client_open(h);
  send_str(cl, "POST /hold HTTP/1.1\r\nHost: t\r\nContent-Length: 100000\r\n\r\n");
  assert_true(wait_held(h));
  for (int i = 0; i < 100 && stats(h).body_timeouts == 0; i++) {
    if (send(cl->fd, "x", 1, MSG_NOSIGNAL) != 1) break;
    sleep_ms(50);
  }
  expect_response(cl, 408, NULL);
  body_take t = {0, 0};
  run_on_loop(h, cmd_take_body, &t);
  assert_int_equal(t.rc, UV_ETIMEDOUT);
  assert_int_equal(respond_held(h, 200, "late"), UV_ECONNRESET);
  client_free(cl);
  harness_stop(h);
}

/* Past max_connections, a new connection is closed at once; the open ones
 * go on, and once one closes a new client is served again. */
static void test_max_connections(void **state) {
  (void)state;
  http_server_config cfg = {.max_connections = 3};
  harness *h = harness_start(&cfg);
  client *open[3];
  for (int i = 0; i < 3; i++) open[i] = client_open(h);
  assert_true(wait_connections(h, 3));
  client *extra = client_open(h);
  send_str(extra, GET("/x"));
  assert_true(server_closed(extra));
  client_free(extra);
  assert_int_equal(stats(h).refused_cap, 1);
  send_str(open[0], GET("/still"));
  expect_response(open[0], 200, "/still");
  client_free(open[0]);
  assert_true(wait_connections(h, 2));
  client *next = client_open(h);
  send_str(next, GET("/next"));
  expect_response(next, 200, "/next");
  client_free(next);
  client_free(open[1]);
  client_free(open[2]);
  harness_stop(h);
}

/* One address is capped; another one is still served. */
static void test_max_connections_per_addr(void **state) {
  (void)state;
  http_server_config cfg = {.max_connections_per_addr = 2};
  harness *h = harness_start(&cfg);
  client *a1 = client_open_from(h, "127.0.0.2"), *a2 = client_open_from(h, "127.0.0.2");
  assert_true(wait_connections(h, 2));
  client *a3 = client_open_from(h, "127.0.0.2");
  assert_true(server_closed(a3));
  client_free(a3);
  assert_int_equal(stats(h).refused_addr, 1);
  client *b = client_open_from(h, "127.0.0.3");
  send_str(b, GET("/other"));
  expect_response(b, 200, "/other");
  client_free(b);
  /* A closed connection gives its address a place back. */
  client_free(a1);
  assert_true(wait_connections(h, 1));
  a3 = client_open_from(h, "127.0.0.2");
  send_str(a3, GET("/again"));
  expect_response(a3, 200, "/again");
  client_free(a3);
  client_free(a2);
  assert_int_equal(stats(h).refused_addr, 1);
  harness_stop(h);
}

static int open_descriptors(void) {
  int n = 0;
  DIR *d = opendir("/proc/self/fd");
  assert_non_null(d);
  while (readdir(d) != NULL) n++;
  closedir(d);
  return n - 3; /* ".", ".." and the directory's own */
}

static void cmd_drop_libuv_spare(harness *h, void *arg) {
  (void)arg;
  /* What a sandboxed process comes to: libuv cannot open "/dev/null" or
   * "/" for a spare descriptor of its own, and would call on_connection
   * with UV_EMFILE again and again for the same waiting connection. */
  if (h->loop.emfile_fd >= 0) close(h->loop.emfile_fd);
  h->loop.emfile_fd = -1;
}

/* Out of descriptors, the server closes what waits instead of spinning on
 * accept(), and serves again once descriptors are free. */
/* The limit test_emfile_does_not_spin lowers, put back whatever it asserts. */
static struct rlimit nofile_before;

static int restore_nofile(void **state) {
  (void)state;
  return setrlimit(RLIMIT_NOFILE, &nofile_before) == 0 ? 0 : -1;
}

static void test_emfile_does_not_spin(void **state) {
  (void)state;
  harness *h = harness_start(NULL);
  assert_int_equal(getrlimit(RLIMIT_NOFILE, &nofile_before), 0);
  /* A request in flight is never the connection closed for want of a
   * descriptor (only waiting ones are), so this one must be answered. */
  client *held = client_open(h);
  send_str(held, GET("/hold"));
  assert_true(wait_held(h));
  /* Room for nine more descriptors: clients and their accepted ends. */
  struct rlimit low = {(rlim_t)open_descriptors() + 9, nofile_before.rlim_max};
  assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
  client *cls[16] = {NULL};
  int n = 0;
  server_stats st = stats(h);
  /* One at a time, so that the server's accepted ends take their
   * descriptors before the next client takes one. */
  while (n < 16 && st.refused_fd == 0) {
    /* libuv takes its spare back whenever a connection is set up. */
    run_on_loop(h, cmd_drop_libuv_spare, NULL);
    int fd = tcp_connect(h->port);
    if (fd < 0) break;
    cls[n] = calloc(1, sizeof *cls[n]);
    cls[n++]->fd = fd;
    for (int i = 0; i < 200; i++) {
      st = stats(h);
      if (st.refused_fd > 0 || st.connections == (size_t)n + 1) break;
      sleep_ms(5);
    }
  }
  assert_true(st.refused_fd >= 1);
  /* The loop still answers (it is not stuck in accept), and the request
   * that was under way when descriptors ran out gets its response. */
  assert_int_equal(respond_held(h, 200, "held"), 0);
  expect_response(held, 200, "held");
  for (int i = 0; i < n; i++) client_free(cls[i]);
  client_free(held);
  assert_int_equal(setrlimit(RLIMIT_NOFILE, &nofile_before), 0);
  assert_true(wait_connections(h, 0));
  client *cl = client_open(h);
  send_str(cl, GET("/after"));
  expect_response(cl, 200, "/after");
  client_free(cl);
  harness_stop(h);
}

static void test_disconnect_while_held(void **state) {
  (void)state;
  harness *h = harness_start(NULL);
  client *cl = client_open(h);
  send_str(cl, "POST /hold HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nabc");
  assert_true(wait_held(h));
  assert_int_equal(stats(h).in_flight, 1);
  client_free(cl);
  for (int i = 0; i < 600 && atomic_load(&h->aborts) == 0; i++) sleep_ms(5);
  assert_int_equal(atomic_load(&h->aborts), 1);
  assert_true(wait_connections(h, 0));
  /* The handler answers later: the request is freed, the client is gone. */
  assert_int_equal(respond_held(h, 200, "late"), UV_ECONNRESET);
  server_stats st = stats(h);
  assert_int_equal(st.in_flight, 0);
  assert_int_equal(st.connections, 0);
  harness_stop(h);
}

/* Closing the server with a request in the handler's hands aborts it. */
static void test_close_while_held(void **state) {
  (void)state;
  harness *h = harness_start(NULL);
  client *cl = client_open(h);
  send_str(cl, GET("/hold"));
  assert_true(wait_held(h));
  harness_stop(h); /* the harness answers the held request after closing */
  assert_true(server_closed(cl));
  client_free(cl);
}

/* A client that half-closes after its request still gets the response. */
static void test_half_close(void **state) {
  (void)state;
  memset(big_body, 'y', sizeof big_body);
  harness *h = harness_start(NULL);
  client *cl = client_open(h);
  send_str(cl, GET("/big"));
  assert_int_equal(shutdown(cl->fd, SHUT_WR), 0);
  response r;
  assert_int_equal(read_response(cl, &r, 0), 0);
  assert_int_equal(r.status, 200);
  assert_int_equal(r.body_len, sizeof big_body);
  assert_int_equal(r.body[sizeof big_body - 1], 'y');
  response_free(&r);
  assert_true(server_closed(cl));
  client_free(cl);
  assert_true(wait_connections(h, 0));
  harness_stop(h);
}

/* A client that half-closes while its Connection: close response is still
 * being written gets all of it: our FIN follows the last byte. */
static void test_half_close_during_final_response(void **state) {
  (void)state;
  harness *h = harness_start(NULL);
  client *cl = client_open_buf(h, 65536);
  send_str(cl, "GET /huge HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
  for (int i = 0; i < 600 && atomic_load(&h->requests) == 0; i++) sleep_ms(5);
  sleep_ms(50); /* the response is queued, most of it unsent */
  assert_int_equal(shutdown(cl->fd, SHUT_WR), 0);
  response r;
  assert_int_equal(read_response(cl, &r, 0), 0);
  assert_int_equal(r.status, 200);
  assert_int_equal(r.body_len, HUGE_LEN);
  assert_int_equal(r.body[HUGE_LEN - 1], 'z');
  response_free(&r);
  assert_true(server_closed(cl));
  client_free(cl);
  assert_true(wait_connections(h, 0));
  harness_stop(h);
}

/* A client reading a large response slowly, for many idle timeouts, is not
 * idle: it gets the whole response, kept alive or closed after it. */
static void test_slow_reader_is_not_idle(void **state) {
  (void)state;
  http_server_config cfg = {.idle_timeout_ms = 100};
  harness *h = harness_start(&cfg);
  for (int close_after = 0; close_after < 2; close_after++) {
    client *cl = client_open_buf(h, 65536);
    send_str(cl, close_after ? "GET /huge HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
                             : GET("/huge"));
    while (cl->len < HUGE_LEN) {
      if (client_fill(cl) <= 0) break;
      sleep_ms(2);
    }
    response r;
    assert_int_equal(read_response(cl, &r, 0), 0);
    assert_int_equal(r.status, 200);
    assert_int_equal(r.body_len, HUGE_LEN);
    response_free(&r);
    if (close_after) assert_true(server_closed(cl));
    client_free(cl);
  }
  harness_stop(h);
}

static void test_head(void **state) {
  (void)state;
  harness *h = harness_start(NULL);
  client *cl = client_open(h);
  send_str(cl, "HEAD /some/path HTTP/1.1\r\nHost: t\r\n\r\n" GET("/next"));
  response r;
  assert_int_equal(read_response(cl, &r, 1), 0);
  assert_int_equal(r.status, 200);
  char v[32];
  assert_string_equal(header_of(&r, "Content-Length", v, sizeof v), "10");
  response_free(&r);
  /* No body bytes came: the next response starts right here. */
  expect_response(cl, 200, "/next");
  client_free(cl);
  harness_stop(h);
}

static void test_204_and_errors(void **state) {
  (void)state;
  harness *h = harness_start(NULL);
  client *cl = client_open(h);
  send_str(cl, GET("/nocontent") GET("/error") GET("/inject"));
  response r;
  assert_int_equal(read_response(cl, &r, 0), 0);
  assert_int_equal(r.status, 204);
  char v[64];
  assert_null(header_of(&r, "Content-Length", v, sizeof v));
  response_free(&r);
  assert_int_equal(read_response(cl, &r, 0), 0);
  assert_int_equal(r.status, 422);
  assert_string_equal(r.body, "{\"error\":\"bad \\\"thing\\\"\",\"detail\":1}");
  assert_string_equal(header_of(&r, "Content-Type", v, sizeof v), "application/json");
  response_free(&r);
  /* Header values that would split the response, and framing headers, are dropped. */
  assert_int_equal(read_response(cl, &r, 0), 0);
  assert_int_equal(r.status, 200);
  assert_string_equal(r.body, "ok");
  assert_null(strstr(r.head, "Set-Cookie"));
  assert_null(strstr(r.head, "999"));
  assert_string_equal(header_of(&r, "X-Good", v, sizeof v), "yes");
  response_free(&r);
  client_free(cl);
  harness_stop(h);
}

static void test_http10(void **state) {
  (void)state;
  harness *h = harness_start(NULL);
  client *cl = client_open(h);
  send_str(cl, "GET /old HTTP/1.0\r\n\r\n");
  response r;
  assert_int_equal(read_response(cl, &r, 0), 0);
  assert_int_equal(r.status, 200);
  char v[32];
  assert_string_equal(header_of(&r, "Connection", v, sizeof v), "close");
  assert_string_equal(header_of(&r, "X-Keep", v, sizeof v), "0");
  response_free(&r);
  assert_true(server_closed(cl));
  client_free(cl);

  cl = client_open(h);
  for (int i = 0; i < 2; i++) {
    send_str(cl, "GET /ka HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    assert_int_equal(read_response(cl, &r, 0), 0);
    assert_string_equal(header_of(&r, "Connection", v, sizeof v), "keep-alive");
    response_free(&r);
  }
  client_free(cl);

  /* HTTP/1.1 with Connection: close, and a handler that asks to close. */
  cl = client_open(h);
  send_str(cl, "GET /c HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
  expect_response(cl, 200, "/c");
  assert_true(server_closed(cl));
  client_free(cl);
  cl = client_open(h);
  send_str(cl, GET("/close"));
  expect_response(cl, 200, "bye");
  assert_true(server_closed(cl));
  client_free(cl);
  harness_stop(h);
}

static void test_stop_accepting(void **state) {
  (void)state;
  harness *h = harness_start(NULL);
  client *idle = client_open(h);
  send_str(idle, GET("/idle"));
  expect_response(idle, 200, "/idle");
  client *busy = client_open(h);
  send_str(busy, GET("/hold"));
  assert_true(wait_held(h));
  client *partial = client_open(h);
  send_str(partial, "GET /partial HTTP/1.1\r\n");
  sleep_ms(20);
  int port = h->port;

  run_on_loop(h, cmd_stop_accepting, NULL);
  assert_true(server_closed(idle));
  int fd = tcp_connect(port);
  assert_true(fd < 0);
  assert_int_equal(stats(h).held_keep_alive, 0);

  assert_int_equal(respond_held(h, 200, "done"), 0);
  response r;
  assert_int_equal(read_response(busy, &r, 0), 0);
  char v[32];
  assert_string_equal(header_of(&r, "Connection", v, sizeof v), "close");
  response_free(&r);
  assert_true(server_closed(busy));

  send_str(partial, "Host: t\r\n\r\n");
  assert_int_equal(read_response(partial, &r, 0), 0);
  assert_int_equal(r.status, 200);
  assert_string_equal(header_of(&r, "Connection", v, sizeof v), "close");
  response_free(&r);
  assert_true(server_closed(partial));
  assert_true(wait_connections(h, 0));
  assert_int_equal(stats(h).in_flight, 0);
  client_free(idle);
  client_free(busy);
  client_free(partial);
  harness_stop(h);
}

static void test_helpers(void **state) {
  (void)state;
  assert_string_equal(http_status_text(200), "OK");
  assert_string_equal(http_status_text(404), "Not Found");
  assert_string_equal(http_status_text(431), "Request Header Fields Too Large");
  assert_string_equal(http_status_text(799), "Unknown");
  http_header hs[] = {{"Host", "a"}, {"X-Y", "b"}};
  http_request req = {.headers = hs, .n_headers = 2};
  assert_string_equal(http_request_header(&req, "host"), "a");
  assert_string_equal(http_request_header(&req, "x-y"), "b");
  assert_null(http_request_header(&req, "z"));

  uv_loop_t loop;
  http_server s;
  assert_int_equal(uv_loop_init(&loop), 0);
  assert_int_equal(http_server_init(&s, &loop, NULL, NULL, NULL), UV_EINVAL);
  assert_int_equal(http_server_init(&s, &loop, NULL, handler, NULL), 0);
  assert_int_equal(s.config.max_header_bytes, 65536);
  assert_int_equal(s.config.max_body_bytes, 10 * 1024 * 1024 + 65536);
  assert_int_equal(http_server_port(&s), -1);
  assert_int_equal(http_server_listen(&s, "not-an-address", 0), UV_EINVAL);
  if (http_server_listen(&s, "[::1]", 0) == 0) assert_true(http_server_port(&s) > 0);
  http_server_close(&s, NULL);
  assert_int_equal(uv_run(&loop, UV_RUN_DEFAULT), 0);
  assert_null(s.conns);
  assert_int_equal(uv_loop_close(&loop), 0);
}

/* ---- http_authority_parse: what may be routed and pasted into a URL ---- */

static void expect_authority(const char *in, http_host_kind kind, const char *host,
                             const char *port) {
  http_authority a;
  const char *err = http_authority_parse(in, strlen(in), &a);
  if (err) fail_msg("\"%s\" refused: %s", in, err);
  assert_int_equal(a.kind, kind);
  assert_int_equal(a.host_len, strlen(host));
  assert_memory_equal(a.host, host, a.host_len);
  if (port == NULL) {
    assert_null(a.port);
    assert_int_equal(a.port_len, 0);
  } else {
    assert_int_equal(a.port_len, strlen(port));
    assert_memory_equal(a.port, port, a.port_len);
  }
}

static void expect_refused(const char *in, const char *why) {
  http_authority a;
  const char *err = http_authority_parse(in, strlen(in), &a);
  if (err == NULL) fail_msg("\"%s\" accepted", in);
  if (strstr(err, why) == NULL) fail_msg("\"%s\": \"%s\" does not say \"%s\"", in, err, why);
}

static void test_authority_valid(void **state) {
  (void)state;
  expect_authority("hello.localhost", HTTP_HOST_NAME, "hello.localhost", NULL);
  expect_authority("hello.localhost:8080", HTTP_HOST_NAME, "hello.localhost", "8080");
  expect_authority("ECHO.Localhost", HTTP_HOST_NAME, "ECHO.Localhost", NULL);
  expect_authority("hello", HTTP_HOST_NAME, "hello", NULL);
  expect_authority("a-b_c~d.x!$&'()*+,;=", HTTP_HOST_NAME, "a-b_c~d.x!$&'()*+,;=", NULL);
  expect_authority("hello.example.com.", HTTP_HOST_NAME, "hello.example.com.", NULL);
  expect_authority("h:1", HTTP_HOST_NAME, "h", "1");
  expect_authority("h:65535", HTTP_HOST_NAME, "h", "65535");
  expect_authority("h:08080", HTTP_HOST_NAME, "h", "08080");
  expect_authority("1.2.3.x", HTTP_HOST_NAME, "1.2.3.x", NULL);
  expect_authority("x.0xg", HTTP_HOST_NAME, "x.0xg", NULL);
  expect_authority("127.0.0.1", HTTP_HOST_IPV4, "127.0.0.1", NULL);
  expect_authority("255.255.255.255:80", HTTP_HOST_IPV4, "255.255.255.255", "80");
  expect_authority("0.0.0.0", HTTP_HOST_IPV4, "0.0.0.0", NULL);
  expect_authority("[::1]", HTTP_HOST_IPV6, "[::1]", NULL);
  expect_authority("[::1]:8080", HTTP_HOST_IPV6, "[::1]", "8080");
  expect_authority("[::]", HTTP_HOST_IPV6, "[::]", NULL);
  expect_authority("[1:2:3:4:5:6:7:8]", HTTP_HOST_IPV6, "[1:2:3:4:5:6:7:8]", NULL);
  expect_authority("[1:2:3:4:5:6:7::]", HTTP_HOST_IPV6, "[1:2:3:4:5:6:7::]", NULL);
  expect_authority("[::2:3:4:5:6:7:8]", HTTP_HOST_IPV6, "[::2:3:4:5:6:7:8]", NULL);
  expect_authority("[FE80::AbCd:1]", HTTP_HOST_IPV6, "[FE80::AbCd:1]", NULL);
  expect_authority("[::ffff:192.0.2.1]", HTTP_HOST_IPV6, "[::ffff:192.0.2.1]", NULL);
  expect_authority("[1:2:3:4:5:6:1.2.3.4]", HTTP_HOST_IPV6, "[1:2:3:4:5:6:1.2.3.4]", NULL);
  /* A valid IDNA label (Punycode of a Cyrillic name). */
  expect_authority("hello.xn--p1ai", HTTP_HOST_NAME, "hello.xn--p1ai", NULL);
  expect_authority("hello.XN--P1AI:81", HTTP_HOST_NAME, "hello.XN--P1AI", "81");
}

static void test_authority_refused(void **state) {
  (void)state;
  expect_refused("", "empty");
  expect_refused(":8080", "empty");
  expect_refused("urlw.x@evil.com", "user information");
  expect_refused("@evil.com", "user information");
  expect_refused("urlw.x:1@evil.com", "user information");
  expect_refused("urlw.x/evil", "path");
  expect_refused("urlw.x?q", "path");
  expect_refused("urlw.x#f", "path");
  expect_refused("urlw.x\\evil", "path");
  expect_refused("urlw.a b", "whitespace");
  expect_refused("urlw.localhost ", "whitespace");
  expect_refused("urlw\t", "whitespace");
  expect_refused("urlw\x01", "whitespace");
  expect_refused("urlw\x7f", "whitespace");
  expect_refused("urlw.localhost:abc", "port");
  expect_refused("urlw:99999", "port");
  expect_refused("urlw:65536", "port");
  expect_refused("urlw:0", "port");
  expect_refused("urlw:", "port");
  expect_refused("urlw:123456", "port");
  expect_refused("urlw:80:80", "port");
  expect_refused("urlw:-1", "port");
  expect_refused("urlw:+80", "port");
  expect_refused("urlw.%41", "percent");
  expect_refused("urlw.\xc3\xa9", "character");
  expect_refused("urlw<x>", "character");
  expect_refused("urlw\"x", "character");
  expect_refused("ur|w", "character");
  expect_refused("urlw]", "character");
  /* The URL Standard reads these as IPv4 addresses, and fails. */
  expect_refused("echo.123", "number");
  expect_refused("echo.0x1f", "number");
  expect_refused("echo.0x", "number");
  expect_refused("echo.1.", "number");
  expect_refused("1.2.3", "number");
  expect_refused("256.0.0.1", "number");
  expect_refused("01.2.3.4", "number");
  expect_refused("1.2.3.4.5", "number");
  expect_refused("127.0.0.1.", "number");
  expect_refused("[::1", "IPv6");
  expect_refused("[::1]x", "IPv6");
  expect_refused("[]", "IPv6");
  expect_refused("[:1]", "IPv6");
  expect_refused("[1::2::3]", "IPv6");
  expect_refused("[1:2:3:4:5:6:7:8:9]", "IPv6");
  expect_refused("[1:2:3:4:5:6:7]", "IPv6");
  expect_refused("[1:2:3:4::5:6:7:8]", "IPv6");
  expect_refused("[12345::]", "IPv6");
  expect_refused("[1:]", "IPv6");
  expect_refused("[::1%25eth0]", "IPv6");
  expect_refused("[v1.x]", "IPv6");
  expect_refused("[::1.2.3]", "IPv6");
  expect_refused("[::1.2.3.4:5]", "IPv6");
  expect_refused("[1.2.3.4]", "IPv6");
  expect_refused("[::ffff:01.2.3.4]", "IPv6");
  expect_refused("[::1]:", "port");
  expect_refused("[::1]:99999", "port");
  /* Punycode that does not decode, or decodes to what IDNA forbids. */
  expect_refused("echo.xn--a", "xn--");
  expect_refused("xn--zz-.x", "xn--");
  expect_refused("echo.xn--ls8h-", "xn--");
  expect_refused("echo.xn--", "xn--");
  expect_refused("echo.xn--abc-", "xn--");
  /* Longer than the IDNA check's output buffer: the verdict still holds. */
  char long_name[400];
  memset(long_name, 'a', 300);
  strcpy(long_name + 300, ".xn--p1ai");
  expect_authority(long_name, HTTP_HOST_NAME, long_name, NULL);
  strcpy(long_name + 300, ".xn--a");
  expect_refused(long_name, "xn--");
}

int main(void) {
  huge_body = malloc(HUGE_LEN);
  if (huge_body == NULL) return 1;
  memset(huge_body, 'z', HUGE_LEN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_helpers),
      cmocka_unit_test(test_simple_get),
      cmocka_unit_test(test_keep_alive_1000),
      cmocka_unit_test(test_pipelining),
      cmocka_unit_test(test_pipelining_waits_for_handler),
      cmocka_unit_test(test_pipelining_backpressure),
      cmocka_unit_test(test_write_backpressure),
      cmocka_unit_test(test_streamed_body_overfills_on_last_byte),
      cmocka_unit_test(test_content_length_body),
      cmocka_unit_test(test_chunked_body),
      cmocka_unit_test(test_headers_in_pieces),
      cmocka_unit_test(test_repeated_headers),
      cmocka_unit_test(test_expect_continue),
      cmocka_unit_test(test_413_content_length),
      cmocka_unit_test(test_413_chunked),
      cmocka_unit_test(test_431),
      cmocka_unit_test(test_400_malformed),
      cmocka_unit_test(test_408_header_timeout),
      cmocka_unit_test(test_408_slow_body),
      cmocka_unit_test(test_body_at_rate_passes),
      cmocka_unit_test(test_408_slow_streamed_body),
      cmocka_unit_test(test_max_connections),
      cmocka_unit_test(test_max_connections_per_addr),
      cmocka_unit_test_teardown(test_emfile_does_not_spin, restore_nofile),
      cmocka_unit_test(test_disconnect_while_held),
      cmocka_unit_test(test_close_while_held),
      cmocka_unit_test(test_half_close),
      cmocka_unit_test(test_half_close_during_final_response),
      cmocka_unit_test(test_slow_reader_is_not_idle),
      cmocka_unit_test(test_head),
      cmocka_unit_test(test_204_and_errors),
      cmocka_unit_test(test_http10),
      cmocka_unit_test(test_stop_accepting),
      cmocka_unit_test(test_authority_valid),
      cmocka_unit_test(test_authority_refused),
  };
  int failed = cmocka_run_group_tests(tests, NULL, NULL);
  free(huge_body);
  return failed;
}
