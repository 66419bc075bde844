/*
 * Internal to jail/: the landlock and seccomp halves of jail_enter, each
 * filling its own line of the report.
 */
#ifndef EDGENODE_JAIL_INTERNAL_H
#define EDGENODE_JAIL_INTERNAL_H

#include "jail.h"

/* Sets a layer's line: state, errno and a printf-style detail. */
void jail__set(jail_report *r, jail_layer layer, jail_state state, int err, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/*
 * Builds the landlock ruleset for the configuration. Returns its descriptor
 * (to be applied by every thread with landlock_restrict_self), or a negative
 * errno with the report's line saying why; *abi gets the kernel's ABI (0
 * without landlock).
 */
int jail__landlock_ruleset(const jail_config *c, jail_report *r, int *abi);

/* What every jailed process may still read, and write (NULL-terminated):
 * landlock's rules and the worker's view are made from the same lists. */
extern const char *const jail__common_readable[];
extern const char *const jail__common_writable[];

/*
 * In the main thread's new mount namespace: builds the worker's view (a
 * tmpfs root with the configuration's paths bound at their names, view.c)
 * and pivots into it. Returns 0 with the current directory's absolute path
 * in cwd (for the other threads), or -errno with the process where it was;
 * the report's mntns line says which.
 */
int jail__view_enter(const jail_config *c, jail_report *r, char *cwd, size_t cwd_size);

/* landlock_restrict_self(fd): 0 or -errno. Async-signal-safe. */
int jail__landlock_restrict(int ruleset_fd);

/*
 * Loads the seccomp filter on every thread of the process (TSYNC). Returns 0
 * or a negative errno, the report's line filled in either way.
 */
int jail__seccomp_load(const jail_config *c, jail_report *r);

#endif
