/* tools: the option parser and the environment's options (see cli.h). */
#include "tools/cli.h"

#include "dsinfer.h"
#include "kernels/cpu.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int dsi_cli_usage_error(const char *cmd, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "dsinfer %s: ", cmd);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, " (see 'dsinfer %s --help')\n", cmd);
  va_end(ap);
  return 2;
}

static void print_help(const char *cmd, const char *synopsis, const dsi_opt *opts) {
  printf("usage: dsinfer %s %s\n\noptions:\n", cmd, synopsis);
  for (const dsi_opt *o = opts; o->name; o++) {
    const char *arg = o->type == OPT_FLAG ? "" : o->type == OPT_STR || o->type == OPT_LIST ? " S"
                      : o->type == OPT_FLOAT ? " X" : " N";
    char left[64];
    snprintf(left, sizeof left, "%s%s%s%s", o->name, o->alias ? ", " : "", o->alias ? o->alias : "", arg);
    printf("  %-24s %s\n", left, o->help);
  }
  printf("  %-24s %s\n", "--help", "show this help");
}

static int set_value(const char *cmd, const dsi_opt *o, const char *v) {
  char *end;
  errno = 0;
  switch (o->type) {
  case OPT_STR: *(const char **)o->dst = v; return 0;
  case OPT_INT: {
    long x = strtol(v, &end, 10);
    if (*v == 0 || *end || errno || x < -2147483647L || x > 2147483647L)
      return dsi_cli_usage_error(cmd, "%s expects an integer, got '%s'", o->name, v);
    *(int *)o->dst = (int)x;
    return 0;
  }
  case OPT_U64: {
    unsigned long long x = strtoull(v, &end, 10);
    if (*v == 0 || *end || errno || *v == '-')
      return dsi_cli_usage_error(cmd, "%s expects a non-negative integer, got '%s'", o->name, v);
    *(uint64_t *)o->dst = x;
    return 0;
  }
  case OPT_FLOAT: {
    float x = strtof(v, &end);
    if (*v == 0 || *end || errno) return dsi_cli_usage_error(cmd, "%s expects a number, got '%s'", o->name, v);
    *(float *)o->dst = x;
    return 0;
  }
  case OPT_LIST: {
    dsi_strlist *l = o->dst;
    l->v = realloc(l->v, (l->n + 1) * sizeof(char *));
    l->v[l->n++] = (char *)v;
    return 0;
  }
  case OPT_FLAG: break;
  }
  return 0;
}

int dsi_cli_parse(const char *cmd, const char *synopsis, const dsi_opt *opts, int argc, char **argv) {
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      print_help(cmd, synopsis, opts);
      return 1;
    }
    const char *eq = strchr(a, '=');
    size_t nlen = eq && a[0] == '-' ? (size_t)(eq - a) : strlen(a);
    const dsi_opt *o = NULL;
    for (const dsi_opt *p = opts; p->name; p++)
      if ((strlen(p->name) == nlen && !strncmp(p->name, a, nlen)) ||
          (p->alias && strlen(p->alias) == nlen && !strncmp(p->alias, a, nlen))) {
        o = p;
        break;
      }
    if (!o) return dsi_cli_usage_error(cmd, a[0] == '-' ? "unknown option '%s'" : "unexpected argument '%s'", a);
    if (o->type == OPT_FLAG) {
      if (eq) return dsi_cli_usage_error(cmd, "%s takes no value", o->name);
      *(int *)o->dst = 1;
      continue;
    }
    const char *v = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
    if (!v) return dsi_cli_usage_error(cmd, "%s needs a value", o->name);
    int rc = set_value(cmd, o, v);
    if (rc) return rc;
  }
  return 0;
}

int dsi_cli_parse_ids(const char *s, int32_t **out) {
  int n = 0, cap = 16;
  int32_t *v = malloc(cap * sizeof(int32_t));
  const char *p = s;
  while (*p) {
    char *end;
    errno = 0;
    long x = strtol(p, &end, 10);
    if (end == p || errno || x < 0 || x > 2147483647L || (*end && *end != ',')) { free(v); return -1; }
    if (n == cap) v = realloc(v, (cap *= 2) * sizeof(int32_t));
    v[n++] = (int32_t)x;
    p = *end ? end + 1 : end;
    if (*end == ',' && !*p) { free(v); return -1; }
  }
  if (n == 0) { free(v); return -1; }
  *out = v;
  return n;
}

/* ---- the environment ---- */
static const char *env(const char *name) {
  const char *v = getenv(name);
  return v && *v ? v : NULL;
}

void dsi_cli_env_opts(dsi_load_opts *lo, dsi_engine_opts *eo) {
  const char *v;
  if (eo && (v = env("DSINFER_ISA"))) {
    if (dsi_isa_parse(v) >= 0) eo->isa = v;
    else fprintf(stderr, "dsinfer: DSINFER_ISA=%s is not one of " DSI_ISA_NAMES "; ignored\n", v);
  }
  if (eo && (v = env("DSINFER_MLA"))) {
    if (!strcmp(v, "absorb")) eo->mla_form = DSI_MLA_ABSORB;
    else if (!strcmp(v, "naive")) eo->mla_form = DSI_MLA_NAIVE;
    else if (strcmp(v, "auto")) fprintf(stderr, "dsinfer: DSINFER_MLA=%s is not absorb, naive or auto; using auto\n", v);
  }
  if (eo && (v = env("DSINFER_STREAM_TEAM_MIN"))) {
    char *end;
    long n = strtol(v, &end, 10);
    if (*end || n < 1 || n > 1024) fprintf(stderr, "dsinfer: DSINFER_STREAM_TEAM_MIN=%s is not a count of workers; ignored\n", v);
    else eo->stream_team_min = (int)n;
  }
  if (env("DSINFER_NO_HUGEPAGE")) {
    if (lo) lo->no_hugepage = 1;
    if (eo) eo->no_hugepage = 1;
  }
}

int dsi_cli_tok_flags(void) {
  const char *v = env("DSINFER_NO_JIT");
  return v && strcmp(v, "0") ? DSI_TOK_NO_JIT : 0;
}
