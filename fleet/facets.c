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
} owned;

struct fleet_facets {
  fleet *f;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  owned *list;
  kvStore *leases;
  pthread_t renew_thread;
  int renew_started;
  int stop;
  int draining; /* leases say "<node> draining" */
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
  if (ff->renew_started) pthread_join(ff->renew_thread, NULL);
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

/* The tenant is not this node's any more; its workers are told (once). */
static void lose(fleet_facets *ff, owned *o, const char *why) {
  pthread_mutex_lock(&ff->mu);
  int was = o->held;
  o->held = 0;
  pthread_mutex_unlock(&ff->mu);
  if (was) {
    log_write(LOG_WARN, o->tenant, NULL, NULL, "facets: this node no longer owns them: %s", why);
    fleet__post_facet_lost(ff->f, o->tenant, why);
  }
}

/* ---- leases ---- */

static void *renew_main(void *arg);

static void start_renewing(fleet_facets *ff) {
  pthread_mutex_lock(&ff->mu);
  if (!ff->renew_started && !ff->stop) {
    if (pthread_create(&ff->renew_thread, NULL, renew_main, ff) != 0) abort();
    ff->renew_started = 1;
  }
  pthread_mutex_unlock(&ff->mu);
}

/* A lease's value: the holder's name, then " draining" while it drains. */
static void lease_value(fleet_facets *ff, char *out, size_t len) {
  pthread_mutex_lock(&ff->mu);
  int draining = ff->draining;
  pthread_mutex_unlock(&ff->mu);
  snprintf(out, len, "%s%s", fleet__node_name(ff->f), draining ? " draining" : "");
}

/* The holder's name copied into owner; 1 when it says it is draining. */
static int lease_holder(const char *value, char *owner, size_t owner_len) {
  const char *space = value ? strchr(value, ' ') : NULL;
  size_t n = value == NULL ? 0 : space ? (size_t)(space - value) : strlen(value);
  snprintf(owner, owner_len, "%.*s", (int)n, value ? value : "");
  return space != NULL && strcmp(space + 1, "draining") == 0;
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
    int draining = lease_holder(kvEntry_ValueString(e), owner, owner_len);
    if (strcmp(owner, node) != 0) {
      snprintf(why, why_len, draining ? "node %s is handing the facets of %s over; try again"
                                      : "node %s owns the facets of %s", owner, o->tenant);
      kvEntry_Destroy(e);
      return draining ? FLEET_EHANDOVER : FLEET_EOWNED;
    }
    /* Its own lease, from before this process: held again, and the copy
     * here is rebuilt all the same (it may lack the last record). */
    s = kvStore_UpdateString(&rev, ff->leases, o->tenant, value, kvEntry_Revision(e));
    kvEntry_Destroy(e);
  } else if (s == NATS_NOT_FOUND) {
    s = kvStore_CreateString(&rev, ff->leases, o->tenant, value);
    if (s != NATS_OK && !transient(s) && kvStore_Get(&e, ff->leases, o->tenant) == NATS_OK) {
      lease_holder(kvEntry_ValueString(e), owner, owner_len);
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

/* One round of renewals. A tenant in the middle of a publish or a
 * take-over is left for the next round (its lease is written by then). */
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
    if (!held || pthread_mutex_trylock(&o->busy) != 0) continue;
    uint64_t next = 0;
    natsStatus s = kvStore_UpdateString(&next, ff->leases, o->tenant, value, rev);
    if (s == NATS_OK) {
      pthread_mutex_lock(&ff->mu);
      o->lease_rev = next;
      o->renewed_ms = now_ms();
      pthread_mutex_unlock(&ff->mu);
    } else if (!transient(s)) {
      lose(ff, o, "another node holds the lease now");
    } else if (now_ms() - renewed >= ttl) {
      lose(ff, o, "the lease could not be renewed in time");
    }
    pthread_mutex_unlock(&o->busy);
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
      pthread_mutex_lock(&ff->mu);
      o->last = n;
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
