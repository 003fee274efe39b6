/* model: a loaded checkpoint — its config and its weights, held in
 * anonymous memory (or a locked mapping) in the layout the kernels read.
 * Names follow the Hugging Face tensor names of DeepSeek-V3. */
#ifndef DSI_MODEL_H
#define DSI_MODEL_H

#include "base/base.h"
#include "dsinfer.h"
#include "tensor/mat.h"
#include "model/config.h"
#include "model/safetensors.h"

/* How a layer's weights are held; the forward's builder branches on
 * these, never on which matrices happen to be set. */
typedef enum {
  DSI_MLA_KV_B,  /* kv_b_proj whole (row-major; or packed when a head's rows are not whole
                    16-row panels): the attention runs token by token (ATTN_ROWMAJOR) */
  DSI_MLA_SPLIT, /* kv_b_proj split at load into w_uk_t, w_uv and w_uk (packed): the absorbed
                    attention, and the non-absorbed prefill */
} dsi_mla_weights;
typedef enum {
  DSI_FFN_SEPARATE, /* gate_proj, up_proj, down_proj and the experts' exp_gate, exp_up, exp_down,
                       row-major: one matmul each, the experts one by one */
  DSI_FFN_GATE_UP,  /* gate_up and exp_gate_up (gate and up interleaved by panel), down_proj and
                       exp_down, packed: SiLU-mul fused, the grouped expert matmul */
} dsi_ffn_weights;

typedef struct dsi_layer_weights {
  dsi_mla_weights mla_fmt;
  dsi_ffn_weights ffn_fmt;
  float *input_layernorm;          /* [hidden] */
  float *post_attention_layernorm; /* [hidden] */
  /* MLA */
  dsi_mat q_a_proj;                /* [q_lora, hidden] (q_lora_rank > 0) */
  float *q_a_layernorm;            /* [q_lora] */
  dsi_mat q_b_proj;                /* [H*(nope+rope), q_lora] */
  dsi_mat q_proj;                  /* [H*(nope+rope), hidden] (q_lora_rank == 0) */
  dsi_mat kv_a_proj_with_mqa;      /* [kv_lora+rope, hidden] */
  float *kv_a_layernorm;           /* [kv_lora] */
  dsi_mat kv_b_proj;               /* [H*(nope+v), kv_lora] (DSI_MLA_KV_B) */
  /* DSI_MLA_SPLIT: kv_b_proj split into the absorbed factors */
  dsi_mat w_uk_t;                  /* [H*kv_lora, nope]: W_UK per head, transposed */
  dsi_mat w_uv;                    /* [H*v, kv_lora]: W_UV per head */
  dsi_mat w_uk;                    /* [H*nope, kv_lora]: W_UK per head, row form: the
                                      non-absorbed prefill expands cached latents to keys */
  dsi_mat o_proj;                  /* [hidden, H*v] */
  /* dense MLP, or the MoE's shared experts */
  int is_moe;
  dsi_mat gate_proj, up_proj;      /* DSI_FFN_SEPARATE */
  dsi_mat gate_up;                 /* DSI_FFN_GATE_UP: gate and up in panel pairs */
  dsi_mat down_proj;
  /* MoE */
  dsi_mat gate;                    /* router [n_experts, hidden] */
  float *e_score_correction_bias;  /* [n_experts] or NULL */
  dsi_mat *exp_gate, *exp_up;      /* [n_experts], DSI_FFN_SEPARATE */
  dsi_mat *exp_gate_up;            /* [n_experts], DSI_FFN_GATE_UP */
  dsi_mat *exp_down;               /* [n_experts] */
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
  int quant_head;                  /* DSI_QUANT_HEAD_*: what quant made of lm_head */
  int exp_lo, exp_hi, ep_size;     /* the routed experts loaded here: [exp_lo, exp_hi) of every
                                      MoE layer, this rank's share of ep_size (1: all) */
  int vocab_lo, vocab_split;       /* lm_head split by vocabulary: this rank holds its rows
                                      [vocab_lo, vocab_lo + lm_head.rows) of vocab_size;
                                      vocab_split 1: all */
  int tp_rank, tp_size;            /* tensor parallel: this rank holds attention heads
                                      [H*tp_rank/tp_size, H*(tp_rank+1)/tp_size) of every layer
                                      (q_b/q_proj and kv_b rows, o_proj columns), and
                                      cfg.num_attention_heads counts those; tp_size 1: all */
  int n_heads;                     /* the checkpoint's heads (config.json's num_attention_heads) */
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
