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

/* ---- node-wide counts ---------------------------------------------------------------- */

static const char *const cold_kinds[] = {"worker", "loader", "run", NULL};
static const char *const loader_outcomes[] = {"ok",  "exception", "start_error", "cpu",
                                              "memory", "wall",   NULL};
static const char *const run_outcomes[] = {"ok",   "bad_request", "rejected",  "exception",
                                           "cpu",  "memory",      "wall",      "too_large",
                                           "unavailable", "error", NULL};
const node_stats_group node_stats_groups[3] = {
    {"cold_starts", cold_kinds},
    {"loader_requests", loader_outcomes},
    {"runs", run_outcomes},
};

static json_t *counts_of(node *n) {
  if (n->counts == NULL) n->counts = json_object();
  return n->counts;
}

static void count_add(node *n, const char *group, const char *key, json_int_t delta) {
  if (delta <= 0) return;
  json_t *g = json_object_get(counts_of(n), group);
  if (g == NULL) {
    g = json_object();
    json_object_set_new(n->counts, group, g);
  }
  json_object_set_new(g, key, json_integer(json_integer_value(json_object_get(g, key)) + delta));
}

uint64_t node_stats_count(const node *n, const char *group, const char *key) {
  json_t *g = n->counts ? json_object_get(n->counts, group) : NULL;
  return (uint64_t)json_integer_value(json_object_get(g, key));
}

/* The groups of a report's "counts", their known keys only. */
static void add_counts(node *n, json_t *counts) {
  for (size_t i = 0; i < ARRAY_SIZE(node_stats_groups); i++) {
    json_t *g = json_object_get(counts, node_stats_groups[i].name);
    for (const char *const *k = node_stats_groups[i].keys; *k; k++)
      count_add(n, node_stats_groups[i].name, *k, json_integer_value(json_object_get(g, *k)));
  }
}

static const char *run_outcome(int status, json_t *body) {
  const char *kind = json_string_value(json_object_get(body, "kind"));
  if (status >= 200 && status < 300) return "ok";
  if (kind) {
    static const char *const limits[] = {"cpu", "memory", "wall", "too_large"};
    for (size_t i = 0; i < ARRAY_SIZE(limits); i++)
      if (strcmp(kind, limits[i]) == 0) return limits[i];
    if (status == 400) return "rejected"; /* its code: syntax, link, no handler, top level */
    if (strcmp(kind, "exception") == 0) return "exception";
  }
  if (status == 503 || status == 504) return "unavailable";
  if (status >= 400 && status < 500) return "bad_request";
  return "error";
}

void node_stats_count_run(node *n, int status, json_t *body) {
  count_add(n, "runs", run_outcome(status, body), 1);
}

/* Adds the integers of delta (an array of `len`) to t[key], made on first use. */
static void add_array(json_t *t, const char *key, json_t *delta, size_t len) {
  if (!json_is_array(delta) || json_array_size(delta) != len) return;
  json_t *sum = json_object_get(t, key);
  if (sum == NULL) {
    sum = json_array();
    for (size_t i = 0; i < len; i++) json_array_append_new(sum, json_integer(0));
    json_object_set_new(t, key, sum);
  }
  for (size_t i = 0; i < len; i++) {
    json_int_t d = json_integer_value(json_array_get(delta, i));
    if (d > 0)
      json_array_set_new(sum, i, json_integer(json_integer_value(json_array_get(sum, i)) + d));
  }
}

/*
 * A tenant's request durations go to its own histogram while fewer than
 * metrics_max_tenants tenants have one, else to "other"'s; decided once, at
 * its first timed request since the supervisor started, so that no series
 * ever moves from one to the other (a counter that dropped would read as a
 * reset).
 */
static void add_durations(node *n, const char *name, json_t *t, json_t *delta) {
  json_t *d = json_object_get(delta, "durations");
  if (!json_is_array(d)) return;
  json_t *own = json_object_get(t, "histogram_own");
  if (own == NULL) {
    json_int_t owned = json_integer_value(json_object_get(counts_of(n), "histograms_own"));
    int yes = strcmp(name, NODE_STATS_OTHER) != 0 && owned < n->cfg.metrics_max_tenants;
    if (yes) json_object_set_new(n->counts, "histograms_own", json_integer(owned + 1));
    own = json_boolean(yes);
    json_object_set_new(t, "histogram_own", own);
  }
  if (json_is_true(own)) {
    add_array(t, "durations", d, PROTO_DURATION_BUCKETS + 1);
    return;
  }
  json_t *c = counts_of(n);
  add_array(c, "other_durations", d, PROTO_DURATION_BUCKETS + 1);
  add_sum(c, "other_wall_ms", json_object_get(delta, "wall_ms"));
}

void node_stats_add(node *n, node_proc *p, json_t *body) {
  json_t *process = json_object_get(body, "process");
  if (json_is_object(process)) {
    json_decref(p->process_stats);
    p->process_stats = json_incref(process);
  }
  add_counts(n, json_object_get(body, "counts"));
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
    add_array(t, "status_classes", json_object_get(delta, "status_classes"), 5);
    add_durations(n, name, t, delta);
    json_int_t peak = json_integer_value(json_object_get(delta, "heap_peak"));
    if (peak > json_integer_value(json_object_get(t, "heap_peak")))
      json_object_set_new(t, "heap_peak", json_integer(peak));
    json_object_set_new(json_object_get(t, "procs"), slot,
                        json_pack("{s:O?, s:O?}", "heap_used", json_object_get(delta, "heap_used"),
                                  "loaded", json_object_get(delta, "loaded")));
    json_object_set_new(t, "last_request_at", json_integer(time_now_ms()));
  }
}

/* Tenants are never dropped from n->tenants, so these sums only grow. */
void node_stats_totals(node *n, uint64_t *requests, double *cpu_ms) {
  *requests = 0;
  *cpu_ms = 0;
  const char *name;
  json_t *t;
  json_object_foreach(n->tenants, name, t) {
    *requests += (uint64_t)json_integer_value(json_object_get(t, "requests"));
    *cpu_ms += json_number_value(json_object_get(t, "cpu_ms"));
  }
}

static int64_t live_requests(const node_proc *p) {
  return json_integer_value(json_object_get(p->process_stats, "requests_live"));
}

int64_t node_stats_in_flight(node *n) {
  int64_t live = 0;
  for (int i = 0; i < n->n_procs; i++) live += live_requests(&n->procs[i]);
  /* (The list itself, not procs.c's walk: procs.c calls into this file.) */
  for (const node_proc *p = n->dedicated; p; p = p->next) live += live_requests(p);
  return live;
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
  json_decref(n->counts);
  n->counts = NULL;
}

