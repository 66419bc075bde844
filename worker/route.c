/*
 * Routing: where an ingress request goes, from its Host (or its absolute
 * target) alone. This file owns the rules of RFC 9112 section 3.2 as the
 * worker applies them, the worker name a host names (the first label), the
 * Request's URL as the URL Standard writes it, and which headers are the
 * connection's own (a handoff's framing). Pure: no state, no I/O; its tests
 * are tests/unit/worker_route_test.c.
 *
 * RFC 9112 section 3.2: exactly one Host header, with a valid authority, or
 * 400. Section 3.2.2: an absolute-form target's authority is the one that
 * counts, Host is ignored. We route by it rather than refuse a Host that
 * differs: the RFC tells a server to do so, and a client that sends
 * absolute-form means its target. Routing and request.url then always
 * agree, and the Host is still checked, as section 3.2 asks.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base.h"
#include "worker.h"

static const char *host_header(const http_request *req, size_t *len, size_t *count) {
  const char *value = NULL;
  *count = 0;
  for (size_t i = 0; i < req->n_headers; i++)
    if (strcasecmp(req->headers[i].name, "host") == 0 && ++*count == 1)
      value = req->headers[i].value;
  if (value == NULL) return NULL;
  /* As the workers' Headers class does: surrounding spaces and tabs go. */
  while (*value == ' ' || *value == '\t') value++;
  size_t n = strlen(value);
  while (n > 0 && (value[n - 1] == ' ' || value[n - 1] == '\t')) n--;
  *len = n;
  return value;
}

/* The length of an "http://" or "https://" prefix (any case), or 0. */
static size_t absolute_form(const char *target) {
  if (strncasecmp(target, "http://", 7) == 0) return 7;
  if (strncasecmp(target, "https://", 8) == 0) return 8;
  return 0;
}

char *route_find(const http_request *req, route *d) {
  size_t count, len = 0;
  const char *host = host_header(req, &len, &count);
  if (count == 0) return xstrdup("missing Host header: its first label names the worker");
  if (count > 1) return xstrdup("more than one Host header");
  const char *err = http_authority_parse(host, len, &d->authority);
  if (err) return xasprintf("invalid Host header: %s", err);
  const char *t = req->target;
  size_t scheme = absolute_form(t);
  if (scheme == 0) {
    /* Asterisk- and authority-form name no resource: the URL's path is "/". */
    d->path = t[0] == '/' ? t : "";
    return NULL;
  }
  const char *a = t + scheme;
  size_t n = strcspn(a, "/?#");
  err = http_authority_parse(a, n, &d->authority);
  if (err) return xasprintf("invalid authority in the request target: %s", err);
  d->path = a + n;
  return NULL;
}

int route_worker_name(const route *d, char name[64], size_t *len) {
  const http_authority *a = &d->authority;
  if (a->kind != HTTP_HOST_NAME) return -1;
  size_t n = strcspn(a->host, ".:");
  if (n > a->host_len) n = a->host_len;
  if (n == 0 || n > 63) return -1;
  for (size_t i = 0; i < n; i++) name[i] = (char)tolower((unsigned char)a->host[i]);
  if (!worker_name_valid(name, n)) return -1;
  name[n] = '\0';
  *len = n;
  return 0;
}

char *route_url(const route *d) {
  const http_authority *a = &d->authority;
  char *host = xstrndup(a->host, a->host_len);
  for (char *c = host; *c; c++) *c = (char)tolower((unsigned char)*c);
  unsigned port = 0;
  for (size_t i = 0; i < a->port_len; i++) port = port * 10 + (unsigned)(a->port[i] - '0');
  char port_text[8] = "";
  if (a->port && port != 80) snprintf(port_text, sizeof port_text, ":%u", port);
  /* Bytes past ASCII are percent-encoded, as the URL parser encodes the
   * code points of valid UTF-8; decoding them as UTF-8 instead would turn
   * invalid sequences into U+FFFD and make different targets one URL. */
  size_t n = strlen(d->path), high = 0;
  for (size_t i = 0; i < n; i++) high += (unsigned char)d->path[i] >= 0x80;
  char *encoded = NULL;
  if (high > 0) {
    char *o = encoded = xmalloc(n + 2 * high + 1);
    for (size_t i = 0; i < n; i++) {
      unsigned char ch = (unsigned char)d->path[i];
      if (ch < 0x80) {
        *o++ = (char)ch;
        continue;
      }
      *o++ = '%';
      *o++ = "0123456789ABCDEF"[ch >> 4];
      *o++ = "0123456789ABCDEF"[ch & 15];
    }
    *o = '\0';
  }
  const char *path = encoded ? encoded : d->path;
  char *url = xasprintf("http://%s%s%s%s", host, port_text, path[0] == '/' ? "" : "/", path);
  free(encoded);
  free(host);
  return url;
}

int route_hop_by_hop(const char *name) {
  static const char *const names[] = {"connection", "keep-alive", "transfer-encoding",
                                      "content-length", "te", "upgrade", "expect",
                                      "proxy-connection", "trailer"};
  for (size_t i = 0; i < ARRAY_SIZE(names); i++)
    if (strcasecmp(name, names[i]) == 0) return 1;
  return 0;
}

/*
 * How many times a request has come through an edgenode egress: the
 * largest hops= of the "edgenode" entries of its CDN-Loop headers (RFC
 * 8586), which the egress adds to every request it sends. A sender's own
 * entries can only raise it: an entry with a smaller count changes nothing.
 */
int route_loop_hops(const http_request *req) {
  int hops = 0;
  for (size_t i = 0; i < req->n_headers; i++) {
    if (strcasecmp(req->headers[i].name, "cdn-loop") != 0) continue;
    const char *p = req->headers[i].value;
    while (*p) {
      while (*p == ' ' || *p == '\t' || *p == ',') p++;
      size_t len = strcspn(p, ",");
      if (len >= 8 && strncasecmp(p, "edgenode", 8) == 0 &&
          (p[8] == ';' || p[8] == ' ' || p[8] == '\t' || len == 8)) {
        /* An entry of ours counts as one pass at least, its count unreadable or not. */
        const char *h = strstr(p, "hops=");
        char *end = NULL;
        long n = h && h < p + len ? strtol(h + 5, &end, 10) : 0;
        if (end == h + 5 || n < 1) n = 1;
        if (n > hops) hops = n > 1000 ? 1000 : (int)n;
      }
      p += len;
    }
  }
  return hops;
}
