/*
 * The seccomp filter: an allow-list of the system calls a worker process and
 * the egress make once started, found by running both under strace through
 * the whole end-to-end suite (docs/operations.md, "Sandbox").
 *
 * Anything not listed kills the whole process (SIGSYS), and the supervisor
 * records a sandbox violation. Never listed: execve, execveat, fork (clone
 * without CLONE_THREAD), ptrace, process_vm_*, mount and the new mount API,
 * pivot_root, chroot, unshare, setns, bpf, keyctl, add_key, request_key,
 * perf_event_open, userfaultfd, io_uring_*, kexec_*, init_module, reboot,
 * swapon, settimeofday, the set*id family (ids were dropped already).
 *
 * A few calls that libraries probe and cope without get an errno instead of
 * the kill: clone3 (glibc falls back to clone, whose flags the filter can
 * read), userfaultfd, ioctl and prctl requests outside their short lists,
 * signals to other processes, and the limits, priorities and robust futex
 * list of other processes (prlimit64, get/setpriority, get_robust_list: pid
 * 0 only).
 *
 * Built with EDGENODE_JAIL_TEST_HOOKS, EDGENODE_JAIL_TRAP=1 in the
 * environment turns the kill into a trap that names the call on stderr
 * before the process dies: how a missing entry is found.
 */
#include <errno.h>
#include <linux/sched.h>
#include <seccomp.h>
#include <signal.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <termios.h>
#include <unistd.h>

#include "internal.h"

/* Both kinds: memory (V8's JIT maps, protects and discards executable
 * pages), threads and their futexes, libuv's epoll loop, SQLite's files and
 * locks, time, randomness, and the sockets they were given. */
static const char *const common_calls[] = {
    "read", "write", "readv", "writev", "pread64", "pwrite64", "preadv", "pwritev",
    "preadv2", "pwritev2", "close", "close_range", "fstat", "stat", "lstat", "newfstatat",
    "statx", "statfs", "fstatfs", "lseek", "mmap", "mprotect", "munmap", "mremap", "madvise",
    "brk", "msync", "mincore", "rt_sigaction", "rt_sigprocmask", "rt_sigreturn",
    "rt_sigpending", "rt_sigtimedwait", "rt_sigsuspend", "sigaltstack", "access", "faccessat",
    "faccessat2", "pipe", "pipe2", "select", "pselect6", "poll", "ppoll", "epoll_create",
    "epoll_create1", "epoll_ctl", "epoll_wait", "epoll_pwait", "epoll_pwait2", "eventfd",
    "eventfd2", "timerfd_create", "timerfd_settime", "timerfd_gettime", "sched_yield",
    "sched_getaffinity", "sched_getparam", "sched_getscheduler", "sched_get_priority_max",
    "sched_get_priority_min", "getpid", "gettid", "getppid", "getuid", "geteuid", "getgid",
    "getegid", "getresuid", "getresgid", "getgroups", "getpgrp", "dup", "dup2", "dup3", "fcntl",
    "flock", "fsync", "fdatasync", "ftruncate", "fallocate", "fadvise64", "getdents64",
    "getcwd", "open", "openat", "unlink", "unlinkat", "rename", "renameat", "renameat2",
    "mkdir", "mkdirat", "rmdir", "fchmod", "fchown", "readlink", "readlinkat", "umask",
    "utimensat", "futex", "set_robust_list", "rseq", "set_tid_address",
    "clock_gettime", "clock_getres", "clock_nanosleep", "nanosleep", "gettimeofday", "time",
    "getrusage", "times", "sysinfo", "uname", "getrlimit", "exit", "exit_group",
    "getrandom", "restart_syscall", "memfd_create", "pkey_alloc", "pkey_free", "pkey_mprotect", "membarrier",
    "capget", "arch_prctl", "accept", "accept4", "recvfrom",
    "recvmsg", "recvmmsg", "sendto", "sendmsg", "sendmmsg", "shutdown", "getsockopt",
    "setsockopt", "getsockname", "getpeername", "listen", "connect", NULL,
};

/* The egress binds its unix socket for the worker processes. */
static const char *const egress_calls[] = {"bind", NULL};

/* ioctl requests libuv (non-blocking, close-on-exec), isatty and SQLite make. */
static const unsigned long ioctl_allowed[] = {FIONBIO, FIOCLEX, FIONCLEX, FIONREAD, TCGETS,
                                              TIOCGWINSZ};

/* prctl options: thread names, V8's named mappings, and questions. */
static const int prctl_allowed[] = {PR_SET_NAME, PR_GET_NAME, PR_GET_DUMPABLE, PR_CAPBSET_READ,
                                    PR_GET_NO_NEW_PRIVS, PR_SET_NO_NEW_PRIVS, PR_GET_SECCOMP,
                                    PR_GET_TIMERSLACK, 0x53564d41 /* PR_SET_VMA */};

#if defined(__SANITIZE_ADDRESS__)
/* A sanitizer's report forks and executes its symbolizer: refused, not
 * killed, so the report is still printed (without symbols). */
#define EXEC_ACTION SCMP_ACT_ERRNO(EPERM)
#else
#define EXEC_ACTION SCMP_ACT_KILL_PROCESS
#endif

static int allow_list(scmp_filter_ctx ctx, const char *const *names, const char **failed) {
  for (const char *const *p = names; *p; p++) {
    int nr = seccomp_syscall_resolve_name(*p);
    if (nr == __NR_SCMP_ERROR) continue; /* not a call of this architecture */
    int rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 0);
    if (rc != 0) {
      *failed = *p;
      return rc;
    }
  }
  return 0;
}

static int add_rules(scmp_filter_ctx ctx, const jail_config *c, const char **failed) {
  int rc = allow_list(ctx, common_calls, failed);
  if (rc == 0 && c->kind == JAIL_EGRESS) rc = allow_list(ctx, egress_calls, failed);
  if (rc != 0) return rc;
  pid_t self = getpid();

#define RULE(what, ...)                \
  do {                                 \
    *failed = what;                    \
    rc = seccomp_rule_add(ctx, __VA_ARGS__); \
    if (rc != 0) return rc;            \
  } while (0)

  /* Threads only: a thread shares everything, a fork would be a process
   * outside the filter's accounting (and the first step to an exec). */
  RULE("clone", SCMP_ACT_ALLOW, SCMP_SYS(clone), 1,
       SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_THREAD, CLONE_THREAD));
#if defined(__SANITIZE_ADDRESS__)
  RULE("clone", EXEC_ACTION, SCMP_SYS(clone), 1, SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_THREAD, 0));
  RULE("execve", EXEC_ACTION, SCMP_SYS(execve), 0);
  RULE("vfork", EXEC_ACTION, SCMP_SYS(vfork), 0);
  RULE("fork", EXEC_ACTION, SCMP_SYS(fork), 0);
#endif
  RULE("clone3", SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
  /* isolate/ registers the shared builtins with one to stop fault-around,
   * and does without (64 KiB faults) where it is refused. */
  RULE("userfaultfd", SCMP_ACT_ERRNO(EPERM), SCMP_SYS(userfaultfd), 0);

  /* Sockets: a worker makes unix ones only (the egress link); the egress
   * makes TCP and UDP (DNS) ones too, and never raw ones. */
  RULE("socket", SCMP_ACT_ALLOW, SCMP_SYS(socket), 1, SCMP_A0(SCMP_CMP_EQ, AF_UNIX));
  RULE("socketpair", SCMP_ACT_ALLOW, SCMP_SYS(socketpair), 1, SCMP_A0(SCMP_CMP_EQ, AF_UNIX));
  if (c->kind == JAIL_EGRESS) {
    static const int families[] = {AF_INET, AF_INET6};
    static const int types[] = {SOCK_STREAM, SOCK_DGRAM};
    for (size_t f = 0; f < 2; f++)
      for (size_t t = 0; t < 2; t++)
        RULE("socket", SCMP_ACT_ALLOW, SCMP_SYS(socket), 2, SCMP_A0(SCMP_CMP_EQ, families[f]),
             SCMP_A1(SCMP_CMP_MASKED_EQ, 0xf, types[t]));
    /* glibc asks the kernel's routing table which families are configured. */
    RULE("socket", SCMP_ACT_ERRNO(EAFNOSUPPORT), SCMP_SYS(socket), 1,
         SCMP_A0(SCMP_CMP_EQ, AF_NETLINK));
  }

  for (size_t i = 0; i < sizeof ioctl_allowed / sizeof *ioctl_allowed; i++)
    RULE("ioctl", SCMP_ACT_ALLOW, SCMP_SYS(ioctl), 1,
         SCMP_A1(SCMP_CMP_EQ, (scmp_datum_t)ioctl_allowed[i]));
  for (size_t i = 0; i < sizeof prctl_allowed / sizeof *prctl_allowed; i++)
    RULE("prctl", SCMP_ACT_ALLOW, SCMP_SYS(prctl), 1,
         SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)prctl_allowed[i]));
  /* Everything else of the two answers as "not supported here". */
  RULE("ioctl", SCMP_ACT_ERRNO(ENOTTY), SCMP_SYS(ioctl), 1,
       SCMP_A1(SCMP_CMP_NE, (scmp_datum_t)FIONBIO));
  RULE("prctl", SCMP_ACT_ERRNO(EINVAL), SCMP_SYS(prctl), 1,
       SCMP_A0(SCMP_CMP_NE, (scmp_datum_t)PR_SET_NAME));

  /* Signals to itself only (abort, V8's and the sanitizers' own). */
  RULE("kill", SCMP_ACT_ALLOW, SCMP_SYS(kill), 1, SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)self));
  RULE("tgkill", SCMP_ACT_ALLOW, SCMP_SYS(tgkill), 1, SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)self));
  RULE("rt_sigqueueinfo", SCMP_ACT_ALLOW, SCMP_SYS(rt_sigqueueinfo), 1,
       SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)self));
  RULE("rt_tgsigqueueinfo", SCMP_ACT_ALLOW, SCMP_SYS(rt_tgsigqueueinfo), 1,
       SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)self));
  RULE("kill", SCMP_ACT_ERRNO(EPERM), SCMP_SYS(kill), 1, SCMP_A0(SCMP_CMP_NE, (scmp_datum_t)self));
  RULE("tgkill", SCMP_ACT_ERRNO(EPERM), SCMP_SYS(tgkill), 1,
       SCMP_A0(SCMP_CMP_NE, (scmp_datum_t)self));
  RULE("tkill", SCMP_ACT_ERRNO(EPERM), SCMP_SYS(tkill), 0);

  /* Limits and priorities of this process (pid 0) only: lowering another
   * process's limit needs no privilege, only the same uid, so a worker
   * could otherwise leave the supervisor without descriptors or CPU. The
   * threads that lower their own priority name themselves with 0 (Linux
   * nice values are per thread). */
  RULE("prlimit64", SCMP_ACT_ALLOW, SCMP_SYS(prlimit64), 1, SCMP_A0(SCMP_CMP_EQ, 0));
  RULE("prlimit64", SCMP_ACT_ERRNO(EPERM), SCMP_SYS(prlimit64), 1, SCMP_A0(SCMP_CMP_NE, 0));
  RULE("get_robust_list", SCMP_ACT_ALLOW, SCMP_SYS(get_robust_list), 1, SCMP_A0(SCMP_CMP_EQ, 0));
  RULE("get_robust_list", SCMP_ACT_ERRNO(EPERM), SCMP_SYS(get_robust_list), 1,
       SCMP_A0(SCMP_CMP_NE, 0));
  static const int prio_calls[] = {SCMP_SYS(getpriority), SCMP_SYS(setpriority)};
  for (size_t i = 0; i < sizeof prio_calls / sizeof *prio_calls; i++) {
    RULE("priority", SCMP_ACT_ALLOW, prio_calls[i], 2, SCMP_A0(SCMP_CMP_EQ, PRIO_PROCESS),
         SCMP_A1(SCMP_CMP_EQ, 0));
    RULE("priority", SCMP_ACT_ERRNO(EPERM), prio_calls[i], 1, SCMP_A0(SCMP_CMP_NE, PRIO_PROCESS));
    RULE("priority", SCMP_ACT_ERRNO(EPERM), prio_calls[i], 1, SCMP_A1(SCMP_CMP_NE, 0));
  }
#undef RULE
  *failed = NULL;
  return 0;
}

#if defined(EDGENODE_JAIL_TEST_HOOKS)
#include <stdio.h>
#include <stdlib.h>

static void on_sigsys(int sig, siginfo_t *info, void *context) {
  (void)context;
  char *name = seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, info->si_syscall);
  fprintf(stderr, "jail: forbidden system call %s (%d) in pid %d\n", name ? name : "?",
          info->si_syscall, (int)getpid());
  raise(sig); /* the default action now (SA_RESETHAND): the process dies of SIGSYS */
  _exit(128 + sig);
}

static uint32_t default_action(void) {
  const char *trap = getenv("EDGENODE_JAIL_TRAP");
  if (trap == NULL || strcmp(trap, "1") != 0) return SCMP_ACT_KILL_PROCESS;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_sigsys;
  sa.sa_flags = SA_SIGINFO | SA_RESETHAND | SA_NODEFER;
  sigaction(SIGSYS, &sa, NULL);
  return SCMP_ACT_TRAP;
}
#else
static uint32_t default_action(void) { return SCMP_ACT_KILL_PROCESS; }
#endif

int jail__seccomp_load(const jail_config *c, jail_report *r) {
  scmp_filter_ctx ctx = seccomp_init(default_action());
  if (ctx == NULL) {
    jail__set(r, JAIL_SECCOMP, JAIL_OFF, ENOMEM, "seccomp_init failed");
    return -ENOMEM;
  }
  const char *failed = NULL;
  int rc = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
  /* Every thread that exists gets the filter, not only this one. */
  if (rc == 0) rc = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_TSYNC, 1);
  /* A binary tree over the call numbers, not a chain of ~170 comparisons:
   * every system call of the process runs the filter. */
  if (rc == 0 && seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2) != 0)
    rc = 0; /* optional: a libseccomp without it keeps the chain */
  if (rc == 0) rc = add_rules(ctx, c, &failed);
  if (rc == 0) rc = seccomp_load(ctx);
  seccomp_release(ctx);
  if (rc != 0) {
    jail__set(r, JAIL_SECCOMP, JAIL_OFF, -rc, "%s%s%s", failed ? failed : "load", ": ",
              strerror(-rc));
    return rc;
  }
  jail__set(r, JAIL_SECCOMP, JAIL_ON, 0, "allow-list, %s", c->kind == JAIL_WORKER
                                                              ? "unix sockets only"
                                                              : "TCP/UDP sockets");
  return 0;
}
