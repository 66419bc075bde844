/*
 * The control API routes of secrets (GET /v1/secrets, PUT|DELETE
 * /v1/secrets/{name}, PUT|DELETE /v1/secrets/{name}/workers/{worker}) and
 * their grants. A secret is injected only into the fetches of the workers it
 * is granted to: a deploy whose rules name a secret not granted to that
 * worker is refused (db.c's node_db_rules_ungranted), and the egress checks
 * the grant again on every injection, so a revoked grant stops a rule stored
 * before the revocation.
 *
 * Where things are kept: the grants in node.db (db.c); the value, on a node
 * on its own, in the egress process alone (asked through egress.c); in a
 * fleet, sealed by this node's egress with the fleet key and written to the
 * fleet's secrets record (fleet_sync.c), which every node applies to node.db
 * and hands to its egress, the only process that can open it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "egress.h"
#include "node.h"

#define MAX_GRANTS 1024

typedef enum job_kind { JOB_PUT, JOB_DELETE, JOB_GRANT } job_kind;

typedef struct secret_job {
  job_kind kind;
  http_request *req;
  char *name;
  json_t *workers; /* a PUT's grants, or NULL to keep them */
} secret_job;

static secret_job *job_new(job_kind kind, http_request *req, const char *name, json_t *workers) {
  secret_job *job = xcalloc(1, sizeof *job);
  job->kind = kind;
  job->req = req;
  job->name = xstrdup(name);
  job->workers = workers;
  return job;
}

static void job_free(secret_job *job) {
  json_decref(job->workers);
  free(job->name);
  free(job);
}

/* As node_respond_json, taking over the reference to body. */
static void respond(http_request *req, int status, json_t *body) {
  node_respond_json(req, status, body, NULL);
  json_decref(body);
}

static json_t *time_json(int64_t ms) {
  if (ms <= 0) return json_null();
  char when[32];
  node_iso8601(ms, when);
  return json_string(when);
}

/* The stored row as the control API shows it: {"name", "workers", "updated_at"}. */
static json_t *row_json(json_t *row, const char *name) {
  json_t *workers = json_object_get(row, "workers");
  return json_pack("{s:s, s:O, s:o}", "name", name, "workers",
                   json_is_array(workers) ? workers : json_array(), "updated_at",
                   time_json(json_integer_value(json_object_get(row, "updated_at"))));
}

/* created < 0: a grant route's answer, without "created". */
static void respond_row(node *n, http_request *req, int status, const char *name, int created) {
  json_t *row = node_db_secret_get(n->db, name);
  json_t *body = row_json(row, name);
  if (created >= 0) json_object_set_new(body, "created", json_boolean(created));
  json_decref(row);
  respond(req, status, body);
}

/* ---- bodies ---- */

/* "workers": an array of worker names, each once. NULL with *why otherwise. */
static json_t *parse_workers(json_t *v, const char **why) {
  *why = "\"workers\" must be an array of worker names ([a-z0-9][a-z0-9-]{0,62})";
  if (!json_is_array(v)) return NULL;
  if (json_array_size(v) > MAX_GRANTS) {
    *why = "a secret is granted to at most 1024 workers";
    return NULL;
  }
  json_t *out = json_array();
  size_t i, j;
  json_t *w, *seen;
  json_array_foreach(v, i, w) {
    const char *s = json_string_value(w);
    if (s == NULL || !worker_name_valid(s, strlen(s))) {
      json_decref(out);
      return NULL;
    }
    int dup = 0;
    json_array_foreach(out, j, seen) dup |= strcmp(json_string_value(seen), s) == 0;
    if (!dup) json_array_append(out, w);
  }
  return out;
}

/* The JSON form of a PUT: {"value": "...", "workers": [...]?}. */
static char *json_value(http_request *req, size_t *len, json_t **workers, const char **why) {
  json_t *root = json_loadb((const char *)req->body, req->body_len, JSON_REJECT_DUPLICATES, NULL);
  json_t *v = json_object_get(root, "value");
  const char *key;
  json_t *member;
  *why = "a JSON body is {\"value\": \"...\", \"workers\": [\"worker\", ...]}";
  json_object_foreach(root, key, member) if (strcmp(key, "value") && strcmp(key, "workers")) v = NULL;
  json_t *w = json_object_get(root, "workers");
  if (!json_is_string(v) || (w && (*workers = parse_workers(w, why)) == NULL)) {
    json_decref(root);
    return NULL;
  }
  *len = json_string_length(v);
  char *value = xstrndup(json_string_value(v), *len);
  json_decref(root);
  return value;
}

/* A secret's value: the raw body (one trailing newline dropped, as `echo` adds
 * one) or {"value": "...", "workers"?} with a JSON content type. NULL with
 * *why otherwise. */
static char *secret_value(http_request *req, size_t *len, json_t **workers, const char **why) {
  const char *ct = http_request_header(req, "Content-Type");
  char *value;
  *workers = NULL;
  if (ct && strncasecmp(ct, "application/json", 16) == 0) {
    value = json_value(req, len, workers, why);
    if (value == NULL) return NULL;
  } else {
    *len = req->body_len;
    if (*len > 0 && req->body[*len - 1] == '\n') (*len)--;
    if (*len > 0 && req->body[*len - 1] == '\r') (*len)--;
    value = xstrndup(req->body ? (const char *)req->body : "", *len);
  }
  *why = "secret values are text of at most 8192 bytes without control characters (tab allowed)";
  /* An empty secret would inject an empty credential; edgectl refuses it too. */
  if (*len == 0) *why = "the secret value is empty";
  if (*len == 0 || strlen(value) != *len || !egress_secret_value_valid(value, *len)) {
    memset(value, 0, *len);
    free(value);
    json_decref(*workers);
    *workers = NULL;
    return NULL;
  }
  return value;
}

/* ---- answers from the egress and the fleet ---- */

/* Fleet writes: answered once applied here, from node.db. */
static void on_fleet_written(node *n, void *data, int status, json_t *body) {
  secret_job *job = data;
  int created = json_is_true(json_object_get(body, "created"));
  if (status == 404)
    respond(job->req, 404, json_pack("{s:s, s:s}", "error", "unknown secret", "name", job->name));
  else if (status != 0) respond(job->req, status, json_incref(body));
  else if (job->kind == JOB_DELETE) respond(job->req, 200, json_pack("{s:s}", "deleted", job->name));
  else if (job->kind == JOB_GRANT) respond_row(n, job->req, 200, job->name, -1);
  else respond_row(n, job->req, created ? 201 : 200, job->name, created);
  job_free(job);
}

/* In a fleet the egress sealed the value; the fleet's record gets the ciphertext. */
static void on_sealed(node *n, void *data, int status, json_t *body) {
  secret_job *job = data;
  if (status != 0) {
    respond(job->req, status, json_incref(body));
    job_free(job);
    return;
  }
  node_secret_edit edit = {.sealed = json_object_get(body, "sealed"), .workers = job->workers};
  node_fleet_edit_secret(n, job->name, &edit, on_fleet_written, job);
}

/* On its own, the egress stored the value; node.db gets the grants. */
static void on_stored(node *n, void *data, int status, json_t *body) {
  secret_job *job = data;
  int created = json_is_true(json_object_get(body, "created"));
  int64_t updated = json_integer_value(json_object_get(body, "updated_at"));
  if (status != 0) {
    respond(job->req, status, json_incref(body));
  } else if (node_db_secret_put(n->db, job->name, job->workers, NULL, updated) != 0) {
    log_write(LOG_ERROR, NULL, job->req->id, NULL, "storing the grants of secret %s failed: %s",
              job->name, node_db_errmsg(n->db));
    respond(job->req, 500, json_pack("{s:s}", "error", "the value was stored but its grants were "
                                                      "not: send the PUT again"));
  } else {
    json_t *row = node_db_secret_get(n->db, job->name);
    node_egress_push_secret(n, job->name, json_object_get(row, "workers"), NULL);
    json_decref(row);
    respond_row(n, job->req, created ? 201 : 200, job->name, created);
  }
  job_free(job);
}

static void on_deleted(node *n, void *data, int status, json_t *body) {
  secret_job *job = data;
  int gone = status == 0;
  if (status != 0 && status != 404) {
    respond(job->req, status, json_incref(body));
    job_free(job);
    return;
  }
  /* Grants given before the value was set are deleted with it too. */
  int rc = node_db_secret_delete(n->db, job->name);
  if (rc == -EIO) {
    respond(job->req, 500, json_pack("{s:s}", "error", "deleting the secret's grants failed"));
  } else if (!gone && rc == -ENOENT) {
    respond(job->req, 404, json_pack("{s:s, s:s}", "error", "unknown secret", "name", job->name));
  } else {
    node_egress_push_secret(n, job->name, NULL, NULL);
    respond(job->req, 200, json_pack("{s:s}", "deleted", job->name));
  }
  job_free(job);
}

static void on_listed(node *n, void *data, int status, json_t *body) {
  http_request *req = data;
  if (status != 0) {
    respond(req, status, json_incref(body));
    return;
  }
  json_t *rows = node_db_secret_list(n->db);
  json_t *by_name = json_object(), *list = json_array();
  size_t i;
  json_t *row;
  json_array_foreach(rows, i, row)
    json_object_set(by_name, json_string_value(json_object_get(row, "name")), row);
  /* The values the egress holds, with their grants (none: []) ... */
  json_array_foreach(json_object_get(body, "secrets"), i, row) {
    const char *name = json_string_value(json_object_get(row, "name"));
    json_t *grants = json_object_get(by_name, name);
    json_t *entry = row_json(grants, name);
    json_object_set_new(entry, "updated_at",
                        time_json(json_integer_value(json_object_get(row, "updated_at"))));
    json_array_append_new(list, entry);
    json_object_del(by_name, name);
  }
  /* ... and grants given before a value was set. */
  const char *name;
  json_object_foreach(by_name, name, row) {
    json_t *entry = row_json(row, name);
    json_object_set_new(entry, "updated_at", json_null());
    json_array_append_new(list, entry);
  }
  json_decref(by_name);
  json_decref(rows);
  respond(req, 200, json_pack("{s:o}", "secrets", list));
}

/* ---- routes ---- */

static void list_secrets(node *n, http_request *req) {
  if (!node_fleet_on(n)) {
    json_t *body = json_object();
    node_egress_ask_secret(n, NODE_EGRESS_SECRET_LIST, body, on_listed, req);
    json_decref(body);
    return;
  }
  json_t *rows = node_db_secret_list(n->db), *list = json_array();
  size_t i;
  json_t *row;
  json_array_foreach(rows, i, row)
    json_array_append_new(list, row_json(row, json_string_value(json_object_get(row, "name"))));
  json_decref(rows);
  respond(req, 200, json_pack("{s:o}", "secrets", list));
}

static void put_secret(node *n, http_request *req, const char *name) {
  size_t len = 0;
  const char *why = NULL;
  json_t *workers = NULL;
  char *value = secret_value(req, &len, &workers, &why);
  if (value == NULL) {
    node_respond_error(req, 400, why);
    return;
  }
  json_t *v = json_stringn(value, len);
  memset(value, 0, len);
  free(value);
  if (v == NULL) {
    json_decref(workers);
    node_respond_error(req, 400, "secret values must be UTF-8 text");
    return;
  }
  int fleet = node_fleet_on(n);
  json_t *body = json_pack("{s:s, s:o, s:b}", "name", name, "value", v, "fleet", fleet);
  node_egress_ask_secret(n, NODE_EGRESS_SECRET_PUT, body, fleet ? on_sealed : on_stored,
                         job_new(JOB_PUT, req, name, workers));
  json_decref(body);
}

static void delete_secret(node *n, http_request *req, const char *name) {
  secret_job *job = job_new(JOB_DELETE, req, name, NULL);
  if (node_fleet_on(n)) {
    node_fleet_delete_secret(n, name, on_fleet_written, job);
    return;
  }
  json_t *body = json_pack("{s:s}", "name", name);
  node_egress_ask_secret(n, NODE_EGRESS_SECRET_DELETE, body, on_deleted, job);
  json_decref(body);
}

/* PUT (grant) or DELETE (revoke) /v1/secrets/{name}/workers/{worker}: both
 * idempotent, answered with the secret's grants as they are then. */
static void grant_route(node *n, http_request *req, const char *name, const char *worker) {
  int put = strcmp(req->method, "PUT") == 0, del = strcmp(req->method, "DELETE") == 0;
  if (!put && !del) {
    node_respond_method(req, "PUT, DELETE");
    return;
  }
  if (!worker_name_valid(worker, strlen(worker))) {
    node_respond_error(req, 400, "invalid worker name: must match [a-z0-9][a-z0-9-]{0,62}");
    return;
  }
  if (node_fleet_on(n)) {
    secret_job *job = job_new(JOB_GRANT, req, name, NULL);
    node_secret_edit edit = {.grant = put ? worker : NULL, .revoke = del ? worker : NULL};
    node_fleet_edit_secret(n, name, &edit, on_fleet_written, job);
    return;
  }
  json_t *row = node_db_secret_get(n->db, name);
  json_t *workers = json_array();
  size_t i;
  json_t *w;
  json_array_foreach(json_object_get(row, "workers"), i, w)
    if (strcmp(json_string_value(w), worker) != 0) json_array_append(workers, w);
  if (put) json_array_append_new(workers, json_string(worker));
  json_decref(row);
  int rc = json_array_size(workers) > MAX_GRANTS ? -E2BIG
                                                 : node_db_secret_put(n->db, name, workers, NULL, 0);
  if (rc == 0) {
    node_egress_push_secret(n, name, workers, NULL);
    char extra[160];
    snprintf(extra, sizeof extra, "{\"secret\":\"%s\"}", name);
    log_write(LOG_INFO, worker, req->id, extra, put ? "secret granted" : "secret revoked");
    respond_row(n, req, 200, name, -1);
  } else {
    node_respond_error(req, rc == -E2BIG ? 400 : 500,
                       rc == -E2BIG ? "a secret is granted to at most 1024 workers"
                                    : "storing the grant failed");
  }
  json_decref(workers);
}

static void secret_route(node *n, http_request *req, const char *name) {
  int put = strcmp(req->method, "PUT") == 0, del = strcmp(req->method, "DELETE") == 0;
  if (!put && !del) {
    json_t *body = json_pack("{s:s, s:s, s:s}", "error",
                             strcmp(req->method, "GET") == 0
                                 ? "secrets are write-only: GET /v1/secrets lists their names"
                                 : "method not allowed",
                             "method", req->method, "allow", "PUT, DELETE");
    node_respond_json(req, 405, body, "PUT, DELETE");
    json_decref(body);
    return;
  }
  if (put) put_secret(n, req, name);
  else delete_secret(n, req, name);
}

int node_secrets_route(node *n, http_request *req, const char *path) {
  static const char prefix[] = "/v1/secrets";
  static const char workers[] = "/workers/";
  if (strncmp(path, prefix, sizeof prefix - 1) != 0) return 0;
  const char *rest = path + sizeof prefix - 1;
  if (*rest == '\0') {
    if (strcmp(req->method, "GET") != 0) node_respond_method(req, "GET");
    else list_secrets(n, req);
    return 1;
  }
  if (*rest != '/') return 0;
  rest++;
  size_t len = strcspn(rest, "/");
  char *name = xstrndup(rest, len);
  const char *tail = rest + len;
  int handled = 1;
  if (!egress_secret_name_valid(name, len)) {
    node_respond_error(req, 400,
                       "invalid secret name: letters, digits and '_', not starting with a digit, "
                       "at most 64");
  } else if (*tail == '\0') {
    secret_route(n, req, name);
  } else if (strncmp(tail, workers, sizeof workers - 1) == 0 &&
             strchr(tail + sizeof workers - 1, '/') == NULL) {
    grant_route(n, req, name, tail + sizeof workers - 1);
  } else {
    handled = 0;
  }
  free(name);
  return handled;
}
