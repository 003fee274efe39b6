#!/usr/bin/env bash
# The layer rule: a file under src/LAYER/ includes only headers of its own
# layer or of the layers below it, in this order (the architecture's):
#   base tensor kernels model graph kv dist tokenizer engine server tools
# The public header include/dsinfer.h is the model layer's and above (it
# declares the model, engine and tokenizer API those layers implement);
# include/dsinfer_status.h (status codes, dsi_err) is every layer's.
# Usage: check_layers.sh [SRC_DIR] (default: src/ of this checkout).
# Prints every violation as FILE:LINE: LAYER includes HEADER, and exits 1
# if there is one.
set -euo pipefail
src=${1:-"$(dirname "$0")/../src"}
layers=(base tensor kernels model graph kv dist tokenizer engine server tools)
rank() {
  local i
  for i in "${!layers[@]}"; do [ "${layers[$i]}" = "$1" ] && { echo "$i"; return; }; done
  echo -1
}
model_rank=$(rank model)
bad=0 files=0
while IFS= read -r f; do
  rel=${f#"$src"/}
  layer=${rel%%/*}
  own=$(rank "$layer")
  if [ "$own" -lt 0 ]; then
    echo "$f: not in a layer folder (${layers[*]})"
    bad=1
    continue
  fi
  files=$((files + 1))
  while IFS=: read -r line inc; do
    hdr=$(sed -E 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"([^"]+)".*/\1/' <<<"$inc")
    case "$hdr" in
      dsinfer_status.h) continue ;;
      dsinfer.h) need=$model_rank ;;
      */*) need=$(rank "${hdr%%/*}") ;;
      *) continue ;; # a header beside the file: its own layer
    esac
    if [ "$need" -gt "$own" ]; then
      echo "$f:$line: $layer includes $hdr"
      bad=1
    fi
  done < <(grep -n -E '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" || true)
done < <(find "$src" -name '*.[ch]' | sort)
if [ "$bad" -ne 0 ]; then
  echo "check_layers: a file includes a layer above its own (order: ${layers[*]})"
  exit 1
fi
echo "check_layers: $files files, every include at or below its layer"
