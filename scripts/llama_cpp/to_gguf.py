#!/usr/bin/env python3
"""Write a BF16 DeepSeek-V3 checkpoint (as `dsinfer mkmodel` writes it, or any
Hugging Face directory in BF16) as a GGUF file that llama.cpp's `deepseek2`
architecture loads, to measure llama.cpp side by side on the same weights.

llama.cpp's own convert_hf_to_gguf.py needs the `transformers` package, which
this machine's registries do not carry; this script needs only numpy, PyYAML
and llama.cpp's own `gguf-py` (from the source tree the comparison builds):

    /usr/bin/python3 scripts/llama_cpp/to_gguf.py --llama /path/to/llama.cpp \\
        --model /tmp/models/bench-bf16 --out /tmp/models/bench-bf16.gguf

The layout follows what llama.cpp's deepseek2 loader expects: MLA as MQA with
kv_b split into k_b (transposed) and v_b, experts stacked into 3-D tensors,
the router bias as exp_probs_b, tokenizer as GPT-2 BPE with the deepseek-v3
pre-tokenizer. Only BF16 (and F32 for norms and biases) is read; FP8
checkpoints are out of scope.
"""
import argparse
import json
import mmap
import os
import struct
import sys

import numpy as np


def load_safetensors(model_dir):
    """name -> (dtype, shape, memoryview) over every shard of model_dir."""
    out = {}
    for fn in sorted(os.listdir(model_dir)):
        if not fn.endswith(".safetensors"):
            continue
        f = open(os.path.join(model_dir, fn), "rb")
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        (n,) = struct.unpack("<Q", mm[:8])
        header = json.loads(mm[8:8 + n])
        base = 8 + n
        for name, info in header.items():
            if name == "__metadata__":
                continue
            a, b = info["data_offsets"]
            out[name] = (info["dtype"], info["shape"], memoryview(mm)[base + a:base + b])
    if not out:
        sys.exit(f"to_gguf: no .safetensors files in {model_dir}")
    return out


def array(t):
    dtype, shape, buf = t
    if dtype == "BF16":
        return np.frombuffer(buf, dtype=np.uint16).reshape(shape)
    if dtype == "F32":
        return np.frombuffer(buf, dtype=np.float32).reshape(shape)
    sys.exit(f"to_gguf: tensor dtype {dtype} is not supported (BF16 and F32 only)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama", required=True, help="llama.cpp source tree (for gguf-py)")
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    sys.path.insert(0, os.path.join(a.llama, "gguf-py"))
    import gguf  # noqa: E402

    cfg = json.load(open(os.path.join(a.model, "config.json")))
    tok = json.load(open(os.path.join(a.model, "tokenizer.json")))
    tcfg_path = os.path.join(a.model, "tokenizer_config.json")
    tcfg = json.load(open(tcfg_path)) if os.path.exists(tcfg_path) else {}
    tensors = load_safetensors(a.model)

    arch = gguf.MODEL_ARCH.DEEPSEEK2
    n_layer = cfg["num_hidden_layers"]
    w = gguf.GGUFWriter(a.out, gguf.MODEL_ARCH_NAMES[arch])
    w.add_name(os.path.basename(os.path.normpath(a.model)))
    w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16)
    w.add_block_count(n_layer)
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(1)  # MLA as MQA, as llama.cpp's converter writes it
    w.add_rope_freq_base(cfg.get("rope_theta", 10000.0))
    w.add_layer_norm_rms_eps(cfg.get("rms_norm_eps", 1e-6))
    w.add_vocab_size(cfg["vocab_size"])
    w.add_leading_dense_block_count(cfg.get("first_k_dense_replace", 0))
    if cfg.get("q_lora_rank"):
        w.add_q_lora_rank(cfg["q_lora_rank"])
    kv_lora = cfg["kv_lora_rank"]
    nope, rope, vdim = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
    w.add_kv_lora_rank(kv_lora)
    w.add_key_length(kv_lora + rope)
    w.add_value_length(kv_lora)
    w.add_key_length_mla(nope + rope)
    w.add_value_length_mla(vdim)
    w.add_rope_dimension_count(rope)
    w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
    w.add_expert_count(cfg["n_routed_experts"])
    w.add_expert_used_count(cfg["num_experts_per_tok"])
    w.add_expert_shared_count(cfg.get("n_shared_experts", 0))
    w.add_expert_group_count(cfg.get("n_group", 1))
    w.add_expert_group_used_count(cfg.get("topk_group", 1))
    w.add_expert_weights_scale(cfg.get("routed_scaling_factor", 1.0))
    if cfg.get("norm_topk_prob"):
        w.add_expert_weights_norm(True)
    w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID
                             if cfg.get("scoring_func", "softmax") == "sigmoid"
                             else gguf.ExpertGatingFuncType.SOFTMAX)
    rs = cfg.get("rope_scaling") or {}
    if rs.get("type", rs.get("rope_type")) == "yarn":
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(rs["factor"])
        w.add_rope_scaling_orig_ctx_len(rs["original_max_position_embeddings"])
        if "mscale_all_dim" in rs:
            w.add_rope_scaling_yarn_log_mul(0.1 * rs["mscale_all_dim"])

    # tokenizer: GPT-2 style byte-level BPE, DeepSeek-V3 pre-tokenizer
    vocab = tok["model"]["vocab"]
    specials = {t["id"]: t for t in tok.get("added_tokens", [])}
    n_vocab = cfg["vocab_size"]
    tokens, types = [], []
    inv = {i: s for s, i in vocab.items()}
    for i in range(n_vocab):
        if i in specials:
            tokens.append(specials[i]["content"])
            types.append(gguf.TokenType.CONTROL if specials[i].get("special")
                         else gguf.TokenType.USER_DEFINED)
        elif i in inv:
            tokens.append(inv[i])
            types.append(gguf.TokenType.NORMAL)
        else:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("deepseek-v3")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(cfg.get("bos_token_id", 0))
    w.add_eos_token_id(cfg.get("eos_token_id", 1))
    w.add_add_bos_token(bool(tcfg.get("add_bos_token", True)))
    w.add_add_eos_token(False)
    if isinstance(tcfg.get("chat_template"), str):
        w.add_chat_template(tcfg["chat_template"])

    names = gguf.get_tensor_name_map(arch, n_layer)
    bf16 = gguf.GGMLQuantizationType.BF16

    def put(hf_name, arr):
        if hf_name.endswith("e_score_correction_bias"):
            hf_name = hf_name.replace("e_score_correction_bias", "e_score_correction.bias")
        name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if name is None:
            sys.exit(f"to_gguf: no GGUF name for {hf_name}")
        if arr.dtype == np.uint16:
            w.add_tensor(name, np.ascontiguousarray(arr), raw_dtype=bf16)
        else:
            w.add_tensor(name, np.ascontiguousarray(arr.astype(np.float32)))

    n_exp = cfg["n_routed_experts"]
    n_head = cfg["num_attention_heads"]
    for hf_name in sorted(tensors):
        if ".mlp.experts." in hf_name:
            continue
        m = hf_name.split(".")
        if m[:2] == ["model", "layers"] and int(m[2]) >= n_layer:
            continue  # multi-token-prediction layers
        arr = array(tensors[hf_name])
        if hf_name.endswith("kv_b_proj.weight"):
            kv_b = arr.reshape(n_head, nope + vdim, kv_lora)
            put(hf_name.replace("kv_b_proj", "k_b_proj"), kv_b[:, :nope, :].transpose(0, 2, 1))
            put(hf_name.replace("kv_b_proj", "v_b_proj"), kv_b[:, nope:, :])
            continue
        if arr.ndim == 1 and arr.dtype == np.uint16:  # norms: F32, as llama.cpp keeps them
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        put(hf_name, arr)
    for layer in range(n_layer):
        if f"model.layers.{layer}.mlp.experts.0.up_proj.weight" not in tensors:
            continue
        for proj in ("gate_proj", "up_proj", "down_proj"):
            stacked = np.stack([array(tensors[f"model.layers.{layer}.mlp.experts.{e}.{proj}.weight"])
                                for e in range(n_exp)])
            put(f"model.layers.{layer}.mlp.experts.{proj}.weight", stacked)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"to_gguf: wrote {a.out}")


if __name__ == "__main__":
    main()
