/*
 * edgenode-worker: one of the supervisor's worker processes (worker.h).
 * main.c owns the process's life: its arguments, starting and stopping
 * every module in order, the frames the supervisor sends (spec changes,
 * validation, runs, drains, cordons) and the drain itself. The one worker
 * value lives here and is passed down to every module from here.
 */
#include <errno.h>
#include <time.h>
#include <pthread.h>
#include <getopt.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base.h"
#include "jail.h"
#include "mpk.h"
#include "sandbox.h"

static worker self;

/* The sandbox (jail/), entered at the end of start-up. */
static struct {
  const char *facets; /* default DATA/facets */
  int user, strict, off;
  uid_t uid;
  gid_t gid;
  jail_report report;
} jail_args;

static void usage(void) {
  fprintf(stderr,
          "usage: edgenode-worker --id N --ipc-fd FD --listen-fd FD --data DIR\n"
          "                       [--max-body-bytes B] [--header-timeout-ms T]\n"
          "                       [--body-timeout-ms T] [--body-min-rate R]\n"
          "                       [--max-connections N] [--max-connections-per-addr N]\n"
          "                       [--isolate-memory-mb M] [--max-isolates N]\n"
          "                       [--idle-timeout-s S] [--compact-idle-s S]\n"
          "                       [--egress-socket PATH] [--tenant NAME] [--running-fd FD]\n"
          "                       [--replica-socket PATH]\n"
          "                       [--log-level debug|info|warn|error]\n"
          "                       [--jail-facets DIR] [--jail-user UID:GID] [--require-sandbox]\n"
          "                       [--no-jail] [--python-dir DIR] [--python-pool N]\n"
          "Started by edgenode; not meant to be run by hand.\n");
}

static int parse_args(int argc, char **argv, worker_config *c, log_level *level) {
  static const struct option opts[] = {
      {"id", required_argument, NULL, 'i'},
      {"ipc-fd", required_argument, NULL, 'p'},
      {"listen-fd", required_argument, NULL, 'l'},
      {"data", required_argument, NULL, 'd'},
      {"max-body-bytes", required_argument, NULL, 'b'},
      {"header-timeout-ms", required_argument, NULL, 't'},
      {"body-timeout-ms", required_argument, NULL, 'B'},
      {"body-min-rate", required_argument, NULL, 'R'},
      {"max-connections", required_argument, NULL, 'C'},
      {"max-connections-per-addr", required_argument, NULL, 'A'},
      {"log-level", required_argument, NULL, 'v'},
      {"isolate-memory-mb", required_argument, NULL, 'm'},
      {"max-isolates", required_argument, NULL, 'x'},
      {"idle-timeout-s", required_argument, NULL, 'e'},
      {"compact-idle-s", required_argument, NULL, 'c'},
      {"egress-socket", required_argument, NULL, 'g'},
      {"replica-socket", required_argument, NULL, 'P'},
      {"tenant", required_argument, NULL, 'T'},
      {"running-fd", required_argument, NULL, 'r'},
      {"jail-facets", required_argument, NULL, 'J'},
      {"jail-user", required_argument, NULL, 'U'},
      {"require-sandbox", no_argument, NULL, 'S'},
      {"no-jail", no_argument, NULL, 'N'},
      {"python-dir", required_argument, NULL, 'D'},
      {"python-pool", required_argument, NULL, 'Y'},
      {NULL, 0, NULL, 0},
  };
  c->id = 0;
  c->ipc_fd = c->listen_fd = c->running_fd = -1;
  c->dedicated = NULL;
  c->data_dir = "./data";
  c->max_body_bytes = 10u * 1024 * 1024;
  c->header_timeout_ms = 10000;
  c->body_timeout_ms = 30000;
  c->body_min_rate = HTTP_DEFAULT_BODY_MIN_RATE;
  c->max_connections = 10000;
  c->max_connections_per_addr = 256;
  c->isolate_memory_mb = 1024;
  c->max_isolates = WORKER_MAX_ISOLATES;
  c->idle_timeout_s = 300;
  c->compact_idle_s = 5;
  c->python_pool = 2;
  int opt;
  uint64_t v;
  while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (opt) {
      case 'i': if (parse_u64(optarg, 0, 100000, &v)) return -1; c->id = (int)v; break;
      case 'p': if (parse_u64(optarg, 0, 65535, &v)) return -1; c->ipc_fd = (int)v; break;
      case 'l': if (parse_u64(optarg, 0, 65535, &v)) return -1; c->listen_fd = (int)v; break;
      case 'd': c->data_dir = optarg; break;
      case 'b': if (parse_u64(optarg, 0, 1ull << 40, &v)) return -1; c->max_body_bytes = (size_t)v; break;
      case 't': if (parse_u64(optarg, 1, 3600000, &v)) return -1; c->header_timeout_ms = (uint64_t)v; break;
      case 'B': if (parse_u64(optarg, 1, 3600000, &v)) return -1; c->body_timeout_ms = v; break;
      case 'R': if (parse_u64(optarg, 0, 1ull << 30, &v)) return -1; c->body_min_rate = v; break;
      case 'C': if (parse_u64(optarg, 1, 1ull << 24, &v)) return -1; c->max_connections = v; break;
      case 'A': if (parse_u64(optarg, 0, 1ull << 24, &v)) return -1; c->max_connections_per_addr = v; break;
      case 'm': if (parse_u64(optarg, 16, 1ull << 20, &v)) return -1; c->isolate_memory_mb = (uint64_t)v; break;
      case 'x': if (parse_u64(optarg, 16, 20000, &v)) return -1; c->max_isolates = (size_t)v; break;
      case 'e': if (parse_u64(optarg, 1, 86400, &v)) return -1; c->idle_timeout_s = (uint64_t)v; break;
      case 'c': if (parse_u64(optarg, 1, 86400, &v)) return -1; c->compact_idle_s = (uint64_t)v; break;
      case 'g': c->egress_socket = optarg; break;
      case 'P': c->replica_socket = optarg; break;
      case 'T':
        if (!worker_name_valid(optarg, strlen(optarg))) return -1;
        c->dedicated = optarg;
        break;
      case 'r': if (parse_u64(optarg, 0, 65535, &v)) return -1; c->running_fd = (int)v; break;
      case 'J': jail_args.facets = optarg; break;
      case 'U': if (jail_parse_user(optarg, &jail_args.uid, &jail_args.gid)) return -1; jail_args.user = 1; break;
      case 'S': jail_args.strict = 1; break;
      case 'N': jail_args.off = 1; break;
      case 'D': c->python_dir = optarg; break;
      case 'Y': if (parse_u64(optarg, 0, 64, &v)) return -1; c->python_pool = (size_t)v; break;
      case 'v':
        if (strcmp(optarg, "debug") == 0) *level = LOG_DEBUG;
        else if (strcmp(optarg, "info") == 0) *level = LOG_INFO;
        else if (strcmp(optarg, "warn") == 0) *level = LOG_WARN;
        else if (strcmp(optarg, "error") == 0) *level = LOG_ERROR;
        else return -1;
        break;
      default: return -1;
    }
  }
  return (optind == argc && c->ipc_fd >= 0 && c->listen_fd >= 0) ? 0 : -1;
}

/* ---- draining and exit ---- */

static void drain_tick(uv_timer_t *t) { worker_maybe_exit(container_of(t, worker, drain_timer)); }

static void start_drain(worker *w, uint64_t grace_ms, const char *why) {
  if (w->draining) return;
  w->draining = 1;
  w->drain_deadline_ns = time_mono_ns() + grace_ms * 1000000u;
  /* Connections count too: a request that arrives on one that is open
   * still gets its answer, though it was not in flight yet. */
  log_info("draining (%s): %zu requests in flight, %zu connections open", why,
           w->ingress.in_flight, w->ingress.connections);
  pool_drain();
  http_server_stop_accepting(&w->ingress);
  uv_timer_start(&w->drain_timer, drain_tick, 10, 10);
  worker_maybe_exit(w);
}

static void on_signal(uv_signal_t *s, int signum) {
  worker *w = s->data;
  start_drain(w, 10000, signum == SIGTERM ? "SIGTERM" : "SIGINT");
}

/* ---- the supervisor link ---- */

static const char *error_kind_name(iso_error_kind kind) {
  switch (kind) {
    case ISO_ERR_SYNTAX: return "syntax";
    case ISO_ERR_LINK: return "link";
    case ISO_ERR_EXCEPTION: return "exception";
    case ISO_ERR_NO_HANDLER: return "no_handler";
    case ISO_ERR_CPU: return "cpu";
    case ISO_ERR_MEMORY: return "memory";
    case ISO_ERR_CANCELLED: return "cancelled";
    default: return "internal";
  }
}

static void on_validate(worker *w, const proto_frame *frame) {
  json_t *spec = json_loadb((const char *)frame->payload, frame->length, 0, NULL);
  iso_module *mods = NULL;
  const char *main_module = NULL, *why = "spec is not a JSON object";
  int n = json_is_object(spec) ? spec_modules(spec, &mods, &main_module, &why) : -1;
  if (n < 0) {
    worker_reply(w, PROTO_VALIDATE_RESULT, frame->id,
               json_pack("{s:b,s:s,s:s}", "ok", 0, "kind", "internal", "error", why));
    json_decref(spec);
    return;
  }
  iso_limits limits;
  spec_limits(spec, &limits);
  iso_error err = {0};
  if (iso_validate(&limits, mods, (size_t)n, main_module, &err) == 0) {
    worker_reply(w, PROTO_VALIDATE_RESULT, frame->id, json_pack("{s:b}", "ok", 1));
  } else {
    json_t *r = json_pack("{s:b,s:s,s:s}", "ok", 0, "kind", error_kind_name(err.kind), "error",
                          err.message ? err.message : "unknown error");
    if (err.module) json_object_set_new(r, "module", json_string(err.module));
    if (err.line > 0) json_object_set_new(r, "line", json_integer(err.line));
    if (err.column > 0) json_object_set_new(r, "column", json_integer(err.column));
    worker_reply(w, PROTO_VALIDATE_RESULT, frame->id, r);
  }
  iso_error_clear(&err);
  free(mods);
  json_decref(spec);
}

static void on_changed(worker *w, const proto_frame *frame) {
  json_t *body = json_loadb((const char *)frame->payload, frame->length, 0, NULL);
  const char *name = json_string_value(json_object_get(body, "name"));
  if (name) tenant_changed(w, name);
  json_decref(body);
}

/* A table the supervisor could not have stored is kept out, and the one
 * before stays. */
static void on_routes(worker *w, const proto_frame *frame) {
  json_t *body = json_loadb((const char *)frame->payload, frame->length, 0, NULL);
  char *err = NULL;
  http_routes *t = http_routes_parse(json_object_get(body, "routes"), &err);
  json_decref(body);
  if (t == NULL) {
    log_warn("ingress routes refused: %s", err);
    free(err);
    return;
  }
  http_routes_free(w->routes);
  w->routes = t;
}

static void on_drain(worker *w, const proto_frame *frame) {
  json_t *body = json_loadb((const char *)frame->payload, frame->length, 0, NULL);
  json_int_t grace = json_integer_value(json_object_get(body, "grace_ms"));
  json_decref(body);
  start_drain(w, grace > 0 ? (uint64_t)grace : 10000, "supervisor");
}

/* ---- the running slot and placement ---- */

static void map_running_slot(worker *w) {
  if (w->config.running_fd < 0) return;
  void *p = mmap(NULL, sizeof(proto_running), PROT_READ | PROT_WRITE, MAP_SHARED,
                 w->config.running_fd, 0);
  close(w->config.running_fd);
  if (p == MAP_FAILED) {
    log_warn("cannot map the running slot: %s (crashes will not name a tenant)", strerror(errno));
    return;
  }
  w->running_slot = p;
  w->running_slot->magic = PROTO_RUNNING_MAGIC;
}

/* The heartbeat the supervisor watches (proto.h): a thread of its own, so
 * that it goes on while the loop runs a tenant's JavaScript. */
static void *heartbeat_main(void *arg) {
  proto_running *slot = arg;
  struct timespec pause = {.tv_sec = 0, .tv_nsec = PROTO_HEARTBEAT_MS * 1000000L};
  for (;;) {
    __atomic_fetch_add(&slot->heartbeat, 1, __ATOMIC_RELAXED);
    nanosleep(&pause, NULL);
  }
  return NULL;
}

static void start_heartbeat(worker *w) {
  if (w->running_slot == NULL) return;
  pthread_t t;
  int rc = pthread_create(&t, NULL, heartbeat_main, w->running_slot);
  if (rc == 0) rc = pthread_detach(t);
  /* Without it the supervisor never sees the count move, and so never
   * takes this process for stopped: only the watch is lost. */
  if (rc != 0) log_warn("cannot start the heartbeat thread: %s", strerror(rc));
}

static tenant_placement placement_of(const char *state) {
  if (state && strcmp(state, "cordoned") == 0) return TENANT_CORDONED;
  if (state && strcmp(state, "suspended") == 0) return TENANT_SUSPENDED;
  return TENANT_SHARED;
}

static void on_cordon(worker *w, const proto_frame *frame) {
  json_t *body = json_loadb((const char *)frame->payload, frame->length, 0, NULL);
  const char *name = json_string_value(json_object_get(body, "name"));
  if (name == NULL || !worker_name_valid(name, strlen(name))) {
    json_decref(body);
    return;
  }
  if (w->config.dedicated) { /* a dedicated process runs its tenant whatever it is told */
    if (frame->id) worker_reply(w, PROTO_CORDON_DONE, frame->id, json_pack("{s:s}", "name", name));
    json_decref(body);
    return;
  }
  tenant *t = tenant_get_or_add(w, name, strlen(name));
  const char *socket = json_string_value(json_object_get(body, "socket"));
  const char *error = json_string_value(json_object_get(body, "error"));
  free(t->cordon_socket);
  t->cordon_socket = socket ? xstrdup(socket) : NULL;
  t->cordon_ready = json_is_true(json_object_get(body, "ready")) && t->cordon_socket != NULL;
  free(t->cordon_error);
  t->cordon_error = error ? xstrdup(error) : NULL;
  t->cordon_until_ms = json_integer_value(json_object_get(body, "until"));
  tenant_set_placement(w, t, placement_of(json_string_value(json_object_get(body, "state"))));
  if (frame->id) {
    t->cordon_done_id = frame->id;
    worker_cordon_settled(w, t);
  }
  handoff_flush(w, t);
  json_decref(body);
}

static void on_frame(proto_channel *ch, const proto_frame *frame) {
  worker *w = ch->data;
  switch (frame->type) {
    case PROTO_WORKER_SPEC:
    case PROTO_ERROR: tenant_spec_arrived(w, frame->id, frame); break;
    case PROTO_WORKER_CHANGED: on_changed(w, frame); break;
    case PROTO_VALIDATE: on_validate(w, frame); break;
    case PROTO_RUN: run_on_frame(w, frame); break;
    case PROTO_DRAIN: on_drain(w, frame); break;
    case PROTO_CORDON: on_cordon(w, frame); break;
    case PROTO_TAIL: tail_on_frame(w, frame); break;
    case PROTO_ROUTES: on_routes(w, frame); break;
    case PROTO_PING: proto_channel_send(ch, PROTO_PONG, frame->id, NULL, 0); break;
    default: log_debug("ignoring %s from the supervisor", proto_type_name(frame->type));
  }
}

static void on_supervisor_closed(proto_channel *ch, int reason) {
  worker *w = ch->data;
  if (!w->draining) log_warn("supervisor link closed (%s): draining", proto_strerror(reason));
  start_drain(w, 10000, "supervisor gone");
}

static int say_hello(worker *w) {
  json_t *hello = json_pack("{s:i,s:i,s:s,s:s?}", "id", w->config.id, "pid", (int)getpid(), "v8",
                            iso_v8_version(), "tenant", w->config.dedicated);
  json_object_set_new(hello, "mpk", mpk_start(w->config.id, w->config.ipc_fd));
  json_object_set_new(hello, "jail", jail_report_json(&jail_args.report));
  char *text = json_dumps(hello, JSON_COMPACT);
  json_decref(hello);
  int rc = proto_channel_send(&w->supervisor, PROTO_HELLO, 0, text, strlen(text));
  free(text);
  return rc;
}

/* Everything the process needs is open and running: lock it in. Under
 * --require-sandbox a layer refused ends the process. */
static int enter_jail(worker *w) {
  jail_report *r = &jail_args.report;
  if (jail_args.off) {
    for (int i = 0; i < JAIL_LAYERS; i++) r->layer[i].state = JAIL_NOT_WANTED;
    log_warn("sandbox off (--no-jail)");
    return 0;
  }
  char *facets = jail_args.facets ? xstrdup(jail_args.facets) : xasprintf("%s/facets", w->config.data_dir);
  const char *writable[] = {facets, NULL};
  /* SQLite's temporary files (VACUUM, large sorts) go where the jail lets
   * it write, not to /var/tmp. */
  if (setenv("SQLITE_TMPDIR", facets, 1) != 0) log_warn("cannot set SQLITE_TMPDIR: %s", strerror(errno));
  /* The data directory's unix sockets are the only ones the process needs
   * (the egress, replication, cordoned tenants, forwarding relays). */
  const char *reachable[] = {w->config.data_dir, NULL};
  jail_config jc = {.kind = JAIL_WORKER, .writable = writable, .reachable = reachable, .new_netns = 1,
                    .drop_user = jail_args.user, .uid = jail_args.uid, .gid = jail_args.gid,
                    .strict = jail_args.strict};
  int rc = jail_enter(&jc, r);
  free(facets);
  for (int i = 0; i < JAIL_LAYERS; i++)
    if (r->layer[i].state == JAIL_OFF)
      log_warn("sandbox: %s is off: %s", jail_layer_name((jail_layer)i), r->layer[i].detail);
  if (rc != 0 && jail_args.strict) {
    log_error("sandbox incomplete under --require-sandbox: %s", strerror(-rc));
    return -1;
  }
  return 0;
}

static int start(worker *w) {
  int rc;
  w->loop = uv_default_loop();
  id_map_init(&w->tokens);
  map_running_slot(w);
  start_heartbeat(w);
  if ((rc = proto_channel_open_fd(&w->supervisor, w->loop, w->config.ipc_fd, on_frame,
                                  on_supervisor_closed, w)) != 0) {
    log_error("cannot open the supervisor link on fd %d: %s", w->config.ipc_fd, uv_strerror(rc));
    return -1;
  }
  uint64_t nofile = w->nofile = fd_limit_raise();
  size_t budget = fd_connection_budget(nofile, WORKER_FD_RESERVE);
  size_t max_conns = w->config.max_connections < budget ? w->config.max_connections : budget;
  log_info("descriptors: RLIMIT_NOFILE %llu, up to %zu connections (%llu configured, %d kept "
           "for facets, isolates and links)",
           (unsigned long long)nofile, max_conns, (unsigned long long)w->config.max_connections,
           WORKER_FD_RESERVE);
  http_server_config hc = {
      .max_body_bytes = w->config.max_body_bytes,
      .header_timeout_ms = w->config.header_timeout_ms,
      .body_timeout_ms = w->config.body_timeout_ms,
      .body_min_rate = w->config.body_min_rate ? w->config.body_min_rate : HTTP_NO_MIN_RATE,
      .max_connections = max_conns,
      .max_connections_per_addr = w->config.max_connections_per_addr,
      /* Larger bodies reach the worker's request.body as they arrive;
       * smaller ones come whole, which costs the tenant less CPU. */
      .stream_body_above = 1024u * 1024,
  };
  /* Every worker process accepts on the same listening socket, and libuv
   * accepts until the queue is empty: connections opened together (a
   * client's keep-alive pool) all went to whichever process woke first,
   * and the others sat idle (2 runs in 5 with 16 connections and two
   * processes). This makes libuv pause briefly after each accept, so the
   * other processes, woken too, take their share. An operator's own
   * setting of the variable stands. */
  if (setenv("UV_TCP_SINGLE_ACCEPT", "1", 0) != 0)
    log_warn("cannot set UV_TCP_SINGLE_ACCEPT: %s", strerror(errno));
  if ((rc = http_server_init(&w->ingress, w->loop, &hc, ingress_on_request, w)) != 0 ||
      (rc = http_server_listen_fd(&w->ingress, w->config.listen_fd)) != 0) {
    log_error("cannot listen on fd %d: %s", w->config.listen_fd, uv_strerror(rc));
    return -1;
  }
  if ((rc = sched_init(&w->sched, w->loop)) != 0) {
    log_error("cannot start the scheduler: %s", uv_strerror(rc));
    return -1;
  }
  if (facet_link_start(w) != 0) log_warn("env.DB bindings will fail on this process");
  stats_start(w);
  sandbox_wall_start(w);
  pool_start(w);
  evict_start(w);
  uv_timer_init(w->loop, &w->drain_timer);
  uv_signal_init(w->loop, &w->sigterm);
  uv_signal_init(w->loop, &w->sigint);
  w->sigterm.data = w->sigint.data = w;
  uv_signal_start(&w->sigterm, on_signal, SIGTERM);
  uv_signal_start(&w->sigint, on_signal, SIGINT);
  log_info("serving: V8 %s", iso_v8_version());
  if (enter_jail(w) != 0) return -1;
  /* Test only: what the jail must refuse, tried once it holds. */
  const char *attempts = getenv("EDGENODE_TEST_JAIL_ATTEMPT");
  if (attempts && *attempts) worker_attempts_arm(w, attempts);
  return say_hello(w);
}

static void close_handle(uv_handle_t *h, void *arg) {
  (void)arg;
  if (!uv_is_closing(h)) uv_close(h, NULL);
}

/*
 * ArrayBuffers, request bodies and V8's large objects come and go with every
 * request. By default glibc serves each block over 128 KiB with an mmap of
 * its own and unmaps it when freed; the page faults and TLB shootdowns of
 * that churn cost more than the work on virtual machines (copying 1 MiB in
 * JavaScript took 15 ms instead of 0.1). Such blocks stay in the heap, and
 * up to 64 MiB of free heap is kept for reuse; the supervisor's RSS
 * backstop still bounds the process.
 */
static void keep_large_blocks(void) {
  if (mallopt(M_MMAP_THRESHOLD, 32 << 20) != 1 || mallopt(M_TRIM_THRESHOLD, 64 << 20) != 1)
    log_warn("cannot tune malloc: large blocks keep their own mappings");
}

/* Pyodide's files are mapped before the jail closes the file system. The
 * default is where deploy/setup.sh installs the npm package: the build
 * tree's pyodide/ beside bin/. Without them Python workers fail, clearly. */
static void open_python(const char *dir) {
  char exe[4096];
  char *derived = NULL;
  if (dir == NULL) {
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash == NULL) return;
    *slash = '\0';
    derived = xasprintf("%s/../pyodide/node_modules/pyodide", exe);
    dir = derived;
  }
  if (iso_python_open(dir) == 0) log_debug("Python workers: Pyodide from %s", dir);
  free(derived);
}

int main(int argc, char **argv) {
  log_level level = LOG_INFO;
  if (parse_args(argc, argv, &self.config, &level) != 0) {
    usage();
    return 2;
  }
  char process[96];
  if (self.config.dedicated) snprintf(process, sizeof process, "cordon-%s", self.config.dedicated);
  else snprintf(process, sizeof process, "worker-%d", self.config.id);
  log_init(process, level);
  if (stray_output_start() != 0) log_warn("V8's own reports stay plain text: %s", strerror(errno));
  signal(SIGPIPE, SIG_IGN);
  keep_large_blocks();
  if (iso_platform_init() != 0) {
    log_error("cannot initialise V8");
    return 1;
  }
  open_python(self.config.python_dir);
  if (start(&self) != 0) {
    pool_stop(); /* its thread may be inside V8 */
    return 1;
  }
  uv_run(self.loop, UV_RUN_DEFAULT);
  loader_free_all(&self);
  handoff_stop(&self);
  /* Before the tenants go; a report this small is written at once, before
   * the channel is closed below. */
  stats_flush(&self);
  gate_stop(&self); /* its responses hold their sandboxes */
  tenant_hold_stop(&self);
  tenant_free_all(&self);
  pool_stop();
  facet_link_stop(&self);
  sched_close(&self.sched);
  id_map_free(&self.tokens);
  uv_walk(self.loop, close_handle, NULL);
  uv_run(self.loop, UV_RUN_DEFAULT);
  if (uv_loop_close(self.loop) != 0) log_debug("loop closed with handles still open");
  egress_link_free(&self);
  tail_free(&self);
  http_routes_free(self.routes);
  worker_attempts_free(&self);
  log_info("exiting");
  return 0;
}
