/*
 * A table of ingress routes, host pattern and path to a worker name, and the
 * one match that wins for a request. The supervisor parses it to refuse bad
 * routes at PUT /v1/routes, the worker processes to route by it: one parser,
 * so that nothing the supervisor stored can be refused where it is used.
 *
 * A pattern is HOST[PATH]: HOST is a host name ("api.example.com"), a
 * wildcard over its subdomains ("*.example.com": one label or more, not the
 * apex) or "*" (any host, IP addresses too); PATH, when given, starts with
 * '/' and is exact, or a prefix when it ends with '*' ("/w/" then '*'). The most
 * specific route wins: an exact host over a wildcard over "*" (a longer
 * wildcard suffix over a shorter one), then an exact path over a prefix of
 * the same length, then the longer path. Two routes of one pattern are
 * refused, so no two routes can tie.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base.h"
#include "http.h"

struct http_route {
  char *host;      /* lowercase; "" for "*" */
  int wildcard;    /* host is a suffix: the request's host ends in ".host" */
  char *path;      /* "" when none */
  int prefix;      /* path without its '*' */
  char *worker;
};

struct http_routes {
  struct http_route *v;
  size_t n;
};

static int host_char(char c) { return isalnum((unsigned char)c) || c == '-' || c == '.'; }

/* Splits and checks one pattern; NULL, or why not (a constant). */
static const char *parse_pattern(const char *p, struct http_route *r) {
  size_t len = strlen(p);
  if (len == 0 || len > HTTP_ROUTE_PATTERN_MAX) return "a pattern is 1 to 512 bytes";
  size_t host_len = strcspn(p, "/");
  const char *host = p;
  if (host_len == 1 && host[0] == '*') {
    host_len = 0;
  } else if (host_len > 2 && host[0] == '*' && host[1] == '.') {
    r->wildcard = 1;
    host += 2;
    host_len -= 2;
  }
  if (host_len == 0 && !(p[0] == '*' && (p[1] == '\0' || p[1] == '/')))
    return "a pattern starts with a host: a name, *.name or *";
  for (size_t i = 0; i < host_len; i++)
    if (!host_char(host[i])) return "the host of a pattern has letters, digits, '-' and '.' only (or *. before them)";
  if (host_len > 0 && (host[0] == '.' || host[host_len - 1] == '.' || strstr(host, "..")))
    return "the host of a pattern has no empty labels";
  const char *path = p + strcspn(p, "/");
  size_t path_len = strlen(path);
  const char *star = strchr(path, '*');
  if (star && star != path + path_len - 1) return "a '*' in the path of a pattern comes last only";
  if (strpbrk(path, "?# \t")) return "the path of a pattern has no query, fragment or spaces";
  r->prefix = star != NULL;
  r->host = xstrndup(host, host_len);
  for (char *c = r->host; *c; c++) *c = (char)tolower((unsigned char)*c);
  r->path = xstrndup(path, path_len - (size_t)r->prefix);
  return NULL;
}

static int same_pattern(const struct http_route *a, const struct http_route *b) {
  return a->wildcard == b->wildcard && a->prefix == b->prefix && strcmp(a->host, b->host) == 0 &&
         strcmp(a->path, b->path) == 0;
}

/* One entry {"pattern", "worker"}; NULL, or why not (heap). */
static char *parse_entry(json_t *e, size_t i, struct http_route *r) {
  if (!json_is_object(e)) return xasprintf("routes[%zu]: must be {\"pattern\", \"worker\"}", i);
  const char *key;
  json_t *v;
  json_object_foreach(e, key, v) {
    if (strcmp(key, "pattern") != 0 && strcmp(key, "worker") != 0)
      return xasprintf("routes[%zu]: unknown key \"%s\" (expected pattern, worker)", i, key);
  }
  const char *pattern = json_string_value(json_object_get(e, "pattern"));
  const char *worker = json_string_value(json_object_get(e, "worker"));
  if (pattern == NULL) return xasprintf("routes[%zu].pattern: must be a string", i);
  if (worker == NULL || !worker_name_valid(worker, strlen(worker)))
    return xasprintf("routes[%zu].worker: must be a worker name ([a-z0-9][a-z0-9-]{0,62})", i);
  const char *why = parse_pattern(pattern, r);
  if (why) return xasprintf("routes[%zu].pattern: \"%s\": %s", i, pattern, why);
  r->worker = xstrdup(worker);
  return NULL;
}

http_routes *http_routes_parse(json_t *routes, char **err) {
  if (!json_is_array(routes)) {
    *err = xstrdup("routes must be an array of {\"pattern\", \"worker\"}");
    return NULL;
  }
  if (json_array_size(routes) > HTTP_ROUTES_MAX) {
    *err = xasprintf("too many routes: %zu, at most %d", json_array_size(routes), HTTP_ROUTES_MAX);
    return NULL;
  }
  http_routes *t = xcalloc(1, sizeof *t);
  t->v = xcalloc(json_array_size(routes) + 1, sizeof *t->v);
  size_t i;
  json_t *e;
  json_array_foreach(routes, i, e) {
    struct http_route *r = &t->v[t->n];
    *err = parse_entry(e, i, r);
    for (size_t j = 0; *err == NULL && j < t->n; j++)
      if (same_pattern(&t->v[j], r))
        *err = xasprintf("routes[%zu].pattern: the same pattern as routes[%zu]", i, j);
    t->n++; /* freed with the table, even when refused */
    if (*err) {
      http_routes_free(t);
      return NULL;
    }
  }
  return t;
}

void http_routes_free(http_routes *t) {
  if (t == NULL) return;
  for (size_t i = 0; i < t->n; i++) {
    free(t->v[i].host);
    free(t->v[i].path);
    free(t->v[i].worker);
  }
  free(t->v);
  free(t);
}

size_t http_routes_count(const http_routes *t) { return t ? t->n : 0; }

static int host_matches(const struct http_route *r, const char *host, size_t len) {
  size_t n = strlen(r->host);
  if (n == 0) return 1;
  if (!r->wildcard) return len == n && strncasecmp(host, r->host, n) == 0;
  return len > n + 1 && host[len - n - 1] == '.' && strncasecmp(host + len - n, r->host, n) == 0;
}

static int path_matches(const struct http_route *r, const char *path, size_t len) {
  size_t n = strlen(r->path);
  if (n == 0) return 1;
  if (r->prefix) return len >= n && memcmp(path, r->path, n) == 0;
  return len == n && memcmp(path, r->path, n) == 0;
}

/* > 0 when a is more specific than b. */
static int more_specific(const struct http_route *a, const struct http_route *b) {
  int ha = a->host[0] ? (a->wildcard ? 1 : 2) : 0, hb = b->host[0] ? (b->wildcard ? 1 : 2) : 0;
  if (ha != hb) return ha > hb;
  size_t la = strlen(a->host), lb = strlen(b->host);
  if (la != lb) return la > lb;
  size_t pa = strlen(a->path), pb = strlen(b->path);
  if (pa != pb) return pa > pb;
  return !a->prefix && b->prefix;
}

const char *http_routes_match(const http_routes *t, const char *host, size_t host_len,
                              const char *path) {
  if (t == NULL) return NULL;
  size_t path_len = strcspn(path, "?#");
  const struct http_route *best = NULL;
  for (size_t i = 0; i < t->n; i++) {
    const struct http_route *r = &t->v[i];
    if (host_matches(r, host, host_len) && path_matches(r, path, path_len) &&
        (best == NULL || more_specific(r, best)))
      best = r;
  }
  return best ? best->worker : NULL;
}
