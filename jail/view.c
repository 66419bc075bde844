/*
 * The worker's view of the filesystem: a tmpfs root holding only what the
 * process may use, each path bound at its own name, and the old root gone.
 *
 * Landlock decides what may be opened, but not which unix sockets may be
 * connected to by path: on the kernels we run on (landlock ABI 7) nothing
 * but the view stops a worker taken over from reaching, say, a container
 * runtime's socket as root. In the view only the data directory's sockets
 * (the egress, the replication socket, cordoned tenants' and forwarding
 * relays') exist. Everything else outside the lists is not there (ENOENT),
 * and what is read-only in the lists is bound read-only, so the view is a
 * wall of its own beside landlock rather than only a mirror of it.
 *
 * The steps work on paths relative to the new root, made with O_NOFOLLOW
 * one component at a time, so no symbolic link (one the view copies, or one
 * in the host's tree) leads a mkdir or a mount outside the tmpfs.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/mount.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "internal.h"

#define VIEW_MAX_ENTRIES 64

typedef struct view_entry {
  char path[PATH_MAX]; /* absolute and lexical: what the process names */
  int writable;
  int bound; /* bound (not only a link copied, not skipped) */
} view_entry;

typedef struct view_plan {
  view_entry e[VIEW_MAX_ENTRIES];
  size_t n;
  char cwd[PATH_MAX];
  const char *failed; /* the path a step failed on */
} view_plan;

/* cwd + "/" + path for a relative one; "." components and repeated slashes
 * dropped. A path with ".." is resolved instead: lexically it could name
 * something other than what the kernel would. */
static int absolute(const char *cwd, const char *path, char *out) {
  char joined[PATH_MAX];
  int n = path[0] == '/' ? snprintf(joined, sizeof joined, "%s", path)
                         : snprintf(joined, sizeof joined, "%s/%s", cwd, path);
  if (n < 0 || (size_t)n >= sizeof joined) return -ENAMETOOLONG;
  if (strstr(joined, "/../") || (n >= 3 && strcmp(joined + n - 3, "/..") == 0))
    return realpath(joined, out) ? 0 : -errno;
  size_t len = 0;
  for (const char *p = joined; *p;) {
    while (*p == '/') p++;
    const char *end = strchrnul(p, '/');
    size_t part = (size_t)(end - p);
    if (part == 0 || (part == 1 && *p == '.')) {
      p = end;
      continue;
    }
    if (len + 1 + part >= PATH_MAX) return -ENAMETOOLONG;
    out[len++] = '/';
    memcpy(out + len, p, part);
    len += part;
    p = end;
  }
  if (len == 0) out[len++] = '/';
  out[len] = '\0';
  return 0;
}

static int add(view_plan *v, const char *cwd, const char *path, int writable) {
  if (v->n == VIEW_MAX_ENTRIES) return -E2BIG;
  view_entry *e = &v->e[v->n];
  int rc = absolute(cwd, path, e->path);
  if (rc == -ENOENT) return 0; /* ".." into nothing: nothing to bind */
  if (rc != 0) return rc;
  e->writable = writable;
  e->bound = 0;
  v->n++;
  return 0;
}

static int add_list(view_plan *v, const char *const *list, int writable) {
  for (const char *const *p = list; p && *p; p++) {
    int rc = add(v, v->cwd, *p, writable);
    if (rc != 0) {
      v->failed = *p;
      return rc;
    }
  }
  return 0;
}

/* Is `inner` `outer` itself or below it? */
static int beneath(const char *inner, const char *outer) {
  size_t len = strlen(outer);
  if (strcmp(outer, "/") == 0) return 1;
  return strncmp(inner, outer, len) == 0 && (inner[len] == '\0' || inner[len] == '/');
}

/* Bound already, with at least the rights wanted? */
static int covered(const view_plan *v, size_t i) {
  for (size_t j = 0; j < v->n; j++)
    if (j != i && v->e[j].bound && beneath(v->e[i].path, v->e[j].path) &&
        (v->e[j].writable || !v->e[i].writable))
      return 1;
  return 0;
}

/* Makes the parents of path in the view (relative to the current directory,
 * the new root), never through a symbolic link; returns a descriptor of the
 * last parent, and *leaf its name. */
static int make_parents(const char *path, const char **leaf) {
  int dir = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return -errno;
  const char *p = path + 1;
  for (;;) {
    const char *end = strchr(p, '/');
    if (end == NULL) break;
    char part[NAME_MAX + 1];
    size_t len = (size_t)(end - p);
    if (len > NAME_MAX) {
      close(dir);
      return -ENAMETOOLONG;
    }
    memcpy(part, p, len);
    part[len] = '\0';
    if (mkdirat(dir, part, 0755) != 0 && errno != EEXIST) {
      int rc = -errno;
      close(dir);
      return rc;
    }
    int next = openat(dir, part, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int rc = -errno;
    close(dir);
    if (next < 0) return rc;
    dir = next;
    p = end + 1;
  }
  *leaf = p;
  return dir;
}

/* The mount flags a read-only remount must keep (it resets the others). */
static unsigned long kept_flags(const char *view_path) {
  struct statvfs st;
  if (statvfs(view_path, &st) != 0) return 0;
  unsigned long f = 0;
  if (st.f_flag & ST_NOSUID) f |= MS_NOSUID;
  if (st.f_flag & ST_NODEV) f |= MS_NODEV;
  if (st.f_flag & ST_NOEXEC) f |= MS_NOEXEC;
  if (st.f_flag & ST_NOATIME) f |= MS_NOATIME;
  if (st.f_flag & ST_NODIRATIME) f |= MS_NODIRATIME;
  if (st.f_flag & ST_RELATIME) f |= MS_RELATIME;
  return f;
}

/* An empty directory, or file, at path in the view (there already: fine). */
static int make_node(const char *path, int directory) {
  const char *leaf;
  int dir = make_parents(path, &leaf);
  if (dir < 0) return dir;
  int rc = 0;
  if (directory) {
    if (mkdirat(dir, leaf, 0755) != 0 && errno != EEXIST) rc = -errno;
  } else {
    int fd = openat(dir, leaf, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) rc = -errno;
    else close(fd);
  }
  close(dir);
  return rc;
}

/* The host's path bound over an empty file or directory of the same name. */
static int bind_one(const view_entry *e, const struct stat *st) {
  int rc = make_node(e->path, S_ISDIR(st->st_mode));
  if (rc != 0) return rc;
  const char *target = e->path + 1;
  if (mount(e->path, target, NULL, MS_BIND | MS_REC, NULL) != 0) return -errno;
  if (!e->writable &&
      mount(NULL, target, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | kept_flags(target), NULL) != 0)
    return -errno;
  return 0;
}

/* A symbolic link is copied as it is (a time zone is named by where
 * /etc/localtime points); what it points to is added to the plan. */
static int copy_link(view_plan *v, const view_entry *e) {
  char text[PATH_MAX], resolved[PATH_MAX];
  ssize_t len = readlink(e->path, text, sizeof text - 1);
  if (len < 0) return -errno;
  text[len] = '\0';
  const char *leaf;
  int dir = make_parents(e->path, &leaf);
  if (dir < 0) return dir;
  int rc = symlinkat(text, dir, leaf) == 0 || errno == EEXIST ? 0 : -errno;
  close(dir);
  if (rc != 0 || realpath(e->path, resolved) == NULL) return rc; /* dangling: nothing more */
  return add(v, "/", resolved, e->writable);
}

static int by_length(const void *a, const void *b) {
  return (int)strlen(((const view_entry *)a)->path) - (int)strlen(((const view_entry *)b)->path);
}

/* Binds every entry from `from` on, shortest first, so that a directory is
 * bound before what it covers; links add entries, taken in the next pass. */
static int bind_all(view_plan *v) {
  size_t from = 0;
  while (from < v->n) {
    size_t end = v->n;
    qsort(v->e + from, end - from, sizeof *v->e, by_length);
    for (size_t i = from; i < end; i++) {
      view_entry *e = &v->e[i];
      struct stat st;
      if (covered(v, i) || lstat(e->path, &st) != 0) continue; /* missing: not there either */
      int rc = S_ISLNK(st.st_mode) ? copy_link(v, e) : bind_one(e, &st);
      if (rc != 0) {
        v->failed = e->path;
        return rc;
      }
      e->bound = !S_ISLNK(st.st_mode);
    }
    from = end;
  }
  return 0;
}

/* An empty tmpfs mounted over "/", made the current directory. */
static int new_root(void) {
  int fs = (int)syscall(SYS_fsopen, "tmpfs", FSOPEN_CLOEXEC);
  if (fs < 0) return -errno;
  int rc = 0, mnt = -1;
  if (syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "mode", "0755", 0) != 0 ||
      syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "size", "1m", 0) != 0 ||
      syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) != 0 ||
      (mnt = (int)syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC,
                          MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC)) < 0)
    rc = -errno;
  close(fs);
  if (rc == 0 && (syscall(SYS_move_mount, mnt, "", AT_FDCWD, "/", MOVE_MOUNT_F_EMPTY_PATH) != 0 ||
                  fchdir(mnt) != 0))
    rc = -errno;
  if (mnt >= 0) close(mnt);
  return rc;
}

/* The current directory, made again inside the view, so that relative
 * paths the process was given still name the same files. */
static int keep_cwd(const char *cwd) {
  return strcmp(cwd, "/") == 0 ? 0 : make_node(cwd, 1);
}

int jail__view_enter(const jail_config *c, jail_report *r, char *cwd_out, size_t cwd_size) {
  view_plan *v = calloc(1, sizeof *v);
  if (v == NULL) return -ENOMEM;
  int rc = getcwd(v->cwd, sizeof v->cwd) ? 0 : -errno;
  if (rc == 0) rc = add_list(v, c->writable, 1);
  if (rc == 0) rc = add_list(v, jail__common_writable, 1);
  if (rc == 0) rc = add_list(v, c->readable, 0);
  if (rc == 0) rc = add_list(v, jail__common_readable, 0);
  if (rc == 0) rc = add_list(v, c->reachable, 0);
  const char *step = "plan";
  if (rc == 0) {
    step = "tmpfs";
    rc = new_root();
  }
  if (rc == 0) {
    step = "bind";
    rc = bind_all(v);
    if (rc == 0) {
      step = "cwd";
      rc = keep_cwd(v->cwd);
    }
    if (rc == 0) {
      step = "pivot_root";
      rc = syscall(SYS_pivot_root, ".", ".") == 0 ? 0 : -errno;
    }
    /* Until the pivot the old root is still there: back to it. */
    if (rc != 0) (void)umount2(".", MNT_DETACH);
    else if (umount2(".", MNT_DETACH) != 0) rc = -errno; /* the old root, now under "." */
  }
  if (rc == 0 && chdir(v->cwd) != 0) rc = -errno;
  if (rc != 0) {
    /* Where it was, or where the failure left it: either way not inside. */
    int back = chdir(v->cwd);
    (void)back;
    jail__set(r, JAIL_MNTNS, JAIL_OFF, -rc, "view: %s %s: %s", step, v->failed ? v->failed : "",
              strerror(-rc));
  } else {
    size_t bound = 0;
    for (size_t i = 0; i < v->n; i++) bound += (size_t)v->e[i].bound;
    jail__set(r, JAIL_MNTNS, JAIL_ON, 0, "a view of %zu paths, every thread", bound);
    snprintf(cwd_out, cwd_size, "%s", v->cwd);
  }
  free(v);
  return rc;
}
