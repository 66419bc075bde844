/*
 * proto.c: the frame header and the incremental decoder.
 *
 * The decoder keeps the unconsumed bytes [start, len) of d->buf. Frames are
 * handed out as pointers into that buffer, so nothing moves until the next
 * decoder call; feed() is where the buffer is compacted and grown.
 */
#include "proto.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"

/* First allocation; small control frames fit without growing. */
#define DECODER_MIN_CAP 4096
/*
 * An idle decoder holding more than this gives the memory back: one large
 * deploy frame must not pin 80 MiB per channel for the rest of its life.
 */
#define DECODER_KEEP_CAP (256u * 1024u)

static uint32_t load_be32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static void store_be32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24);
  p[1] = (uint8_t)(v >> 16);
  p[2] = (uint8_t)(v >> 8);
  p[3] = (uint8_t)v;
}

static int type_valid(uint8_t type) { return type != 0 && type < PROTO_TYPE_MAX; }

void proto_decoder_init(proto_decoder *d, uint32_t max_payload) {
  memset(d, 0, sizeof *d);
  d->max_payload = max_payload < PROTO_MAX_PAYLOAD ? max_payload : PROTO_MAX_PAYLOAD;
}

void proto_decoder_free(proto_decoder *d) {
  free(d->buf);
  d->buf = NULL;
  d->len = d->start = d->cap = 0;
}

/*
 * Drops consumed bytes so the buffer only ever holds the unread tail, and
 * shrinks a buffer that grew for a large frame once the tail is small again.
 */
static void decoder_compact(proto_decoder *d) {
  if (d->start == 0) return;
  size_t held = d->len - d->start;
  if (held > 0) memmove(d->buf, d->buf + d->start, held);
  d->len = held;
  d->start = 0;
  if (d->cap > DECODER_KEEP_CAP && held <= DECODER_KEEP_CAP / 2) {
    if (held == 0) {
      free(d->buf);
      d->buf = NULL;
      d->cap = 0;
    } else {
      d->buf = xrealloc(d->buf, DECODER_KEEP_CAP);
      d->cap = DECODER_KEEP_CAP;
    }
  }
}

/*
 * Grows to hold `need` bytes. Doubling stops at one maximal frame: a header
 * can never make us reserve more than that. Only a caller that feeds more
 * than a frame's worth without draining pushes past it, and then we take
 * exactly what it handed us.
 */
static void decoder_reserve(proto_decoder *d, size_t need) {
  if (need <= d->cap) return;
  size_t bound = (size_t)PROTO_HEADER_SIZE + d->max_payload;
  size_t cap = d->cap ? d->cap : DECODER_MIN_CAP;
  while (cap < need && cap < bound) cap *= 2;
  if (cap > bound) cap = bound;
  if (cap < need) cap = need;
  d->buf = xrealloc(d->buf, cap);
  d->cap = cap;
}

int proto_decoder_feed(proto_decoder *d, const void *data, size_t len) {
  if (d->error) return d->error;
  if (len == 0) return 0;
  decoder_compact(d);
  if (len > SIZE_MAX - d->len) abort(); /* cannot be held in memory anyway */
  decoder_reserve(d, d->len + len);
  memcpy(d->buf + d->len, data, len);
  d->len += len;
  return 0;
}

/* Validates a header; the length is checked against this decoder's limit. */
static int header_check(const proto_decoder *d, const uint8_t *h) {
  if (h[0] != PROTO_MAGIC0 || h[1] != PROTO_MAGIC1) return PROTO_EMAGIC;
  if (h[2] != PROTO_VERSION) return PROTO_EVERSION;
  if (!type_valid(h[3])) return PROTO_ETYPE;
  if (load_be32(h + 8) > d->max_payload) return PROTO_ETOOBIG;
  return 0;
}

int proto_decoder_next(proto_decoder *d, proto_frame *frame) {
  if (d->error) return d->error;
  size_t held = d->len - d->start;
  if (held < PROTO_HEADER_SIZE) return 0;

  const uint8_t *h = d->buf + d->start;
  int err = header_check(d, h);
  if (err) {
    d->error = err;
    return err;
  }
  uint32_t length = load_be32(h + 8);
  if (held - PROTO_HEADER_SIZE < length) return 0;

  frame->type = h[3];
  frame->id = load_be32(h + 4);
  frame->length = length;
  frame->payload = h + PROTO_HEADER_SIZE;
  d->start += PROTO_HEADER_SIZE + (size_t)length;
  return 1;
}

int proto_encode_header(uint8_t out[PROTO_HEADER_SIZE], uint8_t type, uint32_t id,
                        uint32_t length) {
  if (!type_valid(type)) return PROTO_ETYPE;
  if (length > PROTO_MAX_PAYLOAD) return PROTO_ETOOBIG;
  out[0] = PROTO_MAGIC0;
  out[1] = PROTO_MAGIC1;
  out[2] = PROTO_VERSION;
  out[3] = type;
  store_be32(out + 4, id);
  store_be32(out + 8, length);
  return 0;
}

const char *proto_strerror(int err) {
  switch (err) {
    case 0: return "success";
    case PROTO_EMAGIC: return "bad frame magic (not an edgenode proto stream)";
    case PROTO_EVERSION: return "unsupported proto version";
    case PROTO_ETYPE: return "invalid frame type";
    case PROTO_ETOOBIG: return "frame payload over the maximum size";
  }
  /* Everything else the channel reports is a libuv (negative errno) error. */
  if (err < 0) return uv_strerror(err);
  return "unknown error";
}

const char *proto_type_name(uint8_t type) {
  switch ((proto_type)type) {
    case PROTO_HELLO: return "hello";
    case PROTO_WORKER_GET: return "worker_get";
    case PROTO_WORKER_SPEC: return "worker_spec";
    case PROTO_WORKER_CHANGED: return "worker_changed";
    case PROTO_VALIDATE: return "validate";
    case PROTO_VALIDATE_RESULT: return "validate_result";
    case PROTO_DRAIN: return "drain";
    case PROTO_STATS: return "stats";
    case PROTO_EVENT: return "event";
    case PROTO_ERROR: return "error";
    case PROTO_PING: return "ping";
    case PROTO_PONG: return "pong";
    case PROTO_RUN: return "run";
    case PROTO_RUN_RESULT: return "run_result";
    case PROTO_CORDON: return "cordon";
    case PROTO_CORDON_DONE: return "cordon_done";
    case PROTO_TAIL: return "tail";
    case PROTO_TAIL_LINE: return "tail_line";
    case PROTO_ROUTES: return "routes";
    case PROTO_FACET_ACQUIRE: return "facet_acquire";
    case PROTO_FACET_PUBLISH: return "facet_publish";
    case PROTO_FACET_ANSWER: return "facet_answer";
    case PROTO_EGRESS_POLICY: return "egress_policy";
    case PROTO_SECRET_PUT: return "secret_put";
    case PROTO_SECRET_LIST: return "secret_list";
    case PROTO_SECRET_DELETE: return "secret_delete";
    case PROTO_EGRESS_REPLY: return "egress_reply";
    case PROTO_FETCH: return "fetch";
    case PROTO_FETCH_HEAD: return "fetch_head";
    case PROTO_FETCH_READ: return "fetch_read";
    case PROTO_FETCH_DATA: return "fetch_data";
    case PROTO_FETCH_CANCEL: return "fetch_cancel";
    case PROTO_TYPE_MAX: break;
  }
  return "unknown";
}
