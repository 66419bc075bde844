/*
 * Capture of each commit's WAL frames, for replication (facets.h,
 * facet_options.replicate): a VFS shim over the default unix VFS,
 * registered once per process and never made the default, so connections
 * without replication pay nothing. It wraps two files of a connection: the
 * database (whose xShmLock says when SQLite takes and drops the WAL write
 * lock, the exact bounds of one write transaction) and its WAL (whose
 * xWrite carries the frames). Everything else is the unix VFS's own.
 *
 * What SQLite 3.40's wal.c writes while it holds the write lock:
 *   - the 32-byte WAL header at offset 0 when the WAL starts again
 *     (first frame after a checkpoint reset, or a savepoint rolled back to
 *     an empty WAL): frames count from 1 again;
 *   - a frame as two writes: its 24-byte header (page number, the
 *     database's size in pages for a commit frame, else 0), then the page
 *     at offset + 24 (walWriteOneFrame). Frames of a spill (cache full
 *     mid-transaction) have no commit size;
 *   - a page this transaction already wrote, rewritten in place: only the
 *     page, at the existing frame's data offset (walFrames, iReCksum), and
 *     then, after the commit frame, the headers of the frames from there on
 *     with new checksums and the same page numbers (walRewriteChecksums);
 *   - after ROLLBACK TO a savepoint, new frames over the ones written since
 *     it (sqlite3WalSavepointUndo moved the end back);
 *   - with synchronous=FULL on a device without powersafe overwrite, copies
 *     of the commit frame up to a sector boundary (not on Linux files).
 * So frames are kept by their position in the WAL: slot i is frame base+i,
 * and its page is replaced when its position is written again. When the
 * lock is dropped, the slots up to the last commit frame are the
 * transaction; without one (ROLLBACK, a failed commit) they are dropped.
 *
 * The slots are laid out as the record's (page number, page) pairs behind
 * room for its header, so sealing a record moves no page and allocates
 * nothing at commit. A write this file cannot place, or memory it cannot
 * get (SQLite's heap, so the process's limit applies), fails before it
 * reaches the file: the commit then fails too, rather than a record being
 * wrong or missing. A page appears once per frame that holds it: a page
 * spilled and then written again in the commit frame is in the record
 * twice, and the later copy wins when it is applied.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "internal.h"

#define CAPTURE_VFS_NAME "edgenode-facet-capture"
#define WAL_HEADER 32
#define FRAME_HEADER 24
#define WAL_WRITE_LOCK 0
/* A buffer this large is let go after a transaction that did not commit,
 * rather than kept for the next one. */
#define KEEP_BYTES (1u << 20)

enum { SLOT_HEADER = 1, SLOT_PAGE = 2 };

/* One write transaction of one connection, as the frames it wrote. */
typedef struct capture {
  facet__capture_sink sink; /* both NULL: not capturing (yet) */
  facet__capture_gate gate;
  void *sink_arg;
  uint32_t page_size;
  int holding;        /* SQLite holds the WAL write lock (tracked with or without a sink) */
  int failed;         /* a write or sync of this transaction failed */
  uint32_t base;      /* WAL frame number of slot 0; 0 = no frame yet */
  uint32_t n_slots;
  int64_t commit;     /* the last commit frame's slot, -1 = none */
  uint32_t db_pages;  /* its database size in pages */
  uint8_t *buf;       /* header room, then n_slots (pgno, page) pairs (sqlite3_malloc) */
  size_t buf_cap;
  uint8_t *state;     /* SLOT_* per slot (sqlite3_malloc) */
  uint32_t state_cap;
} capture;

typedef struct cap_file cap_file;
struct cap_file {
  sqlite3_file base;    /* pMethods: &db_methods or &wal_methods */
  sqlite3_file *real;   /* the unix VFS's file, in the same allocation */
  const char *name;     /* database: the name SQLite opened it by */
  cap_file *db;         /* WAL: its database's file, NULL when not found */
  cap_file *wal;        /* database: its open WAL */
  cap_file *next;       /* database: the open databases of the process */
  capture cap;          /* database only */
};

static sqlite3_vfs capture_vfs;
static sqlite3_vfs *unix_vfs;
static int capture_vfs_ok;
static pthread_once_t capture_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t open_dbs_lock = PTHREAD_MUTEX_INITIALIZER;
static cap_file *open_dbs;

static const sqlite3_io_methods db_methods, wal_methods;

#define REAL(f) (((cap_file *)(f))->real)

/* ---- Capturing ---- */

static uint32_t get_be32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static size_t slot_size(const capture *c) { return 4 + (size_t)c->page_size; }

static uint8_t *slot_at(const capture *c, uint32_t i) {
  return c->buf + FACET__RECORD_HEADER + (size_t)i * slot_size(c);
}

static void capture_reset(capture *c) {
  c->base = 0;
  c->n_slots = 0;
  c->commit = -1;
  c->db_pages = 0;
  c->failed = 0;
}

static void capture_release(capture *c) {
  sqlite3_free(c->buf);
  sqlite3_free(c->state);
  c->buf = c->state = NULL;
  c->buf_cap = c->state_cap = 0;
}

/* Room for one more slot; SQLITE_NOMEM at the heap limit. */
static int capture_grow(capture *c) {
  size_t need = FACET__RECORD_HEADER + (size_t)(c->n_slots + 1) * slot_size(c) +
                FACET__RECORD_TRAILER;
  if (need > c->buf_cap) {
    size_t cap = c->buf_cap ? c->buf_cap * 2 : FACET__RECORD_HEADER + 4 * slot_size(c) +
                                                   FACET__RECORD_TRAILER;
    if (cap < need) cap = need;
    uint8_t *b = sqlite3_realloc64(c->buf, cap);
    if (b == NULL) return SQLITE_NOMEM;
    c->buf = b;
    c->buf_cap = cap;
  }
  if (c->n_slots + 1 > c->state_cap) {
    uint32_t cap = c->state_cap ? c->state_cap * 2 : 16;
    uint8_t *s = sqlite3_realloc64(c->state, cap);
    if (s == NULL) return SQLITE_NOMEM;
    c->state = s;
    c->state_cap = cap;
  }
  return SQLITE_OK;
}

static int refuse(const char *what, sqlite3_int64 off, int amt) {
  log_error("facet capture: %s (WAL write of %d bytes at %lld): the commit is refused rather "
            "than replicated wrongly", what, amt, (long long)off);
  return SQLITE_IOERR_WRITE;
}

/* Whether slots 0..n-1 each have their header and page. */
static int slots_complete(const capture *c, uint32_t n) {
  for (uint32_t k = 0; k < n; k++)
    if (c->state[k] != (SLOT_HEADER | SLOT_PAGE)) return 0;
  return 1;
}

/* A frame header: slot for frame `frame`, made when it is the next one. */
static int note_header(capture *c, uint32_t frame, const uint8_t *h, sqlite3_int64 off) {
  if (c->base == 0) c->base = frame;
  if (frame < c->base || frame - c->base > c->n_slots)
    return refuse("a frame out of sequence", off, FRAME_HEADER);
  uint32_t i = frame - c->base, pgno = get_be32(h), size = get_be32(h + 4);
  if (pgno == 0) return refuse("a frame of page 0", off, FRAME_HEADER);
  if (i == c->n_slots) {
    int rc = capture_grow(c);
    if (rc != SQLITE_OK) return rc;
    c->state[c->n_slots++] = 0;
  }
  uint8_t *slot = slot_at(c, i);
  /* A new page at this position (after ROLLBACK TO): its data follows. */
  if ((c->state[i] & SLOT_HEADER) && facet__get_le32(slot) != pgno) c->state[i] = 0;
  facet__put_le32(slot, pgno);
  c->state[i] |= SLOT_HEADER;
  if (size != 0 && (int64_t)i >= c->commit) {
    /* The commit frame's page is written next; every earlier one must be
     * complete now, or the record could not be (checked here, where the
     * commit can still fail). */
    if (!slots_complete(c, i))
      return refuse("a commit frame after an incomplete frame", off, FRAME_HEADER);
    c->commit = i;
    c->db_pages = size;
  }
  return SQLITE_OK;
}

static int note_page(capture *c, uint32_t frame, const void *page, sqlite3_int64 off) {
  if (c->base == 0 || frame < c->base || frame - c->base >= c->n_slots ||
      !(c->state[frame - c->base] & SLOT_HEADER))
    return refuse("a page for a frame whose header it did not see", off, (int)c->page_size);
  uint32_t i = frame - c->base;
  memcpy(slot_at(c, i) + 4, page, c->page_size);
  c->state[i] |= SLOT_PAGE;
  /* The commit frame's page, not written yet: the record is whole (every
   * earlier slot was checked complete with its header), and the commit
   * can still fail, leaving the facet as it was. */
  if (c->gate != NULL && (int64_t)i == c->commit) {
    size_t len = facet__record_seal(c->buf, c->page_size, c->db_pages, (uint32_t)c->commit + 1);
    if (c->gate(c->sink_arg, c->buf, len) != 0) return SQLITE_IOERR_WRITE;
  }
  return SQLITE_OK;
}

/* Files one WAL write in the transaction, before it reaches the file. */
static int capture_note(capture *c, const void *buf, int amt, sqlite3_int64 off) {
  if (!c->holding) return refuse("a write without the WAL write lock", off, amt);
  if (off == 0 && amt == WAL_HEADER) {
    if (get_be32((const uint8_t *)buf + 8) != c->page_size)
      return refuse("a WAL of another page size", off, amt);
    /* The WAL starts again: nothing before this point is in it any more. */
    c->base = 0;
    c->n_slots = 0;
    c->commit = -1;
    return SQLITE_OK;
  }
  if (off < WAL_HEADER) return refuse("a write inside the WAL header", off, amt);
  uint64_t frame_size = FRAME_HEADER + (uint64_t)c->page_size;
  uint64_t rel = (uint64_t)off - WAL_HEADER, at = rel % frame_size;
  if (rel / frame_size >= UINT32_MAX) return refuse("a frame past 2^32", off, amt);
  uint32_t frame = (uint32_t)(rel / frame_size) + 1;
  if (at == 0 && amt == FRAME_HEADER) return note_header(c, frame, buf, off);
  if (at == FRAME_HEADER && (uint32_t)amt == c->page_size) return note_page(c, frame, buf, off);
  return refuse("a write that is not a frame header or page", off, amt);
}

static void capture_begin(capture *c) {
  c->holding = 1;
  capture_reset(c);
}

/* The write lock is dropped: hands over the record of a commit. */
static void capture_end(capture *c) {
  c->holding = 0;
  if (c->sink != NULL && c->commit >= 0 && !c->failed) {
    size_t len = facet__record_seal(c->buf, c->page_size, c->db_pages, (uint32_t)c->commit + 1);
    uint8_t *rec = c->buf;
    c->buf = NULL;
    c->buf_cap = 0;
    c->sink(c->sink_arg, rec, len);
  } else if (c->buf_cap > KEEP_BYTES) {
    capture_release(c);
  }
  capture_reset(c);
}

/* ---- The files' methods: the unix VFS's, with the few above ---- */

static int f_close(sqlite3_file *f) {
  cap_file *cf = (cap_file *)f;
  if (f->pMethods == &wal_methods) {
    pthread_mutex_lock(&open_dbs_lock);
    if (cf->db != NULL) cf->db->wal = NULL;
    pthread_mutex_unlock(&open_dbs_lock);
  } else {
    pthread_mutex_lock(&open_dbs_lock);
    for (cap_file **p = &open_dbs; *p != NULL; p = &(*p)->next) {
      if (*p == cf) {
        *p = cf->next;
        break;
      }
    }
    if (cf->wal != NULL) cf->wal->db = NULL;
    pthread_mutex_unlock(&open_dbs_lock);
    capture_release(&cf->cap);
  }
  return cf->real->pMethods->xClose(cf->real);
}

static int f_read(sqlite3_file *f, void *buf, int amt, sqlite3_int64 off) {
  return REAL(f)->pMethods->xRead(REAL(f), buf, amt, off);
}

static int f_write(sqlite3_file *f, const void *buf, int amt, sqlite3_int64 off) {
  return REAL(f)->pMethods->xWrite(REAL(f), buf, amt, off);
}

static int f_truncate(sqlite3_file *f, sqlite3_int64 size) {
  return REAL(f)->pMethods->xTruncate(REAL(f), size);
}

static int f_sync(sqlite3_file *f, int flags) { return REAL(f)->pMethods->xSync(REAL(f), flags); }

static int f_size(sqlite3_file *f, sqlite3_int64 *size) {
  return REAL(f)->pMethods->xFileSize(REAL(f), size);
}

static int f_lock(sqlite3_file *f, int lock) { return REAL(f)->pMethods->xLock(REAL(f), lock); }

static int f_unlock(sqlite3_file *f, int lock) {
  return REAL(f)->pMethods->xUnlock(REAL(f), lock);
}

static int f_reserved(sqlite3_file *f, int *out) {
  return REAL(f)->pMethods->xCheckReservedLock(REAL(f), out);
}

static int f_control(sqlite3_file *f, int op, void *arg) {
  return REAL(f)->pMethods->xFileControl(REAL(f), op, arg);
}

static int f_sector(sqlite3_file *f) { return REAL(f)->pMethods->xSectorSize(REAL(f)); }

static int f_device(sqlite3_file *f) {
  return REAL(f)->pMethods->xDeviceCharacteristics(REAL(f));
}

static int f_shm_map(sqlite3_file *f, int region, int size, int extend, void volatile **out) {
  return REAL(f)->pMethods->xShmMap(REAL(f), region, size, extend, out);
}

static int f_shm_lock(sqlite3_file *f, int offset, int n, int flags) {
  return REAL(f)->pMethods->xShmLock(REAL(f), offset, n, flags);
}

static void f_shm_barrier(sqlite3_file *f) { REAL(f)->pMethods->xShmBarrier(REAL(f)); }

static int f_shm_unmap(sqlite3_file *f, int delete_flag) {
  return REAL(f)->pMethods->xShmUnmap(REAL(f), delete_flag);
}

static int f_fetch(sqlite3_file *f, sqlite3_int64 off, int amt, void **out) {
  return REAL(f)->pMethods->xFetch(REAL(f), off, amt, out);
}

static int f_unfetch(sqlite3_file *f, sqlite3_int64 off, void *p) {
  return REAL(f)->pMethods->xUnfetch(REAL(f), off, p);
}

/* The database: the WAL write lock bounds a write transaction. */
static int db_shm_lock(sqlite3_file *f, int offset, int n, int flags) {
  cap_file *cf = (cap_file *)f;
  capture *c = &cf->cap;
  int write_lock = offset == WAL_WRITE_LOCK && n == 1 && (flags & SQLITE_SHM_EXCLUSIVE);
  if (write_lock && (flags & SQLITE_SHM_UNLOCK) && c->holding) capture_end(c);
  int rc = f_shm_lock(f, offset, n, flags);
  if (write_lock && (flags & SQLITE_SHM_LOCK) && rc == SQLITE_OK) capture_begin(c);
  return rc;
}

static capture *wal_capture(sqlite3_file *f) {
  cap_file *db = ((cap_file *)f)->db;
  return db != NULL && (db->cap.sink != NULL || db->cap.gate != NULL) ? &db->cap : NULL;
}

static int wal_write(sqlite3_file *f, const void *buf, int amt, sqlite3_int64 off) {
  capture *c = wal_capture(f);
  if (c != NULL) {
    int rc = capture_note(c, buf, amt, off);
    if (rc != SQLITE_OK) {
      c->failed = 1;
      return rc;
    }
  }
  int rc = f_write(f, buf, amt, off);
  if (rc != SQLITE_OK && c != NULL) c->failed = 1;
  return rc;
}

static int wal_sync(sqlite3_file *f, int flags) {
  int rc = f_sync(f, flags);
  capture *c = wal_capture(f);
  if (rc != SQLITE_OK && c != NULL) c->failed = 1;
  return rc;
}

static const sqlite3_io_methods db_methods = {
    3, f_close, f_read, f_write, f_truncate, f_sync, f_size, f_lock, f_unlock, f_reserved,
    f_control, f_sector, f_device, f_shm_map, db_shm_lock, f_shm_barrier, f_shm_unmap,
    f_fetch, f_unfetch,
};

static const sqlite3_io_methods wal_methods = {
    3, f_close, f_read, wal_write, f_truncate, wal_sync, f_size, f_lock, f_unlock, f_reserved,
    f_control, f_sector, f_device, f_shm_map, f_shm_lock, f_shm_barrier, f_shm_unmap,
    f_fetch, f_unfetch,
};

/* ---- The VFS ---- */

/* The database a WAL belongs to: SQLite derives the WAL's name from the
 * database's in one allocation, and sqlite3_filename_database() finds the
 * very pointer the database was opened by. */
static void wal_link(cap_file *wal, const char *name) {
  const char *db_name = sqlite3_filename_database(name);
  pthread_mutex_lock(&open_dbs_lock);
  for (cap_file *d = open_dbs; d != NULL; d = d->next) {
    if (d->name == db_name) {
      wal->db = d;
      d->wal = wal;
      break;
    }
  }
  pthread_mutex_unlock(&open_dbs_lock);
}

static int vfs_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *f, int flags,
                    int *out_flags) {
  (void)vfs;
  int kind = flags & (SQLITE_OPEN_MAIN_DB | SQLITE_OPEN_WAL);
  /* Every other file (temporary ones, VACUUM's copy) is the unix VFS's
   * own, in the same memory. */
  if (kind == 0 || name == NULL) return unix_vfs->xOpen(unix_vfs, name, f, flags, out_flags);
  cap_file *cf = (cap_file *)f;
  memset(cf, 0, sizeof *cf);
  cf->real = (sqlite3_file *)((uint8_t *)f + ((sizeof *cf + 15) & ~(size_t)15));
  cf->cap.commit = -1;
  int rc = unix_vfs->xOpen(unix_vfs, name, cf->real, flags, out_flags);
  /* SQLite closes a file whose methods are set even when opening failed. */
  if (cf->real->pMethods == NULL) return rc;
  if (kind == SQLITE_OPEN_WAL) {
    cf->base.pMethods = &wal_methods;
    wal_link(cf, name);
  } else {
    cf->base.pMethods = &db_methods;
    cf->name = name;
    pthread_mutex_lock(&open_dbs_lock);
    cf->next = open_dbs;
    open_dbs = cf;
    pthread_mutex_unlock(&open_dbs_lock);
  }
  return rc;
}

static int vfs_delete(sqlite3_vfs *v, const char *name, int sync_dir) {
  (void)v;
  return unix_vfs->xDelete(unix_vfs, name, sync_dir);
}

static int vfs_access(sqlite3_vfs *v, const char *name, int flags, int *out) {
  (void)v;
  return unix_vfs->xAccess(unix_vfs, name, flags, out);
}

static int vfs_full_pathname(sqlite3_vfs *v, const char *name, int n, char *out) {
  (void)v;
  return unix_vfs->xFullPathname(unix_vfs, name, n, out);
}

static void *vfs_dl_open(sqlite3_vfs *v, const char *name) {
  (void)v;
  return unix_vfs->xDlOpen(unix_vfs, name);
}

static void vfs_dl_error(sqlite3_vfs *v, int n, char *out) {
  (void)v;
  unix_vfs->xDlError(unix_vfs, n, out);
}

static void (*vfs_dl_sym(sqlite3_vfs *v, void *h, const char *sym))(void) {
  (void)v;
  return unix_vfs->xDlSym(unix_vfs, h, sym);
}

static void vfs_dl_close(sqlite3_vfs *v, void *h) {
  (void)v;
  unix_vfs->xDlClose(unix_vfs, h);
}

static int vfs_randomness(sqlite3_vfs *v, int n, char *out) {
  (void)v;
  return unix_vfs->xRandomness(unix_vfs, n, out);
}

static int vfs_sleep(sqlite3_vfs *v, int us) {
  (void)v;
  return unix_vfs->xSleep(unix_vfs, us);
}

static int vfs_current_time(sqlite3_vfs *v, double *out) {
  (void)v;
  return unix_vfs->xCurrentTime(unix_vfs, out);
}

static int vfs_last_error(sqlite3_vfs *v, int n, char *out) {
  (void)v;
  return unix_vfs->xGetLastError(unix_vfs, n, out);
}

static int vfs_current_time64(sqlite3_vfs *v, sqlite3_int64 *out) {
  (void)v;
  return unix_vfs->xCurrentTimeInt64(unix_vfs, out);
}

static void capture_register(void) {
  unix_vfs = sqlite3_vfs_find(NULL);
  /* The forwarding above needs the methods of version 3 files (shared
   * memory, mmap) and of a version 2 VFS: the unix VFS has both. */
  if (unix_vfs == NULL || unix_vfs->iVersion < 2) return;
  capture_vfs = (sqlite3_vfs){
      .iVersion = 2,
      .szOsFile = (int)(((sizeof(cap_file) + 15) & ~(size_t)15) + (size_t)unix_vfs->szOsFile),
      .mxPathname = unix_vfs->mxPathname,
      .zName = CAPTURE_VFS_NAME,
      .xOpen = vfs_open,
      .xDelete = vfs_delete,
      .xAccess = vfs_access,
      .xFullPathname = vfs_full_pathname,
      .xDlOpen = vfs_dl_open,
      .xDlError = vfs_dl_error,
      .xDlSym = vfs_dl_sym,
      .xDlClose = vfs_dl_close,
      .xRandomness = vfs_randomness,
      .xSleep = vfs_sleep,
      .xCurrentTime = vfs_current_time,
      .xGetLastError = vfs_last_error,
      .xCurrentTimeInt64 = vfs_current_time64,
  };
  int rc = sqlite3_vfs_register(&capture_vfs, 0);
  if (rc != SQLITE_OK) {
    log_error("facet capture: cannot register its VFS: %s", sqlite3_errstr(rc));
    return;
  }
  capture_vfs_ok = 1;
}

const char *facet__capture_vfs(void) {
  if (pthread_once(&capture_once, capture_register) != 0 || !capture_vfs_ok) return NULL;
  return CAPTURE_VFS_NAME;
}

static cap_file *db_file(sqlite3 *db) {
  sqlite3_file *f = NULL;
  if (sqlite3_file_control(db, "main", SQLITE_FCNTL_FILE_POINTER, &f) != SQLITE_OK || f == NULL ||
      f->pMethods != &db_methods)
    return NULL;
  return (cap_file *)f;
}

int facet__capture_attach(sqlite3 *db, uint32_t page_size, facet__capture_sink sink,
                          facet__capture_gate gate, void *arg) {
  cap_file *cf = db_file(db);
  if (cf == NULL || (sink == NULL && gate == NULL) || page_size < 512 || page_size > 65536)
    return SQLITE_MISUSE;
  /* Inside a write transaction the frames before now are unknown. */
  if (cf->cap.holding) return SQLITE_BUSY;
  cf->cap.page_size = page_size;
  cf->cap.sink_arg = arg;
  cf->cap.sink = sink;
  cf->cap.gate = gate;
  return SQLITE_OK;
}

void facet__capture_detach(sqlite3 *db) {
  cap_file *cf = db_file(db);
  if (cf == NULL) return;
  cf->cap.sink = NULL;
  cf->cap.gate = NULL;
  capture_reset(&cf->cap);
  capture_release(&cf->cap);
}
