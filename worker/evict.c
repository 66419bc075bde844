/*
 * Eviction and compaction of idle isolates. This file owns which idle
 * sandboxes go when (least recently used first: at the process's maximum of
 * isolates, past the idle timeout, or while the heap of all isolates is
 * over its budget) and which are compacted (idle for compact_idle_s). The
 * candidates are tenants' current versions and cached dynamic workers
 * (env.LOADER.get); the next request for an evicted one cold-starts it.
 * A sweep runs once a second; heap pages that freed isolates left (kept for
 * the next one made) go back to the system once no new isolate took them.
 */
#include "base.h"
#include "sandbox.h"

static int evictable_child(const sandbox *sb) {
  return sb->kind == SANDBOX_CHILD && sb->cached && sb->iso && sb->state != SANDBOX_DYING &&
         sandbox_idle(sb);
}

/* The least recently used idle cached dynamic worker, or NULL. */
static sandbox *oldest_child(worker *w) {
  sandbox *oldest = NULL;
  for (sandbox *sb = w->sandboxes; sb; sb = sb->all_next)
    if (evictable_child(sb) && (oldest == NULL || sb->last_used_ns < oldest->last_used_ns))
      oldest = sb;
  return oldest;
}

/* The tenant whose idle current version was used least recently, or NULL. */
static tenant *oldest_version(worker *w) {
  tenant *oldest = NULL;
  for (tenant *t = w->tenants; t; t = t->next)
    if (t->current && sandbox_idle(t->current) &&
        (oldest == NULL || t->current->last_used_ns < oldest->current->last_used_ns))
      oldest = t;
  return oldest;
}

static void evict_version(worker *w, tenant *t) {
  sandbox *sb = t->current;
  t->current = NULL;
  t->stats.heap_used = 0;
  t->stats.dirty = 1;
  sandbox_dispose(sb);
  w->evictions++;
}

static void evict_child(worker *w, sandbox *sb) {
  sb->ops->evict(sb);
  sandbox_reap(w);
  w->evictions++;
}

size_t evict_lru(worker *w, size_t max) {
  size_t evicted = 0;
  while (evicted < max) {
    tenant *oldest = oldest_version(w);
    sandbox *child = oldest_child(w);
    /* Cached dynamic workers take their turn by age too. */
    if (child && (oldest == NULL || child->last_used_ns < oldest->current->last_used_ns)) {
      evict_child(w, child);
    } else if (oldest) {
      evict_version(w, oldest);
    } else {
      break;
    }
    evicted++;
  }
  return evicted;
}

/* Compacts sb if it is idle and due; 0 once the sweep's budget is spent. */
static int compact_idle(worker *w, sandbox *sb, uint64_t now, int64_t *budget_ns) {
  if (*budget_ns <= 0) return 0;
  if (sb->iso == NULL || !sandbox_idle(sb) || sb->compacted_ns == sb->last_used_ns ||
      sb->last_used_ns > now)
    return 1;
  /* Past the idle timeout it is about to be evicted: a collection then
   * would be wasted. */
  uint64_t idle_ns = now - sb->last_used_ns;
  if (idle_ns < w->config.compact_idle_s * 1000000000u ||
      idle_ns >= w->config.idle_timeout_s * 1000000000u)
    return 1;
  uint64_t t0 = time_mono_ns();
  iso_worker_compact(sb->iso);
  sb->compacted_ns = sb->last_used_ns;
  w->compactions++;
  *budget_ns -= (int64_t)(time_mono_ns() - t0);
  return *budget_ns > 0;
}

/* The heap of every isolate that eviction may free, as last measured. */
static size_t heap_held(worker *w) {
  size_t heap = 0;
  for (tenant *t = w->tenants; t; t = t->next)
    if (t->current) heap += t->stats.heap_used;
  for (sandbox *sb = w->sandboxes; sb; sb = sb->all_next)
    if (sb->kind == SANDBOX_CHILD && sb->cached) heap += sb->heap_used;
  return heap;
}

static void evict_sweep(uv_timer_t *timer) {
  worker *w = container_of(timer, worker, evict_timer);
  iso_page_trim(PAGES_KEEP_MS);
  /* The TypeScript stripper is let go as an idle isolate is. */
  iso_typescript_trim(w->config.idle_timeout_s * 1000u);
  uint64_t now = time_mono_ns();
  uint64_t idle_ns = w->config.idle_timeout_s * 1000000000u;
  for (tenant *t = w->tenants; t; t = t->next)
    if (t->current && sandbox_idle(t->current) && now - t->current->last_used_ns > idle_ns)
      evict_version(w, t);
  for (sandbox *child; (child = oldest_child(w)) != NULL && now - child->last_used_ns > idle_ns;)
    evict_child(w, child);
  uint64_t budget = w->config.isolate_memory_mb << 20;
  for (int rounds = 0; rounds < 64 && heap_held(w) > budget; rounds++)
    if (evict_lru(w, 1) == 0) break;
  int64_t compact_ns = COMPACT_BUDGET_NS;
  for (tenant *t = w->tenants; t && compact_ns > 0; t = t->next)
    if (t->current) compact_idle(w, t->current, now, &compact_ns);
  for (sandbox *sb = w->sandboxes; sb && compact_ns > 0; sb = sb->all_next)
    if (evictable_child(sb) && !compact_idle(w, sb, now, &compact_ns)) break;
}

void evict_start(worker *w) {
  uv_timer_init(w->loop, &w->evict_timer);
  uv_timer_start(&w->evict_timer, evict_sweep, 1000, 1000);
  uv_unref((uv_handle_t *)&w->evict_timer);
}
