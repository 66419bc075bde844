/*
 * isolate: a thin C API over V8 (the only C++ in edgenode). One iso_worker is
 * one V8 isolate with one context running one version of one tenant's
 * modules. Everything else (routing, policy, I/O, timers' clocks) is the
 * caller's, reached through the iso_host callbacks.
 *
 * Threading: an iso_worker is used only from the thread that created it (the
 * worker process's loop thread). Callbacks run on that thread, from inside
 * the iso_* call that entered JavaScript.
 */
#ifndef EDGENODE_ISOLATE_H
#define EDGENODE_ISOLATE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct iso_worker iso_worker;

typedef struct iso_header {
  const char *name;
  size_t name_len;
  const char *value;
  size_t value_len;
} iso_header;

typedef struct iso_module {
  const char *name;    /* "index.js"; relative imports resolve against it */
  const char *source;  /* UTF-8, need not be NUL-terminated */
  size_t source_len;
} iso_module;

typedef struct iso_limits {
  uint32_t memory_mb;  /* V8 heap limit; 0 = 128 */
  uint32_t cpu_ms;     /* per entry into JavaScript; 0 = 50 */
} iso_limits;

/* Why a call failed. */
typedef enum iso_error_kind {
  ISO_OK = 0,
  ISO_ERR_SYNTAX = 1,     /* a module failed to compile */
  ISO_ERR_LINK = 2,       /* an import could not be resolved */
  ISO_ERR_EXCEPTION = 3,  /* JavaScript threw / a promise rejected */
  ISO_ERR_NO_HANDLER = 4, /* no default export with a fetch function */
  ISO_ERR_BAD_RETURN = 5, /* fetch returned something that is not a Response */
  ISO_ERR_CPU = 6,        /* terminated at the CPU limit */
  ISO_ERR_MEMORY = 7,     /* terminated at the heap limit; discard the worker */
  ISO_ERR_INTERNAL = 8,
} iso_error_kind;

/* Details of a failure; strings are owned, free with iso_error_clear(). */
typedef struct iso_error {
  iso_error_kind kind;
  char *message;  /* "SyntaxError: Unexpected token ')'" */
  char *module;   /* module name, when known */
  int line;       /* 1-based; 0 when unknown */
  int column;     /* 1-based; 0 when unknown */
  char *stack;    /* JavaScript stack, when known: for logs, never for clients */
} iso_error;

void iso_error_clear(iso_error *err);

/* A request handed to a worker's fetch handler. Strings need not be NUL-terminated. */
typedef struct iso_request {
  const char *method;
  size_t method_len;
  const char *url;  /* absolute: "http://hello.localhost/items?id=3" */
  size_t url_len;
  const iso_header *headers;
  size_t n_headers;
  const uint8_t *body;  /* NULL when empty */
  size_t body_len;
} iso_request;

/* A worker's response; valid only during the respond callback. */
typedef struct iso_response {
  int status;
  const iso_header *headers;
  size_t n_headers;
  const uint8_t *body;
  size_t body_len;
} iso_response;

typedef enum iso_log_level {
  ISO_LOG_DEBUG = 0,
  ISO_LOG_INFO = 1, /* console.log, console.info */
  ISO_LOG_WARN = 2,
  ISO_LOG_ERROR = 3,
} iso_log_level;

/*
 * What a worker needs from its host. `data` is passed back to each callback.
 * `token` is the one given to iso_worker_dispatch() for the request on whose
 * behalf JavaScript is running (the host knows which one it entered with;
 * timers carry the token of the request that set them).
 */
typedef struct iso_host {
  void *data;
  /* console.* output, already formatted into one string. */
  void (*log)(void *data, uint64_t token, iso_log_level level, const char *msg, size_t len);
  /* setTimeout: call iso_worker_fire_timer(w, timer_id) after delay_ms.
   * Returns 0, or non-zero when the host refuses (JS then gets an exception). */
  int (*timer_start)(void *data, uint64_t token, uint32_t timer_id, double delay_ms);
  void (*timer_cancel)(void *data, uint32_t timer_id);
  /* The fetch handler produced a response (res) or failed (err); called once per request. */
  void (*respond)(void *data, uint64_t token, const iso_response *res, const iso_error *err);
  /* The request is over: responded, and every ctx.waitUntil() promise settled.
   * Called once per request, after respond. */
  void (*done)(void *data, uint64_t token);
} iso_host;

/* Once per process, before anything else. Returns 0 or -1. */
int iso_platform_init(void);

/* "10.2.154.26-node.37" */
const char *iso_v8_version(void);

/*
 * Creates an isolate and context and loads the modules: compile all,
 * instantiate and evaluate `main_module` (top-level await is allowed, bounded
 * by the CPU limit), and check that its default export has a fetch function.
 * `env_json` is a JSON object text that becomes the handler's `env` (may be
 * NULL for {}). Returns NULL and fills *err on failure.
 */
iso_worker *iso_worker_new(const iso_host *host, const iso_limits *limits,
                           const iso_module *modules, size_t n_modules, const char *main_module,
                           const char *env_json, iso_error *err);

/* Disposes the isolate. Pending requests get no more callbacks. */
void iso_worker_free(iso_worker *w);

/*
 * Calls default.fetch(request, env, ctx). respond (and later done) are called
 * for `token`, maybe before this returns. Returns 0, or -1 if the request
 * could not even be started (respond is then never called for it).
 */
int iso_worker_dispatch(iso_worker *w, uint64_t token, const iso_request *req);

/* Runs the timer's callback and the microtasks it queues; token is the one
 * timer_start was given for it. */
void iso_worker_fire_timer(iso_worker *w, uint64_t token, uint32_t timer_id);

/* Requests still running (dispatched and not yet done). */
size_t iso_worker_pending(const iso_worker *w);

/* Set once the worker hit its memory limit: it must not be given new requests. */
int iso_worker_broken(const iso_worker *w);

typedef struct iso_heap_stats {
  size_t used_bytes;
  size_t total_bytes;
  size_t limit_bytes;
  size_t external_bytes;
} iso_heap_stats;

void iso_worker_heap_stats(iso_worker *w, iso_heap_stats *out);

/*
 * Compiles and evaluates in a throwaway isolate, exactly as iso_worker_new
 * would, and disposes it. Returns 0, or -1 with *err filled.
 */
int iso_validate(const iso_limits *limits, const iso_module *modules, size_t n_modules,
                 const char *main_module, iso_error *err);

#ifdef __cplusplus
}
#endif

#endif
