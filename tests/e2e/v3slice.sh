#!/usr/bin/env bash
# e2e: a checkpoint with DeepSeek-V3's exact per-layer shapes (mkmodel
# --preset v3slice, FP8, sharded: ~5 GB) loads and runs a decode step
# within this machine's 24 GB, its peak RSS close to its size; and its
# logits with the packed kernels (FP8 W_UK^T, the non-absorbed prefill at
# 128 heads) match the row-major reference path's. Skipped in the
# sanitizer build (shadow memory makes RSS meaningless and it is slow).
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
# f32 activations: the packed FP8 path against the scalar row-major one, as
# one 20-token prefill (its segment takes the non-absorbed form) and token
# by token (the absorbed form)
toks=$(seq -s, 11 30)
"$bin" logits --model "$scratch/v3slice" --tokens "$toks" --precision f32 --op-opt off --out "$scratch/rows.f32" 2> /dev/null
"$bin" logits --model "$scratch/v3slice" --tokens "$toks" --precision f32 --out "$scratch/packed.f32" 2> /dev/null
"$3" "$scratch/packed.f32" "$scratch/rows.f32" 129280 1e-4
"$bin" logits --model "$scratch/v3slice" --tokens "$toks" --precision f32 --decode --out "$scratch/decode.f32" 2> /dev/null
"$3" "$scratch/decode.f32" "$scratch/rows.f32" 129280 1e-4
# expert parallel on 2 ranks (when the build has MPI): each loads half the
# experts; then tensor-parallel attention too, each rank 64 of the 128
# heads (FP8 slices on whole 128x128 blocks), and two sequences as two
# micro-batches; the f32 logits equal one process's within 1e-5
if "$bin" version | grep -q 'mpi: yes' && command -v mpirun >/dev/null; then
  mpi=(mpirun -np 2)
  if mpirun --version 2>&1 | grep -q 'Open MPI'; then
    mpi+=(--oversubscribe)
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  fi
  "${mpi[@]}" "$bin" logits --model "$scratch/v3slice" --tokens "$toks" --precision f32 --out "$scratch/ep2.f32" \
    2> "$scratch/ep2.err" || { cat "$scratch/ep2.err"; exit 1; }
  grep 'rank' "$scratch/ep2.err"
  "$3" "$scratch/ep2.f32" "$scratch/packed.f32" 129280 1e-5
  "${mpi[@]}" "$bin" logits --model "$scratch/v3slice" --tokens "$toks" --precision f32 --tp 2 --out "$scratch/tp2.f32" \
    2> "$scratch/tp2.err" || { cat "$scratch/tp2.err"; exit 1; }
  grep 'rank' "$scratch/tp2.err"
  "$3" "$scratch/tp2.f32" "$scratch/packed.f32" 129280 1e-5
  # two sequences as two micro-batches, their collectives interleaved on
  # the communication thread
  # (the prompt twice: each half's logits are one process's alone)
  cat "$scratch/packed.f32" "$scratch/packed.f32" > "$scratch/pair.f32"
  "${mpi[@]}" "$bin" logits --model "$scratch/v3slice" --tokens "$toks" --tokens "$toks" --precision f32 --tp 2 \
    --overlap on --two-batch-min 2 --out "$scratch/tbo.f32" 2> "$scratch/tbo.err" || { cat "$scratch/tbo.err"; exit 1; }
  "$3" "$scratch/tbo.f32" "$scratch/pair.f32" 129280 1e-5
  echo "6 passed, 0 failed"
else
  echo "3 passed, 0 failed (no MPI: the 2-rank checks skipped)"
fi
