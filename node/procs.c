/*
 * Worker processes: the ingress socket the shared ones share, their command
 * lines, the frames they send, what happens when one exits, requests that a
 * worker process answers (validations, one-shot runs), their memory budgets,
 * and the slots of the dedicated processes of cordoned tenants. The
 * processes themselves are node_child (child.c: spawning, back-off). What a
 * process reports goes up through n->proc_listener (cordons.c) and main.c's
 * hooks; nothing here calls the modules above.
 *
 * A shared slot lives as long as the node, in n->procs; a dedicated slot is
 * made for a cordon and freed once released and its process is gone.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "node.h"

/* Longer than the most CPU a validation may spend (cpu_ms, at most 30 s:
 * compiling, linking and the top-level code all count now), with room for
 * reading a 10 MiB spec: the worker process answers first, and nothing of
 * the validation runs on after the supervisor has answered. */
#define VALIDATE_TIMEOUT_MS 35000
#define LISTEN_BACKLOG 1024

static int spawn_proc(node_proc *p);
static const node_child_ops proc_ops;

static void format_addr(const char *host, int port, char out[96]) {
  if (strchr(host, ':')) snprintf(out, 96, "[%s]:%d", host, port);
  else snprintf(out, 96, "%s:%d", host, port);
}

static int listen_on(node *n, int port, char **err) {
  struct sockaddr_storage ss;
  memset(&ss, 0, sizeof ss);
  const char *host = n->cfg.listen_host;
  if (uv_ip4_addr(host, port, (struct sockaddr_in *)&ss) != 0 &&
      uv_ip6_addr(host, port, (struct sockaddr_in6 *)&ss) != 0) {
    *err = xasprintf("listen %s: not a numeric address", host);
    return -EINVAL;
  }
  socklen_t len =
      ss.ss_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
  int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    int rc = -errno;
    *err = xasprintf("listen: socket: %s", strerror(errno));
    return rc;
  }
  int one = 1;
  if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
      bind(fd, (struct sockaddr *)&ss, len) != 0 || listen(fd, LISTEN_BACKLOG) != 0 ||
      getsockname(fd, (struct sockaddr *)&ss, &len) != 0) {
    int rc = -errno;
    char addr[96];
    format_addr(host, port, addr);
    *err = xasprintf("listen %s: %s", addr, strerror(errno));
    close(fd);
    return rc;
  }
  int bound = ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
                                            : ((struct sockaddr_in6 *)&ss)->sin6_port);
  format_addr(host, bound, n->listen_addr);
  n->listen_fd = fd;
  return 0;
}

int node_listen_socket(node *n, char **err) { return listen_on(n, n->cfg.listen_port, err); }

static size_t running_size(void) { return (sizeof(proto_running) + 4095) & ~(size_t)4095; }

/* ---- sending ------------------------------------------------------------------ */


static int channel_usable(const node_proc *p) { return node_child_usable(&p->child); }

static int send_json(node_proc *p, uint8_t type, uint32_t id, json_t *body) {
  if (!channel_usable(p)) return UV_EPIPE;
  int rc = node_child_send_json(&p->child, type, id, body);
  if (rc != 0)
    log_write(LOG_WARN, NULL, NULL, NULL, "worker-%d: sending %s failed: %s", p->id,
              proto_type_name(type), proto_strerror(rc));
  return rc;
}

int node_proc_send_json(node_proc *p, uint8_t type, uint32_t id, json_t *body) {
  return send_json(p, type, id, body);
}

int node_proc_usable(const node_proc *p) { return channel_usable(p); }

static void send_error(node_proc *p, uint32_t id, int status, const char *message) {
  json_t *body = json_pack("{s:i, s:s}", "status", status, "error", message);
  send_json(p, PROTO_ERROR, id, body);
  json_decref(body);
}

/* ---- validations ------------------------------------------------------------- */

static void free_validation(uv_handle_t *h) { free(container_of(h, node_validation, timer)); }

static void finish_validation(node_validation *v, int status, json_t *result) {
  node *n = v->owner;
  for (node_validation **pp = &n->validations; *pp; pp = &(*pp)->next) {
    if (*pp == v) {
      *pp = v->next;
      break;
    }
  }
  uv_timer_stop(&v->timer);
  node_validate_cb cb = v->cb;
  void *data = v->data;
  uv_close((uv_handle_t *)&v->timer, free_validation);
  cb(n, data, status, result);
}

static void fail_validations(node_proc *p, int status) {
  node *n = p->owner;
  node_validation *v = n->validations;
  while (v) {
    node_validation *next = v->next;
    if (v->proc == p) finish_validation(v, status, NULL);
    v = next;
  }
}

static void on_validate_timeout(uv_timer_t *t) {
  node_validation *v = container_of(t, node_validation, timer);
  log_write(LOG_WARN, NULL, NULL, NULL, "worker-%d: no answer in time (validation or run)", v->proc->id);
  finish_validation(v, UV_ETIMEDOUT, NULL);
}

static node_validation *find_validation(node_proc *p, uint32_t id) {
  for (node_validation *v = p->owner->validations; v; v = v->next)
    if (v->proc == p && v->id == id) return v;
  return NULL;
}

static node_proc *pick_ready(node *n) {
  for (int i = 0; i < n->n_procs; i++) {
    node_proc *p = &n->procs[(n->next_proc + i) % n->n_procs];
    if (p->child.state == NODE_PROC_READY && channel_usable(p) && !p->retiring && !p->recycling) {
      n->next_proc = (int)(p - n->procs + 1) % n->n_procs;
      return p;
    }
  }
  return NULL;
}

void node_procs_validate(node *n, json_t *spec, node_validate_cb cb, void *data) {
  node_procs_request(n, PROTO_VALIDATE, spec, VALIDATE_TIMEOUT_MS, cb, data);
}

void node_procs_request(node *n, uint8_t type, json_t *body, uint64_t timeout_ms,
                        node_validate_cb cb, void *data) {
  node_proc *p = pick_ready(n);
  if (p == NULL) {
    cb(n, data, UV_EAGAIN, NULL);
    return;
  }
  uint32_t id = proto_channel_request_id(&p->child.channel);
  int rc = send_json(p, type, id, body);
  if (rc != 0) {
    cb(n, data, rc, NULL);
    return;
  }
  node_validation *v = xcalloc(1, sizeof *v);
  v->owner = n;
  v->proc = p;
  v->id = id;
  v->cb = cb;
  v->data = data;
  uv_timer_init(n->loop, &v->timer);
  uv_timer_start(&v->timer, on_validate_timeout, timeout_ms, 0);
  v->next = n->validations;
  n->validations = v;
}

/* ---- what a worker process reports -------------------------------------------------- */

/* Per-slot counters for /metrics (cold starts, evictions), from every PROTO_STATS. */
static void count_stats(node_proc *p, json_t *body) {
  const char *name;
  json_t *delta;
  json_object_foreach(json_object_get(body, "tenants"), name, delta) {
    json_int_t c = json_integer_value(json_object_get(delta, "cold_starts"));
    if (c > 0) p->cold_starts_total += (uint64_t)c;
  }
  json_t *evictions = json_object_get(json_object_get(body, "process"), "evictions");
  if (!json_is_integer(evictions)) return;
  /* The process counts since it started; the slot's counter must not go back
   * when a new process takes over. */
  uint64_t seen = (uint64_t)json_integer_value(evictions);
  if (p->stats_pid != p->child.pid) {
    p->stats_pid = p->child.pid;
    p->evictions_seen = 0;
  }
  if (seen >= p->evictions_seen) p->evictions_total += seen - p->evictions_seen;
  p->evictions_seen = seen;
}

/*
 * Whether a process's death is its running tenant's doing: a fault raised
 * inside the tenant's call (a bad access, a V8 fatal error, an abort, a
 * sandbox violation). A SIGKILL comes from outside (the kernel's OOM killer,
 * an operator, this supervisor) and an exit is the process's own: neither
 * blames whoever happened to be running. The same rule holds for a
 * dedicated process (cordons.c), though only its tenant runs there.
 */
static int fault_signal(int sig) {
  return sig == SIGSEGV || sig == SIGBUS || sig == SIGILL || sig == SIGFPE || sig == SIGTRAP ||
         sig == SIGABRT || sig == SIGSYS;
}

/* How p's process ended; its kill flags are spent on it. */
static node_proc_exit exit_of(node_proc *p, int64_t status, int sig, uint64_t lived_ms) {
  node_proc_exit e = {.status = status, .sig = sig, .lived_ms = lived_ms, .fault = fault_signal(sig)};
  e.event = status == 0 && sig == 0 ? "exit" : sig == SIGSYS ? "sandbox_violation" : "crash";
  e.reason = p->unresponsive_killed ? "unresponsive" : p->memory_killed ? "memory" : NULL;
  p->unresponsive_killed = 0;
  p->memory_killed = 0;
  return e;
}

/* The tenant whose code ran in a shared process when it died, from the page
 * it names the running tenant in; NULL when none (or killed for memory). */
static const char *crash_tenant(node_proc *p) {
  proto_running *r = p->running;
  if (r == NULL || r->magic != PROTO_RUNNING_MAGIC || !r->running || p->memory_killed) return NULL;
  static char name[PROTO_RUNNING_NAME_MAX];
  memcpy(name, (const char *)r->tenant, sizeof name);
  name[sizeof name - 1] = '\0';
  return worker_name_valid(name, strlen(name)) ? name : NULL;
}

/* A shared process drained for a reload (drain.c set the flags): 1 when the
 * exit was that and is taken care of, 0 for the usual restart path. */
static int planned_exit(node_proc *p, int64_t status, int sig) {
  node *n = p->owner;
  if (n->state != NODE_SERVING || (!p->retiring && !p->recycling)) return 0;
  json_t *extra = json_pack("{s:i, s:i, s:I, s:i, s:s}", "worker", p->id, "pid", p->child.pid,
                            "exit_status", (json_int_t)status, "signal", sig, "reason",
                            p->retiring ? "retired" : "replaced");
  char *text = json_dumps(extra, JSON_COMPACT);
  log_write(LOG_INFO, NULL, NULL, text, "worker exited (reload)");
  free(text);
  json_decref(extra);
  if (p->retiring) {
    p->child.state = NODE_PROC_STOPPED;
    return 1;
  }
  /* Replaced: a new process with the new flags right away, no back-off. */
  p->recycling = 0;
  node_child_respawn(&p->child);
  return 1;
}

/* ---- frames from a worker ------------------------------------------------------ */

static json_t *frame_json(const proto_frame *f) {
  /* A run's answer carries the caller's strings, which may hold U+0000. */
  json_t *v = json_loadb((const char *)f->payload, f->length, JSON_ALLOW_NUL, NULL);
  if (v && !json_is_object(v)) {
    json_decref(v);
    v = NULL;
  }
  return v;
}

static void on_hello(node_proc *p, json_t *body) {
  node *n = p->owner;
  const char *v8 = json_string_value(json_object_get(body, "v8"));
  if (v8 && (n->v8_version == NULL || strcmp(n->v8_version, v8) != 0)) {
    free(n->v8_version);
    n->v8_version = xstrdup(v8);
  }
  json_t *mpk = json_object_get(body, "mpk");
  p->mpk_enabled = json_is_true(json_object_get(mpk, "enabled"));
  p->mpk_keys = (int)json_integer_value(json_object_get(mpk, "keys"));
  node_sandbox_parse(json_object_get(body, "jail"), &p->jail_on, &p->jail_off);
  if (p->child.state != NODE_PROC_STARTING) return;
  p->heartbeat_seen = p->running ? __atomic_load_n(&p->running->heartbeat, __ATOMIC_RELAXED) : 0;
  p->heartbeat_stale = 0;
  p->child.state = NODE_PROC_READY;
  char extra[128];
  snprintf(extra, sizeof extra, "{\"worker\":%d,\"pid\":%d}", p->id, p->child.pid);
  log_write(LOG_INFO, p->tenant, NULL, extra, "worker ready");
  /* Before any spec request of the process is answered: where tenants run,
   * and how requests find them. */
  if (n->proc_listener) n->proc_listener->hello(p);
  if (n->tail_hooks) n->tail_hooks->hello(p);
  if (n->routes) send_json(p, PROTO_ROUTES, 0, n->routes);
  if (!p->tenant) n->procs_changed(n);
}

int node_mpk_enabled(const node *n) {
  int ready = 0;
  for (int i = 0; i < n->n_procs; i++) {
    const node_proc *p = &n->procs[i];
    if (p->child.state != NODE_PROC_READY) continue;
    if (!p->mpk_enabled) return 0;
    ready++;
  }
  return ready > 0;
}

/* The registry row as a PROTO_WORKER_SPEC payload: no timestamps, limits filled. */
static void on_worker_get(node_proc *p, uint32_t id, json_t *body) {
  const char *name = json_string_value(json_object_get(body, "name"));
  if (name == NULL) {
    send_error(p, id, 400, "\"name\" must be a string");
    return;
  }
  json_t *row = NULL;
  int rc = node_db_worker_get(p->owner->db, name, &row);
  if (rc == -ENOENT) {
    send_error(p, id, 404, "unknown worker");
    return;
  }
  if (rc != 0) {
    log_write(LOG_ERROR, name, NULL, NULL, "registry read failed: %s",
              node_db_errmsg(p->owner->db));
    send_error(p, id, 500, "registry read failed");
    return;
  }
  json_object_del(row, "created_at");
  json_object_del(row, "updated_at");
  json_t *limits = json_object_get(row, "limits");
  if (json_object_get(limits, "cpu_ms") == NULL)
    json_object_set_new(limits, "cpu_ms", json_integer(PROTO_SPEC_DEFAULT_CPU_MS));
  if (json_object_get(limits, "memory_mb") == NULL)
    json_object_set_new(limits, "memory_mb", json_integer(PROTO_SPEC_DEFAULT_MEMORY_MB));
  if (node_db_traffic_attach(p->owner->db, name, row) != 0)
    log_write(LOG_ERROR, name, NULL, NULL, "traffic split unreadable, all to the current version: %s",
              node_db_errmsg(p->owner->db));
  send_json(p, PROTO_WORKER_SPEC, id, row);
  json_decref(row);
}

static void on_validate_reply(node_proc *p, const proto_frame *f, json_t *body) {
  node_validation *v = find_validation(p, f->id);
  if (v == NULL) return; /* timed out already */
  if (body == NULL) {
    body = json_pack("{s:b, s:s, s:s}", "ok", 0, "kind", "internal", "error",
                     "malformed validation reply from the worker process");
    finish_validation(v, 0, body);
    json_decref(body);
    return;
  }
  if (f->type == PROTO_ERROR) {
    const char *msg = json_string_value(json_object_get(body, "error"));
    json_t *r = json_pack("{s:b, s:s, s:s}", "ok", 0, "kind", "internal", "error",
                          msg ? msg : "validation failed in the worker process");
    finish_validation(v, 0, r);
    json_decref(r);
    return;
  }
  finish_validation(v, 0, body);
}

static void on_frame(node_child *c, const proto_frame *f) {
  node_proc *p = c->data;
  proto_channel *ch = &c->channel;
  json_t *body = f->length ? frame_json(f) : NULL;
  switch (f->type) {
    case PROTO_HELLO:
      on_hello(p, body);
      break;
    case PROTO_WORKER_GET:
      on_worker_get(p, f->id, body);
      break;
    case PROTO_VALIDATE_RESULT:
    case PROTO_RUN_RESULT:
    case PROTO_ERROR:
      on_validate_reply(p, f, body);
      break;
    case PROTO_PING:
      proto_channel_send(ch, PROTO_PONG, f->id, NULL, 0);
      break;
    case PROTO_STATS:
      count_stats(p, body);
      node_stats_add(p->owner, p, body);
      if (p->owner->proc_listener) p->owner->proc_listener->stats(p, body);
      break;
    case PROTO_EVENT:
      if (p->owner->proc_listener) p->owner->proc_listener->event(p, body);
      break;
    case PROTO_CORDON_DONE:
      if (p->owner->proc_listener) p->owner->proc_listener->cordon_done(p, body);
      break;
    case PROTO_TAIL_LINE:
      if (p->owner->tail_hooks && body) p->owner->tail_hooks->line(p, body);
      break;
    case PROTO_PONG:
      break;
    default:
      log_write(LOG_DEBUG, NULL, NULL, NULL, "worker-%d: unexpected %s frame", p->id,
                proto_type_name(f->type));
  }
  json_decref(body);
}

/* ---- process lifecycle ----------------------------------------------------------- */

static void check_stopped(node *n) {
  if (n->state == NODE_DRAINING && node_procs_live(n) == 0) n->procs_stopped(n);
}

/* How a channel ended tells whether the worker is to be trusted. While the
 * node shuts down, a worker that exits closes its end with whatever the
 * supervisor sent last still unread, and the supervisor sees a reset: that
 * is the worker leaving as asked, not misbehaving. */
static int channel_failed(const node_proc *p, int reason) {
  if (reason == 0 || reason == UV_EOF) return 0;
  return !(reason == UV_ECONNRESET && p->owner->state == NODE_DRAINING);
}

static void on_channel_closed(node_child *c, int reason) {
  node_proc *p = c->data;
  if (channel_failed(p, reason) && c->alive) {
    /* A worker that speaks garbage cannot be trusted with requests: kill it
     * and let the restart path bring a fresh one. */
    char extra[96];
    snprintf(extra, sizeof extra, "{\"worker\":%d,\"pid\":%d}", p->id, c->pid);
    log_write(LOG_WARN, NULL, NULL, extra, "channel to worker failed (%s): killing it",
              proto_strerror(reason));
    node_child_kill(c, SIGKILL);
  }
  fail_validations(p, UV_ECANCELED);
}

static void dedicated_unlink(node_proc *p) {
  for (node_proc **pp = &p->owner->dedicated; *pp; pp = &(*pp)->next) {
    if (*pp == p) {
      *pp = p->next;
      break;
    }
  }
}

static void proc_free(node_proc *p) {
  if (p->running) munmap((void *)p->running, running_size());
  if (p->running_fd >= 0) close(p->running_fd);
  json_decref(p->process_stats);
  free(p->tenant);
  free(p);
}

static void on_closed(node_child *c) {
  node_proc *p = c->data;
  node *n = p->owner;
  if (p->tenant && p->released && node_child_gone(c)) { /* the slot goes */
    dedicated_unlink(p);
    if (n->proc_listener) n->proc_listener->dedicated_gone(p);
    proc_free(p);
  }
  check_stopped(n);
}

static void on_restarted(node_child *c) {
  node_proc *p = c->data;
  node_event_new(p->owner, "restart", p->tenant,
                 json_pack("{s:i, s:i, s:i}", "worker", p->id, "pid", c->pid, "restarts",
                           (int)c->restarts));
}

static void on_exited(node_child *c, int64_t status, int sig, uint64_t lived_ms) {
  node_proc *p = c->data;
  node *n = p->owner;
  fail_validations(p, UV_ECANCELED);
  node_stats_proc_gone(n, p);
  const char *running = status == 0 && sig == 0 ? NULL : crash_tenant(p);
  node_proc_exit e = exit_of(p, status, sig, lived_ms);
  if (p->tenant) {
    node_egress_bind(n, p->child.pid, NULL);
    node_replica_bind(n, p->child.pid, NULL);
    if (n->proc_listener) n->proc_listener->dedicated_exit(p, &e);
    return;
  }
  if (n->proc_listener) n->proc_listener->shared_exit(p);
  if (planned_exit(p, status, sig)) return;
  char extra[256];
  if (n->state == NODE_DRAINING) {
    c->state = NODE_PROC_STOPPED;
    snprintf(extra, sizeof extra, "{\"worker\":%d,\"pid\":%d,\"exit_status\":%lld,\"signal\":%d}",
             p->id, c->pid, (long long)status, sig);
    log_write(status == 0 && sig == 0 ? LOG_INFO : LOG_WARN, NULL, NULL, extra, "worker exited");
    check_stopped(n);
    return;
  }
  const char *tenant = e.fault ? running : NULL;
  uint64_t delay = node_child_restart(c, lived_ms);
  snprintf(extra, sizeof extra,
           "{\"worker\":%d,\"pid\":%d,\"exit_status\":%lld,\"signal\":%d,\"restarts\":%u,"
           "\"delay_ms\":%llu,\"uptime_ms\":%llu}",
           p->id, c->pid, (long long)status, sig, c->restarts, (unsigned long long)delay,
           (unsigned long long)lived_ms);
  log_write(LOG_WARN, tenant, NULL, extra, "worker exited: restarting");
  json_t *details = json_loads(extra, 0, NULL);
  /* The tenant whose code was running when the process died (running slot),
   * blamed (the event's tenant) only for a fault of its own. */
  if (running) json_object_set_new(details, "running", json_string(running));
  if (e.reason) json_object_set_new(details, "reason", json_string(e.reason));
  node_event(n, e.event, tenant, details);
  if (tenant && n->proc_listener) n->proc_listener->crash(p, tenant);
  json_decref(details);
  n->procs_changed(n);
}

static int spawn_child(node_child *c) { return spawn_proc(c->data); }

static const node_child_ops proc_ops = {
    .spawn = spawn_child,
    .frame = on_frame,
    .channel_closed = on_channel_closed,
    .exited = on_exited,
    .closed = on_closed,
    .restarted = on_restarted,
};

/* The shared page a worker process names its running tenant in and counts
 * its heartbeat on; made once per slot and zeroed for every process. 0, or
 * -1 when unavailable. */
static int running_slot(node_proc *p) {
  if (p->running == NULL) {
    size_t size = running_size();
    int fd = memfd_create("edgenode-running", MFD_CLOEXEC);
    if (fd < 0) return -1;
    void *m = MAP_FAILED;
    if (ftruncate(fd, (off_t)size) == 0)
      m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
      close(fd);
      return -1;
    }
    p->running = m;
    p->running_fd = fd;
  }
  memset((void *)p->running, 0, sizeof *p->running);
  return 0;
}

static int spawn_proc(node_proc *p) {
  node *n = p->owner;
  char id[16], max_body[32], header_timeout[32], isolate_memory[32], max_isolates[32],
      idle_timeout[32], compact_idle[32], body_timeout[32], body_rate[32], max_conns[32],
      max_per_addr[32], python_pool[32];
  snprintf(id, sizeof id, "%d", p->id);
  snprintf(python_pool, sizeof python_pool, "%lld", (long long)n->cfg.python_pool);
  snprintf(body_timeout, sizeof body_timeout, "%lld", (long long)n->cfg.body_timeout_ms);
  snprintf(body_rate, sizeof body_rate, "%lld", (long long)n->cfg.body_min_rate);
  snprintf(max_conns, sizeof max_conns, "%lld", (long long)n->cfg.max_connections);
  snprintf(max_per_addr, sizeof max_per_addr, "%lld", (long long)n->cfg.max_connections_per_addr);
  snprintf(max_body, sizeof max_body, "%lld", (long long)n->cfg.max_body_mb * 1024 * 1024);
  snprintf(header_timeout, sizeof header_timeout, "%lld", (long long)n->cfg.header_timeout_ms);
  snprintf(isolate_memory, sizeof isolate_memory, "%lld", (long long)n->cfg.isolate_memory_mb);
  snprintf(max_isolates, sizeof max_isolates, "%lld", (long long)n->cfg.max_isolates);
  snprintf(idle_timeout, sizeof idle_timeout, "%lld", (long long)n->cfg.idle_timeout_s);
  snprintf(compact_idle, sizeof compact_idle, "%lld", (long long)n->cfg.compact_idle_s);
  char *args[] = {"edgenode-worker", "--id", id, "--ipc-fd", "3", "--listen-fd", "4",
                  "--data", n->data_dir, "--max-body-bytes", max_body,
                  "--header-timeout-ms", header_timeout, "--body-timeout-ms", body_timeout,
                  "--body-min-rate", body_rate, "--max-connections", max_conns,
                  "--max-connections-per-addr", max_per_addr, "--isolate-memory-mb", isolate_memory,
                  "--max-isolates", max_isolates, "--python-pool", python_pool,
                  "--idle-timeout-s", idle_timeout, "--compact-idle-s", compact_idle, "--log-level",
                  (char *)node_log_level_name(n->cfg.log_level), NULL, NULL, NULL};
  if (node_egress_socket(n)) { /* the two spare slots before the final NULL */
    args[ARRAY_SIZE(args) - 3] = "--egress-socket";
    args[ARRAY_SIZE(args) - 2] = (char *)node_egress_socket(n);
  }
  /* Dedicated processes: their tenant, its private socket, its own heap budget. */
  char *extra_args[8] = {NULL};
  size_t n_extra = 0;
  if (n->cfg.python_dir) {
    extra_args[n_extra++] = "--python-dir";
    extra_args[n_extra++] = n->cfg.python_dir;
  }
  int listen_fd = n->listen_fd;
  int has_running = running_slot(p) == 0;
  if (p->tenant) {
    extra_args[n_extra++] = "--tenant";
    extra_args[n_extra++] = p->tenant;
    listen_fd = p->listen_fd;
    snprintf(isolate_memory, sizeof isolate_memory, "%llu",
             (unsigned long long)(node_dedicated_memory_budget(n) >> 20) / 2);
  }
  if (has_running) {
    extra_args[n_extra++] = "--running-fd";
    extra_args[n_extra++] = "5";
  }
  if (node_replica_socket(n)) {
    extra_args[n_extra++] = "--replica-socket";
    extra_args[n_extra++] = (char *)node_replica_socket(n);
  }
  char *all_args[ARRAY_SIZE(args) + ARRAY_SIZE(extra_args) + NODE_SANDBOX_ARGS];
  size_t k = 0;
  for (size_t i = 0; args[i]; i++) all_args[k++] = args[i];
  for (size_t i = 0; extra_args[i]; i++) all_args[k++] = extra_args[i];
  k += node_sandbox_args(n, all_args + k);
  all_args[k] = NULL;

  char label[32];
  snprintf(label, sizeof label, "worker-%d", p->id);
  node_child_cmd cmd = {
      .file = n->worker_path,
      .args = all_args,
      .label = label,
      .fds = {listen_fd, has_running ? p->running_fd : -1},
      .n_fds = 2,
  };
  int rc = node_child_spawn(&p->child, &cmd);
  if (rc != 0) return rc;
  /* Before it can connect anywhere: the egress then lets it act for its
   * own tenant only, whatever its frames say. */
  if (p->tenant) {
    node_egress_bind(p->owner, p->child.pid, p->tenant);
    node_replica_bind(p->owner, p->child.pid, p->tenant);
  }
  p->memory_killed = 0;
  char extra[96];
  snprintf(extra, sizeof extra, "{\"worker\":%d,\"pid\":%d}", p->id, p->child.pid);
  log_write(LOG_INFO, NULL, NULL, extra, "worker spawned");
  return 0;
}

/* A process whose heartbeat stood still for PROTO_HEARTBEAT_MISSED_MS is
 * stopped (SIGSTOP) or wedged: its requests would wait for as long. It is
 * killed and, like any process that died, restarted. Nobody is blamed:
 * nothing says it was a tenant's doing. */
static void check_heartbeat(node_proc *p) {
  const int looks = PROTO_HEARTBEAT_MISSED_MS / 1000;
  proto_running *r = p->running;
  if (p->child.state != NODE_PROC_READY || r == NULL || r->magic != PROTO_RUNNING_MAGIC) return;
  uint64_t beat = __atomic_load_n(&r->heartbeat, __ATOMIC_RELAXED);
  /* A process whose heartbeat never moved has none (its thread could not
   * start): it is not watched. */
  if (beat != p->heartbeat_seen || beat == 0 || p->unresponsive_killed) {
    p->heartbeat_seen = beat;
    p->heartbeat_stale = 0;
    return;
  }
  if (++p->heartbeat_stale < looks) return;
  char extra[96];
  snprintf(extra, sizeof extra, "{\"worker\":%d,\"pid\":%d,\"silent_ms\":%d}", p->id,
           p->child.pid, p->heartbeat_stale * 1000);
  log_write(LOG_WARN, p->tenant, NULL, extra,
            "worker process stopped answering (stopped or wedged): replacing it");
  p->unresponsive_killed = 1;
  node_child_kill(&p->child, SIGKILL);
}

static void on_heartbeat_check(uv_timer_t *t) {
  node *n = container_of(t, node, heartbeat_timer);
  if (n->state != NODE_SERVING) return;
  for (int i = 0; i < n->n_procs; i++) check_heartbeat(&n->procs[i]);
  for (node_proc *p = n->dedicated; p; p = p->next) check_heartbeat(p);
}

int node_procs_start(node *n, char **err) {
  int rc = node_sandbox_prepare(n, err);
  if (rc != 0) return rc;
  if (access(n->worker_path, X_OK) != 0) {
    int rc = -errno;
    *err = xasprintf("worker executable %s: %s", n->worker_path, strerror(errno));
    return rc;
  }
  /* Slots never move (their handles are embedded): room for every count a
   * reload may ask for, plus the surge slot of a rolling restart. */
  n->n_procs = n->cfg.workers;
  n->procs = xcalloc(NODE_PROCS_CAPACITY, sizeof *n->procs);
  for (int i = 0; i < NODE_PROCS_CAPACITY; i++) {
    node_proc *p = &n->procs[i];
    p->owner = n;
    p->id = i + 1;
    p->running_fd = -1;
    node_child_init(&p->child, n->loop, &proc_ops, p);
  }
  for (int i = 0; i < n->n_procs; i++) spawn_proc(&n->procs[i]);
  if (uv_timer_init(n->loop, &n->heartbeat_timer) == 0) {
    n->heartbeat_timer_open = 1;
    uv_timer_start(&n->heartbeat_timer, on_heartbeat_check, 1000, 1000);
    uv_unref((uv_handle_t *)&n->heartbeat_timer);
  }
  return 0;
}

int node_proc_spawn(node_proc *p) { return spawn_proc(p); }

node_proc *node_proc_new_dedicated(node *n, int id, const char *tenant, int listen_fd) {
  node_proc *p = xcalloc(1, sizeof *p);
  p->owner = n;
  p->id = id;
  p->running_fd = -1;
  p->tenant = xstrdup(tenant);
  p->listen_fd = listen_fd;
  node_child_init(&p->child, n->loop, &proc_ops, p);
  p->next = n->dedicated;
  n->dedicated = p;
  return p;
}

void node_proc_release(node_proc *p) {
  p->released = 1;
  p->child.state = NODE_PROC_STOPPED;
  node_child_close(&p->child);
}

void node_procs_free(node *n) {
  for (int i = 0; n->procs && i < NODE_PROCS_CAPACITY; i++) json_decref(n->procs[i].process_stats);
  free(n->procs);
  n->procs = NULL;
  while (n->dedicated) { /* only at exit: the loop is gone, and with it every handle */
    node_proc *p = n->dedicated;
    n->dedicated = p->next;
    proc_free(p);
  }
}

node_proc *node_procs_next_dedicated(node *n, node_proc *prev) {
  return prev ? prev->next : n->dedicated;
}

uint64_t node_worker_memory_budget(const node *n) {
  if (n->cfg.worker_memory_mb > 0) return (uint64_t)n->cfg.worker_memory_mb << 20;
  uint64_t total = uv_get_constrained_memory();
  if (total == 0 || total > uv_get_total_memory()) total = uv_get_total_memory();
  uint64_t share = total / 4 * 3 / (uint64_t)(n->n_procs > 0 ? n->n_procs : 1);
  return share < (256u << 20) ? (256u << 20) : share;
}

uint64_t node_dedicated_memory_budget(const node *n) {
  if (n->cfg.cordon_memory_mb > 0) return (uint64_t)n->cfg.cordon_memory_mb << 20;
  return node_worker_memory_budget(n);
}

/* A slot's first process as a new node would start it. */
static void slot_spawn(node_proc *p) {
  node_child_reset(&p->child);
  p->ever_ready = 0;
  p->retiring = p->recycling = 0;
  p->cold_starts_total = p->evictions_total = p->evictions_seen = 0;
  p->stats_pid = 0;
  spawn_proc(p);
}

node_proc *node_procs_add(node *n) {
  if (n->procs == NULL || n->n_procs >= NODE_PROCS_CAPACITY) return NULL;
  node_proc *p = &n->procs[n->n_procs++];
  slot_spawn(p);
  return p;
}

int node_procs_undrain(node *n, char **err) {
  /* The port the node was reached on, even when the configuration says 0. */
  const char *colon = strrchr(n->listen_addr, ':');
  int port = colon ? atoi(colon + 1) : n->cfg.listen_port;
  int rc = listen_on(n, port, err);
  if (rc != 0) return rc;
  for (int i = 0; i < n->n_procs; i++)
    if (!node_child_live(&n->procs[i].child)) slot_spawn(&n->procs[i]);
  return 0;
}

void node_proc_drain(node_proc *p) {
  json_t *body = json_pack("{s:I}", "grace_ms", (json_int_t)p->owner->cfg.grace_ms);
  if (send_json(p, PROTO_DRAIN, 0, body) != 0) node_child_kill(&p->child, SIGTERM);
  json_decref(body);
}

void node_procs_drain(node *n) {
  json_t *body = json_pack("{s:I}", "grace_ms", (json_int_t)n->cfg.grace_ms);
  for (int i = 0; i < n->n_procs; i++) {
    node_proc *p = &n->procs[i];
    node_child_hold(&p->child);
    if (!p->child.alive) continue;
    /* Without a channel the drain cannot be asked for; SIGTERM means the same. */
    if (send_json(p, PROTO_DRAIN, 0, body) != 0) node_child_kill(&p->child, SIGTERM);
  }
  json_decref(body);
  for (node_proc *p = n->dedicated; p; p = p->next) {
    node_child_hold(&p->child);
    if (p->child.alive) node_proc_drain(p);
  }
}

void node_procs_kill(node *n) {
  for (int i = 0; i < n->n_procs; i++) {
    node_proc *p = &n->procs[i];
    if (!p->child.alive) continue;
    char extra[96];
    snprintf(extra, sizeof extra, "{\"worker\":%d,\"pid\":%d}", p->id, p->child.pid);
    log_write(LOG_WARN, NULL, NULL, extra, "killing worker");
    node_child_kill(&p->child, SIGKILL);
  }
  for (node_proc *p = n->dedicated; p; p = p->next) node_child_kill(&p->child, SIGKILL);
}

static void on_heartbeat_timer_closed(uv_handle_t *h) { (void)h; }

void node_procs_close(node *n) {
  if (n->heartbeat_timer_open) uv_close((uv_handle_t *)&n->heartbeat_timer, on_heartbeat_timer_closed);
  n->heartbeat_timer_open = 0;
  for (int i = 0; n->procs && i < NODE_PROCS_CAPACITY; i++) node_child_close(&n->procs[i].child);
  for (node_proc *p = n->dedicated; p; p = p->next) node_child_close(&p->child);
}

int node_procs_live(const node *n) {
  int live = 0;
  for (int i = 0; i < n->n_procs; i++) {
    const node_proc *p = &n->procs[i];
    if (node_child_live(&p->child)) live++;
  }
  for (const node_proc *p = n->dedicated; p; p = p->next)
    if (node_child_live(&p->child)) live++;
  return live;
}

int node_procs_all_ready(const node *n) {
  for (int i = 0; i < n->n_procs; i++)
    if (n->procs[i].child.state != NODE_PROC_READY) return 0;
  return n->n_procs > 0 && node_egress_ready(n);
}

void node_procs_send_all(node *n, uint8_t type, json_t *body) {
  for (int i = 0; i < n->n_procs; i++) send_json(&n->procs[i], type, 0, body);
  for (node_proc *p = n->dedicated; p; p = p->next) send_json(p, type, 0, body);
}

void node_procs_broadcast_changed(node *n, const char *name) {
  json_t *body = json_pack("{s:s}", "name", name);
  for (int i = 0; i < n->n_procs; i++) send_json(&n->procs[i], PROTO_WORKER_CHANGED, 0, body);
  /* A cordoned tenant is served by its dedicated process: it must hear of
   * a redeploy too, or it serves the old code until the uncordon. */
  for (node_proc *p = n->dedicated; p; p = p->next) {
    if (strcmp(p->tenant, name) == 0) send_json(p, PROTO_WORKER_CHANGED, 0, body);
  }
  json_decref(body);
}

