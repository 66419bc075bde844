/*
 * Gradual deployments: /v1/workers/{name}/traffic splits a worker's
 * requests over a few of its kept versions ({"5": 90, "4": 10}). The split
 * is stored in node.db (worker_traffic) and handed to the worker processes
 * with the worker's spec (node_db_traffic_attach), each version other than the
 * current one with its own spec; a worker process picks the version of a
 * request from a hash of its traffic key, so one key always lands on one
 * version while the split stays. A deploy, a rollback or a delete ends the
 * split (db.c does it in their transaction).
 *
 * In a fleet the split is a record of its own (fleet_sync.c, "traffic"),
 * applied on every node from the fleet's watch, this one included, before
 * the write is answered.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "node.h"

/* "5" (a positive decimal without leading zeros) as 5, else 0. */
static int64_t version_of_key(const char *key) {
  if (key[0] < '1' || key[0] > '9' || strlen(key) > 15) return 0;
  int64_t v = 0;
  for (const char *p = key; *p; p++) {
    if (*p < '0' || *p > '9') return 0;
    v = v * 10 + (*p - '0');
  }
  return v;
}

/* Newest version first, so that a split always lists them in one order. */
static int by_version_desc(const void *a, const void *b) {
  json_int_t x = json_integer_value(json_object_get(*(json_t *const *)a, "version"));
  json_int_t y = json_integer_value(json_object_get(*(json_t *const *)b, "version"));
  return x < y ? 1 : x > y ? -1 : 0;
}

static json_t *sorted(json_t *split) {
  size_t n = json_array_size(split);
  json_t *items[PROTO_TRAFFIC_MAX_VERSIONS];
  for (size_t i = 0; i < n; i++) items[i] = json_array_get(split, i);
  qsort(items, n, sizeof items[0], by_version_desc);
  json_t *out = json_array();
  for (size_t i = 0; i < n; i++) json_array_append(out, items[i]);
  return out;
}

/* The body as a split [{"version", "percent"}], or NULL with *why set (heap). */
static json_t *parse_split(const http_request *req, char **why) {
  json_t *body = json_loadb(req->body ? (const char *)req->body : "", req->body_len, 0, NULL);
  if (!json_is_object(body) || json_object_size(body) == 0 ||
      json_object_size(body) > PROTO_TRAFFIC_MAX_VERSIONS) {
    *why = xasprintf("the body must be a JSON object of 1 to %d versions and their percentages: "
                     "{\"VERSION\": PERCENT, ...}",
                     PROTO_TRAFFIC_MAX_VERSIONS);
    json_decref(body);
    return NULL;
  }
  json_t *split = json_array();
  json_int_t sum = 0;
  const char *key;
  json_t *value;
  json_object_foreach(body, key, value) {
    int64_t version = version_of_key(key);
    json_int_t percent = json_is_integer(value) ? json_integer_value(value) : -1;
    if (version == 0) *why = xasprintf("\"%.32s\": a version is a positive integer", key);
    else if (percent < 0 || percent > 100)
      *why = xasprintf("version %lld: the percentage must be an integer from 0 to 100",
                       (long long)version);
    if (*why) break;
    sum += percent;
    json_array_append_new(split, json_pack("{s:I, s:I}", "version", (json_int_t)version,
                                           "percent", percent));
  }
  json_decref(body);
  if (*why == NULL && sum != 100)
    *why = xasprintf("the percentages add up to %lld, not 100", (long long)sum);
  if (*why) {
    json_decref(split);
    return NULL;
  }
  json_t *out = sorted(split);
  json_decref(split);
  return out;
}

/* The answer of GET and PUT: the split, or the current version's 100%. */
static void respond_split(node *n, http_request *req, const char *name) {
  json_t *row = NULL, *split = NULL;
  int rc = node_db_worker_get(n->db, name, &row);
  if (rc == -ENOENT) {
    node_respond_unknown_worker(req, name);
    return;
  }
  if (rc != 0 || node_db_traffic_get(n->db, name, &split) != 0) {
    json_decref(row);
    log_write(LOG_ERROR, name, req->id, NULL, "registry read failed: %s", node_db_errmsg(n->db));
    node_respond_error(req, 500, "registry read failed");
    return;
  }
  json_t *current = json_object_get(row, "version");
  int gradual = split != NULL;
  if (!gradual) split = json_pack("[{s:O, s:i}]", "version", current, "percent", 100);
  json_t *body = json_pack("{s:s, s:O, s:b, s:o}", "name", name, "current", current, "gradual",
                           gradual, "split", split);
  json_decref(row);
  node_respond_json(req, 200, body, NULL);
  json_decref(body);
}

/* 1 when NAME is deployed, else 0 with the 404 (or 500) answered. */
static int known_worker(node *n, http_request *req, const char *name) {
  int rc = node_db_worker_exists(n->db, name);
  if (rc == 1) return 1;
  if (rc == -ENOENT) node_respond_unknown_worker(req, name);
  else node_respond_error(req, 500, "registry read failed");
  return 0;
}

/* A split written to the fleet: answered once applied here. */
typedef struct traffic_job {
  http_request *req;
  char *name;
} traffic_job;

static void on_fleet_traffic(node *n, void *data, int status, json_t *body) {
  traffic_job *job = data;
  if (status != 0) node_respond_json(job->req, status, body, NULL);
  else respond_split(n, job->req, job->name);
  free(job->name);
  free(job);
}

/* Stores a split (NULL: ends it), through the fleet when there is one, and answers. */
static void store_split(node *n, http_request *req, const char *name, json_t *split) {
  if (node_fleet_on(n)) {
    json_t *row = NULL;
    int64_t current = node_db_worker_get(n->db, name, &row) == 0
                          ? json_integer_value(json_object_get(row, "version")) : 0;
    json_decref(row);
    traffic_job *job = xcalloc(1, sizeof *job);
    job->req = req;
    job->name = xstrdup(name);
    node_fleet_put_traffic(n, name, split, current, on_fleet_traffic, job);
    return;
  }
  int rc = node_db_traffic_put(n->db, name, split, time_now_ms());
  if (rc != 0) {
    if (rc == -ENOENT) node_respond_unknown_worker(req, name);
    else node_respond_error(req, 500, "registry write failed");
    return;
  }
  node_procs_broadcast_changed(n, name);
  respond_split(n, req, name);
}

static void put_split(node *n, http_request *req, const char *name) {
  if (!known_worker(n, req, name)) return;
  char *why = NULL;
  json_t *split = parse_split(req, &why);
  if (split == NULL) {
    log_write(LOG_INFO, name, req->id, NULL, "traffic split rejected: %s", why);
    node_respond_error(req, 400, why);
    free(why);
    return;
  }
  size_t i;
  json_t *entry;
  json_array_foreach(split, i, entry) {
    int64_t version = json_integer_value(json_object_get(entry, "version"));
    json_t *spec = NULL;
    int rc = node_db_version_get(n->db, name, version, &spec);
    json_decref(spec);
    if (rc != 0) {
      json_decref(split);
      if (rc == -ENOENT) node_respond_not_kept(n, req, name, version);
      else node_respond_error(req, 500, "registry read failed");
      return;
    }
  }
  log_write(LOG_INFO, name, req->id, NULL, "traffic split set");
  store_split(n, req, name, split);
  json_decref(split);
}

static void delete_split(node *n, http_request *req, const char *name) {
  if (!known_worker(n, req, name)) return;
  json_t *split = NULL;
  if (node_db_traffic_get(n->db, name, &split) == 0 && split == NULL) {
    respond_split(n, req, name); /* no split: nothing to end */
    return;
  }
  json_decref(split);
  store_split(n, req, name, NULL);
}

int node_traffic_route(node *n, http_request *req, const char *name, const char *sub) {
  if (strcmp(sub, "traffic") != 0) return 0;
  int get = strcmp(req->method, "GET") == 0, put = strcmp(req->method, "PUT") == 0;
  if (!get && !put && strcmp(req->method, "DELETE") != 0) {
    node_respond_method(req, "GET, PUT, DELETE");
    return 1;
  }
  if (!worker_name_valid(name, strlen(name))) {
    node_respond_invalid_name(req, name);
    return 1;
  }
  if (get) respond_split(n, req, name);
  else if (put) put_split(n, req, name);
  else delete_split(n, req, name);
  return 1;
}
