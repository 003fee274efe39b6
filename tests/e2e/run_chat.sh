#!/usr/bin/env bash
# e2e: text in, text out. `run` streams exactly the text of the ids
# `generate` produces for the same prompt (plain and through the chat
# template), `chat` answers turn after turn from stdin and reuses its cache,
# Ctrl-C stops an answer without ending the chat, `--json-schema` answers
# are values of the schema (checked in node), and a checkpoint without a
# tokenizer or a bad option fail clearly. Usage: run_chat.sh DSINFER SCRATCH
set -uo pipefail
bin=$(realpath "$1")
rm -rf "$2"; mkdir -p "$2"
S=$(cd "$2" && pwd)
fails=0 passes=0
ok() { passes=$((passes + 1)); }
bad() { echo "FAIL: $*"; fails=$((fails + 1)); }

M=$S/tiny
"$bin" mkmodel --preset tiny --dtype bf16 --seed 3 --out "$M" --tokenizer builtin 2>/dev/null ||
  { echo "FAIL: mkmodel"; exit 1; }
eos=$(sed -n 's/.*"eos_token_id": *\([0-9]*\).*/\1/p' "$M/config.json")

# The text of ids as detokenize gives it, then a newline (as run ends); a
# trailing EOS id (generate prints it, run does not) left out.
expect_text() { # IDS OUTFILE
  local ids=$1
  [ "$ids" = "$eos" ] && ids=
  ids=${ids%,"$eos"}
  if [ -z "$ids" ]; then echo > "$2"; else "$bin" detokenize --model "$M" --ids "$ids" --skip-unknown > "$2"; fi
}
prompt_ids() { sed -n "s/^dsinfer $1: prompt ([0-9]* tokens): //p" "$2"; }

# ---- run: the prompt's ids, and the text equal to generate's ----
p="The capital of France is"
"$bin" run --model "$M" --prompt "$p" -n 24 -v > "$S/run.out" 2> "$S/run.err" && ok || bad "run exited $?: $(cat "$S/run.err")"
ids=$(prompt_ids run "$S/run.err")
want=$("$bin" tokenize --model "$M" --text "$p" --add-special | tr ' ' ,)
[ -n "$ids" ] && [ "$ids" = "$want" ] && ok || bad "run's prompt ids '$ids', tokenize --add-special gives '$want'"
[ "$(wc -c < "$S/run.out")" -gt 1 ] && ok || bad "run printed no text"
grep -q "prefill: .* tokens/s; decode: .* tokens/s" "$S/run.err" && ok || bad "run: no speed line on stderr"
gen=$("$bin" generate --model "$M" --tokens "$ids" -n 24 2>/dev/null)
expect_text "$gen" "$S/run.want"
cmp -s "$S/run.out" "$S/run.want" && ok || bad "run's text differs from detokenize(generate): $(od -c "$S/run.out" | head -3) vs $(od -c "$S/run.want" | head -3)"

# sampling: run and generate draw the same tokens for a seed
"$bin" run --model "$M" --prompt "$p" -n 16 -v --temperature 0.8 --top-k 40 --seed 9 > "$S/samp.out" 2> "$S/samp.err"
gen=$("$bin" generate --model "$M" --tokens "$(prompt_ids run "$S/samp.err")" -n 16 --temperature 0.8 --top-k 40 --seed 9 2>/dev/null)
expect_text "$gen" "$S/samp.want"
cmp -s "$S/samp.out" "$S/samp.want" && ok || bad "sampled run differs from generate with the same seed"

# ---- run --chat: the template's rendering, and the raw text equal to generate's ----
"$bin" run --model "$M" --chat --raw --prompt "Hello" -n 24 -v > "$S/chat.out" 2> "$S/chat.err" && ok || bad "run --chat --raw exited $?"
ids=$(prompt_ids run "$S/chat.err")
want=$("$bin" tokenize --model "$M" --text "<｜begin▁of▁sentence｜><｜User｜>Hello<｜Assistant｜>" | tr ' ' ,)
[ -n "$ids" ] && [ "$ids" = "$want" ] && ok || bad "run --chat prompt ids '$ids', want the V3 rendering's '$want'"
gen=$("$bin" generate --model "$M" --tokens "$ids" -n 24 2>/dev/null)
expect_text "$gen" "$S/chat.want"
cmp -s "$S/chat.out" "$S/chat.want" && ok || bad "run --chat --raw text differs from detokenize(generate)"
"$bin" run --model "$M" --chat --system "Be brief." --prompt "Hello" -n 24 > "$S/chat2.out" 2> "$S/chat2.err" &&
  ok || bad "run --chat exited $?: $(cat "$S/chat2.err")"
[ -s "$S/chat2.out" ] && ok || bad "run --chat printed nothing"

# a reasoning template: the thinking goes to stderr after "thinking: ", the answer to stdout
R=$S/r1; cp -r "$M" "$R"
T=$(cd "$(dirname "${BASH_SOURCE[0]}")/../templates/templates" && pwd)
set_template() { # tokenizer_config.json's chat_template := a file's text
  node -e 'const fs = require("fs"), c = JSON.parse(fs.readFileSync(process.argv[1], "utf8"));
    c.chat_template = fs.readFileSync(process.argv[2], "utf8");
    fs.writeFileSync(process.argv[1], JSON.stringify(c));' "$@"
}
if command -v node >/dev/null; then
  set_template "$R/tokenizer_config.json" "$T/deepseek-r1.jinja"
  "$bin" run --model "$R" --chat --think --prompt "Hi" -n 12 -v > "$S/r1.out" 2> "$S/r1.err" && ok || bad "run --think exited $?"
  ids=$(prompt_ids run "$S/r1.err")
  want=$("$bin" tokenize --model "$M" --text "<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜><think>
" | tr ' ' ,)
  [ "$ids" = "$want" ] && ok || bad "R1 --think prompt ids '$ids', want '$want'"
  # the random model never closes </think>: all of it is reasoning
  grep -q "^thinking: " "$S/r1.err" && ok || bad "no 'thinking: ' on stderr: $(cat "$S/r1.err")"
  [ "$(tr -d '\n' < "$S/r1.out")" = "" ] && ok || bad "reasoning leaked into stdout: $(cat "$S/r1.out")"
  "$bin" run --model "$R" --chat --no-think --prompt "Hi" -n 4 -v > /dev/null 2> "$S/r1n.err"
  prompt_ids run "$S/r1n.err" | grep -q ",511$" && ok || bad "--no-think: the prompt does not end in </think> (511)"
fi

# ---- chat: two turns, the second reusing the first's cache; /reset; /exit ----
printf 'Hello\nHow are you?\n/reset\n/exit\nnever read\n' |
  "$bin" chat --model "$M" -n 12 -v > "$S/c.out" 2> "$S/c.err"
rc=$?
[ $rc -eq 0 ] && ok || bad "chat exited $rc: $(cat "$S/c.err")"
n=$(grep -c "^prefill:" "$S/c.err")
[ "$n" -eq 2 ] && ok || bad "chat: $n answers, want 2: $(cat "$S/c.err")"
grep -q "^\[conversation cleared\]" "$S/c.err" && ok || bad "chat: /reset said nothing"
first=$(prompt_ids chat "$S/c.err" | sed -n 1p)
second=$(prompt_ids chat "$S/c.err" | sed -n 2p)
[ -n "$first" ] && [ "${second#"$first",}" != "$second" ] && ok || bad "chat: turn 2's prompt does not extend turn 1's"
cached=$(sed -n 's/^prefill: [0-9]* tokens (\([0-9]*\) cached).*/\1/p' "$S/c.err" | sed -n 2p)
[ "${cached:-0}" -ge "$(tr ',' '\n' <<<"$first" | wc -l)" ] && ok || bad "chat: turn 2 reused ${cached:-0} cached tokens"
grep -q "never read" "$S/c.err" "$S/c.out" && bad "chat went on after /exit" || ok

# after /reset the conversation starts afresh: the same answer as the first
printf 'Hello\nHow are you?\n/reset\nHello\n' | "$bin" chat --model "$M" -n 12 -v > "$S/r.out" 2> "$S/r.err"
[ $? -eq 0 ] && ok || bad "chat to end of input exited non-zero"
a1=$(prompt_ids chat "$S/r.err" | sed -n 1p); a3=$(prompt_ids chat "$S/r.err" | sed -n 3p)
[ -n "$a1" ] && [ "$a1" = "$a3" ] && ok || bad "after /reset the prompt is '$a3', want the first turn's '$a1'"
grep -q "^prefill: [0-9]* tokens (0 cached)" <(sed -n 3p <(grep "^prefill:" "$S/r.err")) && ok ||
  bad "after /reset the cache was reused"
ans() { awk -v k="$2" 'BEGIN{RS="> "} NR==k+1' "$1"; }
# (stdout: "> " answer 1, "> " answer 2, "> " for /reset, "> " answer 3)
[ -n "$(ans "$S/r.out" 1)" ] && [ "$(ans "$S/r.out" 1)" = "$(ans "$S/r.out" 4)" ] && ok ||
  bad "after /reset the answer differs from the first: '$(ans "$S/r.out" 1)' vs '$(ans "$S/r.out" 4)'"
# the first answer is what run --chat gives for the same message
"$bin" run --model "$M" --chat --prompt "Hello" -n 12 > "$S/one.out" 2>/dev/null
[ "$(ans "$S/r.out" 1)" = "$(cat "$S/one.out")" ] && ok || bad "chat's first answer differs from run --chat's"

# ---- Ctrl-C stops an answer, not the chat ----
# a context long enough that an answer cannot end before the signal comes
L=$S/long; cp -r "$M" "$L"
sed -i 's/"max_position_embeddings": 512/"max_position_embeddings": 8192/' "$L/config.json"
fifo=$S/in.fifo; mkfifo "$fifo"
# --foreground: timeout relays every SIGINT to chat (else only the first)
timeout --foreground 300 "$bin" chat --model "$L" --ctx 4096 -n 2000 --ignore-eos < "$fifo" > "$S/int.out" 2> "$S/int.err" &
pid=$!
exec 3> "$fifo"
# wait_for FILE PATTERN COUNT: until grep -c PATTERN FILE reaches COUNT (60 s at most)
wait_for() {
  for _ in $(seq 600); do
    [ "$(grep -c -- "$2" "$1" 2>/dev/null)" -ge "$3" ] && return 0
    kill -0 $pid 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}
# answering: stdout holds more than the prompt ("> ") since the line was sent
answering() {
  for _ in $(seq 600); do
    [ "$(wc -c < "$S/int.out")" -gt "$1" ] && return 0
    kill -0 $pid 2>/dev/null || return 1
    sleep 0.05
  done
  return 1
}
echo "Tell me a long story" >&3
answering 2 && ok || bad "Ctrl-C test: no answer started"
kill -INT $pid
wait_for "$S/int.err" "^\[interrupted\]" 1 && ok || bad "Ctrl-C did not stop the first answer: $(cat "$S/int.err")"
size=$(wc -c < "$S/int.out")
echo "And another one" >&3
answering $((size + 2)) && ok || bad "Ctrl-C test: no second answer"
kill -INT $pid
wait_for "$S/int.err" "^\[interrupted\]" 2 && ok || bad "Ctrl-C did not stop the second answer"
echo "/exit" >&3
exec 3>&-
wait $pid
rc=$?
[ $rc -eq 0 ] && ok || bad "chat after Ctrl-C exited $rc (124: it never ended): $(tail -3 "$S/int.err")"
n=$(grep -c "^\[interrupted\] prefill:" "$S/int.err")
[ "$n" -eq 2 ] && ok || bad "Ctrl-C test: $n interrupted answers, want 2"
cached=$(sed -n 's/.*prefill: [0-9]* tokens (\([0-9]*\) cached).*/\1/p' "$S/int.err" | sed -n 2p)
[ "${cached:-0}" -gt 0 ] && ok || bad "the turn after Ctrl-C did not reuse the cache"

# ---- --json-schema: each answer one value of the schema, or its start when cut at -n ----
schema='{"type":"object","properties":{"id":{"type":"string","pattern":"^[A-Z]{2}-\\d{3}$"},"n":{"type":"integer","minimum":1,"maximum":9},"when":{"type":"string","format":"date"}},"required":["id","n"],"additionalProperties":false}'
echo "$schema" > "$S/schema.json"
for seed in 1 2 3 4; do
  src=$schema; [ $seed -gt 2 ] && src=$S/schema.json # the text, or a file holding it
  "$bin" run --model "$M" --prompt "a record" --chat --json-schema "$src" -n 120 --temperature 1 --seed $seed \
    > "$S/json$seed.out" 2> "$S/json$seed.err" || bad "run --json-schema (seed $seed) exited $?: $(cat "$S/json$seed.err")"
done
if command -v node > /dev/null; then
  node -e '
    const fs = require("fs");
    let closed = 0, bad = [];
    for (const f of process.argv.slice(1)) {
      const t = fs.readFileSync(f, "utf8").replace(/\n$/, "");
      let o;
      try { o = JSON.parse(t); } catch (e) { if (!/^\s*\{/.test(t)) bad.push(f + ": " + t); continue; }
      closed++;
      const ok = /^[A-Z]{2}-\d{3}$/u.test(o.id) && Number.isInteger(o.n) && o.n >= 1 && o.n <= 9 &&
        (o.when === undefined || /^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])$/.test(o.when)) &&
        Object.keys(o).every((k) => ["id", "n", "when"].includes(k));
      if (!ok) bad.push(f + ": " + t);
    }
    if (bad.length || !closed) { console.log("closed " + closed + "; not of the schema: " + bad.join(" | ")); process.exit(1); }
  ' "$S"/json[1-4].out && ok || bad "run --json-schema: the answers above are not values of the schema (or none closed)"
else
  echo "run --json-schema: output checks skipped (node is not installed)"
fi
out=$("$bin" run --model "$M" --prompt hi --json-schema '{"type":"object","properties":{"a":{"pattern":"(?=x)"}}}' 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "'pattern': lookaround" <<<"$out" && ok || bad "run --json-schema with a lookahead: exit $rc: $out"
"$bin" run --model "$M" --prompt "hi" --json -n 40 --temperature 1 --seed 9 > "$S/obj.out" 2> /dev/null &&
  [ "$(tr -d ' \t\r\n' < "$S/obj.out" | head -c 1)" = "{" ] && ok ||
  bad "run --json: the answer does not begin an object: $(head -c 80 "$S/obj.out")"

# ---- --regex: the text matches it whole; yes|no ends as the word does ----
for seed in 1 2 3; do
  out=$("$bin" run --model "$M" --prompt "ok?" --regex '(yes|no)' -n 20 --temperature 1 --seed $seed 2> /dev/null)
  [ "$out" = yes ] || [ "$out" = no ] && ok || bad "run --regex '(yes|no)' (seed $seed): '$out'"
done
out=$("$bin" run --model "$M" --prompt hi --regex 'a\1' 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "back references" <<<"$out" && ok || bad "run --regex with a back reference: exit $rc: $out"

# ---- errors ----
N=$S/notok; mkdir -p "$N"; cp "$M/config.json" "$M/model.safetensors" "$N/"
for cmd in "run --prompt hi" "chat"; do
  out=$("$bin" $cmd --model "$N" 2>&1 < /dev/null); rc=$?
  [ $rc -eq 1 ] && grep -q "$N/tokenizer.json: not found" <<<"$out" && ok || bad "$cmd without a tokenizer: exit $rc: $out"
done
for args in "run --model $M --prompt hi --bogus" "chat --model $M --bogus" "run --model $M" \
            "run --model $M --prompt hi --think" "chat --model $M --think --no-think" "run --model $M --prompt hi -n -1"; do
  out=$("$bin" $args 2>&1 < /dev/null); rc=$?
  [ $rc -eq 2 ] && [ "$(wc -l <<<"$out")" -eq 1 ] && ok || bad "'$args': exit $rc (want 2): $out"
done
# (to a file: grep -q stops reading at the first line, and the rest would meet a closed pipe)
"$bin" run --help > "$S/help.txt" && grep -q "usage: dsinfer run" "$S/help.txt" && ok || bad "run --help"
"$bin" chat --help > "$S/help.txt" && grep -q "usage: dsinfer chat" "$S/help.txt" && ok || bad "chat --help"

echo "run_chat: $passes passed, $fails failed"
[ $fails -eq 0 ]
