#!/usr/bin/env bash
# The whole test suite (ctest). `--asan` builds with ASan+UBSan into
# build-asan and runs the suite there. Extra arguments go to ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=build; cfg=(-DCMAKE_BUILD_TYPE=Release)
if [ "${1:-}" = "--asan" ]; then
  shift; dir=build-asan; cfg=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DDSINFER_SANITIZE=ON)
fi
[ -n "${CI:-}" ] && cfg+=(-DDSINFER_WERROR=ON)
cmake -S . -B "$dir" "${cfg[@]}" >/dev/null
cmake --build "$dir" -j"$(nproc)"
cd "$dir" && ctest --output-on-failure "$@"
