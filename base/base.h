/*
 * base: what every edgenode process shares: structured logging, allocation
 * that aborts on out-of-memory, clocks and small string helpers.
 */
#ifndef EDGENODE_BASE_H
#define EDGENODE_BASE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#define container_of(ptr, type, member) \
  ((type *)((char *)(ptr)-offsetof(type, member)))

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* Allocation: out-of-memory is fatal, so these never return NULL. */
void *xmalloc(size_t size);
void *xcalloc(size_t count, size_t size);
void *xrealloc(void *ptr, size_t size);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t len);
/* printf into a fresh heap string. */
char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

typedef enum {
  LOG_DEBUG = 0,
  LOG_INFO = 1,
  LOG_WARN = 2,
  LOG_ERROR = 3,
} log_level;

/*
 * Sets the "process" field of every log line ("supervisor", "worker-1", ...)
 * and the lowest level that is written. Call once at start.
 */
void log_init(const char *process, log_level min_level);

/*
 * Writes one JSON object per line on stderr:
 * {"time":"2026-01-01T00:00:00.000Z","level":"info","process":"...",
 *  "tenant":"...","request_id":"...","msg":"..."} followed by `extra`.
 * tenant and request_id may be NULL (then omitted). extra_json, when not NULL,
 * is a JSON object text whose members are appended ("{\"pid\":3}").
 */
void log_write(log_level level, const char *tenant, const char *request_id,
               const char *extra_json, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
void log_vwrite(log_level level, const char *tenant, const char *request_id,
                const char *extra_json, const char *fmt, va_list ap);
/* json_loadb for JSON whose integers may be past int64 (valid JSON, and
 * JavaScript's numbers are doubles anyway): when one overflows, the text is
 * read again with every number a double, and the integral ones within int64
 * are made integers again, so that 3 still reads as 3. */
json_t *json_load_wide(const char *text, size_t len, size_t flags, json_error_t *err);

/* How many of the len bytes of UTF-8 text s to keep for at most max, without
 * cutting a character in two (a line with half of one would not be JSON). */
size_t utf8_cut(const char *s, size_t len, size_t max);

/* Whether the len bytes at s are an RFC 9110 token (a method, a header
 * name): one or more of letters, digits and !#$%&'*+-.^_`|~. */
int http_token(const char *s, size_t len);

/* HTTP header values are bytes, and a JavaScript string of them holds one
 * character per byte (Latin-1); JavaScript strings travel as UTF-8. These
 * convert between the two. latin1_to_utf8 writes at most 2 * n bytes and
 * returns how many; utf8_to_latin1 writes at most n, and returns -1 when
 * the text is not UTF-8 or holds a character past U+00FF. */
size_t latin1_to_utf8(const char *in, size_t n, char *out);
long utf8_to_latin1(const char *in, size_t n, char *out);

/* A message of exactly len bytes (NUL included), as a tenant's console
 * output must be logged: nothing of it read as a format, nothing cut. */
void log_write_bytes(log_level level, const char *tenant, const char *request_id,
                     const char *extra_json, const char *msg, size_t len);

#define log_info(...) log_write(LOG_INFO, NULL, NULL, NULL, __VA_ARGS__)
#define log_warn(...) log_write(LOG_WARN, NULL, NULL, NULL, __VA_ARGS__)
#define log_error(...) log_write(LOG_ERROR, NULL, NULL, NULL, __VA_ARGS__)
#define log_debug(...) log_write(LOG_DEBUG, NULL, NULL, NULL, __VA_ARGS__)

/* Milliseconds since the Unix epoch (wall clock). */
int64_t time_now_ms(void);
/* Monotonic nanoseconds. */
uint64_t time_mono_ns(void);
/* CPU time of the calling thread in nanoseconds. */
uint64_t time_thread_cpu_ns(void);

/* Resident memory of process `pid` (0: this one) from /proc, in bytes; 0 when unknown. */
uint64_t process_rss_bytes(int pid);

/*
 * Descriptors. fd_limit_raise() raises this process's RLIMIT_NOFILE soft
 * limit to its hard limit (every connection is a descriptor) and returns
 * the soft limit in force, 0 when it cannot be read. fd_connection_budget()
 * is what `limit` leaves for connections once `reserve` descriptors are
 * kept for the process's own work; a limit below twice the reserve keeps
 * half of it instead.
 */
uint64_t fd_limit_raise(void);
size_t fd_connection_budget(uint64_t limit, size_t reserve);

/*
 * Parses "ADDR:PORT" ("127.0.0.1:8080", "[::1]:8080", ":8080" = all
 * interfaces). Returns 0, or -EINVAL. host must hold 64 bytes.
 */
int parse_host_port(const char *s, char host[64], int *port);

/* Parses a whole decimal number in [min, max] (no sign, no trailing text).
 * Returns 0, or -1 with *out untouched. */
int parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out);

/* Worker names: [a-z0-9][a-z0-9-]{0,62}. */
int worker_name_valid(const char *name, size_t len);

/* `len` random bytes from getrandom(2). Returns 0 or -errno. */
int random_bytes(void *out, size_t len);
/* `bytes` random bytes (at most 64) as 2*bytes hex chars + NUL. Returns 0 or -errno. */
int random_hex(char *out, size_t bytes);

#endif
