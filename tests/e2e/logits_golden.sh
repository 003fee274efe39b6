#!/usr/bin/env bash
# e2e: `dsinfer logits` on every golden checkpoint — prefill, --decode,
# --chunk and several sequences in one batch — against the official
# reference's logits (tolerance 1e-5 relative per row, as in test_golden),
# in both weight layouts; and with bf16 activations, or the bf16 KV cache,
# by top-1 agreement.
set -euo pipefail
bin=$1 scratch=$2 cmp=$3
rm -rf "$scratch"; mkdir -p "$scratch"
for dir in golden/*/; do
  c=$(basename "$dir")
  toks=$(cat "$dir/ref/tokens.txt")
  V=$(grep -o '"vocab_size": *[0-9]*' "$dir/model/config.json" | grep -o '[0-9]*$')
  ref="$dir/ref/decode_absorb.f32"
  "$bin" logits --precision f32 --model "$dir/model" --tokens "$toks" --out "$scratch/$c.prefill.f32"
  "$cmp" "$scratch/$c.prefill.f32" "$ref" "$V"
  "$bin" logits --precision f32 --model "$dir/model" --tokens "$toks" --decode --threads 1 --out "$scratch/$c.decode.f32"
  "$cmp" "$scratch/$c.decode.f32" "$ref" "$V"
  "$bin" logits --precision f32 --model "$dir/model" --tokens "$toks" --chunk 7 --out "$scratch/$c.chunk.f32"
  "$cmp" "$scratch/$c.chunk.f32" "$ref" "$V"
  # three sequences in one batch: a different prompt first, then the golden
  # one, then the golden one's first 5 tokens; rows of sequence 2 follow
  # sequence 1's 3 rows, and sequence 3's rows equal the first 5 golden rows
  "$bin" logits --precision f32 --model "$dir/model" --tokens 5,6,7 --tokens "$toks" --tokens "$(echo "$toks" | cut -d, -f1-5)" \
    --decode --out "$scratch/$c.multi.f32"
  n=$(echo "$toks" | tr ',' '\n' | wc -l)
  head -c $(( (3 + n) * V * 4 )) "$scratch/$c.multi.f32" | tail -c $(( n * V * 4 )) > "$scratch/$c.seq2.f32"
  tail -c $(( 5 * V * 4 )) "$scratch/$c.multi.f32" > "$scratch/$c.seq3.f32"
  "$cmp" "$scratch/$c.seq2.f32" "$ref" "$V"
  "$cmp" "$scratch/$c.seq3.f32" "$ref" "$V"
  # the row-major layout (--op-opt off) is exact too
  "$bin" logits --precision f32 --op-opt off --model "$dir/model" --tokens "$toks" --out "$scratch/$c.rows.f32"
  "$cmp" "$scratch/$c.rows.f32" "$ref" "$V"
  # bf16 activations (the AMX/AVX-512 fast path's numerics): judged by
  # top-1 agreement with the reference, not elementwise
  "$bin" logits --precision bf16 --model "$dir/model" --tokens "$toks" --out "$scratch/$c.bf16.f32"
  "$cmp" "$scratch/$c.bf16.f32" "$ref" "$V" --top1 0.9
  # the bf16 KV cache (the default but under --precision f32), f32 otherwise: likewise
  "$bin" logits --precision f32 --kv-dtype bf16 --model "$dir/model" --tokens "$toks" --out "$scratch/$c.kvbf16.f32"
  "$cmp" "$scratch/$c.kvbf16.f32" "$ref" "$V" --top1 0.9
done
echo "logits_golden: all modes match the reference"
