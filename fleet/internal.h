/* What fleet.c, link.c and facets.c share: the link, and the way back to the loop. */
#ifndef EDGENODE_FLEET_INTERNAL_H
#define EDGENODE_FLEET_INTERNAL_H

#include <nats/nats.h>
#include <stdatomic.h>

#include "fleet.h"

const char *fleet__node_name(const fleet *f);
int fleet__replicas(const fleet *f);
int fleet__stopping(fleet *f);
int64_t fleet__lease_ttl_ms(const fleet *f);
int64_t fleet__facet_publish_ms(const fleet *f);
int64_t fleet__snapshot_every(const fleet *f);
/* Hands "this node lost the tenant's facets" to the loop (callbacks.facet_lost). */
void fleet__post_facet_lost(fleet *f, const char *tenant, const char *why);

/* ---- the link (link.c) ----
 *
 * One NATS connection and every handle made on it. libnats closes a
 * connection for good when a server refuses the credentials twice in a
 * row; the link is then dropped and made again whole, so a handle is
 * only ever used through the link that holds it. */
typedef struct fleet_link {
  natsConnection *nc;
  jsCtx *js;                     /* made by the bind (fleet.c) */
  kvStore *members;              /* FLEET_MEMBERS (fleet.c's bind) */
  kvStore *leases;               /* facets.c's bucket (its bind) */
  natsSubscription *records_sub; /* the records thread's consumer: made and remade by it */
  kvWatcher *members_watch;      /* the members thread's watch: made and remade by it */
  /* link.c's, under its lock: */
  int refs;        /* holders */
  int bound;       /* every handle above but the two threads' is made */
  int dropping;    /* nobody may get it any more */
  atomic_int closed; /* libnats' closed callback ran */
} fleet_link;

/* The bound link, held until fleet__link_put; NULL while there is none
 * (not connected yet, not bound yet, being remade). Never blocks; a holder
 * must not wait for the link to change, since a drop waits for holders. */
fleet_link *fleet__link_get(fleet *f);
void fleet__link_put(fleet *f, fleet_link *l); /* l may be NULL */

typedef struct fleet_links fleet_links;
fleet_links *fleet__links(fleet *f);

/* Checks the credentials file and makes the connection's options: 0, or
 * -EINVAL with err set. Freed after the last link was dropped. */
int fleet__links_new(fleet_links **out, fleet *f, const fleet_options *o, const char **urls, int n,
                     char *err, size_t errlen);
void fleet__links_free(fleet_links *ls);

/* The write thread's, which alone makes and drops links: one round of
 * connection attempts over every server (0 once connected; each failure's
 * reason is handed to the loop once); the link made last (bound or not,
 * unheld) or NULL; its handles are made, others may get it; 1 when
 * libnats closed its connection for good; and the drop, which waits for
 * its holders and destroys every handle, the connection last. */
int fleet__link_connect(fleet_links *ls);
fleet_link *fleet__link_current(fleet_links *ls);
void fleet__link_bound(fleet_links *ls);
int fleet__link_given_up(fleet_links *ls);
void fleet__link_drop(fleet_links *ls);

/* Reads why the connection is down, as libnats says while it reconnects,
 * and hands a new reason to the loop (the heartbeat thread, each beat). */
void fleet__link_check(fleet_links *ls, int connected);
/* The link's part of fleet_status: bound, server, error. */
void fleet__link_status(fleet_links *ls, int connected, fleet_status *out);

/* fleet.c, for link.c: the connection went down (0) or came up (1);
 * `again`: up after an outage (libnats reconnected it, or the link was
 * remade), when the records consumer is made again. Called under link.c's
 * lock, so that the loop sees one connection's changes in order. */
void fleet__link_state(fleet *f, int connected, int again);
/* fleet.c: a new reason why the link cannot be made (callbacks.link_error). */
void fleet__post_link_error(fleet *f, const char *why);
/* fleet.c: libnats gave a connection up: the write thread remakes the link. */
void fleet__wake_writer(fleet *f);

/* facets.c: its streams and bucket, bound on each link (0 or a NATS
 * status); its state, made at open and freed at close (after
 * fleet__facets_stop). */
typedef struct fleet_facets fleet_facets;
fleet_facets *fleet__facets_new(fleet *f);
natsStatus fleet__facets_bind(fleet_facets *ff, fleet_link *l);
void fleet__facets_stop(fleet_facets *ff);
void fleet__facets_free(fleet_facets *ff);
fleet_facets *fleet__facets(fleet *f);

#endif
