/*
 * Operators' view of facets: GET /v1/workers/{name}/facet (size, pages,
 * tables) and GET /v1/workers/{name}/facet/backup (a consistent copy taken
 * with SQLite's online backup API while workers keep writing).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "facets.h"
#include "node.h"

static void respond_facet_error(http_request *req, const char *name, int rc, char *err) {
  json_t *body = json_pack("{s:s, s:s}", "error",
                           rc == -ENOENT ? "this worker has no facet" : (err ? err : strerror(-rc)),
                           "name", name);
  node_respond_json(req, rc == -ENOENT ? 404 : rc == -EINVAL ? 400 : 500, body, NULL);
  json_decref(body);
  free(err);
}

static void describe(node *n, http_request *req, const char *name) {
  json_t *out = NULL;
  char *err = NULL;
  int rc = facet_describe(n->data_dir, name, &out, &err);
  if (rc != 0) {
    respond_facet_error(req, name, rc, err);
    return;
  }
  free(err);
  node_respond_json(req, 200, out, NULL);
  json_decref(out);
}

int node_read_file(const char *path, char **data, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) return -errno;
  struct stat st;
  if (fstat(fileno(f), &st) != 0) {
    int e = -errno;
    fclose(f);
    return e;
  }
  *data = xmalloc((size_t)st.st_size + 1);
  *len = fread(*data, 1, (size_t)st.st_size, f);
  int bad = ferror(f);
  fclose(f);
  if (bad || *len != (size_t)st.st_size) {
    free(*data);
    return -EIO;
  }
  return 0;
}

static void backup(node *n, http_request *req, const char *name) {
  char suffix[17];
  if (random_hex(suffix, 8) != 0) {
    node_respond_error(req, 500, "no randomness for a temporary file name");
    return;
  }
  /* The copy is written inside the data directory: nothing writes outside it. */
  char *tmp = xasprintf("%s/facets/.backup-%s-%s.sqlite", n->data_dir, name, suffix);
  char *err = NULL;
  int rc = facet_backup_to(n->data_dir, name, NULL, tmp, &err);
  if (rc != 0) {
    unlink(tmp);
    free(tmp);
    respond_facet_error(req, name, rc, err);
    return;
  }
  free(err);
  char *data = NULL;
  size_t len = 0;
  rc = node_read_file(tmp, &data, &len);
  unlink(tmp);
  free(tmp);
  if (rc != 0) {
    node_respond_error(req, 500, "could not read the backup copy");
    return;
  }
  char *disposition = xasprintf("attachment; filename=\"%s.sqlite\"", name);
  http_header headers[] = {
      {"Content-Type", "application/vnd.sqlite3"},
      {"Content-Disposition", disposition},
      {"Cache-Control", "no-store"},
  };
  log_write(LOG_INFO, name, req->id, NULL, "facet backup: %zu bytes", len);
  http_respond(req, 200, headers, ARRAY_SIZE(headers), data, len);
  free(disposition);
  free(data);
}

int node_facet_route(node *n, http_request *req, const char *name, const char *sub) {
  int is_backup = strcmp(sub, "facet/backup") == 0;
  if (strcmp(sub, "facet") != 0 && !is_backup) return 0;
  /* Method first, then the name, and the same invalid-name answer as
   * /v1/workers/{name}: a client handles every worker route alike. */
  if (strcmp(req->method, "GET") != 0) {
    node_respond_method(req, "GET");
    return 1;
  }
  if (!worker_name_valid(name, strlen(name))) {
    node_respond_invalid_name(req, name);
    return 1;
  }
  if (is_backup)
    backup(n, req, name);
  else
    describe(n, req, name);
  return 1;
}

int node_facet_purge(node *n, const char *name) {
  int rc = facet_purge(n->data_dir, name);
  if (rc == 0) log_write(LOG_INFO, name, NULL, NULL, "facet purged");
  else log_write(LOG_ERROR, name, NULL, NULL, "facet purge failed: %s", strerror(-rc));
  return rc;
}
