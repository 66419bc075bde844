/*
 * POST /v1/run: one-shot execution for platforms that do not deploy a
 * parent worker. The body is a deploy body (main_module, modules, limits)
 * plus what to run:
 *   "request": {"method", "url", "headers", "body", "body_encoding"}  (default GET /)
 *   "input": <json>   calls the module's run(input, env) instead
 *   "env": {...}      plain values for env
 * A ready worker process (round robin) runs it in a fresh isolate that is
 * destroyed afterwards (PROTO_RUN) and the answer is its response as JSON,
 * {"status", "headers", "body"} (or {"result"} for run(input, env)).
 */
#include <string.h>
#include <strings.h>

#include "egress.h"
#include "node.h"

/* Past the run's own wall-time limit, the worker process answers 504 itself;
 * this only covers a process that never answers. */
#define RUN_REPLY_MARGIN_MS 5000

static void on_ran(node *n, void *data, int status, json_t *result) {
  http_request *req = data;
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

/* What is wrong with "request", "input" and "env" (taken out into `extra`)
 * and with the deploy body left in `root`: NULL, or the error body. */
static json_t *extra_problem(json_t *root, json_t *extra) {
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
  return request ? request_problem(request) : NULL;
}

/* Takes "request", "input" and "env" out of a JSON body; the rest is a deploy
 * body. Returns 0, or an HTTP status with *error set. */
static int split_body(const uint8_t *raw, size_t len, json_t **extra, char **deploy_text,
                      json_t **error) {
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
  static const char *const keys[] = {"request", "input", "env", "tail_id"};
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
    json_t *v = json_object_get(root, keys[i]);
    if (v == NULL) continue;
    json_object_set(*extra, keys[i], v);
    json_object_del(root, keys[i]);
  }
  json_t *problem = extra_problem(root, *extra);
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
  if (is_json) status = split_body(req->body, req->body_len, &extra, &deploy_text, &error);
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
  if (extra) json_object_update(spec, extra);
  json_decref(extra);
  json_int_t wall = json_integer_value(json_object_get(json_object_get(spec, "limits"), "wall_ms"));
  uint64_t timeout = (uint64_t)(wall > 0 ? wall : PROTO_SPEC_DEFAULT_WALL_MS) + RUN_REPLY_MARGIN_MS;
  node_procs_request(n, PROTO_RUN, spec, timeout, on_ran, req);
  json_decref(spec);
}
