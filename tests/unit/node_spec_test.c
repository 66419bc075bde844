/* Unit tests for node/spec.c: what PUT /v1/workers/{name} accepts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "node.h"

static int parse(const char *ct, const char *body, json_t **spec, json_t **error) {
  return node_spec_parse(ct, (const uint8_t *)body, strlen(body), spec, error);
}

/* Expects `body` (application/json) to fail with `status`; `want` is found in
 * the error message or in the error body's JSON text (for details). */
static void expect_json_error(const char *body, int status, const char *want) {
  json_t *spec, *error;
  int rc = parse("application/json", body, &spec, &error);
  if (rc != status) fail_msg("%s: status %d, want %d", body, rc, status);
  assert_null(spec);
  assert_non_null(error);
  char *text = json_dumps(error, JSON_COMPACT);
  const char *msg = json_string_value(json_object_get(error, "error"));
  assert_non_null(msg);
  if (strstr(msg, want) == NULL && strstr(text, want) == NULL)
    fail_msg("%s: error %s lacks %s", body, text, want);
  free(text);
  json_decref(error);
}

static void test_javascript_body(void **state) {
  (void)state;
  const char *src = "export default { fetch() { return new Response('x'); } };";
  static const char *const types[] = {"application/javascript", "text/javascript",
                                      "application/javascript; charset=utf-8",
                                      "Application/JavaScript"};
  for (size_t i = 0; i < ARRAY_SIZE(types); i++) {
    json_t *spec, *error;
    assert_int_equal(parse(types[i], src, &spec, &error), 0);
    assert_null(error);
    assert_string_equal(json_string_value(json_object_get(spec, "main_module")), "index.js");
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(spec, "modules"), "index.js")), src);
    json_t *limits = json_object_get(spec, "limits");
    assert_int_equal(json_integer_value(json_object_get(limits, "cpu_ms")), 50);
    assert_int_equal(json_integer_value(json_object_get(limits, "memory_mb")), 128);
    assert_int_equal(json_object_size(json_object_get(spec, "bindings")), 0);
    json_decref(spec);
  }
}

static void test_javascript_problems(void **state) {
  (void)state;
  json_t *spec, *error;
  assert_int_equal(parse("application/javascript", "", &spec, &error), 400);
  json_decref(error);
  assert_int_equal(parse("application/javascript", "// \xff\xfe", &spec, &error), 400);
  assert_non_null(strstr(json_string_value(json_object_get(error, "error")), "UTF-8"));
  json_decref(error);

  size_t len = NODE_SCRIPT_MAX_BYTES + 1;
  char *big = xmalloc(len);
  memset(big, ' ', len);
  assert_int_equal(node_spec_parse("application/javascript", (uint8_t *)big, len, &spec, &error),
                   413);
  assert_string_equal(json_string_value(json_object_get(error, "error")), "script too large");
  assert_int_equal(json_integer_value(json_object_get(error, "limit_bytes")), 10485760);
  json_decref(error);
  /* exactly the limit is fine */
  assert_int_equal(
      node_spec_parse("application/javascript", (uint8_t *)big, len - 1, &spec, &error), 0);
  json_decref(spec);
  free(big);
}

static void test_content_types(void **state) {
  (void)state;
  json_t *spec, *error;
  assert_int_equal(parse(NULL, "x", &spec, &error), 415);
  json_decref(error);
  assert_int_equal(parse("text/plain", "x", &spec, &error), 415);
  assert_string_equal(json_string_value(json_object_get(error, "content_type")), "text/plain");
  json_decref(error);
  assert_int_equal(parse("application/javascriptx", "x", &spec, &error), 415);
  json_decref(error);
}

static void test_json_full(void **state) {
  (void)state;
  json_t *spec, *error;
  const char *body =
      "{\"main_module\": \"main.mjs\","
      " \"modules\": {\"main.mjs\": \"import './lib/a.js'\", \"lib/a.js\": \"export {}\"},"
      " \"limits\": {\"cpu_ms\": 100, \"memory_mb\": 64},"
      " \"bindings\": {\"GREETING\": {\"type\": \"text\", \"value\": \"hi\"},"
      "              \"CONF\": {\"type\": \"json\", \"value\": {\"a\": [1, 2]}},"
      "              \"NOTHING\": {\"type\": \"json\", \"value\": null}}}";
  assert_int_equal(parse("application/json; charset=utf-8", body, &spec, &error), 0);
  assert_string_equal(json_string_value(json_object_get(spec, "main_module")), "main.mjs");
  assert_int_equal(json_object_size(json_object_get(spec, "modules")), 2);
  json_t *limits = json_object_get(spec, "limits");
  assert_int_equal(json_integer_value(json_object_get(limits, "cpu_ms")), 100);
  assert_int_equal(json_integer_value(json_object_get(limits, "memory_mb")), 64);
  assert_int_equal(json_object_size(json_object_get(spec, "bindings")), 3);
  json_decref(spec);
}

static void test_json_defaults(void **state) {
  (void)state;
  json_t *spec, *error;
  /* one module: main_module may be left out; partial limits get the other default */
  assert_int_equal(parse("application/json",
                         "{\"modules\": {\"w.js\": \"x\"}, \"limits\": {\"cpu_ms\": 7}}", &spec,
                         &error),
                   0);
  assert_string_equal(json_string_value(json_object_get(spec, "main_module")), "w.js");
  json_t *limits = json_object_get(spec, "limits");
  assert_int_equal(json_integer_value(json_object_get(limits, "cpu_ms")), 7);
  assert_int_equal(json_integer_value(json_object_get(limits, "memory_mb")), 128);
  assert_true(json_is_object(json_object_get(spec, "bindings")));
  json_decref(spec);
}

static void test_json_errors(void **state) {
  (void)state;
  expect_json_error("{\"modules\": {", 400, "invalid JSON");
  expect_json_error("{\"modules\": {", 400, "\"position\"");
  expect_json_error("{\"modules\": {\"a.js\": \"x\"}, \"modules\": {}}", 400, "invalid JSON");
  expect_json_error("[1]", 400, "must be a JSON object");
  expect_json_error("", 400, "the body is empty");
  /* An empty request has no body buffer at all. */
  json_t *spec, *error;
  assert_int_equal(node_spec_parse("application/json", NULL, 0, &spec, &error), 400);
  assert_non_null(strstr(json_string_value(json_object_get(error, "error")), "empty"));
  json_decref(error);
  /* jansson refuses NUL in keys, so such module names never get further */
  expect_json_error("{\"modules\": {\"a\\u0000.js\": \"\"}}", 400, "invalid JSON");
  expect_json_error("{\"modules\": {\"a.js\": \"x\"}, \"colour\": \"blue\"}", 400, "colour");
  expect_json_error("{}", 400, "\"modules\"");
  expect_json_error("{\"modules\": {}}", 400, "\"modules\"");
  expect_json_error("{\"modules\": []}", 400, "\"modules\"");
  expect_json_error("{\"modules\": {\"a.js\": 42}}", 400, "a.js");
  expect_json_error("{\"modules\": {\"a.js\": \"x\", \"b.js\": \"y\"}}", 400, "main_module");
  expect_json_error("{\"main_module\": \"c.js\", \"modules\": {\"a.js\": \"x\"}}", 400, "c.js");
  expect_json_error("{\"main_module\": 1, \"modules\": {\"a.js\": \"x\"}}", 400, "main_module");
}

static void test_module_names(void **state) {
  (void)state;
  static const char *const bad[] = {"../a.js", "a/../b.js", "/abs.js", "./a.js", "a//b.js",
                                    "a.tsx",   "a",         ".js",     "a\\\\b.js", "a.js/",
                                    ".ts",     ""};
  for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
    char *body = xasprintf("{\"main_module\": \"x.js\", \"modules\": {\"x.js\": \"\", \"%s\": \"\"}}",
                           bad[i]);
    expect_json_error(body, 400, "module name");
    free(body);
  }
  static const char *const good[] = {"a.js", "a.mjs", "lib/util.js", "deep/er/x.mjs", "a..b.js",
                                     ".hidden.js", "a.ts", "src/index.ts", "a.mts"};
  for (size_t i = 0; i < ARRAY_SIZE(good); i++) {
    char *body = xasprintf("{\"modules\": {\"%s\": \"\"}}", good[i]);
    json_t *spec, *error;
    if (parse("application/json", body, &spec, &error) != 0) fail_msg("rejected %s", good[i]);
    json_decref(spec);
    free(body);
  }
}

/* A .wasm module is {"wasm": base64}; the base64 is its source. */
static void test_wasm_modules(void **state) {
  (void)state;
  json_t *spec, *error;
  assert_int_equal(parse("application/json",
                         "{\"main_module\": \"x.js\", \"modules\": {\"x.js\": \"\", "
                         "\"lib/a.wasm\": {\"wasm\": \"AGFzbQEAAAA=\"}}}",
                         &spec, &error),
                   0);
  /* The worker process decodes and compiles the base64 itself. */
  const char *src =
      json_string_value(json_object_get(json_object_get(spec, "modules"), "lib/a.wasm"));
  assert_non_null(src);
  assert_string_equal(src, "AGFzbQEAAAA=");
  json_decref(spec);
  static const char *const bad[][2] = {
      {"\"AGFzbQEAAAA=\"", "a .wasm module is an object"},
      {"{\"wasm\": 1}", "a .wasm module is an object"},
      {"{\"wasm\": \"AA==\", \"js\": \"\"}", "a .wasm module is an object"},
      {"{\"wasm\": \"\"}", "standard base64"},
      {"{\"wasm\": \"AGFzbQEAAAA\"}", "standard base64"},
      {"{\"wasm\": \"AGFz bQEAAAA=\"}", "standard base64"},
      {"{\"wasm\": \"AG=zbQEAAAA=\"}", "standard base64"},
  };
  for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
    char *body = xasprintf("{\"main_module\": \"x.js\", \"modules\": {\"x.js\": \"\", "
                           "\"a.wasm\": %s}}",
                           bad[i][0]);
    expect_json_error(body, 400, bad[i][1]);
    free(body);
  }
  /* Only .wasm names take an object. */
  expect_json_error("{\"modules\": {\"x.js\": {\"wasm\": \"AA==\"}}}", 400,
                    "the source must be a string");
}

static void test_limits(void **state) {
  (void)state;
  expect_json_error("{\"modules\": {\"a.js\": \"\"}, \"limits\": {\"cpu_ms\": 0}}", 400,
                    "\"cpu_ms\": must be an integer between 1 and 30000");
  expect_json_error("{\"modules\": {\"a.js\": \"\"}, \"limits\": {\"cpu_ms\": -5}}", 400, "cpu_ms");
  expect_json_error("{\"modules\": {\"a.js\": \"\"}, \"limits\": {\"cpu_ms\": 30001}}", 400, "cpu_ms");
  expect_json_error("{\"modules\": {\"a.js\": \"\"}, \"limits\": {\"cpu_ms\": 1.5}}", 400, "cpu_ms");
  expect_json_error("{\"modules\": {\"a.js\": \"\"}, \"limits\": {\"memory_mb\": 7}}", 400,
                    "\"memory_mb\": must be an integer between 8 and 4096");
  expect_json_error("{\"modules\": {\"a.js\": \"\"}, \"limits\": {\"memory_mb\": \"64\"}}", 400,
                    "memory_mb");
  expect_json_error("{\"modules\": {\"a.js\": \"\"}, \"limits\": {\"wall_ms\": 5}}", 400, "wall_ms");
  expect_json_error("{\"modules\": {\"a.js\": \"\"}, \"limits\": 5}", 400, "\"limits\"");
}

static void test_bindings(void **state) {
  (void)state;
  expect_json_error("{\"modules\": {\"a.js\": \"\"}, \"bindings\": []}", 400, "\"bindings\"");
  expect_json_error("{\"modules\": {\"a.js\": \"\"}, \"bindings\": {\"DB\": {\"type\": \"d1\"}}}",
                    400, "bindings: \\\"DB\\\": unsupported type");
  expect_json_error("{\"modules\": {\"a.js\": \"\"}, \"bindings\": {\"T\": {\"type\": \"text\", "
                    "\"value\": 1}}}",
                    400, "\"binding\":\"T\"");
  expect_json_error("{\"modules\": {\"a.js\": \"\"}, \"bindings\": {\"J\": {\"type\": \"json\"}}}",
                    400, "\"binding\":\"J\"");
  expect_json_error("{\"modules\": {\"a.js\": \"\"}, \"bindings\": {\"X\": \"plain\"}}", 400,
                    "\"binding\":\"X\"");
  expect_json_error("{\"modules\": {\"a.js\": \"\"}, \"bindings\": {\"X\": {\"type\": \"text\", "
                    "\"value\": \"v\", \"secret\": true}}}",
                    400, "\"binding\":\"X\"");
  expect_json_error("{\"modules\": {\"a.js\": \"\"}, \"bindings\": {\"1bad\": {\"type\": \"text\", "
                    "\"value\": \"v\"}}}",
                    400, "1bad");
  expect_json_error("{\"modules\": {\"a.js\": \"\"}, \"bindings\": {\"a-b\": {\"type\": \"text\", "
                    "\"value\": \"v\"}}}",
                    400, "a-b");
}

static void test_total_size(void **state) {
  (void)state;
  /* two modules of 5 MiB + 1 each: each fits, together they do not */
  size_t half = NODE_SCRIPT_MAX_BYTES / 2 + 1;
  char *src = xmalloc(half + 1);
  memset(src, 'y', half);
  src[half] = '\0';
  json_t *doc = json_pack("{s:s, s:{s:s, s:s}}", "main_module", "a.js", "modules", "a.js", src,
                          "b.js", src);
  char *body = json_dumps(doc, JSON_COMPACT);
  json_t *spec, *error;
  assert_int_equal(parse("application/json", body, &spec, &error), 413);
  assert_string_equal(json_string_value(json_object_get(error, "error")), "script too large");
  assert_int_equal(json_integer_value(json_object_get(error, "limit_bytes")),
                   NODE_SCRIPT_MAX_BYTES);
  json_decref(error);
  free(body);
  json_decref(doc);
  free(src);
}

static void test_iso8601(void **state) {
  (void)state;
  char out[32];
  node_iso8601(0, out);
  assert_string_equal(out, "1970-01-01T00:00:00.000Z");
  node_iso8601(1767225600123LL, out);
  assert_string_equal(out, "2026-01-01T00:00:00.123Z");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_javascript_body),
      cmocka_unit_test(test_javascript_problems),
      cmocka_unit_test(test_content_types),
      cmocka_unit_test(test_json_full),
      cmocka_unit_test(test_json_defaults),
      cmocka_unit_test(test_json_errors),
      cmocka_unit_test(test_module_names),
      cmocka_unit_test(test_wasm_modules),
      cmocka_unit_test(test_limits),
      cmocka_unit_test(test_bindings),
      cmocka_unit_test(test_total_size),
      cmocka_unit_test(test_iso8601),
  };
  return cmocka_run_group_tests_name("node_spec", tests, NULL, NULL);
}
