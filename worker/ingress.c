/*
 * Ingress: a complete HTTP request from a client, on its way in. This file
 * owns what happens between the HTTP server and the tenant: the route
 * (route.c), the answers given before any tenant runs (unroutable,
 * misdirected, suspended), and where a cordoned tenant's request goes
 * (handoff.c). Everything else makes a sandbox_request (sandbox.c, its one
 * owner from here to its answer) and gives it to its tenant (tenants.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "sandbox.h"

/* A request refused before it reaches any tenant: it counts against none. */
static void respond_unroutable(http_request *req, const char *message) {
  char *extra = xasprintf("{\"request_id\":\"%s\"}", req->id);
  http_respond_error(req, 400, message, extra);
  free(extra);
}

void ingress_hand_off(worker *w, sandbox_request *r) {
  tenant *t = r->tenant;
  /* Not counted here: the dedicated process reports the request. */
  http_request *req = sandbox_request_hand_over(w, r);
  handoff_submit(w, t, req);
}

void ingress_respond_suspended(tenant *t, http_request *req) {
  json_t *body = json_pack("{s:s, s:s, s:s, s:s}", "error",
                           t->cordon_error ? t->cordon_error
                                           : "tenant suspended: an operator must uncordon it",
                           "tenant", t->name, "state", "suspended", "request_id", req->id);
  /* A suspension that ends by itself says when to come back. */
  char retry[24];
  http_header headers[2] = {{"Content-Type", "application/json"}, {"Retry-After", retry}};
  size_t n_headers = 1;
  if (t->cordon_until_ms > 0) {
    int64_t left_ms = t->cordon_until_ms - time_now_ms();
    long long s = left_ms > 1000 ? (left_ms + 999) / 1000 : 1;
    snprintf(retry, sizeof retry, "%lld", s);
    json_object_set_new(body, "retry_after_s", json_integer(s));
    n_headers = 2;
  }
  char *text = json_dumps(body, JSON_COMPACT);
  json_decref(body);
  if (text == NULL) abort();
  stats_answered_here(t, 503);
  http_respond(req, 503, headers, n_headers, text, strlen(text));
  free(text);
}

/* A dedicated process serves its own tenant only (it is reached through its
 * private port alone, so anything else is a mistake). */
static int misdirected(worker *w, const char *name, size_t len) {
  const char *own = w->config.dedicated;
  return own && (strlen(own) != len || memcmp(own, name, len) != 0);
}

/*
 * The worker a request is for: the X-Edgenode-Worker header (for clients
 * that cannot set Host), else the most specific ingress route, else the
 * first label of the host. NULL with name set, or why not (a constant).
 */
static const char *pick_worker(const worker *w, const http_request *req, const route *d,
                               char name[64], size_t *len) {
  const char *named = http_request_header(req, "X-Edgenode-Worker");
  int from_header = named != NULL;
  const http_authority *a = &d->authority;
  if (named == NULL) named = http_routes_match(w->routes, a->host, a->host_len, d->path);
  if (named == NULL && route_worker_name(d, name, len) == 0) return NULL;
  if (named == NULL)
    return "the request names no worker: the first label of its host must be a worker name, "
           "or a route or an X-Edgenode-Worker header name one";
  size_t n = strlen(named);
  if (n > 63 || !worker_name_valid(named, n))
    return from_header ? "X-Edgenode-Worker: not a worker name ([a-z0-9][a-z0-9-]{0,62})"
                       : "the route names no worker"; /* the supervisor checked: never */
  memcpy(name, named, n + 1);
  *len = n;
  return NULL;
}

void ingress_on_request(http_server *server, http_request *req) {
  worker *w = server->data;
  route d;
  char *err = route_find(req, &d);
  if (err) {
    respond_unroutable(req, err);
    free(err);
    return;
  }
  char name[64];
  size_t len;
  const char *why = pick_worker(w, req, &d, name, &len);
  if (why) {
    respond_unroutable(req, why);
    return;
  }
  if (misdirected(w, name, len)) {
    http_respond_error(req, 404, "unknown worker", NULL);
    return;
  }
  int hops = route_loop_hops(req);
  if (hops >= ROUTE_MAX_LOOP_HOPS) {
    char extra[64];
    snprintf(extra, sizeof extra, "{\"hops\":%d,\"max_hops\":%d}", hops, ROUTE_MAX_LOOP_HOPS);
    log_write(LOG_WARN, NULL, req->id, NULL, "loop refused: %.*s came through edgenode %d times",
              (int)len, name, hops);
    http_respond_error(req, 508,
                       "loop detected: the request came through edgenode's egress too many times "
                       "(CDN-Loop)",
                       extra);
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
  tenant *t = tenant_get_or_add(w, name, len);
  tenant_submit(w, sandbox_request_new(w, req, t, route_url(&d)));
}
