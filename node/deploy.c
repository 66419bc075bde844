/*
 * Deploying, and the routes of /v1/workers (list, get, deploy, delete). A
 * spec is compiled by a worker process in a throwaway isolate first; only
 * code that passed is committed to node.db, the worker row and its egress
 * rules in one transaction (nothing is stored when either fails), and only
 * then are the worker processes told to drop what they cached for the name
 * and the egress given the new rules.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "facets.h"
#include "node.h"

/* Generated at build time from examples/hello.js (see node/embed.cmake). */
extern const unsigned char node_hello_js[];
extern const size_t node_hello_js_len;

typedef struct deploy_job {
  char *name;
  json_t *spec;
  node_deploy_cb cb;
  void *data;
} deploy_job;

json_t *node_worker_metadata(json_t *row, int with_sizes) {
  char created[32], updated[32];
  node_iso8601(json_integer_value(json_object_get(row, "created_at")), created);
  node_iso8601(json_integer_value(json_object_get(row, "updated_at")), updated);
  json_t *names = json_array();
  json_t *sizes = json_object();
  const char *key;
  json_t *src;
  json_object_foreach(json_object_get(row, "modules"), key, src) {
    json_array_append_new(names, json_string(key));
    json_object_set_new(sizes, key, json_integer((json_int_t)json_string_length(src)));
  }
  json_t *meta = json_pack("{s:O, s:O, s:O, s:o, s:O, s:O, s:s, s:s}",
                           "name", json_object_get(row, "name"),
                           "version", json_object_get(row, "version"),
                           "main_module", json_object_get(row, "main_module"),
                           "modules", names,
                           "limits", json_object_get(row, "limits"),
                           "bindings", json_object_get(row, "bindings"),
                           "created_at", created,
                           "updated_at", updated);
  if (with_sizes && meta) json_object_set(meta, "module_sizes", sizes);
  json_decref(sizes);
  return meta;
}

static void job_done(node *n, deploy_job *job, int status, json_t *body) {
  job->cb(n, job->data, status, body);
  json_decref(body);
  json_decref(job->spec);
  free(job->name);
  free(job);
}

static json_t *error_json(const char *message) { return json_pack("{s:s}", "error", message); }

/* The worker's verdict as the client sees it: message, kind and position. */
static json_t *rejection(json_t *result) {
  const char *msg = json_string_value(json_object_get(result, "error"));
  json_t *body = error_json(msg ? msg : "the code was rejected");
  static const char *const details[] = {"kind", "module", "line", "column"};
  for (size_t i = 0; i < ARRAY_SIZE(details); i++) {
    json_t *v = json_object_get(result, details[i]);
    if (v) json_object_set(body, details[i], v);
  }
  return body;
}

/* In a fleet the record goes to the fleet, and the answer waits until it is
 * applied here, by the same path that applies other nodes' deploys. */
static void on_fleet_committed(node *n, void *data, int status, json_t *body) {
  deploy_job *job = data;
  if (status != 0) {
    const char *msg = json_string_value(json_object_get(body, "error"));
    log_write(LOG_WARN, job->name, NULL, NULL, "deploy not stored: %s", msg ? msg : "fleet error");
    job_done(n, job, status, json_incref(body));
    return;
  }
  /* The answer describes this write's version, even when a newer one from
   * another node was applied here meanwhile. */
  json_t *spec = job->spec;
  int64_t now = time_now_ms();
  json_t *row = json_pack("{s:s, s:O, s:O, s:O, s:O, s:O, s:I, s:I}", "name", job->name, "version",
                          json_object_get(body, "version"), "main_module",
                          json_object_get(spec, "main_module"), "modules",
                          json_object_get(spec, "modules"), "bindings",
                          json_object_get(spec, "bindings"), "limits",
                          json_object_get(spec, "limits"), "created_at", (json_int_t)now,
                          "updated_at", (json_int_t)now);
  json_t *meta = node_worker_metadata(row, 0);
  json_decref(row);
  json_t *rules = json_object_get(spec, "egress");
  if (rules && meta) json_object_set(meta, "egress", rules);
  job_done(n, job, json_is_true(json_object_get(body, "created")) ? 201 : 200, meta);
}

static void commit(node *n, deploy_job *job) {
  if (node_fleet_on(n)) {
    json_t *rules = json_object_get(job->spec, "egress");
    char *why = rules ? node_db_rules_problem(rules) : NULL;
    if (why) { /* refused before anything is written anywhere */
      log_write(LOG_INFO, job->name, NULL, NULL, "deploy rejected: %s", why);
      job_done(n, job, 400, error_json(why));
      free(why);
      return;
    }
    node_fleet_put_worker(n, job->name, job->spec, on_fleet_committed, job);
    return;
  }
  json_t *rules = json_object_get(job->spec, "egress");
  node_db_worker w = node_db_worker_of(job->spec);
  json_t *row = NULL;
  int rc = node_db_worker_put(n->db, job->name, &w, time_now_ms(), &row);
  if (rc == -EINVAL) { /* the egress rules, refused: nothing was stored */
    log_write(LOG_INFO, job->name, NULL, NULL, "deploy rejected: %s", node_db_errmsg(n->db));
    job_done(n, job, 400, error_json(node_db_errmsg(n->db)));
    return;
  }
  if (rc < 0) {
    log_write(LOG_ERROR, job->name, NULL, NULL, "registry write failed: %s",
              node_db_errmsg(n->db));
    job_done(n, job, 500, error_json("registry write failed"));
    return;
  }
  /* Before any process hears of the new version: its facet may be made. */
  int unpurged = facet_unpurge(n->data_dir, job->name);
  if (unpurged != 0)
    log_write(LOG_ERROR, job->name, NULL, NULL, "cannot lift the purge mark of its facet: %s",
              strerror(-unpurged));
  node_procs_broadcast_changed(n, job->name);
  char extra[64];
  snprintf(extra, sizeof extra, "{\"version\":%lld}",
           (long long)json_integer_value(json_object_get(row, "version")));
  log_write(LOG_INFO, job->name, NULL, extra, "deployed");
  if (rules) node_egress_push(n, job->name, rules);
  json_t *meta = node_worker_metadata(row, 0);
  json_decref(row);
  if (rules && meta) json_object_set(meta, "egress", rules);
  job_done(n, job, rc == 1 ? 201 : 200, meta);
}

static void on_validated(node *n, void *data, int status, json_t *result) {
  deploy_job *job = data;
  if (status == UV_EAGAIN) {
    job_done(n, job, 503, error_json("no worker process is ready to validate the code"));
    return;
  }
  if (status == UV_ETIMEDOUT) {
    job_done(n, job, 503, error_json("validating the code timed out"));
    return;
  }
  if (status != 0) {
    job_done(n, job, 503,
             error_json("the worker process validating the code went away; try again"));
    return;
  }
  if (!json_is_true(json_object_get(result, "ok"))) {
    const char *kind = json_string_value(json_object_get(result, "kind"));
    int internal = kind && strcmp(kind, "internal") == 0;
    const char *msg = json_string_value(json_object_get(result, "error"));
    log_write(LOG_INFO, job->name, NULL, NULL, "deploy rejected: %s", msg ? msg : "invalid code");
    job_done(n, job, internal ? 500 : 400, rejection(result));
    return;
  }
  commit(n, job);
}

void node_deploy(node *n, const char *name, json_t *spec, node_deploy_cb cb, void *data) {
  if (n->state == NODE_DRAINING) {
    json_t *body = error_json("the node is shutting down");
    cb(n, data, 503, body);
    json_decref(body);
    json_decref(spec);
    return;
  }
  deploy_job *job = xcalloc(1, sizeof *job);
  job->name = xstrdup(name);
  job->spec = spec;
  job->cb = cb;
  job->data = data;
  /* PROTO_VALIDATE carries the same body as PROTO_WORKER_SPEC; no version yet. */
  json_t *msg = json_deep_copy(spec);
  json_object_del(msg, "egress");
  json_object_del(msg, "rollback_of");
  json_object_set_new(msg, "name", json_string(name));
  json_object_set_new(msg, "version", json_integer(0));
  node_procs_validate(n, msg, on_validated, job);
  json_decref(msg);
}

/* ---- routes: /v1/workers and /v1/workers/{name} ------------------------------------- */

static void list_workers(node *n, http_request *req) {
  json_t *rows;
  if (node_db_worker_list(n->db, &rows) != 0) {
    log_error("registry read failed: %s", node_db_errmsg(n->db));
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
  int rc = node_db_worker_get(n->db, name, &row);
  if (rc == -ENOENT) {
    node_respond_unknown_worker(req, name);
    return;
  }
  if (rc != 0) {
    log_write(LOG_ERROR, name, NULL, NULL, "registry read failed: %s",
              node_db_errmsg(n->db));
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

typedef struct delete_job {
  http_request *req;
  char *name;
  int purge;
} delete_job;

static void deleted(node *n, http_request *req, const char *name, int purge) {
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

static void on_fleet_deleted(node *n, void *data, int status, json_t *body) {
  delete_job *job = data;
  if (status == 404) node_respond_unknown_worker(job->req, job->name);
  else if (status != 0) node_respond_json(job->req, status, body, NULL);
  else deleted(n, job->req, job->name, job->purge);
  free(job->name);
  free(job);
}

static void delete_worker(node *n, http_request *req, const char *name) {
  int purge;
  if (read_purge(req, name, &purge) != 0) return;
  if (node_fleet_on(n)) {
    delete_job *job = xcalloc(1, sizeof *job);
    job->req = req;
    job->name = xstrdup(name);
    job->purge = purge;
    node_fleet_delete_worker(n, name, on_fleet_deleted, job);
    return;
  }
  int rc = node_db_worker_delete(n->db, name);
  if (rc == -ENOENT) {
    node_respond_unknown_worker(req, name);
    return;
  }
  if (rc != 0) {
    log_write(LOG_ERROR, name, NULL, NULL, "registry write failed: %s",
              node_db_errmsg(n->db));
    node_respond_error(req, 500, "registry write failed");
    return;
  }
  node_procs_broadcast_changed(n, name);
  node_egress_push(n, name, NULL);
  node_cordons_worker_deleted(n, name);
  log_write(LOG_INFO, name, NULL, NULL, "deleted");
  deleted(n, req, name, purge);
}

static void on_deployed(node *n, void *data, int status, json_t *body) {
  const char *name = json_string_value(json_object_get(body, "name"));
  if ((status == 200 || status == 201) && name)
    node_event_new(n, "deploy", name,
                   json_pack("{s:O?, s:b}", "version", json_object_get(body, "version"), "created",
                             status == 201));
  node_respond_json(data, status, body, NULL);
}

/* A spec whose egress rules inject a secret not granted to the worker is
 * answered 400 (and freed): 1 then, else 0. */
static int refused_ungranted(node *n, http_request *req, const char *name, json_t *spec,
                             const char *what) {
  json_t *rules = json_object_get(spec, "egress");
  char *why = rules ? node_db_rules_ungranted(n->db, name, rules) : NULL;
  if (why == NULL) return 0;
  log_write(LOG_INFO, name, req->id, NULL, "%s rejected: %s", what, why);
  node_respond_error(req, 400, why);
  free(why);
  json_decref(spec);
  return 1;
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
  if (refused_ungranted(n, req, name, spec, "deploy")) return;
  node_deploy(n, name, spec, on_deployed, req);
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

int node_workers_route(node *n, http_request *req, const char *path) {
  static const char prefix[] = "/v1/workers/";
  if (strcmp(path, "/v1/workers") == 0) {
    if (strcmp(req->method, "GET") != 0) node_respond_method(req, "GET");
    else list_workers(n, req);
    return 1;
  }
  if (strncmp(path, prefix, sizeof prefix - 1) != 0 || strchr(path + sizeof prefix - 1, '/') != NULL)
    return 0;
  worker_route(n, req, path + sizeof prefix - 1);
  return 1;
}

/* ---- routes: /v1/workers/{name}/versions and /rollback ---------------------------- */

/*
 * A rollback is a new version carrying N's code and spec, never a pointer
 * back to N: versions only go up, so a worker process that cached N (or
 * anything since) sees a version it has not got and fetches it, exactly as
 * after a deploy; in a fleet it is one more write-once version of the
 * record. The history says which version it restored (rollback_of).
 */
typedef struct rollback_job {
  http_request *req;
  int64_t from;
} rollback_job;

static void list_versions(node *n, http_request *req, const char *name) {
  json_t *row = NULL, *rows = NULL;
  int rc = node_db_worker_get(n->db, name, &row);
  if (rc == -ENOENT) {
    node_respond_unknown_worker(req, name);
    return;
  }
  if (rc != 0 || node_db_versions_list(n->db, name, &rows) != 0) {
    json_decref(row);
    log_write(LOG_ERROR, name, req->id, NULL, "registry read failed: %s", node_db_errmsg(n->db));
    node_respond_error(req, 500, "registry read failed");
    return;
  }
  size_t i;
  json_t *v;
  json_array_foreach(rows, i, v) {
    char at[32];
    node_iso8601(json_integer_value(json_object_get(v, "created_at")), at);
    json_object_set_new(v, "created_at", json_string(at));
  }
  json_t *body = json_pack("{s:s, s:O, s:i, s:o}", "name", name, "current",
                           json_object_get(row, "version"), "kept", NODE_DB_VERSIONS_KEPT,
                           "versions", rows);
  json_decref(row);
  node_respond_json(req, 200, body, NULL);
  json_decref(body);
}

static void on_rolled_back(node *n, void *data, int status, json_t *body) {
  rollback_job *job = data;
  const char *name = json_string_value(json_object_get(body, "name"));
  if ((status == 200 || status == 201) && name) {
    json_object_set_new(body, "rollback_of", json_integer(job->from));
    node_event_new(n, "rollback", name,
                   json_pack("{s:O?, s:I}", "version", json_object_get(body, "version"),
                             "rollback_of", (json_int_t)job->from));
  }
  node_respond_json(job->req, status, body, NULL);
  free(job);
}

/* {"version": N}: N, or 0 with the 400 answered. */
static int64_t read_rollback_version(http_request *req, const char *name) {
  json_error_t jerr;
  json_t *body = json_loadb(req->body ? (const char *)req->body : "", req->body_len, 0, &jerr);
  json_t *v = json_object_get(body, "version");
  int64_t version = json_is_integer(v) ? (int64_t)json_integer_value(v) : 0;
  json_decref(body);
  if (version > 0) return version;
  const char *msg = body == NULL ? "the body must be JSON: {\"version\": N}"
                    : v == NULL  ? "the body must name the version: {\"version\": N}"
                                 : "version must be a positive integer";
  log_write(LOG_INFO, name, req->id, NULL, "rollback rejected: %s", msg);
  node_respond_error(req, 400, msg);
  return 0;
}

static void rollback(node *n, http_request *req, const char *name) {
  int64_t version = read_rollback_version(req, name);
  if (version == 0) return;
  json_t *row = NULL, *spec = NULL;
  int rc = node_db_worker_get(n->db, name, &row);
  int64_t current = rc == 0 ? json_integer_value(json_object_get(row, "version")) : 0;
  json_decref(row);
  if (rc == -ENOENT) {
    node_respond_unknown_worker(req, name);
    return;
  }
  if (rc == 0) rc = node_db_version_get(n->db, name, version, &spec);
  if (rc == -ENOENT) {
    node_respond_not_kept(n, req, name, version);
    return;
  }
  if (rc != 0) {
    log_write(LOG_ERROR, name, req->id, NULL, "registry read failed: %s", node_db_errmsg(n->db));
    node_respond_error(req, 500, "registry read failed");
    return;
  }
  if (version == current) {
    json_decref(spec);
    node_respond_error(req, 409, "that version is the current one: nothing to roll back");
    return;
  }
  /* Its secrets may have been revoked since: checked as a deploy is. */
  if (refused_ungranted(n, req, name, spec, "rollback")) return;
  json_object_set_new(spec, "rollback_of", json_integer(version));
  rollback_job *job = xcalloc(1, sizeof *job);
  job->req = req;
  job->from = version;
  node_deploy(n, name, spec, on_rolled_back, job);
}

int node_versions_route(node *n, http_request *req, const char *name, const char *sub) {
  int versions = strcmp(sub, "versions") == 0;
  if (!versions && strcmp(sub, "rollback") != 0) return 0;
  const char *want = versions ? "GET" : "POST";
  if (strcmp(req->method, want) != 0) {
    node_respond_method(req, want);
    return 1;
  }
  if (!worker_name_valid(name, strlen(name))) {
    node_respond_invalid_name(req, name);
    return 1;
  }
  if (versions) list_versions(n, req, name);
  else rollback(n, req, name);
  return 1;
}

/* ---- --dev --------------------------------------------------------------------- */

typedef struct dev_job {
  void (*done)(node *n);
} dev_job;

static void on_dev_deployed(node *n, void *data, int status, json_t *body) {
  dev_job *job = data;
  void (*done)(node *) = job->done;
  free(job);
  if (status != 200 && status != 201) { /* "deployed" is logged already */
    char *text = json_dumps(body, JSON_COMPACT);
    log_write(LOG_ERROR, "hello", NULL, text, "--dev: deploying examples/hello.js failed");
    free(text);
  }
  done(n);
}

void node_deploy_dev(node *n, void (*done)(node *n)) {
  json_t *spec = node_spec_single((const char *)node_hello_js, node_hello_js_len, "index.js");
  if (spec == NULL) {
    log_error("--dev: the embedded examples/hello.js is not UTF-8");
    done(n);
    return;
  }
  json_t *row = NULL;
  if (node_db_worker_get(n->db, "hello", &row) == 0) {
    int same = json_equal(json_object_get(row, "modules"), json_object_get(spec, "modules")) &&
               json_equal(json_object_get(row, "main_module"),
                          json_object_get(spec, "main_module"));
    json_decref(row);
    if (same) {
      log_write(LOG_INFO, "hello", NULL, NULL, "--dev: hello is already deployed");
      json_decref(spec);
      done(n);
      return;
    }
  }
  dev_job *job = xcalloc(1, sizeof *job);
  job->done = done;
  node_deploy(n, "hello", spec, on_dev_deployed, job);
}
