/*
 * http: the HTTP/1.1 server side shared by the worker processes' ingress and
 * the supervisor's control API. libuv for I/O, llhttp for parsing.
 *
 * What it guarantees to a handler:
 * - a request is delivered once its head and whole body are in (bodies are
 *   bounded by max_body_bytes, so buffering is safe); Content-Length and
 *   chunked bodies; `Expect: 100-continue` answered with 100 when the
 *   declared length fits, 413 when it does not (the body is never read);
 * - keep-alive and pipelining: requests on one connection are handed over one
 *   at a time, in order; the next is parsed only after the previous response
 *   was queued, so responses can never overtake each other;
 * - malformed input -> 400 and close; header block over max_header_bytes ->
 *   431 and close; body over max_body_bytes -> 413 and close, as soon as the
 *   excess is known (Content-Length or chunk sizes), without buffering it;
 *   a header block not finished within header_timeout_ms -> 408 and close;
 *   idle keep-alive connections close after idle_timeout_ms.
 * Error responses produced here have a JSON body {"error": "..."}.
 */
#ifndef EDGENODE_HTTP_H
#define EDGENODE_HTTP_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef struct http_server http_server;
typedef struct http_conn http_conn;

typedef struct http_header {
  char *name;  /* as received (case kept); compare with strcasecmp */
  char *value;
} http_header;

typedef struct http_request {
  char *method;          /* "GET" */
  char *target;          /* request-target as received: "/items?id=3" */
  http_header *headers;  /* in order received */
  size_t n_headers;
  uint8_t *body;         /* NULL when empty */
  size_t body_len;
  int keep_alive;        /* the connection stays open after the response */
  char id[17];           /* request id: 16 hex chars, unique per process run */
  uint64_t start_ns;     /* monotonic time the head was complete */
  http_conn *conn;       /* NULL once the client went away (see on_abort) */
  void *data;            /* the handler's */
  int body_streamed;     /* the body follows: read it with http_request_body_read() */
} http_request;

/*
 * Called once per complete request. The handler must eventually call
 * http_respond() (or http_respond_error()) exactly once, now or later, even
 * when the client has gone away in the meantime; that call frees the request.
 */
typedef void (*http_handler)(http_server *server, http_request *req);

/* Optional: the connection of a request still waiting for its response closed. */
typedef void (*http_abort_cb)(http_server *server, http_request *req);

typedef struct http_server_config {
  size_t max_header_bytes;     /* default 65536 */
  size_t max_body_bytes;       /* default 10 MiB + 64 KiB */
  uint64_t header_timeout_ms;  /* default 10000 */
  uint64_t idle_timeout_ms;    /* default 60000 */
  const char *server_name;     /* "Server:" header value; NULL for none */
  /* Non-zero: requests with a chunked body or one longer than this many bytes
   * are handed over as soon as their head is in, with body_streamed set. */
  size_t stream_body_above;
} http_server_config;

struct http_server {
  uv_loop_t *loop;
  uv_tcp_t listener;
  http_server_config config;
  http_handler on_request;
  http_abort_cb on_abort;
  void *data;                 /* the owner's */
  size_t connections;         /* open connections */
  size_t in_flight;           /* requests handed over and not yet responded to */
  int listening;
  int closing;
  void (*on_closed)(http_server *server);
  void *conns;                /* internal: list of connections */
  uint64_t next_request_seq;
};

/* Zero-filled config fields take the defaults above. */
int http_server_init(http_server *s, uv_loop_t *loop, const http_server_config *config,
                     http_handler on_request, void *data);

/* Binds and listens on host:port. Returns 0 or a negative libuv error. */
int http_server_listen(http_server *s, const char *host, int port);

/* Listens on an already bound and listening socket (inherited from a parent). */
int http_server_listen_fd(http_server *s, int fd);

/* The bound port (useful after listening on port 0). Returns -1 if unknown. */
int http_server_port(const http_server *s);

/*
 * Stops accepting new connections: the listener is closed; open connections
 * keep being served, and after their current response, keep-alive connections
 * are closed instead of waiting for another request.
 */
void http_server_stop_accepting(http_server *s);

/*
 * Stops accepting and closes every connection now (in-flight requests see
 * on_abort). on_closed runs once everything is closed.
 */
void http_server_close(http_server *s, void (*on_closed)(http_server *s));

/*
 * Sends a response and frees the request. Adds Content-Length, Date,
 * Connection (and Server) itself; headers passed here must not contain them.
 * Returns 0, or UV_ECONNRESET when the client had gone away (the request is
 * freed all the same).
 */
int http_respond(http_request *req, int status, const http_header *headers, size_t n_headers,
                 const void *body, size_t body_len);

/* Responds with `{"error": message}` plus optional extra members given as a
 * JSON object text (may be NULL), Content-Type application/json. */
int http_respond_error(http_request *req, int status, const char *message,
                       const char *extra_json);

/*
 * Streamed responses, for bodies produced while they are sent.
 *
 * http_respond_start() sends the status line and headers; the body follows in
 * chunks (Transfer-Encoding: chunked; to an HTTP/1.0 client, unframed and the
 * connection closes after it). Then http_respond_write() as often as needed,
 * and exactly one of http_respond_end() (the body is complete) or
 * http_respond_abort() (it is not: the connection is closed so the client
 * sees a truncated response, never a short one that looks whole). Both free
 * the request. http_respond() and http_respond_error() on a started response
 * abort it, since its status line is already gone.
 *
 * Every call works on a request whose client went away (req->conn == NULL):
 * writes then fail with UV_ECONNRESET and end/abort just free it.
 */
typedef void (*http_drain_cb)(void *arg, int status /* 0, or < 0: the connection is gone */);

/* `length` >= 0 announces the body's size (Content-Length, no chunks): a
 * write past it fails with UV_E2BIG, and an end short of it closes the
 * connection like http_respond_abort(). Returns 0, or UV_ECONNRESET when the
 * client is gone, or UV_EINVAL when the response was already started. */
int http_respond_start(http_request *req, int status, const http_header *headers,
                       size_t n_headers, int64_t length);

/* Queues body bytes (copied). Returns 0 when more may be written now, 1 when
 * the connection's queue is full (wait for http_respond_on_drain first), or a
 * negative libuv error (UV_E2BIG: past the announced length; nothing was
 * written). Bytes of a bodyless response (HEAD, 204, 304) are dropped. */
int http_respond_write(http_request *req, const void *data, size_t len);

/* Calls cb once: when the queue has gone down after a write that returned 1,
 * or when the connection closes. Returns 0, or UV_EBUSY (a wait is already
 * set), UV_ECONNRESET (the client is gone) or UV_EINVAL (nothing to wait
 * for); cb is then never called. */
int http_respond_on_drain(http_request *req, http_drain_cb cb, void *arg);

/* Ends the body and frees the request. Returns 0, UV_ECONNRESET, or
 * UV_EPROTO when fewer bytes than announced were written (the connection
 * is closed: the client sees a truncated response). */
int http_respond_end(http_request *req);

/* Cuts the response short (closes the connection) and frees the request. */
void http_respond_abort(http_request *req);

/*
 * Streamed request bodies. For a request with body_streamed set, body bytes
 * arrive after the handler got it; the server stops reading the socket while
 * HTTP_BODY_WINDOW bytes wait to be taken. max_body_bytes still applies.
 *
 * http_request_body_read() takes what has arrived: returns the number of
 * bytes (*data points at them until the next call on this request), 0 at the
 * end of the body, UV_EAGAIN when none are there yet (then wait with
 * http_request_body_wait()), or an error: UV_E2BIG (over max_body_bytes),
 * UV_EPROTO (malformed chunked coding), UV_ETIMEDOUT (the body stopped
 * arriving), UV_ECONNRESET (the client went away). On the first three the
 * server itself answers 413, 400 or 408 and closes the connection; the
 * handler's response then goes nowhere, as for a client that left.
 * Responding before the body was read to its end closes the connection after
 * the response.
 */
int http_request_body_read(http_request *req, const uint8_t **data);

/* Gives a streamed-body request back: the server reads its body whole and
 * then hands the request to the handler again, as an ordinary one (for a
 * handler that must forward the body, not process it). Only before any of
 * the body was read. Returns 0 (the handler must forget req now),
 * UV_EINVAL or UV_ECONNRESET. */
int http_request_buffer_body(http_request *req);

/* Calls cb once (never from inside this call) when body bytes, the end or an
 * error can be read. Returns 0, UV_EBUSY (a wait is set) or UV_EINVAL (not a
 * streamed body, or something can be read now). */
int http_request_body_wait(http_request *req, http_drain_cb cb, void *arg);

/* Case-insensitive header lookup; NULL when absent. */
const char *http_request_header(const http_request *req, const char *name);

/*
 * A request's authority, from a Host header (surrounding whitespace trimmed
 * first) or an absolute-form target: an RFC 3986 host (reg-name, IPv4address
 * or "[" IPv6address "]") and an optional ":port" of 1 to 5 digits within
 * 1-65535. No userinfo, path or whitespace. Stricter than RFC 3986 where the
 * URL Standard is, so that "http://" + authority + "/" always parses as a
 * URL: no percent-encoding, a name ending in a number must be an IPv4
 * address, and an "xn--" label must be valid IDNA. Letter case is kept.
 */
typedef enum { HTTP_HOST_NAME, HTTP_HOST_IPV4, HTTP_HOST_IPV6 } http_host_kind;

typedef struct http_authority {
  http_host_kind kind;
  const char *host;  /* into the input; an IPv6 address keeps its brackets */
  size_t host_len;
  const char *port;  /* into the input, digits only; NULL when there is none */
  size_t port_len;
} http_authority;

/* Returns NULL with *out filled, or a constant message saying what is wrong. */
const char *http_authority_parse(const char *s, size_t len, http_authority *out);

/* The standard reason phrase ("Not Found"), or "Unknown". */
const char *http_status_text(int status);

#endif
