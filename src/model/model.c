/* model: open a checkpoint directory — config.json + safetensors — check
 * every tensor the forward needs against the config, and copy the weights
 * into anonymous memory (or lock the mapping with --mlock). */
#define _GNU_SOURCE
#include "model/model.h"
#include "base/pool.h"

#include <errno.h>
#include <stdarg.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* One tensor the forward reads: where it goes and what it must look like. */
typedef enum { SPEC_MAT, SPEC_VEC } spec_kind;
typedef struct {
  char name[160];
  spec_kind kind;
  int64_t rows, cols;        /* VEC: rows = 1 */
  dsi_mat *mat;              /* SPEC_MAT destination */
  float **vec;               /* SPEC_VEC destination (always f32) */
  const dsi_st_tensor *t, *scale;
  size_t off, scale_off, bytes, scale_bytes;
} spec;

typedef struct {
  spec *v;
  int n, cap;
} spec_list;

static void add_spec(spec_list *l, spec_kind kind, int64_t rows, int64_t cols, dsi_mat *mat,
                     float **vec, const char *fmt, ...) __attribute__((format(printf, 7, 8)));
static void add_spec(spec_list *l, spec_kind kind, int64_t rows, int64_t cols, dsi_mat *mat,
                     float **vec, const char *fmt, ...) {
  if (l->n == l->cap) l->v = dsi_xrealloc(l->v, (l->cap = l->cap ? 2 * l->cap : 256) * sizeof(spec));
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
}

/* ---- what the forward needs, by config ---- */
static void plan_tensors(dsi_model *m, spec_list *l) {
  const dsi_config *c = &m->cfg;
  int64_t H = c->num_attention_heads, D = c->hidden_size;
  int64_t qk = c->qk_nope_head_dim + c->qk_rope_head_dim;
  add_spec(l, SPEC_MAT, c->vocab_size, D, &m->embed_tokens, NULL, "model.embed_tokens.weight");
  for (int L = 0; L < c->num_hidden_layers; L++) {
    dsi_layer_weights *w = &m->layers[L];
#define P "model.layers.%d."
    add_spec(l, SPEC_VEC, 1, D, NULL, &w->input_layernorm, P "input_layernorm.weight", L);
    add_spec(l, SPEC_VEC, 1, D, NULL, &w->post_attention_layernorm, P "post_attention_layernorm.weight", L);
    if (c->q_lora_rank > 0) {
      add_spec(l, SPEC_MAT, c->q_lora_rank, D, &w->q_a_proj, NULL, P "self_attn.q_a_proj.weight", L);
      add_spec(l, SPEC_VEC, 1, c->q_lora_rank, NULL, &w->q_a_layernorm, P "self_attn.q_a_layernorm.weight", L);
      add_spec(l, SPEC_MAT, H * qk, c->q_lora_rank, &w->q_b_proj, NULL, P "self_attn.q_b_proj.weight", L);
    } else {
      add_spec(l, SPEC_MAT, H * qk, D, &w->q_proj, NULL, P "self_attn.q_proj.weight", L);
    }
    add_spec(l, SPEC_MAT, c->kv_lora_rank + c->qk_rope_head_dim, D, &w->kv_a_proj_with_mqa, NULL,
             P "self_attn.kv_a_proj_with_mqa.weight", L);
    add_spec(l, SPEC_VEC, 1, c->kv_lora_rank, NULL, &w->kv_a_layernorm, P "self_attn.kv_a_layernorm.weight", L);
    add_spec(l, SPEC_MAT, H * (c->qk_nope_head_dim + c->v_head_dim), c->kv_lora_rank, &w->kv_b_proj, NULL,
             P "self_attn.kv_b_proj.weight", L);
    add_spec(l, SPEC_MAT, D, H * c->v_head_dim, &w->o_proj, NULL, P "self_attn.o_proj.weight", L);
    w->is_moe = dsi_config_is_moe_layer(c, L);
    if (!w->is_moe) {
      int64_t I = c->intermediate_size;
      add_spec(l, SPEC_MAT, I, D, &w->gate_proj, NULL, P "mlp.gate_proj.weight", L);
      add_spec(l, SPEC_MAT, I, D, &w->up_proj, NULL, P "mlp.up_proj.weight", L);
      add_spec(l, SPEC_MAT, D, I, &w->down_proj, NULL, P "mlp.down_proj.weight", L);
      continue;
    }
    int E = c->n_routed_experts;
    int64_t I = c->moe_intermediate_size;
    add_spec(l, SPEC_MAT, E, D, &w->gate, NULL, P "mlp.gate.weight", L);
    if (c->has_e_score_correction_bias)
      add_spec(l, SPEC_VEC, 1, E, NULL, &w->e_score_correction_bias, P "mlp.gate.e_score_correction_bias", L);
    w->exp_gate = dsi_xcalloc(E, sizeof(dsi_mat));
    w->exp_up = dsi_xcalloc(E, sizeof(dsi_mat));
    w->exp_down = dsi_xcalloc(E, sizeof(dsi_mat));
    for (int e = 0; e < E; e++) {
      add_spec(l, SPEC_MAT, I, D, &w->exp_gate[e], NULL, P "mlp.experts.%d.gate_proj.weight", L, e);
      add_spec(l, SPEC_MAT, I, D, &w->exp_up[e], NULL, P "mlp.experts.%d.up_proj.weight", L, e);
      add_spec(l, SPEC_MAT, D, I, &w->exp_down[e], NULL, P "mlp.experts.%d.down_proj.weight", L, e);
    }
    if (c->n_shared_experts > 0) {
      int64_t S = (int64_t)c->n_shared_experts * I;
      add_spec(l, SPEC_MAT, S, D, &w->gate_proj, NULL, P "mlp.shared_experts.gate_proj.weight", L);
      add_spec(l, SPEC_MAT, S, D, &w->up_proj, NULL, P "mlp.shared_experts.up_proj.weight", L);
      add_spec(l, SPEC_MAT, D, S, &w->down_proj, NULL, P "mlp.shared_experts.down_proj.weight", L);
    }
#undef P
  }
  add_spec(l, SPEC_VEC, 1, D, NULL, &m->norm, "model.norm.weight");
  if (!c->tie_word_embeddings)
    add_spec(l, SPEC_MAT, c->vocab_size, D, &m->lm_head, NULL, "lm_head.weight");
}

static const char *file_of(const dsi_st_set *st, const dsi_st_tensor *t) {
  return st->files[t->file].path;
}

static int is_float_dtype(dsi_dtype d) {
  return d == DSI_DTYPE_F32 || d == DSI_DTYPE_BF16 || d == DSI_DTYPE_F16;
}

/* ---- check each tensor against the config; size the storage ---- */
static int resolve(dsi_model *m, spec_list *l, size_t *total, dsi_err *err) {
  const dsi_st_set *st = &m->st;
  size_t off = 0;
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
      s->scale_bytes = (size_t)(sr * sc) * sizeof(float);
    } else if (is_float_dtype(t->dtype)) {
      s->bytes = t->nbytes;
    } else {
      return dsi_errf(err, DSI_E_FORMAT, "%s: dtype %s not supported for a weight matrix in %s", s->name,
                      dsi_dtype_st_name(t->dtype), file_of(st, t));
    }
    s->off = off;
    off += (s->bytes + 63) & ~(size_t)63;
    if (s->scale_bytes) {
      s->scale_off = off;
      off += (s->scale_bytes + 63) & ~(size_t)63;
    }
    m->file_bytes += t->nbytes + (s->scale ? s->scale->nbytes : 0);
  }
  *total = off;
  return DSI_OK;
}

/* ---- copy ---- */
static void progress_line(size_t done, size_t total, int nt, int ntotal, double t0) {
  double el = dsi_now() - t0, eta = done ? el * (double)(total - done) / (double)done : 0;
  fprintf(stderr, "\rloading: %zu/%zu MB, %d/%d tensors, %.0f s left   ", done >> 20, total >> 20, nt,
          ntotal, eta);
}

/* Release the page-cache pages of a copied source range from our RSS. */
static void drop_source(const void *p, size_t n) {
  long pg = sysconf(_SC_PAGESIZE);
  uintptr_t a = (uintptr_t)p & ~(uintptr_t)(pg - 1), e = (uintptr_t)p + n;
  madvise((void *)a, e - a, MADV_DONTNEED);
}

static void fill(dsi_model *m, spec *s) {
  const dsi_st_tensor *t = s->t;
  if (s->kind == SPEC_VEC) {
    float *dst = (float *)(m->mem + s->off);
    dsi_to_f32(t->dtype, t->data, dst, (size_t)s->cols);
    *s->vec = dst;
    return;
  }
  dsi_mat *w = s->mat;
  w->dtype = t->dtype;
  w->rows = (int)s->rows;
  w->cols = (int)s->cols;
  if (m->mlocked) {
    w->data = t->data;
  } else {
    /* in 32 MB pieces, each dropped from the mapping once copied, so the
     * process never holds much more than one copy of the weights */
    const size_t piece = 32u << 20;
    for (size_t o = 0; o < s->bytes; o += piece) {
      size_t n = DSI_MIN(piece, s->bytes - o);
      memcpy(m->mem + s->off + o, (const uint8_t *)t->data + o, n);
      drop_source((const uint8_t *)t->data + o, n);
    }
    w->data = m->mem + s->off;
  }
  if (s->scale) {
    float *sc = (float *)(m->mem + s->scale_off);
    dsi_to_f32(s->scale->dtype, s->scale->data, sc, s->scale_bytes / sizeof(float));
    w->scale = sc;
    w->block = m->cfg.weight_block_size[0] > 0 ? m->cfg.weight_block_size[0] : 128;
    w->scale_cols = (int)DSI_CEIL_DIV(s->cols, w->block);
  }
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
  dsi_model *m = dsi_xcalloc(1, sizeof *m);
  m->dir = dsi_xstrdup(dir);
  spec_list l = {0};
  int rc = dsi_config_load(&m->cfg, dir, err);
  if (rc == DSI_OK) rc = check_limits(&m->cfg, err);
  if (rc == DSI_OK) rc = dsi_st_open(&m->st, dir, err);
  if (rc != DSI_OK) goto fail;
  m->layers = dsi_xcalloc(m->cfg.num_hidden_layers, sizeof *m->layers);
  plan_tensors(m, &l);
  size_t total = 0;
  if ((rc = resolve(m, &l, &total, err)) != DSI_OK) goto fail;

  m->mlocked = opts->mlock;
  if (m->mlocked) {
    /* compute from the mapping: lock it so the reclaimer cannot evict it;
     * only the vectors and FP8 scales (converted to f32) are copied */
    size_t small = 0;
    for (int i = 0; i < l.n; i++) {
      spec *s = &l.v[i];
      if (s->kind == SPEC_VEC) { s->off = small; small += (s->bytes + 63) & ~(size_t)63; }
      if (s->scale_bytes) { s->scale_off = small; small += (s->scale_bytes + 63) & ~(size_t)63; }
    }
    for (int f = 0; f < m->st.n_files; f++)
      if (mlock(m->st.files[f].map, m->st.files[f].size) != 0) {
        rc = dsi_errf(err, DSI_E_NOMEM, "%s: mlock failed (%s); raise `ulimit -l` or load without --mlock",
                      m->st.files[f].path, strerror(errno));
        goto fail;
      }
    total = small;
  }
  m->mem_size = total;
  m->mem = dsi_alloc_big(total);
  if (!m->mem) {
    rc = dsi_errf(err, DSI_E_NOMEM, "%s: cannot allocate %zu MB for the weights", dir, total >> 20);
    goto fail;
  }
  int show = opts->progress && isatty(2);
  size_t done = 0, last = 0;
  for (int i = 0; i < l.n; i++) {
    fill(m, &l.v[i]);
    done += l.v[i].t->nbytes;
    if (!m->mlocked) {
      drop_source(l.v[i].t->data, l.v[i].t->nbytes); /* vectors, and pages shared with the next tensor */
      if (l.v[i].scale) drop_source(l.v[i].scale->data, l.v[i].scale->nbytes);
    }
    if (show && (done - last > (64u << 20) || i == l.n - 1)) {
      progress_line(done, m->file_bytes, i + 1, l.n, t0);
      last = done;
    }
  }
  if (show) fputc('\n', stderr);
  if (m->cfg.tie_word_embeddings) m->lm_head = m->embed_tokens;
  m->weight_dtype = dtype_summary(&l);
  m->weight_bytes = m->mlocked ? m->file_bytes : total;
  if (!m->mlocked) dsi_st_close(&m->st); /* weights live in m->mem now */
  free(l.v);
  m->load_seconds = dsi_now() - t0;
  *out = m;
  return DSI_OK;
fail:
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
    }
  free(m->layers);
  dsi_free_big(m->mem, m->mem_size);
  dsi_st_close(&m->st);
  free(m->dir);
  free(m);
}

void dsi_model_get_info(const dsi_model *m, dsi_model_info *info) {
  const dsi_config *c = &m->cfg;
  memset(info, 0, sizeof *info);
  info->vocab_size = c->vocab_size;
  info->hidden_size = c->hidden_size;
  info->num_hidden_layers = c->num_hidden_layers;
  info->num_attention_heads = c->num_attention_heads;
  info->n_routed_experts = c->n_routed_experts;
  info->num_experts_per_tok = c->num_experts_per_tok;
  info->max_position_embeddings = c->max_position_embeddings;
  info->bos_token_id = c->bos_token_id;
  info->eos_token_id = c->eos_token_id;
  info->weight_bytes = m->weight_bytes;
  info->file_bytes = m->file_bytes;
  info->load_seconds = m->load_seconds;
  info->weight_dtype = m->weight_dtype;
}
