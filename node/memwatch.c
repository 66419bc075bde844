/*
 * The process-level memory backstop (the budgets themselves are procs.c's). V8's heap limit is soft (one large
 * builtin allocation can overshoot it), so the supervisor also watches each
 * worker process's resident set and restarts a process that grows past its
 * budget, before the machine starts to swap or the kernel's OOM killer picks
 * a victim of its own (perhaps the supervisor).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include "node.h"

#define MEMWATCH_INTERVAL_MS 500

static void check(node *n, node_proc *p, uint64_t budget) {
  if (!p->child.alive || p->child.pid <= 0) return;
  uint64_t rss = process_rss_bytes(p->child.pid);
  if (rss <= budget) return;
  const char *tenant = p->tenant;
  char extra[160];
  /* Rounded up: a process over its budget by less than 1 MiB read as
   * "rss_mb 202, budget_mb 202" when truncated. */
  unsigned long long rss_mb = (rss + (1u << 20) - 1) >> 20;
  snprintf(extra, sizeof extra, "{\"worker\":%d,\"pid\":%d,\"rss_mb\":%llu,\"budget_mb\":%llu}",
           p->id, p->child.pid, rss_mb, (unsigned long long)(budget >> 20));
  log_write(LOG_ERROR, tenant, NULL, extra, "worker process over its memory budget: restarting it");
  node_event_new(n, "memory_kill", tenant, json_loads(extra, 0, NULL));
  /* The whole process's memory: not the fault of whichever tenant happens to run. */
  p->memory_killed = 1;
  /* Draining could take seconds while memory keeps growing: end it now. */
  if (node_child_kill(&p->child, SIGKILL) != 0) log_warn("could not kill worker-%d", p->id);
}

static void memwatch_tick(uv_timer_t *t) {
  node *n = container_of(t, node, memwatch_timer);
  uint64_t budget = node_worker_memory_budget(n);
  for (int i = 0; i < n->n_procs; i++) check(n, &n->procs[i], budget);
  /* A dedicated process has a budget of its own (a cordoned tenant alone). */
  budget = node_dedicated_memory_budget(n);
  for (node_proc *p = node_procs_next_dedicated(n, NULL); p; p = node_procs_next_dedicated(n, p))
    check(n, p, budget);
}

int node_memwatch_start(node *n) {
  int rc = uv_timer_init(n->loop, &n->memwatch_timer);
  if (rc == 0) rc = uv_timer_start(&n->memwatch_timer, memwatch_tick, MEMWATCH_INTERVAL_MS,
                                   MEMWATCH_INTERVAL_MS);
  if (rc == 0) {
    uv_unref((uv_handle_t *)&n->memwatch_timer);
    char extra[64];
    snprintf(extra, sizeof extra, "{\"budget_mb\":%llu}",
             (unsigned long long)(node_worker_memory_budget(n) >> 20));
    log_write(LOG_INFO, NULL, NULL, extra, "watching worker process memory");
  }
  return rc;
}

void node_memwatch_stop(node *n) {
  if (!uv_is_closing((uv_handle_t *)&n->memwatch_timer)) uv_close((uv_handle_t *)&n->memwatch_timer, NULL);
}
