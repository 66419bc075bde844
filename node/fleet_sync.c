/*
 * The node in a fleet (--fleet): what operators write goes to the fleet
 * first, and this node's node.db is a copy kept current from the fleet's
 * watch. One path applies a record to node.db, whoever wrote it: a write on
 * this node's control API is answered once the watch has brought its record
 * back here and it was applied (or, should the watch lag, once it was
 * applied from the write itself after a few seconds).
 *
 * What is replicated, as fleet/ records (versioned, one writer per version):
 *   workers  name -> {"main_module", "modules", "bindings", "limits"[, "egress"]
 *            [, "rollback_of"]}
 *   egress   name -> {"rules": [...]} (a change of the rules alone)
 *   secrets  name -> {"workers": [...], "sealed"?: {"key", "nonce", "sealed"},
 *            "updated_at"}: the grants, and the value as this node's egress
 *            sealed it with the fleet key (this process never sees it open)
 *   cordons  name -> {"reason", "by", "rule", "node", "since"}: a cordon by
 *            an operator or by a node's monitor, held on every node
 *            (deleted: uncordoned). A suspension stays the node's whose
 *            dedicated process kept crashing (docs/fleet.md says why).
 *   traffic  name -> {"split": [{"version", "percent"}], "current": N}: a
 *            gradual deployment, set while the worker's version was N and
 *            applied only where it still is (a deploy since ends it);
 *            deleted: the split ended.
 * and membership: every node's heartbeat, read for GET /v1/fleet.
 *
 * Static stability: node.db is what the node serves from. With NATS away,
 * it goes on serving it, writes are refused with 503 "fleet unavailable",
 * and the watch catches up when NATS is back. A node is ready (GET /readyz)
 * once the watch has delivered the fleet's whole state; a node that has
 * been in sync before (its data directory says so) is ready on its copy
 * when NATS has not answered within FLEET_OFFLINE_READY_MS of its start.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "egress.h"
#include "facets.h"
#include "fleet.h"
#include "node.h"

#define HEARTBEAT_MS 1000
#define MEMBER_TTL_MS 5000
#define APPLY_WAIT_MS 5000
#define FLEET_OFFLINE_READY_MS 5000
/* The heartbeats a node's request rate and CPU are averaged over: worker
 * processes report once a second, out of step with the heartbeat, so one
 * interval alone would read 0 or twice the rate. */
#define LOAD_WINDOW 10
#define RECORD_BUCKETS \
  ((1u << FLEET_WORKERS) | (1u << FLEET_EGRESS) | (1u << FLEET_SECRETS) | (1u << FLEET_CORDONS) | \
   (1u << FLEET_TRAFFIC))

/* A write waiting to be applied here before it is answered. */
typedef struct waiter {
  struct waiter *next;
  struct node_fleet *owner;
  uint64_t id;       /* to find it again after apply() may have answered it */
  fleet_bucket bucket;
  char *name;
  uint64_t version;  /* 0 until the fleet answered */
  char *record;      /* what was written, to apply should the watch lag */
  int deleted;
  int created;       /* the write found no current value (set on the fleet's thread) */
  node_fleet_cb cb;
  void *data;
  uv_timer_t timer;
  int timer_on;
  struct secret_change *secret; /* a secret's edit, computed from the record it finds */
} waiter;

struct node_fleet {
  node *n;
  fleet *link;
  char *name;
  uv_timer_t heartbeat;
  int heartbeat_open;
  int connected;
  unsigned synced;       /* FLEET_* buckets whose initial state arrived */
  int was_synced_before; /* the data directory has been in sync with a fleet */
  uint64_t applied_sequence;
  json_t *applied;       /* "bucket/name" -> version applied here */
  json_t *members;       /* node name -> its last heartbeat, with "received_ms", "revision" */
  waiter *waiters;
  uint64_t next_waiter_id;
  uint64_t applied_changes;
  char unready[400];     /* node_fleet_unready_reason's text */
  struct load_sample {
    int64_t at_ms;
    uint64_t requests;
    double cpu_ms;
  } load[LOAD_WINDOW];   /* the last heartbeats' totals, a ring */
  int load_n, load_next;
};

static const char *marker_path(node *n, char *buf, size_t size) {
  snprintf(buf, size, "%s/fleet.synced", n->data_dir);
  return buf;
}

int node_fleet_on(const node *n) { return n->fleet != NULL; }

int node_fleet_ready(const node *n) {
  struct node_fleet *nf = n->fleet;
  if (nf == NULL) return 1;
  if ((nf->synced & RECORD_BUCKETS) == RECORD_BUCKETS) return 1;
  return nf->was_synced_before && !nf->connected &&
         time_now_ms() - n->started_at_ms > FLEET_OFFLINE_READY_MS;
}

const char *node_fleet_unready_reason(const node *n) {
  struct node_fleet *nf = n->fleet;
  if (nf && !nf->connected) {
    fleet_status st;
    fleet_get_status(nf->link, &st);
    snprintf(nf->unready, sizeof nf->unready,
             "the fleet is unreachable and this node has never been in sync%s%s",
             st.error[0] ? ": " : "", st.error);
    return nf->unready;
  }
  return "syncing the fleet's state";
}

/* ---- applying records ---- */

static uint64_t applied_version(struct node_fleet *nf, fleet_bucket b, const char *name) {
  char key[FLEET_KEY_MAX + 16];
  snprintf(key, sizeof key, "%s/%s", fleet_bucket_name(b), name);
  return (uint64_t)json_integer_value(json_object_get(nf->applied, key));
}

static void note_applied(struct node_fleet *nf, fleet_bucket b, const char *name, uint64_t v) {
  char key[FLEET_KEY_MAX + 16];
  snprintf(key, sizeof key, "%s/%s", fleet_bucket_name(b), name);
  json_object_set_new(nf->applied, key, json_integer((json_int_t)v));
}

static void apply_worker(struct node_fleet *nf, const char *name, json_t *rec, uint64_t version) {
  node *n = nf->n;
  node_db_worker w = node_db_worker_of(rec);
  w.version = (int64_t)version;
  if (w.main_module == NULL || !json_is_object(w.modules)) {
    log_write(LOG_ERROR, name, NULL, NULL, "fleet: version %llu of the worker is malformed: skipped",
              (unsigned long long)version);
    return;
  }
  int rc = node_db_worker_put(n->db, name, &w, time_now_ms(), NULL);
  if (rc == -EALREADY) return; /* this node has it, or something newer */
  if (rc < 0) {
    log_write(LOG_ERROR, name, NULL, NULL, "fleet: storing version %llu failed: %s",
              (unsigned long long)version, node_db_errmsg(n->db));
    return;
  }
  int unpurged = facet_unpurge(n->data_dir, name);
  if (unpurged != 0)
    log_write(LOG_ERROR, name, NULL, NULL, "cannot lift the purge mark of its facet: %s",
              strerror(-unpurged));
  node_procs_broadcast_changed(n, name);
  if (w.egress) node_egress_push(n, name, w.egress);
  char extra[64];
  snprintf(extra, sizeof extra, "{\"version\":%llu}", (unsigned long long)version);
  log_write(LOG_INFO, name, NULL, extra, "deployed (fleet)");
}

static void apply_worker_deleted(struct node_fleet *nf, const char *name) {
  node *n = nf->n;
  int rc = node_db_worker_delete(n->db, name);
  if (rc == -ENOENT) return;
  if (rc != 0) {
    log_write(LOG_ERROR, name, NULL, NULL, "fleet: deleting failed: %s", node_db_errmsg(n->db));
    return;
  }
  node_procs_broadcast_changed(n, name);
  node_egress_push(n, name, NULL);
  if (n->cordon_hooks) n->cordon_hooks->worker_deleted(n, name);
  log_write(LOG_INFO, name, NULL, NULL, "deleted (fleet)");
}

static void apply_egress(struct node_fleet *nf, const char *name, json_t *rec, int deleted) {
  node *n = nf->n;
  json_t *rules = deleted ? NULL : json_object_get(rec, "rules");
  json_t *list = json_is_array(rules) ? json_incref(rules) : json_array();
  if (node_db_worker_exists(n->db, name) == 1) {
    if (node_db_egress_put(n->db, name, list, time_now_ms()) != 0)
      log_write(LOG_ERROR, name, NULL, NULL, "fleet: storing egress rules failed: %s",
                node_db_errmsg(n->db));
    else
      node_egress_push(n, name, list);
  }
  json_decref(list);
}

/* A secret's grants and sealed value, kept in node.db and given to the
 * egress, which alone can open the value. */
static void apply_secret(struct node_fleet *nf, const char *name, json_t *rec, int deleted) {
  node *n = nf->n;
  if (!egress_secret_name_valid(name, strlen(name))) return;
  if (deleted) {
    if (node_db_secret_delete(n->db, name) == -EIO)
      log_error("fleet: deleting secret %s failed: %s", name, node_db_errmsg(n->db));
    node_egress_push_secret(n, name, NULL, NULL);
    return;
  }
  json_t *workers = json_object_get(rec, "workers");
  json_t *sealed = json_object_get(rec, "sealed");
  if (!json_is_array(workers) || (sealed && !json_is_object(sealed))) {
    log_error("fleet: the record of secret %s is malformed: skipped", name);
    return;
  }
  if (node_db_secret_put(n->db, name, workers, sealed,
                         json_integer_value(json_object_get(rec, "updated_at"))) != 0) {
    log_error("fleet: storing secret %s failed: %s", name, node_db_errmsg(n->db));
    return;
  }
  node_egress_push_secret(n, name, workers, sealed);
}

/* A traffic split, stored only while the worker's version is the one it was
 * set on: a deploy or rollback the fleet ordered after it has ended it. */
static void apply_traffic(struct node_fleet *nf, const char *name, json_t *rec, int deleted) {
  node *n = nf->n;
  json_t *split = deleted ? NULL : json_object_get(rec, "split");
  if (split) {
    json_t *row = NULL;
    int64_t current = node_db_worker_get(n->db, name, &row) == 0
                          ? json_integer_value(json_object_get(row, "version")) : -1;
    json_decref(row);
    if (!json_is_array(split) ||
        current != json_integer_value(json_object_get(rec, "current")))
      return;
  }
  if (node_db_traffic_put(n->db, name, split, time_now_ms()) == -EIO) {
    log_write(LOG_ERROR, name, NULL, NULL, "fleet: storing its traffic split failed: %s",
              node_db_errmsg(n->db));
    return;
  }
  node_procs_broadcast_changed(n, name);
}

static void answer(waiter *w, int status, json_t *body);
static void answer_written(waiter *w);

/* Answers the writes of (bucket, name) that this version covers. */
static void release_waiters(struct node_fleet *nf, fleet_bucket b, const char *name,
                            uint64_t version) {
  for (waiter **p = &nf->waiters; *p;) {
    waiter *w = *p;
    if (w->version && w->bucket == b && w->version <= version && strcmp(w->name, name) == 0) {
      *p = w->next;
      answer_written(w);
    } else {
      p = &w->next;
    }
  }
}

static void apply(struct node_fleet *nf, fleet_bucket b, const char *name, const char *value,
                  size_t len, uint64_t version, int deleted) {
  if (version <= applied_version(nf, b, name)) {
    release_waiters(nf, b, name, version);
    return;
  }
  json_t *rec = NULL;
  if (!deleted) {
    json_error_t jerr;
    rec = json_loadb(value, len, 0, &jerr);
    if (!json_is_object(rec)) {
      log_write(LOG_ERROR, name, NULL, NULL, "fleet: version %llu of its %s record is not JSON: %s",
                (unsigned long long)version, fleet_bucket_name(b), jerr.text);
      json_decref(rec);
      note_applied(nf, b, name, version);
      release_waiters(nf, b, name, version);
      return;
    }
  }
  if (b == FLEET_WORKERS) {
    if (deleted) apply_worker_deleted(nf, name);
    else apply_worker(nf, name, rec, version);
  } else if (b == FLEET_EGRESS) {
    apply_egress(nf, name, rec, deleted);
  } else if (b == FLEET_SECRETS) {
    apply_secret(nf, name, rec, deleted);
  } else if (b == FLEET_CORDONS) {
    if (nf->n->cordon_hooks) nf->n->cordon_hooks->apply(nf->n, name, deleted ? NULL : rec);
  } else if (b == FLEET_TRAFFIC) {
    apply_traffic(nf, name, rec, deleted);
  }
  json_decref(rec);
  note_applied(nf, b, name, version);
  nf->applied_changes++;
  release_waiters(nf, b, name, version);
}

/* ---- the fleet's callbacks ---- */

static void on_change(void *arg, const fleet_entry *e) {
  struct node_fleet *nf = arg;
  if (e->bucket == FLEET_MEMBERS) {
    if (e->deleted) {
      json_object_del(nf->members, e->key);
      return;
    }
    json_t *m = json_loadb(e->value, e->len, 0, NULL);
    if (!json_is_object(m)) {
      json_decref(m);
      return;
    }
    /* A watch made again delivers the latest heartbeats again: one seen
     * already keeps the time it arrived, or a node that died would look
     * alive for another TTL. */
    json_t *had = json_object_get(nf->members, e->key);
    int again = had && (uint64_t)json_integer_value(json_object_get(had, "revision")) == e->version;
    json_object_set_new(m, "received_ms", again ? json_incref(json_object_get(had, "received_ms"))
                                                : json_integer(time_now_ms()));
    json_object_set_new(m, "revision", json_integer((json_int_t)e->version));
    if (strcmp(e->key, nf->name) != 0)
      node_forward_member(nf->n, e->key, json_string_value(json_object_get(m, "listen")));
    json_object_set_new(nf->members, e->key, m);
    return;
  }
  if (e->sequence > nf->applied_sequence) nf->applied_sequence = e->sequence;
  apply(nf, e->bucket, e->key, e->value, e->len, e->version, e->deleted);
}

static void on_synced(void *arg, fleet_bucket b) {
  struct node_fleet *nf = arg;
  unsigned before = nf->synced;
  nf->synced |= 1u << b;
  if ((before & RECORD_BUCKETS) != RECORD_BUCKETS && (nf->synced & RECORD_BUCKETS) == RECORD_BUCKETS) {
    char path[4096];
    FILE *f = fopen(marker_path(nf->n, path, sizeof path), "w");
    if (f) fclose(f);
    nf->was_synced_before = 1;
    char extra[64];
    snprintf(extra, sizeof extra, "{\"sequence\":%llu}", (unsigned long long)nf->applied_sequence);
    log_write(LOG_INFO, NULL, NULL, extra, "fleet synced");
  }
}

/* Nothing is applied: the node keeps the version it had, and a write over
 * the damaged one is refused until the key is deleted. */
static void on_damaged(void *arg, fleet_bucket b, const char *key, uint64_t version,
                       const char *why) {
  (void)arg;
  char extra[96];
  snprintf(extra, sizeof extra, "{\"version\":%llu,\"record\":\"%s\"}",
           (unsigned long long)version, fleet_bucket_name(b));
  log_write(LOG_ERROR, key, NULL, extra, "fleet: a version cannot be read back, skipped: %s", why);
}

/* What the operator can fix: TLS (the CA, the servers' certificates) or
 * the credentials; the servers being down is no error of the link. */
static void on_link_error(void *arg, const char *why) {
  (void)arg;
  const char *hint = strstr(why, "SSL") || strstr(why, "Secure")
                         ? " (check --fleet-ca and the servers' certificates)"
                     : strstr(why, "uthori") || strstr(why, "uthenti")
                         ? " (check --fleet-creds and the servers' authorization)"
                         : "";
  log_error("fleet: cannot connect to NATS: %s%s", why, hint);
}

static void on_state(void *arg, int connected) {
  struct node_fleet *nf = arg;
  if (connected == nf->connected) return;
  nf->connected = connected;
  if (connected) log_info("fleet connected");
  else log_warn("fleet unreachable: serving the local copy, control writes get 503");
}

/* ---- writes ---- */

static void secret_change_free(struct secret_change *c);

static void waiter_free(waiter *w) {
  free(w->name);
  free(w->record);
  secret_change_free(w->secret);
  free(w);
}

static void waiter_closed(uv_handle_t *h) { waiter_free(h->data); }

static void answer(waiter *w, int status, json_t *body) {
  node *n = w->owner->n;
  w->cb(n, w->data, status, body);
  if (w->timer_on) {
    uv_timer_stop(&w->timer);
    uv_close((uv_handle_t *)&w->timer, waiter_closed);
  } else {
    waiter_free(w);
  }
}

/* Success: {"version": N, "created": bool}, N being this write's version. */
static void answer_written(waiter *w) {
  json_t *body = json_pack("{s:I, s:b}", "version", (json_int_t)w->version, "created", w->created);
  answer(w, 0, body);
  json_decref(body);
}

static void unlink_waiter(struct node_fleet *nf, waiter *w) {
  for (waiter **p = &nf->waiters; *p; p = &(*p)->next)
    if (*p == w) {
      *p = w->next;
      return;
    }
}

/* The watch has not brought the write back: apply it from the write. */
static void on_apply_timeout(uv_timer_t *t) {
  waiter *w = t->data;
  struct node_fleet *nf = w->owner;
  log_write(LOG_WARN, w->name, NULL, NULL,
            "fleet: the watch has not delivered version %llu after %d ms: applied from the write",
            (unsigned long long)w->version, APPLY_WAIT_MS);
  /* apply() answers it with every other write this version covers, and may
   * free it: what it needs is copied, and it is looked for again by id. */
  uint64_t id = w->id;
  char *name = xstrdup(w->name);
  char *record = w->record ? xstrdup(w->record) : NULL;
  apply(nf, w->bucket, name, record, record ? strlen(record) : 0, w->version, w->deleted);
  free(name);
  free(record);
  for (waiter *still = nf->waiters; still; still = still->next)
    if (still->id == id) { /* a newer version was applied since: this one is covered */
      unlink_waiter(nf, still);
      answer_written(still);
      break;
    }
}

static void on_written(void *arg, int status, uint64_t version, const char *error) {
  waiter *w = arg;
  struct node_fleet *nf = w->owner;
  if (status != 0) {
    unlink_waiter(nf, w);
    int http = status == FLEET_ENOENT                                ? 404
               : status == FLEET_EREJECT || status == FLEET_EDAMAGED ? 409
                                                                     : 503;
    json_t *body = json_pack("{s:s}", "error", status == FLEET_EUNAVAIL ? "fleet unavailable"
                                               : error ? error : "the fleet refused the write");
    answer(w, http, body);
    json_decref(body);
    return;
  }
  w->version = version;
  if (applied_version(nf, w->bucket, w->name) >= version) {
    unlink_waiter(nf, w);
    answer_written(w);
    return;
  }
  if (uv_timer_init(nf->n->loop, &w->timer) == 0) {
    w->timer.data = w;
    w->timer_on = 1;
    uv_timer_start(&w->timer, on_apply_timeout, APPLY_WAIT_MS, 0);
  }
}

static int set_record(const void *arg, const void *cur, size_t cur_len, uint64_t cur_rev, void **out,
                      size_t *out_len, char **error) {
  (void)cur_len, (void)cur_rev, (void)error;
  waiter *w = (waiter *)arg;
  /* Read on the loop once the answer is posted (through the fleet's lock). */
  w->created = cur == NULL;
  *out_len = strlen(w->record);
  *out = xstrdup(w->record);
  return 0;
}

/* A write waiting for the fleet, linked in (record NULL: a delete, or a
 * record computed by a transform). */
static waiter *waiter_add(node *n, fleet_bucket b, const char *name, json_t *record,
                          node_fleet_cb cb, void *data) {
  struct node_fleet *nf = n->fleet;
  waiter *w = xcalloc(1, sizeof *w);
  w->owner = nf;
  w->id = ++nf->next_waiter_id;
  w->bucket = b;
  w->name = xstrdup(name);
  w->deleted = record == NULL;
  w->record = record ? json_dumps(record, JSON_COMPACT) : NULL;
  w->cb = cb;
  w->data = data;
  w->next = nf->waiters;
  nf->waiters = w;
  return w;
}

/* After fleet_update / fleet_delete: a refusal is answered at once. */
static void waiter_sent(struct node_fleet *nf, waiter *w, int rc) {
  if (rc != 0) {
    unlink_waiter(nf, w);
    json_t *body = json_pack("{s:s}", "error", rc == -EINVAL ? "the name cannot be a fleet key"
                                                             : "fleet unavailable");
    answer(w, rc == -EINVAL ? 400 : 503, body);
    json_decref(body);
  }
}

/* Sends a write to the fleet; cb answers once it is applied here. */
static void write_record(node *n, fleet_bucket b, const char *name, json_t *record,
                         node_fleet_cb cb, void *data) {
  struct node_fleet *nf = n->fleet;
  waiter *w = waiter_add(n, b, name, record, cb, data);
  int rc = record ? fleet_update(nf->link, b, name, set_record, w, on_written, w)
                  : fleet_delete(nf->link, b, name, on_written, w);
  waiter_sent(nf, w, rc);
}

void node_fleet_put_worker(node *n, const char *name, json_t *spec, node_fleet_cb cb, void *data) {
  json_t *rec = json_pack("{s:O, s:O, s:O, s:O}", "main_module", json_object_get(spec, "main_module"),
                          "modules", json_object_get(spec, "modules"), "bindings",
                          json_object_get(spec, "bindings"), "limits",
                          json_object_get(spec, "limits"));
  json_t *rules = json_object_get(spec, "egress");
  if (rules) json_object_set(rec, "egress", rules);
  json_t *rollback_of = json_object_get(spec, "rollback_of"); /* kept in every node's history */
  if (rollback_of) json_object_set(rec, "rollback_of", rollback_of);
  write_record(n, FLEET_WORKERS, name, rec, cb, data);
  json_decref(rec);
}

void node_fleet_put_traffic(node *n, const char *name, json_t *split, int64_t current,
                            node_fleet_cb cb, void *data) {
  json_t *rec = split ? json_pack("{s:O, s:I}", "split", split, "current", (json_int_t)current) : NULL;
  write_record(n, FLEET_TRAFFIC, name, rec, cb, data);
  json_decref(rec);
}

void node_fleet_delete_worker(node *n, const char *name, node_fleet_cb cb, void *data) {
  write_record(n, FLEET_WORKERS, name, NULL, cb, data);
}

void node_fleet_put_egress(node *n, const char *name, json_t *rules, node_fleet_cb cb, void *data) {
  json_t *rec = json_pack("{s:O}", "rules", rules);
  write_record(n, FLEET_EGRESS, name, rec, cb, data);
  json_decref(rec);
}

/* ---- secrets ---- */

/* What a secret's write changes, as text: the transform reads it on the
 * fleet's write thread. */
struct secret_change {
  char *sealed;  /* JSON {"key", "nonce", "sealed"}, or NULL */
  char *workers; /* JSON array, or NULL */
  char *grant;
  char *revoke;
};

static void secret_change_free(struct secret_change *c) {
  if (c == NULL) return;
  free(c->sealed);
  free(c->workers);
  free(c->grant);
  free(c->revoke);
  free(c);
}

/* The record's grants with the change applied. */
static json_t *changed_workers(const struct secret_change *c, json_t *old) {
  json_t *from = c->workers ? json_loads(c->workers, 0, NULL) : json_incref(old);
  json_t *out = json_array();
  size_t i;
  json_t *w;
  json_array_foreach(from, i, w) {
    const char *s = json_string_value(w);
    if (s && !(c->revoke && strcmp(s, c->revoke) == 0) && !(c->grant && strcmp(s, c->grant) == 0))
      json_array_append(out, w);
  }
  if (c->grant) json_array_append_new(out, json_string(c->grant));
  json_decref(from);
  return out;
}

/* fleet_transform_fn: the next version of a secret's record from the latest. */
static int edit_secret(const void *arg, const void *cur, size_t cur_len, uint64_t cur_rev,
                       void **out, size_t *out_len, char **error) {
  (void)cur_rev, (void)error;
  waiter *w = (waiter *)arg;
  const struct secret_change *c = w->secret;
  json_t *old = cur ? json_loadb(cur, cur_len, 0, NULL) : NULL;
  json_t *rec = json_object();
  json_object_set_new(rec, "workers", changed_workers(c, json_object_get(old, "workers")));
  json_t *sealed = c->sealed ? json_loads(c->sealed, 0, NULL)
                             : json_incref(json_object_get(old, "sealed"));
  if (sealed) json_object_set_new(rec, "sealed", sealed);
  int64_t updated = c->sealed ? time_now_ms() : json_integer_value(json_object_get(old, "updated_at"));
  json_object_set_new(rec, "updated_at", json_integer(updated));
  char *text = json_dumps(rec, JSON_COMPACT);
  json_decref(rec);
  json_decref(old);
  if (text == NULL) abort();
  /* Read on the loop once the answer is posted, as set_record's "created". */
  w->created = cur == NULL;
  free(w->record);
  w->record = xstrdup(text);
  *out = text;
  *out_len = strlen(text);
  return 0;
}

static char *dump_or_null(json_t *v) { return v ? json_dumps(v, JSON_COMPACT) : NULL; }

void node_fleet_edit_secret(node *n, const char *name, const node_secret_edit *e,
                            node_fleet_cb cb, void *data) {
  struct node_fleet *nf = n->fleet;
  waiter *w = waiter_add(n, FLEET_SECRETS, name, NULL, cb, data);
  w->deleted = 0;
  w->secret = xcalloc(1, sizeof *w->secret);
  w->secret->sealed = dump_or_null(e->sealed);
  w->secret->workers = dump_or_null(e->workers);
  w->secret->grant = e->grant ? xstrdup(e->grant) : NULL;
  w->secret->revoke = e->revoke ? xstrdup(e->revoke) : NULL;
  waiter_sent(nf, w, fleet_update(nf->link, FLEET_SECRETS, name, edit_secret, w, on_written, w));
}

void node_fleet_delete_secret(node *n, const char *name, node_fleet_cb cb, void *data) {
  write_record(n, FLEET_SECRETS, name, NULL, cb, data);
}

typedef struct cordon_job {
  http_request *req;
  char *name;
  json_t *answer; /* uncordon: what to answer */
} cordon_job;

static void on_cordon_written(node *n, void *data, int status, json_t *body) {
  cordon_job *job = data;
  if (status == 404 && job->answer) {
    /* No fleet-wide cordon: this node's monitor cordoned it, here only. */
    if (n->cordon_hooks) n->cordon_hooks->apply(n, job->name, NULL);
    node_respond_json(job->req, 200, job->answer, NULL);
  } else if (status != 0) {
    node_respond_json(job->req, status, body, NULL);
  } else if (job->answer) {
    node_respond_json(job->req, 200, job->answer, NULL);
  } else {
    json_t *view = n->cordon_hooks ? n->cordon_hooks->view(n, job->name) : json_object();
    node_respond_json(job->req, 200, view, NULL);
    json_decref(view);
  }
  json_decref(job->answer);
  free(job->name);
  free(job);
}

static json_t *cordon_record(node *n, const char *reason, const char *by, const char *rule) {
  return json_pack("{s:s, s:s, s:s?, s:s, s:I}", "reason", reason, "by", by, "rule", rule, "node",
                   n->fleet->name, "since", (json_int_t)time_now_ms());
}

void node_fleet_put_cordon(node *n, const char *name, const char *reason, http_request *req) {
  cordon_job *job = xcalloc(1, sizeof *job);
  job->req = req;
  job->name = xstrdup(name);
  json_t *rec = cordon_record(n, reason, "operator", NULL);
  write_record(n, FLEET_CORDONS, name, rec, on_cordon_written, job);
  json_decref(rec);
}

static void on_shared_cordon(node *n, void *data, int status, json_t *body) {
  (void)n;
  char *name = data;
  if (status != 0)
    log_write(LOG_WARN, name, NULL, NULL, "fleet: the monitor's cordon holds on this node only: %s",
              json_string_value(json_object_get(body, "error")));
  free(name);
}

void node_fleet_share_cordon(node *n, const char *name, const char *reason, const char *rule) {
  if (n->fleet == NULL) return;
  json_t *rec = cordon_record(n, reason, "monitor", rule);
  write_record(n, FLEET_CORDONS, name, rec, on_shared_cordon, xstrdup(name));
  json_decref(rec);
}

void node_fleet_delete_cordon(node *n, const char *name, json_t *answer_body, http_request *req) {
  cordon_job *job = xcalloc(1, sizeof *job);
  job->req = req;
  job->name = xstrdup(name);
  job->answer = answer_body;
  write_record(n, FLEET_CORDONS, name, NULL, on_cordon_written, job);
}

/* ---- membership ---- */

static const char *state_name(const node *n) {
  if (n->state == NODE_SERVING) return "serving";
  return n->drained ? "drained" : "draining";
}

/* {"in_flight", "requests_per_s", "cpu"}: requests being answered now, and
 * requests answered and cores busy running tenants' code (CPU seconds per
 * second) over the last LOAD_WINDOW heartbeats. */
static json_t *load_json(node *n) {
  struct node_fleet *nf = n->fleet;
  struct load_sample now = {.at_ms = (int64_t)(time_mono_ns() / 1000000u)};
  node_stats_totals(n, &now.requests, &now.cpu_ms);
  const struct load_sample *oldest =
      nf->load_n < LOAD_WINDOW ? &nf->load[0] : &nf->load[nf->load_next];
  double rps = 0, cpu = 0;
  if (nf->load_n > 0 && now.at_ms > oldest->at_ms) {
    double s = (double)(now.at_ms - oldest->at_ms) / 1000.0;
    rps = (double)(now.requests - oldest->requests) / s;
    cpu = (now.cpu_ms - oldest->cpu_ms) / 1000.0 / s;
  }
  nf->load[nf->load_next] = now;
  nf->load_next = (nf->load_next + 1) % LOAD_WINDOW;
  if (nf->load_n < LOAD_WINDOW) nf->load_n++;
  /* Two decimals are plenty, and keep the heartbeat short. */
  return json_pack("{s:I, s:f, s:f}", "in_flight", (json_int_t)node_stats_in_flight(n),
                   "requests_per_s", (double)(int64_t)(rps * 100 + 0.5) / 100,
                   "cpu", (double)(int64_t)(cpu * 100 + 0.5) / 100);
}

static void on_heartbeat(uv_timer_t *t) {
  node *n = t->data;
  struct node_fleet *nf = n->fleet;
  json_t *m = json_pack("{s:s, s:s, s:s?, s:s, s:s, s:s, s:b, s:I, s:i, s:I, s:o}", "name", nf->name,
                        "version", EDGENODE_VERSION, "v8", n->v8_version, "listen", n->listen_addr,
                        "control", n->control_addr, "state", state_name(n), "ready",
                        node_fleet_ready(n), "applied", (json_int_t)nf->applied_sequence,
                        "workers", n->n_procs, "time", (json_int_t)time_now_ms(), "load",
                        load_json(n));
  char *text = json_dumps(m, JSON_COMPACT);
  fleet_set_member(nf->link, text);
  free(text);
  json_decref(m);
}

/* ---- GET /v1/fleet ---- */

/* The most current node's applied record: how far a node is behind is
 * counted from it. */
static uint64_t fleet_head(const struct node_fleet *nf) {
  uint64_t head = nf->applied_sequence;
  const char *key;
  json_t *m;
  json_object_foreach(nf->members, key, m) {
    uint64_t a = (uint64_t)json_integer_value(json_object_get(m, "applied"));
    if (a > head) head = a;
  }
  return head;
}

static void fleet_info(node *n, http_request *req) {
  struct node_fleet *nf = n->fleet;
  uint64_t head = fleet_head(nf);
  const char *key;
  json_t *m;
  json_t *nodes = json_array();
  int64_t now = time_now_ms();
  json_object_foreach(nf->members, key, m) {
    int64_t sent = json_integer_value(json_object_get(m, "time"));
    int64_t age = now - json_integer_value(json_object_get(m, "received_ms"));
    uint64_t a = (uint64_t)json_integer_value(json_object_get(m, "applied"));
    char when[32];
    node_iso8601(sent, when);
    json_t *row = json_deep_copy(m);
    json_object_del(row, "time");
    json_object_del(row, "received_ms");
    json_object_del(row, "revision");
    json_object_set_new(row, "last_heartbeat", json_string(when));
    json_object_set_new(row, "heartbeat_age_ms", json_integer(age));
    json_object_set_new(row, "alive", json_boolean(age < MEMBER_TTL_MS));
    json_object_set_new(row, "behind", json_integer((json_int_t)(head - (a < head ? a : head))));
    json_object_set_new(row, "self", json_boolean(strcmp(key, nf->name) == 0));
    json_array_append_new(nodes, row);
  }
  fleet_status st;
  fleet_get_status(nf->link, &st);
  json_t *body = json_pack("{s:s, s:b, s:b, s:s, s:I, s:I, s:o, s:{s:I, s:I, s:I}}", "node",
                           nf->name, "connected", nf->connected, "synced", node_fleet_ready(n),
                           "server", st.server, "applied", (json_int_t)nf->applied_sequence,
                           "head", (json_int_t)head, "nodes", nodes, "writes", "ok",
                           (json_int_t)st.writes_ok, "failed", (json_int_t)st.writes_failed,
                           "retries", (json_int_t)st.write_retries);
  /* The tenants whose facets this node owns (their leases). */
  char *owned = fleet_facet_owned_json(nf->link);
  json_t *facets = json_loads(owned, 0, NULL);
  free(owned);
  json_object_set_new(body, "facets", facets ? facets : json_array());
  if (st.error[0]) json_object_set_new(body, "error", json_string(st.error));
  node_respond_json(req, 200, body, NULL);
  json_decref(body);
}

int node_fleet_route(node *n, http_request *req, const char *path) {
  if (strcmp(path, "/v1/fleet") != 0) return 0;
  if (strcmp(req->method, "GET") != 0) {
    node_respond_method(req, "GET");
    return 1;
  }
  if (n->fleet == NULL) {
    node_respond_error(req, 404, "this node is not in a fleet (start it with --fleet)");
    return 1;
  }
  fleet_info(n, req);
  return 1;
}

void node_fleet_metrics(node *n, FILE *f) {
  struct node_fleet *nf = n->fleet;
  if (nf == NULL) return;
  fleet_status st;
  fleet_get_status(nf->link, &st);
  uint64_t head = fleet_head(nf);
  fprintf(f, "# HELP edgenode_fleet_connected Whether the node is connected to the fleet's NATS.\n"
             "# TYPE edgenode_fleet_connected gauge\nedgenode_fleet_connected %d\n",
          nf->connected);
  fprintf(f, "# HELP edgenode_fleet_synced Whether the node holds the fleet's whole state.\n"
             "# TYPE edgenode_fleet_synced gauge\nedgenode_fleet_synced %d\n",
          node_fleet_ready(n));
  fprintf(f, "# HELP edgenode_fleet_applied_sequence The last fleet record applied here.\n"
             "# TYPE edgenode_fleet_applied_sequence gauge\nedgenode_fleet_applied_sequence %llu\n",
          (unsigned long long)nf->applied_sequence);
  fprintf(f, "# HELP edgenode_fleet_lag Records the node is behind the most current node.\n"
             "# TYPE edgenode_fleet_lag gauge\nedgenode_fleet_lag %llu\n",
          (unsigned long long)(head - nf->applied_sequence));
  fprintf(f, "# HELP edgenode_fleet_writes_total Control writes sent to the fleet, by outcome.\n"
             "# TYPE edgenode_fleet_writes_total counter\n"
             "edgenode_fleet_writes_total{outcome=\"ok\"} %llu\n"
             "edgenode_fleet_writes_total{outcome=\"failed\"} %llu\n",
          (unsigned long long)st.writes_ok, (unsigned long long)st.writes_failed);
  fprintf(f, "# HELP edgenode_fleet_write_retries_total Write attempts repeated (conflicts, elections).\n"
             "# TYPE edgenode_fleet_write_retries_total counter\nedgenode_fleet_write_retries_total %llu\n",
          (unsigned long long)st.write_retries);
  fprintf(f, "# HELP edgenode_fleet_chunked_writes_total Writes whose value went in chunks.\n"
             "# TYPE edgenode_fleet_chunked_writes_total counter\nedgenode_fleet_chunked_writes_total %llu\n"
             "# HELP edgenode_fleet_damaged_total Records skipped: their chunks could not be read back.\n"
             "# TYPE edgenode_fleet_damaged_total counter\nedgenode_fleet_damaged_total %llu\n",
          (unsigned long long)st.chunked_writes, (unsigned long long)st.damaged);
}

/* ---- start and stop ---- */

static char *default_name(void) {
  char host[256];
  if (gethostname(host, sizeof host) != 0) return xstrdup("node");
  host[sizeof host - 1] = '\0';
  host[strcspn(host, ".")] = '\0';
  for (char *c = host; *c; c++)
    if (!fleet_key_valid((char[]){*c, 0})) *c = '-';
  return xstrdup(host[0] ? host : "node");
}

/* The tenant's facets are another node's now: what the workers hold of
 * them (connections, and isolates whose memory came from them) goes. */
static void on_facet_lost(void *arg, const char *tenant, const char *why) {
  struct node_fleet *nf = arg;
  json_t *details = json_pack("{s:s}", "why", why);
  node_event_new(nf->n, "facets_lost", tenant, details);
  node_procs_broadcast_changed(nf->n, tenant);
}

void node_fleet_drain_facets(node *n) {
  struct node_fleet *nf = n->fleet;
  if (nf != NULL && nf->link != NULL) fleet_facet_mark_draining(nf->link);
}

/* A drained node's tenants can be taken over at once, not a lease later. */
void node_fleet_release_facets(node *n) {
  struct node_fleet *nf = n->fleet;
  if (nf == NULL || nf->link == NULL) return;
  int released = fleet_facet_release_all(nf->link);
  if (released > 0) log_write(LOG_INFO, NULL, NULL, NULL, "facets: gave up %d tenants' leases", released);
}

int node_fleet_start(node *n, char **err) {
  if (n->cfg.fleet == NULL) return 0;
  struct node_fleet *nf = xcalloc(1, sizeof *nf);
  nf->n = n;
  nf->name = n->cfg.node_name ? xstrdup(n->cfg.node_name) : default_name();
  nf->applied = json_object();
  nf->members = json_object();
  char path[4096];
  nf->was_synced_before = access(marker_path(n, path, sizeof path), F_OK) == 0;
  fleet_options o = {.servers = n->cfg.fleet,
                     .node_name = nf->name,
                     .creds_file = n->cfg.fleet_creds,
                     .tls = n->cfg.fleet_tls,
                     .ca_file = n->cfg.fleet_ca,
                     .heartbeat_ms = HEARTBEAT_MS,
                     .member_ttl_ms = MEMBER_TTL_MS,
                     .lease_ttl_ms = n->cfg.facet_lease_ms,
                     .facet_publish_ms = n->cfg.facet_publish_ms,
                     .snapshot_every = n->cfg.facet_snapshot_every};
  fleet_callbacks cb = {.change = on_change, .synced = on_synced, .state = on_state,
                        .damaged = on_damaged, .facet_lost = on_facet_lost,
                        .link_error = on_link_error, .arg = nf};
  char why[256];
  int rc = fleet_open(&nf->link, n->loop, &o, &cb, why, sizeof why);
  if (rc != 0) {
    *err = xasprintf("fleet: %s", why);
    json_decref(nf->applied);
    json_decref(nf->members);
    free(nf->name);
    free(nf);
    return rc;
  }
  n->fleet = nf;
  if ((rc = node_replica_start(n, nf->link, err)) != 0) {
    char *why_not = *err;
    *err = xasprintf("fleet: %s", why_not);
    free(why_not);
    return rc;
  }
  if (uv_timer_init(n->loop, &nf->heartbeat) != 0) abort();
  nf->heartbeat.data = n;
  nf->heartbeat_open = 1;
  uv_timer_start(&nf->heartbeat, on_heartbeat, 0, HEARTBEAT_MS);
  char extra[512];
  snprintf(extra, sizeof extra, "{\"node_name\":\"%s\",\"servers\":\"%s\"}", nf->name, n->cfg.fleet);
  log_write(LOG_INFO, NULL, NULL, extra, "joining the fleet");
  return 0;
}

static void on_heartbeat_closed(uv_handle_t *h) { (void)h; }

void node_fleet_stop(node *n) {
  struct node_fleet *nf = n->fleet;
  if (nf == NULL) return;
  if (nf->heartbeat_open) {
    on_heartbeat(&nf->heartbeat); /* the last one says "drained" */
    uv_close((uv_handle_t *)&nf->heartbeat, on_heartbeat_closed);
  }
  nf->heartbeat_open = 0;
  while (nf->waiters) {
    waiter *w = nf->waiters;
    nf->waiters = w->next;
    json_t *body = json_pack("{s:s}", "error", "the node is shutting down");
    answer(w, 503, body);
    json_decref(body);
  }
  node_forward_stop(n);
  node_replica_stop(n);
  /* Pending writes are answered by the fleet (closing) before it goes. */
  fleet_close(nf->link);
  nf->link = NULL;
}

void node_fleet_free(node *n) {
  struct node_fleet *nf = n->fleet;
  if (nf == NULL) return;
  json_decref(nf->applied);
  json_decref(nf->members);
  free(nf->name);
  free(nf);
  n->fleet = NULL;
  node_forward_free(n);
}
