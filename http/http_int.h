/*
 * Internals shared by the http/ sources: the connection, the request with
 * its arena, and the response writer. Nothing here is part of http.h.
 */
#ifndef EDGENODE_HTTP_INT_H
#define EDGENODE_HTTP_INT_H

#include <llhttp.h>

#include "http.h"

/* One read() lands here; shared by all connections of a server, since the
 * parser copies what it keeps and a read callback never nests in another. */
#define HTTP_READ_BUF 65536
/* Pipelined bytes kept while a request is with the handler; past this the
 * socket is no longer read until the handler answers. */
#define HTTP_PIPELINE_MAX 65536
/* Responses queued in the kernel's stead: past this, no further request is
 * parsed until the client has read some (it keeps pipelining but not reading). */
#define HTTP_WRITE_HIGH (1u << 20)
#define HTTP_WRITE_LOW (256u << 10)
/* After our FIN, how long we keep draining what the client still sends so
 * that closing does not turn into a RST that destroys our last response. */
#define HTTP_LINGER_MS 2000
/* Request bodies larger than this (or chunked) are streamed to a handler
 * that asked for it; past this many bytes received and not yet taken, the
 * socket is no longer read. */
#define HTTP_BODY_WINDOW (256u << 10)
/* Bytes a request keeps inline before its arena or header table go to the heap. */
#define HTTP_ARENA_INLINE 2048
#define HTTP_HEADERS_INLINE 32

typedef enum {
  HTTP_PH_NEW,      /* accepted, no request yet: the header timeout runs */
  HTTP_PH_IDLE,     /* between requests on a kept-alive connection */
  HTTP_PH_HEAD,     /* request line and headers coming in */
  HTTP_PH_BODY,     /* head complete, body coming in */
  HTTP_PH_HANDLER,  /* request with the handler; parsing stops */
  HTTP_PH_CLOSING,  /* final response sent or connection dropped */
} http_phase;

typedef enum {
  HTTP_TM_NONE,
  HTTP_TM_HEADER,  /* 408 when it fires */
  HTTP_TM_BODY,    /* 408 when it fires */
  HTTP_TM_IDLE,    /* silent close */
  HTTP_TM_RESUME,  /* 0 ms: parse what was pipelined, outside the caller's stack */
  HTTP_TM_LINGER,  /* close */
} http_timer_mode;

/* A client address as connections are counted under it (see
 * max_connections_per_addr): IPv4 as ::ffff:a.b.c.d, IPv6 its /64. */
typedef struct http_addr_key {
  uint8_t b[16];
} http_addr_key;

typedef struct http_addr_table http_addr_table;

/* 0, or -1 for a family that is not counted (the connection is let in). */
int http__addr_key(const struct sockaddr *sa, http_addr_key *out);
http_addr_table *http__addr_table_new(void);
void http__addr_table_free(http_addr_table *t);
/* Counts one more connection from k: 0, or -1 when max are open already. */
int http__addr_acquire(http_addr_table *t, const http_addr_key *k, size_t max);
void http__addr_release(http_addr_table *t, const http_addr_key *k);

/* Everything before `arena` is one request's state, zeroed between requests
 * (req_reset); from `arena` on, the buffers a connection keeps. */
typedef struct http_req {
  http_request pub;            /* first: the handler's pointer is ours */
  int dispatched;              /* handed to the handler */
  int is_head;
  int http10;                  /* HTTP/1.0 client: no chunked coding, close after */
  /* A streamed response (http_respond_start) in progress. */
  int streaming;
  int stream_chunked;          /* body goes out in chunks; otherwise until close */
  int stream_bodyless;         /* HEAD, 1xx, 204, 304: body bytes are dropped */
  int stream_keep;             /* keep-alive decided when the head went out */
  int64_t stream_length;       /* announced Content-Length, or -1 */
  uint64_t stream_sent;        /* body bytes written so far */
  http_drain_cb drain_cb;      /* waits for the write queue to go down */
  void *drain_arg;
  /* A streamed request body (http_request.body_streamed): body_buf holds
   * bytes received and not yet taken, from body_taken to pub.body_len. */
  size_t body_taken;
  size_t body_total;           /* bytes received so far, against max_body_bytes */
  int body_done;               /* the whole body has been received */
  int body_error;              /* < 0: the body cannot be completed */
  http_drain_cb body_cb;       /* waits for body bytes (or the end, or an error) */
  void *body_arg;
  size_t arena_len;
  size_t target_off;
  size_t body_expect;          /* Content-Length, or the limit for chunked bodies */
  char *arena;                 /* method, target, header names and values, NUL-terminated */
  size_t arena_cap;
  size_t (*offs)[2];           /* name/value offsets into the arena while parsing */
  http_header *hdrs;
  size_t hdr_cap;
  uint8_t *body_buf;
  size_t body_cap;
  char arena_inline[HTTP_ARENA_INLINE];
  size_t offs_inline[HTTP_HEADERS_INLINE][2];
  http_header hdrs_inline[HTTP_HEADERS_INLINE];
} http_req;

struct http_conn {
  uv_tcp_t tcp;
  uv_timer_t timer;
  uv_shutdown_t shutdown;
  llhttp_t parser;
  http_server *server;
  http_conn *prev;
  http_conn *next;
  http_req *req;        /* being parsed, or with the handler */
  http_req *spare;      /* the previous request, kept for reuse */
  char *inbuf;          /* bytes read but not parsed yet (pipelining) */
  size_t inbuf_len;
  size_t inbuf_cap;
  size_t head_bytes;    /* size of the head being parsed, counted in the callbacks */
  size_t head_raw;      /* raw bytes fed while the head stays incomplete */
  int fail_status;      /* set by a parser callback that rejects the request; -1: drop */
  char fail_text[96];
  /* llhttp 8 skips the two bytes after a chunk's data without looking at
   * them; we check that they are CRLF. Offsets count the bytes given to the
   * parser on this connection. */
  const char *exec_data;  /* the buffer llhttp_execute is running on */
  size_t exec_len;
  uint64_t exec_base;     /* offset of exec_data[0] */
  uint64_t crlf_off;      /* offset of the CR due after the last chunk's data */
  uint8_t crlf_left;      /* bytes of that CRLF not checked yet (0 .. 2) */
  size_t queue_mark;     /* write queue size when the idle or linger timer last fired */
  uint64_t deadline;     /* loop time (ms) at which timer_mode's action is due */
  uint64_t armed_deadline; /* when the uv timer fires (<= deadline while armed) */
  int handles_open;
  uint8_t phase;
  uint8_t timer_mode;
  uint8_t in_parse;     /* inside conn_feed: a response must not restart parsing */
  uint8_t ready;        /* a request is complete and waits to be dispatched */
  uint8_t field_open;   /* the last header callback was a field name */
  uint8_t read_stopped;
  uint8_t write_blocked;
  uint8_t closed;
  uint8_t timer_armed;
  uint8_t eof;          /* the client sent FIN */
  uint8_t fin_sent;     /* our shutdown completed: only lingering is left */
  uint8_t body_streaming; /* the handler has the request; its body is still parsed */
  uint8_t body_paused;  /* the parser paused inside a streamed body (window full, or its end) */
  uint8_t fold_state;   /* head_fold_check's place in the head's lines (0: a new request) */
  uint8_t addr_counted; /* addr is counted in the server's per-address table */
  http_addr_key addr;
  /* The body-rate window: when it began (loop ms) and the body bytes
   * received by then. */
  uint64_t body_window_at;
  size_t body_window_bytes;
};

/* Internal state behind http_server.conns. */
typedef struct http_server_int {
  http_conn *head;
  uint64_t id_base;     /* random high 32 bits of request ids */
  int draining;
  int listener_closing;
  int listener_closed;
  size_t closed_pending; /* closed (their descriptors gone), waiting for their close callbacks */
  int reserve_fd;       /* held so that a process out of descriptors can still accept and close */
  uint64_t fd_warned_ms; /* when running out of descriptors was last logged */
  http_addr_table *addrs; /* with max_connections_per_addr only */
  char readbuf[HTTP_READ_BUF];
} http_server_int;

/*
 * Serializes and queues one response on the connection: status line, Date,
 * Server, Connection, Content-Length, the given headers, then the body
 * (omitted for HEAD and for 1xx/204/304). Everything is copied. Returns 0 or
 * a negative libuv error (the connection is then unusable).
 */
int http__write_response(http_conn *c, int status, const http_header *headers,
                         size_t n_headers, const void *body, size_t body_len, int keep_alive,
                         int head_only);

/* The head of a streamed response: Transfer-Encoding: chunked when `chunked`,
 * otherwise no length at all (the body ends when the connection closes). */
int http__write_stream_head(http_conn *c, int status, const http_header *headers,
                            size_t n_headers, int keep_alive, int chunked, int64_t length);

/* Queues body bytes of a streamed response, framed as one chunk when `chunked`. */
int http__write_chunk(http_conn *c, const void *data, size_t len, int chunked);

/* Queues raw bytes (copied when they cannot be written at once). */
int http__write_raw(http_conn *c, const char *data, size_t len);

/* {"error": message} plus the members of extra_json (an object text or NULL).
 * Returns a heap string. */
char *http__error_json(const char *message, const char *extra_json, size_t *len);

/* Called by the writer when a queued write finished (status < 0: failed). */
void http__conn_write_done(http_conn *c, int status);

#endif
