#!/usr/bin/env bash
# Runs every libFuzzer target for a bounded time under ASan + UBSan, in parallel (one per core).
# Usage: bash fuzz/run.sh [BUILD_DIR]   (default build-fuzz; configured and built here if needed)
# Environment: QKV_FUZZ_SECONDS (default 45) per target; QKV_FUZZ_TARGETS (default: all, space-separated).
# Each fuzzer starts from fuzz/corpus/<target>/ and fuzz/regressions/<target>/ (read-only) and writes new
# inputs to BUILD_DIR/fuzz-work/<target>/. A crash, sanitizer report, timeout (-timeout=10 s per input),
# RSS over 2 GiB or single allocation over 1 GiB fails the run; the input is saved as
# BUILD_DIR/fuzz-crashes/<target>/crash-* . To keep it as a regression test: copy it to
# fuzz/regressions/<target>/ (CTest's fuzz_replay.<target> then replays it in every build).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-fuzz}
seconds=${QKV_FUZZ_SECONDS:-45}
if [ ! -f "$build/CMakeCache.txt" ]; then
  CC=clang-14 CXX=clang++-14 cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DQKV_SANITIZE=ON -DQKV_FUZZ=ON >/dev/null
fi
# The cores, counted without OMP_NUM_THREADS (GNU nproc honours it, and it is set to 1 below and by
# scripts/test.sh: the fuzzers used to run one at a time).
cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
cmake --build "$build" --target fuzz -j "$cores"
targets=${QKV_FUZZ_TARGETS:-$(ls fuzz/targets/*.cpp | xargs -n1 basename | sed 's/\.cpp$//')}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# BLIS and OpenMP: one thread, so the few forward passes the model target runs stay cheap.
export OMP_NUM_THREADS=1 BLIS_NUM_THREADS=1

run_one() {
  local t=$1 build=$2 seconds=$3
  local work=$build/fuzz-work/$t crashes=$build/fuzz-crashes/$t log=$build/fuzz-logs/$t.log
  mkdir -p "$work" "$crashes" "$(dirname "$log")"
  local seeds=(fuzz/corpus/"$t")
  [ -d fuzz/regressions/"$t" ] && seeds+=(fuzz/regressions/"$t")
  local rc=0
  "$build/fuzz/fuzz_$t" "$work" "${seeds[@]}" -max_total_time="$seconds" -rss_limit_mb=2048 \
    -malloc_limit_mb=1024 -timeout=10 -max_len=65536 -print_final_stats=1 \
    -artifact_prefix="$crashes/" >"$log" 2>&1 || rc=$?
  local execs
  execs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' || echo "?")
  if [ "$rc" -ne 0 ]; then
    echo "FAIL fuzz_$t (exit $rc, $execs executions): $(ls "$crashes" | head -3 | tr '\n' ' ')"
    grep -m5 -E 'ERROR|SUMMARY|property violated|==[0-9]+==' "$log" | sed 's/^/     /'
    echo "     log: $log; keep the input as a regression: cp $crashes/<file> fuzz/regressions/$t/"
    return 1
  fi
  echo "ok   fuzz_$t: $execs executions in ${seconds}s, corpus $(ls "$work" | wc -l) new + $(ls fuzz/corpus/"$t" | wc -l) seeds"
}
export -f run_one

start=$(date +%s)
status=0
printf '%s\n' $targets | xargs -P "$cores" -I{} bash -c 'run_one "$@"' _ {} "$build" "$seconds" || status=1
echo "qkv fuzz: $(echo $targets | wc -w) targets, ${seconds}s each, $(( $(date +%s) - start ))s wall"
exit $status
