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
 * Replication (below) spans both: the worker side captures each commit as
 * a change record and takes snapshots; the admin side applies records to a
 * replica.
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
  /* Replication: every commit of every facet of the store is captured as
   * a change record (the pages it wrote, see "Replication" below) for
   * facet_store_take_changes(). A transaction's pages are held in memory
   * until it ends (SQLite's heap: heap_limit_mb bounds the largest one;
   * past it the write fails with an out-of-memory error). Off: facets
   * open with SQLite's own VFS and capture costs nothing. */
  int replicate;
  /* Replication in a fleet (with replicate): publish() is handed every
   * commit's record while SQLite still holds the facet's write lock, before
   * the commit is written, and the commit happens only when it returns 0;
   * otherwise it fails with `why` (a NUL-terminated message) and the
   * facet is as it was. So commits reach the fleet in their order, even
   * from several processes, and none is durable here that the fleet has not
   * acknowledged. acquire() is asked before a tenant's facet is opened (0:
   * this node may serve it; otherwise `why` says why not). Both block the
   * caller's thread; both NULL: facets are this node's alone. */
  int (*publish)(void *arg, const char *tenant, const char *facet_id, const void *rec,
                 size_t len, char *why, size_t why_len);
  int (*acquire)(void *arg, const char *tenant, char *why, size_t why_len);
  void *hook_arg;
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
 * name. Zeroed to start, filled by facet_exec.
 */
typedef struct facet_ref {
  void *conn;
  uint64_t generation;
} facet_ref;

/*
 * Whose facet an exec runs on and within what, kept by the caller from one
 * call to the next (one per (tenant, facet_id), which stay the same for as
 * long as it is passed: ref remembers their connection); token and
 * cpu_deadline_ns are set for each call. Passed whole, so that a caller
 * hands its call on without a frame of its own.
 */
typedef struct facet_target {
  const char *tenant;
  const char *facet_id;     /* NULL: the tenant's own facet */
  uint64_t limit_mb;        /* 0: the store's default */
  uint64_t token;           /* the request making the call (facet_call's call->token) */
  uint64_t cpu_deadline_ns; /* as for facet_call */
  facet_ref ref;
} facet_target;

/*
 * facet_call's "exec" with its arguments decoded (iso_host_calls.call_values):
 * args are [sql or statement id, param...]. When numbers is not NULL, a
 * statement without columns answers its [rowsRead, rowsWritten] there
 * (numbers->count = 2) and writes nothing to *result; every other answer
 * and every error goes to *result as facet_call's would.
 */
int facet_exec(facet_store *s, facet_target *t, const iso_wire_value *args, uint32_t n_args,
               iso_numbers *numbers, iso_wire *result);

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
/*
 * Checkpoints, with coalescing: a commit that leaves a facet's WAL at 1,000
 * frames or more does not copy it into the database file itself (SQLite's
 * automatic checkpoint, which would delay whatever waits for the commit)
 * but leaves a checkpoint due: facet_store_checkpoint_due() is then
 * non-zero, and facet_store_checkpoint() runs the due ones (PASSIVE, at
 * once; a facet still inside a transaction stays due). Call it once the
 * gate's responses are out. Durability does not wait for it: a commit is
 * in the WAL, fsynced, when it returns. A WAL that reaches 4,000 frames is
 * checkpointed by the commit all the same. Without coalescing, commits
 * checkpoint as SQLite does.
 */
int facet_store_checkpoint_due(const facet_store *s);
void facet_store_checkpoint(facet_store *s);
/* The same for one tenant's facets (its own and its children's) alone:
 * whether they have writes waiting for a commit (or a failure not taken),
 * rolling them back, and taking every failure of theirs (the first
 * message; 0 when there was none). */
int facet_store_pending_tenant(const facet_store *s, const char *tenant);
void facet_store_rollback_tenant(facet_store *s, const char *tenant);
int facet_store_take_tenant_failure(facet_store *s, const char *tenant, char **message);
/*
 * A failed commit is also kept, by facet, until the facet's owner takes it:
 * a gate reached for one sandbox commits every facet's writes, but only the
 * sandbox whose facet (tenant, facet_id) lost them may answer for that.
 * Returns 1 with *message (heap) when the facet had lost writes since its
 * owner last looked, else 0. facet_store_pending() stays non-zero while any
 * is kept.
 */
int facet_store_take_failure(facet_store *s, const char *tenant, const char *facet_id,
                             char **message);

/* Closes the tenant's cached connections (its own facet and its children's),
 * e.g. on redeploy or delete. */
void facet_store_close_tenant(facet_store *s, const char *tenant);

/* ---- Replication (facet_options.replicate) ----
 *
 * A change record is what one commit changed in a facet's file: each page
 * SQLite wrote into the WAL for it (so tables without a primary key,
 * WITHOUT ROWID tables, indexes, the schema and the freelist alike), and
 * the database's size after it. Applied in commit order to a copy of the
 * facet taken before the first of them (facet_store_snapshot), records
 * make that copy the facet, page for page.
 *
 * Format (version 1; integers little-endian, a record is self-contained):
 *   offset  size  field
 *   0       4     magic "EFWR"
 *   4       1     version: 1
 *   5       3     zero
 *   8       4     page size in bytes (a power of two, 512..65536)
 *   12      4     database size in pages after the commit (>= 1)
 *   16      4     n: the number of pages that follow
 *   20      n*(4+page size)  n times: page number (from 1), the page's bytes
 *   20+n*(4+page size)  4    CRC-32C (Castagnoli) of every byte before it
 * Pages are in the order SQLite wrote them; one spilled from the cache and
 * then written again is there twice, and the later copy is the one that
 * counts. Pages past the database size (a transaction that grew and then
 * shrank the file) are cut off by it. A record is 24 + n*(4+page size)
 * bytes: one small insert is two or three pages.
 *
 * What is captured: the commits this process's store makes, and only
 * those. The facet must have one writer, this store (another process's
 * commits to the same file are not in its records), and the replica must
 * start from a snapshot taken by this store (or be empty with a first
 * record that holds every page: a facet replicated since it was made).
 */
#define FACET_RECORD_MAGIC "EFWR"
#define FACET_RECORD_VERSION 1

/*
 * Hands over each change record the store's facets committed since the
 * last take, oldest first, to cb(arg, tenant, facet_id, rec, len):
 * facet_id is NULL for the tenant's own facet; rec is valid only during
 * the call. A record is complete once the commit returned (after
 * facet_store_commit(), or after facet_call in the non-coalescing mode).
 * When cb returns non-zero, that record and the later ones stay for the
 * next take and this returns that value; otherwise 0. Untaken records stay
 * in memory (counted in SQLite's heap): take them after every commit.
 */
typedef int (*facet_change_cb)(void *arg, const char *tenant, const char *facet_id,
                               const void *rec, size_t len);
int facet_store_take_changes(facet_store *s, facet_change_cb cb, void *arg);

/*
 * Writes a consistent copy of the facet, as this store's connection sees
 * it, to dest_path (created or replaced): the base that records apply to.
 * It holds exactly the commits whose records were taken before the call,
 * so it refuses (-EBUSY, with a message) while the facet has a transaction
 * open or records not taken yet. The copy is in WAL format (header bytes
 * 18 and 19 = 2) with its WAL folded in, the same kind of file as the
 * facet after a checkpoint, so records (whose page 1 says WAL) apply to it
 * without changing its mode, and it opens as a facet. Its pages are the
 * facet's, but for page 1's change counter, version-valid-for number and
 * schema cookie, which the backup API rewrites (the next record with page 1 brings the facet's
 * back; SQLite reads neither from a file nobody has open). Returns 0,
 * -EINVAL (names), -ENOENT (no such facet), -EBUSY, or another negative
 * errno with a message in *err (caller frees; may be NULL).
 */
int facet_store_snapshot(facet_store *s, const char *tenant, const char *facet_id,
                         const char *dest_path, char **err);

/* ---- Change records (library facets_admin: the node restoring a facet) ---- */

typedef struct facet_record_info {
  uint32_t page_size;
  uint32_t db_pages; /* database size after the commit */
  uint32_t n_pages;  /* pages the record holds */
} facet_record_info;

/* Checks a record (magic, version, sizes, checksum, page numbers) and
 * describes it. Returns 0, or -EINVAL with a message in *err (caller
 * frees; may be NULL). */
int facet_record_read(const void *rec, size_t len, facet_record_info *info, char **err);

/*
 * Applies one record to replica_path, a facet file that no SQLite
 * connection has open: writes its pages at (page number - 1) * page size,
 * cuts or extends the file to the database size, fsyncs it (and its
 * directory when the file was new). Records must be applied in commit
 * order, each once; applying the last one again is harmless (after a
 * crash during an apply, apply it again). A missing or empty replica takes
 * only a record holding every page. Refuses, changing nothing: a corrupt
 * or truncated record, one of another page size than the replica's, a
 * replica that is not an SQLite file, and one with a -wal or -journal
 * file beside it that is not empty (opening it would play that over the
 * applied pages) (-EBUSY). Returns 0 or a negative errno with a message in
 * *err (caller frees; may be NULL).
 */
int facet_record_apply(const char *replica_path, const void *rec, size_t len, char **err);

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
