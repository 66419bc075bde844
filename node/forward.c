/*
 * Forwarding, in a fleet: a request for a tenant whose facets another node
 * owns goes to that node. A worker process has no network, so it hands the
 * request (as it hands one to a dedicated process, worker/handoff.c) to a
 * unix socket of the supervisor's, one per other node, DATA/replica/fwd/N.sock,
 * and the supervisor carries the bytes both ways to that node's ingress.
 * Only forwarded requests pass here, and only bytes: this process never
 * parses them. The addresses are the members' heartbeats' "listen".
 *
 * Each direction is read only while the other side's write queue is short,
 * so a slow client holds a bounded amount here, whatever the body's size.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base.h"
#include "node.h"

#define QUEUE_MAX (256u * 1024u) /* bytes waiting for one side before the other is paused */
#define READ_SIZE 65536

typedef struct relay_target {
  struct relay_target *next;
  char *name;
  char *path;
  struct sockaddr_storage addr;
  uv_pipe_t server;
  int open;
} relay_target;

struct node_forward {
  relay_target *targets;
  unsigned seq;
};

typedef struct side {
  uv_stream_t *stream;
  struct side *other;
  struct relay *relay;
  int eof;     /* read its end */
  int paused;
} side;

typedef struct relay {
  uv_pipe_t client; /* the worker process's */
  uv_tcp_t upstream;
  uv_connect_t connect;
  side c, u;
  int handles;
  int closing;
} relay;

static void on_relay_closed(uv_handle_t *h) {
  relay *r = h->data;
  if (--r->handles == 0) free(r);
}

static void relay_close(relay *r) {
  if (r->closing) return;
  r->closing = 1;
  /* While open, a handle's data is its side; the close callback wants the relay. */
  r->client.data = r;
  r->upstream.data = r;
  uv_close((uv_handle_t *)&r->client, on_relay_closed);
  uv_close((uv_handle_t *)&r->upstream, on_relay_closed);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)h;
  (void)suggested;
  buf->base = xmalloc(READ_SIZE);
  buf->len = READ_SIZE;
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf);

typedef struct write_req {
  uv_write_t req;
  side *to; /* the side written to */
  char *data;
} write_req;

static void resume_other(side *to) {
  side *from = to->other;
  if (from->paused && !from->eof && to->stream->write_queue_size < QUEUE_MAX / 2) {
    from->paused = 0;
    uv_read_start(from->stream, on_alloc, on_read);
  }
}

static void on_written(uv_write_t *req, int status) {
  write_req *w = (write_req *)req;
  side *to = w->to;
  free(w->data);
  free(w);
  if (status != 0) {
    relay_close(to->relay);
    return;
  }
  if (!to->relay->closing) resume_other(to);
}

static void on_shutdown(uv_shutdown_t *req, int status) {
  (void)status;
  free(req);
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  side *from = s->data;
  relay *r = from->relay;
  side *to = from->other;
  if (n > 0) {
    write_req *w = xcalloc(1, sizeof *w);
    w->to = to;
    w->data = buf->base;
    uv_buf_t out = uv_buf_init(buf->base, (unsigned)n);
    if (uv_write(&w->req, to->stream, &out, 1, on_written) != 0) {
      free(w->data);
      free(w);
      relay_close(r);
      return;
    }
    if (to->stream->write_queue_size >= QUEUE_MAX) {
      from->paused = 1;
      uv_read_stop(s);
    }
    return;
  }
  free(buf->base);
  if (n == 0) return;
  if (n != UV_EOF) {
    relay_close(r);
    return;
  }
  from->eof = 1;
  uv_read_stop(s);
  if (to->eof) {
    relay_close(r);
    return;
  }
  uv_shutdown_t *sh = xcalloc(1, sizeof *sh);
  if (uv_shutdown(sh, to->stream, on_shutdown) != 0) {
    free(sh);
    relay_close(r);
  }
}

static void on_upstream(uv_connect_t *c, int status) {
  relay *r = c->data;
  if (r->closing) return;
  if (status != 0) {
    relay_close(r); /* the worker sees the connection end with no answer */
    return;
  }
  uv_read_start((uv_stream_t *)&r->client, on_alloc, on_read);
  uv_read_start((uv_stream_t *)&r->upstream, on_alloc, on_read);
}

static void on_connection(uv_stream_t *server, int status) {
  relay_target *t = server->data;
  if (status != 0) return;
  relay *r = xcalloc(1, sizeof *r);
  uv_loop_t *loop = server->loop;
  uv_pipe_init(loop, &r->client, 0);
  uv_tcp_init(loop, &r->upstream);
  r->client.data = r->upstream.data = r;
  r->handles = 2;
  r->c = (side){.stream = (uv_stream_t *)&r->client, .other = &r->u, .relay = r};
  r->u = (side){.stream = (uv_stream_t *)&r->upstream, .other = &r->c, .relay = r};
  if (uv_accept(server, (uv_stream_t *)&r->client) != 0) {
    relay_close(r);
    return;
  }
  /* The streams' data are their sides from here on; the handles' close
   * callback finds the relay through the side. */
  r->client.data = &r->c;
  r->upstream.data = &r->u;
  r->connect.data = r;
  uv_tcp_nodelay(&r->upstream, 1);
  if (uv_tcp_connect(&r->connect, &r->upstream, (struct sockaddr *)&t->addr, on_upstream) != 0)
    relay_close(r);
}

static int parse_listen(const char *text, struct sockaddr_storage *out) {
  char host[96];
  const char *colon = strrchr(text, ':');
  if (colon == NULL || (size_t)(colon - text) >= sizeof host) return -1;
  memcpy(host, text, (size_t)(colon - text));
  host[colon - text] = '\0';
  int port = atoi(colon + 1);
  char *h = host;
  if (h[0] == '[') {
    h++;
    h[strlen(h) - 1] = '\0';
  }
  if (uv_ip4_addr(h, port, (struct sockaddr_in *)out) == 0) {
    /* A wildcard address says where it listens, not where to reach it. */
    return ((struct sockaddr_in *)out)->sin_addr.s_addr == 0 ? -1 : 0;
  }
  if (uv_ip6_addr(h, port, (struct sockaddr_in6 *)out) == 0) return strcmp(h, "::") == 0 ? -1 : 0;
  return -1;
}

void node_forward_member(node *n, const char *name, const char *listen_addr) {
  if (n->replica == NULL || n->fleet == NULL) return;
  if (n->forward == NULL) n->forward = xcalloc(1, sizeof *n->forward);
  struct node_forward *f = n->forward;
  relay_target *t = f->targets;
  while (t && strcmp(t->name, name) != 0) t = t->next;
  struct sockaddr_storage addr;
  memset(&addr, 0, sizeof addr);
  if (listen_addr == NULL || parse_listen(listen_addr, &addr) != 0) return;
  if (t != NULL) {
    t->addr = addr; /* a node restarted elsewhere: the next connections go there */
    return;
  }
  char *dir = xasprintf("%s/replica/fwd", n->data_dir);
  if (mkdir(dir, 0711) != 0 && errno != EEXIST) {
    log_warn("forwarding: %s: %s", dir, strerror(errno));
    free(dir);
    return;
  }
  t = xcalloc(1, sizeof *t);
  t->name = xstrdup(name);
  t->path = xasprintf("%s/%u.sock", dir, ++f->seq);
  free(dir);
  t->addr = addr;
  unlink(t->path);
  int rc = uv_pipe_init(n->loop, &t->server, 0);
  if (rc == 0) {
    t->open = 1;
    t->server.data = t;
    rc = uv_pipe_bind(&t->server, t->path);
  }
  if (rc == 0 && chmod(t->path, 0666) != 0) rc = -errno;
  if (rc == 0) rc = uv_listen((uv_stream_t *)&t->server, 128, on_connection);
  if (rc != 0) {
    log_warn("forwarding to node %s: %s: %s", name, t->path, uv_strerror(rc));
    if (t->open) uv_close((uv_handle_t *)&t->server, NULL);
    /* The handle's memory is still the loop's until it closed: kept. */
    t->open = 0;
  }
  t->next = f->targets;
  f->targets = t;
  if (rc == 0) {
    node_replica_set_forward(n, name, t->path);
    log_write(LOG_INFO, NULL, NULL, NULL, "forwarding: requests for node %s's tenants go to %s",
              name, listen_addr);
  }
}

void node_forward_stop(node *n) {
  struct node_forward *f = n->forward;
  if (f == NULL) return;
  for (relay_target *t = f->targets; t; t = t->next) {
    if (t->open && !uv_is_closing((uv_handle_t *)&t->server)) uv_close((uv_handle_t *)&t->server, NULL);
    t->open = 0;
    unlink(t->path);
  }
}

void node_forward_free(node *n) {
  struct node_forward *f = n->forward;
  if (f == NULL) return;
  while (f->targets) {
    relay_target *t = f->targets;
    f->targets = t->next;
    free(t->name);
    free(t->path);
    free(t);
  }
  free(f);
  n->forward = NULL;
}
