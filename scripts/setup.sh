#!/usr/bin/env bash
# Installs what qkv needs from Debian 12's packages (only the missing ones) and builds it into build/.
# Usage: bash scripts/setup.sh            (Release build, portable: no -march=native)
# Environment: QKV_BUILD_DIR (default build), QKV_CMAKE_ARGS (extra cmake arguments).
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(build-essential cmake ninja-build pkg-config git
          libblis-dev nlohmann-json3-dev libcli11-dev libpcre2-dev libicu-dev libcpp-httplib-dev
          libgtest-dev libgmock-dev libbenchmark-dev
          clang-14 libclang-rt-14-dev libomp-14-dev   # fuzz/ (libFuzzer), see scripts/test.sh
          curl chromium                               # tests/cli/serve_test.sh, tests/web (Playwright)
          libopenmpi-dev openmpi-bin                  # qkv sweep over MPI ranks (docs/sweep.md)
          python3-numpy python3-pytest python3-torch) # tests/python (the activation-store reader)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node.js and npm for the browser tests: Debian's packages only where no node/npm is on PATH already
# (a machine may carry another Node.js build, which Debian's npm package conflicts with).
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if ((${#missing[@]})); then
  echo "qkv setup: installing ${missing[*]}" >&2
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

build=${QKV_BUILD_DIR:-build}
# shellcheck disable=SC2086
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release ${QKV_CMAKE_ARGS:-} >/dev/null
cmake --build "$build" -j "$(nproc)"
echo "qkv setup: built $build/qkv" >&2
