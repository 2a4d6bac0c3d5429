#!/usr/bin/python3
"""Independent numbers for qkv's patching and attribution (src/analysis/patching.cpp, attribution.cpp),
computed in float64 with numpy.

Run with Debian's interpreter:  /usr/bin/python3 tests/reference/check_patching.py

It reads the committed fixture checkpoints (tests/reference/fixtures/tiny, tiny_attn_only) with its own
safetensors parser, runs GPT-2's forward in numpy with a hook at every TransformerLens name, and writes
fixtures/patching/<model>.json with the numbers tests/analysis/patching_test.cpp compares against:
activation patching sweeps (every hook kind, noising and denoising, logit difference and loss), path
patching and direct logit attribution with the logit lens. Deliberately different from the C++: every
site is a full forward on the full sequence (no truncation, no skipping after the metric's position);
path patching computes the sender's contribution as (z_src − z_base)[:, s] @ W_O[s] and the receiver's
input by hand (LayerNorm and the c_attn slice), not with a stopped forward; DLA is TransformerLens's
apply_ln_to_stack on a stack of components. Deterministic.
"""

import json
import struct
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
FIX = HERE / "fixtures"
OUT = FIX / "patching"
EPS = 1e-5

CLEAN = [3, 57, 14, 92, 0, 57, 14, 92, 41, 100, 7, 57]
CORRUPT = [3, 21, 14, 92, 0, 57, 14, 66, 41, 100, 7, 57]
METRICS = {
    "ld": dict(kind="logit_diff", position=11, answer=14, wrong=66),
    "ld8": dict(kind="logit_diff", position=8, answer=100, wrong=3),
    "loss": dict(kind="loss", positions=[5, 6, 7, 8], targets=[CLEAN[t + 1] for t in [5, 6, 7, 8]]),
}
SWEEPS = [  # hook, per_position, direction, metric
    ("attn.hook_q", False, "noising", "ld"),
    ("attn.hook_k", False, "noising", "loss"),
    ("attn.hook_v", False, "denoising", "ld"),
    ("attn.hook_z", True, "noising", "ld8"),
    ("attn.hook_pattern", False, "noising", "loss"),
    ("attn.hook_attn_scores", True, "denoising", "ld"),
    ("attn.hook_result", False, "noising", "ld"),
    ("hook_resid_pre", True, "noising", "ld8"),
    ("hook_resid_mid", False, "denoising", "loss"),
    ("hook_attn_out", True, "noising", "loss"),
    ("hook_mlp_out", False, "noising", "ld"),
    ("hook_resid_post", False, "denoising", "ld"),
    ("blocks.1.attn.hook_v", True, "noising", "loss"),
]
PATHS = [  # sender (l, h), receiver (l, h), input, direction, metric
    ((0, 1), (1, 0), "k", "noising", "ld"),
    ((0, 0), (1, 2), "q", "denoising", "loss"),
    ((0, 2), (1, 1), "v", "noising", "ld8"),
]


def read_safetensors(path):
    raw = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__" or name.endswith(".attn.bias") or name.endswith("masked_bias"):
            continue
        assert info["dtype"] == "F32", name
        a, b = info["data_offsets"]
        out[name] = np.frombuffer(data[a:b], dtype="<f4").astype(np.float64).reshape(info["shape"])
    return out


def layer_norm(x, w, b):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + EPS) * w + b


def gelu(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def forward(P, cfg, tokens, hook=lambda name, a: a):
    """GPT-2 with TransformerLens's hook points: hook(name, array) returns the array the forward goes on with."""
    d, H = cfg["n_embd"], cfg["n_head"]
    dh = d // H
    T = len(tokens)
    x = P["wte.weight"][tokens] + P["wpe.weight"][:T]
    mask = np.tril(np.ones((T, T), dtype=bool))
    for l in range(cfg["n_layer"]):
        p, b = f"h.{l}.", f"blocks.{l}."
        x = hook(b + "hook_resid_pre", x.copy())
        u = layer_norm(x, P[p + "ln_1.weight"], P[p + "ln_1.bias"])
        qkv = u @ P[p + "attn.c_attn.weight"] + P[p + "attn.c_attn.bias"]
        q, k, v = (hook(b + "attn.hook_" + nm, qkv[:, i * d:(i + 1) * d].reshape(T, H, dh).copy()) for i, nm in enumerate("qkv"))
        S = np.einsum("thd,shd->hts", q, k) / np.sqrt(dh)
        S = hook(b + "attn.hook_attn_scores", np.where(mask, S, -np.inf))
        e = np.exp(S - S.max(-1, keepdims=True))
        A = hook(b + "attn.hook_pattern", e / e.sum(-1, keepdims=True))
        z = hook(b + "attn.hook_z", np.einsum("hts,shd->thd", A, v))
        a = hook(b + "hook_attn_out", z.reshape(T, d) @ P[p + "attn.c_proj.weight"] + P[p + "attn.c_proj.bias"])
        x = x + a
        if not cfg["attn_only"]:
            x = hook(b + "hook_resid_mid", x)
            u2 = layer_norm(x, P[p + "ln_2.weight"], P[p + "ln_2.bias"])
            mo = hook(b + "hook_mlp_out", gelu(u2 @ P[p + "mlp.c_fc.weight"] + P[p + "mlp.c_fc.bias"]) @ P[p + "mlp.c_proj.weight"]
                      + P[p + "mlp.c_proj.bias"])
            x = x + mo
        x = hook(b + "hook_resid_post", x)
    return layer_norm(x, P["ln_f.weight"], P["ln_f.bias"]) @ P["wte.weight"].T


def cache(P, cfg, tokens):
    acts = {}

    def keep(name, a):
        acts[name] = a.copy()
        return a
    logits = forward(P, cfg, tokens, keep)
    return logits, acts


def metric(m, logits):
    if m["kind"] == "logit_diff":
        row = logits[m["position"]]
        return float(row[m["answer"]] - row[m["wrong"]])
    tot = 0.0
    for t, y in zip(m["positions"], m["targets"]):
        row = logits[t]
        mx = row.max()
        tot += mx + np.log(np.exp(row - mx).sum()) - row[y]
    return float(tot / len(m["positions"]))


def full_name(hook, l):
    hook = hook.replace("attn.hook_result", "attn.hook_z")
    return hook if hook.startswith("blocks.") else f"blocks.{l}.{hook}"


def sweep(P, cfg, hook, per_position, direction, mname):
    m = METRICS[mname]
    lc, cc = cache(P, cfg, CLEAN)
    lk, ck = cache(P, cfg, CORRUPT)
    base, src = (CLEAN, ck) if direction == "noising" else (CORRUPT, cc)
    H, T = cfg["n_head"], len(CLEAN)
    layers = [int(hook.split(".")[1])] if hook.startswith("blocks.") else range(cfg["n_layer"])
    sites = []
    for l in layers:
        name = full_name(hook, l)
        kind = "pattern" if name.endswith(("hook_pattern", "hook_attn_scores")) else "heads" if ".attn.hook_" in name else "rows"
        for h in (range(H) if kind != "rows" else [-1]):
            for pos in (range(T) if per_position else [-1]):
                def patch(n, a, name=name, h=h, pos=pos, kind=kind):
                    if n != name:
                        return a
                    a = a.copy()
                    s = src[name]
                    ps = slice(None) if pos < 0 else slice(pos, pos + 1)
                    if kind == "rows":
                        a[ps] = s[ps]
                    elif kind == "heads":
                        a[ps, h] = s[ps, h]
                    else:
                        a[h, ps] = s[h, ps]
                    return a
                sites.append([l, h, pos, metric(m, forward(P, cfg, base, patch))])
    return dict(hook=hook, per_position=per_position, direction=direction, metric=mname,
                clean=metric(m, lc), corrupt=metric(m, lk), sites=sites)


def path(P, cfg, sender, receiver, inp, direction, mname):
    m = METRICS[mname]
    d, H = cfg["n_embd"], cfg["n_head"]
    dh = d // H
    lc, cc = cache(P, cfg, CLEAN)
    lk, ck = cache(P, cfg, CORRUPT)
    base_ids, bc, sc = (CLEAN, cc, ck) if direction == "noising" else (CORRUPT, ck, cc)
    (ls, hs), (lr, hr) = sender, receiver
    WO = P[f"h.{ls}.attn.c_proj.weight"][hs * dh:(hs + 1) * dh]
    zs = f"blocks.{ls}.attn.hook_z"
    delta = (sc[zs][:, hs] - bc[zs][:, hs]) @ WO
    x1 = bc[f"blocks.{lr}.hook_resid_pre"] + delta
    u1 = layer_norm(x1, P[f"h.{lr}.ln_1.weight"], P[f"h.{lr}.ln_1.bias"])
    i = "qkv".index(inp)
    cols = slice(i * d + hr * dh, i * d + (hr + 1) * dh)
    new = u1 @ P[f"h.{lr}.attn.c_attn.weight"][:, cols] + P[f"h.{lr}.attn.c_attn.bias"][cols]
    name = f"blocks.{lr}.attn.hook_{inp}"

    def patch_with(value):
        def f(n, a):
            if n == name:
                a = a.copy()
                a[:, hr] = value
            return a
        return f
    val = metric(m, forward(P, cfg, base_ids, patch_with(new)))
    recv = metric(m, forward(P, cfg, base_ids, patch_with(sc[name][:, hr])))
    return dict(sender=list(sender), receiver=list(receiver), input=inp, direction=direction, metric=mname,
                clean=metric(m, lc), corrupt=metric(m, lk), value=val, receiver_value=recv)


def dla(P, cfg, tokens, position, answer, wrong):
    d, H, L = cfg["n_embd"], cfg["n_head"], cfg["n_layer"]
    dh = d // H
    logits, c = cache(P, cfg, tokens)
    parts, names = [], []
    parts.append(c["blocks.0.hook_resid_pre"][position]); names.append("embed")
    for l in range(L):
        z = c[f"blocks.{l}.attn.hook_z"][position]
        W = P[f"h.{l}.attn.c_proj.weight"]
        for h in range(H):
            parts.append(z[h] @ W[h * dh:(h + 1) * dh]); names.append(f"L{l}H{h}")
        parts.append(P[f"h.{l}.attn.c_proj.bias"]); names.append(f"attn_bias L{l}")
        if not cfg["attn_only"]:
            parts.append(c[f"blocks.{l}.hook_mlp_out"][position]); names.append(f"mlp L{l}")
    stack = np.stack(parts)
    x = c[f"blocks.{L - 1}.hook_resid_post"][position]
    assert np.abs(stack.sum(0) - x).max() < 1e-9
    scale = np.sqrt(((x - x.mean()) ** 2).mean() + EPS)
    u = P["wte.weight"][answer] - P["wte.weight"][wrong]
    # TransformerLens's apply_ln_to_stack: centre each component, divide by the whole residual's scale
    normed = (stack - stack.mean(-1, keepdims=True)) / scale * P["ln_f.weight"]
    terms = dict(zip(names, (normed @ u).tolist()))
    terms["ln_final bias"] = float(P["ln_f.bias"] @ u)
    ld = float(logits[position, answer] - logits[position, wrong])
    assert abs(sum(terms.values()) - ld) < 1e-9, (sum(terms.values()), ld)
    lens = []
    for where in ["blocks.0.hook_resid_pre"] + [f"blocks.{l}.hook_resid_post" for l in range(L)]:
        lg = layer_norm(c[where][position], P["ln_f.weight"], P["ln_f.bias"]) @ P["wte.weight"].T
        lens.append(dict(logit_diff=float(lg[answer] - lg[wrong]), top_token=int(np.argmax(lg)),
                         answer_rank=int(1 + (lg > lg[answer]).sum())))
    return dict(tokens=tokens, position=position, answer=answer, wrong=wrong, logit_diff=ld, terms=terms, lens=lens)


def main():
    OUT.mkdir(exist_ok=True)
    for model in ["tiny", "tiny_attn_only"]:
        P = read_safetensors(FIX / model / "model.safetensors")
        cfg = json.loads((FIX / model / "config.json").read_text())
        cfg["attn_only"] = bool(cfg.get("qkv_attn_only", False))
        sweeps = [sweep(P, cfg, *s) for s in SWEEPS
                  if not (cfg["attn_only"] and ("resid_mid" in s[0] or "mlp_out" in s[0]))]
        # self-check: a patch of the clean value into the clean run is the clean run
        lc, cc = cache(P, cfg, CLEAN)
        same = forward(P, cfg, CLEAN, lambda n, a: cc[n].copy() if n in cc else a)
        assert np.array_equal(same, lc)
        out = dict(model=model, clean=CLEAN, corrupt=CORRUPT, metrics=METRICS, sweeps=sweeps,
                   paths=[path(P, cfg, *p) for p in PATHS],
                   dla=[dla(P, cfg, CLEAN, 11, 14, 66), dla(P, cfg, CORRUPT, 6, 92, 57)])
        (OUT / f"{model}.json").write_text(json.dumps(out, indent=1) + "\n")
        n = sum(len(s["sites"]) for s in sweeps)
        print(f"{model}: {len(sweeps)} sweeps ({n} sites), {len(PATHS)} paths, 2 attributions -> {OUT / (model + '.json')}")


if __name__ == "__main__":
    main()
