/*
 * A deployed worker's spec, as the supervisor sends it (PROTO_WORKER_SPEC)
 * or as POST /v1/run carries it: its modules, its limits (the defaults of
 * proto.h where it names none), its plain-value env and its capability
 * bindings. Pure: reads JSON, keeps nothing.
 */
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "worker.h"

int spec_modules(json_t *spec, iso_module **out, const char **main_module, const char **why) {
  json_t *modules = json_object_get(spec, "modules");
  *main_module = json_string_value(json_object_get(spec, "main_module"));
  if (!json_is_object(modules) || *main_module == NULL) {
    *why = "spec has no modules or main_module";
    return -1;
  }
  size_t n = json_object_size(modules);
  iso_module *mods = xcalloc(n ? n : 1, sizeof *mods);
  size_t i = 0;
  const char *key;
  json_t *value;
  json_object_foreach(modules, key, value) {
    if (!json_is_string(value)) {
      free(mods);
      *why = "module source is not a string";
      return -1;
    }
    mods[i].name = key;
    mods[i].source = json_string_value(value);
    mods[i].source_len = json_string_length(value);
    i++;
  }
  *out = mods;
  return (int)n;
}

static json_int_t limit_of(json_t *spec, const char *name) {
  return json_integer_value(json_object_get(json_object_get(spec, "limits"), name));
}

void spec_limits(json_t *spec, iso_limits *out) {
  json_int_t cpu = limit_of(spec, "cpu_ms");
  json_int_t mem = limit_of(spec, "memory_mb");
  out->cpu_ms = cpu > 0 ? (uint32_t)cpu : PROTO_SPEC_DEFAULT_CPU_MS;
  out->memory_mb = mem > 0 ? (uint32_t)mem : PROTO_SPEC_DEFAULT_MEMORY_MB;
}

uint64_t spec_facet_mb(json_t *spec) {
  json_int_t mb = limit_of(spec, "facet_mb");
  return mb > 0 ? (uint64_t)mb : 0;
}

uint64_t spec_wall_ms(json_t *spec) {
  json_int_t wall = limit_of(spec, "wall_ms");
  return wall > 0 ? (uint64_t)wall : PROTO_SPEC_DEFAULT_WALL_MS;
}

void spec_children(json_t *spec, size_t *children, size_t *pinned) {
  json_int_t live = limit_of(spec, "children");
  json_int_t kept = limit_of(spec, "pinned_children");
  *children = live > 0 ? (size_t)live : PROTO_SPEC_DEFAULT_CHILDREN;
  *pinned = kept > 0 ? (size_t)kept : PROTO_SPEC_DEFAULT_PINNED_CHILDREN;
}

/* Plain-value bindings become env members; other kinds arrive with later features. */
char *spec_env_json(json_t *spec) {
  json_t *env = json_object();
  const char *name;
  json_t *binding;
  json_object_foreach(json_object_get(spec, "bindings"), name, binding) {
    const char *type = json_string_value(json_object_get(binding, "type"));
    json_t *value = json_object_get(binding, "value");
    if (type && value && (strcmp(type, "text") == 0 || strcmp(type, "json") == 0))
      json_object_set(env, name, value);
  }
  char *text = json_dumps(env, JSON_COMPACT);
  json_decref(env);
  if (text == NULL) abort();
  return text;
}

char *spec_capabilities_json(json_t *spec) {
  json_t *caps = json_object();
  const char *name;
  json_t *b;
  json_object_foreach(json_object_get(spec, "bindings"), name, b) {
    const char *type = json_string_value(json_object_get(b, "type"));
    if (type && strcmp(type, "text") != 0 && strcmp(type, "json") != 0)
      json_object_set_new(caps, name, json_pack("{s:s}", "type", type));
  }
  char *text = json_dumps(caps, JSON_COMPACT);
  json_decref(caps);
  if (text == NULL) abort();
  return text;
}
