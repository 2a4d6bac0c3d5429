#!/usr/bin/env bash
# Decoding, qkv against llama.cpp on the same GGUF files, both x86 ISAs, one markdown row per file and ISA
# (docs/performance.md holds the numbers): greedy, N new tokens after a P-token prompt (ids 5, 6, …), T threads.
# For each file: `qkv generate --model F --tokens … --max-new-tokens N --ignore-eos --json` with QKV_ISA=avx512
# and avx2, and bench/llama_cpp_decode.mjs from a directory with all of node-llama-cpp's CPU libraries and
# from its AVX2-only copy (every libggml-cpu-*.so but libggml-cpu-haswell.so removed; see
# bench/prefill_vs_llama_cpp.sh). Both count the tokens after the first per second of decoding.
# Usage: bench/decode_vs_llama_cpp.sh QKV LLAMA_DIR LLAMA_AVX2_DIR "F1.gguf F2.gguf ..." [N=32] [P=64] [threads=2] [rounds=3]
# Each round runs, for every file and ISA, qkv and then llama.cpp back to back; a row gives the medians over
# the rounds and the median of the per-round ratios (with their range), so a burst of load on a shared host
# shifts one round's pair, not one side of the comparison.
# Run it on a quiet machine, under the bench lock when one is shared: flock /tmp/qkv-bench.lock bench/…
set -euo pipefail
qkv=$1 llama=$2 llama_avx2=$3 files=$4 N=${5:-32} P=${6:-64} threads=${7:-2} rounds=${8:-3}
for v in "$N" "$P" "$threads" "$rounds"; do
  [[ $v =~ ^[1-9][0-9]*$ ]] || { echo "decode_vs_llama_cpp.sh: N, P, threads and rounds must be positive integers, got '$v'" >&2; exit 2; }
done
for f in $files; do
  [ -r "$f" ] || { echo "decode_vs_llama_cpp.sh: error: $f: no such readable file" >&2; exit 2; }
done
for d in "$llama" "$llama_avx2"; do
  [ -d "$d/node_modules/node-llama-cpp" ] && [ -w "$d" ] ||
    { echo "decode_vs_llama_cpp.sh: error: $d: not a writable directory holding node_modules/node-llama-cpp" >&2; exit 2; }
done
here=$(cd "$(dirname "$0")" && pwd)
cp "$here/llama_cpp_decode.mjs" "$llama/"
cp "$here/llama_cpp_decode.mjs" "$llama_avx2/"
tok=$(seq -s, 5 $((P + 4)))
runs=$(mktemp) errs=$(mktemp)
trap 'rm -f "$runs" "$errs"' EXIT
echo "decoding $N tokens after $P, $threads threads, $rounds round(s); load $(cut -d' ' -f1-3 /proc/loadavg)"
for ((r = 1; r <= rounds; r++)); do
  for f in $files; do
    for isa in avx512 avx2; do
      dir=$llama; [ "$isa" = avx2 ] && dir=$llama_avx2
      q=$(QKV_ISA=$isa QKV_THREADS=$threads OMP_NUM_THREADS=$threads "$qkv" generate --model "$f" --tokens "$tok" \
          --max-new-tokens "$N" --ignore-eos --json 2>"$errs") || { cat "$errs" >&2; exit 1; }
      l=$(node "$dir/llama_cpp_decode.mjs" "$f" "$tok" "$N" "$threads" 2>"$errs" | tail -1) || { cat "$errs" >&2; exit 1; }
      printf '%s\t%s\t%s\t%s\n' "$f" "$isa" "$(tr -d '\n' <<<"$q")" "$l" >>"$runs"
    done
  done
  echo "round $r of $rounds done; load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
done
echo
echo "| file | ISA | qkv tokens/s (rounds' range) | llama.cpp tokens/s (range) | qkv / llama.cpp (range) |"
echo "|---|---|---|---|---|"
python3 - "$runs" <<'PY'
import json, os, statistics as st, sys
rows = {}
for line in open(sys.argv[1]):
    f, isa, q, l = line.rstrip("\n").split("\t")
    rows.setdefault((f, isa), []).append((json.loads(q)["tokens_per_second"], json.loads(l)["tokens_per_second"]))
lib = {"avx512": "all CPU libraries", "avx2": "haswell"}
for (f, isa), pairs in rows.items():
    q = [a for a, _ in pairs]
    l = [b for _, b in pairs]
    r = [a / b for a, b in pairs]
    rng = lambda v, d=1: f" ({min(v):.{d}f}–{max(v):.{d}f})" if len(v) > 1 else ""
    print(f"| {os.path.basename(f)} | {isa} (llama.cpp {lib[isa]}) | {st.median(q):.1f}{rng(q)} | "
          f"{st.median(l):.1f}{rng(l)} | {st.median(r):.2f}{rng(r, 2)} |")
PY
