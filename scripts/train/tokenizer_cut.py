"""DeepSeek-V3's tokenizer cut to a small vocabulary.

DeepSeek-V3's tokenizer.json numbers its BPE vocabulary in merge order: ids
0-2 are BOS, EOS and pad, 3-258 the 256 byte-level characters, and merge r
makes id 259 + r (its two parts always have smaller ids). So its first
`n_base` ids with the merges that make them are a complete byte-level BPE
tokenizer of their own, which encodes every text (a word missing from the
cut vocabulary falls apart into the pieces it keeps). The added tokens past
the vocabulary that the chat template and tool calls use (<｜User｜>,
<｜Assistant｜>, <｜tool▁calls▁begin｜>, ...) follow at n_base, n_base + 1, ...;
the reserved placeholder tokens are dropped. Normalizer, pre-tokenizer,
decoder and tokenizer_config.json (BOS/EOS by their text, the chat
template) are DeepSeek-V3's own."""
import copy
import json
import os

FIRST_MERGE_ID = 259


def default_source(repo):
    return os.path.join(repo, "tests", "tokenizer", "node_modules", "@lenml", "tokenizer-deepseek_v3", "models")


def cut(src_dir, n_base, out_dir):
    """Write out_dir/tokenizer.json + tokenizer_config.json; returns the
    vocabulary size (n_base + the added tokens kept)."""
    with open(os.path.join(src_dir, "tokenizer.json"), encoding="utf-8") as f:
        tok = json.load(f)
    model = tok["model"]
    merges = model["merges"]
    for r, m in enumerate(merges[: n_base - FIRST_MERGE_ID]):  # the order this relies on
        a, b = m.split(" ", 1) if isinstance(m, str) else m
        assert model["vocab"][a + b] == FIRST_MERGE_ID + r, m
    out = copy.deepcopy({k: v for k, v in tok.items() if k != "model"})
    out["model"] = {k: v for k, v in model.items() if k not in ("vocab", "merges")}
    out["model"]["vocab"] = {s: i for s, i in model["vocab"].items() if i < n_base}
    out["model"]["merges"] = merges[: n_base - FIRST_MERGE_ID]
    added = []
    next_id = n_base
    for a in tok["added_tokens"]:
        if a["id"] < n_base:
            added.append(a)
        elif "place▁holder" not in a["content"]:
            a = dict(a)
            a["id"] = next_id
            next_id += 1
            added.append(a)
    out["added_tokens"] = added
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=None, separators=(",", ":"))
    with open(os.path.join(src_dir, "tokenizer_config.json"), encoding="utf-8") as f:
        cfg = f.read()
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        f.write(cfg)
    return next_id
