#!/usr/bin/python3
"""Times PyTorch's unfused causal attention (matmul -> mask -> softmax -> matmul), forward and
forward+backward, at the shapes of bench/attention_bench.cpp (H = 12, dh = 64), and prints a table.

  /usr/bin/python3 bench/compare_pytorch.py [--threads 2] [--repeats 7] [--T 256 1024 4096] [--ours ours.json]

--ours takes Google Benchmark JSON from
  OMP_NUM_THREADS=2 build/attention_bench --benchmark_format=json --benchmark_out=ours.json
and adds our times and the ratio torch / ours. GFLOP/s counts causal FLOPs only, as the C++ bench does:
forward 4·(T²/2)·dh·H, forward+backward 14·(T²/2)·dh·H.
"""
import argparse
import json
import os
import statistics
import time

# Debian's OpenBLAS picks a generic kernel on this CPU unless told; must be set before torch loads it.
os.environ["OPENBLAS_CORETYPE"] = os.environ.get("OPENBLAS_CORETYPE", "SkylakeX")

import torch  # noqa: E402

H, DH = 12, 64


def attention(q, k, v, mask, scale):
    s = (q @ k.transpose(-1, -2)) * scale
    s = s.masked_fill(mask, float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def time_median(fn, repeats, warmup=1):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3  # ms


def flops(T, matmuls):
    return matmuls * 2.0 * (T * T / 2.0) * DH * H


def torch_times(T, repeats):
    g = torch.Generator().manual_seed(0)
    q, k, v, dz = (torch.randn(H, T, DH, generator=g) for _ in range(4))
    mask = torch.ones(T, T, dtype=torch.bool).triu(1)
    scale = DH ** -0.5
    with torch.no_grad():
        fwd = time_median(lambda: attention(q, k, v, mask, scale), repeats)
    qg, kg, vg = (x.clone().requires_grad_(True) for x in (q, k, v))

    def fwd_bwd():
        qg.grad = kg.grad = vg.grad = None
        attention(qg, kg, vg, mask, scale).backward(dz)

    both = time_median(fwd_bwd, repeats)
    return fwd, both


def load_ours(path):
    """{("fwd"|"fwdbwd", T): ms} from Google Benchmark JSON (the median aggregate if present)."""
    with open(path) as f:
        data = json.load(f)
    out, medians = {}, {}
    for b in data.get("benchmarks", []):
        name = b.get("run_name", b["name"])
        parts = name.split("/")
        kind = {"BM_FlashForward": "fwd", "BM_FlashForwardBackward": "fwdbwd"}.get(parts[0])
        if kind is None:
            continue
        unit = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[b.get("time_unit", "ns")]
        key = (kind, int(parts[1]))
        ms = b["real_time"] * unit
        if b.get("aggregate_name") == "median":
            medians[key] = ms
        elif b.get("run_type", "iteration") == "iteration":
            out.setdefault(key, ms)
    out.update(medians)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--T", type=int, nargs="+", default=[256, 1024, 4096])
    ap.add_argument("--ours", help="Google Benchmark JSON of attention_bench")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    ours = load_ours(args.ours) if args.ours else {}

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, OPENBLAS_CORETYPE="
          f"{os.environ['OPENBLAS_CORETYPE']}, H={H} dh={DH}, median of {args.repeats}")
    head = f"{'pass':<8}{'T':>6}{'torch ms':>11}{'GFLOP/s':>9}"
    if ours:
        head += f"{'qkv ms':>11}{'GFLOP/s':>9}{'torch/qkv':>11}"
    print(head)
    for T in args.T:
        fwd, both = torch_times(T, args.repeats if T < 4096 else max(3, args.repeats // 2))
        for kind, ms, mm in (("fwd", fwd, 2), ("fwd+bwd", both, 7)):
            line = f"{kind:<8}{T:>6}{ms:>11.2f}{flops(T, mm) / ms * 1e-6:>9.1f}"
            mine = ours.get(("fwd" if kind == "fwd" else "fwdbwd", T))
            if mine is not None:
                line += f"{mine:>11.2f}{flops(T, mm) / mine * 1e-6:>9.1f}{ms / mine:>10.2f}x"
            print(line, flush=True)


if __name__ == "__main__":
    main()
