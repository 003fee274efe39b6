#!/usr/bin/env bash
# e2e: expert-parallel MoE across processes (mpirun -np N ... --ep N): each
# rank loads its share of the routed experts, rank 0 sends every step to the
# others, and the routed experts' sums meet in an all_reduce. On every golden
# checkpoint, f32 logits with 2 and 4 ranks equal the single process's within
# 1e-5 relative per row (prefill, decode, several sequences, each executor and
# weight layout); greedy generation gives the same tokens; wrong rank counts
# get a clear error. Skipped, saying so, when the build has no MPI.
set -euo pipefail
bin=$1 scratch=$2 cmp=$3
if ! "$bin" version | grep -q 'mpi: yes'; then echo "mpi: skipped: this build has no MPI"; exit 0; fi
command -v mpirun >/dev/null || { echo "FAIL: the build has MPI but mpirun is not installed (openmpi-bin)"; exit 1; }
rm -rf "$scratch"; mkdir -p "$scratch"
# Open MPI: more ranks than cores, and root in CI containers
mpi=(mpirun)
if mpirun --version 2>&1 | grep -q 'Open MPI'; then
  mpi+=(--oversubscribe)
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
fi
# under the sanitizers, MPI's own allocations that live to exit are not ours
[ -n "${DSINFER_SANITIZED:-}" ] && export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
fails=0
bad() { echo "FAIL: $*"; fails=$((fails + 1)); }

for dir in golden/*/; do
  c=$(basename "$dir")
  m="$dir/model"
  toks=$(cat "$dir/ref/tokens.txt")
  V=$(grep -o '"vocab_size": *[0-9]*' "$m/config.json" | grep -o '[0-9]*$')
  for mode in "" "--decode" "--exec eager" "--op-opt off"; do
    [ "$c" != tiny-bf16 ] && [ -n "$mode" ] && [ "$mode" != --decode ] && continue
    one="$scratch/$c.one.f32"
    "$bin" logits --precision f32 --threads 1 --model "$m" --tokens "$toks" --tokens 5,6,7 $mode --out "$one" 2>/dev/null
    for np in 2 4; do
      out="$scratch/$c.$np.f32"
      "${mpi[@]}" -np $np "$bin" logits --precision f32 --threads 1 --model "$m" --tokens "$toks" --tokens 5,6,7 $mode \
        --out "$out" 2>"$scratch/err" || { cat "$scratch/err"; bad "$c $mode: $np ranks failed"; continue; }
      "$cmp" "$out" "$one" "$V" >/dev/null || bad "$c $mode: $np ranks' logits differ from one process's"
    done
  done
  echo "ok   $c: 2 and 4 ranks' logits equal one process's"
done

# greedy generation, through the sampler: the same tokens
m=golden/tiny-bf16/model
a=$("$bin" generate --model "$m" --tokens 1,2,3,4 -n 24 --threads 1 2>/dev/null)
b=$("${mpi[@]}" -np 2 "$bin" generate --model "$m" --tokens 1,2,3,4 -n 24 --threads 1 2>/dev/null)
[ -n "$a" ] && [ "$a" = "$b" ] && echo "ok   greedy generate: 2 ranks give one process's tokens" ||
  bad "greedy generate: '$a' alone, '$b' on 2 ranks"

# wrong counts: a clear error, no hang
err=$("$bin" logits --model "$m" --tokens 1,2 --ep 2 --out "$scratch/x" 2>&1) && bad "--ep 2 in one process ran"
grep -q 'needs as many ranks: mpirun -np 2' <<<"$err" && echo "ok   --ep 2 alone: $err" || bad "--ep 2 alone: '$err'"
err=$(timeout 60 "${mpi[@]}" -np 2 "$bin" logits --model "$m" --tokens 1,2 --ep 3 --out "$scratch/x" 2>&1) &&
  bad "--ep 3 on 2 ranks ran"
grep -q 'needs as many ranks' <<<"$err" && echo "ok   --ep 3 on 2 ranks: a usage error" || bad "--ep 3 on 2 ranks: '$err'"

[ $fails -eq 0 ] && echo "mpi: all passed" || { echo "mpi: $fails failed"; exit 1; }
