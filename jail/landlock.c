/*
 * The landlock ruleset: what a jailed process may still open, by raw system
 * calls (glibc 2.36 has no wrappers).
 *
 * The build's kernel headers (Debian 12's 6.1) know ABI 2; the kernel may
 * know more. Rights of later ABIs are defined here by their fixed values and
 * only handled when the running kernel reports that ABI, so an older kernel
 * gets the subset it understands and a newer one refuses the rest as well.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/landlock.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "internal.h"

#ifndef LANDLOCK_ACCESS_FS_REFER
#define LANDLOCK_ACCESS_FS_REFER (1ULL << 13)
#endif
#ifndef LANDLOCK_ACCESS_FS_TRUNCATE
#define LANDLOCK_ACCESS_FS_TRUNCATE (1ULL << 14)
#endif
#ifndef LANDLOCK_ACCESS_FS_IOCTL_DEV
#define LANDLOCK_ACCESS_FS_IOCTL_DEV (1ULL << 15)
#endif
#ifndef LANDLOCK_ACCESS_NET_BIND_TCP
#define LANDLOCK_ACCESS_NET_BIND_TCP (1ULL << 0)
#define LANDLOCK_ACCESS_NET_CONNECT_TCP (1ULL << 1)
#endif
#ifndef LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET
#define LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET (1ULL << 0)
#define LANDLOCK_SCOPE_SIGNAL (1ULL << 1)
#endif

/* struct landlock_ruleset_attr as of ABI 6; shorter for older kernels. */
typedef struct ruleset_attr {
  uint64_t handled_access_fs;
  uint64_t handled_access_net; /* ABI 4 */
  uint64_t scoped;             /* ABI 6 */
} ruleset_attr;

#define FS_READ (LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR)
#define FS_FILE_RIGHTS                                                                        \
  (LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_READ_FILE | \
   LANDLOCK_ACCESS_FS_TRUNCATE | LANDLOCK_ACCESS_FS_IOCTL_DEV)

/* What every jailed process may still read: libraries a late dlopen loads
 * (libgcc_s for a backtrace), time zones, CPU counts, and its own /proc. */
const char *const jail__common_readable[] = {
    "/usr", "/lib", "/lib64", "/etc/ld.so.cache", "/etc/localtime", "/etc/timezone",
    "/dev/urandom", "/dev/random", "/sys/devices/system/cpu", "/proc/self",
    "/etc/ssl/openssl.cnf", /* libnode's OpenSSL reads it when first used */
    NULL,
};

const char *const jail__common_writable[] = {"/dev/null", NULL};

/* The egress resolves names (glibc reads these on every lookup, and again
 * when they change). Its CA bundles are loaded before the jail. */
static const char *const egress_readable[] = {
    "/etc/hosts", "/etc/resolv.conf", "/etc/nsswitch.conf", "/etc/host.conf",
    "/etc/gai.conf", "/etc/services", "/etc/protocols", NULL,
};

static uint64_t fs_rights(int abi) {
  uint64_t all = (LANDLOCK_ACCESS_FS_MAKE_SYM << 1) - 1; /* ABI 1 */
  if (abi >= 2) all |= LANDLOCK_ACCESS_FS_REFER;
  if (abi >= 3) all |= LANDLOCK_ACCESS_FS_TRUNCATE;
  if (abi >= 5) all |= LANDLOCK_ACCESS_FS_IOCTL_DEV;
  return all;
}

int jail__landlock_restrict(int ruleset_fd) {
  return syscall(SYS_landlock_restrict_self, ruleset_fd, 0) == 0 ? 0 : -errno;
}

/* Adds a rule for one path; a path that does not exist is skipped. 1 when
 * added, 0 when skipped, -errno on failure. */
static int add_path(int ruleset, const char *path, uint64_t rights, uint64_t handled) {
  int fd = open(path, O_PATH | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT || errno == ENOTDIR || errno == EACCES ? 0 : -errno;
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int rc = -errno;
    close(fd);
    return rc;
  }
  if (!S_ISDIR(st.st_mode)) rights &= FS_FILE_RIGHTS;
  struct landlock_path_beneath_attr attr = {.allowed_access = rights & handled, .parent_fd = fd};
  int rc = attr.allowed_access == 0 ||
                   syscall(SYS_landlock_add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, &attr, 0) == 0
               ? 1
               : -errno;
  close(fd);
  return rc;
}

static int add_list(int ruleset, const char *const *list, uint64_t rights, uint64_t handled,
                    int *added, const char **failed) {
  for (const char *const *p = list; p && *p; p++) {
    int rc = add_path(ruleset, *p, rights, handled);
    if (rc < 0) {
      *failed = *p;
      return rc;
    }
    *added += rc;
  }
  return 0;
}

int jail__landlock_ruleset(const jail_config *c, jail_report *r, int *abi_out) {
  long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
  *abi_out = 0;
  if (abi < 1) {
    int err = errno;
    jail__set(r, JAIL_LANDLOCK, JAIL_OFF, err, "kernel: %s", strerror(err));
    return -err;
  }
  *abi_out = (int)abi;
  ruleset_attr attr = {.handled_access_fs = fs_rights((int)abi)};
  size_t size = sizeof attr.handled_access_fs;
  if (abi >= 4) {
    /* The worker has no TCP at all: its listening socket is inherited. */
    if (c->kind == JAIL_WORKER)
      attr.handled_access_net = LANDLOCK_ACCESS_NET_BIND_TCP | LANDLOCK_ACCESS_NET_CONNECT_TCP;
    size = offsetof(ruleset_attr, scoped);
  }
  if (abi >= 6) {
    attr.scoped = LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | LANDLOCK_SCOPE_SIGNAL;
    size = sizeof attr;
  }
  int ruleset = (int)syscall(SYS_landlock_create_ruleset, &attr, size, 0);
  if (ruleset < 0) {
    int err = errno;
    jail__set(r, JAIL_LANDLOCK, JAIL_OFF, err, "create_ruleset: %s", strerror(err));
    return -err;
  }
  uint64_t handled = attr.handled_access_fs;
  uint64_t write = handled & ~(uint64_t)LANDLOCK_ACCESS_FS_EXECUTE;
  uint64_t read_write_file =
      LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_TRUNCATE;
  int added = 0;
  const char *failed = NULL;
  int rc = add_list(ruleset, c->writable, write, handled, &added, &failed);
  if (rc == 0) rc = add_list(ruleset, c->readable, FS_READ, handled, &added, &failed);
  if (rc == 0) rc = add_list(ruleset, jail__common_readable, FS_READ, handled, &added, &failed);
  if (rc == 0) rc = add_list(ruleset, jail__common_writable, read_write_file, handled, &added, &failed);
  if (rc == 0 && c->kind == JAIL_EGRESS)
    rc = add_list(ruleset, egress_readable, FS_READ, handled, &added, &failed);
  if (rc != 0) {
    jail__set(r, JAIL_LANDLOCK, JAIL_OFF, -rc, "rule for %s: %s", failed, strerror(-rc));
    close(ruleset);
    return rc;
  }
  jail__set(r, JAIL_LANDLOCK, JAIL_ON, 0, "ABI %ld, %d paths%s%s", abi, added,
            attr.handled_access_net ? ", no TCP" : "", attr.scoped ? ", scoped signals" : "");
  return ruleset;
}
