/* tools: the commands that run the model on token ids — logits (every
 * position's logits to a file) and generate (sample ids, report speed) —
 * and mkmodel (write a random-weight checkpoint). */
#include <cJSON.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/base.h"
#include "dsinfer.h"
#include "dist/dist.h"
#include "tools/cli.h"
#include "tools/commands.h"
#include "tools/internal.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int fail(const char *cmd, const dsi_err *err) {
  fprintf(stderr, "dsinfer %s: %s\n", cmd, err->msg);
  return 1;
}

int dsi_cli_check_run_opts(const char *cmd, run_opts *r, int *act) {
  if (r->threads < 0) return dsi_cli_usage_error(cmd, "--threads must be >= 0");
  int rc = dsi_cli_check_par(cmd, &r->par);
  if (rc) return rc;
  if (r->op_opt && strcmp(r->op_opt, "on") && strcmp(r->op_opt, "off"))
    return dsi_cli_usage_error(cmd, "--op-opt must be on or off, got '%s'", r->op_opt);
  r->op_opt_off = r->op_opt && !strcmp(r->op_opt, "off");
  if ((rc = dsi_cli_check_quant(cmd, r->quant, r->quant_head, &r->quant_mode, &r->quant_head_mode))) return rc;
  r->kv_mode = dsi_cli_kv_dtype(r->kv_dtype);
  if (r->kv_mode < 0) return dsi_cli_usage_error(cmd, "--kv-dtype must be auto, bf16 or f32, got '%s'", r->kv_dtype);
  r->exec_mode = DSI_EXEC_GRAPH;
  if (r->exec && !strcmp(r->exec, "eager")) r->exec_mode = DSI_EXEC_EAGER;
  else if (r->exec && strcmp(r->exec, "graph")) return dsi_cli_usage_error(cmd, "--exec must be graph or eager, got '%s'", r->exec);
  if (r->streams != 0 && r->streams != 1 && r->streams != 2)
    return dsi_cli_usage_error(cmd, "--streams must be 1 or 2, got %d", r->streams);
  return dsi_cli_precision(cmd, r->precision, act);
}

int dsi_cli_check_par(const char *cmd, dsi_cli_par *p) {
  int world = dsi_dist_size(dsi_cli_dist);
  const char *flag[2] = {"--tp", "--ep"};
  int *n[2] = {&p->tp, &p->ep};
  for (int i = 0; i < 2; i++) {
    if (*n[i] > 1 && !dsi_dist_has_mpi())
      return dsi_cli_usage_error(cmd, "%s %d needs a build with MPI (apt-get install libopenmpi-dev; cmake -DDSINFER_MPI=ON)",
                                 flag[i], *n[i]);
    if (*n[i] > 1 && *n[i] != world)
      return dsi_cli_usage_error(cmd, "%s %d needs as many ranks: mpirun -np %d build/dsinfer %s ... (this run has %d)",
                                 flag[i], *n[i], *n[i], cmd, world);
  }
  if (p->tp == 0) p->tp = 1;
  if (p->ep == 0) p->ep = world;
  if (p->attn_s && strcmp(p->attn_s, "tp") && strcmp(p->attn_s, "dp"))
    return dsi_cli_usage_error(cmd, "--attn must be tp or dp, got '%s'", p->attn_s);
  p->attn_dp = p->attn_s && !strcmp(p->attn_s, "dp");
  if (world > 1 && p->tp == 1 && p->ep == 1 && !p->attn_dp)
    return dsi_cli_usage_error(cmd, "--tp 1 --ep 1 under mpirun -np %d: every rank would do the same work; give --tp %d, "
                               "--ep %d or --attn dp", world, world, world);
  if (p->tp_to_ep_s && strcmp(p->tp_to_ep_s, "rs-ag") && strcmp(p->tp_to_ep_s, "allreduce"))
    return dsi_cli_usage_error(cmd, "--tp-to-ep must be rs-ag or allreduce, got '%s'", p->tp_to_ep_s);
  if (p->tp_to_ep_s && p->tp < 2)
    return dsi_cli_usage_error(cmd, "--tp-to-ep is how tensor-parallel attention meets the MoE: it needs --tp N");
  p->tp_to_ep = p->tp_to_ep_s && !strcmp(p->tp_to_ep_s, "allreduce") ? DSI_TP_TO_EP_ALLREDUCE : DSI_TP_TO_EP_RS_AG;
  if (p->overlap_s && strcmp(p->overlap_s, "on") && strcmp(p->overlap_s, "off"))
    return dsi_cli_usage_error(cmd, "--overlap must be on or off, got '%s'", p->overlap_s);
  p->overlap = p->overlap_s && !strcmp(p->overlap_s, "on");
  long long tb = 256;
  if (p->two_batch_s && dsi_cli_int(cmd, "--two-batch-min", p->two_batch_s, 0, 1 << 30, &tb)) return 2;
  if (p->two_batch_s && !p->overlap)
    return dsi_cli_usage_error(cmd, "--two-batch-min interleaves micro-batches at their collectives: it needs --overlap on");
  p->two_batch_min = (int)tb;
  if (p->attn_dp && p->tp > 1)
    return dsi_cli_usage_error(cmd, "--attn dp runs every head on each rank for its own sequences: not with --tp %d", p->tp);
  if (p->attn_dp && !dsi_dist_has_mpi())
    return dsi_cli_usage_error(cmd, "--attn dp needs a build with MPI (apt-get install libopenmpi-dev; cmake -DDSINFER_MPI=ON)");
  if (p->attn_dp && world < 2) return dsi_cli_usage_error(cmd, "--attn dp needs mpirun -np N, N > 1");
  if (p->lm_head_s && strcmp(p->lm_head_s, "whole") && strcmp(p->lm_head_s, "split"))
    return dsi_cli_usage_error(cmd, "--lm-head must be whole or split, got '%s'", p->lm_head_s);
  /* split by default wherever it can be: measured faster (README, "Across processes") */
  p->vocab_split = (p->lm_head_s ? !strcmp(p->lm_head_s, "split") : world > 1 && !p->attn_dp) ? world : 1;
  if (p->vocab_split > 1 && p->attn_dp)
    return dsi_cli_usage_error(cmd, "--lm-head split: under --attn dp each rank computes its own sequences' logits with "
                               "all of lm_head");
  if (p->lm_head_s && !strcmp(p->lm_head_s, "split") && world < 2)
    return dsi_cli_usage_error(cmd, "--lm-head split shares lm_head between ranks: it needs mpirun -np N, N > 1");
  return 0;
}

dsi_dist *dsi_cli_dist; /* set by main */

static int split(const dsi_cli_par *par) { return par && (par->tp > 1 || par->ep > 1 || par->attn_dp); }

/* ---- ranks that must open the same checkpoint ---- */
static uint32_t fnv1a(const void *p, size_t n, uint32_t h) {
  for (size_t i = 0; i < n; i++) h = (h ^ ((const uint8_t *)p)[i]) * 16777619u;
  return h;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* One line per *.safetensors file of dir: its name, size and a hash of
 * its header (the tensors' names, dtypes, shapes and offsets). */
static char *manifest(const char *dir) {
  DIR *dh = opendir(dir);
  char **names = NULL, *out = NULL;
  int n = 0, cap = 0;
  size_t len = 0;
  for (struct dirent *de; dh && (de = readdir(dh));) {
    size_t k = strlen(de->d_name);
    if (k < 12 || strcmp(de->d_name + k - 12, ".safetensors")) continue;
    if (n == cap) {
      char **nn = realloc(names, (size_t)(cap = cap ? 2 * cap : 16) * sizeof *nn);
      if (!nn) break;
      names = nn;
    }
    if (!(names[n] = strdup(de->d_name))) break;
    n++;
  }
  if (dh) closedir(dh);
  qsort(names, n, sizeof *names, by_name);
  out = calloc(1, 1);
  for (int i = 0; i < n && out; i++) {
    char path[4096], line[512];
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    FILE *f = fopen(path, "rb");
    uint64_t hl = 0;
    uint32_t h = 2166136261u;
    long long size = -1;
    if (f && fread(&hl, 8, 1, f) == 1 && hl < (64u << 20)) {
      char buf[65536];
      for (uint64_t got = 0; got < hl;) {
        size_t k = fread(buf, 1, (size_t)DSI_MIN(sizeof buf, hl - got), f);
        if (!k) break;
        h = fnv1a(buf, k, h);
        got += k;
      }
    }
    if (f && !fseek(f, 0, SEEK_END)) size = ftell(f);
    if (f) fclose(f);
    int k = snprintf(line, sizeof line, "%s: %lld bytes, header %08x\n", names[i], size, h);
    char *o = realloc(out, len + (size_t)k + 1);
    if (!o) {
      free(out);
      out = NULL;
      break;
    }
    out = o;
    memcpy(out + len, line, (size_t)k + 1);
    len += (size_t)k;
  }
  for (int i = 0; i < n; i++) free(names[i]);
  free(names);
  return out;
}

/* where mine differs from rank 0's: a config key, or a manifest line */
static void describe(int config, const char *mine, const char *theirs, char *why, size_t len) {
  if (config) {
    cJSON *a = cJSON_Parse(mine), *b = cJSON_Parse(theirs);
    const cJSON *x;
    snprintf(why, len, "config.json is not rank 0's");
    cJSON_ArrayForEach(x, b) {
      const cJSON *y = cJSON_GetObjectItemCaseSensitive(a, x->string);
      char *vx = cJSON_PrintUnformatted(x), *vy = y ? cJSON_PrintUnformatted(y) : NULL;
      int same = vx && vy && !strcmp(vx, vy);
      if (!same)
        snprintf(why, len, "config.json: \"%s\" is %.60s here, %.60s on rank 0", x->string, vy ? vy : "missing", vx ? vx : "?");
      free(vx);
      free(vy);
      if (!same) break;
    }
    cJSON_ArrayForEach(x, a) if (!cJSON_GetObjectItemCaseSensitive(b, x->string) && !strcmp(why, "config.json is not rank 0's"))
      snprintf(why, len, "config.json: \"%s\" is here, not on rank 0", x->string);
    cJSON_Delete(a);
    cJSON_Delete(b);
    return;
  }
  const char *p = mine, *q = theirs;
  while (*p && *p == *q) p++, q++;
  while (p > mine && p[-1] != '\n') p--, q--;
  snprintf(why, len, "the checkpoint's files differ from rank 0's: %.*s here; %.*s on rank 0", (int)strcspn(p, "\n"),
           *p ? p : "nothing more", (int)strcspn(q, "\n"), *q ? q : "nothing more");
}

/* Every rank must open the same config.json and safetensors files: each
 * hashes its own; where one differs, rank 0's text goes to all and that
 * rank names the difference. 0, or 1 on every rank after the message. */
static int same_everywhere(const char *cmd, const char *dir) {
  dsi_dist *d = dsi_cli_dist;
  int N = dsi_dist_size(d), rank = dsi_dist_rank(d), bad = 0;
  char cfg_path[4096], *text[2] = {NULL, manifest(dir)};
  size_t n = 0;
  dsi_err err = {0};
  snprintf(cfg_path, sizeof cfg_path, "%s/config.json", dir);
  dsi_read_file(cfg_path, &text[0], &n, &err); /* a missing file hashes as empty: the load says why */
  int *h = malloc((size_t)N * sizeof(int));
  for (int k = 0; k < 2 && h; k++) {
    const char *t = text[k] ? text[k] : "";
    if (dsi_dist_all_gather_int(d, (int)(fnv1a(t, strlen(t), 2166136261u) & 0x7fffffff), h)) {
      bad = 1;
      break;
    }
    int differ = 0;
    for (int r = 1; r < N; r++) differ |= h[r] != h[0];
    if (!differ) continue;
    bad = 1;
    int32_t len = (int32_t)strlen(t);
    char *zero = NULL;
    if (!dsi_dist_bcast(d, &len, sizeof len, 0) && (zero = calloc((size_t)len + 1, 1))) {
      if (rank == 0) memcpy(zero, t, (size_t)len);
      if (!dsi_dist_bcast(d, zero, (size_t)len, 0) && h[rank] != h[0]) {
        char why[400];
        describe(k == 0, t, zero, why, sizeof why);
        fprintf(stderr, "dsinfer %s: rank %d (%s): %s\n", cmd, rank, dir, why);
      }
    }
    free(zero);
    if (rank == 0) {
      fprintf(stderr, "dsinfer %s: the ranks opened different %s; every rank must open the same checkpoint:", cmd,
              k == 0 ? "configs" : "checkpoints");
      for (int r = 1; r < N; r++)
        if (h[r] != h[0]) fprintf(stderr, " rank %d", r);
      fprintf(stderr, " differ%s from rank 0\n", N > 2 ? "" : "s");
    }
    break;
  }
  if (!h) bad = 1;
  free(h);
  free(text[0]);
  free(text[1]);
  return bad;
}

/* DSINFER_FAULT=die:RANK:N or hang:RANK:N (tests): that rank dies or hangs
 * at the Nth collective of the forward */
static void fault_from_env(dsi_dist *d) {
  const char *f = getenv("DSINFER_FAULT");
  char kind[8];
  int rank;
  unsigned long call;
  if (!f || sscanf(f, "%7[a-z]:%d:%lu", kind, &rank, &call) != 3) return;
  d->fault_kind = !strcmp(kind, "die") ? DSI_FAULT_DIE : !strcmp(kind, "hang") ? DSI_FAULT_HANG : DSI_FAULT_NONE;
  d->fault_rank = rank;
  d->fault_call = call;
}

int dsi_cli_quant_mode(const char *s) {
  return !s || !strcmp(s, "none") ? DSI_QUANT_NONE : !strcmp(s, "int8") ? DSI_QUANT_INT8 : !strcmp(s, "int4") ? DSI_QUANT_INT4 : -1;
}

/* --quant-head's value as DSI_QUANT_HEAD_* (NULL: int8); -1 when it is not one */
static int quant_head(const char *s) {
  return !s || !strcmp(s, "int8") ? DSI_QUANT_HEAD_INT8 : !strcmp(s, "int4") ? DSI_QUANT_HEAD_INT4
         : !strcmp(s, "none")     ? DSI_QUANT_HEAD_KEEP : -1;
}

int dsi_cli_check_quant(const char *cmd, const char *quant_s, const char *head_s, int *quant, int *head) {
  *quant = dsi_cli_quant_mode(quant_s);
  if (*quant < 0) return dsi_cli_usage_error(cmd, "--quant must be none, int8 or int4, got '%s'", quant_s);
  *head = quant_head(head_s);
  if (*head < 0) return dsi_cli_usage_error(cmd, "--quant-head must be int8, int4 or none, got '%s'", head_s);
  if (head_s && *quant == DSI_QUANT_NONE)
    return dsi_cli_usage_error(cmd, "--quant-head sets what --quant makes of lm_head; it needs --quant int8 or int4");
  return 0;
}

static const char *const k_precision_names[] = {[DSI_ACT_AUTO] = "auto", [DSI_ACT_F32] = "f32", [DSI_ACT_BF16] = "bf16"};

int dsi_cli_precision(const char *cmd, const char *s, int *act) {
  *act = DSI_ACT_AUTO;
  if (!s) return 0;
  for (int i = 0; i < (int)DSI_ARRAY_LEN(k_precision_names); i++)
    if (!strcmp(s, k_precision_names[i])) return *act = i, 0;
  return dsi_cli_usage_error(cmd, "--precision must be auto, f32 or bf16, got '%s'", s);
}

const char *dsi_cli_precision_name(int act) { return k_precision_names[act]; }

int dsi_cli_kv_dtype(const char *s) {
  return !s || !strcmp(s, "auto") ? DSI_KV_AUTO : !strcmp(s, "bf16") ? DSI_KV_BF16 : !strcmp(s, "f32") ? DSI_KV_F32 : -1;
}

/* this rank's share of the model (all of it in one process) */
static int open_model(const char *cmd, const char *dir, dsi_load_opts *lo, const dsi_cli_par *par, dsi_model **m) {
  dsi_err err = {0};
  int rank = dsi_dist_rank(dsi_cli_dist);
  *m = NULL;
  if (split(par)) {
    if (same_everywhere(cmd, dir)) return 1;
    if (par->ep > 1) lo->ep_rank = rank, lo->ep_size = par->ep;
    if (par->tp > 1) lo->tp_rank = rank, lo->tp_size = par->tp;
    if (par->vocab_split > 1) lo->vocab_rank = rank, lo->vocab_size_split = par->vocab_split;
    if (rank) lo->progress = 0;
    fault_from_env(dsi_cli_dist);
    if (dsi_dist_watch(dsi_cli_dist, par->comm_timeout > 0 ? par->comm_timeout : 300)) {
      fprintf(stderr, "dsinfer %s: out of memory\n", cmd);
      return 1;
    }
  }
  int rc = dsi_model_open(m, dir, lo, &err);
  if (rc) *m = NULL;
  if (rc && !split(par)) return fail(cmd, &err);
  if (split(par)) { /* memory is each rank's own: all go on, or none */
    if (rc) fprintf(stderr, "dsinfer %s: rank %d: %s\n", cmd, rank, err.msg);
    int N = dsi_dist_size(dsi_cli_dist), *ok = malloc((size_t)N * sizeof(int)), all = ok != NULL;
    if (ok && dsi_dist_all_gather_int(dsi_cli_dist, rc == 0, ok)) all = 0;
    for (int r = 0; all && r < N; r++) all = ok[r];
    if (!all && rank == 0 && !rc && ok) {
      fprintf(stderr, "dsinfer %s: rank", cmd);
      for (int r = 0; r < N; r++)
        if (!ok[r]) fprintf(stderr, " %d", r);
      fprintf(stderr, " could not load its share; every rank stops\n");
    }
    free(ok);
    if (!all) {
      dsi_model_free(*m);
      *m = NULL;
      return 1;
    }
  }
  if (split(par)) { /* what each rank holds */
    dsi_model_info mi;
    dsi_model_get_info(*m, &mi);
    int E = mi.n_routed_experts, H = mi.num_attention_heads, ep = par->ep, tp = par->tp;
    int V = mi.vocab_size, vs = par->vocab_split > 1 ? par->vocab_split : 1;
    char lm[96] = "";
    if (vs > 1)
      snprintf(lm, sizeof lm, ", lm_head rows [%lld, %lld) of %d", (long long)V * rank / vs,
               (long long)V * (rank + 1) / vs, V);
    fprintf(stderr, "dsinfer %s: rank %d of %d: heads [%lld, %lld) of %d, routed experts [%lld, %lld) of %d%s, "
            "weights %.1f MB\n", cmd, rank, dsi_dist_size(dsi_cli_dist), (long long)H * rank / tp * (tp > 1),
            tp > 1 ? (long long)H * (rank + 1) / tp : H, H, (long long)E * rank / ep * (ep > 1),
            ep > 1 ? (long long)E * (rank + 1) / ep : E, E, lm, mi.weight_bytes / 1e6);
  }
  return 0;
}

/* the engine over *m; under mpirun a rank other than 0 follows rank 0's
 * steps here and exits */
static int open_engine(const char *cmd, dsi_engine_opts *eo, const dsi_cli_par *par, dsi_model **m, dsi_engine **e) {
  dsi_err err = {0};
  int rank = dsi_dist_rank(dsi_cli_dist);
  *e = NULL;
  if (split(par)) {
    eo->dist = dsi_cli_dist;
    eo->tp_to_ep = par->tp_to_ep;
    eo->overlap = par->overlap;
    eo->two_batch_min = par->two_batch_min;
    eo->attn_dp = par->attn_dp;
  }
  if (dsi_engine_open(e, *m, eo, &err)) { /* the model stays the caller's */
    *e = NULL;
    if (split(par)) dsi_dist_abort(dsi_cli_dist, fail(cmd, &err)); /* the others may wait on this one */
    return fail(cmd, &err);
  }
  if (split(par) && rank != 0) { /* a follower: rank 0's steps until it frees its engine */
    signal(SIGINT, SIG_IGN); /* rank 0 decides when to stop (serve's graceful shutdown) */
    signal(SIGTERM, SIG_IGN);
    int rc = dsi_engine_follow(*e);
    if (rc) fail(cmd, dsi_engine_error(*e));
    dsi_engine_free(*e);
    dsi_model_free(*m);
    if (rc) dsi_dist_abort(dsi_cli_dist, 1);
    dsi_dist_free(dsi_cli_dist);
    exit(0);
  }
  return 0;
}

int dsi_cli_open(const char *cmd, const char *dir, dsi_load_opts *lo, dsi_engine_opts *eo, const dsi_cli_par *par,
                 dsi_model **m, dsi_engine **e) {
  int rc = open_model(cmd, dir, lo, par, m);
  if (rc) return rc;
  if ((rc = open_engine(cmd, eo, par, m, e))) {
    dsi_model_free(*m);
    *m = NULL;
  }
  return rc;
}

static dsi_load_opts load_opts(const run_opts *r) {
  dsi_load_opts lo = {.mlock = r->mlock, .progress = 1, .n_threads = r->threads, .op_opt_off = r->op_opt_off,
                      .quant = r->quant_mode, .quant_head = r->quant_head_mode, .allow_nonfinite = r->allow_nonfinite};
  dsi_cli_env_opts(&lo, NULL);
  return lo;
}

static dsi_engine_opts engine_opts(const run_opts *r, int act, int max_tokens, int max_context) {
  dsi_engine_opts eo = {.n_threads = r->threads, .max_tokens = max_tokens, .max_context = max_context,
                        .act_precision = act, .profile = r->profile, .kv_blocks = r->kv_blocks, .kv_dtype = r->kv_mode,
                        .exec = r->exec_mode, .streams = r->streams};
  dsi_cli_env_opts(NULL, &eo);
  return eo;
}

int dsi_cli_open_model(const char *cmd, const char *dir, const run_opts *r, dsi_model **m) {
  dsi_load_opts lo = load_opts(r);
  return open_model(cmd, dir, &lo, &r->par, m);
}

int dsi_cli_engine_on(const char *cmd, dsi_model *m, const run_opts *r, int act, int max_tokens, int max_context,
                      dsi_engine **e) {
  dsi_engine_opts eo = engine_opts(r, act, max_tokens, max_context);
  return open_engine(cmd, &eo, &r->par, &m, e);
}

int dsi_cli_open_engine(const char *cmd, const char *dir, const run_opts *r, int act, int max_tokens,
                        int64_t max_context, const char *ctx_what, dsi_model **m, dsi_engine **e) {
  int rc;
  *m = NULL;
  *e = NULL;
  dsi_load_opts lo = load_opts(r);
  dsi_engine_opts eo = engine_opts(r, act, max_tokens, 0);
  if ((rc = open_model(cmd, dir, &lo, &r->par, m))) return rc;
  dsi_model_info info;
  dsi_model_get_info(*m, &info);
  if (max_context > info.max_position_embeddings && ctx_what) {
    fprintf(stderr, "dsinfer %s: %s (%lld tokens) is over the model's context of %d tokens (max_position_embeddings)\n",
            cmd, ctx_what, (long long)max_context, info.max_position_embeddings);
    dsi_model_free(*m);
    *m = NULL;
    return 1;
  }
  eo.max_context = max_context < info.max_position_embeddings ? (int)max_context : info.max_position_embeddings;
  if (r->kv_blocks < 0) { /* one full context, and a block to spare */
    int ctx = eo.max_context ? eo.max_context : info.max_position_embeddings < 4096 ? info.max_position_embeddings : 4096;
    eo.kv_blocks = (ctx + 1 + 63) / 64 + 1;
  }
  if ((rc = open_engine(cmd, &eo, &r->par, m, e))) {
    dsi_model_free(*m);
    *m = NULL;
  }
  return rc;
}

int dsi_cli_gen_defaults(const char *cmd, const char *model, dsi_sampling *sp, int *n, int n_default) {
  dsi_gen_config g;
  dsi_err err = {0};
  if (dsi_gen_config_load(model, &g, &err)) return fail(cmd, &err);
  dsi_gen_config_apply(&g, sp);
  if (*n < 0) *n = g.max_new_tokens >= 0 ? g.max_new_tokens : n_default;
  return 0;
}

/* ---- logits ---- */
int dsi_cmd_logits(int argc, char **argv) {
  const char *model = NULL, *out = NULL;
  dsi_strlist toks = {0};
  int decode = 0, chunk = 0, act;
  run_opts ro = {0};
  const dsi_opt opts[] = {
    {"--model", NULL, OPT_STR, &model, "checkpoint directory (config.json + safetensors)"},
    {"--tokens", NULL, OPT_LIST, &toks, "comma-separated ids of one sequence; repeat for more sequences"},
    {"--decode", NULL, OPT_FLAG, &decode, "feed one token per sequence per step through the KV cache"},
    {"--chunk", NULL, OPT_INT, &chunk, "prefill in chunks of N tokens per sequence per step", 0, DSI_CLI_MAX_TOKENS},
    {"--out", NULL, OPT_STR, &out, "output file: raw little-endian f32, [n_tokens, vocab] per sequence"},
    RUN_OPTS(ro),
    {0}};
  int rc = dsi_cli_parse("logits", "--model DIR --tokens IDS [--tokens IDS ...] [--decode | --chunk N] --out FILE",
                         opts, argc, argv);
  if (rc) { free(toks.v); return rc == 1 ? 0 : 2; }
  if (!model || !out || toks.n == 0) {
    free(toks.v);
    return dsi_cli_usage_error("logits", "--model, --tokens and --out are required");
  }
  if (chunk < 0 || (decode && chunk)) { free(toks.v); return dsi_cli_usage_error("logits", "--chunk must be positive and not combined with --decode"); }
  if ((rc = dsi_cli_check_run_opts("logits", &ro, &act))) { free(toks.v); return rc; }
  if (decode) chunk = 1;
  int ns = toks.n;
  int32_t **ids = calloc(ns, sizeof *ids);
  int *len = calloc(ns, sizeof *len);
  int64_t total = 0, blocks = 0;
  if (!ids || !len) {
    rc = 1;
    fprintf(stderr, "dsinfer logits: out of memory\n");
    goto done;
  }
  for (int s = 0; s < ns; s++) {
    len[s] = dsi_cli_parse_ids("logits", "--tokens", toks.v[s], &ids[s]);
    if (len[s] < 0) {
      rc = 2;
      goto done;
    }
    total += len[s];
    blocks += (len[s] + 63) / 64; /* each sequence its own blocks: the pool is sized by them */
  }
  if (total > DSI_CLI_MAX_TOKENS) {
    rc = dsi_cli_usage_error("logits", "--tokens: %lld tokens in all is over %d", (long long)total, DSI_CLI_MAX_TOKENS);
    goto done;
  }
  dsi_model *m = NULL;
  dsi_engine *e = NULL;
  int maxlen = 0;
  for (int s = 0; s < ns; s++) maxlen = len[s] > maxlen ? len[s] : maxlen;
  ro.kv_blocks = (int)blocks + 1;
  if ((rc = dsi_cli_open_engine("logits", model, &ro, act, (int)total, maxlen, "the longest --tokens", &m, &e))) goto done;
  dsi_model_info info;
  dsi_model_get_info(m, &info);
  size_t V = info.vocab_size;
  size_t all_bytes; /* sequence after sequence */
  int too_big = dsi_size_mul((size_t)total * V, sizeof(float), &all_bytes);
  float *all = too_big ? NULL : calloc(1, all_bytes);
  float *step = too_big ? NULL : malloc(all_bytes);
  int32_t *bt = malloc(total * sizeof(int32_t)), *bs = malloc(total * sizeof(int32_t));
  int *seq_id = calloc(ns, sizeof(int)), *done_n = calloc(ns, sizeof(int)), *base = calloc(ns, sizeof(int));
  if (!all || !step || !bt || !bs || !seq_id || !done_n || !base) {
    fprintf(stderr, "dsinfer logits: out of memory for the logits of %lld tokens\n", (long long)total);
    rc = 1;
    ns = 0;
  }
  for (int s = 0; s < ns; s++) {
    if ((seq_id[s] = dsi_seq_new(e)) < 0 && !rc) rc = fail("logits", dsi_engine_error(e));
    base[s] = s ? base[s - 1] + len[s - 1] : 0;
  }
  int per = chunk > 0 ? chunk : 1 << 30;
  while (!rc) {
    int n = 0;
    for (int s = 0; s < ns; s++)
      for (int k = 0; k < per && done_n[s] + k < len[s]; k++) {
        bt[n] = ids[s][done_n[s] + k];
        bs[n++] = seq_id[s];
      }
    if (n == 0) break;
    dsi_batch b = {.n_tokens = n, .tokens = bt, .seq = bs};
    if (dsi_engine_forward(e, &b, step)) {
      rc = fail("logits", dsi_engine_error(e));
      break;
    }
    int r = 0;
    for (int s = 0; s < ns; s++)
      for (int k = 0; k < per && done_n[s] < len[s]; k++, r++)
        memcpy(all + (size_t)(base[s] + done_n[s]++) * V, step + (size_t)r * V, V * sizeof(float));
  }
  if (!rc) {
    dsi_err werr = {0};
    if (dsi_write_file(out, all, all_bytes, &werr)) rc = fail("logits", &werr);
  }
  free(all); free(step); free(bt); free(bs); free(seq_id); free(done_n); free(base);
  dsi_engine_free(e);
  dsi_model_free(m);
done:
  for (int s = 0; ids && s < toks.n; s++) free(ids[s]);
  free(ids);
  free(len);
  free(toks.v);
  return rc;
}

/* ---- generate ---- */
int dsi_cmd_generate(int argc, char **argv) {
  const char *model = NULL, *tokens = NULL, *profile = NULL;
  int n_gen = -1, ignore_eos = 0, act;
  run_opts ro = {0};
  dsi_sampling sp = SAMPLING_UNSET;
  const dsi_opt opts[] = {
    {"--model", NULL, OPT_STR, &model, "checkpoint directory"},
    {"--tokens", NULL, OPT_STR, &tokens, "prompt as comma-separated token ids"},
    {"-n", "--n-predict", OPT_INT, &n_gen, "tokens to generate (default: generation_config.json's max_new_tokens, else 32)"},
    SAMPLING_OPTS(sp),
    {"--ignore-eos", NULL, OPT_FLAG, &ignore_eos, "keep going past the end-of-sequence token"},
    {"--profile", NULL, OPT_STR, &profile, "write a Chrome trace of the run to FILE (see dsinfer profile)"},
    RUN_OPTS(ro),
    {0}};
  int rc = dsi_cli_parse("generate", "--model DIR --tokens IDS [-n N] [sampling options]", opts, argc, argv);
  if (rc) return rc == 1 ? 0 : 2;
  if (!model || !tokens) return dsi_cli_usage_error("generate", "--model and --tokens are required");
  if (dsi_cli_gen_defaults("generate", model, &sp, &n_gen, 32)) return 1;
  if (sp.top_p <= 0) return dsi_cli_usage_error("generate", "--top-p must be in (0, 1]");
  if ((rc = dsi_cli_check_run_opts("generate", &ro, &act))) return rc;
  ro.profile = profile != NULL;
  int32_t *prompt;
  int np = dsi_cli_parse_ids("generate", "--tokens", tokens, &prompt);
  if (np < 0) return 2;
  dsi_model *m = NULL;
  dsi_engine *e = NULL;
  /* -n past the context: generation stops where the context is full */
  if ((rc = dsi_cli_open_engine("generate", model, &ro, act, np, (int64_t)np + n_gen, NULL, &m, &e))) {
    free(prompt);
    return rc;
  }
  dsi_model_info info;
  dsi_model_get_info(m, &info);
  if (np < info.max_position_embeddings && (int64_t)np + n_gen > info.max_position_embeddings) {
    n_gen = info.max_position_embeddings - np;
    fprintf(stderr, "dsinfer generate: -n cut to %d: the model's context holds %d tokens\n", n_gen,
            info.max_position_embeddings);
  }
  float *logits = malloc((size_t)info.vocab_size * sizeof(float));
  dsi_sampler *smp = dsi_sampler_new(&sp, info.vocab_size);
  int seq = dsi_seq_new(e);
  uint8_t *want = calloc(np, 1);
  int32_t *seqv = calloc(np, sizeof(int32_t));
  double t0 = now();
  dsi_batch b = {.n_tokens = np, .tokens = prompt, .seq = seqv, .want_logits = want};
  if (!logits || !smp || !want || !seqv) {
    fprintf(stderr, "dsinfer generate: out of memory for the logits\n");
    rc = 1;
  } else if (seq < 0) {
    rc = fail("generate", dsi_engine_error(e));
  } else {
    want[np - 1] = 1;
    for (int i = 0; i < np; i++) seqv[i] = seq;
    if (dsi_engine_forward(e, &b, logits)) rc = fail("generate", dsi_engine_error(e));
  }
  double t1 = now();
  int produced = 0;
  double t2 = t1;
  for (int i = 0; !rc && i < n_gen; i++) {
    int32_t tok = dsi_sampler_sample(smp, logits, 0, NULL, 0, 0);
    printf("%s%d", produced ? "," : "", tok);
    fflush(stdout);
    produced++;
    if (tok == info.eos_token_id && !ignore_eos) break;
    if (i + 1 == n_gen) break;
    dsi_batch d = {.n_tokens = 1, .tokens = &tok, .seq = &seq};
    if (dsi_engine_forward(e, &d, logits)) rc = fail("generate", dsi_engine_error(e));
  }
  t2 = now();
  printf("\n");
  if (dsi_cli_finish_output("generate")) rc = 1;
  if (!rc)
    fprintf(stderr, "prefill: %d tokens, %.1f tokens/s; decode: %d tokens, %.2f tokens/s\n", np,
            np / (t1 - t0), produced, produced > 1 ? (produced - 1) / (t2 - t1) : 0.0);
  dsi_err perr = {0};
  if (!rc && profile && dsi_engine_profile_write(e, profile, &perr)) rc = fail("generate", &perr);
  free(want); free(seqv); free(logits); free(prompt);
  dsi_sampler_free(smp);
  dsi_engine_free(e);
  dsi_model_free(m);
  return rc;
}

/* ---- mkmodel ---- */
int dsi_cmd_mkmodel(int argc, char **argv) {
  dsi_mkmodel_opts o = {.preset = "tiny", .dtype = "bf16", .seed = 0, .out_dir = NULL, .shard_mb = 0, .progress = 1};
  const dsi_opt opts[] = {
    {"--preset", NULL, OPT_STR, &o.preset, "tiny | small | bench | v3slice (default tiny)"},
    {"--dtype", NULL, OPT_STR, &o.dtype, "f32 | bf16 | fp8 (default bf16)"},
    {"--seed", NULL, OPT_U64, &o.seed, "random seed (default 0)"},
    {"--out", NULL, OPT_STR, &o.out_dir, "output directory"},
    {"--shard-mb", NULL, OPT_INT, &o.shard_mb, "split into shards of at most N MB with an index", 0, 1 << 20},
    {"--force", NULL, OPT_FLAG, &o.force, "write into a folder that is not empty (mkmodel's files there are replaced)"},
    {"--tokenizer", NULL, OPT_STR, &o.tokenizer, "tokenizer.json or its folder to copy in; builtin: a small generated "
                                                  "one (default: DeepSeek-V3's when found and it fits, else builtin)"},
    {0}};
  int rc = dsi_cli_parse("mkmodel", "--preset P --dtype T [--seed S] --out DIR [--shard-mb N] [--tokenizer DIR|FILE|builtin] [--force]",
                         opts, argc, argv);
  if (rc) return rc == 1 ? 0 : 2;
  if (!o.out_dir) return dsi_cli_usage_error("mkmodel", "--out is required");
  dsi_err err = {0};
  rc = dsi_mkmodel(&o, &err);
  if (rc == DSI_E_INVAL) return dsi_cli_usage_error("mkmodel", "%s", err.msg);
  if (rc) return fail("mkmodel", &err);
  return 0;
}
