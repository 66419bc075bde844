/*
 * Live logs: GET /v1/workers/{name}/tail and GET /v1/runs/{id}/tail stream a
 * tenant's (or a /v1/run sandbox's) console lines, uncaught exceptions and
 * one line per request, as NDJSON or, for Accept: text/event-stream, SSE.
 *
 * The worker processes send lines only for keys someone tails (PROTO_TAIL,
 * sent to every process on each change and after each HELLO); they arrive
 * as PROTO_TAIL_LINE through n->tail_hooks (procs.c) and go to every
 * session of their key whose filters take them.
 *
 * A slow reader loses lines, never slows the tenant: a session writes while
 * its connection's queue is below the server's high mark (HTTP_WRITE_LOW,
 * 256 KiB: the session's bounded buffer), drops and counts what comes while
 * it is over, and once the queue drains writes {"type": "dropped", "count"}
 * before the next line. The worker processes are never waited for.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "node.h"

/* Sessions open at once, node-wide: each holds a connection and its queue. */
#define TAIL_MAX_SESSIONS 64
/* Values of ?status= at most, comma-separated. */
#define TAIL_MAX_STATUS 8

typedef struct tail_status {
  int kind;  /* 'o' ok, 'e' error, 'c' a class (lo..hi), 's' one status */
  int lo, hi;
} tail_status;

typedef struct tail_session {
  struct tail_session *next, *prev;
  node *n;
  http_request *req;
  char *key;            /* the worker's name, or "run:ID" */
  int sse;
  tail_status status[TAIL_MAX_STATUS];
  int n_status;         /* 0: every line */
  double sample;        /* 1: every request */
  int blocked;          /* waiting for the queue to drain */
  uint64_t dropped;     /* lines lost since the last notice */
} tail_session;

struct node_tails {
  tail_session *head;
  int count;
  uint64_t dropped_total; /* lines lost by slow readers (and lagging supervisor links) */
  uint64_t opened_total;
  char *keys_sent;        /* the PROTO_TAIL body last broadcast */
};

static struct node_tails *tails_of(node *n) {
  if (n->tails == NULL) n->tails = xcalloc(1, sizeof *n->tails);
  return n->tails;
}

/* ---- the set of tailed keys, told to the worker processes ---- */

static char *keys_body(struct node_tails *t) {
  json_t *keys = json_array();
  for (tail_session *s = t->head; s; s = s->next) {
    size_t i;
    json_t *k;
    int seen = 0;
    json_array_foreach(keys, i, k) seen |= strcmp(json_string_value(k), s->key) == 0;
    if (!seen) json_array_append_new(keys, json_string(s->key));
  }
  json_t *body = json_pack("{s:o}", "keys", keys);
  char *text = json_dumps(body, JSON_COMPACT | JSON_SORT_KEYS);
  json_decref(body);
  if (text == NULL) abort();
  return text;
}

static int tailed(const struct node_tails *t, const char *key) {
  for (const tail_session *s = t->head; s; s = s->next)
    if (strcmp(s->key, key) == 0) return 1;
  return 0;
}

/* A dedicated process hosts one tenant, which may be hostile: it hears of
 * its own tail only, never of what else is tailed. */
static void send_keys(node_proc *p, const char *text) {
  if (!node_proc_usable(p)) return;
  json_t *body = p->tenant ? json_pack("{s:[]}", "keys") : json_loads(text, 0, NULL);
  if (p->tenant && tailed(p->owner->tails, p->tenant))
    json_array_append_new(json_object_get(body, "keys"), json_string(p->tenant));
  (void)node_proc_send_json(p, PROTO_TAIL, 0, body); /* logged there; the next change resends */
  json_decref(body);
}

static void broadcast_keys(node *n) {
  struct node_tails *t = tails_of(n);
  char *text = keys_body(t);
  if (t->keys_sent && strcmp(text, t->keys_sent) == 0) {
    free(text);
    return;
  }
  free(t->keys_sent);
  t->keys_sent = text;
  for (int i = 0; i < n->n_procs; i++) send_keys(&n->procs[i], text);
  for (node_proc *p = node_procs_next_dedicated(n, NULL); p; p = node_procs_next_dedicated(n, p))
    send_keys(p, text);
}

static void on_hello(node_proc *p) {
  struct node_tails *t = p->owner->tails;
  if (t && t->head && t->keys_sent) send_keys(p, t->keys_sent);
}

/* ---- writing to a session ---- */

static void session_free(tail_session *s) {
  struct node_tails *t = tails_of(s->n);
  if (s->prev) s->prev->next = s->next;
  else t->head = s->next;
  if (s->next) s->next->prev = s->prev;
  t->count--;
  node *n = s->n;
  free(s->key);
  free(s);
  broadcast_keys(n);
}

static void on_drained(void *arg, int status);

/* Writes one line (JSON) in the session's format. 0, 1 when it is blocked
 * now, or -1 when the client is gone: the write closed the connection, whose
 * abort may already have freed s. */
static int write_line(tail_session *s, const char *type, json_t *line) {
  /* Six digits: "cpu_ms":0.344442, not 0.34444200000000003. */
  char *text = json_dumps(line, JSON_COMPACT | JSON_REAL_PRECISION(6));
  if (text == NULL) return 0;
  char *framed = s->sse ? xasprintf("event: %s\ndata: %s\n\n", type, text) : xasprintf("%s\n", text);
  free(text);
  int rc = http_respond_write(s->req, framed, strlen(framed));
  free(framed);
  if (rc < 0) return -1;
  if (rc == 1) s->blocked = http_respond_on_drain(s->req, on_drained, s) == 0;
  return rc;
}

/* The notice of lines lost, if any: as write_line. */
static int write_dropped(tail_session *s) {
  if (s->dropped == 0) return 0;
  json_t *line = json_pack("{s:s, s:I}", "type", "dropped", "count", (json_int_t)s->dropped);
  s->dropped = 0;
  int rc = write_line(s, "dropped", line);
  json_decref(line);
  return rc;
}

static void on_drained(void *arg, int status) {
  tail_session *s = arg;
  s->blocked = 0;
  if (status < 0) return; /* the client went away: node_tail_aborted frees it */
  write_dropped(s);
}

static void drop(tail_session *s, uint64_t lines) {
  s->dropped += lines;
  tails_of(s->n)->dropped_total += lines;
}

/* ---- filters ---- */

/* FNV-1a of the request id, so a request's lines are all kept or all not. */
static double sample_point(const char *id) {
  uint64_t h = 1469598103934665603ull;
  for (const char *c = id; *c; c++) h = (h ^ (unsigned char)*c) * 1099511628211ull;
  /* Ids of one process share a prefix: mix, or the top bits hardly change. */
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return (double)(h >> 11) / 9007199254740992.0;
}

static int status_matches(const tail_session *s, const char *type, json_t *line) {
  if (s->n_status == 0) return 1;
  int exception = strcmp(type, "exception") == 0;
  if (!exception && strcmp(type, "request") != 0) return 0; /* console lines have no status */
  int status = exception ? 500 : (int)json_integer_value(json_object_get(line, "status"));
  const char *outcome = json_string_value(json_object_get(line, "outcome"));
  int ok = !exception && status < 500 && outcome && strcmp(outcome, "ok") == 0;
  for (int i = 0; i < s->n_status; i++) {
    const tail_status *f = &s->status[i];
    if (f->kind == 'o' && ok) return 1;
    if (f->kind == 'e' && !ok) return 1;
    if ((f->kind == 'c' || f->kind == 's') && status >= f->lo && status <= f->hi) return 1;
  }
  return 0;
}

static int session_takes(const tail_session *s, const char *type, json_t *line) {
  if (!status_matches(s, type, line)) return 0;
  if (s->sample >= 1) return 1;
  const char *id = json_string_value(json_object_get(line, "request_id"));
  return (id ? sample_point(id) : (double)rand() / ((double)RAND_MAX + 1)) < s->sample;
}

/* A PROTO_TAIL_LINE: {"key", "line", "dropped"?}. */
static void on_line(node_proc *p, json_t *body) {
  struct node_tails *t = p->owner->tails;
  const char *key = json_string_value(json_object_get(body, "key"));
  json_t *line = json_object_get(body, "line");
  const char *type = json_string_value(json_object_get(line, "type"));
  if (t == NULL || key == NULL || type == NULL) return;
  /* What a worker process says of other tenants is not trusted: a
   * dedicated one speaks for its own tenant only. */
  if (p->tenant && strcmp(key, p->tenant) != 0) return;
  uint64_t lost = (uint64_t)json_integer_value(json_object_get(body, "dropped"));
  json_object_set_new(line, "worker_process", json_integer(p->id));
  for (tail_session *s = t->head, *next; s; s = next) {
    next = s->next; /* a write that fails frees s */
    if (strcmp(s->key, key) != 0) continue;
    if (lost) drop(s, lost);
    if (!session_takes(s, type, line)) continue;
    if (s->blocked) {
      drop(s, 1);
      continue;
    }
    if (write_dropped(s) == 0) write_line(s, type, line);
  }
}

static const node_tail_hooks hooks = {.hello = on_hello, .line = on_line};

/* ---- GET .../tail ---- */

/* "ok", "error", "5xx" or "404": 0, or -1. */
static int parse_status(const char *v, size_t len, tail_status *out) {
  if (len == 2 && strncasecmp(v, "ok", 2) == 0) *out = (tail_status){'o', 0, 0};
  else if (len == 5 && strncasecmp(v, "error", 5) == 0) *out = (tail_status){'e', 0, 0};
  else if (len == 3 && v[0] >= '1' && v[0] <= '5' && strncasecmp(v + 1, "xx", 2) == 0)
    *out = (tail_status){'c', (v[0] - '0') * 100, (v[0] - '0') * 100 + 99};
  else if (len == 3 && v[0] >= '1' && v[0] <= '5' && v[1] >= '0' && v[1] <= '9' && v[2] >= '0' &&
           v[2] <= '9')
    *out = (tail_status){'s', atoi(v), atoi(v)};
  else
    return -1;
  return 0;
}

static const char *parse_filters(tail_session *s, const char *target, const char **key) {
  char value[128];
  s->sample = 1;
  int given = node_query_param(target, "status", value, sizeof value);
  *key = "status";
  if (given < 0 || (given > 0 && value[0] == '\0'))
    return "status: expected ok, error, 1xx..5xx or a status code, comma-separated";
  for (const char *v = value; given > 0 && *v;) {
    size_t len = strcspn(v, ",");
    if (s->n_status == TAIL_MAX_STATUS || parse_status(v, len, &s->status[s->n_status]) != 0)
      return "status: expected ok, error, 1xx..5xx or a status code, comma-separated";
    s->n_status++;
    v += len + (v[len] == ',');
  }
  given = node_query_param(target, "sample", value, sizeof value);
  *key = "sample";
  if (given != 0) {
    char *end = NULL;
    s->sample = given < 0 ? -1 : strtod(value, &end);
    if (given < 0 || end == value || *end != '\0' || !(s->sample > 0 && s->sample <= 1))
      return "sample: expected a number greater than 0 and at most 1";
  }
  return NULL;
}

static int wants_sse(const http_request *req) {
  const char *accept = http_request_header(req, "Accept");
  return accept && strstr(accept, "text/event-stream") != NULL;
}

static void open_session(node *n, http_request *req, const char *key) {
  struct node_tails *t = tails_of(n);
  tail_session probe = {0};
  const char *field = NULL;
  const char *problem = parse_filters(&probe, req->target, &field);
  if (problem) {
    json_t *body = json_pack("{s:s, s:s}", "error", problem, "key", field);
    node_respond_json(req, 400, body, NULL);
    json_decref(body);
    return;
  }
  if (t->count >= TAIL_MAX_SESSIONS) {
    json_t *body = json_pack("{s:s, s:i}", "error", "too many tails open on this node", "max",
                             TAIL_MAX_SESSIONS);
    node_respond_json(req, 429, body, NULL);
    json_decref(body);
    return;
  }
  int sse = wants_sse(req);
  http_header headers[] = {
      {"Content-Type", sse ? "text/event-stream" : "application/x-ndjson"},
      {"Cache-Control", "no-store"},
  };
  if (http_respond_start(req, 200, headers, ARRAY_SIZE(headers), -1) != 0) {
    http_respond_abort(req);
    return;
  }
  tail_session *s = xcalloc(1, sizeof *s);
  *s = probe;
  s->n = n;
  s->req = req;
  s->key = xstrdup(key);
  s->sse = sse;
  req->data = s;
  s->next = t->head;
  if (t->head) t->head->prev = s;
  t->head = s;
  t->count++;
  t->opened_total++;
  n->tail_hooks = &hooks;
  broadcast_keys(n);
  log_write(LOG_INFO, strncmp(key, "run:", 4) == 0 ? NULL : key, req->id, NULL, "tail opened");
  /* The reader knows its tail is live (and the processes were told) from here. */
  const char *colon = strchr(key, ':');
  json_t *line = strncmp(key, "run:", 4) == 0
                     ? json_pack("{s:s, s:s}", "type", "attached", "run", colon + 1)
                     : json_pack("{s:s, s:s}", "type", "attached", "worker", key);
  write_line(s, "attached", line); /* last: a failed write may free s and req */
  json_decref(line);
}

static void worker_tail(node *n, http_request *req, const char *name) {
  if (!worker_name_valid(name, strlen(name))) {
    node_respond_invalid_name(req, name);
    return;
  }
  int exists = node_db_worker_exists(n->db, name);
  if (exists == -ENOENT) {
    node_respond_unknown_worker(req, name);
    return;
  }
  if (exists < 0) {
    node_respond_error(req, 500, "node.db could not be read");
    return;
  }
  open_session(n, req, name);
}

int node_tail_route(node *n, http_request *req, const char *name, const char *sub) {
  if (strcmp(sub, "tail") != 0) return 0;
  if (strcmp(req->method, "GET") != 0) node_respond_method(req, "GET");
  else worker_tail(n, req, name);
  return 1;
}

int node_run_tail_id_valid(const char *id, size_t len) {
  if (len == 0 || len > NODE_TAIL_ID_MAX) return 0;
  for (size_t i = 0; i < len; i++) {
    char c = id[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
          c == '_' || c == '.'))
      return 0;
  }
  return 1;
}

int node_run_tail_route(node *n, http_request *req, const char *id, const char *sub) {
  if (strcmp(sub, "tail") != 0) return 0;
  if (strcmp(req->method, "GET") != 0) {
    node_respond_method(req, "GET");
  } else if (!node_run_tail_id_valid(id, strlen(id))) {
    json_t *body = json_pack("{s:s, s:s}", "error",
                             "a tail id is 1 to 64 letters, digits, '-', '_' or '.'", "id", id);
    if (body == NULL) body = json_pack("{s:s}", "error", "a tail id must be UTF-8");
    node_respond_json(req, 400, body, NULL);
    json_decref(body);
  } else {
    char *key = xasprintf("run:%s", id);
    open_session(n, req, key);
    free(key);
  }
  return 1;
}

void node_tail_aborted(node *n, http_request *req) {
  struct node_tails *t = n->tails;
  if (t == NULL) return;
  for (tail_session *s = t->head; s; s = s->next) {
    if (s->req != req) continue;
    log_write(LOG_INFO, strncmp(s->key, "run:", 4) == 0 ? NULL : s->key, req->id, NULL,
              "tail closed");
    http_respond_abort(req); /* frees req: its client is gone */
    session_free(s);
    return;
  }
}

node_tail_counts node_tails_counts(const node *n) {
  const struct node_tails *t = n->tails;
  node_tail_counts c = {0};
  if (t == NULL) return c;
  c.open = t->count;
  c.opened = t->opened_total;
  c.dropped = t->dropped_total;
  return c;
}

void node_tails_close(node *n) {
  struct node_tails *t = n->tails;
  if (t == NULL) return;
  while (t->head) {
    tail_session *s = t->head;
    t->head = s->next;
    http_respond_end(s->req);
    free(s->key);
    free(s);
  }
  free(t->keys_sent);
  free(t);
  n->tails = NULL;
  n->tail_hooks = NULL;
}
