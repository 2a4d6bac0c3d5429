#!/usr/bin/env bash
# The kernel paths this CPU did not choose, tested end to end: the suite runs on the CPU's best path
# (avx512, avx2 or neon), so the others' attention, norms, rotary, dequantization, packed GEMM and BLIS
# kernel would meet the engine's references only on another machine. This reruns the engine's tests that
# compare against something qkv did not write (the float64 PyTorch fixtures of every family, llama.cpp's
# distributions, central differences, the bundled models' recorded numbers) with QKV_ISA forcing each
# other path the CPU can run (portable always; avx2 on an AVX-512 CPU).
# Usage: tests/paths/run.sh BUILD_DIR   (ctest's environment as scripts/test.sh sets it)
set -euo pipefail
build=${1:?usage: tests/paths/run.sh BUILD_DIR}
qkv=$build/qkv
engine='^(Fixtures/Reference|Fixtures/PatchingReference|Bundled/Reference|Families|FamilyExperiments|ModelFidelity'
engine+='|InferenceFidelity|SublayerFidelity|GgufFamily|GgufGpt2Family|Generate|GenerateBatch|Batch|KvBatch'
engine+='|BundledLlama|BundledModel|ModelGradients|LmBackward|ActivationGrads|QMatmul|QPanel|All/PatchingFamilies'
engine+='|TourFamilies|Gpt2)\.|^cli\.llama_peer_test$'
# Which paths this CPU can run, each probed once (qkv names a path it cannot run and exits 2).
declare -A can=()
for p in avx512 avx2 neon portable; do
  QKV_ISA=$p "$qkv" bench peak --isa "$p" --no-bandwidth --peak 1 --json >/dev/null 2>&1 && can[$p]=1
done
best=""
for p in avx512 avx2 neon; do [ -n "${can[$p]:-}" ] && { best=$p; break; }; done
status=0 tested=()
for p in avx2 portable; do
  [ "$p" != "$best" ] && [ -n "${can[$p]:-}" ] || continue
  tested+=("$p")
  echo "qkv test: the engine's tests with QKV_ISA=$p (this CPU's best: ${best:-portable})" >&2
  QKV_ISA=$p ctest --test-dir "$build" --output-on-failure --no-tests=error -j "$(env -u OMP_NUM_THREADS nproc)" \
    -R "$engine" || status=1
done
[ ${#tested[@]} -gt 0 ] || { echo "qkv test: no other kernel path to test on this CPU" >&2; exit 1; }
exit $status
