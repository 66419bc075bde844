/*
 * Policies: the allow-list rules of one worker, compiled from their JSON
 * form, and the matching of a request against them. Default deny: a request
 * no rule names is refused, and so is every request of a worker without rules.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base.h"
#include "egress.h"

#define MAX_TIMEOUT_MS 600000
#define MAX_INJECT 32

static void rule_free(egress_rule *r) {
  free(r->match);
  free(r->host);
  free(r->path);
  for (size_t i = 0; i < r->n_methods; i++) free(r->methods[i]);
  free(r->methods);
  for (size_t i = 0; i < r->n_inject; i++) {
    free(r->inject[i].name);
    free(r->inject[i].value);
  }
  free(r->inject);
}

void egress_policy_free(egress_policy *p) {
  if (p == NULL) return;
  for (size_t i = 0; i < p->n_rules; i++) rule_free(&p->rules[i]);
  free(p->rules);
  free(p);
}

/* The Fetch standard's forbidden methods, refused whatever a policy says: an
 * upstream that answers TRACE echoes the request back, injected credentials
 * included, and CONNECT is not a request a URL can make. */
static int method_forbidden(const char *method) {
  return strcasecmp(method, "CONNECT") == 0 || strcasecmp(method, "TRACE") == 0 ||
         strcasecmp(method, "TRACK") == 0;
}

/* Headers the egress owns: framing, routing and hop-by-hop. */
static int header_reserved(const char *name) {
  static const char *const reserved[] = {
      "host", "content-length", "transfer-encoding", "connection", "keep-alive", "upgrade",
      "te", "trailer", "proxy-connection", "expect",
  };
  for (size_t i = 0; i < ARRAY_SIZE(reserved); i++)
    if (strcasecmp(name, reserved[i]) == 0) return 1;
  return 0;
}

int egress_secret_name_valid(const char *name, size_t len) {
  if (len == 0 || len > EGRESS_SECRET_NAME_MAX) return 0;
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)name[i];
    if (!(isalpha(c) || c == '_' || (i > 0 && isdigit(c)))) return 0;
  }
  return 1;
}

int egress_secret_value_valid(const char *value, size_t len) {
  if (len > EGRESS_SECRET_VALUE_MAX) return 0;
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)value[i];
    if ((c < 0x20 && c != '\t') || c == 0x7f) return 0;
  }
  return 1;
}

/* Calls fn for each ${secret:NAME}; literal text goes to fn with name NULL. */
typedef int (*template_fn)(void *data, const char *text, size_t len, int is_name);

static const char *template_walk(const char *t, template_fn fn, void *data) {
  static const char prefix[] = "${secret:";
  const char *p = t;
  for (;;) {
    const char *ref = strstr(p, "${");
    if (ref == NULL) {
      if (*p && fn && fn(data, p, strlen(p), 0) != 0) return "";
      return NULL;
    }
    if (strncmp(ref, prefix, sizeof prefix - 1) != 0)
      return "a template reference is written ${secret:NAME}";
    const char *name = ref + sizeof prefix - 1;
    const char *close = strchr(name, '}');
    if (close == NULL) return "unterminated ${secret:...} reference";
    if (!egress_secret_name_valid(name, (size_t)(close - name)))
      return "secret names are letters, digits and '_' (not starting with a digit), at most 64";
    if (fn && ref > p && fn(data, p, (size_t)(ref - p), 0) != 0) return "";
    if (fn && fn(data, name, (size_t)(close - name), 1) != 0) return "";
    p = close + 1;
  }
}

const char *egress_template_problem(const char *tmpl) {
  for (const char *p = tmpl; *p; p++) {
    unsigned char c = (unsigned char)*p;
    if ((c < 0x20 && c != '\t') || c == 0x7f) return "header values cannot hold control characters";
  }
  return template_walk(tmpl, NULL, NULL);
}

typedef struct expand_state {
  char *out;
  size_t len, cap;
  egress_secret_lookup lookup;
  void *data;
  char *missing;
} expand_state;

static void append(expand_state *s, const char *text, size_t len) {
  if (s->len + len + 1 > s->cap) {
    s->cap = (s->len + len + 1) * 2;
    s->out = xrealloc(s->out, s->cap);
  }
  memcpy(s->out + s->len, text, len);
  s->len += len;
  s->out[s->len] = '\0';
}

static int expand_piece(void *data, const char *text, size_t len, int is_name) {
  expand_state *s = data;
  if (!is_name) {
    append(s, text, len);
    return 0;
  }
  const char *value = s->lookup(s->data, text, len);
  if (value == NULL) {
    s->missing = xstrndup(text, len);
    return -1;
  }
  append(s, value, strlen(value));
  return 0;
}

char *egress_template_expand(const char *tmpl, egress_secret_lookup lookup, void *data,
                             char **missing) {
  expand_state s = {.lookup = lookup, .data = data};
  *missing = NULL;
  append(&s, "", 0);
  if (template_walk(tmpl, expand_piece, &s) != NULL) {
    if (s.out) memset(s.out, 0, s.len); /* may hold part of a secret */
    free(s.out);
    *missing = s.missing ? s.missing : xstrdup("?");
    return NULL;
  }
  return s.out;
}

/* ---- grants ---- */

typedef struct grant_state {
  const char *worker;
  egress_granted_fn granted;
  void *data;
  char *problem;
} grant_state;

static int check_piece(void *data, const char *text, size_t len, int is_name) {
  grant_state *s = data;
  if (!is_name || s->granted(s->data, text, len, s->worker) == 1) return 0;
  s->problem = xasprintf("secret %.*s is not granted to worker %s", (int)len, text, s->worker);
  return -1;
}

char *egress_policy_ungranted(const egress_policy *p, const char *worker,
                              egress_granted_fn granted, void *data) {
  grant_state s = {.worker = worker, .granted = granted, .data = data};
  for (size_t i = 0; p && i < p->n_rules && s.problem == NULL; i++)
    for (size_t j = 0; j < p->rules[i].n_inject && s.problem == NULL; j++)
      template_walk(p->rules[i].inject[j].value, check_piece, &s);
  return s.problem;
}

/* ---- compiling rules ---- */

typedef struct parse_ctx {
  size_t index;
  char *err;
} parse_ctx;

static int fail(parse_ctx *c, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(parse_ctx *c, const char *field, const char *fmt, ...) {
  char msg[384];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  c->err = field ? xasprintf("egress[%zu].%s: %s", c->index, field, msg)
                 : xasprintf("egress[%zu]: %s", c->index, msg);
  return -1;
}

static int parse_match_host(parse_ctx *c, egress_rule *r, const char *h, size_t len) {
  char host[256];
  if (len == 0) return fail(c, "match", "the host is missing");
  if (h[0] == '[') {
    unsigned char bin[16];
    if (len < 3 || h[len - 1] != ']' || len - 2 >= 64)
      return fail(c, "match", "an IPv6 host is written in brackets: https://[2001:db8::1]/");
    char buf[64];
    memcpy(buf, h + 1, len - 2);
    buf[len - 2] = '\0';
    if (inet_pton(AF_INET6, buf, bin) != 1 || inet_ntop(AF_INET6, bin, host, sizeof host) == NULL)
      return fail(c, "match", "invalid IPv6 address");
    r->host = xstrdup(host);
    return 0;
  }
  int wildcard = len > 2 && h[0] == '*' && h[1] == '.';
  const char *name = wildcard ? h + 1 : h; /* keep the dot: ".example.com" */
  size_t n = wildcard ? len - 1 : len;
  /* "example.com." is the same name, as URLs are matched (url.c). */
  if (n > 1 && name[n - 1] == '.' && name[n - 2] != '.') n--;
  if (n >= sizeof host) return fail(c, "match", "the host is too long");
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)tolower((unsigned char)name[i]);
    if (!(isalnum(ch) || ch == '-' || ch == '_' || ch == '.'))
      return fail(c, "match",
                  "the host must be a name, \"*.\" followed by a name, or an IP address "
                  "(a '*' is only allowed as the whole first label)");
    if (ch == '.' && (i + 1 == n || name[i + 1] == '.') )
      return fail(c, "match", "the host has an empty label");
    host[i] = (char)ch;
  }
  host[n] = '\0';
  if (!wildcard && host[0] == '.') return fail(c, "match", "the host has an empty label");
  /* A numeric last label must be a whole dotted-quad address. */
  const char *last = strrchr(host, '.');
  last = last ? last + 1 : host;
  int numeric = *last != '\0';
  for (const char *p = last; *p; p++)
    if (!isdigit((unsigned char)*p)) numeric = 0;
  unsigned char bin[4];
  if (numeric && (wildcard || inet_pton(AF_INET, host, bin) != 1))
    return fail(c, "match", "invalid IPv4 address");
  r->host = xstrdup(host);
  r->wildcard = wildcard;
  return 0;
}

static int parse_match_path(parse_ctx *c, egress_rule *r, const char *p) {
  if (*p == '\0') {
    r->path = xstrdup("/");
    return 0;
  }
  if (*p != '/') return fail(c, "match", "the path must start with '/'");
  for (const char *q = p; *q; q++) {
    unsigned char ch = (unsigned char)*q;
    if (ch == '?' || ch == '#')
      return fail(c, "match", "a rule matches paths only: remove the query or fragment");
    if (ch <= 0x20 || ch >= 0x7f || ch == '\\')
      return fail(c, "match", "the path has characters that must be percent-encoded");
  }
  /* Dot segments never reach matching (URLs are normalised first). */
  if (strstr(p, "/./") || strstr(p, "/../") || (strlen(p) >= 2 && strcmp(p + strlen(p) - 2, "/.") == 0) ||
      (strlen(p) >= 3 && strcmp(p + strlen(p) - 3, "/..") == 0))
    return fail(c, "match", "the path must not have \".\" or \"..\" segments");
  r->path = xstrdup(p);
  r->glob = strchr(p, '*') != NULL;
  return 0;
}

static int parse_match(parse_ctx *c, egress_rule *r, json_t *v) {
  const char *m = json_string_value(v);
  if (m == NULL) return fail(c, "match", "must be a string like \"https://api.example.com/v1/*\"");
  r->match = xstrdup(m);
  const char *sep = strstr(m, "://");
  if (sep == NULL) return fail(c, "match", "must start with http:// or https://");
  size_t slen = (size_t)(sep - m);
  if (slen == 4 && strncasecmp(m, "http", 4) == 0) r->https = 0;
  else if (slen == 5 && strncasecmp(m, "https", 5) == 0) r->https = 1;
  else return fail(c, "match", "the scheme must be http or https");
  const char *a = sep + 3;
  const char *a_end = a + strcspn(a, "/?#");
  if (memchr(a, '@', (size_t)(a_end - a))) return fail(c, "match", "must not have credentials");
  /* The port is after the last ':' that follows any IPv6 brackets. */
  const char *close = a[0] == '[' ? memchr(a, ']', (size_t)(a_end - a)) : NULL;
  const char *colon = memchr(close ? close : a, ':', (size_t)(a_end - (close ? close : a)));
  const char *h_end = colon ? colon : a_end;
  if (parse_match_host(c, r, a, (size_t)(h_end - a)) != 0) return -1;
  r->port = r->https ? 443 : 80;
  if (colon) {
    const char *p = colon + 1;
    if (a_end - p == 1 && *p == '*') {
      r->port = -1;
    } else {
      long port = 0;
      if (p == a_end) return fail(c, "match", "the port is empty");
      for (; p < a_end; p++) {
        if (!isdigit((unsigned char)*p) || port > 65535)
          return fail(c, "match", "the port must be a number 1..65535 or '*'");
        port = port * 10 + (*p - '0');
      }
      if (port < 1 || port > 65535) return fail(c, "match", "the port must be a number 1..65535 or '*'");
      r->port = (int)port;
    }
  }
  return parse_match_path(c, r, a_end);
}

static int parse_methods(parse_ctx *c, egress_rule *r, json_t *v) {
  if (v == NULL) return 0;
  if (!json_is_array(v) || json_array_size(v) == 0 || json_array_size(v) > 32)
    return fail(c, "methods", "must be a non-empty array of method names");
  r->methods = xcalloc(json_array_size(v), sizeof *r->methods);
  size_t i;
  json_t *m;
  json_array_foreach(v, i, m) {
    const char *s = json_string_value(m);
    if (s == NULL || !http_token(s, strlen(s)) || strlen(s) > 32)
      return fail(c, "methods", "item %zu is not an HTTP method name", i);
    if (method_forbidden(s))
      return fail(c, "methods", "item %zu: %s is never allowed (a forbidden method of the Fetch standard)", i, s);
    char *up = xstrdup(s);
    for (char *p = up; *p; p++) *p = (char)toupper((unsigned char)*p);
    r->methods[r->n_methods++] = up;
  }
  return 0;
}

static int parse_inject(parse_ctx *c, egress_rule *r, json_t *v) {
  if (v == NULL) return 0;
  if (!json_is_object(v)) return fail(c, "inject", "must be an object {\"headers\": {...}}");
  const char *key;
  json_t *val;
  json_object_foreach(v, key, val) {
    if (strcmp(key, "headers") != 0)
      return fail(c, "inject", "unknown member \"%s\" (only \"headers\")", key);
  }
  json_t *headers = json_object_get(v, "headers");
  if (!json_is_object(headers))
    return fail(c, "inject.headers", "must be an object of header name -> value");
  if (json_object_size(headers) > MAX_INJECT)
    return fail(c, "inject.headers", "at most %d headers", MAX_INJECT);
  r->inject = xcalloc(json_object_size(headers) + 1, sizeof *r->inject);
  json_object_foreach(headers, key, val) {
    if (!http_token(key, strlen(key)) || strlen(key) > 128)
      return fail(c, "inject.headers", "\"%s\" is not a valid header name", key);
    if (header_reserved(key))
      return fail(c, "inject.headers", "\"%s\" is managed by the egress and cannot be injected", key);
    const char *tmpl = json_string_value(val);
    if (tmpl == NULL) return fail(c, "inject.headers", "\"%s\": the value must be a string", key);
    const char *why = egress_template_problem(tmpl);
    if (why) return fail(c, "inject.headers", "\"%s\": %s", key, why);
    r->inject[r->n_inject].name = xstrdup(key);
    r->inject[r->n_inject].value = xstrdup(tmpl);
    r->n_inject++;
  }
  return 0;
}

static int parse_number(parse_ctx *c, json_t *rule, const char *key, json_int_t max,
                        uint64_t *out) {
  json_t *v = json_object_get(rule, key);
  if (v == NULL) return 0;
  if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > max)
    return fail(c, key, "must be an integer between 1 and %lld", (long long)max);
  *out = (uint64_t)json_integer_value(v);
  return 0;
}

static int parse_rule(parse_ctx *c, json_t *v, egress_rule *r) {
  if (!json_is_object(v))
    return fail(c, NULL, "a rule is an object {\"match\": \"https://host/path\", ...}");
  const char *key;
  json_t *val;
  json_object_foreach(v, key, val) {
    if (strcmp(key, "match") && strcmp(key, "methods") && strcmp(key, "inject") &&
        strcmp(key, "timeout_ms") && strcmp(key, "connect_timeout_ms") &&
        strcmp(key, "max_response_bytes"))
      return fail(c, NULL,
                  "unknown member \"%s\" (match, methods, inject, timeout_ms, "
                  "connect_timeout_ms, max_response_bytes)",
                  key);
  }
  json_t *m = json_object_get(v, "match");
  if (m == NULL) return fail(c, "match", "is required");
  uint64_t t = 0, ct = 0, max = 0;
  if (parse_match(c, r, m) != 0 || parse_methods(c, r, json_object_get(v, "methods")) != 0 ||
      parse_inject(c, r, json_object_get(v, "inject")) != 0 ||
      parse_number(c, v, "timeout_ms", MAX_TIMEOUT_MS, &t) != 0 ||
      parse_number(c, v, "connect_timeout_ms", MAX_TIMEOUT_MS, &ct) != 0 ||
      parse_number(c, v, "max_response_bytes", (json_int_t)1 << 40, &max) != 0)
    return -1;
  r->timeout_ms = (uint32_t)t;
  r->connect_timeout_ms = (uint32_t)ct;
  r->max_response_bytes = max;
  return 0;
}

egress_policy *egress_policy_parse(json_t *rules, char **err) {
  *err = NULL;
  if (!json_is_array(rules)) {
    *err = xstrdup("egress: must be an array of rules");
    return NULL;
  }
  if (json_array_size(rules) > EGRESS_MAX_RULES) {
    *err = xasprintf("egress: at most %d rules", EGRESS_MAX_RULES);
    return NULL;
  }
  egress_policy *p = xcalloc(1, sizeof *p);
  p->rules = xcalloc(json_array_size(rules) + 1, sizeof *p->rules);
  parse_ctx c = {0};
  size_t i;
  json_t *v;
  json_array_foreach(rules, i, v) {
    c.index = i;
    egress_rule *r = &p->rules[p->n_rules++];
    if (parse_rule(&c, v, r) != 0) {
      *err = c.err;
      egress_policy_free(p);
      return NULL;
    }
  }
  return p;
}

/* ---- matching ---- */

static int host_matches(const egress_rule *r, const egress_url *u) {
  if (!r->wildcard) return strcmp(r->host, u->host) == 0;
  if (u->ip) return 0;
  size_t hl = strlen(u->host), sl = strlen(r->host);
  /* hl > sl: at least one label before the suffix, so never the apex. */
  return hl > sl && memcmp(u->host + hl - sl, r->host, sl) == 0;
}

/* '*' matches any run of characters, '/' included; everything else itself. */
static int glob_match(const char *pat, const char *s, size_t len) {
  const char *star = NULL;
  size_t star_at = 0, i = 0;
  while (i < len) {
    if (*pat == '*') {
      star = pat++;
      star_at = i;
    } else if (*pat != '\0' && *pat == s[i]) {
      pat++;
      i++;
    } else if (star) {
      pat = star + 1;
      i = ++star_at;
    } else {
      return 0;
    }
  }
  while (*pat == '*') pat++;
  return *pat == '\0';
}

static int path_matches(const egress_rule *r, const egress_url *u) {
  const char *path = u->target;
  size_t len = u->path_len;
  if (r->glob) return glob_match(r->path, path, len);
  size_t pl = strlen(r->path);
  if (len < pl || memcmp(path, r->path, pl) != 0) return 0;
  /* A prefix ends at a segment boundary: "/v1" covers "/v1/x", not "/v10". */
  return len == pl || r->path[pl - 1] == '/' || path[pl] == '/';
}

static int method_matches(const egress_rule *r, const char *method) {
  if (r->methods == NULL) return 1;
  for (size_t i = 0; i < r->n_methods; i++)
    if (strcasecmp(r->methods[i], method) == 0) return 1;
  return 0;
}

const egress_rule *egress_policy_match(const egress_policy *p, const egress_url *u,
                                       const char *method, egress_verdict *verdict) {
  egress_verdict best = EGRESS_DENY_HOST;
  if (method_forbidden(method)) {
    *verdict = EGRESS_DENY_METHOD;
    return NULL;
  }
  for (size_t i = 0; p && i < p->n_rules; i++) {
    const egress_rule *r = &p->rules[i];
    if (r->https != u->https || (r->port != -1 && r->port != u->port) || !host_matches(r, u))
      continue;
    if (!path_matches(r, u)) {
      if (best < EGRESS_DENY_PATH) best = EGRESS_DENY_PATH;
      continue;
    }
    if (!method_matches(r, method)) {
      best = EGRESS_DENY_METHOD;
      continue;
    }
    *verdict = EGRESS_ALLOW;
    return r;
  }
  *verdict = best;
  return NULL;
}
