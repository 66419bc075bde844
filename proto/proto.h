/*
 * proto: the one framed message format every edgenode process speaks over
 * unix sockets (supervisor <-> worker processes <-> egress).
 *
 * A frame is a 12-byte header followed by `length` payload bytes:
 *
 *   offset size field
 *   0      2    magic    0xED 0x6E
 *   2      1    version  PROTO_VERSION
 *   3      1    type     enum proto_type
 *   4      4    id       big-endian; pairs a reply with its request, 0 for one-way messages
 *   8      4    length   big-endian payload length, at most the decoder's maximum
 *
 * Payloads are UTF-8 JSON objects unless a type says otherwise; the framing
 * itself never looks inside them.
 */
#ifndef EDGENODE_PROTO_H
#define EDGENODE_PROTO_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#define PROTO_MAGIC0 0xED
#define PROTO_MAGIC1 0x6E
#define PROTO_VERSION 1
#define PROTO_HEADER_SIZE 12
/* Hard ceiling for any payload: loader code may be 64 MiB plus its env. */
#define PROTO_MAX_PAYLOAD (80u * 1024u * 1024u)

/*
 * A spec's limits when it names none. Specs travel between every process
 * (deploys, loader children, one-shot runs), so their defaults are defined
 * once, here, for the supervisor and the worker processes alike.
 */
#define PROTO_SPEC_DEFAULT_CPU_MS 50
#define PROTO_SPEC_DEFAULT_MEMORY_MB 128
#define PROTO_SPEC_DEFAULT_WALL_MS 30000
/* Modules in one spec (a deploy, a load(), a run): every one is compiled on
 * the worker process's loop before the first request's CPU limit applies,
 * at tens of microseconds each, so 1,000 keep that under a tenth of a
 * second; real bundles hold a few hundred at most. Past it: 400 / TypeError. */
#define PROTO_SPEC_MAX_MODULES 1000
/* Dynamic workers (env.LOADER) one tenant holds at once in one worker
 * process, each an isolate (limits.children, at most
 * PROTO_SPEC_MAX_CHILDREN), and of those the ones kept alive by work nobody
 * waits for any more: ctx.waitUntil(), timers (limits.pinned_children).
 * Without them, five parents pinning a thousand children each filled the
 * process's maximum of isolates and a neighbour got 503. */
#define PROTO_SPEC_DEFAULT_CHILDREN 100
#define PROTO_SPEC_DEFAULT_PINNED_CHILDREN 20
#define PROTO_SPEC_MAX_CHILDREN 1000
/* Versions one traffic split (gradual deployment) may name: each one the
 * split keeps serving is an isolate of its own in every process that
 * serves the worker. */
#define PROTO_TRAFFIC_MAX_VERSIONS 4

/* Upper bounds (ms) of the request-duration histogram's buckets: a worker
 * process counts each tenant's requests into them, and the supervisor
 * shows them as edgenode_tenant_request_duration_seconds (plus +Inf). */
#define PROTO_DURATION_BUCKETS_MS {1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000}
#define PROTO_DURATION_BUCKETS 14

typedef enum proto_type {
  /* worker -> supervisor, once after start: {"pid": N, "v8": "10.2..."} */
  PROTO_HELLO = 1,
  /* worker -> supervisor (id): {"name": "hello"}.
   * Reply PROTO_WORKER_SPEC with the registry row, or PROTO_ERROR. */
  PROTO_WORKER_GET = 2,
  /* supervisor -> worker (reply): {"name", "version", "main_module",
   * "modules": {"index.js": "..."}, "bindings": {}, "limits": {"cpu_ms", "memory_mb"}} */
  PROTO_WORKER_SPEC = 3,
  /* supervisor -> every worker (one-way): {"name": "hello"}: a deploy or
   * delete changed this worker; drop cached specs, new requests refetch. */
  PROTO_WORKER_CHANGED = 4,
  /* supervisor -> worker (id): same body as PROTO_WORKER_SPEC. The worker
   * compiles and evaluates the modules in a throwaway isolate.
   * Reply PROTO_VALIDATE_RESULT: {"ok": true} or
   * {"ok": false, "error": "...", "module": "index.js", "line": 3, "column": 7} */
  PROTO_VALIDATE = 5,
  PROTO_VALIDATE_RESULT = 6,
  /* supervisor -> worker (one-way): {"grace_ms": N}: stop accepting, finish
   * in-flight requests within the grace period, then exit 0. */
  PROTO_DRAIN = 7,
  /* worker -> supervisor (one-way), periodically: {"tenants": {...}, "process": {...},
   * "counts": {...}}; counts and the tenants' figures are deltas since the last one */
  PROTO_STATS = 8,
  /* worker -> supervisor (one-way): {"event": "...", "tenant": "...", ...} */
  PROTO_EVENT = 9,
  /* any reply that failed: {"error": "...", "status": 404} */
  PROTO_ERROR = 10,
  /* either direction (id); answered with PROTO_PONG, same id, empty payload */
  PROTO_PING = 11,
  PROTO_PONG = 12,
  /* supervisor -> worker (id): one-shot run (POST /v1/run); reply PROTO_RUN_RESULT */
  PROTO_RUN = 13,
  PROTO_RUN_RESULT = 14,
  /* supervisor -> shared worker process (one-way, or with an id): where a tenant's
   * requests go. {"name", "state": "active"|"cordoned"|"suspended", "port": N,
   * "ready": bool, "error": "..."}. "cordoned": the tenant runs only in its dedicated
   * process, which serves plain HTTP on 127.0.0.1:port; the shared process forwards
   * the tenant's requests there (holding them while "ready" is false, briefly), lets
   * the requests it is running finish, then discards the tenant's isolates and closes
   * its facet. "suspended": answer 503 with "error". "active": run it here again.
   * Sent for every cordoned or suspended tenant right after the process's HELLO, and
   * to every shared process on each change. Sent with an id, it is answered with
   * PROTO_CORDON_DONE once no request of the tenant is on its way to the dedicated
   * process from that worker process any more. */
  PROTO_CORDON = 15,
  /* shared worker process -> supervisor (reply, same id): {"name"}. */
  PROTO_CORDON_DONE = 16,
  /* supervisor -> worker (one-way): {"keys": ["hello", "run:ID", ...]}: every
   * tenant and run someone tails now (docs/control-api.md, tail). Sent after the
   * process's HELLO and on each change; replaces the last set. Nothing tailed:
   * the process builds no tail line at all. */
  PROTO_TAIL = 17,
  /* worker -> supervisor (one-way): {"key", "line": {"type": "log"|"exception"|
   * "request", ...}, "dropped"?: N (lines this process dropped since the last
   * one it sent, for a supervisor that fell behind)}. */
  PROTO_TAIL_LINE = 18,
  /* supervisor -> worker (one-way): {"routes": [{"pattern", "worker"}, ...]}, the
   * ingress routes (http.h's http_routes) replacing any before; sent right after
   * the process's HELLO and to every process on each change. */
  PROTO_ROUTES = 40,

  /* ---- the egress process (egress/, docs/egress.md) ----
   * The egress says PROTO_HELLO {"pid": N, "process": "egress"} to the
   * supervisor once it started. Worker processes connect to its unix socket. */
  /* supervisor -> egress (one-way): allow-lists, {"workers": {"name": [rules], ...},
   * "replace": true|false}. With "replace" these are all the policies there are (and
   * the egress starts serving workers); without, only the named workers' policies
   * change (null or []: everything denied). Rules as in egress/egress.h. Also
   * "grants": {"SECRET": [workers] | null} (the workers each secret may be injected
   * for) and, in a fleet, "fleet_secrets": {"SECRET": {"key", "nonce", "sealed"} |
   * null} (values sealed with the fleet key) and "fleet": true (with "replace": values
   * come from fleet_secrets only); with "replace" these are all there are. Sent with
   * an id, it is answered with PROTO_EGRESS_REPLY {"ready": true} once applied (and,
   * the first time, once the egress listens). */
  PROTO_EGRESS_POLICY = 20,
  /* supervisor -> egress (id): {"name": "EXAMPLE_TOKEN", "value": "..."}. Reply
   * PROTO_EGRESS_REPLY {"name", "updated_at", "created": bool} or PROTO_ERROR. With
   * "fleet": true nothing is stored: the reply is {"name", "sealed": {"key", "nonce",
   * "sealed"}}, the value sealed with the fleet key (PROTO_ERROR 503 without one). */
  PROTO_SECRET_PUT = 21,
  /* supervisor -> egress (id): {}. Reply PROTO_EGRESS_REPLY
   * {"secrets": [{"name", "updated_at"}, ...]}: names and times, never values. */
  PROTO_SECRET_LIST = 22,
  /* supervisor -> egress (id): {"name"}. Reply PROTO_EGRESS_REPLY {"deleted": name}
   * or PROTO_ERROR {"status": 404, ...}. */
  PROTO_SECRET_DELETE = 23,
  PROTO_EGRESS_REPLY = 24,
  /* worker -> egress: one fetch(); the frame id names this fetch in every later frame
   * about it, both ways. Payload: a 4-byte big-endian length n, n bytes of JSON
   * {"tenant", "request_id", "method", "url", "headers": [name, value, ...],
   * "redirect": "follow"|"manual"|"error"}, then the request body. Reply
   * PROTO_FETCH_HEAD, or PROTO_ERROR {"error": "...", "name": "TypeError",
   * "hops": N}. Before each redirect hop the egress sends PROTO_FETCH back
   * (same id, JSON {"from", "url"}) and waits: the worker answers an empty
   * PROTO_FETCH (go on, it counted the hop) or PROTO_FETCH_CANCEL (the
   * request's subrequests are spent). */
  PROTO_FETCH = 25,
  /* egress -> worker: a 4-byte big-endian length n, n bytes of JSON {"status",
   * "status_text", "headers": [name, value, ...], "url", "redirected", "hops",
   * "done"}, then the first body bytes. "done": false means more body follows:
   * the worker asks for it with PROTO_FETCH_READ. */
  PROTO_FETCH_HEAD = 26,
  /* worker -> egress (fetch id): empty. Reply PROTO_FETCH_DATA or PROTO_ERROR {"error"}. */
  PROTO_FETCH_READ = 27,
  /* egress -> worker (fetch id): 1 flag byte (1 = the body ends here), then body bytes. */
  PROTO_FETCH_DATA = 28,
  /* worker -> egress (fetch id, one-way): the fetch is abandoned; no reply. */
  PROTO_FETCH_CANCEL = 29,
  /* Facet replication (node/replica.c), on DATA/replica/replica.sock, in
   * blocking frames: a worker process asks, then waits for the answer.
   * worker -> supervisor (id): the tenant's name; may this node serve its
   * facets (taking them over first when nobody owns them)? */
  PROTO_FACET_ACQUIRE = 41,
  /* worker -> supervisor (id): tenant, NUL, facet id (empty: the tenant's
   * own facet), NUL, a commit's change record (facets.h); the commit is
   * written only once this is answered yes. */
  PROTO_FACET_PUBLISH = 42,
  /* supervisor -> worker (same id): '0' (yes); '1' and why not (text);
   * to PROTO_FACET_ACQUIRE also '2' and a unix socket's path (the owner
   * node is reached through it: forward the request there), or '3' and why
   * (the owner is handing the tenant over: ask again shortly). */
  PROTO_FACET_ANSWER = 43,
  PROTO_TYPE_MAX = 64 /* types at or above this are rejected by the decoder */
} proto_type;

/*
 * The running slot: one page shared by the supervisor and one shared worker
 * process (a memfd the worker gets as --running-fd and maps). Before the worker
 * enters a tenant's JavaScript it writes the tenant's name and sets `running`;
 * when the code returns it clears `running`. The supervisor reads the page
 * after the process died, to name the tenant whose code was running when it
 * crashed. Plain stores, no system call on the request path. A thread of the
 * worker of its own counts `heartbeat` up every PROTO_HEARTBEAT_MS, whatever
 * the loop is doing (a tenant's JavaScript may hold the loop for its whole
 * CPU limit): it stands still only while the whole process does (stopped, or
 * stuck in the kernel), and the supervisor replaces a process whose count has
 * not moved for PROTO_HEARTBEAT_MISSED_MS.
 */
#define PROTO_HEARTBEAT_MS 250
#define PROTO_HEARTBEAT_MISSED_MS 3000
#define PROTO_RUNNING_MAGIC 0x45445255u /* "EDRU" */
#define PROTO_RUNNING_NAME_MAX 64
typedef struct proto_running {
  uint32_t magic;                        /* PROTO_RUNNING_MAGIC once the worker mapped it */
  volatile uint32_t running;             /* 1 while tenant code runs */
  volatile uint64_t entries;             /* times tenant code was entered */
  volatile char tenant[PROTO_RUNNING_NAME_MAX]; /* NUL-terminated: the tenant last entered */
  volatile uint64_t heartbeat;           /* counted up by the worker's heartbeat thread */
} proto_running;

/* Errors are negative; proto_strerror() names them. */
enum {
  PROTO_EMAGIC = -1001,   /* first two bytes are not the magic */
  PROTO_EVERSION = -1002, /* unsupported version */
  PROTO_ETYPE = -1003,    /* type 0 or >= PROTO_TYPE_MAX */
  PROTO_ETOOBIG = -1004,  /* length over the decoder's maximum */
};

typedef struct proto_frame {
  uint8_t type;
  uint32_t id;
  const uint8_t *payload; /* not NUL-terminated; valid until the next decoder call */
  uint32_t length;
} proto_frame;

/* Incremental decoder: feed bytes as they arrive, take whole frames out. */
typedef struct proto_decoder {
  uint8_t *buf;         /* owned */
  size_t len;           /* bytes held */
  size_t start;         /* offset of the first unconsumed byte */
  size_t cap;
  uint32_t max_payload; /* <= PROTO_MAX_PAYLOAD */
  int error;            /* sticky: once malformed, always malformed */
} proto_decoder;

void proto_decoder_init(proto_decoder *d, uint32_t max_payload);
void proto_decoder_free(proto_decoder *d);

/* Appends bytes. Returns 0, or the sticky error if the stream is already bad. */
int proto_decoder_feed(proto_decoder *d, const void *data, size_t len);

/*
 * Takes the next complete frame. Returns 1 and fills *frame, 0 when more bytes
 * are needed, or a negative PROTO_E* error: the stream is malformed and must be
 * closed. A header is checked as soon as its 12 bytes are in, before its payload.
 */
int proto_decoder_next(proto_decoder *d, proto_frame *frame);

/* Writes a header for a frame. Returns 0, or PROTO_ETYPE / PROTO_ETOOBIG. */
int proto_encode_header(uint8_t out[PROTO_HEADER_SIZE], uint8_t type, uint32_t id,
                        uint32_t length);

const char *proto_strerror(int err);
const char *proto_type_name(uint8_t type);

/*
 * A channel: a connected libuv stream (unix socket or pipe) carrying frames.
 * The caller owns the struct and the stream; proto_channel_close() closes the
 * stream and calls on_close once, after which the struct may be freed.
 */
typedef struct proto_channel proto_channel;
typedef void (*proto_frame_cb)(proto_channel *ch, const proto_frame *frame);
typedef void (*proto_close_cb)(proto_channel *ch, int reason /* 0, UV_EOF or PROTO_E* */);

struct proto_channel {
  uv_pipe_t pipe;         /* the stream; embed, do not move */
  proto_decoder decoder;
  proto_frame_cb on_frame;
  proto_close_cb on_close;
  void *data;             /* the owner's */
  uint32_t next_id;       /* for proto_channel_request_id() */
  int closing;
};

/*
 * Opens a channel on an existing connected fd (for example one end of a
 * socketpair inherited from the supervisor) and starts reading.
 * Returns 0 or a negative libuv error.
 */
int proto_channel_open_fd(proto_channel *ch, uv_loop_t *loop, int fd, proto_frame_cb on_frame,
                          proto_close_cb on_close, void *data);

/*
 * Starts reading on a pipe the caller already initialised (for example one
 * created by uv_spawn with UV_CREATE_PIPE); ch->pipe must be that pipe.
 */
int proto_channel_start(proto_channel *ch, proto_frame_cb on_frame, proto_close_cb on_close,
                        void *data);

/* Queues one frame; the payload is copied. Returns 0 or a negative error. */
int proto_channel_send(proto_channel *ch, uint8_t type, uint32_t id, const void *payload,
                       size_t length);

/* A fresh non-zero id for a request on this channel. */
uint32_t proto_channel_request_id(proto_channel *ch);

/* Closes the stream; on_close runs once from the loop. Safe to call twice. */
void proto_channel_close(proto_channel *ch);

#endif
