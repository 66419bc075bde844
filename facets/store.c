/*
 * The store: a bounded LRU of open facet connections, and everything that
 * makes one connection safe to hand to a tenant's SQL: the authorizer, the
 * CPU-deadline progress handler and the busy handler.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

#include "base.h"
#include "internal.h"
#include "isolate.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

/* VM instructions between two calls of the progress handler (a few
 * microseconds of work; the handler itself is cheap, see on_progress). */
#define PROGRESS_OPS 1000

/* Keep the WAL file from staying large after a burst of writes. */
#define JOURNAL_SIZE_LIMIT (8 * 1024 * 1024)

/* Reads through mmap skip a copy and a system call per page; the mapping
 * is address space, not memory of its own. */
#define MMAP_BYTES (256ll * 1024 * 1024)

/* A checkpoint (copying the WAL's pages into the database file) is due
 * once the WAL holds this many frames: SQLite's own default. */
#define CHECKPOINT_FRAMES 1000
/* A coalescing store leaves due checkpoints for facet_store_checkpoint(),
 * after the gate; a commit that finds the WAL this long checkpoints at
 * once all the same, so that the WAL of a facet nobody checkpoints later
 * stays bounded. */
#define CHECKPOINT_FRAMES_NOW (4 * CHECKPOINT_FRAMES)

/* Longest SQL text worth keeping a prepared statement for. */
#define CACHE_SQL_MAX 4096

/* ---- Authorizer ---- */

/* PRAGMAs a tenant may run. `arg`: whether it may take an argument (an
 * object name for the schema queries, a value for the settings that live in
 * the file or end with the transaction). */
static const struct {
  const char *name;
  int arg;
} allowed_pragmas[] = {
    {"table_info", 1},       {"table_xinfo", 1},       {"table_list", 1},
    {"index_list", 1},       {"index_info", 1},        {"index_xinfo", 1},
    {"foreign_key_list", 1}, {"foreign_key_check", 1}, {"foreign_keys", 0},
    {"defer_foreign_keys", 1}, {"user_version", 1},    {"application_id", 1},
    {"page_count", 0},       {"page_size", 0},         {"freelist_count", 0},
    {"max_page_count", 0},   {"data_version", 0},      {"schema_version", 0},
    {"encoding", 0},         {"collation_list", 0},    {"optimize", 1},
};

/* Virtual table modules that keep their data inside the facet. */
static const char *const allowed_modules[] = {"fts3", "fts4", "fts5", "rtree", "rtree_i32"};

static int deny(facet_conn *c, const char *why) {
  c->denied = why;
  return SQLITE_DENY;
}

static int deny_fmt(facet_conn *c, const char *fmt, const char *arg) {
  snprintf(c->denied_buf, sizeof c->denied_buf, fmt, arg);
  c->denied = c->denied_buf;
  return SQLITE_DENY;
}

static int authorize_pragma(facet_conn *c, const char *name, const char *arg) {
  for (size_t i = 0; i < ARRAY_SIZE(allowed_pragmas); i++) {
    if (strcasecmp(name, allowed_pragmas[i].name) != 0) continue;
    if (arg == NULL || allowed_pragmas[i].arg) return SQLITE_OK;
    if (strcasecmp(name, "foreign_keys") == 0)
      return deny(c, "PRAGMA foreign_keys cannot be changed in a facet: foreign keys are "
                     "always enforced (PRAGMA defer_foreign_keys defers them to the commit)");
    return deny_fmt(c, "PRAGMA %s is read-only in a facet", name);
  }
  return deny_fmt(c, "PRAGMA %s is not allowed in a facet", name);
}

static int authorize(void *data, int action, const char *a1, const char *a2, const char *db,
                     const char *trigger) {
  (void)trigger;
  facet_conn *c = data;
  if (c->trusted) return SQLITE_OK;
  /* CREATE TABLE temp.t names the temporary schema instead of saying TEMP. */
  int in_temp = db != NULL && strcasecmp(db, "temp") == 0;
  switch (action) {
    case SQLITE_ATTACH:
      /* Plain VACUUM attaches "" (a temporary database) while it runs; VACUUM
       * INTO attaches its target file. Tenants' own ATTACH is refused when it
       * is prepared, so an ATTACH seen while stepping comes from VACUUM. */
      if (c->stepping && a1 != NULL && a1[0] == '\0') return SQLITE_OK;
      if (c->stepping) return deny(c, "VACUUM INTO is not allowed in a facet");
      return deny(c, "ATTACH is not allowed in a facet");
    case SQLITE_DETACH:
      if (c->stepping) return SQLITE_OK;
      return deny(c, "DETACH is not allowed in a facet");
    case SQLITE_PRAGMA:
      return authorize_pragma(c, a1 ? a1 : "", a2);
    case SQLITE_TRANSACTION:
    case SQLITE_SAVEPOINT:
      /* While stepping, only VACUUM prepares statements of this kind (a
       * re-prepared tenant statement was authorized before). */
      if (c->stepping) return SQLITE_OK;
      return deny(c, "transactions in SQL are not allowed in a facet: use "
                     "transactionSync() instead of BEGIN, COMMIT, ROLLBACK or SAVEPOINT");
    case SQLITE_CREATE_TEMP_INDEX:
    case SQLITE_CREATE_TEMP_TABLE:
    case SQLITE_CREATE_TEMP_TRIGGER:
    case SQLITE_CREATE_TEMP_VIEW:
      return deny(c, "temporary tables, views, triggers and indexes are not allowed in a facet");
    case SQLITE_UPDATE:
      /* ALTER TABLE ... RENAME rewrites the temporary schema table too (for
       * temporary triggers, of which a facet has none). SQLite itself refuses
       * a tenant's own write to a schema table (no writable_schema), so only
       * the rename's nested UPDATE reaches here. */
      if (in_temp && a1 != NULL &&
          (strcasecmp(a1, "sqlite_temp_master") == 0 || strcasecmp(a1, "sqlite_temp_schema") == 0))
        return SQLITE_OK;
      /* fall through */
    case SQLITE_INSERT:
    case SQLITE_DELETE:
      /* Creating any temporary object writes the temporary schema table. */
    case SQLITE_CREATE_INDEX:
    case SQLITE_CREATE_TABLE:
    case SQLITE_CREATE_TRIGGER:
    case SQLITE_CREATE_VIEW:
      if (in_temp)
        return deny(c, "temporary tables, views, triggers and indexes are not allowed in a facet");
      return SQLITE_OK;
    case SQLITE_CREATE_VTABLE:
      if (in_temp)
        return deny(c, "temporary tables, views, triggers and indexes are not allowed in a facet");
      for (size_t i = 0; i < ARRAY_SIZE(allowed_modules); i++) {
        if (a2 != NULL && strcasecmp(a2, allowed_modules[i]) == 0) return SQLITE_OK;
      }
      return deny_fmt(c, "virtual table module %s is not allowed in a facet", a2 ? a2 : "?");
    case SQLITE_FUNCTION:
      if (a2 != NULL &&
          (strcasecmp(a2, "load_extension") == 0 || strcasecmp(a2, "fts3_tokenizer") == 0))
        return deny_fmt(c, "function %s() is not allowed in a facet", a2);
      return SQLITE_OK;
    default:
      return SQLITE_OK;
  }
}

/* ---- Progress and busy handlers ---- */

/* Reading the thread CPU clock is a system call (several microseconds in
 * some VMs); the monotonic clock is not. One thread's CPU time cannot run
 * ahead of the wall clock, so the CPU clock is read only once the time
 * passed since its last reading could have reached the deadline. The last
 * reading is the thread's, whichever statement made it: reset for every
 * exec, it cost a system call every few dozen small inserts.
 * (Marked hot, as the rest of an exec's path: see exec.c.) */
static _Thread_local uint64_t progress_cpu_seen_ns, progress_mono_seen_ns; /* 0 = not yet */

__attribute__((hot))
static int on_progress(void *data) {
  facet_conn *c = data;
  if (c->cpu_deadline_ns == 0 || !c->stepping) return 0;
  uint64_t mono = time_mono_ns();
  /* NTP may slow the monotonic clock by up to 500 ppm: a thousandth more
   * keeps the bound above the CPU clock however long since the reading. */
  uint64_t passed = mono - progress_mono_seen_ns;
  if (progress_mono_seen_ns != 0 &&
      progress_cpu_seen_ns + passed + passed / 1000 < c->cpu_deadline_ns)
    return 0;
  progress_cpu_seen_ns = time_thread_cpu_ns();
  progress_mono_seen_ns = mono;
  if (progress_cpu_seen_ns < c->cpu_deadline_ns) return 0;
  c->interrupted = 1;
  return 1;
}

/* Another process holds the write lock. Waits in short, growing naps (the
 * built-in busy timeout sleeps whole milliseconds, far longer than one
 * commit) until the call's busy deadline. */
static int on_busy(void *data, int count) {
  facet_conn *c = data;
  uint64_t now = time_mono_ns();
  if (c->busy_deadline_ns == 0) facet__busy_start(c, now);
  if (now >= c->busy_deadline_ns) return 0;
  uint64_t nap_ns = 20000ull << (count < 7 ? count : 7); /* 20 us .. 2.56 ms */
  if (nap_ns > c->busy_deadline_ns - now) nap_ns = c->busy_deadline_ns - now;
  struct timespec ts = {(time_t)(nap_ns / 1000000000ull), (long)(nap_ns % 1000000000ull)};
  nanosleep(&ts, NULL);
  return 1;
}

/* ---- printf() ---- */

/*
 * SQLite's printf('%.*c', 2000000000, 'x') loops two billion times inside
 * one function call, long after its output passed the length limit and was
 * given up (3.40): seconds no progress handler can interrupt, while every
 * tenant of the process waits. Its result is NULL (output too long), so a
 * %c whose precision passes the limit answers NULL at once; every other
 * call runs SQLite's own printf, on a private in-memory connection.
 */

/* Reads a printf width or precision as SQLite does (sqlite3_str_vappendf). */
static int64_t printf_field(const char **fmt, sqlite3_value **argv, int argc, int *arg) {
  const char *p = *fmt;
  if (*p == '*') {
    int n = *arg < argc ? (int)sqlite3_value_int64(argv[*arg]) : 0;
    (*arg)++;
    *fmt = p + 1;
    if (n < 0) return n >= -2147483647 ? -(int64_t)n : 0;
    return n;
  }
  unsigned u = 0;
  for (; *p >= '0' && *p <= '9'; p++) u = u * 10 + (unsigned)(*p - '0');
  *fmt = p;
  return u & 0x7fffffff;
}

/* Whether some %c of the format repeats its character past `limit`. */
static int printf_bomb(const char *fmt, sqlite3_value **argv, int argc, int64_t limit) {
  int arg = 1;
  for (const char *p = fmt; p != NULL && (p = strchr(p, '%')) != NULL;) {
    p++;
    while (*p != '\0' && strchr("-+ #!0,", *p) != NULL) p++;
    (void)printf_field(&p, argv, argc, &arg);
    int64_t precision = -1;
    if (*p == '.') {
      p++;
      precision = printf_field(&p, argv, argc, &arg);
    }
    while (*p == 'l') p++;
    if (*p == '\0' || strchr("dszqQwcouxXfeEGginpr%", *p) == NULL) return 0; /* SQLite stops */
    if (*p == 'c' && precision > limit) return 1;
    if (*p != '%' && *p != 'n') arg++;
    p++;
  }
  return 0;
}

static void guarded_printf(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  facet_store *s = sqlite3_user_data(ctx);
  sqlite3 *db = sqlite3_context_db_handle(ctx);
  if (argc < 1) {
    sqlite3_result_null(ctx); /* as SQLite's printf() */
    return;
  }
  if (argc > FACET_PRINTF_ARGS_MAX) {
    sqlite3_result_error(ctx, "too many arguments on function printf()", -1);
    return;
  }
  const char *fmt = (const char *)sqlite3_value_text(argv[0]);
  if (fmt != NULL && printf_bomb(fmt, argv, argc, sqlite3_limit(db, SQLITE_LIMIT_LENGTH, -1))) {
    sqlite3_result_null(ctx);
    return;
  }
  int rc = SQLITE_OK;
  if (s->printf_db == NULL) {
    rc = sqlite3_open_v2(":memory:", &s->printf_db,
                         SQLITE_OPEN_READWRITE | SQLITE_OPEN_MEMORY | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc != SQLITE_OK) {
      sqlite3_close(s->printf_db);
      s->printf_db = NULL;
      sqlite3_result_error_code(ctx, rc);
      return;
    }
  }
  /* The same length limit: the same NULL for the same too-long output. */
  sqlite3_limit(s->printf_db, SQLITE_LIMIT_LENGTH, sqlite3_limit(db, SQLITE_LIMIT_LENGTH, -1));
  sqlite3_stmt *st = s->printf_stmts[argc];
  if (st == NULL) {
    char sql[16 + 6 * FACET_PRINTF_ARGS_MAX];
    size_t len = (size_t)snprintf(sql, sizeof sql, "SELECT printf(?1");
    for (int i = 2; i <= argc; i++) len += (size_t)snprintf(sql + len, sizeof sql - len, ",?%d", i);
    snprintf(sql + len, sizeof sql - len, ")");
    rc = sqlite3_prepare_v3(s->printf_db, sql, -1, SQLITE_PREPARE_PERSISTENT, &st, NULL);
    if (rc != SQLITE_OK) {
      sqlite3_result_error(ctx, sqlite3_errmsg(s->printf_db), -1);
      sqlite3_result_error_code(ctx, rc);
      return;
    }
    s->printf_stmts[argc] = st;
  }
  for (int i = 0; i < argc && rc == SQLITE_OK; i++) rc = sqlite3_bind_value(st, i + 1, argv[i]);
  if (rc == SQLITE_OK) rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) {
    sqlite3_result_value(ctx, sqlite3_column_value(st, 0));
  } else {
    sqlite3_result_error(ctx, sqlite3_errmsg(s->printf_db), -1);
    sqlite3_result_error_code(ctx, rc == SQLITE_DONE ? SQLITE_ERROR : rc);
  }
  sqlite3_reset(st);
  sqlite3_clear_bindings(st);
}

static void printf_close(facet_store *s) {
  for (int i = 0; i <= FACET_PRINTF_ARGS_MAX; i++) sqlite3_finalize(s->printf_stmts[i]);
  if (s->printf_db != NULL && sqlite3_close(s->printf_db) != SQLITE_OK)
    log_warn("printf connection: close: %s", sqlite3_errmsg(s->printf_db));
}

/* ---- One connection ---- */

void facet__busy_start(facet_conn *c, uint64_t now) {
  c->busy_deadline_ns = now + (uint64_t)c->store->opt.busy_timeout_ms * 1000000ull;
}

int facet__conn_exec_trusted(facet_conn *c, const char *sql) {
  c->trusted = 1;
  int rc = sqlite3_exec(c->db, sql, NULL, NULL, NULL);
  c->trusted = 0;
  return rc;
}

int64_t facet__conn_query_int(facet_conn *c, const char *sql) {
  sqlite3_stmt *st = NULL;
  int64_t v = -1;
  c->trusted = 1;
  if (sqlite3_prepare_v2(c->db, sql, -1, &st, NULL) == SQLITE_OK && st != NULL &&
      sqlite3_step(st) == SQLITE_ROW)
    v = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  c->trusted = 0;
  return v;
}

void facet__conn_drop_implicit(facet_conn *c, const char *why) {
  if (!c->implicit) return;
  c->implicit = 0;
  if (why != NULL && c->lost == NULL) c->lost = xstrdup(why[0] ? why : "the transaction was rolled back");
  /* A loss stays counted: the gate must hear of it. */
  if (c->lost == NULL) c->store->n_implicit--;
}

/* Forgets a loss once the gate has reported it. */
static void forget_loss(facet_conn *c) {
  if (c->lost == NULL) return;
  free(c->lost);
  c->lost = NULL;
  c->store->n_implicit--;
}

void facet__conn_abandon_txn(facet_conn *c) {
  if (!sqlite3_get_autocommit(c->db) && facet__conn_exec_trusted(c, "ROLLBACK") != SQLITE_OK)
    log_warn("facet %s: rollback failed: %s", c->key, sqlite3_errmsg(c->db));
  facet__conn_drop_implicit(c, "its transaction was rolled back");
  c->depth = 0;
  c->aborted = 0;
  c->txn_token = 0;
}

int facet__is_vacuum(sqlite3_stmt *st) {
  const char *p = sqlite3_sql(st);
  if (p == NULL) return 0;
  while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
  return strncasecmp(p, "VACUUM", 6) == 0 &&
         (p[6] == '\0' || p[6] == ';' || p[6] == ' ' || p[6] == '\t' || p[6] == '\n' ||
          p[6] == '\r');
}

int facet__conn_set_limit(facet_conn *c, uint64_t limit_mb) {
  if (limit_mb == c->limit_mb) return SQLITE_OK;
  uint64_t pages = limit_mb * 1024 * 1024 / (uint64_t)c->page_size;
  if (pages < 2) pages = 2;
  if (pages > 0x7ffffffe) pages = 0x7ffffffe;
  char sql[64];
  snprintf(sql, sizeof sql, "PRAGMA max_page_count = %llu", (unsigned long long)pages);
  int rc = facet__conn_exec_trusted(c, sql);
  if (rc == SQLITE_OK) c->limit_mb = limit_mb;
  return rc;
}

static uint64_t sql_hash(const char *s, size_t len) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (size_t i = 0; i < len; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
  return h;
}

facet_cached_stmt *facet__cache_get(facet_conn *c, const char *sql, size_t len) {
  uint64_t h = sql_hash(sql, len);
  for (int i = 0; i < FACET_STMT_CACHE; i++) {
    facet_cached_stmt *e = &c->cache[i];
    if (e->sql != NULL && e->hash == h && e->len == len && memcmp(e->sql, sql, len) == 0) {
      e->used = ++c->store->tick;
      return e;
    }
  }
  return NULL;
}

uint64_t facet__cache_put(facet_conn *c, const char *sql, size_t len, sqlite3_stmt *stmt) {
  facet_cached_stmt *victim = &c->cache[0];
  if (len > CACHE_SQL_MAX) return 0;
  for (int i = 0; i < FACET_STMT_CACHE; i++) {
    if (c->cache[i].sql == NULL) {
      victim = &c->cache[i];
      break;
    }
    if (c->cache[i].used < victim->used) victim = &c->cache[i];
  }
  if (victim->sql != NULL) {
    sqlite3_finalize(victim->stmt);
    free(victim->sql);
  }
  victim->sql = xstrndup(sql, len);
  victim->len = len;
  victim->hash = sql_hash(sql, len);
  victim->stmt = stmt;
  victim->n_params = sqlite3_bind_parameter_count(stmt);
  victim->vacuum = facet__is_vacuum(stmt);
  victim->used = ++c->store->tick;
  victim->id = ++c->store->stmt_ids << FACET_ID_SLOT_BITS | (uint64_t)(victim - c->cache);
  return victim->id;
}

static void conn_close(facet_conn *c) {
  if (c == NULL) return;
  c->store->conn_generation++; /* every facet_ref to it is stale now */
  /* (SQLite checkpoints when the file's last connection closes.) */
  if (c->checkpoint_due) c->store->n_checkpoints_due--;
  if (c->db != NULL) {
    facet__conn_abandon_txn(c);
    forget_loss(c);
    /* (The sink names c, which is about to go.) */
    if (c->store->opt.replicate) facet__capture_detach(c->db);
    for (int i = 0; i < FACET_STMT_CACHE; i++) {
      if (c->cache[i].sql == NULL) continue;
      sqlite3_finalize(c->cache[i].stmt);
      free(c->cache[i].sql);
    }
    if (sqlite3_close(c->db) != SQLITE_OK) {
      log_warn("facet %s: close: %s", c->key, sqlite3_errmsg(c->db));
      sqlite3_close_v2(c->db);
    }
  }
  free(c->gate_why);
  free(c->key);
  free(c);
}

/* Puts the file in WAL mode; returns an SQLite primary code. */
static int set_wal(facet_conn *c) {
  /* journal_mode answers with the mode it ended in. */
  sqlite3_stmt *st = NULL;
  c->trusted = 1;
  int rc = sqlite3_prepare_v2(c->db, "PRAGMA journal_mode = WAL", -1, &st, NULL);
  if (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
    const char *mode = (const char *)sqlite3_column_text(st, 0);
    rc = mode != NULL && strcasecmp(mode, "wal") == 0 ? SQLITE_OK : SQLITE_CANTOPEN;
  }
  sqlite3_finalize(st);
  c->trusted = 0;
  return rc & 0xff;
}

/* ---- Checkpoints ---- */

/* PASSIVE: copies what no reader still needs, and never waits. */
static void conn_checkpoint(facet_conn *c) {
  if (c->checkpoint_due) {
    c->checkpoint_due = 0;
    c->store->n_checkpoints_due--;
  }
  int rc = sqlite3_wal_checkpoint_v2(c->db, "main", SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
  /* BUSY: another connection is checkpointing the file right now. */
  if (rc != SQLITE_OK && (rc & 0xff) != SQLITE_BUSY)
    log_warn("facet %s: checkpoint: %s", c->key, sqlite3_errmsg(c->db));
}

/* After every commit, with the WAL's length in frames: SQLite's automatic
 * checkpoint, which this replaces, runs inside the commit, where with
 * coalescing it held up the batch's responses (a checkpoint doubled the
 * time of a request of 50,000 inserts; docs/benchmarks.md, facets). */
static int on_wal_commit(void *arg, sqlite3 *db, const char *name, int frames) {
  (void)db;
  (void)name;
  facet_conn *c = arg;
  if (frames < CHECKPOINT_FRAMES) return SQLITE_OK;
  if (!c->store->opt.coalesce || frames >= CHECKPOINT_FRAMES_NOW) {
    conn_checkpoint(c);
  } else if (!c->checkpoint_due) {
    c->checkpoint_due = 1;
    c->store->n_checkpoints_due++;
  }
  return SQLITE_OK;
}

int facet_store_checkpoint_due(const facet_store *s) { return s->n_checkpoints_due > 0; }

void facet_store_checkpoint(facet_store *s) {
  for (uint32_t i = 0; i < s->n_conns && s->n_checkpoints_due > 0; i++) {
    facet_conn *c = s->conns[i];
    /* A transaction still open (transactionSync across the gate) keeps
     * it due for a later call. */
    if (c->checkpoint_due && sqlite3_get_autocommit(c->db)) conn_checkpoint(c);
  }
}

/* Settings of every tenant connection. Returns an SQLite code. */
static int conn_configure(facet_conn *c) {
  sqlite3 *db = c->db;
  int rc;
  sqlite3_extended_result_codes(db, 1);
  if ((rc = facet__harden(db)) != SQLITE_OK) return rc;
  /* Large values come in through bindings, not SQL text. */
  sqlite3_limit(db, SQLITE_LIMIT_SQL_LENGTH, 1 << 20);
  sqlite3_limit(db, SQLITE_LIMIT_LENGTH, 64 << 20);
  if ((rc = sqlite3_busy_handler(db, on_busy, c)) != SQLITE_OK) return rc;
  sqlite3_progress_handler(db, PROGRESS_OPS, on_progress, c);
  if ((rc = sqlite3_set_authorizer(db, authorize, c)) != SQLITE_OK) return rc;
  /* Innocuous and deterministic like the built-in: views, CHECK constraints
   * and generated columns that use printf() keep working. */
  static const char *const printf_names[] = {"printf", "format"};
  for (size_t i = 0; i < ARRAY_SIZE(printf_names); i++) {
    rc = sqlite3_create_function_v2(
        db, printf_names[i], -1, SQLITE_UTF8 | SQLITE_DETERMINISTIC | SQLITE_INNOCUOUS, c->store,
        guarded_printf, NULL, NULL, NULL);
    if (rc != SQLITE_OK) return rc;
  }

  /* Another process opening the same new file at once can hold the lock
   * the switch to WAL needs, and SQLite answers that with SQLITE_BUSY
   * without asking the busy handler: try again until the busy deadline. */
  while ((rc = set_wal(c)) == SQLITE_BUSY || rc == SQLITE_LOCKED) {
    uint64_t now = time_mono_ns();
    if (c->busy_deadline_ns == 0) facet__busy_start(c, now);
    if (now >= c->busy_deadline_ns) break;
    struct timespec ts = {0, 200000};
    nanosleep(&ts, NULL);
  }
  c->busy_deadline_ns = 0;
  if (rc != SQLITE_OK) return rc;

  char sql[160];
  snprintf(sql, sizeof sql,
           "PRAGMA synchronous = %s; PRAGMA foreign_keys = ON; PRAGMA journal_size_limit = %d; "
           "PRAGMA mmap_size = %lld",
           c->store->opt.synchronous == FACET_SYNC_NORMAL ? "NORMAL" : "FULL",
           JOURNAL_SIZE_LIMIT, MMAP_BYTES);
  if ((rc = facet__conn_exec_trusted(c, sql)) != SQLITE_OK) return rc;
  /* (In place of SQLite's automatic checkpoint.) */
  sqlite3_wal_hook(db, on_wal_commit, c);
  c->page_size = facet__conn_query_int(c, "PRAGMA page_size");
  if (c->page_size <= 0) return SQLITE_ERROR;
  return SQLITE_OK;
}

/* ---- Replication ---- */

/* A commit's record, sealed by capture.c: queued under the facet's names. */
static void on_change(void *arg, uint8_t *rec, size_t len) {
  facet_conn *c = arg;
  facet_store *s = c->store;
  facet_change *ch = xcalloc(1, sizeof *ch);
  ch->names = xstrdup(c->key);
  ch->child = c->key[c->tenant_len] == '/';
  ch->names[c->tenant_len] = '\0';
  ch->rec = rec;
  ch->len = len;
  if (s->changes == NULL) s->changes_tail = &s->changes;
  *s->changes_tail = ch;
  s->changes_tail = &ch->next;
}

/* A commit about to be written: the fleet has it first (facet_options.publish). */
static int on_gate(void *arg, const uint8_t *rec, size_t len) {
  facet_conn *c = arg;
  const facet_options *o = &c->store->opt;
  char why[256] = "";
  char *tenant = xstrndup(c->key, c->tenant_len);
  const char *id = c->key[c->tenant_len] == '/' ? c->key + c->tenant_len + 1 : NULL;
  int rc = o->publish(o->hook_arg, tenant, id, rec, len, why, sizeof why);
  free(tenant);
  free(c->gate_why);
  c->gate_why = rc == 0 ? NULL : xstrdup(why[0] ? why : "the fleet did not take the commit");
  return rc;
}

const char *facet__conn_error(const facet_conn *c) {
  int code = sqlite3_errcode(c->db);
  if (c->gate_why != NULL && (code & 0xff) == SQLITE_IOERR) return c->gate_why;
  return sqlite3_errmsg(c->db);
}

static void change_free(facet_change *ch) {
  sqlite3_free(ch->rec);
  free(ch->names);
  free(ch);
}

int facet_store_take_changes(facet_store *s, facet_change_cb cb, void *arg) {
  while (s->changes != NULL) {
    facet_change *ch = s->changes;
    const char *id = ch->child ? ch->names + strlen(ch->names) + 1 : NULL;
    int rc = cb(arg, ch->names, id, ch->rec, ch->len);
    if (rc != 0) return rc;
    s->changes = ch->next;
    change_free(ch);
  }
  return 0;
}

/* Whether a record of the facet named `key` is waiting. */
static int changes_queued(const facet_store *s, const facet_conn *c) {
  for (const facet_change *ch = s->changes; ch != NULL; ch = ch->next) {
    size_t tlen = strlen(ch->names);
    if (tlen != c->tenant_len || memcmp(ch->names, c->key, tlen) != 0) continue;
    if (!ch->child ? c->key[tlen] == '\0'
                   : c->key[tlen] == '/' && strcmp(c->key + tlen + 1, ch->names + tlen + 1) == 0)
      return 1;
  }
  return 0;
}

static int snapshot_refuse(char **err, int rc, char *msg) {
  if (err != NULL)
    *err = msg;
  else
    free(msg);
  return rc;
}

int facet_store_snapshot(facet_store *s, const char *tenant, const char *facet_id,
                         const char *dest_path, char **err) {
  if (err != NULL) *err = NULL;
  char *path = facet_path(s->data_dir, tenant, facet_id);
  if (path == NULL || dest_path == NULL) {
    free(path);
    return -EINVAL;
  }
  struct stat st;
  int missing = lstat(path, &st) != 0;
  free(path);
  if (missing) return snapshot_refuse(err, -ENOENT, xasprintf("the facet does not exist"));
  char *why = NULL;
  facet_conn *c = facet__conn_by_name(s, tenant, facet_id, NULL, &why);
  if (c == NULL) return snapshot_refuse(err, -EIO, why);
  if (c->depth > 0 || c->implicit || c->lost != NULL || !sqlite3_get_autocommit(c->db))
    return snapshot_refuse(err, -EBUSY,
                           xasprintf("facet %s has writes not committed yet: snapshot it after "
                                     "the output gate", c->key));
  if (changes_queued(s, c))
    return snapshot_refuse(err, -EBUSY,
                           xasprintf("facet %s has change records not taken yet: take them "
                                     "first (the snapshot would hold them too)", c->key));
  return facet__backup(c->db, c->key, dest_path, 1, err);
}

__attribute__((noinline))
static facet_conn *conn_open(facet_store *s, const char *tenant, const char *facet_id,
                             char **err) {
  char *path = facet_path(s->data_dir, tenant, facet_id);
  if (path == NULL) {
    *err = xasprintf("invalid facet name");
    return NULL;
  }
  /* A purge whose delete this process has not heard of yet: the worker
   * still runs here, but its facet must not be made again (facets.h). */
  struct stat st;
  if (lstat(path, &st) != 0 && errno == ENOENT && facet_purged(s->data_dir, tenant)) {
    *err = xasprintf("the worker was deleted and its facet purged");
    free(path);
    return NULL;
  }
  if (facet_id != NULL) {
    char *dir = facet__dir(s->data_dir, tenant, 1);
    int rc = facet__mkdir(dir);
    free(dir);
    if (rc != 0) {
      *err = xasprintf("cannot create the facet directory: %s", strerror(-rc));
      free(path);
      return NULL;
    }
  }
  char why[256] = "";
  if (s->opt.acquire != NULL && s->opt.acquire(s->opt.hook_arg, tenant, why, sizeof why) != 0) {
    *err = xstrdup(why[0] ? why : "this node cannot serve the facet now");
    free(path);
    return NULL;
  }
  facet_conn *c = xcalloc(1, sizeof *c);
  c->store = s;
  c->key = facet_id ? xasprintf("%s/%s", tenant, facet_id) : xstrdup(tenant);
  c->tenant_len = strlen(tenant);
  int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX |
              SQLITE_OPEN_NOFOLLOW | SQLITE_OPEN_EXRESCODE;
  const char *vfs = NULL;
  if (s->opt.replicate && (vfs = facet__capture_vfs()) == NULL) {
    *err = xasprintf("cannot open the facet: its commits cannot be captured for replication");
    free(path);
    conn_close(c);
    return NULL;
  }
  int rc = sqlite3_open_v2(path, &c->db, flags, vfs);
  if (rc == SQLITE_OK) rc = conn_configure(c);
  if (rc == SQLITE_OK && vfs != NULL)
    rc = s->opt.publish ? facet__capture_attach(c->db, (uint32_t)c->page_size, NULL, on_gate, c)
                        : facet__capture_attach(c->db, (uint32_t)c->page_size, on_change, NULL, c);
  if (rc != SQLITE_OK) {
    *err = xasprintf("cannot open the facet: %s",
                     c->db ? sqlite3_errmsg(c->db) : sqlite3_errstr(rc));
    log_write(LOG_ERROR, tenant, NULL, NULL, "facet %s: open %s: %s", c->key, path, *err);
    free(path);
    conn_close(c);
    return NULL;
  }
  free(path);
  return c;
}

/* Makes room for one more connection: closes the least recently used one
 * that is not inside a transaction. */
static void store_evict(facet_store *s) {
  uint32_t victim = UINT32_MAX;
  for (uint32_t i = 0; i < s->n_conns; i++) {
    if (s->conns[i]->depth > 0 || s->conns[i]->implicit || s->conns[i]->lost) continue;
    if (victim == UINT32_MAX || s->conns[i]->used < s->conns[victim]->used) victim = i;
  }
  if (victim == UINT32_MAX) return;
  conn_close(s->conns[victim]);
  s->conns[victim] = s->conns[--s->n_conns];
}

__attribute__((hot))
static facet_conn *conn_by_name(facet_store *s, const char *tenant, const char *facet_id,
                                char **err) {
  for (uint32_t i = 0; i < s->n_conns; i++) {
    facet_conn *c = s->conns[i];
    /* Compared in place, byte by byte: names are short, and this runs on
     * every exec. */
    const char *k = c->key, *t = tenant;
    while (*t != '\0' && *k == *t) {
      k++;
      t++;
    }
    if (*t != '\0' || (size_t)(k - c->key) != c->tenant_len) continue;
    if (facet_id == NULL ? *k == '\0' : *k == '/' && strcmp(k + 1, facet_id) == 0) {
      /* Swapped to the front: a request's many execs find their facet first. */
      s->conns[i] = s->conns[0];
      s->conns[0] = c;
      c->used = ++s->tick;
      return c;
    }
  }
  facet_conn *c = conn_open(s, tenant, facet_id, err);
  if (c == NULL) return NULL;
  if (s->n_conns >= s->opt.max_open) store_evict(s);
  if (s->n_conns >= s->opt.max_open) {
    /* Every connection is inside a transaction: grow rather than fail. */
    s->opt.max_open++;
    s->conns = xrealloc(s->conns, s->opt.max_open * sizeof *s->conns);
  }
  s->conns[s->n_conns++] = c;
  c->used = ++s->tick;
  return c;
}

__attribute__((hot))
facet_conn *facet__conn_by_name(facet_store *s, const char *tenant, const char *facet_id,
                                facet_ref *ref, char **err) {
  facet_conn *c = conn_by_name(s, tenant, facet_id, err);
  /* (The count read after the lookup, which may have evicted one.) */
  if (c != NULL && ref != NULL) *ref = (facet_ref){c, s->conn_generation};
  return c;
}

/* ---- The store ---- */

/* ---- SQLite's heap ---- */

/* SQLite's own hard heap limit needs its memory statistics, which cost a
 * small insert four mutex lock and unlock pairs (6-8% of its time). This
 * wrapper of its allocator counts with one relaxed atomic instead. */
static sqlite3_mem_methods heap_base;
static _Atomic int64_t heap_used;
static _Atomic int64_t heap_max = (int64_t)FACET_DEFAULT_HEAP_MB << 20;
_Atomic uint64_t facet__heap_refusal_count;

/* Counts `n` more bytes; 0 (and nothing counted) when that passes the limit. */
static int heap_fits(int64_t n) {
  if (atomic_fetch_add_explicit(&heap_used, n, memory_order_relaxed) + n <=
      atomic_load_explicit(&heap_max, memory_order_relaxed))
    return 1;
  atomic_fetch_sub_explicit(&heap_used, n, memory_order_relaxed);
  return 0;
}

static void heap_give(int64_t n) { atomic_fetch_sub_explicit(&heap_used, n, memory_order_relaxed); }

/* Small blocks freed are kept per thread and handed out again.
 *
 * Debian's SQLite is built without its lookaside allocator (OMIT_LOOKASIDE),
 * so running a statement asks malloc for a few small blocks and frees them
 * again: on a facet's insert, malloc and free ran more code than anything
 * of SQLite's but the VM, and that code pushed SQLite's own out of the
 * instruction cache (docs/benchmarks.md, facets). Small requests are made
 * in sizes of SMALL_STEP, so that a freed block of such a size can serve
 * any later request of its class. Kept blocks stay counted against the
 * heap limit (at most SMALL_CLASSES * SMALL_KEPT of them per thread), and
 * go back to the allocator when their thread ends. */
#define SMALL_STEP 32
#define SMALL_CLASSES 16 /* up to 512 bytes */
#define SMALL_KEPT 32    /* per class and thread */

struct small_blocks {
  void *head[SMALL_CLASSES];  /* each block starts with the next one's address */
  uint8_t count[SMALL_CLASSES];
  int state; /* 0: none kept yet, 1: keeps blocks, -1: the thread is ending */
};
static _Thread_local struct small_blocks small;
static pthread_key_t small_release_key;
static pthread_once_t small_release_once = PTHREAD_ONCE_INIT;
static int small_release_ok;

/* Kept blocks are poisoned for AddressSanitizer, as freed ones are: a use
 * after free of one is still reported. */
#if defined(__SANITIZE_ADDRESS__)
#define SMALL_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define SMALL_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define SMALL_POISON(p, n) ((void)(p), (void)(n))
#define SMALL_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

/* The next kept block of class k, taken off its list; NULL when none. */
static inline void *small_take(int k) {
  void *p = small.head[k];
  if (p == NULL) return NULL;
  SMALL_UNPOISON(p, (size_t)(k + 1) * SMALL_STEP);
  small.head[k] = *(void **)p;
  small.count[k]--;
  return p;
}

/* Frees every block the thread keeps; whether there were any. */
static int small_give_back(void) {
  int any = 0;
  for (int k = 0; k < SMALL_CLASSES; k++) {
    for (void *p; (p = small_take(k)) != NULL; any = 1) {
      heap_give(heap_base.xSize(p));
      heap_base.xFree(p);
    }
  }
  return any;
}

/* At the limit, the blocks this thread keeps are given back first; a
 * refusal is counted. */
static __attribute__((cold, noinline)) int heap_take_at_limit(int64_t n) {
  if (small_give_back() && heap_fits(n)) return 1;
  atomic_fetch_add_explicit(&facet__heap_refusal_count, 1, memory_order_relaxed);
  return 0;
}

static inline int heap_take(int64_t n) { return heap_fits(n) || heap_take_at_limit(n); }

/* The thread ends: its blocks go back, and any freed later (by another
 * key's destructor) go straight to the allocator. */
static void small_release(void *unused) {
  (void)unused;
  small.state = -1;
  small_give_back();
}

static void small_release_key_make(void) {
  small_release_ok = pthread_key_create(&small_release_key, small_release) == 0;
}

/* Whether this thread may keep blocks: its ending must give them back. */
static __attribute__((cold, noinline)) int small_register(void) {
  if (small.state < 0) return 0;
  if (pthread_once(&small_release_once, small_release_key_make) != 0 || !small_release_ok)
    return 0;
  /* (Any value but NULL: the destructor runs only then.) */
  if (pthread_setspecific(small_release_key, &small) != 0) return 0;
  small.state = 1;
  return 1;
}

/* Counted by the size the allocator reports, as heap_free counts it back:
 * one atomic operation per call on the common path. */
__attribute__((hot))
static void *heap_malloc(int n) {
  if (n > 0 && n <= SMALL_STEP * SMALL_CLASSES) {
    int k = (n - 1) / SMALL_STEP;
    void *p = small_take(k);
    if (p != NULL) return p;
    n = (k + 1) * SMALL_STEP;
  }
  void *p = heap_base.xMalloc(n);
  if (p != NULL && !heap_take(heap_base.xSize(p))) {
    heap_base.xFree(p);
    return NULL;
  }
  return p;
}

__attribute__((hot))
static void heap_free(void *p) {
  if (p == NULL) return;
  int64_t size = heap_base.xSize(p);
  if (size <= SMALL_STEP * SMALL_CLASSES && size % SMALL_STEP == 0 && size > 0) {
    int k = (int)(size / SMALL_STEP) - 1;
    if (small.count[k] < SMALL_KEPT && (small.state > 0 || small_register())) {
      *(void **)p = small.head[k];
      small.head[k] = p;
      small.count[k]++;
      SMALL_POISON(p, (size_t)size);
      return;
    }
  }
  heap_give(size);
  heap_base.xFree(p);
}

static void *heap_realloc(void *p, int n) {
  int64_t old = heap_base.xSize(p);
  /* Growth is asked for before it is made: a refusal leaves p as it was. */
  int64_t ask = n > old ? (int64_t)n - old : 0;
  if (ask > 0 && !heap_take(ask)) return NULL;
  void *q = heap_base.xRealloc(p, n);
  if (q == NULL) {
    heap_give(ask);
    return NULL;
  }
  int64_t now = heap_base.xSize(q);
  if (now != old + ask) heap_give(old + ask - now);
  return q;
}

uint64_t facet_heap_used(void) {
  int64_t used = atomic_load_explicit(&heap_used, memory_order_relaxed);
  return used > 0 ? (uint64_t)used : 0;
}

uint64_t facet__heap_limit_mb(void) {
  return (uint64_t)atomic_load_explicit(&heap_max, memory_order_relaxed) >> 20;
}

/* Both settings are only possible before SQLite initialises itself: later
 * they are refused, which costs nothing else. */
static void sqlite_configure(void) {
  static int done;
  if (done) return;
  done = 1;
  /* Nothing here reads SQLite's memory statistics: see above. */
  int rc = sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
  if (rc != SQLITE_OK) log_debug("SQLite keeps its memory statistics: %s", sqlite3_errstr(rc));
  rc = sqlite3_config(SQLITE_CONFIG_GETMALLOC, &heap_base);
  if (rc == SQLITE_OK) {
    sqlite3_mem_methods capped = heap_base;
    capped.xMalloc = heap_malloc;
    capped.xFree = heap_free;
    capped.xRealloc = heap_realloc;
    rc = sqlite3_config(SQLITE_CONFIG_MALLOC, &capped);
  }
  if (rc != SQLITE_OK)
    log_warn("SQLite's memory is not limited in this process: %s", sqlite3_errstr(rc));
}

facet_store *facet_store_new(const char *data_dir, const facet_options *options) {
  sqlite_configure();
  if (options != NULL && options->heap_limit_mb != 0)
    atomic_store(&heap_max, (int64_t)options->heap_limit_mb << 20);
  char *dir = facet__dir(data_dir, NULL, 0);
  int rc = facet__mkdir(dir);
  free(dir);
  if (rc != 0) {
    errno = -rc;
    return NULL;
  }
  facet_store *s = xcalloc(1, sizeof *s);
  s->data_dir = xstrdup(data_dir);
  if (options != NULL) s->opt = *options;
  if (s->opt.busy_timeout_ms == 0) s->opt.busy_timeout_ms = FACET_DEFAULT_BUSY_TIMEOUT_MS;
  if (s->opt.default_limit_mb == 0) s->opt.default_limit_mb = FACET_DEFAULT_LIMIT_MB;
  if (s->opt.max_open == 0) s->opt.max_open = FACET_DEFAULT_MAX_OPEN;
  s->conns = xcalloc(s->opt.max_open, sizeof *s->conns);
  return s;
}

static void failures_free(facet_store *s);

void facet_store_free(facet_store *s) {
  if (s == NULL) return;
  for (uint32_t i = 0; i < s->n_conns; i++) conn_close(s->conns[i]);
  while (s->changes != NULL) {
    facet_change *ch = s->changes;
    s->changes = ch->next;
    change_free(ch);
  }
  failures_free(s);
  printf_close(s);
  free(s->conns);
  free(s->data_dir);
  free(s);
}

void facet_store_release(facet_store *s, uint64_t token) {
  for (uint32_t i = 0; i < s->n_conns; i++) {
    facet_conn *c = s->conns[i];
    if (c->depth == 0 || c->txn_token != token) continue;
    /* Under the tenant's name, as the same warning from facet_call is. */
    char *tenant = xstrndup(c->key, c->tenant_len);
    log_write(LOG_WARN, tenant, NULL, NULL,
              "facet %s: rolling back a transaction its request left open", c->key);
    free(tenant);
    facet__conn_abandon_txn(c);
  }
}

int facet_store_pending(const facet_store *s) { return s->n_implicit > 0 || s->failures != NULL; }

/* Records "facet KEY: why" for the facet's owner, and for this gate's report. */
static void report_failure(char **err, const facet_conn *c, const char *why) {
  facet_store *s = c->store;
  char *tenant = xstrndup(c->key, c->tenant_len);
  log_write(LOG_ERROR, tenant, NULL, NULL, "facet %s: the run's writes were not stored: %s",
            c->key, why);
  free(tenant);
  /* One kept per facet, the latest: a facet whose owner is gone keeps no
   * more than that. */
  facet_failure *f = s->failures;
  while (f != NULL && strcmp(f->key, c->key) != 0) f = f->next;
  if (f == NULL) {
    f = xcalloc(1, sizeof *f);
    f->key = xstrdup(c->key);
    f->next = s->failures;
    s->failures = f;
  } else {
    free(f->message);
  }
  f->message = xasprintf("facet %s: %s", c->key, why);
  if (err != NULL && *err == NULL) *err = xstrdup(f->message);
}

static int failure_is_of(const facet_failure *f, const char *tenant, const char *facet_id) {
  size_t tlen = strlen(tenant);
  if (strncmp(f->key, tenant, tlen) != 0) return 0;
  if (facet_id == NULL) return f->key[tlen] == '\0';
  return f->key[tlen] == '/' && strcmp(f->key + tlen + 1, facet_id) == 0;
}

/* Takes the failures of one facet, or with any_of_tenant of every facet of
 * the tenant (its own and its children's): the first message is kept. */
static int take_failures(facet_store *s, const char *tenant, const char *facet_id,
                         int any_of_tenant, char **message) {
  *message = NULL;
  if (tenant == NULL) return 0;
  size_t tlen = strlen(tenant);
  for (facet_failure **at = &s->failures; *at != NULL;) {
    facet_failure *f = *at;
    int match = any_of_tenant ? strncmp(f->key, tenant, tlen) == 0 &&
                                    (f->key[tlen] == '\0' || f->key[tlen] == '/')
                              : failure_is_of(f, tenant, facet_id);
    if (!match) {
      at = &f->next;
      continue;
    }
    *at = f->next;
    if (*message == NULL) *message = f->message;
    else free(f->message);
    free(f->key);
    free(f);
  }
  return *message != NULL;
}

int facet_store_take_failure(facet_store *s, const char *tenant, const char *facet_id,
                             char **message) {
  return take_failures(s, tenant, facet_id, 0, message);
}

static void failures_free(facet_store *s) {
  while (s->failures != NULL) {
    facet_failure *f = s->failures;
    s->failures = f->next;
    free(f->key);
    free(f->message);
    free(f);
  }
}

int facet_store_commit(facet_store *s, char **err) {
  if (err != NULL) *err = NULL;
  int failed = 0, open_left = 0;
  for (uint32_t i = 0; i < s->n_conns && s->n_implicit > 0; i++) {
    facet_conn *c = s->conns[i];
    if (c->lost != NULL) {
      report_failure(err, c, c->lost);
      forget_loss(c);
      failed = 1;
    }
    if (!c->implicit) continue;
    /* Inside transactionSync (a host call made from its function): the
     * gate after it returns commits it. */
    if (c->depth > 0) {
      open_left = 1;
      continue;
    }
    int rc = facet__conn_exec_trusted(c, "COMMIT");
    if (rc == SQLITE_OK) {
      facet__conn_drop_implicit(c, NULL);
      continue;
    }
    report_failure(err, c, facet__conn_error(c));
    facet__conn_abandon_txn(c);
    forget_loss(c);
    failed = 1;
  }
  return failed ? -1 : open_left;
}

void facet_store_rollback(facet_store *s) {
  for (uint32_t i = 0; i < s->n_conns && s->n_implicit > 0; i++) {
    facet_conn *c = s->conns[i];
    if (c->implicit) facet__conn_abandon_txn(c);
    forget_loss(c);
  }
}

static int conn_of_tenant(const facet_conn *c, const char *tenant, size_t tlen) {
  return c->tenant_len == tlen && memcmp(c->key, tenant, tlen) == 0;
}

int facet_store_pending_tenant(const facet_store *s, const char *tenant) {
  size_t tlen = strlen(tenant);
  for (uint32_t i = 0; i < s->n_conns; i++) {
    const facet_conn *c = s->conns[i];
    if (conn_of_tenant(c, tenant, tlen) && (c->implicit || c->lost)) return 1;
  }
  for (const facet_failure *f = s->failures; f != NULL; f = f->next)
    if (strncmp(f->key, tenant, tlen) == 0 && (f->key[tlen] == '\0' || f->key[tlen] == '/'))
      return 1;
  return 0;
}

void facet_store_rollback_tenant(facet_store *s, const char *tenant) {
  size_t tlen = strlen(tenant);
  for (uint32_t i = 0; i < s->n_conns && s->n_implicit > 0; i++) {
    facet_conn *c = s->conns[i];
    if (!conn_of_tenant(c, tenant, tlen)) continue;
    if (c->implicit) facet__conn_abandon_txn(c);
    forget_loss(c);
  }
}

int facet_store_take_tenant_failure(facet_store *s, const char *tenant, char **message) {
  return take_failures(s, tenant, NULL, 1, message);
}

/* Closing drops what the connection has not committed: whoever waits for
 * those writes is told they failed, never that they were stored. */
static void close_reporting(facet_conn *c) {
  if (c->implicit || c->lost != NULL)
    report_failure(NULL, c, "the facet was closed before its writes were committed");
  conn_close(c);
}

void facet_store_close_facet(facet_store *s, const char *tenant, const char *facet_id) {
  size_t tlen = strlen(tenant);
  for (uint32_t i = 0; i < s->n_conns; i++) {
    facet_conn *c = s->conns[i];
    if (c->tenant_len != tlen || memcmp(c->key, tenant, tlen) != 0 || c->key[tlen] != '/' ||
        strcmp(c->key + tlen + 1, facet_id) != 0)
      continue;
    close_reporting(c);
    s->conns[i] = s->conns[--s->n_conns];
    return;
  }
}

void facet_store_close_tenant(facet_store *s, const char *tenant) {
  size_t tlen = strlen(tenant);
  for (uint32_t i = 0; i < s->n_conns;) {
    facet_conn *c = s->conns[i];
    if (c->tenant_len == tlen && memcmp(c->key, tenant, tlen) == 0) {
      close_reporting(c);
      s->conns[i] = s->conns[--s->n_conns];
    } else {
      i++;
    }
  }
}
