/* env.DB: the worker's facet: not wired yet. */
#include "worker.h"

int facet_link_call(worker *w, loaded *l, const iso_call *call, iso_wire *result) {
  (void)w;
  (void)l;
  (void)call;
  bindings_error(result, "TypeError", "facets are not available on this node");
  return -1;
}
