#include <stdlib.h>

#include "base.h"
#include "worker.h"

#define TOKEN_DELETED UINT64_MAX

static size_t slot_of(uint64_t token, size_t cap) {
  /* Tokens are sequential: a multiplicative hash spreads them over the table. */
  return (size_t)((token * 0x9E3779B97F4A7C15ull) >> 17) & (cap - 1);
}

void token_map_init(token_map *m) {
  m->cap = 64;
  m->slots = xcalloc(m->cap, sizeof *m->slots);
  m->used = 0;
  m->live = 0;
}

void token_map_free(token_map *m) {
  free(m->slots);
  m->slots = NULL;
  m->cap = m->used = m->live = 0;
}

static void insert_slot(token_slot *slots, size_t cap, uint64_t token, inflight *f) {
  size_t i = slot_of(token, cap);
  while (slots[i].token != 0 && slots[i].token != TOKEN_DELETED) i = (i + 1) & (cap - 1);
  slots[i].token = token;
  slots[i].value = f;
}

static void rehash(token_map *m, size_t cap) {
  token_slot *slots = xcalloc(cap, sizeof *slots);
  for (size_t i = 0; i < m->cap; i++) {
    uint64_t t = m->slots[i].token;
    if (t != 0 && t != TOKEN_DELETED) insert_slot(slots, cap, t, m->slots[i].value);
  }
  free(m->slots);
  m->slots = slots;
  m->cap = cap;
  m->used = m->live;
}

void token_map_put(token_map *m, uint64_t token, inflight *f) {
  /* Deleted slots count as used so probe chains stay short; rehashing drops them. */
  if ((m->used + 1) * 4 > m->cap * 3) rehash(m, m->live * 2 >= m->cap / 2 ? m->cap * 2 : m->cap);
  insert_slot(m->slots, m->cap, token, f);
  m->used++;
  m->live++;
}

static token_slot *find(const token_map *m, uint64_t token) {
  size_t i = slot_of(token, m->cap);
  while (m->slots[i].token != 0) {
    if (m->slots[i].token == token) return &m->slots[i];
    i = (i + 1) & (m->cap - 1);
  }
  return NULL;
}

inflight *token_map_get(const token_map *m, uint64_t token) {
  token_slot *s = find(m, token);
  return s ? s->value : NULL;
}

void token_map_del(token_map *m, uint64_t token) {
  token_slot *s = find(m, token);
  if (s == NULL) return;
  s->token = TOKEN_DELETED;
  s->value = NULL;
  m->live--;
}
