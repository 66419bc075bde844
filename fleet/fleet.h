/*
 * fleet: one node's link to the fleet's NATS JetStream. Key-value buckets
 * hold what operators write (workers, egress rules, secrets, cordons) and the
 * fleet's membership; a node reads them through watches and writes them by
 * compare-and-set, so concurrent writers of one key serialize.
 *
 * libnats blocks on everything that waits for a server, and a blocking call
 * on a loop thread that libnats' libuv adapter drives deadlocks until its
 * timeout (shared fleet notes). So nothing here blocks the caller's loop:
 * writes run on a thread of the fleet's own, each watched bucket is read by a
 * thread of its own, and libnats does its socket I/O on its own threads.
 * Results and changes come back through one uv_async_t, drained whole on each
 * wake-up; every callback runs on the loop thread.
 *
 * A node must keep serving while NATS is away (static stability): opening a
 * fleet never waits for a server, and the buckets are bound whenever the
 * servers are reachable again.
 *
 * Records (workers, egress rules, secrets, cordons) are versioned: version
 * N of key K of a bucket is the one message on subject rec.<bucket>.<K>.<N>
 * of the stream EDGENODE_RECORDS, a stream that refuses a second message on
 * a subject (discard new per subject, one message each). That refusal is
 * applied in the stream's Raft log, so two writers of one version cannot
 * both win. KV compare-and-set (expected last subject sequence) cannot be
 * used for this with Debian 12's nats-server 2.9.10: its check is only a
 * pre-check on the leader, and concurrent updates with the same expected
 * revision both succeed (nats-server issue 4320, fixed in 2.9.21; measured
 * here: 8 writers, 1,600 increments, 732 acknowledged, final value 261).
 * The last FLEET_HISTORY versions of each key are kept.
 *
 * A value too large for one NATS message (the server's max_payload, 1 MiB
 * by default) is written as chunks in a stream of their own before its
 * version's record, which then names them with the value's SHA-256
 * (chunks.h). Callers see whole values either way: a watch delivers a
 * chunked version only once its chunks are read back and checked, and a
 * transform gets the current value whole.
 */
#ifndef EDGENODE_FLEET_H
#define EDGENODE_FLEET_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef struct fleet fleet;

typedef enum fleet_bucket {
  FLEET_WORKERS = 0, /* worker name -> its spec and code (versioned) */
  FLEET_EGRESS,      /* worker name -> its egress rules (versioned) */
  FLEET_SECRETS,     /* secret name -> its value, encrypted for egress processes (versioned) */
  FLEET_CORDONS,     /* tenant name -> cordoned or suspended (versioned) */
  FLEET_TRAFFIC,     /* worker name -> its traffic split over versions (versioned) */
  FLEET_MEMBERS,     /* node name -> its heartbeat: a KV bucket whose TTL ages it out */
  FLEET_BUCKETS
} fleet_bucket;

#define FLEET_HISTORY 20 /* versions kept per key */
#define FLEET_KEY_MAX 200
/* The largest value: a worker's 10 MiB of sources (NODE_SCRIPT_MAX_BYTES),
 * escaped as JSON, with room to spare. A watch holds one such value at a
 * time, a write its new value and the current one. */
#define FLEET_VALUE_MAX (64u << 20)

/* The bucket's name ("workers", ...): a subject token of its records. */
const char *fleet_bucket_name(fleet_bucket b);

/* 1 when s can be a key: 1..FLEET_KEY_MAX of [A-Za-z0-9_-], as subject
 * tokens must be. */
int fleet_key_valid(const char *s);

/* Recoverable failures, as negative values (libuv's style). */
#define FLEET_EUNAVAIL (-1001) /* no server answered within the write deadline */
#define FLEET_EREJECT (-1002)  /* the transform refused the write; nothing was written */
#define FLEET_ECLOSED (-1003)  /* the fleet is closing */
#define FLEET_ENOENT (-1004)   /* fleet_delete: no such key */
#define FLEET_EOWNED (-1006)   /* another node owns the tenant's facets, or none does here */
#define FLEET_EFENCED (-1007)  /* another node wrote the facet's next record: ownership is lost */
#define FLEET_EHANDOVER (-1008) /* the owner is draining: its tenants are about to be free */
#define FLEET_EDAMAGED (-1005) /* the key's latest value cannot be read back (a chunk missing or
                                  not matching its hash); deleting the key still works */

/* One key's state as a watch delivered it. */
typedef struct fleet_entry {
  fleet_bucket bucket;
  const char *key;
  const void *value; /* NULL when deleted */
  size_t len;
  uint64_t version;  /* the key's version: 1, 2, ... (FLEET_MEMBERS: the KV revision) */
  int deleted;       /* a deletion (the version is still counted) */
  uint64_t sequence; /* records: the stream sequence of this version (0 for members) */
} fleet_entry;

typedef struct fleet_callbacks {
  /* A key changed, or is reported at the start of a watch (its latest
   * version only); values and keys live until the callback returns. */
  void (*change)(void *arg, const fleet_entry *e);
  /* The bucket's initial values have all been delivered (once per watch;
   * again after a watch is re-created by an outage). */
  void (*synced)(void *arg, fleet_bucket b);
  /* The connection to NATS went down (0) or came back (1). */
  void (*state)(void *arg, int connected);
  /* A version that the watch could not read back (its chunks are missing
   * or do not match their hash): it is skipped, never delivered. Optional. */
  void (*damaged)(void *arg, fleet_bucket b, const char *key, uint64_t version, const char *why);
  /* This node no longer owns the tenant's facets (its lease lapsed or was
   * taken, or another node wrote their next record): what it holds of
   * them must not be served any more. Optional. */
  void (*facet_lost)(void *arg, const char *tenant, const char *why);
  /* The servers answered but the connection could not be made (a TLS
   * certificate not verified, credentials refused), as libnats said; once
   * for each new reason. Optional. */
  void (*link_error)(void *arg, const char *why);
  void *arg;
} fleet_callbacks;

typedef struct fleet_options {
  const char *servers;       /* "nats://h:p[,nats://h:p...]" */
  const char *node_name;     /* this node's key in FLEET_MEMBERS */
  const char *creds_file;    /* a .creds file (a user JWT and its NKEY seed), or NULL */
  int tls;                   /* require TLS to the servers */
  const char *ca_file;       /* CA bundle for TLS (TLS then even without tls://), or NULL */
  int replicas;              /* 0: min(3, number of servers) */
  int64_t write_deadline_ms; /* how long a write rides through elections; 0: 15000 */
  int64_t heartbeat_ms;      /* membership heartbeat period; 0: 1000 */
  int64_t member_ttl_ms;     /* FLEET_MEMBERS' TTL; 0: 5 heartbeats */
  int64_t lease_ttl_ms;      /* a facet owner's lease, renewed at a third of it; 0: 6000 */
  int64_t facet_publish_ms;  /* how long a facet commit may wait for the fleet; 0: 3000 */
  int64_t snapshot_every;    /* a tenant's facets are snapshotted every this many commits; 0: 1000 */
} fleet_options;

/*
 * Starts connecting (in the background) and returns at once with *out set,
 * or a negative errno / FLEET_* value with a message in err. The callbacks
 * start once the buckets are bound. libuv-style: the caller's loop must
 * run for callbacks to arrive, and fleet_close() ends it all.
 */
int fleet_open(fleet **out, uv_loop_t *loop, const fleet_options *o, const fleet_callbacks *cb,
               char *err, size_t errlen);

/* Stops the threads (joined here: at most a watch poll, 250 ms, or a first
 * connection attempt under way, up to 2 s per server that does not answer) and closes
 * the connection. Pending writes are answered FLEET_ECLOSED first. The
 * memory goes once the loop has run the async handle's close. */
void fleet_close(fleet *f);

/*
 * Computes a key's new value from its current one (cur NULL when the key
 * is absent or deleted). Runs on the fleet's write thread, possibly several
 * times (once per compare-and-set attempt): it must not touch the caller's
 * state except arg, which it may only read. Returns 0 with *out (malloc'ed,
 * taken over) and *out_len set, or -1 with *error (malloc'ed, taken over)
 * to refuse the write.
 */
typedef int (*fleet_transform_fn)(const void *arg, const void *cur, size_t cur_len, uint64_t cur_rev,
                                  void **out, size_t *out_len, char **error);

/* A write's answer, on the loop: status 0 with the version it wrote, or a
 * FLEET_* value with a message. arg is the caller's. */
typedef void (*fleet_done_fn)(void *arg, int status, uint64_t version, const char *error);

/*
 * Writes the key's next version, computed by transform from the latest
 * one. A writer that took that version first makes it read and transform
 * again; an election or a timeout makes it retry until the write deadline,
 * and a timed-out write that landed after all is recognised by its write
 * id instead of being written twice. A value over FLEET_VALUE_MAX is
 * refused (FLEET_EREJECT), and so is a write over a latest value that
 * cannot be read back (FLEET_EDAMAGED). done is called exactly once, unless
 * this returns an error. Returns 0, or -EINVAL (a members bucket, an
 * invalid key) / FLEET_ECLOSED.
 */
int fleet_update(fleet *f, fleet_bucket b, const char *key, fleet_transform_fn transform,
                 const void *transform_arg, fleet_done_fn done, void *done_arg);

/* Writes a deletion as the key's next version, as fleet_update writes;
 * FLEET_ENOENT when the key is absent or deleted already. */
int fleet_delete(fleet *f, fleet_bucket b, const char *key, fleet_done_fn done, void *done_arg);

/* The heartbeat this node publishes in FLEET_MEMBERS under its name, every
 * heartbeat period (copied; the latest one wins). */
void fleet_set_member(fleet *f, const char *json);

typedef struct fleet_status {
  int connected;        /* a connection to some server is up */
  int bound;            /* the buckets are bound and watched */
  unsigned synced_mask; /* 1 << bucket for each bucket whose initial values arrived */
  uint64_t writes_ok;
  uint64_t writes_failed;
  uint64_t write_retries;
  uint64_t chunked_writes; /* writes whose value went in chunks */
  uint64_t damaged;        /* versions the watch skipped as damaged */
  uint64_t last_sequence; /* the highest record sequence the watch delivered */
  char server[128];     /* the URL of the server connected to, or "" */
  char error[256];      /* while not connected: why the last attempt failed, or "" */
} fleet_status;

void fleet_get_status(fleet *f, fleet_status *out);

/* ---- Facets (fleet/facets.c) ----
 *
 * A tenant's facets have one owner node at a time: the holder of the
 * tenant's lease in the KV bucket edgenode_leases, whose TTL ages out the
 * lease of a node that stopped renewing it. Every commit of an owned facet
 * is one record on subject fct.<tenant>.<n> (n = 1, 2, ... for all of the
 * tenant's facets together) of the stream EDGENODE_FACETS, where a subject
 * takes one message and refuses a second (as EDGENODE_RECORDS does). That
 * refusal is the fence: an owner that lost its lease without knowing it
 * (stopped, cut off) and publishes n finds n taken by the node that took
 * the tenant over, which wrote record n (a claim) before serving. A node
 * taking a tenant over restores the latest snapshot (subject
 * fsn.<tenant>.<n>: the tenant's facet files as chunks, covering the
 * records up to n) and replays the records after it into its own copy
 * first. The owner takes a snapshot every snapshot_every commits and when
 * it gives its leases up (a drain), and then trims the records the
 * snapshot covers.
 *
 * These calls block (they wait for NATS), and may be made from any thread
 * but the loop's.
 */

/* The node's copies of its tenants' facets, as the fleet reads and
 * rebuilds them. Taking a tenant over: begin() once the lease is won (the
 * copy must be empty after it), restore() for each facet of the latest
 * snapshot, then record() for each commit after it, in order (facet_id
 * NULL for the tenant's own facet). A non-zero return stops the take-over.
 * Snapshots: dump() calls emit() once for each facet of the tenant with a
 * consistent copy of its file (SQLite's backup), while no commit of the
 * tenant can be published. */
typedef int (*fleet_emit_fn)(void *ctx, const char *facet_id, const void *data, size_t len);
typedef struct fleet_replay {
  int (*begin)(void *arg, const char *tenant);
  int (*record)(void *arg, const char *tenant, const char *facet_id, const void *rec, size_t len,
                char *why, size_t why_len);
  int (*restore)(void *arg, const char *tenant, const char *facet_id, const void *data,
                 size_t len, char *why, size_t why_len);
  int (*dump)(void *arg, const char *tenant, fleet_emit_fn emit, void *ctx, char *why,
              size_t why_len);
  /* The node no longer owns the tenant: its copy goes (no take-over of
   * the tenant runs meanwhile). */
  void (*drop)(void *arg, const char *tenant);
  void *arg;
} fleet_replay;

/* Makes this node the owner of the tenant's facets, or says it is one
 * already. 0; FLEET_EOWNED with the owner's name in `owner` (its lease is
 * live); FLEET_EUNAVAIL; or another FLEET_* value; `why` says what. */
int fleet_facet_acquire(fleet *f, const char *tenant, const fleet_replay *replay, char *owner,
                        size_t owner_len, char *why, size_t why_len);

/* Publishes one commit of an owned facet (its change record, facets.h),
 * within facet_publish_ms. 0 once the fleet has it; FLEET_EOWNED (not the
 * owner), FLEET_EFENCED, or FLEET_EUNAVAIL (the outcome is unknown: the
 * tenant is given up, so that its next owner replays whatever landed). */
int fleet_facet_publish(fleet *f, const char *tenant, const char *facet_id, const void *rec,
                        size_t len, char *why, size_t why_len);

/* Marks this node's leases "draining" (and keeps them so when renewed):
 * other nodes then wait for the tenants (FLEET_EHANDOVER) instead of
 * sending requests here. */
void fleet_facet_mark_draining(fleet *f);

/* Gives up every lease this node holds (a drain): other nodes may take
 * the tenants over at once. Returns how many were given up. */
int fleet_facet_release_all(fleet *f);

/* The tenants whose facets this node owns now, as a JSON array text
 * (caller frees). */
char *fleet_facet_owned_json(fleet *f);

/* SHA-256 of data as lower-case hex (65 bytes with the NUL): the digest the
 * chunk manifests use, offered to the supervisor (node.db's versions). */
#define FLEET_SHA256_HEX 64
void fleet_sha256_hex(const void *data, size_t len, char out[FLEET_SHA256_HEX + 1]);

#endif
