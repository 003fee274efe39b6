#!/usr/bin/env bash
# e2e: the command line's contract — --help everywhere, usage errors exit 2
# with one line, and bad checkpoints or inputs fail with exit 1 and a
# message that names the cause (tensor, key or file), never a crash.
set -uo pipefail
bin=$1 scratch=$2
rm -rf "$scratch"; mkdir -p "$scratch"
. "$(dirname "$0")/lib/check.sh"

for cmd in logits generate mkmodel; do
  "$bin" $cmd --help > "$scratch/help.txt" && grep -q "usage: dsinfer $cmd" "$scratch/help.txt" && ok || bad "$cmd --help"
  expect 2 "unknown option '--bogus'" -- "$bin" $cmd --bogus
done
expect 2 "unknown command" -- "$bin" frobnicate
expect 2 "needs a value" -- "$bin" generate --model
expect 2 "expects an integer" -- "$bin" generate --model x --tokens 1 -n lots
expect 2 "required" -- "$bin" logits --model x
expect 2 "names separated by single commas" -- "$bin" serve --model x --served-model-name "a,,b"
expect 2 "--tokens expects" -- "$bin" generate --model x --tokens 1,,2
"$bin" --version | grep -q "dsinfer" && ok || bad "--version"
# the route BF16 and FP8 weights take, under the cap and DSINFER_BF16_DOT
DSINFER_ISA=scalar "$bin" --version | grep -q "bf16/fp8 matmul: scalar; int4 matmul: ref;" && ok || bad "--version capped to scalar"
# and INT4 weights' kernel: the level's (on an AMX CPU, with the race's outcome)
if "$bin" --version | grep -q "isa: avx2\|isa: avx512\|isa: amx"; then
  DSINFER_ISA=avx2 "$bin" --version | grep -q "int4 matmul: avx2-int4;" && ok || bad "--version capped to avx2: the INT4 kernel"
fi
if "$bin" --version | grep -q "isa: amx"; then
  "$bin" --version | grep -q "int4 matmul: [a-z0-9-]*, AMX INT4 o[nf]* (.*raced at start)" && ok || bad "--version: the AMX INT4 race"
  DSINFER_AMX_INT4=off "$bin" --version | grep -q "int4 matmul: avx512-vnni-int4, AMX INT4 off (DSINFER_AMX_INT4)" && ok ||
    bad "--version with DSINFER_AMX_INT4=off"
fi
if "$bin" --version | grep -q "isa: avx512bf16"; then
  DSINFER_BF16_DOT=on "$bin" --version | grep -q "bf16/fp8 matmul: vdpbf16ps;" && ok || bad "--version with the bf16 dot on"
  DSINFER_BF16_DOT=off "$bin" --version | grep -q "bf16/fp8 matmul: f32 FMAs;" && ok || bad "--version with it off"
fi

good=golden/tiny-bf16/model
expect 1 "config.json" -- "$bin" generate --model "$scratch/nope" --tokens 1
expect 1 "outside the vocabulary" -- "$bin" generate --model $good --tokens 1,99999 -n 1
long=$(seq 1 600 | awk '{printf "%s%d", (NR > 1 ? "," : ""), $1 % 500}')
expect 1 "context limit" -- "$bin" generate --model $good --tokens "$long" -n 1
expect 2 "--quant must be none, int8 or int4" -- "$bin" generate --model $good --tokens 1 --quant int2
expect 2 "--quant must be none, int8 or int4" -- "$bin" bench --model $good --quant fp4
expect 2 "--quant-head must be int8, int4 or none" -- "$bin" generate --model $good --tokens 1 --quant int4 --quant-head int2
expect 2 "it needs --quant int8 or int4" -- "$bin" bench --model $good --quant-head int4
expect 1 "cannot be combined with --op-opt off" -- "$bin" generate --model $good --tokens 1 -n 1 --quant int8 --op-opt off
expect 1 "int4 quantization packs the weights" -- "$bin" generate --model $good --tokens 1 -n 1 --quant int4 --mlock
expect 2 "--exec must be graph or eager" -- "$bin" generate --model $good --tokens 1 --exec lazy
expect 2 "--kv-dtype must be auto, bf16 or f32" -- "$bin" generate --model $good --tokens 1 --kv-dtype fp8
expect 2 "--kv-dtype must be auto, bf16 or f32" -- "$bin" bench --model $good --kv-dtype f16
expect 1 "a bf16 KV cache needs packed weights" -- "$bin" generate --model $good --tokens 1 -n 1 --kv-dtype bf16 --op-opt off
# the cache's dtype: either generates (their numbers: e2e_logits_golden), and bench says which it held
for kv in bf16 f32; do
  "$bin" generate --model $good --tokens 3,1,4 -n 4 --kv-dtype $kv 2>/dev/null | grep -qE '^[0-9]+(,[0-9]+){3}$' && ok || bad "generate --kv-dtype $kv"
done
"$bin" bench --model $good --prompt-len 8 --gen-len 2 --reps 1 --json 2>/dev/null | grep -q '"kv_dtype":"bf16"' && ok || bad "bench's default cache is not bf16"
"$bin" bench --model $good --prompt-len 8 --gen-len 2 --reps 1 --json --precision f32 2>/dev/null | grep -q '"kv_dtype":"f32"' && ok || bad "bench's cache under --precision f32 is not f32"
expect 2 "--streams 3 is out of range: it must be in [0, 2]" -- "$bin" generate --model $good --tokens 1 --streams 3
expect 2 "--exec must be graph or eager" -- "$bin" bench --model $good --exec lazy
expect 2 "--ablation sets" -- "$bin" bench --model $good --ablation --op-opt off
# the executors give the same tokens
e=$("$bin" generate --model $good --tokens 3,1,4 -n 6 --exec eager 2>/dev/null)
g=$("$bin" generate --model $good --tokens 3,1,4 -n 6 --exec graph --streams 2 2>/dev/null)
[ -n "$e" ] && [ "$e" = "$g" ] && ok || bad "eager ($e) and graph ($g) generate differently"
"$bin" generate --model $good --tokens 5,6,7 -n 3 --quant int8 2>/dev/null | grep -qE '^[0-9]+(,[0-9]+){2}$' && ok || bad "generate --quant int8"
"$bin" generate --model $good --tokens 5,6,7 -n 3 --quant int4 2>/dev/null | grep -qE '^[0-9]+(,[0-9]+){2}$' && ok || bad "generate --quant int4"
"$bin" generate --model $good --tokens 5,6,7 -n 3 --quant int4 --quant-head int4 2>/dev/null | grep -qE '^[0-9]+(,[0-9]+){2}$' && ok || bad "generate --quant int4 --quant-head int4"

mk() { rm -rf "$scratch/$1"; cp -r $good "$scratch/$1"; chmod -R u+w "$scratch/$1"; }
mk shape; sed -i 's/"intermediate_size": 320/"intermediate_size": 300/' "$scratch/shape/config.json"
expect 1 "model.layers.0.mlp.gate_proj.weight: shape [320,128] expected [300,128]" -- "$bin" generate --model "$scratch/shape" --tokens 1
mk badjson; printf '{"hidden_size": 12,' > "$scratch/badjson/config.json"
expect 1 "config.json" -- "$bin" generate --model "$scratch/badjson" --tokens 1
mk group; sed -i 's/"topk_group": 2/"topk_group": 9/' "$scratch/group/config.json"
expect 1 "topk_group" -- "$bin" generate --model "$scratch/group" --tokens 1
mk trunc; f="$scratch/trunc/model.safetensors"; head -c $(( $(stat -c %s "$f") / 2 )) "$f" > "$f.tmp"; mv "$f.tmp" "$f"
expect 1 "model.safetensors" -- "$bin" generate --model "$scratch/trunc" --tokens 1
mk tiny; head -c 5 "$scratch/tiny/model.safetensors" > "$scratch/tiny/x"; mv "$scratch/tiny/x" "$scratch/tiny/model.safetensors"
expect 1 "model.safetensors" -- "$bin" generate --model "$scratch/tiny" --tokens 1
mk noweights; rm "$scratch/noweights/model.safetensors"
expect 1 "safetensors" -- "$bin" generate --model "$scratch/noweights" --tokens 1

# generation is deterministic: greedy, and sampling with a seed
a=$("$bin" generate --model $good --tokens 3,1,4,1,5 -n 8 2>/dev/null)
b=$("$bin" generate --model $good --tokens 3,1,4,1,5 -n 8 --threads 1 2>/dev/null)
[ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "greedy differs across thread counts: '$a' vs '$b'"
a=$("$bin" generate --model $good --tokens 3,1,4 -n 8 --temperature 0.9 --top-p 0.9 --top-k 40 --seed 5 --ignore-eos 2>/dev/null)
b=$("$bin" generate --model $good --tokens 3,1,4 -n 8 --temperature 0.9 --top-p 0.9 --top-k 40 --seed 5 --ignore-eos 2>/dev/null)
[ "$(tr ',' '\n' <<<"$a" | wc -l)" -eq 8 ] && [ "$a" = "$b" ] && ok || bad "seeded sampling: '$a' vs '$b'"

finish
