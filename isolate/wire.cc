/*
 * The wire format of host calls (see isolate.h): a writer that appends
 * tagged values to a growable buffer, and a reader that walks them one
 * header at a time without allocating.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

namespace iso {

uint8_t *wire_append(iso_wire *w, size_t more) {
  if (w->cap - w->len < more) {
    size_t want = w->cap ? w->cap : 64;
    while (want - w->len < more)
      want *= 2;
    w->data = (uint8_t *)xrealloc(w->data, want);
    w->cap = want;
  }
  uint8_t *at = w->data + w->len;
  w->len += more;
  return at;
}

/* The format is little-endian, as the hosts this builds for are; a copy
 * is one move where the byte loops it replaced were not unrolled. */
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the wire format is little-endian");

void wire_put_header(uint8_t *p, uint8_t tag, uint32_t n) {
  p[0] = tag;
  memcpy(p + 1, &n, sizeof n);
}

}  // namespace iso

using iso::wire_append;
using iso::wire_put_header;

namespace {

void put_u64(uint8_t *p, uint64_t v) {
  memcpy(p, &v, sizeof v);
}

uint32_t get_u32(const uint8_t *p) {
  uint32_t v;
  memcpy(&v, p, sizeof v);
  return v;
}

uint64_t get_u64(const uint8_t *p) {
  uint64_t v;
  memcpy(&v, p, sizeof v);
  return v;
}

void wire_tag(iso_wire *w, uint8_t tag) {
  *wire_append(w, 1) = tag;
}

/* A tag and a u32: lengths and counts. Lengths past 4 GiB cannot be encoded
 * (V8 has no string that long); a caller passing one has a bug. */
void wire_tag_u32(iso_wire *w, uint8_t tag, size_t n) {
  if (n > UINT32_MAX)
    abort();
  wire_put_header(wire_append(w, 5), tag, (uint32_t)n);
}

}  // namespace

void iso_wire_init(iso_wire *w) {
  w->data = nullptr;
  w->len = 0;
  w->cap = 0;
}

void iso_wire_free(iso_wire *w) {
  free(w->data);
  iso_wire_init(w);
}

void iso_wire_undefined(iso_wire *w) {
  wire_tag(w, ISO_WIRE_UNDEFINED);
}

void iso_wire_null(iso_wire *w) {
  wire_tag(w, ISO_WIRE_NULL);
}

void iso_wire_bool(iso_wire *w, int value) {
  wire_tag(w, value ? ISO_WIRE_TRUE : ISO_WIRE_FALSE);
}

void iso_wire_number(iso_wire *w, double value) {
  uint64_t bits;
  memcpy(&bits, &value, sizeof(bits));
  uint8_t *p = wire_append(w, 9);
  p[0] = ISO_WIRE_NUMBER;
  put_u64(p + 1, bits);
}

void iso_wire_bigint(iso_wire *w, int64_t value) {
  uint8_t *p = wire_append(w, 9);
  p[0] = ISO_WIRE_BIGINT;
  put_u64(p + 1, (uint64_t)value);
}

void iso_wire_string(iso_wire *w, const char *s, size_t len) {
  wire_tag_u32(w, ISO_WIRE_STRING, len);
  if (len > 0)
    memcpy(wire_append(w, len), s, len);
}

void iso_wire_bytes(iso_wire *w, const void *data, size_t len) {
  wire_tag_u32(w, ISO_WIRE_BYTES, len);
  if (len > 0)
    memcpy(wire_append(w, len), data, len);
}

void iso_wire_array(iso_wire *w, uint32_t count) {
  wire_tag_u32(w, ISO_WIRE_ARRAY, count);
}

void iso_wire_object(iso_wire *w, uint32_t count) {
  wire_tag_u32(w, ISO_WIRE_OBJECT, count);
}

void iso_wire_reader_init(iso_wire_reader *r, const uint8_t *data, size_t len) {
  r->pos = data;
  r->end = data + (data ? len : 0);
}

int iso_wire_next(iso_wire_reader *r, iso_wire_value *v) {
  memset(v, 0, sizeof(*v));
  if (r->pos >= r->end)
    return 0;
  size_t left = (size_t)(r->end - r->pos) - 1;
  const uint8_t *p = r->pos + 1;
  v->type = r->pos[0];
  switch (v->type) {
  case ISO_WIRE_UNDEFINED:
  case ISO_WIRE_NULL:
  case ISO_WIRE_FALSE:
  case ISO_WIRE_TRUE:
    r->pos = p;
    return 1;
  case ISO_WIRE_NUMBER:
  case ISO_WIRE_BIGINT: {
    if (left < 8)
      return -1;
    uint64_t bits = get_u64(p);
    if (v->type == ISO_WIRE_NUMBER)
      memcpy(&v->number, &bits, sizeof(bits));
    else
      v->bigint = (int64_t)bits;
    r->pos = p + 8;
    return 1;
  }
  case ISO_WIRE_STRING:
  case ISO_WIRE_BYTES: {
    if (left < 4)
      return -1;
    size_t len = get_u32(p);
    if (len > left - 4)
      return -1;
    v->ptr = (const char *)p + 4;
    v->len = len;
    r->pos = p + 4 + len;
    return 1;
  }
  case ISO_WIRE_ARRAY:
  case ISO_WIRE_OBJECT: {
    if (left < 4)
      return -1;
    uint64_t count = get_u32(p);
    /* Every value takes at least one byte: a count the rest of the input
     * cannot hold is malformed, and a reader never allocates for it. */
    uint64_t min_bytes = v->type == ISO_WIRE_OBJECT ? count * 2 : count;
    if (min_bytes > left - 4)
      return -1;
    v->count = (uint32_t)count;
    r->pos = p + 4;
    return 1;
  }
  default:
    return -1;
  }
}
