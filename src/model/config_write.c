/* model: dsi_config written back as a Hugging Face config.json — every key
 * a real DeepSeek-V3 config.json has, sorted as transformers writes them,
 * indented by two spaces. The parser (config.c) reads these files. */
#include "model/config.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

/* The shortest decimal that reads back as the same float, as a double:
 * 1e-6f is written "1e-06", not "9.99999997475243e-07". */
static double short_float(float f) {
  char buf[32];
  for (int prec = 1; prec <= 9; prec++) {
    snprintf(buf, sizeof buf, "%.*g", prec, (double)f);
    if (strtof(buf, NULL) == f) break;
  }
  return strtod(buf, NULL);
}

static const char *topk_method_name(dsi_topk_method m) {
  switch (m) {
  case DSI_TOPK_GREEDY: return "greedy";
  case DSI_TOPK_GROUP_LIMITED_GREEDY: return "group_limited_greedy";
  case DSI_TOPK_NOAUX_TC: return "noaux_tc";
  }
  return "noaux_tc";
}

/* cJSON indents with tabs and writes "key":<tab>value; Hugging Face files
 * use two spaces and "key": value. Literal tabs only occur as formatting
 * (cJSON escapes them inside strings). */
static char *retab(const char *s) {
  size_t n = 0;
  for (const char *p = s; *p; p++) n += *p == '\t' ? 2 : 1;
  char *out = malloc(n + 2);
  if (!out) return NULL;
  char *o = out;
  for (const char *p = s; *p; p++) {
    if (*p != '\t') *o++ = *p;
    else if (p > s && p[-1] == ':') *o++ = ' ';
    else { *o++ = ' '; *o++ = ' '; }
  }
  *o++ = '\n';
  *o = 0;
  return out;
}

/* Keys in alphabetical order, as json.dump(sort_keys=True) leaves them in
 * the files people download. Returns NULL only when memory runs out. */
char *dsi_config_to_json(const dsi_config *c) {
  dsi_json_oom_clear();
  cJSON *j = cJSON_CreateObject();
  if (!j) return NULL;
  cJSON *arch = cJSON_AddArrayToObject(j, "architectures");
  cJSON_AddItemToArray(arch, cJSON_CreateString("DeepseekV3ForCausalLM"));
  cJSON_AddFalseToObject(j, "attention_bias");
  cJSON_AddRawToObject(j, "attention_dropout", "0.0"); /* a float, as HF writes it */
  cJSON_AddNumberToObject(j, "aux_loss_alpha", 0.001);
  cJSON_AddNumberToObject(j, "bos_token_id", c->bos_token_id);
  cJSON_AddNumberToObject(j, "eos_token_id", c->eos_token_id);
  cJSON_AddNumberToObject(j, "ep_size", 1);
  cJSON_AddNumberToObject(j, "first_k_dense_replace", c->first_k_dense_replace);
  cJSON_AddStringToObject(j, "hidden_act", "silu");
  cJSON_AddNumberToObject(j, "hidden_size", c->hidden_size);
  cJSON_AddNumberToObject(j, "initializer_range", 0.02);
  cJSON_AddNumberToObject(j, "intermediate_size", c->intermediate_size);
  cJSON_AddNumberToObject(j, "kv_lora_rank", c->kv_lora_rank);
  cJSON_AddNumberToObject(j, "max_position_embeddings", c->max_position_embeddings);
  cJSON_AddStringToObject(j, "model_type", "deepseek_v3");
  cJSON_AddNumberToObject(j, "moe_intermediate_size", c->moe_intermediate_size);
  cJSON_AddNumberToObject(j, "moe_layer_freq", c->moe_layer_freq);
  cJSON_AddNumberToObject(j, "n_group", c->n_group);
  cJSON_AddNumberToObject(j, "n_routed_experts", c->n_routed_experts);
  cJSON_AddNumberToObject(j, "n_shared_experts", c->n_shared_experts);
  cJSON_AddBoolToObject(j, "norm_topk_prob", c->norm_topk_prob != 0);
  cJSON_AddNumberToObject(j, "num_attention_heads", c->num_attention_heads);
  cJSON_AddNumberToObject(j, "num_experts_per_tok", c->num_experts_per_tok);
  cJSON_AddNumberToObject(j, "num_hidden_layers", c->num_hidden_layers);
  cJSON_AddNumberToObject(j, "num_key_value_heads", c->num_attention_heads);
  cJSON_AddNumberToObject(j, "num_nextn_predict_layers", c->num_nextn_predict_layers);
  cJSON_AddNumberToObject(j, "pretraining_tp", 1);
  if (c->q_lora_rank > 0) cJSON_AddNumberToObject(j, "q_lora_rank", c->q_lora_rank);
  else cJSON_AddNullToObject(j, "q_lora_rank");
  cJSON_AddNumberToObject(j, "qk_nope_head_dim", c->qk_nope_head_dim);
  cJSON_AddNumberToObject(j, "qk_rope_head_dim", c->qk_rope_head_dim);
  if (c->fp8) {
    cJSON *q = cJSON_AddObjectToObject(j, "quantization_config");
    cJSON_AddStringToObject(q, "activation_scheme", "dynamic");
    cJSON_AddStringToObject(q, "fmt", "e4m3");
    cJSON_AddStringToObject(q, "quant_method", "fp8");
    int bs[2] = {c->weight_block_size[0] > 0 ? c->weight_block_size[0] : 128,
                 c->weight_block_size[1] > 0 ? c->weight_block_size[1] : 128};
    cJSON_AddItemToObject(q, "weight_block_size", cJSON_CreateIntArray(bs, 2));
  }
  cJSON_AddNumberToObject(j, "rms_norm_eps", short_float(c->rms_norm_eps));
  if (c->rope_yarn) {
    cJSON *r = cJSON_AddObjectToObject(j, "rope_scaling");
    cJSON_AddNumberToObject(r, "beta_fast", short_float(c->rope_beta_fast));
    cJSON_AddNumberToObject(r, "beta_slow", short_float(c->rope_beta_slow));
    cJSON_AddNumberToObject(r, "factor", short_float(c->rope_factor));
    cJSON_AddNumberToObject(r, "mscale", short_float(c->rope_mscale));
    cJSON_AddNumberToObject(r, "mscale_all_dim", short_float(c->rope_mscale_all_dim));
    cJSON_AddNumberToObject(r, "original_max_position_embeddings", c->rope_original_max_position_embeddings);
    cJSON_AddStringToObject(r, "type", "yarn");
  } else {
    cJSON_AddNullToObject(j, "rope_scaling");
  }
  cJSON_AddNumberToObject(j, "rope_theta", short_float(c->rope_theta));
  cJSON_AddNumberToObject(j, "routed_scaling_factor", short_float(c->routed_scaling_factor));
  cJSON_AddStringToObject(j, "scoring_func", c->scoring_func == DSI_SCORING_SIGMOID ? "sigmoid" : "softmax");
  cJSON_AddTrueToObject(j, "seq_aux");
  cJSON_AddBoolToObject(j, "tie_word_embeddings", c->tie_word_embeddings != 0);
  cJSON_AddNumberToObject(j, "topk_group", c->topk_group);
  cJSON_AddStringToObject(j, "topk_method", topk_method_name(c->topk_method));
  /* the dtype the weights were trained in; FP8 checkpoints say bfloat16 too */
  cJSON_AddStringToObject(j, "torch_dtype", "bfloat16");
  cJSON_AddStringToObject(j, "transformers_version", "4.46.3");
  cJSON_AddTrueToObject(j, "use_cache");
  cJSON_AddNumberToObject(j, "v_head_dim", c->v_head_dim);
  cJSON_AddNumberToObject(j, "vocab_size", c->vocab_size);

  char *tabbed = dsi_json_oom() ? NULL : cJSON_Print(j); /* not with a key left out */
  cJSON_Delete(j);
  if (!tabbed) return NULL;
  char *out = retab(tabbed);
  cJSON_free(tabbed);
  return out;
}
