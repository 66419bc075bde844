/*
 * Worker processes: the ingress socket they share, spawning, the proto
 * channel to each, restarts with backoff, and validation requests.
 *
 * A slot (node_proc) lives as long as the node; its process and channel
 * handles are re-initialised for every restart, only after both were closed.
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

#include "jail.h"
#include "node.h"

#define VALIDATE_TIMEOUT_MS 30000
#define LISTEN_BACKLOG 1024

static int spawn_proc(node_proc *p);
static uint64_t schedule_restart(node_proc *p, uint64_t lived_ms);

const char *node_proc_state_name(node_proc_state s) {
  switch (s) {
    case NODE_PROC_STARTING: return "starting";
    case NODE_PROC_READY: return "ready";
    case NODE_PROC_RESTARTING: return "restarting";
    case NODE_PROC_STOPPED: return "stopped";
  }
  return "unknown";
}

static void format_addr(const char *host, int port, char out[96]) {
  if (strchr(host, ':')) snprintf(out, 96, "[%s]:%d", host, port);
  else snprintf(out, 96, "%s:%d", host, port);
}

int node_listen_socket(node *n, char **err) {
  struct sockaddr_storage ss;
  memset(&ss, 0, sizeof ss);
  const char *host = n->cfg.listen_host;
  int port = n->cfg.listen_port;
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

/* ---- sending ------------------------------------------------------------------ */


static int channel_usable(const node_proc *p) {
  return p->channel_started && !p->channel.closing;
}

static int send_json(node_proc *p, uint8_t type, uint32_t id, json_t *body) {
  if (!channel_usable(p)) return UV_EPIPE;
  char *text = json_dumps(body, JSON_COMPACT);
  if (text == NULL) return UV_EINVAL;
  int rc = proto_channel_send(&p->channel, type, id, text, strlen(text));
  free(text);
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
    if (p->state == NODE_PROC_READY && channel_usable(p) && !p->retiring && !p->recycling) {
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
  uint32_t id = proto_channel_request_id(&p->channel);
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
  if (p->state != NODE_PROC_STARTING) return;
  p->state = NODE_PROC_READY;
  char extra[128];
  snprintf(extra, sizeof extra, "{\"worker\":%d,\"pid\":%d}", p->id, p->pid);
  log_write(LOG_INFO, p->cordon ? node_cordons_tenant_name(p) : NULL, NULL, extra, "worker ready");
  /* Before any spec request of the process is answered: where tenants run. */
  node_cordons_on_hello(p);
  if (!p->cordon) node_on_procs_changed(n);
}

int node_mpk_enabled(const node *n) {
  int ready = 0;
  for (int i = 0; i < n->n_procs; i++) {
    const node_proc *p = &n->procs[i];
    if (p->state != NODE_PROC_READY) continue;
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
  int rc = node_registry_get(p->owner->registry, name, &row);
  if (rc == -ENOENT) {
    send_error(p, id, 404, "unknown worker");
    return;
  }
  if (rc != 0) {
    log_write(LOG_ERROR, name, NULL, NULL, "registry read failed: %s",
              node_registry_errmsg(p->owner->registry));
    send_error(p, id, 500, "registry read failed");
    return;
  }
  json_object_del(row, "created_at");
  json_object_del(row, "updated_at");
  json_t *limits = json_object_get(row, "limits");
  if (json_object_get(limits, "cpu_ms") == NULL)
    json_object_set_new(limits, "cpu_ms", json_integer(NODE_DEFAULT_CPU_MS));
  if (json_object_get(limits, "memory_mb") == NULL)
    json_object_set_new(limits, "memory_mb", json_integer(NODE_DEFAULT_MEMORY_MB));
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

static void on_frame(proto_channel *ch, const proto_frame *f) {
  node_proc *p = ch->data;
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
      node_metrics_on_stats(p, body);
      node_tenants_on_stats(p->owner, p, body);
      node_cordons_on_stats(p->owner, p, body);
      break;
    case PROTO_EVENT:
      node_cordons_on_event(p->owner, p, body);
      break;
    case PROTO_CORDON_DONE:
      node_cordons_on_done(p, body);
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
  if (n->state == NODE_DRAINING && node_procs_live(n) == 0) node_on_procs_stopped(n);
}

/* How a channel ended tells whether the worker is to be trusted. While the
 * node shuts down, a worker that exits closes its end with whatever the
 * supervisor sent last still unread, and the supervisor sees a reset: that
 * is the worker leaving as asked, not misbehaving. */
static int channel_failed(const node_proc *p, int reason) {
  if (reason == 0 || reason == UV_EOF) return 0;
  return !(reason == UV_ECONNRESET && p->owner->state == NODE_DRAINING);
}

static void on_channel_close(proto_channel *ch, int reason) {
  node_proc *p = ch->data;
  p->channel_open = 0;
  p->channel_started = 0;
  if (channel_failed(p, reason) && p->alive) {
    /* A worker that speaks garbage cannot be trusted with requests: kill it
     * and let the restart path bring a fresh one. */
    char extra[96];
    snprintf(extra, sizeof extra, "{\"worker\":%d,\"pid\":%d}", p->id, p->pid);
    log_write(LOG_WARN, NULL, NULL, extra, "channel to worker failed (%s): killing it",
              proto_strerror(reason));
    uv_process_kill(&p->process, SIGKILL);
  }
  fail_validations(p, UV_ECANCELED);
  node *n = p->owner;
  if (p->cordon) node_cordons_proc_closed(p); /* may free p */
  check_stopped(n);
}

static void on_process_closed(uv_handle_t *h) {
  node_proc *p = container_of((uv_process_t *)h, node_proc, process);
  node *n = p->owner;
  p->process_open = 0;
  if (p->cordon) node_cordons_proc_closed(p); /* may free p */
  check_stopped(n);
}

static void on_restart_timer(uv_timer_t *t) {
  node_proc *p = container_of(t, node_proc, restart_timer);
  if (p->owner->state == NODE_DRAINING) return;
  if (p->process_open || p->channel_open) {
    /* The old process's handles are still closing; they never take long. */
    uv_timer_start(&p->restart_timer, on_restart_timer, 10, 0);
    return;
  }
  if (spawn_proc(p) == 0)
    node_event_new(p->owner, "restart", p->cordon ? node_cordons_tenant_name(p) : NULL,
                   json_pack("{s:i, s:i, s:i}", "worker", p->id, "pid", p->pid, "restarts",
                             (int)p->restarts));
}

uint64_t node_proc_schedule_restart(node_proc *p, uint64_t lived_ms) { return schedule_restart(p, lived_ms); }

uint64_t node_backoff_next(uint64_t *backoff_ms, uint64_t lived_ms) {
  if (lived_ms >= NODE_STABLE_AFTER_MS || *backoff_ms == 0) *backoff_ms = NODE_BACKOFF_MIN_MS;
  uint64_t delay = *backoff_ms;
  *backoff_ms = delay * 2 > NODE_BACKOFF_MAX_MS ? NODE_BACKOFF_MAX_MS : delay * 2;
  return delay;
}

/* Returns the delay chosen. */
static uint64_t schedule_restart(node_proc *p, uint64_t lived_ms) {
  uint64_t delay = node_backoff_next(&p->backoff_ms, lived_ms);
  p->restarts++;
  p->state = NODE_PROC_RESTARTING;
  uv_timer_start(&p->restart_timer, on_restart_timer, delay, 0);
  return delay;
}

static void on_proc_exit(uv_process_t *h, int64_t status, int sig) {
  node_proc *p = container_of(h, node_proc, process);
  node *n = p->owner;
  p->alive = 0;
  uv_close((uv_handle_t *)h, on_process_closed);
  if (p->channel_started) proto_channel_close(&p->channel);
  fail_validations(p, UV_ECANCELED);
  node_tenants_proc_gone(n, p);
  uint64_t lived_ms = (time_mono_ns() - p->started_mono_ns) / 1000000u;
  if (p->cordon) {
    node_cordons_proc_exit(p, status, sig, lived_ms);
    return;
  }
  node_cordons_shared_exit(p);
  if (node_proc_planned_exit(p, status, sig)) return;
  char extra[256];
  if (n->state == NODE_DRAINING) {
    p->state = NODE_PROC_STOPPED;
    snprintf(extra, sizeof extra, "{\"worker\":%d,\"pid\":%d,\"exit_status\":%lld,\"signal\":%d}",
             p->id, p->pid, (long long)status, sig);
    log_write(status == 0 && sig == 0 ? LOG_INFO : LOG_WARN, NULL, NULL, extra, "worker exited");
    check_stopped(n);
    return;
  }
  const char *tenant = status == 0 && sig == 0 ? NULL : node_cordons_crash_tenant(p);
  p->memory_killed = 0;
  uint64_t delay = schedule_restart(p, lived_ms);
  snprintf(extra, sizeof extra,
           "{\"worker\":%d,\"pid\":%d,\"exit_status\":%lld,\"signal\":%d,\"restarts\":%u,"
           "\"delay_ms\":%llu,\"uptime_ms\":%llu}",
           p->id, p->pid, (long long)status, sig, p->restarts, (unsigned long long)delay,
           (unsigned long long)lived_ms);
  log_write(LOG_WARN, tenant, NULL, extra, "worker exited: restarting");
  json_t *details = json_loads(extra, 0, NULL);
  /* The tenant whose code was running when the process died (running slot). */
  if (tenant) json_object_set_new(details, "running", json_string(tenant));
  node_event(n, status == 0 && sig == 0 ? "exit" : sig == SIGSYS ? "sandbox_violation" : "crash",
             tenant, details);
  if (tenant) node_cordons_on_crash(n, tenant, details);
  json_decref(details);
  node_on_procs_changed(n);
}

/* The pipe was closed by us, not through the channel (it never started). */
static void on_pipe_closed(uv_handle_t *h) {
  node_proc *p = container_of((uv_pipe_t *)h, node_proc, channel.pipe);
  p->channel_open = 0;
  check_stopped(p->owner);
}

/* The shared page a shared worker process names its running tenant in; made
 * once per slot and zeroed for every process. 0, or -1 when unavailable. */
static int running_slot(node_proc *p) {
  if (p->cordon) return -1;
  if (p->running == NULL) {
    size_t size = (sizeof(proto_running) + 4095) & ~(size_t)4095;
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
  char id[16], max_body[32], header_timeout[32], isolate_memory[32], idle_timeout[32],
      compact_idle[32];
  snprintf(id, sizeof id, "%d", p->id);
  snprintf(max_body, sizeof max_body, "%lld", (long long)n->cfg.max_body_mb * 1024 * 1024);
  snprintf(header_timeout, sizeof header_timeout, "%lld", (long long)n->cfg.header_timeout_ms);
  snprintf(isolate_memory, sizeof isolate_memory, "%lld", (long long)n->cfg.isolate_memory_mb);
  snprintf(idle_timeout, sizeof idle_timeout, "%lld", (long long)n->cfg.idle_timeout_s);
  snprintf(compact_idle, sizeof compact_idle, "%lld", (long long)n->cfg.compact_idle_s);
  char *args[] = {"edgenode-worker", "--id", id, "--ipc-fd", "3", "--listen-fd", "4",
                  "--data", n->data_dir, "--max-body-bytes", max_body,
                  "--header-timeout-ms", header_timeout, "--isolate-memory-mb", isolate_memory,
                  "--idle-timeout-s", idle_timeout, "--compact-idle-s", compact_idle, "--log-level",
                  (char *)node_log_level_name(n->cfg.log_level), NULL, NULL, NULL};
  if (node_egress_socket(n)) { /* the two spare slots before the final NULL */
    args[ARRAY_SIZE(args) - 3] = "--egress-socket";
    args[ARRAY_SIZE(args) - 2] = (char *)node_egress_socket(n);
  }
  /* Dedicated processes: their tenant, its private socket, its own heap budget. */
  char *extra_args[8] = {NULL};
  int listen_fd = n->listen_fd;
  int has_running = running_slot(p) == 0;
  if (p->cordon) {
    extra_args[0] = "--tenant";
    extra_args[1] = (char *)node_cordons_tenant_name(p);
    listen_fd = node_cordons_listen_fd(p);
    snprintf(isolate_memory, sizeof isolate_memory, "%llu",
             (unsigned long long)(node_cordon_memory_budget(n) >> 20) / 2);
  } else if (has_running) {
    extra_args[0] = "--running-fd";
    extra_args[1] = "5";
  }
  char *all_args[ARRAY_SIZE(args) + ARRAY_SIZE(extra_args) + NODE_SANDBOX_ARGS];
  size_t k = 0;
  for (size_t i = 0; args[i]; i++) all_args[k++] = args[i];
  for (size_t i = 0; extra_args[i]; i++) all_args[k++] = extra_args[i];
  k += node_sandbox_args(n, all_args + k);
  all_args[k] = NULL;

  memset(&p->channel, 0, sizeof p->channel);
  int rc = uv_pipe_init(n->loop, &p->channel.pipe, 0);
  if (rc != 0) return rc;
  uv_stdio_container_t stdio[6];
  stdio[0].flags = UV_IGNORE;
  stdio[1].flags = UV_INHERIT_FD;
  stdio[1].data.fd = 1;
  stdio[2].flags = UV_INHERIT_FD;
  stdio[2].data.fd = 2;
  stdio[3].flags = UV_CREATE_PIPE | UV_READABLE_PIPE | UV_WRITABLE_PIPE;
  stdio[3].data.stream = (uv_stream_t *)&p->channel.pipe;
  stdio[4].flags = UV_INHERIT_FD;
  stdio[4].data.fd = listen_fd;
  stdio[5].flags = has_running ? UV_INHERIT_FD : UV_IGNORE;
  stdio[5].data.fd = p->running_fd;

  uv_process_options_t opts;
  memset(&opts, 0, sizeof opts);
  opts.exit_cb = on_proc_exit;
  opts.file = n->worker_path;
  opts.args = all_args;
  opts.stdio_count = 6;
  opts.stdio = stdio;

  p->started_mono_ns = time_mono_ns();
  p->started_at_ms = time_now_ms();
  p->state = NODE_PROC_STARTING;
  rc = uv_spawn(n->loop, &p->process, &opts);
  if (rc != 0) {
    log_write(LOG_ERROR, NULL, NULL, NULL, "worker-%d: spawn %s failed: %s", p->id,
              n->worker_path, uv_strerror(rc));
    p->process_open = 1;
    p->channel_open = 1;
    uv_close((uv_handle_t *)&p->process, on_process_closed);
    uv_close((uv_handle_t *)&p->channel.pipe, on_pipe_closed);
    schedule_restart(p, 0);
    return rc;
  }
  p->process_open = 1;
  p->channel_open = 1;
  p->alive = 1;
  p->pid = p->process.pid;
  p->memory_killed = 0;
  rc = proto_channel_start(&p->channel, on_frame, on_channel_close, p);
  if (rc != 0) {
    log_write(LOG_ERROR, NULL, NULL, NULL, "worker-%d: channel start failed: %s", p->id,
              uv_strerror(rc));
    uv_close((uv_handle_t *)&p->channel.pipe, on_pipe_closed);
    uv_process_kill(&p->process, SIGKILL);
    return rc;
  }
  p->channel_started = 1;
  char extra[96];
  snprintf(extra, sizeof extra, "{\"worker\":%d,\"pid\":%d}", p->id, p->pid);
  log_write(LOG_INFO, NULL, NULL, extra, "worker spawned");
  return 0;
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
    p->backoff_ms = NODE_BACKOFF_MIN_MS;
    p->state = NODE_PROC_STOPPED;
    p->running_fd = -1;
    uv_timer_init(n->loop, &p->restart_timer);
  }
  for (int i = 0; i < n->n_procs; i++) spawn_proc(&n->procs[i]);
  return 0;
}

int node_proc_spawn(node_proc *p) { return spawn_proc(p); }

node_proc *node_procs_add(node *n) {
  if (n->procs == NULL || n->n_procs >= NODE_PROCS_CAPACITY) return NULL;
  node_proc *p = &n->procs[n->n_procs++];
  uv_timer_stop(&p->restart_timer);
  p->restarts = 0;
  p->backoff_ms = NODE_BACKOFF_MIN_MS;
  p->ever_ready = 0;
  p->retiring = p->recycling = 0;
  p->cold_starts_total = p->evictions_total = p->evictions_seen = 0;
  p->stats_pid = 0;
  p->pid = 0;
  spawn_proc(p);
  return p;
}

void node_proc_drain(node_proc *p) {
  json_t *body = json_pack("{s:I}", "grace_ms", (json_int_t)p->owner->cfg.grace_ms);
  if (send_json(p, PROTO_DRAIN, 0, body) != 0) uv_process_kill(&p->process, SIGTERM);
  json_decref(body);
}

void node_procs_drain(node *n) {
  json_t *body = json_pack("{s:I}", "grace_ms", (json_int_t)n->cfg.grace_ms);
  for (int i = 0; i < n->n_procs; i++) {
    node_proc *p = &n->procs[i];
    if (p->state == NODE_PROC_RESTARTING) {
      uv_timer_stop(&p->restart_timer);
      p->state = NODE_PROC_STOPPED;
    }
    if (!p->alive) continue;
    /* Without a channel the drain cannot be asked for; SIGTERM means the same. */
    if (send_json(p, PROTO_DRAIN, 0, body) != 0) uv_process_kill(&p->process, SIGTERM);
  }
  json_decref(body);
  node_cordons_drain(n);
}

void node_procs_kill(node *n) {
  for (int i = 0; i < n->n_procs; i++) {
    node_proc *p = &n->procs[i];
    if (!p->alive) continue;
    char extra[96];
    snprintf(extra, sizeof extra, "{\"worker\":%d,\"pid\":%d}", p->id, p->pid);
    log_write(LOG_WARN, NULL, NULL, extra, "killing worker");
    uv_process_kill(&p->process, SIGKILL);
  }
  node_cordons_kill(n);
}

void node_procs_close(node *n) {
  for (int i = 0; n->procs && i < NODE_PROCS_CAPACITY; i++)
    if (!uv_is_closing((uv_handle_t *)&n->procs[i].restart_timer))
      uv_close((uv_handle_t *)&n->procs[i].restart_timer, NULL);
  node_cordons_stop(n);
}

int node_procs_live(const node *n) {
  int live = 0;
  for (int i = 0; i < n->n_procs; i++) {
    const node_proc *p = &n->procs[i];
    if (p->alive || p->process_open || p->channel_open) live++;
  }
  return live + node_cordons_live(n);
}

int node_procs_all_ready(const node *n) {
  for (int i = 0; i < n->n_procs; i++)
    if (n->procs[i].state != NODE_PROC_READY) return 0;
  return n->n_procs > 0 && node_egress_ready(n);
}

void node_procs_broadcast_changed(node *n, const char *name) {
  json_t *body = json_pack("{s:s}", "name", name);
  for (int i = 0; i < n->n_procs; i++) send_json(&n->procs[i], PROTO_WORKER_CHANGED, 0, body);
  /* A cordoned tenant is served by its dedicated process: it must hear of
   * a redeploy too, or it serves the old code until the uncordon. */
  for (node_proc *p = node_cordons_next_proc(n, NULL); p; p = node_cordons_next_proc(n, p)) {
    const char *tenant = node_cordons_tenant_name(p);
    if (tenant != NULL && strcmp(tenant, name) == 0) send_json(p, PROTO_WORKER_CHANGED, 0, body);
  }
  json_decref(body);
}

/* ---- the sandbox of the processes it spawns (jail/) ------------------------------ */

size_t node_sandbox_args(const node *n, char **out) {
  size_t k = 0;
  if (n->cfg.no_sandbox) {
    out[k++] = "--no-jail";
    return k;
  }
  if (n->cfg.require_sandbox) out[k++] = "--require-sandbox";
  if (n->cfg.user) {
    out[k++] = "--jail-user";
    out[k++] = n->cfg.user;
  }
  return k;
}

void node_sandbox_parse(json_t *report, unsigned *on, unsigned *off) {
  *on = *off = 0;
  json_t *layers = json_object_get(report, "layers");
  for (int i = 0; i < JAIL_LAYERS; i++) {
    const char *state =
        json_string_value(json_object_get(json_object_get(layers, jail_layer_name(i)), "state"));
    if (state && strcmp(state, "on") == 0) *on |= 1u << i;
    if (state && strcmp(state, "off") == 0) *off |= 1u << i;
  }
}

json_t *node_sandbox_json(unsigned on, unsigned off) {
  json_t *o = json_object();
  for (int i = 0; i < JAIL_LAYERS; i++)
    json_object_set_new(o, jail_layer_name(i),
                        json_string(on >> i & 1    ? "on"
                                    : off >> i & 1 ? "off"
                                                   : "not_wanted"));
  return o;
}

const char *node_sandbox_layer(const node *n, int i, int *on) {
  if (i < 0 || i >= JAIL_LAYERS) return NULL;
  int ready = 0, all = 1;
  for (int k = 0; k < n->n_procs; k++) {
    const node_proc *p = &n->procs[k];
    if (p->state != NODE_PROC_READY) continue;
    ready++;
    all &= p->jail_on >> i & 1;
  }
  *on = ready > 0 && all;
  return jail_layer_name(i);
}

/* Enters a worker's jail in a throw-away child: what the kernel refuses. */
static int probe_sandbox(node *n, jail_report *r) {
  jail_config jc = {.kind = JAIL_WORKER, .new_netns = 1, .strict = 1};
  if (n->cfg.user && jail_parse_user(n->cfg.user, &jc.uid, &jc.gid) == 0) jc.drop_user = 1;
  int fds[2];
  if (pipe(fds) != 0) return -errno;
  pid_t pid = fork();
  if (pid < 0) {
    int rc = -errno;
    close(fds[0]);
    close(fds[1]);
    return rc;
  }
  if (pid == 0) {
    close(fds[0]);
    int rc = jail_enter(&jc, r);
    _exit(write(fds[1], r, sizeof *r) == (ssize_t)sizeof *r && rc == 0 ? 0 : 1);
  }
  close(fds[1]);
  ssize_t got = read(fds[0], r, sizeof *r);
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  if (got != (ssize_t)sizeof *r) return -EIO;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -EPERM;
}

/*
 * Once, before the egress and the worker processes start. With a user, the
 * data directory (0700) lets that user's group through to the directories
 * the sandbox hands it. Under --require-sandbox, a layer the kernel refuses
 * stops the node here rather than in every process it would restart.
 */
int node_sandbox_prepare(node *n, char **err) {
  static int done;
  if (done || n->cfg.no_sandbox) return 0;
  done = 1;
  uid_t uid;
  gid_t gid;
  if (n->cfg.user && geteuid() == 0 && jail_parse_user(n->cfg.user, &uid, &gid) == 0 &&
      (chown(n->data_dir, (uid_t)-1, gid) != 0 || chmod(n->data_dir, 0710) != 0)) {
    int rc = -errno;
    *err = xasprintf("--user: %s: %s", n->data_dir, strerror(errno));
    return rc;
  }
  if (!n->cfg.require_sandbox) return 0;
  jail_report r;
  int rc = probe_sandbox(n, &r);
  if (rc == 0) return 0;
  for (int i = 0; rc == -EPERM && i < JAIL_LAYERS; i++) {
    if (r.layer[i].state != JAIL_OFF || r.layer[i].err == 0) continue; /* on, or not reached */
    *err = xasprintf("--require-sandbox: the kernel refuses %s (%s)",
                     jail_layer_name((jail_layer)i), r.layer[i].detail);
    return -EPERM;
  }
  *err = xasprintf("--require-sandbox: cannot try the sandbox: %s", strerror(-rc));
  return rc;
}
