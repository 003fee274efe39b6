#!/usr/bin/env bash
# e2e: `bench kernels` runs its table and its ceilings, and prints positive
# figures (a kernel or a buffer that failed prints 0; a row's time and
# GFLOP/s, not its GB/s, whose one decimal a slow run under the sanitizers
# beside another test rounds to 0.0): kv_a's row at M=1
# and 16 (BF16, FP8, INT4) beside the measured peaks; the ceilings' matvec rates, and where
# AMX is in use the tile peak, the four stages of the GEMM's tile loop and
# the GEMM itself; with the ISA capped below AMX, no tile loop; there INT4
# rows of both the AMX and the VNNI kernel, and the race's line. On AVX2
# the INT4 kernel is set beside the vpmaddubsw peak. INT8 under --precision
# f32 runs a kernel on f32 activations.
set -euo pipefail
bin=$1 scratch=$2
rm -rf "$scratch"; mkdir -p "$scratch"
fail() { echo "$1"; cat "$3"; exit 1; }
positive() { # file, pattern of the line, unit: the first figure followed by the unit must be > 0
  local line; line=$(grep -m1 -- "$2" "$1") || fail "no line '$2'" "" "$1"
  awk -v u="$3" '{ for (i = 1; i < NF; i++) if ($(i + 1) == u) exit !($i + 0 > 0); exit 1 }' <<< "$line" ||
    fail "not positive ($3): $line" "" "$1"
}
"$bin" bench kernels --shape kv_a --m 1,16 --dtypes bf16,fp8,int4 --reps 1 > "$scratch/table.txt"
positive "$scratch/table.txt" "memory read" "GB/s,"
if grep -qE "isa (avx512|amx)" "$scratch/table.txt"; then # the vector peaks where there is AVX-512
  positive "$scratch/table.txt" "vector peaks" "GFLOP/s,"
  grep -q "kv_a .* int4 .*(avx512.*int4; peak" "$scratch/table.txt" || fail "no int4 kernel named" "" "$scratch/table.txt"
fi
if grep -q "isa amx" "$scratch/table.txt"; then # INT4: the AMX kernel beside the VNNI one, and the race's outcome
  grep -q "^AMX INT4 o[nf]* (" "$scratch/table.txt" || fail "no line of the AMX INT4 race" "" "$scratch/table.txt"
  [ "$(grep -c "kv_a .* int4 .*(amx-int4; peak amx int8)" "$scratch/table.txt")" -eq 2 ] &&
    [ "$(grep -c "kv_a .* int4 .*(avx512-vnni-int4; peak vpdpbusd)" "$scratch/table.txt")" -eq 2 ] ||
    fail "not the two INT4 kernels at each batch size" "" "$scratch/table.txt"
fi
if grep -q "isa avx2;" "$scratch/table.txt"; then # AVX2's INT4 judged by its own multiply, vpmaddubsw
  positive "$scratch/table.txt" "vector peaks" "GFLOP/s,"
  peak=$(grep -o "ymm vpmaddubsw [0-9]* GOP/s" "$scratch/table.txt" | awk '{ print $3 }')
  [ "${peak:-0}" -gt 0 ] || fail "no vpmaddubsw peak" "" "$scratch/table.txt"
  grep -q "kv_a .* int4 .*(avx2-int4; peak vpmaddubsw)" "$scratch/table.txt" || fail "int4 not beside vpmaddubsw" "" "$scratch/table.txt"
fi
# --precision picks the activations as the model commands do: INT8 weights
# on int8 ones by default where the integer kernel is the fastest (AVX2),
# and on the f32 kernel (weights widened in registers) under f32
"$bin" bench kernels --shape kv_a --m 1,4 --dtypes int8 --reps 1 --precision f32 > "$scratch/f32.txt"
grep -q "; precision f32;" "$scratch/f32.txt" || fail "precision not printed" "" "$scratch/f32.txt"
for m in 1 4; do
  line=$(awk -v m=$m '$1 == "kv_a" && $4 == "int8" && $5 == m' "$scratch/f32.txt")
  awk '{ exit !($6 > 0 && $9 > 0) }' <<< "$line" || fail "kv_a int8 f32 M=$m: $line" "" "$scratch/f32.txt"
  ! grep -q "int8" <<< "${line##*(}" || fail "f32 activations on an int8 kernel: $line" "" "$scratch/f32.txt"
done
if grep -q "isa avx2;" "$scratch/table.txt"; then
  "$bin" bench kernels --shape kv_a --m 4 --dtypes int8 --reps 1 > "$scratch/auto.txt"
  grep -q "kv_a .* int8 .*(avx2-int8; peak vpmaddwd)" "$scratch/auto.txt" || fail "auto: not the int8 kernel" "" "$scratch/auto.txt"
fi
for dt in bf16 fp8 int4; do
  for m in 1 16; do
    line=$(awk -v d=$dt -v m=$m '$1 == "kv_a" && $4 == d && $5 == m' "$scratch/table.txt")
    [ -n "$line" ] || fail "no kv_a $dt M=$m row" "" "$scratch/table.txt"
    awk '{ exit !($6 > 0 && $9 > 0) }' <<< "$line" || fail "kv_a $dt M=$m: $line" "" "$scratch/table.txt"
  done
done
"$bin" bench kernels --ceilings --reps 1 > "$scratch/ceil.txt"
line=$(grep -m1 "matvec M=1" "$scratch/ceil.txt") || fail "no matvec line" "" "$scratch/ceil.txt"
awk '{ n = 0; for (i = 1; i < NF; i++) if ($(i + 1) == "GB/s") n += ($i + 0 > 0); exit n != 2 }' <<< "$line" ||
  fail "matvec rates not positive: $line" "" "$scratch/ceil.txt"
grep -q "over that share: bf16 [0-9.]*x, fp8 [0-9.]*x" "$scratch/ceil.txt" || fail "no headroom line" "" "$scratch/ceil.txt"
if grep -q "isa amx" "$scratch/ceil.txt"; then
  for stage in "tile peak" "A and B in L1" "A streamed from L2" "C through L2" "its operands moving" "the GEMM itself"; do
    positive "$scratch/ceil.txt" "$stage" "GFLOP/s"
  done
  DSINFER_ISA=avx512 "$bin" bench kernels --ceilings --reps 1 > "$scratch/capped.txt"
  grep -q "AMX not in use here" "$scratch/capped.txt" || fail "capped run measured a tile loop" "" "$scratch/capped.txt"
  ! grep -q "GFLOP/s  .*of the peak" "$scratch/capped.txt" || fail "capped run printed a stage" "" "$scratch/capped.txt"
fi
echo ok
