/*
 * chunks: record values too large for one NATS message (private to fleet/).
 *
 * A NATS server refuses a message over its max_payload (1 MiB by default),
 * and a deployed worker's record can hold 10 MiB of sources, more once they
 * are escaped as JSON. Such a value is written as chunks first, each one a
 * message of the stream EDGENODE_CHUNKS on
 *   chunk.<bucket>.<key>.<version>.<write id>.<index>
 * and only then is the version's record written, carrying a manifest
 * (length, number of chunks, SHA-256 of the whole value) instead of the
 * value. The version and the write id in the subject tie the chunks to the
 * one write that made them: the record is still the one and only thing that
 * decides who won a version, chunks of a writer that lost it or crashed
 * before its record are never read (no record names them), and they go
 * when their version leaves the kept history.
 */
#ifndef EDGENODE_FLEET_CHUNKS_H
#define EDGENODE_FLEET_CHUNKS_H

#include <nats/nats.h>
#include <stddef.h>
#include <stdint.h>

#define CHUNKS_STREAM "EDGENODE_CHUNKS"
#define CHUNK_SHA256_HEX 64

/* What a chunked version's record holds. */
typedef struct chunk_manifest {
  uint64_t len;                     /* the value's length in bytes */
  uint32_t count;                   /* chunks 0 .. count-1 */
  char sha256[CHUNK_SHA256_HEX + 1]; /* of the whole value, lower-case hex */
} chunk_manifest;

/* Outcomes of chunks_get besides 0. */
#define CHUNKS_EAGAIN (-1)  /* the servers did not answer: try again */
#define CHUNKS_EMISSING (-2) /* a chunk is not in the stream */
#define CHUNKS_ECORRUPT (-3) /* the chunks do not make the value the manifest names */

/* The largest chunk for a server's max_payload (0: not known yet, taken
 * as the default 1 MiB): room is left for the message's headers, and a
 * chunk is never under 1 KiB. */
size_t chunk_size_for(int64_t max_payload);

/* Creates the stream `name` over `subject` (or finds it), keeping one
 * message per subject and refusing a second one. */
natsStatus fleet__bind_write_once(jsCtx *js, const char *name, const char *subject, int replicas);

/* Creates EDGENODE_CHUNKS (or finds it). */
natsStatus chunks_bind(jsCtx *js, int replicas);

/* Writes value as chunks of at most chunk bytes, and fills *m. Returns
 * NATS_OK once every chunk is acknowledged; any other status leaves the
 * chunks written so far to the history purge. */
natsStatus chunks_put(jsCtx *js, const char *bucket, const char *key, uint64_t version,
                      const char *id, const void *value, size_t len, size_t chunk,
                      chunk_manifest *m);

/* The manifest as the record stores it ("<len> <count> <sha256>"), into
 * buf; returns its length. */
size_t chunk_manifest_format(const chunk_manifest *m, char *buf, size_t size);

/* Parses a stored manifest; 0, or -1 when it is not one or names a value
 * over max_len bytes. */
int chunk_manifest_parse(const char *text, size_t len, uint64_t max_len, chunk_manifest *m);

/* Reads the chunks back and checks them against m: 0 with *out (malloc'ed,
 * m->len bytes plus a NUL, taken over), or a CHUNKS_* value with why set. */
int chunks_get(jsCtx *js, const char *bucket, const char *key, uint64_t version, const char *id,
               const chunk_manifest *m, void **out, char *why, size_t why_size);

/* Drops every chunk of the key's version (best effort). */
void chunks_purge_version(jsCtx *js, const char *bucket, const char *key, uint64_t version);

/* Drops the chunks of one write that lost its version (best effort). */
void chunks_purge_write(jsCtx *js, const char *bucket, const char *key, uint64_t version,
                        const char *id);

/* SHA-256 of data as lower-case hex. */
void chunk_sha256_hex(const void *data, size_t len, char out[CHUNK_SHA256_HEX + 1]);

#endif
