#!/usr/bin/python3
"""Batched generation against one prompt at a time (docs/generate.md, "Batched prompts"): B prompts of
different lengths generated as one batch (model.generate of a list: left-padded prefill, then B rows per
decoding step through one product per weight) and then each alone, same model, same run; greedy, EOS
ignored, so both make B × new tokens.

  QKV_THREADS=2 PYTHONPATH=build/python /usr/bin/python3 bench/generate_batch.py MODEL [--batch 8]
      [--new 32] [--prompt 16-64] [--repeats 1]

Prints JSON: decoding tokens/s (new tokens after each sequence's first, over decoding seconds) and end to
end tokens/s (all new tokens over wall seconds, prefill included) for both, and whether every sequence's
tokens agree."""
import argparse
import json
import time

import numpy as np

import qkv


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--new", type=int, default=32)
    ap.add_argument("--prompt", default="16-64", help="prompt lengths, spread evenly over LO-HI")
    ap.add_argument("--repeats", type=int, default=1)
    a = ap.parse_args()
    m = qkv.load(a.model)
    lo, hi = (int(x) for x in a.prompt.split("-"))
    V = m.config["vocab_size"]
    lens = np.linspace(lo, hi, a.batch).round().astype(int)
    prompts = [[(5 + 37 * b + 11 * i) % V for i in range(n)] for b, n in enumerate(lens)]
    kw = dict(max_new_tokens=a.new, stop_at_eos=False, return_dict=True)
    m.generate(prompts[0][:4], max_new_tokens=2)  # warm: page the weights in
    best = {}
    for _ in range(a.repeats):
        t0 = time.perf_counter()
        batched = m.generate(prompts, **kw)
        wall_b = time.perf_counter() - t0
        t0 = time.perf_counter()
        alone = [m.generate(p, **kw) for p in prompts]
        wall_1 = time.perf_counter() - t0
        n_dec = sum(len(d["tokens"]) - 1 for d in alone)
        r = {
            "batched_decode_tokens_per_second": batched[0]["batch_tokens_per_second"],
            "alone_decode_tokens_per_second": n_dec / (sum(d["decode_ms"] for d in alone) / 1000),
            "batched_end_to_end_tokens_per_second": a.batch * a.new / wall_b,
            "alone_end_to_end_tokens_per_second": a.batch * a.new / wall_1,
            "batched_prefill_ms": batched[0]["prefill_ms"],
            "alone_prefill_ms": sum(d["prefill_ms"] for d in alone),
        }
        if not best or r["batched_decode_tokens_per_second"] > best["batched_decode_tokens_per_second"]:
            best = r
        best["same_tokens"] = all(list(x["tokens"]) == list(y["tokens"]) for x, y in zip(batched, alone))
    best.update(model=a.model, batch=a.batch, new_tokens=a.new, prompt_lengths=[int(x) for x in lens])
    print(json.dumps(best, indent=1))


if __name__ == "__main__":
    main()
