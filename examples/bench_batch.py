"""A batch as one forward against its sequences run one by one, and the gradients' cost against the forward.

    PYTHONPATH=build/python /usr/bin/python3 examples/bench_batch.py [MODEL] [B] [T]

MODEL defaults to the GPT-2 small shape (`qkv init --arch gpt2 --preset small`, written to a temporary
directory with the build's qkv binary); B = 8 sequences of T = 128 tokens. Times, interleaved in rounds,
model(tokens [B, T]) (one forward: every weight's product over B·T rows) against B calls of model(tokens [T]),
and one sequence's gradients at every hook (run_with_cache(incl_bwd=True)'s training forward + backward,
each timed on its own) against its forward; prints the minima (the cost without the machine's other load)
and the ratios."""
import pathlib
import subprocess
import sys
import tempfile
import time

import numpy as np

import qkv


def best(f, rounds):
    """The fastest of `rounds` calls of f, in seconds."""
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        f()
        out.append(time.perf_counter() - t0)
    return min(out)


def main():
    B = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    T = int(sys.argv[3]) if len(sys.argv) > 3 else 128
    with tempfile.TemporaryDirectory() as tmp:
        path = sys.argv[1] if len(sys.argv) > 1 else None
        if path is None:
            qkv_bin = pathlib.Path(qkv.__file__).resolve().parents[2] / "qkv"
            path = tmp + "/gpt2-small"
            subprocess.run([str(qkv_bin), "init", "--arch", "gpt2", "--preset", "small", "--out", path], check=True,
                           stdout=subprocess.DEVNULL)
        model = qkv.load(path)
        rng = np.random.default_rng(0)
        toks = rng.integers(0, model.cfg.d_vocab, size=(B, T), dtype=np.int64)
        model(toks), model(toks[0])  # warm up
        qkv._qkv.grads(model._m, toks[0], ("loss", None))
        batch, single = [], []
        for _ in range(3):
            batch.append(best(lambda: model(toks), 1))
            single.append(best(lambda: [model(t) for t in toks], 1))
        fwd = best(lambda: model(toks[0]), 3)
        parts = []
        grad = best(lambda: parts.append(qkv._qkv.grads(model._m, toks[0], ("loss", None))[3]), 3)
        train_fwd, bwd = min(p[0] for p in parts), min(p[1] for p in parts)
        print("%s: B = %d x T = %d: one batched forward %.3f s, %d single forwards %.3f s (%.2fx)" % (
            model.path, B, T, min(batch), B, min(single), min(single) / min(batch)))
        print("one sequence: forward %.3f s; gradients at every hook %.3f s (%.2fx the forward): the training "
              "forward %.3f s, the backward %.3f s (%.2fx the forward)" % (fwd, grad, grad / fwd, train_fwd, bwd,
                                                                          bwd / fwd))


if __name__ == "__main__":
    main()
