/*
 * Chunked record values: writing them, reading them back, checking them,
 * dropping them with the history. Runs on the fleet's threads (blocking
 * JetStream calls), never on the loop.
 *
 * The stream keeps one message per subject and refuses a second one, as the
 * records stream does: a chunk, once acknowledged, is what every reader
 * gets. Chunks are read through the stream's leader (js_GetLastMsg), never
 * from a replica that may not have applied them yet: the record that names
 * them was written after they were acknowledged, so the leader has them.
 *
 * The value's SHA-256 is computed here (FIPS 180-4) rather than taken from
 * a crypto library: the supervisor links two of them (OpenSSL through
 * libnats, BoringSSL for the control API), and which one's symbol a call
 * would bind to is not worth depending on for 80 lines.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "chunks.h"
#include "fleet.h"

#define CHUNK_HEADROOM 4096 /* headers and protocol overhead within max_payload */
#define CHUNK_MIN 1024
#define SUBJECT_MAX 320
/* JetStream's "maximum messages per subject exceeded": the chunk is there
 * already, and only this write (its id is in the subject) could have put it. */
#define JS_ERR_SUBJECT_TAKEN 10077

/* ---- SHA-256 ---- */

typedef struct sha256 {
  uint32_t h[8];
  uint64_t bits;
  unsigned char block[64];
  size_t used;
} sha256;

static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

static uint32_t ror(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

static void sha256_block(sha256 *s, const unsigned char *p) {
  uint32_t w[64];
  for (int i = 0; i < 16; i++)
    w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 |
           (uint32_t)p[4 * i + 3];
  for (int i = 16; i < 64; i++) {
    uint32_t s0 = ror(w[i - 15], 7) ^ ror(w[i - 15], 18) ^ (w[i - 15] >> 3);
    uint32_t s1 = ror(w[i - 2], 17) ^ ror(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = s->h[0], b = s->h[1], c = s->h[2], d = s->h[3], e = s->h[4], f = s->h[5],
           g = s->h[6], h = s->h[7];
  for (int i = 0; i < 64; i++) {
    uint32_t t1 = h + (ror(e, 6) ^ ror(e, 11) ^ ror(e, 25)) + ((e & f) ^ (~e & g)) + K[i] + w[i];
    uint32_t t2 = (ror(a, 2) ^ ror(a, 13) ^ ror(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    h = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
  }
  s->h[0] += a, s->h[1] += b, s->h[2] += c, s->h[3] += d;
  s->h[4] += e, s->h[5] += f, s->h[6] += g, s->h[7] += h;
}

static void sha256_init(sha256 *s) {
  static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  memcpy(s->h, iv, sizeof iv);
  s->bits = 0;
  s->used = 0;
}

static void sha256_update(sha256 *s, const void *data, size_t len) {
  const unsigned char *p = data;
  s->bits += (uint64_t)len * 8;
  while (len > 0) {
    size_t take = 64 - s->used < len ? 64 - s->used : len;
    memcpy(s->block + s->used, p, take);
    s->used += take, p += take, len -= take;
    if (s->used == 64) {
      sha256_block(s, s->block);
      s->used = 0;
    }
  }
}

static void sha256_final_hex(sha256 *s, char out[CHUNK_SHA256_HEX + 1]) {
  uint64_t bits = s->bits;
  static const unsigned char pad[64] = {0x80};
  size_t n = s->used < 56 ? 56 - s->used : 120 - s->used;
  sha256_update(s, pad, n);
  unsigned char len_be[8];
  for (int i = 0; i < 8; i++) len_be[i] = (unsigned char)(bits >> (56 - 8 * i));
  sha256_update(s, len_be, 8);
  for (int i = 0; i < 8; i++) snprintf(out + 8 * i, 9, "%08" PRIx32, s->h[i]);
}

void chunk_sha256_hex(const void *data, size_t len, char out[CHUNK_SHA256_HEX + 1]) {
  sha256 s;
  sha256_init(&s);
  sha256_update(&s, data, len);
  sha256_final_hex(&s, out);
}

void fleet_sha256_hex(const void *data, size_t len, char out[FLEET_SHA256_HEX + 1]) {
  chunk_sha256_hex(data, len, out);
}

/* ---- the stream ---- */

size_t chunk_size_for(int64_t max_payload) {
  /* Unknown (no server's INFO yet): the servers' default, 1 MiB. */
  if (max_payload <= 0) max_payload = 1 << 20;
  if (max_payload < CHUNK_MIN + CHUNK_HEADROOM) return CHUNK_MIN;
  return (size_t)max_payload - CHUNK_HEADROOM;
}

natsStatus fleet__bind_write_once(jsCtx *js, const char *name, const char *subject, int replicas) {
  jsStreamInfo *si = NULL;
  jsErrCode je = 0;
  natsStatus s = js_GetStreamInfo(&si, js, name, NULL, &je);
  if (s == NATS_NOT_FOUND) {
    jsStreamConfig cfg;
    jsStreamConfig_Init(&cfg);
    const char *subjects[] = {subject};
    cfg.Name = name;
    cfg.Subjects = subjects;
    cfg.SubjectsLen = 1;
    cfg.Replicas = replicas;
    cfg.Storage = js_FileStorage;
    /* One message per subject, and a second one refused: each subject
     * can be written once, by one writer. */
    cfg.MaxMsgsPerSubject = 1;
    cfg.Discard = js_DiscardNew;
    cfg.DiscardNewPerSubject = true;
    cfg.MaxMsgs = -1;
    cfg.MaxBytes = -1;
    s = js_AddStream(&si, js, &cfg, NULL, &je);
    /* Another node may have created it between the two calls. */
    if (s != NATS_OK) s = js_GetStreamInfo(&si, js, name, NULL, &je);
  }
  if (si) jsStreamInfo_Destroy(si);
  return s;
}

/* A chunk is written once: it cannot change under a record that names it. */
natsStatus chunks_bind(jsCtx *js, int replicas) {
  return fleet__bind_write_once(js, CHUNKS_STREAM, "chunk.>", replicas);
}

static void chunk_subject(char *buf, size_t size, const char *bucket, const char *key,
                          uint64_t version, const char *id, uint32_t index) {
  snprintf(buf, size, "chunk.%s.%s.%" PRIu64 ".%s.%" PRIu32, bucket, key, version, id, index);
}

/* ---- writing ---- */

natsStatus chunks_put(jsCtx *js, const char *bucket, const char *key, uint64_t version,
                      const char *id, const void *value, size_t len, size_t chunk,
                      chunk_manifest *m) {
  const char *p = value;
  m->len = len;
  m->count = (uint32_t)((len + chunk - 1) / chunk);
  chunk_sha256_hex(value, len, m->sha256);
  for (uint32_t i = 0; i < m->count; i++) {
    size_t off = (size_t)i * chunk;
    size_t n = len - off < chunk ? len - off : chunk;
    char subject[SUBJECT_MAX];
    chunk_subject(subject, sizeof subject, bucket, key, version, id, i);
    jsPubAck *ack = NULL;
    jsErrCode je = 0;
    natsStatus s = js_Publish(&ack, js, subject, p + off, (int)n, NULL, &je);
    if (ack) jsPubAck_Destroy(ack);
    if (s != NATS_OK && je != JS_ERR_SUBJECT_TAKEN) return s;
  }
  return NATS_OK;
}

size_t chunk_manifest_format(const chunk_manifest *m, char *buf, size_t size) {
  int n = snprintf(buf, size, "%" PRIu64 " %" PRIu32 " %s", m->len, m->count, m->sha256);
  return n < 0 ? 0 : (size_t)n < size ? (size_t)n : size - 1;
}

int chunk_manifest_parse(const char *text, size_t len, uint64_t max_len, chunk_manifest *m) {
  char buf[128];
  if (len == 0 || len >= sizeof buf) return -1;
  memcpy(buf, text, len);
  buf[len] = '\0';
  unsigned long long vlen;
  unsigned long count;
  char hash[CHUNK_SHA256_HEX + 2];
  int used = 0;
  if (sscanf(buf, "%llu %lu %65s%n", &vlen, &count, hash, &used) != 3 || (size_t)used != len ||
      strlen(hash) != CHUNK_SHA256_HEX || strspn(hash, "0123456789abcdef") != CHUNK_SHA256_HEX)
    return -1;
  /* Every chunk but the last is CHUNK_MIN bytes at least: a manifest
   * naming more chunks would have readers ask for chunks never written. */
  if (vlen == 0 || vlen > max_len || count == 0 || count > (vlen + CHUNK_MIN - 1) / CHUNK_MIN)
    return -1;
  m->len = vlen;
  m->count = (uint32_t)count;
  memcpy(m->sha256, hash, sizeof m->sha256);
  return 0;
}

/* ---- reading ---- */

int chunks_get(jsCtx *js, const char *bucket, const char *key, uint64_t version, const char *id,
               const chunk_manifest *m, void **out, char *why, size_t why_size) {
  *out = NULL;
  char *value = xmalloc((size_t)m->len + 1);
  size_t got = 0;
  sha256 h;
  sha256_init(&h);
  int rc = 0;
  for (uint32_t i = 0; i < m->count && rc == 0; i++) {
    char subject[SUBJECT_MAX];
    chunk_subject(subject, sizeof subject, bucket, key, version, id, i);
    natsMsg *msg = NULL;
    jsErrCode je = 0;
    natsStatus s = js_GetLastMsg(&msg, js, CHUNKS_STREAM, subject, NULL, &je);
    if (s == NATS_NOT_FOUND) {
      snprintf(why, why_size, "chunk %" PRIu32 " of %" PRIu32 " is missing", i + 1, m->count);
      rc = CHUNKS_EMISSING;
    } else if (s != NATS_OK) {
      snprintf(why, why_size, "reading chunk %" PRIu32 ": %s", i + 1, natsStatus_GetText(s));
      rc = CHUNKS_EAGAIN;
    } else {
      int n = natsMsg_GetDataLength(msg);
      if (n <= 0 || (uint64_t)n > m->len - got) {
        snprintf(why, why_size, "chunk %" PRIu32 " of %" PRIu32 " has the wrong length", i + 1,
                 m->count);
        rc = CHUNKS_ECORRUPT;
      } else {
        memcpy(value + got, natsMsg_GetData(msg), (size_t)n);
        sha256_update(&h, value + got, (size_t)n);
        got += (size_t)n;
      }
      natsMsg_Destroy(msg);
    }
  }
  char hex[CHUNK_SHA256_HEX + 1];
  if (rc == 0 && got != m->len) {
    snprintf(why, why_size, "the chunks hold %zu bytes, the manifest says %" PRIu64, got, m->len);
    rc = CHUNKS_ECORRUPT;
  }
  if (rc == 0) {
    sha256_final_hex(&h, hex);
    if (strcmp(hex, m->sha256) != 0) {
      snprintf(why, why_size, "the chunks do not match the manifest's SHA-256");
      rc = CHUNKS_ECORRUPT;
    }
  }
  if (rc != 0) {
    free(value);
    return rc;
  }
  value[got] = '\0';
  *out = value;
  return 0;
}

/* ---- the history ---- */

static void purge_subject(jsCtx *js, const char *filter) {
  jsOptions o;
  jsOptions_Init(&o);
  o.Stream.Purge.Subject = filter;
  jsErrCode je = 0;
  (void)js_PurgeStream(js, CHUNKS_STREAM, &o, &je);
}

void chunks_purge_version(jsCtx *js, const char *bucket, const char *key, uint64_t version) {
  char filter[SUBJECT_MAX];
  snprintf(filter, sizeof filter, "chunk.%s.%s.%" PRIu64 ".>", bucket, key, version);
  purge_subject(js, filter);
}

void chunks_purge_write(jsCtx *js, const char *bucket, const char *key, uint64_t version,
                        const char *id) {
  char filter[SUBJECT_MAX];
  snprintf(filter, sizeof filter, "chunk.%s.%s.%" PRIu64 ".%s.*", bucket, key, version, id);
  purge_subject(js, filter);
}
