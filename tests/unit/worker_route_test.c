/* Unit tests for worker/route.c: which worker a request names, and its URL. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "base.h"
#include "worker.h"

/* A request as the HTTP server hands it over: a target and headers. */
typedef struct fake_request {
  http_request req;
  http_header headers[4];
} fake_request;

static http_request *request(fake_request *f, const char *target, const char *host,
                             const char *second_host) {
  memset(f, 0, sizeof *f);
  f->req.method = (char *)"GET";
  f->req.target = (char *)target;
  f->req.headers = f->headers;
  f->headers[f->req.n_headers++] = (http_header){(char *)"accept", (char *)"*/*"};
  if (host) f->headers[f->req.n_headers++] = (http_header){(char *)"Host", (char *)host};
  if (second_host) f->headers[f->req.n_headers++] = (http_header){(char *)"host", (char *)second_host};
  return &f->req;
}

/* The worker name and URL a request routes to; NULL name: no worker. */
static void expect_route(const char *target, const char *host, const char *name,
                         const char *url) {
  fake_request f;
  route r;
  char *err = route_find(request(&f, target, host, NULL), &r);
  if (err) fail_msg("%s %s: %s", host, target, err);
  char got[64];
  size_t len = 0;
  int rc = route_worker_name(&r, got, &len);
  if (name == NULL) {
    if (rc == 0) fail_msg("%s %s names worker %s, want none", host, target, got);
    return;
  }
  if (rc != 0) fail_msg("%s %s names no worker, want %s", host, target, name);
  assert_string_equal(got, name);
  assert_int_equal(len, strlen(name));
  char *u = route_url(&r);
  assert_string_equal(u, url);
  free(u);
}

/* route_find refuses the request with a message holding `want`. */
static void expect_refused(const char *target, const char *host, const char *second_host,
                           const char *want) {
  fake_request f;
  route r;
  char *err = route_find(request(&f, target, host, second_host), &r);
  if (err == NULL) fail_msg("%s %s: routed, want refused (%s)", host ? host : "-", target, want);
  if (strstr(err, want) == NULL) fail_msg("error \"%s\" lacks \"%s\"", err, want);
  free(err);
}

static void test_first_label_names_the_worker(void **state) {
  (void)state;
  expect_route("/", "hello.localhost", "hello", "http://hello.localhost/");
  expect_route("/a?b=1", "hello.example.com:8080", "hello", "http://hello.example.com:8080/a?b=1");
  expect_route("/", "hello", "hello", "http://hello/");
  expect_route("/", "hello:3000", "hello", "http://hello:3000/");
  /* Host names are case-insensitive; worker names and URLs lowercase. */
  expect_route("/X", "HeLLo.LocalHost", "hello", "http://hello.localhost/X");
  /* Surrounding spaces and tabs of the header value go. */
  expect_route("/", " \thello.localhost\t ", "hello", "http://hello.localhost/");
}

static void test_addresses_name_no_worker(void **state) {
  (void)state;
  expect_route("/", "127.0.0.1:8080", NULL, NULL);
  expect_route("/", "[::1]:8080", NULL, NULL);
  /* A first label that is no worker name. */
  expect_route("/", "-bad.localhost", NULL, NULL);
  expect_route("/",
               "a1234567890123456789012345678901234567890123456789012345678901234.localhost",
               NULL, NULL);
}

static void test_refused(void **state) {
  (void)state;
  expect_refused("/", NULL, NULL, "missing Host header");
  expect_refused("/", "a.localhost", "b.localhost", "more than one Host header");
  expect_refused("/", "a b", NULL, "invalid Host header");
  expect_refused("http://a b/", "a.localhost", NULL, "invalid authority in the request target");
}

static void test_absolute_form_wins(void **state) {
  (void)state;
  /* RFC 9112 3.2.2: the target's authority counts, not Host (still checked). */
  expect_route("http://other.localhost/p", "hello.localhost", "other", "http://other.localhost/p");
  expect_route("HTTPS://other.localhost?q", "hello.localhost", "other", "http://other.localhost/?q");
  expect_route("http://other.localhost", "hello.localhost", "other", "http://other.localhost/");
}

static void test_url(void **state) {
  (void)state;
  /* Port 80 is http's own, leading zeros go. */
  expect_route("/", "hello.localhost:80", "hello", "http://hello.localhost/");
  expect_route("/", "hello.localhost:0080", "hello", "http://hello.localhost/");
  expect_route("/", "hello.localhost:08081", "hello", "http://hello.localhost:8081/");
  /* Asterisk- and authority-form name no resource. */
  expect_route("*", "hello.localhost", "hello", "http://hello.localhost/");
  /* Bytes past ASCII are percent-encoded, one by one (valid UTF-8 or not). */
  expect_route("/caf\xc3\xa9", "hello.localhost", "hello", "http://hello.localhost/caf%C3%A9");
  expect_route("/\xff", "hello.localhost", "hello", "http://hello.localhost/%FF");
}

static void test_hop_by_hop(void **state) {
  (void)state;
  static const char *const hop[] = {"Connection", "keep-alive", "Transfer-Encoding",
                                    "content-length", "TE", "upgrade", "expect",
                                    "proxy-connection", "trailer"};
  for (size_t i = 0; i < ARRAY_SIZE(hop); i++)
    if (!route_hop_by_hop(hop[i])) fail_msg("%s is hop-by-hop", hop[i]);
  static const char *const end_to_end[] = {"host", "content-type", "x-edgenode-hop-te",
                                           "connections", ""};
  for (size_t i = 0; i < ARRAY_SIZE(end_to_end); i++)
    if (route_hop_by_hop(end_to_end[i])) fail_msg("%s is end-to-end", end_to_end[i]);
}

/* CDN-Loop (RFC 8586): the largest hops= of the "edgenode" entries. */
static void test_loop_hops(void **state) {
  (void)state;
  struct {
    const char *value;
    int hops;
  } cases[] = {
      {NULL, 0},
      {"edgenode; hops=3", 3},
      {"other-cdn, edgenode; hops=2", 2},
      {"edgenode; hops=5, edgenode; hops=0", 5}, /* a lower count cannot reset it */
      {"EdgeNode;hops=7", 7},
      {"edgenode", 1},                  /* an entry without a count is one pass */
      {"edgenodes; hops=9", 0},         /* another CDN's name */
      {"other; hops=9", 0},
      {"edgenode; hops=abc", 1},   /* ours, its count unreadable: one pass */
      {"edgenode; hops=99999999999", 1000}, /* capped */
      {",,, ,", 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    fake_request f;
    http_request *req = request(&f, "/", "w.localhost", NULL);
    if (cases[i].value)
      f.headers[f.req.n_headers++] = (http_header){(char *)"CDN-Loop", (char *)cases[i].value};
    assert_int_equal(route_loop_hops(req), cases[i].hops);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_loop_hops),
      cmocka_unit_test(test_first_label_names_the_worker),
      cmocka_unit_test(test_addresses_name_no_worker),
      cmocka_unit_test(test_refused),
      cmocka_unit_test(test_absolute_form_wins),
      cmocka_unit_test(test_url),
      cmocka_unit_test(test_hop_by_hop),
  };
  return cmocka_run_group_tests_name("worker_route", tests, NULL, NULL);
}
