/* tests/fuzz: config.json from untrusted bytes. Whatever is accepted must
 * hold the invariants the rest of the engine relies on; whatever is
 * refused must say so with a message naming the file. */
#include "model/config.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  dsi_config c;
  dsi_err err = {0};
  int st = dsi_config_parse(&c, (const char *)data, size, "fuzz/config.json", &err);
  if (st != DSI_OK) {
    DSI_ASSERT(st < 0 && strstr(err.msg, "fuzz/config.json"));
    return 0;
  }
  DSI_ASSERT(c.vocab_size > 0 && c.hidden_size > 0 && c.num_hidden_layers > 0 && c.num_attention_heads > 0);
  DSI_ASSERT(c.kv_lora_rank > 0 && c.qk_nope_head_dim > 0 && c.v_head_dim > 0 && c.intermediate_size > 0);
  DSI_ASSERT(c.qk_rope_head_dim > 0 && c.qk_rope_head_dim % 2 == 0 && c.q_lora_rank >= 0);
  DSI_ASSERT(c.n_group > 0 && c.topk_group > 0 && c.topk_group <= c.n_group && c.moe_layer_freq > 0);
  DSI_ASSERT(c.first_k_dense_replace >= 0 && c.first_k_dense_replace <= c.num_hidden_layers);
  if (c.n_routed_experts > 0) {
    DSI_ASSERT(c.n_routed_experts % c.n_group == 0 && c.moe_intermediate_size > 0);
    DSI_ASSERT(c.num_experts_per_tok > 0 && c.num_experts_per_tok <= c.n_routed_experts);
  }
  DSI_ASSERT(c.rms_norm_eps > 0 && c.rope_theta > 0 && c.routed_scaling_factor > 0);
  DSI_ASSERT(!c.rope_yarn || (c.rope_factor > 0 && c.rope_original_max_position_embeddings > 0));
  DSI_ASSERT(!c.fp8 || (c.weight_block_size[0] == 128 && c.weight_block_size[1] == 128));
  DSI_ASSERT(c.has_e_score_correction_bias == (c.topk_method == DSI_TOPK_NOAUX_TC));
  volatile float scale = dsi_config_softmax_scale(&c);
  (void)scale;
  for (int l = 0; l < c.num_hidden_layers && l < 4096; l++) (void)dsi_config_is_moe_layer(&c, l);
  return 0;
}
