"""The DeepSeek-V3 architecture in torch, written from the architecture, for
training a small model and computing reference outputs.

It computes the function DeepSeek's official inference code
(inference/model.py of deepseek-ai/DeepSeek-V3) computes, with the weights
under their Hugging Face names ([out, in] linear weights):
- RMSNorm: x / sqrt(mean(x^2) + eps) * weight (eps = rms_norm_eps).
- MLA: q = q_b(norm(q_a(x))) per head [nope | rope]; kv_a(x) = [latent |
  k_rope], the latent normalized then expanded by kv_b per head to
  [k_nope | v]; k_rope is one key shared by all heads. RoPE rotates
  interleaved pairs (x[2i], x[2i+1]) by pos * theta^(-2i/d). Scores scaled
  by (qk_nope + qk_rope)^-0.5, causal, softmax in float32.
- MoE: s = sigmoid(x Wg^T); the selection score s + e_score_correction_bias;
  a group's score is the sum of its two best; the best topk_group groups
  are kept; top-k experts among them; weights = the unbiased s of the
  chosen, normalized to sum 1, times routed_scaling_factor. Output = sum of
  w * down(silu(gate x) * up x) plus the shared experts' MLP.
- The first first_k_dense_replace layers are dense MLPs; pre-norm residual
  blocks; final norm; lm_head (not tied).

All arithmetic runs in the dtype of the parameters (float32 for training,
float64 for the reference outputs), except the rope angles, which are
computed in float32 as the official code computes them."""
import math

import torch
import torch.nn.functional as F
from torch import nn


class Config:
    def __init__(self, **kw):
        self.vocab_size = 8192
        self.hidden_size = 256
        self.num_hidden_layers = 4
        self.first_k_dense_replace = 1
        self.num_attention_heads = 4
        self.q_lora_rank = 128
        self.kv_lora_rank = 64
        self.qk_nope_head_dim = 32
        self.qk_rope_head_dim = 16
        self.v_head_dim = 32
        self.intermediate_size = 768
        self.moe_intermediate_size = 128
        self.n_routed_experts = 16
        self.n_shared_experts = 1
        self.num_experts_per_tok = 4
        self.n_group = 4
        self.topk_group = 2
        self.routed_scaling_factor = 2.5
        self.rms_norm_eps = 1e-6
        self.rope_theta = 10000.0
        self.max_position_embeddings = 512
        self.bos_token_id = 0
        self.eos_token_id = 1
        self.__dict__.update(kw)

    def hf(self):
        """config.json as DeepSeek-V3 ships it (FP8 weights)."""
        return {
            "architectures": ["DeepseekV3ForCausalLM"],
            "attention_bias": False,
            "attention_dropout": 0.0,
            "aux_loss_alpha": 0.001,
            "bos_token_id": self.bos_token_id,
            "eos_token_id": self.eos_token_id,
            "ep_size": 1,
            "first_k_dense_replace": self.first_k_dense_replace,
            "hidden_act": "silu",
            "hidden_size": self.hidden_size,
            "initializer_range": 0.02,
            "intermediate_size": self.intermediate_size,
            "kv_lora_rank": self.kv_lora_rank,
            "max_position_embeddings": self.max_position_embeddings,
            "model_type": "deepseek_v3",
            "moe_intermediate_size": self.moe_intermediate_size,
            "moe_layer_freq": 1,
            "n_group": self.n_group,
            "n_routed_experts": self.n_routed_experts,
            "n_shared_experts": self.n_shared_experts,
            "norm_topk_prob": True,
            "num_attention_heads": self.num_attention_heads,
            "num_experts_per_tok": self.num_experts_per_tok,
            "num_hidden_layers": self.num_hidden_layers,
            "num_key_value_heads": self.num_attention_heads,
            "num_nextn_predict_layers": 0,
            "pretraining_tp": 1,
            "q_lora_rank": self.q_lora_rank,
            "qk_nope_head_dim": self.qk_nope_head_dim,
            "qk_rope_head_dim": self.qk_rope_head_dim,
            "quantization_config": {
                "activation_scheme": "dynamic",
                "fmt": "e4m3",
                "quant_method": "fp8",
                "weight_block_size": [128, 128],
            },
            "rms_norm_eps": self.rms_norm_eps,
            "rope_scaling": None,
            "rope_theta": self.rope_theta,
            "routed_scaling_factor": self.routed_scaling_factor,
            "scoring_func": "sigmoid",
            "seq_aux": True,
            "tie_word_embeddings": False,
            "topk_group": self.topk_group,
            "topk_method": "noaux_tc",
            "torch_dtype": "bfloat16",
            "transformers_version": "4.46.3",
            "use_cache": True,
            "v_head_dim": self.v_head_dim,
            "vocab_size": self.vocab_size,
        }


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_cos_sin(cfg, n_pos, dtype):
    """cos, sin: [n_pos, qk_rope_head_dim / 2], angles pos * theta^(-2i/d) in float32."""
    d = cfg.qk_rope_head_dim
    inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    ang = torch.outer(torch.arange(n_pos, dtype=torch.float32), inv)
    return torch.cos(ang).to(dtype), torch.sin(ang).to(dtype)


def apply_rope(x, cos, sin):
    """x: [B, T, H, d]; rotates the pairs (x[2i], x[2i+1])."""
    x0, x1 = x[..., 0::2], x[..., 1::2]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1).flatten(-2)


def linear(i, o):
    return nn.Linear(i, o, bias=False)


class MLA(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        h, H = cfg.hidden_size, cfg.num_attention_heads
        self.qk_head_dim = cfg.qk_nope_head_dim + cfg.qk_rope_head_dim
        self.q_a_proj = linear(h, cfg.q_lora_rank)
        self.q_a_layernorm = RMSNorm(cfg.q_lora_rank, cfg.rms_norm_eps)
        self.q_b_proj = linear(cfg.q_lora_rank, H * self.qk_head_dim)
        self.kv_a_proj_with_mqa = linear(h, cfg.kv_lora_rank + cfg.qk_rope_head_dim)
        self.kv_a_layernorm = RMSNorm(cfg.kv_lora_rank, cfg.rms_norm_eps)
        self.kv_b_proj = linear(cfg.kv_lora_rank, H * (cfg.qk_nope_head_dim + cfg.v_head_dim))
        self.o_proj = linear(H * cfg.v_head_dim, h)
        self.softmax_scale = self.qk_head_dim ** -0.5

    def forward(self, x, cos, sin, mask):
        cfg = self.cfg
        B, T, _ = x.shape
        H, nope, rope, vd = cfg.num_attention_heads, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim
        q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x))).view(B, T, H, nope + rope)
        q_nope, q_pe = q.split([nope, rope], dim=-1)
        q_pe = apply_rope(q_pe, cos, sin)
        kv = self.kv_a_proj_with_mqa(x)
        latent, k_pe = kv.split([cfg.kv_lora_rank, rope], dim=-1)
        k_pe = apply_rope(k_pe.unsqueeze(2), cos, sin)  # [B, T, 1, rope]: one key for all heads
        kv = self.kv_b_proj(self.kv_a_layernorm(latent)).view(B, T, H, nope + vd)
        k_nope, v = kv.split([nope, vd], dim=-1)
        q = torch.cat([q_nope, q_pe], dim=-1).transpose(1, 2)  # [B, H, T, qk]
        k = torch.cat([k_nope, k_pe.expand(B, T, H, rope)], dim=-1).transpose(1, 2)
        scores = (q @ k.transpose(-1, -2)) * self.softmax_scale + mask
        p = scores.softmax(dim=-1, dtype=torch.float32).to(x.dtype)
        o = (p @ v.transpose(1, 2)).transpose(1, 2).reshape(B, T, H * vd)
        return self.o_proj(o)


class MLP(nn.Module):
    def __init__(self, h, inter):
        super().__init__()
        self.gate_proj = linear(h, inter)
        self.up_proj = linear(h, inter)
        self.down_proj = linear(inter, h)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Gate(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.weight = nn.Parameter(torch.empty(cfg.n_routed_experts, cfg.hidden_size))
        # not trained by gradient: moved toward balanced loads (auxiliary-loss-free balancing)
        self.register_buffer("e_score_correction_bias", torch.zeros(cfg.n_routed_experts))

    def forward(self, x):
        """x: [N, hidden] -> (weights [N, k], experts [N, k], scores [N, E])."""
        cfg = self.cfg
        s = torch.sigmoid(F.linear(x, self.weight))
        c = s.detach() + self.e_score_correction_bias.to(s.dtype)
        N, E = c.shape
        if cfg.n_group > 1:
            g = c.view(N, cfg.n_group, E // cfg.n_group)
            group_score = g.topk(2, dim=-1)[0].sum(-1)
            keep = group_score.topk(cfg.topk_group, dim=-1)[1]
            drop = torch.ones(N, cfg.n_group, dtype=torch.bool).scatter_(1, keep, False)
            c = g.masked_fill(drop.unsqueeze(-1), float("-inf")).view(N, E)
        idx = c.topk(cfg.num_experts_per_tok, dim=-1)[1]
        w = s.gather(1, idx)
        w = w / w.sum(-1, keepdim=True) * cfg.routed_scaling_factor
        return w, idx, s


class MoE(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.gate = Gate(cfg)
        self.experts = nn.ModuleList(MLP(cfg.hidden_size, cfg.moe_intermediate_size) for _ in range(cfg.n_routed_experts))
        self.shared_experts = MLP(cfg.hidden_size, cfg.n_shared_experts * cfg.moe_intermediate_size)
        self.last_load = None  # tokens per expert in the last forward (training)
        self.aux_loss = None

    def forward(self, x):
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        w, idx, s = self.gate(x)
        y = torch.zeros_like(x)
        flat = idx.reshape(-1)
        order = flat.argsort(stable=True)
        counts = torch.bincount(flat, minlength=self.cfg.n_routed_experts)
        token = order // idx.shape[1]
        wflat = w.reshape(-1)[order]
        start = 0
        for e, n in enumerate(counts.tolist()):
            if n == 0:
                continue
            t = token[start:start + n]
            y.index_add_(0, t, self.experts[e](x[t]) * wflat[start:start + n, None])
            start += n
        if self.training:
            self.last_load = counts.detach()
            # DeepSeek-V3's complementary balance loss: E * sum_i f_i * P_i
            E, k = self.cfg.n_routed_experts, self.cfg.num_experts_per_tok
            f = counts.to(s.dtype) * E / (k * x.shape[0])
            p = (s / s.sum(-1, keepdim=True)).mean(0)
            self.aux_loss = (f * p).sum()
        return (y + self.shared_experts(x)).view(shape)


class Block(nn.Module):
    def __init__(self, cfg, layer):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = MLA(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg.hidden_size, cfg.intermediate_size) if layer < cfg.first_k_dense_replace else MoE(cfg)

    def forward(self, x, cos, sin, mask):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class Inner(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(Block(cfg, i) for i in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class DeepseekV3(nn.Module):
    """Parameter names are the Hugging Face checkpoint's (model.layers.L...., lm_head)."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.model = Inner(cfg)
        self.lm_head = linear(cfg.hidden_size, cfg.vocab_size)

    def init_weights(self, gen):
        std = 0.02
        out_std = std / math.sqrt(2 * self.cfg.num_hidden_layers)
        for name, p in self.named_parameters():
            if name.endswith("layernorm.weight") or name.endswith("norm.weight"):
                continue
            s = out_std if name.endswith(("o_proj.weight", "down_proj.weight")) else std
            with torch.no_grad():
                p.copy_(torch.randn(p.shape, generator=gen) * s)

    def forward(self, tokens):
        """tokens: [B, T] (position 0 onward) -> logits [B, T, vocab]."""
        B, T = tokens.shape
        dtype = self.lm_head.weight.dtype
        x = self.model.embed_tokens(tokens)
        cos, sin = rope_cos_sin(self.cfg, T, dtype)
        mask = torch.full((T, T), float("-inf"), dtype=dtype).triu_(1)
        for layer in self.model.layers:
            x = layer(x, cos, sin, mask)
        return self.lm_head(self.model.norm(x))

    def moe_layers(self):
        return [l.mlp for l in self.model.layers if isinstance(l.mlp, MoE)]
