/*
 * The node's lifecycle beyond starting: draining (POST /v1/node/drain and
 * the signals), reloading the configuration on SIGHUP, the rolling restarts a
 * reload may need, and telling systemd about all of it (sd_notify).
 *
 * Draining never drops a request: the ingress socket closes (new connections
 * are refused), the worker processes finish what they have within the grace
 * period and exit, and none is restarted. A drain asked for through the API
 * leaves the supervisor and its control API up ("drained"); a signal makes it
 * exit afterwards.
 *
 * A reload re-reads the configuration exactly as at start (defaults, the
 * --config file, then the flags kept from the command line) and applies what
 * can change while running. Worker processes get their settings as flags, so
 * changing those means new processes: one slot at a time is drained and
 * respawned, so the other processes keep serving (a node with one process
 * gets a temporary second one for the duration).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef EDGENODE_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

#include "node.h"

#define KILL_AFTER_GRACE_MS 2000
#define ROLL_TICK_MS 25
/* A new process that is not ready by then will not be soon: move on. */
#define ROLL_WAIT_MAX_MS 60000

typedef enum roll_phase { ROLL_IDLE, ROLL_GROW, ROLL_RECYCLE, ROLL_RETIRE } roll_phase;

/* One supervisor per process, so one lifecycle. */
static struct lifecycle {
  int argc;
  char **argv;              /* main's, kept for reloads */
  uv_signal_t sighup;
  uv_timer_t tick;          /* drives a rolling restart */
  int open;
  roll_phase phase;
  int target;               /* worker processes wanted at the end */
  int recycle_upto;         /* slots [0, recycle_upto) get new processes */
  int next;                 /* the next slot to recycle */
  node_proc *waiting;       /* the slot being recycled, until it is ready again */
  uint64_t wait_since_ns;
  int again;                /* SIGHUP during a roll: reload once it is over */
  uint64_t drain_started_ns;
} life;

/* ---- systemd --------------------------------------------------------------------------- */

void node_notify(const char *state) {
#ifdef EDGENODE_HAVE_SYSTEMD
  int rc = sd_notify(0, state);
  if (rc < 0) log_debug("sd_notify failed: %s", strerror(-rc));
#else
  (void)state;
#endif
}

/* ---- draining ------------------------------------------------------------------------- */

static void log_json(log_level level, json_t *extra, const char *msg);

const char *node_state_name(const node *n) {
  if (n->state == NODE_SERVING) return "serving";
  return n->drained ? "drained" : "draining";
}

static void on_kill_timer(uv_timer_t *t) {
  node *n = container_of(t, node, kill_timer);
  if (node_procs_live(n) > 0) {
    log_warn("grace period over: killing the remaining worker processes");
    node_procs_kill(n);
  }
  if (n->drain_exit) node_egress_kill(n);
}

void node_drain(node *n, const char *reason, int then_exit) {
  int signal = strcmp(reason, "api") != 0;
  if (then_exit && !n->drain_exit) {
    n->drain_exit = 1;
    if (n->control_open) http_server_stop_accepting(&n->control);
  }
  json_t *extra = json_pack("{s:s, s:I}", signal ? "signal" : "reason", reason, "grace_ms",
                            (json_int_t)n->cfg.grace_ms);
  if (n->state == NODE_DRAINING) {
    /* Already drained or draining through the API: now exit as well. */
    if (then_exit) {
      json_object_set_new(extra, "state", json_string(node_state_name(n)));
      char *text = json_dumps(extra, JSON_COMPACT);
      log_write(LOG_INFO, NULL, NULL, text, "shutting down");
      free(text);
      node_event(n, "stop", NULL, extra);
      if (node_procs_live(n) == 0) n->procs_stopped(n);
    }
    json_decref(extra);
    return;
  }
  n->state = NODE_DRAINING;
  life.drain_started_ns = time_mono_ns();
  json_object_set_new(extra, "worker_processes", json_integer(node_procs_live(n)));
  char *text = json_dumps(extra, JSON_COMPACT);
  log_write(LOG_INFO, NULL, NULL, text, then_exit ? "shutting down" : "draining");
  free(text);
  node_event(n, "drain", NULL, extra);
  json_decref(extra);
  node_notify("STOPPING=1\nSTATUS=draining");
  node_fleet_drain_facets(n);
  /* The supervisor's copy of the ingress socket goes first; the socket itself
   * closes, and connections are refused, once every worker closed its copy. */
  if (n->listen_fd >= 0) close(n->listen_fd);
  n->listen_fd = -1;
  node_procs_drain(n);
  if (!n->kill_timer_open) {
    uv_timer_init(n->loop, &n->kill_timer);
    n->kill_timer_open = 1;
  }
  uv_timer_start(&n->kill_timer, on_kill_timer, (uint64_t)n->cfg.grace_ms + KILL_AFTER_GRACE_MS, 0);
  if (node_procs_live(n) == 0) n->procs_stopped(n);
}

void node_drain_finished(node *n) {
  if (n->drained) return;
  n->drained = 1;
  if (n->kill_timer_open) uv_timer_stop(&n->kill_timer);
  uint64_t took_ms = (time_mono_ns() - life.drain_started_ns) / 1000000u;
  json_t *extra = json_pack("{s:I}", "drain_ms", (json_int_t)took_ms);
  char *text = json_dumps(extra, JSON_COMPACT);
  log_write(LOG_INFO, NULL, NULL, text, "drained: every worker process has finished");
  free(text);
  node_event_new(n, "drained", NULL, extra);
  node_fleet_release_facets(n);
  node_notify("STATUS=drained");
}

/*
 * Undoing a drain asked for through the API, once it has finished: the
 * ingress socket is bound again on the same port and every shared slot gets
 * a new process, as at start. A drain still under way is refused (its
 * processes are finishing their requests and would have to be told
 * otherwise), and so is a shutdown.
 */
static void undrain(node *n, http_request *req) {
  if (n->drain_exit) {
    node_respond_error(req, 409, "the node is shutting down: it cannot be undrained");
    return;
  }
  if (n->state == NODE_SERVING) {
    json_t *body = json_pack("{s:s, s:b}", "state", node_state_name(n), "undrained", 0);
    node_respond_json(req, 200, body, NULL);
    json_decref(body);
    return;
  }
  if (!n->drained) {
    json_t *body = json_pack("{s:s, s:i}", "error",
                             "the drain is still under way: undrain once GET /v1/node says "
                             "\"drained\"",
                             "processes_left", node_procs_live(n));
    node_respond_json(req, 409, body, NULL);
    json_decref(body);
    return;
  }
  char *err = NULL;
  int rc = node_procs_undrain(n, &err);
  if (rc != 0) {
    log_error("undrain failed: %s", err ? err : uv_strerror(rc));
    node_respond_error(req, 500, err ? err : "the ingress socket could not be bound again");
    free(err);
    return;
  }
  n->state = NODE_SERVING;
  n->drained = 0;
  node_cordons_undrained(n);
  json_t *extra = json_pack("{s:s, s:i}", "listen", n->listen_addr, "worker_processes", n->n_procs);
  log_json(LOG_INFO, extra, "undrained: serving again");
  node_event(n, "undrain", NULL, extra);
  node_notify("READY=1\nSTATUS=serving");
  json_object_set_new(extra, "state", json_string(node_state_name(n)));
  json_object_set_new(extra, "undrained", json_true());
  node_respond_json(req, 200, extra, NULL);
  json_decref(extra);
}

int node_drain_route(node *n, http_request *req, const char *path) {
  int undo = strcmp(path, "/v1/node/undrain") == 0;
  if (!undo && strcmp(path, "/v1/node/drain") != 0) return 0;
  if (strcmp(req->method, "POST") != 0) {
    node_respond_method(req, "POST");
    return 1;
  }
  if (undo) {
    undrain(n, req);
    return 1;
  }
  int started = n->state == NODE_SERVING;
  if (started) node_drain(n, "api", 0);
  json_t *body = json_pack("{s:s, s:I, s:i}", "state", node_state_name(n), "grace_ms",
                           (json_int_t)n->cfg.grace_ms, "processes_left", node_procs_live(n));
  /* 202: the drain goes on after this answer; GET /v1/node tells when it is over. */
  node_respond_json(req, n->drained ? 200 : 202, body, NULL);
  json_decref(body);
  return 1;
}

/* ---- rolling restarts -------------------------------------------------------------------- */

static void roll_tick(uv_timer_t *t);
static void reload(node *n);

static void log_json(log_level level, json_t *extra, const char *msg) {
  char *text = json_dumps(extra, JSON_COMPACT);
  log_write(level, NULL, NULL, text, "%s", msg);
  free(text);
}

static int slot_free(const node_proc *p) {
  return !node_child_live(&p->child);
}

/* Every slot in service (not retiring) has a ready process. */
static int slots_ready(const node *n) {
  for (int i = 0; i < n->n_procs; i++) {
    const node_proc *p = &n->procs[i];
    if (!p->retiring && p->child.state != NODE_PROC_READY) return 0;
  }
  return 1;
}

static int waited_too_long(const char *what) {
  if (time_mono_ns() - life.wait_since_ns < (uint64_t)ROLL_WAIT_MAX_MS * 1000000u) return 0;
  log_warn("rolling restart: %s not ready after %d ms; going on", what, ROLL_WAIT_MAX_MS);
  return 1;
}

static void roll_done(node *n) {
  life.phase = ROLL_IDLE;
  uv_timer_stop(&life.tick);
  json_t *extra = json_pack("{s:i}", "workers", n->n_procs);
  log_json(LOG_INFO, extra, "rolling restart done");
  node_event_new(n, "reload_done", NULL, extra);
  node_notify("READY=1\nSTATUS=serving");
  if (life.again) {
    life.again = 0;
    reload(n);
  }
}

static void retire(node_proc *p) {
  if (p->retiring) return;
  p->retiring = 1;
  p->recycling = 0;
  if (p->child.alive) {
    node_proc_drain(p);
  } else { /* between a crash and its restart: just do not restart it */
    node_child_hold(&p->child);
    p->child.state = NODE_PROC_STOPPED;
  }
}

/* Advances the roll as far as it can go now; returns 1 when it must wait. */
static int roll_step(node *n) {
  switch (life.phase) {
    case ROLL_IDLE:
      return 1;
    case ROLL_GROW: {
      int want = n->n_procs > life.target ? n->n_procs : life.target;
      /* Recycling the only process would leave none serving: add a second. */
      if (life.recycle_upto > 0 && want == 1) want = 2;
      while (n->n_procs < want && node_procs_add(n) != NULL) {}
      if (!slots_ready(n) && !waited_too_long("new worker processes")) return 1;
      life.phase = ROLL_RECYCLE;
      life.wait_since_ns = time_mono_ns();
      return 0;
    }
    case ROLL_RECYCLE:
      if (life.waiting) {
        node_proc *p = life.waiting;
        if ((p->recycling || p->child.state != NODE_PROC_READY) && !waited_too_long("a replaced worker"))
          return 1;
        life.waiting = NULL;
      }
      while (life.next < life.recycle_upto) {
        node_proc *p = &n->procs[life.next++];
        /* A slot waiting to restart after a crash gets the new flags anyway. */
        if (!p->child.alive) continue;
        p->recycling = 1;
        node_proc_drain(p);
        life.waiting = p;
        life.wait_since_ns = time_mono_ns();
        return 1;
      }
      life.phase = ROLL_RETIRE;
      return 0;
    case ROLL_RETIRE:
      for (int i = life.target; i < n->n_procs; i++) retire(&n->procs[i]);
      while (n->n_procs > life.target && slot_free(&n->procs[n->n_procs - 1])) {
        node_proc *p = &n->procs[n->n_procs - 1];
        p->retiring = 0;
        n->n_procs--;
      }
      if (n->n_procs > life.target) return 1;
      roll_done(n);
      return 1;
  }
  return 1;
}

static void roll_tick(uv_timer_t *t) {
  node *n = t->data;
  if (n->state != NODE_SERVING) { /* a drain took over: it handles every process */
    life.phase = ROLL_IDLE;
    uv_timer_stop(&life.tick);
    return;
  }
  while (roll_step(n) == 0) {}
}

static void roll_start(node *n, int target, int recycle) {
  life.target = target;
  life.recycle_upto = recycle ? (n->n_procs < target ? n->n_procs : target) : 0;
  life.next = 0;
  life.waiting = NULL;
  life.wait_since_ns = time_mono_ns();
  life.phase = ROLL_GROW;
  uv_timer_start(&life.tick, roll_tick, 0, ROLL_TICK_MS);
}

/* ---- reload ---------------------------------------------------------------------------- */

static void note_int(json_t *changed, const char *key, long long from, long long to) {
  if (from != to) json_object_set_new(changed, key, json_pack("{s:I, s:I}", "from", (json_int_t)from, "to", (json_int_t)to));
}

static int same_string(const char *a, const char *b) {
  return (a == NULL && b == NULL) || (a && b && strcmp(a, b) == 0);
}

static int same_list(char **a, size_t na, char **b, size_t nb) {
  if (na != nb) return 0;
  for (size_t i = 0; i < na; i++)
    if (strcmp(a[i], b[i]) != 0) return 0;
  return 1;
}

static int same_rules(const node_config *a, const node_config *b) {
  if (a->cordon_rules_set != b->cordon_rules_set || a->n_cordon_rules != b->n_cordon_rules) return 0;
  for (size_t i = 0; i < a->n_cordon_rules; i++)
    if (strcmp(a->cordon_rules[i].text, b->cordon_rules[i].text) != 0) return 0;
  return 1;
}

/* Keys that only a restart of the node applies. */
static void note_fixed(json_t *ignored, const node_config *old, const node_config *fresh) {
  if (strcmp(old->listen_host, fresh->listen_host) != 0 || old->listen_port != fresh->listen_port)
    json_array_append_new(ignored, json_string("listen"));
  if (strcmp(old->control_host, fresh->control_host) != 0 || old->control_port != fresh->control_port)
    json_array_append_new(ignored, json_string("control"));
  if (!same_string(old->data_dir, fresh->data_dir)) json_array_append_new(ignored, json_string("data"));
  if (!same_string(old->control_token_file, fresh->control_token_file))
    json_array_append_new(ignored, json_string("control_token_file"));
  if (old->dev != fresh->dev) json_array_append_new(ignored, json_string("dev"));
  if (!same_list(old->egress_allow_cidr, old->n_egress_allow_cidr, fresh->egress_allow_cidr,
                 fresh->n_egress_allow_cidr))
    json_array_append_new(ignored, json_string("egress_allow_cidr"));
  if (!same_list(old->ca_files, old->n_ca_files, fresh->ca_files, fresh->n_ca_files))
    json_array_append_new(ignored, json_string("ca_file"));
  /* The control API's caps are set when its listener starts. */
  if (old->control_max_connections != fresh->control_max_connections)
    json_array_append_new(ignored, json_string("control_max_connections"));
  if (old->control_max_connections_per_addr != fresh->control_max_connections_per_addr)
    json_array_append_new(ignored, json_string("control_max_connections_per_addr"));
}

static void reload(node *n) {
  if (n->state != NODE_SERVING) {
    log_warn("SIGHUP ignored: the node is %s", node_state_name(n));
    return;
  }
  if (life.phase != ROLL_IDLE) {
    life.again = 1;
    log_info("SIGHUP during a rolling restart: reloading again once it is done");
    return;
  }
  char status[96];
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  snprintf(status, sizeof status, "RELOADING=1\nMONOTONIC_USEC=%llu\nSTATUS=reloading",
           (unsigned long long)ts.tv_sec * 1000000u + (unsigned long long)ts.tv_nsec / 1000u);
  node_notify(status);

  node_config fresh;
  node_config_init(&fresh);
  char *err = NULL;
  int rc = node_config_parse(&fresh, life.argc, life.argv, &err);
  if (rc != NODE_CONFIG_OK) {
    const char *why = err ? err : "the configuration could not be read";
    json_t *extra = json_pack("{s:b, s:s}", "ok", 0, "error", why);
    log_json(LOG_ERROR, extra, "reload failed: the running configuration stays");
    node_event_new(n, "reload", NULL, extra);
    free(err);
    node_config_free(&fresh);
    node_notify("READY=1\nSTATUS=serving (reload failed)");
    return;
  }
  node_config *cfg = &n->cfg;
  json_t *changed = json_object(), *ignored = json_array();
  note_int(changed, "workers", cfg->workers, fresh.workers);
  note_int(changed, "grace_ms", cfg->grace_ms, fresh.grace_ms);
  note_int(changed, "worker_memory_mb", cfg->worker_memory_mb, fresh.worker_memory_mb);
  note_int(changed, "max_body_mb", cfg->max_body_mb, fresh.max_body_mb);
  note_int(changed, "header_timeout_ms", cfg->header_timeout_ms, fresh.header_timeout_ms);
  note_int(changed, "body_timeout_ms", cfg->body_timeout_ms, fresh.body_timeout_ms);
  note_int(changed, "body_min_rate", cfg->body_min_rate, fresh.body_min_rate);
  note_int(changed, "max_connections", cfg->max_connections, fresh.max_connections);
  note_int(changed, "max_connections_per_addr", cfg->max_connections_per_addr,
           fresh.max_connections_per_addr);
  note_int(changed, "isolate_memory_mb", cfg->isolate_memory_mb, fresh.isolate_memory_mb);
  note_int(changed, "max_isolates", cfg->max_isolates, fresh.max_isolates);
  note_int(changed, "idle_timeout_s", cfg->idle_timeout_s, fresh.idle_timeout_s);
  note_int(changed, "compact_idle_s", cfg->compact_idle_s, fresh.compact_idle_s);
  if (cfg->log_level != fresh.log_level)
    json_object_set_new(changed, "log_level",
                        json_pack("{s:s, s:s}", "from", node_log_level_name(cfg->log_level), "to",
                                  node_log_level_name(fresh.log_level)));
  note_int(changed, "cordon_memory_mb", cfg->cordon_memory_mb, fresh.cordon_memory_mb);
  note_int(changed, "max_dedicated", cfg->max_dedicated, fresh.max_dedicated);
  note_int(changed, "dedicated_idle_s", cfg->dedicated_idle_s, fresh.dedicated_idle_s);
  note_int(changed, "dedicated_suspend_s", cfg->dedicated_suspend_s, fresh.dedicated_suspend_s);
  note_int(changed, "metrics_max_tenants", cfg->metrics_max_tenants, fresh.metrics_max_tenants);
  int rules_changed = !same_rules(cfg, &fresh);
  if (rules_changed) json_object_set_new(changed, "cordon_rules", json_true());
  note_fixed(ignored, cfg, &fresh);

  /* Worker processes take these as flags: they need new processes. */
  int recycle = cfg->max_body_mb != fresh.max_body_mb ||
                cfg->header_timeout_ms != fresh.header_timeout_ms ||
                cfg->body_timeout_ms != fresh.body_timeout_ms ||
                cfg->body_min_rate != fresh.body_min_rate ||
                cfg->max_connections != fresh.max_connections ||
                cfg->max_connections_per_addr != fresh.max_connections_per_addr ||
                cfg->isolate_memory_mb != fresh.isolate_memory_mb ||
                cfg->max_isolates != fresh.max_isolates ||
                cfg->idle_timeout_s != fresh.idle_timeout_s ||
                cfg->compact_idle_s != fresh.compact_idle_s || cfg->log_level != fresh.log_level;
  int resize = cfg->workers != fresh.workers;
  cfg->workers = fresh.workers;
  cfg->grace_ms = fresh.grace_ms;               /* read by the next drain */
  cfg->worker_memory_mb = fresh.worker_memory_mb; /* read by the next memory check */
  cfg->max_body_mb = fresh.max_body_mb;
  cfg->header_timeout_ms = fresh.header_timeout_ms;
  cfg->body_timeout_ms = fresh.body_timeout_ms;
  cfg->body_min_rate = fresh.body_min_rate;
  cfg->max_connections = fresh.max_connections;
  cfg->max_connections_per_addr = fresh.max_connections_per_addr;
  /* The control API takes the body limits at once (its next bodies). */
  n->control.config.body_timeout_ms = (uint64_t)cfg->body_timeout_ms;
  n->control.config.body_min_rate = node_body_min_rate(cfg);
  cfg->isolate_memory_mb = fresh.isolate_memory_mb;
  cfg->max_isolates = fresh.max_isolates;
  cfg->idle_timeout_s = fresh.idle_timeout_s;
  cfg->compact_idle_s = fresh.compact_idle_s;
  cfg->log_level = fresh.log_level;
  cfg->cordon_memory_mb = fresh.cordon_memory_mb; /* read by the next memory check */
  cfg->max_dedicated = fresh.max_dedicated;             /* read when a process must start */
  cfg->dedicated_idle_s = fresh.dedicated_idle_s;       /* read at the next report */
  cfg->dedicated_suspend_s = fresh.dedicated_suspend_s; /* read by the next suspension */
  cfg->metrics_max_tenants = fresh.metrics_max_tenants; /* for tenants not yet given a series */
  if (rules_changed) {
    cordon_rule *old_rules = cfg->cordon_rules;
    cfg->cordon_rules = fresh.cordon_rules;
    cfg->n_cordon_rules = fresh.n_cordon_rules;
    cfg->cordon_rules_set = fresh.cordon_rules_set;
    fresh.cordon_rules = old_rules; /* freed with fresh below */
    node_cordons_reload_rules(n);
  }
  /* log_init only sets the process name and level (and line buffering again). */
  fflush(stderr);
  log_init("supervisor", cfg->log_level);
  node_config_free(&fresh);

  json_t *extra = json_pack("{s:b, s:o, s:o, s:b}", "ok", 1, "changed", changed,
                            "needs_restart", ignored, "rolling_restart", recycle || resize);
  log_json(LOG_INFO, extra, "configuration reloaded");
  if (json_array_size(ignored) > 0)
    log_warn("reload: listen, control, data, control_token_file, dev, egress_allow_cidr and "
             "ca_file only change when the node restarts");
  node_event_new(n, "reload", NULL, extra);
  if (recycle || resize) roll_start(n, cfg->workers, recycle);
  else node_notify("READY=1\nSTATUS=serving");
}

static void on_sighup(uv_signal_t *h, int signum) {
  (void)signum;
  reload(h->data);
}

int node_lifecycle_start(node *n, int argc, char **argv) {
  life.argc = argc;
  life.argv = argv;
  int rc = uv_signal_init(n->loop, &life.sighup);
  if (rc != 0) return rc;
  life.sighup.data = n;
  uv_timer_init(n->loop, &life.tick);
  life.tick.data = n;
  life.open = 1;
  rc = uv_signal_start(&life.sighup, on_sighup, SIGHUP);
  if (rc == 0) uv_unref((uv_handle_t *)&life.sighup);
  return rc;
}

void node_lifecycle_stop(node *n) {
  (void)n;
  if (!life.open) return;
  life.open = 0;
  uv_close((uv_handle_t *)&life.sighup, NULL);
  uv_close((uv_handle_t *)&life.tick, NULL);
}
