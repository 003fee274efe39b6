#!/usr/bin/env bash
# Install the Debian packages dsinfer builds and tests with (Debian 12).
set -euo pipefail
pkgs=(build-essential cmake pkg-config libcjson-dev libpcre2-dev libmicrohttpd-dev libopenblas-dev
      clang libclang-rt-14-dev)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
# node and npm run the tests' reference tokenizer and template renderer; a
# machine may have them from elsewhere than Debian (whose npm conflicts with them)
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
