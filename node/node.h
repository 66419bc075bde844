/*
 * node: the edgenode supervisor. It reads the configuration, owns the data
 * directory and node.db (the registry of deployed workers), spawns and
 * restarts the worker processes and the egress process and serves the
 * control API. It never loads V8.
 *
 * This header is internal to node/: config.c, db.c, spec.c and child.c form
 * the `node_core` library (also linked by the unit tests); the other files
 * make up the edgenode executable. Calls go one way, from the top down:
 *   main.c -> control.c -> route modules (deploy.c, tenants.c, metrics.c,
 *   run.c, facet_routes.c, egress_routes.c, secrets.c, tail.c, and the routes of drain.c,
 *   events.c, cordons.c) -> drain.c, cordons.c, memwatch.c -> fleet_sync.c ->
 *   procs.c -> egress.c -> sandbox.c, events.c, stats.c, route.c, child.c, db.c,
 *   spec.c, config.c.
 * Upward notifications are callbacks: node_child_ops, n->proc_listener,
 * n->cordon_hooks, n->procs_changed / n->procs_stopped. tests/tools/call_cycles.py
 * checks that no circle of calls between files comes back.
 */
#ifndef EDGENODE_NODE_H
#define EDGENODE_NODE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <uv.h>

#include "base.h"
#include "cordon.h"
#include "http.h"
#include "proto.h"

/* Descriptors the supervisor keeps out of the control API's connection cap,
 * for its own work: spawning and watching worker processes (their links,
 * memfds and spawn pipes), node.db, the egress, the fleet, facet backups. */
#define NODE_FD_RESERVE 512

/* ---- configuration (config.c) ------------------------------------------ */

typedef struct node_config {
  char listen_host[64];      /* numeric address of the ingress socket */
  int listen_port;
  char control_host[64];     /* numeric address of the control API */
  int control_port;
  char *data_dir;            /* owned */
  char *config_file;         /* owned; NULL without --config */
  char *control_token_file;  /* owned; NULL means DATA/control.token */
  int workers;               /* 1..256 */
  int dev;                   /* deploy examples/hello.js as "hello" on start */
  int64_t grace_ms;          /* drain grace period */
  int max_body_mb;           /* ingress request body limit */
  int64_t header_timeout_ms; /* ingress: a request head must arrive within this */
  int64_t body_timeout_ms;   /* both listeners: a body's deadline and rate window */
  int64_t body_min_rate;     /* bytes/s a body must keep past each window; 0: a plain deadline */
  int64_t max_connections;   /* ingress, per worker process (and RLIMIT_NOFILE less a reserve) */
  int64_t max_connections_per_addr;         /* ingress, per worker process; 0: no cap */
  int64_t control_max_connections;          /* control API (and RLIMIT_NOFILE less a reserve) */
  int64_t control_max_connections_per_addr; /* control API; 0: no cap */
  int64_t worker_memory_mb;  /* RSS budget per worker process; 0 = derived from RAM */
  int64_t isolate_memory_mb; /* heap budget of one process's isolates (eviction) */
  int64_t max_isolates;      /* isolates one worker process holds at most */
  int64_t python_pool;       /* Python interpreters each worker process keeps booted */
  char *python_dir;          /* owned; Pyodide's npm package directory, or NULL */
  int64_t idle_timeout_s;    /* idle isolates are evicted after this */
  int64_t compact_idle_s;    /* idle isolates are compacted after this */
  log_level log_level;
  char **egress_allow_cidr;  /* owned; ranges fetch() may reach despite the SSRF rules */
  size_t n_egress_allow_cidr;
  char **ca_files;           /* owned; certificates the egress trusts besides the system's */
  size_t n_ca_files;
  cordon_rule *cordon_rules; /* owned; the monitor's rules (cordon/cordon.h) */
  size_t n_cordon_rules;
  int cordon_rules_set;      /* "cordon_rules" was given: no defaults, even when empty */
  int64_t cordon_memory_mb;  /* RSS budget of a dedicated process; 0 = as a shared one */
  int cordon_nice;           /* nice value of dedicated processes */
  int cordon_idle;           /* 1: dedicated processes run under SCHED_IDLE */
  int cordon_suspend_crashes; /* dedicated-process crashes that suspend the tenant ... */
  int64_t cordon_suspend_window_s; /* ... within this many seconds */
  int max_dedicated;         /* dedicated processes at most; past it the worst offender is suspended */
  int64_t dedicated_idle_s;  /* a dedicated process without a request this long exits; 0: never */
  int64_t dedicated_suspend_s; /* how long a suspension for max_dedicated lasts */
  int64_t facet_lease_ms;    /* a facet owner's lease in the fleet */
  int64_t facet_publish_ms;  /* how long a facet commit waits for the fleet */
  int64_t facet_snapshot_every; /* commits between a worker's facet snapshots in the fleet */
  int64_t metrics_max_tenants; /* tenants with a latency histogram of their own (metrics.c) */
  char *fleet;               /* owned; the fleet's NATS URLs, NULL: a node on its own */
  int fleet_tls;             /* a tls:// URL among them */
  char *node_name;           /* owned; the name in the fleet, NULL: the host name */
  char *fleet_creds;         /* owned; NATS credentials file, or NULL */
  char *fleet_ca;            /* owned; CA file for TLS to NATS, or NULL */
  char **fleet_keys;         /* owned; --fleet-key files, handed to the egress (the first seals) */
  size_t n_fleet_keys;
  char *user;                /* owned; "UID:GID" the sandboxed processes become, or NULL */
  int require_sandbox;       /* a sandbox layer refused stops the node */
  int no_sandbox;            /* worker processes and the egress run unsandboxed */
} node_config;

/* body_min_rate as http_server_config takes it (0 there is its default). */
static inline uint64_t node_body_min_rate(const node_config *c) {
  return c->body_min_rate ? (uint64_t)c->body_min_rate : HTTP_NO_MIN_RATE;
}

enum {
  NODE_CONFIG_OK = 0,
  NODE_CONFIG_HELP = 1,    /* --help: print node_config_usage(), exit 0 */
  NODE_CONFIG_VERSION = 2, /* --version: print the version, exit 0 */
  NODE_CONFIG_ERROR = -1,  /* *err is set: print it, exit 2 */
};

#define NODE_CONFIG_MAX_WORKERS 256

/* Fills in the defaults (workers = available parallelism, capped). */
void node_config_init(node_config *c);
void node_config_free(node_config *c);

/*
 * Parses the command line over the defaults: first finds --config and applies
 * that file, then applies every flag, so flags override the file. Returns a
 * NODE_CONFIG_* value; on NODE_CONFIG_ERROR, *err is a heap string naming the
 * offending flag or key ("edgenode: config: \"workers\": must be an integer
 * between 1 and 256") that the caller frees.
 */
int node_config_parse(node_config *c, int argc, char **argv, char **err);

/*
 * Applies a config file's text (a JSON object whose keys are the flag names
 * with hyphens as underscores). `origin` names the source in messages
 * (usually the file name). Returns NODE_CONFIG_OK or NODE_CONFIG_ERROR.
 */
int node_config_apply_json(node_config *c, const char *text, size_t len, const char *origin,
                           char **err);

const char *node_config_usage(void);
const char *node_log_level_name(log_level level);

/* ---- node.db (db.c) --------------------------------------------------------- */

/* The node's database in the data directory: every connection, the schema
 * and its migrations, every statement. Rows are JSON objects. */
typedef struct node_db node_db;

/* PRAGMA user_version of a node.db this edgenode writes. */
#define NODE_DB_SCHEMA_VERSION 4

/* Versions of a worker node.db keeps (code and spec), the newest ones. */
#define NODE_DB_VERSIONS_KEPT 20

/*
 * Opens (creating if needed) node.db at `path`: WAL journal, synchronous=FULL
 * (the history NORMAL), schema migrated to NODE_DB_SCHEMA_VERSION. Returns 0,
 * or -EIO (-EPROTO for a schema newer than this edgenode) with *err set to a
 * heap message naming the file.
 */
int node_db_open(const char *path, node_db **out, char **err);
void node_db_close(node_db *db);
/* Why the last call failed (for logs). */
const char *node_db_errmsg(node_db *db);
const char *node_db_history_errmsg(node_db *db);

/* What a deploy stores, all borrowed. */
typedef struct node_db_worker {
  const char *main_module;
  json_t *modules;   /* {name: source} */
  json_t *bindings;
  json_t *limits;
  json_t *egress;    /* the worker's egress rules (an array); NULL keeps the stored ones */
  int64_t version;   /* 0: the next version; > 0: this one (the fleet's), stored only when
                        newer than any the name had: -EALREADY otherwise */
  int64_t rollback_of; /* > 0: this version restores that one (kept in its history) */
} node_db_worker;

/* What a deploy stores, read from a spec {"main_module", "modules",
 * "bindings", "limits", "egress"?, "rollback_of"?} (borrowed from it; version 0). */
node_db_worker node_db_worker_of(json_t *spec);

/*
 * A worker row is a JSON object {"name", "version", "main_module", "modules":
 * {name: source}, "bindings": {}, "limits": {}, "created_at", "updated_at"}
 * with the times in milliseconds since the epoch.
 *
 * node_db_worker_put() inserts or replaces a worker and, when w->egress is
 * set, its egress rules, in one transaction: either all of it is stored or
 * nothing changes. Versions never repeat for a name, not even across a
 * delete. Returns 1 when the name was new, 0 when it replaced a row, -EINVAL
 * when the egress rules are refused (node_db_errmsg says why), -EIO on a
 * database failure; on success *row (may be NULL) receives the stored row
 * (caller decrefs).
 */
int node_db_worker_put(node_db *db, const char *name, const node_db_worker *w, int64_t now_ms,
                       json_t **row);
/* 0 and *row set (caller decrefs), -ENOENT, or -EIO. */
int node_db_worker_get(node_db *db, const char *name, json_t **row);
/* 1 when deployed, -ENOENT when not, -EIO. */
int node_db_worker_exists(node_db *db, const char *name);
/* Deletes the worker and its egress rules in one transaction: 0, -ENOENT or -EIO. */
int node_db_worker_delete(node_db *db, const char *name);
/* 0 and *rows = array of rows sorted by name (caller decrefs), or -EIO. */
int node_db_worker_list(node_db *db, json_t **rows);

/* 0 and *rows = the kept versions of a worker, newest first: [{"version",
 * "main_module", "modules": [names], "size" (bytes of source), "hash",
 * "created_at" (ms), "egress" (whether its deploy carried rules),
 * "rollback_of"?}] ([] for an unknown name), or -EIO. */
int node_db_versions_list(node_db *db, const char *name, json_t **rows);
/* 0 and *spec = a kept version as a deploy spec {"main_module", "modules",
 * "bindings", "limits", "egress"?} (caller decrefs), -ENOENT, or -EIO. */
int node_db_version_get(node_db *db, const char *name, int64_t version, json_t **spec);

/* 0 and *split = a worker's traffic split [{"version", "percent"}, ...], or
 * NULL when it has none (all to the current version); -EIO. */
int node_db_traffic_get(node_db *db, const char *name, json_t **split);
/* Stores a split (checked by the caller), or with NULL ends it: 0, -ENOENT
 * for a worker that is not deployed, -EIO. A deploy, rollback or delete of
 * the worker ends its split too. */
int node_db_traffic_put(node_db *db, const char *name, json_t *split, int64_t now_ms);
/* Adds "traffic": the worker's split, each version but the current one with
 * its spec, to a PROTO_WORKER_SPEC row; nothing when it has none. 0 or -EIO. */
int node_db_traffic_attach(node_db *db, const char *name, json_t *row);

/* The ingress routes as stored ([] when none; *updated_at 0 then), or NULL on a
 * database error. */
json_t *node_db_routes_get(node_db *db, int64_t *updated_at);
/* Replaces them (checked by the caller with http_routes_parse): 0 or -EIO. */
int node_db_routes_put(node_db *db, json_t *routes, int64_t now_ms);

/* Why these egress rules would be refused (heap), or NULL when they are fine. */
char *node_db_rules_problem(json_t *rules);
/* A worker's egress rules ([] when none; *updated_at 0 then), or NULL on a database error. */
json_t *node_db_egress_get(node_db *db, const char *name, int64_t *updated_at);
/* Stores (an empty array: removes) a worker's rules: 0, -EINVAL (refused) or -EIO. */
int node_db_egress_put(node_db *db, const char *name, json_t *rules, int64_t now_ms);
/* Every stored rule list, {name: rules}. */
json_t *node_db_egress_all(node_db *db);

/*
 * Secrets as the supervisor knows them (table secrets): a name, the workers
 * it is granted to, and in a fleet its value sealed with the fleet key
 * ({"key", "nonce", "sealed"}: ciphertext only). Without a fleet the value
 * itself is the egress process's alone. A row is
 * {"name", "workers": [...], "sealed"?, "updated_at"} (ms; 0: no value yet).
 */
/* Stores a row. workers NULL keeps the stored grants ([] for a new row);
 * sealed NULL stores none; updated_at 0 keeps the stored time. 0 or -EIO. */
int node_db_secret_put(node_db *db, const char *name, json_t *workers, json_t *sealed,
                       int64_t updated_at);
/* 0, -ENOENT or -EIO. */
int node_db_secret_delete(node_db *db, const char *name);
/* The row (caller decrefs), or NULL when there is none (or on a database error). */
json_t *node_db_secret_get(node_db *db, const char *name);
/* Every row, sorted by name (caller decrefs); [] on a database error. */
json_t *node_db_secret_list(node_db *db);
/* egress_granted_fn over node.db (data: the node_db): 1 when granted. */
int node_db_secret_granted(void *db, const char *name, size_t len, const char *worker);
/* "secret NAME is not granted to worker W" (heap) for the first secret these
 * rules inject that is not granted to worker, or NULL. Rules must be valid. */
char *node_db_rules_ungranted(node_db *db, const char *worker, json_t *rules);

/* Cordons: one row per cordoned or suspended tenant. */
int node_db_cordon_put(node_db *db, const char *name, const char *state, const char *reason,
                       const char *rule, const char *by, int64_t since_ms);
int node_db_cordon_delete(node_db *db, const char *name);
/* 0 and *rows = [{"name", "state", "reason", "rule", "by", "since"}] by name, or -EIO. */
int node_db_cordon_list(node_db *db, json_t **rows);

/* Appends an event (details: JSON text), pruning the table to about `keep`
 * rows now and then. Returns its id or -EIO. */
int64_t node_db_event_add(node_db *db, int64_t time_ms, const char *kind, const char *tenant,
                          const char *details, int64_t keep);
/* 0 and *rows = the last `max` events oldest first, [{"id", "time", "kind",
 * "tenant"?, "details": {}}], or -EIO. */
int node_db_event_list(node_db *db, int64_t max, json_t **rows);

/* ---- deploy bodies (spec.c) ----------------------------------------------- */

#define NODE_SCRIPT_MAX_BYTES (10u * 1024u * 1024u)

/*
 * Turns the body of PUT /v1/workers/{name} into a spec object
 * {"main_module", "modules", "bindings", "limits"} (limits filled with
 * proto.h's PROTO_SPEC_DEFAULT_*). `content_type` may be NULL. Returns 0
 * with *spec set, or an HTTP
 * status (400, 413, 415) with *error set to the JSON body to send
 * ({"error": "...", ...details}). Either way the caller decrefs.
 */
int node_spec_parse(const char *content_type, const uint8_t *body, size_t len, json_t **spec,
                    json_t **error);

/* The spec for a single module `name` ("index.js") holding `source`; NULL if not UTF-8. */
json_t *node_spec_single(const char *source, size_t len, const char *name);

/* Milliseconds since the epoch as "2026-01-01T00:00:00.000Z". */
void node_iso8601(int64_t ms, char out[32]);

/* ---- the running node ------------------------------------------------------ */

typedef struct node node;

typedef enum node_proc_state {
  NODE_PROC_STARTING,   /* spawned, no HELLO yet */
  NODE_PROC_READY,      /* HELLO received */
  NODE_PROC_RESTARTING, /* exited, waiting for the backoff timer */
  NODE_PROC_STOPPED,    /* exited during shutdown; not restarted */
} node_proc_state;

const char *node_proc_state_name(node_proc_state s);

/* ---- one supervised child process (child.c) --------------------------------- */

/* Restart back-off of a child process: 100 ms doubling to 10 s, reset once
 * a process lived 30 s. Returns the delay to wait and advances *backoff_ms. */
#define NODE_BACKOFF_MIN_MS 100
#define NODE_BACKOFF_MAX_MS 10000
#define NODE_STABLE_AFTER_MS 30000
uint64_t node_backoff_next(uint64_t *backoff_ms, uint64_t lived_ms);

typedef struct node_child node_child;

/* What the owner of a child process decides; every callback gets the child. */
typedef struct node_child_ops {
  /* Spawns the next process: builds its command line, calls node_child_spawn(). */
  int (*spawn)(node_child *c);
  /* A frame from the process. */
  void (*frame)(node_child *c, const proto_frame *f);
  /* The channel closed (`reason` as proto_channel's); the process may still run. NULL: nothing. */
  void (*channel_closed)(node_child *c, int reason);
  /* The process exited after lived_ms: the owner restarts it (node_child_restart) or not. */
  void (*exited)(node_child *c, int64_t status, int sig, uint64_t lived_ms);
  /* One of its handles closed (see node_child_live / node_child_gone); may free the owner. */
  void (*closed)(node_child *c);
  /* A back-off restart spawned a new process. NULL: nothing. */
  void (*restarted)(node_child *c);
} node_child_ops;

struct node_child {
  uv_loop_t *loop;
  const node_child_ops *ops;
  void *data;              /* the owner's */
  node_proc_state state;   /* READY is for the owner to set (at HELLO) */
  uv_process_t process;
  proto_channel channel;   /* on the child's fd 3 */
  int process_open;        /* process handle not yet closed */
  int channel_open;        /* pipe handle not yet closed */
  int channel_started;     /* proto_channel_start() succeeded; closing goes through it */
  int alive;               /* process not yet reaped */
  int pid;
  unsigned restarts;       /* back-off restarts (node_child_restart) */
  int restart_counted;     /* the pending restart is one of them */
  int64_t started_at_ms;
  uint64_t started_mono_ns;
  uint64_t backoff_ms;     /* next restart delay */
  uv_timer_t restart_timer;
  int timer_open;          /* restart_timer not yet closed */
};

/* The next process's command line; fds are inherited as fd 4, 5, ... (-1: none). */
#define NODE_CHILD_MAX_FDS 2
typedef struct node_child_cmd {
  const char *file;
  char **args;             /* NULL-terminated */
  const char *label;       /* for logs ("worker-3", "egress") */
  int fds[NODE_CHILD_MAX_FDS];
  int n_fds;
} node_child_cmd;

/* Sets up the child (no process yet) and its restart timer. */
int node_child_init(node_child *c, uv_loop_t *loop, const node_child_ops *ops, void *data);
/* Spawns a process. On failure to spawn, logs and schedules a restart. */
int node_child_spawn(node_child *c, const node_child_cmd *cmd);
/* Schedules a back-off restart (counted in restarts); returns the delay. */
uint64_t node_child_restart(node_child *c, uint64_t lived_ms);
/* Spawns again at once (once the old handles are closed), not counted. */
void node_child_respawn(node_child *c);
/* Cancels a pending restart: the child stays stopped. */
void node_child_hold(node_child *c);
/* Back to a fresh child: no restarts counted, back-off at its minimum. */
void node_child_reset(node_child *c);
/* Sends `sig` to the process if it runs. */
int node_child_kill(node_child *c, int sig);
/* Closes the restart timer for good (ops->closed follows). */
void node_child_close(node_child *c);
/* A process or one of its handles is still there. */
int node_child_live(const node_child *c);
/* Nothing left: no process, no handle, timer closed. */
int node_child_gone(const node_child *c);
/* 1 when the channel takes frames. */
int node_child_usable(const node_child *c);
/* Sends a JSON frame (the text is wiped afterwards); 0 or a negative error. */
int node_child_send_json(node_child *c, uint8_t type, uint32_t id, json_t *body);

/* One worker process slot; the slot survives restarts of its process. */
typedef struct node_proc {
  node *owner;
  int id;                  /* 1..N, stable across restarts */
  node_child child;        /* the process */
  int ever_ready;          /* for the one-time "ready" line */
  json_t *process_stats;   /* the last "process" member of PROTO_STATS (isolates, evictions) */
  int retiring;            /* drain.c: drained for a reload; not restarted, the slot goes */
  int recycling;           /* drain.c: drained for a reload; respawned at once with the new flags */
  uint64_t cold_starts_total; /* summed over the slot's processes */
  uint64_t evictions_total;
  uint64_t evictions_seen; /* the current process's own count at its last report */
  int stats_pid;           /* the process evictions_seen belongs to */
  char *tenant;            /* dedicated slots: the cordoned tenant it runs (owned); NULL for shared */
  int listen_fd;           /* dedicated slots: the tenant's private socket (borrowed) */
  int released;            /* dedicated slots: freed once the process and handles are gone */
  struct node_proc *next;  /* dedicated slots: the list in n->dedicated */
  struct node_cordon *cordon; /* cordons.c's, for its dedicated slots */
  proto_running *running;  /* the page naming the tenant whose code runs, and the heartbeat */
  int running_fd;          /* its memfd; -1 before the first spawn */
  int memory_killed;       /* memwatch killed it: a budget, not a crash of the running tenant */
  int unresponsive_killed; /* procs.c killed it: its heartbeat stood still (stopped or wedged) */
  uint64_t heartbeat_seen; /* its running slot's heartbeat at the last look */
  int heartbeat_stale;     /* looks in a row that saw it unchanged */
  int mpk_enabled;         /* its HELLO: isolates protected by memory protection keys */
  int mpk_keys;            /* keys it spreads its isolates over */
  unsigned jail_on, jail_off; /* its HELLO: a bit (1 << jail_layer) per sandbox layer on / refused */
} node_proc;

typedef enum node_state { NODE_SERVING, NODE_DRAINING } node_state;

/* How a worker process ended (procs.c), for its event and for blame. */
typedef struct node_proc_exit {
  int64_t status;
  int sig;
  uint64_t lived_ms;
  const char *event;  /* "exit" (status 0), "sandbox_violation" (SIGSYS: seccomp's kill), "crash" */
  int fault;          /* a fault raised inside the process's own code: a bad access, an abort,
                         a sandbox violation; never a SIGKILL or an exit */
  const char *reason; /* "unresponsive" (procs.c killed it: its heartbeat stood still),
                         "memory" (the backstop killed it), or NULL */
} node_proc_exit;

/* What the worker processes report to the module above procs.c that listens
 * (cordons.c registers itself in n->proc_listener). */
typedef struct node_proc_listener {
  void (*hello)(node_proc *p);                       /* a HELLO (shared or dedicated) */
  void (*stats)(node_proc *p, json_t *body);         /* a PROTO_STATS */
  void (*event)(node_proc *p, json_t *body);         /* a PROTO_EVENT */
  void (*cordon_done)(node_proc *p, json_t *body);   /* a PROTO_CORDON_DONE */
  void (*shared_exit)(node_proc *p);                 /* a shared process exited */
  void (*crash)(node_proc *p, const char *tenant);   /* ... crashed while `tenant`'s code ran */
  void (*dedicated_exit)(node_proc *p, const node_proc_exit *e); /* a dedicated process exited */
  void (*dedicated_gone)(node_proc *p);              /* a released slot, about to be freed */
} node_proc_listener;

/*
 * A validation sent to a worker process. cb runs exactly once: status 0 with
 * the PROTO_VALIDATE_RESULT payload, or a negative libuv error
 * (UV_ETIMEDOUT, UV_ECANCELED when the process went away, UV_EAGAIN when no
 * process is ready).
 */
typedef void (*node_validate_cb)(node *n, void *data, int status, json_t *result);

typedef struct node_validation {
  struct node_validation *next;
  node *owner;
  node_proc *proc;
  uint32_t id;
  uv_timer_t timer;
  node_validate_cb cb;
  void *data;
} node_validation;

struct node {
  uv_loop_t *loop;
  node_config cfg;
  char *data_dir;          /* absolute */
  node_db *db;             /* node.db */
  char *token;             /* the control API bearer token; never logged */
  size_t token_len;
  int listen_fd;           /* the ingress socket, handed to the workers */
  char listen_addr[96];    /* "127.0.0.1:8080" with the bound port */
  char control_addr[96];
  http_server control;
  int control_open;
  uint64_t nofile;         /* RLIMIT_NOFILE in force, after raising it to the hard limit */
  char *worker_path;       /* edgenode-worker next to this executable */
  node_proc *procs;
  int n_procs;
  int next_proc;           /* round robin for validations */
  node_validation *validations;
  char *v8_version;
  json_t *tenants;         /* name -> statistics (tenants.c) */
  json_t *counts;          /* stats.c: node-wide counters, node_stats_count_groups[] -> {key: n} */
  json_t *routes;          /* routes.c: {"routes": [...]}, what every worker process is given */
  uv_timer_t memwatch_timer;
  int64_t started_at_ms;
  uint64_t started_mono_ns;
  node_state state;
  int ready_logged;
  uv_signal_t sigterm;
  uv_signal_t sigint;
  uv_timer_t kill_timer;
  int kill_timer_open;
  struct node_egress *egress; /* the egress process (egress.c) */
  int drain_exit;          /* drain.c: exit once drained (a signal), not just drain (the API) */
  int drained;             /* drain.c: a drain finished; the control API stays up */
  struct node_events *events; /* events.c: the history behind GET /v1/events */
  struct node_cordons *cordons; /* cordons.c: cordoned tenants and the monitor */
  node_proc *dedicated;    /* procs.c: the dedicated process slots */
  const node_proc_listener *proc_listener; /* NULL: nobody listens */
  /* main.c's, for the modules below it: a worker or the egress process became
   * ready or exited; during a drain, the last process and its handles are gone. */
  void (*procs_changed)(node *n);
  void (*procs_stopped)(node *n);
  struct node_fleet *fleet; /* fleet_sync.c: with --fleet; NULL otherwise */
  struct node_replica *replica; /* replica.c: the workers' facet link to the fleet; NULL: none */
  struct node_forward *forward; /* forward.c: relays to other nodes; NULL until the first */
  uv_timer_t heartbeat_timer; /* procs.c: watches every worker process's heartbeat */
  int heartbeat_timer_open;
  const struct node_cordon_hooks *cordon_hooks; /* cordons.c's, for fleet_sync.c below it */
  struct node_tails *tails; /* tail.c: open live-log sessions; NULL until the first */
  const struct node_tail_hooks *tail_hooks; /* tail.c's, for procs.c below it; NULL: none */
};

/* facet_routes.c: reads a whole file into memory (*data malloc'ed, with
 * room for a NUL); 0 or -errno. */
int node_read_file(const char *path, char **data, size_t *len);

/* datadir.c */
/* Creates the data directory (0700, with parents) and returns its absolute path. */
int node_datadir_prepare(const char *dir, char **abs_path, char **err);
/* Reads the token from `path`, creating the file (0600, 64 hex chars) if missing. */
int node_token_load(const char *path, char **token, char **err);

/* procs.c */
/* Creates the ingress socket, bound and listening. */
int node_listen_socket(node *n, char **err);
/* Spawns every worker process. */
int node_procs_start(node *n, char **err);
/* Sends a one-way frame to every worker process, shared and dedicated. */
void node_procs_send_all(node *n, uint8_t type, json_t *body);
/* Sends PROTO_DRAIN to every live process; exits are no longer restarted. */
void node_procs_drain(node *n);
/* After a drain has finished: the ingress socket again, on the port it had,
 * and a new process in every shared slot. 0, or an error with *err (heap). */
int node_procs_undrain(node *n, char **err);
/* SIGKILLs every live process. */
void node_procs_kill(node *n);
/* Closes the slots' own handles (restart timers) once every process is gone. */
void node_procs_close(node *n);
/* Live processes (not yet reaped or with open handles). */
int node_procs_live(const node *n);
/* 1 when every process has sent HELLO. */
int node_procs_all_ready(const node *n);
/* Sends PROTO_WORKER_CHANGED {"name"} to every process with an open channel. */
void node_procs_broadcast_changed(node *n, const char *name);
/* Sends PROTO_VALIDATE with `spec` to a ready process (round robin). */
void node_procs_validate(node *n, json_t *spec, node_validate_cb cb, void *data);
/* The same for any request a worker process answers with one frame of the
 * same id (PROTO_RUN -> PROTO_RUN_RESULT): cb as for validations. */
void node_procs_request(node *n, uint8_t type, json_t *body, uint64_t timeout_ms,
                        node_validate_cb cb, void *data);

/* deploy.c: validate through a worker process, then commit. */
/*
 * Deploys `spec` (from node_spec_parse; reference taken) as `name`. cb runs
 * once with the HTTP status and the JSON body to answer with (metadata on
 * 200/201, {"error": ...} otherwise); cb must not keep `body` without a
 * reference.
 */
typedef void (*node_deploy_cb)(node *n, void *data, int status, json_t *body);
void node_deploy(node *n, const char *name, json_t *spec, node_deploy_cb cb, void *data);
/* The metadata of a registry row as shown by the control API. */
json_t *node_worker_metadata(json_t *row, int with_sizes);
/* --dev: deploys the embedded examples/hello.js as "hello" unless
 * identical, then calls done, deployed or not. */
void node_deploy_dev(node *n, void (*done)(node *n));
/* routes.c: GET and PUT /v1/routes, the ingress routes. node_routes_load
 * reads them from node.db at start (0, or -EIO). */
int node_routes_load(node *n);
int node_routes_route(node *n, http_request *req, const char *path);
/* GET /v1/workers, GET|PUT|DELETE /v1/workers/{name}. */
int node_workers_route(node *n, http_request *req, const char *path);
/* GET /v1/workers/{name}/versions, POST /v1/workers/{name}/rollback: 0 for another sub. */
int node_versions_route(node *n, http_request *req, const char *name, const char *sub);
/* /v1/workers/{name}/traffic (traffic.c): GET, PUT, DELETE a traffic split. */
int node_traffic_route(node *n, http_request *req, const char *name, const char *sub);

/* tail.c: live logs, GET /v1/workers/{name}/tail and GET /v1/runs/{id}/tail
 * (docs/control-api.md). procs.c hands it worker processes' HELLOs and
 * PROTO_TAIL_LINEs through n->tail_hooks. */
typedef struct node_tail_hooks {
  void (*hello)(node_proc *p);              /* tell the process what is tailed */
  void (*line)(node_proc *p, json_t *body); /* a PROTO_TAIL_LINE */
} node_tail_hooks;
/* A run's tail id ("tail_id" of POST /v1/run): 1 to 64 of [A-Za-z0-9._-]. */
#define NODE_TAIL_ID_MAX 64
int node_run_tail_id_valid(const char *id, size_t len);
int node_tail_route(node *n, http_request *req, const char *name, const char *sub);
int node_run_tail_route(node *n, http_request *req, const char *id, const char *sub);
/* The control API's client of `req` went away: ends its session, if it is one. */
void node_tail_aborted(node *n, http_request *req);
typedef struct node_tail_counts {
  int open;          /* sessions open now */
  uint64_t opened;   /* since the node started */
  uint64_t dropped;  /* lines slow readers lost */
} node_tail_counts;
node_tail_counts node_tails_counts(const node *n);
/* At shutdown: ends every session's stream and frees them. */
void node_tails_close(node *n);

/* run.c: POST /v1/run, one-shot execution in a worker process. */
void node_run(node *n, http_request *req);
/* GET /v1/run/facets, DELETE /v1/run/facets/{name}: 1 when handled. */
int node_run_facets_route(node *n, http_request *req, const char *path);

/* control.c: the control API's listener, its bearer token and the dispatcher
 * that hands each request to one of the routes below. Nothing calls back into it. */
/* Starts the control API listener; fills n->control_addr. */
int node_control_start(node *n, char **err);

/* ---- what the route modules answer with (route.c) ------------------------- */
/* Routes take (n, req, path) and return 1 when the path is theirs (answered
 * now or later), 0 when it is not; sub-routes take (n, req, name, sub). */

/* Responses of the control API: JSON bodies, `allow` for 405 (else NULL). */
void node_respond_json(http_request *req, int status, json_t *body, const char *allow);
void node_respond_error(http_request *req, int status, const char *message);
void node_respond_method(http_request *req, const char *allow);
/* 400 for a worker name that does not match the pattern, naming it. */
void node_respond_invalid_name(http_request *req, const char *name);
/* 404 {"error": "unknown worker", "name"}. */
void node_respond_unknown_worker(http_request *req, const char *name);
/* 404 {"error", "version", "kept": [the versions kept]}: VERSION of NAME is not kept. */
void node_respond_not_kept(node *n, http_request *req, const char *name, int64_t version);
/*
 * The value of `key` in the request target's query string (pairs split on '&'
 * and '=', names and values form-decoded: %XX, '+' for a space), copied into
 * out. Returns how many times the key is given (0: absent), the first value
 * in out; or, for that first value, -EINVAL (a bad escape or %00) or -E2BIG
 * (longer than outlen - 1). Other keys are ignored.
 */
int node_query_param(const char *target, const char *key, char *out, size_t outlen);

/* facet_routes.c: GET /v1/workers/{name}/facet[/backup]; returns 0 when
 * `sub` is not one of its routes. */
int node_facet_route(node *n, http_request *req, const char *name, const char *sub);
/* DELETE /v1/workers/{name}?purge=true: deletes the worker's facet files. */
int node_facet_purge(node *n, const char *name);

/* memwatch.c: restarts worker processes whose RSS outgrows their budget. */
int node_memwatch_start(node *n);
void node_memwatch_stop(node *n);

/* stats.c: per-tenant statistics gathered from the worker processes (n->tenants). */
#define NODE_STATS_N_COUNTERS 7
#define NODE_STATS_N_SUMS 2
extern const char *const node_stats_counters[NODE_STATS_N_COUNTERS]; /* integers, summed */
extern const char *const node_stats_sums[NODE_STATS_N_SUMS];         /* reals, summed */
/* Adds a PROTO_STATS report from worker process slot `p`. */
void node_stats_add(node *n, node_proc *p, json_t *body);
/* CPU milliseconds the tenant used in about the last minute, in whichever
 * processes it ran (0 for a tenant never seen). */
double node_stats_cpu_recent(node *n, const char *name);
/* Forgets the gauges (heap) a process slot reported, when its process exits. */
void node_stats_proc_gone(node *n, node_proc *p);
/* Requests answered and CPU milliseconds of tenants' code, by every process
 * since the supervisor started (they only grow). */
void node_stats_totals(node *n, uint64_t *requests, double *cpu_ms);
/* Requests the worker processes are answering (or still running, waitUntil)
 * as each last reported, every second. */
int64_t node_stats_in_flight(node *n);

/* Node-wide counters in n->counts, by group, each with a fixed set of keys
 * (only those are taken from a worker process's report): */
typedef struct node_stats_group {
  const char *name;        /* "cold_starts", "loader_requests", "runs" */
  const char *const *keys; /* NULL-terminated */
} node_stats_group;
extern const node_stats_group node_stats_groups[3];
/* Counts a /v1/run answer under "runs", its outcome read from the status
 * and the body's "kind" (body may be NULL). */
void node_stats_count_run(node *n, int status, json_t *body);
/* The count of a group's key (0 when none yet). */
uint64_t node_stats_count(const node *n, const char *group, const char *key);
/* "other": the tenants' durations past metrics_max_tenants are summed under
 * this name (as is a tenant so named), in n->counts. */
#define NODE_STATS_OTHER "other"
void node_stats_free(node *n);

/* The sandbox (jail/), procs.c: the flags a spawned process gets (at most
 * NODE_SANDBOX_ARGS), and the check before any is spawned. */
#define NODE_SANDBOX_ARGS 4
size_t node_sandbox_args(const node *n, char **out);
int node_sandbox_prepare(node *n, char **err);
/* A HELLO's jail report as a bit (1 << jail_layer) per layer on / refused,
 * and those bits as {"seccomp": "on", "netns": "off", ...} (new reference). */
void node_sandbox_parse(json_t *report, unsigned *on, unsigned *off);
json_t *node_sandbox_json(unsigned on, unsigned off);
/* The egress process's layers (egress.c), or NULL without one. */
json_t *node_egress_sandbox_json(const node *n);
/* For each layer name in turn (i from 0 until NULL): 1 when every ready
 * worker process has it on. */
const char *node_sandbox_layer(const node *n, int i, int *on);

/* tenants.c: GET /v1/tenants and /v1/tenants/{name}; returns 0 when `path` is not one of them. */
int node_tenants_route(node *n, http_request *req, const char *path);

/* egress.c: the egress process, and pushing the allow-lists to it. */
/* Spawns edgenode-egress (if it was built). */
int node_egress_start(node *n, char **err);
/* The socket worker processes reach the egress on; NULL when there is no egress. */
const char *node_egress_socket(const node *n);
/* 1 once the egress has its policies and listens (or when there is none). */
int node_egress_ready(const node *n);
/* Shutdown: stop the egress (after the workers are gone) / kill it now. */
void node_egress_stop(node *n);
void node_egress_kill(node *n);
/* What a control request asks the egress process (it keeps the secrets). */
typedef enum node_egress_ask {
  NODE_EGRESS_SECRET_PUT,    /* {"name", "value"[, "fleet": true: seal it, store nothing]} */
  NODE_EGRESS_SECRET_LIST,   /* {} */
  NODE_EGRESS_SECRET_DELETE, /* {"name"} */
  NODE_EGRESS_POLICY_SET,    /* {"workers": {NAME: rules|null}[, "run_as": {NAME: worker}]},
                                answered once in force (a run's policy, before it runs) */
} node_egress_ask;
/* The egress's answer: status 0 with its reply (borrowed), or an HTTP status
 * with {"error"} (borrowed): 503 when it is not running or does not answer in
 * time, or the status it gave. */
typedef void (*node_egress_cb)(node *n, void *data, int status, json_t *body);
/* Sends `body` to the egress process; cb is called exactly once. */
void node_egress_ask_secret(node *n, node_egress_ask ask, json_t *body, node_egress_cb cb,
                            void *data);
/* Sends a secret's grants (NULL: none) and, in a fleet, its sealed value
 * (NULL: none) to the egress, when it runs; it gets them all whenever it starts. */
void node_egress_push_secret(node *n, const char *name, json_t *workers, json_t *sealed);
/* Tells the egress that process `pid` is `tenant`'s dedicated process (NULL:
 * it is gone): its fetches may name that tenant only. Dedicated processes
 * may run a hostile tenant's code; shared ones host every tenant anyway. */
void node_egress_bind(node *n, int pid, const char *tenant);

/* egress_routes.c: /v1/workers/{name}/egress: 1 when handled. */
int node_egress_route(node *n, http_request *req, const char *path);
/* secrets.c: /v1/secrets, /v1/secrets/{name}, /v1/secrets/{name}/workers/{worker}. */
int node_secrets_route(node *n, http_request *req, const char *path);
/* Sends a worker's rules as stored in node.db (NULL: it has none any more) to
 * the egress process, when it runs; it gets them all whenever it starts. */
void node_egress_push(node *n, const char *name, json_t *rules);

/* procs.c, for drain.c's rolling restarts: slot capacity, spawning, resizing. */
#define NODE_PROCS_CAPACITY (NODE_CONFIG_MAX_WORKERS + 1) /* + one surge slot */
/* Spawns the slot's process (its previous one and its handles must be gone). */
int node_proc_spawn(node_proc *p);
/* Takes the next unused slot into service and spawns its process; NULL when full. */
node_proc *node_procs_add(node *n);
/* Sends PROTO_DRAIN {"grace_ms"} to one process (SIGTERM when it has no channel). */
void node_proc_drain(node_proc *p);

/* drain.c: draining, config reload on SIGHUP (rolling restarts), systemd notification. */
/* Keeps argv for reloads and installs the SIGHUP handler. */
int node_lifecycle_start(node *n, int argc, char **argv);
/* Closes the lifecycle's handles (at shutdown). */
void node_lifecycle_stop(node *n);
/*
 * Drains the node: /readyz turns 503, the ingress listening socket closes,
 * every worker process is told to drain within grace_ms and none is
 * restarted. `reason` ("api", "SIGTERM") is logged and recorded. With
 * then_exit the control API stops accepting too and the supervisor exits once
 * the processes are gone; without, it stays up and GET /v1/node reports
 * "drained". Calling it again only upgrades to then_exit.
 */
void node_drain(node *n, const char *reason, int then_exit);
/* main.c, when the last process is gone after a drain that does not exit. */
void node_drain_finished(node *n);
/* "serving", "draining" or "drained". */
const char *node_state_name(const node *n);
/* POST /v1/node/drain and /v1/node/undrain; returns 0 when `path` is not theirs. */
int node_drain_route(node *n, http_request *req, const char *path);
/* sd_notify(3) when built with libsystemd; a no-op otherwise ("READY=1"). */
void node_notify(const char *state);

/* fleet_sync.c: the node in a fleet (--fleet). Without --fleet, every
 * function here is a no-op and node_fleet_on() is 0. */
int node_fleet_start(node *n, char **err);
/* Closes the link (the loop then finishes closing it); node_fleet_free after the loop. */
void node_fleet_stop(node *n);
void node_fleet_free(node *n);
int node_fleet_on(const node *n);
/* 1 once the node holds the fleet's state (or serves its earlier copy while
 * the fleet is unreachable); always 1 without --fleet. */
int node_fleet_ready(const node *n);
const char *node_fleet_unready_reason(const node *n);
/* A control write through the fleet, answered once applied on this node:
 * status 0 with body {"version": N, "created": bool} (borrowed; N is this
 * write's version), or an HTTP status with a JSON error body (borrowed):
 * 503 {"error": "fleet unavailable"}, 404 (nothing to delete), 400, 409. */
typedef void (*node_fleet_cb)(node *n, void *data, int status, json_t *body);
void node_fleet_put_worker(node *n, const char *name, json_t *spec, node_fleet_cb cb, void *data);
void node_fleet_delete_worker(node *n, const char *name, node_fleet_cb cb, void *data);
/* A traffic split set while the worker's version was `current` (NULL: ended). */
void node_fleet_put_traffic(node *n, const char *name, json_t *split, int64_t current,
                            node_fleet_cb cb, void *data);
void node_fleet_put_egress(node *n, const char *name, json_t *rules, node_fleet_cb cb, void *data);
/* A change of a secret's record: each member NULL keeps what the record has. */
typedef struct node_secret_edit {
  json_t *sealed;     /* a new value, sealed by the egress with the fleet key */
  json_t *workers;    /* the workers it is granted to, all of them */
  const char *grant;  /* one worker to add */
  const char *revoke; /* one worker to remove */
} node_secret_edit;
void node_fleet_edit_secret(node *n, const char *name, const node_secret_edit *e,
                            node_fleet_cb cb, void *data);
void node_fleet_delete_secret(node *n, const char *name, node_fleet_cb cb, void *data);
/* An operator's cordon and uncordon, fleet-wide; both answer req themselves
 * (uncordon with `answer`, taken over, once applied here). */
void node_fleet_put_cordon(node *n, const char *name, const char *reason, http_request *req);
void node_fleet_delete_cordon(node *n, const char *name, json_t *answer, http_request *req);
/* A cordon this node's monitor made (already in force here), made
 * fleet-wide; a failed write leaves it this node's alone (logged). */
void node_fleet_share_cordon(node *n, const char *name, const char *reason, const char *rule);
/* A drain begins: other nodes wait for this node's tenants rather than
 * forward to it (their leases say so), until the drain's end gives the
 * leases up. */
void node_fleet_drain_facets(node *n);
/* Gives up this node's facet leases (at the end of a drain). */
void node_fleet_release_facets(node *n);
/* GET /v1/fleet. */
int node_fleet_route(node *n, http_request *req, const char *path);
/* The fleet's families of /metrics. */
void node_fleet_metrics(node *n, FILE *f);

/* replica.c: facet replication for the worker processes (with --fleet).
 * Started with the fleet, before the workers (they are given its socket);
 * stopped before the fleet closes. */
struct fleet;
int node_replica_start(node *n, struct fleet *link, char **err);
void node_replica_stop(node *n);
/* The socket the worker processes are given, or NULL without a fleet. */
const char *node_replica_socket(const node *n);
/* A dedicated process may ask for its own tenant only (NULL: unbind). */
void node_replica_bind(node *n, int pid, const char *tenant);
/* Requests for the tenants node_name owns are forwarded through `path`. */
void node_replica_set_forward(node *n, const char *node_name, const char *path);

/* forward.c: relays to the other nodes' ingress, for forwarded requests.
 * A member seen (again) with its listen address; stop before the loop's
 * end, free after it. */
void node_forward_member(node *n, const char *name, const char *listen_addr);
void node_forward_stop(node *n);
void node_forward_free(node *n);

/* metrics.c: GET /metrics (Prometheus text format 0.0.4). */
int node_metrics_route(node *n, http_request *req, const char *path);

/* events.c: the history of state changes (GET /v1/events), newest first, the
 * last NODE_EVENTS_MAX kept in memory and in node.db (table events). */
#define NODE_EVENTS_MAX 1000
/* Loads the history kept in node.db. */
int node_events_open(node *n, char **err);
void node_events_close(node *n);
/*
 * Records one event: `kind` ("deploy", "delete", "crash", "restart", "drain",
 * "drained", "reload", "memory_kill", "cordon", ...), the tenant it is about
 * (NULL for the node), and details (a JSON object or NULL; borrowed). It does
 * not log: the caller writes the state change's one log line. A failed write
 * to node.db is logged and the event kept in memory.
 */
void node_event(node *n, const char *kind, const char *tenant, json_t *details);
/* The same, taking the reference to `details`. */
void node_event_new(node *n, const char *kind, const char *tenant, json_t *details);
/* GET /v1/events; returns 0 when `path` is not its route. */
int node_events_route(node *n, http_request *req, const char *path);

/* procs.c, for cordons.c and memwatch.c: dedicated processes, budgets. */
/* A dedicated process slot for `tenant` serving on `listen_fd` (borrowed; kept
 * open by the caller for as long as the slot lives); no process yet. */
node_proc *node_proc_new_dedicated(node *n, int id, const char *tenant, int listen_fd);
/* The slot is not wanted any more: procs.c frees it once its process and
 * handles are gone (listener->dedicated_gone first). */
void node_proc_release(node_proc *p);
/* Iterates the dedicated processes: pass NULL first. */
node_proc *node_procs_next_dedicated(node *n, node_proc *prev);
/* Sends a JSON frame to one process; 0 or a negative error (logged). */
int node_proc_send_json(node_proc *p, uint8_t type, uint32_t id, json_t *body);
/* 1 when the process's channel can take frames. */
int node_proc_usable(const node_proc *p);
/* RSS budget of a shared / a dedicated worker process. */
uint64_t node_worker_memory_budget(const node *n);
uint64_t node_dedicated_memory_budget(const node *n);
/* 1 when every ready shared worker process protects its isolates with memory
 * protection keys (and there is at least one), 0 otherwise. */
int node_mpk_enabled(const node *n);
/* Frees the slots at exit, once the loop is closed. */
void node_procs_free(node *n);

/* cordons.c: cordoned tenants, their dedicated processes, the cordon monitor.
 * The state lives in the table `cordons` of node.db and survives restarts. */
/* Loads the state from node.db, builds the monitor, listens to the worker processes. */
int node_cordons_open(node *n, char **err);
/* Starts the dedicated processes of the cordoned tenants (after the shared ones). */
void node_cordons_start(node *n);
void node_cordons_close(node *n);
/* After an undrain: the cordoned tenants whose dedicated processes the drain
 * stopped sleep until their next request, which starts one. */
void node_cordons_undrained(node *n);
/* The configuration's rules changed (SIGHUP): a new monitor, counts from zero. */
void node_cordons_reload_rules(node *n);
/* A deleted worker's cordon goes with it: its dedicated process drains away. */
void node_cordons_worker_deleted(node *n, const char *name);
/* Closes the cordons' own handles at shutdown. */
void node_cordons_stop(node *n);
/* "active", "cordoned" or "suspended". */
const char *node_cordon_state(const node *n, const char *name);
/* The tenant's cordon as shown by the API (state, reason, rule, since, by,
 * dedicated process), or NULL when it is active. New reference. */
json_t *node_cordon_view(const node *n, const char *name);
/* The dedicated processes against their cap, for GET /v1/node and /metrics. */
typedef struct node_dedicated_counts {
  int running;          /* processes of cordoned tenants: what max_dedicated bounds */
  int max;              /* max_dedicated */
  uint64_t suspensions; /* tenants suspended for the cap since the node started */
  uint64_t idle_exits;  /* dedicated processes that exited for want of requests since then */
} node_dedicated_counts;
node_dedicated_counts node_cordons_counts(const node *n);
/* POST /v1/tenants/{name}/cordon|uncordon: 1 when `sub` is one of them. */
int node_cordons_route(node *n, http_request *req, const char *name, const char *sub);
/* What fleet_sync.c, below cordons.c, may ask of it (n->cordon_hooks, set by
 * node_cordons_open): apply the fleet's cordon record of a tenant here (NULL:
 * uncordoned), the tenant's cordon as this node holds it (caller decrefs),
 * and a deleted worker's cordon ended. */
typedef struct node_cordon_hooks {
  void (*apply)(node *n, const char *name, json_t *record);
  json_t *(*view)(node *n, const char *name);
  void (*worker_deleted)(node *n, const char *name);
} node_cordon_hooks;

/* main.c: startup, shutdown and the hooks in struct node. */
/* Logs "ready", records the start event and tells systemd: once all worker
 * processes are up (and, with --dev, hello is deployed). */
void node_announce_ready(node *n);

#endif
