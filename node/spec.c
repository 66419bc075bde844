/*
 * Deploy bodies: what PUT /v1/workers/{name} (and POST /v1/run) accepts,
 * checked before any worker process sees it, with the limits a spec does not
 * name filled with proto.h's PROTO_SPEC_DEFAULT_*. Every rejection names the
 * offending part. Also the time format the control API shows (node_iso8601).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "egress.h"
#include "node.h"

#define MODULE_NAME_MAX 255
#define BINDING_NAME_MAX 64

void node_iso8601(int64_t ms, char out[32]) {
  time_t secs = (time_t)(ms / 1000);
  struct tm tm;
  gmtime_r(&secs, &tm);
  char buf[96]; /* roomy enough for any int the compiler can imagine */
  snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
           tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(ms % 1000));
  snprintf(out, 32, "%.31s", buf);
}

/* {"error": message} plus one string detail when detail_key is set. */
static json_t *error_body(const char *detail_key, const char *detail, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static json_t *error_body(const char *detail_key, const char *detail, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  json_t *body = json_object();
  json_object_set_new(body, "error", json_string(msg));
  if (detail_key && detail) {
    json_t *d = json_string(detail);
    /* Details echo client input, which may not be valid UTF-8. */
    json_object_set_new(body, detail_key, d ? d : json_null());
  }
  return body;
}

static json_t *too_large(void) {
  return json_pack("{s:s, s:I}", "error", "script too large", "limit_bytes",
                   (json_int_t)NODE_SCRIPT_MAX_BYTES);
}

static int module_is_wasm(const char *name, size_t len) {
  return len > 5 && strcmp(name + len - 5, ".wasm") == 0;
}

/* Relative, canonical ("a/b.js", never "./", "../", "//" or "\"), ending .js, .mjs, .ts,
 * .mts (TypeScript: the worker process strips its types), .wasm or .py (a Python module:
 * docs/python.md). */
static int module_name_valid(const char *name, size_t len) {
  if (len == 0 || len > MODULE_NAME_MAX || strlen(name) != len) return 0;
  if (name[0] == '/') return 0;
  size_t seg = 0;
  for (size_t i = 0; i <= len; i++) {
    char c = name[i];
    if (c == '/' || c == '\0') {
      if (seg == 0) return 0;
      const char *s = name + i - seg;
      if ((seg == 1 && s[0] == '.') || (seg == 2 && s[0] == '.' && s[1] == '.')) return 0;
      seg = 0;
      continue;
    }
    if ((unsigned char)c < 0x20 || c == 0x7f || c == '\\') return 0;
    seg++;
  }
  return (len > 3 && strcmp(name + len - 3, ".js") == 0) ||
         (len > 4 && strcmp(name + len - 4, ".mjs") == 0) ||
         (len > 3 && strcmp(name + len - 3, ".ts") == 0) ||
         (len > 4 && strcmp(name + len - 4, ".mts") == 0) || module_is_wasm(name, len) ||
         (len > 3 && strcmp(name + len - 3, ".py") == 0);
}

/* Standard base64 with its padding: what {"wasm": ...} holds. */
static int base64_valid(const char *s, size_t len) {
  if (len == 0 || len % 4 != 0) return 0;
  size_t pad = s[len - 1] == '=' ? (s[len - 2] == '=' ? 2 : 1) : 0;
  for (size_t i = 0; i < len - pad; i++) {
    char c = s[i];
    if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
          c == '+' || c == '/'))
      return 0;
  }
  return 1;
}

/* A module's value: its source string, or for a .wasm module {"wasm":
 * base64}, whose base64 becomes its source here (the worker process
 * decodes and compiles it: isolate/modules.cc). NULL when it is fine, else
 * why not. */
static const char *module_value(json_t *modules, void *it, const char *name, size_t *counted) {
  json_t *src = json_object_iter_value(it);
  if (!module_is_wasm(name, strlen(name))) {
    if (!json_is_string(src)) return "the source must be a string";
    *counted = json_string_length(src);
    return NULL;
  }
  json_t *b64 = json_object_get(src, "wasm");
  if (!json_is_object(src) || json_object_size(src) != 1 || !json_is_string(b64))
    return "a .wasm module is an object {\"wasm\": base64 of the module's bytes}";
  if (!base64_valid(json_string_value(b64), json_string_length(b64)))
    return "\"wasm\" must be the module's bytes in standard base64, with padding";
  *counted = json_string_length(b64);
  if (json_object_iter_set(modules, it, b64) != 0) abort();
  return NULL;
}

/* A JavaScript identifier in ASCII, so env.NAME works. */
static int binding_name_valid(const char *name, size_t len) {
  if (len == 0 || len > BINDING_NAME_MAX || strlen(name) != len) return 0;
  for (size_t i = 0; i < len; i++) {
    char c = name[i];
    int alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == '$';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return 0;
  }
  return 1;
}

static int parse_modules(json_t *modules, json_t **error) {
  if (json_is_object(modules) && json_object_size(modules) > PROTO_SPEC_MAX_MODULES) {
    *error = error_body(NULL, NULL, "too many modules: %zu, at most %d in one worker",
                        json_object_size(modules), PROTO_SPEC_MAX_MODULES);
    return 400;
  }
  if (!json_is_object(modules) || json_object_size(modules) == 0) {
    *error = error_body(NULL, NULL, "\"modules\" must be a non-empty object of name -> source");
    return 400;
  }
  size_t total = 0;
  const char *name;
  void *it;
  for (it = json_object_iter(modules); it; it = json_object_iter_next(modules, it)) {
    name = json_object_iter_key(it);
    if (!module_name_valid(name, json_object_iter_key_len(it))) {
      *error = error_body("module", name,
                          "modules: \"%s\": a module name is a relative path without \".\" or "
                          "\"..\" segments, ending in .js, .mjs, .ts, .mts, .wasm or .py",
                          name);
      return 400;
    }
    size_t counted = 0;
    const char *why = module_value(modules, it, name, &counted);
    if (why != NULL) {
      *error = error_body("module", name, "modules: \"%s\": %s", name, why);
      return 400;
    }
    total += counted;
  }
  if (total > NODE_SCRIPT_MAX_BYTES) {
    *error = too_large();
    return 413;
  }
  return 0;
}

static int parse_limit(json_t *limits, const char *key, long long min, long long max,
                       long long def, json_t *out, json_t **error) {
  json_t *v = json_object_get(limits, key);
  if (v == NULL) {
    json_object_set_new(out, key, json_integer(def));
    return 0;
  }
  if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max) {
    *error = error_body("limit", key, "limits: \"%s\": must be an integer between %lld and %lld",
                        key, min, max);
    return 400;
  }
  json_object_set(out, key, v);
  return 0;
}

static int parse_limits(json_t *limits, json_t **out, json_t **error) {
  if (limits != NULL && !json_is_object(limits)) {
    *error = error_body(NULL, NULL, "\"limits\" must be an object");
    return 400;
  }
  const char *key;
  json_t *v;
  json_object_foreach(limits, key, v) {
    if (strcmp(key, "cpu_ms") != 0 && strcmp(key, "memory_mb") != 0 &&
        strcmp(key, "wall_ms") != 0 && strcmp(key, "facet_mb") != 0 &&
        strcmp(key, "sub_requests") != 0 && strcmp(key, "children") != 0 &&
        strcmp(key, "pinned_children") != 0) {
      *error = error_body("limit", key,
                          "limits: \"%s\": unknown limit (cpu_ms, memory_mb, wall_ms, facet_mb, "
                          "sub_requests, children, pinned_children)",
                          key);
      return 400;
    }
  }
  *out = json_object();
  int status = parse_limit(limits, "cpu_ms", 1, 30000, PROTO_SPEC_DEFAULT_CPU_MS, *out, error);
  if (status == 0)
    status = parse_limit(limits, "memory_mb", 8, 4096, PROTO_SPEC_DEFAULT_MEMORY_MB, *out, error);
  if (status == 0)
    status = parse_limit(limits, "wall_ms", 10, 300000, PROTO_SPEC_DEFAULT_WALL_MS, *out, error);
  /* Only when given: the facet size limit otherwise follows the node's default. */
  if (status == 0 && json_object_get(limits, "facet_mb"))
    status = parse_limit(limits, "facet_mb", 1, 1048576, 1024, *out, error);
  /* Only when given: the worker process applies the default of 50 itself. */
  if (status == 0 && json_object_get(limits, "sub_requests"))
    status = parse_limit(limits, "sub_requests", 1, 1000, EGRESS_DEFAULT_SUB_REQUESTS, *out, error);
  /* Only when given, too: the worker process applies proto.h's defaults. */
  if (status == 0 && json_object_get(limits, "children"))
    status = parse_limit(limits, "children", 1, PROTO_SPEC_MAX_CHILDREN,
                         PROTO_SPEC_DEFAULT_CHILDREN, *out, error);
  if (status == 0 && json_object_get(limits, "pinned_children"))
    status = parse_limit(limits, "pinned_children", 1, PROTO_SPEC_MAX_CHILDREN,
                         PROTO_SPEC_DEFAULT_PINNED_CHILDREN, *out, error);
  if (status != 0) {
    json_decref(*out);
    *out = NULL;
  }
  return status;
}

/* Capability bindings carry no value: the runtime builds their objects. */
static int binding_is_capability(const char *type) {
  return strcmp(type, "facet") == 0 || strcmp(type, "loader") == 0;
}

enum { SPEC_MAX_LOADER_POLICIES = 16 };

/* A loader's "policies": the egress policies (worker names) its children's
 * globalOutbound may name besides the worker's own. */
static const char *loader_policies_problem(json_t *policies) {
  if (!json_is_array(policies) || json_array_size(policies) > SPEC_MAX_LOADER_POLICIES)
    return "\"policies\" must be an array of at most 16 worker names";
  size_t i;
  json_t *p;
  json_array_foreach(policies, i, p) {
    const char *name = json_string_value(p);
    if (name == NULL || !worker_name_valid(name, strlen(name)))
      return "\"policies\" must hold worker names ([a-z0-9][a-z0-9-]{0,62})";
  }
  return NULL;
}

static const char *binding_problem(json_t *b) {
  if (!json_is_object(b)) return "must be an object {\"type\": ..., \"value\": ...}";
  const char *type = json_string_value(json_object_get(b, "type"));
  const char *key;
  json_t *v;
  json_object_foreach(b, key, v) {
    if (type && strcmp(type, "loader") == 0 && strcmp(key, "policies") == 0) {
      const char *why = loader_policies_problem(v);
      if (why) return why;
    } else if (strcmp(key, "type") != 0 && strcmp(key, "value") != 0) {
      return "unknown member (a binding has \"type\" and \"value\"; a loader may have "
             "\"policies\")";
    }
  }
  json_t *value = json_object_get(b, "value");
  if (type == NULL) return "\"type\" must be a string";
  if (strcmp(type, "text") == 0) return json_is_string(value) ? NULL : "\"value\" must be a string";
  if (strcmp(type, "json") == 0) return value ? NULL : "\"value\" is missing";
  if (binding_is_capability(type)) return value ? "takes no \"value\"" : NULL;
  return "unsupported type (supported: text, json, facet, loader)";
}

static int parse_bindings(json_t *bindings, json_t **error) {
  if (bindings != NULL && !json_is_object(bindings)) {
    *error = error_body(NULL, NULL, "\"bindings\" must be an object");
    return 400;
  }
  void *it;
  for (it = json_object_iter(bindings); it; it = json_object_iter_next(bindings, it)) {
    const char *name = json_object_iter_key(it);
    const char *why = NULL;
    if (!binding_name_valid(name, json_object_iter_key_len(it)))
      why = "a binding name is a JavaScript identifier of at most 64 characters";
    else
      why = binding_problem(json_object_iter_value(it));
    if (why) {
      *error = error_body("binding", name, "bindings: \"%s\": %s", name, why);
      return 400;
    }
  }
  return 0;
}

static int parse_main(json_t *root, json_t *modules, const char **main_module, json_t **error) {
  json_t *m = json_object_get(root, "main_module");
  if (m == NULL) {
    if (json_object_size(modules) == 1) {
      *main_module = json_object_iter_key(json_object_iter(modules));
      return 0;
    }
    *error = error_body(NULL, NULL, "\"main_module\" is required when there are several modules");
    return 400;
  }
  if (!json_is_string(m)) {
    *error = error_body(NULL, NULL, "\"main_module\" must be a string");
    return 400;
  }
  if (json_object_get(modules, json_string_value(m)) == NULL) {
    *error = error_body("module", json_string_value(m),
                        "\"main_module\": \"%s\" is not one of the modules", json_string_value(m));
    return 400;
  }
  *main_module = json_string_value(m);
  return 0;
}

/* The allow-list rules (egress/egress.h), checked by the same code the egress runs. */
static int parse_egress(json_t *rules, json_t **error) {
  char *why = NULL;
  egress_policy *p = egress_policy_parse(rules, &why);
  if (p == NULL) {
    *error = error_body(NULL, NULL, "%s", why);
    free(why);
    return 400;
  }
  egress_policy_free(p);
  return 0;
}

static int parse_json_body(const uint8_t *body, size_t len, json_t **spec, json_t **error) {
  if (len == 0) { /* jansson would only say "wrong arguments" */
    *error = error_body(NULL, NULL, "the body is empty: send a JSON object with \"modules\"");
    return 400;
  }
  json_error_t jerr;
  json_t *root = json_loadb((const char *)body, len, JSON_REJECT_DUPLICATES, &jerr);
  if (root == NULL) {
    *error = json_pack("{s:s+, s:i, s:i, s:i}", "error", "invalid JSON: ", jerr.text, "line",
                       jerr.line, "column", jerr.column, "position", jerr.position);
    /* jansson's text quotes the body near the error, which may not be UTF-8. */
    if (*error == NULL)
      *error = json_pack("{s:s, s:i, s:i, s:i}", "error", "invalid JSON", "line", jerr.line,
                         "column", jerr.column, "position", jerr.position);
    return 400;
  }
  int status = 400;
  json_t *limits = NULL;
  if (!json_is_object(root)) {
    *error = error_body(NULL, NULL, "the body must be a JSON object");
    goto done;
  }
  const char *key;
  json_t *v;
  json_object_foreach(root, key, v) {
    if (strcmp(key, "main_module") && strcmp(key, "modules") && strcmp(key, "limits") &&
        strcmp(key, "bindings") && strcmp(key, "egress")) {
      *error = error_body("key", key,
                          "unknown key \"%s\" (expected main_module, modules, limits, bindings, "
                          "egress)",
                          key);
      goto done;
    }
  }
  json_t *modules = json_object_get(root, "modules");
  const char *main_module = NULL;
  if ((status = parse_modules(modules, error)) != 0) goto done;
  if ((status = parse_main(root, modules, &main_module, error)) != 0) goto done;
  if ((status = parse_limits(json_object_get(root, "limits"), &limits, error)) != 0) goto done;
  json_t *bindings = json_object_get(root, "bindings");
  if ((status = parse_bindings(bindings, error)) != 0) goto done;
  json_t *egress = json_object_get(root, "egress");
  if (egress && (status = parse_egress(egress, error)) != 0) goto done;
  *spec = json_pack("{s:s, s:O, s:o, s:o}", "main_module", main_module, "modules", modules,
                    "bindings", bindings ? json_incref(bindings) : json_object(), "limits",
                    limits);
  if (egress) json_object_set(*spec, "egress", egress);
  limits = NULL;
  status = 0;
done:
  json_decref(limits);
  json_decref(root);
  return status;
}

json_t *node_spec_single(const char *source, size_t len, const char *name) {
  json_t *src = json_stringn(source, len);
  if (src == NULL) return NULL;
  return json_pack("{s:s, s:{s:o}, s:{}, s:{s:i, s:i, s:i}}", "main_module", name, "modules",
                   name, src, "bindings", "limits", "cpu_ms", PROTO_SPEC_DEFAULT_CPU_MS,
                   "memory_mb", PROTO_SPEC_DEFAULT_MEMORY_MB, "wall_ms", PROTO_SPEC_DEFAULT_WALL_MS);
}

/* The media type without parameters, compared case-insensitively. */
static int media_type_is(const char *content_type, const char *type) {
  size_t n = strlen(type);
  while (*content_type == ' ' || *content_type == '\t') content_type++;
  if (strncasecmp(content_type, type, n) != 0) return 0;
  char c = content_type[n];
  return c == '\0' || c == ';' || c == ' ' || c == '\t';
}

int node_spec_parse(const char *content_type, const uint8_t *body, size_t len, json_t **spec,
                    json_t **error) {
  *spec = NULL;
  *error = NULL;
  /* One TypeScript module is index.ts, its types stripped where it is compiled. */
  int ts = content_type && (media_type_is(content_type, "application/typescript") ||
                            media_type_is(content_type, "text/typescript"));
  if (content_type && (ts || media_type_is(content_type, "application/javascript") ||
                       media_type_is(content_type, "text/javascript"))) {
    if (len > NODE_SCRIPT_MAX_BYTES) {
      *error = too_large();
      return 413;
    }
    if (len == 0) {
      *error = error_body(NULL, NULL, "the script is empty");
      return 400;
    }
    /* A JSON body cannot carry U+0000 either, and the registry reads
     * modules back as JSON: such a worker would come back empty. */
    if (memchr(body, '\0', len) != NULL) {
      *error = error_body(NULL, NULL, "the script has a NUL byte");
      return 400;
    }
    *spec = node_spec_single((const char *)body, len, ts ? "index.ts" : "index.js");
    if (*spec == NULL) {
      *error = error_body(NULL, NULL, "the script is not valid UTF-8");
      return 400;
    }
    return 0;
  }
  if (content_type && media_type_is(content_type, "application/json"))
    return parse_json_body(body, len, spec, error);
  *error = error_body("content_type", content_type ? content_type : "",
                      "unsupported content type: send application/javascript or "
                      "application/typescript (one module) or application/json");
  return 415;
}
