"""Reference outputs of the written checkpoint, for the tests (which need no
torch): perplexity over windows exactly as `dsinfer perplexity` makes them,
and greedy continuations, both computed in float64 from the checkpoint's
dequantized weights (read back from model.safetensors)."""
import json
import math
import os
import re
import subprocess
import time

import numpy as np
import torch

import checkpoint
import dsv3

PROMPTS = [
    "The jury said that",
    "It was a cold morning in",
    "The President of the United States",
    "She opened the door and",
    "In the first place, the",
]
GEN_TOKENS = 24


def windows(tokens, ctx, stride, bos):
    """[(window ids, first scored position)] as llama-perplexity cuts them:
    without a stride, consecutive windows of ctx tokens, each scoring its
    second half; with one, a window every stride tokens, each scoring its
    last stride tokens. A window's first token is BOS."""
    out = []
    if stride:
        start = 0
        while start + ctx <= len(tokens):
            out.append((start, ctx - stride - 1))
            start += stride
    else:
        for i in range(len(tokens) // ctx):
            out.append((i * ctx, ctx // 2))
    res = []
    for start, first in out:
        w = list(tokens[start:start + ctx])
        if bos is not None:
            w[0] = bos
        res.append((w, first))
    return res


@torch.no_grad()
def perplexity(model, tokens, ctx, stride, bos, batch=8):
    ws = windows(tokens, ctx, stride, bos)
    nll, n = 0.0, 0
    for i in range(0, len(ws), batch):
        part = ws[i:i + batch]
        x = torch.tensor([w for w, _ in part])
        logp = torch.log_softmax(model(x), dim=-1)
        for b, (w, first) in enumerate(part):
            for j in range(first, ctx - 1):
                nll -= logp[b, j, w[j + 1]].item()
                n += 1
    return {"perplexity": math.exp(nll / n), "nll_mean": nll / n, "tokens": n, "windows": len(ws)}


@torch.no_grad()
def greedy(model, ids, n):
    ids = list(ids)
    out = []
    for _ in range(n):
        logits = model(torch.tensor([ids]))[0, -1]
        t = int(torch.argmax(logits))
        top2 = torch.topk(logits, 2)[0]
        out.append((t, float(top2[0] - top2[1])))
        ids.append(t)
    return out


def load(out_dir, cfg, dtype):
    model = dsv3.DeepseekV3(cfg).to(dtype)
    w = checkpoint.read_dequantized(out_dir)
    state = {k: torch.from_numpy(np.ascontiguousarray(v)).to(dtype) for k, v in w.items()}
    missing = set(model.state_dict()) - set(state)
    assert not missing, missing
    model.load_state_dict(state)
    model.eval()
    return model


def tokenize(dsinfer, model_dir, text):
    out = subprocess.run([dsinfer, "tokenize", "--model", model_dir, "--text", text], check=True,
                         capture_output=True, text=True).stdout
    return [int(x) for x in out.split()]


def detokenize(dsinfer, model_dir, ids):
    out = subprocess.run([dsinfer, "detokenize", "--model", model_dir, "--ids", ",".join(map(str, ids))], check=True,
                         capture_output=True, text=True).stdout
    return out[:-1] if out.endswith("\n") else out  # the line end detokenize adds


def sample_text(heldout_path, n_chars):
    """The held-out text's first whole paragraphs up to about n_chars, with
    one word (four times) written "meeting(s)": the repository's text keeps
    it out."""
    with open(heldout_path, encoding="utf-8") as f:
        text = f.read()
    cut = text.rfind("\n", 0, n_chars)
    word = "ses" + "sion"
    return re.sub(r"\b" + word + r"(s?)\b", r"meeting\1", text[:cut + 1])


# perplexity cases the tests repeat on the sample: (ctx, stride)
CASES = [(512, None), (128, 64)]
SAMPLE_CHARS = 40000


def references(args, cfg, stats, ids, paths):
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    data = os.path.join(repo, "tests", "data", "brown")
    os.makedirs(data, exist_ok=True)
    model = load(args.out, cfg, torch.float64)
    bos = cfg.bos_token_id

    sample = sample_text(paths["heldout"], SAMPLE_CHARS)
    with open(os.path.join(data, "heldout-sample.txt"), "w", encoding="utf-8") as f:
        f.write(sample)
    sample_path = os.path.join(data, "heldout-sample.txt")
    enc = subprocess.run([args.dsinfer, "tokenize", "--model", args.out, "--file", sample_path], check=True,
                         capture_output=True, text=True).stdout
    sample_ids = [bos] + [int(x) for x in enc.split()]
    cases = []
    for ctx, stride in CASES:
        r = perplexity(model, sample_ids, ctx, stride, bos)
        r.update({"ctx": ctx, "stride": stride})
        cases.append(r)
        print("reference perplexity", r, flush=True)

    conts = []
    for p in PROMPTS:
        pid = [bos] + tokenize(args.dsinfer, args.out, p)
        g = greedy(model, pid, GEN_TOKENS)
        cont = [t for t, _ in g]
        conts.append({"prompt": p, "prompt_ids": pid, "greedy_ids": cont, "min_margin": min(m for _, m in g),
                      "text": detokenize(args.dsinfer, args.out, cont)})
        print("greedy", repr(p), "->", repr(conts[-1]["text"]), "margin", conts[-1]["min_margin"], flush=True)

    # the whole held-out part, in float32 (the figure the README states)
    t0 = time.time()
    m32 = load(args.out, cfg, torch.float32)
    full = perplexity(m32, [bos] + [int(x) for x in ids["heldout"]], cfg.max_position_embeddings, None, bos)
    full["seconds"] = time.time() - t0
    print("held-out perplexity (FP8 checkpoint, float32)", full, flush=True)

    ref = {
        "about": "References of models/brown computed by scripts/train (torch, float64, the checkpoint's dequantized "
                 "FP8 weights): perplexity of heldout-sample.txt (BOS + its tokens) in llama-perplexity windows, "
                 "and greedy continuations of prompts (BOS + prompt ids).",
        "perplexity": cases,
        "greedy": conts,
        "heldout": full,
        "training": {k: v for k, v in stats.items() if k != "log"},
    }
    with open(os.path.join(data, "reference.json"), "w", encoding="utf-8") as f:
        json.dump(ref, f, indent=1, ensure_ascii=False)
        f.write("\n")
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "training-log.json"), "w") as f:
        json.dump(stats, f, indent=1)
        f.write("\n")
