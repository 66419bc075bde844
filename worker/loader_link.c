/* env.LOADER: dynamic workers in isolates of their own: not wired yet. */
#include "worker.h"

int loader_link_call(worker *w, loaded *l, const iso_call *call, iso_wire *result) {
  (void)w;
  (void)l;
  (void)call;
  bindings_error(result, "TypeError", "the loader is not available on this node");
  return -1;
}
