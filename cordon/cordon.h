/*
 * cordon: the monitor that decides when a tenant misbehaves enough to be
 * moved out of the shared worker processes into a process of its own.
 *
 * It is a pure library: no I/O, no clock of its own, no event loop. The
 * supervisor feeds it what the worker processes report (per-tenant deltas of
 * limit hits and errors, heap high-water marks, memory protection faults,
 * crashes attributed to the tenant whose code was running) together with the
 * time, and it answers "cordon tenant X because rule R".
 *
 * A rule is written `METRIC >= N [in DURATION]`, for example
 * `cpu_limit_hits >= 3 in 60s`. Counting metrics sum what was observed in the
 * sliding window that ends now; heap_mb takes the largest high-water mark
 * seen in the window. DURATION is a whole number followed by ms, s, m or h,
 * between 1 s and 24 h; without it the window is CORDON_DEFAULT_WINDOW_MS.
 */
#ifndef EDGENODE_CORDON_H
#define EDGENODE_CORDON_H

#include <stddef.h>
#include <stdint.h>

typedef enum cordon_metric {
  CORDON_CPU_LIMIT_HITS,    /* requests ended by the CPU limit */
  CORDON_MEMORY_LIMIT_HITS, /* requests ended by the heap limit */
  CORDON_WALL_LIMIT_HITS,   /* requests answered 504 at the wall-time limit */
  CORDON_UNCAUGHT_ERRORS,   /* requests that ended in an uncaught exception */
  CORDON_HEAP_MB,           /* heap high-water mark of one isolate, MiB (a gauge) */
  CORDON_MPK_FAULTS,        /* memory protection key faults ("mpk_fault" events) */
  CORDON_CRASHES,           /* worker process crashes while the tenant's code ran */
  CORDON_METRIC_COUNT
} cordon_metric;

#define CORDON_DEFAULT_WINDOW_MS 600000u
#define CORDON_MAX_WINDOW_MS (24u * 3600u * 1000u)
#define CORDON_RULE_TEXT_MAX 64
#define CORDON_MAX_RULES 32

typedef struct cordon_rule {
  cordon_metric metric;
  uint64_t threshold;             /* fires when the windowed value reaches it */
  uint64_t window_ms;
  char text[CORDON_RULE_TEXT_MAX]; /* canonical form: "cpu_limit_hits >= 3 in 60s" */
} cordon_rule;

/* The rules a node uses when its configuration names none. */
extern const char *const cordon_default_rules[];
extern const size_t cordon_n_default_rules;

/* "cpu_limit_hits", ...; NULL for a value out of range. */
const char *cordon_metric_name(cordon_metric m);

/*
 * Parses one rule. Metric aliases "crash" and "mpk_fault" are accepted.
 * Returns 0 and fills *out, or -1 with *why set to a constant message a
 * person can act on ("unknown metric: expected one of ...").
 */
int cordon_rule_parse(const char *text, cordon_rule *out, const char **why);

typedef struct cordon_monitor cordon_monitor;

/*
 * A monitor over a copy of `rules` (at most CORDON_MAX_RULES; n may be 0:
 * nothing ever fires). Aborts on out-of-memory like xmalloc.
 */
cordon_monitor *cordon_monitor_new(const cordon_rule *rules, size_t n);
void cordon_monitor_free(cordon_monitor *m);

/* Why a rule fired: the rule (a copy) and what the window held. */
typedef struct cordon_verdict {
  cordon_rule rule;
  uint64_t observed;
} cordon_verdict;

/*
 * Records `amount` of `metric` for `tenant` at now_ms (milliseconds, any
 * monotonic origin; a value older than the newest one seen for the tenant is
 * counted as happening at the newest). For CORDON_HEAP_MB, amount is a
 * high-water mark, not an increment. Returns 1 and fills *verdict when a rule
 * on that metric has reached its threshold (the first such rule in
 * configuration order), 0 otherwise. A tenant keeps firing until the caller
 * calls cordon_monitor_forget(); amount 0 records nothing.
 */
int cordon_monitor_add(cordon_monitor *m, const char *tenant, cordon_metric metric,
                       uint64_t amount, int64_t now_ms, cordon_verdict *verdict);

/* Drops everything recorded for `tenant` (it was cordoned, deleted or uncordoned). */
void cordon_monitor_forget(cordon_monitor *m, const char *tenant);

/*
 * Drops tenants whose windows are all empty at now_ms, so that memory follows
 * the tenants that misbehaved recently, not every tenant ever seen.
 */
void cordon_monitor_expire(cordon_monitor *m, int64_t now_ms);

/* Tenants with something recorded (for tests and metrics). */
size_t cordon_monitor_size(const cordon_monitor *m);

/* The windowed value of `metric` for `tenant` at now_ms under `window_ms`. */
uint64_t cordon_monitor_value(const cordon_monitor *m, const char *tenant, cordon_metric metric,
                              uint64_t window_ms, int64_t now_ms);

#endif
