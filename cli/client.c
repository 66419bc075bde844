/*
 * edgectl's client of the control API, on libcurl: the node's URL (http://
 * or https://, with an optional path prefix for a reverse proxy), the bearer
 * token, timeouts, TLS verification (on unless --insecure; --cacert names
 * the CAs), proxies from the environment as curl reads them, and redirects.
 *
 * Redirects are followed here rather than by libcurl, so that the rule for
 * the token is ours and plain: it goes to the node's own origin (scheme,
 * host and port of --node) and nowhere else. A request sent on to another
 * origin goes without it, and the response says so, so that a 401 from
 * there can be explained. 307 and 308 keep the method and body, as do 301
 * and 302 (an API client must not turn a PUT into a GET); 303 turns into GET.
 *
 * One easy handle per process: the polling commands (drain, top) reuse its
 * connection.
 */
#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "base.h"
#include "cli.h"

/* No sane answer comes near this; a runaway one must not eat the machine. */
#define MAX_RESPONSE_BYTES (512u * 1024 * 1024)
#define MAX_TOKEN_BYTES 4096
#define MAX_REDIRECTS 10

/* Where a URL points, for comparing origins and naming it in messages. */
typedef struct origin {
  char *scheme;    /* lowercase */
  char *host;      /* lowercase; IPv6 in brackets */
  long port;       /* explicit or the scheme's */
  char *authority; /* "host:port" */
} origin;

struct cli_client {
  CURL *curl;
  char *base;        /* scheme://authority/prefix: routes are appended to it */
  origin home;       /* the node's origin: the only one that gets the token */
  char *auth_header; /* "Authorization: Bearer ..." */
  const char *cacert;
  int insecure;
  long timeout_s;
  char errbuf[CURL_ERROR_SIZE];
  char error[1024];
  cli_line_fn line_fn; /* cli_client_stream: a 2xx body goes here line by line */
  void *line_arg;
};

typedef struct sink {
  char *data;
  size_t len, cap;
  int too_large;
  cli_client *c;
} sink;

/* ---- the node's URL and the token ---- */

/* Brackets hold an IPv6 address and close before the port: without this
 * check "[::1" would reach the resolver as a host name. */
static void check_brackets(const char *authority, const char *s) {
  if (authority[0] != '[') {
    if (strpbrk(authority, "[]") != NULL)
      cli_usage_error("--node: brackets only enclose an IPv6 address: '%s'", s);
    return;
  }
  const char *close = strchr(authority, ']');
  if (close == NULL) cli_usage_error("--node: unclosed '[' in '%s' (e.g. http://[::1]:8081)", s);
  size_t len = (size_t)(close - authority) - 1;
  if (len == 0 || strspn(authority + 1, "0123456789abcdefABCDEF:.") != len ||
      memchr(authority + 1, ':', len) == NULL)
    cli_usage_error("--node: not an IPv6 address between brackets in '%s'", s);
  if (close[1] != '\0' && close[1] != ':')
    cli_usage_error("--node: expected ':PORT' after ']' in '%s'", s);
}

/*
 * Checks --node and returns the base URL for libcurl: scheme, authority and
 * the path prefix without a trailing slash. Anything malformed is a usage
 * error that names --node, before any lookup.
 */
static char *node_base_url(const char *s) {
  size_t skip;
  const char *scheme;
  if (strncasecmp(s, "http://", 7) == 0) {
    skip = 7;
    scheme = "http";
  } else if (strncasecmp(s, "https://", 8) == 0) {
    skip = 8;
    scheme = "https";
  } else {
    if (strstr(s, "://") != NULL)
      cli_usage_error("--node: only http:// and https:// URLs are supported: '%s'", s);
    cli_usage_error("--node: expected http://HOST:PORT or https://HOST:PORT, not '%s'", s);
  }
  const char *auth = s + skip;
  size_t alen = strcspn(auth, "/?#");
  if (alen == 0) cli_usage_error("--node: no host in '%s'", s);
  /* On the stack: a usage error exits from the checks below, and would leave heap copies behind. */
  char authority[320], hp[330];
  if (alen >= sizeof authority) cli_usage_error("--node: the host and port are too long in '%s'", s);
  memcpy(authority, auth, alen);
  authority[alen] = '\0';
  /* The URL is not echoed: it would put the password on the terminal. */
  if (strchr(authority, '@') != NULL)
    cli_usage_error("--node: a user name or password in the URL is not supported "
                    "(the token comes from --token-file)");
  check_brackets(authority, s);

  /* A port is optional; parse_host_port wants one, so give the scheme's. */
  const char *bracket = strrchr(authority, ']');
  const char *colon = strrchr(authority, ':');
  int has_port = colon != NULL && (bracket == NULL || colon > bracket);
  if (authority[0] != '[' && colon != NULL && strchr(authority, ':') != colon)
    cli_usage_error("--node: write IPv6 addresses in brackets: '%s'", s);
  snprintf(hp, sizeof hp, "%s%s", authority, has_port ? "" : skip == 7 ? ":80" : ":443");
  char host[64];
  int port = 0;
  if (hp[0] == ':' || parse_host_port(hp, host, &port) < 0 || port == 0)
    cli_usage_error("--node: bad host or port in '%s'", s);

  const char *path = auth + alen;
  size_t plen = strcspn(path, "?#");
  while (plen > 0 && path[plen - 1] == '/') plen--;
  return xasprintf("%s://%s%.*s", scheme, authority, (int)plen, path);
}

char *cli_read_file(const char *path, size_t max, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) return NULL;
  struct stat st;
  int known = fstat(fileno(f), &st) == 0;
  if (!known || !S_ISREG(st.st_mode)) {
    int e = known && S_ISDIR(st.st_mode) ? EISDIR : EINVAL;
    fclose(f);
    errno = e;
    return NULL;
  }
  size_t cap = 4096, n = 0, got;
  char *buf = xmalloc(cap);
  while ((got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
    n += got;
    if (max && n > max) break; /* the caller sees it is too large */
    if (cap - n < 2) buf = xrealloc(buf, cap *= 2);
  }
  int failed = ferror(f);
  fclose(f);
  if (failed) {
    free(buf);
    errno = EIO;
    return NULL;
  }
  buf[n] = '\0';
  *len = n;
  return buf;
}

/* The token file's content without surrounding whitespace. */
static char *read_token(const char *path) {
  size_t len;
  char *raw = cli_read_file(path, MAX_TOKEN_BYTES * 4, &len);
  if (raw == NULL)
    cli_fail("cannot read token file %s: %s (set --token-file or EDGENODE_TOKEN_FILE)", path,
             strerror(errno));
  size_t start = 0;
  while (start < len && strchr(" \t\r\n", raw[start]) != NULL) start++;
  while (len > start && strchr(" \t\r\n", raw[len - 1]) != NULL) len--;
  if (len == start) cli_fail("token file %s is empty", path);
  if (len - start > MAX_TOKEN_BYTES) cli_fail("token file %s is too large for a token", path);
  for (size_t i = start; i < len; i++) {
    unsigned char c = (unsigned char)raw[i];
    if (c < 0x21 || c > 0x7e) cli_fail("token file %s holds more than one printable token", path);
  }
  char *token = xstrndup(raw + start, len - start);
  free(raw);
  return token;
}

/* ---- origins ---- */

static void origin_free(origin *o) {
  free(o->scheme);
  free(o->host);
  free(o->authority);
  memset(o, 0, sizeof *o);
}

static char *lowercase(char *s) {
  for (char *p = s; *p; p++) {
    if (*p >= 'A' && *p <= 'Z') *p = (char)(*p - 'A' + 'a');
  }
  return s;
}

/* Splits an absolute http(s) URL. Returns 0, or -1 when libcurl cannot parse it. */
static int origin_parse(const char *url, origin *o) {
  memset(o, 0, sizeof *o);
  CURLU *u = curl_url();
  if (u == NULL) abort();
  char *scheme = NULL, *host = NULL, *port = NULL;
  int rc = -1;
  if (curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
      curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
      curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
      curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) == CURLUE_OK) {
    o->scheme = lowercase(xstrdup(scheme));
    o->host = lowercase(xstrdup(host));
    o->port = strtol(port, NULL, 10);
    o->authority = xasprintf("%s:%ld", o->host, o->port);
    rc = 0;
  }
  curl_free(scheme);
  curl_free(host);
  curl_free(port);
  curl_url_cleanup(u);
  return rc;
}

static int origin_equal(const origin *a, const origin *b) {
  return strcmp(a->scheme, b->scheme) == 0 && strcmp(a->host, b->host) == 0 && a->port == b->port;
}

/* ---- the client ---- */

cli_client *cli_client_new(const cli_options *o) {
  cli_client *c = xcalloc(1, sizeof *c);
  c->base = node_base_url(o->node);
  if (origin_parse(c->base, &c->home) < 0) cli_usage_error("--node: cannot parse '%s'", o->node);
  char *token = read_token(o->token_file);
  c->auth_header = xasprintf("Authorization: Bearer %s", token);
  free(token);
  c->cacert = o->cacert;
  c->insecure = o->insecure;
  c->timeout_s = o->timeout_s;
  static int initialised;
  if (!initialised) {
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) cli_fail("cannot initialise libcurl");
    initialised = 1;
  }
  c->curl = curl_easy_init();
  if (c->curl == NULL) cli_fail("cannot initialise libcurl");
  return c;
}

void cli_client_free(cli_client *c) {
  if (c == NULL) return;
  curl_easy_cleanup(c->curl);
  origin_free(&c->home);
  free(c->base);
  /* The header holds the token: do not leave it in freed memory. */
  memset(c->auth_header, 0, strlen(c->auth_header));
  free(c->auth_header);
  free(c);
}

const char *cli_client_error(const cli_client *c) { return c->error; }

int cli_client_stream(cli_client *c, const char *path, cli_line_fn fn, void *arg,
                      cli_response *r) {
  c->line_fn = fn;
  c->line_arg = arg;
  int rc = cli_client_request(c, "GET", path, NULL, r);
  c->line_fn = NULL;
  c->line_arg = NULL;
  return rc;
}

/* A streamed 2xx body: whole lines to line_fn, the rest kept for the next bytes. */
static size_t on_stream(sink *s, const char *data, size_t len) {
  for (size_t i = 0; i < len; i++) {
    if (data[i] != '\n') {
      if (s->cap - s->len < 2) {
        if (s->len >= MAX_RESPONSE_BYTES) return 0; /* one line that never ends */
        s->cap = s->cap ? s->cap * 2 : 4096;
        s->data = xrealloc(s->data, s->cap);
      }
      s->data[s->len++] = data[i];
      continue;
    }
    if (s->data == NULL) s->data = xmalloc(s->cap = 4096);
    s->data[s->len] = '\0';
    s->c->line_fn(s->c->line_arg, s->data, s->len);
    s->len = 0;
  }
  return len;
}

static size_t on_data(char *data, size_t size, size_t n, void *arg) {
  sink *s = arg;
  size_t len = size * n;
  long status = 0;
  if (s->c && s->c->line_fn &&
      curl_easy_getinfo(s->c->curl, CURLINFO_RESPONSE_CODE, &status) == CURLE_OK &&
      status >= 200 && status < 300)
    return on_stream(s, data, len);
  if (s->len + len > MAX_RESPONSE_BYTES) {
    s->too_large = 1;
    return 0; /* libcurl stops with CURLE_WRITE_ERROR */
  }
  if (s->cap - s->len < len + 1) {
    size_t cap = s->cap ? s->cap : 16384;
    while (cap - s->len < len + 1) cap *= 2;
    s->data = xrealloc(s->data, cap);
    s->cap = cap;
  }
  memcpy(s->data + s->len, data, len);
  s->len += len;
  s->data[s->len] = '\0';
  return len;
}

/* The proxy variable libcurl would read for the scheme, when one is set. */
static const char *proxy_variable(const char *scheme) {
  static const char *const http_vars[] = {"http_proxy", "all_proxy", "ALL_PROXY"};
  static const char *const https_vars[] = {"https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"};
  int https = strcmp(scheme, "https") == 0;
  const char *const *vars = https ? https_vars : http_vars;
  size_t n = https ? ARRAY_SIZE(https_vars) : ARRAY_SIZE(http_vars);
  for (size_t i = 0; i < n; i++) {
    const char *v = getenv(vars[i]);
    if (v != NULL && v[0] != '\0') return vars[i];
  }
  return NULL;
}

/* Says in c->error why a request to `to` got no answer. */
static void describe_failure(cli_client *c, CURLcode rc, const origin *to, const sink *in) {
  long os_errno = 0;
  if (curl_easy_getinfo(c->curl, CURLINFO_OS_ERRNO, &os_errno) != CURLE_OK) os_errno = 0;
  const char *detail = c->errbuf[0] ? c->errbuf : curl_easy_strerror(rc);
  const char *proxy = proxy_variable(to->scheme);
  char *msg;
  switch (rc) {
    case CURLE_COULDNT_RESOLVE_HOST: msg = xasprintf("cannot resolve %s: %s", to->host, detail); break;
    case CURLE_COULDNT_RESOLVE_PROXY:
      msg = xasprintf("cannot resolve the proxy: %s (from $%s)", detail, proxy ? proxy : "?");
      break;
    case CURLE_COULDNT_CONNECT:
      if (proxy != NULL)
        msg = xasprintf("cannot connect to %s through the proxy of $%s: %s", to->authority, proxy,
                        detail);
      else
        msg = xasprintf("cannot connect to %s: %s (is edgenode running?)", to->authority,
                        os_errno ? strerror((int)os_errno) : detail);
      break;
    case CURLE_OPERATION_TIMEDOUT:
      msg = xasprintf("no answer from %s: timed out (%ld s without a byte; --timeout)",
                      to->authority, c->timeout_s);
      break;
    case CURLE_PEER_FAILED_VERIFICATION:
      msg = xasprintf("cannot verify the TLS certificate of %s: %s (--cacert FILE names the CA "
                      "that signed it; --insecure skips the check)",
                      to->authority, detail);
      break;
    case CURLE_SSL_CACERT_BADFILE:
      msg = xasprintf("cannot use the CA file %s: %s", c->cacert ? c->cacert : "(default)", detail);
      break;
    case CURLE_SSL_CONNECT_ERROR:
      msg = xasprintf("TLS handshake with %s failed: %s%s", to->authority, detail,
                      strstr(detail, "wrong version number")
                          ? " (does it serve http:// rather than https://?)"
                          : "");
      break;
    case CURLE_GOT_NOTHING:
      msg = xasprintf("%s closed the connection without answering", to->authority);
      break;
    case CURLE_SEND_ERROR: msg = xasprintf("sending to %s failed: %s", to->authority, detail); break;
    case CURLE_RECV_ERROR:
      msg = xasprintf("receiving from %s failed: %s", to->authority, detail);
      break;
    case CURLE_WEIRD_SERVER_REPLY:
      msg = xasprintf("malformed HTTP response from %s: %s", to->authority, detail);
      break;
    case CURLE_WRITE_ERROR:
      msg = in->too_large ? xasprintf("the answer from %s is larger than %u MiB", to->authority,
                                      MAX_RESPONSE_BYTES >> 20)
                          : xasprintf("request to %s failed: %s", to->authority, detail);
      break;
    default: msg = xasprintf("request to %s failed: %s", to->authority, detail); break;
  }
  snprintf(c->error, sizeof c->error, "%s", msg);
  free(msg);
}

/* Sets up one hop. The token goes only to the node's own origin. */
static struct curl_slist *prepare(cli_client *c, const char *url, const char *method,
                                  const char *body, int with_token, sink *in) {
  CURL *h = c->curl;
  curl_easy_reset(h); /* keeps the connection and the DNS cache */
  struct curl_slist *headers = NULL;
  const char *lines[] = {"Accept: application/json",
                         /* the body is sent at once: no wait for a 100 Continue */
                         "Expect:", body ? "Content-Type: application/json" : NULL,
                         with_token ? c->auth_header : NULL};
  for (size_t i = 0; i < ARRAY_SIZE(lines); i++) {
    if (lines[i] == NULL) continue;
    struct curl_slist *next = curl_slist_append(headers, lines[i]);
    if (next == NULL) abort();
    headers = next;
  }
  c->errbuf[0] = '\0';
  int failed = 0;
#define SET(opt, value) failed |= curl_easy_setopt(h, opt, value) != CURLE_OK
  SET(CURLOPT_URL, url);
  SET(CURLOPT_HTTPHEADER, headers);
  SET(CURLOPT_USERAGENT, "edgectl/" EDGENODE_VERSION);
  SET(CURLOPT_PROTOCOLS_STR, "http,https");
  SET(CURLOPT_NOSIGNAL, 1L);
  SET(CURLOPT_ERRORBUFFER, c->errbuf);
  SET(CURLOPT_WRITEFUNCTION, on_data);
  SET(CURLOPT_WRITEDATA, in);
  SET(CURLOPT_CONNECTTIMEOUT, c->timeout_s);
  /* Silence, not a slow answer, is what times out: a deploy may compile for 30 s. */
  if (c->line_fn == NULL) { /* a stream may stay silent as long as the tenant does */
    SET(CURLOPT_LOW_SPEED_LIMIT, 1L);
    SET(CURLOPT_LOW_SPEED_TIME, c->timeout_s);
  }
  if (c->cacert != NULL) SET(CURLOPT_CAINFO, c->cacert);
  if (c->insecure) {
    SET(CURLOPT_SSL_VERIFYPEER, 0L);
    SET(CURLOPT_SSL_VERIFYHOST, 0L);
  }
  if (body != NULL) {
    SET(CURLOPT_POSTFIELDS, body);
    SET(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
    if (strcmp(method, "POST") != 0) SET(CURLOPT_CUSTOMREQUEST, method);
  } else if (strcmp(method, "GET") == 0) {
    SET(CURLOPT_HTTPGET, 1L);
  } else {
    SET(CURLOPT_CUSTOMREQUEST, method);
  }
#undef SET
  if (failed) cli_fail("libcurl refused an option (is it older than 7.85?)");
  return headers;
}

static int is_redirect(long status) {
  return status == 301 || status == 302 || status == 303 || status == 307 || status == 308;
}

int cli_client_request(cli_client *c, const char *method, const char *path, const char *body,
                       cli_response *r) {
  memset(r, 0, sizeof *r);
  c->error[0] = '\0';
  char *url = xasprintf("%s%s", c->base, path);
  int left_origin = 0;
  for (int hops = 0;; hops++) {
    origin to;
    if (origin_parse(url, &to) < 0) {
      snprintf(c->error, sizeof c->error, "cannot follow a redirect to '%.200s'", url);
      free(url);
      return -1;
    }
    int home = origin_equal(&to, &c->home);
    left_origin |= !home;
    sink in = {.c = c};
    struct curl_slist *headers = prepare(c, url, method, body, home, &in);
    CURLcode rc = curl_easy_perform(c->curl);
    curl_slist_free_all(headers);
    if (rc != CURLE_OK) {
      describe_failure(c, rc, &to, &in);
      origin_free(&to);
      free(in.data);
      free(url);
      return -1;
    }
    long status = 0;
    char *location = NULL;
    if (curl_easy_getinfo(c->curl, CURLINFO_RESPONSE_CODE, &status) != CURLE_OK ||
        curl_easy_getinfo(c->curl, CURLINFO_REDIRECT_URL, &location) != CURLE_OK)
      location = NULL;
    if (is_redirect(status) && location != NULL) {
      if (hops == MAX_REDIRECTS) {
        snprintf(c->error, sizeof c->error, "more than %d redirects, the last from %s",
                 MAX_REDIRECTS, to.authority);
        origin_free(&to);
        free(in.data);
        free(url);
        return -1;
      }
      if (status == 303) {
        method = "GET";
        body = NULL;
      }
      free(url);
      url = xstrdup(location); /* libcurl's copy dies with the next request */
      origin_free(&to);
      free(in.data);
      continue;
    }
    origin_free(&to);
    r->status = status;
    r->body = in.data ? in.data : xstrdup("");
    r->body_len = in.len;
    r->left_origin = left_origin;
    r->url = url;
    return 0;
  }
}

void cli_response_free(cli_response *r) {
  free(r->body);
  free(r->url);
  memset(r, 0, sizeof *r);
}

json_t *cli_read_json(const char *file) {
  size_t len;
  char *text = cli_read_file(file, 0, &len);
  if (text == NULL) cli_fail("%s: %s", file, strerror(errno));
  json_error_t err;
  json_t *j = json_loadb(text, len, 0, &err);
  free(text);
  if (j == NULL) cli_fail("%s:%d:%d: %s", file, err.line, err.column, err.text);
  return j;
}

json_t *cli_response_json(const cli_response *r) {
  if (r->body_len == 0) return NULL;
  return json_loadb(r->body, r->body_len, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
}
