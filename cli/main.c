/*
 * edgectl: the command-line client of edgenode's control API. One command
 * per invocation: parse the line (args.c), run the command (commands.c),
 * and fail if the answer could not be written out.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

void cli_fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("edgectl: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(CLI_EXIT_FAILED);
}

int main(int argc, char **argv) {
  cli_options o;
  cli_args_parse(argc, argv, &o);
  int rc = o.command->run(&o);
  cli_commands_done();
  cli_args_free(&o);
  if (fflush(stdout) != 0 || ferror(stdout)) cli_fail("writing output: %s", strerror(errno));
  return rc;
}
