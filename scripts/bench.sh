#!/usr/bin/env bash
# Reproduce the README's figures: this machine's peaks and the kernels on
# DeepSeek-V3's shapes, then the `bench` preset end to end in BF16 and FP8,
# before (the core issue's scalar row-major path) and after (packed weights,
# AVX-512 / AMX kernels). Writes results under bench-results/.
set -euo pipefail
cd "$(dirname "$0")/.."
out=bench-results; mkdir -p "$out" models
bin=build/dsinfer
[ -x $bin ] || { cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null; cmake --build build -j"$(nproc)"; }
for dt in bf16 fp8; do
  [ -f models/bench-$dt/config.json ] || $bin mkmodel --preset bench --dtype $dt --seed 1 --out models/bench-$dt
done
$bin --version | tee "$out/version.txt"
$bin bench kernels --m 1,4,16,64,256,1024 --reps 5 | tee "$out/kernels.txt"
$bin bench kernels --grouped --reps 5 | tee "$out/grouped.txt"
for dt in bf16 fp8; do
  $bin bench --model models/bench-$dt --prompt-len 512 --gen-len 64 --reps 5 --json | tee "$out/model-$dt-after.json"
  DSINFER_ISA=scalar $bin bench --model models/bench-$dt --prompt-len 512 --gen-len 16 --reps 1 --op-opt off \
    --precision f32 --json | tee "$out/model-$dt-before.json"
done
$bin bench tokenizer | tee "$out/tokenizer.txt" || true
