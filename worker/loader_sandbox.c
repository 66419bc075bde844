/*
 * Sandboxes: isolates outside the tenants' deployed versions (loader.h).
 *
 * Everything that enters a sandbox's JavaScript (a request, a timer) is a
 * unit on the sandbox's own scheduler queue. Freeing is never done from
 * inside a callback: sandbox_release() only marks the sandbox and a one-shot
 * idle handle frees it from the loop, where no JavaScript is on the stack.
 */
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "loader.h"

#define WALL_SWEEP_MS 50

/* A timer that fired, waiting for the sandbox's turn. */
typedef struct timer_unit {
  sched_unit unit;
  sandbox *owner;
  uint32_t id;
  uint64_t token;
} timer_unit;

struct sandbox_request {
  sched_unit unit;     /* the dispatch, queued on the sandbox */
  sandbox *owner;
  void *cookie;
  uint64_t token;
  uint64_t start_ns;
  int responded;
  char *method;
  char *url;
  iso_header *headers; /* names and values in `strings` */
  size_t n_headers;
  char *strings;
  uint8_t *body;
  size_t body_len;
  /* While it runs, the request is in the token map like an ingress request
   * (without an HTTP request): what a sandbox of a tenant asks of the egress
   * is then checked, budgeted and completed the same way. */
  inflight link;
  int linked;
  sandbox_request *next;
};

static sandbox *all_sandboxes;
static sandbox *reap_list;
static uv_idle_t reaper;
static uv_timer_t wall_timer;
static int handles_ready;

static void sandbox_free(sandbox *sb);
static void wall_sweep(uv_timer_t *t);

/* ---- the loop's side: reaping, wall time ---- */

static void reaper_run(uv_idle_t *h) {
  uv_idle_stop(h);
  sandbox_reap();
}

static void handles_init(void) {
  if (handles_ready) return;
  uv_loop_t *loop = worker_self()->loop;
  if (uv_idle_init(loop, &reaper) != 0 || uv_timer_init(loop, &wall_timer) != 0) abort();
  uv_unref((uv_handle_t *)&reaper);
  uv_unref((uv_handle_t *)&wall_timer);
  handles_ready = 1;
}

void sandbox_reap(void) {
  sandbox *list = reap_list;
  reap_list = NULL;
  while (list) {
    sandbox *sb = list;
    list = sb->reap_next;
    if (sb->entered) {
      /* Its JavaScript is on the stack: next time round. */
      sb->reap_next = reap_list;
      reap_list = sb;
      uv_idle_start(&reaper, reaper_run);
      continue;
    }
    sandbox_free(sb);
  }
}

void sandbox_free_all(void) {
  for (sandbox *sb = all_sandboxes; sb; sb = sb->all_next) sandbox_release(sb);
  sandbox_reap();
}

/* ---- host callbacks ---- */

static sandbox_request *request_of(sandbox *sb, uint64_t token) {
  for (sandbox_request *r = sb->requests; r; r = r->next)
    if (r->token == token) return r;
  return NULL;
}

void *sandbox_request_cookie(sandbox *sb, uint64_t token) {
  sandbox_request *r = request_of(sb, token);
  return r ? r->cookie : NULL;
}

static void sb_log(void *data, uint64_t token, iso_log_level level, const char *msg, size_t len) {
  (void)token;
  sandbox *sb = data;
  static const log_level map[] = {LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR};
  json_t *extra = json_pack("{s:s, s:s?}", "source", "console", "sandbox", sb->label);
  char *text = extra ? json_dumps(extra, JSON_COMPACT) : NULL;
  json_decref(extra);
  log_write_bytes(map[level & 3], sb->log_tenant, NULL, text, msg, utf8_cut(msg, len, 3500));
  free(text);
}

static void after_entry(sandbox *sb) {
  if (!sb->dying && sandbox_idle(sb) && sb->ops->idle) sb->ops->idle(sb);
}

/* Its code is its parent tenant's: a crash while it runs is blamed on that
 * tenant (one-shot runs have none). */
static void enter(sandbox *sb) {
  sb->entered++;
  if (sb->base.tenant) worker_running_enter(worker_self(), sb->base.tenant->name);
}

static void leave(sandbox *sb) {
  if (sb->base.tenant) worker_running_leave(worker_self());
  sb->entered--;
}

static void timer_unit_run(sched_unit *u) {
  timer_unit *tu = container_of(u, timer_unit, unit);
  sandbox *sb = tu->owner;
  sb->base.units--;
  if (!sb->dying && sb->base.iso) {
    enter(sb);
    iso_worker_fire_timer(sb->base.iso, tu->token, tu->id);
    leave(sb);
  }
  free(tu);
  after_entry(sb);
}

static void timer_fired(void *owner, uint64_t token, uint32_t id) {
  sandbox *sb = owner;
  timer_unit *tu = xmalloc(sizeof *tu);
  tu->unit.run = timer_unit_run;
  tu->owner = sb;
  tu->id = id;
  tu->token = token;
  sb->base.units++;
  sched_submit(&worker_self()->sched, &sb->base.queue, &tu->unit);
}

static int sb_timer_start(void *data, uint64_t token, uint32_t timer_id, double delay_ms) {
  sandbox *sb = data;
  if (sb->dying) return -1;
  return vtimer_start(&sb->base.timers, token, timer_id, delay_ms);
}

static void sb_timer_cancel(void *data, uint32_t timer_id) {
  sandbox *sb = data;
  vtimer_cancel(&sb->base.timers, timer_id);
}

static void sb_respond(void *data, uint64_t token, const iso_response *res, const iso_error *err) {
  sandbox *sb = data;
  sandbox_request *r = request_of(sb, token);
  if (r == NULL || r->responded) return;
  r->responded = 1;
  if (err && (err->kind == ISO_ERR_CPU || err->kind == ISO_ERR_MEMORY)) {
    /* The isolate was terminated mid-flight: whatever state it holds is suspect. */
    sb->broken = 1;
  }
  sb->ops->respond(sb, r->cookie, res, err, SANDBOX_FAIL_ISO);
}

static void request_free(sandbox_request *r) {
  if (r->linked) id_map_del(&worker_self()->tokens, r->token);
  free(r->method);
  free(r->url);
  free(r->headers);
  free(r->strings);
  free(r->body);
  free(r);
}

static void request_unlink(sandbox *sb, sandbox_request *r) {
  for (sandbox_request **p = &sb->requests; *p; p = &(*p)->next) {
    if (*p == r) {
      *p = r->next;
      return;
    }
  }
}

static void measure(sandbox *sb) {
  if (sb->base.iso == NULL) return;
  iso_heap_stats hs;
  iso_worker_heap_stats(sb->base.iso, &hs);
  sb->heap_used = hs.used_bytes;
  sb->held_bytes = hs.used_bytes + hs.external_bytes;
}

static void sb_done(void *data, uint64_t token) {
  sandbox *sb = data;
  sandbox_request *r = request_of(sb, token);
  if (r == NULL) return;
  request_unlink(sb, r);
  if (sb->base.requests > 0) sb->base.requests--;
  if (sb->base.tenant && sb->base.iso) {
    /* A tenant's dynamic workers run on its account. */
    sb->base.tenant->stats.cpu_ns += iso_worker_request_cpu_ns(sb->base.iso, token);
    sb->base.tenant->stats.dirty = 1;
    loaded_charge_outside(&sb->base);
  }
  measure(sb);
  sb->base.last_used_ns = time_mono_ns();
  void *cookie = r->cookie;
  request_free(r);
  sb->ops->done(sb, cookie);
  after_entry(sb);
}

static int sb_call_async(void *data, const iso_call *call, iso_wire *result) {
  sandbox *sb = data;
  if (sb->dying || sb->ops->call_async == NULL) {
    bindings_error(result, "TypeError", "this sandbox cannot make host calls");
    return -1;
  }
  return sb->ops->call_async(sb, call, result);
}

static int sb_call_sync(void *data, const iso_call *call, iso_wire *result) {
  (void)data;
  (void)call;
  bindings_error(result, "TypeError", "this binding has no synchronous operations here");
  return -1;
}

static const iso_host_calls sandbox_calls = {
    .call_sync = sb_call_sync,
    .call_async = sb_call_async,
};

/* ---- life cycle ---- */

void sandbox_init(sandbox *sb, const sandbox_ops *ops, tenant *t, json_t *spec,
                  const char *log_tenant, char *label, uint64_t wall_ms) {
  handles_init();
  vtimer_set_init(&sb->base.timers, sb, timer_fired);
  sb->ops = ops;
  sb->base.tenant = t;
  sb->base.spec = spec ? json_incref(spec) : NULL;
  sb->base.version = json_integer_value(json_object_get(spec, "version"));
  sb->base.last_used_ns = time_mono_ns();
  sb->log_tenant = log_tenant;
  sb->label = label;
  sb->wall_ms = wall_ms ? wall_ms : 30000;
  sb->all_next = all_sandboxes;
  if (all_sandboxes) all_sandboxes->all_prev = sb;
  all_sandboxes = sb;
}

/* Room for one more isolate: the process's maximum counts every isolate. */
static int make_room(worker *w) {
  if (w->loaded_count < WORKER_MAX_ISOLATES) return 0;
  /* Released ones go first: they hold isolates nobody will use again. */
  sandbox_reap();
  if (w->loaded_count < WORKER_MAX_ISOLATES) return 0;
  return evict_lru(w, 1) == 1 ? 0 : -1;
}

int sandbox_load(sandbox *sb, iso_worker_options *options, iso_error *err) {
  worker *w = worker_self();
  if (make_room(w) != 0) {
    err->kind = ISO_ERR_INTERNAL;
    err->message = xstrdup("too many isolates in this worker process; try again");
    return -1;
  }
  static const iso_host host_template = {
      .log = sb_log,
      .timer_start = sb_timer_start,
      .timer_cancel = sb_timer_cancel,
      .respond = sb_respond,
      .done = sb_done,
  };
  iso_host host = host_template;
  host.data = sb;
  options->host = &host;
  options->calls = &sandbox_calls;
  options->limits = sb->base.limits;
  if (sb->base.tenant) worker_running_enter(worker_self(), sb->base.tenant->name);
  sb->base.iso = iso_worker_create(options, err); /* runs the modules' top-level code */
  if (sb->base.tenant) worker_running_leave(worker_self());
  if (sb->base.iso == NULL) {
    sb->broken = 1;
    if (sb->base.tenant) {
      sb->base.tenant->stats.cpu_ns += err->cpu_ns;
      sb->base.tenant->stats.dirty = 1;
    }
    return -1;
  }
  w->loaded_count++;
  measure(sb); /* what its top level made, before it answers anything */
  return 0;
}

int sandbox_idle(const sandbox *sb) {
  return sb->requests == NULL && sb->base.units == 0 &&
         (sb->base.iso == NULL || iso_worker_pending_calls(sb->base.iso) == 0);
}

void sandbox_release(sandbox *sb) {
  if (sb->dying) return;
  sb->dying = 1;
  sb->reap_next = reap_list;
  reap_list = sb;
  uv_idle_start(&reaper, reaper_run);
}

/* ---- requests ---- */

static void request_fail(sandbox *sb, sandbox_request *r, const iso_error *err,
                         sandbox_failure why) {
  if (r->responded) return;
  r->responded = 1;
  sb->ops->respond(sb, r->cookie, NULL, err, why);
}

/* A request that never reached JavaScript: respond, done, forget. */
static void request_finish_early(sandbox *sb, sandbox_request *r, const iso_error *err,
                                 sandbox_failure why) {
  request_fail(sb, r, err, why);
  request_unlink(sb, r);
  if (sb->base.requests > 0) sb->base.requests--;
  void *cookie = r->cookie;
  request_free(r);
  sb->ops->done(sb, cookie);
}

/* The reason a sandbox without a usable isolate gives its requests. */
static void unusable_error(const sandbox *sb, iso_error *err) {
  err->kind = sb->load_error.kind ? sb->load_error.kind : ISO_ERR_INTERNAL;
  err->module = sb->load_error.module ? xstrdup(sb->load_error.module) : NULL;
  err->line = sb->load_error.line;
  err->column = sb->load_error.column;
  if (sb->load_error.message)
    err->message = xstrdup(sb->load_error.message);
  else if (sb->base.iso)
    err->message = xstrdup("the dynamic worker was discarded after it hit a limit");
  else
    err->message = xstrdup("the dynamic worker could not be started");
}

static void request_run(sched_unit *u) {
  sandbox_request *r = container_of(u, sandbox_request, unit);
  sandbox *sb = r->owner;
  if (sb->dying) {
    /* Released while this waited: it goes with the sandbox, unrun. */
    iso_error gone = {.kind = ISO_ERR_INTERNAL, .message = (char *)"the dynamic worker was discarded"};
    request_finish_early(sb, r, &gone, SANDBOX_FAIL_DISCARDED);
    return;
  }
  if (sb->base.iso == NULL && !sb->broken && sb->ops->prepare) {
    /* Making room for the isolate may reap released sandboxes: never this one. */
    sb->entered++;
    if (sb->ops->prepare(sb, &sb->load_error) != 0) sb->broken = 1;
    sb->entered--;
  }
  if (sb->base.iso == NULL || sb->broken || iso_worker_broken(sb->base.iso)) {
    iso_error err = {0};
    unusable_error(sb, &err);
    request_finish_early(sb, r, &err, SANDBOX_FAIL_ISO);
    iso_error_clear(&err);
    after_entry(sb);
    return;
  }
  sb->base.last_used_ns = time_mono_ns();
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
  enter(sb);
  int rc = iso_worker_dispatch(sb->base.iso, token, &ir);
  leave(sb);
  sandbox_request *still = request_of(sb, token);
  if (rc != 0 && still) {
    /* Refused before it started: no respond or done will come for it. */
    iso_error e = {.kind = ISO_ERR_INTERNAL, .message = (char *)"the request could not start"};
    request_finish_early(sb, still, &e, SANDBOX_FAIL_ISO);
  }
  after_entry(sb);
}

int sandbox_submit(sandbox *sb, void *cookie, const iso_request *req) {
  if (sb->dying || (sb->broken && sb->base.iso) ||
      (sb->base.iso && iso_worker_broken(sb->base.iso)))
    return -1;
  sandbox_request *r = xcalloc(1, sizeof *r);
  r->owner = sb;
  r->cookie = cookie;
  r->token = ++worker_self()->next_token;
  r->start_ns = time_mono_ns();
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
  if (sb->base.tenant) {
    r->link.token = r->token;
    r->link.start_ns = r->start_ns;
    r->link.tenant = sb->base.tenant;
    r->link.loaded = &sb->base;
    id_map_put(&worker_self()->tokens, r->token, &r->link);
    r->linked = 1;
  }
  r->next = sb->requests;
  sb->requests = r;
  sb->base.requests++;
  r->unit.run = request_run;
  sched_submit(&worker_self()->sched, &sb->base.queue, &r->unit);
  if (!uv_is_active((uv_handle_t *)&wall_timer))
    uv_timer_start(&wall_timer, wall_sweep, WALL_SWEEP_MS, WALL_SWEEP_MS);
  return 0;
}

/* Requests past their wall time fail, and their sandbox goes: what it is
 * still doing (a timer loop, a promise that never settles) goes with it. */
static void wall_sweep(uv_timer_t *t) {
  uint64_t now = time_mono_ns();
  int any = 0;
  for (sandbox *sb = all_sandboxes; sb; sb = sb->all_next) {
    if (sb->dying) continue;
    for (sandbox_request *r = sb->requests; r; r = r->next) {
      any = 1;
      if (r->responded || now - r->start_ns < sb->wall_ms * 1000000u) continue;
      iso_error err = {.kind = ISO_ERR_INTERNAL, .message = (char *)"exceeded wall time limit"};
      request_fail(sb, r, &err, SANDBOX_FAIL_WALL);
      sb->broken = 1;
      sandbox_release(sb);
      break;
    }
  }
  if (!any) uv_timer_stop(t);
}

/* ---- freeing ---- */

static void unit_dropped(sched_unit *u) {
  if (u->run == timer_unit_run) {
    timer_unit *tu = container_of(u, timer_unit, unit);
    tu->owner->base.units--;
    free(tu);
    return;
  }
  if (u->run == request_run) return; /* the request itself fails below */
  /* Someone else's unit (an outbound fetch's completion, say): it cannot
   * run without the isolate; its owner counted it in units. */
  log_debug("dropping a foreign unit of a freed sandbox");
}

static void sandbox_free(sandbox *sb) {
  worker *w = worker_self();
  sched_queue_clear(&w->sched, &sb->base.queue, unit_dropped);
  vtimer_set_clear(&sb->base.timers);
  iso_error gone = {.kind = ISO_ERR_INTERNAL, .message = (char *)"the dynamic worker was discarded"};
  while (sb->requests) {
    sandbox_request *r = sb->requests;
    sb->requests = r->next;
    request_fail(sb, r, &gone, SANDBOX_FAIL_DISCARDED);
    void *cookie = r->cookie;
    request_free(r);
    sb->ops->done(sb, cookie);
  }
  sb->base.requests = 0;
  if (sb->base.iso) {
    loaded_charge_outside(&sb->base);
    iso_worker_free(sb->base.iso);
    sb->base.iso = NULL;
    w->loaded_count--;
  }
  json_decref(sb->base.spec);
  sb->base.spec = NULL;
  iso_error_clear(&sb->load_error);
  if (sb->all_prev) sb->all_prev->all_next = sb->all_next;
  else all_sandboxes = sb->all_next;
  if (sb->all_next) sb->all_next->all_prev = sb->all_prev;
  free(sb->label);
  sb->label = NULL;
  sb->ops->freed(sb);
}

/* ---- errors for owners ---- */

/* "TypeError: x" -> name "TypeError", message "x"; anything else is an Error. */
static void split_message(const char *text, const char **name, size_t *name_len,
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
             sb->base.limits.cpu_ms);
    message = buf;
  } else if (why == SANDBOX_FAIL_ISO && err && err->kind == ISO_ERR_MEMORY) {
    snprintf(buf, sizeof buf, "Dynamic Worker exceeded its memory limit (%u MB)",
             sb->base.limits.memory_mb);
    message = buf;
  } else if (why == SANDBOX_FAIL_ISO && err &&
             (err->kind == ISO_ERR_EXCEPTION || err->kind == ISO_ERR_SYNTAX ||
              err->kind == ISO_ERR_LINK || err->kind == ISO_ERR_NO_HANDLER ||
              err->kind == ISO_ERR_BAD_RETURN)) {
    split_message(message, &name, &name_len, &message);
    if (err->kind == ISO_ERR_LINK || err->kind == ISO_ERR_NO_HANDLER) name_len = 0;
  }
  iso_wire_object(out, 2);
  iso_wire_string(out, "name", 4);
  if (name_len == 0) {
    name = err && err->kind == ISO_ERR_NO_HANDLER ? "TypeError" : "Error";
    name_len = strlen(name);
  }
  iso_wire_string(out, name, name_len);
  iso_wire_string(out, "message", 7);
  iso_wire_string(out, message, strlen(message));
}
