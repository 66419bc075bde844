/*
 * The egress process seen from the supervisor: its command line and its
 * frames (the process itself is a node_child, child.c), pushing the
 * allow-lists and the secrets' grants to it (stored in node.db by db.c: all
 * of them whenever it starts, one worker's or one secret's whenever they
 * change), and the questions about secrets egress_routes.c asks it (its
 * answers go back to a callback). A secret's value only passes through here,
 * in memory, on its way from the control API to the egress process: it is
 * never stored, logged or sent anywhere else. In a fleet what comes back and
 * is stored is the value sealed with the fleet key, which this process
 * cannot open.
 *
 * Readiness: the egress says HELLO; it is sent every policy at once (with a
 * request id) and answers when it listens for worker processes. Only then
 * does it count as ready (node_egress_ready), so no fetch can be judged
 * against a half-filled table.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "egress.h"
#include "node.h"

#define REPLY_TIMEOUT_MS 10000


/* A question waiting for the egress process to answer. */
typedef struct pending {
  struct node_egress *eg;
  uint32_t id;
  node_egress_cb cb;
  void *data;
  uv_timer_t timer;
  struct pending *next;
} pending;

typedef struct node_egress {
  node *n;
  char *path;             /* edgenode-egress next to this executable */
  char *socket_path;      /* DATA/egress/egress.sock */
  node_child child;        /* the process */
  uint32_t sync_id;       /* the all-policies message waiting for its answer */
  int stopping;
  pending *pending;
  unsigned jail_on, jail_off; /* its HELLO: sandbox layers on / refused (jail/) */
} node_egress;

static int spawn_egress(node_egress *eg);
static const node_child_ops egress_ops;

/* Calls back with an error. */
static void ask_failed(node *n, node_egress_cb cb, void *data, int status, const char *message) {
  json_t *body = json_pack("{s:s}", "error", message);
  cb(n, data, status, body);
  json_decref(body);
}

/* ---- talking to the egress ---- */

static int channel_usable(const node_egress *eg) { return node_child_usable(&eg->child); }

static int send_json(node_egress *eg, uint8_t type, uint32_t id, json_t *body) {
  return node_child_send_json(&eg->child, type, id, body);
}

/* Whether a change must be sent to the egress: it is up, or it has been
 * sent the full set (on_hello) and not answered yet; a change made after
 * that set was read, sent after it on the same channel, is applied after
 * it. Before the set, the set holds the change. */
static int takes_updates(const node_egress *eg) {
  return eg != NULL && (eg->child.state == NODE_PROC_READY || eg->sync_id != 0);
}

/* Sends one worker's rules (null: none) to the egress. */
static void push_policy(node_egress *eg, const char *name, json_t *rules) {
  if (!takes_updates(eg)) return;
  json_t *body = json_pack("{s:{s:O}}", "workers", name, rules ? rules : json_null());
  if (body && send_json(eg, PROTO_EGRESS_POLICY, 0, body) != 0)
    log_warn("could not send the egress rules of %s to the egress process", name);
  json_decref(body);
}

static void pending_closed(uv_handle_t *h) { free(container_of((uv_timer_t *)h, pending, timer)); }

static void pending_finish(pending *p) {
  for (pending **pp = &p->eg->pending; *pp; pp = &(*pp)->next) {
    if (*pp == p) {
      *pp = p->next;
      break;
    }
  }
  uv_timer_stop(&p->timer);
  uv_close((uv_handle_t *)&p->timer, pending_closed);
}

static void pending_fail_all(node_egress *eg, const char *why) {
  while (eg->pending) {
    pending *p = eg->pending;
    pending_finish(p);
    ask_failed(eg->n, p->cb, p->data, 503, why);
  }
}

static void on_pending_timeout(uv_timer_t *t) {
  pending *p = container_of(t, pending, timer);
  pending_finish(p);
  ask_failed(p->eg->n, p->cb, p->data, 503, "the egress process did not answer in time; try again");
}

/* Asks the egress; the answer arrives in on_reply. */
void node_egress_ask_secret(node *n, node_egress_ask kind, json_t *body, node_egress_cb cb,
                            void *data) {
  node_egress *eg = n->egress;
  static const uint8_t types[] = {
      [NODE_EGRESS_SECRET_PUT] = PROTO_SECRET_PUT,
      [NODE_EGRESS_SECRET_LIST] = PROTO_SECRET_LIST,
      [NODE_EGRESS_SECRET_DELETE] = PROTO_SECRET_DELETE,
      [NODE_EGRESS_POLICY_SET] = PROTO_EGRESS_POLICY,
  };
  if (eg == NULL || eg->child.state != NODE_PROC_READY || !channel_usable(eg)) {
    ask_failed(n, cb, data, 503,
               eg == NULL ? "this node has no egress process (edgenode-egress was not found "
                            "next to edgenode)"
                          : "the egress process is not running; try again shortly");
    return;
  }
  uint32_t id = proto_channel_request_id(&eg->child.channel);
  if (send_json(eg, types[kind], id, body) != 0) {
    ask_failed(n, cb, data, 503, "the egress process is not reachable; try again shortly");
    return;
  }
  pending *p = xcalloc(1, sizeof *p);
  p->eg = eg;
  p->id = id;
  p->cb = cb;
  p->data = data;
  uv_timer_init(eg->n->loop, &p->timer);
  uv_timer_start(&p->timer, on_pending_timeout, REPLY_TIMEOUT_MS, 0);
  p->next = eg->pending;
  eg->pending = p;
}

static void on_reply(node_egress *eg, const proto_frame *f, json_t *body) {
  pending *p = eg->pending;
  while (p && p->id != f->id) p = p->next;
  if (p == NULL) return;
  pending_finish(p);
  if (f->type == PROTO_ERROR || body == NULL) {
    json_int_t status = json_integer_value(json_object_get(body, "status"));
    const char *msg = json_string_value(json_object_get(body, "error"));
    ask_failed(eg->n, p->cb, p->data, status >= 400 && status < 600 ? (int)status : 500,
               msg ? msg : "the egress process failed");
  } else {
    p->cb(eg->n, p->data, 0, body);
  }
}

/* ---- the process ---- */

/* Every dedicated process running now, by pid: what a (re)started egress
 * must know before any of them fetches. */
static json_t *bindings(node *n) {
  json_t *out = json_object();
  for (node_proc *p = n->dedicated; p != NULL; p = p->next) {
    if (p->child.pid <= 0 || p->tenant == NULL) continue;
    char pid[16];
    snprintf(pid, sizeof pid, "%d", p->child.pid);
    json_object_set_new(out, pid, json_string(p->tenant));
  }
  return out;
}

static void on_hello(node_egress *eg, json_t *body) {
  node_sandbox_parse(json_object_get(body, "jail"), &eg->jail_on, &eg->jail_off);
  if (eg->child.state != NODE_PROC_STARTING) return;
  eg->sync_id = proto_channel_request_id(&eg->child.channel);
  json_t *all = node_db_egress_all(eg->n->db);
  json_t *grants = json_object(), *sealed = json_object();
  json_t *secrets = node_db_secret_list(eg->n->db);
  size_t i;
  json_t *row;
  json_array_foreach(secrets, i, row) {
    const char *name = json_string_value(json_object_get(row, "name"));
    json_object_set(grants, name, json_object_get(row, "workers"));
    if (json_object_get(row, "sealed")) json_object_set(sealed, name, json_object_get(row, "sealed"));
  }
  json_decref(secrets);
  json_t *msg = json_pack("{s:o, s:o, s:o, s:o, s:b, s:b}", "workers", all, "grants", grants,
                          "fleet_secrets", sealed, "processes", bindings(eg->n), "fleet",
                          eg->n->fleet != NULL, "replace", 1);
  if (send_json(eg, PROTO_EGRESS_POLICY, eg->sync_id, msg) != 0)
    log_warn("could not send the egress rules to the egress process");
  json_decref(msg);
}

static void on_synced(node_egress *eg) {
  eg->sync_id = 0;
  eg->child.state = NODE_PROC_READY;
  char extra[64];
  snprintf(extra, sizeof extra, "{\"pid\":%d}", eg->child.pid);
  log_write(LOG_INFO, NULL, NULL, extra, "egress process ready");
  eg->n->procs_changed(eg->n);
}

static void on_frame(node_child *c, const proto_frame *f) {
  node_egress *eg = c->data;
  json_t *body = f->length ? json_loadb((const char *)f->payload, f->length, 0, NULL) : NULL;
  switch (f->type) {
    case PROTO_HELLO: on_hello(eg, body); break;
    case PROTO_EGRESS_REPLY:
    case PROTO_ERROR:
      if (f->id != 0 && f->id == eg->sync_id) on_synced(eg);
      else on_reply(eg, f, body);
      break;
    case PROTO_PING: proto_channel_send(&c->channel, PROTO_PONG, f->id, NULL, 0); break;
    default: log_debug("egress: unexpected %s frame", proto_type_name(f->type));
  }
  json_decref(body);
}

static void on_channel_closed(node_child *c, int reason) {
  node_egress *eg = c->data;
  if (reason != 0 && reason != UV_EOF) node_child_kill(c, SIGKILL);
  pending_fail_all(eg, "the egress process went away; try again shortly");
}

static void on_closed(node_child *c) { (void)c; }

static void on_exited(node_child *c, int64_t status, int sig, uint64_t lived_ms) {
  node_egress *eg = c->data;
  pending_fail_all(eg, "the egress process went away; try again shortly");
  char extra[256];
  if (eg->stopping) {
    c->state = NODE_PROC_STOPPED;
    snprintf(extra, sizeof extra, "{\"pid\":%d,\"exit_status\":%lld,\"signal\":%d}", c->pid,
             (long long)status, sig);
    log_write(status == 0 && sig == 0 ? LOG_INFO : LOG_WARN, NULL, NULL, extra, "egress exited");
    node_child_close(c);
    return;
  }
  uint64_t delay = node_child_restart(c, lived_ms);
  snprintf(extra, sizeof extra,
           "{\"pid\":%d,\"exit_status\":%lld,\"signal\":%d,\"restarts\":%u,\"delay_ms\":%llu,"
           "\"uptime_ms\":%llu}",
           c->pid, (long long)status, sig, c->restarts, (unsigned long long)delay,
           (unsigned long long)lived_ms);
  log_write(LOG_WARN, NULL, NULL, extra, "egress exited: restarting");
  eg->n->procs_changed(eg->n);
}

static int spawn_child(node_child *c) {
  node_egress *eg = c->data;
  return eg->stopping ? UV_ECANCELED : spawn_egress(eg);
}

static const node_child_ops egress_ops = {
    .spawn = spawn_child,
    .frame = on_frame,
    .channel_closed = on_channel_closed,
    .exited = on_exited,
    .closed = on_closed,
};

static int spawn_egress(node_egress *eg) {
  node *n = eg->n;
  size_t max = 16 + 2 * (n->cfg.n_egress_allow_cidr + n->cfg.n_ca_files + n->cfg.n_fleet_keys) +
               NODE_SANDBOX_ARGS;
  char **args = xcalloc(max, sizeof *args);
  size_t a = 0;
  args[a++] = "edgenode-egress";
  args[a++] = "--ipc-fd";
  args[a++] = "3";
  args[a++] = "--data";
  args[a++] = n->data_dir;
  args[a++] = "--socket";
  args[a++] = eg->socket_path;
  args[a++] = "--log-level";
  args[a++] = (char *)node_log_level_name(n->cfg.log_level);
  for (size_t i = 0; i < n->cfg.n_egress_allow_cidr; i++) {
    args[a++] = "--allow-cidr";
    args[a++] = n->cfg.egress_allow_cidr[i];
  }
  for (size_t i = 0; i < n->cfg.n_ca_files; i++) {
    args[a++] = "--ca-file";
    args[a++] = n->cfg.ca_files[i];
  }
  /* The supervisor never opens these: only the egress reads the fleet key. */
  for (size_t i = 0; i < n->cfg.n_fleet_keys; i++) {
    args[a++] = "--fleet-key";
    args[a++] = n->cfg.fleet_keys[i];
  }
  /* The node's own addresses: no rule lets a worker fetch its node. */
  args[a++] = "--own-addr";
  args[a++] = n->listen_addr;
  if (n->control_addr[0]) {
    args[a++] = "--own-addr";
    args[a++] = n->control_addr;
  }
  a += node_sandbox_args(n, args + a); /* jail/ */
  args[a] = NULL;
  eg->sync_id = 0;
  node_child_cmd cmd = {.file = eg->path, .args = args, .label = "egress"};
  int rc = node_child_spawn(&eg->child, &cmd);
  free(args);
  if (rc != 0) return rc;
  char extra[64];
  snprintf(extra, sizeof extra, "{\"pid\":%d}", eg->child.pid);
  log_write(LOG_INFO, NULL, NULL, extra, "egress spawned");
  return 0;
}

static char *egress_exe_path(void) {
  char exe[4096];
  size_t len = sizeof exe;
  if (uv_exepath(exe, &len) != 0) return xstrdup("edgenode-egress");
  char *slash = strrchr(exe, '/');
  if (slash) *slash = '\0';
  return xasprintf("%s/edgenode-egress", slash ? exe : ".");
}

int node_egress_start(node *n, char **err) {
  int rc = node_sandbox_prepare(n, err); /* jail/: before the first process is spawned */
  if (rc != 0) return rc;
  node_egress *eg = xcalloc(1, sizeof *eg);
  eg->n = n;
  eg->path = egress_exe_path();
  n->egress = eg;
  if (access(eg->path, X_OK) != 0) {
    /* A tree built without the egress still serves; fetch() fails clearly. */
    log_warn("%s: %s: fetch() is unavailable on this node", eg->path, strerror(errno));
    return 0;
  }
  /* A CA file the egress cannot read would keep it (and the node) from ever
   * becoming ready: say so now, once. */
  for (size_t i = 0; i < n->cfg.n_ca_files; i++) {
    if (access(n->cfg.ca_files[i], R_OK) != 0) {
      int e = errno;
      *err = xasprintf("--ca-file %s: %s", n->cfg.ca_files[i], strerror(e));
      return -e;
    }
  }
  /* The same for a fleet key, checked without reading it (the egress does). */
  for (size_t i = 0; i < n->cfg.n_fleet_keys; i++) {
    struct stat st;
    const char *f = n->cfg.fleet_keys[i];
    if (stat(f, &st) != 0 || access(f, R_OK) != 0) {
      int e = errno;
      *err = xasprintf("--fleet-key %s: %s", f, strerror(e));
      return -e;
    }
    if (!S_ISREG(st.st_mode) || (st.st_mode & 077)) {
      *err = xasprintf("--fleet-key %s: must be a file not readable by group or others "
                       "(chmod 0600)", f);
      return -EPERM;
    }
    /* 32 raw bytes, or 64 hex digits with an optional line end. */
    if (st.st_size != 32 && (st.st_size < 64 || st.st_size > 66)) {
      *err = xasprintf("--fleet-key %s: must hold 32 bytes, raw or as 64 hex digits "
                       "(head -c 32 /dev/urandom > FILE)", f);
      return -EINVAL;
    }
  }
  char *dir = xasprintf("%s/egress", n->data_dir);
  if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
    int e = errno;
    *err = xasprintf("%s: %s", dir, strerror(e));
    free(dir);
    return -e;
  }
  eg->socket_path = xasprintf("%s/egress.sock", dir);
  free(dir);
  node_child_init(&eg->child, n->loop, &egress_ops, eg);
  spawn_egress(eg);
  return 0;
}

const char *node_egress_socket(const node *n) {
  return n->egress ? n->egress->socket_path : NULL;
}

json_t *node_egress_sandbox_json(const node *n) {
  const node_egress *eg = n->egress;
  if (eg == NULL || eg->socket_path == NULL) return NULL;
  return node_sandbox_json(eg->jail_on, eg->jail_off);
}

int node_egress_ready(const node *n) {
  const node_egress *eg = n->egress;
  return eg == NULL || eg->socket_path == NULL || eg->child.state == NODE_PROC_READY;
}

void node_egress_stop(node *n) {
  node_egress *eg = n->egress;
  if (eg == NULL || eg->socket_path == NULL || eg->stopping) return;
  eg->stopping = 1;
  node_child_hold(&eg->child);
  if (eg->child.alive) {
    node_child_kill(&eg->child, SIGTERM);
  } else {
    eg->child.state = NODE_PROC_STOPPED;
    node_child_close(&eg->child);
  }
}

void node_egress_kill(node *n) {
  node_egress *eg = n->egress;
  if (eg == NULL || !eg->child.alive) return;
  eg->stopping = 1;
  node_child_kill(&eg->child, SIGKILL);
}

void node_egress_push(node *n, const char *name, json_t *rules) {
  push_policy(n->egress, name, rules);
}

void node_egress_bind(node *n, int pid, const char *tenant) {
  node_egress *eg = n->egress;
  /* Not running yet: it gets every binding when it starts (on_hello). */
  if (pid <= 0 || !takes_updates(eg)) return;
  char key[16];
  snprintf(key, sizeof key, "%d", pid);
  json_t *body = json_pack("{s:{s:s?}}", "processes", key, tenant);
  if (body && send_json(eg, PROTO_EGRESS_POLICY, 0, body) != 0)
    log_warn("could not tell the egress process which tenant process %d serves", pid);
  json_decref(body);
}

void node_egress_push_secret(node *n, const char *name, json_t *workers, json_t *sealed) {
  node_egress *eg = n->egress;
  if (!takes_updates(eg)) return;
  json_t *body = json_pack("{s:{s:O?}}", "grants", name, workers);
  if (n->fleet) json_object_set_new(body, "fleet_secrets", json_pack("{s:O?}", name, sealed));
  if (body && send_json(eg, PROTO_EGRESS_POLICY, 0, body) != 0)
    log_warn("could not send the grants of secret %s to the egress process", name);
  json_decref(body);
}
