#!/usr/bin/env bash
# Install the Debian packages dsinfer builds and tests with (Debian 12; Open
# MPI for runs across processes: a build without it runs one process). The
# build's packages are required; node, npm and chromium (test-only: the
# reference tokenizer and template renderer, the OpenAI client, the chat
# page's browser) are installed when missing, and a machine
# where that fails (NodeSource's nodejs conflicts with Debian's npm) goes on.
set -euo pipefail
pkgs=(build-essential cmake pkg-config libcjson-dev libpcre2-dev libmicrohttpd-dev libopenblas-dev
      openmpi-bin libopenmpi-dev
      clang libclang-rt-14-dev)
test_pkgs=()
command -v node >/dev/null 2>&1 || test_pkgs+=(nodejs)
command -v npm >/dev/null 2>&1 || test_pkgs+=(npm)
command -v chromium >/dev/null 2>&1 || test_pkgs+=(chromium) # the chat page's test
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
if [ ${#missing[@]} -gt 0 ] || [ ${#test_pkgs[@]} -gt 0 ]; then
  $SUDO apt-get update -qq
fi
if [ ${#missing[@]} -gt 0 ]; then
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
if [ ${#test_pkgs[@]} -gt 0 ]; then
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${test_pkgs[@]}" ||
    echo "deps: could not install ${test_pkgs[*]} (only the tests need them)" >&2
fi
