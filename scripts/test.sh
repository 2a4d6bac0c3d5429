#!/usr/bin/env bash
# Sets up (scripts/setup.sh) and runs the whole test suite with CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
build=${QKV_BUILD_DIR:-build}
ctest --test-dir "$build" --output-on-failure -j "$(nproc)"
