#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "worker.h"

tenant *tenant_find(worker *w, const char *name, size_t len) {
  for (tenant *t = w->tenants; t; t = t->next)
    if (strlen(t->name) == len && memcmp(t->name, name, len) == 0) return t;
  return NULL;
}

static void tenant_remove(worker *w, tenant *t) {
  for (tenant **p = &w->tenants; *p; p = &(*p)->next) {
    if (*p == t) {
      *p = t->next;
      break;
    }
  }
  json_decref(t->spec);
  free(t->load_error);
  free(t->cordon_error);
  free(t->cordon_socket);
  free(t->name);
  free(t);
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

/* ---- specs ---- */

int spec_modules(json_t *spec, iso_module **out, const char **main_module, const char **why) {
  json_t *modules = json_object_get(spec, "modules");
  *main_module = json_string_value(json_object_get(spec, "main_module"));
  if (!json_is_object(modules) || *main_module == NULL) {
    *why = "spec has no modules or main_module";
    return -1;
  }
  size_t n = json_object_size(modules);
  iso_module *mods = xcalloc(n, sizeof *mods);
  size_t i = 0;
  const char *key;
  json_t *value;
  json_object_foreach(modules, key, value) {
    if (!json_is_string(value)) {
      free(mods);
      *why = "module source is not a string";
      return -1;
    }
    mods[i].name = key;
    mods[i].source = json_string_value(value);
    mods[i].source_len = json_string_length(value);
    i++;
  }
  *out = mods;
  return (int)n;
}

void spec_limits(json_t *spec, iso_limits *out) {
  json_t *limits = json_object_get(spec, "limits");
  json_int_t cpu = json_integer_value(json_object_get(limits, "cpu_ms"));
  json_int_t mem = json_integer_value(json_object_get(limits, "memory_mb"));
  out->cpu_ms = cpu > 0 ? (uint32_t)cpu : 50;
  out->memory_mb = mem > 0 ? (uint32_t)mem : 128;
}

/* 0: the node's default size limit for a facet. */
uint64_t spec_facet_mb(json_t *spec) {
  json_int_t mb = json_integer_value(json_object_get(json_object_get(spec, "limits"), "facet_mb"));
  return mb > 0 ? (uint64_t)mb : 0;
}

uint64_t spec_wall_ms(json_t *spec) {
  json_int_t wall = json_integer_value(json_object_get(json_object_get(spec, "limits"), "wall_ms"));
  return wall > 0 ? (uint64_t)wall : 30000;
}

/* Plain-value bindings become env members; other kinds arrive with later features. */
char *spec_env_json(json_t *spec) {
  json_t *env = json_object();
  const char *name;
  json_t *binding;
  json_object_foreach(json_object_get(spec, "bindings"), name, binding) {
    const char *type = json_string_value(json_object_get(binding, "type"));
    json_t *value = json_object_get(binding, "value");
    if (type && value && (strcmp(type, "text") == 0 || strcmp(type, "json") == 0))
      json_object_set(env, name, value);
  }
  char *text = json_dumps(env, JSON_COMPACT);
  json_decref(env);
  if (text == NULL) abort();
  return text;
}

/* ---- loaded versions ---- */

static void loaded_log(void *data, uint64_t token, iso_log_level level, const char *msg,
                       size_t len) {
  loaded *l = data;
  inflight *f = id_map_get(&worker_self()->tokens, token);
  static const log_level map[] = {LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR};
  log_write_bytes(map[level & 3], l->tenant->name, f ? f->request_id : NULL,
                  "{\"source\":\"console\"}", msg, utf8_cut(msg, len, 3500));
}

/* A fired timer waiting for its isolate's turn. */
typedef struct timer_fire {
  sched_unit unit;
  loaded *owner;
  uint32_t id;
  uint64_t token;
} timer_fire;

/*
 * Timers of a request this process no longer tracks (failed at a limit, or
 * let go past twice its wall time) neither start nor fire: the isolate gives
 * code that outlived its request a whole CPU limit on every entry, so a
 * timer chain that survived its request's CPU limit would run for ever.
 * Token 0 is the load's (top-level code).
 */
static int request_gone(uint64_t token) {
  return token != 0 && id_map_get(&worker_self()->tokens, token) == NULL;
}

static void timer_fire_run(sched_unit *u) {
  timer_fire *tf = container_of(u, timer_fire, unit);
  loaded *l = tf->owner;
  uint32_t id = tf->id;
  uint64_t token = tf->token;
  free(tf);
  l->units--;
  if (request_gone(token)) return;
  worker_running_enter(worker_self(), l->tenant->name);
  iso_worker_fire_timer(l->iso, token, id);
  worker_running_leave(worker_self());
  tenant_collect_retired(worker_self());
}

static void timer_fired(void *owner, uint64_t token, uint32_t id) {
  loaded *l = owner;
  timer_fire *tf = xmalloc(sizeof *tf);
  tf->unit.run = timer_fire_run;
  tf->owner = l;
  tf->id = id;
  tf->token = token;
  l->units++;
  sched_submit(&worker_self()->sched, &l->queue, &tf->unit);
}

/* Units dropped with their isolate: timers vanish, requests get an error. */
static void unit_dropped(sched_unit *u) {
  if (u->run == timer_fire_run) {
    timer_fire *tf = container_of(u, timer_fire, unit);
    tf->owner->units--;
    free(tf);
    return;
  }
  if (stream_owns_unit(u)) {
    stream_unit_dropped(u);
    return;
  }
  inflight *f = container_of(u, inflight, unit);
  worker *w = worker_self();
  f->loaded->requests--;
  ingress_fail(w, f, 503, "worker discarded before the request ran", NULL);
  inflight_finish(w, f);
}

static int loaded_timer_start(void *data, uint64_t token, uint32_t timer_id, double delay_ms) {
  loaded *l = data;
  if (request_gone(token)) return -1;
  return vtimer_start(&l->timers, token, timer_id, delay_ms);
}

static void loaded_timer_cancel(void *data, uint32_t timer_id) {
  loaded *l = data;
  vtimer_cancel(&l->timers, timer_id);
}

static void loaded_respond(void *data, uint64_t token, const iso_response *res,
                           const iso_error *err);
static void loaded_done(void *data, uint64_t token);

static iso_host loaded_host_template = {
    .log = loaded_log,
    .timer_start = loaded_timer_start,
    .timer_cancel = loaded_timer_cancel,
    .respond = loaded_respond,
    .done = loaded_done,
};

/* *transient: the failure was a limit hit (CPU or heap), which another
 * attempt may not repeat, rather than something wrong with the code. */
static loaded *loaded_new(tenant *t, char **error, int *transient) {
  iso_module *mods = NULL;
  const char *main_module = NULL;
  const char *why = NULL;
  int n = spec_modules(t->spec, &mods, &main_module, &why);
  if (n < 0) {
    *error = xstrdup(why);
    return NULL;
  }
  loaded *l = xcalloc(1, sizeof *l);
  l->tenant = t;
  vtimer_set_init(&l->timers, l, timer_fired);
  t->refs++;
  l->spec = json_incref(t->spec);
  l->version = json_integer_value(json_object_get(t->spec, "version"));
  spec_limits(t->spec, &l->limits);
  l->facet_limit_mb = spec_facet_mb(t->spec);
  iso_host host = loaded_host_template;
  host.data = l;
  char *env = spec_env_json(t->spec);
  char *caps = bindings_capabilities_json(t->spec);
  iso_worker_options options = {
      .host = &host,
      .calls = bindings_host_calls(),
      .limits = l->limits,
      .modules = mods,
      .n_modules = (size_t)n,
      .main_module = main_module,
      .env_json = env,
      .bindings_json = caps,
      .stream = stream_response_host(),
  };
  iso_error err = {0};
  worker_running_enter(worker_self(), t->name); /* the modules' top-level code runs */
  l->iso = iso_worker_create(&options, &err);
  worker_running_leave(worker_self());
  free(env);
  free(caps);
  free(mods);
  if (l->iso == NULL) {
    t->stats.cpu_ns += err.cpu_ns;
    t->stats.dirty = 1;
    *transient = err.kind == ISO_ERR_CPU || err.kind == ISO_ERR_MEMORY;
    *error = xasprintf("%s", err.message ? err.message : "unknown error");
    log_write(LOG_ERROR, t->name, NULL, NULL, "worker failed to load: %s", *error);
    iso_error_clear(&err);
    json_decref(l->spec);
    t->refs--;
    free(l);
    return NULL;
  }
  return l;
}

void loaded_charge_outside(loaded *l) {
  if (l->tenant == NULL || l->iso == NULL) return;
  uint64_t cpu_ns, hits;
  iso_worker_outside_stats(l->iso, &cpu_ns, &hits);
  if (cpu_ns == l->outside_cpu_seen && hits == l->outside_hits_seen) return;
  l->tenant->stats.cpu_ns += cpu_ns - l->outside_cpu_seen;
  if (hits != l->outside_hits_seen) {
    /* No response carried these: this line is their only trace. */
    log_write(LOG_WARN, l->tenant->name, NULL, NULL,
              "exceeded CPU limit in code that ran after its response (ctx.waitUntil, a timer, "
              "a promise continuation): %" PRIu64 " time(s)",
              hits - l->outside_hits_seen);
    l->tenant->stats.cpu_limit_hits += hits - l->outside_hits_seen;
  }
  l->tenant->stats.dirty = 1;
  l->outside_cpu_seen = cpu_ns;
  l->outside_hits_seen = hits;
}

static void loaded_free(loaded *l) {
  loaded_charge_outside(l);
  l->tenant->refs--;
  loader_parent_free(worker_self(), l);
  worker_self()->loaded_count--;
  sched_queue_clear(&worker_self()->sched, &l->queue, unit_dropped);
  vtimer_set_clear(&l->timers);
  iso_worker_free(l->iso);
  json_decref(l->spec);
  free(l);
}

static void loaded_retire(worker *w, loaded *l) {
  if (l == NULL) return;
  l->retired = 1;
  l->next_retired = w->retired;
  w->retired = l;
}

/* A tenant that moved out of this process closes its facet once nothing of
 * it runs here: its dedicated process writes the same file from now on. */
static void tenant_moved_out(worker *w, tenant *t) {
  if (t->placement != TENANT_SHARED && t->refs == 0) facet_link_changed(w, t->name);
}

void tenant_collect_retired(worker *w) {
  for (loaded **p = &w->retired; *p;) {
    loaded *l = *p;
    if (l->requests == 0 && l->units == 0) {
      tenant *t = l->tenant;
      *p = l->next_retired;
      loaded_free(l);
      tenant_moved_out(w, t);
    } else {
      p = &l->next_retired;
    }
  }
}

size_t tenant_pending_work(worker *w) {
  size_t n = 0;
  for (tenant *t = w->tenants; t; t = t->next)
    if (t->current) n += t->current->requests;
  for (loaded *l = w->retired; l; l = l->next_retired) n += l->requests;
  return n;
}

static void loaded_respond(void *data, uint64_t token, const iso_response *res,
                           const iso_error *err) {
  (void)data;
  worker *w = worker_self();
  inflight *f = id_map_get(&w->tokens, token);
  if (f == NULL || f->req == NULL) return;
  if (res) {
    http_header *hs = xcalloc(res->n_headers ? res->n_headers : 1, sizeof *hs);
    size_t n = 0;
    /* http_respond drops framing headers (Content-Length, Connection, ...) itself. */
    for (size_t i = 0; i < res->n_headers; i++) {
      const iso_header *h = &res->headers[i];
      hs[n].name = xstrndup(h->name, h->name_len);
      hs[n].value = xstrndup(h->value, h->value_len);
      n++;
    }
    http_request *req = f->req;
    f->req = NULL;
    f->status = res->status;
    http_respond(req, res->status, hs, n, res->body, res->body_len);
    for (size_t i = 0; i < n; i++) {
      free(hs[i].name);
      free(hs[i].value);
    }
    free(hs);
    return;
  }
  loaded *l = f->loaded;
  switch (err ? err->kind : ISO_ERR_INTERNAL) {
    case ISO_ERR_CPU: {
      char extra[64];
      snprintf(extra, sizeof extra, "{\"limit_ms\":%u}", l->limits.cpu_ms);
      log_write(LOG_WARN, f->tenant->name, f->req->id, NULL, "exceeded CPU limit");
      f->tenant->stats.cpu_limit_hits++;
      ingress_fail(w, f, 503, "exceeded CPU limit", extra);
      break;
    }
    case ISO_ERR_CANCELLED:
      /* Not this request's hit: the one that hit the limit is counted. */
      log_write(LOG_WARN, f->tenant->name, f->req->id, NULL, "%s", err->message);
      ingress_fail(w, f, 503, err->message, NULL);
      break;
    case ISO_ERR_MEMORY: {
      char extra[64];
      snprintf(extra, sizeof extra, "{\"limit_mb\":%u}", l->limits.memory_mb);
      log_write(LOG_WARN, f->tenant->name, f->req->id, NULL, "exceeded memory limit");
      f->tenant->stats.memory_limit_hits++;
      ingress_fail(w, f, 503, "exceeded memory limit", extra);
      break;
    }
    case ISO_ERR_BAD_RETURN:
      log_write(LOG_ERROR, f->tenant->name, f->req->id, NULL, "%s", err->message);
      ingress_fail(w, f, 500, err->message, NULL);
      break;
    default: {
      f->tenant->stats.uncaught_errors++;
      json_t *extra = json_pack("{s:s}", "stack", err && err->stack ? err->stack : "");
      char *extra_text = json_dumps(extra, JSON_COMPACT);
      json_decref(extra);
      log_write(LOG_ERROR, f->tenant->name, f->req->id, extra_text, "uncaught exception: %s",
                err && err->message ? err->message : "unknown");
      free(extra_text);
      ingress_fail(w, f, 500, "uncaught exception in worker", NULL);
      break;
    }
  }
}

void loaded_request_over(worker *w, inflight *f) {
  loaded *l = f->loaded;
  uint64_t token = f->token;
  f->tenant->stats.cpu_ns += iso_worker_request_cpu_ns(l->iso, token);
  /* A limit hit after the response ends the request too: counted now. */
  loaded_charge_outside(l);
  if (f->req) ingress_fail(w, f, 500, "worker finished without a response", NULL);
  if (l->requests > 0) l->requests--;
  facet_link_request_done(w, token);
  egress_link_request_done(w, token);
  loader_request_done(w, l, token);
  inflight_finish(w, f);
}

static void loaded_done(void *data, uint64_t token) {
  (void)data;
  worker *w = worker_self();
  inflight *f = id_map_get(&w->tokens, token);
  if (f != NULL) loaded_request_over(w, f);
}

/* ---- eviction ---- */

static int loaded_idle(const loaded *l) { return l->requests == 0 && l->units == 0; }

/*
 * Evicts up to `max` idle isolates, least recently used first, and returns
 * how many went. The next request for an evicted tenant cold-starts it.
 */
size_t evict_lru(worker *w, size_t max) {
  size_t evicted = 0;
  while (evicted < max) {
    tenant *oldest = NULL;
    for (tenant *t = w->tenants; t; t = t->next)
      if (t->current && loaded_idle(t->current) &&
          (oldest == NULL || t->current->last_used_ns < oldest->current->last_used_ns))
        oldest = t;
    /* Cached dynamic workers (env.LOADER.get) take their turn by age too. */
    if (loader_evict_before(w, oldest ? oldest->current->last_used_ns : UINT64_MAX)) {
      w->evictions++;
      evicted++;
      continue;
    }
    if (oldest == NULL) break;
    loaded *l = oldest->current;
    oldest->current = NULL;
    oldest->stats.heap_used = 0;
    oldest->stats.dirty = 1;
    loaded_free(l);
    w->evictions++;
    evicted++;
  }
  return evicted;
}

int loaded_compact_idle(worker *w, loaded *l, uint64_t now, int64_t *budget_ns) {
  if (*budget_ns <= 0) return 0;
  if (l->iso == NULL || !loaded_idle(l) || l->compacted_ns == l->last_used_ns ||
      l->last_used_ns > now)
    return 1;
  /* Past the idle timeout it is about to be evicted (loaded workers by a
   * timer of their own): a collection then would be wasted. */
  uint64_t idle_ns = now - l->last_used_ns;
  if (idle_ns < w->config.compact_idle_s * 1000000000u ||
      idle_ns >= w->config.idle_timeout_s * 1000000000u)
    return 1;
  uint64_t t0 = time_mono_ns();
  iso_worker_compact(l->iso);
  l->compacted_ns = l->last_used_ns;
  w->compactions++;
  *budget_ns -= (int64_t)(time_mono_ns() - t0);
  return *budget_ns > 0;
}

/* Idle past the timeout, or over the heap budget: evict, oldest first.
 * Heap pages freed isolates left (kept for the next one made) go back to
 * the system once no new isolate took them for a while. */
static void evict_sweep(uv_timer_t *timer) {
  worker *w = container_of(timer, worker, evict_timer);
  iso_page_trim(PAGES_KEEP_MS);
  uint64_t now = time_mono_ns();
  uint64_t idle_ns = w->config.idle_timeout_s * 1000000000u;
  size_t heap = 0;
  for (tenant *t = w->tenants; t; t = t->next) {
    loaded *l = t->current;
    if (l == NULL) continue;
    if (loaded_idle(l) && now - l->last_used_ns > idle_ns) {
      t->current = NULL;
      t->stats.heap_used = 0;
      t->stats.dirty = 1;
      loaded_free(l);
      w->evictions++;
      continue;
    }
    heap += t->stats.heap_used;
  }
  uint64_t budget = w->config.isolate_memory_mb << 20;
  while (heap > budget) {
    tenant *before = NULL;
    for (tenant *t = w->tenants; t; t = t->next)
      if (t->current && loaded_idle(t->current) &&
          (before == NULL || t->current->last_used_ns < before->current->last_used_ns))
        before = t;
    if (before == NULL) break;
    size_t freed = before->stats.heap_used;
    if (evict_lru(w, 1) == 0) break;
    heap -= freed < heap ? freed : heap;
  }
  int64_t compact_ns = COMPACT_BUDGET_NS;
  for (tenant *t = w->tenants; t && compact_ns > 0; t = t->next)
    if (t->current) loaded_compact_idle(w, t->current, now, &compact_ns);
  loader_compact_idle(w, now, &compact_ns);
}

void evict_start(worker *w) {
  uv_timer_init(w->loop, &w->evict_timer);
  uv_timer_start(&w->evict_timer, evict_sweep, 1000, 1000);
  uv_unref((uv_handle_t *)&w->evict_timer);
}

/* ---- routing requests to versions ---- */

void tenant_set_placement(worker *w, tenant *t, tenant_placement placement) {
  tenant_placement was = t->placement;
  t->placement = placement;
  if (was != TENANT_SHARED || placement == TENANT_SHARED) return;
  char extra[64];
  snprintf(extra, sizeof extra, "{\"placement\":\"%s\"}",
           placement == TENANT_CORDONED ? "cordoned" : "suspended");
  log_write(LOG_INFO, t->name, NULL, extra, "tenant moved out of this process: %zu requests finish here",
            t->current ? t->current->requests : 0);
  loaded_retire(w, t->current);
  t->current = NULL;
  t->stats.heap_used = 0;
  t->stats.dirty = 1; /* the next report says it is no longer loaded here */
  tenant_collect_retired(w);
  tenant_moved_out(w, t);
}

static void tenant_run(worker *w, tenant *t, inflight *f) {
  if (t->placement != TENANT_SHARED && w->config.dedicated == NULL) {
    /* Moved out while the request waited for the spec. */
    if (t->placement == TENANT_CORDONED) {
      inflight_hand_off(w, f);
    } else {
      http_request *req = f->req;
      f->req = NULL;
      f->status = 503;
      if (req) ingress_respond_suspended(t, req);
      inflight_finish(w, f);
    }
    return;
  }
  if (t->current && iso_worker_broken(t->current->iso)) {
    loaded_retire(w, t->current);
    t->current = NULL;
  }
  if (t->current == NULL && t->load_error == NULL) {
    char *error = NULL;
    if (w->loaded_count >= WORKER_MAX_ISOLATES && evict_lru(w, 1) == 0) {
      ingress_fail(w, f, 503, "too many isolates in this process; try again", NULL);
      inflight_finish(w, f);
      return;
    }
    int transient = 0;
    t->current = loaded_new(t, &error, &transient);
    if (t->current == NULL && transient) {
      /* Not remembered: the next request tries a fresh cold start. */
      char *msg = xasprintf("worker failed to load: %s", error);
      ingress_fail(w, f, 500, msg, NULL);
      free(msg);
      free(error);
      inflight_finish(w, f);
      return;
    }
    if (t->current == NULL) {
      t->load_error = error;
    } else {
      t->stats.cold_starts++;
      w->loaded_count++;
    }
  }
  if (t->current) t->current->last_used_ns = time_mono_ns();
  if (t->current == NULL) {
    char *msg = xasprintf("worker failed to load: %s", t->load_error);
    ingress_fail(w, f, 500, msg, NULL);
    free(msg);
    inflight_finish(w, f);
    return;
  }
  f->loaded = t->current;
  t->current->requests++;
  f->unit.run = ingress_run;
  sched_submit(&w->sched, &t->current->queue, &f->unit);
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
  inflight *f = t->waiting;
  t->waiting = NULL;
  t->waiting_tail = &t->waiting;
  while (f) {
    inflight *next = f->next;
    ingress_fail(w, f, status, message, extra);
    inflight_finish(w, f);
    f = next;
  }
}

void tenant_submit(worker *w, inflight *f) {
  tenant *t = f->tenant;
  if (t->spec) {
    tenant_run(w, t, f);
    return;
  }
  f->next = NULL;
  *t->waiting_tail = f;
  t->waiting_tail = &f->next;
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
    if (status == 404 && t->refs == 0 && t->current == NULL && t->waiting == NULL &&
        t->placement == TENANT_SHARED && t->handoffs == 0 && t->handoff_waiting == NULL)
      tenant_remove(w, t);
    return;
  }
  t->spec = body;
  inflight *f = t->waiting;
  t->waiting = NULL;
  t->waiting_tail = &t->waiting;
  while (f) {
    inflight *next = f->next;
    tenant_run(w, t, f);
    f = next;
  }
}

void tenant_changed(worker *w, const char *name) {
  facet_link_changed(w, name);
  tenant *t = tenant_find(w, name, strlen(name));
  if (t == NULL) return;
  json_decref(t->spec);
  t->spec = NULL;
  free(t->load_error);
  t->load_error = NULL;
  loaded_retire(w, t->current);
  t->current = NULL;
  tenant_collect_retired(w);
}

void tenant_free_all(worker *w) {
  /* Retired versions first: freeing one updates its tenant. */
  while (w->retired) {
    loaded *l = w->retired;
    w->retired = l->next_retired;
    loaded_free(l);
  }
  while (w->tenants) {
    tenant *t = w->tenants;
    w->tenants = t->next;
    fail_waiting(w, t, 503, "worker process shutting down", NULL);
    if (t->current) loaded_free(t->current);
    json_decref(t->spec);
    free(t->load_error);
    free(t->cordon_error);
  free(t->cordon_socket);
    free(t->name);
    free(t);
  }
}
