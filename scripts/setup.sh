#!/usr/bin/env bash
# Installs what building and running qkv needs (the CLI, `qkv serve`, the Python module) from Debian 12's
# packages — only the missing ones — and builds those targets into build/. Nothing test-only: the test
# command (scripts/test.sh) installs and builds the rest.
# Usage: bash scripts/setup.sh            (Release build, portable: no -march=native)
#        bash scripts/setup.sh --packages (prints the Debian packages it installs, one a line, and exits:
#                                          scripts/test.sh installs them with its own in one apt call)
# Environment: QKV_BUILD_DIR (default build), QKV_CMAKE_ARGS (extra cmake arguments).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/apt.sh

# The compiler and build tools; BLIS (GEMM), nlohmann-json, CLI11, PCRE2 + ICU (tokenizers), cpp-httplib
# (qkv serve); pybind11 + python3-dev + NumPy (`import qkv`).
packages=(build-essential cmake ninja-build pkg-config
          libblis-dev nlohmann-json3-dev libcli11-dev libpcre2-dev libicu-dev libcpp-httplib-dev
          python3-dev pybind11-dev python3-numpy)
if [ "${1:-}" = --packages ]; then
  printf '%s\n' "${packages[@]}"
  exit 0
fi
qkv_apt_install "${packages[@]}"

build=${QKV_BUILD_DIR:-build}
# Tests and benchmarks are built by scripts/test.sh (which turns them on in the same build directory).
tests=OFF
[ -f "$build/CMakeCache.txt" ] && grep -q '^QKV_BUILD_TESTS:BOOL=ON' "$build/CMakeCache.txt" && tests=ON
# shellcheck disable=SC2086
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DQKV_BUILD_TESTS=$tests -DQKV_BUILD_BENCH=$tests \
  ${QKV_CMAKE_ARGS:-} >/dev/null
targets=(qkv_cli)
grep -q '^QKV_PYTHON:BOOL=ON' "$build/CMakeCache.txt" && targets+=(qkv_python)
cmake --build "$build" -j "$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)" --target "${targets[@]}"
echo "qkv setup: built $build/qkv" >&2

# ---- python ----
# `import qkv` in a new shell: a .pth file in Debian python's site-packages naming this build's python/
# directory (the package qkv/ and its extension). It is for /usr/bin/python3; a python3 on PATH of the
# same version (e.g. pyenv's) gets the same file when it can import numpy. (`pip install .` installs a
# copy instead: docs/python.md.)
if [ -d "$build/python/qkv" ]; then
  pydir=$(cd "$build/python" && pwd)
  for py in /usr/bin/python3 $(command -v python3 || true); do
    [ -x "$py" ] || continue
    if ! "$py" -c 'import numpy' 2>/dev/null; then
      echo "qkv setup: $py has no numpy: use /usr/bin/python3 for 'import qkv'" >&2
      continue
    fi
    [ "$("$py" -c 'import sys; print(sys.version_info[:2])')" = "$(/usr/bin/python3 -c 'import sys; print(sys.version_info[:2])')" ] || continue
    site=$("$py" -c 'import site, sys; print(site.getsitepackages()[0])')
    $QKV_SUDO mkdir -p "$site" && echo "$pydir" | $QKV_SUDO tee "$site/qkv.pth" >/dev/null &&
      echo "qkv setup: $py imports qkv from $pydir (via $site/qkv.pth)" >&2
  done
fi
