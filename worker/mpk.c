/*
 * Protection-key faults: what a worker process says before it dies of one.
 * See mpk.h. Everything the handler does is async-signal-safe: fixed
 * buffers, write(2), no locks, no allocation, no stdio.
 */
#include "mpk.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base.h"
#include "isolate.h"
#include "sandbox.h"
#include "proto.h"
#include "worker.h"

#ifndef SEGV_PKUERR
#define SEGV_PKUERR 4
#endif

static int fault_fd = -1;
static char fault_process[32];
static struct sigaction previous;

/* ---- building text without stdio ---- */

typedef struct text {
  char *p;
  size_t len;
  size_t cap;
} text;

static void put(text *t, const char *s) {
  while (*s && t->len < t->cap) t->p[t->len++] = *s++;
}

static void put_uint(text *t, uint64_t v, int min_digits) {
  char digits[24];
  int n = 0;
  do {
    digits[n++] = (char)('0' + v % 10);
    v /= 10;
  } while (v > 0 || n < min_digits);
  while (n > 0 && t->len < t->cap) t->p[t->len++] = digits[--n];
}

/* Only what a JSON string may hold as it is: anything else becomes '?'. */
static void put_name(text *t, const char *s) {
  for (size_t i = 0; s[i] && i < 64 && t->len < t->cap; i++) {
    char c = s[i];
    t->p[t->len++] = (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') ? c : '?';
  }
}

/* "2026-01-01T00:00:00.000Z", as base/'s logs write it (civil date from days). */
static void put_time(text *t) {
  struct timespec ts;
  if (clock_gettime(CLOCK_REALTIME, &ts) != 0) ts.tv_sec = ts.tv_nsec = 0;
  int64_t secs = ts.tv_sec;
  int64_t days = secs / 86400, rem = secs % 86400;
  int64_t z = days + 719468, era = z / 146097;
  int64_t doe = z - era * 146097;
  int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  int64_t mp = (5 * doy + 2) / 153;
  int64_t day = doy - (153 * mp + 2) / 5 + 1;
  int64_t month = mp < 10 ? mp + 3 : mp - 9;
  int64_t year = yoe + era * 400 + (month <= 2);
  put_uint(t, (uint64_t)year, 4);
  put(t, "-");
  put_uint(t, (uint64_t)month, 2);
  put(t, "-");
  put_uint(t, (uint64_t)day, 2);
  put(t, "T");
  put_uint(t, (uint64_t)(rem / 3600), 2);
  put(t, ":");
  put_uint(t, (uint64_t)(rem / 60 % 60), 2);
  put(t, ":");
  put_uint(t, (uint64_t)(rem % 60), 2);
  put(t, ".");
  put_uint(t, (uint64_t)(ts.tv_nsec / 1000000), 3);
  put(t, "Z");
}

static void write_all(int fd, const char *p, size_t len) {
  while (len > 0) {
    ssize_t n = write(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    p += n;
    len -= (size_t)n;
  }
}

/* ---- the fault ---- */

/* The tenant whose isolate the thread was in. Every isolate of a worker
 * process is made with its sandbox as its host data. The memory read here
 * may be what went wrong: it is only read. */
static const char *running_tenant(void) {
  iso_worker *iso = iso_worker_current();
  if (iso == NULL) return "";
  const sandbox *sb = iso_worker_host_data(iso);
  if (sb == NULL) return "";
  return sb->log_tenant != NULL ? sb->log_tenant : "";
}

static void on_segv(int sig, siginfo_t *info, void *context) {
  (void)context;
  iso_mpk_signal_enter();
  int saved_errno = errno;
  if (info->si_code != SEGV_PKUERR) {
    /* Not ours: whoever handled SIGSEGV before (or the default) gets the
     * same fault again when the access is retried. */
    sigaction(SIGSEGV, &previous, NULL);
    errno = saved_errno;
    return;
  }
  const char *tenant = running_tenant();
  unsigned pkey = info->si_pkey;

  char line_buf[512];
  text line = {line_buf, 0, sizeof line_buf - 1};
  put(&line, "{\"time\":\"");
  put_time(&line);
  put(&line, "\",\"level\":\"error\",\"process\":\"");
  put_name(&line, fault_process);
  put(&line, "\",\"tenant\":\"");
  put_name(&line, tenant);
  put(&line, "\",\"msg\":\"memory protection key fault: an access to another isolate's "
             "memory (key ");
  put_uint(&line, pkey, 1);
  put(&line, "); the process exits\",\"pkey\":");
  put_uint(&line, pkey, 1);
  put(&line, "}\n");
  write_all(STDERR_FILENO, line.p, line.len);

  if (fault_fd >= 0) {
    char frame_buf[PROTO_HEADER_SIZE + 256];
    text body = {frame_buf + PROTO_HEADER_SIZE, 0, 256};
    put(&body, "{\"event\":\"mpk_fault\",\"tenant\":\"");
    put_name(&body, tenant);
    put(&body, "\",\"pkey\":");
    put_uint(&body, pkey, 1);
    put(&body, "}");
    /* Best effort: a frame the event loop had half written interleaves. */
    if (proto_encode_header((uint8_t *)frame_buf, PROTO_EVENT, 0, (uint32_t)body.len) == 0)
      write_all(fault_fd, frame_buf, PROTO_HEADER_SIZE + body.len);
  }

  /* Its state cannot be trusted: die of this fault once the handler returns. */
  struct sigaction dfl;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  sigaction(SIGSEGV, &dfl, NULL);
  raise(sig);
}

json_t *mpk_start(int worker_id, int report_fd) {
  iso_mpk_status st;
  iso_mpk_status_get(&st);
  if (!st.enabled) {
    log_info("MPK unavailable (%s): isolates in this process are not separated by "
             "memory protection keys", st.reason);
    return json_pack("{s:b,s:i}", "enabled", 0, "keys", 0);
  }
  snprintf(fault_process, sizeof fault_process, "worker-%d", worker_id);
  fault_fd = report_fd;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_segv;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  struct sigaction old;
  if (sigaction(SIGSEGV, &sa, &old) == 0) {
    /* Started twice (a test): chaining to ourselves would loop. */
    if (!(old.sa_flags & SA_SIGINFO) || old.sa_sigaction != on_segv) previous = old;
  } else {
    log_warn("cannot handle protection-key faults (%s): they will not be reported",
             strerror(errno));
  }
  log_info("MPK on: isolates spread over %d memory protection keys", st.keys);
  return json_pack("{s:b,s:i}", "enabled", 1, "keys", st.keys);
}
