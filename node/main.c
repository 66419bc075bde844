/*
 * edgenode: the supervisor's main(). It owns the order of startup and of
 * shutdown and the hooks of struct node that the modules below call
 * (procs_changed, procs_stopped). Startup order matters for the "ready" line
 * tests wait for: data directory, token, node.db, ingress socket, control
 * API, signals, then the egress and worker processes; "ready" once all of
 * them said HELLO.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "node.h"

static node self;

static void log_ready(node *n) {
  json_t *extra = json_pack("{s:s, s:s, s:i, s:i}", "listen", n->listen_addr, "control",
                            n->control_addr, "workers", n->n_procs, "pid", (int)getpid());
  char *text = json_dumps(extra, JSON_COMPACT);
  log_write(LOG_INFO, NULL, NULL, text, "ready");
  free(text);
  json_decref(extra);
}

void node_announce_ready(node *n) {
  if (n->state != NODE_SERVING) return; /* stopped while hello was deployed */
  log_ready(n);
  node_event_new(n, "start", NULL,
                 json_pack("{s:s, s:i, s:i}", "version", EDGENODE_VERSION, "workers", n->n_procs,
                           "pid", (int)getpid()));
  node_notify("READY=1\nSTATUS=serving");
}

static void on_procs_changed(node *n) {
  if (n->ready_logged || !n->control_open || n->state != NODE_SERVING) return;
  if (!node_procs_all_ready(n)) return;
  n->ready_logged = 1;
  /* With --dev, "ready" means hello answers: it is announced once deployed. */
  if (n->cfg.dev)
    node_deploy_dev(n, node_announce_ready);
  else
    node_announce_ready(n);
}

static void on_handle_closed(uv_handle_t *h) { (void)h; }

static void on_control_closed(http_server *s) { (void)s; }

static void on_procs_stopped(node *n) {
  if (!n->drain_exit) { /* drained through the API: the supervisor stays */
    node_drain_finished(n);
    return;
  }
  static int done;
  if (done) return;
  done = 1;
  if (n->kill_timer_open) uv_close((uv_handle_t *)&n->kill_timer, on_handle_closed);
  n->kill_timer_open = 0;
  uv_close((uv_handle_t *)&n->sigterm, on_handle_closed);
  uv_close((uv_handle_t *)&n->sigint, on_handle_closed);
  node_lifecycle_stop(n);
  node_procs_close(n);
  node_cordons_stop(n);
  node_egress_stop(n); /* last: draining requests may still have been fetching */
  node_fleet_stop(n);
  node_memwatch_stop(n);
  node_tails_close(n); /* their clients see the streams end, not break */
  if (n->control_open) http_server_close(&n->control, on_control_closed);
  n->control_open = 0;
  log_info("stopped");
}

static void on_signal(uv_signal_t *h, int signum) {
  node *n = h->data;
  if (n->state == NODE_DRAINING && n->drain_exit) {
    log_error("second signal (%s): killing worker processes and exiting", strsignal(signum));
    node_procs_kill(n);
    fflush(stderr);
    _exit(1);
  }
  /* After a drain through the API, the signal only adds the exit. */
  node_drain(n, signum == SIGTERM ? "SIGTERM" : "SIGINT", 1);
}

static int start_signals(node *n) {
  int rc = uv_signal_init(n->loop, &n->sigterm);
  if (rc == 0) rc = uv_signal_init(n->loop, &n->sigint);
  if (rc != 0) return rc;
  n->sigterm.data = n->sigint.data = n;
  rc = uv_signal_start(&n->sigterm, on_signal, SIGTERM);
  if (rc == 0) rc = uv_signal_start(&n->sigint, on_signal, SIGINT);
  return rc;
}

static char *worker_exe_path(void) {
  char exe[4096];
  size_t len = sizeof exe;
  if (uv_exepath(exe, &len) != 0) return xstrdup("edgenode-worker");
  char *slash = strrchr(exe, '/');
  if (slash) *slash = '\0';
  return xasprintf("%s/edgenode-worker", slash ? exe : ".");
}

/* What the descriptor limit allows, once the caps are set: an operator
 * reads here why a cap is lower than configured. */
static void log_descriptors(node *n) {
  json_t *extra = json_pack("{s:I, s:i, s:I, s:I, s:I, s:I}", "nofile", (json_int_t)n->nofile,
                            "reserve", NODE_FD_RESERVE, "control_max_connections",
                            (json_int_t)n->control.config.max_connections,
                            "control_max_connections_per_addr",
                            (json_int_t)n->control.config.max_connections_per_addr,
                            "max_connections", (json_int_t)n->cfg.max_connections,
                            "max_connections_per_addr",
                            (json_int_t)n->cfg.max_connections_per_addr);
  char *text = json_dumps(extra, JSON_COMPACT);
  json_decref(extra);
  log_write(LOG_INFO, NULL, NULL, text, "descriptors");
  free(text);
  if (n->nofile < 2 * NODE_FD_RESERVE)
    log_warn("RLIMIT_NOFILE is %llu: raise it to at least %d (LimitNOFILE= under systemd, "
             "ulimit -n) or connections will be capped low; see docs/operations.md",
             (unsigned long long)n->nofile, 4 * NODE_FD_RESERVE);
}

/* Everything before the loop runs; returns 0 or prints why not. */
static int start(node *n, int argc, char **argv) {
  char *err = NULL;
  int rc = node_datadir_prepare(n->cfg.data_dir, &n->data_dir, &err);
  if (rc == 0) {
    char *token_path = n->cfg.control_token_file
                           ? xstrdup(n->cfg.control_token_file)
                           : xasprintf("%s/control.token", n->data_dir);
    rc = node_token_load(token_path, &n->token, &err);
    free(token_path);
  }
  if (rc == 0) {
    n->token_len = strlen(n->token);
    char *db = xasprintf("%s/node.db", n->data_dir);
    rc = node_db_open(db, &n->db, &err);
    free(db);
  }
  if (rc == 0 && node_routes_load(n) != 0) {
    rc = -EIO;
    err = xasprintf("node.db: reading the routes: %s", node_db_errmsg(n->db));
  }
  if (rc == 0) rc = node_events_open(n, &err);
  if (rc == 0) rc = node_cordons_open(n, &err);
  if (rc == 0) rc = node_listen_socket(n, &err);
  if (rc == 0) rc = node_control_start(n, &err);
  if (rc == 0) log_descriptors(n);
  if (rc == 0) rc = node_fleet_start(n, &err);
  if (rc == 0 && (rc = start_signals(n)) != 0) err = xasprintf("signals: %s", uv_strerror(rc));
  if (rc == 0 && (rc = node_lifecycle_start(n, argc, argv)) != 0)
    err = xasprintf("SIGHUP: %s", uv_strerror(rc));
  if (rc == 0) {
    char extra[256];
    snprintf(extra, sizeof extra, "{\"version\":\"%s\",\"workers\":%d,\"pid\":%d}",
             EDGENODE_VERSION, n->cfg.workers, (int)getpid());
    log_write(LOG_INFO, NULL, NULL, extra, "starting");
    n->worker_path = worker_exe_path();
    rc = node_egress_start(n, &err);
    if (rc == 0) rc = node_procs_start(n, &err);
    if (rc == 0) node_cordons_start(n);
    if (rc == 0 && (rc = node_memwatch_start(n)) != 0)
      err = xasprintf("memory watch: %s", uv_strerror(rc));
  }
  if (rc != 0) {
    log_error("%s", err ? err : "startup failed");
    free(err);
    return rc;
  }
  return 0;
}

static void cleanup(node *n) {
  node_fleet_free(n);
  node_cordons_close(n);
  node_events_close(n);
  node_db_close(n->db);
  json_decref(n->routes);
  if (n->listen_fd >= 0) close(n->listen_fd);
  node_procs_free(n);
  free(n->worker_path);
  free(n->v8_version);
  node_stats_free(n);
  free(n->data_dir);
  if (n->token) memset(n->token, 0, n->token_len);
  node_tails_close(n);
  free(n->token);
  node_config_free(&n->cfg);
}

int main(int argc, char **argv) {
  node *n = &self;
  node_config_init(&n->cfg);
  char *err = NULL;
  switch (node_config_parse(&n->cfg, argc, argv, &err)) {
    case NODE_CONFIG_HELP:
      fputs(node_config_usage(), stdout);
      node_config_free(&n->cfg);
      return 0;
    case NODE_CONFIG_VERSION:
      printf("edgenode %s\n", EDGENODE_VERSION);
      node_config_free(&n->cfg);
      return 0;
    case NODE_CONFIG_ERROR:
      fprintf(stderr, "%s\n", err);
      free(err);
      node_config_free(&n->cfg);
      return 2;
    default:
      break;
  }
  /* Writes to a worker that just died must fail with EPIPE, not kill us. */
  signal(SIGPIPE, SIG_IGN);
  log_init("supervisor", n->cfg.log_level);
  n->loop = uv_default_loop();
  n->listen_fd = -1;
  /* Before anything opens a descriptor; worker processes inherit it. */
  n->nofile = fd_limit_raise();
  n->started_at_ms = time_now_ms();
  n->started_mono_ns = time_mono_ns();
  n->state = NODE_SERVING;
  n->procs_changed = on_procs_changed;
  n->procs_stopped = on_procs_stopped;

  if (start(n, argc, argv) != 0) {
    node_procs_kill(n);
    node_egress_kill(n);
    cleanup(n);
    return 1;
  }
  uv_run(n->loop, UV_RUN_DEFAULT);
  int rc = uv_loop_close(n->loop);
  if (rc != 0) log_warn("event loop closed with open handles: %s", uv_strerror(rc));
  cleanup(n);
  return 0;
}
