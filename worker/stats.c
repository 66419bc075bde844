/*
 * Per-tenant accounting, reported to the supervisor (PROTO_STATS) once a
 * second with the process's own figures. Counters are deltas since the last
 * report: the supervisor adds them up across processes and process
 * restarts, so a worker process that dies loses at most one second of
 * statistics. Requests are counted by their owner (sandbox.c); this file
 * samples heaps and sends the report.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "sandbox.h"

#define STATS_INTERVAL_MS 1000

void stats_answered_here(tenant *t, int status) {
  t->stats.requests++;
  if (status >= 500) t->stats.errors++;
  if (status >= 100 && status < 600) t->stats.status_classes[status / 100 - 1]++;
  t->stats.dirty = 1;
}

static const char *const child_outcomes[STATS_CHILD_OUTCOMES] = {
    "ok", "exception", "start_error", "cpu", "memory", "wall",
};
static const char *const sandbox_kinds[] = {"worker", "loader", "run"};

void stats_child_request(worker *w, stats_child_outcome outcome) {
  if (outcome < STATS_CHILD_OUTCOMES) w->child_requests[outcome]++;
}

static json_t *counts_array(const uint64_t *v, size_t n) {
  json_t *a = json_array();
  for (size_t i = 0; i < n; i++) json_array_append_new(a, json_integer((json_int_t)v[i]));
  return a;
}

/* The process's deltas: {"cold_starts": {kind: n}, "loader_requests": {outcome: n}}. */
static json_t *counts_json(worker *w) {
  _Static_assert(ARRAY_SIZE(sandbox_kinds) == ARRAY_SIZE(w->cold_starts), "a name per kind");
  json_t *cold = json_object(), *children = json_object();
  for (size_t i = 0; i < ARRAY_SIZE(sandbox_kinds); i++)
    json_object_set_new(cold, sandbox_kinds[i], json_integer((json_int_t)w->cold_starts[i]));
  for (size_t i = 0; i < STATS_CHILD_OUTCOMES; i++)
    json_object_set_new(children, child_outcomes[i], json_integer((json_int_t)w->child_requests[i]));
  memset(w->cold_starts, 0, sizeof w->cold_starts);
  memset(w->child_requests, 0, sizeof w->child_requests);
  return json_pack("{s:o, s:o}", "cold_starts", cold, "loader_requests", children);
}

/* Heap figures are sampled once per report, not per request: V8's
 * GetHeapStatistics showed up at a few percent of a hello-world's CPU. */
static void stats_heap(tenant *t, iso_worker *iso) {
  iso_heap_stats hs;
  iso_worker_heap_stats(iso, &hs);
  if (hs.used_bytes != t->stats.heap_used) t->stats.dirty = 1;
  t->stats.heap_used = hs.used_bytes;
  if (hs.used_bytes > t->stats.heap_peak) t->stats.heap_peak = hs.used_bytes;
}

static json_t *stats_json(const tenant *t) {
  const tenant_stats *s = &t->stats;
  json_t *j = json_pack("{s:I,s:I,s:f,s:f,s:I,s:I,s:I,s:I,s:I,s:I,s:b}", "requests",
                   (json_int_t)s->requests, "errors", (json_int_t)s->errors, "cpu_ms",
                   s->cpu_ns / 1e6, "wall_ms", s->wall_ns / 1e6, "cpu_limit_hits",
                   (json_int_t)s->cpu_limit_hits, "memory_limit_hits",
                   (json_int_t)s->memory_limit_hits, "wall_limit_hits",
                   (json_int_t)s->wall_limit_hits, "cold_starts", (json_int_t)s->cold_starts,
                   "heap_used", (json_int_t)s->heap_used, "heap_peak", (json_int_t)s->heap_peak,
                   "loaded", t->current != NULL);
  json_object_set_new(j, "uncaught_errors", json_integer((json_int_t)s->uncaught_errors));
  json_object_set_new(j, "status_classes", counts_array(s->status_classes, 5));
  json_object_set_new(j, "durations", counts_array(s->durations, PROTO_DURATION_BUCKETS + 1));
  return j;
}

/* The listener's caps and what they refused since the process started. */
static json_t *stats_ingress(const worker *w) {
  json_t *j = http_server_report(&w->ingress);
  json_object_set_new(j, "nofile", json_integer((json_int_t)w->nofile));
  return j;
}

static void stats_send(worker *w) {
  json_t *tenants = json_object();
  for (tenant *t = w->tenants; t; t = t->next) {
    if (t->current) {
      stats_heap(t, t->current->iso);
      /* What ran after its last request (a FinalizationRegistry's callbacks)
       * is reported even if no request comes again. */
      sandbox_charge_outside(t->current);
    }
    if (!t->stats.dirty) continue;
    json_object_set_new(tenants, t->name, stats_json(t));
    size_t heap = t->stats.heap_used;
    memset(&t->stats, 0, sizeof t->stats);
    t->stats.heap_used = heap;
    t->stats.heap_peak = heap;
  }
  /* requests_live: a dedicated process with a request still answering or
   * running (waitUntil) is not idle, however long since its last request. */
  size_t live = w->ingress.in_flight > w->version_requests ? w->ingress.in_flight : w->version_requests;
  json_t *body = json_pack("{s:o, s:{s:I, s:I, s:I, s:I, s:I}}", "tenants", tenants, "process",
                           "isolates", (json_int_t)w->loaded_count, "evictions",
                           (json_int_t)w->evictions, "compactions", (json_int_t)w->compactions,
                           "units_run", (json_int_t)w->sched.units_run, "requests_live",
                           (json_int_t)live);
  json_object_set_new(json_object_get(body, "process"), "ingress", stats_ingress(w));
  json_object_set_new(body, "counts", counts_json(w));
  char *text = json_dumps(body, JSON_COMPACT);
  json_decref(body);
  if (text == NULL) abort();
  if (proto_channel_send(&w->supervisor, PROTO_STATS, 0, text, strlen(text)) != 0)
    log_debug("could not send statistics to the supervisor");
  free(text);
}

static void stats_report(uv_timer_t *timer) { stats_send(container_of(timer, worker, stats_timer)); }

void stats_flush(worker *w) { stats_send(w); }

void stats_start(worker *w) {
  uv_timer_init(w->loop, &w->stats_timer);
  uv_timer_start(&w->stats_timer, stats_report, STATS_INTERVAL_MS, STATS_INTERVAL_MS);
  /* Statistics alone must not keep a draining process alive. */
  uv_unref((uv_handle_t *)&w->stats_timer);
}
