/*
 * facets: every worker's private, persistent SQLite database.
 *
 * A facet is one SQLite file that outlives every sandbox that used it:
 *   DATA/facets/<worker>.sqlite           the worker's own facet
 *   DATA/facets/<worker>/<id>.sqlite      facets of the worker's loader children
 * Files are in WAL mode; an exec that returned has committed (synchronous=FULL
 * by default). Several worker processes may open the same facet: writers wait
 * for each other (busy handler plus retry), so SQLITE_BUSY never reaches
 * JavaScript.
 *
 * Two halves, two libraries:
 *   - the worker side (facet_store_*, facet_call, library `facets`) runs
 *     tenants' SQL from the runtime's facet binding (isolate/runtime/50-facet.js).
 *     It speaks the isolate wire format, so it links `isolate`;
 *   - the operators' side (facet_describe, facet_backup_to, facet_purge,
 *     library `facets_admin`) works on the files directly and never touches V8,
 *     so the supervisor can link it.
 *
 * Containment: tenants' SQL runs behind an authorizer that denies ATTACH,
 * DETACH, VACUUM INTO, BEGIN/COMMIT/SAVEPOINT (transactions go through
 * transactionSync), temporary objects and every PRAGMA outside a short
 * allow-list; extension loading is off, SQLITE_DBCONFIG_DEFENSIVE is on and
 * the schema is untrusted. A size limit (max_page_count) turns a growing
 * facet into a "facet is full" error, and a progress handler interrupts SQL
 * at the request's CPU deadline. Plain VACUUM is allowed: it only rewrites
 * the facet's own file and is how a tenant gives space back after deleting.
 *
 * Threading: a facet_store is used from one thread (the worker's loop
 * thread). The admin functions open their own connections and may be called
 * from any thread.
 */
#ifndef EDGENODE_FACETS_H
#define EDGENODE_FACETS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* The worker side speaks isolate.h's wire types; the supervisor, which links
 * only the admin side, never sees isolate.h: the types are named here and
 * defined there. */
typedef struct iso_call iso_call;
typedef struct iso_wire iso_wire;
typedef struct iso_wire_value iso_wire_value;
typedef struct iso_numbers iso_numbers;

#define FACET_DEFAULT_LIMIT_MB 1024
#define FACET_DEFAULT_BUSY_TIMEOUT_MS 5000
#define FACET_DEFAULT_MAX_OPEN 64
#define FACET_DEFAULT_HEAP_MB 1024
#define FACET_ID_MAX 64

typedef struct facet_store facet_store;

typedef enum facet_sync {
  FACET_SYNC_FULL = 0,   /* fsync the WAL at every commit: survives power loss */
  FACET_SYNC_NORMAL = 1, /* survives a process crash; a power loss may lose the last commits */
} facet_sync;

/* Zero-initialised options mean the defaults. */
typedef struct facet_options {
  facet_sync synchronous;
  uint32_t busy_timeout_ms;  /* how long a writer waits for another process; 0 = 5000 */
  uint64_t default_limit_mb; /* size limit when facet_call gets limit_mb 0; 0 = 1024 */
  uint32_t max_open;         /* connections kept open (LRU); 0 = 64 */
  /* What SQLite may allocate in this process, all facets together: SQL
   * such as SELECT randomblob(60000000), randomblob(60000000), ... (up to
   * 2,000 columns) materialises a row before any check of ours could run,
   * and would take the whole process down. Past it, the statement fails
   * with an out-of-memory error and frees what it held. Process-wide: a
   * store that names it sets it for all; 0 = leave it (1024 by default). */
  uint32_t heap_limit_mb;
  /* Write coalescing (the worker's mode): statements outside
   * transactionSync no longer commit one by one. A facet's first statement
   * opens an implicit transaction that stays open until the host calls
   * facet_store_commit() (the output gate: before anything the request
   * produced leaves the process, and when its JavaScript yields), so the
   * writes of one synchronous run are one atomic, durable commit. Off: each
   * statement commits by itself, as facet_call did before. */
  int coalesce;
} facet_options;

/* Bytes SQLite holds in this process, all facets together: what
 * heap_limit_mb limits. */
uint64_t facet_heap_used(void);

/* ---- Names and paths (library facets_admin) ---- */

/* Loader children's facet ids: [A-Za-z0-9_-]{1,64}. Returns 1 when valid. */
int facet_id_valid(const char *id, size_t len);

/* The owner of /v1/run's named facets, DATA/facets/_run/<NAME>.sqlite: no
 * worker name can be it (they start with a letter or a digit), so no
 * worker's children share the directory. facet_path takes it as a tenant. */
#define FACET_RUN_OWNER "_run"

/*
 * The file of a facet: DATA/facets/<tenant>.sqlite, or
 * DATA/facets/<tenant>/<facet_id>.sqlite when facet_id is not NULL.
 * Returns a heap string, or NULL when tenant is not a valid worker name or
 * facet_id not a valid id: no name a tenant controls can leave its directory.
 */
char *facet_path(const char *data_dir, const char *tenant, const char *facet_id);

/* ---- The worker side (library facets) ---- */

/*
 * Creates a store of facets under data_dir (creating DATA/facets if needed).
 * Connections open lazily on first use. options may be NULL (defaults).
 * Returns NULL with errno set when DATA/facets cannot be created.
 */
facet_store *facet_store_new(const char *data_dir, const facet_options *options);

/* Rolls back any open transaction and closes every connection. NULL is a no-op. */
void facet_store_free(facet_store *s);

/*
 * Runs one operation of the facet binding for `tenant` (the worker's name):
 * its own facet when facet_id is NULL, else its loader child's facet
 * `facet_id`. call->op and call->args are what 50-facet.js sent:
 *   "exec"      [sql, param...]  -> [n, name_1..name_n, values..., rowsRead, rowsWritten]
 *                                   (sql: the text, or an id from "prepare")
 *                                   n columns, then the last statement's rows,
 *                                   row-major, all in one flat array; just
 *                                   [rowsRead, rowsWritten] when it has no columns
 *   "prepare"   [sql]            -> number: an id that exec accepts in place of
 *                                   this text while the statement stays cached
 *                                   (exec then answers null once it left: send
 *                                   the text again); null when the text is not
 *                                   one cacheable statement; false when it does
 *                                   not compile (exec of the text says why)
 *   "size"      []               -> number: database size in bytes
 *   "begin"     []               -> undefined: BEGIN IMMEDIATE, or a savepoint when nested
 *   "commit"    []               -> undefined: COMMIT / RELEASE of the innermost level
 *   "rollback"  []               -> undefined: ROLLBACK / ROLLBACK TO of the innermost level
 * rowsRead counts the rows the statements returned plus the rows full scans
 * stepped over (SQLite keeps no exact count); rowsWritten the rows inserted,
 * updated or deleted, by triggers too. Several statements in one text run in
 * one transaction (BEGIN IMMEDIATE, or a savepoint inside transactionSync).
 * limit_mb is the facet's size limit (0 = the store's default).
 * cpu_deadline_ns is an absolute CLOCK_THREAD_CPUTIME_ID time (0 = none):
 * SQL still running then is interrupted with the error "exceeded CPU limit"
 * (the host can tell by its own clock: time_thread_cpu_ns() >= deadline).
 * Reading that clock is a system call (microseconds in some VMs): a host
 * should compute the deadline once per entry into JavaScript, not per call.
 * facet_call itself reads it only when a statement could have reached it.
 *
 * Returns 0 with the result value appended to *result, or -1 with an error
 * value {"name": "Error" | "TypeError", "message": ...} appended instead.
 * Every failure leaves the facet as it was before the statement.
 */
int facet_call(facet_store *s, const char *tenant, const char *facet_id, uint64_t limit_mb,
               const iso_call *call, uint64_t cpu_deadline_ns, iso_wire *result);

/*
 * A caller's memo of the connection its last facet_exec found: while the
 * store has closed no connection since, the next call skips the lookup by
 * name. Zeroed to start, filled by facet_exec; one per (tenant, facet_id),
 * which must stay the same for as long as the memo is passed.
 */
typedef struct facet_ref {
  void *conn;
  uint64_t generation;
} facet_ref;

/*
 * facet_call's "exec" with its arguments decoded (iso_host_calls.call_values):
 * args are [sql or statement id, param...]. When numbers is not NULL, a
 * statement without columns answers its [rowsRead, rowsWritten] there
 * (numbers->count = 2) and writes nothing to *result; every other answer
 * and every error goes to *result as facet_call's would. ref may be NULL.
 */
int facet_exec(facet_store *s, const char *tenant, const char *facet_id, facet_ref *ref,
               uint64_t limit_mb, uint64_t token, uint64_t cpu_deadline_ns,
               const iso_wire_value *args, uint32_t n_args, iso_numbers *numbers,
               iso_wire *result);

/*
 * Request `token` is over: rolls back a transaction it left open (JavaScript
 * terminated inside transactionSync, at the CPU or memory limit), so that
 * the facet's write lock is not held until the next call. Call it from the
 * host's done callback; cheap when there is nothing to do.
 */
void facet_store_release(facet_store *s, uint64_t token);

/*
 * The output gate (facet_options.coalesce). facet_store_pending() is
 * non-zero while some facet holds writes not committed yet: what the
 * running JavaScript produced must wait for facet_store_commit().
 * facet_store_commit() commits every open implicit transaction (fsync as
 * the store's synchronous setting says). Returns 0; 1 when some facet is
 * inside transactionSync (a host call made from its function), which stays
 * open for a later gate and is not durable yet; or -1 when any of them
 * could not be made durable (disk full, an I/O error, or SQLite having
 * rolled the request's earlier writes back after an error): those writes
 * are gone, and *err (when not NULL) gets a heap message naming the facet
 * ("facet hello: database or disk is full"); the caller must then not
 * show the client anything that depended on them. The rest are committed.
 * facet_store_rollback() drops every open implicit transaction instead
 * (JavaScript was terminated mid-run: what it wrote is not kept).
 */
int facet_store_pending(const facet_store *s);
int facet_store_commit(facet_store *s, char **err);
void facet_store_rollback(facet_store *s);

/* Closes the tenant's cached connections (its own facet and its children's),
 * e.g. on redeploy or delete. */
void facet_store_close_tenant(facet_store *s, const char *tenant);

/* Closes the connection of one facet (a run's, when the run is over), so
 * that a delete of its file leaves nothing here writing into it. Call it
 * between units of work, never inside a transaction. */
void facet_store_close_facet(facet_store *s, const char *tenant, const char *facet_id);

/* ---- Operators (library facets_admin) ---- */

/*
 * Describes a worker's facet for GET /v1/workers/{name}/facet:
 *   {"worker": "...", "path": "facets/<w>.sqlite", "size_bytes": n, "page_size": n,
 *    "page_count": n, "freelist_count": n, "wal_bytes": n,
 *    "tables": [{"name": "...", "rows": n}, ...],
 *    "children": [{"id": "...", "size_bytes": n}, ...]}
 * Counting rows reads every table: slow for large facets.
 * Returns 0 with *out set (caller owns it), -EINVAL for an invalid name,
 * -ENOENT when the worker has no facet, or another negative errno (-EIO for
 * SQLite errors) with a message in *err (caller frees; may be NULL).
 */
int facet_describe(const char *data_dir, const char *tenant, json_t **out, char **err);

/*
 * Writes a consistent copy of the live facet to dest_path (created or
 * replaced) with SQLite's online backup API, in one step, so that writers in
 * worker processes are never blocked (WAL) and the copy is one snapshot. The
 * copy is a self-contained file in rollback-journal mode.
 * facet_id as for facet_call. Returns 0, -EINVAL, -ENOENT, or another
 * negative errno with a message in *err (caller frees; may be NULL).
 */
int facet_backup_to(const char *data_dir, const char *tenant, const char *facet_id,
                    const char *dest_path, char **err);

/*
 * Deletes a worker's facet and its children's (DELETE ...?purge=true). Worker
 * processes must have closed the tenant first (facet_store_close_tenant): a
 * connection still open keeps writing into the deleted file. Returns 0 (also
 * when there was nothing), -EINVAL, or another negative errno.
 *
 * It leaves a mark first: a worker process that has not yet heard of the
 * delete, still serving the worker, must not make the facet again (a later
 * deploy under that name would find what it wrote). A store refuses to
 * create a facet of a marked tenant; facet_unpurge, when the name is
 * deployed again, lifts the mark.
 */
int facet_purge(const char *data_dir, const char *tenant);
int facet_unpurge(const char *data_dir, const char *tenant);
/* Whether the tenant's facet was purged and the name not deployed since. */
int facet_purged(const char *data_dir, const char *tenant);

/* /v1/run's named facets, for GET /v1/run/facets: [{"id", "size_bytes"}]
 * (size of the database file, its WAL aside), at most 1000. */
json_t *facet_run_list(const char *data_dir);
/* Deletes run facet `name` and its WAL: 0, -EINVAL (not a facet name),
 * -ENOENT (none), or another negative errno. */
int facet_run_delete(const char *data_dir, const char *name);

#endif
