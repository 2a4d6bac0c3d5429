#!/usr/bin/python3
"""Independent numbers for the tour's claims on every family (src/analysis/claims/).

For each family, a random checkpoint is made exactly as tests/analysis/tour_families_test.cpp makes it
(`qkv init --arch A --preset tiny --set initializer_range=0.2 --seed 3`), read back with this
directory's own safetensors parser, and run through make_family_fixtures.py's float64 PyTorch forward.
From that, for every head of the last layer, in float64 and without qkv's code:

  asym_rel       ‖S − Sᵀ‖/‖S‖ of the (rotated) q·kᵀ on TOKENS
  raw_row_rel    ‖q(x) − q(ln1(x))‖/‖q(ln1(x))‖: the raw-row trap (ln_trap / rmsnorm_trap), biases included
  qk_delta       ‖W_Qᵀ(R_Δ − I)W_K‖_F/‖W_Qᵀ W_K‖_F for Δ = 1, 4, 16, 64, with R_Δ built here from the
                 rotary definition (rotate_half pairs on the first rotary_dim coordinates)
  gqa            per KV group: max |Δ| of the first two heads' queries and patterns
  no_scale       (GPT-Neo) mean largest weight and softmax-Jacobian norm, without and with ÷√d_k

written to fixtures/families/claims.json; tests/analysis/tour_families_test.cpp compares qkv's numbers.
Usage: /usr/bin/python3 tests/reference/check_family_claims.py build/qkv
"""
import json
import math
import os
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_family_fixtures as ref  # noqa: E402

FAMILIES = ["gpt2", "llama", "mistral", "qwen2", "gemma", "gemma2", "gpt_neox", "phi3", "gpt_neo"]
TOKENS = [5, 17, 300, 42, 9, 17, 300, 42, 77, 120, 5, 17, 300, 1, 2, 3, 42, 9, 17, 300]


def q_bias(cfg, W, layer):
    """b_Q [H·dh] of one layer, or None: GPT-2's c_attn thirds, GPT-NeoX's per-head interleave, Qwen2's q_proj."""
    mt = cfg["model_type"]
    if mt == "gpt2":
        d = cfg["n_embd"]
        return W.get("h.%d.attn.c_attn.bias" % layer, W.get("transformer.h.%d.attn.c_attn.bias" % layer))[:d]
    if mt == "gpt_neox":
        d, H = cfg["hidden_size"], cfg["num_attention_heads"]
        return W["gpt_neox.layers.%d.attention.query_key_value.bias" % layer].view(H, 3, d // H)[:, 0].reshape(d)
    if mt == "qwen2":
        return W["model.layers.%d.self_attn.q_proj.bias" % layer]
    return None


def head_maps(cfg, W, layer):
    """W_Q [H·dh, d], W_K [n_kv·dh, d] of one layer, from the family's own layout."""
    mt = cfg["model_type"]
    if mt == "gpt2":
        d = cfg["n_embd"]
        g = lambda n: W.get(n, W.get("transformer." + n))
        c = g("h.%d.attn.c_attn.weight" % layer)  # Conv1D [d, 3d]
        return c[:, :d].T, c[:, d:2 * d].T
    if mt == "gpt_neox":
        d, H = cfg["hidden_size"], cfg["num_attention_heads"]
        dh = d // H
        w = W["gpt_neox.layers.%d.attention.query_key_value.weight" % layer].view(H, 3, dh, d)
        return w[:, 0].reshape(H * dh, d), w[:, 1].reshape(H * dh, d)
    if mt == "gpt_neo":
        p = "transformer.h.%d.attn.attention." % layer
        return W[p + "q_proj.weight"], W[p + "k_proj.weight"]
    p = "model.layers.%d.self_attn." % layer
    if mt == "phi3":
        H, n_kv = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
        dh = cfg.get("head_dim", cfg["hidden_size"] // H)
        w = W[p + "qkv_proj.weight"]
        return w[:H * dh], w[H * dh:H * dh + n_kv * dh]
    return W[p + "q_proj.weight"], W[p + "k_proj.weight"]


def rotation(cfg, dh, delta):
    """R_Δ [dh, dh]: rotate_half pairs (i, i + r/2) by Δ·θ_i on the first r coordinates."""
    mt = cfg["model_type"]
    if mt == "gpt_neox":
        rot, theta = int(dh * cfg["rotary_pct"]), cfg.get("rope_theta", cfg.get("rotary_emb_base", 10000))
    else:
        rot, theta = int(dh * cfg.get("partial_rotary_factor", 1.0)), cfg.get("rope_theta", 10000.0)
    inv = ref.rope_inv_freq(rot, theta, cfg.get("rope_scaling"))
    R = torch.eye(dh, dtype=torch.float64)
    half = rot // 2
    for i in range(half):
        c, s = math.cos(delta * inv[i].item()), math.sin(delta * inv[i].item())
        R[i, i], R[i, i + half], R[i + half, i], R[i + half, i + half] = c, -s, s, c
    return R


def main():
    qkv = sys.argv[1] if len(sys.argv) > 1 else "build/qkv"
    out = {"tokens": TOKENS, "families": {}}
    for fam in FAMILIES:
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run([qkv, "init", "--arch", fam, "--preset", "tiny", "--set", "initializer_range=0.2", "--seed", "3",
                            "--out", tmp], check=True, stdout=subprocess.DEVNULL)
            cfg = json.load(open(os.path.join(tmp, "config.json")))
            W = ref.read_checkpoint(tmp)
        hooks = ref.forward(cfg, W, TOKENS)
        L = cfg.get("n_layer", cfg.get("num_hidden_layers", cfg.get("num_layers")))
        l = L - 1
        b = "blocks.%d." % l
        rotary = b + "attn.hook_rot_q" in hooks
        q = hooks[b + ("attn.hook_rot_q" if rotary else "attn.hook_q")]  # [T, H, dh]
        k = hooks[b + ("attn.hook_rot_k" if rotary else "attn.hook_k")]  # [T, n_kv, dh]
        T, H, dh = q.shape
        n_kv = k.shape[1]
        G = H // n_kv
        rec = {"layer": l, "asym_rel": [], "raw_row_rel": None, "qk_delta": [], "gqa": []}
        for h in range(H):
            S = q[:, h] @ k[:, h // G].T
            rec["asym_rel"].append((torch.linalg.norm(S - S.T) / torch.linalg.norm(S)).item())
        # the raw-row trap on the whole layer: q of the raw row vs the forward's q
        Wq, Wk = head_maps(cfg, W, l)
        q_norm = hooks[b + "attn.hook_q"].reshape(T, H * dh)
        bias = q_bias(cfg, W, l)
        q_raw = hooks[b + "hook_resid_pre"] @ Wq.T + (bias if bias is not None else 0)
        rec["raw_row_rel"] = (torch.linalg.norm(q_raw - q_norm) / torch.linalg.norm(q_norm)).item()
        if rotary:
            for h in range(H):
                g = h // G
                Wqh, Wkh = Wq[h * dh:(h + 1) * dh], Wk[g * dh:(g + 1) * dh]
                base = torch.linalg.norm(Wqh.T @ Wkh)
                rec["qk_delta"].append([(torch.linalg.norm(Wqh.T @ (rotation(cfg, dh, dd) - torch.eye(dh)) @ Wkh) / base).item()
                                        for dd in (1, 4, 16, 64)])
        if G > 1:
            P = hooks[b + "attn.hook_pattern"]
            for g in range(n_kv):
                h0, h1 = g * G, g * G + 1
                rec["gqa"].append({"query_max_abs_diff": (q[:, h0] - q[:, h1]).abs().max().item(),
                                   "pattern_max_abs_diff": (P[h0] - P[h1]).abs().max().item()})
        if cfg["model_type"] == "gpt_neo":
            def sharp(scaled):
                c2 = dict(cfg)
                hk = forward_scaled(c2, W, scaled)
                mx, jn, rows = 0.0, 0.0, 0
                for ll in range(L):
                    A = hk["blocks.%d.attn.hook_pattern" % ll]
                    for h in range(H):
                        for i in range(1, T):
                            a = A[h, i, :i + 1]
                            J = torch.diag(a) - torch.outer(a, a)
                            mx += a.max().item()
                            jn += torch.linalg.norm(J).item()
                            rows += 1
                return mx / rows, jn / rows
            rec["no_scale"] = {"unscaled": sharp(False), "scaled": sharp(True)}
        out["families"][fam] = rec
        print("%-9s layer %d, %d heads: asym %s" % (fam, l, H, ", ".join("%.3f" % a for a in rec["asym_rel"])))
    with open(os.path.join(ref.OUT, "claims.json"), "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


def forward_scaled(cfg, W, scaled):
    """GPT-Neo's forward with the division by √d_k put back (or not): the reference's attention with scale."""
    orig = ref.attention
    dh = cfg["hidden_size"] // cfg["num_heads"]

    def att(q, k, v, scale, **kw):
        return orig(q, k, v, 1 / math.sqrt(dh) if scaled else scale, **kw)
    ref.attention = att
    try:
        return ref.forward(cfg, W, TOKENS)
    finally:
        ref.attention = orig


if __name__ == "__main__":
    main()
