/*
 * The data directory: creating it, locking it against a second supervisor,
 * and the control API token file in it.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "node.h"

#define TOKEN_BYTES 32 /* 64 hex characters */
#define TOKEN_FILE_MAX 4096

/* mkdir -p with mode 0700 for what it creates. */
static int mkdir_p(const char *dir) {
  char *path = xstrdup(dir);
  int rc = 0;
  for (char *p = path + 1; ; p++) {
    if (*p != '/' && *p != '\0') continue;
    char saved = *p;
    *p = '\0';
    if (mkdir(path, 0700) != 0 && errno != EEXIST) {
      rc = -errno;
      break;
    }
    *p = saved;
    if (saved == '\0') break;
  }
  free(path);
  if (rc == 0) {
    struct stat st;
    if (stat(dir, &st) != 0) return -errno;
    if (!S_ISDIR(st.st_mode)) return -ENOTDIR;
  }
  return rc;
}

/* Two supervisors on one data directory would share its registry and
 * facets, and the second would remove the first's egress socket on its way
 * out: the directory is locked for the life of the process (the descriptor
 * is never closed; workers do not inherit it). The lock file names the
 * holder, for the refusal's message. */
static int lock_datadir(const char *dir, char **err) {
  char *path = xasprintf("%s/node.lock", dir);
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    *err = xasprintf("%s: %s", path, strerror(errno));
    free(path);
    return -1;
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int e = errno;
    char holder[32] = "";
    ssize_t n = pread(fd, holder, sizeof holder - 1, 0);
    holder[n > 0 ? n : 0] = '\0';
    holder[strcspn(holder, "\n")] = '\0';
    if (e == EWOULDBLOCK)
      *err = xasprintf("data directory %s is in use by another edgenode%s%s%s", dir,
                       holder[0] ? " (pid " : "", holder, holder[0] ? ")" : "");
    else
      *err = xasprintf("%s: cannot lock: %s", path, strerror(e));
    close(fd);
    free(path);
    return -1;
  }
  char pid[32];
  int len = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
  if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)len, 0) != len)
    log_warn("%s: could not record this process's pid: %s", path, strerror(errno));
  free(path);
  return 0;
}

int node_datadir_prepare(const char *dir, char **abs_path, char **err) {
  int rc = mkdir_p(dir);
  if (rc != 0) {
    *err = xasprintf("data directory %s: %s", dir, strerror(-rc));
    return rc;
  }
  char *real = realpath(dir, NULL);
  if (real == NULL) {
    rc = -errno;
    *err = xasprintf("data directory %s: %s", dir, strerror(errno));
    return rc;
  }
  if (lock_datadir(real, err) != 0) {
    free(real);
    return -EBUSY;
  }
  *abs_path = xstrdup(real);
  free(real);
  return 0;
}

static int write_new_token(const char *path, char **err) {
  char hex[2 * TOKEN_BYTES + 2];
  int rc = random_hex(hex, TOKEN_BYTES);
  if (rc != 0) {
    *err = xasprintf("control token: random: %s", strerror(-rc));
    return rc;
  }
  strcat(hex, "\n");
  /* O_EXCL: never overwrite a token someone else just wrote. */
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    rc = -errno;
    if (errno == EEXIST) return 0;
    *err = xasprintf("control token %s: %s", path, strerror(errno));
    return rc;
  }
  size_t len = strlen(hex), off = 0;
  while (off < len) {
    ssize_t n = write(fd, hex + off, len - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    off += (size_t)n;
  }
  rc = off == len && fsync(fd) == 0 ? 0 : -EIO;
  if (close(fd) != 0) rc = -EIO;
  if (rc != 0) *err = xasprintf("control token %s: write failed", path);
  return rc;
}

static int read_token(const char *path, char **token, char **err) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int rc = -errno;
    *err = xasprintf("control token %s: %s", path, strerror(errno));
    return rc;
  }
  char buf[TOKEN_FILE_MAX + 1];
  size_t len = 0;
  while (len < sizeof buf) {
    ssize_t n = read(fd, buf + len, sizeof buf - len);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int rc = -errno;
      *err = xasprintf("control token %s: %s", path, strerror(errno));
      close(fd);
      return rc;
    }
    if (n == 0) break;
    len += (size_t)n;
  }
  close(fd);
  if (len > TOKEN_FILE_MAX) {
    *err = xasprintf("control token %s: file too large", path);
    return -EINVAL;
  }
  /* Trailing newlines and spaces are editing artefacts, not part of the token. */
  while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r' || buf[len - 1] == ' ' ||
                     buf[len - 1] == '\t'))
    len--;
  if (len == 0 || memchr(buf, '\0', len) != NULL) {
    *err = xasprintf("control token %s: empty or not text", path);
    return -EINVAL;
  }
  *token = xstrndup(buf, len);
  return 0;
}

int node_token_load(const char *path, char **token, char **err) {
  if (access(path, F_OK) != 0) {
    if (errno != ENOENT) {
      int rc = -errno;
      *err = xasprintf("control token %s: %s", path, strerror(errno));
      return rc;
    }
    int rc = write_new_token(path, err);
    if (rc != 0) return rc;
    log_write(LOG_INFO, NULL, NULL, NULL, "created control token file %s", path);
  }
  struct stat st;
  if (stat(path, &st) == 0 && (st.st_mode & 077) != 0)
    log_write(LOG_WARN, NULL, NULL, NULL,
              "control token file %s is readable by other users (mode %03o); chmod 600 it",
              path, (unsigned)(st.st_mode & 0777));
  return read_token(path, token, err);
}
