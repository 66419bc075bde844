#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
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
/* A loop with a scheduler on it; round_budget_ns 0 keeps the default. */
typedef struct rig {
  uv_loop_t loop;
  sched s;
} rig;

static void rig_start(rig *r, uint64_t round_budget_ns) {
  memset(r, 0, sizeof *r);
  assert_int_equal(uv_loop_init(&r->loop), 0);
  r->s.round_budget_ns = round_budget_ns;
  assert_int_equal(sched_init(&r->s, &r->loop), 0);
}

static void rig_stop(rig *r) {
  sched_close(&r->s);
  uv_run(&r->loop, UV_RUN_DEFAULT);
  assert_int_equal(uv_loop_close(&r->loop), 0);
}

static void test_turns_alternate(void **state) {
  (void)state;
  rig r;
  rig_start(&r, 0);
  sched_queue busy = {0}, quiet = {0};
  int log[200], logged = 0;
  job jobs[101];
  for (int i = 0; i < 100; i++) {
    jobs[i] = (job){.unit.run = job_run, .tenant = 1, .log = log, .logged = &logged};
    sched_submit(&r.s, &busy, &jobs[i].unit);
  }
  jobs[100] = (job){.unit.run = job_run, .tenant = 2, .log = log, .logged = &logged};
  sched_submit(&r.s, &quiet, &jobs[100].unit);
  uv_run(&r.loop, UV_RUN_DEFAULT);
  assert_int_equal(logged, 101);
  assert_int_equal(log[0], 1);
  assert_int_equal(log[1], 2);
  assert_int_equal(busy.length, 0);
  rig_stop(&r);
}

static int dropped;
static void count_drop(sched_unit *u) {
  (void)u;
  dropped++;
}

static void test_clear_drops_units(void **state) {
  (void)state;
  rig r;
  rig_start(&r, 0);
  sched_queue a = {0}, b = {0};
  int log[10], logged = 0;
  job ja[3], jb = {.unit.run = job_run, .tenant = 2, .log = log, .logged = &logged};
  for (int i = 0; i < 3; i++) {
    ja[i] = (job){.unit.run = job_run, .tenant = 1, .log = log, .logged = &logged};
    sched_submit(&r.s, &a, &ja[i].unit);
  }
  sched_submit(&r.s, &b, &jb.unit);
  dropped = 0;
  sched_queue_clear(&r.s, &a, count_drop);
  assert_int_equal(dropped, 3);
  uv_run(&r.loop, UV_RUN_DEFAULT);
  assert_int_equal(logged, 1);
  assert_int_equal(log[0], 2);
  rig_stop(&r);
}

/* An empty scheduler does not keep the loop alive. */
static void test_idle_loop_exits(void **state) {
  (void)state;
  rig r;
  rig_start(&r, 0);
  assert_int_equal(uv_run(&r.loop, UV_RUN_DEFAULT), 0);
  rig_stop(&r);
}

/* A parent's hundred children, each with work, take one turn a round
 * between them, like one tenant: another tenant's unit comes second. Within
 * the group the parent's own units and its children's take turns. */
static void test_group_takes_one_turn(void **state) {
  (void)state;
  rig r;
  rig_start(&r, 0);
  enum { CHILDREN = 100 };
  sched_queue parent = {0}, other = {0}, children[CHILDREN] = {{0}};
  int log[CHILDREN + 8], logged = 0;
  job jobs[CHILDREN + 3];
  for (int i = 0; i < CHILDREN; i++) {
    sched_queue_set_group(&r.s, &children[i], &parent);
    jobs[i] = (job){.unit.run = job_run, .tenant = 3, .log = log, .logged = &logged};
    sched_submit(&r.s, &children[i], &jobs[i].unit);
  }
  for (int i = 0; i < 2; i++) {
    jobs[CHILDREN + i] = (job){.unit.run = job_run, .tenant = 1, .log = log, .logged = &logged};
    sched_submit(&r.s, &parent, &jobs[CHILDREN + i].unit);
  }
  jobs[CHILDREN + 2] = (job){.unit.run = job_run, .tenant = 2, .log = log, .logged = &logged};
  sched_submit(&r.s, &other, &jobs[CHILDREN + 2].unit);
  uv_run(&r.loop, UV_RUN_DEFAULT);
  assert_int_equal(logged, CHILDREN + 3);
  /* The group's turn (its own unit), the other tenant's, then the group's
   * again, its children's units and its own alternating. */
  assert_int_equal(log[0], 1);
  assert_int_equal(log[1], 2);
  assert_int_equal(log[2], 3);
  assert_int_equal(log[3], 1);
  assert_int_equal(log[4], 3);
  for (int i = 5; i < CHILDREN + 3; i++) assert_int_equal(log[i], 3);
  rig_stop(&r);
}

/* A member leaving its group (its parent going) keeps its queued work, and
 * clearing either side leaves the other's work where it was. */
static void test_group_leave_and_clear(void **state) {
  (void)state;
  rig r;
  rig_start(&r, 0);
  sched_queue parent = {0}, a = {0}, b = {0};
  int log[16], logged = 0;
  job ja[2], jb[2], jp[2];
  sched_queue_set_group(&r.s, &a, &parent);
  sched_queue_set_group(&r.s, &b, &parent);
  for (int i = 0; i < 2; i++) {
    ja[i] = (job){.unit.run = job_run, .tenant = 1, .log = log, .logged = &logged};
    jb[i] = (job){.unit.run = job_run, .tenant = 2, .log = log, .logged = &logged};
    jp[i] = (job){.unit.run = job_run, .tenant = 9, .log = log, .logged = &logged};
    sched_submit(&r.s, &a, &ja[i].unit);
    sched_submit(&r.s, &b, &jb[i].unit);
    sched_submit(&r.s, &parent, &jp[i].unit);
  }
  /* The parent's own units go; its members' stay. */
  dropped = 0;
  sched_queue_clear(&r.s, &parent, count_drop);
  assert_int_equal(dropped, 2);
  /* a leaves, b's units are dropped: a's still run, on turns of their own. */
  sched_queue_set_group(&r.s, &a, NULL);
  sched_queue_clear(&r.s, &b, count_drop);
  assert_int_equal(dropped, 4);
  uv_run(&r.loop, UV_RUN_DEFAULT);
  assert_int_equal(logged, 2);
  assert_int_equal(log[0], 1);
  assert_int_equal(log[1], 1);
  assert_null(parent.members.head);
  assert_int_equal(parent.ready, 0);
  rig_stop(&r);
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
  rig r;
  rig_start(&r, 1);
  sched_queue a = {0}, parent = {0}, child = {0};
  int log[4], logged = 0;
  job j = {.unit.run = job_run, .tenant = 3, .log = log, .logged = &logged};
  clearer c = {.unit.run = clearer_run, .s = &r.s, .own = &a, .victim = &child};
  sched_submit(&r.s, &a, &c.unit);
  sched_queue_set_group(&r.s, &child, &parent);
  sched_submit(&r.s, &child, &j.unit);
  sched_run(&r.s);
  assert_in_range(c.runs, 1, 3);
  assert_int_equal(logged, 0);
  assert_int_equal(parent.ready, 0);
  sched_queue_clear(&r.s, &a, NULL);
  rig_stop(&r);
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
