#!/usr/bin/env bash
# tests/fuzz: build the fuzz targets with clang's libFuzzer (plus ASan and
# UBSan) into BUILD_DIR and run each for SECONDS on a copy of its seed
# corpus. Fails if any target crashes, leaks or trips a sanitizer.
#   usage: tests/fuzz/run_libfuzzer.sh BUILD_DIR [SECONDS]
set -euo pipefail

if [ $# -lt 1 ]; then
  echo "usage: $0 BUILD_DIR [SECONDS]" >&2
  exit 2
fi
build=$(mkdir -p "$1" && cd "$1" && pwd)
secs=${2:-30}
src=$(cd "$(dirname "$0")/../.." && pwd)
cc=${CC:-clang}

# The library is compiled with coverage instrumentation (fuzzer-no-link) so
# that libFuzzer sees the parsers' branches, not only the target's.
cmake -S "$src" -B "$build" -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DDSINFER_FUZZ=ON -DDSINFER_SANITIZE=ON -DCMAKE_C_FLAGS="-fsanitize=fuzzer-no-link" >/dev/null

targets=()
for f in "$src"/tests/fuzz/fuzz_*.c; do
  targets+=("$(basename "$f" .c)")
done
cmake --build "$build" --target "${targets[@]}" -- -j"$(nproc)" >/dev/null

# tokens of the formats (JSON, the command line's options), to reach past the syntax sooner
dict="$build/fuzz-json.dict"
cat >"$dict" <<'DICT'
"{"
"}"
"["
"]"
":"
","
"null"
"true"
"false"
"-1"
"1e400"
"0.5"
"18446744073709551616"
"\"dtype\""
"\"shape\""
"\"data_offsets\""
"\"__metadata__\""
"\"F32\""
"\"BF16\""
"\"F16\""
"\"F8_E4M3\""
"\"I32\""
"\"I64\""
"\"weight_map\""
"\"rope_scaling\""
"\"type\""
"\"rope_type\""
"\"yarn\""
"\"factor\""
"\"original_max_position_embeddings\""
"\"mscale_all_dim\""
"\"quantization_config\""
"\"input\""
"\"instructions\""
"\"function_call\""
"\"function_call_output\""
"\"call_id\""
"\"input_text\""
"\"max_output_tokens\""
"\"format\""
"\"tool_use\""
"\"tool_result\""
"\"tool_use_id\""
"\"input_schema\""
"\"stop_sequences\""
"\"thinking\""
"\"json_schema\""
"\"properties\""
"\"required\""
"\"additionalProperties\""
"\"items\""
"\"prefixItems\""
"\"anyOf\""
"\"oneOf\""
"\"$ref\""
"\"#/$defs/\""
"\"enum\""
"\"const\""
"\"minItems\""
"\"maxLength\""
"\"pattern\""
"\"^[a-z]+$\""
"\\\\d{3}"
"(?:"
"[^"
"{2,5}"
"\\\\u00e9"
"\"minimum\""
"\"maximum\""
"\"exclusiveMinimum\""
"\"exclusiveMaximum\""
"\"format\""
"\"minProperties\""
"\"guided_regex\""
"\"guided_choice\""
"\"uniqueItems\""
"\"maxProperties\""
"\"date-time\""
"\"object\""
"\"integer\""
"\"json_schema\""
"\"guided_json\""
"\"x-dsinfer-prefix\""
"\"tool_choice\""
"\"required\""
"\"quant_method\""
"\"fp8\""
"\"fmt\""
"\"e4m3\""
"\"weight_block_size\""
"\"n_routed_experts\""
"\"n_group\""
"\"topk_group\""
"\"num_experts_per_tok\""
"\"topk_method\""
"\"noaux_tc\""
"\"group_limited_greedy\""
"\"scoring_func\""
"\"sigmoid\""
"\"softmax\""
"\"first_k_dense_replace\""
"\"q_lora_rank\""
"--model"
"--tokens"
"--temperature"
"--top-p"
"--top-k"
"--threads"
"--ctx"
"-n"
"--help"
"nan"
"inf"
"2147483647"
"4294967296"
"\x00"
DICT

failed=0
for t in "${targets[@]}"; do
  work="$build/fuzz-work/$t"
  rm -rf "$work"
  mkdir -p "$work/corpus" "$work/artifacts"
  cp "$src/tests/fuzz/corpus_$t"/* "$work/corpus/"
  echo "== $t: ${secs}s"
  if "$build/tests/$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=16384 \
       -dict="$dict" -print_final_stats=1 -artifact_prefix="$work/artifacts/" \
       "$work/corpus" >"$work/log.txt" 2>&1; then
    grep -E "^stat::number_of_executed_units|^#[0-9]+.*DONE" "$work/log.txt" | tail -2 || true
  else
    failed=1
    tail -40 "$work/log.txt"
    echo "$t: FAILED (log: $work/log.txt, inputs: $work/artifacts/)"
  fi
done
if [ "$failed" -ne 0 ]; then
  exit 1
fi
echo "libFuzzer: ${#targets[@]} targets, ${secs}s each, nothing found"
