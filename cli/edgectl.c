/*
 * edgectl: the command-line client of edgenode's control API.
 *
 * One blocking HTTP/1.1 request per invocation (Connection: close), JSON in
 * and out through jansson. Exit codes: 0 success, 1 the request failed (the
 * node answered with an error status, or could not be reached), 2 usage.
 */
#include <errno.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <termios.h>
#include <limits.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "base.h"

#define DEFAULT_NODE "http://127.0.0.1:8081"
#define DEFAULT_TOKEN_FILE "./data/control.token"
/* Deploys compile the code on the node, so answers may take a while. */
#define IO_TIMEOUT_S 120
/* No sane answer comes near this; a runaway one must not eat the machine. */
#define MAX_RESPONSE_BYTES (512u * 1024 * 1024)
#define MAX_TOKEN_BYTES 4096

static const char usage_text[] =
    "usage: edgectl [--node URL] [--token-file FILE] [--json] COMMAND ...\n"
    "\n"
    "commands:\n"
    "  deploy NAME FILE... [--main FILE] [--cpu-ms N] [--memory-mb N]\n"
    "                         deploy (or replace) worker NAME from module files,\n"
    "                         each named by its path relative to the directory\n"
    "                         of the main module (--main, or the first FILE)\n"
    "  list                   list deployed workers\n"
    "  show NAME              show one worker\n"
    "  delete NAME            delete a worker\n"
    "  node                   show the node's version, uptime and processes\n"
    "  run FILE... [--main FILE] [--input JSON]\n"
    "                         run modules once on the node and print the result\n"
    "  tenants                per-tenant statistics: state, requests, errors, CPU, heap\n"
    "  tenant NAME            one tenant's statistics, state and limits\n"
    "  cordon NAME [--reason TEXT]\n"
    "                         move a tenant into a worker process of its own\n"
    "  uncordon NAME          return a cordoned (or suspended) tenant to the shared\n"
    "                         worker processes\n"
    "  drain [--no-wait]      drain the node (no new connections, in-flight requests\n"
    "                         finish) and wait until it is drained\n"
    "  events [TENANT] [--limit N]\n"
    "                         recent deploys, deletes, crashes, restarts, drains,\n"
    "                         reloads, newest first (default 100)\n"
    "  top                    live per-tenant view, refreshed every second (q quits);\n"
    "                         one snapshot when the output is not a terminal\n"
    "  secret set NAME        store a secret for egress header injection; the value\n"
    "                         is read from standard input (one trailing newline dropped)\n"
    "  secret list            secret names and when they were set (never values)\n"
    "  secret delete NAME     remove a secret\n"
    "  facet NAME             a worker's facet: size, pages, tables and row counts\n"
    "  facet backup NAME FILE write a consistent copy of the live facet to FILE\n"
    "\n"
    "options:\n"
    "  --node URL             control API address (env EDGENODE_NODE,\n"
    "                         default " DEFAULT_NODE ")\n"
    "  --token-file FILE      bearer token file (env EDGENODE_TOKEN_FILE,\n"
    "                         default " DEFAULT_TOKEN_FILE ")\n"
    "  --json                 print the node's JSON answer instead of a summary\n"
    "  -h, --help             this help\n"
    "  --version              print edgectl's version\n";

typedef struct options {
  const char *node;
  const char *token_file;
  int json;
  const char *main_file;  /* --main */
  long cpu_ms;            /* -1 when not given */
  long memory_mb;         /* -1 when not given */
  const char *input;      /* --input, JSON text */
  int no_wait;            /* drain: return once the drain has started */
  long limit;             /* events: how many; 0 when not given */
  const char *reason;     /* cordon: --reason */
  const char **args;      /* positional: the command and its operands */
  int nargs;
} options;

typedef struct url {
  char host[64];
  int port;
  char *authority; /* "host:port" as written, for the Host header */
  char *prefix;    /* path before /v1, without a trailing slash ("" usually) */
} url;

typedef struct buffer {
  char *data;
  size_t len;
  size_t cap;
} buffer;

typedef struct response {
  int status;
  char *body; /* NUL-terminated; may hold NULs before body_len */
  size_t body_len;
} response;

/* ---- messages --------------------------------------------------------- */

static void say(const char *fmt, va_list ap) {
  fputs("edgectl: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
}

__attribute__((noreturn, format(printf, 1, 2))) static void usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  say(fmt, ap);
  va_end(ap);
  fputs(usage_text, stderr);
  exit(2);
}

__attribute__((noreturn, format(printf, 1, 2))) static void fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  say(fmt, ap);
  va_end(ap);
  exit(1);
}

/* ---- small buffers ---------------------------------------------------- */

static void buffer_reserve(buffer *b, size_t extra) {
  if (b->cap - b->len >= extra) return;
  size_t cap = b->cap ? b->cap : 4096;
  while (cap - b->len < extra) cap *= 2;
  b->data = xrealloc(b->data, cap);
  b->cap = cap;
}

static void buffer_append(buffer *b, const void *data, size_t len) {
  buffer_reserve(b, len + 1);
  memcpy(b->data + b->len, data, len);
  b->len += len;
  b->data[b->len] = '\0';
}

__attribute__((format(printf, 2, 3))) static void buffer_printf(buffer *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *s = NULL;
  int n = vasprintf(&s, fmt, ap);
  va_end(ap);
  if (n < 0) abort();
  buffer_append(b, s, (size_t)n);
  free(s);
}

/* Reads a whole file. Returns NULL with errno set on failure. */
static char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) return NULL;
  struct stat st;
  if (fstat(fileno(f), &st) < 0 || !S_ISREG(st.st_mode)) {
    int e = S_ISDIR(st.st_mode) ? EISDIR : EINVAL;
    fclose(f);
    errno = e;
    return NULL;
  }
  buffer b = {0};
  char chunk[65536];
  size_t n;
  while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) buffer_append(&b, chunk, n);
  int failed = ferror(f);
  fclose(f);
  if (failed) {
    free(b.data);
    errno = EIO;
    return NULL;
  }
  if (b.data == NULL) buffer_append(&b, "", 0);
  *len = b.len;
  return b.data;
}

/*
 * `path` made absolute against the working directory and lexically
 * canonical: no "." or ".." segments, no doubled or trailing slashes.
 * Lexical, not realpath(): module names are what the user typed, and a
 * symlinked file inside the directory still belongs to it.
 */
static char *path_canonical(const char *path) {
  buffer in = {0};
  if (path[0] != '/') {
    char *cwd = getcwd(NULL, 0);
    if (cwd == NULL) fail("cannot read the working directory: %s", strerror(errno));
    buffer_printf(&in, "%s/", cwd);
    free(cwd);
  }
  buffer_printf(&in, "%s", path);
  /* Each kept segment is appended as "/seg"; ".." drops the last one. */
  char *out = xmalloc(in.len + 2);
  size_t len = 0;
  for (char *seg = in.data; *seg;) {
    size_t n = strcspn(seg, "/");
    if (n == 2 && seg[0] == '.' && seg[1] == '.') {
      while (len > 0 && out[len - 1] != '/') len--;
      if (len > 0) len--;
    } else if (n > 0 && !(n == 1 && seg[0] == '.')) {
      out[len++] = '/';
      memcpy(out + len, seg, n);
      len += n;
    }
    seg += n;
    if (*seg == '/') seg++;
  }
  if (len == 0) out[len++] = '/';
  out[len] = '\0';
  free(in.data);
  return out;
}

/* The directory part of a canonical path ("/a/b.js" -> "/a", "/b.js" -> "/"). */
static char *path_dir(const char *canonical) {
  const char *slash = strrchr(canonical, '/');
  return slash == canonical ? xstrdup("/") : xstrndup(canonical, (size_t)(slash - canonical));
}

/* `file`'s path below `dir` (both canonical), or NULL when it is not below it. */
static const char *path_below(const char *file, const char *dir) {
  size_t n = strcmp(dir, "/") == 0 ? 0 : strlen(dir);
  if (strncmp(file, dir, n) != 0 || file[n] != '/' || file[n + 1] == '\0') return NULL;
  return file + n + 1;
}

/* ---- arguments -------------------------------------------------------- */

/* Parses a positive decimal integer option value, or exits with usage. */
static long parse_positive(const char *opt, const char *s) {
  char *end = NULL;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end != '\0' || v <= 0 || v > INT_MAX)
    usage_error("%s needs a positive integer, not '%s'", opt, s);
  return v;
}

static void parse_args(int argc, char **argv, options *o) {
  memset(o, 0, sizeof *o);
  o->cpu_ms = o->memory_mb = -1;
  o->args = xcalloc((size_t)argc, sizeof *o->args);
  int only_operands = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (only_operands || a[0] != '-' || a[1] == '\0') {
      o->args[o->nargs++] = a;
      continue;
    }
    if (strcmp(a, "--") == 0) {
      only_operands = 1;
      continue;
    }
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      fputs(usage_text, stdout);
      exit(0);
    }
    if (strcmp(a, "--version") == 0) {
      printf("edgectl %s\n", EDGENODE_VERSION);
      exit(0);
    }
    if (strcmp(a, "--json") == 0) {
      o->json = 1;
      continue;
    }
    if (strcmp(a, "--no-wait") == 0) {
      o->no_wait = 1;
      continue;
    }
    /* Every other option takes a value: "--opt value" or "--opt=value". */
    const char *eq = strchr(a, '=');
    size_t nlen = eq ? (size_t)(eq - a) : strlen(a);
    const char *value = eq ? eq + 1 : NULL;
    static const char *const valued[] = {"--node",   "--token-file", "--main",
                                         "--cpu-ms", "--memory-mb",  "--input", "--limit",
                                         "--reason"};
    const char *name = NULL;
    for (size_t k = 0; k < ARRAY_SIZE(valued); k++) {
      if (strlen(valued[k]) == nlen && strncmp(a, valued[k], nlen) == 0) name = valued[k];
    }
    if (name == NULL) usage_error("unknown option '%.*s'", (int)nlen, a);
    if (value == NULL) {
      if (i + 1 >= argc) usage_error("%s needs a value", name);
      value = argv[++i];
    }
    if (strcmp(name, "--node") == 0) o->node = value;
    else if (strcmp(name, "--token-file") == 0) o->token_file = value;
    else if (strcmp(name, "--main") == 0) o->main_file = value;
    else if (strcmp(name, "--cpu-ms") == 0) o->cpu_ms = parse_positive(name, value);
    else if (strcmp(name, "--memory-mb") == 0) o->memory_mb = parse_positive(name, value);
    else if (strcmp(name, "--limit") == 0) o->limit = parse_positive(name, value);
    else if (strcmp(name, "--reason") == 0) o->reason = value;
    else o->input = value;
  }
  if (o->node == NULL) o->node = getenv("EDGENODE_NODE");
  if (o->node == NULL || o->node[0] == '\0') o->node = DEFAULT_NODE;
  if (o->token_file == NULL) o->token_file = getenv("EDGENODE_TOKEN_FILE");
  if (o->token_file == NULL || o->token_file[0] == '\0') o->token_file = DEFAULT_TOKEN_FILE;
}

/* Command-specific options given to a command that does not take them. */
static void reject_options(const options *o, const char *cmd, int allow_code_opts,
                           int allow_input) {
  if (!allow_code_opts) {
    if (o->main_file) usage_error("%s does not take --main", cmd);
    if (o->cpu_ms >= 0) usage_error("%s does not take --cpu-ms", cmd);
    if (o->memory_mb >= 0) usage_error("%s does not take --memory-mb", cmd);
  }
  if (!allow_input && o->input) usage_error("%s does not take --input", cmd);
}

static void expect_operands(const options *o, const char *cmd, int min, int max) {
  int n = o->nargs - 1;
  if (n < min) usage_error("%s: missing operand", cmd);
  if (max >= 0 && n > max) usage_error("%s: unexpected operand '%s'", cmd, o->args[1 + max]);
}

static const char *worker_name_arg(const options *o) {
  const char *name = o->args[1];
  if (!worker_name_valid(name, strlen(name)))
    usage_error("invalid worker name '%s' (lowercase letters, digits and '-', "
                "not starting with '-', at most 63)",
                name);
  return name;
}

/* ---- node URL and token ----------------------------------------------- */

/* Brackets hold an IPv6 address and close before the port: without this
 * check "[::1" would reach the resolver as a host name. */
static void check_brackets(const char *authority, const char *s) {
  if (authority[0] != '[') {
    if (strpbrk(authority, "[]") != NULL)
      usage_error("--node: brackets only enclose an IPv6 address: '%s'", s);
    return;
  }
  const char *close = strchr(authority, ']');
  if (close == NULL) usage_error("--node: unclosed '[' in '%s' (e.g. http://[::1]:8081)", s);
  size_t len = (size_t)(close - authority) - 1;
  if (len == 0 || strspn(authority + 1, "0123456789abcdefABCDEF:.") != len ||
      memchr(authority + 1, ':', len) == NULL)
    usage_error("--node: not an IPv6 address between brackets in '%s'", s);
  if (close[1] != '\0' && close[1] != ':')
    usage_error("--node: expected ':PORT' after ']' in '%s'", s);
}

static void parse_url(const char *s, url *u) {
  if (strncasecmp(s, "http://", 7) != 0) {
    if (strstr(s, "://") != NULL) usage_error("--node: only http:// URLs are supported: '%s'", s);
    usage_error("--node: expected http://HOST:PORT, not '%s'", s);
  }
  const char *auth = s + 7;
  size_t alen = strcspn(auth, "/?#");
  if (alen == 0) usage_error("--node: no host in '%s'", s);
  u->authority = xstrndup(auth, alen);
  /* The URL is not echoed: it would put the password on the terminal. */
  if (strchr(u->authority, '@') != NULL)
    usage_error("--node: a user name or password in the URL is not supported "
                "(the token comes from --token-file)");
  check_brackets(u->authority, s);

  /* A port is optional; parse_host_port wants one, so default to 80. */
  const char *bracket = strrchr(u->authority, ']');
  const char *colon = strrchr(u->authority, ':');
  int has_port = colon != NULL && (bracket == NULL || colon > bracket);
  if (u->authority[0] != '[' && colon != NULL && strchr(u->authority, ':') != colon)
    usage_error("--node: write IPv6 addresses in brackets: '%s'", s);
  char *hp = has_port ? xstrdup(u->authority) : xasprintf("%s:80", u->authority);
  if (hp[0] == ':' || parse_host_port(hp, u->host, &u->port) < 0 || u->port == 0)
    usage_error("--node: bad host or port in '%s'", s);
  free(hp);

  const char *path = auth + alen;
  size_t plen = strcspn(path, "?#");
  while (plen > 0 && path[plen - 1] == '/') plen--;
  u->prefix = xstrndup(path, plen);
}

/* The token file's content without surrounding whitespace. */
static char *read_token(const char *path) {
  size_t len;
  char *raw = read_file(path, &len);
  if (raw == NULL)
    fail("cannot read token file %s: %s (set --token-file or EDGENODE_TOKEN_FILE)", path,
         strerror(errno));
  size_t start = 0;
  while (start < len && strchr(" \t\r\n", raw[start]) != NULL) start++;
  while (len > start && strchr(" \t\r\n", raw[len - 1]) != NULL) len--;
  if (len == start) fail("token file %s is empty", path);
  if (len - start > MAX_TOKEN_BYTES) fail("token file %s is too large for a token", path);
  for (size_t i = start; i < len; i++) {
    unsigned char c = (unsigned char)raw[i];
    if (c < 0x21 || c > 0x7e) fail("token file %s holds more than one printable token", path);
  }
  char *token = xstrndup(raw + start, len - start);
  free(raw);
  return token;
}

/* ---- HTTP ------------------------------------------------------------- */

static int connect_to(const url *u, char *err, size_t errlen) {
  char port[16];
  snprintf(port, sizeof port, "%d", u->port);
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
  struct addrinfo *res = NULL;
  int rc = getaddrinfo(u->host, port, &hints, &res);
  if (rc != 0) {
    snprintf(err, errlen, "cannot resolve %s: %s", u->host, gai_strerror(rc));
    return -1;
  }
  int fd = -1, saved = 0;
  for (struct addrinfo *ai = res; ai != NULL && fd < 0; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      saved = errno;
      continue;
    }
    struct timeval tv = {.tv_sec = IO_TIMEOUT_S};
    if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) < 0 ||
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) < 0 ||
        connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
      saved = errno;
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  if (fd < 0) {
    snprintf(err, errlen, "cannot connect to %s: %s (is edgenode running?)", u->authority,
             strerror(saved == EINPROGRESS ? ETIMEDOUT : saved));
  }
  return fd;
}

static int send_all(int fd, const char *data, size_t len) {
  while (len > 0) {
    ssize_t n = send(fd, data, len, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    data += n;
    len -= (size_t)n;
  }
  return 0;
}

/* Finds "\r\n\r\n"; returns the offset just past it, or 0. */
static size_t head_end(const char *p, size_t len) {
  const char *e = memmem(p, len, "\r\n\r\n", 4);
  return e ? (size_t)(e - p) + 4 : 0;
}

/*
 * Walks a chunked body at p (len bytes available). Returns 1 with *out_len
 * set when the last chunk is in, 0 when more is needed, -1 if malformed.
 * Only with `join` are the chunks moved together in place, so an incomplete
 * body stays as received for the next attempt. Trailers are skipped.
 */
static int walk_chunks(char *p, size_t len, int join, size_t *out_len) {
  size_t in = 0, out = 0;
  for (;;) {
    const char *eol = memmem(p + in, len - in, "\r\n", 2);
    if (eol == NULL) return len - in > 1024 ? -1 : 0;
    if (strchr("0123456789abcdefABCDEF", p[in]) == NULL || p[in] == '\0') return -1;
    char *end = NULL;
    errno = 0;
    unsigned long long size = strtoull(p + in, &end, 16);
    if (errno || size > MAX_RESPONSE_BYTES || (*end != ';' && *end != '\r' && *end != ' '))
      return -1;
    in = (size_t)(eol - p) + 2;
    if (size == 0) {
      for (;;) { /* trailer lines until an empty one */
        const char *t = memmem(p + in, len - in, "\r\n", 2);
        if (t == NULL) return 0;
        size_t line = (size_t)(t - (p + in));
        in += line + 2;
        if (line == 0) break;
      }
      *out_len = out;
      return 1;
    }
    if (size + 2 > len - in) return 0;
    if (p[in + size] != '\r' || p[in + size + 1] != '\n') return -1;
    if (join) memmove(p + out, p + in, size);
    out += size;
    in += size + 2;
  }
}

/*
 * Parses what has arrived so far. Returns 1 when the response is complete
 * (fills *r; the body points into raw, which may be modified), 0 when more is
 * needed, -1 when it is malformed. at_eof: the server has closed.
 */
static int parse_response(char *raw, size_t len, int at_eof, response *r) {
  size_t off = 0;
  for (;;) {
    size_t hend = head_end(raw + off, len - off);
    if (hend == 0) return at_eof ? -1 : 0;
    char *head = raw + off;
    if (hend < 12 || strncmp(head, "HTTP/1.", 7) != 0 || head[8] != ' ') return -1;
    int status = 0;
    for (int i = 9; i < 12; i++) {
      if (head[i] < '0' || head[i] > '9') return -1;
      status = status * 10 + (head[i] - '0');
    }
    off += hend;
    if (status >= 100 && status < 200) continue; /* interim answer, the real one follows */

    int chunked = 0;
    long long content_length = -1;
    const char *line = memchr(head, '\n', hend) + 1;
    while (line < head + hend - 2) {
      const char *eol = memchr(line, '\n', (size_t)(head + hend - line));
      size_t llen = (size_t)(eol - line);
      if (llen > 0 && line[llen - 1] == '\r') llen--;
      const char *colon = memchr(line, ':', llen);
      if (colon != NULL) {
        size_t nlen = (size_t)(colon - line);
        const char *v = colon + 1;
        while (v < line + llen && (*v == ' ' || *v == '\t')) v++;
        size_t vlen = (size_t)(line + llen - v);
        if (nlen == 17 && strncasecmp(line, "Transfer-Encoding", 17) == 0 &&
            vlen >= 7 && strncasecmp(v + vlen - 7, "chunked", 7) == 0) {
          chunked = 1;
        } else if (nlen == 14 && strncasecmp(line, "Content-Length", 14) == 0) {
          char num[24];
          if (vlen == 0 || vlen >= sizeof num) return -1;
          memcpy(num, v, vlen);
          num[vlen] = '\0';
          char *end = NULL;
          content_length = strtoll(num, &end, 10);
          if (*end != '\0' || content_length < 0) return -1;
        }
      }
      line = eol + 1;
    }

    r->status = status;
    r->body = raw + off;
    size_t avail = len - off;
    if (status == 204 || status == 304) {
      r->body_len = 0;
    } else if (chunked) {
      int rc = walk_chunks(raw + off, avail, 0, &r->body_len);
      if (rc <= 0) return rc < 0 || at_eof ? -1 : 0;
      walk_chunks(raw + off, avail, 1, &r->body_len);
    } else if (content_length >= 0) {
      if ((unsigned long long)content_length > avail) return at_eof ? -1 : 0;
      r->body_len = (size_t)content_length;
    } else {
      if (!at_eof) return 0;
      r->body_len = avail;
    }
    r->body[r->body_len] = '\0'; /* raw always has a spare byte: see buffer_append */
    return 1;
  }
}

/*
 * One request, one connection. Returns 0 with *r filled (any status), or -1
 * with err describing why no answer came.
 */
static int http_call(const url *u, const char *token, const char *method, const char *path,
                     const char *body, response *r, char *err, size_t errlen) {
  int fd = connect_to(u, err, errlen);
  if (fd < 0) return -1;

  buffer req = {0};
  buffer_printf(&req,
                "%s %s%s HTTP/1.1\r\nHost: %s\r\nUser-Agent: edgectl/%s\r\n"
                "Accept: application/json\r\nConnection: close\r\n"
                "Authorization: Bearer %s\r\n",
                method, u->prefix, path, u->authority, EDGENODE_VERSION, token);
  size_t body_len = body ? strlen(body) : 0;
  if (body != NULL) buffer_printf(&req, "Content-Type: application/json\r\n");
  if (body != NULL || strcmp(method, "GET") != 0)
    buffer_printf(&req, "Content-Length: %zu\r\n", body_len);
  buffer_append(&req, "\r\n", 2);
  if (body_len > 0) buffer_append(&req, body, body_len);

  int rc = send_all(fd, req.data, req.len);
  int send_errno = errno;
  free(req.data);

  /* Even when sending failed the node may have answered (413 before the body). */
  buffer in = {0};
  int parsed = 0;
  for (;;) {
    buffer_reserve(&in, 65536 + 1);
    ssize_t n = recv(fd, in.data + in.len, in.cap - in.len - 1, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int e = errno;
      snprintf(err, errlen, "no answer from %s: %s", u->authority,
               e == EAGAIN || e == EWOULDBLOCK ? "timed out" : strerror(e));
      break;
    }
    if (n == 0 && in.len == 0) {
      parsed = -2;
      break;
    }
    in.len += (size_t)n;
    in.data[in.len] = '\0';
    parsed = parse_response(in.data, in.len, n == 0, r);
    if (parsed != 0) break;
    if (in.len > MAX_RESPONSE_BYTES) {
      parsed = -1;
      break;
    }
  }
  close(fd);
  if (parsed == 1) {
    /* Give the caller its own copy so `in` can go. */
    char *body_copy = xmalloc(r->body_len + 1);
    memcpy(body_copy, r->body, r->body_len + 1);
    r->body = body_copy;
    free(in.data);
    return 0;
  }
  free(in.data);
  if (parsed == -1) {
    snprintf(err, errlen, "malformed HTTP response from %s", u->authority);
  } else if (parsed == -2) {
    if (rc < 0)
      snprintf(err, errlen, "sending to %s failed: %s", u->authority, strerror(send_errno));
    else
      snprintf(err, errlen, "%s closed the connection without answering", u->authority);
  }
  return -1;
}

/* ---- printing --------------------------------------------------------- */

static json_t *parse_body(const response *r) {
  if (r->body_len == 0) return NULL;
  return json_loadb(r->body, r->body_len, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
}

/* --json: the node's answer, pretty, keys in the node's order. */
static void print_json_body(const response *r) {
  json_t *j = parse_body(r);
  if (j == NULL) {
    if (r->body_len > 0) {
      fwrite(r->body, 1, r->body_len, stdout);
      if (r->body[r->body_len - 1] != '\n') fputc('\n', stdout);
    }
    return;
  }
  char *s = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY);
  if (s == NULL) abort();
  puts(s);
  free(s);
  json_decref(j);
}

/* Timestamps arrive as epoch milliseconds (or seconds) or as text. */
static void format_time(const json_t *v, char *out, size_t outlen) {
  if (json_is_string(v)) {
    snprintf(out, outlen, "%s", json_string_value(v));
    return;
  }
  if (!json_is_number(v)) {
    snprintf(out, outlen, "-");
    return;
  }
  double n = json_number_value(v);
  time_t secs = (time_t)(n > 1e11 ? n / 1000 : n);
  struct tm tm;
  if (gmtime_r(&secs, &tm) == NULL || strftime(out, outlen, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
    snprintf(out, outlen, "%.0f", n);
}

static int is_time_key(const char *key) {
  size_t n = strlen(key);
  return n > 3 && strcmp(key + n - 3, "_at") == 0;
}

static void print_scalar(const char *key, const json_t *v) {
  char tbuf[64];
  switch (json_typeof(v)) {
    case JSON_STRING: fputs(json_string_value(v), stdout); break;
    case JSON_INTEGER:
      if (is_time_key(key)) {
        format_time(v, tbuf, sizeof tbuf);
        fputs(tbuf, stdout);
      } else {
        printf("%" JSON_INTEGER_FORMAT, json_integer_value(v));
      }
      break;
    case JSON_REAL: printf("%g", json_real_value(v)); break;
    case JSON_TRUE: fputs("true", stdout); break;
    case JSON_FALSE: fputs("false", stdout); break;
    case JSON_NULL: fputs("-", stdout); break;
    default: {
      char *s = json_dumps(v, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY);
      if (s == NULL) abort();
      fputs(s, stdout);
      free(s);
    }
  }
}

static int is_scalar(const json_t *v) { return !json_is_object(v) && !json_is_array(v); }

/* An object inside an array, on one line: "pid=12 state=running". */
static void print_inline_object(const json_t *obj) {
  const char *k;
  json_t *v;
  int first = 1;
  json_object_foreach((json_t *)obj, k, v) {
    printf("%s%s=", first ? "" : " ", k);
    print_scalar(k, v);
    first = 0;
  }
}

/* A readable "key: value" rendering of any JSON object. */
static void print_object(const json_t *obj, int indent) {
  const char *k;
  json_t *v;
  size_t width = 0;
  json_object_foreach((json_t *)obj, k, v) {
    if (strlen(k) > width) width = strlen(k);
  }
  json_object_foreach((json_t *)obj, k, v) {
    printf("%*s%s:", indent, "", k);
    int empty = (json_is_object(v) && json_object_size(v) == 0) ||
                (json_is_array(v) && json_array_size(v) == 0);
    if (is_scalar(v) || empty) {
      printf("%*s", (int)(width - strlen(k) + 1), "");
      if (empty) fputc('-', stdout);
      else print_scalar(k, v);
      fputc('\n', stdout);
    } else if (json_is_object(v)) {
      fputc('\n', stdout);
      print_object(v, indent + 2);
    } else {
      size_t i;
      json_t *e;
      int all_scalar = 1;
      json_array_foreach(v, i, e) all_scalar &= is_scalar(e);
      if (all_scalar) {
        json_array_foreach(v, i, e) {
          fputs(i ? ", " : " ", stdout);
          print_scalar(k, e);
        }
        fputc('\n', stdout);
      } else {
        fputc('\n', stdout);
        json_array_foreach(v, i, e) {
          printf("%*s- ", indent + 2, "");
          if (json_is_object(e)) print_inline_object(e);
          else print_scalar(k, e);
          fputc('\n', stdout);
        }
      }
    }
  }
}

/* Prints the answer as a summary, or calls back to the raw printer for non-JSON. */
static void print_human(const response *r) {
  json_t *j = parse_body(r);
  if (json_is_object(j)) {
    print_object(j, 0);
  } else {
    print_json_body(r);
  }
  json_decref(j);
}

/* ---- requests --------------------------------------------------------- */

/*
 * Sends the request; on failure to connect, or an error status, prints why and
 * exits 1. Returns the (successful) response otherwise.
 */
static response call(const options *o, const char *method, const char *path, const char *body) {
  url u = {0};
  parse_url(o->node, &u);
  char *token = read_token(o->token_file);
  response r = {0};
  char err[512];
  if (http_call(&u, token, method, path, body, &r, err, sizeof err) < 0) fail("%s", err);
  free(token);
  free(u.authority);
  free(u.prefix);
  if (r.status >= 200 && r.status < 300) return r;

  json_t *j = parse_body(&r);
  const char *msg = json_string_value(json_object_get(j, "error"));
  char fallback[256];
  if (msg == NULL) {
    /* Not our API's error shape (a proxy, say): show the start of the body. */
    size_t n = strcspn(r.body, "\r\n");
    snprintf(fallback, sizeof fallback, "%.*s", (int)(n > 200 ? 200 : n),
             n ? r.body : "request failed");
    msg = fallback;
  }
  fprintf(stderr, "edgectl: %s (HTTP %d)\n", msg, r.status);
  /* Syntax errors name the place in the code. */
  const char *module = json_string_value(json_object_get(j, "module"));
  json_t *line = json_object_get(j, "line"), *col = json_object_get(j, "column");
  if (module != NULL) {
    fprintf(stderr, "  at %s", module);
    if (json_is_integer(line)) fprintf(stderr, ":%" JSON_INTEGER_FORMAT, json_integer_value(line));
    if (json_is_integer(col)) fprintf(stderr, ":%" JSON_INTEGER_FORMAT, json_integer_value(col));
    fputc('\n', stderr);
  }
  json_decref(j);
  exit(1);
}

static void response_free(response *r) {
  free(r->body);
  r->body = NULL;
}

/* Setting a member only fails on a key that is not UTF-8 (or out of memory). */
static void jset(json_t *obj, const char *key, json_t *value) {
  if (value == NULL || json_object_set_new(obj, key, value) < 0) abort();
}

/*
 * Builds {"main_module", "modules": {name: text}} from the files. A module's
 * name is its path relative to the directory of the main module (--main,
 * read too when not among the files, or else the first file), so that
 * relative imports between them resolve on the node as they do on disk.
 * A file outside that directory could only be named with "..", which no
 * import can reach: it is refused.
 */
static json_t *modules_body(const options *o, const char *const *files, int nfiles) {
  const char *main_path = o->main_file ? o->main_file : files[0];
  char *main_canonical = path_canonical(main_path);
  char *dir = path_dir(main_canonical);
  json_t *modules = json_object();
  int nall = nfiles + 1;
  for (int i = 0; i < nall; i++) {
    const char *path = i < nfiles ? files[i] : o->main_file;
    if (path == NULL) break;
    char *canonical = path_canonical(path);
    const char *name = path_below(canonical, dir);
    if (name == NULL)
      usage_error("%s is outside %s, the directory of the main module %s: module names are paths "
                  "relative to it",
                  path, dir, main_path);
    if (i == nfiles && json_object_get(modules, name) != NULL) { /* --main was listed */
      free(canonical);
      break;
    }
    if (json_object_get(modules, name) != NULL)
      usage_error("%s: module %s is given twice", path, name);
    size_t len;
    char *text = read_file(path, &len);
    if (text == NULL) fail("%s: %s", path, strerror(errno));
    json_t *s = memchr(text, '\0', len) ? NULL : json_stringn(text, len);
    if (s == NULL) fail("%s: not UTF-8 text", path);
    free(text);
    if (json_object_set_new(modules, name, s) < 0) fail("%s: file name is not UTF-8", path);
    free(canonical);
  }
  const char *main_name = path_below(main_canonical, dir);
  json_t *body = json_object();
  jset(body, "main_module", json_string(main_name));
  jset(body, "modules", modules);
  free(main_canonical);
  free(dir);
  if (o->cpu_ms > 0 || o->memory_mb > 0) {
    json_t *limits = json_object();
    if (o->cpu_ms > 0) jset(limits, "cpu_ms", json_integer(o->cpu_ms));
    if (o->memory_mb > 0) jset(limits, "memory_mb", json_integer(o->memory_mb));
    jset(body, "limits", limits);
  }
  return body;
}

static char *dump_compact(json_t *j) {
  char *s = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
  if (s == NULL) abort();
  return s;
}

/* ---- commands --------------------------------------------------------- */

static int cmd_deploy(const options *o) {
  reject_options(o, "deploy", 1, 0);
  expect_operands(o, "deploy", 2, -1);
  const char *name = worker_name_arg(o);
  json_t *body = modules_body(o, o->args + 2, o->nargs - 2);
  char *text = dump_compact(body);
  json_decref(body);
  char *path = xasprintf("/v1/workers/%s", name);
  response r = call(o, "PUT", path, text);
  free(text);
  free(path);
  if (o->json) {
    print_json_body(&r);
  } else {
    json_t *j = parse_body(&r);
    json_t *version = json_object_get(j, "version");
    if (json_is_integer(version))
      printf("deployed %s (version %" JSON_INTEGER_FORMAT ")\n", name, json_integer_value(version));
    else
      printf("deployed %s\n", name);
    json_decref(j);
  }
  response_free(&r);
  return 0;
}

static void print_workers_table(const json_t *workers) {
  const char *cols[] = {"NAME", "VERSION", "MAIN", "UPDATED"};
  size_t n = json_array_size(workers);
  char *(*cells)[4] = xcalloc(n ? n : 1, sizeof *cells);
  size_t width[4];
  for (int c = 0; c < 4; c++) width[c] = strlen(cols[c]);
  for (size_t i = 0; i < n; i++) {
    json_t *w = json_array_get(workers, i);
    const char *nm = json_string_value(json_object_get(w, "name"));
    json_t *ver = json_object_get(w, "version");
    const char *main_module = json_string_value(json_object_get(w, "main_module"));
    char tbuf[64];
    format_time(json_object_get(w, "updated_at"), tbuf, sizeof tbuf);
    cells[i][0] = xstrdup(nm ? nm : "?");
    cells[i][1] = json_is_integer(ver) ? xasprintf("%" JSON_INTEGER_FORMAT, json_integer_value(ver))
                                       : xstrdup("-");
    cells[i][2] = xstrdup(main_module ? main_module : "-");
    cells[i][3] = xstrdup(tbuf);
    for (int c = 0; c < 4; c++) {
      if (strlen(cells[i][c]) > width[c]) width[c] = strlen(cells[i][c]);
    }
  }
  printf("%-*s  %-*s  %-*s  %s\n", (int)width[0], cols[0], (int)width[1], cols[1],
         (int)width[2], cols[2], cols[3]);
  for (size_t i = 0; i < n; i++) {
    printf("%-*s  %-*s  %-*s  %s\n", (int)width[0], cells[i][0], (int)width[1], cells[i][1],
           (int)width[2], cells[i][2], cells[i][3]);
    for (int c = 0; c < 4; c++) free(cells[i][c]);
  }
  free(cells);
}

static int cmd_list(const options *o) {
  reject_options(o, "list", 0, 0);
  expect_operands(o, "list", 0, 0);
  response r = call(o, "GET", "/v1/workers", NULL);
  if (o->json) {
    print_json_body(&r);
  } else {
    json_t *j = parse_body(&r);
    json_t *workers = json_object_get(j, "workers");
    if (!json_is_array(workers)) {
      print_json_body(&r);
    } else if (json_array_size(workers) == 0) {
      printf("no workers deployed\n");
    } else {
      print_workers_table(workers);
    }
    json_decref(j);
  }
  response_free(&r);
  return 0;
}

/* show: the worker's fields, with module sources summarised by size. */
static void print_worker(json_t *w) {
  json_t *modules = json_object_get(w, "modules");
  const char *main_module = json_string_value(json_object_get(w, "main_module"));
  json_t *rest = json_deep_copy(w);
  json_object_del(rest, "modules");
  print_object(rest, 0);
  json_decref(rest);
  if (!json_is_object(modules)) return;
  printf("modules:\n");
  const char *k;
  json_t *v;
  size_t width = 0;
  json_object_foreach(modules, k, v) {
    if (strlen(k) > width) width = strlen(k);
  }
  json_object_foreach(modules, k, v) {
    printf("  %-*s  %zu bytes%s\n", (int)width, k, json_string_length(v),
           main_module && strcmp(k, main_module) == 0 ? "  (main)" : "");
  }
}

static int cmd_show(const options *o) {
  reject_options(o, "show", 0, 0);
  expect_operands(o, "show", 1, 1);
  char *path = xasprintf("/v1/workers/%s", worker_name_arg(o));
  response r = call(o, "GET", path, NULL);
  free(path);
  json_t *j = o->json ? NULL : parse_body(&r);
  if (json_is_object(j)) print_worker(j);
  else print_json_body(&r);
  json_decref(j);
  response_free(&r);
  return 0;
}

static int cmd_delete(const options *o) {
  reject_options(o, "delete", 0, 0);
  expect_operands(o, "delete", 1, 1);
  const char *name = worker_name_arg(o);
  char *path = xasprintf("/v1/workers/%s", name);
  response r = call(o, "DELETE", path, NULL);
  free(path);
  if (o->json) print_json_body(&r);
  else printf("deleted %s\n", name);
  response_free(&r);
  return 0;
}

static int cmd_node(const options *o) {
  reject_options(o, "node", 0, 0);
  expect_operands(o, "node", 0, 0);
  response r = call(o, "GET", "/v1/node", NULL);
  if (o->json) print_json_body(&r);
  else print_human(&r);
  response_free(&r);
  return 0;
}

/* run: a result shaped like a response prints as one; anything else as fields. */
static void print_run_result(const response *r) {
  json_t *j = parse_body(r);
  json_t *status = json_object_get(j, "status");
  json_t *body = json_object_get(j, "body");
  if (json_is_integer(status) && json_is_string(body)) {
    printf("HTTP %" JSON_INTEGER_FORMAT "\n", json_integer_value(status));
    json_t *headers = json_object_get(j, "headers");
    const char *k;
    json_t *v;
    if (json_is_object(headers)) {
      json_object_foreach(headers, k, v) {
        if (json_is_string(v)) {
          printf("%s: %s\n", k, json_string_value(v));
          continue;
        }
        /* set-cookie: one line per cookie, as on the wire */
        size_t i;
        json_t *one;
        json_array_foreach(v, i, one) {
          if (json_is_string(one)) printf("%s: %s\n", k, json_string_value(one));
        }
      }
    } else if (json_is_array(headers)) {
      size_t i;
      json_array_foreach(headers, i, v) {
        if (json_array_size(v) == 2)
          printf("%s: %s\n", json_string_value(json_array_get(v, 0)),
                 json_string_value(json_array_get(v, 1)));
      }
    }
    /* Not UTF-8: the node sent the bytes as base64, and so they are shown. */
    const char *enc = json_string_value(json_object_get(j, "body_encoding"));
    if (enc) printf("(body as %s)\n", enc);
    fputc('\n', stdout);
    size_t len = json_string_length(body);
    fwrite(json_string_value(body), 1, len, stdout);
    if (len > 0 && json_string_value(body)[len - 1] != '\n') fputc('\n', stdout);
  } else if (json_is_object(j)) {
    print_object(j, 0);
  } else {
    print_json_body(r);
  }
  json_decref(j);
}

/* Secret values come from standard input, so they never show in a process
 * list or a shell history. */
static char *read_stdin_all(size_t *len) {
  size_t cap = 4096, n = 0;
  char *buf = xmalloc(cap);
  size_t got;
  while ((got = fread(buf + n, 1, cap - n - 1, stdin)) > 0) {
    n += got;
    if (cap - n < 2) buf = xrealloc(buf, cap *= 2);
  }
  if (ferror(stdin)) fail("reading the secret from standard input: %s", strerror(errno));
  buf[n] = '\0';
  if (strlen(buf) != n) fail("the secret holds a NUL byte: only text secrets are supported");
  *len = n;
  return buf;
}

static int cmd_secret(const options *o) {
  reject_options(o, "secret", 0, 0);
  const char *sub = o->nargs > 1 ? o->args[1] : "";
  if (strcmp(sub, "list") == 0) {
    expect_operands(o, "secret", 1, 1);
    response r = call(o, "GET", "/v1/secrets", NULL);
    print_json_body(&r);
    response_free(&r);
    return 0;
  }
  if (strcmp(sub, "set") != 0 && strcmp(sub, "delete") != 0)
    usage_error("secret: expected 'set NAME', 'list' or 'delete NAME'");
  expect_operands(o, "secret", 2, 2);
  char *path = xasprintf("/v1/secrets/%s", o->args[2]);
  response r;
  if (strcmp(sub, "set") == 0) {
    if (isatty(STDIN_FILENO)) fprintf(stderr, "edgectl: reading the value of %s from standard input\n", o->args[2]);
    size_t len;
    char *value = read_stdin_all(&len);
    if (len > 0 && value[len - 1] == '\n') value[--len] = '\0';
    if (len == 0) fail("secret %s: the value on standard input is empty", o->args[2]);
    json_t *body = json_pack("{s:s%}", "value", value, len);
    if (body == NULL) fail("secret %s: the value is not valid UTF-8", o->args[2]);
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    free(value);
    if (text == NULL) fail("out of memory");
    r = call(o, "PUT", path, text);
    free(text);
    if (!o->json) printf("secret %s set\n", o->args[2]);
  } else {
    r = call(o, "DELETE", path, NULL);
    if (!o->json) printf("secret %s deleted\n", o->args[2]);
  }
  if (o->json) print_json_body(&r);
  free(path);
  response_free(&r);
  return 0;
}

static int cmd_facet(const options *o) {
  reject_options(o, "facet", 0, 0);
  int backup = o->nargs > 1 && strcmp(o->args[1], "backup") == 0;
  if (!backup) {
    expect_operands(o, "facet", 1, 1);
    char *path = xasprintf("/v1/workers/%s/facet", worker_name_arg(o));
    response r = call(o, "GET", path, NULL);
    free(path);
    print_json_body(&r);
    response_free(&r);
    return 0;
  }
  expect_operands(o, "facet", 3, 3);
  const char *name = o->args[2], *file = o->args[3];
  char *path = xasprintf("/v1/workers/%s/facet/backup", name);
  response r = call(o, "GET", path, NULL);
  free(path);
  FILE *f = fopen(file, "wb");
  if (f == NULL) fail("%s: %s", file, strerror(errno));
  if (fwrite(r.body, 1, r.body_len, f) != r.body_len || fclose(f) != 0)
    fail("writing %s: %s", file, strerror(errno));
  printf("backup of %s's facet written to %s (%zu bytes)\n", name, file, r.body_len);
  response_free(&r);
  return 0;
}

static int cmd_run(const options *o) {
  reject_options(o, "run", 1, 1);
  expect_operands(o, "run", 1, -1);
  json_t *body = modules_body(o, o->args + 1, o->nargs - 1);
  if (o->input != NULL) {
    json_error_t jerr;
    json_t *input = json_loads(o->input, JSON_DECODE_ANY, &jerr);
    if (input == NULL) usage_error("--input is not valid JSON: %s", jerr.text);
    jset(body, "input", input);
  }
  char *text = dump_compact(body);
  json_decref(body);
  response r = call(o, "POST", "/v1/run", text);
  free(text);
  if (o->json) print_json_body(&r);
  else print_run_result(&r);
  response_free(&r);
  return 0;
}

/* ---- operations: tenants, drain, events, top --------------------------- */

/* A table: left-aligned text columns, right-aligned numeric ones. */
typedef struct table {
  int ncols;
  const char *const *heads;
  const int *right;      /* per column: 1 = numbers */
  char **cells;          /* row-major, ncols per row, owned */
  size_t nrows;
} table;

static void table_add(table *t, char **row) {
  t->cells = xrealloc(t->cells, (t->nrows + 1) * (size_t)t->ncols * sizeof *t->cells);
  memcpy(t->cells + t->nrows * (size_t)t->ncols, row, (size_t)t->ncols * sizeof *row);
  t->nrows++;
}

static void table_print(table *t) {
  size_t *width = xcalloc((size_t)t->ncols, sizeof *width);
  for (int c = 0; c < t->ncols; c++) width[c] = strlen(t->heads[c]);
  for (size_t r = 0; r < t->nrows; r++)
    for (int c = 0; c < t->ncols; c++) {
      size_t len = strlen(t->cells[r * (size_t)t->ncols + (size_t)c]);
      if (len > width[c]) width[c] = len;
    }
  for (size_t r = 0; r <= t->nrows; r++) {
    for (int c = 0; c < t->ncols; c++) {
      const char *s = r == 0 ? t->heads[c] : t->cells[(r - 1) * (size_t)t->ncols + (size_t)c];
      int last = c == t->ncols - 1;
      if (t->right[c]) printf("%*s%s", (int)width[c], s, last ? "" : "  ");
      else if (last) fputs(s, stdout);
      else printf("%-*s  ", (int)width[c], s);
    }
    fputc('\n', stdout);
  }
  for (size_t i = 0; i < t->nrows * (size_t)t->ncols; i++) free(t->cells[i]);
  free(t->cells);
  free(width);
}

/* 1536000 -> "1.5 MiB". */
static char *format_bytes(double b) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  size_t u = 0;
  while (b >= 1024 && u + 1 < ARRAY_SIZE(units)) {
    b /= 1024;
    u++;
  }
  return u == 0 ? xasprintf("%.0f B", b) : xasprintf("%.1f %s", b, units[u]);
}

static double jnum(const json_t *obj, const char *key) {
  return json_number_value(json_object_get(obj, key));
}

static const char *jstr(const json_t *obj, const char *key, const char *fallback) {
  const char *s = json_string_value(json_object_get(obj, key));
  return s ? s : fallback;
}

static json_t *call_json(const options *o, const char *method, const char *path) {
  response r = call(o, method, path, NULL);
  json_t *j = parse_body(&r);
  response_free(&r);
  if (!json_is_object(j)) fail("%s %s: the node's answer is not a JSON object", method, path);
  return j;
}

static int cmd_tenants(const options *o) {
  reject_options(o, "tenants", 0, 0);
  expect_operands(o, "tenants", 0, 0);
  response r = call(o, "GET", "/v1/tenants", NULL);
  json_t *j = o->json ? NULL : parse_body(&r);
  json_t *list = json_object_get(j, "tenants");
  if (!json_is_array(list)) {
    print_json_body(&r);
  } else if (json_array_size(list) == 0) {
    printf("no tenants\n");
  } else {
    static const char *const heads[] = {"NAME", "STATE", "REQUESTS", "ERRORS", "CPU_MS", "HEAP"};
    static const int right[] = {0, 0, 1, 1, 1, 1};
    table t = {6, heads, right, NULL, 0};
    size_t i;
    json_t *e;
    json_array_foreach(list, i, e) {
      char *row[6] = {xstrdup(jstr(e, "name", "?")), xstrdup(jstr(e, "state", "-")),
                      xasprintf("%.0f", jnum(e, "requests")), xasprintf("%.0f", jnum(e, "errors")),
                      xasprintf("%.1f", jnum(e, "cpu_ms")), format_bytes(jnum(e, "heap_used"))};
      table_add(&t, row);
    }
    table_print(&t);
  }
  json_decref(j);
  response_free(&r);
  return 0;
}

static int cmd_tenant(const options *o) {
  reject_options(o, "tenant", 0, 0);
  expect_operands(o, "tenant", 1, 1);
  char *path = xasprintf("/v1/tenants/%s", worker_name_arg(o));
  response r = call(o, "GET", path, NULL);
  free(path);
  if (o->json) print_json_body(&r);
  else print_human(&r);
  response_free(&r);
  return 0;
}

/* cordon / uncordon: one line for people, the node's answer with --json. */
static int cordon_command(const options *o, const char *cmd) {
  int is_cordon = strcmp(cmd, "cordon") == 0;
  reject_options(o, cmd, 0, 0);
  expect_operands(o, cmd, 1, 1);
  if (!is_cordon && o->reason) usage_error("uncordon does not take --reason");
  const char *name = worker_name_arg(o);
  char *path = xasprintf("/v1/tenants/%s/%s", name, cmd);
  char *body = NULL;
  if (is_cordon && o->reason) {
    json_t *j = json_pack("{s:s}", "reason", o->reason);
    if (j == NULL) usage_error("--reason must be UTF-8 text");
    body = dump_compact(j);
    json_decref(j);
  }
  response r = call(o, "POST", path, body ? body : "");
  free(path);
  free(body);
  if (o->json) {
    print_json_body(&r);
  } else {
    json_t *j = parse_body(&r);
    if (is_cordon) {
      json_t *d = json_object_get(j, "dedicated");
      printf("%s: cordoned (%s); dedicated worker process %.0f\n", name, jstr(j, "reason", "-"),
             jnum(d, "pid"));
    } else {
      printf("%s: uncordoned (was %s); back in the shared worker processes\n", name,
             jstr(j, "was", "cordoned"));
    }
    json_decref(j);
  }
  response_free(&r);
  return 0;
}

static int cmd_cordon(const options *o) { return cordon_command(o, "cordon"); }
static int cmd_uncordon(const options *o) { return cordon_command(o, "uncordon"); }

static double mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

/* drain: asks, then (unless --no-wait) follows GET /v1/node until "drained". */
static int cmd_drain(const options *o) {
  reject_options(o, "drain", 0, 0);
  expect_operands(o, "drain", 0, 0);
  response r = call(o, "POST", "/v1/node/drain", "");
  json_t *j = parse_body(&r);
  double grace = jnum(j, "grace_ms");
  if (o->no_wait) {
    if (o->json) print_json_body(&r);
    else printf("%s (grace period %.0f ms)\n", jstr(j, "state", "draining"), grace);
    json_decref(j);
    response_free(&r);
    return 0;
  }
  json_decref(j);
  response_free(&r);
  double start = mono_ms(), deadline = start + grace + 15000;
  if (!o->json) printf("draining (grace period %.0f ms)...\n", grace);
  fflush(stdout);
  for (;;) {
    json_t *node = call_json(o, "GET", "/v1/node");
    const char *state = jstr(node, "state", "?");
    if (strcmp(state, "drained") == 0) {
      if (o->json) {
        char *s = json_dumps(node, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        if (s == NULL) abort();
        puts(s);
        free(s);
      } else {
        printf("drained after %.1f s\n", (mono_ms() - start) / 1e3);
      }
      json_decref(node);
      return 0;
    }
    json_decref(node);
    if (mono_ms() > deadline) fail("the node is still %s after %.0f ms", state, mono_ms() - start);
    sleep_ms(200);
  }
}

static void print_details(const json_t *details) {
  if (!json_is_object(details) || json_object_size(details) == 0) {
    fputs("-", stdout);
    return;
  }
  const char *k;
  json_t *v;
  int first = 1;
  json_object_foreach((json_t *)details, k, v) {
    printf("%s%s=", first ? "" : " ", k);
    print_scalar(k, v);
    first = 0;
  }
}

static int cmd_events(const options *o) {
  reject_options(o, "events", 0, 0);
  expect_operands(o, "events", 0, 1);
  char *path = o->nargs > 1 ? xasprintf("/v1/events?limit=%ld&tenant=%s", o->limit > 0 ? o->limit : 100,
                                        worker_name_arg(o))
                            : xasprintf("/v1/events?limit=%ld", o->limit > 0 ? o->limit : 100);
  response r = call(o, "GET", path, NULL);
  free(path);
  json_t *j = o->json ? NULL : parse_body(&r);
  json_t *list = json_object_get(j, "events");
  if (!json_is_array(list)) {
    print_json_body(&r);
  } else if (json_array_size(list) == 0) {
    printf("no events\n");
  } else {
    size_t i;
    json_t *e;
    printf("%-24s  %-12s  %-16s  %s\n", "TIME", "KIND", "TENANT", "DETAILS");
    json_array_foreach(list, i, e) {
      printf("%-24s  %-12s  %-16s  ", jstr(e, "time", "-"), jstr(e, "kind", "?"),
             jstr(e, "tenant", "-"));
      print_details(json_object_get(e, "details"));
      fputc('\n', stdout);
    }
  }
  json_decref(j);
  response_free(&r);
  return 0;
}

/* ---- top ---- */

static struct termios top_saved_tty;
static int top_tty_raw;
static volatile sig_atomic_t top_stop;

static void top_restore(void) {
  if (top_tty_raw) tcsetattr(STDIN_FILENO, TCSANOW, &top_saved_tty);
  top_tty_raw = 0;
  if (isatty(STDOUT_FILENO)) fputs("\033[?25h", stdout); /* cursor back */
  fflush(stdout);
}

static void top_on_signal(int sig) {
  (void)sig;
  top_stop = 1;
}

/* One tenant's line of `top`: rates from two samples `secs` apart. */
static json_t *top_row(const json_t *now, const json_t *before, double secs) {
  double dr = jnum(now, "requests") - (before ? jnum(before, "requests") : jnum(now, "requests"));
  double de = jnum(now, "errors") - (before ? jnum(before, "errors") : jnum(now, "errors"));
  double dc = jnum(now, "cpu_ms") - (before ? jnum(before, "cpu_ms") : jnum(now, "cpu_ms"));
  if (secs <= 0) secs = 1;
  /* Counters restart with the supervisor: never show negative rates. */
  return json_pack("{s:s, s:s, s:f, s:f, s:f, s:I, s:I, s:I}", "name", jstr(now, "name", "?"),
                   "state", jstr(now, "state", "-"), "requests_per_s", dr > 0 ? dr / secs : 0,
                   "errors_per_s", de > 0 ? de / secs : 0, "cpu_ms_per_s", dc > 0 ? dc / secs : 0,
                   "heap_used", (json_int_t)jnum(now, "heap_used"), "requests",
                   (json_int_t)jnum(now, "requests"), "errors", (json_int_t)jnum(now, "errors"));
}

static int compare_rows(const void *a, const void *b) {
  const json_t *x = *(json_t *const *)a, *y = *(json_t *const *)b;
  double rx = jnum(x, "requests_per_s") + jnum(x, "cpu_ms_per_s");
  double ry = jnum(y, "requests_per_s") + jnum(y, "cpu_ms_per_s");
  if (rx != ry) return rx < ry ? 1 : -1;
  return strcmp(jstr(x, "name", ""), jstr(y, "name", ""));
}

/* The rows, busiest first. */
static json_t *top_rows(json_t *now, json_t *before, double secs) {
  json_t *index = json_object();
  size_t i;
  json_t *e;
  json_array_foreach(json_object_get(before, "tenants"), i, e)
    json_object_set(index, jstr(e, "name", ""), e);
  json_t *list = json_object_get(now, "tenants");
  size_t n = json_array_size(list);
  json_t **rows = xcalloc(n ? n : 1, sizeof *rows);
  json_array_foreach(list, i, e) rows[i] = top_row(e, json_object_get(index, jstr(e, "name", "")), secs);
  qsort(rows, n, sizeof *rows, compare_rows);
  json_t *out = json_array();
  for (i = 0; i < n; i++) json_array_append_new(out, rows[i]);
  free(rows);
  json_decref(index);
  return out;
}

static void top_print(const options *o, json_t *rows, int live) {
  if (o->json) {
    json_t *body = json_pack("{s:O}", "tenants", rows);
    char *s = json_dumps(body, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (s == NULL) abort();
    puts(s);
    free(s);
    json_decref(body);
    return;
  }
  if (live) {
    char when[32];
    time_t t = time(NULL);
    struct tm tm;
    strftime(when, sizeof when, "%H:%M:%S", localtime_r(&t, &tm));
    printf("\033[H\033[2Jedgectl top  %s  %s  %zu tenants  (q quits)\n\n", o->node, when,
           json_array_size(rows));
  }
  static const char *const heads[] = {"NAME", "STATE", "REQ/S", "ERR/S", "CPU_MS/S", "HEAP", "REQUESTS"};
  static const int right[] = {0, 0, 1, 1, 1, 1, 1};
  table t = {7, heads, right, NULL, 0};
  size_t i;
  json_t *e;
  json_array_foreach(rows, i, e) {
    char *row[7] = {xstrdup(jstr(e, "name", "?")), xstrdup(jstr(e, "state", "-")),
                    xasprintf("%.1f", jnum(e, "requests_per_s")),
                    xasprintf("%.1f", jnum(e, "errors_per_s")),
                    xasprintf("%.1f", jnum(e, "cpu_ms_per_s")), format_bytes(jnum(e, "heap_used")),
                    xasprintf("%.0f", jnum(e, "requests"))};
    table_add(&t, row);
  }
  table_print(&t);
}

/* Waits up to ms for 'q' on a terminal; returns 1 when the user wants out. */
static int top_wait(long ms) {
  double until = mono_ms() + (double)ms;
  while (!top_stop) {
    double left = until - mono_ms();
    if (left <= 0) return 0;
    struct pollfd pfd = {.fd = STDIN_FILENO, .events = POLLIN};
    int rc = poll(&pfd, top_tty_raw ? 1 : 0, (int)left + 1);
    if (rc > 0) {
      char c;
      ssize_t got = read(STDIN_FILENO, &c, 1);
      if (got <= 0 || c == 'q' || c == 'Q' || c == 4 /* Ctrl-D */) return 1;
    }
  }
  return 1;
}

/* top: a live view refreshed every second; one snapshot when stdout is not a terminal. */
static int cmd_top(const options *o) {
  reject_options(o, "top", 0, 0);
  expect_operands(o, "top", 0, 0);
  int live = isatty(STDOUT_FILENO);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = top_on_signal; /* no SA_RESTART: poll() must return */
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  if (live && isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &top_saved_tty) == 0) {
    struct termios raw = top_saved_tty;
    raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO); /* keys one at a time; Ctrl-C still a signal */
    raw.c_cc[VMIN] = 1;
    raw.c_cc[VTIME] = 0;
    if (tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0) top_tty_raw = 1;
  }
  atexit(top_restore); /* fail() exits from inside call() */
  if (live && !o->json) fputs("\033[?25l", stdout);
  json_t *before = call_json(o, "GET", "/v1/tenants");
  double before_ms = mono_ms();
  int quit = top_wait(1000);
  while (!quit) {
    json_t *now = call_json(o, "GET", "/v1/tenants");
    double now_ms = mono_ms();
    json_t *rows = top_rows(now, before, (now_ms - before_ms) / 1e3);
    top_print(o, rows, live);
    fflush(stdout);
    json_decref(rows);
    json_decref(before);
    before = now;
    before_ms = now_ms;
    if (!live) break;
    quit = top_wait(1000);
  }
  json_decref(before);
  top_restore();
  return 0;
}

int main(int argc, char **argv) {
  options o;
  parse_args(argc, argv, &o);
  if (o.nargs == 0) usage_error("no command given");

  static const struct {
    const char *name;
    int (*fn)(const options *);
  } commands[] = {
      {"deploy", cmd_deploy}, {"list", cmd_list}, {"show", cmd_show},
      {"delete", cmd_delete}, {"node", cmd_node}, {"run", cmd_run},
      {"tenants", cmd_tenants}, {"tenant", cmd_tenant}, {"drain", cmd_drain},
      {"events", cmd_events}, {"top", cmd_top}, {"secret", cmd_secret},
      {"facet", cmd_facet}, {"cordon", cmd_cordon}, {"uncordon", cmd_uncordon},
  };
  int rc = -1;
  for (size_t i = 0; i < ARRAY_SIZE(commands); i++) {
    if (strcmp(o.args[0], commands[i].name) == 0) rc = commands[i].fn(&o);
  }
  if (rc < 0) {
    if (strcmp(o.args[0], "help") == 0) {
      fputs(usage_text, stdout);
      return 0;
    }
    usage_error("unknown command '%s'", o.args[0]);
  }
  free(o.args);
  if (fflush(stdout) != 0 || ferror(stdout)) fail("writing output: %s", strerror(errno));
  return rc;
}
