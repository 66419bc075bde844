/*
 * GET /metrics: the node in Prometheus' text exposition format 0.0.4.
 *
 * Everything comes from what the supervisor already holds: per-tenant
 * statistics (stats.c, from the worker processes' PROTO_STATS), the process
 * slots (procs.c) and their last process report, and /proc for resident
 * memory. Nothing is computed per scrape beyond formatting, so a scrape costs
 * about what GET /v1/tenants does.
 *
 * Conventions: base units (seconds, bytes), counters end in _total, one
 * family's HELP and TYPE precede all of its samples, label values escaped.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "node.h"

#define CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/* ---- formatting ----------------------------------------------------------------------- */

/* A label value with \, " and newline escaped. */
static void put_label_value(FILE *f, const char *s) {
  for (; *s; s++) {
    if (*s == '\\') fputs("\\\\", f);
    else if (*s == '"') fputs("\\\"", f);
    else if (*s == '\n') fputs("\\n", f);
    else fputc(*s, f);
  }
}

static void family(FILE *f, const char *name, const char *type, const char *help) {
  fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* Floats with enough digits that rate() over a large counter stays exact. */
static void put_value(FILE *f, double v) { fprintf(f, " %.15g\n", v); }

static void sample(FILE *f, const char *name, const char *label, const char *value, double v) {
  fputs(name, f);
  if (label) {
    fprintf(f, "{%s=\"", label);
    put_label_value(f, value);
    fputs("\"}", f);
  }
  put_value(f, v);
}

/* ---- the node ------------------------------------------------------------------------- */

static void node_metrics(FILE *f, node *n) {
  family(f, "edgenode_build_info", "gauge", "Version of edgenode and of the V8 its workers run.");
  fputs("edgenode_build_info{version=\"", f);
  put_label_value(f, EDGENODE_VERSION);
  fputs("\",v8=\"", f);
  put_label_value(f, n->v8_version ? n->v8_version : "");
  fputs("\"} 1\n", f);

  family(f, "edgenode_uptime_seconds", "gauge", "Seconds since the supervisor started.");
  sample(f, "edgenode_uptime_seconds", NULL, NULL, (double)(time_mono_ns() - n->started_mono_ns) / 1e9);
  family(f, "edgenode_start_time_seconds", "gauge",
         "When the supervisor started, in seconds since the Unix epoch.");
  sample(f, "edgenode_start_time_seconds", NULL, NULL, (double)n->started_at_ms / 1e3);

  family(f, "edgenode_node_state", "gauge", "1 for the node's state: serving, draining or drained.");
  static const char *const states[] = {"serving", "draining", "drained"};
  const char *now = node_state_name(n);
  for (size_t i = 0; i < ARRAY_SIZE(states); i++)
    sample(f, "edgenode_node_state", "state", states[i], strcmp(now, states[i]) == 0);

  family(f, "edgenode_mpk_enabled", "gauge",
         "1 when isolates' heaps are protected by memory protection keys.");
  sample(f, "edgenode_mpk_enabled", NULL, NULL, node_mpk_enabled(n));

  family(f, "edgenode_sandbox_layer", "gauge",
         "1 when every ready worker process has this sandbox layer on (jail/).");
  const char *layer;
  int on;
  for (int i = 0; (layer = node_sandbox_layer(n, i, &on)) != NULL; i++)
    sample(f, "edgenode_sandbox_layer", "layer", layer, on);

  node_dedicated_counts d = node_cordons_counts(n);
  family(f, "edgenode_dedicated_processes", "gauge",
         "Dedicated worker processes of cordoned tenants (what max_dedicated bounds).");
  sample(f, "edgenode_dedicated_processes", NULL, NULL, d.running);
  family(f, "edgenode_dedicated_max", "gauge", "The cap on dedicated processes (max_dedicated).");
  sample(f, "edgenode_dedicated_max", NULL, NULL, d.max);
  family(f, "edgenode_dedicated_suspensions_total", "counter",
         "Tenants suspended because one more dedicated process would pass the cap.");
  sample(f, "edgenode_dedicated_suspensions_total", NULL, NULL, (double)d.suspensions);
  family(f, "edgenode_dedicated_idle_exits_total", "counter",
         "Dedicated processes that exited after dedicated_idle_s without a request.");
  sample(f, "edgenode_dedicated_idle_exits_total", NULL, NULL, (double)d.idle_exits);

  family(f, "edgenode_workers_configured", "gauge", "Worker processes the configuration asks for.");
  sample(f, "edgenode_workers_configured", NULL, NULL, n->cfg.workers);
  family(f, "edgenode_worker_memory_budget_bytes", "gauge",
         "Resident memory a worker process may use before it is restarted.");
  sample(f, "edgenode_worker_memory_budget_bytes", NULL, NULL, (double)node_worker_memory_budget(n));
}

/* ---- worker processes ------------------------------------------------------------------ */

/* Resident bytes of `pid`, or -1 when unknown. */
static double rss_bytes(int pid) {
  uint64_t rss = process_rss_bytes(pid);
  return rss > 0 ? (double)rss : -1;
}

typedef enum { PROC_UP, PROC_ISOLATES, PROC_COLD, PROC_EVICTIONS, PROC_RESTARTS, PROC_RSS } proc_metric;

static double proc_value(const node_proc *p, proc_metric m) {
  switch (m) {
    case PROC_UP: return p->child.state == NODE_PROC_READY;
    case PROC_ISOLATES:
      return (double)json_integer_value(json_object_get(p->process_stats, "isolates"));
    case PROC_COLD: return (double)p->cold_starts_total;
    case PROC_EVICTIONS: return (double)p->evictions_total;
    case PROC_RESTARTS: return p->child.restarts;
    case PROC_RSS: return p->child.alive && p->child.pid > 0 ? rss_bytes(p->child.pid) : 0;
  }
  return 0;
}

static void proc_metrics(FILE *f, node *n) {
  static const struct {
    const char *name, *type, *help;
    proc_metric m;
  } defs[] = {
      {"edgenode_worker_up", "gauge", "1 when the worker process in this slot is serving.", PROC_UP},
      {"edgenode_worker_isolates", "gauge", "Isolates resident in the worker process.", PROC_ISOLATES},
      {"edgenode_worker_cold_starts_total", "counter", "Isolates created in this slot's processes.",
       PROC_COLD},
      {"edgenode_worker_evictions_total", "counter", "Isolates evicted in this slot's processes.",
       PROC_EVICTIONS},
      {"edgenode_worker_restarts_total", "counter",
       "Times the slot's process exited unexpectedly and was restarted.", PROC_RESTARTS},
      {"edgenode_worker_resident_memory_bytes", "gauge", "Resident memory of the worker process.",
       PROC_RSS},
  };
  for (size_t d = 0; d < ARRAY_SIZE(defs); d++) {
    family(f, defs[d].name, defs[d].type, defs[d].help);
    for (int i = 0; i < n->n_procs; i++) {
      const node_proc *p = &n->procs[i];
      double v = proc_value(p, defs[d].m);
      if (v < 0) continue; /* unknown now: leave the sample out rather than lie */
      char slot[16];
      snprintf(slot, sizeof slot, "%d", p->id);
      sample(f, defs[d].name, "worker", slot, v);
    }
  }
}

/* ---- connections: both listeners' caps and what they refused -------------------------- */

static const char *const refusals[] = {"cap", "addr", "fd"};

static double report_value(json_t *report, const char *key) {
  return (double)json_integer_value(json_object_get(report, key));
}

static void refused_samples(FILE *f, const char *name, const char *slot, json_t *report) {
  for (size_t i = 0; i < ARRAY_SIZE(refusals); i++) {
    char key[32];
    snprintf(key, sizeof key, "refused_%s", refusals[i]);
    fprintf(f, "%s{", name);
    if (slot) fprintf(f, "worker=\"%s\",", slot);
    fprintf(f, "reason=\"%s\"}", refusals[i]);
    put_value(f, report_value(report, key));
  }
}

static void control_connection_metrics(FILE *f, node *n) {
  json_t *r = http_server_report(&n->control);
  family(f, "edgenode_descriptors_limit", "gauge",
         "RLIMIT_NOFILE of the supervisor, after raising it to the hard limit.");
  sample(f, "edgenode_descriptors_limit", NULL, NULL, (double)n->nofile);
  family(f, "edgenode_control_connections", "gauge", "Open control API connections.");
  sample(f, "edgenode_control_connections", NULL, NULL, report_value(r, "connections"));
  family(f, "edgenode_control_connections_limit", "gauge",
         "Control API connections allowed at once (configured, within RLIMIT_NOFILE less a reserve).");
  sample(f, "edgenode_control_connections_limit", NULL, NULL, report_value(r, "max_connections"));
  family(f, "edgenode_control_connections_per_addr_limit", "gauge",
         "Control API connections allowed from one address (0: no cap).");
  sample(f, "edgenode_control_connections_per_addr_limit", NULL, NULL,
         report_value(r, "max_connections_per_addr"));
  family(f, "edgenode_control_connections_refused_total", "counter",
         "Control API connections closed at accept: cap, addr (per-address cap) or fd (no descriptor).");
  refused_samples(f, "edgenode_control_connections_refused_total", NULL, r);
  family(f, "edgenode_control_body_timeouts_total", "counter",
         "Control API requests answered 408 for a body below the minimum rate.");
  sample(f, "edgenode_control_body_timeouts_total", NULL, NULL, report_value(r, "body_timeouts"));
  json_decref(r);
}

/* Per worker process, from its last report; the counters start again with
 * each new process. */
static void ingress_connection_metrics(FILE *f, node *n) {
  static const struct {
    const char *name, *type, *help, *key;
  } defs[] = {
      {"edgenode_worker_connections", "gauge", "Open ingress connections of the worker process.",
       "connections"},
      {"edgenode_worker_connections_limit", "gauge",
       "Ingress connections the worker process allows at once (within its RLIMIT_NOFILE).",
       "max_connections"},
      {"edgenode_worker_connections_per_addr_limit", "gauge",
       "Ingress connections the worker process allows from one address (0: no cap).",
       "max_connections_per_addr"},
      {"edgenode_worker_body_timeouts_total", "counter",
       "Ingress requests answered 408 for a body below the minimum rate.", "body_timeouts"},
  };
  for (size_t d = 0; d <= ARRAY_SIZE(defs); d++) {
    const char *name = d < ARRAY_SIZE(defs) ? defs[d].name : "edgenode_worker_connections_refused_total";
    if (d < ARRAY_SIZE(defs))
      family(f, name, defs[d].type, defs[d].help);
    else
      family(f, name, "counter",
             "Ingress connections closed at accept: cap, addr (per-address cap) or fd (no descriptor).");
    for (int i = 0; i < n->n_procs; i++) {
      json_t *r = json_object_get(n->procs[i].process_stats, "ingress");
      if (!json_is_object(r)) continue;
      char slot[16];
      snprintf(slot, sizeof slot, "%d", n->procs[i].id);
      if (d < ARRAY_SIZE(defs)) sample(f, name, "worker", slot, report_value(r, defs[d].key));
      else refused_samples(f, name, slot, r);
    }
  }
}

/* ---- node-wide counts: cold starts, loader children's requests, runs ------------------- */

static void counts_metrics(FILE *f, node *n) {
  static const struct {
    const char *metric, *label, *help;
  } defs[ARRAY_SIZE(node_stats_groups)] = {
      {"edgenode_cold_starts_total", "kind",
       "Isolates created, by kind: worker (a deployed version), loader (a load() or get() "
       "child), run (a /v1/run sandbox)."},
      {"edgenode_loader_requests_total", "outcome",
       "Requests to loader children (load() and get()), by how they ended."},
      {"edgenode_run_requests_total", "outcome", "POST /v1/run answers, by outcome."},
  };
  for (size_t i = 0; i < ARRAY_SIZE(node_stats_groups); i++) {
    family(f, defs[i].metric, "counter", defs[i].help);
    for (const char *const *k = node_stats_groups[i].keys; *k; k++)
      sample(f, defs[i].metric, defs[i].label, *k,
             (double)node_stats_count(n, node_stats_groups[i].name, *k));
  }
}

/* ---- tenants -------------------------------------------------------------------------- */

/* Every tenant worth a series: the deployed ones and those with statistics
 * (deleted since the supervisor started), sorted by name. */
static json_t *tenant_names(node *n) {
  json_t *set = json_object();
  json_t *rows = NULL;
  if (node_db_worker_list(n->db, &rows) == 0) {
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row) {
      const char *name = json_string_value(json_object_get(row, "name"));
      if (name) json_object_set_new(set, name, json_null());
    }
    json_decref(rows);
  }
  const char *name;
  json_t *t;
  json_object_foreach(n->tenants, name, t) json_object_set_new(set, name, json_null());
  return set;
}

static int compare_names(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static double heap_used(json_t *t) {
  double sum = 0;
  const char *slot;
  json_t *g;
  json_object_foreach(json_object_get(t, "procs"), slot, g)
    sum += (double)json_integer_value(json_object_get(g, "heap_used"));
  return sum;
}


/* Responses of every tenant, by status class. */
static void status_class_metrics(FILE *f, node *n) {
  static const char *const classes[] = {"1xx", "2xx", "3xx", "4xx", "5xx"};
  double sums[ARRAY_SIZE(classes)] = {0};
  const char *name;
  json_t *t;
  json_object_foreach(n->tenants, name, t) {
    json_t *a = json_object_get(t, "status_classes");
    for (size_t i = 0; i < ARRAY_SIZE(classes); i++)
      sums[i] += (double)json_integer_value(json_array_get(a, i));
  }
  family(f, "edgenode_responses_total", "counter",
         "Responses to ingress requests, every tenant's, by status class.");
  for (size_t i = 0; i < ARRAY_SIZE(classes); i++)
    sample(f, "edgenode_responses_total", "class", classes[i], sums[i]);
}

static void histogram(FILE *f, const char *tenant, json_t *buckets, double wall_ms) {
  static const uint64_t bounds_ms[PROTO_DURATION_BUCKETS] = PROTO_DURATION_BUCKETS_MS;
  static const char metric[] = "edgenode_tenant_request_duration_seconds";
  double cumulative = 0;
  for (size_t b = 0; b <= PROTO_DURATION_BUCKETS; b++) {
    cumulative += (double)json_integer_value(json_array_get(buckets, b));
    fprintf(f, "%s_bucket{tenant=\"", metric);
    put_label_value(f, tenant);
    if (b < PROTO_DURATION_BUCKETS) fprintf(f, "\",le=\"%g\"}", (double)bounds_ms[b] / 1e3);
    else fputs("\",le=\"+Inf\"}", f);
    put_value(f, cumulative);
  }
  fprintf(f, "%s_sum{tenant=\"", metric);
  put_label_value(f, tenant);
  fputs("\"}", f);
  put_value(f, wall_ms / 1e3);
  fprintf(f, "%s_count{tenant=\"", metric);
  put_label_value(f, tenant);
  fputs("\"}", f);
  put_value(f, cumulative);
}

/* Own histograms for the first metrics_max_tenants tenants timed, one
 * "other" for the rest (stats.c decides which). */
static void duration_metrics(FILE *f, node *n, const char **names, size_t count) {
  family(f, "edgenode_tenant_request_duration_seconds", "histogram",
         "Time from complete request to response, per tenant (past metrics_max_tenants: "
         "tenant=\"other\").");
  for (size_t i = 0; i < count; i++) {
    json_t *t = json_object_get(n->tenants, names[i]);
    if (!json_is_true(json_object_get(t, "histogram_own"))) continue;
    histogram(f, names[i], json_object_get(t, "durations"),
              json_number_value(json_object_get(t, "wall_ms")));
  }
  json_t *other = json_object_get(n->counts, "other_durations");
  if (other)
    histogram(f, NODE_STATS_OTHER, other,
              json_number_value(json_object_get(n->counts, "other_wall_ms")));
}

static void tenant_metrics(FILE *f, node *n) {
  json_t *set = tenant_names(n);
  size_t count = json_object_size(set);
  const char **names = xcalloc(count ? count : 1, sizeof *names);
  size_t k = 0;
  const char *name;
  json_t *unused;
  json_object_foreach(set, name, unused) names[k++] = name;
  qsort(names, count, sizeof *names, compare_names);

  static const struct {
    const char *metric, *key, *type, *help;
    double scale;
  } plain[] = {
      {"edgenode_tenant_requests_total", "requests", "counter", "Requests answered.", 1},
      {"edgenode_tenant_errors_total", "errors", "counter",
       "Responses with a status of 500 or more.", 1},
      {"edgenode_tenant_cpu_seconds_total", "cpu_ms", "counter",
       "CPU time of the tenant's JavaScript.", 1e-3},
      {"edgenode_tenant_wall_seconds_total", "wall_ms", "counter",
       "Time from complete request to response, summed.", 1e-3},
      {"edgenode_tenant_cold_starts_total", "cold_starts", "counter",
       "Isolates created for the tenant.", 1},
      {"edgenode_tenant_heap_peak_bytes", "heap_peak", "gauge",
       "Largest heap of one of the tenant's isolates seen in a report.", 1},
  };
  for (size_t d = 0; d < ARRAY_SIZE(plain); d++) {
    family(f, plain[d].metric, plain[d].type, plain[d].help);
    for (size_t i = 0; i < count; i++) {
      json_t *v = json_object_get(json_object_get(n->tenants, names[i]), plain[d].key);
      sample(f, plain[d].metric, "tenant", names[i], json_number_value(v) * plain[d].scale);
    }
  }

  static const char *const kinds[] = {"cpu", "memory", "wall"};
  family(f, "edgenode_tenant_limit_hits_total", "counter", "Requests ended by a limit, by kind.");
  for (size_t i = 0; i < count; i++) {
    json_t *t = json_object_get(n->tenants, names[i]);
    for (size_t j = 0; j < ARRAY_SIZE(kinds); j++) {
      char key[32];
      snprintf(key, sizeof key, "%s_limit_hits", kinds[j]);
      fputs("edgenode_tenant_limit_hits_total{tenant=\"", f);
      put_label_value(f, names[i]);
      fprintf(f, "\",kind=\"%s\"}", kinds[j]);
      put_value(f, (double)json_integer_value(json_object_get(t, key)));
    }
  }

  family(f, "edgenode_tenant_heap_bytes", "gauge",
         "Heap of the tenant's isolates now, over all worker processes.");
  for (size_t i = 0; i < count; i++)
    sample(f, "edgenode_tenant_heap_bytes", "tenant", names[i],
           heap_used(json_object_get(n->tenants, names[i])));

  family(f, "edgenode_tenant_cordoned", "gauge",
         "1 when the tenant is cordoned: out of the shared worker processes (dedicated or suspended).");
  for (size_t i = 0; i < count; i++)
    sample(f, "edgenode_tenant_cordoned", "tenant", names[i],
           strcmp(node_cordon_state(n, names[i]), "active") != 0);
  family(f, "edgenode_tenant_suspended", "gauge",
         "1 when the tenant is suspended (its dedicated process kept crashing, or past "
         "max_dedicated): answered 503.");
  for (size_t i = 0; i < count; i++)
    sample(f, "edgenode_tenant_suspended", "tenant", names[i],
           strcmp(node_cordon_state(n, names[i]), "suspended") == 0);

  duration_metrics(f, n, names, count);
  free(names);
  json_decref(set);
}

/* Live logs (tail.c): sessions, and the lines slow readers lost. */
static void tail_metrics(FILE *f, node *n) {
  node_tail_counts t = node_tails_counts(n);
  family(f, "edgenode_tail_sessions", "gauge", "Live-log tails open (GET .../tail).");
  sample(f, "edgenode_tail_sessions", NULL, NULL, t.open);
  family(f, "edgenode_tail_sessions_opened_total", "counter", "Live-log tails opened.");
  sample(f, "edgenode_tail_sessions_opened_total", NULL, NULL, (double)t.opened);
  family(f, "edgenode_tail_dropped_lines_total", "counter",
         "Tail lines dropped because a reader (or the supervisor) fell behind.");
  sample(f, "edgenode_tail_dropped_lines_total", NULL, NULL, (double)t.dropped);
}

static void respond_metrics(node *n, http_request *req) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (f == NULL) abort(); /* only fails for want of memory */
  node_metrics(f, n);
  proc_metrics(f, n);
  control_connection_metrics(f, n);
  ingress_connection_metrics(f, n);
  counts_metrics(f, n);
  status_class_metrics(f, n);
  tenant_metrics(f, n);
  tail_metrics(f, n);
  node_fleet_metrics(n, f);
  if (fclose(f) != 0) abort();
  http_header headers[] = {
      {"Content-Type", CONTENT_TYPE},
      {"Cache-Control", "no-store"},
  };
  http_respond(req, 200, headers, ARRAY_SIZE(headers), text, len);
  free(text);
}

int node_metrics_route(node *n, http_request *req, const char *path) {
  if (strcmp(path, "/metrics") != 0) return 0;
  int head = strcmp(req->method, "HEAD") == 0;
  if (strcmp(req->method, "GET") != 0 && !head) node_respond_method(req, "GET, HEAD");
  else respond_metrics(n, req);
  return 1;
}
