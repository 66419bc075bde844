/*
 * edgectl's command line: the table of commands with their usage and help,
 * the options (anywhere on the line, "--opt value" or "--opt=value", "--"
 * ends them) and usage errors. A usage error prints what is wrong and where
 * to read more, one line each, never the whole help: the help of one
 * command is `edgectl help NAME` (or `edgectl NAME --help`), the overview
 * `edgectl help`.
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "cli.h"

static const cli_command commands[] = {
    {"deploy",
     "deploy [NAME] [--config FILE] [OPTIONS]\n"
     "deploy NAME FILE... [--main FILE] [--spec FILE] [OPTIONS]\n"
     "deploy NAME --spec FILE [OPTIONS]",
     "deploy (or replace) a worker from a project folder or module files",
     "Deploys worker NAME, or replaces it, with PUT /v1/workers/NAME.\n"
     "\n"
     "Without FILEs it deploys the project of ./edgenode.json (or --config FILE):\n"
     "\"name\", \"main\", modules by glob, \"vars\", \"d1_databases\", \"bindings\",\n"
     "\"limits\", \"egress\", \"routes\", as in wrangler's config where the two map\n"
     "(see docs/control-api.md). NAME, when given, overrides \"name\".\n"
     "\n"
     "With FILEs, each FILE is a module named by its path relative to the directory\n"
     "of the main module (--main, read too when not among the FILEs, or else the\n"
     "first FILE), so that imports resolve on the node as on disk.\n"
     "\n"
     "  --config FILE    the project config (default ./edgenode.json)\n"
     "  --main FILE      the module whose default export handles requests\n"
     "  --spec FILE      a JSON object with the rest of the deploy: \"bindings\",\n"
     "                   \"limits\", \"egress\"; with \"modules\" (and \"main_module\") it\n"
     "                   is the whole deploy and takes no FILEs\n"
     "  --var NAME=VALUE a text binding env.NAME (repeatable)\n"
     "  --facet NAME     env.NAME is the worker's SQLite facet (repeatable)\n"
     "  --egress FILE    the egress rules: a JSON array, or {\"rules\": [...]}\n"
     "  --allow URL      one more egress rule allowing URL and below (repeatable)\n"
     "  --cpu-ms N       CPU limit per request (1..30000, default 50)\n"
     "  --memory-mb N    heap limit (8..4096, default 128)\n"
     "  --dry-run        print the spec JSON that would be sent, send nothing\n"
     "  --replace        deploy even when it drops bindings or egress rules the\n"
     "                   worker has\n"
     "\n"
     "The options override the config or spec. A deploy that lacks a binding the\n"
     "worker has, or gives egress rules without one the worker has, is refused:\n"
     "edgectl reads the worker first. Give them, or --replace. Limits not given\n"
     "take their defaults, also on a redeploy; egress rules not given stay.",
     CLI_OPT_MAIN | CLI_OPT_CPU_MS | CLI_OPT_MEMORY_MB | CLI_OPT_SPEC | CLI_OPT_REPLACE |
         CLI_OPT_CONFIG | CLI_OPT_DRY_RUN | CLI_OPT_VAR | CLI_OPT_FACET | CLI_OPT_EGRESS |
         CLI_OPT_ALLOW,
     cli_cmd_deploy},
    {"list", "list", "list deployed workers",
     "A table of the deployed workers: name, version, main module, last deploy.\n"
     "--json: the answer of GET /v1/workers.",
     0, cli_cmd_list},
    {"show", "show NAME", "show one worker",
     "The worker's version, limits, bindings, times and modules (by size).\n"
     "--json: the answer of GET /v1/workers/NAME.",
     0, cli_cmd_show},
    {"delete", "delete NAME", "delete a worker (its facet stays)",
     "DELETE /v1/workers/NAME. Its facet stays on disk for a worker deployed again\n"
     "under the same name.",
     0, cli_cmd_delete},
    {"run", "run FILE... [--main FILE] [--input JSON] [--cpu-ms N] [--memory-mb N]",
     "run modules once on the node and print the result",
     "POST /v1/run: the modules (named as for deploy) run once in a fresh isolate,\n"
     "nothing is stored. A response prints as HTTP <status>, its headers, a blank\n"
     "line and its body.\n"
     "\n"
     "  --main FILE      the main module\n"
     "  --input JSON     call the module's run(input, env) with this and print the result\n"
     "  --cpu-ms N, --memory-mb N   limits, as for deploy",
     CLI_OPT_MAIN | CLI_OPT_CPU_MS | CLI_OPT_MEMORY_MB | CLI_OPT_INPUT, cli_cmd_run},
    {"node", "node", "the node's version, uptime and processes",
     "The answer of GET /v1/node: version, uptime, state, addresses, and a table of\n"
     "the worker processes.",
     0, cli_cmd_node},
    {"fleet", "fleet", "the fleet's nodes: state, version, heartbeat, lag, load",
     "GET /v1/fleet on a node started with --fleet: this node's link to NATS (and why\n"
     "it cannot connect, if so), then a table of every node's last heartbeat (state,\n"
     "version, addresses, age of the heartbeat, how many records it is behind the\n"
     "most current node, and its load: requests in flight, requests per second and\n"
     "CPU cores busy running tenants' code, over the last 10 s).\n"
     "--json: the answer as it is.",
     0, cli_cmd_fleet},
    {"tenants", "tenants", "per-tenant statistics: state, requests, errors, CPU, heap",
     "A table of GET /v1/tenants, one row per deployed worker.", 0, cli_cmd_tenants},
    {"tenant", "tenant NAME", "one tenant's statistics, state and limits",
     "The answer of GET /v1/tenants/NAME as fields.", 0, cli_cmd_tenant},
    {"cordon", "cordon NAME [--reason TEXT]", "move a tenant into a worker process of its own",
     "POST /v1/tenants/NAME/cordon: the tenant runs in a dedicated worker process\n"
     "until uncordoned, also across restarts.\n"
     "\n"
     "  --reason TEXT    why, kept with the cordon and shown by `edgectl tenant`",
     CLI_OPT_REASON, cli_cmd_cordon},
    {"uncordon", "uncordon NAME", "return a tenant to the shared worker processes",
     "POST /v1/tenants/NAME/uncordon: ends a cordon or a suspension.", 0, cli_cmd_uncordon},
    {"drain", "drain [--no-wait]", "drain the node and wait until it is drained",
     "POST /v1/node/drain: no new connections, requests in flight finish. Then waits\n"
     "until the node says drained (failing after its grace period plus 15 s).\n"
     "\n"
     "  --no-wait        return once the drain has started",
     CLI_OPT_NO_WAIT, cli_cmd_drain},
    {"undrain", "undrain", "undo a finished drain: the node serves again",
     "POST /v1/node/undrain: the ingress listens again and the worker processes start;\n"
     "/readyz turns 200. Refused while a drain is still under way.",
     0, cli_cmd_undrain},
    {"versions", "versions NAME", "the versions the node keeps of a worker",
     "GET /v1/workers/NAME/versions as a table, newest first: version, when, size,\n"
     "hash, and which version a rollback restored. --json: the answer as it is.",
     0, cli_cmd_versions},
    {"rollback", "rollback NAME VERSION", "make a kept version the current one again",
     "POST /v1/workers/NAME/rollback: deploys VERSION's code and spec as a new version\n"
     "(versions only go up), compiled and checked as a deploy is.",
     0, cli_cmd_rollback},
    {"traffic", "traffic NAME [VERSION=PERCENT ...]", "split a worker's requests over versions",
     "GET /v1/workers/NAME/traffic, or with shares PUT it: `edgectl traffic NAME 5=90\n"
     "4=10` sends 90% of the keys to version 5 and 10% to version 4 (at most 4 kept\n"
     "versions, percentages adding up to 100). A request's key is its\n"
     "X-Edgenode-Traffic-Key header, else the client's address; one key always gets\n"
     "the same version. A deploy or a rollback ends the split.",
     0, cli_cmd_traffic},
    {"events", "events [TENANT] [--limit N]", "recent deploys, deletes, crashes, restarts, drains",
     "GET /v1/events as a table, newest first: deploys, deletes, crashes, restarts,\n"
     "drains, reloads, cordons; with TENANT only that worker's.\n"
     "\n"
     "  --limit N        how many (default 100)",
     CLI_OPT_LIMIT, cli_cmd_events},
    {"top", "top", "live per-tenant view, refreshed every second",
     "Requests, errors and CPU per second of every tenant, busiest first, refreshed\n"
     "every second; q (or Ctrl-C) quits. When the output is not a terminal it prints\n"
     "one snapshot, with rates over one second.",
     0, cli_cmd_top},
    {"secret",
     "secret set NAME [--worker W]...\nsecret grant NAME WORKER\nsecret revoke NAME WORKER\n"
     "secret list\nsecret delete NAME",
     "store, grant, list or delete secrets for egress header injection",
     "set: stores a secret that egress rules inject into outbound requests; the value\n"
     "is read from standard input (one trailing newline dropped), so that it never\n"
     "shows in a process list or a shell history. With --worker (repeatable) the\n"
     "secret is granted to exactly those workers; without, its grants stay as they\n"
     "were (a new secret: granted to no worker, so no rule can inject it).\n"
     "grant / revoke: lets one more worker's egress rules inject the secret, or no\n"
     "longer (a revoked secret is not injected even by rules deployed before).\n"
     "list: the secrets' names, the workers they are granted to and when they were\n"
     "set (values are never shown).\n"
     "delete: removes one, with its grants.\n"
     "\n"
     "  --worker W       set: grant the secret to worker W (repeatable)",
     CLI_OPT_WORKER, cli_cmd_secret},
    {"facet", "facet NAME\nfacet backup NAME FILE", "a worker's facet, or a backup of it",
     "facet NAME: the worker's SQLite facet: size, pages, tables and their rows.\n"
     "facet backup NAME FILE: writes a consistent copy of the live facet to FILE,\n"
     "taken while the worker keeps writing.",
     0, cli_cmd_facet},
    {"egress", "egress NAME\negress set NAME FILE\negress clear NAME",
     "a worker's outbound allow-list: show, replace, clear",
     "egress NAME: the worker's egress rules as a table (the headers a rule injects\n"
     "are named, their values are not shown).\n"
     "egress set NAME FILE: replaces the rules with those of FILE, a JSON array of\n"
     "rules or {\"rules\": [...]} (see docs/control-api.md); they apply from the\n"
     "next request on, without a redeploy.\n"
     "egress clear NAME: removes every rule: the worker makes no outbound requests.",
     0, cli_cmd_egress},
    {"tail", "tail NAME [--status S] [--sample R] [--json]",
     "stream a worker's console output, exceptions and requests",
     "GET /v1/workers/NAME/tail: one line per console message, uncaught exception\n"
     "and request (method, URL, status, CPU and wall time, outcome) as they happen,\n"
     "until Ctrl-C. With --json, the node's JSON lines as they come.\n"
     "A reader that falls behind loses lines: a line says how many.\n"
     "\n"
     "  --status S       only requests (and exceptions) with status S: ok, error,\n"
     "                   1xx..5xx or a code; comma-separated for several\n"
     "  --sample R       only a share R (0 < R <= 1) of the requests",
     CLI_OPT_STATUS | CLI_OPT_SAMPLE, cli_cmd_tail},
};

static const char global_usage[] = "edgectl [OPTIONS] COMMAND [ARGS...]";

static const char global_options[] =
    "options (anywhere on the line, --opt VALUE or --opt=VALUE; -- ends them):\n"
    "  --node URL          the control API, http:// or https:// (env EDGENODE_NODE,\n"
    "                      default " CLI_DEFAULT_NODE ")\n"
    "  --token-file FILE   bearer token file (env EDGENODE_TOKEN_FILE,\n"
    "                      default " CLI_DEFAULT_TOKEN_FILE ")\n"
    "  --cacert FILE       CA certificates (PEM) to verify an https:// node with\n"
    "                      (env EDGENODE_CACERT, default the system's)\n"
    "  --insecure          do not verify the node's TLS certificate\n"
    "  --timeout SECONDS   give up when the node sends nothing for this long\n"
    "                      (default 120)\n"
    "  --json              JSON for machines instead of tables and text\n"
    "  -h, --help          help; after a command, that command's\n"
    "  --version           edgectl's version\n"
    "\n"
    "Proxies come from http_proxy, https_proxy, all_proxy and no_proxy, as for curl.\n";

/* What a usage error shows: the command being parsed, once it is known. */
static const cli_command *usage_command;

const cli_command *cli_command_find(const char *name) {
  for (size_t i = 0; i < ARRAY_SIZE(commands); i++) {
    if (strcmp(commands[i].name, name) == 0) return &commands[i];
  }
  return NULL;
}

/* "usage: edgectl LINE" for each synopsis line, the later ones aligned. */
static void print_usage_lines(FILE *f, const cli_command *c) {
  const char *s = c ? c->synopsis : global_usage;
  if (c == NULL) {
    fprintf(f, "usage: %s\n", s);
    return;
  }
  for (int first = 1; *s; first = 0) {
    size_t n = strcspn(s, "\n");
    fprintf(f, "%s edgectl %.*s\n", first ? "usage:" : "      ", (int)n, s);
    s += n;
    if (*s == '\n') s++;
  }
}

static void print_overview(FILE *f) {
  print_usage_lines(f, NULL);
  fputs("\nThe command-line client of edgenode's control API.\n\ncommands:\n", f);
  for (size_t i = 0; i < ARRAY_SIZE(commands); i++)
    fprintf(f, "  %-9s %s\n", commands[i].name, commands[i].summary);
  fprintf(f, "  %-9s %s\n\n", "help", "help for a command: edgectl help COMMAND");
  fputs(global_options, f);
}

static void print_command_help(FILE *f, const cli_command *c) {
  print_usage_lines(f, c);
  fprintf(f, "\n%s\n\n", c->help);
  fputs("Every command also takes --node, --token-file, --cacert, --insecure, --timeout and\n"
        "--json: see `edgectl help`.\n",
        f);
}

void cli_usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("edgectl: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  if (usage_command)
    fprintf(stderr, "see 'edgectl help %s'\n", usage_command->name);
  else
    fputs("see 'edgectl help'\n", stderr);
  exit(CLI_EXIT_USAGE);
}

void cli_expect_operands(const cli_options *o, int min, int max) {
  const char *name = o->command ? o->command->name : "edgectl";
  if (o->nargs < min) cli_usage_error("%s: missing operand", name);
  if (max >= 0 && o->nargs > max) cli_usage_error("%s: unexpected operand '%s'", name, o->args[max]);
}

const char *cli_worker_name(const cli_options *o, int i) { return cli_worker_name_of(o->args[i]); }

const char *cli_worker_name_of(const char *name) {
  if (!worker_name_valid(name, strlen(name)))
    cli_usage_error("invalid worker name '%s' (lowercase letters, digits and '-', "
                    "not starting with '-', at most 63)",
                    name);
  return name;
}

/* ---- options ---- */

typedef enum opt_id {
  OPT_NODE,
  OPT_TOKEN_FILE,
  OPT_CACERT,
  OPT_INSECURE,
  OPT_TIMEOUT,
  OPT_JSON,
  OPT_HELP,
  OPT_VERSION,
  OPT_MAIN,
  OPT_CPU_MS,
  OPT_MEMORY_MB,
  OPT_INPUT,
  OPT_NO_WAIT,
  OPT_LIMIT,
  OPT_REASON,
  OPT_SPEC,
  OPT_REPLACE,
  OPT_WORKER,
  OPT_STATUS,
  OPT_SAMPLE,
  OPT_CONFIG,
  OPT_DRY_RUN,
  OPT_VAR,
  OPT_FACET,
  OPT_EGRESS,
  OPT_ALLOW,
} opt_id;

static const struct {
  const char *name;
  opt_id id;
  int valued;   /* takes a value */
  unsigned bit; /* CLI_OPT_ bit; 0 for the options of every command */
} option_defs[] = {
    {"--node", OPT_NODE, 1, 0},
    {"--token-file", OPT_TOKEN_FILE, 1, 0},
    {"--cacert", OPT_CACERT, 1, 0},
    {"--insecure", OPT_INSECURE, 0, 0},
    {"--timeout", OPT_TIMEOUT, 1, 0},
    {"--json", OPT_JSON, 0, 0},
    {"--help", OPT_HELP, 0, 0},
    {"-h", OPT_HELP, 0, 0},
    {"--version", OPT_VERSION, 0, 0},
    {"--main", OPT_MAIN, 1, CLI_OPT_MAIN},
    {"--cpu-ms", OPT_CPU_MS, 1, CLI_OPT_CPU_MS},
    {"--memory-mb", OPT_MEMORY_MB, 1, CLI_OPT_MEMORY_MB},
    {"--input", OPT_INPUT, 1, CLI_OPT_INPUT},
    {"--no-wait", OPT_NO_WAIT, 0, CLI_OPT_NO_WAIT},
    {"--limit", OPT_LIMIT, 1, CLI_OPT_LIMIT},
    {"--reason", OPT_REASON, 1, CLI_OPT_REASON},
    {"--spec", OPT_SPEC, 1, CLI_OPT_SPEC},
    {"--replace", OPT_REPLACE, 0, CLI_OPT_REPLACE},
    {"--worker", OPT_WORKER, 1, CLI_OPT_WORKER},
    {"--status", OPT_STATUS, 1, CLI_OPT_STATUS},
    {"--sample", OPT_SAMPLE, 1, CLI_OPT_SAMPLE},
    {"--config", OPT_CONFIG, 1, CLI_OPT_CONFIG},
    {"--dry-run", OPT_DRY_RUN, 0, CLI_OPT_DRY_RUN},
    {"--var", OPT_VAR, 1, CLI_OPT_VAR},
    {"--facet", OPT_FACET, 1, CLI_OPT_FACET},
    {"--egress", OPT_EGRESS, 1, CLI_OPT_EGRESS},
    {"--allow", OPT_ALLOW, 1, CLI_OPT_ALLOW},
};

/* A positive decimal integer option value, or a usage error. */
static long parse_positive(const char *opt, const char *s) {
  char *end = NULL;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end != '\0' || v <= 0 || v > INT_MAX)
    cli_usage_error("%s needs a positive integer, not '%s'", opt, s);
  return v;
}

static const char *env_or(const char *name, const char *fallback) {
  const char *v = getenv(name);
  return v != NULL && v[0] != '\0' ? v : fallback;
}

/* Takes one operand: the first names the command, the rest are its. */
static void add_operand(cli_options *o, const char **command_name, const char *a) {
  if (*command_name == NULL) {
    *command_name = a;
    usage_command = cli_command_find(a);
    return;
  }
  o->args[o->nargs++] = a;
}

void cli_args_parse(int argc, char **argv, cli_options *o) {
  memset(o, 0, sizeof *o);
  o->timeout_s = CLI_DEFAULT_TIMEOUT_S;
  o->args = xcalloc((size_t)argc + 1, sizeof *o->args);
  cli_list *lists[] = {&o->workers, &o->vars, &o->facets, &o->allows};
  for (size_t k = 0; k < ARRAY_SIZE(lists); k++)
    lists[k]->items = xcalloc((size_t)argc + 1, sizeof *lists[k]->items);
  const char *command_name = NULL;
  int only_operands = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (only_operands || a[0] != '-' || a[1] == '\0') {
      add_operand(o, &command_name, a);
      continue;
    }
    if (strcmp(a, "--") == 0) {
      only_operands = 1;
      continue;
    }
    const char *eq = a[1] == '-' ? strchr(a, '=') : NULL;
    size_t nlen = eq ? (size_t)(eq - a) : strlen(a);
    const char *value = eq ? eq + 1 : NULL;
    size_t k = 0;
    while (k < ARRAY_SIZE(option_defs) &&
           !(strlen(option_defs[k].name) == nlen && strncmp(a, option_defs[k].name, nlen) == 0))
      k++;
    if (k == ARRAY_SIZE(option_defs)) cli_usage_error("unknown option '%.*s'", (int)nlen, a);
    const char *name = option_defs[k].name;
    if (option_defs[k].valued && value == NULL) {
      if (i + 1 >= argc) cli_usage_error("%s needs a value", name);
      value = argv[++i];
    } else if (!option_defs[k].valued && value != NULL) {
      cli_usage_error("%s takes no value", name);
    }
    o->given |= option_defs[k].bit;
    switch (option_defs[k].id) {
      case OPT_NODE: o->node = value; break;
      case OPT_TOKEN_FILE: o->token_file = value; break;
      case OPT_CACERT: o->cacert = value; break;
      case OPT_INSECURE: o->insecure = 1; break;
      case OPT_TIMEOUT: o->timeout_s = parse_positive(name, value); break;
      case OPT_JSON: o->json = 1; break;
      case OPT_HELP: o->help = 1; break;
      case OPT_VERSION:
        printf("edgectl %s\n", EDGENODE_VERSION);
        exit(CLI_EXIT_OK);
      case OPT_MAIN: o->main_file = value; break;
      case OPT_CPU_MS: o->cpu_ms = parse_positive(name, value); break;
      case OPT_MEMORY_MB: o->memory_mb = parse_positive(name, value); break;
      case OPT_INPUT: o->input = value; break;
      case OPT_NO_WAIT: o->no_wait = 1; break;
      case OPT_LIMIT: o->limit = parse_positive(name, value); break;
      case OPT_REASON: o->reason = value; break;
      case OPT_SPEC: o->spec_file = value; break;
      case OPT_REPLACE: o->replace = 1; break;
      case OPT_WORKER: o->workers.items[o->workers.n++] = value; break;
      case OPT_CONFIG: o->config_file = value; break;
      case OPT_DRY_RUN: o->dry_run = 1; break;
      case OPT_VAR: o->vars.items[o->vars.n++] = value; break;
      case OPT_FACET: o->facets.items[o->facets.n++] = value; break;
      case OPT_EGRESS: o->egress_file = value; break;
      case OPT_ALLOW: o->allows.items[o->allows.n++] = value; break;
      case OPT_STATUS: o->status = value; break;
      case OPT_SAMPLE: o->sample = value; break;
    }
  }
  if (o->node == NULL) o->node = env_or("EDGENODE_NODE", CLI_DEFAULT_NODE);
  if (o->token_file == NULL) o->token_file = env_or("EDGENODE_TOKEN_FILE", CLI_DEFAULT_TOKEN_FILE);
  if (o->cacert == NULL) o->cacert = env_or("EDGENODE_CACERT", NULL);

  if (command_name == NULL) {
    if (o->help) {
      print_overview(stdout);
      exit(CLI_EXIT_OK);
    }
    cli_usage_error("no command given");
  }
  if (strcmp(command_name, "help") == 0) {
    if (o->nargs == 0) {
      print_overview(stdout);
      exit(CLI_EXIT_OK);
    }
    const cli_command *c = cli_command_find(o->args[0]);
    if (c == NULL || o->nargs > 1) {
      usage_command = NULL;
      if (c == NULL) cli_usage_error("help: unknown command '%s'", o->args[0]);
      cli_usage_error("help: one command at a time");
    }
    print_command_help(stdout, c);
    exit(CLI_EXIT_OK);
  }
  o->command = cli_command_find(command_name);
  if (o->command == NULL) cli_usage_error("unknown command '%s'", command_name);
  if (o->help) {
    print_command_help(stdout, o->command);
    exit(CLI_EXIT_OK);
  }
  unsigned extra = o->given & ~o->command->options;
  for (size_t k = 0; extra != 0 && k < ARRAY_SIZE(option_defs); k++) {
    if (option_defs[k].bit & extra)
      cli_usage_error("%s does not take %s", o->command->name, option_defs[k].name);
  }
}

void cli_args_free(cli_options *o) {
  free(o->args);
  free(o->workers.items);
  free(o->vars.items);
  free(o->facets.items);
  free(o->allows.items);
  o->args = NULL;
  o->nargs = 0;
}
