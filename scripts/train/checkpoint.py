"""A Hugging Face checkpoint directory as DeepSeek ships V3: config.json,
generation_config.json, model.safetensors (linear weights F8_E4M3 with one
F32 `weight_scale_inv` per 128x128 block, partial blocks at the edges;
embeddings, norms, router and lm_head BF16; the router's correction bias
F32), tokenizer.json and tokenizer_config.json. Also reads one back,
dequantized as DeepSeek's weight_dequant does (fp8 value x its block's
scale, in float32)."""
import json
import os
import shutil
import struct

import numpy as np
import torch

BLOCK = 128


# ---- number formats ----
def _e4m3_table():
    """float32 value of each of the 256 e4m3fn codes (0x7f, 0xff: NaN)."""
    v = np.zeros(256, dtype=np.float32)
    for c in range(256):
        s, e, m = c >> 7, (c >> 3) & 15, c & 7
        x = (m / 8.0) * 2.0 ** -6 if e == 0 else (1 + m / 8.0) * 2.0 ** (e - 7)
        v[c] = -x if s else x
    v[0x7F] = v[0xFF] = np.nan
    return v


E4M3 = _e4m3_table()
E4M3_MAX = 448.0
_POS = E4M3[:0x7F].astype(np.float64)  # codes 0..126: increasing


def to_e4m3(x):
    """float array (|x| <= 448) -> uint8 codes, round to nearest, ties to even."""
    a = np.abs(x.astype(np.float64))
    hi = np.clip(np.searchsorted(_POS, a), 1, 0x7E)
    lo = hi - 1
    dlo, dhi = a - _POS[lo], _POS[hi] - a
    code = np.where((dhi < dlo) | ((dhi == dlo) & (hi % 2 == 0)), hi, lo)
    code = np.where(a >= _POS[0x7E], 0x7E, code)
    return (code | np.where(np.signbit(x), 0x80, 0)).astype(np.uint8)


def to_bf16_bits(x):
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_bits_to_f32(b):
    return (b.astype(np.uint32) << 16).view(np.float32)


def quantize_fp8(w):
    """w [out, in] float32 -> (codes uint8 [out, in], scale_inv float32 [ceil(out/128), ceil(in/128)])."""
    o, i = w.shape
    so, si = -(-o // BLOCK), -(-i // BLOCK)
    codes = np.zeros((o, i), dtype=np.uint8)
    scale = np.zeros((so, si), dtype=np.float32)
    for bo in range(so):
        for bi in range(si):
            blk = w[bo * BLOCK:(bo + 1) * BLOCK, bi * BLOCK:(bi + 1) * BLOCK]
            s = np.float32(np.abs(blk).max() / E4M3_MAX) if np.abs(blk).max() > 0 else np.float32(1.0)
            scale[bo, bi] = s
            codes[bo * BLOCK:(bo + 1) * BLOCK, bi * BLOCK:(bi + 1) * BLOCK] = to_e4m3(blk / s)
    return codes, scale


def dequantize_fp8(codes, scale):
    o, i = codes.shape
    s = np.repeat(np.repeat(scale, BLOCK, axis=0), BLOCK, axis=1)[:o, :i]
    return E4M3[codes] * s  # float32 x float32, as weight_dequant


# ---- which tensors get which format ----
def is_fp8(name):
    return name.endswith("_proj.weight") or name.endswith("_proj_with_mqa.weight")


# ---- safetensors ----
def write_safetensors(path, tensors):
    """tensors: [(name, dtype string, shape, bytes)] in the order given."""
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for name, dt, shape, data in tensors:
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + len(data)]}
        off += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for _, _, _, data in tensors:
            f.write(data)


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        base = 8 + n
        blob = f.read()
    out = {}
    np_dt = {"F8_E4M3": np.uint8, "BF16": np.uint16, "F32": np.float32}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        out[name] = (t["dtype"], np.frombuffer(blob[a:b], dtype=np_dt[t["dtype"]]).reshape(t["shape"]))
    del base
    return out


def write(out_dir, cfg, state, tok_dir):
    """The trained state (HF names) as DeepSeek's FP8 checkpoint in out_dir."""
    os.makedirs(out_dir, exist_ok=True)
    tensors = []
    for name, t in state.items():
        w = t.detach().to(torch.float32).numpy()
        if name.endswith("e_score_correction_bias"):
            tensors.append((name, "F32", w.shape, w.astype(np.float32).tobytes()))
        elif is_fp8(name):
            codes, scale = quantize_fp8(w)
            tensors.append((name, "F8_E4M3", w.shape, codes.tobytes()))
            tensors.append((name + "_scale_inv", "F32", scale.shape, scale.tobytes()))
        else:
            tensors.append((name, "BF16", w.shape, to_bf16_bits(w).tobytes()))
    write_safetensors(os.path.join(out_dir, "model.safetensors"), tensors)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg.hf(), f, indent=2)
        f.write("\n")
    with open(os.path.join(out_dir, "generation_config.json"), "w") as f:
        json.dump({"_from_model_config": True, "bos_token_id": cfg.bos_token_id, "eos_token_id": cfg.eos_token_id,
                   "do_sample": True, "temperature": 0.6, "top_p": 0.95, "transformers_version": "4.46.3"}, f, indent=2)
        f.write("\n")
    for n in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(os.path.join(tok_dir, n), os.path.join(out_dir, n))


def read_dequantized(out_dir):
    """{name: float32 numpy array} of the checkpoint's weights as a model computes with them."""
    raw = read_safetensors(os.path.join(out_dir, "model.safetensors"))
    out = {}
    for name, (dt, a) in raw.items():
        if name.endswith("_scale_inv"):
            continue
        if dt == "F8_E4M3":
            out[name] = dequantize_fp8(a, raw[name + "_scale_inv"][1])
        elif dt == "BF16":
            out[name] = bf16_bits_to_f32(a)
        else:
            out[name] = a.astype(np.float32)
    return out
