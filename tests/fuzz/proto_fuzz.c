/*
 * libFuzzer target for the proto decoder.
 *
 * Input layout: byte 0 picks the decoder's maximum payload (small, so the
 * too-big path is reachable), bytes 1-4 seed the chunk sizes, the rest is the
 * stream, fed in chunks of pseudo-random size and drained after each feed as
 * a channel does. Every frame handed out is checked against the bytes it came
 * from, and the decoder's memory and error invariants are checked throughout.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"

#define CHECK(cond) \
  do {              \
    if (!(cond)) abort(); \
  } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint32_t next_rand(uint32_t *s) {
  /* xorshift32: deterministic per input, so crashes replay exactly. */
  uint32_t x = *s ? *s : 0x9E3779B9u;
  x ^= x << 13;
  x ^= x >> 17;
  x ^= x << 5;
  return *s = x;
}

static const uint32_t max_choices[] = {0, 1, 16, 64, 255, 1024, 4096, 65536};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 5) return 0;
  uint32_t max = max_choices[data[0] % (sizeof max_choices / sizeof max_choices[0])];
  uint32_t seed = (uint32_t)data[1] | (uint32_t)data[2] << 8 | (uint32_t)data[3] << 16 |
                  (uint32_t)data[4] << 24;
  const uint8_t *stream = data + 5;
  size_t len = size - 5;

  proto_decoder d;
  proto_decoder_init(&d, max);
  size_t off = 0, consumed = 0;
  int err = 0;
  while (off < len) {
    size_t chunk = 1 + next_rand(&seed) % (seed & 1 ? 16 : 300);
    if (chunk > len - off) chunk = len - off;
    int rc = proto_decoder_feed(&d, stream + off, chunk);
    CHECK(rc == err);
    off += chunk;
    /*
     * Drained after every feed, the decoder holds at most an incomplete frame
     * plus one chunk, so its buffer stays within one maximal frame plus slack.
     */
    CHECK(d.cap <= PROTO_HEADER_SIZE + (size_t)max + 4096);

    proto_frame f;
    while ((rc = proto_decoder_next(&d, &f)) == 1) {
      CHECK(err == 0);
      CHECK(f.length <= max);
      CHECK(consumed + PROTO_HEADER_SIZE + f.length <= off);
      /* The frame is exactly the bytes of the stream at this position. */
      uint8_t h[PROTO_HEADER_SIZE];
      CHECK(proto_encode_header(h, f.type, f.id, f.length) == 0);
      CHECK(memcmp(h, stream + consumed, PROTO_HEADER_SIZE) == 0);
      CHECK(f.length == 0 || memcmp(f.payload, stream + consumed + PROTO_HEADER_SIZE, f.length) == 0);
      CHECK(proto_type_name(f.type) != NULL);
      consumed += PROTO_HEADER_SIZE + f.length;
    }
    if (rc < 0) {
      CHECK(err == 0 || rc == err);
      CHECK(rc == PROTO_EMAGIC || rc == PROTO_EVERSION || rc == PROTO_ETYPE || rc == PROTO_ETOOBIG);
      /* Rejected as soon as the bad header was complete. */
      CHECK(off - consumed >= PROTO_HEADER_SIZE);
      CHECK(proto_strerror(rc) != NULL);
      err = rc;
    } else {
      CHECK(rc == 0);
      /* Whatever is left is an incomplete frame. */
      CHECK(d.len - d.start == off - consumed);
    }
  }
  if (err) CHECK(proto_decoder_next(&d, &(proto_frame){0}) == err);
  proto_decoder_free(&d);
  return 0;
}
