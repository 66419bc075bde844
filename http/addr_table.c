/*
 * Open connections per client address, for max_connections_per_addr: an
 * open-addressing table (linear probing, backward-shift deletion) keyed by
 * the address a connection is counted under. Touched once when a connection
 * is accepted and once when it closes, never per request. The hash is keyed
 * with random bits per server so that a client cannot pick addresses that
 * all land in one run of slots.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "http_int.h"

#define ADDR_TABLE_MIN 64

typedef struct addr_slot {
  http_addr_key key;
  uint32_t count;  /* 0: the slot is empty */
} addr_slot;

struct http_addr_table {
  addr_slot *slots;
  size_t cap;      /* a power of two */
  size_t used;
  uint64_t seed[2];
};

int http__addr_key(const struct sockaddr *sa, http_addr_key *out) {
  memset(out, 0, sizeof *out);
  if (sa->sa_family == AF_INET) {
    out->b[10] = out->b[11] = 0xff; /* as ::ffff:a.b.c.d, so both spellings count as one */
    memcpy(out->b + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
    return 0;
  }
  if (sa->sa_family != AF_INET6) return -1;
  const uint8_t *a = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
  static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (memcmp(a, mapped, sizeof mapped) == 0) memcpy(out->b, a, 16);
  else memcpy(out->b, a, 8); /* the /64 */
  return 0;
}

static uint64_t mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static size_t home(const http_addr_table *t, const http_addr_key *k) {
  uint64_t a, b;
  memcpy(&a, k->b, 8);
  memcpy(&b, k->b + 8, 8);
  return (size_t)(mix(a ^ t->seed[0]) ^ mix(b ^ t->seed[1])) & (t->cap - 1);
}

/* The slot holding k, or the empty slot where it would go. */
static addr_slot *find(const http_addr_table *t, const http_addr_key *k) {
  size_t i = home(t, k);
  while (t->slots[i].count != 0 && memcmp(&t->slots[i].key, k, sizeof *k) != 0)
    i = (i + 1) & (t->cap - 1);
  return &t->slots[i];
}

http_addr_table *http__addr_table_new(void) {
  http_addr_table *t = xcalloc(1, sizeof *t);
  t->cap = ADDR_TABLE_MIN;
  t->slots = xcalloc(t->cap, sizeof *t->slots);
  if (random_bytes(t->seed, sizeof t->seed) != 0) {
    t->seed[0] = uv_hrtime();
    t->seed[1] = (uint64_t)(uintptr_t)t;
  }
  return t;
}

void http__addr_table_free(http_addr_table *t) {
  if (t == NULL) return;
  free(t->slots);
  free(t);
}

/* Kept at most half full, so probe runs stay short. */
static void grow(http_addr_table *t) {
  addr_slot *old = t->slots;
  size_t old_cap = t->cap;
  t->cap *= 2;
  t->slots = xcalloc(t->cap, sizeof *t->slots);
  for (size_t i = 0; i < old_cap; i++)
    if (old[i].count != 0) *find(t, &old[i].key) = old[i];
  free(old);
}

int http__addr_acquire(http_addr_table *t, const http_addr_key *k, size_t max) {
  addr_slot *s = find(t, k);
  if (s->count == 0) {
    if (2 * (t->used + 1) > t->cap) {
      grow(t);
      s = find(t, k);
    }
    s->key = *k;
    t->used++;
  } else if (s->count >= max) {
    return -1;
  }
  s->count++;
  return 0;
}

void http__addr_release(http_addr_table *t, const http_addr_key *k) {
  addr_slot *s = find(t, k);
  if (s->count == 0 || --s->count > 0) return;
  /* Backward shift: pull later members of the run into the hole, so that
   * lookups never need tombstones. */
  size_t mask = t->cap - 1, hole = (size_t)(s - t->slots), j = hole;
  for (;;) {
    j = (j + 1) & mask;
    if (t->slots[j].count == 0) break;
    size_t h = home(t, &t->slots[j].key);
    int stays = hole <= j ? (hole < h && h <= j) : (hole < h || h <= j);
    if (stays) continue;
    t->slots[hole] = t->slots[j];
    hole = j;
  }
  t->slots[hole].count = 0;
  t->used--;
}
