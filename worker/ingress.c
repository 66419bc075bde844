#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base.h"
#include "worker.h"

/* The worker name is the first label of the Host header, port stripped. */
static int route_name(const char *host, const char **name, size_t *len) {
  if (host == NULL) return -1;
  size_t n = strcspn(host, ".:");
  if (!worker_name_valid(host, n)) return -1;
  *name = host;
  *len = n;
  return 0;
}

void ingress_fail(worker *w, inflight *f, int status, const char *message, const char *extra_json) {
  (void)w;
  if (f->req == NULL) return;
  http_request *req = f->req;
  f->req = NULL;
  json_t *extra = extra_json ? json_loads(extra_json, 0, NULL) : json_object();
  if (!json_is_object(extra)) {
    json_decref(extra);
    extra = json_object();
  }
  json_object_set_new(extra, "request_id", json_string(req->id));
  f->status = status;
  char *text = json_dumps(extra, JSON_COMPACT);
  json_decref(extra);
  http_respond_error(req, status, message, text);
  free(text);
}

void inflight_finish(worker *w, inflight *f) {
  if (f->req) ingress_fail(w, f, 500, "request dropped", NULL);
  wall_untrack(w, f);
  stats_request_done(w, f);
  token_map_del(&w->tokens, f->token);
  free(f);
  tenant_collect_retired(w);
  worker_maybe_exit(w);
}

/* An absolute URL for the Request: the Host the client used, its target. */
static char *request_url(const http_request *req, const char *host) {
  if (strncasecmp(req->target, "http://", 7) == 0 || strncasecmp(req->target, "https://", 8) == 0)
    return xstrdup(req->target);
  return xasprintf("http://%s%s", host, req->target[0] == '/' ? req->target : "/");
}

void ingress_run(sched_unit *unit) {
  inflight *f = container_of(unit, inflight, unit);
  worker *w = worker_self();
  http_request *req = f->req;
  if (req == NULL || req->conn == NULL) {
    /* The client left while the request waited for its turn: skip the work. */
    f->loaded->requests--;
    inflight_finish(w, f);
    return;
  }
  const char *host = http_request_header(req, "host");
  char *url = request_url(req, host);
  iso_header stack_headers[32];
  iso_header *headers = req->n_headers <= ARRAY_SIZE(stack_headers)
                            ? stack_headers
                            : xcalloc(req->n_headers, sizeof *headers);
  for (size_t i = 0; i < req->n_headers; i++) {
    headers[i].name = req->headers[i].name;
    headers[i].name_len = strlen(req->headers[i].name);
    headers[i].value = req->headers[i].value;
    headers[i].value_len = strlen(req->headers[i].value);
  }
  iso_request ir = {
      .method = req->method,
      .method_len = strlen(req->method),
      .url = url,
      .url_len = strlen(url),
      .headers = headers,
      .n_headers = req->n_headers,
      .body = req->body_streamed ? ISO_BODY_STREAMED : req->body,
      .body_len = req->body_streamed ? 0 : req->body_len,
  };
  loaded *l = f->loaded;
  uint64_t token = f->token;
  worker_running_enter(w, l->tenant->name);
  int rc = iso_worker_dispatch(l->iso, token, &ir);
  worker_running_leave(w);
  if (headers != stack_headers) free(headers);
  free(url);
  /* Most requests are over by now; the rest wait on timers or host calls. */
  inflight *pending = token_map_get(&w->tokens, token);
  if (rc == 0 && pending) wall_track(w, pending);
  if (rc != 0) {
    /* respond/done are never called for a request that did not start. */
    inflight *still = token_map_get(&w->tokens, token);
    if (still) {
      l->requests--;
      ingress_fail(w, still, 500, "worker could not start the request", NULL);
      inflight_finish(w, still);
    }
  }
}

void inflight_hand_off(worker *w, inflight *f) {
  http_request *req = f->req;
  tenant *t = f->tenant;
  f->req = NULL;
  /* Not counted here: the dedicated process reports the request. */
  token_map_del(&w->tokens, f->token);
  free(f);
  handoff_submit(w, t, req);
}

void ingress_respond_suspended(tenant *t, http_request *req) {
  json_t *extra = json_pack("{s:s, s:s, s:s}", "tenant", t->name, "state", "suspended",
                            "request_id", req->id);
  char *text = json_dumps(extra, JSON_COMPACT);
  json_decref(extra);
  http_respond_error(req, 503,
                     t->cordon_error ? t->cordon_error
                                     : "tenant suspended: an operator must uncordon it",
                     text);
  free(text);
}

/* A dedicated process serves its own tenant only (it is reached through its
 * private port alone, so anything else is a mistake). */
static int misdirected(worker *w, const char *name, size_t len) {
  const char *own = w->config.dedicated;
  return own && (strlen(own) != len || memcmp(own, name, len) != 0);
}

void ingress_on_request(http_server *server, http_request *req) {
  worker *w = server->data;
  const char *name;
  size_t len;
  if (route_name(http_request_header(req, "host"), &name, &len) != 0) {
    http_respond_error(req, 400, "missing or invalid Host header: its first label names the worker",
                       NULL);
    return;
  }
  if (misdirected(w, name, len)) {
    http_respond_error(req, 404, "unknown worker", NULL);
    return;
  }
  tenant *elsewhere = w->config.dedicated ? NULL : tenant_find(w, name, len);
  if (elsewhere && elsewhere->placement == TENANT_SUSPENDED) {
    ingress_respond_suspended(elsewhere, req);
    return;
  }
  if (elsewhere && elsewhere->placement == TENANT_CORDONED) {
    handoff_submit(w, elsewhere, req);
    return;
  }
  inflight *f = xcalloc(1, sizeof *f);
  f->token = ++w->next_token;
  f->req = req;
  memcpy(f->request_id, req->id, sizeof f->request_id);
  f->start_ns = req->start_ns;
  f->tenant = tenant_get_or_add(w, name, len);
  token_map_put(&w->tokens, f->token, f);
  tenant_submit(w, f);
}
