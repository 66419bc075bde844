/*
 * loadgen: a closed-loop HTTP/1.1 load generator that times every response.
 *
 *   loadgen [-c CONNECTIONS] [-d SECONDS] [-t THREADS] [-H HOST] [-n COUNT] URL
 *
 * Each connection keeps exactly one request outstanding on a keep-alive
 * connection: it writes the request, waits for the complete response, and
 * writes the next one. The latency of a request is measured on the monotonic
 * clock from the moment its bytes are handed to the kernel to the moment the
 * last byte of its response has been parsed. Every sample is stored, so the
 * percentiles are exact (nearest rank); nothing is synthesised for requests
 * that were never sent, unlike tools that correct for coordinated omission.
 *
 * With -n COUNT the Host header holds "%d" (-H 'w%d.localhost'), which each
 * request replaces by the next of 0 .. COUNT-1 in turn, over all connections:
 * COUNT tenants requested round-robin.
 *
 * One JSON line goes to stdout:
 *   {"requests":N,"errors":N,"seconds":S,"rps":R,
 *    "p50_us":..,"p90_us":..,"p99_us":..,"max_us":..}
 * "errors" counts failed connects, reads and writes, unparsable responses and
 * responses with a status of 400 or above.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <llhttp.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "base.h"

#define LOADGEN_READ_BUF (64 * 1024)
#define LOADGEN_MAX_THREADS 64

typedef struct loadgen_thread loadgen_thread;

/* Samples in nanoseconds; grows by doubling. */
typedef struct {
  uint64_t *v;
  size_t len;
  size_t cap;
} sample_vec;

typedef enum {
  CONN_IDLE,       /* tcp handle not initialised */
  CONN_CONNECTING, /* connect in flight */
  CONN_OPEN,       /* connected; a request may be outstanding */
  CONN_CLOSING,    /* uv_close called, waiting for on_conn_closed */
} conn_state;

typedef struct {
  uv_tcp_t tcp;
  uv_connect_t connect_req;
  uv_write_t write_req;
  llhttp_t parser;
  loadgen_thread *thread;
  conn_state state;
  uint64_t sent_ns;    /* when the outstanding request was written */
  bool in_flight;      /* a request is waiting for its response */
  bool completed;      /* the parser finished a response in this read */
  bool keep_alive;     /* the last response allows reuse of the connection */
  char buf[LOADGEN_READ_BUF];
} conn;

struct loadgen_thread {
  uv_loop_t loop;
  uv_timer_t deadline;
  uv_thread_t tid;
  llhttp_settings_t settings;
  const struct sockaddr *addr;
  const uv_buf_t *requests; /* n_requests of them, taken in turn */
  size_t n_requests;
  atomic_size_t *next;       /* shared by all threads */
  conn *conns;
  int nconns;
  uint64_t duration_ms;
  uint64_t started_ns; /* measurement window of this thread */
  uint64_t stopped_ns;
  bool stopping;
  uint64_t errors;
  sample_vec samples;
};

static void conn_start(conn *c);
static void conn_send(conn *c);

static void samples_push(sample_vec *s, uint64_t ns) {
  if (s->len == s->cap) {
    s->cap = s->cap ? s->cap * 2 : 65536;
    s->v = xrealloc(s->v, s->cap * sizeof(*s->v));
  }
  s->v[s->len++] = ns;
}

static void on_conn_closed(uv_handle_t *h) {
  conn *c = container_of((uv_tcp_t *)h, conn, tcp);
  c->state = CONN_IDLE;
  /* Closed loop: a dropped connection is replaced so the offered
   * concurrency stays constant for the whole run. */
  if (!c->thread->stopping)
    conn_start(c);
}

static void conn_close(conn *c) {
  if (c->state == CONN_IDLE || c->state == CONN_CLOSING)
    return;
  c->state = CONN_CLOSING;
  c->in_flight = false;
  uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
}

/* A failure ends this connection; the request it carried is not counted. */
static void conn_fail(conn *c) {
  if (!c->thread->stopping)
    c->thread->errors++;
  conn_close(c);
}

static int on_message_complete(llhttp_t *p) {
  conn *c = p->data;
  loadgen_thread *t = c->thread;
  if (!c->in_flight) {
    /* A response nobody asked for: the server is out of step with us. */
    return HPE_USER;
  }
  uint64_t ns = uv_hrtime() - c->sent_ns;
  c->in_flight = false;
  c->completed = true;
  c->keep_alive = llhttp_should_keep_alive(p);
  if (t->stopping)
    return HPE_PAUSED;
  if (p->status_code >= 400)
    t->errors++;
  else
    samples_push(&t->samples, ns);
  /* Stop parsing here: with one request outstanding there is nothing after
   * this response, and the next one is written only after we return. */
  return HPE_PAUSED;
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)suggested;
  conn *c = container_of((uv_tcp_t *)h, conn, tcp);
  *buf = uv_buf_init(c->buf, sizeof(c->buf));
}

/* After a complete response: reuse the connection or replace it. */
static void conn_next(conn *c) {
  c->completed = false;
  if (c->thread->stopping)
    return;
  if (!c->keep_alive) {
    conn_close(c);
    return;
  }
  conn_send(c);
}

static void conn_parse(conn *c, const char *data, size_t len) {
  llhttp_errno_t err = llhttp_execute(&c->parser, data, len);
  if (err == HPE_PAUSED) {
    /* Bytes after a complete response with nothing outstanding would be
     * an unsolicited response; treat the connection as broken. */
    const char *stop = llhttp_get_error_pos(&c->parser);
    llhttp_resume(&c->parser);
    if (stop != data + len) {
      conn_fail(c);
      return;
    }
    conn_next(c);
    return;
  }
  if (err != HPE_OK)
    conn_fail(c);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  conn *c = container_of((uv_tcp_t *)s, conn, tcp);
  if (c->state != CONN_OPEN)
    return;
  if (nread > 0) {
    conn_parse(c, buf->base, (size_t)nread);
    return;
  }
  if (nread == 0)
    return;
  if (nread == UV_EOF && c->in_flight) {
    /* A response delimited by the end of the connection completes here. */
    if (llhttp_finish(&c->parser) == HPE_PAUSED && c->completed) {
      llhttp_resume(&c->parser);
      c->completed = false;
      conn_close(c);
      return;
    }
  }
  if (nread == UV_EOF && !c->in_flight) {
    /* Server closed an idle keep-alive connection: not an error. */
    conn_close(c);
    return;
  }
  conn_fail(c);
}

static void on_write(uv_write_t *req, int status) {
  conn *c = container_of(req, conn, write_req);
  if (status < 0 && status != UV_ECANCELED)
    conn_fail(c);
}

static void conn_send(conn *c) {
  loadgen_thread *t = c->thread;
  const uv_buf_t *request = t->requests;
  if (t->n_requests > 1)
    request += atomic_fetch_add_explicit(t->next, 1, memory_order_relaxed) % t->n_requests;
  c->in_flight = true;
  c->sent_ns = uv_hrtime();
  /* The request is small: the kernel almost always takes it whole, which
   * avoids a write request round trip through the loop. */
  int n = uv_try_write((uv_stream_t *)&c->tcp, request, 1);
  if (n == (int)request->len)
    return;
  if (n < 0 && n != UV_EAGAIN) {
    conn_fail(c);
    return;
  }
  uv_buf_t rest = *request;
  if (n > 0) {
    rest.base += n;
    rest.len -= (size_t)n;
  }
  int r = uv_write(&c->write_req, (uv_stream_t *)&c->tcp, &rest, 1, on_write);
  if (r < 0)
    conn_fail(c);
}

static void on_connect(uv_connect_t *req, int status) {
  conn *c = container_of(req, conn, connect_req);
  if (c->state != CONN_CONNECTING)
    return;
  if (status < 0) {
    conn_fail(c);
    return;
  }
  c->state = CONN_OPEN;
  int r = uv_tcp_nodelay(&c->tcp, 1);
  if (r == 0)
    r = uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
  if (r < 0) {
    conn_fail(c);
    return;
  }
  conn_send(c);
}

static void conn_start(conn *c) {
  loadgen_thread *t = c->thread;
  llhttp_init(&c->parser, HTTP_RESPONSE, &t->settings);
  c->parser.data = c;
  c->in_flight = false;
  c->completed = false;
  c->keep_alive = true;
  int r = uv_tcp_init(&t->loop, &c->tcp);
  if (r < 0) {
    fprintf(stderr, "loadgen: uv_tcp_init: %s\n", uv_strerror(r));
    abort();
  }
  c->state = CONN_CONNECTING;
  r = uv_tcp_connect(&c->connect_req, &c->tcp, t->addr, on_connect);
  if (r < 0)
    conn_fail(c);
}

static void on_deadline(uv_timer_t *timer) {
  loadgen_thread *t = container_of(timer, loadgen_thread, deadline);
  t->stopping = true;
  t->stopped_ns = uv_hrtime();
  for (int i = 0; i < t->nconns; i++)
    conn_close(&t->conns[i]);
  uv_close((uv_handle_t *)&t->deadline, NULL);
}

static void thread_main(void *arg) {
  loadgen_thread *t = arg;
  /* The loop clock was read when the loop was created on another thread. */
  uv_update_time(&t->loop);
  t->started_ns = uv_hrtime();
  for (int i = 0; i < t->nconns; i++)
    conn_start(&t->conns[i]);
  int r = uv_timer_start(&t->deadline, on_deadline, t->duration_ms, 0);
  if (r < 0) {
    fprintf(stderr, "loadgen: uv_timer_start: %s\n", uv_strerror(r));
    abort();
  }
  uv_run(&t->loop, UV_RUN_DEFAULT);
}

static void thread_init(loadgen_thread *t, int nconns, const struct sockaddr *addr,
                        const uv_buf_t *requests, size_t n_requests, atomic_size_t *next,
                        uint64_t duration_ms) {
  memset(t, 0, sizeof(*t));
  int r = uv_loop_init(&t->loop);
  if (r == 0)
    r = uv_timer_init(&t->loop, &t->deadline);
  if (r < 0) {
    fprintf(stderr, "loadgen: loop init: %s\n", uv_strerror(r));
    abort();
  }
  llhttp_settings_init(&t->settings);
  t->settings.on_message_complete = on_message_complete;
  t->addr = addr;
  t->requests = requests;
  t->n_requests = n_requests;
  t->next = next;
  t->duration_ms = duration_ms;
  t->nconns = nconns;
  t->conns = xcalloc((size_t)nconns, sizeof(*t->conns));
  for (int i = 0; i < nconns; i++)
    t->conns[i].thread = t;
}

static void thread_free(loadgen_thread *t) {
  int r = uv_loop_close(&t->loop);
  if (r < 0)
    fprintf(stderr, "loadgen: uv_loop_close: %s\n", uv_strerror(r));
  free(t->conns);
  free(t->samples.v);
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

/* Nearest-rank percentile of sorted samples, in microseconds. */
static double percentile_us(const uint64_t *sorted, size_t n, double p) {
  if (n == 0)
    return 0.0;
  size_t rank = (size_t)((p / 100.0) * (double)n + 0.999999);
  if (rank < 1)
    rank = 1;
  if (rank > n)
    rank = n;
  return (double)sorted[rank - 1] / 1000.0;
}

/* Rounds to `digits` decimals so the printed JSON stays readable. */
static double round_to(double v, int digits) {
  double scale = 1.0;
  for (int i = 0; i < digits; i++)
    scale *= 10.0;
  return (double)(int64_t)(v * scale + 0.5) / scale;
}

static double round1(double v) {
  return round_to(v, 1);
}

static int print_result(uint64_t requests, uint64_t errors, double seconds,
                        const uint64_t *sorted, size_t n) {
  json_t *o = json_pack(
      "{s:I, s:I, s:f, s:f, s:f, s:f, s:f, s:f}", "requests", (json_int_t)requests,
      "errors", (json_int_t)errors, "seconds", round_to(seconds, 3),
      "rps", round1(seconds > 0 ? (double)requests / seconds : 0.0), "p50_us",
      round1(percentile_us(sorted, n, 50)), "p90_us", round1(percentile_us(sorted, n, 90)),
      "p99_us", round1(percentile_us(sorted, n, 99)), "max_us",
      round1(n ? (double)sorted[n - 1] / 1000.0 : 0.0));
  if (o == NULL)
    return -ENOMEM;
  char *text = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(12));
  json_decref(o);
  if (text == NULL)
    return -ENOMEM;
  printf("%s\n", text);
  free(text);
  return fflush(stdout) == 0 ? 0 : -errno;
}

/* Splits "http://HOST[:PORT][/PATH]" into its parts. Only plain http. */
static int parse_url(const char *url, char host[256], int *port, const char **path) {
  static const char scheme[] = "http://";
  if (strncmp(url, scheme, sizeof(scheme) - 1) != 0)
    return -EINVAL;
  const char *h = url + sizeof(scheme) - 1;
  const char *slash = strchr(h, '/');
  size_t hostport_len = slash ? (size_t)(slash - h) : strlen(h);
  *path = slash ? slash : "/";
  if (hostport_len == 0 || hostport_len >= 256)
    return -EINVAL;
  char hp[256];
  memcpy(hp, h, hostport_len);
  hp[hostport_len] = '\0';
  *port = 80;
  const char *colon = hp[0] == '[' ? strstr(hp, "]:") : strrchr(hp, ':');
  size_t host_len = hostport_len;
  if (colon) {
    if (hp[0] == '[')
      colon++;
    char *end;
    long p = strtol(colon + 1, &end, 10);
    if (*end != '\0' || p <= 0 || p > 65535)
      return -EINVAL;
    *port = (int)p;
    host_len = (size_t)(colon - hp);
  }
  if (hp[0] == '[') {
    if (host_len < 2 || hp[host_len - 1] != ']')
      return -EINVAL;
    memcpy(host, hp + 1, host_len - 2);
    host[host_len - 2] = '\0';
  } else {
    memcpy(host, hp, host_len);
    host[host_len] = '\0';
  }
  return 0;
}

static int resolve(const char *host, int port, struct sockaddr_storage *out) {
  uv_loop_t loop;
  uv_getaddrinfo_t req;
  char service[16];
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
  int r = uv_loop_init(&loop);
  if (r < 0)
    return r;
  snprintf(service, sizeof(service), "%d", port);
  /* Without a callback the lookup is synchronous. */
  r = uv_getaddrinfo(&loop, &req, NULL, host, service, &hints);
  if (r == 0) {
    memcpy(out, req.addrinfo->ai_addr, req.addrinfo->ai_addrlen);
    uv_freeaddrinfo(req.addrinfo);
  }
  int rc = uv_loop_close(&loop);
  return r < 0 ? r : rc;
}

static void usage(void) {
  fprintf(stderr,
          "usage: loadgen [-c CONNECTIONS] [-d SECONDS] [-t THREADS] [-H HOST] [-n COUNT] URL\n"
          "  -c  concurrent keep-alive connections, one request each (default 64)\n"
          "  -d  duration in seconds, fractions allowed (default 10)\n"
          "  -t  client threads, each with its own event loop (default 1)\n"
          "  -H  value of the Host header (default: host[:port] of URL)\n"
          "  -n  the Host header's %%d takes 0 .. COUNT-1 in turn (round-robin over COUNT hosts)\n");
}

typedef struct {
  int connections;
  int threads;
  double seconds;
  const char *host_header;
  int hosts; /* -n */
  const char *url;
} options;

static int parse_int(const char *s, int min, int max, int *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || *end != '\0' || v < min || v > max)
    return -EINVAL;
  *out = (int)v;
  return 0;
}

static int parse_options(int argc, char **argv, options *o) {
  *o = (options){.connections = 64, .threads = 1, .seconds = 10.0, .hosts = 1};
  int opt;
  while ((opt = getopt(argc, argv, "c:d:t:H:n:h")) != -1) {
    char *end;
    switch (opt) {
    case 'c':
      if (parse_int(optarg, 1, 100000, &o->connections) < 0)
        return -EINVAL;
      break;
    case 't':
      if (parse_int(optarg, 1, LOADGEN_MAX_THREADS, &o->threads) < 0)
        return -EINVAL;
      break;
    case 'd':
      errno = 0;
      o->seconds = strtod(optarg, &end);
      if (errno || *end != '\0' || !(o->seconds > 0) || o->seconds > 86400)
        return -EINVAL;
      break;
    case 'H':
      o->host_header = optarg;
      break;
    case 'n':
      if (parse_int(optarg, 1, 10000000, &o->hosts) < 0)
        return -EINVAL;
      break;
    default:
      return -EINVAL;
    }
  }
  if (optind != argc - 1)
    return -EINVAL;
  o->url = argv[optind];
  if (o->hosts > 1 && (o->host_header == NULL || strstr(o->host_header, "%d") == NULL))
    return -EINVAL;
  if (o->threads > o->connections)
    o->threads = o->connections;
  return 0;
}

int main(int argc, char **argv) {
  options o;
  char host[256];
  int port;
  const char *path;
  if (parse_options(argc, argv, &o) < 0 || parse_url(o.url, host, &port, &path) < 0) {
    usage();
    return 2;
  }
  struct sockaddr_storage addr;
  int r = resolve(host, port, &addr);
  if (r < 0) {
    fprintf(stderr, "loadgen: cannot resolve %s: %s\n", host, uv_strerror(r));
    return 1;
  }
  char *host_value = o.host_header ? xstrdup(o.host_header)
                     : port == 80 ? xstrdup(host)
                                  : xasprintf("%s:%d", host, port);
  uv_buf_t *requests = xcalloc((size_t)o.hosts, sizeof(*requests));
  const char *mark = o.hosts > 1 ? strstr(host_value, "%d") : NULL;
  for (int i = 0; i < o.hosts; i++) {
    char *text = mark ? xasprintf("GET %s HTTP/1.1\r\nHost: %.*s%d%s\r\n\r\n", path,
                                  (int)(mark - host_value), host_value, i, mark + 2)
                      : xasprintf("GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", path, host_value);
    requests[i] = uv_buf_init(text, (unsigned)strlen(text));
  }
  atomic_size_t next = 0;

  uint64_t duration_ms = (uint64_t)(o.seconds * 1000.0 + 0.5);
  loadgen_thread *threads = xcalloc((size_t)o.threads, sizeof(*threads));
  for (int i = 0; i < o.threads; i++) {
    int n = o.connections / o.threads + (i < o.connections % o.threads);
    thread_init(&threads[i], n, (const struct sockaddr *)&addr, requests, (size_t)o.hosts, &next,
                duration_ms);
  }

  for (int i = 0; i < o.threads; i++) {
    r = uv_thread_create(&threads[i].tid, thread_main, &threads[i]);
    if (r < 0) {
      fprintf(stderr, "loadgen: uv_thread_create: %s\n", uv_strerror(r));
      abort();
    }
  }
  for (int i = 0; i < o.threads; i++) {
    r = uv_thread_join(&threads[i].tid);
    if (r < 0) {
      fprintf(stderr, "loadgen: uv_thread_join: %s\n", uv_strerror(r));
      abort();
    }
  }
  /* The window runs from the first thread's start to the last thread's
   * deadline, as measured, not as requested. */
  uint64_t first = UINT64_MAX, last = 0;
  size_t total = 0;
  uint64_t errors = 0;
  for (int i = 0; i < o.threads; i++) {
    total += threads[i].samples.len;
    errors += threads[i].errors;
    if (threads[i].started_ns < first)
      first = threads[i].started_ns;
    if (threads[i].stopped_ns > last)
      last = threads[i].stopped_ns;
  }
  double seconds = last > first ? (double)(last - first) / 1e9 : 0.0;
  uint64_t *all = xmalloc((total ? total : 1) * sizeof(*all));
  size_t off = 0;
  for (int i = 0; i < o.threads; i++) {
    if (threads[i].samples.len)
      memcpy(all + off, threads[i].samples.v, threads[i].samples.len * sizeof(*all));
    off += threads[i].samples.len;
    thread_free(&threads[i]);
  }
  qsort(all, total, sizeof(*all), cmp_u64);
  r = print_result(total, errors, seconds, all, total);
  free(all);
  free(threads);
  for (int i = 0; i < o.hosts; i++)
    free(requests[i].base);
  free(requests);
  free(host_value);
  if (r < 0) {
    fprintf(stderr, "loadgen: cannot print the result: %s\n", strerror(-r));
    return 1;
  }
  return 0;
}
