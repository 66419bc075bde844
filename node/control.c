/*
 * The control API: HTTP + JSON on its own listener. Every route but the
 * health checks needs the bearer token; errors are {"error": ...} objects.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "node.h"

/* JSON bodies escape sources, so allow some room over the script limit; the
 * exact limit is enforced on the decoded sources (413 "script too large"). */
#define CONTROL_MAX_BODY (3u * NODE_SCRIPT_MAX_BYTES + 64u * 1024u)

/* Bodies above this (and chunked ones) reach on_request at their head, so
 * that a client without the token is refused before the supervisor buffers
 * up to CONTROL_MAX_BODY bytes for it. */
#define CONTROL_AUTH_BEFORE_BODY (64u * 1024u)

void node_respond_json(http_request *req, int status, json_t *body, const char *allow) {
  char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
  if (text == NULL) {
    status = 500;
    text = xstrdup("{\"error\":\"internal error\"}");
  }
  http_header headers[3] = {
      {"Content-Type", "application/json"},
      {"Cache-Control", "no-store"},
      {"Allow", (char *)allow},
  };
  if (status == 401) {
    headers[2].name = "WWW-Authenticate";
    headers[2].value = "Bearer";
  }
  size_t n = allow || status == 401 ? 3 : 2;
  http_respond(req, status, headers, n, text, strlen(text));
  free(text);
}

void node_respond_error(http_request *req, int status, const char *message) {
  json_t *body = json_pack("{s:s}", "error", message);
  node_respond_json(req, status, body, NULL);
  json_decref(body);
}

void node_respond_method(http_request *req, const char *allow) {
  json_t *body = json_pack("{s:s, s:s, s:s}", "error", "method not allowed", "method",
                           req->method, "allow", allow);
  node_respond_json(req, 405, body, allow);
  json_decref(body);
}

static int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* Form decoding of s[0..len) into out: %XX escapes, '+' for a space. A bad
 * escape, or one for NUL (the value is a C string), is -EINVAL. */
static int query_decode(const char *s, size_t len, char *out, size_t outlen) {
  size_t o = 0;
  for (size_t i = 0; i < len; i++) {
    int c = s[i] == '+' ? ' ' : (unsigned char)s[i];
    if (c == '%') {
      int hi = i + 2 < len ? hex_digit(s[i + 1]) : -1;
      int lo = hi >= 0 ? hex_digit(s[i + 2]) : -1;
      if (lo < 0 || (hi | lo) == 0) return -EINVAL;
      c = hi << 4 | lo;
      i += 2;
    }
    if (o + 1 >= outlen) return -E2BIG;
    out[o++] = (char)c;
  }
  out[o] = '\0';
  return 0;
}

int node_query_param(const char *target, const char *key, char *out, size_t outlen) {
  const char *q = strchr(target, '?');
  if (q == NULL) return 0;
  const char *p = q + 1, *stop = p + strcspn(p, "#");
  int count = 0, rc = 0;
  while (p < stop) {
    const char *amp = memchr(p, '&', (size_t)(stop - p));
    const char *end = amp ? amp : stop;
    const char *eq = memchr(p, '=', (size_t)(end - p));
    char name[64];
    /* A name that cannot be decoded, or is that long, is not one we read. */
    if (query_decode(p, (size_t)((eq ? eq : end) - p), name, sizeof name) == 0 &&
        strcmp(name, key) == 0 && count++ == 0) {
      const char *v = eq ? eq + 1 : end;
      rc = query_decode(v, (size_t)(end - v), out, outlen);
    }
    p = amp ? amp + 1 : stop;
  }
  return rc < 0 ? rc : count;
}

static void respond_unknown_worker(http_request *req, const char *name) {
  json_t *body = json_pack("{s:s, s:s}", "error", "unknown worker", "name", name);
  node_respond_json(req, 404, body, NULL);
  json_decref(body);
}

/* Compares in time that depends only on the expected token's length. */
static int token_matches(const node *n, const char *given, size_t len) {
  volatile unsigned char diff = len != n->token_len;
  for (size_t i = 0; i < n->token_len; i++)
    diff |= (unsigned char)n->token[i] ^ (unsigned char)(i < len ? given[i] : 0);
  return diff == 0;
}

static int authorized(const node *n, const http_request *req) {
  const char *h = http_request_header(req, "Authorization");
  if (h == NULL || strncasecmp(h, "Bearer ", 7) != 0) return 0;
  h += 7;
  while (*h == ' ') h++;
  size_t len = strlen(h);
  while (len > 0 && (h[len - 1] == ' ' || h[len - 1] == '\t')) len--;
  return token_matches(n, h, len);
}

/* ---- routes ---------------------------------------------------------------------- */

static void get_node(node *n, http_request *req) {
  char started[32];
  node_iso8601(n->started_at_ms, started);
  json_t *procs = json_array();
  for (int i = 0; i < n->n_procs; i++) {
    const node_proc *p = &n->procs[i];
    char at[32];
    node_iso8601(p->started_at_ms, at);
    json_t *entry = json_pack("{s:i, s:i, s:s, s:i, s:s}", "id", p->id, "pid", p->pid, "state",
                              node_proc_state_name(p->state), "restarts", (int)p->restarts,
                              "started_at", at);
    if (p->process_stats) json_object_update(entry, p->process_stats);
    json_object_set_new(entry, "mpk", json_pack("{s:b, s:i}", "enabled", p->mpk_enabled, "keys",
                                                p->mpk_keys));
    json_object_set_new(entry, "sandbox", node_sandbox_json(p->jail_on, p->jail_off)); /* jail/ */
    json_array_append_new(procs, entry);
  }
  json_t *body = json_pack(
      "{s:s, s:s?, s:I, s:s, s:s, s:s, s:s, s:i, s:o}", "version", EDGENODE_VERSION, "v8",
      n->v8_version, "uptime_s", (json_int_t)((time_mono_ns() - n->started_mono_ns) / 1000000000u),
      "started_at", started, "state", node_state_name(n), "listen",
      n->listen_addr, "control", n->control_addr, "pid", (int)getpid(), "workers", procs);
  json_object_set_new(body, "mpk_enabled", json_boolean(node_mpk_enabled(n)));
  json_t *egress_sandbox = node_egress_sandbox_json(n); /* jail/ */
  if (egress_sandbox) json_object_set_new(body, "egress_sandbox", egress_sandbox);
  json_object_set_new(body, "worker_memory_budget_mb",
                      json_integer((json_int_t)(node_worker_memory_budget(n) >> 20)));
  node_respond_json(req, 200, body, NULL);
  json_decref(body);
}

static void list_workers(node *n, http_request *req) {
  json_t *rows;
  if (node_registry_list(n->registry, &rows) != 0) {
    log_error("registry read failed: %s", node_registry_errmsg(n->registry));
    node_respond_error(req, 500, "registry read failed");
    return;
  }
  json_t *list = json_array();
  size_t i;
  json_t *row;
  json_array_foreach(rows, i, row) json_array_append_new(list, node_worker_metadata(row, 0));
  json_decref(rows);
  json_t *body = json_pack("{s:o}", "workers", list);
  node_respond_json(req, 200, body, NULL);
  json_decref(body);
}

static void get_worker(node *n, http_request *req, const char *name) {
  json_t *row;
  int rc = node_registry_get(n->registry, name, &row);
  if (rc == -ENOENT) {
    respond_unknown_worker(req, name);
    return;
  }
  if (rc != 0) {
    log_write(LOG_ERROR, name, NULL, NULL, "registry read failed: %s",
              node_registry_errmsg(n->registry));
    node_respond_error(req, 500, "registry read failed");
    return;
  }
  json_t *meta = node_worker_metadata(row, 1);
  json_decref(row);
  node_respond_json(req, 200, meta, NULL);
  json_decref(meta);
}

/* ?purge=true or ?purge=false (the default): anything else is refused before
 * the delete, since a misread purge loses data or keeps data meant to go.
 * Returns 0, or -1 with the 400 answered. */
static int read_purge(http_request *req, const char *name, int *purge) {
  char value[8];
  int rc = node_query_param(req->target, "purge", value, sizeof value);
  *purge = rc == 1 && strcmp(value, "true") == 0;
  if (rc == 0 || *purge || (rc == 1 && strcmp(value, "false") == 0)) return 0;
  const char *msg = rc > 1 ? "the query parameter purge is given more than once: give it once, "
                             "as true or false"
                           : "the query parameter purge must be true or false";
  log_write(LOG_INFO, name, req->id, NULL, "delete rejected: %s", msg);
  json_t *body = json_pack("{s:s, s:s, s:[s, s]}", "error", msg, "key", "purge", "accepted",
                           "true", "false");
  node_respond_json(req, 400, body, NULL);
  json_decref(body);
  return -1;
}

static void delete_worker(node *n, http_request *req, const char *name) {
  int purge;
  if (read_purge(req, name, &purge) != 0) return;
  int rc = node_registry_delete(n->registry, name);
  if (rc == -ENOENT) {
    respond_unknown_worker(req, name);
    return;
  }
  if (rc != 0) {
    log_write(LOG_ERROR, name, NULL, NULL, "registry write failed: %s",
              node_registry_errmsg(n->registry));
    node_respond_error(req, 500, "registry write failed");
    return;
  }
  node_procs_broadcast_changed(n, name);
  node_egress_forget(n, name);
  node_cordons_worker_deleted(n, name);
  log_write(LOG_INFO, name, NULL, NULL, "deleted");
  /* The facet outlives a delete unless the operator asks for it to go. */
  node_event_new(n, "delete", name, json_pack("{s:b}", "purge", purge));
  if (purge && node_facet_purge(n, name) != 0) {
    node_respond_error(req, 500, "worker deleted, but its facet could not be purged");
    return;
  }
  json_t *body = json_pack("{s:s, s:b}", "deleted", name, "facet_purged", purge);
  node_respond_json(req, 200, body, NULL);
  json_decref(body);
}

static void on_deployed(node *n, void *data, int status, json_t *body) {
  const char *name = json_string_value(json_object_get(body, "name"));
  if ((status == 200 || status == 201) && name)
    node_event_new(n, "deploy", name,
                   json_pack("{s:O?, s:b}", "version", json_object_get(body, "version"), "created",
                             status == 201));
  node_respond_json(data, status, body, NULL);
}

static void put_worker(node *n, http_request *req, const char *name) {
  json_t *spec, *error;
  int status = node_spec_parse(http_request_header(req, "Content-Type"), req->body,
                               req->body_len, &spec, &error);
  if (status != 0) {
    const char *msg = json_string_value(json_object_get(error, "error"));
    log_write(LOG_INFO, name, req->id, NULL, "deploy rejected: %s", msg ? msg : "bad request");
    node_respond_json(req, status, error, NULL);
    json_decref(error);
    return;
  }
  node_egress_deploy(n, name, spec, on_deployed, req);
}

void node_respond_invalid_name(http_request *req, const char *name) {
  /* The name is echoed only when it is text jansson accepts (UTF-8). */
  json_t *body = json_pack("{s:s, s:s?}", "error",
                           "invalid worker name: must match [a-z0-9][a-z0-9-]{0,62}", "name", name);
  if (body == NULL) body = json_pack("{s:s}", "error", "invalid worker name");
  node_respond_json(req, 400, body, NULL);
  json_decref(body);
}

static void worker_route(node *n, http_request *req, const char *name) {
  const char *m = req->method;
  int get = strcmp(m, "GET") == 0, put = strcmp(m, "PUT") == 0, del = strcmp(m, "DELETE") == 0;
  if (!get && !put && !del) {
    node_respond_method(req, "GET, PUT, DELETE");
    return;
  }
  if (!worker_name_valid(name, strlen(name))) {
    node_respond_invalid_name(req, name);
    return;
  }
  if (get) get_worker(n, req, name);
  else if (put) put_worker(n, req, name);
  else delete_worker(n, req, name);
}

/* /v1/workers/{name}/<sub>: returns 0 when no sub-route matches. */
static int worker_subroute(node *n, http_request *req, const char *rest) {
  const char *slash = strchr(rest, '/');
  if (slash == NULL) return 0;
  char *name = xstrndup(rest, (size_t)(slash - rest));
  int handled = node_facet_route(n, req, name, slash + 1);
  free(name);
  return handled;
}

/* Before the first "ready", every process must be up; after it, one serving
 * process is enough: a crash or a rolling restart (one process at a time)
 * must not take the node out of a load balancer. */
static int node_ready(const node *n) {
  if (n->state != NODE_SERVING) return 0;
  if (!n->ready_logged) return node_procs_all_ready(n);
  for (int i = 0; i < n->n_procs; i++)
    if (n->procs[i].state == NODE_PROC_READY) return node_egress_ready(n);
  return 0;
}

static void health_route(node *n, http_request *req, int readyz) {
  if (strcmp(req->method, "GET") != 0) {
    node_respond_method(req, "GET");
    return;
  }
  if (!readyz) {
    json_t *body = json_pack("{s:b}", "ok", 1);
    node_respond_json(req, 200, body, NULL);
    json_decref(body);
    return;
  }
  int ready = node_ready(n);
  json_t *body = ready ? json_pack("{s:b}", "ready", 1)
                       : json_pack("{s:b, s:s}", "ready", 0, "error",
                                   n->state != NODE_SERVING ? (n->drain_exit ? "the node is shutting down"
                                                          : "the node is draining")
                                   : n->ready_logged ? "no worker process is ready"
                                                     : "worker processes are starting");
  node_respond_json(req, ready ? 200 : 503, body, NULL);
  json_decref(body);
}

static void route(node *n, http_request *req, const char *path) {
  if (strcmp(path, "/healthz") == 0 || strcmp(path, "/readyz") == 0) {
    health_route(n, req, path[1] == 'r');
    return;
  }
  if (!authorized(n, req)) {
    node_respond_error(req, 401, "missing or invalid bearer token");
    return;
  }
  static const char prefix[] = "/v1/workers/";
  if (strcmp(path, "/v1/node") == 0) {
    if (strcmp(req->method, "GET") != 0) node_respond_method(req, "GET");
    else get_node(n, req);
  } else if (node_drain_route(n, req, path) || node_metrics_route(n, req, path) ||
             node_events_route(n, req, path)) {
    /* answered */
  } else if (strcmp(path, "/v1/workers") == 0) {
    if (strcmp(req->method, "GET") != 0) node_respond_method(req, "GET");
    else list_workers(n, req);
  } else if (strcmp(path, "/v1/run") == 0) {
    if (strcmp(req->method, "POST") != 0) node_respond_method(req, "POST");
    else node_run(n, req);
  } else if (strncmp(path, prefix, sizeof prefix - 1) == 0 &&
             strchr(path + sizeof prefix - 1, '/') == NULL) {
    worker_route(n, req, path + sizeof prefix - 1);
  } else if (node_tenants_route(n, req, path)) {
    /* answered */
  } else if (node_egress_route(n, req, path)) {
    /* answered */
  } else if (strncmp(path, prefix, sizeof prefix - 1) == 0 && worker_subroute(n, req, path + sizeof prefix - 1)) {
    /* answered */
  } else {
    json_t *body = json_pack("{s:s, s:s?}", "error", "not found", "path", path);
    if (body == NULL) body = json_pack("{s:s}", "error", "not found");
    node_respond_json(req, 404, body, NULL);
    json_decref(body);
  }
}

static void on_request(http_server *s, http_request *req) {
  node *n = s->data;
  /* The query string plays no part in routing. */
  char *path = xstrndup(req->target, strcspn(req->target, "?#"));
  if (req->body_streamed) {
    /* The health checks read no body: they answer at once, and the server
     * closes the connection instead of reading the rest. */
    int health = strcmp(path, "/healthz") == 0 || strcmp(path, "/readyz") == 0;
    if (health || !authorized(n, req)) {
      route(n, req, path);
    } else if (http_request_buffer_body(req) != 0) {
      /* Only a client that already went away gets here; this frees req. */
      node_respond_error(req, 500, "could not read the request body");
    } /* else the whole request comes back here once its body is in */
    free(path);
    return;
  }
  log_write(LOG_DEBUG, NULL, req->id, NULL, "control %s %s", req->method, path);
  route(n, req, path);
  free(path);
}

int node_control_start(node *n, char **err) {
  http_server_config config = {
      .max_body_bytes = CONTROL_MAX_BODY,
      .stream_body_above = CONTROL_AUTH_BEFORE_BODY,
      .server_name = "edgenode",
  };
  int rc = http_server_init(&n->control, n->loop, &config, on_request, n);
  if (rc != 0) {
    *err = xasprintf("control API: %s", uv_strerror(rc));
    return rc;
  }
  rc = http_server_listen(&n->control, n->cfg.control_host, n->cfg.control_port);
  const char *host = n->cfg.control_host;
  if (rc != 0) {
    *err = xasprintf(strchr(host, ':') ? "control API [%s]:%d: %s" : "control API %s:%d: %s",
                     host, n->cfg.control_port, uv_strerror(rc));
    return rc;
  }
  n->control_open = 1;
  int port = http_server_port(&n->control);
  snprintf(n->control_addr, sizeof n->control_addr, strchr(host, ':') ? "[%s]:%d" : "%s:%d",
           host, port);
  return 0;
}
