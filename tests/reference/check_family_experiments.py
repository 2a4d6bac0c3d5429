#!/usr/bin/python3
"""Independent numbers for the experiments over the family engine (project, scores, swap, heads,
circuits, ablate on a Model: src/analysis/*.cpp's `const Model&` overloads).

For each family, a random checkpoint is made exactly as tests/analysis/family_experiments_test.cpp
makes it (`qkv init --arch A --preset tiny --set initializer_range=0.2 --seed 3`), read back with
make_family_fixtures.py's own safetensors parser and run through its float64 PyTorch forward. From
that, in float64 and without qkv's code — deliberately the slow way:

  project   the last layer's q, k, v from the raw row / without the bias against the forward's, and a
            wrong (interleaved) head cut, from the family's own tensor names and layout
  scores    S = scale·(R_i q_i)·(R_j k_j) from the reference's rotated hooks; W_Q W_Kᵀ as a full d×d
            matrix; the four parts from the maps, with rotation matrices built here (rotate_half)
  swap      the matrices-only swap and the patterns after the full swap with the family's mask/soft-cap
  heads     TransformerLens's detector scores from the reference's patterns on fixed repeated sequences
  circuits  every head's QK / OV norm from full d×d products, copying from numpy's eigvals of the whole
            [V, V] matrix, Q/K/V-composition from full products, the GQA group scores
  ablate    the chosen head's pattern replaced (uniform over its visible keys) or its z zeroed inside
            the reference forward, and the repeated-half cross-entropy

written to fixtures/families/experiments.json.
Usage: /usr/bin/python3 tests/reference/check_family_experiments.py build/qkv   (about 10 s)
"""
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_family_fixtures as ref  # noqa: E402

FAMILIES = ["gpt2", "llama", "mistral", "qwen2", "gemma", "gemma2", "gpt_neox", "phi3", "gpt_neo"]
TOKENS = [5, 17, 300, 42, 9, 17, 300, 42, 77, 120, 5, 17, 300, 1, 2, 3, 42, 9, 17, 300]  # T = 20
N = 6
REPEATED = [[5, 77, 31, 2, 64, 90] * 2, [11, 48, 99, 23, 7, 60] * 2, [40, 3, 3, 81, 19, 255] * 2]


def dims(cfg):
    mt = cfg["model_type"]
    if mt == "gpt2":
        return cfg["n_embd"], cfg["n_layer"], cfg["n_head"], cfg["n_head"], cfg["n_embd"] // cfg["n_head"]
    if mt == "gpt_neo":
        return cfg["hidden_size"], cfg["num_layers"], cfg["num_heads"], cfg["num_heads"], cfg["hidden_size"] // cfg["num_heads"]
    d, H = cfg["hidden_size"], cfg["num_attention_heads"]
    if mt == "gpt_neox":
        return d, cfg["num_hidden_layers"], H, H, d // H
    return d, cfg["num_hidden_layers"], H, cfg.get("num_key_value_heads", H), cfg.get("head_dim", d // H)


def layer_maps(cfg, W, l):
    """Wq [H·dh, d], Wk, Wv [n_kv·dh, d], biases (or None), Wo [d, H·dh] (nn.Linear), ln1 multiplier [d]."""
    mt = cfg["model_type"]
    d, L, H, K, dh = dims(cfg)
    if mt == "gpt2":
        g = lambda n: W.get(n, W.get("transformer." + n))
        p = "h.%d." % l
        c, b = g(p + "attn.c_attn.weight"), g(p + "attn.c_attn.bias")  # Conv1D [d, 3d]
        return (c[:, :d].T, c[:, d:2 * d].T, c[:, 2 * d:].T, b[:d], b[d:2 * d], b[2 * d:],
                g(p + "attn.c_proj.weight").T, g(p + "ln_1.weight"))
    if mt == "gpt_neox":
        p = "gpt_neox.layers.%d." % l
        w = W[p + "attention.query_key_value.weight"].view(H, 3, dh, d)
        b = W[p + "attention.query_key_value.bias"].view(H, 3, dh)
        return (w[:, 0].reshape(-1, d), w[:, 1].reshape(-1, d), w[:, 2].reshape(-1, d), b[:, 0].reshape(-1),
                b[:, 1].reshape(-1), b[:, 2].reshape(-1), W[p + "attention.dense.weight"], W[p + "input_layernorm.weight"])
    if mt == "gpt_neo":
        p = "transformer.h.%d." % l
        a = p + "attn.attention."
        return (W[a + "q_proj.weight"], W[a + "k_proj.weight"], W[a + "v_proj.weight"], None, None, None,
                W[a + "out_proj.weight"], W[p + "ln_1.weight"])
    p = "model.layers.%d." % l
    s = W[p + "input_layernorm.weight"]
    if mt in ("gemma", "gemma2"):
        s = 1 + s
    if mt == "phi3":
        w = W[p + "self_attn.qkv_proj.weight"]
        return (w[:H * dh], w[H * dh:H * dh + K * dh], w[H * dh + K * dh:], None, None, None,
                W[p + "self_attn.o_proj.weight"], s)
    bias = mt == "qwen2"
    a = p + "self_attn."
    return (W[a + "q_proj.weight"], W[a + "k_proj.weight"], W[a + "v_proj.weight"],
            W[a + "q_proj.bias"] if bias else None, W[a + "k_proj.bias"] if bias else None,
            W[a + "v_proj.bias"] if bias else None, W[a + "o_proj.weight"], s)


def unembed(cfg, W):
    """W_E [V, d], W_U [V, d] (rows: one per token), final-norm multiplier [d]."""
    mt = cfg["model_type"]
    if mt == "gpt2":
        g = lambda n: W.get(n, W.get("transformer." + n))
        return g("wte.weight"), g("wte.weight"), g("ln_f.weight")
    if mt == "gpt_neox":
        return W["gpt_neox.embed_in.weight"], W["embed_out.weight"], W["gpt_neox.final_layer_norm.weight"]
    if mt == "gpt_neo":
        return W["transformer.wte.weight"], W["transformer.wte.weight"], W["transformer.ln_f.weight"]
    E = W["model.embed_tokens.weight"]
    U = W["lm_head.weight"] if "lm_head.weight" in W and not cfg.get("tie_word_embeddings", False) else E
    s = W["model.norm.weight"]
    return E, U, (1 + s) if mt in ("gemma", "gemma2") else s


def rotary(cfg, dh):
    mt = cfg["model_type"]
    if mt in ("gpt2", "gpt_neo"):
        return None
    if mt == "gpt_neox":
        return int(dh * cfg["rotary_pct"]), ref.rope_inv_freq(int(dh * cfg["rotary_pct"]), cfg.get("rope_theta", cfg.get("rotary_emb_base", 10000)), None)
    rot = int(dh * cfg.get("partial_rotary_factor", 1.0))
    return rot, ref.rope_inv_freq(rot, cfg.get("rope_theta", 10000.0), cfg.get("rope_scaling"))


def rot_matrix(rp, dh, pos):
    """R [dh, dh] with (R x) = x rotated to position pos (rotate_half pairs on the first rot coordinates)."""
    R = torch.eye(dh)
    if rp is None:
        return R
    rot, inv = rp
    half = rot // 2
    for i in range(half):
        c, s = math.cos(pos * inv[i].item()), math.sin(pos * inv[i].item())
        R[i, i], R[i, i + half], R[i + half, i], R[i + half, i + half] = c, -s, s, c
    return R


def rotate(rp, x):  # rows x [T, dh] -> each row t rotated to position t
    return torch.stack([rot_matrix(rp, x.shape[1], t) @ x[t] for t in range(x.shape[0])])


def scale_of(cfg, dh):
    mt = cfg["model_type"]
    if mt == "gpt_neo":
        return 1.0
    if mt == "gemma2":
        return cfg["query_pre_attn_scalar"] ** -0.5
    return 1 / math.sqrt(dh)


def window_of(cfg, l):
    mt = cfg["model_type"]
    if mt == "gpt_neo":
        kinds = [k for kinds, n in cfg["attention_types"] for _ in range(n) for k in kinds]
        return cfg["window_size"] if kinds[l] == "local" else 0
    if mt in ("mistral", "phi3") and cfg.get("sliding_window"):
        return cfg["sliding_window"]
    if mt == "gemma2" and l % 2 == 0:
        return cfg["sliding_window"]
    return 0


def visible(T, w):
    i = torch.arange(T).view(T, 1)
    j = torch.arange(T).view(1, T)
    v = j <= i
    if w:
        v = v & (i - j < w)
    return v


def pattern(S, vis, cap):
    if cap:
        S = torch.tanh(S / cap) * cap
    return torch.softmax(S.masked_fill(~vis, float("-inf")), dim=-1)


def fro(x):
    return torch.linalg.norm(x).item()


def detector(A, target):
    return ((A * target).sum() / A.sum()).item()


def run_ablation(cfg, W, ids, layer, head, mode):
    """The reference forward with head `head` of `layer` edited: 'qk' uniform pattern, 'ov' z zeroed."""
    orig = ref.attention
    pre = "blocks.%d." % layer

    def att(q, k, v, scale, window=0, softcap=0.0, hooks=None, pre_=""):
        z = orig(q, k, v, scale, window=window, softcap=softcap, hooks=hooks, pre=pre_)
        if pre_ != pre or mode is None:
            return z
        z = z.clone()
        if mode == "ov":
            z[head] = 0
        else:
            T = q.shape[1]
            vis = visible(T, window).double()
            A = vis / vis.sum(-1, keepdim=True)
            rep = q.shape[0] // k.shape[0]
            z[head] = A @ v[head // rep]
        return z

    ref.attention = lambda q, k, v, scale, window=0, softcap=0.0, hooks=None, pre="": att(q, k, v, scale, window, softcap, hooks, pre)
    try:
        return ref.forward(cfg, W, ids)["logits"]
    finally:
        ref.attention = orig


def xent(logits, ids, first, last):
    lp = torch.log_softmax(logits, dim=-1)
    return -sum(lp[t, ids[t + 1]].item() for t in range(first, last)) / (last - first)


def family(cfg, W):
    d, L, H, K, dh = dims(cfg)
    G = H // K
    l = L - 1
    b = "blocks.%d." % l
    hk = ref.forward(cfg, W, TOKENS)
    T = len(TOKENS)
    Wq, Wk, Wv, bq, bk, bv, Wo, s1 = layer_maps(cfg, W, l)
    rp = rotary(cfg, dh)
    scale = scale_of(cfg, dh)
    cap = cfg.get("attn_logit_softcapping") or 0.0 if cfg["model_type"] == "gemma2" else 0.0
    vis = visible(T, window_of(cfg, l))
    out = {"layer": l}

    # ---- project (layer l)
    x, u = hk[b + "hook_resid_pre"], hk[b + "ln1.hook_normalized"]
    proj = {}
    for name, Wm, bm, n in (("q", Wq, bq, H), ("k", Wk, bk, K), ("v", Wv, bv, K)):
        truth = u @ Wm.T + (bm if bm is not None else 0)
        raw = x @ Wm.T + (bm if bm is not None else 0)
        nob = u @ Wm.T
        proj[name] = {"ln_trap_rel": fro(raw - truth) / fro(truth), "bias_trap_rel": fro(nob - truth) / fro(truth),
                      "bias_norm": fro(bm) if bm is not None else 0.0}
    num, den = 0.0, 0.0
    for name, Wm, bm, n in (("q", Wq, bq, H), ("k", Wk, bk, K), ("v", Wv, bv, K)):
        truth = u @ Wm.T + (bm if bm is not None else 0)  # [T, n·dh]
        model = hk[b + "attn.hook_" + name].reshape(T, n * dh)  # head-major: column h·dh + e
        wrong = truth.view(T, dh, n).transpose(1, 2).reshape(T, n * dh)  # head h, dim e from column e·n + h
        num += ((wrong - model) ** 2).sum().item()
        den += (model ** 2).sum().item()
    proj["interleaved_cut_rel"] = math.sqrt(num / den)
    out["project"] = proj

    # ---- scores and swap (layer l, head H - 1)
    h = H - 1
    g = h // G
    rq = hk[b + ("attn.hook_rot_q" if rp else "attn.hook_q")][:, h]
    rk = hk[b + ("attn.hook_rot_k" if rp else "attn.hook_k")][:, g]
    S = scale * rq @ rk.T
    WQ, WK = Wq[h * dh:(h + 1) * dh].T, Wk[g * dh:(g + 1) * dh].T  # [d, dh]
    M = WQ @ WK.T  # [d, d], formed on purpose
    zero = torch.zeros(dh)
    bQ = bq[h * dh:(h + 1) * dh] if bq is not None else zero
    bK = bk[g * dh:(g + 1) * dh] if bk is not None else zero
    qx, kx = rotate(rp, u @ WQ), rotate(rp, u @ WK)
    bqr, bkr = rotate(rp, bQ.expand(T, dh)), rotate(rp, bK.expand(T, dh))
    xx, xb, bx, bb = scale * qx @ kx.T, scale * qx @ bkr.T, scale * bqr @ kx.T, scale * bqr @ bkr.T
    nS = fro(S)
    rest = S - xx
    c_rest, c_S = [], []
    for i in range(T):
        m = vis[i]
        c_rest.append(rest[i][m] - rest[i][m].mean())
        c_S.append(S[i][m] - S[i][m].mean())
    c_rest, c_S = torch.cat(c_rest), torch.cat(c_S)
    out["scores"] = {"head": h, "asym_rel": fro(S - S.T) / nS, "M_norm": fro(M), "M_antisym_share": fro(M - M.T) / (2 * fro(M)),
                     "share_xx": fro(xx) / nS, "share_xb": fro(xb) / nS, "share_bx": fro(bx) / nS, "share_bb": fro(bb) / nS,
                     "bias_share": fro(xb + bx + bb) / nS, "bias_share_softmax": fro(c_rest) / fro(c_S)}
    q = rotate(rp, u @ WQ + bQ)
    k = rotate(rp, u @ WK + bK)
    S2 = scale * q @ k.T
    Sm = scale * rotate(rp, u @ WK + bQ) @ rotate(rp, u @ WQ + bK).T
    Sf = scale * k @ q.T
    A = pattern(S2, vis, cap)
    Af = pattern(Sf, vis, cap)
    out["swap"] = {"head": h, "matrices_vs_S_rel": fro(Sm - S2) / fro(S2), "matrices_vs_ST_rel": fro(Sm - S2.T) / fro(S2),
                   "pattern_full_vs_AT_rel": fro(Af - A.T) / fro(A), "pattern_full_vs_A_rel": fro(Af - A) / fro(A),
                   "column_sum_max_dev": (A.sum(0) - 1).abs().max().item()}

    # ---- heads: TransformerLens's targets built with numpy-style masks
    heads = {"previous_token": [0.0] * (L * H), "duplicate_token": [0.0] * (L * H), "induction": [0.0] * (L * H),
             "induction_detector": [0.0] * (L * H)}
    for seq in REPEATED:
        Ts = len(seq)
        hs = ref.forward(cfg, W, seq)
        ids = torch.tensor(seq)
        prev = torch.diag(torch.ones(Ts - 1), -1)
        dup = ((ids.view(Ts, 1) == ids.view(1, Ts)) & (torch.arange(Ts).view(1, Ts) < torch.arange(Ts).view(Ts, 1))).double()
        ind = torch.roll(dup, 1, dims=1)
        ind[:, 0] = 0
        ind = torch.tril(ind)
        for ll in range(L):
            P = hs["blocks.%d.attn.hook_pattern" % ll]
            for hh in range(H):
                i = ll * H + hh
                heads["previous_token"][i] += detector(P[hh], prev) / len(REPEATED)
                heads["duplicate_token"][i] += detector(P[hh], dup) / len(REPEATED)
                heads["induction_detector"][i] += detector(P[hh], ind) / len(REPEATED)
                heads["induction"][i] += np.mean([P[hh][t, t - N + 1].item() for t in range(N, 2 * N)]) / len(REPEATED)
    out["heads"] = heads

    # ---- circuits (ln folded), full products
    E, U, sf = unembed(cfg, W)
    layers = []
    for ll in range(L):
        q_, k_, v_, _, _, _, o_, s_ = layer_maps(cfg, W, ll)
        hs_ = []
        for hh in range(H):
            gg = hh // G
            WQh = (s_.view(d, 1) * q_[hh * dh:(hh + 1) * dh].T)
            WKh = (s_.view(d, 1) * k_[gg * dh:(gg + 1) * dh].T)
            WVh = (s_.view(d, 1) * v_[gg * dh:(gg + 1) * dh].T)
            WOh = o_[:, hh * dh:(hh + 1) * dh].T  # [dh, d]
            hs_.append((WQh, WKh, WVh, WOh))
        layers.append(hs_)
    circ = {"heads": [], "compositions": [], "groups": []}
    UE = (U * sf.view(1, d)).numpy()  # rows of W_U times the final norm's multiplier
    for ll in range(L):
        for hh in range(H):
            WQh, WKh, WVh, WOh = layers[ll][hh]
            QK, OV = WQh @ WKh.T, WVh @ WOh
            full = E.numpy() @ OV.numpy() @ UE.T  # [V, V]
            lam = np.linalg.eigvals(full)
            circ["heads"].append({"qk_norm": fro(QK), "qk_antisym_share": fro(QK - QK.T) / (2 * fro(QK)),
                                  "ov_norm": fro(OV), "copying": float(lam.real.sum() / np.abs(lam).sum())})
    for l2 in range(L):
        for l1 in range(l2):
            for h1 in range(H):
                _, _, V1, O1 = layers[l1][h1]
                OV1 = V1 @ O1
                for h2 in range(H):
                    Q2, K2, V2, O2 = layers[l2][h2]
                    sc = lambda R: fro(OV1 @ R) / (fro(OV1) * fro(R))
                    circ["compositions"].append([l1, h1, l2, h2, sc(Q2 @ K2.T), sc(K2 @ Q2.T), sc(V2 @ O2)])
                if G > 1:
                    for gg in range(K):
                        _, K2, V2, _ = layers[l2][gg * G]
                        circ["groups"].append([l1, h1, l2, gg, fro(OV1 @ K2) / (fro(OV1) * fro(K2)),
                                               fro(OV1 @ V2) / (fro(OV1) * fro(V2))])
    out["circuits"] = circ

    # ---- ablate: layer l, head 1
    ah = 1
    ab = {"head": ah, "intact": 0.0, "qk": 0.0, "ov": 0.0, "first_half": 0.0}
    for seq in REPEATED:
        for key, mode in (("intact", None), ("qk", "qk"), ("ov", "ov")):
            lg = run_ablation(cfg, W, seq, l, ah, mode)
            ab[key] += xent(lg, seq, N, 2 * N - 1) / len(REPEATED)
            if mode is None:
                ab["first_half"] += xent(lg, seq, 0, N - 1) / len(REPEATED)
    out["ablate"] = ab
    return out


def main():
    qkv = sys.argv[1] if len(sys.argv) > 1 else "build/qkv"
    res = {"tokens": TOKENS, "repeated": REPEATED, "n": N, "families": {}}
    for fam in FAMILIES:
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run([qkv, "init", "--arch", fam, "--preset", "tiny", "--set", "initializer_range=0.2", "--seed", "3",
                            "--out", tmp], check=True, stdout=subprocess.DEVNULL)
            cfg = json.load(open(os.path.join(tmp, "config.json")))
            W = ref.read_checkpoint(tmp)
        res["families"][fam] = family(cfg, W)
        r = res["families"][fam]
        print("%-9s asym %.3f  swap-matrices vs Sᵀ %.3g  ablate intact %.4f qk %.4f ov %.4f" %
              (fam, r["scores"]["asym_rel"], r["swap"]["matrices_vs_ST_rel"], r["ablate"]["intact"], r["ablate"]["qk"],
               r["ablate"]["ov"]))
    with open(os.path.join(ref.OUT, "experiments.json"), "w") as f:
        json.dump(res, f, indent=0)
        f.write("\n")


if __name__ == "__main__":
    main()
