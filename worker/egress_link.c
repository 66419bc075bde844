/* Outbound fetch() through the egress process: not wired yet. */
#include "worker.h"

int egress_link_call(worker *w, loaded *l, const iso_call *call, iso_wire *result) {
  (void)w;
  (void)l;
  (void)call;
  bindings_error(result, "TypeError", "fetch() is not available on this node");
  return -1;
}
