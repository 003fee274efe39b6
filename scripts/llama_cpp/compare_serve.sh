#!/usr/bin/env bash
# dsinfer serve vs llama-server, side by side in one sitting, on the same
# weights: the BF16 checkpoint DIR for dsinfer and its GGUF (to_gguf.py) for
# llama-server. Both servers stay up; scripts/loadgen.mjs runs against each in
# turn, ROUNDS times alternating, and the table gives per concurrency level
# the median over the rounds and dsinfer's ratio to llama-server. Round r sends
# both servers the same prompts, drawn from seed r (no prefix is reused across
# rounds).
#
#   scripts/llama_cpp/compare_serve.sh LLAMA_BUILD_BIN DIR GGUF [ROUNDS] [THREADS]
#   scripts/llama_cpp/compare_serve.sh --summary OUTDIR ROUNDS    (the table again)
#
# e.g. scripts/llama_cpp/compare_serve.sh ~/llama.cpp/build/bin \
#        /tmp/models/bench-bf16 /tmp/models/bench-bf16.gguf 3 2
# Environment: CONC (default 1,4,16), WORDS (100), TOKENS (64),
# LG_ROUNDS (requests per client per level, 4), NP (llama-server slots, 16).
set -euo pipefail
cd "$(dirname "$0")/../.."
summary() {
node - "$1" "$2" <<'EOF'
const fs = require("fs");
const [dir, rounds] = [process.argv[2], Number(process.argv[3])];
const load = (s) => Array.from({ length: rounds }, (_, i) => JSON.parse(fs.readFileSync(`${dir}/${s}.${i + 1}.json`)));
const med = (a) => { const s = [...a].sort((x, y) => x - y); return s[Math.floor(s.length / 2)]; };
const d = load("dsinfer"), l = load("llama");
console.log(`\nmedians of ${rounds} alternating rounds (tok/s; TTFT and ITL in ms)`);
console.log("conc | dsinfer tok/s | llama tok/s | ratio | dsinfer TTFT p50/p99 | llama TTFT p50/p99 | dsinfer ITL p50/p99 | llama ITL p50/p99");
for (let i = 0; i < d[0].levels.length; i++) {
  const m = (runs, k) => med(runs.map((r) => r.levels[i][k]));
  const ms = (x) => (x * 1e3).toFixed(0);
  const dt = m(d, "tok_s"), lt = m(l, "tok_s");
  console.log(`${d[0].levels[i].concurrency} | ${dt.toFixed(1)} | ${lt.toFixed(1)} | ${(dt / lt).toFixed(2)}x | ` +
    `${ms(m(d, "ttft_p50"))}/${ms(m(d, "ttft_p99"))} | ${ms(m(l, "ttft_p50"))}/${ms(m(l, "ttft_p99"))} | ` +
    `${ms(m(d, "itl_p50"))}/${ms(m(d, "itl_p99"))} | ${ms(m(l, "itl_p50"))}/${ms(m(l, "itl_p99"))}`);
  const rat = d.map((r, k) => (r.levels[i].tok_s / l[k].levels[i].tok_s).toFixed(2));
  console.log(`     per-round ratios: ${rat.join(" ")}`);
}
EOF
}
if [ "${1:-}" = --summary ]; then summary "$2" "$3"; exit 0; fi
bin=$1 model=$2 gguf=$3 rounds=${4:-3} threads=${5:-2}
conc=${CONC:-1,4,16} words=${WORDS:-100} tokens=${TOKENS:-64} np=${NP:-16}
out=$(mktemp -d /tmp/compare_serve.XXXXXX)
p1=18431 p2=18432
build/dsinfer serve --model "$model" --threads "$threads" --max-seqs 16 --port $p1 --quiet \
  >"$out/dsinfer.log" 2>&1 &
pid1=$!
"$bin/llama-server" -m "$gguf" -t "$threads" -tb "$threads" -np "$np" -c $((np * 1024)) \
  --host 127.0.0.1 --port $p2 >"$out/llama.log" 2>&1 &
pid2=$!
trap 'kill $pid1 $pid2 2>/dev/null || true' EXIT
for p in $p1 $p2; do
  for _ in $(seq 300); do curl -sf "http://127.0.0.1:$p/health" >/dev/null && break; sleep 1; done
  curl -sf "http://127.0.0.1:$p/health" >/dev/null || { echo "server on port $p did not come up (logs in $out)"; exit 1; }
done
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $threads threads; logs and JSON in $out"
# warm-up, discarded: every weight page touched, every thread started
for port in $p1 $p2; do
  node scripts/loadgen.mjs --url "http://127.0.0.1:$port" --conc 16 --rounds 1 --repeat 1 --seed 99 \
    --words "$words" --tokens "$tokens" --ban-invalid-utf8 "$model/tokenizer.json" >/dev/null
done
for r in $(seq "$rounds"); do
  for s in dsinfer llama; do
    port=$p1; [ $s = llama ] && port=$p2
    node scripts/loadgen.mjs --url "http://127.0.0.1:$port" --conc "$conc" --words "$words" \
      --tokens "$tokens" --rounds "${LG_ROUNDS:-4}" --repeat 1 --seed "$r" --label "$s round $r" \
      --ban-invalid-utf8 "$model/tokenizer.json" --json "$out/$s.$r.json" || echo "($s: errors above)"
  done
done
summary "$out" "$rounds"
