#!/usr/bin/env bash
# Prefill, qkv against llama.cpp on the same GGUF files, both x86 ISAs, one markdown row per type and ISA
# (issue 27 item 4; docs/performance.md holds the numbers). For each file: `qkv bench forward --model F --T N`
# (the last position's logits, as qkv run) with QKV_ISA=avx512 and avx2, and bench/llama_cpp_prefill.mjs
# from a directory with all of node-llama-cpp's CPU libraries and from its AVX2-only copy (see that script).
# Usage: bench/prefill_vs_llama_cpp.sh QKV LLAMA_DIR LLAMA_AVX2_DIR "F1.gguf F2.gguf ..." [T=512] [threads=2] [repeats=5]
# Run it on a quiet machine, under the bench lock when one is shared: flock /tmp/qkv-bench.lock bench/…
set -euo pipefail
qkv=$1 llama=$2 llama_avx2=$3 files=$4 T=${5:-512} threads=${6:-2} reps=${7:-5}
here=$(cd "$(dirname "$0")" && pwd)
cp "$here/llama_cpp_prefill.mjs" "$llama/" && cp "$here/llama_cpp_prefill.mjs" "$llama_avx2/"
fma() { QKV_ISA=$1 QKV_THREADS=$threads "$qkv" bench peak --isa "$1" --no-bandwidth --peak 1 --json 2>/dev/null |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["fma"][0]["gflops"])'; }
declare -A peak=([avx512]=$(fma avx512) [avx2]=$(fma avx2))
echo "FMA peak, $threads threads: avx512 ${peak[avx512]} GFLOP/s, avx2 ${peak[avx2]} GFLOP/s; load $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| file | ISA | qkv ms | GFLOP/s | % of FMA peak | llama.cpp ms | llama.cpp / qkv |"
echo "|---|---|---|---|---|---|---|"
for f in $files; do
  for isa in avx512 avx2; do
    dir=$llama; [ "$isa" = avx2 ] && dir=$llama_avx2
    q=$(QKV_ISA=$isa QKV_THREADS=$threads "$qkv" bench forward --model "$f" --T "$T" --repeats "$reps" --peak 1 \
        --fma-peak "${peak[$isa]}" --json 2>/dev/null)
    l=$(node "$dir/llama_cpp_prefill.mjs" "$f" "$T" "$threads" "$reps")
    python3 - "$f" "$isa" "$q" "$l" <<'PY'
import json, os, sys
f, isa, q, l = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4])
lib = ",".join(l["cpu_variants"]) if len(l["cpu_variants"]) == 1 else "all CPU libraries"
print(f"| {os.path.basename(f)} | {isa} ({q.get('projection_gemm', 'BLIS ' + q['blis_kernel'])}; llama.cpp {lib}) | "
      f"{q['median_ms']:.0f} | {q['gflops']:.1f} | {100 * q['fraction_of_fma_peak']:.0f} % | {l['median_ms']:.0f} | "
      f"{l['median_ms'] / q['median_ms']:.2f} |")
PY
  done
done
