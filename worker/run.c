/*
 * PROTO_RUN: one-shot execution for POST /v1/run. The supervisor sends
 *   {"main_module", "modules", "limits", "env"?, "request"?, "input"?}
 * and gets back PROTO_RUN_RESULT {"http_status": N, "body": {...}}: the JSON
 * the control API answers with.
 *
 * Each run is a sandbox (sandbox.h) of kind SANDBOX_RUN, made in its first turn,
 * given one request and freed once that request is done. The user's main
 * module is wrapped by a generated one, so that a module exporting
 * run(input, env) instead of a fetch handler works too: with "input", the
 * wrapper calls run(input, env) and answers {"result": ...}; without, the
 * request goes to the module's fetch handler (or to run(null, env) when it
 * has none).
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base.h"
#include "facets.h"
#include "sandbox.h"

/* Its name cannot collide: user modules end in .js or .mjs. */
#define RUN_WRAPPER "edgenode:run"
#define RUN_DEFAULT_URL "http://run.localhost/"
/* The largest answer (its JSON, as the control API sends it): below the
 * largest frame the supervisor reads, with room for the frame's own keys. */
#define RUN_ANSWER_MAX_BYTES (64u * 1024u * 1024u)
/* A run's console lines come back with its answer, up to these; past them
 * lines are dropped and counted ("logs_dropped"), so that a console.log in
 * a loop cannot make the answer as large as the loop is long. Each line is
 * cut at RUN_LOG_LINE_MAX bytes, as in the node's own log. */
#define RUN_LOG_MAX_LINES 256
#define RUN_LOG_MAX_BYTES (64u * 1024u)
#define RUN_LOG_LINE_MAX 3500

typedef struct run_job {
  sandbox sb;         /* first */
  worker *w;
  uint32_t frame_id;  /* the PROTO_RUN it answers */
  int with_input;     /* run(input, env) rather than fetch */
  int replied;
  json_t *spec;       /* the frame's body: modules point into it */
  iso_module *modules;
  size_t n_modules;
  char *wrapper;
  char *env_json;
  char *bindings_json; /* {"DB": {"type": "facet"}} with a named facet */
  char *principal;     /* "run:<id>": its egress policy's name */
  uint64_t started_ns;
  uint64_t load_cpu_ns; /* a load that failed: what its top level used */
  json_t *logs;         /* [{level, message, time}] of its console */
  size_t log_bytes;
  size_t logs_dropped;
} run_job;

/* ---- base64 ---- */

static const char b64_chars[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static char *base64_encode(const uint8_t *in, size_t len) {
  char *out = xmalloc(4 * ((len + 2) / 3) + 1);
  char *p = out;
  for (size_t i = 0; i < len; i += 3) {
    uint32_t v = (uint32_t)in[i] << 16;
    if (i + 1 < len) v |= (uint32_t)in[i + 1] << 8;
    if (i + 2 < len) v |= in[i + 2];
    *p++ = b64_chars[(v >> 18) & 63];
    *p++ = b64_chars[(v >> 12) & 63];
    *p++ = i + 1 < len ? b64_chars[(v >> 6) & 63] : '=';
    *p++ = i + 2 < len ? b64_chars[v & 63] : '=';
  }
  *p = '\0';
  return out;
}

/* Returns the decoded length, or -1 when `in` is not base64. */
static long base64_decode(const char *in, size_t len, uint8_t *out) {
  uint32_t acc = 0;
  int bits = 0;
  long n = 0;
  size_t pad = 0;
  for (size_t i = 0; i < len; i++) {
    char c = in[i];
    if (c == '=') {
      pad++;
      continue;
    }
    if (pad) return -1;
    const char *at = c ? strchr(b64_chars, c) : NULL;
    if (at == NULL) {
      if (c == '\n' || c == '\r' || c == ' ') continue;
      return -1;
    }
    acc = (acc << 6) | (uint32_t)(at - b64_chars);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out[n++] = (uint8_t)(acc >> bits);
    }
  }
  return pad > 2 ? -1 : n;
}

/* ---- replies ---- */

/* The frame's text for an answer of `http_status` with `body` (taken): an
 * answer too large to send becomes an error saying so, at once, since the
 * caller would otherwise wait for the supervisor to give up on the run. */
static char *reply_text(int http_status, json_t *body) {
  char *answer = body ? json_dumps(body, JSON_COMPACT) : NULL;
  json_decref(body);
  if (answer == NULL)
    return xstrdup("{\"http_status\":500,\"body\":{\"error\":\"the result cannot be encoded\"}}");
  size_t len = strlen(answer);
  if (len > RUN_ANSWER_MAX_BYTES) {
    free(answer);
    log_write(LOG_INFO, NULL, NULL, NULL, "run answer of %zu bytes is over the limit", len);
    return xasprintf("{\"http_status\":502,\"body\":{\"error\":\"the run's answer is too large: "
                     "%zu bytes of JSON, over the limit of %u\",\"kind\":\"too_large\","
                     "\"size_bytes\":%zu,\"limit_bytes\":%u}}",
                     len, RUN_ANSWER_MAX_BYTES, len, RUN_ANSWER_MAX_BYTES);
  }
  char *text = xasprintf("{\"http_status\":%d,\"body\":%s}", http_status, answer);
  free(answer);
  return text;
}

/* CPU of the run: its modules' top level and its request. */
static double cpu_ms(const run_job *job) {
  const sandbox *sb = &job->sb;
  uint64_t ns = job->load_cpu_ns;
  if (sb->iso) {
    uint64_t outside = 0, hits = 0;
    iso_worker_outside_stats(sb->iso, &outside, &hits);
    ns += outside;
    /* A run has one request: until it is over, it is the one owned. */
    if (sb->owned) ns += iso_worker_request_cpu_ns(sb->iso, sb->owned->token);
  }
  return (double)(ns / 1000u) / 1000.0;
}

/* What the caller learns of every run, answered or failed: its console,
 * its cost, and whether its isolate was made for it (always, for now: a run
 * never reuses one). */
static void add_report(run_job *job, json_t *body) {
  if (!json_is_object(body)) return;
  json_object_set(body, "logs", job->logs);
  if (job->logs_dropped)
    json_object_set_new(body, "logs_dropped", json_integer((json_int_t)job->logs_dropped));
  json_object_set_new(body, "cpu_ms", json_real(cpu_ms(job)));
  uint64_t wall_us = (time_mono_ns() - job->started_ns) / 1000u;
  json_object_set_new(body, "wall_ms", json_real((double)wall_us / 1000.0));
  json_object_set_new(body, "cold", json_true());
}

static void reply(run_job *job, int http_status, json_t *body) {
  if (job->replied) {
    json_decref(body);
    return;
  }
  job->replied = 1;
  worker *w = job->w;
  add_report(job, body);
  char *text = reply_text(http_status, body);
  if (proto_channel_send(&w->supervisor, PROTO_RUN_RESULT, job->frame_id, text, strlen(text)) != 0)
    log_warn("could not send a run's result to the supervisor");
  free(text);
}

static void reply_error(run_job *job, int http_status, const char *kind, const char *message) {
  reply(job, http_status, json_pack("{s:s, s:s}", "error", message, "kind", kind));
}

static const char *kind_name(iso_error_kind kind) {
  switch (kind) {
    case ISO_ERR_SYNTAX: return "syntax";
    case ISO_ERR_LINK: return "link";
    case ISO_ERR_EXCEPTION: return "exception";
    case ISO_ERR_NO_HANDLER: return "no_handler";
    case ISO_ERR_BAD_RETURN: return "bad_return";
    case ISO_ERR_CPU: return "cpu";
    case ISO_ERR_MEMORY: return "memory";
    default: return "internal";
  }
}

/* {name, message, stack, module, line, column} of what the code threw. */
static json_t *exception_json(const iso_error *err, int own_place) {
  const char *name, *message;
  size_t name_len;
  sandbox_split_message(err->message ? err->message : "unknown error", &name, &name_len, &message);
  json_t *e = json_pack("{s:s%, s:s}", "name", name, name_len, "message", message);
  if (err->stack) {
    char *stack = sandbox_user_stack(err->stack);
    json_object_set_new(e, "stack", json_string(stack));
    free(stack);
  }
  if (own_place) json_object_set_new(e, "module", json_string(err->module));
  if (own_place && err->line > 0) json_object_set_new(e, "line", json_integer(err->line));
  if (own_place && err->column > 0) json_object_set_new(e, "column", json_integer(err->column));
  return e;
}

static void reply_failure(run_job *job, const iso_error *err, sandbox_failure why) {
  const iso_limits *lim = &job->sb.limits;
  if (why == SANDBOX_FAIL_WALL) {
    reply(job, 504, json_pack("{s:s, s:s, s:I}", "error", "exceeded wall time limit", "kind", "wall",
                              "limit_ms", (json_int_t)job->sb.wall_ms));
    return;
  }
  if (why == SANDBOX_FAIL_DISCARDED) {
    reply_error(job, 503, "internal", "the run was discarded: the worker process is shutting down");
    return;
  }
  iso_error_kind kind = err ? err->kind : ISO_ERR_INTERNAL;
  const char *message = err && err->message ? err->message : "unknown error";
  int status = 500;
  json_t *body = json_pack("{s:s, s:s}", "error", message, "kind", kind_name(kind));
  switch (kind) {
    case ISO_ERR_CPU:
      status = 503;
      json_object_set_new(body, "error", json_string("exceeded CPU limit"));
      json_object_set_new(body, "limit_ms", json_integer(lim->cpu_ms));
      break;
    case ISO_ERR_MEMORY:
      status = 503;
      json_object_set_new(body, "error", json_string("exceeded memory limit"));
      json_object_set_new(body, "limit_mb", json_integer(lim->memory_mb));
      break;
    case ISO_ERR_SYNTAX:
    case ISO_ERR_LINK:
    case ISO_ERR_NO_HANDLER:
      status = 400;
      break;
    case ISO_ERR_EXCEPTION:
      /* Thrown while the modules were evaluated: the code is bad, not the run. */
      status = job->sb.iso == NULL ? 400 : 500;
      break;
    case ISO_ERR_BAD_RETURN:
      status = 500;
      break;
    default:
      /* No isolate could be had (the process is at its maximum): try again. */
      status = job->sb.iso == NULL ? 503 : 500;
      break;
  }
  /* A place in the generated wrapper is nowhere the caller wrote: only
   * places in their own modules are given. */
  int own_place = err && err->module && strcmp(err->module, RUN_WRAPPER) != 0;
  if (own_place) json_object_set_new(body, "module", json_string(err->module));
  if (own_place && err->line > 0) json_object_set_new(body, "line", json_integer(err->line));
  if (own_place && err->column > 0) json_object_set_new(body, "column", json_integer(err->column));
  if (status == 500 && err && err->stack)
    log_write(LOG_INFO, NULL, NULL, NULL, "run failed: %s", err->stack);
  if (err && err->cpu_ns && job->sb.iso == NULL) job->load_cpu_ns = err->cpu_ns;
  if (err && (kind == ISO_ERR_EXCEPTION || kind == ISO_ERR_SYNTAX || kind == ISO_ERR_LINK ||
              kind == ISO_ERR_BAD_RETURN || kind == ISO_ERR_NO_HANDLER))
    json_object_set_new(body, "exception", exception_json(err, own_place));
  reply(job, status, body);
}

/* The response as JSON: the body as text when it is UTF-8, else base64. */
static json_t *response_json(const iso_response *res) {
  json_t *headers = json_object();
  for (size_t i = 0; i < res->n_headers; i++) {
    const iso_header *h = &res->headers[i];
    char *name = xstrndup(h->name, h->name_len);
    json_t *value = json_stringn(h->value, h->value_len);
    json_t *prev = json_object_get(headers, name);
    if (value && strcmp(name, "set-cookie") == 0) {
      /* Cookies cannot be joined with commas (an Expires date holds one):
       * an array, as Headers.getSetCookie() gives them. */
      if (!json_is_array(prev)) {
        prev = json_array();
        json_object_set_new(headers, name, prev);
      }
      json_array_append_new(prev, value);
      value = NULL;
    } else if (value && prev) {
      char *joined = xasprintf("%s, %s", json_string_value(prev), json_string_value(value));
      json_decref(value);
      value = json_string(joined);
      free(joined);
    }
    if (value) json_object_set_new(headers, name, value);
    free(name);
  }
  json_t *out = json_pack("{s:i, s:o}", "status", res->status, "headers", headers);
  json_t *text = json_stringn((const char *)res->body, res->body_len);
  if (text) {
    json_object_set_new(out, "body", text);
  } else {
    char *b64 = base64_encode(res->body, res->body_len);
    json_object_set_new(out, "body", json_string(b64));
    json_object_set_new(out, "body_encoding", json_string("base64"));
    free(b64);
  }
  return out;
}

/* The wrapper's JSON text. Strings may hold U+0000; a JavaScript number past
 * int64 is read as the double it is, so such a result is read again with
 * every number a double. */
static json_t *load_result(const uint8_t *text, size_t len) {
  size_t flags = JSON_DECODE_ANY | JSON_ALLOW_NUL;
  return json_load_wide((const char *)text, len, flags, NULL);
}

/* ---- the sandbox's owner ---- */

static int run_prepare(sandbox *sb, iso_error *err) {
  run_job *job = (run_job *)sb;
  iso_worker_options o = {0};
  o.modules = job->modules;
  o.n_modules = job->n_modules;
  o.main_module = RUN_WRAPPER;
  o.env_json = job->env_json;
  o.bindings_json = job->bindings_json;
  /* Host calls only for what the run was given: its egress rules, its facet. */
  if (sb->principal || sb->facet_id) o.calls = bindings_host_calls();
  return sandbox_load(sb, &o, err);
}

static void run_respond(sandbox *sb, void *cookie, const iso_response *res, const iso_error *err,
                        sandbox_failure why) {
  (void)cookie;
  run_job *job = (run_job *)sb;
  if (res == NULL) {
    reply_failure(job, err, why);
    return;
  }
  if (!job->with_input) {
    reply(job, 200, response_json(res));
    return;
  }
  /* The wrapper answered {"result": ...}. */
  json_t *body = load_result(res->body, res->body_len);
  json_t *result = json_object_get(body, "result");
  if (res->status != 200 || result == NULL) {
    json_decref(body);
    reply_error(job, 500, "bad_return", "run() did not produce a JSON result");
    return;
  }
  reply(job, 200, json_pack("{s:O}", "result", result));
  json_decref(body);
}

static void run_done(sandbox *sb, void *cookie) {
  (void)cookie;
  run_job *job = (run_job *)sb;
  log_write(LOG_DEBUG, NULL, NULL, NULL, "run finished in %.3f ms",
            (double)(time_mono_ns() - job->started_ns) / 1e6);
  sandbox_release(sb);
}

static void run_log(sandbox *sb, uint64_t token, iso_log_level level, const char *msg,
                    size_t len) {
  (void)token;
  static const char *const names[] = {"debug", "info", "warn", "error"};
  run_job *job = (run_job *)sb;
  size_t n = utf8_cut(msg, len, RUN_LOG_LINE_MAX);
  json_t *text = json_stringn(msg, n);
  if (text == NULL || json_array_size(job->logs) >= RUN_LOG_MAX_LINES ||
      job->log_bytes + n > RUN_LOG_MAX_BYTES) {
    json_decref(text);
    job->logs_dropped++;
    return;
  }
  job->log_bytes += n;
  json_array_append_new(job->logs, json_pack("{s:s, s:o, s:I}", "level", names[level & 3],
                                             "message", text, "time", (json_int_t)time_now_ms()));
}

/* What the run left open elsewhere (a facet transaction, fetches) goes with it. */
static void run_request_over(sandbox *sb, uint64_t token) {
  facet_link_request_done(sb->w, token);
  egress_link_request_done(sb->w, token);
}

static void run_freed(sandbox *sb) {
  run_job *job = (run_job *)sb;
  if (!job->replied) reply_error(job, 503, "internal", "the run was discarded");
  /* Its facet outlives it, but not its connection here (its writes were
   * committed at the gate): a delete of the file must leave no process
   * writing into it. */
  if (sb->facet_id && sb->w->facets)
    facet_store_close_facet(sb->w->facets, FACET_RUN_OWNER, sb->facet_id);
  free(job->modules);
  free(job->wrapper);
  free(job->env_json);
  free(job->bindings_json);
  free(job->principal);
  json_decref(job->logs);
  json_decref(job->spec);
  free(job);
}

static const sandbox_ops run_ops = {
    .prepare = run_prepare,
    .respond = run_respond,
    .done = run_done,
    .request_over = run_request_over,
    .freed = run_freed,
    .log = run_log,
};

/* ---- the frame ---- */

/* The generated main module: the user's module behind a fetch handler. */
static char *wrapper_source(const char *main_module, int with_input) {
  json_t *name = json_string(main_module);
  char *quoted = json_dumps(name, JSON_ENCODE_ANY);
  json_decref(name);
  if (quoted == NULL) abort();
  char *src = xasprintf(
      "import * as m from %s;\n"
      "const h = m.default;\n"
      "const fetchable = h !== null && typeof h === 'object' && typeof h.fetch === 'function';\n"
      "const run = typeof m.run === 'function' ? m.run\n"
      "  : h !== null && typeof h === 'object' && typeof h.run === 'function' ? h.run.bind(h) : null;\n"
      "const withInput = %s;\n"
      "if (run === null && (withInput || !fetchable))\n"
      "  throw new TypeError(withInput ? 'The module exports no run(input, env) function'\n"
      "    : 'The module exports neither a default object with a fetch() method nor run(input, env)');\n"
      "export default {\n"
      "  async fetch(request, env, ctx) {\n"
      "    if (!withInput && fetchable) return h.fetch(request, env, ctx);\n"
      "    const input = withInput ? await request.json() : null;\n"
      "    const result = await run(input, env);\n"
      "    let json;\n"
      "    try {\n"
      "      json = JSON.stringify({ result: result === undefined ? null : result });\n"
      "    } catch (err) {\n"
      "      throw new TypeError(`run() returned a value JSON cannot hold: ${err.message}`);\n"
      "    }\n"
      "    // JSON.stringify escapes a lone surrogate (and writes pairs as they are):\n"
      "    // U+FFFD takes its place, as in any UTF-8 encoding of the string.\n"
      "    const text = json\n"
      "      .replace(/\\\\(u(d[89a-f][0-9a-f]{2})|[^u])/gi, (m, e, s) => (s ? '\\\\ufffd' : m));\n"
      "    return new Response(text, { headers: { 'content-type': 'application/json' } });\n"
      "  },\n"
      "};\n",
      quoted, with_input ? "true" : "false");
  free(quoted);
  return src;
}

/* Fills *req from the frame's "request" (or the input). Strings point into
 * the spec or into *owned (freed by the caller). Returns NULL or the problem. */
static const char *build_request(run_job *job, iso_request *req, iso_header **headers,
                                 uint8_t **owned) {
  json_t *input = json_object_get(job->spec, "input");
  static iso_header json_type = {"content-type", 12, "application/json", 16};
  if (input) {
    char *text = json_dumps(input, JSON_ENCODE_ANY | JSON_COMPACT);
    if (text == NULL) return "\"input\" cannot be encoded";
    *owned = (uint8_t *)text;
    *req = (iso_request){"POST", 4, RUN_DEFAULT_URL, strlen(RUN_DEFAULT_URL), &json_type, 1,
                         (const uint8_t *)text, strlen(text)};
    return NULL;
  }
  json_t *r = json_object_get(job->spec, "request");
  if (r != NULL && !json_is_object(r)) return "\"request\" must be an object";
  const char *method = json_string_value(json_object_get(r, "method"));
  const char *url = json_string_value(json_object_get(r, "url"));
  if (json_object_get(r, "method") && method == NULL) return "\"request.method\" must be a string";
  if (json_object_get(r, "url") && url == NULL) return "\"request.url\" must be a string";
  req->method = method ? method : "GET";
  req->method_len = strlen(req->method);
  req->url = url ? url : RUN_DEFAULT_URL;
  req->url_len = strlen(req->url);
  json_t *hs = json_object_get(r, "headers");
  size_t n = json_is_object(hs) ? json_object_size(hs) : json_is_array(hs) ? json_array_size(hs) : 0;
  if (hs && !json_is_object(hs) && !json_is_array(hs))
    return "\"request.headers\" must be an object or an array of [name, value] pairs";
  *headers = xcalloc(n ? n : 1, sizeof **headers);
  size_t i = 0;
  if (json_is_object(hs)) {
    const char *k;
    json_t *v;
    json_object_foreach(hs, k, v) {
      if (!json_is_string(v)) return "\"request.headers\": values must be strings";
      (*headers)[i++] = (iso_header){k, strlen(k), json_string_value(v), json_string_length(v)};
    }
  } else if (json_is_array(hs)) {
    json_t *pair;
    json_array_foreach(hs, i, pair) {
      json_t *k = json_array_get(pair, 0), *v = json_array_get(pair, 1);
      if (json_array_size(pair) != 2 || !json_is_string(k) || !json_is_string(v))
        return "\"request.headers\": each entry must be [name, value] strings";
      (*headers)[i] = (iso_header){json_string_value(k), json_string_length(k),
                                   json_string_value(v), json_string_length(v)};
    }
  }
  req->headers = *headers;
  req->n_headers = n;
  json_t *body = json_object_get(r, "body");
  if (body && !json_is_string(body) && !json_is_null(body)) return "\"request.body\" must be a string";
  const char *enc = json_string_value(json_object_get(r, "body_encoding"));
  if (json_is_string(body) && enc && strcasecmp(enc, "base64") == 0) {
    *owned = xmalloc(json_string_length(body) + 1);
    long len = base64_decode(json_string_value(body), json_string_length(body), *owned);
    if (len < 0) return "\"request.body\" is not valid base64";
    req->body = *owned;
    req->body_len = (size_t)len;
  } else if (enc && strcasecmp(enc, "utf8") != 0 && strcasecmp(enc, "utf-8") != 0) {
    return "\"request.body_encoding\" must be \"utf8\" or \"base64\"";
  } else if (json_is_string(body)) {
    req->body = (const uint8_t *)json_string_value(body);
    req->body_len = json_string_length(body);
  }
  return NULL;
}

/* The run's egress policy (pushed to the egress as "run:<run_id>" by the
 * supervisor) and its named facet, as env.DB. NULL, or the problem. */
static const char *give_capabilities(run_job *job) {
  const char *run_id = json_string_value(json_object_get(job->spec, "run_id"));
  json_t *facet = json_object_get(job->spec, "facet");
  if (json_object_get(job->spec, "egress")) {
    if (run_id == NULL) return "\"egress\" needs the run's id";
    job->principal = xasprintf("run:%s", run_id);
  }
  if (facet == NULL) return NULL;
  const char *name = json_string_value(facet);
  if (name == NULL || !facet_id_valid(name, json_string_length(facet)))
    return "\"facet\" must be a name of letters, digits, _ and - (at most 64)";
  /* A run declares no bindings: the spec's are the facet's alone. */
  json_object_set_new(job->spec, "bindings", json_pack("{s:{s:s}}", "DB", "type", "facet"));
  job->bindings_json = xstrdup("{\"DB\":{\"type\":\"facet\"}}");
  return NULL;
}

void run_on_frame(worker *w, const proto_frame *frame) {
  run_job *job = xcalloc(1, sizeof *job);
  job->w = w;
  job->frame_id = frame->id;
  job->started_ns = time_mono_ns();
  /* The caller's strings (input, env, request body) may hold U+0000. */
  job->spec = json_loadb((const char *)frame->payload, frame->length, JSON_ALLOW_NUL, NULL);
  iso_module *mods = NULL;
  const char *main_module = NULL, *why = "the run is not a JSON object";
  int n = json_is_object(job->spec) ? spec_modules(job->spec, &mods, &main_module, &why) : -1;
  if (n < 0) {
    reply_error(job, 400, "internal", why);
    json_decref(job->spec);
    free(job);
    return;
  }
  job->with_input = json_object_get(job->spec, "input") != NULL;
  job->n_modules = (size_t)n + 1;
  job->modules = xcalloc(job->n_modules, sizeof *job->modules);
  memcpy(job->modules, mods, (size_t)n * sizeof *mods);
  free(mods);
  job->wrapper = wrapper_source(main_module, job->with_input);
  job->modules[n] = (iso_module){RUN_WRAPPER, job->wrapper, strlen(job->wrapper)};
  json_t *env = json_object_get(job->spec, "env");
  if (json_is_object(env)) job->env_json = json_dumps(env, JSON_COMPACT);

  job->logs = json_array();
  const char *problem = give_capabilities(job);
  sandbox_init(&job->sb, w, SANDBOX_RUN, &run_ops, NULL, job->spec, xstrdup("run"));
  const char *tail_id = json_string_value(json_object_get(job->spec, "tail_id"));
  if (tail_id) job->sb.tail_key = xasprintf("run:%s", tail_id);
  job->sb.principal = job->principal;
  if (job->bindings_json) {
    job->sb.facet_tenant = FACET_RUN_OWNER;
    job->sb.facet_id = json_string_value(json_object_get(job->spec, "facet"));
  }

  iso_request req = {0};
  iso_header *headers = NULL;
  uint8_t *owned = NULL;
  if (problem == NULL) problem = build_request(job, &req, &headers, &owned);
  if (problem) {
    reply_error(job, 400, "request", problem);
  } else if (sandbox_submit(&job->sb, job, &req,
                            json_string_value(json_object_get(job->spec, "run_id"))) != 0) {
    reply_error(job, 503, "internal", "the run could not be started");
  }
  free(headers);
  free(owned);
  if (problem || job->sb.owned == NULL) sandbox_release(&job->sb);
}
