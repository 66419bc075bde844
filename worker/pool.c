/*
 * Keeps a few blank isolates ready (iso_pool_fill), so that a cold start
 * only loads the tenant's modules into one. They are made one per loop
 * iteration, and only while no isolate has work queued: making one takes
 * milliseconds, which must never delay a request.
 */
#include "base.h"
#include "worker.h"

#define POOL_TARGET 4

static void pool_step(uv_idle_t *idle) {
  worker *w = container_of(idle, worker, pool_idle);
  if (w->draining || iso_pool_size() >= POOL_TARGET) {
    uv_idle_stop(idle);
    return;
  }
  if (w->sched.ready_head != NULL) return; /* requests first */
  if (iso_pool_fill(iso_pool_size() + 1) != 0) {
    log_warn("could not make a blank isolate for the pool");
    uv_idle_stop(idle);
  }
}

void pool_start(worker *w) {
  uv_idle_init(w->loop, &w->pool_idle);
  pool_refill(w);
}

void pool_refill(worker *w) {
  if (!w->draining && iso_pool_size() < POOL_TARGET && !uv_is_active((uv_handle_t *)&w->pool_idle))
    uv_idle_start(&w->pool_idle, pool_step);
}

void pool_stop(worker *w) {
  uv_idle_stop(&w->pool_idle);
  if (iso_pool_fill(0) != 0) log_debug("could not empty the isolate pool");
}
