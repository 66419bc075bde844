/*
 * The output gate's batches (docs/workers.md, "Durability"). A version's
 * response that may reflect writes not yet durable waits here, copied,
 * instead of committing them at once; so do the writes of every
 * synchronous run of a version. Once per turn of the loop, after whatever
 * arrived in that turn has run, every facet's writes are committed
 * together (one fsync per facet, and in a fleet one round trip to JetStream
 * per facet) and the waiting responses go out, or, for a tenant whose
 * commit failed, are replaced by a 500 and its isolates reset. Requests of
 * one tenant that run in the same turn thus share a commit, as Durable
 * Objects coalesce the writes of concurrent requests: none of them is
 * answered before all of it is stored, and none sees what another wrote
 * without waiting for the same commit.
 *
 * Responses of one-shot runs and loader children, streamed responses and
 * outbound fetches still commit at once (facet_link_gate).
 *
 * A facet's WAL is checkpointed here too, after the batch's responses went
 * out: a commit only says that one is due (facet_store_checkpoint_due).
 */
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "sandbox.h"

typedef struct gated {
  struct gated *next;
  sandbox *sb; /* held (sb->gated) until the answer went */
  http_request *req;
  int status;
  http_header *headers;
  size_t n_headers;
  uint8_t *body;
  size_t body_len;
} gated;

static const char *owner_of(const sandbox *sb) {
  return sb->tenant ? sb->tenant->name : sb->facet_tenant;
}

static void gated_free(gated *g) {
  for (size_t i = 0; i < g->n_headers; i++) {
    free(g->headers[i].name);
    free(g->headers[i].value);
  }
  free(g->headers);
  free(g->body);
  free(g);
}

/* In a fleet a commit costs a round trip to JetStream (about a
 * millisecond) during which this process waits, and clients waiting for
 * their answers send nothing: flushed at once, a batch would hold only the
 * few requests that arrived in the turn before. So in a fleet the batch
 * stays open while requests keep joining it, until none did for 300 µs
 * or it is 2 ms old: a lone request waits the quiet time alone (measured
 * in tests/bench/facets_fleet.sh: 150 µs cut batches short, 700 µs made
 * them no larger). Alone, a commit is an fsync of a few pages, and the
 * next turn is soon enough. */
#define FLEET_QUIET_NS 300000u
#define FLEET_WINDOW_NS 2000000u

static void on_flush(uv_idle_t *idle) {
  worker *w = idle->data;
  if (w->config.replica_socket != NULL) {
    uint64_t now = time_mono_ns();
    if (now - w->gate_joined_ns < FLEET_QUIET_NS && now - w->gate_batch_ns < FLEET_WINDOW_NS)
      return; /* the loop turns on (this handle keeps its poll from blocking) */
  }
  gate_flush(w);
}

void gate_schedule(worker *w) {
  if (w->facets == NULL ||
      (!facet_store_pending(w->facets) && !facet_store_checkpoint_due(w->facets)))
    return;
  w->gate_joined_ns = time_mono_ns();
  if (!w->gate_idle_open) {
    uv_idle_init(w->loop, &w->gate_idle);
    w->gate_idle.data = w;
    w->gate_idle_open = 1;
  }
  if (!uv_is_active((uv_handle_t *)&w->gate_idle)) {
    w->gate_batch_ns = w->gate_joined_ns;
    uv_idle_start(&w->gate_idle, on_flush);
  }
}

int gate_defer(sandbox *sb, sandbox_request *r, const iso_response *res) {
  worker *w = sb->w;
  const char *owner = owner_of(sb);
  if (w->facets == NULL || owner == NULL || sb->gate_error != NULL || r->req == NULL ||
      !facet_store_pending_tenant(w->facets, owner))
    return 0;
  gated *g = xcalloc(1, sizeof *g);
  g->sb = sb;
  g->req = r->req;
  g->status = res->status;
  g->n_headers = res->n_headers;
  g->headers = xcalloc(res->n_headers ? res->n_headers : 1, sizeof *g->headers);
  for (size_t i = 0; i < res->n_headers; i++) {
    g->headers[i].name = xstrndup(res->headers[i].name, res->headers[i].name_len);
    g->headers[i].value = xstrndup(res->headers[i].value, res->headers[i].value_len);
  }
  g->body_len = res->body_len;
  g->body = xmalloc(res->body_len ? res->body_len : 1);
  if (res->body_len) memcpy(g->body, res->body, res->body_len);
  /* The request is answered from here; its record goes on without it. */
  r->req = NULL;
  r->status = res->status;
  sb->gated++;
  /* In order of arrival: appended. */
  gated **tail = &w->gated;
  while (*tail) tail = &(*tail)->next;
  *tail = g;
  gate_schedule(w);
  return 1;
}

static void answer(worker *w, gated *g, const char *lost) {
  sandbox *sb = g->sb;
  if (lost == NULL) {
    http_respond(g->req, g->status, g->headers, g->n_headers, g->body, g->body_len);
  } else {
    char *message = xasprintf("the worker's writes could not be stored: %s", lost);
    char *extra = xasprintf("{\"request_id\":\"%s\"}", g->req->id);
    log_write(LOG_ERROR, owner_of(sb), g->req->id, NULL, "%s", message);
    http_respond_error(g->req, 500, message, extra);
    free(extra);
    free(message);
    /* Its isolate may hold what was not stored: it serves nothing more. */
    sb->state = sandbox_state_after(sb->state, SANDBOX_LIMIT_HIT);
  }
  sandbox_ungate(w, sb);
  gated_free(g);
}

/* Answers every waiting response of `owner` with its failure (and takes
 * them out of the batch). */
void gate_fail_owner(worker *w, const char *owner, const char *why) {
  for (gated **at = &w->gated; *at != NULL;) {
    gated *g = *at;
    const char *o = owner_of(g->sb);
    if (o == NULL || strcmp(o, owner) != 0) {
      at = &g->next;
      continue;
    }
    *at = g->next;
    answer(w, g, why);
  }
}

void gate_flush(worker *w) {
  if (w->gate_idle_open) uv_idle_stop(&w->gate_idle);
  if (w->facets != NULL && facet_store_pending(w->facets)) (void)facet_store_commit(w->facets, NULL);
  while (w->gated != NULL) {
    gated *g = w->gated;
    const char *owner = owner_of(g->sb);
    char *lost = NULL;
    if (w->facets != NULL && owner != NULL &&
        facet_store_take_tenant_failure(w->facets, owner, &lost)) {
      gate_fail_owner(w, owner, lost); /* g among them */
      free(lost);
      continue;
    }
    w->gated = g->next;
    answer(w, g, NULL);
  }
  if (w->facets != NULL) facet_store_checkpoint(w->facets);
}

void gate_stop(worker *w) {
  gate_flush(w);
  if (w->gate_idle_open) uv_close((uv_handle_t *)&w->gate_idle, NULL);
  w->gate_idle_open = 0;
}
