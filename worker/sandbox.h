/*
 * sandbox: the one host of an isolate in a worker process. A tenant's
 * deployed version (tenants.c), a dynamic worker started by env.LOADER
 * (loader_link.c) and the one-shot isolate of POST /v1/run (run.c) are each
 * a sandbox: sandbox.c creates its isolate within the process's maximum,
 * holds it to its limits (CPU and memory in the isolate, wall time here),
 * runs its timers and host callbacks, and disposes of it. What differs
 * between the three kinds is told through sandbox_ops, by the sandbox's owner.
 *
 * A request through a sandbox is a sandbox_request, and sandbox.c is its one
 * owner: it makes it (for an ingress request, right after routing), queues
 * it on the sandbox, answers it (to the HTTP client, or to the sandbox's
 * owner), times it against its wall-time limit and frees it. Everything that
 * enters a sandbox's JavaScript (a request, a timer, a host call's
 * completion) is a unit on the sandbox's own scheduler queue, so a sandbox
 * never delays others by more than one unit.
 *
 * Internal to worker/.
 */
#ifndef EDGENODE_WORKER_SANDBOX_H
#define EDGENODE_WORKER_SANDBOX_H

#include "worker.h"

typedef enum sandbox_kind {
  SANDBOX_VERSION = 0, /* a tenant's deployed version: answers HTTP clients */
  SANDBOX_CHILD,       /* a dynamic worker: answers its parent, through its owner */
  SANDBOX_RUN,         /* a one-shot run: answers the supervisor, through its owner */
} sandbox_kind;

/*
 * The life of a sandbox. Transitions (sandbox_state_after):
 *   EMPTY --loaded--> READY --limit--> BROKEN
 *   EMPTY --load failed--> BROKEN
 *   EMPTY|READY|BROKEN --retire--> RETIRED   (requests running finish)
 *   any --release--> DYING                    (requests running fail)
 * RETIRED and DYING are final but for RETIRED --release--> DYING.
 */
typedef enum sandbox_state {
  SANDBOX_EMPTY = 0, /* no isolate yet: made in the first request's turn */
  SANDBOX_READY,     /* has an isolate and takes requests */
  SANDBOX_BROKEN,    /* hit a limit or failed to load: takes no more requests */
  SANDBOX_RETIRED,   /* replaced or deleted: freed once nothing runs in it */
  SANDBOX_DYING,     /* released: freed from the loop, outside any JavaScript */
} sandbox_state;

typedef enum sandbox_event {
  SANDBOX_LOADED,
  SANDBOX_LOAD_FAILED,
  SANDBOX_LIMIT_HIT,
  SANDBOX_RETIRE,
  SANDBOX_RELEASE,
} sandbox_event;

static inline sandbox_state sandbox_state_after(sandbox_state s, sandbox_event e) {
  switch (e) {
    case SANDBOX_LOADED: return s == SANDBOX_EMPTY ? SANDBOX_READY : s;
    case SANDBOX_LOAD_FAILED: return s == SANDBOX_EMPTY ? SANDBOX_BROKEN : s;
    case SANDBOX_LIMIT_HIT: return s == SANDBOX_READY ? SANDBOX_BROKEN : s;
    case SANDBOX_RETIRE: return s == SANDBOX_DYING ? s : SANDBOX_RETIRED;
    case SANDBOX_RELEASE: return SANDBOX_DYING;
  }
  return s;
}

/* Whether a new request may be queued: a sandbox without an isolate yet
 * makes it in the request's turn. */
static inline int sandbox_state_takes_requests(sandbox_state s) {
  return s == SANDBOX_EMPTY || s == SANDBOX_READY;
}

/* Whether its JavaScript may still run (timers, completions, queued requests). */
static inline int sandbox_state_runs(sandbox_state s) {
  return s == SANDBOX_READY || s == SANDBOX_BROKEN || s == SANDBOX_RETIRED;
}

/* Why a request failed before or without reaching JavaScript's verdict. */
typedef enum sandbox_failure {
  SANDBOX_FAIL_ISO = 0,  /* see the iso_error */
  SANDBOX_FAIL_WALL,     /* it ran past the wall-time limit */
  SANDBOX_FAIL_DISCARDED /* the sandbox was freed first */
} sandbox_failure;

typedef struct sandbox_ops {
  /* The sandbox has no isolate yet and a request is about to run: create it
   * with sandbox_load(). Returns 0, or -1 with *err filled. NULL when the
   * owner loads the sandbox before submitting anything. */
  int (*prepare)(sandbox *sb, iso_error *err);
  /* Owner-answered kinds: the response to the request submitted with
   * `cookie` (res), or its failure (err, with `why`); exactly once per
   * request. Runs inside the sandbox's JavaScript or from a timer: never
   * free the sandbox here, only ask for it with sandbox_release(). */
  void (*respond)(sandbox *sb, void *cookie, const iso_response *res, const iso_error *err,
                  sandbox_failure why);
  /* Owner-answered kinds: the request is over (after respond). */
  void (*done)(sandbox *sb, void *cookie);
  /* A request of the sandbox is over: what it left open elsewhere (facet
   * transaction, fetches, dynamic workers) is let go. May be NULL. */
  void (*request_over)(sandbox *sb, uint64_t token);
  /* After anything that ran in the sandbox or ended one of its requests:
   * the owner may free what became idle. May be NULL. */
  void (*settled)(sandbox *sb);
  /* The sandbox is about to be disposed of (its isolate still exists). May be NULL. */
  void (*disposing)(sandbox *sb);
  /* The sandbox was disposed of: its owner may free the memory holding it. */
  void (*freed)(sandbox *sb);
  /* A cached sandbox (sandbox.cached) is evicted: its owner lets it go. */
  void (*evict)(sandbox *sb);
  /* A console line of request `token` (0: none), as it goes to the log:
   * the owner may keep it too (a run answers with its lines). May be NULL. */
  void (*log)(sandbox *sb, uint64_t token, iso_log_level level, const char *msg, size_t len);
} sandbox_ops;

/* A host's isolate: one of the three kinds above. */
struct sandbox {
  worker *w;
  sandbox_kind kind;
  sandbox_state state;
  const sandbox_ops *ops;
  tenant *tenant;        /* whose account it runs on; NULL for one-shot runs */
  json_t *spec;          /* the spec it was made from (a reference), or NULL */
  int64_t version;
  iso_worker *iso;       /* NULL until loaded */
  iso_limits limits;
  uint64_t wall_ms;      /* a request running longer fails (504 for a version) */
  sched_queue queue;     /* work waiting for this isolate's turn */
  size_t requests;       /* submitted and not yet over */
  size_t units;          /* other units queued for it (timers, completions) */
  size_t gated;          /* its responses waiting in the output gate's batch (gate.c) */
  vtimer_set timers;
  int entered;           /* our calls into its JavaScript on the stack */
  int cached;            /* a child kept for reuse: evicted with idle versions (evict.c) */
  int tell_version;      /* a version under a traffic split: its answers say which */
  uint64_t last_used_ns; /* for least-recently-used eviction */
  uint64_t compacted_ns; /* last_used_ns as of its last iso_worker_compact(); 0: never */
  const char *log_tenant; /* the tenant in log lines, or NULL */
  char *label;           /* "loader get \"id\"": what log lines say it is; NULL for versions */
  char *log_extra;       /* the console lines' extra JSON */
  char *tail_key;        /* a run's "run:ID" for its tail, or NULL: log_tenant's (tail.c) */
  sandbox_request *owned; /* owner-answered requests submitted and not over */
  size_t heap_used;      /* after its last request (children and runs) */
  size_t held_bytes;     /* heap and ArrayBuffers, once loaded and after each request */
  iso_error load_error;  /* why prepare failed, for every request that was waiting */
  uint64_t outside_cpu_seen;  /* iso_worker_outside_stats() as last added to the tenant */
  uint64_t outside_hits_seen;
  /* Host-call state of bindings (bindings.c, facet_link.c, loader_link.c). */
  const char *facet_id;  /* loader children with a facet of their own; NULL otherwise */
  uint64_t facet_deadline_ns;    /* CPU deadline of the current unit's SQL (facet_link.c) */
  uint64_t facet_deadline_token;
  uint64_t facet_deadline_unit;
  uint64_t facet_limit_mb;       /* limits.facet_mb; 0: the node's default */
  facet_target facet_target;     /* its facet, and that facet's connection as facet_exec
                                    found it last (facet_link.c) */
  char *gate_error;              /* why its writes were lost at the output gate, or NULL (facet_link.c) */
  const char *binding_seen;      /* the binding named last (a key in spec) ... */
  const char *binding_seen_type; /* ... and its type (bindings.c) */
  int binding_seen_facet;        /* ... which is "facet" */
  char binding_seen_copy[16];    /* its name when shorter, "" otherwise: compared in place
                                    on a facet exec (bindings.c) */
  struct loader_state *loader;   /* dynamic workers it started (loader_link.c), or NULL */
  const char *principal;         /* the egress policy its fetch() runs under instead of its
                                    tenant's (a run: "run:<id>"; a loader child whose
                                    globalOutbound names one), or NULL */
  const char *facet_tenant;      /* a run's facets' owner (FACET_RUN_OWNER), or NULL */
  sandbox *next_retired;         /* in worker.retired (versions) */
  sandbox *all_next;             /* every live sandbox of the process */
  sandbox *all_prev;
  sandbox *reap_next;            /* in the list of sandboxes to free */
};

/* One request through a sandbox, from routing to answer. */
struct sandbox_request {
  sched_unit unit;       /* the dispatch, queued on its sandbox */
  uint64_t token;
  sandbox *sb;           /* NULL until it is given to one */
  tenant *tenant;        /* NULL for one-shot runs */
  uint64_t start_ns;     /* when the request was complete: its wall time counts from here */
  int status;            /* what the client was sent */
  int responded;
  const char *outcome;   /* for its tail line: "exception", "exceededCpu", ...; NULL: by status */
  uint64_t cpu_ns;       /* its CPU, once over (for its tail line) */
  /* An ingress request: answered to its HTTP client. */
  http_request *req;     /* NULL once responded, or when the owner answers */
  char request_id[17];   /* kept past the response, for ctx.waitUntil() logs */
  char *url;             /* the Request's URL */
  /* An owner's request (children, runs): a copy, answered through ops. */
  void *cookie;
  char *method;
  iso_header *headers;   /* names and values in `strings` */
  size_t n_headers;
  char *strings;
  uint8_t *body;
  size_t body_len;
  /* Timed while dispatched and not over. */
  sandbox_request *run_prev;
  sandbox_request *run_next;
  int running;
  sandbox_request *next; /* in tenant->waiting, or in sb->owned */
  sandbox_request *prev; /* in sb->owned */
};

/* ---- sandboxes ---- */

/* Sets up `sb` (zeroed by the caller): limits from the spec's (defaults of
 * proto.h), a wall time of wall_ms (0: the spec's). tenant and spec may be
 * NULL. `label` (taken) names it in log lines. */
void sandbox_init(sandbox *sb, worker *w, sandbox_kind kind, const sandbox_ops *ops, tenant *t,
                  json_t *spec, char *label);

/* Creates the isolate from `options` (host and limits are filled in here;
 * calls when NULL get none). Counts it against the process's isolate
 * maximum, evicting an idle isolate when the process is at it. Returns 0, or
 * -1 with *err filled (its load CPU is on the tenant's account either way). */
int sandbox_load(sandbox *sb, iso_worker_options *options, iso_error *err);

/* Disposes of the isolate and what waits for it now: queued units are
 * dropped (a queued request gets 503), timers go. Then ops->freed. Never
 * from inside the sandbox's own JavaScript: see sandbox_release(). */
void sandbox_dispose(sandbox *sb);

/* Marks the sandbox for disposal, from the loop, outside any JavaScript.
 * Requests still running fail with SANDBOX_FAIL_DISCARDED. Idempotent. */
void sandbox_release(sandbox *sb);

/* Retires a version: it takes no new requests and is disposed of by its
 * owner once idle. */
void sandbox_retire(sandbox *sb);

/* 1 when nothing is queued, running or waiting in the sandbox. */
int sandbox_idle(const sandbox *sb);
/* Whether a new request may be given to it. */
int sandbox_usable(const sandbox *sb);

/* What sandbox_dispose() does with a unit of the sandbox's queue it does
 * not know (for an owner that clears the queue itself). */
void sandbox_unit_dropped(sched_unit *u);

/* Frees what was released (except sandboxes whose JavaScript is on the
 * stack: those go on the next turn of the loop). */
void sandbox_reap(worker *w);
/* At exit: releases and frees every sandbox that is not a version. */
void sandbox_free_all(worker *w);

/* Adds to the sandbox's tenant the CPU its isolate used outside any
 * request since the last call (the load, code that outlived its request). */
void sandbox_charge_outside(sandbox *sb);

/* Calls into the sandbox's JavaScript are bracketed by these: the process's
 * running slot names its tenant meanwhile, and the sandbox is not freed.
 * Leaving the last one tells the owner (ops->settled), who may free what
 * became idle: touch nothing of the sandbox after sandbox_leave(). */
void sandbox_enter(sandbox *sb);
void sandbox_leave(sandbox *sb);

/* ---- requests ---- */

/* An ingress request, routed to tenant t with its URL (taken). It is in the
 * token map from now on; the caller gives it to a sandbox with
 * sandbox_request_submit, answers it with sandbox_request_fail or lets it go
 * with sandbox_request_hand_over. */
sandbox_request *sandbox_request_new(worker *w, http_request *req, tenant *t, char *url);

/* Queues an ingress request on a version for its next turn. */
void sandbox_request_submit(sandbox *sb, sandbox_request *r);

/* Queues a request of the sandbox's owner (copied) for the sandbox's next
 * turn; the owner hears of it through respond and done with `cookie`.
 * request_id (may be NULL) tags its console lines: the id of the request
 * that asked for it (a loader child's parent's, a run's control request).
 * Returns 0, or -1 when the sandbox takes no more requests (then no
 * callback comes). */
int sandbox_submit(sandbox *sb, void *cookie, const iso_request *req, const char *request_id);

/* The request `token` names (a host call's token), while it is not over. */
sandbox_request *sandbox_request_of(worker *w, uint64_t token);
/* The cookie of the owner's request `token` names, if it is sb's; or NULL. */
void *sandbox_request_cookie(sandbox *sb, uint64_t token);

/* Answers an ingress request with an error (no-op once answered). */
/* A response of the sandbox left the output gate's batch (gate.c). */
void sandbox_ungate(worker *w, sandbox *sb);
/* Answers 503 with Retry-After before any of the request's JavaScript ran. */
void sandbox_request_fail_retry(sandbox_request *r, const char *message);
void sandbox_request_fail(sandbox_request *r, int status, const char *message,
                          const char *extra_json);
/* Answers it if nothing did, counts it and frees it. */
void sandbox_request_finish(worker *w, sandbox_request *r);
/* Takes the HTTP request out (to forward it elsewhere) and frees the rest,
 * uncounted: another process reports it. */
http_request *sandbox_request_hand_over(worker *w, sandbox_request *r);

/* Starts the wall-time sweep. */
void sandbox_wall_start(worker *w);

/* The name and message of a JavaScript error as a wire value {name, message}
 * (for the owner of a sandbox that failed). */
void sandbox_error_value(iso_wire *out, const iso_error *err, sandbox_failure why,
                         const sandbox *sb);
/* "TypeError: x" -> *name "TypeError" (name_len bytes), *message "x";
 * anything else is an Error with the whole text as its message. */
void sandbox_split_message(const char *text, const char **name, size_t *name_len,
                           const char **message);

/* A response's headers for its HTTP client, with X-Edgenode-Version when
 * `sb` is a version under a traffic split: in `stack` when they fit, else
 * on the heap; *n says how many. Free with sandbox_http_headers_free. */
http_header *sandbox_http_headers(const sandbox *sb, const iso_response *res, http_header *stack,
                                  size_t stack_len, size_t *n);
void sandbox_http_headers_free(http_header *hs, size_t n, const http_header *stack);

/* A JavaScript stack as its author wrote it (heap): the runtime's and
 * generated modules' frames ("edgenode:...") are left out. */
char *sandbox_user_stack(const char *stack);

/* The name its fetch() runs under: its principal when it has one (a run's
 * policy, a loader child's globalOutbound policy), else its tenant's. */
static inline const char *sandbox_principal(const sandbox *sb) {
  return sb->principal ? sb->principal : sb->tenant ? sb->tenant->name : NULL;
}

/* Writes an error value {name, message} for JavaScript (a host call's). */
void sandbox_call_error(iso_wire *out, const char *name, const char *message);

#endif
