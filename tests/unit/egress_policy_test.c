/* Unit tests for egress/: URL parsing, rule compilation, matching, templates. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "egress.h"

/* ---- helpers ---------------------------------------------------------- */

static egress_policy *policy(const char *json) {
  json_error_t jerr;
  json_t *rules = json_loads(json, 0, &jerr);
  assert_non_null(rules);
  char *err = NULL;
  egress_policy *p = egress_policy_parse(rules, &err);
  if (p == NULL) fail_msg("policy %s rejected: %s", json, err);
  json_decref(rules);
  return p;
}

/* The error for an invalid policy; asserts it mentions `needle`. */
static void rejected(const char *json, const char *needle) {
  json_t *rules = json_loads(json, 0, NULL);
  assert_non_null(rules);
  char *err = NULL;
  egress_policy *p = egress_policy_parse(rules, &err);
  if (p != NULL) fail_msg("policy %s was accepted", json);
  assert_non_null(err);
  if (strstr(err, needle) == NULL) fail_msg("error \"%s\" does not mention \"%s\"", err, needle);
  free(err);
  json_decref(rules);
}

static egress_verdict check(const egress_policy *p, const char *method, const char *url) {
  egress_url u;
  const char *err = NULL;
  if (egress_url_parse(url, strlen(url), &u, &err) != 0) fail_msg("%s: %s", url, err);
  egress_verdict v;
  const egress_rule *r = egress_policy_match(p, &u, method, &v);
  assert_true((r != NULL) == (v == EGRESS_ALLOW));
  egress_url_free(&u);
  return v;
}

static void url_ok(const char *in, int https, const char *host, int port, const char *target) {
  egress_url u;
  const char *err = NULL;
  if (egress_url_parse(in, strlen(in), &u, &err) != 0) fail_msg("%s: %s", in, err);
  assert_int_equal(u.https, https);
  assert_string_equal(u.host, host);
  assert_int_equal(u.port, port);
  assert_string_equal(u.target, target);
  egress_url_free(&u);
}

static void url_bad(const char *in, const char *needle) {
  egress_url u;
  const char *err = NULL;
  if (egress_url_parse(in, strlen(in), &u, &err) == 0) fail_msg("%s was accepted", in);
  if (strstr(err, needle) == NULL) fail_msg("%s: \"%s\" does not mention \"%s\"", in, err, needle);
}

/* ---- URLs ------------------------------------------------------------- */

static void test_url_parse(void **state) {
  (void)state;
  url_ok("https://API.Example.com/v1/x?y=1#frag", 1, "api.example.com", 443, "/v1/x?y=1");
  url_ok("http://example.com", 0, "example.com", 80, "/");
  url_ok("http://example.com?q", 0, "example.com", 80, "/?q");
  url_ok("http://example.com.:8080/a", 0, "example.com", 8080, "/a");
  url_ok("http://[::1]:9/", 0, "::1", 9, "/");
  url_ok("http://[0:0:0:0:0:ffff:7f00:1]/", 0, "::ffff:127.0.0.1", 80, "/");
  url_ok("http://127.0.0.1:3000/a", 0, "127.0.0.1", 3000, "/a");
  /* dot segments, percent-encoded ones included */
  url_ok("http://h/v1/../admin", 0, "h", 80, "/admin");
  url_ok("http://h/v1/%2e%2E/admin", 0, "h", 80, "/admin");
  url_ok("http://h/v1/.%2e/admin", 0, "h", 80, "/admin");
  url_ok("http://h/a/./b/.", 0, "h", 80, "/a/b/");
  url_ok("http://h/a/b/..", 0, "h", 80, "/a/");
  url_ok("http://h/../../x", 0, "h", 80, "/x");
  url_ok("http://h/a/..?q=/../", 0, "h", 80, "/?q=/../");
  url_ok("http://h//a", 0, "h", 80, "//a");

  /* encoded slashes are kept as they are, unless they hide a ".." */
  url_ok("http://h/projects/group%2Fname/x", 0, "h", 80, "/projects/group%2Fname/x");
  url_ok("http://h/a/..b%2fc/..x", 0, "h", 80, "/a/..b%2fc/..x");
  url_bad("http://h/public/..%2fprivate.txt", "encoded slash");
  url_bad("http://h/public/%2e%2e%2Fprivate.txt", "encoded slash");
  url_bad("http://h/public/x%2f..", "encoded slash");
  url_bad("http://h/public/x%5C..%5cy", "encoded slash");
  url_bad("http://h/public/.%2E%5cy", "encoded slash");

  url_bad("ftp://h/", "scheme");
  url_bad("/relative", "absolute");
  url_bad("http://user:pw@h/", "credentials");
  url_bad("http://h:0/", "port");
  url_bad("http://h:65536/", "port");
  url_bad("http://h:80x/", "port");
  url_bad("http:///x", "no host");
  url_bad("http://a..b/", "empty label");
  url_bad("http://h/a b", "percent-encoded");
  url_bad("http://h/a\\b", "percent-encoded");
  url_bad("http://0x7f.1/", "IPv4");
  url_bad("http://127.1/", "IPv4");
  url_bad("http://[::1/", "IPv6");
  url_bad("http://[zz::1]/", "IPv6");
  url_bad("http://ex%61mple.com/", "host");
}

static void test_url_resolve(void **state) {
  (void)state;
  egress_url base, u;
  const char *err = NULL;
  const char *b = "https://api.example.com:8443/v1/items/list?x=1";
  assert_int_equal(egress_url_parse(b, strlen(b), &base, &err), 0);
  struct {
    const char *ref, *want;
  } cases[] = {
      {"/other", "https://api.example.com:8443/other"},
      {"next", "https://api.example.com:8443/v1/items/next"},
      {"../up", "https://api.example.com:8443/v1/up"},
      {"?page=2", "https://api.example.com:8443/v1/items/list?page=2"},
      {"//cdn.example.com/a", "https://cdn.example.com/a"},
      {"http://elsewhere/x y", "http://elsewhere/x%20y"},
      {"  /trimmed  ", "https://api.example.com:8443/trimmed"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    if (egress_url_resolve(&base, cases[i].ref, strlen(cases[i].ref), &u, &err) != 0)
      fail_msg("%s: %s", cases[i].ref, err);
    char *s = egress_url_string(&u);
    assert_string_equal(s, cases[i].want);
    free(s);
    egress_url_free(&u);
  }
  assert_int_equal(egress_url_resolve(&base, "ftp://x/", 8, &u, &err), -1);
  egress_url_free(&base);
}

/* ---- rules ------------------------------------------------------------ */

static void test_exact_host_methods_paths(void **state) {
  (void)state;
  egress_policy *p = policy(
      "[{\"match\": \"https://api.example.com/v1/*\", \"methods\": [\"GET\", \"post\"]}]");
  assert_int_equal(check(p, "GET", "https://api.example.com/v1/items"), EGRESS_ALLOW);
  assert_int_equal(check(p, "POST", "https://api.example.com/v1/a/b/c?q=1"), EGRESS_ALLOW);
  assert_int_equal(check(p, "DELETE", "https://api.example.com/v1/items"), EGRESS_DENY_METHOD);
  assert_int_equal(check(p, "GET", "https://api.example.com/v2/items"), EGRESS_DENY_PATH);
  assert_int_equal(check(p, "GET", "https://api.example.com/v1"), EGRESS_DENY_PATH);
  assert_int_equal(check(p, "GET", "https://api.example.com/v1/../admin"), EGRESS_DENY_PATH);
  assert_int_equal(check(p, "GET", "http://api.example.com/v1/items"), EGRESS_DENY_HOST);
  assert_int_equal(check(p, "GET", "https://api.example.com:8443/v1/items"), EGRESS_DENY_HOST);
  assert_int_equal(check(p, "GET", "https://api.example.com:443/v1/items"), EGRESS_ALLOW);
  assert_int_equal(check(p, "GET", "https://API.EXAMPLE.COM./v1/items"), EGRESS_ALLOW);
  assert_int_equal(check(p, "GET", "https://evil.com/v1/items"), EGRESS_DENY_HOST);
  assert_int_equal(check(p, "GET", "https://api.example.com.evil.com/v1/x"), EGRESS_DENY_HOST);
  assert_int_equal(check(p, "GET", "https://xapi.example.com/v1/x"), EGRESS_DENY_HOST);
  egress_policy_free(p);
  /* The Fetch standard's forbidden methods, even where a rule names no methods or names them. */
  p = policy("[{\"match\": \"https://api.example.com/\"}]");
  assert_int_equal(check(p, "GET", "https://api.example.com/x"), EGRESS_ALLOW);
  assert_int_equal(check(p, "TRACE", "https://api.example.com/x"), EGRESS_DENY_METHOD);
  assert_int_equal(check(p, "track", "https://api.example.com/x"), EGRESS_DENY_METHOD);
  assert_int_equal(check(p, "CONNECT", "https://api.example.com/x"), EGRESS_DENY_METHOD);
  egress_policy_free(p);
  /* A rule cannot name them: it could never be used. */
  rejected("[{\"match\": \"https://b.example.com/\", \"methods\": [\"GET\", \"trace\"]}]",
           "trace is never allowed");
  /* A rule's host may end with the root's dot, as a URL's may. */
  p = policy("[{\"match\": \"http://localhost./\"}, {\"match\": \"https://*.example.org./\"}]");
  assert_int_equal(check(p, "GET", "http://localhost/x"), EGRESS_ALLOW);
  assert_int_equal(check(p, "GET", "http://localhost./x"), EGRESS_ALLOW);
  assert_int_equal(check(p, "GET", "https://a.example.org/x"), EGRESS_ALLOW);
  egress_policy_free(p);
  rejected("[{\"match\": \"http://localhost../\"}]", "empty label");
}

static void test_wildcard_hosts(void **state) {
  (void)state;
  egress_policy *p = policy("[{\"match\": \"https://*.example.com\"}]");
  assert_int_equal(check(p, "GET", "https://a.example.com/"), EGRESS_ALLOW);
  assert_int_equal(check(p, "GET", "https://a.b.example.com/x"), EGRESS_ALLOW);
  assert_int_equal(check(p, "GET", "https://example.com/"), EGRESS_DENY_HOST);   /* apex */
  assert_int_equal(check(p, "GET", "https://badexample.com/"), EGRESS_DENY_HOST);
  assert_int_equal(check(p, "GET", "https://example.com.evil.org/"), EGRESS_DENY_HOST);
  assert_int_equal(check(p, "GET", "https://a.example.co/"), EGRESS_DENY_HOST);
  assert_int_equal(check(p, "GET", "https://a.example.com.:443/"), EGRESS_ALLOW);
  egress_policy_free(p);
}

static void test_prefix_paths_and_ports(void **state) {
  (void)state;
  egress_policy *p = policy(
      "[{\"match\": \"http://127.0.0.1:8080/v1\"},"
      " {\"match\": \"http://[::1]:*/static/\"},"
      " {\"match\": \"https://files.example.com/*.json\"}]");
  assert_int_equal(check(p, "GET", "http://127.0.0.1:8080/v1"), EGRESS_ALLOW);
  assert_int_equal(check(p, "GET", "http://127.0.0.1:8080/v1/x"), EGRESS_ALLOW);
  assert_int_equal(check(p, "GET", "http://127.0.0.1:8080/v1?x"), EGRESS_ALLOW);
  assert_int_equal(check(p, "GET", "http://127.0.0.1:8080/v10"), EGRESS_DENY_PATH);
  assert_int_equal(check(p, "GET", "http://127.0.0.1:8081/v1"), EGRESS_DENY_HOST);
  assert_int_equal(check(p, "GET", "http://127.0.0.1/v1"), EGRESS_DENY_HOST);
  assert_int_equal(check(p, "GET", "http://[::1]:1234/static/a.css"), EGRESS_ALLOW);
  assert_int_equal(check(p, "GET", "http://[::1]/static/"), EGRESS_ALLOW);
  assert_int_equal(check(p, "GET", "http://[::1]/static"), EGRESS_DENY_PATH);
  assert_int_equal(check(p, "GET", "http://[0::1]/static/x"), EGRESS_ALLOW);
  assert_int_equal(check(p, "GET", "https://files.example.com/a/b.json"), EGRESS_ALLOW);
  assert_int_equal(check(p, "GET", "https://files.example.com/a.json.txt"), EGRESS_DENY_PATH);
  egress_policy_free(p);
  /* no rules, no policy: everything is denied */
  p = policy("[]");
  assert_int_equal(check(p, "GET", "https://api.example.com/"), EGRESS_DENY_HOST);
  egress_policy_free(p);
  assert_int_equal(check(NULL, "GET", "https://api.example.com/"), EGRESS_DENY_HOST);
}

static void test_first_matching_rule_wins(void **state) {
  (void)state;
  egress_policy *p = policy(
      "[{\"match\": \"https://api.example.com/admin/\", \"methods\": [\"GET\"]},"
      " {\"match\": \"https://api.example.com/\", \"inject\": {\"headers\": {\"X-A\": \"1\"}}}]");
  egress_url u;
  const char *err;
  const char *url = "https://api.example.com/admin/x";
  assert_int_equal(egress_url_parse(url, strlen(url), &u, &err), 0);
  egress_verdict v;
  const egress_rule *r = egress_policy_match(p, &u, "GET", &v);
  assert_ptr_equal(r, &p->rules[0]);
  r = egress_policy_match(p, &u, "POST", &v);
  assert_ptr_equal(r, &p->rules[1]);
  assert_int_equal(r->n_inject, 1);
  egress_url_free(&u);
  egress_policy_free(p);
}

static void test_invalid_rules(void **state) {
  (void)state;
  rejected("{}", "array");
  rejected("[5]", "egress[0]");
  rejected("[{}]", "match");
  rejected("[{\"match\": 3}]", "match");
  rejected("[{\"match\": \"ftp://x/\"}]", "scheme");
  rejected("[{\"match\": \"api.example.com/\"}]", "http");
  rejected("[{\"match\": \"https://*/\"}]", "host");
  rejected("[{\"match\": \"https://a.*.com/\"}]", "host");
  rejected("[{\"match\": \"https://*example.com/\"}]", "host");
  rejected("[{\"match\": \"https://*.1.2.3/\"}]", "IPv4");
  rejected("[{\"match\": \"https://h:0/\"}]", "port");
  rejected("[{\"match\": \"https://h:/\"}]", "port");
  rejected("[{\"match\": \"https://h/x?y\"}]", "query");
  rejected("[{\"match\": \"https://h/a/../b\"}]", "segments");
  rejected("[{\"match\": \"https://u:p@h/\"}]", "credentials");
  rejected("[{\"match\": \"https://h/\", \"methods\": []}]", "methods");
  rejected("[{\"match\": \"https://h/\", \"methods\": [\"GE T\"]}]", "methods");
  rejected("[{\"match\": \"https://h/\", \"extra\": 1}]", "unknown member \"extra\"");
  rejected("[{\"match\": \"https://h/\", \"inject\": {\"headers\": {\"Host\": \"x\"}}}]",
           "cannot be injected");
  rejected("[{\"match\": \"https://h/\", \"inject\": {\"headers\": {\"A\": \"${env:X}\"}}}]",
           "${secret:NAME}");
  rejected("[{\"match\": \"https://h/\", \"inject\": {\"headers\": {\"A\": \"${secret:X\"}}}]",
           "unterminated");
  rejected("[{\"match\": \"https://h/\", \"inject\": {\"headers\": {\"A\": \"${secret:1X}\"}}}]",
           "secret names");
  rejected("[{\"match\": \"https://h/\", \"inject\": {\"headers\": {\"A\": \"a\\r\\nB: c\"}}}]",
           "control");
  rejected("[{\"match\": \"https://h/\", \"inject\": {\"body\": {}}}]", "unknown member");
  rejected("[{\"match\": \"https://h/\", \"timeout_ms\": 0}]", "timeout_ms");
  rejected("[{\"match\": \"https://h/\", \"max_response_bytes\": \"1\"}]", "max_response_bytes");
  rejected("[{\"match\": \"https://h/\"}, {\"match\": \"https://[::1/\"}]", "egress[1]");
}

/* ---- templates -------------------------------------------------------- */

static const char *lookup(void *data, const char *name, size_t len) {
  (void)data;
  if (len == 5 && memcmp(name, "TOKEN", 5) == 0) return "s3cr3t";
  if (len == 4 && memcmp(name, "USER", 4) == 0) return "alice";
  return NULL;
}

static void test_templates(void **state) {
  (void)state;
  char *missing = NULL;
  char *v = egress_template_expand("Bearer ${secret:TOKEN}", lookup, NULL, &missing);
  assert_string_equal(v, "Bearer s3cr3t");
  free(v);
  v = egress_template_expand("${secret:USER}:${secret:TOKEN}$5", lookup, NULL, &missing);
  assert_string_equal(v, "alice:s3cr3t$5");
  free(v);
  v = egress_template_expand("plain", lookup, NULL, &missing);
  assert_string_equal(v, "plain");
  free(v);
  v = egress_template_expand("x ${secret:NOPE} y", lookup, NULL, &missing);
  assert_null(v);
  assert_string_equal(missing, "NOPE");
  free(missing);
  assert_null(egress_template_problem("Bearer ${secret:A_1}"));
  assert_non_null(egress_template_problem("${secret:}"));
  assert_true(egress_secret_name_valid("EXAMPLE_TOKEN", 13));
  assert_false(egress_secret_name_valid("9X", 2));
  assert_false(egress_secret_name_valid("A-B", 3));
  assert_true(egress_secret_value_valid("abc\tdef", 7));
  assert_false(egress_secret_value_valid("abc\ndef", 7));
}

/* Grants as a list of "SECRET:worker" pairs. */
static int granted(void *data, const char *secret, size_t len, const char *worker) {
  for (const char *const *g = data; *g; g++) {
    const char *colon = strchr(*g, ':');
    if ((size_t)(colon - *g) == len && strncmp(*g, secret, len) == 0 &&
        strcmp(colon + 1, worker) == 0)
      return 1;
  }
  return 0;
}

static void test_grants(void **state) {
  (void)state;
  const char *grants[] = {"SHOP_TOKEN:shop", "SHARED:shop", "SHARED:blog", NULL};
  egress_policy *p = policy(
      "[{\"match\": \"https://api.example.com/\", \"inject\": {\"headers\": "
      "{\"Authorization\": \"Bearer ${secret:SHOP_TOKEN}\", \"X-Key\": \"${secret:SHARED}\"}}},"
      " {\"match\": \"https://cdn.example.com/\"}]");
  assert_null(egress_policy_ungranted(p, "shop", granted, grants));
  /* the thief names another tenant's secret in its own rules */
  char *why = egress_policy_ungranted(p, "thief", granted, grants);
  assert_non_null(why);
  assert_string_equal(why, "secret SHOP_TOKEN is not granted to worker thief");
  free(why);
  /* one granted secret does not cover another in the same rule */
  why = egress_policy_ungranted(p, "blog", granted, grants);
  assert_string_equal(why, "secret SHOP_TOKEN is not granted to worker blog");
  free(why);
  egress_policy_free(p);
  /* rules without injections, and no rules, need no grants */
  p = policy("[{\"match\": \"https://api.example.com/\"}]");
  assert_null(egress_policy_ungranted(p, "thief", granted, grants));
  egress_policy_free(p);
  assert_null(egress_policy_ungranted(NULL, "thief", granted, grants));
  /* a name that is a prefix of a granted one is not granted */
  p = policy("[{\"match\": \"https://a.example.com/\", \"inject\": {\"headers\": "
             "{\"X\": \"${secret:SHOP}\"}}}]");
  why = egress_policy_ungranted(p, "shop", granted, grants);
  assert_string_equal(why, "secret SHOP is not granted to worker shop");
  free(why);
  egress_policy_free(p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_url_parse),
      cmocka_unit_test(test_url_resolve),
      cmocka_unit_test(test_exact_host_methods_paths),
      cmocka_unit_test(test_wildcard_hosts),
      cmocka_unit_test(test_prefix_paths_and_ports),
      cmocka_unit_test(test_first_matching_rule_wins),
      cmocka_unit_test(test_invalid_rules),
      cmocka_unit_test(test_templates),
      cmocka_unit_test(test_grants),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
