#include "scheduler.h"

#include <stddef.h>
#include <time.h>

#include "base.h"

static void waiting_push(sched_waiting *l, sched_queue *q) {
  q->ready = 1;
  q->next_ready = NULL;
  if (l->tail)
    l->tail->next_ready = q;
  else
    l->head = q;
  l->tail = q;
  l->count++;
}

static sched_queue *waiting_pop(sched_waiting *l) {
  sched_queue *q = l->head;
  if (q == NULL) return NULL;
  l->head = q->next_ready;
  if (l->head == NULL) l->tail = NULL;
  l->count--;
  q->next_ready = NULL;
  q->ready = 0;
  return q;
}

static void waiting_remove(sched_waiting *l, sched_queue *q) {
  sched_queue *prev = NULL;
  for (sched_queue *it = l->head; it; prev = it, it = it->next_ready) {
    if (it != q) continue;
    if (prev)
      prev->next_ready = q->next_ready;
    else
      l->head = q->next_ready;
    if (l->tail == q) l->tail = prev;
    l->count--;
    break;
  }
  q->next_ready = NULL;
  q->ready = 0;
}

/* ---- groups: a member waits in its group's list, the group in the scheduler's ---- */

static int has_work(const sched_queue *q) { return q->head != NULL || q->members.head != NULL; }

/* Lets q (which has work) wait for a turn; a group waits while a member does. */
static void make_ready(sched *s, sched_queue *q) {
  if (q->ready) return;
  if (q->group) {
    waiting_push(&q->group->members, q);
    make_ready(s, q->group);
  } else {
    waiting_push(&s->ready, q);
  }
}

/* Takes q out of its list; its group stops waiting when that leaves it nothing. */
static void make_unready(sched *s, sched_queue *q) {
  if (!q->ready) return;
  if (q->group) {
    waiting_remove(&q->group->members, q);
    if (!has_work(q->group)) make_unready(s, q->group);
  } else {
    waiting_remove(&s->ready, q);
  }
}

static sched_unit *queue_pop(sched_queue *q) {
  sched_unit *u = q->head;
  if (u == NULL) return NULL;
  q->head = u->next;
  if (q->head == NULL) q->tail = NULL;
  q->length--;
  u->next = NULL;
  return u;
}

/* One unit of q's turn: its own units and its members take it in turns. */
static sched_unit *take_unit(sched_queue *q) {
  if (q->members.head && (q->head == NULL || q->members_next)) {
    q->members_next = 0;
    sched_queue *m = waiting_pop(&q->members);
    sched_unit *u = take_unit(m);
    if (has_work(m)) waiting_push(&q->members, m);
    return u;
  }
  q->members_next = 1;
  return queue_pop(q);
}

static void on_idle(uv_idle_t *h) { (void)h; }

static void update_idle(sched *s) {
  if (s->ready.head && !uv_is_active((uv_handle_t *)&s->idle))
    uv_idle_start(&s->idle, on_idle);
  else if (s->ready.head == NULL && uv_is_active((uv_handle_t *)&s->idle))
    uv_idle_stop(&s->idle);
}

void sched_run(sched *s) {
  uint64_t deadline = time_mono_ns() + s->round_budget_ns;
  /* A pass is as many turns as queues were ready when it began (work they
   * add goes to the back); the budget is looked at between passes. Counted,
   * not marked by the last queue: a unit may take that queue out of the
   * list (cleared, freed, its group's last member gone), and the round must
   * still end. */
  size_t turns_left = s->ready.count;
  while (s->ready.head) {
    sched_queue *q = waiting_pop(&s->ready);
    sched_unit *u = take_unit(q);
    if (has_work(q)) waiting_push(&s->ready, q);
    if (u) {
      s->units_run++;
      u->run(u);
    }
    if (turns_left <= 1) {
      if (time_mono_ns() >= deadline) break;
      turns_left = s->ready.count;
    } else {
      turns_left--;
    }
  }
  update_idle(s);
}

static void on_check(uv_check_t *h) { sched_run(container_of(h, sched, check)); }

int sched_init(sched *s, uv_loop_t *loop) {
  s->ready.head = s->ready.tail = NULL;
  s->ready.count = 0;
  s->units_run = 0;
  if (s->round_budget_ns == 0) s->round_budget_ns = 5000000;
  int rc = uv_check_init(loop, &s->check);
  if (rc) return rc;
  if ((rc = uv_idle_init(loop, &s->idle)) != 0) {
    uv_close((uv_handle_t *)&s->check, NULL);
    return rc;
  }
  if ((rc = uv_check_start(&s->check, on_check)) != 0) {
    uv_close((uv_handle_t *)&s->check, NULL);
    uv_close((uv_handle_t *)&s->idle, NULL);
    return rc;
  }
  /* The check handle alone must not keep the loop alive. */
  uv_unref((uv_handle_t *)&s->check);
  return 0;
}

void sched_close(sched *s) {
  while (s->ready.head) waiting_pop(&s->ready);
  if (!uv_is_closing((uv_handle_t *)&s->check)) uv_close((uv_handle_t *)&s->check, NULL);
  if (!uv_is_closing((uv_handle_t *)&s->idle)) uv_close((uv_handle_t *)&s->idle, NULL);
}

void sched_submit(sched *s, sched_queue *q, sched_unit *unit) {
  unit->next = NULL;
  if (q->tail)
    q->tail->next = unit;
  else
    q->head = unit;
  q->tail = unit;
  q->length++;
  make_ready(s, q);
  update_idle(s);
}

void sched_queue_clear(sched *s, sched_queue *q, void (*drop)(sched_unit *unit)) {
  make_unready(s, q);
  sched_unit *u;
  while ((u = queue_pop(q)) != NULL)
    if (drop) drop(u);
  /* Its members' work is theirs: it keeps waiting. */
  if (has_work(q)) make_ready(s, q);
  update_idle(s);
}

void sched_queue_set_group(sched *s, sched_queue *q, sched_queue *group) {
  if (q->group == group) return;
  int was_ready = q->ready;
  make_unready(s, q);
  q->group = group;
  if (was_ready) make_ready(s, q);
  update_idle(s);
}
