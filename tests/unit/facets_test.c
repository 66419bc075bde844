/*
 * Unit tests for facets/: facet_call driven directly with wire-encoded
 * arguments, as the runtime's facet binding sends them; containment; the
 * size limit and the CPU deadline; names and paths; two processes writing
 * one facet at once; the operators' functions.
 *
 * `facets_test --bench [DIR]` instead measures facet_call throughput,
 * `facets_test --bench-js` env.DB.exec in an isolate without HTTP
 * (tests/bench/facets.sh runs both), and `facets_test --bench-replicate
 * [DIR]` what capturing commits for replication costs.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>
#include <sqlite3.h>

#include "base.h"
#include "facets.h"
#include "isolate.h"

/* ---- decoded wire values ------------------------------------------------ */

typedef struct tv {
  uint8_t type;
  double num;
  int64_t big;
  char *str;         /* strings and bytes, NUL-terminated copy */
  size_t len;
  struct tv *items;  /* arrays: count items; objects: key, value pairs */
  uint32_t count;
} tv;

static int tv_read(iso_wire_reader *r, tv *out, int depth) {
  iso_wire_value v;
  memset(out, 0, sizeof *out);
  if (depth > 64 || iso_wire_next(r, &v) != 1) return -1;
  out->type = v.type;
  out->num = v.number;
  out->big = v.bigint;
  if (v.type == ISO_WIRE_STRING || v.type == ISO_WIRE_BYTES) {
    out->str = xstrndup(v.ptr ? v.ptr : "", v.len);
    out->len = v.len;
  } else if (v.type == ISO_WIRE_ARRAY || v.type == ISO_WIRE_OBJECT) {
    uint32_t n = v.type == ISO_WIRE_OBJECT ? v.count * 2 : v.count;
    out->count = v.count;
    out->items = xcalloc(n ? n : 1, sizeof *out->items);
    for (uint32_t i = 0; i < n; i++)
      if (tv_read(r, &out->items[i], depth + 1) != 0) return -1;
  }
  return 0;
}

static void tv_clear(tv *t) {
  uint32_t n = t->type == ISO_WIRE_OBJECT ? t->count * 2 : t->count;
  for (uint32_t i = 0; t->items && i < n; i++) tv_clear(&t->items[i]);
  free(t->items);
  free(t->str);
}

static void tv_free(tv *t) {
  if (t == NULL) return;
  tv_clear(t);
  free(t);
}

static tv *tv_decode(const iso_wire *w) {
  iso_wire_reader r;
  iso_wire_reader_init(&r, w->data, w->len);
  tv *t = xcalloc(1, sizeof *t);
  assert_int_equal(tv_read(&r, t, 0), 0);
  assert_true(r.pos == r.end);
  return t;
}

/* An object's member, or NULL. */
static const tv *tv_get(const tv *o, const char *key) {
  if (o->type != ISO_WIRE_OBJECT) return NULL;
  for (uint32_t i = 0; i < o->count; i++)
    if (strcmp(o->items[2 * i].str, key) == 0) return &o->items[2 * i + 1];
  return NULL;
}

/* exec results: [n, n column names, values row-major, rowsRead,
 * rowsWritten], or only [rowsRead, rowsWritten] when the last statement has
 * no columns */
static uint32_t ncols(const tv *res) { return res->count == 2 ? 0 : (uint32_t)res->items[0].num; }
static double rows_read(const tv *res) { return res->items[res->count - 2].num; }
static double rows_written(const tv *res) { return res->items[res->count - 1].num; }
static const char *column(const tv *res, uint32_t col) {
  assert_true(col < ncols(res));
  return res->items[1 + col].str;
}
static uint32_t nrows(const tv *res) {
  return ncols(res) ? (res->count - 3 - ncols(res)) / ncols(res) : 0;
}
static const tv *cell(const tv *res, uint32_t row, uint32_t col) {
  assert_true(row < nrows(res) && col < ncols(res));
  return &res->items[1 + ncols(res) + row * ncols(res) + col];
}
static double num(const tv *res, uint32_t row, uint32_t col) {
  const tv *c = cell(res, row, col);
  assert_int_equal(c->type, ISO_WIRE_NUMBER);
  return c->num;
}
static const char *text(const tv *res, uint32_t row, uint32_t col) {
  const tv *c = cell(res, row, col);
  assert_int_equal(c->type, ISO_WIRE_STRING);
  return c->str;
}

/* ---- calling the store -------------------------------------------------- */

typedef struct fx {
  char dir[256];
  facet_store *s;
  const char *tenant;
  const char *facet_id;
  uint64_t token;
  uint64_t limit_mb;
  uint64_t deadline;
  facet_ref *ref; /* the connection memo exec_decoded passes (NULL: a new one each call) */
} fx;

static int call_op(fx *f, const char *op, const iso_wire *args, tv **out) {
  iso_call call = {.token = f->token, .binding = "DB", .op = op,
                   .args = args->data, .args_len = args->len};
  iso_wire res;
  iso_wire_init(&res);
  int rc = facet_call(f->s, f->tenant, f->facet_id, f->limit_mb, &call, f->deadline, &res);
  *out = tv_decode(&res);
  iso_wire_free(&res);
  return rc;
}

/*
 * Encodes [sql, params...]; fmt has one letter per parameter:
 * n null, u undefined, t true, f false, d double, I int64 (BigInt),
 * s string, b bytes (pointer, size_t), A an array, O an object.
 */
static void encode_exec(iso_wire *w, const char *sql, const char *fmt, va_list ap) {
  iso_wire_array(w, (uint32_t)(1 + strlen(fmt)));
  iso_wire_string(w, sql, strlen(sql));
  for (const char *p = fmt; *p; p++) {
    switch (*p) {
      case 'n': iso_wire_null(w); break;
      case 'u': iso_wire_undefined(w); break;
      case 't': iso_wire_bool(w, 1); break;
      case 'f': iso_wire_bool(w, 0); break;
      case 'd': iso_wire_number(w, va_arg(ap, double)); break;
      case 'I': iso_wire_bigint(w, va_arg(ap, int64_t)); break;
      case 's': {
        const char *s = va_arg(ap, const char *);
        iso_wire_string(w, s, strlen(s));
        break;
      }
      case 'b': {
        const void *b = va_arg(ap, const void *);
        size_t n = va_arg(ap, size_t);
        iso_wire_bytes(w, b, n);
        break;
      }
      case 'A': iso_wire_array(w, 1); iso_wire_number(w, 1); break;
      case 'O': iso_wire_object(w, 1); iso_wire_string(w, "k", 1); iso_wire_null(w); break;
      default: fail_msg("bad format letter %c", *p);
    }
  }
}

static int exec_v(fx *f, tv **out, const char *sql, const char *fmt, va_list ap) {
  iso_wire args;
  iso_wire_init(&args);
  encode_exec(&args, sql, fmt, ap);
  int rc = call_op(f, "exec", &args, out);
  iso_wire_free(&args);
  return rc;
}

/* Runs SQL that must succeed; returns the result (caller frees). */
static tv *ok(fx *f, const char *sql, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  tv *res;
  int rc = exec_v(f, &res, sql, fmt, ap);
  va_end(ap);
  if (rc != 0) {
    const tv *m = tv_get(res, "message");
    fail_msg("%s: %s", sql, m ? m->str : "?");
  }
  assert_int_equal(res->type, ISO_WIRE_ARRAY);
  assert_true(res->count >= 2);
  if (res->count > 2) {
    assert_int_equal(res->items[0].type, ISO_WIRE_NUMBER);
    assert_true(ncols(res) > 0 && (res->count - 3 - ncols(res)) % ncols(res) == 0);
  }
  return res;
}

static void run(fx *f, const char *sql) { tv_free(ok(f, sql, "")); }

/* Runs SQL that must fail; returns "Name: message" (caller frees). */
static char *err(fx *f, const char *sql, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  tv *res;
  int rc = exec_v(f, &res, sql, fmt, ap);
  va_end(ap);
  if (rc != -1) fail_msg("%s: succeeded, expected an error", sql);
  const tv *name = tv_get(res, "name"), *msg = tv_get(res, "message");
  assert_non_null(name);
  assert_non_null(msg);
  char *s = xasprintf("%s: %s", name->str, msg->str);
  tv_free(res);
  return s;
}

static void expect_err(fx *f, const char *sql, const char *want) {
  char *e = err(f, sql, "");
  /* (An empty `want` accepts any error; tested first, or an optimising
   * compiler concludes e is NULL on the failing branch and warns.) */
  if (want[0] != '\0' && strstr(e, want) == NULL) fail_msg("%s: got \"%s\", expected \"%s\"", sql, e, want);
  free(e);
}

static int op0(fx *f, const char *op, tv **out) {
  iso_wire args;
  iso_wire_init(&args);
  iso_wire_array(&args, 0);
  int rc = call_op(f, op, &args, out);
  iso_wire_free(&args);
  return rc;
}

static void op_ok(fx *f, const char *op) {
  tv *res;
  int rc = op0(f, op, &res);
  if (rc != 0) {
    const tv *m = tv_get(res, "message");
    fail_msg("%s: %s", op, m ? m->str : "?");
  }
  tv_free(res);
}

static double count_rows(fx *f, const char *table) {
  char *sql = xasprintf("SELECT count(*) AS n FROM %s", table);
  tv *res = ok(f, sql, "");
  double n = num(res, 0, 0);
  tv_free(res);
  free(sql);
  return n;
}

/* A fresh directory under $TMPDIR: prefix-XXXXXX. */
static int make_temp_dir(char *out, size_t size, const char *prefix) {
  const char *base = getenv("TMPDIR");
  snprintf(out, size, "%s/%s-XXXXXX", base && *base ? base : "/tmp", prefix);
  return mkdtemp(out) == NULL ? -1 : 0;
}

static int setup(void **state) {
  fx *f = xcalloc(1, sizeof *f);
  if (make_temp_dir(f->dir, sizeof f->dir, "facets-test") != 0) return -1;
  f->s = facet_store_new(f->dir, NULL);
  if (f->s == NULL) return -1;
  f->tenant = "alpha";
  f->token = 1;
  *state = f;
  return 0;
}

static void rm_rf(const char *dir) {
  char *cmd = xasprintf("rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  free(cmd);
}

static int teardown(void **state) {
  fx *f = *state;
  facet_store_free(f->s);
  rm_rf(f->dir);
  free(f);
  return 0;
}

/* The fixture's store closed and opened again on the same directory. */
static void reopen_store(fx *f, const facet_options *o) {
  facet_store_free(f->s);
  f->s = facet_store_new(f->dir, o);
  assert_non_null(f->s);
}

/* Opens a facet file directly, as an operator's sqlite3 would. */
static sqlite3 *open_raw(fx *f, const char *tenant) {
  char *path = facet_path(f->dir, tenant, NULL);
  sqlite3 *db = NULL;
  assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
  sqlite3_busy_timeout(db, 5000);
  free(path);
  return db;
}

static char *raw_text(sqlite3 *db, const char *sql) {
  sqlite3_stmt *st = NULL;
  assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
  assert_int_equal(sqlite3_step(st), SQLITE_ROW);
  char *s = xstrdup((const char *)sqlite3_column_text(st, 0));
  sqlite3_finalize(st);
  return s;
}

static void expect_raw(sqlite3 *db, const char *sql, const char *want) {
  char *got = raw_text(db, sql);
  assert_string_equal(got, want);
  free(got);
}

/* ---- types -------------------------------------------------------------- */

static void test_types_in_and_out(void **state) {
  fx *f = *state;
  run(f, "CREATE TABLE t (k INTEGER PRIMARY KEY, v)");
  const uint8_t blob[] = {0, 1, 2, 0xff};
  int64_t big = INT64_C(9007199254740993); /* 2^53 + 1 */
  tv_free(ok(f, "INSERT INTO t VALUES (1, ?), (2, ?), (3, ?), (4, ?)", "ndds", 42.0, 1.5,
             "héllo"));
  tv_free(ok(f, "INSERT INTO t VALUES (5, ?), (6, ?), (7, ?), (8, ?), (9, ?)", "tfIbu", big,
             blob, sizeof blob));
  tv_free(ok(f, "INSERT INTO t VALUES (10, ?), (11, ?), (12, ?)", "Ibs", (int64_t)-5,
             (const void *)"", (size_t)0, ""));
  tv *res = ok(f, "SELECT k, v, typeof(v) AS type FROM t ORDER BY k", "");
  assert_int_equal(ncols(res), 3);
  assert_string_equal(column(res, 0), "k");
  assert_string_equal(column(res, 2), "type");
  assert_int_equal(nrows(res), 12);
  /* null, whole number as INTEGER, fraction as REAL, text */
  assert_int_equal(cell(res, 0, 1)->type, ISO_WIRE_NULL);
  assert_true(num(res, 1, 1) == 42.0);
  assert_string_equal(text(res, 1, 2), "integer");
  assert_true(num(res, 2, 1) == 1.5);
  assert_string_equal(text(res, 2, 2), "real");
  assert_string_equal(text(res, 3, 1), "héllo");
  /* booleans are 0 / 1 */
  assert_true(num(res, 4, 1) == 1);
  assert_true(num(res, 5, 1) == 0);
  /* beyond 2^53: BigInt */
  assert_int_equal(cell(res, 6, 1)->type, ISO_WIRE_BIGINT);
  assert_true(cell(res, 6, 1)->big == big);
  /* BLOB out as bytes */
  assert_int_equal(cell(res, 7, 1)->type, ISO_WIRE_BYTES);
  assert_int_equal(cell(res, 7, 1)->len, sizeof blob);
  assert_memory_equal(cell(res, 7, 1)->str, blob, sizeof blob);
  /* undefined binds as NULL */
  assert_int_equal(cell(res, 8, 1)->type, ISO_WIRE_NULL);
  /* a small BigInt comes back as a number */
  assert_true(num(res, 9, 1) == -5);
  assert_string_equal(text(res, 9, 2), "integer");
  assert_int_equal(cell(res, 10, 1)->type, ISO_WIRE_BYTES);
  assert_int_equal(cell(res, 10, 1)->len, 0);
  assert_string_equal(text(res, 11, 1), "");
  tv_free(res);

  /* the edges of the safe range, and of int64 */
  res = ok(f, "SELECT 9007199254740991 AS a, -9007199254740991 AS b, 9007199254740992 AS c, "
              "-9223372036854775808 AS d, 1e300 AS e", "");
  assert_true(num(res, 0, 0) == 9007199254740991.0);
  assert_true(num(res, 0, 1) == -9007199254740991.0);
  assert_int_equal(cell(res, 0, 2)->type, ISO_WIRE_BIGINT);
  assert_true(cell(res, 0, 3)->big == INT64_MIN);
  assert_true(num(res, 0, 4) == 1e300);
  tv_free(res);
}

static void test_unsupported_parameters(void **state) {
  fx *f = *state;
  char *e = err(f, "SELECT ?, ?", "nA");
  assert_string_equal(e, "TypeError: parameter 2 has unsupported type array");
  free(e);
  e = err(f, "SELECT ?", "O");
  assert_string_equal(e, "TypeError: parameter 1 has unsupported type object");
  free(e);
  /* the wrong number of parameters */
  e = err(f, "SELECT ?, ?", "n");
  assert_non_null(strstr(e, "Wrong number of parameter bindings"));
  free(e);
  e = err(f, "SELECT 1", "n");
  assert_non_null(strstr(e, "Wrong number of parameter bindings"));
  free(e);
  /* no SQL text at all: neither a string nor a statement id */
  tv *res;
  iso_wire args;
  const double not_ids[] = {0, -1, 1.5, 1e300, NAN};
  for (size_t i = 0; i < ARRAY_SIZE(not_ids) + 1; i++) {
    iso_wire_init(&args);
    iso_wire_array(&args, 1);
    if (i < ARRAY_SIZE(not_ids))
      iso_wire_number(&args, not_ids[i]);
    else
      iso_wire_bool(&args, 1);
    assert_int_equal(call_op(f, "exec", &args, &res), -1);
    assert_string_equal(tv_get(res, "name")->str, "TypeError");
    tv_free(res);
    iso_wire_free(&args);
  }
  /* malformed input */
  iso_wire_init(&args);
  iso_wire_array(&args, 3);
  iso_wire_string(&args, "SELECT ?", 8);
  assert_int_equal(call_op(f, "exec", &args, &res), -1);
  assert_string_equal(tv_get(res, "name")->str, "TypeError");
  tv_free(res);
  iso_wire_free(&args);
  /* an unknown operation */
  assert_int_equal(op0(f, "drop_everything", &res), -1);
  assert_string_equal(tv_get(res, "name")->str, "TypeError");
  tv_free(res);
}

/* ---- statements --------------------------------------------------------- */

static void test_sql_errors_have_no_effect(void **state) {
  fx *f = *state;
  run(f, "CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT NOT NULL)");
  run(f, "INSERT INTO t VALUES (1, 'a')");
  char *e = err(f, "SELEC 1", "");
  assert_string_equal(e, "Error: near \"SELEC\": syntax error: SQLITE_ERROR");
  free(e);
  expect_err(f, "SELECT * FROM nowhere", "no such table: nowhere");
  /* a multi-row insert failing half way leaves nothing behind */
  expect_err(f, "INSERT INTO t VALUES (2, 'b'), (3, 'c'), (1, 'dup')",
             "UNIQUE constraint failed: t.k: SQLITE_CONSTRAINT");
  expect_err(f, "INSERT INTO t VALUES (4, NULL)", "NOT NULL constraint failed");
  assert_true(count_rows(f, "t") == 1);
}

/* "prepare" [sql] -> id, or null / false; exec with [id, param...]. */
static int prepare_id(fx *f, const char *sql, tv **out) {
  iso_wire args;
  iso_wire_init(&args);
  iso_wire_array(&args, 1);
  iso_wire_string(&args, sql, strlen(sql));
  int rc = call_op(f, "prepare", &args, out);
  iso_wire_free(&args);
  return rc;
}

static tv *exec_id(fx *f, double id, const char *text) {
  iso_wire args;
  tv *res;
  iso_wire_init(&args);
  iso_wire_array(&args, 2);
  iso_wire_number(&args, id);
  iso_wire_string(&args, text, strlen(text));
  assert_int_equal(call_op(f, "exec", &args, &res), 0);
  iso_wire_free(&args);
  return res;
}

/* facet_exec: exec with its arguments decoded (no wire on the way in), and
 * a write's counts answered as numbers (none on the way out). */
static int exec_decoded(fx *f, const iso_wire_value *args, uint32_t n, iso_numbers *numbers,
                        tv **out) {
  iso_wire res;
  iso_wire_init(&res);
  facet_target t = {.tenant = f->tenant, .facet_id = f->facet_id, .limit_mb = f->limit_mb,
                    .token = f->token, .cpu_deadline_ns = f->deadline};
  if (f->ref != NULL) t.ref = *f->ref;
  int rc = facet_exec(f->s, &t, args, n, numbers, &res);
  if (f->ref != NULL) *f->ref = t.ref;
  *out = res.len > 0 ? tv_decode(&res) : NULL;
  iso_wire_free(&res);
  return rc;
}

static iso_wire_value text_value(const char *s) {
  return (iso_wire_value){.type = ISO_WIRE_STRING, .ptr = s, .len = strlen(s)};
}

/* One decoded exec of `sql` that must succeed. */
static void exec_decoded_ok(fx *f, const char *sql) {
  iso_wire_value args[] = {text_value(sql)};
  iso_numbers numbers;
  tv *res;
  assert_int_equal(exec_decoded(f, args, 1, &numbers, &res), 0);
  tv_free(res);
}

/* A caller's facet_ref skips the lookup by name only while the connection
 * it found is open: once that is evicted or closed, the next call finds
 * the facet by its name again, and never another tenant's. */
static void test_ref_follows_its_connection(void **state) {
  fx *f = *state;
  reopen_store(f, &(facet_options){.max_open = 1});
  facet_ref ref_a = {0}, ref_b = {0};
  for (int i = 0; i < 3; i++) {
    /* Room for one connection: each call evicts the other tenant's. */
    f->tenant = "ta";
    f->ref = &ref_a;
    exec_decoded_ok(f, "CREATE TABLE IF NOT EXISTS n (v); INSERT INTO n VALUES ('a')");
    f->tenant = "tb";
    f->ref = &ref_b;
    exec_decoded_ok(f, "CREATE TABLE IF NOT EXISTS n (v); INSERT INTO n VALUES ('b')");
    exec_decoded_ok(f, "INSERT INTO n VALUES ('b')");
  }
  assert_non_null(ref_a.conn);
  f->ref = NULL;
  f->tenant = "ta";
  assert_true(count_rows(f, "n") == 3);
  f->tenant = "tb";
  assert_true(count_rows(f, "n") == 6);
  /* Kept while open: the same connection, call after call. */
  f->ref = &ref_b;
  exec_decoded_ok(f, "INSERT INTO n VALUES ('b')");
  void *kept = ref_b.conn;
  exec_decoded_ok(f, "INSERT INTO n VALUES ('b')");
  assert_ptr_equal(ref_b.conn, kept);
  /* Closed: found again by name. */
  facet_store_close_tenant(f->s, "tb");
  exec_decoded_ok(f, "INSERT INTO n VALUES ('b')");
  f->ref = NULL;
  assert_true(count_rows(f, "n") == 9);
  f->tenant = "ta";
  assert_true(count_rows(f, "n") == 3);
}

static void test_exec_decoded(void **state) {
  fx *f = *state;
  run(f, "CREATE TABLE d (a TEXT UNIQUE, b)");
  iso_numbers numbers;
  tv *res;
  /* A write answers its counts as numbers, and nothing in the wire. */
  char value[16] = "first";
  iso_wire_value ins[] = {text_value("INSERT INTO d VALUES (?, ?)"), text_value(value),
                          {.type = ISO_WIRE_NUMBER, .number = 1.5}};
  assert_int_equal(exec_decoded(f, ins, 3, &numbers, &res), 0);
  assert_null(res);
  assert_int_equal(numbers.count, 2);
  assert_true(numbers.value[0] == 0 && numbers.value[1] == 1);
  /* The parameters' memory is the caller's only during the call: a second
   * exec of the (now cached) statement binds its own, and what it stored
   * stays when the caller's buffer is overwritten (read back below). */
  strcpy(value, "second");
  ins[1] = text_value(value);
  ins[2] = (iso_wire_value){.type = ISO_WIRE_TRUE};
  assert_int_equal(exec_decoded(f, ins, 3, &numbers, &res), 0);
  memset(value, 'x', sizeof value - 1);
  /* Without somewhere for numbers, the counts come as facet_call's do. */
  ins[1] = text_value("third");
  ins[2] = (iso_wire_value){.type = ISO_WIRE_NULL};
  assert_int_equal(exec_decoded(f, ins, 3, NULL, &res), 0);
  assert_int_equal(ncols(res), 0);
  assert_true(rows_written(res) == 1);
  tv_free(res);
  /* Rows come in the wire. */
  iso_wire_value sel[] = {text_value("SELECT a, b FROM d ORDER BY rowid")};
  assert_int_equal(exec_decoded(f, sel, 1, &numbers, &res), 0);
  assert_int_equal(numbers.count, 0);
  assert_int_equal(nrows(res), 3);
  assert_string_equal(text(res, 0, 0), "first");
  assert_true(num(res, 0, 1) == 1.5);
  assert_string_equal(text(res, 1, 0), "second");
  assert_true(num(res, 1, 1) == 1);
  assert_string_equal(text(res, 2, 0), "third");
  assert_int_equal(cell(res, 2, 1)->type, ISO_WIRE_NULL);
  tv_free(res);
  /* An empty string is '', even as a NULL pointer with no bytes; as the
   * SQL, it is no statement at all. */
  ins[1] = (iso_wire_value){.type = ISO_WIRE_STRING, .ptr = NULL, .len = 0};
  ins[2] = (iso_wire_value){.type = ISO_WIRE_NULL};
  assert_int_equal(exec_decoded(f, ins, 3, &numbers, &res), 0);
  iso_wire_value empty_sql[] = {{.type = ISO_WIRE_STRING, .ptr = NULL, .len = 0}};
  assert_int_equal(exec_decoded(f, empty_sql, 1, &numbers, &res), 0);
  assert_int_equal(numbers.count, 0);
  assert_int_equal(ncols(res), 0);
  assert_true(rows_read(res) == 0 && rows_written(res) == 0);
  tv_free(res);
  /* Errors: SQLite's, with nothing answered as numbers. */
  ins[1] = text_value("first");
  assert_int_equal(exec_decoded(f, ins, 3, &numbers, &res), -1);
  assert_int_equal(numbers.count, 0);
  assert_non_null(strstr(tv_get(res, "message")->str, "UNIQUE constraint failed"));
  tv_free(res);
  assert_true(count_rows(f, "d") == 4);
  assert_int_equal(exec_decoded(f, ins, 2, &numbers, &res), -1);
  assert_string_equal(tv_get(res, "message")->str,
                      "Wrong number of parameter bindings for SQL query.");
  tv_free(res);
  /* No SQL, or a number that is no statement id. */
  assert_int_equal(exec_decoded(f, ins, 0, &numbers, &res), -1);
  assert_string_equal(tv_get(res, "name")->str, "TypeError");
  tv_free(res);
  iso_wire_value bad[] = {{.type = ISO_WIRE_NUMBER, .number = 0.5}};
  assert_int_equal(exec_decoded(f, bad, 1, &numbers, &res), -1);
  assert_string_equal(tv_get(res, "name")->str, "TypeError");
  tv_free(res);
  /* A statement id: run by it, and null once it means nothing. */
  assert_int_equal(prepare_id(f, "INSERT INTO d (a) VALUES (?)", &res), 0);
  iso_wire_value by_id[] = {{.type = ISO_WIRE_NUMBER, .number = res->num}, text_value("fourth")};
  tv_free(res);
  assert_int_equal(exec_decoded(f, by_id, 2, &numbers, &res), 0);
  assert_null(res);
  assert_int_equal(numbers.count, 2);
  by_id[0].number += 1 << 5; /* the same slot, a later sequence number */
  assert_int_equal(exec_decoded(f, by_id, 2, &numbers, &res), 0);
  assert_int_equal(numbers.count, 0);
  assert_int_equal(res->type, ISO_WIRE_NULL);
  tv_free(res);
  assert_true(count_rows(f, "d") == 5);
  tv *empty = ok(f, "SELECT count(*) FROM d WHERE a = ''", "");
  assert_true(num(empty, 0, 0) == 1);
  tv_free(empty);
}

/* Statement ids: what exec runs when the runtime sends an id instead of the
 * text, and what it answers once the id means nothing (any more). */
static void test_statement_ids(void **state) {
  fx *f = *state;
  run(f, "CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)");
  tv *res;
  assert_int_equal(prepare_id(f, "INSERT INTO t (v) VALUES (?)", &res), 0);
  assert_int_equal(res->type, ISO_WIRE_NUMBER);
  double id = res->num;
  assert_true(id >= 1 && id == trunc(id));
  tv_free(res);
  /* the same text: the same id */
  assert_int_equal(prepare_id(f, "INSERT INTO t (v) VALUES (?)", &res), 0);
  assert_true(res->type == ISO_WIRE_NUMBER && res->num == id);
  tv_free(res);
  res = exec_id(f, id, "a");
  assert_int_equal(res->type, ISO_WIRE_ARRAY);
  assert_int_equal(res->count, 2);
  assert_true(res->items[1].num == 1); /* rowsWritten */
  tv_free(res);
  tv *rows = ok(f, "SELECT v FROM t", "");
  assert_int_equal(nrows(rows), 1);
  tv_free(rows);

  /* several statements, none (null), or SQL that does not compile (false):
   * no id */
  const struct {
    const char *sql;
    uint8_t answer;
  } no_id[] = {{"SELECT 1; SELECT 2", ISO_WIRE_NULL}, {" -- nothing", ISO_WIRE_NULL},
               {"SELECT * FROM missing", ISO_WIRE_FALSE}, {"ATTACH 'x.db' AS x", ISO_WIRE_FALSE}};
  for (size_t i = 0; i < ARRAY_SIZE(no_id); i++) {
    assert_int_equal(prepare_id(f, no_id[i].sql, &res), 0);
    assert_int_equal(res->type, no_id[i].answer);
    tv_free(res);
  }

  /* an id nobody gave, and one whose statement left the cache: null */
  res = exec_id(f, id + 1, "b");
  assert_int_equal(res->type, ISO_WIRE_NULL);
  tv_free(res);
  for (int i = 0; i < 64; i++) {
    char sql[64];
    snprintf(sql, sizeof sql, "SELECT %d", i);
    tv_free(ok(f, sql, ""));
  }
  res = exec_id(f, id, "c");
  assert_int_equal(res->type, ISO_WIRE_NULL);
  tv_free(res);
  rows = ok(f, "SELECT v FROM t", "");
  assert_int_equal(nrows(rows), 1); /* neither ran */
  tv_free(rows);

  /* ids belong to one facet: another tenant's connection knows none */
  assert_int_equal(prepare_id(f, "SELECT v FROM t", &res), 0);
  id = res->num;
  tv_free(res);
  const char *tenant = f->tenant;
  f->tenant = "other";
  res = exec_id(f, id, "x");
  assert_int_equal(res->type, ISO_WIRE_NULL);
  tv_free(res);
  f->tenant = tenant;
}

static void test_multiple_statements(void **state) {
  fx *f = *state;
  tv *res = ok(f, "CREATE TABLE m (v); INSERT INTO m VALUES (1); INSERT INTO m VALUES (2);"
                  " SELECT v FROM m WHERE v > ? ORDER BY v; -- the end\n", "d", 0.0);
  assert_int_equal(nrows(res), 2);
  assert_true(num(res, 1, 0) == 2);
  assert_true(rows_written(res) == 2); /* rowsWritten */
  tv_free(res);
  /* only the last statement's rows */
  res = ok(f, "SELECT 1 AS one; SELECT 2 AS two", "");
  assert_string_equal(column(res, 0), "two");
  assert_int_equal(nrows(res), 1);
  tv_free(res);
  /* a failure anywhere undoes every statement of the call */
  expect_err(f, "INSERT INTO m VALUES (3); INSERT INTO nowhere VALUES (4)", "no such table");
  assert_true(count_rows(f, "m") == 2);
  /* parameters only in the last one, and nothing runs otherwise */
  char *e = err(f, "INSERT INTO m VALUES (5); INSERT INTO m VALUES (?); SELECT 1", "d", 6.0);
  assert_non_null(strstr(e, "only the last statement can have parameters"));
  free(e);
  assert_true(count_rows(f, "m") == 2);
  /* nothing but blanks and comments: an empty cursor */
  res = ok(f, "  -- nothing\n /* at all */ ;", "");
  assert_int_equal(ncols(res), 0);
  assert_int_equal(res->count, 2);
  tv_free(res);
  res = ok(f, "", "");
  assert_int_equal(ncols(res), 0);
  tv_free(res);
  /* leading empty statements are skipped */
  res = ok(f, "; ; SELECT ? AS x", "s", "y");
  assert_string_equal(text(res, 0, 0), "y");
  tv_free(res);
  /* the same text again comes from the statement cache */
  for (int i = 0; i < 3; i++) {
    res = ok(f, "SELECT ? AS x", "d", (double)i);
    assert_true(num(res, 0, 0) == i);
    tv_free(res);
  }
}

static void test_rows_read_and_written(void **state) {
  fx *f = *state;
  run(f, "CREATE TABLE c (k INTEGER PRIMARY KEY, v)");
  tv *res = ok(f, "INSERT INTO c (v) VALUES (1), (2), (3)", "");
  assert_true(rows_written(res) == 3);
  assert_int_equal(ncols(res), 0);
  tv_free(res);
  res = ok(f, "UPDATE c SET v = v + 1 WHERE k >= 2", "");
  assert_true(rows_written(res) == 2);
  tv_free(res);
  res = ok(f, "SELECT v FROM c WHERE v > 0", "");
  assert_int_equal(nrows(res), 3);
  assert_true(rows_read(res) >= 3);
  assert_true(rows_written(res) == 0);
  tv_free(res);
  res = ok(f, "DELETE FROM c WHERE k = 1 RETURNING v", "");
  assert_int_equal(nrows(res), 1);
  assert_true(rows_written(res) == 1);
  tv_free(res);
}

/* ---- transactions ------------------------------------------------------- */

static void test_transactions(void **state) {
  fx *f = *state;
  run(f, "CREATE TABLE x (v)");
  /* commit keeps */
  op_ok(f, "begin");
  run(f, "INSERT INTO x VALUES (1)");
  op_ok(f, "commit");
  /* rollback drops */
  op_ok(f, "begin");
  run(f, "INSERT INTO x VALUES (2)");
  assert_true(count_rows(f, "x") == 2);
  op_ok(f, "rollback");
  assert_true(count_rows(f, "x") == 1);
  /* nested: the inner level rolls back alone */
  op_ok(f, "begin");
  run(f, "INSERT INTO x VALUES (3)");
  op_ok(f, "begin");
  run(f, "INSERT INTO x VALUES (4)");
  op_ok(f, "rollback");
  op_ok(f, "begin");
  run(f, "INSERT INTO x VALUES (5); INSERT INTO x VALUES (6)");
  op_ok(f, "commit");
  op_ok(f, "commit");
  tv *res = ok(f, "SELECT group_concat(v) AS g FROM (SELECT v FROM x ORDER BY v)", "");
  assert_string_equal(text(res, 0, 0), "1,3,5,6");
  tv_free(res);
  /* a failed multi-statement exec inside a transaction undoes only itself */
  op_ok(f, "begin");
  run(f, "INSERT INTO x VALUES (7)");
  expect_err(f, "INSERT INTO x VALUES (8); SELECT * FROM nowhere", "no such table");
  op_ok(f, "commit");
  assert_true(count_rows(f, "x") == 5);
  /* commit or rollback without a transaction */
  tv *e;
  assert_int_equal(op0(f, "commit", &e), -1);
  assert_non_null(strstr(tv_get(e, "message")->str, "no transaction"));
  tv_free(e);
  assert_int_equal(op0(f, "rollback", &e), -1);
  tv_free(e);
  /* SQL cannot open or end transactions itself */
  expect_err(f, "BEGIN", "transactionSync()");
  expect_err(f, "COMMIT", "transactionSync()");
  expect_err(f, "SAVEPOINT a", "transactionSync()");
  expect_err(f, "RELEASE a", "transactionSync()");
}

static void test_abandoned_transactions(void **state) {
  fx *f = *state;
  run(f, "CREATE TABLE y (v)");
  /* request 7 is terminated inside transactionSync: request 8 finds its
   * transaction and rolls it back */
  f->token = 7;
  op_ok(f, "begin");
  run(f, "INSERT INTO y VALUES (1)");
  f->token = 8;
  assert_true(count_rows(f, "y") == 0);
  /* facet_store_release does it at once, so another process is not kept
   * waiting for the write lock */
  f->token = 9;
  op_ok(f, "begin");
  run(f, "INSERT INTO y VALUES (2)");
  facet_store_release(f->s, 9);
  sqlite3 *db = open_raw(f, "alpha");
  assert_int_equal(sqlite3_exec(db, "INSERT INTO y VALUES (3)", NULL, NULL, NULL), SQLITE_OK);
  sqlite3_close(db);
  f->token = 10;
  tv *res = ok(f, "SELECT group_concat(v) AS g FROM y", "");
  assert_string_equal(text(res, 0, 0), "3");
  tv_free(res);
  facet_store_release(f->s, 12345); /* nothing open: nothing happens */
}

/* ---- write coalescing (facet_options.coalesce) --------------------------- */

static int64_t raw_count(fx *f, const char *table) {
  sqlite3 *db = open_raw(f, "alpha");
  char *sql = xasprintf("SELECT count(*) FROM %s", table);
  char *n = raw_text(db, sql);
  int64_t v = strtoll(n, NULL, 10);
  free(n);
  free(sql);
  sqlite3_close(db);
  return v;
}

static void test_coalescing(void **state) {
  fx *f = *state;
  run(f, "CREATE TABLE c (v)");
  reopen_store(f, &(facet_options){.coalesce = 1, .busy_timeout_ms = 200});
  assert_false(facet_store_pending(f->s));
  /* a run's statements wait for the gate: another connection sees none */
  for (int i = 0; i < 5; i++) run(f, "INSERT INTO c VALUES (1)");
  assert_true(facet_store_pending(f->s));
  assert_true(count_rows(f, "c") == 5);
  char *e = NULL;
  assert_int_equal(facet_store_commit(f->s, &e), 0);
  assert_null(e);
  assert_false(facet_store_pending(f->s));
  assert_true(raw_count(f, "c") == 5);
  /* rollback drops the run */
  run(f, "INSERT INTO c VALUES (2)");
  facet_store_rollback(f->s);
  assert_false(facet_store_pending(f->s));
  assert_true(raw_count(f, "c") == 5);
  /* transactionSync is a savepoint inside the run: its rollback undoes only it */
  run(f, "INSERT INTO c VALUES (3)");
  op_ok(f, "begin");
  run(f, "INSERT INTO c VALUES (4)");
  op_ok(f, "rollback");
  op_ok(f, "begin");
  run(f, "INSERT INTO c VALUES (5); INSERT INTO c VALUES (6)");
  /* a gate reached inside it (a host call from its function) leaves it open */
  assert_int_equal(facet_store_commit(f->s, NULL), 1);
  op_ok(f, "commit");
  assert_int_equal(facet_store_commit(f->s, NULL), 0);
  assert_true(raw_count(f, "c") == 8);
  /* a statement error keeps the run; the statement alone is undone */
  run(f, "INSERT INTO c VALUES (7)");
  expect_err(f, "INSERT INTO nowhere VALUES (1)", "no such table");
  assert_int_equal(facet_store_commit(f->s, NULL), 0);
  assert_true(raw_count(f, "c") == 9);
  /* VACUUM commits the run before it and runs by itself */
  run(f, "INSERT INTO c VALUES (8)");
  run(f, "VACUUM");
  assert_true(raw_count(f, "c") == 10);
  assert_int_equal(facet_store_commit(f->s, NULL), 0);
}

/* Runs sql (no parameters) up to `tries` times until it fails; the
 * error's message (caller frees), or NULL when it never did. */
static char *exec_until_error(fx *f, const char *sql, int tries) {
  char *e = NULL;
  for (int i = 0; i < tries && e == NULL; i++) {
    tv *res = NULL;
    iso_wire args;
    iso_wire_init(&args);
    iso_wire_array(&args, 1);
    iso_wire_string(&args, sql, strlen(sql));
    if (call_op(f, "exec", &args, &res) != 0) e = xstrdup(tv_get(res, "message")->str);
    tv_free(res);
    iso_wire_free(&args);
  }
  return e;
}

static void test_coalescing_loses_nothing_silently(void **state) {
  fx *f = *state;
  run(f, "CREATE TABLE b (v BLOB)");
  reopen_store(f, &(facet_options){.coalesce = 1, .default_limit_mb = 1});
  run(f, "INSERT INTO b VALUES (1)");
  assert_int_equal(facet_store_commit(f->s, NULL), 0);
  /* the size limit makes SQLite drop the whole open transaction */
  run(f, "INSERT INTO b VALUES (2)");
  char *e = exec_until_error(f, "INSERT INTO b VALUES (randomblob(100000))", 20);
  assert_non_null(e);
  assert_non_null(strstr(e, "facet is full"));
  free(e);
  /* what follows in the run is refused, and the gate reports the loss */
  expect_err(f, "INSERT INTO b VALUES (3)", "rolled back this request's writes");
  assert_true(facet_store_pending(f->s));
  assert_int_equal(facet_store_commit(f->s, &e), -1);
  assert_non_null(e);
  assert_non_null(strstr(e, "facet alpha: facet is full"));
  free(e);
  /* the loss waits for its facet's owner, and only for it */
  assert_true(facet_store_pending(f->s));
  assert_int_equal(facet_store_take_failure(f->s, "beta", NULL, &e), 0);
  assert_int_equal(facet_store_take_failure(f->s, "alpha", "child", &e), 0);
  assert_int_equal(facet_store_take_failure(f->s, "alpha", NULL, &e), 1);
  assert_non_null(strstr(e, "facet alpha: facet is full"));
  free(e);
  assert_false(facet_store_pending(f->s));
  assert_true(raw_count(f, "b") == 1);
  /* the next run starts clean */
  run(f, "INSERT INTO b VALUES (4)");
  assert_int_equal(facet_store_commit(f->s, NULL), 0);
  assert_true(raw_count(f, "b") == 2);
}

/* Size of alpha's database file (not its WAL), in bytes. */
static int64_t db_file_size(fx *f) {
  char *path = facet_path(f->dir, "alpha", NULL);
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  free(path);
  return (int64_t)st.st_size;
}

/* One run of n rows of a page each: n frames or so in the WAL. */
static void insert_pages(fx *f, int n) {
  char *sql = xasprintf("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n "
                        "WHERE i < %d) INSERT INTO p SELECT randomblob(3000) FROM n", n);
  run(f, sql);
  free(sql);
}

/* A WAL long enough for a checkpoint is checkpointed after the gate
 * (facet_store_checkpoint), not inside its commit; past 4,000 frames, and
 * without coalescing, by the commit itself, as SQLite does. */
static void test_checkpoint_after_gate(void **state) {
  fx *f = *state;
  run(f, "CREATE TABLE p (v BLOB)");
  reopen_store(f, &(facet_options){.coalesce = 1});
  int64_t empty = db_file_size(f);
  insert_pages(f, 1500);
  assert_int_equal(facet_store_commit(f->s, NULL), 0);
  /* committed (another connection sees every row), still in the WAL only */
  assert_true(raw_count(f, "p") == 1500);
  assert_true(facet_store_checkpoint_due(f->s));
  assert_true(db_file_size(f) == empty);
  /* a transaction still open keeps it due */
  op_ok(f, "begin");
  facet_store_checkpoint(f->s);
  assert_true(facet_store_checkpoint_due(f->s));
  op_ok(f, "commit");
  assert_int_equal(facet_store_commit(f->s, NULL), 0);
  facet_store_checkpoint(f->s);
  assert_false(facet_store_checkpoint_due(f->s));
  assert_true(db_file_size(f) > 1500 * 3000);
  /* a WAL past 4,000 frames: the commit checkpoints */
  int64_t before = db_file_size(f);
  insert_pages(f, 4500);
  assert_int_equal(facet_store_commit(f->s, NULL), 0);
  assert_false(facet_store_checkpoint_due(f->s));
  assert_true(db_file_size(f) > before + 4500 * 3000);
  /* without coalescing, every commit checkpoints as SQLite would */
  reopen_store(f, NULL);
  before = db_file_size(f);
  insert_pages(f, 1500);
  assert_false(facet_store_checkpoint_due(f->s));
  assert_true(db_file_size(f) > before + 1500 * 3000);
  assert_true(raw_count(f, "p") == 7500);
}

/* ---- containment -------------------------------------------------------- */

static void test_authorizer(void **state) {
  fx *f = *state;
  run(f, "CREATE TABLE a (k INTEGER PRIMARY KEY, v)");
  char *other = xasprintf("ATTACH '%s/facets/beta.sqlite' AS b", f->dir);
  expect_err(f, other, "ATTACH is not allowed");
  free(other);
  expect_err(f, "ATTACH ':memory:' AS m", "ATTACH is not allowed");
  expect_err(f, "DETACH main", "DETACH is not allowed");
  expect_err(f, "PRAGMA journal_mode = DELETE", "PRAGMA journal_mode is not allowed");
  expect_err(f, "PRAGMA journal_mode", "PRAGMA journal_mode is not allowed");
  expect_err(f, "PRAGMA writable_schema = ON", "PRAGMA writable_schema is not allowed");
  expect_err(f, "PRAGMA max_page_count = 1000000000", "PRAGMA max_page_count is read-only");
  expect_err(f, "PRAGMA synchronous = OFF", "not allowed");
  expect_err(f, "PRAGMA foreign_keys = OFF", "foreign keys are always enforced");
  expect_err(f, "PRAGMA temp_store_directory = '/tmp'", "not allowed");
  expect_err(f, "SELECT * FROM pragma_journal_mode", "PRAGMA journal_mode is not allowed");
  char *into = xasprintf("VACUUM INTO '%s/stolen.sqlite'", f->dir);
  expect_err(f, into, "VACUUM INTO is not allowed");
  free(into);
  char *stolen = xasprintf("%s/stolen.sqlite", f->dir);
  assert_int_equal(access(stolen, F_OK), -1);
  free(stolen);
  expect_err(f, "CREATE TEMP TABLE t (v)", "temporary tables");
  expect_err(f, "CREATE TABLE temp.t (v)", "temporary tables");
  expect_err(f, "CREATE VIEW temp.v AS SELECT 1", "temporary tables");
  expect_err(f, "CREATE VIRTUAL TABLE temp.f USING fts5(x)", "temporary tables");
  expect_err(f, "CREATE TRIGGER temp.tr AFTER INSERT ON a BEGIN SELECT 1; END", "temporary");
  expect_err(f, "SELECT load_extension('/lib/x86_64-linux-gnu/libc.so.6')",
             "load_extension() is not allowed");
  expect_err(f, "SELECT fts3_tokenizer('simple')", "fts3_tokenizer() is not allowed");
  expect_err(f, "CREATE VIRTUAL TABLE s USING dbstat", "module dbstat is not allowed");
  /* defensive mode: the schema cannot be written directly */
  expect_err(f, "UPDATE sqlite_schema SET sql = 'x'", "");

  /* what stays allowed */
  tv *res = ok(f, "PRAGMA table_info(a)", "");
  assert_int_equal(nrows(res), 2);
  tv_free(res);
  res = ok(f, "SELECT name FROM pragma_table_info('a') ORDER BY cid", "");
  assert_string_equal(text(res, 0, 0), "k");
  tv_free(res);
  run(f, "PRAGMA user_version = 7");
  res = ok(f, "PRAGMA user_version", "");
  assert_true(num(res, 0, 0) == 7);
  tv_free(res);
  res = ok(f, "PRAGMA foreign_keys", "");
  assert_true(num(res, 0, 0) == 1);
  tv_free(res);
  run(f, "PRAGMA defer_foreign_keys = ON");
  tv_free(ok(f, "PRAGMA index_list(a)", ""));
  tv_free(ok(f, "PRAGMA page_count", ""));
  run(f, "CREATE VIRTUAL TABLE docs USING fts5(body)");
  run(f, "INSERT INTO docs VALUES ('the quick brown fox')");
  res = ok(f, "SELECT count(*) FROM docs WHERE docs MATCH 'quick'", "");
  assert_true(num(res, 0, 0) == 1);
  tv_free(res);
  run(f, "INSERT INTO a (v) VALUES (randomblob(1000))");
  run(f, "DELETE FROM a");
  run(f, "VACUUM");
  res = ok(f, "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 10) "
              "SELECT sum(x) FROM c", "");
  assert_true(num(res, 0, 0) == 55);
  tv_free(res);
}

static void test_foreign_keys_enforced(void **state) {
  fx *f = *state;
  run(f, "CREATE TABLE p (id INTEGER PRIMARY KEY); "
         "CREATE TABLE ch (pid INTEGER REFERENCES p(id))");
  expect_err(f, "INSERT INTO ch VALUES (1)", "FOREIGN KEY constraint failed");
  /* deferred to the commit, which then fails and keeps nothing */
  op_ok(f, "begin");
  run(f, "PRAGMA defer_foreign_keys = ON");
  run(f, "INSERT INTO ch VALUES (2)");
  tv *e;
  assert_int_equal(op0(f, "commit", &e), -1);
  assert_non_null(strstr(tv_get(e, "message")->str, "FOREIGN KEY constraint failed"));
  tv_free(e);
  assert_true(count_rows(f, "ch") == 0);
  run(f, "INSERT INTO p VALUES (1); INSERT INTO ch VALUES (1)");
}

static void test_size_limit(void **state) {
  fx *f = *state;
  f->limit_mb = 1;
  run(f, "CREATE TABLE b (v BLOB)");
  int inserted = 0;
  char *e = NULL;
  for (int i = 0; i < 100 && e == NULL; i++) {
    tv *res;
    iso_wire args;
    iso_wire_init(&args);
    iso_wire_array(&args, 1);
    iso_wire_string(&args, "INSERT INTO b VALUES (randomblob(100000))", 41);
    int rc = call_op(f, "exec", &args, &res);
    iso_wire_free(&args);
    if (rc == 0)
      inserted++;
    else
      e = xstrdup(tv_get(res, "message")->str);
    tv_free(res);
  }
  assert_non_null(e);
  assert_string_equal(e, "facet is full: its size limit is 1 MB");
  free(e);
  assert_true(inserted >= 5 && inserted <= 10);
  /* reads still work and see every row that was acknowledged */
  assert_true(count_rows(f, "b") == inserted);
  tv *size;
  assert_int_equal(op0(f, "size", &size), 0);
  assert_true(size->num <= 1024 * 1024 && size->num > 500 * 1000);
  tv_free(size);
  /* inside a transaction too; the facet is intact afterwards */
  op_ok(f, "begin");
  expect_err(f, "INSERT INTO b VALUES (randomblob(500000))", "facet is full");
  op_ok(f, "rollback");
  sqlite3 *db = open_raw(f, "alpha");
  char *check = raw_text(db, "PRAGMA integrity_check");
  assert_string_equal(check, "ok");
  free(check);
  sqlite3_close(db);
  /* deleting makes room again */
  run(f, "DELETE FROM b");
  run(f, "INSERT INTO b VALUES (randomblob(100000))");
  /* a larger limit applies at once */
  f->limit_mb = 4;
  for (int i = 0; i < 15; i++) run(f, "INSERT INTO b VALUES (randomblob(100000))");
}

static void test_cpu_deadline(void **state) {
  fx *f = *state;
  f->deadline = time_thread_cpu_ns() + 100 * 1000000ull;
  uint64_t t0 = time_mono_ns();
  expect_err(f, "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
                "SELECT count(*) FROM c", "exceeded CPU limit");
  assert_true(time_mono_ns() - t0 < 2000 * 1000000ull);
  /* a cross join of large tables */
  f->deadline = 0;
  run(f, "CREATE TABLE big (v); "
         "INSERT INTO big WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c "
         "WHERE x < 3000) SELECT x FROM c");
  f->deadline = time_thread_cpu_ns() + 50 * 1000000ull;
  t0 = time_mono_ns();
  expect_err(f, "SELECT count(*) FROM big a, big b, big c", "exceeded CPU limit");
  assert_true(time_mono_ns() - t0 < 2000 * 1000000ull);
  /* the connection is fine afterwards, and within the deadline SQL runs */
  f->deadline = time_thread_cpu_ns() + 1000 * 1000000ull;
  assert_true(count_rows(f, "big") == 3000);
  /* interrupted inside a transaction: the whole transaction is gone */
  f->deadline = 0;
  op_ok(f, "begin");
  run(f, "DELETE FROM big WHERE v <= 10");
  f->deadline = time_thread_cpu_ns() + 20 * 1000000ull;
  expect_err(f, "UPDATE big SET v = (SELECT count(*) FROM big a, big b) WHERE v = 100",
             "exceeded CPU limit");
  f->deadline = 0;
  tv *e;
  if (op0(f, "commit", &e) != 0) {
    /* SQLite rolled it back: later SQL works again */
    tv_free(e);
    assert_true(count_rows(f, "big") == 3000);
  } else {
    tv_free(e);
    assert_true(count_rows(f, "big") == 2990);
  }
}

/* ---- names and paths ---------------------------------------------------- */

static void test_paths(void **state) {
  fx *f = *state;
  char *p = facet_path("/data", "hello", NULL);
  assert_string_equal(p, "/data/facets/hello.sqlite");
  free(p);
  p = facet_path("/data", "hello", "Child_1-x");
  assert_string_equal(p, "/data/facets/hello/Child_1-x.sqlite");
  free(p);
  const char *bad_tenants[] = {"", "..", "../x", "a/b", "Hello", "-x", "a.b", "x\n"};
  for (size_t i = 0; i < ARRAY_SIZE(bad_tenants); i++)
    assert_null(facet_path("/data", bad_tenants[i], NULL));
  char long_id[80];
  memset(long_id, 'a', 65);
  long_id[65] = '\0';
  const char *bad_ids[] = {"", ".", "..", "a/b", "a.b", "a b", "../../etc/passwd", long_id, "é"};
  for (size_t i = 0; i < ARRAY_SIZE(bad_ids); i++)
    assert_null(facet_path("/data", "hello", bad_ids[i]));
  long_id[64] = '\0';
  p = facet_path("/data", "hello", long_id);
  assert_non_null(p);
  free(p);
  assert_true(facet_id_valid("abc", 3));
  assert_false(facet_id_valid("abc", 0));

  /* facet_call refuses them too */
  f->facet_id = "../beta";
  expect_err(f, "SELECT 1", "invalid facet name");
  f->facet_id = NULL;
  f->tenant = "../alpha";
  expect_err(f, "SELECT 1", "invalid facet name");

  /* a child's facet is its own file under the parent's directory */
  f->tenant = "alpha";
  f->facet_id = "kid";
  run(f, "CREATE TABLE k (v); INSERT INTO k VALUES (1)");
  char *kid = xasprintf("%s/facets/alpha/kid.sqlite", f->dir);
  assert_int_equal(access(kid, F_OK), 0);
  free(kid);
  f->facet_id = NULL;
  expect_err(f, "SELECT * FROM k", "no such table");

  /* a symlink planted where a facet goes is not followed */
  char *target = xasprintf("%s/elsewhere.sqlite", f->dir);
  char *link = xasprintf("%s/facets/gamma.sqlite", f->dir);
  assert_int_equal(symlink(target, link), 0);
  f->tenant = "gamma";
  expect_err(f, "SELECT 1", "cannot open the facet");
  assert_int_equal(access(target, F_OK), -1);
  free(target);
  free(link);
}

static void test_isolation_between_tenants(void **state) {
  fx *f = *state;
  f->tenant = "alpha";
  run(f, "CREATE TABLE secrets (v); INSERT INTO secrets VALUES ('alpha only')");
  f->tenant = "beta";
  expect_err(f, "SELECT * FROM secrets", "no such table");
  run(f, "CREATE TABLE secrets (v)");
  assert_true(count_rows(f, "secrets") == 0);
  f->tenant = "alpha";
  assert_true(count_rows(f, "secrets") == 1);
}

static void test_lru_and_close(void **state) {
  fx *f = *state;
  reopen_store(f, &(facet_options){.max_open = 2});
  const char *names[] = {"t1", "t2", "t3", "t4"};
  for (int round = 0; round < 3; round++) {
    for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
      f->tenant = names[i];
      run(f, "CREATE TABLE IF NOT EXISTS n (v); INSERT INTO n VALUES (1)");
    }
  }
  for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
    f->tenant = names[i];
    assert_true(count_rows(f, "n") == 3);
  }
  /* a connection inside a transaction is not evicted */
  f->tenant = "t1";
  op_ok(f, "begin");
  run(f, "INSERT INTO n VALUES (2)");
  for (size_t i = 1; i < ARRAY_SIZE(names); i++) {
    f->tenant = names[i];
    assert_true(count_rows(f, "n") == 3);
  }
  f->tenant = "t1";
  op_ok(f, "commit");
  assert_true(count_rows(f, "n") == 4);
  facet_store_close_tenant(f->s, "t1");
  facet_store_close_tenant(f->s, "nobody");
  assert_true(count_rows(f, "n") == 4);
}

/* /v1/run's named facets: their own owner, outside every worker's names;
 * closing one facet's connection leaves the rest, and its data, alone. */
static void test_run_facets(void **state) {
  fx *f = *state;
  char *p = facet_path("/data", FACET_RUN_OWNER, "agent-1");
  assert_string_equal(p, "/data/facets/_run/agent-1.sqlite");
  free(p);
  assert_null(facet_path("/data", FACET_RUN_OWNER, NULL));
  assert_null(facet_path("/data", FACET_RUN_OWNER, "../x"));
  assert_false(worker_name_valid(FACET_RUN_OWNER, strlen(FACET_RUN_OWNER)));
  f->tenant = FACET_RUN_OWNER;
  f->facet_id = "mem";
  run(f, "CREATE TABLE n (v); INSERT INTO n VALUES (1)");
  f->facet_id = "other";
  run(f, "CREATE TABLE n (v); INSERT INTO n VALUES (1), (2)");
  facet_store_close_facet(f->s, FACET_RUN_OWNER, "mem");
  facet_store_close_facet(f->s, FACET_RUN_OWNER, "nobody");
  assert_true(count_rows(f, "n") == 2);
  f->facet_id = "mem";
  assert_true(count_rows(f, "n") == 1);
  json_t *list = facet_run_list(f->dir);
  assert_int_equal(json_array_size(list), 2);
  json_decref(list);
  facet_store_close_facet(f->s, FACET_RUN_OWNER, "mem");
  assert_int_equal(facet_run_delete(f->dir, "mem"), 0);
  assert_int_equal(facet_run_delete(f->dir, "mem"), -ENOENT);
  assert_int_equal(facet_run_delete(f->dir, "../other"), -EINVAL);
  list = facet_run_list(f->dir);
  assert_int_equal(json_array_size(list), 1);
  assert_string_equal(json_string_value(json_object_get(json_array_get(list, 0), "id")), "other");
  json_decref(list);
  /* a deleted facet starts again empty */
  expect_err(f, "SELECT count(*) FROM n", "no such table");
  f->facet_id = NULL;
}

/* ---- two processes ------------------------------------------------------ */

#define WRITER_ROWS 1500

/* One writer process: its own store on the same directory, inserting rows
 * with autocommit and in transactions as fast as it can. Exit status 0 when
 * every call succeeded. */
static int writer(const char *dir, int id, int go_fd) {
  char c;
  if (read(go_fd, &c, 1) != 1) return 2;
  facet_store *s = facet_store_new(dir, NULL);
  if (s == NULL) return 3;
  fx f = {.s = s, .tenant = "shared", .token = (uint64_t)id};
  for (int i = 0; i < WRITER_ROWS; i++) {
    int in_txn = i % 10 >= 5;
    if (i % 10 == 5) {
      iso_wire a;
      iso_wire_init(&a);
      iso_wire_array(&a, 0);
      tv *r;
      int rc = call_op(&f, "begin", &a, &r);
      iso_wire_free(&a);
      if (rc != 0) {
        fprintf(stderr, "writer %d begin: %s\n", id, tv_get(r, "message")->str);
        return 4;
      }
      tv_free(r);
    }
    iso_wire a;
    iso_wire_init(&a);
    iso_wire_array(&a, 3);
    iso_wire_string(&a, "INSERT INTO w (writer, n) VALUES (?, ?)", 39);
    iso_wire_number(&a, id);
    iso_wire_number(&a, i);
    tv *r;
    int rc = call_op(&f, "exec", &a, &r);
    iso_wire_free(&a);
    if (rc != 0) {
      fprintf(stderr, "writer %d row %d: %s\n", id, i, tv_get(r, "message")->str);
      return 5;
    }
    tv_free(r);
    if (in_txn && i % 10 == 9) {
      iso_wire_init(&a);
      iso_wire_array(&a, 0);
      rc = call_op(&f, "commit", &a, &r);
      iso_wire_free(&a);
      if (rc != 0) {
        fprintf(stderr, "writer %d commit: %s\n", id, tv_get(r, "message")->str);
        return 6;
      }
      tv_free(r);
    }
  }
  facet_store_free(s);
  return 0;
}

static void test_two_processes_write_at_once(void **state) {
  fx *f = *state;
  f->tenant = "shared";
  run(f, "CREATE TABLE w (writer INTEGER, n INTEGER, PRIMARY KEY (writer, n))");
  int go[2];
  assert_int_equal(pipe(go), 0);
  pid_t pids[2];
  for (int i = 0; i < 2; i++) {
    pids[i] = fork();
    assert_true(pids[i] >= 0);
    if (pids[i] == 0) {
      close(go[1]);
      _exit(writer(f->dir, i + 1, go[0]));
    }
  }
  close(go[0]);
  /* both start at once */
  assert_int_equal(write(go[1], "gg", 2), 2);
  close(go[1]);
  for (int i = 0; i < 2; i++) {
    int status = 0;
    assert_int_equal(waitpid(pids[i], &status, 0), pids[i]);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
  }
  assert_true(count_rows(f, "w") == 2 * WRITER_ROWS);
}

/* ---- operators ---------------------------------------------------------- */

static void test_describe_backup_purge(void **state) {
  fx *f = *state;
  f->tenant = "ops";
  run(f, "CREATE TABLE one (v); CREATE TABLE two (v); "
         "INSERT INTO one VALUES (1), (2), (3); INSERT INTO two VALUES ('x')");
  f->facet_id = "child";
  run(f, "CREATE TABLE c (v)");
  f->facet_id = NULL;

  json_t *d = NULL;
  char *e = NULL;
  assert_int_equal(facet_describe(f->dir, "ops", &d, &e), 0);
  assert_string_equal(json_string_value(json_object_get(d, "path")), "facets/ops.sqlite");
  json_t *tables = json_object_get(d, "tables");
  assert_int_equal(json_array_size(tables), 2);
  assert_string_equal(json_string_value(json_object_get(json_array_get(tables, 0), "name")), "one");
  assert_int_equal(json_integer_value(json_object_get(json_array_get(tables, 0), "rows")), 3);
  assert_int_equal(json_integer_value(json_object_get(json_array_get(tables, 1), "rows")), 1);
  assert_true(json_integer_value(json_object_get(d, "size_bytes")) > 0);
  assert_int_equal(json_integer_value(json_object_get(d, "size_bytes")),
                   json_integer_value(json_object_get(d, "page_size")) *
                       json_integer_value(json_object_get(d, "page_count")));
  json_t *children = json_object_get(d, "children");
  assert_int_equal(json_array_size(children), 1);
  assert_string_equal(json_string_value(json_object_get(json_array_get(children, 0), "id")), "child");
  json_decref(d);
  assert_int_equal(facet_describe(f->dir, "nobody", &d, &e), -ENOENT);
  assert_int_equal(facet_describe(f->dir, "../x", &d, &e), -EINVAL);

  /* a backup taken while another process keeps writing is one consistent
   * snapshot */
  run(f, "CREATE TABLE log (n INTEGER PRIMARY KEY, sum INTEGER)");
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    facet_store *s = facet_store_new(f->dir, NULL);
    fx w = {.s = s, .tenant = "ops", .token = 1};
    uint64_t until = time_mono_ns() + 400 * 1000000ull;
    for (int i = 1; time_mono_ns() < until; i++) {
      iso_wire a;
      iso_wire_init(&a);
      iso_wire_array(&a, 1);
      const char *sql = "INSERT INTO log (sum) SELECT coalesce(max(sum), 0) + 1 FROM log";
      iso_wire_string(&a, sql, strlen(sql));
      tv *r;
      int rc = call_op(&w, "exec", &a, &r);
      iso_wire_free(&a);
      tv_free(r);
      if (rc != 0) _exit(1);
    }
    facet_store_free(s);
    _exit(0);
  }
  usleep(100 * 1000);
  char *dest = xasprintf("%s/backup.sqlite", f->dir);
  assert_int_equal(facet_backup_to(f->dir, "ops", NULL, dest, &e), 0);
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  sqlite3 *db = NULL;
  assert_int_equal(sqlite3_open_v2(dest, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
  expect_raw(db, "PRAGMA integrity_check", "ok");
  expect_raw(db, "PRAGMA journal_mode", "delete");
  expect_raw(db, "SELECT count(*) = max(sum) AND count(*) > 0 FROM log", "1");
  expect_raw(db, "SELECT count(*) FROM one", "3");
  sqlite3_close(db);
  assert_int_equal(facet_backup_to(f->dir, "ops", "child", dest, &e), 0);
  assert_int_equal(facet_backup_to(f->dir, "nobody", NULL, dest, &e), -ENOENT);
  assert_int_equal(facet_backup_to(f->dir, "ops", "../x", dest, &e), -EINVAL);
  free(dest);

  /* purge removes the facet and its children's */
  facet_store_close_tenant(f->s, "ops");
  assert_int_equal(facet_purge(f->dir, "ops"), 0);
  char *path = xasprintf("%s/facets/ops.sqlite", f->dir);
  char *dir = xasprintf("%s/facets/ops", f->dir);
  assert_int_equal(access(path, F_OK), -1);
  assert_int_equal(access(dir, F_OK), -1);
  assert_int_equal(facet_purge(f->dir, "ops"), 0);
  assert_int_equal(facet_purge(f->dir, ".."), -EINVAL);
  /* A process that has not heard of the delete yet cannot make it again */
  assert_true(facet_purged(f->dir, "ops"));
  expect_err(f, "CREATE TABLE again (v)", "the worker was deleted and its facet purged");
  assert_int_equal(access(path, F_OK), -1);
  /* until the name is deployed again: then a new facet starts empty */
  assert_int_equal(facet_unpurge(f->dir, "ops"), 0);
  assert_int_equal(facet_unpurge(f->dir, "ops"), 0);
  assert_false(facet_purged(f->dir, "ops"));
  expect_err(f, "SELECT * FROM one", "no such table");
  free(path);
  free(dir);
}

static void test_reopen_keeps_data(void **state) {
  fx *f = *state;
  run(f, "CREATE TABLE d (v); INSERT INTO d VALUES (1)");
  reopen_store(f, &(facet_options){.synchronous = FACET_SYNC_NORMAL, .busy_timeout_ms = 100});
  assert_true(count_rows(f, "d") == 1);
  sqlite3 *db = open_raw(f, "alpha");
  char *mode = raw_text(db, "PRAGMA journal_mode");
  assert_string_equal(mode, "wal");
  free(mode);
  sqlite3_close(db);
  /* only the owner can reach the files */
  struct stat st;
  char *dir = xasprintf("%s/facets", f->dir);
  assert_int_equal(stat(dir, &st), 0);
  free(dir);
  assert_int_equal(st.st_mode & 077, 0);
}

/* ---- replication: change records ---------------------------------------- */

/* The records a take handed over, in order. */
typedef struct rec_list {
  struct {
    char *tenant, *facet_id;
    uint8_t *rec;
    size_t len;
  } item[512];
  int n;
  int refuse_after; /* the callback says no once this many are in (0: never) */
} rec_list;

static int collect(void *arg, const char *tenant, const char *facet_id, const void *rec,
                   size_t len) {
  rec_list *l = arg;
  if (l->refuse_after > 0 && l->n >= l->refuse_after) return 7;
  assert_true(l->n < (int)ARRAY_SIZE(l->item));
  l->item[l->n].tenant = xstrdup(tenant);
  l->item[l->n].facet_id = facet_id ? xstrdup(facet_id) : NULL;
  l->item[l->n].rec = xmalloc(len);
  memcpy(l->item[l->n].rec, rec, len);
  l->item[l->n].len = len;
  l->n++;
  return 0;
}

static void rec_list_clear(rec_list *l) {
  for (int i = 0; i < l->n; i++) {
    free(l->item[i].tenant);
    free(l->item[i].facet_id);
    free(l->item[i].rec);
  }
  l->n = 0;
}

/* Every table's rows (all columns, in full order), the schema, and
 * integrity_check, as one text. */
static void dump_table(sqlite3 *db, const char *name, sqlite3_str *out) {
  char *sql = sqlite3_mprintf("SELECT * FROM \"%w\"", name);
  sqlite3_stmt *st = NULL;
  assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
  int n = sqlite3_column_count(st);
  sqlite3_finalize(st);
  sqlite3_str *order = sqlite3_str_new(NULL);
  for (int i = 1; i <= n; i++) sqlite3_str_appendf(order, "%s%d", i > 1 ? "," : "", i);
  char *by = sqlite3_str_finish(order);
  char *full = sqlite3_mprintf("%s ORDER BY %s", sql, by);
  assert_int_equal(sqlite3_prepare_v2(db, full, -1, &st, NULL), SQLITE_OK);
  sqlite3_str_appendf(out, "table %s\n", name);
  while (sqlite3_step(st) == SQLITE_ROW) {
    for (int i = 0; i < n; i++) {
      switch (sqlite3_column_type(st, i)) {
        case SQLITE_INTEGER: sqlite3_str_appendf(out, "i%lld|", sqlite3_column_int64(st, i)); break;
        case SQLITE_FLOAT: sqlite3_str_appendf(out, "f%.17g|", sqlite3_column_double(st, i)); break;
        case SQLITE_TEXT: sqlite3_str_appendf(out, "t%s|", sqlite3_column_text(st, i)); break;
        case SQLITE_BLOB: {
          const uint8_t *b = sqlite3_column_blob(st, i);
          int len = sqlite3_column_bytes(st, i);
          sqlite3_str_appendf(out, "b%d:", len);
          for (int k = 0; k < len; k++) sqlite3_str_appendf(out, "%02x", b[k]);
          sqlite3_str_appendall(out, "|");
          break;
        }
        default: sqlite3_str_appendall(out, "n|");
      }
    }
    sqlite3_str_appendall(out, "\n");
  }
  sqlite3_finalize(st);
  sqlite3_free(full);
  sqlite3_free(by);
  sqlite3_free(sql);
}

static char *dump_file(const char *path) {
  sqlite3 *db = NULL;
  assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
  sqlite3_busy_timeout(db, 5000);
  char *check = raw_text(db, "PRAGMA integrity_check");
  if (strcmp(check, "ok") != 0) fail_msg("%s: integrity_check: %s", path, check);
  free(check);
  sqlite3_str *out = sqlite3_str_new(NULL);
  sqlite3_stmt *st = NULL;
  assert_int_equal(sqlite3_prepare_v2(db, "SELECT type, name, tbl_name, sql FROM sqlite_schema "
                                          "ORDER BY type, name", -1, &st, NULL), SQLITE_OK);
  char *tables[64];
  int n = 0;
  while (sqlite3_step(st) == SQLITE_ROW) {
    sqlite3_str_appendf(out, "%s %s %s %s\n", sqlite3_column_text(st, 0),
                        sqlite3_column_text(st, 1), sqlite3_column_text(st, 2),
                        sqlite3_column_text(st, 3));
    if (strcmp((const char *)sqlite3_column_text(st, 0), "table") == 0 && n < 64)
      tables[n++] = xstrdup((const char *)sqlite3_column_text(st, 1));
  }
  sqlite3_finalize(st);
  for (int i = 0; i < n; i++) {
    dump_table(db, tables[i], out);
    free(tables[i]);
  }
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
  char *s = sqlite3_str_finish(out);
  char *copy = xstrdup(s ? s : "");
  sqlite3_free(s);
  return copy;
}

static uint8_t *read_whole(const char *path, size_t *len) {
  int fd = open(path, O_RDONLY);
  assert_true(fd >= 0);
  struct stat st;
  assert_int_equal(fstat(fd, &st), 0);
  uint8_t *b = xmalloc((size_t)st.st_size + 1);
  assert_int_equal(pread(fd, b, (size_t)st.st_size, 0), st.st_size);
  close(fd);
  *len = (size_t)st.st_size;
  return b;
}

/* The primary's file, checkpointed, and the replica hold the same pages,
 * but for page 1's change counter, schema cookie and version-valid-for,
 * which the snapshot's backup rewrote. */
static void expect_same_pages(const char *primary, const char *replica) {
  sqlite3 *db = NULL;
  assert_int_equal(sqlite3_open_v2(primary, &db, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
  sqlite3_busy_timeout(db, 5000);
  assert_int_equal(sqlite3_exec(db, "PRAGMA wal_checkpoint(TRUNCATE)", NULL, NULL, NULL),
                   SQLITE_OK);
  size_t a_len, b_len;
  uint8_t *a = read_whole(primary, &a_len), *b = read_whole(replica, &b_len);
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
  assert_int_equal(a_len, b_len);
  static const int masked[][2] = {{24, 28}, {40, 44}, {92, 96}};
  for (size_t m = 0; m < ARRAY_SIZE(masked); m++)
    for (int i = masked[m][0]; i < masked[m][1]; i++) a[i] = b[i] = 0;
  for (size_t i = 0; i < a_len; i++)
    if (a[i] != b[i]) fail_msg("page %zu differs at byte %zu", i / 4096 + 1, i % 4096);
  free(a);
  free(b);
}

/* A replicating fixture: the store, its records applied to replicas. */
typedef struct repl {
  fx *f;
  rec_list taken;
  int records;        /* applied so far */
  size_t bytes;       /* their size */
} repl;

/* Takes the store's records and applies each to DIR/replica-<tenant>[-<id>].sqlite. */
static char *replica_path(fx *f, const char *tenant, const char *id) {
  return id ? xasprintf("%s/replica-%s-%s.sqlite", f->dir, tenant, id)
            : xasprintf("%s/replica-%s.sqlite", f->dir, tenant);
}

static void repl_sync(repl *r) {
  assert_int_equal(facet_store_take_changes(r->f->s, collect, &r->taken), 0);
  for (int i = 0; i < r->taken.n; i++) {
    char *path = replica_path(r->f, r->taken.item[i].tenant, r->taken.item[i].facet_id);
    char *e = NULL;
    int rc = facet_record_apply(path, r->taken.item[i].rec, r->taken.item[i].len, &e);
    if (rc != 0) fail_msg("apply to %s: %s", path, e ? e : "?");
    r->bytes += r->taken.item[i].len;
    r->records++;
    free(path);
  }
  rec_list_clear(&r->taken);
}

/* The replica of the fixture's facet is the facet: rows, schema, pages. */
static void expect_replica(repl *r) {
  repl_sync(r);
  char *primary = facet_path(r->f->dir, r->f->tenant, r->f->facet_id);
  char *replica = replica_path(r->f, r->f->tenant, r->f->facet_id);
  char *a = dump_file(primary), *b = dump_file(replica);
  assert_string_equal(a, b);
  free(a);
  free(b);
  expect_same_pages(primary, replica);
  free(primary);
  free(replica);
}

static void gate(fx *f) {
  char *e = NULL;
  int rc = facet_store_commit(f->s, &e);
  if (rc != 0) fail_msg("gate: %d %s", rc, e ? e : "");
}

/* Starts the fixture's facet's replica from a snapshot. */
static void repl_start(repl *r) {
  char *replica = replica_path(r->f, r->f->tenant, r->f->facet_id);
  char *e = NULL;
  int rc = facet_store_snapshot(r->f->s, r->f->tenant, r->f->facet_id, replica, &e);
  if (rc != 0) fail_msg("snapshot: %d %s", rc, e ? e : "");
  free(replica);
}

static off_t wal_size(fx *f) {
  char *path = facet_path(f->dir, f->tenant, f->facet_id);
  char *wal = xasprintf("%s-wal", path);
  struct stat st;
  off_t size = stat(wal, &st) == 0 ? st.st_size : 0;
  free(wal);
  free(path);
  return size;
}

/* Inserts n rows of `bytes` random bytes into big(v), one statement each. */
static void insert_big(fx *f, int n, int bytes) {
  for (int i = 0; i < n; i++)
    tv_free(ok(f, "INSERT INTO big (v) VALUES (randomblob(?))", "d", (double)bytes));
}

static void checkpoint(fx *f, const char *mode) {
  sqlite3 *db = open_raw(f, f->tenant);
  char *sql = xasprintf("PRAGMA wal_checkpoint(%s)", mode);
  expect_raw(db, sql, "0"); /* not busy */
  free(sql);
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
}

static void test_replica_follows_every_kind_of_commit(void **state) {
  fx *f = *state;
  reopen_store(f, &(facet_options){.coalesce = 1, .replicate = 1});
  repl r = {.f = f};
  run(f, "CREATE TABLE seed (v)");
  gate(f);
  /* the replica starts from a snapshot taken after this record */
  assert_int_equal(facet_store_take_changes(f->s, collect, &r.taken), 0);
  assert_int_equal(r.taken.n, 1);
  rec_list_clear(&r.taken);
  repl_start(&r);
  expect_replica(&r);

  /* rowid tables, no primary key, WITHOUT ROWID, indexes, blobs on overflow pages */
  run(f, "CREATE TABLE pk (id INTEGER PRIMARY KEY, name TEXT UNIQUE, score REAL)");
  run(f, "CREATE TABLE nopk (a, b)");
  run(f, "CREATE TABLE wr (k TEXT PRIMARY KEY, v BLOB) WITHOUT ROWID");
  run(f, "CREATE INDEX nopk_b ON nopk (b)");
  gate(f);
  for (int i = 0; i < 200; i++) {
    char name[32];
    snprintf(name, sizeof name, "n%03d", i);
    tv_free(ok(f, "INSERT INTO pk (name, score) VALUES (?, ?)", "sd", name, i * 1.5));
    tv_free(ok(f, "INSERT INTO nopk VALUES (?, ?)", "ds", (double)i, name));
    tv_free(ok(f, "INSERT INTO wr VALUES (?, randomblob(?))", "sd", name, (double)(i * 37)));
  }
  gate(f);
  run(f, "INSERT INTO nopk VALUES (1, 'dup'), (1, 'dup')"); /* rows without any key */
  run(f, "INSERT INTO wr VALUES ('huge', randomblob(100000))");
  gate(f);
  expect_replica(&r);

  /* one small commit is a few pages */
  run(f, "UPDATE pk SET score = -1 WHERE id = 7");
  gate(f);
  assert_int_equal(facet_store_take_changes(f->s, collect, &r.taken), 0);
  assert_int_equal(r.taken.n, 1);
  facet_record_info info;
  assert_int_equal(facet_record_read(r.taken.item[0].rec, r.taken.item[0].len, &info, NULL), 0);
  assert_int_equal(info.page_size, 4096);
  assert_true(info.n_pages >= 1 && info.n_pages <= 4);
  assert_int_equal(r.taken.item[0].len, 24 + info.n_pages * (4 + 4096));
  char *e = NULL;
  char *replica = replica_path(f, f->tenant, NULL);
  assert_int_equal(facet_record_apply(replica, r.taken.item[0].rec, r.taken.item[0].len, &e), 0);
  /* applying the last record again changes nothing */
  assert_int_equal(facet_record_apply(replica, r.taken.item[0].rec, r.taken.item[0].len, &e), 0);
  rec_list_clear(&r.taken);
  expect_replica(&r);

  /* a transaction that spills the page cache, then rewrites pages it
   * spilled (in place in the WAL), in one commit */
  run(f, "CREATE TABLE big (id INTEGER PRIMARY KEY, v BLOB)");
  gate(f);
  checkpoint(f, "TRUNCATE");
  insert_big(f, 2500, 3000);
  assert_true(wal_size(f) > 4 * 1024 * 1024); /* spilled before the commit */
  run(f, "UPDATE big SET v = randomblob(2000) WHERE id % 3 = 0");
  run(f, "UPDATE pk SET score = score + 1");
  gate(f);
  expect_replica(&r);

  /* rolled back after spilling: transactionSync inside the run (a savepoint) */
  checkpoint(f, "TRUNCATE");
  run(f, "INSERT INTO pk (name) VALUES ('kept-before')");
  op_ok(f, "begin");
  /* pages of the file as it is, and new ones */
  run(f, "UPDATE big SET v = randomblob(3000)");
  insert_big(f, 500, 3000);
  run(f, "DELETE FROM nopk");
  assert_true(wal_size(f) > 4 * 1024 * 1024); /* spilled */
  op_ok(f, "rollback");
  run(f, "INSERT INTO pk (name) VALUES ('kept-after')");
  gate(f);
  expect_replica(&r);
  assert_true(count_rows(f, "nopk") == 202);
  gate(f);

  /* the WAL starts again from its header after a checkpoint */
  checkpoint(f, "TRUNCATE");
  assert_int_equal(wal_size(f), 0);
  run(f, "INSERT INTO nopk VALUES ('after', 'truncate')");
  gate(f);
  expect_replica(&r);
  run(f, "INSERT INTO nopk VALUES ('second', 'commit')");
  gate(f);
  checkpoint(f, "RESTART");
  run(f, "INSERT INTO nopk VALUES ('after', 'restart')");
  gate(f);
  expect_replica(&r);

  /* VACUUM after deleting (the file shrinks), a table dropped */
  run(f, "DELETE FROM big WHERE id % 2 = 0");
  gate(f);
  run(f, "VACUUM");
  gate(f);
  expect_replica(&r);
  run(f, "DROP TABLE big");
  gate(f);
  run(f, "VACUUM");
  gate(f);
  expect_replica(&r);
  free(replica);
}

/* Without coalescing every statement commits by itself, and a transaction
 * rolled back after spilling leaves its frames in the WAL for the next
 * one to write over. */
static void test_replica_without_coalescing(void **state) {
  fx *f = *state;
  reopen_store(f, &(facet_options){.replicate = 1});
  repl r = {.f = f};
  /* a new facet: its first record holds every page, no snapshot needed */
  run(f, "CREATE TABLE big (id INTEGER PRIMARY KEY, v BLOB)");
  insert_big(f, 10, 100);
  expect_replica(&r);
  assert_int_equal(r.records, 11);
  checkpoint(f, "TRUNCATE");
  op_ok(f, "begin");
  insert_big(f, 2500, 3000);
  assert_true(wal_size(f) > 4 * 1024 * 1024);
  op_ok(f, "rollback");
  repl_sync(&r);
  assert_int_equal(r.records, 11); /* nothing of it */
  run(f, "INSERT INTO big (v) VALUES ('after the rollback')");
  op_ok(f, "begin");
  insert_big(f, 1500, 3000);
  run(f, "UPDATE big SET v = 'x' WHERE id < 5");
  op_ok(f, "commit");
  expect_replica(&r);
  /* several statements in one text are one commit */
  run(f, "INSERT INTO big (v) VALUES (1); INSERT INTO big (v) VALUES (2)");
  int had = r.records;
  expect_replica(&r);
  assert_int_equal(r.records, had + 1);
}

/* A facet replicated since it was made needs no snapshot: its first
 * record holds every page. Two facets of one store, records by name. */
static void test_replica_of_two_new_facets(void **state) {
  fx *f = *state;
  reopen_store(f, &(facet_options){.coalesce = 1, .replicate = 1});
  repl r = {.f = f};
  run(f, "CREATE TABLE own (v); INSERT INTO own VALUES ('mine')");
  f->facet_id = "kid";
  run(f, "CREATE TABLE child (v) ; INSERT INTO child VALUES ('the child''s')");
  f->facet_id = NULL;
  run(f, "INSERT INTO own VALUES ('mine, later in the run')");
  gate(f);
  assert_int_equal(facet_store_take_changes(f->s, collect, &r.taken), 0);
  assert_int_equal(r.taken.n, 2);
  int own = r.taken.item[0].facet_id == NULL ? 0 : 1;
  assert_string_equal(r.taken.item[own].tenant, "alpha");
  assert_null(r.taken.item[own].facet_id);
  assert_string_equal(r.taken.item[1 - own].tenant, "alpha");
  assert_string_equal(r.taken.item[1 - own].facet_id, "kid");
  /* nothing was taken twice */
  rec_list again = {0};
  assert_int_equal(facet_store_take_changes(f->s, collect, &again), 0);
  assert_int_equal(again.n, 0);
  for (int i = 0; i < r.taken.n; i++) {
    char *path = replica_path(f, r.taken.item[i].tenant, r.taken.item[i].facet_id);
    assert_int_equal(facet_record_apply(path, r.taken.item[i].rec, r.taken.item[i].len, NULL), 0);
    free(path);
  }
  rec_list_clear(&r.taken);
  expect_replica(&r);
  f->facet_id = "kid";
  expect_replica(&r);
  run(f, "INSERT INTO child VALUES (2)");
  f->facet_id = NULL;
  run(f, "INSERT INTO own VALUES (3)");
  gate(f);
  expect_replica(&r);
  f->facet_id = "kid";
  expect_replica(&r);
  f->facet_id = NULL;
  /* a record that does not hold every page cannot start an empty replica */
  run(f, "INSERT INTO own VALUES (4)");
  gate(f);
  assert_int_equal(facet_store_take_changes(f->s, collect, &r.taken), 0);
  assert_int_equal(r.taken.n, 1);
  char *fresh = xasprintf("%s/fresh.sqlite", f->dir);
  char *e = NULL;
  assert_int_equal(facet_record_apply(fresh, r.taken.item[0].rec, r.taken.item[0].len, &e),
                   -EINVAL);
  assert_non_null(strstr(e, "is empty and the record holds"));
  assert_non_null(strstr(e, "start the replica from a snapshot"));
  free(e);
  assert_int_equal(access(fresh, F_OK), -1); /* not even made */
  free(fresh);
  rec_list_clear(&r.taken);
}

/* Commits that fail, and rollbacks, leave no record; without replicate
 * nothing is captured at all. */
static void test_replica_records_only_commits(void **state) {
  fx *f = *state;
  run(f, "CREATE TABLE b (v BLOB)");
  rec_list l = {0};
  assert_int_equal(facet_store_take_changes(f->s, collect, &l), 0);
  assert_int_equal(l.n, 0); /* replicate is off */
  reopen_store(f, &(facet_options){.coalesce = 1, .replicate = 1, .default_limit_mb = 1});
  repl r = {.f = f};
  char *replica = replica_path(f, f->tenant, NULL);
  repl_start(&r);
  run(f, "INSERT INTO b VALUES (1)");
  facet_store_rollback(f->s);
  repl_sync(&r);
  assert_int_equal(r.records, 0);
  /* the size limit makes SQLite drop the run's transaction */
  run(f, "INSERT INTO b VALUES (2)");
  free(exec_until_error(f, "INSERT INTO b VALUES (randomblob(100000))", 20));
  assert_int_equal(facet_store_commit(f->s, NULL), -1);
  repl_sync(&r);
  assert_int_equal(r.records, 0);
  run(f, "INSERT INTO b VALUES (3)");
  gate(f);
  expect_replica(&r);
  assert_int_equal(r.records, 1);
  /* a callback that says no keeps the record for the next take */
  run(f, "INSERT INTO b VALUES (4)");
  gate(f);
  run(f, "INSERT INTO b VALUES (5)");
  gate(f);
  l.refuse_after = 1;
  assert_int_equal(facet_store_take_changes(f->s, collect, &l), 7);
  assert_int_equal(l.n, 1);
  l.refuse_after = 0;
  assert_int_equal(facet_store_take_changes(f->s, collect, &l), 0);
  assert_int_equal(l.n, 2);
  for (int i = 0; i < l.n; i++)
    assert_int_equal(facet_record_apply(replica, l.item[i].rec, l.item[i].len, NULL), 0);
  rec_list_clear(&l);
  expect_replica(&r);
  free(replica);
}

/* A transaction's pages are held until it ends, in SQLite's heap: past
 * the process's limit the write fails, and nothing of it is stored. */
static void test_replica_transaction_past_the_heap_limit(void **state) {
  fx *f = *state;
  run(f, "CREATE TABLE b (v BLOB)");
  reopen_store(f, &(facet_options){.coalesce = 1, .replicate = 1, .heap_limit_mb = 48});
  repl r = {.f = f};
  repl_start(&r);
  run(f, "INSERT INTO b VALUES ('before')");
  gate(f);
  char *e = exec_until_error(f, "INSERT INTO b VALUES (randomblob(1000000))", 80);
  assert_non_null(e);
  assert_non_null(strstr(e, "out of memory"));
  free(e);
  assert_int_equal(facet_store_commit(f->s, NULL), -1);
  expect_replica(&r);
  assert_int_equal(r.records, 1);
  assert_true(count_rows(f, "b") == 1);
  run(f, "INSERT INTO b VALUES ('after')");
  gate(f);
  expect_replica(&r);
  reopen_store(f, &(facet_options){.heap_limit_mb = FACET_DEFAULT_HEAP_MB});
}

/* A node taking the facet over: snapshot plus records, put where a facet
 * lives, serve it. */
static void test_replica_serves_as_the_facet(void **state) {
  fx *f = *state;
  reopen_store(f, &(facet_options){.coalesce = 1, .replicate = 1});
  repl r = {.f = f};
  run(f, "CREATE TABLE t (k INTEGER PRIMARY KEY, v)");
  run(f, "INSERT INTO t (v) VALUES ('one')");
  gate(f);
  assert_int_equal(facet_store_take_changes(f->s, collect, &r.taken), 0);
  rec_list_clear(&r.taken);
  repl_start(&r);
  run(f, "INSERT INTO t (v) VALUES ('two')");
  gate(f);
  run(f, "CREATE TABLE u (a, b); INSERT INTO u VALUES (1, 2)");
  gate(f);
  repl_sync(&r);
  assert_int_equal(r.records, 2);
  fx g = {.tenant = "alpha", .token = 1};
  assert_int_equal(make_temp_dir(g.dir, sizeof g.dir, "facets-takeover"), 0);
  g.s = facet_store_new(g.dir, &(facet_options){.replicate = 1});
  assert_non_null(g.s);
  char *replica = replica_path(f, "alpha", NULL);
  char *target = facet_path(g.dir, "alpha", NULL);
  assert_int_equal(rename(replica, target), 0);
  tv *res = ok(&g, "SELECT group_concat(v, ',') FROM (SELECT v FROM t ORDER BY k)", "");
  assert_string_equal(text(res, 0, 0), "one,two");
  tv_free(res);
  assert_true(count_rows(&g, "u") == 1);
  run(&g, "INSERT INTO t (v) VALUES ('three, on the new owner')");
  assert_true(count_rows(&g, "t") == 3);
  facet_store_free(g.s);
  char *dump = dump_file(target); /* integrity_check: ok */
  assert_non_null(strstr(dump, "three, on the new owner"));
  free(dump);
  rm_rf(g.dir);
  free(replica);
  free(target);
}

static void test_snapshot(void **state) {
  fx *f = *state;
  reopen_store(f, &(facet_options){.coalesce = 1, .replicate = 1});
  char *dest = xasprintf("%s/snap.sqlite", f->dir);
  char *e = NULL;
  assert_int_equal(facet_store_snapshot(f->s, "alpha", NULL, dest, &e), -ENOENT);
  assert_non_null(e);
  free(e);
  assert_int_equal(facet_store_snapshot(f->s, "../x", NULL, dest, &e), -EINVAL);
  assert_int_equal(facet_store_snapshot(f->s, "alpha", "../x", dest, &e), -EINVAL);
  assert_int_equal(facet_store_snapshot(f->s, "alpha", NULL, NULL, &e), -EINVAL);
  run(f, "CREATE TABLE t (v)");
  /* the run is not committed yet */
  e = NULL;
  assert_int_equal(facet_store_snapshot(f->s, "alpha", NULL, dest, &e), -EBUSY);
  assert_non_null(strstr(e, "writes not committed yet"));
  free(e);
  gate(f);
  /* its record is not taken yet */
  assert_int_equal(facet_store_snapshot(f->s, "alpha", NULL, dest, &e), -EBUSY);
  assert_non_null(strstr(e, "change records not taken yet"));
  free(e);
  rec_list l = {0};
  assert_int_equal(facet_store_take_changes(f->s, collect, &l), 0);
  rec_list_clear(&l);
  e = NULL;
  assert_int_equal(facet_store_snapshot(f->s, "alpha", NULL, dest, &e), 0);
  assert_null(e);
  /* the snapshot is in WAL format with nothing in a WAL */
  size_t len;
  uint8_t *b = read_whole(dest, &len);
  assert_true(len >= 4096);
  assert_int_equal(b[18], 2);
  assert_int_equal(b[19], 2);
  free(b);
  char *wal = xasprintf("%s-wal", dest);
  assert_int_equal(access(wal, F_OK), -1);
  sqlite3 *db = NULL;
  assert_int_equal(sqlite3_open_v2(dest, &db, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
  expect_raw(db, "PRAGMA journal_mode", "wal");
  expect_raw(db, "SELECT count(*) FROM sqlite_schema WHERE name = 't'", "1");
  /* an open replica (its WAL beside it) is refused, and left alone */
  assert_int_equal(sqlite3_exec(db, "CREATE TABLE local (v)", NULL, NULL, NULL), SQLITE_OK);
  run(f, "INSERT INTO t VALUES (1)");
  gate(f);
  assert_int_equal(facet_store_take_changes(f->s, collect, &l), 0);
  assert_int_equal(l.n, 1);
  assert_int_equal(facet_record_apply(dest, l.item[0].rec, l.item[0].len, &e), -EBUSY);
  assert_non_null(strstr(e, "-wal exists"));
  free(e);
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
  assert_int_equal(access(wal, F_OK), -1);
  rec_list_clear(&l);
  free(wal);
  /* a loader child's facet */
  f->facet_id = "kid";
  run(f, "CREATE TABLE c (v)");
  gate(f);
  assert_int_equal(facet_store_take_changes(f->s, collect, &l), 0);
  rec_list_clear(&l);
  assert_int_equal(facet_store_snapshot(f->s, "alpha", "kid", dest, &e), 0);
  free(dest);
}

/* ---- change records: bad input ---- */

static uint32_t test_crc32c(const uint8_t *p, size_t n) {
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; i++) {
    c ^= p[i];
    for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
  }
  return ~c;
}

static void put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* A record made from the format in facets.h, not by the code under test:
 * n pages numbered from pgno, each filled with its number. */
static uint8_t *make_record(uint32_t page_size, uint32_t db_pages, uint32_t pgno, uint32_t n,
                            size_t *len) {
  *len = 24 + (size_t)n * (4 + page_size);
  uint8_t *r = xcalloc(1, *len);
  memcpy(r, "EFWR", 4);
  r[4] = 1;
  put32(r + 8, page_size);
  put32(r + 12, db_pages);
  put32(r + 16, n);
  for (uint32_t i = 0; i < n; i++) {
    uint8_t *pair = r + 20 + i * (4 + (size_t)page_size);
    put32(pair, pgno + i);
    memset(pair + 4, (int)(pgno + i), page_size);
  }
  put32(r + *len - 4, test_crc32c(r, *len - 4));
  return r;
}

static void reseal(uint8_t *r, size_t len) { put32(r + len - 4, test_crc32c(r, len - 4)); }

static void expect_bad(const char *path, const uint8_t *rec, size_t len, int want_rc,
                       const char *want) {
  char *e = NULL;
  int rc = facet_record_apply(path, rec, len, &e);
  if (rc != want_rc) fail_msg("apply: %d (%s), expected %d", rc, e ? e : "", want_rc);
  assert_non_null(e);
  if (strstr(e, want) == NULL) fail_msg("got \"%s\", expected \"%s\"", e, want);
  free(e);
}

static void test_record_bad_input(void **state) {
  fx *f = *state;
  /* the known CRC-32C check value: the checksum is the documented one */
  assert_int_equal(test_crc32c((const uint8_t *)"123456789", 9), 0xe3069283u);
  char *path = xasprintf("%s/replica.sqlite", f->dir);
  size_t len;
  uint8_t *r = make_record(4096, 3, 1, 3, &len);
  /* a hand-made record of every page makes a file of those pages */
  facet_record_info info;
  assert_int_equal(facet_record_read(r, len, &info, NULL), 0);
  assert_int_equal(info.db_pages, 3);
  assert_int_equal(info.n_pages, 3);
  assert_int_equal(facet_record_apply(path, r, len, NULL), 0);
  size_t flen;
  uint8_t *file = read_whole(path, &flen);
  assert_int_equal(flen, 3 * 4096);
  assert_int_equal(file[0], 1);
  assert_int_equal(file[4096 + 7], 2);
  assert_int_equal(file[2 * 4096 + 4095], 3);
  free(file);
  /* ...which is no SQLite file */
  uint8_t *one = make_record(4096, 3, 2, 1, &len);
  expect_bad(path, one, len, -EINVAL, "is not an SQLite database");
  free(one);
  unlink(path);

  /* a real facet as the replica from here on */
  run(f, "CREATE TABLE t (v)");
  assert_int_equal(facet_backup_to(f->dir, "alpha", NULL, path, NULL), 0);
  size_t before_len;
  uint8_t *before = read_whole(path, &before_len);
  free(r);
  r = make_record(4096, 2, 2, 1, &len);
  expect_bad(path, r, 10, -EINVAL, "too short");
  expect_bad(path, NULL, 0, -EINVAL, "too short");
  expect_bad(path, r, len - 1, -EINVAL, "truncated or padded");
  uint8_t *longer = xcalloc(1, len + 1);
  memcpy(longer, r, len);
  expect_bad(path, longer, len + 1, -EINVAL, "truncated or padded");
  free(longer);
  r[100] ^= 1;
  expect_bad(path, r, len, -EINVAL, "checksum mismatch (corrupt)");
  r[100] ^= 1;
  r[0] = 'X';
  expect_bad(path, r, len, -EINVAL, "not a facet change record");
  r[0] = 'E';
  r[4] = 2;
  reseal(r, len);
  expect_bad(path, r, len, -EINVAL, "version 2 is not supported");
  r[4] = 1;
  put32(r + 12, 0);
  reseal(r, len);
  expect_bad(path, r, len, -EINVAL, "a database of 0 pages");
  put32(r + 12, 2);
  put32(r + 20, 0);
  reseal(r, len);
  expect_bad(path, r, len, -EINVAL, "page number 0");
  put32(r + 8, 3000);
  expect_bad(path, r, len, -EINVAL, "page size 3000 is not a power of two");
  free(r);
  r = make_record(1024, 2, 2, 1, &len);
  expect_bad(path, r, len, -EINVAL, "the record's page size (1024) is not the replica's (4096)");
  free(r);
  /* a hot journal beside the replica would be played over the pages */
  char *journal = xasprintf("%s-journal", path);
  int fd = open(journal, O_WRONLY | O_CREAT, 0600);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, "x", 1), 1);
  close(fd);
  r = make_record(4096, 2, 2, 1, &len);
  expect_bad(path, r, len, -EBUSY, "-journal exists");
  unlink(journal);
  free(journal);
  /* not a file */
  char *dir = xasprintf("%s/facets", f->dir);
  expect_bad(dir, r, len, -EINVAL, "is not a regular file");
  free(dir);
  free(r);
  /* none of it changed the replica */
  size_t after_len;
  uint8_t *after = read_whole(path, &after_len);
  assert_int_equal(after_len, before_len);
  assert_memory_equal(after, before, before_len);
  free(after);
  free(before);
  free(path);
}

/* ---- the JavaScript API, in an isolate ---------------------------------- */

/* A host just big enough for one synchronous request: the worker's facet
 * binding calls land in facet_call, as the worker process routes them. */
typedef struct js_host {
  fx *f;
  facet_target target;
  int status;
  char *body;
  char *error;
  uint64_t cpu_budget_ns; /* per host call; 0 = none */
} js_host;

static void js_log(void *data, uint64_t token, iso_log_level level, const char *msg, size_t len) {
  (void)data, (void)token, (void)level;
  fprintf(stderr, "js: %.*s\n", (int)len, msg);
}

static int js_timer_start(void *data, uint64_t token, uint32_t id, double delay) {
  (void)data, (void)token, (void)id, (void)delay;
  return -1;
}

static void js_timer_cancel(void *data, uint32_t id) { (void)data, (void)id; }

static void js_respond(void *data, uint64_t token, const iso_response *res, const iso_error *e) {
  (void)token;
  js_host *h = data;
  if (res != NULL) {
    h->status = res->status;
    h->body = xstrndup((const char *)res->body, res->body_len);
  } else {
    h->error = xstrdup(e->message ? e->message : "?");
  }
}

static void js_done(void *data, uint64_t token) { (void)data, (void)token; }

static int js_call_sync(void *data, const iso_call *call, iso_wire *result) {
  js_host *h = data;
  uint64_t deadline = h->cpu_budget_ns ? time_thread_cpu_ns() + h->cpu_budget_ns : 0;
  return facet_call(h->f->s, h->f->tenant, NULL, 0, call, deadline, result);
}

static int js_call_values(void *data, const iso_call *call, const iso_wire_value *args,
                          uint32_t n_args, iso_numbers *numbers, iso_wire *result) {
  js_host *h = data;
  if (strcmp(call->op, "exec") != 0) return 1;
  uint64_t deadline = h->cpu_budget_ns ? time_thread_cpu_ns() + h->cpu_budget_ns : 0;
  h->target.tenant = h->f->tenant;
  h->target.token = call->token;
  h->target.cpu_deadline_ns = deadline;
  return facet_exec(h->f->s, &h->target, args, n_args, numbers, result);
}

static char *read_fixture(const char *name) {
  /* The fixtures live beside the end-to-end tests, found from this file. */
  char *dir = xstrdup(__FILE__);
  char *slash = strrchr(dir, '/');
  if (slash != NULL) *slash = '\0';
  char *path = xasprintf("%s/../e2e/fixtures/facets/%s", slash ? dir : ".", name);
  FILE *fp = fopen(path, "rb");
  if (fp == NULL) fail_msg("cannot open %s", path);
  char *buf = xmalloc(1 << 20);
  size_t n = fread(buf, 1, (1 << 20) - 1, fp);
  buf[n] = '\0';
  fclose(fp);
  free(path);
  free(dir);
  return buf;
}

/* Loads a fixture as worker `alpha` with DB bound to its facet, runs one
 * GET request, and returns the response body (caller frees). */
static char *js_get(fx *f, const char *fixture, const char *path, js_host *h) {
  assert_int_equal(iso_platform_init(), 0);
  char *src = read_fixture(fixture);
  iso_module m = {"index.js", src, strlen(src)};
  iso_host host = {h, js_log, js_timer_start, js_timer_cancel, js_respond, js_done, NULL};
  iso_host_calls calls = {js_call_sync, NULL, js_call_values};
  iso_worker_options o = {.host = &host, .calls = &calls, .limits = {0, 5000},
                          .modules = &m, .n_modules = 1, .main_module = "index.js",
                          .bindings_json = "{\"DB\": {\"type\": \"facet\"}}"};
  iso_error e = {0};
  h->f = f;
  iso_worker *w = iso_worker_create(&o, &e);
  if (w == NULL) fail_msg("load %s: %s", fixture, e.message);
  char url[256];
  snprintf(url, sizeof url, "http://alpha.localhost%s", path);
  iso_request req = {"GET", 3, url, strlen(url), NULL, 0, NULL, 0};
  assert_int_equal(iso_worker_dispatch(w, 1, &req), 0);
  iso_worker_free(w);
  facet_store_release(f->s, 1);
  free(src);
  if (h->error != NULL) fail_msg("%s %s: %s", fixture, path, h->error);
  assert_non_null(h->body);
  return h->body;
}

static void test_js_api(void **state) {
  fx *f = *state;
  js_host h = {0};
  char *body = js_get(f, "api.js", "/", &h);
  json_error_t je;
  json_t *r = json_loads(body, 0, &je);
  if (r == NULL) fail_msg("not JSON: %s", body);
  json_t *failed = json_object_get(r, "failed");
  size_t i;
  json_t *v;
  json_array_foreach(failed, i, v) {
    fprintf(stderr, "FAILED %s: %s\n", json_string_value(json_object_get(v, "name")),
            json_string_value(json_object_get(v, "error")));
  }
  assert_int_equal(json_array_size(failed), 0);
  assert_true(json_integer_value(json_object_get(r, "passed")) >= 10);
  json_decref(r);
  free(body);
}

/* SQL at the CPU deadline surfaces in JavaScript as an Error. */
static void test_js_cpu_limit(void **state) {
  fx *f = *state;
  js_host h = {.cpu_budget_ns = 30 * 1000000ull};
  char *body = js_get(f, "counter.js", "/spin", &h);
  assert_string_equal(body, "Error: exceeded CPU limit");
  free(body);
}

/* ---- benchmark ---------------------------------------------------------- */

/* Elapsed wall and CPU (this thread) time of one measured loop. */
typedef struct bench_clock {
  uint64_t wall, cpu;
} bench_clock;

static bench_clock bench_start(void) { return (bench_clock){time_mono_ns(), time_thread_cpu_ns()}; }

/* Prints "[ops per wall second, ops per CPU second]". */
static void bench_rate(const char *key, int n, bench_clock t0, int last) {
  double wall = (double)(time_mono_ns() - t0.wall) / 1e9;
  double cpu = (double)(time_thread_cpu_ns() - t0.cpu) / 1e9;
  printf("\"%s\":[%.0f,%.0f]%s", key, n / wall, n / cpu, last ? "" : ",");
}

/* Runs sql with one parameter: a number, or "value N" when text is set;
 * none when n is NAN. */
static void bench_exec(fx *f, const char *sql, double n, int text) {
  iso_wire a;
  iso_wire_init(&a);
  iso_wire_array(&a, isnan(n) ? 1 : 2);
  iso_wire_string(&a, sql, strlen(sql));
  if (text) {
    char v[32];
    int len = snprintf(v, sizeof v, "value %d", (int)n);
    iso_wire_string(&a, v, (size_t)len);
  } else if (!isnan(n)) {
    iso_wire_number(&a, n);
  }
  iso_call call = {.token = f->token, .binding = "DB", .op = "exec",
                   .args = a.data, .args_len = a.len};
  iso_wire res;
  iso_wire_init(&res);
  if (facet_call(f->s, f->tenant, NULL, 0, &call, 0, &res) != 0) {
    fprintf(stderr, "bench: %s failed\n", sql);
    exit(1);
  }
  iso_wire_free(&res);
  iso_wire_free(&a);
}

static void bench_op(fx *f, const char *op) {
  iso_wire a, res;
  iso_wire_init(&a);
  iso_wire_init(&res);
  iso_wire_array(&a, 0);
  iso_call call = {.token = f->token, .binding = "DB", .op = op, .args = a.data, .args_len = a.len};
  if (facet_call(f->s, f->tenant, NULL, 0, &call, 0, &res) != 0) exit(1);
  iso_wire_free(&a);
  iso_wire_free(&res);
}

static int env_int(const char *name, int fallback) {
  const char *v = getenv(name);
  return v != NULL && atoi(v) > 0 ? atoi(v) : fallback;
}

/* facet_call from C: the same operations as tests/bench/facets.sh runs
 * through JavaScript. One JSON line per synchronous mode. */
static int bench(const char *dir_arg) {
  char dir[256];
  if (dir_arg != NULL) {
    snprintf(dir, sizeof dir, "%s", dir_arg);
  } else {
    if (make_temp_dir(dir, sizeof dir, "facets-bench") != 0) return 1;
  }
  const char *only = getenv("SYNC"); /* FULL or NORMAL: just that one */
  for (int mode = 0; mode < 2; mode++) {
    if (only != NULL && strcmp(only, mode ? "NORMAL" : "FULL") != 0) continue;
    facet_options o = {.synchronous = mode ? FACET_SYNC_NORMAL : FACET_SYNC_FULL};
    facet_store *s = facet_store_new(dir, &o);
    if (s == NULL) return 1;
    fx f = {.s = s, .tenant = mode ? "bench-normal" : "bench-full", .token = 1};
    bench_exec(&f, "CREATE TABLE IF NOT EXISTS kv (k INTEGER PRIMARY KEY, v TEXT)", NAN, 0);
    const char *ins = "INSERT INTO kv (v) VALUES (?)";
    int n = env_int("N_AUTO", 300), m = env_int("N_TXN", 200000), reads = env_int("N_READ", 200000);
    printf("{\"synchronous\":\"%s\",", mode ? "NORMAL" : "FULL");
    bench_clock t0 = bench_start();
    for (int i = 0; i < n; i++) bench_exec(&f, ins, i, 1);
    bench_rate("insert", n, t0, 0);
    t0 = bench_start();
    bench_op(&f, "begin");
    for (int i = 0; i < m; i++) bench_exec(&f, ins, i, 1);
    bench_op(&f, "commit");
    bench_rate("insert_txn", m, t0, 0);
    const char *sel = "SELECT v FROM kv WHERE k = ?";
    t0 = bench_start();
    for (int i = 0; i < reads; i++) bench_exec(&f, sel, (double)(1 + ((int64_t)i * 7919) % (m + n)), 0);
    bench_rate("read", reads, t0, 1);
    printf("}\n");
    facet_store_free(s);
  }
  if (dir_arg == NULL) rm_rf(dir);
  return 0;
}

/* What replication's capture costs: small commits (each statement its own,
 * as without coalescing) and one 50,000-insert transaction, with replicate
 * off and on; on, each commit's record is taken as a host would, and the
 * big one is applied to a snapshot. One JSON line per mode: microseconds
 * of wall and CPU time per small commit, milliseconds for the big one,
 * record bytes. */
typedef struct bench_take {
  size_t bytes;
  uint8_t *last; /* a copy of the last record */
} bench_take;

static int bench_take_cb(void *arg, const char *tenant, const char *facet_id, const void *rec,
                         size_t len) {
  (void)tenant, (void)facet_id;
  bench_take *t = arg;
  t->bytes += len;
  free(t->last);
  t->last = xmalloc(len);
  memcpy(t->last, rec, len);
  return 0;
}

static void bench_replicate_round(const char *dir, int replicate, int normal, int n, int m) {
  facet_options o = {.synchronous = normal ? FACET_SYNC_NORMAL : FACET_SYNC_FULL,
                     .replicate = replicate};
  facet_store *s = facet_store_new(dir, &o);
  if (s == NULL) exit(1);
  char tenant[32];
  snprintf(tenant, sizeof tenant, "repl%d%d", replicate, normal);
  fx f = {.s = s, .tenant = tenant, .token = 1};
  bench_exec(&f, "CREATE TABLE kv (k INTEGER PRIMARY KEY, v TEXT)", NAN, 0);
  bench_take t = {0};
  facet_store_take_changes(s, bench_take_cb, &t);
  t.bytes = 0;
  const char *ins = "INSERT INTO kv (v) VALUES (?)";
  bench_clock t0 = bench_start();
  for (int i = 0; i < n; i++) {
    bench_exec(&f, ins, i, 1);
    facet_store_take_changes(s, bench_take_cb, &t);
  }
  double small_wall = (double)(time_mono_ns() - t0.wall) / 1e3 / n;
  double small_cpu = (double)(time_thread_cpu_ns() - t0.cpu) / 1e3 / n;
  size_t small_bytes = t.bytes / (size_t)n;
  char *snap = xasprintf("%s/%s-replica.sqlite", dir, tenant);
  if (facet_store_snapshot(s, tenant, NULL, snap, NULL) != 0) exit(1);
  t.bytes = 0;
  t0 = bench_start();
  bench_op(&f, "begin");
  for (int i = 0; i < m; i++) bench_exec(&f, ins, i, 1);
  bench_op(&f, "commit");
  facet_store_take_changes(s, bench_take_cb, &t);
  double big_wall = (double)(time_mono_ns() - t0.wall) / 1e6;
  double big_cpu = (double)(time_thread_cpu_ns() - t0.cpu) / 1e6;
  uint64_t a0 = time_mono_ns();
  if (replicate && facet_record_apply(snap, t.last, t.bytes, NULL) != 0) exit(1);
  double apply_ms = (double)(time_mono_ns() - a0) / 1e6;
  printf("{\"synchronous\":\"%s\",\"replicate\":%d,\"small_commit_us\":[%.1f,%.1f],"
         "\"small_record_bytes\":%zu,\"txn_%d_ms\":[%.1f,%.1f],\"txn_record_bytes\":%zu,"
         "\"apply_ms\":%.1f}\n",
         normal ? "NORMAL" : "FULL", replicate, small_wall, small_cpu, small_bytes, m, big_wall,
         big_cpu, t.bytes, apply_ms);
  free(t.last);
  free(snap);
  facet_store_free(s);
}

static int bench_replicate(const char *dir_arg) {
  char dir[256];
  if (dir_arg != NULL) {
    snprintf(dir, sizeof dir, "%s", dir_arg);
  } else if (make_temp_dir(dir, sizeof dir, "facets-bench-repl") != 0) {
    return 1;
  }
  int n = env_int("N_AUTO", 2000), m = env_int("N_TXN", 50000);
  for (int round = 0; round < 4; round++) bench_replicate_round(dir, round % 2, round / 2, n, m);
  if (dir_arg == NULL) rm_rf(dir);
  return 0;
}

/* The JavaScript path without HTTP: env.DB.exec in an isolate of this
 * process, with and without a CPU clock read per host call (what a host
 * computing each call's deadline pays). */
static const char bench_js_source[] =
    "export default { fetch(request, env) {\n"
    "  const url = new URL(request.url), n = Number(url.searchParams.get('n')), sql = env.DB;\n"
    "  if (url.pathname === '/setup') sql.exec('CREATE TABLE IF NOT EXISTS kv (k INTEGER PRIMARY KEY, v TEXT)');\n"
    "  if (url.pathname === '/insert') sql.transactionSync(() => {\n"
    "    for (let i = 0; i < n; i++) sql.exec('INSERT INTO kv (v) VALUES (?)', 'value ' + i);\n"
    "  });\n"
    "  if (url.pathname === '/insert_pre') {\n"
    "    const values = Array.from({ length: 1024 }, (_, i) => 'value ' + i);\n"
    "    sql.transactionSync(() => {\n"
    "      for (let i = 0; i < n; i++) sql.exec('INSERT INTO kv (v) VALUES (?)', values[i & 1023]);\n"
    "    });\n"
    "  }\n"
    "  if (url.pathname === '/read') {\n"
    "    const max = sql.exec('SELECT max(k) AS m FROM kv').one().m;\n"
    "    for (let i = 0; i < n; i++) sql.exec('SELECT v FROM kv WHERE k = ?', 1 + ((i * 7919) % max)).one();\n"
    "  }\n"
    "  return new Response('ok');\n"
    "} };\n";

/* Runs one request; prints its rate under `key` unless key is NULL. */
static void bench_js_run(iso_worker *w, js_host *h, const char *path, int n, const char *key,
                         int last) {
  char url[128];
  snprintf(url, sizeof url, "http://bench.localhost%s?n=%d", path, n);
  iso_request req = {"GET", 3, url, strlen(url), NULL, 0, NULL, 0};
  free(h->body);
  h->body = NULL;
  bench_clock t0 = bench_start();
  if (iso_worker_dispatch(w, 1, &req) != 0 || h->body == NULL || strcmp(h->body, "ok") != 0) {
    fprintf(stderr, "bench-js %s: %s\n", path, h->error ? h->error : h->body ? h->body : "?");
    exit(1);
  }
  if (key != NULL) bench_rate(key, n, t0, last);
}

static int bench_js(void) {
  char dir[256];
  if (make_temp_dir(dir, sizeof dir, "facets-bench-js") != 0 || iso_platform_init() != 0) return 1;
  facet_store *s = facet_store_new(dir, NULL);
  fx f = {.s = s, .tenant = "bench", .token = 1};
  int n = env_int("N_TXN", 200000), reads = env_int("N_READ", 200000);
  int clocks = env_int("CLOCK_VARIANTS", 2); /* 1: only without the per-call clock */
  for (int clock = 0; clock < clocks; clock++) {
    js_host h = {.f = &f, .cpu_budget_ns = clock ? 30000 * 1000000ull : 0};
    iso_module m = {"index.js", bench_js_source, strlen(bench_js_source)};
    iso_host host = {&h, js_log, js_timer_start, js_timer_cancel, js_respond, js_done, NULL};
    iso_host_calls calls = {js_call_sync, NULL, js_call_values};
    iso_worker_options o = {.host = &host, .calls = &calls, .limits = {0, 30000},
                            .modules = &m, .n_modules = 1, .main_module = "index.js",
                            .bindings_json = "{\"DB\": {\"type\": \"facet\"}}"};
    iso_error e = {0};
    iso_worker *w = iso_worker_create(&o, &e);
    if (w == NULL) {
      fprintf(stderr, "bench-js: %s\n", e.message);
      return 1;
    }
    bench_js_run(w, &h, "/setup", 0, NULL, 0);
    bench_js_run(w, &h, "/insert", 1000, NULL, 0); /* warm up */
    printf("{\"cpu_clock_per_call\":%s,", clock ? "true" : "false");
    bench_js_run(w, &h, "/insert", n, "insert_txn", 0);
    bench_js_run(w, &h, "/insert_pre", n, "insert_pre", 0);
    bench_js_run(w, &h, "/read", reads, "read", 1);
    printf("}\n");
    iso_worker_free(w);
    free(h.body);
  }
  facet_store_free(s);
  rm_rf(dir);
  return 0;
}

/* ALTER TABLE ... RENAME rewrites the temporary schema table as well: the
 * authorizer lets that through, and still nothing else writes it. */
static void test_alter_table(void **state) {
  fx *f = *state;
  run(f, "CREATE TABLE r (a, b); CREATE VIEW rv AS SELECT a FROM r; "
         "CREATE TRIGGER rt AFTER INSERT ON r BEGIN SELECT 1; END");
  run(f, "ALTER TABLE r RENAME TO r2");
  run(f, "ALTER TABLE r2 RENAME COLUMN a TO aa");
  run(f, "ALTER TABLE r2 DROP COLUMN b");
  run(f, "ALTER TABLE r2 ADD COLUMN c");
  tv *res = ok(f, "SELECT sql FROM sqlite_schema WHERE name = 'rv'", "");
  assert_string_equal(text(res, 0, 0), "CREATE VIEW rv AS SELECT aa FROM \"r2\"");
  tv_free(res);
  run(f, "INSERT INTO r2 VALUES (1, 2)");
  assert_true(count_rows(f, "r2") == 1);
  expect_err(f, "UPDATE temp.sqlite_master SET sql = 'x'", "may not be modified");
  expect_err(f, "UPDATE sqlite_temp_schema SET sql = 'x'", "may not be modified");
  expect_err(f, "INSERT INTO temp.sqlite_master VALUES ('table', 'x', 'x', 0, 'CREATE TABLE x (a)')",
             "temporary tables");
  expect_err(f, "CREATE TEMP TRIGGER tt AFTER INSERT ON r2 BEGIN SELECT 1; END", "temporary");
}

/* Errors say what happened, and SQL text is never cut short in silence. */
static void test_errors_say_what(void **state) {
  fx *f = *state;
  expect_err(f, "SELECT zeroblob(1000000000)", "string or blob too big: SQLITE_TOOBIG");
  expect_err(f, "SELECT randomblob(2000000000)", "string or blob too big: SQLITE_TOOBIG");
  run(f, "CREATE TABLE keep (v); INSERT INTO keep VALUES (1)");
  /* SQLite stops reading at a NUL: what follows it would be dropped */
  static const char nul_sql[] = "SELECT 1 AS a\0; DROP TABLE keep";
  iso_wire args;
  iso_wire_init(&args);
  iso_wire_array(&args, 1);
  iso_wire_string(&args, nul_sql, sizeof nul_sql - 1);
  tv *res;
  assert_int_equal(call_op(f, "exec", &args, &res), -1);
  assert_string_equal(tv_get(res, "message")->str, "SQL text contains a NUL character (U+0000)");
  tv_free(res);
  iso_wire_free(&args);
  assert_true(count_rows(f, "keep") == 1);
  /* NUL inside a string parameter is data, not SQL */
  res = ok(f, "SELECT length(CAST(? AS BLOB)) AS n", "b", "a\0b", (size_t)3);
  assert_true(num(res, 0, 0) == 3);
  tv_free(res);
}

/* A row too large for a result, and a statement that wants more memory than
 * SQLite may use in the process, fail as errors that say so; the facet
 * serves the next statement. */
static void test_memory_limits(void **state) {
  fx *f = *state;
  expect_err(f, "SELECT zeroblob(40000000) AS a, zeroblob(40000000) AS b",
             "query result is larger than 64 MB");
  facet_options o = {.heap_limit_mb = 256};
  facet_store *small = facet_store_new(f->dir, &o);
  assert_non_null(small);
  /* without the limit, 2,000 such columns would be 120 GB in one step */
  expect_err(f, "SELECT randomblob(60000000), randomblob(60000000), randomblob(60000000), "
                "randomblob(60000000), randomblob(60000000), randomblob(60000000)",
             "out of memory: the statement needs more than the 256 MB SQLite may use in this "
             "process");
  tv *res = ok(f, "SELECT length(randomblob(60000000)) AS n", "");
  assert_true(num(res, 0, 0) == 60000000);
  tv_free(res);
  facet_store_free(small);
  o.heap_limit_mb = FACET_DEFAULT_HEAP_MB;
  facet_store_free(facet_store_new(f->dir, &o));
}

/* SQL too long for the statement cache (past 4 KiB) runs once, by text
 * and by "prepare", as often as it comes: it used to be run after the
 * cache had already let it go. */
static void test_long_sql(void **state) {
  fx *f = *state;
  run(f, "CREATE TABLE long_sql (a, b)");
  size_t pad = 6000;
  char *sql = xmalloc(pad + 64);
  int n = snprintf(sql, pad + 64, "INSERT INTO long_sql VALUES (?, ?) -- ");
  memset(sql + n, 'x', pad);
  sql[n + pad] = '\0';
  for (int i = 0; i < 3; i++) {
    tv *res = ok(f, sql, "ds", (double)i, "long");
    tv_free(res);
  }
  assert_true(count_rows(f, "long_sql") == 3);
  tv *res;
  assert_int_equal(prepare_id(f, sql, &res), 0);
  assert_int_equal(res->type, ISO_WIRE_NULL); /* no id: exec sends the text */
  tv_free(res);
  free(sql);
}

/* SQLite's work on another thread: a table written and read on a
 * connection of its own. Returns the heap counted just before the thread
 * ends, its kept small blocks included. */
static void *sqlite_on_a_thread(void *unused) {
  (void)unused;
  sqlite3 *db = NULL;
  static uint64_t used_at_end;
  if (sqlite3_open(":memory:", &db) != SQLITE_OK) return NULL;
  int rc = sqlite3_exec(db, "CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)", NULL, NULL, NULL);
  for (int i = 0; rc == SQLITE_OK && i < 200; i++) {
    char sql[96];
    snprintf(sql, sizeof sql, "INSERT INTO t (v) VALUES ('value %d'); SELECT v FROM t WHERE k = %d",
             i, i + 1);
    rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
  }
  sqlite3_close(db);
  used_at_end = facet_heap_used();
  return rc == SQLITE_OK ? &used_at_end : NULL;
}

/* Small blocks SQLite frees are kept by their thread for the next ones
 * (store.c), and given back when the thread ends: the heap counts no more
 * afterwards than before the thread ran. */
static void test_small_blocks_go_back_with_their_thread(void **state) {
  (void)state;
  uint64_t before = facet_heap_used();
  pthread_t thread;
  void *result = NULL;
  assert_int_equal(pthread_create(&thread, NULL, sqlite_on_a_thread, NULL), 0);
  assert_int_equal(pthread_join(thread, &result), 0);
  assert_non_null(result);
  /* it did keep some: the test would prove nothing otherwise */
  assert_true(*(uint64_t *)result > before);
  assert_int_equal(facet_heap_used(), before);
}

/* printf('%.*c', 2000000000, 'x') is NULL (too long) as in SQLite, without
 * SQLite's two billion idle turns inside one call that the CPU deadline
 * cannot interrupt; printf() and format() otherwise answer as SQLite's. */
static void test_printf(void **state) {
  fx *f = *state;
  /* a second of CPU per bomb before: 1,000 of them could not finish in time */
  f->deadline = time_thread_cpu_ns() + 2000 * 1000000ull;
  tv *res = ok(f, "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 1000) "
                  "SELECT count(printf('%.*c', 2000000000, 'x')) AS n, "
                  "count(format('%d%.2000000000c', 1, 'x')) AS m, "
                  "count(printf('%.*c', -2000000000, 'x')) AS o FROM c", "");
  assert_true(num(res, 0, 0) == 0 && num(res, 0, 1) == 0 && num(res, 0, 2) == 0);
  tv_free(res);
  f->deadline = 0;
  res = ok(f, "SELECT printf('%05d|%-5s|%.2f|%x|%q|%%|%c|%.*c|%5.3s', 42, 'ab', 3.14159, 255, "
              "'it''s', 'z', 3, 'y', 'abcdef') AS a, format('%s=%d', 'k', 1) AS b, "
              "printf(5) AS c, printf(NULL) AS d, printf() AS e, length(printf('%.*c', 1000, 'y')) AS g", "");
  assert_string_equal(text(res, 0, 0), "00042|ab   |3.14|ff|it''s|%|z|yyy|  abc");
  assert_string_equal(text(res, 0, 1), "k=1");
  assert_string_equal(text(res, 0, 2), "5");
  assert_int_equal(cell(res, 0, 3)->type, ISO_WIRE_NULL);
  assert_int_equal(cell(res, 0, 4)->type, ISO_WIRE_NULL);
  assert_true(num(res, 0, 5) == 1000);
  tv_free(res);
  /* usable where the schema is untrusted: views and generated columns */
  run(f, "CREATE TABLE p (a, b AS (printf('<%s>', a))); CREATE VIEW pv AS SELECT printf('%03d', 7) AS v");
  run(f, "INSERT INTO p (a) VALUES ('q')");
  res = ok(f, "SELECT b, (SELECT v FROM pv) FROM p", "");
  assert_string_equal(text(res, 0, 0), "<q>");
  assert_string_equal(text(res, 0, 1), "007");
  tv_free(res);
}

int main(int argc, char **argv) {
  log_init("facets_test", LOG_ERROR);
  if (argc >= 2 && strcmp(argv[1], "--bench") == 0) return bench(argc >= 3 ? argv[2] : NULL);
  if (argc >= 2 && strcmp(argv[1], "--bench-js") == 0) return bench_js();
  if (argc >= 2 && strcmp(argv[1], "--bench-replicate") == 0)
    return bench_replicate(argc >= 3 ? argv[2] : NULL);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_types_in_and_out, setup, teardown),
      cmocka_unit_test_setup_teardown(test_unsupported_parameters, setup, teardown),
      cmocka_unit_test_setup_teardown(test_sql_errors_have_no_effect, setup, teardown),
      cmocka_unit_test_setup_teardown(test_statement_ids, setup, teardown),
      cmocka_unit_test_setup_teardown(test_exec_decoded, setup, teardown),
      cmocka_unit_test_setup_teardown(test_ref_follows_its_connection, setup, teardown),
      cmocka_unit_test_setup_teardown(test_long_sql, setup, teardown),
      cmocka_unit_test_setup_teardown(test_small_blocks_go_back_with_their_thread, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_multiple_statements, setup, teardown),
      cmocka_unit_test_setup_teardown(test_rows_read_and_written, setup, teardown),
      cmocka_unit_test_setup_teardown(test_transactions, setup, teardown),
      cmocka_unit_test_setup_teardown(test_abandoned_transactions, setup, teardown),
      cmocka_unit_test_setup_teardown(test_coalescing, setup, teardown),
      cmocka_unit_test_setup_teardown(test_coalescing_loses_nothing_silently, setup, teardown),
      cmocka_unit_test_setup_teardown(test_checkpoint_after_gate, setup, teardown),
      cmocka_unit_test_setup_teardown(test_authorizer, setup, teardown),
      cmocka_unit_test_setup_teardown(test_foreign_keys_enforced, setup, teardown),
      cmocka_unit_test_setup_teardown(test_size_limit, setup, teardown),
      cmocka_unit_test_setup_teardown(test_cpu_deadline, setup, teardown),
      cmocka_unit_test_setup_teardown(test_paths, setup, teardown),
      cmocka_unit_test_setup_teardown(test_run_facets, setup, teardown),
      cmocka_unit_test_setup_teardown(test_isolation_between_tenants, setup, teardown),
      cmocka_unit_test_setup_teardown(test_lru_and_close, setup, teardown),
      cmocka_unit_test_setup_teardown(test_two_processes_write_at_once, setup, teardown),
      cmocka_unit_test_setup_teardown(test_describe_backup_purge, setup, teardown),
      cmocka_unit_test_setup_teardown(test_reopen_keeps_data, setup, teardown),
      cmocka_unit_test_setup_teardown(test_alter_table, setup, teardown),
      cmocka_unit_test_setup_teardown(test_errors_say_what, setup, teardown),
      cmocka_unit_test_setup_teardown(test_memory_limits, setup, teardown),
      cmocka_unit_test_setup_teardown(test_printf, setup, teardown),
      cmocka_unit_test_setup_teardown(test_replica_follows_every_kind_of_commit, setup, teardown),
      cmocka_unit_test_setup_teardown(test_replica_without_coalescing, setup, teardown),
      cmocka_unit_test_setup_teardown(test_replica_of_two_new_facets, setup, teardown),
      cmocka_unit_test_setup_teardown(test_replica_records_only_commits, setup, teardown),
      cmocka_unit_test_setup_teardown(test_replica_transaction_past_the_heap_limit, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_replica_serves_as_the_facet, setup, teardown),
      cmocka_unit_test_setup_teardown(test_snapshot, setup, teardown),
      cmocka_unit_test_setup_teardown(test_record_bad_input, setup, teardown),
      /* V8 starts threads: after every test that forks */
      cmocka_unit_test_setup_teardown(test_js_api, setup, teardown),
      cmocka_unit_test_setup_teardown(test_js_cpu_limit, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
