/*
 * Facet names and where their files live. A tenant names its loader
 * children's facets, so every id is checked against a narrow alphabet
 * before it becomes part of a path.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base.h"
#include "internal.h"

int facet_id_valid(const char *id, size_t len) {
  if (id == NULL || len == 0 || len > FACET_ID_MAX) return 0;
  for (size_t i = 0; i < len; i++) {
    char c = id[i];
    int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
             c == '_' || c == '-';
    if (!ok) return 0;
  }
  return 1;
}

char *facet__dir(const char *data_dir, const char *tenant, int child) {
  if (child) return xasprintf("%s/facets/%s", data_dir, tenant);
  return xasprintf("%s/facets", data_dir);
}

char *facet_path(const char *data_dir, const char *tenant, const char *facet_id) {
  if (data_dir == NULL || tenant == NULL) return NULL;
  int runs = strcmp(tenant, FACET_RUN_OWNER) == 0;
  if (!runs && !worker_name_valid(tenant, strlen(tenant))) return NULL;
  if (runs && facet_id == NULL) return NULL; /* runs' facets are all named */
  if (facet_id == NULL) return xasprintf("%s/facets/%s.sqlite", data_dir, tenant);
  if (!facet_id_valid(facet_id, strlen(facet_id))) return NULL;
  return xasprintf("%s/facets/%s/%s.sqlite", data_dir, tenant, facet_id);
}

char *facet__purged_mark(const char *data_dir, const char *tenant) {
  if (data_dir == NULL || tenant == NULL || !worker_name_valid(tenant, strlen(tenant)))
    return NULL;
  return xasprintf("%s/facets/%s.purged", data_dir, tenant);
}

int facet_purged(const char *data_dir, const char *tenant) {
  char *mark = facet__purged_mark(data_dir, tenant);
  if (mark == NULL) return 0;
  struct stat st;
  int purged = lstat(mark, &st) == 0;
  free(mark);
  return purged;
}

int facet__mkdir(const char *path) {
  if (mkdir(path, 0700) == 0) return 0;
  if (errno != EEXIST) return -errno;
  /* lstat: a symlink planted in place of the directory is refused. */
  struct stat st;
  if (lstat(path, &st) != 0) return -errno;
  return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

int facet__harden(sqlite3 *db) {
  static const int off[] = {
      SQLITE_DBCONFIG_ENABLE_LOAD_EXTENSION,
      SQLITE_DBCONFIG_ENABLE_FTS3_TOKENIZER,
      SQLITE_DBCONFIG_TRUSTED_SCHEMA,
      SQLITE_DBCONFIG_WRITABLE_SCHEMA,
  };
  int rc;
  for (size_t i = 0; i < ARRAY_SIZE(off); i++) {
    if ((rc = sqlite3_db_config(db, off[i], 0, (int *)NULL)) != SQLITE_OK) return rc;
  }
  if ((rc = sqlite3_db_config(db, SQLITE_DBCONFIG_DEFENSIVE, 1, (int *)NULL)) != SQLITE_OK)
    return rc;
  /* ATTACH is denied by the authorizer; one slot is what plain VACUUM needs. */
  sqlite3_limit(db, SQLITE_LIMIT_ATTACHED, 1);
  return SQLITE_OK;
}
