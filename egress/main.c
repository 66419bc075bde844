/* being written */
#include <stdio.h>
int main(void) {
  fputs("edgenode-egress: not built yet\n", stderr);
  return 1;
}
