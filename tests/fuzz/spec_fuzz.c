/*
 * libFuzzer target for deploy bodies (node/spec.c): the body and
 * Content-Type of PUT /v1/workers/{name} on the control API.
 *
 * Input layout: byte 0 picks the Content-Type (see content_types), the rest
 * is the body. Checked: exactly one of spec and error comes back; an error
 * has an "error" string and its status is one the API documents; the error
 * body serialises (the API sends it); an accepted spec has its main module
 * among its modules and limits filled in, and parses again to itself when
 * sent back as JSON (a stored spec is re-read on restart).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "node.h"

/* Says which check failed: the crash input alone does not. */
#define CHECK(cond)                                                              \
  do {                                                                           \
    if (!(cond)) {                                                               \
      fprintf(stderr, "spec_fuzz:%d: check failed: %s\n", __LINE__, #cond); \
      abort();                                                                   \
    }                                                                            \
  } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const content_types[] = {
    "application/json",
    "application/javascript",
    "text/javascript; charset=utf-8",
    " Application/JSON;charset=utf-8",
    "application/jsonx",
    "text/plain",
    "",
    NULL,
};

static void check_spec(json_t *spec) {
  CHECK(json_is_object(spec));
  const char *main_module = json_string_value(json_object_get(spec, "main_module"));
  json_t *modules = json_object_get(spec, "modules");
  CHECK(main_module != NULL && json_is_object(modules));
  CHECK(json_is_string(json_object_get(modules, main_module)));
  CHECK(json_is_object(json_object_get(spec, "bindings")));
  json_t *limits = json_object_get(spec, "limits");
  CHECK(json_is_object(limits));
  static const char *const keys[] = {"cpu_ms", "memory_mb", "wall_ms"};
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
    CHECK(json_integer_value(json_object_get(limits, keys[i])) > 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  const char *ct = content_types[data[0] % (sizeof content_types / sizeof content_types[0])];
  json_t *spec = NULL, *error = NULL;
  int status = node_spec_parse(ct, data + 1, size - 1, &spec, &error);
  if (status != 0) {
    CHECK(status == 400 || status == 413 || status == 415);
    CHECK(spec == NULL && json_is_object(error));
    CHECK(json_is_string(json_object_get(error, "error")));
    char *text = json_dumps(error, JSON_COMPACT);
    CHECK(text != NULL);
    free(text);
    json_decref(error);
    return 0;
  }
  CHECK(error == NULL);
  check_spec(spec);

  /* The accepted spec, sent again as a JSON body, is accepted as it is. */
  char *text = json_dumps(spec, JSON_COMPACT);
  CHECK(text != NULL);
  json_t *again = NULL;
  CHECK(node_spec_parse("application/json", (const uint8_t *)text, strlen(text), &again,
                        &error) == 0);
  CHECK(json_equal(again, spec));
  json_decref(again);
  free(text);
  json_decref(spec);
  return 0;
}
