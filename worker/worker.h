/*
 * worker: the edgenode-worker process. It accepts ingress connections on the
 * listening socket inherited from the supervisor, routes each request by the
 * first label of its Host header to a tenant, and runs the tenant's code in a
 * V8 isolate (isolate/). Specs of deployed workers come from the supervisor
 * over proto/ and are cached until the supervisor says they changed.
 *
 * This header is internal to the folder: the process has no public API.
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
typedef struct loaded loaded;
typedef struct inflight inflight;

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
  void *owner;
  vtimer_fire_fn fire;
} vtimer_set;
void vtimer_set_init(vtimer_set *s, void *owner, vtimer_fire_fn fire);
/* Returns 0, or -1 when libuv refuses (the timer then does not exist). */
int vtimer_start(vtimer_set *s, uint64_t token, uint32_t id, double delay_ms);
void vtimer_cancel(vtimer_set *s, uint32_t id);
/* Cancels every pending timer. */
void vtimer_set_clear(vtimer_set *s);

/* One loaded version of a tenant's code: an isolate plus what it waits for. */
struct loaded {
  tenant *tenant;
  json_t *spec;        /* the spec this version was loaded from (a reference) */
  int64_t version;
  iso_worker *iso;
  iso_limits limits;
  sched_queue queue;   /* work waiting for this isolate's turn */
  size_t requests;     /* dispatched and not yet done */
  size_t units;        /* timer firings queued */
  vtimer_set timers;
  int retired;         /* replaced or deleted: free once idle */
  uint64_t last_used_ns; /* for least-recently-used eviction */
  uint64_t compacted_ns; /* last_used_ns as of its last iso_worker_compact(); 0: never */
  const char *facet_id;  /* loader children with a facet of their own; NULL otherwise */
  uint64_t facet_deadline_ns;    /* CPU deadline of the current unit's SQL (facet_link.c) */
  uint64_t facet_deadline_token;
  uint64_t facet_deadline_unit;
  uint64_t facet_limit_mb;       /* limits.facet_mb; 0: the node's default */
  facet_ref facet_ref;           /* its facet's connection, as facet_exec found it last */
  const char *binding_seen;      /* the binding named last (a key in spec) ... */
  const char *binding_seen_type; /* ... and its type (bindings.c) */
  int binding_seen_facet;        /* ... which is "facet" */
  loaded *next_retired;
  struct loader_state *loader; /* dynamic workers it started (loader_link.c), or NULL */
  uint64_t outside_cpu_seen;   /* iso_worker_outside_stats() as last added to the tenant */
  uint64_t outside_hits_seen;
};

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

/* What this process knows of one deployed worker. */
struct tenant {
  char *name;
  json_t *spec;          /* NULL until fetched from the supervisor */
  int fetching;          /* a PROTO_WORKER_GET is outstanding */
  uint32_t fetch_id;
  inflight *waiting;     /* requests queued until the spec arrives */
  inflight **waiting_tail;
  loaded *current;       /* the version new requests go to */
  char *load_error;      /* set when current failed to load; cleared on change */
  tenant_stats stats;
  size_t refs;           /* loaded versions pointing here (current and retired) */
  tenant_placement placement;
  char *cordon_socket;   /* the dedicated process's private unix socket, or NULL */
  int cordon_ready;      /* the dedicated process is up: forward at once */
  char *cordon_error;    /* suspended: the message clients get */
  uint32_t cordon_done_id; /* a PROTO_CORDON to answer once no handoff is left; 0 = none */
  size_t handoffs;       /* requests being forwarded to the dedicated process */
  struct handoff *handoff_waiting; /* held until the dedicated process is ready */
  tenant *next;
};

/* One ingress request on its way through a tenant's isolate. */
struct inflight {
  sched_unit unit;       /* the dispatch, queued on its isolate */
  uint64_t token;
  http_request *req;     /* NULL once responded */
  char request_id[17];   /* kept past the response, for ctx.waitUntil() logs */
  char *url;             /* the Request's URL, made where the request was routed */
  uint64_t start_ns;     /* when the request was complete */
  inflight *run_prev;    /* in worker.running while dispatched and not done */
  inflight *run_next;
  int running;
  int status;            /* what the client was sent */
  tenant *tenant;
  loaded *loaded;
  inflight *next;        /* in tenant->waiting */
};


typedef struct worker_config {
  int id;
  int ipc_fd;
  int listen_fd;
  const char *data_dir;
  size_t max_body_bytes;
  uint64_t header_timeout_ms;
  uint64_t isolate_memory_mb; /* heap budget of all isolates: evict idle ones past it */
  uint64_t idle_timeout_s;    /* evict isolates idle this long */
  uint64_t compact_idle_s;    /* compact isolates idle this long (loaded_compact_idle) */
  const char *egress_socket;  /* the egress process's unix socket; NULL: fetch() fails */
  const char *dedicated;      /* --tenant: the one tenant a dedicated process serves; NULL when shared */
  int running_fd;             /* the supervisor's running slot (proto_running), or -1 */
} worker_config;

typedef struct worker {
  uv_loop_t *loop;
  worker_config config;
  http_server ingress;
  proto_channel supervisor;
  sched sched;
  tenant *tenants;
  loaded *retired;
  uint64_t next_token;
  id_map tokens;         /* token -> inflight */
  int draining;
  uint64_t drain_deadline_ns;
  uv_timer_t drain_timer;
  uv_timer_t stats_timer;
  uv_timer_t wall_timer;
  uv_timer_t evict_timer;
  struct facet_store *facets; /* env.DB connections (facet_link.c) */
  size_t loaded_count;   /* live isolates (current and retired) */
  uint64_t evictions;
  uint64_t compactions;  /* idle isolates compacted (loaded_compact_idle) */
  inflight *running;     /* requests dispatched and not done (for the wall-time limit) */
  uv_signal_t sigterm;
  uv_signal_t sigint;
  proto_running *running_slot; /* shared with the supervisor; NULL without --running-fd */
  uv_timer_t handoff_timer;    /* expires handoffs held too long (handoff.c) */
  int handoff_timer_on;
} worker;

/* tenants.c */
tenant *tenant_find(worker *w, const char *name, size_t len);
tenant *tenant_get_or_add(worker *w, const char *name, size_t len);
void tenant_changed(worker *w, const char *name);
void tenant_spec_arrived(worker *w, uint32_t id, const proto_frame *frame);
void tenant_free_all(worker *w);
/* Queues or dispatches a request for its tenant. */
void tenant_submit(worker *w, inflight *f);
/* Frees retired versions that have nothing left to do. */
void tenant_collect_retired(worker *w);
/* Isolates one process holds at most: each idle isolate takes ~12-16 memory
 * mappings and vm.max_map_count (65530 by default) caps a process near 4-5k. */
#define WORKER_MAX_ISOLATES 4000
/* How long heap pages of freed isolates wait for a new one (iso_page_trim). */
#define PAGES_KEEP_MS 2000
size_t evict_lru(worker *w, size_t max);
void evict_start(worker *w);
/* An isolate idle for config.compact_idle_s gets its heap compacted, once
 * per idle period (iso_worker_compact): a worker that has served traffic
 * holds its young generation's pages until then, up to 16 MiB at 128 MiB
 * of heap, and its next request grows them back (a busy batch request ran
 * about 10% slower, docs/operations.md). Each sweep spends at most
 * COMPACT_BUDGET_NS of the loop on it, so that a crowd going idle at once
 * delays no request by much. */
#define COMPACT_BUDGET_NS 2000000
/* Compacts l if it is idle and due; 0 once the sweep's budget is spent. */
int loaded_compact_idle(worker *w, loaded *l, uint64_t now, int64_t *budget_ns);
size_t tenant_pending_work(worker *w);
/* The modules of a spec as iso_modules (pointers into the spec). Returns the
 * count, or -1 with *why set when the spec is malformed. */
int spec_modules(json_t *spec, iso_module **out, const char **main_module, const char **why);
void spec_limits(json_t *spec, iso_limits *out);
uint64_t spec_facet_mb(json_t *spec);
/* limits.wall_ms of a spec, or the default of 30 s. */
uint64_t spec_wall_ms(json_t *spec);
char *spec_env_json(json_t *spec);

/* ingress.c */
void ingress_on_request(http_server *server, http_request *req);
/* The sched_unit of an inflight: dispatches it into its isolate. */
void ingress_run(sched_unit *unit);
void ingress_fail(worker *w, inflight *f, int status, const char *message, const char *extra_json);
const iso_host *ingress_host(void);
void inflight_finish(worker *w, inflight *f);


/* bindings.c: host calls from JavaScript, by binding kind. */
const iso_host_calls *bindings_host_calls(void);
/* The spec's capability bindings (not plain values) as {"NAME": {"type": ...}}. */
char *bindings_capabilities_json(json_t *spec);
/* Writes an error value {name, message} for JavaScript. */
void bindings_error(iso_wire *out, const char *name, const char *message);
/* One file per binding kind; each returns as iso_host_calls does. */
int facet_link_call(worker *w, loaded *l, const iso_call *call, iso_wire *result);
/* env.DB.exec with its arguments decoded (iso_host_calls.call_values). */
int facet_link_exec(worker *w, loaded *l, const iso_call *call, const iso_wire_value *args,
                    uint32_t n_args, iso_numbers *numbers, iso_wire *result);
int facet_link_start(worker *w);
void facet_link_stop(worker *w);
/* Rolls back what a finished request left open in its facet. */
void facet_link_request_done(worker *w, uint64_t token);
/* Drops a tenant's cached facet connections (redeploy, delete). */
void facet_link_changed(worker *w, const char *tenant);
int egress_link_call(worker *w, loaded *l, const iso_call *call, iso_wire *result);
/* Cancels what a finished request left open at the egress (otherwise done by a 1 s sweep). */
void egress_link_request_done(worker *w, uint64_t token);
int loader_link_call(worker *w, loaded *l, const iso_call *call, iso_wire *result);
/* "release": the parent collected the stub of a load() child. */
int loader_link_call_sync(worker *w, loaded *l, const iso_call *call, iso_wire *result);
/* loader_link.c, told by tenants.c: a request of version l is over (its
 * load() children go once idle); version l is about to be freed (all its
 * children go, and its queue loses the loader's units). */
void loader_request_done(worker *w, loaded *l, uint64_t token);
void loader_parent_free(worker *w, loaded *l);
/* Evicts the least recently used idle cached dynamic worker if it was last
 * used before before_ns (evict_lru's other candidates). Returns 1 if one went. */
int loader_evict_before(worker *w, uint64_t before_ns);
/* Compacts idle cached dynamic workers (loaded_compact_idle). */
void loader_compact_idle(worker *w, uint64_t now, int64_t *budget_ns);
/* At exit, before the tenants go: frees every dynamic worker and one-shot run. */
void loader_free_all(worker *w);

/* stream.c: streamed bodies: responses through the isolate's stream
 * callbacks, request bodies through the runtime's " request" binding. */
const iso_host_stream *stream_response_host(void);
int stream_link_call_sync(worker *w, loaded *l, const iso_call *call, iso_wire *result);
int stream_link_call_async(worker *w, loaded *l, const iso_call *call, iso_wire *result);
/* Drain completions queued on an isolate that is being freed. */
int stream_owns_unit(const sched_unit *u);
void stream_unit_dropped(sched_unit *u);

/* run.c: PROTO_RUN, a one-shot isolate for POST /v1/run. */
void run_on_frame(worker *w, const proto_frame *frame);

/* stats.c: per-tenant accounting, reported to the supervisor every second. */
/* A handoff frames the request itself (Content-Length, Connection: close)
 * and carries the client's own framing headers under this prefix; the
 * dedicated process gives the tenant those instead of the handoff's. */
#define HANDOFF_HOP_PREFIX "x-edgenode-hop-"
int handoff_hop_by_hop(const char *name);
void stats_start(worker *w);
/* Sends what was counted since the last report now: a process on its way out
 * would otherwise take up to a report's interval of requests with it. */
void stats_flush(worker *w);
void stats_request_done(worker *w, inflight *f);
/* A cordoned tenant's request this process answered itself (suspended, or
 * its dedicated process unreachable or failed): no process reports it else. */
void stats_answered_here(tenant *t, int status);
void stats_heap(tenant *t, iso_worker *iso);
/* Requests past their wall-time limit get 504 (their JavaScript may go on). */
void wall_start(worker *w);
void wall_track(worker *w, inflight *f);
void wall_untrack(worker *w, inflight *f);

/* tenants.c: adds to l's tenant the CPU its isolate used outside any
 * request since the last call (the load, code that outlived its request). */
void loaded_charge_outside(loaded *l);
/* tenants.c: a request is over for this process (done, or let go with its
 * ctx.waitUntil() work pending): its CPU goes to its tenant, and its
 * fetches, facet transaction and dynamic workers are let go. Frees f. */
void loaded_request_over(worker *w, inflight *f);

/* stray.c: V8's plain-text reports (stdio's stderr) logged as JSON lines.
 * Returns 0, or -1 when they stay as they are. */
int stray_output_start(void);

/* pool.c: blank isolates made ahead, off the request path. */
void pool_start(worker *w);
/* Makes no more: a draining process takes few new workers. */
void pool_drain(worker *w);
void pool_stop(worker *w);

/* main.c */
worker *worker_self(void);
void worker_maybe_exit(worker *w);
/*
 * The running slot (proto.h): call worker_running_enter() right before
 * entering a tenant's JavaScript and worker_running_leave() right after, so
 * that the supervisor can name the tenant if the process dies in between.
 * Two stores (and a copy when the tenant changes): cheap enough for every entry.
 */
void worker_running_enter(worker *w, const char *tenant);
void worker_running_leave(worker *w);
/* Answers the PROTO_CORDON with id t->cordon_done_id when no handoff is left. */
void worker_cordon_settled(worker *w, tenant *t);

/* tenants.c: placement (PROTO_CORDON) */
/* Moves the tenant out of (or back into) this process: a tenant leaving has
 * its current version retired (running requests finish) and its facet closed
 * once the last of its versions is freed. */
void tenant_set_placement(worker *w, tenant *t, tenant_placement placement);

/* ingress.c */
/* Takes the request out of an inflight that will not run here (its tenant is
 * cordoned) and forwards it; the inflight is freed. */
void inflight_hand_off(worker *w, inflight *f);
/* 503 with the supervisor's message for a suspended tenant. */
void ingress_respond_suspended(tenant *t, http_request *req);

/* handoff.c: forwarding a cordoned tenant's requests to its dedicated process
 * over loopback HTTP; the client sees the dedicated process's answer. */
void handoff_submit(worker *w, tenant *t, http_request *req);
/* The dedicated process is ready (or the tenant moved): start or settle what was held. */
void handoff_flush(worker *w, tenant *t);
void handoff_stop(worker *w);

#endif
