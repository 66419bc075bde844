/*
 * Output that is not ours. V8 writes some reports straight to stdio's
 * stderr as plain text: the collections it tried before it gave up on a
 * heap ("<--- Last few GCs --->"), its fatal errors. The node's log is one
 * JSON object per line, so stdio's stderr is pointed at a pipe, and a
 * thread logs each line that comes out of it as a JSON line of its own.
 * The log itself keeps the real stderr (base.c), and so does anything that
 * writes to fd 2 directly (a sanitizer's report).
 *
 * A fatal error ends the process with abort() right after its report: the
 * SIGABRT handler copies what the thread has not read yet to fd 2 as it is,
 * so the last words are not lost, then lets the signal end the process.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base.h"
#include "worker.h"

/* Longer lines are logged in pieces of this size. */
#define STRAY_LINE_MAX 2048

static int stray_read_fd = -1;

static void log_stray(const char *line, size_t len) {
  while (len > 0 && (line[len - 1] == '\r' || line[len - 1] == ' ')) len--;
  if (len == 0) return;
  log_write(LOG_WARN, NULL, NULL, "{\"source\":\"v8\"}", "%.*s", (int)len, line);
}

static void *stray_main(void *arg) {
  (void)arg;
  char line[STRAY_LINE_MAX];
  size_t used = 0;
  for (;;) {
    ssize_t n = read(stray_read_fd, line + used, sizeof line - used);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    used += (size_t)n;
    size_t start = 0;
    for (size_t i = 0; i < used; i++) {
      if (line[i] != '\n') continue;
      log_stray(line + start, i - start);
      start = i + 1;
    }
    memmove(line, line + start, used - start);
    used -= start;
    if (used == sizeof line) {
      log_stray(line, used);
      used = 0;
    }
  }
  if (used > 0) log_stray(line, used);
  return NULL;
}

static void on_abort(int sig) {
  /* Only async-signal-safe calls: fcntl, read, write, signal, raise. */
  int flags = fcntl(stray_read_fd, F_GETFL);
  if (flags >= 0) fcntl(stray_read_fd, F_SETFL, flags | O_NONBLOCK);
  char buf[4096];
  ssize_t n;
  while ((n = read(stray_read_fd, buf, sizeof buf)) > 0) {
    ssize_t off = 0;
    while (off < n) {
      ssize_t w = write(2, buf + off, (size_t)(n - off));
      if (w <= 0) break;
      off += w;
    }
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

int stray_output_start(void) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return -1;
  FILE *f = fdopen(fds[1], "w");
  if (f == NULL) {
    close(fds[0]);
    close(fds[1]);
    return -1;
  }
  /* Each line reaches the thread when it ends, as on a terminal. */
  setvbuf(f, NULL, _IOLBF, 0);
  stray_read_fd = fds[0];
  pthread_t thread;
  if (pthread_create(&thread, NULL, stray_main, NULL) != 0) {
    fclose(f);
    close(fds[0]);
    stray_read_fd = -1;
    return -1;
  }
  pthread_detach(thread);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_abort;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND;
  if (sigaction(SIGABRT, &sa, NULL) != 0) log_debug("V8's last words may be lost on abort: %s", strerror(errno));
  stderr = f;
  return 0;
}
