/*
 * The routes GET /v1/tenants and /v1/tenants/{name}: every deployed tenant
 * with where it runs (cordons.c), its statistics (stats.c) and its limits
 * (node.db).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "node.h"

/* The shown form: where it runs, totals, heap summed over processes, where it is loaded. */
static json_t *tenant_view(node *n, const char *name, json_t *t) {
  json_t *out = json_pack("{s:s, s:s}", "name", name, "state", "active");
  json_t *cordon = node_cordon_view(n, name);
  if (cordon) {
    json_object_update(out, cordon); /* state, reason, rule, since, by, dedicated */
    json_decref(cordon);
  }
  json_int_t heap = 0;
  json_t *loaded_in = json_array();
  if (t) {
    for (size_t i = 0; i < NODE_STATS_N_COUNTERS; i++)
      json_object_set(out, node_stats_counters[i], json_object_get(t, node_stats_counters[i]));
    for (size_t i = 0; i < NODE_STATS_N_SUMS; i++)
      json_object_set(out, node_stats_sums[i], json_object_get(t, node_stats_sums[i]));
    const char *slot;
    json_t *g;
    json_object_foreach(json_object_get(t, "procs"), slot, g) {
      heap += json_integer_value(json_object_get(g, "heap_used"));
      if (json_is_true(json_object_get(g, "loaded"))) json_array_append_new(loaded_in, json_integer(atoi(slot)));
    }
    json_object_set(out, "heap_peak", json_object_get(t, "heap_peak"));
    json_int_t last = json_integer_value(json_object_get(t, "last_request_at"));
    if (last) {
      char when[32];
      node_iso8601(last, when);
      json_object_set_new(out, "last_report_at", json_string(when));
    }
  } else {
    for (size_t i = 0; i < NODE_STATS_N_COUNTERS; i++) json_object_set_new(out, node_stats_counters[i], json_integer(0));
    for (size_t i = 0; i < NODE_STATS_N_SUMS; i++) json_object_set_new(out, node_stats_sums[i], json_real(0));
    json_object_set_new(out, "heap_peak", json_integer(0));
  }
  json_object_set_new(out, "heap_used", json_integer(heap));
  json_object_set_new(out, "loaded_in", loaded_in);
  return out;
}

static void list_tenants(node *n, http_request *req) {
  json_t *rows = NULL;
  if (node_db_worker_list(n->db, &rows) != 0) {
    node_respond_error(req, 500, "registry unavailable");
    return;
  }
  json_t *list = json_array();
  size_t i;
  json_t *row;
  json_array_foreach(rows, i, row) {
    const char *name = json_string_value(json_object_get(row, "name"));
    json_array_append_new(list, tenant_view(n, name, json_object_get(n->tenants, name)));
  }
  json_decref(rows);
  json_t *body = json_pack("{s:o}", "tenants", list);
  node_respond_json(req, 200, body, NULL);
  json_decref(body);
}

static void show_tenant(node *n, http_request *req, const char *name) {
  json_t *row = NULL;
  json_t *stats = json_object_get(n->tenants, name);
  if (node_db_worker_get(n->db, name, &row) != 0 && stats == NULL &&
      strcmp(node_cordon_state(n, name), "active") == 0) {
    json_t *body = json_pack("{s:s, s:s}", "error", "unknown tenant", "name", name);
    node_respond_json(req, 404, body, NULL);
    json_decref(body);
    return;
  }
  json_t *view = tenant_view(n, name, stats);
  json_object_set_new(view, "deployed", json_boolean(row != NULL));
  if (row) json_object_set(view, "limits", json_object_get(row, "limits"));
  json_decref(row);
  node_respond_json(req, 200, view, NULL);
  json_decref(view);
}

int node_tenants_route(node *n, http_request *req, const char *path) {
  static const char prefix[] = "/v1/tenants/";
  if (strcmp(path, "/v1/tenants") == 0) {
    if (strcmp(req->method, "GET") != 0) node_respond_method(req, "GET");
    else list_tenants(n, req);
    return 1;
  }
  if (strncmp(path, prefix, sizeof prefix - 1) != 0) return 0;
  const char *name = path + sizeof prefix - 1;
  if (strchr(name, '/') != NULL) return 0; /* a sub-route: cordon, uncordon */
  if (strcmp(req->method, "GET") != 0) node_respond_method(req, "GET");
  else if (!worker_name_valid(name, strlen(name))) node_respond_invalid_name(req, name);
  else show_tenant(n, req, name);
  return 1;
}
