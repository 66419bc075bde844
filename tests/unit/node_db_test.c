/*
 * Unit tests for node/db.c, node.db: the registry of deployed workers, their
 * egress rules stored with them in one transaction, and the migration of a
 * node.db made before the schema had a version.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include <sqlite3.h>

#include "node.h"

typedef struct fixture {
  char dir[64];
  char *path;
  node_db *r;
} fixture;

static int setup(void **state) {
  fixture *f = xcalloc(1, sizeof *f);
  strcpy(f->dir, "/tmp/node_db_test_XXXXXX");
  if (mkdtemp(f->dir) == NULL) return -1;
  f->path = xasprintf("%s/node.db", f->dir);
  char *err = NULL;
  if (node_db_open(f->path, &f->r, &err) != 0) {
    fprintf(stderr, "open: %s\n", err);
    return -1;
  }
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  node_db_close(f->r);
  char *cmd = xasprintf("rm -rf '%s'", f->dir);
  int rc = system(cmd);
  free(cmd);
  free(f->path);
  free(f);
  return rc == 0 ? 0 : -1;
}

static void reopen(fixture *f) {
  node_db_close(f->r);
  char *err = NULL;
  assert_int_equal(node_db_open(f->path, &f->r, &err), 0);
}

/* Stores a one-module worker whose source is `src`, with `egress` rules
 * (JSON text, NULL: keep the stored ones); returns node_db_worker_put's result. */
static int put_with(fixture *f, const char *name, const char *src, const char *egress,
                    int64_t now, json_t **row) {
  json_t *modules = json_pack("{s:s}", "index.js", src);
  json_t *bindings = json_pack("{s:{s:s, s:s}}", "GREETING", "type", "text", "value", "hi");
  json_t *limits = json_pack("{s:i, s:i}", "cpu_ms", 50, "memory_mb", 128);
  json_t *rules = egress ? json_loads(egress, 0, NULL) : NULL;
  if (egress) assert_non_null(rules);
  node_db_worker w = {.main_module = "index.js", .modules = modules, .bindings = bindings,
                      .limits = limits, .egress = rules};
  int rc = node_db_worker_put(f->r, name, &w, now, row);
  json_decref(modules);
  json_decref(bindings);
  json_decref(limits);
  json_decref(rules);
  return rc;
}

static int put(fixture *f, const char *name, const char *src, int64_t now, json_t **row) {
  return put_with(f, name, src, NULL, now, row);
}

static const char *source_of(json_t *row) {
  return json_string_value(json_object_get(json_object_get(row, "modules"), "index.js"));
}

static json_int_t int_of(json_t *row, const char *key) {
  return json_integer_value(json_object_get(row, key));
}

static void test_create_and_get(void **state) {
  fixture *f = *state;
  json_t *row = NULL;
  assert_int_equal(put(f, "hello", "export default {}", 1000, &row), 1);
  assert_int_equal(int_of(row, "version"), 1);
  assert_int_equal(int_of(row, "created_at"), 1000);
  assert_int_equal(int_of(row, "updated_at"), 1000);
  json_decref(row);

  assert_int_equal(node_db_worker_get(f->r, "hello", &row), 0);
  assert_string_equal(json_string_value(json_object_get(row, "name")), "hello");
  assert_string_equal(json_string_value(json_object_get(row, "main_module")), "index.js");
  assert_string_equal(source_of(row), "export default {}");
  assert_int_equal(int_of(json_object_get(row, "limits"), "cpu_ms"), 50);
  assert_int_equal(int_of(json_object_get(row, "limits"), "memory_mb"), 128);
  assert_string_equal(json_string_value(json_object_get(
                          json_object_get(json_object_get(row, "bindings"), "GREETING"), "value")),
                      "hi");
  assert_int_equal(int_of(row, "version"), 1);
  json_decref(row);

  assert_int_equal(node_db_worker_get(f->r, "absent", &row), -ENOENT);
}

static void test_replace_increments_version(void **state) {
  fixture *f = *state;
  json_t *row;
  assert_int_equal(put(f, "app", "v1", 1000, NULL), 1);
  assert_int_equal(put(f, "app", "v2", 2000, NULL), 0);
  assert_int_equal(put(f, "app", "v3", 3000, &row), 0);
  assert_int_equal(int_of(row, "version"), 3);
  json_decref(row);
  assert_int_equal(node_db_worker_get(f->r, "app", &row), 0);
  assert_string_equal(source_of(row), "v3");
  assert_int_equal(int_of(row, "version"), 3);
  assert_int_equal(int_of(row, "created_at"), 1000); /* kept across redeploys */
  assert_int_equal(int_of(row, "updated_at"), 3000);
  json_decref(row);
  /* versions are per name */
  assert_int_equal(put(f, "other", "x", 4000, &row), 1);
  assert_int_equal(int_of(row, "version"), 1);
  json_decref(row);
}

static void test_delete(void **state) {
  fixture *f = *state;
  json_t *row;
  assert_int_equal(put(f, "gone", "v1", 1000, NULL), 1);
  assert_int_equal(put(f, "gone", "v2", 1001, NULL), 0);
  assert_int_equal(node_db_worker_delete(f->r, "gone"), 0);
  assert_int_equal(node_db_worker_get(f->r, "gone", &row), -ENOENT);
  assert_int_equal(node_db_worker_delete(f->r, "gone"), -ENOENT);
  assert_int_equal(node_db_worker_delete(f->r, "never"), -ENOENT);
  /* a redeploy after a delete is a create, and never reuses a version */
  assert_int_equal(put(f, "gone", "v3", 5000, &row), 1);
  assert_int_equal(int_of(row, "version"), 3);
  assert_int_equal(int_of(row, "created_at"), 5000);
  json_decref(row);
}

static void test_list_sorted(void **state) {
  fixture *f = *state;
  json_t *rows;
  assert_int_equal(node_db_worker_list(f->r, &rows), 0);
  assert_int_equal(json_array_size(rows), 0);
  json_decref(rows);
  const char *names[] = {"zeta", "alpha", "m-1", "0first", "beta"};
  for (size_t i = 0; i < ARRAY_SIZE(names); i++)
    assert_int_equal(put(f, names[i], names[i], (int64_t)i, NULL), 1);
  assert_int_equal(node_db_worker_delete(f->r, "beta"), 0);
  assert_int_equal(node_db_worker_list(f->r, &rows), 0);
  const char *want[] = {"0first", "alpha", "m-1", "zeta"};
  assert_int_equal(json_array_size(rows), ARRAY_SIZE(want));
  for (size_t i = 0; i < ARRAY_SIZE(want); i++) {
    json_t *row = json_array_get(rows, i);
    assert_string_equal(json_string_value(json_object_get(row, "name")), want[i]);
    assert_string_equal(source_of(row), want[i]);
  }
  json_decref(rows);
}

static void test_survives_reopen(void **state) {
  fixture *f = *state;
  json_t *row;
  assert_int_equal(put(f, "durable", "v1", 1000, NULL), 1);
  assert_int_equal(put(f, "durable", "v2", 2000, NULL), 0);
  assert_int_equal(put(f, "temp", "t", 2000, NULL), 1);
  assert_int_equal(node_db_worker_delete(f->r, "temp"), 0);
  reopen(f);
  assert_int_equal(node_db_worker_get(f->r, "durable", &row), 0);
  assert_string_equal(source_of(row), "v2");
  assert_int_equal(int_of(row, "version"), 2);
  json_decref(row);
  assert_int_equal(node_db_worker_get(f->r, "temp", &row), -ENOENT);
  /* the version counter survives too */
  assert_int_equal(put(f, "durable", "v3", 3000, &row), 0);
  assert_int_equal(int_of(row, "version"), 3);
  json_decref(row);
  assert_int_equal(put(f, "temp", "t2", 3000, &row), 1);
  assert_int_equal(int_of(row, "version"), 2);
  json_decref(row);
}

static void test_big_and_unicode_sources(void **state) {
  fixture *f = *state;
  size_t len = NODE_SCRIPT_MAX_BYTES;
  char *big = xmalloc(len + 1);
  memset(big, 'x', len);
  big[len] = '\0';
  memcpy(big, "// \xc3\xa9t\xc3\xa9 \xe2\x9c\x93\n", 13);
  assert_int_equal(put(f, "big", big, 1, NULL), 1);
  reopen(f);
  json_t *row;
  assert_int_equal(node_db_worker_get(f->r, "big", &row), 0);
  assert_string_equal(source_of(row), big);
  json_decref(row);
  free(big);
}

static const char *rules_text(fixture *f, const char *name) {
  static char text[512];
  json_t *rules = node_db_egress_get(f->r, name, NULL);
  assert_non_null(rules);
  char *dumped = json_dumps(rules, JSON_COMPACT);
  snprintf(text, sizeof text, "%s", dumped);
  free(dumped);
  json_decref(rules);
  return text;
}

static json_int_t version_of(fixture *f, const char *name) {
  json_t *row;
  assert_int_equal(node_db_worker_get(f->r, name, &row), 0);
  json_int_t v = int_of(row, "version");
  json_decref(row);
  return v;
}

static void test_deploy_stores_egress_rules(void **state) {
  fixture *f = *state;
  const char *v1 = "[{\"match\":\"https://api.example.com/*\"}]";
  assert_int_equal(put_with(f, "app", "v1", v1, 1000, NULL), 1);
  assert_string_equal(rules_text(f, "app"), v1);
  /* A deploy without rules keeps the stored ones; an empty list removes them. */
  assert_int_equal(put(f, "app", "v2", 2000, NULL), 0);
  assert_string_equal(rules_text(f, "app"), v1);
  assert_int_equal(put_with(f, "app", "v3", "[]", 3000, NULL), 0);
  assert_string_equal(rules_text(f, "app"), "[]");
  /* A delete takes the rules with the worker. */
  assert_int_equal(put_with(f, "app", "v4", v1, 4000, NULL), 0);
  assert_int_equal(node_db_worker_delete(f->r, "app"), 0);
  assert_string_equal(rules_text(f, "app"), "[]");
  json_t *all = node_db_egress_all(f->r);
  assert_int_equal(json_object_size(all), 0);
  json_decref(all);
}

/* Rules the egress would refuse are refused on the transaction's path: the
 * previous version and its rules stay, and no version number is used up. */
static void test_deploy_with_refused_rules_changes_nothing(void **state) {
  fixture *f = *state;
  const char *v1 = "[{\"match\":\"https://api.example.com/*\"}]";
  assert_int_equal(put_with(f, "app", "v1", v1, 1000, NULL), 1);
  assert_int_equal(put_with(f, "app", "v2", "[{\"host\":\"example.com\"}]", 2000, NULL), -EINVAL);
  assert_non_null(strstr(node_db_errmsg(f->r), "host"));
  assert_int_equal(put_with(f, "app", "v2", "{\"match\":\"x\"}", 2000, NULL), -EINVAL);
  json_t *row;
  assert_int_equal(node_db_worker_get(f->r, "app", &row), 0);
  assert_string_equal(source_of(row), "v1");
  assert_int_equal(int_of(row, "updated_at"), 1000);
  json_decref(row);
  assert_string_equal(rules_text(f, "app"), v1);
  assert_int_equal(put(f, "app", "v2", 3000, &row), 0);
  assert_int_equal(int_of(row, "version"), 2);
  json_decref(row);
}

/* Storing the rules fails in SQLite itself, after the worker row was written
 * in the same transaction: the whole deploy is rolled back. The failure is
 * made by a trigger another connection installs, as a full disk would. */
static void test_deploy_whose_rules_cannot_be_stored_changes_nothing(void **state) {
  fixture *f = *state;
  const char *v1 = "[{\"match\":\"https://api.example.com/*\"}]";
  const char *v2 = "[{\"match\":\"https://api.example.com/v2/*\"}]";
  assert_int_equal(put_with(f, "app", "v1", v1, 1000, NULL), 1);
  sqlite3 *other;
  assert_int_equal(sqlite3_open(f->path, &other), SQLITE_OK);
  assert_int_equal(sqlite3_exec(other,
                                "CREATE TRIGGER refuse BEFORE INSERT ON egress_rules "
                                "BEGIN SELECT RAISE(ABORT, 'no room for egress rules'); END",
                                NULL, NULL, NULL),
                   SQLITE_OK);
  assert_int_equal(put_with(f, "app", "v2", v2, 2000, NULL), -EIO);
  assert_non_null(strstr(node_db_errmsg(f->r), "no room for egress rules"));
  assert_int_equal(put_with(f, "fresh", "new", v2, 2000, NULL), -EIO);
  assert_int_equal(sqlite3_exec(other, "DROP TRIGGER refuse", NULL, NULL, NULL), SQLITE_OK);
  sqlite3_close(other);

  json_t *row;
  assert_int_equal(node_db_worker_get(f->r, "app", &row), 0);
  assert_string_equal(source_of(row), "v1");
  assert_int_equal(int_of(row, "version"), 1);
  json_decref(row);
  assert_string_equal(rules_text(f, "app"), v1);
  assert_int_equal(node_db_worker_get(f->r, "fresh", &row), -ENOENT);
  /* Nothing of the failed deploys remains, not even their version numbers. */
  assert_int_equal(put_with(f, "app", "v2", v2, 3000, &row), 0);
  assert_int_equal(int_of(row, "version"), 2);
  json_decref(row);
  assert_string_equal(rules_text(f, "app"), v2);
  assert_int_equal(put(f, "fresh", "new", 3000, &row), 1);
  assert_int_equal(int_of(row, "version"), 1);
  json_decref(row);
}

static void test_cordons_and_events(void **state) {
  fixture *f = *state;
  assert_int_equal(node_db_cordon_put(f->r, "b", "cordoned", "noisy", NULL, "operator", 5), 0);
  assert_int_equal(node_db_cordon_put(f->r, "a", "suspended", "crashes", "crashes>3/60s", "monitor", 6), 0);
  assert_int_equal(node_db_cordon_put(f->r, "b", "cordoned", "noisier", NULL, "operator", 7), 0);
  assert_int_equal(node_db_cordon_delete(f->r, "gone"), 0);
  json_t *rows;
  assert_int_equal(node_db_cordon_list(f->r, &rows), 0);
  assert_int_equal(json_array_size(rows), 2);
  json_t *a = json_array_get(rows, 0), *b = json_array_get(rows, 1);
  assert_string_equal(json_string_value(json_object_get(a, "rule")), "crashes>3/60s");
  assert_string_equal(json_string_value(json_object_get(b, "reason")), "noisier");
  assert_null(json_string_value(json_object_get(b, "rule")));
  assert_int_equal(int_of(b, "since"), 7);
  json_decref(rows);

  for (int i = 0; i < 130; i++)
    assert_int_equal(node_db_event_add(f->r, 1000 + i, "deploy", i % 2 ? "app" : NULL, "{\"n\":1}", 100), i + 1);
  reopen(f);
  assert_int_equal(node_db_event_list(f->r, 10, &rows), 0);
  assert_int_equal(json_array_size(rows), 10);
  json_t *last = json_array_get(rows, 9);
  assert_int_equal(int_of(last, "id"), 130);
  assert_int_equal(int_of(last, "time"), 1129);
  assert_string_equal(json_string_value(json_object_get(last, "tenant")), "app");
  assert_int_equal(int_of(json_object_get(last, "details"), "n"), 1);
  assert_null(json_string_value(json_object_get(json_array_get(rows, 8), "tenant")));
  json_decref(rows);
  /* pruned to about the number kept, never below it */
  assert_int_equal(node_db_event_list(f->r, 1000, &rows), 0);
  assert_in_range(json_array_size(rows), 100, 129);
  json_decref(rows);
}

/* A node.db as the edgenode before schema versions wrote it (sqlite3 .dump
 * of a data directory: two workers, one with egress rules, a cordon and the
 * history). It must open, migrate and go on working. */
static const char v0_dump[] =
    "PRAGMA foreign_keys=OFF;\n"
    "BEGIN TRANSACTION;\n"
    "CREATE TABLE workers (  name TEXT PRIMARY KEY,  version INTEGER NOT NULL,  main_module TEXT NOT NULL,  modules TEXT NOT NULL,  bindings TEXT NOT NULL,  limits TEXT NOT NULL,  created_at INTEGER NOT NULL,  updated_at INTEGER NOT NULL);\n"
    "INSERT INTO workers VALUES('other',1,'index.js','{\"index.js\":\"export default { fetch() { return new Response(\\\"b\\\") } }\"}','{}','{\"cpu_ms\":50,\"memory_mb\":128,\"wall_ms\":30000}',1796163833806,1796163833806);\n"
    "INSERT INTO workers VALUES('hello',2,'index.js','{\"index.js\":\"export default { fetch() { return new Response(\\\"v2\\\") } }\"}','{}','{\"cpu_ms\":50,\"memory_mb\":128,\"wall_ms\":30000}',1796163839266,1796163839355);\n"
    "CREATE TABLE worker_versions (  name TEXT PRIMARY KEY,  last INTEGER NOT NULL);\n"
    "INSERT INTO worker_versions VALUES('other',1);\n"
    "INSERT INTO worker_versions VALUES('hello',2);\n"
    "CREATE TABLE events (  id INTEGER PRIMARY KEY,  time INTEGER NOT NULL,  kind TEXT NOT NULL,  tenant TEXT,  details TEXT NOT NULL);\n"
    "INSERT INTO events VALUES(1,1796163828188,'start',NULL,'{\"version\":\"0.1.0\",\"workers\":1,\"pid\":23585}');\n"
    "INSERT INTO events VALUES(2,1796163833830,'deploy','other','{\"version\":1,\"created\":true}');\n"
    "INSERT INTO events VALUES(3,1796163833847,'cordon','other','{\"reason\":\"testing\",\"rule\":null,\"by\":\"operator\",\"port\":58023,\"pid\":24004}');\n"
    "INSERT INTO events VALUES(4,1796163839276,'deploy','hello','{\"version\":1,\"created\":true}');\n"
    "INSERT INTO events VALUES(5,1796163839358,'deploy','hello','{\"version\":2,\"created\":false}');\n"
    "INSERT INTO events VALUES(6,1796163839581,'drain',NULL,'{\"signal\":\"SIGTERM\",\"grace_ms\":10000,\"worker_processes\":2}');\n"
    "CREATE TABLE cordons (  name TEXT PRIMARY KEY,  state TEXT NOT NULL,  reason TEXT NOT NULL,  rule TEXT,  by TEXT NOT NULL,  since INTEGER NOT NULL);\n"
    "INSERT INTO cordons VALUES('other','cordoned','testing',NULL,'operator',1796163833845);\n"
    "CREATE TABLE egress_rules (  name TEXT PRIMARY KEY,  rules TEXT NOT NULL,  updated_at INTEGER NOT NULL);\n"
    "INSERT INTO egress_rules VALUES('hello','[{\"match\":\"https://api.example.com/v2/*\",\"methods\":[\"GET\"]}]',1796163839356);\n"
    "COMMIT;\n";

static void test_migrates_a_node_db_from_before_versions(void **state) {
  fixture *f = *state;
  node_db_close(f->r);
  f->r = NULL;
  char *wal = xasprintf("%s-wal", f->path), *shm = xasprintf("%s-shm", f->path);
  unlink(f->path);
  unlink(wal);
  unlink(shm);
  free(wal);
  free(shm);
  sqlite3 *old;
  assert_int_equal(sqlite3_open(f->path, &old), SQLITE_OK);
  assert_int_equal(sqlite3_exec(old, "PRAGMA journal_mode=WAL", NULL, NULL, NULL), SQLITE_OK);
  assert_int_equal(sqlite3_exec(old, v0_dump, NULL, NULL, NULL), SQLITE_OK);
  sqlite3_close(old);

  char *err = NULL;
  assert_int_equal(node_db_open(f->path, &f->r, &err), 0);
  reopen(f); /* twice: the migration is done once */
  json_t *rows;
  assert_int_equal(node_db_worker_list(f->r, &rows), 0);
  assert_int_equal(json_array_size(rows), 2);
  json_t *hello = json_array_get(rows, 0);
  assert_string_equal(json_string_value(json_object_get(hello, "name")), "hello");
  assert_int_equal(int_of(hello, "version"), 2);
  assert_int_equal(int_of(hello, "created_at"), 1796163839266);
  assert_non_null(strstr(source_of(hello), "v2"));
  assert_int_equal(int_of(json_object_get(hello, "limits"), "wall_ms"), 30000);
  json_decref(rows);
  assert_string_equal(rules_text(f, "hello"),
                      "[{\"match\":\"https://api.example.com/v2/*\",\"methods\":[\"GET\"]}]");
  assert_int_equal(node_db_cordon_list(f->r, &rows), 0);
  assert_int_equal(json_array_size(rows), 1);
  assert_string_equal(json_string_value(json_object_get(json_array_get(rows, 0), "name")), "other");
  json_decref(rows);
  assert_int_equal(node_db_event_list(f->r, 1000, &rows), 0);
  assert_int_equal(json_array_size(rows), 6);
  assert_string_equal(json_string_value(json_object_get(json_array_get(rows, 5), "kind")), "drain");
  json_decref(rows);

  /* It goes on: the version counter, the rules, the history. */
  assert_int_equal(put_with(f, "hello", "v3", "[]", 1796163900000, NULL), 0);
  assert_int_equal(version_of(f, "hello"), 3);
  assert_string_equal(rules_text(f, "hello"), "[]");
  assert_int_equal(node_db_event_add(f->r, 1796163900001, "deploy", "hello", "{}", 1000), 7);

  sqlite3 *check;
  assert_int_equal(sqlite3_open(f->path, &check), SQLITE_OK);
  sqlite3_stmt *st;
  assert_int_equal(sqlite3_prepare_v2(check, "PRAGMA user_version", -1, &st, NULL), SQLITE_OK);
  assert_int_equal(sqlite3_step(st), SQLITE_ROW);
  assert_int_equal(sqlite3_column_int(st, 0), NODE_DB_SCHEMA_VERSION);
  sqlite3_finalize(st);
  sqlite3_close(check);
}

static void test_refuses_a_newer_schema(void **state) {
  fixture *f = *state;
  node_db_close(f->r);
  f->r = NULL;
  sqlite3 *db;
  assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
  assert_int_equal(sqlite3_exec(db, "PRAGMA user_version = 999", NULL, NULL, NULL), SQLITE_OK);
  sqlite3_close(db);
  char *err = NULL;
  assert_int_equal(node_db_open(f->path, &f->r, &err), -EPROTO);
  assert_null(f->r);
  assert_non_null(strstr(err, "schema version 999"));
  free(err);
}

static void test_open_failure(void **state) {
  (void)state;
  node_db *r = NULL;
  char *err = NULL;
  assert_int_equal(node_db_open("/nonexistent-dir/x/node.db", &r, &err), -EIO);
  assert_null(r);
  assert_non_null(err);
  assert_non_null(strstr(err, "/nonexistent-dir/x/node.db"));
  free(err);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_create_and_get, setup, teardown),
      cmocka_unit_test_setup_teardown(test_replace_increments_version, setup, teardown),
      cmocka_unit_test_setup_teardown(test_delete, setup, teardown),
      cmocka_unit_test_setup_teardown(test_list_sorted, setup, teardown),
      cmocka_unit_test_setup_teardown(test_survives_reopen, setup, teardown),
      cmocka_unit_test_setup_teardown(test_big_and_unicode_sources, setup, teardown),
      cmocka_unit_test_setup_teardown(test_deploy_stores_egress_rules, setup, teardown),
      cmocka_unit_test_setup_teardown(test_deploy_with_refused_rules_changes_nothing, setup, teardown),
      cmocka_unit_test_setup_teardown(test_deploy_whose_rules_cannot_be_stored_changes_nothing, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_cordons_and_events, setup, teardown),
      cmocka_unit_test_setup_teardown(test_migrates_a_node_db_from_before_versions, setup, teardown),
      cmocka_unit_test_setup_teardown(test_refuses_a_newer_schema, setup, teardown),
      cmocka_unit_test(test_open_failure),
  };
  return cmocka_run_group_tests_name("node_db", tests, NULL, NULL);
}
