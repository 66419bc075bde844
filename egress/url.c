/*
 * URLs as the egress sees them: absolute http(s) only, credentials refused,
 * dot segments removed so that a policy's path match sees the path the
 * upstream will serve.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base.h"
#include "egress.h"

void egress_url_free(egress_url *u) {
  free(u->target);
  u->target = NULL;
}

/* "." or its percent-encoded forms, case-insensitively. */
static int is_dot(const char *s, size_t len) {
  return (len == 1 && s[0] == '.') || (len == 3 && strncasecmp(s, "%2e", 3) == 0);
}

static int is_dotdot(const char *s, size_t len) {
  if (len == 2) return s[0] == '.' && s[1] == '.';
  if (len == 4) return (s[0] == '.' && strncasecmp(s + 1, "%2e", 3) == 0) ||
                       (strncasecmp(s, "%2e", 3) == 0 && s[3] == '.');
  return len == 6 && strncasecmp(s, "%2e%2e", 6) == 0;
}

/*
 * Removes "." and ".." segments from path (which starts with '/'), keeping
 * a trailing slash where one was implied. Writes a NUL-terminated result of
 * at most len + 1 bytes into out.
 */
static size_t remove_dot_segments(const char *path, size_t len, char *out) {
  size_t o = 0;
  size_t i = 1; /* past the leading '/' */
  out[o++] = '/';
  for (;;) {
    size_t seg_end = i;
    while (seg_end < len && path[seg_end] != '/') seg_end++;
    const char *seg = path + i;
    size_t seg_len = seg_end - i;
    int last = seg_end >= len;
    if (is_dot(seg, seg_len)) {
      /* nothing to add; the '/' already written stands for the directory */
    } else if (is_dotdot(seg, seg_len)) {
      /* drop the last segment written: back to the '/' before it */
      if (o > 1) {
        o--; /* the '/' that ends the previous segment */
        while (o > 1 && out[o - 1] != '/') o--;
      }
    } else {
      memcpy(out + o, seg, seg_len);
      o += seg_len;
      if (!last) out[o++] = '/';
    }
    if (last) break;
    i = seg_end + 1;
  }
  out[o] = '\0';
  return o;
}

/* An encoded '/' or '\\' at s, which many servers decode before they
 * resolve dot segments. */
static int is_encoded_separator(const char *s, size_t left) {
  return left >= 3 && s[0] == '%' &&
         (strncasecmp(s, "%2f", 3) == 0 || strncasecmp(s, "%5c", 3) == 0);
}

/*
 * Whether a ".." hides behind an encoded slash ("/public/..%2fsecret"):
 * this file resolves dot segments between literal slashes only, and an
 * upstream that decodes %2F first would serve a path the policy never saw.
 */
static int hides_dot_segment(const char *path, size_t len) {
  size_t piece = 0;
  int encoded_around = 0;
  for (size_t i = 0; i <= len;) {
    int literal_end = i == len || path[i] == '/';
    int encoded_end = !literal_end && is_encoded_separator(path + i, len - i);
    if (literal_end || encoded_end) {
      if ((encoded_end || encoded_around) && is_dotdot(path + piece, i - piece)) return 1;
      encoded_around = encoded_end;
      i += encoded_end ? 3 : 1;
      piece = i;
    } else {
      i++;
    }
  }
  return 0;
}

static int valid_target_char(unsigned char c) {
  return c > 0x20 && c < 0x7f && c != '\\' && c != '"' && c != '<' && c != '>' && c != '`' &&
         c != '{' && c != '}' && c != '|' && c != '^';
}

/* A reg-name host: letters, digits, '-', '_', '.'; no empty labels. */
static const char *check_name(char *host, size_t len) {
  if (len == 0) return "URL has no host";
  if (len > 253) return "URL host is too long";
  /* The root label's dot is gone already: one more is an empty label. */
  if (host[0] == '.' || host[len - 1] == '.') return "URL host has an empty label";
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)host[i];
    if (c >= 'A' && c <= 'Z') host[i] = (char)(c - 'A' + 'a');
    else if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
               c == '.'))
      return "URL host has characters that are not allowed in a host name";
    if (c == '.' && i + 1 < len && host[i + 1] == '.') return "URL host has an empty label";
  }
  return NULL;
}

/* Whether the last label is numeric (decimal or 0x hex), as in an IPv4 address. */
static int looks_numeric(const char *host) {
  const char *last = strrchr(host, '.');
  last = last ? last + 1 : host;
  if (*last == '\0') return 0;
  if (last[0] == '0' && (last[1] == 'x' || last[1] == 'X')) return 1;
  for (const char *p = last; *p; p++)
    if (!isdigit((unsigned char)*p)) return 0;
  return 1;
}

static int parse_authority(const char *a, size_t len, egress_url *u, const char **err) {
  if (memchr(a, '@', len)) {
    *err = "URL has credentials (user:password@); put them in a header instead";
    return -1;
  }
  const char *port = NULL;
  size_t host_len;
  if (len > 0 && a[0] == '[') {
    const char *close = memchr(a, ']', len);
    if (close == NULL) {
      *err = "URL has an unterminated IPv6 address";
      return -1;
    }
    char buf[64];
    size_t n = (size_t)(close - a - 1);
    unsigned char bin[16];
    if (n >= sizeof buf) {
      *err = "URL has an invalid IPv6 address";
      return -1;
    }
    memcpy(buf, a + 1, n);
    buf[n] = '\0';
    if (inet_pton(AF_INET6, buf, bin) != 1 ||
        inet_ntop(AF_INET6, bin, u->host, sizeof u->host) == NULL) {
      *err = "URL has an invalid IPv6 address";
      return -1;
    }
    u->ip = 6;
    size_t rest = len - (size_t)(close + 1 - a);
    if (rest > 0) {
      if (close[1] != ':') {
        *err = "URL has text after the IPv6 address";
        return -1;
      }
      port = close + 2;
    }
  } else {
    const char *colon = memchr(a, ':', len);
    host_len = colon ? (size_t)(colon - a) : len;
    if (host_len > 0 && a[host_len - 1] == '.') host_len--; /* the root label */
    if (host_len >= sizeof u->host) {
      *err = "URL host is too long";
      return -1;
    }
    memcpy(u->host, a, host_len);
    u->host[host_len] = '\0';
    if ((*err = check_name(u->host, host_len)) != NULL) return -1;
    if (looks_numeric(u->host)) {
      unsigned char bin[4];
      if (inet_pton(AF_INET, u->host, bin) != 1) {
        *err = "URL host is not a valid IPv4 address";
        return -1;
      }
      u->ip = 4;
    }
    if (colon) port = colon + 1;
  }
  u->port = u->https ? 443 : 80;
  if (port != NULL && port < a + len) {
    long v = 0;
    for (const char *p = port; p < a + len; p++) {
      if (!isdigit((unsigned char)*p) || v > 65535) {
        *err = "URL has an invalid port";
        return -1;
      }
      v = v * 10 + (*p - '0');
    }
    if (v < 1 || v > 65535) {
      *err = "URL has an invalid port";
      return -1;
    }
    u->port = (int)v;
  }
  u->default_port = u->port == (u->https ? 443 : 80);
  return 0;
}

int egress_url_parse(const char *s, size_t len, egress_url *out, const char **err) {
  memset(out, 0, sizeof *out);
  const char *sep = NULL;
  for (size_t i = 0; i + 2 < len; i++) {
    if (s[i] == ':' && s[i + 1] == '/' && s[i + 2] == '/') {
      sep = s + i;
      break;
    }
    if (!isalnum((unsigned char)s[i]) && s[i] != '+' && s[i] != '-' && s[i] != '.') break;
  }
  if (sep == NULL) {
    *err = "not an absolute URL";
    return -1;
  }
  size_t scheme_len = (size_t)(sep - s);
  if (scheme_len == 4 && strncasecmp(s, "http", 4) == 0) out->https = 0;
  else if (scheme_len == 5 && strncasecmp(s, "https", 5) == 0) out->https = 1;
  else {
    *err = "unsupported URL scheme (only http and https can be fetched)";
    return -1;
  }
  const char *a = sep + 3, *end = s + len;
  const char *a_end = a;
  while (a_end < end && *a_end != '/' && *a_end != '?' && *a_end != '#') a_end++;
  if (parse_authority(a, (size_t)(a_end - a), out, err) != 0) return -1;

  const char *t = a_end;
  const char *t_end = memchr(t, '#', (size_t)(end - t));
  if (t_end == NULL) t_end = end;
  for (const char *p = t; p < t_end; p++) {
    if (!valid_target_char((unsigned char)*p)) {
      *err = "URL has characters that must be percent-encoded";
      return -1;
    }
  }
  const char *q = memchr(t, '?', (size_t)(t_end - t));
  const char *path = t;
  size_t path_len = (size_t)((q ? q : t_end) - t);
  size_t query_len = q ? (size_t)(t_end - q) : 0;
  if (hides_dot_segment(path, path_len)) {
    *err = "URL path has a \"..\" segment next to an encoded slash (%2F or %5C)";
    return -1;
  }
  char *target = xmalloc(path_len + query_len + 3);
  size_t n;
  if (path_len == 0) {
    target[0] = '/';
    target[1] = '\0';
    n = 1;
  } else {
    n = remove_dot_segments(path, path_len, target);
  }
  out->path_len = n;
  if (query_len) memcpy(target + n, q, query_len);
  target[n + query_len] = '\0';
  out->target = target;
  return 0;
}

/* Percent-encodes what a sloppy Location may hold raw (spaces, non-ASCII). */
static char *encode_loose(const char *s, size_t len) {
  while (len > 0 && (*s == ' ' || *s == '\t')) s++, len--;
  while (len > 0 && (s[len - 1] == ' ' || s[len - 1] == '\t')) len--;
  char *out = xmalloc(len * 3 + 1);
  size_t o = 0;
  static const char hex[] = "0123456789ABCDEF";
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c <= 0x20 || c >= 0x7f || c == '"' || c == '<' || c == '>' || c == '`' || c == '{' ||
        c == '}' || c == '|' || c == '^') {
      out[o++] = '%';
      out[o++] = hex[c >> 4];
      out[o++] = hex[c & 15];
    } else {
      out[o++] = (char)c;
    }
  }
  out[o] = '\0';
  return out;
}

static int has_scheme(const char *s) {
  if (!isalpha((unsigned char)s[0])) return 0;
  for (const char *p = s + 1; *p; p++) {
    if (*p == ':') return 1;
    if (!isalnum((unsigned char)*p) && *p != '+' && *p != '-' && *p != '.') return 0;
  }
  return 0;
}

int egress_url_resolve(const egress_url *base, const char *ref, size_t len, egress_url *out,
                       const char **err) {
  char *r = encode_loose(ref, len);
  for (char *p = r; *p; p++)
    if (*p == '\\') *p = '/'; /* as browsers do for http(s) */
  char *abs;
  char *origin = egress_url_origin(base);
  if (has_scheme(r)) {
    abs = xstrdup(r);
  } else if (r[0] == '/' && r[1] == '/') {
    abs = xasprintf("%s:%s", base->https ? "https" : "http", r);
  } else if (r[0] == '/') {
    abs = xasprintf("%s%s", origin, r);
  } else if (r[0] == '?') {
    abs = xasprintf("%s%.*s%s", origin, (int)base->path_len, base->target, r);
  } else if (r[0] == '#' || r[0] == '\0') {
    abs = xasprintf("%s%s", origin, base->target);
  } else {
    size_t dir = base->path_len;
    while (dir > 0 && base->target[dir - 1] != '/') dir--;
    abs = xasprintf("%s%.*s%s", origin, (int)dir, base->target, r);
  }
  free(origin);
  free(r);
  int rc = egress_url_parse(abs, strlen(abs), out, err);
  free(abs);
  return rc;
}

char *egress_url_host_header(const egress_url *u) {
  const char *l = u->ip == 6 ? "[" : "", *rb = u->ip == 6 ? "]" : "";
  if (u->default_port) return xasprintf("%s%s%s", l, u->host, rb);
  return xasprintf("%s%s%s:%d", l, u->host, rb, u->port);
}

char *egress_url_origin(const egress_url *u) {
  char *host = egress_url_host_header(u);
  char *s = xasprintf("%s://%s", u->https ? "https" : "http", host);
  free(host);
  return s;
}

char *egress_url_string(const egress_url *u) {
  char *origin = egress_url_origin(u);
  char *s = xasprintf("%s%s", origin, u->target);
  free(origin);
  return s;
}
