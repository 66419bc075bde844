/*
 * The fleet link: a NATS connection, the records stream, the members
 * bucket, the write thread, two watch threads, the heartbeat thread, and the
 * queue that brings their results back to the loop.
 *
 * Threads and what they own:
 *   write thread      binds the stream and the bucket (again after an
 *                     outage if need be), then runs writes one at a time, in
 *                     the order they were asked for;
 *   records watch     an ordered consumer over every record, which keeps
 *                     the latest version it delivered of each key, and
 *                     reads a chunked version's chunks back before it
 *                     delivers it (chunks.c);
 *   members watch     kvWatcher_Next on the members bucket;
 *   heartbeat thread  puts this node's membership record every period, on
 *                     its own so that a write riding through an election
 *                     does not stop the node's heartbeat;
 *   the loop          everything the caller sees: callbacks only run there.
 * Watches poll every 250 ms so that a close is noticed. The lock `mu`
 * guards both queues, the member record and the counters.
 */
#include <errno.h>
#include <nats/nats.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "base.h"
#include "chunks.h"
#include "fleet.h"
#include "internal.h"

#define RECORDS_STREAM "EDGENODE_RECORDS"
#define MEMBERS_BUCKET "edgenode_members"

/*
 * Every record is stored behind its write id and operation: 16 hex digits,
 * 'P' (put), 'D' (delete) or 'C' (a put whose value is in chunks, the
 * bytes being its manifest: chunks.h), a newline, then the bytes. A write
 * that timed out may still land (a leader can commit it after the client
 * gave up), so the next attempt must tell "my write landed" from "another
 * writer took the version": only the id can.
 */
#define WRITE_ID_LEN 16
#define ENVELOPE_LEN (WRITE_ID_LEN + 2)

#define WATCH_POLL_MS 250
#define RETRY_PAUSE_MS 200
/* Between rounds of first connection attempts over every server. */
#define CONNECT_PAUSE_MS 500
/* Past this long without a connection, writes fail at once: a node that
 * has lost NATS answers 503 instead of holding its operators 15 s. */
#define DISCONNECTED_FAIL_FAST_MS 2000
/* JetStream's "maximum messages per subject exceeded": the version is taken. */
#define JS_ERR_VERSION_TAKEN 10077

static const char *const bucket_names[FLEET_BUCKETS] = {"workers", "egress", "secrets",
                                                        "cordons", "traffic", "members"};

const char *fleet_bucket_name(fleet_bucket b) {
  return (unsigned)b < FLEET_BUCKETS ? bucket_names[b] : "?";
}

int fleet_key_valid(const char *s) {
  size_t n = 0;
  if (s == NULL) return 0;
  for (; s[n]; n++) {
    char c = s[n];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
          c == '-'))
      return 0;
  }
  return n > 0 && n <= FLEET_KEY_MAX;
}

typedef enum event_kind {
  EV_CHANGE,
  EV_SYNCED,
  EV_STATE,
  EV_DONE,
  EV_DAMAGED,
  EV_FACET_LOST,
  EV_LINK_ERROR
} event_kind;

/* Something a thread hands to the loop. */
typedef struct event {
  struct event *next;
  event_kind kind;
  fleet_bucket bucket;
  char *key;
  void *value;
  size_t len;
  uint64_t version;
  uint64_t sequence;
  int deleted;
  int status; /* EV_DONE; EV_STATE: connected */
  char *error;
  fleet_done_fn done;
  void *done_arg;
} event;

/* A write waiting for the write thread. */
typedef struct op {
  struct op *next;
  int64_t queued_ms;
  fleet_bucket bucket;
  char *key;
  int is_delete;
  fleet_transform_fn transform;
  const void *transform_arg;
  fleet_done_fn done;
  void *done_arg;
} op;

/* The records watch's memory: the latest version delivered of each key. */
typedef struct seen {
  struct seen *next;
  uint64_t version;
  char name[]; /* "<bucket>.<key>" */
} seen;
#define SEEN_BUCKETS 1024

struct fleet {
  uv_loop_t *loop;
  uv_async_t wake;
  fleet_callbacks cb;
  int64_t write_deadline_ms;
  int64_t heartbeat_ms;
  int64_t member_ttl_ms;
  int64_t lease_ttl_ms;
  int64_t facet_publish_ms;
  int64_t snapshot_every;
  fleet_facets *facets;
  int replicas;
  char *node_name;

  natsOptions *opts;
  natsConnection *_Atomic nc; /* NULL until the first connection was made (write thread) */
  jsCtx *js;
  kvStore *members;
  kvWatcher *members_watch;
  natsSubscription *records_sub;
  seen *seen[SEEN_BUCKETS];

  pthread_t write_thread, heartbeat_thread, records_thread, members_thread;
  int write_started, heartbeat_started, watches_started;
  pthread_mutex_t mu;
  pthread_cond_t cv;    /* ops queued, stopping, or libnats closed */
  pthread_cond_t hb_cv; /* stopping (the heartbeat's sleep) */
  op *ops_head, **ops_tail;
  event *ev_head, **ev_tail;
  char *member_json;
  int nats_closed; /* libnats called its closed callback */
  char link_error[256]; /* why the connection cannot be made, "" when it can or is */

  atomic_int stopping;
  atomic_int connected;
  atomic_int bound;
  atomic_uint synced_mask;
  _Atomic uint64_t last_sequence;
  atomic_int resubscribe; /* reconnected: make the records consumer again */
  _Atomic int64_t disconnected_since_ms; /* 0 while connected */
  uint64_t writes_ok, writes_failed, write_retries, chunked_writes, damaged;
};

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void pause_ms(int64_t ms) {
  struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* A stored record's parts: 1 with them, 0 when it has no envelope. */
typedef struct record {
  const char *id; /* WRITE_ID_LEN characters, not terminated */
  int deleted;
  int chunked;    /* value is a chunk manifest */
  const char *value;
  size_t len;
} record;

static int unwrap(const void *stored, size_t stored_len, record *r) {
  const char *p = stored;
  if (stored_len < ENVELOPE_LEN || p[WRITE_ID_LEN + 1] != '\n' ||
      (p[WRITE_ID_LEN] != 'P' && p[WRITE_ID_LEN] != 'D' && p[WRITE_ID_LEN] != 'C'))
    return 0;
  r->id = p;
  r->deleted = p[WRITE_ID_LEN] == 'D';
  r->chunked = p[WRITE_ID_LEN] == 'C';
  r->value = p + ENVELOPE_LEN;
  r->len = stored_len - ENVELOPE_LEN;
  return 1;
}

static void new_write_id(char id[WRITE_ID_LEN + 1]) {
  unsigned char raw[WRITE_ID_LEN / 2];
  if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw) abort();
  for (size_t i = 0; i < sizeof raw; i++) snprintf(id + 2 * i, 3, "%02x", raw[i]);
}

/* "rec.<bucket>.<key>.<version>" -> bucket, key (in buf), version. */
static int parse_subject(const char *subject, fleet_bucket *b, char *key, size_t key_size,
                         uint64_t *version) {
  if (strncmp(subject, "rec.", 4) != 0) return -1;
  const char *p = subject + 4;
  const char *dot = strchr(p, '.');
  if (dot == NULL) return -1;
  int found = -1;
  for (int i = 0; i < FLEET_MEMBERS; i++)
    if ((size_t)(dot - p) == strlen(bucket_names[i]) && strncmp(p, bucket_names[i], (size_t)(dot - p)) == 0)
      found = i;
  if (found < 0) return -1;
  const char *k = dot + 1;
  const char *last = strrchr(k, '.');
  if (last == NULL || (size_t)(last - k) >= key_size || last == k) return -1;
  char *end;
  errno = 0;
  unsigned long long v = strtoull(last + 1, &end, 10);
  if (errno || *end || v == 0) return -1;
  memcpy(key, k, (size_t)(last - k));
  key[last - k] = '\0';
  *b = (fleet_bucket)found;
  *version = v;
  return 0;
}

/* ---- handing things to the loop ---- */

static void post(fleet *f, event *e) {
  pthread_mutex_lock(&f->mu);
  e->next = NULL;
  *f->ev_tail = e;
  f->ev_tail = &e->next;
  pthread_mutex_unlock(&f->mu);
  uv_async_send(&f->wake);
}

static void post_done(fleet *f, op *o, int status, uint64_t version, const char *error) {
  event *e = xcalloc(1, sizeof *e);
  e->kind = EV_DONE;
  e->status = status;
  e->version = version;
  e->error = error ? xstrdup(error) : NULL;
  e->done = o->done;
  e->done_arg = o->done_arg;
  pthread_mutex_lock(&f->mu);
  if (status == 0) f->writes_ok++;
  else f->writes_failed++;
  pthread_mutex_unlock(&f->mu);
  post(f, e);
}

static void free_event(event *e) {
  free(e->key);
  free(e->value);
  free(e->error);
  free(e);
}

/* The loop's side: every queued event, in order, then the queue is empty. */
static void on_wake(uv_async_t *a) {
  fleet *f = a->data;
  pthread_mutex_lock(&f->mu);
  event *e = f->ev_head;
  f->ev_head = NULL;
  f->ev_tail = &f->ev_head;
  pthread_mutex_unlock(&f->mu);
  while (e) {
    event *next = e->next;
    switch (e->kind) {
    case EV_CHANGE:
      if (f->cb.change) {
        fleet_entry entry = {.bucket = e->bucket,
                             .key = e->key,
                             .value = e->deleted ? NULL : e->value,
                             .len = e->deleted ? 0 : e->len,
                             .version = e->version,
                             .sequence = e->sequence,
                             .deleted = e->deleted};
        f->cb.change(f->cb.arg, &entry);
      }
      break;
    case EV_SYNCED:
      if (f->cb.synced) f->cb.synced(f->cb.arg, e->bucket);
      break;
    case EV_STATE:
      if (f->cb.state) f->cb.state(f->cb.arg, e->status);
      break;
    case EV_DONE:
      e->done(e->done_arg, e->status, e->version, e->error);
      break;
    case EV_DAMAGED:
      if (f->cb.damaged) f->cb.damaged(f->cb.arg, e->bucket, e->key, e->version, e->error);
      break;
    case EV_FACET_LOST:
      if (f->cb.facet_lost) f->cb.facet_lost(f->cb.arg, e->key, e->error);
      break;
    case EV_LINK_ERROR:
      if (f->cb.link_error) f->cb.link_error(f->cb.arg, e->error);
      break;
    }
    free_event(e);
    e = next;
  }
}

/* ---- connection events (libnats' threads) ---- */

static void post_state(fleet *f, int connected) {
  atomic_store(&f->connected, connected);
  atomic_store(&f->disconnected_since_ms, connected ? 0 : now_ms());
  event *e = xcalloc(1, sizeof *e);
  e->kind = EV_STATE;
  e->status = connected;
  post(f, e);
}

static void on_disconnected(natsConnection *nc, void *closure) {
  (void)nc;
  fleet *f = closure;
  if (!atomic_load(&f->stopping)) post_state(f, 0);
}

static void on_reconnected(natsConnection *nc, void *closure) {
  (void)nc;
  fleet *f = closure;
  if (atomic_load(&f->stopping)) return;
  /* The consumer may have lived on the server we lost: make it again now
   * rather than after its missed heartbeats. */
  atomic_store(&f->resubscribe, 1);
  post_state(f, 1);
}

/* libnats' last callback for a connection: after it, none of the others can
 * run, so fleet_close waits for it before the fleet's memory may go. */
static void on_nats_closed(natsConnection *nc, void *closure) {
  (void)nc;
  fleet *f = closure;
  pthread_mutex_lock(&f->mu);
  f->nats_closed = 1;
  pthread_cond_broadcast(&f->cv);
  pthread_mutex_unlock(&f->mu);
}

/* ---- binding the stream and the bucket (write thread) ---- */

static int transient(natsStatus s) {
  return s == NATS_TIMEOUT || s == NATS_NO_RESPONDERS || s == NATS_NOT_YET_CONNECTED ||
         s == NATS_CONNECTION_DISCONNECTED || s == NATS_CONNECTION_CLOSED || s == NATS_IO_ERROR ||
         s == NATS_STALE_CONNECTION;
}

/* One message per version, and a second one refused: each version of a
 * key can be written once, by one writer. */
static natsStatus bind_records(fleet *f) {
  return fleet__bind_write_once(f->js, RECORDS_STREAM, "rec.>", f->replicas);
}

static natsStatus bind_members(fleet *f) {
  kvStore *kv = NULL;
  natsStatus s = js_KeyValue(&kv, f->js, MEMBERS_BUCKET);
  if (s == NATS_NOT_FOUND) {
    kvConfig cfg;
    kvConfig_Init(&cfg);
    cfg.Bucket = MEMBERS_BUCKET;
    cfg.Replicas = f->replicas;
    cfg.History = 1;
    cfg.TTL = f->member_ttl_ms * 1000000; /* nanoseconds */
    s = js_CreateKeyValue(&kv, f->js, &cfg);
    if (s != NATS_OK) s = js_KeyValue(&kv, f->js, MEMBERS_BUCKET);
  }
  if (s == NATS_OK) f->members = kv;
  return s;
}

static void *records_main(void *p);
static void *members_main(void *p);

/* libnats' last error on this thread, without the "(conn.c:733): " that
 * says where in libnats it was set; NULL when there is none. */
static const char *nats_error_text(void) {
  const char *t = nats_GetLastError(NULL);
  if (t == NULL || *t == '\0') return NULL;
  const char *end = t[0] == '(' ? strstr(t, "): ") : NULL;
  return end ? end + 3 : t;
}

/* Remembers why the connection cannot be made ("": it can), and hands a
 * new reason to the loop. */
static void set_link_error(fleet *f, const char *why) {
  pthread_mutex_lock(&f->mu);
  int changed = strcmp(why, f->link_error) != 0;
  if (changed) snprintf(f->link_error, sizeof f->link_error, "%s", why);
  pthread_mutex_unlock(&f->mu);
  if (!changed || why[0] == '\0') return;
  event *e = xcalloc(1, sizeof *e);
  e->kind = EV_LINK_ERROR;
  e->error = xstrdup(why);
  post(f, e);
}

/*
 * The first connection is made here, one round over every server at a time,
 * rather than by libnats' retry on a failed connect: in libnats 3.4 that
 * retry gives up for good when every server refused the handshake (a TLS
 * certificate not trusted, credentials refused: it is left with no current
 * server to go on from) and loses the reason. Once a connection is made,
 * libnats reconnects by itself. 0 once connected.
 */
static int connect_first(fleet *f) {
  natsConnection *nc = NULL;
  natsStatus s = natsConnection_Connect(&nc, f->opts);
  if (s == NATS_OK) {
    f->nc = nc;
    set_link_error(f, "");
    post_state(f, 1);
    return 0;
  }
  /* NATS_NO_SERVER: no server took the TCP connection; they are away,
   * which is no fault of this node's settings. */
  char why[sizeof f->link_error] = "";
  if (s != NATS_NO_SERVER) {
    const char *detail = nats_error_text();
    const char *status = natsStatus_GetText(s);
    if (detail == NULL || *detail == '\0' || strcmp(detail, status) == 0)
      snprintf(why, sizeof why, "%s", status);
    else snprintf(why, sizeof why, "%s: %s", status, detail);
  }
  set_link_error(f, why);
  return -1;
}

/* An ordered consumer over every record, from the one after the last
 * delivered. Its heartbeat is short so that a consumer lost with its
 * server is noticed (and made again by libnats) within seconds. */
static natsStatus subscribe_records(fleet *f, natsSubscription **sub) {
  jsSubOptions so;
  jsSubOptions_Init(&so);
  so.Stream = RECORDS_STREAM;
  so.Ordered = true;
  so.Config.Heartbeat = 1000000000; /* 1 s, in nanoseconds */
  uint64_t last = atomic_load(&f->last_sequence);
  if (last > 0) {
    so.Config.DeliverPolicy = js_DeliverByStartSequence;
    so.Config.OptStartSeq = last + 1;
  } else {
    so.Config.DeliverPolicy = js_DeliverAll;
  }
  jsErrCode je = 0;
  natsStatus s = js_SubscribeSync(sub, f->js, "rec.>", NULL, &so, &je);
  if (s != NATS_OK) *sub = NULL;
  return s;
}

static int bind_all(fleet *f) {
  jsOptions jo;
  jsOptions_Init(&jo);
  jo.Wait = 2000; /* a bind retried every two seconds while leaders are elected */
  if (f->js == NULL && natsConnection_JetStream(&f->js, f->nc, &jo) != NATS_OK) {
    f->js = NULL;
    return -1;
  }
  if (bind_records(f) != NATS_OK) return -1;
  if (chunks_bind(f->js, f->replicas) != NATS_OK) return -1;
  if (f->members == NULL && bind_members(f) != NATS_OK) return -1;
  if (fleet__facets_bind(f->facets, f->js) != NATS_OK) return -1;
  if (f->records_sub == NULL && subscribe_records(f, &f->records_sub) != NATS_OK) return -1;
  if (f->members_watch == NULL && kvStore_WatchAll(&f->members_watch, f->members, NULL) != NATS_OK) {
    f->members_watch = NULL;
    return -1;
  }
  if (!f->watches_started) {
    if (pthread_create(&f->records_thread, NULL, records_main, f) != 0 ||
        pthread_create(&f->members_thread, NULL, members_main, f) != 0)
      abort();
    f->watches_started = 1;
  }
  atomic_store(&f->bound, 1);
  return 0;
}

/* ---- watches ---- */

static void post_synced(fleet *f, fleet_bucket b) {
  if (atomic_fetch_or(&f->synced_mask, 1u << b) & (1u << b)) return;
  event *ev = xcalloc(1, sizeof *ev);
  ev->kind = EV_SYNCED;
  ev->bucket = b;
  post(f, ev);
}

static void post_records_synced(fleet *f) {
  for (int b = 0; b < FLEET_MEMBERS; b++) post_synced(f, (fleet_bucket)b);
}

/* 1 when version is newer than the key's latest delivered (and now is). */
static int newer(fleet *f, const char *name, uint64_t version) {
  uint64_t h = 1469598103934665603ull;
  for (const char *c = name; *c; c++) h = (h ^ (unsigned char)*c) * 1099511628211ull;
  seen **slot = &f->seen[h % SEEN_BUCKETS];
  for (seen *s = *slot; s; s = s->next)
    if (strcmp(s->name, name) == 0) {
      if (version <= s->version) return 0;
      s->version = version;
      return 1;
    }
  size_t n = strlen(name) + 1;
  seen *s = xmalloc(sizeof *s + n);
  memcpy(s->name, name, n);
  s->version = version;
  s->next = *slot;
  *slot = s;
  return 1;
}

static int read_latest(fleet *f, fleet_bucket b, const char *key, natsMsg **m, record *r,
                       uint64_t *version);

/* 1 when the key has a version newer than this one: reading this one's
 * chunks would be wasted (the watch delivers the newer one next), and
 * missing chunks are no damage (the history purge took them). */
static int superseded(fleet *f, fleet_bucket b, const char *key, uint64_t version) {
  natsMsg *m = NULL;
  record r;
  uint64_t latest = 0;
  int have = read_latest(f, b, key, &m, &r, &latest);
  if (m) natsMsg_Destroy(m);
  return have == 1 && latest > version;
}

static void post_damaged(fleet *f, fleet_bucket b, const char *key, uint64_t version,
                         const char *why) {
  event *ev = xcalloc(1, sizeof *ev);
  ev->kind = EV_DAMAGED;
  ev->bucket = b;
  ev->key = xstrdup(key);
  ev->version = version;
  ev->error = xstrdup(why);
  pthread_mutex_lock(&f->mu);
  f->damaged++;
  pthread_mutex_unlock(&f->mu);
  post(f, ev);
}

/* Reads a chunked version's value back: 0 with *value (malloc'ed) and
 * *len, CHUNKS_EAGAIN when the servers did not answer, or another CHUNKS_*
 * value with why set when it is damaged. */
static int load_chunked(fleet *f, fleet_bucket b, const char *key, uint64_t version,
                        const record *r, void **value, size_t *len, char *why, size_t why_size) {
  chunk_manifest man;
  if (chunk_manifest_parse(r->value, r->len, FLEET_VALUE_MAX, &man) != 0) {
    snprintf(why, why_size, "its chunk manifest is malformed");
    return CHUNKS_ECORRUPT;
  }
  char id[WRITE_ID_LEN + 1];
  memcpy(id, r->id, WRITE_ID_LEN);
  id[WRITE_ID_LEN] = '\0';
  int rc = chunks_get(f->js, bucket_names[b], key, version, id, &man, value, why, why_size);
  if (rc == 0) *len = (size_t)man.len;
  return rc;
}

/* The watch's side of a chunked version: 1 with its value, 0 when it is
 * skipped (superseded, damaged: reported, or the fleet is closing). An
 * outage does not skip it: the watch waits, as it would for the record. */
static int watch_chunked(fleet *f, fleet_bucket b, const char *key, uint64_t version,
                         const record *r, void **value, size_t *len) {
  char why[160];
  while (!atomic_load(&f->stopping)) {
    if (superseded(f, b, key, version)) return 0;
    int rc = load_chunked(f, b, key, version, r, value, len, why, sizeof why);
    if (rc == 0) return 1;
    if (rc != CHUNKS_EAGAIN) {
      if (!superseded(f, b, key, version)) post_damaged(f, b, key, version, why);
      return 0;
    }
    pause_ms(RETRY_PAUSE_MS);
  }
  return 0;
}

static void deliver_record(fleet *f, natsMsg *m, uint64_t sequence) {
  fleet_bucket b;
  char key[FLEET_KEY_MAX + 1], name[FLEET_KEY_MAX + 16];
  uint64_t version;
  record r;
  if (parse_subject(natsMsg_GetSubject(m), &b, key, sizeof key, &version) != 0 ||
      !unwrap(natsMsg_GetData(m), (size_t)natsMsg_GetDataLength(m), &r))
    return; /* not ours: ignored */
  snprintf(name, sizeof name, "%s.%s", bucket_names[b], key);
  if (!newer(f, name, version)) return;
  void *value = NULL;
  size_t len = r.len;
  if (r.chunked) {
    if (!watch_chunked(f, b, key, version, &r, &value, &len)) return;
  } else {
    value = xmalloc(r.len + 1);
    memcpy(value, r.value, r.len);
    ((char *)value)[r.len] = '\0';
  }
  event *ev = xcalloc(1, sizeof *ev);
  ev->kind = EV_CHANGE;
  ev->bucket = b;
  ev->key = xstrdup(key);
  ev->version = version;
  ev->sequence = sequence;
  ev->deleted = r.deleted;
  ev->value = value;
  ev->len = len;
  post(f, ev);
}

static void *records_main(void *p) {
  fleet *f = p;
  /* An empty stream sends nothing: it is in sync from the start. */
  jsStreamInfo *si = NULL;
  jsErrCode je = 0;
  if (js_GetStreamInfo(&si, f->js, RECORDS_STREAM, NULL, &je) == NATS_OK && si->State.Msgs == 0)
    post_records_synced(f);
  if (si) jsStreamInfo_Destroy(si);
  while (!atomic_load(&f->stopping)) {
    if (atomic_exchange(&f->resubscribe, 0)) {
      natsSubscription *fresh = NULL;
      if (subscribe_records(f, &fresh) == NATS_OK) {
        natsSubscription *old;
        pthread_mutex_lock(&f->mu);
        old = f->records_sub;
        f->records_sub = fresh;
        pthread_mutex_unlock(&f->mu);
        (void)natsSubscription_Unsubscribe(old);
        natsSubscription_Destroy(old);
      } else {
        atomic_store(&f->resubscribe, 1); /* the next turn tries again */
        pause_ms(RETRY_PAUSE_MS);
      }
    }
    natsMsg *m = NULL;
    natsStatus s = natsSubscription_NextMsg(&m, f->records_sub, WATCH_POLL_MS);
    if (s == NATS_TIMEOUT) continue;
    if (s != NATS_OK) {
      /* The ordered consumer re-creates itself after an outage. */
      if (!atomic_load(&f->stopping)) pause_ms(RETRY_PAUSE_MS);
      continue;
    }
    jsMsgMetaData *meta = NULL;
    if (natsMsg_GetMetaData(&meta, m) != NATS_OK) meta = NULL;
    uint64_t seq = meta ? meta->Sequence.Stream : 0;
    if (seq > atomic_load(&f->last_sequence)) atomic_store(&f->last_sequence, seq);
    deliver_record(f, m, seq);
    if (meta) {
      if (meta->NumPending == 0) post_records_synced(f);
      jsMsgMetaData_Destroy(meta);
    }
    natsMsg_Destroy(m);
  }
  return NULL;
}

/* This node's own heartbeat comes back through the watch every period: a
 * watch silent for three lost its consumer (with the server it lived on,
 * or in an election of the bucket's stream), and libnats would make it
 * again only after its missed heartbeats, 10 s and more, the other nodes'
 * rows in GET /v1/fleet frozen meanwhile. It is made again at once. */
static void rewatch_members(fleet *f, int64_t *last_entry_ms) {
  pthread_mutex_lock(&f->mu);
  int beating = f->member_json != NULL;
  pthread_mutex_unlock(&f->mu);
  if (!beating || !atomic_load(&f->connected) || now_ms() - *last_entry_ms <= 3 * f->heartbeat_ms)
    return;
  *last_entry_ms = now_ms(); /* the next try, a silence later */
  kvWatcher *fresh = NULL;
  if (kvStore_WatchAll(&fresh, f->members, NULL) != NATS_OK) return;
  kvWatcher_Destroy(f->members_watch);
  f->members_watch = fresh;
}

static void *members_main(void *p) {
  fleet *f = p;
  int64_t last_entry_ms = now_ms();
  while (!atomic_load(&f->stopping)) {
    kvEntry *e = NULL;
    natsStatus s = kvWatcher_Next(&e, f->members_watch, WATCH_POLL_MS);
    if (s == NATS_OK) last_entry_ms = now_ms();
    else rewatch_members(f, &last_entry_ms);
    if (s == NATS_TIMEOUT) continue;
    if (s != NATS_OK) {
      if (!atomic_load(&f->stopping)) pause_ms(RETRY_PAUSE_MS);
      continue;
    }
    if (e == NULL) {
      post_synced(f, FLEET_MEMBERS);
      continue;
    }
    event *ev = xcalloc(1, sizeof *ev);
    ev->kind = EV_CHANGE;
    ev->bucket = FLEET_MEMBERS;
    ev->key = xstrdup(kvEntry_Key(e));
    kvOperation op = kvEntry_Operation(e);
    ev->deleted = op == kvOp_Delete || op == kvOp_Purge;
    ev->version = kvEntry_Revision(e);
    int len = kvEntry_ValueLen(e);
    size_t n = !ev->deleted && len > 0 ? (size_t)len : 0;
    ev->value = xmalloc(n + 1);
    if (n) memcpy(ev->value, kvEntry_Value(e), n);
    ((char *)ev->value)[n] = '\0';
    ev->len = n;
    kvEntry_Destroy(e);
    post(f, ev);
  }
  return NULL;
}

/* ---- writes (write thread) ---- */

/* The key's latest version: 1 with it (its value may be a deletion), 0
 * when the key has none, -1 when the servers could not say. *m is the
 * message the record points into (the caller destroys it). */
static int read_latest(fleet *f, fleet_bucket b, const char *key, natsMsg **m, record *r,
                       uint64_t *version) {
  char subject[FLEET_KEY_MAX + 32];
  snprintf(subject, sizeof subject, "rec.%s.%s.*", bucket_names[b], key);
  jsErrCode je = 0;
  *m = NULL;
  *version = 0;
  natsStatus s = js_GetLastMsg(m, f->js, RECORDS_STREAM, subject, NULL, &je);
  if (s == NATS_NOT_FOUND) return 0;
  if (s != NATS_OK) return -1;
  fleet_bucket got;
  char k[FLEET_KEY_MAX + 1];
  if (parse_subject(natsMsg_GetSubject(*m), &got, k, sizeof k, version) != 0 ||
      !unwrap(natsMsg_GetData(*m), (size_t)natsMsg_GetDataLength(*m), r)) {
    /* Something that is not a record sits on our subject: start above it
     * would be guesswork, so the write fails until an operator looks. */
    natsMsg_Destroy(*m);
    *m = NULL;
    return -2;
  }
  return 1;
}

static int unavailable(fleet *f) {
  int64_t since = atomic_load(&f->disconnected_since_ms);
  return since != 0 && now_ms() - since > DISCONNECTED_FAIL_FAST_MS;
}

/* Keeps the key's last FLEET_HISTORY versions, `written` being the latest;
 * best effort (the next write purges the records again). The chunks of
 * the version that just left the history go with it, whoever wrote them:
 * the winner's and those of writers that lost that version or crashed
 * before its record. */
static void trim_history(fleet *f, fleet_bucket b, const char *key, uint64_t written) {
  char subject[FLEET_KEY_MAX + 32];
  snprintf(subject, sizeof subject, "rec.%s.%s.*", bucket_names[b], key);
  jsOptions o;
  jsOptions_Init(&o);
  o.Stream.Purge.Subject = subject;
  o.Stream.Purge.Keep = FLEET_HISTORY;
  jsErrCode je = 0;
  (void)js_PurgeStream(f->js, RECORDS_STREAM, &o, &je);
  if (written > FLEET_HISTORY)
    chunks_purge_version(f->js, bucket_names[b], key, written - FLEET_HISTORY);
}

typedef struct unknown_ids {
  char id[8][WRITE_ID_LEN + 1];
  int n;
} unknown_ids;

static int is_unknown(const unknown_ids *u, const record *r) {
  for (int i = 0; i < u->n; i++)
    if (memcmp(u->id[i], r->id, WRITE_ID_LEN) == 0) return 1;
  return 0;
}

/* The transform's view of the current value: the record's own bytes, or
 * its chunks read back. 0 with *value (and *owned to free, or NULL), 2
 * when the servers did not answer, -1 when answered (damaged). */
static int current_value(fleet *f, op *o, const record *cur, uint64_t version,
                         const void **value, size_t *len, void **owned) {
  *owned = NULL;
  *value = cur->value;
  *len = cur->len;
  if (!cur->chunked) return 0;
  char why[160];
  int rc = load_chunked(f, o->bucket, o->key, version, cur, owned, len, why, sizeof why);
  if (rc == CHUNKS_EAGAIN) return 2;
  if (rc != 0) {
    char *msg = xasprintf("version %llu of the key cannot be read back (%s): delete the key to "
                          "write it again", (unsigned long long)version, why);
    post_done(f, o, FLEET_EDAMAGED, 0, msg);
    free(msg);
    return -1;
  }
  *value = *owned;
  return 0;
}

/* Runs the transform over the current version: 0 with *next, 2 to retry,
 * -1 when answered (refused, damaged). */
static int transform_current(fleet *f, op *o, const record *cur, int present, uint64_t version,
                             void **next, size_t *next_len) {
  const void *value = NULL;
  size_t len = 0;
  void *owned = NULL;
  if (present) {
    int rc = current_value(f, o, cur, version, &value, &len, &owned);
    if (rc != 0) return rc;
  }
  char *why = NULL;
  int rc = o->transform(o->transform_arg, value, len, version, next, next_len, &why);
  free(owned);
  if (rc != 0) {
    post_done(f, o, FLEET_EREJECT, 0, why ? why : "refused");
    free(why);
    return -1;
  }
  if (*next_len > FLEET_VALUE_MAX) {
    char *msg = xasprintf("the value is %zu bytes, over the fleet's limit of %u", *next_len,
                          FLEET_VALUE_MAX);
    post_done(f, o, FLEET_EREJECT, 0, msg);
    free(msg);
    free(*next);
    *next = NULL;
    return -1;
  }
  return 0;
}

/* Publishes version `v` of the key: its envelope, then value or manifest. */
static natsStatus publish_record(fleet *f, op *o, uint64_t v, const char *id, char kind,
                                 const void *value, size_t len, jsErrCode *je) {
  size_t stored_len = ENVELOPE_LEN + len;
  char *stored = xmalloc(stored_len);
  memcpy(stored, id, WRITE_ID_LEN);
  stored[WRITE_ID_LEN] = kind;
  stored[WRITE_ID_LEN + 1] = '\n';
  if (len) memcpy(stored + ENVELOPE_LEN, value, len);
  char subject[FLEET_KEY_MAX + 48];
  snprintf(subject, sizeof subject, "rec.%s.%s.%llu", bucket_names[o->bucket], o->key,
           (unsigned long long)v);
  jsPubAck *ack = NULL;
  natsStatus s = js_Publish(&ack, f->js, subject, stored, (int)stored_len, NULL, je);
  free(stored);
  if (ack) jsPubAck_Destroy(ack);
  return s;
}

/* One attempt: 0 done (answered), 1 go round at once, 2 go round after a
 * pause. */
static int attempt(fleet *f, op *o, unknown_ids *unknown) {
  natsMsg *m;
  record cur = {0};
  uint64_t version;
  int have = read_latest(f, o->bucket, o->key, &m, &cur, &version);
  if (have == -2) {
    post_done(f, o, FLEET_EREJECT, 0, "the key's latest record is not an edgenode record");
    return 0;
  }
  if (have < 0) return 2;
  if (have && is_unknown(unknown, &cur)) {
    natsMsg_Destroy(m);
    post_done(f, o, 0, version, NULL); /* it landed after all */
    return 0;
  }
  int present = have && !cur.deleted;
  void *next = NULL;
  size_t next_len = 0;
  if (o->is_delete && !present) {
    natsMsg_Destroy(m);
    post_done(f, o, FLEET_ENOENT, 0, "no such key");
    return 0;
  }
  if (!o->is_delete) {
    int rc = transform_current(f, o, &cur, present, version, &next, &next_len);
    if (rc != 0) {
      natsMsg_Destroy(m);
      return rc < 0 ? 0 : rc;
    }
  }
  natsMsg_Destroy(m);

  char id[WRITE_ID_LEN + 1];
  new_write_id(id);
  uint64_t v = version + 1;
  const char *bucket = bucket_names[o->bucket];
  size_t chunk = chunk_size_for(natsConnection_GetMaxPayload(f->nc));
  int chunked = ENVELOPE_LEN + next_len > chunk;
  char manifest[128];
  natsStatus s = NATS_OK;
  jsErrCode je = 0;
  if (chunked) {
    /* The chunks first: the record, once written, must find them all. */
    chunk_manifest man;
    s = chunks_put(f->js, bucket, o->key, v, id, next, next_len, chunk, &man);
    free(next);
    if (s != NATS_OK) return 2; /* they go with the history; a new attempt writes new ones */
    size_t n = chunk_manifest_format(&man, manifest, sizeof manifest);
    s = publish_record(f, o, v, id, 'C', manifest, n, &je);
  } else {
    s = publish_record(f, o, v, id, o->is_delete ? 'D' : 'P', next, next_len, &je);
    free(next);
  }
  if (s == NATS_OK) {
    trim_history(f, o->bucket, o->key, v);
    if (chunked) {
      pthread_mutex_lock(&f->mu);
      f->chunked_writes++;
      pthread_mutex_unlock(&f->mu);
    }
    post_done(f, o, 0, v, NULL);
    return 0;
  }
  /* Another writer took the version: a definite no, go round at once (and
   * this write's chunks can go now: no record will ever name them). A
   * timeout or an election leaves the outcome unknown: remember the id. */
  if (je == JS_ERR_VERSION_TAKEN) {
    if (chunked) chunks_purge_write(f->js, bucket, o->key, v, id);
    return 1;
  }
  if (transient(s)) {
    memcpy(unknown->id[unknown->n % 8], id, sizeof id);
    if (unknown->n < 8) unknown->n++;
  }
  return 2;
}

static void run_write(fleet *f, op *o) {
  int64_t deadline = o->queued_ms + f->write_deadline_ms;
  unknown_ids unknown = {.n = 0};
  for (int attempts = 0;; attempts++) {
    if (atomic_load(&f->stopping)) {
      post_done(f, o, FLEET_ECLOSED, 0, "the node is shutting down");
      return;
    }
    if (now_ms() > deadline || unavailable(f)) {
      post_done(f, o, FLEET_EUNAVAIL, 0, "fleet unavailable");
      return;
    }
    if (attempts > 0) {
      pthread_mutex_lock(&f->mu);
      f->write_retries++;
      pthread_mutex_unlock(&f->mu);
    }
    int next = attempt(f, o, &unknown);
    if (next == 0) return;
    if (next == 2) pause_ms(RETRY_PAUSE_MS);
  }
}

/* Answers the queued writes that cannot be done: every one (all), or those
 * past their deadline, or all of them when the servers are away. */
static void fail_queued(fleet *f, int status, const char *why, int all) {
  int64_t now = now_ms();
  int away = unavailable(f);
  op *failed = NULL;
  pthread_mutex_lock(&f->mu);
  for (op **p = &f->ops_head; *p;) {
    op *o = *p;
    if (all || away || now > o->queued_ms + f->write_deadline_ms) {
      *p = o->next;
      o->next = failed;
      failed = o;
    } else {
      p = &o->next;
    }
  }
  f->ops_tail = &f->ops_head;
  while (*f->ops_tail) f->ops_tail = &(*f->ops_tail)->next;
  pthread_mutex_unlock(&f->mu);
  while (failed) {
    op *next = failed->next;
    post_done(f, failed, status, 0, why);
    free(failed->key);
    free(failed);
    failed = next;
  }
}

static void *write_main(void *p) {
  fleet *f = p;
  while (!atomic_load(&f->stopping)) {
    if (f->nc == NULL && connect_first(f) != 0) {
      fail_queued(f, FLEET_EUNAVAIL, "fleet unavailable", 0);
      pause_ms(CONNECT_PAUSE_MS);
      continue;
    }
    if (!atomic_load(&f->bound) && bind_all(f) != 0) {
      /* Not bound yet (a new cluster elects its leaders, or the servers are
       * away): writes wait for it within their deadline. */
      fail_queued(f, FLEET_EUNAVAIL, "fleet unavailable", 0);
      pause_ms(RETRY_PAUSE_MS);
      continue;
    }
    pthread_mutex_lock(&f->mu);
    while (f->ops_head == NULL && !atomic_load(&f->stopping)) pthread_cond_wait(&f->cv, &f->mu);
    op *o = f->ops_head;
    if (o) {
      f->ops_head = o->next;
      if (f->ops_head == NULL) f->ops_tail = &f->ops_head;
    }
    pthread_mutex_unlock(&f->mu);
    if (o == NULL) break;
    run_write(f, o);
    free(o->key);
    free(o);
  }
  /* Whatever is left is answered, so every done is called exactly once. */
  fail_queued(f, FLEET_ECLOSED, "the node is shutting down", 1);
  return NULL;
}

static int enqueue(fleet *f, fleet_bucket b, const char *key, int is_delete,
                   fleet_transform_fn transform, const void *transform_arg, fleet_done_fn done,
                   void *done_arg) {
  if (f == NULL || (unsigned)b >= FLEET_MEMBERS || !fleet_key_valid(key) || done == NULL ||
      (!is_delete && transform == NULL))
    return -EINVAL;
  if (atomic_load(&f->stopping)) return FLEET_ECLOSED;
  op *o = xcalloc(1, sizeof *o);
  o->bucket = b;
  o->queued_ms = now_ms();
  o->key = xstrdup(key);
  o->is_delete = is_delete;
  o->transform = transform;
  o->transform_arg = transform_arg;
  o->done = done;
  o->done_arg = done_arg;
  pthread_mutex_lock(&f->mu);
  *f->ops_tail = o;
  f->ops_tail = &o->next;
  pthread_cond_signal(&f->cv);
  pthread_mutex_unlock(&f->mu);
  return 0;
}

int fleet_delete(fleet *f, fleet_bucket b, const char *key, fleet_done_fn done, void *done_arg) {
  return enqueue(f, b, key, 1, NULL, NULL, done, done_arg);
}

int fleet_update(fleet *f, fleet_bucket b, const char *key, fleet_transform_fn transform,
                 const void *transform_arg, fleet_done_fn done, void *done_arg) {
  return enqueue(f, b, key, 0, transform, transform_arg, done, done_arg);
}

/* ---- membership heartbeat ---- */

/* Why the connection cannot be made, as libnats left it: "" when it is up
 * or the servers are simply away (a refused TCP connect leaves no error).
 * libnats retries in the background and tells no callback why an attempt
 * failed, so this is read every heartbeat. */
static void link_error_now(fleet *f, char *out, size_t size) {
  out[0] = '\0';
  if (f->nc == NULL || atomic_load(&f->connected)) return;
  const char *detail = NULL;
  natsStatus s = natsConnection_GetLastError(f->nc, &detail);
  pthread_mutex_lock(&f->mu);
  int closed = f->nats_closed;
  pthread_mutex_unlock(&f->mu);
  if (s == NATS_OK && !closed) return;
  const char *status = natsStatus_GetText(s);
  char why[180];
  if (s == NATS_OK) snprintf(why, sizeof why, "the connection was closed");
  else if (detail == NULL || *detail == '\0' || strcmp(detail, status) == 0)
    snprintf(why, sizeof why, "%s", status);
  else snprintf(why, sizeof why, "%s: %s", status, detail);
  /* Refused credentials twice from one server make libnats give up. */
  snprintf(out, size, "%s%s", why,
           closed ? "; libnats closed the connection and tries no more: restart the node" : "");
}

static void check_link(fleet *f) {
  if (f->nc == NULL) return; /* the write thread's first attempts say it */
  char now[sizeof f->link_error];
  link_error_now(f, now, sizeof now);
  set_link_error(f, now);
}

static void *heartbeat_main(void *p) {
  fleet *f = p;
  pthread_mutex_lock(&f->mu);
  while (!atomic_load(&f->stopping)) {
    char *json = f->member_json ? xstrdup(f->member_json) : NULL;
    pthread_mutex_unlock(&f->mu);
    check_link(f);
    if (json && atomic_load(&f->bound)) {
      uint64_t rev;
      /* A failed beat is simply the next one's job. */
      (void)kvStore_PutString(&rev, f->members, f->node_name, json);
    }
    free(json);
    pthread_mutex_lock(&f->mu);
    if (atomic_load(&f->stopping)) break;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    int64_t ns = until.tv_nsec + (f->heartbeat_ms % 1000) * 1000000;
    until.tv_sec += f->heartbeat_ms / 1000 + ns / 1000000000;
    until.tv_nsec = ns % 1000000000;
    pthread_cond_timedwait(&f->hb_cv, &f->mu, &until);
  }
  pthread_mutex_unlock(&f->mu);
  return NULL;
}

void fleet_set_member(fleet *f, const char *json) {
  pthread_mutex_lock(&f->mu);
  free(f->member_json);
  f->member_json = xstrdup(json);
  pthread_mutex_unlock(&f->mu);
}

/* ---- opening and closing ---- */

static int count_servers(const char *list, const char ***out) {
  int n = 0;
  char *copy = xstrdup(list);
  const char **urls = xcalloc(strlen(list) / 2 + 2, sizeof *urls);
  char *save = NULL;
  for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    while (*tok == ' ') tok++;
    if (*tok) urls[n++] = xstrdup(tok);
  }
  free(copy);
  *out = urls;
  return n;
}

static void free_urls(const char **urls, int n) {
  for (int i = 0; i < n; i++) free((char *)urls[i]);
  free(urls);
}

/* libnats' last error on this thread says more than the status (which CA
 * file could not be loaded, and why). */
static int fail(char *err, size_t errlen, int code, const char *what, natsStatus s) {
  const char *why = nats_error_text();
  snprintf(err, errlen, "%s: %s", what, why ? why : natsStatus_GetText(s));
  return code;
}

static natsStatus make_options(fleet *f, const fleet_options *o, const char **urls, int n) {
  natsStatus s = natsOptions_Create(&f->opts);
  if (s == NATS_OK) s = natsOptions_SetServers(f->opts, urls, n);
  if (s == NATS_OK) s = natsOptions_SetName(f->opts, o->node_name);
  /* Never give up on the fleet: a node serves on its local copy meanwhile. */
  if (s == NATS_OK) s = natsOptions_SetMaxReconnect(f->opts, -1);
  if (s == NATS_OK) s = natsOptions_SetReconnectWait(f->opts, 250);
  if (s == NATS_OK) s = natsOptions_SetPingInterval(f->opts, 2000);
  if (s == NATS_OK) s = natsOptions_SetMaxPingsOut(f->opts, 2);
  if (s == NATS_OK) s = natsOptions_SetTimeout(f->opts, 2000);
  if (s == NATS_OK) s = natsOptions_SetDisconnectedCB(f->opts, on_disconnected, f);
  if (s == NATS_OK) s = natsOptions_SetReconnectedCB(f->opts, on_reconnected, f);
  if (s == NATS_OK) s = natsOptions_SetClosedCB(f->opts, on_nats_closed, f);
  if (s == NATS_OK && o->creds_file)
    s = natsOptions_SetUserCredentialsFromFiles(f->opts, o->creds_file, NULL);
  if (s == NATS_OK && (o->tls || o->ca_file)) s = natsOptions_SetSecure(f->opts, true);
  if (s == NATS_OK && o->ca_file) s = natsOptions_LoadCATrustedCertificates(f->opts, o->ca_file);
  return s;
}

/* libnats reads a credentials file at every connection attempt and sends
 * what it finds: a file without a user JWT and its seed would fail every
 * attempt, in the background, so it is refused here. It is read again, not
 * kept: a file rewritten with new credentials is used at the next attempt. */
static int creds_usable(const char *file, char *err, size_t errlen) {
  FILE *fp = fopen(file, "r");
  if (fp == NULL) {
    snprintf(err, errlen, "credentials file %s: %s", file, strerror(errno));
    return 0;
  }
  char text[16384];
  size_t n = fread(text, 1, sizeof text - 1, fp);
  fclose(fp);
  text[n] = '\0';
  int ok = strstr(text, "-----BEGIN NATS USER JWT-----") != NULL &&
           strstr(text, "-----BEGIN USER NKEY SEED-----") != NULL;
  explicit_bzero(text, sizeof text);
  if (!ok)
    snprintf(err, errlen,
             "credentials file %s: not a NATS .creds file (a user JWT and its NKEY seed, "
             "as nsc generate creds writes it)", file);
  return ok;
}

int fleet_open(fleet **out, uv_loop_t *loop, const fleet_options *o, const fleet_callbacks *cb,
               char *err, size_t errlen) {
  *out = NULL;
  if (o == NULL || o->servers == NULL || o->node_name == NULL || *o->node_name == '\0') {
    snprintf(err, errlen, "the fleet needs servers and a node name");
    return -EINVAL;
  }
  if (o->creds_file && !creds_usable(o->creds_file, err, errlen)) return -EINVAL;
  const char **urls;
  int n = count_servers(o->servers, &urls);
  if (n == 0) {
    free_urls(urls, n);
    snprintf(err, errlen, "no NATS server in \"%s\"", o->servers);
    return -EINVAL;
  }
  fleet *f = xcalloc(1, sizeof *f);
  f->loop = loop;
  if (cb) f->cb = *cb;
  f->write_deadline_ms = o->write_deadline_ms > 0 ? o->write_deadline_ms : 15000;
  f->heartbeat_ms = o->heartbeat_ms > 0 ? o->heartbeat_ms : 1000;
  f->member_ttl_ms = o->member_ttl_ms > 0 ? o->member_ttl_ms : 5 * f->heartbeat_ms;
  f->replicas = o->replicas > 0 ? o->replicas : (n < 3 ? n : 3);
  f->node_name = xstrdup(o->node_name);
  f->lease_ttl_ms = o->lease_ttl_ms > 0 ? o->lease_ttl_ms : 6000;
  f->facet_publish_ms = o->facet_publish_ms > 0 ? o->facet_publish_ms : 3000;
  f->snapshot_every = o->snapshot_every > 0 ? o->snapshot_every : 1000;
  f->facets = fleet__facets_new(f);
  f->ops_tail = &f->ops_head;
  f->ev_tail = &f->ev_head;
  atomic_store(&f->disconnected_since_ms, now_ms());
  if (pthread_mutex_init(&f->mu, NULL) != 0 || pthread_cond_init(&f->cv, NULL) != 0 ||
      pthread_cond_init(&f->hb_cv, NULL) != 0)
    abort();
  natsStatus s = make_options(f, o, urls, n);
  free_urls(urls, n);
  if (s != NATS_OK) {
    int rc = fail(err, errlen, -EINVAL, "NATS options", s);
    natsOptions_Destroy(f->opts);
    fleet__facets_free(f->facets);
    free(f->node_name);
    free(f);
    return rc;
  }
  int rc = uv_async_init(loop, &f->wake, on_wake);
  if (rc != 0) {
    snprintf(err, errlen, "uv_async_init: %s", uv_strerror(rc));
    natsOptions_Destroy(f->opts);
    fleet__facets_free(f->facets);
    free(f->node_name);
    free(f);
    return rc;
  }
  f->wake.data = f;
  /* The write thread connects, in the background. */
  if (pthread_create(&f->write_thread, NULL, write_main, f) != 0) abort();
  f->write_started = 1;
  if (pthread_create(&f->heartbeat_thread, NULL, heartbeat_main, f) != 0) abort();
  f->heartbeat_started = 1;
  *out = f;
  return 0;
}

static void on_closed(uv_handle_t *h) {
  fleet *f = h->data;
  /* Events that arrived after the last wake-up are dropped with the rest;
   * done callbacks among them are still owed an answer. */
  event *e = f->ev_head;
  while (e) {
    event *next = e->next;
    if (e->kind == EV_DONE) e->done(e->done_arg, e->status, e->version, e->error);
    free_event(e);
    e = next;
  }
  for (int i = 0; i < SEEN_BUCKETS; i++)
    for (seen *s = f->seen[i], *next; s; s = next) {
      next = s->next;
      free(s);
    }
  fleet__facets_free(f->facets);
  free(f->member_json);
  free(f->node_name);
  pthread_mutex_destroy(&f->mu);
  pthread_cond_destroy(&f->cv);
  pthread_cond_destroy(&f->hb_cv);
  free(f);
}

void fleet_close(fleet *f) {
  if (f == NULL) return;
  pthread_mutex_lock(&f->mu);
  atomic_store(&f->stopping, 1);
  pthread_cond_broadcast(&f->cv);
  pthread_cond_broadcast(&f->hb_cv);
  pthread_mutex_unlock(&f->mu);
  if (f->write_started) pthread_join(f->write_thread, NULL);
  if (f->heartbeat_started) pthread_join(f->heartbeat_thread, NULL);
  /* The members thread may make its watch again until it is joined. */
  if (f->watches_started) {
    pthread_join(f->records_thread, NULL);
    pthread_join(f->members_thread, NULL);
  }
  if (f->members_watch) kvWatcher_Destroy(f->members_watch);
  fleet__facets_stop(f->facets);
  if (f->records_sub) {
    (void)natsSubscription_Unsubscribe(f->records_sub);
    natsSubscription_Destroy(f->records_sub);
  }
  if (f->members) kvStore_Destroy(f->members);
  if (f->js) jsCtx_Destroy(f->js);
  if (f->nc) {
    natsConnection_Close(f->nc);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 5;
    pthread_mutex_lock(&f->mu);
    while (!f->nats_closed)
      if (pthread_cond_timedwait(&f->cv, &f->mu, &until) == ETIMEDOUT) break;
    pthread_mutex_unlock(&f->mu);
    natsConnection_Destroy(f->nc);
  }
  natsOptions_Destroy(f->opts);
  /* The last events (answers to writes among them) are delivered by the
   * close callback, on the loop. */
  uv_close((uv_handle_t *)&f->wake, on_closed);
}

/* ---- what facets.c shares ---- */

jsCtx *fleet__js(fleet *f) { return atomic_load(&f->bound) ? f->js : NULL; }
const char *fleet__node_name(const fleet *f) { return f->node_name; }
int fleet__replicas(const fleet *f) { return f->replicas; }
int fleet__stopping(fleet *f) { return atomic_load(&f->stopping); }
int64_t fleet__lease_ttl_ms(const fleet *f) { return f->lease_ttl_ms; }
int64_t fleet__facet_publish_ms(const fleet *f) { return f->facet_publish_ms; }
int64_t fleet__snapshot_every(const fleet *f) { return f->snapshot_every; }
int64_t fleet__max_payload(fleet *f) { return f->nc ? natsConnection_GetMaxPayload(f->nc) : 0; }
fleet_facets *fleet__facets(fleet *f) { return f->facets; }

void fleet__post_facet_lost(fleet *f, const char *tenant, const char *why) {
  event *e = xcalloc(1, sizeof *e);
  e->kind = EV_FACET_LOST;
  e->key = xstrdup(tenant);
  e->error = xstrdup(why);
  post(f, e);
}

void fleet_get_status(fleet *f, fleet_status *out) {
  memset(out, 0, sizeof *out);
  out->connected = atomic_load(&f->connected);
  out->bound = atomic_load(&f->bound);
  out->synced_mask = atomic_load(&f->synced_mask);
  out->last_sequence = atomic_load(&f->last_sequence);
  pthread_mutex_lock(&f->mu);
  out->writes_ok = f->writes_ok;
  out->writes_failed = f->writes_failed;
  out->write_retries = f->write_retries;
  out->chunked_writes = f->chunked_writes;
  out->damaged = f->damaged;
  pthread_mutex_unlock(&f->mu);
  if (out->connected && f->nc &&
      natsConnection_GetConnectedUrl(f->nc, out->server, sizeof out->server) != NATS_OK)
    out->server[0] = '\0';
  pthread_mutex_lock(&f->mu);
  if (!out->connected) snprintf(out->error, sizeof out->error, "%s", f->link_error);
  pthread_mutex_unlock(&f->mu);
}
