/*
 * The subset of TOML a project config (edgenode.toml, as wrangler.toml)
 * uses, read into JSON so that one set of rules checks both config files:
 * comments, [tables] and [[arrays of tables]] (dotted), bare, quoted and
 * dotted keys, "basic" and 'literal' strings, integers, floats, booleans,
 * arrays and inline tables. Multi-line strings and dates are refused with
 * the line, not guessed at.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "cli.h"

/* Arrays and inline tables nest at most this deep: a config is flat. */
#define TOML_MAX_DEPTH 32

typedef struct parser {
  const char *s, *end;
  int line;
  int depth;
  char *error; /* owned; the first error stops the parse */
} parser;

__attribute__((format(printf, 2, 3))) static int fail(parser *p, const char *fmt, ...) {
  if (p->error != NULL) return -1;
  va_list ap;
  va_start(ap, fmt);
  char msg[256];
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  p->error = xasprintf("line %d: %s", p->line, msg);
  return -1;
}

static int at_end(const parser *p) { return p->s >= p->end; }

/* Spaces and tabs; with newlines, also newlines and comments (inside arrays). */
static void skip_space(parser *p, int newlines) {
  while (!at_end(p)) {
    char c = *p->s;
    if (c == ' ' || c == '\t' || c == '\r') {
      p->s++;
    } else if (c == '#') {
      while (!at_end(p) && *p->s != '\n') p->s++;
    } else if (c == '\n' && newlines) {
      p->line++;
      p->s++;
    } else {
      return;
    }
  }
}

/* After a key/value or a header: only a comment may follow on the line. */
static int end_of_line(parser *p) {
  skip_space(p, 0);
  if (at_end(p)) return 0;
  if (*p->s != '\n') return fail(p, "unexpected '%c' after the value", *p->s);
  p->s++;
  p->line++;
  return 0;
}

static int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* \uXXXX as UTF-8 into out (at least 4 bytes); returns the length, or 0. */
static size_t utf8_of(unsigned long cp, char *out) {
  if (cp < 0x80) {
    out[0] = (char)cp;
    return 1;
  }
  if (cp < 0x800) {
    out[0] = (char)(0xc0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3f));
    return 2;
  }
  if (cp >= 0xd800 && cp <= 0xdfff) return 0;
  if (cp < 0x10000) {
    out[0] = (char)(0xe0 | (cp >> 12));
    out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[2] = (char)(0x80 | (cp & 0x3f));
    return 3;
  }
  if (cp > 0x10ffff) return 0;
  out[0] = (char)(0xf0 | (cp >> 18));
  out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
  out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
  out[3] = (char)(0x80 | (cp & 0x3f));
  return 4;
}

/* One escape after '\' in a basic string, appended to buf. */
static int escape(parser *p, char *buf, size_t *n) {
  if (at_end(p)) return fail(p, "unterminated string");
  char c = *p->s++;
  const char *from = "btnfr\"\\", *to = "\b\t\n\f\r\"\\";
  const char *k = strchr(from, c);
  if (k != NULL && c != '\0') {
    buf[(*n)++] = to[k - from];
    return 0;
  }
  int digits = c == 'u' ? 4 : c == 'U' ? 8 : 0;
  if (digits == 0 || p->end - p->s < digits) return fail(p, "unknown escape '\\%c' in a string", c);
  unsigned long cp = 0;
  for (int i = 0; i < digits; i++) {
    int h = hex_value(*p->s++);
    if (h < 0) return fail(p, "bad \\%c escape in a string", c);
    cp = cp * 16 + (unsigned long)h;
  }
  size_t len = utf8_of(cp, buf + *n);
  if (len == 0) return fail(p, "\\%c escape is not a Unicode scalar value", c);
  *n += len;
  return 0;
}

/* A "basic" or 'literal' string on one line, as a JSON string (NULL on error). */
static json_t *string(parser *p) {
  char quote = *p->s++;
  if (p->end - p->s >= 2 && p->s[0] == quote && p->s[1] == quote) {
    fail(p, "multi-line strings are not supported in edgenode.toml");
    return NULL;
  }
  char *buf = xmalloc((size_t)(p->end - p->s) + 4);
  size_t n = 0;
  for (;;) {
    if (at_end(p) || *p->s == '\n') {
      fail(p, "unterminated string");
      break;
    }
    char c = *p->s++;
    if (c == quote) {
      json_t *j = json_stringn(buf, n);
      if (j == NULL) fail(p, "a string is not valid UTF-8");
      free(buf);
      return j;
    }
    if (c == '\\' && quote == '"') {
      if (escape(p, buf, &n) < 0) break;
    } else {
      buf[n++] = c;
    }
  }
  free(buf);
  return NULL;
}

static int is_bare(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-';
}

/* A dotted key ("a.b", "\"x y\".c") as an array of its parts, or NULL. */
static json_t *key(parser *p) {
  json_t *parts = json_array();
  for (;;) {
    skip_space(p, 0);
    if (at_end(p)) break;
    json_t *part = NULL;
    if (*p->s == '"' || *p->s == '\'') {
      part = string(p);
    } else {
      const char *start = p->s;
      while (!at_end(p) && is_bare(*p->s)) p->s++;
      if (p->s == start) fail(p, "expected a key");
      else part = json_stringn(start, (size_t)(p->s - start));
    }
    if (part == NULL) break;
    json_array_append_new(parts, part);
    skip_space(p, 0);
    if (at_end(p) || *p->s != '.') return parts;
    p->s++;
  }
  json_decref(parts);
  return NULL;
}

static json_t *value(parser *p);

/* [v, v, ...] over several lines, a trailing comma allowed. */
static json_t *array(parser *p) {
  p->s++;
  json_t *arr = json_array();
  for (;;) {
    skip_space(p, 1);
    if (at_end(p)) break;
    if (*p->s == ']') {
      p->s++;
      return arr;
    }
    json_t *v = value(p);
    if (v == NULL) break;
    json_array_append_new(arr, v);
    skip_space(p, 1);
    if (at_end(p)) break;
    if (*p->s == ',') {
      p->s++;
    } else if (*p->s != ']') {
      fail(p, "expected ',' or ']' in an array");
      break;
    }
  }
  fail(p, "unterminated array");
  json_decref(arr);
  return NULL;
}

static int set_path(parser *p, json_t *table, json_t *parts, json_t *v);

/* { k = v, ... } on one line. */
static json_t *inline_table(parser *p) {
  p->s++;
  json_t *t = json_object();
  skip_space(p, 0);
  if (!at_end(p) && *p->s == '}') {
    p->s++;
    return t;
  }
  for (;;) {
    json_t *parts = key(p);
    if (parts == NULL) break;
    skip_space(p, 0);
    json_t *v = NULL;
    if (at_end(p) || *p->s != '=') {
      fail(p, "expected '=' after a key");
    } else {
      p->s++;
      skip_space(p, 0);
      v = value(p);
    }
    int rc = v ? set_path(p, t, parts, v) : -1;
    json_decref(parts);
    if (rc < 0) break;
    skip_space(p, 0);
    if (!at_end(p) && *p->s == ',') {
      p->s++;
      continue;
    }
    if (!at_end(p) && *p->s == '}') {
      p->s++;
      return t;
    }
    fail(p, "expected ',' or '}' in an inline table");
    break;
  }
  json_decref(t);
  return NULL;
}

/* An integer, a float, true or false: the run of characters up to a delimiter. */
static json_t *scalar(parser *p) {
  const char *start = p->s;
  while (!at_end(p) && strchr(" \t\r\n,]}#", *p->s) == NULL) p->s++;
  size_t n = (size_t)(p->s - start);
  if (n == 4 && strncmp(start, "true", 4) == 0) return json_true();
  if (n == 5 && strncmp(start, "false", 5) == 0) return json_false();
  char text[64];
  size_t k = 0;
  int is_float = 0;
  for (size_t i = 0; i < n && k + 1 < sizeof text; i++) {
    if (start[i] == '_') continue; /* 1_000 */
    if (start[i] == '.' || start[i] == 'e' || start[i] == 'E') is_float = 1;
    text[k++] = start[i];
  }
  text[k] = '\0';
  char *end = NULL;
  errno = 0;
  if (n > 0 && n < sizeof text && !is_float) {
    long long v = strtoll(text, &end, 10);
    if (errno == 0 && *end == '\0') return json_integer(v);
  } else if (n > 0 && n < sizeof text && strpbrk(text, "xXnN") == NULL) {
    /* no hex floats, inf or nan: JSON has none of them */
    double v = strtod(text, &end);
    if (errno == 0 && *end == '\0' && isfinite(v)) return json_real(v);
  }
  fail(p, "unsupported value '%.*s' (strings, numbers, true/false, arrays and inline tables only)",
       (int)(n > 40 ? 40 : n), start);
  return NULL;
}

static json_t *value(parser *p) {
  if (at_end(p) || *p->s == '\n') {
    fail(p, "expected a value");
    return NULL;
  }
  if (++p->depth > TOML_MAX_DEPTH) {
    fail(p, "values nest too deep");
    return NULL;
  }
  json_t *v;
  char c = *p->s;
  if (c == '"' || c == '\'') v = string(p);
  else if (c == '[') v = array(p);
  else if (c == '{') v = inline_table(p);
  else v = scalar(p);
  p->depth--;
  return v;
}

/* The table at `parts` below `t` (the last element of an array of tables). */
static json_t *descend(parser *p, json_t *t, json_t *parts, size_t upto) {
  for (size_t i = 0; i < upto && t != NULL; i++) {
    const char *k = json_string_value(json_array_get(parts, i));
    json_t *next = json_object_get(t, k);
    if (next == NULL) {
      next = json_object();
      cli_jset(t, k, next);
    } else if (json_is_array(next) && json_is_object(json_array_get(next, json_array_size(next) - 1))) {
      next = json_array_get(next, json_array_size(next) - 1);
    } else if (!json_is_object(next)) {
      fail(p, "key '%s' is already a value, not a table", k);
      return NULL;
    }
    t = next;
  }
  return t;
}

/* table[parts] = v, taking v; a key set twice is an error. */
static int set_path(parser *p, json_t *table, json_t *parts, json_t *v) {
  size_t n = json_array_size(parts);
  json_t *t = descend(p, table, parts, n - 1);
  const char *k = json_string_value(json_array_get(parts, n - 1));
  if (t == NULL || json_object_get(t, k) != NULL) {
    if (t != NULL) fail(p, "key '%s' is given twice", k);
    json_decref(v);
    return -1;
  }
  cli_jset(t, k, v);
  return 0;
}

/* [a.b] or [[a.b]]: the table that the following keys go into. */
static json_t *header(parser *p, json_t *root) {
  int of_array = p->end - p->s >= 2 && p->s[1] == '[';
  p->s += of_array ? 2 : 1;
  json_t *parts = key(p);
  if (parts == NULL) return NULL;
  json_t *t = NULL;
  if (at_end(p) || *p->s != ']' || (of_array && (p->end - p->s < 2 || p->s[1] != ']'))) {
    fail(p, "expected '%s' to close the table header", of_array ? "]]" : "]");
  } else {
    p->s += of_array ? 2 : 1;
    size_t n = json_array_size(parts);
    json_t *parent = descend(p, root, parts, n - 1);
    const char *k = json_string_value(json_array_get(parts, n - 1));
    json_t *have = parent ? json_object_get(parent, k) : NULL;
    if (parent == NULL) {
      /* descend() said why */
    } else if (of_array) {
      if (have == NULL) cli_jset(parent, k, have = json_array());
      if (!json_is_array(have)) fail(p, "[[%s]]: '%s' is already a table or value", k, k);
      else json_array_append_new(have, t = json_object());
    } else if (have == NULL) {
      cli_jset(parent, k, t = json_object());
    } else if (json_is_object(have)) {
      t = have; /* [a.b] after [a.b.c] defined a */
    } else {
      fail(p, "[%s]: '%s' is already a value", k, k);
    }
  }
  json_decref(parts);
  if (t != NULL && end_of_line(p) < 0) return NULL;
  return t;
}

json_t *cli_toml_parse(const char *text, size_t len, char **error) {
  parser p = {.s = text, .end = text + len, .line = 1};
  json_t *root = json_object(), *table = root;
  if (memchr(text, '\0', len) != NULL) fail(&p, "the file holds a NUL byte");
  while (p.error == NULL) {
    skip_space(&p, 1);
    if (at_end(&p)) break;
    if (*p.s == '[') {
      table = header(&p, root);
      continue;
    }
    json_t *parts = key(&p);
    if (parts == NULL) break;
    skip_space(&p, 0);
    if (at_end(&p) || *p.s != '=') {
      fail(&p, "expected '=' after a key");
    } else {
      p.s++;
      skip_space(&p, 0);
      json_t *v = value(&p);
      if (v != NULL && set_path(&p, table, parts, v) == 0) end_of_line(&p);
    }
    json_decref(parts);
  }
  if (p.error != NULL) {
    json_decref(root);
    *error = p.error;
    return NULL;
  }
  *error = NULL;
  return root;
}
