/*
 * The cordon monitor: rules, and sliding windows per tenant and metric.
 *
 * A window is a ring of buckets. A metric's bucket width is its longest
 * rule's window divided by CORDON_BUCKETS, so a tenant costs a bounded amount
 * of memory whatever the rate of its reports, and a windowed value may count
 * at most one bucket's width of history beyond the window's start.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "cordon.h"

#define CORDON_BUCKETS 256
#define RING_CAP (CORDON_BUCKETS + 2)

const char *const cordon_default_rules[] = {
    "cpu_limit_hits >= 3 in 60s",  "memory_limit_hits >= 1 in 300s", "crashes >= 1 in 600s",
    "mpk_faults >= 1 in 600s",     "uncaught_errors >= 100 in 60s",
};
const size_t cordon_n_default_rules = ARRAY_SIZE(cordon_default_rules);

static const char *const metric_names[CORDON_METRIC_COUNT] = {
    "cpu_limit_hits", "memory_limit_hits", "wall_limit_hits", "uncaught_errors",
    "heap_mb",        "mpk_faults",        "crashes",
};

const char *cordon_metric_name(cordon_metric m) {
  return (unsigned)m < CORDON_METRIC_COUNT ? metric_names[m] : NULL;
}

/* ---- rules ---------------------------------------------------------------------- */

static const char *skip_space(const char *p) {
  while (isspace((unsigned char)*p)) p++;
  return p;
}

static int parse_metric(const char **p, cordon_metric *out) {
  const char *s = *p;
  size_t len = 0;
  while (islower((unsigned char)s[len]) || s[len] == '_') len++;
  static const struct {
    const char *name;
    cordon_metric metric;
  } aliases[] = {{"crash", CORDON_CRASHES}, {"mpk_fault", CORDON_MPK_FAULTS}};
  for (int m = 0; m < CORDON_METRIC_COUNT; m++) {
    if (strlen(metric_names[m]) == len && strncmp(s, metric_names[m], len) == 0) {
      *out = (cordon_metric)m;
      *p = s + len;
      return 0;
    }
  }
  for (size_t i = 0; i < ARRAY_SIZE(aliases); i++) {
    if (strlen(aliases[i].name) == len && strncmp(s, aliases[i].name, len) == 0) {
      *out = aliases[i].metric;
      *p = s + len;
      return 0;
    }
  }
  return -1;
}

/* A whole decimal number without sign; -1 when there is none or it overflows. */
static int parse_number(const char **p, uint64_t *out) {
  const char *s = *p;
  if (!isdigit((unsigned char)*s)) return -1;
  uint64_t v = 0;
  while (isdigit((unsigned char)*s)) {
    if (v > (UINT64_MAX - 9) / 10) return -1;
    v = v * 10 + (uint64_t)(*s++ - '0');
  }
  *out = v;
  *p = s;
  return 0;
}

static int parse_duration(const char **p, uint64_t *ms) {
  uint64_t v;
  if (parse_number(p, &v) != 0) return -1;
  const char *s = *p;
  uint64_t unit;
  if (strncmp(s, "ms", 2) == 0) unit = 1, s += 2;
  else if (*s == 's') unit = 1000, s++;
  else if (*s == 'm') unit = 60000, s++;
  else if (*s == 'h') unit = 3600000, s++;
  else return -1;
  if (v > CORDON_MAX_WINDOW_MS) return -1;
  *ms = v * unit;
  *p = s;
  return 0;
}

/* "60s", "1500ms": seconds when exact, so "5m" reads back as "300s". */
static void format_duration(uint64_t ms, char *out, size_t len) {
  if (ms % 1000 == 0) snprintf(out, len, "%llus", (unsigned long long)(ms / 1000));
  else snprintf(out, len, "%llums", (unsigned long long)ms);
}

int cordon_rule_parse(const char *text, cordon_rule *out, const char **why) {
  if (text == NULL) {
    *why = "a rule must be a string";
    return -1;
  }
  cordon_rule r = {0};
  const char *p = skip_space(text);
  if (parse_metric(&p, &r.metric) != 0) {
    *why = "unknown metric: expected one of cpu_limit_hits, memory_limit_hits, wall_limit_hits, "
           "uncaught_errors, heap_mb, mpk_faults, crashes";
    return -1;
  }
  p = skip_space(p);
  if (strncmp(p, ">=", 2) != 0) {
    *why = "expected \">=\" after the metric (rules read METRIC >= N [in DURATION])";
    return -1;
  }
  p = skip_space(p + 2);
  if (parse_number(&p, &r.threshold) != 0 || r.threshold == 0 || r.threshold > 1000000000u) {
    *why = "the threshold must be a whole number between 1 and 1000000000";
    return -1;
  }
  const char *after = skip_space(p);
  if (after != p && strncmp(after, "in", 2) == 0 && isspace((unsigned char)after[2])) {
    p = skip_space(after + 2);
    if (parse_duration(&p, &r.window_ms) != 0 || r.window_ms < 1000 ||
        r.window_ms > CORDON_MAX_WINDOW_MS) {
      *why = "the window must be a whole number of ms, s, m or h between 1s and 24h (\"in 60s\")";
      return -1;
    }
  } else {
    r.window_ms = CORDON_DEFAULT_WINDOW_MS;
  }
  p = skip_space(p);
  if (*p != '\0') {
    *why = "unexpected text after the rule (rules read METRIC >= N [in DURATION])";
    return -1;
  }
  char window[24];
  format_duration(r.window_ms, window, sizeof window);
  snprintf(r.text, sizeof r.text, "%s >= %llu in %s", metric_names[r.metric],
           (unsigned long long)r.threshold, window);
  *out = r;
  return 0;
}

/* ---- windows -------------------------------------------------------------------- */

typedef struct bucket {
  int64_t slot;   /* time / width */
  uint64_t value; /* sum, or maximum for a gauge */
} bucket;

typedef struct window {
  bucket ring[RING_CAP];
  unsigned first;
  unsigned count;
} window;

typedef struct tenant_entry {
  struct tenant_entry *next;
  char *name;
  int64_t last_ms;
  window *windows[CORDON_METRIC_COUNT]; /* NULL until the metric is first recorded */
} tenant_entry;

struct cordon_monitor {
  cordon_rule rules[CORDON_MAX_RULES];
  size_t n_rules;
  uint64_t width_ms[CORDON_METRIC_COUNT]; /* 0: no rule uses the metric, nothing is kept */
  tenant_entry **table;
  size_t n_slots; /* power of two */
  size_t size;
};

static int is_gauge(cordon_metric m) { return m == CORDON_HEAP_MB; }

cordon_monitor *cordon_monitor_new(const cordon_rule *rules, size_t n) {
  cordon_monitor *m = xcalloc(1, sizeof *m);
  if (n > CORDON_MAX_RULES) n = CORDON_MAX_RULES;
  if (n) memcpy(m->rules, rules, n * sizeof *rules);
  m->n_rules = n;
  uint64_t longest[CORDON_METRIC_COUNT] = {0};
  for (size_t i = 0; i < n; i++)
    if (rules[i].window_ms > longest[rules[i].metric]) longest[rules[i].metric] = rules[i].window_ms;
  for (int k = 0; k < CORDON_METRIC_COUNT; k++)
    m->width_ms[k] = longest[k] ? (longest[k] + CORDON_BUCKETS - 1) / CORDON_BUCKETS : 0;
  m->n_slots = 64;
  m->table = xcalloc(m->n_slots, sizeof *m->table);
  return m;
}

static void entry_free(tenant_entry *e) {
  for (int k = 0; k < CORDON_METRIC_COUNT; k++) free(e->windows[k]);
  free(e->name);
  free(e);
}

void cordon_monitor_free(cordon_monitor *m) {
  if (m == NULL) return;
  for (size_t i = 0; i < m->n_slots; i++) {
    tenant_entry *e = m->table[i];
    while (e) {
      tenant_entry *next = e->next;
      entry_free(e);
      e = next;
    }
  }
  free(m->table);
  free(m);
}

/* FNV-1a: tenant names are short and chosen by operators, not by attackers
 * who could aim at collisions (the names are those of deployed workers). */
static size_t hash_name(const char *s) {
  uint64_t h = 1469598103934665603u;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211u;
  return (size_t)h;
}

static tenant_entry **find_link(const cordon_monitor *m, const char *name) {
  tenant_entry **link = &m->table[hash_name(name) & (m->n_slots - 1)];
  while (*link && strcmp((*link)->name, name) != 0) link = &(*link)->next;
  return link;
}

static void grow(cordon_monitor *m) {
  size_t n = m->n_slots * 2;
  tenant_entry **table = xcalloc(n, sizeof *table);
  for (size_t i = 0; i < m->n_slots; i++) {
    tenant_entry *e = m->table[i];
    while (e) {
      tenant_entry *next = e->next;
      size_t h = hash_name(e->name) & (n - 1);
      e->next = table[h];
      table[h] = e;
      e = next;
    }
  }
  free(m->table);
  m->table = table;
  m->n_slots = n;
}

static tenant_entry *get_or_add(cordon_monitor *m, const char *name) {
  tenant_entry **link = find_link(m, name);
  if (*link) return *link;
  if (m->size >= m->n_slots) {
    grow(m);
    link = find_link(m, name);
  }
  tenant_entry *e = xcalloc(1, sizeof *e);
  e->name = xstrdup(name);
  e->last_ms = INT64_MIN;
  *link = e;
  m->size++;
  return e;
}

static void window_add(window *w, int64_t slot, uint64_t amount, int gauge) {
  if (w->count > 0) {
    bucket *last = &w->ring[(w->first + w->count - 1) % RING_CAP];
    if (last->slot == slot) {
      if (gauge) last->value = amount > last->value ? amount : last->value;
      else last->value = last->value + amount < last->value ? UINT64_MAX : last->value + amount;
      return;
    }
  }
  if (w->count == RING_CAP) { /* the oldest bucket is past every window by now */
    w->first = (w->first + 1) % RING_CAP;
    w->count--;
  }
  w->ring[(w->first + w->count) % RING_CAP] = (bucket){slot, amount};
  w->count++;
}

/* Sum (or maximum) of the buckets that overlap (now - window_ms, now]. */
static uint64_t window_value(const window *w, uint64_t width, uint64_t window_ms, int64_t now,
                             int gauge) {
  if (w == NULL || width == 0) return 0;
  int64_t start = now - (int64_t)window_ms;
  uint64_t v = 0;
  for (unsigned i = 0; i < w->count; i++) {
    const bucket *b = &w->ring[(w->first + i) % RING_CAP];
    if (b->slot * (int64_t)width + (int64_t)width <= start) continue;
    if (gauge) v = b->value > v ? b->value : v;
    else v = v + b->value < v ? UINT64_MAX : v + b->value;
  }
  return v;
}

static int64_t slot_of(int64_t now, uint64_t width) {
  int64_t w = (int64_t)width;
  return now >= 0 ? now / w : -((-now + w - 1) / w);
}

int cordon_monitor_add(cordon_monitor *m, const char *tenant, cordon_metric metric,
                       uint64_t amount, int64_t now_ms, cordon_verdict *verdict) {
  if ((unsigned)metric >= CORDON_METRIC_COUNT || m->width_ms[metric] == 0 || amount == 0)
    return 0;
  tenant_entry *e = get_or_add(m, tenant);
  if (now_ms < e->last_ms) now_ms = e->last_ms;
  e->last_ms = now_ms;
  uint64_t width = m->width_ms[metric];
  if (e->windows[metric] == NULL) e->windows[metric] = xcalloc(1, sizeof(window));
  window_add(e->windows[metric], slot_of(now_ms, width), amount, is_gauge(metric));
  for (size_t i = 0; i < m->n_rules; i++) {
    const cordon_rule *r = &m->rules[i];
    if (r->metric != metric) continue;
    uint64_t v = window_value(e->windows[metric], width, r->window_ms, now_ms, is_gauge(metric));
    if (v >= r->threshold) {
      verdict->rule = *r;
      verdict->observed = v;
      return 1;
    }
  }
  return 0;
}

uint64_t cordon_monitor_value(const cordon_monitor *m, const char *tenant, cordon_metric metric,
                              uint64_t window_ms, int64_t now_ms) {
  if ((unsigned)metric >= CORDON_METRIC_COUNT) return 0;
  tenant_entry *e = *find_link(m, tenant);
  if (e == NULL) return 0;
  return window_value(e->windows[metric], m->width_ms[metric], window_ms, now_ms, is_gauge(metric));
}

void cordon_monitor_forget(cordon_monitor *m, const char *tenant) {
  tenant_entry **link = find_link(m, tenant);
  tenant_entry *e = *link;
  if (e == NULL) return;
  *link = e->next;
  entry_free(e);
  m->size--;
}

/* Nothing of the tenant's is inside the longest window of any metric. */
static int entry_empty(const cordon_monitor *m, const tenant_entry *e, int64_t now) {
  for (int k = 0; k < CORDON_METRIC_COUNT; k++) {
    uint64_t width = m->width_ms[k];
    if (e->windows[k] && window_value(e->windows[k], width, width * CORDON_BUCKETS, now, 0) > 0)
      return 0;
  }
  return 1;
}

void cordon_monitor_expire(cordon_monitor *m, int64_t now_ms) {
  for (size_t i = 0; i < m->n_slots; i++) {
    tenant_entry **link = &m->table[i];
    while (*link) {
      tenant_entry *e = *link;
      if (entry_empty(m, e, now_ms)) {
        *link = e->next;
        entry_free(e);
        m->size--;
      } else {
        link = &e->next;
      }
    }
  }
}

size_t cordon_monitor_size(const cordon_monitor *m) { return m->size; }
