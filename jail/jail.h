/*
 * jail: the second wall around a worker process and the egress process.
 *
 * V8 10.2 (Debian's libnode108) has no heap sandbox, so a V8 bug gives a
 * tenant its whole worker process. The process therefore locks itself in once
 * its start-up is done (sockets inherited, libraries loaded, V8's platform
 * threads running, files opened), with every layer the kernel offers:
 *
 *   netns         a network namespace of its own, with no interfaces (worker
 *                 only): inherited descriptors keep working, nothing new can
 *                 reach an address;
 *   ipcns         an IPC namespace of its own;
 *   mntns         a mount namespace of its own; a worker's holds only a view:
 *                 a tmpfs root with the paths below bound at their names
 *                 (read-only but for the writable ones), so that no unix
 *                 socket outside the `reachable` directories can be
 *                 connected to by path (landlock does not cover that);
 *   user          when root and a uid:gid is given: the writable directories
 *                 are handed to that user, then groups, gid and uid dropped;
 *   caps          every capability dropped (bounding, ambient, effective);
 *   no_new_privs  nothing it could execute would gain privileges;
 *   landlock      the filesystem shrinks to the writable directories (read-
 *                 write), what the process must still read (libraries loaded
 *                 late, time zones, /dev/urandom, its own /proc entry), and
 *                 for the worker no TCP at all; signals only to itself;
 *   seccomp       last: an allow-list of system calls (execve, ptrace, mount,
 *                 unshare, bpf, keyctl, perf_event_open, userfaultfd, fork...
 *                 kill the process with SIGSYS); socket() in a worker only
 *                 for AF_UNIX.
 *
 * A PID namespace is not among them: a process cannot enter one itself
 * without losing the right to make threads (clone(CLONE_THREAD) fails with
 * EINVAL once its children's namespace differs from its own), and V8 and
 * libuv start threads after start-up. The report says so. Nor does the
 * supervisor start its children in one: libuv's uv_spawn cannot pass
 * CLONE_NEWPID. What one would guard is closed by the layers above:
 * signals go to the process itself only (seccomp: kill, tgkill and
 * rt_sigqueueinfo name only its pid; landlock ABI 6 scopes signals too),
 * other processes cannot be traced or read (no ptrace, process_vm_*,
 * pidfd_*) nor have their limits or priorities changed (prlimit64 and
 * get/setpriority for pid 0 only), and of /proc only the process's own
 * entry is readable (landlock).
 *
 * Layers are applied in the order above, each only once the one before it
 * no longer needs the privilege it drops. Where the kernel refuses a layer,
 * the others are still applied, and the report says which one and why.
 */
#ifndef EDGENODE_JAIL_H
#define EDGENODE_JAIL_H

#include <stddef.h>
#include <sys/types.h>

#include <jansson.h>

typedef enum jail_kind {
  JAIL_WORKER, /* a worker process: no network beyond its inherited sockets */
  JAIL_EGRESS, /* the egress: TCP and UDP out, no worker-side freedoms */
} jail_kind;

typedef struct jail_config {
  jail_kind kind;
  const char *const *writable; /* NULL-terminated; read-write, may be NULL */
  const char *const *readable; /* NULL-terminated; read-only besides the
                                  kind's own list, may be NULL */
  const char *const *reachable; /* NULL-terminated, may be NULL: directories
                                  whose unix sockets stay reachable (the
                                  worker's view binds them read-only) */
  int drop_user;               /* when root: hand the writable directories to
                                  uid:gid and become that user */
  uid_t uid;
  gid_t gid;
  int new_netns;               /* a network namespace of its own */
  int strict;                  /* stop at the first layer refused */
} jail_config;

typedef enum jail_layer {
  JAIL_NETNS,
  JAIL_IPCNS,
  JAIL_MNTNS,
  JAIL_PIDNS,
  JAIL_USER,
  JAIL_CAPS,
  JAIL_NO_NEW_PRIVS,
  JAIL_LANDLOCK,
  JAIL_SECCOMP,
  JAIL_LAYERS
} jail_layer;

typedef enum jail_state {
  JAIL_OFF,        /* wanted, but the kernel refused it: err says why */
  JAIL_ON,
  JAIL_NOT_WANTED, /* not asked for (the egress's netns, no --jail-user) */
} jail_state;

typedef struct jail_layer_report {
  jail_state state;
  int err;         /* errno of the refusal, 0 otherwise */
  char detail[96]; /* "landlock ABI 7", "uid 65534 gid 65534", "unshare: EPERM" */
} jail_layer_report;

typedef struct jail_report {
  jail_layer_report layer[JAIL_LAYERS];
  int landlock_abi; /* 0 without landlock */
  int required_off; /* layers wanted but off whose absence strict mode refuses */
} jail_report;

/*
 * Locks the calling process in. Call it once, from the main thread, after
 * start-up: threads that exist already get the seccomp filter too (it is
 * synchronised over the thread group), but not the namespaces. Returns 0 when
 * every wanted layer is on, else the negative errno of the first refused
 * layer whose absence counts (netns, user, no_new_privs, landlock, seccomp;
 * the IPC and mount namespaces are taken where the kernel allows). With
 * `strict` it stops there: the process must exit. Without, the remaining
 * layers are applied anyway. The report is filled in either case.
 */
int jail_enter(const jail_config *config, jail_report *report);

/* "netns", "landlock", ... */
const char *jail_layer_name(jail_layer layer);

/* "on", "off", "not_wanted" */
const char *jail_state_name(jail_state state);

/*
 * The report as a JSON object, a new reference:
 * {"required_off": 0, "landlock_abi": 7,
 *  "layers": {"seccomp": {"state": "on", "detail": "..."},
 *             "netns": {"state": "off", "errno": 1, "detail": "unshare: ..."}, ...}}
 */
json_t *jail_report_json(const jail_report *report);

/* Parses "UID:GID" (numbers). 0, or -EINVAL. */
int jail_parse_user(const char *text, uid_t *uid, gid_t *gid);

/*
 * Test only (attempt.c): tries one forbidden action for real, as code that
 * took the process over would. `action` is one of
 *   tcp:PORT       a TCP socket, then a connect to 127.0.0.1:PORT
 *   unix:PATH      a connect to a unix socket by path, or
 *   unix:@NAME     in the abstract namespace (the name padded as libuv binds it)
 *   execve         /bin/true
 *   ptrace         attach to the parent
 *   open:PATH      read-only
 *   signal[:PID]   SIGCONT
 *   prlimit[:PID]  another process's RLIMIT_NOFILE, read and written back
 *   renice[:PID]   its nice value, the same
 * (PID: the parent by default). Returns 0 when the action went through, the
 * errno it was refused with (*failed names the call), or -EINVAL for an
 * unknown action; seccomp may end the process instead (SIGSYS).
 */
int jail_attempt(const char *action, const char **failed);

#endif
