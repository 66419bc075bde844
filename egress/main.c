/*
 * edgenode-egress: started by the supervisor with a proto channel on
 * --ipc-fd. It says HELLO, waits for the full set of policies, and only then
 * listens for worker processes, so that no fetch is ever judged against a
 * policy table that is still being filled. It exits when the supervisor's
 * channel closes, and on SIGTERM / SIGINT.
 */
#include <errno.h>
#include <getopt.h>
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/mem.h>

#include "egress_int.h"
#include "jail.h"

static egress self;

/* The sandbox (jail/), entered once start-up is done. */
static struct {
  int user, strict, off;
  uid_t uid;
  gid_t gid;
  jail_report report;
} jail_args;

egress *egress_self(void) { return &self; }

static void usage(void) {
  fprintf(stderr,
          "usage: edgenode-egress --ipc-fd FD --data DIR [--socket PATH]\n"
          "                       [--allow-cidr CIDR]... [--ca-file FILE]... [--fleet-key FILE]...\n"
          "                       [--connect-timeout-ms N] [--timeout-ms N]\n"
          "                       [--max-response-bytes N] [--log-level debug|info|warn|error]\n"
          "                       [--jail-user UID:GID] [--require-sandbox] [--no-jail]\n"
          "Started by edgenode; not meant to be run by hand.\n");
}

static void own_push(egress_config *c, const egress_cidr *addr, int port) {
  c->own = xrealloc(c->own, (c->n_own + 1) * sizeof *c->own);
  c->own[c->n_own].addr = *addr;
  c->own[c->n_own].port = port;
  c->n_own++;
}

/* --own-addr HOST:PORT: one of the node's listening addresses. An
 * unspecified host (0.0.0.0, ::) listens on every address of the machine:
 * loopback and each interface's address then count as its own. */
static int add_own(egress_config *c, const char *arg) {
  char host[64];
  int port;
  egress_cidr addr;
  if (parse_host_port(arg, host, &port) != 0 || port <= 0) return -1;
  if (strcmp(host, "0.0.0.0") != 0 && strcmp(host, "::") != 0) {
    if (egress_cidr_parse(host, &addr) != 0) return -1;
    own_push(c, &addr, port);
    return 0;
  }
  if (egress_cidr_parse("127.0.0.0/8", &addr) == 0) own_push(c, &addr, port);
  if (egress_cidr_parse("::1/128", &addr) == 0) own_push(c, &addr, port);
  struct ifaddrs *list = NULL;
  if (getifaddrs(&list) != 0) return 0;
  for (struct ifaddrs *i = list; i; i = i->ifa_next) {
    if (i->ifa_addr == NULL) continue;
    char ip[INET6_ADDRSTRLEN];
    int family = i->ifa_addr->sa_family;
    if (family == AF_INET)
      inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, ip, sizeof ip);
    else if (family == AF_INET6)
      inet_ntop(AF_INET6, &((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr, ip, sizeof ip);
    else
      continue;
    if (egress_cidr_parse(ip, &addr) == 0) own_push(c, &addr, port);
  }
  freeifaddrs(list);
  return 0;
}

static int parse_args(int argc, char **argv, egress_config *c, log_level *level) {
  static const struct option opts[] = {
      {"ipc-fd", required_argument, NULL, 'p'},
      {"data", required_argument, NULL, 'd'},
      {"socket", required_argument, NULL, 's'},
      {"allow-cidr", required_argument, NULL, 'a'},
      {"own-addr", required_argument, NULL, 'o'},
      {"ca-file", required_argument, NULL, 'c'},
      {"fleet-key", required_argument, NULL, 'K'},
      {"connect-timeout-ms", required_argument, NULL, 'C'},
      {"timeout-ms", required_argument, NULL, 'T'},
      {"max-response-bytes", required_argument, NULL, 'M'},
      {"log-level", required_argument, NULL, 'v'},
      {"jail-user", required_argument, NULL, 'U'},
      {"require-sandbox", no_argument, NULL, 'S'},
      {"no-jail", no_argument, NULL, 'N'},
      {NULL, 0, NULL, 0},
  };
  c->ipc_fd = -1;
  c->connect_timeout_ms = EGRESS_DEFAULT_CONNECT_TIMEOUT_MS;
  c->timeout_ms = EGRESS_DEFAULT_TIMEOUT_MS;
  c->max_response_bytes = EGRESS_DEFAULT_MAX_RESPONSE_BYTES;
  c->allow = xcalloc((size_t)argc, sizeof *c->allow);
  c->ca_files = xcalloc((size_t)argc, sizeof *c->ca_files);
  c->fleet_key_files = xcalloc((size_t)argc, sizeof *c->fleet_key_files);
  int opt;
  uint64_t v;
  while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (opt) {
      case 'p':
        if (parse_u64(optarg, 0, 65535, &v)) return -1;
        c->ipc_fd = (int)v;
        break;
      case 'd': c->data_dir = optarg; break;
      case 's':
        free(c->socket_path);
        c->socket_path = xstrdup(optarg);
        break;
      case 'a':
        if (egress_cidr_parse(optarg, &c->allow[c->n_allow]) != 0) {
          fprintf(stderr, "edgenode-egress: --allow-cidr %s: not an address/prefix\n", optarg);
          return -1;
        }
        c->n_allow++;
        break;
      case 'o':
        if (add_own(c, optarg) != 0) {
          fprintf(stderr, "edgenode-egress: --own-addr %s: not ADDR:PORT\n", optarg);
          return -1;
        }
        break;
      case 'c': c->ca_files[c->n_ca_files++] = optarg; break;
      case 'K': c->fleet_key_files[c->n_fleet_key_files++] = optarg; break;
      case 'C':
        if (parse_u64(optarg, 1, 600000, &v)) return -1;
        c->connect_timeout_ms = (uint32_t)v;
        break;
      case 'T':
        if (parse_u64(optarg, 1, 600000, &v)) return -1;
        c->timeout_ms = (uint32_t)v;
        break;
      case 'M':
        if (parse_u64(optarg, 1, (uint64_t)1 << 40, &v)) return -1;
        c->max_response_bytes = v;
        break;
      case 'v':
        if (strcmp(optarg, "debug") == 0) *level = LOG_DEBUG;
        else if (strcmp(optarg, "info") == 0) *level = LOG_INFO;
        else if (strcmp(optarg, "warn") == 0) *level = LOG_WARN;
        else if (strcmp(optarg, "error") == 0) *level = LOG_ERROR;
        else return -1;
        break;
      case 'U':
        if (jail_parse_user(optarg, &jail_args.uid, &jail_args.gid)) return -1;
        jail_args.user = 1;
        break;
      case 'S': jail_args.strict = 1; break;
      case 'N': jail_args.off = 1; break;
      default: return -1;
    }
  }
  if (optind != argc || c->ipc_fd < 0 || c->data_dir == NULL) return -1;
  return 0;
}

/* ---- policies ---- */

static unsigned bucket_of(const char *name) {
  uint32_t h = 2166136261u; /* FNV-1a */
  for (const unsigned char *p = (const unsigned char *)name; *p; p++) h = (h ^ *p) * 16777619u;
  return h % POLICY_BUCKETS;
}

const egress_policy *egress_policy_of(egress *e, const char *worker) {
  for (policy_entry *p = e->policies[bucket_of(worker)]; p; p = p->next)
    if (strcmp(p->name, worker) == 0) return p->policy;
  return NULL;
}

/* Replaces (or with NULL removes) a worker's policy. */
static void policy_set(egress *e, const char *worker, egress_policy *policy) {
  policy_entry **pp = &e->policies[bucket_of(worker)];
  for (; *pp; pp = &(*pp)->next) {
    if (strcmp((*pp)->name, worker) == 0) {
      policy_entry *old = *pp;
      egress_policy_free(old->policy);
      if (policy) {
        old->policy = policy;
      } else {
        *pp = old->next;
        free(old->name);
        free(old);
      }
      return;
    }
  }
  if (policy == NULL) return;
  policy_entry *p = xcalloc(1, sizeof *p);
  p->name = xstrdup(worker);
  p->policy = policy;
  p->next = e->policies[bucket_of(worker)];
  e->policies[bucket_of(worker)] = p;
}

static void policies_clear(egress *e) {
  for (size_t i = 0; i < POLICY_BUCKETS; i++) {
    while (e->policies[i]) {
      policy_entry *p = e->policies[i];
      e->policies[i] = p->next;
      egress_policy_free(p->policy);
      free(p->name);
      free(p);
    }
  }
}

static void stop(egress *e, const char *why);

static void reply(egress *e, uint8_t type, uint32_t id, json_t *body);

/* ---- grants and the fleet's secrets ---- */

int egress_secret_granted(egress *e, const char *name, size_t len, const char *worker) {
  char key[EGRESS_SECRET_NAME_MAX + 1];
  /* A run has no grants of its own: it borrows its "as" worker's, if any. */
  if (worker && strncmp(worker, "run:", 4) == 0)
    worker = json_string_value(json_object_get(e->run_as, worker));
  if (len >= sizeof key || worker == NULL) return 0;
  memcpy(key, name, len);
  key[len] = '\0';
  size_t i;
  json_t *w;
  json_array_foreach(json_object_get(e->grants, key), i, w)
    if (json_is_string(w) && strcmp(json_string_value(w), worker) == 0) return 1;
  return 0;
}

const char *egress_secret_value(egress *e, const char *name, size_t len) {
  return secrets_get(e->fleet ? e->fleet_secrets : e->secrets, name, len);
}

/* {"NAME": [workers] | null}: null (or no array) grants it to no worker. */
static void apply_grants(egress *e, json_t *grants, int replace) {
  if (replace) json_object_clear(e->grants);
  const char *name;
  json_t *workers;
  json_object_foreach(grants, name, workers) {
    if (json_is_array(workers)) json_object_set(e->grants, name, workers);
    else json_object_del(e->grants, name);
  }
}

static void forget_fleet_secret(egress *e, const char *name) {
  char *err = NULL;
  if (secrets_delete(e->fleet_secrets, name, &err) == -1) free(err);
}

/* {"NAME": {"key", "nonce", "sealed"} | null}: values sealed with the fleet key. */
static void apply_fleet_secrets(egress *e, json_t *secrets, int replace) {
  if (replace) {
    secrets_close(e->fleet_secrets);
    e->fleet_secrets = secrets_new_in_memory();
  }
  const char *name;
  json_t *sealed;
  json_object_foreach(secrets, name, sealed) {
    char *value = NULL, *err = NULL;
    size_t len = 0;
    const char *why = NULL;
    if (!json_is_object(sealed)) {
      forget_fleet_secret(e, name);
    } else if (fleet_key_open(e->fleet_keys, e->n_fleet_keys, name, sealed, &value, &len, &why) != 0) {
      char extra[128];
      snprintf(extra, sizeof extra, "{\"secret\":\"%s\"}", name);
      log_write(LOG_ERROR, NULL, NULL, extra, "the fleet's secret %s cannot be used here: %s", name,
                why);
      forget_fleet_secret(e, name);
    } else {
      if (secrets_put(e->fleet_secrets, name, value, len, time_now_ms(), &err) < 0) free(err);
      OPENSSL_cleanse(value, len);
      free(value);
    }
  }
}

const char *egress_client_bound(const client *cl) {
  char pid[16];
  if (cl->peer_pid <= 0 || cl->e->bound == NULL) return NULL;
  snprintf(pid, sizeof pid, "%d", cl->peer_pid);
  return json_string_value(json_object_get(cl->e->bound, pid));
}

/* "processes": {"<pid>": tenant or null}: which processes are dedicated to
 * which tenant (null: that process is gone). */
static void apply_bindings(egress *e, json_t *processes, int replace) {
  if (e->bound == NULL || replace) {
    json_decref(e->bound);
    e->bound = json_object();
  }
  const char *pid;
  json_t *tenant;
  json_object_foreach(processes, pid, tenant) {
    if (json_is_string(tenant)) json_object_set(e->bound, pid, tenant);
    else json_object_del(e->bound, pid);
  }
}

static void on_policy(egress *e, uint32_t id, json_t *body) {
  json_t *workers = json_object_get(body, "workers");
  json_t *grants = json_object_get(body, "grants");
  json_t *fleet_secrets = json_object_get(body, "fleet_secrets");
  json_t *processes = json_object_get(body, "processes");
  int replace = json_is_true(json_object_get(body, "replace"));
  if (replace || json_is_object(processes)) apply_bindings(e, processes, replace);
  if (!json_is_object(workers) && !json_is_object(grants) && !json_is_object(fleet_secrets)) {
    if (!json_is_object(processes))
      log_warn("policy message without \"workers\", \"grants\" or \"fleet_secrets\": ignored");
    return;
  }
  if (replace) e->fleet = json_is_true(json_object_get(body, "fleet"));
  if (replace || json_is_object(grants)) apply_grants(e, grants, replace);
  if (replace || json_is_object(fleet_secrets)) apply_fleet_secrets(e, fleet_secrets, replace);
  if (replace) policies_clear(e);
  if (replace) json_object_clear(e->run_as);
  const char *name;
  json_t *rules;
  json_t *run_as = json_object_get(body, "run_as");
  json_object_foreach(run_as, name, rules) {
    if (json_is_string(rules) && strncmp(name, "run:", 4) == 0)
      json_object_set(e->run_as, name, rules);
  }
  json_object_foreach(workers, name, rules) {
    /* A run's policy goes when it ends, and its borrowed grants with it. */
    if (!json_is_array(rules)) json_object_del(e->run_as, name);
    egress_policy *p = NULL;
    if (json_is_array(rules) && json_array_size(rules) > 0) {
      char *err = NULL;
      p = egress_policy_parse(rules, &err);
      if (p == NULL) {
        /* The supervisor validated these; deny everything rather than guess. */
        log_write(LOG_ERROR, name, NULL, NULL, "invalid egress policy, denying all: %s", err);
        free(err);
      }
    }
    policy_set(e, name, p);
  }
  if (replace && !e->listening) {
    char *err = NULL;
    if (server_listen(e, &err) != 0) {
      log_error("%s", err);
      free(err);
      stop(e, "cannot listen");
      exit(1);
    }
    char extra[512];
    snprintf(extra, sizeof extra, "{\"pid\":%d,\"policies\":%zu}", (int)getpid(),
             json_object_size(workers));
    log_write(LOG_INFO, NULL, NULL, extra, "egress ready");
  }
  if (id != 0) reply(e, PROTO_EGRESS_REPLY, id, json_pack("{s:b}", "ready", e->listening));
}

/* ---- secrets ---- */

static void reply(egress *e, uint8_t type, uint32_t id, json_t *body) {
  char *text = json_dumps(body, JSON_COMPACT);
  json_decref(body);
  if (text == NULL) abort();
  if (proto_channel_send(&e->supervisor, type, id, text, strlen(text)) != 0)
    log_warn("could not reply to the supervisor");
  free(text);
}

static void reply_error(egress *e, uint32_t id, int status, const char *message) {
  reply(e, PROTO_ERROR, id, json_pack("{s:i, s:s}", "status", status, "error", message));
}

/* In a fleet a value is stored by every node once the fleet has it: here it
 * is only sealed, and the supervisor writes the ciphertext to the fleet. */
static void seal_for_fleet(egress *e, uint32_t id, const char *name, json_t *value) {
  if (e->n_fleet_keys == 0) {
    reply_error(e, id, 503,
                "this node has no fleet key: in a fleet, secrets need --fleet-key FILE on every "
                "node (docs/fleet.md)");
    return;
  }
  json_t *sealed = fleet_key_seal(&e->fleet_keys[0], name, json_string_value(value),
                                  json_string_length(value));
  if (sealed == NULL) {
    reply_error(e, id, 500, "sealing the secret failed");
    return;
  }
  reply(e, PROTO_EGRESS_REPLY, id, json_pack("{s:s, s:o}", "name", name, "sealed", sealed));
}

static void on_secret_put(egress *e, uint32_t id, json_t *body) {
  const char *name = json_string_value(json_object_get(body, "name"));
  json_t *value = json_object_get(body, "value");
  if (name == NULL || !egress_secret_name_valid(name, strlen(name))) {
    reply_error(e, id, 400, "invalid secret name");
    return;
  }
  if (!json_is_string(value) ||
      !egress_secret_value_valid(json_string_value(value), json_string_length(value))) {
    reply_error(e, id, 400, "invalid secret value");
    return;
  }
  if (json_is_true(json_object_get(body, "fleet"))) {
    seal_for_fleet(e, id, name, value);
    return;
  }
  char *err = NULL;
  int64_t now = time_now_ms();
  int rc = secrets_put(e->secrets, name, json_string_value(value), json_string_length(value),
                       now, &err);
  if (rc < 0) {
    log_error("storing secret %s failed: %s", name, err);
    reply_error(e, id, 500, "storing the secret failed");
    free(err);
    return;
  }
  char extra[128];
  snprintf(extra, sizeof extra, "{\"secret\":\"%s\"}", name);
  log_write(LOG_INFO, NULL, NULL, extra, rc == 1 ? "secret created" : "secret updated");
  reply(e, PROTO_EGRESS_REPLY, id,
        json_pack("{s:s, s:I, s:b}", "name", name, "updated_at", (json_int_t)now, "created", rc));
}

static void on_secret_delete(egress *e, uint32_t id, json_t *body) {
  const char *name = json_string_value(json_object_get(body, "name"));
  if (name == NULL || !egress_secret_name_valid(name, strlen(name))) {
    reply_error(e, id, 400, "invalid secret name");
    return;
  }
  char *err = NULL;
  int rc = secrets_delete(e->secrets, name, &err);
  if (rc == -ENOENT) {
    reply_error(e, id, 404, "unknown secret");
    return;
  }
  if (rc != 0) {
    log_error("deleting secret %s failed: %s", name, err);
    reply_error(e, id, 500, "deleting the secret failed");
    free(err);
    return;
  }
  char extra[128];
  snprintf(extra, sizeof extra, "{\"secret\":\"%s\"}", name);
  log_write(LOG_INFO, NULL, NULL, extra, "secret deleted");
  reply(e, PROTO_EGRESS_REPLY, id, json_pack("{s:s}", "deleted", name));
}

/* ---- the supervisor link ---- */

static void on_supervisor_frame(proto_channel *ch, const proto_frame *frame) {
  egress *e = ch->data;
  json_t *body = frame->length ? json_loadb((const char *)frame->payload, frame->length, 0, NULL)
                               : json_object();
  if (!json_is_object(body) && frame->type != PROTO_PING) {
    log_warn("malformed %s from the supervisor", proto_type_name(frame->type));
    if (frame->id) reply_error(e, frame->id, 400, "malformed message");
    json_decref(body);
    return;
  }
  switch (frame->type) {
    case PROTO_EGRESS_POLICY: on_policy(e, frame->id, body); break;
    case PROTO_SECRET_PUT: on_secret_put(e, frame->id, body); break;
    case PROTO_SECRET_DELETE: on_secret_delete(e, frame->id, body); break;
    case PROTO_SECRET_LIST:
      reply(e, PROTO_EGRESS_REPLY, frame->id,
            json_pack("{s:o}", "secrets", secrets_list(e->secrets)));
      break;
    case PROTO_PING: proto_channel_send(ch, PROTO_PONG, frame->id, NULL, 0); break;
    default: log_debug("ignoring %s from the supervisor", proto_type_name(frame->type));
  }
  json_decref(body);
}

static void stop(egress *e, const char *why) {
  if (e->stopping) return;
  e->stopping = 1;
  log_info("stopping (%s): %zu fetches in flight", why, e->n_fetches);
  server_close(e);
  conn_pool_close(e);
  if (!e->supervisor.closing) proto_channel_close(&e->supervisor);
  uv_stop(e->loop);
}

static void on_supervisor_closed(proto_channel *ch, int reason) {
  egress *e = ch->data;
  (void)reason;
  stop(e, "supervisor gone");
}

static void on_signal(uv_signal_t *s, int signum) {
  stop(s->data, signum == SIGTERM ? "SIGTERM" : "SIGINT");
}

static int prepare_dir(const char *data_dir, char **dir, char **err) {
  *dir = xasprintf("%s/egress", data_dir);
  if (mkdir(*dir, 0700) != 0 && errno != EEXIST) {
    *err = xasprintf("%s: %s", *dir, strerror(errno));
    return -1;
  }
  struct stat st;
  if (stat(*dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
    *err = xasprintf("%s: not a directory", *dir);
    return -1;
  }
  return 0;
}

/* Secrets open, CA bundles read, the supervisor link up: lock the process
 * in. It keeps the network (it is the way out) and its own directory. */
static int enter_jail(egress *e, const char *dir, char **err) {
  jail_report *r = &jail_args.report;
  if (jail_args.off) {
    for (int i = 0; i < JAIL_LAYERS; i++) r->layer[i].state = JAIL_NOT_WANTED;
    log_warn("sandbox off (--no-jail)");
    return 0;
  }
  char *socket_dir = xstrdup(e->cfg.socket_path);
  char *slash = strrchr(socket_dir, '/');
  if (slash) *slash = '\0';
  const char *writable[] = {dir, slash ? socket_dir : ".", NULL};
  jail_config jc = {.kind = JAIL_EGRESS, .writable = writable, .drop_user = jail_args.user,
                    .uid = jail_args.uid, .gid = jail_args.gid, .strict = jail_args.strict};
  int rc = jail_enter(&jc, r);
  free(socket_dir);
  for (int i = 0; i < JAIL_LAYERS; i++)
    if (r->layer[i].state == JAIL_OFF)
      log_warn("sandbox: %s is off: %s", jail_layer_name((jail_layer)i), r->layer[i].detail);
  if (rc != 0 && jail_args.strict) {
    *err = xasprintf("sandbox incomplete under --require-sandbox: %s", strerror(-rc));
    return -1;
  }
  return 0;
}

static int start(egress *e, char **err) {
  char *dir = NULL;
  if (prepare_dir(e->cfg.data_dir, &dir, err) != 0) {
    free(dir);
    return -1;
  }
  if (e->cfg.socket_path == NULL) e->cfg.socket_path = xasprintf("%s/egress.sock", dir);
  int rc = secrets_open(dir, &e->secrets, err);
  if (rc == 0)
    rc = fleet_keys_load(e->cfg.fleet_key_files, e->cfg.n_fleet_key_files, &e->fleet_keys, err);
  if (rc != 0) {
    free(dir);
    return -1;
  }
  e->n_fleet_keys = e->cfg.n_fleet_key_files;
  e->fleet_secrets = secrets_new_in_memory();
  e->grants = json_object();
  e->run_as = json_object();
  e->ssl_ctx = tls_ctx_new(&e->cfg, err);
  if (e->ssl_ctx == NULL) {
    free(dir);
    return -1;
  }
  rc = proto_channel_open_fd(&e->supervisor, e->loop, e->cfg.ipc_fd, on_supervisor_frame,
                             on_supervisor_closed, e);
  if (rc != 0) {
    *err = xasprintf("cannot open the supervisor link on fd %d: %s", e->cfg.ipc_fd,
                     uv_strerror(rc));
    free(dir);
    return -1;
  }
  uv_signal_init(e->loop, &e->sigterm);
  uv_signal_init(e->loop, &e->sigint);
  e->sigterm.data = e->sigint.data = e;
  uv_signal_start(&e->sigterm, on_signal, SIGTERM);
  uv_signal_start(&e->sigint, on_signal, SIGINT);
  rc = enter_jail(e, dir, err);
  free(dir);
  if (rc != 0) return -1;
  json_t *hello = json_pack("{s:i, s:s}", "pid", (int)getpid(), "process", "egress");
  json_object_set_new(hello, "jail", jail_report_json(&jail_args.report));
  char *text = json_dumps(hello, JSON_COMPACT);
  json_decref(hello);
  rc = proto_channel_send(&e->supervisor, PROTO_HELLO, 0, text, strlen(text));
  free(text);
  if (rc != 0) {
    *err = xasprintf("cannot greet the supervisor: %s", uv_strerror(rc));
    return -1;
  }
  return 0;
}

int main(int argc, char **argv) {
  log_level level = LOG_INFO;
  egress *e = &self;
  if (parse_args(argc, argv, &e->cfg, &level) != 0) {
    usage();
    return 2;
  }
  log_init("egress", level);
  e->log_debug = level == LOG_DEBUG;
  signal(SIGPIPE, SIG_IGN);
  e->loop = uv_default_loop();
  char *err = NULL;
  if (start(e, &err) != 0) {
    log_error("%s", err ? err : "start-up failed");
    free(err);
    return 1;
  }
  uv_run(e->loop, UV_RUN_DEFAULT);
  policies_clear(e);
  secrets_close(e->secrets);
  secrets_close(e->fleet_secrets);
  fleet_keys_free(e->fleet_keys, e->n_fleet_keys);
  json_decref(e->grants);
  json_decref(e->bound);
  json_decref(e->run_as);
  tls_ctx_free(e->ssl_ctx);
  log_info("exiting");
  return 0;
}
