/*
 * Sandboxes: isolates the worker process runs outside its tenants' deployed
 * versions. A dynamic worker started by env.LOADER (loader_link.c) is one,
 * and so is the one-shot isolate of POST /v1/run (run.c).
 *
 * A sandbox has what a tenant's version has (worker.h's `loaded`: the
 * isolate, its limits, its own scheduler queue and counters) plus its own
 * timers and the requests it was given; where its responses go is its
 * owner's business, told through sandbox_ops. Work on a sandbox runs in the
 * sandbox's turns, so a sandbox never delays its owner's isolate by more
 * than one unit, and it counts against the process's isolate maximum.
 *
 * Internal to worker/loader*.c and worker/run.c.
 */
#ifndef EDGENODE_WORKER_LOADER_H
#define EDGENODE_WORKER_LOADER_H

#include "worker.h"

typedef struct sandbox sandbox;
typedef struct sandbox_request sandbox_request;
struct sandbox_timer;

/* Why a request failed before or without reaching JavaScript's verdict. */
typedef enum sandbox_failure {
  SANDBOX_FAIL_ISO = 0,  /* see the iso_error */
  SANDBOX_FAIL_WALL,     /* it ran past the wall-time limit */
  SANDBOX_FAIL_DISCARDED /* the sandbox was freed first */
} sandbox_failure;

typedef struct sandbox_ops {
  /* The sandbox has no isolate yet and a request is about to run: create it
   * with sandbox_load(). Returns 0, or -1 with *err filled. May be NULL when
   * the owner loads the sandbox before submitting anything. */
  int (*prepare)(sandbox *sb, iso_error *err);
  /* The response to the request submitted with `cookie` (res), or its failure
   * (err, with `why`); exactly once per request. Runs inside the sandbox's
   * JavaScript or from a timer: never free the sandbox here, only ask for it
   * with sandbox_release(). */
  void (*respond)(sandbox *sb, void *cookie, const iso_response *res, const iso_error *err,
                  sandbox_failure why);
  /* The request is over (after respond): the sandbox forgets `cookie`. */
  void (*done)(sandbox *sb, void *cookie);
  /* Async host calls made by the sandbox's JavaScript; NULL: none allowed. */
  int (*call_async)(sandbox *sb, const iso_call *call, iso_wire *result);
  /* The sandbox has no request and no unit left (it may be released). */
  void (*idle)(sandbox *sb);
  /* The sandbox was freed: its owner may free the memory holding it. */
  void (*freed)(sandbox *sb);
} sandbox_ops;

struct sandbox {
  loaded base;              /* iso, limits, queue, requests, units, tenant (NULL for runs) */
  const sandbox_ops *ops;
  const char *log_tenant;   /* the tenant in log lines, or NULL */
  char *label;              /* "loader get \"id\"": what log lines say this sandbox is */
  uint64_t wall_ms;         /* a request running longer fails with SANDBOX_FAIL_WALL */
  sandbox_request *requests; /* submitted and not done */
  size_t heap_used;         /* after its last request */
  size_t held_bytes;        /* heap and ArrayBuffers, once loaded and after each request */
  int dying;                /* released: takes no more work, freed from the loop */
  int broken;               /* hit a limit or failed to load: takes no more requests */
  int entered;              /* our calls into its JavaScript on the stack */
  iso_error load_error;     /* why prepare failed, for every request that was waiting */
  sandbox *all_next;        /* every live sandbox of the process */
  sandbox *all_prev;
  sandbox *reap_next;       /* in the list of sandboxes to free */
};

/* Sets up `sb` (zeroed by the caller). tenant may be NULL. */
void sandbox_init(sandbox *sb, const sandbox_ops *ops, tenant *t, json_t *spec,
                  const char *log_tenant, char *label, uint64_t wall_ms);

/* Creates the isolate from `options` (host, calls and limits are filled in
 * here from the sandbox). Counts it against the process's isolate maximum,
 * evicting an idle isolate when the process is at it. Returns 0, or -1 with
 * *err filled. */
int sandbox_load(sandbox *sb, iso_worker_options *options, iso_error *err);

/* Queues a request (copied) for the sandbox's next turn; the owner hears of
 * it through respond and done with `cookie`. Returns 0, or -1 when the
 * sandbox takes no more requests (then no callback comes). */
int sandbox_submit(sandbox *sb, void *cookie, const iso_request *req);
/* The cookie of the request `token` names (a host call's token), while it
 * is submitted and not done; NULL otherwise. */
void *sandbox_request_cookie(sandbox *sb, uint64_t token);

/* Marks the sandbox for freeing, from the loop, outside any JavaScript.
 * Requests still running fail with SANDBOX_FAIL_DISCARDED. Idempotent. */
void sandbox_release(sandbox *sb);

/* 1 when nothing is queued, running or waiting in the sandbox. */
int sandbox_idle(const sandbox *sb);

/* Frees what was released (except sandboxes whose JavaScript is on the
 * stack: those go on the next turn of the loop). */
void sandbox_reap(void);

/* Releases and frees every sandbox: at exit. */
void sandbox_free_all(void);

/* The name and message of a JavaScript error as a wire value {name, message}
 * (for the owner of a sandbox that failed). */
void sandbox_error_value(iso_wire *out, const iso_error *err, sandbox_failure why,
                         const sandbox *sb);

/* loader_link.c: the oldest idle cached dynamic worker, evicted when it was
 * last used before `before_ns`. Returns 1 when one went. */
int loader_evict_before(worker *w, uint64_t before_ns);

#endif
