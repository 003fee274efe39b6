#!/usr/bin/env bash
# Install the Debian packages dsinfer builds and tests with (Debian 12).
set -euo pipefail
pkgs=(build-essential cmake pkg-config libcjson-dev libpcre2-dev libmicrohttpd-dev libopenblas-dev
      clang libclang-rt-14-dev nodejs npm)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
