/*
 * edgectl's internal interface. The calls go one way:
 *
 *   main.c ──▶ args.c      the command line: options, the command table, usage
 *     │
 *     └──────▶ commands.c  one function per command ──▶ client.c  the control API over libcurl
 *                                                  ├──▶ print.c   tables and fields for people
 *                                                  └──▶ project.c module files, edgenode.json
 *                                                         └──▶ toml.c  edgenode.toml as JSON
 *
 * Exit statuses: 0 success, 1 the request failed (the node answered with an
 * error status, could not be reached, or a file could not be read), 2 usage.
 */
#ifndef EDGENODE_CLI_H
#define EDGENODE_CLI_H

#include <jansson.h>
#include <stddef.h>

#define CLI_DEFAULT_NODE "http://127.0.0.1:8081"
#define CLI_DEFAULT_TOKEN_FILE "./data/control.token"
/* Deploys compile the code on the node, so an answer may take a while. */
#define CLI_DEFAULT_TIMEOUT_S 120

enum { CLI_EXIT_OK = 0, CLI_EXIT_FAILED = 1, CLI_EXIT_USAGE = 2 };

/* The options only some commands take, as bits: a command lists its own. */
enum {
  CLI_OPT_MAIN = 1u << 0,
  CLI_OPT_CPU_MS = 1u << 1,
  CLI_OPT_MEMORY_MB = 1u << 2,
  CLI_OPT_INPUT = 1u << 3,
  CLI_OPT_NO_WAIT = 1u << 4,
  CLI_OPT_LIMIT = 1u << 5,
  CLI_OPT_REASON = 1u << 6,
  CLI_OPT_SPEC = 1u << 7,
  CLI_OPT_REPLACE = 1u << 8,
  CLI_OPT_WORKER = 1u << 9,
  CLI_OPT_CONFIG = 1u << 10,
  CLI_OPT_DRY_RUN = 1u << 11,
  CLI_OPT_VAR = 1u << 12,
  CLI_OPT_FACET = 1u << 13,
  CLI_OPT_EGRESS = 1u << 14,
  CLI_OPT_ALLOW = 1u << 15,
  CLI_OPT_STATUS = 1u << 16,
  CLI_OPT_SAMPLE = 1u << 17,
};

/* A repeatable option's values, in the order given (the strings are argv's). */
typedef struct cli_list {
  const char **items; /* owned array */
  int n;
} cli_list;

typedef struct cli_command cli_command;

typedef struct cli_options {
  /* for every command */
  const char *node;       /* --node, $EDGENODE_NODE or the default */
  const char *token_file; /* --token-file, $EDGENODE_TOKEN_FILE or the default */
  const char *cacert;     /* --cacert, $EDGENODE_CACERT; NULL: the system's CAs */
  int insecure;           /* --insecure: no TLS certificate check */
  long timeout_s;         /* --timeout: longest silence from the node */
  int json;               /* --json: JSON for machines */
  int help;               /* -h, --help */
  /* for some commands; `given` holds a CLI_OPT_ bit for each one given */
  unsigned given;
  const char *main_file; /* --main */
  long cpu_ms;           /* --cpu-ms */
  long memory_mb;        /* --memory-mb */
  const char *input;     /* --input, JSON text */
  int no_wait;           /* --no-wait */
  long limit;            /* --limit */
  const char *reason;    /* --reason */
  const char *spec_file; /* --spec */
  int replace;           /* --replace */
  cli_list workers;       /* --worker W */
  const char *config_file; /* --config */
  int dry_run;            /* --dry-run */
  cli_list vars;          /* --var NAME=VALUE */
  cli_list facets;        /* --facet NAME */
  const char *egress_file; /* --egress */
  cli_list allows;        /* --allow URL */
  const char *status;    /* --status (tail) */
  const char *sample;    /* --sample (tail) */
  /* the command's operands, after its name */
  const cli_command *command; /* NULL when none was named */
  const char **args;          /* owned (the strings are argv's) */
  int nargs;
} cli_options;

struct cli_command {
  const char *name;
  const char *synopsis; /* "edgectl " + each line is a usage line */
  const char *summary;  /* one line, for the overview */
  const char *help;     /* what `edgectl help NAME` adds below the usage */
  unsigned options;     /* the CLI_OPT_ bits it takes */
  int (*run)(const cli_options *o);
};

/* ---- args.c ---- */

/*
 * Parses the whole command line into *o: options anywhere, "--" ends them,
 * the first operand names the command. Exits with usage (2) on a bad option
 * or an option the command does not take, and prints help (exit 0) for
 * --help, `help` and --version.
 */
void cli_args_parse(int argc, char **argv, cli_options *o);
void cli_args_free(cli_options *o);

/* The command called `name`, or NULL. */
const cli_command *cli_command_find(const char *name);

/*
 * A usage error: the message and "see 'edgectl help CMD'" for the command
 * being parsed (or 'edgectl help' when none is named yet), on stderr; exit 2.
 */
__attribute__((noreturn, format(printf, 1, 2))) void cli_usage_error(const char *fmt, ...);

/* The command's operands: between min and max (-1: no maximum), or a usage error. */
void cli_expect_operands(const cli_options *o, int min, int max);

/* Operand i as a worker name, or a usage error naming the rule. */
const char *cli_worker_name(const cli_options *o, int i);
/* name, or a usage error when it cannot be a worker's name. */
const char *cli_worker_name_of(const char *name);

/* ---- main.c ---- */

/* "edgectl: <message>" on stderr, exit 1. */
__attribute__((noreturn, format(printf, 1, 2))) void cli_fail(const char *fmt, ...);

/* ---- client.c ---- */

typedef struct cli_client cli_client;

typedef struct cli_response {
  long status; /* the last answer's, after any redirects */
  char *body;  /* owned, NUL-terminated; may hold NULs before body_len */
  size_t body_len;
  int left_origin; /* a redirect led to another origin: the token was not sent there */
  char *url;       /* owned: where the answer came from */
} cli_response;

/*
 * A client of the control API at o->node with the token of o->token_file.
 * A malformed URL is a usage error; an unreadable token file fails (exit 1).
 */
cli_client *cli_client_new(const cli_options *o);
void cli_client_free(cli_client *c);

/*
 * One request: `path` (with its query) below the node's URL, `body` JSON
 * text or NULL. Redirects are followed; the token goes only to the node's
 * own origin. Returns 0 with *r filled for any HTTP status, or -1 when no
 * answer came, with cli_client_error() saying why.
 */
int cli_client_request(cli_client *c, const char *method, const char *path, const char *body,
                       cli_response *r);
const char *cli_client_error(const cli_client *c);

/* A GET whose 2xx body is a stream of lines (a tail): each line, without its
 * newline and NUL-terminated, goes to fn as it arrives; no timeout applies
 * to silence. Returns as cli_client_request (a 2xx: when the stream ended),
 * with an error status's body in *r. */
typedef void (*cli_line_fn)(void *arg, const char *line, size_t len);
int cli_client_stream(cli_client *c, const char *path, cli_line_fn fn, void *arg,
                      cli_response *r);

void cli_response_free(cli_response *r);

/* Reads a whole regular file (at most `max` bytes and one more, so that a
 * caller sees it is too large; 0: no limit), NUL-terminated. Returns NULL
 * with errno set (EISDIR for a directory, EINVAL for another non-file). */
char *cli_read_file(const char *path, size_t max, size_t *len);

/* A JSON file's value; an unreadable file or bad JSON fails (exit 1) with file:line:column. */
json_t *cli_read_json(const char *file);

/* The body as JSON, or NULL when it is empty or not JSON. New reference. */
json_t *cli_response_json(const cli_response *r);

/* ---- print.c ---- */

/* The body as indented JSON (keys in the node's order), or as it is when not JSON. */
void cli_print_json_body(const cli_response *r);
void cli_print_json(const json_t *j);

/* Fields "key: value", nested objects indented, arrays of objects as tables. */
void cli_print_object(const json_t *obj, int indent);

/* A scalar for people: strings bare, *_at epoch numbers as ISO 8601, null as "-". */
void cli_print_scalar(const char *key, const json_t *v);

/* 1536000 -> "1.5 MiB". Owned by the caller. */
char *cli_format_bytes(double bytes);

/* A table: left-aligned text columns, right-aligned numeric ones. */
typedef struct cli_table {
  int ncols;
  const char *const *heads;
  const int *right; /* per column: 1 = numbers */
  char **cells;     /* row-major, ncols per row, owned */
  size_t nrows;
} cli_table;

/* Adds a row of ncols strings; the table takes them. */
void cli_table_add(cli_table *t, char **row);
/* Prints the table at `indent` and frees its cells. */
void cli_table_print(cli_table *t, int indent);

double cli_jnum(const json_t *obj, const char *key);
/* obj[key] = value, taking the reference; aborts when out of memory. */
void cli_jset(json_t *obj, const char *key, json_t *value);
const char *cli_jstr(const json_t *obj, const char *key, const char *fallback);

/* ---- project.c ---- */

/*
 * Sets "main_module" and "modules" {name: text} in `body` from the files. A
 * module's name is its path relative to the directory of the main module
 * (main_file, read too when not among the files, or else the first file), so
 * that relative imports between them resolve on the node as they do on
 * disk. A file outside that directory could only be named with "..", which
 * no import can reach: it is a usage error.
 */
void cli_add_modules(json_t *body, const char *main_file, const char *const *files, int nfiles);

/* A project folder's deploy, from its edgenode.json. */
typedef struct cli_project {
  char *file;     /* the config read; owned */
  char *name;     /* its "name", or NULL; owned */
  json_t *body;   /* the PUT /v1/workers body: modules, and bindings, limits, egress if given */
  json_t *routes; /* array of route patterns for this worker, or NULL */
} cli_project;

/*
 * Reads config_file (TOML when it ends in .toml, else JSON), or else
 * ./edgenode.json or ./edgenode.toml. Returns 1 with *p filled, 0 when
 * config_file is NULL and there is neither. A bad
 * config (or a module that cannot be read) fails, exit 1, naming the file.
 */
int cli_project_load(const char *config_file, cli_project *p);
void cli_project_free(cli_project *p);

/* ---- toml.c ---- */

/*
 * The TOML subset of a project config as a JSON object (new reference), or
 * NULL with *error ("line N: why", owned by the caller) set.
 */
json_t *cli_toml_parse(const char *text, size_t len, char **error);

/* ---- commands.c ---- */

int cli_cmd_deploy(const cli_options *o);
int cli_cmd_list(const cli_options *o);
int cli_cmd_show(const cli_options *o);
int cli_cmd_delete(const cli_options *o);
int cli_cmd_node(const cli_options *o);
int cli_cmd_fleet(const cli_options *o);
int cli_cmd_run(const cli_options *o);
int cli_cmd_tenants(const cli_options *o);
int cli_cmd_tenant(const cli_options *o);
int cli_cmd_cordon(const cli_options *o);
int cli_cmd_uncordon(const cli_options *o);
int cli_cmd_drain(const cli_options *o);
int cli_cmd_undrain(const cli_options *o);
int cli_cmd_versions(const cli_options *o);
int cli_cmd_rollback(const cli_options *o);
int cli_cmd_traffic(const cli_options *o);
int cli_cmd_events(const cli_options *o);
int cli_cmd_top(const cli_options *o);
int cli_cmd_secret(const cli_options *o);
int cli_cmd_facet(const cli_options *o);
int cli_cmd_egress(const cli_options *o);

/* ---- tail.c ---- */

int cli_cmd_tail(const cli_options *o);

/* Frees what the commands kept for the process (the client). */
void cli_commands_done(void);

#endif
