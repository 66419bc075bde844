/*
 * edgectl's internal interface. The calls go one way:
 *
 *   main.c ──▶ args.c      the command line: options, the command table, usage
 *     │
 *     └──────▶ commands.c  one function per command ──▶ client.c  the control API over libcurl
 *                                                  └──▶ print.c   tables and fields for people
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
  CLI_OPT_STATUS = 1u << 10,
  CLI_OPT_SAMPLE = 1u << 11,
};

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
  const char **workers;  /* --worker, each one given (owned array of argv strings) */
  int nworkers;
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
 * A usage error: the message, the usage of the command being parsed (or of
 * edgectl when none is named yet) and where to read more, on stderr; exit 2.
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
const char *cli_jstr(const json_t *obj, const char *key, const char *fallback);

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
