/* model: a loaded checkpoint — its config and its weights, held in
 * anonymous memory (or a locked mapping) in the layout the kernels read.
 * Names follow the Hugging Face tensor names of DeepSeek-V3. */
#ifndef DSI_MODEL_H
#define DSI_MODEL_H

#include "base/base.h"
#include "kernels/kernels.h"
#include "model/config.h"
#include "model/safetensors.h"

typedef struct dsi_layer_weights {
  float *input_layernorm;          /* [hidden] */
  float *post_attention_layernorm; /* [hidden] */
  /* MLA */
  dsi_mat q_a_proj;                /* [q_lora, hidden] (q_lora_rank > 0) */
  float *q_a_layernorm;            /* [q_lora] */
  dsi_mat q_b_proj;                /* [H*(nope+rope), q_lora] */
  dsi_mat q_proj;                  /* [H*(nope+rope), hidden] (q_lora_rank == 0) */
  dsi_mat kv_a_proj_with_mqa;      /* [kv_lora+rope, hidden] */
  float *kv_a_layernorm;           /* [kv_lora] */
  dsi_mat kv_b_proj;               /* [H*(nope+v), kv_lora] (row-major layout only) */
  /* packed layout: kv_b_proj split into the two absorbed factors */
  dsi_mat w_uk_t;                  /* [H*kv_lora, nope]: W_UK per head, transposed */
  dsi_mat w_uv;                    /* [H*v, kv_lora]: W_UV per head */
  dsi_mat w_uk;                    /* [H*nope, kv_lora]: W_UK per head, row form: the
                                      non-absorbed prefill expands cached latents to keys */
  dsi_mat o_proj;                  /* [hidden, H*v] */
  /* dense MLP, or the MoE's shared experts */
  int is_moe;
  dsi_mat gate_proj, up_proj, down_proj; /* row-major layout */
  dsi_mat gate_up;                 /* packed layout: gate and up in panel pairs */
  /* MoE */
  dsi_mat gate;                    /* router [n_experts, hidden] */
  float *e_score_correction_bias;  /* [n_experts] or NULL */
  dsi_mat *exp_gate, *exp_up, *exp_down; /* [n_experts]; exp_gate/up row-major only */
  dsi_mat *exp_gate_up;            /* [n_experts], packed layout */
} dsi_layer_weights;

struct dsi_model {
  dsi_config cfg;
  char *dir;
  dsi_mat embed_tokens;            /* [vocab, hidden] */
  float *norm;                     /* [hidden] */
  dsi_mat lm_head;                 /* [vocab, hidden] */
  dsi_layer_weights *layers;       /* [num_hidden_layers] */
  int packed;                      /* 1: weights in the kernels' TILES layout (--op-opt on) */
  int quant;                       /* DSI_QUANT_*: packed linear weights quantized at load */
  /* storage */
  uint8_t *mem;                    /* one anonymous block holding all weights */
  size_t mem_size;
  dsi_st_set st;                   /* kept open only with --mlock */
  int mlocked;
  size_t file_bytes, weight_bytes;
  double load_seconds;
  const char *weight_dtype;
};

#endif
