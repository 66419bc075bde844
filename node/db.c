/*
 * node.db, the node's own SQLite database in the data directory: this file
 * owns its connections, its schema and the migrations between schema
 * versions, and every statement run against it. The rest of the supervisor
 * sees rows as JSON objects.
 *
 * What is kept: the deployed workers (table workers, with the last version
 * handed out per name in worker_versions, their last versions in
 * worker_history), the ingress routes (routes), their egress allow-lists
 * (egress_rules), the secrets' grants and, in a fleet, their sealed values
 * (secrets), the cordoned tenants (cordons) and the event history (events).
 *
 * Two connections, both opened here: one with synchronous=FULL for what an
 * operator wrote (a deploy or a cordon must survive a crash of the machine),
 * and one with synchronous=NORMAL for the history, which is worth less than
 * an fsync per event (WAL keeps the file consistent either way).
 *
 * The schema version is PRAGMA user_version. Version 0 is a data directory
 * from before the version was kept: its tables are the ones of version 1,
 * so migrating it only records the version.
 */
#include <errno.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "egress.h"
#include "fleet.h"
#include "node.h"

#define BUSY_TIMEOUT_MS 5000
#define HISTORY_BUSY_TIMEOUT_MS 2000

struct node_db {
  sqlite3 *db;       /* workers, egress rules, cordons: synchronous=FULL */
  sqlite3 *history;  /* events: synchronous=NORMAL */
  /* Why the last write failed: the ROLLBACK after it replaces SQLite's own
   * message (a full disk read "cannot rollback - no transaction is active"). */
  char failure[256];
};

/* A worker_history row made from the workers row of the same name. */
#define HISTORY_FROM_WORKERS(egress, rollback_of)                                     \
  "name, version, main_module, modules, bindings, limits, " #egress ", "              \
  "(SELECT coalesce(sum(length(CAST(value AS BLOB))), 0) FROM json_each(modules)), " \
  "code_hash(main_module, modules), " #rollback_of ", updated_at"

/* migrations[v] takes a database from schema version v to v + 1. */
static const char *const migrations[] = {
    /* 1: the tables as they were before versions were kept (IF NOT EXISTS:
     * such a node.db has them already). */
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
    "  last INTEGER NOT NULL);"
    "CREATE TABLE IF NOT EXISTS egress_rules ("
    "  name TEXT PRIMARY KEY,"
    "  rules TEXT NOT NULL,"
    "  updated_at INTEGER NOT NULL);"
    "CREATE TABLE IF NOT EXISTS cordons ("
    "  name TEXT PRIMARY KEY,"
    "  state TEXT NOT NULL,"      /* cordoned | suspended */
    "  reason TEXT NOT NULL,"
    "  rule TEXT,"
    "  by TEXT NOT NULL,"
    "  since INTEGER NOT NULL);"  /* milliseconds since the epoch */
    "CREATE TABLE IF NOT EXISTS events ("
    "  id INTEGER PRIMARY KEY,"
    "  time INTEGER NOT NULL,"    /* milliseconds since the epoch */
    "  kind TEXT NOT NULL,"
    "  tenant TEXT,"
    "  details TEXT NOT NULL);",
    /* 2: secrets are granted to workers. A secret set before has no row,
     * so it is granted to no worker until an operator grants it. */
    "CREATE TABLE secrets ("
    "  name TEXT PRIMARY KEY,"
    "  workers TEXT NOT NULL,"      /* JSON array of worker names */
    "  sealed TEXT,"                /* in a fleet: {"key", "nonce", "sealed"} */
    "  updated_at INTEGER NOT NULL);",
    /* 3: the last NODE_DB_VERSIONS_KEPT versions of each worker, for
     * GET .../versions and rollbacks. The workers deployed before start
     * with their current version. */
    "CREATE TABLE worker_history ("
    "  name TEXT NOT NULL,"
    "  version INTEGER NOT NULL,"
    "  main_module TEXT NOT NULL,"
    "  modules TEXT NOT NULL,"
    "  bindings TEXT NOT NULL,"
    "  limits TEXT NOT NULL,"
    "  egress TEXT,"              /* the rules its deploy carried; NULL: none */
    "  size INTEGER NOT NULL,"    /* bytes of source, every module */
    "  hash TEXT NOT NULL,"       /* code_hash(main_module, modules) */
    "  rollback_of INTEGER,"      /* the version a rollback restored */
    "  created_at INTEGER NOT NULL,"
    "  PRIMARY KEY (name, version));"
    "INSERT INTO worker_history SELECT " HISTORY_FROM_WORKERS(NULL, NULL) " FROM workers;"
    /* and the ingress routes, one list (PUT /v1/routes replaces it whole) */
    "CREATE TABLE routes ("
    "  id INTEGER PRIMARY KEY CHECK (id = 1),"
    "  routes TEXT NOT NULL,"
    "  updated_at INTEGER NOT NULL);",
    /* 4: gradual deployments: a worker's traffic split over its kept
     * versions. No row: all of it goes to the current version. */
    "CREATE TABLE worker_traffic ("
    "  name TEXT PRIMARY KEY,"
    "  split TEXT NOT NULL,"     /* [{"version": N, "percent": P}, ...] */
    "  updated_at INTEGER NOT NULL);",
};

_Static_assert(ARRAY_SIZE(migrations) == NODE_DB_SCHEMA_VERSION,
               "one migration per schema version");

/* ---- connections and migrations ------------------------------------------------ */

static int exec(sqlite3 *db, const char *sql) {
  return sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK ? 0 : -EIO;
}

static int open_connection(const char *path, sqlite3 **db, int busy_ms, const char *pragmas,
                   char **err) {
  int rc = sqlite3_open_v2(path, db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
  if (rc != SQLITE_OK) {
    *err = xasprintf("%s: %s", path, *db ? sqlite3_errmsg(*db) : sqlite3_errstr(rc));
    return -EIO;
  }
  sqlite3_busy_timeout(*db, busy_ms);
  if (exec(*db, pragmas) != 0) {
    *err = xasprintf("%s: %s", path, sqlite3_errmsg(*db));
    return -EIO;
  }
  return 0;
}

static int schema_version(sqlite3 *db, int *version) {
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, NULL) != SQLITE_OK) return -EIO;
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) *version = sqlite3_column_int(st, 0);
  sqlite3_finalize(st);
  return rc == SQLITE_ROW ? 0 : -EIO;
}

/*
 * code_hash(main_module, modules): SHA-256 (hex) of the main module's name, a
 * newline and the modules as compact JSON with sorted keys, so that the same
 * code deployed twice hashes the same whatever order its modules came in.
 */
static void code_hash_fn(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  (void)argc;
  const char *main_module = (const char *)sqlite3_value_text(argv[0]);
  const char *modules = (const char *)sqlite3_value_text(argv[1]);
  json_t *parsed = modules ? json_loads(modules, 0, NULL) : NULL;
  char *sorted = parsed ? json_dumps(parsed, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
  json_decref(parsed);
  if (main_module == NULL || sorted == NULL) {
    free(sorted);
    sqlite3_result_error(ctx, "code_hash: not a main module and a JSON object", -1);
    return;
  }
  char *text = xasprintf("%s\n%s", main_module, sorted);
  free(sorted);
  char hex[FLEET_SHA256_HEX + 1];
  fleet_sha256_hex(text, strlen(text), hex);
  free(text);
  sqlite3_result_text(ctx, hex, -1, SQLITE_TRANSIENT);
}

static int add_functions(sqlite3 *db, const char *path, char **err) {
  if (sqlite3_create_function(db, "code_hash", 2, SQLITE_UTF8 | SQLITE_DETERMINISTIC, NULL,
                              code_hash_fn, NULL, NULL) == SQLITE_OK)
    return 0;
  *err = xasprintf("%s: %s", path, sqlite3_errmsg(db));
  return -EIO;
}

/* Brings the schema to NODE_DB_SCHEMA_VERSION, one transaction per step. */
static int migrate(sqlite3 *db, const char *path, char **err) {
  int version = 0;
  if (schema_version(db, &version) != 0) {
    *err = xasprintf("%s: %s", path, sqlite3_errmsg(db));
    return -EIO;
  }
  if (version > NODE_DB_SCHEMA_VERSION) {
    *err = xasprintf("%s: schema version %d is newer than this edgenode knows (%d): run the "
                     "edgenode that wrote it",
                     path, version, NODE_DB_SCHEMA_VERSION);
    return -EPROTO;
  }
  for (; version < NODE_DB_SCHEMA_VERSION; version++) {
    char set_version[48];
    snprintf(set_version, sizeof set_version, "PRAGMA user_version = %d", version + 1);
    if (exec(db, "BEGIN IMMEDIATE") != 0 || exec(db, migrations[version]) != 0 ||
        exec(db, set_version) != 0 || exec(db, "COMMIT") != 0) {
      *err = xasprintf("%s: migrating the schema to version %d: %s", path, version + 1,
                       sqlite3_errmsg(db));
      if (sqlite3_get_autocommit(db) == 0) exec(db, "ROLLBACK");
      return -EIO;
    }
  }
  return 0;
}

int node_db_open(const char *path, node_db **out, char **err) {
  node_db *d = xcalloc(1, sizeof *d);
  int rc = open_connection(path, &d->db, BUSY_TIMEOUT_MS, "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;",
                   err);
  if (rc == 0) rc = add_functions(d->db, path, err);
  if (rc == 0) rc = migrate(d->db, path, err);
  if (rc == 0)
    rc = open_connection(path, &d->history, HISTORY_BUSY_TIMEOUT_MS, "PRAGMA synchronous=NORMAL;", err);
  if (rc != 0) {
    node_db_close(d);
    return rc == -EPROTO ? rc : -EIO;
  }
  *out = d;
  return 0;
}

void node_db_close(node_db *d) {
  if (d == NULL) return;
  sqlite3_close(d->history);
  sqlite3_close(d->db);
  free(d);
}

const char *node_db_errmsg(node_db *d) {
  return d->failure[0] ? d->failure : sqlite3_errmsg(d->db);
}

/* ---- statements ---------------------------------------------------------------- */

static int prepare(sqlite3 *db, const char *sql, sqlite3_stmt **st) {
  return sqlite3_prepare_v2(db, sql, -1, st, NULL) == SQLITE_OK ? 0 : -EIO;
}

/* Runs a prepared statement that returns no rows and finalizes it. */
static int step_done(sqlite3_stmt *st) {
  int rc = sqlite3_step(st);
  sqlite3_finalize(st);
  return rc == SQLITE_DONE ? 0 : -EIO;
}

static int bind_json(sqlite3_stmt *st, int idx, json_t *v) {
  char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
  if (text == NULL) return -EINVAL;
  return sqlite3_bind_text(st, idx, text, -1, free) == SQLITE_OK ? 0 : -EIO;
}

static json_t *column_json(sqlite3_stmt *st, int col) {
  const unsigned char *text = sqlite3_column_text(st, col);
  int len = sqlite3_column_bytes(st, col);
  json_t *v = text ? json_loadb((const char *)text, (size_t)len, 0, NULL) : NULL;
  return v ? v : json_object(); /* a damaged column reads as empty */
}

static int begin(node_db *d) {
  d->failure[0] = '\0';
  return exec(d->db, "BEGIN IMMEDIATE");
}

/* Ends a failed write, keeping what made it fail (unless `why` says it better). */
static void rollback(node_db *d, const char *why) {
  snprintf(d->failure, sizeof d->failure, "%s", why ? why : sqlite3_errmsg(d->db));
  if (sqlite3_get_autocommit(d->db) == 0 && exec(d->db, "ROLLBACK") != 0)
    log_warn("node.db: could not roll back: %s", sqlite3_errmsg(d->db));
}

/* ---- workers ------------------------------------------------------------------- */

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

int node_db_worker_get(node_db *d, const char *name, json_t **row) {
  d->failure[0] = '\0';
  sqlite3_stmt *st;
  if (prepare(d->db, "SELECT " ROW_COLUMNS " FROM workers WHERE name = ?1", &st) != 0) return -EIO;
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

int node_db_worker_exists(node_db *d, const char *name) {
  json_t *row = NULL;
  int rc = node_db_worker_get(d, name, &row);
  json_decref(row);
  return rc == 0 ? 1 : rc;
}

/* Runs a prepared query and collects read(row) of each row (NULL: skipped)
 * into *rows; finalizes the statement. 0 or -EIO. */
static int collect_rows(sqlite3_stmt *st, json_t *(*read)(sqlite3_stmt *st), json_t **rows) {
  json_t *arr = json_array();
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    json_t *row = read(st);
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

int node_db_worker_list(node_db *d, json_t **rows) {
  d->failure[0] = '\0';
  sqlite3_stmt *st;
  if (prepare(d->db, "SELECT " ROW_COLUMNS " FROM workers ORDER BY name", &st) != 0) return -EIO;
  return collect_rows(st, read_row, rows);
}

static int64_t next_version(node_db *d, const char *name) {
  sqlite3_stmt *st;
  if (prepare(d->db,
              "INSERT INTO worker_versions(name, last) VALUES (?1, 1) "
              "ON CONFLICT(name) DO UPDATE SET last = last + 1 RETURNING last",
              &st) != 0)
    return -EIO;
  sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
  int64_t v = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int64(st, 0) : -EIO;
  sqlite3_finalize(st);
  return v;
}

/* A fleet's version for the name: taken when newer than the last one handed
 * out (1), refused as stale (0), or -EIO. */
static int take_version(node_db *d, const char *name, int64_t version) {
  sqlite3_stmt *st;
  if (prepare(d->db,
              "INSERT INTO worker_versions(name, last) VALUES (?1, ?2) "
              "ON CONFLICT(name) DO UPDATE SET last = ?2 WHERE last < ?2",
              &st) != 0)
    return -EIO;
  sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
  sqlite3_bind_int64(st, 2, version);
  int rc = step_done(st);
  return rc != 0 ? -EIO : sqlite3_changes(d->db) > 0;
}

/* 1 and *created when the row exists, 0 when it does not, or -EIO. */
static int existing_created_at(node_db *d, const char *name, int64_t *created) {
  sqlite3_stmt *st;
  if (prepare(d->db, "SELECT created_at FROM workers WHERE name = ?1", &st) != 0) return -EIO;
  sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
  int rc = sqlite3_step(st);
  int result = rc == SQLITE_ROW ? 1 : rc == SQLITE_DONE ? 0 : -EIO;
  if (result == 1) *created = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  return result;
}

static int write_row(node_db *d, const char *name, int64_t version, const char *main_module,
                     json_t *modules, json_t *bindings, json_t *limits, int64_t created,
                     int64_t now_ms) {
  sqlite3_stmt *st;
  if (prepare(d->db,
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

/* Copies the row just written into worker_history, with the rules its
 * deploy carried, and keeps the last NODE_DB_VERSIONS_KEPT versions of the
 * name; inside the caller's transaction. */
static int write_history(node_db *d, const char *name, const node_db_worker *w) {
  sqlite3_stmt *st;
  if (prepare(d->db,
              "INSERT OR REPLACE INTO worker_history SELECT " HISTORY_FROM_WORKERS(?2, ?3)
              " FROM workers WHERE name = ?1",
              &st) != 0)
    return -EIO;
  sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
  if (w->egress && bind_json(st, 2, w->egress) != 0) {
    sqlite3_finalize(st);
    return -EIO;
  }
  if (w->rollback_of > 0) sqlite3_bind_int64(st, 3, w->rollback_of);
  if (step_done(st) != 0) return -EIO;
  if (prepare(d->db,
              "DELETE FROM worker_history WHERE name = ?1 AND version NOT IN "
              "(SELECT version FROM worker_history WHERE name = ?1 ORDER BY version DESC LIMIT ?2)",
              &st) != 0)
    return -EIO;
  sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
  sqlite3_bind_int(st, 2, NODE_DB_VERSIONS_KEPT);
  return step_done(st);
}

/* A deploy, a rollback or a delete ends any split (inside the caller's transaction). */
static int clear_traffic(node_db *d, const char *name) {
  sqlite3_stmt *st;
  if (prepare(d->db, "DELETE FROM worker_traffic WHERE name = ?1", &st) != 0) return -EIO;
  sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
  return step_done(st);
}

static int delete_history(node_db *d, const char *name) {
  sqlite3_stmt *st;
  if (prepare(d->db, "DELETE FROM worker_history WHERE name = ?1", &st) != 0) return -EIO;
  sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
  return step_done(st);
}

/* Stores (or for an empty list removes) a worker's rules inside the caller's transaction. */
static int write_rules(node_db *d, const char *name, json_t *rules, int64_t now_ms) {
  sqlite3_stmt *st;
  int empty = json_array_size(rules) == 0;
  const char *sql = empty ? "DELETE FROM egress_rules WHERE name = ?1"
                          : "INSERT OR REPLACE INTO egress_rules(name, rules, updated_at) "
                            "VALUES (?1, ?2, ?3)";
  if (prepare(d->db, sql, &st) != 0) return -EIO;
  sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
  if (!empty) {
    if (bind_json(st, 2, rules) != 0) {
      sqlite3_finalize(st);
      return -EIO;
    }
    sqlite3_bind_int64(st, 3, now_ms);
  }
  return step_done(st);
}

/* The allow-list rules are checked on the way in by the code the egress runs,
 * so that nothing node.db hands the egress can be refused there. NULL when
 * they are fine, or why not (heap). */
char *node_db_rules_problem(json_t *rules) {
  if (!json_is_array(rules)) return xstrdup("the egress rules must be an array");
  char *why = NULL;
  egress_policy *p = egress_policy_parse(rules, &why);
  if (p == NULL) return why ? why : xstrdup("the egress rules are invalid");
  egress_policy_free(p);
  return NULL;
}

node_db_worker node_db_worker_of(json_t *spec) {
  json_t *rules = json_object_get(spec, "egress");
  node_db_worker w = {
      .main_module = json_string_value(json_object_get(spec, "main_module")),
      .modules = json_object_get(spec, "modules"),
      .bindings = json_object_get(spec, "bindings"),
      .limits = json_object_get(spec, "limits"),
      .egress = rules,
      .rollback_of = json_integer_value(json_object_get(spec, "rollback_of")),
  };
  return w;
}

int node_db_worker_put(node_db *d, const char *name, const node_db_worker *w, int64_t now_ms,
                       json_t **row) {
  char *why = w->egress ? node_db_rules_problem(w->egress) : NULL;
  if (why) {
    snprintf(d->failure, sizeof d->failure, "%s", why);
    free(why);
    return -EINVAL;
  }
  if (begin(d) != 0) {
    rollback(d, NULL);
    return -EIO;
  }
  int64_t created = now_ms;
  int exists = existing_created_at(d, name, &created);
  int64_t version = w->version;
  if (exists >= 0 && version > 0) {
    int fresh = take_version(d, name, version);
    if (fresh == 0) {
      exec(d->db, "ROLLBACK");
      return -EALREADY;
    }
    if (fresh < 0) version = -EIO;
  } else if (exists >= 0) {
    version = next_version(d, name);
  } else {
    version = -EIO;
  }
  if (exists < 0 || version < 0 ||
      write_row(d, name, version, w->main_module, w->modules, w->bindings, w->limits, created,
                now_ms) != 0 ||
      write_history(d, name, w) != 0 || clear_traffic(d, name) != 0 ||
      (w->egress && write_rules(d, name, w->egress, now_ms) != 0) || exec(d->db, "COMMIT") != 0) {
    rollback(d, NULL);
    return -EIO;
  }
  if (row) {
    *row = json_pack("{s:s, s:I, s:s, s:O, s:O, s:O, s:I, s:I}", "name", name, "version",
                     (json_int_t)version, "main_module", w->main_module, "modules", w->modules,
                     "bindings", w->bindings, "limits", w->limits, "created_at",
                     (json_int_t)created, "updated_at", (json_int_t)now_ms);
  }
  return exists ? 0 : 1;
}

int node_db_worker_delete(node_db *d, const char *name) {
  if (begin(d) != 0) {
    rollback(d, NULL);
    return -EIO;
  }
  sqlite3_stmt *st;
  int rc = prepare(d->db, "DELETE FROM workers WHERE name = ?1", &st);
  if (rc == 0) {
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    rc = step_done(st);
  }
  int gone = rc == 0 ? sqlite3_changes(d->db) : 0;
  /* Its allow-list and its versions go with it, in the same transaction. */
  if (rc == 0 && gone > 0) rc = write_rules(d, name, NULL, 0);
  if (rc == 0 && gone > 0) rc = delete_history(d, name);
  if (rc == 0 && gone > 0) rc = clear_traffic(d, name);
  if (rc == 0 && gone == 0) {
    exec(d->db, "ROLLBACK");
    return -ENOENT;
  }
  if (rc != 0 || exec(d->db, "COMMIT") != 0) {
    rollback(d, NULL);
    return -EIO;
  }
  return 0;
}

/* ---- versions ------------------------------------------------------------------- */

static json_t *read_version(sqlite3_stmt *st) {
  json_t *row = json_pack("{s:I, s:s, s:o, s:I, s:s, s:I, s:b}",
                          "version", (json_int_t)sqlite3_column_int64(st, 0),
                          "main_module", (const char *)sqlite3_column_text(st, 1),
                          "modules", column_json(st, 2),
                          "size", (json_int_t)sqlite3_column_int64(st, 3),
                          "hash", (const char *)sqlite3_column_text(st, 4),
                          "created_at", (json_int_t)sqlite3_column_int64(st, 6),
                          "egress", sqlite3_column_int(st, 7));
  if (row && sqlite3_column_type(st, 5) != SQLITE_NULL)
    json_object_set_new(row, "rollback_of", json_integer(sqlite3_column_int64(st, 5)));
  return row;
}

int node_db_versions_list(node_db *d, const char *name, json_t **rows) {
  d->failure[0] = '\0';
  sqlite3_stmt *st;
  if (prepare(d->db,
              "SELECT version, main_module, (SELECT json_group_array(key) FROM json_each(modules)), "
              "size, hash, rollback_of, created_at, egress IS NOT NULL FROM worker_history "
              "WHERE name = ?1 ORDER BY version DESC",
              &st) != 0)
    return -EIO;
  sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
  return collect_rows(st, read_version, rows);
}

int node_db_version_get(node_db *d, const char *name, int64_t version, json_t **spec) {
  d->failure[0] = '\0';
  sqlite3_stmt *st;
  if (prepare(d->db,
              "SELECT main_module, modules, bindings, limits, egress FROM worker_history "
              "WHERE name = ?1 AND version = ?2",
              &st) != 0)
    return -EIO;
  sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
  sqlite3_bind_int64(st, 2, version);
  int rc = sqlite3_step(st);
  int result = rc == SQLITE_ROW ? 0 : rc == SQLITE_DONE ? -ENOENT : -EIO;
  if (result == 0) {
    *spec = json_pack("{s:s, s:o, s:o, s:o}", "main_module", (const char *)sqlite3_column_text(st, 0),
                      "modules", column_json(st, 1), "bindings", column_json(st, 2), "limits",
                      column_json(st, 3));
    if (*spec == NULL) result = -EIO;
    else if (sqlite3_column_type(st, 4) != SQLITE_NULL)
      json_object_set_new(*spec, "egress", column_json(st, 4));
  }
  sqlite3_finalize(st);
  return result;
}

/* ---- routes -------------------------------------------------------------------------- */

json_t *node_db_routes_get(node_db *d, int64_t *updated_at) {
  sqlite3_stmt *st;
  if (prepare(d->db, "SELECT routes, updated_at FROM routes WHERE id = 1", &st) != 0) return NULL;
  json_t *routes = NULL;
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) {
    routes = column_json(st, 0);
    if (!json_is_array(routes)) {
      json_decref(routes);
      routes = json_array();
    }
    if (updated_at) *updated_at = sqlite3_column_int64(st, 1);
  } else if (rc == SQLITE_DONE) {
    routes = json_array();
    if (updated_at) *updated_at = 0;
  }
  sqlite3_finalize(st);
  return routes;
}

/* ---- traffic splits ------------------------------------------------------------- */

int node_db_traffic_get(node_db *d, const char *name, json_t **split) {
  *split = NULL;
  sqlite3_stmt *st;
  if (prepare(d->db, "SELECT split FROM worker_traffic WHERE name = ?1", &st) != 0) return -EIO;
  sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) *split = column_json(st, 0);
  sqlite3_finalize(st);
  if (rc == SQLITE_ROW && !json_is_array(*split)) {
    json_decref(*split);
    *split = NULL;
  }
  return rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : -EIO;
}

int node_db_traffic_put(node_db *d, const char *name, json_t *split, int64_t now_ms) {
  d->failure[0] = '\0';
  if (split == NULL) return clear_traffic(d, name);
  sqlite3_stmt *st;
  if (prepare(d->db,
              "INSERT OR REPLACE INTO worker_traffic(name, split, updated_at) "
              "SELECT ?1, ?2, ?3 WHERE EXISTS (SELECT 1 FROM workers WHERE name = ?1)",
              &st) != 0)
    return -EIO;
  sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
  if (bind_json(st, 2, split) != 0) {
    sqlite3_finalize(st);
    return -EIO;
  }
  sqlite3_bind_int64(st, 3, now_ms);
  if (step_done(st) != 0) return -EIO;
  return sqlite3_changes(d->db) > 0 ? 0 : -ENOENT;
}

int node_db_traffic_attach(node_db *d, const char *name, json_t *row) {
  json_t *split = NULL;
  if (node_db_traffic_get(d, name, &split) != 0) return -EIO;
  if (split == NULL) return 0;
  int64_t current = json_integer_value(json_object_get(row, "version"));
  size_t i;
  json_t *entry;
  json_array_foreach(split, i, entry) {
    int64_t version = json_integer_value(json_object_get(entry, "version"));
    if (version == current) continue;
    json_t *spec = NULL;
    if (node_db_version_get(d, name, version, &spec) != 0) {
      json_decref(split);
      return -EIO;
    }
    json_object_del(spec, "egress"); /* the worker's rules are the current version's */
    json_object_set_new(spec, "name", json_string(name));
    json_object_set_new(spec, "version", json_integer(version));
    json_object_set_new(entry, "spec", spec);
  }
  json_object_set_new(row, "traffic", split);
  return 0;
}

int node_db_routes_put(node_db *d, json_t *routes, int64_t now_ms) {
  d->failure[0] = '\0';
  sqlite3_stmt *st;
  if (prepare(d->db, "INSERT OR REPLACE INTO routes(id, routes, updated_at) VALUES (1, ?1, ?2)",
              &st) != 0)
    return -EIO;
  if (bind_json(st, 1, routes) != 0) {
    sqlite3_finalize(st);
    return -EIO;
  }
  sqlite3_bind_int64(st, 2, now_ms);
  return step_done(st);
}

/* ---- egress rules ---------------------------------------------------------------- */

json_t *node_db_egress_get(node_db *d, const char *name, int64_t *updated_at) {
  sqlite3_stmt *st;
  if (prepare(d->db, "SELECT rules, updated_at FROM egress_rules WHERE name = ?1", &st) != 0)
    return NULL;
  sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
  json_t *rules = NULL;
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) {
    rules = json_loads((const char *)sqlite3_column_text(st, 0), 0, NULL);
    if (updated_at) *updated_at = sqlite3_column_int64(st, 1);
  } else if (rc == SQLITE_DONE) {
    rules = json_array();
    if (updated_at) *updated_at = 0;
  }
  sqlite3_finalize(st);
  return rules;
}

int node_db_egress_put(node_db *d, const char *name, json_t *rules, int64_t now_ms) {
  char *why = node_db_rules_problem(rules);
  if (why) {
    snprintf(d->failure, sizeof d->failure, "%s", why);
    free(why);
    return -EINVAL;
  }
  d->failure[0] = '\0';
  return write_rules(d, name, rules, now_ms);
}

json_t *node_db_egress_all(node_db *d) {
  json_t *all = json_object();
  sqlite3_stmt *st;
  if (prepare(d->db, "SELECT name, rules FROM egress_rules", &st) != 0) return all;
  while (sqlite3_step(st) == SQLITE_ROW) {
    json_t *rules = json_loads((const char *)sqlite3_column_text(st, 1), 0, NULL);
    if (rules) json_object_set_new(all, (const char *)sqlite3_column_text(st, 0), rules);
  }
  sqlite3_finalize(st);
  return all;
}

/* ---- secrets ------------------------------------------------------------------------ */

static json_t *read_secret(sqlite3_stmt *st) {
  json_t *row = json_pack("{s:s, s:o, s:I}", "name", (const char *)sqlite3_column_text(st, 0),
                          "workers", column_json(st, 1), "updated_at",
                          (json_int_t)sqlite3_column_int64(st, 3));
  if (row && sqlite3_column_type(st, 2) != SQLITE_NULL)
    json_object_set_new(row, "sealed", column_json(st, 2));
  return row;
}

json_t *node_db_secret_get(node_db *d, const char *name) {
  sqlite3_stmt *st;
  if (prepare(d->db, "SELECT name, workers, sealed, updated_at FROM secrets WHERE name = ?1",
              &st) != 0)
    return NULL;
  sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
  json_t *row = sqlite3_step(st) == SQLITE_ROW ? read_secret(st) : NULL;
  sqlite3_finalize(st);
  return row;
}

json_t *node_db_secret_list(node_db *d) {
  sqlite3_stmt *st;
  json_t *rows = NULL;
  if (prepare(d->db, "SELECT name, workers, sealed, updated_at FROM secrets ORDER BY name",
              &st) != 0 ||
      collect_rows(st, read_secret, &rows) != 0)
    return json_array();
  return rows;
}

int node_db_secret_put(node_db *d, const char *name, json_t *workers, json_t *sealed,
                       int64_t updated_at) {
  d->failure[0] = '\0';
  json_t *old = node_db_secret_get(d, name);
  json_t *keep = workers ? workers : old ? json_object_get(old, "workers") : NULL;
  if (updated_at == 0 && old) updated_at = json_integer_value(json_object_get(old, "updated_at"));
  sqlite3_stmt *st;
  int rc = prepare(d->db,
                   "INSERT OR REPLACE INTO secrets(name, workers, sealed, updated_at) "
                   "VALUES (?1, ?2, ?3, ?4)",
                   &st);
  if (rc == 0) {
    json_t *list = keep ? json_incref(keep) : json_array();
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    rc = bind_json(st, 2, list);
    if (rc == 0 && sealed) rc = bind_json(st, 3, sealed);
    sqlite3_bind_int64(st, 4, updated_at);
    json_decref(list);
    if (rc == 0) rc = step_done(st);
    else sqlite3_finalize(st);
  }
  json_decref(old);
  return rc;
}

int node_db_secret_delete(node_db *d, const char *name) {
  d->failure[0] = '\0';
  sqlite3_stmt *st;
  if (prepare(d->db, "DELETE FROM secrets WHERE name = ?1", &st) != 0) return -EIO;
  sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
  if (step_done(st) != 0) return -EIO;
  return sqlite3_changes(d->db) > 0 ? 0 : -ENOENT;
}

int node_db_secret_granted(void *db, const char *name, size_t len, const char *worker) {
  node_db *d = db;
  sqlite3_stmt *st;
  /* One row per (secret, worker) pair it is granted to, from the JSON array. */
  if (prepare(d->db,
              "SELECT 1 FROM secrets, json_each(secrets.workers) "
              "WHERE secrets.name = ?1 AND json_each.value = ?2",
              &st) != 0)
    return 0;
  sqlite3_bind_text(st, 1, name, (int)len, SQLITE_STATIC);
  sqlite3_bind_text(st, 2, worker, -1, SQLITE_STATIC);
  int granted = sqlite3_step(st) == SQLITE_ROW;
  sqlite3_finalize(st);
  return granted;
}

char *node_db_rules_ungranted(node_db *d, const char *worker, json_t *rules) {
  char *why = NULL;
  egress_policy *p = egress_policy_parse(rules, &why);
  if (p == NULL) return why;
  char *problem = egress_policy_ungranted(p, worker, node_db_secret_granted, d);
  egress_policy_free(p);
  return problem;
}

/* ---- cordons ------------------------------------------------------------------------ */

int node_db_cordon_put(node_db *d, const char *name, const char *state, const char *reason,
                       const char *rule, const char *by, int64_t since_ms) {
  d->failure[0] = '\0';
  sqlite3_stmt *st;
  if (prepare(d->db,
              "INSERT OR REPLACE INTO cordons (name, state, reason, rule, by, since) "
              "VALUES (?, ?, ?, ?, ?, ?)",
              &st) != 0)
    return -EIO;
  sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 2, state, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 3, reason, -1, SQLITE_STATIC);
  if (rule) sqlite3_bind_text(st, 4, rule, -1, SQLITE_STATIC);
  else sqlite3_bind_null(st, 4);
  sqlite3_bind_text(st, 5, by, -1, SQLITE_STATIC);
  sqlite3_bind_int64(st, 6, since_ms);
  return step_done(st);
}

int node_db_cordon_delete(node_db *d, const char *name) {
  d->failure[0] = '\0';
  sqlite3_stmt *st;
  if (prepare(d->db, "DELETE FROM cordons WHERE name = ?", &st) != 0) return -EIO;
  sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
  return step_done(st);
}

static json_t *read_cordon(sqlite3_stmt *st) {
  const char *name = (const char *)sqlite3_column_text(st, 0);
  if (name == NULL) return NULL;
  return json_pack("{s:s, s:s?, s:s?, s:s?, s:s?, s:I}", "name", name, "state",
                   (const char *)sqlite3_column_text(st, 1), "reason",
                   (const char *)sqlite3_column_text(st, 2), "rule",
                   (const char *)sqlite3_column_text(st, 3), "by",
                   (const char *)sqlite3_column_text(st, 4), "since",
                   (json_int_t)sqlite3_column_int64(st, 5));
}

int node_db_cordon_list(node_db *d, json_t **rows) {
  sqlite3_stmt *st;
  if (prepare(d->db, "SELECT name, state, reason, rule, by, since FROM cordons ORDER BY name",
              &st) != 0)
    return -EIO;
  return collect_rows(st, read_cordon, rows);
}

/* ---- events ---------------------------------------------------------------------- */

int64_t node_db_event_add(node_db *d, int64_t time_ms, const char *kind, const char *tenant,
                          const char *details, int64_t keep) {
  sqlite3_stmt *st;
  if (prepare(d->history, "INSERT INTO events (time, kind, tenant, details) VALUES (?, ?, ?, ?)",
              &st) != 0)
    return -EIO;
  sqlite3_bind_int64(st, 1, time_ms);
  sqlite3_bind_text(st, 2, kind, -1, SQLITE_STATIC);
  if (tenant) sqlite3_bind_text(st, 3, tenant, -1, SQLITE_STATIC);
  else sqlite3_bind_null(st, 3);
  sqlite3_bind_text(st, 4, details, -1, SQLITE_STATIC);
  if (step_done(st) != 0) return -EIO;
  int64_t id = sqlite3_last_insert_rowid(d->history);
  if (id > keep && id % 64 == 0 && prepare(d->history, "DELETE FROM events WHERE id <= ?", &st) == 0) {
    /* pruned now and then, not on every insert; a failure only leaves old rows */
    sqlite3_bind_int64(st, 1, id - keep);
    (void)step_done(st);
  }
  return id;
}

static json_t *read_event(sqlite3_stmt *st) {
  const char *kind = (const char *)sqlite3_column_text(st, 2);
  const char *details = (const char *)sqlite3_column_text(st, 4);
  json_t *parsed = details ? json_loads(details, 0, NULL) : NULL;
  json_t *row = json_pack("{s:I, s:I, s:s, s:s?, s:o}", "id", (json_int_t)sqlite3_column_int64(st, 0),
                          "time", (json_int_t)sqlite3_column_int64(st, 1), "kind",
                          kind ? kind : "unknown", "tenant", (const char *)sqlite3_column_text(st, 3),
                          "details", json_is_object(parsed) ? parsed : json_object());
  if (!json_is_object(parsed)) json_decref(parsed);
  return row;
}

int node_db_event_list(node_db *d, int64_t max, json_t **rows) {
  sqlite3_stmt *st;
  if (prepare(d->history,
              "SELECT id, time, kind, tenant, details FROM "
              "(SELECT * FROM events ORDER BY id DESC LIMIT ?) ORDER BY id",
              &st) != 0)
    return -EIO;
  sqlite3_bind_int64(st, 1, max);
  return collect_rows(st, read_event, rows);
}

const char *node_db_history_errmsg(node_db *d) { return sqlite3_errmsg(d->history); }
