/*
 * What the files of facets/ share. Not part of the public interface.
 */
#ifndef EDGENODE_FACETS_INTERNAL_H
#define EDGENODE_FACETS_INTERNAL_H

#include <sqlite3.h>
#include <stdatomic.h>

#include "facets.h"

/* DATA/facets, or DATA/facets/<tenant> when child is set; heap string. */
char *facet__dir(const char *data_dir, const char *tenant, int child);

/* mkdir with mode 0700; an existing directory is fine. Returns 0 or -errno. */
int facet__mkdir(const char *path);

/* Applies the settings every connection to a tenant's file gets, whoever
 * opens it: untrusted schema, defensive mode, no extensions. Returns an
 * SQLite result code. */
int facet__harden(sqlite3 *db);
/* DATA/facets/<tenant>.purged: the mark facet_purge leaves (facets.h). */
char *facet__purged_mark(const char *data_dir, const char *tenant);

/* The online backup of src (labelled `what` in messages) into dest_path,
 * replaced, in one step (admin.c). wal_format: the copy keeps the WAL
 * flag of the source's header (bytes 18 and 19 = 2) as a file in WAL mode
 * with nothing left in its WAL; otherwise it is a rollback-journal file.
 * Returns 0 or a negative errno with a message in *err (may be NULL). */
int facet__backup(sqlite3 *src, const char *what, const char *dest_path, int wal_format,
                  char **err);

/* ---- Change records (record.c; the format is in facets.h) ---- */

#define FACET__RECORD_HEADER 20 /* magic, version, 3 zero bytes, page size, db pages, n pages */
#define FACET__RECORD_TRAILER 4 /* CRC-32C of everything before it */

static inline void facet__put_le32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
  p[2] = (uint8_t)(v >> 16);
  p[3] = (uint8_t)(v >> 24);
}

static inline uint32_t facet__get_le32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* CRC-32C (Castagnoli), as iSCSI and ext4 use it: crc32c("123456789") = 0xe3069283. */
uint32_t facet__crc32c(const void *data, size_t len);
/* Writes the header in front of the n_pages (page number, page) pairs at
 * rec + FACET__RECORD_HEADER and the checksum after them (room for it
 * must be there). Returns the record's length. */
size_t facet__record_seal(uint8_t *rec, uint32_t page_size, uint32_t db_pages, uint32_t n_pages);

#endif

/* ---- The worker side: capture.c (WAL frames of each commit) ---- */

/* Receives one sealed record (owned by the sink now: sqlite3_free). */
typedef void (*facet__capture_sink)(void *arg, uint8_t *rec, size_t len);
/* Sees a commit's sealed record before its commit frame is written; the
 * commit goes on only when it returns 0 (facet_options.publish). */
typedef int (*facet__capture_gate)(void *arg, const uint8_t *rec, size_t len);
/* The name of the capturing VFS, registered on first use; NULL when it
 * could not be. */
const char *facet__capture_vfs(void);
/* Starts capturing the commits of db (opened with that VFS, outside any
 * write transaction). Returns an SQLite code. */
int facet__capture_attach(sqlite3 *db, uint32_t page_size, facet__capture_sink sink,
                          facet__capture_gate gate, void *arg);
/* Stops it; a transaction in progress is then not captured. */
void facet__capture_detach(sqlite3 *db);

/* ---- The worker side: store.c (connections) and exec.c (operations) ---- */

#define FACET_STMT_CACHE 32
/* SQLite's default limit on a function's arguments. */
#define FACET_PRINTF_ARGS_MAX 127

typedef struct facet_cached_stmt {
  char *sql;          /* owned copy of the text; NULL = empty slot */
  size_t len;
  uint64_t hash;
  sqlite3_stmt *stmt;
  uint64_t used;      /* store tick of the last use */
  uint64_t id;        /* the handle JavaScript runs it by (facet__cache_by_id) */
  int n_params;       /* sqlite3_bind_parameter_count, the same once prepared again */
  int vacuum;         /* VACUUM: cannot run inside the implicit transaction */
} facet_cached_stmt;

/* Writes a gate could not store, kept for the sandbox whose facet they were
 * in: whoever's gate committed them, only that one may answer for them. */
typedef struct facet_failure {
  char *key;     /* the facet: "<tenant>" or "<tenant>/<id>" */
  char *message; /* "facet KEY: why" */
  struct facet_failure *next;
} facet_failure;

/* One open facet file. */
typedef struct facet_conn {
  facet_store *store;
  sqlite3 *db;
  char *key;              /* "<tenant>" or "<tenant>/<id>" */
  size_t tenant_len;      /* length of the tenant part of key */
  uint64_t used;          /* store tick of the last use (LRU) */
  uint64_t limit_mb;      /* size limit applied through max_page_count */
  int64_t page_size;
  int depth;              /* transactionSync nesting; 0 = autocommit */
  int aborted;            /* SQLite rolled the open transaction back by itself */
  int implicit;           /* coalescing: a transaction the host commits is open */
  char *lost;             /* coalescing: why SQLite dropped the run's writes (heap); NULL = none */
  uint64_t txn_token;     /* the request that opened the transaction */
  int trusted;            /* running our own SQL: the authorizer allows everything */
  int stepping;           /* inside sqlite3_step of tenant SQL */
  uint64_t cpu_deadline_ns; /* 0 = no limit */
  int interrupted;        /* the progress handler stopped the statement */
  uint64_t busy_deadline_ns; /* monotonic; writers stop waiting then; 0 = not waited yet */
  const char *denied;     /* why the authorizer said no (static text) */
  char *gate_why;         /* why publish() refused the last commit (heap), or NULL */
  int checkpoint_due;     /* coalescing: the WAL is long enough for facet_store_checkpoint */
  char denied_buf[160];
  facet_cached_stmt cache[FACET_STMT_CACHE];
} facet_conn;

/* The message of the connection's last failure: publish()'s refusal when
 * that is what failed the commit, else SQLite's. */
const char *facet__conn_error(const facet_conn *c);

/* A change record waiting for facet_store_take_changes. */
typedef struct facet_change {
  struct facet_change *next;
  char *names;     /* "<tenant>\0<id>" or "<tenant>\0" (heap) */
  int child;       /* names has an id */
  uint8_t *rec;    /* sqlite3_malloc */
  size_t len;
} facet_change;

struct facet_store {
  char *data_dir;
  facet_options opt;
  facet_conn **conns;
  uint32_t n_conns;
  uint64_t tick;
  uint64_t stmt_ids;  /* statements cached so far: the next id's sequence */
  uint64_t conn_generation; /* connections closed so far (facet_ref) */
  uint32_t n_implicit; /* connections with an implicit transaction open, or writes lost */
  uint32_t n_checkpoints_due; /* connections with checkpoint_due set */
  struct facet_failure *failures; /* gates that lost writes, until their owner takes them */
  facet_change *changes, **changes_tail; /* replication: records not taken yet, oldest first */
  sqlite3 *printf_db; /* runs SQLite's own printf() for the guarded one (store.c) */
  sqlite3_stmt *printf_stmts[FACET_PRINTF_ARGS_MAX + 1]; /* by argument count */
};

/* Allocations SQLite was refused for its memory limit so far: when the
 * count moved during a call, its SQLITE_NOMEM came from the limit. */
extern _Atomic uint64_t facet__heap_refusal_count;
static inline uint64_t facet__heap_refusals(void) {
  return atomic_load_explicit(&facet__heap_refusal_count, memory_order_relaxed);
}
uint64_t facet__heap_limit_mb(void);

/* The connection for a facet by its names, opened on first use; a ref
 * (facets.h; may be NULL) is set to it. NULL with *err set (a heap message
 * the caller frees) when it cannot be opened. */
facet_conn *facet__conn_by_name(facet_store *s, const char *tenant, const char *facet_id,
                                facet_ref *ref, char **err);
/* The same, but the connection a ref remembers while no connection has
 * closed since, without looking at the names (inline: every exec). */
static inline facet_conn *facet__conn_get(facet_store *s, const char *tenant,
                                          const char *facet_id, facet_ref *ref, char **err) {
  if (ref != NULL && ref->conn != NULL && ref->generation == s->conn_generation) {
    facet_conn *c = ref->conn;
    c->used = ++s->tick;
    return c;
  }
  return facet__conn_by_name(s, tenant, facet_id, ref, err);
}
/* Starts the call's busy clock at the first wait: most calls never wait,
 * and reading no clock for them is cheaper. */
void facet__busy_start(facet_conn *c, uint64_t now);
/* Runs our own SQL (no rows) past the authorizer. Returns an SQLite code. */
int facet__conn_exec_trusted(facet_conn *c, const char *sql);
/* One integer from our own single-row query; -1 on failure. */
int64_t facet__conn_query_int(facet_conn *c, const char *sql);
/* Rolls back whatever transaction is open and forgets its nesting. An
 * implicit transaction's writes are recorded as lost (why: static text)
 * unless why is NULL. */
void facet__conn_abandon_txn(facet_conn *c);
void facet__conn_drop_implicit(facet_conn *c, const char *why);
/* Whether a statement starts with the keyword VACUUM. */
int facet__is_vacuum(sqlite3_stmt *st);
/* Applies max_page_count for limit_mb if it changed. Returns an SQLite code. */
int facet__conn_set_limit(facet_conn *c, uint64_t limit_mb);
static inline int facet__conn_limit(facet_conn *c, uint64_t limit_mb) {
  return limit_mb == c->limit_mb ? SQLITE_OK : facet__conn_set_limit(c, limit_mb);
}
/* A statement of tenant SQL from the cache, or NULL. */
facet_cached_stmt *facet__cache_get(facet_conn *c, const char *sql, size_t len);
/* Keeps a prepared single statement for its text (the cache owns it).
 * Returns its id, or 0 when the text is too long to keep: the statement is
 * then still the caller's. */
uint64_t facet__cache_put(facet_conn *c, const char *sql, size_t len, sqlite3_stmt *stmt);
/* An id names its slot in the low bits, so a lookup is one comparison; the
 * sequence above them never repeats (2^48 statements before it would pass
 * the integers a JavaScript number holds exactly). */
#define FACET_ID_SLOT_BITS 5
_Static_assert(FACET_STMT_CACHE <= 1 << FACET_ID_SLOT_BITS, "statement ids need more slot bits");
/* A cached statement by the id facet__cache_put gave it, or NULL once it
 * left the cache. Ids are unique within the store and never reused, so an
 * id from another connection or a closed one finds nothing. (Inline: every
 * exec.) */
static inline facet_cached_stmt *facet__cache_by_id(facet_conn *c, uint64_t id) {
  facet_cached_stmt *e = &c->cache[id & ((1u << FACET_ID_SLOT_BITS) - 1)];
  if (id == 0 || e->sql == NULL || e->id != id) return NULL;
  e->used = ++c->store->tick;
  return e;
}
