/*
 * edgectl tail NAME: a worker's live logs (GET /v1/workers/NAME/tail) as
 * lines for people, or with --json the node's NDJSON as it comes. Each line
 * is printed and flushed as it arrives, so that a pipe sees it at once.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "cli.h"

/* A query value with everything but unreserved characters %-escaped. */
static char *query_escape(const char *s) {
  char *out = xmalloc(strlen(s) * 3 + 1), *p = out;
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
        strchr("-._~,", c))
      *p++ = (char)c;
    else
      p += sprintf(p, "%%%02X", c);
  }
  *p = '\0';
  return out;
}

static char *tail_path(const cli_options *o, const char *name) {
  char *status = o->status ? query_escape(o->status) : NULL;
  char *sample = o->sample ? query_escape(o->sample) : NULL;
  char *path = xasprintf("/v1/workers/%s/tail%s%s%s%s%s", name, status || sample ? "?" : "",
                         status ? "status=" : "", status ? status : "",
                         status && sample ? "&sample=" : sample ? "sample=" : "",
                         sample ? sample : "");
  free(status);
  free(sample);
  return path;
}

/* "12:34:56.789" out of the line's ISO 8601 time. */
static const char *clock_of(const json_t *line) {
  const char *t = cli_jstr(line, "time", "");
  const char *at = strchr(t, 'T');
  return at ? at + 1 : t;
}

static void print_human(const json_t *line) {
  const char *type = cli_jstr(line, "type", "");
  const char *when = clock_of(line);
  if (strcmp(type, "log") == 0) {
    printf("%.12s %-5s %s\n", when, cli_jstr(line, "level", "info"), cli_jstr(line, "message", ""));
  } else if (strcmp(type, "exception") == 0) {
    printf("%.12s exception %s\n", when, cli_jstr(line, "message", ""));
    const char *stack = cli_jstr(line, "stack", NULL);
    if (stack) printf("  %s\n", stack);
  } else if (strcmp(type, "request") == 0) {
    printf("%.12s %s %s %d %s (cpu %.1f ms, wall %.1f ms)\n", when, cli_jstr(line, "method", "-"),
           cli_jstr(line, "url", "-"), (int)cli_jnum(line, "status"),
           cli_jstr(line, "outcome", "-"), cli_jnum(line, "cpu_ms"), cli_jnum(line, "wall_ms"));
  } else if (strcmp(type, "dropped") == 0) {
    printf("... %.0f lines dropped: this reader fell behind\n", cli_jnum(line, "count"));
  } else if (strcmp(type, "attached") == 0) {
    fprintf(stderr, "tailing %s (Ctrl-C to stop)\n", cli_jstr(line, "worker", "?"));
  }
}

static void on_line(void *arg, const char *text, size_t len) {
  const cli_options *o = arg;
  if (len == 0) return;
  json_t *line = o->json ? NULL : json_loadb(text, len, 0, NULL);
  if (o->json || !json_is_object(line)) printf("%s\n", text);
  else print_human(line);
  json_decref(line);
  fflush(stdout);
}

int cli_cmd_tail(const cli_options *o) {
  cli_expect_operands(o, 1, 1);
  const char *name = cli_worker_name(o, 0);
  char *path = tail_path(o, name);
  cli_client *c = cli_client_new(o);
  cli_response r;
  int rc = cli_client_stream(c, path, on_line, (void *)o, &r);
  free(path);
  if (rc < 0) cli_fail("%s", cli_client_error(c));
  int ok = r.status >= 200 && r.status < 300;
  if (!ok) {
    json_t *j = cli_response_json(&r);
    const char *msg = json_string_value(json_object_get(j, "error"));
    fprintf(stderr, "edgectl: %s (HTTP %ld)\n", msg ? msg : "tail refused", r.status);
    json_decref(j);
  }
  cli_response_free(&r);
  cli_client_free(c);
  return ok ? CLI_EXIT_OK : CLI_EXIT_FAILED;
}
