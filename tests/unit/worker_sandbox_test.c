/* Unit tests for the pure parts of worker/'s sandbox: its state machine
 * (sandbox.h) and the limits and bindings it takes from a spec (spec.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "base.h"
#include "sandbox.h"

static const sandbox_state all_states[] = {SANDBOX_EMPTY, SANDBOX_READY, SANDBOX_BROKEN,
                                           SANDBOX_RETIRED, SANDBOX_DYING};

static void test_life(void **state) {
  (void)state;
  /* The ordinary life of a dynamic worker: made, used, released. */
  sandbox_state s = SANDBOX_EMPTY;
  assert_true(sandbox_state_takes_requests(s));
  assert_false(sandbox_state_runs(s));
  s = sandbox_state_after(s, SANDBOX_LOADED);
  assert_int_equal(s, SANDBOX_READY);
  assert_true(sandbox_state_takes_requests(s));
  assert_true(sandbox_state_runs(s));
  s = sandbox_state_after(s, SANDBOX_RELEASE);
  assert_int_equal(s, SANDBOX_DYING);
  assert_false(sandbox_state_takes_requests(s));
  assert_false(sandbox_state_runs(s));
}

static void test_limits_break(void **state) {
  (void)state;
  sandbox_state s = sandbox_state_after(SANDBOX_READY, SANDBOX_LIMIT_HIT);
  assert_int_equal(s, SANDBOX_BROKEN);
  /* It takes no new requests, but what it runs may finish. */
  assert_false(sandbox_state_takes_requests(s));
  assert_true(sandbox_state_runs(s));
  /* A load that failed breaks it too; a limit before the load does nothing. */
  assert_int_equal(sandbox_state_after(SANDBOX_EMPTY, SANDBOX_LOAD_FAILED), SANDBOX_BROKEN);
  assert_int_equal(sandbox_state_after(SANDBOX_EMPTY, SANDBOX_LIMIT_HIT), SANDBOX_EMPTY);
  /* Loading happens once. */
  assert_int_equal(sandbox_state_after(SANDBOX_BROKEN, SANDBOX_LOADED), SANDBOX_BROKEN);
  assert_int_equal(sandbox_state_after(SANDBOX_READY, SANDBOX_LOAD_FAILED), SANDBOX_READY);
}

static void test_retire(void **state) {
  (void)state;
  /* A version replaced by a deploy: its running requests finish. */
  for (size_t i = 0; i < ARRAY_SIZE(all_states); i++) {
    sandbox_state s = sandbox_state_after(all_states[i], SANDBOX_RETIRE);
    if (all_states[i] == SANDBOX_DYING) {
      assert_int_equal(s, SANDBOX_DYING);
      continue;
    }
    assert_int_equal(s, SANDBOX_RETIRED);
    assert_false(sandbox_state_takes_requests(s));
    assert_true(sandbox_state_runs(s));
  }
}

static void test_release_is_final(void **state) {
  (void)state;
  static const sandbox_event events[] = {SANDBOX_LOADED, SANDBOX_LOAD_FAILED, SANDBOX_LIMIT_HIT,
                                         SANDBOX_RETIRE, SANDBOX_RELEASE};
  for (size_t i = 0; i < ARRAY_SIZE(all_states); i++)
    assert_int_equal(sandbox_state_after(all_states[i], SANDBOX_RELEASE), SANDBOX_DYING);
  for (size_t i = 0; i < ARRAY_SIZE(events); i++)
    assert_int_equal(sandbox_state_after(SANDBOX_DYING, events[i]), SANDBOX_DYING);
  /* Only a sandbox without an isolate yet, or a ready one, takes requests. */
  for (size_t i = 0; i < ARRAY_SIZE(all_states); i++)
    assert_int_equal(sandbox_state_takes_requests(all_states[i]),
                     all_states[i] == SANDBOX_EMPTY || all_states[i] == SANDBOX_READY);
}

static json_t *spec(const char *text) {
  json_t *j = json_loads(text, 0, NULL);
  assert_non_null(j);
  return j;
}

static void test_limits_from_spec(void **state) {
  (void)state;
  iso_limits l;
  /* No spec (a sandbox of no tenant) and no limits: proto.h's defaults. */
  spec_limits(NULL, &l);
  assert_int_equal(l.cpu_ms, PROTO_SPEC_DEFAULT_CPU_MS);
  assert_int_equal(l.memory_mb, PROTO_SPEC_DEFAULT_MEMORY_MB);
  assert_int_equal(spec_wall_ms(NULL), PROTO_SPEC_DEFAULT_WALL_MS);
  assert_int_equal(spec_facet_mb(NULL), 0);
  json_t *s = spec("{\"limits\":{\"cpu_ms\":7,\"memory_mb\":64,\"wall_ms\":900,\"facet_mb\":3}}");
  spec_limits(s, &l);
  assert_int_equal(l.cpu_ms, 7);
  assert_int_equal(l.memory_mb, 64);
  assert_int_equal(spec_wall_ms(s), 900);
  assert_int_equal(spec_facet_mb(s), 3);
  json_decref(s);
  /* Zero, negative or not a number: the default. */
  s = spec("{\"limits\":{\"cpu_ms\":0,\"memory_mb\":-1,\"wall_ms\":\"5\"}}");
  spec_limits(s, &l);
  assert_int_equal(l.cpu_ms, PROTO_SPEC_DEFAULT_CPU_MS);
  assert_int_equal(l.memory_mb, PROTO_SPEC_DEFAULT_MEMORY_MB);
  assert_int_equal(spec_wall_ms(s), PROTO_SPEC_DEFAULT_WALL_MS);
  json_decref(s);
}

static void test_modules_from_spec(void **state) {
  (void)state;
  iso_module *mods = NULL;
  const char *main_module = NULL, *why = NULL;
  json_t *s = spec("{\"main_module\":\"a.js\",\"modules\":{\"a.js\":\"export default {}\","
                   "\"b.js\":\"x\"}}");
  assert_int_equal(spec_modules(s, &mods, &main_module, &why), 2);
  assert_string_equal(main_module, "a.js");
  assert_string_equal(mods[0].name, "a.js");
  assert_int_equal(mods[0].source_len, strlen("export default {}"));
  free(mods);
  json_decref(s);
  s = spec("{\"modules\":{\"a.js\":\"x\"}}");
  assert_int_equal(spec_modules(s, &mods, &main_module, &why), -1);
  assert_string_equal(why, "spec has no modules or main_module");
  json_decref(s);
  s = spec("{\"main_module\":\"a.js\",\"modules\":{\"a.js\":1}}");
  assert_int_equal(spec_modules(s, &mods, &main_module, &why), -1);
  assert_string_equal(why, "module source is not a string");
  json_decref(s);
}

static void test_bindings_from_spec(void **state) {
  (void)state;
  json_t *s = spec("{\"bindings\":{\"NAME\":{\"type\":\"text\",\"value\":\"x\"},"
                   "\"CONF\":{\"type\":\"json\",\"value\":{\"a\":1}},"
                   "\"DB\":{\"type\":\"facet\"},\"LOADER\":{\"type\":\"loader\"}}}");
  char *env = spec_env_json(s);
  char *caps = spec_capabilities_json(s);
  /* Plain values are the env; capabilities are named with their type only. */
  assert_string_equal(env, "{\"NAME\":\"x\",\"CONF\":{\"a\":1}}");
  assert_string_equal(caps, "{\"DB\":{\"type\":\"facet\"},\"LOADER\":{\"type\":\"loader\"}}");
  free(env);
  free(caps);
  json_decref(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_life),
      cmocka_unit_test(test_limits_break),
      cmocka_unit_test(test_retire),
      cmocka_unit_test(test_release_is_final),
      cmocka_unit_test(test_limits_from_spec),
      cmocka_unit_test(test_modules_from_spec),
      cmocka_unit_test(test_bindings_from_spec),
  };
  return cmocka_run_group_tests_name("worker_sandbox", tests, NULL, NULL);
}
