/*
 * The egress process seen from the supervisor: spawning and restarting it,
 * the allow-lists (a table of node.db, pushed to the egress whenever it
 * starts and whenever they change) and the control API routes for them and
 * for secrets. A secret's value only passes through here, in memory, on its
 * way from the control API to the egress process: it is never stored,
 * logged or sent anywhere else.
 *
 * Readiness: the egress says HELLO; it is sent every policy at once (with a
 * request id) and answers when it listens for worker processes. Only then
 * does it count as ready (node_egress_ready), so no fetch can be judged
 * against a half-filled table.
 */
#include <errno.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "egress.h"
#include "node.h"

#define REPLY_TIMEOUT_MS 10000

typedef enum pending_kind { PENDING_PUT, PENDING_LIST, PENDING_DELETE } pending_kind;

/* A control request waiting for the egress process to answer. */
typedef struct pending {
  struct node_egress *eg;
  uint32_t id;
  pending_kind kind;
  http_request *req;
  uv_timer_t timer;
  struct pending *next;
} pending;

typedef struct node_egress {
  node *n;
  char *path;             /* edgenode-egress next to this executable */
  char *socket_path;      /* DATA/egress/egress.sock */
  sqlite3 *db;
  node_proc_state state;
  uv_process_t process;
  proto_channel channel;
  int process_open, channel_open, channel_started, alive, pid;
  unsigned restarts;
  uint64_t started_mono_ns;
  uint64_t backoff_ms;
  uv_timer_t restart_timer;
  uint32_t sync_id;       /* the all-policies message waiting for its answer */
  int stopping;
  pending *pending;
  unsigned jail_on, jail_off; /* its HELLO: sandbox layers on / refused (jail/) */
} node_egress;

static int spawn_egress(node_egress *eg);

/* ---- responses ---- */

/* As node_respond_json, taking over the reference to body. */
static void respond(http_request *req, int status, json_t *body, const char *allow) {
  node_respond_json(req, status, body, allow);
  json_decref(body);
}

static void respond_error(http_request *req, int status, const char *message) {
  respond(req, status, json_pack("{s:s}", "error", message), NULL);
}

static void respond_method(http_request *req, const char *allow, const char *why) {
  json_t *body = json_pack("{s:s, s:s, s:s}", "error", why ? why : "method not allowed", "method",
                           req->method, "allow", allow);
  respond(req, 405, body, allow);
}

/* ---- the allow-list store (node.db, table egress_rules) ---- */

static int db_open(node_egress *eg, char **err) {
  char *path = xasprintf("%s/node.db", eg->n->data_dir);
  int rc = sqlite3_open_v2(path, &eg->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
  if (rc == SQLITE_OK) {
    sqlite3_busy_timeout(eg->db, 5000);
    rc = sqlite3_exec(eg->db,
                      "CREATE TABLE IF NOT EXISTS egress_rules ("
                      "  name TEXT PRIMARY KEY,"
                      "  rules TEXT NOT NULL,"
                      "  updated_at INTEGER NOT NULL)",
                      NULL, NULL, NULL);
  }
  if (rc != SQLITE_OK) {
    *err = xasprintf("%s: %s", path, eg->db ? sqlite3_errmsg(eg->db) : sqlite3_errstr(rc));
    free(path);
    return -EIO;
  }
  free(path);
  return 0;
}

/* The stored rules of a worker ([] when none), or NULL on a database error. */
static json_t *db_get(node_egress *eg, const char *name, int64_t *updated_at) {
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(eg->db, "SELECT rules, updated_at FROM egress_rules WHERE name = ?1", -1,
                         &st, NULL) != SQLITE_OK)
    return NULL;
  sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
  json_t *rules = NULL;
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) {
    rules = json_loads((const char *)sqlite3_column_text(st, 0), 0, NULL);
    if (updated_at) *updated_at = sqlite3_column_int64(st, 1);
  } else if (rc == SQLITE_DONE) {
    rules = json_array();
    if (updated_at) *updated_at = 0;
  }
  sqlite3_finalize(st);
  return rules;
}

/* Stores (or for an empty list removes) a worker's rules. Returns 0 or -EIO. */
static int db_put(node_egress *eg, const char *name, json_t *rules) {
  sqlite3_stmt *st;
  int empty = json_array_size(rules) == 0;
  const char *sql = empty ? "DELETE FROM egress_rules WHERE name = ?1"
                          : "INSERT OR REPLACE INTO egress_rules(name, rules, updated_at) "
                            "VALUES (?1, ?2, ?3)";
  if (sqlite3_prepare_v2(eg->db, sql, -1, &st, NULL) != SQLITE_OK) return -EIO;
  sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
  if (!empty) {
    char *text = json_dumps(rules, JSON_COMPACT);
    if (text == NULL) {
      sqlite3_finalize(st);
      return -EIO;
    }
    sqlite3_bind_text(st, 2, text, -1, free);
    sqlite3_bind_int64(st, 3, time_now_ms());
  }
  int rc = sqlite3_step(st);
  sqlite3_finalize(st);
  return rc == SQLITE_DONE ? 0 : -EIO;
}

static json_t *db_all(node_egress *eg) {
  json_t *all = json_object();
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(eg->db, "SELECT name, rules FROM egress_rules", -1, &st, NULL) !=
      SQLITE_OK)
    return all;
  while (sqlite3_step(st) == SQLITE_ROW) {
    json_t *rules = json_loads((const char *)sqlite3_column_text(st, 1), 0, NULL);
    if (rules) json_object_set_new(all, (const char *)sqlite3_column_text(st, 0), rules);
  }
  sqlite3_finalize(st);
  return all;
}

/* ---- talking to the egress ---- */

static int channel_usable(const node_egress *eg) {
  return eg->channel_started && !eg->channel.closing;
}

static int send_json(node_egress *eg, uint8_t type, uint32_t id, json_t *body) {
  if (!channel_usable(eg)) return UV_EPIPE;
  char *text = json_dumps(body, JSON_COMPACT);
  if (text == NULL) return UV_EINVAL;
  int rc = proto_channel_send(&eg->channel, type, id, text, strlen(text));
  /* a secret's value may be in there */
  memset(text, 0, strlen(text));
  free(text);
  return rc;
}

/* Sends one worker's rules (null: none) if the egress is up; it gets all of them on start. */
static void push_policy(node_egress *eg, const char *name, json_t *rules) {
  if (eg == NULL || eg->state != NODE_PROC_READY) return;
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
    respond_error(p->req, 503, why);
    pending_finish(p);
  }
}

static void on_pending_timeout(uv_timer_t *t) {
  pending *p = container_of(t, pending, timer);
  respond_error(p->req, 503, "the egress process did not answer in time; try again");
  pending_finish(p);
}

/* Forwards a control request; the answer arrives in on_reply. */
static void forward(node_egress *eg, http_request *req, pending_kind kind, uint8_t type,
                    json_t *body) {
  if (eg == NULL || eg->state != NODE_PROC_READY || !channel_usable(eg)) {
    respond_error(req, 503, eg == NULL ? "this node has no egress process (edgenode-egress "
                                         "was not found next to edgenode)"
                                       : "the egress process is not running; try again shortly");
    return;
  }
  uint32_t id = proto_channel_request_id(&eg->channel);
  if (send_json(eg, type, id, body) != 0) {
    respond_error(req, 503, "the egress process is not reachable; try again shortly");
    return;
  }
  pending *p = xcalloc(1, sizeof *p);
  p->eg = eg;
  p->id = id;
  p->kind = kind;
  p->req = req;
  uv_timer_init(eg->n->loop, &p->timer);
  uv_timer_start(&p->timer, on_pending_timeout, REPLY_TIMEOUT_MS, 0);
  p->next = eg->pending;
  eg->pending = p;
}

static json_t *time_json(json_t *ms) {
  char when[32];
  node_iso8601(json_integer_value(ms), when);
  return json_string(when);
}

static void on_reply(node_egress *eg, const proto_frame *f, json_t *body) {
  pending *p = eg->pending;
  while (p && p->id != f->id) p = p->next;
  if (p == NULL) return;
  if (f->type == PROTO_ERROR || body == NULL) {
    json_int_t status = json_integer_value(json_object_get(body, "status"));
    const char *msg = json_string_value(json_object_get(body, "error"));
    respond_error(p->req, status >= 400 && status < 600 ? (int)status : 500,
                  msg ? msg : "the egress process failed");
  } else if (p->kind == PENDING_LIST) {
    json_t *list = json_array();
    size_t i;
    json_t *s;
    json_array_foreach(json_object_get(body, "secrets"), i, s) {
      json_array_append_new(list, json_pack("{s:O, s:o}", "name", json_object_get(s, "name"),
                                            "updated_at",
                                            time_json(json_object_get(s, "updated_at"))));
    }
    respond(p->req, 200, json_pack("{s:o}", "secrets", list), NULL);
  } else if (p->kind == PENDING_PUT) {
    int created = json_is_true(json_object_get(body, "created"));
    respond(p->req, created ? 201 : 200,
            json_pack("{s:O, s:o, s:b}", "name", json_object_get(body, "name"), "updated_at",
                      time_json(json_object_get(body, "updated_at")), "created", created),
            NULL);
  } else {
    respond(p->req, 200, json_pack("{s:O}", "deleted", json_object_get(body, "deleted")), NULL);
  }
  pending_finish(p);
}

/* ---- the process ---- */

static void on_hello(node_egress *eg, json_t *body) {
  node_sandbox_parse(json_object_get(body, "jail"), &eg->jail_on, &eg->jail_off);
  if (eg->state != NODE_PROC_STARTING) return;
  eg->sync_id = proto_channel_request_id(&eg->channel);
  json_t *all = db_all(eg);
  json_t *msg = json_pack("{s:o, s:b}", "workers", all, "replace", 1);
  if (send_json(eg, PROTO_EGRESS_POLICY, eg->sync_id, msg) != 0)
    log_warn("could not send the egress rules to the egress process");
  json_decref(msg);
}

static void on_synced(node_egress *eg) {
  eg->sync_id = 0;
  eg->state = NODE_PROC_READY;
  char extra[64];
  snprintf(extra, sizeof extra, "{\"pid\":%d}", eg->pid);
  log_write(LOG_INFO, NULL, NULL, extra, "egress process ready");
  node_on_procs_changed(eg->n);
}

static void on_frame(proto_channel *ch, const proto_frame *f) {
  node_egress *eg = ch->data;
  json_t *body = f->length ? json_loadb((const char *)f->payload, f->length, 0, NULL) : NULL;
  switch (f->type) {
    case PROTO_HELLO: on_hello(eg, body); break;
    case PROTO_EGRESS_REPLY:
    case PROTO_ERROR:
      if (f->id != 0 && f->id == eg->sync_id) on_synced(eg);
      else on_reply(eg, f, body);
      break;
    case PROTO_PING: proto_channel_send(ch, PROTO_PONG, f->id, NULL, 0); break;
    default: log_debug("egress: unexpected %s frame", proto_type_name(f->type));
  }
  json_decref(body);
}

static void on_channel_close(proto_channel *ch, int reason) {
  node_egress *eg = ch->data;
  eg->channel_open = 0;
  eg->channel_started = 0;
  if (reason != 0 && reason != UV_EOF && eg->alive) uv_process_kill(&eg->process, SIGKILL);
  pending_fail_all(eg, "the egress process went away; try again shortly");
}

static void on_process_closed(uv_handle_t *h) {
  node_egress *eg = container_of((uv_process_t *)h, node_egress, process);
  eg->process_open = 0;
}

static void on_restart_timer(uv_timer_t *t) {
  node_egress *eg = container_of(t, node_egress, restart_timer);
  if (eg->stopping) return;
  if (eg->process_open || eg->channel_open) {
    uv_timer_start(&eg->restart_timer, on_restart_timer, 10, 0);
    return;
  }
  spawn_egress(eg);
}

static uint64_t schedule_restart(node_egress *eg, uint64_t lived_ms) {
  uint64_t delay = node_backoff_next(&eg->backoff_ms, lived_ms);
  eg->restarts++;
  eg->state = NODE_PROC_RESTARTING;
  uv_timer_start(&eg->restart_timer, on_restart_timer, delay, 0);
  return delay;
}

static void on_egress_exit(uv_process_t *h, int64_t status, int sig) {
  node_egress *eg = container_of(h, node_egress, process);
  eg->alive = 0;
  uv_close((uv_handle_t *)h, on_process_closed);
  if (eg->channel_started) proto_channel_close(&eg->channel);
  pending_fail_all(eg, "the egress process went away; try again shortly");
  uint64_t lived_ms = (time_mono_ns() - eg->started_mono_ns) / 1000000u;
  char extra[256];
  if (eg->stopping) {
    eg->state = NODE_PROC_STOPPED;
    snprintf(extra, sizeof extra, "{\"pid\":%d,\"exit_status\":%lld,\"signal\":%d}", eg->pid,
             (long long)status, sig);
    log_write(status == 0 && sig == 0 ? LOG_INFO : LOG_WARN, NULL, NULL, extra, "egress exited");
    if (!uv_is_closing((uv_handle_t *)&eg->restart_timer))
      uv_close((uv_handle_t *)&eg->restart_timer, NULL);
    return;
  }
  uint64_t delay = schedule_restart(eg, lived_ms);
  snprintf(extra, sizeof extra,
           "{\"pid\":%d,\"exit_status\":%lld,\"signal\":%d,\"restarts\":%u,\"delay_ms\":%llu,"
           "\"uptime_ms\":%llu}",
           eg->pid, (long long)status, sig, eg->restarts, (unsigned long long)delay,
           (unsigned long long)lived_ms);
  log_write(LOG_WARN, NULL, NULL, extra, "egress exited: restarting");
  node_on_procs_changed(eg->n);
}

static void on_pipe_closed(uv_handle_t *h) {
  node_egress *eg = container_of((uv_pipe_t *)h, node_egress, channel.pipe);
  eg->channel_open = 0;
}

static int spawn_egress(node_egress *eg) {
  node *n = eg->n;
  size_t max = 12 + 2 * (n->cfg.n_egress_allow_cidr + n->cfg.n_ca_files) + NODE_SANDBOX_ARGS;
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
  a += node_sandbox_args(n, args + a); /* jail/ */
  args[a] = NULL;

  memset(&eg->channel, 0, sizeof eg->channel);
  int rc = uv_pipe_init(n->loop, &eg->channel.pipe, 0);
  if (rc != 0) {
    free(args);
    return rc;
  }
  uv_stdio_container_t stdio[4];
  stdio[0].flags = UV_IGNORE;
  stdio[1].flags = UV_INHERIT_FD;
  stdio[1].data.fd = 1;
  stdio[2].flags = UV_INHERIT_FD;
  stdio[2].data.fd = 2;
  stdio[3].flags = UV_CREATE_PIPE | UV_READABLE_PIPE | UV_WRITABLE_PIPE;
  stdio[3].data.stream = (uv_stream_t *)&eg->channel.pipe;
  uv_process_options_t opts;
  memset(&opts, 0, sizeof opts);
  opts.exit_cb = on_egress_exit;
  opts.file = eg->path;
  opts.args = args;
  opts.stdio_count = 4;
  opts.stdio = stdio;
  eg->started_mono_ns = time_mono_ns();
  eg->state = NODE_PROC_STARTING;
  eg->sync_id = 0;
  rc = uv_spawn(n->loop, &eg->process, &opts);
  free(args);
  eg->process_open = eg->channel_open = 1;
  if (rc != 0) {
    log_write(LOG_ERROR, NULL, NULL, NULL, "spawning %s failed: %s", eg->path, uv_strerror(rc));
    uv_close((uv_handle_t *)&eg->process, on_process_closed);
    uv_close((uv_handle_t *)&eg->channel.pipe, on_pipe_closed);
    schedule_restart(eg, 0);
    return rc;
  }
  eg->alive = 1;
  eg->pid = eg->process.pid;
  rc = proto_channel_start(&eg->channel, on_frame, on_channel_close, eg);
  if (rc != 0) {
    uv_close((uv_handle_t *)&eg->channel.pipe, on_pipe_closed);
    uv_process_kill(&eg->process, SIGKILL);
    return rc;
  }
  eg->channel_started = 1;
  char extra[64];
  snprintf(extra, sizeof extra, "{\"pid\":%d}", eg->pid);
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
  eg->backoff_ms = NODE_BACKOFF_MIN_MS;
  rc = db_open(eg, err);
  if (rc != 0) {
    sqlite3_close(eg->db);
    free(eg->path);
    free(eg);
    return rc;
  }
  n->egress = eg;
  if (access(eg->path, X_OK) != 0) {
    /* A tree built without the egress still serves; fetch() fails clearly. */
    log_warn("%s: %s: fetch() is unavailable on this node", eg->path, strerror(errno));
    eg->state = NODE_PROC_STOPPED;
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
  char *dir = xasprintf("%s/egress", n->data_dir);
  if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
    int e = errno;
    *err = xasprintf("%s: %s", dir, strerror(e));
    free(dir);
    return -e;
  }
  eg->socket_path = xasprintf("%s/egress.sock", dir);
  free(dir);
  uv_timer_init(n->loop, &eg->restart_timer);
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
  return eg == NULL || eg->socket_path == NULL || eg->state == NODE_PROC_READY;
}

void node_egress_stop(node *n) {
  node_egress *eg = n->egress;
  if (eg == NULL || eg->socket_path == NULL || eg->stopping) return;
  eg->stopping = 1;
  uv_timer_stop(&eg->restart_timer);
  if (eg->alive) {
    uv_process_kill(&eg->process, SIGTERM);
  } else if (!uv_is_closing((uv_handle_t *)&eg->restart_timer)) {
    eg->state = NODE_PROC_STOPPED;
    uv_close((uv_handle_t *)&eg->restart_timer, NULL);
  }
}

void node_egress_kill(node *n) {
  node_egress *eg = n->egress;
  if (eg == NULL || !eg->alive) return;
  eg->stopping = 1;
  uv_process_kill(&eg->process, SIGKILL);
}

/* ---- deploys ---- */

typedef struct deploy_wrap {
  char *name;
  json_t *rules;
  node_deploy_cb cb;
  void *data;
} deploy_wrap;

static void on_deployed(node *n, void *data, int status, json_t *body) {
  deploy_wrap *w = data;
  if (status == 200 || status == 201) {
    if (db_put(n->egress, w->name, w->rules) != 0) {
      log_write(LOG_ERROR, w->name, NULL, NULL, "storing the egress rules failed: %s",
                sqlite3_errmsg(n->egress->db));
      json_t *err = json_pack("{s:s}", "error",
                              "the code was deployed but storing its egress rules failed");
      w->cb(n, w->data, 500, err);
      json_decref(err);
      goto done;
    }
    push_policy(n->egress, w->name, w->rules);
    if (json_is_object(body)) json_object_set(body, "egress", w->rules);
  }
  w->cb(n, w->data, status, body);
done:
  json_decref(w->rules);
  free(w->name);
  free(w);
}

void node_egress_deploy(node *n, const char *name, json_t *spec, node_deploy_cb cb, void *data) {
  json_t *rules = json_object_get(spec, "egress");
  if (rules == NULL || n->egress == NULL) {
    json_object_del(spec, "egress");
    node_deploy(n, name, spec, cb, data);
    return;
  }
  deploy_wrap *w = xcalloc(1, sizeof *w);
  w->name = xstrdup(name);
  w->rules = json_incref(rules);
  w->cb = cb;
  w->data = data;
  json_object_del(spec, "egress");
  node_deploy(n, name, spec, on_deployed, w);
}

void node_egress_forget(node *n, const char *name) {
  node_egress *eg = n->egress;
  if (eg == NULL) return;
  json_t *none = json_array();
  if (db_put(eg, name, none) != 0)
    log_write(LOG_ERROR, name, NULL, NULL, "removing the egress rules failed: %s",
              sqlite3_errmsg(eg->db));
  json_decref(none);
  push_policy(eg, name, NULL);
}

/* ---- routes ---- */

static int worker_exists(node *n, const char *name, http_request *req) {
  json_t *row = NULL;
  int rc = node_registry_get(n->registry, name, &row);
  json_decref(row);
  if (rc == 0) return 1;
  if (rc == -ENOENT)
    respond(req, 404, json_pack("{s:s, s:s}", "error", "unknown worker", "name", name), NULL);
  else
    respond_error(req, 500, "registry read failed");
  return 0;
}

static void rules_route(node *n, http_request *req, const char *name) {
  node_egress *eg = n->egress;
  const char *m = req->method;
  int get = strcmp(m, "GET") == 0, put = strcmp(m, "PUT") == 0, del = strcmp(m, "DELETE") == 0;
  if (!get && !put && !del) {
    respond_method(req, "GET, PUT, DELETE", NULL);
    return;
  }
  if (!worker_name_valid(name, strlen(name))) {
    respond_error(req, 400, "invalid worker name: must match [a-z0-9][a-z0-9-]{0,62}");
    return;
  }
  if (!worker_exists(n, name, req)) return;
  json_t *rules = NULL;
  if (get) {
    int64_t updated = 0;
    rules = db_get(eg, name, &updated);
    if (rules == NULL) {
      respond_error(req, 500, "reading the egress rules failed");
      return;
    }
    json_t *body = json_pack("{s:s, s:o}", "worker", name, "rules", rules);
    if (updated) {
      char when[32];
      node_iso8601(updated, when);
      json_object_set_new(body, "updated_at", json_string(when));
    }
    respond(req, 200, body, NULL);
    return;
  }
  if (put) {
    if (req->body_len == 0) {
      respond_error(req, 400, "the body is empty: send {\"rules\": [...]} or an array of rules");
      return;
    }
    json_error_t jerr;
    json_t *root = json_loadb((const char *)req->body, req->body_len, JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL) {
      respond(req, 400, json_pack("{s:s+}", "error", "invalid JSON: ", jerr.text), NULL);
      return;
    }
    if (json_is_object(root)) {
      /* As a deploy body: a key that is not understood is refused, not
       * dropped (a misspelt "rules" would otherwise clear them all). */
      const char *key;
      json_t *value;
      json_object_foreach(root, key, value) {
        if (strcmp(key, "rules") == 0) continue;
        respond(req, 400,
                json_pack("{s:s, s:s}", "error", "unknown key: the body holds only \"rules\"",
                          "key", key),
                NULL);
        json_decref(root);
        return;
      }
    }
    rules = json_is_object(root) ? json_incref(json_object_get(root, "rules")) : json_incref(root);
    json_decref(root);
    char *why = NULL;
    egress_policy *p = egress_policy_parse(rules, &why);
    if (p == NULL) {
      log_write(LOG_INFO, name, req->id, NULL, "egress rules rejected: %s", why);
      respond_error(req, 400, why);
      free(why);
      json_decref(rules);
      return;
    }
    egress_policy_free(p);
  } else {
    rules = json_array();
  }
  if (db_put(eg, name, rules) != 0) {
    log_write(LOG_ERROR, name, req->id, NULL, "storing the egress rules failed: %s",
              sqlite3_errmsg(eg->db));
    respond_error(req, 500, "storing the egress rules failed");
    json_decref(rules);
    return;
  }
  push_policy(eg, name, rules);
  char extra[64];
  snprintf(extra, sizeof extra, "{\"rules\":%zu}", json_array_size(rules));
  log_write(LOG_INFO, name, req->id, extra, "egress rules %s", put ? "set" : "cleared");
  respond(req, 200, json_pack("{s:s, s:o}", "worker", name, "rules", rules), NULL);
}

/* A secret's value: the raw body (one trailing newline dropped, as `echo` adds
 * one) or {"value": "..."} with a JSON content type. NULL with *why otherwise. */
static char *secret_value(http_request *req, size_t *len, const char **why) {
  const char *ct = http_request_header(req, "Content-Type");
  *why = "secret values are text of at most 8192 bytes without control characters (tab allowed)";
  char *value;
  if (ct && strncasecmp(ct, "application/json", 16) == 0) {
    json_t *root = json_loadb((const char *)req->body, req->body_len, 0, NULL);
    json_t *v = json_object_get(root, "value");
    if (!json_is_string(v)) {
      json_decref(root);
      *why = "a JSON body is {\"value\": \"...\"}";
      return NULL;
    }
    *len = json_string_length(v);
    value = xstrndup(json_string_value(v), *len);
    json_decref(root);
  } else {
    *len = req->body_len;
    if (*len > 0 && req->body[*len - 1] == '\n') (*len)--;
    if (*len > 0 && req->body[*len - 1] == '\r') (*len)--;
    value = xstrndup(req->body ? (const char *)req->body : "", *len);
  }
  /* An empty secret would inject an empty credential; edgectl refuses it too. */
  if (*len == 0) *why = "the secret value is empty";
  if (*len == 0 || strlen(value) != *len || !egress_secret_value_valid(value, *len)) {
    memset(value, 0, *len);
    free(value);
    return NULL;
  }
  return value;
}

static void secret_route(node *n, http_request *req, const char *name) {
  int put = strcmp(req->method, "PUT") == 0, del = strcmp(req->method, "DELETE") == 0;
  if (!put && !del) {
    respond_method(req, "PUT, DELETE",
                   strcmp(req->method, "GET") == 0
                       ? "secrets are write-only: GET /v1/secrets lists their names"
                       : NULL);
    return;
  }
  if (!egress_secret_name_valid(name, strlen(name))) {
    respond_error(req, 400,
                  "invalid secret name: letters, digits and '_', not starting with a digit, "
                  "at most 64");
    return;
  }
  if (del) {
    json_t *body = json_pack("{s:s}", "name", name);
    forward(n->egress, req, PENDING_DELETE, PROTO_SECRET_DELETE, body);
    json_decref(body);
    return;
  }
  size_t len = 0;
  const char *why = NULL;
  char *value = secret_value(req, &len, &why);
  if (value == NULL) {
    respond_error(req, 400, why);
    return;
  }
  json_t *v = json_stringn(value, len);
  memset(value, 0, len);
  free(value);
  if (v == NULL) {
    respond_error(req, 400, "secret values must be UTF-8 text");
    return;
  }
  json_t *body = json_pack("{s:s, s:o}", "name", name, "value", v);
  forward(n->egress, req, PENDING_PUT, PROTO_SECRET_PUT, body);
  json_decref(body);
}

int node_egress_route(node *n, http_request *req, const char *path) {
  static const char secrets[] = "/v1/secrets";
  static const char workers[] = "/v1/workers/";
  static const char suffix[] = "/egress";
  if (strcmp(path, secrets) == 0) {
    if (strcmp(req->method, "GET") != 0) {
      respond_method(req, "GET", NULL);
    } else {
      json_t *body = json_object();
      forward(n->egress, req, PENDING_LIST, PROTO_SECRET_LIST, body);
      json_decref(body);
    }
    return 1;
  }
  if (strncmp(path, secrets, sizeof secrets - 1) == 0 && path[sizeof secrets - 1] == '/' &&
      strchr(path + sizeof secrets, '/') == NULL) {
    secret_route(n, req, path + sizeof secrets);
    return 1;
  }
  size_t len = strlen(path);
  if (strncmp(path, workers, sizeof workers - 1) == 0 && len > sizeof workers - 1 + sizeof suffix - 1 &&
      strcmp(path + len - (sizeof suffix - 1), suffix) == 0) {
    char *name = xstrndup(path + sizeof workers - 1, len - (sizeof workers - 1) - (sizeof suffix - 1));
    if (strchr(name, '/') == NULL) {
      if (n->egress == NULL) respond_error(req, 503, "the egress rule store is not available");
      else rules_route(n, req, name);
      free(name);
      return 1;
    }
    free(name);
  }
  return 0;
}
