/*
 * env.DB: the worker's facet (its own SQLite file), served in this process
 * by facets/. Calls are synchronous: SQLite runs on the loop thread, inside
 * the request's CPU budget, and is interrupted at its deadline.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "base.h"
#include "facets.h"
#include "proto.h"
#include "sandbox.h"

/* ---- In a fleet: each commit goes to the fleet before it is written ----
 *
 * The questions are asked in blocking frames on the supervisor's
 * replication socket (node/replica.c): a commit is in SQLite's hands, with
 * the facet's write lock held, until the answer comes. The supervisor
 * answers within facet_publish_ms; the wait here is longer only so that a
 * supervisor that stopped answering ends it. */
#define REPLICA_WAIT_MS 30000

static void replica_close(worker *w) {
  if (w->replica_fd >= 0) close(w->replica_fd);
  w->replica_fd = -1;
}

static int replica_connect(worker *w) {
  if (w->replica_fd >= 0) return 0;
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  size_t len = strlen(w->config.replica_socket);
  if (len >= sizeof addr.sun_path) return -ENAMETOOLONG;
  memcpy(addr.sun_path, w->config.replica_socket, len + 1);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
    int rc = -errno;
    close(fd);
    return rc;
  }
  w->replica_fd = fd;
  return 0;
}

static int send_all(int fd, const void *data, size_t len) {
  const uint8_t *p = data;
  while (len > 0) {
    ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

static int recv_all(int fd, void *data, size_t len, uint64_t deadline_ms) {
  uint8_t *p = data;
  while (len > 0) {
    int64_t left = (int64_t)(deadline_ms - time_mono_ns() / 1000000u);
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    if (left <= 0 || poll(&pfd, 1, (int)left) <= 0) return -1;
    ssize_t n = recv(fd, p, len, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

/* Asks one question (the payload in parts) and returns the answer's status
 * ('0' yes, '1' no, '2' forward, '3' wait: proto.h) with its text; a link
 * that failed is a no. */
static char replica_ask(worker *w, uint8_t type, const void *const *parts, const size_t *lens,
                        int n_parts, char *text, size_t text_len) {
  text[0] = '\0';
  if (replica_connect(w) != 0) {
    snprintf(text, text_len, "the node's replication link is down");
    return '1';
  }
  size_t total = 0;
  for (int i = 0; i < n_parts; i++) total += lens[i];
  uint32_t id = ++w->replica_next_id;
  uint8_t head[PROTO_HEADER_SIZE];
  int ok = total <= PROTO_MAX_PAYLOAD &&
           proto_encode_header(head, type, id, (uint32_t)total) == 0 &&
           send_all(w->replica_fd, head, sizeof head) == 0;
  for (int i = 0; ok && i < n_parts; i++) ok = send_all(w->replica_fd, parts[i], lens[i]) == 0;
  uint64_t deadline = time_mono_ns() / 1000000u + REPLICA_WAIT_MS;
  uint8_t reply[PROTO_HEADER_SIZE];
  char status = 0;
  uint32_t rlen = 0;
  if (ok && recv_all(w->replica_fd, reply, sizeof reply, deadline) == 0) {
    rlen = (uint32_t)reply[8] << 24 | (uint32_t)reply[9] << 16 | (uint32_t)reply[10] << 8 |
           (uint32_t)reply[11];
    ok = reply[0] == PROTO_MAGIC0 && reply[1] == PROTO_MAGIC1 && reply[3] == PROTO_FACET_ANSWER &&
         rlen >= 1 && rlen <= 4096 && recv_all(w->replica_fd, &status, 1, deadline) == 0;
  } else {
    ok = 0;
  }
  char got[4096];
  if (ok && rlen > 1) ok = recv_all(w->replica_fd, got, rlen - 1, deadline) == 0;
  if (!ok || status < '0' || status > '3') {
    replica_close(w);
    snprintf(text, text_len, "the node's replication link failed");
    return '1';
  }
  snprintf(text, text_len, "%.*s", (int)(rlen - 1), got);
  return status;
}

static int replica_publish(void *arg, const char *tenant, const char *facet_id, const void *rec,
                           size_t len, char *why, size_t why_len) {
  const char *id = facet_id ? facet_id : "";
  const void *parts[] = {tenant, id, rec};
  size_t lens[] = {strlen(tenant) + 1, strlen(id) + 1, len};
  return replica_ask(arg, PROTO_FACET_PUBLISH, parts, lens, 3, why, why_len) == '0' ? 0 : -1;
}

static char replica_acquire(worker *w, const char *tenant, char *text, size_t text_len) {
  const void *parts[] = {tenant};
  size_t lens[] = {strlen(tenant)};
  return replica_ask(w, PROTO_FACET_ACQUIRE, parts, lens, 1, text, text_len);
}

/* The store's question before it opens a facet: only the owner opens one. */
static int replica_may_open(void *arg, const char *tenant, char *why, size_t why_len) {
  char status = replica_acquire(arg, tenant, why, why_len);
  if (status == '0') return 0;
  if (status == '2') snprintf(why, why_len, "another node owns the facets of %s", tenant);
  return -1;
}

static int has_facet_binding(json_t *spec) {
  const char *name;
  json_t *b;
  json_object_foreach(json_object_get(spec, "bindings"), name, b) {
    const char *type = json_string_value(json_object_get(b, "type"));
    if (type && strcmp(type, "facet") == 0) return 1;
  }
  return 0;
}

facet_place facet_link_place(worker *w, tenant *t, const http_request *req, char *text,
                             size_t text_len) {
  if (w->config.replica_socket == NULL || t->facets_here || !has_facet_binding(t->spec))
    return FACET_HERE;
  char status = replica_acquire(w, t->name, text, text_len);
  if (status == '0') {
    t->facets_here = 1;
    return FACET_HERE;
  }
  if (status == '3') return FACET_WAIT;
  if (status != '2') return FACET_REFUSED;
  /* Forwarded once at most: a node that got it forwarded and does not own
   * the tenant either (ownership moved meanwhile) says so. */
  if (req != NULL && http_request_header(req, FACET_FORWARDED_HEADER) != NULL) {
    snprintf(text, text_len, "the request was forwarded here, and another node owns the "
                             "facets of %s now; try again", t->name);
    return FACET_REFUSED;
  }
  return FACET_FORWARD;
}

int facet_link_start(worker *w) {
  facet_options options = {.coalesce = 1};
  w->replica_fd = -1;
  if (w->config.replica_socket != NULL) {
    /* In a fleet a commit is durable once JetStream has it (a quorum of
     * its servers), before SQLite writes it here, and every take-over,
     * this node's own after a restart included, rebuilds the copy here
     * from the stream: the copy is a cache, and its commits need no fsync
     * of their own while the facet's write lock is held. They still
     * survive the worker process's death (the page cache holds them),
     * which is all a copy in use must. */
    options.synchronous = FACET_SYNC_NORMAL;
    options.replicate = 1;
    options.publish = replica_publish;
    options.acquire = replica_may_open;
    options.hook_arg = w;
  }
  w->facets = facet_store_new(w->config.data_dir, &options);
  if (w->facets == NULL) {
    log_error("facets unavailable: cannot create %s/facets: %s", w->config.data_dir,
              strerror(errno));
    return -1;
  }
  return 0;
}

void facet_link_stop(worker *w) {
  facet_store_free(w->facets);
  w->facets = NULL;
  replica_close(w);

}

/* SQL time counts toward the request's CPU limit like JavaScript's does.
 * Reading the thread's CPU clock is a system call, so the deadline is
 * computed once per unit of work and reused by the calls it makes. */
static __attribute__((noinline)) uint64_t cpu_deadline_new(worker *w, sandbox *l,
                                                           uint64_t token) {
  uint64_t budget_ns = (uint64_t)l->limits.cpu_ms * 1000000u;
  uint64_t used_ns = iso_worker_request_cpu_ns(l->iso, token);
  l->facet_deadline_ns = time_thread_cpu_ns() + (budget_ns > used_ns ? budget_ns - used_ns : 0);
  l->facet_deadline_token = token;
  l->facet_deadline_unit = w->sched.units_run;
  return l->facet_deadline_ns;
}

static uint64_t cpu_deadline(worker *w, sandbox *l, uint64_t token) {
  if (l->facet_deadline_token != token || l->facet_deadline_unit != w->sched.units_run)
    return cpu_deadline_new(w, l, token);
  return l->facet_deadline_ns;
}

/* A tenant's facets are in its directory; a run's named facet in "run"'s. */
static const char *facet_owner(const sandbox *l) {
  return l->tenant ? l->tenant->name : l->facet_tenant;
}

static int unavailable(iso_wire *result) {
  sandbox_call_error(result, "Error", "facets are unavailable on this node");
  return -1;
}

int facet_link_call(sandbox *l, const iso_call *call, iso_wire *result) {
  worker *w = l->w;
  if (w->facets == NULL) return unavailable(result);
  return facet_call(w->facets, facet_owner(l), l->facet_id, l->facet_limit_mb, call,
                    cpu_deadline(w, l, call->token), result);
}

/* The exec of `call` on the sandbox's facet, the target filled in here
 * (the sandbox's own, so that the call to facet_exec can be a jump). */
static inline int exec_within(worker *w, sandbox *l, const iso_call *call, uint64_t deadline_ns,
                              const iso_wire_value *args, uint32_t n_args, iso_numbers *numbers,
                              iso_wire *result) {
  facet_target *t = &l->facet_target;
  t->tenant = facet_owner(l);
  t->facet_id = l->facet_id;
  t->limit_mb = l->facet_limit_mb;
  t->token = call->token;
  t->cpu_deadline_ns = deadline_ns;
  return facet_exec(w->facets, t, args, n_args, numbers, result);
}

/* A unit of work's first exec computes its deadline (out of line). */
static __attribute__((noinline)) int exec_new_unit(worker *w, sandbox *l, const iso_call *call,
                                                   const iso_wire_value *args, uint32_t n_args,
                                                   iso_numbers *numbers, iso_wire *result) {
  return exec_within(w, l, call, cpu_deadline_new(w, l, call->token), args, n_args, numbers,
                     result);
}

/* (Hot: on every exec, and placed with the rest of its path. Every way out
 * is a jump, so that no frame of this function's stands between the host
 * call and facet_exec.) */
__attribute__((hot))
int facet_link_exec(sandbox *l, const iso_call *call, const iso_wire_value *args,
                    uint32_t n_args, iso_numbers *numbers, iso_wire *result) {
  worker *w = l->w;
  if (w->facets == NULL) return unavailable(result);
  if (l->facet_deadline_token != call->token || l->facet_deadline_unit != w->sched.units_run)
    return exec_new_unit(w, l, call, args, n_args, numbers, result);
  return exec_within(w, l, call, l->facet_deadline_ns, args, n_args, numbers, result);
}

void facet_link_request_done(worker *w, uint64_t token) {
  if (w->facets) facet_store_release(w->facets, token);
}

void facet_link_changed(worker *w, const char *tenant) {
  /* Writes waiting in the batch are committed (or fail, and so do their
   * held responses) before their connections go: closing would drop
   * them, and a held response would then go out as if they were stored. */
  gate_flush(w);
  if (w->facets) facet_store_close_tenant(w->facets, tenant);
}

/* What the isolate holds in memory may assume writes that are not
 * there: it serves nothing more, and the tenant's next request gets a
 * fresh one. */
static void reset(sandbox *sb) { sb->state = sandbox_state_after(sb->state, SANDBOX_LIMIT_HIT); }

int facet_link_gate(sandbox *sb) {
  worker *w = sb->w;
  if (sb->gate_error != NULL) return -1;
  if (w->facets == NULL || !facet_store_pending(w->facets)) return 0;
  int rc = facet_store_commit(w->facets, NULL);
  /* (facets/ has logged which facet and why.) Only this sandbox's own
   * facet's losses are its to answer for; others wait for their owner. */
  char *lost = NULL;
  if (facet_store_take_failure(w->facets, facet_owner(sb), sb->facet_id, &lost)) {
    sb->gate_error = lost;
    reset(sb);
    gate_fail_owner(w, facet_owner(sb), lost); /* its responses held in the batch too */
    return -1;
  }
  return rc > 0 ? 1 : 0;
}

/* Only the tenant's own writes go: they may be in one transaction with
 * those of its other requests of this turn, whose held responses fail. */
void facet_link_drop(sandbox *sb) {
  worker *w = sb->w;
  const char *owner = facet_owner(sb);
  if (w->facets == NULL || owner == NULL || !facet_store_pending_tenant(w->facets, owner)) return;
  facet_store_rollback_tenant(w->facets, owner);
  reset(sb);
  gate_fail_owner(w, owner, "a request of the worker was stopped in the middle of its writes, "
                            "which were rolled back with this one's");
}
