/*
 * Keeps a few blank isolates ready (iso_pool_start), so that a cold start
 * only loads the tenant's modules into one. They are made on a background
 * thread of lower priority: making one takes milliseconds, which must
 * never delay a request, and with a core to spare it takes none of the
 * loop's time.
 */
#include <errno.h>
#include <string.h>

#include "base.h"
#include "worker.h"

#define POOL_TARGET 4

void pool_start(worker *w) {
  /* A cordoned tenant's process runs at the lowest priority the supervisor
   * sets on its main thread, which a thread of its own would escape; its
   * one tenant rarely starts cold anyway. */
  if (w->config.dedicated) return;
  if (iso_pool_start(POOL_TARGET) != 0) log_warn("no isolate pool: each cold start makes its isolate");
  /* Python's: interpreters booted ahead (docs/python.md), where Pyodide is. */
  int rc = iso_python_pool_start(w->config.python_pool, PROTO_SPEC_DEFAULT_MEMORY_MB);
  if (rc != 0 && rc != -ENOENT) log_warn("no Python pool: %s", strerror(-rc));
}

void pool_drain(void) {
  if (iso_pool_start(0) != 0) log_debug("could not stop filling the isolate pool");
  if (iso_python_pool_start(0, 0) != 0) log_debug("could not stop filling the Python pool");
}

void pool_stop(void) {
  iso_python_pool_stop();
  iso_pool_stop();
}
