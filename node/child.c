/*
 * One supervised child process: spawning it with its proto channel on fd 3
 * (and the descriptors it inherits after that), watching it exit, restarting
 * it with back-off, and closing its handles. The shared worker processes,
 * the dedicated ones of cordoned tenants and the egress process are all
 * node_child: what differs between them (their command line, what their
 * frames mean, whether an exit is restarted) is their owner's, through
 * node_child_ops.
 *
 * A node_child is embedded in its owner and outlives its processes: the
 * process and pipe handles are initialised again for every spawn, only once
 * both of the previous process were closed. Back-off: NODE_BACKOFF_MIN_MS
 * doubling to NODE_BACKOFF_MAX_MS, back to the minimum once a process lived
 * NODE_STABLE_AFTER_MS.
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "node.h"

/* The old process's handles are still closing; they never take long. */
#define HANDLES_RETRY_MS 10

uint64_t node_backoff_next(uint64_t *backoff_ms, uint64_t lived_ms) {
  if (lived_ms >= NODE_STABLE_AFTER_MS || *backoff_ms == 0) *backoff_ms = NODE_BACKOFF_MIN_MS;
  uint64_t delay = *backoff_ms;
  *backoff_ms = delay * 2 > NODE_BACKOFF_MAX_MS ? NODE_BACKOFF_MAX_MS : delay * 2;
  return delay;
}

const char *node_proc_state_name(node_proc_state s) {
  switch (s) {
    case NODE_PROC_STARTING: return "starting";
    case NODE_PROC_READY: return "ready";
    case NODE_PROC_RESTARTING: return "restarting";
    case NODE_PROC_STOPPED: return "stopped";
  }
  return "unknown";
}

int node_child_init(node_child *c, uv_loop_t *loop, const node_child_ops *ops, void *data) {
  memset(c, 0, sizeof *c);
  c->loop = loop;
  c->ops = ops;
  c->data = data;
  c->state = NODE_PROC_STOPPED;
  c->backoff_ms = NODE_BACKOFF_MIN_MS;
  int rc = uv_timer_init(loop, &c->restart_timer);
  if (rc == 0) c->timer_open = 1;
  return rc;
}

void node_child_reset(node_child *c) {
  uv_timer_stop(&c->restart_timer);
  c->restarts = 0;
  c->backoff_ms = NODE_BACKOFF_MIN_MS;
  c->pid = 0;
}

/* ---- handles ---------------------------------------------------------------------- */

static void on_process_closed(uv_handle_t *h) {
  node_child *c = container_of((uv_process_t *)h, node_child, process);
  c->process_open = 0;
  c->ops->closed(c); /* may free c */
}

/* The pipe was closed by us, not through the channel (it never started). */
static void on_pipe_closed(uv_handle_t *h) {
  node_child *c = container_of((uv_pipe_t *)h, node_child, channel.pipe);
  c->channel_open = 0;
  c->ops->closed(c); /* may free c */
}

static void on_channel_close(proto_channel *ch, int reason) {
  node_child *c = ch->data;
  c->channel_open = 0;
  c->channel_started = 0;
  if (c->ops->channel_closed) c->ops->channel_closed(c, reason);
  c->ops->closed(c); /* may free c */
}

static void on_frame(proto_channel *ch, const proto_frame *f) {
  node_child *c = ch->data;
  c->ops->frame(c, f);
}

static void on_timer_closed(uv_handle_t *h) {
  node_child *c = container_of((uv_timer_t *)h, node_child, restart_timer);
  c->timer_open = 0;
  c->ops->closed(c); /* may free c */
}

void node_child_close(node_child *c) {
  uv_timer_stop(&c->restart_timer);
  if (c->timer_open && !uv_is_closing((uv_handle_t *)&c->restart_timer))
    uv_close((uv_handle_t *)&c->restart_timer, on_timer_closed);
}

int node_child_live(const node_child *c) { return c->alive || c->process_open || c->channel_open; }

int node_child_gone(const node_child *c) { return !node_child_live(c) && !c->timer_open; }

/* ---- exits and restarts --------------------------------------------------------------- */

static void on_process_exit(uv_process_t *h, int64_t status, int sig) {
  node_child *c = container_of(h, node_child, process);
  c->alive = 0;
  uv_close((uv_handle_t *)h, on_process_closed);
  if (c->channel_started) proto_channel_close(&c->channel);
  uint64_t lived_ms = (time_mono_ns() - c->started_mono_ns) / 1000000u;
  c->ops->exited(c, status, sig, lived_ms);
}

static void on_restart_timer(uv_timer_t *t) {
  node_child *c = container_of(t, node_child, restart_timer);
  if (c->state != NODE_PROC_RESTARTING) return; /* held meanwhile */
  if (c->process_open || c->channel_open) {
    uv_timer_start(&c->restart_timer, on_restart_timer, HANDLES_RETRY_MS, 0);
    return;
  }
  int counted = c->restart_counted;
  if (c->ops->spawn(c) == 0 && counted && c->ops->restarted) c->ops->restarted(c);
}

uint64_t node_child_restart(node_child *c, uint64_t lived_ms) {
  uint64_t delay = node_backoff_next(&c->backoff_ms, lived_ms);
  c->restarts++;
  c->restart_counted = 1;
  c->state = NODE_PROC_RESTARTING;
  uv_timer_start(&c->restart_timer, on_restart_timer, delay, 0);
  return delay;
}

void node_child_respawn(node_child *c) {
  c->restart_counted = 0;
  c->state = NODE_PROC_RESTARTING;
  uv_timer_start(&c->restart_timer, on_restart_timer, 0, 0);
}

void node_child_hold(node_child *c) {
  uv_timer_stop(&c->restart_timer);
  if (c->state == NODE_PROC_RESTARTING) c->state = NODE_PROC_STOPPED;
}

/* ---- spawning ------------------------------------------------------------------------- */

int node_child_spawn(node_child *c, const node_child_cmd *cmd) {
  memset(&c->channel, 0, sizeof c->channel);
  int rc = uv_pipe_init(c->loop, &c->channel.pipe, 0);
  if (rc != 0) return rc;
  uv_stdio_container_t stdio[4 + NODE_CHILD_MAX_FDS];
  stdio[0].flags = UV_IGNORE;
  stdio[1].flags = UV_INHERIT_FD;
  stdio[1].data.fd = 1;
  stdio[2].flags = UV_INHERIT_FD;
  stdio[2].data.fd = 2;
  stdio[3].flags = UV_CREATE_PIPE | UV_READABLE_PIPE | UV_WRITABLE_PIPE;
  stdio[3].data.stream = (uv_stream_t *)&c->channel.pipe;
  for (int i = 0; i < cmd->n_fds; i++) {
    stdio[4 + i].flags = cmd->fds[i] >= 0 ? UV_INHERIT_FD : UV_IGNORE;
    stdio[4 + i].data.fd = cmd->fds[i];
  }
  uv_process_options_t opts;
  memset(&opts, 0, sizeof opts);
  opts.exit_cb = on_process_exit;
  opts.file = cmd->file;
  opts.args = cmd->args;
  opts.stdio_count = 4 + cmd->n_fds;
  opts.stdio = stdio;

  c->started_mono_ns = time_mono_ns();
  c->started_at_ms = time_now_ms();
  c->state = NODE_PROC_STARTING;
  rc = uv_spawn(c->loop, &c->process, &opts);
  c->process_open = 1;
  c->channel_open = 1;
  if (rc != 0) {
    log_write(LOG_ERROR, NULL, NULL, NULL, "%s: spawn %s failed: %s", cmd->label, cmd->file,
              uv_strerror(rc));
    uv_close((uv_handle_t *)&c->process, on_process_closed);
    uv_close((uv_handle_t *)&c->channel.pipe, on_pipe_closed);
    node_child_restart(c, 0);
    return rc;
  }
  c->alive = 1;
  c->pid = c->process.pid;
  rc = proto_channel_start(&c->channel, on_frame, on_channel_close, c);
  if (rc != 0) {
    log_write(LOG_ERROR, NULL, NULL, NULL, "%s: channel start failed: %s", cmd->label,
              uv_strerror(rc));
    uv_close((uv_handle_t *)&c->channel.pipe, on_pipe_closed);
    uv_process_kill(&c->process, SIGKILL);
    return rc;
  }
  c->channel_started = 1;
  return 0;
}

int node_child_kill(node_child *c, int sig) {
  if (!c->alive) return UV_ESRCH;
  return uv_process_kill(&c->process, sig);
}

/* ---- the channel ---------------------------------------------------------------------- */

int node_child_usable(const node_child *c) { return c->channel_started && !c->channel.closing; }

int node_child_send_json(node_child *c, uint8_t type, uint32_t id, json_t *body) {
  if (!node_child_usable(c)) return UV_EPIPE;
  char *text = json_dumps(body, JSON_COMPACT);
  if (text == NULL) return UV_EINVAL;
  size_t len = strlen(text);
  int rc = proto_channel_send(&c->channel, type, id, text, len);
  /* A secret's value on its way to the egress may be in there. */
  memset(text, 0, len);
  free(text);
  return rc;
}
