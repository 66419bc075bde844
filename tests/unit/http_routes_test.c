/* Unit tests for http/routes.c: the ingress route table, its patterns and
 * which route wins. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "base.h"
#include "http.h"

static http_routes *table(const char *json) {
  json_t *routes = json_loads(json, 0, NULL);
  assert_non_null(routes);
  char *err = NULL;
  http_routes *t = http_routes_parse(routes, &err);
  json_decref(routes);
  if (t == NULL) fail_msg("%s: %s", json, err);
  return t;
}

static void expect(const http_routes *t, const char *host, const char *path, const char *worker) {
  const char *got = http_routes_match(t, host, strlen(host), path);
  if (worker == NULL && got == NULL) return;
  if (worker == NULL || got == NULL || strcmp(worker, got) != 0)
    fail_msg("%s%s: expected %s, got %s", host, path, worker ? worker : "none", got ? got : "none");
}

static void refused(const char *json, const char *why) {
  json_t *routes = json_loads(json, 0, NULL);
  char *err = NULL;
  http_routes *t = http_routes_parse(routes, &err);
  json_decref(routes);
  if (t) fail_msg("%s: accepted", json);
  if (strstr(err, why) == NULL) fail_msg("%s: %s (expected %s)", json, err, why);
  free(err);
}

static void test_the_most_specific_wins(void **state) {
  (void)state;
  http_routes *t = table(
      "[{\"pattern\": \"*\", \"worker\": \"any\"},"
      " {\"pattern\": \"*/w/*\", \"worker\": \"by-path\"},"
      " {\"pattern\": \"*.example.com\", \"worker\": \"wild\"},"
      " {\"pattern\": \"*.api.example.com\", \"worker\": \"wilder\"},"
      " {\"pattern\": \"api.example.com\", \"worker\": \"api\"},"
      " {\"pattern\": \"api.example.com/w/*\", \"worker\": \"w\"},"
      " {\"pattern\": \"api.example.com/w/exact\", \"worker\": \"exact\"},"
      " {\"pattern\": \"api.example.com/w/exact*\", \"worker\": \"exact-prefix\"}]");
  assert_int_equal(http_routes_count(t), 8);
  expect(t, "api.example.com", "/", "api");
  expect(t, "API.Example.COM", "/", "api");
  expect(t, "api.example.com", "/w/x?q=1", "w");
  expect(t, "api.example.com", "/w/exact", "exact");
  expect(t, "api.example.com", "/w/exact?x", "exact");
  expect(t, "api.example.com", "/w/exactly", "exact-prefix");
  expect(t, "api.example.com", "/wx", "api");
  expect(t, "v2.api.example.com", "/", "wilder");
  expect(t, "www.example.com", "/w/x", "wild"); /* the host first, then the path */
  expect(t, "example.com", "/", "any");         /* a wildcard leaves the apex out */
  expect(t, "127.0.0.1", "/w/x", "by-path");
  expect(t, "other.test", "/", "any");
  http_routes_free(t);
}

static void test_no_match(void **state) {
  (void)state;
  http_routes *t = table("[{\"pattern\": \"a.test/only\", \"worker\": \"a\"}]");
  expect(t, "a.test", "/only", "a");
  expect(t, "a.test", "/", NULL);
  expect(t, "b.test", "/only", NULL);
  http_routes_free(t);
  expect(NULL, "a.test", "/", NULL);
  t = table("[]");
  assert_int_equal(http_routes_count(t), 0);
  expect(t, "a.test", "/", NULL);
  http_routes_free(t);
}

static void test_bad_routes(void **state) {
  (void)state;
  refused("{}", "must be an array");
  refused("[1]", "routes[0]: must be");
  refused("[{\"pattern\": \"a.test\"}]", "routes[0].worker");
  refused("[{\"pattern\": \"a.test\", \"worker\": \"Bad_Name\"}]", "routes[0].worker");
  refused("[{\"worker\": \"a\"}]", "routes[0].pattern: must be a string");
  refused("[{\"pattern\": \"a.test\", \"worker\": \"a\", \"zone\": 1}]", "unknown key \"zone\"");
  refused("[{\"pattern\": \"\", \"worker\": \"a\"}]", "1 to 512 bytes");
  refused("[{\"pattern\": \"/w/\", \"worker\": \"a\"}]", "starts with a host");
  refused("[{\"pattern\": \"a*.test\", \"worker\": \"a\"}]", "letters, digits");
  refused("[{\"pattern\": \"a..test\", \"worker\": \"a\"}]", "empty labels");
  refused("[{\"pattern\": \"a.test/*/x\", \"worker\": \"a\"}]", "comes last only");
  refused("[{\"pattern\": \"a.test/x?y\", \"worker\": \"a\"}]", "no query");
  refused("[{\"pattern\": \"a.test\", \"worker\": \"a\"}, {\"pattern\": \"A.test\", \"worker\": \"b\"}]",
          "routes[1].pattern: the same pattern as routes[0]");
  json_t *many = json_array();
  for (int i = 0; i <= HTTP_ROUTES_MAX; i++)
    json_array_append_new(many, json_pack("{s:s, s:s}", "pattern", "*", "worker", "a"));
  char *err = NULL;
  assert_null(http_routes_parse(many, &err));
  assert_non_null(strstr(err, "too many routes"));
  free(err);
  json_decref(many);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_the_most_specific_wins),
      cmocka_unit_test(test_no_match),
      cmocka_unit_test(test_bad_routes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
