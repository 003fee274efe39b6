#!/usr/bin/env bash
# e2e: the model across processes (mpirun -np N). Expert-parallel MoE
# (--ep N): each rank loads its share of the routed experts, rank 0 sends
# every step to the others, and the routed experts' sums meet in an
# all_reduce. Tensor-parallel attention (--tp N): each rank loads its share
# of the heads; attention's partial sums are reduce-scattered (or
# all-reduced and split: --tp-to-ep allreduce) into each rank's 1/N of the
# tokens, whose FFN runs there (their rows dispatched to the experts' owners
# with all-to-all-v under --ep N, or every expert local under --ep 1), and
# an all-gather brings the tokens back; with --overlap on the collectives
# run on a communication thread beside the compute, and with
# --two-batch-min a step of two sequences runs as two micro-batches whose
# collectives and compute interleave. DP attention (--attn
# dp): each rank the whole attention of its own sequences (the two test
# sequences on two ranks; on four, two ranks hold none), the tokens meeting
# at the experts, the logits gathered to rank 0. lm_head split by
# vocabulary (the default but under DP attention): each rank its 1/N of the
# rows, the columns of the logits gathered to rank 0 and laid side by side;
# --lm-head whole: all of it on rank 0. On every golden checkpoint, f32
# logits with 2 and 4 ranks equal the single process's within 1e-5
# relative per row (prefill, decode, several sequences, each executor,
# weight layout and stream setting); greedy generation gives the same
# tokens; wrong rank counts get a clear error. Skipped, saying so, when the
# build has no MPI.
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
  for mode in "" "--decode" "--exec eager" "--op-opt off" "--streams 2"; do
    [ "$c" != tiny-bf16 ] && [ -n "$mode" ] && [ "$mode" != --decode ] && continue
    # under the sanitizers the executor, layout and stream modes are left to
    # the release suite (one process runs them under ASan in test_golden)
    [ -n "${DSINFER_SANITIZED:-}" ] && [ -n "$mode" ] && [ "$mode" != --decode ] && continue
    one="$scratch/$c.one.f32"
    "$bin" logits --precision f32 --threads 1 --model "$m" --tokens "$toks" --tokens 5,6,7 $mode --out "$one" 2>/dev/null
    # the layouts: experts split; heads split both ways, experts split or not
    layouts=("2|" "4|" "2|--tp 2 --overlap on" "4|--tp 4 --tp-to-ep allreduce" "2|--attn dp"
             "2|--tp 2 --overlap on --two-batch-min 2" "2|--tp 2 --lm-head whole")
    if [ "$c" = tiny-bf16 ] && [ -z "$mode" ]; then
      layouts+=("4|--tp 4" "2|--tp 2 --tp-to-ep allreduce" "2|--tp 2 --ep 1" "4|--tp 4 --ep 1 --tp-to-ep allreduce"
                "2|--overlap on" "2|--tp 2 --overlap on" "4|--tp 4 --tp-to-ep allreduce --overlap on"
                "2|--tp 2 --ep 1 --overlap on" "2|--attn dp" "4|--attn dp --overlap on" "2|--attn dp --ep 1"
                "2|--overlap on --two-batch-min 2" "2|--tp 2 --overlap on --two-batch-min 2"
                "4|--tp 4 --tp-to-ep allreduce --overlap on --two-batch-min 2" "2|--tp 2 --ep 1 --overlap on --two-batch-min 2"
                "2|--attn dp --overlap on --two-batch-min 2" "4|--attn dp --overlap on --two-batch-min 2"
                "4|--lm-head whole" "4|--tp 4 --tp-to-ep allreduce --overlap on --two-batch-min 2 --lm-head whole")
    elif [ "$c" = tiny-bf16 ]; then
      layouts=("2|" "2|--tp 2" "4|--tp 4 --tp-to-ep allreduce --overlap on" "2|--attn dp")
      [ "$mode" = --decode ] && layouts+=("2|--tp 2 --overlap on --two-batch-min 2" "2|--attn dp --overlap on --two-batch-min 2"
                                          "4|--tp 4 --lm-head whole")
    elif [ -n "$mode" ]; then
      layouts=("2|" "4|--tp 4")
    fi
    for lay in "${layouts[@]}"; do
      np=${lay%%|*} par=${lay#*|}
      out="$scratch/$c.$np.f32"
      "${mpi[@]}" -np $np "$bin" logits --precision f32 --threads 1 --model "$m" --tokens "$toks" --tokens 5,6,7 $mode \
        $par --out "$out" 2>"$scratch/err" || { cat "$scratch/err"; bad "$c $mode $par: $np ranks failed"; continue; }
      "$cmp" "$out" "$one" "$V" >/dev/null || bad "$c $mode $par: $np ranks' logits differ from one process's"
    done
  done
  echo "ok   $c: 2 and 4 ranks' logits equal one process's, experts split and heads split"
done

# greedy generation, through the sampler: the same tokens
m=golden/tiny-bf16/model
a=$("$bin" generate --model "$m" --tokens 1,2,3,4 -n 24 --threads 1 2>/dev/null)
b=$("${mpi[@]}" -np 2 "$bin" generate --model "$m" --tokens 1,2,3,4 -n 24 --threads 1 2>/dev/null)
[ -n "$a" ] && [ "$a" = "$b" ] && echo "ok   greedy generate: 2 ranks give one process's tokens" ||
  bad "greedy generate: '$a' alone, '$b' on 2 ranks"
b=$("${mpi[@]}" -np 2 "$bin" generate --model "$m" --tokens 1,2,3,4 -n 24 --threads 1 --tp 2 2>/dev/null)
[ "$a" = "$b" ] && echo "ok   greedy generate: 2 ranks with heads split give one process's tokens" ||
  bad "greedy generate --tp 2: '$a' alone, '$b' on 2 ranks"

b=$("${mpi[@]}" -np 2 "$bin" generate --model "$m" --tokens 1,2,3,4 -n 24 --threads 1 --tp 2 --lm-head whole 2>/dev/null)
[ "$a" = "$b" ] && echo "ok   greedy generate: 2 ranks with heads split and lm_head whole on rank 0 give one process's tokens" ||
  bad "greedy generate --tp 2 --lm-head whole: '$a' alone, '$b' on 2 ranks"

# wrong counts: a clear error, no hang
err=$("$bin" logits --model "$m" --tokens 1,2 --ep 2 --out "$scratch/x" 2>&1) && bad "--ep 2 in one process ran"
grep -q 'needs as many ranks: mpirun -np 2' <<<"$err" && echo "ok   --ep 2 alone: $err" || bad "--ep 2 alone: '$err'"
err=$(timeout 60 "${mpi[@]}" -np 2 "$bin" logits --model "$m" --tokens 1,2 --ep 3 --out "$scratch/x" 2>&1) &&
  bad "--ep 3 on 2 ranks ran"
grep -q 'needs as many ranks' <<<"$err" && echo "ok   --ep 3 on 2 ranks: a usage error" || bad "--ep 3 on 2 ranks: '$err'"

err=$(timeout 60 "${mpi[@]}" -np 2 "$bin" logits --model "$m" --tokens 1,2 --tp 2 --tp-to-ep both --out "$scratch/x" 2>&1) &&
  bad "--tp-to-ep both ran"
grep -q 'must be rs-ag or allreduce' <<<"$err" && echo "ok   --tp-to-ep both: a usage error" || bad "--tp-to-ep both: '$err'"
err=$(timeout 60 "${mpi[@]}" -np 2 "$bin" logits --model "$m" --tokens 1,2 --tp 1 --ep 1 --out "$scratch/x" 2>&1) &&
  bad "--tp 1 --ep 1 on 2 ranks ran"
grep -q 'every rank would do the same work' <<<"$err" && echo "ok   --tp 1 --ep 1 on 2 ranks: a usage error" ||
  bad "--tp 1 --ep 1 on 2 ranks: '$err'"
err=$(timeout 60 "${mpi[@]}" -np 2 "$bin" logits --model "$m" --tokens 1,2 --tp 2 --attn dp --out "$scratch/x" 2>&1) &&
  bad "--attn dp --tp 2 ran"
grep -q 'attn dp runs every head on each rank' <<<"$err" && echo "ok   --attn dp --tp 2: a usage error" ||
  bad "--attn dp --tp 2: '$err'"
err=$(timeout 60 "${mpi[@]}" -np 2 "$bin" logits --model "$m" --tokens 1,2 --attn dp --lm-head split --out "$scratch/x" 2>&1) &&
  bad "--attn dp --lm-head split ran"
grep -q 'lm-head split: under --attn dp' <<<"$err" && echo "ok   --attn dp --lm-head split: a usage error" ||
  bad "--attn dp --lm-head split: '$err'"
err=$(timeout 60 "${mpi[@]}" -np 2 "$bin" logits --model "$m" --tokens 1,2 --lm-head half --out "$scratch/x" 2>&1) &&
  bad "--lm-head half ran"
grep -q 'must be whole or split' <<<"$err" && echo "ok   --lm-head half: a usage error" || bad "--lm-head half: '$err'"
err=$("$bin" logits --model "$m" --tokens 1,2 --lm-head split --out "$scratch/x" 2>&1) && bad "--lm-head split alone ran"
grep -q 'needs mpirun -np N' <<<"$err" && echo "ok   --lm-head split in one process: a usage error" ||
  bad "--lm-head split in one process: '$err'"
err=$(timeout 60 "${mpi[@]}" -np 3 "$bin" logits --model "$m" --tokens 1,2 --tp 3 --out "$scratch/x" 2>&1) &&
  bad "--tp 3 with 4 heads ran"
grep -q 'do not split evenly over 3' <<<"$err" && echo "ok   --tp 3 with 4 heads: $(grep -m1 -o 'do not split.*' <<<"$err")" ||
  bad "--tp 3 with 4 heads: '$err'"

# bench's communication report: with every expert on every rank (no
# dispatch) the bytes sent per step equal the analytic count exactly
j=$("${mpi[@]}" -np 2 "$bin" bench --model "$m" --threads 1 --tp 2 --ep 1 --prompt-len 16 --gen-len 4 --reps 1 --json 2>/dev/null)
sent=$(grep -o '"prefill_comm_bytes_per_step":[0-9]*' <<<"$j" | cut -d: -f2)
want=$(grep -o '"prefill_comm_bytes_analytic":[0-9]*' <<<"$j" | cut -d: -f2)
[ -n "$sent" ] && [ "$sent" = "$want" ] && [ "$sent" -gt 0 ] && echo "ok   bench --tp 2: $sent bytes a prefill step, as counted" ||
  bad "bench --tp 2 bytes: sent '$sent', analytic '$want'"

# two micro-batches: every step of 2 sequences (and none of 1) runs as two
j=$("${mpi[@]}" -np 2 "$bin" bench --model "$m" --threads 1 --tp 2 --overlap on --two-batch-min 2 --batch 2 \
  --prompt-len 8 --gen-len 4 --reps 1 --json 2>/dev/null)
k=$("${mpi[@]}" -np 2 "$bin" bench --model "$m" --threads 1 --tp 2 --overlap on --two-batch-min 2 --batch 1 \
  --prompt-len 8 --gen-len 4 --reps 1 --json 2>/dev/null)
two() { grep -o "\"$1_two_batch_steps\":[0-9]*,\"$1_steps\":[0-9]*" <<<"$2" | grep -o '[0-9]*' | tr '\n' ' '; }
[ "$(two decode "$j")" = "4 4 " ] && [ "$(two prefill "$j")" = "1 1 " ] && [ "$(two decode "$k")" = "0 4 " ] &&
  echo "ok   --two-batch-min 2: 2 sequences' steps as two micro-batches, 1 sequence's as one" ||
  bad "two micro-batches: batch 2 decode '$(two decode "$j")', prefill '$(two prefill "$j")'; batch 1 '$(two decode "$k")'"
err=$("$bin" logits --model "$m" --tokens 1,2 --two-batch-min 4 --out "$scratch/x" 2>&1) && bad "--two-batch-min without --overlap ran"
grep -q 'it needs --overlap on' <<<"$err" && echo "ok   --two-batch-min without --overlap on: a usage error" ||
  bad "--two-batch-min without --overlap: '$err'"

# bench --ablation under mpirun: the study's stages, the communication ones last
j=$("${mpi[@]}" -np 2 "$bin" bench --model "$m" --threads 1 --prompt-len 16 --gen-len 4 --reps 1 --batch 2 --ablation \
  --json 2>/dev/null)
stages=$(grep -o '"stage":"[a-z-]*"' <<<"$j" | cut -d'"' -f4 | tr '\n' ' ')
[ "$stages" = "eager graph streams op-opt tp-to-ep overlap two-batch " ] && grep -q '"decode_comm_share":0\.[0-9]' <<<"$j" &&
  echo "ok   bench --ablation on 2 ranks: $stages" || bad "bench --ablation on 2 ranks: '$j'"

# the prefix cache across ranks: a prompt that starts with a cached one
# shares its whole blocks and copies the start of its partial one into a
# block of its own; the copy (made by rank 0's block pool) goes to the
# other ranks with the next step, and under DP attention only sequences
# whose rows live on the same rank share. Greedy answers through the
# server (n = 2 too) equal one process's (not under the sanitizers, for
# time: the log's replay is test_attn_pairs').
brown=../models/brown
. "$(dirname "$0")/lib/serve_port.sh"
serve_answers() { # OUT [mpirun and its arguments] -- [serve options]
  local out=$1 log="$scratch/serve.log" pre=() port pid rc
  shift
  while [ "$1" != -- ]; do pre+=("$1"); shift; done
  shift
  "${pre[@]}" "$bin" serve --model "$brown" --port 0 --threads 1 "$@" 2>"$log" &
  pid=$!
  port=$(serve_port "$log" $pid 600)
  [ -n "$port" ] || { cat "$log"; kill $pid 2>/dev/null; return 1; }
  node -e '
const url = process.argv[1];
const p1 = "The jury said the city had been investigating reports of possible irregularities in the primary " +
  "election which was won by the mayor and the board of aldermen who had asked the court to look into the " +
  "matter of the election and the grand jury";
const reqs = [{prompt: p1}, {prompt: p1 + " said today that the"}, {prompt: p1 + " was told", n: 2}];
(async () => {
  for (const r of reqs) {
    const res = await fetch(url + "/v1/completions", {method: "POST", headers: {"Content-Type": "application/json"},
      body: JSON.stringify(Object.assign({max_tokens: 12, temperature: 0}, r))});
    const j = await res.json();
    if (!res.ok) { console.error(JSON.stringify(j)); process.exit(1); }
    for (const c of j.choices) console.log(JSON.stringify(c.text));
  }
})();' "http://127.0.0.1:$port" >"$out"
  rc=$?
  kill -TERM $pid
  wait $pid 2>/dev/null
  return $rc
}
if [ -n "${DSINFER_SANITIZED:-}" ]; then
  echo "skip prefix cache through serve under the sanitizers (the log itself: test_attn_pairs)"
elif serve_answers "$scratch/pfx.one" --; then
  for par in "--tp 2" "--attn dp" "--ep 2" "--ep 2 --lm-head whole"; do
    if serve_answers "$scratch/pfx.two" "${mpi[@]}" -np 2 -- $par && cmp -s "$scratch/pfx.one" "$scratch/pfx.two"; then
      echo "ok   prefix cache on 2 ranks ($par): the answers of prompts sharing a cached prefix equal one process's"
    else
      bad "prefix cache on 2 ranks ($par): '$(tr '\n' ' ' <"$scratch/pfx.two")' against one process's '$(tr '\n' ' ' <"$scratch/pfx.one")'"
    fi
  done
else
  bad "serve in one process: $(cat "$scratch/pfx.one")"
fi

# faults: ranks that open different configs or files fail at start naming
# the difference; a rank short of memory says so before loading; a hung
# rank is named by the others within the timeout, a dead one by mpirun
alt="$scratch/alt"
rm -rf "$alt"; cp -r "$m" "$alt"
sed -i 's/"rms_norm_eps": *[0-9.e-]*/"rms_norm_eps": 1e-05/' "$alt/config.json"
two=(-np 1 "$bin" logits --model "$m" --tokens 1,2 --tp 2 --out "$scratch/x" : -np 1 "$bin" logits --model "$alt"
     --tokens 1,2 --tp 2 --out "$scratch/x")
err=$(timeout 60 "${mpi[@]}" "${two[@]}" 2>&1) && bad "different configs ran"
grep -q 'rank 1 .*config.json: "rms_norm_eps" is 1e-05 here, 1e-06 on rank 0' <<<"$err" &&
  echo "ok   different configs: $(grep -m1 -o 'rank 1 (.*' <<<"$err")" || bad "different configs: '$err'"
cp "$m/config.json" "$alt/config.json"
truncate -s -4 "$alt/model.safetensors"
err=$(timeout 60 "${mpi[@]}" "${two[@]}" 2>&1) && bad "different checkpoints ran"
grep -q "rank 1 .*the checkpoint's files differ from rank 0's: model.safetensors" <<<"$err" &&
  echo "ok   different checkpoint files: named" || bad "different checkpoints: '$err'"
err=$(DSINFER_MEM_AVAILABLE_MB=1 timeout 60 "${mpi[@]}" -np 2 "$bin" logits --model "$m" --tokens 1,2 --tp 2 \
  --out "$scratch/x" 2>&1) && bad "a rank short of memory ran"
grep -q "rank 1: .*this rank's share need .* MB and 1.0 MB of memory are available" <<<"$err" &&
  echo "ok   short of memory: $(grep -m1 -o 'rank 1: .*' <<<"$err")" || bad "short of memory: '$err'"
t0=$(date +%s)
err=$(DSINFER_FAULT=hang:1:5 timeout 60 "${mpi[@]}" -np 2 "$bin" logits --model "$m" --tokens 1,2,3 --tp 2 \
  --comm-timeout 2 --out "$scratch/x" 2>&1) && bad "a hung rank went unnoticed"
grep -q 'rank 0: .* has waited [0-9]* s: rank 1 did not reach it' <<<"$err" &&
  echo "ok   a hung rank: named in $(( $(date +%s) - t0 )) s: $(grep -m1 -o 'rank 0: .*' <<<"$err")" || bad "a hung rank: '$err'"
err=$(DSINFER_FAULT=die:1:5 timeout 60 "${mpi[@]}" -np 2 "$bin" logits --model "$m" --tokens 1,2,3 --tp 2 \
  --out "$scratch/x" 2>&1) && bad "a dead rank went unnoticed"
grep -qi 'rank 1 .*exited on signal 9\|rank 1.*killed' <<<"$err" && echo "ok   a dead rank: named by mpirun" ||
  bad "a dead rank: '$err'"

[ $fails -eq 0 ] && echo "mpi: all passed" || { echo "mpi: $fails failed"; exit 1; }
