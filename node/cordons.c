/*
 * Cordoning: the monitor (cordon/) fed by the worker processes' reports (this
 * file is procs.c's listener), the cordoned tenants' state in node.db, when
 * their dedicated worker processes start, restart and go (procs.c keeps the
 * slots), and the control API's cordon and uncordon routes.
 *
 * A cordoned tenant runs in a worker process of its own, started with
 * --tenant NAME at a lower scheduling priority with its own memory budget.
 * That process serves HTTP on a private loopback socket that the supervisor
 * binds and keeps for as long as the cordon lasts, so that the port stays the
 * same across restarts of the process and a request forwarded while it
 * restarts waits in the socket's backlog. Shared worker processes learn where
 * each tenant runs from PROTO_CORDON and forward its requests there.
 *
 * Moving in: the state is written to node.db, the socket bound, the process
 * spawned; every shared process is told at once (it forwards new requests,
 * holding them until the dedicated process said HELLO, lets its running ones
 * finish, then discards the tenant's isolates and closes its facet).
 * Moving out (uncordon): every shared process is told first and answers once
 * nothing of the tenant is on its way to the dedicated process; only then is
 * the dedicated process drained, so that no forwarded request is dropped.
 * A dedicated process that dies is restarted with back-off; crashing by a
 * fault of its own (blamed()) cordon_suspend_crashes times within
 * cordon_suspend_window_s suspends the tenant (503 everywhere) until an
 * operator uncordons it. A stopped one is replaced like a shared one
 * (procs.c watches every process's heartbeat).
 *
 * At most max_dedicated of them run (30 spinning tenants once made 30
 * processes, 55 held 2 GiB). When one more must start (a new cordon, or a
 * sleeping one woken), the tenant with the most CPU in the last minute among
 * those with a process and the newcomer is suspended for dedicated_suspend_s
 * (a tie: the newcomer, so that running ones are not churned); its process
 * drains away. Such a suspension is not written to node.db: it is about the
 * processes running now. When it ends the tenant is cordoned again, asleep.
 * A dedicated process without a request for dedicated_idle_s drains and
 * exits; its tenant stays cordoned, asleep: the supervisor watches the
 * private socket, and the first connection that waits in its backlog starts
 * the process again (shared processes go on forwarding meanwhile).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <sched.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "node.h"

#define LISTEN_BACKLOG 1024
#define DONE_TIMEOUT_EXTRA_MS 5000 /* past grace_ms, stop waiting for shared processes */
#define MAX_CRASHES 32
#define REASON_MAX 500
#define DEDICATED_ID_BASE 1001

typedef enum cordon_state { CORDONED = 1, SUSPENDED = 2 } cordon_state;
/* Why a tenant is suspended. */
typedef enum suspend_cause { CAUSE_NONE, CAUSE_CRASHES, CAUSE_CAP } suspend_cause;

typedef struct node_cordon {
  struct node_cordon *next;
  node *owner;
  char *name;
  cordon_state state;
  char *reason;
  char *rule;              /* the monitor's rule, NULL when an operator cordoned it */
  char *by;                /* "monitor" or "operator" */
  int64_t since_ms;
  node_proc *proc;         /* the dedicated process slot; NULL when suspended */
  int listen_fd;           /* its private socket, -1 when none */
  char *socket_path;       /* owned: where that socket is (DATA/cordon/N.sock), or NULL */
  int64_t crashes[MAX_CRASHES]; /* monotonic ms of the latest crashes, a ring */
  unsigned n_crashes;
  suspend_cause cause;     /* suspended: why */
  int64_t until_ms;        /* suspended for the cap: when it ends (epoch ms); 0 otherwise */
  char *held_reason;       /* suspended for the cap: the cordon's reason and since, back after */
  int64_t held_since_ms;
  int asleep;              /* cordoned, no process: the next connection on the socket starts one */
  int going_idle;          /* its process was drained for want of requests */
  uv_poll_t *wake;         /* while asleep: the private socket, watched (owned; see unwatch) */
  int64_t active_ms;       /* monotonic: the last request seen, or when its process started */
  /* Uncordoning: waiting for the shared processes, then for the process to exit. */
  int leaving;
  unsigned char waiting_for[NODE_PROCS_CAPACITY]; /* shared slots yet to answer */
  uv_timer_t done_timer;
  int done_timer_open;
} node_cordon;

struct node_cordons {
  cordon_monitor *monitor;
  node_cordon *list;       /* cordoned and suspended tenants */
  node_cordon *leaving;    /* uncordoned, their dedicated process still draining */
  int next_id;
  int64_t last_expire_ms;
  uint64_t suspensions;    /* for max_dedicated, since the node started */
  uint64_t idle_exits;     /* dedicated processes that exited for want of requests */
};

static int64_t mono_ms(void) { return (int64_t)(time_mono_ns() / 1000000u); }

static const char *state_name(cordon_state s) { return s == SUSPENDED ? "suspended" : "cordoned"; }

static node_cordon *find(const node *n, const char *name) {
  if (n->cordons == NULL) return NULL;
  for (node_cordon *c = n->cordons->list; c; c = c->next)
    if (strcmp(c->name, name) == 0) return c;
  return NULL;
}

const char *node_cordon_state(const node *n, const char *name) {
  node_cordon *c = find(n, name);
  return c ? state_name(c->state) : "active";
}

static void log_json(log_level level, const char *tenant, json_t *extra, const char *msg) {
  char *text = json_dumps(extra, JSON_COMPACT);
  log_write(level, tenant, NULL, text, "%s", msg);
  free(text);
}

/* ---- node.db ------------------------------------------------------------------------- */

static int persist(node *n, const node_cordon *c) {
  return node_db_cordon_put(n->db, c->name, state_name(c->state), c->reason, c->rule, c->by,
                            c->since_ms);
}

static int unpersist(node *n, const char *name) { return node_db_cordon_delete(n->db, name); }

static node_cordon *entry_new(node *n, const char *name, cordon_state state, const char *reason,
                              const char *rule, const char *by, int64_t since_ms) {
  node_cordon *c = xcalloc(1, sizeof *c);
  c->owner = n;
  c->name = xstrdup(name);
  c->state = state;
  c->reason = xstrdup(reason);
  c->rule = rule ? xstrdup(rule) : NULL;
  c->by = xstrdup(by);
  c->since_ms = since_ms;
  c->listen_fd = -1;
  return c;
}

static void wake_closed(uv_handle_t *h) { free(h); }

/* The watch on the private socket ends (before the socket is closed, as libuv
 * requires); its handle frees itself, the cordon need not wait for it. */
static void unwatch(node_cordon *c) {
  if (c->wake == NULL) return;
  uv_close((uv_handle_t *)c->wake, wake_closed);
  c->wake = NULL;
}

/* Forwarded requests still in its backlog are refused from here on. */
static void close_private(node_cordon *c) {
  unwatch(c);
  c->asleep = 0;
  if (c->listen_fd >= 0) close(c->listen_fd);
  c->listen_fd = -1;
  if (c->socket_path) unlink(c->socket_path);
  free(c->socket_path);
  c->socket_path = NULL;
}

static void entry_free(node_cordon *c) {
  close_private(c);
  free(c->name);
  free(c->reason);
  free(c->rule);
  free(c->by);
  free(c->held_reason);
  free(c);
}

static int load(node *n) {
  json_t *rows = NULL;
  if (node_db_cordon_list(n->db, &rows) != 0) return -EIO;
  size_t i;
  json_t *row;
  json_array_foreach(rows, i, row) {
    const char *name = json_string_value(json_object_get(row, "name"));
    const char *state = json_string_value(json_object_get(row, "state"));
    const char *reason = json_string_value(json_object_get(row, "reason"));
    const char *by = json_string_value(json_object_get(row, "by"));
    if (name == NULL || !worker_name_valid(name, strlen(name))) continue;
    /* Only crash suspensions are written down (a cap suspension is not). */
    node_cordon *c = entry_new(n, name, state && strcmp(state, "suspended") == 0 ? SUSPENDED : CORDONED,
                               reason ? reason : "",
                               json_string_value(json_object_get(row, "rule")),
                               by ? by : "operator",
                               json_integer_value(json_object_get(row, "since")));
    if (c->state == SUSPENDED) c->cause = CAUSE_CRASHES;
    c->next = n->cordons->list;
    n->cordons->list = c;
  }
  json_decref(rows);
  return 0;
}

/* ---- telling the shared processes -------------------------------------------------------- */

static json_t *placement_json(const node_cordon *c, const char *state) {
  json_t *body = json_pack("{s:s, s:s}", "name", c->name, "state", state);
  if (strcmp(state, "cordoned") == 0) {
    json_object_set_new(body, "socket", json_string(c->socket_path));
    /* Asleep, it is "ready" too: a connection waiting in the socket's backlog starts it. */
    int ready = c->asleep || (c->proc && c->proc->child.state == NODE_PROC_READY);
    json_object_set_new(body, "ready", json_boolean(ready));
  } else if (strcmp(state, "suspended") == 0 && c->cause == CAUSE_CAP) {
    char until[32];
    node_iso8601(c->until_ms, until);
    char *msg = xasprintf("tenant suspended: %s; it is cordoned again at %s, or earlier when an "
                          "operator uncordons it", c->reason, until);
    json_object_set_new(body, "error", json_string(msg));
    json_object_set_new(body, "until", json_integer(c->until_ms));
    free(msg);
  } else if (strcmp(state, "suspended") == 0) {
    char *msg = xasprintf("tenant suspended: %s; an operator must uncordon it", c->reason);
    json_object_set_new(body, "error", json_string(msg));
    free(msg);
  }
  return body;
}

static void tell(node_proc *p, const node_cordon *c, const char *state, uint32_t id) {
  json_t *body = placement_json(c, state);
  node_proc_send_json(p, PROTO_CORDON, id, body);
  json_decref(body);
}

static void broadcast(node *n, const node_cordon *c) {
  for (int i = 0; i < n->n_procs; i++)
    if (node_proc_usable(&n->procs[i])) tell(&n->procs[i], c, state_name(c->state), 0);
}

static void on_hello(node_proc *p) {
  node *n = p->owner;
  if (n->cordons == NULL) return;
  if (p->cordon) { /* the dedicated process is up: forward to it */
    /* Lowered only now: at a low priority on a busy machine, starting V8
     * took seconds, and the tenant's requests wait for it meanwhile.
     * Lowering another process's priority needs no privilege. */
    if (setpriority(PRIO_PROCESS, (id_t)p->child.pid, n->cfg.cordon_nice) != 0)
      log_write(LOG_WARN, p->cordon->name, NULL, NULL, "setpriority: %s", strerror(errno));
    /* Under SCHED_IDLE it runs only on CPU time the shared processes leave:
     * a nice value still takes a share, and ten spinning tenants at nice 10
     * made a steady tenant's p99 ten times worse (1.4x with SCHED_IDLE). */
    struct sched_param idle = {0};
    if (n->cfg.cordon_idle && sched_setscheduler(p->child.pid, SCHED_IDLE, &idle) != 0)
      log_write(LOG_WARN, p->cordon->name, NULL, NULL, "sched_setscheduler: %s", strerror(errno));
    p->cordon->active_ms = mono_ms(); /* its idle time counts from here */
    if (!p->cordon->leaving) broadcast(n, p->cordon);
    return;
  }
  for (node_cordon *c = n->cordons->list; c; c = c->next) tell(p, c, state_name(c->state), 0);
}

/* ---- dedicated processes ---------------------------------------------------------------- */

/* A unix socket, not a loopback port: shared worker processes may make no
 * other kind (their sandbox, jail/). Any user may connect: only the worker
 * processes get through the data directory. */
static int bind_private(node *n, node_cordon *c, char **err) {
  static unsigned seq;
  char *dir = xasprintf("%s/cordon", n->data_dir);
  if (mkdir(dir, 0711) != 0 && errno != EEXIST) {
    int rc = -errno;
    *err = xasprintf("%s: %s", dir, strerror(errno));
    free(dir);
    return rc;
  }
  char *path = xasprintf("%s/%u.sock", dir, ++seq);
  free(dir);
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  if (strlen(path) >= sizeof addr.sun_path) {
    *err = xasprintf("private socket %s: path too long", path);
    free(path);
    return -ENAMETOOLONG;
  }
  memcpy(addr.sun_path, path, strlen(path) + 1);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    int rc = -errno;
    *err = xasprintf("socket: %s", strerror(errno));
    free(path);
    return rc;
  }
  unlink(path); /* left by an earlier run */
  if (bind(fd, (struct sockaddr *)&addr, sizeof addr) != 0 || chmod(path, 0666) != 0 ||
      listen(fd, LISTEN_BACKLOG) != 0) {
    int rc = -errno;
    *err = xasprintf("private socket %s: %s", path, strerror(errno));
    close(fd);
    unlink(path);
    free(path);
    return rc;
  }
  c->listen_fd = fd;
  c->socket_path = path;
  return 0;
}

static int start_dedicated(node *n, node_cordon *c) {
  char *err = NULL;
  if (c->listen_fd < 0 && bind_private(n, c, &err) != 0) {
    log_write(LOG_ERROR, c->name, NULL, NULL, "cannot start the dedicated process: %s", err);
    free(err);
    return -1;
  }
  node_proc *p = node_proc_new_dedicated(n, DEDICATED_ID_BASE + n->cordons->next_id++, c->name,
                                         c->listen_fd);
  p->cordon = c;
  c->proc = p;
  c->asleep = 0;
  c->going_idle = 0;
  c->active_ms = mono_ms();
  if (node_proc_spawn(p) != 0) return -1; /* spawn failures schedule a restart themselves */
  return 0;
}

/* procs.c frees the slot once its process, channel and timer are closed (on_dedicated_gone). */
static void release_proc(node_proc *p) {
  node_cordon *c = p->cordon;
  if (c && c->proc == p) c->proc = NULL;
  /* Only an uncordon waits for the slot to go; otherwise the cordon may go first. */
  if (c && !c->leaving) p->cordon = NULL;
  node_proc_release(p);
}

static void leaving_remove(node *n, node_cordon *c) {
  for (node_cordon **pp = &n->cordons->leaving; *pp; pp = &(*pp)->next) {
    if (*pp == c) {
      *pp = c->next;
      break;
    }
  }
}

static void done_timer_closed(uv_handle_t *h) {
  node_cordon *c = container_of((uv_timer_t *)h, node_cordon, done_timer);
  entry_free(c);
}

/* A released dedicated slot is gone (procs.c frees it): so is a cordon that waited for it. */
static void on_dedicated_gone(node_proc *p) {
  node_cordon *c = p->cordon;
  node *n = p->owner;
  if (c && c->leaving && c->proc == NULL) {
    leaving_remove(n, c);
    if (c->done_timer_open) uv_close((uv_handle_t *)&c->done_timer, done_timer_closed);
    else entry_free(c);
  }
  (void)n;
}


/* ---- the cap, sleep and wake ------------------------------------------------------------- */

/* Whether c's process counts against max_dedicated: not one on its way out
 * (a suspended tenant's, one draining for being idle; an uncordoned tenant's
 * is not listed at all), or a newcomer would be refused for it. */
static int counts(const node_cordon *c) {
  return c->state == CORDONED && c->proc && !c->going_idle;
}

static int running_count(const node *n) {
  int count = 0;
  for (const node_cordon *c = n->cordons->list; c; c = c->next) count += counts(c);
  return count;
}

/* Past max_dedicated, the tenant to suspend so that `cand` may run: the one
 * with the most CPU in the last minute among those with a process and cand,
 * cand itself on a tie (*cpu: its figure). NULL while there is room. */
static node_cordon *over_cap(node *n, node_cordon *cand, double *cpu) {
  if (running_count(n) < n->cfg.max_dedicated) return NULL;
  node_cordon *worst = cand;
  double most = node_stats_cpu_recent(n, cand->name);
  for (node_cordon *c = n->cordons->list; c; c = c->next) {
    if (c == cand || !counts(c)) continue;
    double used = node_stats_cpu_recent(n, c->name);
    if (used > most) {
      worst = c;
      most = used;
    }
  }
  *cpu = most;
  return worst;
}

/* Suspended for the cap: no process, 503 with Retry-After until until_ms.
 * Its process, if any, finishes what it runs (within grace_ms) and exits. */
static void suspend_for_cap(node *n, node_cordon *c, double cpu_ms) {
  int64_t now = time_now_ms();
  free(c->held_reason);
  c->held_reason = c->reason;
  c->held_since_ms = c->since_ms;
  c->reason = xasprintf("the node runs its max_dedicated (%d) dedicated processes and this tenant "
                        "used the most CPU of those that would run (%.0f ms in the last minute)",
                        n->cfg.max_dedicated, cpu_ms);
  c->state = SUSPENDED;
  c->cause = CAUSE_CAP;
  c->since_ms = now;
  c->until_ms = now + n->cfg.dedicated_suspend_s * 1000;
  c->going_idle = 0;
  n->cordons->suspensions++;
  close_private(c); /* forwarded requests not yet accepted are refused now */
  char until[32];
  node_iso8601(c->until_ms, until);
  json_t *extra = json_pack("{s:s, s:s, s:i, s:I, s:I, s:s}", "reason", c->reason, "cause",
                            "max_dedicated", "max_dedicated", n->cfg.max_dedicated, "cpu_ms",
                            (json_int_t)(cpu_ms + 0.5), "suspend_s",
                            (json_int_t)n->cfg.dedicated_suspend_s, "until", until);
  node_proc *p = c->proc;
  if (p) json_object_set_new(extra, "pid", json_integer(p->child.pid));
  log_json(LOG_WARN, c->name, extra,
           "tenant suspended: over max_dedicated, it used the most CPU of the dedicated tenants");
  node_event(n, "suspend", c->name, extra);
  json_decref(extra);
  broadcast(n, c);
  if (p == NULL) return;
  node_child_hold(&p->child);
  if (p->child.alive) node_proc_drain(p);
  else release_proc(p); /* between a crash and its restart */
}

/* Suspends others until `cand` fits under the cap: 1, or 0 when cand is the
 * worst itself (its CPU in *cand_cpu; the caller suspends it). */
static int make_room(node *n, node_cordon *cand, double *cand_cpu) {
  double cpu = 0;
  node_cordon *victim;
  while ((victim = over_cap(n, cand, &cpu)) != NULL) {
    if (victim == cand) {
      *cand_cpu = cpu;
      return 0;
    }
    suspend_for_cap(n, victim, cpu);
  }
  return 1;
}

/* A process for `c` now, under the cap. */
static void wake_now(node *n, node_cordon *c) {
  double cpu = 0;
  c->asleep = 0;
  if (make_room(n, c, &cpu)) start_dedicated(n, c);
  else suspend_for_cap(n, c, cpu);
}

static void on_wake(uv_poll_t *h, int status, int events) {
  (void)events;
  node_cordon *c = h->data;
  node *n = c->owner;
  unwatch(c);
  if (n->state == NODE_DRAINING) return; /* its requests go with the node */
  if (status < 0)
    log_write(LOG_WARN, c->name, NULL, NULL, "watching the private socket: %s",
              uv_strerror(status));
  log_write(LOG_INFO, c->name, NULL, NULL,
            "a request for a sleeping cordoned tenant: starting its dedicated process");
  wake_now(n, c);
}

/* Asleep: cordoned without a process; the first connection waiting in the
 * private socket's backlog starts one (a connection waiting already: at once). */
static void fall_asleep(node *n, node_cordon *c) {
  c->asleep = 1;
  if (c->listen_fd < 0 || c->wake) return;
  uv_poll_t *h = xcalloc(1, sizeof *h);
  int rc = uv_poll_init(n->loop, h, c->listen_fd);
  if (rc != 0) {
    free(h);
  } else {
    h->data = c;
    c->wake = h;
    rc = uv_poll_start(h, UV_READABLE, on_wake);
  }
  if (rc == 0) return;
  /* Unwatched, its requests would wait in the backlog for nothing. */
  log_write(LOG_ERROR, c->name, NULL, NULL,
            "cannot watch the private socket (%s): starting the dedicated process now",
            uv_strerror(rc));
  unwatch(c);
  wake_now(n, c);
}

/* A cap suspension that is over: cordoned again, asleep (its process starts
 * with its next request, under the cap like any). */
static void resume(node *n, node_cordon *c) {
  c->state = CORDONED;
  c->cause = CAUSE_NONE;
  c->until_ms = 0;
  if (c->held_reason) {
    free(c->reason);
    c->reason = c->held_reason;
    c->held_reason = NULL;
    c->since_ms = c->held_since_ms;
  }
  char *err = NULL;
  if (bind_private(n, c, &err) != 0) {
    log_write(LOG_ERROR, c->name, NULL, NULL, "cordon: %s", err);
    free(err);
  }
  json_t *extra = json_pack("{s:s, s:s}", "by", "expiry", "reason", c->reason);
  log_json(LOG_INFO, c->name, extra,
           "suspension over: cordoned again; its next request starts its dedicated process");
  node_event(n, "resume", c->name, extra);
  json_decref(extra);
  fall_asleep(n, c);
  broadcast(n, c);
}

/* Checked at every statistics report (each process sends one a second). */
static void end_suspensions(node *n) {
  int64_t now = time_now_ms();
  for (node_cordon *c = n->cordons->list; c; c = c->next) {
    /* Not while its old process still drains: one process per tenant. */
    if (c->state == SUSPENDED && c->cause == CAUSE_CAP && c->proc == NULL && now >= c->until_ms)
      resume(n, c);
  }
}

/* A dedicated process's report: without a request for dedicated_idle_s it
 * drains and exits, and its tenant sleeps (on_dedicated_exit). */
static void note_activity(node_proc *p, json_t *body) {
  node *n = p->owner;
  node_cordon *c = p->cordon;
  if (c == NULL || c->leaving || c->state != CORDONED || c->proc != p || c->going_idle) return;
  int64_t now = mono_ms();
  json_t *mine = json_object_get(json_object_get(body, "tenants"), c->name);
  json_t *live = json_object_get(json_object_get(body, "process"), "requests_live");
  if (json_integer_value(json_object_get(mine, "requests")) > 0 || json_integer_value(live) > 0) {
    c->active_ms = now;
    return;
  }
  if (n->cfg.dedicated_idle_s == 0 || p->child.state != NODE_PROC_READY ||
      n->state == NODE_DRAINING || now - c->active_ms < n->cfg.dedicated_idle_s * 1000)
    return;
  c->going_idle = 1;
  node_child_hold(&p->child);
  json_t *extra = json_pack("{s:i, s:i, s:I}", "worker", p->id, "pid", p->child.pid, "idle_s",
                            (json_int_t)n->cfg.dedicated_idle_s);
  log_json(LOG_INFO, c->name, extra,
           "dedicated process idle: draining it; the tenant's next request starts it again");
  json_decref(extra);
  node_proc_drain(p);
}

/* ---- cordon, suspend, uncordon ------------------------------------------------------------- */

static json_t *entry_view(const node_cordon *c) {
  char since[32];
  node_iso8601(c->since_ms, since);
  json_t *v = json_pack("{s:s, s:s, s:s?, s:s, s:s}", "state", state_name(c->state), "reason",
                        c->reason, "rule", c->rule, "by", c->by, "since", since);
  if (c->socket_path) json_object_set_new(v, "socket", json_string(c->socket_path));
  node_proc *p = c->proc;
  if (p) {
    json_t *d = json_pack("{s:i, s:i, s:s, s:i}", "worker", p->id, "pid", p->child.pid, "state",
                          node_proc_state_name(p->child.state), "restarts", (int)p->child.restarts);
    json_object_set_new(v, "dedicated", d);
  }
  json_object_set_new(v, "crashes", json_integer(c->n_crashes));
  if (c->asleep) json_object_set_new(v, "asleep", json_true());
  if (c->state == SUSPENDED)
    json_object_set_new(v, "cause",
                        json_string(c->cause == CAUSE_CAP ? "max_dedicated" : "crashes"));
  if (c->until_ms > 0) {
    char until[32];
    node_iso8601(c->until_ms, until);
    json_object_set_new(v, "until", json_string(until));
  }
  return v;
}

node_dedicated_counts node_cordons_counts(const node *n) {
  node_dedicated_counts out = {.max = n->cfg.max_dedicated};
  if (n->cordons == NULL) return out;
  out.running = running_count(n);
  out.suspensions = n->cordons->suspensions;
  out.idle_exits = n->cordons->idle_exits;
  return out;
}

json_t *node_cordon_view(const node *n, const char *name) {
  node_cordon *c = find(n, name);
  return c ? entry_view(c) : NULL;
}

/* Cordons `name`; returns the entry, or NULL when node.db refused the state. */
static node_cordon *cordon(node *n, const char *name, const char *reason, const char *rule,
                           const char *by, json_t *details) {
  node_cordon *c = entry_new(n, name, CORDONED, reason, rule, by, time_now_ms());
  if (persist(n, c) != 0) {
    log_write(LOG_ERROR, name, NULL, NULL, "cannot record the cordon in node.db: %s",
              node_db_errmsg(n->db));
    entry_free(c);
    return NULL;
  }
  c->next = n->cordons->list;
  n->cordons->list = c;
  cordon_monitor_forget(n->cordons->monitor, name);
  double cpu = 0;
  int room = make_room(n, c, &cpu);
  int started = room && start_dedicated(n, c) == 0;
  json_t *extra = json_pack("{s:s, s:s?, s:s, s:s?}", "reason", reason, "rule", rule, "by", by,
                            "socket", c->socket_path);
  if (details) json_object_update_missing(extra, details);
  if (c->proc) json_object_set_new(extra, "pid", json_integer(c->proc->child.pid));
  log_json(started || !room ? LOG_WARN : LOG_ERROR, name, extra,
           rule ? "tenant cordoned: a rule fired; moving it to a dedicated process"
                : "tenant cordoned by an operator; moving it to a dedicated process");
  node_event(n, "cordon", name, extra);
  json_decref(extra);
  if (room) broadcast(n, c);
  else suspend_for_cap(n, c, cpu);
  return c;
}

static void suspend(node *n, node_cordon *c, unsigned crashes) {
  c->state = SUSPENDED;
  c->cause = CAUSE_CRASHES;
  free(c->reason);
  c->reason = xasprintf("its dedicated worker process crashed %u times within %lld s", crashes,
                        (long long)n->cfg.cordon_suspend_window_s);
  c->since_ms = time_now_ms();
  if (persist(n, c) != 0)
    log_write(LOG_ERROR, c->name, NULL, NULL, "cannot record the suspension in node.db: %s",
              node_db_errmsg(n->db));
  /* Forwarded requests still in the backlog are refused now, not left hanging. */
  close_private(c);
  json_t *extra = json_pack("{s:s, s:s, s:i, s:I}", "reason", c->reason, "cause", "crashes",
                            "crashes", (int)crashes, "window_s",
                            (json_int_t)n->cfg.cordon_suspend_window_s);
  log_json(LOG_ERROR, c->name, extra, "tenant suspended: its dedicated process keeps crashing");
  node_event(n, "suspend", c->name, extra);
  json_decref(extra);
  broadcast(n, c);
}

static void drain_leaving(node_cordon *c) {
  if (c->done_timer_open) uv_timer_stop(&c->done_timer);
  node_proc *p = c->proc;
  if (p == NULL) { /* suspended, or between a crash and its restart */
    leaving_remove(c->owner, c);
    if (c->done_timer_open) uv_close((uv_handle_t *)&c->done_timer, done_timer_closed);
    else entry_free(c);
    return;
  }
  if (p->child.alive) {
    node_proc_drain(p);
  } else {
    release_proc(p);
  }
}

static int waiting_any(const node_cordon *c) {
  for (int i = 0; i < NODE_PROCS_CAPACITY; i++)
    if (c->waiting_for[i]) return 1;
  return 0;
}

static void on_done_timeout(uv_timer_t *t) {
  node_cordon *c = container_of(t, node_cordon, done_timer);
  log_write(LOG_WARN, c->name, NULL, NULL,
            "uncordon: not every shared process answered in time; draining the dedicated process");
  memset(c->waiting_for, 0, sizeof c->waiting_for);
  drain_leaving(c);
}

static void uncordon(node *n, node_cordon *c, const char *by) {
  for (node_cordon **pp = &n->cordons->list; *pp; pp = &(*pp)->next) {
    if (*pp == c) {
      *pp = c->next;
      break;
    }
  }
  if (unpersist(n, c->name) != 0)
    log_write(LOG_ERROR, c->name, NULL, NULL, "cannot remove the cordon from node.db: %s",
              node_db_errmsg(n->db));
  json_t *extra = json_pack("{s:s, s:s, s:s}", "was", state_name(c->state), "reason", c->reason,
                            "by", by);
  log_json(LOG_INFO, c->name, extra, "tenant uncordoned: back to the shared processes");
  node_event(n, "uncordon", c->name, extra);
  json_decref(extra);
  cordon_monitor_forget(n->cordons->monitor, c->name);
  unwatch(c);
  c->asleep = 0;
  c->going_idle = 0;
  c->leaving = 1;
  c->next = n->cordons->leaving;
  n->cordons->leaving = c;
  /* Shared processes first: each answers once it forwards nothing more. */
  for (int i = 0; i < n->n_procs; i++) {
    node_proc *p = &n->procs[i];
    if (!node_proc_usable(p)) continue;
    tell(p, c, "active", proto_channel_request_id(&p->child.channel));
    c->waiting_for[i] = 1;
  }
  uv_timer_init(n->loop, &c->done_timer);
  c->done_timer_open = 1;
  uv_timer_start(&c->done_timer, on_done_timeout,
                 (uint64_t)n->cfg.grace_ms + DONE_TIMEOUT_EXTRA_MS, 0);
  if (!waiting_any(c)) drain_leaving(c);
}

static void on_done(node_proc *p, json_t *body) {
  node *n = p->owner;
  const char *name = json_string_value(json_object_get(body, "name"));
  if (name == NULL || n->cordons == NULL || p->cordon) return;
  int slot = (int)(p - n->procs);
  if (slot < 0 || slot >= NODE_PROCS_CAPACITY) return;
  for (node_cordon *c = n->cordons->leaving; c; c = c->next) {
    if (strcmp(c->name, name) != 0 || !c->waiting_for[slot]) continue;
    c->waiting_for[slot] = 0;
    if (!waiting_any(c)) drain_leaving(c);
    return;
  }
}

static void on_shared_exit(node_proc *p) {
  node *n = p->owner;
  if (n->cordons == NULL || p->cordon) return;
  int slot = (int)(p - n->procs);
  node_cordon *c = n->cordons->leaving;
  while (c) {
    node_cordon *next = c->next;
    if (c->waiting_for[slot]) {
      c->waiting_for[slot] = 0;
      if (!waiting_any(c)) drain_leaving(c);
    }
    c = next;
  }
}

/* Crashes within the window, counting this one when `add`. */
static unsigned count_crash(node *n, node_cordon *c, int add) {
  int64_t now = mono_ms();
  if (add) c->crashes[c->n_crashes++ % MAX_CRASHES] = now;
  unsigned recent = 0;
  unsigned kept = c->n_crashes < MAX_CRASHES ? c->n_crashes : MAX_CRASHES;
  for (unsigned i = 0; i < kept; i++)
    if (now - c->crashes[i] <= n->cfg.cordon_suspend_window_s * 1000) recent++;
  return recent;
}

/*
 * Whether the tenant is to blame for its process's end (attack class 6 of
 * the hardening: blame only with evidence). As for a shared process, a
 * fault raised inside the process's own code is (a bad access, an abort, a
 * sandbox violation), and a SIGKILL from outside (an operator, the kernel's
 * OOM killer, this supervisor finding the process stopped) or an exit is
 * not. One SIGKILL is: the memory backstop's, as only this tenant's code
 * runs here, so the memory it measured over the budget is this tenant's.
 */
static int blamed(const node_proc_exit *e) {
  return e->fault || (e->reason && strcmp(e->reason, "memory") == 0);
}

static void on_dedicated_exit(node_proc *p, const node_proc_exit *e) {
  node *n = p->owner;
  node_cordon *c = p->cordon;
  int quiet = e->status == 0 && e->sig == 0;
  json_t *extra = json_pack("{s:i, s:i, s:I, s:i, s:I}", "worker", p->id, "pid", p->child.pid,
                            "exit_status", (json_int_t)e->status, "signal", e->sig, "uptime_ms",
                            (json_int_t)e->lived_ms);
  if (e->reason) json_object_set_new(extra, "reason", json_string(e->reason));
  if (n->state == NODE_DRAINING || c->leaving || c->state == SUSPENDED) {
    log_json(quiet ? LOG_INFO : LOG_WARN, c->name, extra, "dedicated worker exited");
    json_decref(extra);
    release_proc(p);
    return;
  }
  if (c->going_idle) {
    c->going_idle = 0;
    n->cordons->idle_exits++;
    json_object_set_new(extra, "idle_s", json_integer((json_int_t)n->cfg.dedicated_idle_s));
    log_json(LOG_INFO, c->name, extra, "dedicated worker exited: idle; asleep until a request");
    node_event(n, "idle_exit", c->name, extra);
    json_decref(extra);
    release_proc(p);
    fall_asleep(n, c);
    broadcast(n, c);
    return;
  }
  int blame = blamed(e);
  unsigned recent = count_crash(n, c, blame);
  json_object_set_new(extra, "blamed", json_boolean(blame));
  json_object_set_new(extra, "crashes", json_integer(recent));
  node_event(n, e->event, c->name, extra);
  if (blame && n->cfg.cordon_suspend_crashes > 0 &&
      recent >= (unsigned)n->cfg.cordon_suspend_crashes) {
    log_json(LOG_ERROR, c->name, extra, "dedicated worker exited");
    json_decref(extra);
    release_proc(p);
    suspend(n, c, recent);
    return;
  }
  uint64_t delay = node_child_restart(&p->child, e->lived_ms);
  json_object_set_new(extra, "delay_ms", json_integer((json_int_t)delay));
  log_json(LOG_WARN, c->name, extra, "dedicated worker exited: restarting");
  json_decref(extra);
  broadcast(n, c); /* not ready: shared processes hold the tenant's requests briefly */
}

/* ---- the monitor ---------------------------------------------------------------------- */

static void fire(node *n, const char *name, const cordon_verdict *v) {
  /* A draining node starts no process the drain would not stop. */
  if (find(n, name) || n->state == NODE_DRAINING) return;
  json_t *row = NULL;
  if (node_db_worker_get(n->db, name, &row) != 0) { /* not deployed (any more) */
    cordon_monitor_forget(n->cordons->monitor, name);
    return;
  }
  json_decref(row);
  char *reason = xasprintf("rule %s fired (%llu observed)", v->rule.text,
                           (unsigned long long)v->observed);
  json_t *details = json_pack("{s:I}", "observed", (json_int_t)v->observed);
  /* In force here at once; then on every node, so that the tenant does not
   * crash another node's shared processes once HAProxy sends it there. */
  if (cordon(n, name, reason, v->rule.text, "monitor", details) != NULL)
    node_fleet_share_cordon(n, name, reason, v->rule.text);
  json_decref(details);
  free(reason);
}

static void observe(node *n, const char *name, cordon_metric m, json_int_t amount) {
  if (amount <= 0) return;
  cordon_verdict v;
  if (cordon_monitor_add(n->cordons->monitor, name, m, (uint64_t)amount, mono_ms(), &v))
    fire(n, name, &v);
}

static void on_stats(node_proc *p, json_t *body) {
  node *n = p->owner;
  if (n->cordons == NULL) return;
  end_suspensions(n);
  if (p->cordon) { /* a dedicated process's tenant is cordoned already */
    note_activity(p, body);
    return;
  }
  static const struct {
    const char *key;
    cordon_metric metric;
  } counts[] = {
      {"cpu_limit_hits", CORDON_CPU_LIMIT_HITS},
      {"memory_limit_hits", CORDON_MEMORY_LIMIT_HITS},
      {"wall_limit_hits", CORDON_WALL_LIMIT_HITS},
      {"uncaught_errors", CORDON_UNCAUGHT_ERRORS},
  };
  const char *name;
  json_t *delta;
  json_object_foreach(json_object_get(body, "tenants"), name, delta) {
    if (!worker_name_valid(name, strlen(name)) || find(n, name)) continue;
    for (size_t i = 0; i < ARRAY_SIZE(counts); i++)
      observe(n, name, counts[i].metric, json_integer_value(json_object_get(delta, counts[i].key)));
    json_int_t peak = json_integer_value(json_object_get(delta, "heap_peak"));
    if (peak > 0) observe(n, name, CORDON_HEAP_MB, (peak + (1 << 20) - 1) >> 20);
  }
  int64_t now = mono_ms();
  if (now - n->cordons->last_expire_ms > 60000) {
    n->cordons->last_expire_ms = now;
    cordon_monitor_expire(n->cordons->monitor, now);
  }
}

static void on_event(node_proc *p, json_t *body) {
  node *n = p->owner;
  const char *event = json_string_value(json_object_get(body, "event"));
  const char *tenant = json_string_value(json_object_get(body, "tenant"));
  if (event == NULL || strcmp(event, "mpk_fault") != 0) return;
  if (tenant && !worker_name_valid(tenant, strlen(tenant))) tenant = NULL;
  /* A dedicated process hosts one tenant: a fault it reports is that
   * tenant's, whatever name the report gives (it may be that tenant's code
   * speaking, to get a neighbour cordoned). */
  if (p->tenant != NULL) tenant = p->tenant;
  json_t *details = json_deep_copy(body);
  json_object_del(details, "event");
  json_object_del(details, "tenant");
  json_object_set_new(details, "worker", json_integer(p->id));
  log_json(LOG_ERROR, tenant, details, "memory protection fault");
  node_event(n, "mpk_fault", tenant, details);
  json_decref(details);
  if (tenant && n->cordons && !find(n, tenant)) observe(n, tenant, CORDON_MPK_FAULTS, 1);
}

static void on_crash(node_proc *p, const char *tenant) {
  node *n = p->owner;
  if (n->cordons == NULL || find(n, tenant)) return;
  observe(n, tenant, CORDON_CRASHES, 1);
}

/* ---- node lifecycle --------------------------------------------------------------------- */

/* A monitor with the configured rules (or the defaults when none are configured). */
static cordon_monitor *monitor_from_config(node *n) {
  const cordon_rule *rules = n->cfg.cordon_rules;
  size_t n_rules = n->cfg.n_cordon_rules;
  cordon_rule defaults[CORDON_MAX_RULES];
  if (!n->cfg.cordon_rules_set) {
    n_rules = 0;
    for (size_t i = 0; i < cordon_n_default_rules && i < CORDON_MAX_RULES; i++) {
      const char *why;
      if (cordon_rule_parse(cordon_default_rules[i], &defaults[n_rules], &why) == 0) n_rules++;
    }
    rules = defaults;
  }
  json_t *list = json_array();
  for (size_t i = 0; i < n_rules; i++) json_array_append_new(list, json_string(rules[i].text));
  json_t *extra = json_pack("{s:o}", "rules", list);
  log_json(LOG_INFO, NULL, extra, "cordon monitor rules");
  json_decref(extra);
  return cordon_monitor_new(rules, n_rules);
}

void node_cordons_undrained(node *n) {
  if (n->cordons == NULL) return;
  for (node_cordon *c = n->cordons->list; c; c = c->next)
    if (c->state == CORDONED && !c->leaving && c->proc == NULL) {
      char *err = NULL;
      if (c->listen_fd < 0 && bind_private(n, c, &err) != 0) {
        log_write(LOG_ERROR, c->name, NULL, NULL, "cordon: %s", err);
        free(err);
      }
      fall_asleep(n, c);
      broadcast(n, c);
    }
}

void node_cordons_reload_rules(node *n) {
  if (n->cordons == NULL) return;
  /* Counts start over: a window of the old rules means nothing to the new. */
  cordon_monitor_free(n->cordons->monitor);
  n->cordons->monitor = monitor_from_config(n);
}

/* What the worker processes report, for the cordons (registered with procs.c). */
static const node_proc_listener listener = {
    .hello = on_hello,
    .stats = on_stats,
    .event = on_event,
    .cordon_done = on_done,
    .shared_exit = on_shared_exit,
    .crash = on_crash,
    .dedicated_exit = on_dedicated_exit,
    .dedicated_gone = on_dedicated_gone,
};

static void fleet_apply(node *n, const char *name, json_t *record);
static json_t *fleet_view(node *n, const char *name);

int node_cordons_open(node *n, char **err) {
  struct node_cordons *cs = xcalloc(1, sizeof *cs);
  n->cordons = cs;
  if (load(n) != 0) {
    *err = xasprintf("%s/node.db: cordons: %s", n->data_dir, node_db_errmsg(n->db));
    node_cordons_close(n);
    return -EIO;
  }
  cs->monitor = monitor_from_config(n);
  n->proc_listener = &listener;
  static const node_cordon_hooks hooks = {
      .apply = fleet_apply, .view = fleet_view, .worker_deleted = node_cordons_worker_deleted};
  n->cordon_hooks = &hooks;
  /* The sockets now, so that the first HELLO of a shared process can name the sockets. */
  for (node_cordon *c = cs->list; c; c = c->next) {
    if (c->state != CORDONED) continue;
    char *why = NULL;
    if (bind_private(n, c, &why) != 0) {
      log_write(LOG_ERROR, c->name, NULL, NULL, "cordon: %s", why);
      free(why);
    }
  }
  return 0;
}

void node_cordons_start(node *n) {
  if (n->cordons == NULL) return;
  for (node_cordon *c = n->cordons->list; c; c = c->next) {
    json_t *extra = json_pack("{s:s, s:s, s:s?}", "state", state_name(c->state), "reason",
                              c->reason, "rule", c->rule);
    log_json(LOG_INFO, c->name, extra, "tenant still cordoned from before the restart");
    json_decref(extra);
    if (c->state != CORDONED) continue;
    /* Past the cap the rest sleep: their processes start with a request. */
    if (running_count(n) < n->cfg.max_dedicated) start_dedicated(n, c);
    else fall_asleep(n, c);
  }
}

static void free_list(node_cordon *c) {
  while (c) {
    node_cordon *next = c->next;
    entry_free(c); /* a dedicated slot is procs.c's to free */
    c = next;
  }
}

void node_cordons_close(node *n) {
  struct node_cordons *cs = n->cordons;
  if (cs == NULL) return;
  if (n->proc_listener == &listener) n->proc_listener = NULL;
  free_list(cs->list);
  free_list(cs->leaving);
  cordon_monitor_free(cs->monitor);
  free(cs);
  n->cordons = NULL;
}

void node_cordons_stop(node *n) {
  if (n->cordons == NULL) return;
  node_cordon *lists[] = {n->cordons->list, n->cordons->leaving};
  for (size_t k = 0; k < ARRAY_SIZE(lists); k++) {
    for (node_cordon *c = lists[k]; c; c = c->next) {
      unwatch(c);
      if (c->done_timer_open && !uv_is_closing((uv_handle_t *)&c->done_timer))
        uv_close((uv_handle_t *)&c->done_timer, NULL);
    }
  }
}

/* ---- control API ---------------------------------------------------------------------- */

static void respond(http_request *req, int status, json_t *body) {
  node_respond_json(req, status, body, NULL);
  json_decref(body);
}

/* The optional {"reason": "..."} body; NULL with the answer sent when bad. */
static char *read_reason(http_request *req) {
  if (req->body_len == 0) return xstrdup("cordoned by an operator");
  json_error_t jerr;
  json_t *body = json_loadb((const char *)req->body, req->body_len, JSON_REJECT_DUPLICATES, &jerr);
  if (!json_is_object(body)) {
    respond(req, 400, json_pack("{s:s, s:s}", "error",
                                "body must be a JSON object such as {\"reason\": \"...\"}",
                                "detail", body ? "not an object" : jerr.text));
    json_decref(body);
    return NULL;
  }
  /* Strict like a deploy body: a misspelt key must not pass unnoticed. */
  const char *key;
  json_t *v;
  json_object_foreach(body, key, v) {
    if (strcmp(key, "reason") == 0) continue;
    char *msg = xasprintf("unknown key \"%s\" (expected reason)", key);
    respond(req, 400, json_pack("{s:s, s:s}", "error", msg, "key", key));
    free(msg);
    json_decref(body);
    return NULL;
  }
  json_t *r = json_object_get(body, "reason");
  if (r && (!json_is_string(r) || json_string_length(r) == 0 || json_string_length(r) > REASON_MAX)) {
    respond(req, 400, json_pack("{s:s, s:s, s:i}", "error",
                                "\"reason\" must be a non-empty string of at most 500 bytes", "key",
                                "reason", "max", REASON_MAX));
    json_decref(body);
    return NULL;
  }
  char *reason = xstrdup(r ? json_string_value(r) : "cordoned by an operator");
  json_decref(body);
  return reason;
}

static json_t *answer(const char *name, const node_cordon *c) {
  json_t *v = c ? entry_view(c) : json_pack("{s:s}", "state", "active");
  json_object_set_new(v, "name", json_string(name));
  return v;
}

/* ---- in a fleet: a cordon, an operator's or a monitor's, holds on every node ---- */

static void fleet_apply(node *n, const char *name, json_t *record) {
  if (n->cordons == NULL || n->state == NODE_DRAINING) return;
  node_cordon *c = find(n, name);
  if (record == NULL) {
    if (c) uncordon(n, c, "fleet");
    return;
  }
  if (c) return; /* cordoned here already, by this node's monitor or the fleet */
  const char *reason = json_string_value(json_object_get(record, "reason"));
  const char *from = json_string_value(json_object_get(record, "node"));
  const char *rule = json_string_value(json_object_get(record, "rule"));
  const char *by = json_string_value(json_object_get(record, "by"));
  int by_monitor = rule && by && strcmp(by, "monitor") == 0;
  json_t *details = json_pack("{s:s?}", "from_node", from);
  if (cordon(n, name, reason ? reason : "cordoned by an operator", by_monitor ? rule : NULL,
             by_monitor ? "monitor" : "operator", details) == NULL)
    log_write(LOG_ERROR, name, NULL, NULL, "fleet: cannot cordon the tenant here");
  json_decref(details);
}

/* The view of a tenant's cordon as this node holds it (for answers). */
static json_t *fleet_view(node *n, const char *name) { return answer(name, find(n, name)); }

static void post_cordon(node *n, http_request *req, const char *name) {
  if (n->state == NODE_DRAINING) {
    /* As deploys: a dedicated process started now would outlive the drain. */
    node_respond_error(req, 503, "the node is shutting down");
    return;
  }
  char *reason = read_reason(req);
  if (reason == NULL) return;
  node_cordon *c = find(n, name);
  if (c) {
    respond(req, 409, json_pack("{s:s, s:s, s:s}", "error", "tenant is already cordoned", "name",
                                name, "state", state_name(c->state)));
  } else if (node_fleet_on(n)) {
    node_fleet_put_cordon(n, name, reason, req);
  } else if ((c = cordon(n, name, reason, NULL, "operator", NULL)) == NULL) {
    node_respond_error(req, 500, "cannot record the cordon in node.db");
  } else {
    respond(req, 200, answer(name, c));
  }
  free(reason);
}

void node_cordons_worker_deleted(node *n, const char *name) {
  node_cordon *c = n->cordons ? find(n, name) : NULL;
  if (c != NULL) uncordon(n, c, "delete");
}

static void post_uncordon(node *n, http_request *req, const char *name) {
  node_cordon *c = find(n, name);
  if (c == NULL) {
    respond(req, 409, json_pack("{s:s, s:s, s:s}", "error", "tenant is not cordoned", "name", name,
                                "state", "active"));
    return;
  }
  const char *was = state_name(c->state);
  json_t *body = json_pack("{s:s, s:s, s:s}", "name", name, "state", "active", "was", was);
  if (node_fleet_on(n)) {
    node_fleet_delete_cordon(n, name, body, req);
    return;
  }
  uncordon(n, c, "operator");
  respond(req, 200, body);
}

int node_cordons_route(node *n, http_request *req, const char *name, const char *sub) {
  int is_cordon = strcmp(sub, "cordon") == 0;
  if (!is_cordon && strcmp(sub, "uncordon") != 0) return 0;
  if (strcmp(req->method, "POST") != 0) {
    node_respond_method(req, "POST");
    return 1;
  }
  if (!worker_name_valid(name, strlen(name))) {
    respond(req, 400, json_pack("{s:s}", "error",
                                "invalid tenant name: must match [a-z0-9][a-z0-9-]{0,62}"));
    return 1;
  }
  json_t *row = NULL;
  int rc = node_db_worker_get(n->db, name, &row);
  json_decref(row);
  if (rc == -ENOENT && find(n, name) == NULL) {
    respond(req, 404, json_pack("{s:s, s:s}", "error", "unknown tenant", "name", name));
    return 1;
  }
  if (rc != 0 && rc != -ENOENT) {
    node_respond_error(req, 500, "registry read failed");
    return 1;
  }
  if (is_cordon) post_cordon(n, req, name);
  else post_uncordon(n, req, name);
  return 1;
}
