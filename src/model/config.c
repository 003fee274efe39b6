/* model: config.json → dsi_config. Owns reading every key the engine uses,
 * its default when absent, its type and range, and the checks that tie keys
 * together (groups, experts, layers). Messages name the file and the key. */
#include "model/config.h"
#include "dsinfer.h"

#include <cjson/cJSON.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- reading one key ---- */

/* Where keys are read from, for messages: path is the file, prefix is ""
 * at the top level or "rope_scaling." inside that object. */
typedef struct cfg_reader {
  const cJSON *obj;
  const char *path;
  const char *prefix;
  dsi_err *err;
} cfg_reader;

/* the item, or NULL when the key is absent or JSON null */
static const cJSON *cfg_get(const cfg_reader *r, const char *key) {
  const cJSON *it = cJSON_GetObjectItemCaseSensitive(r->obj, key);
  return cJSON_IsNull(it) ? NULL : it;
}

static int cfg_bad(const cfg_reader *r, int status, const char *key, const char *what) {
  return dsi_errf(r->err, status, "%s: key \"%s%s\": %s", r->path, r->prefix, key, what);
}

static int cfg_missing(const cfg_reader *r, const char *key) {
  return dsi_errf(r->err, DSI_E_CONFIG, "%s: missing required key \"%s%s\"", r->path, r->prefix, key);
}

enum { CFG_OPTIONAL, CFG_REQUIRED };
enum { CFG_ANY, CFG_NONNEG, CFG_POSITIVE };

#define TRY(x) do { int st_ = (x); if (st_ != DSI_OK) return st_; } while (0)

static int cfg_range(const cfg_reader *r, const char *key, double v, int range) {
  if ((range == CFG_POSITIVE && v > 0) || (range == CFG_NONNEG && v >= 0) || range == CFG_ANY) return DSI_OK;
  char what[160];
  snprintf(what, sizeof what, "%.17g must be %s", v, range == CFG_POSITIVE ? "positive" : "non-negative");
  return cfg_bad(r, DSI_E_CONFIG, key, what);
}

/* An integer: a JSON number with no fractional part (7168.0 is 7168). */
static int cfg_int_item(const cfg_reader *r, const char *key, const cJSON *it, int range, int *out) {
  if (!cJSON_IsNumber(it)) return cfg_bad(r, DSI_E_CONFIG, key, "expected an integer");
  double v = it->valuedouble;
  char what[160];
  if (!isfinite(v) || v != floor(v)) {
    snprintf(what, sizeof what, "%.17g is not a whole number", v);
    return cfg_bad(r, DSI_E_CONFIG, key, what);
  }
  if (v < INT_MIN || v > INT_MAX) {
    snprintf(what, sizeof what, "%.17g is out of range", v);
    return cfg_bad(r, DSI_E_CONFIG, key, what);
  }
  TRY(cfg_range(r, key, v, range));
  *out = (int)v;
  return DSI_OK;
}

static int cfg_int(const cfg_reader *r, const char *key, int required, int def, int range, int *out) {
  const cJSON *it = cfg_get(r, key);
  if (it) return cfg_int_item(r, key, it, range, out);
  if (required) return cfg_missing(r, key);
  *out = def;
  return DSI_OK;
}

/* A real key that must fit a float (neither overflow nor underflow to 0);
 * range as for integers. */
static int cfg_float(const cfg_reader *r, const char *key, int required, float def, int range, float *out) {
  const cJSON *it = cfg_get(r, key);
  if (!it) {
    if (required) return cfg_missing(r, key);
    *out = def;
    return DSI_OK;
  }
  if (!cJSON_IsNumber(it)) return cfg_bad(r, DSI_E_CONFIG, key, "expected a number");
  double v = it->valuedouble;
  char what[160];
  if (!isfinite(v) || fabs(v) > FLT_MAX || (v != 0 && fabs(v) < FLT_MIN)) {
    snprintf(what, sizeof what, "%.17g is out of range", v);
    return cfg_bad(r, DSI_E_CONFIG, key, what);
  }
  TRY(cfg_range(r, key, v, range));
  *out = (float)v;
  return DSI_OK;
}

static int cfg_bool(const cfg_reader *r, const char *key, int def, int *out) {
  const cJSON *it = cfg_get(r, key);
  if (!it) {
    *out = def;
    return DSI_OK;
  }
  if (!cJSON_IsBool(it)) return cfg_bad(r, DSI_E_CONFIG, key, "expected true or false");
  *out = cJSON_IsTrue(it);
  return DSI_OK;
}

/* A string key; *out is NULL when absent and not required. */
static int cfg_string(const cfg_reader *r, const char *key, int required, const char **out) {
  const cJSON *it = cfg_get(r, key);
  *out = NULL;
  if (!it) return required ? cfg_missing(r, key) : DSI_OK;
  if (!cJSON_IsString(it)) return cfg_bad(r, DSI_E_CONFIG, key, "expected a string");
  *out = it->valuestring;
  return DSI_OK;
}

/* A token id: an integer, null (the default), or a list whose first entry
 * is used (Hugging Face allows several eos ids). */
static int cfg_token_id(const cfg_reader *r, const char *key, int def, int *out) {
  const cJSON *it = cfg_get(r, key);
  if (cJSON_IsArray(it)) {
    if (!it->child) return cfg_bad(r, DSI_E_CONFIG, key, "empty list");
    it = it->child;
  }
  if (it) return cfg_int_item(r, key, it, CFG_NONNEG, out);
  *out = def;
  return DSI_OK;
}

/* An object key (rope_scaling, quantization_config); *out NULL if absent or null. */
static int cfg_object(const cfg_reader *r, const char *key, const cJSON **out) {
  const cJSON *it = cfg_get(r, key);
  *out = NULL;
  if (!it) return DSI_OK;
  if (!cJSON_IsObject(it)) return cfg_bad(r, DSI_E_CONFIG, key, "expected an object or null");
  *out = it;
  return DSI_OK;
}

/* cJSON keeps every copy of a repeated key and reads the first, Python's
 * json the last: refuse the ambiguity instead of guessing. */
static int cmp_key(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}
static int cfg_unique_keys(const cfg_reader *r) {
  int n = cJSON_GetArraySize(r->obj), st = DSI_OK;
  if (n < 2) return DSI_OK;
  const char **keys = malloc((size_t)n * sizeof *keys);
  if (!keys) return dsi_errf(r->err, DSI_E_NOMEM, "%s: out of memory", r->path);
  int k = 0;
  for (const cJSON *it = r->obj->child; it; it = it->next) keys[k++] = it->string ? it->string : "";
  qsort(keys, (size_t)k, sizeof *keys, cmp_key);
  for (int i = 1; i < k && st == DSI_OK; i++)
    if (!strcmp(keys[i - 1], keys[i])) st = cfg_bad(r, DSI_E_CONFIG, keys[i], "appears more than once");
  free(keys);
  return st;
}

/* ---- sections of the config ---- */

static int cfg_read_attention(dsi_config *c, const cfg_reader *r) {
  TRY(cfg_int(r, "vocab_size", CFG_REQUIRED, 0, CFG_POSITIVE, &c->vocab_size));
  TRY(cfg_int(r, "hidden_size", CFG_REQUIRED, 0, CFG_POSITIVE, &c->hidden_size));
  TRY(cfg_int(r, "num_hidden_layers", CFG_REQUIRED, 0, CFG_POSITIVE, &c->num_hidden_layers));
  TRY(cfg_int(r, "num_nextn_predict_layers", CFG_OPTIONAL, 0, CFG_NONNEG, &c->num_nextn_predict_layers));
  TRY(cfg_int(r, "num_attention_heads", CFG_REQUIRED, 0, CFG_POSITIVE, &c->num_attention_heads));
  TRY(cfg_int(r, "q_lora_rank", CFG_OPTIONAL, 0, CFG_NONNEG, &c->q_lora_rank));
  TRY(cfg_int(r, "kv_lora_rank", CFG_REQUIRED, 0, CFG_POSITIVE, &c->kv_lora_rank));
  TRY(cfg_int(r, "qk_nope_head_dim", CFG_REQUIRED, 0, CFG_POSITIVE, &c->qk_nope_head_dim));
  TRY(cfg_int(r, "qk_rope_head_dim", CFG_REQUIRED, 0, CFG_POSITIVE, &c->qk_rope_head_dim));
  TRY(cfg_int(r, "v_head_dim", CFG_REQUIRED, 0, CFG_POSITIVE, &c->v_head_dim));
  if (c->qk_rope_head_dim % 2) {
    char what[96];
    snprintf(what, sizeof what, "%d is odd (RoPE rotates pairs)", c->qk_rope_head_dim);
    return cfg_bad(r, DSI_E_CONFIG, "qk_rope_head_dim", what);
  }
  TRY(cfg_float(r, "rms_norm_eps", CFG_OPTIONAL, 1e-6f, CFG_POSITIVE, &c->rms_norm_eps));
  TRY(cfg_float(r, "rope_theta", CFG_OPTIONAL, 10000.0f, CFG_POSITIVE, &c->rope_theta));
  TRY(cfg_bool(r, "tie_word_embeddings", 0, &c->tie_word_embeddings));
  TRY(cfg_token_id(r, "bos_token_id", 0, &c->bos_token_id));
  TRY(cfg_token_id(r, "eos_token_id", 1, &c->eos_token_id));
  return DSI_OK;
}

/* rope_scaling: null, or YaRN keyed by "type" or "rope_type". */
static int cfg_read_rope_scaling(dsi_config *c, const cfg_reader *top) {
  const cJSON *rs;
  TRY(cfg_object(top, "rope_scaling", &rs));
  c->rope_yarn = 0;
  c->rope_factor = 1.0f;
  c->rope_original_max_position_embeddings = c->max_position_embeddings;
  c->rope_beta_fast = 32.0f;
  c->rope_beta_slow = 1.0f;
  c->rope_mscale = 1.0f;
  c->rope_mscale_all_dim = 0.0f;
  if (!rs) return DSI_OK;
  cfg_reader r = {rs, top->path, "rope_scaling.", top->err};
  TRY(cfg_unique_keys(&r));
  const char *type, *type_key = "type";
  TRY(cfg_string(&r, "type", CFG_OPTIONAL, &type));
  if (!type) {
    type_key = "rope_type";
    TRY(cfg_string(&r, "rope_type", CFG_OPTIONAL, &type));
  }
  if (!type) return cfg_missing(&r, "type");
  if (strcmp(type, "yarn")) {
    char what[160];
    snprintf(what, sizeof what, "\"%.64s\" is not supported (only \"yarn\")", type);
    return cfg_bad(&r, DSI_E_UNSUPPORTED, type_key, what);
  }
  c->rope_yarn = 1;
  TRY(cfg_float(&r, "factor", CFG_REQUIRED, 1.0f, CFG_POSITIVE, &c->rope_factor));
  TRY(cfg_int(&r, "original_max_position_embeddings", CFG_REQUIRED, 0, CFG_POSITIVE,
              &c->rope_original_max_position_embeddings));
  TRY(cfg_float(&r, "beta_fast", CFG_OPTIONAL, 32.0f, CFG_POSITIVE, &c->rope_beta_fast));
  TRY(cfg_float(&r, "beta_slow", CFG_OPTIONAL, 1.0f, CFG_POSITIVE, &c->rope_beta_slow));
  TRY(cfg_float(&r, "mscale", CFG_OPTIONAL, 1.0f, CFG_ANY, &c->rope_mscale));
  TRY(cfg_float(&r, "mscale_all_dim", CFG_OPTIONAL, 0.0f, CFG_ANY, &c->rope_mscale_all_dim));
  return DSI_OK;
}

/* quantization_config: absent (weights as stored) or fp8 e4m3 in 128x128 blocks. */
static int cfg_read_quantization(dsi_config *c, const cfg_reader *top) {
  const cJSON *q;
  TRY(cfg_object(top, "quantization_config", &q));
  c->fp8 = 0;
  c->weight_block_size[0] = c->weight_block_size[1] = 0;
  if (!q) return DSI_OK;
  cfg_reader r = {q, top->path, "quantization_config.", top->err};
  TRY(cfg_unique_keys(&r));
  const char *method, *fmt;
  char what[160];
  TRY(cfg_string(&r, "quant_method", CFG_REQUIRED, &method));
  if (strcmp(method, "fp8")) {
    snprintf(what, sizeof what, "\"%.64s\" is not supported (only \"fp8\")", method);
    return cfg_bad(&r, DSI_E_UNSUPPORTED, "quant_method", what);
  }
  TRY(cfg_string(&r, "fmt", CFG_REQUIRED, &fmt));
  if (strcmp(fmt, "e4m3")) {
    snprintf(what, sizeof what, "\"%.64s\" is not supported (only \"e4m3\")", fmt);
    return cfg_bad(&r, DSI_E_UNSUPPORTED, "fmt", what);
  }
  const cJSON *wbs = cfg_get(&r, "weight_block_size");
  if (!wbs) return cfg_missing(&r, "weight_block_size");
  if (!cJSON_IsArray(wbs) || cJSON_GetArraySize(wbs) != 2)
    return cfg_bad(&r, DSI_E_CONFIG, "weight_block_size", "expected a list of two integers");
  for (int i = 0; i < 2; i++) {
    const cJSON *d = cJSON_GetArrayItem(wbs, i);
    if (!cJSON_IsNumber(d) || d->valuedouble != 128.0)
      return cfg_bad(&r, DSI_E_UNSUPPORTED, "weight_block_size", "only [128, 128] is supported");
    c->weight_block_size[i] = 128;
  }
  c->fp8 = 1;
  return DSI_OK;
}

/* The router and the MoE layout, and how they fit together. Defaults for
 * scoring_func and topk_method are those of the Hugging Face config class
 * of model_type (V2: softmax/greedy, V3 and later: sigmoid/noaux_tc). */
static int cfg_read_moe(dsi_config *c, const cfg_reader *r, int is_v2) {
  char what[256];
  TRY(cfg_int(r, "intermediate_size", CFG_REQUIRED, 0, CFG_POSITIVE, &c->intermediate_size));
  TRY(cfg_int(r, "n_routed_experts", CFG_OPTIONAL, 0, CFG_NONNEG, &c->n_routed_experts));
  TRY(cfg_int(r, "n_shared_experts", CFG_OPTIONAL, 0, CFG_NONNEG, &c->n_shared_experts));
  int moe = c->n_routed_experts > 0;
  TRY(cfg_int(r, "moe_intermediate_size", moe, 0, moe ? CFG_POSITIVE : CFG_NONNEG, &c->moe_intermediate_size));
  TRY(cfg_int(r, "num_experts_per_tok", moe, 0, moe ? CFG_POSITIVE : CFG_NONNEG, &c->num_experts_per_tok));
  TRY(cfg_int(r, "n_group", CFG_OPTIONAL, 1, CFG_POSITIVE, &c->n_group));
  TRY(cfg_int(r, "topk_group", CFG_OPTIONAL, 1, CFG_POSITIVE, &c->topk_group));
  TRY(cfg_bool(r, "norm_topk_prob", 0, &c->norm_topk_prob));
  TRY(cfg_float(r, "routed_scaling_factor", CFG_OPTIONAL, 1.0f, CFG_POSITIVE, &c->routed_scaling_factor));
  TRY(cfg_int(r, "first_k_dense_replace", CFG_OPTIONAL, 0, CFG_NONNEG, &c->first_k_dense_replace));
  TRY(cfg_int(r, "moe_layer_freq", CFG_OPTIONAL, 1, CFG_POSITIVE, &c->moe_layer_freq));

  const char *s;
  TRY(cfg_string(r, "scoring_func", CFG_OPTIONAL, &s));
  if (!s) s = is_v2 ? "softmax" : "sigmoid";
  if (!strcmp(s, "softmax")) c->scoring_func = DSI_SCORING_SOFTMAX;
  else if (!strcmp(s, "sigmoid")) c->scoring_func = DSI_SCORING_SIGMOID;
  else {
    snprintf(what, sizeof what, "unknown value \"%.64s\" (expected \"softmax\" or \"sigmoid\")", s);
    return cfg_bad(r, DSI_E_CONFIG, "scoring_func", what);
  }
  TRY(cfg_string(r, "topk_method", CFG_OPTIONAL, &s));
  if (!s) s = is_v2 ? "greedy" : "noaux_tc";
  /* "gready" is the default spelled in DeepSeek-V2's own configuration_deepseek.py */
  if (!strcmp(s, "greedy") || !strcmp(s, "gready")) c->topk_method = DSI_TOPK_GREEDY;
  else if (!strcmp(s, "group_limited_greedy")) c->topk_method = DSI_TOPK_GROUP_LIMITED_GREEDY;
  else if (!strcmp(s, "noaux_tc")) c->topk_method = DSI_TOPK_NOAUX_TC;
  else {
    snprintf(what, sizeof what,
             "unknown value \"%.64s\" (expected \"greedy\", \"group_limited_greedy\" or \"noaux_tc\")", s);
    return cfg_bad(r, DSI_E_CONFIG, "topk_method", what);
  }
  c->has_e_score_correction_bias = c->topk_method == DSI_TOPK_NOAUX_TC;

  if (c->first_k_dense_replace > c->num_hidden_layers) {
    snprintf(what, sizeof what, "%d is greater than num_hidden_layers (%d)", c->first_k_dense_replace,
             c->num_hidden_layers);
    return cfg_bad(r, DSI_E_CONFIG, "first_k_dense_replace", what);
  }
  if (c->topk_group > c->n_group) {
    snprintf(what, sizeof what, "%d is greater than n_group (%d)", c->topk_group, c->n_group);
    return cfg_bad(r, DSI_E_CONFIG, "topk_group", what);
  }
  if (!moe) return DSI_OK;
  if (c->n_routed_experts % c->n_group) {
    snprintf(what, sizeof what, "%d experts (n_routed_experts) do not split into %d equal groups",
             c->n_routed_experts, c->n_group);
    return cfg_bad(r, DSI_E_CONFIG, "n_group", what);
  }
  if (c->num_experts_per_tok > c->n_routed_experts) {
    snprintf(what, sizeof what, "%d is greater than n_routed_experts (%d)", c->num_experts_per_tok,
             c->n_routed_experts);
    return cfg_bad(r, DSI_E_CONFIG, "num_experts_per_tok", what);
  }
  long kept = (long)c->topk_group * (c->n_routed_experts / c->n_group);
  if (c->topk_method != DSI_TOPK_GREEDY && c->num_experts_per_tok > kept) {
    snprintf(what, sizeof what, "%d is greater than the %ld experts in the topk_group (%d) groups kept",
             c->num_experts_per_tok, kept, c->topk_group);
    return cfg_bad(r, DSI_E_CONFIG, "num_experts_per_tok", what);
  }
  return DSI_OK;
}

/* ---- keys that change the model: what this engine does not compute is refused ---- */

/* model_type: none, or one of this family's (it picks defaults); the
 * activation: SiLU, the only one the MLPs compute */
static int cfg_read_family(const cfg_reader *r, int *is_v2) {
  static const char *const family[] = {"deepseek_v2", "deepseek_v3", "kimi_k2"};
  const char *mt, *act;
  char what[200];
  TRY(cfg_string(r, "model_type", CFG_OPTIONAL, &mt));
  *is_v2 = mt && !strcmp(mt, "deepseek_v2");
  int known = !mt;
  for (size_t i = 0; i < sizeof family / sizeof *family && !known; i++) known = !strcmp(mt, family[i]);
  if (!known) {
    snprintf(what, sizeof what, "\"%.64s\" is not a DeepSeek-V3-family model (deepseek_v2, deepseek_v3, kimi_k2)", mt);
    return cfg_bad(r, DSI_E_UNSUPPORTED, "model_type", what);
  }
  TRY(cfg_string(r, "hidden_act", CFG_OPTIONAL, &act));
  if (act && strcmp(act, "silu")) {
    snprintf(what, sizeof what, "\"%.64s\" is not supported (only \"silu\")", act);
    return cfg_bad(r, DSI_E_UNSUPPORTED, "hidden_act", what);
  }
  return DSI_OK;
}

/* Sizes a checkpoint of this family can have, far above any real one
 * (V3: hidden 7168, vocab 129280, 61 layers, 256 experts): sums and
 * products of a few of them stay inside an int64, and a typo fails here,
 * naming the key, not in an allocation. */
static int cfg_check_sizes(const dsi_config *c, const cfg_reader *r) {
  const struct { const char *key; int v, max; } k[] = {
    {"vocab_size", c->vocab_size, 1 << 24}, {"hidden_size", c->hidden_size, 1 << 20},
    {"intermediate_size", c->intermediate_size, 1 << 22}, {"moe_intermediate_size", c->moe_intermediate_size, 1 << 22},
    {"num_hidden_layers", c->num_hidden_layers, 1 << 12}, {"num_nextn_predict_layers", c->num_nextn_predict_layers, 1 << 12},
    {"num_attention_heads", c->num_attention_heads, 1 << 12}, {"q_lora_rank", c->q_lora_rank, 1 << 20},
    {"kv_lora_rank", c->kv_lora_rank, 1 << 20}, {"qk_nope_head_dim", c->qk_nope_head_dim, 1 << 16},
    {"qk_rope_head_dim", c->qk_rope_head_dim, 1 << 16}, {"v_head_dim", c->v_head_dim, 1 << 16},
    {"n_shared_experts", c->n_shared_experts, 1 << 10}, {"max_position_embeddings", c->max_position_embeddings, 1 << 24},
  };
  char what[160];
  for (size_t i = 0; i < sizeof k / sizeof *k; i++)
    if (k[i].v > k[i].max) {
      snprintf(what, sizeof what, "%d is over this build's limit of %d", k[i].v, k[i].max);
      return cfg_bad(r, DSI_E_UNSUPPORTED, k[i].key, what);
    }
  const struct { const char *key; int v; } ids[] = {{"bos_token_id", c->bos_token_id}, {"eos_token_id", c->eos_token_id}};
  for (size_t i = 0; i < 2; i++)
    if (ids[i].v >= c->vocab_size) {
      snprintf(what, sizeof what, "%d is not an id of the vocabulary (vocab_size %d)", ids[i].v, c->vocab_size);
      return cfg_bad(r, DSI_E_CONFIG, ids[i].key, what);
    }
  return DSI_OK;
}

/* ---- the whole file ---- */

static int cfg_read(dsi_config *c, const cJSON *root, const char *path, dsi_err *err) {
  cfg_reader r = {root, path, "", err};
  TRY(cfg_unique_keys(&r));
  int is_v2;
  TRY(cfg_read_family(&r, &is_v2));
  TRY(cfg_read_attention(c, &r));
  TRY(cfg_int(&r, "max_position_embeddings", CFG_OPTIONAL, is_v2 ? 2048 : 4096, CFG_POSITIVE,
              &c->max_position_embeddings));
  TRY(cfg_read_rope_scaling(c, &r));
  TRY(cfg_read_moe(c, &r, is_v2));
  TRY(cfg_read_quantization(c, &r));
  return cfg_check_sizes(c, &r);
}

/* line and column (1-based) of byte off in text, for JSON error messages */
static void text_position(const char *text, size_t off, int *line, int *col) {
  *line = 1;
  *col = 1;
  for (size_t i = 0; i < off; i++) {
    if (text[i] == '\n') { ++*line; *col = 1; } else ++*col;
  }
}

int dsi_config_parse(dsi_config *c, const char *json, size_t len, const char *path, dsi_err *err) {
  memset(c, 0, sizeof *c);
  /* a private NUL-terminated copy: json need not be terminated */
  char *text = malloc(len + 1);
  if (!text) return dsi_errf(err, DSI_E_NOMEM, "%s: out of memory (%zu bytes)", path, len);
  if (len) memcpy(text, json, len);
  text[len] = 0;
  const char *end = NULL;
  /* cJSON skips a NUL as whitespace: a NUL inside the text is an error there */
  const char *nul = memchr(text, 0, len);
  dsi_json_oom_clear();
  cJSON *root = nul ? NULL : cJSON_ParseWithLengthOpts(text, len + 1, &end, 1);
  if (nul) end = nul;
  int st;
  if (!root && dsi_json_oom()) {
    st = dsi_errf(err, DSI_E_NOMEM, "%s: out of memory", path);
  } else if (!root) {
    size_t off = end && end >= text && end <= text + len ? (size_t)(end - text) : len;
    int line, col;
    text_position(text, off, &line, &col);
    st = dsi_errf(err, DSI_E_FORMAT, "%s: bad JSON at line %d, column %d (byte %zu)", path, line, col, off);
  } else if (!cJSON_IsObject(root)) {
    st = dsi_errf(err, DSI_E_CONFIG, "%s: expected a JSON object at the top level", path);
  } else {
    st = cfg_read(c, root, path, err);
  }
  cJSON_Delete(root);
  free(text);
  if (st != DSI_OK) memset(c, 0, sizeof *c);
  return st;
}

int dsi_config_load(dsi_config *c, const char *dir, dsi_err *err) {
  char path[4096];
  if (strlen(dir) + sizeof "/config.json" > sizeof path)
    return dsi_errf(err, DSI_E_INVAL, "%.200s...: directory name too long", dir);
  dsi_path_join(path, sizeof path, dir, "config.json");
  char *text;
  size_t len;
  int st = dsi_read_file(path, &text, &len, err);
  if (st != DSI_OK) {
    memset(c, 0, sizeof *c);
    return st;
  }
  st = dsi_config_parse(c, text, len, path, err);
  free(text);
  return st;
}

float dsi_config_softmax_scale(const dsi_config *c) {
  double scale = 1.0 / sqrt((double)dsi_config_qk_head_dim(c));
  if (c->rope_yarn && c->rope_mscale_all_dim != 0.0f && c->rope_factor > 1.0f) {
    double m = 0.1 * c->rope_mscale_all_dim * log((double)c->rope_factor) + 1.0;
    scale *= m * m;
  }
  return (float)scale;
}

/* ---- generation_config.json: the checkpoint's sampling defaults ---- */

static int gen_read(dsi_gen_config *g, const cJSON *root, const char *path, dsi_err *err) {
  cfg_reader r = {root, path, "", err};
  TRY(cfg_unique_keys(&r));
  const cJSON *it = cfg_get(&r, "do_sample");
  if (it) {
    if (!cJSON_IsBool(it)) return cfg_bad(&r, DSI_E_CONFIG, "do_sample", "expected true or false");
    g->do_sample = cJSON_IsTrue(it);
  }
  TRY(cfg_float(&r, "temperature", CFG_OPTIONAL, -1.0f, CFG_ANY, &g->temperature));
  TRY(cfg_float(&r, "top_p", CFG_OPTIONAL, -1.0f, CFG_ANY, &g->top_p));
  TRY(cfg_int(&r, "top_k", CFG_OPTIONAL, -1, CFG_ANY, &g->top_k));
  TRY(cfg_int(&r, "max_new_tokens", CFG_OPTIONAL, -1, CFG_ANY, &g->max_new_tokens));
  char what[160];
  if (cfg_get(&r, "temperature") && (g->temperature < 0 || g->temperature > 100)) {
    snprintf(what, sizeof what, "%g is out of range [0, 100]", g->temperature);
    return cfg_bad(&r, DSI_E_CONFIG, "temperature", what);
  }
  if (cfg_get(&r, "top_p") && (g->top_p <= 0 || g->top_p > 1)) {
    snprintf(what, sizeof what, "%g is out of range (0, 1]", g->top_p);
    return cfg_bad(&r, DSI_E_CONFIG, "top_p", what);
  }
  if (cfg_get(&r, "top_k")) TRY(cfg_range(&r, "top_k", g->top_k, CFG_NONNEG));
  if (cfg_get(&r, "max_new_tokens")) TRY(cfg_range(&r, "max_new_tokens", g->max_new_tokens, CFG_NONNEG));
  int id;
  const cJSON *eos = cfg_get(&r, "eos_token_id");
  if (cJSON_IsArray(eos))
    for (const cJSON *e = eos->child; e; e = e->next) TRY(cfg_int_item(&r, "eos_token_id", e, CFG_NONNEG, &id));
  else
    TRY(cfg_token_id(&r, "eos_token_id", 0, &id));
  TRY(cfg_token_id(&r, "bos_token_id", 0, &id));
  return DSI_OK;
}

int dsi_gen_config_load(const char *dir, dsi_gen_config *g, dsi_err *err) {
  *g = (dsi_gen_config){.found = 0, .do_sample = -1, .temperature = -1, .top_p = -1, .top_k = -1, .max_new_tokens = -1};
  char path[4096];
  if (strlen(dir) + sizeof "/generation_config.json" > sizeof path)
    return dsi_errf(err, DSI_E_INVAL, "%.200s...: directory name too long", dir);
  dsi_path_join(path, sizeof path, dir, "generation_config.json");
  if (access(path, F_OK) != 0) return DSI_OK; /* optional */
  char *text;
  size_t len;
  int st = dsi_read_file(path, &text, &len, err);
  if (st != DSI_OK) return st;
  const char *end = NULL;
  dsi_json_oom_clear();
  cJSON *root = memchr(text, 0, len) ? NULL : cJSON_ParseWithLengthOpts(text, len + 1, &end, 1);
  if (!root && dsi_json_oom())
    st = dsi_errf(err, DSI_E_NOMEM, "%s: out of memory", path);
  else if (!root)
    st = dsi_errf(err, DSI_E_FORMAT, "%s: bad JSON at byte %zu", path,
                  end && end >= text && end <= text + len ? (size_t)(end - text) : len);
  else if (!cJSON_IsObject(root))
    st = dsi_errf(err, DSI_E_CONFIG, "%s: expected a JSON object at the top level", path);
  else
    st = gen_read(g, root, path, err);
  cJSON_Delete(root);
  free(text);
  g->found = 1;
  if (st != DSI_OK) {
    g->do_sample = -1;
    g->temperature = g->top_p = -1;
    g->top_k = g->max_new_tokens = -1;
  }
  return st;
}

void dsi_gen_config_apply(const dsi_gen_config *g, dsi_sampling *s) {
  int greedy = g->do_sample == 0 && s->temperature < 0;
  if (s->temperature < 0) s->temperature = greedy || g->temperature < 0 ? 0.0f : g->temperature;
  if (s->top_p < 0) s->top_p = greedy || g->top_p < 0 ? 1.0f : g->top_p;
  if (s->top_k < 0) s->top_k = greedy || g->top_k < 0 ? 0 : g->top_k;
}
