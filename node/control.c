/*
 * The control API: its listener, the bearer token check, the health checks
 * and GET /v1/node, and the dispatcher that hands every other request to the
 * route module whose path it is (the table `routes`). Route modules answer
 * through route.c and never call back into this file; errors are
 * {"error": ...} objects.
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

/* The caps of both listeners; each worker entry has its own ingress counts. */
static json_t *connections_json(const node *n) {
  const node_config *c = &n->cfg;
  json_t *control = http_server_report(&n->control);
  json_object_set_new(control, "configured_max_connections",
                      json_integer((json_int_t)c->control_max_connections));
  return json_pack("{s:I, s:i, s:o, s:{s:I, s:I, s:I, s:I}}", "nofile", (json_int_t)n->nofile,
                   "reserve", NODE_FD_RESERVE, "control", control, "ingress",
                   "max_connections", (json_int_t)c->max_connections,
                   "max_connections_per_addr", (json_int_t)c->max_connections_per_addr,
                   "body_timeout_ms", (json_int_t)c->body_timeout_ms, "body_min_rate",
                   (json_int_t)c->body_min_rate);
}

static void get_node(node *n, http_request *req) {
  char started[32];
  node_iso8601(n->started_at_ms, started);
  json_t *procs = json_array();
  for (int i = 0; i < n->n_procs; i++) {
    const node_proc *p = &n->procs[i];
    char at[32];
    node_iso8601(p->child.started_at_ms, at);
    json_t *entry = json_pack("{s:i, s:i, s:s, s:i, s:s}", "id", p->id, "pid", p->child.pid, "state",
                              node_proc_state_name(p->child.state), "restarts", (int)p->child.restarts,
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
  json_object_set_new(body, "connections", connections_json(n));
  node_dedicated_counts d = node_cordons_counts(n);
  json_object_set_new(body, "dedicated",
                      json_pack("{s:i, s:i, s:I, s:I}", "running", d.running, "max", d.max,
                                "suspensions", (json_int_t)d.suspensions, "idle_exits",
                                (json_int_t)d.idle_exits));
  json_object_set_new(body, "worker_memory_budget_mb",
                      json_integer((json_int_t)(node_worker_memory_budget(n) >> 20)));
  node_respond_json(req, 200, body, NULL);
  json_decref(body);
}

/* /PREFIX{name}/<sub> to the route that takes (n, req, name, sub): 0 when none does. */
static int name_subroute(node *n, http_request *req, const char *path, const char *prefix,
                         int (*sub_route)(node *, http_request *, const char *, const char *)) {
  size_t len = strlen(prefix);
  if (strncmp(path, prefix, len) != 0) return 0;
  const char *rest = path + len, *slash = strchr(rest, '/');
  if (slash == NULL) return 0;
  char *name = xstrndup(rest, (size_t)(slash - rest));
  int handled = sub_route(n, req, name, slash + 1);
  free(name);
  return handled;
}

static int node_route(node *n, http_request *req, const char *path) {
  if (strcmp(path, "/v1/node") != 0) return 0;
  if (strcmp(req->method, "GET") != 0) node_respond_method(req, "GET");
  else get_node(n, req);
  return 1;
}

static int run_route(node *n, http_request *req, const char *path) {
  if (node_run_facets_route(n, req, path)) return 1;
  if (strcmp(path, "/v1/run") != 0) return 0;
  if (strcmp(req->method, "POST") != 0) node_respond_method(req, "POST");
  else node_run(n, req);
  return 1;
}

static int cordon_route(node *n, http_request *req, const char *path) {
  return name_subroute(n, req, path, "/v1/tenants/", node_cordons_route);
}

static int facet_route(node *n, http_request *req, const char *path) {
  return name_subroute(n, req, path, "/v1/workers/", node_facet_route);
}

static int tail_route(node *n, http_request *req, const char *path) {
  return name_subroute(n, req, path, "/v1/workers/", node_tail_route) ||
         name_subroute(n, req, path, "/v1/runs/", node_run_tail_route);
}

static int versions_route(node *n, http_request *req, const char *path) {
  return name_subroute(n, req, path, "/v1/workers/", node_versions_route) ||
         name_subroute(n, req, path, "/v1/workers/", node_traffic_route);
}

/* Every route behind the token, in the order they are tried: each returns 1
 * when it answered (or will answer) the request, 0 when the path is not its. */
static int (*const routes[])(node *, http_request *, const char *) = {
    node_route,         node_drain_route,   node_metrics_route, node_events_route,
    node_workers_route, run_route,          node_tenants_route, cordon_route,
    node_egress_route,  node_secrets_route, facet_route,        node_fleet_route,
    tail_route,
    versions_route,     node_routes_route,
};

/* Before the first "ready", every process must be up; after it, one serving
 * process is enough: a crash or a rolling restart (one process at a time)
 * must not take the node out of a load balancer. */
static int node_ready(const node *n) {
  if (n->state != NODE_SERVING || !node_fleet_ready(n)) return 0;
  if (!n->ready_logged) return node_procs_all_ready(n);
  for (int i = 0; i < n->n_procs; i++)
    if (n->procs[i].child.state == NODE_PROC_READY) return node_egress_ready(n);
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
                                   : !node_fleet_ready(n) ? node_fleet_unready_reason(n)
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
  for (size_t i = 0; i < ARRAY_SIZE(routes); i++)
    if (routes[i](n, req, path)) return;
  json_t *body = json_pack("{s:s, s:s?}", "error", "not found", "path", path);
  if (body == NULL) body = json_pack("{s:s}", "error", "not found");
  node_respond_json(req, 404, body, NULL);
  json_decref(body);
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

/* Streamed answers (tails) end when their client leaves. */
static void on_abort(http_server *s, http_request *req) { node_tail_aborted(s->data, req); }

/*
 * Connections without a token cost the supervisor a descriptor each, and a
 * supervisor out of descriptors can no longer restart a worker process: the
 * cap leaves NODE_FD_RESERVE of RLIMIT_NOFILE for its own work.
 */
static size_t control_max_connections(node *n) {
  size_t budget = fd_connection_budget(n->nofile, NODE_FD_RESERVE);
  uint64_t wanted = (uint64_t)n->cfg.control_max_connections;
  return wanted < budget ? (size_t)wanted : budget;
}

int node_control_start(node *n, char **err) {
  const node_config *cfg = &n->cfg;
  http_server_config config = {
      .max_body_bytes = CONTROL_MAX_BODY,
      .stream_body_above = CONTROL_AUTH_BEFORE_BODY,
      .server_name = "edgenode",
      .body_timeout_ms = (uint64_t)cfg->body_timeout_ms,
      .body_min_rate = node_body_min_rate(cfg),
      .max_connections = control_max_connections(n),
      .max_connections_per_addr = (size_t)cfg->control_max_connections_per_addr,
  };
  int rc = http_server_init(&n->control, n->loop, &config, on_request, n);
  if (rc != 0) {
    *err = xasprintf("control API: %s", uv_strerror(rc));
    return rc;
  }
  n->control.on_abort = on_abort;
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
