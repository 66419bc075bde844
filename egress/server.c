/*
 * The worker-facing side: a unix socket in DATA/egress/ that each worker
 * process connects to, speaking proto/ frames. A connection carries many
 * fetches at once, each named by the id of the PROTO_FETCH that began it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "egress_int.h"

int client_send_head(client *c, uint8_t type, uint32_t id, json_t *head, const void *bytes,
                     size_t len) {
  char *text = json_dumps(head, JSON_COMPACT);
  if (text == NULL) return UV_EINVAL;
  size_t n = strlen(text);
  uint8_t *payload = xmalloc(4 + n + len);
  payload[0] = (uint8_t)(n >> 24);
  payload[1] = (uint8_t)(n >> 16);
  payload[2] = (uint8_t)(n >> 8);
  payload[3] = (uint8_t)n;
  memcpy(payload + 4, text, n);
  if (len) memcpy(payload + 4 + n, bytes, len);
  int rc = c->closed ? UV_EPIPE : proto_channel_send(&c->ch, type, id, payload, 4 + n + len);
  free(payload);
  free(text);
  return rc;
}

int client_send_error(client *c, uint32_t id, const char *message, int hops) {
  json_t *body = json_pack("{s:s, s:s, s:i}", "error", message, "name", "TypeError", "hops", hops);
  if (body == NULL) body = json_pack("{s:s, s:s, s:i}", "error", "fetch failed", "name",
                                     "TypeError", "hops", hops);
  char *text = json_dumps(body, JSON_COMPACT);
  json_decref(body);
  int rc = c->closed || text == NULL ? UV_EPIPE
                                     : proto_channel_send(&c->ch, PROTO_ERROR, id, text, strlen(text));
  free(text);
  return rc;
}

static void on_frame(proto_channel *ch, const proto_frame *frame) {
  client *c = ch->data;
  switch (frame->type) {
    case PROTO_FETCH: fetch_start(c, frame); break;
    case PROTO_FETCH_READ: fetch_read(c, frame->id); break;
    case PROTO_FETCH_CANCEL: fetch_cancel(c, frame->id); break;
    case PROTO_PING: proto_channel_send(ch, PROTO_PONG, frame->id, NULL, 0); break;
    default:
      log_debug("worker connection: ignoring a %s frame", proto_type_name(frame->type));
  }
}

static void on_client_closed(proto_channel *ch, int reason) {
  client *c = ch->data;
  (void)reason;
  egress *e = c->e;
  for (client **pp = &e->clients; *pp; pp = &(*pp)->next) {
    if (*pp == c) {
      *pp = c->next;
      break;
    }
  }
  c->closed = 1;
  fetch_abandon_all(c);
  free(c);
}

static void on_unstarted_closed(uv_handle_t *h) {
  free(container_of((uv_pipe_t *)h, client, ch.pipe));
}

static void on_connection(uv_stream_t *server, int status) {
  egress *e = server->data;
  if (status < 0) {
    log_warn("accepting a worker connection failed: %s", uv_strerror(status));
    return;
  }
  client *c = xcalloc(1, sizeof *c);
  c->e = e;
  uv_pipe_init(e->loop, &c->ch.pipe, 0);
  if (uv_accept(server, (uv_stream_t *)&c->ch.pipe) != 0 ||
      proto_channel_start(&c->ch, on_frame, on_client_closed, c) != 0) {
    /* The channel never started: close the bare pipe, free in its callback. */
    uv_close((uv_handle_t *)&c->ch.pipe, on_unstarted_closed);
    return;
  }
  /* Which process this is: the supervisor binds dedicated processes to
   * their tenant (egress_client_bound). */
  struct ucred cred;
  socklen_t len = sizeof cred;
  uv_os_fd_t fd;
  if (uv_fileno((uv_handle_t *)&c->ch.pipe, &fd) == 0 &&
      getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0)
    c->peer_pid = (int)cred.pid;
  c->next = e->clients;
  e->clients = c;
}

int server_listen(egress *e, char **err) {
  const char *path = e->cfg.socket_path;
  struct sockaddr_un sun;
  if (strlen(path) >= sizeof sun.sun_path) {
    *err = xasprintf("socket path %s is longer than the %zu bytes a unix socket allows; use a "
                     "shorter data directory",
                     path, sizeof sun.sun_path - 1);
    return -1;
  }
  /* A socket left by a previous egress process: replace it. Anything else stays. */
  struct stat st;
  if (lstat(path, &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      *err = xasprintf("%s exists and is not a socket", path);
      return -1;
    }
    unlink(path);
  }
  int rc = uv_pipe_init(e->loop, &e->listener, 0);
  if (rc == 0) {
    e->listener.data = e;
    mode_t old = umask(077); /* only this user's processes may connect */
    rc = uv_pipe_bind(&e->listener, path);
    umask(old);
    if (rc == 0) rc = uv_listen((uv_stream_t *)&e->listener, 128, on_connection);
    if (rc != 0) uv_close((uv_handle_t *)&e->listener, NULL);
  }
  if (rc != 0) {
    *err = xasprintf("listening on %s: %s", path, uv_strerror(rc));
    return -1;
  }
  e->listening = 1;
  return 0;
}

void server_close(egress *e) {
  if (e->listening) {
    uv_close((uv_handle_t *)&e->listener, NULL);
    unlink(e->cfg.socket_path);
    e->listening = 0;
  }
  for (client *c = e->clients; c; c = c->next) proto_channel_close(&c->ch);
}
