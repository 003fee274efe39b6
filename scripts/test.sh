#!/usr/bin/env bash
# The whole test suite (ctest). `--asan` builds with ASan+UBSan into
# build-asan and runs the suite there; `--tsan` builds with ThreadSanitizer
# into build-tsan and runs the tests of what runs on several threads (the
# scheduler, run/chat through it, and the server's HTTP threads beside its
# loop). Tests run as many at a time as the
# machine has cores (ctest -j; each test's scratch files are its own).
# Extra arguments go to ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=build; cfg=(-DCMAKE_BUILD_TYPE=Release)
extra=()
if [ "${1:-}" = "--asan" ]; then
  shift; dir=build-asan; cfg=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DDSINFER_SANITIZE=ON)
elif [ "${1:-}" = "--tsan" ]; then
  shift; dir=build-tsan; cfg=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DDSINFER_TSAN=ON); extra=(-R "test_sched|e2e_run_chat|test_server")
  export TSAN_OPTIONS="halt_on_error=1 ${TSAN_OPTIONS:-}"
fi
[ -n "${CI:-}" ] && cfg+=(-DDSINFER_WERROR=ON)
cmake -S . -B "$dir" "${cfg[@]}" >/dev/null
cmake --build "$dir" -j"$(nproc)"
cd "$dir" && ctest --output-on-failure -j"$(nproc)" "${extra[@]}" "$@"
