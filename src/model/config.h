/* model: config.json of a DeepSeek-V3-family checkpoint (V3, R1, V3.1,
 * V2, V2-Lite, Kimi K2, Moonlight) parsed into dsi_config. Field names are
 * the Hugging Face config keys. */
#ifndef DSI_CONFIG_H
#define DSI_CONFIG_H

#include "base/base.h"

typedef enum { DSI_SCORING_SOFTMAX, DSI_SCORING_SIGMOID } dsi_scoring;
typedef enum { DSI_TOPK_GREEDY, DSI_TOPK_GROUP_LIMITED_GREEDY, DSI_TOPK_NOAUX_TC } dsi_topk_method;

typedef struct dsi_config {
  int vocab_size;
  int hidden_size;
  int intermediate_size;       /* dense MLP */
  int moe_intermediate_size;   /* one routed expert */
  int num_hidden_layers;
  int num_nextn_predict_layers;/* MTP layers after the last (skipped) */
  int num_attention_heads;
  int q_lora_rank;             /* 0 when null: plain q_proj */
  int kv_lora_rank;
  int qk_nope_head_dim, qk_rope_head_dim, v_head_dim;
  int n_routed_experts;        /* 0: no MoE at all */
  int n_shared_experts;
  int num_experts_per_tok;
  int n_group, topk_group;
  dsi_topk_method topk_method;
  dsi_scoring scoring_func;
  int norm_topk_prob;
  float routed_scaling_factor;
  int first_k_dense_replace;
  int moe_layer_freq;
  float rms_norm_eps;
  float rope_theta;
  int max_position_embeddings;
  /* rope_scaling: yarn when rope_yarn */
  int rope_yarn;
  float rope_factor;
  int rope_original_max_position_embeddings;
  float rope_beta_fast, rope_beta_slow;
  float rope_mscale, rope_mscale_all_dim;
  int tie_word_embeddings;
  int bos_token_id, eos_token_id;
  /* quantization_config: fp8 e4m3 with block scales */
  int fp8;                     /* quant_method fp8 */
  int weight_block_size[2];    /* [128,128] */
  int has_e_score_correction_bias; /* noaux_tc */
} dsi_config;

/* Parse config.json text. path only names the file in messages. A key that
 * is missing, of the wrong type, out of range or inconsistent with another
 * fails with DSI_E_CONFIG and a message naming the key. */
int dsi_config_parse(dsi_config *c, const char *json, size_t len, const char *path, dsi_err *err);
int dsi_config_load(dsi_config *c, const char *dir, dsi_err *err);

/* is layer l a MoE layer? */
static inline int dsi_config_is_moe_layer(const dsi_config *c, int l) {
  return c->n_routed_experts > 0 && l >= c->first_k_dense_replace && l % c->moe_layer_freq == 0;
}
static inline int dsi_config_qk_head_dim(const dsi_config *c) { return c->qk_nope_head_dim + c->qk_rope_head_dim; }

/* The attention softmax scale: (nope+rope)^-0.5, times mscale^2 under YaRN
 * with mscale = 0.1 * mscale_all_dim * ln(factor) + 1. */
float dsi_config_softmax_scale(const dsi_config *c);

/* Write c as a Hugging Face config.json (for mkmodel). Caller frees. */
char *dsi_config_to_json(const dsi_config *c);

#endif
