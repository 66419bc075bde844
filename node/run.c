/*
 * POST /v1/run: one-shot execution for platforms that do not deploy a
 * parent worker. The body is a deploy body (main_module, modules, limits)
 * plus what to run:
 *   "request": {"method", "url", "headers", "body", "body_encoding"}  (default GET /)
 *   "input": <json>   calls the module's run(input, env) instead
 *   "env": {...}      plain values for env
 *   "egress": [rules] what its fetch() may reach, in the workers' format
 *   "as": "WORKER"    a deployed worker whose secret grants the rules borrow
 *   "facet": "NAME"   a named facet as env.DB, kept across runs
 * A ready worker process (round robin) runs it in a fresh isolate that is
 * destroyed afterwards (PROTO_RUN) and the answer is its response as JSON,
 * {"status", "headers", "body"} (or {"result"} for run(input, env)), with
 * its console lines, CPU and wall time.
 *
 * A run with egress rules has a policy of its own in the egress process,
 * "run:<request id>", in force before the run starts (the egress answers
 * its push) and removed when the run's answer comes back. A run has no
 * grants of its own: secrets are granted to workers, so a run borrows the
 * grants of the worker it names with "as". Revoking that worker's grant
 * revokes the runs' too, and an operator grants nothing new to let agents
 * call a tool: the tool's credentials stay where the worker's are.
 *
 * GET /v1/run/facets and DELETE /v1/run/facets/NAME list and delete the
 * named facets (DATA/facets/_run/NAME.sqlite).
 */
#include <errno.h>
#include <string.h>
#include <strings.h>

#include "egress.h"
#include "facets.h"
#include "node.h"

/* One run between its parse and its answer. */
typedef struct run_call {
  http_request *req;
  json_t *spec;  /* what the worker process is sent */
  char *policy;  /* "run:<id>" while its egress policy is in force, or NULL */
} run_call;

static void run_call_free(run_call *c) {
  json_decref(c->spec);
  free(c->policy);
  free(c);
}

/* Past the run's own wall-time limit, the worker process answers 504 itself;
 * this only covers a process that never answers. */
#define RUN_REPLY_MARGIN_MS 5000

static void answer(node *n, http_request *req, int status, json_t *result);

static void on_ran(node *n, void *data, int status, json_t *result) {
  run_call *c = data;
  if (c->policy) node_egress_push(n, c->policy, NULL);
  answer(n, c->req, status, result);
  run_call_free(c);
}

static void answer(node *n, http_request *req, int status, json_t *result) {
  if (status != 0) node_stats_count_run(n, 503, NULL);
  if (status == UV_EAGAIN) {
    node_respond_error(req, 503, "no worker process is ready; try again");
    return;
  }
  if (status == UV_ETIMEDOUT) {
    node_respond_error(req, 504, "the worker process did not answer in time");
    return;
  }
  if (status != 0) {
    node_respond_error(req, 503, "the worker process running it went away");
    return;
  }
  json_t *http_status = json_object_get(result, "http_status");
  json_t *body = json_object_get(result, "body");
  if (!json_is_integer(http_status) || !json_is_object(body)) {
    const char *msg = json_string_value(json_object_get(result, "error"));
    json_t *err = json_pack("{s:s}", "error", msg ? msg : "malformed answer from the worker process");
    node_stats_count_run(n, 500, NULL);
    node_respond_json(req, 500, err, NULL);
    json_decref(err);
    return;
  }
  node_stats_count_run(n, (int)json_integer_value(http_status), body);
  node_respond_json(req, (int)json_integer_value(http_status), body, NULL);
}

/* Integers past int64 are valid JSON, and JavaScript numbers are doubles
 * anyway: a body holding one is read again with every number a double.
 * Strings may hold U+0000: the code gets them as they are. */
static json_t *load_body(const uint8_t *raw, size_t len, json_error_t *jerr) {
  size_t flags = JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL;
  return json_load_wide((const char *)raw, len, flags, jerr);
}

/* A header as the Fetch standard allows it: a token name and a value without
 * CR, LF or NUL (which would split or end the header on the wire). */
static const char *header_problem(const char *name, size_t name_len, json_t *value) {
  if (!json_is_string(value)) return "values must be strings";
  if (!http_token(name, name_len))
    return "a header name must be a non-empty token (letters, digits and !#$%&'*+-.^_`|~)";
  if (strcspn(json_string_value(value), "\r\n") != json_string_length(value))
    return "a header value must not contain CR, LF or NUL";
  return NULL;
}

static const char *headers_problem(json_t *hs) {
  const char *why = NULL, *key;
  json_t *v;
  size_t i;
  if (json_is_object(hs)) {
    json_object_foreach(hs, key, v) {
      if ((why = header_problem(key, strlen(key), v))) return why;
    }
  } else if (json_is_array(hs)) {
    json_array_foreach(hs, i, v) {
      json_t *name = json_array_get(v, 0);
      if (!json_is_array(v) || json_array_size(v) != 2 || !json_is_string(name))
        return "each entry must be [name, value] strings";
      why = header_problem(json_string_value(name), json_string_length(name), json_array_get(v, 1));
      if (why) return why;
    }
  } else if (hs != NULL) {
    return "must be an object or an array of [name, value] pairs";
  }
  return NULL;
}

/* The first malformed field of "request": why, with *field naming it; NULL
 * when all are fine. The worker process checks their types again. */
static const char *field_problem(json_t *r, const char **field) {
  json_t *method = json_object_get(r, "method"), *url = json_object_get(r, "url");
  *field = "request.method";
  if (method && !(json_is_string(method) &&
                  http_token(json_string_value(method), json_string_length(method))))
    return "must be an HTTP method (a token such as GET or POST)";
  *field = "request.url";
  if (url && !json_is_string(url)) return "must be a string";
  if (url) {
    /* The request's URL as a client could send it: absolute http(s), encoded. */
    egress_url u;
    const char *why = NULL;
    if (egress_url_parse(json_string_value(url), json_string_length(url), &u, &why) != 0)
      return why;
    egress_url_free(&u);
  }
  *field = "request.headers";
  return headers_problem(json_object_get(r, "headers"));
}

/* Checks "request" the way a deploy body is checked: every key known, every
 * field well formed. NULL, or the error body naming the field. */
static json_t *request_problem(json_t *r) {
  static const char *const keys[] = {"method", "url", "headers", "body", "body_encoding"};
  const char *key;
  json_t *v;
  json_object_foreach(r, key, v) {
    size_t i = 0;
    while (i < ARRAY_SIZE(keys) && strcmp(key, keys[i]) != 0) i++;
    if (i < ARRAY_SIZE(keys)) continue;
    char *field = xasprintf("request.%s", key);
    json_t *e = json_pack("{s:s++, s:s}", "error", "unknown key \"", field,
                          "\" (expected method, url, headers, body, body_encoding)", "key", field);
    free(field);
    return e;
  }
  const char *field = NULL;
  const char *why = field_problem(r, &field);
  if (why == NULL) return NULL;
  return json_pack("{s:s++, s:s}", "error", field, ": ", why, "key", field);
}

/* 1 when a "tail_id" is given and is not one GET /v1/runs/{id}/tail takes. */
static int tail_id_problem(json_t *id) {
  if (id == NULL) return 0;
  return !json_is_string(id) || !node_run_tail_id_valid(json_string_value(id), json_string_length(id));
}

static json_t *keyed_error(const char *key, const char *message) {
  return json_pack("{s:s, s:s}", "error", message, "key", key);
}

/* "egress" and "as": valid rules, injecting only secrets granted to the
 * worker "as" names. NULL, or the error body. */
static json_t *egress_problem(node *n, json_t *rules, json_t *as) {
  if (as && !rules)
    return keyed_error("as", "\"as\" lends a worker's secret grants to \"egress\" rules: "
                             "give the rules too");
  if (!rules) return NULL;
  if (!json_is_array(rules))
    return keyed_error("egress",
                       "egress: must be an array of rules, as for /v1/workers/{name}/egress");
  const char *worker = json_string_value(as);
  if (as && (worker == NULL || !worker_name_valid(worker, json_string_length(as))))
    return keyed_error("as", "as: must be a worker name ([a-z0-9][a-z0-9-]{0,62})");
  if (worker && node_db_worker_exists(n->db, worker) != 1)
    return json_pack("{s:s+, s:s}", "error", "as: unknown worker ", worker, "key", "as");
  char *why = node_db_rules_problem(rules);
  if (why) {
    json_t *e = keyed_error("egress", why); /* "egress[i].field: ..." names the rule */
    free(why);
    return e;
  }
  /* No worker is named "-": a run without "as" has no grants at all. */
  why = node_db_rules_ungranted(n->db, worker ? worker : "-", rules);
  if (why == NULL) return NULL;
  json_t *e = worker ? json_pack("{s:s+, s:s}", "error", "egress: ", why, "key", "egress")
                     : keyed_error("egress", "egress: a rule injects a secret, and a run has no "
                                             "grants of its own: name with \"as\" a deployed "
                                             "worker the secret is granted to");
  free(why);
  return e;
}

static json_t *facet_problem(json_t *facet) {
  if (facet && !(json_is_string(facet) &&
                 facet_id_valid(json_string_value(facet), json_string_length(facet))))
    return keyed_error("facet", "facet: must be a name of 1 to 64 letters, digits, _ and -");
  return NULL;
}

/* What is wrong with the keys taken out into `extra` and with the deploy
 * body left in `root`: NULL, or the error body. */
static json_t *extra_problem(node *n, json_t *root, json_t *extra) {
  json_t *request = json_object_get(extra, "request");
  json_t *env = json_object_get(extra, "env");
  const char *problem = NULL;
  if (request && !json_is_object(request)) problem = "\"request\" must be an object";
  else if (env && !json_is_object(env)) problem = "\"env\" must be an object of plain values";
  else if (request && json_object_get(extra, "input"))
    problem = "give either \"request\" (a fetch) or \"input\" (run(input, env)), not both";
  else if (tail_id_problem(json_object_get(extra, "tail_id")))
    problem = "\"tail_id\" must be 1 to 64 letters, digits, '-', '_' or '.' (GET /v1/runs/{tail_id}/tail)";
  else if (json_object_size(json_object_get(root, "bindings")) > 0)
    problem = "bindings are not available to /v1/run (pass plain values in \"env\")";
  if (problem) return json_pack("{s:s}", "error", problem);
  json_t *e = request ? request_problem(request) : NULL;
  if (e == NULL) e = facet_problem(json_object_get(extra, "facet"));
  if (e == NULL)
    e = egress_problem(n, json_object_get(extra, "egress"), json_object_get(extra, "as"));
  return e;
}

/* Takes "request", "input" and "env" out of a JSON body; the rest is a deploy
 * body. Returns 0, or an HTTP status with *error set. */
static int split_body(node *n, const uint8_t *raw, size_t len, json_t **extra,
                      char **deploy_text, json_t **error) {
  if (len == 0) { /* jansson would only say "wrong arguments" */
    *error = json_pack("{s:s}", "error", "the body is empty: send a JSON object with \"modules\"");
    return 400;
  }
  json_error_t jerr;
  json_t *root = load_body(raw, len, &jerr);
  if (root == NULL) {
    *error = json_pack("{s:s+, s:i, s:i}", "error", "invalid JSON: ", jerr.text, "line", jerr.line,
                       "column", jerr.column);
    return 400;
  }
  if (!json_is_object(root)) {
    json_decref(root);
    *error = json_pack("{s:s}", "error", "the body must be a JSON object");
    return 400;
  }
  *extra = json_object();
  static const char *const keys[] = {"request", "input", "env", "egress", "as", "facet", "tail_id"};
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
    json_t *v = json_object_get(root, keys[i]);
    if (v == NULL) continue;
    json_object_set(*extra, keys[i], v);
    json_object_del(root, keys[i]);
  }
  json_t *problem = extra_problem(n, root, *extra);
  if (problem) {
    json_decref(root);
    json_decref(*extra);
    *extra = NULL;
    *error = problem;
    return 400;
  }
  *deploy_text = json_dumps(root, JSON_COMPACT);
  json_decref(root);
  if (*deploy_text == NULL) {
    json_decref(*extra);
    *extra = NULL;
    *error = json_pack("{s:s}", "error", "the body cannot be re-encoded");
    return 400;
  }
  return 0;
}

static void start_run(node *n, run_call *c) {
  json_int_t wall =
      json_integer_value(json_object_get(json_object_get(c->spec, "limits"), "wall_ms"));
  uint64_t timeout = (uint64_t)(wall > 0 ? wall : PROTO_SPEC_DEFAULT_WALL_MS) + RUN_REPLY_MARGIN_MS;
  node_procs_request(n, PROTO_RUN, c->spec, timeout, on_ran, c);
}

/* The run's egress policy is in force (or could not be set: then no run). */
static void on_policy_set(node *n, void *data, int status, json_t *body) {
  run_call *c = data;
  if (status == 0) {
    start_run(n, c);
    return;
  }
  node_egress_push(n, c->policy, NULL);
  node_respond_json(c->req, status, body, NULL);
  run_call_free(c);
}

void node_run(node *n, http_request *req) {
  /* A drained node never serves again: "try again" would mislead. */
  if (n->state == NODE_DRAINING) {
    node_stats_count_run(n, 503, NULL);
    node_respond_error(req, 503, "the node is shutting down");
    return;
  }
  const char *type = http_request_header(req, "Content-Type");
  int is_json = type && strncasecmp(type, "application/json", 16) == 0;
  json_t *extra = NULL, *spec = NULL, *error = NULL;
  char *deploy_text = NULL;
  int status = 0;
  if (is_json) status = split_body(n, req->body, req->body_len, &extra, &deploy_text, &error);
  if (status == 0) {
    const uint8_t *body = is_json ? (const uint8_t *)deploy_text : req->body;
    size_t len = is_json ? strlen(deploy_text) : req->body_len;
    status = node_spec_parse(type, body, len, &spec, &error);
  }
  free(deploy_text);
  if (status != 0) {
    const char *msg = json_string_value(json_object_get(error, "error"));
    log_write(LOG_INFO, NULL, req->id, NULL, "run rejected: %s", msg ? msg : "bad request");
    node_stats_count_run(n, status, error);
    node_respond_json(req, status, error, NULL);
    json_decref(error);
    json_decref(extra);
    return;
  }
  json_object_del(spec, "bindings");
  json_t *rules = extra ? json_incref(json_object_get(extra, "egress")) : NULL;
  json_t *as = extra ? json_incref(json_object_get(extra, "as")) : NULL;
  if (extra) {
    json_object_del(extra, "as");
    json_object_update(spec, extra);
  }
  json_decref(extra);
  run_call *c = xcalloc(1, sizeof *c);
  c->req = req;
  c->spec = spec;
  /* Its console lines in the node's log carry the control request's id. */
  json_object_set_new(spec, "run_id", json_string(req->id));
  if (rules == NULL) {
    start_run(n, c);
  } else {
    /* The worker process needs only to know it may fetch: the egress judges. */
    json_object_set_new(spec, "egress", json_true());
    c->policy = xasprintf("run:%s", req->id);
    json_t *body = json_pack("{s:{s:O}}", "workers", c->policy, rules);
    if (as) json_object_set_new(body, "run_as", json_pack("{s:O}", c->policy, as));
    node_egress_ask_secret(n, NODE_EGRESS_POLICY_SET, body, on_policy_set, c);
    json_decref(body);
  }
  json_decref(rules);
  json_decref(as);
}

/* ---- GET /v1/run/facets, DELETE /v1/run/facets/NAME ---- */

static void delete_run_facet(node *n, http_request *req, const char *name) {
  int rc = facet_run_delete(n->data_dir, name);
  if (rc == 0) {
    log_write(LOG_INFO, NULL, req->id, NULL, "run facet %s deleted", name);
    json_t *body = json_pack("{s:s}", "deleted", name);
    node_respond_json(req, 200, body, NULL);
    json_decref(body);
  } else if (rc == -EINVAL) {
    node_respond_error(req, 400, "invalid facet name: must be 1 to 64 letters, digits, _ and -");
  } else if (rc == -ENOENT) {
    json_t *body = json_pack("{s:s, s:s}", "error", "no such run facet", "name", name);
    node_respond_json(req, 404, body, NULL);
    json_decref(body);
  } else {
    log_write(LOG_ERROR, NULL, req->id, NULL, "run facet %s: delete: %s", name, strerror(-rc));
    node_respond_error(req, 500, "the facet could not be deleted");
  }
}

int node_run_facets_route(node *n, http_request *req, const char *path) {
  static const char prefix[] = "/v1/run/facets";
  size_t len = sizeof prefix - 1;
  if (strncmp(path, prefix, len) != 0 || (path[len] != '\0' && path[len] != '/')) return 0;
  if (path[len] == '\0' || path[len + 1] == '\0') {
    if (strcmp(req->method, "GET") != 0) {
      node_respond_method(req, "GET");
      return 1;
    }
    json_t *body = json_pack("{s:o}", "facets", facet_run_list(n->data_dir));
    node_respond_json(req, 200, body, NULL);
    json_decref(body);
    return 1;
  }
  if (strcmp(req->method, "DELETE") != 0) node_respond_method(req, "DELETE");
  else delete_run_facet(n, req, path + len + 1);
  return 1;
}
