/* tools: the option parser and the environment's options (see cli.h). */
#include "tools/cli.h"

#include "base/base.h"
#include "dsinfer.h"
#include "kernels/cpu.h"

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* ---- numbers ---- */
/* s without the blanks around it, into buf; NULL when it does not fit */
static const char *trimmed(const char *s, char *buf, size_t cap) {
  while (isspace((unsigned char)*s)) s++;
  size_t n = strlen(s);
  while (n && isspace((unsigned char)s[n - 1])) n--;
  if (n >= cap) return NULL;
  memcpy(buf, s, n);
  buf[n] = 0;
  return buf;
}

int dsi_cli_int(const char *cmd, const char *flag, const char *s, long long lo, long long hi, long long *out) {
  char buf[64], *end;
  const char *t = trimmed(s, buf, sizeof buf);
  errno = 0;
  long long x = t && *t && *t != '+' ? strtoll(t, &end, 10) : 0;
  if (!t || !*t || *t == '+' || *end || isspace((unsigned char)*t))
    return dsi_cli_usage_error(cmd, "%s expects an integer in [%lld, %lld], got '%s'", flag, lo, hi, s);
  if (errno == ERANGE || x < lo || x > hi)
    return dsi_cli_usage_error(cmd, "%s %s is out of range: it must be in [%lld, %lld]", flag, t, lo, hi);
  *out = x;
  return 0;
}

int dsi_cli_float(const char *cmd, const char *flag, const char *s, double lo, double hi, double *out) {
  char buf[64], *end;
  const char *t = trimmed(s, buf, sizeof buf);
  errno = 0;
  double x = t && *t ? strtod(t, &end) : 0;
  if (!t || !*t || *end)
    return dsi_cli_usage_error(cmd, "%s expects a number in [%g, %g], got '%s'", flag, lo, hi, s);
  if (isnan(x)) return dsi_cli_usage_error(cmd, "%s %s is not a number: it must be in [%g, %g]", flag, t, lo, hi);
  if (!isfinite(x) || errno == ERANGE || x < lo || x > hi)
    return dsi_cli_usage_error(cmd, "%s %s is out of range: it must be in [%g, %g]", flag, t, lo, hi);
  *out = x;
  return 0;
}

int dsi_cli_u64(const char *cmd, const char *flag, const char *s, uint64_t *out) {
  char buf[64], *end;
  const char *t = trimmed(s, buf, sizeof buf);
  errno = 0;
  unsigned long long x = t && isdigit((unsigned char)*t) ? strtoull(t, &end, 10) : 0;
  if (!t || !isdigit((unsigned char)*t) || *end)
    return dsi_cli_usage_error(cmd, "%s expects an integer in [0, %llu], got '%s'", flag, (unsigned long long)UINT64_MAX, s);
  if (errno == ERANGE)
    return dsi_cli_usage_error(cmd, "%s %s is out of range: it must be in [0, %llu]", flag, t, (unsigned long long)UINT64_MAX);
  *out = x;
  return 0;
}

int dsi_cli_max_threads(void) { return 8 * dsi_default_threads(); }

FILE *dsi_cli_open_input(const char *cmd, const char *path) {
  if (!strcmp(path, "-")) return stdin;
  dsi_err err = {0};
  int fd = dsi_open_regular(path, NULL, &err);
  FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
  if (fd >= 0 && !f) {
    snprintf(err.msg, sizeof err.msg, "%s: %s", path, strerror(errno));
    close(fd);
  }
  if (!f) fprintf(stderr, "dsinfer %s: %s\n", cmd, err.msg);
  return f;
}

int dsi_cli_finish_output(const char *cmd) {
  errno = 0;
  int bad = fflush(stdout) != 0 || ferror(stdout);
  if (!bad) return 0;
  fprintf(stderr, "dsinfer %s: writing the output: %s\n", cmd, errno ? strerror(errno) : "write error");
  return 1;
}

static int set_value(const char *cmd, const dsi_opt *o, const char *v) {
  int ranged = o->lo != 0 || o->hi != 0;
  switch (o->type) {
  case OPT_STR: *(const char **)o->dst = v; return 0;
  case OPT_INT: {
    long long x;
    int rc = dsi_cli_int(cmd, o->name, v, ranged ? (long long)o->lo : 0, ranged ? (long long)o->hi : INT_MAX, &x);
    if (!rc) *(int *)o->dst = (int)x;
    return rc;
  }
  case OPT_U64: return dsi_cli_u64(cmd, o->name, v, (uint64_t *)o->dst);
  case OPT_FLOAT: {
    double x;
    int rc = dsi_cli_float(cmd, o->name, v, ranged ? o->lo : 0, ranged ? o->hi : FLT_MAX, &x);
    if (!rc) *(float *)o->dst = (float)x;
    return rc;
  }
  case OPT_LIST: {
    dsi_strlist *l = o->dst;
    char **nv = realloc(l->v, (l->n + 1) * sizeof(char *));
    if (!nv) return dsi_cli_usage_error(cmd, "%s: out of memory for %d values", o->name, l->n + 1);
    l->v = nv;
    l->v[l->n++] = (char *)v;
    return 0;
  }
  case OPT_FLAG: break;
  }
  return 0;
}

/* text options that may be empty (a prompt may be nothing) */
static int may_be_empty(const dsi_opt *o) {
  static const char *const text[] = {"--prompt", "--system", "--text"};
  for (size_t i = 0; i < sizeof text / sizeof *text; i++)
    if (!strcmp(o->name, text[i])) return 1;
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
    if (!*v && o->type != OPT_STR) return dsi_cli_usage_error(cmd, "%s needs a value, got an empty string", o->name);
    if (!*v && !may_be_empty(o)) /* a file, folder or name: "" would become "/config.json" */
      return dsi_cli_usage_error(cmd, "%s needs a value, got an empty string", o->name);
    int rc = set_value(cmd, o, v);
    if (rc) return rc;
  }
  return 0;
}

int dsi_cli_parse_ids(const char *cmd, const char *flag, const char *s, int32_t **out) {
  int n = 0, cap = 0;
  int32_t *v = NULL;
  const char *p = s;
  for (;;) {
    const char *comma = strchr(p, ',');
    size_t len = comma ? (size_t)(comma - p) : strlen(p);
    char item[64];
    long long x;
    snprintf(item, sizeof item, "%.*s", (int)(len < sizeof item ? len : sizeof item - 1), p);
    if (len >= sizeof item || dsi_cli_int(cmd, flag, item, 0, INT32_MAX, &x)) {
      if (len >= sizeof item) dsi_cli_usage_error(cmd, "%s: item %d is not an id", flag, n + 1);
      free(v);
      return -1;
    }
    if (n == cap) {
      int32_t *nv = realloc(v, (size_t)(cap = cap ? 2 * cap : 16) * sizeof *v);
      if (!nv) {
        free(v);
        fprintf(stderr, "dsinfer %s: out of memory\n", cmd);
        return -1;
      }
      v = nv;
    }
    v[n++] = (int32_t)x;
    if (!comma) break;
    p = comma + 1;
  }
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
  if (eo && (v = env("DSINFER_BF16_DOT"))) {
    if (!strcmp(v, "on")) eo->bf16_dot = DSI_BF16_DOT_ON;
    else if (!strcmp(v, "off")) eo->bf16_dot = DSI_BF16_DOT_OFF;
    else fprintf(stderr, "dsinfer: DSINFER_BF16_DOT=%s is not on or off; ignored\n", v);
  }
  if (eo && (v = env("DSINFER_MLA"))) {
    if (!strcmp(v, "absorb")) eo->mla_form = DSI_MLA_ABSORB;
    else if (!strcmp(v, "naive")) eo->mla_form = DSI_MLA_NAIVE;
    else if (strcmp(v, "auto")) fprintf(stderr, "dsinfer: DSINFER_MLA=%s is not absorb, naive or auto; using auto\n", v);
  }
  if (eo && (v = env("DSINFER_STREAM_TEAM_MIN"))) {
    char *end;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (*end || errno || n < 1 || n > 1024) fprintf(stderr, "dsinfer: DSINFER_STREAM_TEAM_MIN=%s is not a count of workers; ignored\n", v);
    else eo->stream_team_min = (int)n;
  }
  if (lo && (v = env("DSINFER_MEM_AVAILABLE_MB"))) {
    char *end;
    errno = 0;
    long long n = strtoll(v, &end, 10);
    if (*end || errno || n < 1 || n > (1ll << 40)) fprintf(stderr, "dsinfer: DSINFER_MEM_AVAILABLE_MB=%s is not a count of MB; ignored\n", v);
    else lo->mem_available = (size_t)n << 20;
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
