"""How well attribution patching (one backward) ranks sites against activation patching (one forward per site),
and edge attribution patching ranks edges between heads against path patching, on the bundled models:
Spearman's ρ of the two effects and the overlap of their top-k sites by |effect| (qkv.rank_agreement).

The task is `qkv patch --repeated`'s: a random sequence r of 12 tokens repeated (clean r r; corrupt r' r,
the first copy replaced), the metric the mean loss of the second copy's next tokens. Each site's effect is
its patched metric minus the base run's (activation) or its first-order estimate (attribution).

    PYTHONPATH=build/python /usr/bin/python3 examples/attribution_vs_activation.py [MODEL …]
"""
import pathlib
import sys

import numpy as np

import qkv

ROOT = pathlib.Path(__file__).resolve().parents[1]
ROWS = [("attn.hook_z", False), ("attn.hook_z", True), ("attn.hook_pattern", True), ("attn.hook_q", True),
        ("attn.hook_v", True), ("hook_resid_pre", True)]


def task(model, n=12, seed=0):
    """(clean, corrupt, loss positions): r r against r' r, the loss on the second copy."""
    rng = np.random.default_rng(seed)
    r, r2 = rng.integers(0, model.cfg.d_vocab, n), rng.integers(0, model.cfg.d_vocab, n)
    return np.concatenate([r, r]), np.concatenate([r2, r]), list(range(n, 2 * n - 1))


def compare(model, hook, per_position, direction):
    """(what a site is, sites, ρ, k, top-k overlap) of attribution against activation patching for one sweep."""
    clean, corrupt, loss = task(model)
    kw = dict(loss_positions=loss, direction=direction, per_position=per_position)
    act = qkv.patch(model, clean, corrupt, hook, method="activation", **kw)
    att = qkv.patch(model, clean, corrupt, hook, method="attribution", **kw)
    base = act["clean"] if direction == "noising" else act["corrupt"]
    x = np.array([s["metric"] for s in act["sites"]]) - base
    y = np.array([s["estimate"] for s in att["sites"]])
    r = qkv.rank_agreement(x, y)
    what = ("head" if act["kind"] != "rows" else "layer") + ("×pos" if per_position else "")
    return what, r["n"], r["spearman"], r["k"], r["top_k_overlap"]


def compare_edges(model, direction):
    """Edge attribution (one backward) against path patching of every edge (6 forwards each), as compare."""
    clean, corrupt, loss = task(model)
    kw = dict(loss_positions=loss, direction=direction)
    att = qkv.patch(model, clean, corrupt, method="attribution", edges=True, **kw)
    x, y = [], []
    for e in att["edges"]:
        spec = "%d.%d:%d.%d:%s" % (e["sender_layer"], e["sender_head"], e["receiver_layer"], e["receiver_head"],
                                   e["input"])
        p = qkv.patch(model, clean, corrupt, method="path", path=spec, **kw)
        x.append(p["patched"] - (p["clean"] if direction == "noising" else p["corrupt"]))
        y.append(e["estimate"])
    r = qkv.rank_agreement(x, y)
    return "edge", r["n"], r["spearman"], r["k"], r["top_k_overlap"]


def main():
    paths = sys.argv[1:] or [str(ROOT / "models" / "induction"), str(ROOT / "models" / "induction-llama")]
    print("%-16s %-18s %-9s %-10s %5s %6s %10s" % ("model", "hook", "sites", "direction", "n", "rho", "top-k"))
    for path in paths:
        model = qkv.load(path)
        for hook, pp in ROWS + [("edges", None)]:
            for direction in ("noising", "denoising"):
                what, n, rho, k, top = (compare_edges(model, direction) if pp is None
                                        else compare(model, hook, pp, direction))
                print("%-16s %-18s %-9s %-10s %5d %6.2f %5.2f (k=%d)" % (
                    pathlib.Path(path).name, hook, what, direction, n, rho, top, k))


if __name__ == "__main__":
    main()
