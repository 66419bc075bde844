/* Unit tests for node/config.c: defaults, flags, the config file, and that
 * every rejection names the offending flag or key. */
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

/* ---- helpers ---------------------------------------------------------- */

/* Parses argv (NULL-terminated, program name added) over fresh defaults. */
static int parse(node_config *c, char **err, ...) {
  char *argv[64];
  int argc = 0;
  argv[argc++] = "edgenode";
  va_list ap;
  va_start(ap, err);
  char *a;
  while ((a = va_arg(ap, char *)) != NULL) argv[argc++] = a;
  va_end(ap);
  argv[argc] = NULL;
  node_config_init(c);
  *err = NULL;
  return node_config_parse(c, argc, argv, err);
}

/* Expects argv to be rejected with a message containing `want`. */
#define EXPECT_FLAG_ERROR(want, ...)                                              \
  do {                                                                            \
    node_config c_;                                                               \
    char *err_;                                                                   \
    assert_int_equal(parse(&c_, &err_, __VA_ARGS__, NULL), NODE_CONFIG_ERROR);    \
    assert_non_null(err_);                                                        \
    if (strstr(err_, want) == NULL) fail_msg("\"%s\" lacks \"%s\"", err_, want);  \
    free(err_);                                                                   \
    node_config_free(&c_);                                                        \
  } while (0)

static int apply(node_config *c, const char *json, char **err) {
  node_config_init(c);
  *err = NULL;
  return node_config_apply_json(c, json, strlen(json), "test.json", err);
}

static void expect_file_error(const char *json, const char *want) {
  node_config c;
  char *err;
  assert_int_equal(apply(&c, json, &err), NODE_CONFIG_ERROR);
  assert_non_null(err);
  if (strstr(err, want) == NULL) fail_msg("\"%s\" lacks \"%s\" (config %s)", err, want, json);
  assert_non_null(strstr(err, "edgenode: config: "));
  free(err);
  node_config_free(&c);
}

/* Writes `text` to a fresh temporary file; returns its path (caller frees and unlinks). */
static char *temp_file(const char *text) {
  char *path = xstrdup("/tmp/node_config_test_XXXXXX");
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  size_t len = strlen(text);
  assert_int_equal(write(fd, text, len), (ssize_t)len);
  close(fd);
  return path;
}

/* ---- tests ------------------------------------------------------------- */

static void test_defaults(void **state) {
  (void)state;
  node_config c;
  char *err;
  assert_int_equal(parse(&c, &err, NULL), NODE_CONFIG_OK);
  assert_string_equal(c.listen_host, "127.0.0.1");
  assert_int_equal(c.listen_port, 8080);
  assert_string_equal(c.control_host, "127.0.0.1");
  assert_int_equal(c.control_port, 8081);
  assert_string_equal(c.data_dir, "./data");
  assert_null(c.config_file);
  assert_null(c.control_token_file);
  assert_true(c.workers >= 1 && c.workers <= NODE_CONFIG_MAX_WORKERS);
  assert_int_equal(c.workers, (int)uv_available_parallelism() > NODE_CONFIG_MAX_WORKERS
                                  ? NODE_CONFIG_MAX_WORKERS
                                  : (int)uv_available_parallelism());
  assert_false(c.dev);
  assert_int_equal(c.grace_ms, 10000);
  assert_int_equal(c.max_body_mb, 10);
  assert_int_equal(c.idle_timeout_s, 300);
  assert_int_equal(c.compact_idle_s, 5);
  assert_int_equal(c.log_level, LOG_INFO);
  node_config_free(&c);
}

static void test_every_flag(void **state) {
  (void)state;
  node_config c;
  char *err;
  assert_int_equal(parse(&c, &err, "--listen", "0.0.0.0:9000", "--control", "[::1]:0", "--data",
                         "/srv/edge", "--workers", "3", "--dev", "--control-token-file", "tok",
                         "--grace-ms", "0", "--max-body-mb", "64", "--log-level", "debug",
                         "--idle-timeout-s", "600", "--compact-idle-s", "60", NULL),
                   NODE_CONFIG_OK);
  assert_string_equal(c.listen_host, "0.0.0.0");
  assert_int_equal(c.listen_port, 9000);
  assert_string_equal(c.control_host, "::1");
  assert_int_equal(c.control_port, 0);
  assert_string_equal(c.data_dir, "/srv/edge");
  assert_int_equal(c.workers, 3);
  assert_true(c.dev);
  assert_string_equal(c.control_token_file, "tok");
  assert_int_equal(c.grace_ms, 0);
  assert_int_equal(c.max_body_mb, 64);
  assert_int_equal(c.idle_timeout_s, 600);
  assert_int_equal(c.compact_idle_s, 60);
  assert_int_equal(c.log_level, LOG_DEBUG);
  node_config_free(&c);
}

static void test_equals_form_and_last_wins(void **state) {
  (void)state;
  node_config c;
  char *err;
  assert_int_equal(parse(&c, &err, "--workers=2", "--data=a", "--data", "b", "--log-level=warn",
                         NULL),
                   NODE_CONFIG_OK);
  assert_int_equal(c.workers, 2);
  assert_string_equal(c.data_dir, "b");
  assert_int_equal(c.log_level, LOG_WARN);
  node_config_free(&c);
}

static void test_help_and_version(void **state) {
  (void)state;
  node_config c;
  char *err;
  assert_int_equal(parse(&c, &err, "--help", NULL), NODE_CONFIG_HELP);
  node_config_free(&c);
  /* --help wins even after an otherwise bad flag value */
  assert_int_equal(parse(&c, &err, "--workers", "0", "--help", NULL), NODE_CONFIG_HELP);
  node_config_free(&c);
  assert_int_equal(parse(&c, &err, "--version", NULL), NODE_CONFIG_VERSION);
  node_config_free(&c);
  const char *usage = node_config_usage();
  static const char *const flags[] = {"--listen", "--control", "--data", "--workers", "--config",
                                      "--dev", "--control-token-file", "--grace-ms",
                                      "--max-body-mb", "--idle-timeout-s", "--compact-idle-s",
                                      "--log-level", "--help", "--version"};
  for (size_t i = 0; i < ARRAY_SIZE(flags); i++) assert_non_null(strstr(usage, flags[i]));
}

static void test_bad_flags_name_the_flag(void **state) {
  (void)state;
  EXPECT_FLAG_ERROR("edgenode: --workers: must be an integer between 1 and 256", "--workers", "0");
  EXPECT_FLAG_ERROR("--workers: must be an integer between 1 and 256", "--workers", "257");
  EXPECT_FLAG_ERROR("--workers: must be an integer", "--workers", "two");
  EXPECT_FLAG_ERROR("--workers: must be an integer", "--workers", "2x");
  EXPECT_FLAG_ERROR("--workers: must be an integer", "--workers", "");
  EXPECT_FLAG_ERROR("--workers: missing value", "--workers");
  EXPECT_FLAG_ERROR("--listen: must be ADDR:PORT", "--listen", "localhost:80");
  EXPECT_FLAG_ERROR("--listen: must be ADDR:PORT", "--listen", "127.0.0.1");
  EXPECT_FLAG_ERROR("--listen: must be ADDR:PORT", "--listen", "127.0.0.1:65536");
  EXPECT_FLAG_ERROR("--control: must be ADDR:PORT", "--control", "1.2.3.4:-1");
  EXPECT_FLAG_ERROR("--data: must not be empty", "--data", "");
  EXPECT_FLAG_ERROR("--control-token-file: must not be empty", "--control-token-file", "");
  EXPECT_FLAG_ERROR("--grace-ms: must be an integer between 0 and 3600000", "--grace-ms", "-1");
  EXPECT_FLAG_ERROR("--max-body-mb: must be an integer between 1 and 1024", "--max-body-mb", "0");
  EXPECT_FLAG_ERROR("--compact-idle-s: must be an integer between 1 and 86400", "--compact-idle-s",
                    "0");
  EXPECT_FLAG_ERROR("--log-level: must be one of debug, info, warn, error", "--log-level",
                    "verbose");
  EXPECT_FLAG_ERROR("--dev: takes no value", "--dev=yes");
  EXPECT_FLAG_ERROR("edgenode: --frobnicate: unknown option", "--frobnicate");
  EXPECT_FLAG_ERROR("edgenode: stray: unknown option", "stray");
  EXPECT_FLAG_ERROR("-w: unknown option", "-w", "2");
  EXPECT_FLAG_ERROR("--config: missing value", "--config");
  EXPECT_FLAG_ERROR("--fleet: must be nats://HOST:PORT or tls://HOST:PORT URLs", "--fleet",
                    "http://127.0.0.1:4222");
  EXPECT_FLAG_ERROR("--fleet: must be nats://HOST:PORT", "--fleet", "nats://127.0.0.1");
  EXPECT_FLAG_ERROR("--fleet: must be nats://HOST:PORT", "--fleet", "nats://a:4222,nats://b:0");
  EXPECT_FLAG_ERROR("--fleet: must be nats://HOST:PORT", "--fleet", ",");
  EXPECT_FLAG_ERROR("--node-name: must be 1..64 letters, digits, '-' or '_'", "--node-name",
                    "node.one");
  EXPECT_FLAG_ERROR("--node-name: must be 1..64", "--node-name", "a b");
}

static void test_fleet_flags(void **state) {
  (void)state;
  node_config c;
  node_config_init(&c);
  char *err = NULL;
  char *argv[] = {"edgenode", "--fleet", "nats://10.0.0.1:4222,tls://nats2:4222", "--node-name",
                  "edge-1", "--fleet-creds", "node.creds", NULL};
  assert_int_equal(node_config_parse(&c, 7, argv, &err), NODE_CONFIG_OK);
  assert_string_equal(c.fleet, "nats://10.0.0.1:4222,tls://nats2:4222");
  assert_true(c.fleet_tls);
  assert_string_equal(c.node_name, "edge-1");
  assert_string_equal(c.fleet_creds, "node.creds");
  assert_null(c.fleet_ca);
  node_config_free(&c);
}

static void test_file_applies_every_key(void **state) {
  (void)state;
  node_config c;
  char *err;
  assert_int_equal(apply(&c,
                         "{\"listen\": \"127.0.0.1:0\", \"control\": \"127.0.0.1:0\","
                         " \"data\": \"d\", \"workers\": 2, \"dev\": true,"
                         " \"control_token_file\": \"t\", \"grace_ms\": 500,"
                         " \"max_body_mb\": 2, \"log_level\": \"error\", \"compact_idle_s\": 30}",
                         &err),
                   NODE_CONFIG_OK);
  assert_int_equal(c.listen_port, 0);
  assert_int_equal(c.control_port, 0);
  assert_string_equal(c.data_dir, "d");
  assert_int_equal(c.workers, 2);
  assert_true(c.dev);
  assert_string_equal(c.control_token_file, "t");
  assert_int_equal(c.grace_ms, 500);
  assert_int_equal(c.max_body_mb, 2);
  assert_int_equal(c.compact_idle_s, 30);
  assert_int_equal(c.log_level, LOG_ERROR);
  node_config_free(&c);

  assert_int_equal(apply(&c, "{\"dev\": false}", &err), NODE_CONFIG_OK);
  assert_false(c.dev);
  node_config_free(&c);
  assert_int_equal(apply(&c, "{}", &err), NODE_CONFIG_OK);
  node_config_free(&c);
}

static void test_file_errors_name_the_key(void **state) {
  (void)state;
  expect_file_error("{\"workers\": 0}", "edgenode: config: \"workers\": must be an integer between 1 and 256");
  expect_file_error("{\"workers\": \"2\"}", "\"workers\": must be an integer between 1 and 256");
  expect_file_error("{\"workers\": 2.5}", "\"workers\": must be an integer");
  expect_file_error("{\"workers\": null}", "\"workers\": must be an integer");
  expect_file_error("{\"listen\": 8080}", "\"listen\": must be a string");
  expect_file_error("{\"listen\": \"nowhere\"}", "\"listen\": must be ADDR:PORT");
  expect_file_error("{\"control\": \"1.2.3.4:99999\"}", "\"control\": must be ADDR:PORT");
  expect_file_error("{\"data\": 1}", "\"data\": must be a string");
  expect_file_error("{\"data\": \"\"}", "\"data\": must not be empty");
  expect_file_error("{\"dev\": \"yes\"}", "\"dev\": must be true or false");
  expect_file_error("{\"dev\": 1}", "\"dev\": must be true or false");
  expect_file_error("{\"control_token_file\": []}", "\"control_token_file\": must be a string");
  expect_file_error("{\"grace_ms\": 3600001}", "\"grace_ms\": must be an integer between 0 and 3600000");
  expect_file_error("{\"max_body_mb\": 2000}", "\"max_body_mb\": must be an integer between 1 and 1024");
  expect_file_error("{\"compact_idle_s\": 86401}",
                    "\"compact_idle_s\": must be an integer between 1 and 86400");
  expect_file_error("{\"log_level\": \"loud\"}", "\"log_level\": must be one of debug, info, warn, error");
  expect_file_error("{\"log_level\": 3}", "\"log_level\": must be one of");
  /* flags spelled with hyphens are not file keys; neither is "config" */
  expect_file_error("{\"grace-ms\": 1}", "\"grace-ms\": unknown key");
  expect_file_error("{\"config\": \"other.json\"}", "\"config\": unknown key");
  expect_file_error("{\"colour\": \"blue\"}", "\"colour\": unknown key");
  /* not JSON, not an object, duplicate keys */
  expect_file_error("{\"workers\": ", "test.json:1:");
  expect_file_error("[1, 2]", "test.json: must be a JSON object");
  expect_file_error("{\"workers\": 1, \"workers\": 2}", "test.json:");
}

static void test_flags_override_file(void **state) {
  (void)state;
  char *path = temp_file("{\"workers\": 5, \"data\": \"from-file\", \"grace_ms\": 7}\n");
  node_config c;
  char *err;
  /* the flag comes before --config on the command line and still wins */
  assert_int_equal(parse(&c, &err, "--workers", "2", "--config", path, NULL), NODE_CONFIG_OK);
  assert_int_equal(c.workers, 2);
  assert_string_equal(c.data_dir, "from-file");
  assert_int_equal(c.grace_ms, 7);
  assert_string_equal(c.config_file, path);
  node_config_free(&c);
  unlink(path);
  free(path);
}

static void test_config_file_problems(void **state) {
  (void)state;
  EXPECT_FLAG_ERROR("edgenode: config: /nonexistent/edgenode.json: No such file",
                    "--config", "/nonexistent/edgenode.json");
  char *path = temp_file("{\"workers\": 999}");
  EXPECT_FLAG_ERROR("edgenode: config: \"workers\": must be an integer between 1 and 256",
                    "--config", path);
  unlink(path);
  free(path);
  path = temp_file("{\"workers\": 2,\n \"oops\"}");
  EXPECT_FLAG_ERROR(":2:", "--config", path); /* file:line:column of the JSON error */
  unlink(path);
  free(path);
}

/* The cap on dedicated processes, their idle exit and the cap's suspension. */
static void test_dedicated_keys(void **state) {
  (void)state;
  node_config c;
  char *err;
  assert_int_equal(parse(&c, &err, NULL), NODE_CONFIG_OK);
  assert_int_equal(c.max_dedicated, 8);
  assert_int_equal(c.dedicated_idle_s, 60);
  assert_int_equal(c.dedicated_suspend_s, 300);
  node_config_free(&c);
  assert_int_equal(parse(&c, &err, "--max-dedicated", "2", "--dedicated-idle-s", "0",
                         "--dedicated-suspend-s", "30", NULL),
                   NODE_CONFIG_OK);
  assert_int_equal(c.max_dedicated, 2);
  assert_int_equal(c.dedicated_idle_s, 0);
  assert_int_equal(c.dedicated_suspend_s, 30);
  node_config_free(&c);
  assert_int_equal(apply(&c, "{\"max_dedicated\": 4096, \"dedicated_idle_s\": 86400, "
                             "\"dedicated_suspend_s\": 1}", &err),
                   NODE_CONFIG_OK);
  assert_int_equal(c.max_dedicated, 4096);
  assert_int_equal(c.dedicated_idle_s, 86400);
  assert_int_equal(c.dedicated_suspend_s, 1);
  node_config_free(&c);
  EXPECT_FLAG_ERROR("--max-dedicated: must be an integer between 1 and 4096", "--max-dedicated", "0");
  EXPECT_FLAG_ERROR("--max-dedicated: must be an integer", "--max-dedicated", "many");
  EXPECT_FLAG_ERROR("--dedicated-idle-s: must be an integer between 0 and 86400",
                    "--dedicated-idle-s", "-1");
  EXPECT_FLAG_ERROR("--dedicated-suspend-s: must be an integer between 1 and 86400",
                    "--dedicated-suspend-s", "0");
  expect_file_error("{\"max_dedicated\": 4097}",
                    "\"max_dedicated\": must be an integer between 1 and 4096");
  expect_file_error("{\"max_dedicated\": \"8\"}", "\"max_dedicated\": must be an integer");
  expect_file_error("{\"dedicated_idle_s\": 86401}",
                    "\"dedicated_idle_s\": must be an integer between 0 and 86400");
  expect_file_error("{\"dedicated_suspend_s\": 1.5}", "\"dedicated_suspend_s\": must be an integer");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_defaults),
      cmocka_unit_test(test_every_flag),
      cmocka_unit_test(test_equals_form_and_last_wins),
      cmocka_unit_test(test_help_and_version),
      cmocka_unit_test(test_bad_flags_name_the_flag),
      cmocka_unit_test(test_fleet_flags),
      cmocka_unit_test(test_file_applies_every_key),
      cmocka_unit_test(test_file_errors_name_the_key),
      cmocka_unit_test(test_flags_override_file),
      cmocka_unit_test(test_config_file_problems),
      cmocka_unit_test(test_dedicated_keys),
  };
  return cmocka_run_group_tests_name("node_config", tests, NULL, NULL);
}
