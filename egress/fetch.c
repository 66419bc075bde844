/*
 * One fetch(): from the worker's PROTO_FETCH to the last body byte.
 *
 * Each hop (the first request and every redirect followed) is checked
 * against the tenant's policy as it stands at that moment, counted against
 * the request's subrequest budget (the worker counts the first; the egress
 * asks it before each redirect), resolved by the egress itself and every
 * resolved address judged by the SSRF rules before a connection is opened.
 * Credentials are injected per hop, from the rule that allowed that hop.
 *
 * The response head goes to the worker as soon as it and the body bytes of
 * the same batch are in; more body is sent only when the worker asks
 * (PROTO_FETCH_READ), and the upstream is not read while more than
 * BUFFER_HIGH bytes wait for the worker.
 */
#include <arpa/inet.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "egress_int.h"

#define BUFFER_HIGH (512u * 1024u)
#define CHUNK_MAX (256u * 1024u)
#define REDIRECT_DRAIN_MAX (64u * 1024u)
#define MAX_ADDRS 16

enum { REDIRECT_FOLLOW, REDIRECT_MANUAL, REDIRECT_ERROR };

struct fetch {
  egress *e;
  client *client;
  uint32_t id;
  fetch *next;
  char *tenant;
  char *request_id;         /* may be NULL */
  char *method;             /* of the current hop */
  json_t *headers;          /* the worker's, flat [name, value, ...] */
  uint8_t *body;            /* the worker's; dropped when a redirect turns the method to GET */
  size_t body_len;
  int redirect_mode;
  int awaiting_grant;       /* asked; the next hop waits for the worker's answer */
  int granted;              /* the worker allowed the next hop */
  int hops;
  int retried;              /* this hop was resent on a fresh connection */
  int redirected;
  int cross_origin;         /* a redirect left the first origin */
  int loop;                 /* times the request that made it came through an egress */
  int drop_content_headers; /* a redirect dropped the body */
  char *from;               /* the origin of the hop that redirected, for messages */
  egress_url url;           /* of the current hop */
  const char *first_rule;   /* for logs */
  uint32_t connect_timeout_ms;
  uint32_t timeout_ms;
  uint64_t max_bytes;
  uint64_t started_ns;
  uv_timer_t timer;         /* the total timeout */
  int timer_started;
  struct resolve *resolve;
  struct sockaddr_storage addrs[MAX_ADDRS];
  size_t n_addrs, next_addr;
  char *last_connect_error;
  conn *conn;
  http_header *request_headers; /* this hop's, Host and injected credentials among them */
  size_t n_request_headers;
  /* the response */
  int head_ready, head_sent;
  int status;
  char *status_text;
  json_t *resp_headers;
  int redirect_status;      /* a redirect to follow: its status */
  char *location;
  int redirect_refused;     /* a redirect arrived in "error" mode */
  int denied;               /* refused by policy or address: logged as such already */
  size_t discarded;
  uint8_t *buf;
  size_t buf_len, buf_off, buf_cap;
  uint64_t received;
  int body_done;
  char *error;              /* for the worker, at its next read */
  int read_pending;
  int finished;
};

typedef struct resolve {
  uv_getaddrinfo_t req;
  fetch *f;                 /* NULL once the fetch gave up on it */
} resolve;

static void hop_start(fetch *f);
static void hop_connect(fetch *f);

/* ---- ending ---- */

static void wipe_free(uint8_t *p, size_t len) {
  if (p) memset(p, 0, len);
  free(p);
}

/* Header values may be credentials: wiped before they go. */
static void request_headers_free(fetch *f) {
  for (size_t i = 0; i < f->n_request_headers; i++) {
    free(f->request_headers[i].name);
    wipe_free((uint8_t *)f->request_headers[i].value, strlen(f->request_headers[i].value));
  }
  free(f->request_headers);
  f->request_headers = NULL;
  f->n_request_headers = 0;
}

static void fetch_free(uv_handle_t *h) {
  fetch *f = h->data;
  free(f->tenant);
  free(f->request_id);
  free(f->method);
  json_decref(f->headers);
  free(f->body);
  free(f->from);
  egress_url_free(&f->url);
  free(f->last_connect_error);
  request_headers_free(f);
  free(f->status_text);
  json_decref(f->resp_headers);
  free(f->location);
  free(f->buf);
  free(f->error);
  free(f);
}

static void detach_conn(fetch *f, int reuse) {
  conn *c = f->conn;
  if (c == NULL) return;
  f->conn = NULL;
  if (reuse) conn_release(c);
  else conn_close(c);
}

/* The fetch is over for the worker: free everything once the timer closed. */
static void finish(fetch *f) {
  if (f->finished) return;
  f->finished = 1;
  for (fetch **pp = &f->client->fetches; *pp; pp = &(*pp)->next) {
    if (*pp == f) {
      *pp = f->next;
      break;
    }
  }
  f->e->n_fetches--;
  detach_conn(f, f->body_done && f->error == NULL);
  if (f->resolve) {
    f->resolve->f = NULL;
    uv_cancel((uv_req_t *)&f->resolve->req);
    f->resolve = NULL;
  }
  if (f->e->log_debug) {
    char extra[160];
    snprintf(extra, sizeof extra, "{\"status\":%d,\"hops\":%d,\"bytes\":%llu,\"ms\":%.1f}",
             f->status, f->hops, (unsigned long long)f->received,
             (double)(uv_hrtime() - f->started_ns) / 1e6);
    log_write(LOG_DEBUG, f->tenant, f->request_id, extra, "fetch %s %s%.*s", f->method,
              f->url.host, (int)f->url.path_len, f->url.target ? f->url.target : "");
  }
  uv_close((uv_handle_t *)&f->timer, fetch_free);
}

/* Fails the fetch: now if the worker waits for the head or a read, else at its next read. */
static void fail(fetch *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void fail(fetch *f, const char *fmt, ...) {
  if (f->finished) return;
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  detach_conn(f, 0);
  if (f->error == NULL) f->error = xstrdup(msg);
  if (!f->head_sent || f->read_pending) {
    if (!f->head_sent && !f->denied)
      log_write(LOG_INFO, f->tenant, f->request_id, NULL, "fetch failed: %s", f->error);
    client_send_error(f->client, f->id, f->error, f->hops);
    finish(f);
  }
}

static void on_timeout(uv_timer_t *t) {
  fetch *f = t->data;
  if (!f->head_ready)
    fail(f, "%s did not respond within %u ms", f->url.host, f->timeout_ms);
  else
    fail(f, "the response from %s did not complete within %u ms", f->url.host, f->timeout_ms);
}

/* ---- sending to the worker ---- */

static void buf_append(fetch *f, const char *data, size_t len) {
  if (f->buf_off > 0 && f->buf_off == f->buf_len) f->buf_off = f->buf_len = 0;
  if (f->buf_len + len > f->buf_cap) {
    if (f->buf_off > 0) {
      memmove(f->buf, f->buf + f->buf_off, f->buf_len - f->buf_off);
      f->buf_len -= f->buf_off;
      f->buf_off = 0;
    }
    if (f->buf_len + len > f->buf_cap) {
      f->buf_cap = (f->buf_len + len) * 2;
      f->buf = xrealloc(f->buf, f->buf_cap);
    }
  }
  memcpy(f->buf + f->buf_len, data, len);
  f->buf_len += len;
}

static void send_head(fetch *f) {
  size_t avail = f->buf_len - f->buf_off;
  int done = f->body_done && f->error == NULL;
  char *url = egress_url_string(&f->url);
  json_t *head = json_pack("{s:i, s:s, s:O, s:s, s:b, s:i, s:b}", "status", f->status,
                           "status_text", f->status_text ? f->status_text : "", "headers",
                           f->resp_headers, "url", url, "redirected", f->redirected, "hops",
                           f->hops, "done", done);
  free(url);
  if (head == NULL) { /* a status text that is not UTF-8 */
    free(f->status_text);
    f->status_text = NULL;
    send_head(f);
    return;
  }
  client_send_head(f->client, PROTO_FETCH_HEAD, f->id, head, f->buf + f->buf_off, avail);
  json_decref(head);
  f->buf_off = f->buf_len = 0;
  f->head_sent = 1;
  if (done) finish(f);
}

static void send_data(fetch *f) {
  size_t avail = f->buf_len - f->buf_off;
  size_t n = avail > CHUNK_MAX ? CHUNK_MAX : avail;
  int last = f->body_done && f->error == NULL && n == avail;
  uint8_t *frame = xmalloc(n + 1);
  frame[0] = (uint8_t)last;
  memcpy(frame + 1, f->buf + f->buf_off, n);
  int rc = proto_channel_send(&f->client->ch, PROTO_FETCH_DATA, f->id, frame, n + 1);
  free(frame);
  f->buf_off += n;
  f->read_pending = 0;
  if (last || rc != 0) {
    finish(f);
    return;
  }
  if (f->conn && f->conn->paused && f->buf_len - f->buf_off < BUFFER_HIGH / 2)
    conn_pause(f->conn, 0);
}

/* Gives the worker whatever it is waiting for and the fetch has. */
static void flush(fetch *f) {
  if (f->finished) return;
  if (!f->head_sent) {
    if (f->error) fail(f, "%s", f->error);
    else if (f->head_ready) send_head(f);
    return;
  }
  if (!f->read_pending) return;
  if (f->buf_len > f->buf_off || (f->body_done && f->error == NULL)) send_data(f);
  else if (f->error) fail(f, "%s", f->error);
}

/* ---- building the request ---- */

static int value_ok(const char *s) {
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if ((c < 0x20 && c != '\t') || c == 0x7f) return 0;
  }
  return 1;
}

/* Headers the worker may not set: the egress frames the request itself. */
static int worker_header_dropped(const fetch *f, const char *name) {
  static const char *const always[] = {
      "host", "content-length", "transfer-encoding", "connection", "keep-alive",
      "upgrade", "te", "trailer", "proxy-connection", "expect",
  };
  for (size_t i = 0; i < ARRAY_SIZE(always); i++)
    if (strcasecmp(name, always[i]) == 0) return 1;
  /* Credentials the worker set are for the origin it asked for. */
  if (f->cross_origin && (strcasecmp(name, "authorization") == 0 ||
                          strcasecmp(name, "cookie") == 0 ||
                          strcasecmp(name, "proxy-authorization") == 0))
    return 1;
  if (f->drop_content_headers && strncasecmp(name, "content-", 8) == 0) return 1;
  return 0;
}

static int injected(const egress_rule *r, const char *name) {
  for (size_t i = 0; i < r->n_inject; i++)
    if (strcasecmp(r->inject[i].name, name) == 0) return 1;
  return 0;
}

static void request_header_add(fetch *f, size_t *cap, char *name, char *value) {
  if (f->n_request_headers == *cap) {
    *cap = *cap ? *cap * 2 : 16;
    f->request_headers = xrealloc(f->request_headers, *cap * sizeof *f->request_headers);
  }
  f->request_headers[f->n_request_headers].name = name;
  f->request_headers[f->n_request_headers].value = value;
  f->n_request_headers++;
}

/* A secret's value for an injection, checked against the grants each time:
 * a rule stored before its secret's grant was revoked injects nothing. */
typedef struct inject_lookup_ctx {
  fetch *f;
  int ungranted;
} inject_lookup_ctx;

static const char *inject_lookup(void *data, const char *name, size_t len) {
  inject_lookup_ctx *c = data;
  if (!egress_secret_granted(c->f->e, name, len, c->f->tenant)) {
    c->ungranted = 1;
    return NULL;
  }
  return egress_secret_value(c->f->e, name, len);
}

/* This hop's request headers (the client adds the framing). Returns 0, or
 * -1 after failing the fetch. */
static int build_request(fetch *f, const egress_rule *r) {
  request_headers_free(f);
  size_t cap = 0;
  request_header_add(f, &cap, xstrdup("Host"), egress_url_host_header(&f->url));
  size_t n = json_array_size(f->headers);
  for (size_t i = 0; i + 1 < n; i += 2) {
    const char *name = json_string_value(json_array_get(f->headers, i));
    const char *value = json_string_value(json_array_get(f->headers, i + 1));
    if (worker_header_dropped(f, name) || injected(r, name)) continue;
    request_header_add(f, &cap, xstrdup(name), xstrdup(value));
  }
  /* RFC 8586: every request the egress sends says it came through edgenode
   * once more than the request that made it, so that a loop (a worker
   * fetching itself through another name, or workers fetching each other)
   * is refused at an ingress (508) instead of multiplying. The worker's own
   * CDN-Loop entries stay; ours is added after them. */
  request_header_add(f, &cap, xstrdup("CDN-Loop"), xasprintf("edgenode; hops=%d", f->loop + 1));
  for (size_t i = 0; i < r->n_inject; i++) {
    char *missing = NULL;
    inject_lookup_ctx ctx = {.f = f};
    char *value = egress_template_expand(r->inject[i].value, inject_lookup, &ctx, &missing);
    if (value == NULL || !value_ok(value)) {
      request_headers_free(f);
      if (value) wipe_free((uint8_t *)value, strlen(value));
      if (missing && ctx.ungranted)
        fail(f, "secret \"%s\" is not granted to worker %s (the egress rule for %s injects it)",
             missing, f->tenant, f->url.host);
      else if (missing)
        fail(f, "secret \"%s\" is not set (the egress rule for %s injects it)", missing,
             f->url.host);
      else
        fail(f, "a secret injected for %s is not a valid header value", f->url.host);
      free(missing);
      return -1;
    }
    request_header_add(f, &cap, xstrdup(r->inject[i].name), value);
  }
  return 0;
}

/* ---- hops ---- */

static void deny(fetch *f, egress_verdict v) {
  char *host = egress_url_host_header(&f->url);
  char what[600];
  if (v == EGRESS_DENY_HOST)
    snprintf(what, sizeof what, "%s", host);
  else if (v == EGRESS_DENY_PATH)
    snprintf(what, sizeof what, "%s%.*s", host, (int)f->url.path_len, f->url.target);
  else
    snprintf(what, sizeof what, "%s %s%.*s", f->method, host, (int)f->url.path_len,
             f->url.target);
  json_t *extra = json_pack("{s:s, s:s, s:s, s:s}", "host", host, "method", f->method, "reason",
                            v == EGRESS_DENY_HOST ? "host" : v == EGRESS_DENY_PATH ? "path"
                                                                                    : "method",
                            "source", "egress");
  char *text = extra ? json_dumps(extra, JSON_COMPACT) : NULL;
  json_decref(extra);
  log_write(LOG_WARN, f->tenant, f->request_id, text, "egress denied: %s", what);
  f->denied = 1;
  free(text);
  free(host);
  if (f->from)
    fail(f, "egress denied: %s is not allowed for this worker (redirected from %s)", what,
         f->from);
  else
    fail(f, "egress denied: %s is not allowed for this worker", what);
}

/* "a loopback", "an unspecified": the reasons are read as English. */
static const char *article(const char *word) { return strchr("aeiou", word[0]) ? "an" : "a"; }

static void refuse_address(fetch *f, const struct sockaddr *sa, const char *why) {
  char ip[INET6_ADDRSTRLEN] = "?";
  if (sa->sa_family == AF_INET)
    inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, ip, sizeof ip);
  else
    inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, ip, sizeof ip);
  char extra[128];
  snprintf(extra, sizeof extra, "{\"address\":\"%s\",\"reason\":\"%s\",\"source\":\"egress\"}",
           ip, why);
  const char *a = article(why);
  log_write(LOG_WARN, f->tenant, f->request_id, extra, "egress denied: %s is %s %s address",
            f->url.host, a, why);
  f->denied = 1;
  if (f->url.ip)
    fail(f, "egress denied: %s is %s %s address", f->url.host, a, why);
  else
    fail(f, "egress denied: %s resolves to %s, %s %s address", f->url.host, ip, a, why);
}

static void connect_next(fetch *f) {
  while (f->next_addr < f->n_addrs) {
    const struct sockaddr *sa = (const struct sockaddr *)&f->addrs[f->next_addr++];
    const char *why = NULL;
    conn *c = conn_open(f->e, f, &f->url, sa, f->connect_timeout_ms, &why);
    if (c) {
      f->conn = c;
      return;
    }
    free(f->last_connect_error);
    f->last_connect_error = xasprintf("could not connect to %s: %s", f->url.host, why);
  }
  fail(f, "%s", f->last_connect_error ? f->last_connect_error : "no address to connect to");
}

/* 1 when the destination is one the node itself listens on. */
static int own_address(const egress_config *cfg, const struct sockaddr *sa, int port) {
  for (size_t i = 0; i < cfg->n_own; i++)
    if (cfg->own[i].port == port && egress_cidr_contains(&cfg->own[i].addr, sa)) return 1;
  return 0;
}

/* Keeps the allowed addresses; refuses the fetch when there are none. */
static void use_addresses(fetch *f, struct addrinfo *list) {
  const struct sockaddr *refused = NULL;
  const char *why = NULL;
  f->n_addrs = f->next_addr = 0;
  for (struct addrinfo *ai = list; ai && f->n_addrs < MAX_ADDRS; ai = ai->ai_next) {
    if (ai->ai_family != AF_INET && ai->ai_family != AF_INET6) continue;
    const char *no = egress_addr_check(ai->ai_addr, f->e->cfg.allow, f->e->cfg.n_allow);
    if (no == NULL && own_address(&f->e->cfg, ai->ai_addr, f->url.port)) {
      /* Whatever the rules and --egress-allow-cidr say: a worker fetching
       * its own node would loop, each request making more. */
      log_write(LOG_WARN, f->tenant, f->request_id, NULL,
                "egress denied: %s:%d is this node's own address", f->url.host, f->url.port);
      f->denied = 1;
      fail(f, "egress denied: %s:%d is this node's own address (a worker fetching its own node "
              "would loop)", f->url.host, f->url.port);
      return;
    }
    if (no) {
      if (refused == NULL) refused = ai->ai_addr, why = no;
      continue;
    }
    int dup = 0;
    for (size_t i = 0; i < f->n_addrs; i++)
      if (memcmp(&f->addrs[i], ai->ai_addr, ai->ai_addrlen) == 0) dup = 1;
    if (dup) continue;
    memset(&f->addrs[f->n_addrs], 0, sizeof f->addrs[0]);
    memcpy(&f->addrs[f->n_addrs++], ai->ai_addr, ai->ai_addrlen);
  }
  if (f->n_addrs == 0) {
    if (refused) refuse_address(f, refused, why);
    else fail(f, "could not resolve %s: no IPv4 or IPv6 address", f->url.host);
    return;
  }
  connect_next(f);
}

static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res) {
  resolve *r = container_of(req, resolve, req);
  fetch *f = r->f;
  free(r);
  if (f == NULL) {
    if (res) uv_freeaddrinfo(res);
    return;
  }
  f->resolve = NULL;
  if (status < 0) {
    fail(f, "could not resolve %s: %s", f->url.host, uv_strerror(status));
  } else {
    use_addresses(f, res);
  }
  if (res) uv_freeaddrinfo(res);
}

static void hop_connect(fetch *f) {
  conn *c = conn_take(f->e, f, &f->url);
  if (c) {
    f->conn = c;
    fetch_conn_ready(f, c);
    return;
  }
  char port[8];
  snprintf(port, sizeof port, "%d", f->url.port);
  struct addrinfo hints;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (f->url.ip) {
    /* An IP literal: no DNS, just the same judgement. */
    hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(f->url.host, port, &hints, &res);
    if (rc != 0) {
      fail(f, "invalid address %s", f->url.host);
      return;
    }
    use_addresses(f, res);
    freeaddrinfo(res);
    return;
  }
  resolve *r = xcalloc(1, sizeof *r);
  r->f = f;
  int rc = uv_getaddrinfo(f->e->loop, &r->req, on_resolved, f->url.host, port, &hints);
  if (rc != 0) {
    free(r);
    fail(f, "could not resolve %s: %s", f->url.host, uv_strerror(rc));
    return;
  }
  f->resolve = r;
}

/*
 * Asks the worker for one more subrequest before a redirect hop: PROTO_FETCH
 * back to it with this fetch's id and {"from", "url"}. It answers with an
 * empty PROTO_FETCH (go on, it counted the hop) or PROTO_FETCH_CANCEL (over
 * the request's limit; the worker fails the fetch itself).
 */
static void ask_hop(fetch *f) {
  char *url = egress_url_string(&f->url);
  json_t *ask = json_pack("{s:s, s:s}", "from", f->from ? f->from : "", "url", url);
  char *text = ask ? json_dumps(ask, JSON_COMPACT) : NULL;
  json_decref(ask);
  free(url);
  int rc = f->client->closed || text == NULL
               ? UV_EPIPE
               : proto_channel_send(&f->client->ch, PROTO_FETCH, f->id, text, strlen(text));
  free(text);
  if (rc != 0) {
    fail(f, "could not ask the worker process for another subrequest");
    return;
  }
  f->awaiting_grant = 1;
}

static void hop_start(fetch *f) {
  if (f->hops > EGRESS_MAX_REDIRECTS) {
    fail(f, "too many redirects (more than %d)", EGRESS_MAX_REDIRECTS);
    return;
  }
  egress_verdict v;
  const egress_rule *r = egress_policy_match(egress_policy_of(f->e, f->tenant), &f->url,
                                             f->method, &v);
  if (r == NULL) {
    deny(f, v);
    return;
  }
  if (f->hops == 0) {
    const egress_config *cfg = &f->e->cfg;
    f->connect_timeout_ms = r->connect_timeout_ms ? r->connect_timeout_ms : cfg->connect_timeout_ms;
    f->timeout_ms = r->timeout_ms ? r->timeout_ms : cfg->timeout_ms;
    f->max_bytes = r->max_response_bytes ? r->max_response_bytes : cfg->max_response_bytes;
    uv_timer_start(&f->timer, on_timeout, f->timeout_ms, 0);
    f->timer_started = 1;
  }
  if (f->hops > 0 && !f->granted) {
    ask_hop(f);
    return;
  }
  f->granted = 0;
  f->hops++;
  f->retried = 0;
  if (build_request(f, r) != 0) return;
  hop_connect(f);
}

/* A redirect to follow: the next hop, with the method and body rules of Fetch. */
static void next_hop(fetch *f) {
  egress_url next;
  const char *err = NULL;
  if (egress_url_resolve(&f->url, f->location, strlen(f->location), &next, &err) != 0) {
    fail(f, "%s redirected to an invalid location: %s", f->url.host, err);
    return;
  }
  char *from = egress_url_origin(&f->url);
  char *to = egress_url_origin(&next);
  if (strcmp(from, to) != 0) f->cross_origin = 1;
  free(to);
  free(f->from);
  f->from = from;
  int st = f->redirect_status;
  if ((st == 303 && strcmp(f->method, "GET") != 0 && strcmp(f->method, "HEAD") != 0) ||
      ((st == 301 || st == 302) && strcmp(f->method, "POST") == 0)) {
    free(f->method);
    f->method = xstrdup("GET");
    free(f->body);
    f->body = NULL;
    f->body_len = 0;
    f->drop_content_headers = 1;
  }
  egress_url_free(&f->url);
  f->url = next;
  f->redirected = 1;
  f->redirect_status = 0;
  free(f->location);
  f->location = NULL;
  f->discarded = 0;
  hop_start(f);
}

/* ---- events from the connection ---- */

void fetch_conn_ready(fetch *f, conn *c) {
  http_client_request req = {
      .method = f->method,
      .target = f->url.target,
      .headers = f->request_headers,
      .n_headers = f->n_request_headers,
      .body = f->body,
      .body_len = f->body_len,
      .keep_alive = 1,
  };
  int rc = conn_send(c, &req);
  if (rc != 0) fetch_conn_failed(f, c, "could not send the request", c->reused && !f->retried);
}

void fetch_conn_failed(fetch *f, conn *c, const char *message, int retry) {
  int connecting = c->state == CONN_CONNECTING;
  char *msg = xstrdup(message);
  if (f->conn == c) f->conn = NULL;
  conn_close(c);
  if (retry && !f->retried) {
    /* A pooled connection the upstream had closed: the request never
     * reached it, so send it again on a fresh one. */
    f->retried = 1;
    hop_connect(f);
  } else if (connecting && f->next_addr < f->n_addrs) {
    free(f->last_connect_error);
    f->last_connect_error = msg;
    msg = NULL;
    connect_next(f);
  } else {
    fail(f, "%s", msg);
  }
  free(msg);
}

static int is_redirect(int status) {
  return status == 301 || status == 302 || status == 303 || status == 307 || status == 308;
}

static const char *header_get(json_t *flat, const char *name) {
  size_t n = json_array_size(flat);
  for (size_t i = 0; i + 1 < n; i += 2)
    if (strcasecmp(json_string_value(json_array_get(flat, i)), name) == 0)
      return json_string_value(json_array_get(flat, i + 1));
  return NULL;
}

/* Response headers for the worker: without the connection's own. */
static json_t *worker_headers(json_t *flat) {
  static const char *const hop[] = {"connection", "keep-alive", "transfer-encoding",
                                    "proxy-connection", "upgrade"};
  json_t *out = json_array();
  size_t n = json_array_size(flat);
  for (size_t i = 0; i + 1 < n; i += 2) {
    const char *name = json_string_value(json_array_get(flat, i));
    int skip = 0;
    for (size_t k = 0; k < ARRAY_SIZE(hop); k++)
      if (strcasecmp(name, hop[k]) == 0) skip = 1;
    if (skip) continue;
    json_array_append(out, json_array_get(flat, i));
    json_array_append(out, json_array_get(flat, i + 1));
  }
  return out;
}

int fetch_on_head(fetch *f, conn *c) {
  int head = strcmp(f->method, "HEAD") == 0;
  const char *location = header_get(c->headers, "location");
  if (is_redirect(c->status) && location && f->redirect_mode != REDIRECT_MANUAL) {
    if (f->redirect_mode == REDIRECT_ERROR) {
      f->redirect_refused = c->status;
      return head;
    }
    f->redirect_status = c->status;
    free(f->location);
    f->location = xstrdup(location);
    return head;
  }
  f->head_ready = 1;
  f->status = c->status;
  free(f->status_text);
  f->status_text = xstrdup(c->reason ? c->reason : "");
  json_decref(f->resp_headers);
  f->resp_headers = worker_headers(c->headers);
  const char *cl = header_get(c->headers, "content-length");
  if (cl && !head && strtoull(cl, NULL, 10) > f->max_bytes && f->error == NULL)
    f->error = xasprintf("the response from %s is larger than the limit of %llu bytes "
                         "(Content-Length: %s)",
                         f->url.host, (unsigned long long)f->max_bytes, cl);
  return head;
}

int fetch_on_body(fetch *f, const char *data, size_t len) {
  if (f->redirect_status || f->redirect_refused) {
    f->discarded += len;
    return 0;
  }
  if (f->error) return -1;
  f->received += len;
  if (f->received > f->max_bytes) {
    f->error = xasprintf("the response from %s is larger than the limit of %llu bytes",
                         f->url.host, (unsigned long long)f->max_bytes);
    return -1;
  }
  buf_append(f, data, len);
  return 0;
}

void fetch_conn_progress(fetch *f, conn *c) {
  if (f->redirect_refused) {
    int st = f->redirect_refused;
    fail(f, "%s answered with a redirect (%d) and the fetch has redirect: \"error\"",
         f->url.host, st);
    return;
  }
  if (f->redirect_status) {
    if (c->complete) {
      detach_conn(f, 1);
    } else if (c->broken || c->eof || f->discarded > REDIRECT_DRAIN_MAX) {
      detach_conn(f, 0);
    } else {
      return; /* the rest of the redirect's body is on its way */
    }
    next_hop(f);
    return;
  }
  if (c->broken && f->error == NULL)
    f->error = xstrdup(c->error ? c->error : "the connection failed");
  if (f->error) {
    detach_conn(f, 0);
  } else if (c->complete) {
    f->body_done = 1;
    uv_timer_stop(&f->timer);
    detach_conn(f, 1);
  } else if (f->buf_len - f->buf_off >= BUFFER_HIGH) {
    conn_pause(c, 1);
  }
  flush(f);
}

/* ---- requests from the worker ---- */

static fetch *find(client *cl, uint32_t id) {
  for (fetch *f = cl->fetches; f; f = f->next)
    if (f->id == id) return f;
  return NULL;
}

/* The PROTO_FETCH payload: a 4-byte length, JSON, then the body. */
static json_t *parse_frame(const proto_frame *frame, const uint8_t **body, size_t *body_len) {
  if (frame->length < 4) return NULL;
  const uint8_t *p = frame->payload;
  uint32_t n = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
  if (n > frame->length - 4) return NULL;
  json_t *head = json_loadb((const char *)p + 4, n, 0, NULL);
  if (!json_is_object(head)) {
    json_decref(head);
    return NULL;
  }
  *body = p + 4 + n;
  *body_len = frame->length - 4 - n;
  return head;
}

/* NULL, or why the worker's headers cannot go out, naming the header
 * (written to why). Headers lets control characters other than CR, LF and
 * NUL through, as the Fetch standard does; HTTP does not. */
static const char *check_headers(json_t *headers, char *why, size_t size) {
  if (!json_is_array(headers) || json_array_size(headers) % 2) return "headers must be pairs";
  size_t i;
  json_t *v;
  json_array_foreach(headers, i, v) {
    const char *s = json_string_value(v);
    if (s == NULL) return "headers must be strings";
    if (i % 2 == 0 && !http_token(s, strlen(s))) return "invalid header name";
    if (i % 2 == 1 && !value_ok(s)) {
      snprintf(why, size,
               "the value of header \"%.64s\" has a control character, which HTTP does not allow",
               json_string_value(json_array_get(headers, i - 1)));
      return why;
    }
  }
  return NULL;
}

/* url without its "user:password@": a refused URL is named in the error,
 * which the egress also logs, and a password has no place in a log. */
static char *without_userinfo(const char *url) {
  const char *scheme_end = strstr(url, "://");
  if (scheme_end == NULL) return xstrdup(url);
  const char *a = scheme_end + 3;
  size_t authority_len = strcspn(a, "/?#");
  const char *at = NULL;
  for (const char *p = a; p < a + authority_len; p++)
    if (*p == '@') at = p;
  if (at == NULL) return xstrdup(url);
  return xasprintf("%.*s%s", (int)(a - url), url, at + 1);
}


/* Whom a fetch is for: a deployed worker, or a /v1/run ("run:<request id>"),
 * whose policy the supervisor set for as long as the run lasts. */
static int principal_valid(const char *name) {
  if (strncmp(name, "run:", 4) != 0) return worker_name_valid(name, strlen(name));
  static const char id_chars[] =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-";
  size_t n = strlen(name + 4);
  return n > 0 && n <= 64 && strspn(name + 4, id_chars) == n;
}

void fetch_start(client *cl, const proto_frame *frame) {
  if (frame->length == 0) {
    /* The worker's go-ahead for the hop ask_hop() asked about; one for a
     * fetch that ended meanwhile (a timeout) has nothing left to do. */
    fetch *asked = frame->id ? find(cl, frame->id) : NULL;
    if (asked && asked->awaiting_grant) {
      asked->awaiting_grant = 0;
      asked->granted = 1;
      hop_start(asked);
    }
    return;
  }
  const uint8_t *body = NULL;
  size_t body_len = 0;
  json_t *head = parse_frame(frame, &body, &body_len);
  const char *tenant = json_string_value(json_object_get(head, "tenant"));
  const char *method = json_string_value(json_object_get(head, "method"));
  const char *url = json_string_value(json_object_get(head, "url"));
  const char *redirect = json_string_value(json_object_get(head, "redirect"));
  const char *request_id = json_string_value(json_object_get(head, "request_id"));
  json_t *headers = json_object_get(head, "headers");
  const char *problem = NULL, *bound;
  char why[160];
  if (head == NULL || tenant == NULL || !principal_valid(tenant) ||
      method == NULL || !http_token(method, strlen(method)) || url == NULL)
    problem = "malformed fetch request";
  else if (frame->id == 0 || find(cl, frame->id))
    problem = "fetch id in use";
  else if ((bound = egress_client_bound(cl)) != NULL && strcmp(bound, tenant) != 0)
    problem = "this worker process may fetch only for its own tenant";
  else if (headers)
    problem = check_headers(headers, why, sizeof why);
  if (problem) {
    client_send_error(cl, frame->id, problem, 0);
    json_decref(head);
    return;
  }
  fetch *f = xcalloc(1, sizeof *f);
  f->e = cl->e;
  f->client = cl;
  f->id = frame->id;
  f->tenant = xstrdup(tenant);
  f->request_id = request_id ? xstrdup(request_id) : NULL;
  f->method = xstrdup(method);
  f->headers = headers ? json_incref(headers) : json_array();
  if (body_len) {
    f->body = xmalloc(body_len);
    memcpy(f->body, body, body_len);
    f->body_len = body_len;
  }
  json_int_t loop = json_integer_value(json_object_get(head, "loop"));
  f->loop = loop > 0 && loop < 1000 ? (int)loop : 0;
  f->redirect_mode = redirect && strcmp(redirect, "manual") == 0 ? REDIRECT_MANUAL
                     : redirect && strcmp(redirect, "error") == 0 ? REDIRECT_ERROR
                                                                   : REDIRECT_FOLLOW;
  f->started_ns = uv_hrtime();
  f->resp_headers = json_array();
  uv_timer_init(cl->e->loop, &f->timer);
  f->timer.data = f;
  f->next = cl->fetches;
  cl->fetches = f;
  cl->e->n_fetches++;
  const char *err = NULL;
  if (egress_url_parse(url, strlen(url), &f->url, &err) != 0) {
    char *shown = without_userinfo(url);
    fail(f, "cannot fetch %s: %s", shown, err);
    free(shown);
    json_decref(head);
    return;
  }
  json_decref(head);
  hop_start(f);
}

void fetch_read(client *cl, uint32_t id) {
  fetch *f = find(cl, id);
  if (f == NULL) {
    client_send_error(cl, id, "the response body is no longer available", 0);
    return;
  }
  f->read_pending = 1;
  flush(f);
}

void fetch_cancel(client *cl, uint32_t id) {
  fetch *f = find(cl, id);
  if (f == NULL) return;
  f->error = f->error ? f->error : xstrdup("cancelled");
  finish(f);
}

void fetch_abandon_all(client *cl) {
  while (cl->fetches) {
    fetch *f = cl->fetches;
    if (f->error == NULL) f->error = xstrdup("the worker process went away");
    finish(f);
  }
}
