/* tests: the loader on whole checkpoints — mkmodel's presets in every dtype
 * and sharded, the MTP layer of real checkpoints skipped, --mlock, and a
 * tensor missing, misshapen or without its FP8 scale failing with a message
 * that names it — and its packing step (a panel row of 1-, 2- and 4-byte
 * elements at every place tensor/mat.h puts it). */
#define _GNU_SOURCE
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "check.h"
#include "dsinfer.h"
#include "model/model.h"
#include "kernels/kernels.h"
#include "model/safetensors.h"
#include "tools/internal.h"

static char g_tmp[64];

/* logits of a fixed 6-token prompt (prefill), [6, vocab]; NULL on failure */
static float *prompt_logits_opts(const char *dir, const dsi_load_opts *lo, int *vocab, dsi_err *err) {
  dsi_model *m;
  if (dsi_model_open(&m, dir, lo, err)) return NULL;
  dsi_model_info info;
  dsi_model_get_info(m, &info);
  dsi_engine *e;
  dsi_engine_opts eo = {.act_precision = DSI_ACT_F32};
  DSI_ASSERT(dsi_engine_open(&e, m, &eo, err) == 0);
  int s = dsi_seq_new(e);
  int32_t toks[6] = {3, 141, 59, 26, 5, 358}, seq[6] = {s, s, s, s, s, s};
  float *lg = malloc((size_t)6 * info.vocab_size * sizeof(float));
  dsi_batch b = {.n_tokens = 6, .tokens = toks, .seq = seq};
  DSI_ASSERT(dsi_engine_forward(e, &b, lg) == 0);
  *vocab = info.vocab_size;
  dsi_engine_free(e);
  dsi_model_free(m);
  return lg;
}

static float *prompt_logits(const char *dir, int mlock, int *vocab, dsi_err *err) {
  dsi_load_opts lo = {.mlock = mlock};
  return prompt_logits_opts(dir, &lo, vocab, err);
}

static double max_diff(const float *a, const float *b, size_t n) {
  double d = 0;
  for (size_t i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - b[i]));
  return d;
}

static double cosine(const float *a, const float *b, size_t n) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < n; i++) ab += (double)a[i] * b[i], aa += (double)a[i] * a[i], bb += (double)b[i] * b[i];
  return ab / sqrt(aa * bb);
}

static int all_finite(const float *a, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!isfinite(a[i])) return 0;
  return 1;
}

/* Copy the checkpoint in `src` to `dst`, leaving out tensor `drop` (or
 * NULL), renaming/reshaping nothing, and adding `extra` 1-D F32 tensors
 * named extra_names. config.json is copied with `cfg_edit` (sed-like
 * "from\tto") applied when given. */
static void copy_ckpt(const char *src, const char *dst, const char *drop, const char **extra, int n_extra,
                      const char *cfg_from, const char *cfg_to) {
  char path[512], *cfg;
  dsi_err err;
  mkdir(dst, 0755);
  snprintf(path, sizeof path, "%s/config.json", src);
  DSI_ASSERT(dsi_read_file(path, &cfg, NULL, &err) == 0);
  if (cfg_from) {
    char *at = strstr(cfg, cfg_from);
    DSI_ASSERT(at);
    size_t n = strlen(cfg) + strlen(cfg_to) + 1;
    char *out = malloc(n);
    snprintf(out, n, "%.*s%s%s", (int)(at - cfg), cfg, cfg_to, at + strlen(cfg_from));
    free(cfg);
    cfg = out;
  }
  snprintf(path, sizeof path, "%s/config.json", dst);
  DSI_ASSERT(dsi_write_file(path, cfg, strlen(cfg), &err) == 0);
  free(cfg);
  dsi_st_set st;
  DSI_ASSERT(dsi_st_open(&st, src, &err) == 0);
  dsi_st_writer *w = dsi_st_writer_new();
  for (int i = 0; i < st.n_tensors; i++) {
    if (drop && !strcmp(st.tensors[i].name, drop)) continue;
    dsi_st_writer_add(w, st.tensors[i].name, st.tensors[i].dtype, st.tensors[i].ndim, st.tensors[i].shape);
  }
  int64_t four = 4;
  for (int i = 0; i < n_extra; i++) dsi_st_writer_add(w, extra[i], DSI_DTYPE_F32, 1, &four);
  snprintf(path, sizeof path, "%s/model.safetensors", dst);
  DSI_ASSERT(dsi_st_writer_begin(w, path, &err) == 0);
  for (int i = 0; i < st.n_tensors; i++) {
    if (drop && !strcmp(st.tensors[i].name, drop)) continue;
    DSI_ASSERT(dsi_st_writer_data(w, st.tensors[i].data, st.tensors[i].nbytes, &err) == 0);
  }
  float z[4] = {1, 2, 3, 4};
  for (int i = 0; i < n_extra; i++) DSI_ASSERT(dsi_st_writer_data(w, z, sizeof z, &err) == 0);
  DSI_ASSERT(dsi_st_writer_end(w, &err) == 0);
  dsi_st_writer_free(w);
  dsi_st_close(&st);
}

static void make(const char *name, const char *preset, const char *dtype, int shard_mb, char *out) {
  snprintf(out, 256, "%s/%s", g_tmp, name);
  dsi_mkmodel_opts o = {.preset = preset, .dtype = dtype, .seed = 11, .out_dir = out, .shard_mb = shard_mb};
  dsi_err err = {0};
  int rc = dsi_mkmodel(&o, &err);
  CHECKF(rc == 0, "mkmodel %s %s: %s", preset, dtype, err.msg);
}

/* dsi_pack_panel_row against dsi_tiles_index: every element of the row at
 * its place, zeros past the columns and for a missing row, and the other
 * rows of the panel untouched */
static void test_pack_panel_row(void) {
  static const int cols_set[] = {1, 2, 3, 31, 32, 33, 64, 100};
  int bad = 0;
  for (size_t es = 1; es <= 4; es *= 2)
    for (size_t ci = 0; ci < DSI_ARRAY_LEN(cols_set); ci++)
      for (int j = 0; j < DSI_TILE_N; j += 5)
        for (int missing = 0; missing < 2; missing++) {
          int cols = cols_set[ci], kpad = (cols + 31) / 32 * 32;
          dsi_mat w = {.dtype = DSI_DTYPE_F32, .rows = DSI_TILE_N, .cols = cols, .kpad = kpad, .layout = DSI_LAYOUT_TILES};
          uint8_t row[100 * 4], panel[DSI_TILE_N * 128 * 4];
          for (size_t i = 0; i < sizeof row; i++) row[i] = (uint8_t)(i * 7 + 1);
          memset(panel, 0xa5, sizeof panel);
          dsi_pack_panel_row(missing ? NULL : row, cols, kpad, es, panel, j);
          for (int r = 0; r < DSI_TILE_N; r++)
            for (int c = 0; c < kpad; c++) {
              const uint8_t *got = panel + dsi_tiles_index(&w, r, c) * es;
              for (size_t b = 0; b < es; b++) {
                uint8_t want = r != j ? 0xa5 : !missing && c < cols ? row[(size_t)c * es + b] : 0;
                bad += got[b] != want;
              }
            }
        }
  CHECKF(bad == 0, "dsi_pack_panel_row: %d bytes out of place", bad);
}

int main(void) {
  test_pack_panel_row();
  snprintf(g_tmp, sizeof g_tmp, "/tmp/dsinfer-test-loader-XXXXXX");
  DSI_ASSERT(mkdtemp(g_tmp));
  dsi_err err = {0};
  int V;
  char f32[256], bf16[256], fp8[256], sharded[256], dir[512];

  /* every dtype loads and runs; the same master weights give close logits */
  make("f32", "tiny", "f32", 0, f32);
  make("bf16", "tiny", "bf16", 0, bf16);
  make("fp8", "tiny", "fp8", 0, fp8);
  make("sharded", "tiny", "bf16", 1, sharded);
  float *lf = prompt_logits(f32, 0, &V, &err), *lb = prompt_logits(bf16, 0, &V, &err);
  float *l8 = prompt_logits(fp8, 0, &V, &err), *ls = prompt_logits(sharded, 0, &V, &err);
  CHECK(lf && lb && l8 && ls);
  if (lf && lb && l8 && ls) {
    size_t n = (size_t)6 * V;
    CHECK(all_finite(lf, n) && all_finite(lb, n) && all_finite(l8, n));
    CHECKF(max_diff(lb, ls, n) == 0, "sharded checkpoint differs from the single file");
    double scale = 0;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(lf[i]));
    /* the same master weights rounded to bf16 / quantized to fp8: the
     * logits point the same way (a flipped expert moves some by O(1)) */
    CHECKF(cosine(lf, lb, n) > 0.99, "bf16 vs f32: cosine %g", cosine(lf, lb, n));
    CHECKF(cosine(lf, l8, n) > 0.9, "fp8 vs f32: cosine %g", cosine(lf, l8, n));
    /* --mlock computes from the locked mapping (row-major): the same
     * numbers up to float summation order */
    float *lm = prompt_logits(bf16, 1, &V, &err);
    CHECKF(lm && max_diff(lm, lb, n) <= 1e-5 * scale, "--mlock differs: %s", lm ? "" : err.msg);
    free(lm);
  }
  free(lf); free(lb); free(l8); free(ls);

  /* FP8 weights without a NaN byte are marked so (dsi_mat.nan_free: the
   * kernels skip their NaN check); one NaN byte, loaded anyway, leaves
   * them unmarked, and its NaN reaches the logits on every kernel */
  {
    dsi_model *m8 = NULL;
    CHECK(dsi_model_open(&m8, fp8, NULL, &err) == 0);
    if (m8) {
      const dsi_layer_weights *L = &m8->layers[1];
      CHECK(L->o_proj.dtype == DSI_DTYPE_F8_E4M3 && L->o_proj.nan_free && L->q_b_proj.nan_free);
      CHECK(L->exp_gate_up && L->exp_gate_up[0].nan_free && L->exp_down[0].nan_free);
      dsi_model_free(m8);
    }
    snprintf(dir, sizeof dir, "%s/nan", g_tmp);
    copy_ckpt(fp8, dir, NULL, NULL, 0, NULL, NULL);
    dsi_st_set st = {0};
    CHECK(dsi_st_open(&st, dir, &err) == 0);
    const dsi_st_tensor *t = dsi_st_find(&st, "model.layers.1.self_attn.o_proj.weight");
    CHECK(t && t->dtype == DSI_DTYPE_F8_E4M3);
    if (t) {
      FILE *f = fopen(st.files[t->file].path, "r+b");
      CHECK(f && fseek(f, (long)t->offset + 5, SEEK_SET) == 0 && fputc(0x7f, f) == 0x7f && fclose(f) == 0);
    }
    dsi_st_close(&st);
    dsi_load_opts lo = {.allow_nonfinite = 1};
    CHECK(dsi_model_open(&m8, dir, &lo, &err) == 0);
    if (m8) {
      CHECK(!m8->layers[1].o_proj.nan_free && !m8->layers[2].exp_down[0].nan_free);
      dsi_model_free(m8);
    }
    float *ln = prompt_logits_opts(dir, &lo, &V, &err);
    CHECKF(ln && isnan(ln[0]) && isnan(ln[(size_t)6 * V - 1]), "a NaN weight byte: %s",
           ln ? "the logits stay finite" : err.msg);
    free(ln);
  }

  /* the MTP layer (model.layers.{num_hidden_layers}) is skipped */
  const char *mtp[] = {"model.layers.3.enorm.weight", "model.layers.3.hnorm.weight",
                       "model.layers.3.shared_head.norm.weight"};
  snprintf(dir, sizeof dir, "%s/mtp", g_tmp);
  copy_ckpt(bf16, dir, NULL, mtp, 3, "\"num_nextn_predict_layers\": 0", "\"num_nextn_predict_layers\": 1");
  float *lt = prompt_logits(dir, 0, &V, &err), *lb2 = prompt_logits(bf16, 0, &V, &err);
  CHECKF(lt && lb2 && max_diff(lt, lb2, (size_t)6 * V) == 0, "MTP checkpoint: %s", lt ? "logits differ" : err.msg);
  free(lt); free(lb2);

  /* a missing tensor is named, with the folder */
  snprintf(dir, sizeof dir, "%s/missing", g_tmp);
  copy_ckpt(bf16, dir, "model.layers.2.mlp.experts.7.up_proj.weight", NULL, 0, NULL, NULL);
  dsi_model *m = NULL;
  CHECK_ERR(dsi_model_open(&m, dir, NULL, &err), DSI_E_FORMAT, err, "model.layers.2.mlp.experts.7.up_proj.weight: missing");
  /* an FP8 weight without its scale */
  snprintf(dir, sizeof dir, "%s/noscale", g_tmp);
  copy_ckpt(fp8, dir, "model.layers.1.self_attn.o_proj.weight_scale_inv", NULL, 0, NULL, NULL);
  CHECK_ERR(dsi_model_open(&m, dir, NULL, &err), DSI_E_FORMAT, err, "model.layers.1.self_attn.o_proj.weight: F8_E4M3 weight without");
  /* a shape that disagrees with the config names tensor, shapes and file */
  snprintf(dir, sizeof dir, "%s/shape", g_tmp);
  copy_ckpt(bf16, dir, NULL, NULL, 0, "\"moe_intermediate_size\": 64", "\"moe_intermediate_size\": 32");
  CHECK_ERR(dsi_model_open(&m, dir, NULL, &err), DSI_E_FORMAT, err, "model.layers.1.mlp.experts.0.gate_proj.weight: shape [64,128] expected [32,128] in");
  /* a shard named by the index but absent */
  snprintf(dir, sizeof dir, "%s/model-00002-of-0000", sharded);
  char cmd[700];
  snprintf(cmd, sizeof cmd, "rm -f %s/model-00002-of-*.safetensors", sharded);
  CHECK(system(cmd) == 0);
  CHECK_ERR(dsi_model_open(&m, sharded, NULL, &err), DSI_E_IO, err, "model-00002-of-");
  CHECK(m == NULL);

  snprintf(cmd, sizeof cmd, "rm -rf %s", g_tmp);
  CHECK(system(cmd) == 0);
  return check_done();
}
