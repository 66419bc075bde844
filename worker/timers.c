/*
 * An isolate's pending timers (setTimeout and setInterval, as the host sees
 * them): one libuv timer each, found by the id the runtime gave it.
 *
 * Starting, cancelling and firing are each O(1): a tenant may keep
 * thousands of timers pending, and a list walked on every cancel made the
 * loop spend seconds, outside every CPU limit, on one request that left
 * 100,000 behind (each is cancelled when its request ends).
 */
#include <stdlib.h>

#include "base.h"
#include "worker.h"

struct vtimer {
  uv_timer_t handle;
  vtimer_set *set;
  uint64_t token;
  uint32_t id;
};

#define SLOT_DELETED ((vtimer *)1)

static size_t slot_of(uint32_t id, size_t cap) {
  /* Ids are sequential: a multiplicative hash spreads them over the table. */
  return (size_t)(((uint64_t)id * 0x9E3779B97F4A7C15ull) >> 20) & (cap - 1);
}

static int slot_live(const vtimer *t) { return t != NULL && t != SLOT_DELETED; }

void vtimer_set_init(vtimer_set *s, void *owner, vtimer_fire_fn fire) {
  s->slots = NULL;
  s->cap = s->used = s->live = 0;
  s->owner = owner;
  s->fire = fire;
}

static vtimer **find(const vtimer_set *s, uint32_t id) {
  if (s->cap == 0) return NULL;
  for (size_t i = slot_of(id, s->cap);; i = (i + 1) & (s->cap - 1)) {
    vtimer *t = s->slots[i];
    if (t == NULL) return NULL;
    if (slot_live(t) && t->id == id) return &s->slots[i];
  }
}

static void insert(vtimer **slots, size_t cap, vtimer *t) {
  size_t i = slot_of(t->id, cap);
  while (slots[i] != NULL && slots[i] != SLOT_DELETED) i = (i + 1) & (cap - 1);
  slots[i] = t;
}

static void grow_if_needed(vtimer_set *s) {
  /* Deleted slots count as used so probe chains stay short; rehashing drops them. */
  if (s->cap != 0 && (s->used + 1) * 4 <= s->cap * 3) return;
  size_t cap = s->cap == 0 ? 16 : s->live * 2 >= s->cap / 2 ? s->cap * 2 : s->cap;
  vtimer **slots = xcalloc(cap, sizeof *slots);
  for (size_t i = 0; i < s->cap; i++)
    if (slot_live(s->slots[i])) insert(slots, cap, s->slots[i]);
  free(s->slots);
  s->slots = slots;
  s->cap = cap;
  s->used = s->live;
}

static void closed(uv_handle_t *h) { free(container_of((uv_timer_t *)h, vtimer, handle)); }

/* Takes the timer out of its set and closes it. */
static void drop(vtimer_set *s, vtimer **slot) {
  vtimer *t = *slot;
  *slot = SLOT_DELETED;
  s->live--;
  uv_close((uv_handle_t *)&t->handle, closed);
}

static void fired(uv_timer_t *h) {
  vtimer *t = container_of(h, vtimer, handle);
  vtimer_set *s = t->set;
  uint64_t token = t->token;
  uint32_t id = t->id;
  vtimer **slot = find(s, id);
  if (slot != NULL) drop(s, slot);
  s->fire(s->owner, token, id);
}

int vtimer_start(vtimer_set *s, uint64_t token, uint32_t id, double delay_ms) {
  vtimer_cancel(s, id); /* the runtime never reuses a pending id; never twice here either */
  vtimer *t = xcalloc(1, sizeof *t);
  if (uv_timer_init(worker_self()->loop, &t->handle) != 0) {
    free(t);
    return -1;
  }
  t->set = s;
  t->token = token;
  t->id = id;
  /* JavaScript may have run for a while since the loop last read its clock. */
  uv_update_time(worker_self()->loop);
  if (uv_timer_start(&t->handle, fired, delay_ms > 0 ? (uint64_t)delay_ms : 0, 0) != 0) {
    uv_close((uv_handle_t *)&t->handle, closed);
    return -1;
  }
  grow_if_needed(s);
  insert(s->slots, s->cap, t);
  s->used++;
  s->live++;
  return 0;
}

void vtimer_cancel(vtimer_set *s, uint32_t id) {
  vtimer **slot = find(s, id);
  if (slot != NULL) drop(s, slot);
}

void vtimer_set_clear(vtimer_set *s) {
  for (size_t i = 0; i < s->cap; i++)
    if (slot_live(s->slots[i])) drop(s, &s->slots[i]);
  free(s->slots);
  s->slots = NULL;
  s->cap = s->used = s->live = 0;
}

size_t vtimer_count(const vtimer_set *s) { return s->live; }
