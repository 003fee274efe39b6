#!/usr/bin/env bash
# e2e: `dsinfer plan` — it measures the engine on a checkpoint, then
# predicts each layout across nodes. Checks what must hold whatever the
# machine: every layout of K > 1 nodes is listed, head-split layouts hold
# less per node than experts split alone and whole experts more, the nodes
# together hold the whole of DeepSeek-V3, and the pick is a layout that
# fits the nodes' memory. (Its accuracy against measured runs
# is a benchmark: README, "dsinfer plan".) Skipped under the sanitizers:
# most of its time is the bandwidth test's gigabyte of reads, which
# instrumentation makes slow and which checks nothing of plan's own.
set -euo pipefail
bin=$1
if [ -n "${DSINFER_SANITIZED:-}" ]; then echo "plan: skipped under the sanitizers"; exit 0; fi
m=golden/tiny-bf16/model
fails=0
bad() { echo "FAIL: $*"; fails=$((fails + 1)); }
field() { grep -o "\"$2\":[^,}]*" <<<"$1" | sed -n "${3:-1}p" | cut -d: -f2 | tr -d '"'; }

j=$("$bin" plan --model "$m" --nodes 2 --colocated --prompt-len 32 --json 2>/dev/null)
n=$(grep -o '"layout":' <<<"$j" | wc -l)
[ "$n" = 5 ] && echo "ok   5 layouts for 2 nodes" || bad "layouts for 2 nodes: $n in $j"
ep=$(field "$j" weights_bytes_per_node 1) rsag=$(field "$j" weights_bytes_per_node 2) whole=$(field "$j" weights_bytes_per_node 4)
awk -v a="$rsag" -v b="$ep" -v c="$whole" 'BEGIN { exit !(a < b && b < c) }' &&
  echo "ok   weights a node: heads split $rsag < experts split $ep < experts whole $whole" ||
  bad "weights a node: heads split $rsag, experts split $ep, experts whole $whole"
pick=$(field "$j" pick)
grep -q "\"layout\":\"$pick\"" <<<"$j" && echo "ok   pick: $pick" || bad "pick '$pick' is not a layout"
for k in prefill_tokens_per_s decode_tokens_per_s; do
  v=$(field "$j" $k 2)
  awk -v x="$v" 'BEGIN { exit !(x > 0) }' || bad "$k of tp rs-ag is $v"
done

# ranks sharing this machine: a rank's share of the compute is its threads'
# part, of the bandwidth at least that, and of the time the cores over all
# ranks' threads (8 ranks x 1 thread outnumber the cores of any machine
# under 8 cores; nproc is what the engine counts)
cores=$(nproc)
j=$("$bin" plan --model "$m" --nodes 8 --rank-threads 1 --threads "$cores" --colocated --prompt-len 32 --json 2>/dev/null)
sh=$(field "$j" rank_share) bw=$(field "$j" rank_share_bw) occ=$(field "$j" rank_occupancy)
awk -v s="$sh" -v b="$bw" -v o="$occ" -v c="$cores" 'BEGIN {
  want = c / 8 < 1 ? c / 8 : 1
  exit !(s > 0.999 / c && s < 1.001 / c && b >= s && b <= 1 && o > want - 0.001 && o < want + 0.001) }' &&
  echo "ok   8 ranks x 1 thread on $cores cores: compute share $sh, bandwidth share $bw, time $occ" ||
  bad "8 ranks x 1 thread on $cores cores: compute share $sh, bandwidth share $bw, time $occ"

j=$("$bin" plan --model "$m" --preset v3 --nodes 16 --node-mem 56 --json 2>/dev/null)
ep=$(field "$j" weights_bytes_per_node 1) rsag=$(field "$j" weights_bytes_per_node 2) pick=$(field "$j" pick)
awk -v a="$ep" -v b="$rsag" 'BEGIN { exit !(a * 16 > 671e9 && a > 0.9 * 56e9 && b < 0.9 * 56e9) }' &&
  echo "ok   V3 on 16 nodes: $ep bytes a node with experts split, $rsag with heads split too" ||
  bad "V3 on 16 nodes: $ep, $rsag bytes a node"
[[ "$pick" = "tp rs-ag" || "$pick" = "tp allreduce" ]] && echo "ok   V3 on 16 nodes of 56 GB (90% usable): picks $pick (the rest do not fit)" ||
  bad "V3 on 16 nodes of 56 GB (90% usable): picked '$pick'"
err=$("$bin" plan --nodes 2 2>&1) && bad "plan without --model ran"
grep -q 'measures this engine on a checkpoint' <<<"$err" && echo "ok   without --model: a usage error" || bad "without --model: $err"
[ $fails -eq 0 ] && echo "plan: all passed" || { echo "plan: $fails failed"; exit 1; }
