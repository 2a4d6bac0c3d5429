#!/usr/bin/python3
"""Reference fixtures for qkv, computed in float64 with PyTorch autograd.

Run with Debian's interpreter (python3-torch, python3-numpy):

    /usr/bin/python3 tests/reference/make_fixtures.py

Everything is deterministic: weights and inputs come from numpy's PCG64 with fixed seeds,
are rounded to float32 (or bf16 / f16 for the reduced-precision fixtures) BEFORE any expected
value is computed, and all expected values are computed in float64 from exactly those
rounded numbers. GPT-2 is implemented here from its definition (HF GPT-2 conventions), not
from `transformers`; safetensors, .npy and llm.c .bin files are written with numpy/struct.

The script ends with a self-check that re-reads every file it wrote with independent minimal
parsers and recomputes the forward pass (and central-difference gradients) with plain numpy.
README.md next to this file lists what every file is.
"""

import json
import math
import shutil
import struct
import sys
from pathlib import Path

import numpy as np
import torch

torch.set_default_dtype(torch.float64)
torch.use_deterministic_algorithms(True)
torch.set_num_threads(1)  # fixed reduction order -> byte-identical reruns on one machine

HERE = Path(__file__).resolve().parent
OUT = HERE / "fixtures"

SEED = 20240601
TOKENS = np.array([3, 57, 14, 92, 0, 57, 14, 92, 41, 100, 7, 57], dtype=np.int64)

# ----------------------------------------------------------------------------------------------
# configs

TINY = dict(name="tiny", vocab_size=101, n_positions=16, n_embd=24, n_layer=2, n_head=3,
            attn_only=False)
TINY_ATTN_ONLY = dict(name="tiny_attn_only", vocab_size=101, n_positions=16, n_embd=24,
                      n_layer=2, n_head=4, attn_only=True)
LN_EPS = 1e-5

# Random-weight scales: chosen so that attention rows are peaked but not one-hot
# (mean max attention weight is printed and asserted to lie in [0.3, 0.9]).
SCALES = dict(wte=0.5, wpe=0.3, ln_w_noise=0.2, ln_b=0.1, c_attn_w=0.35, c_attn_b=0.2,
              c_proj_w=0.2, c_proj_b=0.05, c_fc_w=0.25, c_fc_b=0.1, mlp_proj_w=0.1,
              mlp_proj_b=0.05)


def hf_config(cfg):
    return {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "vocab_size": cfg["vocab_size"],
        "n_positions": cfg["n_positions"],
        "n_ctx": cfg["n_positions"],
        "n_embd": cfg["n_embd"],
        "n_layer": cfg["n_layer"],
        "n_head": cfg["n_head"],
        "n_inner": None,
        "layer_norm_epsilon": LN_EPS,
        "activation_function": "gelu_new",
        "qkv_attn_only": cfg["attn_only"],
    }


def param_shapes(cfg):
    """HF GPT-2 parameter names (no `transformer.` prefix) and shapes, in checkpoint order."""
    V, P, d, L = cfg["vocab_size"], cfg["n_positions"], cfg["n_embd"], cfg["n_layer"]
    shapes = [("wte.weight", (V, d)), ("wpe.weight", (P, d))]
    for l in range(L):
        h = f"h.{l}."
        shapes += [
            (h + "ln_1.weight", (d,)), (h + "ln_1.bias", (d,)),
            (h + "attn.c_attn.weight", (d, 3 * d)), (h + "attn.c_attn.bias", (3 * d,)),
            (h + "attn.c_proj.weight", (d, d)), (h + "attn.c_proj.bias", (d,)),
        ]
        if not cfg["attn_only"]:
            shapes += [
                (h + "ln_2.weight", (d,)), (h + "ln_2.bias", (d,)),
                (h + "mlp.c_fc.weight", (d, 4 * d)), (h + "mlp.c_fc.bias", (4 * d,)),
                (h + "mlp.c_proj.weight", (4 * d, d)), (h + "mlp.c_proj.bias", (d,)),
            ]
    shapes += [("ln_f.weight", (d,)), ("ln_f.bias", (d,))]
    return shapes


def make_params(cfg, rng):
    """Random float32 weights (returned as float32 numpy arrays)."""
    s = SCALES
    out = {}
    for name, shape in param_shapes(cfg):
        leaf = name.split(".", 2)[-1] if name.startswith("h.") else name
        if leaf in ("ln_1.weight", "ln_2.weight", "ln_f.weight"):
            a = 1.0 + s["ln_w_noise"] * rng.standard_normal(shape)
        elif leaf in ("ln_1.bias", "ln_2.bias", "ln_f.bias"):
            a = s["ln_b"] * rng.standard_normal(shape)
        else:
            key = {"wte.weight": "wte", "wpe.weight": "wpe",
                   "attn.c_attn.weight": "c_attn_w", "attn.c_attn.bias": "c_attn_b",
                   "attn.c_proj.weight": "c_proj_w", "attn.c_proj.bias": "c_proj_b",
                   "mlp.c_fc.weight": "c_fc_w", "mlp.c_fc.bias": "c_fc_b",
                   "mlp.c_proj.weight": "mlp_proj_w", "mlp.c_proj.bias": "mlp_proj_b"}[leaf]
            a = s[key] * rng.standard_normal(shape)
        out[name] = a.astype(np.float32)
    return out


# ----------------------------------------------------------------------------------------------
# reduced precision rounding

def to_bf16_bits(a32):
    """float32 -> bf16 bit patterns (uint16), round to nearest, ties to even. No NaNs here."""
    u = np.ascontiguousarray(a32, dtype=np.float32).view(np.uint32).astype(np.uint64)
    assert np.all(np.isfinite(a32))
    rounding = ((u >> 16) & 1) + 0x7FFF
    return ((u + rounding) >> 16).astype(np.uint16)


def bf16_bits_to_f32(b):
    return (b.astype(np.uint32) << 16).view(np.float32)


def round_bf16(a32):
    return bf16_bits_to_f32(to_bf16_bits(a32)).reshape(a32.shape)


def round_f16(a32):
    return a32.astype(np.float16)  # numpy: round to nearest even


# ----------------------------------------------------------------------------------------------
# the model, from its definition, in float64 torch

def layer_norm(x, w, b, eps=LN_EPS):
    # x [T, d] -> [T, d]; biased variance, eps inside the sqrt (torch.nn.LayerNorm semantics)
    mu = x.mean(dim=-1, keepdim=True)
    var = ((x - mu) ** 2).mean(dim=-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * w + b


def gelu_new(x):
    # GPT-2's gelu_new: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def attention(u, W_attn, b_attn, W_proj, b_proj, H, rec=None, prefix=""):
    """u [T, d] -> attn_out [T, d]; records TransformerLens-named hooks (batch dim dropped)."""
    T, d = u.shape
    dh = d // H
    qkv = u @ W_attn + b_attn                        # [T, 3d]
    q = qkv[:, 0 * d:1 * d].reshape(T, H, dh)        # head h = columns [h*dh, (h+1)*dh)
    k = qkv[:, 1 * d:2 * d].reshape(T, H, dh)
    v = qkv[:, 2 * d:3 * d].reshape(T, H, dh)
    S = torch.einsum("thd,shd->hts", q, k) / math.sqrt(dh)   # [H, T(query), T(key)]
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    S_masked = S.masked_fill(~causal, float("-inf"))
    A = torch.softmax(S_masked, dim=-1)
    z = torch.einsum("hts,shd->thd", A, v)           # [T, H, dh]
    out = z.reshape(T, d) @ W_proj + b_proj
    if rec is not None:
        rec(prefix + "attn.hook_q", q)
        rec(prefix + "attn.hook_k", k)
        rec(prefix + "attn.hook_v", v)
        rec(prefix + "attn.hook_attn_scores", S_masked)
        rec(prefix + "attn.hook_pattern", A)
        rec(prefix + "attn.hook_z", z)
    return out, dict(q=q, k=k, v=v, S=S, A=A, z=z)


def gpt2_forward(P, tokens, cfg, rec=None):
    """P: name -> float64 tensor (HF names). Returns logits [T, V]."""
    T = len(tokens)
    H, L = cfg["n_head"], cfg["n_layer"]
    idx = torch.as_tensor(tokens)
    x = P["wte.weight"][idx] + P["wpe.weight"][:T]
    r = rec if rec is not None else (lambda n, t: None)
    for l in range(L):
        h, b = f"h.{l}.", f"blocks.{l}."
        r(b + "hook_resid_pre", x)
        u = layer_norm(x, P[h + "ln_1.weight"], P[h + "ln_1.bias"])
        r(b + "ln1.hook_normalized", u)
        a, _ = attention(u, P[h + "attn.c_attn.weight"], P[h + "attn.c_attn.bias"],
                         P[h + "attn.c_proj.weight"], P[h + "attn.c_proj.bias"], H,
                         rec, b)
        r(b + "hook_attn_out", a)
        x = x + a
        if not cfg["attn_only"]:
            r(b + "hook_resid_mid", x)
            u2 = layer_norm(x, P[h + "ln_2.weight"], P[h + "ln_2.bias"])
            m = gelu_new(u2 @ P[h + "mlp.c_fc.weight"] + P[h + "mlp.c_fc.bias"])
            m = m @ P[h + "mlp.c_proj.weight"] + P[h + "mlp.c_proj.bias"]
            r(b + "hook_mlp_out", m)
            x = x + m
        r(b + "hook_resid_post", x)
    xf = layer_norm(x, P["ln_f.weight"], P["ln_f.bias"])
    r("ln_final.hook_normalized", xf)
    logits = xf @ P["wte.weight"].T                  # tied unembedding
    r("logits", logits)
    return logits


def next_token_loss(logits, tokens):
    # mean cross-entropy of logits[t] predicting tokens[t+1], t = 0..T-2
    tgt = torch.as_tensor(tokens[1:])
    logp = torch.log_softmax(logits[:-1], dim=-1)
    return -logp[torch.arange(len(tgt)), tgt].mean()


def run_model(params32, cfg, tokens, with_grads=True):
    """Forward (+ backward) in float64. Returns (acts dict, logits, loss, grads dict)."""
    P = {n: torch.tensor(a.astype(np.float64), requires_grad=with_grads)
         for n, a in params32.items()}
    acts = {}

    def rec(name, t):
        assert name not in acts, name
        acts[name] = t.detach().numpy().copy()

    logits = gpt2_forward(P, tokens, cfg, rec)
    loss = next_token_loss(logits, tokens)
    grads = {}
    if with_grads:
        loss.backward()
        grads = {n: p.grad.detach().numpy().copy() for n, p in P.items()}
    return acts, logits.detach().numpy().copy(), float(loss.detach()), grads


def sanity_against_torch_ops():
    """Our LN / GELU / attention agree with torch's built-ins (guards the definitions)."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(7, 10, generator=g)
    w, b = torch.randn(10, generator=g), torch.randn(10, generator=g)
    ref = torch.nn.functional.layer_norm(x, (10,), w, b, LN_EPS)
    assert torch.allclose(layer_norm(x, w, b), ref, rtol=0, atol=1e-13)
    ref = torch.nn.functional.gelu(x, approximate="tanh")
    assert torch.allclose(gelu_new(x), ref, rtol=0, atol=1e-14)


# ----------------------------------------------------------------------------------------------
# writers

def save_npy(path, a, dtype=np.float64):
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path, np.array(a, dtype=dtype, order="C"), allow_pickle=False)


def write_json(path, obj):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2) + "\n")


def write_safetensors(path, tensors, header_align, metadata=None):
    """tensors: list of (name, numpy array) in data order; dtypes F32 or F16.

    header_align: "odd" -> data section starts at an odd byte offset (as in GPT-2's real
    release, whose header is 14,283 bytes); int n -> data starts at a multiple of n.
    The JSON header is padded with trailing spaces, which the format allows.
    """
    dt = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16"}
    header, blobs, off = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, a in tensors:
        a = np.array(a, order="C", copy=True)  # (np.ascontiguousarray would turn shape [] into [1])
        raw = a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": dt[a.dtype], "shape": list(a.shape),
                        "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    hj = json.dumps(header, separators=(",", ":")).encode()
    n = len(hj)
    if header_align == "odd":
        if (8 + n) % 2 == 0:
            n += 1
        n += 2  # a little visible padding, keeps the start odd
    else:
        n = -(-(8 + n) // header_align) * header_align - 8
    hj = hj + b" " * (n - len(hj))
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for raw in blobs:
            f.write(raw)
    return 8 + len(hj)


def write_hf_dir(dirpath, cfg, params, *, prefix="", buffers=False, lm_head=False,
                 header_align="odd", dtype=np.float32, metadata=None):
    dirpath.mkdir(parents=True, exist_ok=True)
    write_json(dirpath / "config.json", hf_config(cfg))
    P = cfg["n_positions"]
    tensors = []
    for name, _ in param_shapes(cfg):
        tensors.append((prefix + name, params[name].astype(dtype)))
        if buffers and name.endswith("attn.c_proj.bias"):
            l = name.split(".")[1]
            mask = np.tril(np.ones((P, P), dtype=np.float32)).reshape(1, 1, P, P)
            tensors.append((f"{prefix}h.{l}.attn.bias", mask))
            tensors.append((f"{prefix}h.{l}.attn.masked_bias", np.array(-1e4, np.float32)))
    if lm_head:
        tensors.append(("lm_head.weight", params["wte.weight"].astype(dtype)))
    return write_safetensors(dirpath / "model.safetensors", tensors, header_align, metadata)


LLMC_PADDED_VOCAB = 128


def llmc_tensors(cfg, params):
    """llm.c parameter order; matrices [out, in] (transposed from HF Conv1D)."""
    V, C, L = cfg["vocab_size"], cfg["n_embd"], cfg["n_layer"]
    Vp = LLMC_PADDED_VOCAB
    wte = np.zeros((Vp, C), np.float32)
    wte[:V] = params["wte.weight"]

    def stack(leaf, transpose=False):
        arrs = [params[f"h.{l}.{leaf}"] for l in range(L)]
        return np.stack([a.T if transpose else a for a in arrs])

    return [
        ("wte", wte), ("wpe", params["wpe.weight"]),
        ("ln1w", stack("ln_1.weight")), ("ln1b", stack("ln_1.bias")),
        ("qkvw", stack("attn.c_attn.weight", True)), ("qkvb", stack("attn.c_attn.bias")),
        ("attprojw", stack("attn.c_proj.weight", True)), ("attprojb", stack("attn.c_proj.bias")),
        ("ln2w", stack("ln_2.weight")), ("ln2b", stack("ln_2.bias")),
        ("fcw", stack("mlp.c_fc.weight", True)), ("fcb", stack("mlp.c_fc.bias")),
        ("fcprojw", stack("mlp.c_proj.weight", True)), ("fcprojb", stack("mlp.c_proj.bias")),
        ("lnfw", params["ln_f.weight"]), ("lnfb", params["ln_f.bias"]),
    ]


def write_llmc(path, cfg, params, bf16):
    header = np.zeros(256, np.int32)
    header[:8] = [20240326, 5 if bf16 else 3, cfg["n_positions"], cfg["vocab_size"],
                  cfg["n_layer"], cfg["n_head"], cfg["n_embd"], LLMC_PADDED_VOCAB]
    with open(path, "wb") as f:
        f.write(header.astype("<i4").tobytes())
        for _, a in llmc_tensors(cfg, params):
            a = np.ascontiguousarray(a, dtype=np.float32)
            f.write(to_bf16_bits(a).astype("<u2").tobytes() if bf16 else a.astype("<f4").tobytes())


# ----------------------------------------------------------------------------------------------
# fixture groups

def write_expected(dirpath, tokens, acts, loss, grads):
    save_npy(dirpath / "tokens.npy", tokens, np.int64)
    for name, a in acts.items():
        save_npy(dirpath / f"{name}.npy", a)
    save_npy(dirpath / "loss.npy", np.array([loss]))
    for name, g in grads.items():
        save_npy(dirpath / "grads" / f"{name}.npy", g)


def attention_stats(acts, cfg):
    pats = [acts[f"blocks.{l}.attn.hook_pattern"] for l in range(cfg["n_layer"])]
    mx = np.stack(pats).max(axis=-1)          # [L, H, T]
    return float(mx.mean()), float(mx[:, :, 1:].mean())


def make_models(rng):
    summary = {}
    for cfg in (TINY, TINY_ATTN_ONLY):
        name = cfg["name"]
        params = make_params(cfg, rng)
        acts, logits, loss, grads = run_model(params, cfg, TOKENS)
        mean_max, mean_max_no0 = attention_stats(acts, cfg)
        assert 0.3 <= mean_max <= 0.9, (name, mean_max)
        S = np.concatenate([acts[f"blocks.{l}.attn.hook_attn_scores"]
                            for l in range(cfg["n_layer"])])[:, 1:, :]   # rows t >= 1
        S = np.where(np.isinf(S), np.nan, S)
        spread = np.nanmax(S, -1) - np.nanmin(S, -1)
        print(f"[{name}] loss {loss:.6f}; mean max attention weight {mean_max:.3f} "
              f"(rows t>=1 only: {mean_max_no0:.3f}); mean score spread (max-min, t>=1) "
              f"{np.mean(spread):.2f}")
        summary[name] = dict(params=params, logits=logits, loss=loss, mean_max=mean_max,
                             mean_max_no0=mean_max_no0)
        off = write_hf_dir(OUT / name, cfg, params, buffers=True, header_align="odd")
        assert off % 2 == 1
        write_expected(OUT / f"{name}_expected", TOKENS, acts, loss, grads)

        if name == "tiny":
            write_hf_dir(OUT / "tiny_prefixed", cfg, params, prefix="transformer.",
                         lm_head=True, header_align=8, metadata={"format": "pt"})
            write_llmc(OUT / "tiny.bin", cfg, params, bf16=False)
            write_llmc(OUT / "tiny_bf16.bin", cfg, params, bf16=True)
            pb = {n: round_bf16(a) for n, a in params.items()}
            _, logits_bf, _, _ = run_model(pb, cfg, TOKENS, with_grads=False)
            save_npy(OUT / "tiny_bf16_expected" / "tokens.npy", TOKENS, np.int64)
            save_npy(OUT / "tiny_bf16_expected" / "logits.npy", logits_bf)
            write_hf_dir(OUT / "tiny_f16", cfg, params, header_align=8, dtype=np.float16)
            pf = {n: round_f16(a).astype(np.float32) for n, a in params.items()}
            _, logits_f16, _, _ = run_model(pf, cfg, TOKENS, with_grads=False)
            save_npy(OUT / "tiny_f16_expected" / "tokens.npy", TOKENS, np.int64)
            save_npy(OUT / "tiny_f16_expected" / "logits.npy", logits_f16)
            print(f"[tiny] max |logits(bf16 weights) - logits(f32)| "
                  f"{np.abs(logits_bf - logits).max():.3e}; f16: "
                  f"{np.abs(logits_f16 - logits).max():.3e}")
    return summary


SUB = dict(T=5, d=12, H=3)


def make_sublayer(rng):
    """x -> x + c_proj(merge(attn(split(c_attn(ln_1(x)))))), causal, and its gradients."""
    T, d, H = SUB["T"], SUB["d"], SUB["H"]
    f32 = lambda a: a.astype(np.float32).astype(np.float64)  # inputs exactly float32 values
    inp = {
        "x": f32(rng.standard_normal((T, d))),
        "ln_1_weight": f32(1.0 + 0.2 * rng.standard_normal(d)),
        "ln_1_bias": f32(0.1 * rng.standard_normal(d)),
        "c_attn_weight": f32(0.45 * rng.standard_normal((d, 3 * d))),
        "c_attn_bias": f32(0.2 * rng.standard_normal(3 * d)),
        "c_proj_weight": f32(0.3 * rng.standard_normal((d, d))),
        "c_proj_bias": f32(0.1 * rng.standard_normal(d)),
    }
    dout = f32(rng.standard_normal((T, d)))
    P = {n: torch.tensor(a, requires_grad=True) for n, a in inp.items()}
    u = layer_norm(P["x"], P["ln_1_weight"], P["ln_1_bias"])
    a, tr = attention(u, P["c_attn_weight"], P["c_attn_bias"], P["c_proj_weight"],
                      P["c_proj_bias"], H)
    out = P["x"] + a
    (out * torch.tensor(dout)).sum().backward()
    D = OUT / "sublayer"
    for n, arr in inp.items():
        save_npy(D / f"{n}.npy", arr)
    save_npy(D / "dout.npy", dout)
    save_npy(D / "out.npy", out.detach().numpy())
    for n, p in P.items():
        save_npy(D / (f"dx.npy" if n == "x" else f"d_{n}.npy"), p.grad.numpy())
    save_npy(D / "u.npy", u.detach().numpy())
    for n in ("q", "k", "v", "z"):
        save_npy(D / f"{n}.npy", tr[n].detach().permute(1, 0, 2).numpy())  # [H, T, dh]
    save_npy(D / "S.npy", tr["S"].detach().numpy())   # scaled, unmasked
    save_npy(D / "A.npy", tr["A"].detach().numpy())   # causal softmax
    mx = tr["A"].detach().numpy().max(-1)
    print(f"[sublayer] mean max attention weight {mx.mean():.3f} (rows t>=1: {mx[:, 1:].mean():.3f})")


def softmax_np(s):
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def make_seed_examples():
    # seed 004: "sat · bank · river" (Portuguese script: sentei · banco · praça)
    K = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 2.0]])
    V = np.array([[1.0, 0.0], [0.5, 0.5], [1.0, 0.0]])
    q = np.array([1.0, 2.0])
    s = K @ q
    sc = s / np.sqrt(2.0)
    w = softmax_np(sc)
    Q = np.array([[2.0, 0.0], [1.0, 2.0], [0.0, 1.0]])
    A = softmax_np(Q @ K.T / np.sqrt(K.shape[-1]))
    O = A @ V
    # seed 001: query of "it" against robot / patient / it
    q1 = np.array([1.0, 0.5])
    K1 = np.array([[2.0, 1.0], [0.5, -1.0], [0.0, 1.0]])
    s1 = K1 @ q1
    sc1 = s1 / np.sqrt(2.0)
    e1 = np.exp(sc1)
    w1 = e1 / e1.sum()
    L = lambda a: np.asarray(a).tolist()
    obj = {
        "seed_004_bank": {
            "source": "seeds/004: keys/values of 'sat', 'bank', 'river'; query of 'bank'; "
                      "no causal mask (the seed's attention() has none)",
            "tokens": ["sat", "bank", "river"],
            "K": L(K), "V": L(V), "q": L(q), "d_k": 2,
            "scores": L(s), "scaled": L(sc), "weights": L(w), "output": L(w @ V),
            "all_queries": {"Q": L(Q), "A": L(A), "O": L(O)},
        },
        "seed_001_robot": {
            "source": "seeds/001: query of 'it' against keys robot, patient, it; d_k = 2",
            "tokens": ["robot", "patient", "it"],
            "q": L(q1), "K": L(K1), "d_k": 2,
            "scores": L(s1), "scaled": L(sc1), "exp_scaled": L(e1), "sum_exp": float(e1.sum()),
            "weights": L(w1),
        },
    }
    # the seeds' printed (rounded) numbers, to catch a transcription slip
    assert np.allclose(sc, [0.71, 2.12, 2.83], atol=0.005)
    assert np.allclose(w, [0.07, 0.31, 0.62], atol=0.005)
    assert np.allclose(w @ V, [0.85, 0.15], atol=0.005)
    assert np.allclose(s1, [2.5, 0.0, 0.5]) and np.allclose(sc1, [1.77, 0.0, 0.35], atol=0.005)
    assert np.allclose(w1, [0.71, 0.12, 0.17], atol=0.005)
    assert np.allclose(A[1], w) and np.allclose(O[1], w @ V)
    write_json(OUT / "seed_examples.json", obj)


# ----------------------------------------------------------------------------------------------
# self-check: independent minimal readers + a plain-numpy forward

def read_npy(path):
    """Minimal .npy v1/v2 reader (no np.load)."""
    b = path.read_bytes()
    assert b[:6] == b"\x93NUMPY", path
    major = b[6]
    if major == 1:
        hlen, start = struct.unpack("<H", b[8:10])[0], 10
    else:
        hlen, start = struct.unpack("<I", b[8:12])[0], 12
    hdr = b[start:start + hlen].decode("latin1")
    assert (start + hlen) % 64 == 0, path
    d = eval(hdr, {"__builtins__": {}}, {"True": True, "False": False})  # literal dict
    assert d["fortran_order"] is False, path
    assert d["descr"] in ("<f8", "<i8"), (path, d["descr"])
    shape = tuple(d["shape"])
    data = np.frombuffer(b[start + hlen:], dtype=np.dtype(d["descr"]))
    assert data.size == int(np.prod(shape)), path
    return data.reshape(shape)


def read_safetensors(path, expect_align):
    b = path.read_bytes()
    (n,) = struct.unpack("<Q", b[:8])
    raw = b[8:8 + n]
    assert raw[:1] == b"{", path
    text = raw.decode("utf-8")
    assert text.rstrip(" ") == text.rstrip(), "padding must be spaces only"
    hdr = json.loads(text)
    start = 8 + n
    if expect_align == "odd":
        assert start % 2 == 1, (path, start)
    else:
        assert start % expect_align == 0, (path, start)
    hdr.pop("__metadata__", None)
    sizes = {"F32": 4, "F16": 2}
    np_dt = {"F32": "<f4", "F16": "<f2"}
    spans, out = [], {}
    for name, e in hdr.items():
        shape = tuple(e["shape"])
        lo, hi = e["data_offsets"]
        assert hi - lo == sizes[e["dtype"]] * int(np.prod(shape, dtype=np.int64)), name
        spans.append((lo, hi))
        out[name] = np.frombuffer(b[start + lo:start + hi], dtype=np_dt[e["dtype"]]).reshape(shape)
    spans.sort()
    pos = 0
    for lo, hi in spans:  # contiguous, no holes, no overlap, covers the data section exactly
        assert lo == pos, (path, lo, pos)
        pos = hi
    assert start + pos == len(b), (path, start + pos, len(b))
    return out, start


def np_forward(W, tokens, cfg):
    """Plain numpy GPT-2 forward (float64); W: HF names -> arrays. Returns logits, patterns."""
    def ln(x, w, b):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + LN_EPS) * w + b

    W = {k: np.asarray(v, np.float64) for k, v in W.items()}
    T, d, H = len(tokens), cfg["n_embd"], cfg["n_head"]
    dh = d // H
    x = W["wte.weight"][tokens] + W["wpe.weight"][np.arange(T)]
    mask = np.tril(np.ones((T, T), bool))
    pats = []
    for l in range(cfg["n_layer"]):
        g = lambda n: W[f"h.{l}.{n}"]
        u = ln(x, g("ln_1.weight"), g("ln_1.bias"))
        qkv = u @ g("attn.c_attn.weight") + g("attn.c_attn.bias")
        z = np.zeros((T, d))
        for h in range(H):
            q = qkv[:, h * dh:(h + 1) * dh]
            k = qkv[:, d + h * dh:d + (h + 1) * dh]
            v = qkv[:, 2 * d + h * dh:2 * d + (h + 1) * dh]
            S = np.where(mask, q @ k.T / np.sqrt(dh), -np.inf)
            A = softmax_np(S)
            pats.append(A)
            z[:, h * dh:(h + 1) * dh] = A @ v
        x = x + z @ g("attn.c_proj.weight") + g("attn.c_proj.bias")
        if not cfg["attn_only"]:
            u2 = ln(x, g("ln_2.weight"), g("ln_2.bias"))
            hdn = u2 @ g("mlp.c_fc.weight") + g("mlp.c_fc.bias")
            hdn = 0.5 * hdn * (1 + np.tanh(np.sqrt(2 / np.pi) * (hdn + 0.044715 * hdn ** 3)))
            x = x + hdn @ g("mlp.c_proj.weight") + g("mlp.c_proj.bias")
    xf = ln(x, W["ln_f.weight"], W["ln_f.bias"])
    return xf @ W["wte.weight"].T, pats


def np_loss(W, tokens, cfg):
    logits, _ = np_forward(W, tokens, cfg)
    z = logits[:-1]
    m = z.max(-1, keepdims=True)
    lse = (m + np.log(np.exp(z - m).sum(-1, keepdims=True)))[:, 0]
    return float(np.mean(lse - z[np.arange(len(tokens) - 1), tokens[1:]]))


def close(a, b, tol, what):
    err = np.max(np.abs(np.asarray(a) - np.asarray(b))) if np.size(a) else 0.0
    assert np.shape(a) == np.shape(b) and err <= tol, (what, np.shape(a), np.shape(b), err)
    return err


def self_check(summary):
    print("self-check ...")
    rng = np.random.default_rng(7)
    for cfg in (TINY, TINY_ATTN_ONLY):
        name, L, T = cfg["name"], cfg["n_layer"], len(TOKENS)
        d, H, V = cfg["n_embd"], cfg["n_head"], cfg["vocab_size"]
        dh = d // H
        cj = json.loads((OUT / name / "config.json").read_text())
        assert cj["n_embd"] == d and cj["n_head"] == H and cj["qkv_attn_only"] == cfg["attn_only"]
        st, start = read_safetensors(OUT / name / "model.safetensors", "odd")
        names = [n for n, _ in param_shapes(cfg)]
        bufs = [f"h.{l}.attn.{b}" for l in range(L) for b in ("bias", "masked_bias")]
        assert sorted(st) == sorted(names + bufs), name
        for l in range(L):
            m = st[f"h.{l}.attn.bias"]
            P = cfg["n_positions"]
            assert m.shape == (1, 1, P, P) and np.array_equal(m[0, 0], np.tril(np.ones((P, P))))
            mb = st[f"h.{l}.attn.masked_bias"]
            assert mb.shape == () and mb == -1e4
        for n, shape in param_shapes(cfg):
            assert st[n].shape == shape and np.array_equal(st[n], summary[name]["params"][n]), n
        W = {n: st[n] for n in names}
        E = OUT / f"{name}_expected"
        tokens = read_npy(E / "tokens.npy")
        assert tokens.dtype == np.int64 and np.array_equal(tokens, TOKENS)
        logits_np, pats = np_forward(W, tokens, cfg)
        exp_logits = read_npy(E / "logits.npy")
        err = close(logits_np, exp_logits, 1e-11, (name, "logits"))
        for l in range(L):
            pat = read_npy(E / f"blocks.{l}.attn.hook_pattern.npy")
            close(np.stack(pats[l * H:(l + 1) * H]), pat, 1e-12, (name, l, "pattern"))
        # shapes of every expected activation
        want = {"ln_final.hook_normalized": (T, d), "logits": (T, V), "loss": (1,),
                "tokens": (T,)}
        for l in range(L):
            b = f"blocks.{l}."
            for k in ("hook_resid_pre", "ln1.hook_normalized", "hook_attn_out", "hook_resid_post"):
                want[b + k] = (T, d)
            if not cfg["attn_only"]:
                want[b + "hook_resid_mid"] = (T, d)
                want[b + "hook_mlp_out"] = (T, d)
            for k in ("hook_q", "hook_k", "hook_v", "hook_z"):
                want[b + "attn." + k] = (T, H, dh)
            for k in ("hook_attn_scores", "hook_pattern"):
                want[b + "attn." + k] = (H, T, T)
        have = {p.name[:-4] for p in E.glob("*.npy")}
        assert have == set(want), (name, have ^ set(want))
        for k, shp in want.items():
            a = read_npy(E / f"{k}.npy")
            assert a.shape == shp, (name, k, a.shape, shp)
            if k.endswith("hook_attn_scores"):
                iu = np.triu_indices(T, 1)
                assert np.all(np.isneginf(a[:, iu[0], iu[1]]))
                assert np.all(np.isfinite(a[:, np.tril_indices(T)[0], np.tril_indices(T)[1]]))
            elif k != "tokens":
                assert np.all(np.isfinite(a)), k
        loss = read_npy(E / "loss.npy")[0]
        close(np_loss(W, tokens, cfg), loss, 1e-12, (name, "loss"))
        # gradients: every parameter present, shapes match, central differences on a sample
        gfiles = {p.name[:-4] for p in (E / "grads").glob("*.npy")}
        assert gfiles == set(names), (name, gfiles ^ set(names))
        Wd = {n: a.astype(np.float64) for n, a in W.items()}
        worst = 0.0
        for n, shape in param_shapes(cfg):
            g = read_npy(E / "grads" / f"{n}.npy")
            assert g.shape == shape, n
            flat = Wd[n].reshape(-1)
            for i in rng.choice(flat.size, size=min(6, flat.size), replace=False):
                h = 1e-5
                old = flat[i]
                flat[i] = old + h
                lp = np_loss(Wd, tokens, cfg)
                flat[i] = old - h
                lm = np_loss(Wd, tokens, cfg)
                flat[i] = old
                fd = (lp - lm) / (2 * h)
                e = abs(fd - g.reshape(-1)[i])
                worst = max(worst, e)
                assert e < 1e-8 + 1e-6 * abs(fd), (name, n, i, fd, g.reshape(-1)[i])
        # wte gradient really includes the unembedding: rows of unused tokens are nonzero
        gw = read_npy(E / "grads" / "wte.weight.npy")
        unused = np.setdiff1d(np.arange(V), tokens)
        assert np.all(np.abs(gw[unused]).sum(-1) > 0)
        print(f"  {name}: logits max err {err:.1e}, grad central-diff max err {worst:.1e}, "
              f"data offset {start} (odd)")

    # tiny_prefixed: same weights, prefixed, lm_head == wte, no buffers, 8-aligned
    cfg = TINY
    params = summary["tiny"]["params"]
    st, start = read_safetensors(OUT / "tiny_prefixed" / "model.safetensors", 8)
    names = [n for n, _ in param_shapes(cfg)]
    assert sorted(st) == sorted(["transformer." + n for n in names] + ["lm_head.weight"])
    for n in names:
        assert np.array_equal(st["transformer." + n], params[n]), n
    assert np.array_equal(st["lm_head.weight"], params["wte.weight"])
    assert json.loads((OUT / "tiny_prefixed" / "config.json").read_text()) == hf_config(cfg)
    print(f"  tiny_prefixed: ok, data offset {start}")

    # tiny_f16
    st, start = read_safetensors(OUT / "tiny_f16" / "model.safetensors", 8)
    assert sorted(st) == sorted(names)
    assert all(a.dtype == np.float16 for a in st.values())
    lf, _ = np_forward(st, TOKENS, cfg)
    e16 = close(lf, read_npy(OUT / "tiny_f16_expected" / "logits.npy"), 1e-11, "f16 logits")
    close(lf, summary["tiny"]["logits"], 0.05, "f16 vs f32 logits (sanity)")
    print(f"  tiny_f16: logits max err {e16:.1e}, data offset {start}")

    # llm.c files
    V, C, L, maxT, Vp = cfg["vocab_size"], cfg["n_embd"], cfg["n_layer"], cfg["n_positions"], 128
    nparams = (Vp * C + maxT * C + L * (2 * C + 3 * C * C + 3 * C + C * C + C + 2 * C
                                        + 4 * C * C + 4 * C + 4 * C * C + C) + 2 * C)
    for fname, version, esize in (("tiny.bin", 3, 4), ("tiny_bf16.bin", 5, 2)):
        b = (OUT / fname).read_bytes()
        assert len(b) == 1024 + esize * nparams, (fname, len(b), 1024 + esize * nparams)
        hdr = struct.unpack("<256i", b[:1024])
        assert hdr[:8] == (20240326, version, maxT, V, L, cfg["n_head"], C, Vp), hdr[:8]
        assert not any(hdr[8:])
        if esize == 4:
            flat = np.frombuffer(b[1024:], "<f4").astype(np.float32)
        else:
            flat = (np.frombuffer(b[1024:], "<u2").astype(np.uint32) << 16).view(np.float32)
        pos = 0

        def take(*shape):
            nonlocal pos
            n = int(np.prod(shape))
            a = flat[pos:pos + n].reshape(shape)
            pos += n
            return a

        wte = take(Vp, C)
        assert not wte[V:].any(), "padded vocab rows must be zero"
        Wl = {"wte.weight": wte[:V], "wpe.weight": take(maxT, C)}
        per = [("ln_1.weight", (C,), 0), ("ln_1.bias", (C,), 0),
               ("attn.c_attn.weight", (3 * C, C), 1), ("attn.c_attn.bias", (3 * C,), 0),
               ("attn.c_proj.weight", (C, C), 1), ("attn.c_proj.bias", (C,), 0),
               ("ln_2.weight", (C,), 0), ("ln_2.bias", (C,), 0),
               ("mlp.c_fc.weight", (4 * C, C), 1), ("mlp.c_fc.bias", (4 * C,), 0),
               ("mlp.c_proj.weight", (C, 4 * C), 1), ("mlp.c_proj.bias", (C,), 0)]
        for leaf, shape, tr in per:
            a = take(L, *shape)
            for l in range(L):
                Wl[f"h.{l}.{leaf}"] = a[l].T if tr else a[l]
        Wl["ln_f.weight"] = take(C)
        Wl["ln_f.bias"] = take(C)
        assert pos == nparams
        if esize == 4:
            for n in names:
                assert np.array_equal(Wl[n], params[n]), n
            e = close(np_forward(Wl, TOKENS, cfg)[0], summary["tiny"]["logits"], 1e-11, fname)
        else:
            for n in names:
                assert np.array_equal(Wl[n], round_bf16(params[n])), n
            e = close(np_forward(Wl, TOKENS, cfg)[0],
                      read_npy(OUT / "tiny_bf16_expected" / "logits.npy"), 1e-11, fname)
        print(f"  {fname}: {len(b)} bytes, logits max err {e:.1e}")
    # bf16 rounding is round-to-nearest-even (spot checks on hand-made bit patterns)
    t = np.array([0x3F808000, 0x3F818000, 0x3F808001, 0x3F807FFF], np.uint32).view(np.float32)
    assert list(to_bf16_bits(t)) == [0x3F80, 0x3F82, 0x3F81, 0x3F80]

    # sublayer: numpy recompute + central differences of sum(out * dout)
    D = OUT / "sublayer"
    T, d, H = SUB["T"], SUB["d"], SUB["H"]
    dh = d // H
    I = {n: read_npy(D / f"{n}.npy").copy() for n in
         ("x", "ln_1_weight", "ln_1_bias", "c_attn_weight", "c_attn_bias", "c_proj_weight",
          "c_proj_bias")}
    dout = read_npy(D / "dout.npy")

    def sub_fwd(I):
        x = I["x"]
        mu = x.mean(-1, keepdims=True)
        u = (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + LN_EPS)
        u = u * I["ln_1_weight"] + I["ln_1_bias"]
        qkv = u @ I["c_attn_weight"] + I["c_attn_bias"]
        q, k, v = (qkv[:, i * d:(i + 1) * d].reshape(T, H, dh).transpose(1, 0, 2) for i in range(3))
        S = q @ k.transpose(0, 2, 1) / np.sqrt(dh)
        A = softmax_np(np.where(np.tril(np.ones((T, T), bool)), S, -np.inf))
        z = A @ v
        out = x + z.transpose(1, 0, 2).reshape(T, d) @ I["c_proj_weight"] + I["c_proj_bias"]
        return out, dict(u=u, q=q, k=k, v=v, S=S, A=A, z=z)

    out, tr = sub_fwd(I)
    close(out, read_npy(D / "out.npy"), 1e-12, "sublayer out")
    for n, a in tr.items():
        close(a, read_npy(D / f"{n}.npy"), 1e-12, f"sublayer {n}")
    worst = 0.0
    for n in I:
        g = read_npy(D / ("dx.npy" if n == "x" else f"d_{n}.npy"))
        assert g.shape == I[n].shape
        flat = I[n].reshape(-1)
        for i in range(flat.size):  # every entry
            old = flat[i]
            flat[i] = old + 1e-6
            fp = np.sum(sub_fwd(I)[0] * dout)
            flat[i] = old - 1e-6
            fm = np.sum(sub_fwd(I)[0] * dout)
            flat[i] = old
            fd = (fp - fm) / 2e-6
            e = abs(fd - g.reshape(-1)[i])
            worst = max(worst, e)
            assert e < 1e-7 + 1e-6 * abs(fd), (n, i, fd, g.reshape(-1)[i])
    print(f"  sublayer: forward ok, all gradients vs central differences max err {worst:.1e}")

    # seed examples
    obj = json.loads((OUT / "seed_examples.json").read_text())
    b = obj["seed_004_bank"]
    assert np.allclose(b["all_queries"]["A"][1], b["weights"], rtol=0, atol=1e-15)
    assert abs(sum(obj["seed_001_robot"]["weights"]) - 1) < 1e-15
    print("  seed_examples.json: ok")

    total = sum(p.stat().st_size for p in OUT.rglob("*") if p.is_file())
    assert total < 2 * 1024 * 1024, total
    print(f"self-check passed; fixtures total {total} bytes")


def main():
    assert sys.version_info >= (3, 9)
    sanity_against_torch_ops()
    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir(parents=True)
    rng = np.random.default_rng(SEED)
    summary = make_models(rng)
    make_sublayer(np.random.default_rng(SEED + 1))
    make_seed_examples()
    self_check(summary)


if __name__ == "__main__":
    main()
