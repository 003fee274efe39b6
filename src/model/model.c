/* model: open a checkpoint directory — config.json + safetensors — check
 * every tensor the forward needs against the config, and copy the weights
 * into anonymous memory (or lock the mapping with --mlock), packed into the
 * kernels' layout and, with --quant int8 or int4, quantized on the way. */
#define _GNU_SOURCE
#include "model/model.h"
#include "base/pool.h"
#include "kernels/gemm.h"

#include <stdatomic.h>

#include <errno.h>
#include <stdarg.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* One tensor the forward reads: where it goes and what it must look like. */
typedef enum { SPEC_MAT, SPEC_VEC } spec_kind;
typedef enum { STORE_ROWS, STORE_TILES, STORE_GATE_UP, STORE_MLA, STORE_NONE } spec_store;
typedef struct spec spec;
struct spec {
  char name[160];
  spec_kind kind;
  int64_t rows, cols;        /* VEC: rows = 1 */
  dsi_mat *mat;              /* SPEC_MAT destination */
  float **vec;               /* SPEC_VEC destination (always f32) */
  const dsi_st_tensor *t, *scale;
  size_t off, scale_off, bytes, scale_bytes;
  /* how it is stored (decided after validation) */
  spec_store store;
  int pair;                  /* gate: index of its up spec, else -1 */
  dsi_mat *gu_dst;           /* gate: where the packed gate/up pair goes */
  int mla;                   /* kv_b_proj: split into w_uk_t / w_uv / w_uk when packed */
  dsi_mat *uk_dst, *uv_dst, *ukr_dst;
  int exact;                 /* never quantized (the MoE router: its logits pick experts) */
  int role;                  /* ROLE_*: what --quant int4 makes of it */
  int quant;                 /* 0, or packed as DSI_DTYPE_I8 / DSI_DTYPE_I4 (decided with the storage) */
  int tp_axis, tp_unit;      /* tensor parallel: split by heads along rows (1) or columns (2),
                                tp_unit rows or columns a head */
  dsi_st_tensor own, own_scale; /* a slice of the file's tensor (and its scales) in memory of
                                its own, which t and scale then point to (file -1) */
  void *own_data, *own_scale_data;
  dsi_mat src;               /* the row-major view of the file's tensor */
  float *src_scale;          /* FP8 scales widened to f32 (temporary) */
  size_t off2, off3;         /* STORE_MLA: w_uv's and w_uk's offsets */
};

/* a linear weight's part of the model, for --quant int4 */
enum { ROLE_ATTN, ROLE_MLP, ROLE_HEAD };

typedef struct {
  spec *v;
  int n, cap;
  int oom;    /* an allocation failed: the list is incomplete */
  spec spare; /* what add_spec hands out once oom is set */
} spec_list;

static spec *add_spec(spec_list *l, spec_kind kind, int64_t rows, int64_t cols, dsi_mat *mat,
                     float **vec, const char *fmt, ...) __attribute__((format(printf, 7, 8)));
static spec *add_spec(spec_list *l, spec_kind kind, int64_t rows, int64_t cols, dsi_mat *mat,
                     float **vec, const char *fmt, ...) {
  if (l->oom) return &l->spare;
  if (l->n == l->cap) {
    int cap = l->cap ? 2 * l->cap : 256;
    spec *v = realloc(l->v, (size_t)cap * sizeof(spec));
    if (!v) {
      l->oom = 1;
      return &l->spare;
    }
    l->v = v;
    l->cap = cap;
  }
  spec *s = &l->v[l->n++];
  memset(s, 0, sizeof *s);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(s->name, sizeof s->name, fmt, ap);
  va_end(ap);
  s->kind = kind;
  s->rows = rows;
  s->cols = cols;
  s->mat = mat;
  s->vec = vec;
  s->pair = -1;
  return s;
}

/* mark spec gate (the one before last) as paired with up (the last) */
static void link_gate_up(spec_list *l, dsi_mat *dst) {
  if (l->oom) return;
  l->v[l->n - 2].pair = l->n - 1;
  l->v[l->n - 2].gu_dst = dst;
}

/* ---- what the forward needs, by config ---- */
/* Sizes in int64 (config values are ints; their sums and products are not). */
static int plan_tensors(dsi_model *m, spec_list *l, dsi_err *err) {
  const dsi_config *c = &m->cfg;
  int64_t H = c->num_attention_heads, D = c->hidden_size;
  int64_t qk = (int64_t)c->qk_nope_head_dim + c->qk_rope_head_dim;
  add_spec(l, SPEC_MAT, c->vocab_size, D, &m->embed_tokens, NULL, "model.embed_tokens.weight");
  for (int L = 0; L < c->num_hidden_layers; L++) {
    dsi_layer_weights *w = &m->layers[L];
#define P "model.layers.%d."
    add_spec(l, SPEC_VEC, 1, D, NULL, &w->input_layernorm, P "input_layernorm.weight", L);
    add_spec(l, SPEC_VEC, 1, D, NULL, &w->post_attention_layernorm, P "post_attention_layernorm.weight", L);
    if (c->q_lora_rank > 0) {
      add_spec(l, SPEC_MAT, c->q_lora_rank, D, &w->q_a_proj, NULL, P "self_attn.q_a_proj.weight", L);
      add_spec(l, SPEC_VEC, 1, c->q_lora_rank, NULL, &w->q_a_layernorm, P "self_attn.q_a_layernorm.weight", L);
      spec *q = add_spec(l, SPEC_MAT, H * qk, c->q_lora_rank, &w->q_b_proj, NULL, P "self_attn.q_b_proj.weight", L);
      q->tp_axis = 1, q->tp_unit = (int)qk;
    } else {
      spec *q = add_spec(l, SPEC_MAT, H * qk, D, &w->q_proj, NULL, P "self_attn.q_proj.weight", L);
      q->tp_axis = 1, q->tp_unit = (int)qk;
    }
    add_spec(l, SPEC_MAT, (int64_t)c->kv_lora_rank + c->qk_rope_head_dim, D, &w->kv_a_proj_with_mqa, NULL,
             P "self_attn.kv_a_proj_with_mqa.weight", L);
    add_spec(l, SPEC_VEC, 1, c->kv_lora_rank, NULL, &w->kv_a_layernorm, P "self_attn.kv_a_layernorm.weight", L);
    spec *kvb = add_spec(l, SPEC_MAT, H * ((int64_t)c->qk_nope_head_dim + c->v_head_dim), c->kv_lora_rank,
                         &w->kv_b_proj, NULL, P "self_attn.kv_b_proj.weight", L);
    kvb->mla = 1;
    kvb->tp_axis = 1, kvb->tp_unit = c->qk_nope_head_dim + c->v_head_dim;
    kvb->uk_dst = &w->w_uk_t;
    kvb->uv_dst = &w->w_uv;
    kvb->ukr_dst = &w->w_uk;
    spec *o = add_spec(l, SPEC_MAT, D, H * c->v_head_dim, &w->o_proj, NULL, P "self_attn.o_proj.weight", L);
    o->tp_axis = 2, o->tp_unit = c->v_head_dim;
    w->is_moe = dsi_config_is_moe_layer(c, L);
    if (!w->is_moe) {
      int64_t I = c->intermediate_size;
      add_spec(l, SPEC_MAT, I, D, &w->gate_proj, NULL, P "mlp.gate_proj.weight", L)->role = ROLE_MLP;
      add_spec(l, SPEC_MAT, I, D, &w->up_proj, NULL, P "mlp.up_proj.weight", L)->role = ROLE_MLP;
      link_gate_up(l, &w->gate_up);
      add_spec(l, SPEC_MAT, D, I, &w->down_proj, NULL, P "mlp.down_proj.weight", L)->role = ROLE_MLP;
      continue;
    }
    int E = c->n_routed_experts;
    int64_t I = c->moe_intermediate_size;
    add_spec(l, SPEC_MAT, E, D, &w->gate, NULL, P "mlp.gate.weight", L)->exact = 1;
    if (c->has_e_score_correction_bias)
      add_spec(l, SPEC_VEC, 1, E, NULL, &w->e_score_correction_bias, P "mlp.gate.e_score_correction_bias", L);
    w->exp_gate = calloc(E, sizeof(dsi_mat));
    w->exp_up = calloc(E, sizeof(dsi_mat));
    w->exp_down = calloc(E, sizeof(dsi_mat));
    w->exp_gate_up = calloc(E, sizeof(dsi_mat));
    if (!w->exp_gate || !w->exp_up || !w->exp_down || !w->exp_gate_up)
      return dsi_errf(err, DSI_E_NOMEM, "out of memory for layer %d's %d experts", L, E);
    for (int e = m->exp_lo; e < m->exp_hi; e++) { /* this rank's share (expert parallel) */
      add_spec(l, SPEC_MAT, I, D, &w->exp_gate[e], NULL, P "mlp.experts.%d.gate_proj.weight", L, e)->role = ROLE_MLP;
      add_spec(l, SPEC_MAT, I, D, &w->exp_up[e], NULL, P "mlp.experts.%d.up_proj.weight", L, e)->role = ROLE_MLP;
      link_gate_up(l, &w->exp_gate_up[e]);
      add_spec(l, SPEC_MAT, D, I, &w->exp_down[e], NULL, P "mlp.experts.%d.down_proj.weight", L, e)->role = ROLE_MLP;
    }
    if (c->n_shared_experts > 0) {
      int64_t S = (int64_t)c->n_shared_experts * I;
      add_spec(l, SPEC_MAT, S, D, &w->gate_proj, NULL, P "mlp.shared_experts.gate_proj.weight", L)->role = ROLE_MLP;
      add_spec(l, SPEC_MAT, S, D, &w->up_proj, NULL, P "mlp.shared_experts.up_proj.weight", L)->role = ROLE_MLP;
      link_gate_up(l, &w->gate_up);
      add_spec(l, SPEC_MAT, D, S, &w->down_proj, NULL, P "mlp.shared_experts.down_proj.weight", L)->role = ROLE_MLP;
    }
#undef P
  }
  add_spec(l, SPEC_VEC, 1, D, NULL, &m->norm, "model.norm.weight");
  if (!c->tie_word_embeddings)
    add_spec(l, SPEC_MAT, c->vocab_size, D, &m->lm_head, NULL, "lm_head.weight")->role = ROLE_HEAD;
  if (l->oom) return dsi_errf(err, DSI_E_NOMEM, "out of memory for the list of %d tensors", l->n);
  return DSI_OK;
}

/* ---- the config against the checkpoint, before anything is sized by it ---- */
static int has_layer_tensor(const dsi_st_set *st, int L, const char *what) {
  char name[160];
  snprintf(name, sizeof name, "model.layers.%d.%s", L, what);
  return dsi_st_find(st, name) != NULL;
}

/* num_hidden_layers against the layers the files hold (so a typo fails
 * here, not in an allocation by it), and keys whose tensors say otherwise */
static int check_config_tensors(const dsi_model *m, dsi_err *err) {
  const dsi_config *c = &m->cfg;
  const dsi_st_set *st = &m->st;
  int held = 0; /* layers 0 .. held-1 are in the files */
  while (held < st->n_tensors && has_layer_tensor(st, held, "input_layernorm.weight")) held++;
  if (held < c->num_hidden_layers)
    return dsi_errf(err, DSI_E_CONFIG, "config.json: num_hidden_layers is %d but the checkpoint in %s holds %d layer%s "
                    "(model.layers.%d.input_layernorm.weight is missing)", c->num_hidden_layers, m->dir, held,
                    held == 1 ? "" : "s", held);
  if (held > c->num_hidden_layers + c->num_nextn_predict_layers)
    dsi_log(DSI_LOG_WARN, "config.json: num_hidden_layers is %d (and num_nextn_predict_layers %d) but the checkpoint "
            "holds %d layers: layers %d..%d are not used", c->num_hidden_layers, c->num_nextn_predict_layers, held,
            c->num_hidden_layers + c->num_nextn_predict_layers, held - 1);
  for (int L = 0; L < c->num_hidden_layers; L++) {
    if (!dsi_config_is_moe_layer(c, L)) continue;
    if (c->n_shared_experts == 0 && has_layer_tensor(st, L, "mlp.shared_experts.gate_proj.weight"))
      return dsi_errf(err, DSI_E_CONFIG, "config.json: n_shared_experts is 0 but the checkpoint holds "
                      "model.layers.%d.mlp.shared_experts.gate_proj.weight (the shared expert would be left out)", L);
    break;
  }
  return DSI_OK;
}

/* ---- non-finite values: refused unless allowed ---- */
/* 1 when n values of dtype t at p hold a NaN or an infinity (FP8 E4M3FN:
 * the bytes 0x7f and 0xff are NaN; it has no infinity) */
static int has_nonfinite(dsi_dtype t, const void *p, size_t n) {
  unsigned bad = 0;
  switch (t) {
  case DSI_DTYPE_F32: { const uint32_t *v = p; for (size_t i = 0; i < n; i++) bad |= (v[i] & 0x7f800000u) == 0x7f800000u; } break;
  case DSI_DTYPE_BF16: { const uint16_t *v = p; for (size_t i = 0; i < n; i++) bad |= (v[i] & 0x7f80u) == 0x7f80u; } break;
  case DSI_DTYPE_F16: { const uint16_t *v = p; for (size_t i = 0; i < n; i++) bad |= (v[i] & 0x7c00u) == 0x7c00u; } break;
  case DSI_DTYPE_F8_E4M3: { const uint8_t *v = p; for (size_t i = 0; i < n; i++) bad |= (v[i] & 0x7fu) == 0x7fu; } break;
  default: break;
  }
  return bad != 0;
}

static const char *file_of(const dsi_st_set *st, const dsi_st_tensor *t) {
  return st->files[t->file].path;
}

static int is_float_dtype(dsi_dtype d) {
  return d == DSI_DTYPE_F32 || d == DSI_DTYPE_BF16 || d == DSI_DTYPE_F16;
}

/* ---- check each tensor against the config; size the storage ---- */
static int resolve(dsi_model *m, spec_list *l, dsi_err *err) {
  const dsi_st_set *st = &m->st;
  for (int i = 0; i < l->n; i++) {
    spec *s = &l->v[i];
    s->t = dsi_st_find(st, s->name);
    if (!s->t)
      return dsi_errf(err, DSI_E_FORMAT, "%s: missing from the checkpoint in %s (%d tensors in %d files)",
                      s->name, m->dir, st->n_tensors, st->n_files);
    const dsi_st_tensor *t = s->t;
    int shape_ok = s->kind == SPEC_VEC ? (t->ndim == 1 && t->shape[0] == s->cols)
                                       : (t->ndim == 2 && t->shape[0] == s->rows && t->shape[1] == s->cols);
    if (!shape_ok) {
      char got[128] = "", *p = got;
      for (int d = 0; d < t->ndim && p < got + 100; d++)
        p += sprintf(p, "%s%lld", d ? "," : "", (long long)t->shape[d]);
      if (s->kind == SPEC_VEC)
        return dsi_errf(err, DSI_E_FORMAT, "%s: shape [%s] expected [%lld] in %s", s->name, got,
                        (long long)s->cols, file_of(st, t));
      return dsi_errf(err, DSI_E_FORMAT, "%s: shape [%s] expected [%lld,%lld] in %s", s->name, got,
                      (long long)s->rows, (long long)s->cols, file_of(st, t));
    }
    if (s->kind == SPEC_VEC) {
      if (!is_float_dtype(t->dtype))
        return dsi_errf(err, DSI_E_FORMAT, "%s: dtype %s not supported for a vector (F32/BF16/F16) in %s",
                        s->name, dsi_dtype_st_name(t->dtype), file_of(st, t));
      s->bytes = (size_t)s->cols * sizeof(float);
    } else if (t->dtype == DSI_DTYPE_F8_E4M3) {
      char sname[192];
      snprintf(sname, sizeof sname, "%s_scale_inv", s->name);
      s->scale = dsi_st_find(st, sname);
      int bs = m->cfg.weight_block_size[0] > 0 ? m->cfg.weight_block_size[0] : 128;
      int64_t sr = DSI_CEIL_DIV(s->rows, bs), sc = DSI_CEIL_DIV(s->cols, bs);
      if (!s->scale)
        return dsi_errf(err, DSI_E_FORMAT, "%s: F8_E4M3 weight without %s in %s", s->name, sname, file_of(st, t));
      if (s->scale->ndim != 2 || s->scale->shape[0] != sr || s->scale->shape[1] != sc ||
          !is_float_dtype(s->scale->dtype))
        return dsi_errf(err, DSI_E_FORMAT, "%s: expected a float tensor of shape [%lld,%lld] (one scale per %dx%d block) in %s",
                        sname, (long long)sr, (long long)sc, bs, bs, file_of(st, s->scale));
      s->bytes = t->nbytes;
      if (dsi_size_mul((size_t)sr * sc, sizeof(float), &s->scale_bytes))
        return dsi_errf(err, DSI_E_FORMAT, "%s: %lld x %lld scales do not fit in memory", sname, (long long)sr, (long long)sc);
    } else if (is_float_dtype(t->dtype)) {
      s->bytes = t->nbytes;
    } else {
      return dsi_errf(err, DSI_E_FORMAT, "%s: dtype %s not supported for a weight matrix in %s", s->name,
                      dsi_dtype_st_name(t->dtype), file_of(st, t));
    }
    m->file_bytes += t->nbytes + (s->scale ? s->scale->nbytes : 0);
  }
  return DSI_OK;
}

/* ---- tensor parallel: this rank's heads of the attention weights ---- */
/* Rows [r0, r0 + nr) and columns [c0, c0 + nc) of s's tensor, copied out
 * of the file into memory of s's own. FP8 keeps its bytes and the scales
 * of the blocks it covers when the slice starts on block boundaries (V3's
 * heads: 192 q rows, 256 kv_b rows, 128 o_proj columns, so any even share
 * of its 128 heads); otherwise its blocks would straddle the slice, and it
 * is widened to f32 (w = fp8 * scale, what the kernels compute). */
static void drop_source(const dsi_model *m, const dsi_st_tensor *t, const void *p, size_t n);

static int take_slice(dsi_model *m, spec *s, int64_t r0, int64_t nr, int64_t c0, int64_t nc, dsi_err *err) {
  const dsi_st_tensor *t = s->t;
  int64_t cols = t->shape[1];
  size_t es = dsi_dtype_size(t->dtype);
  int bs = m->cfg.weight_block_size[0] > 0 ? m->cfg.weight_block_size[0] : 128;
  int widen = s->scale && (r0 % bs || c0 % bs);
  dsi_dtype out = widen ? DSI_DTYPE_F32 : t->dtype;
  size_t os = dsi_dtype_size(out), n = (size_t)nr * nc;
  float *sc = NULL;
  s->own_data = malloc(n * os);
  if (widen && (sc = malloc(s->scale_bytes)))
    dsi_to_f32(s->scale->dtype, s->scale->data, sc, s->scale_bytes / sizeof(float));
  if (!s->own_data || (widen && !sc)) {
    free(sc);
    return dsi_errf(err, DSI_E_NOMEM, "%s: out of memory for this rank's %lld x %lld slice", s->name, (long long)nr,
                    (long long)nc);
  }
  int64_t scols = s->scale ? s->scale->shape[1] : 0;
  for (int64_t i = 0; i < nr; i++) {
    const uint8_t *src = (const uint8_t *)t->data + ((size_t)(r0 + i) * cols + c0) * es;
    if (!widen) {
      memcpy((uint8_t *)s->own_data + (size_t)i * nc * os, src, nc * os);
      continue;
    }
    float *dst = (float *)s->own_data + (size_t)i * nc;
    for (int64_t j = 0; j < nc; j++)
      dst[j] = dsi_fp8_to_f32(src[j]) * sc[(size_t)((r0 + i) / bs) * scols + (c0 + j) / bs];
  }
  free(sc);
  /* the rows read from the file leave this process's memory: the copy is what stays */
  drop_source(m, t, (const uint8_t *)t->data + (size_t)r0 * cols * es, (size_t)nr * cols * es);
  m->file_bytes -= t->nbytes + (s->scale ? s->scale->nbytes : 0);
  s->own = *t;
  s->own.dtype = out;
  s->own.shape[0] = nr;
  s->own.shape[1] = nc;
  s->own.nbytes = n * os;
  s->own.data = s->own_data;
  s->own.file = -1;
  s->t = &s->own;
  s->rows = nr;
  s->cols = nc;
  s->bytes = s->own.nbytes;
  if (s->scale && !widen) { /* the scales of the blocks it covers */
    int64_t b0 = r0 / bs, b1 = DSI_CEIL_DIV(r0 + nr, bs), k0 = c0 / bs, k1 = DSI_CEIL_DIV(c0 + nc, bs);
    size_t ss = dsi_dtype_size(s->scale->dtype);
    if (!(s->own_scale_data = malloc((size_t)(b1 - b0) * (k1 - k0) * ss)))
      return dsi_errf(err, DSI_E_NOMEM, "%s: out of memory for this rank's scales", s->name);
    for (int64_t i = b0; i < b1; i++)
      memcpy((uint8_t *)s->own_scale_data + (size_t)(i - b0) * (k1 - k0) * ss,
             (const uint8_t *)s->scale->data + ((size_t)i * scols + k0) * ss, (size_t)(k1 - k0) * ss);
    s->own_scale = *s->scale;
    s->own_scale.shape[0] = b1 - b0;
    s->own_scale.shape[1] = k1 - k0;
    s->own_scale.nbytes = (size_t)(b1 - b0) * (k1 - k0) * ss;
    s->own_scale.data = s->own_scale_data;
    s->own_scale.file = -1;
    s->scale = &s->own_scale;
    s->scale_bytes = (size_t)(b1 - b0) * (k1 - k0) * sizeof(float);
  } else if (widen) {
    s->scale = NULL;
    s->scale_bytes = 0;
  }
  m->file_bytes += s->own.nbytes + (s->scale ? s->scale->nbytes : 0);
  return DSI_OK;
}

/* heads [H r / n, H (r + 1) / n) of every layer's attention; the config
 * then counts this rank's heads */
static int slice_heads(dsi_model *m, spec_list *l, int rank, int n, dsi_err *err) {
  int H = m->cfg.num_attention_heads;
  if (H % n)
    return dsi_errf(err, DSI_E_INVAL, "%s: %d attention heads do not split evenly over %d tensor-parallel ranks", m->dir,
                    H, n);
  int64_t h0 = (int64_t)H * rank / n, nh = H / n;
  for (int i = 0; i < l->n; i++) {
    spec *s = &l->v[i];
    int rc = s->tp_axis == 1   ? take_slice(m, s, h0 * s->tp_unit, nh * s->tp_unit, 0, s->cols, err)
             : s->tp_axis == 2 ? take_slice(m, s, 0, s->rows, h0 * s->tp_unit, nh * s->tp_unit, err)
                               : DSI_OK;
    if (rc) return rc;
  }
  m->cfg.num_attention_heads = (int)nh;
  return DSI_OK;
}

static void free_slices(spec_list *l) {
  for (int i = 0; i < l->n; i++) {
    free(l->v[i].own_data);
    free(l->v[i].own_scale_data);
  }
}

/* ---- storage: where each tensor goes, and in which layout ---- */
static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

/* kv_b_proj can be split into per-head panels only when the head dims are
 * whole panels */
static int can_pack_mla(const dsi_config *c) {
  return c->kv_lora_rank % DSI_TILE_N == 0 && c->v_head_dim % DSI_TILE_N == 0 && c->qk_nope_head_dim % DSI_TILE_N == 0;
}

static void src_view(const dsi_model *m, spec *s) {
  dsi_mat *v = &s->src;
  memset(v, 0, sizeof *v);
  v->dtype = s->t->dtype;
  v->rows = (int)s->rows;
  v->cols = (int)s->cols;
  v->data = s->t->data;
  v->layout = DSI_LAYOUT_ROWS;
  if (s->scale) {
    v->block = m->cfg.weight_block_size[0] > 0 ? m->cfg.weight_block_size[0] : 128;
    v->scale_cols = (int)DSI_CEIL_DIV(s->cols, v->block);
  }
}

/* the absorbed factors of kv_b_proj: W_UK^T [H*kv_lora, nope] kept exact
 * (BF16 stays BF16; FP8 is widened to F32) under every --quant, W_UV [H*v,
 * kv_lora] as stored or quantized */
/* W_UK^T per head, [H*kv_lora, nope]: exact in the source's dtype, as its
 * row form is, so that the absorbed and non-absorbed forms multiply the
 * same weights (each form quantized on its own would not). FP8
 * stays FP8 when each head's k rows are whole scale blocks (V3: nope = 128
 * = block), since a transposed 128x128 block keeps its one scale (a
 * quarter of f32's bytes for decode to read); else f32 (bf16 for bf16). */
static int uk_fp8(const dsi_config *c, const dsi_mat *src) {
  int b = src->block, nope = c->qk_nope_head_dim, vd = c->v_head_dim;
  return src->dtype == DSI_DTYPE_F8_E4M3 && b > 0 && nope % b == 0 && (nope + vd) % b == 0 &&
         c->kv_lora_rank % DSI_TILE_N == 0 && b % DSI_TILE_N == 0;
}
static dsi_mat uk_shape(const dsi_config *c, const dsi_mat *src) {
  dsi_mat s = {0};
  s.dtype = src->dtype == DSI_DTYPE_BF16 ? DSI_DTYPE_BF16 : uk_fp8(c, src) ? DSI_DTYPE_F8_E4M3 : DSI_DTYPE_F32;
  s.rows = c->num_attention_heads * c->kv_lora_rank;
  s.cols = c->qk_nope_head_dim;
  if (s.dtype == DSI_DTYPE_F8_E4M3) {
    s.block = src->block;
    s.scale_cols = (int)DSI_CEIL_DIV(s.cols, s.block);
  }
  return s;
}

/* head h's W_UK^T as FP8, transposed byte for byte, into its panels of uk */
static void pack_uk_fp8(const dsi_config *c, const dsi_mat *src, int h, const dsi_mat *uk, uint8_t *tq) {
  int nope = c->qk_nope_head_dim, vd = c->v_head_dim, kvl = c->kv_lora_rank, b = src->block;
  int base = h * (nope + vd);
  const uint8_t *q = src->data;
  for (int cc = 0; cc < kvl; cc++)
    for (int d = 0; d < nope; d++) tq[(size_t)cc * nope + d] = q[(size_t)(base + d) * src->cols + cc];
  dsi_mat hsrc = {.dtype = DSI_DTYPE_F8_E4M3, .rows = kvl, .cols = nope, .data = tq, .layout = DSI_LAYOUT_ROWS,
                  .block = b, .scale_cols = uk->scale_cols};
  dsi_mat hdst = dsi_mat_panels(uk, h * kvl / DSI_TILE_N, kvl);
  dsi_pack_rows(&hsrc, &hdst, 0, kvl);
  /* panel p (rows 16p.. of the transpose = columns of the source) and
   * block column cb (source rows base + b cb ..) */
  for (int p = 0; p < kvl / DSI_TILE_N; p++)
    for (int cb = 0; cb < uk->scale_cols; cb++)
      ((float *)hdst.scale)[(size_t)p * uk->scale_cols + cb] =
          src->scale[(size_t)((base + cb * b) / b) * src->scale_cols + p * DSI_TILE_N / b];
}
static dsi_mat uv_shape(const dsi_config *c, const dsi_mat *src) {
  dsi_mat s = *src;
  s.rows = c->num_attention_heads * c->v_head_dim;
  return s;
}
/* W_UK in row form [H*nope, kv_lora], as stored: the keys the
 * non-absorbed prefill expands.
 * Its rows are whole 128-row FP8 blocks of kv_b_proj in V3 (nope = 128),
 * so FP8 stays FP8 with the source's scales. */
static dsi_mat ukr_shape(const dsi_config *c, const dsi_mat *src) {
  dsi_mat s = *src;
  s.rows = c->num_attention_heads * c->qk_nope_head_dim;
  return s;
}

/* the shape a quantized weight is packed in (qdt: DSI_DTYPE_I8 or I4) */
static dsi_mat quant_shape(const dsi_mat *src, int qdt) {
  dsi_mat s = *src;
  s.dtype = (dsi_dtype)qdt;
  s.scale = NULL;
  if (qdt == DSI_DTYPE_I4) s.block = DSI_I4_GROUP;
  return s;
}

/* the roles --quant int4 makes INT4, a bit per ROLE_* */
#define I4_ROLES (1 << ROLE_MLP | 1 << ROLE_ATTN) /* lm_head: quant_head */

/* what --quant makes of a packed linear weight (0: kept as stored): INT8,
 * or with int4 INT4 for the MLP and attention projections (README, --quant
 * int4: measured, INT4 attention halves its prefill time where INT8 has no
 * VNNI kernel, for a little accuracy); lm_head as --quant-head says (INT8
 * by default: INT4 costs more accuracy than all the rest); INT8 for W_UV
 * (kv_b_proj's): the attention's latent side multiplies f32 or bf16
 * activations, never int8 ones (dsi_fctx's mm_lat), and the INT4 kernels
 * take only int8 */
static int quant_dtype(const dsi_model *m, const spec *s) {
  if (s->role == ROLE_HEAD)
    return m->quant_head == DSI_QUANT_HEAD_INT4 ? DSI_DTYPE_I4 : m->quant_head == DSI_QUANT_HEAD_KEEP ? 0 : DSI_DTYPE_I8;
  if (m->quant == DSI_QUANT_INT4 && (I4_ROLES >> s->role & 1) && !s->mla) return DSI_DTYPE_I4;
  return DSI_DTYPE_I8;
}

/* the quantizer of one 16-row panel into a weight of dtype qdt */
typedef void (*quant_panel_fn)(const dsi_mat *src, int r, const dsi_mat *dst, int p, float *work);
static quant_panel_fn quant_panel(int qdt) { return qdt == DSI_DTYPE_I4 ? dsi_quant_panel_i4 : dsi_quant_panel_i8; }

static void quant_describe(const dsi_mat *src, int qdt, dsi_mat *dst, void *mem) {
  dsi_mat q = quant_shape(src, qdt);
  dsi_pack_describe(&q, dst, mem);
}

static size_t plan_storage(dsi_model *m, spec_list *l) {
  size_t off = 0;
  for (int i = 0; i < l->n; i++) {
    spec *s = &l->v[i];
    src_view(m, s);
    /* kv_b_proj packed whole (heads not in whole panels) holds W_UK too: exact */
    s->quant = m->quant && s->kind == SPEC_MAT && m->packed && !s->exact && s->mat != &m->embed_tokens &&
               (!s->mla || can_pack_mla(&m->cfg)) ? quant_dtype(m, s) : 0;
    dsi_mat q = quant_shape(&s->src, s->quant ? s->quant : DSI_DTYPE_I8);
    if (s->kind == SPEC_VEC) {
      s->store = STORE_ROWS;
      s->off = off;
      off += align64((size_t)s->cols * sizeof(float));
    } else if (s->store == STORE_NONE) {
      /* the up half of a gate/up pair, packed with its gate */
    } else if (!m->packed || s->mat == &m->embed_tokens) {
      s->store = STORE_ROWS;
      s->off = off;
      off += m->mlocked ? 0 : align64(s->t->nbytes);
      if (s->scale_bytes) {
        s->scale_off = off;
        off += align64(s->scale_bytes);
      }
    } else if (s->pair >= 0) {
      s->store = STORE_GATE_UP;
      l->v[s->pair].store = STORE_NONE;
      s->off = off;
      off += align64(dsi_pack_gate_up_bytes(s->quant ? &q : &s->src));
    } else if (s->mla && can_pack_mla(&m->cfg)) {
      s->store = STORE_MLA;
      dsi_mat uk = uk_shape(&m->cfg, &s->src), ukr = ukr_shape(&m->cfg, &s->src);
      dsi_mat uv = uv_shape(&m->cfg, s->quant ? &q : &s->src);
      s->off = off;
      off += align64(dsi_pack_bytes(&uk));
      s->off2 = off;
      off += align64(dsi_pack_bytes(&uv));
      s->off3 = off;
      off += align64(dsi_pack_bytes(&ukr));
    } else {
      s->store = STORE_TILES;
      s->off = off;
      off += align64(dsi_pack_bytes(s->quant ? &q : &s->src));
    }
  }
  return off;
}

/* ---- filling: work items run on a thread pool ---- */
typedef struct {
  int spec, r0, r1;
} item;

typedef struct {
  dsi_model *m;
  spec_list *l;
  item *items;
  int n_items;
  atomic_int next;
  atomic_size_t done_bytes;
  int show;
  double t0;
  atomic_int nonfinite; /* the first spec found holding NaN or infinity, + 1; 0 none */
  atomic_int oom;       /* a scratch buffer could not be allocated */
} fill_job;

static void note_nonfinite(fill_job *j, int spec_i, dsi_dtype t, const void *p, size_t n) {
  int none = 0;
  if (has_nonfinite(t, p, n)) atomic_compare_exchange_strong(&j->nonfinite, &none, spec_i + 1);
}

/* Release the page-cache pages of a copied source range of tensor t from
 * our RSS. A fault maps a whole large folio of the page cache (up to 2 MB),
 * so the edges of neighbouring tensors, copied earlier, get mapped again
 * and would stay: the range is widened by 2 MB each side, inside t's file
 * mapping. A neighbour not copied yet merely faults its pages in again. */
static void drop_source(const dsi_model *m, const dsi_st_tensor *t, const void *p, size_t n) {
  if (t->file < 0) return; /* a slice in memory of its own */
  const uintptr_t span = 2u << 20;
  const dsi_st_file *f = &m->st.files[t->file];
  uintptr_t lo = (uintptr_t)f->map, hi = lo + f->size;
  uintptr_t a = (uintptr_t)p & ~(span - 1), e = (uintptr_t)p + n + span;
  a = a >= lo + span ? a - span : lo; /* never outside the mapping: next to it may be our own memory */
  madvise((void *)a, DSI_MIN(e, hi) - a, MADV_DONTNEED);
}

/* describe a TILES matrix at mem whose FP8 scales are filled by the caller */
static void describe_no_scales(const dsi_mat *shape, dsi_mat *dst, void *mem) {
  dsi_mat tmp = *shape;
  tmp.dtype = DSI_DTYPE_BF16;
  dsi_pack_describe(&tmp, dst, mem);
  dst->dtype = shape->dtype;
  dst->scale = NULL;
  if (shape->dtype == DSI_DTYPE_F8_E4M3)
    dst->scale = (float *)((uint8_t *)mem + align64((size_t)DSI_CEIL_DIV(shape->rows, DSI_TILE_N) * DSI_TILE_N * dst->kpad));
}

/* rows [r, r + n) of row-major src (whole 16-row panels) into panels from
 * p of TILES dst, FP8 scales copied panel by panel */
static void pack_panels(const dsi_mat *src, int r, int n, const dsi_mat *dst, int p) {
  dsi_mat vsrc = *src;
  vsrc.rows = n;
  vsrc.data = (const uint8_t *)src->data + (size_t)r * src->cols * dsi_dtype_size(src->dtype);
  dsi_mat vdst = dsi_mat_panels(dst, p, n);
  dsi_pack_rows(&vsrc, &vdst, 0, n);
  if (dst->scale)
    for (int q = 0; q < n / DSI_TILE_N; q++)
      memcpy((float *)dst->scale + (size_t)(p + q) * dst->scale_cols,
             src->scale + (size_t)((r + q * DSI_TILE_N) / src->block) * src->scale_cols,
             src->scale_cols * sizeof(float));
}

/* kv_b_proj -> W_UK^T, W_UV and W_UK, one head at a time */
static int pack_mla(dsi_model *m, spec *s) {
  const dsi_config *c = &m->cfg;
  int H = c->num_attention_heads, nope = c->qk_nope_head_dim, vd = c->v_head_dim, kvl = c->kv_lora_rank;
  dsi_mat ush = uk_shape(c, &s->src), vsh = uv_shape(c, &s->src), ksh = ukr_shape(c, &s->src);
  dsi_mat *uk = s->uk_dst, *uv = s->uv_dst, *ukr = s->ukr_dst;
  if (ush.dtype == DSI_DTYPE_F8_E4M3) describe_no_scales(&ush, uk, m->mem + s->off);
  else dsi_pack_describe(&ush, uk, m->mem + s->off);
  DSI_ASSERT(s->quant != DSI_DTYPE_I4); /* W_UV is INT8 under --quant int4 too (quant_dtype) */
  if (s->quant) dsi_pack_describe_i8(&vsh, uv, m->mem + s->off2);
  else describe_no_scales(&vsh, uv, m->mem + s->off2);
  describe_no_scales(&ksh, ukr, m->mem + s->off3);
  float *rows = malloc((size_t)nope * kvl * sizeof(float));
  float *work = s->quant ? malloc((size_t)DSI_TILE_N * kvl * sizeof(float)) : NULL;
  float *tf = malloc((size_t)kvl * nope * sizeof(float));
  uint16_t *tb = malloc((size_t)kvl * nope * sizeof(uint16_t));
  uint8_t *tq = ush.dtype == DSI_DTYPE_F8_E4M3 ? malloc((size_t)kvl * nope) : NULL;
  int ok = rows && tf && tb && (!s->quant || work) && (ush.dtype != DSI_DTYPE_F8_E4M3 || tq);
  for (int h = 0; ok && h < H; h++) {
    int base = h * (nope + vd);
    if (tq) {
      pack_uk_fp8(c, &s->src, h, uk, tq);
      goto uk_done;
    }
    for (int d = 0; d < nope; d++) dsi_k_row_f32(&s->src, base + d, 0, kvl, rows + (size_t)d * kvl);
    for (int cc = 0; cc < kvl; cc++)
      for (int d = 0; d < nope; d++) {
        float v = rows[(size_t)d * kvl + cc];
        tf[(size_t)cc * nope + d] = v;
        tb[(size_t)cc * nope + d] = dsi_f32_to_bf16(v); /* exact when the source is BF16 */
      }
    dsi_mat hsrc = ush;
    hsrc.rows = kvl;
    hsrc.data = hsrc.dtype == DSI_DTYPE_BF16 ? (const void *)tb : (const void *)tf;
    dsi_mat hdst = dsi_mat_panels(uk, h * kvl / DSI_TILE_N, kvl);
    dsi_pack_rows(&hsrc, &hdst, 0, kvl);
  uk_done:
    pack_panels(&s->src, base, nope, ukr, h * nope / DSI_TILE_N);
    if (s->quant) {
      for (int q = 0; q < vd / DSI_TILE_N; q++)
        quant_panel(s->quant)(&s->src, base + nope + q * DSI_TILE_N, uv, h * vd / DSI_TILE_N + q, work);
      continue;
    }
    pack_panels(&s->src, base + nope, vd, uv, h * vd / DSI_TILE_N);
  }
  free(rows);
  free(tf);
  free(tb);
  free(tq);
  free(work);
  return ok ? DSI_OK : DSI_E_NOMEM;
}

/* rows [r0, r1) of a quantized TILES weight, or of both halves of a gate/up
 * pair (up is NULL otherwise), a 16-row panel at a time */
static int quant_rows(const spec *s, const spec *up, int r0, int r1) {
  float *work = malloc((size_t)DSI_TILE_N * s->cols * sizeof(float));
  if (!work) return DSI_E_NOMEM;
  const quant_panel_fn qp = quant_panel(s->quant);
  for (int r = r0; r < r1; r += DSI_TILE_N) {
    if (!up) {
      qp(&s->src, r, s->mat, r / DSI_TILE_N, work);
      continue;
    }
    qp(&s->src, r, s->gu_dst, 2 * (r / DSI_TILE_N), work);
    qp(&up->src, r, s->gu_dst, 2 * (r / DSI_TILE_N) + 1, work);
  }
  free(work);
  return DSI_OK;
}

static void run_item(fill_job *j, const item *it) {
  dsi_model *m = j->m;
  spec *s = &j->l->v[it->spec];
  const dsi_st_tensor *t = s->t;
  size_t row_bytes = (size_t)s->cols * dsi_dtype_size(t->dtype);
  const uint8_t *src = (const uint8_t *)t->data + (size_t)it->r0 * row_bytes;
  size_t n = (size_t)(it->r1 - it->r0) * row_bytes;
  if (s->kind == SPEC_VEC) note_nonfinite(j, it->spec, t->dtype, t->data, (size_t)s->cols);
  else note_nonfinite(j, it->spec, t->dtype, src, n / dsi_dtype_size(t->dtype));
  if (s->store == STORE_GATE_UP) { /* its up half, as far as this piece reads it */
    const spec *up = &j->l->v[s->pair];
    size_t un = s->quant ? n : up->t->nbytes;
    note_nonfinite(j, s->pair, up->t->dtype, (const uint8_t *)up->t->data + (s->quant ? (size_t)it->r0 * row_bytes : 0),
                   un / dsi_dtype_size(up->t->dtype));
  }
  switch (s->store) {
  case STORE_ROWS:
    if (s->kind == SPEC_VEC) dsi_to_f32(t->dtype, t->data, *s->vec, (size_t)s->cols);
    else if (!m->mlocked) memcpy(m->mem + s->off + (size_t)it->r0 * row_bytes, src, n);
    break;
  case STORE_TILES:
    if (!s->quant) dsi_pack_rows(&s->src, s->mat, it->r0, it->r1);
    else if (quant_rows(s, NULL, it->r0, it->r1)) atomic_store(&j->oom, 1);
    break;
  case STORE_GATE_UP: {
    spec *up = &j->l->v[s->pair];
    if (s->quant) { /* in pieces, as the gate's rows */
      if (quant_rows(s, up, it->r0, it->r1)) atomic_store(&j->oom, 1);
      drop_source(m, up->t, (const uint8_t *)up->t->data + (size_t)it->r0 * row_bytes, n);
      atomic_fetch_add(&j->done_bytes, n);
      break;
    }
    dsi_pack_gate_up(&s->src, &up->src, s->gu_dst, m->mem + s->off);
    if (!m->mlocked) drop_source(m, up->t, up->t->data, up->t->nbytes);
    atomic_fetch_add(&j->done_bytes, up->t->nbytes);
  } break;
  case STORE_MLA:
    if (pack_mla(m, s)) atomic_store(&j->oom, 1);
    break;
  case STORE_NONE:
    break;
  }
  if (!m->mlocked) drop_source(m, t, src, n);
  atomic_fetch_add(&j->done_bytes, n);
}

static void fill_task(void *ctx, int ith, int nth) {
  fill_job *j = ctx;
  double last = 0;
  for (;;) {
    int i = atomic_fetch_add(&j->next, 1);
    if (i >= j->n_items) break;
    run_item(j, &j->items[i]);
    if (ith == 0 && j->show && dsi_now() - last > 0.25) {
      last = dsi_now();
      size_t done = atomic_load(&j->done_bytes), total = j->m->file_bytes;
      double el = last - j->t0, eta = done ? el * (double)(total - done) / (double)done : 0;
      /* items run in tensor order: the current item's tensor tells how far we are */
      fprintf(stderr, "\rloading: %zu/%zu MB, %d/%d tensors, %.0f s left   ", done >> 20, total >> 20,
              j->items[i].spec + 1, j->l->n, eta);
    }
  }
}

/* Describe every destination (serially: cheap), cut the copying into
 * pieces of at most ~8 MB of source, and run them on n_threads. */
static int fill_all(dsi_model *m, spec_list *l, int n_threads, int show, double t0, int allow_nonfinite,
                    dsi_err *err) {
  const size_t piece = 8u << 20;
  item *items = NULL;
  int n_items = 0, cap = 0, rc = DSI_OK;
  const spec *scale_bad = NULL;
  for (int i = 0; i < l->n; i++) {
    spec *s = &l->v[i];
    if (s->kind == SPEC_MAT && s->scale) { /* FP8 scales widened to f32 */
      size_t ns = s->scale_bytes / sizeof(float);
      s->src_scale = s->store == STORE_ROWS ? (float *)(m->mem + s->scale_off) : malloc(ns * sizeof(float));
      if (!s->src_scale) return dsi_errf(err, DSI_E_NOMEM, "%s: out of memory for its scales", s->name);
      dsi_to_f32(s->scale->dtype, s->scale->data, s->src_scale, ns);
      if (has_nonfinite(DSI_DTYPE_F32, s->src_scale, ns) && !scale_bad) scale_bad = s;
      s->src.scale = s->src_scale;
      /* touching a scale maps the page-cache folio around it (often 2 MB
       * of the weight beside it): let it go now, not when the weight is done */
      if (!m->mlocked) drop_source(m, s->scale, s->scale->data, s->scale->nbytes);
    }
  }
  for (int i = 0; i < l->n; i++) {
    spec *s = &l->v[i];
    if (s->kind == SPEC_VEC) *s->vec = (float *)(m->mem + s->off);
    else if (s->store == STORE_ROWS) {
      *s->mat = s->src;
      if (!m->mlocked) s->mat->data = m->mem + s->off;
    } else if (s->store == STORE_TILES) {
      if (s->quant) quant_describe(&s->src, s->quant, s->mat, m->mem + s->off);
      else dsi_pack_describe(&s->src, s->mat, m->mem + s->off);
    } else if (s->store == STORE_GATE_UP && s->quant) { /* described here: filled in pieces */
      dsi_mat shape = s->src;
      shape.rows = (int)DSI_CEIL_DIV(s->rows, DSI_TILE_N) * DSI_TILE_N * 2;
      quant_describe(&shape, s->quant, s->gu_dst, m->mem + s->off);
    }
    if (s->store == STORE_NONE) continue;
    int step = 1 << 30, whole = s->kind == SPEC_VEC || s->store == STORE_MLA || (s->store == STORE_GATE_UP && !s->quant);
    if (s->kind == SPEC_MAT && !whole) { /* a gate/up piece reads as many rows of up */
      size_t rb = (size_t)s->cols * dsi_dtype_size(s->t->dtype) * (s->store == STORE_GATE_UP ? 2 : 1);
      step = (int)DSI_MAX(DSI_TILE_N, piece / rb / DSI_TILE_N * DSI_TILE_N);
    }
    for (int r = 0; r < s->rows || (r == 0 && s->rows == 0); r += step) {
      if (n_items == cap) {
        item *ni = realloc(items, (size_t)(cap = cap ? 2 * cap : 1024) * sizeof(item));
        if (!ni) {
          free(items);
          return dsi_errf(err, DSI_E_NOMEM, "out of memory for the loading plan");
        }
        items = ni;
      }
      items[n_items++] = (item){i, r, (int)DSI_MIN((int64_t)r + step, s->rows)};
      if (whole) break;
    }
  }
  fill_job j = {m, l, items, n_items, 0, 0, show, t0, 0, 0};
  dsi_pool *pool = dsi_pool_new(n_threads);
  if (pool) dsi_pool_run(pool, fill_task, &j);
  else fill_task(&j, 0, 1); /* no pool: this thread alone */
  dsi_pool_free(pool);
  if (show) fprintf(stderr, "\rloading: %zu MB in %.1f s%40s\n", m->file_bytes >> 20, dsi_now() - t0, "");
  int bad = atomic_load(&j.nonfinite) - 1;
  const char *bad_name = bad >= 0 ? l->v[bad].name : scale_bad ? scale_bad->name : NULL;
  if (atomic_load(&j.oom))
    rc = dsi_errf(err, DSI_E_NOMEM, "%s: out of memory for the scratch of packing the weights", m->dir);
  else if (bad_name && !allow_nonfinite)
    rc = dsi_errf(err, DSI_E_FORMAT, "%s%s: holds NaN or infinity (%s); --allow-nonfinite loads it anyway", bad_name,
                  bad < 0 ? "_scale_inv" : "", m->dir);
  else if (bad_name)
    dsi_log(DSI_LOG_WARN, "%s%s holds NaN or infinity: outputs that read it will be NaN", bad_name,
            bad < 0 ? "_scale_inv" : "");
  if (bad < 0) /* no weight holds a NaN byte: FP8 kernels may skip their NaN check */
    for (int i = 0; i < l->n; i++) {
      spec *s = &l->v[i];
      dsi_mat *dst[] = {s->mat, s->gu_dst, s->uk_dst, s->uv_dst, s->ukr_dst};
      for (size_t d = 0; d < DSI_ARRAY_LEN(dst); d++)
        if (s->kind == SPEC_MAT && dst[d]) dst[d]->nan_free = 1;
    }
  for (int i = 0; i < l->n; i++)
    if (l->v[i].src_scale && l->v[i].store != STORE_ROWS) free(l->v[i].src_scale);
  free(items);
  return rc;
}

static const char *dtype_summary(const spec_list *l) {
  int seen[DSI_DTYPE_COUNT] = {0};
  for (int i = 0; i < l->n; i++)
    if (l->v[i].kind == SPEC_MAT && strstr(l->v[i].name, "layers.")) seen[l->v[i].t->dtype] = 1;
  int n = seen[DSI_DTYPE_F32] + seen[DSI_DTYPE_BF16] + seen[DSI_DTYPE_F16] + seen[DSI_DTYPE_F8_E4M3];
  if (n != 1) return "mixed";
  return seen[DSI_DTYPE_F32] ? "f32" : seen[DSI_DTYPE_BF16] ? "bf16" : seen[DSI_DTYPE_F16] ? "f16" : "fp8";
}

static int check_limits(const dsi_config *c, dsi_err *err) {
  if (c->n_routed_experts > 1024)
    return dsi_errf(err, DSI_E_UNSUPPORTED, "config.json: n_routed_experts %d is over this build's limit of 1024", c->n_routed_experts);
  if (c->n_group > 256)
    return dsi_errf(err, DSI_E_UNSUPPORTED, "config.json: n_group %d is over this build's limit of 256", c->n_group);
  if (c->fp8 && c->weight_block_size[0] != c->weight_block_size[1])
    return dsi_errf(err, DSI_E_UNSUPPORTED, "config.json: quantization_config.weight_block_size must be square");
  return DSI_OK;
}

int dsi_model_open(dsi_model **out, const char *dir, const dsi_load_opts *opts, dsi_err *err) {
  dsi_load_opts defaults = {0};
  if (!opts) opts = &defaults;
  *out = NULL;
  double t0 = dsi_now();
  dsi_dtype_init();
  if (!*dir) return dsi_errf(err, DSI_E_INVAL, "the checkpoint directory is an empty name");
  if (opts->n_threads > dsi_max_threads())
    return dsi_errf(err, DSI_E_INVAL, "%d threads is over the limit of %d (%d per core, %d cores)", opts->n_threads,
                    dsi_max_threads(), DSI_THREADS_PER_CORE_MAX, dsi_ncpu());
  dsi_model *m = calloc(1, sizeof *m);
  if (!m || !(m->dir = strdup(dir))) {
    free(m);
    return dsi_errf(err, DSI_E_NOMEM, "%s: out of memory", dir);
  }
  spec_list l = {0};
  int rc = dsi_config_load(&m->cfg, dir, err);
  if (rc == DSI_OK) rc = check_limits(&m->cfg, err);
  if (rc == DSI_OK) rc = dsi_st_open(&m->st, dir, err);
  if (rc == DSI_OK) rc = check_config_tensors(m, err);
  if (rc != DSI_OK) goto fail;
  /* expert parallel: this rank's contiguous share of the routed experts */
  int ep = opts->ep_size > 1 ? opts->ep_size : 1, E = m->cfg.n_routed_experts;
  if (opts->ep_rank < 0 || opts->ep_rank >= ep || (ep > 1 && ep > E)) {
    rc = dsi_errf(err, DSI_E_INVAL, "%s: expert-parallel rank %d of %d: needs 0 <= rank < ranks <= n_routed_experts (%d)",
                  dir, opts->ep_rank, ep, E);
    goto fail;
  }
  m->exp_lo = (int)((int64_t)E * opts->ep_rank / ep);
  m->exp_hi = (int)((int64_t)E * (opts->ep_rank + 1) / ep);
  m->ep_size = ep;
  int tp = opts->tp_size > 1 ? opts->tp_size : 1;
  m->n_heads = m->cfg.num_attention_heads;
  if (opts->tp_rank < 0 || opts->tp_rank >= tp) {
    rc = dsi_errf(err, DSI_E_INVAL, "%s: tensor-parallel rank %d of %d", dir, opts->tp_rank, tp);
    goto fail;
  }
  if (tp > 1 && opts->mlock) {
    rc = dsi_errf(err, DSI_E_INVAL, "%s: --mlock computes from the file's own layout; tensor-parallel slices are copies", dir);
    goto fail;
  }
  m->tp_rank = opts->tp_rank;
  m->tp_size = tp;
  m->layers = calloc(m->cfg.num_hidden_layers, sizeof *m->layers);
  if (!m->layers) {
    rc = dsi_errf(err, DSI_E_NOMEM, "%s: out of memory for %d layers", dir, m->cfg.num_hidden_layers);
    goto fail;
  }
  if ((rc = plan_tensors(m, &l, err)) != DSI_OK) goto fail;
  if ((rc = resolve(m, &l, err)) != DSI_OK) goto fail;
  if (tp > 1 && (rc = slice_heads(m, &l, m->tp_rank, tp, err)) != DSI_OK) goto fail;
  int vs = opts->vocab_size_split > 1 ? opts->vocab_size_split : 1, V = m->cfg.vocab_size;
  m->vocab_split = vs;
  if (vs > 1) {
    if (opts->vocab_rank < 0 || opts->vocab_rank >= vs || vs > V) {
      rc = dsi_errf(err, DSI_E_INVAL, "%s: vocabulary share %d of %d", dir, opts->vocab_rank, vs);
      goto fail;
    }
    if (m->cfg.tie_word_embeddings || opts->mlock) {
      rc = dsi_errf(err, DSI_E_INVAL, "%s: lm_head split by vocabulary needs %s", dir,
                    opts->mlock ? "copies of its rows, not --mlock" : "an lm_head of its own (this one is the embedding)");
      goto fail;
    }
    int64_t v0 = (int64_t)V * opts->vocab_rank / vs, v1 = (int64_t)V * (opts->vocab_rank + 1) / vs;
    m->vocab_lo = (int)v0;
    for (int i = 0; i < l.n; i++)
      if (l.v[i].role == ROLE_HEAD && (rc = take_slice(m, &l.v[i], v0, v1 - v0, 0, l.v[i].cols, err)) != DSI_OK)
        goto fail;
  }

  /* --mlock computes from the locked mapping, so it keeps the file's
   * row-major layout; otherwise weights are packed unless --op-opt off */
  m->mlocked = opts->mlock;
  m->packed = !opts->mlock && !opts->op_opt_off;
  m->quant = opts->quant;
  if (m->quant != DSI_QUANT_NONE && m->quant != DSI_QUANT_INT8 && m->quant != DSI_QUANT_INT4) {
    rc = dsi_errf(err, DSI_E_INVAL, "%s: unknown quantization %d (0 = none, 1 = int8, 2 = int4)", dir, m->quant);
    goto fail;
  }
  m->quant_head = opts->quant_head;
  if (m->quant_head < DSI_QUANT_HEAD_INT8 || m->quant_head > DSI_QUANT_HEAD_KEEP || (m->quant_head && !m->quant)) {
    rc = dsi_errf(err, DSI_E_INVAL, "%s: %s", dir, m->quant ? "unknown lm_head quantization (0 = int8, 1 = int4, 2 = none)"
                                                           : "an lm_head quantization (--quant-head) needs --quant int8 or int4");
    goto fail;
  }
  if (m->quant && !m->packed) {
    rc = dsi_errf(err, DSI_E_INVAL, "%s: %s quantization packs the weights; it cannot be combined with %s", dir,
                  m->quant == DSI_QUANT_INT4 ? "int4" : "int8", opts->mlock ? "--mlock" : "--op-opt off");
    goto fail;
  }
  if (m->mlocked)
    for (int f = 0; f < m->st.n_files; f++)
      if (mlock(m->st.files[f].map, m->st.files[f].size) != 0) {
        rc = dsi_errf(err, DSI_E_NOMEM, "%s: mlock failed (%s); raise `ulimit -l` or load without --mlock",
                      m->st.files[f].path, strerror(errno));
        goto fail;
      }
  size_t total = plan_storage(m, &l), avail = opts->mem_available ? opts->mem_available : dsi_mem_available();
  if (avail && total > avail) {
    rc = dsi_errf(err, DSI_E_NOMEM, "%s: the weights%s need %.1f MB and %.1f MB of memory are available%s", dir,
                  tp > 1 || ep > 1 ? " of this rank's share" : "", total / 1e6, avail / 1e6,
                  opts->mem_available ? "" : " (MemAvailable)");
    goto fail;
  }
  m->mem_size = total;
  m->mem = dsi_alloc_big(total, !opts->no_hugepage);
  if (!m->mem) {
    rc = dsi_errf(err, DSI_E_NOMEM, "%s: cannot allocate %zu MB for the weights", dir, total >> 20);
    goto fail;
  }
  rc = fill_all(m, &l, opts->n_threads > 0 ? opts->n_threads : dsi_ncpu(), opts->progress && isatty(2), t0,
                opts->allow_nonfinite, err);
  if (rc != DSI_OK) goto fail;
  if (m->cfg.tie_word_embeddings) m->lm_head = m->embed_tokens;
  for (int L = 0; L < m->cfg.num_hidden_layers; L++) {
    m->layers[L].mla_fmt = m->packed && can_pack_mla(&m->cfg) ? DSI_MLA_SPLIT : DSI_MLA_KV_B;
    m->layers[L].ffn_fmt = m->packed ? DSI_FFN_GATE_UP : DSI_FFN_SEPARATE;
  }
  m->weight_dtype = m->quant == DSI_QUANT_INT4 ? "int4" : m->quant ? "int8" : dtype_summary(&l);
  m->weight_bytes = m->mlocked ? m->file_bytes : total;
  if (!m->mlocked) dsi_st_close(&m->st); /* weights live in m->mem now */
  free_slices(&l);
  free(l.v);
  m->load_seconds = dsi_now() - t0;
  *out = m;
  return DSI_OK;
fail:
  free_slices(&l);
  free(l.v);
  dsi_model_free(m);
  return rc;
}

void dsi_model_free(dsi_model *m) {
  if (!m) return;
  if (m->layers)
    for (int L = 0; L < m->cfg.num_hidden_layers; L++) {
      free(m->layers[L].exp_gate);
      free(m->layers[L].exp_up);
      free(m->layers[L].exp_down);
      free(m->layers[L].exp_gate_up);
    }
  free(m->layers);
  dsi_free_big(m->mem, m->mem_size);
  dsi_st_close(&m->st);
  free(m->dir);
  free(m);
}

static size_t mat_bytes(const dsi_mat *w) {
  if (!w->data) return 0;
  if (w->layout == DSI_LAYOUT_TILES) return dsi_pack_bytes(w);
  size_t b = (size_t)w->rows * w->cols * dsi_dtype_size(w->dtype);
  if (w->scale) b += (size_t)DSI_CEIL_DIV(w->rows, w->block) * w->scale_cols * sizeof(float);
  return b;
}

/* weight bytes a decode token reads (the decode roofline's numerator) */
static size_t active_bytes(const dsi_model *m) {
  const dsi_config *c = &m->cfg;
  size_t b = mat_bytes(&m->lm_head) + (size_t)c->hidden_size * dsi_dtype_size(m->embed_tokens.dtype);
  for (int L = 0; L < c->num_hidden_layers; L++) {
    const dsi_layer_weights *w = &m->layers[L];
    const dsi_mat *all[] = {&w->q_a_proj, &w->q_b_proj, &w->q_proj, &w->kv_a_proj_with_mqa, &w->kv_b_proj,
                            &w->w_uk_t, &w->w_uv, &w->o_proj, &w->gate_proj, &w->up_proj, &w->down_proj,
                            &w->gate_up, &w->gate};
    for (size_t i = 0; i < DSI_ARRAY_LEN(all); i++) b += mat_bytes(all[i]);
    if (w->is_moe) {
      int x = m->exp_lo;
      size_t e = mat_bytes(&w->exp_down[x]) + (w->ffn_fmt == DSI_FFN_GATE_UP ? mat_bytes(&w->exp_gate_up[x])
                                                                      : mat_bytes(&w->exp_gate[x]) + mat_bytes(&w->exp_up[x]));
      b += e * c->num_experts_per_tok;
    }
  }
  return b;
}

void dsi_model_get_info(const dsi_model *m, dsi_model_info *info) {
  const dsi_config *c = &m->cfg;
  memset(info, 0, sizeof *info);
  info->vocab_size = c->vocab_size;
  info->hidden_size = c->hidden_size;
  info->num_hidden_layers = c->num_hidden_layers;
  info->num_attention_heads = m->n_heads;
  info->n_routed_experts = c->n_routed_experts;
  info->num_experts_per_tok = c->num_experts_per_tok;
  info->max_position_embeddings = c->max_position_embeddings;
  info->bos_token_id = c->bos_token_id;
  info->eos_token_id = c->eos_token_id;
  info->weight_bytes = m->weight_bytes;
  info->active_bytes_per_token = active_bytes(m);
  info->file_bytes = m->file_bytes;
  info->load_seconds = m->load_seconds;
  info->weight_dtype = m->weight_dtype;
}
