/*
 * libFuzzer target for the HTTP/1.1 server (http/): the request parser and
 * the connection state machine behind it, fed as a client would feed them.
 *
 * Each input is one connection to a real http_server (a Unix stream socket:
 * the server's code cannot tell it from TCP but for TCP_NODELAY).
 * Input layout: byte 0 picks the server (limits, streamed bodies or not),
 * byte 1 the handler's behaviour for each request (answer now, later,
 * streamed, with an error; for streamed bodies: read them, buffer them),
 * bytes 2-5 seed the sizes of the writes the rest of the input is cut into.
 * After the last write the client half-closes and reads until the server
 * closes.
 *
 * Checked: every request handed over is well formed (method, target, header
 * names and values, one framing, body within its limit); what comes back
 * parses as HTTP/1.1 responses, answered in order, with at most one
 * response of the server's own (an error) and only at the end; the
 * connection closes once the client is gone; nothing leaks or is used after
 * it was freed (ASan).
 */
#include <errno.h>
#include <fcntl.h>
#include <llhttp.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "base.h"
#include "http.h"

#define CHECK(cond)                                                          \
  do {                                                                       \
    if (!(cond)) {                                                           \
      fprintf(stderr, "http_request_fuzz: check failed: %s (line %d, errno %s)\n", \
              #cond, __LINE__, strerror(errno));                             \
      abort();                                                               \
    }                                                                        \
  } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define N_SERVERS 3
#define MAX_SEQ 4096

static const http_server_config configs[N_SERVERS] = {
    /* Small limits: 431 and 413 are easy to reach. */
    {.max_header_bytes = 512, .max_body_bytes = 256},
    /* Streamed request bodies above 16 bytes (and every chunked one). */
    {.max_header_bytes = 4096, .max_body_bytes = 2048, .stream_body_above = 16},
    /* Roomier, as the control API is. */
    {.max_header_bytes = 16384, .max_body_bytes = 65536},
};

static uv_loop_t loop;
static http_server servers[N_SERVERS];
/* Abstract Unix sockets, named per process: a stream as TCP's, without the
 * TIME_WAIT sockets of thousands of loopback connections a second, which
 * use up the ephemeral ports within a minute. */
static struct sockaddr_un addrs[N_SERVERS];

/* The connection under test. */
static struct {
  uint8_t modes;        /* two bits per request, from the input */
  unsigned dispatched;  /* handler calls */
  unsigned responded;   /* responses the handler made */
  unsigned pending;     /* responses the handler still owes */
  uint8_t head[MAX_SEQ]; /* response seq -> the request was HEAD */
} t;

/* ---- the handler ---- */

typedef struct later {
  uv_timer_t timer;
  http_request *req;
} later;

/* Reads a streamed body to its end. Woken by the server, it goes on from
 * the loop (as the worker does, through its scheduler), never from inside
 * the server's callback. */
typedef struct body_reader {
  uv_timer_t timer;
  http_request *req;
  size_t total;
  size_t max;           /* the server's max_body_bytes */
} body_reader;

static void check_request(const http_server *s, const http_request *req) {
  CHECK(req->method && req->method[0] != '\0');
  for (const char *p = req->method; *p; p++) CHECK((*p >= 'A' && *p <= 'Z') || *p == '-' || *p == '_');
  CHECK(req->target && req->target[0] != '\0');
  for (const char *p = req->target; *p; p++) CHECK((unsigned char)*p > 0x20 && *p != 0x7f);
  CHECK(strlen(req->id) == 16 && strspn(req->id, "0123456789abcdef") == 16);
  int cl = 0, te = 0;
  for (size_t i = 0; i < req->n_headers; i++) {
    const http_header *h = &req->headers[i];
    CHECK(h->name[0] != '\0' && http_token(h->name, strlen(h->name)));
    CHECK(strpbrk(h->value, "\r\n") == NULL);
    cl += strcasecmp(h->name, "content-length") == 0;
    te += strcasecmp(h->name, "transfer-encoding") == 0;
  }
  /* One framing, or a smuggled request could hide in the body. */
  CHECK(cl <= 1 && !(cl && te));
  CHECK(req->body_len <= s->config.max_body_bytes);
  if (!req->body_streamed) CHECK((req->body == NULL) == (req->body_len == 0));
  const char *host = http_request_header(req, "host");
  if (host != NULL) {
    http_authority a;
    if (http_authority_parse(host, strlen(host), &a) == NULL) {
      CHECK(a.host_len > 0 && a.host >= host && a.host + a.host_len <= host + strlen(host));
      if (a.port) CHECK(a.port_len >= 1 && a.port_len <= 5 && strspn(a.port, "0123456789") >= a.port_len);
    }
  }
}

static void respond(http_request *req, int how) {
  char seq[16];
  unsigned n = t.responded++;
  CHECK(n < MAX_SEQ);
  t.head[n] = strcmp(req->method, "HEAD") == 0;
  snprintf(seq, sizeof seq, "%u", n);
  http_header h[] = {{"X-Seq", seq}, {"Content-Type", "text/plain"}};
  char body[64];
  int len = snprintf(body, sizeof body, "%s %zu\n", req->method, req->body_len);
  switch (how) {
    case 0:
      http_respond(req, 200, h, 2, body, (size_t)len);
      break;
    case 1:
      http_respond(req, n % 5 == 4 ? 204 : 404, h, 2, body, (size_t)len);
      break;
    case 2:
      /* Streamed: chunked, or until close for HTTP/1.0. */
      if (http_respond_start(req, 200, h, 2, n % 2 ? -1 : len) != 0) {
        http_respond_abort(req);
        break;
      }
      if (http_respond_write(req, body, 3) >= 0) http_respond_write(req, body + 3, (size_t)len - 3);
      http_respond_end(req);
      break;
    default: {
      http_header only = {"X-Seq", seq};
      http_respond(req, 500, &only, 1, NULL, 0);
      break;
    }
  }
  t.pending--;
}

static void free_handle(uv_handle_t *h) { free(h->data); }

static void on_later(uv_timer_t *timer) {
  later *l = timer->data;
  respond(l->req, 0);
  uv_close((uv_handle_t *)timer, free_handle);
}

static void body_pump(body_reader *b);

static void on_body_timer(uv_timer_t *timer) { body_pump(timer->data); }

static void on_body_ready(void *arg, int status) {
  (void)status;
  body_reader *b = arg;
  uv_timer_start(&b->timer, on_body_timer, 0, 0);
}

static void body_pump(body_reader *b) {
  for (;;) {
    const uint8_t *data;
    int rc = http_request_body_read(b->req, &data);
    if (rc > 0) {
      CHECK(data != NULL);
      b->total += (size_t)rc;
      continue;
    }
    if (rc == UV_EAGAIN) {
      int w = http_request_body_wait(b->req, on_body_ready, b);
      if (w == 0) return;
      CHECK(w == UV_EINVAL); /* something arrived in between: read again */
      continue;
    }
    CHECK(rc == 0 || rc == UV_E2BIG || rc == UV_EPROTO || rc == UV_ETIMEDOUT ||
          rc == UV_ECONNRESET);
    CHECK(b->total <= b->max);
    respond(b->req, 0);
    uv_close((uv_handle_t *)&b->timer, free_handle);
    return;
  }
}

static void on_request(http_server *s, http_request *req) {
  check_request(s, req);
  unsigned mode = (t.modes >> (2 * (t.dispatched++ % 4))) & 3;
  t.pending++;
  if (req->body_streamed) {
    if (mode == 1) {
      body_reader *b = calloc(1, sizeof *b);
      CHECK(b != NULL);
      b->req = req;
      b->max = s->config.max_body_bytes;
      uv_timer_init(&loop, &b->timer);
      b->timer.data = b;
      body_pump(b);
      return;
    }
    if (mode == 2 && http_request_buffer_body(req) == 0) {
      t.pending--; /* handed back: it comes again, whole */
      return;
    }
    respond(req, mode == 3 ? 3 : 0);
    return;
  }
  if (mode == 1) {
    later *l = calloc(1, sizeof *l);
    CHECK(l != NULL);
    l->req = req;
    uv_timer_init(&loop, &l->timer);
    l->timer.data = l;
    uv_timer_start(&l->timer, on_later, 0, 0);
    return;
  }
  respond(req, mode);
}

/* Runs after the request's connection closed under it: the request is
 * still the handler's, and must still be valid here. */
static void on_abort(http_server *s, http_request *req) {
  (void)s;
  CHECK(req->conn == NULL && req->method != NULL);
}

/* ---- the client side: responses ---- */

typedef struct client {
  int fd;
  llhttp_t parser;
  llhttp_settings_t settings;
  char field[16];
  size_t field_len;
  int in_seq;           /* the header being read is X-Seq */
  long seq;             /* of the response being read; -1 without */
  long last_seq;
  int ours_seen;        /* a response without X-Seq (the server's own) came */
  unsigned responses;
  int eof;
  int reset;             /* the connection was reset: what was in flight is lost */
} client;

static int on_resp_begin(llhttp_t *p) {
  client *c = p->data;
  c->seq = -1;
  c->field_len = 0;
  c->in_seq = 0;
  return 0;
}

static int on_resp_field(llhttp_t *p, const char *at, size_t len) {
  client *c = p->data;
  if (c->field_len + len < sizeof c->field) memcpy(c->field + c->field_len, at, len);
  c->field_len += len;
  return 0;
}

static int on_resp_field_complete(llhttp_t *p) {
  client *c = p->data;
  c->in_seq = c->field_len == 5 && strncasecmp(c->field, "x-seq", 5) == 0;
  c->field_len = 0;
  if (c->in_seq) c->seq = 0;
  return 0;
}

static int on_resp_value(llhttp_t *p, const char *at, size_t len) {
  client *c = p->data;
  for (size_t i = 0; c->in_seq && i < len; i++) {
    CHECK(at[i] >= '0' && at[i] <= '9');
    c->seq = c->seq * 10 + (at[i] - '0');
    CHECK(c->seq < MAX_SEQ);
  }
  return 0;
}

static int on_resp_value_complete(llhttp_t *p) {
  ((client *)p->data)->in_seq = 0;
  return 0;
}

static int on_resp_headers_complete(llhttp_t *p) {
  client *c = p->data;
  if (p->status_code < 200) return 0;
  /* Answers in order; after the server's own answer, nothing. */
  CHECK(!c->ours_seen);
  if (c->seq < 0) {
    c->ours_seen = 1;
    CHECK(p->status_code >= 400);
    return 0;
  }
  CHECK(c->seq > c->last_seq);
  c->last_seq = c->seq;
  return t.head[c->seq] ? 1 : 0; /* a HEAD response has no body */
}

static int on_resp_complete(llhttp_t *p) {
  client *c = p->data;
  if (p->status_code >= 200) c->responses++;
  return 0;
}

static void client_read(client *c) {
  char buf[16384];
  for (;;) {
    ssize_t n = recv(c->fd, buf, sizeof buf, 0);
    if (n > 0) {
      llhttp_errno_t err = llhttp_execute(&c->parser, buf, (size_t)n);
      if (err != HPE_OK) {
        fprintf(stderr, "http_request_fuzz: bad response: %s\n", llhttp_get_error_reason(&c->parser));
        abort();
      }
      continue;
    }
    if (n == 0) {
      c->eof = 1;
    } else {
      CHECK(errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNRESET);
      if (errno == ECONNRESET) c->eof = c->reset = 1;
    }
    return;
  }
}

static void pump(client *c) {
  for (int i = 0; i < 3; i++) uv_run(&loop, UV_RUN_NOWAIT);
  client_read(c);
}

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static uint32_t next_rand(uint32_t *s) {
  uint32_t x = *s ? *s : 0x9E3779B9u;
  x ^= x << 13;
  x ^= x >> 17;
  x ^= x << 5;
  return *s = x;
}

static void setup(void) {
  static int done;
  if (done) return;
  done = 1;
  signal(SIGPIPE, SIG_IGN);
  CHECK(uv_loop_init(&loop) == 0);
  for (int i = 0; i < N_SERVERS; i++) {
    addrs[i].sun_family = AF_UNIX;
    snprintf(addrs[i].sun_path + 1, sizeof addrs[i].sun_path - 1, "edgenode-http-fuzz-%d-%d",
             (int)getpid(), i);
    CHECK(http_server_init(&servers[i], &loop, &configs[i], on_request, NULL) == 0);
    servers[i].on_abort = on_abort;
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    CHECK(fd >= 0);
    CHECK(bind(fd, (struct sockaddr *)&addrs[i], sizeof addrs[i]) == 0);
    CHECK(listen(fd, 64) == 0);
    CHECK(http_server_listen_fd(&servers[i], fd) == 0);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 6) return 0;
  setup();
  http_server *s = &servers[data[0] % N_SERVERS];
  memset(&t, 0, sizeof t);
  t.modes = data[1];
  uint32_t seed = (uint32_t)data[2] | (uint32_t)data[3] << 8 | (uint32_t)data[4] << 16 |
                  (uint32_t)data[5] << 24;
  const char *stream = (const char *)data + 6;
  size_t len = size - 6;

  client c = {.seq = -1, .last_seq = -1};
  llhttp_settings_init(&c.settings);
  c.settings.on_message_begin = on_resp_begin;
  c.settings.on_header_field = on_resp_field;
  c.settings.on_header_field_complete = on_resp_field_complete;
  c.settings.on_header_value = on_resp_value;
  c.settings.on_header_value_complete = on_resp_value_complete;
  c.settings.on_headers_complete = on_resp_headers_complete;
  c.settings.on_message_complete = on_resp_complete;
  llhttp_init(&c.parser, HTTP_RESPONSE, &c.settings);
  c.parser.data = &c;

  /* The kernel completes the connection before the server accepts it. */
  c.fd = socket(AF_UNIX, SOCK_STREAM, 0);
  CHECK(c.fd >= 0);
  CHECK(connect(c.fd, (struct sockaddr *)&addrs[s - servers], sizeof addrs[s - servers]) == 0);
  CHECK(fcntl(c.fd, F_SETFL, O_NONBLOCK) == 0);

  size_t off = 0;
  uint64_t deadline = now_ms() + 5000;
  while (off < len && !c.eof) {
    size_t chunk = 1 + next_rand(&seed) % (seed & 1 ? 8 : 512);
    if (chunk > len - off) chunk = len - off;
    ssize_t n = send(c.fd, stream + off, chunk, MSG_NOSIGNAL);
    if (n > 0) {
      off += (size_t)n;
    } else {
      /* The server stopped reading (pipelining) or closed. */
      CHECK(errno == EAGAIN || errno == EWOULDBLOCK || errno == EPIPE || errno == ECONNRESET);
      if (errno == EPIPE || errno == ECONNRESET) break;
      CHECK(now_ms() < deadline);
    }
    pump(&c);
  }
  shutdown(c.fd, SHUT_WR);
  /* The client is gone: the server must close, and answer what it owes. */
  while (!c.eof || s->connections > 0 || t.pending > 0) {
    struct pollfd pfd = {.fd = c.fd, .events = POLLIN};
    poll(&pfd, 1, 1);
    pump(&c);
    if (now_ms() > deadline) {
      fprintf(stderr, "http_request_fuzz: connection not closed (eof %d, connections %zu, pending %u)\n",
              c.eof, s->connections, t.pending);
      abort();
    }
  }
  close(c.fd);
  CHECK(s->in_flight == 0);
  /* A response cut short is only allowed when the connection was aborted. */
  llhttp_errno_t err = llhttp_finish(&c.parser);
  CHECK(err == HPE_OK || c.reset);
  return 0;
}
