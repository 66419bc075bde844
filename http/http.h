/*
 * http: HTTP/1.1 for the whole project, libuv for I/O, llhttp for parsing.
 * The server side is shared by the worker processes' ingress and the
 * supervisor's control API; the client side (http_client_*, at the end) by
 * the handoff to dedicated processes and the egress's upstream connections.
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
 *   a body (buffered or streamed) that does not bring body_min_rate bytes a
 *   second over each body_timeout_ms window -> 408 and close;
 *   idle keep-alive connections close after idle_timeout_ms;
 * - a connection past max_connections, past max_connections_per_addr from
 *   its client's address, or while the process is out of descriptors is
 *   closed as soon as it is accepted (counted in refused_*), and the accept
 *   loop never spins on EMFILE: a reserve descriptor is given up to accept
 *   and close what waits.
 * Error responses produced here have a JSON body {"error": "..."}.
 */
#ifndef EDGENODE_HTTP_H
#define EDGENODE_HTTP_H

#include <stddef.h>
#include <jansson.h>
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
  /* A body must be complete within body_timeout_ms of its head, or bring at
   * least body_min_rate bytes a second over every body_timeout_ms window
   * (the handler's own delay in taking a streamed body is not counted).
   * body_timeout_ms default 30000; body_min_rate default
   * HTTP_DEFAULT_BODY_MIN_RATE, HTTP_NO_MIN_RATE for a plain deadline. */
  uint64_t body_timeout_ms;
  uint64_t body_min_rate;
  /* Open connections at most (0: no cap), and at most from one client
   * address (0: no cap): an IPv4 address, or an IPv6 /64, the block one
   * host is usually given (a cap per IPv6 address would be evaded by
   * picking another address in it). IPv4-mapped IPv6 counts as IPv4. */
  size_t max_connections;
  size_t max_connections_per_addr;
} http_server_config;

#define HTTP_DEFAULT_BODY_MIN_RATE 4096
#define HTTP_NO_MIN_RATE UINT64_MAX

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
  /* Connections closed at accept, since the server started, by reason. */
  uint64_t refused_cap;       /* max_connections were open */
  uint64_t refused_addr;      /* max_connections_per_addr were open from the address */
  uint64_t refused_fd;        /* no descriptor was left (EMFILE, ENFILE) */
  uint64_t body_timeouts;     /* 408s for a body too slow (body_timeout_ms, body_min_rate) */
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

/* The server's connection caps and counts, for reports: {"connections",
 * "max_connections", "max_connections_per_addr", "refused_cap",
 * "refused_addr", "refused_fd", "body_timeouts"} (0 for a cap: none). */
json_t *http_server_report(const http_server *s);

/* Case-insensitive header lookup; NULL when absent. */
const char *http_request_header(const http_request *req, const char *name);
/* The client's address (an IP, no port) into buf: 0, or -1 when the
 * connection is gone or is not TCP. */
int http_request_peer(const http_request *req, char *buf, size_t len);

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

/*
 * Ingress routes (routes.c): [{"pattern", "worker"}, ...], a pattern being a
 * host ("name", a wildcard "*.name", or "*") and an optional exact path or
 * path prefix (a path ending in '*'); the most specific match wins (routes.c
 * says how). Parsed by the supervisor (to refuse) and by worker processes.
 */
typedef struct http_routes http_routes;
#define HTTP_ROUTES_MAX 1000
#define HTTP_ROUTE_PATTERN_MAX 512
/* The table, or NULL with *err (heap) naming the first bad entry. */
http_routes *http_routes_parse(json_t *routes, char **err);
void http_routes_free(http_routes *t);
size_t http_routes_count(const http_routes *t);
/* The worker of the most specific route for host (its name, without the
 * port) and path (the target's path; a query is ignored), borrowed from the
 * table; NULL when none matches (or t is NULL). */
const char *http_routes_match(const http_routes *t, const char *host, size_t host_len,
                              const char *path);

/* The standard reason phrase ("Not Found"), or "Unknown". */
const char *http_status_text(int status);

/*
 * The client side: one HTTP/1.1 connection to a server, one request at a
 * time on it, the response streamed to the caller as it arrives.
 *
 * The client does no connecting, no name resolution and no TLS: it speaks
 * over a transport the caller already connected. Either a uv_stream_t
 * (http_client_new_stream), or any byte pipe behind http_client_transport
 * (http_client_new), whose owner feeds what it reads with
 * http_client_feed() (the egress puts its TLS there: this library never
 * links a TLS library, since it also lives in processes that load V8).
 *
 * A request goes out with http_client_send(): its body fixed (sent with
 * a Content-Length) or streamed (http_client_write / http_client_end, sent
 * chunked). The response comes back through three callbacks: on_head once
 * (1xx interim responses are skipped), on_body for each piece of the body,
 * on_end once (0, or a negative error). Between on_head and on_end the
 * caller paces the body with http_client_pause() / http_client_resume():
 * paused, no on_body is called and the transport is not read, so what the
 * client holds for a slow consumer stays below one read (64 KiB).
 *
 * Callbacks are called from inside http_client_feed(), _feed_end(),
 * _written() and libuv callbacks, never from inside any other call. Every http_client_* call
 * may be made from inside a callback, http_client_close() included.
 *
 * Errors given to on_end:
 *   UV_ECONNRESET  the connection closed (or was reset) before any byte of
 *                  the response
 *                  (on a reused connection the request may be sent again)
 *   UV_EOF         it closed in the middle of the response
 *   UV_EPROTO      malformed response (http_client_error() says how)
 *   UV_E2BIG       response head over HTTP_CLIENT_MAX_HEADER_BYTES
 *   UV_ENOTSUP     101 Switching Protocols: not an HTTP/1.1 response
 *   UV_ETIMEDOUT   head_timeout_ms or idle_timeout_ms passed
 *   other          the transport's read or write error
 */
typedef struct http_client http_client;

typedef struct http_client_response {
  int status;
  const char *reason;          /* reason phrase as received (bytes, NUL-terminated) */
  const http_header *headers;  /* as received: names and values are raw bytes */
  size_t n_headers;
  int64_t content_length;      /* -1: chunked, or delimited by the connection's end */
  int keep_alive;              /* the server lets the connection be reused */
} http_client_response;

typedef struct http_client_callbacks {
  /* The final response head. Pointers stay valid until on_end returns. */
  void (*on_head)(http_client *c, void *arg, const http_client_response *res);
  /* A piece of the body (chunked coding removed). */
  void (*on_body)(http_client *c, void *arg, const uint8_t *data, size_t len);
  /* The response is complete (0) or failed (< 0, see above). Once per request. */
  void (*on_end)(http_client *c, void *arg, int status);
} http_client_callbacks;

typedef struct http_client_request {
  const char *method;
  const char *target;          /* request-target: "/items?id=3" */
  const http_header *headers;  /* sent as given, Host among them; the client adds
                                  Content-Length or Transfer-Encoding and Connection */
  size_t n_headers;
  const void *body;            /* fixed body, copied; NULL when empty */
  size_t body_len;
  int body_streamed;           /* the body follows: http_client_write, http_client_end */
  int keep_alive;              /* 0: "Connection: close" */
  uint64_t head_timeout_ms;    /* 0: none. From the call until the response head */
  uint64_t idle_timeout_ms;    /* 0: none. No response byte for this long while not paused */
} http_client_request;

/* A byte pipe the caller owns and has connected. */
typedef struct http_client_transport {
  /* Queues bytes for the server (copy them, they are gone after the call).
   * Returns 0 or a negative error. */
  int (*write)(void *ctx, const void *data, size_t len);
  /* Starts (on = 1) or stops delivering input to http_client_feed(). */
  void (*read)(void *ctx, int on);
  /* Optional: bytes accepted by write() and not sent yet (request body
   * backpressure). NULL: streamed bodies are never held back. */
  size_t (*write_queued)(void *ctx);
  void *ctx;
} http_client_transport;

/* Request body bytes queued past this make http_client_write() return 1. */
#define HTTP_CLIENT_WRITE_HIGH (256u << 10)
#define HTTP_CLIENT_MAX_HEADER_BYTES (64u << 10)

/* A client over a transport. Never fails (aborts on out-of-memory). The
 * transport must outlive the client's use of it: up to http_client_close(). */
http_client *http_client_new(uv_loop_t *loop, const http_client_transport *transport,
                             const http_client_callbacks *cb, void *arg);

/* A client over a connected stream (TCP, pipe). The stream stays the
 * caller's, but stream->data is the client's and the client reads and writes
 * it until http_client_close() (which sets data to NULL: set it again if the
 * stream's close callback needs it); close the stream only after that. */
http_client *http_client_new_stream(uv_loop_t *loop, uv_stream_t *stream,
                                    const http_client_callbacks *cb, void *arg);

/* Sends a request; its response follows through the callbacks. Returns 0,
 * UV_EBUSY (a request is in progress or the connection is not reusable),
 * UV_EINVAL (a header the client writes itself: Content-Length,
 * Transfer-Encoding, Connection; a name or method that is not a token; a
 * control character in a value or the target) or the transport's write
 * error. The request buffers are wiped after writing: heads may carry
 * credentials. */
int http_client_send(http_client *c, const http_client_request *req);

/* Body bytes of a streamed request (copied; one chunk). Returns 0 when more
 * may be written now, 1 when the transport holds HTTP_CLIENT_WRITE_HIGH
 * bytes or more (wait for http_client_on_drain), or a negative error:
 * UV_EINVAL when no streamed body is open. */
int http_client_write(http_client *c, const void *data, size_t len);

/* Ends a streamed request body. Returns 0 or a negative error. */
int http_client_end(http_client *c);

/* Calls cb once the transport's queue went below HTTP_CLIENT_WRITE_HIGH / 4
 * after a write that returned 1, or with a negative status when the
 * request failed. Returns 0, UV_EBUSY (a wait is set) or UV_EINVAL. */
int http_client_on_drain(http_client *c, void (*cb)(void *arg, int status), void *arg);

/* Stops (pause) and restarts (resume) the response body: no on_body while
 * paused, and the transport is not read. Resuming delivers what was held
 * from a later turn of the loop, never from inside this call. */
void http_client_pause(http_client *c);
void http_client_resume(http_client *c);

/* The bytes the owner of a transport read. Returns 0, or a negative error
 * when the client has failed (its on_end has been called, or was called
 * before: feed no more). Input while no request waits for an answer makes
 * the connection unusable. */
int http_client_feed(http_client *c, const void *data, size_t len);

/* The owner of a transport says its input ended: UV_EOF for the peer's FIN,
 * another negative error for a failure. */
void http_client_feed_end(http_client *c, int status);

/* The owner of a transport says queued bytes went out (for on_drain), or
 * with status < 0 that writing failed. */
void http_client_written(http_client *c, int status);

/* 1 when another request may be sent: the last response was read whole,
 * the server allows keep-alive, and nothing was received past it. */
int http_client_reusable(const http_client *c);

/* Why the last request failed, for a person ("invalid chunk size"). */
const char *http_client_error(const http_client *c);

/* Ends everything: no callback is called after this. The memory goes once
 * the client's own handles closed; a stream given to http_client_new_stream
 * may be closed right after this call. */
void http_client_close(http_client *c);

#endif
