/*
 * isolate: the C API over V8, driven with real JavaScript modules and the
 * real runtime (the .js files in isolate/runtime/).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "base.h"
#include "isolate.h"

#define MAX_TOKENS 16
#define MAX_TIMERS 64

typedef struct {
  int responded; /* respond calls */
  int done;      /* done calls */
  int status;
  char body[8192];
  size_t body_len;
  char headers[1024]; /* "name: value\n"... */
  iso_error_kind kind;
  char message[512];
  char module[128];
  char stack[4096];
  int line;
  int column;
} rec_req;

typedef struct {
  uint32_t id;
  uint64_t token;
  double delay;
  int active;
} rec_timer;

typedef struct {
  rec_req req[MAX_TOKENS];
  rec_timer timers[MAX_TIMERS];
  size_t n_timers;
  int refuse_timers;
  int log_sleep_ms; /* each log call blocks this long */
  char log[4096];
  size_t log_len;
  int last_level;
  uint64_t last_log_token;
  iso_worker *free_on_done; /* frees this worker from inside done() */
} rec;

static void copy_str(char *dst, size_t cap, const char *src) {
  snprintf(dst, cap, "%s", src ? src : "");
}

static void h_log(void *data, uint64_t token, iso_log_level level, const char *msg, size_t len) {
  rec *r = data;
  if (r->log_sleep_ms > 0) {
    struct timespec ts = {0, r->log_sleep_ms * 1000000L};
    nanosleep(&ts, NULL);
  }
  int n = snprintf(r->log + r->log_len, sizeof(r->log) - r->log_len, "%.*s\n", (int)len, msg);
  if (n > 0 && r->log_len + (size_t)n < sizeof(r->log))
    r->log_len += (size_t)n;
  r->last_level = (int)level;
  r->last_log_token = token;
}

static int h_timer_start(void *data, uint64_t token, uint32_t id, double delay) {
  rec *r = data;
  if (r->refuse_timers || r->n_timers == MAX_TIMERS)
    return -1;
  r->timers[r->n_timers++] = (rec_timer){id, token, delay, 1};
  return 0;
}

static void h_timer_cancel(void *data, uint32_t id) {
  rec *r = data;
  for (size_t i = 0; i < r->n_timers; i++)
    if (r->timers[i].id == id)
      r->timers[i].active = 0;
}

static void h_respond(void *data, uint64_t token, const iso_response *res, const iso_error *err) {
  rec *r = data;
  assert_true(token < MAX_TOKENS);
  rec_req *q = &r->req[token];
  q->responded++;
  assert_true((res == NULL) != (err == NULL));
  if (res != NULL) {
    q->status = res->status;
    q->body_len = res->body_len < sizeof(q->body) - 1 ? res->body_len : sizeof(q->body) - 1;
    if (q->body_len > 0)
      memcpy(q->body, res->body, q->body_len);
    q->body[q->body_len] = '\0';
    size_t at = 0;
    for (size_t i = 0; i < res->n_headers; i++) {
      int n = snprintf(q->headers + at, sizeof(q->headers) - at, "%.*s: %.*s\n",
                       (int)res->headers[i].name_len, res->headers[i].name,
                       (int)res->headers[i].value_len, res->headers[i].value);
      if (n > 0 && at + (size_t)n < sizeof(q->headers))
        at += (size_t)n;
    }
    q->kind = ISO_OK;
  } else {
    q->kind = err->kind;
    copy_str(q->message, sizeof(q->message), err->message);
    copy_str(q->module, sizeof(q->module), err->module);
    copy_str(q->stack, sizeof(q->stack), err->stack);
    q->line = err->line;
    q->column = err->column;
  }
}

static void h_done(void *data, uint64_t token) {
  rec *r = data;
  assert_true(token < MAX_TOKENS);
  assert_int_equal(r->req[token].responded, 1);
  r->req[token].done++;
  if (r->free_on_done != NULL) {
    iso_worker_free(r->free_on_done);
    r->free_on_done = NULL;
  }
}

static iso_host host_for(rec *r) {
  return (iso_host){r, h_log, h_timer_start, h_timer_cancel, h_respond, h_done};
}

static iso_worker *load_modules(rec *r, const iso_module *mods, size_t n, const char *main_module,
                                const iso_limits *limits, const char *env, iso_error *err) {
  iso_host host = host_for(r);
  return iso_worker_new(&host, limits, mods, n, main_module, env, err);
}

static iso_worker *load(rec *r, const char *src, const iso_limits *limits, iso_error *err) {
  iso_module m = {"index.js", src, strlen(src)};
  return load_modules(r, &m, 1, "index.js", limits, NULL, err);
}

/* Loads a module that must compile and have a handler. */
static iso_worker *load_ok(rec *r, const char *src, const iso_limits *limits) {
  iso_error err = {0};
  iso_worker *w = load(r, src, limits, &err);
  if (w == NULL)
    fail_msg("load failed: %d %s (%s:%d:%d)", err.kind, err.message, err.module, err.line,
             err.column);
  iso_error_clear(&err);
  return w;
}

static int dispatch_full(iso_worker *w, uint64_t token, const char *method, const char *path,
                         const iso_header *headers, size_t n_headers, const char *body) {
  char url[256];
  snprintf(url, sizeof(url), "http://test.localhost%s", path);
  iso_request req = {method, strlen(method), url, strlen(url), headers, n_headers,
                     (const uint8_t *)body, body ? strlen(body) : 0};
  return iso_worker_dispatch(w, token, &req);
}

static int get(iso_worker *w, uint64_t token, const char *path) {
  return dispatch_full(w, token, "GET", path, NULL, 0, NULL);
}

/* Fires due timers, shortest delay first, until none is left. */
static void run_timers(rec *r, iso_worker *w) {
  for (int rounds = 0; rounds < 1000; rounds++) {
    rec_timer *next = NULL;
    for (size_t i = 0; i < r->n_timers; i++)
      if (r->timers[i].active && (next == NULL || r->timers[i].delay < next->delay))
        next = &r->timers[i];
    if (next == NULL)
      return;
    next->active = 0;
    iso_worker_fire_timer(w, next->token, next->id);
  }
}

/* Loads `src`, GETs `path` as token 1 and expects a 200 with `body`. */
static void expect_body(const char *src, const char *path, const char *body) {
  rec r = {0};
  iso_worker *w = load_ok(&r, src, NULL);
  assert_int_equal(get(w, 1, path), 0);
  run_timers(&r, w);
  if (r.req[1].kind != ISO_OK)
    fail_msg("request failed: %s\n%s", r.req[1].message, r.req[1].stack);
  assert_int_equal(r.req[1].responded, 1);
  assert_int_equal(r.req[1].done, 1);
  assert_int_equal(r.req[1].status, 200);
  assert_string_equal(r.req[1].body, body);
  assert_int_equal(iso_worker_pending(w), 0);
  iso_worker_free(w);
}

static const char *hello = "export default { fetch(request, env, ctx) { return new Response('hi'); } };";

static int setup(void **state) {
  (void)state;
  return iso_platform_init();
}

static void test_version(void **state) {
  (void)state;
  assert_non_null(strstr(iso_v8_version(), "10.2."));
}

static void test_hello(void **state) {
  (void)state;
  expect_body(hello, "/", "hi");
}

static void test_async_hello(void **state) {
  (void)state;
  expect_body("export default { async fetch() { await null; return new Response('async'); } };",
              "/", "async");
}

static void test_request_fields(void **state) {
  (void)state;
  rec r = {0};
  iso_worker *w = load_ok(&r,
                          "export default { async fetch(req) {\n"
                          "  const body = await req.text();\n"
                          "  return new Response(`${req.method} ${req.url} ${req.headers.get('x-a')} ${body}`,\n"
                          "    { status: 201, headers: { 'x-out': 'yes', 'content-type': 'text/plain' } });\n"
                          "} };",
                          NULL);
  iso_header h[] = {{"X-A", 3, "caf\xe9", 4}, {"Host", 4, "test.localhost", 14}};
  assert_int_equal(dispatch_full(w, 1, "POST", "/p?q=1", h, 2, "h\xc3\xa9llo"), 0);
  assert_int_equal(r.req[1].kind, ISO_OK);
  assert_int_equal(r.req[1].status, 201);
  /* Header bytes are Latin-1 in JavaScript: 0xE9 is é, and comes back as UTF-8 in the body. */
  assert_string_equal(r.req[1].body, "POST http://test.localhost/p?q=1 caf\xc3\xa9 h\xc3\xa9llo");
  assert_non_null(strstr(r.req[1].headers, "x-out: yes\n"));
  assert_non_null(strstr(r.req[1].headers, "content-type: text/plain\n"));
  iso_worker_free(w);
}

static void test_bytes_body(void **state) {
  (void)state;
  rec r = {0};
  iso_worker *w = load_ok(
      &r, "export default { fetch() { return new Response(new Uint8Array([104, 0, 105])); } };",
      NULL);
  assert_int_equal(get(w, 1, "/"), 0);
  assert_int_equal(r.req[1].kind, ISO_OK);
  assert_int_equal(r.req[1].body_len, 3);
  assert_memory_equal(r.req[1].body, "h\0i", 3);
  iso_worker_free(w);
}

static void test_env(void **state) {
  (void)state;
  rec r = {0};
  iso_module m = {"index.js", "export default { fetch(req, env) { return new Response(env.GREETING); } };", 0};
  m.source_len = strlen(m.source);
  iso_error err = {0};
  iso_worker *w = load_modules(&r, &m, 1, "index.js", NULL, "{\"GREETING\": \"hey\"}", &err);
  assert_non_null(w);
  assert_int_equal(get(w, 1, "/"), 0);
  assert_string_equal(r.req[1].body, "hey");
  iso_worker_free(w);
}

static void test_modules(void **state) {
  (void)state;
  iso_module mods[] = {
      {"index.js", "import { a } from './lib/a.js';\n"
                   "import { u } from './util.js';\n"
                   "export default { fetch() { return new Response(a() + u); } };", 0},
      {"lib/a.js", "import { u } from '../util.js';\nimport { b } from './b.js';\n"
                   "export function a() { return 'a' + b + u; }", 0},
      {"lib/b.js", "export const b = 'b';", 0},
      {"util.js", "export const u = 'u';", 0},
  };
  for (size_t i = 0; i < ARRAY_SIZE(mods); i++)
    mods[i].source_len = strlen(mods[i].source);
  rec r = {0};
  iso_error err = {0};
  iso_worker *w = load_modules(&r, mods, ARRAY_SIZE(mods), "index.js", NULL, NULL, &err);
  if (w == NULL)
    fail_msg("%s", err.message);
  assert_int_equal(get(w, 1, "/"), 0);
  assert_string_equal(r.req[1].body, "abuu");
  iso_worker_free(w);
}

static void test_dynamic_import(void **state) {
  (void)state;
  iso_module mods[] = {
      {"index.js", "export default { async fetch() {\n"
                   "  const lib = await import('./lib/a.js');\n"
                   "  let missing;\n"
                   "  try { await import('./nope.js'); } catch (e) { missing = e.name; }\n"
                   "  return new Response(lib.a + ' ' + lib.default + ' ' + missing);\n"
                   "} };", 0},
      {"lib/a.js", "import { u } from '../util.js';\nawait null;\nexport const a = 'a' + u;\nexport default 'def';", 0},
      {"util.js", "export const u = 'u';", 0},
  };
  for (size_t i = 0; i < ARRAY_SIZE(mods); i++)
    mods[i].source_len = strlen(mods[i].source);
  rec r = {0};
  iso_error err = {0};
  iso_worker *w = load_modules(&r, mods, ARRAY_SIZE(mods), "index.js", NULL, NULL, &err);
  if (w == NULL)
    fail_msg("%s", err.message);
  assert_int_equal(get(w, 1, "/"), 0);
  if (r.req[1].kind != ISO_OK)
    fail_msg("%s", r.req[1].message);
  assert_string_equal(r.req[1].body, "au def TypeError");
  iso_worker_free(w);
}

static void test_link_error(void **state) {
  (void)state;
  iso_module mods[] = {
      {"index.js", "import { x } from './missing.js';\nexport default { fetch() {} };", 0},
  };
  mods[0].source_len = strlen(mods[0].source);
  iso_error err = {0};
  assert_int_equal(iso_validate(NULL, mods, 1, "index.js", &err), -1);
  assert_int_equal(err.kind, ISO_ERR_LINK);
  assert_non_null(strstr(err.message, "./missing.js"));
  assert_non_null(strstr(err.message, "index.js"));
  assert_string_equal(err.module, "index.js");
  iso_error_clear(&err);

  /* An export that does not exist. */
  iso_module mods2[] = {
      {"index.js", "import { nope } from './b.js';\nexport default { fetch() {} };", 0},
      {"b.js", "export const b = 1;", 0},
  };
  mods2[0].source_len = strlen(mods2[0].source);
  mods2[1].source_len = strlen(mods2[1].source);
  assert_int_equal(iso_validate(NULL, mods2, 2, "index.js", &err), -1);
  assert_int_equal(err.kind, ISO_ERR_LINK);
  assert_non_null(strstr(err.message, "nope"));
  assert_string_equal(err.module, "index.js");
  assert_int_equal(err.line, 1);
  iso_error_clear(&err);

  /* Climbing above the root resolves to nothing. */
  iso_module mods3[] = {
      {"index.js", "import { b } from '../b.js';\nexport default { fetch() {} };", 0},
      {"b.js", "export const b = 1;", 0},
  };
  mods3[0].source_len = strlen(mods3[0].source);
  mods3[1].source_len = strlen(mods3[1].source);
  assert_int_equal(iso_validate(NULL, mods3, 2, "index.js", &err), -1);
  assert_int_equal(err.kind, ISO_ERR_LINK);
  iso_error_clear(&err);

  /* The main module must exist. */
  assert_int_equal(iso_validate(NULL, mods2, 2, "main.js", &err), -1);
  assert_int_equal(err.kind, ISO_ERR_LINK);
  iso_error_clear(&err);
}

static void test_syntax_error(void **state) {
  (void)state;
  const char *src = "export default {\n  fetch() { return f(1, ); }\n};\nlet x = (1 + );\n";
  iso_module m = {"index.js", src, strlen(src)};
  iso_error err = {0};
  assert_int_equal(iso_validate(NULL, &m, 1, "index.js", &err), -1);
  assert_int_equal(err.kind, ISO_ERR_SYNTAX);
  assert_string_equal(err.message, "SyntaxError: Unexpected token ')'");
  assert_string_equal(err.module, "index.js");
  assert_int_equal(err.line, 4);
  assert_int_equal(err.column, 14);
  iso_error_clear(&err);

  /* In a module other than the main one. */
  iso_module mods[] = {
      {"index.js", "import './lib.js';\nexport default { fetch() {} };", 0},
      {"lib.js", "\n\n  }", 0},
  };
  mods[0].source_len = strlen(mods[0].source);
  mods[1].source_len = strlen(mods[1].source);
  assert_int_equal(iso_validate(NULL, mods, 2, "index.js", &err), -1);
  assert_int_equal(err.kind, ISO_ERR_SYNTAX);
  assert_string_equal(err.module, "lib.js");
  assert_int_equal(err.line, 3);
  assert_int_equal(err.column, 3);
  iso_error_clear(&err);
}

static void test_no_handler(void **state) {
  (void)state;
  const char *srcs[] = {
      "export const x = 1;",
      "export default 42;",
      "export default { fetch: 'no' };",
  };
  for (size_t i = 0; i < ARRAY_SIZE(srcs); i++) {
    iso_module m = {"index.js", srcs[i], strlen(srcs[i])};
    iso_error err = {0};
    assert_int_equal(iso_validate(NULL, &m, 1, "index.js", &err), -1);
    assert_int_equal(err.kind, ISO_ERR_NO_HANDLER);
    assert_non_null(strstr(err.message, "fetch"));
    iso_error_clear(&err);
  }
}

static void test_top_level(void **state) {
  (void)state;
  iso_error err = {0};
  rec r = {0};
  const char *throws = "\nthrow new Error('at load');\nexport default { fetch() {} };";
  assert_null(load(&r, throws, NULL, &err));
  assert_int_equal(err.kind, ISO_ERR_EXCEPTION);
  assert_string_equal(err.message, "Error: at load");
  assert_string_equal(err.module, "index.js");
  assert_int_equal(err.line, 2);
  iso_error_clear(&err);

  /* Top-level await on something already settled is fine. */
  iso_worker *w = load_ok(&r,
                          "const v = await Promise.resolve('tla');\n"
                          "export default { fetch() { return new Response(v); } };",
                          NULL);
  assert_int_equal(get(w, 1, "/"), 0);
  assert_string_equal(r.req[1].body, "tla");
  iso_worker_free(w);

  /* ... on something that never settles is an error. */
  assert_null(load(&r, "await new Promise(() => {});\nexport default { fetch() {} };", NULL, &err));
  assert_int_equal(err.kind, ISO_ERR_EXCEPTION);
  assert_string_equal(err.message, "top-level await did not settle");
  iso_error_clear(&err);
}

static void test_thrown(void **state) {
  (void)state;
  rec r = {0};
  iso_worker *w = load_ok(&r,
                          "export default {\n"
                          "  fetch(req) {\n"
                          "    throw new Error('boom');\n"
                          "  }\n"
                          "};",
                          NULL);
  assert_int_equal(get(w, 1, "/"), 0);
  assert_int_equal(r.req[1].responded, 1);
  assert_int_equal(r.req[1].done, 1);
  assert_int_equal(r.req[1].kind, ISO_ERR_EXCEPTION);
  assert_string_equal(r.req[1].message, "Error: boom");
  assert_string_equal(r.req[1].module, "index.js");
  assert_int_equal(r.req[1].line, 3);
  assert_int_equal(r.req[1].column, 11);
  assert_non_null(strstr(r.req[1].stack, "Error: boom"));
  assert_non_null(strstr(r.req[1].stack, "index.js:3:11"));
  /* The worker keeps serving. */
  assert_int_equal(get(w, 2, "/"), 0);
  assert_int_equal(r.req[2].kind, ISO_ERR_EXCEPTION);
  assert_int_equal(iso_worker_pending(w), 0);
  iso_worker_free(w);
}

static void test_thrown_by_runtime(void **state) {
  (void)state;
  /* Thrown inside the runtime: the location is still the tenant's line. */
  rec r = {0};
  iso_worker *w = load_ok(&r,
                          "export default {\n"
                          "  fetch() {\n"
                          "    return new Response('x', { status: 42 });\n"
                          "  }\n"
                          "};",
                          NULL);
  assert_int_equal(get(w, 1, "/"), 0);
  assert_int_equal(r.req[1].kind, ISO_ERR_EXCEPTION);
  assert_true(strncmp(r.req[1].message, "RangeError", 10) == 0);
  assert_string_equal(r.req[1].module, "index.js");
  assert_int_equal(r.req[1].line, 3);
  print_message("  %s\n", r.req[1].message);
  iso_worker_free(w);
}

static void test_thrown_non_error(void **state) {
  (void)state;
  rec r = {0};
  iso_worker *w = load_ok(&r, "export default { fetch() { throw 'just a string'; } };", NULL);
  assert_int_equal(get(w, 1, "/"), 0);
  assert_int_equal(r.req[1].kind, ISO_ERR_EXCEPTION);
  assert_string_equal(r.req[1].message, "just a string");
  iso_worker_free(w);
}

static void test_rejected(void **state) {
  (void)state;
  rec r = {0};
  iso_worker *w = load_ok(&r,
                          "export default {\n"
                          "  async fetch() {\n"
                          "    await null;\n"
                          "    throw new TypeError('nope');\n"
                          "  }\n"
                          "};",
                          NULL);
  assert_int_equal(get(w, 1, "/"), 0);
  assert_int_equal(r.req[1].kind, ISO_ERR_EXCEPTION);
  assert_string_equal(r.req[1].message, "TypeError: nope");
  assert_string_equal(r.req[1].module, "index.js");
  assert_int_equal(r.req[1].line, 4);
  assert_int_equal(r.req[1].done, 1);
  iso_worker_free(w);
}

static void test_bad_return(void **state) {
  (void)state;
  const char *srcs[] = {
      "export default { fetch() { return 'text'; } };",
      "export default { fetch() { return { status: 200 }; } };",
      "export default { async fetch() { } };",
  };
  for (size_t i = 0; i < ARRAY_SIZE(srcs); i++) {
    rec r = {0};
    iso_worker *w = load_ok(&r, srcs[i], NULL);
    assert_int_equal(get(w, 1, "/"), 0);
    assert_int_equal(r.req[1].kind, ISO_ERR_BAD_RETURN);
    assert_true(strncmp(r.req[1].message, "fetch() returned ", 17) == 0);
    assert_non_null(strstr(r.req[1].message, ", not a Response"));
    assert_int_equal(r.req[1].done, 1);
    print_message("  bad return %zu: %s\n", i, r.req[1].message);
    iso_worker_free(w);
  }
}

static void test_eval(void **state) {
  (void)state;
  expect_body("export default { fetch() {\n"
              "  const out = [];\n"
              "  try { eval('1 + 1'); } catch (e) { out.push(`${e.name}: ${e.message}`); }\n"
              "  try { new Function('return 1'); } catch (e) { out.push(e.name); }\n"
              "  try { (0, eval)('1'); } catch (e) { out.push(e.constructor === EvalError); }\n"
              "  return new Response(out.join('|'));\n"
              "} };",
              "/", "EvalError: Code generation from strings disallowed for this context|EvalError|true");
}

static void test_wasm_and_atomics_disallowed(void **state) {
  (void)state;
  expect_body("export default { fetch() {\n"
              "  const out = [typeof WebAssembly];\n"
              "  const i32 = new Int32Array(new SharedArrayBuffer(16));\n"
              "  try { Atomics.wait(i32, 0, 0, 1000); out.push('waited'); } catch (e) { out.push(e.name); }\n"
              "  return new Response(out.join(' '));\n"
              "} };",
              "/", "undefined TypeError");
}

static void test_timers(void **state) {
  (void)state;
  rec r = {0};
  iso_worker *w = load_ok(&r,
                          "export default { fetch() {\n"
                          "  const cancelled = setTimeout(() => { throw new Error('ran'); }, 5);\n"
                          "  clearTimeout(cancelled);\n"
                          "  return new Promise(ok => setTimeout(() => ok(new Response('later')), 10));\n"
                          "} };",
                          NULL);
  assert_int_equal(get(w, 3, "/"), 0);
  assert_int_equal(r.req[3].responded, 0);
  assert_int_equal(iso_worker_pending(w), 1);
  assert_int_equal(r.n_timers, 2);
  assert_int_equal(r.timers[0].active, 0);
  assert_int_equal(r.timers[1].active, 1);
  assert_int_equal(r.timers[1].token, 3);
  assert_true(r.timers[1].delay >= 10);
  run_timers(&r, w);
  assert_int_equal(r.req[3].kind, ISO_OK);
  assert_string_equal(r.req[3].body, "later");
  assert_int_equal(r.req[3].done, 1);
  assert_int_equal(iso_worker_pending(w), 0);
  iso_worker_free(w);
}

static void test_wait_until(void **state) {
  (void)state;
  rec r = {0};
  iso_worker *w = load_ok(&r,
                          "export default { fetch(req, env, ctx) {\n"
                          "  ctx.waitUntil(new Promise(ok => setTimeout(ok, 20)));\n"
                          "  return new Response('now');\n"
                          "} };",
                          NULL);
  assert_int_equal(get(w, 1, "/"), 0);
  assert_int_equal(r.req[1].responded, 1);
  assert_string_equal(r.req[1].body, "now");
  assert_int_equal(r.req[1].done, 0);
  assert_int_equal(iso_worker_pending(w), 1);
  run_timers(&r, w);
  assert_int_equal(r.req[1].done, 1);
  assert_int_equal(iso_worker_pending(w), 0);
  iso_worker_free(w);
}

static void test_console(void **state) {
  (void)state;
  rec r = {0};
  iso_worker *w = load_ok(&r,
                          "export default { fetch() {\n"
                          "  console.log('hello', 42);\n"
                          "  console.error('bad');\n"
                          "  return new Response('ok');\n"
                          "} };",
                          NULL);
  assert_int_equal(get(w, 7, "/"), 0);
  assert_non_null(strstr(r.log, "hello 42\n"));
  assert_non_null(strstr(r.log, "bad\n"));
  assert_int_equal(r.last_level, ISO_LOG_ERROR);
  assert_int_equal(r.last_log_token, 7);
  iso_worker_free(w);
}

static void test_console_in_continuation(void **state) {
  (void)state;
  /* Request 1's continuation runs when request 2's timer fires: its log
   * line still belongs to request 1. */
  rec r = {0};
  iso_worker *w = load_ok(&r,
                          "let wake; const gate = new Promise(ok => { wake = ok; });\n"
                          "export default { async fetch(req, env, ctx) {\n"
                          "  if (req.url.endsWith('/open')) {\n"
                          "    ctx.waitUntil(new Promise(ok => setTimeout(() => { wake(); ok(); }, 1)));\n"
                          "    return new Response('opened');\n"
                          "  }\n"
                          "  await gate;\n"
                          "  console.log('continued');\n"
                          "  return new Response('passed');\n"
                          "} };",
                          NULL);
  assert_int_equal(get(w, 1, "/wait"), 0);
  assert_int_equal(get(w, 2, "/open"), 0);
  run_timers(&r, w);
  assert_string_equal(r.req[1].body, "passed");
  assert_string_equal(r.log, "continued\n");
  assert_int_equal(r.last_log_token, 1);
  iso_worker_free(w);
}

static void test_web_apis(void **state) {
  (void)state;
  expect_body(
      "export default { fetch() {\n"
      "  const out = [];\n"
      "  const bytes = new TextEncoder().encode('h\\u00e9\\u20ac\\u{1F600}\\ud800');\n"
      "  out.push(bytes.length);\n"
      "  out.push(new TextDecoder().decode(bytes));\n"
      "  out.push(new TextDecoder().decode(new Uint8Array([0xEF, 0xBB, 0xBF, 0x41])));\n"
      "  try { new TextDecoder('utf-8', { fatal: true }).decode(new Uint8Array([0xC0, 0x80])); }\n"
      "  catch (e) { out.push(e.name); }\n"
      "  const rnd = crypto.getRandomValues(new Uint8Array(32));\n"
      "  out.push(rnd.some(b => b !== 0));\n"
      "  const c = structuredClone({ a: [1, 2], m: new Map([[1, 'x']]), d: new Date(0) });\n"
      "  out.push(c.a[1], c.m.get(1), c.d.getTime());\n"
      "  try { structuredClone(() => 1); } catch (e) { out.push(e.name); }\n"
      "  out.push(new Intl.NumberFormat('de-DE').format(1234.5));\n"
      "  return new Response(out.join('|'));\n"
      "} };",
      "/",
      "13|h\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xef\xbf\xbd|A|"
      "TypeError|true|2|x|0|DataCloneError|"
      "1.234,5");
}

static void test_utf8_decode(void **state) {
  (void)state;
  /* Invalid sequences become U+FFFD per maximal subpart, as the Encoding
   * Standard says; each case prints its code points. */
  expect_body("const cases = [[0x61, 0xF0, 0x90, 0x80, 0x62], [0xE0, 0x80], [0xED, 0xA0, 0x80],\n"
              "  [0xC0, 0xAF], [0xF4, 0x90, 0x80, 0x80], [0xEF, 0xBB, 0xBF, 0xEF, 0xBB, 0xBF]];\n"
              "export default { fetch() {\n"
              "  const out = cases.map(c => [...new TextDecoder().decode(new Uint8Array(c))]\n"
              "    .map(ch => ch.codePointAt(0).toString(16)).join(','));\n"
              "  return new Response(out.join(' '));\n"
              "} };",
              "/", "61,fffd,62 fffd,fffd fffd,fffd,fffd fffd,fffd fffd,fffd,fffd,fffd feff");
}

static void test_cpu_limit(void **state) {
  (void)state;
  rec r = {0};
  iso_limits limits = {0, 50};
  iso_worker *w = load_ok(&r,
                          "export default { fetch(req) {\n"
                          "  if (req.url.endsWith('/loop')) while (true) {}\n"
                          "  return new Response('ok');\n"
                          "} };",
                          &limits);
  uint64_t t0 = time_mono_ns(), cpu0 = time_thread_cpu_ns();
  assert_int_equal(get(w, 1, "/loop"), 0);
  uint64_t took = time_mono_ns() - t0, cpu = time_thread_cpu_ns() - cpu0;
  assert_int_equal(r.req[1].responded, 1);
  assert_int_equal(r.req[1].done, 1);
  assert_int_equal(r.req[1].kind, ISO_ERR_CPU);
  assert_string_equal(r.req[1].message, "exceeded CPU limit");
  assert_true(took >= 50000000u);
  assert_true(cpu >= 50000000u);
  print_message("  while(true) stopped after %.1f ms (%.1f ms cpu)\n", (double)took / 1e6,
                (double)cpu / 1e6);
  assert_false(iso_worker_broken(w));
  /* Reusable afterwards, again and again. */
  assert_int_equal(get(w, 2, "/"), 0);
  assert_int_equal(r.req[2].kind, ISO_OK);
  assert_string_equal(r.req[2].body, "ok");
  assert_int_equal(get(w, 3, "/loop"), 0);
  assert_int_equal(r.req[3].kind, ISO_ERR_CPU);
  assert_int_equal(get(w, 4, "/"), 0);
  assert_string_equal(r.req[4].body, "ok");
  assert_int_equal(iso_worker_pending(w), 0);
  iso_worker_free(w);
}

static void test_cpu_limit_async_and_timer(void **state) {
  (void)state;
  rec r = {0};
  iso_limits limits = {0, 30};
  iso_worker *w = load_ok(&r,
                          "export default { async fetch(req) {\n"
                          "  await null;\n"
                          "  if (req.url.endsWith('/timer'))\n"
                          "    return new Promise(() => setTimeout(() => { for (;;) {} }, 1));\n"
                          "  for (;;) {}\n"
                          "} };",
                          &limits);
  assert_int_equal(get(w, 1, "/micro"), 0);
  assert_int_equal(r.req[1].kind, ISO_ERR_CPU);
  assert_int_equal(r.req[1].done, 1);
  assert_int_equal(get(w, 2, "/timer"), 0);
  assert_int_equal(r.req[2].responded, 0);
  run_timers(&r, w);
  assert_int_equal(r.req[2].kind, ISO_ERR_CPU);
  assert_int_equal(r.req[2].done, 1);
  assert_int_equal(iso_worker_pending(w), 0);
  iso_worker_free(w);
}

static void test_cpu_limit_in_checkpoint(void **state) {
  (void)state;
  /* Requests 1 and 2 wait for the same promise; request 3's timer settles it
   * and request 1 then loops. The CPU goes to request 1, not to request 3
   * whose timer the host fired. V8 drops the queued continuations when it
   * terminates a checkpoint, so request 2 can never finish: it fails too. */
  rec r = {0};
  iso_limits limits = {0, 30};
  iso_worker *w = load_ok(&r,
                          "let wake; const gate = new Promise(ok => { wake = ok; });\n"
                          "export default { async fetch(req, env, ctx) {\n"
                          "  if (req.url.endsWith('/open')) {\n"
                          "    ctx.waitUntil(new Promise(ok => setTimeout(() => { wake(); ok(); }, 1)));\n"
                          "    return new Response('opened');\n"
                          "  }\n"
                          "  await gate;\n"
                          "  if (req.url.endsWith('/loop')) for (;;) {}\n"
                          "  return new Response('passed');\n"
                          "} };",
                          &limits);
  assert_int_equal(get(w, 1, "/loop"), 0);
  assert_int_equal(get(w, 2, "/wait"), 0);
  assert_int_equal(get(w, 3, "/open"), 0);
  assert_string_equal(r.req[3].body, "opened");
  assert_int_equal(r.req[3].done, 0);
  run_timers(&r, w);
  assert_int_equal(r.req[1].kind, ISO_ERR_CPU);
  assert_string_equal(r.req[1].message, "exceeded CPU limit");
  assert_int_equal(r.req[2].kind, ISO_ERR_CPU);
  assert_int_equal(r.req[2].done, 1);
  assert_int_equal(r.req[3].kind, ISO_OK);
  assert_int_equal(r.req[3].done, 1);
  assert_int_equal(iso_worker_pending(w), 0);
  /* The worker itself carries on. */
  assert_int_equal(get(w, 4, "/wait"), 0);
  assert_string_equal(r.req[4].body, "passed");
  iso_worker_free(w);
}

static void test_cpu_limit_at_load(void **state) {
  (void)state;
  rec r = {0};
  iso_limits limits = {0, 20};
  iso_error err = {0};
  assert_null(load(&r, "for (;;) {}\nexport default { fetch() {} };", &limits, &err));
  assert_int_equal(err.kind, ISO_ERR_CPU);
  assert_string_equal(err.message, "exceeded CPU limit");
  iso_error_clear(&err);
}

static void test_sleeping_is_not_cpu(void **state) {
  (void)state;
  /* A host callback that blocks (here: a slow log sink) does not use the
   * thread's CPU time, so it does not count against the limit. */
  rec r = {0};
  iso_limits limits = {0, 20};
  iso_worker *w = load_ok(&r,
                          "export default { fetch() {\n"
                          "  for (let i = 0; i < 5; i++) console.log('tick');\n"
                          "  return new Response('ok');\n"
                          "} };",
                          &limits);
  r.log_sleep_ms = 15;
  uint64_t t0 = time_mono_ns();
  assert_int_equal(get(w, 1, "/"), 0);
  assert_true(time_mono_ns() - t0 >= 75000000u);
  assert_int_equal(r.req[1].kind, ISO_OK);
  assert_string_equal(r.req[1].body, "ok");
  iso_worker_free(w);
}

static void test_memory_limit(void **state) {
  (void)state;
  rec r = {0};
  iso_limits limits = {32, 1000};
  iso_worker *w = load_ok(&r,
                          "export default { fetch(req) {\n"
                          "  if (req.url.endsWith('/wait')) return new Promise(() => {});\n"
                          "  const keep = [];\n"
                          "  for (;;) keep.push({ a: [1.5, 2.5, 3.5], s: 'x' + keep.length });\n"
                          "} };",
                          &limits);
  assert_int_equal(get(w, 1, "/wait"), 0);
  assert_int_equal(iso_worker_pending(w), 1);
  uint64_t t0 = time_mono_ns(), cpu0 = time_thread_cpu_ns();
  assert_int_equal(get(w, 2, "/bomb"), 0);
  print_message("  heap bomb stopped after %.1f ms (%.1f ms cpu)\n",
                (double)(time_mono_ns() - t0) / 1e6, (double)(time_thread_cpu_ns() - cpu0) / 1e6);
  assert_int_equal(r.req[2].kind, ISO_ERR_MEMORY);
  assert_string_equal(r.req[2].message, "exceeded memory limit");
  assert_int_equal(r.req[2].done, 1);
  /* The other request is failed too, so the host can free the worker. */
  assert_int_equal(r.req[1].kind, ISO_ERR_MEMORY);
  assert_int_equal(r.req[1].done, 1);
  assert_int_equal(iso_worker_pending(w), 0);
  assert_true(iso_worker_broken(w));
  assert_int_equal(get(w, 3, "/"), -1);
  assert_int_equal(r.req[3].responded, 0);
  iso_worker_free(w);
}

static void test_array_buffer_limit(void **state) {
  (void)state;
  rec r = {0};
  iso_limits limits = {32, 0};
  iso_worker *w = load_ok(&r,
                          "export default { fetch() {\n"
                          "  const keep = [];\n"
                          "  try { for (let i = 0; i < 100; i++) keep.push(new ArrayBuffer(8 << 20)); }\n"
                          "  catch (e) { return new Response(`${e.name} after ${keep.length}`); }\n"
                          "  return new Response('no limit');\n"
                          "} };",
                          &limits);
  assert_int_equal(get(w, 1, "/"), 0);
  assert_int_equal(r.req[1].kind, ISO_OK);
  /* Four 8 MiB buffers fill 32 MiB, less what the runtime holds itself. */
  assert_true(strcmp(r.req[1].body, "RangeError after 3") == 0 ||
              strcmp(r.req[1].body, "RangeError after 4") == 0);
  assert_false(iso_worker_broken(w));
  iso_worker_free(w);

  /* Native allocations (TextEncoder) get the same RangeError instead of aborting. */
  memset(&r, 0, sizeof(r));
  w = load_ok(&r,
              "export default { fetch() {\n"
              "  const big = new ArrayBuffer(30 << 20);\n"
              "  try { new TextEncoder().encode('x'.repeat(4 << 20)); }\n"
              "  catch (e) { return new Response(e.name + big.byteLength); }\n"
              "  return new Response('no limit');\n"
              "} };",
              &limits);
  assert_int_equal(get(w, 1, "/"), 0);
  assert_string_equal(r.req[1].body, "RangeError31457280");
  iso_worker_free(w);
}

static void test_deep_recursion(void **state) {
  (void)state;
  expect_body("function f(n) { return f(n + 1) + 1; }\n"
              "export default { fetch() {\n"
              "  try { f(0); } catch (e) { return new Response(`${e.name}: ${e.message}`); }\n"
              "} };",
              "/", "RangeError: Maximum call stack size exceeded");
  /* Native recursion (the serialiser, JSON) hits the same limit. */
  expect_body("export default { fetch() {\n"
              "  let deep = [];\n"
              "  for (let i = 0; i < 100000; i++) deep = [deep];\n"
              "  const out = [];\n"
              "  try { structuredClone(deep); } catch (e) { out.push(e.name); }\n"
              "  try { JSON.stringify(deep); } catch (e) { out.push(e.name); }\n"
              "  return new Response(out.join(' '));\n"
              "} };",
              "/", "RangeError RangeError");
}

static void test_free_in_callback(void **state) {
  (void)state;
  rec r = {0};
  iso_worker *w = load_ok(&r, hello, NULL);
  r.free_on_done = w;
  assert_int_equal(get(w, 1, "/"), 0);
  assert_int_equal(r.req[1].done, 1);
  assert_null(r.free_on_done); /* freed, once the call returned */
}

static void test_refused_timer(void **state) {
  (void)state;
  rec r = {0};
  r.refuse_timers = 1;
  iso_worker *w = load_ok(&r,
                          "export default { fetch() {\n"
                          "  try { setTimeout(() => {}, 1); } catch (e) { return new Response('refused'); }\n"
                          "  return new Response('accepted');\n"
                          "} };",
                          NULL);
  assert_int_equal(get(w, 1, "/"), 0);
  assert_string_equal(r.req[1].body, "refused");
  iso_worker_free(w);
}

static void test_misuse(void **state) {
  (void)state;
  rec r = {0};
  iso_worker *w = load_ok(&r, "export default { fetch() { return new Promise(() => {}); } };", NULL);
  assert_int_equal(get(w, 1, "/"), 0);
  assert_int_equal(get(w, 1, "/"), -1); /* token already pending */
  assert_int_equal(get(w, 1ull << 53, "/"), -1);
  assert_int_equal(iso_worker_pending(w), 1);
  iso_worker_free(w); /* with a request pending: no callbacks */
  assert_int_equal(r.req[1].responded, 0);

  iso_error err = {0};
  iso_host no_respond = {0};
  iso_module m = {"index.js", hello, strlen(hello)};
  assert_null(iso_worker_new(&no_respond, NULL, &m, 1, "index.js", NULL, &err));
  assert_int_equal(err.kind, ISO_ERR_INTERNAL);
  iso_error_clear(&err);
  assert_null(load_modules(&r, &m, 1, "index.js", NULL, "{not json", &err));
  assert_int_equal(err.kind, ISO_ERR_INTERNAL);
  iso_error_clear(&err);
}

static void test_heap_stats(void **state) {
  (void)state;
  rec r = {0};
  iso_limits limits = {64, 0};
  iso_worker *w = load_ok(&r, hello, &limits);
  iso_heap_stats hs = {0};
  iso_worker_heap_stats(w, &hs);
  assert_true(hs.used_bytes > 0);
  assert_true(hs.total_bytes >= hs.used_bytes);
  assert_true(hs.limit_bytes >= 32u << 20 && hs.limit_bytes <= 128u << 20);
  print_message("  heap: used %zu KiB, total %zu KiB, limit %zu MiB\n", hs.used_bytes >> 10,
                hs.total_bytes >> 10, hs.limit_bytes >> 20);
  iso_worker_free(w);
}

static void test_validate(void **state) {
  (void)state;
  iso_module m = {"index.js", hello, strlen(hello)};
  iso_error err = {0};
  assert_int_equal(iso_validate(NULL, &m, 1, "index.js", &err), 0);
  assert_int_equal(err.kind, ISO_OK);
}

/* Not a pass/fail test: prints what a worker and a request cost. */
static void test_costs(void **state) {
  (void)state;
  rec r = {0};
  enum { CREATES = 50, REQUESTS = 100000 };
  /* A process always has other isolates alive: V8 then keeps the shared
   * read-only heap instead of rebuilding it for each new isolate. */
  iso_worker *other = load_ok(&r, hello, NULL);
  uint64_t t0 = time_mono_ns(), cpu0 = time_thread_cpu_ns();
  for (int i = 0; i < CREATES; i++)
    iso_worker_free(load_ok(&r, hello, NULL));
  uint64_t create_ns = (time_mono_ns() - t0) / CREATES;
  uint64_t create_cpu = (time_thread_cpu_ns() - cpu0) / CREATES;

  iso_worker *w = load_ok(&r, hello, NULL);
  iso_header h[] = {{"host", 4, "test.localhost", 14}, {"user-agent", 10, "bench", 5},
                    {"accept", 6, "*/*", 3}};
  char url[] = "http://test.localhost/";
  iso_request req = {"GET", 3, url, strlen(url), h, 3, NULL, 0};
  for (int i = 0; i < 1000; i++) {
    memset(&r.req[1], 0, sizeof(r.req[1]));
    assert_int_equal(iso_worker_dispatch(w, 1, &req), 0);
  }
  t0 = time_mono_ns();
  cpu0 = time_thread_cpu_ns();
  for (int i = 0; i < REQUESTS; i++) {
    r.req[1].responded = r.req[1].done = 0;
    iso_worker_dispatch(w, 1, &req);
  }
  uint64_t wall = time_mono_ns() - t0, cpu = time_thread_cpu_ns() - cpu0;
  assert_string_equal(r.req[1].body, "hi");
  print_message("  worker create+load+free: %.2f ms wall, %.2f ms cpu; hello dispatch: %.2f us "
                "wall, %.2f us cpu (%.0f/s)\n",
                (double)create_ns / 1e6, (double)create_cpu / 1e6, (double)wall / REQUESTS / 1e3,
                (double)cpu / REQUESTS / 1e3, REQUESTS / ((double)wall / 1e9));
  iso_worker_free(w);
  iso_worker_free(other);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_version),
      cmocka_unit_test(test_hello),
      cmocka_unit_test(test_async_hello),
      cmocka_unit_test(test_request_fields),
      cmocka_unit_test(test_bytes_body),
      cmocka_unit_test(test_env),
      cmocka_unit_test(test_modules),
      cmocka_unit_test(test_dynamic_import),
      cmocka_unit_test(test_link_error),
      cmocka_unit_test(test_syntax_error),
      cmocka_unit_test(test_no_handler),
      cmocka_unit_test(test_top_level),
      cmocka_unit_test(test_thrown),
      cmocka_unit_test(test_thrown_by_runtime),
      cmocka_unit_test(test_thrown_non_error),
      cmocka_unit_test(test_rejected),
      cmocka_unit_test(test_bad_return),
      cmocka_unit_test(test_eval),
      cmocka_unit_test(test_wasm_and_atomics_disallowed),
      cmocka_unit_test(test_timers),
      cmocka_unit_test(test_wait_until),
      cmocka_unit_test(test_console),
      cmocka_unit_test(test_console_in_continuation),
      cmocka_unit_test(test_web_apis),
      cmocka_unit_test(test_utf8_decode),
      cmocka_unit_test(test_cpu_limit),
      cmocka_unit_test(test_cpu_limit_async_and_timer),
      cmocka_unit_test(test_cpu_limit_in_checkpoint),
      cmocka_unit_test(test_cpu_limit_at_load),
      cmocka_unit_test(test_sleeping_is_not_cpu),
      cmocka_unit_test(test_memory_limit),
      cmocka_unit_test(test_array_buffer_limit),
      cmocka_unit_test(test_deep_recursion),
      cmocka_unit_test(test_free_in_callback),
      cmocka_unit_test(test_refused_timer),
      cmocka_unit_test(test_misuse),
      cmocka_unit_test(test_heap_stats),
      cmocka_unit_test(test_validate),
      cmocka_unit_test(test_costs),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
