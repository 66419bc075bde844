/*
 * The one host of an isolate (sandbox.h): a tenant's version, a dynamic
 * worker and a one-shot run alike. This file owns
 *   - a sandbox's isolate: its creation within the process's maximum of
 *     isolates, its limits, its timers, its host callbacks, its disposal;
 *   - every request through a sandbox, from the moment it is routed to its
 *     answer: made, queued, dispatched, answered (to the HTTP client, with
 *     the status a failure maps to, or to the sandbox's owner), held to its
 *     wall time, counted and freed here.
 *
 * Freeing is never done from inside the sandbox's JavaScript: a sandbox
 * whose JavaScript is on the stack (sandbox_enter) is left for later, and
 * released ones are freed by a one-shot idle handle from the loop.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base.h"
#include "sandbox.h"

#define WALL_SWEEP_MS 50

/* A timer that fired, waiting for the sandbox's turn. */
typedef struct timer_unit {
  sched_unit unit;
  sandbox *owner;
  uint32_t id;
  uint64_t token;
} timer_unit;

static void run_ingress(sched_unit *unit);
static void run_owned(sched_unit *unit);
static void wall_sweep(uv_timer_t *t);
static void request_over(sandbox_request *r);
static void detach(sandbox_request *r);

/* ---- entering and settling ---- */

void sandbox_enter(sandbox *sb) {
  sb->entered++;
  /* A dynamic worker's code is its parent tenant's: a crash while it runs
   * is blamed on that tenant (one-shot runs have none). */
  if (sb->tenant) worker_running_enter(sb->w, sb->tenant->name);
}

static void sandbox_settle(sandbox *sb) {
  if (sb->ops->settled) sb->ops->settled(sb);
}

void sandbox_ungate(worker *w, sandbox *sb) {
  (void)w;
  if (sb->gated > 0) sb->gated--;
  sandbox_settle(sb);
}

void sandbox_leave(sandbox *sb) {
  if (sb->tenant) worker_running_leave(sb->w);
  if (--sb->entered == 0) sandbox_settle(sb);
}

int sandbox_idle(const sandbox *sb) {
  if (sb->requests != 0 || sb->units != 0 || sb->entered != 0 || sb->gated != 0) return 0;
  /* A version's calls end with their requests (let go, their promises are
   * dropped); a child's may outlive them and still answer into it. */
  return sb->kind == SANDBOX_VERSION || sb->iso == NULL ||
         iso_worker_pending_calls(sb->iso) == 0;
}

int sandbox_usable(const sandbox *sb) {
  if (!sandbox_state_takes_requests(sb->state)) return 0;
  return sb->iso == NULL || !iso_worker_broken(sb->iso);
}

void sandbox_charge_outside(sandbox *sb) {
  tenant *t = sb->tenant;
  if (t == NULL || sb->iso == NULL) return;
  uint64_t cpu_ns, hits;
  iso_worker_outside_stats(sb->iso, &cpu_ns, &hits);
  if (cpu_ns == sb->outside_cpu_seen && hits == sb->outside_hits_seen) return;
  t->stats.cpu_ns += cpu_ns - sb->outside_cpu_seen;
  if (hits != sb->outside_hits_seen) {
    /* No response carried these: this line is their only trace. */
    log_write(LOG_WARN, t->name, NULL, NULL,
              "exceeded CPU limit in code that ran after its response (ctx.waitUntil, a timer, "
              "a promise continuation): %" PRIu64 " time(s)",
              hits - sb->outside_hits_seen);
    t->stats.cpu_limit_hits += hits - sb->outside_hits_seen;
  }
  t->stats.dirty = 1;
  sb->outside_cpu_seen = cpu_ns;
  sb->outside_hits_seen = hits;
}

static void measure(sandbox *sb) {
  if (sb->iso == NULL) return;
  iso_heap_stats hs;
  iso_worker_heap_stats(sb->iso, &hs);
  sb->heap_used = hs.used_bytes;
  sb->held_bytes = hs.used_bytes + hs.external_bytes;
}

/* ---- timers ---- */

static sandbox_request *request_live(worker *w, uint64_t token) {
  return id_map_get(&w->tokens, token);
}

/*
 * A version's timers of a request this process no longer tracks (failed at
 * a limit, or let go past twice its wall time) neither start nor fire: the
 * isolate gives code that outlived its request a whole CPU limit on every
 * entry, so a timer chain that survived its request's CPU limit would run
 * for ever. Token 0 is the load's (top-level code). A dynamic worker's go
 * with the worker instead.
 */
static int timer_orphaned(const sandbox *sb, uint64_t token) {
  return sb->kind == SANDBOX_VERSION && token != 0 && request_live(sb->w, token) == NULL;
}

static void timer_unit_run(sched_unit *u) {
  timer_unit *tu = container_of(u, timer_unit, unit);
  sandbox *sb = tu->owner;
  uint32_t id = tu->id;
  uint64_t token = tu->token;
  free(tu);
  sb->units--;
  if (!sandbox_state_runs(sb->state) || sb->iso == NULL || timer_orphaned(sb, token)) {
    sandbox_settle(sb);
    return;
  }
  sandbox_enter(sb);
  iso_worker_fire_timer(sb->iso, token, id);
  sandbox_leave(sb);
}

static void timer_fired(void *owner, uint64_t token, uint32_t id) {
  sandbox *sb = owner;
  timer_unit *tu = xmalloc(sizeof *tu);
  tu->unit.run = timer_unit_run;
  tu->owner = sb;
  tu->id = id;
  tu->token = token;
  sb->units++;
  sched_submit(&sb->w->sched, &sb->queue, &tu->unit);
}

/* ---- host callbacks ---- */

static void host_log(void *data, uint64_t token, iso_log_level level, const char *msg,
                     size_t len) {
  sandbox *sb = data;
  sandbox_request *r = token ? request_live(sb->w, token) : NULL;
  static const log_level map[] = {LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR};
  const char *request_id = r && r->request_id[0] ? r->request_id : NULL;
  log_write_bytes(map[level & 3], sb->log_tenant, request_id, sb->log_extra, msg,
                  utf8_cut(msg, len, 3500));
  if (tail_wanted(sb->w, tail_key(sb))) tail_log(sb, r, level, msg, len);
  if (sb->ops->log) sb->ops->log(sb, token, level, msg, len);
}

/* What its tail line says of a request that failed, and its exception. */
static void tail_failure(sandbox *sb, sandbox_request *r, const iso_error *err) {
  if (r->outcome == NULL) r->outcome = tail_outcome_of(err);
  int thrown = err->kind != ISO_ERR_CPU && err->kind != ISO_ERR_MEMORY &&
               err->kind != ISO_ERR_CANCELLED && err->kind != ISO_ERR_INTERNAL;
  if (thrown && tail_wanted(sb->w, tail_key(sb))) tail_exception(sb, r, err);
}

static int host_timer_start(void *data, uint64_t token, uint32_t timer_id, double delay_ms) {
  sandbox *sb = data;
  if (sb->state == SANDBOX_DYING || timer_orphaned(sb, token)) return -1;
  return vtimer_start(&sb->timers, token, timer_id, delay_ms);
}

static void host_timer_cancel(void *data, uint32_t timer_id) {
  sandbox *sb = data;
  vtimer_cancel(&sb->timers, timer_id);
}

static void answer_client(sandbox_request *r, const iso_response *res, const iso_error *err);

/* Terminated JavaScript: what its run wrote is not kept. */
static int terminated(const iso_error *err) {
  return err && (err->kind == ISO_ERR_CPU || err->kind == ISO_ERR_MEMORY ||
                 err->kind == ISO_ERR_CANCELLED);
}

static const char gate_message[] = "the worker's writes could not be stored";

static void host_respond(void *data, uint64_t token, const iso_response *res,
                         const iso_error *err) {
  sandbox *sb = data;
  sandbox_request *r = request_live(sb->w, token);
  if (r == NULL || r->sb != sb) return;
  /* The output gate: no answer leaves before the writes it may reflect
   * are durable. */
  iso_error gate_err = {.kind = ISO_ERR_INTERNAL};
  if (terminated(err)) {
    facet_link_drop(sb);
  } else if (sb->kind == SANDBOX_VERSION && res != NULL && err == NULL && gate_defer(sb, r, res)) {
    return; /* answered with the loop turn's commit (gate.c) */
  } else if (facet_link_gate(sb) < 0) {
    gate_err.message = xasprintf("%s: %s", gate_message, sb->gate_error);
    res = NULL;
    err = &gate_err;
  }
  if (err) tail_failure(sb, r, err);
  if (sb->kind != SANDBOX_VERSION && !r->responded) r->status = res ? res->status : 500;
  if (sb->kind == SANDBOX_VERSION && err == &gate_err) {
    if (r->req) {
      log_write(LOG_ERROR, r->tenant->name, r->req->id, NULL, "%s", gate_err.message);
      sandbox_request_fail(r, 500, gate_err.message, NULL);
    }
  } else if (sb->kind == SANDBOX_VERSION) {
    answer_client(r, res, err);
  } else if (!r->responded) {
    r->responded = 1;
    /* The isolate was terminated mid-flight: whatever state it holds is suspect. */
    if (terminated(err) && err->kind != ISO_ERR_CANCELLED)
      sb->state = sandbox_state_after(sb->state, SANDBOX_LIMIT_HIT);
    sb->ops->respond(sb, r->cookie, res, err, SANDBOX_FAIL_ISO);
  }
  free(gate_err.message);
}

/* The end of a synchronous run: its writes are committed (or, when it was
 * terminated, dropped) before the loop does anything else. */
static void host_yielded(void *data, int cut_short) {
  sandbox *sb = data;
  if (cut_short) facet_link_drop(sb);
  else if (sb->kind == SANDBOX_VERSION) gate_schedule(sb->w); /* with the turn's batch */
  else (void)facet_link_gate(sb);
}

static void host_done(void *data, uint64_t token) {
  sandbox *sb = data;
  sandbox_request *r = request_live(sb->w, token);
  if (r != NULL && r->sb == sb) request_over(r);
}

static int no_call_async(void *data, const iso_call *call, iso_wire *result) {
  (void)data;
  (void)call;
  sandbox_call_error(result, "TypeError", "this sandbox cannot make host calls");
  return -1;
}

static int no_call_sync(void *data, const iso_call *call, iso_wire *result) {
  (void)data;
  (void)call;
  sandbox_call_error(result, "TypeError", "this binding has no synchronous operations here");
  return -1;
}

static const iso_host_calls no_calls = {
    .call_sync = no_call_sync,
    .call_async = no_call_async,
};

/* ---- life cycle ---- */

void sandbox_init(sandbox *sb, worker *w, sandbox_kind kind, const sandbox_ops *ops, tenant *t,
                  json_t *spec, char *label) {
  sb->w = w;
  sb->kind = kind;
  sb->state = SANDBOX_EMPTY;
  sb->ops = ops;
  sb->tenant = t;
  sb->spec = spec ? json_incref(spec) : NULL;
  sb->version = json_integer_value(json_object_get(spec, "version"));
  spec_limits(spec, &sb->limits);
  sb->wall_ms = spec_wall_ms(spec);
  sb->facet_limit_mb = spec_facet_mb(spec);
  sb->last_used_ns = time_mono_ns();
  sb->log_tenant = t ? t->name : NULL;
  sb->label = label;
  if (label == NULL) {
    sb->log_extra = xstrdup("{\"source\":\"console\"}");
  } else {
    json_t *extra = json_pack("{s:s, s:s}", "source", "console", "sandbox", label);
    sb->log_extra = extra ? json_dumps(extra, JSON_COMPACT) : NULL;
    json_decref(extra);
  }
  vtimer_set_init(&sb->timers, w->loop, sb, timer_fired);
  sb->all_next = w->sandboxes;
  if (w->sandboxes) w->sandboxes->all_prev = sb;
  w->sandboxes = sb;
}

/* Room for one more isolate: the process's maximum counts every isolate. */
static int make_room(worker *w) {
  if (w->loaded_count < w->config.max_isolates) return 0;
  /* Released ones go first: they hold isolates nobody will use again. */
  sandbox_reap(w);
  if (w->loaded_count < w->config.max_isolates) return 0;
  return evict_lru(w, 1) == 1 ? 0 : -1;
}

int sandbox_load(sandbox *sb, iso_worker_options *options, iso_error *err) {
  worker *w = sb->w;
  if (make_room(w) != 0) {
    err->kind = ISO_ERR_INTERNAL;
    err->message = xstrdup("too many isolates in this worker process; try again");
    return -2;
  }
  static const iso_host host_template = {
      .log = host_log,
      .timer_start = host_timer_start,
      .timer_cancel = host_timer_cancel,
      .respond = host_respond,
      .done = host_done,
      .yielded = host_yielded,
  };
  iso_host host = host_template;
  host.data = sb;
  options->host = &host;
  if (options->calls == NULL) options->calls = &no_calls;
  options->limits = sb->limits;
  /* The modules' top-level code runs: it is the sandbox's first entry. */
  sb->entered++;
  if (sb->tenant) worker_running_enter(w, sb->tenant->name);
  sb->iso = iso_worker_create(options, err);
  if (sb->tenant) worker_running_leave(w);
  sb->entered--;
  if (sb->iso == NULL) {
    sb->state = sandbox_state_after(sb->state, SANDBOX_LOAD_FAILED);
    if (sb->tenant) {
      sb->tenant->stats.cpu_ns += err->cpu_ns;
      sb->tenant->stats.dirty = 1;
    }
    return -1;
  }
  sb->state = sandbox_state_after(sb->state, SANDBOX_LOADED);
  w->loaded_count++;
  w->cold_starts[sb->kind]++;
  measure(sb); /* what its top level made, before it answers anything */
  return 0;
}

void sandbox_retire(sandbox *sb) { sb->state = sandbox_state_after(sb->state, SANDBOX_RETIRE); }

static void reaper_run(uv_idle_t *h) {
  uv_idle_stop(h);
  sandbox_reap(container_of(h, worker, reaper));
}

void sandbox_release(sandbox *sb) {
  if (sb->state == SANDBOX_DYING) return;
  sb->state = sandbox_state_after(sb->state, SANDBOX_RELEASE);
  sb->reap_next = sb->w->reap_list;
  sb->w->reap_list = sb;
  uv_idle_start(&sb->w->reaper, reaper_run);
}

void sandbox_reap(worker *w) {
  sandbox *list = w->reap_list;
  w->reap_list = NULL;
  while (list) {
    sandbox *sb = list;
    list = sb->reap_next;
    if (sb->entered) {
      /* Its JavaScript is on the stack: next time round. */
      sb->reap_next = w->reap_list;
      w->reap_list = sb;
      uv_idle_start(&w->reaper, reaper_run);
      continue;
    }
    sandbox_dispose(sb);
  }
}

void sandbox_free_all(worker *w) {
  for (sandbox *sb = w->sandboxes; sb; sb = sb->all_next)
    if (sb->kind != SANDBOX_VERSION) sandbox_release(sb);
  sandbox_reap(w);
}

static void request_free(worker *w, sandbox_request *r);

/* Units dropped with their isolate: timers vanish, an ingress request gets
 * 503, an owner's request fails below; anyone else's is its owner's. */
void sandbox_unit_dropped(sched_unit *u) {
  if (u->run == timer_unit_run) {
    timer_unit *tu = container_of(u, timer_unit, unit);
    tu->owner->units--;
    free(tu);
    return;
  }
  if (u->run == run_owned) return;
  if (u->run == run_ingress) {
    sandbox_request *r = container_of(u, sandbox_request, unit);
    worker *w = r->sb->w;
    detach(r);
    sandbox_request_fail(r, 503, "worker discarded before the request ran", NULL);
    sandbox_request_finish(w, r);
    return;
  }
  log_debug("dropping a foreign unit of a freed sandbox");
}

void sandbox_dispose(sandbox *sb) {
  worker *w = sb->w;
  if (sb->ops->disposing) sb->ops->disposing(sb);
  sched_queue_clear(&w->sched, &sb->queue, sandbox_unit_dropped);
  vtimer_set_clear(&sb->timers);
  iso_error gone = {.kind = ISO_ERR_INTERNAL, .message = (char *)"the dynamic worker was discarded"};
  while (sb->owned) {
    sandbox_request *r = sb->owned;
    sb->owned = r->next;
    if (!r->responded) {
      r->responded = 1;
      sb->ops->respond(sb, r->cookie, NULL, &gone, SANDBOX_FAIL_DISCARDED);
    }
    void *cookie = r->cookie;
    request_free(w, r);
    sb->ops->done(sb, cookie);
  }
  if (sb->kind != SANDBOX_VERSION) sb->requests = 0;
  if (sb->iso) {
    sandbox_charge_outside(sb);
    iso_worker_free(sb->iso);
    sb->iso = NULL;
    w->loaded_count--;
  }
  json_decref(sb->spec);
  free(sb->gate_error);
  sb->gate_error = NULL;
  sb->spec = NULL;
  iso_error_clear(&sb->load_error);
  if (sb->all_prev) sb->all_prev->all_next = sb->all_next;
  else w->sandboxes = sb->all_next;
  if (sb->all_next) sb->all_next->all_prev = sb->all_prev;
  sb->all_prev = sb->all_next = NULL;
  free(sb->label);
  sb->label = NULL;
  free(sb->log_extra);
  sb->log_extra = NULL;
  free(sb->tail_key);
  sb->tail_key = NULL;
  sb->ops->freed(sb);
}

/* ---- requests: making, timing, freeing ---- */

static void wall_track(worker *w, sandbox_request *r) {
  if (r->running) return;
  r->running = 1;
  r->run_prev = NULL;
  r->run_next = w->running;
  if (w->running) w->running->run_prev = r;
  w->running = r;
  if (!uv_is_active((uv_handle_t *)&w->wall_timer))
    uv_timer_start(&w->wall_timer, wall_sweep, WALL_SWEEP_MS, WALL_SWEEP_MS);
}

static void wall_untrack(worker *w, sandbox_request *r) {
  if (!r->running) return;
  if (r->run_prev) r->run_prev->run_next = r->run_next;
  else w->running = r->run_next;
  if (r->run_next) r->run_next->run_prev = r->run_prev;
  r->running = 0;
  r->run_prev = r->run_next = NULL;
}

sandbox_request *sandbox_request_new(worker *w, http_request *req, tenant *t, char *url) {
  sandbox_request *r = xcalloc(1, sizeof *r);
  r->token = ++w->next_token;
  r->req = req;
  r->url = url;
  memcpy(r->request_id, req->id, sizeof r->request_id);
  r->start_ns = req->start_ns;
  r->tenant = t;
  /* The request line of a tail names it after the response took req. */
  if (t && tail_wanted(w, t->name)) r->method = xstrdup(req->method);
  id_map_put(&w->tokens, r->token, r);
  return r;
}

sandbox_request *sandbox_request_of(worker *w, uint64_t token) { return request_live(w, token); }

void *sandbox_request_cookie(sandbox *sb, uint64_t token) {
  sandbox_request *r = request_live(sb->w, token);
  return r && r->sb == sb && sb->kind != SANDBOX_VERSION ? r->cookie : NULL;
}

static void request_free(worker *w, sandbox_request *r) {
  wall_untrack(w, r);
  id_map_del(&w->tokens, r->token);
  free(r->url);
  free(r->method);
  free(r->headers);
  free(r->strings);
  free(r->body);
  free(r);
}

/* Accounting of an ingress request (stats.c reports it): deltas since the
 * last report, for the tenant's deployed worker only. */
static void count_request(const sandbox_request *r) {
  static const uint64_t bounds_ms[PROTO_DURATION_BUCKETS] = PROTO_DURATION_BUCKETS_MS;
  tenant_stats *s = &r->tenant->stats;
  if (r->tenant->spec == NULL && r->tenant->refs == 0) return; /* not a deployed worker */
  s->requests++;
  if (r->status >= 500) s->errors++;
  if (r->status >= 100 && r->status < 600) s->status_classes[r->status / 100 - 1]++;
  if (r->start_ns) {
    uint64_t ns = time_mono_ns() - r->start_ns;
    s->wall_ns += ns;
    size_t b = 0;
    while (b < PROTO_DURATION_BUCKETS && ns > bounds_ms[b] * 1000000u) b++;
    s->durations[b]++;
  }
  s->dirty = 1;
}

void sandbox_request_finish(worker *w, sandbox_request *r) {
  if (r->req) sandbox_request_fail(r, 500, "request dropped", NULL);
  sandbox *sb = r->sb;
  if (r->tenant && tail_wanted(w, r->tenant->name))
    tail_request(w, r->tenant->name, sb, r, r->cpu_ns);
  count_request(r);
  request_free(w, r);
  if (sb) sandbox_settle(sb);
  worker_maybe_exit(w);
}

http_request *sandbox_request_hand_over(worker *w, sandbox_request *r) {
  http_request *req = r->req;
  r->req = NULL;
  request_free(w, r);
  return req;
}

/* The request is no longer the sandbox's to run. */
static void detach(sandbox_request *r) {
  sandbox *sb = r->sb;
  if (sb->requests > 0) sb->requests--;
  if (sb->kind == SANDBOX_VERSION && sb->w->version_requests > 0) sb->w->version_requests--;
}

/*
 * A request is over for this process (done, or let go with its
 * ctx.waitUntil() work pending): its CPU goes to its tenant, and what it
 * left open elsewhere (fetches, facet transaction, dynamic workers) is let
 * go. Frees r.
 */
static void request_over(sandbox_request *r) {
  sandbox *sb = r->sb;
  worker *w = sb->w;
  uint64_t token = r->token;
  int tailed = sb->kind == SANDBOX_RUN && tail_wanted(w, tail_key(sb));
  if (sb->iso && (sb->tenant || tailed)) r->cpu_ns = iso_worker_request_cpu_ns(sb->iso, token);
  if (sb->tenant && sb->iso) {
    sb->tenant->stats.cpu_ns += r->cpu_ns;
    sb->tenant->stats.dirty = 1;
  }
  /* A limit hit after the response ends the request too: counted now. */
  sandbox_charge_outside(sb);
  detach(r);
  if (sb->ops->request_over) sb->ops->request_over(sb, token);
  if (sb->kind == SANDBOX_VERSION) {
    if (r->req) sandbox_request_fail(r, 500, "worker finished without a response", NULL);
    sandbox_request_finish(w, r);
    return;
  }
  if (!r->responded) {
    iso_error e = {.kind = ISO_ERR_INTERNAL, .message = (char *)"worker finished without a response"};
    r->responded = 1;
    sb->ops->respond(sb, r->cookie, NULL, &e, SANDBOX_FAIL_ISO);
  }
  measure(sb);
  sb->last_used_ns = time_mono_ns();
  if (tailed) tail_request(w, tail_key(sb), sb, r, r->cpu_ns);
  if (r->prev) r->prev->next = r->next;
  else sb->owned = r->next;
  if (r->next) r->next->prev = r->prev;
  void *cookie = r->cookie;
  request_free(w, r);
  sb->ops->done(sb, cookie);
  sandbox_settle(sb);
}

/* ---- requests: answers to HTTP clients ---- */

void sandbox_request_fail(sandbox_request *r, int status, const char *message,
                          const char *extra_json) {
  if (r->req == NULL) return;
  http_request *req = r->req;
  r->req = NULL;
  json_t *extra = extra_json ? json_loads(extra_json, 0, NULL) : json_object();
  if (!json_is_object(extra)) {
    json_decref(extra);
    extra = json_object();
  }
  json_object_set_new(extra, "request_id", json_string(req->id));
  r->status = status;
  char *text = json_dumps(extra, JSON_COMPACT);
  json_decref(extra);
  http_respond_error(req, status, message, text);
  free(text);
}

void sandbox_request_fail_retry(sandbox_request *r, const char *message) {
  if (r->req == NULL) return;
  http_request *req = r->req;
  r->req = NULL;
  r->status = 503;
  json_t *body = json_pack("{s:s, s:s}", "error", message, "request_id", req->id);
  char *text = json_dumps(body, JSON_COMPACT);
  json_decref(body);
  if (text == NULL) abort();
  http_header headers[2] = {{"Content-Type", "application/json"}, {"Retry-After", "1"}};
  http_respond(req, 503, headers, 2, text, strlen(text));
  free(text);
}

/* What a failure of a version's JavaScript means to its client. */
static void answer_failure(sandbox_request *r, const iso_error *err) {
  sandbox *sb = r->sb;
  tenant *t = r->tenant;
  const char *id = r->req->id;
  char extra[64];
  switch (err ? err->kind : ISO_ERR_INTERNAL) {
    case ISO_ERR_CPU:
      snprintf(extra, sizeof extra, "{\"limit_ms\":%u}", sb->limits.cpu_ms);
      log_write(LOG_WARN, t->name, id, NULL, "exceeded CPU limit");
      t->stats.cpu_limit_hits++;
      sandbox_request_fail(r, 503, "exceeded CPU limit", extra);
      break;
    case ISO_ERR_CANCELLED:
      /* Not this request's hit: the one that hit the limit is counted. */
      log_write(LOG_WARN, t->name, id, NULL, "%s", err->message);
      sandbox_request_fail(r, 503, err->message, NULL);
      break;
    case ISO_ERR_MEMORY:
      snprintf(extra, sizeof extra, "{\"limit_mb\":%u}", sb->limits.memory_mb);
      log_write(LOG_WARN, t->name, id, NULL, "exceeded memory limit");
      t->stats.memory_limit_hits++;
      sandbox_request_fail(r, 503, "exceeded memory limit", extra);
      break;
    case ISO_ERR_BAD_RETURN:
      log_write(LOG_ERROR, t->name, id, NULL, "%s", err->message);
      sandbox_request_fail(r, 500, err->message, NULL);
      break;
    default: {
      t->stats.uncaught_errors++;
      json_t *stack = json_pack("{s:s}", "stack", err && err->stack ? err->stack : "");
      char *stack_text = json_dumps(stack, JSON_COMPACT);
      json_decref(stack);
      log_write(LOG_ERROR, t->name, id, stack_text, "uncaught exception: %s",
                err && err->message ? err->message : "unknown");
      free(stack_text);
      sandbox_request_fail(r, 500, "uncaught exception in worker", NULL);
      break;
    }
  }
}

http_header *sandbox_http_headers(const sandbox *sb, const iso_response *res, http_header *stack,
                                  size_t stack_len, size_t *n) {
  /* One more for x-edgenode-version. */
  http_header *hs = res->n_headers < stack_len ? stack : xcalloc(res->n_headers + 1, sizeof *hs);
  for (size_t i = 0; i < res->n_headers; i++) {
    const iso_header *h = &res->headers[i];
    hs[i].name = xstrndup(h->name, h->name_len);
    hs[i].value = xstrndup(h->value, h->value_len);
  }
  *n = res->n_headers;
  if (sb && sb->tell_version) {
    char version[24];
    snprintf(version, sizeof version, "%lld", (long long)sb->version);
    hs[*n].name = xstrdup("x-edgenode-version");
    hs[(*n)++].value = xstrdup(version);
  }
  return hs;
}

void sandbox_http_headers_free(http_header *hs, size_t n, const http_header *stack) {
  for (size_t i = 0; i < n; i++) {
    free(hs[i].name);
    free(hs[i].value);
  }
  if (hs != stack) free(hs);
}

static void answer_client(sandbox_request *r, const iso_response *res, const iso_error *err) {
  if (r->req == NULL) return;
  if (res == NULL) {
    answer_failure(r, err);
    return;
  }
  /* http_respond drops framing headers (Content-Length, Connection, ...) itself. */
  http_header stack[16];
  size_t n = 0;
  http_header *hs = sandbox_http_headers(r->sb, res, stack, ARRAY_SIZE(stack), &n);
  http_request *req = r->req;
  r->req = NULL;
  r->status = res->status;
  http_respond(req, res->status, hs, n, res->body, res->body_len);
  sandbox_http_headers_free(hs, n, stack);
}

/* ---- requests: dispatch ---- */

void sandbox_request_submit(sandbox *sb, sandbox_request *r) {
  r->sb = sb;
  sb->requests++;
  sb->w->version_requests++;
  r->unit.run = run_ingress;
  sched_submit(&sb->w->sched, &sb->queue, &r->unit);
}

static void run_ingress(sched_unit *unit) {
  sandbox_request *r = container_of(unit, sandbox_request, unit);
  sandbox *sb = r->sb;
  worker *w = sb->w;
  http_request *req = r->req;
  if (req == NULL || req->conn == NULL) {
    /* The client left while the request waited for its turn: skip the work. */
    r->outcome = "canceled";
    detach(r);
    sandbox_request_finish(w, r);
    return;
  }
  iso_header stack_headers[32];
  iso_header *headers = req->n_headers <= ARRAY_SIZE(stack_headers)
                            ? stack_headers
                            : xcalloc(req->n_headers, sizeof *headers);
  size_t n_headers = 0;
  size_t prefix = strlen(HANDOFF_HOP_PREFIX);
  for (size_t i = 0; i < req->n_headers; i++) {
    const char *name = req->headers[i].name;
    if (w->config.dedicated) {
      /* Handed off: the framing is the handoff's; the client's comes back. */
      if (route_hop_by_hop(name)) continue;
      if (strncasecmp(name, HANDOFF_HOP_PREFIX, prefix) == 0) name += prefix;
    }
    headers[n_headers].name = name;
    headers[n_headers].name_len = strlen(name);
    headers[n_headers].value = req->headers[i].value;
    headers[n_headers].value_len = strlen(req->headers[i].value);
    n_headers++;
  }
  const char *url = r->url;
  iso_request ir = {
      .method = req->method,
      .method_len = strlen(req->method),
      .url = url,
      .url_len = strlen(url),
      .headers = headers,
      .n_headers = n_headers,
      .body = req->body_streamed ? ISO_BODY_STREAMED : req->body,
      .body_len = req->body_streamed ? 0 : req->body_len,
  };
  uint64_t token = r->token;
  sandbox_enter(sb);
  int rc = iso_worker_dispatch(sb->iso, token, &ir);
  if (headers != stack_headers) free(headers);
  /* Most requests are over by now; the rest wait on timers or host calls. */
  sandbox_request *pending = request_live(w, token);
  if (rc == 0 && pending) wall_track(w, pending);
  if (rc != 0 && pending) {
    /* respond/done are never called for a request that did not start. */
    detach(pending);
    sandbox_request_fail(pending, 500, "worker could not start the request", NULL);
    sandbox_request_finish(w, pending);
  }
  sandbox_leave(sb);
}

/* The reason a sandbox without a usable isolate gives its requests. */
static void unusable_error(const sandbox *sb, iso_error *err) {
  err->kind = sb->load_error.kind ? sb->load_error.kind : ISO_ERR_INTERNAL;
  err->module = sb->load_error.module ? xstrdup(sb->load_error.module) : NULL;
  err->line = sb->load_error.line;
  err->column = sb->load_error.column;
  if (sb->load_error.message)
    err->message = xstrdup(sb->load_error.message);
  else if (sb->iso)
    err->message = xstrdup("the dynamic worker was discarded after it hit a limit");
  else
    err->message = xstrdup("the dynamic worker could not be started");
}

/* An owner's request that never reached JavaScript: respond, done, forget. */
static void finish_early(sandbox_request *r, const iso_error *err, sandbox_failure why) {
  sandbox *sb = r->sb;
  if (!r->responded) {
    r->responded = 1;
    sb->ops->respond(sb, r->cookie, NULL, err, why);
  }
  detach(r);
  if (r->prev) r->prev->next = r->next;
  else sb->owned = r->next;
  if (r->next) r->next->prev = r->prev;
  void *cookie = r->cookie;
  request_free(sb->w, r);
  sb->ops->done(sb, cookie);
}

static void run_owned(sched_unit *u) {
  sandbox_request *r = container_of(u, sandbox_request, unit);
  sandbox *sb = r->sb;
  if (sb->state == SANDBOX_DYING) {
    /* Released while this waited: it goes with the sandbox, unrun. */
    iso_error gone = {.kind = ISO_ERR_INTERNAL, .message = (char *)"the dynamic worker was discarded"};
    finish_early(r, &gone, SANDBOX_FAIL_DISCARDED);
    return;
  }
  sandbox_enter(sb);
  if (sb->state == SANDBOX_EMPTY && sb->ops->prepare &&
      sb->ops->prepare(sb, &sb->load_error) != 0)
    sb->state = sandbox_state_after(sb->state, SANDBOX_LOAD_FAILED); /* no room counts too */
  if (sb->iso == NULL || sb->state == SANDBOX_BROKEN || iso_worker_broken(sb->iso)) {
    iso_error err = {0};
    unusable_error(sb, &err);
    finish_early(r, &err, SANDBOX_FAIL_ISO);
    iso_error_clear(&err);
    sandbox_leave(sb);
    return;
  }
  sb->last_used_ns = time_mono_ns();
  iso_request ir = {
      .method = r->method,
      .method_len = strlen(r->method),
      .url = r->url,
      .url_len = strlen(r->url),
      .headers = r->headers,
      .n_headers = r->n_headers,
      .body = r->body,
      .body_len = r->body_len,
  };
  r->start_ns = time_mono_ns();
  uint64_t token = r->token;
  int rc = iso_worker_dispatch(sb->iso, token, &ir);
  sandbox_request *still = request_live(sb->w, token);
  if (rc != 0 && still) {
    /* Refused before it started: no respond or done will come for it. */
    iso_error e = {.kind = ISO_ERR_INTERNAL, .message = (char *)"the request could not start"};
    finish_early(still, &e, SANDBOX_FAIL_ISO);
  }
  sandbox_leave(sb);
}

int sandbox_submit(sandbox *sb, void *cookie, const iso_request *req, const char *request_id) {
  /* One that failed to load still takes them: they get its load error. */
  int failed_load = sb->state == SANDBOX_BROKEN && sb->iso == NULL;
  if ((!sandbox_state_takes_requests(sb->state) && !failed_load) ||
      (sb->iso && iso_worker_broken(sb->iso)))
    return -1;
  worker *w = sb->w;
  sandbox_request *r = xcalloc(1, sizeof *r);
  r->sb = sb;
  r->tenant = sb->tenant;
  r->cookie = cookie;
  r->token = ++w->next_token;
  r->start_ns = time_mono_ns();
  if (request_id) snprintf(r->request_id, sizeof r->request_id, "%s", request_id);
  r->method = xstrndup(req->method, req->method_len);
  r->url = xstrndup(req->url, req->url_len);
  size_t total = 0;
  for (size_t i = 0; i < req->n_headers; i++)
    total += req->headers[i].name_len + req->headers[i].value_len;
  r->strings = xmalloc(total ? total : 1);
  r->headers = xcalloc(req->n_headers ? req->n_headers : 1, sizeof *r->headers);
  r->n_headers = req->n_headers;
  char *p = r->strings;
  for (size_t i = 0; i < req->n_headers; i++) {
    const iso_header *h = &req->headers[i];
    memcpy(p, h->name, h->name_len);
    r->headers[i].name = p;
    r->headers[i].name_len = h->name_len;
    p += h->name_len;
    memcpy(p, h->value, h->value_len);
    r->headers[i].value = p;
    r->headers[i].value_len = h->value_len;
    p += h->value_len;
  }
  if (req->body_len) {
    r->body = xmalloc(req->body_len);
    memcpy(r->body, req->body, req->body_len);
    r->body_len = req->body_len;
  }
  /* In the token map like an ingress request: what a tenant's dynamic
   * worker asks of the egress is checked, budgeted and completed the same way. */
  id_map_put(&w->tokens, r->token, r);
  r->next = sb->owned;
  if (sb->owned) sb->owned->prev = r;
  sb->owned = r;
  sb->requests++;
  r->unit.run = run_owned;
  sched_submit(&w->sched, &sb->queue, &r->unit);
  /* Timed from now: a request waiting for its turn is waiting all the same. */
  wall_track(w, r);
  return 0;
}

/* ---- requests: the wall-time limit ---- */

/*
 * Past its limit a version's request gets 504; its JavaScript may go on.
 * Twice past it, a request that already has its response but whose
 * ctx.waitUntil() work never settles is let go, so that it cannot keep a
 * replaced isolate (or a draining process) alive forever; an owner's
 * request (a dynamic worker's) too, so that it cannot pin its isolate for
 * ever. An owner's request past its limit unanswered fails, and its sandbox
 * goes: what it is still doing (a timer loop, a promise that never
 * settles) goes with it.
 */
static void wall_sweep(uv_timer_t *timer) {
  worker *w = container_of(timer, worker, wall_timer);
  uint64_t now = time_mono_ns();
  sandbox_request *next;
  for (sandbox_request *r = w->running; r; r = next) {
    next = r->run_next;
    sandbox *sb = r->sb;
    uint64_t limit_ms = sb->wall_ms;
    uint64_t age_ns = now - r->start_ns;
    if (age_ns < limit_ms * 1000000u) continue;
    if (sb->state == SANDBOX_DYING && sb->kind != SANDBOX_VERSION) continue;
    if (r->req == NULL && (sb->kind == SANDBOX_VERSION || r->responded)) {
      if (age_ns < 2 * limit_ms * 1000000u) continue;
      log_write(LOG_WARN, sb->log_tenant, NULL, NULL,
                "%s%sctx.waitUntil() work still pending after %llu ms: no longer waiting for it",
                sb->label ? sb->label : "", sb->label ? ": " : "",
                (unsigned long long)(age_ns / 1000000u));
      /* `next` may be this sandbox's too, and stays: only r goes. */
      request_over(r);
      continue;
    }
    if (sb->kind != SANDBOX_VERSION) {
      iso_error err = {.kind = ISO_ERR_INTERNAL, .message = (char *)"exceeded wall time limit"};
      r->responded = 1;
      sb->ops->respond(sb, r->cookie, NULL, &err, SANDBOX_FAIL_WALL);
      sandbox_release(sb);
      continue;
    }
    char extra[64];
    snprintf(extra, sizeof extra, "{\"limit_ms\":%llu}", (unsigned long long)limit_ms);
    log_write(LOG_WARN, r->tenant->name, r->req->id, NULL, "exceeded wall time limit");
    r->tenant->stats.wall_limit_hits++;
    r->outcome = "exceededWallTime";
    sandbox_request_fail(r, 504, "exceeded wall time limit", extra);
  }
  if (w->running == NULL) uv_timer_stop(timer);
}

void sandbox_wall_start(worker *w) {
  uv_timer_init(w->loop, &w->wall_timer);
  uv_unref((uv_handle_t *)&w->wall_timer);
  uv_idle_init(w->loop, &w->reaper);
  uv_unref((uv_handle_t *)&w->reaper);
}

/* ---- errors for owners and host calls ---- */

void sandbox_call_error(iso_wire *out, const char *name, const char *message) {
  iso_wire_object(out, 2);
  iso_wire_string(out, "name", 4);
  iso_wire_string(out, name, strlen(name));
  iso_wire_string(out, "message", 7);
  iso_wire_string(out, message, strlen(message));
}

void sandbox_split_message(const char *text, const char **name, size_t *name_len,
                           const char **message) {
  *name = "Error";
  *name_len = 5;
  *message = text;
  size_t n = strspn(text, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_$");
  if (n == 0 || n > 64 || strncmp(text + n, ": ", 2) != 0) return;
  if (!(n >= 5 && strncmp(text + n - 5, "Error", 5) == 0) &&
      !(n >= 9 && strncmp(text + n - 9, "Exception", 9) == 0))
    return;
  *name = text;
  *name_len = n;
  *message = text + n + 2;
}

void sandbox_error_value(iso_wire *out, const iso_error *err, sandbox_failure why,
                         const sandbox *sb) {
  char buf[160];
  const char *name = "Error";
  size_t name_len = 5;
  const char *message = err && err->message ? err->message : "the dynamic worker failed";
  if (why == SANDBOX_FAIL_WALL) {
    snprintf(buf, sizeof buf, "Dynamic Worker exceeded its wall time limit (%llu ms)",
             (unsigned long long)sb->wall_ms);
    message = buf;
  } else if (why == SANDBOX_FAIL_ISO && err && err->kind == ISO_ERR_CPU) {
    snprintf(buf, sizeof buf, "Dynamic Worker exceeded its CPU time limit (%u ms)",
             sb->limits.cpu_ms);
    message = buf;
  } else if (why == SANDBOX_FAIL_ISO && err && err->kind == ISO_ERR_MEMORY) {
    snprintf(buf, sizeof buf, "Dynamic Worker exceeded its memory limit (%u MB)",
             sb->limits.memory_mb);
    message = buf;
  } else if (why == SANDBOX_FAIL_ISO && err &&
             (err->kind == ISO_ERR_EXCEPTION || err->kind == ISO_ERR_SYNTAX ||
              err->kind == ISO_ERR_LINK || err->kind == ISO_ERR_NO_HANDLER ||
              err->kind == ISO_ERR_BAD_RETURN)) {
    sandbox_split_message(message, &name, &name_len, &message);
    if (err->kind == ISO_ERR_LINK || err->kind == ISO_ERR_NO_HANDLER) name_len = 0;
  }
  /* The child's code is its parent's: its stack says where in it. */
  char *stack = NULL;
  if (why == SANDBOX_FAIL_ISO && err && err->stack &&
      (err->kind == ISO_ERR_EXCEPTION || err->kind == ISO_ERR_BAD_RETURN))
    stack = sandbox_user_stack(err->stack);
  iso_wire_object(out, stack ? 3 : 2);
  iso_wire_string(out, "name", 4);
  if (name_len == 0) {
    name = err && err->kind == ISO_ERR_NO_HANDLER ? "TypeError" : "Error";
    name_len = strlen(name);
  }
  iso_wire_string(out, name, name_len);
  iso_wire_string(out, "message", 7);
  iso_wire_string(out, message, strlen(message));
  if (stack) {
    iso_wire_string(out, "stack", 5);
    iso_wire_string(out, stack, strlen(stack));
  }
  free(stack);
}

char *sandbox_user_stack(const char *stack) {
  char *out = xmalloc(strlen(stack) + 1), *p = out;
  for (const char *line = stack; *line;) {
    size_t n = strcspn(line, "\n");
    int runtime =
        memmem(line, n, "(edgenode:", 10) != NULL || memmem(line, n, "at edgenode:", 12) != NULL;
    if (!runtime) {
      if (p != out) *p++ = '\n';
      memcpy(p, line, n);
      p += n;
    }
    line += n + (line[n] == '\n');
  }
  *p = '\0';
  return out;
}
