/* What fleet.c shares with facets.c: the connection, and the way back to the loop. */
#ifndef EDGENODE_FLEET_INTERNAL_H
#define EDGENODE_FLEET_INTERNAL_H

#include <nats/nats.h>

#include "fleet.h"

/* The JetStream context, NULL until the first connection was bound. */
jsCtx *fleet__js(fleet *f);
const char *fleet__node_name(const fleet *f);
int fleet__replicas(const fleet *f);
int fleet__stopping(fleet *f);
int64_t fleet__lease_ttl_ms(const fleet *f);
int64_t fleet__facet_publish_ms(const fleet *f);
int64_t fleet__snapshot_every(const fleet *f);
int64_t fleet__max_payload(fleet *f);
/* Hands "this node lost the tenant's facets" to the loop (callbacks.facet_lost). */
void fleet__post_facet_lost(fleet *f, const char *tenant, const char *why);

/* facets.c: its stream and bucket, bound with the rest (0 or a NATS status);
 * its state, made at open and freed at close (after fleet__facets_stop). */
typedef struct fleet_facets fleet_facets;
fleet_facets *fleet__facets_new(fleet *f);
natsStatus fleet__facets_bind(fleet_facets *ff, jsCtx *js);
void fleet__facets_stop(fleet_facets *ff);
void fleet__facets_free(fleet_facets *ff);
fleet_facets *fleet__facets(fleet *f);

#endif
