/*
 * Per-tenant statistics, kept in n->tenants. Worker processes report deltas
 * every second (PROTO_STATS); counters are summed here across processes and
 * restarts, heap figures are gauges kept per process slot and summed when
 * shown (tenants.c, metrics.c).
 *
 * Each tenant's CPU over the last minute is kept too, for the cap on
 * dedicated processes (cordons.c picks the worst offender by it): two
 * one-minute buckets, the older one weighted by how much of it still lies
 * within the minute that ends now (a sliding-window counter: two numbers per
 * tenant instead of a ring of samples).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "node.h"

#define CPU_WINDOW_MS 60000

const char *const node_stats_counters[NODE_STATS_N_COUNTERS] = {
    "requests",        "errors",      "cpu_limit_hits",  "memory_limit_hits",
    "wall_limit_hits", "cold_starts", "uncaught_errors",
};
const char *const node_stats_sums[NODE_STATS_N_SUMS] = {"cpu_ms", "wall_ms"};

static json_t *tenant_entry(node *n, const char *name) {
  if (n->tenants == NULL) n->tenants = json_object();
  json_t *t = json_object_get(n->tenants, name);
  if (t) return t;
  t = json_pack("{s:{}, s:I}", "procs", "heap_peak", (json_int_t)0);
  for (size_t i = 0; i < NODE_STATS_N_COUNTERS; i++) json_object_set_new(t, node_stats_counters[i], json_integer(0));
  for (size_t i = 0; i < NODE_STATS_N_SUMS; i++) json_object_set_new(t, node_stats_sums[i], json_real(0));
  json_object_set_new(n->tenants, name, t);
  return t;
}

static void add_counter(json_t *t, const char *key, json_t *delta) {
  json_int_t v = json_integer_value(json_object_get(t, key)) + json_integer_value(delta);
  json_object_set_new(t, key, json_integer(v));
}

static void add_sum(json_t *t, const char *key, json_t *delta) {
  double v = json_number_value(json_object_get(t, key)) + json_number_value(delta);
  json_object_set_new(t, key, json_real(v));
}

static int64_t mono_ms(void) { return (int64_t)(time_mono_ns() / 1000000u); }

/* The tenant's CPU buckets as of now: *cur is the current minute's, *prev the one before. */
static void cpu_buckets(json_t *t, int64_t now, double *cur, double *prev) {
  int64_t at = json_integer_value(json_object_get(t, "cpu_minute"));
  *cur = *prev = 0;
  if (at == now / CPU_WINDOW_MS) {
    *cur = json_number_value(json_object_get(t, "cpu_cur"));
    *prev = json_number_value(json_object_get(t, "cpu_prev"));
  } else if (at + 1 == now / CPU_WINDOW_MS) {
    *prev = json_number_value(json_object_get(t, "cpu_cur"));
  }
}

static void cpu_add(json_t *t, double ms) {
  if (!(ms > 0)) return;
  int64_t now = mono_ms();
  double cur, prev;
  cpu_buckets(t, now, &cur, &prev);
  json_object_set_new(t, "cpu_minute", json_integer(now / CPU_WINDOW_MS));
  json_object_set_new(t, "cpu_cur", json_real(cur + ms));
  json_object_set_new(t, "cpu_prev", json_real(prev));
}

double node_stats_cpu_recent(node *n, const char *name) {
  json_t *t = n->tenants ? json_object_get(n->tenants, name) : NULL;
  if (t == NULL) return 0;
  int64_t now = mono_ms();
  double cur, prev;
  cpu_buckets(t, now, &cur, &prev);
  double left = (double)(CPU_WINDOW_MS - now % CPU_WINDOW_MS) / CPU_WINDOW_MS;
  return cur + prev * left;
}

void node_stats_add(node *n, node_proc *p, json_t *body) {
  json_t *process = json_object_get(body, "process");
  if (json_is_object(process)) {
    json_decref(p->process_stats);
    p->process_stats = json_incref(process);
  }
  int proc_id = p->id;
  const char *name;
  json_t *delta;
  char slot[16];
  snprintf(slot, sizeof slot, "%d", proc_id);
  json_object_foreach(json_object_get(body, "tenants"), name, delta) {
    if (!worker_name_valid(name, strlen(name)) || !json_is_object(delta)) continue;
    /* A dedicated process hosts one tenant: what it says of others is not
     * believed (it may be that tenant's code speaking). */
    if (p->tenant != NULL && strcmp(name, p->tenant) != 0) continue;
    json_t *t = tenant_entry(n, name);
    for (size_t i = 0; i < NODE_STATS_N_COUNTERS; i++)
      add_counter(t, node_stats_counters[i], json_object_get(delta, node_stats_counters[i]));
    for (size_t i = 0; i < NODE_STATS_N_SUMS; i++) add_sum(t, node_stats_sums[i], json_object_get(delta, node_stats_sums[i]));
    cpu_add(t, json_number_value(json_object_get(delta, "cpu_ms")));
    json_int_t peak = json_integer_value(json_object_get(delta, "heap_peak"));
    if (peak > json_integer_value(json_object_get(t, "heap_peak")))
      json_object_set_new(t, "heap_peak", json_integer(peak));
    json_object_set_new(json_object_get(t, "procs"), slot,
                        json_pack("{s:O?, s:O?}", "heap_used", json_object_get(delta, "heap_used"),
                                  "loaded", json_object_get(delta, "loaded")));
    json_object_set_new(t, "last_request_at", json_integer(time_now_ms()));
  }
}

void node_stats_proc_gone(node *n, node_proc *p) {
  int proc_id = p->id;
  json_decref(p->process_stats);
  p->process_stats = NULL;
  p->mpk_enabled = 0;
  p->mpk_keys = 0;
  char slot[16];
  snprintf(slot, sizeof slot, "%d", proc_id);
  const char *name;
  json_t *t;
  json_object_foreach(n->tenants, name, t) json_object_del(json_object_get(t, "procs"), slot);
}

void node_stats_free(node *n) {
  json_decref(n->tenants);
  n->tenants = NULL;
}

