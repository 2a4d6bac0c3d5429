#!/usr/bin/python3
"""PyTorch against qkv on the same machine, in the same run, at the shapes of issue 6:

  * causal attention (H = 12, dh = 64), PyTorch's matmul -> mask -> softmax -> matmul, forward and
    forward+backward, at T = 1024 and 4096 (--T to change);
  * a GPT-2-small-shaped forward (12 layers, d 768, 12 heads, vocab 50257, random weights, full logits)
    at T = 128 and 1024, written with plain torch ops under no_grad (what HF's eager GPT-2 does).

Each PyTorch case runs in its own child process (this script with --worker), so its peak memory
(ru_maxrss growth over the case) is its own; each qkv case is `qkv bench ... --json` (tools/qkv/cmd_bench.cpp),
also its own process, with one SGEMM peak measured first and passed to every case.

  /usr/bin/python3 bench/compare_pytorch.py [--qkv build-perf/qkv] [--threads 2] [--T 1024 4096]
                                            [--forward-T 128 1024] [--repeats 5] [--path auto]
                                            [--json out.json]

The peer at its best: Debian's python3-torch calls whatever libblas.so.3 the alternatives system
points at (OpenBLAS, or BLIS — qkv's own dependency). Every PyTorch child gets --threads BLAS threads
whichever it is (OMP_NUM_THREADS, BLIS_NUM_THREADS, OPENBLAS_NUM_THREADS, MKL_NUM_THREADS and
torch.set_num_threads), and OPENBLAS_CORETYPE is chosen from this CPU's flags unless already set
(SkylakeX only with AVX-512 F/BW/DQ/VL, else Zen on AMD or Haswell on Intel with AVX2; forcing SkylakeX
on an AVX2 CPU is an illegal instruction, and Debian's OpenBLAS left alone may pick a generic kernel).
The header says which BLAS library PyTorch actually mapped, and which attention path qkv ran (--path
forces one: auto, portable, avx2, avx512).
GFLOP/s counts causal attention FLOPs only (forward 4·(T²/2)·dh·H, forward+backward 14·(T²/2)·dh·H) and
for the model forward the GEMM + causal-attention FLOPs (qkv::forward_flops).
"""
import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import time



def cpu_flags():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()


def cpu_vendor():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("vendor_id"):
                return line.split(":", 1)[1].strip()
    return ""


def openblas_coretype():
    """The OpenBLAS kernel this CPU can run at its best (only used when OPENBLAS_CORETYPE is unset)."""
    flags = cpu_flags()
    if {"avx512f", "avx512bw", "avx512dq", "avx512vl"} <= flags:
        return "SkylakeX"
    if {"avx2", "fma"} <= flags:
        return "Zen" if cpu_vendor() == "AuthenticAMD" else "Haswell"
    return None  # let OpenBLAS decide


def torch_env(threads):
    """Environment of a PyTorch child: `threads` BLAS threads whatever the BLAS, the right core type."""
    env = dict(os.environ)
    for k in ("OMP_NUM_THREADS", "BLIS_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[k] = str(threads)
    if "OPENBLAS_CORETYPE" not in env and openblas_coretype():
        env["OPENBLAS_CORETYPE"] = openblas_coretype()
    return env


def blas_libraries():
    """The BLAS/LAPACK shared objects this process has mapped (call after a matmul)."""
    libs = set()
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1] if len(line.split()) >= 6 else ""
            base = os.path.basename(path)
            if any(k in base for k in ("blas", "blis", "lapack", "mkl")):
                libs.add(os.path.realpath(path))
    return sorted(libs)

H, DH = 12, 64
GPT2 = dict(vocab=50257, n_pos=1024, d=768, layers=12, heads=12)


def attn_flops(T, matmuls):
    return matmuls * 2.0 * (T * T / 2.0) * DH * H


def forward_flops(T):
    d, L, V = GPT2["d"], GPT2["layers"], GPT2["vocab"]
    causal = T * (T + 1) / 2
    block = 2 * T * d * 3 * d + 4 * causal * d + 2 * T * d * d + 4 * T * d * 4 * d
    return L * block + 2 * T * d * V


def maxrss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def time_runs(fn, repeats, warmup=1):
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e3)
    return out


# ---------------------------------------------------------------- the PyTorch side (child process)
def worker(kind, T, threads, repeats):
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(threads)
    if kind == "info":  # which BLAS a matmul actually runs on, and torch's own account of its build
        a = torch.randn(256, 256)
        (a @ a).sum().item()
        config = torch.__config__.show()
        blas_info = re.findall(r"\b(?:BLAS|LAPACK)_INFO=[^,\s]+", config)
        return {"torch": torch.__version__, "threads": torch.get_num_threads(), "mapped": blas_libraries(),
                "config": blas_info}
    g = torch.Generator().manual_seed(0)
    if kind in ("fwd", "fwdbwd"):
        rss0 = maxrss_mib()
        q, k, v, dz = (torch.randn(H, T, DH, generator=g) for _ in range(4))
        mask = torch.ones(T, T, dtype=torch.bool).triu(1)
        scale = DH ** -0.5

        def attention(q, k, v):
            s = (q @ k.transpose(-1, -2)) * scale
            s = s.masked_fill(mask, float("-inf"))
            return torch.softmax(s, dim=-1) @ v

        if kind == "fwd":
            def run():
                with torch.no_grad():
                    attention(q, k, v)
        else:
            qg, kg, vg = (x.clone().requires_grad_(True) for x in (q, k, v))

            def run():
                qg.grad = kg.grad = vg.grad = None
                attention(qg, kg, vg).backward(dz)
        ms = time_runs(run, repeats)
        return {"runs_ms": ms, "peak_memory_mib": maxrss_mib() - rss0}

    # GPT-2-small-shaped forward, random weights (N(0, 0.02)), full logits
    d, L, V, nh = GPT2["d"], GPT2["layers"], GPT2["vocab"], GPT2["heads"]
    dh = d // nh

    def w(*shape):
        return torch.randn(*shape, generator=g) * 0.02

    wte, wpe = w(V, d), w(GPT2["n_pos"], d)
    blocks = [dict(ln1_w=torch.ones(d), ln1_b=torch.zeros(d), W_attn=w(d, 3 * d), b_attn=torch.zeros(3 * d),
                   W_O=w(d, d), b_O=torch.zeros(d), ln2_w=torch.ones(d), ln2_b=torch.zeros(d),
                   W_fc=w(d, 4 * d), b_fc=torch.zeros(4 * d), W_proj=w(4 * d, d), b_proj=torch.zeros(d))
              for _ in range(L)]
    lnf_w, lnf_b = torch.ones(d), torch.zeros(d)
    ids = torch.randint(0, V, (T,), generator=g)
    mask = torch.ones(T, T, dtype=torch.bool).triu(1)
    rss0 = maxrss_mib()

    def forward():
        with torch.no_grad():
            x = wte[ids] + wpe[:T]
            for b in blocks:
                u = F.layer_norm(x, (d,), b["ln1_w"], b["ln1_b"], 1e-5)
                qkv = torch.addmm(b["b_attn"], u, b["W_attn"])
                q, k, v = (t.view(T, nh, dh).transpose(0, 1) for t in qkv.split(d, -1))
                s = (q @ k.transpose(-1, -2)) * dh ** -0.5
                a = torch.softmax(s.masked_fill(mask, float("-inf")), -1)
                z = (a @ v).transpose(0, 1).reshape(T, d)
                x = x + torch.addmm(b["b_O"], z, b["W_O"])
                u = F.layer_norm(x, (d,), b["ln2_w"], b["ln2_b"], 1e-5)
                h = F.gelu(torch.addmm(b["b_fc"], u, b["W_fc"]), approximate="tanh")
                x = x + torch.addmm(b["b_proj"], h, b["W_proj"])
            return F.layer_norm(x, (d,), lnf_w, lnf_b, 1e-5) @ wte.t()

    ms = time_runs(forward, repeats)
    return {"runs_ms": ms, "peak_memory_mib": maxrss_mib() - rss0}


def run_torch(kind, T, threads, repeats):
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", kind, str(T), "--threads",
                          str(threads), "--repeats", str(repeats)], check=True, capture_output=True, text=True,
                         env=torch_env(threads))
    r = json.loads(out.stdout)
    if "runs_ms" in r:
        r["median_ms"] = statistics.median(r["runs_ms"])
    return r


# ---------------------------------------------------------------- the qkv side
def run_qkv(binary, args, env):
    out = subprocess.run([binary] + args + ["--json"], check=True, capture_output=True, text=True, env=env)
    return json.loads(out.stdout)


def measure_peak(binary, env):
    # `qkv bench gemm --Ts 1` prints the 2048² square first; the peak every case is compared with
    r = run_qkv(binary, ["bench", "gemm", "--Ts", "1", "--repeats", "7"], env)
    return r["results"][0]["gflops"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", nargs=2, metavar=("KIND", "T"), help=argparse.SUPPRESS)
    ap.add_argument("--qkv", default=None, help="the qkv binary (default: build-perf/qkv, else build/qkv)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--T", type=int, nargs="+", default=[1024, 4096], help="attention lengths")
    ap.add_argument("--forward-T", type=int, nargs="+", default=[128, 1024], help="GPT-2 forward lengths")
    ap.add_argument("--path", default="auto", help="qkv's attention path: auto, portable, avx2, avx512")
    ap.add_argument("--json", help="also write every number to this file")
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker[0], int(args.worker[1]), args.threads, args.repeats)))
        return

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    binary = args.qkv or next((p for p in (os.path.join(root, "build-perf", "qkv"), os.path.join(root, "build", "qkv"))
                               if os.path.exists(p)), None)
    if not binary:
        sys.exit("compare_pytorch.py: no qkv binary; build it or pass --qkv")
    env = dict(os.environ, QKV_THREADS=str(args.threads), OMP_NUM_THREADS=str(args.threads))
    info = run_torch("info", 0, args.threads, 1)
    tenv = torch_env(args.threads)
    alternative = os.path.realpath("/usr/lib/x86_64-linux-gnu/libblas.so.3")

    load = open("/proc/loadavg").read().split()[:3]
    print(f"torch {info['torch']} ({info['threads']} threads; OMP/BLIS/OPENBLAS/MKL_NUM_THREADS={args.threads}, "
          f"OPENBLAS_CORETYPE={tenv.get('OPENBLAS_CORETYPE', '(unset: OpenBLAS decides)')} "
          f"{'from the environment' if 'OPENBLAS_CORETYPE' in os.environ else 'from the CPU flags'}) "
          f"vs {binary}; median of {args.repeats}; load average at start {' '.join(load)}", flush=True)
    print(f"PyTorch's BLAS: libblas.so.3 -> {alternative}; mapped: {', '.join(info['mapped']) or '?'}", flush=True)
    print(f"  torch.__config__.show(): {', '.join(info['config']) or '?'}", flush=True)
    peak = measure_peak(binary, env)
    print(f"SGEMM peak (2048², qkv::gemm): {peak:.1f} GFLOP/s", flush=True)
    head = (f"{'case':<20}{'T':>6}{'torch ms':>11}{'torch MiB':>11}{'qkv ms':>10}{'qkv GFLOP/s':>13}"
            f"{'% peak':>8}{'qkv MiB':>9}{'torch/qkv':>11}")
    print(head)
    rows = []
    p = ["--path", args.path]
    cases = [("attention fwd", "fwd", T, ["bench", "attention", "--T", str(T)] + p, attn_flops(T, 2)) for T in args.T]
    cases += [("attention fwd+bwd", "fwdbwd", T, ["bench", "attention", "--T", str(T), "--backward"] + p,
               attn_flops(T, 7)) for T in args.T]
    cases += [("GPT-2 small forward", "gpt2", T, ["bench", "forward", "--T", str(T)] + p, forward_flops(T))
              for T in args.forward_T]
    paths = set()
    for name, kind, T, qargs, flops in cases:
        reps = args.repeats
        print(f"  ... {name} T={T}", file=sys.stderr, flush=True)
        tq = run_qkv(binary, qargs + ["--repeats", str(reps), "--peak", str(peak)], env)
        paths.add(tq.get("attention_path", "?"))
        tt = run_torch(kind, T, args.threads, reps)
        ratio = tt["median_ms"] / tq["median_ms"]
        row = dict(case=name, T=T, torch_ms=tt["median_ms"], torch_peak_mib=tt["peak_memory_mib"],
                   qkv_ms=tq["median_ms"], qkv_gflops=flops / tq["median_ms"] * 1e-6,
                   qkv_fraction_of_peak=flops / tq["median_ms"] * 1e-6 / peak, qkv_peak_mib=tq["peak_memory_mib"],
                   torch_over_qkv=ratio, torch_runs_ms=tt["runs_ms"], qkv_runs_ms=tq["runs_ms"])
        rows.append(row)
        print(f"{name:<20}{T:>6}{row['torch_ms']:>11.1f}{row['torch_peak_mib']:>11.0f}{row['qkv_ms']:>10.1f}"
              f"{row['qkv_gflops']:>13.1f}{100 * row['qkv_fraction_of_peak']:>7.1f}%{row['qkv_peak_mib']:>9.1f}"
              f"{ratio:>10.2f}x", flush=True)
    load = open("/proc/loadavg").read().split()[:3]
    print(f"qkv attention path: {', '.join(sorted(paths))}; load average at end {' '.join(load)}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(torch=info["torch"], threads=args.threads, torch_blas=info, libblas_alternative=alternative,
                           openblas_coretype=tenv.get("OPENBLAS_CORETYPE"), qkv_attention_path=sorted(paths),
                           sgemm_peak_gflops=peak, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
