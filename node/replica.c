/*
 * Facet replication, the supervisor's side (with --fleet): the worker
 * processes' link to the fleet for their facets (docs/fleet.md, "Facets").
 *
 * A worker process has no network, and a commit must reach the fleet while
 * SQLite holds the facet's write lock (facets.h, facet_options.publish), so
 * its question cannot wait for an event loop: it connects to DATA/replica/
 * replica.sock and asks in plain blocking frames (proto.h's framing,
 * PROTO_FACET_*), and each connection is served by a thread of its own here,
 * which blocks on the fleet (fleet.h) while the worker blocks on it. Nothing
 * of this is on the supervisor's loop: a thread that answers touches only
 * the fleet (thread-safe) and the facet files of a tenant being taken over,
 * which no worker process has open then.
 *
 * A dedicated process may ask only for its own tenant (it is bound to it by
 * its pid, as at the egress); a shared process serves every tenant anyway.
 */
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "base.h"
#include "facets.h"
#include "fleet.h"
#include "jail.h"
#include "node.h"
#include "proto.h"

#define BACKLOG 64
#define MAX_BOUND 256 /* dedicated processes bound at once (max_dedicated is far lower) */

typedef struct forward_path {
  struct forward_path *next;
  char *node;
  char *path; /* the supervisor's relay to that node's ingress (forward.c) */
} forward_path;

typedef struct bound_pid {
  int pid;
  char tenant[PROTO_RUNNING_NAME_MAX];
} bound_pid;

struct node_replica {
  fleet *link;
  char *data_dir;
  char *socket_path;
  int listen_fd;
  pthread_t accept_thread;
  int accept_started;
  pthread_mutex_t mu;
  pthread_cond_t gone; /* a connection's thread ended */
  bound_pid bound[MAX_BOUND];
  struct conn *conns;  /* open connections, each served by a thread */
  forward_path *forwards;
  int stopping;
  int chown_to_user;   /* the workers run as another user (--user): files made here are theirs */
  uid_t uid;
  gid_t gid;
};

typedef struct conn {
  struct conn *next;
  struct node_replica *r;
  int fd;
  int pid;
} conn;

/* ---- dedicated processes ---- */

void node_replica_bind(node *n, int pid, const char *tenant) {
  struct node_replica *r = n->replica;
  if (r == NULL) return;
  pthread_mutex_lock(&r->mu);
  int free_slot = -1;
  for (int i = 0; i < MAX_BOUND; i++) {
    if (r->bound[i].pid == pid || (free_slot < 0 && r->bound[i].pid == 0)) {
      free_slot = i;
      if (r->bound[i].pid == pid) break;
    }
  }
  if (free_slot >= 0) {
    r->bound[free_slot].pid = tenant ? pid : 0;
    snprintf(r->bound[free_slot].tenant, sizeof r->bound[free_slot].tenant, "%s",
             tenant ? tenant : "");
  }
  pthread_mutex_unlock(&r->mu);
}

/* Whether the process may act for the tenant. */
static int allowed(struct node_replica *r, int pid, const char *tenant) {
  int ok = 1;
  pthread_mutex_lock(&r->mu);
  for (int i = 0; i < MAX_BOUND; i++)
    if (r->bound[i].pid == pid) ok = strcmp(r->bound[i].tenant, tenant) == 0;
  pthread_mutex_unlock(&r->mu);
  return ok;
}

/* ---- where requests for other nodes' tenants go ---- */

void node_replica_set_forward(node *n, const char *node_name, const char *path) {
  struct node_replica *r = n->replica;
  if (r == NULL) return;
  pthread_mutex_lock(&r->mu);
  forward_path *f = r->forwards;
  while (f && strcmp(f->node, node_name) != 0) f = f->next;
  if (f == NULL) {
    f = xcalloc(1, sizeof *f);
    f->node = xstrdup(node_name);
    f->next = r->forwards;
    r->forwards = f;
  }
  free(f->path);
  f->path = xstrdup(path);
  pthread_mutex_unlock(&r->mu);
}

/* The relay's socket to the node, copied into out; 0 when there is none. */
static int forward_path_of(struct node_replica *r, const char *node_name, char *out, size_t len) {
  int found = 0;
  pthread_mutex_lock(&r->mu);
  for (forward_path *f = r->forwards; f; f = f->next)
    if (strcmp(f->node, node_name) == 0 && strlen(f->path) < len) {
      memcpy(out, f->path, strlen(f->path) + 1);
      found = 1;
    }
  pthread_mutex_unlock(&r->mu);
  return found;
}

/* ---- taking a tenant over: its copy here, rebuilt from the fleet ---- */

static int hand_over(struct node_replica *r, const char *path, char *why, size_t why_len) {
  if (!r->chown_to_user || chown(path, r->uid, r->gid) == 0) return 0;
  snprintf(why, why_len, "cannot give %s to the workers' user: %s", path, strerror(errno));
  return -1;
}

static void remove_facet_files(const char *path) {
  static const char *const suffixes[] = {"", "-wal", "-shm", "-journal"};
  for (size_t i = 0; i < ARRAY_SIZE(suffixes); i++) {
    char *p = xasprintf("%s%s", path, suffixes[i]);
    if (unlink(p) != 0 && errno != ENOENT) log_warn("facets: cannot remove %s: %s", p, strerror(errno));
    free(p);
  }
}

static int begin_copy(void *arg, const char *tenant) {
  struct node_replica *r = arg;
  char *own = facet_path(r->data_dir, tenant, NULL);
  if (own == NULL) return -1;
  remove_facet_files(own);
  free(own);
  char *dir = xasprintf("%s/facets/%s", r->data_dir, tenant);
  DIR *d = opendir(dir);
  if (d != NULL) {
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
      if (e->d_name[0] == '.') continue;
      char *p = xasprintf("%s/%s", dir, e->d_name);
      if (unlink(p) != 0) log_warn("facets: cannot remove %s: %s", p, strerror(errno));
      free(p);
    }
    closedir(d);
  }
  free(dir);
  return 0;
}

/* The file of one of the tenant's facets here, its directory made (a
 * child's) and handed to the workers' user; NULL with why. */
static char *copy_path(struct node_replica *r, const char *tenant, const char *facet_id,
                       char *why, size_t why_len) {
  if (facet_id != NULL && !facet_id_valid(facet_id, strlen(facet_id))) {
    snprintf(why, why_len, "the fleet names an invalid facet id");
    return NULL;
  }
  if (facet_id != NULL) {
    char *dir = xasprintf("%s/facets/%s", r->data_dir, tenant);
    int made = mkdir(dir, 0700) == 0 || errno == EEXIST;
    if (!made) snprintf(why, why_len, "cannot make the facet directory: %s", strerror(errno));
    made = made && hand_over(r, dir, why, why_len) == 0;
    free(dir);
    if (!made) return NULL;
  }
  char *path = facet_path(r->data_dir, tenant, facet_id);
  if (path == NULL) snprintf(why, why_len, "the fleet names an invalid facet");
  return path;
}

static int apply_record(void *arg, const char *tenant, const char *facet_id, const void *rec,
                        size_t len, char *why, size_t why_len) {
  struct node_replica *r = arg;
  char *path = copy_path(r, tenant, facet_id, why, why_len);
  if (path == NULL) return -1;
  char *err = NULL;
  int rc = facet_record_apply(path, rec, len, &err);
  if (rc != 0) snprintf(why, why_len, "facet %s: %s", path, err ? err : strerror(-rc));
  else rc = hand_over(r, path, why, why_len);
  free(err);
  free(path);
  return rc;
}

/* A facet file from a snapshot, written whole before it takes the name. */
static int restore_file(void *arg, const char *tenant, const char *facet_id, const void *data,
                        size_t len, char *why, size_t why_len) {
  struct node_replica *r = arg;
  char *path = copy_path(r, tenant, facet_id, why, why_len);
  if (path == NULL) return -1;
  char *tmp = xasprintf("%s.restore", path);
  FILE *f = fopen(tmp, "wbx");
  int ok = f != NULL && fwrite(data, 1, len, f) == len;
  ok = f != NULL && fflush(f) == 0 && fsync(fileno(f)) == 0 && ok;
  if (f != NULL && fclose(f) != 0) ok = 0;
  ok = ok && rename(tmp, path) == 0;
  if (!ok) {
    snprintf(why, why_len, "cannot write %s: %s", path, strerror(errno));
    unlink(tmp);
  }
  free(tmp);
  int rc = ok ? hand_over(r, path, why, why_len) : -1;
  free(path);
  return rc;
}

/* One facet's consistent copy (SQLite's backup), read back for emit(). */
static int dump_one(struct node_replica *r, const char *tenant, const char *facet_id,
                    fleet_emit_fn emit, void *ctx, char *why, size_t why_len) {
  char *tmp = xasprintf("%s/replica/snapshot-XXXXXX", r->data_dir);
  int fd = mkstemp(tmp);
  if (fd < 0) {
    snprintf(why, why_len, "cannot make a file for the snapshot: %s", strerror(errno));
    free(tmp);
    return -1;
  }
  close(fd);
  char *err = NULL;
  int rc = facet_backup_to(r->data_dir, tenant, facet_id, tmp, &err);
  if (rc == -ENOENT) rc = 0; /* gone meanwhile: nothing to keep */
  else if (rc != 0) snprintf(why, why_len, "backup of a facet of %s: %s", tenant, err ? err : strerror(-rc));
  else {
    size_t len = 0;
    char *data = NULL;
    if (node_read_file(tmp, &data, &len) != 0) data = NULL;
    rc = data != NULL ? emit(ctx, facet_id, data, len) : -1;
    if (data == NULL) snprintf(why, why_len, "cannot read the snapshot of a facet of %s", tenant);
    free(data);
  }
  free(err);
  unlink(tmp);
  free(tmp);
  return rc;
}

static int dump_tenant(void *arg, const char *tenant, fleet_emit_fn emit, void *ctx, char *why,
                       size_t why_len) {
  struct node_replica *r = arg;
  char *own = facet_path(r->data_dir, tenant, NULL);
  struct stat st;
  int rc = own != NULL && stat(own, &st) == 0 ? dump_one(r, tenant, NULL, emit, ctx, why, why_len) : 0;
  free(own);
  char *dir = xasprintf("%s/facets/%s", r->data_dir, tenant);
  DIR *d = rc == 0 ? opendir(dir) : NULL;
  struct dirent *e;
  while (d != NULL && rc == 0 && (e = readdir(d)) != NULL) {
    size_t n = strlen(e->d_name);
    if (n <= 7 || strcmp(e->d_name + n - 7, ".sqlite") != 0) continue;
    char id[FACET_ID_MAX + 1];
    if (n - 7 > FACET_ID_MAX) continue;
    memcpy(id, e->d_name, n - 7);
    id[n - 7] = '\0';
    if (facet_id_valid(id, n - 7)) rc = dump_one(r, tenant, id, emit, ctx, why, why_len);
  }
  if (d) closedir(d);
  free(dir);
  return rc;
}

/* ---- one worker process's connection ---- */

static int write_all(int fd, const void *data, size_t len) {
  const uint8_t *p = data;
  while (len > 0) {
    ssize_t w = send(fd, p, len, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    p += w;
    len -= (size_t)w;
  }
  return 0;
}

/* The answer: '0' (yes), '1' and why not, '2' and where to forward the
 * request, '3' and why to wait (proto.h). */
static int answer_as(conn *c, uint32_t id, char status, const char *text) {
  size_t wl = status == '0' ? 0 : strlen(text);
  uint8_t head[PROTO_HEADER_SIZE];
  if (proto_encode_header(head, PROTO_FACET_ANSWER, id, (uint32_t)(1 + wl)) != 0) return -1;
  if (write_all(c->fd, head, sizeof head) != 0 || write_all(c->fd, &status, 1) != 0) return -1;
  return wl ? write_all(c->fd, text, wl) : 0;
}

static int answer(conn *c, uint32_t id, int ok, const char *why) {
  return answer_as(c, id, ok ? '0' : '1', why);
}

/* PROTO_FACET_ACQUIRE: the payload is the tenant's name. */
static int on_acquire(conn *c, const proto_frame *fr) {
  char tenant[PROTO_RUNNING_NAME_MAX];
  if (fr->length == 0 || fr->length >= sizeof tenant) return answer(c, fr->id, 0, "bad request");
  memcpy(tenant, fr->payload, fr->length);
  tenant[fr->length] = '\0';
  if (!allowed(c->r, c->pid, tenant))
    return answer(c, fr->id, 0, "this process does not serve that tenant");
  fleet_replay rp = {.begin = begin_copy, .record = apply_record, .restore = restore_file,
                     .dump = dump_tenant, .arg = c->r};
  char owner[128], why[512];
  int rc = fleet_facet_acquire(c->r->link, tenant, &rp, owner, sizeof owner, why, sizeof why);
  char path[256];
  if (rc == FLEET_EOWNED && owner[0] && forward_path_of(c->r, owner, path, sizeof path))
    return answer_as(c, fr->id, '2', path);
  /* An owner whose heartbeat has not been seen here yet (it just joined,
   * or this node did): its address comes with the next one. */
  if (rc == FLEET_EOWNED && owner[0]) return answer_as(c, fr->id, '3', why);
  if (rc == FLEET_EHANDOVER) return answer_as(c, fr->id, '3', why);
  return answer(c, fr->id, rc == 0, why);
}

/* PROTO_FACET_PUBLISH: tenant, NUL, facet id (empty: the tenant's own), NUL, record. */
static int on_publish(conn *c, const proto_frame *fr) {
  const char *p = (const char *)fr->payload, *end = p + fr->length;
  const char *t_end = memchr(p, '\0', fr->length);
  const char *i_end = t_end ? memchr(t_end + 1, '\0', (size_t)(end - t_end - 1)) : NULL;
  if (i_end == NULL || t_end == p) return answer(c, fr->id, 0, "bad request");
  const char *tenant = p, *id = t_end + 1;
  if (!allowed(c->r, c->pid, tenant))
    return answer(c, fr->id, 0, "this process does not serve that tenant");
  char why[512];
  int rc = fleet_facet_publish(c->r->link, tenant, *id ? id : NULL, i_end + 1,
                               (size_t)(end - i_end - 1), why, sizeof why);
  return answer(c, fr->id, rc == 0, why);
}

static void *conn_main(void *arg) {
  conn *c = arg;
  proto_decoder dec;
  proto_decoder_init(&dec, PROTO_MAX_PAYLOAD);
  uint8_t buf[65536];
  for (;;) {
    proto_frame fr;
    int got = proto_decoder_next(&dec, &fr);
    if (got < 0) break;
    if (got == 1) {
      int rc = fr.type == PROTO_FACET_ACQUIRE   ? on_acquire(c, &fr)
               : fr.type == PROTO_FACET_PUBLISH ? on_publish(c, &fr)
                                                : answer(c, fr.id, 0, "unknown request");
      if (rc != 0) break;
      continue;
    }
    ssize_t n = recv(c->fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || proto_decoder_feed(&dec, buf, (size_t)n) != 0) break;
  }
  proto_decoder_free(&dec);
  struct node_replica *r = c->r;
  pthread_mutex_lock(&r->mu);
  for (conn **p = &r->conns; *p; p = &(*p)->next)
    if (*p == c) {
      *p = c->next;
      break;
    }
  close(c->fd);
  free(c);
  pthread_cond_broadcast(&r->gone);
  pthread_mutex_unlock(&r->mu);
  return NULL;
}

static void *accept_main(void *arg) {
  struct node_replica *r = arg;
  for (;;) {
    struct pollfd pfd = {.fd = r->listen_fd, .events = POLLIN};
    int ready = poll(&pfd, 1, 250);
    pthread_mutex_lock(&r->mu);
    int stopping = r->stopping;
    pthread_mutex_unlock(&r->mu);
    if (stopping) break;
    if (ready <= 0) continue;
    int fd = accept4(r->listen_fd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0) continue;
    struct ucred cred;
    socklen_t len = sizeof cred;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
      close(fd);
      continue;
    }
    conn *c = xcalloc(1, sizeof *c);
    c->r = r;
    c->fd = fd;
    c->pid = cred.pid;
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_mutex_lock(&r->mu);
    if (pthread_create(&t, &attr, conn_main, c) != 0) {
      close(fd);
      free(c);
    } else {
      c->next = r->conns;
      r->conns = c;
    }
    pthread_mutex_unlock(&r->mu);
    pthread_attr_destroy(&attr);
  }
  return NULL;
}

/* ---- the socket ---- */

static int listen_at(struct node_replica *r, char **err) {
  char *dir = xasprintf("%s/replica", r->data_dir);
  if (mkdir(dir, 0711) != 0 && errno != EEXIST) {
    *err = xasprintf("%s: %s", dir, strerror(errno));
    free(dir);
    return -errno;
  }
  r->socket_path = xasprintf("%s/replica.sock", dir);
  free(dir);
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  if (strlen(r->socket_path) >= sizeof addr.sun_path) {
    *err = xasprintf("replication socket %s: path too long", r->socket_path);
    return -ENAMETOOLONG;
  }
  memcpy(addr.sun_path, r->socket_path, strlen(r->socket_path) + 1);
  r->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (r->listen_fd < 0) {
    *err = xasprintf("socket: %s", strerror(errno));
    return -errno;
  }
  unlink(r->socket_path); /* left by an earlier run */
  /* Any user may connect (worker processes may run as another one): only
   * they get through the data directory. */
  if (bind(r->listen_fd, (struct sockaddr *)&addr, sizeof addr) != 0 ||
      chmod(r->socket_path, 0666) != 0 || listen(r->listen_fd, BACKLOG) != 0) {
    int rc = -errno;
    *err = xasprintf("replication socket %s: %s", r->socket_path, strerror(errno));
    return rc;
  }
  return 0;
}

static void replica_free(struct node_replica *r) {
  if (r->listen_fd >= 0) close(r->listen_fd);
  if (r->socket_path) unlink(r->socket_path);
  while (r->forwards) {
    forward_path *f = r->forwards;
    r->forwards = f->next;
    free(f->node);
    free(f->path);
    free(f);
  }
  pthread_mutex_destroy(&r->mu);
  pthread_cond_destroy(&r->gone);
  free(r->socket_path);
  free(r->data_dir);
  free(r);
}

int node_replica_start(node *n, fleet *link, char **err) {
  struct node_replica *r = xcalloc(1, sizeof *r);
  r->link = link;
  r->data_dir = xstrdup(n->data_dir);
  r->listen_fd = -1;
  if (n->cfg.user && jail_parse_user(n->cfg.user, &r->uid, &r->gid) == 0 && geteuid() == 0)
    r->chown_to_user = 1;
  if (pthread_mutex_init(&r->mu, NULL) != 0 || pthread_cond_init(&r->gone, NULL) != 0) abort();
  int rc = listen_at(r, err);
  if (rc == 0 && pthread_create(&r->accept_thread, NULL, accept_main, r) != 0) {
    *err = xasprintf("cannot start the replication thread");
    rc = -EAGAIN;
  }
  if (rc != 0) {
    replica_free(r);
    return rc;
  }
  r->accept_started = 1;
  n->replica = r;
  return 0;
}

/* Before the fleet closes: a connection's thread may be inside a fleet
 * call (at most its publish deadline), and is waited for. */
void node_replica_stop(node *n) {
  struct node_replica *r = n->replica;
  if (r == NULL) return;
  pthread_mutex_lock(&r->mu);
  r->stopping = 1;
  pthread_mutex_unlock(&r->mu);
  if (r->accept_started) pthread_join(r->accept_thread, NULL);
  pthread_mutex_lock(&r->mu);
  for (conn *c = r->conns; c; c = c->next) shutdown(c->fd, SHUT_RDWR);
  while (r->conns) pthread_cond_wait(&r->gone, &r->mu);
  pthread_mutex_unlock(&r->mu);
  n->replica = NULL;
  replica_free(r);
}

const char *node_replica_socket(const node *n) {
  return n->replica ? n->replica->socket_path : NULL;
}
