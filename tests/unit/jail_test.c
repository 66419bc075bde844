/*
 * jail: a forked child locks itself in with jail_enter, then tries what a
 * tenant that took over its worker process would try. The parent judges by
 * how the child ended: killed by SIGSYS (seccomp), or an exit code saying
 * whether the call was refused with the expected errno. Allowed things (unix
 * socket pairs, the facets directory, executable memory, threads) must still
 * work. A layer's assertions are skipped only where the kernel reports the
 * layer unsupported.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "jail.h"

#define REFUSED 0   /* the child's exit code: refused as expected / worked */
#define ALLOWED 10  /* a forbidden call went through */
#define WRONG 11    /* refused, but not with the errno expected */
#define BROKEN 12   /* something that must work did not */

static char root[256], facets[300], outside[300], sockets[300], outside_sock[300], inside_sock[320];
static int view_on; /* in the child: the worker's view is up (mntns on) */

static int setup(void **state) {
  (void)state;
  snprintf(root, sizeof root, "/tmp/jail-test-XXXXXX");
  if (mkdtemp(root) == NULL) return -1;
  snprintf(facets, sizeof facets, "%s/facets", root);
  snprintf(outside, sizeof outside, "%s/outside.txt", root);
  snprintf(sockets, sizeof sockets, "%s/sockets", root);
  snprintf(outside_sock, sizeof outside_sock, "%s/outside.sock", root);
  snprintf(inside_sock, sizeof inside_sock, "%s/inside.sock", sockets);
  if (mkdir(facets, 0700) != 0 || mkdir(sockets, 0700) != 0) return -1;
  int fd = open(outside, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
  if (fd < 0) return -1;
  close(fd);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  return system(cmd) == 0 ? 0 : -1;
}

typedef int (*jailed_fn)(void *arg);

typedef struct outcome {
  int status;        /* from waitpid */
  jail_report report;
  int entered;       /* the report arrived */
  int rc;            /* jail_enter's return */
} outcome;

static jail_config worker_config(void) {
  static const char *writable[2], *reachable[2];
  writable[0] = facets;
  reachable[0] = sockets;
  jail_config c = {.kind = JAIL_WORKER, .writable = writable, .reachable = reachable,
                   .new_netns = 1};
  return c;
}

/* Forks, locks the child in with `config`, runs `fn` there. */
static outcome run_jailed(const jail_config *config, jailed_fn before, jailed_fn fn, void *arg) {
  outcome o;
  memset(&o, 0, sizeof o);
  int pipefd[2];
  assert_int_equal(pipe(pipefd), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    close(pipefd[0]);
    if (before && before(arg) != 0) _exit(BROKEN);
    jail_report r;
    int rc = jail_enter(config, &r);
    view_on = config->kind == JAIL_WORKER && r.layer[JAIL_MNTNS].state == JAIL_ON;
    if (write(pipefd[1], &rc, sizeof rc) != sizeof rc || write(pipefd[1], &r, sizeof r) != sizeof r)
      _exit(BROKEN);
    close(pipefd[1]);
    _exit(fn(arg));
  }
  close(pipefd[1]);
  if (read(pipefd[0], &o.rc, sizeof o.rc) == sizeof o.rc &&
      read(pipefd[0], &o.report, sizeof o.report) == sizeof o.report)
    o.entered = 1;
  close(pipefd[0]);
  assert_int_equal(waitpid(pid, &o.status, 0), pid);
  return o;
}

static int layer_on(const outcome *o, jail_layer l) {
  return o->entered && o->report.layer[l].state == JAIL_ON;
}

static int skip_unless(const outcome *o, jail_layer l) {
  if (layer_on(o, l)) return 0;
  fprintf(stderr, "# skipped: %s is off here (%s)\n", jail_layer_name(l),
          o->entered ? o->report.layer[l].detail : "no report");
  return 1;
}

static void assert_killed_by_seccomp(const outcome *o) {
  if (skip_unless(o, JAIL_SECCOMP)) return;
  if (!WIFSIGNALED(o->status))
    fail_msg("expected a SIGSYS kill, the child exited with %d", WEXITSTATUS(o->status));
  assert_int_equal(WTERMSIG(o->status), SIGSYS);
}

static void assert_exit(const outcome *o, int code) {
  if (WIFSIGNALED(o->status)) fail_msg("the child was killed by signal %d", WTERMSIG(o->status));
  assert_int_equal(WEXITSTATUS(o->status), code);
}

static int expect_errno(long rc, int err) {
  if (rc >= 0) return ALLOWED;
  return errno == err ? REFUSED : WRONG;
}

/* ---- what a compromised worker tries ---- */

static int try_tcp_socket(void *arg) {
  (void)arg;
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  return fd >= 0 ? ALLOWED : WRONG;
}

static int try_execve(void *arg) {
  (void)arg;
  char *argv[] = {"/bin/true", NULL};
  execve("/bin/true", argv, environ);
  /* Sanitizer builds refuse instead of killing (their reports fork). */
  return errno == EPERM ? REFUSED : WRONG;
}

static int try_fork(void *arg) {
  (void)arg;
  pid_t pid = fork();
  if (pid == 0) _exit(0);
  if (pid > 0) return ALLOWED;
  return errno == EPERM ? REFUSED : WRONG;
}

static int try_ptrace(void *arg) {
  (void)arg;
  return ptrace(PTRACE_TRACEME, 0, NULL, NULL) == 0 ? ALLOWED : WRONG;
}

static int try_unshare(void *arg) {
  (void)arg;
  return unshare(CLONE_NEWNET) == 0 ? ALLOWED : WRONG;
}

static int try_mount(void *arg) {
  (void)arg;
  return mount("none", facets, "tmpfs", 0, NULL) == 0 ? ALLOWED : WRONG;
}

/* Not in the worker's view at all; refused by landlock without it. */
static int try_open_outside(void *arg) {
  (void)arg;
  return expect_errno(open(outside, O_RDONLY | O_CLOEXEC), view_on ? ENOENT : EACCES);
}

static int try_read_etc(void *arg) {
  (void)arg;
  return expect_errno(open("/etc/passwd", O_RDONLY | O_CLOEXEC), view_on ? ENOENT : EACCES);
}

/* A unix socket and its address; -1 when the path does not fit. */
static int unix_socket(const char *path, struct sockaddr_un *a) {
  memset(a, 0, sizeof *a);
  a->sun_family = AF_UNIX;
  size_t len = strlen(path);
  if (len >= sizeof a->sun_path) return -1;
  memcpy(a->sun_path, path, len + 1);
  return socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
}

static int connect_to(const char *path) {
  struct sockaddr_un a;
  int fd = unix_socket(path, &a);
  if (fd < 0) return -1;
  int rc = connect(fd, (struct sockaddr *)&a, sizeof a);
  int err = errno;
  close(fd);
  errno = err;
  return rc;
}

/* Landlock does not cover a connect by path: the view does. */
static int try_unix_sockets(void *arg) {
  (void)arg;
  if (connect_to(inside_sock) != 0) return BROKEN;
  return expect_errno(connect_to(outside_sock), ENOENT);
}

static int listen_at(const char *path) {
  struct sockaddr_un a;
  int fd = unix_socket(path, &a);
  unlink(path);
  if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 8) != 0) return -1;
  return fd;
}

static void unix_sockets_outside_are_not_there(void **state) {
  (void)state;
  int in = listen_at(inside_sock), out = listen_at(outside_sock);
  assert_true(in >= 0 && out >= 0);
  jail_config c = worker_config();
  outcome o = run_jailed(&c, NULL, try_unix_sockets, NULL);
  if (!skip_unless(&o, JAIL_MNTNS)) assert_exit(&o, REFUSED);
  close(in);
  close(out);
}

/* A process given relative paths finds them in its view as before. */
static int enter_root(void *arg) {
  (void)arg;
  return chdir(root);
}

static int relative_paths_work(void *arg) {
  (void)arg;
  char cwd[300];
  if (getcwd(cwd, sizeof cwd) == NULL || strcmp(cwd, root) != 0) return BROKEN;
  int fd = open("facets/relative.sqlite", O_CREAT | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0 || close(fd) != 0) return BROKEN;
  return expect_errno(open("outside.txt", O_RDONLY | O_CLOEXEC), ENOENT);
}

/* /etc/localtime names the zone by where it points: the view keeps the
 * link, and the file it points to. */
static char localtime_link[256];

static int link_is_kept(void *arg) {
  (void)arg;
  char text[256];
  ssize_t n = readlink("/etc/localtime", text, sizeof text - 1);
  if (n < 0) return BROKEN;
  text[n] = '\0';
  if (strcmp(text, localtime_link) != 0) return BROKEN;
  int fd = open("/etc/localtime", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return BROKEN;
  close(fd);
  return REFUSED;
}

static void links_are_kept(void **state) {
  (void)state;
  ssize_t n = readlink("/etc/localtime", localtime_link, sizeof localtime_link - 1);
  if (n < 0) {
    fprintf(stderr, "# skipped: /etc/localtime is not a link here\n");
    return;
  }
  localtime_link[n] = '\0';
  jail_config c = worker_config();
  outcome o = run_jailed(&c, NULL, link_is_kept, NULL);
  if (!skip_unless(&o, JAIL_MNTNS)) assert_exit(&o, REFUSED);
}

static void relative_paths_stay_right(void **state) {
  (void)state;
  static const char *writable[] = {"facets", NULL};
  jail_config c = worker_config();
  c.writable = writable;
  outcome o = run_jailed(&c, enter_root, relative_paths_work, NULL);
  if (!skip_unless(&o, JAIL_MNTNS)) assert_exit(&o, REFUSED);
}

static int try_signal_parent(void *arg) {
  (void)arg;
  return expect_errno(kill(getppid(), 0), EPERM);
}

/* Another process's limits and priority, and this one's own. */
static int try_others_limits(void *arg) {
  (void)arg;
  pid_t parent = getppid();
  struct rlimit cur;
  if (prlimit(0, RLIMIT_NOFILE, NULL, &cur) != 0 || setrlimit(RLIMIT_NOFILE, &cur) != 0)
    return BROKEN;
  if (setpriority(PRIO_PROCESS, 0, 5) != 0 || getpriority(PRIO_PROCESS, 0) != 5) return BROKEN;
  int rc = expect_errno(prlimit(parent, RLIMIT_NOFILE, NULL, &cur), EPERM);
  if (rc == REFUSED) rc = expect_errno(prlimit(parent, RLIMIT_NOFILE, &cur, NULL), EPERM);
  if (rc == REFUSED) rc = expect_errno(setpriority(PRIO_PROCESS, (id_t)parent, 19), EPERM);
  if (rc == REFUSED) rc = expect_errno(setpriority(PRIO_PGRP, 0, 19), EPERM);
  if (rc == REFUSED) rc = expect_errno(setpriority(PRIO_USER, 0, 19), EPERM);
  errno = 0;
  if (rc == REFUSED && (getpriority(PRIO_PROCESS, (id_t)parent) != -1 || errno != EPERM)) rc = WRONG;
  return rc;
}

static void tcp_socket_kills(void **state) {
  (void)state;
  jail_config c = worker_config();
  outcome o = run_jailed(&c, NULL, try_tcp_socket, NULL);
  assert_killed_by_seccomp(&o);
}

static void execve_kills(void **state) {
  (void)state;
  jail_config c = worker_config();
  outcome o = run_jailed(&c, NULL, try_execve, NULL);
#if defined(__SANITIZE_ADDRESS__)
  if (!skip_unless(&o, JAIL_SECCOMP)) assert_exit(&o, REFUSED);
#else
  assert_killed_by_seccomp(&o);
#endif
}

static void fork_kills(void **state) {
  (void)state;
  jail_config c = worker_config();
  outcome o = run_jailed(&c, NULL, try_fork, NULL);
#if defined(__SANITIZE_ADDRESS__)
  if (!skip_unless(&o, JAIL_SECCOMP)) assert_exit(&o, REFUSED);
#else
  assert_killed_by_seccomp(&o);
#endif
}

static void ptrace_kills(void **state) {
  (void)state;
  jail_config c = worker_config();
  outcome o = run_jailed(&c, NULL, try_ptrace, NULL);
  assert_killed_by_seccomp(&o);
}

static void unshare_and_mount_kill(void **state) {
  (void)state;
  jail_config c = worker_config();
  outcome o = run_jailed(&c, NULL, try_unshare, NULL);
  assert_killed_by_seccomp(&o);
  o = run_jailed(&c, NULL, try_mount, NULL);
  assert_killed_by_seccomp(&o);
}

static void files_outside_are_refused(void **state) {
  (void)state;
  jail_config c = worker_config();
  outcome o = run_jailed(&c, NULL, try_open_outside, NULL);
  if (!skip_unless(&o, JAIL_LANDLOCK)) assert_exit(&o, REFUSED);
  o = run_jailed(&c, NULL, try_read_etc, NULL);
  if (!skip_unless(&o, JAIL_LANDLOCK)) assert_exit(&o, REFUSED);
}

static void signals_to_others_are_refused(void **state) {
  (void)state;
  jail_config c = worker_config();
  outcome o = run_jailed(&c, NULL, try_signal_parent, NULL);
  if (!skip_unless(&o, JAIL_SECCOMP)) assert_exit(&o, REFUSED);
}

static void limits_of_others_are_refused(void **state) {
  (void)state;
  jail_config c = worker_config();
  outcome o = run_jailed(&c, NULL, try_others_limits, NULL);
  if (!skip_unless(&o, JAIL_SECCOMP)) assert_exit(&o, REFUSED);
}

/* ---- a thread that existed before the jail is inside it too ---- */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int go, thread_result = -1;
static pthread_t early;

static void *early_thread(void *arg) {
  (void)arg;
  pthread_mutex_lock(&mu);
  while (!go) pthread_cond_wait(&cv, &mu);
  pthread_mutex_unlock(&mu);
  thread_result = try_open_outside(NULL);
  return NULL;
}

static int start_early_thread(void *arg) {
  (void)arg;
  return pthread_create(&early, NULL, early_thread, NULL);
}

static int early_thread_tries(void *arg) {
  (void)arg;
  pthread_mutex_lock(&mu);
  go = 1;
  pthread_cond_signal(&cv);
  pthread_mutex_unlock(&mu);
  if (pthread_join(early, NULL) != 0) return BROKEN;
  return thread_result;
}

static void earlier_threads_are_jailed(void **state) {
  (void)state;
  jail_config c = worker_config();
  outcome o = run_jailed(&c, start_early_thread, early_thread_tries, NULL);
  if (!skip_unless(&o, JAIL_LANDLOCK)) assert_exit(&o, REFUSED);
}

/* ---- what must keep working ---- */

static void *thread_noop(void *arg) { return arg; }

static int allowed_things(void *arg) {
  const char *parent_netns = arg;
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return BROKEN;
  if (write(sv[0], "x", 1) != 1) return BROKEN;
  char ch;
  if (read(sv[1], &ch, 1) != 1 || ch != 'x') return BROKEN;
  int u = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (u < 0) return BROKEN;
  int on = 1;
  if (ioctl(u, FIONBIO, &on) != 0) return BROKEN;
  close(u);
  /* Listed requests work, others are refused without a kill. */
  if (prctl(PR_SET_NAME, "jailed", 0, 0, 0) != 0) return BROKEN;
  if (prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) == 0 || errno != EINVAL) return BROKEN;
  char path[400];
  snprintf(path, sizeof path, "%s/tenant.sqlite", facets);
  int fd = open(path, O_CREAT | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0 || write(fd, "data", 4) != 4 || fsync(fd) != 0 || close(fd) != 0) return BROKEN;
  snprintf(path, sizeof path, "%s/child", facets);
  if (mkdir(path, 0700) != 0 || rmdir(path) != 0) return BROKEN;
  /* As the JIT does: writable pages made executable, and run. */
  unsigned char *code = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (code == MAP_FAILED) return BROKEN;
  code[0] = 0xc3; /* ret */
  if (mprotect(code, 4096, PROT_READ | PROT_EXEC) != 0) return BROKEN;
  ((void (*)(void))code)();
  munmap(code, 4096);
  pthread_t t;
  if (pthread_create(&t, NULL, thread_noop, NULL) != 0 || pthread_join(t, NULL) != 0) return BROKEN;
  /* What the end-to-end tests read from outside. */
  char status[4096];
  fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return BROKEN;
  ssize_t n = read(fd, status, sizeof status - 1);
  close(fd);
  if (n <= 0) return BROKEN;
  status[n] = '\0';
  if (strstr(status, "NoNewPrivs:\t1") == NULL || strstr(status, "Seccomp:\t2") == NULL)
    return BROKEN;
  char netns[64];
  n = readlink("/proc/self/ns/net", netns, sizeof netns - 1);
  if (n <= 0) return BROKEN;
  netns[n] = '\0';
  if (strcmp(netns, parent_netns) == 0) return BROKEN;
  return REFUSED;
}

static void allowed_things_work(void **state) {
  (void)state;
  char netns[64];
  ssize_t n = readlink("/proc/self/ns/net", netns, sizeof netns - 1);
  assert_true(n > 0);
  netns[n] = '\0';
  jail_config c = worker_config();
  outcome o = run_jailed(&c, NULL, allowed_things, netns);
  assert_true(o.entered);
  for (int i = 0; i < JAIL_LAYERS; i++)
    fprintf(stderr, "# %-12s %-10s %s\n", jail_layer_name((jail_layer)i),
            jail_state_name(o.report.layer[i].state), o.report.layer[i].detail);
  if (skip_unless(&o, JAIL_SECCOMP) || skip_unless(&o, JAIL_NETNS) ||
      skip_unless(&o, JAIL_LANDLOCK))
    return;
  assert_int_equal(o.rc, 0);
  assert_exit(&o, REFUSED);
}

/* ---- the egress: sockets out, still no fork ---- */

static int egress_things(void *arg) {
  (void)arg;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return BROKEN;
  close(fd);
  fd = socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0 && errno != EAFNOSUPPORT) return BROKEN;
  if (fd >= 0) close(fd);
  return try_fork(NULL);
}

static int egress_raw_socket(void *arg) {
  (void)arg;
  return socket(AF_INET, SOCK_RAW, 1) >= 0 ? ALLOWED : WRONG;
}

static void egress_sockets_but_no_fork(void **state) {
  (void)state;
  jail_config c = worker_config();
  c.kind = JAIL_EGRESS;
  c.new_netns = 0;
  outcome o = run_jailed(&c, NULL, egress_things, NULL);
  assert_true(o.entered);
  assert_int_equal(o.report.layer[JAIL_NETNS].state, JAIL_NOT_WANTED);
#if defined(__SANITIZE_ADDRESS__)
  if (!skip_unless(&o, JAIL_SECCOMP)) assert_exit(&o, REFUSED);
#else
  assert_killed_by_seccomp(&o);
#endif
  o = run_jailed(&c, NULL, egress_raw_socket, NULL);
  assert_killed_by_seccomp(&o);
}

/* ---- the user ---- */

static int check_user(void *arg) {
  (void)arg;
  if (getuid() != 65534 || geteuid() != 65534 || getgid() != 65534) return BROKEN;
  char path[400];
  snprintf(path, sizeof path, "%s/tenant.sqlite", facets);
  int fd = open(path, O_CREAT | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return BROKEN;
  close(fd);
  return REFUSED;
}

static void root_becomes_the_user_given(void **state) {
  (void)state;
  if (geteuid() != 0) {
    fprintf(stderr, "# skipped: not root\n");
    return;
  }
  /* The user must reach the facets directory through its parent. Last of
   * the tests: root without capabilities no longer writes there after. */
  assert_int_equal(chmod(root, 0711), 0);
  jail_config c = worker_config();
  c.drop_user = 1;
  c.uid = 65534;
  c.gid = 65534;
  outcome o = run_jailed(&c, NULL, check_user, NULL);
  assert_true(o.entered);
  assert_int_equal(o.report.layer[JAIL_USER].state, JAIL_ON);
  assert_exit(&o, REFUSED);
}

static void report_names_every_layer(void **state) {
  (void)state;
  jail_report r;
  memset(&r, 0, sizeof r);
  r.layer[JAIL_SECCOMP].state = JAIL_ON;
  r.layer[JAIL_NETNS].state = JAIL_OFF;
  r.layer[JAIL_NETNS].err = EPERM;
  json_t *j = jail_report_json(&r);
  json_t *layers = json_object_get(j, "layers");
  assert_int_equal(json_object_size(layers), JAIL_LAYERS);
  assert_string_equal(json_string_value(json_object_get(json_object_get(layers, "seccomp"), "state")), "on");
  assert_int_equal(json_integer_value(json_object_get(json_object_get(layers, "netns"), "errno")), EPERM);
  json_decref(j);
  uid_t u;
  gid_t g;
  assert_int_equal(jail_parse_user("1000:100", &u, &g), 0);
  assert_int_equal(u, 1000);
  assert_int_equal(g, 100);
  assert_int_equal(jail_parse_user("1000", &u, &g), -EINVAL);
  assert_int_equal(jail_parse_user("a:b", &u, &g), -EINVAL);
  assert_int_equal(jail_parse_user("1:2x", &u, &g), -EINVAL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(report_names_every_layer),
      cmocka_unit_test(allowed_things_work),
      cmocka_unit_test(tcp_socket_kills),
      cmocka_unit_test(execve_kills),
      cmocka_unit_test(fork_kills),
      cmocka_unit_test(ptrace_kills),
      cmocka_unit_test(unshare_and_mount_kill),
      cmocka_unit_test(files_outside_are_refused),
      cmocka_unit_test(unix_sockets_outside_are_not_there),
      cmocka_unit_test(relative_paths_stay_right),
      cmocka_unit_test(links_are_kept),
      cmocka_unit_test(signals_to_others_are_refused),
      cmocka_unit_test(limits_of_others_are_refused),
      cmocka_unit_test(earlier_threads_are_jailed),
      cmocka_unit_test(egress_sockets_but_no_fork),
      cmocka_unit_test(root_becomes_the_user_given),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
