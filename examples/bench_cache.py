"""Overhead of `model.run_with_cache` from Python against the same C++ call (issue 17: < 2x).

    PYTHONPATH=build/python /usr/bin/python3 examples/bench_cache.py [MODEL] [T]

Times qkv::run_with_cache in C++ (every hook point kept, nothing of Python in the loop) and
model.run_with_cache(tokens) from Python on the same T tokens (default 64), interleaved in rounds,
and prints the medians and the minima (the cost without the machine's other load) and their ratios."""
import statistics
import sys
import time

import numpy as np

import qkv


def main():
    model = qkv.load(sys.argv[1] if len(sys.argv) > 1 else None)
    T = int(sys.argv[2]) if len(sys.argv) > 2 else 64
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, model.config["vocab_size"], size=min(T, model.config["n_ctx"]), dtype=np.int64)
    model.run_with_cache(tokens)  # warm up
    cpp, py = [], []
    for _ in range(50):
        cpp += qkv._qkv.time_run_with_cache(model._m, tokens, 10)
        for _ in range(10):
            t0 = time.perf_counter()
            model.run_with_cache(tokens)
            py.append(time.perf_counter() - t0)
    for what, f in (("median", statistics.median), ("min", min)):
        c, p = f(cpp), f(py)
        print("%s, %d tokens, every hook point cached, %s of %d: C++ %.1f us, Python %.1f us, ratio %.2f" % (
            model.path, len(tokens), what, len(py), c * 1e6, p * 1e6, p / c))


if __name__ == "__main__":
    main()
