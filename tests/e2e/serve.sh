#!/usr/bin/env bash
# e2e: `dsinfer serve` — the official OpenAI client against it (chat whole
# and streamed, equal to `dsinfer run --chat` greedily, alone and with 16
# clients at once; logprobs; seeds and n; completions with echo and token
# ids; the Responses API; errors; a client that aborts mid-stream freeing
# its KV blocks) and Anthropic's (the Messages API), the
# other routes and a corpus of malformed requests over plain HTTP, 16
# streaming clients for 60 s, the chat page in headless Chromium (an answer
# streamed, one stopped), then SIGTERM: exit 0 with the requests ended; and
# on a second server with one place, keep-alive events on queued streams.
# Usage: serve.sh DSINFER SCRATCH
set -uo pipefail
bin=$(realpath "$1")
rm -rf "$2"; mkdir -p "$2"
S=$(cd "$2" && pwd)
T=$(cd "$(dirname "$0")/../server" && pwd)
fails=0
bad() { echo "FAIL: $*"; fails=$((fails + 1)); }

command -v node >/dev/null || { echo "FAIL: node is not installed (scripts/deps.sh installs it)"; exit 1; }
if [ ! -d "$T/node_modules/openai" ] || [ ! -d "$T/node_modules/@anthropic-ai/sdk" ]; then
  (cd "$T" && { npm ci --no-audit --no-fund || npm install --no-audit --no-fund; }) >"$S/npm.log" 2>&1 ||
    { tail -20 "$S/npm.log"; echo "FAIL: npm install in tests/server"; exit 1; }
fi

M=$S/tiny
"$bin" mkmodel --preset tiny --dtype bf16 --seed 3 --out "$M" --tokenizer builtin 2>/dev/null ||
  { echo "FAIL: mkmodel"; exit 1; }

# what `dsinfer run --chat` answers greedily, prompt by prompt
prompts=("Hello there" "What is the capital of France?" "Write a haiku" "2+2=")
: >"$S/expected.tsv"
for p in "${prompts[@]}"; do
  out=$("$bin" run --model "$M" --chat --prompt "$p" -n 16 --temperature 0 --ctx 512 2>/dev/null) ||
    { echo "FAIL: dsinfer run --chat --prompt '$p'"; exit 1; }
  printf '%s\t%s\n' "$p" "$(printf '%s' "$out" | base64 -w0)" >>"$S/expected.tsv"
done
node -e '
const fs = require("fs"), o = {};
for (const l of fs.readFileSync(process.argv[1], "utf8").split("\n").filter(Boolean)) {
  const [p, b] = l.split("\t");
  o[p] = Buffer.from(b, "base64").toString("utf8").replace(/\n$/, "");
}
fs.writeFileSync(process.argv[2], JSON.stringify(o));' "$S/expected.tsv" "$S/expected.json"

. "$(dirname "$0")/lib/serve_port.sh"
"$bin" serve --model "$M" --port 0 --api-key test-key --served-model-name tiny,claude-x-alias --ctx 512 2>"$S/serve.log" &
pid=$!
port=$(serve_port "$S/serve.log" $pid)
[ -n "$port" ] || { cat "$S/serve.log"; echo "FAIL: the server did not start"; exit 1; }
url=http://127.0.0.1:$port

node "$T/client.mjs" "$url" test-key "$S/expected.json" || bad "the OpenAI client's checks (above)"
node "$T/raw.mjs" "$url" test-key || bad "the plain HTTP checks (above)"
# 16 streaming clients for 60 s (20 under the sanitizers)
node "$T/load.mjs" "$url" test-key "$([ -n "${DSINFER_SANITIZED:-}" ] && echo 20 || echo 60)" || bad "the load test (above)"
# the load generator of the README's figures: every request ends whole, none resent
lg=$(node "$T/../../scripts/loadgen.mjs" --url "$url" --api-key test-key --conc 1,3 --rounds 2 --repeat 2 \
  --words 20 --tokens 8 --ban-invalid-utf8 "$M/tokenizer.json" --json "$S/loadgen.json" 2>&1) ||
  bad "loadgen: $lg"
node -e '
const j = JSON.parse(require("fs").readFileSync(process.argv[1]));
const ok = j.levels.length === 2 && j.levels.every((l) => l.requests === 4 * l.concurrency && !l.errors && !l.short &&
  !l.retries && l.tok_s > 0 && l.ttft_p50 > 0); /* no ITL check: the tiny model answers so fast that a whole stream can share one read */
process.exit(ok ? 0 : 1);' "$S/loadgen.json" && echo "ok   loadgen" || bad "loadgen figures: $(cat "$S/loadgen.json")"
# the chat page in headless Chromium
node "$T/page.mjs" "$url" test-key chat
case $? in
0) ;;
77) if [ -n "${CI:-}" ]; then bad "no chromium (scripts/deps.sh installs it)"; else echo "page: skipped, no chromium"; fi ;;
*) bad "the chat page's checks (above)" ;;
esac

# a line per request on stderr
grep -q 'POST /v1/chat/completions 200 chatcmpl-.* in [0-9]* (cached [0-9]*) out [0-9]* ttft' "$S/serve.log" ||
  bad "no request line in the log"
grep -q 'streamed: in [0-9]* (cached [0-9]*) out [0-9]*' "$S/serve.log" || bad "no streamed request line in the log"

# SIGTERM while a long request runs: it ends, the server exits 0. The
# signal waits for the stream's headers (the request admitted), however
# slowly node starts on a busy machine.
node -e '
fetch(process.argv[1] + "/v1/chat/completions", { method: "POST",
  headers: { Authorization: "Bearer test-key", "Content-Type": "application/json" },
  body: JSON.stringify({ messages: [{ role: "user", content: "go on" }], max_tokens: 400, ignore_eos: true, stream: true }) })
  .then((r) => { require("fs").writeFileSync(process.argv[2], "started"); return r.text(); })
  .then((t) => { console.log(t.includes("[DONE]") ? "ended" : "cut"); })
  .catch((e) => console.log("error " + e.message));' "$url" "$S/long.started" >"$S/long.txt" &
npid=$!
for _ in $(seq 600); do [ -s "$S/long.started" ] && break; sleep 0.05; done
[ -s "$S/long.started" ] || bad "the long request's stream did not start within 30 s"
kill -TERM $pid
wait $pid
rc=$?
wait $npid
[ $rc -eq 0 ] || bad "serve exited $rc after SIGTERM"
grep -q "stopped" "$S/serve.log" || bad "no 'stopped' line after SIGTERM"
grep -q "ended" "$S/long.txt" || bad "the request in flight at SIGTERM did not end cleanly: $(cat "$S/long.txt")"

# one place (--max-seqs 1) and keep-alives every 10 ms: streams queued behind
# long completions get them before their first token, and read through them
"$bin" serve --model "$M" --port 0 --api-key test-key --served-model-name tiny --ctx 512 --max-seqs 1 \
  --sse-keepalive 0.01 --quiet 2>"$S/serve2.log" &
pid2=$!
port2=$(serve_port "$S/serve2.log" $pid2)
if [ -n "$port2" ]; then
  node "$T/keepalive.mjs" "http://127.0.0.1:$port2" test-key || bad "the keep-alive checks (above)"
  kill -TERM $pid2; wait $pid2 || bad "the second server exited $? after SIGTERM"
else
  cat "$S/serve2.log"; bad "the second server did not start"
fi

if [ $fails -gt 0 ]; then
  echo "--- serve.log (tail)"; tail -20 "$S/serve.log"
  echo "$fails failed"; exit 1
fi
echo "serve: all passed"
