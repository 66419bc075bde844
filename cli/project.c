/*
 * Module files and project folders: how files on disk become the
 * "main_module" and "modules" of a deploy, and how a project's config file
 * (edgenode.json) becomes a whole deploy.
 *
 * edgenode.toml is read by toml.c into the same JSON.
 *
 * Module names are paths relative to one directory (the main module's, or a
 * project's base_dir), so that relative imports resolve on the node as they
 * do on disk. The config takes wrangler's keys where the two mean the same
 * (name, main, base_dir, find_additional_modules, rules, vars, d1_databases,
 * limits, routes) and edgenode's own for the rest (modules, bindings,
 * egress); wrangler keys that change what a worker can do and have no
 * counterpart here are refused rather than ignored. docs/control-api.md has
 * the table.
 */
#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base.h"
#include "cli.h"

/* A walk below base_dir stops here: a project is not a home directory. */
#define PROJECT_MAX_ENTRIES 20000
#define PROJECT_MAX_DEPTH 32

/* ---- paths ---- */

/*
 * `path` made absolute against the working directory and lexically
 * canonical: no "." or ".." segments, no doubled or trailing slashes.
 * Lexical, not realpath(): module names are what the user typed, and a
 * symlinked file inside the directory still belongs to it.
 */
static char *path_canonical(const char *path) {
  char *in;
  if (path[0] != '/') {
    char *cwd = getcwd(NULL, 0);
    if (cwd == NULL) cli_fail("cannot read the working directory: %s", strerror(errno));
    in = xasprintf("%s/%s", cwd, path);
    free(cwd);
  } else {
    in = xstrdup(path);
  }
  /* Each kept segment is appended as "/seg"; ".." drops the last one. */
  char *out = xmalloc(strlen(in) + 2);
  size_t len = 0;
  for (char *seg = in; *seg;) {
    size_t n = strcspn(seg, "/");
    if (n == 2 && seg[0] == '.' && seg[1] == '.') {
      while (len > 0 && out[len - 1] != '/') len--;
      if (len > 0) len--;
    } else if (n > 0 && !(n == 1 && seg[0] == '.')) {
      out[len++] = '/';
      memcpy(out + len, seg, n);
      len += n;
    }
    seg += n;
    if (*seg == '/') seg++;
  }
  if (len == 0) out[len++] = '/';
  out[len] = '\0';
  free(in);
  return out;
}

/* The directory part of a canonical path ("/a/b.js" -> "/a", "/b.js" -> "/"). */
static char *path_dir(const char *canonical) {
  const char *slash = strrchr(canonical, '/');
  return slash == canonical ? xstrdup("/") : xstrndup(canonical, (size_t)(slash - canonical));
}

/* `file`'s path below `dir` (both canonical), or NULL when it is not below it. */
static const char *path_below(const char *file, const char *dir) {
  size_t n = strcmp(dir, "/") == 0 ? 0 : strlen(dir);
  if (strncmp(file, dir, n) != 0 || file[n] != '/' || file[n + 1] == '\0') return NULL;
  return file + n + 1;
}

/* `rel` against `dir` (canonical), canonical again. */
static char *path_join(const char *dir, const char *rel) {
  char *joined = rel[0] == '/' ? xstrdup(rel) : xasprintf("%s/%s", dir, rel);
  char *out = path_canonical(joined);
  free(joined);
  return out;
}

/* ---- modules ---- */

/* A module file's text as a JSON string. */
static json_t *read_module(const char *path) {
  size_t len;
  char *text = cli_read_file(path, 0, &len);
  if (text == NULL) cli_fail("%s: %s", path, strerror(errno));
  json_t *s = memchr(text, '\0', len) ? NULL : json_stringn(text, len);
  if (s == NULL) cli_fail("%s: not UTF-8 text", path);
  free(text);
  return s;
}

void cli_add_modules(json_t *body, const char *main_file, const char *const *files, int nfiles) {
  const char *main_path = main_file ? main_file : files[0];
  char *main_canonical = path_canonical(main_path);
  char *dir = path_dir(main_canonical);
  json_t *modules = json_object();
  for (int i = 0; i <= nfiles; i++) {
    const char *path = i < nfiles ? files[i] : main_file;
    if (path == NULL) break;
    char *canonical = path_canonical(path);
    const char *name = path_below(canonical, dir);
    if (name == NULL)
      cli_usage_error("%s is outside %s, the directory of the main module %s: module names are "
                      "paths relative to it",
                      path, dir, main_path);
    if (i == nfiles && json_object_get(modules, name) != NULL) { /* --main was listed */
      free(canonical);
      break;
    }
    if (json_object_get(modules, name) != NULL)
      cli_usage_error("%s: module %s is given twice", path, name);
    if (json_object_set_new(modules, name, read_module(path)) < 0)
      cli_fail("%s: file name is not UTF-8", path);
    free(canonical);
  }
  cli_jset(body, "main_module", json_string(path_below(main_canonical, dir)));
  cli_jset(body, "modules", modules);
  free(main_canonical);
  free(dir);
}

/* ---- globs ---- */

/* One '/'-separated segment of s, copied into buf (segments longer than buf never match). */
static const char *segment(const char *s, char *buf, size_t cap, int *fits) {
  size_t n = strcspn(s, "/");
  *fits = n < cap;
  if (*fits) {
    memcpy(buf, s, n);
    buf[n] = '\0';
  }
  return s[n] == '/' ? s + n + 1 : s + n;
}

/*
 * Whether the relative `path` matches `glob`: segments as fnmatch(3) matches
 * them, and a "**" segment for any number of segments (none too).
 */
static int glob_match(const char *glob, const char *path) {
  if (*glob == '\0') return *path == '\0';
  char g[256], p[256];
  int gfits, pfits;
  const char *gnext = segment(glob, g, sizeof g, &gfits);
  if (gfits && strcmp(g, "**") == 0) {
    if (glob_match(gnext, path)) return 1;
    if (*path == '\0') return 0;
    return glob_match(glob, segment(path, p, sizeof p, &pfits));
  }
  if (*path == '\0') return 0;
  const char *pnext = segment(path, p, sizeof p, &pfits);
  return gfits && pfits && fnmatch(g, p, FNM_PERIOD) == 0 && glob_match(gnext, pnext);
}

typedef struct walk {
  const char *file;  /* the config, for errors */
  json_t *globs;     /* array of strings */
  json_t *found;     /* relative path -> true, in the order found */
  size_t entries;
} walk;

static int glob_any(const json_t *globs, const char *rel) {
  size_t i;
  json_t *g;
  json_array_foreach(globs, i, g) {
    if (glob_match(json_string_value(g), rel)) return 1;
  }
  return 0;
}

/*
 * The files below `abs` (rel: its path below base_dir, "" at the top) that
 * a glob matches, in name order. Dot files and node_modules are skipped, and
 * symlinked directories not followed, so that a walk stays in the project.
 */
static void walk_dir(walk *w, const char *abs, const char *rel, int depth) {
  if (depth > PROJECT_MAX_DEPTH) cli_fail("%s: %s is nested too deep to search for modules", w->file, abs);
  struct dirent **names;
  int n = scandir(abs, &names, NULL, alphasort);
  if (n < 0) cli_fail("%s: cannot read directory %s: %s", w->file, abs, strerror(errno));
  for (int i = 0; i < n; i++) {
    const char *name = names[i]->d_name;
    if (++w->entries > PROJECT_MAX_ENTRIES)
      cli_fail("%s: more than %d entries below base_dir: narrow the globs' directory", w->file,
               PROJECT_MAX_ENTRIES);
    if (name[0] != '.' && strcmp(name, "node_modules") != 0) {
      char *child_abs = xasprintf("%s/%s", abs, name);
      char *child_rel = rel[0] ? xasprintf("%s/%s", rel, name) : xstrdup(name);
      struct stat st;
      if (lstat(child_abs, &st) == 0 && S_ISDIR(st.st_mode)) {
        walk_dir(w, child_abs, child_rel, depth + 1);
      } else if (stat(child_abs, &st) == 0 && S_ISREG(st.st_mode) && glob_any(w->globs, child_rel)) {
        cli_jset(w->found, child_rel, json_true());
      }
      free(child_abs);
      free(child_rel);
    }
    free(names[i]);
  }
  free(names);
}

/* ---- the config ---- */

/* Wrangler keys that say nothing about what the worker does here. */
static const char *const ignored_keys[] = {"$schema", "compatibility_date", "compatibility_flags",
                                           "account_id", "workers_dev", "keep_vars", "no_bundle",
                                           "minify", "upload_source_maps", "preview_urls"};
/* Wrangler keys with no counterpart: deploying without them would break the worker. */
static const char *const refused_keys[] = {
    "kv_namespaces", "r2_buckets",   "durable_objects", "services", "queues",   "ai",
    "vectorize",     "hyperdrive",   "analytics_engine_datasets", "browser",    "assets",
    "triggers",      "tail_consumers", "env",           "build",    "site",     "migrations",
    "secrets_store_secrets", "workflows", "send_email", "unsafe",   "dispatch_namespaces"};
static const char *const known_keys[] = {"name",  "main",     "base_dir", "find_additional_modules",
                                         "rules", "modules",  "vars",     "d1_databases",
                                         "bindings", "limits", "egress",  "routes", "route"};

static int in_list(const char *const *list, size_t n, const char *key) {
  for (size_t i = 0; i < n; i++) {
    if (strcmp(list[i], key) == 0) return 1;
  }
  return 0;
}

static void check_keys(const char *file, const json_t *config) {
  const char *k;
  json_t *v;
  json_object_foreach((json_t *)config, k, v) {
    if (in_list(known_keys, ARRAY_SIZE(known_keys), k) || in_list(ignored_keys, ARRAY_SIZE(ignored_keys), k))
      continue;
    if (in_list(refused_keys, ARRAY_SIZE(refused_keys), k))
      cli_fail("%s: \"%s\" has no counterpart in edgenode (bindings: text, json, facet, loader); "
               "remove it to deploy",
               file, k);
    cli_fail("%s: unknown key \"%s\" (known: name, main, base_dir, modules, find_additional_modules, "
             "rules, vars, d1_databases, bindings, limits, egress, routes)",
             file, k);
  }
}

/* config[key] when it has the JSON type `type` (or is absent: NULL); else an error. */
static json_t *get_typed(const char *file, const json_t *config, const char *key, json_type type,
                         const char *what) {
  json_t *v = json_object_get(config, key);
  if (v != NULL && json_typeof(v) != type && !(type == JSON_TRUE && json_is_boolean(v)))
    cli_fail("%s: \"%s\" must be %s", file, key, what);
  return v;
}

/* An array whose every element is a string, or an error naming where. */
static void check_strings(const char *file, const char *where, const json_t *arr) {
  size_t i;
  json_t *e;
  json_array_foreach(arr, i, e) {
    if (!json_is_string(e) || json_string_length(e) == 0)
      cli_fail("%s: %s[%zu] must be a non-empty string", file, where, i);
  }
}

/* The globs that pick modules: "modules", and "rules" with find_additional_modules. */
static json_t *module_globs(const char *file, const json_t *config) {
  json_t *globs = json_array();
  json_t *modules = get_typed(file, config, "modules", JSON_ARRAY, "an array of globs");
  if (modules) {
    check_strings(file, "modules", modules);
    json_array_extend(globs, modules);
  }
  json_t *find = get_typed(file, config, "find_additional_modules", JSON_TRUE, "true or false");
  json_t *rules = get_typed(file, config, "rules", JSON_ARRAY, "an array of {\"type\", \"globs\"}");
  if (rules && !json_is_true(find))
    fprintf(stderr, "edgectl: %s: \"rules\" pick modules only with \"find_additional_modules\": true\n", file);
  if (!json_is_true(find)) return globs;
  if (rules == NULL || json_array_size(rules) == 0) {
    json_array_append_new(globs, json_string("**/*.js"));
    json_array_append_new(globs, json_string("**/*.mjs"));
    json_array_append_new(globs, json_string("**/*.ts"));
    json_array_append_new(globs, json_string("**/*.mts"));
    return globs;
  }
  size_t i;
  json_t *r;
  json_array_foreach(rules, i, r) {
    const char *type = cli_jstr(r, "type", NULL);
    json_t *g = json_object_get(r, "globs");
    if (!json_is_object(r) || type == NULL || !json_is_array(g))
      cli_fail("%s: rules[%zu] must be {\"type\": \"ESModule\", \"globs\": [...]}", file, i);
    if (strcmp(type, "ESModule") != 0)
      cli_fail("%s: rules[%zu]: type \"%s\": edgenode deploys ES modules only (\"ESModule\")", file, i, type);
    char *where = xasprintf("rules[%zu].globs", i);
    check_strings(file, where, g);
    free(where);
    json_array_extend(globs, g);
  }
  return globs;
}

/* A TypeScript declaration file (x.d.ts) holds types only: nothing to run. */
static int is_declaration_file(const char *name) {
  size_t n = strlen(name);
  return (n > 5 && strcmp(name + n - 5, ".d.ts") == 0) ||
         (n > 6 && strcmp(name + n - 6, ".d.mts") == 0);
}

/* main, and every file a glob matches, as modules named below base_dir. */
static void project_modules(cli_project *p, const json_t *config, const char *config_dir) {
  const char *main_rel = json_string_value(get_typed(p->file, config, "main", JSON_STRING, "a path"));
  if (main_rel == NULL || main_rel[0] == '\0')
    cli_fail("%s: \"main\" (the module whose default export handles requests) is required", p->file);
  char *main_abs = path_join(config_dir, main_rel);
  json_t *base_v = get_typed(p->file, config, "base_dir", JSON_STRING, "a path");
  char *base = base_v ? path_join(config_dir, json_string_value(base_v)) : path_dir(main_abs);
  const char *main_name = path_below(main_abs, base);
  if (main_name == NULL)
    cli_fail("%s: main %s is not below base_dir %s: module names are paths relative to it", p->file,
             main_rel, base);
  json_t *modules = json_object();
  cli_jset(modules, main_name, read_module(main_abs));
  walk w = {.file = p->file, .globs = module_globs(p->file, config), .found = json_object()};
  if (json_array_size(w.globs) > 0) walk_dir(&w, base, "", 0);
  const char *rel;
  json_t *v;
  json_object_foreach(w.found, rel, v) {
    if (json_object_get(modules, rel) != NULL || is_declaration_file(rel)) continue;
    char *abs = xasprintf("%s/%s", base, rel);
    cli_jset(modules, rel, read_module(abs));
    free(abs);
  }
  json_decref(w.found);
  json_decref(w.globs);
  cli_jset(p->body, "main_module", json_string(main_name));
  cli_jset(p->body, "modules", modules);
  free(main_abs);
  free(base);
}

/* vars (text, or json when not a string), d1_databases (facet) and bindings, into "bindings". */
static void project_bindings(cli_project *p, const json_t *config) {
  json_t *bindings = json_object();
  const char *k;
  json_t *v;
  json_t *vars = get_typed(p->file, config, "vars", JSON_OBJECT, "an object of NAME: value");
  json_object_foreach(vars, k, v) {
    json_t *b = json_is_string(v) ? json_pack("{s:s, s:O}", "type", "text", "value", v)
                                  : json_pack("{s:s, s:O}", "type", "json", "value", v);
    cli_jset(bindings, k, b);
  }
  json_t *d1 = get_typed(p->file, config, "d1_databases", JSON_ARRAY, "an array of {\"binding\"}");
  size_t i;
  json_array_foreach(d1, i, v) {
    const char *name = cli_jstr(v, "binding", NULL);
    if (name == NULL) cli_fail("%s: d1_databases[%zu] needs \"binding\" (the env name)", p->file, i);
    cli_jset(bindings, name, json_pack("{s:s}", "type", "facet"));
  }
  json_t *own = get_typed(p->file, config, "bindings", JSON_OBJECT, "an object of NAME: {\"type\", \"value\"}");
  json_object_foreach(own, k, v) cli_jset(bindings, k, json_incref(v));
  if (vars || d1 || own) cli_jset(p->body, "bindings", bindings);
  else json_decref(bindings);
}

/* routes: "pattern" strings or {"pattern": ...} objects (wrangler's zone keys are not needed). */
static void project_routes(cli_project *p, const json_t *config) {
  json_t *route = get_typed(p->file, config, "route", JSON_STRING, "a pattern");
  json_t *routes = get_typed(p->file, config, "routes", JSON_ARRAY, "an array of patterns");
  if (route == NULL && routes == NULL) return;
  p->routes = json_array();
  if (route) json_array_append(p->routes, route);
  size_t i;
  json_t *r;
  json_array_foreach(routes, i, r) {
    json_t *pattern = json_is_object(r) ? json_object_get(r, "pattern") : r;
    if (!json_is_string(pattern) || json_string_length(pattern) == 0)
      cli_fail("%s: routes[%zu] must be a pattern (\"api.example.com/*\") or {\"pattern\": ...}", p->file, i);
    json_array_append(p->routes, pattern);
  }
}

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* The config as JSON: a .toml file through the TOML subset, anything else as JSON. */
static json_t *load_config(const char *file) {
  if (!ends_with(file, ".toml")) {
    json_t *j = cli_read_json(file);
    if (!json_is_object(j)) cli_fail("%s: a project config is a JSON object (\"name\", \"main\", ...)", file);
    return j;
  }
  size_t len;
  char *text = cli_read_file(file, 0, &len);
  if (text == NULL) cli_fail("%s: %s", file, strerror(errno));
  char *error = NULL;
  json_t *j = cli_toml_parse(text, len, &error);
  free(text);
  if (j == NULL) {
    char why[320];
    snprintf(why, sizeof why, "%s", error);
    free(error);
    cli_fail("%s: %s", file, why);
  }
  return j;
}

int cli_project_load(const char *config_file, cli_project *p) {
  memset(p, 0, sizeof *p);
  if (config_file == NULL) {
    int json = access("edgenode.json", F_OK) == 0, toml = access("edgenode.toml", F_OK) == 0;
    if (json && toml) cli_fail("both edgenode.json and edgenode.toml are here: keep one, or say which with --config");
    if (!json && !toml) return 0;
    config_file = json ? "edgenode.json" : "edgenode.toml";
  }
  p->file = xstrdup(config_file);
  json_t *config = load_config(config_file);
  check_keys(config_file, config);
  json_t *name = get_typed(config_file, config, "name", JSON_STRING, "a worker name");
  if (name) p->name = xstrdup(json_string_value(name));
  char *canonical = path_canonical(config_file);
  char *dir = path_dir(canonical);
  p->body = json_object();
  project_modules(p, config, dir);
  project_bindings(p, config);
  json_t *limits = get_typed(config_file, config, "limits", JSON_OBJECT, "an object (cpu_ms, memory_mb, ...)");
  if (limits) cli_jset(p->body, "limits", json_incref(limits));
  json_t *egress = get_typed(config_file, config, "egress", JSON_ARRAY, "an array of rules");
  if (egress) cli_jset(p->body, "egress", json_incref(egress));
  project_routes(p, config);
  free(canonical);
  free(dir);
  json_decref(config);
  return 1;
}

void cli_project_free(cli_project *p) {
  free(p->name);
  free(p->file);
  json_decref(p->body);
  json_decref(p->routes);
  memset(p, 0, sizeof *p);
}
