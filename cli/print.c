/*
 * edgectl's output for people and for machines: the node's JSON indented
 * (--json), any JSON object as "key: value" fields with arrays of objects as
 * tables, and the tables the list commands print. Nothing here talks to the
 * node or decides what a command shows.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base.h"
#include "cli.h"

void cli_print_json(const json_t *j) {
  char *s = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY);
  if (s == NULL) abort();
  puts(s);
  free(s);
}

void cli_print_json_body(const cli_response *r) {
  json_t *j = cli_response_json(r);
  if (j != NULL) {
    cli_print_json(j);
    json_decref(j);
    return;
  }
  if (r->body_len > 0) {
    fwrite(r->body, 1, r->body_len, stdout);
    if (r->body[r->body_len - 1] != '\n') fputc('\n', stdout);
  }
}

/* Timestamps arrive as epoch milliseconds (or seconds) or as text. */
static void format_time(const json_t *v, char *out, size_t outlen) {
  if (json_is_string(v)) {
    snprintf(out, outlen, "%s", json_string_value(v));
    return;
  }
  if (!json_is_number(v)) {
    snprintf(out, outlen, "-");
    return;
  }
  double n = json_number_value(v);
  time_t secs = (time_t)(n > 1e11 ? n / 1000 : n);
  struct tm tm;
  if (gmtime_r(&secs, &tm) == NULL || strftime(out, outlen, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
    snprintf(out, outlen, "%.0f", n);
}

static int is_time_key(const char *key) {
  size_t n = strlen(key);
  return n > 3 && strcmp(key + n - 3, "_at") == 0;
}

/* Sizes: "size_bytes", "wal_bytes", "limit_bytes". */
static int is_bytes_key(const char *key) {
  size_t n = strlen(key);
  return n > 6 && strcmp(key + n - 6, "_bytes") == 0;
}

/* The scalar as text for people; owned by the caller. */
static char *scalar_text(const char *key, const json_t *v) {
  char tbuf[64];
  switch (json_typeof(v)) {
    case JSON_STRING: return xstrdup(json_string_value(v));
    case JSON_INTEGER:
      if (is_time_key(key)) {
        format_time(v, tbuf, sizeof tbuf);
        return xstrdup(tbuf);
      }
      if (is_bytes_key(key) && json_integer_value(v) >= 1024) {
        char *human = cli_format_bytes((double)json_integer_value(v));
        char *s = xasprintf("%" JSON_INTEGER_FORMAT " (%s)", json_integer_value(v), human);
        free(human);
        return s;
      }
      return xasprintf("%" JSON_INTEGER_FORMAT, json_integer_value(v));
    case JSON_REAL: return xasprintf("%g", json_real_value(v));
    case JSON_TRUE: return xstrdup("true");
    case JSON_FALSE: return xstrdup("false");
    case JSON_NULL: return xstrdup("-");
    default: {
      if ((json_is_object(v) && json_object_size(v) == 0) ||
          (json_is_array(v) && json_array_size(v) == 0))
        return xstrdup("-");
      char *s = json_dumps(v, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY);
      if (s == NULL) abort();
      return s;
    }
  }
}

void cli_print_scalar(const char *key, const json_t *v) {
  char *s = scalar_text(key, v);
  fputs(s, stdout);
  free(s);
}

static int is_scalar(const json_t *v) { return !json_is_object(v) && !json_is_array(v); }

/* An object in a table cell, on one line: "enabled=false keys=0". */
static char *inline_text(const json_t *obj) {
  if (json_object_size(obj) == 0) return xstrdup("-");
  char *out = xstrdup("");
  const char *k;
  json_t *v;
  json_object_foreach((json_t *)obj, k, v) {
    char *val = scalar_text(k, v);
    char *next = xasprintf("%s%s%s=%s", out, out[0] ? " " : "", k, val);
    free(val);
    free(out);
    out = next;
  }
  return out;
}

/* An array of objects as a table: one column per key, in the order first seen. */
static void print_array_table(const json_t *arr, int indent) {
  json_t *keys = json_array();
  json_t *seen = json_object();
  size_t i;
  json_t *e;
  json_array_foreach(arr, i, e) {
    const char *k;
    json_t *v;
    json_object_foreach(e, k, v) {
      if (json_object_get(seen, k) == NULL) {
        json_object_set_new(seen, k, json_true());
        json_array_append_new(keys, json_string(k));
      }
    }
  }
  int ncols = (int)json_array_size(keys);
  char **heads = xcalloc((size_t)ncols + 1, sizeof *heads);
  int *right = xcalloc((size_t)ncols + 1, sizeof *right);
  for (int c = 0; c < ncols; c++) {
    const char *k = json_string_value(json_array_get(keys, (size_t)c));
    heads[c] = xstrdup(k);
    for (char *p = heads[c]; *p; p++) {
      if (*p >= 'a' && *p <= 'z') *p = (char)(*p - 'a' + 'A');
    }
    right[c] = !is_time_key(k);
    json_array_foreach(arr, i, e) {
      json_t *v = json_object_get(e, k);
      if (v != NULL && !json_is_number(v)) right[c] = 0;
    }
  }
  cli_table t = {ncols, (const char *const *)heads, right, NULL, 0};
  json_array_foreach(arr, i, e) {
    char **row = xcalloc((size_t)ncols + 1, sizeof *row);
    for (int c = 0; c < ncols; c++) {
      const char *k = json_string_value(json_array_get(keys, (size_t)c));
      json_t *v = json_object_get(e, k);
      row[c] = !v ? xstrdup("-") : json_is_object(v) ? inline_text(v) : scalar_text(k, v);
    }
    cli_table_add(&t, row);
    free(row);
  }
  cli_table_print(&t, indent);
  for (int c = 0; c < ncols; c++) free(heads[c]);
  free(heads);
  free(right);
  json_decref(seen);
  json_decref(keys);
}

void cli_print_object(const json_t *obj, int indent) {
  const char *k;
  json_t *v;
  size_t width = 0;
  json_object_foreach((json_t *)obj, k, v) {
    if (strlen(k) > width) width = strlen(k);
  }
  json_object_foreach((json_t *)obj, k, v) {
    printf("%*s%s:", indent, "", k);
    int empty = (json_is_object(v) && json_object_size(v) == 0) ||
                (json_is_array(v) && json_array_size(v) == 0);
    if (is_scalar(v) || empty) {
      printf("%*s", (int)(width - strlen(k) + 1), "");
      cli_print_scalar(k, v);
      fputc('\n', stdout);
    } else if (json_is_object(v)) {
      fputc('\n', stdout);
      cli_print_object(v, indent + 2);
    } else {
      size_t i;
      json_t *e;
      int all_scalar = 1, all_objects = 1;
      json_array_foreach(v, i, e) {
        all_scalar &= is_scalar(e);
        all_objects &= json_is_object(e);
      }
      if (all_scalar) {
        json_array_foreach(v, i, e) {
          fputs(i ? ", " : " ", stdout);
          cli_print_scalar(k, e);
        }
        fputc('\n', stdout);
      } else if (all_objects) {
        fputc('\n', stdout);
        print_array_table(v, indent + 2);
      } else {
        fputc('\n', stdout);
        json_array_foreach(v, i, e) {
          printf("%*s- ", indent + 2, "");
          cli_print_scalar(k, e);
          fputc('\n', stdout);
        }
      }
    }
  }
}

char *cli_format_bytes(double b) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  size_t u = 0;
  while (b >= 1024 && u + 1 < ARRAY_SIZE(units)) {
    b /= 1024;
    u++;
  }
  return u == 0 ? xasprintf("%.0f B", b) : xasprintf("%.1f %s", b, units[u]);
}

void cli_table_add(cli_table *t, char **row) {
  t->cells = xrealloc(t->cells, (t->nrows + 1) * (size_t)t->ncols * sizeof *t->cells);
  memcpy(t->cells + t->nrows * (size_t)t->ncols, row, (size_t)t->ncols * sizeof *row);
  t->nrows++;
}

void cli_table_print(cli_table *t, int indent) {
  size_t *width = xcalloc((size_t)t->ncols + 1, sizeof *width);
  for (int c = 0; c < t->ncols; c++) width[c] = strlen(t->heads[c]);
  for (size_t r = 0; r < t->nrows; r++)
    for (int c = 0; c < t->ncols; c++) {
      size_t len = strlen(t->cells[r * (size_t)t->ncols + (size_t)c]);
      if (len > width[c]) width[c] = len;
    }
  for (size_t r = 0; r <= t->nrows; r++) {
    printf("%*s", indent, "");
    for (int c = 0; c < t->ncols; c++) {
      const char *s = r == 0 ? t->heads[c] : t->cells[(r - 1) * (size_t)t->ncols + (size_t)c];
      int last = c == t->ncols - 1;
      if (t->right[c]) printf("%*s%s", (int)width[c], s, last ? "" : "  ");
      else if (last) fputs(s, stdout);
      else printf("%-*s  ", (int)width[c], s);
    }
    fputc('\n', stdout);
  }
  for (size_t i = 0; i < t->nrows * (size_t)t->ncols; i++) free(t->cells[i]);
  free(t->cells);
  t->cells = NULL;
  t->nrows = 0;
  free(width);
}

double cli_jnum(const json_t *obj, const char *key) {
  return json_number_value(json_object_get(obj, key));
}

const char *cli_jstr(const json_t *obj, const char *key, const char *fallback) {
  const char *s = json_string_value(json_object_get(obj, key));
  return s ? s : fallback;
}

void cli_jset(json_t *obj, const char *key, json_t *value) {
  if (value == NULL || json_object_set_new(obj, key, value) < 0) abort();
}
