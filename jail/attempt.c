/*
 * jail_attempt: one forbidden action, tried for real by a jailed process, for
 * the end-to-end tests that prove the jail holds (tests/e2e/jail.test.mjs).
 * The worker reaches it only when EDGENODE_TEST_JAIL_ATTEMPT names actions
 * (worker/process.c): an operator's environment, never a tenant's code.
 *
 * Each action is what code that took a worker process over would try first;
 * an action the jail lets through does no harm (a connect is closed at once,
 * a signal is SIGCONT, a trace is detached, a limit or a priority is written
 * back unchanged, and execve runs /bin/true, which ends the process), so the
 * tests can also run them without the jail as a control.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "jail.h"

extern char **environ;

static int refused(const char *call, const char **failed) {
  *failed = call;
  return errno ? errno : EPERM;
}

/* A TCP socket (seccomp kills), then a connect to the loopback port. */
static int try_tcp(const char *arg, const char **failed) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return refused("socket", failed);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(arg ? arg : "80")),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  int rc = connect(fd, (struct sockaddr *)&a, sizeof a) == 0 ? 0 : refused("connect", failed);
  close(fd);
  return rc;
}

/* A unix socket to `arg`: a path, or "@NAME" for the abstract namespace
 * (the name padded with NULs to the whole sun_path, as libuv binds one). */
static int try_unix(const char *arg, const char **failed) {
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  size_t len = arg ? strlen(arg) : 0;
  if (len == 0 || len >= sizeof a.sun_path) {
    *failed = "argument";
    return EINVAL;
  }
  memcpy(a.sun_path, arg, len);
  if (arg[0] == '@') a.sun_path[0] = '\0';
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return refused("socket", failed);
  socklen_t size = arg[0] == '@' ? (socklen_t)sizeof a
                                 : (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len + 1);
  int rc = connect(fd, (struct sockaddr *)&a, size) == 0 ? 0 : refused("connect", failed);
  close(fd);
  return rc;
}

static int try_execve(const char **failed) {
  char *argv[] = {"true", NULL};
  execve("/bin/true", argv, environ);
  return refused("execve", failed);
}

/* The supervisor, traced: what would read its memory and the token in it. */
static int try_ptrace(const char **failed) {
  pid_t parent = getppid();
  if (ptrace(PTRACE_ATTACH, parent, NULL, NULL) != 0) return refused("ptrace", failed);
  ptrace(PTRACE_DETACH, parent, NULL, NULL);
  return 0;
}

static int try_open(const char *arg, const char **failed) {
  int fd = open(arg ? arg : "", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return refused("open", failed);
  close(fd);
  return 0;
}

static int try_signal(const char *arg, const char **failed) {
  pid_t pid = arg ? (pid_t)atoi(arg) : getppid();
  return kill(pid, SIGCONT) == 0 ? 0 : refused("kill", failed);
}

/* The limits and the nice value of another process (the parent by default),
 * written back unchanged: lowering a limit needs no privilege, so a process
 * allowed this could starve the supervisor of descriptors or CPU. */
static int try_prlimit(const char *arg, const char **failed) {
  pid_t pid = arg ? (pid_t)atoi(arg) : getppid();
  struct rlimit cur;
  if (prlimit(pid, RLIMIT_NOFILE, NULL, &cur) != 0) return refused("prlimit", failed);
  return prlimit(pid, RLIMIT_NOFILE, &cur, NULL) == 0 ? 0 : refused("prlimit", failed);
}

static int try_renice(const char *arg, const char **failed) {
  id_t pid = arg ? (id_t)atoi(arg) : (id_t)getppid();
  errno = 0;
  int prio = getpriority(PRIO_PROCESS, pid);
  if (prio == -1 && errno != 0) return refused("getpriority", failed);
  return setpriority(PRIO_PROCESS, pid, prio) == 0 ? 0 : refused("setpriority", failed);
}

int jail_attempt(const char *action, const char **failed) {
  const char *colon = strchr(action, ':');
  size_t n = colon ? (size_t)(colon - action) : strlen(action);
  const char *arg = colon ? colon + 1 : NULL;
  *failed = NULL;
  errno = 0;
#define IS(name) (n == sizeof name - 1 && memcmp(action, name, n) == 0)
  if (IS("tcp")) return try_tcp(arg, failed);
  if (IS("unix")) return try_unix(arg, failed);
  if (IS("execve")) return try_execve(failed);
  if (IS("ptrace")) return try_ptrace(failed);
  if (IS("open")) return try_open(arg, failed);
  if (IS("signal")) return try_signal(arg, failed);
  if (IS("prlimit")) return try_prlimit(arg, failed);
  if (IS("renice")) return try_renice(arg, failed);
#undef IS
  *failed = "action";
  return -EINVAL;
}
