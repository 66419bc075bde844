/*
 * egress_upstream: the upstream for tests/bench/egress.sh. A single-threaded
 * libuv server that answers every request head it reads with the same small
 * keep-alive response, as fast as it can, so that the benchmark measures
 * the proxies in front of it rather than the upstream.
 *
 *   egress_upstream PORT     (prints "listening" once it accepts)
 *
 * Requests are counted by their empty line ("\r\n\r\n"); the benchmark only
 * sends GETs without bodies. Built by egress.sh with the system compiler.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

static const char response[] =
    "HTTP/1.1 200 OK\r\n"
    "Content-Type: text/plain\r\n"
    "Content-Length: 22\r\n"
    "\r\n"
    "hello from upstream!\r\n";

typedef struct client {
  uv_tcp_t tcp;
  int matched; /* bytes of "\r\n\r\n" seen at the end of the input so far */
} client;

static void on_closed(uv_handle_t *h) { free(h->data); }

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  static char chunk[65536];
  (void)h;
  (void)suggested;
  *buf = uv_buf_init(chunk, sizeof chunk);
}

static void on_written(uv_write_t *req, int status) {
  (void)status;
  free(req);
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  client *c = s->data;
  if (n < 0) {
    uv_close((uv_handle_t *)s, on_closed);
    return;
  }
  static const char end[] = "\r\n\r\n";
  int requests = 0;
  for (ssize_t i = 0; i < n; i++) {
    char ch = buf->base[i];
    if (ch == end[c->matched]) c->matched++;
    else c->matched = ch == '\r' ? 1 : 0;
    if (c->matched == 4) {
      requests++;
      c->matched = 0;
    }
  }
  if (requests == 0) return;
  /* One write for all the responses this read asked for. */
  size_t len = (sizeof response - 1) * (size_t)requests;
  uv_write_t *req = malloc(sizeof *req + len);
  if (req == NULL) abort();
  char *out = (char *)(req + 1);
  for (int i = 0; i < requests; i++) memcpy(out + i * (sizeof response - 1), response, sizeof response - 1);
  uv_buf_t b = uv_buf_init(out, (unsigned)len);
  if (uv_write(req, s, &b, 1, on_written) != 0) free(req);
}

static void on_connection(uv_stream_t *server, int status) {
  if (status < 0) return;
  client *c = calloc(1, sizeof *c);
  if (c == NULL) abort();
  uv_tcp_init(server->loop, &c->tcp);
  c->tcp.data = c;
  if (uv_accept(server, (uv_stream_t *)&c->tcp) != 0) {
    uv_close((uv_handle_t *)&c->tcp, on_closed);
    return;
  }
  uv_tcp_nodelay(&c->tcp, 1);
  uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: egress_upstream PORT\n");
    return 2;
  }
  uv_loop_t *loop = uv_default_loop();
  uv_tcp_t server;
  struct sockaddr_in addr;
  uv_tcp_init(loop, &server);
  uv_ip4_addr("127.0.0.1", atoi(argv[1]), &addr);
  int rc = uv_tcp_bind(&server, (const struct sockaddr *)&addr, 0);
  if (rc == 0) rc = uv_listen((uv_stream_t *)&server, 1024, on_connection);
  if (rc != 0) {
    fprintf(stderr, "egress_upstream: %s\n", uv_strerror(rc));
    return 1;
  }
  printf("listening\n");
  fflush(stdout);
  return uv_run(loop, UV_RUN_DEFAULT);
}
