/*
 * The node's history and its route GET /v1/events: deploys, deletes, worker
 * process crashes and restarts, memory-budget kills, drains, reloads,
 * cordons.
 *
 * The last NODE_EVENTS_MAX events are kept twice: in memory, oldest first, for
 * GET /v1/events, and in the table `events` of node.db (db.c) so that the
 * history survives a restart.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "node.h"

#define EVENTS_DEFAULT_LIMIT 100

struct node_events {
  node_db *db;        /* borrowed from the node */
  json_t *ring[NODE_EVENTS_MAX]; /* oldest first from `first` */
  size_t first;
  size_t count;
  int64_t last_id;
  int warned;         /* one warning per run for failed writes */
};

static void ring_push(struct node_events *ev, json_t *event) {
  if (ev->count == NODE_EVENTS_MAX) {
    json_decref(ev->ring[ev->first]);
    ev->ring[ev->first] = event;
    ev->first = (ev->first + 1) % NODE_EVENTS_MAX;
    return;
  }
  ev->ring[(ev->first + ev->count) % NODE_EVENTS_MAX] = event;
  ev->count++;
}

/* The shown form: {"id", "time", "kind", "tenant"?, "details"}. */
static json_t *event_json(int64_t id, int64_t time_ms, const char *kind, const char *tenant,
                          json_t *details) {
  char when[32];
  node_iso8601(time_ms, when);
  json_t *e = json_pack("{s:I, s:s, s:s}", "id", (json_int_t)id, "time", when, "kind", kind);
  if (e == NULL) abort(); /* only on a kind that is not UTF-8: a caller's bug */
  if (tenant) json_object_set_new(e, "tenant", json_string(tenant));
  /* A copy: the caller may go on changing its object. */
  json_object_set_new(e, "details", json_is_object(details) ? json_deep_copy(details) : json_object());
  return e;
}

static int load(struct node_events *ev) {
  json_t *rows = NULL;
  if (node_db_event_list(ev->db, NODE_EVENTS_MAX, &rows) != 0) return -EIO;
  size_t i;
  json_t *row;
  json_array_foreach(rows, i, row) {
    int64_t id = json_integer_value(json_object_get(row, "id"));
    ring_push(ev, event_json(id, json_integer_value(json_object_get(row, "time")),
                             json_string_value(json_object_get(row, "kind")),
                             json_string_value(json_object_get(row, "tenant")),
                             json_object_get(row, "details")));
    ev->last_id = id;
  }
  json_decref(rows);
  return 0;
}

int node_events_open(node *n, char **err) {
  struct node_events *ev = xcalloc(1, sizeof *ev);
  n->events = ev;
  ev->db = n->db;
  if (load(ev) != 0) {
    *err = xasprintf("%s/node.db: events: %s", n->data_dir, node_db_history_errmsg(n->db));
    node_events_close(n);
    return -EIO;
  }
  return 0;
}

void node_events_close(node *n) {
  struct node_events *ev = n->events;
  if (ev == NULL) return;
  for (size_t i = 0; i < ev->count; i++) json_decref(ev->ring[(ev->first + i) % NODE_EVENTS_MAX]);
  free(ev);
  n->events = NULL;
}

void node_event(node *n, const char *kind, const char *tenant, json_t *details) {
  struct node_events *ev = n->events;
  if (ev == NULL) return; /* before startup opened it, or after shutdown */
  int64_t now = time_now_ms();
  char *text = json_is_object(details) ? json_dumps(details, JSON_COMPACT) : xstrdup("{}");
  if (text == NULL) abort();
  int64_t id = node_db_event_add(ev->db, now, kind, tenant, text, NODE_EVENTS_MAX);
  free(text);
  if (id < 0) {
    if (!ev->warned)
      log_warn("could not record an event in node.db: %s (kept in memory)",
               node_db_history_errmsg(ev->db));
    ev->warned = 1;
    id = ev->last_id + 1;
  }
  ev->last_id = id;
  ring_push(ev, event_json(id, now, kind, tenant, details));
}

void node_event_new(node *n, const char *kind, const char *tenant, json_t *details) {
  node_event(n, kind, tenant, details);
  json_decref(details);
}

/* ---- GET /v1/events ---------------------------------------------------------------- */

static void list_events(node *n, http_request *req) {
  char limit_text[16], tenant[80], kind[40];
  long limit = EVENTS_DEFAULT_LIMIT;
  int given = node_query_param(req->target, "limit", limit_text, sizeof limit_text);
  if (given != 0) {
    char *end = NULL;
    limit = given < 0 ? 0 : strtol(limit_text, &end, 10);
    if (given < 0 || end == limit_text || *end != '\0' || limit < 1 || limit > NODE_EVENTS_MAX) {
      json_t *body = json_pack("{s:s, s:s, s:i, s:i}", "error",
                               "limit must be an integer between 1 and 1000", "key", "limit",
                               "min", 1, "max", NODE_EVENTS_MAX);
      node_respond_json(req, 400, body, NULL);
      json_decref(body);
      return;
    }
  }
  int by_tenant = node_query_param(req->target, "tenant", tenant, sizeof tenant);
  int by_kind = node_query_param(req->target, "kind", kind, sizeof kind);
  /* A filter that cannot be decoded, or is longer than any name, matches nothing. */
  int none = by_tenant < 0 || by_kind < 0;
  json_t *list = json_array();
  struct node_events *ev = n->events;
  for (size_t i = ev && !none ? ev->count : 0; i > 0 && (long)json_array_size(list) < limit; i--) {
    json_t *e = ev->ring[(ev->first + i - 1) % NODE_EVENTS_MAX];
    const char *t = json_string_value(json_object_get(e, "tenant"));
    if (by_tenant && (t == NULL || strcmp(t, tenant) != 0)) continue;
    if (by_kind && strcmp(json_string_value(json_object_get(e, "kind")), kind) != 0) continue;
    json_array_append(list, e);
  }
  json_t *body = json_pack("{s:o, s:i}", "events", list, "kept", NODE_EVENTS_MAX);
  node_respond_json(req, 200, body, NULL);
  json_decref(body);
}

int node_events_route(node *n, http_request *req, const char *path) {
  if (strcmp(path, "/v1/events") != 0) return 0;
  if (strcmp(req->method, "GET") != 0) node_respond_method(req, "GET");
  else list_events(n, req);
  return 1;
}
