#include "base.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/resource.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

static const char *log_process = "edgenode";
static log_level log_min_level = LOG_INFO;
/* Where the log goes: stdio's stderr as log_init() found it. A process may
 * point stderr elsewhere afterwards (the worker's stray output). */
static FILE *log_out;

static void oom(size_t size) {
  fprintf(log_out ? log_out : stderr,
          "{\"level\":\"error\",\"msg\":\"out of memory allocating %zu bytes\"}\n", size);
  abort();
}

void *xmalloc(size_t size) {
  void *p = malloc(size ? size : 1);
  if (p == NULL) oom(size);
  return p;
}

void *xcalloc(size_t count, size_t size) {
  void *p = calloc(count ? count : 1, size ? size : 1);
  if (p == NULL) oom(count * size);
  return p;
}

void *xrealloc(void *ptr, size_t size) {
  void *p = realloc(ptr, size ? size : 1);
  if (p == NULL) oom(size);
  return p;
}

char *xstrdup(const char *s) { return xstrndup(s, strlen(s)); }

char *xstrndup(const char *s, size_t len) {
  char *p = xmalloc(len + 1);
  memcpy(p, s, len);
  p[len] = '\0';
  return p;
}

char *xasprintf(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *out = NULL;
  int n = vasprintf(&out, fmt, ap);
  va_end(ap);
  if (n < 0) oom(0);
  return out;
}

void log_init(const char *process, log_level min_level) {
  log_process = process;
  log_min_level = min_level;
  log_out = stderr;
  /* Line-buffered: V8's fatal errors end the process without flushing. */
  setvbuf(stderr, NULL, _IOLBF, 0);
}

static const char *level_name(log_level level) {
  switch (level) {
    case LOG_DEBUG: return "debug";
    case LOG_INFO: return "info";
    case LOG_WARN: return "warn";
    case LOG_ERROR: return "error";
  }
  return "info";
}

void log_vwrite(log_level level, const char *tenant, const char *request_id,
                const char *extra_json, const char *fmt, va_list ap) {
  if (level < log_min_level) return;
  char msg[4096];
  vsnprintf(msg, sizeof msg, fmt, ap);
  log_write_bytes(level, tenant, request_id, extra_json, msg, strlen(msg));
}

/* Takes v; gives it back with every integral double in the int64 range made
 * an integer again. */
static json_t *exact_ints(json_t *v) {
  if (json_is_real(v)) {
    double d = json_real_value(v);
    if (d >= -0x1p63 && d < 0x1p63 && d == (double)(json_int_t)d) {
      json_decref(v);
      return json_integer((json_int_t)d);
    }
  } else if (json_is_object(v)) {
    for (void *it = json_object_iter(v); it; it = json_object_iter_next(v, it))
      json_object_iter_set_new(v, it, exact_ints(json_incref(json_object_iter_value(it))));
  } else if (json_is_array(v)) {
    for (size_t i = 0; i < json_array_size(v); i++)
      json_array_set_new(v, i, exact_ints(json_incref(json_array_get(v, i))));
  }
  return v;
}

json_t *json_load_wide(const char *text, size_t len, size_t flags, json_error_t *err) {
  json_error_t local;
  if (err == NULL) err = &local;
  json_t *v = json_loadb(text, len, flags, err);
  if (v == NULL && json_error_code(err) == json_error_numeric_overflow) {
    v = json_loadb(text, len, flags | JSON_DECODE_INT_AS_REAL, err);
    if (v != NULL) v = exact_ints(v);
  }
  return v;
}

int http_token(const char *s, size_t len) {
  if (len == 0) return 0;
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)s[i];
    int alnum = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    if (!alnum && (c == '\0' || strchr("!#$%&'*+-.^_`|~", c) == NULL)) return 0;
  }
  return 1;
}

size_t latin1_to_utf8(const char *in, size_t n, char *out) {
  size_t o = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)in[i];
    if (c < 0x80) {
      out[o++] = (char)c;
    } else {
      out[o++] = (char)(0xc0 | c >> 6);
      out[o++] = (char)(0x80 | (c & 0x3f));
    }
  }
  return o;
}

long utf8_to_latin1(const char *in, size_t n, char *out) {
  size_t o = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)in[i];
    if (c < 0x80) {
      out[o++] = (char)c;
      continue;
    }
    /* Two bytes, lead 0xc2 or 0xc3: U+0080 to U+00FF; anything else is not Latin-1. */
    if ((c != 0xc2 && c != 0xc3) || i + 1 >= n || ((unsigned char)in[i + 1] & 0xc0) != 0x80)
      return -1;
    out[o++] = (char)((c & 0x03) << 6 | ((unsigned char)in[++i] & 0x3f));
  }
  return (long)o;
}

size_t utf8_cut(const char *s, size_t len, size_t max) {
  if (len <= max) return len;
  size_t n = max;
  /* Back over continuation bytes to the start of the sequence cut in two. */
  while (n > 0 && ((unsigned char)s[n] & 0xc0) == 0x80) n--;
  return n;
}

void log_write_bytes(log_level level, const char *tenant, const char *request_id,
                     const char *extra_json, const char *msg, size_t len) {
  if (level < log_min_level) return;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  gmtime_r(&ts.tv_sec, &tm);
  char when[96];
  snprintf(when, sizeof when, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900,
           tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000);

  json_t *line = json_object();
  json_object_set_new(line, "time", json_string(when));
  json_object_set_new(line, "level", json_string(level_name(level)));
  json_object_set_new(line, "process", json_string(log_process));
  if (tenant) json_object_set_new(line, "tenant", json_string(tenant));
  if (request_id) json_object_set_new(line, "request_id", json_string(request_id));
  /* Messages may hold arbitrary bytes from tenants' console output. */
  json_object_set_new(line, "msg", json_stringn_nocheck(msg, len));
  if (extra_json) {
    json_t *extra = json_loads(extra_json, 0, NULL);
    if (json_is_object(extra)) json_object_update(line, extra);
    json_decref(extra);
  }
  char *text = json_dumps(line, JSON_COMPACT | JSON_ENSURE_ASCII);
  json_decref(line);
  if (text) {
    fprintf(log_out ? log_out : stderr, "%s\n", text);
    free(text);
  }
}

void log_write(log_level level, const char *tenant, const char *request_id,
               const char *extra_json, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  log_vwrite(level, tenant, request_id, extra_json, fmt, ap);
  va_end(ap);
}

int64_t time_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

uint64_t time_mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t time_thread_cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t process_rss_bytes(int pid) {
  char path[64];
  if (pid == 0)
    snprintf(path, sizeof path, "/proc/self/statm");
  else
    snprintf(path, sizeof path, "/proc/%d/statm", pid);
  FILE *f = fopen(path, "r");
  if (f == NULL) return 0;
  unsigned long long size = 0, resident = 0;
  int n = fscanf(f, "%llu %llu", &size, &resident);
  fclose(f);
  long page = sysconf(_SC_PAGESIZE);
  if (n != 2 || page <= 0) return 0;
  return resident * (uint64_t)page;
}

int parse_host_port(const char *s, char host[64], int *port) {
  if (s == NULL) return -EINVAL;
  const char *colon = strrchr(s, ':');
  if (colon == NULL) return -EINVAL;
  size_t hlen = (size_t)(colon - s);
  const char *h = s;
  if (hlen >= 2 && h[0] == '[' && h[hlen - 1] == ']') {
    h++;
    hlen -= 2;
  }
  if (hlen >= 64) return -EINVAL;
  char *end = NULL;
  errno = 0;
  long p = strtol(colon + 1, &end, 10);
  if (errno || end == colon + 1 || *end != '\0' || p < 0 || p > 65535) return -EINVAL;
  if (hlen == 0) {
    strcpy(host, "0.0.0.0");
  } else {
    memcpy(host, h, hlen);
    host[hlen] = '\0';
  }
  *port = (int)p;
  return 0;
}

int worker_name_valid(const char *name, size_t len) {
  if (len == 0 || len > 63) return 0;
  for (size_t i = 0; i < len; i++) {
    char c = name[i];
    int ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || (c == '-' && i > 0);
    if (!ok) return 0;
  }
  return 1;
}

int random_bytes(void *out, size_t len) {
  unsigned char *at = out;
  while (len > 0) {
    ssize_t n = getrandom(at, len, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    at += n;
    len -= (size_t)n;
  }
  return 0;
}

int random_hex(char *out, size_t bytes) {
  unsigned char buf[64];
  if (bytes > sizeof buf) return -EINVAL;
  int rc = random_bytes(buf, bytes);
  if (rc != 0) return rc;
  static const char hex[] = "0123456789abcdef";
  for (size_t i = 0; i < bytes; i++) {
    out[2 * i] = hex[buf[i] >> 4];
    out[2 * i + 1] = hex[buf[i] & 15];
  }
  out[2 * bytes] = '\0';
  return 0;
}

int parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out) {
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s || *end || s[0] == '-' || v < min || v > max) return -1;
  *out = v;
  return 0;
}

uint64_t fd_limit_raise(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return 0;
  if (rl.rlim_cur < rl.rlim_max) {
    struct rlimit raised = {rl.rlim_max, rl.rlim_max};
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) rl = raised;
  }
  return rl.rlim_cur == RLIM_INFINITY ? UINT64_MAX : (uint64_t)rl.rlim_cur;
}

size_t fd_connection_budget(uint64_t limit, size_t reserve) {
  if (limit >= 2 * (uint64_t)reserve) {
    uint64_t left = limit - reserve;
    return left > SIZE_MAX ? SIZE_MAX : (size_t)left;
  }
  return (size_t)(limit / 2);
}
