/*
 * Tenants: what this process knows of each deployed worker. This file owns
 * the registry of tenants (by name), the fetch of a tenant's spec from the
 * supervisor (requests wait for it), the tenant's versions (each a sandbox
 * of kind SANDBOX_VERSION: made on the first request, retired when the
 * spec changes or the isolate broke, freed once idle), and the tenant's
 * placement (PROTO_CORDON: here, in its dedicated process, or nowhere).
 * Eviction of idle versions is evict.c's; requests are sandbox.c's.
 */
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "sandbox.h"

tenant *tenant_find(worker *w, const char *name, size_t len) {
  for (tenant *t = w->tenants; t; t = t->next)
    if (strlen(t->name) == len && memcmp(t->name, name, len) == 0) return t;
  return NULL;
}

static void tenant_free(tenant *t) {
  json_decref(t->spec);
  free(t->load_error);
  free(t->cordon_error);
  free(t->name);
  free(t);
}

static void tenant_remove(worker *w, tenant *t) {
  for (tenant **p = &w->tenants; *p; p = &(*p)->next) {
    if (*p == t) {
      *p = t->next;
      break;
    }
  }
  tenant_free(t);
}

tenant *tenant_get_or_add(worker *w, const char *name, size_t len) {
  tenant *t = tenant_find(w, name, len);
  if (t) return t;
  t = xcalloc(1, sizeof *t);
  t->name = xstrndup(name, len);
  t->waiting_tail = &t->waiting;
  t->next = w->tenants;
  w->tenants = t;
  return t;
}

/* ---- versions ---- */

static void version_request_over(sandbox *sb, uint64_t token) {
  facet_link_request_done(sb->w, token);
  egress_link_request_done(sb->w, token);
  loader_request_done(sb, token);
}

static void collect_retired(worker *w);

static void version_settled(sandbox *sb) { collect_retired(sb->w); }

/* Units of the runtime's streams wait on a version's queue too. */
static void version_unit_dropped(sched_unit *u) {
  if (stream_owns_unit(u)) stream_unit_dropped(u);
  else sandbox_unit_dropped(u);
}

static void version_disposing(sandbox *sb) {
  /* Its dynamic workers go first: their answers wait on its queue. */
  loader_parent_free(sb);
  sched_queue_clear(&sb->w->sched, &sb->queue, version_unit_dropped);
}

static void version_freed(sandbox *sb) {
  sb->tenant->refs--;
  free(sb);
}

static const sandbox_ops version_ops = {
    .request_over = version_request_over,
    .settled = version_settled,
    .disposing = version_disposing,
    .freed = version_freed,
};

/* Returns 0, or -1 with *error set; *transient: the failure was a limit hit
 * (CPU or heap) or no room, which another attempt may not repeat, rather
 * than something wrong with the code; *no_room: the process is at its
 * maximum of isolates and none is idle. */
static sandbox *version_new(worker *w, tenant *t, json_t *spec, char **error, int *transient,
                            int *no_room) {
  iso_module *mods = NULL;
  const char *main_module = NULL;
  const char *why = NULL;
  int n = spec_modules(spec, &mods, &main_module, &why);
  if (n < 0) {
    *error = xstrdup(why);
    return NULL;
  }
  sandbox *sb = xcalloc(1, sizeof *sb);
  sandbox_init(sb, w, SANDBOX_VERSION, &version_ops, t, spec, NULL);
  sb->tell_version = json_object_get(t->spec, "traffic") != NULL;
  t->refs++;
  char *env = spec_env_json(spec);
  char *caps = spec_capabilities_json(spec);
  iso_worker_options options = {
      .calls = bindings_host_calls(),
      .modules = mods,
      .n_modules = (size_t)n,
      .main_module = main_module,
      .env_json = env,
      .bindings_json = caps,
      .stream = stream_response_host(),
  };
  iso_error err = {0};
  int rc = sandbox_load(sb, &options, &err);
  free(env);
  free(caps);
  free(mods);
  if (rc == 0) return sb;
  *no_room = rc == -2;
  *transient = rc == -2 || err.kind == ISO_ERR_CPU || err.kind == ISO_ERR_MEMORY;
  *error = xasprintf("%s", err.message ? err.message : "unknown error");
  if (rc != -2) log_write(LOG_ERROR, t->name, NULL, NULL, "worker failed to load: %s", *error);
  iso_error_clear(&err);
  sandbox_dispose(sb);
  return NULL;
}

static void version_retire(worker *w, sandbox *sb) {
  if (sb == NULL) return;
  sandbox_retire(sb);
  sb->next_retired = w->retired;
  w->retired = sb;
}

/* Retires the versions of a traffic split and forgets their load errors. */
static void split_retire(worker *w, tenant *t) {
  for (int i = 0; i < PROTO_TRAFFIC_MAX_VERSIONS; i++) {
    version_retire(w, t->split[i]);
    t->split[i] = NULL;
    free(t->split_error[i]);
    t->split_error[i] = NULL;
  }
}

/* A tenant that moved out of this process closes its facet once nothing of
 * it runs here: its dedicated process writes the same file from now on. */
static void tenant_moved_out(worker *w, tenant *t) {
  if (t->placement != TENANT_SHARED && t->refs == 0) facet_link_changed(w, t->name);
}

/* Frees retired versions that have nothing left to do. */
static void collect_retired(worker *w) {
  for (sandbox **p = &w->retired; *p;) {
    sandbox *sb = *p;
    if (sandbox_idle(sb)) {
      tenant *t = sb->tenant;
      *p = sb->next_retired;
      sandbox_dispose(sb);
      tenant_moved_out(w, t);
    } else {
      p = &sb->next_retired;
    }
  }
}

/* ---- placement ---- */

void tenant_set_placement(worker *w, tenant *t, tenant_placement placement) {
  tenant_placement was = t->placement;
  t->placement = placement;
  if (was != TENANT_SHARED || placement == TENANT_SHARED) return;
  char extra[64];
  snprintf(extra, sizeof extra, "{\"placement\":\"%s\"}",
           placement == TENANT_CORDONED ? "cordoned" : "suspended");
  log_write(LOG_INFO, t->name, NULL, extra, "tenant moved out of this process: %zu requests finish here",
            t->current ? t->current->requests : 0);
  version_retire(w, t->current);
  t->current = NULL;
  split_retire(w, t);
  t->stats.heap_used = 0;
  t->stats.dirty = 1; /* the next report says it is no longer loaded here */
  collect_retired(w);
  tenant_moved_out(w, t);
}

/* ---- requests to versions ---- */

static void fail_load(worker *w, sandbox_request *r, int status, const char *error) {
  char *msg = xasprintf("worker failed to load: %s", error);
  sandbox_request_fail(r, status, msg, NULL);
  free(msg);
  sandbox_request_finish(w, r);
}

/* FNV-1a: the same key picks the same version in every worker process. */
static uint64_t key_hash(const char *s) {
  uint64_t h = 14695981039346656037u;
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211u;
  return h;
}

/* Under a traffic split, the place in spec "traffic" of the version that
 * the request's key picks; -1 for the current version (also when there is
 * no split). The key is the X-Edgenode-Traffic-Key header, else the
 * client's address. */
static int split_pick(const tenant *t, const sandbox_request *r) {
  json_t *split = json_object_get(t->spec, "traffic");
  if (!json_is_array(split) || r->req == NULL) return -1;
  const char *key = http_request_header(r->req, "x-edgenode-traffic-key");
  char addr[64] = "";
  if (key == NULL && http_request_peer(r->req, addr, sizeof addr) == 0) key = addr;
  json_int_t bucket = (json_int_t)(key_hash(key ? key : "") % 100), below = 0;
  size_t i;
  json_t *entry;
  json_array_foreach(split, i, entry) {
    below += json_integer_value(json_object_get(entry, "percent"));
    if (bucket < below)
      return json_object_get(entry, "spec") && i < PROTO_TRAFFIC_MAX_VERSIONS ? (int)i : -1;
  }
  return -1;
}

/* ---- Requests waiting for a tenant being handed over ---- */

#define HOLD_SWEEP_MS 100
#define HOLD_MAX_MS 15000

typedef struct facet_hold {
  struct facet_hold *next;
  sandbox_request *r;
  uint64_t until_ns;
} facet_hold;

static void on_hold_sweep(uv_timer_t *timer) {
  worker *w = timer->data;
  facet_hold *list = w->facet_held;
  w->facet_held = NULL;
  uint64_t now = time_mono_ns();
  while (list) {
    facet_hold *h = list;
    list = h->next;
    sandbox_request *r = h->r;
    if (now >= h->until_ns) {
      sandbox_request_fail_retry(r, "the tenant's facets are being handed over to another node; "
                                    "try again");
      sandbox_request_finish(w, r);
    } else {
      w->facet_holding_until = h->until_ns;
      tenant_submit(w, r);
    }
    free(h);
  }
  w->facet_holding_until = 0;
  if (w->facet_held == NULL) uv_timer_stop(timer);
}

void tenant_hold(worker *w, sandbox_request *r) {
  if (!w->facet_timer_open) {
    uv_timer_init(w->loop, &w->facet_timer);
    w->facet_timer.data = w;
    w->facet_timer_open = 1;
  }
  facet_hold *h = xcalloc(1, sizeof *h);
  h->r = r;
  /* Held again by the sweep: it keeps its first deadline. */
  h->until_ns = w->facet_holding_until ? w->facet_holding_until
                                       : time_mono_ns() + (uint64_t)HOLD_MAX_MS * 1000000u;
  h->next = w->facet_held;
  w->facet_held = h;
  if (!uv_is_active((uv_handle_t *)&w->facet_timer))
    uv_timer_start(&w->facet_timer, on_hold_sweep, HOLD_SWEEP_MS, HOLD_SWEEP_MS);
}

void tenant_hold_stop(worker *w) {
  while (w->facet_held) {
    facet_hold *h = w->facet_held;
    w->facet_held = h->next;
    sandbox_request_fail(h->r, 503, "worker process shutting down", NULL);
    sandbox_request_finish(w, h->r);
    free(h);
  }
  if (w->facet_timer_open) uv_close((uv_handle_t *)&w->facet_timer, NULL);
  w->facet_timer_open = 0;
}

static void tenant_run(worker *w, tenant *t, sandbox_request *r) {
  if (t->placement != TENANT_SHARED && w->config.dedicated == NULL) {
    /* Moved out while the request waited for the spec. */
    if (t->placement == TENANT_CORDONED) {
      ingress_hand_off(w, r);
    } else {
      http_request *req = r->req;
      r->req = NULL;
      r->status = 503;
      if (req) ingress_respond_suspended(t, req);
      sandbox_request_finish(w, r);
    }
    return;
  }
  char text[512];
  switch (facet_link_place(w, t, r->req, text, sizeof text)) {
    case FACET_HERE: break;
    case FACET_FORWARD: handoff_forward(w, t, sandbox_request_hand_over(w, r), text); return;
    case FACET_WAIT: tenant_hold(w, r); return;
    case FACET_REFUSED:
      sandbox_request_fail_retry(r, text);
      sandbox_request_finish(w, r);
      return;
  }
  json_t *spec = t->spec;
  sandbox **slot = &t->current;
  char **load_error = &t->load_error;
  int at = split_pick(t, r);
  if (at >= 0) {
    spec = json_object_get(json_array_get(json_object_get(t->spec, "traffic"), (size_t)at), "spec");
    slot = &t->split[at];
    load_error = &t->split_error[at];
  }
  if (*slot && !sandbox_usable(*slot)) {
    version_retire(w, *slot);
    *slot = NULL;
  }
  if (*slot == NULL && *load_error == NULL) {
    char *error = NULL;
    int transient = 0, no_room = 0;
    *slot = version_new(w, t, spec, &error, &transient, &no_room);
    if (no_room) {
      free(error);
      sandbox_request_fail(r, 503, "too many isolates in this process; try again", NULL);
      sandbox_request_finish(w, r);
      return;
    }
    if (*slot == NULL && transient) {
      /* Not remembered: the next request tries a fresh cold start. */
      fail_load(w, r, 500, error);
      free(error);
      return;
    }
    if (*slot == NULL) *load_error = error;
    else t->stats.cold_starts++;
  }
  if (*slot == NULL) {
    fail_load(w, r, 500, *load_error);
    return;
  }
  (*slot)->last_used_ns = time_mono_ns();
  sandbox_request_submit(*slot, r);
}

static void send_get(worker *w, tenant *t) {
  json_t *body = json_pack("{s:s}", "name", t->name);
  char *text = json_dumps(body, JSON_COMPACT);
  json_decref(body);
  t->fetch_id = proto_channel_request_id(&w->supervisor);
  t->fetching = 1;
  if (proto_channel_send(&w->supervisor, PROTO_WORKER_GET, t->fetch_id, text, strlen(text)) != 0)
    t->fetching = 0;
  free(text);
}

static void fail_waiting(worker *w, tenant *t, int status, const char *message, const char *extra) {
  sandbox_request *r = t->waiting;
  t->waiting = NULL;
  t->waiting_tail = &t->waiting;
  while (r) {
    sandbox_request *next = r->next;
    sandbox_request_fail(r, status, message, extra);
    sandbox_request_finish(w, r);
    r = next;
  }
}

void tenant_submit(worker *w, sandbox_request *r) {
  tenant *t = r->tenant;
  if (t->spec) {
    tenant_run(w, t, r);
    return;
  }
  r->next = NULL;
  *t->waiting_tail = r;
  t->waiting_tail = &r->next;
  if (!t->fetching) send_get(w, t);
  if (!t->fetching) fail_waiting(w, t, 503, "supervisor unreachable", NULL);
}

static tenant *tenant_by_fetch_id(worker *w, uint32_t id) {
  for (tenant *t = w->tenants; t; t = t->next)
    if (t->fetching && t->fetch_id == id) return t;
  return NULL;
}

void tenant_spec_arrived(worker *w, uint32_t id, const proto_frame *frame) {
  tenant *t = tenant_by_fetch_id(w, id);
  if (t == NULL) return;
  t->fetching = 0;
  json_t *body = json_loadb((const char *)frame->payload, frame->length, 0, NULL);
  if (frame->type != PROTO_WORKER_SPEC || !json_is_object(body)) {
    json_int_t status = json_integer_value(json_object_get(body, "status"));
    char *extra = NULL;
    if (status == 404) {
      json_t *e = json_pack("{s:s}", "worker", t->name);
      extra = json_dumps(e, JSON_COMPACT);
      json_decref(e);
    }
    fail_waiting(w, t, status == 404 ? 404 : 503,
                 status == 404 ? "unknown worker" : "worker spec unavailable", extra);
    free(extra);
    json_decref(body);
    /* Any Host name reaches this point: keep no record of names that are
     * not deployed, or clients could grow this process's memory at will. */
    if (status == 404 && t->refs == 0 && t->children == 0 && t->current == NULL &&
        t->waiting == NULL && t->placement == TENANT_SHARED && t->handoffs == 0 &&
        t->handoff_waiting == NULL)
      tenant_remove(w, t);
    return;
  }
  t->spec = body;
  sandbox_request *r = t->waiting;
  t->waiting = NULL;
  t->waiting_tail = &t->waiting;
  while (r) {
    sandbox_request *next = r->next;
    tenant_run(w, t, r);
    r = next;
  }
}

void tenant_changed(worker *w, const char *name) {
  facet_link_changed(w, name);
  tenant *t = tenant_find(w, name, strlen(name));
  if (t == NULL) return;
  t->facets_here = 0;
  json_decref(t->spec);
  t->spec = NULL;
  free(t->load_error);
  t->load_error = NULL;
  version_retire(w, t->current);
  t->current = NULL;
  split_retire(w, t);
  collect_retired(w);
}

void tenant_free_all(worker *w) {
  /* Retired versions first: freeing one updates its tenant. */
  while (w->retired) {
    sandbox *sb = w->retired;
    w->retired = sb->next_retired;
    sandbox_dispose(sb);
  }
  while (w->tenants) {
    tenant *t = w->tenants;
    w->tenants = t->next;
    fail_waiting(w, t, 503, "worker process shutting down", NULL);
    if (t->current) sandbox_dispose(t->current);
    for (int i = 0; i < PROTO_TRAFFIC_MAX_VERSIONS; i++) {
      if (t->split[i]) sandbox_dispose(t->split[i]);
      free(t->split_error[i]);
    }
    tenant_free(t);
  }
}
