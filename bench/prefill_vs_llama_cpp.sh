#!/usr/bin/env bash
# Prefill, qkv against llama.cpp on the same GGUF files, both x86 ISAs, one markdown row per type and ISA
# (issue 27 item 4; docs/performance.md holds the numbers). For each file: `qkv bench forward --model F --T N`
# (the last position's logits, as qkv run) with QKV_ISA=avx512 and avx2, and bench/llama_cpp_prefill.mjs
# from a directory with all of node-llama-cpp's CPU libraries and from its AVX2-only copy (see that script).
# Usage: bench/prefill_vs_llama_cpp.sh QKV LLAMA_DIR LLAMA_AVX2_DIR "F1.gguf F2.gguf ..." [T=512] [threads=2] [repeats=5] [rounds=1]
# Each round runs, for every file and ISA, qkv (`repeats` timed runs, their median) and then llama.cpp (the
# same) back to back; with several rounds a row gives the medians over the rounds and the median of the
# per-round ratios (with their range), so a burst of load on a shared host shifts one round's pair, not
# one side of the comparison.
# Run it on a quiet machine, under the bench lock when one is shared: flock /tmp/qkv-bench.lock bench/…
set -euo pipefail
qkv=$1 llama=$2 llama_avx2=$3 files=$4 T=${5:-512} threads=${6:-2} reps=${7:-5} rounds=${8:-1}
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "prefill_vs_llama_cpp.sh: rounds must be a positive integer, got '$rounds'" >&2; exit 2; }
for f in $files; do
  [ -r "$f" ] || { echo "prefill_vs_llama_cpp.sh: error: $f: no such readable file" >&2; exit 2; }
done
for d in "$llama" "$llama_avx2"; do
  [ -d "$d" ] && [ -w "$d" ] || { echo "prefill_vs_llama_cpp.sh: error: $d: not a writable directory (node-llama-cpp's, see llama_cpp_prefill.mjs)" >&2; exit 2; }
done
here=$(cd "$(dirname "$0")" && pwd)
cp "$here/llama_cpp_prefill.mjs" "$llama/"
cp "$here/llama_cpp_prefill.mjs" "$llama_avx2/"
# The FMA peak of one ISA on the threads used; qkv's own error passed through if it cannot measure it.
fma() {
  local out
  out=$(QKV_ISA=$1 QKV_THREADS=$threads "$qkv" bench peak --isa "$1" --no-bandwidth --peak 1 --json) ||
    { echo "prefill_vs_llama_cpp.sh: error: $qkv bench peak --isa $1 failed (above)" >&2; return 1; }
  python3 -c 'import json,sys; print(json.load(sys.stdin)["fma"][0]["gflops"])' <<<"$out"
}
declare -A peak
peak[avx512]=$(fma avx512) || exit 1
peak[avx2]=$(fma avx2) || exit 1
echo "FMA peak, $threads threads: avx512 ${peak[avx512]} GFLOP/s, avx2 ${peak[avx2]} GFLOP/s; load $(cut -d' ' -f1-3 /proc/loadavg)"
runs=$(mktemp) errs=$(mktemp)
trap 'rm -f "$runs" "$errs"' EXIT
for ((r = 1; r <= rounds; r++)); do
  for f in $files; do
    for isa in avx512 avx2; do
      dir=$llama; [ "$isa" = avx2 ] && dir=$llama_avx2
      q=$(QKV_ISA=$isa QKV_THREADS=$threads "$qkv" bench forward --model "$f" --T "$T" --repeats "$reps" --peak 1 \
          --fma-peak "${peak[$isa]}" --json 2>"$errs") || { cat "$errs" >&2; exit 1; }
      l=$(node "$dir/llama_cpp_prefill.mjs" "$f" "$T" "$threads" "$reps")
      printf '%s\t%s\t%s\t%s\n' "$f" "$isa" "$(tr -d '\n' <<<"$q")" "$(tr -d '\n' <<<"$l")" >>"$runs"
    done
  done
  [ "$rounds" -gt 1 ] && echo "round $r of $rounds done; load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
done
echo "$rounds round(s) of $reps runs each, medians; load at the end $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| file | ISA | qkv ms | GFLOP/s | % of FMA peak | llama.cpp ms | llama.cpp / qkv (rounds' range) |"
echo "|---|---|---|---|---|---|---|"
python3 - "$runs" <<'PY'
import json, os, statistics as st, sys
rows = {}
for line in open(sys.argv[1]):
    f, isa, q, l = line.rstrip("\n").split("\t")
    rows.setdefault((f, isa), []).append((json.loads(q), json.loads(l)))
for (f, isa), pairs in rows.items():
    q0, l0 = pairs[0]
    qm = st.median(q["median_ms"] for q, _ in pairs)
    lm = st.median(l["median_ms"] for _, l in pairs)
    ratios = [l["median_ms"] / q["median_ms"] for q, l in pairs]
    gf = q0["gflops"] * q0["median_ms"] / qm  # the same work at the median time
    frac = q0["fraction_of_fma_peak"] * q0["median_ms"] / qm
    lib = ",".join(l0["cpu_variants"]) if len(l0["cpu_variants"]) == 1 else "all CPU libraries"
    spread = f" ({min(ratios):.2f}–{max(ratios):.2f})" if len(ratios) > 1 else ""
    print(f"| {os.path.basename(f)} | {isa} ({q0.get('projection_gemm', 'BLIS ' + q0['blis_kernel'])}; llama.cpp {lib}) | "
          f"{qm:.0f} | {gf:.1f} | {100 * frac:.0f} % | {lm:.0f} | {st.median(ratios):.2f}{spread} |")
PY
