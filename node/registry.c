/*
 * The registry of deployed workers: one SQLite database in the data
 * directory. Every change is one transaction, so a deploy replaces a worker
 * atomically and a crash leaves either the old or the new row.
 */
#include <errno.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

#include "node.h"

struct node_registry {
  sqlite3 *db;
  /* Why the last write failed: the ROLLBACK after it replaces SQLite's own
   * message (a full disk read "cannot rollback - no transaction is active"). */
  char failure[256];
};

static const char schema[] =
    "CREATE TABLE IF NOT EXISTS workers ("
    "  name TEXT PRIMARY KEY,"
    "  version INTEGER NOT NULL,"
    "  main_module TEXT NOT NULL,"
    "  modules TEXT NOT NULL,"
    "  bindings TEXT NOT NULL,"
    "  limits TEXT NOT NULL,"
    "  created_at INTEGER NOT NULL,"
    "  updated_at INTEGER NOT NULL);"
    /* The last version handed out per name, kept across deletes so that a
     * worker process can never mistake a redeploy for a version it cached. */
    "CREATE TABLE IF NOT EXISTS worker_versions ("
    "  name TEXT PRIMARY KEY,"
    "  last INTEGER NOT NULL);";

static int exec(node_registry *r, const char *sql) {
  return sqlite3_exec(r->db, sql, NULL, NULL, NULL) == SQLITE_OK ? 0 : -EIO;
}

int node_registry_open(const char *path, node_registry **out, char **err) {
  node_registry *r = xcalloc(1, sizeof *r);
  int rc = sqlite3_open_v2(path, &r->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
  if (rc != SQLITE_OK) {
    *err = xasprintf("%s: %s", path, r->db ? sqlite3_errmsg(r->db) : sqlite3_errstr(rc));
    goto fail;
  }
  sqlite3_busy_timeout(r->db, 5000);
  if (exec(r, "PRAGMA journal_mode=WAL;") != 0 || exec(r, "PRAGMA synchronous=FULL;") != 0 ||
      exec(r, schema) != 0) {
    *err = xasprintf("%s: %s", path, sqlite3_errmsg(r->db));
    goto fail;
  }
  *out = r;
  return 0;

fail:
  sqlite3_close(r->db);
  free(r);
  return -EIO;
}

void node_registry_close(node_registry *r) {
  if (r == NULL) return;
  sqlite3_close(r->db);
  free(r);
}

const char *node_registry_errmsg(node_registry *r) {
  return r->failure[0] ? r->failure : sqlite3_errmsg(r->db);
}

/* Ends a failed write, keeping what made it fail. */
static void rollback(node_registry *r) {
  snprintf(r->failure, sizeof r->failure, "%s", sqlite3_errmsg(r->db));
  if (sqlite3_get_autocommit(r->db) == 0 && sqlite3_exec(r->db, "ROLLBACK", NULL, NULL, NULL) != SQLITE_OK)
    log_warn("registry: could not roll back: %s", sqlite3_errmsg(r->db));
}

static int prepare(node_registry *r, const char *sql, sqlite3_stmt **st) {
  return sqlite3_prepare_v2(r->db, sql, -1, st, NULL) == SQLITE_OK ? 0 : -EIO;
}

static json_t *column_json(sqlite3_stmt *st, int col) {
  const unsigned char *text = sqlite3_column_text(st, col);
  int len = sqlite3_column_bytes(st, col);
  json_t *v = text ? json_loadb((const char *)text, (size_t)len, 0, NULL) : NULL;
  return v ? v : json_object(); /* a damaged column reads as empty */
}

#define ROW_COLUMNS "name, version, main_module, modules, bindings, limits, created_at, updated_at"

static json_t *read_row(sqlite3_stmt *st) {
  return json_pack("{s:s, s:I, s:s, s:o, s:o, s:o, s:I, s:I}",
                   "name", (const char *)sqlite3_column_text(st, 0),
                   "version", (json_int_t)sqlite3_column_int64(st, 1),
                   "main_module", (const char *)sqlite3_column_text(st, 2),
                   "modules", column_json(st, 3),
                   "bindings", column_json(st, 4),
                   "limits", column_json(st, 5),
                   "created_at", (json_int_t)sqlite3_column_int64(st, 6),
                   "updated_at", (json_int_t)sqlite3_column_int64(st, 7));
}

int node_registry_get(node_registry *r, const char *name, json_t **row) {
  r->failure[0] = '\0';
  sqlite3_stmt *st;
  if (prepare(r, "SELECT " ROW_COLUMNS " FROM workers WHERE name = ?1", &st) != 0) return -EIO;
  sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
  int rc = sqlite3_step(st);
  int result;
  if (rc == SQLITE_ROW) {
    *row = read_row(st);
    result = *row ? 0 : -EIO;
  } else {
    result = rc == SQLITE_DONE ? -ENOENT : -EIO;
  }
  sqlite3_finalize(st);
  return result;
}

int node_registry_list(node_registry *r, json_t **rows) {
  r->failure[0] = '\0';
  sqlite3_stmt *st;
  if (prepare(r, "SELECT " ROW_COLUMNS " FROM workers ORDER BY name", &st) != 0) return -EIO;
  json_t *arr = json_array();
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    json_t *row = read_row(st);
    if (row) json_array_append_new(arr, row);
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE) {
    json_decref(arr);
    return -EIO;
  }
  *rows = arr;
  return 0;
}

/* Runs a prepared statement that returns no rows and finalizes it. */
static int step_done(sqlite3_stmt *st) {
  int rc = sqlite3_step(st);
  sqlite3_finalize(st);
  return rc == SQLITE_DONE ? 0 : -EIO;
}

static int64_t next_version(node_registry *r, const char *name) {
  sqlite3_stmt *st;
  if (prepare(r,
              "INSERT INTO worker_versions(name, last) VALUES (?1, 1) "
              "ON CONFLICT(name) DO UPDATE SET last = last + 1 RETURNING last",
              &st) != 0)
    return -EIO;
  sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
  int64_t v = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int64(st, 0) : -EIO;
  sqlite3_finalize(st);
  return v;
}

/* 1 and *created when the row exists, 0 when it does not, or -EIO. */
static int existing_created_at(node_registry *r, const char *name, int64_t *created) {
  sqlite3_stmt *st;
  if (prepare(r, "SELECT created_at FROM workers WHERE name = ?1", &st) != 0) return -EIO;
  sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
  int rc = sqlite3_step(st);
  int result = rc == SQLITE_ROW ? 1 : rc == SQLITE_DONE ? 0 : -EIO;
  if (result == 1) *created = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  return result;
}

static int bind_json(sqlite3_stmt *st, int idx, json_t *v) {
  char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
  if (text == NULL) return -EINVAL;
  return sqlite3_bind_text(st, idx, text, -1, free) == SQLITE_OK ? 0 : -EIO;
}

static int write_row(node_registry *r, const char *name, int64_t version, const char *main_module,
                     json_t *modules, json_t *bindings, json_t *limits, int64_t created,
                     int64_t now_ms) {
  sqlite3_stmt *st;
  if (prepare(r,
              "INSERT OR REPLACE INTO workers(" ROW_COLUMNS
              ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
              &st) != 0)
    return -EIO;
  sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
  sqlite3_bind_int64(st, 2, version);
  sqlite3_bind_text(st, 3, main_module, -1, SQLITE_STATIC);
  if (bind_json(st, 4, modules) != 0 || bind_json(st, 5, bindings) != 0 ||
      bind_json(st, 6, limits) != 0) {
    sqlite3_finalize(st);
    return -EIO;
  }
  sqlite3_bind_int64(st, 7, created);
  sqlite3_bind_int64(st, 8, now_ms);
  return step_done(st);
}

int node_registry_put(node_registry *r, const char *name, const char *main_module,
                      json_t *modules, json_t *bindings, json_t *limits, int64_t now_ms,
                      json_t **row) {
  r->failure[0] = '\0';
  if (exec(r, "BEGIN IMMEDIATE") != 0) return -EIO;
  int64_t created = now_ms;
  int exists = existing_created_at(r, name, &created);
  int64_t version = exists < 0 ? -EIO : next_version(r, name);
  if (exists < 0 || version < 0 ||
      write_row(r, name, version, main_module, modules, bindings, limits, created, now_ms) != 0 ||
      exec(r, "COMMIT") != 0) {
    rollback(r);
    return -EIO;
  }
  if (row) {
    *row = json_pack("{s:s, s:I, s:s, s:O, s:O, s:O, s:I, s:I}", "name", name, "version",
                     (json_int_t)version, "main_module", main_module, "modules", modules,
                     "bindings", bindings, "limits", limits, "created_at", (json_int_t)created,
                     "updated_at", (json_int_t)now_ms);
  }
  return exists ? 0 : 1;
}

int node_registry_delete(node_registry *r, const char *name) {
  r->failure[0] = '\0';
  sqlite3_stmt *st;
  if (prepare(r, "DELETE FROM workers WHERE name = ?1", &st) != 0) return -EIO;
  sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
  int rc = step_done(st);
  if (rc != 0) return rc;
  return sqlite3_changes(r->db) > 0 ? 0 : -ENOENT;
}
