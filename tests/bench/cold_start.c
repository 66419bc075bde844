/*
 * What a cold start costs one thread, step by step, through the isolate API
 * alone (no HTTP, no scheduler): a worker made from a blank isolate of the
 * pool with a one-module hello child (unique code each time), its first
 * request, its second, and its free. Thread CPU time per step, averaged.
 *
 *   cold_start_bench [N] [--first-only] [--threaded]
 *
 * --first-only skips the second request, so that a profiler toggled on
 * iso_worker_dispatch sees first requests only:
 *   valgrind --tool=callgrind --toggle-collect=iso_worker_dispatch \
 *     build-release/bin/cold_start_bench 30 --first-only
 * --threaded fills the pool from its own thread (as a worker process does)
 * instead of on this one between workers.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base.h"
#include "isolate.h"

static int responded;

static void on_log(void *data, uint64_t token, iso_log_level level, const char *msg, size_t len) {
  (void)data, (void)token, (void)level, (void)msg, (void)len;
}
static int on_timer_start(void *data, uint64_t token, uint32_t id, double ms) {
  (void)data, (void)token, (void)id, (void)ms;
  return 0;
}
static void on_timer_cancel(void *data, uint32_t id) { (void)data, (void)id; }
static void on_respond(void *data, uint64_t token, const iso_response *res, const iso_error *err) {
  (void)data, (void)token, (void)err;
  if (res != NULL) responded++;
}
static void on_done(void *data, uint64_t token) { (void)data, (void)token; }

/* Waits for the pool's thread to have `n` blanks ready. */
static void pool_wait(size_t n) {
  while (iso_pool_size() < n) {
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
}

typedef struct totals {
  uint64_t create, first, second, free;
} totals;

/* One worker through its life; 0, or -1 with a message printed. */
static int one_worker(int i, int first_only, totals *t) {
  static iso_host host = {NULL, on_log, on_timer_start, on_timer_cancel, on_respond, on_done, NULL};
  char src[160];
  snprintf(src, sizeof src,
           "export default { fetch(request) { return new Response('cold %d'); } };", i);
  iso_module module = {"child.js", src, strlen(src)};
  iso_worker_options o = {.host = &host, .limits = {0, 50}, .modules = &module, .n_modules = 1,
                          .main_module = "child.js", .bindings_json = "{}"};
  iso_error err = {0};
  const char *url = "http://child/";
  iso_request req = {"GET", 3, url, strlen(url), NULL, 0, NULL, 0};

  uint64_t t0 = time_thread_cpu_ns();
  iso_worker *w = iso_worker_create(&o, &err);
  if (w == NULL) {
    fprintf(stderr, "cold_start_bench: %s\n", err.message ? err.message : "no worker");
    iso_error_clear(&err);
    return -1;
  }
  uint64_t t1 = time_thread_cpu_ns();
  int rc = iso_worker_dispatch(w, 1, &req);
  uint64_t t2 = time_thread_cpu_ns();
  if (rc == 0 && !first_only) rc = iso_worker_dispatch(w, 2, &req);
  uint64_t t3 = time_thread_cpu_ns();
  iso_worker_free(w);
  uint64_t t4 = time_thread_cpu_ns();
  if (rc != 0) {
    fprintf(stderr, "cold_start_bench: a request could not start\n");
    return -1;
  }
  t->create += t1 - t0;
  t->first += t2 - t1;
  t->second += t3 - t2;
  t->free += t4 - t3;
  return 0;
}

int main(int argc, char **argv) {
  int n = 200, first_only = 0, threaded = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--first-only") == 0) first_only = 1;
    else if (strcmp(argv[i], "--threaded") == 0) threaded = 1;
    else if ((n = atoi(argv[i])) <= 0) {
      fprintf(stderr, "usage: cold_start_bench [N] [--first-only] [--threaded]\n");
      return 2;
    }
  }
  log_init("cold_start_bench", LOG_ERROR);
  if (iso_platform_init() != 0) return 1;
  if (threaded && iso_pool_start(2) != 0) return 1;
  totals t = {0};
  for (int i = 0; i < n; i++) {
    if (threaded) pool_wait(2);
    else if (iso_pool_fill(2) != 0) return 1;
    if (one_worker(i, first_only, &t) != 0) return 1;
  }
  iso_pool_stop();
  printf("per worker, CPU us (%d workers, pool filled %s): load the module %.1f, first request "
         "%.1f, second request %.1f, free %.1f (%d responses)\n",
         n, threaded ? "by its thread" : "on this thread", t.create / 1e3 / n, t.first / 1e3 / n,
         first_only ? 0.0 : t.second / 1e3 / n, t.free / 1e3 / n, responded);
  return responded == n * (first_only ? 1 : 2) ? 0 : 1;
}
