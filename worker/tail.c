/*
 * Live logs (GET /v1/workers/{name}/tail): the lines this process sends the
 * supervisor for tenants and runs someone tails. The supervisor says which
 * are tailed (PROTO_TAIL, the whole set each time); for any other, every
 * hook here returns after one NULL test or one hash lookup, and no line is
 * built: a tail costs nothing while nobody tails.
 *
 * Lines go up as PROTO_TAIL_LINE, one-way. A tenant is never slowed by its
 * tail: when the supervisor has not taken TAIL_QUEUE_MAX bytes of frames
 * yet, lines are dropped here and counted, and the count rides on the next
 * line that goes through (the reader sees a "dropped" line).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base.h"
#include "sandbox.h"

/* Frames to the supervisor not yet written, past which lines are dropped. */
#define TAIL_QUEUE_MAX (4u << 20)
/* A console message or a stack longer than this is cut (at a character). */
#define TAIL_TEXT_MAX (16u << 10)

void tail_on_frame(worker *w, const proto_frame *f) {
  json_t *body = json_loadb((const char *)f->payload, f->length, 0, NULL);
  json_t *keys = json_object_get(body, "keys");
  json_decref(w->tail_keys);
  w->tail_keys = NULL;
  size_t i;
  json_t *k;
  json_array_foreach(keys, i, k) {
    if (!json_is_string(k)) continue;
    if (w->tail_keys == NULL) w->tail_keys = json_object();
    json_object_set_new(w->tail_keys, json_string_value(k), json_true());
  }
  json_decref(body);
}

void tail_free(worker *w) {
  json_decref(w->tail_keys);
  w->tail_keys = NULL;
}

const char *tail_key(const sandbox *sb) {
  return sb->tail_key ? sb->tail_key : sb->log_tenant;
}

int tail_wanted(const worker *w, const char *key) {
  return w->tail_keys != NULL && key != NULL && json_object_get(w->tail_keys, key) != NULL;
}

/* "2026-01-01T00:00:00.000Z", as the node's log lines. */
static json_t *time_now_json(void) {
  int64_t ms = time_now_ms();
  time_t secs = (time_t)(ms / 1000);
  struct tm tm;
  char out[64];
  if (gmtime_r(&secs, &tm) == NULL) return json_integer((json_int_t)ms);
  snprintf(out, sizeof out, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
           tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(ms % 1000));
  return json_string(out);
}

/* Sends `line` (taken) for `key`, or drops it when the supervisor lags. */
static void emit(worker *w, const char *key, json_t *line) {
  json_object_set_new(line, "time", time_now_json());
  if (w->supervisor.closing || w->supervisor.pipe.write_queue_size > TAIL_QUEUE_MAX) {
    w->tail_dropped++;
    json_decref(line);
    return;
  }
  json_t *frame = json_pack("{s:s, s:o}", "key", key, "line", line);
  if (frame == NULL) { /* a key that is not UTF-8: no tail can want it */
    json_decref(line);
    return;
  }
  if (w->tail_dropped) json_object_set_new(frame, "dropped", json_integer((json_int_t)w->tail_dropped));
  char *text = json_dumps(frame, JSON_COMPACT | JSON_REAL_PRECISION(6));
  json_decref(frame);
  if (text == NULL) return;
  if (proto_channel_send(&w->supervisor, PROTO_TAIL_LINE, 0, text, strlen(text)) == 0)
    w->tail_dropped = 0;
  else
    w->tail_dropped++;
  free(text);
}

static json_t *text_json(const char *s, size_t len) {
  json_t *v = json_stringn(s, utf8_cut(s, len, TAIL_TEXT_MAX));
  return v ? v : json_string("(not UTF-8)");
}

static void set_request(json_t *line, const sandbox *sb, const sandbox_request *r) {
  if (r && r->request_id[0]) json_object_set_new(line, "request_id", json_string(r->request_id));
  if (sb->label) json_object_set_new(line, "sandbox", json_string(sb->label));
}

void tail_log(sandbox *sb, const sandbox_request *r, iso_log_level level, const char *msg,
              size_t len) {
  static const char *const names[] = {"debug", "info", "warn", "error"};
  json_t *line = json_pack("{s:s, s:s, s:o}", "type", "log", "level", names[level & 3],
                           "message", text_json(msg, len));
  set_request(line, sb, r);
  emit(sb->w, tail_key(sb), line);
}

void tail_exception(sandbox *sb, const sandbox_request *r, const iso_error *err) {
  const char *msg = err->message ? err->message : "unknown";
  json_t *line = json_pack("{s:s, s:o}", "type", "exception", "message",
                           text_json(msg, strlen(msg)));
  if (err->stack) json_object_set_new(line, "stack", text_json(err->stack, strlen(err->stack)));
  if (err->module) {
    json_object_set_new(line, "module", json_string(err->module));
    json_object_set_new(line, "line", json_integer(err->line));
    json_object_set_new(line, "column", json_integer(err->column));
  }
  set_request(line, sb, r);
  emit(sb->w, tail_key(sb), line);
}

const char *tail_outcome_of(const iso_error *err) {
  if (err == NULL) return "ok";
  switch (err->kind) {
    case ISO_ERR_CPU: return "exceededCpu";
    case ISO_ERR_MEMORY: return "exceededMemory";
    case ISO_ERR_CANCELLED: return "canceled";
    case ISO_ERR_INTERNAL: return "error";
    default: return "exception";
  }
}

void tail_request(worker *w, const char *key, const sandbox *sb, const sandbox_request *r,
                  uint64_t cpu_ns) {
  const char *outcome = r->outcome ? r->outcome : r->status >= 500 ? "error" : "ok";
  double wall_ms = r->start_ns ? (double)(time_mono_ns() - r->start_ns) / 1e6 : 0;
  const char *method = r->method ? r->method : r->req ? r->req->method : NULL;
  json_t *line = json_pack("{s:s, s:s?, s:s?, s:i, s:f, s:f, s:s}", "type", "request", "method",
                           method, "url", r->url, "status", r->status, "cpu_ms",
                           (double)cpu_ns / 1e6, "wall_ms", wall_ms, "outcome", outcome);
  if (line == NULL) return; /* a URL that is not UTF-8 cannot have come from a client */
  if (r->request_id[0]) json_object_set_new(line, "request_id", json_string(r->request_id));
  if (sb && sb->label) json_object_set_new(line, "sandbox", json_string(sb->label));
  emit(w, key, line);
}
