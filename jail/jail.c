/*
 * jail_enter: the order of the layers, the per-thread half of each, and the
 * report. See jail.h.
 *
 * Namespaces, capabilities, no_new_privs and landlock belong to a thread,
 * not to the process, and the process already has threads when it locks
 * itself in (V8's platform workers, the isolate maker, the watchdog). A
 * thread left outside would be the way out for code that takes the process
 * over, so every other thread is made to apply the same steps in a signal
 * handler (as glibc does for setuid), then the seccomp filter is loaded for
 * the whole thread group at once. Threads made later inherit the main
 * thread's state.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <linux/capability.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

/* A signal nothing else in the worker or the egress uses. */
#define JAIL_SIGNAL (SIGRTMIN + 7)
#define THREAD_WAIT_MS 1000
#define CHOWN_DEPTH 4

static const char *const layer_names[JAIL_LAYERS] = {
    [JAIL_NETNS] = "netns",       [JAIL_IPCNS] = "ipcns",
    [JAIL_MNTNS] = "mntns",       [JAIL_PIDNS] = "pidns",
    [JAIL_USER] = "user",         [JAIL_CAPS] = "caps",
    [JAIL_NO_NEW_PRIVS] = "no_new_privs", [JAIL_LANDLOCK] = "landlock",
    [JAIL_SECCOMP] = "seccomp",
};

const char *jail_layer_name(jail_layer layer) {
  return layer < JAIL_LAYERS ? layer_names[layer] : "unknown";
}

const char *jail_state_name(jail_state state) {
  switch (state) {
    case JAIL_ON: return "on";
    case JAIL_OFF: return "off";
    case JAIL_NOT_WANTED: return "not_wanted";
  }
  return "unknown";
}

void jail__set(jail_report *r, jail_layer layer, jail_state state, int err, const char *fmt, ...) {
  jail_layer_report *l = &r->layer[layer];
  l->state = state;
  l->err = err;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(l->detail, sizeof l->detail, fmt, ap);
  va_end(ap);
}

json_t *jail_report_json(const jail_report *r) {
  json_t *layers = json_object();
  for (int i = 0; i < JAIL_LAYERS; i++) {
    const jail_layer_report *l = &r->layer[i];
    json_t *o = json_pack("{s:s, s:s}", "state", jail_state_name(l->state), "detail", l->detail);
    if (l->err) json_object_set_new(o, "errno", json_integer(l->err));
    json_object_set_new(layers, layer_names[i], o);
  }
  return json_pack("{s:i, s:i, s:o}", "required_off", r->required_off, "landlock_abi",
                   r->landlock_abi, "layers", layers);
}

int jail_parse_user(const char *text, uid_t *uid, gid_t *gid) {
  char *end;
  errno = 0;
  unsigned long u = strtoul(text, &end, 10);
  if (errno || end == text || *end != ':' || u >= 0xffffffffu) return -EINVAL;
  const char *g_text = end + 1;
  unsigned long g = strtoul(g_text, &end, 10);
  if (errno || end == g_text || *end != '\0' || g >= 0xffffffffu) return -EINVAL;
  *uid = (uid_t)u;
  *gid = (gid_t)g;
  return 0;
}

/* ---- what every thread does ---- */

/* Filled in by the main thread before any thread is signalled. */
static struct {
  int netns_fd, ipcns_fd, mntns_fd; /* -1: not joined */
  char cwd[PATH_MAX];     /* the main thread's, inside the worker's view */
  int drop_caps;
  int ruleset_fd;         /* -1: no landlock */
  atomic_int done;        /* threads that have run thread_steps */
  atomic_int err[JAIL_LAYERS]; /* the first errno a thread met, per layer */
} job;

static void note(jail_layer layer, int err) {
  int zero = 0;
  atomic_compare_exchange_strong(&job.err[layer], &zero, err);
}

/* Every capability gone from this thread: bounding set, ambient, and the
 * three sets. Async-signal-safe (raw system calls only). */
static int drop_caps_self(void) {
  for (int cap = 0; cap <= 63; cap++) {
    if (prctl(PR_CAPBSET_READ, cap, 0, 0, 0) < 0) break; /* past the last one */
    if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL) return errno;
  }
  if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL)
    return errno;
  struct __user_cap_header_struct head = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
  struct __user_cap_data_struct data[2];
  memset(data, 0, sizeof data);
  if (syscall(SYS_capset, &head, data) != 0) return errno;
  return 0;
}

static void thread_steps(void) {
  if (job.netns_fd >= 0 && setns(job.netns_fd, CLONE_NEWNET) != 0) note(JAIL_NETNS, errno);
  if (job.ipcns_fd >= 0 && setns(job.ipcns_fd, CLONE_NEWIPC) != 0) note(JAIL_IPCNS, errno);
  /* A thread shares its root with the others: it takes a copy first, as
   * setns into a mount namespace requires. */
  if (job.mntns_fd >= 0 && (unshare(CLONE_FS) != 0 || setns(job.mntns_fd, CLONE_NEWNS) != 0 ||
                            (job.cwd[0] && chdir(job.cwd) != 0)))
    note(JAIL_MNTNS, errno);
  if (job.drop_caps) {
    int err = drop_caps_self();
    if (err) note(JAIL_CAPS, err);
  }
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) note(JAIL_NO_NEW_PRIVS, errno);
  if (job.ruleset_fd >= 0) {
    int rc = jail__landlock_restrict(job.ruleset_fd);
    if (rc != 0) note(JAIL_LANDLOCK, -rc);
  }
}

static void on_jail_signal(int sig) {
  (void)sig;
  int saved = errno;
  thread_steps();
  atomic_fetch_add(&job.done, 1);
  errno = saved;
}

/*
 * Runs thread_steps on every thread but the caller. Returns how many threads
 * did not answer in time (they block the signal, or are stuck in the kernel);
 * *others gets how many there were.
 */
static int broadcast(int *others) {
  *others = 0;
  struct sigaction sa, old;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_jail_signal;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  if (sigaction(JAIL_SIGNAL, &sa, &old) != 0) return -1;
  DIR *d = opendir("/proc/self/task");
  int sent = 0;
  pid_t self = (pid_t)syscall(SYS_gettid), pid = getpid();
  if (d) {
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
      if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
      pid_t tid = (pid_t)atoi(e->d_name);
      if (tid == self) continue;
      (*others)++;
      if (syscall(SYS_tgkill, pid, tid, JAIL_SIGNAL) == 0) sent++;
      else if (errno == ESRCH) (*others)--; /* it ended meanwhile */
    }
    closedir(d);
  }
  struct timespec tick = {0, 1000000};
  for (int waited = 0; atomic_load(&job.done) < sent && waited < THREAD_WAIT_MS; waited++)
    nanosleep(&tick, NULL);
  int missing = *others - atomic_load(&job.done);
  /* A thread that answers late still finds the handler: the action is kept. */
  if (missing <= 0) sigaction(JAIL_SIGNAL, &old, NULL);
  return missing > 0 ? missing : 0;
}

/* ---- the main thread's steps ---- */

static void name_errno(char *out, size_t size, const char *what, int err) {
  snprintf(out, size, "%s: %s", what, strerror(err));
}

static void unshare_one(jail_report *r, jail_layer layer, int flag, int *fd_out,
                        const char *ns_file) {
  char why[96];
  if (unshare(flag) != 0) {
    int err = errno;
    name_errno(why, sizeof why, "unshare", err);
    jail__set(r, layer, JAIL_OFF, err, "%s", why);
    return;
  }
  if (fd_out) {
    char path[64];
    snprintf(path, sizeof path, "/proc/thread-self/ns/%s", ns_file);
    *fd_out = open(path, O_RDONLY | O_CLOEXEC);
    if (*fd_out < 0) {
      int err = errno;
      jail__set(r, layer, JAIL_OFF, err, "%s: %s (other threads stay outside)", path,
                strerror(err));
      return;
    }
  }
  jail__set(r, layer, JAIL_ON, 0, "a namespace of its own");
}

/* A mount namespace of its own, with private propagation: nothing mounted
 * on the host later shows up inside, and the process cannot mount
 * (seccomp). A worker's then holds only its view (view.c). */
static void enter_mntns(const jail_config *c, jail_report *r) {
  if (unshare(CLONE_NEWNS) != 0) {
    int err = errno;
    jail__set(r, JAIL_MNTNS, JAIL_OFF, err, "unshare: %s", strerror(err));
    return;
  }
  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) {
    int err = errno;
    jail__set(r, JAIL_MNTNS, JAIL_OFF, err, "private propagation: %s", strerror(err));
    return;
  }
  job.mntns_fd = open("/proc/thread-self/ns/mnt", O_RDONLY | O_CLOEXEC);
  if (job.mntns_fd < 0) {
    int err = errno;
    jail__set(r, JAIL_MNTNS, JAIL_OFF, err, "/proc/thread-self/ns/mnt: %s", strerror(err));
    return;
  }
  if (c->kind != JAIL_WORKER) {
    jail__set(r, JAIL_MNTNS, JAIL_ON, 0, "every thread, private propagation");
    return;
  }
  (void)jail__view_enter(c, r, job.cwd, sizeof job.cwd);
}

static int chown_tree(int dirfd, const char *name, uid_t uid, gid_t gid, int depth) {
  if (fchownat(dirfd, name, uid, gid, AT_SYMLINK_NOFOLLOW) != 0) return -errno;
  if (depth == 0) return 0;
  int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return errno == ENOTDIR ? 0 : -errno;
  DIR *d = fdopendir(fd);
  if (d == NULL) {
    int rc = -errno;
    close(fd);
    return rc;
  }
  int rc = 0;
  struct dirent *e;
  while (rc == 0 && (e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    rc = chown_tree(fd, e->d_name, uid, gid, depth - 1);
  }
  closedir(d);
  return rc;
}

static void drop_user(const jail_config *c, jail_report *r) {
  if (!c->drop_user) {
    jail__set(r, JAIL_USER, JAIL_NOT_WANTED, 0, geteuid() == 0 ? "root: no user given" : "uid %u",
              (unsigned)geteuid());
    return;
  }
  if (geteuid() != 0) {
    jail__set(r, JAIL_USER, geteuid() == c->uid ? JAIL_ON : JAIL_OFF,
              geteuid() == c->uid ? 0 : EPERM, "uid %u (not root: nothing to drop)",
              (unsigned)geteuid());
    return;
  }
  for (const char *const *p = c->writable; p && *p; p++) {
    int rc = chown_tree(AT_FDCWD, *p, c->uid, c->gid, CHOWN_DEPTH);
    if (rc != 0) {
      jail__set(r, JAIL_USER, JAIL_OFF, -rc, "chown %s: %s", *p, strerror(-rc));
      return;
    }
  }
  /* glibc makes every thread of the process take the new ids. */
  if (setgroups(0, NULL) != 0 || setresgid(c->gid, c->gid, c->gid) != 0 ||
      setresuid(c->uid, c->uid, c->uid) != 0) {
    int err = errno;
    jail__set(r, JAIL_USER, JAIL_OFF, err, "setuid: %s", strerror(err));
    return;
  }
  jail__set(r, JAIL_USER, JAIL_ON, 0, "uid %u gid %u", (unsigned)c->uid, (unsigned)c->gid);
}

static int caps_held(void) {
  struct __user_cap_header_struct head = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
  struct __user_cap_data_struct data[2];
  if (syscall(SYS_capget, &head, data) != 0) return 1;
  return (data[0].effective | data[0].permitted | data[1].effective | data[1].permitted) != 0 ||
         prctl(PR_CAPBSET_READ, CAP_SYS_ADMIN, 0, 0, 0) == 1;
}

/* Which layers count against strict mode when off. */
static int required(const jail_config *c, jail_layer l) {
  switch (l) {
    case JAIL_NETNS: return c->new_netns;
    case JAIL_MNTNS: return c->kind == JAIL_WORKER; /* the view */
    case JAIL_USER: return c->drop_user;
    case JAIL_CAPS:
    case JAIL_NO_NEW_PRIVS:
    case JAIL_LANDLOCK:
    case JAIL_SECCOMP: return 1;
    default: return 0;
  }
}

static int first_failure(const jail_config *c, jail_report *r) {
  int rc = 0;
  r->required_off = 0;
  for (int i = 0; i < JAIL_LAYERS; i++) {
    /* Off without an errno: not reached yet. */
    if (r->layer[i].state != JAIL_OFF || r->layer[i].err == 0 || !required(c, (jail_layer)i))
      continue;
    r->required_off++;
    if (rc == 0) rc = -(r->layer[i].err ? r->layer[i].err : EPERM);
  }
  return rc;
}

int jail_enter(const jail_config *c, jail_report *r) {
  memset(r, 0, sizeof *r);
  for (int i = 0; i < JAIL_LAYERS; i++) jail__set(r, (jail_layer)i, JAIL_OFF, 0, "not reached");
  job.netns_fd = job.ipcns_fd = job.mntns_fd = job.ruleset_fd = -1;
  job.cwd[0] = '\0';
  job.drop_caps = 0;
  atomic_store(&job.done, 0);
  for (int i = 0; i < JAIL_LAYERS; i++) atomic_store(&job.err[i], 0);

  if (c->new_netns) unshare_one(r, JAIL_NETNS, CLONE_NEWNET, &job.netns_fd, "net");
  else jail__set(r, JAIL_NETNS, JAIL_NOT_WANTED, 0, "needs the network");
  unshare_one(r, JAIL_IPCNS, CLONE_NEWIPC, &job.ipcns_fd, "ipc");
  enter_mntns(c, r);
  jail__set(r, JAIL_PIDNS, JAIL_NOT_WANTED, 0,
            "not after start-up: new threads would fail (EINVAL)");
  if (c->strict && first_failure(c, r) != 0) return first_failure(c, r);

  drop_user(c, r);
  if (c->strict && first_failure(c, r) != 0) return first_failure(c, r);

  /* The main thread must not drop them before it has opened what it needs;
   * other threads do it in the same pass as the rest. */
  int abi = 0;
  int ruleset = jail__landlock_ruleset(c, r, &abi);
  r->landlock_abi = abi;
  if (c->strict && ruleset < 0) return first_failure(c, r);
  job.ruleset_fd = ruleset;
  job.drop_caps = caps_held();

  int others = 0;
  int missing = broadcast(&others);
  thread_steps();
  /* The main thread's netns and ipcns came from unshare: the descriptors
   * were only for the others. A thread that has not answered may still
   * use them: they stay open then, rather than be reused for another file. */
  if (missing == 0) {
    if (job.netns_fd >= 0) close(job.netns_fd);
    if (job.ipcns_fd >= 0) close(job.ipcns_fd);
    if (job.mntns_fd >= 0) close(job.mntns_fd);
    if (ruleset >= 0) close(ruleset);
  }

  static const jail_layer per_thread[] = {JAIL_NETNS, JAIL_IPCNS, JAIL_MNTNS, JAIL_CAPS,
                                          JAIL_NO_NEW_PRIVS, JAIL_LANDLOCK};
  for (size_t i = 0; i < sizeof per_thread / sizeof *per_thread; i++) {
    jail_layer l = per_thread[i];
    int err = atomic_load(&job.err[l]);
    if (l == JAIL_CAPS && !job.drop_caps && err == 0) {
      jail__set(r, l, JAIL_ON, 0, "none held");
      continue;
    }
    if (l == JAIL_NO_NEW_PRIVS && err == 0)
      jail__set(r, l, JAIL_ON, 0, "every thread (%d)", others + 1);
    if (l == JAIL_CAPS && err == 0) jail__set(r, l, JAIL_ON, 0, "all dropped, every thread (%d)", others + 1);
    if (err != 0) {
      jail__set(r, l, JAIL_OFF, err, "a thread: %s", strerror(err));
    } else if (missing > 0 && r->layer[l].state == JAIL_ON) {
      jail__set(r, l, JAIL_OFF, EAGAIN, "%d of %d other threads did not answer", missing, others);
    }
  }
  if (c->strict && first_failure(c, r) != 0) return first_failure(c, r);

  jail__seccomp_load(c, r);
  return first_failure(c, r);
}
