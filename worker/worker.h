/*
 * worker: the edgenode-worker process. It accepts ingress connections on the
 * listening socket inherited from the supervisor, routes each request by the
 * first label of its Host header to a tenant, and runs the tenant's code in a
 * V8 isolate (isolate/) hosted by a sandbox (sandbox.h). Specs of deployed
 * workers come from the supervisor over proto/ and are cached until the
 * supervisor says they changed.
 *
 * This header is internal to the folder: the process has no public API. It
 * holds the process's state (worker, tenant) and each module's functions;
 * sandbox.h holds the host of isolates.
 */
#ifndef EDGENODE_WORKER_H
#define EDGENODE_WORKER_H

#include <jansson.h>
#include <stdint.h>
#include <uv.h>

#include "facets.h"
#include "http.h"
#include "isolate.h"
#include "proto.h"
#include "scheduler.h"

typedef struct tenant tenant;
typedef struct sandbox sandbox;                 /* sandbox.h */
typedef struct sandbox_request sandbox_request; /* sandbox.h */

/* id_map.c: open-addressing map from ids (never 0 or UINT64_MAX) to
 * pointers; request tokens are never reused within a process run. */
typedef struct id_slot {
  uint64_t id;  /* 0 = empty, UINT64_MAX = deleted */
  void *value;
} id_slot;
typedef struct id_map {
  id_slot *slots; /* made on the first put */
  size_t cap;     /* power of two */
  size_t used;    /* live + deleted slots */
  size_t live;
} id_map;
void id_map_init(id_map *m);
void id_map_free(id_map *m);
void id_map_put(id_map *m, uint64_t id, void *value);
void *id_map_get(const id_map *m, uint64_t id);
/* Returns the value that was there, or NULL. */
void *id_map_del(id_map *m, uint64_t id);
/* Calls each(value) for every entry, then empties the map. */
void id_map_clear(id_map *m, void (*each)(void *value));

/* timers.c: an isolate's pending timers, by the runtime's timer id. */
typedef struct vtimer vtimer;
/* A timer came due (it has left the set): queue its firing. */
typedef void (*vtimer_fire_fn)(void *owner, uint64_t token, uint32_t id);
typedef struct vtimer_set {
  id_map by_id;
  uv_loop_t *loop;
  void *owner;
  vtimer_fire_fn fire;
} vtimer_set;
void vtimer_set_init(vtimer_set *s, uv_loop_t *loop, void *owner, vtimer_fire_fn fire);
/* Returns 0, or -1 when libuv refuses (the timer then does not exist). */
int vtimer_start(vtimer_set *s, uint64_t token, uint32_t id, double delay_ms);
void vtimer_cancel(vtimer_set *s, uint32_t id);
/* Cancels every pending timer. */
void vtimer_set_clear(vtimer_set *s);

/* Per-tenant counters since the last report to the supervisor (deltas),
 * plus heap gauges of this process's isolates for the tenant. */
typedef struct tenant_stats {
  uint64_t requests;
  uint64_t errors;           /* responses with status >= 500 */
  uint64_t cpu_ns;
  uint64_t wall_ns;
  uint64_t cpu_limit_hits;
  uint64_t memory_limit_hits;
  uint64_t wall_limit_hits;
  uint64_t cold_starts;
  uint64_t uncaught_errors;  /* requests that ended in an uncaught exception */
  uint64_t status_classes[5]; /* answers by status class, 1xx..5xx */
  uint64_t durations[PROTO_DURATION_BUCKETS + 1]; /* timed requests by bucket, +Inf last */
  size_t heap_used;          /* gauge: the current isolate's heap */
  size_t heap_peak;          /* high-water mark since the last report */
  int dirty;
} tenant_stats;

/* Where a tenant's requests run, as the supervisor said (PROTO_CORDON). */
typedef enum tenant_placement {
  TENANT_SHARED = 0,   /* here, in this shared process */
  TENANT_CORDONED,     /* in its dedicated process: forwarded (handoff.c) */
  TENANT_SUSPENDED,    /* nowhere: 503 until an operator uncordons it */
} tenant_placement;

/* How a loader child's request ended, for the counts of PROTO_STATS. */
typedef enum stats_child_outcome {
  STATS_CHILD_OK,
  STATS_CHILD_EXCEPTION,   /* it threw, or answered nothing */
  STATS_CHILD_START_ERROR, /* its code did not compile, link or run its top level */
  STATS_CHILD_CPU,
  STATS_CHILD_MEMORY,
  STATS_CHILD_WALL,
  STATS_CHILD_OUTCOMES
} stats_child_outcome;

/* What this process knows of one deployed worker. */
struct tenant {
  char *name;
  json_t *spec;          /* NULL until fetched from the supervisor */
  int fetching;          /* a PROTO_WORKER_GET is outstanding */
  uint32_t fetch_id;
  sandbox_request *waiting; /* requests queued until the spec arrives */
  sandbox_request **waiting_tail;
  sandbox *current;      /* the version new requests go to */
  char *load_error;      /* set when current failed to load; cleared on change */
  int facets_here;       /* in a fleet: this node owns its facets (facet_link.c); cleared on change */
  /* Under a traffic split (spec "traffic"), the other versions, by their
   * place in that list (the current version's place stays empty). */
  sandbox *split[PROTO_TRAFFIC_MAX_VERSIONS];
  char *split_error[PROTO_TRAFFIC_MAX_VERSIONS];
  tenant_stats stats;
  size_t refs;           /* versions pointing here (current and retired) */
  size_t children;       /* its dynamic workers in this process, until freed (loader_link.c) */
  tenant_placement placement;
  char *cordon_socket;   /* the dedicated process's private unix socket, or NULL */
  int cordon_ready;      /* the dedicated process is up: forward at once */
  char *cordon_error;    /* suspended: the message clients get */
  int64_t cordon_until_ms; /* suspended: when it ends (ms since the epoch; Retry-After), 0: unknown */
  uint32_t cordon_done_id; /* a PROTO_CORDON to answer once no handoff is left; 0 = none */
  size_t handoffs;       /* requests being forwarded to the dedicated process */
  struct handoff *handoff_waiting; /* held until the dedicated process is ready */
  tenant *next;
};

typedef struct worker_config {
  int id;
  int ipc_fd;
  int listen_fd;
  const char *data_dir;
  size_t max_body_bytes;
  uint64_t header_timeout_ms;
  uint64_t body_timeout_ms;
  uint64_t body_min_rate;        /* 0: the body must be complete within body_timeout_ms */
  uint64_t max_connections;      /* before RLIMIT_NOFILE's say (main.c) */
  uint64_t max_connections_per_addr;
  uint64_t isolate_memory_mb; /* heap budget of all isolates: evict idle ones past it */
  size_t max_isolates;        /* isolates it holds at most (--max-isolates) */
  uint64_t idle_timeout_s;    /* evict isolates idle this long */
  uint64_t compact_idle_s;    /* compact isolates idle this long (evict.c) */
  const char *egress_socket;  /* the egress process's unix socket; NULL: fetch() fails */
  const char *replica_socket; /* in a fleet: the supervisor's facet replication socket */
  const char *dedicated;      /* --tenant: the one tenant a dedicated process serves; NULL when shared */
  int running_fd;             /* the supervisor's running slot (proto_running), or -1 */
  const char *python_dir;     /* Pyodide's npm package directory; NULL: beside the binary */
  size_t python_pool;         /* Python interpreters kept booted (--python-pool) */
} worker_config;

/* Dynamic workers that can be found again, by (parent, kind, key) (loader_link.c). */
typedef struct loader_table {
  struct loader_child **slots; /* chained; made on first use */
  size_t cap;                  /* power of two, or 0 */
  size_t used;
} loader_table;

/* The process: everything it holds is reached from here, and passed down. */
typedef struct worker {
  uv_loop_t *loop;
  worker_config config;
  http_server ingress;
  proto_channel supervisor;
  sched sched;
  tenant *tenants;
  sandbox *retired;      /* versions replaced or deleted, freed once idle (tenants.c) */
  sandbox *sandboxes;    /* every live sandbox (sandbox.c) */
  sandbox *reap_list;    /* released sandboxes waiting to be freed (sandbox.c) */
  uv_idle_t reaper;      /* frees them from the loop */
  loader_table loader;   /* findable dynamic workers (loader_link.c) */
  uint64_t next_token;
  id_map tokens;         /* token -> sandbox_request */
  sandbox_request *running; /* requests dispatched and not over, for the wall-time limit */
  uv_timer_t wall_timer; /* sweeps `running` while it is not empty */
  size_t version_requests; /* requests given to versions and not over (a drain waits for them) */
  int draining;
  uint64_t drain_deadline_ns;
  uv_timer_t drain_timer;
  uv_timer_t stats_timer;
  uv_timer_t evict_timer;
  struct facet_store *facets; /* env.DB connections (facet_link.c) */
  int replica_fd;             /* the connection to replica_socket, or -1 (facet_link.c) */
  struct facet_hold *facet_held; /* requests waiting for a hand-over (tenants.c) */
  struct gated *gated;           /* responses waiting for their writes' commit (gate.c) */
  uv_idle_t gate_idle;           /* commits the batch once per loop turn */
  int gate_idle_open;
  uint64_t gate_batch_ns;        /* when the batch's first write waited */
  uint64_t gate_joined_ns;       /* when the last one joined it */
  uint64_t facet_holding_until;  /* the deadline of the one being submitted again */
  uv_timer_t facet_timer;
  int facet_timer_open;
  uint32_t replica_next_id;
  struct egress_link *egress; /* the link to the egress process (egress_link.c); NULL until a fetch() */
  size_t loaded_count;   /* live isolates, of every kind of sandbox */
  uint64_t evictions;
  uint64_t compactions;  /* idle isolates compacted (evict.c) */
  /* Deltas since the last report (stats.c): isolates created by sandbox
   * kind, and loader children's requests by how they ended. */
  uint64_t cold_starts[3];
  http_routes *routes;   /* the supervisor's ingress routes (PROTO_ROUTES); NULL: none */
  uint64_t child_requests[STATS_CHILD_OUTCOMES];
  uint64_t nofile;       /* RLIMIT_NOFILE in force, after raising it (main.c) */
  uv_signal_t sigterm;
  uv_signal_t sigint;
  proto_running *running_slot; /* shared with the supervisor; NULL without --running-fd */
  int running_depth;     /* nested entries into JavaScript (process.c) */
  struct worker_attempt *attempts; /* test only: the jail's test hook (process.c); NULL: none */
  size_t n_attempts;
  uv_timer_t handoff_timer;    /* expires handoffs held too long (handoff.c) */
  int handoff_timer_on;
  json_t *tail_keys;     /* tenants and runs someone tails, as a set; NULL: none (tail.c) */
  uint64_t tail_dropped; /* tail lines dropped since the last one sent (tail.c) */
} worker;

/*
 * The folder's modules. Calls go down this list (callbacks registered with
 * each other aside), but for three: a handoff refused goes back to
 * ingress.c, and a tenant that moved out while its request waited has it
 * answered by ingress.c (handoff.c, tenants.c -> ingress.c); making room
 * for an isolate evicts one (sandbox.c -> evict.c). tests/tools/
 * call_cycles.py lists the circles (ctest: unit_worker_call_cycles).
 *   main.c       process: arguments, start and stop, supervisor frames, drain
 *   ingress.c    a request in: route, placement, then to its tenant
 *   handoff.c    a cordoned tenant's requests, forwarded to its process
 *   run.c        PROTO_RUN: a one-shot sandbox
 *   tenants.c    registry, spec fetch, versions, placement
 *   bindings.c   a version's host calls, by binding kind, to
 *     loader_link.c egress_link.c facet_link.c stream.c
 *   stats.c      per-tenant accounting, reported every second
 *   evict.c      eviction and compaction of idle sandboxes
 *   sandbox.c    the one host of an isolate, and every request through it
 *   tail.c       live-log lines of tailed tenants and runs, to the supervisor
 *   process.c    per-process state reached from everywhere: running slot, exit
 *   route.c spec.c id_map.c timers.c pool.c stray.c mpk.c   pure or leaf
 */

/* route.c: where an ingress request goes (pure). */
typedef struct route {
  http_authority authority;
  const char *path;  /* the URL's path and query, into the target ("" for "/") */
} route;
/* Fills *r, or returns why the request cannot be routed (400; the caller frees it). */
char *route_find(const http_request *req, route *r);
/* The worker name: the first label of a host name, lowercased (host names
 * are case-insensitive, worker names lowercase), NUL-terminated. IP
 * addresses name none. Returns 0 or -1. */
int route_worker_name(const route *r, char name[64], size_t *len);
/* The Request's absolute URL, from the checked authority and the target's
 * path, its host and port as the URL Standard writes them: host lowercased,
 * port without leading zeros and left out when it is http's 80. */
char *route_url(const route *r);
/* A handoff frames the request itself (Content-Length, Connection: close)
 * and carries the client's own framing headers under this prefix; the
 * dedicated process gives the tenant those instead of the handoff's. */
#define HANDOFF_HOP_PREFIX "x-edgenode-hop-"
/* Whether a header is the connection's own (hop-by-hop), not the request's. */
int route_hop_by_hop(const char *name);
/* Times the request came through an edgenode egress (its CDN-Loop); past
 * ROUTE_MAX_LOOP_HOPS it is refused with 508: a worker fetching itself, or
 * workers fetching each other in a circle, end there. */
#define ROUTE_MAX_LOOP_HOPS 8
int route_loop_hops(const http_request *req);

/* spec.c: a spec's parts (pure). */
/* The modules of a spec as iso_modules (pointers into the spec). Returns the
 * count, or -1 with *why set when the spec is malformed. */
int spec_modules(json_t *spec, iso_module **out, const char **main_module, const char **why);
/* limits.cpu_ms and memory_mb, or proto.h's defaults; spec may be NULL. */
void spec_limits(json_t *spec, iso_limits *out);
/* limits.facet_mb, or 0: the node's default. */
uint64_t spec_facet_mb(json_t *spec);
/* limits.wall_ms, or proto.h's default. */
uint64_t spec_wall_ms(json_t *spec);
/* limits.children and limits.pinned_children, or proto.h's defaults. */
void spec_children(json_t *spec, size_t *children, size_t *pinned);
/* The plain-value bindings (text, json) as the env's JSON text. */
char *spec_env_json(json_t *spec);
/* The capability bindings (not plain values) as {"NAME": {"type": ...}}. */
char *spec_capabilities_json(json_t *spec);

/* main.c: nothing but main(). */

/* process.c: per-process state every module may touch. */
/*
 * The running slot (proto.h): call worker_running_enter() right before
 * entering a tenant's JavaScript and worker_running_leave() right after, so
 * that the supervisor can name the tenant if the process dies in between.
 * Two stores (and a copy when the tenant changes): cheap enough for every
 * entry. sandbox_enter() does it for every sandbox.
 */
void worker_running_enter(worker *w, const char *tenant);
void worker_running_leave(worker *w);
/*
 * Test only: EDGENODE_TEST_JAIL_ATTEMPT="TENANT=ACTION ..." (main.c reads
 * it once the process is jailed; docs/operations.md, "Sandbox"). On the
 * first entry into TENANT's code in this process, with the running slot
 * naming it, each of its ACTIONs (jail_attempt) is tried and its outcome
 * logged. The tenant's code has no say in any of it.
 */
void worker_attempts_arm(worker *w, const char *spec);
void worker_attempts_free(worker *w);
/* A draining process exits once nothing is left (or its grace is over). */
void worker_maybe_exit(worker *w);
/* Sends a JSON reply (taken) to the supervisor. */
void worker_reply(worker *w, uint8_t type, uint32_t id, json_t *body);
/* Answers the PROTO_CORDON with id t->cordon_done_id when no handoff is left. */
void worker_cordon_settled(worker *w, tenant *t);

/* ingress.c */
void ingress_on_request(http_server *server, http_request *req);
/* Forwards a request that will not run here (its tenant is cordoned); r is freed. */
void ingress_hand_off(worker *w, sandbox_request *r);
/* 503 with the supervisor's message for a suspended tenant. */
void ingress_respond_suspended(tenant *t, http_request *req);

/* handoff.c: forwarding a cordoned tenant's requests to its dedicated process
 * over loopback HTTP; the client sees the dedicated process's answer. */
void handoff_submit(worker *w, tenant *t, http_request *req);
/* Forwards a request for a tenant another node owns through the
 * supervisor's relay socket at `path` (node/forward.c), its answer streamed
 * back; the request is never sent twice. */
void handoff_forward(worker *w, tenant *t, http_request *req, const char *path);
/* The dedicated process is ready (or the tenant moved): start or settle what was held. */
void handoff_flush(worker *w, tenant *t);
void handoff_stop(worker *w);

/* run.c: PROTO_RUN, a one-shot sandbox for POST /v1/run. */
void run_on_frame(worker *w, const proto_frame *frame);

/* tenants.c */
tenant *tenant_find(worker *w, const char *name, size_t len);
tenant *tenant_get_or_add(worker *w, const char *name, size_t len);
/* Queues or dispatches a request for its tenant (r->tenant). */
void tenant_submit(worker *w, sandbox_request *r);
void tenant_spec_arrived(worker *w, uint32_t id, const proto_frame *frame);
/* The supervisor says the tenant's spec changed (or it was deleted). */
void tenant_changed(worker *w, const char *name);
/* Moves the tenant out of (or back into) this process: a tenant leaving has
 * its current version retired (running requests finish) and its facet closed
 * once the last of its versions is freed. */
void tenant_set_placement(worker *w, tenant *t, tenant_placement placement);
void tenant_free_all(worker *w);
/* A request whose tenant is being handed over by another node: submitted
 * again every 100 ms, for up to 15 s (then 503); tenant_hold_stop answers
 * those still held at exit. */
void tenant_hold(worker *w, sandbox_request *r);
void tenant_hold_stop(worker *w);

/* bindings.c: host calls from a version's JavaScript, by binding kind. */
const iso_host_calls *bindings_host_calls(void);
/* One file per binding kind; each returns as iso_host_calls does. */
int facet_link_call(sandbox *sb, const iso_call *call, iso_wire *result);
/* env.DB.exec with its arguments decoded (iso_host_calls.call_values). */
int facet_link_exec(sandbox *sb, const iso_call *call, const iso_wire_value *args,
                    uint32_t n_args, iso_numbers *numbers, iso_wire *result);
int facet_link_start(worker *w);
void facet_link_stop(worker *w);
/* Rolls back what a finished request left open in its facet. */
void facet_link_request_done(worker *w, uint64_t token);
/* Drops a tenant's cached facet connections (redeploy, delete). */
void facet_link_changed(worker *w, const char *tenant);
/* In a fleet, where the tenant's request runs: one with a facet binding
 * runs only where its facets are owned (taken over here first when nobody
 * owns them). FACET_FORWARD: `text` is the socket to forward it through
 * (handoff_forward); FACET_WAIT: the owner is handing the tenant over
 * (tenant_hold); FACET_REFUSED: `text` says why (answered 503 before
 * any of its JavaScript ran). A forwarded request carries
 * FACET_FORWARDED_HEADER and is never forwarded again. */
typedef enum facet_place { FACET_HERE, FACET_FORWARD, FACET_WAIT, FACET_REFUSED } facet_place;
#define FACET_FORWARDED_HEADER "X-Edgenode-Forwarded"
facet_place facet_link_place(worker *w, tenant *t, const http_request *req, char *text,
                             size_t text_len);

/*
 * The output gate (docs/workers.md, "Durability"). A facet's writes wait in
 * one implicit transaction until the next of these: a response or a piece
 * of one leaves, a fetch goes out, or the sandbox's JavaScript yields.
 * facet_link_gate() commits them; 0 when they are durable (or there were
 * none), 1 when a facet is inside transactionSync (the call was made from
 * its function: those writes wait for a later gate), -1 when they could
 * not be stored: the sandbox is then broken (no
 * further requests; each response it still gives becomes an error naming
 * sandbox.gate_error), the failure is logged, and the caller must not let out what it was about to.
 * facet_link_drop() rolls them back (JavaScript was terminated mid-run)
 * and, when there were any, breaks the sandbox as a failed gate does.
 */
int facet_link_gate(sandbox *sb);
void facet_link_drop(sandbox *sb);

/* gate.c: the output gate's batch, committed once per loop turn. A
 * version's response whose tenant has writes waiting is held (copied;
 * gate_defer returns 1) until they are durable; gate_schedule asks for a
 * commit this turn; gate_fail_owner answers a tenant's held responses
 * with its failure; gate_flush commits and answers now. */
struct iso_response;
int gate_defer(sandbox *sb, sandbox_request *r, const struct iso_response *res);
void gate_schedule(worker *w);
void gate_fail_owner(worker *w, const char *owner, const char *why);
void gate_flush(worker *w);
void gate_stop(worker *w);
int egress_link_call(sandbox *sb, const iso_call *call, iso_wire *result);
/* Cancels what a finished request left open at the egress (otherwise done by a 1 s sweep). */
void egress_link_request_done(worker *w, uint64_t token);
/* At exit, once the loop closed its handles. */
void egress_link_free(worker *w);
int loader_link_call(sandbox *sb, const iso_call *call, iso_wire *result);
/* "release": the parent collected the stub of a load() child. */
int loader_link_call_sync(sandbox *sb, const iso_call *call, iso_wire *result);
/* loader_link.c, told by a version's owner: a request of version sb is over
 * (its load() children go once idle); version sb is about to be freed (all
 * its children go, and its queue loses the loader's units). */
void loader_request_done(sandbox *sb, uint64_t token);
void loader_parent_free(sandbox *sb);
/* At exit, before the tenants go: frees every dynamic worker and one-shot run. */
void loader_free_all(worker *w);
/* stream.c: streamed bodies. A deployed version's streamed response leaves
 * through the isolate's iso_host_stream (the data is its sandbox); a large
 * request body is read through the runtime's " request" binding. */
const iso_host_stream *stream_response_host(void);
int stream_link_call_sync(worker *w, sandbox *l, const iso_call *call, iso_wire *result);
int stream_link_call_async(worker *w, sandbox *l, const iso_call *call, iso_wire *result);
/* Drain completions queued on an isolate that is being freed. */
int stream_owns_unit(const sched_unit *u);
void stream_unit_dropped(sched_unit *u);

/* stats.c: per-tenant accounting, reported to the supervisor every second. */
void stats_start(worker *w);
/* A request to a loader child ended (loader_link.c): ok, or how it failed. */
void stats_child_request(worker *w, stats_child_outcome outcome);
/* Sends what was counted since the last report now: a process on its way out
 * would otherwise take up to a report's interval of requests with it. */
void stats_flush(worker *w);
/* A cordoned tenant's request this process answered itself (suspended, or
 * its dedicated process unreachable or failed): no process reports it else. */
void stats_answered_here(tenant *t, int status);

/* evict.c */
/* Isolates one process holds at most unless --max-isolates says otherwise:
 * each idle isolate takes ~12-16 memory mappings and vm.max_map_count (65530
 * by default) caps a process near 4-5k. */
#define WORKER_MAX_ISOLATES 4000
/* Descriptors a worker process keeps out of its connection cap: open facets
 * (a database, its WAL and its shared memory each), the supervisor and
 * egress links, the handoff sockets, V8's and libuv's own. */
#define WORKER_FD_RESERVE 1024
/* How long heap pages of freed isolates wait for a new one (iso_page_trim). */
#define PAGES_KEEP_MS 2000
/* An isolate idle for config.compact_idle_s gets its heap compacted, once
 * per idle period (iso_worker_compact): a worker that has served traffic
 * holds its young generation's pages until then, up to 16 MiB at 128 MiB
 * of heap, and its next request grows them back (a busy batch request ran
 * about 10% slower, docs/operations.md). Each sweep spends at most
 * COMPACT_BUDGET_NS of the loop on it, so that a crowd going idle at once
 * delays no request by much. */
#define COMPACT_BUDGET_NS 2000000
/* Evicts up to `max` idle isolates (current versions and cached dynamic
 * workers), least recently used first; returns how many went. */
size_t evict_lru(worker *w, size_t max);
void evict_start(worker *w);

/* stray.c: V8's plain-text reports (stdio's stderr) logged as JSON lines.
 * Returns 0, or -1 when they stay as they are. */
int stray_output_start(void);

/* pool.c: blank isolates made ahead, off the request path. */
void pool_start(worker *w);
/* Makes no more: a draining process takes few new workers. */
void pool_drain(void);
void pool_stop(void);


/* tail.c: live-log lines (PROTO_TAIL_LINE) for what the supervisor says is
 * tailed (PROTO_TAIL). Every hook is guarded by tail_wanted(), which costs
 * one NULL test while nobody tails. */
void tail_on_frame(worker *w, const proto_frame *f);
void tail_free(worker *w);
/* The key a sandbox's lines go under: a run's "run:ID", else its tenant's name. */
const char *tail_key(const sandbox *sb);
int tail_wanted(const worker *w, const char *key);
void tail_log(sandbox *sb, const sandbox_request *r, iso_log_level level, const char *msg,
              size_t len);
void tail_exception(sandbox *sb, const sandbox_request *r, const iso_error *err);
/* "ok" for no error, else "exception", "exceededCpu", "exceededMemory", ... */
const char *tail_outcome_of(const iso_error *err);
/* The request line of r (sb may be NULL: it never reached a sandbox). */
void tail_request(worker *w, const char *key, const sandbox *sb, const sandbox_request *r,
                  uint64_t cpu_ns);

#endif
