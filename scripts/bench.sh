#!/usr/bin/env bash
# Reproduce the README's figures: this machine's peaks and the kernels on
# DeepSeek-V3's shapes (INT8 and INT4 too: on a CPU with AMX INT8 the AMX
# and VNNI INT4 kernels side by side), then the `bench` preset end to end in
# BF16, FP8, INT8 and INT4 (the defaults: packed weights, the best kernels;
# INT4 with the AMX kernel and without where AMX INT8 runs) beside the scalar
# row-major baseline; then the ablation (eager, graph, streams, op-opt) on
# `small` and `bench`, graph vs eager at several batch sizes, and one vs two
# streams; and the serving engine (bench serve): throughput at concurrency
# 16 beside 1, inter-token latency while 512-token prompts keep arriving,
# and TTFT with a 2,048-token shared prefix beside none. Writes results
# under bench-results/.
set -euo pipefail
cd "$(dirname "$0")/.."
out=bench-results; mkdir -p "$out" models
bin=build/dsinfer
[ -x $bin ] || { cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null; cmake --build build -j"$(nproc)"; }
[ -f models/small/config.json ] || $bin mkmodel --preset small --seed 1 --out models/small
for dt in bf16 fp8; do
  [ -f models/bench-$dt/config.json ] || $bin mkmodel --preset bench --dtype $dt --seed 1 --out models/bench-$dt
done
$bin --version | tee "$out/version.txt"
$bin bench kernels --m 1,4,16,64,256,1024 --reps 5 | tee "$out/kernels.txt"
$bin bench kernels --dtypes int8,int4 --m 1,16,64,256 --reps 5 | tee "$out/kernels-int.txt"
$bin bench kernels --grouped --reps 5 | tee "$out/grouped.txt"
$bin bench kernels --attention --reps 5 | tee "$out/attention.txt"
$bin bench kernels --ceilings --reps 5 | tee "$out/ceilings.txt"
[ -f models/v3slice-fp8/config.json ] || $bin mkmodel --preset v3slice --dtype fp8 --seed 1 --out models/v3slice-fp8
$bin bench --model models/v3slice-fp8 --prompt-len 2048 --gen-len 16 --reps 3 --json | tee "$out/model-v3slice-2k.json"
$bin bench --model models/bench-bf16 --quant int8 --prompt-len 512 --gen-len 64 --reps 5 --json | tee "$out/model-int8-after.json"
$bin bench --model models/bench-bf16 --quant int4 --prompt-len 512 --gen-len 64 --reps 5 --json | tee "$out/model-int4.json"
# where AMX INT8 runs: INT4 with the AMX kernel and with the VNNI one, alternating
if $bin --version | grep -q "AMX INT4"; then
  for round in 1 2 3; do
    for a in on off; do
      echo "round $round DSINFER_AMX_INT4=$a: $(DSINFER_AMX_INT4=$a $bin bench --model models/bench-bf16 --quant int4 --prompt-len 512 --gen-len 64 --reps 3 --json)"
    done
  done | tee "$out/model-int4-amx.txt"
fi
for dt in bf16 fp8; do
  $bin bench --model models/bench-$dt --batch 8 --prompt-len 64 --gen-len 32 --reps 3 --json | tee "$out/model-$dt-batch8.json"
  $bin bench --model models/bench-$dt --prompt-len 512 --gen-len 64 --reps 5 --json | tee "$out/model-$dt-after.json"
  DSINFER_ISA=scalar $bin bench --model models/bench-$dt --prompt-len 512 --gen-len 16 --reps 1 --op-opt off \
    --precision f32 --json | tee "$out/model-$dt-before.json"
done
for m in small bench-bf16; do
  $bin bench --model models/$m --ablation --prompt-len 512 --gen-len 64 --reps 3 | tee "$out/ablation-$m.txt"
  $bin bench --model models/$m --ablation --prompt-len 512 --gen-len 64 --reps 3 --json > "$out/ablation-$m.json"
done
# graph vs eager, and one vs two streams, side by side at each batch size
for m in small bench-bf16; do
  for b in 1 4 16; do
    for x in "--exec eager" "--exec graph" "--exec graph --streams 2"; do
      echo "$m batch $b $x: $($bin bench --model models/$m --batch $b --prompt-len 128 --gen-len 32 --reps 5 $x --json)"
    done
  done
done | tee "$out/exec-batches.txt"
# serving, side by side, three rounds
for round in 1 2 3; do
  for c in 1 16; do
    echo "round $round concurrency $c: $($bin bench serve --model models/bench-bf16 --requests 32 --concurrency $c --prompt-len 32 --gen-len 128 --json)"
  done
  echo "round $round arrivals of 512-token prompts: $($bin bench serve --model models/bench-bf16 --requests 48 --concurrency 16 --prompt-len 512 --gen-len 64 --json)"
  for p in 0 2048; do
    echo "round $round shared prefix $p: $($bin bench serve --model models/bench-bf16 --requests 6 --concurrency 1 --prompt-len 2112 --shared-prefix $p --gen-len 8 --json)"
  done
done | tee "$out/serve.txt"
$bin bench tokenizer | tee "$out/tokenizer.txt" || true
