#!/usr/bin/env bash
# Sets up (scripts/setup.sh, then the test-only packages) and runs every test, stage by stage:
#   1. the normal (Release) build with tests and benchmarks: every GoogleTest, CLI and fuzz-replay test;
#   1b. on that build: `import qkv`'s pytest suite, the notebooks executed, `pip install .` into a fresh venv
#       and imported from there, and tests/package/ (a consumer of `cmake --install`) built and run
#       (QKV_TEST_PYTHON=0 skips);
#   2. the bundled models' recipes rerun (tests/train/retrain_bundled.sh and retrain_llama.sh): they must
#      reproduce models/induction and models/induction-llama byte for byte with the same thread count;
#   3. one clang build with ASan + UBSan and libFuzzer's coverage (build-san: -O1, line tables; no Python, no
#      benchmarks): the whole suite under the sanitizers, then every libFuzzer target for QKV_FUZZ_SECONDS
#      (default 45) from the same build;
#   4. the attention kernels cross-compiled for aarch64 and checked under qemu-aarch64 (tests/arm/run.sh).
# Environment: QKV_BUILD_DIR (default build); QKV_TEST_PYTHON=0 / QKV_TEST_RETRAIN=0 / QKV_TEST_SANITIZE=0 /
# QKV_TEST_FUZZ=0 / QKV_TEST_ARM=0 skip a stage (CI runs them all); QKV_FUZZ_SECONDS.
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
stage_start=$t0
stage() {  # prints how long the stage that just ended took
  local now
  now=$(date +%s)
  echo "qkv test: $1 $((now - stage_start))s" >&2
  stage_start=$now
}

bash scripts/setup.sh
stage "setup (the main job's packages and build)"
source scripts/apt.sh
# Test-only packages, in one apt call: GoogleTest/Benchmark, clang 14 with libFuzzer and its OpenMP, the
# browser tests' Chromium, Open MPI (qkv sweep over ranks), PyTorch (float64 references), pytest and
# nbconvert, venv + setuptools + wheel (`pip install .`), and the aarch64 cross compiler + qemu (stage 4).
test_packages=(libgtest-dev libgmock-dev libbenchmark-dev clang-14 libclang-rt-14-dev libomp-14-dev
               curl chromium libopenmpi-dev openmpi-bin python3-torch python3-pytest jupyter-nbconvert
               python3-ipykernel python3-venv python3-setuptools python3-wheel)
[ "${QKV_TEST_ARM:-1}" != 0 ] && test_packages+=(g++-aarch64-linux-gnu qemu-user libc6-dev-arm64-cross)
# Node.js and npm for the browser and peer tests: Debian's only where none is on PATH already (a machine may
# carry another Node.js build, which Debian's npm package conflicts with).
command -v node >/dev/null 2>&1 || test_packages+=(nodejs)
command -v npm >/dev/null 2>&1 || test_packages+=(npm)
qkv_apt_install "${test_packages[@]}"
stage "test packages"

build=${QKV_BUILD_DIR:-build}
cmake -S . -B "$build" -DQKV_BUILD_TESTS=ON -DQKV_BUILD_BENCH=ON >/dev/null
cmake --build "$build" -j "$(nproc)"
stage "normal build (tests and benchmarks)"
# ctest runs $(nproc) tests at once: one thread each, and OpenMP threads that sleep instead of spinning,
# so tests do not oversubscribe the cores (spinning OpenMP/BLIS teams stall for seconds under contention).
export QKV_THREADS=${QKV_THREADS:-1} OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
# A failing stage does not stop the later ones (all failures show in one run); the exit status does.
status=0
ctest --test-dir "$build" --output-on-failure -j "$(nproc)" || status=1
stage "normal suite"

# ---- python and package: the pytest suite of `import qkv`, the notebooks executed (a cell that errors
# fails it), and a separate CMake project built against `cmake --install` of this build ----
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
    for nb in examples/*.ipynb; do
      PYTHONPATH="$PWD/$build/python" jupyter nbconvert --to notebook --execute "$nb" \
        --ExecutePreprocessor.timeout=600 --output-dir "$nbdir" --output "$(basename "$nb" .ipynb).executed.ipynb" ||
        status=1
    done
    rm -rf "$nbdir"
    # `pip install .` (setup.py: setuptools driving CMake) into a fresh venv that sees Debian's NumPy, with no
    # index and no build isolation, reusing this build (only qkv_python is brought up to date); the module
    # must import from the venv, not from the build or a .pth.
    venv=$(mktemp -d)
    if /usr/bin/python3 -m venv --system-site-packages "$venv/venv" &&
      QKV_BUILD_DIR="$PWD/$build" "$venv/venv/bin/pip" install -q --no-build-isolation --no-index --no-deps . &&
      (cd "$venv" && env -u PYTHONPATH "$venv/venv/bin/python" -c '
import sys, qkv
assert qkv.__file__.startswith(sys.prefix), qkv.__file__
m = qkv.load()
assert m.W_Q.shape[0] == m.cfg.n_layers and len(m.run_with_cache(m.tokenize("ab"))[1]) > 10
print("qkv test: pip install . ->", qkv.__file__)'); then :; else
      echo "qkv test: pip install . into a venv failed" >&2
      status=1
    fi
    rm -rf "$venv"
  fi
  bash tests/package/run.sh "$build" || status=1
  stage "python (pytest, notebooks) and the installed package's consumer"
fi

if [ "${QKV_TEST_RETRAIN:-1}" != 0 ]; then
  bash tests/train/retrain_bundled.sh "$build/qkv" "$PWD" || status=1
  stage "bundled model (models/induction) retrained and compared"
  bash tests/train/retrain_llama.sh "$build/qkv" "$PWD" || status=1
  stage "bundled Llama-shaped model (models/induction-llama) retrained and compared"
fi

# ---- stage 3: one sanitizer build serves the suite and the fuzzers ----
san=build-san
if [ "${QKV_TEST_SANITIZE:-1}" != 0 ] || [ "${QKV_TEST_FUZZ:-1}" != 0 ]; then
  CC=clang-14 CXX=clang++-14 cmake -S . -B "$san" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" -DQKV_SANITIZE=ON -DQKV_FUZZ=ON \
    -DQKV_PYTHON=OFF -DQKV_BUILD_BENCH=OFF >/dev/null
  cmake --build "$san" -j "$(nproc)"
  stage "sanitizer build (clang, ASan + UBSan + libFuzzer coverage)"
fi
if [ "${QKV_TEST_SANITIZE:-1}" != 0 ]; then
  # Leaks are checked (suppressions file for third-party runtimes only); UBSan stops at the first report.
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1 \
  LSAN_OPTIONS=suppressions=$PWD/tests/robustness/sanitizers/lsan.supp:print_suppressions=0 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir "$san" --output-on-failure -j "$(nproc)" --timeout 600 || status=1
  stage "ASan + UBSan suite"
fi
if [ "${QKV_TEST_FUZZ:-1}" != 0 ]; then
  bash fuzz/run.sh "$san" || status=1
  stage "fuzzing"
fi

if [ "${QKV_TEST_ARM:-1}" != 0 ]; then
  bash tests/arm/run.sh build-arm || status=1
  stage "aarch64 kernels under qemu"
fi
echo "qkv test: $([ $status = 0 ] && echo 'all stages passed' || echo 'FAILED') in $(($(date +%s) - t0))s" >&2
exit $status
