/* Unit tests for proto/: the frame header, the decoder and the libuv channel. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "base.h"
#include "proto.h"

/* ---- helpers ---------------------------------------------------------- */

/* Appends one encoded frame to buf at *off. */
static void put_frame(uint8_t *buf, size_t *off, uint8_t type, uint32_t id, const void *payload,
                      uint32_t length) {
  assert_int_equal(proto_encode_header(buf + *off, type, id, length), 0);
  *off += PROTO_HEADER_SIZE;
  if (length > 0) memcpy(buf + *off, payload, length);
  *off += length;
}

static void raw_header(uint8_t h[PROTO_HEADER_SIZE], uint8_t m0, uint8_t m1, uint8_t version,
                       uint8_t type, uint32_t length) {
  h[0] = m0;
  h[1] = m1;
  h[2] = version;
  h[3] = type;
  h[4] = 0, h[5] = 0, h[6] = 0, h[7] = 7;
  h[8] = (uint8_t)(length >> 24);
  h[9] = (uint8_t)(length >> 16);
  h[10] = (uint8_t)(length >> 8);
  h[11] = (uint8_t)length;
}

/* Payload byte i of the frame with this id: lets a receiver check every byte. */
static uint8_t pattern(uint32_t id, size_t i) { return (uint8_t)(id * 31u + i * 7u); }

/* ---- header ----------------------------------------------------------- */

static void test_encode_header_layout(void **state) {
  (void)state;
  uint8_t h[PROTO_HEADER_SIZE];
  assert_int_equal(proto_encode_header(h, PROTO_PING, 0x01020304u, 0x0A0B0C0Du), PROTO_ETOOBIG);
  assert_int_equal(proto_encode_header(h, PROTO_PING, 0x01020304u, 0x00A0B0C0u), 0);
  const uint8_t want[PROTO_HEADER_SIZE] = {0xED, 0x6E, PROTO_VERSION, PROTO_PING, 1, 2, 3, 4,
                                           0x00, 0xA0, 0xB0, 0xC0};
  assert_memory_equal(h, want, sizeof want);
}

static void test_encode_header_errors(void **state) {
  (void)state;
  uint8_t h[PROTO_HEADER_SIZE];
  assert_int_equal(proto_encode_header(h, 0, 1, 0), PROTO_ETYPE);
  assert_int_equal(proto_encode_header(h, PROTO_TYPE_MAX, 1, 0), PROTO_ETYPE);
  assert_int_equal(proto_encode_header(h, 255, 1, 0), PROTO_ETYPE);
  assert_int_equal(proto_encode_header(h, PROTO_HELLO, 1, PROTO_MAX_PAYLOAD), 0);
  assert_int_equal(proto_encode_header(h, PROTO_HELLO, 1, PROTO_MAX_PAYLOAD + 1), PROTO_ETOOBIG);
  assert_int_equal(proto_encode_header(h, PROTO_TYPE_MAX - 1, 1, 0), 0);
}

static void test_names(void **state) {
  (void)state;
  assert_string_equal(proto_type_name(PROTO_HELLO), "hello");
  assert_string_equal(proto_type_name(PROTO_RUN_RESULT), "run_result");
  assert_string_equal(proto_type_name(0), "unknown");
  assert_string_equal(proto_type_name(200), "unknown");
  int errs[] = {PROTO_EMAGIC, PROTO_EVERSION, PROTO_ETYPE, PROTO_ETOOBIG, UV_EOF, UV_EPIPE};
  for (size_t i = 0; i < ARRAY_SIZE(errs); i++) {
    assert_non_null(proto_strerror(errs[i]));
    assert_true(strlen(proto_strerror(errs[i])) > 0);
  }
  assert_string_not_equal(proto_strerror(PROTO_EMAGIC), proto_strerror(PROTO_ETOOBIG));
}

/* ---- decoder ---------------------------------------------------------- */

static void test_round_trip(void **state) {
  (void)state;
  const char *json = "{\"name\":\"hello\"}";
  uint8_t buf[128];
  size_t n = 0;
  put_frame(buf, &n, PROTO_WORKER_GET, 42, json, (uint32_t)strlen(json));

  proto_decoder d;
  proto_decoder_init(&d, 1024);
  assert_int_equal(proto_decoder_feed(&d, buf, n), 0);
  proto_frame f;
  assert_int_equal(proto_decoder_next(&d, &f), 1);
  assert_int_equal(f.type, PROTO_WORKER_GET);
  assert_int_equal(f.id, 42);
  assert_int_equal(f.length, strlen(json));
  assert_memory_equal(f.payload, json, f.length);
  assert_int_equal(proto_decoder_next(&d, &f), 0);
  proto_decoder_free(&d);
}

static void test_split_byte_by_byte(void **state) {
  (void)state;
  uint8_t buf[4096];
  size_t n = 0;
  uint8_t payload[300];
  for (size_t i = 0; i < sizeof payload; i++) payload[i] = pattern(9, i);
  put_frame(buf, &n, PROTO_HELLO, 0, "{\"pid\":1}", 9);
  put_frame(buf, &n, PROTO_PING, 7, NULL, 0);
  put_frame(buf, &n, PROTO_STATS, 9, payload, sizeof payload);

  proto_decoder d;
  proto_decoder_init(&d, 1024);
  proto_frame f;
  int got = 0;
  for (size_t i = 0; i < n; i++) {
    assert_int_equal(proto_decoder_feed(&d, buf + i, 1), 0);
    int rc;
    while ((rc = proto_decoder_next(&d, &f)) == 1) {
      got++;
      if (got == 1) {
        assert_int_equal(f.type, PROTO_HELLO);
        assert_memory_equal(f.payload, "{\"pid\":1}", 9);
        assert_int_equal(i, PROTO_HEADER_SIZE + 9 - 1);
      } else if (got == 2) {
        assert_int_equal(f.type, PROTO_PING);
        assert_int_equal(f.id, 7);
        assert_int_equal(f.length, 0);
      } else {
        assert_int_equal(f.type, PROTO_STATS);
        assert_int_equal(f.length, sizeof payload);
        assert_memory_equal(f.payload, payload, sizeof payload);
        assert_int_equal(i, n - 1);
      }
    }
    assert_int_equal(rc, 0);
  }
  assert_int_equal(got, 3);
  proto_decoder_free(&d);
}

static void test_many_frames_one_feed(void **state) {
  (void)state;
  enum { N = 5000 };
  uint8_t *buf = xmalloc((size_t)N * (PROTO_HEADER_SIZE + 16));
  size_t n = 0;
  for (uint32_t i = 0; i < N; i++) {
    uint8_t p[16];
    for (size_t j = 0; j < i % 17; j++) p[j] = pattern(i, j);
    put_frame(buf, &n, PROTO_EVENT, i, p, i % 17);
  }
  proto_decoder d;
  proto_decoder_init(&d, 64);
  assert_int_equal(proto_decoder_feed(&d, buf, n), 0);
  proto_frame f;
  uint32_t i = 0;
  while (proto_decoder_next(&d, &f) == 1) {
    assert_int_equal(f.id, i);
    assert_int_equal(f.length, i % 17);
    for (size_t j = 0; j < f.length; j++) assert_int_equal(f.payload[j], pattern(i, j));
    i++;
  }
  assert_int_equal(i, N);
  assert_int_equal(proto_decoder_next(&d, &f), 0);
  proto_decoder_free(&d);
  free(buf);
}

/* A long stream fed in chunks and drained as it goes must not grow the buffer. */
static void test_long_stream_memory_flat(void **state) {
  (void)state;
  uint8_t frame[PROTO_HEADER_SIZE + 100];
  size_t flen = 0;
  uint8_t p[100];
  memset(p, 'x', sizeof p);
  put_frame(frame, &flen, PROTO_STATS, 0, p, sizeof p);

  proto_decoder d;
  proto_decoder_init(&d, 1024);
  uint8_t chunk[1000];
  size_t pos = 0; /* position in the endless repetition of `frame` */
  size_t frames = 0, max_cap = 0;
  for (int round = 0; round < 20000; round++) {
    for (size_t i = 0; i < sizeof chunk; i++, pos++) chunk[i] = frame[pos % flen];
    assert_int_equal(proto_decoder_feed(&d, chunk, sizeof chunk), 0);
    proto_frame f;
    while (proto_decoder_next(&d, &f) == 1) frames++;
    if (d.cap > max_cap) max_cap = d.cap;
  }
  assert_int_equal(frames, 20000 * sizeof chunk / flen);
  assert_true(max_cap <= 4096);
  proto_decoder_free(&d);
}

/* After one large frame the decoder gives its memory back once drained. */
static void test_big_frame_memory_released(void **state) {
  (void)state;
  size_t big = 4u * 1024 * 1024;
  uint8_t *buf = xcalloc(1, PROTO_HEADER_SIZE + big);
  size_t n = 0;
  put_frame(buf, &n, PROTO_VALIDATE, 1, buf + PROTO_HEADER_SIZE, (uint32_t)big);

  proto_decoder d;
  proto_decoder_init(&d, PROTO_MAX_PAYLOAD);
  proto_frame f;
  for (size_t off = 0; off < n; off += 65536) {
    size_t len = n - off < 65536 ? n - off : 65536;
    assert_int_equal(proto_decoder_feed(&d, buf + off, len), 0);
    assert_int_equal(proto_decoder_next(&d, &f), off + len == n ? 1 : 0);
    assert_true(d.cap <= 2 * (PROTO_HEADER_SIZE + big));
  }
  assert_int_equal(f.length, big);
  uint8_t ping[PROTO_HEADER_SIZE];
  assert_int_equal(proto_encode_header(ping, PROTO_PING, 2, 0), 0);
  assert_int_equal(proto_decoder_feed(&d, ping, sizeof ping), 0);
  assert_int_equal(proto_decoder_next(&d, &f), 1);
  assert_int_equal(f.type, PROTO_PING);
  assert_true(d.cap < 1024 * 1024);

  /* Again, but a partial frame follows the big one in the same read. */
  assert_int_equal(proto_decoder_feed(&d, buf, n), 0);
  assert_int_equal(proto_decoder_feed(&d, ping, 5), 0);
  assert_int_equal(proto_decoder_next(&d, &f), 1);
  assert_int_equal(f.length, big);
  assert_int_equal(proto_decoder_next(&d, &f), 0);
  assert_int_equal(proto_decoder_feed(&d, ping + 5, sizeof ping - 5), 0);
  assert_int_equal(proto_decoder_next(&d, &f), 1);
  assert_int_equal(f.type, PROTO_PING);
  assert_true(d.cap < 1024 * 1024);
  proto_decoder_free(&d);
  free(buf);
}

/* Feeds a header byte by byte: no verdict before byte 12, `want` at byte 12. */
static void expect_header_error(const uint8_t h[PROTO_HEADER_SIZE], uint32_t max, int want) {
  proto_decoder d;
  proto_decoder_init(&d, max);
  proto_frame f;
  for (size_t i = 0; i < PROTO_HEADER_SIZE - 1; i++) {
    assert_int_equal(proto_decoder_feed(&d, h + i, 1), 0);
    assert_int_equal(proto_decoder_next(&d, &f), 0);
  }
  assert_int_equal(proto_decoder_feed(&d, h + PROTO_HEADER_SIZE - 1, 1), 0);
  assert_int_equal(proto_decoder_next(&d, &f), want);
  assert_int_equal(d.error, want);
  /* Nothing was reserved for the payload the header announced. */
  assert_true(d.cap <= 4096);
  proto_decoder_free(&d);
}

static void test_bad_magic(void **state) {
  (void)state;
  uint8_t h[PROTO_HEADER_SIZE];
  raw_header(h, 0x00, PROTO_MAGIC1, PROTO_VERSION, PROTO_PING, 0);
  expect_header_error(h, 1024, PROTO_EMAGIC);
  raw_header(h, PROTO_MAGIC0, 0x6F, PROTO_VERSION, PROTO_PING, 0);
  expect_header_error(h, 1024, PROTO_EMAGIC);
  raw_header(h, 'G', 'E', 'T', ' ', 0x2F202020);
  expect_header_error(h, 1024, PROTO_EMAGIC);
}

static void test_bad_version(void **state) {
  (void)state;
  uint8_t h[PROTO_HEADER_SIZE];
  raw_header(h, PROTO_MAGIC0, PROTO_MAGIC1, 0, PROTO_PING, 0);
  expect_header_error(h, 1024, PROTO_EVERSION);
  raw_header(h, PROTO_MAGIC0, PROTO_MAGIC1, PROTO_VERSION + 1, PROTO_PING, 0);
  expect_header_error(h, 1024, PROTO_EVERSION);
}

static void test_bad_type(void **state) {
  (void)state;
  uint8_t h[PROTO_HEADER_SIZE];
  raw_header(h, PROTO_MAGIC0, PROTO_MAGIC1, PROTO_VERSION, 0, 0);
  expect_header_error(h, 1024, PROTO_ETYPE);
  raw_header(h, PROTO_MAGIC0, PROTO_MAGIC1, PROTO_VERSION, PROTO_TYPE_MAX, 0);
  expect_header_error(h, 1024, PROTO_ETYPE);
  raw_header(h, PROTO_MAGIC0, PROTO_MAGIC1, PROTO_VERSION, 0xFF, 0);
  expect_header_error(h, 1024, PROTO_ETYPE);
}

/* The length is refused from the header alone: no payload byte is ever sent. */
static void test_too_big_before_payload(void **state) {
  (void)state;
  uint8_t h[PROTO_HEADER_SIZE];
  raw_header(h, PROTO_MAGIC0, PROTO_MAGIC1, PROTO_VERSION, PROTO_RUN, 1025);
  expect_header_error(h, 1024, PROTO_ETOOBIG);
  raw_header(h, PROTO_MAGIC0, PROTO_MAGIC1, PROTO_VERSION, PROTO_RUN, 0xFFFFFFFFu);
  expect_header_error(h, PROTO_MAX_PAYLOAD, PROTO_ETOOBIG);
  raw_header(h, PROTO_MAGIC0, PROTO_MAGIC1, PROTO_VERSION, PROTO_RUN, PROTO_MAX_PAYLOAD + 1);
  expect_header_error(h, PROTO_MAX_PAYLOAD, PROTO_ETOOBIG);
  /* A maximum above the hard ceiling is clamped to it. */
  raw_header(h, PROTO_MAGIC0, PROTO_MAGIC1, PROTO_VERSION, PROTO_RUN, PROTO_MAX_PAYLOAD + 1);
  expect_header_error(h, UINT32_MAX, PROTO_ETOOBIG);
}

static void test_sticky_error(void **state) {
  (void)state;
  uint8_t buf[256];
  size_t n = 0;
  put_frame(buf, &n, PROTO_PING, 1, NULL, 0);
  raw_header(buf + n, 0xEE, 0x6E, PROTO_VERSION, PROTO_PING, 0);
  n += PROTO_HEADER_SIZE;
  put_frame(buf, &n, PROTO_PONG, 1, NULL, 0);

  proto_decoder d;
  proto_decoder_init(&d, 1024);
  proto_frame f;
  assert_int_equal(proto_decoder_feed(&d, buf, n), 0);
  assert_int_equal(proto_decoder_next(&d, &f), 1);
  assert_int_equal(f.type, PROTO_PING);
  assert_int_equal(proto_decoder_next(&d, &f), PROTO_EMAGIC);
  /* The valid frame after the bad one is never reached, nor anything fed later. */
  assert_int_equal(proto_decoder_next(&d, &f), PROTO_EMAGIC);
  uint8_t ok[PROTO_HEADER_SIZE];
  assert_int_equal(proto_encode_header(ok, PROTO_PING, 3, 0), 0);
  assert_int_equal(proto_decoder_feed(&d, ok, sizeof ok), PROTO_EMAGIC);
  assert_int_equal(proto_decoder_next(&d, &f), PROTO_EMAGIC);
  proto_decoder_free(&d);
}

static void test_zero_length_payload(void **state) {
  (void)state;
  uint8_t buf[64];
  size_t n = 0;
  put_frame(buf, &n, PROTO_PONG, 0xFFFFFFFFu, NULL, 0);
  put_frame(buf, &n, PROTO_PONG, 5, NULL, 0);
  proto_decoder d;
  proto_decoder_init(&d, 0);
  proto_frame f;
  assert_int_equal(proto_decoder_feed(&d, buf, n), 0);
  assert_int_equal(proto_decoder_next(&d, &f), 1);
  assert_int_equal(f.id, 0xFFFFFFFFu);
  assert_int_equal(f.length, 0);
  assert_int_equal(proto_decoder_next(&d, &f), 1);
  assert_int_equal(f.id, 5);
  assert_int_equal(proto_decoder_next(&d, &f), 0);
  /* Feeding nothing is harmless. */
  assert_int_equal(proto_decoder_feed(&d, NULL, 0), 0);
  assert_int_equal(proto_decoder_next(&d, &f), 0);
  proto_decoder_free(&d);
}

static void test_max_payload_boundary(void **state) {
  (void)state;
  enum { MAX = 1000 };
  uint8_t *buf = xmalloc(2 * (PROTO_HEADER_SIZE + MAX + 1));
  uint8_t p[MAX + 1];
  for (size_t i = 0; i < sizeof p; i++) p[i] = pattern(3, i);
  size_t n = 0;
  put_frame(buf, &n, PROTO_WORKER_SPEC, 3, p, MAX);
  size_t first = n;
  put_frame(buf, &n, PROTO_WORKER_SPEC, 4, p, MAX + 1);

  proto_decoder d;
  proto_decoder_init(&d, MAX);
  proto_frame f;
  assert_int_equal(proto_decoder_feed(&d, buf, first + PROTO_HEADER_SIZE), 0);
  assert_int_equal(proto_decoder_next(&d, &f), 1);
  assert_int_equal(f.length, MAX);
  assert_memory_equal(f.payload, p, MAX);
  assert_int_equal(proto_decoder_next(&d, &f), PROTO_ETOOBIG);
  /* Only what was fed is held: the second header reserved nothing. */
  assert_true(d.cap <= first + PROTO_HEADER_SIZE);
  proto_decoder_free(&d);
  free(buf);
}

static void test_header_then_slow_payload(void **state) {
  (void)state;
  uint8_t buf[PROTO_HEADER_SIZE + 10];
  size_t n = 0;
  put_frame(buf, &n, PROTO_EVENT, 1, "0123456789", 10);
  proto_decoder d;
  proto_decoder_init(&d, 10);
  proto_frame f;
  assert_int_equal(proto_decoder_feed(&d, buf, PROTO_HEADER_SIZE), 0);
  assert_int_equal(proto_decoder_next(&d, &f), 0);
  assert_int_equal(proto_decoder_next(&d, &f), 0); /* asking twice changes nothing */
  assert_int_equal(proto_decoder_feed(&d, buf + PROTO_HEADER_SIZE, 9), 0);
  assert_int_equal(proto_decoder_next(&d, &f), 0);
  assert_int_equal(proto_decoder_feed(&d, buf + PROTO_HEADER_SIZE + 9, 1), 0);
  assert_int_equal(proto_decoder_next(&d, &f), 1);
  assert_memory_equal(f.payload, "0123456789", 10);
  proto_decoder_free(&d);
}

/* ---- channel ---------------------------------------------------------- */

typedef struct peer {
  proto_channel *ch;
  uint32_t received;      /* frames seen */
  uint32_t expect;        /* frames to receive before closing (0: never close) */
  int close_in_frame;     /* close from inside the first on_frame */
  int closes;             /* on_close calls */
  int reason;             /* last close reason */
  int free_on_close;      /* the channel was heap allocated: free it in on_close */
  int bad;                /* a frame did not match what was sent */
  int *all_done;          /* shared count of peers that reached `expect` */
} peer;

/* Frame i (1-based id) has i*37 % 2000 bytes, and frame 100 is large. */
static size_t frame_size(uint32_t id) { return id == 100 ? 3u * 1024 * 1024 + 17 : id * 37u % 2000; }

static int send_numbered(proto_channel *ch, uint32_t id) {
  size_t len = frame_size(id);
  uint8_t *p = xmalloc(len ? len : 1);
  for (size_t i = 0; i < len; i++) p[i] = pattern(id, i);
  int rc = proto_channel_send(ch, PROTO_EVENT, id, p, len);
  free(p);
  return rc;
}

static void on_frame(proto_channel *ch, const proto_frame *f) {
  peer *p = ch->data;
  p->received++;
  if (f->type != PROTO_EVENT || f->id != p->received || f->length != frame_size(f->id)) {
    p->bad++;
  } else {
    for (size_t i = 0; i < f->length; i++) {
      if (f->payload[i] != pattern(f->id, i)) {
        p->bad++;
        break;
      }
    }
  }
  if (p->close_in_frame) {
    proto_channel_close(ch);
    proto_channel_close(ch);
    return;
  }
  if (p->expect && p->received == p->expect && ++*p->all_done == 2) {
    /* Both sides have everything: tear both down. */
    proto_channel_close(ch);
  }
}

static void on_close(proto_channel *ch, int reason) {
  peer *p = ch->data;
  p->closes++;
  p->reason = reason;
  if (p->free_on_close) {
    free(ch);
    p->ch = NULL;
  }
}

static void socket_pair(int fds[2]) { assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0); }

static void run_and_close_loop(uv_loop_t *loop) {
  assert_int_equal(uv_run(loop, UV_RUN_DEFAULT), 0);
  assert_int_equal(uv_loop_close(loop), 0);
}

static void test_channel_exchange(void **state) {
  (void)state;
  enum { N = 2000 };
  uv_loop_t loop;
  assert_int_equal(uv_loop_init(&loop), 0);
  int fds[2];
  socket_pair(fds);
  int all_done = 0;
  proto_channel a, b;
  peer pa = {.ch = &a, .expect = N, .all_done = &all_done};
  peer pb = {.ch = &b, .expect = N, .all_done = &all_done};
  assert_int_equal(proto_channel_open_fd(&a, &loop, fds[0], on_frame, on_close, &pa), 0);
  assert_int_equal(proto_channel_open_fd(&b, &loop, fds[1], on_frame, on_close, &pb), 0);
  for (uint32_t i = 0; i < N; i++) {
    assert_int_equal(proto_channel_request_id(&a), i + 1);
    assert_int_equal(send_numbered(&a, i + 1), 0);
    assert_int_equal(proto_channel_request_id(&b), i + 1);
    assert_int_equal(send_numbered(&b, i + 1), 0);
  }
  /* The last peer to finish closes its end; the other sees end of stream. */
  run_and_close_loop(&loop);
  assert_int_equal(pa.received, N);
  assert_int_equal(pb.received, N);
  assert_int_equal(pa.bad, 0);
  assert_int_equal(pb.bad, 0);
  assert_int_equal(pa.closes, 1);
  assert_int_equal(pb.closes, 1);
  assert_true((pa.reason == 0 && pb.reason == UV_EOF) || (pa.reason == UV_EOF && pb.reason == 0));
}

static void test_channel_close_semantics(void **state) {
  (void)state;
  uv_loop_t loop;
  assert_int_equal(uv_loop_init(&loop), 0);
  int fds[2];
  socket_pair(fds);
  proto_channel a, b;
  peer pa = {.ch = &a}, pb = {.ch = &b};
  assert_int_equal(proto_channel_open_fd(&a, &loop, fds[0], on_frame, on_close, &pa), 0);
  assert_int_equal(proto_channel_open_fd(&b, &loop, fds[1], on_frame, on_close, &pb), 0);
  assert_int_equal(send_numbered(&a, 1), 0);
  assert_int_equal(uv_run(&loop, UV_RUN_NOWAIT), 1);
  assert_int_equal(pb.received, 1);

  proto_channel_close(&a);
  proto_channel_close(&a); /* idempotent */
  assert_int_equal(pa.closes, 0); /* on_close runs from the loop, not inline */
  assert_int_equal(send_numbered(&a, 2), UV_EPIPE);
  /* b keeps running until it reads end of stream, then closes by itself. */
  run_and_close_loop(&loop);
  assert_int_equal(pa.closes, 1);
  assert_int_equal(pa.reason, 0);
  assert_int_equal(pb.closes, 1);
  assert_int_equal(pb.reason, UV_EOF);
  proto_channel_close(&b); /* after on_close: still harmless */
  assert_int_equal(pb.closes, 1);
}

/* Closing from on_frame while more frames sit in the same read stops delivery. */
static void test_channel_close_in_frame_cb(void **state) {
  (void)state;
  uv_loop_t loop;
  assert_int_equal(uv_loop_init(&loop), 0);
  int fds[2];
  socket_pair(fds);
  proto_channel *a = xcalloc(1, sizeof *a), *b = xcalloc(1, sizeof *b);
  peer pa = {.ch = a, .free_on_close = 1};
  peer pb = {.ch = b, .free_on_close = 1, .close_in_frame = 1};
  assert_int_equal(proto_channel_open_fd(a, &loop, fds[0], on_frame, on_close, &pa), 0);
  assert_int_equal(proto_channel_open_fd(b, &loop, fds[1], on_frame, on_close, &pb), 0);
  for (uint32_t i = 1; i <= 20; i++) assert_int_equal(send_numbered(a, i), 0);
  run_and_close_loop(&loop);
  assert_int_equal(pb.received, 1);
  assert_int_equal(pb.bad, 0);
  assert_int_equal(pb.closes, 1);
  assert_int_equal(pb.reason, 0);
  assert_null(pb.ch);
  /* a saw b go away: end of stream or a reset, depending on unread bytes. */
  assert_int_equal(pa.closes, 1);
  assert_true(pa.reason == UV_EOF || pa.reason == UV_ECONNRESET);
  assert_null(pa.ch);
}

/* Closing with writes still queued frees them (checked under valgrind/ASan). */
static void test_channel_close_with_queued_writes(void **state) {
  (void)state;
  uv_loop_t loop;
  assert_int_equal(uv_loop_init(&loop), 0);
  int fds[2];
  socket_pair(fds);
  proto_channel a;
  peer pa = {.ch = &a};
  assert_int_equal(proto_channel_open_fd(&a, &loop, fds[0], on_frame, on_close, &pa), 0);
  /* Nobody reads fds[1]: the socket buffer fills and writes queue up. */
  for (uint32_t i = 98; i <= 101; i++) assert_int_equal(send_numbered(&a, i), 0);
  assert_true(uv_stream_get_write_queue_size((uv_stream_t *)&a.pipe) > 0);
  proto_channel_close(&a);
  run_and_close_loop(&loop);
  assert_int_equal(pa.closes, 1);
  assert_int_equal(pa.reason, 0);
  close(fds[1]);
}

/* Writes raw bytes at a channel: it must close with the decoder's verdict. */
static void expect_channel_rejects(const uint8_t *bytes, size_t len, int want) {
  uv_loop_t loop;
  assert_int_equal(uv_loop_init(&loop), 0);
  int fds[2];
  socket_pair(fds);
  proto_channel b;
  peer pb = {.ch = &b};
  assert_int_equal(proto_channel_open_fd(&b, &loop, fds[1], on_frame, on_close, &pb), 0);
  assert_int_equal(write(fds[0], bytes, len), (ssize_t)len);
  run_and_close_loop(&loop);
  assert_int_equal(pb.closes, 1);
  assert_int_equal(pb.reason, want);
  close(fds[0]);
}

static void test_channel_malformed(void **state) {
  (void)state;
  const char *http = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  expect_channel_rejects((const uint8_t *)http, strlen(http), PROTO_EMAGIC);

  uint8_t buf[64];
  size_t n = 0;
  put_frame(buf, &n, PROTO_PING, 1, NULL, 0); /* one good frame first */
  raw_header(buf + n, PROTO_MAGIC0, PROTO_MAGIC1, PROTO_VERSION, PROTO_EVENT, 0xFFFFFFF0u);
  n += PROTO_HEADER_SIZE;
  expect_channel_rejects(buf, n, PROTO_ETOOBIG);

  raw_header(buf, PROTO_MAGIC0, PROTO_MAGIC1, 9, PROTO_EVENT, 0);
  expect_channel_rejects(buf, PROTO_HEADER_SIZE, PROTO_EVERSION);
  raw_header(buf, PROTO_MAGIC0, PROTO_MAGIC1, PROTO_VERSION, 0, 0);
  expect_channel_rejects(buf, PROTO_HEADER_SIZE, PROTO_ETYPE);
}

static void test_channel_send_errors(void **state) {
  (void)state;
  uv_loop_t loop;
  assert_int_equal(uv_loop_init(&loop), 0);
  int fds[2];
  socket_pair(fds);
  proto_channel a;
  peer pa = {.ch = &a};
  assert_int_equal(proto_channel_open_fd(&a, &loop, fds[0], on_frame, on_close, &pa), 0);
  assert_int_equal(proto_channel_send(&a, 0, 1, NULL, 0), PROTO_ETYPE);
  assert_int_equal(proto_channel_send(&a, PROTO_TYPE_MAX, 1, NULL, 0), PROTO_ETYPE);
  assert_int_equal(proto_channel_send(&a, PROTO_PING, 1, NULL, (size_t)PROTO_MAX_PAYLOAD + 1),
                   PROTO_ETOOBIG);
  assert_int_equal(proto_channel_send(&a, PROTO_PING, 1, NULL, 0), 0);
  proto_channel_close(&a);
  run_and_close_loop(&loop);
  assert_int_equal(pa.closes, 1);
  close(fds[1]);
}

static void test_channel_open_bad_fd(void **state) {
  (void)state;
  uv_loop_t loop;
  assert_int_equal(uv_loop_init(&loop), 0);
  proto_channel a;
  peer pa = {.ch = &a};
  int fds[2];
  socket_pair(fds);
  close(fds[0]);
  close(fds[1]);
  assert_int_equal(proto_channel_open_fd(&a, &loop, -1, on_frame, on_close, &pa), UV_EINVAL);
  assert_int_equal(proto_channel_open_fd(&a, &loop, fds[0], on_frame, on_close, &pa), UV_EBADF);
  assert_int_equal(proto_channel_open_fd(&a, &loop, 0, NULL, on_close, &pa), UV_EINVAL);
  /* Nothing joined the loop, so it closes cleanly and on_close never ran. */
  run_and_close_loop(&loop);
  assert_int_equal(pa.closes, 0);
}

/* proto_channel_start on a pipe the caller initialised (as uv_spawn does). */
static void test_channel_start_on_pipe(void **state) {
  (void)state;
  uv_loop_t loop;
  assert_int_equal(uv_loop_init(&loop), 0);
  int fds[2];
  socket_pair(fds);
  int all_done = 1; /* only b counts: it closes after one frame */
  proto_channel a, b;
  peer pa = {.ch = &a};
  peer pb = {.ch = &b, .expect = 1, .all_done = &all_done};
  assert_int_equal(uv_pipe_init(&loop, &b.pipe, 0), 0);
  assert_int_equal(uv_pipe_open(&b.pipe, fds[1]), 0);
  assert_int_equal(proto_channel_start(&b, on_frame, on_close, &pb), 0);
  assert_int_equal(proto_channel_open_fd(&a, &loop, fds[0], on_frame, on_close, &pa), 0);
  assert_int_equal(send_numbered(&a, 1), 0);
  run_and_close_loop(&loop);
  assert_int_equal(pb.received, 1);
  assert_int_equal(pb.bad, 0);
  assert_int_equal(pb.reason, 0);
  assert_int_equal(pa.reason, UV_EOF);
}

static void test_request_id_wraps(void **state) {
  (void)state;
  proto_channel ch;
  memset(&ch, 0, sizeof ch);
  assert_int_equal(proto_channel_request_id(&ch), 1);
  assert_int_equal(proto_channel_request_id(&ch), 2);
  ch.next_id = UINT32_MAX - 1;
  assert_int_equal(proto_channel_request_id(&ch), UINT32_MAX);
  assert_int_equal(proto_channel_request_id(&ch), 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_encode_header_layout),
      cmocka_unit_test(test_encode_header_errors),
      cmocka_unit_test(test_names),
      cmocka_unit_test(test_round_trip),
      cmocka_unit_test(test_split_byte_by_byte),
      cmocka_unit_test(test_many_frames_one_feed),
      cmocka_unit_test(test_long_stream_memory_flat),
      cmocka_unit_test(test_big_frame_memory_released),
      cmocka_unit_test(test_bad_magic),
      cmocka_unit_test(test_bad_version),
      cmocka_unit_test(test_bad_type),
      cmocka_unit_test(test_too_big_before_payload),
      cmocka_unit_test(test_sticky_error),
      cmocka_unit_test(test_zero_length_payload),
      cmocka_unit_test(test_max_payload_boundary),
      cmocka_unit_test(test_header_then_slow_payload),
      cmocka_unit_test(test_channel_exchange),
      cmocka_unit_test(test_channel_close_semantics),
      cmocka_unit_test(test_channel_close_in_frame_cb),
      cmocka_unit_test(test_channel_close_with_queued_writes),
      cmocka_unit_test(test_channel_malformed),
      cmocka_unit_test(test_channel_send_errors),
      cmocka_unit_test(test_channel_open_bad_fd),
      cmocka_unit_test(test_channel_start_on_pipe),
      cmocka_unit_test(test_request_id_wraps),
  };
  return cmocka_run_group_tests_name("proto", tests, NULL, NULL);
}
