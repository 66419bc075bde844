/*
 * GET and PUT /v1/routes: the ingress routes (host patterns and paths to
 * workers, http.h's http_routes), stored in node.db and given to every
 * worker process, which routes by them before the first-label rule. A PUT
 * replaces the whole list; it is checked by the parser the worker processes
 * use, so that what is stored is what they apply. Routes are the node's
 * own: in a fleet each node has its list (docs/control-api.md).
 */
#include <stdlib.h>
#include <string.h>

#include "node.h"

int node_routes_load(node *n) {
  json_t *routes = node_db_routes_get(n->db, NULL);
  if (routes == NULL) return -EIO;
  json_decref(n->routes);
  n->routes = json_pack("{s:o}", "routes", routes);
  return 0;
}

static void get_routes(node *n, http_request *req) {
  int64_t at = 0;
  json_t *routes = node_db_routes_get(n->db, &at);
  if (routes == NULL) {
    log_error("node.db: reading the routes failed: %s", node_db_errmsg(n->db));
    node_respond_error(req, 500, "registry read failed");
    return;
  }
  char updated[32] = "";
  if (at) node_iso8601(at, updated);
  json_t *body = json_pack("{s:o, s:s?}", "routes", routes, "updated_at", at ? updated : NULL);
  node_respond_json(req, 200, body, NULL);
  json_decref(body);
}

/* The list of a body {"routes": [...]}, checked; NULL with the 400 answered. */
static json_t *read_routes(http_request *req) {
  json_error_t jerr;
  json_t *body = json_loadb(req->body ? (const char *)req->body : "", req->body_len, 0, &jerr);
  char *why = NULL;
  if (!json_is_object(body)) why = xstrdup("the body must be a JSON object {\"routes\": [...]}");
  const char *key;
  json_t *v;
  json_object_foreach(body, key, v) {
    if (why == NULL && strcmp(key, "routes") != 0)
      why = xasprintf("unknown key \"%s\" (expected routes)", key);
  }
  json_t *routes = json_object_get(body, "routes");
  if (why == NULL) {
    http_routes *t = http_routes_parse(routes, &why);
    http_routes_free(t);
  }
  if (why == NULL) {
    json_incref(routes);
    json_decref(body);
    return routes;
  }
  log_write(LOG_INFO, NULL, req->id, NULL, "routes rejected: %s", why);
  node_respond_error(req, 400, why);
  free(why);
  json_decref(body);
  return NULL;
}

static void put_routes(node *n, http_request *req) {
  json_t *routes = read_routes(req);
  if (routes == NULL) return;
  if (node_db_routes_put(n->db, routes, time_now_ms()) != 0) {
    log_error("node.db: storing the routes failed: %s", node_db_errmsg(n->db));
    node_respond_error(req, 500, "registry write failed");
    json_decref(routes);
    return;
  }
  json_decref(n->routes);
  n->routes = json_pack("{s:o}", "routes", routes);
  node_procs_send_all(n, PROTO_ROUTES, n->routes);
  size_t count = json_array_size(routes);
  node_event_new(n, "routes", NULL, json_pack("{s:I}", "routes", (json_int_t)count));
  log_write(LOG_INFO, NULL, req->id, NULL, "ingress routes replaced: %zu", count);
  get_routes(n, req);
}

int node_routes_route(node *n, http_request *req, const char *path) {
  if (strcmp(path, "/v1/routes") != 0) return 0;
  if (strcmp(req->method, "GET") == 0) get_routes(n, req);
  else if (strcmp(req->method, "PUT") == 0) put_routes(n, req);
  else node_respond_method(req, "GET, PUT");
  return 1;
}
