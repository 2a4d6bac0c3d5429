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
          python3-torch                               # tests/python (the activation-store reader)
          # ---- python (issue 17): `import qkv` (python/), its tests and the notebook (examples/) ----
          python3-dev pybind11-dev python3-numpy python3-pytest jupyter-nbconvert python3-ipykernel)
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

# ---- python (issue 17) ----
# `import qkv` in a new shell: a .pth file in Debian python's site-packages naming this build's python/
# directory (the package qkv/ and its extension). It is for /usr/bin/python3; a python3 on PATH of the
# same version (e.g. pyenv's) gets the same file when it can import numpy.
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
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo mkdir -p "$site" && echo "$pydir" | $sudo tee "$site/qkv.pth" >/dev/null &&
      echo "qkv setup: $py imports qkv from $pydir (via $site/qkv.pth)" >&2
  done
fi
# ---- end python ----
