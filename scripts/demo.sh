#!/usr/bin/env bash
# The main job on a built-in default: install the build's Debian packages,
# build, and let models/brown — a small DeepSeek-V3-architecture model
# trained on the Brown corpus (scripts/train), committed with the
# repository — continue an English sentence. Extra arguments go to
# `dsinfer run` (e.g. --prompt "...", -n 100, --temperature 0).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"
echo "demo: models/brown (10M parameters, trained on the Brown corpus for an hour on one CPU core) continues the prompt:" >&2
build/dsinfer run --model models/brown --prompt "The jury said that" -n 80 --temperature 0.7 --top-p 0.9 --seed 1 "$@"
