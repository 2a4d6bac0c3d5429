#!/usr/bin/python3
"""Issue 27's kernel lines on both x86 ISAs, in alternated rounds (docs/performance.md):

  * causal attention forward, T = 4096 (12 heads x 64): >= 70 % of the FMA peak; AVX2 >= 60 % of its SGEMM peak;
  * attention forward + backward, T = 4096: AVX2 >= 50 % of its SGEMM peak;
  * the GPT-2 small forward, T = 1024 (every position's logits): >= 75 % of the FMA peak; AVX2 >= 85 % of SGEMM.

Each round runs every case on avx512 then avx2 (`QKV_ISA=ISA qkv bench attention|forward ... --json`, each its
own process), so a burst of load on a shared host lands on one round, not on one ISA. Prints, per ISA and case,
the median time and the medians (and ranges) of the fractions of the FMA and SGEMM peaks each run measured.

  /usr/bin/python3 bench/kernel_targets.py [--qkv build/qkv] [--rounds 5] [--repeats 3]
"""
import argparse
import json
import os
import statistics as st
import subprocess
import sys

CASES = [("attention forward, T = 4096", ["attention", "--T", "4096"]),
         ("attention forward + backward, T = 4096", ["attention", "--T", "4096", "--backward"]),
         ("GPT-2 small forward, T = 1024", ["forward", "--T", "1024"])]
ISAS = ["avx512", "avx2"]


def run_case(qkv, isa, args, repeats):
    cmd = [qkv, "bench"] + args + ["--repeats", str(repeats), "--json"]
    p = subprocess.run(cmd, env=dict(os.environ, QKV_ISA=isa), capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"kernel_targets.py: error: QKV_ISA={isa} {' '.join(cmd)}: exit {p.returncode}\n{p.stderr.strip()}")
    return json.loads(p.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--qkv", default="build/qkv")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    if a.rounds < 1 or a.repeats < 1:
        ap.error("--rounds and --repeats must be at least 1")
    if not os.access(a.qkv, os.X_OK):
        ap.error(f"--qkv {a.qkv}: not an executable")
    runs = {}
    for r in range(a.rounds):
        for isa in ISAS:
            for name, args in CASES:
                runs.setdefault((isa, name), []).append(run_case(a.qkv, isa, args, a.repeats))
        print(f"round {r + 1} of {a.rounds} done; load {open('/proc/loadavg').read().split()[:3]}", file=sys.stderr)
    print("| ISA | case | median ms | % of FMA peak (range) | % of SGEMM peak (range) |")
    print("|---|---|---:|---:|---:|")
    for (isa, name), js in runs.items():
        fma = [100 * j["fraction_of_fma_peak"] for j in js]
        sgemm = [100 * j["fraction_of_peak"] for j in js]
        print(f"| {isa} | {name} | {st.median(j['median_ms'] for j in js):.1f} | {st.median(fma):.1f} "
              f"({min(fma):.1f}–{max(fma):.1f}) | {st.median(sgemm):.1f} ({min(sgemm):.1f}–{max(sgemm):.1f}) |")


if __name__ == "__main__":
    main()
