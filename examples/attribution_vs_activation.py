"""How well attribution patching (one backward) ranks sites against activation patching (one forward per site)
on the bundled models: Spearman's ρ of the two effects and the overlap of their top-k sites by |effect|.

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


def spearman(a, b):
    """Spearman's rank correlation (ties broken by order; the effects here are continuous)."""
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


def top_overlap(a, b, k):
    """The share of the k largest |a| that are among the k largest |b|."""
    return len(set(np.argsort(-np.abs(a))[:k]) & set(np.argsort(-np.abs(b))[:k])) / k


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
    k = 3 if len(x) <= 16 else max(3, len(x) // 10)
    what = ("head" if act["kind"] != "rows" else "layer") + ("×pos" if per_position else "")
    return what, len(x), spearman(x, y), k, top_overlap(x, y, k)


def main():
    paths = sys.argv[1:] or [str(ROOT / "models" / "induction"), str(ROOT / "models" / "induction-llama")]
    print("%-16s %-18s %-9s %-10s %5s %6s %10s" % ("model", "hook", "sites", "direction", "n", "rho", "top-k"))
    for path in paths:
        model = qkv.load(path)
        for hook, pp in ROWS:
            for direction in ("noising", "denoising"):
                what, n, rho, k, top = compare(model, hook, pp, direction)
                print("%-16s %-18s %-9s %-10s %5d %6.2f %5.2f (k=%d)" % (
                    pathlib.Path(path).name, hook, what, direction, n, rho, top, k))


if __name__ == "__main__":
    main()
