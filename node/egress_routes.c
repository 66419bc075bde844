/*
 * The control API routes of a worker's allow-list (GET|PUT|DELETE
 * /v1/workers/{name}/egress, stored in node.db and pushed to the egress
 * process). Rules that inject a secret not granted to the worker are refused
 * (secrets.c has the secrets' own routes).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "egress.h"
#include "node.h"

/* As node_respond_json, taking over the reference to body. */
static void respond(http_request *req, int status, json_t *body, const char *allow) {
  node_respond_json(req, status, body, allow);
  json_decref(body);
}

static void respond_error(http_request *req, int status, const char *message) {
  respond(req, status, json_pack("{s:s}", "error", message), NULL);
}

static void respond_method(http_request *req, const char *allow, const char *why) {
  json_t *body = json_pack("{s:s, s:s, s:s}", "error", why ? why : "method not allowed", "method",
                           req->method, "allow", allow);
  respond(req, 405, body, allow);
}


static int worker_exists(node *n, const char *name, http_request *req) {
  int rc = node_db_worker_exists(n->db, name);
  if (rc == 1) return 1;
  if (rc == -ENOENT)
    respond(req, 404, json_pack("{s:s, s:s}", "error", "unknown worker", "name", name), NULL);
  else
    respond_error(req, 500, "registry read failed");
  return 0;
}

/* A change of rules in a fleet, answered once applied here. */
typedef struct rules_job {
  http_request *req;
  char *name;
  json_t *rules;
  int put;
} rules_job;

static void on_fleet_rules(node *n, void *data, int status, json_t *body) {
  (void)n;
  rules_job *job = data;
  if (status != 0) {
    respond(job->req, status, json_incref(body), NULL);
  } else {
    char extra[64];
    snprintf(extra, sizeof extra, "{\"rules\":%zu}", json_array_size(job->rules));
    log_write(LOG_INFO, job->name, job->req->id, extra, "egress rules %s", job->put ? "set" : "cleared");
    respond(job->req, 200, json_pack("{s:s, s:O}", "worker", job->name, "rules", job->rules), NULL);
  }
  json_decref(job->rules);
  free(job->name);
  free(job);
}

static void rules_route(node *n, http_request *req, const char *name) {
  const char *m = req->method;
  int get = strcmp(m, "GET") == 0, put = strcmp(m, "PUT") == 0, del = strcmp(m, "DELETE") == 0;
  if (!get && !put && !del) {
    respond_method(req, "GET, PUT, DELETE", NULL);
    return;
  }
  if (!worker_name_valid(name, strlen(name))) {
    respond_error(req, 400, "invalid worker name: must match [a-z0-9][a-z0-9-]{0,62}");
    return;
  }
  if (!worker_exists(n, name, req)) return;
  json_t *rules = NULL;
  if (get) {
    int64_t updated = 0;
    rules = node_db_egress_get(n->db, name, &updated);
    if (rules == NULL) {
      respond_error(req, 500, "reading the egress rules failed");
      return;
    }
    json_t *body = json_pack("{s:s, s:o}", "worker", name, "rules", rules);
    if (updated) {
      char when[32];
      node_iso8601(updated, when);
      json_object_set_new(body, "updated_at", json_string(when));
    }
    respond(req, 200, body, NULL);
    return;
  }
  if (put) {
    if (req->body_len == 0) {
      respond_error(req, 400, "the body is empty: send {\"rules\": [...]} or an array of rules");
      return;
    }
    json_error_t jerr;
    json_t *root = json_loadb((const char *)req->body, req->body_len, JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL) {
      respond(req, 400, json_pack("{s:s+}", "error", "invalid JSON: ", jerr.text), NULL);
      return;
    }
    if (json_is_object(root)) {
      /* As a deploy body: a key that is not understood is refused, not
       * dropped (a misspelt "rules" would otherwise clear them all). */
      const char *key;
      json_t *value;
      json_object_foreach(root, key, value) {
        if (strcmp(key, "rules") == 0) continue;
        respond(req, 400,
                json_pack("{s:s, s:s}", "error", "unknown key: the body holds only \"rules\"",
                          "key", key),
                NULL);
        json_decref(root);
        return;
      }
    }
    rules = json_is_object(root) ? json_incref(json_object_get(root, "rules")) : json_incref(root);
    json_decref(root);
    /* Rules that are valid, and inject only secrets granted to this worker. */
    char *why = node_db_rules_problem(rules);
    if (why == NULL) why = node_db_rules_ungranted(n->db, name, rules);
    if (why) {
      log_write(LOG_INFO, name, req->id, NULL, "egress rules rejected: %s", why);
      respond_error(req, 400, why);
      free(why);
      json_decref(rules);
      return;
    }
  } else {
    rules = json_array();
  }
  if (node_fleet_on(n)) {
    rules_job *job = xcalloc(1, sizeof *job);
    job->req = req;
    job->name = xstrdup(name);
    job->rules = rules;
    job->put = put;
    node_fleet_put_egress(n, name, rules, on_fleet_rules, job);
    return;
  }
  if (node_db_egress_put(n->db, name, rules, time_now_ms()) != 0) {
    log_write(LOG_ERROR, name, req->id, NULL, "storing the egress rules failed: %s",
              node_db_errmsg(n->db));
    respond_error(req, 500, "storing the egress rules failed");
    json_decref(rules);
    return;
  }
  node_egress_push(n, name, rules);
  char extra[64];
  snprintf(extra, sizeof extra, "{\"rules\":%zu}", json_array_size(rules));
  log_write(LOG_INFO, name, req->id, extra, "egress rules %s", put ? "set" : "cleared");
  respond(req, 200, json_pack("{s:s, s:o}", "worker", name, "rules", rules), NULL);
}

int node_egress_route(node *n, http_request *req, const char *path) {
  static const char workers[] = "/v1/workers/";
  static const char suffix[] = "/egress";
  size_t len = strlen(path);
  if (strncmp(path, workers, sizeof workers - 1) == 0 && len > sizeof workers - 1 + sizeof suffix - 1 &&
      strcmp(path + len - (sizeof suffix - 1), suffix) == 0) {
    char *name = xstrndup(path + sizeof workers - 1, len - (sizeof workers - 1) - (sizeof suffix - 1));
    if (strchr(name, '/') == NULL) {
      if (n->egress == NULL) respond_error(req, 503, "the egress rule store is not available");
      else rules_route(n, req, name);
      free(name);
      return 1;
    }
    free(name);
  }
  return 0;
}
