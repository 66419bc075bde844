/*
 * mpk: the worker process's side of memory protection keys between its
 * isolates (the keys themselves are isolate/'s; docs/mpk.md).
 *
 * Internal to worker/ (and the emulated test in tests/mpk/, which drives the
 * fault path for real).
 */
#ifndef EDGENODE_WORKER_MPK_H
#define EDGENODE_WORKER_MPK_H

#include <jansson.h>

/*
 * At start, after iso_platform_init(): logs whether MPK protects this
 * process's isolates (and why not), and when it does installs the handler
 * of protection-key faults. Such a fault (SIGSEGV with SEGV_PKUERR) is
 * logged on stderr with the tenant that was running and the key that was
 * touched, reported on `report_fd` (the supervisor link) as a PROTO_EVENT
 * {"event":"mpk_fault","tenant":"...","pkey":N}, and then ends the process
 * by that same SIGSEGV: its state cannot be trusted. Both writes are
 * async-signal-safe and best effort.
 *
 * `worker_id` names the process in the log line ("worker-1"). Returns
 * {"enabled": bool, "keys": N} for PROTO_HELLO (a new reference).
 */
json_t *mpk_start(int worker_id, int report_fd);

#endif
