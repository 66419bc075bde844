/*
 * The small interface between the control API's dispatcher (control.c) and
 * the route modules it calls: answers in JSON ({"error": ...} for errors,
 * with the Allow or WWW-Authenticate header where HTTP wants one) and the
 * query string of a request target. Route modules answer through these and
 * never through control.c.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "node.h"

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

void node_respond_invalid_name(http_request *req, const char *name) {
  /* The name is echoed only when it is text jansson accepts (UTF-8). */
  json_t *body = json_pack("{s:s, s:s?}", "error",
                           "invalid worker name: must match [a-z0-9][a-z0-9-]{0,62}", "name", name);
  if (body == NULL) body = json_pack("{s:s}", "error", "invalid worker name");
  node_respond_json(req, 400, body, NULL);
  json_decref(body);
}

void node_respond_unknown_worker(http_request *req, const char *name) {
  json_t *body = json_pack("{s:s, s:s}", "error", "unknown worker", "name", name);
  node_respond_json(req, 404, body, NULL);
  json_decref(body);
}

/* 404 naming the versions that are kept. */
void node_respond_not_kept(node *n, http_request *req, const char *name, int64_t version) {
  json_t *rows = NULL, *kept = json_array();
  if (node_db_versions_list(n->db, name, &rows) == 0) {
    size_t i;
    json_t *v;
    json_array_foreach(rows, i, v) json_array_append(kept, json_object_get(v, "version"));
  }
  json_decref(rows);
  char *msg = xasprintf("version %lld of worker %s is not kept (the last %d versions are)",
                        (long long)version, name, NODE_DB_VERSIONS_KEPT);
  json_t *body = json_pack("{s:s, s:I, s:o}", "error", msg, "version", (json_int_t)version,
                           "kept", kept);
  free(msg);
  node_respond_json(req, 404, body, NULL);
  json_decref(body);
}
