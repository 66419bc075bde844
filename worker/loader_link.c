/*
 * env.LOADER: dynamic workers, each a sandbox (sandbox.h) of kind SANDBOX_CHILD, never a
 * context inside the parent's isolate. The JavaScript side is
 * isolate/runtime/51-loader.js; it makes one async host call per request:
 *
 *   fetch [kind, key, code | undefined, method, url, [headers...], body | null]
 *     -> [status, [headers...], body]
 *
 * kind 0 is a load() stub (key: a number the parent's isolate gave it), kind
 * 1 a get() id (key: the id). Children are found by (parent version, kind,
 * key). Without code and without a child, the call fails with an error named
 * "LoaderNeedsCode" and the stub sends its code (get(): after running the
 * parent's callback).
 *
 * Lifetimes: a load() child belongs to the parent request that started it
 * and is freed once that request is done and the child has nothing left to
 * do. A get() child stays cached, and is evicted with the process's other
 * idle isolates (least recently used first), or after the idle timeout.
 * Every child goes with its parent's version, and a child that hit a limit
 * or failed to start is discarded (get(): its id starts afresh).
 *
 * Caps, per tenant and worker process (the spec's limits.children and
 * limits.pinned_children, proto.h's defaults): a new child past the first
 * makes room by discarding the tenant's idle children, least recently used
 * first, and is refused when none is idle; and when the tenant holds its
 * maximum of pinned children (every request they were given is answered,
 * yet ctx.waitUntil() or a timer keeps them busy), the oldest of them goes,
 * its leftover work dropped. A tenant's children cannot fill the process's
 * maximum of isolates for its neighbours.
 *
 * Responses go back to the parent as a unit on the parent's own queue, so
 * the parent's JavaScript never runs inside the child's turn.
 */
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "sandbox.h"

#define LOADER_MAX_CODE_BYTES (64u << 20)
#define LOADER_MAX_ENV_BYTES (1u << 20)
/* One module's compile cannot be interrupted (V8 checks for termination
 * only between modules): 4 MiB of source takes about a second of the
 * process's loop, which every tenant in it waits for. */
#define LOADER_MAX_MODULE_BYTES (4u << 20)
/* Generated wrappers of {text}/{json}/{data} modules escape their content:
 * a control character in a {text} module is six ("\\u0001"), and each
 * module adds a few dozen bytes of its own. */
#define LOADER_MAX_SOURCE_BYTES (6 * LOADER_MAX_CODE_BYTES + (64u << 20))
/* The children a parent holds share this many times its memory limit (heap
 * and ArrayBuffers, as measured after each of their requests): each alone
 * is held to the parent's limit, but a thousand of them were not held to
 * anything, and one tenant could push its process past its RSS budget. */
#define LOADER_CHILDREN_MEMORY_FACTOR 8
/* What an idle load() child is said to hold, to its parent's garbage
 * collector: about what an idle isolate keeps (docs/benchmarks.md). A
 * collection that finds a child's stub garbage frees the child; without
 * this, V8 would see only the stub's few bytes and collect rarely. */
#define CHILD_EXTERNAL_BYTES (1536 << 10)

enum { KIND_LOAD = 0, KIND_GET = 1 };

typedef struct loader_child loader_child;

/* The loader side of one parent version (sandbox.loader). */
typedef struct loader_state {
  sandbox *parent;
  loader_child *children;
  size_t n_children;
  size_t children_bytes;  /* sum of the children's held_bytes */
} loader_state;

struct loader_child {
  sandbox sb;               /* first: a sandbox pointer is a child pointer */
  loader_state *owner;      /* NULL once the parent version is gone */
  int kind;
  char *key;
  size_t key_len;
  uint64_t hash;
  int keyed;                /* findable in the table */
  uint64_t owner_token;     /* load(): the parent request it belongs to */
  int owner_done;
  int stub_gone;            /* load(): the parent collected its stub */
  int64_t external_bytes;   /* told to the parent's heap until discarded */
  int outbound;             /* globalOutbound not null */
  char *policy;             /* globalOutbound naming an egress policy, or NULL */
  int64_t subrequest_limit; /* per request; -1: no limit */
  int64_t stray_subrequests; /* made outside any request it is serving */
  size_t held_bytes;        /* sb.held_bytes as counted in owner->children_bytes */
  /* What the isolate is made from, until it is made. */
  iso_module *modules;
  size_t n_modules;
  char *main_module;
  char *env_json;
  uint8_t *code;            /* the wire bytes the module sources point into */
  loader_child *prev;       /* in owner->children */
  loader_child *next;
  loader_child *hnext;      /* table chain */
};

/* One request a parent made of a child: where its answer goes, and what the
 * child spent on it. */
typedef struct loader_call {
  uint64_t token;
  uint32_t call_id;
  int64_t subrequests; /* fetch() calls the child made for it */
} loader_call;

/* An answer waiting for the parent's turn. */
typedef struct loader_completion {
  sched_unit unit;
  sandbox *parent;
  uint64_t token;
  uint32_t call_id;
  int ok;
  iso_wire value;
} loader_completion;


static const sandbox_ops child_ops;
static const iso_host_calls child_calls;

/* ---- the table of children ---- */

static uint64_t key_hash(const sandbox *parent, int kind, const char *key, size_t len) {
  uint64_t h = 1469598103934665603u ^ (uint64_t)(uintptr_t)parent ^ (uint64_t)kind << 56;
  for (size_t i = 0; i < len; i++) h = (h ^ (uint8_t)key[i]) * 1099511628211u;
  return h;
}

/* The process's table (worker.loader): every findable child, of every parent. */
static void table_grow(loader_table *tb) {
  size_t cap = tb->cap ? tb->cap * 2 : 64;
  loader_child **t = xcalloc(cap, sizeof *t);
  for (size_t i = 0; i < tb->cap; i++) {
    loader_child *c = tb->slots[i];
    while (c) {
      loader_child *next = c->hnext;
      c->hnext = t[c->hash & (cap - 1)];
      t[c->hash & (cap - 1)] = c;
      c = next;
    }
  }
  free(tb->slots);
  tb->slots = t;
  tb->cap = cap;
}

static loader_child *table_find(const sandbox *parent, int kind, const char *key, size_t len) {
  const loader_table *tb = &parent->w->loader;
  if (tb->cap == 0) return NULL;
  uint64_t h = key_hash(parent, kind, key, len);
  for (loader_child *c = tb->slots[h & (tb->cap - 1)]; c; c = c->hnext)
    if (c->hash == h && c->owner && c->owner->parent == parent && c->kind == kind &&
        c->key_len == len && memcmp(c->key, key, len) == 0)
      return c;
  return NULL;
}

static void table_add(loader_child *c) {
  loader_table *tb = &c->sb.w->loader;
  if (tb->used + 1 > tb->cap) table_grow(tb);
  size_t i = c->hash & (tb->cap - 1);
  c->hnext = tb->slots[i];
  tb->slots[i] = c;
  tb->used++;
  c->keyed = 1;
}

static void table_remove(loader_child *c) {
  if (!c->keyed) return;
  loader_table *tb = &c->sb.w->loader;
  for (loader_child **p = &tb->slots[c->hash & (tb->cap - 1)]; *p; p = &(*p)->hnext) {
    if (*p == c) {
      *p = c->hnext;
      break;
    }
  }
  tb->used--;
  c->keyed = 0;
}

/* ---- children ---- */

static void code_free(loader_child *c) {
  for (size_t i = 0; i < c->n_modules; i++) free((char *)c->modules[i].name);
  free(c->modules);
  c->modules = NULL;
  c->n_modules = 0;
  free(c->main_module);
  c->main_module = NULL;
  free(c->env_json);
  c->env_json = NULL;
  free(c->code);
  c->code = NULL;
}

/* The parent's collector is told the child's memory is gone. A shrink may
 * be told at any time, from the loop too. */
static void child_untell(loader_child *c) {
  if (c->owner && c->external_bytes) iso_worker_external_memory(c->owner->parent->iso, -c->external_bytes);
  c->external_bytes = 0;
}

/* Tells the parent's collector about its load() children that went idle
 * since it was last told. Only from inside the parent's JavaScript (a new
 * load()), where a collection may run at once; and only idle ones, so that
 * a parent that starts many children at once (Promise.all) does not collect
 * for each one while none of them can go yet. */
static void tell_idle_children(sandbox *l) {
  int64_t idle = 0;
  for (loader_child *c = l->loader ? l->loader->children : NULL; c; c = c->next) {
    if (c->kind != KIND_LOAD || c->sb.state == SANDBOX_DYING || c->external_bytes || !sandbox_idle(&c->sb)) continue;
    c->external_bytes = CHILD_EXTERNAL_BYTES;
    idle += c->external_bytes;
  }
  iso_worker_external_memory(l->iso, idle);
}

/* No longer findable, and freed once it is safe (from the loop). */
static void child_discard(loader_child *c) {
  table_remove(c);
  child_untell(c);
  sandbox_release(&c->sb);
}

/* Whether the child has reason to live on now that it is idle. */
static void child_check(loader_child *c) {
  if (c->sb.state == SANDBOX_DYING) return;
  if (c->owner == NULL || c->sb.state == SANDBOX_BROKEN) {
    child_discard(c);
    return;
  }
  if (c->kind == KIND_LOAD && (c->owner_done || c->stub_gone) && sandbox_idle(&c->sb))
    child_discard(c);
}

/* The sandbox's last measure of the child, counted towards its parent's
 * children in place of the one before. */
static void child_count_held(loader_child *c) {
  if (c->owner == NULL) return;
  c->owner->children_bytes += c->sb.held_bytes;
  c->owner->children_bytes -= c->held_bytes;
  c->held_bytes = c->sb.held_bytes;
}

static int child_prepare(sandbox *sb, iso_error *err) {
  loader_child *c = (loader_child *)sb;
  iso_worker_options o = {0};
  o.modules = c->modules;
  o.n_modules = c->n_modules;
  o.main_module = c->main_module;
  o.env_json = c->env_json;
  o.calls = &child_calls;
  int rc = sandbox_load(sb, &o, err);
  if (rc == 0) child_count_held(c);
  /* The stub sends its code again whenever this isolate must be remade. */
  code_free(c);
  if (rc != 0) {
    table_remove(c);
    log_write(LOG_INFO, sb->log_tenant, NULL, NULL, "dynamic worker failed to start: %s",
              err->message ? err->message : "unknown error");
  }
  return rc;
}

static void completion_run(sched_unit *u) {
  loader_completion *done = container_of(u, loader_completion, unit);
  sandbox *parent = done->parent;
  parent->units--;
  sandbox_enter(parent);
  iso_worker_complete(parent->iso, done->token, done->call_id, done->ok, done->value.data,
                      done->value.len);
  iso_wire_free(&done->value);
  free(done);
  sandbox_leave(parent);
}

/* Queues the answer to a parent's call for the parent's next turn. The
 * parent's units count keeps its version alive until then. */
static void complete_parent(loader_child *c, loader_call *call, int ok, iso_wire *value) {
  sandbox *parent = c->owner->parent;
  loader_completion *done = xcalloc(1, sizeof *done);
  done->unit.run = completion_run;
  done->parent = parent;
  done->token = call->token;
  done->call_id = call->call_id;
  done->ok = ok;
  done->value = *value;
  iso_wire_init(value);
  parent->units++;
  sched_submit(&parent->w->sched, &parent->queue, &done->unit);
}

static int ascii(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)s[i] >= 0x80) return 0;
  return 1;
}

/* Whether a request failed because the child could not start from its code
 * (it never got an isolate), at a place the error names (a link error names
 * its modules in its message already). */
static int start_failed(const loader_child *c, const iso_error *err, sandbox_failure why) {
  return why == SANDBOX_FAIL_ISO && err && err->module && err->line > 0 && c->sb.iso == NULL &&
         (err->kind == ISO_ERR_SYNTAX || err->kind == ISO_ERR_LINK ||
          err->kind == ISO_ERR_EXCEPTION);
}

static stats_child_outcome child_outcome(const iso_response *res, const iso_error *err,
                                         sandbox_failure why, int failed_start) {
  if (res) return STATS_CHILD_OK;
  if (why == SANDBOX_FAIL_WALL) return STATS_CHILD_WALL;
  if (why == SANDBOX_FAIL_ISO && err && err->kind == ISO_ERR_CPU) return STATS_CHILD_CPU;
  if (why == SANDBOX_FAIL_ISO && err && err->kind == ISO_ERR_MEMORY) return STATS_CHILD_MEMORY;
  return failed_start ? STATS_CHILD_START_ERROR : STATS_CHILD_EXCEPTION;
}

static void child_respond(sandbox *sb, void *cookie, const iso_response *res,
                          const iso_error *err, sandbox_failure why) {
  loader_child *c = (loader_child *)sb;
  loader_call *call = cookie;
  iso_wire value;
  iso_wire_init(&value);
  if (res) {
    iso_wire_array(&value, 3);
    iso_wire_number(&value, res->status);
    iso_wire_array(&value, (uint32_t)(2 * res->n_headers));
    for (size_t i = 0; i < res->n_headers; i++) {
      const iso_header *h = &res->headers[i];
      iso_wire_string(&value, h->name, h->name_len);
      /* Bytes, one character each for the parent, which reads UTF-8. */
      if (ascii(h->value, h->value_len)) {
        iso_wire_string(&value, h->value, h->value_len);
      } else {
        char *utf8 = xmalloc(2 * h->value_len);
        iso_wire_string(&value, utf8, latin1_to_utf8(h->value, h->value_len, utf8));
        free(utf8);
      }
    }
    iso_wire_bytes(&value, res->body, res->body_len);
  } else if (start_failed(c, err, why)) {
    /* Its code did not compile, link or run its top level: say where, or
     * the parent's author cannot tell this from a throw in the child's
     * fetch(), nor which of its modules is wrong. */
    iso_error at = *err;
    at.message = xasprintf("%s\n  at %s:%d:%d", err->message ? err->message : "Error",
                           err->module, err->line, err->column);
    sandbox_error_value(&value, &at, why, sb);
    free(at.message);
  } else {
    sandbox_error_value(&value, err, why, sb);
  }
  if (res == NULL) {
    tenant *t = c->sb.tenant;
    if (t && why == SANDBOX_FAIL_ISO && err && err->kind == ISO_ERR_CPU) t->stats.cpu_limit_hits++;
    if (t && why == SANDBOX_FAIL_ISO && err && err->kind == ISO_ERR_MEMORY)
      t->stats.memory_limit_hits++;
    if (t && why == SANDBOX_FAIL_WALL) t->stats.wall_limit_hits++;
    if (t) t->stats.dirty = 1;
    int limit = why == SANDBOX_FAIL_WALL ||
                (why == SANDBOX_FAIL_ISO && err &&
                 (err->kind == ISO_ERR_CPU || err->kind == ISO_ERR_MEMORY));
    if (limit)
      log_write(LOG_WARN, sb->log_tenant, NULL, NULL, "%s: %s", sb->label,
                why == SANDBOX_FAIL_WALL ? "exceeded wall time limit"
                                         : err->message ? err->message : "limit");
  }
  stats_child_request(sb->w, child_outcome(res, err, why, start_failed(c, err, why)));
  if (c->owner) complete_parent(c, call, res != NULL, &value);
  iso_wire_free(&value);
  /* Limits and failed starts make a child unusable: new requests get a new one. */
  if (c->sb.state == SANDBOX_BROKEN) table_remove(c);
}

static void child_done(sandbox *sb, void *cookie) {
  child_count_held((loader_child *)sb);
  free(cookie);
}

static void child_settled(sandbox *sb) {
  if (sb->state != SANDBOX_DYING && sandbox_idle(sb)) child_check((loader_child *)sb);
}

static void child_request_over(sandbox *sb, uint64_t token) {
  egress_link_request_done(sb->w, token);
}

static void child_evict(sandbox *sb) { child_discard((loader_child *)sb); }

static void child_freed(sandbox *sb) {
  loader_child *c = (loader_child *)sb;
  table_remove(c);
  child_untell(c);
  if (sb->tenant) sb->tenant->children--;
  if (c->owner) {
    if (c->prev) c->prev->next = c->next;
    else c->owner->children = c->next;
    if (c->next) c->next->prev = c->prev;
    c->owner->n_children--;
    c->owner->children_bytes -= c->held_bytes;
  }
  code_free(c);
  free(c->policy);
  free(c->key);
  free(c);
}

/* The child's own host calls: its global fetch(), if its code allowed one. */
static int child_call_async(void *data, const iso_call *call, iso_wire *result) {
  loader_child *c = data;
  if (c->sb.state == SANDBOX_DYING) {
    sandbox_call_error(result, "TypeError", "this sandbox cannot make host calls");
    return -1;
  }
  if (call->binding[0] != '\0') {
    sandbox_call_error(result, "TypeError", "a dynamic worker has no bindings");
    return -1;
  }
  if (!c->outbound) {
    sandbox_call_error(result, "Error",
                   "This worker is not permitted to access the internet via global functions like "
                   "fetch(). It must use capabilities (such as bindings in 'env') to talk to the "
                   "outside world.");
    return -1;
  }
  if (c->subrequest_limit >= 0) {
    /* The limit is per request, as a worker's are: a cached get() child
     * serves many, and must not run dry after its first few. A fetch() from
     * work that outlived its request (a timer) counts on the child's own. */
    loader_call *lc = sandbox_request_cookie(&c->sb, call->token);
    int64_t *used = lc ? &lc->subrequests : &c->stray_subrequests;
    if (*used >= c->subrequest_limit) {
      char *msg = xasprintf("Dynamic Worker exceeded its subrequest limit (%lld per request)",
                            (long long)c->subrequest_limit);
      sandbox_call_error(result, "Error", msg);
      free(msg);
      return -1;
    }
    (*used)++;
  }
  return egress_link_call(&c->sb, call, result);
}

static int child_call_sync(void *data, const iso_call *call, iso_wire *result) {
  (void)data;
  (void)call;
  sandbox_call_error(result, "TypeError", "this binding has no synchronous operations here");
  return -1;
}

static const iso_host_calls child_calls = {
    .call_sync = child_call_sync,
    .call_async = child_call_async,
};

static const sandbox_ops child_ops = {
    .prepare = child_prepare,
    .respond = child_respond,
    .done = child_done,
    .request_over = child_request_over,
    .settled = child_settled,
    .freed = child_freed,
    .evict = child_evict,
};

/* ---- the parent's call ---- */

typedef struct args {
  iso_wire_reader r;
  const char *why;  /* the first problem */
} args;

static int next_of(args *a, iso_wire_value *v, int type, const char *what) {
  if (a->why) return -1;
  if (iso_wire_next(&a->r, v) != 1 || (type >= 0 && v->type != type)) {
    a->why = what;
    return -1;
  }
  return 0;
}

/* Skips one value, containers included. */
static int skip_value(iso_wire_reader *r, int depth) {
  iso_wire_value v;
  if (depth > 64 || iso_wire_next(r, &v) != 1) return -1;
  uint64_t items = v.type == ISO_WIRE_ARRAY ? v.count : v.type == ISO_WIRE_OBJECT ? 2u * v.count : 0;
  for (uint64_t i = 0; i < items; i++)
    if (skip_value(r, depth + 1) != 0) return -1;
  return 0;
}

static uint32_t lower_limit(uint32_t parent, double own) {
  if (own < 1) return parent;
  return own < parent ? (uint32_t)own : parent;
}

/* Whether the parent may give a child the egress policy `policy`: its own
 * (the parent worker's name), or one its loader binding lists in
 * "policies" (set by whoever deployed it, as a run's "as" is). NULL, or why
 * not, in a message the caller frees. */
static char *policy_problem(const sandbox *l, const char *binding, const char *policy) {
  const char *own = sandbox_principal(l);
  if (own && strcmp(own, policy) == 0) return NULL;
  json_t *b = json_object_get(json_object_get(l->spec, "bindings"), binding);
  json_t *granted = json_object_get(b, "policies");
  size_t i;
  json_t *name;
  json_array_foreach(granted, i, name) {
    if (json_is_string(name) && strcmp(json_string_value(name), policy) == 0) return NULL;
  }
  char *list = json_dumps(granted ? granted : json_array(), JSON_COMPACT | JSON_ENCODE_ANY);
  char *msg = xasprintf("globalOutbound: the egress policy \"%s\" is not granted to this worker "
                        "(its own is \"%s\"; bindings.%s.policies grants %s)",
                        policy, own ? own : "", binding, list ? list : "[]");
  free(list);
  return msg;
}

/*
 * Takes the code ([mainModule, [name, source, ...], env, outbound, cpuMs,
 * memoryMB, subRequests]) into the child: a copy of its bytes, with the
 * module list pointing into it. Returns NULL, or the reason it is refused.
 */
static const char *take_code(loader_child *c, const uint8_t *bytes, size_t len,
                             const iso_limits *parent) {
  c->code = xmalloc(len ? len : 1);
  memcpy(c->code, bytes, len);
  args a = {.why = NULL};
  iso_wire_reader_init(&a.r, c->code, len);
  iso_wire_value v, name, src;
  if (next_of(&a, &v, ISO_WIRE_ARRAY, "code") || v.count != 7) return "malformed code";
  if (next_of(&a, &v, ISO_WIRE_STRING, "mainModule")) return a.why;
  c->main_module = xstrndup(v.ptr, v.len);
  if (next_of(&a, &v, ISO_WIRE_ARRAY, "modules") || v.count % 2 || v.count == 0)
    return "malformed modules";
  if (v.count / 2 > PROTO_SPEC_MAX_MODULES) return "too many modules (at most 1000 in one worker)";
  c->n_modules = v.count / 2;
  c->modules = xcalloc(c->n_modules, sizeof *c->modules);
  size_t total = 0;
  for (size_t i = 0; i < c->n_modules; i++) {
    if (next_of(&a, &name, ISO_WIRE_STRING, "module name") ||
        next_of(&a, &src, ISO_WIRE_STRING, "module source"))
      return "malformed modules";
    if (memchr(name.ptr, '\0', name.len)) return "a module name holds a NUL character";
    c->modules[i].name = xstrndup(name.ptr, name.len);
    if (src.len > LOADER_MAX_MODULE_BYTES)
      return "a Dynamic Worker module is larger than 4 MiB: split it into smaller modules (one "
             "module's compile cannot be interrupted at the CPU limit)";
    c->modules[i].source = src.ptr;
    c->modules[i].source_len = src.len;
    total += src.len;
  }
  if (total > LOADER_MAX_SOURCE_BYTES) return "Dynamic Worker code exceeds the maximum allowed size";
  if (next_of(&a, &v, -1, "env")) return a.why;
  if (v.type == ISO_WIRE_STRING) {
    if (v.len > LOADER_MAX_ENV_BYTES) return "Dynamic Worker env exceeds the maximum allowed size";
    c->env_json = xstrndup(v.ptr, v.len);
  } else if (v.type != ISO_WIRE_NULL && v.type != ISO_WIRE_UNDEFINED) {
    return "malformed env";
  }
  if (next_of(&a, &v, -1, "globalOutbound")) return a.why;
  c->outbound = v.type == ISO_WIRE_TRUE || v.type == ISO_WIRE_STRING;
  if (v.type == ISO_WIRE_STRING) {
    if (v.len == 0 || v.len > 64 || memchr(v.ptr, '\0', v.len))
      return "globalOutbound: an egress policy's name is a worker's name (at most 64 characters)";
    c->policy = xstrndup(v.ptr, v.len);
  }
  double limit[3];
  for (int i = 0; i < 3; i++) {
    if (next_of(&a, &v, ISO_WIRE_NUMBER, "limits")) return a.why;
    limit[i] = v.number;
  }
  c->sb.limits.cpu_ms = lower_limit(parent->cpu_ms, limit[0]);
  c->sb.limits.memory_mb = lower_limit(parent->memory_mb, limit[1]);
  c->subrequest_limit = limit[2] < 0 ? -1 : limit[2] > 1e9 ? 1000000000 : (int64_t)limit[2];
  return NULL;
}

static loader_state *state_of(sandbox *l) {
  if (l->loader == NULL) {
    l->loader = xcalloc(1, sizeof *l->loader);
    l->loader->parent = l;
  }
  return l->loader;
}

static loader_child *child_new(sandbox *l, int kind, const char *key, size_t key_len,
                               uint64_t token) {
  loader_state *st = state_of(l);
  loader_child *c = xcalloc(1, sizeof *c);
  c->owner = st;
  c->kind = kind;
  c->key = xstrndup(key, key_len);
  c->key_len = key_len;
  c->hash = key_hash(l, kind, key, key_len);
  c->owner_token = token;
  char *label = kind == KIND_GET ? xasprintf("loader get \"%.64s\"", c->key)
                                 : xasprintf("loader load #%s", c->key);
  sandbox_init(&c->sb, l->w, SANDBOX_CHILD, &child_ops, l->tenant, l->spec, label);
  c->sb.cached = kind == KIND_GET;
  /* Its work takes turns within its parent's: a parent that starts many
   * children at once must not take a turn for each from other tenants. */
  sched_queue_set_group(&l->w->sched, &c->sb.queue, &l->queue);
  c->next = st->children;
  if (st->children) st->children->prev = c;
  st->children = c;
  st->n_children++;
  if (c->sb.tenant) c->sb.tenant->children++;
  return c;
}

static size_t children_budget(const sandbox *l) {
  return (size_t)l->limits.memory_mb * LOADER_CHILDREN_MEMORY_FACTOR << 20;
}

/* The least recently used idle child of a parent, for memory: a load()
 * child is made again from its stub's code, as after an eviction. */
static loader_child *oldest_idle_child(loader_state *st) {
  loader_child *oldest = NULL;
  for (loader_child *c = st->children; c; c = c->next)
    if (c->sb.state != SANDBOX_DYING && sandbox_idle(&c->sb) &&
        (oldest == NULL || c->sb.last_used_ns < oldest->sb.last_used_ns))
      oldest = c;
  return oldest;
}

/* Kept alive by work nobody waits for: every request it was given is
 * answered, and yet it is busy (ctx.waitUntil(), a timer, a host call). */
static int child_pinned(const loader_child *c) {
  const sandbox *sb = &c->sb;
  if (sb->state == SANDBOX_DYING || sb->iso == NULL || sandbox_idle(sb)) return 0;
  for (const sandbox_request *r = sb->owned; r; r = r->next)
    if (!r->responded) return 0;
  return 1;
}

/* The tenant's least recently used child that is idle (idle_not_pinned)
 * or pinned; *count: how many of its children are so. */
static loader_child *tenant_oldest(worker *w, const tenant *t, int idle_not_pinned,
                                   size_t *count) {
  loader_child *oldest = NULL;
  *count = 0;
  for (sandbox *sb = w->sandboxes; sb; sb = sb->all_next) {
    if (sb->kind != SANDBOX_CHILD || sb->tenant != t || sb->state == SANDBOX_DYING) continue;
    loader_child *c = (loader_child *)sb;
    if (idle_not_pinned ? !sandbox_idle(sb) : !child_pinned(c)) continue;
    ++*count;
    if (oldest == NULL || sb->last_used_ns < oldest->sb.last_used_ns) oldest = c;
  }
  return oldest;
}

/* Below the tenant's maximum of pinned children, so that the new one may
 * become one: the oldest go, and with them their leftover work. */
static void unpin_oldest(worker *w, tenant *t, size_t max_pinned) {
  size_t pinned;
  loader_child *oldest;
  while ((oldest = tenant_oldest(w, t, 0, &pinned)) != NULL && pinned >= max_pinned) {
    log_write(LOG_WARN, t->name, NULL, NULL,
              "%s: discarded with its leftover work (ctx.waitUntil(), timers): the tenant holds "
              "%zu pinned dynamic workers (limit %zu, limits.pinned_children)",
              oldest->sb.label, pinned, max_pinned);
    child_discard(oldest);
    sandbox_reap(w);
  }
}

/* Room for one more child of this parent: below its tenant's maxima of
 * children and pinned children, and its children's memory below their
 * budget. Idle children go, least recently used first, while they must.
 * Returns NULL, or why there is no room (the caller frees it). */
static char *make_room_for_child(sandbox *l) {
  worker *w = l->w;
  tenant *t = l->tenant;
  size_t max_children, max_pinned, idle;
  spec_children(l->spec, &max_children, &max_pinned);
  sandbox_reap(w); /* released ones still count until freed */
  unpin_oldest(w, t, max_pinned);
  loader_child *oldest;
  while (t->children >= max_children && (oldest = tenant_oldest(w, t, 1, &idle)) != NULL) {
    child_discard(oldest);
    sandbox_reap(w);
  }
  if (t->children >= max_children)
    return xasprintf("too many live children: %zu (limit %zu, limits.children): let some finish "
                     "first", t->children, max_children);
  loader_state *st = l->loader;
  while (st && st->children_bytes >= children_budget(l) && (oldest = oldest_idle_child(st))) {
    child_discard(oldest);
    sandbox_reap(w);
  }
  if (st == NULL || st->children_bytes < children_budget(l)) return NULL;
  return xasprintf("the dynamic workers of this worker hold %zu MiB, their budget together is "
                   "%zu MiB (%d times its memory limit): let some finish first",
                   st->children_bytes >> 20, children_budget(l) >> 20,
                   LOADER_CHILDREN_MEMORY_FACTOR);
}

/* Frees a child that never got to run (its code was refused). */
static void child_drop_new(loader_child *c) {
  sandbox_release(&c->sb);
  sandbox_reap(c->sb.w);
}

/* How a call names its child: a kind, and a key (a stub number or an id). */
typedef struct child_name {
  int kind;
  const char *key;
  size_t key_len;
  char keybuf[32];
} child_name;

static int next_child_name(args *a, child_name *n) {
  iso_wire_value kind, key;
  if (next_of(a, &kind, ISO_WIRE_NUMBER, "kind") || next_of(a, &key, -1, "key")) return -1;
  n->kind = kind.number == 1 ? KIND_GET : KIND_LOAD;
  if (key.type == ISO_WIRE_STRING) {
    n->key = key.ptr;
    n->key_len = key.len;
  } else if (key.type == ISO_WIRE_NUMBER) {
    n->key_len = (size_t)snprintf(n->keybuf, sizeof n->keybuf, "%.0f", key.number);
    n->key = n->keybuf;
  } else {
    a->why = "key";
    return -1;
  }
  return 0;
}

/* "release" [kind, key]: the parent's stub of a load() child was collected,
 * so nothing can call the child again; it goes once it is idle. */
/* A request's headers as the child gets them, read from the parent's call. */
typedef struct call_headers {
  iso_header stack[32];
  iso_header *list;
  size_t n;
  char *bytes; /* the values that were not ASCII, as bytes; or NULL */
} call_headers;

static void call_headers_free(call_headers *h) {
  if (h->list != h->stack) free(h->list);
  free(h->bytes);
}

/* Reads n name/value pairs (a.why says what was wrong). A header value is
 * bytes, one per character, as a client sends it; the parent's JavaScript
 * sent the characters as UTF-8, so values past ASCII are turned back into
 * their bytes (`room`, the call's size, bounds them all). */
static void call_headers_read(args *a, size_t n, size_t room, call_headers *h) {
  h->list = n <= ARRAY_SIZE(h->stack) ? h->stack : xcalloc(n, sizeof *h->list);
  h->n = 0;
  h->bytes = NULL;
  size_t used = 0;
  for (size_t i = 0; i < n; i++) {
    iso_wire_value hn, hv;
    if (next_of(a, &hn, ISO_WIRE_STRING, "header") || next_of(a, &hv, ISO_WIRE_STRING, "header"))
      return;
    const char *value = hv.ptr;
    size_t len = hv.len;
    long narrow;
    if (!ascii(hv.ptr, hv.len)) {
      if (h->bytes == NULL) h->bytes = xmalloc(room);
      /* A character past U+00FF is no byte: its UTF-8 goes as it is. */
      if ((narrow = utf8_to_latin1(hv.ptr, hv.len, h->bytes + used)) >= 0) {
        value = h->bytes + used;
        len = (size_t)narrow;
        used += len;
      }
    }
    h->list[h->n++] = (iso_header){hn.ptr, hn.len, value, len};
  }
}

int loader_link_call_sync(sandbox *l, const iso_call *call, iso_wire *result) {
  args a = {.why = NULL};
  iso_wire_reader_init(&a.r, call->args, call->args_len);
  iso_wire_value v;
  child_name n;
  if (strcmp(call->op, "release") != 0) {
    sandbox_call_error(result, "TypeError", "the loader has no such operation");
    return -1;
  }
  if (next_of(&a, &v, ISO_WIRE_ARRAY, "arguments") || v.count != 2 || next_child_name(&a, &n)) {
    sandbox_call_error(result, "TypeError", "malformed loader call");
    return -1;
  }
  loader_child *c = n.kind == KIND_LOAD ? table_find(l, n.kind, n.key, n.key_len) : NULL;
  if (c) {
    c->stub_gone = 1;
    child_check(c);
  }
  iso_wire_undefined(result);
  return 0;
}

int loader_link_call(sandbox *l, const iso_call *call, iso_wire *result) {
  if (strcmp(call->op, "fetch") != 0) {
    sandbox_call_error(result, "TypeError", "the loader has no such operation");
    return -1;
  }
  args a = {.why = NULL};
  iso_wire_reader_init(&a.r, call->args, call->args_len);
  iso_wire_value v, method, url, body;
  child_name n;
  if (next_of(&a, &v, ISO_WIRE_ARRAY, "arguments") || v.count != 7 || next_child_name(&a, &n))
    goto malformed;
  int k = n.kind;
  const char *key_ptr = n.key;
  size_t key_len = n.key_len;
  const uint8_t *code_at = a.r.pos;
  if (skip_value(&a.r, 0) != 0) goto malformed;
  size_t code_len = (size_t)(a.r.pos - code_at);
  int has_code = code_len > 0 && code_at[0] != ISO_WIRE_UNDEFINED && code_at[0] != ISO_WIRE_NULL;

  if (next_of(&a, &method, ISO_WIRE_STRING, "method") ||
      next_of(&a, &url, ISO_WIRE_STRING, "url") ||
      next_of(&a, &v, ISO_WIRE_ARRAY, "headers") || v.count % 2)
    goto malformed;
  call_headers headers;
  call_headers_read(&a, v.count / 2, call->args_len, &headers);
  if (a.why == NULL && next_of(&a, &body, -1, "body") == 0 && body.type != ISO_WIRE_BYTES &&
      body.type != ISO_WIRE_NULL)
    a.why = "body";
  if (a.why) {
    call_headers_free(&headers);
    goto malformed;
  }

  loader_child *c = table_find(l, k, key_ptr, key_len);
  if (c && !sandbox_usable(&c->sb)) {
    child_discard(c);
    c = NULL;
  }
  if (c == NULL && !has_code) {
    call_headers_free(&headers);
    sandbox_call_error(result, "LoaderNeedsCode", "the dynamic worker must be (re)started");
    return -1;
  }
  if (c == NULL && k == KIND_LOAD) tell_idle_children(l);
  char *no_room = c == NULL ? make_room_for_child(l) : NULL;
  if (no_room) {
    call_headers_free(&headers);
    sandbox_call_error(result, "Error", no_room);
    free(no_room);
    return -1;
  }
  if (c == NULL) {
    c = child_new(l, k, key_ptr, key_len, call->token);
    const char *why = take_code(c, code_at, code_len, &l->limits);
    if (why) {
      call_headers_free(&headers);
      sandbox_call_error(result, "TypeError", why);
      child_drop_new(c);
      return -1;
    }
    char *refused = c->policy ? policy_problem(l, call->binding, c->policy) : NULL;
    if (refused) {
      call_headers_free(&headers);
      sandbox_call_error(result, "Error", refused);
      free(refused);
      child_drop_new(c);
      return -1;
    }
    /* Its fetch() runs under that policy: its rules, its secret grants. */
    c->sb.principal = c->policy;
    table_add(c);
  }
  loader_call *lc = xcalloc(1, sizeof *lc);
  lc->token = call->token;
  lc->call_id = call->call_id;
  iso_request req = {
      .method = method.ptr,
      .method_len = method.len,
      .url = url.ptr,
      .url_len = url.len,
      .headers = headers.list,
      .n_headers = headers.n,
      .body = body.type == ISO_WIRE_BYTES ? (const uint8_t *)body.ptr : NULL,
      .body_len = body.type == ISO_WIRE_BYTES ? body.len : 0,
  };
  /* The child's console lines are the parent's request's. */
  sandbox_request *parent = sandbox_request_of(l->w, call->token);
  const char *request_id = parent && parent->request_id[0] ? parent->request_id : NULL;
  int rc = sandbox_submit(&c->sb, lc, &req, request_id);
  call_headers_free(&headers);
  if (rc != 0) {
    free(lc);
    child_discard(c);
    sandbox_call_error(result, "Error", "the dynamic worker is unavailable; try again");
    return -1;
  }
  /* The child's lines (log, tail) name the parent's request: one request id
   * from the client's error body to everything its children did. */
  sandbox_request *parent_req = sandbox_request_of(l->w, call->token);
  if (parent_req && c->sb.owned)
    memcpy(c->sb.owned->request_id, parent_req->request_id, sizeof parent_req->request_id);
  return 0;

malformed:
  sandbox_call_error(result, "TypeError", "malformed loader call");
  return -1;
}

/* ---- hooks from the tenant's versions (tenants.c) ---- */

void loader_request_done(sandbox *l, uint64_t token) {
  if (l->loader == NULL) return;
  for (loader_child *c = l->loader->children; c; c = c->next) {
    if (c->kind != KIND_LOAD || c->owner_token != token) continue;
    c->owner_done = 1;
    child_check(c);
  }
}

/* Units of ours go; anyone else's stay queued, in order. */
static sched_unit *kept_head, **kept_tail;
static size_t completions_dropped;

static void sort_unit(sched_unit *u) {
  if (u->run == completion_run) {
    loader_completion *done = container_of(u, loader_completion, unit);
    iso_wire_free(&done->value);
    free(done);
    completions_dropped++;
    return;
  }
  u->next = NULL;
  *kept_tail = u;
  kept_tail = &u->next;
}

void loader_parent_free(sandbox *l) {
  worker *w = l->w;
  loader_state *st = l->loader;
  if (st == NULL) return;
  kept_head = NULL;
  kept_tail = &kept_head;
  completions_dropped = 0;
  sched_queue_clear(&w->sched, &l->queue, sort_unit);
  for (sched_unit *u = kept_head; u;) {
    sched_unit *next = u->next;
    sched_submit(&w->sched, &l->queue, u);
    u = next;
  }
  l->units -= completions_dropped < l->units ? completions_dropped : l->units;
  while (st->children) {
    loader_child *c = st->children;
    st->children = c->next;
    c->owner = NULL;
    c->prev = c->next = NULL;
    /* The parent's queue goes with it: what the child still has queued
     * waits for turns of its own. */
    sched_queue_set_group(&w->sched, &c->sb.queue, NULL);
    child_discard(c);
  }
  sandbox_reap(w);
  free(st);
  l->loader = NULL;
}

void loader_free_all(worker *w) {
  sandbox_free_all(w);
  free(w->loader.slots);
  w->loader = (loader_table){0};
}
