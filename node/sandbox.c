/*
 * The sandbox (jail/) of the processes the supervisor spawns: the flags a
 * worker or egress process gets to enter it, the layers each one reported
 * in its HELLO, and the check at start that the kernel grants them (under
 * --require-sandbox, a refused layer stops the node). procs.c and egress.c
 * both call it; it calls neither.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "jail.h"
#include "node.h"


size_t node_sandbox_args(const node *n, char **out) {
  size_t k = 0;
  if (n->cfg.no_sandbox) {
    out[k++] = "--no-jail";
    return k;
  }
  if (n->cfg.require_sandbox) out[k++] = "--require-sandbox";
  if (n->cfg.user) {
    out[k++] = "--jail-user";
    out[k++] = n->cfg.user;
  }
  return k;
}

void node_sandbox_parse(json_t *report, unsigned *on, unsigned *off) {
  *on = *off = 0;
  json_t *layers = json_object_get(report, "layers");
  for (int i = 0; i < JAIL_LAYERS; i++) {
    const char *state =
        json_string_value(json_object_get(json_object_get(layers, jail_layer_name(i)), "state"));
    if (state && strcmp(state, "on") == 0) *on |= 1u << i;
    if (state && strcmp(state, "off") == 0) *off |= 1u << i;
  }
}

json_t *node_sandbox_json(unsigned on, unsigned off) {
  json_t *o = json_object();
  for (int i = 0; i < JAIL_LAYERS; i++)
    json_object_set_new(o, jail_layer_name(i),
                        json_string(on >> i & 1    ? "on"
                                    : off >> i & 1 ? "off"
                                                   : "not_wanted"));
  return o;
}

const char *node_sandbox_layer(const node *n, int i, int *on) {
  if (i < 0 || i >= JAIL_LAYERS) return NULL;
  int ready = 0, all = 1;
  for (int k = 0; k < n->n_procs; k++) {
    const node_proc *p = &n->procs[k];
    if (p->child.state != NODE_PROC_READY) continue;
    ready++;
    all &= p->jail_on >> i & 1;
  }
  *on = ready > 0 && all;
  return jail_layer_name(i);
}

/* Enters a worker's jail in a throw-away child: what the kernel refuses. */
static int probe_sandbox(node *n, jail_report *r) {
  jail_config jc = {.kind = JAIL_WORKER, .new_netns = 1, .strict = 1};
  if (n->cfg.user && jail_parse_user(n->cfg.user, &jc.uid, &jc.gid) == 0) jc.drop_user = 1;
  int fds[2];
  if (pipe(fds) != 0) return -errno;
  pid_t pid = fork();
  if (pid < 0) {
    int rc = -errno;
    close(fds[0]);
    close(fds[1]);
    return rc;
  }
  if (pid == 0) {
    close(fds[0]);
    int rc = jail_enter(&jc, r);
    _exit(write(fds[1], r, sizeof *r) == (ssize_t)sizeof *r && rc == 0 ? 0 : 1);
  }
  close(fds[1]);
  ssize_t got = read(fds[0], r, sizeof *r);
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  if (got != (ssize_t)sizeof *r) return -EIO;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -EPERM;
}

/*
 * Once, before the egress and the worker processes start. With a user, the
 * data directory (0700) lets that user's group through to the directories
 * the sandbox hands it. Under --require-sandbox, a layer the kernel refuses
 * stops the node here rather than in every process it would restart.
 */
int node_sandbox_prepare(node *n, char **err) {
  static int done;
  if (done || n->cfg.no_sandbox) return 0;
  done = 1;
  uid_t uid;
  gid_t gid;
  if (n->cfg.user && geteuid() == 0 && jail_parse_user(n->cfg.user, &uid, &gid) == 0 &&
      (chown(n->data_dir, (uid_t)-1, gid) != 0 || chmod(n->data_dir, 0710) != 0)) {
    int rc = -errno;
    *err = xasprintf("--user: %s: %s", n->data_dir, strerror(errno));
    return rc;
  }
  if (!n->cfg.require_sandbox) return 0;
  jail_report r;
  int rc = probe_sandbox(n, &r);
  if (rc == 0) return 0;
  for (int i = 0; rc == -EPERM && i < JAIL_LAYERS; i++) {
    if (r.layer[i].state != JAIL_OFF || r.layer[i].err == 0) continue; /* on, or not reached */
    *err = xasprintf("--require-sandbox: the kernel refuses %s (%s)",
                     jail_layer_name((jail_layer)i), r.layer[i].detail);
    return -EPERM;
  }
  *err = xasprintf("--require-sandbox: cannot try the sandbox: %s", strerror(-rc));
  return rc;
}
