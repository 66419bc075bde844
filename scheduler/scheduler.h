/*
 * scheduler: fair turns for the isolates of one worker process.
 *
 * Every unit of work that enters JavaScript (a request's handler, a timer, a
 * host call's completion) is queued on the queue of the isolate it runs in.
 * Queues with ready work take turns in the order they became ready, one unit
 * per turn, so a tenant with a thousand queued requests delays another
 * tenant's single request by at most one unit (itself bounded by the CPU
 * limit), not by a thousand. A queue may belong to a group (a dynamic
 * worker's isolate to its parent's queue): the group takes one turn like
 * any other queue, and shares it among its own units and its members, so a
 * parent that starts a hundred children at once still delays another
 * tenant by one unit per round. Turns run in the loop's check phase, right
 * after I/O was polled; while work remains, the loop polls without blocking
 * and returns to it between rounds so I/O is never starved.
 *
 * Everything here runs on the loop thread; nothing allocates.
 */
#ifndef EDGENODE_SCHEDULER_H
#define EDGENODE_SCHEDULER_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef struct sched sched;
typedef struct sched_unit sched_unit;
typedef struct sched_queue sched_queue;

/* Queues waiting for a turn, in order (linked through next_ready). */
typedef struct sched_waiting {
  sched_queue *head;
  sched_queue *tail;
  size_t count;
} sched_waiting;

/* A unit of work; embed it in its owner and recover the owner with container_of. */
struct sched_unit {
  void (*run)(sched_unit *unit);
  sched_unit *next;
};

/* The queue of one isolate; embed it in the isolate's owner, zero-initialised. */
struct sched_queue {
  sched_unit *head;
  sched_unit *tail;
  size_t length;       /* its own units */
  sched_queue *next_ready;
  int ready;           /* waiting for a turn: in the scheduler's list, or its group's */
  sched_queue *group;  /* whose turns it shares (sched_queue_set_group), or NULL */
  sched_waiting members; /* as a group: members with work */
  int members_next;    /* as a group: a member's unit goes next, not its own */
};

struct sched {
  uv_check_t check;   /* runs rounds after each poll */
  uv_idle_t idle;     /* keeps poll from blocking while work is queued */
  sched_waiting ready; /* queues with work that take turns of their own */
  uint64_t round_budget_ns; /* a round stops after this much time, default 5 ms */
  uint64_t units_run;
};

/* Returns 0 or a negative libuv error. */
int sched_init(sched *s, uv_loop_t *loop);

/* Closes the handles; queued units are dropped without running. */
void sched_close(sched *s);

/* Queues `unit` (with its run callback set) on `q`. */
void sched_submit(sched *s, sched_queue *q, sched_unit *unit);

/*
 * Removes every unit of `q` (for example before its isolate is discarded)
 * and calls `drop` on each, in order. drop may be NULL.
 */
void sched_queue_clear(sched *s, sched_queue *q, void (*drop)(sched_unit *unit));

/*
 * Makes `q` share the turns of `group` (NULL: take turns of its own). The
 * group must outlive the membership: set it back to NULL before the group's
 * owner goes. Queued work keeps its order.
 */
void sched_queue_set_group(sched *s, sched_queue *q, sched_queue *group);

/* Runs queued work now, until every queue is empty or the round budget is spent. */
void sched_run(sched *s);

#endif
