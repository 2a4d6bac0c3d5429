#!/usr/bin/env bash
# qkv bench as a user runs it, on tiny shapes (the numbers are not checked, only what is reported):
# the attention path it ran (forced with --path; a path this CPU cannot run is a usage error), the
# per-op profile of the forward, and exit codes.
# Usage: bench_test.sh QKV_BINARY SOURCE_DIR
set -uo pipefail
qkv=$1
source "$(dirname "$0")/lib.sh"
test_label=bench
check_show=cat
# --peak skips the 2048³ SGEMM peak measurement.
check attention-path 0 'attention path (portable|avx2|avx512|neon)' -- bench attention --T 64 --H 2 --repeats 1 --peak 100
check attention-portable-json 0 '"attention_path": "portable"' -- bench attention --T 33 --H 2 --dh 7 --repeats 1 --peak 100 --path portable --json
check attention-backward 0 '"case": "attention fwd\+bwd"' -- bench attention --T 50 --H 3 --backward --repeats 1 --peak 100 --path portable --json
check bad-path 2 "^qkv: error: flash attention path 'sse': expected auto, portable, avx2, avx512 or neon" -- bench attention --T 8 --repeats 1 --peak 100 --path sse
# QKV_ISA picks the kernel path of the whole process; an unknown name or one this CPU cannot run: exit 2.
QKV_ISA=portable check isa-portable 0 '"attention_path": "portable"' -- bench attention --T 33 --H 2 --repeats 1 --peak 100 --json
QKV_ISA=sse check bad-isa 2 "^qkv: error: QKV_ISA=sse: expected auto, portable, avx2, avx512 or neon" -- bench attention --T 8 --repeats 1 --peak 100
# Some path is always missing here: neon on x86-64, the x86 ones on aarch64.
if [ "$(uname -m)" = x86_64 ]; then missing=neon; else missing=avx2; fi
QKV_ISA=$missing check unsupported-isa 2 "^qkv: error: QKV_ISA=$missing: this CPU cannot run the $missing kernels" -- bench attention --T 8 --repeats 1 --peak 100
check unsupported-path 2 "^qkv: error: flash attention: the $missing path cannot run on this CPU" -- bench attention --T 8 --repeats 1 --peak 100 --path $missing
# bench peak: the FMA loop per ISA and the triad, their keys in the JSON; bad ISAs and options exit 2.
out=$("$qkv" bench peak --isa portable --repeats 1 --array-mib 4 --peak 100 --json 2>/dev/null); rc=$?
if [ $rc -ne 0 ]; then bad "peak-json: exit $rc"; else
  lacks=""
  for key in fma gflops lanes accumulators bandwidth_gbps bandwidth_best_gbps triad_array_mib isa blis_kernel \
      fma_peak_gflops fraction_of_fma_peak sgemm_peak_gflops threads; do
    grep -q "\"$key\":" <<<"$out" || lacks+=" $key"
  done
  # the FMA rate and the bandwidth are positive numbers
  # (under ASan both are small: 0.69 GB/s was seen, so a number below 1 must pass)
  python3 -c 'import json,sys; j=json.load(sys.stdin); sys.exit(0 if all(f["gflops"] > 0 for f in j["fma"]) else 1)' \
    <<<"$out" || lacks+=" (gflops > 0)"
  python3 -c 'import json,sys; sys.exit(0 if json.load(sys.stdin)["bandwidth_gbps"] > 0 else 1)' <<<"$out" ||
    lacks+=" (bandwidth > 0)"
  if [ -z "$lacks" ]; then ok "peak-json"; else bad "peak-json: lacks$lacks"; echo "$out"; fi
fi
check peak-text 0 'GFLOP/s' -- bench peak --isa portable --repeats 1 --no-bandwidth --peak 100
check peak-bad-isa 2 "^qkv: error: flash attention path 'sse': expected auto, portable, avx2, avx512 or neon" -- bench peak --isa sse --peak 100
check peak-auto-isa 2 "^qkv: error: bench peak: --isa names avx512, avx2, neon or portable, not auto" -- bench peak --isa auto --peak 100
check peak-unsupported-isa 2 "^qkv: error: bench peak: this CPU cannot run the $missing FMA loop" -- bench peak --isa $missing --peak 100
check peak-bad-repeats 2 "^qkv: error: .*--repeats" -- bench peak --repeats 0 --peak 100
check peak-bad-array 2 "^qkv: error: .*--array-mib" -- bench peak --array-mib 0 --peak 100
QKV_ISA=sse check peak-bad-qkv-isa 2 "^qkv: error: QKV_ISA=sse: expected auto, portable, avx2, avx512 or neon" -- bench peak --peak 100
# The projections' GEMM: qkv's packed one on the x86 vector paths, BLIS with QKV_GEMM=blis or on the portable
# path; any other QKV_GEMM is a usage error, and bench gemm --backend packed needs a path with the kernel.
QKV_GEMM=blis check gemm-blis-json 0 '"projection_gemm": "BLIS, kernel [a-z0-9]+"' -- bench attention --T 16 --H 1 --repeats 1 --peak 100 --fma-peak 100 --json
QKV_ISA=portable check gemm-portable-json 0 '"projection_gemm": "BLIS, kernel generic"' -- bench attention --T 16 --H 1 --repeats 1 --peak 100 --fma-peak 100 --json
QKV_GEMM=fast check gemm-bad-env 2 "^qkv: error: QKV_GEMM=fast: expected packed or blis" -- bench attention --T 16 --H 1 --repeats 1 --peak 100 --fma-peak 100 --json
QKV_ISA=portable check gemm-packed-portable 2 "^qkv: error: bench gemm: --backend packed needs the avx512 or avx2 path \(this is portable\)" -- bench gemm --backend packed --Ts 8 --repeats 1 --fma-peak 100
if grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo; then
  QKV_ISA=avx2 check gemm-packed-avx2 0 '"projection_gemm": "qkv packed, avx2 tiles of 4 × 24"' -- bench attention --T 16 --H 1 --repeats 1 --peak 100 --fma-peak 100 --json
fi
# Every bench JSON names the ISA, BLIS's kernel and the fraction of the FMA peak.
check attention-isa-json 0 '"blis_kernel": "[a-z0-9]+"' -- bench attention --T 16 --H 1 --repeats 1 --peak 100 --fma-peak 100 --json
check attention-fma-fraction 0 '"fraction_of_fma_peak": [0-9]' -- bench attention --T 16 --H 1 --repeats 1 --peak 100 --fma-peak 100 --json
# QKV_ISA picks BLIS's kernel too: avx2 -> an AVX2 config (zen3 on AMD, haswell elsewhere), avx512 -> skx
# (zen3 on AMD family 19h, Zen 4, whose 512-bit operations are two 256-bit halves), portable -> generic;
# a BLIS_ARCH_TYPE the user set wins (3 is haswell in BLIS 0.9's enum).
if grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo; then
  QKV_ISA=avx2 check isa-avx2-blis 0 '"blis_kernel": "(zen3|haswell)"' -- bench attention --T 16 --H 1 --repeats 1 --peak 100 --fma-peak 100 --json
  QKV_ISA=avx2 check isa-avx2-gemm 0 '"blis_kernel": "(zen3|haswell)"' -- bench gemm --Ts 8 --repeats 1 --fma-peak 100 --json
  QKV_ISA=avx2 check isa-avx2-isa 0 '"isa": "avx2"' -- bench gemm --Ts 8 --repeats 1 --fma-peak 100 --json
fi
if grep -qw avx512f /proc/cpuinfo && grep -qw avx512bw /proc/cpuinfo && grep -qw avx512vl /proc/cpuinfo; then
  family=$(awk -F: '/^cpu family/ {print $2 + 0; exit}' /proc/cpuinfo)
  want=skx; grep -q AuthenticAMD /proc/cpuinfo && [ "$family" = 25 ] && want=zen3
  QKV_ISA=avx512 check isa-avx512-blis 0 "\"blis_kernel\": \"$want\"" -- bench attention --T 16 --H 1 --repeats 1 --peak 100 --fma-peak 100 --json
  BLIS_ARCH_TYPE=3 QKV_ISA=avx512 check blis-arch-type-wins 0 '"blis_kernel": "haswell"' -- bench attention --T 16 --H 1 --repeats 1 --peak 100 --fma-peak 100 --json
fi
QKV_ISA=portable check isa-portable-blis 0 '"blis_kernel": "generic"' -- bench attention --T 16 --H 1 --repeats 1 --peak 100 --fma-peak 100 --json
# bench forward: --all-logits is for a checkpoint (--model/--arch); the GPT-2 in memory has --last-only.
check forward-all-logits-usage 2 "^qkv: error: bench forward: --all-logits is for --model/--arch" -- bench forward --T 8 --repeats 1 --peak 100 --fma-peak 100 --all-logits
# bench forward --model: a real checkpoint (the bundled Llama as a q4_0 GGUF) as qkv run does it, and what ran.
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
if "$qkv" convert --to gguf --type q4_0 "$2/models/induction-llama" "$tmp/il.gguf" >/dev/null 2>&1; then
  check forward-model-json 0 '"logits": "last"' -- bench forward --model "$tmp/il.gguf" --T 40 --repeats 1 --peak 100 --fma-peak 100 --json
  check forward-model-types 0 '"Q4_0": [0-9]+' -- bench forward --model "$tmp/il.gguf" --T 40 --repeats 1 --peak 100 --fma-peak 100 --json
  check forward-model-all 0 '"logits": "all"' -- bench forward --model "$tmp/il.gguf" --T 40 --repeats 1 --peak 100 --fma-peak 100 --all-logits --json
else bad "forward-model: qkv convert of models/induction-llama failed"; fi
# --T is bounded by the model's context, not by GPT-2's 1024: a Llama of 2048 positions takes 1500 tokens.
check forward-T-gpt2-context 2 '^qkv: error: bench forward: --T must be in \[1, 1024\]' -- bench forward --T 1025 --repeats 1 --peak 100 --fma-peak 100
# --arch refuses before it writes its random checkpoint (a 1.1 B Llama; GPT-2 small here).
check forward-T-arch-context 2 '^qkv: error: bench forward: --T must be in \[1, 1024\]' -- bench forward --arch gpt2 --T 1025 --repeats 1 --peak 100 --fma-peak 100
out=$("$qkv" bench forward --arch gpt2 --T 1025 --repeats 1 --peak 100 --fma-peak 100 2>&1)
if grep -q "writing a random" <<<"$out"; then bad "forward-T-arch-before-write: the checkpoint was written first"; else ok "forward-T-arch-before-write"; fi
if "$qkv" init --arch llama --preset tiny --set max_position_embeddings=2048 --out "$tmp/l2k" >/dev/null 2>&1; then
  check forward-T-model-context 0 '"T": 1500' -- bench forward --model "$tmp/l2k" --T 1500 --repeats 1 --peak 100 --fma-peak 100 --json
  check forward-T-past-context 2 '^qkv: error: bench forward: --T must be in \[1, 2048\]' -- bench forward --model "$tmp/l2k" --T 2049 --repeats 1 --peak 100 --fma-peak 100
else bad "forward-T-model-context: qkv init --arch llama failed"; fi
# The profile: every op of the forward, the GEMMs and attention among them.
out=$("$qkv" bench forward --T 16 --repeats 1 --peak 100 --profile 2>&1); rc=$?
if [ $rc -ne 0 ]; then bad "forward-profile: exit $rc"; echo "$out"; else
  missing_ops=""
  for op in embedding norm "q, k, v projections" "attention \(flash\)" W_O "mlp block" "logits \(unembedding\)"; do
    grep -qE "^$op +[0-9]" <<<"$out" || missing_ops+=" [$op]"
  done
  if [ -z "$missing_ops" ]; then ok "forward-profile"; else bad "forward-profile: no row for$missing_ops"; echo "$out"; fi
fi
check forward-profile-json 0 '"fraction_of_forward"' -- bench forward --T 8 --repeats 1 --peak 100 --profile --json
exit $fail
