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

void vtimer_set_init(vtimer_set *s, uv_loop_t *loop, void *owner, vtimer_fire_fn fire) {
  id_map_init(&s->by_id);
  s->loop = loop;
  s->owner = owner;
  s->fire = fire;
}

static void closed(uv_handle_t *h) { free(container_of((uv_timer_t *)h, vtimer, handle)); }

static void close_timer(void *value) {
  vtimer *t = value;
  uv_close((uv_handle_t *)&t->handle, closed);
}

static void fired(uv_timer_t *h) {
  vtimer *t = container_of(h, vtimer, handle);
  vtimer_set *s = t->set;
  uint64_t token = t->token;
  uint32_t id = t->id;
  id_map_del(&s->by_id, id);
  close_timer(t);
  s->fire(s->owner, token, id);
}

int vtimer_start(vtimer_set *s, uint64_t token, uint32_t id, double delay_ms) {
  if (id == 0) return -1; /* the runtime's ids start at 1; 0 cannot be a key */
  vtimer_cancel(s, id);   /* the runtime never reuses a pending id; never twice here either */
  vtimer *t = xcalloc(1, sizeof *t);
  if (uv_timer_init(s->loop, &t->handle) != 0) {
    free(t);
    return -1;
  }
  t->set = s;
  t->token = token;
  t->id = id;
  /* JavaScript may have run for a while since the loop last read its clock. */
  uv_update_time(s->loop);
  if (uv_timer_start(&t->handle, fired, delay_ms > 0 ? (uint64_t)delay_ms : 0, 0) != 0) {
    close_timer(t);
    return -1;
  }
  id_map_put(&s->by_id, id, t);
  return 0;
}

void vtimer_cancel(vtimer_set *s, uint32_t id) {
  vtimer *t = id ? id_map_del(&s->by_id, id) : NULL;
  if (t != NULL) close_timer(t);
}

void vtimer_set_clear(vtimer_set *s) { id_map_clear(&s->by_id, close_timer); }
