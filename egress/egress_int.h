/*
 * The edgenode-egress process, internal to egress/:
 *   main.c     arguments, the supervisor link (policies, secrets), signals
 *   server.c   the unix socket worker processes connect to, and their frames
 *   fetch.c    one fetch(): policy, resolution, redirects, limits, streaming
 *   conn.c     upstream connections: TCP, TLS, http.h's client over them, keep-alive pool
 *   tls.c      BoringSSL over memory BIOs
 *   secrets.c  the encrypted secret store
 *   fleet_key.c  sealing secrets for the other nodes of a fleet
 * One libuv loop, one thread; every struct here belongs to that thread.
 */
#ifndef EDGENODE_EGRESS_INT_H
#define EDGENODE_EGRESS_INT_H

#include <jansson.h>
#include <stdint.h>
#include <uv.h>

#include "base.h"
#include "egress.h"
#include "http.h"
#include "proto.h"

typedef struct egress egress;
typedef struct client client;
typedef struct fetch fetch;
typedef struct conn conn;
typedef struct tls tls;
typedef struct secret_store secret_store;
typedef struct ssl_ctx_st SSL_CTX;

/* An address the node listens on: refused as a destination whatever the
 * rules say (a worker fetching its own node would loop). */
typedef struct egress_own {
  egress_cidr addr;
  int port;
} egress_own;

typedef struct egress_config {
  int ipc_fd;
  const char *data_dir;
  char *socket_path;              /* owned */
  egress_cidr *allow;             /* owned */
  size_t n_allow;
  struct egress_own *own;         /* owned: the node's own listening addresses */
  size_t n_own;
  const char **ca_files;          /* owned array of argv strings */
  size_t n_ca_files;
  const char **fleet_key_files;   /* owned array of argv strings; the first seals */
  size_t n_fleet_key_files;
  uint32_t connect_timeout_ms;
  uint32_t timeout_ms;
  uint64_t max_response_bytes;
} egress_config;

/* One worker's compiled allow-list, in a chained hash table by name. */
typedef struct policy_entry {
  char *name;
  egress_policy *policy;
  struct policy_entry *next;
} policy_entry;

#define POLICY_BUCKETS 1024

/* Idle keep-alive connections to one origin. */
typedef struct pool_slot {
  char *key;                      /* "https://host:port" */
  conn *idle;                     /* most recently used first */
  size_t n_idle;
  struct pool_slot *next;
} pool_slot;

struct egress {
  uv_loop_t *loop;
  egress_config cfg;
  proto_channel supervisor;
  uv_pipe_t listener;
  int listening;
  int stopping;
  int log_debug;                  /* --log-level debug: per-fetch lines */
  client *clients;
  policy_entry *policies[POLICY_BUCKETS];
  secret_store *secrets;          /* this node's own (DATA/egress/secrets.json) */
  secret_store *fleet_secrets;    /* in a fleet: opened from the supervisor's records, in memory */
  int fleet;                      /* in a fleet: values come from fleet_secrets only */
  json_t *grants;                 /* secret name -> [worker, ...] it may be injected for */
  json_t *bound;                  /* "<pid>" -> tenant: dedicated worker processes, which may
                                   * fetch for their own tenant only */
  json_t *run_as;                 /* "run:<id>" -> the worker whose grants a /v1/run borrows */
  struct fleet_key *fleet_keys;
  size_t n_fleet_keys;
  SSL_CTX *ssl_ctx;
  pool_slot *pool;
  size_t n_idle;                  /* idle connections in the whole pool */
  size_t n_fetches;               /* fetches in flight */
  uv_signal_t sigterm;
  uv_signal_t sigint;
};

/* main.c */
egress *egress_self(void);
/* The tenant a client's process was bound to (a dedicated worker process),
 * or NULL: a shared process hosts every tenant and may act for any. */
const char *egress_client_bound(const client *cl);
const egress_policy *egress_policy_of(egress *e, const char *worker);
/* Whether secret `name` (len bytes) may be injected for worker's fetches. */
int egress_secret_granted(egress *e, const char *name, size_t len, const char *worker);
/* The value of secret `name` where this node keeps them (its own store, or the fleet's). */
const char *egress_secret_value(egress *e, const char *name, size_t len);

/* server.c: the worker-facing socket. */
int server_listen(egress *e, char **err);
void server_close(egress *e);
/* One worker process's connection. */
struct client {
  egress *e;
  proto_channel ch;
  int peer_pid;                   /* the connected process (SO_PEERCRED); 0 when unknown */
  fetch *fetches;                 /* in flight on this connection */
  client *next;
  int closed;
};
/* Sends a frame whose payload is a 4-byte length, the JSON text, then bytes. */
int client_send_head(client *c, uint8_t type, uint32_t id, json_t *head, const void *bytes,
                     size_t len);
int client_send_error(client *c, uint32_t id, const char *message, int hops);

/* fetch.c */
void fetch_start(client *c, const proto_frame *frame);
void fetch_read(client *c, uint32_t id);
void fetch_cancel(client *c, uint32_t id);
/* The client went away: every fetch of it is abandoned. */
void fetch_abandon_all(client *c);

/* Events from the fetch's connection (conn.c -> fetch.c). */
void fetch_conn_ready(fetch *f, conn *c);
/* The connection failed; retry: it was a reused connection that died before
 * any response byte, so the request may be sent again on a fresh one. */
void fetch_conn_failed(fetch *f, conn *c, const char *message, int retry);
/* A final response head arrived (c->status, c->reason, c->headers). Returns 1
 * when the response has no body to read (HEAD). */
int fetch_on_head(fetch *f, conn *c);
/* Body bytes. Returns 0, or -1 to stop (over the size limit). */
int fetch_on_body(fetch *f, const char *data, size_t len);
/* After each batch of input: act on what the batch brought. */
void fetch_conn_progress(fetch *f, conn *c);

/* conn.c */
typedef enum conn_state {
  CONN_CONNECTING,
  CONN_HANDSHAKE,
  CONN_BUSY,     /* serving a fetch */
  CONN_IDLE,     /* in the pool */
  CONN_CLOSED,
} conn_state;

struct conn {
  egress *e;
  uv_tcp_t tcp;
  uv_connect_t connect_req;
  uv_timer_t timer;               /* connect timeout, then idle timeout */
  int open_handles;
  uint32_t connect_timeout_ms;
  conn_state state;
  tls *tls;                       /* NULL for http */
  char *key;                      /* pool key */
  char host[256];                 /* for messages */
  fetch *fetch;                   /* the user while busy */
  conn *next_idle;
  pool_slot *slot;
  int reused;                     /* served a response before this one */
  int got_bytes;                  /* any byte of the current response */
  int paused;                     /* reading stopped for flow control */
  int eof;                        /* the upstream closed its side */
  http_client *http;              /* the HTTP/1.1 exchange; NULL once given up */
  /* the response being read */
  int status;
  char *reason;                   /* UTF-8 */
  json_t *headers;                /* flat [name, value, ...], UTF-8 */
  int head_done;                  /* the final head was handed over */
  int complete;                   /* the final response is complete */
  int leftover;                   /* bytes after the response: not reusable */
  int broken;                     /* stop parsing, close after this batch */
  const char *error;              /* why the connection failed (constant or tls text) */
  char error_buf[768];
};

/* Opens a connection to addr for url's origin; fetch_conn_ready or
 * fetch_conn_failed follows. Returns the connection, or NULL with *why. */
conn *conn_open(egress *e, fetch *f, const egress_url *url, const struct sockaddr *addr,
                uint32_t connect_timeout_ms, const char **why);
/* An idle pooled connection to url's origin, now busy for f, or NULL. */
conn *conn_take(egress *e, fetch *f, const egress_url *url);
/* Sends the request (http.h's client frames it). Returns 0 or a negative
 * libuv error. */
int conn_send(conn *c, const http_client_request *req);
/* Pauses / resumes reading (flow control towards the worker). */
void conn_pause(conn *c, int paused);
/* The fetch is done with the connection: back to the pool when the response
 * was read whole and the upstream allows keep-alive, closed otherwise. */
void conn_release(conn *c);
void conn_close(conn *c);
/* Closes every idle connection. */
void conn_pool_close(egress *e);

/* tls.c */
SSL_CTX *tls_ctx_new(const egress_config *cfg, char **err);
void tls_ctx_free(SSL_CTX *ctx);
/* A client session for host (SNI and certificate name, or IP address check). */
tls *tls_new(SSL_CTX *ctx, const char *host, int ip);
void tls_free(tls *t);
/* Drives the handshake: 1 done, 0 wants more input, -1 failed (tls_error). */
int tls_handshake(tls *t);
/* Ciphertext from the network. */
void tls_feed(tls *t, const void *data, size_t len);
/* Plaintext out: > 0 bytes, 0 wants more input, -1 failed, -2 closed (close_notify). */
int tls_read(tls *t, void *buf, size_t cap);
/* Plaintext in; ciphertext queued. Returns 0 or -1. */
int tls_write(tls *t, const void *data, size_t len);
/* Takes the queued ciphertext (heap buffer, caller frees); 0 bytes -> NULL. */
uint8_t *tls_take_output(tls *t, size_t *len);
const char *tls_error(tls *t);

/* secrets.c: names -> values, sealed at rest with AES-256-GCM. */
int secrets_open(const char *dir, secret_store **out, char **err);
void secrets_close(secret_store *s);
/* The value, NUL-terminated, or NULL. Valid until the secret changes. */
const char *secrets_get(secret_store *s, const char *name, size_t len);
/* Returns 1 (created), 0 (replaced) or -1 with *err (heap). */
int secrets_put(secret_store *s, const char *name, const char *value, size_t len,
                int64_t now_ms, char **err);
/* Returns 0, -ENOENT or -1 with *err. */
int secrets_delete(secret_store *s, const char *name, char **err);
/* [{"name", "updated_at"}] sorted by name. */
json_t *secrets_list(secret_store *s);
/* A store that is never written to disk (a fleet's values, pushed at every start). */
secret_store *secrets_new_in_memory(void);
/* Helpers shared with fleet_key.c. */
int secrets_read_file(const char *path, uint8_t **out, size_t *len, size_t max);
char *secrets_hex(const uint8_t *p, size_t n);
int secrets_unhex(const char *s, uint8_t **out, size_t *n);
/* {"nonce", "sealed"} (hex) of value under an AEAD with a random nonce, or NULL. */
typedef struct evp_aead_st EVP_AEAD;
json_t *secrets_aead_seal(const EVP_AEAD *aead, const uint8_t *key, size_t key_len,
                          size_t nonce_len, const char *ad, const char *value, size_t len);
/* Opens what secrets_aead_seal made: 0 with *value (heap, NUL-terminated) and *len, or -1. */
int secrets_aead_open(const EVP_AEAD *aead, const uint8_t *key, size_t key_len, size_t nonce_len,
                      const char *ad, json_t *j, char **value, size_t *len);

/* fleet_key.c */
#define FLEET_KEY_BYTES 32
typedef struct fleet_key {
  char id[17];                    /* first 8 bytes of SHA-256(key), hex */
  uint8_t key[FLEET_KEY_BYTES];
} fleet_key;
/* Reads every --fleet-key file (none: *out NULL). Returns 0 or -1 with *err (heap). */
int fleet_keys_load(const char *const *files, size_t n, fleet_key **out, char **err);
void fleet_keys_free(fleet_key *keys, size_t n);
/* {"key", "nonce", "sealed"} of value under k, for name; NULL when sealing failed. */
json_t *fleet_key_seal(const fleet_key *k, const char *name, const char *value, size_t len);
/* Opens a sealed value with whichever of keys it names: 0 with *value (heap,
 * NUL-terminated; wipe it) and *len, or -1 with *why (constant). */
int fleet_key_open(const fleet_key *keys, size_t n, const char *name, json_t *sealed,
                   char **value, size_t *len, const char **why);

#endif
