/*
 * The fleet's link to NATS: one connection and every handle made on it
 * (the JetStream context, the buckets, the records consumer, the members
 * watch), how it is made, and how it is made again.
 *
 * libnats reconnects a connection by itself through any outage but one:
 * when a server refuses the credentials twice in a row (a .creds file
 * rotated to one the servers refuse, then back), it closes the connection
 * for good, and every handle made on it dies with it. The link is then
 * remade whole: the write thread, which alone makes and drops links, drops
 * the old one once no thread holds it and connects again as it did first,
 * every 500 ms, saying why attempts fail.
 *
 * Who holds a link, one use at a time: the watch threads (their consumer
 * and watch live in it), the heartbeat thread, facets.c's threads and its
 * callers' threads, and the loop (fleet_get_status). Getting one never
 * blocks, and no holder waits for the link to change while it holds one,
 * so a drop waits at most for the calls under way, which fail at once on
 * a closed connection. The write thread uses the link it made unheld.
 *
 * Locks: `mu` guards the current link, the holders' count and the error
 * text. A connection callback posts its state change under `mu`, so that
 * the loop sees the changes of one connection in their order; nothing
 * takes `mu` while it holds the fleet's own lock.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base.h"
#include "internal.h"

/* What the link's error says while it is being remade. */
#define REMAKING_WHY "libnats closed the connection: the link is being remade"
#define REMAKING "; " REMAKING_WHY
/* How long a closed connection's last callback is waited for. */
#define CLOSED_WAIT_S 5

struct fleet_links {
  fleet *f;
  natsOptions *opts;
  pthread_mutex_t mu;
  pthread_cond_t cv;  /* a holder gave its link back, or libnats closed a connection */
  fleet_link *cur;    /* the latest link, NULL before the first and while one is remade */
  int remaking;       /* libnats closed the previous connection for good */
  char error[256];    /* why the link cannot be made, "" when it can or is */
};

/* libnats' last error on this thread, without the "(conn.c:733): " that
 * says where in libnats it was set; NULL when there is none. */
static const char *nats_error_text(void) {
  const char *t = nats_GetLastError(NULL);
  if (t == NULL || *t == '\0') return NULL;
  const char *end = t[0] == '(' ? strstr(t, "): ") : NULL;
  return end ? end + 3 : t;
}

/* "status: detail", or the status alone when the detail adds nothing. */
static void describe(char *out, size_t size, natsStatus s, const char *detail) {
  const char *status = natsStatus_GetText(s);
  if (detail == NULL || *detail == '\0' || strcmp(detail, status) == 0)
    snprintf(out, size, "%s", status);
  else snprintf(out, size, "%s: %s", status, detail);
}

/* Remembers why the link cannot be made ("": it can), and hands a new
 * reason to the loop. */
static void set_error(fleet_links *ls, const char *why) {
  pthread_mutex_lock(&ls->mu);
  int changed = strcmp(why, ls->error) != 0;
  if (changed) snprintf(ls->error, sizeof ls->error, "%s", why);
  pthread_mutex_unlock(&ls->mu);
  if (changed && why[0] != '\0') fleet__post_link_error(ls->f, why);
}

/* ---- holding ---- */

/* The current link, held; NULL when there is none, it is being dropped,
 * or (bound_only) its handles are not all made yet. */
static fleet_link *hold(fleet_links *ls, int bound_only) {
  pthread_mutex_lock(&ls->mu);
  fleet_link *l = ls->cur;
  if (l && (l->dropping || (bound_only && !l->bound))) l = NULL;
  if (l) l->refs++;
  pthread_mutex_unlock(&ls->mu);
  return l;
}

static void release(fleet_links *ls, fleet_link *l) {
  if (l == NULL) return;
  pthread_mutex_lock(&ls->mu);
  if (--l->refs == 0 && l->dropping) pthread_cond_broadcast(&ls->cv);
  pthread_mutex_unlock(&ls->mu);
}

fleet_link *fleet__link_get(fleet *f) { return hold(fleet__links(f), 1); }
void fleet__link_put(fleet *f, fleet_link *l) { release(fleet__links(f), l); }

/* ---- connection events (libnats' threads) ---- */

/* The link whose connection this is, under mu; NULL for one dropped already. */
static fleet_link *link_of(fleet_links *ls, natsConnection *nc) {
  return ls->cur && ls->cur->nc == nc ? ls->cur : NULL;
}

static void on_disconnected(natsConnection *nc, void *closure) {
  fleet_links *ls = closure;
  pthread_mutex_lock(&ls->mu);
  if (link_of(ls, nc)) fleet__link_state(ls->f, 0, 0);
  pthread_mutex_unlock(&ls->mu);
}

static void on_reconnected(natsConnection *nc, void *closure) {
  fleet_links *ls = closure;
  pthread_mutex_lock(&ls->mu);
  if (link_of(ls, nc)) fleet__link_state(ls->f, 1, 1);
  pthread_mutex_unlock(&ls->mu);
}

/* libnats' last callback for a connection: after it none of the others
 * runs. Unless the link was being dropped, libnats gave the connection
 * up: the write thread is woken to remake the link. */
static void on_closed(natsConnection *nc, void *closure) {
  fleet_links *ls = closure;
  pthread_mutex_lock(&ls->mu);
  fleet_link *l = link_of(ls, nc);
  int given_up = l && !l->dropping;
  if (l) atomic_store(&l->closed, 1);
  if (given_up) fleet__link_state(ls->f, 0, 0);
  pthread_cond_broadcast(&ls->cv);
  pthread_mutex_unlock(&ls->mu);
  if (given_up) fleet__wake_writer(ls->f);
}

/* ---- the connection's options ---- */

/* libnats reads a credentials file at every connection attempt and sends
 * what it finds: a file without a user JWT and its seed would fail every
 * attempt, in the background, so it is refused here. It is read again, not
 * kept: a file rewritten with new credentials is used at the next attempt. */
static int creds_usable(const char *file, char *err, size_t errlen) {
  FILE *fp = fopen(file, "r");
  if (fp == NULL) {
    snprintf(err, errlen, "credentials file %s: %s", file, strerror(errno));
    return 0;
  }
  char text[16384];
  size_t n = fread(text, 1, sizeof text - 1, fp);
  fclose(fp);
  text[n] = '\0';
  int ok = strstr(text, "-----BEGIN NATS USER JWT-----") != NULL &&
           strstr(text, "-----BEGIN USER NKEY SEED-----") != NULL;
  explicit_bzero(text, sizeof text);
  if (!ok)
    snprintf(err, errlen,
             "credentials file %s: not a NATS .creds file (a user JWT and its NKEY seed, "
             "as nsc generate creds writes it)", file);
  return ok;
}

static natsStatus make_options(fleet_links *ls, const fleet_options *o, const char **urls, int n) {
  natsStatus s = natsOptions_Create(&ls->opts);
  if (s == NATS_OK) s = natsOptions_SetServers(ls->opts, urls, n);
  if (s == NATS_OK) s = natsOptions_SetName(ls->opts, o->node_name);
  /* Never give up on the fleet: a node serves on its local copy meanwhile. */
  if (s == NATS_OK) s = natsOptions_SetMaxReconnect(ls->opts, -1);
  if (s == NATS_OK) s = natsOptions_SetReconnectWait(ls->opts, 250);
  if (s == NATS_OK) s = natsOptions_SetPingInterval(ls->opts, 2000);
  if (s == NATS_OK) s = natsOptions_SetMaxPingsOut(ls->opts, 2);
  if (s == NATS_OK) s = natsOptions_SetTimeout(ls->opts, 2000);
  if (s == NATS_OK) s = natsOptions_SetDisconnectedCB(ls->opts, on_disconnected, ls);
  if (s == NATS_OK) s = natsOptions_SetReconnectedCB(ls->opts, on_reconnected, ls);
  if (s == NATS_OK) s = natsOptions_SetClosedCB(ls->opts, on_closed, ls);
  if (s == NATS_OK && o->creds_file)
    s = natsOptions_SetUserCredentialsFromFiles(ls->opts, o->creds_file, NULL);
  if (s == NATS_OK && (o->tls || o->ca_file)) s = natsOptions_SetSecure(ls->opts, true);
  if (s == NATS_OK && o->ca_file) s = natsOptions_LoadCATrustedCertificates(ls->opts, o->ca_file);
  return s;
}

int fleet__links_new(fleet_links **out, fleet *f, const fleet_options *o, const char **urls, int n,
                     char *err, size_t errlen) {
  *out = NULL;
  if (o->creds_file && !creds_usable(o->creds_file, err, errlen)) return -EINVAL;
  fleet_links *ls = xcalloc(1, sizeof *ls);
  ls->f = f;
  if (pthread_mutex_init(&ls->mu, NULL) != 0 || pthread_cond_init(&ls->cv, NULL) != 0) abort();
  natsStatus s = make_options(ls, o, urls, n);
  if (s != NATS_OK) {
    /* libnats' last error says more than the status (which CA file could
     * not be loaded, and why). */
    const char *why = nats_error_text();
    snprintf(err, errlen, "NATS options: %s", why ? why : natsStatus_GetText(s));
    fleet__links_free(ls);
    return -EINVAL;
  }
  *out = ls;
  return 0;
}

void fleet__links_free(fleet_links *ls) {
  if (ls == NULL) return;
  natsOptions_Destroy(ls->opts);
  pthread_mutex_destroy(&ls->mu);
  pthread_cond_destroy(&ls->cv);
  free(ls);
}

/* ---- making and dropping (the write thread) ---- */

/*
 * The connection is made here, one round over every server at a time,
 * rather than by libnats' retry on a failed connect: in libnats 3.4 that
 * retry gives up for good when every server refused the handshake (a TLS
 * certificate not trusted, credentials refused: it is left with no current
 * server to go on from) and loses the reason. Once a connection is made,
 * libnats reconnects it by itself. 0 once connected.
 */
int fleet__link_connect(fleet_links *ls) {
  natsConnection *nc = NULL;
  natsStatus s = natsConnection_Connect(&nc, ls->opts);
  if (s == NATS_OK) {
    fleet_link *l = xcalloc(1, sizeof *l);
    l->nc = nc;
    pthread_mutex_lock(&ls->mu);
    ls->cur = l;
    /* A remade link is NATS coming back, as a reconnection is. */
    fleet__link_state(ls->f, 1, ls->remaking);
    ls->remaking = 0;
    pthread_mutex_unlock(&ls->mu);
    set_error(ls, "");
    return 0;
  }
  /* NATS_NO_SERVER: no server took the TCP connection; they are away,
   * which is no fault of this node's settings. */
  char why[sizeof ls->error] = "";
  if (s != NATS_NO_SERVER) describe(why, sizeof why - sizeof REMAKING, s, nats_error_text());
  pthread_mutex_lock(&ls->mu);
  if (why[0] && ls->remaking) strcat(why, REMAKING);
  pthread_mutex_unlock(&ls->mu);
  set_error(ls, why);
  return -1;
}

fleet_link *fleet__link_current(fleet_links *ls) { return ls->cur; }

void fleet__link_bound(fleet_links *ls) {
  pthread_mutex_lock(&ls->mu);
  if (ls->cur) ls->cur->bound = 1;
  pthread_mutex_unlock(&ls->mu);
}

int fleet__link_given_up(fleet_links *ls) {
  fleet_link *l = ls->cur; /* only the write thread changes it */
  return l != NULL && atomic_load(&l->closed);
}

/* Why the link's connection is not up, as libnats left it: "" when libnats
 * has no error for it (the servers simply away: a refused TCP connect
 * leaves none). */
static void link_reason(fleet_link *l, char *out, size_t size) {
  const char *detail = NULL;
  natsStatus s = natsConnection_GetLastError(l->nc, &detail);
  int closed = atomic_load(&l->closed);
  out[0] = '\0';
  if (s == NATS_OK && !closed) return;
  char why[180];
  if (s == NATS_OK) snprintf(why, sizeof why, "the connection was closed");
  else describe(why, sizeof why, s, detail);
  snprintf(out, size, "%s%s", why, closed ? REMAKING : "");
}

/* The connection goes last, once its closed callback has run (it may be
 * running yet): the callbacks find their link through ls->cur. */
static void close_connection(fleet_links *ls, fleet_link *l) {
  natsConnection_Close(l->nc);
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += CLOSED_WAIT_S;
  pthread_mutex_lock(&ls->mu);
  while (!atomic_load(&l->closed))
    if (pthread_cond_timedwait(&ls->cv, &ls->mu, &until) == ETIMEDOUT) break;
  pthread_mutex_unlock(&ls->mu);
  natsConnection_Destroy(l->nc);
}

static void destroy_handles(fleet_link *l) {
  if (l->records_sub) {
    (void)natsSubscription_Unsubscribe(l->records_sub);
    natsSubscription_Destroy(l->records_sub);
  }
  if (l->members_watch) kvWatcher_Destroy(l->members_watch);
  if (l->members) kvStore_Destroy(l->members);
  if (l->leases) kvStore_Destroy(l->leases);
  if (l->js) jsCtx_Destroy(l->js);
}

void fleet__link_drop(fleet_links *ls) {
  pthread_mutex_lock(&ls->mu);
  fleet_link *l = ls->cur;
  if (l == NULL) {
    pthread_mutex_unlock(&ls->mu);
    return;
  }
  l->dropping = 1; /* nobody gets it any more */
  while (l->refs > 0) pthread_cond_wait(&ls->cv, &ls->mu);
  pthread_mutex_unlock(&ls->mu);
  int given_up = atomic_load(&l->closed);
  char why[sizeof ls->error] = "";
  if (given_up) link_reason(l, why, sizeof why);
  destroy_handles(l);
  close_connection(ls, l);
  pthread_mutex_lock(&ls->mu);
  ls->cur = NULL;
  ls->remaking = given_up;
  pthread_mutex_unlock(&ls->mu);
  free(l);
  if (given_up) set_error(ls, why[0] ? why : REMAKING_WHY);
}

/* ---- what the node is told ---- */

void fleet__link_check(fleet_links *ls, int connected) {
  fleet_link *l = hold(ls, 0);
  if (l == NULL) return; /* the connection attempts say why */
  char why[sizeof ls->error] = "";
  if (!connected) link_reason(l, why, sizeof why);
  release(ls, l);
  set_error(ls, why);
}

void fleet__link_status(fleet_links *ls, int connected, fleet_status *out) {
  fleet_link *l = hold(ls, 0);
  if (connected && l &&
      natsConnection_GetConnectedUrl(l->nc, out->server, sizeof out->server) != NATS_OK)
    out->server[0] = '\0';
  release(ls, l);
  pthread_mutex_lock(&ls->mu);
  out->bound = ls->cur != NULL && ls->cur->bound && !ls->cur->dropping;
  if (!connected) snprintf(out->error, sizeof out->error, "%s", ls->error);
  pthread_mutex_unlock(&ls->mu);
}
