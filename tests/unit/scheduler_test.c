#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "base.h"
#include "scheduler.h"

typedef struct job {
  sched_unit unit;
  int tenant;
  int *log;
  int *logged;
} job;

static void job_run(sched_unit *u) {
  job *j = container_of(u, job, unit);
  j->log[(*j->logged)++] = j->tenant;
}

/* A tenant with many queued units delays another's single unit by one turn only. */
static void test_turns_alternate(void **state) {
  (void)state;
  uv_loop_t loop;
  assert_int_equal(uv_loop_init(&loop), 0);
  sched s = {0};
  assert_int_equal(sched_init(&s, &loop), 0);
  sched_queue busy = {0}, quiet = {0};
  int log[200], logged = 0;
  job jobs[101];
  for (int i = 0; i < 100; i++) {
    jobs[i] = (job){.unit.run = job_run, .tenant = 1, .log = log, .logged = &logged};
    sched_submit(&s, &busy, &jobs[i].unit);
  }
  jobs[100] = (job){.unit.run = job_run, .tenant = 2, .log = log, .logged = &logged};
  sched_submit(&s, &quiet, &jobs[100].unit);
  uv_run(&loop, UV_RUN_DEFAULT);
  assert_int_equal(logged, 101);
  assert_int_equal(log[0], 1);
  assert_int_equal(log[1], 2);
  assert_int_equal(busy.length, 0);
  sched_close(&s);
  uv_run(&loop, UV_RUN_DEFAULT);
  assert_int_equal(uv_loop_close(&loop), 0);
}

static int dropped;
static void count_drop(sched_unit *u) {
  (void)u;
  dropped++;
}

static void test_clear_drops_units(void **state) {
  (void)state;
  uv_loop_t loop;
  assert_int_equal(uv_loop_init(&loop), 0);
  sched s = {0};
  assert_int_equal(sched_init(&s, &loop), 0);
  sched_queue a = {0}, b = {0};
  int log[10], logged = 0;
  job ja[3], jb = {.unit.run = job_run, .tenant = 2, .log = log, .logged = &logged};
  for (int i = 0; i < 3; i++) {
    ja[i] = (job){.unit.run = job_run, .tenant = 1, .log = log, .logged = &logged};
    sched_submit(&s, &a, &ja[i].unit);
  }
  sched_submit(&s, &b, &jb.unit);
  dropped = 0;
  sched_queue_clear(&s, &a, count_drop);
  assert_int_equal(dropped, 3);
  uv_run(&loop, UV_RUN_DEFAULT);
  assert_int_equal(logged, 1);
  assert_int_equal(log[0], 2);
  sched_close(&s);
  uv_run(&loop, UV_RUN_DEFAULT);
  assert_int_equal(uv_loop_close(&loop), 0);
}

/* An empty scheduler does not keep the loop alive. */
static void test_idle_loop_exits(void **state) {
  (void)state;
  uv_loop_t loop;
  assert_int_equal(uv_loop_init(&loop), 0);
  sched s = {0};
  assert_int_equal(sched_init(&s, &loop), 0);
  assert_int_equal(uv_run(&loop, UV_RUN_DEFAULT), 0);
  sched_close(&s);
  uv_run(&loop, UV_RUN_DEFAULT);
  assert_int_equal(uv_loop_close(&loop), 0);
}

/* A parent's hundred children, each with work, take one turn a round
 * between them, like one tenant: another tenant's unit comes second. Within
 * the group the parent's own units and its children's take turns. */
static void test_group_takes_one_turn(void **state) {
  (void)state;
  uv_loop_t loop;
  assert_int_equal(uv_loop_init(&loop), 0);
  sched s = {0};
  assert_int_equal(sched_init(&s, &loop), 0);
  enum { CHILDREN = 100 };
  sched_queue parent = {0}, other = {0}, children[CHILDREN] = {{0}};
  int log[CHILDREN + 8], logged = 0;
  job jobs[CHILDREN + 3];
  for (int i = 0; i < CHILDREN; i++) {
    sched_queue_set_group(&s, &children[i], &parent);
    jobs[i] = (job){.unit.run = job_run, .tenant = 3, .log = log, .logged = &logged};
    sched_submit(&s, &children[i], &jobs[i].unit);
  }
  for (int i = 0; i < 2; i++) {
    jobs[CHILDREN + i] = (job){.unit.run = job_run, .tenant = 1, .log = log, .logged = &logged};
    sched_submit(&s, &parent, &jobs[CHILDREN + i].unit);
  }
  jobs[CHILDREN + 2] = (job){.unit.run = job_run, .tenant = 2, .log = log, .logged = &logged};
  sched_submit(&s, &other, &jobs[CHILDREN + 2].unit);
  uv_run(&loop, UV_RUN_DEFAULT);
  assert_int_equal(logged, CHILDREN + 3);
  /* The group's turn (its own unit), the other tenant's, then the group's
   * again, its children's units and its own alternating. */
  assert_int_equal(log[0], 1);
  assert_int_equal(log[1], 2);
  assert_int_equal(log[2], 3);
  assert_int_equal(log[3], 1);
  assert_int_equal(log[4], 3);
  for (int i = 5; i < CHILDREN + 3; i++) assert_int_equal(log[i], 3);
  sched_close(&s);
  uv_run(&loop, UV_RUN_DEFAULT);
  assert_int_equal(uv_loop_close(&loop), 0);
}

/* A member leaving its group (its parent going) keeps its queued work, and
 * clearing either side leaves the other's work where it was. */
static void test_group_leave_and_clear(void **state) {
  (void)state;
  uv_loop_t loop;
  assert_int_equal(uv_loop_init(&loop), 0);
  sched s = {0};
  assert_int_equal(sched_init(&s, &loop), 0);
  sched_queue parent = {0}, a = {0}, b = {0};
  int log[16], logged = 0;
  job ja[2], jb[2], jp[2];
  sched_queue_set_group(&s, &a, &parent);
  sched_queue_set_group(&s, &b, &parent);
  for (int i = 0; i < 2; i++) {
    ja[i] = (job){.unit.run = job_run, .tenant = 1, .log = log, .logged = &logged};
    jb[i] = (job){.unit.run = job_run, .tenant = 2, .log = log, .logged = &logged};
    jp[i] = (job){.unit.run = job_run, .tenant = 9, .log = log, .logged = &logged};
    sched_submit(&s, &a, &ja[i].unit);
    sched_submit(&s, &b, &jb[i].unit);
    sched_submit(&s, &parent, &jp[i].unit);
  }
  /* The parent's own units go; its members' stay. */
  dropped = 0;
  sched_queue_clear(&s, &parent, count_drop);
  assert_int_equal(dropped, 2);
  /* a leaves, b's units are dropped: a's still run, on turns of their own. */
  sched_queue_set_group(&s, &a, NULL);
  sched_queue_clear(&s, &b, count_drop);
  assert_int_equal(dropped, 4);
  uv_run(&loop, UV_RUN_DEFAULT);
  assert_int_equal(logged, 2);
  assert_int_equal(log[0], 1);
  assert_int_equal(log[1], 1);
  assert_null(parent.members.head);
  assert_int_equal(parent.ready, 0);
  sched_close(&s);
  uv_run(&loop, UV_RUN_DEFAULT);
  assert_int_equal(uv_loop_close(&loop), 0);
}

/* A unit that clears another queue and queues itself again. */
typedef struct clearer {
  sched_unit unit;
  sched *s;
  sched_queue *own;
  sched_queue *victim;
  int runs;
} clearer;

static void clearer_run(sched_unit *u) {
  clearer *c = container_of(u, clearer, unit);
  c->runs++;
  sched_queue_clear(c->s, c->victim, NULL);
  if (c->runs < 100000) sched_submit(c->s, c->own, &c->unit);
}

/* A round ends on its budget even when a unit takes the queue that was to
 * end the pass out of the list: here the group whose only work was a
 * member's, cleared by the other queue's unit. */
static void test_round_ends_when_queues_leave(void **state) {
  (void)state;
  uv_loop_t loop;
  assert_int_equal(uv_loop_init(&loop), 0);
  sched s = {.round_budget_ns = 1};
  assert_int_equal(sched_init(&s, &loop), 0);
  sched_queue a = {0}, parent = {0}, child = {0};
  int log[4], logged = 0;
  job j = {.unit.run = job_run, .tenant = 3, .log = log, .logged = &logged};
  clearer c = {.unit.run = clearer_run, .s = &s, .own = &a, .victim = &child};
  sched_submit(&s, &a, &c.unit);
  sched_queue_set_group(&s, &child, &parent);
  sched_submit(&s, &child, &j.unit);
  sched_run(&s);
  assert_in_range(c.runs, 1, 3);
  assert_int_equal(logged, 0);
  assert_int_equal(parent.ready, 0);
  sched_queue_clear(&s, &a, NULL);
  sched_close(&s);
  uv_run(&loop, UV_RUN_DEFAULT);
  assert_int_equal(uv_loop_close(&loop), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_turns_alternate),
      cmocka_unit_test(test_clear_drops_units),
      cmocka_unit_test(test_idle_loop_exits),
      cmocka_unit_test(test_group_takes_one_turn),
      cmocka_unit_test(test_group_leave_and_clear),
      cmocka_unit_test(test_round_ends_when_queues_leave),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
