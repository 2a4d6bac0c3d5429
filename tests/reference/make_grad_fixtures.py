#!/usr/bin/python3
"""Fixtures for gradients with respect to activations: float64 PyTorch autograd through the families'
reference forward (make_family_fixtures.py), at every hook point.

Each hook point of that forward passes through `record()`; here a zero tensor that autograd tracks is
added there (PROBE), and the rest of the forward computes from the sum, so ∂metric/∂probe is the
gradient of the metric with respect to that activation with everything downstream a function of it —
what `qkv dump --grad` and `run_with_cache(incl_bwd=True)` compute. Nothing here reads qkv's backward.

The metric touches every logit and one logit difference (so every row of every backward op matters):
    mean over t < T−1 of −log softmax(logits[t])[tokens[t+1]]  +  logits[P, A] − logits[P, B]
with P = 13, A = 57, B = 14 (GRAD_METRIC below); the tokens are the forward fixtures' (T = 20).

For each case of make_family_fixtures.CASES it writes fixtures/families/<case>/grads.safetensors: every
hook's gradient under the hook's name (F32, TransformerLens's shapes, as the forward's expected.safetensors),
plus "metric" [1], the metric's value. tests/model/lm_grad_test.cpp and tests/python/test_grad.py compare.

Usage: /usr/bin/python3 tests/reference/make_grad_fixtures.py build/qkv   (about 10 s; needs the
forward fixtures' case.json files, i.e. run make_family_fixtures.py first when the cases change)
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

import make_family_fixtures as ref

GRAD_METRIC = {"loss": "every position but the last", "answer": 57, "wrong": 14, "position": 13}


def metric(logits, tokens):
    """The fixtures' metric (GRAD_METRIC) of logits [T, V] in float64."""
    T = logits.shape[0]
    targets = torch.tensor(tokens[1:])
    logp = torch.log_softmax(logits[:T - 1], dim=-1)
    loss = -logp[torch.arange(T - 1), targets].mean()
    p, a, b = GRAD_METRIC["position"], GRAD_METRIC["answer"], GRAD_METRIC["wrong"]
    return loss + logits[p, a] - logits[p, b]


def grads_of(cfg, W, tokens):
    """{hook name: ∂metric/∂activation} and the metric, by autograd through probes at every hook point."""
    probes = {}

    def probe(name, t):
        e = torch.zeros_like(t, requires_grad=True)
        probes[name] = e
        return t + e

    ref.PROBE = probe
    try:
        hooks = ref.forward(cfg, W, tokens)
    finally:
        ref.PROBE = None
    value = metric(hooks["logits"], tokens)
    names = list(probes)
    gs = torch.autograd.grad(value, [probes[n] for n in names])
    return {n: g for n, g in zip(names, gs)}, value.item()


def main():
    qkv = sys.argv[1] if len(sys.argv) > 1 else "build/qkv"
    for name in ref.CASES:
        case = json.load(open(os.path.join(ref.OUT, name, "case.json")))
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run([qkv] + case["init"] + ["--out", tmp], check=True, stdout=subprocess.DEVNULL)
            cfg = json.load(open(os.path.join(tmp, "config.json")))
            W = ref.read_checkpoint(tmp)
        grads, value = grads_of(cfg, W, case["tokens"])
        grads["metric"] = torch.tensor([value])
        ref.write_safetensors(os.path.join(ref.OUT, name, "grads.safetensors"), grads)
        with open(os.path.join(ref.OUT, "grad_metric.json"), "w") as f:
            json.dump(GRAD_METRIC, f, indent=1)
            f.write("\n")
        big = max(float(g.abs().max()) for n, g in grads.items() if n != "metric")
        print("%-24s %3d gradients, metric %.6f, largest |gradient| %.3g" % (name, len(grads) - 1, value, big))


if __name__ == "__main__":
    main()
