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
  uint32_t cpu_ms;     /* per request, over all its entries into JavaScript; 0 = 50 */
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
  ISO_ERR_MEMORY = 7,     /* past the memory limit (heap or ArrayBuffers); discard the worker */
  ISO_ERR_INTERNAL = 8,
  ISO_ERR_CANCELLED = 9,  /* cut short because another request in the same isolate hit the CPU limit */
} iso_error_kind;

/* Details of a failure; strings are owned, free with iso_error_clear(). */
typedef struct iso_error {
  iso_error_kind kind;
  char *message;  /* "SyntaxError: Unexpected token ')'" */
  char *module;   /* module name, when known */
  int line;       /* 1-based; 0 when unknown */
  int column;     /* 1-based; 0 when unknown */
  char *stack;    /* JS stack if known: for logs and its author, never for HTTP clients */
  uint64_t cpu_ns; /* a failed iso_worker_create: the CPU its modules' top level used */
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
  const uint8_t *body;  /* NULL when empty; ISO_BODY_STREAMED (below) */
  size_t body_len;
} iso_request;

/* As iso_request.body (with body_len 0): the body is not here yet.
 * request.body then reads it as it arrives, through host calls on the
 * binding " request" (see isolate/runtime/README.md). */
extern const uint8_t iso_body_streamed_marker[1];
#define ISO_BODY_STREAMED (iso_body_streamed_marker)

/* A worker's response; valid only during the respond callback (or, without
 * its body, the head a streamed response starts with: iso_host_stream). */
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
  /* The fetch handler produced a response (res) or failed (err); called once
   * per request (a response whose body is streamed goes to iso_host_stream
   * instead, and comes here only if the request fails while it streams). */
  void (*respond)(void *data, uint64_t token, const iso_response *res, const iso_error *err);
  /* The request is over: responded, and every ctx.waitUntil() promise settled.
   * Called once per request, after respond. */
  void (*done)(void *data, uint64_t token);
  /* May be NULL. An entry into JavaScript ended (the outermost: its
   * microtasks ran too) and control goes back to the host: the end of a
   * synchronous run, where a host that batches the run's writes commits
   * them. `cut_short` is non-zero when the entry was terminated (the CPU or
   * memory limit): what the run did is suspect. Must not enter the
   * worker's JavaScript. */
  void (*yielded)(void *data, int cut_short);
} iso_host;

/* Once per process, before anything else: starts V8 and evaluates the
 * runtime (the Web APIs in JavaScript) into a startup snapshot that every
 * worker is then made from; that takes a few hundred milliseconds of one
 * core. Returns 0 or -1. */
int iso_platform_init(void);

/* Maps Pyodide's files from `dir` (the npm package's directory) for Python
 * workers (docs/python.md); before the process's jail closes the file
 * system. Returns 0, or a negative errno: Python workers then fail with
 * "Python is not available in this process". */
int iso_python_open(const char *dir);

/* Keeps `keep_ready` workers with a Python interpreter booted, made by a
 * thread of their own (each takes about two seconds of one core) that
 * starts with the process's first worker with a .py module; such a worker
 * of limit `memory_mb` (0: 128) takes one. 0 stops making them. Returns 0
 * or a negative errno (-ENOENT: no Pyodide). Stop destroys those ready;
 * size says how many are. */
int iso_python_pool_start(size_t keep_ready, uint32_t memory_mb);
void iso_python_pool_stop(void);
size_t iso_python_pool_size(void);

/* "10.2.154.26-node.37" */
const char *iso_v8_version(void);

/*
 * Creates an isolate and context (or takes a blank one from the pool: see
 * iso_pool_fill()) and loads the modules: compile all,
 * instantiate and evaluate `main_module` (top-level await is allowed, bounded
 * by the CPU limit), and check that its default export has a fetch function.
 * `env_json` is a JSON object text that becomes the handler's `env` (may be
 * NULL for {}). Returns NULL and fills *err on failure.
 */
iso_worker *iso_worker_new(const iso_host *host, const iso_limits *limits,
                           const iso_module *modules, size_t n_modules, const char *main_module,
                           const char *env_json, iso_error *err);

/* Disposes the isolate. Pending requests get no more callbacks. Disposing
 * returns the isolate's memory to the system and costs milliseconds: a host
 * that frees a worker right after a request may do it from an idle callback
 * instead. */
void iso_worker_free(iso_worker *w);

/*
 * The pool of blank isolates. A worker's isolate and context take several
 * milliseconds to make (V8 deserializes the runtime's snapshot into them);
 * loading the tenant's modules into a ready one takes a fraction of that.
 * The pool holds blank isolates (context and runtime ready, no tenant
 * code), one pool per process.
 *
 * iso_pool_start() keeps `keep_ready` of them made by a background thread
 * of lower priority, which makes a new one whenever one is taken; calling
 * it again changes the number. iso_pool_stop() stops that thread and
 * disposes what the pool holds, as a host should before it exits.
 * iso_pool_fill() makes blank isolates on the calling thread until the
 * pool holds `target`, or disposes the extras when it holds more
 * (iso_pool_fill(0) empties it). Both return 0, or -1 when an isolate or
 * the thread could not be made.
 *
 * iso_worker_create() (and iso_worker_new(), iso_validate()) takes an
 * isolate from the pool when one is there and the worker's memory limit is
 * the default (128 MiB: V8 fixes a heap's limit when it creates the
 * isolate), and makes one otherwise. Any thread may take one: an isolate
 * is then the taking thread's, as if it had made it. An isolate that has
 * run any tenant's code is never returned to the pool: iso_worker_free()
 * disposes it.
 */
int iso_pool_start(size_t keep_ready);
void iso_pool_stop(void);
int iso_pool_fill(size_t target);
size_t iso_pool_size(void);

/*
 * Heap pages of freed isolates, kept mapped (and zeroed) for the next
 * isolate made, which then does not fault them in again; bounded to 512
 * regions and 64 MiB resident per process.
 */
typedef struct iso_page_stats {
  size_t kept_regions;         /* waiting for an isolate */
  size_t kept_resident_bytes;  /* of those, in memory */
  uint64_t reused_regions;     /* handed to a new isolate since the start */
  uint64_t fresh_regions;      /* mapped anew, since the start */
  size_t shared_code_bytes;    /* isolates' builtins mapped from one copy */
} iso_page_stats;

void iso_page_stats_get(iso_page_stats *out);
/* Gives back to the system what was kept for longer than `older_than_ms`
 * (a host calls it now and then: under a steady load pages are taken again
 * within milliseconds). With the pool's thread running (iso_pool_start),
 * that thread does it once it has its blanks; else the caller does. */
void iso_page_trim(uint64_t older_than_ms);

/* Frees this thread's TypeScript stripper (an isolate of about 50 MiB once
 * it has run) and its cache of stripped modules if no module was stripped
 * for `idle_ms`; the next TypeScript module makes it again. */
void iso_typescript_trim(uint64_t idle_ms);

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

/*
 * CPU time JavaScript used on behalf of request `token` so far: every entry
 * made for it (dispatch, its timers, completions of its host calls, and the
 * microtasks each of those ran), which together are held to the CPU limit.
 * Meant for the respond and done callbacks of `token` (afterwards the
 * request is forgotten and this returns 0). Cheap: a system call only when
 * the current entry has run for more than 50 us. It errs high rather than
 * low (an entry shorter than that counts its wall time); a continuation of
 * another request run by one of these entries' microtask checkpoints is
 * counted here too.
 */
uint64_t iso_worker_request_cpu_ns(const iso_worker *w, uint64_t token);

/* CPU time of entries into the worker that ran for no request still
 * running (the load of its modules, and code that outlived its request:
 * continuations after the request was done, a FinalizationRegistry's
 * callbacks), and how many of those, the load aside, reached the CPU
 * limit. Totals since the worker was made; iso_worker_request_cpu_ns()
 * covers the rest. */
void iso_worker_outside_stats(const iso_worker *w, uint64_t *cpu_ns, uint64_t *cpu_limit_hits);

/* Set once the worker hit its memory limit: it must not be given new
 * requests. After its heap limit, or V8 running out of memory in it, its
 * requests have all been failed; after a request failed at its ArrayBuffer
 * cap, the others run on (timers and completions are still accepted) and the
 * host frees it once they are done. */
int iso_worker_broken(const iso_worker *w);

/* Memory outside w's heap that w's objects keep alive (a dynamic worker
 * behind a stub): V8 collects sooner the more there is. A growth may collect
 * at once, so it is told from inside w's JavaScript (a host call); a
 * shrink may be told at any time. */
void iso_worker_external_memory(iso_worker *w, int64_t change_bytes);

typedef struct iso_heap_stats {
  size_t used_bytes;
  size_t total_bytes;
  size_t limit_bytes;
  size_t external_bytes;
} iso_heap_stats;

void iso_worker_heap_stats(iso_worker *w, iso_heap_stats *out);

/* Gives back what an idle worker's heap holds beyond its live objects: a
 * full collection that also shrinks the young generation to its first
 * size. A worker that has served traffic keeps up to 1 MiB more resident
 * than a fresh one, mostly young-generation pages it no longer needs.
 * Costs 1-2 ms of the calling thread, and the worker's next request some
 * 0.1 ms more (its caches start cold): for a worker that went idle, once per
 * idle period. Does nothing while the worker is running. */
void iso_worker_compact(iso_worker *w);

/*
 * Compiles and evaluates in a throwaway isolate, exactly as iso_worker_new
 * would, and disposes it. Returns 0, or -1 with *err filled.
 */
int iso_validate(const iso_limits *limits, const iso_module *modules, size_t n_modules,
                 const char *main_module, iso_error *err);

/* ---- Values crossing between JavaScript and the host: the wire format ----
 *
 * Bindings (facets, the loader, outbound fetch) pass arguments and results
 * as a compact tagged encoding instead of JSON, so 64-bit integers, binary
 * data and undefined survive the trip. One value is:
 *   0x00 undefined | 0x01 null | 0x02 false | 0x03 true
 *   0x04 number: 8-byte little-endian IEEE double
 *   0x05 bigint: 8-byte little-endian int64 (JavaScript BigInt in int64 range)
 *   0x06 string: u32 LE byte length, UTF-8 bytes
 *   0x07 bytes:  u32 LE length, bytes (an ArrayBuffer in JavaScript)
 *   0x08 array:  u32 LE count, then count values
 *   0x09 object: u32 LE count, then count pairs of (string value, value)
 * Nesting is limited to 64 levels of containers (a host call's argument
 * array is the first).
 */
enum {
  ISO_WIRE_UNDEFINED = 0x00,
  ISO_WIRE_NULL = 0x01,
  ISO_WIRE_FALSE = 0x02,
  ISO_WIRE_TRUE = 0x03,
  ISO_WIRE_NUMBER = 0x04,
  ISO_WIRE_BIGINT = 0x05,
  ISO_WIRE_STRING = 0x06,
  ISO_WIRE_BYTES = 0x07,
  ISO_WIRE_ARRAY = 0x08,
  ISO_WIRE_OBJECT = 0x09,
};

/* A growable output buffer of wire values; the writer owns data. */
typedef struct iso_wire {
  uint8_t *data;
  size_t len;
  size_t cap;
} iso_wire;

void iso_wire_init(iso_wire *w);
void iso_wire_free(iso_wire *w);
void iso_wire_undefined(iso_wire *w);
void iso_wire_null(iso_wire *w);
void iso_wire_bool(iso_wire *w, int value);
void iso_wire_number(iso_wire *w, double value);
void iso_wire_bigint(iso_wire *w, int64_t value);
void iso_wire_string(iso_wire *w, const char *s, size_t len);
void iso_wire_bytes(iso_wire *w, const void *data, size_t len);
/* Starts an array or object of `count` entries; the entries follow. */
void iso_wire_array(iso_wire *w, uint32_t count);
void iso_wire_object(iso_wire *w, uint32_t count);

/* One decoded value; strings and bytes point into the input. */
typedef struct iso_wire_value {
  uint8_t type;
  double number;
  int64_t bigint;
  const char *ptr;  /* string / bytes */
  size_t len;       /* string / bytes length */
  uint32_t count;   /* array / object entries that follow */
} iso_wire_value;

typedef struct iso_wire_reader {
  const uint8_t *pos;
  const uint8_t *end;
} iso_wire_reader;

void iso_wire_reader_init(iso_wire_reader *r, const uint8_t *data, size_t len);
/* Reads the next value header (containers: only their count). Returns 1, 0 at
 * the end of input, or -1 when the input is malformed. */
int iso_wire_next(iso_wire_reader *r, iso_wire_value *v);

/* ---- Host calls: how bindings reach C ----
 *
 * The runtime's binding objects call native.callSync(binding, op, args) or
 * native.callAsync(binding, op, args), where args is an array. The shim
 * encodes args as one wire array and hands it to the host callbacks below.
 * See isolate/runtime/README.md for the JavaScript side.
 */
typedef struct iso_call {
  uint64_t token;       /* the request on whose behalf JavaScript called */
  uint32_t call_id;     /* async calls: pass back to iso_worker_complete() */
  const char *binding;  /* "DB", "LOADER", "" for global fetch ... */
  const char *op;       /* "exec", "load", "fetch" ... */
  const uint8_t *args;  /* wire array */
  size_t args_len;
} iso_call;

/* Up to this many numbers answer a call_values call without a wire value. */
#define ISO_NUMBERS_MAX 4

/* An answer of a few numbers (a facet write's row counts): JavaScript reads
 * them from the runtime's directNumbers() instead of a value made for them. */
typedef struct iso_numbers {
  uint32_t count; /* 0: the answer is the wire value instead */
  double value[ISO_NUMBERS_MAX];
} iso_numbers;

/* Extra host callbacks; any may be NULL (JavaScript then gets an Error). */
typedef struct iso_host_calls {
  /* Synchronous: write one result value to *result and return 0, or return
   * -1 and write one error value (a string message, or an object with
   * "name" and "message") to *result: JavaScript gets it thrown. It must not
   * run the calling worker's JavaScript: call->binding and call->op may
   * point into the worker's own memo of them. */
  int (*call_sync)(void *data, const iso_call *call, iso_wire *result);
  /* Asynchronous: return 0 and later call iso_worker_complete() exactly
   * once for call->call_id (unless the worker is freed first); or return -1
   * having written an error value to *result: the promise rejects with it. */
  int (*call_async)(void *data, const iso_call *call, iso_wire *result);
  /* Optional, for synchronous calls made by the hundred thousand (a facet's
   * exec): call_sync with its arguments decoded, so that neither side
   * encodes or parses them. call->args is NULL; args are strings (UTF-8,
   * valid until it returns), numbers, booleans, null or undefined, at most
   * eight (a call with others goes to call_sync). Strings may point into
   * V8's heap: like call_sync it must not run any JavaScript of the worker,
   * nor anything else that allocates in its isolate. It answers as call_sync
   * does, or with 0 and numbers->count set when the answer is up to
   * ISO_NUMBERS_MAX numbers (numbers is NULL when the worker has nowhere to
   * put them). Returning 1 declines: the call goes to call_sync instead. */
  int (*call_values)(void *data, const iso_call *call, const iso_wire_value *args,
                     uint32_t n_args, iso_numbers *numbers, iso_wire *result);
} iso_host_calls;

/* ---- Streamed responses ----
 *
 * A Response whose body is a ReadableStream still being produced can go out
 * as it is made: its head at once, then each chunk as the stream yields it,
 * held back while the client is behind. A host that can send a response that
 * way gives these callbacks (iso_worker_options.stream). Without them, or
 * when start declines, the body is read to its end and goes to respond
 * whole, as does every body that is complete already (a string, bytes, a
 * Blob, a stream closed with all its chunks queued before fetch returned).
 *
 * For one request, in this order: start once, write any number of times,
 * then exactly one of end or abort. respond is not called for a request whose
 * start was accepted, except with an error (res NULL) when the request fails
 * while its body is still going out (the CPU or memory limit, the worker
 * broken): the host then cuts the response short itself, and no stream
 * callback comes for that request afterwards. done follows as for any
 * request. `data` is iso_host.data; the callbacks run on the worker's thread,
 * inside the iso_* call that entered JavaScript, and must not run the
 * worker's JavaScript.
 */
typedef struct iso_host_stream {
  /* The response's head: head->status and head->headers (head->body is NULL;
   * all valid only during the call). `length` is the body's size in bytes
   * when the stream announced it (a FixedLengthStream's), else -1. Returns 0
   * to stream the body, or non-zero to decline (this request cannot be
   * streamed): the body then goes to respond whole. */
  int (*start)(void *data, uint64_t token, const iso_response *head, int64_t length);
  /* The next bytes of the body, valid only during the call. Returns 0 when
   * more may follow at once; 1 when the client is behind: the runtime writes
   * nothing more until the host calls iso_worker_stream_drained() for
   * `token`, which it must do later, from its loop (not from inside write);
   * or -1 with *error set to a message of static storage ("the client closed
   * the connection") when the body cannot go on: JavaScript then cancels
   * the stream with a TypeError of that message, and abort follows. */
  int (*write)(void *data, uint64_t token, const uint8_t *bytes, size_t len, const char **error);
  /* The body is complete. */
  void (*end)(void *data, uint64_t token);
  /* The body failed after its head went out (the stream errored, or a write
   * or a drain failed): the host must cut the response short, so that the
   * client never takes it for whole. `message` (UTF-8, `len` bytes, valid
   * only during the call) says why, for logs. */
  void (*abort)(void *data, uint64_t token, const char *message, size_t len);
} iso_host_stream;

/* After write returned 1 for `token`: the client caught up (error NULL), and
 * the runtime writes the next bytes; or it is gone (`error` a message, read
 * only during the call): the stream is cancelled with a TypeError of it, and
 * abort follows. Runs microtasks; counts as an entry into JavaScript for
 * `token` (CPU limit applies). Ignored when `token` waits for no drain (its
 * request failed or is over), and on a broken worker. A wait is part of its
 * request (iso_worker_pending() counts the request, iso_worker_pending_calls()
 * does not count the wait); freeing the worker drops it. */
void iso_worker_stream_drained(iso_worker *w, uint64_t token, const char *error);

/* Everything a worker is created from (iso_worker_new takes the common subset). */
typedef struct iso_worker_options {
  const iso_host *host;
  const iso_host_calls *calls;  /* may be NULL: no host calls */
  iso_limits limits;
  const iso_module *modules;
  size_t n_modules;
  const char *main_module;
  const char *env_json;         /* plain env values, a JSON object text, or NULL */
  /* Binding objects the runtime builds into env, a JSON object text or NULL:
   * {"DB": {"type": "facet"}, "LOADER": {"type": "loader"}}. Kept apart from
   * env_json so that no plain value can pose as a binding. */
  const char *bindings_json;
  /* Streamed responses (all four callbacks); may be NULL: every response
   * body then reaches respond whole. */
  const iso_host_stream *stream;
} iso_worker_options;

/* As iso_worker_new, from options. Returns NULL and fills *err on failure. */
iso_worker *iso_worker_create(const iso_worker_options *options, iso_error *err);

/* Settles async call `call_id`: ok = 1 resolves its promise with the wire
 * value, ok = 0 rejects with it (as for call_sync errors). Runs microtasks;
 * counts as an entry into JavaScript for `token` (CPU limit applies).
 * `value` is only read during the call. An unknown or already settled
 * call_id is ignored, and so is any call on a broken worker.
 *
 * Outstanding calls and iso_worker_free(): freeing a worker drops its
 * outstanding async calls (their promises are never settled). The host must
 * then cancel whatever it started for them and never call
 * iso_worker_complete() for that worker again: the pointer is dead. */
void iso_worker_complete(iso_worker *w, uint64_t token, uint32_t call_id, int ok,
                         const uint8_t *value, size_t value_len);

/* Async host calls started and not yet completed. A request waiting on one
 * is also counted by iso_worker_pending(); this also counts calls made by
 * code that outlived its request. A host that evicts idle workers should
 * wait until both are 0 (or cancel the calls itself). */
size_t iso_worker_pending_calls(const iso_worker *w);

/* ---- Memory protection keys between isolates (docs/mpk.md) ----
 *
 * Where the CPU and kernel have PKU, iso_platform_init() allocates the
 * protection keys V8 leaves (up to 15) and gives every isolate one, spread
 * so that live isolates share keys as little as possible. An isolate's heap
 * pages and ArrayBuffer contents carry its key; while the shim is inside an
 * isolate (running its JavaScript, creating or disposing it) only key 0 and
 * that isolate's key are accessible to the thread, and outside every
 * isolate none of the isolates' keys are. A stray read of another isolate's
 * memory then faults with SIGSEGV, si_code SEGV_PKUERR.
 * EDGENODE_MPK=off in the environment turns it off; EDGENODE_MPK=dry runs
 * every code path but the key system calls and PKRU writes (for tests on
 * machines without PKU; reported as not enabled).
 */
typedef struct iso_mpk_status {
  int enabled;         /* 1 when heaps are tagged and PKRU is switched */
  int keys;            /* keys isolates are spread over; 0 when not enabled */
  int single_threaded; /* V8 runs with --single-threaded (MPK on or dry) */
  const char *reason;  /* why not enabled ("the CPU has no PKU", ...), "" when enabled */
} iso_mpk_status;

/* Valid after iso_platform_init(). */
void iso_mpk_status_get(iso_mpk_status *out);

/* The protection key of w's pages: 1..15, 0 without MPK. */
int iso_worker_pkey(const iso_worker *w);

/* The worker the calling thread is inside right now (the innermost call
 * into one), or NULL; always NULL without MPK. Async-signal-safe: it is
 * what a fault handler names. */
iso_worker *iso_worker_current(void);

/* The host's `data` of w (NULL for a blank pooled worker). Async-signal-safe. */
void *iso_worker_host_data(const iso_worker *w);

/* A signal handler that runs any of our code calls this first: the thread
 * then has the PKRU of code outside every isolate, whatever it was
 * interrupted in. Async-signal-safe; does nothing without MPK. */
void iso_mpk_signal_enter(void);

/* For tests of the protection itself (tests/mpk/): calls fn(arg) inside w,
 * as its JavaScript would run (w's key accessible, other isolates' not). */
void iso_worker_call_inside(iso_worker *w, void (*fn)(void *arg), void *arg);

/* For the same tests: where the value of global property `name` of w's
 * context lives: an ArrayBuffer view's contents, or an object's address on
 * w's heap. NULL when there is no such object. Only looks, runs no JavaScript. */
const void *iso_worker_address_of(iso_worker *w, const char *name);

#ifdef __cplusplus
}
#endif

#endif
