/*
 * Configuration: defaults, then the --config file, then the flags. Flags and
 * file keys are the same options (hyphens in flags are underscores in keys),
 * checked by the same code so both give the same message for a bad value.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "egress.h"
#include "fleet.h"
#include "node.h"

typedef enum opt_kind { OPT_ADDR, OPT_STRING, OPT_INT, OPT_BOOL, OPT_LEVEL, OPT_LIST, OPT_RULES } opt_kind;

typedef struct option_def {
  const char *key;  /* file key; the flag is "--" + key with '_' -> '-' */
  opt_kind kind;
  long long min, max; /* OPT_INT bounds */
} option_def;

static const option_def options[] = {
    {"listen", OPT_ADDR, 0, 0},
    {"control", OPT_ADDR, 0, 0},
    {"data", OPT_STRING, 0, 0},
    {"workers", OPT_INT, 1, NODE_CONFIG_MAX_WORKERS},
    {"config", OPT_STRING, 0, 0},
    {"dev", OPT_BOOL, 0, 0},
    {"control_token_file", OPT_STRING, 0, 0},
    {"grace_ms", OPT_INT, 0, 3600000},
    {"max_body_mb", OPT_INT, 1, 1024},
    {"header_timeout_ms", OPT_INT, 100, 600000},
    {"body_timeout_ms", OPT_INT, 100, 3600000},
    {"body_min_rate", OPT_INT, 0, 1073741824},
    {"max_connections", OPT_INT, 1, 16777216},
    {"max_connections_per_addr", OPT_INT, 0, 16777216},
    {"control_max_connections", OPT_INT, 1, 16777216},
    {"control_max_connections_per_addr", OPT_INT, 0, 16777216},
    {"worker_memory_mb", OPT_INT, 0, 1048576},
    {"isolate_memory_mb", OPT_INT, 16, 1048576},
    {"max_isolates", OPT_INT, 16, 20000},
    {"python_pool", OPT_INT, 0, 64},
    {"python_dir", OPT_STRING, 0, 0},
    {"idle_timeout_s", OPT_INT, 1, 86400},
    {"compact_idle_s", OPT_INT, 1, 86400},
    {"log_level", OPT_LEVEL, 0, 0},
    {"egress_allow_cidr", OPT_LIST, 0, 0},
    {"ca_file", OPT_LIST, 0, 0},
    {"cordon_rules", OPT_RULES, 0, 0},
    {"cordon_memory_mb", OPT_INT, 0, 1048576},
    {"cordon_nice", OPT_INT, 0, 19},
    {"cordon_idle", OPT_INT, 0, 1},
    {"cordon_suspend_crashes", OPT_INT, 0, 1000},
    {"cordon_suspend_window_s", OPT_INT, 1, 86400},
    {"max_dedicated", OPT_INT, 1, 4096},
    {"dedicated_idle_s", OPT_INT, 0, 86400},
    {"dedicated_suspend_s", OPT_INT, 1, 86400},
    {"metrics_max_tenants", OPT_INT, 0, 100000},
    {"fleet", OPT_STRING, 0, 0},
    {"node_name", OPT_STRING, 0, 0},
    {"fleet_creds", OPT_STRING, 0, 0},
    {"fleet_ca", OPT_STRING, 0, 0},
    {"fleet_key", OPT_LIST, 0, 0},
    {"facet_lease_ms", OPT_INT, 500, 600000},
    {"facet_publish_ms", OPT_INT, 100, 60000},
    {"facet_snapshot_every", OPT_INT, 2, 100000000},
    /* the sandbox of worker processes and the egress (jail/) */
    {"user", OPT_STRING, 0, 0},
    {"require_sandbox", OPT_BOOL, 0, 0},
    {"no_sandbox", OPT_BOOL, 0, 0},
};

static const char usage_text[] =
    "usage: edgenode [options]\n"
    "\n"
    "Runs an edgenode: worker processes serving tenants' JavaScript over HTTP,\n"
    "and the control API to deploy them.\n"
    "\n"
    "  --listen ADDR:PORT          ingress address (default 127.0.0.1:8080)\n"
    "  --control ADDR:PORT         control API address (default 127.0.0.1:8081)\n"
    "  --data DIR                  data directory (default ./data)\n"
    "  --workers N                 worker processes, 1..256 (default: number of cores)\n"
    "  --config FILE               JSON file with the same keys as these flags,\n"
    "                              hyphens written as underscores; flags override it\n"
    "  --dev                       deploy the example worker \"hello\" on start\n"
    "  --control-token-file F      bearer token for the control API\n"
    "                              (default DATA/control.token, created if missing)\n"
    "  --grace-ms G                drain grace period on SIGTERM (default 10000)\n"
    "  --max-body-mb M             ingress request body limit, 1..1024 (default 10)\n"
    "  --header-timeout-ms T       a request head must arrive within T ms (default 10000)\n"
    "  --body-timeout-ms T         a request body must arrive within T ms, or keep\n"
    "                              --body-min-rate over every T ms (default 30000)\n"
    "  --body-min-rate R           bytes/s a body must bring per window (default 4096;\n"
    "                              0: the body must be complete within --body-timeout-ms)\n"
    "  --max-connections N         open ingress connections per worker process\n"
    "                              (default 10000; less if RLIMIT_NOFILE is lower)\n"
    "  --max-connections-per-addr N  ... from one client address, IPv4 or IPv6 /64\n"
    "                              (default 256; 0: no cap, behind a load balancer)\n"
    "  --control-max-connections N open control API connections (default 1024; less\n"
    "                              if RLIMIT_NOFILE is lower)\n"
    "  --control-max-connections-per-addr N  ... from one address (default 64; 0: no cap)\n"
    "  --worker-memory-mb M        RSS budget of one worker process; over it the process\n"
    "                              is restarted (default 0: 75% of RAM shared by the workers)\n"
    "  --isolate-memory-mb M       heap budget of one process's isolates; over it idle\n"
    "                              isolates are evicted, least recently used first (default 1024)\n"
    "  --max-isolates N            isolates one worker process holds at most, 16..20000\n"
    "                              (default 4000; see vm.max_map_count)\n"
    "  --python-pool N             Python interpreters each worker process keeps booted\n"
    "                              for cold starts, 0..64 (default 2; 0: none)\n"
    "  --python-dir DIR            Pyodide's npm package directory (default: the build\n"
    "                              tree's pyodide/node_modules/pyodide)\n"
    "  --idle-timeout-s S          isolates idle this long are evicted (default 300)\n"
    "  --compact-idle-s S          isolates idle this long give back their garbage and\n"
    "                              young generation, once per idle period (default 5)\n"
    "  --log-level L               debug, info, warn or error (default info)\n"
    "  --egress-allow-cidr CIDR    let fetch() reach this otherwise refused range\n"
    "                              (127.0.0.1/32, fd00::/8; repeatable, adds to the file's)\n"
    "  --ca-file FILE              PEM certificates the egress trusts besides the\n"
    "                              system's (repeatable, adds to the file's)\n"
    "  --cordon-rules RULE         a cordon monitor rule, METRIC >= N [in DURATION]\n"
    "                              (repeatable, adds to the file's; default: see docs)\n"
    "  --cordon-memory-mb M        RSS budget of a cordoned tenant's dedicated process\n"
    "                              (default 0: as a shared worker process)\n"
    "  --cordon-nice N             nice value of dedicated processes, 0..19 (default 10)\n"
    "  --cordon-suspend-crashes N  crashes of a dedicated process that suspend its tenant\n"
    "                              (default 3; 0 never suspends) ...\n"
    "  --cordon-suspend-window-s S ... within S seconds (default 600)\n"
    "  --max-dedicated N           dedicated processes at most, 1..4096 (default 8); past\n"
    "                              it the tenant with the most CPU is suspended\n"
    "  --dedicated-idle-s S        a dedicated process without a request for S seconds\n"
    "                              exits until the next one (default 60; 0 never)\n"
    "  --dedicated-suspend-s S     how long a suspension for max_dedicated lasts (default 300)\n"
    "  --metrics-max-tenants N     tenants with a latency histogram of their own in /metrics\n"
    "                              (default 100); the others' requests are tenant=\"other\"\n"
    "  --fleet URLS                join a fleet: its NATS servers, nats://H:P[,nats://H:P...]\n"
    "                              (tls://H:P for TLS); without it the node is on its own\n"
    "  --node-name NAME            this node's name in the fleet (default: the host name)\n"
    "  --fleet-creds FILE          NATS credentials (.creds) for the fleet\n"
    "  --facet-lease-ms MS         a facet owner's lease in the fleet: how soon another\n"
    "                              node takes a dead owner's tenants over (default 6000)\n"
    "  --facet-publish-ms MS       how long a facet commit waits for the fleet before it\n"
    "                              fails (default 3000)\n"
    "  --facet-snapshot-every N    in a fleet, snapshot a worker's facets every N commits\n"
    "                              and trim the records they cover (default 1000)\n"
    "  --fleet-ca FILE             CA certificates for TLS to the fleet's NATS servers\n"
    "  --fleet-key FILE            the fleet's secret key (32 bytes), read by the egress only;\n"
    "                              repeat to rotate: the first seals, every one opens\n"
    "  --user UID:GID              when started as root, worker processes and the egress\n"
    "                              run as this user (the sandbox hands them their\n"
    "                              directories)\n"
    "  --require-sandbox           refuse to start unless every sandbox layer is on\n"
    "                              (default: a layer the kernel refuses is a warning)\n"
    "  --no-sandbox                run worker processes and the egress unsandboxed\n"
    "  --help                      this text\n"
    "  --version                   print the version\n"
    "\n"
    "ADDR is a numeric IPv4 or IPv6 address ([::1]:8080); port 0 picks a free port.\n"
    "Exit status: 0 after a clean shutdown, 1 on a runtime failure, 2 on bad configuration.\n";

const char *node_config_usage(void) { return usage_text; }

const char *node_log_level_name(log_level level) {
  switch (level) {
    case LOG_DEBUG: return "debug";
    case LOG_INFO: return "info";
    case LOG_WARN: return "warn";
    case LOG_ERROR: return "error";
  }
  return "info";
}

void node_config_init(node_config *c) {
  memset(c, 0, sizeof *c);
  strcpy(c->listen_host, "127.0.0.1");
  c->listen_port = 8080;
  strcpy(c->control_host, "127.0.0.1");
  c->control_port = 8081;
  c->data_dir = xstrdup("./data");
  unsigned cores = uv_available_parallelism();
  if (cores < 1) cores = 1;
  if (cores > NODE_CONFIG_MAX_WORKERS) cores = NODE_CONFIG_MAX_WORKERS;
  c->workers = (int)cores;
  c->grace_ms = 10000;
  c->max_body_mb = 10;
  c->header_timeout_ms = 10000;
  c->body_timeout_ms = 30000;
  c->body_min_rate = HTTP_DEFAULT_BODY_MIN_RATE;
  c->max_connections = 10000;
  c->max_connections_per_addr = 256;
  c->control_max_connections = 1024;
  c->control_max_connections_per_addr = 64;
  c->worker_memory_mb = 0;
  c->isolate_memory_mb = 1024;
  c->max_isolates = 4000;
  c->python_pool = 2;
  c->idle_timeout_s = 300;
  c->compact_idle_s = 5;
  c->log_level = LOG_INFO;
  c->cordon_nice = 10;
  c->cordon_idle = 1;
  c->cordon_suspend_crashes = 3;
  c->cordon_suspend_window_s = 600;
  c->max_dedicated = 8;
  c->dedicated_idle_s = 60;
  c->dedicated_suspend_s = 300;
  c->facet_lease_ms = 6000;
  c->facet_publish_ms = 3000;
  c->facet_snapshot_every = 1000;
  c->metrics_max_tenants = 100;
}

void node_config_free(node_config *c) {
  free(c->data_dir);
  free(c->config_file);
  free(c->control_token_file);
  free(c->user);
  c->data_dir = c->config_file = c->control_token_file = c->user = NULL;
  free(c->fleet);
  free(c->node_name);
  free(c->fleet_creds);
  free(c->fleet_ca);
  free(c->python_dir);
  c->python_dir = NULL;
  c->fleet = c->node_name = c->fleet_creds = c->fleet_ca = NULL;
  for (size_t i = 0; i < c->n_egress_allow_cidr; i++) free(c->egress_allow_cidr[i]);
  for (size_t i = 0; i < c->n_ca_files; i++) free(c->ca_files[i]);
  for (size_t i = 0; i < c->n_fleet_keys; i++) free(c->fleet_keys[i]);
  free(c->egress_allow_cidr);
  free(c->ca_files);
  free(c->fleet_keys);
  c->egress_allow_cidr = c->ca_files = c->fleet_keys = NULL;
  c->n_egress_allow_cidr = c->n_ca_files = c->n_fleet_keys = 0;
  free(c->cordon_rules);
  c->cordon_rules = NULL;
  c->n_cordon_rules = 0;
}

/* Appends one cordon rule; NULL or what is wrong with it (a static buffer). */
static const char *add_rule(node_config *c, const char *text) {
  static char msg[400];
  const char *why = NULL;
  cordon_rule r;
  c->cordon_rules_set = 1;
  if (c->n_cordon_rules >= CORDON_MAX_RULES) {
    snprintf(msg, sizeof msg, "at most %d rules", CORDON_MAX_RULES);
    return msg;
  }
  if (cordon_rule_parse(text, &r, &why) != 0) {
    snprintf(msg, sizeof msg, "rule %zu (\"%.80s\"): %s", c->n_cordon_rules + 1, text, why);
    return msg;
  }
  c->cordon_rules = xrealloc(c->cordon_rules, (c->n_cordon_rules + 1) * sizeof *c->cordon_rules);
  c->cordon_rules[c->n_cordon_rules++] = r;
  return NULL;
}

/* Appends one value of a repeatable option; NULL or what is wrong with it. */
static const char *add_list_item(node_config *c, const char *key, const char *s) {
  if (s[0] == '\0') return "must not be empty";
  int cidr = strcmp(key, "egress_allow_cidr") == 0;
  egress_cidr parsed;
  if (cidr && egress_cidr_parse(s, &parsed) != 0)
    return "must be an address with a prefix length, like 127.0.0.1/32 or fd00::/8 "
           "(host bits zero)";
  int fleet_key = strcmp(key, "fleet_key") == 0;
  char ***list = cidr ? &c->egress_allow_cidr : fleet_key ? &c->fleet_keys : &c->ca_files;
  size_t *n = cidr ? &c->n_egress_allow_cidr : fleet_key ? &c->n_fleet_keys : &c->n_ca_files;
  *list = xrealloc(*list, (*n + 1) * sizeof **list);
  (*list)[(*n)++] = xstrdup(s);
  return NULL;
}

/* A numeric address with a port; names are not resolved (no DNS at start). */
static int parse_addr(const char *s, char host[64], int *port) {
  if (parse_host_port(s, host, port) != 0) return -1;
  unsigned char buf[16];
  if (uv_inet_pton(AF_INET, host, buf) == 0 || uv_inet_pton(AF_INET6, host, buf) == 0) return 0;
  return -1;
}

static int parse_level(const char *s, log_level *out) {
  static const log_level levels[] = {LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR};
  for (size_t i = 0; i < ARRAY_SIZE(levels); i++) {
    if (strcmp(s, node_log_level_name(levels[i])) == 0) {
      *out = levels[i];
      return 0;
    }
  }
  return -1;
}

static int parse_ll(const char *s, long long *out) {
  char *end = NULL;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || end == s || *end != '\0') return -1;
  *out = v;
  return 0;
}

static void set_string(char **slot, const char *value) {
  free(*slot);
  *slot = xstrdup(value);
}

/* The fleet's servers: a comma-separated list of nats:// or tls:// URLs. */
static const char *set_fleet(node_config *c, const char *s) {
  char *copy = xstrdup(s), *save = NULL;
  int n = 0, bad = 0;
  for (char *url = strtok_r(copy, ",", &save); url; url = strtok_r(NULL, ",", &save)) {
    char host[64];
    int port;
    const char *rest = strncmp(url, "nats://", 7) == 0 ? url + 7
                       : strncmp(url, "tls://", 6) == 0 ? url + 6 : NULL;
    if (rest == NULL || parse_host_port(rest, host, &port) != 0 || port == 0) bad = 1;
    n++;
  }
  free(copy);
  if (n == 0 || bad)
    return "must be nats://HOST:PORT or tls://HOST:PORT URLs, separated by commas";
  set_string(&c->fleet, s);
  c->fleet_tls = strstr(s, "tls://") != NULL;
  return NULL;
}

/*
 * Stores one option. Exactly one of `text` (from a flag) and `json` (from the
 * file) is set. Returns NULL, or what is wrong with the value (a constant or
 * a static buffer: valid until the next call).
 */
static const char *set_option(node_config *c, const option_def *o, const char *text,
                              json_t *json) {
  static char msg[128];
  switch (o->kind) {
    case OPT_ADDR: {
      if (json && !json_is_string(json)) return "must be a string ADDR:PORT";
      const char *s = text ? text : json_string_value(json);
      char host[64];
      int port;
      if (parse_addr(s, host, &port) != 0)
        return "must be ADDR:PORT with a numeric IP address and a port 0..65535";
      int is_listen = strcmp(o->key, "listen") == 0;
      strcpy(is_listen ? c->listen_host : c->control_host, host);
      *(is_listen ? &c->listen_port : &c->control_port) = port;
      return NULL;
    }
    case OPT_STRING: {
      if (json && !json_is_string(json)) return "must be a string";
      const char *s = text ? text : json_string_value(json);
      if (s[0] == '\0') return "must not be empty";
      if (strcmp(o->key, "user") == 0) {
        unsigned uid, gid;
        char tail;
        if (sscanf(s, "%u:%u%c", &uid, &gid, &tail) != 2 || strspn(s, "0123456789:") != strlen(s))
          return "must be UID:GID, two numbers";
        set_string(&c->user, s);
        return NULL;
      }
      if (strcmp(o->key, "data") == 0) set_string(&c->data_dir, s);
      else if (strcmp(o->key, "config") == 0) set_string(&c->config_file, s);
      else if (strcmp(o->key, "fleet") == 0) return set_fleet(c, s);
      else if (strcmp(o->key, "node_name") == 0) {
        if (!fleet_key_valid(s) || strlen(s) > 64)
          return "must be 1..64 letters, digits, '-' or '_'";
        set_string(&c->node_name, s);
      } else if (strcmp(o->key, "fleet_creds") == 0) set_string(&c->fleet_creds, s);
      else if (strcmp(o->key, "fleet_ca") == 0) set_string(&c->fleet_ca, s);
      else if (strcmp(o->key, "python_dir") == 0) set_string(&c->python_dir, s);
      else set_string(&c->control_token_file, s);
      return NULL;
    }
    case OPT_INT: {
      long long v = 0;
      int ok = json ? json_is_integer(json) : parse_ll(text, &v) == 0;
      if (json && ok) v = json_integer_value(json);
      if (!ok || v < o->min || v > o->max) {
        snprintf(msg, sizeof msg, "must be an integer between %lld and %lld", o->min, o->max);
        return msg;
      }
      if (strcmp(o->key, "workers") == 0) c->workers = (int)v;
      else if (strcmp(o->key, "grace_ms") == 0) c->grace_ms = v;
      else if (strcmp(o->key, "header_timeout_ms") == 0) c->header_timeout_ms = v;
      else if (strcmp(o->key, "body_timeout_ms") == 0) c->body_timeout_ms = v;
      else if (strcmp(o->key, "body_min_rate") == 0) c->body_min_rate = v;
      else if (strcmp(o->key, "max_connections") == 0) c->max_connections = v;
      else if (strcmp(o->key, "max_connections_per_addr") == 0) c->max_connections_per_addr = v;
      else if (strcmp(o->key, "control_max_connections") == 0) c->control_max_connections = v;
      else if (strcmp(o->key, "control_max_connections_per_addr") == 0)
        c->control_max_connections_per_addr = v;
      else if (strcmp(o->key, "worker_memory_mb") == 0) c->worker_memory_mb = v;
      else if (strcmp(o->key, "isolate_memory_mb") == 0) c->isolate_memory_mb = v;
      else if (strcmp(o->key, "max_isolates") == 0) c->max_isolates = v;
      else if (strcmp(o->key, "python_pool") == 0) c->python_pool = v;
      else if (strcmp(o->key, "idle_timeout_s") == 0) c->idle_timeout_s = v;
      else if (strcmp(o->key, "compact_idle_s") == 0) c->compact_idle_s = v;
      else if (strcmp(o->key, "cordon_memory_mb") == 0) c->cordon_memory_mb = v;
      else if (strcmp(o->key, "cordon_nice") == 0) c->cordon_nice = (int)v;
      else if (strcmp(o->key, "cordon_idle") == 0) c->cordon_idle = (int)v;
      else if (strcmp(o->key, "cordon_suspend_crashes") == 0) c->cordon_suspend_crashes = (int)v;
      else if (strcmp(o->key, "cordon_suspend_window_s") == 0) c->cordon_suspend_window_s = v;
      else if (strcmp(o->key, "max_dedicated") == 0) c->max_dedicated = (int)v;
      else if (strcmp(o->key, "dedicated_idle_s") == 0) c->dedicated_idle_s = v;
      else if (strcmp(o->key, "dedicated_suspend_s") == 0) c->dedicated_suspend_s = v;
      else if (strcmp(o->key, "facet_lease_ms") == 0) c->facet_lease_ms = v;
      else if (strcmp(o->key, "facet_publish_ms") == 0) c->facet_publish_ms = v;
      else if (strcmp(o->key, "facet_snapshot_every") == 0) c->facet_snapshot_every = v;
      else if (strcmp(o->key, "metrics_max_tenants") == 0) c->metrics_max_tenants = v;
      else c->max_body_mb = (int)v;
      return NULL;
    }
    case OPT_BOOL:
      if (json && !json_is_boolean(json)) return "must be true or false";
      if (strcmp(o->key, "require_sandbox") == 0) c->require_sandbox = json ? json_is_true(json) : 1;
      else if (strcmp(o->key, "no_sandbox") == 0) c->no_sandbox = json ? json_is_true(json) : 1;
      else c->dev = json ? json_is_true(json) : 1;
      return NULL;
    case OPT_LEVEL: {
      if (json && !json_is_string(json)) return "must be one of debug, info, warn, error";
      if (parse_level(text ? text : json_string_value(json), &c->log_level) != 0)
        return "must be one of debug, info, warn, error";
      return NULL;
    }
    case OPT_LIST: {
      if (text) return add_list_item(c, o->key, text);
      if (json_is_string(json)) return add_list_item(c, o->key, json_string_value(json));
      if (!json_is_array(json)) return "must be a string or an array of strings";
      size_t i;
      json_t *item;
      json_array_foreach(json, i, item) {
        if (!json_is_string(item)) return "must be a string or an array of strings";
        const char *why = add_list_item(c, o->key, json_string_value(item));
        if (why) return why;
      }
      return NULL;
    }
    case OPT_RULES: {
      if (text) return add_rule(c, text);
      if (!json_is_array(json)) return "must be an array of rules such as \"cpu_limit_hits >= 3 in 60s\"";
      c->cordon_rules_set = 1; /* [] turns the monitor off */
      size_t i;
      json_t *item;
      json_array_foreach(json, i, item) {
        if (!json_is_string(item)) return "every rule must be a string such as \"cpu_limit_hits >= 3 in 60s\"";
        const char *why = add_rule(c, json_string_value(item));
        if (why) return why;
      }
      return NULL;
    }
  }
  return "unsupported option";
}

static const option_def *find_key(const char *key) {
  for (size_t i = 0; i < ARRAY_SIZE(options); i++)
    if (strcmp(options[i].key, key) == 0) return &options[i];
  return NULL;
}

/* "--grace-ms" or "--grace-ms=5" -> the option; *value points after '=' or is NULL. */
static const option_def *find_flag(const char *arg, const char **value) {
  *value = NULL;
  if (strncmp(arg, "--", 2) != 0) return NULL;
  const char *name = arg + 2;
  size_t len = strcspn(name, "=");
  for (size_t i = 0; i < ARRAY_SIZE(options); i++) {
    const char *key = options[i].key;
    if (strlen(key) != len) continue;
    size_t j = 0;
    for (; j < len; j++) {
      char k = key[j] == '_' ? '-' : key[j];
      if (name[j] != k) break;
    }
    if (j == len) {
      if (name[len] == '=') *value = name + len + 1;
      return &options[i];
    }
  }
  return NULL;
}

static char *flag_name(const option_def *o) {
  char *s = xasprintf("--%s", o->key);
  for (char *p = s; *p; p++)
    if (*p == '_') *p = '-';
  return s;
}

int node_config_apply_json(node_config *c, const char *text, size_t len, const char *origin,
                           char **err) {
  json_error_t jerr;
  json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
  if (root == NULL) {
    *err = xasprintf("edgenode: config: %s:%d:%d: %s", origin, jerr.line, jerr.column, jerr.text);
    return NODE_CONFIG_ERROR;
  }
  if (!json_is_object(root)) {
    *err = xasprintf("edgenode: config: %s: must be a JSON object", origin);
    json_decref(root);
    return NODE_CONFIG_ERROR;
  }
  const char *key;
  json_t *value;
  json_object_foreach(root, key, value) {
    const option_def *o = find_key(key);
    if (o == NULL || strcmp(key, "config") == 0) {
      *err = xasprintf("edgenode: config: \"%s\": unknown key", key);
      json_decref(root);
      return NODE_CONFIG_ERROR;
    }
    const char *why = set_option(c, o, NULL, value);
    if (why) {
      *err = xasprintf("edgenode: config: \"%s\": %s", key, why);
      json_decref(root);
      return NODE_CONFIG_ERROR;
    }
  }
  json_decref(root);
  return NODE_CONFIG_OK;
}

static int load_file(node_config *c, const char *path, char **err) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) {
    *err = xasprintf("edgenode: config: %s: %s", path, strerror(errno));
    return NODE_CONFIG_ERROR;
  }
  size_t cap = 4096, len = 0;
  char *buf = xmalloc(cap);
  size_t n;
  while ((n = fread(buf + len, 1, cap - len, f)) > 0) {
    len += n;
    if (len == cap) {
      if (cap >= 16u * 1024 * 1024) break; /* a config file is small */
      cap *= 2;
      buf = xrealloc(buf, cap);
    }
  }
  int failed = ferror(f);
  fclose(f);
  if (failed) {
    free(buf);
    *err = xasprintf("edgenode: config: %s: read error", path);
    return NODE_CONFIG_ERROR;
  }
  int rc = node_config_apply_json(c, buf, len, path, err);
  free(buf);
  return rc;
}

/*
 * One pass over argv. With apply == 0 only --help, --version and --config are
 * acted upon (and the syntax checked); with apply == 1 every flag is stored.
 */
static int scan_args(node_config *c, int argc, char **argv, int apply, char **err) {
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) return NODE_CONFIG_HELP;
    if (strcmp(arg, "--version") == 0) return NODE_CONFIG_VERSION;
    const char *value;
    const option_def *o = find_flag(arg, &value);
    if (o == NULL) {
      *err = xasprintf("edgenode: %s: unknown option (see --help)", arg);
      return NODE_CONFIG_ERROR;
    }
    char *flag = flag_name(o);
    if (o->kind == OPT_BOOL) {
      if (value) {
        *err = xasprintf("edgenode: %s: takes no value", flag);
        free(flag);
        return NODE_CONFIG_ERROR;
      }
    } else if (value == NULL) {
      if (i + 1 >= argc) {
        *err = xasprintf("edgenode: %s: missing value", flag);
        free(flag);
        return NODE_CONFIG_ERROR;
      }
      value = argv[++i];
    }
    int is_config = strcmp(o->key, "config") == 0;
    if (apply != is_config) { /* --config in the first pass, the rest in the second */
      const char *why = set_option(c, o, value ? value : "", NULL);
      if (why) {
        *err = xasprintf("edgenode: %s: %s", flag, why);
        free(flag);
        return NODE_CONFIG_ERROR;
      }
    }
    free(flag);
  }
  return NODE_CONFIG_OK;
}

int node_config_parse(node_config *c, int argc, char **argv, char **err) {
  *err = NULL;
  int rc = scan_args(c, argc, argv, 0, err);
  if (rc != NODE_CONFIG_OK) return rc;
  if (c->config_file) {
    rc = load_file(c, c->config_file, err);
    if (rc != NODE_CONFIG_OK) return rc;
  }
  return scan_args(c, argc, argv, 1, err);
}
