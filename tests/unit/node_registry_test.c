/* Unit tests for node/registry.c: the SQLite registry of deployed workers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "node.h"

typedef struct fixture {
  char dir[64];
  char *path;
  node_registry *r;
} fixture;

static int setup(void **state) {
  fixture *f = xcalloc(1, sizeof *f);
  strcpy(f->dir, "/tmp/node_registry_test_XXXXXX");
  if (mkdtemp(f->dir) == NULL) return -1;
  f->path = xasprintf("%s/node.db", f->dir);
  char *err = NULL;
  if (node_registry_open(f->path, &f->r, &err) != 0) {
    fprintf(stderr, "open: %s\n", err);
    return -1;
  }
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  node_registry_close(f->r);
  char *cmd = xasprintf("rm -rf '%s'", f->dir);
  int rc = system(cmd);
  free(cmd);
  free(f->path);
  free(f);
  return rc == 0 ? 0 : -1;
}

static void reopen(fixture *f) {
  node_registry_close(f->r);
  char *err = NULL;
  assert_int_equal(node_registry_open(f->path, &f->r, &err), 0);
}

/* Stores a one-module worker whose source is `src`; returns node_registry_put's result. */
static int put(fixture *f, const char *name, const char *src, int64_t now, json_t **row) {
  json_t *modules = json_pack("{s:s}", "index.js", src);
  json_t *bindings = json_pack("{s:{s:s, s:s}}", "GREETING", "type", "text", "value", "hi");
  json_t *limits = json_pack("{s:i, s:i}", "cpu_ms", 50, "memory_mb", 128);
  int rc = node_registry_put(f->r, name, "index.js", modules, bindings, limits, now, row);
  json_decref(modules);
  json_decref(bindings);
  json_decref(limits);
  return rc;
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

  assert_int_equal(node_registry_get(f->r, "hello", &row), 0);
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

  assert_int_equal(node_registry_get(f->r, "absent", &row), -ENOENT);
}

static void test_replace_increments_version(void **state) {
  fixture *f = *state;
  json_t *row;
  assert_int_equal(put(f, "app", "v1", 1000, NULL), 1);
  assert_int_equal(put(f, "app", "v2", 2000, NULL), 0);
  assert_int_equal(put(f, "app", "v3", 3000, &row), 0);
  assert_int_equal(int_of(row, "version"), 3);
  json_decref(row);
  assert_int_equal(node_registry_get(f->r, "app", &row), 0);
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
  assert_int_equal(node_registry_delete(f->r, "gone"), 0);
  assert_int_equal(node_registry_get(f->r, "gone", &row), -ENOENT);
  assert_int_equal(node_registry_delete(f->r, "gone"), -ENOENT);
  assert_int_equal(node_registry_delete(f->r, "never"), -ENOENT);
  /* a redeploy after a delete is a create, and never reuses a version */
  assert_int_equal(put(f, "gone", "v3", 5000, &row), 1);
  assert_int_equal(int_of(row, "version"), 3);
  assert_int_equal(int_of(row, "created_at"), 5000);
  json_decref(row);
}

static void test_list_sorted(void **state) {
  fixture *f = *state;
  json_t *rows;
  assert_int_equal(node_registry_list(f->r, &rows), 0);
  assert_int_equal(json_array_size(rows), 0);
  json_decref(rows);
  const char *names[] = {"zeta", "alpha", "m-1", "0first", "beta"};
  for (size_t i = 0; i < ARRAY_SIZE(names); i++)
    assert_int_equal(put(f, names[i], names[i], (int64_t)i, NULL), 1);
  assert_int_equal(node_registry_delete(f->r, "beta"), 0);
  assert_int_equal(node_registry_list(f->r, &rows), 0);
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
  assert_int_equal(node_registry_delete(f->r, "temp"), 0);
  reopen(f);
  assert_int_equal(node_registry_get(f->r, "durable", &row), 0);
  assert_string_equal(source_of(row), "v2");
  assert_int_equal(int_of(row, "version"), 2);
  json_decref(row);
  assert_int_equal(node_registry_get(f->r, "temp", &row), -ENOENT);
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
  assert_int_equal(node_registry_get(f->r, "big", &row), 0);
  assert_string_equal(source_of(row), big);
  json_decref(row);
  free(big);
}

static void test_open_failure(void **state) {
  (void)state;
  node_registry *r = NULL;
  char *err = NULL;
  assert_int_equal(node_registry_open("/nonexistent-dir/x/node.db", &r, &err), -EIO);
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
      cmocka_unit_test(test_open_failure),
  };
  return cmocka_run_group_tests_name("node_registry", tests, NULL, NULL);
}
