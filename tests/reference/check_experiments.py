#!/usr/bin/python3
"""Independent numbers for qkv's experiments (src/analysis/), computed in float64 with numpy.

Run with Debian's interpreter:  /usr/bin/python3 tests/reference/check_experiments.py [running]
(`running`: only seed 004's running example, fixtures/experiments/running_example.json)

It reads the committed fixture checkpoints (tests/reference/fixtures/tiny, tiny_attn_only) with its own
safetensors parser, runs GPT-2 forward with numpy, and writes fixtures/experiments/<model>.json with
the numbers tests/analysis/experiments_reference_test.cpp compares against. Deliberately different
from the C++: full [d, d] and [V, V] products instead of factored ones, numpy's eigvals on the whole
vocabulary matrix, masks built with np.tril / np.roll like TransformerLens, ablations by editing a
copy of the pattern or the values. Deterministic (no randomness except the fixed token lists below).
"""

import itertools
import json
import struct
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
FIX = HERE / "fixtures"
OUT = FIX / "experiments"

TOKENS = [3, 57, 14, 92, 0, 57, 14, 92, 41, 100, 7, 57]  # the fixtures' sequence
N_REPEAT = 6                                               # repeated sequences: r r, |r| = 6, T = 12
REPEATED = [[5, 77, 31, 2, 64, 90] * 2, [11, 48, 99, 23, 7, 60] * 2, [40, 3, 3, 81, 19, 55] * 2]
EPS = 1e-5


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


def softmax_causal(S):
    T = S.shape[-1]
    S = np.where(np.tril(np.ones((T, T), dtype=bool)), S, -np.inf)
    e = np.exp(S - S.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def forward(P, cfg, tokens, intervene=None):
    """Returns logits and per layer (x, u, q, k, v [H,T,dh], S [H,T,T] unmasked, A). intervene(l, A, v)
    may edit A and v of a layer in place."""
    d, H = cfg["n_embd"], cfg["n_head"]
    dh = d // H
    T = len(tokens)
    x = P["wte.weight"][tokens] + P["wpe.weight"][:T]
    rec = []
    for l in range(cfg["n_layer"]):
        p = f"h.{l}."
        u = layer_norm(x, P[p + "ln_1.weight"], P[p + "ln_1.bias"])
        qkv = u @ P[p + "attn.c_attn.weight"] + P[p + "attn.c_attn.bias"]
        q, k, v = (qkv[:, i * d:(i + 1) * d].reshape(T, H, dh).transpose(1, 0, 2) for i in range(3))
        S = q @ k.transpose(0, 2, 1) / np.sqrt(dh)
        A = softmax_causal(S)
        v = v.copy()
        if intervene:
            intervene(l, A, v)
        z = (A @ v).transpose(1, 0, 2).reshape(T, d)
        rec.append(dict(x=x, u=u, q=q, k=k, v=v, S=S, A=A))
        x = x + z @ P[p + "attn.c_proj.weight"] + P[p + "attn.c_proj.bias"]
        if not cfg["attn_only"]:
            u2 = layer_norm(x, P[p + "ln_2.weight"], P[p + "ln_2.bias"])
            x = x + gelu(u2 @ P[p + "mlp.c_fc.weight"] + P[p + "mlp.c_fc.bias"]) @ P[p + "mlp.c_proj.weight"] \
                + P[p + "mlp.c_proj.bias"]
    logits = layer_norm(x, P["ln_f.weight"], P["ln_f.bias"]) @ P["wte.weight"].T
    return logits, rec


def fro(a):
    return float(np.sqrt((a ** 2).sum()))


def project(P, cfg, rec, l):
    d = cfg["n_embd"]
    W, b = P[f"h.{l}.attn.c_attn.weight"], P[f"h.{l}.attn.c_attn.bias"]
    out = {}
    for i, name in enumerate("qkv"):
        Wi, bi = W[:, i * d:(i + 1) * d], b[i * d:(i + 1) * d]
        true = rec[l]["u"] @ Wi + bi
        out[name] = dict(ln_trap_rel=fro(rec[l]["x"] @ Wi + bi - true) / fro(true),
                         bias_trap_rel=fro(rec[l]["u"] @ Wi - true) / fro(true))
    return out


def head_maps(P, cfg, l, h, fold=False):
    d, H = cfg["n_embd"], cfg["n_head"]
    dh = d // H
    W, b = P[f"h.{l}.attn.c_attn.weight"], P[f"h.{l}.attn.c_attn.bias"]
    s = P[f"h.{l}.ln_1.weight"][:, None] if fold else 1.0
    cols = lambda i: slice(i * d + h * dh, i * d + (h + 1) * dh)
    return dict(W_Q=s * W[:, cols(0)], W_K=s * W[:, cols(1)], W_V=s * W[:, cols(2)],
                b_Q=b[cols(0)], b_K=b[cols(1)], b_V=b[cols(2)],
                W_O=P[f"h.{l}.attn.c_proj.weight"][h * dh:(h + 1) * dh, :])


def scores(P, cfg, rec, l, h):
    S = rec[l]["S"][h]
    T = S.shape[0]
    diff = np.abs(S - S.T)
    i, j = np.unravel_index(np.argmax(np.tril(diff)), diff.shape)
    m = head_maps(P, cfg, l, h)
    M = m["W_Q"] @ m["W_K"].T
    dh = m["W_Q"].shape[1]
    qx, kx = rec[l]["u"] @ m["W_Q"], rec[l]["u"] @ m["W_K"]
    xx = qx @ kx.T / np.sqrt(dh)
    xb = np.outer(qx @ m["b_K"], np.ones(T)) / np.sqrt(dh)
    bx = np.outer(np.ones(T), kx @ m["b_Q"]) / np.sqrt(dh)
    bb = np.full((T, T), m["b_Q"] @ m["b_K"] / np.sqrt(dh))
    mask = np.tril(np.ones((T, T), dtype=bool))
    def centred(a):  # each row minus its mean over the allowed keys, zero elsewhere
        a = np.where(mask, a, 0.0)
        return np.where(mask, a - a.sum(1, keepdims=True) / mask.sum(1, keepdims=True), 0.0)
    nS = fro(S)
    return dict(asym_rel=fro(S - S.T) / nS, max_asym=float(diff[i, j]), max_i=int(i), max_j=int(j),
                M_norm=fro(M), antisym_share=fro(M - M.T) / (2 * fro(M)),
                share_xx=fro(xx) / nS, share_xb=fro(xb) / nS, share_bx=fro(bx) / nS, share_bb=fro(bb) / nS,
                bias_share=fro(S - xx) / nS, bias_share_softmax=fro(centred(bx)) / fro(centred(S)),
                reconstruction=float(np.abs(xx + xb + bx + bb - S).max()))


def swap(P, cfg, rec, l, h):
    m = head_maps(P, cfg, l, h)
    u, dh = rec[l]["u"], m["W_Q"].shape[1]
    sc = lambda q, k: q @ k.T / np.sqrt(dh)
    S = sc(u @ m["W_Q"] + m["b_Q"], u @ m["W_K"] + m["b_K"])
    full = sc(u @ m["W_K"] + m["b_K"], u @ m["W_Q"] + m["b_Q"])
    mats = sc(u @ m["W_K"] + m["b_Q"], u @ m["W_Q"] + m["b_K"])
    A, Af = softmax_causal(S), softmax_causal(full)
    return dict(full_vs_ST_max_abs=float(np.abs(full - S.T).max()),
                matrices_vs_S_rel=fro(mats - S) / fro(S), matrices_vs_ST_rel=fro(mats - S.T) / fro(S),
                pattern_full_vs_AT_rel=fro(Af - A.T) / fro(A), pattern_full_vs_A_rel=fro(Af - A) / fro(A),
                column_sum_max_dev=float(np.abs(A.sum(0) - 1).max()))


def detector_patterns(tokens):
    """TransformerLens's head_detector targets, built the way it builds them."""
    t = np.array(tokens)
    T = len(t)
    prev = np.zeros((T, T)); prev[1:, :-1] = np.eye(T - 1)
    dup = (t[:, None] == t[None, :]).astype(float)
    np.fill_diagonal(dup, 0)
    dup = np.tril(dup)
    ind = np.roll(dup, 1, axis=1)
    ind[:, 0] = 0
    ind = np.tril(ind)
    return np.tril(prev), dup, ind


def heads(P, cfg):
    L, H = cfg["n_layer"], cfg["n_head"]
    acc = {(l, h): dict(previous_token=0.0, duplicate_token=0.0, induction=0.0, induction_detector=0.0, induction_shifted=0.0)
           for l in range(L) for h in range(H)}
    for seq in REPEATED:
        _, rec = forward(P, cfg, seq)
        prev, dup, ind = detector_patterns(seq)
        for l in range(L):
            for h in range(H):
                A = rec[l]["A"][h]
                a = acc[(l, h)]
                a["previous_token"] += (A * prev).sum() / A.sum() / len(REPEATED)
                a["duplicate_token"] += (A * dup).sum() / A.sum() / len(REPEATED)
                a["induction_detector"] += (A * ind).sum() / A.sum() / len(REPEATED)
                stripe = np.diagonal(A, offset=1 - N_REPEAT)[-N_REPEAT:]  # rows of the second copy
                a["induction"] += stripe.mean() / len(REPEATED)
                # one token further on: the (2 - n) diagonal, rows of the second copy
                shifted = np.array([A[i, i - N_REPEAT + 2] for i in range(N_REPEAT, 2 * N_REPEAT)])
                a["induction_shifted"] += shifted.mean() / len(REPEATED)
    _, rec = forward(P, cfg, TOKENS)
    prev, dup, ind = detector_patterns(TOKENS)
    out = []
    for (l, h), a in acc.items():
        A = rec[l]["A"][h]
        a.update(layer=l, head=h, text_previous_token=(A * prev).sum() / A.sum(),
                 text_duplicate_token=(A * dup).sum() / A.sum(), text_induction=(A * ind).sum() / A.sum())
        out.append({k: float(v) if isinstance(v, (float, np.floating)) else v for k, v in a.items()})
    return out


def circuits(P, cfg):
    L, H, d = cfg["n_layer"], cfg["n_head"], cfg["n_embd"]
    W_E = P["wte.weight"]
    W_U = P["ln_f.weight"][:, None] * P["wte.weight"].T  # ln_f's weight folded in
    QK, OV, per_head = {}, {}, []
    for l in range(L):
        for h in range(H):
            m = head_maps(P, cfg, l, h, fold=True)
            QK[(l, h)] = m["W_Q"] @ m["W_K"].T
            OV[(l, h)] = m["W_V"] @ m["W_O"]
            lam = np.linalg.eigvals(W_E @ OV[(l, h)] @ W_U)  # the whole [V, V] matrix
            per_head.append(dict(layer=l, head=h, qk_norm=fro(QK[(l, h)]), ov_norm=fro(OV[(l, h)]),
                                 copying=float(lam.sum().real / np.abs(lam).sum())))
    comp = []
    score = lambda a, b: fro(a @ b) / (fro(a) * fro(b))
    for (l1, h1) in OV:
        for (l2, h2) in OV:
            if l1 < l2:
                comp.append(dict(src=[l1, h1], dst=[l2, h2], q=score(OV[(l1, h1)], QK[(l2, h2)]),
                                 k=score(OV[(l1, h1)], QK[(l2, h2)].T), v=score(OV[(l1, h1)], OV[(l2, h2)])))
    return per_head, comp


def repeated_half_loss(logits, seq):
    n = N_REPEAT
    lp = logits - logits.max(-1, keepdims=True)
    lp = lp - np.log(np.exp(lp).sum(-1, keepdims=True))
    return float(np.mean([-lp[t, seq[t + 1]] for t in range(n, 2 * n - 1)]))


def ablate(P, cfg, l, h):
    out = dict(intact=0.0, qk=0.0, ov=0.0)
    T = len(REPEATED[0])
    uniform = np.tril(np.ones((T, T))) / np.arange(1, T + 1)[:, None]
    def qk(layer, A, v):
        if layer == l:
            A[h] = uniform
    def ov(layer, A, v):
        if layer == l:
            v[h] = 0
    for seq in REPEATED:
        for name, fn in (("intact", None), ("qk", qk), ("ov", ov)):
            logits, _ = forward(P, cfg, seq, fn)
            out[name] += repeated_half_loss(logits, seq) / len(REPEATED)
    return out


def fnv1a64(data):
    """FNV-1a, 64 bits: identifies the checkpoint a result was computed from (the C++ test recomputes it)."""
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


# The random-weight fixtures, and the bundled trained model (whose numbers must be regenerated with this
# script whenever models/induction changes; the C++ test checks the checkpoint's hash first).
MODELS = {"tiny": FIX / "tiny", "tiny_attn_only": FIX / "tiny_attn_only",
          "induction": HERE.parent.parent / "models" / "induction"}


# ---- seed 004's running example "the cat climbed the" -----------------------------------------------------
# The seed prints only X's last row. Rows 1-4 are found here by the rule qkv states
# (src/analysis/running_example.cpp, running_example_rule()): every mean-zero row on the grid {-2, -1.5, ..., 2};
# keep the X whose head-1 numbers round to every value the seed states; then the smallest sum |x|, the smallest
# sum x^2, the first in row-major order. The C++ test checks that this search finds the X qkv fixes in code.
RUN_X5 = np.array([-0.5, -0.5, -0.5, 1.5])
RUN_W = np.array([0.011, 0.035, 0.622, 0.319, 0.014])      # last row, scores / sqrt(2)
RUN_W_RAW = np.array([0.002, 0.012, 0.707, 0.275, 0.003])  # last row, unscaled
RUN_PICKS = [dict(q=[3, 1], k=[1, 3], v=[0, 1]),            # head 1: the seed's q = [u4, u2], k = [u2, u4], v = [u1, u2]
             dict(q=[0, 2], k=[2, 0], v=[2, 3])]            # head 2: qkv's choice (the seed does not give it)


def run_layer_norm(X):  # no scale, bias or epsilon: the seed divides by sigma itself
    X = np.atleast_2d(X)
    mu = X.mean(-1, keepdims=True)
    return (X - mu) / np.sqrt(((X - mu) ** 2).mean(-1, keepdims=True))


def run_heads(X, scale, masked):
    u = run_layer_norm(X)
    out = []
    for p in RUN_PICKS:
        Q, K, V = u[:, p["q"]], u[:, p["k"]], u[:, p["v"]]
        S = Q @ K.T / (np.sqrt(2) if scale else 1.0)
        Sm = np.where(np.tril(np.ones((5, 5), dtype=bool)), S, -np.inf) if masked else S
        e = np.exp(Sm - Sm.max(-1, keepdims=True))
        A = e / e.sum(-1, keepdims=True)
        out.append(dict(Q=Q.tolist(), K=K.tolist(), V=V.tolist(), S=S.tolist(), A=A.tolist(), O=(A @ V).tolist()))
    return out


def running_example():
    grid = np.arange(-4, 5) / 2.0
    rows = [np.array([a, b, c, -(a + b + c)]) for a in grid for b in grid for c in grid
            if -2 <= -(a + b + c) <= 2 and (a, b, c) != (0, 0, 0)]
    u5 = run_layer_norm(RUN_X5)[0]
    q5 = u5[[3, 1]]
    score = lambda x: float(run_layer_norm(x)[0][[1, 3]] @ q5)  # head 1: k = [u2, u4] against the last query
    s5 = score(RUN_X5)
    # A necessary condition per row from the rounding intervals alone (w_j / w_5 is bounded), so no X that
    # could match is dropped before the exact test below.
    half = 0.0005
    cands = []
    for j in range(4):
        lo = max(np.sqrt(2) * np.log((RUN_W[j] - half) / (RUN_W[4] + half)),
                 np.log((RUN_W_RAW[j] - half) / (RUN_W_RAW[4] + half)))
        hi = min(np.sqrt(2) * np.log((RUN_W[j] + half) / (RUN_W[4] - half)),
                 np.log((RUN_W_RAW[j] + half) / (RUN_W_RAW[4] - half)))
        cands.append([x for x in rows if lo <= score(x) - s5 <= hi])
    found = []
    for pick in itertools.product(*cands):
        X = np.array(list(pick) + [RUN_X5])
        a = np.array(run_heads(X, True, False)[0]["A"])
        a_raw = np.array(run_heads(X, False, False)[0]["A"])
        if (np.abs(a[4] - RUN_W) <= half).all() and (np.abs(a_raw[4] - RUN_W_RAW) <= half).all() \
                and abs(a[0][2] - 0.66) <= 0.005:
            found.append(X)
    found.sort(key=lambda X: (np.abs(X).sum(), (X ** 2).sum(), tuple(X.ravel())))
    X = found[0]
    views = [dict(scale=s, masked=m, heads=run_heads(X, s, m)) for s in (True, False) for m in (False, True)]
    return dict(X=X.tolist(), matching=len(found), candidates_per_row=[len(c) for c in cands], views=views)


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    r = running_example()
    path = OUT / "running_example.json"
    path.write_text(json.dumps(r, indent=1) + "\n")
    print("wrote", path.relative_to(HERE.parent.parent), "- X found by the rule among", r["matching"], "matches")
    if sys.argv[1:] == ["running"]:
        return
    for name, path in MODELS.items():
        cfg_json = json.loads((path / "config.json").read_text())
        cfg = dict(n_embd=cfg_json["n_embd"], n_head=cfg_json["n_head"], n_layer=cfg_json["n_layer"],
                   attn_only=cfg_json.get("qkv_attn_only", False))
        raw = (path / "model.safetensors").read_bytes()
        P = read_safetensors(path / "model.safetensors")
        logits, rec = forward(P, cfg, TOKENS)
        expected_path = FIX / (name + "_expected") / "logits.npy"
        if expected_path.exists():
            # our forward against make_fixtures.py's (PyTorch) expected logits: the two scripts agree
            expected = np.load(expected_path)
            assert np.abs(logits - expected).max() < 1e-10, "forward disagrees with the fixtures"
        L, H = cfg["n_layer"], cfg["n_head"]
        per_head, comp = circuits(P, cfg)
        result = dict(
            model_fnv1a64="%016x" % fnv1a64(raw), model_bytes=len(raw),
            tokens=TOKENS, repeated=REPEATED, n_repeat=N_REPEAT,
            project=[project(P, cfg, rec, l) for l in range(L)],
            scores=[dict(layer=l, head=h, **scores(P, cfg, rec, l, h)) for l in range(L) for h in range(H)],
            swap=[dict(layer=l, head=h, **swap(P, cfg, rec, l, h)) for l in range(L) for h in range(H)],
            heads=heads(P, cfg), circuits=per_head, composition=comp,
            ablate=[dict(layer=l, head=h, **ablate(P, cfg, l, h)) for l in range(L) for h in range(H)])
        path = OUT / (name + ".json")
        path.write_text(json.dumps(result, indent=1) + "\n")
        print("wrote", path.relative_to(HERE.parent.parent))


if __name__ == "__main__":
    main()
