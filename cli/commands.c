/*
 * edgectl's commands, one function each: check the operands, build the
 * request, call the node through client.c, print the answer (tables and
 * fields for people, the node's JSON with --json). A request the node
 * refuses prints its error and the place in the code it names, and exits 1.
 *
 * deploy guards one thing the API cannot: a PUT replaces the whole spec, so
 * a redeploy from files (or a config) that forgets a binding would silently
 * give a worker that uses env.DB a version without it, and its next request
 * fails. So unless --replace, deploy reads the worker first and refuses to
 * drop a binding, or (when it sends rules) an egress rule.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "base.h"
#include "cli.h"

/* Created on the first request, so that usage errors never need the token. */
static cli_client *the_client;

void cli_commands_done(void) {
  cli_client_free(the_client);
  the_client = NULL;
}

/* ---- requests ---- */

/* One request; exits 1 when no answer came. Any HTTP status is returned. */
static cli_response call_any(const cli_options *o, const char *method, const char *path,
                             const char *body) {
  if (the_client == NULL) the_client = cli_client_new(o);
  cli_response r;
  if (cli_client_request(the_client, method, path, body, &r) < 0)
    cli_fail("%s", cli_client_error(the_client));
  return r;
}

/* The node's error on stderr: its message and status, and the place in the code it names. */
__attribute__((noreturn)) static void fail_with_answer(cli_response *r) {
  json_t *j = cli_response_json(r);
  const char *msg = json_string_value(json_object_get(j, "error"));
  char fallback[256];
  if (msg == NULL) {
    /* Not our API's error shape (a proxy, say): show the start of the body. */
    size_t n = strcspn(r->body, "\r\n");
    snprintf(fallback, sizeof fallback, "%.*s", (int)(n > 200 ? 200 : n),
             n ? r->body : "request failed");
    msg = fallback;
  }
  fprintf(stderr, "edgectl: %s (HTTP %ld)\n", msg, r->status);
  const char *module = json_string_value(json_object_get(j, "module"));
  json_t *line = json_object_get(j, "line"), *col = json_object_get(j, "column");
  if (module != NULL) {
    fprintf(stderr, "  at %s", module);
    if (json_is_integer(line)) fprintf(stderr, ":%" JSON_INTEGER_FORMAT, json_integer_value(line));
    if (json_is_integer(col)) fprintf(stderr, ":%" JSON_INTEGER_FORMAT, json_integer_value(col));
    fputc('\n', stderr);
  }
  if (r->left_origin && r->status == 401)
    fprintf(stderr,
            "  the answer came from %s after a redirect to another origin than --node;\n"
            "  edgectl sends the token only to --node's origin\n",
            r->url);
  exit(CLI_EXIT_FAILED);
}

/* One request that must succeed (2xx); anything else prints the node's error and exits 1. */
static cli_response call(const cli_options *o, const char *method, const char *path,
                         const char *body) {
  cli_response r = call_any(o, method, path, body);
  if (r.status < 200 || r.status >= 300) fail_with_answer(&r);
  return r;
}

/* A successful answer that must be a JSON object. */
static json_t *call_json(const cli_options *o, const char *method, const char *path) {
  cli_response r = call(o, method, path, NULL);
  json_t *j = cli_response_json(&r);
  cli_response_free(&r);
  if (!json_is_object(j)) cli_fail("%s %s: the node's answer is not a JSON object", method, path);
  return j;
}

/* The node's answer: as JSON with --json, else through `human` (or as fields). */
static void print_answer(const cli_options *o, const cli_response *r, void (*human)(json_t *)) {
  json_t *j = o->json ? NULL : cli_response_json(r);
  if (o->json || !json_is_object(j)) cli_print_json_body(r);
  else if (human) human(j);
  else cli_print_object(j, 0);
  json_decref(j);
}

static char *dump_compact(const json_t *j) {
  char *s = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
  if (s == NULL) abort();
  return s;
}

/* body[key], an object (or with `array`, an array) created when absent. */
static json_t *member(json_t *body, const char *key, int array, const char *from) {
  json_t *m = json_object_get(body, key);
  if (m == NULL) {
    m = array ? json_array() : json_object();
    cli_jset(body, key, m);
  } else if (array ? !json_is_array(m) : !json_is_object(m)) {
    cli_fail("%s: \"%s\" must be %s", from, key, array ? "an array" : "an object");
  }
  return m;
}

/* --cpu-ms and --memory-mb into body's "limits", over what a --spec gave. */
static void add_limits(json_t *body, const cli_options *o, const char *from) {
  if (!(o->given & (CLI_OPT_CPU_MS | CLI_OPT_MEMORY_MB))) return;
  json_t *limits = member(body, "limits", 0, from);
  if (o->given & CLI_OPT_CPU_MS) cli_jset(limits, "cpu_ms", json_integer(o->cpu_ms));
  if (o->given & CLI_OPT_MEMORY_MB) cli_jset(limits, "memory_mb", json_integer(o->memory_mb));
}

/* The JSON object of a --spec file. */
static json_t *read_spec(const char *file) {
  json_t *spec = cli_read_json(file);
  if (!json_is_object(spec))
    cli_fail("%s: a spec is a JSON object (\"bindings\", \"limits\", \"egress\", ...)", file);
  return spec;
}

/* ---- deploy ---- */

/* The keys of `obj`, "A, B", for those `keep` has not (all when keep is NULL); NULL: none. */
static char *keys_missing(const json_t *obj, const json_t *keep) {
  char *names = NULL;
  const char *k;
  json_t *v;
  json_object_foreach((json_t *)obj, k, v) {
    if (json_object_get(keep, k) != NULL) continue;
    char *next = names ? xasprintf("%s, %s", names, k) : xstrdup(k);
    free(names);
    names = next;
  }
  return names;
}

/* The "match" of each rule as the keys of an object, for keys_missing(). */
static json_t *rule_matches(const json_t *rules) {
  json_t *set = json_object();
  size_t i;
  json_t *r;
  json_array_foreach(rules, i, r) {
    const char *match = cli_jstr(r, "match", NULL);
    if (match) cli_jset(set, match, json_true());
  }
  return set;
}

/* Refuses a deploy that would drop an egress rule (by its match) the worker has. */
static void check_egress_kept(const cli_options *o, const char *name, const json_t *rules) {
  char *path = xasprintf("/v1/workers/%s/egress", name);
  cli_response r = call(o, "GET", path, NULL);
  free(path);
  json_t *j = cli_response_json(&r);
  cli_response_free(&r);
  json_t *now = rule_matches(json_object_get(j, "rules")), *next = rule_matches(rules);
  char *missing = keys_missing(now, next);
  json_decref(now);
  json_decref(next);
  json_decref(j);
  if (missing != NULL)
    cli_fail("worker %s has egress rules (%s) that this deploy would drop: give them too, or add "
             "--replace to deploy without them",
             name, missing);
}

/*
 * Refuses a deploy that would drop what the worker deployed as `name` has:
 * a binding (by name) the new spec lacks, or, when the spec gives "egress",
 * a rule it lacks. Without "egress" the node keeps the rules as they are.
 */
static void check_nothing_dropped(const cli_options *o, const char *name, const json_t *body) {
  char *path = xasprintf("/v1/workers/%s", name);
  cli_response r = call_any(o, "GET", path, NULL);
  free(path);
  if (r.status == 404) { /* a new worker */
    cli_response_free(&r);
    return;
  }
  if (r.status < 200 || r.status >= 300) fail_with_answer(&r);
  json_t *worker = cli_response_json(&r);
  cli_response_free(&r);
  json_t *had = json_object_get(worker, "bindings");
  char *missing = json_is_object(had) ? keys_missing(had, json_object_get(body, "bindings")) : NULL;
  json_decref(worker);
  if (missing != NULL)
    cli_fail("worker %s has bindings (%s) that this deploy would drop: give them (--spec FILE, "
             "edgenode.json, --var, --facet), or add --replace to deploy without them",
             name, missing);
  json_t *rules = json_object_get(body, "egress");
  if (json_is_array(rules)) check_egress_kept(o, name, rules);
}

/* --var NAME=VALUE (text) and --facet NAME, over what a spec or config gave. */
static void add_flag_bindings(json_t *body, const cli_options *o, const char *from) {
  if (o->vars.n == 0 && o->facets.n == 0) return;
  json_t *b = member(body, "bindings", 0, from);
  for (int i = 0; i < o->vars.n; i++) {
    const char *v = o->vars.items[i], *eq = strchr(v, '=');
    if (eq == NULL || eq == v) cli_usage_error("--var needs NAME=VALUE, not '%s'", v);
    char *name = xstrndup(v, (size_t)(eq - v));
    json_t *binding = json_pack("{s:s, s:s}", "type", "text", "value", eq + 1);
    if (binding == NULL) cli_usage_error("--var %s: the value must be UTF-8 text", name);
    cli_jset(b, name, binding);
    free(name);
  }
  for (int i = 0; i < o->facets.n; i++) {
    if (o->facets.items[i][0] == '\0') cli_usage_error("--facet needs a binding NAME");
    cli_jset(b, o->facets.items[i], json_pack("{s:s}", "type", "facet"));
  }
}

/* --egress FILE (rules, or {"rules": [...]}) replaces the rules; each --allow URL adds one. */
static void add_flag_egress(json_t *body, const cli_options *o, const char *from) {
  if (o->egress_file) {
    json_t *j = cli_read_json(o->egress_file);
    json_t *rules = json_is_object(j) ? json_object_get(j, "rules") : j;
    if (!json_is_array(rules)) cli_fail("%s: egress rules are a JSON array, or {\"rules\": [...]}", o->egress_file);
    cli_jset(body, "egress", json_incref(rules));
    json_decref(j);
  }
  if (o->allows.n == 0) return;
  json_t *rules = member(body, "egress", 1, from);
  for (int i = 0; i < o->allows.n; i++) {
    json_t *rule = json_pack("{s:s}", "match", o->allows.items[i]);
    if (rule == NULL) cli_usage_error("--allow needs a URL prefix in UTF-8");
    json_array_append_new(rules, rule);
  }
}

/* The body from FILEs or a --spec: the deploy as before project folders. */
static json_t *files_body(const cli_options *o) {
  json_t *body = o->spec_file ? read_spec(o->spec_file) : json_object();
  int spec_has_code = json_object_get(body, "modules") || json_object_get(body, "main_module");
  const char *const *files = o->args + 1;
  int nfiles = o->nargs - 1;
  if (spec_has_code) {
    if (nfiles > 0)
      cli_usage_error("deploy: %s holds the modules: give no FILEs with it", o->spec_file);
    if (o->main_file) cli_usage_error("deploy: %s holds the modules: --main goes with FILEs", o->spec_file);
  } else {
    if (nfiles == 0)
      cli_usage_error("deploy: missing operand (module FILEs, a --spec with \"modules\", or an "
                      "edgenode.json here)");
    cli_add_modules(body, o->main_file, files, nfiles);
  }
  return body;
}

/*
 * Routes of a project: this worker's patterns replace the ones it had, the
 * other workers' stay. Read first (check_only), so that a node without
 * PUT /v1/routes refuses before the code is deployed.
 */
static void sync_routes(const cli_options *o, const char *name, const json_t *patterns, int check_only) {
  cli_response r = call_any(o, "GET", "/v1/routes", NULL);
  if (r.status == 404) cli_fail("this node has no /v1/routes: deploy without \"routes\" in the config");
  if (r.status < 200 || r.status >= 300) fail_with_answer(&r);
  json_t *j = cli_response_json(&r);
  cli_response_free(&r);
  if (check_only) {
    json_decref(j);
    return;
  }
  json_t *routes = json_array();
  size_t i;
  json_t *e;
  json_array_foreach(json_object_get(j, "routes"), i, e) {
    if (strcmp(cli_jstr(e, "worker", ""), name) != 0) json_array_append(routes, e);
  }
  json_array_foreach(patterns, i, e) json_array_append_new(routes, json_pack("{s:O, s:s}", "pattern", e, "worker", name));
  json_t *put = json_pack("{s:o}", "routes", routes);
  char *text = dump_compact(put);
  json_decref(put);
  json_decref(j);
  cli_response done = call(o, "PUT", "/v1/routes", text);
  free(text);
  cli_response_free(&done);
}

static void print_deployed(const cli_options *o, const char *name, const cli_response *r) {
  if (o->json) {
    cli_print_json_body(r);
    return;
  }
  json_t *j = cli_response_json(r);
  json_t *version = json_object_get(j, "version");
  if (json_is_integer(version))
    printf("deployed %s (version %" JSON_INTEGER_FORMAT ")\n", name, json_integer_value(version));
  else
    printf("deployed %s\n", name);
  json_decref(j);
}

static void print_dry_run(const json_t *body, const char *name, const json_t *routes) {
  cli_print_json(body);
  fprintf(stderr, "edgectl: dry run: the spec of PUT /v1/workers/%s, not sent\n", name);
  if (routes == NULL) return;
  char *text = dump_compact(routes);
  fprintf(stderr, "edgectl: and routes %s to %s (PUT /v1/routes)\n", text, name);
  free(text);
}

static void deploy_send(const cli_options *o, const char *name, const json_t *body, const json_t *routes) {
  if (!o->replace) check_nothing_dropped(o, name, body);
  if (routes) sync_routes(o, name, routes, 1);
  char *text = dump_compact(body);
  char *path = xasprintf("/v1/workers/%s", name);
  cli_response r = call(o, "PUT", path, text);
  free(text);
  free(path);
  if (routes) sync_routes(o, name, routes, 0);
  print_deployed(o, name, &r);
  cli_response_free(&r);
}

int cli_cmd_deploy(const cli_options *o) {
  cli_project p = {0};
  int project = o->nargs <= 1 && o->spec_file == NULL;
  if (project && !cli_project_load(o->config_file, &p))
    cli_usage_error("deploy: missing operand (NAME and module FILEs, a --spec FILE, or an "
                    "edgenode.json or edgenode.toml here)");
  if (!project && o->config_file) cli_usage_error("deploy: --config takes no FILEs and no --spec");
  if (!project && o->nargs == 0) cli_usage_error("deploy: missing operand NAME");
  if (project && o->main_file) cli_usage_error("deploy: --main goes with FILEs; a project has \"main\"");
  const char *name = o->nargs > 0 ? o->args[0] : p.name;
  if (name == NULL) cli_usage_error("deploy: no NAME given and %s has no \"name\"", p.file);
  name = cli_worker_name_of(name);
  json_t *body = project ? json_incref(p.body) : files_body(o);
  const char *from = project ? p.file : o->spec_file ? o->spec_file : "the deploy";
  add_limits(body, o, from);
  add_flag_bindings(body, o, from);
  add_flag_egress(body, o, from);
  if (o->dry_run) print_dry_run(body, name, p.routes);
  else deploy_send(o, name, body, p.routes);
  json_decref(body);
  cli_project_free(&p);
  return 0;
}

/* ---- list, show, delete, node, run ---- */

/* The array `key` of an answer, to print as a table; NULL once it printed
 * the answer as fields (not our shape) or `none` (an empty list). */
static json_t *rows_or_say(json_t *j, const char *key, const char *none) {
  json_t *rows = json_object_get(j, key);
  if (!json_is_array(rows)) {
    cli_print_object(j, 0);
    return NULL;
  }
  if (json_array_size(rows) == 0) {
    printf("%s\n", none);
    return NULL;
  }
  return rows;
}

static void print_workers(json_t *j) {
  json_t *workers = rows_or_say(j, "workers", "no workers deployed");
  if (workers == NULL) return;
  static const char *const heads[] = {"NAME", "VERSION", "MAIN", "UPDATED"};
  static const int right[] = {0, 0, 0, 0};
  cli_table t = {4, heads, right, NULL, 0};
  size_t i;
  json_t *w;
  json_array_foreach(workers, i, w) {
    json_t *ver = json_object_get(w, "version");
    char *row[4] = {xstrdup(cli_jstr(w, "name", "?")),
                    json_is_integer(ver) ? xasprintf("%" JSON_INTEGER_FORMAT, json_integer_value(ver))
                                         : xstrdup("-"),
                    xstrdup(cli_jstr(w, "main_module", "-")), xstrdup(cli_jstr(w, "updated_at", "-"))};
    cli_table_add(&t, row);
  }
  cli_table_print(&t, 0);
}

int cli_cmd_list(const cli_options *o) {
  cli_expect_operands(o, 0, 0);
  cli_response r = call(o, "GET", "/v1/workers", NULL);
  print_answer(o, &r, print_workers);
  cli_response_free(&r);
  return 0;
}

/* show: the worker's fields, with module sources summarised by size. */
static void print_worker(json_t *w) {
  json_t *modules = json_object_get(w, "modules");
  const char *main_module = json_string_value(json_object_get(w, "main_module"));
  json_t *bindings = json_object_get(w, "bindings");
  int binding_table = json_is_object(bindings) && json_object_size(bindings) > 0;
  json_t *rest = json_deep_copy(w);
  json_object_del(rest, "modules");
  if (binding_table) json_object_del(rest, "bindings");
  cli_print_object(rest, 0);
  json_decref(rest);
  if (binding_table) {
    printf("bindings:\n");
    static const char *const heads[] = {"NAME", "TYPE", "VALUE"};
    static const int right[] = {0, 0, 0};
    cli_table t = {3, heads, right, NULL, 0};
    const char *k;
    json_t *v;
    json_object_foreach(bindings, k, v) {
      json_t *value = json_object_get(v, "value");
      char *text = value == NULL ? xstrdup("-")
                   : json_is_string(value)
                       ? xstrdup(json_string_value(value))
                       : json_dumps(value, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY);
      if (text == NULL) abort();
      char *row[3] = {xstrdup(k), xstrdup(cli_jstr(v, "type", "?")), text};
      cli_table_add(&t, row);
    }
    cli_table_print(&t, 2);
  }
  if (!json_is_object(modules)) return;
  printf("modules:\n");
  const char *k;
  json_t *v;
  size_t width = 0;
  json_object_foreach(modules, k, v) {
    if (strlen(k) > width) width = strlen(k);
  }
  json_object_foreach(modules, k, v) {
    printf("  %-*s  %zu bytes%s\n", (int)width, k, json_string_length(v),
           main_module && strcmp(k, main_module) == 0 ? "  (main)" : "");
  }
}

/* GET /v1/workers/NAME<suffix>, printed through `human` (or --json). */
static int get_worker_part(const cli_options *o, const char *suffix, void (*human)(json_t *)) {
  cli_expect_operands(o, 1, 1);
  char *path = xasprintf("/v1/workers/%s%s", cli_worker_name(o, 0), suffix);
  cli_response r = call(o, "GET", path, NULL);
  free(path);
  print_answer(o, &r, human);
  cli_response_free(&r);
  return 0;
}

int cli_cmd_show(const cli_options *o) { return get_worker_part(o, "", print_worker); }

int cli_cmd_delete(const cli_options *o) {
  cli_expect_operands(o, 1, 1);
  const char *name = cli_worker_name(o, 0);
  char *path = xasprintf("/v1/workers/%s", name);
  cli_response r = call(o, "DELETE", path, NULL);
  free(path);
  if (o->json) cli_print_json_body(&r);
  else printf("deleted %s\n", name);
  cli_response_free(&r);
  return 0;
}

int cli_cmd_node(const cli_options *o) {
  cli_expect_operands(o, 0, 0);
  cli_response r = call(o, "GET", "/v1/node", NULL);
  print_answer(o, &r, NULL);
  cli_response_free(&r);
  return 0;
}

static void print_fleet(json_t *j) {
  printf("node: %s (%s to %s, %s)\n", cli_jstr(j, "node", "?"),
         json_is_true(json_object_get(j, "connected")) ? "connected" : "NOT connected",
         cli_jstr(j, "server", "-"), json_is_true(json_object_get(j, "synced")) ? "in sync" : "syncing");
  if (json_is_string(json_object_get(j, "error"))) printf("error: %s\n", cli_jstr(j, "error", ""));
  static const char *const heads[] = {"NAME",   "STATE",     "ALIVE", "VERSION",
                                      "LISTEN", "CONTROL",   "HEARTBEAT", "BEHIND",
                                      "IN FLIGHT", "REQ/S", "CPU"};
  static const int right[] = {0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1};
  enum { NCOLS = 11 };
  cli_table t = {.ncols = NCOLS, .heads = heads, .right = right};
  size_t i;
  json_t *m;
  json_array_foreach(json_object_get(j, "nodes"), i, m) {
    char **row = xcalloc(NCOLS, sizeof *row);
    json_t *load = json_object_get(m, "load");
    row[0] = xasprintf("%s%s", cli_jstr(m, "name", "?"),
                       json_is_true(json_object_get(m, "self")) ? " *" : "");
    row[1] = xstrdup(cli_jstr(m, "state", "?"));
    row[2] = xstrdup(json_is_true(json_object_get(m, "alive")) ? "yes" : "NO");
    row[3] = xstrdup(cli_jstr(m, "version", "?"));
    row[4] = xstrdup(cli_jstr(m, "listen", "-"));
    row[5] = xstrdup(cli_jstr(m, "control", "-"));
    row[6] = xasprintf("%.1f s ago", cli_jnum(m, "heartbeat_age_ms") / 1000.0);
    row[7] = xasprintf("%.0f", cli_jnum(m, "behind"));
    /* A node of an older build sends no load. */
    row[8] = load ? xasprintf("%.0f", cli_jnum(load, "in_flight")) : xstrdup("-");
    row[9] = load ? xasprintf("%.1f", cli_jnum(load, "requests_per_s")) : xstrdup("-");
    row[10] = load ? xasprintf("%.2f", cli_jnum(load, "cpu")) : xstrdup("-");
    cli_table_add(&t, row);
  }
  cli_table_print(&t, 0);
}

int cli_cmd_fleet(const cli_options *o) {
  cli_expect_operands(o, 0, 0);
  cli_response r = call(o, "GET", "/v1/fleet", NULL);
  print_answer(o, &r, print_fleet);
  cli_response_free(&r);
  return 0;
}

/* run: a result shaped like a response prints as one; anything else as fields. */
static void print_run_result(json_t *j) {
  json_t *status = json_object_get(j, "status");
  json_t *body = json_object_get(j, "body");
  if (!json_is_integer(status) || !json_is_string(body)) {
    cli_print_object(j, 0);
    return;
  }
  printf("HTTP %" JSON_INTEGER_FORMAT "\n", json_integer_value(status));
  json_t *headers = json_object_get(j, "headers");
  const char *k;
  json_t *v;
  size_t i;
  if (json_is_object(headers)) {
    json_object_foreach(headers, k, v) {
      if (json_is_string(v)) {
        printf("%s: %s\n", k, json_string_value(v));
        continue;
      }
      /* set-cookie: one line per cookie, as on the wire */
      json_t *one;
      json_array_foreach(v, i, one) {
        if (json_is_string(one)) printf("%s: %s\n", k, json_string_value(one));
      }
    }
  } else if (json_is_array(headers)) {
    json_array_foreach(headers, i, v) {
      if (json_array_size(v) == 2)
        printf("%s: %s\n", json_string_value(json_array_get(v, 0)),
               json_string_value(json_array_get(v, 1)));
    }
  }
  /* Not UTF-8: the node sent the bytes as base64, and so they are shown. */
  const char *enc = json_string_value(json_object_get(j, "body_encoding"));
  if (enc) printf("(body as %s)\n", enc);
  fputc('\n', stdout);
  size_t len = json_string_length(body);
  fwrite(json_string_value(body), 1, len, stdout);
  if (len > 0 && json_string_value(body)[len - 1] != '\n') fputc('\n', stdout);
}

int cli_cmd_run(const cli_options *o) {
  cli_expect_operands(o, 1, -1);
  json_t *body = json_object();
  cli_add_modules(body, o->main_file, o->args, o->nargs);
  add_limits(body, o, "run");
  if (o->input != NULL) {
    json_error_t jerr;
    json_t *input = json_loads(o->input, JSON_DECODE_ANY, &jerr);
    if (input == NULL) cli_usage_error("--input is not valid JSON: %s", jerr.text);
    cli_jset(body, "input", input);
  }
  char *text = dump_compact(body);
  json_decref(body);
  cli_response r = call(o, "POST", "/v1/run", text);
  free(text);
  print_answer(o, &r, print_run_result);
  cli_response_free(&r);
  return 0;
}

/* ---- secrets and facets ---- */

/* Secret values come from standard input, so they never show in a process
 * list or a shell history. */
static char *read_stdin_all(size_t *len) {
  size_t cap = 4096, n = 0;
  char *buf = xmalloc(cap);
  size_t got;
  while ((got = fread(buf + n, 1, cap - n - 1, stdin)) > 0) {
    n += got;
    if (cap - n < 2) buf = xrealloc(buf, cap *= 2);
  }
  if (ferror(stdin)) cli_fail("reading the secret from standard input: %s", strerror(errno));
  buf[n] = '\0';
  if (strlen(buf) != n) cli_fail("the secret holds a NUL byte: only text secrets are supported");
  *len = n;
  return buf;
}

/* "a, b" (heap); "-" for none. */
static char *worker_list(json_t *workers) {
  size_t i, len = 0;
  json_t *w;
  json_array_foreach(workers, i, w) len += json_string_length(w) + 2;
  if (len == 0) return xstrdup("-");
  char *out = xcalloc(1, len + 1);
  json_array_foreach(workers, i, w) {
    if (i) strcat(out, ", ");
    strcat(out, json_string_value(w) ? json_string_value(w) : "?");
  }
  return out;
}

/* secret grant|revoke NAME WORKER */
static int secret_grant(const cli_options *o, int grant) {
  cli_expect_operands(o, 3, 3);
  const char *name = o->args[1];
  const char *worker = cli_worker_name(o, 2);
  char *path = xasprintf("/v1/secrets/%s/workers/%s", name, worker);
  cli_response r = call(o, grant ? "PUT" : "DELETE", path, NULL);
  free(path);
  if (o->json) cli_print_json_body(&r);
  else printf("secret %s %s %s\n", name, grant ? "granted to" : "revoked from", worker);
  cli_response_free(&r);
  return 0;
}

static void print_secrets(json_t *j) {
  json_t *list = rows_or_say(j, "secrets", "no secrets");
  if (list == NULL) return;
  static const char *const heads[] = {"NAME", "UPDATED", "WORKERS"};
  static const int right[] = {0, 0, 0};
  cli_table t = {3, heads, right, NULL, 0};
  size_t i;
  json_t *e;
  json_array_foreach(list, i, e) {
    char *row[3] = {xstrdup(cli_jstr(e, "name", "?")), xstrdup(cli_jstr(e, "updated_at", "-")),
                    worker_list(json_object_get(e, "workers"))};
    cli_table_add(&t, row);
  }
  cli_table_print(&t, 0);
}

int cli_cmd_secret(const cli_options *o) {
  const char *sub = o->nargs > 0 ? o->args[0] : "";
  if (strcmp(sub, "list") == 0) {
    cli_expect_operands(o, 1, 1);
    cli_response r = call(o, "GET", "/v1/secrets", NULL);
    print_answer(o, &r, print_secrets);
    cli_response_free(&r);
    return 0;
  }
  if (strcmp(sub, "grant") == 0 || strcmp(sub, "revoke") == 0)
    return secret_grant(o, strcmp(sub, "grant") == 0);
  if (strcmp(sub, "set") != 0 && strcmp(sub, "delete") != 0)
    cli_usage_error("secret: expected 'set NAME', 'grant NAME WORKER', 'revoke NAME WORKER', "
                    "'list' or 'delete NAME'");
  if (o->workers.n && strcmp(sub, "set") != 0)
    cli_usage_error("secret %s: --worker is for 'secret set'", sub);
  cli_expect_operands(o, 2, 2);
  const char *name = o->args[1];
  char *path = xasprintf("/v1/secrets/%s", name);
  cli_response r;
  if (strcmp(sub, "set") == 0) {
    if (isatty(STDIN_FILENO))
      fprintf(stderr, "edgectl: reading the value of %s from standard input\n", name);
    size_t len;
    char *value = read_stdin_all(&len);
    if (len > 0 && value[len - 1] == '\n') value[--len] = '\0';
    if (len == 0) cli_fail("secret %s: the value on standard input is empty", name);
    json_t *body = json_pack("{s:s%}", "value", value, len);
    if (body == NULL) cli_fail("secret %s: the value is not valid UTF-8", name);
    if (o->workers.n) {
      json_t *workers = json_array();
      for (int i = 0; i < o->workers.n; i++)
        json_array_append_new(workers, json_string(cli_worker_name_of(o->workers.items[i])));
      json_object_set_new(body, "workers", workers);
    }
    char *text = dump_compact(body);
    json_decref(body);
    memset(value, 0, len);
    free(value);
    r = call(o, "PUT", path, text);
    memset(text, 0, strlen(text));
    free(text);
    if (!o->json) printf("secret %s set\n", name);
  } else {
    r = call(o, "DELETE", path, NULL);
    if (!o->json) printf("secret %s deleted\n", name);
  }
  if (o->json) cli_print_json_body(&r);
  free(path);
  cli_response_free(&r);
  return 0;
}

int cli_cmd_facet(const cli_options *o) {
  int backup = o->nargs > 0 && strcmp(o->args[0], "backup") == 0;
  if (!backup) {
    cli_expect_operands(o, 1, 1);
    char *path = xasprintf("/v1/workers/%s/facet", cli_worker_name(o, 0));
    cli_response r = call(o, "GET", path, NULL);
    free(path);
    print_answer(o, &r, NULL);
    cli_response_free(&r);
    return 0;
  }
  cli_expect_operands(o, 3, 3);
  const char *name = cli_worker_name(o, 1), *file = o->args[2];
  char *path = xasprintf("/v1/workers/%s/facet/backup", name);
  cli_response r = call(o, "GET", path, NULL);
  free(path);
  FILE *f = fopen(file, "wb");
  if (f == NULL) cli_fail("%s: %s", file, strerror(errno));
  if (fwrite(r.body, 1, r.body_len, f) != r.body_len || fclose(f) != 0)
    cli_fail("writing %s: %s", file, strerror(errno));
  if (o->json) {
    json_t *j = json_pack("{s:s, s:s, s:I}", "worker", name, "file", file, "bytes",
                          (json_int_t)r.body_len);
    if (j == NULL) cli_fail("%s: the file name is not UTF-8", file);
    cli_print_json(j);
    json_decref(j);
  } else {
    printf("backup of %s's facet written to %s (%zu bytes)\n", name, file, r.body_len);
  }
  cli_response_free(&r);
  return 0;
}

/* ---- egress rules ---- */

/* "Authorization, X-Key": the headers a rule injects (their values may name secrets). */
static char *inject_names(const json_t *rule) {
  json_t *headers = json_object_get(json_object_get(rule, "inject"), "headers");
  if (!json_is_object(headers) || json_object_size(headers) == 0) return xstrdup("-");
  char *names = NULL;
  const char *k;
  json_t *v;
  json_object_foreach(headers, k, v) {
    char *next = names ? xasprintf("%s, %s", names, k) : xstrdup(k);
    free(names);
    names = next;
  }
  return names;
}

static char *method_list(const json_t *rule) {
  json_t *methods = json_object_get(rule, "methods");
  if (!json_is_array(methods) || json_array_size(methods) == 0) return xstrdup("*");
  char *list = NULL;
  size_t i;
  json_t *m;
  json_array_foreach(methods, i, m) {
    char *next = xasprintf("%s%s%s", list ? list : "", list ? "," : "", json_string_value(m) ? json_string_value(m) : "?");
    free(list);
    list = next;
  }
  return list;
}

static void print_egress(json_t *j) {
  json_t *rules = json_object_get(j, "rules");
  if (!json_is_array(rules)) {
    cli_print_object(j, 0);
    return;
  }
  if (json_array_size(rules) == 0) {
    printf("no egress rules: %s makes no outbound requests\n", cli_jstr(j, "worker", "the worker"));
    return;
  }
  static const char *const heads[] = {"MATCH", "METHODS", "INJECT"};
  static const int right[] = {0, 0, 0};
  cli_table t = {3, heads, right, NULL, 0};
  size_t i;
  json_t *e;
  json_array_foreach(rules, i, e) {
    char *row[3] = {xstrdup(cli_jstr(e, "match", "?")), method_list(e), inject_names(e)};
    cli_table_add(&t, row);
  }
  cli_table_print(&t, 0);
}

int cli_cmd_egress(const cli_options *o) {
  const char *sub = o->nargs > 0 ? o->args[0] : "";
  int set = strcmp(sub, "set") == 0, clear = strcmp(sub, "clear") == 0;
  if (!set && !clear) {
    cli_expect_operands(o, 1, 1);
    char *path = xasprintf("/v1/workers/%s/egress", cli_worker_name(o, 0));
    cli_response r = call(o, "GET", path, NULL);
    free(path);
    print_answer(o, &r, print_egress);
    cli_response_free(&r);
    return 0;
  }
  cli_expect_operands(o, set ? 3 : 2, set ? 3 : 2);
  const char *name = cli_worker_name(o, 1);
  char *path = xasprintf("/v1/workers/%s/egress", name);
  cli_response r;
  if (set) {
    json_t *rules = cli_read_json(o->args[2]);
    char *body = dump_compact(rules);
    json_decref(rules);
    r = call(o, "PUT", path, body);
    free(body);
  } else {
    r = call(o, "DELETE", path, NULL);
  }
  free(path);
  if (o->json) {
    cli_print_json_body(&r);
  } else {
    json_t *j = cli_response_json(&r);
    size_t n = json_array_size(json_object_get(j, "rules"));
    if (set) printf("egress rules of %s set (%zu rule%s)\n", name, n, n == 1 ? "" : "s");
    else printf("egress rules of %s cleared: it makes no outbound requests\n", name);
    json_decref(j);
  }
  cli_response_free(&r);
  return 0;
}

/* ---- operations: tenants, cordons, drain, events, top ---- */

static void print_tenants(json_t *j) {
  json_t *list = rows_or_say(j, "tenants", "no tenants");
  if (list == NULL) return;
  static const char *const heads[] = {"NAME", "STATE", "REQUESTS", "ERRORS", "CPU_MS", "HEAP"};
  static const int right[] = {0, 0, 1, 1, 1, 1};
  cli_table t = {6, heads, right, NULL, 0};
  size_t i;
  json_t *e;
  json_array_foreach(list, i, e) {
    char *row[6] = {xstrdup(cli_jstr(e, "name", "?")), xstrdup(cli_jstr(e, "state", "-")),
                    xasprintf("%.0f", cli_jnum(e, "requests")),
                    xasprintf("%.0f", cli_jnum(e, "errors")),
                    xasprintf("%.1f", cli_jnum(e, "cpu_ms")),
                    cli_format_bytes(cli_jnum(e, "heap_used"))};
    cli_table_add(&t, row);
  }
  cli_table_print(&t, 0);
}

int cli_cmd_tenants(const cli_options *o) {
  cli_expect_operands(o, 0, 0);
  cli_response r = call(o, "GET", "/v1/tenants", NULL);
  print_answer(o, &r, print_tenants);
  cli_response_free(&r);
  return 0;
}

int cli_cmd_tenant(const cli_options *o) {
  cli_expect_operands(o, 1, 1);
  char *path = xasprintf("/v1/tenants/%s", cli_worker_name(o, 0));
  cli_response r = call(o, "GET", path, NULL);
  free(path);
  print_answer(o, &r, NULL);
  cli_response_free(&r);
  return 0;
}

/* cordon / uncordon: one line for people, the node's answer with --json. */
static int cordon_command(const cli_options *o, int is_cordon) {
  cli_expect_operands(o, 1, 1);
  const char *name = cli_worker_name(o, 0);
  char *path = xasprintf("/v1/tenants/%s/%s", name, is_cordon ? "cordon" : "uncordon");
  char *body = NULL;
  if (is_cordon && o->reason) {
    json_t *j = json_pack("{s:s}", "reason", o->reason);
    if (j == NULL) cli_usage_error("--reason must be UTF-8 text");
    body = dump_compact(j);
    json_decref(j);
  }
  cli_response r = call(o, "POST", path, body ? body : "");
  free(path);
  free(body);
  if (o->json) {
    cli_print_json_body(&r);
  } else {
    json_t *j = cli_response_json(&r);
    if (is_cordon) {
      json_t *d = json_object_get(j, "dedicated");
      printf("%s: cordoned (%s); dedicated worker process %.0f\n", name,
             cli_jstr(j, "reason", "-"), cli_jnum(d, "pid"));
    } else {
      printf("%s: uncordoned (was %s); back in the shared worker processes\n", name,
             cli_jstr(j, "was", "cordoned"));
    }
    json_decref(j);
  }
  cli_response_free(&r);
  return 0;
}

int cli_cmd_cordon(const cli_options *o) { return cordon_command(o, 1); }
int cli_cmd_uncordon(const cli_options *o) { return cordon_command(o, 0); }

static double mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

/* drain: asks, then (unless --no-wait) follows GET /v1/node until "drained". */
int cli_cmd_drain(const cli_options *o) {
  cli_expect_operands(o, 0, 0);
  cli_response r = call(o, "POST", "/v1/node/drain", "");
  json_t *j = cli_response_json(&r);
  double grace = cli_jnum(j, "grace_ms");
  if (o->no_wait) {
    if (o->json) cli_print_json_body(&r);
    else printf("%s (grace period %.0f ms)\n", cli_jstr(j, "state", "draining"), grace);
    json_decref(j);
    cli_response_free(&r);
    return 0;
  }
  json_decref(j);
  cli_response_free(&r);
  double start = mono_ms(), deadline = start + grace + 15000;
  if (!o->json) printf("draining (grace period %.0f ms)...\n", grace);
  fflush(stdout);
  for (;;) {
    json_t *node = call_json(o, "GET", "/v1/node");
    const char *state = cli_jstr(node, "state", "?");
    if (strcmp(state, "drained") == 0) {
      if (o->json) cli_print_json(node);
      else printf("drained after %.1f s\n", (mono_ms() - start) / 1e3);
      json_decref(node);
      return 0;
    }
    json_decref(node);
    if (mono_ms() > deadline)
      cli_fail("the node is still %s after %.0f ms", state, mono_ms() - start);
    sleep_ms(200);
  }
}

static void print_details(const json_t *details) {
  if (!json_is_object(details) || json_object_size(details) == 0) {
    fputs("-", stdout);
    return;
  }
  const char *k;
  json_t *v;
  int first = 1;
  json_object_foreach((json_t *)details, k, v) {
    printf("%s%s=", first ? "" : " ", k);
    cli_print_scalar(k, v);
    first = 0;
  }
}

static void print_events(json_t *j) {
  json_t *list = rows_or_say(j, "events", "no events");
  if (list == NULL) return;
  size_t i;
  json_t *e;
  printf("%-24s  %-12s  %-16s  %s\n", "TIME", "KIND", "TENANT", "DETAILS");
  json_array_foreach(list, i, e) {
    printf("%-24s  %-12s  %-16s  ", cli_jstr(e, "time", "-"), cli_jstr(e, "kind", "?"),
           cli_jstr(e, "tenant", "-"));
    print_details(json_object_get(e, "details"));
    fputc('\n', stdout);
  }
}

int cli_cmd_undrain(const cli_options *o) {
  cli_expect_operands(o, 0, 0);
  cli_response r = call(o, "POST", "/v1/node/undrain", NULL);
  print_answer(o, &r, NULL);
  cli_response_free(&r);
  return 0;
}

static void print_versions(json_t *j) {
  json_t *list = json_object_get(j, "versions");
  printf("%s: current version %" JSON_INTEGER_FORMAT ", %" JSON_INTEGER_FORMAT " kept\n",
         cli_jstr(j, "name", "?"), json_integer_value(json_object_get(j, "current")),
         json_integer_value(json_object_get(j, "kept")));
  printf("%-8s  %-24s  %10s  %-12s  %s\n", "VERSION", "CREATED", "SIZE", "HASH", "NOTE");
  size_t i;
  json_t *v;
  json_array_foreach(list, i, v) {
    const char *hash = cli_jstr(v, "hash", "-");
    printf("%-8" JSON_INTEGER_FORMAT "  %-24s  %10" JSON_INTEGER_FORMAT "  %-12.12s  ",
           json_integer_value(json_object_get(v, "version")), cli_jstr(v, "created_at", "-"),
           json_integer_value(json_object_get(v, "size")), hash);
    json_t *of = json_object_get(v, "rollback_of");
    if (json_is_integer(of)) printf("rollback to %" JSON_INTEGER_FORMAT, json_integer_value(of));
    fputc('\n', stdout);
  }
}

int cli_cmd_versions(const cli_options *o) {
  return get_worker_part(o, "/versions", print_versions);
}

int cli_cmd_rollback(const cli_options *o) {
  cli_expect_operands(o, 2, 2);
  const char *name = cli_worker_name(o, 0);
  char *end = NULL;
  long version = strtol(o->args[1], &end, 10);
  if (end == o->args[1] || *end != '\0' || version < 1)
    cli_usage_error("VERSION must be a version number (1 or more), not \"%s\"", o->args[1]);
  char *path = xasprintf("/v1/workers/%s/rollback", name);
  char *body = xasprintf("{\"version\":%ld}", version);
  cli_response r = call(o, "POST", path, body);
  free(path);
  free(body);
  json_t *j = cli_response_json(&r);
  if (o->json) cli_print_json_body(&r);
  else
    printf("%s: version %" JSON_INTEGER_FORMAT " is version %ld's code again\n", name,
           json_integer_value(json_object_get(j, "version")), version);
  json_decref(j);
  cli_response_free(&r);
  return 0;
}

static void print_traffic(json_t *j) {
  printf("%s: current version %" JSON_INTEGER_FORMAT "%s\n", cli_jstr(j, "name", "?"),
         json_integer_value(json_object_get(j, "current")),
         json_is_true(json_object_get(j, "gradual")) ? ", split:" : ", no split:");
  printf("%-8s  %s\n", "VERSION", "TRAFFIC");
  size_t i;
  json_t *v;
  json_array_foreach(json_object_get(j, "split"), i, v) {
    printf("%-8" JSON_INTEGER_FORMAT "  %" JSON_INTEGER_FORMAT "%%\n",
           json_integer_value(json_object_get(v, "version")),
           json_integer_value(json_object_get(v, "percent")));
  }
}

/* "5=90" into the body's "5": 90; anything else is a usage error. */
static void add_split(json_t *body, const char *arg) {
  const char *eq = strchr(arg, '=');
  size_t n = eq ? (size_t)(eq - arg) : 0;
  char *end = NULL;
  long percent = eq ? strtol(eq + 1, &end, 10) : -1;
  if (n == 0 || n > 15 || strspn(arg, "0123456789") != n || end == eq + 1 || *end != '\0')
    cli_usage_error("each share is VERSION=PERCENT (5=90), not \"%s\"", arg);
  char version[16];
  memcpy(version, arg, n);
  version[n] = '\0';
  json_object_set_new(body, version, json_integer(percent));
}

int cli_cmd_traffic(const cli_options *o) {
  cli_expect_operands(o, 1, 5);
  char *path = xasprintf("/v1/workers/%s/traffic", cli_worker_name(o, 0));
  char *text = NULL;
  if (o->nargs > 1) {
    json_t *body = json_object();
    for (int i = 1; i < o->nargs; i++) add_split(body, o->args[i]);
    text = dump_compact(body);
    json_decref(body);
  }
  cli_response r = call(o, text ? "PUT" : "GET", path, text);
  free(path);
  free(text);
  print_answer(o, &r, print_traffic);
  cli_response_free(&r);
  return 0;
}

int cli_cmd_events(const cli_options *o) {
  cli_expect_operands(o, 0, 1);
  long limit = o->limit > 0 ? o->limit : 100;
  char *path = o->nargs > 0
                   ? xasprintf("/v1/events?limit=%ld&tenant=%s", limit, cli_worker_name(o, 0))
                   : xasprintf("/v1/events?limit=%ld", limit);
  cli_response r = call(o, "GET", path, NULL);
  free(path);
  print_answer(o, &r, print_events);
  cli_response_free(&r);
  return 0;
}

/* ---- top ---- */

static struct termios top_saved_tty;
static int top_tty_raw;
static volatile sig_atomic_t top_stop;

static void top_restore(void) {
  if (top_tty_raw) tcsetattr(STDIN_FILENO, TCSANOW, &top_saved_tty);
  top_tty_raw = 0;
  if (isatty(STDOUT_FILENO)) fputs("\033[?25h", stdout); /* cursor back */
  fflush(stdout);
}

static void top_on_signal(int sig) {
  (void)sig;
  top_stop = 1;
}

/* One tenant's line of `top`: rates from two samples `secs` apart. */
static json_t *top_row(const json_t *now, const json_t *before, double secs) {
  double dr = cli_jnum(now, "requests") - cli_jnum(before ? before : now, "requests");
  double de = cli_jnum(now, "errors") - cli_jnum(before ? before : now, "errors");
  double dc = cli_jnum(now, "cpu_ms") - cli_jnum(before ? before : now, "cpu_ms");
  if (secs <= 0) secs = 1;
  /* Counters restart with the supervisor: never show negative rates. */
  return json_pack("{s:s, s:s, s:f, s:f, s:f, s:I, s:I, s:I}", "name", cli_jstr(now, "name", "?"),
                   "state", cli_jstr(now, "state", "-"), "requests_per_s", dr > 0 ? dr / secs : 0,
                   "errors_per_s", de > 0 ? de / secs : 0, "cpu_ms_per_s", dc > 0 ? dc / secs : 0,
                   "heap_used", (json_int_t)cli_jnum(now, "heap_used"), "requests",
                   (json_int_t)cli_jnum(now, "requests"), "errors",
                   (json_int_t)cli_jnum(now, "errors"));
}

static int compare_rows(const void *a, const void *b) {
  const json_t *x = *(json_t *const *)a, *y = *(json_t *const *)b;
  double rx = cli_jnum(x, "requests_per_s") + cli_jnum(x, "cpu_ms_per_s");
  double ry = cli_jnum(y, "requests_per_s") + cli_jnum(y, "cpu_ms_per_s");
  if (rx != ry) return rx < ry ? 1 : -1;
  return strcmp(cli_jstr(x, "name", ""), cli_jstr(y, "name", ""));
}

/* The rows, busiest first. */
static json_t *top_rows(json_t *now, json_t *before, double secs) {
  json_t *index = json_object();
  size_t i;
  json_t *e;
  json_array_foreach(json_object_get(before, "tenants"), i, e)
    json_object_set(index, cli_jstr(e, "name", ""), e);
  json_t *list = json_object_get(now, "tenants");
  size_t n = json_array_size(list);
  json_t **rows = xcalloc(n ? n : 1, sizeof *rows);
  json_array_foreach(list, i, e) {
    rows[i] = top_row(e, json_object_get(index, cli_jstr(e, "name", "")), secs);
    if (rows[i] == NULL) abort();
  }
  qsort(rows, n, sizeof *rows, compare_rows);
  json_t *out = json_array();
  for (i = 0; i < n; i++) json_array_append_new(out, rows[i]);
  free(rows);
  json_decref(index);
  return out;
}

static void top_print(const cli_options *o, json_t *rows, int live) {
  if (o->json) {
    json_t *body = json_pack("{s:O}", "tenants", rows);
    char *s = dump_compact(body);
    puts(s);
    free(s);
    json_decref(body);
    return;
  }
  if (live) {
    char when[32];
    time_t t = time(NULL);
    struct tm tm;
    strftime(when, sizeof when, "%H:%M:%S", localtime_r(&t, &tm));
    printf("\033[H\033[2Jedgectl top  %s  %s  %zu tenants  (q quits)\n\n", o->node, when,
           json_array_size(rows));
  }
  static const char *const heads[] = {"NAME",     "STATE", "REQ/S",   "ERR/S",
                                      "CPU_MS/S", "HEAP",  "REQUESTS"};
  static const int right[] = {0, 0, 1, 1, 1, 1, 1};
  cli_table t = {7, heads, right, NULL, 0};
  size_t i;
  json_t *e;
  json_array_foreach(rows, i, e) {
    char *row[7] = {xstrdup(cli_jstr(e, "name", "?")), xstrdup(cli_jstr(e, "state", "-")),
                    xasprintf("%.1f", cli_jnum(e, "requests_per_s")),
                    xasprintf("%.1f", cli_jnum(e, "errors_per_s")),
                    xasprintf("%.1f", cli_jnum(e, "cpu_ms_per_s")),
                    cli_format_bytes(cli_jnum(e, "heap_used")),
                    xasprintf("%.0f", cli_jnum(e, "requests"))};
    cli_table_add(&t, row);
  }
  cli_table_print(&t, 0);
}

/* Waits up to ms for 'q' on a terminal; returns 1 when the user wants out. */
static int top_wait(long ms) {
  double until = mono_ms() + (double)ms;
  while (!top_stop) {
    double left = until - mono_ms();
    if (left <= 0) return 0;
    struct pollfd pfd = {.fd = STDIN_FILENO, .events = POLLIN};
    int rc = poll(&pfd, top_tty_raw ? 1 : 0, (int)left + 1);
    if (rc > 0) {
      char c;
      ssize_t got = read(STDIN_FILENO, &c, 1);
      if (got <= 0 || c == 'q' || c == 'Q' || c == 4 /* Ctrl-D */) return 1;
    }
  }
  return 1;
}

/* top: a live view refreshed every second; one snapshot when stdout is not a terminal. */
int cli_cmd_top(const cli_options *o) {
  cli_expect_operands(o, 0, 0);
  int live = isatty(STDOUT_FILENO);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = top_on_signal; /* no SA_RESTART: poll() must return */
  if (sigaction(SIGINT, &sa, NULL) < 0 || sigaction(SIGTERM, &sa, NULL) < 0)
    cli_fail("cannot handle signals: %s", strerror(errno));
  if (live && isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &top_saved_tty) == 0) {
    struct termios raw = top_saved_tty;
    raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO); /* keys one at a time; Ctrl-C still a signal */
    raw.c_cc[VMIN] = 1;
    raw.c_cc[VTIME] = 0;
    if (tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0) top_tty_raw = 1;
  }
  atexit(top_restore); /* cli_fail() exits from inside a request */
  if (live && !o->json) fputs("\033[?25l", stdout);
  json_t *before = call_json(o, "GET", "/v1/tenants");
  double before_ms = mono_ms();
  int quit = top_wait(1000);
  while (!quit) {
    json_t *now = call_json(o, "GET", "/v1/tenants");
    double now_ms = mono_ms();
    json_t *rows = top_rows(now, before, (now_ms - before_ms) / 1e3);
    top_print(o, rows, live);
    fflush(stdout);
    json_decref(rows);
    json_decref(before);
    before = now;
    before_ms = now_ms;
    if (!live) break;
    quit = top_wait(1000);
  }
  json_decref(before);
  top_restore();
  return 0;
}
