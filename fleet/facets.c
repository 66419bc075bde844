/*
 * Facets in the fleet (fleet.h, "Facets"): the owner's lease, the stream of
 * every commit, and taking a tenant over.
 *
 * Leases are KV entries whose value is the owner's node name, in a bucket
 * whose TTL removes an entry not written again in time: the owner rewrites
 * each of its leases every third of the TTL by compare-and-set on the
 * revision it wrote last, so a lease that lapsed and was taken meanwhile is
 * never taken back. A lease is only the way nodes agree on who should
 * write; what keeps two of them from both writing is the stream: record n
 * of a tenant can be written once, and a node writes n only after it holds
 * every record before it. A stale owner (its lease lapsed unnoticed while
 * it was stopped) therefore finds its next number taken by the claim the
 * new owner wrote before serving, and gives the tenant up.
 *
 * A stored message is 'R', the facet id's length (0: the tenant's own
 * facet), the id, then the change record; or 'C' and the claiming node's
 * name. The message id "<node>.<tenant>.<n>" makes a publish retried after
 * a timeout count once (JetStream's duplicate window).
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base.h"
#include "chunks.h"
#include "internal.h"

#define FACETS_STREAM "EDGENODE_FACETS"
#define SNAPSHOTS_STREAM "EDGENODE_FACET_SNAPSHOTS"
#define SNAPSHOT_CHUNKS "facets" /* the chunks' bucket token (chunks.h) */
#define OWN_FACET "-"            /* a snapshot's name for the tenant's own facet: no id is it */
#define LEASES_BUCKET "edgenode_leases"
/* JetStream's "maximum messages per subject exceeded": the number is taken. */
#define JS_ERR_NUMBER_TAKEN 10077
#define CLAIM_ATTEMPTS 5
#define RETRY_PAUSE_MS 100
#define MAX_ID 64

/* A tenant this node owns, owned once, or is taking over. Entries stay
 * until the fleet closes (a tenant taken over again reuses its own), so
 * threads may hold one without a reference count. */
typedef struct owned {
  struct owned *next;
  char *tenant;
  pthread_mutex_t busy; /* one take-over or publish of the tenant at a time */
  /* Under the list's mutex: */
  int held;             /* the lease is this node's and the copy is current */
  uint64_t last;        /* the tenant's last record number */
  uint64_t lease_rev;   /* the lease's revision this node wrote last */
  int64_t renewed_ms;   /* when it was written (monotonic) */
  uint64_t snapshot;    /* the records the latest snapshot covers (0: none) */
  int snapshot_due;     /* snapshot_every commits since it */
} owned;

struct fleet_facets {
  fleet *f;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  owned *list;
  kvStore *leases;
  pthread_t renew_thread, snapshot_thread;
  int renew_started; /* both threads */
  int stop;
  int draining; /* leases say "<node> draining" */
  fleet_replay store; /* the node's copies (from the first take-over on) */
  int have_store;
};

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void pause_ms(int64_t ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
  nanosleep(&ts, NULL);
}

static int transient(natsStatus s) {
  return s == NATS_TIMEOUT || s == NATS_NO_RESPONDERS || s == NATS_NOT_YET_CONNECTED ||
         s == NATS_CONNECTION_DISCONNECTED || s == NATS_IO_ERROR || s == NATS_STALE_CONNECTION;
}

fleet_facets *fleet__facets_new(fleet *f) {
  fleet_facets *ff = xcalloc(1, sizeof *ff);
  ff->f = f;
  if (pthread_mutex_init(&ff->mu, NULL) != 0 || pthread_cond_init(&ff->cv, NULL) != 0) abort();
  return ff;
}

natsStatus fleet__facets_bind(fleet_facets *ff, jsCtx *js) {
  natsStatus s = fleet__bind_write_once(js, FACETS_STREAM, "fct.>", fleet__replicas(ff->f));
  if (s == NATS_OK)
    s = fleet__bind_write_once(js, SNAPSHOTS_STREAM, "fsn.>", fleet__replicas(ff->f));
  if (s != NATS_OK || ff->leases != NULL) return s;
  kvStore *kv = NULL;
  s = js_KeyValue(&kv, js, LEASES_BUCKET);
  if (s == NATS_NOT_FOUND) {
    kvConfig cfg;
    kvConfig_Init(&cfg);
    cfg.Bucket = LEASES_BUCKET;
    cfg.Replicas = fleet__replicas(ff->f);
    cfg.History = 1;
    cfg.TTL = fleet__lease_ttl_ms(ff->f) * 1000000; /* nanoseconds */
    s = js_CreateKeyValue(&kv, js, &cfg);
    if (s != NATS_OK) s = js_KeyValue(&kv, js, LEASES_BUCKET);
  }
  if (s == NATS_OK) {
    pthread_mutex_lock(&ff->mu);
    ff->leases = kv;
    pthread_mutex_unlock(&ff->mu);
  }
  return s;
}

void fleet__facets_stop(fleet_facets *ff) {
  if (ff == NULL) return;
  pthread_mutex_lock(&ff->mu);
  ff->stop = 1;
  pthread_cond_broadcast(&ff->cv);
  pthread_mutex_unlock(&ff->mu);
  if (ff->renew_started) {
    pthread_join(ff->renew_thread, NULL);
    pthread_join(ff->snapshot_thread, NULL);
  }
  ff->renew_started = 0;
}

void fleet__facets_free(fleet_facets *ff) {
  if (ff == NULL) return;
  fleet__facets_stop(ff);
  for (owned *o = ff->list, *next; o; o = next) {
    next = o->next;
    pthread_mutex_destroy(&o->busy);
    free(o->tenant);
    free(o);
  }
  if (ff->leases) kvStore_Destroy(ff->leases);
  pthread_mutex_destroy(&ff->mu);
  pthread_cond_destroy(&ff->cv);
  free(ff);
}

static owned *find(fleet_facets *ff, const char *tenant, int add) {
  pthread_mutex_lock(&ff->mu);
  owned *o = ff->list;
  while (o && strcmp(o->tenant, tenant) != 0) o = o->next;
  if (o == NULL && add) {
    o = xcalloc(1, sizeof *o);
    o->tenant = xstrdup(tenant);
    if (pthread_mutex_init(&o->busy, NULL) != 0) abort();
    o->next = ff->list;
    ff->list = o;
  }
  pthread_mutex_unlock(&ff->mu);
  return o;
}

/* The tenant is not this node's any more: its copy goes, and its workers
 * are told (once). The caller holds o->busy, so no take-over of the
 * tenant is rebuilding the copy meanwhile. */
static void lose(fleet_facets *ff, owned *o, const char *why) {
  pthread_mutex_lock(&ff->mu);
  int was = o->held;
  o->held = 0;
  fleet_replay store = ff->store;
  int have_store = ff->have_store;
  pthread_mutex_unlock(&ff->mu);
  if (was && have_store && store.drop) store.drop(store.arg, o->tenant);
  if (was) {
    log_write(LOG_WARN, o->tenant, NULL, NULL, "facets: this node no longer owns them: %s", why);
    fleet__post_facet_lost(ff->f, o->tenant, why);
  }
}

/* ---- leases ---- */

static void *renew_main(void *arg);
static void *snapshot_main(void *arg);

static void start_renewing(fleet_facets *ff) {
  pthread_mutex_lock(&ff->mu);
  if (!ff->renew_started && !ff->stop) {
    if (pthread_create(&ff->renew_thread, NULL, renew_main, ff) != 0 ||
        pthread_create(&ff->snapshot_thread, NULL, snapshot_main, ff) != 0)
      abort();
    ff->renew_started = 1;
  }
  pthread_mutex_unlock(&ff->mu);
}

/* A lease's value: "<holder> <its lease in ms>", then " draining" while it
 * drains. The holder says how long its lease lasts: the bucket's own TTL
 * is whatever the node that made the bucket had, so it is only a backstop. */
static void lease_value(fleet_facets *ff, char *out, size_t len) {
  pthread_mutex_lock(&ff->mu);
  int draining = ff->draining;
  pthread_mutex_unlock(&ff->mu);
  snprintf(out, len, "%s %" PRId64 "%s", fleet__node_name(ff->f), fleet__lease_ttl_ms(ff->f),
           draining ? " draining" : "");
}

typedef struct lease {
  char holder[FLEET_KEY_MAX + 1];
  int draining;
  int lapsed; /* written longer ago than its holder's lease */
} lease;

static void lease_read(kvEntry *e, lease *l) {
  const char *v = kvEntry_ValueString(e);
  memset(l, 0, sizeof *l);
  if (v == NULL) return;
  size_t n = strcspn(v, " ");
  snprintf(l->holder, sizeof l->holder, "%.*s", (int)n, v);
  const char *rest = v + n;
  long long ttl = *rest == ' ' ? strtoll(rest + 1, NULL, 10) : 0;
  l->draining = strstr(rest, " draining") != NULL;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  int64_t now_ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
  l->lapsed = ttl > 0 && kvEntry_Created(e) > 0 && now_ns - kvEntry_Created(e) > ttl * 1000000;
}

/* Writes the lease for this node: 0, FLEET_EOWNED (owner named), FLEET_EHANDOVER,
 * FLEET_EUNAVAIL. */
static int take_lease(fleet_facets *ff, owned *o, char *owner, size_t owner_len, char *why,
                      size_t why_len) {
  const char *node = fleet__node_name(ff->f);
  char value[FLEET_KEY_MAX + 16];
  lease_value(ff, value, sizeof value);
  kvEntry *e = NULL;
  uint64_t rev = 0;
  natsStatus s = kvStore_Get(&e, ff->leases, o->tenant);
  if (s == NATS_OK) {
    lease l;
    lease_read(e, &l);
    snprintf(owner, owner_len, "%s", l.holder);
    if (strcmp(l.holder, node) != 0 && !l.lapsed) {
      snprintf(why, why_len, l.draining ? "node %s is handing the facets of %s over; try again"
                                        : "node %s owns the facets of %s", owner, o->tenant);
      kvEntry_Destroy(e);
      return l.draining ? FLEET_EHANDOVER : FLEET_EOWNED;
    }
    /* Its own lease from before this process, or one that lapsed: taken
     * by compare-and-set (a node taking it too makes one of the two
     * fail), and the copy here is rebuilt all the same. */
    if (strcmp(l.holder, node) != 0)
      log_write(LOG_INFO, o->tenant, NULL, NULL, "facets: node %s's lease lapsed: taking it",
                l.holder);
    s = kvStore_UpdateString(&rev, ff->leases, o->tenant, value, kvEntry_Revision(e));
    kvEntry_Destroy(e);
    if (s != NATS_OK && !transient(s)) {
      snprintf(why, why_len, "node %s took the facets of %s first", owner, o->tenant);
      return FLEET_EOWNED;
    }
  } else if (s == NATS_NOT_FOUND) {
    s = kvStore_CreateString(&rev, ff->leases, o->tenant, value);
    if (s != NATS_OK && !transient(s) && kvStore_Get(&e, ff->leases, o->tenant) == NATS_OK) {
      lease l;
      lease_read(e, &l);
      snprintf(owner, owner_len, "%s", l.holder);
      snprintf(why, why_len, "node %s took the facets of %s first", owner, o->tenant);
      kvEntry_Destroy(e);
      return FLEET_EOWNED;
    }
  }
  if (s != NATS_OK) {
    snprintf(why, why_len, "the fleet cannot say who owns the facets of %s: %s", o->tenant,
             natsStatus_GetText(s));
    return FLEET_EUNAVAIL;
  }
  pthread_mutex_lock(&ff->mu);
  o->lease_rev = rev;
  o->renewed_ms = now_ms();
  pthread_mutex_unlock(&ff->mu);
  return 0;
}

/* Whether the compare-and-set that just failed on this thread failed
 * because the lease was written by someone else: any other failure (an
 * election, a timeout) is tried again until the lease runs out. */
static int lease_taken(void) {
  natsStatus last = NATS_OK;
  const char *text = nats_GetLastError(&last);
  return text != NULL && strstr(text, "wrong last sequence") != NULL;
}

/* One round of renewals. */
static void renew_all(fleet_facets *ff) {
  char value[FLEET_KEY_MAX + 16];
  lease_value(ff, value, sizeof value);
  int64_t ttl = fleet__lease_ttl_ms(ff->f);
  pthread_mutex_lock(&ff->mu);
  owned *list = ff->list;
  pthread_mutex_unlock(&ff->mu);
  for (owned *o = list; o; o = o->next) {
    pthread_mutex_lock(&ff->mu);
    int held = o->held;
    uint64_t rev = o->lease_rev;
    int64_t renewed = o->renewed_ms;
    pthread_mutex_unlock(&ff->mu);
    if (!held) continue;
    /* Not under o->busy: commits go on while the lease is rewritten (a
     * writer never lets it go for long), and only a held tenant is
     * renewed, which no take-over touches. */
    uint64_t next = 0;
    natsStatus s = kvStore_UpdateString(&next, ff->leases, o->tenant, value, rev);
    const char *why = NULL;
    if (s == NATS_OK) {
      pthread_mutex_lock(&ff->mu);
      if (o->lease_rev == rev) {
        o->lease_rev = next;
        o->renewed_ms = now_ms();
      }
      pthread_mutex_unlock(&ff->mu);
    } else if (s == NATS_ERR && lease_taken()) {
      why = "another node holds the lease now";
    } else if (now_ms() - renewed >= ttl) {
      why = "the lease could not be renewed in time";
    }
    if (why != NULL) {
      pthread_mutex_lock(&o->busy); /* its copy goes: no take-over may run meanwhile */
      lose(ff, o, why);
      pthread_mutex_unlock(&o->busy);
    }
  }
}

static void *renew_main(void *arg) {
  fleet_facets *ff = arg;
  int64_t period = fleet__lease_ttl_ms(ff->f) / 3;
  pthread_mutex_lock(&ff->mu);
  while (!ff->stop) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += period / 1000;
    until.tv_nsec += (period % 1000) * 1000000;
    if (until.tv_nsec >= 1000000000) {
      until.tv_sec++;
      until.tv_nsec -= 1000000000;
    }
    pthread_cond_timedwait(&ff->cv, &ff->mu, &until);
    if (ff->stop) break;
    pthread_mutex_unlock(&ff->mu);
    renew_all(ff);
    pthread_mutex_lock(&ff->mu);
  }
  pthread_mutex_unlock(&ff->mu);
  return NULL;
}

/* ---- the stream ---- */

static void subject_of(char *buf, size_t size, const char *tenant, uint64_t n) {
  snprintf(buf, size, "fct.%s.%" PRIu64, tenant, n);
}

/* The tenant's last record number (0: none): 0, or -1 when NATS cannot say. */
static int last_number(jsCtx *js, const char *tenant, uint64_t *last) {
  char subject[FLEET_KEY_MAX + 16];
  snprintf(subject, sizeof subject, "fct.%s.*", tenant);
  natsMsg *m = NULL;
  jsErrCode je = 0;
  natsStatus s = js_GetLastMsg(&m, js, FACETS_STREAM, subject, NULL, &je);
  *last = 0;
  if (s == NATS_NOT_FOUND) return 0;
  if (s != NATS_OK) return -1;
  const char *dot = strrchr(natsMsg_GetSubject(m), '.');
  *last = dot ? strtoull(dot + 1, NULL, 10) : 0;
  natsMsg_Destroy(m);
  return *last > 0 ? 0 : -1;
}

/* Plays records from..to into the copy here, in order. */
static int replay(jsCtx *js, owned *o, const fleet_replay *rp, uint64_t from, uint64_t to,
                  char *why, size_t why_len) {
  for (uint64_t n = from; n <= to; n++) {
    char subject[FLEET_KEY_MAX + 32];
    subject_of(subject, sizeof subject, o->tenant, n);
    natsMsg *m = NULL;
    jsErrCode je = 0;
    natsStatus s = js_GetLastMsg(&m, js, FACETS_STREAM, subject, NULL, &je);
    if (s != NATS_OK) {
      snprintf(why, why_len, "record %" PRIu64 " of %s cannot be read: %s", n, o->tenant,
               s == NATS_NOT_FOUND ? "it is missing" : natsStatus_GetText(s));
      return s == NATS_NOT_FOUND ? FLEET_EDAMAGED : FLEET_EUNAVAIL;
    }
    const uint8_t *p = (const uint8_t *)natsMsg_GetData(m);
    size_t len = (size_t)natsMsg_GetDataLength(m);
    int rc = 0;
    if (len >= 2 && p[0] == 'R' && (size_t)p[1] + 2 <= len && p[1] <= MAX_ID) {
      char id[MAX_ID + 1];
      memcpy(id, p + 2, p[1]);
      id[p[1]] = '\0';
      rc = rp->record(rp->arg, o->tenant, p[1] ? id : NULL, p + 2 + p[1], len - 2 - p[1], why,
                      why_len);
      if (rc != 0) rc = FLEET_EDAMAGED;
    } else if (len < 1 || p[0] != 'C') {
      snprintf(why, why_len, "record %" PRIu64 " of %s is not an edgenode record", n, o->tenant);
      rc = FLEET_EDAMAGED;
    }
    natsMsg_Destroy(m);
    if (rc != 0) return rc;
  }
  return 0;
}

/* Publishes message n of the tenant: 0, JS_ERR_NUMBER_TAKEN, or -1 (no
 * answer within the deadline: the outcome is unknown). */
static int publish_number(fleet *f, const char *tenant, uint64_t n, const void *data, size_t len,
                          int64_t deadline_ms) {
  char subject[FLEET_KEY_MAX + 32], msg_id[FLEET_KEY_MAX + 160];
  subject_of(subject, sizeof subject, tenant, n);
  snprintf(msg_id, sizeof msg_id, "%s.%s.%" PRIu64, fleet__node_name(f), tenant, n);
  for (;;) {
    jsCtx *js = fleet__js(f);
    int64_t left = deadline_ms - now_ms();
    if (js != NULL && left > 0) {
      jsPubOptions po;
      jsPubOptions_Init(&po);
      po.MsgId = msg_id;
      po.MaxWait = left < 1000 ? left : 1000;
      jsPubAck *ack = NULL;
      jsErrCode je = 0;
      natsStatus s = js_Publish(&ack, js, subject, data, (int)len, &po, &je);
      if (ack) jsPubAck_Destroy(ack);
      if (s == NATS_OK) return 0;
      if (je == JS_ERR_NUMBER_TAKEN) return JS_ERR_NUMBER_TAKEN;
      if (!transient(s) && s != NATS_ERR) return -1;
    }
    if (now_ms() + RETRY_PAUSE_MS >= deadline_ms || fleet__stopping(f)) return -1;
    pause_ms(RETRY_PAUSE_MS);
  }
}

/* ---- snapshots ---- */

/* A tenant's facet files, copied while none of its commits can be published. */
typedef struct file_copy {
  struct file_copy *next;
  char *id; /* OWN_FACET or a child's id */
  void *data;
  size_t len;
} file_copy;

static int collect_file(void *ctx, const char *facet_id, const void *data, size_t len) {
  file_copy **list = ctx;
  file_copy *c = xcalloc(1, sizeof *c);
  c->id = xstrdup(facet_id ? facet_id : OWN_FACET);
  c->data = xmalloc(len ? len : 1);
  if (len) memcpy(c->data, data, len);
  c->len = len;
  c->next = *list;
  *list = c;
  return 0;
}

static void copies_free(file_copy *c) {
  while (c) {
    file_copy *next = c->next;
    free(c->id);
    free(c->data);
    free(c);
    c = next;
  }
}

/* Drops the records a snapshot covers (up to `label`; the next one, and
 * so the tenant's last number, stays), the snapshots before it and their
 * chunks. Best effort: what is left is trimmed by the next snapshot. */
static void trim(jsCtx *js, const char *tenant, uint64_t label, uint64_t before) {
  char subject[FLEET_KEY_MAX + 32];
  subject_of(subject, sizeof subject, tenant, label + 1);
  natsMsg *m = NULL;
  jsErrCode je = 0;
  if (js_GetLastMsg(&m, js, FACETS_STREAM, subject, NULL, &je) == NATS_OK) {
    jsOptions o;
    jsOptions_Init(&o);
    char filter[FLEET_KEY_MAX + 16];
    snprintf(filter, sizeof filter, "fct.%s.*", tenant);
    o.Stream.Purge.Subject = filter;
    o.Stream.Purge.Sequence = natsMsg_GetSequence(m);
    (void)js_PurgeStream(js, FACETS_STREAM, &o, &je);
    natsMsg_Destroy(m);
  }
  jsOptions o;
  jsOptions_Init(&o);
  char filter[FLEET_KEY_MAX + 16];
  snprintf(filter, sizeof filter, "fsn.%s.*", tenant);
  o.Stream.Purge.Subject = filter;
  o.Stream.Purge.Keep = 1;
  (void)js_PurgeStream(js, SNAPSHOTS_STREAM, &o, &je);
  if (before > 0) chunks_purge_version(js, SNAPSHOT_CHUNKS, tenant, before);
}

/* Stores the copies as the snapshot covering records up to `label`: the
 * files as chunks, then the manifest that names them (first line the
 * label, then "<facet> <chunk manifest>" per file). */
static int store_snapshot(fleet *f, const char *tenant, uint64_t label, file_copy *copies,
                          char *why, size_t why_len) {
  jsCtx *js = fleet__js(f);
  if (js == NULL) {
    snprintf(why, why_len, "the fleet is unavailable");
    return FLEET_EUNAVAIL;
  }
  size_t chunk = chunk_size_for(fleet__max_payload(f)), cap = 64, len = 0;
  char *text = xmalloc(cap);
  len = (size_t)snprintf(text, cap, "%" PRIu64 "\n", label);
  for (file_copy *c = copies; c; c = c->next) {
    chunk_manifest m;
    if (chunks_put(js, SNAPSHOT_CHUNKS, tenant, label, c->id, c->data, c->len, chunk, &m) != NATS_OK) {
      free(text);
      snprintf(why, why_len, "the snapshot's chunks could not be stored");
      return FLEET_EUNAVAIL;
    }
    char line[MAX_ID + 128];
    size_t n = (size_t)snprintf(line, sizeof line, "%s ", c->id);
    n += chunk_manifest_format(&m, line + n, sizeof line - n);
    if (len + n + 2 > cap) text = xrealloc(text, cap = (len + n + 2) * 2);
    memcpy(text + len, line, n);
    len += n;
    text[len++] = '\n';
  }
  char subject[FLEET_KEY_MAX + 32];
  snprintf(subject, sizeof subject, "fsn.%s.%" PRIu64, tenant, label);
  jsPubAck *ack = NULL;
  jsErrCode je = 0;
  natsStatus s = js_Publish(&ack, js, subject, text, (int)len, NULL, &je);
  if (ack) jsPubAck_Destroy(ack);
  free(text);
  if (s != NATS_OK) {
    snprintf(why, why_len, "the snapshot could not be stored: %s", natsStatus_GetText(s));
    return FLEET_EUNAVAIL;
  }
  return 0;
}

/* A snapshot of an owned tenant's facets. The copies are taken while the
 * tenant's commits wait (o->busy), so they hold every record up to the
 * last but one published (the last one's commit may still be on its way
 * to the file: it is replayed again, which changes nothing if it is
 * there). `locked`: the caller holds o->busy, and it is held throughout. */
static int take_snapshot(fleet_facets *ff, owned *o, int locked, char *why, size_t why_len) {
  if (!locked) pthread_mutex_lock(&o->busy);
  pthread_mutex_lock(&ff->mu);
  int ok = o->held && ff->have_store;
  uint64_t label = o->last > 0 ? o->last - 1 : 0, before = o->snapshot;
  fleet_replay store = ff->store;
  o->snapshot_due = 0;
  pthread_mutex_unlock(&ff->mu);
  file_copy *copies = NULL;
  int rc = 0;
  if (ok && label > before) {
    rc = store.dump(store.arg, o->tenant, collect_file, &copies, why, why_len) == 0 ? 0
                                                                                     : FLEET_EDAMAGED;
  } else {
    ok = 0;
  }
  if (!locked) pthread_mutex_unlock(&o->busy);
  if (ok && rc == 0) rc = store_snapshot(ff->f, o->tenant, label, copies, why, why_len);
  copies_free(copies);
  if (!ok || rc != 0) return rc;
  pthread_mutex_lock(&ff->mu);
  if (label > o->snapshot) o->snapshot = label;
  pthread_mutex_unlock(&ff->mu);
  jsCtx *js = fleet__js(ff->f);
  if (js) trim(js, o->tenant, label, before);
  log_write(LOG_INFO, o->tenant, NULL, NULL, "facets: snapshot of records 1..%" PRIu64 " stored",
            label);
  return 0;
}

static void *snapshot_main(void *arg) {
  fleet_facets *ff = arg;
  pthread_mutex_lock(&ff->mu);
  while (!ff->stop) {
    owned *due = NULL;
    for (owned *o = ff->list; o && !due; o = o->next)
      if (o->snapshot_due && o->held) due = o;
    if (due == NULL) {
      pthread_cond_wait(&ff->cv, &ff->mu);
      continue;
    }
    pthread_mutex_unlock(&ff->mu);
    char why[256];
    if (take_snapshot(ff, due, 0, why, sizeof why) != 0)
      log_write(LOG_WARN, due->tenant, NULL, NULL, "facets: snapshot failed: %s", why);
    pthread_mutex_lock(&ff->mu);
  }
  pthread_mutex_unlock(&ff->mu);
  return NULL;
}

/* The latest snapshot, restored: *label is the record it covers (0: none). */
static int restore_latest(fleet_facets *ff, owned *o, jsCtx *js, const fleet_replay *rp,
                          uint64_t *label, char *why, size_t why_len) {
  char subject[FLEET_KEY_MAX + 16];
  snprintf(subject, sizeof subject, "fsn.%s.*", o->tenant);
  natsMsg *m = NULL;
  jsErrCode je = 0;
  *label = 0;
  natsStatus s = js_GetLastMsg(&m, js, SNAPSHOTS_STREAM, subject, NULL, &je);
  if (s == NATS_NOT_FOUND) return 0;
  if (s != NATS_OK) {
    snprintf(why, why_len, "the snapshot of %s cannot be read: %s", o->tenant, natsStatus_GetText(s));
    return FLEET_EUNAVAIL;
  }
  char *text = xstrndup(natsMsg_GetData(m), (size_t)natsMsg_GetDataLength(m));
  natsMsg_Destroy(m);
  char *save = NULL, *line = strtok_r(text, "\n", &save);
  uint64_t l = line ? strtoull(line, NULL, 10) : 0;
  int rc = l > 0 ? 0 : FLEET_EDAMAGED;
  while (rc == 0 && (line = strtok_r(NULL, "\n", &save)) != NULL) {
    char *space = strchr(line, ' ');
    chunk_manifest man;
    if (space == NULL || chunk_manifest_parse(space + 1, strlen(space + 1), FLEET_VALUE_MAX, &man) != 0) {
      rc = FLEET_EDAMAGED;
      break;
    }
    *space = '\0';
    void *data = NULL;
    if (chunks_get(js, SNAPSHOT_CHUNKS, o->tenant, l, line, &man, &data, why, why_len) != 0) {
      rc = FLEET_EDAMAGED;
      break;
    }
    const char *id = strcmp(line, OWN_FACET) == 0 ? NULL : line;
    if (rp->restore(rp->arg, o->tenant, id, data, (size_t)man.len, why, why_len) != 0)
      rc = FLEET_EDAMAGED;
    free(data);
  }
  free(text);
  if (rc != 0 && why[0] == '\0') snprintf(why, why_len, "the snapshot of %s is damaged", o->tenant);
  if (rc == 0) {
    *label = l;
    pthread_mutex_lock(&ff->mu);
    o->snapshot = l;
    pthread_mutex_unlock(&ff->mu);
  }
  return rc;
}

/* Replays the tenant's history into an empty copy and claims the next
 * number, so that nobody else can write it: 0 or a FLEET_* value. */
static int catch_up(fleet_facets *ff, owned *o, const fleet_replay *rp, char *why,
                    size_t why_len) {
  jsCtx *js = fleet__js(ff->f);
  uint64_t done = 0, last = 0;
  if (js == NULL || last_number(js, o->tenant, &last) != 0) {
    snprintf(why, why_len, "the fleet cannot say how far the facets of %s go", o->tenant);
    return FLEET_EUNAVAIL;
  }
  if (rp->begin(rp->arg, o->tenant) != 0) {
    snprintf(why, why_len, "the copy of the facets of %s here cannot be emptied", o->tenant);
    return FLEET_EDAMAGED;
  }
  int restored = restore_latest(ff, o, js, rp, &done, why, why_len);
  if (restored != 0) return restored;
  const char *node = fleet__node_name(ff->f);
  size_t claim_len = 1 + strlen(node);
  char *claim = xmalloc(claim_len);
  claim[0] = 'C';
  memcpy(claim + 1, node, claim_len - 1);
  int rc = FLEET_EUNAVAIL;
  for (int attempt = 0; attempt < CLAIM_ATTEMPTS; attempt++) {
    if ((rc = replay(js, o, rp, done + 1, last, why, why_len)) != 0) break;
    done = last;
    int got = publish_number(ff->f, o->tenant, last + 1, claim, claim_len,
                             now_ms() + fleet__facet_publish_ms(ff->f));
    if (got == 0) {
      pthread_mutex_lock(&ff->mu);
      o->last = last + 1;
      o->held = 1;
      pthread_mutex_unlock(&ff->mu);
      break;
    }
    rc = FLEET_EUNAVAIL;
    snprintf(why, why_len, "the fleet did not take the claim on the facets of %s", o->tenant);
    /* Someone wrote past what was read: read on from there. */
    if (got != JS_ERR_NUMBER_TAKEN || last_number(js, o->tenant, &last) != 0) break;
  }
  free(claim);
  return rc;
}

int fleet_facet_acquire(fleet *f, const char *tenant, const fleet_replay *rp, char *owner,
                        size_t owner_len, char *why, size_t why_len) {
  fleet_facets *ff = fleet__facets(f);
  owner[0] = why[0] = '\0';
  if (!fleet_key_valid(tenant)) {
    snprintf(why, why_len, "invalid tenant name");
    return -EINVAL;
  }
  owned *o = find(ff, tenant, 1);
  pthread_mutex_lock(&o->busy);
  pthread_mutex_lock(&ff->mu);
  ff->store = *rp;
  ff->have_store = 1;
  int held = o->held;
  kvStore *leases = ff->leases;
  pthread_mutex_unlock(&ff->mu);
  int rc = 0;
  if (!held) {
    if (leases == NULL || fleet__js(f) == NULL) {
      snprintf(why, why_len, "the fleet is unavailable: the facets of %s have no known owner",
               tenant);
      rc = FLEET_EUNAVAIL;
    } else if ((rc = take_lease(ff, o, owner, owner_len, why, why_len)) == 0 &&
               (rc = catch_up(ff, o, rp, why, why_len)) == 0) {
      log_write(LOG_INFO, tenant, NULL, NULL, "facets: this node owns them now (record %" PRIu64 ")",
                o->last);
      start_renewing(ff);
    }
  }
  pthread_mutex_unlock(&o->busy);
  return rc;
}

int fleet_facet_publish(fleet *f, const char *tenant, const char *facet_id, const void *rec,
                        size_t len, char *why, size_t why_len) {
  fleet_facets *ff = fleet__facets(f);
  why[0] = '\0';
  size_t id_len = facet_id ? strlen(facet_id) : 0;
  owned *o = find(ff, tenant, 0);
  if (o == NULL || id_len > MAX_ID) {
    snprintf(why, why_len, "this node does not own the facets of %s", tenant);
    return FLEET_EOWNED;
  }
  pthread_mutex_lock(&o->busy);
  pthread_mutex_lock(&ff->mu);
  int held = o->held;
  uint64_t n = o->last + 1;
  int64_t age = now_ms() - o->renewed_ms;
  pthread_mutex_unlock(&ff->mu);
  int rc = 0;
  if (!held) {
    snprintf(why, why_len, "this node does not own the facets of %s", tenant);
    rc = FLEET_EOWNED;
  } else if (age >= fleet__lease_ttl_ms(f)) {
    /* Stopped or cut off past the lease: another node may own them now. */
    snprintf(why, why_len, "this node's lease on the facets of %s lapsed", tenant);
    lose(ff, o, why);
    rc = FLEET_EOWNED;
  } else {
    size_t total = 2 + id_len + len;
    uint8_t *data = xmalloc(total);
    data[0] = 'R';
    data[1] = (uint8_t)id_len;
    memcpy(data + 2, facet_id ? facet_id : "", id_len);
    memcpy(data + 2 + id_len, rec, len);
    int got = publish_number(f, tenant, n, data, total, now_ms() + fleet__facet_publish_ms(f));
    free(data);
    if (got == 0) {
      log_write(LOG_DEBUG, tenant, NULL, NULL, "facets: record %" PRIu64 " published (%zu bytes)", n,
                len);
      pthread_mutex_lock(&ff->mu);
      o->last = n;
      if (n - o->snapshot >= (uint64_t)fleet__snapshot_every(f) && !o->snapshot_due) {
        o->snapshot_due = 1;
        pthread_cond_broadcast(&ff->cv);
      }
      pthread_mutex_unlock(&ff->mu);
    } else if (got == JS_ERR_NUMBER_TAKEN) {
      snprintf(why, why_len, "another node wrote record %" PRIu64 " of %s: this node is fenced",
               n, tenant);
      lose(ff, o, why);
      rc = FLEET_EFENCED;
    } else {
      /* It may still land: the tenant's next owner (this node again,
       * maybe) replays whatever did. */
      snprintf(why, why_len, "the fleet did not confirm the commit in time (replication "
                             "unavailable)");
      lose(ff, o, why);
      rc = FLEET_EUNAVAIL;
    }
  }
  pthread_mutex_unlock(&o->busy);
  return rc;
}

void fleet_facet_mark_draining(fleet *f) {
  fleet_facets *ff = fleet__facets(f);
  pthread_mutex_lock(&ff->mu);
  ff->draining = 1;
  pthread_mutex_unlock(&ff->mu);
  renew_all(ff); /* at once, not at the next round */
}

int fleet_facet_release_all(fleet *f) {
  fleet_facets *ff = fleet__facets(f);
  pthread_mutex_lock(&ff->mu);
  owned *list = ff->list;
  kvStore *leases = ff->leases;
  pthread_mutex_unlock(&ff->mu);
  int n = 0;
  for (owned *o = list; o; o = o->next) {
    pthread_mutex_lock(&o->busy);
    pthread_mutex_lock(&ff->mu);
    int held = o->held;
    pthread_mutex_unlock(&ff->mu);
    if (held) {
      char why[256];
      /* The next owner restores this instead of replaying the history. */
      if (take_snapshot(ff, o, 1, why, sizeof why) != 0)
        log_write(LOG_WARN, o->tenant, NULL, NULL, "facets: the final snapshot failed: %s", why);
      lose(ff, o, "the node is draining");
      if (leases) (void)kvStore_Delete(leases, o->tenant);
      n++;
    }
    pthread_mutex_unlock(&o->busy);
  }
  return n;
}

char *fleet_facet_owned_json(fleet *f) {
  fleet_facets *ff = fleet__facets(f);
  size_t cap = 64, len = 0;
  char *out = xmalloc(cap);
  out[len++] = '[';
  pthread_mutex_lock(&ff->mu);
  for (owned *o = ff->list; o; o = o->next) {
    if (!o->held) continue;
    size_t need = strlen(o->tenant) + 4;
    if (len + need + 2 > cap) out = xrealloc(out, cap = (len + need + 2) * 2);
    len += (size_t)snprintf(out + len, cap - len, "%s\"%s\"", len > 1 ? "," : "", o->tenant);
  }
  pthread_mutex_unlock(&ff->mu);
  out[len++] = ']';
  out[len] = '\0';
  return out;
}
