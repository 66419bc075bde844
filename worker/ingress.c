#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base.h"
#include "worker.h"

/*
 * Where a request goes. RFC 9112 section 3.2: exactly one Host header, with a
 * valid authority, or 400. Section 3.2.2: an absolute-form target's
 * authority is the one that counts, Host is ignored. We route by it rather
 * than refuse a Host that differs: the RFC tells a server to do so, and a
 * client that sends absolute-form means its target. Routing and request.url
 * then always agree, and the Host is still checked, as section 3.2 asks.
 */
typedef struct destination {
  http_authority authority;
  const char *path;  /* the URL's path and query, into the target ("" for "/") */
} destination;

static const char *host_header(const http_request *req, size_t *len, size_t *count) {
  const char *value = NULL;
  *count = 0;
  for (size_t i = 0; i < req->n_headers; i++)
    if (strcasecmp(req->headers[i].name, "host") == 0 && ++*count == 1)
      value = req->headers[i].value;
  if (value == NULL) return NULL;
  /* As the workers' Headers class does: surrounding spaces and tabs go. */
  while (*value == ' ' || *value == '\t') value++;
  size_t n = strlen(value);
  while (n > 0 && (value[n - 1] == ' ' || value[n - 1] == '\t')) n--;
  *len = n;
  return value;
}

/* The length of an "http://" or "https://" prefix (any case), or 0. */
static size_t absolute_form(const char *target) {
  if (strncasecmp(target, "http://", 7) == 0) return 7;
  if (strncasecmp(target, "https://", 8) == 0) return 8;
  return 0;
}

/* Fills *d, or returns why the request cannot be routed (the caller frees it). */
static char *destination_find(const http_request *req, destination *d) {
  size_t count, len = 0;
  const char *host = host_header(req, &len, &count);
  if (count == 0) return xstrdup("missing Host header: its first label names the worker");
  if (count > 1) return xstrdup("more than one Host header");
  const char *err = http_authority_parse(host, len, &d->authority);
  if (err) return xasprintf("invalid Host header: %s", err);
  const char *t = req->target;
  size_t scheme = absolute_form(t);
  if (scheme == 0) {
    /* Asterisk- and authority-form name no resource: the URL's path is "/". */
    d->path = t[0] == '/' ? t : "";
    return NULL;
  }
  const char *a = t + scheme;
  size_t n = strcspn(a, "/?#");
  err = http_authority_parse(a, n, &d->authority);
  if (err) return xasprintf("invalid authority in the request target: %s", err);
  d->path = a + n;
  return NULL;
}

/* The worker name: the first label of a host name, lowercased (host names
 * are case-insensitive, worker names lowercase). IP addresses name none. */
static int route_name(const destination *d, char name[64], size_t *len) {
  const http_authority *a = &d->authority;
  if (a->kind != HTTP_HOST_NAME) return -1;
  size_t n = strcspn(a->host, ".:");
  if (n > a->host_len) n = a->host_len;
  if (n == 0 || n > 63) return -1;
  for (size_t i = 0; i < n; i++) name[i] = (char)tolower((unsigned char)a->host[i]);
  if (!worker_name_valid(name, n)) return -1;
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
  id_map_del(&w->tokens, f->token);
  free(f->url);
  free(f);
  tenant_collect_retired(w);
  worker_maybe_exit(w);
}

/* The Request's absolute URL, from the checked authority and the target's
 * path, its host and port as the URL Standard writes them: host lowercased,
 * port without leading zeros and left out when it is http's 80. */
static char *request_url(const destination *d) {
  const http_authority *a = &d->authority;
  char *host = xstrndup(a->host, a->host_len);
  for (char *c = host; *c; c++) *c = (char)tolower((unsigned char)*c);
  unsigned port = 0;
  for (size_t i = 0; i < a->port_len; i++) port = port * 10 + (unsigned)(a->port[i] - '0');
  char port_text[8] = "";
  if (a->port && port != 80) snprintf(port_text, sizeof port_text, ":%u", port);
  /* Bytes past ASCII are percent-encoded, as the URL parser encodes the
   * code points of valid UTF-8; decoding them as UTF-8 instead would turn
   * invalid sequences into U+FFFD and make different targets one URL. */
  size_t n = strlen(d->path), high = 0;
  for (size_t i = 0; i < n; i++) high += (unsigned char)d->path[i] >= 0x80;
  char *encoded = NULL;
  if (high > 0) {
    char *o = encoded = xmalloc(n + 2 * high + 1);
    for (size_t i = 0; i < n; i++) {
      unsigned char ch = (unsigned char)d->path[i];
      if (ch < 0x80) {
        *o++ = (char)ch;
        continue;
      }
      *o++ = '%';
      *o++ = "0123456789ABCDEF"[ch >> 4];
      *o++ = "0123456789ABCDEF"[ch & 15];
    }
    *o = '\0';
  }
  const char *path = encoded ? encoded : d->path;
  char *url = xasprintf("http://%s%s%s%s", host, port_text, path[0] == '/' ? "" : "/", path);
  free(encoded);
  free(host);
  return url;
}

/* A request refused before it reaches any tenant: it counts against none. */
static void respond_unroutable(http_request *req, const char *message) {
  char *extra = xasprintf("{\"request_id\":\"%s\"}", req->id);
  http_respond_error(req, 400, message, extra);
  free(extra);
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
  const char *url = f->url;
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
      if (handoff_hop_by_hop(name)) continue;
      if (strncasecmp(name, HANDOFF_HOP_PREFIX, prefix) == 0) name += prefix;
    }
    headers[n_headers].name = name;
    headers[n_headers].name_len = strlen(name);
    headers[n_headers].value = req->headers[i].value;
    headers[n_headers].value_len = strlen(req->headers[i].value);
    n_headers++;
  }
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
  loaded *l = f->loaded;
  uint64_t token = f->token;
  worker_running_enter(w, l->tenant->name);
  int rc = iso_worker_dispatch(l->iso, token, &ir);
  worker_running_leave(w);
  if (headers != stack_headers) free(headers);
  /* Most requests are over by now; the rest wait on timers or host calls. */
  inflight *pending = id_map_get(&w->tokens, token);
  if (rc == 0 && pending) wall_track(w, pending);
  if (rc != 0) {
    /* respond/done are never called for a request that did not start. */
    inflight *still = id_map_get(&w->tokens, token);
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
  id_map_del(&w->tokens, f->token);
  free(f->url);
  free(f);
  handoff_submit(w, t, req);
}

void ingress_respond_suspended(tenant *t, http_request *req) {
  json_t *extra = json_pack("{s:s, s:s, s:s}", "tenant", t->name, "state", "suspended",
                            "request_id", req->id);
  char *text = json_dumps(extra, JSON_COMPACT);
  json_decref(extra);
  stats_answered_here(t, 503);
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
  destination d;
  char *err = destination_find(req, &d);
  if (err) {
    respond_unroutable(req, err);
    free(err);
    return;
  }
  char name[64];
  size_t len;
  if (route_name(&d, name, &len) != 0) {
    respond_unroutable(req, "the host names no worker: its first label must be a worker name");
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
  f->url = request_url(&d);
  memcpy(f->request_id, req->id, sizeof f->request_id);
  f->start_ns = req->start_ns;
  f->tenant = tenant_get_or_add(w, name, len);
  id_map_put(&w->tokens, f->token, f);
  tenant_submit(w, f);
}
