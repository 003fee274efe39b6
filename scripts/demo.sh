#!/usr/bin/env bash
# The main job on a built-in default: install the build's Debian packages,
# build, write the demo checkpoint (models/small) if it is missing, and
# generate from it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"
if [ ! -f models/small/config.json ]; then
  build/dsinfer mkmodel --preset small --dtype bf16 --seed 1 --out models/small
fi
build/dsinfer generate --model models/small --tokens 0,1000,2000,3000,4000 -n 32 "$@"
