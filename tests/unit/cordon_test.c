#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "cordon.h"

static cordon_rule rule(const char *text) {
  cordon_rule r;
  const char *why = NULL;
  if (cordon_rule_parse(text, &r, &why) != 0) fail_msg("%s: %s", text, why);
  return r;
}

static void test_parse_canonical(void **state) {
  (void)state;
  cordon_rule r = rule("cpu_limit_hits >= 3 in 60s");
  assert_int_equal(r.metric, CORDON_CPU_LIMIT_HITS);
  assert_int_equal(r.threshold, 3);
  assert_int_equal(r.window_ms, 60000);
  assert_string_equal(r.text, "cpu_limit_hits >= 3 in 60s");

  r = rule("  memory_limit_hits>=1   in 5m ");
  assert_int_equal(r.window_ms, 300000);
  assert_string_equal(r.text, "memory_limit_hits >= 1 in 300s");

  r = rule("crash >= 1"); /* alias, default window */
  assert_int_equal(r.metric, CORDON_CRASHES);
  assert_int_equal(r.window_ms, CORDON_DEFAULT_WINDOW_MS);
  assert_string_equal(r.text, "crashes >= 1 in 600s");

  r = rule("mpk_fault >= 2 in 1500ms");
  assert_int_equal(r.metric, CORDON_MPK_FAULTS);
  assert_string_equal(r.text, "mpk_faults >= 2 in 1500ms");

  r = rule("heap_mb >= 200 in 1h");
  assert_int_equal(r.window_ms, 3600000);
  assert_string_equal(r.text, "heap_mb >= 200 in 3600s");
}

static void test_parse_errors(void **state) {
  (void)state;
  static const struct {
    const char *text;
    const char *why_has;
  } bad[] = {
      {"cpu >= 3 in 60s", "unknown metric"},
      {"", "unknown metric"},
      {"cpu_limit_hits > 3 in 60s", "\">=\""},
      {"cpu_limit_hits >= 0 in 60s", "threshold"},
      {"cpu_limit_hits >= -1 in 60s", "threshold"},
      {"cpu_limit_hits >= three", "threshold"},
      {"cpu_limit_hits >= 3 in 60", "window"},
      {"cpu_limit_hits >= 3 in 500ms", "window"},
      {"cpu_limit_hits >= 3 in 25h", "window"},
      {"cpu_limit_hits >= 3 in 60s please", "unexpected text"},
      {"cpu_limit_hits >= 3 within 60s", "unexpected text"},
      {"cpu_limit_hits >= 99999999999999999999999 in 60s", "threshold"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    cordon_rule r;
    const char *why = NULL;
    assert_int_equal(cordon_rule_parse(bad[i].text, &r, &why), -1);
    assert_non_null(why);
    if (strstr(why, bad[i].why_has) == NULL) fail_msg("%s: %s", bad[i].text, why);
  }
  const char *why = NULL;
  cordon_rule r;
  assert_int_equal(cordon_rule_parse(NULL, &r, &why), -1);
}

static void test_defaults_parse(void **state) {
  (void)state;
  assert_true(cordon_n_default_rules > 0);
  for (size_t i = 0; i < cordon_n_default_rules; i++) {
    cordon_rule r = rule(cordon_default_rules[i]);
    assert_string_equal(r.text, cordon_default_rules[i]); /* defaults are written canonically */
  }
}

/* Three hits inside a minute fire; hits spread wider do not. */
static void test_sliding_window(void **state) {
  (void)state;
  cordon_rule r = rule("cpu_limit_hits >= 3 in 60s");
  cordon_monitor *m = cordon_monitor_new(&r, 1);
  cordon_verdict v;
  int64_t t = 1000000;
  assert_int_equal(cordon_monitor_add(m, "noisy", CORDON_CPU_LIMIT_HITS, 1, t, &v), 0);
  assert_int_equal(cordon_monitor_add(m, "noisy", CORDON_CPU_LIMIT_HITS, 1, t + 40000, &v), 0);
  /* The first hit has left the window 61 s later (give or take one bucket). */
  assert_int_equal(cordon_monitor_add(m, "noisy", CORDON_CPU_LIMIT_HITS, 1, t + 62000, &v), 0);
  assert_int_equal(cordon_monitor_value(m, "noisy", CORDON_CPU_LIMIT_HITS, 60000, t + 62000), 2);
  assert_int_equal(cordon_monitor_add(m, "noisy", CORDON_CPU_LIMIT_HITS, 1, t + 63000, &v), 1);
  assert_string_equal(v.rule.text, "cpu_limit_hits >= 3 in 60s");
  assert_int_equal(v.observed, 3);
  /* Other tenants are counted apart. */
  assert_int_equal(cordon_monitor_add(m, "quiet", CORDON_CPU_LIMIT_HITS, 2, t + 63000, &v), 0);
  /* Deltas count by their amount. */
  assert_int_equal(cordon_monitor_add(m, "burst", CORDON_CPU_LIMIT_HITS, 5, t, &v), 1);
  assert_int_equal(v.observed, 5);
  assert_int_equal(cordon_monitor_size(m), 3);
  cordon_monitor_forget(m, "noisy");
  assert_int_equal(cordon_monitor_size(m), 2);
  assert_int_equal(cordon_monitor_add(m, "noisy", CORDON_CPU_LIMIT_HITS, 1, t + 64000, &v), 0);
  cordon_monitor_free(m);
}

/* Metrics without a rule keep nothing; the first rule that fires is named. */
static void test_rules_by_metric(void **state) {
  (void)state;
  cordon_rule rules[] = {rule("crashes >= 2 in 600s"), rule("crash >= 1 in 10s"),
                         rule("heap_mb >= 100 in 60s")};
  cordon_monitor *m = cordon_monitor_new(rules, 3);
  cordon_verdict v;
  assert_int_equal(cordon_monitor_add(m, "a", CORDON_CPU_LIMIT_HITS, 1000, 0, &v), 0);
  assert_int_equal(cordon_monitor_size(m), 0);
  assert_int_equal(cordon_monitor_add(m, "a", CORDON_CRASHES, 1, 5000, &v), 1);
  assert_string_equal(v.rule.text, "crashes >= 1 in 10s");
  /* heap_mb is a gauge: the window's maximum, not a sum. */
  assert_int_equal(cordon_monitor_add(m, "b", CORDON_HEAP_MB, 60, 0, &v), 0);
  assert_int_equal(cordon_monitor_add(m, "b", CORDON_HEAP_MB, 60, 1000, &v), 0);
  assert_int_equal(cordon_monitor_add(m, "b", CORDON_HEAP_MB, 120, 2000, &v), 1);
  assert_int_equal(v.observed, 120);
  assert_string_equal(v.rule.text, "heap_mb >= 100 in 60s");
  cordon_monitor_free(m);
}

/* Time going backwards (reports from several processes) counts as now. */
static void test_clock_never_goes_back(void **state) {
  (void)state;
  cordon_rule r = rule("uncaught_errors >= 3 in 1s");
  cordon_monitor *m = cordon_monitor_new(&r, 1);
  cordon_verdict v;
  assert_int_equal(cordon_monitor_add(m, "t", CORDON_UNCAUGHT_ERRORS, 1, 50000, &v), 0);
  assert_int_equal(cordon_monitor_add(m, "t", CORDON_UNCAUGHT_ERRORS, 1, 10, &v), 0);
  assert_int_equal(cordon_monitor_add(m, "t", CORDON_UNCAUGHT_ERRORS, 1, 20, &v), 1);
  cordon_monitor_free(m);
}

/* Memory follows the tenants that misbehaved recently. */
static void test_expire(void **state) {
  (void)state;
  cordon_rule r = rule("wall_limit_hits >= 100 in 10s");
  cordon_monitor *m = cordon_monitor_new(&r, 1);
  cordon_verdict v;
  char name[32];
  for (int i = 0; i < 1000; i++) {
    snprintf(name, sizeof name, "tenant-%d", i);
    assert_int_equal(cordon_monitor_add(m, name, CORDON_WALL_LIMIT_HITS, 1, i < 500 ? 0 : 9000, &v), 0);
  }
  assert_int_equal(cordon_monitor_size(m), 1000);
  cordon_monitor_expire(m, 15000);
  assert_int_equal(cordon_monitor_size(m), 500);
  assert_int_equal(cordon_monitor_value(m, "tenant-999", CORDON_WALL_LIMIT_HITS, 10000, 15000), 1);
  assert_int_equal(cordon_monitor_value(m, "tenant-1", CORDON_WALL_LIMIT_HITS, 10000, 15000), 0);
  cordon_monitor_expire(m, 30000);
  assert_int_equal(cordon_monitor_size(m), 0);
  cordon_monitor_free(m);
}

/* A flood of reports over a long window stays within the ring. */
static void test_many_reports(void **state) {
  (void)state;
  cordon_rule r = rule("cpu_limit_hits >= 1000000 in 3600s");
  cordon_monitor *m = cordon_monitor_new(&r, 1);
  cordon_verdict v;
  for (int64_t t = 0; t < 3600000; t += 250)
    assert_int_equal(cordon_monitor_add(m, "x", CORDON_CPU_LIMIT_HITS, 1, t, &v), 0);
  uint64_t in_window = cordon_monitor_value(m, "x", CORDON_CPU_LIMIT_HITS, 3600000, 3599750);
  /* 14400 hits; the ring's granularity may count one bucket more or less. */
  assert_true(in_window >= 14400 - 60 && in_window <= 14400);
  assert_int_equal(cordon_monitor_add(m, "x", CORDON_CPU_LIMIT_HITS, 1000000, 3600000, &v), 1);
  cordon_monitor_free(m);
}

static void test_no_rules(void **state) {
  (void)state;
  cordon_monitor *m = cordon_monitor_new(NULL, 0);
  cordon_verdict v;
  assert_int_equal(cordon_monitor_add(m, "x", CORDON_CRASHES, 10, 0, &v), 0);
  assert_int_equal(cordon_monitor_size(m), 0);
  cordon_monitor_free(m);
  cordon_monitor_free(NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_parse_canonical), cmocka_unit_test(test_parse_errors),
      cmocka_unit_test(test_defaults_parse),  cmocka_unit_test(test_sliding_window),
      cmocka_unit_test(test_rules_by_metric), cmocka_unit_test(test_clock_never_goes_back),
      cmocka_unit_test(test_expire),          cmocka_unit_test(test_many_reports),
      cmocka_unit_test(test_no_rules),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
