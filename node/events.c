/*
 * The node's history: deploys, deletes, worker process crashes and restarts,
 * memory-budget kills, drains, reloads (and cordons once the monitor lands).
 *
 * The last NODE_EVENTS_MAX events are kept twice: in memory, oldest first, for
 * GET /v1/events, and in the table `events` of node.db so that the history
 * survives a restart. The table has a connection of its own (like the egress
 * rules), so registry.c stays about workers; WAL lets both write the file.
 */
#include <errno.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "node.h"

#define EVENTS_DEFAULT_LIMIT 100

struct node_events {
  sqlite3 *db;        /* NULL when node.db could not be opened: memory only */
  json_t *ring[NODE_EVENTS_MAX]; /* oldest first from `first` */
  size_t first;
  size_t count;
  int64_t last_id;
  int warned;         /* one warning per run for failed writes */
};

static const char schema[] =
    "CREATE TABLE IF NOT EXISTS events ("
    "  id INTEGER PRIMARY KEY,"
    "  time INTEGER NOT NULL,"   /* milliseconds since the epoch */
    "  kind TEXT NOT NULL,"
    "  tenant TEXT,"
    "  details TEXT NOT NULL);";

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
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(ev->db,
                         "SELECT id, time, kind, tenant, details FROM "
                         "(SELECT * FROM events ORDER BY id DESC LIMIT ?) ORDER BY id",
                         -1, &st, NULL) != SQLITE_OK)
    return -EIO;
  sqlite3_bind_int(st, 1, NODE_EVENTS_MAX);
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    int64_t id = sqlite3_column_int64(st, 0);
    const char *kind = (const char *)sqlite3_column_text(st, 2);
    const char *tenant = (const char *)sqlite3_column_text(st, 3);
    const char *text = (const char *)sqlite3_column_text(st, 4);
    json_t *details = text ? json_loads(text, 0, NULL) : NULL;
    ring_push(ev, event_json(id, sqlite3_column_int64(st, 1), kind ? kind : "unknown", tenant,
                             details));
    json_decref(details);
    ev->last_id = id;
  }
  sqlite3_finalize(st);
  return rc == SQLITE_DONE ? 0 : -EIO;
}

int node_events_open(node *n, char **err) {
  struct node_events *ev = xcalloc(1, sizeof *ev);
  n->events = ev;
  char *path = xasprintf("%s/node.db", n->data_dir);
  int rc = sqlite3_open_v2(path, &ev->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
  if (rc == SQLITE_OK) {
    sqlite3_busy_timeout(ev->db, 2000);
    /* History is worth less than a deploy: NORMAL skips the fsync per event
     * (WAL still keeps the file consistent). */
    if (sqlite3_exec(ev->db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;", NULL, NULL,
                     NULL) != SQLITE_OK ||
        sqlite3_exec(ev->db, schema, NULL, NULL, NULL) != SQLITE_OK || load(ev) != 0)
      rc = SQLITE_ERROR;
  }
  if (rc != SQLITE_OK) {
    *err = xasprintf("%s: events: %s", path, ev->db ? sqlite3_errmsg(ev->db) : sqlite3_errstr(rc));
    free(path);
    node_events_close(n);
    return -EIO;
  }
  free(path);
  return 0;
}

void node_events_close(node *n) {
  struct node_events *ev = n->events;
  if (ev == NULL) return;
  for (size_t i = 0; i < ev->count; i++) json_decref(ev->ring[(ev->first + i) % NODE_EVENTS_MAX]);
  sqlite3_close(ev->db);
  free(ev);
  n->events = NULL;
}

/* Inserts the row and drops the ones past the bound. Returns the id or -1. */
static int64_t persist(struct node_events *ev, int64_t time_ms, const char *kind,
                       const char *tenant, const char *details) {
  if (ev->db == NULL) return -1;
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(ev->db, "INSERT INTO events (time, kind, tenant, details) VALUES (?, ?, ?, ?)",
                         -1, &st, NULL) != SQLITE_OK)
    return -1;
  sqlite3_bind_int64(st, 1, time_ms);
  sqlite3_bind_text(st, 2, kind, -1, SQLITE_STATIC);
  if (tenant) sqlite3_bind_text(st, 3, tenant, -1, SQLITE_STATIC);
  else sqlite3_bind_null(st, 3);
  sqlite3_bind_text(st, 4, details, -1, SQLITE_STATIC);
  int rc = sqlite3_step(st);
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE) return -1;
  int64_t id = sqlite3_last_insert_rowid(ev->db);
  if (id > NODE_EVENTS_MAX && id % 64 == 0) { /* prune now and then, not on every insert */
    char sql[96];
    snprintf(sql, sizeof sql, "DELETE FROM events WHERE id <= %lld",
             (long long)(id - NODE_EVENTS_MAX));
    sqlite3_exec(ev->db, sql, NULL, NULL, NULL); /* a failure only leaves old rows */
  }
  return id;
}

void node_event(node *n, const char *kind, const char *tenant, json_t *details) {
  struct node_events *ev = n->events;
  if (ev == NULL) return; /* before startup opened it, or after shutdown */
  int64_t now = time_now_ms();
  char *text = json_is_object(details) ? json_dumps(details, JSON_COMPACT) : xstrdup("{}");
  if (text == NULL) abort();
  int64_t id = persist(ev, now, kind, tenant, text);
  free(text);
  if (id < 0) {
    if (!ev->warned && ev->db)
      log_warn("could not record an event in node.db: %s (kept in memory)", sqlite3_errmsg(ev->db));
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
