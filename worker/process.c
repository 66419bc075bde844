/*
 * Per-process state that modules below main.c touch: the running slot the
 * supervisor reads after a crash (which tenant's JavaScript was running),
 * whether a draining process may exit now, and replies to the supervisor.
 * It calls no other module of the folder, so anything may call it.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "worker.h"

/* Entries nest: a dynamic worker's code runs inside its parent's call, and
 * the parent's code is still running when the child's returns. */
void worker_running_enter(worker *w, const char *tenant) {
  proto_running *r = w->running_slot;
  if (r == NULL) return;
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
