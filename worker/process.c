/*
 * Per-process state that modules below main.c touch: the running slot the
 * supervisor reads after a crash (which tenant's JavaScript was running),
 * whether a draining process may exit now, replies to the supervisor, and
 * the jail's test hook (tried on entering a tenant's code, tests only).
 * It calls no other module of the folder, so anything may call it.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "jail.h"
#include "worker.h"

/* One action of the jail's test hook (worker_attempts_arm). */
typedef struct worker_attempt {
  char *tenant;
  char *action;
  int done; /* tried in this process already */
} worker_attempt;

static void try_attempts(worker *w, const char *tenant);

/* Entries nest: a dynamic worker's code runs inside its parent's call, and
 * the parent's code is still running when the child's returns. */
void worker_running_enter(worker *w, const char *tenant) {
  proto_running *r = w->running_slot;
  if (r == NULL) {
    if (w->attempts) try_attempts(w, tenant);
    return;
  }
  w->running_depth++;
  /* The supervisor reads the page after the process is gone, so only the
   * compiler's ordering matters: the name is in place before `running`. */
  if (strncmp((const char *)r->tenant, tenant, PROTO_RUNNING_NAME_MAX) != 0) {
    size_t len = strnlen(tenant, PROTO_RUNNING_NAME_MAX - 1);
    memcpy((char *)r->tenant, tenant, len);
    r->tenant[len] = '\0';
  }
  r->entries++;
  atomic_signal_fence(memory_order_seq_cst);
  r->running = 1;
  if (w->attempts) try_attempts(w, tenant);
}

void worker_running_leave(worker *w) {
  if (w->running_slot == NULL) return;
  if (w->running_depth > 0) w->running_depth--;
  if (w->running_depth == 0) w->running_slot->running = 0;
}

static void ingress_closed(http_server *s) { uv_stop(s->loop); }

void worker_maybe_exit(worker *w) {
  if (!w->draining || w->ingress.closing) return;
  int idle = w->ingress.in_flight == 0 && w->ingress.connections == 0 && w->version_requests == 0;
  if (idle || time_mono_ns() >= w->drain_deadline_ns) {
    if (!idle) log_warn("grace period over: closing %zu connections", w->ingress.connections);
    http_server_close(&w->ingress, ingress_closed);
  }
}

void worker_reply(worker *w, uint8_t type, uint32_t id, json_t *body) {
  char *text = json_dumps(body, JSON_COMPACT);
  json_decref(body);
  if (text == NULL) abort();
  if (proto_channel_send(&w->supervisor, type, id, text, strlen(text)) != 0)
    log_warn("could not reply to the supervisor");
  free(text);
}

void worker_cordon_settled(worker *w, tenant *t) {
  if (t->cordon_done_id == 0 || t->handoffs > 0 || t->handoff_waiting) return;
  json_t *body = json_pack("{s:s}", "name", t->name);
  uint32_t id = t->cordon_done_id;
  t->cordon_done_id = 0;
  worker_reply(w, PROTO_CORDON_DONE, id, body);
}

/* ---- the jail's test hook ---- */

void worker_attempts_arm(worker *w, const char *spec) {
  char *copy = xstrdup(spec), *save = NULL;
  for (char *item = strtok_r(copy, " ", &save); item; item = strtok_r(NULL, " ", &save)) {
    char *eq = strchr(item, '=');
    if (eq == NULL || !worker_name_valid(item, (size_t)(eq - item)) || eq[1] == '\0') {
      log_warn("test hook: ignoring \"%s\" (not TENANT=ACTION)", item);
      continue;
    }
    w->attempts = xrealloc(w->attempts, (w->n_attempts + 1) * sizeof *w->attempts);
    worker_attempt *a = &w->attempts[w->n_attempts++];
    a->tenant = xstrndup(item, (size_t)(eq - item));
    a->action = xstrdup(eq + 1);
    a->done = 0;
  }
  free(copy);
  if (w->n_attempts)
    log_warn("test hook armed (EDGENODE_TEST_JAIL_ATTEMPT): %zu forbidden actions to try",
             w->n_attempts);
}

void worker_attempts_free(worker *w) {
  for (size_t i = 0; i < w->n_attempts; i++) {
    free(w->attempts[i].tenant);
    free(w->attempts[i].action);
  }
  free(w->attempts);
  w->attempts = NULL;
  w->n_attempts = 0;
}

static void log_outcome(const char *tenant, const char *action, int rc, const char *call) {
  json_t *extra = json_pack("{s:s, s:s}", "attempt", action, "outcome",
                            rc == 0 ? "allowed" : rc < 0 ? "unknown" : "refused");
  if (rc > 0) {
    json_object_set_new(extra, "errno", json_integer(rc));
    json_object_set_new(extra, "call", json_string(call));
  }
  char *text = json_dumps(extra, JSON_COMPACT);
  json_decref(extra);
  if (rc == 0) log_write(LOG_WARN, tenant, NULL, text, "test hook: %s went through", action);
  else if (rc < 0) log_write(LOG_WARN, tenant, NULL, text, "test hook: %s is not an action", action);
  else log_write(LOG_WARN, tenant, NULL, text, "test hook: %s refused (%s: %s)", action, call, strerror(rc));
  free(text);
}

/* Inside the tenant's call, as its code would: a kill by seccomp ends the
 * process here, with the running slot naming the tenant. */
static void try_attempts(worker *w, const char *tenant) {
  for (size_t i = 0; i < w->n_attempts; i++) {
    worker_attempt *a = &w->attempts[i];
    if (a->done || strcmp(a->tenant, tenant) != 0) continue;
    a->done = 1;
    log_write(LOG_WARN, tenant, NULL, NULL, "test hook: trying %s", a->action);
    const char *call = NULL;
    int rc = jail_attempt(a->action, &call);
    log_outcome(tenant, a->action, rc, call);
  }
}
