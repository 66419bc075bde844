/*
 * Change records: the pages one commit of a facet wrote, in the format
 * facets.h describes, and applying one to a replica file that no SQLite
 * connection has open. Both sides of replication use this file: the worker
 * process seals records (capture.c), the node taking a facet over applies
 * them, so it lives in facets_admin (no V8).
 *
 * The checksum is CRC-32C: the SSE4.2 instruction computes it at several
 * GB/s where the CPU has one (a 50,000-insert commit is a few MB), a table
 * elsewhere.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base.h"
#include "internal.h"

/* ---- CRC-32C ---- */

static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_table_make(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
    crc_table[i] = c;
  }
}

static uint32_t crc_by_table(uint32_t crc, const uint8_t *p, size_t n) {
  if (pthread_once(&crc_once, crc_table_make) != 0) abort();
  while (n-- > 0) crc = crc_table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
  return crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2")))
static uint32_t crc_by_sse42(uint32_t crc, const uint8_t *p, size_t n) {
  uint64_t c = crc;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t v;
    memcpy(&v, p, sizeof v);
    c = __builtin_ia32_crc32di(c, v);
  }
  uint32_t c32 = (uint32_t)c;
  while (n-- > 0) c32 = __builtin_ia32_crc32qi(c32, *p++);
  return c32;
}
#endif

uint32_t facet__crc32c(const void *data, size_t len) {
  uint32_t crc = 0xffffffffu;
#if defined(__x86_64__)
  if (__builtin_cpu_supports("sse4.2")) return ~crc_by_sse42(crc, data, len);
#endif
  return ~crc_by_table(crc, data, len);
}

/* ---- The format ---- */

size_t facet__record_seal(uint8_t *rec, uint32_t page_size, uint32_t db_pages, uint32_t n_pages) {
  memcpy(rec, FACET_RECORD_MAGIC, 4);
  rec[4] = FACET_RECORD_VERSION;
  rec[5] = rec[6] = rec[7] = 0;
  facet__put_le32(rec + 8, page_size);
  facet__put_le32(rec + 12, db_pages);
  facet__put_le32(rec + 16, n_pages);
  size_t body = FACET__RECORD_HEADER + (size_t)n_pages * (4 + (size_t)page_size);
  facet__put_le32(rec + body, facet__crc32c(rec, body));
  return body + FACET__RECORD_TRAILER;
}

static int bad_record(char **err, char *msg) {
  if (err != NULL)
    *err = msg;
  else
    free(msg);
  return -EINVAL;
}

int facet_record_read(const void *rec, size_t len, facet_record_info *info, char **err) {
  const uint8_t *p = rec;
  if (err != NULL) *err = NULL;
  if (p == NULL || len < FACET__RECORD_HEADER + FACET__RECORD_TRAILER)
    return bad_record(err, xasprintf("not a facet change record: %zu bytes is too short", len));
  if (memcmp(p, FACET_RECORD_MAGIC, 4) != 0)
    return bad_record(err, xasprintf("not a facet change record (no \"%s\" magic)",
                                     FACET_RECORD_MAGIC));
  if (p[4] != FACET_RECORD_VERSION || p[5] != 0 || p[6] != 0 || p[7] != 0)
    return bad_record(err, xasprintf("facet change record version %u is not supported (this "
                                     "build reads version %u)", p[4], FACET_RECORD_VERSION));
  uint32_t page_size = facet__get_le32(p + 8), db_pages = facet__get_le32(p + 12);
  uint32_t n_pages = facet__get_le32(p + 16);
  if (page_size < 512 || page_size > 65536 || (page_size & (page_size - 1)) != 0)
    return bad_record(err, xasprintf("facet change record: page size %u is not a power of two "
                                     "from 512 to 65536", page_size));
  if (db_pages == 0)
    return bad_record(err, xasprintf("facet change record: a database of 0 pages"));
  /* (64-bit arithmetic: no count of pages can wrap it.) */
  uint64_t want = FACET__RECORD_HEADER + (uint64_t)n_pages * (4 + (uint64_t)page_size) +
                  FACET__RECORD_TRAILER;
  if (want != len)
    return bad_record(err, xasprintf("facet change record: %u pages of %u bytes make %llu "
                                     "bytes, not %zu: truncated or padded",
                                     n_pages, page_size, (unsigned long long)want, len));
  size_t body = len - FACET__RECORD_TRAILER;
  if (facet__crc32c(p, body) != facet__get_le32(p + body))
    return bad_record(err, xasprintf("facet change record: checksum mismatch (corrupt)"));
  for (uint32_t i = 0; i < n_pages; i++) {
    size_t at = FACET__RECORD_HEADER + (size_t)i * (4 + (size_t)page_size);
    if (facet__get_le32(p + at) == 0)
      return bad_record(err, xasprintf("facet change record: page number 0 (pages count from 1)"));
  }
  if (info != NULL) *info = (facet_record_info){page_size, db_pages, n_pages};
  return 0;
}

/* ---- Applying ---- */

/* -EBUSY when path+suffix exists and is not empty: a connection has the
 * replica open, or left a WAL or a hot journal that opening it would play
 * over the pages applied here. */
static int check_sidecar(const char *path, const char *suffix, char **err) {
  char *side = xasprintf("%s%s", path, suffix);
  struct stat st;
  int rc = 0;
  if (lstat(side, &st) != 0) {
    if (errno != ENOENT) rc = -errno;
  } else if (st.st_size > 0) {
    rc = -EBUSY;
    if (err != NULL)
      *err = xasprintf("%s exists: a connection has the replica open or left changes in it; "
                       "records apply only to a closed file without one", side);
  }
  free(side);
  return rc;
}

static int write_all(int fd, const uint8_t *p, size_t n, off_t off) {
  while (n > 0) {
    ssize_t w = pwrite(fd, p, n, off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return w < 0 ? -errno : -EIO;
    p += w;
    n -= (size_t)w;
    off += w;
  }
  return 0;
}

/* The replica's page size from its header; 0 when it is not a database. */
static uint32_t file_page_size(int fd) {
  uint8_t h[100];
  if (pread(fd, h, sizeof h, 0) != (ssize_t)sizeof h) return 0;
  if (memcmp(h, "SQLite format 3", 16) != 0) return 0;
  uint32_t v = (uint32_t)h[16] << 8 | h[17];
  return v == 1 ? 65536 : v;
}

/* A new file's name is durable once its directory is synced. */
static int sync_dir_of(const char *path) {
  const char *slash = strrchr(path, '/');
  char *dir = slash == NULL ? xstrdup(".") : slash == path ? xstrdup("/")
                                                           : xstrndup(path, (size_t)(slash - path));
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  free(dir);
  if (fd < 0) return -errno;
  int rc = fsync(fd) == 0 ? 0 : -errno;
  if (close(fd) != 0 && rc == 0) rc = -errno;
  return rc;
}

/* Checks the record fits the replica open as fd (size bytes). */
/* How many of pages 1..db_pages the record holds (a page may be there twice). */
static uint32_t pages_held(const uint8_t *rec, const facet_record_info *info) {
  /* More pages than it has pairs cannot all be there: no bitmap that size. */
  if (info->db_pages > info->n_pages) return info->n_pages;
  uint8_t *seen = xcalloc(info->db_pages / 8 + 1, 1);
  uint32_t held = 0;
  const uint8_t *pair = rec + FACET__RECORD_HEADER;
  for (uint32_t i = 0; i < info->n_pages; i++, pair += 4 + (size_t)info->page_size) {
    uint32_t pgno = facet__get_le32(pair);
    if (pgno > info->db_pages || (seen[pgno / 8] & (1u << (pgno % 8)))) continue;
    seen[pgno / 8] |= (uint8_t)(1u << (pgno % 8));
    held++;
  }
  free(seen);
  return held;
}

/* An empty (or missing) replica takes only a record of every page. */
static int check_whole(const uint8_t *rec, const facet_record_info *info, const char *path,
                       char **err) {
  uint32_t held = pages_held(rec, info);
  if (held == info->db_pages) return 0;
  return bad_record(err, xasprintf("%s is empty and the record holds %u of the database's %u "
                                   "pages: start the replica from a snapshot",
                                   path, held, info->db_pages));
}

static int check_page_size(int fd, const facet_record_info *info, const char *path,
                           char **err) {
  uint32_t have = file_page_size(fd);
  if (have == 0)
    return bad_record(err, xasprintf("%s is not an SQLite database", path));
  if (have != info->page_size)
    return bad_record(err, xasprintf("the record's page size (%u) is not the replica's (%u)",
                                     info->page_size, have));
  return 0;
}

/* The replica's size, 0 when it does not exist yet; checks it may take rec. */
static int check_replica(const char *path, const uint8_t *rec, const facet_record_info *info,
                         off_t *size, char **err) {
  struct stat st;
  *size = 0;
  if (lstat(path, &st) == 0) {
    if (!S_ISREG(st.st_mode))
      return bad_record(err, xasprintf("%s is not a regular file", path));
    *size = st.st_size;
  } else if (errno != ENOENT) {
    int rc = -errno;
    if (err != NULL) *err = xasprintf("%s: %s", path, strerror(errno));
    return rc;
  }
  int rc = *size == 0 ? check_whole(rec, info, path, err) : 0;
  if (rc == 0) rc = check_sidecar(path, "-wal", err);
  if (rc == 0) rc = check_sidecar(path, "-journal", err);
  return rc;
}

static int apply_pages(int fd, const uint8_t *p, const facet_record_info *info) {
  size_t step = 4 + (size_t)info->page_size;
  const uint8_t *pair = p + FACET__RECORD_HEADER;
  for (uint32_t i = 0; i < info->n_pages; i++, pair += step) {
    off_t off = (off_t)(facet__get_le32(pair) - 1) * info->page_size;
    int rc = write_all(fd, pair + 4, info->page_size, off);
    if (rc != 0) return rc;
  }
  return 0;
}

int facet_record_apply(const char *replica_path, const void *rec, size_t len, char **err) {
  facet_record_info info;
  off_t size;
  if (err != NULL) *err = NULL;
  if (replica_path == NULL) return -EINVAL;
  int rc = facet_record_read(rec, len, &info, err);
  if (rc == 0) rc = check_replica(replica_path, rec, &info, &size, err);
  if (rc != 0) return rc;
  int fd = open(replica_path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    rc = -errno;
    if (err != NULL) *err = xasprintf("%s: %s", replica_path, strerror(errno));
    return rc;
  }
  if (size > 0) rc = check_page_size(fd, &info, replica_path, err);
  if (rc == 0) rc = apply_pages(fd, rec, &info);
  off_t want = (off_t)info.db_pages * info.page_size;
  if (rc == 0 && ftruncate(fd, want) != 0) rc = -errno;
  if (rc == 0 && fsync(fd) != 0) rc = -errno;
  if (close(fd) != 0 && rc == 0) rc = -errno;
  if (rc == 0 && size == 0) rc = sync_dir_of(replica_path);
  if (rc != 0 && err != NULL && *err == NULL)
    *err = xasprintf("%s: %s", replica_path, strerror(-rc));
  return rc;
}
