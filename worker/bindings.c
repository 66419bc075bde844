/*
 * Host calls from a tenant's version, routed by the kind of binding that
 * made them: the binding's name is looked up in the tenant's spec ("DB" ->
 * facet); the global fetch() has the empty binding name and goes to the
 * egress. This file owns that routing and the memo of the binding named
 * last; each kind's calls are its own file's (facet_link.c, egress_link.c,
 * loader_link.c, stream.c).
 */
#include <string.h>

#include "base.h"
#include "sandbox.h"

/* The runtime's own binding for streamed request bodies (stream.c);
 * deployed binding names are identifiers, so none can be this one. */
#define REQUEST_BINDING " request"

/* Names are a few bytes: compared here, they cost less than a call to the
 * C library's strcmp, whose vector code showed in a facet exec's profile. */
static int same_name(const char *a, const char *b) {
  while (*a != '\0' && *a == *b) {
    a++;
    b++;
  }
  return *a == *b;
}

/* op is "exec", compared with the letters themselves: the literal's bytes
 * were one more cache line read on every exec. */
static int is_exec(const char *op) {
  return op[0] == 'e' && op[1] == 'x' && op[2] == 'e' && op[3] == 'c' && op[4] == '\0';
}

/* A binding's type from the spec, remembered as the binding named last: a
 * facet's exec calls come by the thousand, and three spec lookups each
 * showed in their cost. The spec is never changed while loaded, so its key
 * and type strings stay put. */
static __attribute__((noinline)) const char *binding_lookup(sandbox *l, const char *binding) {
  if (strcmp(binding, REQUEST_BINDING) == 0) return "stream";
  json_t *bindings = json_object_get(l->spec, "bindings");
  void *at = json_object_iter_at(bindings, binding);
  if (at == NULL) return NULL;
  l->binding_seen = json_object_iter_key(at);
  size_t len = strlen(l->binding_seen);
  if (len < sizeof l->binding_seen_copy)
    memcpy(l->binding_seen_copy, l->binding_seen, len + 1);
  else
    l->binding_seen_copy[0] = '\0';
  l->binding_seen_type = json_string_value(json_object_get(json_object_iter_value(at), "type"));
  l->binding_seen_facet = l->binding_seen_type != NULL && strcmp(l->binding_seen_type, "facet") == 0;
  return l->binding_seen_type;
}

/* (The memo's check inline, the lookup out of line: a call that finds its
 * binding in the memo then needs no frame of its own.) */
static inline const char *binding_type(sandbox *l, const char *binding) {
  if (binding[0] == '\0') return "fetch";
  if (l->binding_seen != NULL && same_name(binding, l->binding_seen))
    return l->binding_seen_type;
  return binding_lookup(l, binding);
}

static int bindings_call_sync(void *data, const iso_call *call, iso_wire *result) {
  sandbox *l = data;
  const char *type = binding_type(l, call->binding);
  if (type && strcmp(type, "facet") == 0) return facet_link_call(l, call, result);
  if (type && strcmp(type, "stream") == 0)
    return stream_link_call_sync(l->w, l, call, result);
  if (type && strcmp(type, "loader") == 0) return loader_link_call_sync(l, call, result);
  sandbox_call_error(result, "TypeError", "this binding has no synchronous operations");
  return -1;
}

/* Only a facet's exec takes the decoded path; every other call declines. */
static __attribute__((noinline)) int values_routed(sandbox *l, const iso_call *call,
                                                   const iso_wire_value *args, uint32_t n_args,
                                                   iso_numbers *numbers, iso_wire *result) {
  /* (Whether the binding named is a facet was decided when binding_type
   * last looked it up: no string compared for it here.) */
  const char *type = binding_type(l, call->binding);
  if (type == l->binding_seen_type && l->binding_seen_facet && is_exec(call->op))
    return facet_link_exec(l, call, args, n_args, numbers, result);
  return 1;
}

/* (Hot: on every facet exec, and placed with the rest of its path. A call
 * for the binding named last is handed on with a jump; any other is routed
 * out of line, so that this needs no frame of its own.) */
__attribute__((hot))
static int bindings_call_values(void *data, const iso_call *call, const iso_wire_value *args,
                                uint32_t n_args, iso_numbers *numbers, iso_wire *result) {
  sandbox *l = data;
  if (l->binding_seen_facet && call->binding[0] != '\0' &&
      same_name(call->binding, l->binding_seen_copy) && is_exec(call->op))
    return facet_link_exec(l, call, args, n_args, numbers, result);
  return values_routed(l, call, args, n_args, numbers, result);
}

static int bindings_call_async(void *data, const iso_call *call, iso_wire *result) {
  sandbox *l = data;
  const char *type = binding_type(l, call->binding);
  if (type && strcmp(type, "fetch") == 0) {
    /* The output gate: no request leaves before the writes it may carry
     * are durable. */
    int gate = facet_link_gate(l);
    if (gate < 0) {
      sandbox_call_error(result, "Error", "the worker's writes could not be stored");
      return -1;
    }
    if (gate > 0) {
      sandbox_call_error(result, "Error",
                         "fetch() cannot be called inside transactionSync(): its writes are "
                         "not stored until the function returns");
      return -1;
    }
    return egress_link_call(l, call, result);
  }
  if (type && strcmp(type, "loader") == 0) return loader_link_call(l, call, result);
  if (type && strcmp(type, "stream") == 0)
    return stream_link_call_async(l->w, l, call, result);
  sandbox_call_error(result, "TypeError", "this binding has no asynchronous operations");
  return -1;
}

const iso_host_calls *bindings_host_calls(void) {
  static const iso_host_calls calls = {
      .call_sync = bindings_call_sync,
      .call_async = bindings_call_async,
      .call_values = bindings_call_values,
  };
  return &calls;
}
