/*
 * env.DB: the worker's facet (its own SQLite file), served in this process
 * by facets/. Calls are synchronous: SQLite runs on the loop thread, inside
 * the request's CPU budget, and is interrupted at its deadline.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "facets.h"
#include "sandbox.h"

int facet_link_start(worker *w) {
  facet_options options = {.coalesce = 1};
  w->facets = facet_store_new(w->config.data_dir, &options);
  if (w->facets == NULL) {
    log_error("facets unavailable: cannot create %s/facets: %s", w->config.data_dir,
              strerror(errno));
    return -1;
  }
  return 0;
}

void facet_link_stop(worker *w) {
  facet_store_free(w->facets);
  w->facets = NULL;
}

/* SQL time counts toward the request's CPU limit like JavaScript's does.
 * Reading the thread's CPU clock is a system call, so the deadline is
 * computed once per unit of work and reused by the calls it makes. */
static uint64_t cpu_deadline(worker *w, sandbox *l, uint64_t token) {
  if (l->facet_deadline_token != token || l->facet_deadline_unit != w->sched.units_run) {
    uint64_t budget_ns = (uint64_t)l->limits.cpu_ms * 1000000u;
    uint64_t used_ns = iso_worker_request_cpu_ns(l->iso, token);
    l->facet_deadline_ns = time_thread_cpu_ns() + (budget_ns > used_ns ? budget_ns - used_ns : 0);
    l->facet_deadline_token = token;
    l->facet_deadline_unit = w->sched.units_run;
  }
  return l->facet_deadline_ns;
}

/* A tenant's facets are in its directory; a run's named facet in "run"'s. */
static const char *facet_owner(const sandbox *l) {
  return l->tenant ? l->tenant->name : l->facet_tenant;
}

static int unavailable(iso_wire *result) {
  sandbox_call_error(result, "Error", "facets are unavailable on this node");
  return -1;
}

int facet_link_call(sandbox *l, const iso_call *call, iso_wire *result) {
  worker *w = l->w;
  if (w->facets == NULL) return unavailable(result);
  return facet_call(w->facets, facet_owner(l), l->facet_id, l->facet_limit_mb, call,
                    cpu_deadline(w, l, call->token), result);
}

/* (Hot: on every exec, and placed with the rest of its path.) */
__attribute__((hot))
int facet_link_exec(sandbox *l, const iso_call *call, const iso_wire_value *args,
                    uint32_t n_args, iso_numbers *numbers, iso_wire *result) {
  worker *w = l->w;
  if (w->facets == NULL) return unavailable(result);
  return facet_exec(w->facets, facet_owner(l), l->facet_id, &l->facet_ref, l->facet_limit_mb,
                    call->token, cpu_deadline(w, l, call->token), args, n_args, numbers, result);
}

void facet_link_request_done(worker *w, uint64_t token) {
  if (w->facets) facet_store_release(w->facets, token);
}

void facet_link_changed(worker *w, const char *tenant) {
  if (w->facets) facet_store_close_tenant(w->facets, tenant);
}

/* What the isolate holds in memory may assume writes that are not
 * there: it serves nothing more, and the tenant's next request gets a
 * fresh one. */
static void reset(sandbox *sb) { sb->state = sandbox_state_after(sb->state, SANDBOX_LIMIT_HIT); }

int facet_link_gate(sandbox *sb) {
  worker *w = sb->w;
  if (sb->gate_error != NULL) return -1;
  if (w->facets == NULL || !facet_store_pending(w->facets)) return 0;
  int rc = facet_store_commit(w->facets, NULL);
  /* (facets/ has logged which facet and why.) Only this sandbox's own
   * facet's losses are its to answer for; others wait for their owner. */
  char *lost = NULL;
  if (facet_store_take_failure(w->facets, facet_owner(sb), sb->facet_id, &lost)) {
    sb->gate_error = lost;
    reset(sb);
    return -1;
  }
  return rc > 0 ? 1 : 0;
}

void facet_link_drop(sandbox *sb) {
  worker *w = sb->w;
  if (w->facets == NULL || !facet_store_pending(w->facets)) return;
  facet_store_rollback(w->facets);
  reset(sb);
}
