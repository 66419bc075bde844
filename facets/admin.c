/*
 * What operators do with facets, straight on the files: describe, back up,
 * purge. Runs in the supervisor (no V8), each call on its own connection.
 */
#include <dirent.h>
#include <fcntl.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base.h"
#include "internal.h"

#define ADMIN_BUSY_TIMEOUT_MS 5000
#define DESCRIBE_MAX_TABLES 1000
#define DESCRIBE_MAX_CHILDREN 1000

static void set_err(char **err, char *msg) {
  if (err != NULL)
    *err = msg;
  else
    free(msg);
}

/* Opens an existing facet, never creating one. Read-write even to only
 * read: a read-only connection cannot always open a WAL database whose
 * -shm file is gone, and cannot recover a WAL a killed process left. */
static int admin_open(const char *path, sqlite3 **out, char **err) {
  struct stat st;
  if (lstat(path, &st) != 0) return -errno;
  if (!S_ISREG(st.st_mode)) return -ENOENT;
  sqlite3 *db = NULL;
  int rc = sqlite3_open_v2(path, &db,
                           SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOFOLLOW | SQLITE_OPEN_NOMUTEX, NULL);
  if (rc == SQLITE_OK) rc = facet__harden(db);
  if (rc == SQLITE_OK) rc = sqlite3_busy_timeout(db, ADMIN_BUSY_TIMEOUT_MS);
  if (rc == SQLITE_OK) rc = sqlite3_exec(db, "PRAGMA query_only = 1", NULL, NULL, NULL);
  if (rc != SQLITE_OK) {
    set_err(err, xasprintf("%s: %s", path, db ? sqlite3_errmsg(db) : sqlite3_errstr(rc)));
    sqlite3_close_v2(db);
    return -EIO;
  }
  *out = db;
  return 0;
}

static int64_t query_int(sqlite3 *db, const char *sql) {
  sqlite3_stmt *st = NULL;
  int64_t v = -1;
  if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
    v = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  return v;
}

static int64_t file_size(const char *path) {
  struct stat st;
  return lstat(path, &st) == 0 && S_ISREG(st.st_mode) ? (int64_t)st.st_size : 0;
}

/* [{"name", "rows"}] of the tenant's tables, in name order. */
static int describe_tables(sqlite3 *db, json_t *tables, char **err) {
  sqlite3_stmt *st = NULL;
  int rc = sqlite3_prepare_v2(db,
                              "SELECT name FROM sqlite_schema WHERE type = 'table' "
                              "AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY name",
                              -1, &st, NULL);
  int n = 0;
  while (rc == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW && n++ < DESCRIBE_MAX_TABLES) {
    const char *name = (const char *)sqlite3_column_text(st, 0);
    if (name == NULL) continue;
    char *sql = sqlite3_mprintf("SELECT count(*) FROM main.\"%w\"", name);
    if (sql == NULL) abort();
    int64_t rows = query_int(db, sql);
    sqlite3_free(sql);
    json_t *t = json_pack("{s:s, s:I}", "name", name, "rows", (json_int_t)rows);
    /* A virtual table whose module is missing cannot be counted. */
    if (rows < 0) json_object_set_new(t, "rows", json_null());
    json_array_append_new(tables, t);
  }
  if (rc != SQLITE_OK) set_err(err, xasprintf("tables: %s", sqlite3_errmsg(db)));
  sqlite3_finalize(st);
  return rc == SQLITE_OK ? 0 : -EIO;
}

/* [{"id", "size_bytes"}] of DATA/facets/<tenant>/<id>.sqlite. */
static json_t *describe_children(const char *data_dir, const char *tenant) {
  json_t *children = json_array();
  char *dir = facet__dir(data_dir, tenant, 1);
  DIR *d = opendir(dir);
  if (d != NULL) {
    struct dirent *e;
    while ((e = readdir(d)) != NULL && json_array_size(children) < DESCRIBE_MAX_CHILDREN) {
      size_t len = strlen(e->d_name);
      if (len <= 7 || strcmp(e->d_name + len - 7, ".sqlite") != 0) continue;
      if (!facet_id_valid(e->d_name, len - 7)) continue;
      char *path = xasprintf("%s/%s", dir, e->d_name);
      json_array_append_new(children,
                            json_pack("{s:s#, s:I}", "id", e->d_name, (int)(len - 7),
                                      "size_bytes", (json_int_t)file_size(path)));
      free(path);
    }
    closedir(d);
  }
  free(dir);
  return children;
}

int facet_describe(const char *data_dir, const char *tenant, json_t **out, char **err) {
  char *path = facet_path(data_dir, tenant, NULL);
  if (path == NULL) return -EINVAL;
  sqlite3 *db = NULL;
  int rc = admin_open(path, &db, err);
  if (rc != 0) {
    free(path);
    return rc;
  }
  int64_t page_size = query_int(db, "PRAGMA page_size");
  int64_t page_count = query_int(db, "PRAGMA page_count");
  int64_t freelist = query_int(db, "PRAGMA freelist_count");
  if (page_size < 0 || page_count < 0) {
    set_err(err, xasprintf("%s: %s", path, sqlite3_errmsg(db)));
    rc = -EIO;
    goto done;
  }
  json_t *tables = json_array();
  if ((rc = describe_tables(db, tables, err)) != 0) {
    json_decref(tables);
    goto done;
  }
  char *wal = xasprintf("%s-wal", path);
  char *rel = xasprintf("facets/%s.sqlite", tenant);
  *out = json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:o, s:o}", "worker", tenant,
                   "path", rel,
                   "size_bytes", (json_int_t)(page_size * page_count),
                   "page_size", (json_int_t)page_size,
                   "page_count", (json_int_t)page_count,
                   "freelist_count", (json_int_t)(freelist < 0 ? 0 : freelist),
                   "wal_bytes", (json_int_t)file_size(wal),
                   "tables", tables,
                   "children", describe_children(data_dir, tenant));
  free(wal);
  free(rel);
  if (*out == NULL) abort();
done:
  sqlite3_close_v2(db);
  free(path);
  return rc;
}

int facet__backup(sqlite3 *src, const char *what, const char *dest_path, int wal_format,
                  char **err) {
  sqlite3 *dst = NULL;
  int rc = 0;
  /* Replace, never append to, whatever was at dest_path. */
  if (unlink(dest_path) != 0 && errno != ENOENT) {
    rc = -errno;
    set_err(err, xasprintf("%s: %s", dest_path, strerror(errno)));
    return rc;
  }
  int sq = sqlite3_open_v2(dest_path, &dst,
                           SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
  if (sq == SQLITE_OK) {
    /* One step copies every page within one read transaction: one snapshot,
     * and in WAL mode writers carry on meanwhile. Stepping in pieces would
     * restart whenever another process commits. */
    sqlite3_backup *b = sqlite3_backup_init(dst, "main", src, "main");
    if (b == NULL) {
      sq = sqlite3_errcode(dst);
    } else {
      for (int tries = 0;; tries++) {
        sq = sqlite3_backup_step(b, -1);
        if ((sq != SQLITE_BUSY && sq != SQLITE_LOCKED) || tries * 5 >= ADMIN_BUSY_TIMEOUT_MS)
          break;
        sqlite3_sleep(5);
      }
      int fin = sqlite3_backup_finish(b);
      if (sq == SQLITE_DONE) sq = fin;
    }
  }
  /* The copy carries the source's WAL flag (the pages are copied as they
   * are, and the copy was written in rollback mode, so its WAL is empty).
   * Kept, it is the primary's kind of file; else one self-contained file. */
  if (sq == SQLITE_OK && !wal_format)
    sq = sqlite3_exec(dst, "PRAGMA journal_mode = DELETE", NULL, NULL, NULL);
  if (sq != SQLITE_OK) {
    set_err(err, xasprintf("backup of %s: %s", what,
                           dst ? sqlite3_errmsg(dst) : sqlite3_errstr(sq)));
    rc = -EIO;
  }
  if (dst != NULL && sqlite3_close(dst) != SQLITE_OK) {
    sqlite3_close_v2(dst);
    if (rc == 0) rc = -EIO;
  }
  if (rc != 0) unlink(dest_path);
  return rc;
}

int facet_backup_to(const char *data_dir, const char *tenant, const char *facet_id,
                    const char *dest_path, char **err) {
  char *path = facet_path(data_dir, tenant, facet_id);
  if (path == NULL || dest_path == NULL) {
    free(path);
    return -EINVAL;
  }
  sqlite3 *src = NULL;
  int rc = admin_open(path, &src, err);
  if (rc == 0) rc = facet__backup(src, path, dest_path, 0, err);
  sqlite3_close_v2(src);
  free(path);
  return rc;
}

/* Unlinks a database file and its WAL and shared-memory files. */
static int unlink_db(const char *path) {
  static const char *const suffixes[] = {"", "-wal", "-shm", "-journal"};
  int rc = 0;
  for (size_t i = 0; i < ARRAY_SIZE(suffixes); i++) {
    char *p = xasprintf("%s%s", path, suffixes[i]);
    if (unlink(p) != 0 && errno != ENOENT && rc == 0) rc = -errno;
    free(p);
  }
  return rc;
}

int facet_purge(const char *data_dir, const char *tenant) {
  char *path = facet_path(data_dir, tenant, NULL);
  char *mark = facet__purged_mark(data_dir, tenant);
  if (path == NULL || mark == NULL) {
    free(path);
    free(mark);
    return -EINVAL;
  }
  char *facets_dir = facet__dir(data_dir, NULL, 0);
  int made = facet__mkdir(facets_dir);
  free(facets_dir);
  int fd = made == 0 ? open(mark, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600) : -1;
  int mark_err = made != 0 ? made : fd < 0 ? -errno : 0;
  if (fd >= 0 && close(fd) != 0) mark_err = -errno;
  free(mark);
  if (mark_err != 0) {
    free(path);
    return mark_err;
  }
  int rc = unlink_db(path);
  free(path);

  char *dir = facet__dir(data_dir, tenant, 1);
  DIR *d = opendir(dir);
  if (d != NULL) {
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
      if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
      char *p = xasprintf("%s/%s", dir, e->d_name);
      if (unlink(p) != 0 && errno != ENOENT && rc == 0) rc = -errno;
      free(p);
    }
    closedir(d);
    if (rmdir(dir) != 0 && errno != ENOENT && rc == 0) rc = -errno;
  } else if (errno != ENOENT && errno != ENOTDIR && rc == 0) {
    rc = -errno;
  }
  free(dir);
  return rc;
}

int facet_unpurge(const char *data_dir, const char *tenant) {
  char *mark = facet__purged_mark(data_dir, tenant);
  if (mark == NULL) return -EINVAL;
  int rc = unlink(mark) == 0 || errno == ENOENT ? 0 : -errno;
  free(mark);
  return rc;
}

json_t *facet_run_list(const char *data_dir) {
  return describe_children(data_dir, FACET_RUN_OWNER);
}

int facet_run_delete(const char *data_dir, const char *name) {
  if (name == NULL || !facet_id_valid(name, strlen(name))) return -EINVAL;
  char *path = facet_path(data_dir, FACET_RUN_OWNER, name);
  if (path == NULL) return -EINVAL;
  struct stat st;
  int rc = lstat(path, &st) == 0 && S_ISREG(st.st_mode) ? unlink_db(path) : -ENOENT;
  free(path);
  return rc;
}
