/*
 * libFuzzer target for the egress URL parser (egress/url.c): what a worker's
 * fetch() hands the egress, and the Location headers it follows.
 *
 * Input layout: the bytes up to the first newline are a URL, parsed on its
 * own; what follows is a Location value resolved against it (when the first
 * part parsed). Every URL accepted is checked for the form the policies
 * match on, and its string form must parse back to the same URL: a URL that
 * means one thing to the policy check and another once sent would be a hole.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "egress.h"

/* Says which check failed: the crash input alone does not. */
#define CHECK(cond)                                                              \
  do {                                                                           \
    if (!(cond)) {                                                               \
      fprintf(stderr, "egress_url_fuzz:%d: check failed: %s\n", __LINE__, #cond); \
      abort();                                                                   \
    }                                                                            \
  } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int is_dot_segment(const char *seg, size_t len) {
  return (len == 1 && seg[0] == '.') || (len == 2 && seg[0] == '.' && seg[1] == '.');
}

/* The invariants of a parsed URL. */
static void check_url(const egress_url *u) {
  CHECK(u->target != NULL && u->target[0] == '/');
  CHECK(u->path_len >= 1 && u->path_len <= strlen(u->target));
  CHECK(u->target[u->path_len] == '\0' || u->target[u->path_len] == '?');
  CHECK(memchr(u->target, '?', u->path_len) == NULL);
  CHECK(strchr(u->target, '#') == NULL);
  for (const char *p = u->target; *p; p++) CHECK((unsigned char)*p > 0x20 && (unsigned char)*p < 0x7f);
  /* No literal "." or ".." segment is left in the path. */
  size_t seg = 1;
  for (size_t i = 1; i <= u->path_len; i++) {
    if (i == u->path_len || u->target[i] == '/') {
      CHECK(!is_dot_segment(u->target + seg, i - seg));
      seg = i + 1;
    }
  }
  size_t hl = strlen(u->host);
  CHECK(hl > 0 && hl < sizeof u->host);
  if (u->ip != 6) {
    CHECK(u->host[hl - 1] != '.');
    for (const char *p = u->host; *p; p++) CHECK(!(*p >= 'A' && *p <= 'Z'));
  }
  CHECK(u->port >= 1 && u->port <= 65535);
  CHECK(u->default_port == (u->port == (u->https ? 443 : 80)));
}

/* The URL as sent upstream parses back to itself. */
static void check_round_trip(const egress_url *u) {
  char *s = egress_url_string(u);
  egress_url again;
  const char *err = NULL;
  CHECK(egress_url_parse(s, strlen(s), &again, &err) == 0);
  CHECK(again.https == u->https && again.ip == u->ip && again.port == u->port);
  CHECK(strcmp(again.host, u->host) == 0);
  CHECK(strcmp(again.target, u->target) == 0 && again.path_len == u->path_len);
  egress_url_free(&again);
  free(s);

  char *origin = egress_url_origin(u);
  char *host = egress_url_host_header(u);
  CHECK(strstr(origin, host) != NULL);
  free(origin);
  free(host);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *s = (const char *)data;
  const char *nl = memchr(s, '\n', size);
  size_t url_len = nl ? (size_t)(nl - s) : size;

  egress_url base;
  const char *err = NULL;
  if (egress_url_parse(s, url_len, &base, &err) != 0) {
    CHECK(err != NULL && base.target == NULL);
    return 0;
  }
  check_url(&base);
  check_round_trip(&base);

  if (nl != NULL) {
    egress_url next;
    err = NULL;
    if (egress_url_resolve(&base, nl + 1, size - url_len - 1, &next, &err) == 0) {
      check_url(&next);
      check_round_trip(&next);
      egress_url_free(&next);
    } else {
      CHECK(err != NULL);
    }
  }
  egress_url_free(&base);
  return 0;
}
