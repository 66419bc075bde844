/*
 * facet_call: the operations of the facet binding. Arguments arrive and
 * results leave in the isolate wire format; rows are encoded straight from
 * the statement into the result buffer.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <time.h>

#include "base.h"
#include "internal.h"
#include "isolate.h"

/* Largest encoded result: rows beyond this belong behind a LIMIT. */
#define RESULT_MAX (64u << 20)

/* JavaScript's Number.MAX_SAFE_INTEGER: larger integers leave as BigInt. */
#define SAFE_INTEGER 9007199254740991LL

#define PARAMS_ON_STACK 16

/* The steps of an exec by a cached statement's id, the path of nearly every
 * exec (the runtime sends a statement's id from its second run on), are
 * written as functions but compiled into facet_exec as one: each call and
 * return between them cost an exec more than its instructions said, on top
 * of the calls of V8 and SQLite around it (docs/benchmarks.md, facets). */
#define EXEC_STEP static inline __attribute__((always_inline))

typedef struct exec_ctx {
  facet_conn *c;
  const iso_call *call;   /* NULL for facet_exec */
  uint64_t token;
  iso_wire *out;
  size_t start;           /* out->len when the call began */
  const char *tenant;
  uint64_t cpu_deadline_ns;
  const iso_wire_value *params;
  iso_wire_value *params_owned; /* read from the wire into the heap: freed at the end */
  uint32_t n_params;
  iso_numbers *numbers;   /* where a statement without columns may answer (facet_exec) */
  int counts_only;        /* ... and this one did: no wire value was started */
  uint64_t rows_read;
  int64_t changes_before;
  uint64_t heap_refusals; /* facet__heap_refusals() when the call began */
} exec_ctx;

/* Every field set one by one: an initializer that leaves fields to be
 * zeroed made the compiler clear the whole struct with `rep stos`, whose
 * start-up alone cost an exec more than the rest of its set-up
 * (docs/benchmarks.md, facets). */
EXEC_STEP void exec_ctx_init(
    exec_ctx *x, const iso_call *call, uint64_t token, iso_wire *out, const char *tenant,
    uint64_t cpu_deadline_ns, iso_numbers *numbers) {
  x->c = NULL;
  x->call = call;
  x->token = token;
  x->out = out;
  x->start = out->len;
  x->tenant = tenant;
  x->cpu_deadline_ns = cpu_deadline_ns;
  x->params = NULL;
  x->params_owned = NULL;
  x->n_params = 0;
  x->numbers = numbers;
  x->counts_only = 0;
  x->rows_read = 0;
  x->changes_before = 0;
  x->heap_refusals = facet__heap_refusals();
}

/* ---- Results ---- */

/* Errors are cold: the compiler moves the code that reports them out of
 * the way of an exec's common path, which is short enough then to stay in
 * the instruction cache beside SQLite's and V8's. */
static void put_error(iso_wire *out, size_t start, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 4, 5), cold));
static void put_sqlite_error(exec_ctx *x, int rc, const char *msg) __attribute__((cold));

/* The message of the last error a call answered, kept for the output gate:
 * when that error also cost the run its earlier writes, the gate says why
 * in the same words JavaScript saw. (A store is used from one thread.) */
static __thread char last_error[1024];

/* Replaces whatever the call wrote so far with one error value. */
static void put_error(iso_wire *out, size_t start, const char *name, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  snprintf(last_error, sizeof last_error, "%s", msg);
  out->len = start;
  iso_wire_object(out, 2);
  iso_wire_string(out, "name", 4);
  iso_wire_string(out, name, strlen(name));
  iso_wire_string(out, "message", 7);
  iso_wire_string(out, msg, strlen(msg));
}

/* SQLite's primary result codes by name, as they end Durable Objects'
 * error messages ("UNIQUE constraint failed: t.id: SQLITE_CONSTRAINT"). */
static const char *code_name(int rc) {
  static const char *const names[] = {
      [SQLITE_ERROR] = "SQLITE_ERROR",       [SQLITE_INTERNAL] = "SQLITE_INTERNAL",
      [SQLITE_PERM] = "SQLITE_PERM",         [SQLITE_ABORT] = "SQLITE_ABORT",
      [SQLITE_BUSY] = "SQLITE_BUSY",         [SQLITE_LOCKED] = "SQLITE_LOCKED",
      [SQLITE_NOMEM] = "SQLITE_NOMEM",       [SQLITE_READONLY] = "SQLITE_READONLY",
      [SQLITE_INTERRUPT] = "SQLITE_INTERRUPT", [SQLITE_IOERR] = "SQLITE_IOERR",
      [SQLITE_CORRUPT] = "SQLITE_CORRUPT",   [SQLITE_NOTFOUND] = "SQLITE_NOTFOUND",
      [SQLITE_FULL] = "SQLITE_FULL",         [SQLITE_CANTOPEN] = "SQLITE_CANTOPEN",
      [SQLITE_PROTOCOL] = "SQLITE_PROTOCOL", [SQLITE_EMPTY] = "SQLITE_EMPTY",
      [SQLITE_SCHEMA] = "SQLITE_SCHEMA",     [SQLITE_TOOBIG] = "SQLITE_TOOBIG",
      [SQLITE_CONSTRAINT] = "SQLITE_CONSTRAINT", [SQLITE_MISMATCH] = "SQLITE_MISMATCH",
      [SQLITE_MISUSE] = "SQLITE_MISUSE",     [SQLITE_NOLFS] = "SQLITE_NOLFS",
      [SQLITE_AUTH] = "SQLITE_AUTH",         [SQLITE_FORMAT] = "SQLITE_FORMAT",
      [SQLITE_RANGE] = "SQLITE_RANGE",       [SQLITE_NOTADB] = "SQLITE_NOTADB",
  };
  int primary = rc & 0xff;
  if (primary > 0 && (size_t)primary < ARRAY_SIZE(names) && names[primary] != NULL)
    return names[primary];
  return "SQLITE_ERROR";
}

/* Whether the facet's file system has more than a little space left. */
static int device_has_room(facet_conn *c) {
  const char *file = sqlite3_db_filename(c->db, "main");
  struct statvfs st;
  if (file == NULL || statvfs(file, &st) != 0) return 0;
  return (uint64_t)st.f_bavail * st.f_frsize > (8u << 20);
}

/* Turns a failed SQLite call into the error JavaScript sees. `msg` is
 * sqlite3_errmsg() taken right after the failure. */
static void put_sqlite_error(exec_ctx *x, int rc, const char *msg) {
  facet_conn *c = x->c;
  int primary = rc & 0xff;
  if (c->interrupted || primary == SQLITE_INTERRUPT) {
    put_error(x->out, x->start, "Error", "exceeded CPU limit");
  } else if (primary == SQLITE_FULL) {
    int64_t pages = facet__conn_query_int(c, "PRAGMA page_count");
    uint64_t limit_pages = c->limit_mb * 1024 * 1024 / (uint64_t)c->page_size;
    /* After SQLite rolled the whole transaction back the page count no
     * longer shows the limit it reached: the device's free space tells. */
    if ((pages >= 0 && (uint64_t)pages + 16 >= limit_pages) || device_has_room(c))
      put_error(x->out, x->start, "Error", "facet is full: its size limit is %llu MB",
                (unsigned long long)c->limit_mb);
    else
      put_error(x->out, x->start, "Error", "facet is full: no space left on the device");
  } else if (primary == SQLITE_NOMEM && facet__heap_refusals() != x->heap_refusals) {
    put_error(x->out, x->start, "Error",
              "out of memory: the statement needs more than the %llu MB SQLite may use in "
              "this process",
              (unsigned long long)facet__heap_limit_mb());
  } else if (primary == SQLITE_BUSY || primary == SQLITE_LOCKED) {
    put_error(x->out, x->start, "Error",
              "facet is busy: another process held it for more than %u ms",
              c->store->opt.busy_timeout_ms);
  } else if (c->denied != NULL) {
    /* Denied functions fail as SQLITE_ERROR, other denials as SQLITE_AUTH:
     * either way the authorizer's reason says more than "not authorized". */
    put_error(x->out, x->start, "Error", "%s", c->denied);
  } else {
    if (primary == SQLITE_CORRUPT || primary == SQLITE_IOERR || primary == SQLITE_NOTADB)
      log_write(LOG_ERROR, x->tenant, NULL, NULL, "facet %s: %s (%d)", c->key, msg, rc);
    /* Some failures leave no message (a function's zeroblob(1e9) is one):
     * SQLite's text for the code then says what happened. */
    if (msg == NULL || msg[0] == '\0') msg = sqlite3_errstr(rc);
    put_error(x->out, x->start, "Error", "%s: %s", msg, code_name(rc));
  }
}

/* The statement's column count, then its column names. Returns -1 when
 * SQLite ran out of memory (at its limit, facets.h) making a name. */
static int put_columns(iso_wire *out, sqlite3_stmt *st) {
  int n = sqlite3_column_count(st);
  iso_wire_number(out, n);
  for (int i = 0; i < n; i++) {
    const char *name = sqlite3_column_name(st, i);
    if (name == NULL) return -1;
    iso_wire_string(out, name, strlen(name));
  }
  return 0;
}

#define ROW_TOO_BIG 1
#define ROW_NO_MEMORY 2

/* Appends one row. Returns 0, ROW_TOO_BIG once the result would pass `max`
 * bytes (checked before every value: a row of 2,000 columns of 60 MB
 * blobs is not copied to find out), or ROW_NO_MEMORY when SQLite could not
 * make a value readable (at its memory limit: never a silent ""). */
static int put_row(iso_wire *out, sqlite3_stmt *st, int n, size_t max) {
  for (int i = 0; i < n; i++) {
    int type = sqlite3_column_type(st, i);
    if ((type == SQLITE_TEXT || type == SQLITE_BLOB) &&
        out->len + (size_t)sqlite3_column_bytes(st, i) > max)
      return ROW_TOO_BIG;
    switch (type) {
      case SQLITE_INTEGER: {
        int64_t v = sqlite3_column_int64(st, i);
        if (v >= -SAFE_INTEGER && v <= SAFE_INTEGER)
          iso_wire_number(out, (double)v);
        else
          iso_wire_bigint(out, v);
        break;
      }
      case SQLITE_FLOAT:
        iso_wire_number(out, sqlite3_column_double(st, i));
        break;
      case SQLITE_TEXT: {
        const char *s = (const char *)sqlite3_column_text(st, i);
        if (s == NULL) return ROW_NO_MEMORY; /* a text value is never NULL otherwise */
        iso_wire_string(out, s, (size_t)sqlite3_column_bytes(st, i));
        break;
      }
      case SQLITE_BLOB: {
        /* (An empty blob is NULL too.) */
        const void *b = sqlite3_column_blob(st, i);
        size_t len = (size_t)sqlite3_column_bytes(st, i);
        if (b == NULL && len > 0) return ROW_NO_MEMORY;
        iso_wire_bytes(out, b ? b : "", len);
        break;
      }
      default:
        iso_wire_null(out);
        break;
    }
  }
  return out->len > max ? ROW_TOO_BIG : 0;
}

/* Overwrites the u32 count of the array header that starts at `at`. */
static void patch_count(iso_wire *out, size_t at, uint32_t count) {
  uint8_t *p = out->data + at + 1;
  p[0] = (uint8_t)count;
  p[1] = (uint8_t)(count >> 8);
  p[2] = (uint8_t)(count >> 16);
  p[3] = (uint8_t)(count >> 24);
}

/* ---- Arguments ---- */

static const char *wire_type_name(uint8_t type) {
  switch (type) {
    case ISO_WIRE_ARRAY: return "array";
    case ISO_WIRE_OBJECT: return "object";
    default: return "unknown";
  }
}

EXEC_STEP int bind_params(exec_ctx *x, sqlite3_stmt *st) {
  for (uint32_t i = 0; i < x->n_params; i++) {
    const iso_wire_value *v = &x->params[i];
    int col = (int)i + 1, rc;
    switch (v->type) {
      case ISO_WIRE_UNDEFINED:
      case ISO_WIRE_NULL:
        rc = sqlite3_bind_null(st, col);
        break;
      case ISO_WIRE_FALSE:
      case ISO_WIRE_TRUE:
        rc = sqlite3_bind_int(st, col, v->type == ISO_WIRE_TRUE);
        break;
      case ISO_WIRE_NUMBER:
        /* Whole numbers go in as INTEGER, so typeof() and rowid lookups
         * see what the code meant. */
        if (v->number == trunc(v->number) && fabs(v->number) <= (double)SAFE_INTEGER)
          rc = sqlite3_bind_int64(st, col, (sqlite3_int64)v->number);
        else
          rc = sqlite3_bind_double(st, col, v->number);
        break;
      case ISO_WIRE_BIGINT:
        rc = sqlite3_bind_int64(st, col, v->bigint);
        break;
      case ISO_WIRE_STRING:
        /* (A NULL pointer would bind NULL, not ''.) */
        rc = sqlite3_bind_text64(st, col, v->len ? v->ptr : "", v->len, SQLITE_STATIC,
                                 SQLITE_UTF8);
        break;
      case ISO_WIRE_BYTES:
        rc = sqlite3_bind_blob64(st, col, v->len ? v->ptr : "", v->len, SQLITE_STATIC);
        break;
      default:
        put_error(x->out, x->start, "TypeError", "parameter %u has unsupported type %s",
                  (unsigned)col, wire_type_name(v->type));
        return -1;
    }
    if (rc != SQLITE_OK) {
      put_sqlite_error(x, rc, facet__conn_error(x->c));
      return -1;
    }
  }
  return 0;
}

/* A statement id as the runtime sends it (a JavaScript number), or 0. */
static uint64_t stmt_id_of(const iso_wire_value *v) {
  if (v->type != ISO_WIRE_NUMBER || !(v->number >= 1 && v->number <= (double)SAFE_INTEGER))
    return 0;
  uint64_t id = (uint64_t)v->number;
  return (double)id == v->number ? id : 0;
}

/* What exec runs, from its first argument (NULL when there is none): the
 * SQL text in *sql, an empty one never NULL, or the id "prepare" gave it
 * in *id with *sql NULL. Returns 0, or -1 with the TypeError written. */
static int exec_target(exec_ctx *x, const iso_wire_value *first, const char **sql, size_t *len,
                       uint64_t *id) {
  *id = first != NULL ? stmt_id_of(first) : 0;
  if (first == NULL || (first->type != ISO_WIRE_STRING && *id == 0)) {
    put_error(x->out, x->start, "TypeError", "exec() needs the SQL text as a string");
    return -1;
  }
  *sql = NULL;
  *len = 0;
  if (first->type == ISO_WIRE_STRING) {
    *sql = first->len > 0 ? first->ptr : "";
    *len = first->len;
  }
  return 0;
}

/* Reads [sql, param...], where sql is the text or the id "prepare" gave it
 * (*sql is then NULL and *id set). Returns 0, or -1 with an error written. */
static int read_exec_args(exec_ctx *x, const char **sql, size_t *sql_len, uint64_t *id,
                          iso_wire_value *stack, size_t stack_n) {
  iso_wire_reader r;
  iso_wire_value v;
  iso_wire_reader_init(&r, x->call->args, x->call->args_len);
  if (iso_wire_next(&r, &v) != 1 || v.type != ISO_WIRE_ARRAY || v.count < 1) goto malformed;
  uint32_t n = v.count - 1;
  if (exec_target(x, iso_wire_next(&r, &v) == 1 ? &v : NULL, sql, sql_len, id) != 0) return -1;
  iso_wire_value *params = n <= stack_n ? stack : xmalloc(n * sizeof *params);
  if (params != stack) x->params_owned = params;
  x->params = params;
  x->n_params = 0;
  for (uint32_t i = 0; i < n; i++) {
    if (iso_wire_next(&r, &params[i]) != 1) goto malformed;
    x->n_params++;
    uint8_t t = params[i].type;
    if (t == ISO_WIRE_ARRAY || t == ISO_WIRE_OBJECT) {
      /* Its entries follow in the input: there is no reading past it. */
      put_error(x->out, x->start, "TypeError", "parameter %u has unsupported type %s",
                (unsigned)i + 1, wire_type_name(t));
      return -1;
    }
  }
  return 0;
malformed:
  put_error(x->out, x->start, "TypeError", "malformed arguments to the facet binding");
  return -1;
}

/* ---- Statements ---- */

/* Whether only blanks, comments and semicolons remain: then the statement
 * just prepared is the last one. */
static int sql_rest_empty(const char *p, const char *end) {
  while (p < end) {
    char ch = *p;
    if (ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\f' || ch == '\v' ||
        ch == ';') {
      p++;
    } else if (ch == '-' && p + 1 < end && p[1] == '-') {
      while (p < end && *p != '\n') p++;
    } else if (ch == '/' && p + 1 < end && p[1] == '*') {
      const char *close = NULL;
      for (const char *q = p + 2; q + 1 < end; q++) {
        if (q[0] == '*' && q[1] == '/') {
          close = q;
          break;
        }
      }
      if (close == NULL) return 1; /* an unterminated comment runs to the end */
      p = close + 2;
    } else {
      return 0;
    }
  }
  return 1;
}

/*
 * Steps a statement to its end. When `last`, the result's array header goes
 * out, and then its column count, column names and rows (finish_exec adds
 * the two counts): one flat array, since every nested one is one more to
 * build in JavaScript. Returns an SQLite code: SQLITE_DONE on success, with
 * the error message copied to msg otherwise.
 */
EXEC_STEP int run_statement(exec_ctx *x, sqlite3_stmt *st, int last, char *msg, size_t msg_size) {
  facet_conn *c = x->c;
  iso_wire *out = x->out;
  size_t result_at = out->len;
  uint32_t cells = 0;
  /* Its full-scan count starts at 0: it is read and reset below after every
   * run, and nothing else steps a statement. */
  c->stepping = 1;
  c->cpu_deadline_ns = x->cpu_deadline_ns;
  /* The columns are known after the first step: a cached statement whose
   * tables changed is prepared again inside it (SELECT * gains a column). */
  int rc = sqlite3_step(st);
  int ncols = sqlite3_column_count(st);
  if (last && ncols == 0) {
    /* No columns (most writes): only the counts. */
    if (x->numbers != NULL)
      x->counts_only = 1;
    else
      iso_wire_array(out, 2);
  } else if (last) {
    iso_wire_array(out, 0);  /* its count is known at the end */
    if (put_columns(out, st) != 0) rc = SQLITE_NOMEM;
  }
  /* Failures of ours (not SQLite's) write their own message. */
  int own_msg = rc == SQLITE_NOMEM;
  if (own_msg) snprintf(msg, msg_size, "out of memory");
  for (; rc == SQLITE_ROW; rc = sqlite3_step(st)) {
    x->rows_read++;
    if (!last || ncols == 0) continue;
    int row = put_row(out, st, ncols, x->start + RESULT_MAX);
    if (row == ROW_NO_MEMORY) {
      rc = SQLITE_NOMEM;
      own_msg = 1;
      snprintf(msg, msg_size, "out of memory");
      break;
    }
    if (row == ROW_TOO_BIG) {
      rc = SQLITE_TOOBIG;
      own_msg = 1;
      snprintf(msg, msg_size, "query result is larger than %u MB: select fewer rows",
               RESULT_MAX >> 20);
      break;
    }
    cells += (uint32_t)ncols;
  }
  c->stepping = 0;
  c->cpu_deadline_ns = 0;
  if (rc != SQLITE_DONE && !own_msg) snprintf(msg, msg_size, "%s", facet__conn_error(c));
  x->rows_read += (uint64_t)sqlite3_stmt_status(st, SQLITE_STMTSTATUS_FULLSCAN_STEP, 1);
  if (last && ncols > 0 && rc == SQLITE_DONE)
    patch_count(out, result_at, 1 + (uint32_t)ncols + cells + 2);
  return rc;
}

EXEC_STEP void finish_exec(exec_ctx *x) {
  int64_t written = sqlite3_total_changes64(x->c->db) - x->changes_before;
  double counts[2] = {(double)x->rows_read, (double)(written > 0 ? written : 0)};
  if (x->counts_only) {
    x->numbers->count = 2;
    memcpy(x->numbers->value, counts, sizeof counts);
    return;
  }
  iso_wire_number(x->out, counts[0]);
  iso_wire_number(x->out, counts[1]);
}

/* After a failure inside transactionSync: SQLite may have rolled the whole
 * transaction back (SQLITE_FULL, an interrupt, ON CONFLICT ROLLBACK). */
__attribute__((cold, noinline)) static void note_abort(facet_conn *c) {
  if (!sqlite3_get_autocommit(c->db)) return;
  if (c->depth > 0) c->aborted = 1;
  if (c->implicit) facet__conn_drop_implicit(c, last_error);
}

/* Coalescing: the facet's first statement of a synchronous run opens the
 * transaction the host commits at its output gate (facet_store_commit).
 * IMMEDIATE: the write lock is taken at once, so a later write in the run
 * never finds the snapshot it read stale (which no wait can mend). */
__attribute__((noinline)) static int implicit_open(exec_ctx *x) {
  facet_conn *c = x->c;
  if (!sqlite3_get_autocommit(c->db)) facet__conn_abandon_txn(c);
  int rc = facet__conn_exec_trusted(c, "BEGIN IMMEDIATE");
  if (rc != SQLITE_OK) {
    put_sqlite_error(x, rc, facet__conn_error(c));
    return -1;
  }
  c->implicit = 1;
  c->store->n_implicit++;
  return 0;
}

/* (Once per run: the check inline, the opening out of line.) */
EXEC_STEP int implicit_begin(exec_ctx *x) {
  facet_conn *c = x->c;
  if (!c->store->opt.coalesce || c->implicit || c->depth > 0) return 0;
  return implicit_open(x);
}

/* After SQLite dropped the run's transaction: the run writes nothing more,
 * since its response will be an error anyway (the gate reports the loss). */
__attribute__((cold, noinline)) static void refuse_after_loss(exec_ctx *x) {
  put_error(x->out, x->start, "Error",
            "an earlier error (%s) rolled back this request's writes; its response will be an "
            "error",
            x->c->lost);
}

/* Inside a transaction of any kind: statements then use savepoints, and a
 * busy facet cannot be retried from scratch. */
static inline int in_txn(const facet_conn *c) { return c->depth > 0 || c->implicit; }

/* VACUUM cannot run inside a transaction: the run's writes are committed
 * first (the output gate's commit, early), then it runs by itself. */
__attribute__((cold, noinline)) static int vacuum_prepare(exec_ctx *x) {
  facet_conn *c = x->c;
  if (c->depth > 0) return 0; /* SQLite says why it cannot */
  if (!c->implicit && c->lost == NULL) return 0;
  char *err = NULL;
  if (facet_store_commit(c->store, &err) != 0) {
    put_error(x->out, x->start, "Error", "%s", err);
    free(err);
    return -1;
  }
  return 0;
}

/* One statement with its parameters: the common case, and the only one
 * whose prepared statement is cached. At depth 0 it commits by itself, so a
 * busy facet can be retried from scratch. */
EXEC_STEP int exec_single(exec_ctx *x, sqlite3_stmt *st, int n_params) {
  facet_conn *c = x->c;
  char msg[512];
  if (n_params != (int)x->n_params) {
    put_error(x->out, x->start, "Error", "Wrong number of parameter bindings for SQL query.");
    return -1;
  }
  if (bind_params(x, st) != 0) {
    sqlite3_clear_bindings(st);
    return -1;
  }
  int rc;
  for (;;) {
    x->rows_read = 0;
    x->out->len = x->start;
    rc = run_statement(x, st, 1, msg, sizeof msg);
    sqlite3_reset(st);
    int primary = rc & 0xff;
    if (in_txn(c) || (primary != SQLITE_BUSY && primary != SQLITE_LOCKED)) break;
    /* The busy handler is not consulted for every kind of contention (a
     * stale WAL snapshot): nothing was committed, so run it again. */
    uint64_t now = time_mono_ns();
    if (c->busy_deadline_ns == 0) facet__busy_start(c, now);
    if (now >= c->busy_deadline_ns) break;
    struct timespec ts = {0, 100000};
    nanosleep(&ts, NULL);
  }
  /* On success the bindings stay: they point into the call's arguments,
   * which are gone afterwards, but nothing reads them before the next exec
   * of the statement binds every parameter again (the count is checked
   * above), and clearing them was a call into SQLite per exec. That holds
   * only while a cached statement is stepped nowhere else and nothing
   * expands its SQL (sqlite3_expanded_sql, SQLITE_TRACE_STMT): either
   * would read memory that is gone. */
  if (rc != SQLITE_DONE) {
    sqlite3_clear_bindings(st);
    put_sqlite_error(x, rc, msg);
    note_abort(c);
    return -1;
  }
  finish_exec(x);
  return 0;
}

/* Several statements in one text: run in order inside a transaction (or a
 * savepoint within transactionSync), so that a failure anywhere undoes them
 * all. Only the last may have parameters (as in Durable Objects). */
static int exec_multi(exec_ctx *x, sqlite3_stmt *first, const char *tail, const char *end) {
  facet_conn *c = x->c;
  char msg[512];
  int nested = in_txn(c);
  int rc = facet__conn_exec_trusted(c, nested ? "SAVEPOINT facet_exec" : "BEGIN IMMEDIATE");
  if (rc != SQLITE_OK) {
    put_sqlite_error(x, rc, facet__conn_error(c));
    sqlite3_finalize(first);
    note_abort(c);
    return -1;
  }
  sqlite3_stmt *st = first;
  int failed = 0;
  while (st != NULL) {
    int last = sql_rest_empty(tail, end);
    if (!last && sqlite3_bind_parameter_count(st) > 0) {
      put_error(x->out, x->start, "Error",
                "When executing multiple SQL statements in a single call, only the last "
                "statement can have parameters.");
      failed = 1;
    } else if (last && sqlite3_bind_parameter_count(st) != (int)x->n_params) {
      put_error(x->out, x->start, "Error", "Wrong number of parameter bindings for SQL query.");
      failed = 1;
    } else if (last && bind_params(x, st) != 0) {
      failed = 1;
    } else if ((rc = run_statement(x, st, last, msg, sizeof msg)) != SQLITE_DONE) {
      put_sqlite_error(x, rc, msg);
      failed = 1;
    }
    sqlite3_finalize(st);
    st = NULL;
    if (failed || last) break;
    const char *next_tail = NULL;
    rc = sqlite3_prepare_v3(c->db, tail, (int)(end - tail), 0, &st, &next_tail);
    if (rc != SQLITE_OK) {
      put_sqlite_error(x, rc, facet__conn_error(c));
      failed = 1;
      break;
    }
    tail = next_tail;
    if (st == NULL) {
      /* The rest was empty to SQLite after all: the cursor has no rows. */
      iso_wire_array(x->out, 2);
    }
  }
  if (!failed) {
    rc = facet__conn_exec_trusted(c, nested ? "RELEASE facet_exec" : "COMMIT");
    if (rc == SQLITE_OK) {
      finish_exec(x);
      return 0;
    }
    put_sqlite_error(x, rc, facet__conn_error(c));
  }
  if (nested) {
    if (!sqlite3_get_autocommit(c->db))
      facet__conn_exec_trusted(c, "ROLLBACK TO facet_exec; RELEASE facet_exec");
    note_abort(c);
  } else if (!sqlite3_get_autocommit(c->db)) {
    facet__conn_exec_trusted(c, "ROLLBACK");
  }
  return -1;
}

/* What refuses a statement before it runs, in this order; `sql` is NULL
 * for a statement run by its id. Returns 0, or -1 with the error written. */
EXEC_STEP int exec_start(exec_ctx *x, const char *sql, size_t len) {
  facet_conn *c = x->c;
  if (c->aborted) {
    put_error(x->out, x->start, "Error",
              "the transaction was rolled back by an earlier error; return from "
              "transactionSync() to end it");
    return -1;
  }
  if (sql != NULL && len > INT32_MAX) {
    put_error(x->out, x->start, "Error", "SQL text is too long");
    return -1;
  }
  /* SQLite stops reading at a NUL: whatever follows one would be skipped
   * without a word (or, after a first statement, leave no result at all). */
  if (sql != NULL && memchr(sql, '\0', len) != NULL) {
    put_error(x->out, x->start, "Error", "SQL text contains a NUL character (U+0000)");
    return -1;
  }
  if (c->lost != NULL) {
    refuse_after_loss(x);
    return -1;
  }
  if (!in_txn(c) && !sqlite3_get_autocommit(c->db)) facet__conn_abandon_txn(c);
  x->changes_before = sqlite3_total_changes64(c->db);
  c->denied = NULL;
  return 0;
}

/* A text not in the cache: prepared, and kept there when it is one
 * statement. Returns 1 with *st to run (*owned when the cache did not take
 * it: the caller finalizes it), or the exec's result when it is done here
 * (nothing but comments, several statements, a failure). */
static int exec_prepare_text(exec_ctx *x, const char *sql, size_t len, sqlite3_stmt **out,
                             int *owned) {
  facet_conn *c = x->c;
  const char *p = sql, *end = sql + len, *tail = NULL;
  sqlite3_stmt *st = NULL;
  int rc;
  /* Skip leading empty statements (";", comments) to the first real one. */
  for (;;) {
    rc = sqlite3_prepare_v3(c->db, p, (int)(end - p), SQLITE_PREPARE_PERSISTENT, &st, &tail);
    if (rc != SQLITE_OK) {
      put_sqlite_error(x, rc, facet__conn_error(c));
      return -1;
    }
    if (st != NULL || tail == NULL || tail >= end || tail == p) break;
    p = tail;
  }
  if (st == NULL) {
    /* Nothing but blanks and comments: an empty cursor. */
    if (x->n_params != 0) {
      put_error(x->out, x->start, "Error", "Wrong number of parameter bindings for SQL query.");
      return -1;
    }
    iso_wire_array(x->out, 2);
    finish_exec(x);
    return 0;
  }
  if (facet__is_vacuum(st) ? vacuum_prepare(x) != 0 : implicit_begin(x) != 0) {
    sqlite3_finalize(st);
    return -1;
  }
  if (!sql_rest_empty(tail, end)) return exec_multi(x, st, tail, end);
  /* Too long to keep: run once and let go. */
  *owned = facet__cache_put(c, sql, len, st) == 0;
  *out = st;
  return 1;
}

/* exec of `sql` (or, when it is NULL, of the statement cached as `id`)
 * with x->params. */
EXEC_STEP int run_exec(exec_ctx *x, const char *sql, size_t len, uint64_t id) {
  facet_conn *c = x->c;
  facet_cached_stmt *cached = NULL;
  if (sql == NULL && (cached = facet__cache_by_id(c, id)) == NULL) {
    /* The statement left the cache: null asks the runtime to send the text. */
    iso_wire_null(x->out);
    return 0;
  }
  if (exec_start(x, sql, len) != 0) return -1;
  if (cached == NULL) cached = facet__cache_get(c, sql, len);
  sqlite3_stmt *st;
  int owned = 0;
  if (cached != NULL) {
    if (cached->vacuum ? vacuum_prepare(x) != 0 : implicit_begin(x) != 0) return -1;
    st = cached->stmt;
  } else {
    int rc = exec_prepare_text(x, sql, len, &st, &owned);
    if (rc != 1) return rc;
  }
  int result = exec_single(x, st, cached != NULL ? cached->n_params
                                                 : sqlite3_bind_parameter_count(st));
  if (owned) sqlite3_finalize(st);
  return result;
}

static int op_exec(exec_ctx *x) {
  iso_wire_value stack[PARAMS_ON_STACK];
  const char *sql;
  size_t len;
  uint64_t id;
  int result = -1;
  if (read_exec_args(x, &sql, &len, &id, stack, PARAMS_ON_STACK) == 0)
    result = run_exec(x, sql, len, id);
  free(x->params_owned);
  x->params_owned = NULL;
  x->params = NULL;
  return result;
}

/* [sql] -> the id exec accepts instead of the text, once the text is one
 * statement that stays prepared (the runtime then sends a number, not the
 * text, and the lookup is one comparison); null when it is not (several
 * statements, none, or too long); false when it does not compile (exec of
 * the text reports why). Compiling runs nothing. */
static int op_prepare(exec_ctx *x) {
  facet_conn *c = x->c;
  iso_wire_reader r;
  iso_wire_value v;
  iso_wire_reader_init(&r, x->call->args, x->call->args_len);
  if (iso_wire_next(&r, &v) != 1 || v.type != ISO_WIRE_ARRAY || v.count != 1 ||
      iso_wire_next(&r, &v) != 1 || v.type != ISO_WIRE_STRING || v.len > INT32_MAX) {
    put_error(x->out, x->start, "TypeError", "malformed arguments to the facet binding");
    return -1;
  }
  facet_cached_stmt *cached = facet__cache_get(c, v.ptr, v.len);
  if (cached != NULL) {
    iso_wire_number(x->out, (double)cached->id);
    return 0;
  }
  sqlite3_stmt *st = NULL;
  const char *tail = NULL;
  int rc = sqlite3_prepare_v3(c->db, v.ptr, (int)v.len, SQLITE_PREPARE_PERSISTENT, &st, &tail);
  c->denied = NULL;
  if (rc != SQLITE_OK) {
    iso_wire_bool(x->out, 0);
    return 0;
  }
  /* Leading empty statements are exec's business: only plain text here. */
  if (st == NULL || !sql_rest_empty(tail, v.ptr + v.len)) {
    sqlite3_finalize(st);
    iso_wire_null(x->out);
    return 0;
  }
  uint64_t id = facet__cache_put(c, v.ptr, v.len, st);
  if (id == 0) {
    sqlite3_finalize(st);
    iso_wire_null(x->out);
  } else {
    iso_wire_number(x->out, (double)id);
  }
  return 0;
}

/* ---- Transactions ---- */

static int run_trusted(exec_ctx *x, const char *sql) {
  int rc = facet__conn_exec_trusted(x->c, sql);
  if (rc != SQLITE_OK) put_sqlite_error(x, rc, facet__conn_error(x->c));
  return rc;
}

static int op_begin(exec_ctx *x) {
  facet_conn *c = x->c;
  if (c->aborted) {
    put_error(x->out, x->start, "Error",
              "the transaction was rolled back by an earlier error; return from "
              "transactionSync() to end it");
    return -1;
  }
  if (c->lost != NULL) {
    refuse_after_loss(x);
    return -1;
  }
  if (c->depth == 0 && implicit_begin(x) != 0) return -1;
  if (c->depth == 0 && !c->implicit) {
    if (!sqlite3_get_autocommit(c->db)) facet__conn_abandon_txn(c);
    if (run_trusted(x, "BEGIN IMMEDIATE") != SQLITE_OK) return -1;
    c->txn_token = x->token;
  } else {
    /* Coalescing: transactionSync is a savepoint in the run's transaction,
     * made durable with the rest of the run at the output gate. */
    if (c->depth == 0) c->txn_token = x->token;
    char sql[48];
    snprintf(sql, sizeof sql, "SAVEPOINT facet_sp%d", c->depth);
    if (run_trusted(x, sql) != SQLITE_OK) {
      note_abort(c);
      return -1;
    }
  }
  c->depth++;
  iso_wire_undefined(x->out);
  return 0;
}

/* Leaves the innermost level after SQLite dropped the transaction itself. */
static int leave_aborted(exec_ctx *x, int committing) {
  facet_conn *c = x->c;
  if (--c->depth == 0) {
    c->aborted = 0;
    c->txn_token = 0;
  }
  if (!committing) {
    iso_wire_undefined(x->out);
    return 0;
  }
  put_error(x->out, x->start, "Error",
            "the transaction was rolled back by an earlier error and cannot commit");
  return -1;
}

static int op_commit(exec_ctx *x) {
  facet_conn *c = x->c;
  if (c->depth == 0) {
    put_error(x->out, x->start, "Error", "no transaction is open");
    return -1;
  }
  if (c->aborted) return leave_aborted(x, 1);
  if (c->depth == 1 && !c->implicit) {
    if (run_trusted(x, "COMMIT") != SQLITE_OK) {
      /* A deferred foreign key or a full disk: nothing of it is kept. */
      facet__conn_abandon_txn(c);
      return -1;
    }
    c->depth = 0;
    c->txn_token = 0;
  } else {
    char sql[48];
    snprintf(sql, sizeof sql, "RELEASE facet_sp%d", c->depth - 1);
    if (run_trusted(x, sql) != SQLITE_OK) {
      note_abort(c);
      if (--c->depth == 0) c->txn_token = 0;
      return -1;
    }
    if (--c->depth == 0) c->txn_token = 0;
  }
  iso_wire_undefined(x->out);
  return 0;
}

static int op_rollback(exec_ctx *x) {
  facet_conn *c = x->c;
  if (c->depth == 0) {
    put_error(x->out, x->start, "Error", "no transaction is open");
    return -1;
  }
  if (c->aborted || sqlite3_get_autocommit(c->db)) return leave_aborted(x, 0);
  if (c->depth == 1 && !c->implicit) {
    facet__conn_abandon_txn(c);
  } else {
    char sql[96];
    snprintf(sql, sizeof sql, "ROLLBACK TO facet_sp%d; RELEASE facet_sp%d", c->depth - 1,
             c->depth - 1);
    if (facet__conn_exec_trusted(c, sql) != SQLITE_OK) note_abort(c);
    if (--c->depth == 0) c->txn_token = 0;
  }
  iso_wire_undefined(x->out);
  return 0;
}

static int op_size(exec_ctx *x) {
  int64_t pages = facet__conn_query_int(x->c, "PRAGMA page_count");
  if (pages < 0) {
    put_sqlite_error(x, sqlite3_errcode(x->c->db), facet__conn_error(x->c));
    return -1;
  }
  iso_wire_number(x->out, (double)(pages * x->c->page_size));
  return 0;
}

/* ---- Entry ---- */

/* What every operation does first: finds (or opens) the facet, applies its
 * size limit, and rolls back a transaction an ended request left open.
 * Returns 0 with x->c set, or -1 with the error written. */
EXEC_STEP int call_begin(exec_ctx *x, facet_store *s, const char *facet_id, facet_ref *ref,
                      uint64_t limit_mb) {
  /* The names are checked where a connection is opened (facet_path): one
   * already open was opened by these exact names, so none is looked at
   * again on every call. */
  if (x->tenant == NULL) {
    put_error(x->out, x->start, "Error", "invalid facet name");
    return -1;
  }
  char *err = NULL;
  facet_conn *c = facet__conn_get(s, x->tenant, facet_id, ref, &err);
  if (c == NULL) {
    put_error(x->out, x->start, "Error", "%s", err);
    free(err);
    return -1;
  }
  x->c = c;
  c->interrupted = 0;
  c->busy_deadline_ns = 0;
  int rc = facet__conn_limit(c, limit_mb ? limit_mb : s->opt.default_limit_mb);
  if (rc != SQLITE_OK) {
    put_sqlite_error(x, rc, facet__conn_error(c));
    return -1;
  }
  /* JavaScript never interleaves two requests inside transactionSync; a
   * transaction still open for another request was left behind by one that
   * was terminated. */
  if (c->depth > 0 && c->txn_token != x->token) {
    log_write(LOG_WARN, x->tenant, NULL, NULL,
              "facet %s: rolling back a transaction its request left open", c->key);
    facet__conn_abandon_txn(c);
  }
  return 0;
}

int facet_call(facet_store *s, const char *tenant, const char *facet_id, uint64_t limit_mb,
               const iso_call *call, uint64_t cpu_deadline_ns, iso_wire *result) {
  exec_ctx x;
  exec_ctx_init(&x, call, call->token, result, tenant, cpu_deadline_ns, NULL);
  if (call_begin(&x, s, facet_id, NULL, limit_mb) != 0) return -1;
  const char *op = call->op ? call->op : "";
  if (strcmp(op, "exec") == 0) return op_exec(&x);
  if (strcmp(op, "prepare") == 0) return op_prepare(&x);
  if (strcmp(op, "size") == 0) return op_size(&x);
  if (strcmp(op, "begin") == 0) return op_begin(&x);
  if (strcmp(op, "commit") == 0) return op_commit(&x);
  if (strcmp(op, "rollback") == 0) return op_rollback(&x);
  put_error(result, x.start, "TypeError", "unknown facet operation \"%s\"", op);
  return -1;
}

__attribute__((hot))
int facet_exec(facet_store *s, facet_target *t, const iso_wire_value *args, uint32_t n_args,
               iso_numbers *numbers, iso_wire *result) {
  exec_ctx x;
  exec_ctx_init(&x, NULL, t->token, result, t->tenant, t->cpu_deadline_ns, numbers);
  if (numbers != NULL) numbers->count = 0;
  if (call_begin(&x, s, t->facet_id, &t->ref, t->limit_mb) != 0) return -1;
  const char *sql;
  size_t len;
  uint64_t id;
  if (exec_target(&x, n_args > 0 ? &args[0] : NULL, &sql, &len, &id) != 0) return -1;
  x.params = args + 1;
  x.n_params = n_args - 1;
  return run_exec(&x, sql, len, id);
}
