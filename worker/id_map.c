/*
 * An open-addressing map from 64-bit ids (never 0 or UINT64_MAX) to
 * pointers: request tokens to their in-flight records, and an isolate's
 * timer ids to its timers (timers.c). The table is made on first use, so an
 * isolate that never sets a timer holds none.
 */
#include <stdlib.h>

#include "base.h"
#include "worker.h"

#define ID_DELETED UINT64_MAX

static size_t slot_of(uint64_t id, size_t cap) {
  /* Ids are sequential: a multiplicative hash spreads them over the table. */
  return (size_t)((id * 0x9E3779B97F4A7C15ull) >> 17) & (cap - 1);
}

void id_map_init(id_map *m) {
  m->slots = NULL;
  m->cap = m->used = m->live = 0;
}

void id_map_free(id_map *m) {
  free(m->slots);
  id_map_init(m);
}

static void insert_slot(id_slot *slots, size_t cap, uint64_t id, void *value) {
  size_t i = slot_of(id, cap);
  while (slots[i].id != 0 && slots[i].id != ID_DELETED) i = (i + 1) & (cap - 1);
  slots[i].id = id;
  slots[i].value = value;
}

static void rehash(id_map *m, size_t cap) {
  id_slot *slots = xcalloc(cap, sizeof *slots);
  for (size_t i = 0; i < m->cap; i++) {
    uint64_t id = m->slots[i].id;
    if (id != 0 && id != ID_DELETED) insert_slot(slots, cap, id, m->slots[i].value);
  }
  free(m->slots);
  m->slots = slots;
  m->cap = cap;
  m->used = m->live;
}

void id_map_put(id_map *m, uint64_t id, void *value) {
  /* Deleted slots count as used so probe chains stay short; rehashing drops them. */
  if (m->cap == 0) rehash(m, 16);
  else if ((m->used + 1) * 4 > m->cap * 3) rehash(m, m->live * 2 >= m->cap / 2 ? m->cap * 2 : m->cap);
  insert_slot(m->slots, m->cap, id, value);
  m->used++;
  m->live++;
}

static id_slot *find(const id_map *m, uint64_t id) {
  if (m->cap == 0) return NULL;
  size_t i = slot_of(id, m->cap);
  while (m->slots[i].id != 0) {
    if (m->slots[i].id == id) return &m->slots[i];
    i = (i + 1) & (m->cap - 1);
  }
  return NULL;
}

void *id_map_get(const id_map *m, uint64_t id) {
  id_slot *s = find(m, id);
  return s ? s->value : NULL;
}

void *id_map_del(id_map *m, uint64_t id) {
  id_slot *s = find(m, id);
  if (s == NULL) return NULL;
  void *value = s->value;
  s->id = ID_DELETED;
  s->value = NULL;
  m->live--;
  return value;
}

void id_map_clear(id_map *m, void (*each)(void *value)) {
  for (size_t i = 0; i < m->cap; i++) {
    uint64_t id = m->slots[i].id;
    if (id != 0 && id != ID_DELETED) each(m->slots[i].value);
  }
  id_map_free(m);
}
