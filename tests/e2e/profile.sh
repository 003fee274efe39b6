#!/usr/bin/env bash
# e2e: `dsinfer profile` on the tiny checkpoint prints the summary and
# writes a Chrome trace that parses as JSON and holds complete ("X") events
# of the known ops on the worker tracks and the steps on their own track;
# `generate --profile` and `bench --profile` write one too.
set -euo pipefail
bin=$1 scratch=$2
rm -rf "$scratch"; mkdir -p "$scratch"
model=golden/tiny-bf16/model
"$bin" profile --model "$model" --prompt-len 20 --gen-len 3 --threads 2 --no-peaks --out "$scratch/trace.json" \
  > "$scratch/summary.txt"
for want in "prefill: 1 step" "decode: 3 steps" attention moe dense lm_head dispatch "whole step" "top ops"; do
  grep -q "$want" "$scratch/summary.txt" || { echo "summary lacks '$want':"; cat "$scratch/summary.txt"; exit 1; }
done
node -e '
const fs = require("fs");
const t = JSON.parse(fs.readFileSync(process.argv[1], "utf8"));
const x = t.traceEvents.filter(e => e.ph === "X");
const fail = m => { console.error(m); process.exit(1); };
for (const e of x)
  if (e.pid !== 1 || typeof e.tid !== "number" || !(e.ts >= 0) || !(e.dur >= 0) || !e.args)
    fail("malformed event " + JSON.stringify(e));
const names = new Set(x.map(e => e.name));
for (const n of ["q_a_proj", "q_b_proj", "kv_a_proj", "w_uk", "attn_core", "w_uv", "o_proj", "router",
                 "moe_gate_up", "moe_down", "shared_gate_up", "dense_down", "attn_norm", "ffn_norm", "rope_q", "kv_write", "lm_head",
                 "prefill", "decode"])
  if (!names.has(n)) fail("no X event named " + n);
const steps = x.filter(e => e.cat === "step");
if (steps.length !== 4) fail("want 4 steps, got " + steps.length);
const stepTid = steps[0].tid;
if (!x.some(e => e.tid === 1 && e.cat !== "step") || x.some(e => e.tid === stepTid && e.cat !== "step"))
  fail("want ops on threads 0 and 1 and only steps on tid " + stepTid);
const o = x.find(e => e.name === "o_proj");
for (const k of ["layer", "flops", "bytes", "phase", "out"]) if (!(k in o.args)) fail("o_proj lacks args." + k);
if (!(o.args.flops > 0)) fail("o_proj has no FLOPs");
/* outputs carry their dtype and planned shape: o_proj [tokens, hidden] */
if (!/^f32\[[0-9]+,[0-9]+\]$/.test(o.args.out)) fail("o_proj out is not f32[T,hidden]: " + o.args.out);
const ids = x.find(e => e.name === "router_topk");
if (ids && !/^i32\[/.test(ids.args.out)) fail("router_topk out is not i32: " + ids.args.out);
' "$scratch/trace.json"
# the non-absorbed prefill's FLOPs as the profiler counts them: every head
# expands the whole context (20 positions), then scores and P V over the
# causal triangle (H 4, kv_lora 64, nope 32, rope 16, v 32)
DSINFER_MLA=naive "$bin" profile --model "$model" --prompt-len 20 --gen-len 1 --threads 2 --no-peaks \
  --out "$scratch/naive.json" > /dev/null
node -e '
const x = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")).traceEvents.filter(e => e.name === "attn_naive");
const H = 4, kvl = 64, nope = 32, qk = 48, v = 32, L = 20;
let want = 2 * L * H * kvl * (nope + v);
for (let t = 0; t < L; t++) want += 2 * H * (t + 1) * (qk + v);
if (!x.length || x.some(e => e.args.flops !== want))
  { console.error("attn_naive FLOPs " + x.map(e => e.args.flops) + ", want " + want); process.exit(1); }
' "$scratch/naive.json"
# with two streams, the side branch's ops have tracks of their own
DSINFER_STREAM_TEAM_MIN=1 "$bin" profile --model "$model" --prompt-len 20 --gen-len 3 --threads 2 --streams 2 --no-peaks \
  --out "$scratch/s2.json" > /dev/null
node -e '
const t = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
const named = t.traceEvents.filter(e => e.ph === "M" && e.name === "thread_name" && /stream B/.test(e.args.name));
if (!named.length) { console.error("no stream B track"); process.exit(1); }
const tids = new Set(named.map(e => e.tid));
const side = t.traceEvents.filter(e => e.ph === "X" && tids.has(e.tid));
if (!side.some(e => e.name === "shared_gate_up") || !side.some(e => e.name === "kv_a_proj"))
  { console.error("the shared expert and kv_a_proj are not on stream B"); process.exit(1); }
' "$scratch/s2.json"
# generate and bench write the trace of their run
toks=$(cat golden/tiny-bf16/ref/tokens.txt)
"$bin" generate --model "$model" --tokens "$toks" -n 4 --profile "$scratch/gen.json" > /dev/null 2>&1
python3 -m json.tool "$scratch/gen.json" > /dev/null
"$bin" bench --model "$model" --prompt-len 8 --gen-len 2 --reps 1 --profile "$scratch/bench.json" > /dev/null 2>&1
python3 -m json.tool "$scratch/bench.json" > /dev/null
grep -q '"name":"attn_core"' "$scratch/bench.json"
# bench's prefill FLOP rate beside the matrix peak it measures: present, positive, and the fraction their ratio
"$bin" bench --model "$model" --prompt-len 16 --gen-len 2 --reps 1 --threads 2 --json > "$scratch/bench_out.json" 2>/dev/null
node -e '
const j = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
const fail = m => { console.error(m + ": " + JSON.stringify(j)); process.exit(1); };
if (!(j.prefill_gflops > 0 && j.matrix_peak_gflops > 0)) fail("no prefill GFLOP/s or matrix peak");
if (!["AMX BF16", "vdpbf16ps", "f32 FMA"].includes(j.matrix_peak)) fail("matrix peak named " + j.matrix_peak);
if (Math.abs(j.prefill_peak_fraction - j.prefill_gflops / j.matrix_peak_gflops) > 1e-3) fail("fraction is not the ratio");
if (!(j.load_s > 0 && j.load_s < 600)) fail("no load time");
' "$scratch/bench_out.json"
# at the AVX2 level the integer weights' matmuls are set beside their own
# multiply: INT8's (int16 activations by default there) vpmaddwd, INT4's
# vpmaddubsw
if "$bin" --version | grep -q "isa: \(avx2\|avx512\|avx512bf16\|amx\)"; then
  for q in int8:vpmaddwd int4:vpmaddubsw; do
    DSINFER_ISA=avx2 "$bin" bench --model "$model" --quant "${q%%:*}" --prompt-len 16 --gen-len 2 --reps 1 --threads 2 \
      --json > "$scratch/bench_$q.json" 2>/dev/null
    node -e '
const j = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
if (j.matrix_peak !== process.argv[2] || !(j.matrix_peak_gflops > 0)) {
  console.error("avx2 --quant " + process.argv[3] + ": matrix peak " + j.matrix_peak + ", not " + process.argv[2]); process.exit(1);
}' "$scratch/bench_$q.json" "${q#*:}" "${q%%:*}"
  done
fi
# a model path with a quote, a backslash and a tab stays one JSON string
odd="$scratch/m\"q\\b	t"
ln -s "$(cd "$model" && pwd)" "$odd"
"$bin" bench --model "$odd" --prompt-len 8 --gen-len 2 --reps 1 --threads 2 --json > "$scratch/odd_bench.json" 2>/dev/null
"$bin" bench serve --model "$odd" --requests 2 --concurrency 1 --prompt-len 8 --gen-len 2 --threads 2 --json \
  > "$scratch/odd_serve.json" 2>/dev/null
for f in odd_bench odd_serve; do
  node -e '
const j = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
if (j.model !== process.argv[2]) { console.error("model " + JSON.stringify(j.model) + " for " + JSON.stringify(process.argv[2])); process.exit(1); }
' "$scratch/$f.json" "$odd"
done
# the ablation: one JSON object per stage, in the study's order, with the fields
"$bin" bench --model "$model" --ablation --prompt-len 20 --gen-len 2 --reps 1 --threads 2 --json > "$scratch/abl.json" 2>/dev/null
node -e '
const a = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
const fail = m => { console.error(m); process.exit(1); };
if (!Array.isArray(a) || a.map(s => s.stage).join() !== "eager,graph,streams,op-opt") fail("stages: " + JSON.stringify(a));
for (const s of a) {
  for (const k of ["prefill_tokens_per_s", "decode_tokens_per_s", "ms_per_token", "peak_rss_bytes", "dispatch_share",
                   "compute_util", "bandwidth_util"])
    if (!(k in s)) fail(s.stage + " lacks " + k);
  if (!(s.prefill_tokens_per_s > 0 && s.decode_tokens_per_s > 0 && s.peak_rss_bytes > 0)) fail(s.stage + ": " + JSON.stringify(s));
  if (!(s.dispatch_share >= 0 && s.dispatch_share < 1)) fail(s.stage + " dispatch share " + s.dispatch_share);
}
' "$scratch/abl.json"
"$bin" bench --model "$model" --ablation --prompt-len 8 --gen-len 1 --reps 1 --threads 2 > "$scratch/abl.txt" 2>/dev/null
grep -q "graph plan at batch 1" "$scratch/abl.txt"
# the compute column is set beside the peak the header measured, named the same
pname=$(sed -n 's/^peaks: read [0-9.]* GB\/s, \(.*\) [0-9]* GFLOP\/s.*/\1/p' "$scratch/abl.txt")
[ -n "$pname" ] && grep -q "FLOP/s / the $pname peak" "$scratch/abl.txt" || { echo "ablation: peak '$pname' not named in the legend"; cat "$scratch/abl.txt"; exit 1; }
# a trace that cannot be written is an error that names the file
if "$bin" profile --model "$model" --prompt-len 4 --gen-len 1 --no-peaks --out /nonexistent/t.json > /dev/null 2> "$scratch/err.txt"; then
  echo "profile into a missing folder succeeded"; exit 1
fi
grep -q "/nonexistent/t.json" "$scratch/err.txt"
echo ok
