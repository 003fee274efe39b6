/* tools: `dsinfer tokenize`, `dsinfer detokenize` and `dsinfer bench
 * tokenizer` — text <-> ids with a checkpoint's tokenizer.json, JSON Lines
 * in and out for tests, and encode speed beside the reference encoder's. */
#define _GNU_SOURCE /* getline, popen */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dsinfer.h"
#include "tools/cli.h"
#include "tools/commands.h"
#include "base/base.h"
#include "base/sbuf.h"

/* ---- shared: opening the tokenizer ---- */

typedef struct tok_src {
  const char *tokenizer, *model, *config;
} tok_src;

static int file_exists(const char *p) { return access(p, R_OK) == 0; }

static void dir_of(const char *path, char *out, size_t cap) {
  const char *slash = strrchr(path, '/');
  size_t k = slash ? (size_t)(slash - path) + 1 : 0;
  if (k >= cap) k = cap - 1;
  memcpy(out, path, k);
  out[k] = 0;
  if (!k) snprintf(out, cap, "./");
}

/* The options naming the tokenizer, shared by the three commands. */
#define TOK_SRC_OPTS(src)                                                                                          \
  {"--tokenizer", NULL, OPT_STR, &(src).tokenizer, "tokenizer.json (tokenizer_config.json beside it is read too)"}, \
      {"--model", NULL, OPT_STR, &(src).model, "checkpoint directory holding tokenizer.json"},                     \
      {"--config", NULL, OPT_STR, &(src).config, "tokenizer_config.json, when not beside tokenizer.json"}

/* Returns 0 and *tok, or the exit code (1 failure, 2 usage). */
static int open_tok(const char *cmd, const tok_src *src, dsi_tok **tok) {
  if (!src->tokenizer == !src->model)
    return dsi_cli_usage_error(cmd, "give one of --tokenizer FILE or --model DIR");
  char json[4200], cfg[4200], dir[4096];
  if (src->model) {
    snprintf(dir, sizeof dir, "%s/", src->model);
    snprintf(json, sizeof json, "%stokenizer.json", dir);
  } else {
    snprintf(json, sizeof json, "%s", src->tokenizer);
    dir_of(json, dir, sizeof dir);
  }
  const char *cfg_path = src->config;
  if (!cfg_path) { /* tokenizer_config.json beside it, when there is one */
    snprintf(cfg, sizeof cfg, "%stokenizer_config.json", dir);
    cfg_path = file_exists(cfg) ? cfg : NULL;
  }
  dsi_err err = {0};
  if (dsi_tok_open(tok, json, cfg_path, dsi_cli_tok_flags(), &err)) {
    fprintf(stderr, "dsinfer %s: %s\n", cmd, err.msg);
    return 1;
  }
  return 0;
}

/* ---- JSON: one string or one array of ids per line ---- */

static void sb_utf8(sbuf *b, unsigned cp) {
  char o[4];
  size_t k;
  if (cp < 0x80) o[0] = (char)cp, k = 1;
  else if (cp < 0x800) o[0] = (char)(0xC0 | cp >> 6), o[1] = (char)(0x80 | (cp & 63)), k = 2;
  else if (cp < 0x10000)
    o[0] = (char)(0xE0 | cp >> 12), o[1] = (char)(0x80 | ((cp >> 6) & 63)), o[2] = (char)(0x80 | (cp & 63)), k = 3;
  else
    o[0] = (char)(0xF0 | cp >> 18), o[1] = (char)(0x80 | ((cp >> 12) & 63)), o[2] = (char)(0x80 | ((cp >> 6) & 63)),
    o[3] = (char)(0x80 | (cp & 63)), k = 4;
  sb_put(b, o, k);
}

static int hex4(const char *s, unsigned *v) {
  *v = 0;
  for (int i = 0; i < 4; i++) {
    char c = s[i];
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (d < 0) return -1;
    *v = *v << 4 | (unsigned)d;
  }
  return 0;
}

/* The JSON string that is the whole line (NUL and any byte kept); a lone
 * surrogate escape becomes U+FFFD, as JavaScript's TextEncoder makes it. */
static int json_string(const char *s, size_t n, sbuf *out) {
  size_t i = 0;
  out->n = 0;
  sb_put(out, "", 0);
  while (i < n && (s[i] == ' ' || s[i] == '\t')) i++;
  if (i >= n || s[i++] != '"') return -1;
  for (;;) {
    if (i >= n) return -1;
    char c = s[i++];
    if (c == '"') break;
    if (c != '\\') {
      sb_put(out, &c, 1);
      continue;
    }
    if (i >= n) return -1;
    char e = s[i++];
    const char *simple = strchr("\"\\/bfnrt", e);
    if (simple && e) {
      static const char map[] = "\"\\/\b\f\n\r\t";
      sb_put(out, &map[simple - "\"\\/bfnrt"], 1);
      continue;
    }
    unsigned u, lo;
    if (e != 'u' || i + 4 > n || hex4(s + i, &u)) return -1;
    i += 4;
    if (u >= 0xD800 && u < 0xDC00 && i + 6 <= n && s[i] == '\\' && s[i + 1] == 'u' && !hex4(s + i + 2, &lo) &&
        lo >= 0xDC00 && lo < 0xE000) {
      u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
      i += 6;
    } else if (u >= 0xD800 && u < 0xE000) {
      u = 0xFFFD;
    }
    sb_utf8(out, u);
  }
  while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r' || s[i] == '\n')) i++;
  return out->oom ? DSI_E_NOMEM : i == n ? 0 : -1;
}

/* one JSON array of ids: 0, -1 not one, DSI_E_NOMEM */
static int json_ids(const char *s, int32_t **ids, size_t *n, size_t *cap) {
  const char *p = s;
  *n = 0;
  while (*p == ' ' || *p == '\t') p++;
  if (*p++ != '[') return -1;
  for (;;) {
    while (*p == ' ' || *p == '\t') p++;
    if (*p == ']' && *n == 0) {
      p++;
      break;
    }
    char *end;
    errno = 0;
    long v = strtol(p, &end, 10);
    if (end == p || errno || v < INT32_MIN || v > INT32_MAX) return -1;
    if (*n == *cap) {
      *cap = *cap ? *cap * 2 : 64;
      int32_t *q = realloc(*ids, *cap * sizeof *q);
      if (!q) return DSI_E_NOMEM;
      *ids = q;
    }
    (*ids)[(*n)++] = (int32_t)v;
    p = end;
    while (*p == ' ' || *p == '\t') p++;
    if (*p == ',') {
      p++;
      continue;
    }
    if (*p++ != ']') return -1;
    break;
  }
  while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n') p++;
  return *p ? -1 : 0;
}

/* a text file to encode or a corpus: a regular file of at most 1 GiB */
#define TEXT_FILE_MAX ((size_t)1 << 30)
static int read_all(const char *path, char **out, size_t *len, dsi_err *err) {
  return dsi_read_file_max(path, TEXT_FILE_MAX, out, len, err);
}

static void print_ids(FILE *f, const int32_t *ids, size_t n, int json) {
  if (json) fputc('[', f);
  for (size_t i = 0; i < n; i++) fprintf(f, i ? (json ? ",%d" : " %d") : "%d", ids[i]);
  fputs(json ? "]\n" : "\n", f);
}

/* ---- tokenize ---- */

int dsi_cmd_tokenize(int argc, char **argv) {
  const char *cmd = "tokenize";
  tok_src src = {0};
  const char *text = NULL, *file = NULL, *jsonl = NULL;
  int bos = 0, special = 0, json = 0, replace = 0, as_text = 0, verbose = 0;
  const dsi_opt opts[] = {
      TOK_SRC_OPTS(src),
      {"--text", NULL, OPT_STR, &text, "the text to encode"},
      {"--file", NULL, OPT_STR, &file, "encode this file's bytes"},
      {"--jsonl", NULL, OPT_STR, &jsonl, "one JSON string per line in; one JSON array of ids per line out"},
      {"--bos", NULL, OPT_FLAG, &bos, "prepend the BOS token"},
      {"--add-special", NULL, OPT_FLAG, &special, "add what tokenizer_config.json adds (add_bos_token, ...)"},
      {"--json", NULL, OPT_FLAG, &json, "print a JSON array (default: ids separated by spaces)"},
      {"--replace-invalid", NULL, OPT_FLAG, &replace, "invalid UTF-8 becomes U+FFFD (default: an error)"},
      {"--special-as-text", NULL, OPT_FLAG, &as_text, "special tokens' text is encoded as plain text"},
      {"--verbose", "-v", OPT_FLAG, &verbose, "describe the tokenizer on stderr"},
      {0}};
  int rc = dsi_cli_parse(cmd, "(--tokenizer FILE | --model DIR) (--text S | --file F | --jsonl F) [options]", opts,
                         argc, argv);
  if (rc) return rc == 1 ? 0 : rc;
  if (!!text + !!file + !!jsonl != 1) return dsi_cli_usage_error(cmd, "give one of --text, --file, --jsonl");
  dsi_tok *tok;
  if ((rc = open_tok(cmd, &src, &tok))) return rc;
  if (verbose) fprintf(stderr, "dsinfer %s: vocab %d, bos %d, eos %d\n", cmd, dsi_tok_vocab_size(tok),
                       dsi_tok_bos_id(tok), dsi_tok_eos_id(tok));
  int flags = (bos ? DSI_TOK_ADD_BOS : 0) | (special ? DSI_TOK_ADD_SPECIAL : 0) |
              (replace ? DSI_TOK_REPLACE_INVALID : 0) | (as_text ? DSI_TOK_SPECIAL_AS_TEXT : 0);
  dsi_err err = {0};
  int32_t *ids = NULL;
  size_t n = 0;
  rc = 0;
  if (jsonl) {
    FILE *f = dsi_cli_open_input(cmd, jsonl);
    if (!f) {
      dsi_tok_free(tok);
      return 1;
    }
    char *line = NULL;
    size_t lcap = 0, lineno = 0;
    ssize_t got;
    sbuf s = {0};
    while ((got = getline(&line, &lcap, f)) >= 0) {
      lineno++;
      int js = json_string(line, (size_t)got, &s);
      if (js) {
        fprintf(stderr, "dsinfer %s: %s:%zu: %s\n", cmd, jsonl, lineno,
                js == DSI_E_NOMEM ? "out of memory" : "not one JSON string");
        rc = 1;
        break;
      }
      if (dsi_tok_encode(tok, s.p, s.n, flags, &ids, &n, &err)) {
        fprintf(stderr, "dsinfer %s: %s:%zu: %s\n", cmd, jsonl, lineno, err.msg);
        rc = 1;
        break;
      }
      print_ids(stdout, ids, n, 1);
      free(ids);
      ids = NULL;
    }
    if (!rc && ferror(f)) {
      fprintf(stderr, "dsinfer %s: %s: read error: %s\n", cmd, jsonl, strerror(errno));
      rc = 1;
    }
    free(line);
    free(s.p);
    if (f != stdin) fclose(f);
  } else {
    char *buf = NULL;
    size_t len = 0;
    if (file && read_all(file, &buf, &len, &err)) {
      fprintf(stderr, "dsinfer %s: %s\n", cmd, err.msg);
      dsi_tok_free(tok);
      return 1;
    }
    if (dsi_tok_encode(tok, file ? buf : text, file ? len : strlen(text), flags, &ids, &n, &err)) {
      fprintf(stderr, "dsinfer %s: %s\n", cmd, err.msg);
      rc = 1;
    } else {
      print_ids(stdout, ids, n, json);
    }
    free(buf);
    free(ids);
  }
  dsi_tok_free(tok);
  if (dsi_cli_finish_output(cmd)) rc = 1;
  return rc;
}

/* ---- detokenize ---- */

/* Decode ids whole, or through the streaming detokenizer (to check it). */
static int decode_ids(const dsi_tok *tok, const int32_t *ids, size_t n, int flags, int stream, sbuf *out,
                      FILE *live, dsi_err *err) {
  out->n = 0;
  sb_put(out, "", 0);
  if (!stream) {
    char *text;
    size_t len;
    int rc = dsi_tok_decode(tok, ids, n, flags, &text, &len, err);
    if (rc) return rc;
    sb_put(out, text, len);
    free(text);
    return out->oom ? dsi_errf(err, DSI_E_NOMEM, "out of memory for the text") : 0;
  }
  dsi_detok *d;
  int rc = dsi_detok_open(&d, tok, flags, err);
  if (rc) return rc;
  const char *piece;
  size_t len;
  for (size_t i = 0; i < n && !rc; i++) {
    rc = dsi_detok_push(d, ids[i], &piece, &len, err);
    if (rc) break;
    sb_put(out, piece, len);
    if (live && len) {
      fwrite(piece, 1, len, live);
      fflush(live);
    }
  }
  if (!rc && (rc = dsi_detok_flush(d, &piece, &len))) dsi_errf(err, rc, "out of memory");
  if (!rc) {
    sb_put(out, piece, len);
    if (live && len) fwrite(piece, 1, len, live);
  }
  dsi_detok_free(d);
  return !rc && out->oom ? dsi_errf(err, DSI_E_NOMEM, "out of memory for the text") : rc;
}

int dsi_cmd_detokenize(int argc, char **argv) {
  const char *cmd = "detokenize";
  tok_src src = {0};
  const char *ids_arg = NULL, *jsonl = NULL;
  int skip_special = 0, skip_unknown = 0, stream = 0, json = 0;
  const dsi_opt opts[] = {
      TOK_SRC_OPTS(src),
      {"--ids", NULL, OPT_STR, &ids_arg, "ids to decode: 1,2,3"},
      {"--jsonl", NULL, OPT_STR, &jsonl, "one JSON array of ids per line in; one JSON string per line out"},
      {"--skip-special", NULL, OPT_FLAG, &skip_special, "leave special tokens out"},
      {"--skip-unknown", NULL, OPT_FLAG, &skip_unknown, "skip ids with no token (default: an error)"},
      {"--stream", NULL, OPT_FLAG, &stream, "decode through the incremental detokenizer, piece by piece"},
      {"--json", NULL, OPT_FLAG, &json, "print the text as a JSON string (default: as is, then a newline)"},
      {0}};
  int rc = dsi_cli_parse(cmd, "(--tokenizer FILE | --model DIR) (--ids 1,2,3 | --jsonl F) [options]", opts, argc,
                         argv);
  if (rc) return rc == 1 ? 0 : rc;
  if (!ids_arg == !jsonl) return dsi_cli_usage_error(cmd, "give one of --ids, --jsonl");
  int32_t *ids = NULL;
  int n_arg = 0;
  if (ids_arg && (n_arg = dsi_cli_parse_ids(cmd, "--ids", ids_arg, &ids)) < 0) return 2;
  dsi_tok *tok;
  if ((rc = open_tok(cmd, &src, &tok))) {
    free(ids);
    return rc;
  }
  int flags = (skip_special ? DSI_TOK_SKIP_SPECIAL : 0) | (skip_unknown ? DSI_TOK_SKIP_UNKNOWN : 0);
  dsi_err err = {0};
  sbuf text = {0};
  if (ids_arg) {
    FILE *live = stream && !json ? stdout : NULL;
    if (decode_ids(tok, ids, (size_t)n_arg, flags, stream, &text, live, &err)) {
      fprintf(stderr, "dsinfer %s: %s\n", cmd, err.msg);
      rc = 1;
    } else {
      if (json) dsi_json_put_str(stdout, text.p, text.n);
      else if (!live) fwrite(text.p, 1, text.n, stdout);
      fputc('\n', stdout);
    }
  } else {
    FILE *f = dsi_cli_open_input(cmd, jsonl);
    if (!f) {
      rc = 1;
    } else {
      char *line = NULL;
      size_t lcap = 0, lineno = 0, cap = 0, n = 0;
      while (getline(&line, &lcap, f) >= 0) {
        lineno++;
        int ji = json_ids(line, &ids, &n, &cap);
        if (ji) {
          fprintf(stderr, "dsinfer %s: %s:%zu: %s\n", cmd, jsonl, lineno,
                  ji == DSI_E_NOMEM ? "out of memory" : "not one JSON array of integers");
          rc = 1;
          break;
        }
        if (decode_ids(tok, ids, n, flags, stream, &text, NULL, &err)) {
          fprintf(stderr, "dsinfer %s: %s:%zu: %s\n", cmd, jsonl, lineno, err.msg);
          rc = 1;
          break;
        }
        dsi_json_put_str(stdout, text.p, text.n);
        fputc('\n', stdout);
      }
      if (!rc && ferror(f)) {
        fprintf(stderr, "dsinfer %s: %s: read error: %s\n", cmd, jsonl, strerror(errno));
        rc = 1;
      }
      free(line);
      if (f != stdin) fclose(f);
    }
  }
  free(ids);
  free(text.p);
  dsi_tok_free(tok);
  if (dsi_cli_finish_output(cmd)) rc = 1;
  return rc;
}

/* ---- bench tokenizer ---- */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* tests/tokenizer/<name>, looked for from here and from the binary's folder. */
static int find_test_file(const char *name, char *out, size_t cap) {
  char exe[4096] = "";
  ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (k > 0) exe[k] = 0;
  char *slash = strrchr(exe, '/');
  if (slash) *slash = 0;
  const char *bases[] = {".", "tests", "..", "../tests", NULL, NULL, NULL};
  char b1[4200], b2[4200], b3[4200];
  snprintf(b1, sizeof b1, "%s/..", exe);
  snprintf(b2, sizeof b2, "%s/../..", exe);
  snprintf(b3, sizeof b3, "%s", exe);
  bases[4] = b1, bases[5] = b2, bases[6] = b3;
  for (size_t i = 0; i < sizeof bases / sizeof *bases; i++) {
    const char *sub = strncmp(bases[i], "tests", 5) && strcmp(bases[i], "../tests") ? "tests/tokenizer" : "tokenizer";
    snprintf(out, cap, "%s/%s/%s", bases[i], sub, name);
    if (file_exists(out)) return 0;
  }
  return -1;
}

typedef struct corpus {
  char **doc;
  size_t *len;
  size_t n, bytes;
} corpus;

static void corpus_free(corpus *c) {
  for (size_t d = 0; d < c->n; d++) free(c->doc[d]);
  free(c->doc);
  free(c->len);
  memset(c, 0, sizeof *c);
}

/* a copy of s[0..n) as the next document; -1 out of memory */
static int corpus_add(corpus *c, const char *s, size_t n) {
  char **d = realloc(c->doc, (c->n + 1) * sizeof *c->doc);
  if (d) c->doc = d;
  size_t *l = d ? realloc(c->len, (c->n + 1) * sizeof *c->len) : NULL;
  if (l) c->len = l;
  if (!l || !(c->doc[c->n] = malloc(n + 1))) return -1;
  memcpy(c->doc[c->n], s, n);
  c->doc[c->n][n] = 0;
  c->len[c->n++] = n;
  c->bytes += n;
  return 0;
}

/* Texts from a JSONL corpus (or one text file), joined by newlines into
 * documents of about 64 KB and repeated up to `target` bytes. */
static int build_corpus(const char *path, size_t target, corpus *c, dsi_err *err) {
  char *all;
  size_t len;
  if (read_all(path, &all, &len, err)) return -1;
  sbuf s = {0}, doc = {0};
  char **texts = NULL;
  size_t *tlen = NULL, nt = 0;
  size_t i = 0;
  int oom = 0;
  while (i < len && (all[i] == ' ' || all[i] == '\n')) i++;
  int is_jsonl = i < len && all[i] == '"';
  if (is_jsonl) {
    for (size_t a = 0; a < len;) {
      size_t b = a;
      while (b < len && all[b] != '\n') b++;
      int js = b > a ? json_string(all + a, b - a, &s) : -1;
      if (js == DSI_E_NOMEM) {
        oom = 1;
        break;
      }
      if (!js) {
        char **t = realloc(texts, (nt + 1) * sizeof *texts);
        if (t) texts = t;
        size_t *tl = t ? realloc(tlen, (nt + 1) * sizeof *tlen) : NULL;
        if (tl) tlen = tl;
        if (!tl || !(texts[nt] = malloc(s.n + 1))) {
          oom = 1;
          break;
        }
        memcpy(texts[nt], s.p, s.n);
        tlen[nt++] = s.n;
      }
      a = b + 1;
    }
  } else {
    texts = malloc(sizeof *texts);
    tlen = malloc(sizeof *tlen);
    if (texts && tlen) texts[0] = all, tlen[0] = len, nt = 1, all = NULL;
    else oom = 1;
  }
  free(all);
  free(s.p);
  if (!nt || oom) {
    for (size_t k = 0; k < nt; k++) free(texts[k]);
    free(texts), free(tlen);
    return oom ? dsi_errf(err, DSI_E_NOMEM, "%s: out of memory for the corpus", path) : -1;
  }
  size_t total = 0;
  for (size_t rep = 0; total < target; rep++) {
    for (size_t k = 0; k < nt && total < target; k++) {
      if (doc.n) sb_put(&doc, "\n", 1);
      sb_put(&doc, texts[k], tlen[k]);
      if (doc.n >= (1 << 16)) {
        oom |= doc.oom || corpus_add(c, doc.p, doc.n);
        total += doc.n;
        doc.n = 0;
      }
    }
    if (rep > 100000 || oom) break;
  }
  if (doc.n && !oom) oom |= doc.oom || corpus_add(c, doc.p, doc.n);
  for (size_t k = 0; k < nt; k++) free(texts[k]);
  free(texts);
  free(tlen);
  free(doc.p);
  if (oom) {
    corpus_free(c);
    return dsi_errf(err, DSI_E_NOMEM, "%s: out of memory for a corpus of %zu bytes", path, target);
  }
  return 0;
}

int dsi_cmd_bench_tokenizer(int argc, char **argv) {
  const char *cmd = "bench tokenizer";
  tok_src src = {0};
  const char *corpus_path = NULL, *ref_script = NULL;
  int reps = 5, ref_reps = 3, mb = 4, no_ref = 0;
  const dsi_opt opts[] = {
      TOK_SRC_OPTS(src),
      {"--corpus", NULL, OPT_STR, &corpus_path, "JSONL of strings or a text file (default: tests/tokenizer/corpus.jsonl)"},
      {"--mb", NULL, OPT_INT, &mb, "corpus size in MB, the texts repeated up to it (default 4)", 1, 4096},
      {"--reps", NULL, OPT_INT, &reps, "repetitions of ours; the median is shown (default 5)", 1, 1000},
      {"--ref-reps", NULL, OPT_INT, &ref_reps, "repetitions of the reference encoder (default 3)", 0, 1000},
      {"--reference", NULL, OPT_STR, &ref_script, "the reference's bench script (default: tests/tokenizer/bench_reference.js)"},
      {"--no-reference", NULL, OPT_FLAG, &no_ref, "do not run the reference encoder"},
      {0}};
  int rc = dsi_cli_parse(cmd, "(--tokenizer FILE | --model DIR) [--corpus F] [options]", opts, argc, argv);
  if (rc) return rc == 1 ? 0 : rc;
  if (reps < 1 || reps > 1000 || ref_reps < 1 || ref_reps > 100 || mb < 1 || mb > 1024)
    return dsi_cli_usage_error(cmd, "--reps 1..1000, --ref-reps 1..100 and --mb 1..1024");
  char found[4096];
  if (!corpus_path) {
    if (find_test_file("corpus.jsonl", found, sizeof found))
      return dsi_cli_usage_error(cmd, "no corpus: tests/tokenizer/corpus.jsonl not found; give --corpus F");
    corpus_path = found;
  }
  double t0 = now_s();
  dsi_tok *tok;
  if ((rc = open_tok(cmd, &src, &tok))) return rc;
  double t_load = now_s() - t0;
  corpus c = {0};
  dsi_err cerr = {0};
  if (build_corpus(corpus_path, (size_t)mb << 20, &c, &cerr)) {
    fprintf(stderr, "dsinfer %s: %s\n", cmd, cerr.msg[0] ? cerr.msg : "cannot read a corpus from it");
    dsi_tok_free(tok);
    return 1;
  }
  printf("tokenizer: vocab %d, loaded in %.2f s\n", dsi_tok_vocab_size(tok), t_load);
  printf("corpus:    %.2f MB in %zu documents, from %s\n", (double)c.bytes / 1e6, c.n, corpus_path);
  double *mbps = calloc((size_t)reps, sizeof *mbps);
  if (!mbps) {
    fprintf(stderr, "dsinfer %s: out of memory\n", cmd);
    corpus_free(&c);
    dsi_tok_free(tok);
    return 1;
  }
  size_t n_tokens = 0;
  dsi_err err = {0};
  for (int r = 0; r < reps && !rc; r++) {
    size_t nt = 0;
    double t = now_s();
    for (size_t d = 0; d < c.n; d++) {
      int32_t *ids;
      size_t n;
      if (dsi_tok_encode(tok, c.doc[d], c.len[d], 0, &ids, &n, &err)) {
        fprintf(stderr, "dsinfer %s: document %zu: %s\n", cmd, d, err.msg);
        rc = 1;
        break;
      }
      nt += n;
      free(ids);
    }
    mbps[r] = (double)c.bytes / 1e6 / (now_s() - t);
    n_tokens = nt;
  }
  if (rc) goto done;
  qsort(mbps, (size_t)reps, sizeof *mbps, cmp_double);
  double ours = mbps[reps / 2];
  printf("dsinfer:   %7.2f MB/s  (median of %d, single thread; %zu tokens, %.2f bytes/token)\n", ours, reps,
         n_tokens, (double)c.bytes / (double)n_tokens);
  /* the reference: the JavaScript port under node, on the same documents */
  char script[4096];
  if (!no_ref && !ref_script && !find_test_file("bench_reference.js", script, sizeof script)) ref_script = script;
  if (no_ref || !ref_script || system("node --version >/dev/null 2>&1") != 0) {
    printf("reference: not available%s\n", no_ref ? " (--no-reference)" : !ref_script ? " (bench_reference.js not found)"
                                                                        : " (node not found)");
    goto done;
  }
  char docs[] = "/tmp/dsinfer-bench-XXXXXX";
  int fd = mkstemp(docs);
  FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
  if (!f) {
    printf("reference: not available (temporary file: %s)\n", strerror(errno));
    goto done;
  }
  for (size_t d = 0; d < c.n; d++) {
    dsi_json_put_str(f, c.doc[d], c.len[d]);
    fputc('\n', f);
  }
  fclose(f);
  char line[1024], command[9000];
  snprintf(command, sizeof command, "node '%s' '%s' %d 2>&1", ref_script, docs, ref_reps);
  FILE *p = popen(command, "r");
  double ref = 0;
  size_t ref_tokens = 0;
  char last[1024] = "";
  while (p && fgets(line, sizeof line, p)) {
    if (sscanf(line, "MBPS %lf TOKENS %zu", &ref, &ref_tokens) != 2) snprintf(last, sizeof last, "%s", line);
  }
  int st = p ? pclose(p) : -1;
  unlink(docs);
  if (st != 0 || ref <= 0) {
    last[strcspn(last, "\n")] = 0;
    printf("reference: not available (%s)\n", last[0] ? last : "node failed");
    goto done;
  }
  printf("reference: %7.2f MB/s  (median of %d; %zu tokens: %s)\n", ref, ref_reps, ref_tokens,
         ref_tokens == n_tokens ? "same count" : "COUNT DIFFERS");
  printf("speedup:   %7.1fx\n", ours / ref);
done:
  free(mbps);
  corpus_free(&c);
  dsi_tok_free(tok);
  return rc;
}
