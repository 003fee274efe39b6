/* tools: a small table-driven option parser shared by every subcommand:
 * `--name value` or `--name=value`, --help, and a one-line usage error
 * (exit code 2) for anything it does not know. */
#ifndef DSI_CLI_H
#define DSI_CLI_H

#include <stdint.h>

typedef enum { OPT_STR, OPT_INT, OPT_FLOAT, OPT_U64, OPT_FLAG, OPT_LIST } dsi_opt_type;

typedef struct dsi_opt {
  const char *name;  /* "--model"; "-n" allowed too */
  const char *alias; /* second spelling or NULL */
  dsi_opt_type type;
  void *dst;         /* char**, int*, float*, uint64_t*, int* (flag), dsi_strlist* */
  const char *help;
} dsi_opt;

typedef struct dsi_strlist {
  char **v;
  int n;
} dsi_strlist;

/* Returns 0 to go on, 1 when --help was printed (exit 0), 2 after a usage
 * error was printed (exit 2). */
int dsi_cli_parse(const char *cmd, const char *synopsis, const dsi_opt *opts, int argc, char **argv);
/* print "dsinfer CMD: MSG" and the --help hint; returns 2 */
int dsi_cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "1,2,3" -> ints; returns count, or -1 on a malformed list */
int dsi_cli_parse_ids(const char *s, int32_t **out);

#endif
