/*
 * Unit tests for node/child.c, the supervisor of one child process: a real
 * process (/bin/sh) is spawned, exits, and is restarted with the back-off the
 * worker and egress processes get; holds and failed spawns are checked too.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "node.h"

typedef struct run {
  node_child child;
  const char *file;
  int runs;            /* processes spawned */
  int exits;
  int64_t last_status;
  int restarted;       /* ops->restarted calls */
  int stop_after;      /* exits after which it is not restarted */
  int hold_after;      /* exits after which the restart is scheduled, then held */
  uint64_t delays[8];
  uint64_t first_spawn_ns, last_spawn_ns;
  int closed;          /* the timer was closed for good */
} run;

static int spawn(node_child *c) {
  run *r = c->data;
  char *args[] = {"sh", "-c", "exit 3", NULL};
  node_child_cmd cmd = {.file = r->file, .args = args, .label = "test", .fds = {-1}, .n_fds = 1};
  int rc = node_child_spawn(c, &cmd);
  if (rc == 0) {
    r->runs++;
    r->last_spawn_ns = time_mono_ns();
    if (r->first_spawn_ns == 0) r->first_spawn_ns = r->last_spawn_ns;
  }
  return rc;
}

static void frame(node_child *c, const proto_frame *f) {
  (void)c;
  (void)f;
}

static void exited(node_child *c, int64_t status, int sig, uint64_t lived_ms) {
  run *r = c->data;
  (void)sig;
  r->last_status = status;
  r->exits++;
  if (r->exits >= r->stop_after) {
    node_child_close(c);
    return;
  }
  r->delays[r->exits - 1] = node_child_restart(c, lived_ms);
  if (r->exits == r->hold_after) {
    node_child_hold(c);
    node_child_close(c);
  }
}

static void closed(node_child *c) {
  run *r = c->data;
  if (!c->timer_open) r->closed = 1;
}

static void restarted(node_child *c) { ((run *)c->data)->restarted++; }

static const node_child_ops ops = {
    .spawn = spawn, .frame = frame, .exited = exited, .closed = closed, .restarted = restarted};

static void run_loop(run *r, uv_loop_t *loop) {
  assert_int_equal(node_child_init(&r->child, loop, &ops, r), 0);
  spawn(&r->child);
  assert_int_equal(uv_run(loop, UV_RUN_DEFAULT), 0);
  assert_int_equal(uv_loop_close(loop), 0);
}

static void test_restarts_with_back_off(void **state) {
  (void)state;
  uv_loop_t loop;
  assert_int_equal(uv_loop_init(&loop), 0);
  run r = {.file = "/bin/sh", .stop_after = 3};
  run_loop(&r, &loop);
  assert_int_equal(r.runs, 3);
  assert_int_equal(r.exits, 3);
  assert_int_equal(r.last_status, 3);
  assert_int_equal(r.child.restarts, 2);
  assert_int_equal(r.restarted, 2);
  assert_int_equal(r.delays[0], NODE_BACKOFF_MIN_MS);
  assert_int_equal(r.delays[1], 2 * NODE_BACKOFF_MIN_MS);
  /* the delays were waited for */
  assert_true(r.last_spawn_ns - r.first_spawn_ns >= 3 * NODE_BACKOFF_MIN_MS * 1000000ull);
  assert_true(r.closed);
  assert_true(node_child_gone(&r.child));
}

static void test_held_restart_never_spawns(void **state) {
  (void)state;
  uv_loop_t loop;
  assert_int_equal(uv_loop_init(&loop), 0);
  run r = {.file = "/bin/sh", .stop_after = 100, .hold_after = 1};
  run_loop(&r, &loop);
  assert_int_equal(r.runs, 1);
  assert_int_equal(r.child.state, NODE_PROC_STOPPED);
  assert_int_equal(r.restarted, 0);
}

/* A process that cannot be spawned is retried with back-off like one that died. */
static void test_failed_spawn_is_retried(void **state) {
  (void)state;
  uv_loop_t loop;
  assert_int_equal(uv_loop_init(&loop), 0);
  run r = {.file = "/nonexistent/edgenode-test-child"};
  assert_int_equal(node_child_init(&r.child, &loop, &ops, &r), 0);
  assert_int_not_equal(spawn(&r.child), 0);
  assert_int_equal(r.child.state, NODE_PROC_RESTARTING);
  assert_int_equal(r.child.restarts, 1);
  /* the retry fails too; then the file appears */
  uv_run(&loop, UV_RUN_ONCE);
  while (r.child.restarts < 2) uv_run(&loop, UV_RUN_ONCE);
  r.file = "/bin/sh";
  r.stop_after = 1;
  assert_int_equal(uv_run(&loop, UV_RUN_DEFAULT), 0);
  assert_int_equal(r.runs, 1);
  assert_int_equal(r.restarted, 1);
  assert_int_equal(r.last_status, 3);
  assert_int_equal(uv_loop_close(&loop), 0);
}

static void test_back_off_schedule(void **state) {
  (void)state;
  uint64_t b = NODE_BACKOFF_MIN_MS;
  uint64_t want[] = {100, 200, 400, 800, 1600, 3200, 6400, 10000, 10000};
  for (size_t i = 0; i < ARRAY_SIZE(want); i++) assert_int_equal(node_backoff_next(&b, 10), want[i]);
  /* a process that lived long enough starts the schedule over */
  assert_int_equal(node_backoff_next(&b, NODE_STABLE_AFTER_MS), NODE_BACKOFF_MIN_MS);
  assert_int_equal(node_backoff_next(&b, 0), 2 * NODE_BACKOFF_MIN_MS);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_restarts_with_back_off),
      cmocka_unit_test(test_held_restart_never_spawns),
      cmocka_unit_test(test_failed_spawn_is_retried),
      cmocka_unit_test(test_back_off_schedule),
  };
  return cmocka_run_group_tests_name("node_child", tests, NULL, NULL);
}
