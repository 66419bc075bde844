/*
 * Runs a libFuzzer target over files without libFuzzer: every regular file in
 * the directories (or the files) named on the command line is one input.
 * This keeps the seed corpora and any saved crash inputs in the normal test
 * run, with any compiler.
 */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Returns 0 after running the file, -1 if it could not be read. */
static int replay_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) {
    fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
    return -1;
  }
  size_t cap = 4096, len = 0;
  uint8_t *buf = malloc(cap);
  if (buf == NULL) abort();
  size_t n;
  while ((n = fread(buf + len, 1, cap - len, f)) > 0) {
    len += n;
    if (len == cap) {
      cap *= 2;
      buf = realloc(buf, cap);
      if (buf == NULL) abort();
    }
  }
  int failed = ferror(f);
  fclose(f);
  if (failed) {
    fprintf(stderr, "replay: %s: read error\n", path);
    free(buf);
    return -1;
  }
  LLVMFuzzerTestOneInput(buf, len);
  free(buf);
  return 0;
}

static int replay_dir(const char *dir, int *count) {
  DIR *d = opendir(dir);
  if (d == NULL) {
    fprintf(stderr, "replay: %s: %s\n", dir, strerror(errno));
    return -1;
  }
  int rc = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    size_t plen = strlen(dir) + strlen(e->d_name) + 2;
    char *path = malloc(plen);
    if (path == NULL) abort();
    snprintf(path, plen, "%s/%s", dir, e->d_name);
    struct stat st;
    if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
      if (replay_file(path) == 0) {
        (*count)++;
      } else {
        rc = -1;
      }
    }
    free(path);
  }
  closedir(d);
  return rc;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s DIR_OR_FILE...\n", argv[0]);
    return 2;
  }
  int count = 0, rc = 0;
  for (int i = 1; i < argc; i++) {
    struct stat st;
    if (stat(argv[i], &st) == 0 && S_ISDIR(st.st_mode)) {
      if (replay_dir(argv[i], &count) < 0) rc = 1;
    } else if (replay_file(argv[i]) == 0) {
      count++;
    } else {
      rc = 1;
    }
  }
  /* An empty corpus would pass while testing nothing. */
  if (count == 0) {
    fprintf(stderr, "replay: no inputs found\n");
    return 1;
  }
  printf("replayed %d inputs\n", count);
  return rc;
}
