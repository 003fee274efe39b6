/* tests: dsi_mkmodel and the safetensors writer. Checkpoints are read back
 * here with a reader of this file's own (8-byte length, cJSON header), not
 * with the project's parser, and compared with the golden tiny config and
 * with each other: names, dtypes, shapes, offsets, FP8 blocks and scales,
 * shards and index, determinism, errors; and the tokenizer written beside
 * the weights (generated or copied, loadable, BOS/EOS as in config.json). */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <ftw.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/config.h"
#include "tools/internal.h"
#include "model/safetensors.h"
#include "tensor/dtype.h"
#include "tokenizer/tokenizer.h"

static int g_checks, g_fails;
#define CHECK(c) CHECKF(c, "%s", #c)
#define CHECKF(c, ...)                                     \
  do {                                                     \
    g_checks++;                                            \
    if (!(c)) {                                            \
      g_fails++;                                           \
      fprintf(stderr, "%s:%d: FAILED: ", __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                        \
      fputc('\n', stderr);                                 \
    }                                                      \
  } while (0)

/* the golden tiny-fp8 config.json (../shared/golden), keys sorted */
static const char k_golden_tiny_fp8_config[] =
    "{\"architectures\":[\"DeepseekV3ForCausalLM\"],\"attention_bias\":false,\"attention_dropout\":0.0,"
    "\"aux_loss_alpha\":0.001,\"bos_token_id\":0,\"eos_token_id\":1,\"ep_size\":1,\"first_k_dense_replace\":1,"
    "\"hidden_act\":\"silu\",\"hidden_size\":128,\"initializer_range\":0.02,\"intermediate_size\":320,"
    "\"kv_lora_rank\":64,\"max_position_embeddings\":512,\"model_type\":\"deepseek_v3\","
    "\"moe_intermediate_size\":64,\"moe_layer_freq\":1,\"n_group\":4,\"n_routed_experts\":16,"
    "\"n_shared_experts\":1,\"norm_topk_prob\":true,\"num_attention_heads\":4,\"num_experts_per_tok\":4,"
    "\"num_hidden_layers\":3,\"num_key_value_heads\":4,\"num_nextn_predict_layers\":0,\"pretraining_tp\":1,"
    "\"q_lora_rank\":96,\"qk_nope_head_dim\":32,\"qk_rope_head_dim\":16,\"quantization_config\":"
    "{\"activation_scheme\":\"dynamic\",\"fmt\":\"e4m3\",\"quant_method\":\"fp8\",\"weight_block_size\":[128,128]},"
    "\"rms_norm_eps\":1e-06,\"rope_scaling\":null,\"rope_theta\":10000,\"routed_scaling_factor\":2.5,"
    "\"scoring_func\":\"sigmoid\",\"seq_aux\":true,\"tie_word_embeddings\":false,\"topk_group\":2,"
    "\"topk_method\":\"noaux_tc\",\"torch_dtype\":\"bfloat16\",\"transformers_version\":\"4.46.3\","
    "\"use_cache\":true,\"v_head_dim\":32,\"vocab_size\":512}";

/* ---- files ---- */

static char g_tmp[64];

static char *path_in(const char *dir, const char *name) {
  static char buf[8][512];
  static int k;
  char *b = buf[k++ % 8];
  snprintf(b, sizeof buf[0], "%s/%s", dir, name);
  return b;
}

static uint8_t *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *b = malloc((size_t)n + 1);
  size_t got = fread(b, 1, (size_t)n, f);
  fclose(f);
  if (got != (size_t)n) { free(b); return NULL; }
  b[n] = 0;
  *len = (size_t)n;
  return b;
}

static int exists(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0;
}

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb; (void)flag; (void)ftw;
  return remove(p);
}
static void rm_rf(const char *dir) { nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS); }

/* ---- a safetensors reader of our own ---- */

typedef struct rt {
  char name[192];
  int dtype;
  int ndim;
  int64_t shape[4];
  size_t b, e;
} rt;

typedef struct rfile {
  uint8_t *buf;
  size_t size, base;
  rt *t;
  int n;
} rfile;

static void rfile_free(rfile *f) {
  free(f->buf);
  free(f->t);
  memset(f, 0, sizeof *f);
}

/* Reads path and checks the container: header length and padding, the
 * metadata, every entry, offsets contiguous in header order, file size. */
static int rfile_read(rfile *f, const char *path) {
  memset(f, 0, sizeof *f);
  f->buf = slurp(path, &f->size);
  CHECKF(f->buf, "%s: cannot read", path);
  if (!f->buf || f->size < 8) return 0;
  uint64_t hl = 0;
  for (int i = 0; i < 8; i++) hl |= (uint64_t)f->buf[i] << (8 * i);
  CHECKF(8 + hl <= f->size, "%s: header length %llu past the end", path, (unsigned long long)hl);
  if (8 + hl > f->size) return 0;
  CHECKF((8 + hl) % 8 == 0, "%s: data not 8-aligned (header %llu)", path, (unsigned long long)hl);
  f->base = 8 + hl;
  char *h = malloc(hl + 1);
  memcpy(h, f->buf + 8, hl);
  h[hl] = 0;
  size_t end = hl;
  while (end > 0 && h[end - 1] == ' ') end--;
  CHECKF(end > 0 && h[end - 1] == '}', "%s: header must end with '}' then spaces", path);
  CHECKF(hl - end < 8, "%s: %zu bytes of padding", path, hl - end);
  cJSON *j = cJSON_Parse(h);
  free(h);
  CHECKF(j && cJSON_IsObject(j), "%s: header is not a JSON object", path);
  if (!j) return 0;
  int n = cJSON_GetArraySize(j);
  f->t = calloc((size_t)n, sizeof *f->t);
  size_t off = 0;
  int idx = 0;
  for (cJSON *e = j->child; e; e = e->next, idx++) {
    if (idx == 0) {
      CHECKF(!strcmp(e->string, "__metadata__"), "%s: first key %s, expected __metadata__", path, e->string);
      cJSON *fmt = cJSON_GetObjectItemCaseSensitive(e, "format");
      CHECK(cJSON_IsString(fmt) && !strcmp(fmt->valuestring, "pt"));
      continue;
    }
    rt *t = &f->t[f->n++];
    snprintf(t->name, sizeof t->name, "%s", e->string);
    cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    cJSON *of = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    CHECKF(cJSON_IsString(dt) && cJSON_IsArray(sh) && cJSON_IsArray(of) && cJSON_GetArraySize(of) == 2,
           "%s: %s: bad entry", path, t->name);
    if (!cJSON_IsString(dt) || !cJSON_IsArray(sh) || cJSON_GetArraySize(of) != 2) continue;
    t->dtype = dsi_dtype_from_st_name(dt->valuestring);
    CHECKF(t->dtype >= 0, "%s: %s: dtype %s", path, t->name, dt->valuestring);
    t->ndim = cJSON_GetArraySize(sh);
    size_t numel = 1;
    for (int d = 0; d < t->ndim && d < 4; d++) {
      t->shape[d] = (int64_t)cJSON_GetArrayItem(sh, d)->valuedouble;
      numel *= (size_t)t->shape[d];
    }
    t->b = (size_t)cJSON_GetArrayItem(of, 0)->valuedouble;
    t->e = (size_t)cJSON_GetArrayItem(of, 1)->valuedouble;
    CHECKF(t->b == off, "%s: %s starts at %zu, previous ended at %zu", path, t->name, t->b, off);
    CHECKF(t->e - t->b == numel * dsi_dtype_size(t->dtype), "%s: %s: %zu bytes for %zu elements", path,
           t->name, t->e - t->b, numel);
    off = t->e;
  }
  cJSON_Delete(j);
  CHECKF(f->base + off == f->size, "%s: data ends at %zu, file has %zu bytes", path, f->base + off, f->size);
  return 1;
}

static const rt *rfile_find(const rfile *f, const char *name) {
  for (int i = 0; i < f->n; i++)
    if (!strcmp(f->t[i].name, name)) return &f->t[i];
  return NULL;
}
static const void *rdata(const rfile *f, const rt *t) { return f->buf + f->base + t->b; }
static size_t rnumel(const rt *t) {
  size_t n = 1;
  for (int d = 0; d < t->ndim; d++) n *= (size_t)t->shape[d];
  return n;
}

/* ---- the expected tensors of `tiny`, written out independently ---- */

typedef enum { K_LINEAR, K_PLAIN, K_BIAS } kind;
typedef struct ex { char name[192]; int ndim; int64_t shape[2]; kind k; } ex;
typedef struct exlist { ex t[512]; int n; } exlist;

static void ex_add(exlist *l, kind k, int64_t r, int64_t c, const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static void ex_add(exlist *l, kind k, int64_t r, int64_t c, const char *fmt, ...) {
  ex *e = &l->t[l->n++];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->name, sizeof e->name, fmt, ap);
  va_end(ap);
  e->k = k;
  e->ndim = c ? 2 : 1;
  e->shape[0] = r;
  e->shape[1] = c;
}

static void ex_mlp(exlist *l, const char *pre, int64_t hid, int64_t inter) {
  ex_add(l, K_LINEAR, inter, hid, "%s.gate_proj.weight", pre);
  ex_add(l, K_LINEAR, inter, hid, "%s.up_proj.weight", pre);
  ex_add(l, K_LINEAR, hid, inter, "%s.down_proj.weight", pre);
}

/* hidden 128, 3 layers (1 dense), 4 heads, q_lora 96, kv_lora 64,
 * nope/rope/v 32/16/32, 16 experts, 1 shared, inter 320/64, vocab 512 */
static void ex_tiny(exlist *l) {
  l->n = 0;
  ex_add(l, K_PLAIN, 512, 128, "model.embed_tokens.weight");
  for (int L = 0; L < 3; L++) {
    ex_add(l, K_PLAIN, 128, 0, "model.layers.%d.input_layernorm.weight", L);
    ex_add(l, K_LINEAR, 96, 128, "model.layers.%d.self_attn.q_a_proj.weight", L);
    ex_add(l, K_PLAIN, 96, 0, "model.layers.%d.self_attn.q_a_layernorm.weight", L);
    ex_add(l, K_LINEAR, 4 * 48, 96, "model.layers.%d.self_attn.q_b_proj.weight", L);
    ex_add(l, K_LINEAR, 64 + 16, 128, "model.layers.%d.self_attn.kv_a_proj_with_mqa.weight", L);
    ex_add(l, K_PLAIN, 64, 0, "model.layers.%d.self_attn.kv_a_layernorm.weight", L);
    ex_add(l, K_LINEAR, 4 * 64, 64, "model.layers.%d.self_attn.kv_b_proj.weight", L);
    ex_add(l, K_LINEAR, 128, 4 * 32, "model.layers.%d.self_attn.o_proj.weight", L);
    ex_add(l, K_PLAIN, 128, 0, "model.layers.%d.post_attention_layernorm.weight", L);
    char pre[96];
    if (L == 0) {
      snprintf(pre, sizeof pre, "model.layers.%d.mlp", L);
      ex_mlp(l, pre, 128, 320);
      continue;
    }
    ex_add(l, K_PLAIN, 16, 128, "model.layers.%d.mlp.gate.weight", L);
    ex_add(l, K_BIAS, 16, 0, "model.layers.%d.mlp.gate.e_score_correction_bias", L);
    for (int e = 0; e < 16; e++) {
      snprintf(pre, sizeof pre, "model.layers.%d.mlp.experts.%d", L, e);
      ex_mlp(l, pre, 128, 64);
    }
    snprintf(pre, sizeof pre, "model.layers.%d.mlp.shared_experts", L);
    ex_mlp(l, pre, 128, 64);
  }
  ex_add(l, K_PLAIN, 128, 0, "model.norm.weight");
  ex_add(l, K_PLAIN, 512, 128, "lm_head.weight");
}

/* Every expected tensor, in order, with the dtype and shape the checkpoint
 * dtype calls for; FP8 scales [ceil(out/128), ceil(in/128)] right after. */
static void check_tensors(const rfile *f, const exlist *l, const char *dtype, const char *what) {
  int i = 0, fp8 = !strcmp(dtype, "fp8"), f32 = !strcmp(dtype, "f32");
  for (int k = 0; k < l->n; k++) {
    const ex *e = &l->t[k];
    if (i >= f->n) { CHECKF(0, "%s: %s missing (file ends)", what, e->name); return; }
    const rt *t = &f->t[i++];
    CHECKF(!strcmp(t->name, e->name), "%s: tensor %d is %s, expected %s", what, i - 1, t->name, e->name);
    int want = e->k == K_BIAS || f32 ? DSI_DTYPE_F32
             : e->k == K_LINEAR && fp8 ? DSI_DTYPE_F8_E4M3 : DSI_DTYPE_BF16;
    CHECKF(t->dtype == want, "%s: %s is %s, expected %s", what, e->name, dsi_dtype_st_name(t->dtype),
           dsi_dtype_st_name(want));
    CHECKF(t->ndim == e->ndim && t->shape[0] == e->shape[0] && (e->ndim == 1 || t->shape[1] == e->shape[1]),
           "%s: %s has the wrong shape", what, e->name);
    if (fp8 && e->k == K_LINEAR) {
      if (i >= f->n) { CHECKF(0, "%s: %s_scale_inv missing", what, e->name); return; }
      const rt *s = &f->t[i++];
      char sn[224];
      snprintf(sn, sizeof sn, "%s_scale_inv", e->name);
      CHECKF(!strcmp(s->name, sn), "%s: %s where %s was expected", what, s->name, sn);
      CHECKF(s->dtype == DSI_DTYPE_F32 && s->ndim == 2 && s->shape[0] == (e->shape[0] + 127) / 128 &&
             s->shape[1] == (e->shape[1] + 127) / 128, "%s: %s has the wrong dtype or shape", what, sn);
    }
  }
  CHECKF(i == f->n, "%s: %d tensors, expected %d", what, f->n, i);
}

/* ---- make helpers ---- */

static int make(const char *preset, const char *dtype, uint64_t seed, const char *dir, int shard_mb, dsi_err *err) {
  dsi_mkmodel_opts o = {.preset = preset, .dtype = dtype, .seed = seed, .out_dir = dir, .shard_mb = shard_mb};
  memset(err, 0, sizeof *err);
  return dsi_mkmodel(&o, err);
}

static int same_file(const char *a, const char *b) {
  size_t na, nb;
  uint8_t *x = slurp(a, &na), *y = slurp(b, &nb);
  int same = x && y && na == nb && !memcmp(x, y, na);
  free(x);
  free(y);
  return same;
}

static double std_of(const float *x, size_t n, double *mean) {
  double s = 0, s2 = 0;
  for (size_t i = 0; i < n; i++) { s += x[i]; s2 += (double)x[i] * x[i]; }
  *mean = s / n;
  return sqrt(s2 / n - *mean * *mean);
}

/* ---- tests ---- */

static void test_writer(void) {
  dsi_err err = {0};
  const char *p = path_in(g_tmp, "w.safetensors");
  /* chunks of any size, a zero-size tensor, a name that needs escaping,
   * and a tensor larger than the writer's two 4 MiB blocks */
  const size_t big_n = 10u << 20;
  uint8_t *big = malloc(big_n);
  for (size_t i = 0; i < big_n; i++) big[i] = (uint8_t)(i * 131 + (i >> 13));
  dsi_st_writer *w = dsi_st_writer_new();
  int64_t s3[] = {3}, s22[] = {2, 2}, s0[] = {0, 5}, sbig[] = {(int64_t)big_n};
  dsi_st_writer_add(w, "a", DSI_DTYPE_F32, 1, s3);
  dsi_st_writer_add(w, "zero", DSI_DTYPE_BF16, 2, s0);
  dsi_st_writer_add(w, "we\"ird\\name", DSI_DTYPE_BF16, 2, s22);
  dsi_st_writer_add(w, "big", DSI_DTYPE_F8_E4M3, 1, sbig);
  CHECK(dsi_st_writer_begin(w, p, &err) == DSI_OK);
  float a[3] = {1, 2, 3};
  uint16_t bf[4] = {1, 2, 3, 4};
  CHECK(dsi_st_writer_data(w, a, 4, &err) == DSI_OK);
  CHECK(dsi_st_writer_data(w, (uint8_t *)a + 4, 8, &err) == DSI_OK);
  CHECK(dsi_st_writer_data(w, bf, 8, &err) == DSI_OK);
  for (size_t off = 0, k = 1; off < big_n; k = k * 7 % 1000003) {
    size_t n = DSI_MIN(big_n - off, (k % 3 == 0) ? (1u << 20) + 3 : k);
    CHECK(dsi_st_writer_data(w, big + off, n, &err) == DSI_OK);
    off += n;
  }
  CHECKF(dsi_st_writer_end(w, &err) == DSI_OK, "%s", err.msg);
  dsi_st_writer_free(w);
  rfile f;
  if (rfile_read(&f, p)) {
    CHECK(f.n == 4);
    const rt *t = rfile_find(&f, "we\"ird\\name");
    CHECK(t && t->dtype == DSI_DTYPE_BF16 && !memcmp(rdata(&f, t), bf, 8));
    t = rfile_find(&f, "a");
    CHECK(t && !memcmp(rdata(&f, t), a, 12));
    t = rfile_find(&f, "zero");
    CHECK(t && t->b == t->e && t->ndim == 2 && t->shape[0] == 0);
    t = rfile_find(&f, "big");
    CHECK(t && t->e - t->b == big_n && !memcmp(rdata(&f, t), big, big_n));
  }
  rfile_free(&f);
  free(big);

  /* too few bytes: end fails and names the tensor */
  w = dsi_st_writer_new();
  dsi_st_writer_add(w, "x", DSI_DTYPE_F32, 1, s3);
  dsi_st_writer_add(w, "y", DSI_DTYPE_F32, 1, s3);
  CHECK(dsi_st_writer_begin(w, p, &err) == DSI_OK);
  CHECK(dsi_st_writer_data(w, a, 12, &err) == DSI_OK);
  CHECK(dsi_st_writer_data(w, a, 8, &err) == DSI_OK);
  CHECK(dsi_st_writer_end(w, &err) == DSI_E_INVAL && strstr(err.msg, "tensor y"));
  dsi_st_writer_free(w);

  /* a chunk that runs past its tensor: too little for x, too much for y */
  w = dsi_st_writer_new();
  dsi_st_writer_add(w, "x", DSI_DTYPE_F32, 1, s3);
  dsi_st_writer_add(w, "y", DSI_DTYPE_F32, 1, s3);
  CHECK(dsi_st_writer_begin(w, p, &err) == DSI_OK);
  CHECK(dsi_st_writer_data(w, a, 8, &err) == DSI_OK);
  CHECK(dsi_st_writer_data(w, a, 8, &err) == DSI_E_INVAL && strstr(err.msg, "tensor x"));
  CHECK(dsi_st_writer_data(w, a, 4, &err) != DSI_OK);
  CHECK(dsi_st_writer_end(w, &err) != DSI_OK);
  dsi_st_writer_free(w);

  /* data after the last tensor; a duplicate name; a negative dimension */
  w = dsi_st_writer_new();
  dsi_st_writer_add(w, "x", DSI_DTYPE_F32, 1, s3);
  CHECK(dsi_st_writer_begin(w, p, &err) == DSI_OK);
  CHECK(dsi_st_writer_data(w, a, 12, &err) == DSI_OK);
  CHECK(dsi_st_writer_data(w, a, 1, &err) == DSI_E_INVAL);
  dsi_st_writer_free(w); /* without end: closes quietly */
  w = dsi_st_writer_new();
  dsi_st_writer_add(w, "x", DSI_DTYPE_F32, 1, s3);
  dsi_st_writer_add(w, "x", DSI_DTYPE_F32, 1, s3);
  CHECK(dsi_st_writer_begin(w, p, &err) == DSI_E_INVAL && strstr(err.msg, "declared twice"));
  dsi_st_writer_free(w);
  w = dsi_st_writer_new();
  int64_t neg[] = {-1};
  dsi_st_writer_add(w, "n", DSI_DTYPE_F32, 1, neg);
  CHECK(dsi_st_writer_begin(w, p, &err) == DSI_E_INVAL && strstr(err.msg, "n: dimension 0"));
  dsi_st_writer_free(w);
  /* an unwritable path */
  w = dsi_st_writer_new();
  CHECK(dsi_st_writer_begin(w, path_in(g_tmp, "no/such/dir/x.safetensors"), &err) == DSI_E_IO);
  dsi_st_writer_free(w);
}

/* config.json: the golden tiny config, key for key (torch_dtype float32
 * for f32, no quantization_config unless fp8) */
static void check_config(const char *dir, const char *dtype) {
  size_t n;
  char *text = (char *)slurp(path_in(dir, "config.json"), &n);
  CHECKF(text, "%s/config.json missing", dir);
  if (!text) return;
  cJSON *got = cJSON_Parse(text), *want = cJSON_Parse(k_golden_tiny_fp8_config);
  CHECKF(got, "%s/config.json is not JSON", dir);
  if (strcmp(dtype, "fp8")) cJSON_DeleteItemFromObjectCaseSensitive(want, "quantization_config");
  if (!strcmp(dtype, "f32"))
    cJSON_ReplaceItemInObjectCaseSensitive(want, "torch_dtype", cJSON_CreateString("float32"));
  for (cJSON *e = want->child; e; e = e->next) {
    cJSON *g = cJSON_GetObjectItemCaseSensitive(got, e->string);
    CHECKF(g && cJSON_Compare(g, e, 1), "%s/config.json: key %s differs from the golden", dir, e->string);
  }
  CHECKF(cJSON_GetArraySize(got) == cJSON_GetArraySize(want), "%s/config.json: %d keys, golden %d", dir,
         cJSON_GetArraySize(got), cJSON_GetArraySize(want));
  cJSON_Delete(got);
  cJSON_Delete(want);
  free(text);

  text = (char *)slurp(path_in(dir, "generation_config.json"), &n);
  got = text ? cJSON_Parse(text) : NULL;
  CHECKF(got && cJSON_GetObjectItem(got, "bos_token_id")->valuedouble == 0 &&
         cJSON_GetObjectItem(got, "eos_token_id")->valuedouble == 1, "%s/generation_config.json", dir);
  cJSON_Delete(got);
  free(text);
}

/* tiny in every dtype from one seed: containers, then the same master
 * weights — bf16 = round(f32), fp8 = DeepSeek's block quantization of f32 */
static void test_tiny_dtypes(void) {
  static exlist l;
  ex_tiny(&l);
  const char *dts[] = {"f32", "bf16", "fp8"};
  rfile f[3];
  for (int d = 0; d < 3; d++) {
    char dir[256];
    snprintf(dir, sizeof dir, "%s/tiny-%s", g_tmp, dts[d]);
    dsi_err err;
    int st = make("tiny", dts[d], 7, dir, 0, &err);
    CHECKF(st == DSI_OK, "make tiny %s: %s", dts[d], err.msg);
    CHECK(!exists(path_in(dir, "model.safetensors.index.json")));
    check_config(dir, dts[d]);
    if (rfile_read(&f[d], path_in(dir, "model.safetensors"))) check_tensors(&f[d], &l, dts[d], dir);
  }
  const rfile *f32 = &f[0], *bf = &f[1], *q8 = &f[2];
  size_t n_elems = 0, n_q = 0;
  double err2 = 0, ref2 = 0;
  for (int k = 0; k < l.n; k++) {
    const ex *e = &l.t[k];
    const rt *a = rfile_find(f32, e->name), *b = rfile_find(bf, e->name), *q = rfile_find(q8, e->name);
    if (!a || !b || !q) continue;
    size_t n = rnumel(a);
    const float *w = rdata(f32, a);
    n_elems += n;
    /* bf16 checkpoint: the f32 master weights rounded (the bias stays f32) */
    int bad = 0;
    if (b->dtype == DSI_DTYPE_F32) bad = memcmp(rdata(bf, b), w, n * 4) != 0;
    else
      for (size_t i = 0; i < n; i++) bad += ((const uint16_t *)rdata(bf, b))[i] != dsi_f32_to_bf16(w[i]);
    CHECKF(!bad, "%s: bf16 is not the rounded f32 master (%d elements)", e->name, bad);
    if (e->k != K_LINEAR) {
      CHECKF(b->e - b->b == q->e - q->b && !memcmp(rdata(bf, b), rdata(q8, q), b->e - b->b),
             "%s: differs between the bf16 and fp8 checkpoints", e->name);
      continue;
    }
    /* fp8: scale = amax/448 per 128x128 block, q = fp8(w/scale), every code */
    char sn[224];
    snprintf(sn, sizeof sn, "%s_scale_inv", e->name);
    const rt *s = rfile_find(q8, sn);
    if (!s) continue;
    const int64_t R = e->shape[0], C = e->shape[1], SC = s->shape[1];
    const float *scale = rdata(q8, s);
    const uint8_t *code = rdata(q8, q);
    const uint16_t *bw = rdata(bf, b);
    int bad_scale = 0, bad_code = 0, bad_tol = 0;
    for (int64_t r0 = 0; r0 < R; r0 += 128)
      for (int64_t c0 = 0; c0 < C; c0 += 128) {
        float amax = 0;
        for (int64_t r = r0; r < DSI_MIN(r0 + 128, R); r++)
          for (int64_t c = c0; c < DSI_MIN(c0 + 128, C); c++) amax = fmaxf(amax, fabsf(w[r * C + c]));
        float sc = scale[(r0 / 128) * SC + c0 / 128], want = amax > 0 ? amax / 448.0f : 1.0f;
        bad_scale += sc != want;
        for (int64_t r = r0; r < DSI_MIN(r0 + 128, R); r++)
          for (int64_t c = c0; c < DSI_MIN(c0 + 128, C); c++) {
            size_t i = (size_t)(r * C + c);
            bad_code += code[i] != dsi_f32_to_fp8(w[i] / want);
            float deq = dsi_fp8_to_f32(code[i]) * sc, ref = dsi_bf16_to_f32(bw[i]);
            /* 1/16 relative (3 mantissa bits) + bf16's own rounding, and
             * half a subnormal step (2^-10 of the scale) near zero */
            bad_tol += fabsf(deq - ref) > fabsf(ref) * (1.0f / 16 + 1.0f / 256) + sc / 1024.0f;
            err2 += (double)(deq - ref) * (deq - ref);
            ref2 += (double)ref * ref;
            n_q++;
          }
      }
    CHECKF(!bad_scale, "%s: %d block scales are not amax/448", e->name, bad_scale);
    CHECKF(!bad_code, "%s: %d codes differ from dsi_f32_to_fp8(w/scale)", e->name, bad_code);
    CHECKF(!bad_tol, "%s: %d dequantized weights off the bf16 ones by more than 1/16", e->name, bad_tol);
  }
  CHECKF(n_elems > 1000000 && n_q > 500000, "only %zu weights (%zu quantized) compared", n_elems, n_q);
  CHECKF(sqrt(err2 / ref2) < 0.04, "fp8 relative rms error %.4f", sqrt(err2 / ref2));

  /* the init the brief asks for, on the f32 master weights */
  struct { const char *name; double mean, std, tol; } init[] = {
    {"model.embed_tokens.weight", 0, 1.0, 0.03},
    {"model.layers.1.self_attn.q_a_proj.weight", 0, 1 / sqrt(128.0), 0.03},
    {"model.layers.1.self_attn.o_proj.weight", 0, 0.5 / sqrt(128.0), 0.03},
    {"model.layers.0.mlp.down_proj.weight", 0, 0.5 / sqrt(320.0), 0.03},
    {"model.layers.2.mlp.gate.weight", 0, 1 / sqrt(128.0), 0.05},
    {"model.layers.2.mlp.gate.e_score_correction_bias", 0, 0.01, 0.4},
    {"model.layers.1.input_layernorm.weight", 1, 0.1, 0.2},
    {"lm_head.weight", 0, 1 / sqrt(128.0), 0.03},
  };
  for (size_t i = 0; i < DSI_ARRAY_LEN(init); i++) {
    const rt *t = rfile_find(f32, init[i].name);
    if (!t) { CHECKF(0, "%s missing", init[i].name); continue; }
    double mean, sd = std_of(rdata(f32, t), rnumel(t), &mean);
    CHECKF(fabs(sd / init[i].std - 1) < init[i].tol && fabs(mean - init[i].mean) < 3 * init[i].std,
           "%s: mean %.4f std %.4f, expected %.4f and %.4f", init[i].name, mean, sd, init[i].mean, init[i].std);
  }
  for (int d = 0; d < 3; d++) rfile_free(&f[d]);
}

/* shard_mb 1 on the 2.6 MB bf16 tiny: several shards, an index that maps
 * every tensor to the file that holds it, the same bytes as one file */
static void test_shards(void) {
  static exlist l;
  ex_tiny(&l);
  char dir[256], one[256];
  snprintf(dir, sizeof dir, "%s/sharded", g_tmp);
  snprintf(one, sizeof one, "%s/tiny-fp8", g_tmp);
  dsi_err err;
  CHECKF(make("tiny", "fp8", 7, dir, 1, &err) == DSI_OK, "sharded: %s", err.msg);
  CHECK(!exists(path_in(dir, "model.safetensors")));
  size_t n;
  char *text = (char *)slurp(path_in(dir, "model.safetensors.index.json"), &n);
  CHECKF(text, "no index in %s", dir);
  cJSON *idx = text ? cJSON_Parse(text) : NULL;
  free(text);
  if (!idx) return;
  cJSON *map = cJSON_GetObjectItemCaseSensitive(idx, "weight_map");
  cJSON *total = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(idx, "metadata"), "total_size");
  CHECK(cJSON_IsObject(map) && cJSON_IsNumber(total));
  rfile whole;
  if (!map || !rfile_read(&whole, path_in(one, "model.safetensors"))) { cJSON_Delete(idx); return; }
  CHECKF(cJSON_GetArraySize(map) == whole.n, "weight_map has %d tensors, expected %d", cJSON_GetArraySize(map), whole.n);
  CHECKF((size_t)total->valuedouble == whole.size - whole.base, "total_size %.0f, expected %zu",
         total->valuedouble, whole.size - whole.base);

  /* the shard files: model-0000k-of-0000N, N the number of distinct files */
  char files[64][64];
  int n_files = 0;
  for (cJSON *e = map->child; e; e = e->next) {
    CHECK(cJSON_IsString(e));
    int seen = 0;
    for (int i = 0; i < n_files; i++) seen |= !strcmp(files[i], e->valuestring);
    if (!seen && n_files < 64) snprintf(files[n_files++], sizeof files[0], "%s", e->valuestring);
  }
  CHECKF(n_files >= 2, "only %d shard(s)", n_files);
  size_t mapped = 0;
  for (int s = 0; s < n_files; s++) {
    char want[64];
    snprintf(want, sizeof want, "model-%05d-of-%05d.safetensors", s + 1, n_files);
    int found = 0;
    for (int i = 0; i < n_files; i++) found |= !strcmp(files[i], want);
    CHECKF(found, "shard %s not in the index", want);
    rfile f;
    if (!rfile_read(&f, path_in(dir, want))) continue;
    CHECKF(f.size - f.base <= 1000000 || f.n <= 2, "%s holds %zu bytes > 1 MB", want, f.size - f.base);
    for (int i = 0; i < f.n; i++) {
      const rt *t = &f.t[i], *w = rfile_find(&whole, t->name);
      cJSON *m = cJSON_GetObjectItemCaseSensitive(map, t->name);
      CHECKF(m && cJSON_IsString(m) && !strcmp(m->valuestring, want), "%s: in %s, index says %s", t->name,
             want, m && cJSON_IsString(m) ? m->valuestring : "nothing");
      CHECKF(w && w->dtype == t->dtype && w->e - w->b == t->e - t->b &&
             !memcmp(rdata(&whole, w), rdata(&f, t), t->e - t->b), "%s: differs from the one-file checkpoint", t->name);
      mapped++;
    }
    rfile_free(&f);
  }
  CHECKF(mapped == (size_t)whole.n, "the shards hold %zu tensors, expected %d", mapped, whole.n);
  for (int k = 0; k < l.n; k++)
    CHECKF(cJSON_GetObjectItemCaseSensitive(map, l.t[k].name), "%s not in weight_map", l.t[k].name);
  rfile_free(&whole);
  cJSON_Delete(idx);

  /* one file into the same folder: refused without force; with it, the old shards and index are gone */
  dsi_mkmodel_opts again = {.preset = "tiny", .dtype = "bf16", .seed = 7, .out_dir = dir};
  CHECKF(dsi_mkmodel(&again, &err) == DSI_E_IO && strstr(err.msg, "the folder is not empty"), "not refused: %s", err.msg);
  CHECK(exists(path_in(dir, "model-00001-of-00002.safetensors")));
  again.force = 1;
  CHECKF(dsi_mkmodel(&again, &err) == DSI_OK, "%s", err.msg);
  CHECK(exists(path_in(dir, "model.safetensors")));
  CHECK(!exists(path_in(dir, "model.safetensors.index.json")));
  CHECK(!exists(path_in(dir, "model-00001-of-00002.safetensors")));
  CHECK(same_file(path_in(dir, "model.safetensors"), path_in(g_tmp, "tiny-bf16/model.safetensors")));
}

static void test_determinism_and_errors(void) {
  char a[256], b[256], c[256];
  snprintf(a, sizeof a, "%s/seed-a/deeper/still", g_tmp); /* mkdir -p */
  snprintf(b, sizeof b, "%s/seed-b", g_tmp);
  snprintf(c, sizeof c, "%s/seed-c", g_tmp);
  dsi_err err;
  CHECKF(make("tiny", "fp8", 1234, a, 0, &err) == DSI_OK, "%s", err.msg);
  CHECKF(make("tiny", "fp8", 1234, b, 0, &err) == DSI_OK, "%s", err.msg);
  CHECKF(make("tiny", "fp8", 1235, c, 0, &err) == DSI_OK, "%s", err.msg);
  CHECK(same_file(path_in(a, "model.safetensors"), path_in(b, "model.safetensors")));
  CHECK(same_file(path_in(a, "config.json"), path_in(b, "config.json")));
  CHECK(!same_file(path_in(a, "model.safetensors"), path_in(c, "model.safetensors")));

  CHECK(make("huge", "bf16", 1, c, 0, &err) == DSI_E_INVAL && strstr(err.msg, "'huge'"));
  CHECK(make("tiny", "int4", 1, c, 0, &err) == DSI_E_INVAL && strstr(err.msg, "'int4'"));
  CHECK(make("tiny", "bf16", 1, c, -1, &err) == DSI_E_INVAL);
  CHECK(make("tiny", "bf16", 1, NULL, 0, &err) == DSI_E_INVAL);
  CHECK(dsi_mkmodel(NULL, &err) == DSI_E_INVAL);
  /* the output folder is a file */
  CHECK(make("tiny", "bf16", 1, path_in(c, "config.json"), 0, &err) == DSI_E_IO);
}

static void test_config_json(void) {
  /* q_lora_rank null, yarn block, other routing: keys and types */
  dsi_config c = {0};
  c.hidden_size = 96; c.q_lora_rank = 0; c.rope_yarn = 1; c.rope_factor = 40; c.rope_mscale = 0.707f;
  c.rope_mscale_all_dim = 1.0f; c.rope_beta_fast = 32; c.rope_beta_slow = 1;
  c.rope_original_max_position_embeddings = 4096; c.topk_method = DSI_TOPK_GROUP_LIMITED_GREEDY;
  c.scoring_func = DSI_SCORING_SOFTMAX; c.rms_norm_eps = 1e-6f; c.tie_word_embeddings = 1;
  char *text = dsi_config_to_json(&c);
  cJSON *j = cJSON_Parse(text);
  CHECK(j);
  CHECK(cJSON_IsNull(cJSON_GetObjectItem(j, "q_lora_rank")));
  CHECK(!strcmp(cJSON_GetObjectItem(j, "topk_method")->valuestring, "group_limited_greedy"));
  CHECK(!strcmp(cJSON_GetObjectItem(j, "scoring_func")->valuestring, "softmax"));
  CHECK(cJSON_IsTrue(cJSON_GetObjectItem(j, "tie_word_embeddings")));
  CHECK(!cJSON_GetObjectItem(j, "quantization_config"));
  cJSON *r = cJSON_GetObjectItem(j, "rope_scaling");
  CHECK(r && !strcmp(cJSON_GetObjectItem(r, "type")->valuestring, "yarn") &&
        cJSON_GetObjectItem(r, "factor")->valuedouble == 40 &&
        cJSON_GetObjectItem(r, "mscale")->valuedouble == 0.707 &&
        cJSON_GetObjectItem(r, "original_max_position_embeddings")->valuedouble == 4096);
  CHECKF(strstr(text, "\"rms_norm_eps\": 1e-06,") && strstr(text, "\"mscale\": 0.707,"),
         "floats not written shortest: %s", text);
  cJSON_Delete(j);
  free(text);
}

/* ---- the tokenizer ---- */

static int make_tok(const char *dir, const char *tokenizer, dsi_err *err) {
  /* force: the cases reuse their folders */
  dsi_mkmodel_opts o = {.preset = "tiny", .dtype = "bf16", .seed = 1, .out_dir = dir, .tokenizer = tokenizer, .force = 1};
  memset(err, 0, sizeof *err);
  return dsi_mkmodel(&o, err);
}

static int config_int(const char *dir, const char *key) {
  size_t n;
  char *text = (char *)slurp(path_in(dir, "config.json"), &n);
  cJSON *j = text ? cJSON_Parse(text) : NULL;
  cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
  int x = cJSON_IsNumber(v) ? v->valueint : -1;
  cJSON_Delete(j);
  free(text);
  return x;
}

/* dir's tokenizer opens; encode then decode gives the text back */
static dsi_tok *open_tok(const char *dir) {
  dsi_tok *tok = NULL;
  dsi_err err = {0};
  CHECKF(dsi_tok_open(&tok, path_in(dir, "tokenizer.json"), path_in(dir, "tokenizer_config.json"), 0, &err) == DSI_OK,
         "%s: %s", dir, err.msg);
  return tok;
}

static void check_round_trip(dsi_tok *tok, const char *text, int flags) {
  int32_t *ids = NULL;
  size_t n = 0;
  char *back = NULL;
  dsi_err err = {0};
  CHECKF(dsi_tok_encode(tok, text, strlen(text), flags, &ids, &n, &err) == DSI_OK, "%s", err.msg);
  CHECKF(dsi_tok_decode(tok, ids, n, DSI_TOK_SKIP_SPECIAL, &back, NULL, &err) == DSI_OK, "%s", err.msg);
  CHECKF(back && !strcmp(back, text), "round trip: '%s' came back as '%s'", text, back ? back : "(null)");
  free(ids);
  free(back);
}

static void test_tokenizer(void) {
  char gen[256], copied[256], big[256], bad[256];
  snprintf(gen, sizeof gen, "%s/tok-gen", g_tmp);
  snprintf(copied, sizeof copied, "%s/tok-copied", g_tmp);
  snprintf(big, sizeof big, "%s/tok-big", g_tmp);
  snprintf(bad, sizeof bad, "%s/tok-bad", g_tmp);
  dsi_err err;

  /* generated: dense ids 0..511, DeepSeek's specials, BPE merges, V3 template */
  CHECKF(make_tok(gen, "builtin", &err) == DSI_OK, "%s", err.msg);
  dsi_tok *tok = open_tok(gen);
  if (tok) {
    CHECK(dsi_tok_vocab_size(tok) == 512);
    CHECK(dsi_tok_bos_id(tok) == 0 && dsi_tok_eos_id(tok) == 1);
    CHECK(dsi_tok_token_to_id(tok, "<｜begin▁of▁sentence｜>") == 0);
    CHECK(dsi_tok_token_to_id(tok, "<｜end▁of▁sentence｜>") == 1);
    CHECK(dsi_tok_token_to_id(tok, "</think>") == 511);
    int32_t user = dsi_tok_token_to_id(tok, "<｜User｜>"), asst = dsi_tok_token_to_id(tok, "<｜Assistant｜>");
    CHECK(user >= 508 && asst >= 508 && dsi_tok_token_to_id(tok, "<think>") >= 508);
    for (int32_t id = 0; id < 512; id++) /* every id a model can sample decodes */
      CHECKF(dsi_tok_id_to_token(tok, id, NULL), "id %d has no token", id);
    check_round_trip(tok, "The capital of France is Paris. 12345 ünïcödé, 漢字 and emoji 🙂\n\ttabs", 0);
    check_round_trip(tok, "Hello world", DSI_TOK_ADD_SPECIAL);
    /* merges make common English shorter than its bytes; BOS comes first */
    int32_t *ids = NULL;
    size_t n = 0;
    const char *en = "the answer is in the text that the model writes";
    CHECK(dsi_tok_encode(tok, en, strlen(en), DSI_TOK_ADD_SPECIAL, &ids, &n, &err) == DSI_OK);
    CHECKF(n > 1 && n < strlen(en) / 2 && ids[0] == 0, "%zu tokens for %zu bytes", n, strlen(en));
    free(ids);
    /* special tokens in text are recognized: one id each */
    const char *chat = "<｜User｜>hi<｜Assistant｜>";
    CHECK(dsi_tok_encode(tok, chat, strlen(chat), 0, &ids, &n, &err) == DSI_OK);
    CHECK(n >= 3 && ids[0] == user && ids[n - 1] == asst);
    free(ids);
    dsi_tok_free(tok);
  }
  size_t len;
  char *text = (char *)slurp(path_in(gen, "tokenizer_config.json"), &len);
  cJSON *cfg = text ? cJSON_Parse(text) : NULL;
  CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cfg, "add_bos_token")));
  CHECK(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(cfg, "chat_template")));
  cJSON_Delete(cfg);
  free(text);
  CHECK(config_int(gen, "bos_token_id") == 0 && config_int(gen, "eos_token_id") == 1);
  /* the same seed, the same files */
  CHECKF(make_tok(bad, "builtin", &err) == DSI_OK, "%s", err.msg);
  CHECK(same_file(path_in(gen, "tokenizer.json"), path_in(bad, "tokenizer.json")));

  /* copied: a tokenizer that fits, byte for byte; config.json takes its BOS/EOS */
  CHECKF(make_tok(copied, "data/tokenizer", &err) == DSI_OK, "%s", err.msg);
  CHECK(same_file("data/tokenizer/tokenizer.json", path_in(copied, "tokenizer.json")));
  CHECK(same_file("data/tokenizer/tokenizer_config.json", path_in(copied, "tokenizer_config.json")));
  CHECK(config_int(copied, "bos_token_id") == 264 && config_int(copied, "eos_token_id") == 265);
  tok = open_tok(copied);
  if (tok) check_round_trip(tok, "plain words 42", 0);
  dsi_tok_free(tok);
  /* named by its file, the same */
  CHECKF(make_tok(bad, "data/tokenizer/tokenizer.json", &err) == DSI_OK, "%s", err.msg);
  CHECK(config_int(bad, "bos_token_id") == 264);

  /* found through $DSINFER_TOKENIZER when it fits; too big: a generated one */
  setenv("DSINFER_TOKENIZER", "data/tokenizer", 1);
  CHECKF(make_tok(bad, NULL, &err) == DSI_OK, "%s", err.msg);
  CHECK(same_file("data/tokenizer/tokenizer.json", path_in(bad, "tokenizer.json")));
  /* a generated one for a larger vocabulary: more merges, then the added tokens */
  dsi_tok_made made;
  CHECK(mkdir(big, 0777) == 0);
  CHECKF(dsi_tok_write_checkpoint(big, NULL, 0, 2000, &made, &err) == DSI_OK, "%s", err.msg);
  CHECKF(made.vocab_size > 512 && made.vocab_size < 2000 && made.bos_id == 0 && made.eos_id == 1 &&
         made.n_merges > 249 && !made.from[0], "vocab %d, %d merges", made.vocab_size, made.n_merges);
  tok = open_tok(big);
  if (tok) {
    CHECK(dsi_tok_token_to_id(tok, "</think>") == made.vocab_size - 1);
    check_round_trip(tok, "The capital of France is Paris.", 0);
  }
  dsi_tok_free(tok);
  setenv("DSINFER_TOKENIZER", big, 1);
  CHECKF(make_tok(bad, NULL, &err) == DSI_OK, "%s", err.msg);
  CHECK(same_file(path_in(gen, "tokenizer.json"), path_in(bad, "tokenizer.json")));
  setenv("DSINFER_TOKENIZER", "/no/such/folder", 1);
  CHECK(make_tok(bad, NULL, &err) == DSI_E_IO && strstr(err.msg, "$DSINFER_TOKENIZER") &&
        strstr(err.msg, "/no/such/folder/tokenizer.json"));
  unsetenv("DSINFER_TOKENIZER");

  /* asked for by name: it must be there and fit */
  CHECK(make_tok(bad, big, &err) == DSI_E_INVAL && strstr(err.msg, "do not fit") && strstr(err.msg, "512"));
  CHECK(make_tok(bad, "/no/such/tokenizer.json", &err) == DSI_E_IO && strstr(err.msg, "/no/such/tokenizer.json"));
}

int main(void) {
  dsi_dtype_init();
  snprintf(g_tmp, sizeof g_tmp, "/tmp/test_mkmodel_XXXXXX");
  if (!mkdtemp(g_tmp)) { perror("mkdtemp"); return 1; }
  test_writer();
  test_config_json();
  test_tiny_dtypes();
  test_shards();
  test_determinism_and_errors();
  test_tokenizer();
  rm_rf(g_tmp);
  printf("test_mkmodel: %d checks, %d failed\n", g_checks, g_fails);
  return g_fails ? 1 : 0;
}
