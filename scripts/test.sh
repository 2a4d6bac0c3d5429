#!/usr/bin/env bash
# Sets up (scripts/setup.sh) and runs the whole test suite with CTest, then the robustness stages of
# docs/robustness.md:
#   1. the normal (Release) build: every GoogleTest, CLI and fuzz-replay test;
#   1b. on that build: `import qkv`'s pytest suite, examples/tour.ipynb executed, and tests/package/ (a
#       consumer of `cmake --install`) built and run (QKV_TEST_PYTHON=0 skips);
#   2. the bundled models' recipes rerun (tests/train/retrain_bundled.sh, ~2 min, and
#      tests/train/retrain_llama.sh, ~2 min quiet): they must reproduce models/induction and
#      models/induction-llama — byte for byte with the same thread count;
#   3. the same suite built with ASan + UBSan (build-asan: -O1 -g, the sanitizers' usual level — about a
#      third less compile time than -O2 on these 2 cores; no benchmarks);
#   4. every libFuzzer target for QKV_FUZZ_SECONDS (default 45) under ASan + UBSan (build-fuzz, clang 14);
#   5. the attention kernels cross-compiled for aarch64 and checked under qemu-aarch64 (tests/arm/run.sh,
#      build-arm; installs g++-aarch64-linux-gnu and qemu-user when missing).
# Environment: QKV_BUILD_DIR (default build); QKV_TEST_RETRAIN=0 / QKV_TEST_SANITIZE=0 / QKV_TEST_FUZZ=0 /
# QKV_TEST_ARM=0 skip stage 2 / 3 / 4 / 5 (CI runs all five); QKV_FUZZ_SECONDS.
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
bash scripts/setup.sh
build=${QKV_BUILD_DIR:-build}
# ctest runs $(nproc) tests at once: one thread each, and OpenMP threads that sleep instead of spinning,
# so tests do not oversubscribe the cores (spinning OpenMP/BLIS teams stall for seconds under contention).
export QKV_THREADS=${QKV_THREADS:-1} OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
# A failing stage does not stop the later ones (all failures show in one run); the exit status does.
status=0
ctest --test-dir "$build" --output-on-failure -j "$(nproc)" || status=1
t1=$(date +%s)
echo "qkv test: normal build and suite $((t1 - t0))s" >&2

# ---- python and package (issue 17; owned by python/, tests/python/, examples/, tests/package/) ----
# On the normal build: the pytest suite of `import qkv`, the notebook executed (a cell that errors fails
# it), and a separate CMake project built against `cmake --install` of this build. QKV_TEST_PYTHON=0 skips.
if [ "${QKV_TEST_PYTHON:-1}" != 0 ]; then
  if ! ls "$build"/python/qkv/_qkv*.so >/dev/null 2>&1; then
    echo "qkv test: $build/python/qkv has no extension module (pybind11-dev / python3-dev missing?)" >&2
    status=1
  else
    pyrc=0
    PYTHONDONTWRITEBYTECODE=1 PYTHONPATH="$PWD/$build/python" /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/python || pyrc=$?
    # Exit 5 is "no tests collected": the suite did not run, which is a failure here.
    if [ $pyrc = 5 ]; then echo "qkv test: pytest collected no tests in tests/python" >&2; fi
    [ $pyrc = 0 ] || status=1
    nbdir=$(mktemp -d)
    PYTHONPATH="$PWD/$build/python" jupyter nbconvert --to notebook --execute examples/tour.ipynb \
      --ExecutePreprocessor.timeout=600 --output-dir "$nbdir" --output tour.executed.ipynb || status=1
    rm -rf "$nbdir"
  fi
  bash tests/package/run.sh "$build" || status=1
  t2=$(date +%s)
  echo "qkv test: python (pytest, notebook) and the installed package's consumer $((t2 - t1))s" >&2
  t1=$t2
fi
# ---- end python and package ----

if [ "${QKV_TEST_RETRAIN:-1}" != 0 ]; then
  bash tests/train/retrain_bundled.sh "$build/qkv" "$PWD" || status=1
  t2=$(date +%s)
  echo "qkv test: bundled model retrained and compared $((t2 - t1))s" >&2
  t1=$t2
  bash tests/train/retrain_llama.sh "$build/qkv" "$PWD" || status=1
  t2=$(date +%s)
  echo "qkv test: bundled Llama-shaped model (models/induction-llama) retrained and compared $((t2 - t1))s" >&2
  t1=$t2
fi

if [ "${QKV_TEST_SANITIZE:-1}" != 0 ]; then
  asan=build-asan
  cmake -S . -B "$asan" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g -DNDEBUG" \
    -DQKV_SANITIZE=ON -DQKV_PYTHON=OFF -DQKV_BUILD_BENCH=OFF >/dev/null
  cmake --build "$asan" -j "$(nproc)"
  # Leaks are checked (suppressions file for third-party runtimes only); UBSan stops at the first report.
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1 \
  LSAN_OPTIONS=suppressions=$PWD/tests/robustness/sanitizers/lsan.supp:print_suppressions=0 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir "$asan" --output-on-failure -j "$(nproc)" --timeout 600 || status=1
  t2=$(date +%s)
  echo "qkv test: ASan + UBSan build and suite $((t2 - t1))s" >&2
  t1=$t2
fi

if [ "${QKV_TEST_FUZZ:-1}" != 0 ]; then
  bash fuzz/run.sh build-fuzz || status=1
  echo "qkv test: fuzzing $(($(date +%s) - t1))s" >&2
fi

# ---- stage 5: aarch64 NEON kernels under qemu (tests/arm/run.sh) ----
if [ "${QKV_TEST_ARM:-1}" != 0 ]; then
  ta=$(date +%s)
  bash tests/arm/run.sh build-arm || status=1
  echo "qkv test: aarch64 kernels under qemu $(($(date +%s) - ta))s" >&2
fi
# ---- end of stage 5 ----
echo "qkv test: $([ $status = 0 ] && echo 'all stages passed' || echo 'FAILED') in $(($(date +%s) - t0))s" >&2
exit $status
