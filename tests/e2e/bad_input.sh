#!/usr/bin/env bash
# e2e: every bad input gets a clear error — the cases of an adversarial
# pass over the command line (overflowing numbers, contexts and thread
# counts, special files, full devices, folders where files go, NaN
# weights, config keys that change the model, generation_config.json,
# mkmodel's folder, chat's input), each with its exit code (2: a usage
# error, 1: a failure) and a message naming the cause; never a crash or a
# hang. Usage: bad_input.sh DSINFER SCRATCH
set -uo pipefail
bin=$(realpath "$1")
rm -rf "$2"; mkdir -p "$2"
S=$(cd "$2" && pwd)
. "$(dirname "$0")/lib/check.sh"

M=$S/tiny
"$bin" mkmodel --preset tiny --dtype bf16 --seed 3 --out "$M" --tokenizer builtin 2>/dev/null || { echo "FAIL: mkmodel"; exit 1; }
mk() { rm -rf "$S/$1"; cp -r "$M" "$S/$1"; }
setkey() { # DIR KEY VALUE: set a config.json key (added when missing)
  if grep -q "\"$2\":" "$1/config.json"; then sed -i "s/\"$2\": *[^,}]*/\"$2\": $3/" "$1/config.json"
  else sed -i "0,/{/s//{\n  \"$2\": $3,/" "$1/config.json"; fi
}

# ---- numbers: one parser per type, the flag and its range named ----
expect 2 "--temperature nan is not a number: it must be in [0, 100]" -- "$bin" run --model "$M" --prompt hi --temperature nan
expect 2 "--top-p nan is not a number" -- "$bin" generate --model "$M" --tokens 1 --top-p nan
expect 2 "--temperature 1e308 is out of range: it must be in [0, 100]" -- "$bin" run --model "$M" --prompt hi --temperature 1e308
expect 2 "-n 99999999999 is out of range: it must be in [0, 2147483647]" -- "$bin" run --model "$M" --prompt hi -n 99999999999
expect 2 "--top-k expects an integer" -- "$bin" generate --model "$M" --tokens 1 --top-k 1.5
expect 2 "--ctx 2147483647 is out of range" -- "$bin" run --model "$M" --prompt hi --ctx 2147483647
expect 2 "--seed expects an integer" -- "$bin" generate --model "$M" --tokens 1 --seed -1
expect 2 "--model needs a value, got an empty string" -- "$bin" run --model "" --prompt hi
# ids: one parser, blanks around each id allowed everywhere
a=$("$bin" generate --model "$M" --tokens "1, 2" -n 2 2>/dev/null)
b=$("$bin" generate --model "$M" --tokens "1,2" -n 2 2>/dev/null)
[ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "--tokens '1, 2' ($a) vs '1,2' ($b)"
a=$("$bin" detokenize --model "$M" --ids " 5 , 6" 2>/dev/null) && [ "$a" = "$("$bin" detokenize --model "$M" --ids 5,6)" ] &&
  ok || bad "detokenize --ids ' 5 , 6'"
expect 2 "--ids: item 2" -- "$bin" detokenize --model "$M" --ids "5,$(printf 'x%.0s' $(seq 70))"
expect 1 "position 2" -- "$bin" detokenize --model "$M" --ids 5,6,99999 --stream
expect 1 "position 2" -- "$bin" detokenize --model "$M" --ids 5,6,99999

# ---- contexts and sizes: no overflow, checked before anything is allocated ----
expect 1 "--ctx (1000000 tokens) is over the model's context of 512 tokens" -- "$bin" run --model "$M" --prompt hi --ctx 1000000
expect 1 "--ctx (1000000 tokens) is over the model's context" -- "$bin" chat --model "$M" --ctx 1000000 </dev/null
expect 0 "" -- "$bin" run --model "$M" --prompt hi -n 2147483647 --ignore-eos
expect 0 "-n cut to 510" -- "$bin" generate --model "$M" --tokens 1,2 -n 2147483647 --ignore-eos
expect 2 "--prompt-len 2147483647 is out of range" -- "$bin" bench --model "$M" --prompt-len 2147483647
expect 1 "do not fit the model's context of 512 tokens" -- "$bin" bench --model "$M" --prompt-len 100000 --gen-len 1
expect 2 "--threads 100000 is out of range" -- "$bin" generate --model "$M" --tokens 1 --threads 100000
mk qk; setkey "$S/qk" qk_nope_head_dim 2147483647
expect 1 "\"qk_nope_head_dim\": 2147483647 is over this build's limit" -- "$bin" generate --model "$S/qk" --tokens 1
mk layers; setkey "$S/layers" num_hidden_layers 1000
expect 1 "num_hidden_layers is 1000 but the checkpoint" -- "$bin" generate --model "$S/layers" --tokens 1
setkey "$S/layers" num_hidden_layers 1000000000
expect 1 "\"num_hidden_layers\": 1000000000 is over" -- "$bin" generate --model "$S/layers" --tokens 1
# the KV pool holds every sequence logits is given
toks=(); for i in $(seq 12); do toks+=(--tokens "$i,$((i + 1))"); done
expect 0 "" -- "$bin" logits --model "$M" "${toks[@]}" --out "$S/logits.bin"
[ "$(stat -c %s "$S/logits.bin" 2>/dev/null)" = $((12 * 2 * 512 * 4)) ] && ok || bad "logits of 12 sequences: wrong size"

# ---- files: regular files only, JSON size-limited; folders and devices named ----
mk fifo; rm "$S/fifo/model.safetensors"; mkfifo "$S/fifo/model.safetensors"
expect 1 "model.safetensors: not a regular file" -- "$bin" generate --model "$S/fifo" --tokens 1
mk zero; rm "$S/zero/config.json"; ln -s /dev/zero "$S/zero/config.json"
expect 1 "config.json: not a regular file" -- "$bin" generate --model "$S/zero" --tokens 1
mk rnd; rm "$S/rnd/tokenizer.json"; ln -s /dev/urandom "$S/rnd/tokenizer.json"
expect 1 "tokenizer.json: not a regular file" -- "$bin" tokenize --model "$S/rnd" --text hi
expect 1 "/dev/zero: not a regular file" -- "$bin" tokenize --model "$M" --file /dev/zero
expect 1 "is a directory" -- "$bin" tokenize --model "$M" --file "$S"
expect 1 "is a directory" -- "$bin" tokenize --model "$M" --jsonl "$S"
expect 1 "is a directory" -- "$bin" detokenize --model "$M" --jsonl "$S"
expect 1 "is a directory" -- "$bin" tokenize --tokenizer "$S" --text hi
expect 1 "$S" -- "$bin" logits --model "$M" --tokens 1 --out "$S"
ln -s "$M/tokenizer.json" "$S/link.json" # a link to a regular file is one
"$bin" tokenize --tokenizer "$S/link.json" --text hi >/dev/null 2>&1 && ok || bad "tokenize through a symlink"

# ---- output errors: every write and the final flush checked ----
if [ -w /dev/full ]; then
  for c in "generate --model $M --tokens 1,2 -n 2" "run --model $M --prompt hi -n 2" "tokenize --model $M --text hello" \
           "detokenize --model $M --ids 5,6" "detokenize --model $M --ids 5,6 --stream"; do
    out=$("$bin" $c 2>&1 >/dev/full); rc=$?
    [ "$rc" -eq 1 ] && grep -q "writing the output: No space left on device" <<<"$out" && ok || bad "$c > /dev/full: exit $rc: $out"
  done
fi

# ---- weights: NaN or infinity refused unless --allow-nonfinite ----
mk nan; f="$S/nan/model.safetensors"
hl=$(od -An -tu4 -N4 "$f" | tr -d ' ')
off=$(head -c $((8 + hl)) "$f" | tail -c "$hl" | grep -o '"model.layers.1.self_attn.o_proj.weight":{[^}]*}' | sed 's/.*"data_offsets":\[\([0-9]*\),.*/\1/')
printf '\xc0\x7f' | dd of="$f" bs=1 seek=$((8 + hl + off + 6)) conv=notrunc 2>/dev/null
expect 1 "model.layers.1.self_attn.o_proj.weight: holds NaN or infinity" -- "$bin" generate --model "$S/nan" --tokens 1
expect 0 "holds NaN or infinity" -- "$bin" generate --model "$S/nan" --tokens 1 -n 1 --allow-nonfinite

# ---- config keys that change the model ----
mk act; setkey "$S/act" hidden_act '"gelu"'
expect 1 "\"hidden_act\": \"gelu\" is not supported (only \"silu\")" -- "$bin" generate --model "$S/act" --tokens 1
mk mt; setkey "$S/mt" model_type '"llama"'
expect 1 "\"model_type\": \"llama\" is not a DeepSeek-V3-family model" -- "$bin" generate --model "$S/mt" --tokens 1
mk eos; setkey "$S/eos" eos_token_id 600
expect 1 "\"eos_token_id\": 600 is not an id of the vocabulary (vocab_size 512)" -- "$bin" generate --model "$S/eos" --tokens 1
mk fewer; setkey "$S/fewer" num_hidden_layers 2
expect 0 "num_hidden_layers is 2 (and num_nextn_predict_layers 0) but the checkpoint holds 3 layers" -- \
  "$bin" generate --model "$S/fewer" --tokens 1 -n 1
mk shared; setkey "$S/shared" n_shared_experts 0
expect 1 "n_shared_experts is 0 but the checkpoint holds model.layers.1.mlp.shared_experts.gate_proj.weight" -- \
  "$bin" generate --model "$S/shared" --tokens 1

# ---- generation_config.json: read, checked, its defaults used ----
mk gen; printf '{"temperature": "hot"}' > "$S/gen/generation_config.json"
expect 1 "generation_config.json: key \"temperature\": expected a number" -- "$bin" run --model "$S/gen" --prompt hi
printf '{"top_p": 1.5}' > "$S/gen/generation_config.json"
expect 1 "\"top_p\": 1.5 is out of range" -- "$bin" generate --model "$S/gen" --tokens 1
printf '{"do_sample": true, "temperature": 0.8, "top_k": 40, "max_new_tokens": 5}' > "$S/gen/generation_config.json"
a=$("$bin" generate --model "$S/gen" --tokens 3,1,4 --seed 5 --ignore-eos 2>/dev/null)
b=$("$bin" generate --model "$M" --tokens 3,1,4 --seed 5 --ignore-eos -n 5 --temperature 0.8 --top-k 40 2>/dev/null)
[ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "generation_config's defaults: '$a' vs the same given as options '$b'"
printf '{"do_sample": false, "temperature": 0.8}' > "$S/gen/generation_config.json"
a=$("$bin" generate --model "$S/gen" --tokens 3,1,4 -n 6 --seed 5 2>/dev/null)
b=$("$bin" generate --model "$M" --tokens 3,1,4 -n 6 2>/dev/null)
[ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "do_sample false is greedy: '$a' vs '$b'"

# ---- bench kernels measures what exists ----
expect 2 "--shape 'nope' is not one of" -- "$bin" bench kernels --shape nope
expect 2 "--dtypes: 'f4' is not one of bf16, fp8, int8, int4" -- "$bin" bench kernels --dtypes f4
expect 2 "--precision must be auto, f32 or bf16, got 'f16'" -- "$bin" bench kernels --precision f16

# ---- mkmodel ----
out=$("$bin" mkmodel --preset huge --out "$S/huge" 2>&1); rc=$?
[ "$rc" -eq 2 ] && grep -q "^dsinfer mkmodel: --preset 'huge' is not one of" <<<"$out" && ! grep -q "mkmodel: mkmodel" <<<"$out" &&
  ok || bad "mkmodel --preset huge: exit $rc: $out"
mkdir -p "$S/full"; echo keep > "$S/full/model-00001-of-00002.safetensors"
expect 1 "the folder is not empty" -- "$bin" mkmodel --preset tiny --out "$S/full" --tokenizer builtin
[ "$(cat "$S/full/model-00001-of-00002.safetensors")" = keep ] && ok || bad "mkmodel touched a non-empty folder"
expect 0 "" -- "$bin" mkmodel --preset tiny --out "$S/full" --tokenizer builtin --force
[ ! -e "$S/full/model-00001-of-00002.safetensors" ] && [ -s "$S/full/model.safetensors" ] && ok || bad "mkmodel --force"

# ---- text: one UTF-8 rule (an error unless --replace-invalid) ----
expect 1 "--prompt is not valid UTF-8 at byte offset 2 (byte 0xFF); --replace-invalid" -- "$bin" run --model "$M" --prompt $'hi\xff' -n 1
expect 0 "" -- "$bin" run --model "$M" --prompt $'hi\xff' -n 1 --replace-invalid
expect 1 "not valid UTF-8 at byte offset 2" -- "$bin" tokenize --model "$M" --text $'hi\xff'

# ---- chat ----
printf 'hel\0lo\n/rset\n' | "$bin" chat --model "$M" -n 2 > "$S/chat.out" 2> "$S/chat.err"; rc=$?
grep -q "the line holds a NUL byte; not sent" "$S/chat.err" && ok || bad "chat: NUL byte: $(cat "$S/chat.err")"
grep -q "unknown command '/rset'; the commands are /reset, /exit" "$S/chat.err" && ok || bad "chat: /rset: $(cat "$S/chat.err")"
[ "$rc" -eq 1 ] && ok || bad "chat with a failed turn exited $rc"
long=$(printf 'word %.0s' $(seq 400))
printf '%s\n%s\n' "$long" "$long" | "$bin" chat --model "$M" --ctx 300 -n 5 > "$S/full.out" 2> "$S/full.err"; rc=$?
grep -q "/reset starts a new one" "$S/full.err" && ok || bad "chat: a full context gave no hint: $(cat "$S/full.err")"
[ "$rc" -eq 1 ] && ok || bad "chat with a full context exited $rc"
printf 'hello\n' | "$bin" chat --model "$M" -n 2 > /dev/null 2>&1 && ok || bad "chat: a good turn failed"

finish
