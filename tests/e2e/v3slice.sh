#!/usr/bin/env bash
# e2e: a checkpoint with DeepSeek-V3's exact per-layer shapes (mkmodel
# --preset v3slice, FP8, sharded: ~5 GB) loads and runs a decode step
# within this machine's 24 GB, its peak RSS close to its size. Skipped in
# the sanitizer build (shadow memory makes RSS meaningless and it is slow).
set -euo pipefail
bin=$1 scratch=$2
if [ -n "${DSINFER_SANITIZED:-}" ]; then echo "v3slice: skipped under the sanitizers"; exit 0; fi
rm -rf "$scratch"; mkdir -p "$scratch"
trap 'rm -rf "$scratch"' EXIT
"$bin" mkmodel --preset v3slice --dtype fp8 --seed 3 --out "$scratch/v3slice" --shard-mb 2000 --tokenizer builtin
ckpt=$(cat "$scratch"/v3slice/*.safetensors | wc -c)
json=$("$bin" bench --model "$scratch/v3slice" --prompt-len 4 --gen-len 1 --reps 1 --json)
echo "$json"
rss=$(grep -o '"peak_rss_bytes":[0-9]*' <<<"$json" | cut -d: -f2)
dec=$(grep -o '"decode_tokens_per_s":[0-9.]*' <<<"$json" | cut -d: -f2)
echo "checkpoint $ckpt bytes, peak RSS $rss bytes, decode $dec tokens/s"
awk -v r="$rss" -v c="$ckpt" -v d="$dec" 'BEGIN {
  ok = 1
  if (r >= 24e9) { print "FAIL: peak RSS " r " is not within 24 GB"; ok = 0 }
  if (r > 1.25 * c) { print "FAIL: peak RSS " r " is over 1.25x the checkpoint (" c ")"; ok = 0 }
  if (!(d > 0)) { print "FAIL: no decode step ran"; ok = 0 }
  exit ok ? 0 : 1 }'
echo "1 passed, 0 failed"
