#!/usr/bin/env bash
# The layer rule (scripts/check_layers.sh) holds on src/, and the check
# fails, naming the file and header, on a copy of src/ given violations:
# a kernel including the graph, base including the public header, and the
# public header from the tensor layer. Args: binary (unused), scratch dir.
set -euo pipefail
scratch=$2
check=../scripts/check_layers.sh
fail() { echo "FAIL: $*"; exit 1; }

"$check" ../src || fail "src/ breaks the layer rule"

rm -rf "$scratch" && mkdir -p "$scratch"
for bad in "kernels/vec.h:graph/exec.h" "base/base.h:dsinfer.h" "tensor/mat.h:dsinfer.h" "kv/kv.c:engine/engine_testing.h"; do
  file=${bad%%:*} hdr=${bad#*:}
  rm -rf "$scratch/src" && cp -r ../src "$scratch/src"
  printf '#include "%s"\n' "$hdr" >> "$scratch/src/$file"
  if out=$("$check" "$scratch/src" 2>&1); then fail "a $file including $hdr passed the check"; fi
  grep -q "src/$file:[0-9]*: .* includes $hdr" <<<"$out" || fail "the check did not name $file including $hdr: $out"
done
# a header of its own layer, or one below, is fine
rm -rf "$scratch/src" && cp -r ../src "$scratch/src"
printf '#include "tensor/dtype.h"\n#include "kernels/gemm.h"\n' >> "$scratch/src/graph/graph.h"
"$check" "$scratch/src" >/dev/null || fail "an include of a lower layer failed the check"
echo "e2e_layers: ok"
