/* tests: config.json parsing — the golden tiny checkpoints' configs, real
 * DeepSeek-V3 / V2 / V2-Lite configs, defaults, and every malformed case
 * (status and a message that names the key). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>

#include "check.h"
#include "model/config.h"

/* ---- helpers ---- */

static dsi_config load(const char *name, dsi_err *err) {
  char dir[256];
  snprintf(dir, sizeof dir, "data/configs/%s", name);
  dsi_config c;
  int st = dsi_config_load(&c, dir, err);
  if (!CHECK(st == DSI_OK)) fprintf(stderr, "    %s: %s\n", name, err->msg);
  return c;
}

static char *base_text(const char *name) {
  char path[256], *text = NULL;
  dsi_err err = {0};
  snprintf(path, sizeof path, "data/configs/%s/config.json", name);
  if (dsi_read_file(path, &text, NULL, &err) != DSI_OK) {
    fprintf(stderr, "%s\n", err.msg);
    exit(1);
  }
  return text;
}

/* set "a.b" in root to the JSON text value, or delete it when value is NULL */
static void set_key(cJSON *root, const char *key, const char *value) {
  char head[128];
  const char *dot = strchr(key, '.');
  if (dot) {
    snprintf(head, sizeof head, "%.*s", (int)(dot - key), key);
    set_key(cJSON_GetObjectItemCaseSensitive(root, head), dot + 1, value);
    return;
  }
  cJSON_DeleteItemFromObjectCaseSensitive(root, key);
  if (value) {
    cJSON *v = cJSON_Parse(value);
    if (!v) {
      fprintf(stderr, "bad test value %s\n", value);
      exit(1);
    }
    cJSON_AddItemToObject(root, key, v);
  }
}

/* Parse config `base` with the (key, value) pairs applied, NULL-terminated. */
static int parse_with(const char *base, dsi_config *c, dsi_err *err, ...) {
  char *text = base_text(base);
  cJSON *root = cJSON_Parse(text);
  free(text);
  va_list ap;
  va_start(ap, err);
  for (const char *k; (k = va_arg(ap, const char *));) set_key(root, k, va_arg(ap, const char *));
  va_end(ap);
  char *out = cJSON_Print(root);
  memset(err, 0, sizeof *err);
  int st = dsi_config_parse(c, out, strlen(out), "config.json", err);
  free(out);
  cJSON_Delete(root);
  return st;
}

static int parse_text(const char *text, dsi_config *c, dsi_err *err) {
  memset(err, 0, sizeof *err);
  return dsi_config_parse(c, text, strlen(text), "config.json", err);
}

/* ---- real configs ---- */

static void test_golden_tiny(void) {
  dsi_err err = {0};
  const char *names[] = {"tiny-f32", "tiny-bf16", "tiny-fp8"};
  for (int i = 0; i < 3; i++) {
    dsi_config c = load(names[i], &err);
    CHECK(c.vocab_size == 512 && c.hidden_size == 128 && c.intermediate_size == 320);
    CHECK(c.num_hidden_layers == 3 && c.num_attention_heads == 4 && c.first_k_dense_replace == 1);
    CHECK(c.q_lora_rank == 96 && c.kv_lora_rank == 64);
    CHECK(c.qk_nope_head_dim == 32 && c.qk_rope_head_dim == 16 && c.v_head_dim == 32);
    CHECK(c.n_routed_experts == 16 && c.num_experts_per_tok == 4 && c.n_shared_experts == 1);
    CHECK(c.n_group == 4 && c.topk_group == 2 && c.moe_intermediate_size == 64);
    CHECK(c.scoring_func == DSI_SCORING_SIGMOID && c.topk_method == DSI_TOPK_NOAUX_TC);
    CHECK(c.has_e_score_correction_bias && c.norm_topk_prob);
    CHECK_NEAR(c.routed_scaling_factor, 2.5, 0);
    CHECK(!c.rope_yarn && !c.tie_word_embeddings && c.bos_token_id == 0 && c.eos_token_id == 1);
    CHECK(c.fp8 == (i == 2));
    CHECK(i != 2 || (c.weight_block_size[0] == 128 && c.weight_block_size[1] == 128));
    CHECK_NEAR(c.rms_norm_eps, 1e-6, 1e-6);
    CHECK_NEAR(c.rope_theta, 10000, 0);
    CHECK(c.max_position_embeddings == 512);
    CHECK_NEAR(dsi_config_softmax_scale(&c), 1 / sqrt(48.0), 1e-6);
    CHECK(!dsi_config_is_moe_layer(&c, 0) && dsi_config_is_moe_layer(&c, 1) && dsi_config_is_moe_layer(&c, 2));
  }

  dsi_config c = load("tiny-noqlora-bf16", &err);
  CHECK(c.q_lora_rank == 0 && c.v_head_dim == 48 && c.qk_nope_head_dim == 32);
  CHECK(c.n_routed_experts == 8 && c.num_experts_per_tok == 2 && c.n_group == 1 && c.topk_group == 1);
  CHECK(c.n_shared_experts == 2 && c.hidden_size == 96 && c.vocab_size == 384 && c.num_hidden_layers == 2);
  CHECK_NEAR(c.routed_scaling_factor, 1.5, 0);

  c = load("tiny-yarn-bf16", &err);
  CHECK(c.rope_yarn && c.rope_original_max_position_embeddings == 64 && c.max_position_embeddings == 256);
  CHECK_NEAR(c.rope_factor, 4, 0);
  CHECK_NEAR(c.rope_beta_fast, 32, 0);
  CHECK_NEAR(c.rope_beta_slow, 1, 0);
  CHECK_NEAR(c.rope_mscale, 0.707, 1e-7);
  CHECK_NEAR(c.rope_mscale_all_dim, 0.707, 1e-7);
  /* softmax_scale in the reference's ref/meta.json */
  CHECK_NEAR(dsi_config_softmax_scale(&c), 0.17401743871138853, 1e-6);
}

static void test_deepseek_v3(void) {
  dsi_err err = {0};
  dsi_config c = load("deepseek-v3", &err);
  CHECK(c.hidden_size == 7168 && c.num_hidden_layers == 61 && c.num_attention_heads == 128);
  CHECK(c.n_routed_experts == 256 && c.num_experts_per_tok == 8 && c.n_group == 8 && c.topk_group == 4);
  CHECK(c.q_lora_rank == 1536 && c.kv_lora_rank == 512);
  CHECK(c.qk_nope_head_dim == 128 && c.qk_rope_head_dim == 64 && c.v_head_dim == 128);
  CHECK(c.moe_intermediate_size == 2048 && c.intermediate_size == 18432 && c.first_k_dense_replace == 3);
  CHECK(c.vocab_size == 129280 && c.num_nextn_predict_layers == 1 && c.n_shared_experts == 1);
  CHECK(c.fp8 && c.weight_block_size[0] == 128 && c.weight_block_size[1] == 128);
  CHECK(c.scoring_func == DSI_SCORING_SIGMOID && c.topk_method == DSI_TOPK_NOAUX_TC);
  CHECK(c.has_e_score_correction_bias && c.norm_topk_prob && c.max_position_embeddings == 163840);
  CHECK(c.rope_yarn && c.rope_original_max_position_embeddings == 4096);
  CHECK_NEAR(c.rope_factor, 40, 0);
  CHECK_NEAR(c.rope_mscale_all_dim, 1.0, 0);
  double m = 0.1 * log(40.0) + 1;
  CHECK_NEAR(dsi_config_softmax_scale(&c), pow(192.0, -0.5) * m * m, 1e-6);
  CHECK_NEAR(dsi_config_softmax_scale(&c), 0.1352337, 1e-5);
  CHECK(!dsi_config_is_moe_layer(&c, 2) && dsi_config_is_moe_layer(&c, 3) && dsi_config_is_moe_layer(&c, 60));
}

static void test_deepseek_v2(void) {
  dsi_err err = {0};
  dsi_config c = load("deepseek-v2-lite", &err);
  CHECK(c.q_lora_rank == 0 && c.scoring_func == DSI_SCORING_SOFTMAX && c.topk_method == DSI_TOPK_GREEDY);
  CHECK(!c.has_e_score_correction_bias && !c.norm_topk_prob && !c.fp8);
  CHECK(c.n_group == 1 && c.topk_group == 1 && c.n_routed_experts == 64 && c.num_experts_per_tok == 6);
  CHECK(c.first_k_dense_replace == 1 && c.hidden_size == 2048 && c.num_hidden_layers == 27);
  CHECK(c.kv_lora_rank == 512 && c.intermediate_size == 10944 && c.moe_intermediate_size == 1408);
  CHECK(c.n_shared_experts == 2 && c.vocab_size == 102400);
  CHECK(c.bos_token_id == 100000 && c.eos_token_id == 100001);
  double m = 0.1 * 0.707 * log(40.0) + 1;
  CHECK_NEAR(dsi_config_softmax_scale(&c), pow(192.0, -0.5) * m * m, 1e-6);

  c = load("deepseek-v2", &err);
  CHECK(c.topk_method == DSI_TOPK_GROUP_LIMITED_GREEDY && c.scoring_func == DSI_SCORING_SOFTMAX);
  CHECK(c.n_routed_experts == 160 && c.n_group == 8 && c.topk_group == 3 && c.num_experts_per_tok == 6);
  CHECK(c.q_lora_rank == 1536 && !c.has_e_score_correction_bias && c.hidden_size == 5120);
  CHECK_NEAR(c.routed_scaling_factor, 16, 0);
}

/* ---- variants a real config may use ---- */

static void test_variants(void) {
  dsi_config c;
  dsi_err err;
  /* the newer "rope_type" key, and whole numbers written as reals */
  CHECK(parse_with("tiny-yarn-bf16", &c, &err, "rope_scaling.type", NULL, "rope_scaling.rope_type", "\"yarn\"",
                   "hidden_size", "128.0", "rope_scaling.factor", "4.0", NULL) == DSI_OK);
  CHECK(c.rope_yarn && c.hidden_size == 128);
  CHECK_NEAR(c.rope_factor, 4, 0);
  /* yarn defaults */
  CHECK(parse_with("tiny-yarn-bf16", &c, &err, "rope_scaling.beta_fast", NULL, "rope_scaling.beta_slow", NULL,
                   "rope_scaling.mscale", NULL, "rope_scaling.mscale_all_dim", NULL, NULL) == DSI_OK);
  CHECK_NEAR(c.rope_beta_fast, 32, 0);
  CHECK_NEAR(c.rope_beta_slow, 1, 0);
  CHECK_NEAR(c.rope_mscale, 1, 0);
  CHECK_NEAR(c.rope_mscale_all_dim, 0, 0);
  CHECK_NEAR(dsi_config_softmax_scale(&c), 1 / sqrt(48.0), 1e-6); /* mscale_all_dim 0: m = 1 */
  /* every optional key absent */
  CHECK(parse_with("tiny-bf16", &c, &err, "q_lora_rank", NULL, "rope_scaling", NULL, "tie_word_embeddings", NULL,
                   "num_nextn_predict_layers", NULL, "rms_norm_eps", NULL, "rope_theta", NULL, "bos_token_id",
                   NULL, "eos_token_id", NULL, "n_shared_experts", NULL, "moe_layer_freq", NULL,
                   "first_k_dense_replace", NULL, "norm_topk_prob", NULL, "routed_scaling_factor", NULL, "n_group",
                   NULL, "topk_group", NULL, "max_position_embeddings", NULL, "model_type", NULL, "scoring_func",
                   NULL, "topk_method", NULL, NULL) == DSI_OK);
  CHECK(c.q_lora_rank == 0 && !c.rope_yarn && !c.tie_word_embeddings && c.num_nextn_predict_layers == 0);
  CHECK_NEAR(c.rms_norm_eps, 1e-6, 1e-6);
  CHECK_NEAR(c.rope_theta, 10000, 0);
  CHECK(c.bos_token_id == 0 && c.eos_token_id == 1 && c.n_shared_experts == 0 && c.moe_layer_freq == 1);
  CHECK(c.first_k_dense_replace == 0 && !c.norm_topk_prob && c.n_group == 1 && c.topk_group == 1);
  CHECK_NEAR(c.routed_scaling_factor, 1.0, 0);
  CHECK(c.max_position_embeddings > 0 && c.scoring_func == DSI_SCORING_SIGMOID && c.topk_method == DSI_TOPK_NOAUX_TC);
  /* model_type deepseek_v2 changes the router defaults */
  CHECK(parse_with("tiny-bf16", &c, &err, "model_type", "\"deepseek_v2\"", "scoring_func", NULL, "topk_method",
                   NULL, NULL) == DSI_OK);
  CHECK(c.scoring_func == DSI_SCORING_SOFTMAX && c.topk_method == DSI_TOPK_GREEDY && !c.has_e_score_correction_bias);
  /* model_type: a string naming this family, or absent */
  CHECK_ERR(parse_with("tiny-bf16", &c, &err, "model_type", "42", NULL), DSI_E_CONFIG, err, "model_type");
  CHECK_ERR(parse_with("tiny-bf16", &c, &err, "model_type", "\"llama\"", NULL), DSI_E_UNSUPPORTED, err,
            "\"model_type\": \"llama\" is not a DeepSeek-V3-family model");
  CHECK(parse_with("tiny-bf16", &c, &err, "model_type", NULL, NULL) == DSI_OK);
  CHECK(parse_with("tiny-bf16", &c, &err, "model_type", "\"kimi_k2\"", NULL) == DSI_OK);
  /* keys that change the model: refused when this engine would compute something else */
  CHECK_ERR(parse_with("tiny-bf16", &c, &err, "hidden_act", "\"gelu\"", NULL), DSI_E_UNSUPPORTED, err,
            "\"hidden_act\": \"gelu\" is not supported");
  CHECK_ERR(parse_with("tiny-bf16", &c, &err, "eos_token_id", "512", NULL), DSI_E_CONFIG, err,
            "\"eos_token_id\": 512 is not an id of the vocabulary (vocab_size 512)");
  CHECK_ERR(parse_with("tiny-bf16", &c, &err, "bos_token_id", "[9999]", NULL), DSI_E_CONFIG, err, "bos_token_id");
  /* sizes past any real checkpoint fail naming the key, before anything is sized by them */
  CHECK_ERR(parse_with("tiny-bf16", &c, &err, "qk_nope_head_dim", "2147483647", NULL), DSI_E_UNSUPPORTED, err,
            "\"qk_nope_head_dim\": 2147483647 is over this build's limit");
  CHECK_ERR(parse_with("tiny-bf16", &c, &err, "qk_rope_head_dim", "2147483646", NULL), DSI_E_UNSUPPORTED, err,
            "qk_rope_head_dim");
  CHECK_ERR(parse_with("tiny-bf16", &c, &err, "num_hidden_layers", "1000000000", NULL), DSI_E_UNSUPPORTED, err,
            "\"num_hidden_layers\": 1000000000 is over");
  /* nulls mean "default" */
  CHECK(parse_with("tiny-bf16", &c, &err, "bos_token_id", "null", "eos_token_id", "null", "n_shared_experts",
                   "null", "quantization_config", "null", NULL) == DSI_OK);
  CHECK(c.bos_token_id == 0 && c.eos_token_id == 1 && c.n_shared_experts == 0 && !c.fp8);
  CHECK(parse_with("tiny-bf16", &c, &err, "eos_token_id", "[7, 8]", NULL) == DSI_OK && c.eos_token_id == 7);
  /* a dense-only model needs no MoE keys */
  CHECK(parse_with("tiny-bf16", &c, &err, "n_routed_experts", "null", "moe_intermediate_size", NULL,
                   "num_experts_per_tok", NULL, NULL) == DSI_OK);
  CHECK(c.n_routed_experts == 0 && !dsi_config_is_moe_layer(&c, 1));
  /* greedy routing ignores groups */
  CHECK(parse_with("tiny-bf16", &c, &err, "topk_method", "\"greedy\"", "num_experts_per_tok", "9", NULL) == DSI_OK);
  CHECK(parse_with("tiny-bf16", &c, &err, "tie_word_embeddings", "true", "moe_layer_freq", "2", NULL) == DSI_OK);
  CHECK(c.tie_word_embeddings && c.moe_layer_freq == 2 && !dsi_config_is_moe_layer(&c, 1) &&
        dsi_config_is_moe_layer(&c, 2));
  CHECK(parse_with("tiny-bf16", &c, &err, "first_k_dense_replace", "3", NULL) == DSI_OK); /* all dense */
}

/* ---- malformed configs ---- */

static void test_required(void) {
  const char *required[] = {"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                            "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
                            "intermediate_size", "moe_intermediate_size", "num_experts_per_tok"};
  dsi_config c;
  dsi_err err;
  for (size_t i = 0; i < DSI_ARRAY_LEN(required); i++) {
    char needle[96];
    snprintf(needle, sizeof needle, "missing required key \"%s\"", required[i]);
    CHECK_ERR(parse_with("tiny-bf16", &c, &err, required[i], NULL, NULL), DSI_E_CONFIG, err, needle);
    CHECK(strstr(err.msg, "config.json"));
    snprintf(needle, sizeof needle, "\"%s\"", required[i]);
    CHECK_ERR(parse_with("tiny-bf16", &c, &err, required[i], "null", NULL), DSI_E_CONFIG, err, needle);
    CHECK_ERR(parse_with("tiny-bf16", &c, &err, required[i], "0", NULL), DSI_E_CONFIG, err, needle);
    CHECK_ERR(parse_with("tiny-bf16", &c, &err, required[i], "-4", NULL), DSI_E_CONFIG, err, needle);
    CHECK_ERR(parse_with("tiny-bf16", &c, &err, required[i], "\"64\"", NULL), DSI_E_CONFIG, err, needle);
    CHECK_ERR(parse_with("tiny-bf16", &c, &err, required[i], "64.5", NULL), DSI_E_CONFIG, err, needle);
    CHECK_ERR(parse_with("tiny-bf16", &c, &err, required[i], "1e300", NULL), DSI_E_CONFIG, err, needle);
    CHECK_ERR(parse_with("tiny-bf16", &c, &err, required[i], "true", NULL), DSI_E_CONFIG, err, needle);
    CHECK_ERR(parse_with("tiny-bf16", &c, &err, required[i], "[64]", NULL), DSI_E_CONFIG, err, needle);
  }
}

static void test_wrong_values(void) {
  dsi_config c;
  dsi_err err;
  struct { const char *key, *value; int status; const char *needle; } cases[] = {
    {"topk_group", "5", DSI_E_CONFIG, "config.json: key \"topk_group\": 5 is greater than n_group (4)"},
    {"n_routed_experts", "18", DSI_E_CONFIG, "\"n_group\""},
    {"num_experts_per_tok", "17", DSI_E_CONFIG, "\"num_experts_per_tok\": 17 is greater than n_routed_experts"},
    {"num_experts_per_tok", "9", DSI_E_CONFIG, "\"num_experts_per_tok\": 9 is greater than the 8 experts"},
    {"first_k_dense_replace", "4", DSI_E_CONFIG, "\"first_k_dense_replace\": 4 is greater than num_hidden_layers"},
    {"first_k_dense_replace", "-1", DSI_E_CONFIG, "\"first_k_dense_replace\""},
    {"qk_rope_head_dim", "15", DSI_E_CONFIG, "\"qk_rope_head_dim\": 15 is odd"},
    {"scoring_func", "\"relu\"", DSI_E_CONFIG, "\"scoring_func\": unknown value \"relu\""},
    {"scoring_func", "1", DSI_E_CONFIG, "\"scoring_func\""},
    {"topk_method", "\"top1\"", DSI_E_CONFIG, "\"topk_method\": unknown value \"top1\""},
    {"n_group", "0", DSI_E_CONFIG, "\"n_group\""},
    {"topk_group", "0", DSI_E_CONFIG, "\"topk_group\""},
    {"moe_layer_freq", "0", DSI_E_CONFIG, "\"moe_layer_freq\""},
    {"n_routed_experts", "-16", DSI_E_CONFIG, "\"n_routed_experts\""},
    {"n_shared_experts", "1.5", DSI_E_CONFIG, "\"n_shared_experts\""},
    {"q_lora_rank", "-1", DSI_E_CONFIG, "\"q_lora_rank\""},
    {"q_lora_rank", "\"96\"", DSI_E_CONFIG, "\"q_lora_rank\""},
    {"num_nextn_predict_layers", "-1", DSI_E_CONFIG, "\"num_nextn_predict_layers\""},
    {"norm_topk_prob", "1", DSI_E_CONFIG, "\"norm_topk_prob\""},
    {"tie_word_embeddings", "\"false\"", DSI_E_CONFIG, "\"tie_word_embeddings\""},
    {"routed_scaling_factor", "0", DSI_E_CONFIG, "\"routed_scaling_factor\""},
    {"routed_scaling_factor", "1e39", DSI_E_CONFIG, "\"routed_scaling_factor\""},
    {"rms_norm_eps", "-1e-6", DSI_E_CONFIG, "\"rms_norm_eps\""},
    {"rms_norm_eps", "1e-50", DSI_E_CONFIG, "\"rms_norm_eps\": 1e-50 is out of range"},
    {"rope_theta", "\"10000\"", DSI_E_CONFIG, "\"rope_theta\""},
    {"max_position_embeddings", "0", DSI_E_CONFIG, "\"max_position_embeddings\""},
    {"bos_token_id", "-1", DSI_E_CONFIG, "\"bos_token_id\""},
    {"eos_token_id", "[]", DSI_E_CONFIG, "\"eos_token_id\""},
    {"eos_token_id", "\"</s>\"", DSI_E_CONFIG, "\"eos_token_id\""},
    {"rope_scaling", "5", DSI_E_CONFIG, "\"rope_scaling\""},
    {"rope_scaling", "{\"type\": \"linear\", \"factor\": 2}", DSI_E_UNSUPPORTED, "\"rope_scaling.type\": \"linear\""},
    {"rope_scaling", "{\"rope_type\": \"dynamic\", \"factor\": 2}", DSI_E_UNSUPPORTED, "\"rope_scaling.rope_type\""},
    {"rope_scaling", "{\"factor\": 2}", DSI_E_CONFIG, "missing required key \"rope_scaling.type\""},
    {"rope_scaling", "{\"type\": 1}", DSI_E_CONFIG, "\"rope_scaling.type\""},
    {"rope_scaling", "{\"type\": \"yarn\", \"original_max_position_embeddings\": 64}", DSI_E_CONFIG,
     "missing required key \"rope_scaling.factor\""},
    {"rope_scaling", "{\"type\": \"yarn\", \"factor\": 4}", DSI_E_CONFIG,
     "\"rope_scaling.original_max_position_embeddings\""},
    {"rope_scaling", "{\"type\": \"yarn\", \"factor\": -4, \"original_max_position_embeddings\": 64}",
     DSI_E_CONFIG, "\"rope_scaling.factor\""},
    {"rope_scaling", "{\"type\": \"yarn\", \"factor\": 4, \"original_max_position_embeddings\": 64, \"beta_fast\": \"x\"}",
     DSI_E_CONFIG, "\"rope_scaling.beta_fast\""},
    {"rope_scaling", "{\"type\": \"yarn\", \"type\": \"yarn\", \"factor\": 4, \"original_max_position_embeddings\": 64}",
     DSI_E_CONFIG, "\"rope_scaling.type\": appears more than once"},
    {"quantization_config", "[]", DSI_E_CONFIG, "\"quantization_config\""},
    {"quantization_config", "{\"quant_method\": \"awq\"}", DSI_E_UNSUPPORTED, "\"quantization_config.quant_method\""},
    {"quantization_config", "{\"fmt\": \"e4m3\", \"weight_block_size\": [128, 128]}", DSI_E_CONFIG,
     "\"quantization_config.quant_method\""},
    {"quantization_config", "{\"quant_method\": \"fp8\", \"fmt\": \"e5m2\", \"weight_block_size\": [128, 128]}",
     DSI_E_UNSUPPORTED, "\"quantization_config.fmt\""},
    {"quantization_config", "{\"quant_method\": \"fp8\", \"weight_block_size\": [128, 128]}", DSI_E_CONFIG,
     "\"quantization_config.fmt\""},
    {"quantization_config", "{\"quant_method\": \"fp8\", \"fmt\": \"e4m3\"}", DSI_E_CONFIG,
     "\"quantization_config.weight_block_size\""},
    {"quantization_config", "{\"quant_method\": \"fp8\", \"fmt\": \"e4m3\", \"weight_block_size\": [64, 64]}",
     DSI_E_UNSUPPORTED, "\"quantization_config.weight_block_size\""},
    {"quantization_config", "{\"quant_method\": \"fp8\", \"fmt\": \"e4m3\", \"weight_block_size\": [128]}",
     DSI_E_CONFIG, "\"quantization_config.weight_block_size\""},
    {"quantization_config", "{\"quant_method\": \"fp8\", \"fmt\": \"e4m3\", \"weight_block_size\": \"128x128\"}",
     DSI_E_CONFIG, "\"quantization_config.weight_block_size\""},
  };
  for (size_t i = 0; i < DSI_ARRAY_LEN(cases); i++) {
    if (!CHECK_ERR(parse_with("tiny-bf16", &c, &err, cases[i].key, cases[i].value, NULL), cases[i].status, err,
                   cases[i].needle))
      fprintf(stderr, "    case %s = %s\n", cases[i].key, cases[i].value);
  }
  /* a failed parse leaves nothing half-filled */
  CHECK(parse_with("tiny-bf16", &c, &err, "topk_group", "5", NULL) != DSI_OK && c.hidden_size == 0);
}

static void test_bad_json(void) {
  dsi_config c;
  dsi_err err;
  char *text = base_text("tiny-bf16");
  size_t n = strlen(text), close = (size_t)(strrchr(text, '}') - text);
  /* every prefix that cuts the object is bad JSON; none may crash */
  int all = 1;
  for (size_t len = 0; len <= close; len++) {
    char *cut = malloc(len ? len : 1);
    memcpy(cut, text, len);
    memset(&err, 0, sizeof err);
    int st = dsi_config_parse(&c, cut, len, "config.json", &err);
    all &= st == DSI_E_FORMAT && strstr(err.msg, "config.json: bad JSON at line") != NULL;
    free(cut);
  }
  CHECK(all);
  memset(&err, 0, sizeof err);
  CHECK(dsi_config_parse(&c, text, n, "config.json", &err) == DSI_OK);
  free(text);

  CHECK_ERR(parse_text("{\"vocab_size\": 512,\n  \"hidden_size\": 12x}", &c, &err), DSI_E_FORMAT, err,
            "config.json: bad JSON at line 2");
  CHECK_ERR(parse_text("{} trailing", &c, &err), DSI_E_FORMAT, err, "bad JSON");
  CHECK_ERR(parse_text("", &c, &err), DSI_E_FORMAT, err, "bad JSON");
  CHECK_ERR(parse_text("[1, 2]", &c, &err), DSI_E_CONFIG, err, "JSON object");
  CHECK_ERR(parse_text("{}", &c, &err), DSI_E_CONFIG, err, "missing required key \"vocab_size\"");
  CHECK_ERR(parse_text("{\"vocab_size\": 5, \"vocab_size\": 6}", &c, &err), DSI_E_CONFIG, err,
            "\"vocab_size\": appears more than once");
  /* an embedded NUL ends the text */
  memset(&err, 0, sizeof err);
  CHECK(dsi_config_parse(&c, "{}\0{}", 5, "x/config.json", &err) == DSI_E_FORMAT && strstr(err.msg, "x/config.json"));
  CHECK_ERR(dsi_config_parse(&c, "{}\0 ", 4, "config.json", &err), DSI_E_FORMAT, err, "(byte 2)");

  CHECK_ERR(dsi_config_load(&c, "data/configs/no-such-model", &err), DSI_E_IO, err,
            "data/configs/no-such-model/config.json");
}

int main(void) {
  test_golden_tiny();
  test_deepseek_v3();
  test_deepseek_v2();
  test_variants();
  test_required();
  test_wrong_values();
  test_bad_json();
  return check_done();
}
