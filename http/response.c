/*
 * Response serialization: status line and framing headers, the cached Date,
 * the write path (try the socket first, copy only what it would not take).
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "base.h"
#include "http_int.h"

const char *http_status_text(int status) {
  switch (status) {
    case 100: return "Continue";
    case 101: return "Switching Protocols";
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 203: return "Non-Authoritative Information";
    case 204: return "No Content";
    case 205: return "Reset Content";
    case 206: return "Partial Content";
    case 300: return "Multiple Choices";
    case 301: return "Moved Permanently";
    case 302: return "Found";
    case 303: return "See Other";
    case 304: return "Not Modified";
    case 307: return "Temporary Redirect";
    case 308: return "Permanent Redirect";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 402: return "Payment Required";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 406: return "Not Acceptable";
    case 407: return "Proxy Authentication Required";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 410: return "Gone";
    case 411: return "Length Required";
    case 412: return "Precondition Failed";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 415: return "Unsupported Media Type";
    case 416: return "Range Not Satisfiable";
    case 417: return "Expectation Failed";
    case 421: return "Misdirected Request";
    case 422: return "Unprocessable Content";
    case 425: return "Too Early";
    case 426: return "Upgrade Required";
    case 428: return "Precondition Required";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 451: return "Unavailable For Legal Reasons";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    case 507: return "Insufficient Storage";
    case 508: return "Loop Detected";
    case 511: return "Network Authentication Required";
  }
  return "Unknown";
}

/*
 * "Sun, 06 Nov 1994 08:49:37 GMT", formatted at most once a second per
 * thread. Written by hand: strftime's day and month names follow the locale.
 */
static const char *http_date(void) {
  static _Thread_local time_t cached_sec = (time_t)-1;
  static _Thread_local char cached[64]; /* room for any int the compiler imagines */
  static const char days[7][4] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
  static const char months[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                     "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  time_t now = time(NULL);
  if (now == cached_sec) return cached;
  struct tm tm;
  if (gmtime_r(&now, &tm) == NULL) return cached_sec == (time_t)-1 ? "" : cached;
  snprintf(cached, sizeof cached, "%s, %02d %s %04d %02d:%02d:%02d GMT", days[tm.tm_wday % 7],
           tm.tm_mday, months[tm.tm_mon % 12], tm.tm_year + 1900, tm.tm_hour, tm.tm_min,
           tm.tm_sec);
  cached_sec = now;
  return cached;
}

static char *put(char *p, const char *s, size_t n) {
  memcpy(p, s, n);
  return p + n;
}

#define PUT_LIT(p, lit) put((p), (lit), sizeof(lit) - 1)

static char *put_u64(char *p, uint64_t v) {
  char tmp[20];
  size_t n = 0;
  do {
    tmp[n++] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  while (n) *p++ = tmp[--n];
  return p;
}

/* Headers we write ourselves; a second copy from the caller would make the
 * framing ambiguous (response splitting), so those are dropped. */
static int header_reserved(const char *name, size_t len) {
  switch (len) {
    case 4: return strcasecmp(name, "date") == 0;
    case 6: return strcasecmp(name, "server") == 0;
    case 10: return strcasecmp(name, "connection") == 0 || strcasecmp(name, "keep-alive") == 0;
    case 14: return strcasecmp(name, "content-length") == 0;
    case 17: return strcasecmp(name, "transfer-encoding") == 0;
  }
  return 0;
}

/* A header is written only if it cannot break out of its line. */
static int header_writable(const http_header *h, size_t *name_len, size_t *value_len) {
  if (h->name == NULL || h->value == NULL) return 0;
  size_t nl = strcspn(h->name, "\r\n: \t");
  if (nl == 0 || h->name[nl] != '\0') return 0;
  size_t vl = strcspn(h->value, "\r\n");
  if (h->value[vl] != '\0') return 0;
  if (header_reserved(h->name, nl)) return 0;
  *name_len = nl;
  *value_len = vl;
  return 1;
}

typedef struct http_wbuf {
  uv_write_t req;
  http_conn *conn;
  char data[];
} http_wbuf;

static void on_write(uv_write_t *req, int status) {
  http_wbuf *w = container_of(req, http_wbuf, req);
  http_conn *c = w->conn;
  free(w);
  http__conn_write_done(c, status);
}

/* Writes what the socket takes now; the rest is copied into one block that
 * the write callback frees. */
static int write_bufs(http_conn *c, uv_buf_t *bufs, unsigned nbufs) {
  uv_stream_t *stream = (uv_stream_t *)&c->tcp;
  size_t total = 0;
  for (unsigned i = 0; i < nbufs; i++) total += bufs[i].len;
  size_t done = 0;
  int r = uv_try_write(stream, bufs, nbufs);
  if (r >= 0) {
    done = (size_t)r;
    if (done == total) return 0;
  } else if (r != UV_EAGAIN) {
    return r;
  }
  size_t rest = total - done;
  http_wbuf *w = xmalloc(sizeof *w + rest);
  w->conn = c;
  char *p = w->data;
  size_t skip = done;
  for (unsigned i = 0; i < nbufs; i++) {
    size_t len = bufs[i].len;
    if (skip >= len) {
      skip -= len;
      continue;
    }
    memcpy(p, bufs[i].base + skip, len - skip);
    p += len - skip;
    skip = 0;
  }
  uv_buf_t b = uv_buf_init(w->data, (unsigned)rest);
  r = uv_write(&w->req, stream, &b, 1, on_write);
  if (r != 0) {
    free(w);
    return r;
  }
  return 0;
}

int http__write_raw(http_conn *c, const char *data, size_t len) {
  uv_buf_t b = uv_buf_init((char *)data, (unsigned)len);
  return write_bufs(c, &b, 1);
}

/* How the body of a response is delimited. */
typedef enum { FRAME_LENGTH, FRAME_CHUNKED, FRAME_CLOSE } body_framing;

/* Serializes the status line and headers into `stack` (or the heap when they
 * do not fit); returns the buffer, its length in *len. */
static char *format_head(http_conn *c, int status, const http_header *headers, size_t n_headers,
                         int keep_alive, body_framing framing, size_t body_len, char *stack,
                         size_t stack_size, size_t *len) {
  const char *server_name = c->server->config.server_name;
  const char *reason = http_status_text(status);
  const char *date = http_date();
  size_t reason_len = strlen(reason), date_len = strlen(date);
  size_t server_len = server_name ? strlen(server_name) : 0;
  int bodyless = status < 200 || status == 204 || status == 304;

  size_t need = sizeof("HTTP/1.1 000 \r\n") + reason_len + sizeof("Date: \r\n") + date_len +
                sizeof("Connection: keep-alive\r\n") + sizeof("Transfer-Encoding: chunked\r\n") +
                20 + 2;
  if (server_len) need += sizeof("Server: \r\n") + server_len;
  for (size_t i = 0; i < n_headers; i++) {
    size_t nl, vl;
    if (header_writable(&headers[i], &nl, &vl)) need += nl + vl + 4;
  }

  char *head = need <= stack_size ? stack : xmalloc(need);
  char *p = head;
  p = PUT_LIT(p, "HTTP/1.1 ");
  *p++ = (char)('0' + status / 100 % 10);
  *p++ = (char)('0' + status / 10 % 10);
  *p++ = (char)('0' + status % 10);
  *p++ = ' ';
  p = put(p, reason, reason_len);
  p = PUT_LIT(p, "\r\nDate: ");
  p = put(p, date, date_len);
  p = PUT_LIT(p, "\r\n");
  if (server_len) {
    p = PUT_LIT(p, "Server: ");
    p = put(p, server_name, server_len);
    p = PUT_LIT(p, "\r\n");
  }
  p = keep_alive ? PUT_LIT(p, "Connection: keep-alive\r\n") : PUT_LIT(p, "Connection: close\r\n");
  if (!bodyless && framing == FRAME_LENGTH) {
    p = PUT_LIT(p, "Content-Length: ");
    p = put_u64(p, body_len);
    p = PUT_LIT(p, "\r\n");
  } else if (!bodyless && framing == FRAME_CHUNKED) {
    p = PUT_LIT(p, "Transfer-Encoding: chunked\r\n");
  }
  for (size_t i = 0; i < n_headers; i++) {
    size_t nl, vl;
    if (!header_writable(&headers[i], &nl, &vl)) continue;
    p = put(p, headers[i].name, nl);
    *p++ = ':';
    *p++ = ' ';
    p = put(p, headers[i].value, vl);
    p = PUT_LIT(p, "\r\n");
  }
  p = PUT_LIT(p, "\r\n");
  *len = (size_t)(p - head);
  return head;
}

int http__write_response(http_conn *c, int status, const http_header *headers,
                         size_t n_headers, const void *body, size_t body_len, int keep_alive,
                         int head_only) {
  char stack[4096];
  size_t head_len;
  char *head = format_head(c, status, headers, n_headers, keep_alive, FRAME_LENGTH, body_len,
                           stack, sizeof stack, &head_len);
  int bodyless = status < 200 || status == 204 || status == 304;
  uv_buf_t bufs[2];
  unsigned nbufs = 1;
  bufs[0] = uv_buf_init(head, (unsigned)head_len);
  if (!bodyless && !head_only && body_len > 0) {
    bufs[1] = uv_buf_init((char *)body, (unsigned)body_len);
    nbufs = 2;
  }
  int r = write_bufs(c, bufs, nbufs);
  if (head != stack) free(head);
  return r;
}

int http__write_stream_head(http_conn *c, int status, const http_header *headers,
                            size_t n_headers, int keep_alive, int chunked, int64_t length) {
  char stack[4096];
  size_t head_len;
  body_framing framing = length >= 0 ? FRAME_LENGTH : chunked ? FRAME_CHUNKED : FRAME_CLOSE;
  char *head = format_head(c, status, headers, n_headers, keep_alive, framing,
                           length >= 0 ? (size_t)length : 0, stack, sizeof stack, &head_len);
  uv_buf_t buf = uv_buf_init(head, (unsigned)head_len);
  int r = write_bufs(c, &buf, 1);
  if (head != stack) free(head);
  return r;
}

int http__write_chunk(http_conn *c, const void *data, size_t len, int chunked) {
  if (!chunked) {
    if (len == 0) return 0;
    uv_buf_t buf = uv_buf_init((char *)data, (unsigned)len);
    return write_bufs(c, &buf, 1);
  }
  /* A zero-length chunk is the terminator: "0\r\n\r\n". */
  static const char hex[] = "0123456789abcdef";
  char size[24];
  char *p = size + sizeof size;
  size_t n = len;
  do {
    *--p = hex[n & 15];
    n >>= 4;
  } while (n);
  uv_buf_t bufs[3];
  char line[24];
  size_t line_len = (size_t)(size + sizeof size - p);
  memcpy(line, p, line_len);
  line[line_len++] = '\r';
  line[line_len++] = '\n';
  bufs[0] = uv_buf_init(line, (unsigned)line_len);
  bufs[1] = uv_buf_init((char *)data, (unsigned)len);
  bufs[2] = uv_buf_init((char *)"\r\n", 2);
  if (len == 0) {
    bufs[1] = bufs[2];
    return write_bufs(c, bufs, 2);
  }
  return write_bufs(c, bufs, 3);
}

char *http__error_json(const char *message, const char *extra_json, size_t *len) {
  json_t *obj = NULL;
  if (extra_json != NULL) {
    obj = json_loads(extra_json, 0, NULL);
    if (!json_is_object(obj)) {
      json_decref(obj);
      obj = NULL;
    }
  }
  if (obj == NULL) obj = json_object();
  if (obj == NULL) abort();
  /* "error" goes first in the text: build a fresh object and merge. */
  json_t *out = json_object();
  if (out == NULL) abort();
  json_t *msg = json_string(message ? message : "");
  if (msg == NULL) msg = json_string("(error message is not valid UTF-8)");
  json_object_set_new(out, "error", msg);
  json_object_update_missing(out, obj);
  json_decref(obj);
  char *text = json_dumps(out, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(out);
  if (text == NULL) text = xstrdup("{\"error\":\"internal error\"}");
  *len = strlen(text);
  return text;
}
