/*
 * Output that is not ours. V8 writes some reports straight to stdio's
 * stderr as plain text: the collections it tried before it gave up on a
 * heap ("<--- Last few GCs --->"), its fatal errors. The node's log is one
 * JSON object per line, so stdio's stderr is replaced by a stream whose
 * every line becomes a JSON line of the log, written by the thread that
 * wrote it, before its write returns. Nothing waits anywhere in between:
 * V8 flushes stderr before it ends the process on a fatal error (with a
 * trap, not abort()), and its last words are in the log by then.
 *
 * The log itself keeps the real stderr (base.c), and so does anything that
 * writes to fd 2 directly (a sanitizer's report).
 */
#include <stdio.h>

#include "base.h"
#include "worker.h"

static void log_stray(const char *line, size_t len) {
  while (len > 0 && (line[len - 1] == '\r' || line[len - 1] == ' ')) len--;
  if (len == 0) return;
  log_write(LOG_WARN, NULL, NULL, "{\"source\":\"v8\"}", "%.*s", (int)len, line);
}

/* stdio hands over whole lines (the stream is line-buffered), or what was
 * flushed before a line ended: that part is a line of its own, since the
 * process may be about to end. */
static ssize_t stray_write(void *cookie, const char *buf, size_t size) {
  (void)cookie;
  size_t start = 0;
  for (size_t i = 0; i < size; i++) {
    if (buf[i] != '\n') continue;
    log_stray(buf + start, i - start);
    start = i + 1;
  }
  if (start < size) log_stray(buf + start, size - start);
  return (ssize_t)size;
}

int stray_output_start(void) {
  static const cookie_io_functions_t functions = {.write = stray_write};
  FILE *f = fopencookie(NULL, "w", functions);
  if (f == NULL) return -1;
  if (setvbuf(f, NULL, _IOLBF, 0) != 0) {
    fclose(f);
    return -1;
  }
  stderr = f;
  return 0;
}
