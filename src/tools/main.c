/* tools: the dsinfer command — dispatches to one function per subcommand. */
#include <stdio.h>
#include <string.h>

#include "dsinfer.h"

int main(int argc, char **argv) {
  if (argc >= 2 && (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version"))) {
    printf("dsinfer %s\n", DSINFER_VERSION);
    return 0;
  }
  fprintf(stderr, "usage: dsinfer <command> [options]\n");
  return 2;
}
