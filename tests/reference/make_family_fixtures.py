#!/usr/bin/python3
"""Fixtures for every model family qkv runs: an independent float64 PyTorch forward per family.

For each case this script asks the qkv binary for a random checkpoint (`qkv init --arch …`, written
as Hugging Face lays that family out), reads it back with its own safetensors parser (numpy only),
runs the family's forward in float64 — written here from each family's published definition
(Hugging Face's modeling_<family>.py semantics), not from qkv's code — and writes

    fixtures/families/<case>/case.json           how to remake the checkpoint, and the tokens
    fixtures/families/<case>/expected.safetensors every TransformerLens hook and the logits (F32)

tests/model/families_test.cpp remakes each checkpoint with the same arguments (the init is
deterministic), runs qkv's forward and compares every hook.

Usage: /usr/bin/python3 tests/reference/make_family_fixtures.py build/qkv
(Debian's python3-torch + python3-numpy; torch runs single-threaded; about 5 s.)
"""
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch

torch.set_num_threads(1)
torch.set_default_dtype(torch.float64)

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures", "families")
TOKENS = [3, 57, 14, 92, 0, 57, 14, 92, 41, 100, 7, 57, 511, 8, 57, 14, 92, 250, 1, 57]  # T = 20

LONGROPE = 'rope_scaling={"type":"longrope","short_factor":[1.0,1.25,2.5,4.0],"long_factor":[1.5,3.0,9.0,30.0]}'

# case name -> (arch, init options). Windows shorter than T = 20 so they bite; GQA with n_kv < H;
# partial rotary; biases; bf16, f16 and sharded variants.
CASES = {
    "gpt2": ("gpt2", ["--set", "initializer_range=0.2"]),
    "llama": ("llama", ["--set", "initializer_range=0.2"]),
    "llama_mqa_bf16": ("llama", ["--set", "num_key_value_heads=1", "--set", "initializer_range=0.2", "--dtype", "bf16"]),
    "llama3_scaled_sharded": ("llama", ["--set", "initializer_range=0.2", "--set",
                                        'rope_scaling={"rope_type":"llama3","factor":8.0,"low_freq_factor":1.0,'
                                        '"high_freq_factor":4.0,"original_max_position_embeddings":16}',
                                        "--set", "rope_theta=500000.0", "--shards", "3"]),
    "mistral": ("mistral", ["--set", "initializer_range=0.2"]),
    "qwen2": ("qwen2", ["--set", "initializer_range=0.2"]),
    "qwen2_f16": ("qwen2", ["--set", "initializer_range=0.2", "--dtype", "f16"]),
    "gemma": ("gemma", ["--set", "initializer_range=0.2"]),
    "gemma2": ("gemma2", ["--set", "initializer_range=0.2"]),
    "gpt_neox": ("gpt_neox", ["--set", "initializer_range=0.2"]),
    "phi3": ("phi3", ["--set", "initializer_range=0.2"]),
    # Phi-3's longrope (its 128k models): T = 20 past the original length 8 (long factors), and within 32
    # (short factors); both extended to 64, so cos and sin are scaled.
    "phi3_longrope": ("phi3", ["--set", "initializer_range=0.2", "--set", LONGROPE, "--set",
                               "original_max_position_embeddings=8", "--set", "max_position_embeddings=64"]),
    "phi3_longrope_short": ("phi3", ["--set", "initializer_range=0.2", "--set", LONGROPE, "--set",
                                     "original_max_position_embeddings=32", "--set", "max_position_embeddings=64"]),
    "gpt_neo": ("gpt_neo", ["--set", "initializer_range=0.2"]),
}


# ---------------------------------------------------------------- safetensors, read and written here

def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        buf = data[b:e]
        if info["dtype"] == "F32":
            a = np.frombuffer(buf, "<f4").astype(np.float64)
        elif info["dtype"] == "F16":
            a = np.frombuffer(buf, "<f2").astype(np.float64)
        elif info["dtype"] == "BF16":
            a = (np.frombuffer(buf, "<u2").astype(np.uint32) << 16).view(np.float32).astype(np.float64)
        else:
            raise ValueError(name + ": dtype " + info["dtype"])
        out[name] = torch.from_numpy(a.reshape(info["shape"]).copy())
    return out


def read_checkpoint(d):
    if os.path.exists(os.path.join(d, "model.safetensors")):
        return read_safetensors(os.path.join(d, "model.safetensors"))
    index = json.load(open(os.path.join(d, "model.safetensors.index.json")))
    w = {}
    for f in sorted(set(index["weight_map"].values())):
        w.update(read_safetensors(os.path.join(d, f)))
    return w


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        b = np.ascontiguousarray(t.detach().numpy(), dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


# ---------------------------------------------------------------- pieces, from the published definitions

def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    y = (x - mu) / torch.sqrt(var + eps) * w
    return y + b if b is not None else y


def rms_norm(x, w, eps):  # Llama: weight * x * rsqrt(mean(x²) + eps)
    return w * (x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps))


def gemma_rms_norm(x, w, eps):  # Gemma: x * rsqrt(mean(x²) + eps) * (1 + weight)
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * (1.0 + w)


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def gelu_erf(x):
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def silu(x):
    return x * torch.sigmoid(x)


def linear(x, w, b=None):  # nn.Linear: weight [out, in]
    y = x @ w.T
    return y + b if b is not None else y


def longrope(cfg, scaling, dim, theta, seq_len):
    """Phi-3's longrope (Hugging Face's _compute_longrope_parameters with its dynamic update): the long
    factors once the sequence passes the original length, else the short ones; cos and sin scaled by the
    attention factor, by default sqrt(1 + ln(max / original) / ln(original)) when the model is extended."""
    orig = cfg.get("original_max_position_embeddings", cfg["max_position_embeddings"])
    ext = torch.tensor(scaling["long_factor"] if seq_len > orig else scaling["short_factor"])
    inv = 1.0 / (ext * theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    factor = cfg["max_position_embeddings"] / orig
    attention = scaling.get("attention_factor")
    if attention is None:
        attention = math.sqrt(1 + math.log(factor) / math.log(orig)) if factor > 1 else 1.0
    return inv, attention


def rope_inv_freq(dim, theta, scaling):
    inv = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    if scaling and scaling.get("rope_type", scaling.get("type")) == "llama3":
        factor, lo, hi = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
        old = scaling["original_max_position_embeddings"]
        low_wl, high_wl = old / lo, old / hi
        wl = 2 * math.pi / inv
        scaled = torch.where(wl > low_wl, inv / factor, inv)
        smooth = (old / wl - lo) / (hi - lo)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wl < high_wl) & ~(wl > low_wl)
        inv = torch.where(medium, smoothed, scaled)
    return inv


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def apply_rope(x, rot_dim, inv_freq, mscale=1.0):
    """x [heads, T, dh]: the first rot_dim coordinates rotate (rotate_half pairs), the rest pass."""
    T = x.shape[1]
    freqs = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos() * mscale, emb.sin() * mscale
    xr, xp = x[..., :rot_dim], x[..., rot_dim:]
    return torch.cat((xr * cos + rotate_half(xr) * sin, xp), dim=-1)


def attention(q, k, v, scale, window=0, softcap=0.0, hooks=None, pre=""):
    """q [H, T, dh], k/v [n_kv, T, dh] (repeat_kv: query head h reads kv head h // (H // n_kv))."""
    H, T, _ = q.shape
    rep = H // k.shape[0]
    k = k.repeat_interleave(rep, dim=0)
    v = v.repeat_interleave(rep, dim=0)
    s = (q @ k.transpose(-1, -2)) * scale
    if softcap:
        s = torch.tanh(s / softcap) * softcap
    i = torch.arange(T).view(T, 1)
    j = torch.arange(T).view(1, T)
    visible = j <= i
    if window:
        visible = visible & (i - j < window)
    s = s.masked_fill(~visible, float("-inf"))
    s = record(hooks, pre + "attn.hook_attn_scores", s)
    a = record(hooks, pre + "attn.hook_pattern", torch.softmax(s, dim=-1))
    return a @ v


# make_grad_fixtures.py sets PROBE to a function (name, activation) -> activation that adds a zero tensor
# it differentiates against: every hook point below passes through record(), and what comes back is what
# the rest of the forward computes from, so ∂metric/∂probe is the gradient at that hook point. None: the
# identity (this script's own fixtures).
PROBE = None


def record(hooks, name, t):
    """t as the hook point `name` sees it (probed), kept in hooks; the forward continues from the result."""
    if PROBE is not None:
        t = PROBE(name, t)
    hooks[name] = t
    return t


def record_heads(hooks, name, x):
    """record() for x [n, T, dh], kept as TransformerLens's [T, n, dh]; returns [n, T, dh] again."""
    return record(hooks, name, tl(x)).transpose(0, 1)


def heads(x, n, dh):  # [T, n·dh] -> [n, T, dh]
    return x.view(x.shape[0], n, dh).transpose(0, 1)


def tl(x):  # [n, T, dh] -> TransformerLens's [T, n, dh]
    return x.transpose(0, 1).contiguous()


# ---------------------------------------------------------------- the families

def forward(cfg, W, ids):
    mt = cfg["model_type"]
    hooks = {}
    T = len(ids)
    ids = torch.tensor(ids)

    if mt == "gpt2":
        d, L, H = cfg["n_embd"], cfg["n_layer"], cfg["n_head"]
        dh, eps = d // H, cfg["layer_norm_epsilon"]
        g = lambda n: W.get(n, W.get("transformer." + n))
        x = g("wte.weight")[ids] + g("wpe.weight")[:T]
        for l in range(L):
            p, b = "h.%d." % l, "blocks.%d." % l
            x = record(hooks, b + "hook_resid_pre", x)
            u = layer_norm(x, g(p + "ln_1.weight"), g(p + "ln_1.bias"), eps)
            u = record(hooks, b + "ln1.hook_normalized", u)
            qkv = u @ g(p + "attn.c_attn.weight") + g(p + "attn.c_attn.bias")  # Conv1D [in, out]
            q, k, v = (heads(t, H, dh) for t in qkv.split(d, dim=-1))
            q, k, v = (record_heads(hooks, b + "attn.hook_" + n, t) for n, t in zip("qkv", (q, k, v)))
            z = attention(q, k, v, 1 / math.sqrt(dh), hooks=hooks, pre=b)
            z = record_heads(hooks, b + "attn.hook_z", z)
            a = tl(z).reshape(T, d) @ g(p + "attn.c_proj.weight") + g(p + "attn.c_proj.bias")
            a = record(hooks, b + "hook_attn_out", a)
            x = x + a
            x = record(hooks, b + "hook_resid_mid", x)
            u2 = layer_norm(x, g(p + "ln_2.weight"), g(p + "ln_2.bias"), eps)
            u2 = record(hooks, b + "ln2.hook_normalized", u2)
            h = record(hooks, b + "mlp.hook_pre", u2 @ g(p + "mlp.c_fc.weight") + g(p + "mlp.c_fc.bias"))
            h = record(hooks, b + "mlp.hook_post", gelu_tanh(h))
            m = h @ g(p + "mlp.c_proj.weight") + g(p + "mlp.c_proj.bias")
            m = record(hooks, b + "hook_mlp_out", m)
            x = x + m
            x = record(hooks, b + "hook_resid_post", x)
        u = layer_norm(x, g("ln_f.weight"), g("ln_f.bias"), eps)
        u = record(hooks, "ln_final.hook_normalized", u)
        record(hooks, "logits", u @ g("wte.weight").T)
        return hooks

    if mt == "gpt_neox":
        d, L, H = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"]
        dh, eps = d // H, cfg["layer_norm_eps"]
        rot = int(dh * cfg["rotary_pct"])
        inv = rope_inv_freq(rot, cfg.get("rope_theta", cfg.get("rotary_emb_base", 10000)), None)
        act = gelu_erf if cfg["hidden_act"] == "gelu" else gelu_tanh
        x = W["gpt_neox.embed_in.weight"][ids]
        for l in range(L):
            p, b = "gpt_neox.layers.%d." % l, "blocks.%d." % l
            x = record(hooks, b + "hook_resid_pre", x)
            u = layer_norm(x, W[p + "input_layernorm.weight"], W[p + "input_layernorm.bias"], eps)
            u = record(hooks, b + "ln1.hook_normalized", u)
            qkv = linear(u, W[p + "attention.query_key_value.weight"], W[p + "attention.query_key_value.bias"])
            qkv = qkv.view(T, H, 3 * dh)  # per head: [q | k | v]
            q, k, v = (qkv[..., i * dh:(i + 1) * dh].transpose(0, 1) for i in range(3))
            q, k, v = (record_heads(hooks, b + "attn.hook_" + n, t) for n, t in zip("qkv", (q, k, v)))
            q, k = apply_rope(q, rot, inv), apply_rope(k, rot, inv)
            q, k = (record_heads(hooks, b + "attn.hook_rot_" + n, t) for n, t in zip("qk", (q, k)))
            z = attention(q, k, v, 1 / math.sqrt(dh), hooks=hooks, pre=b)
            z = record_heads(hooks, b + "attn.hook_z", z)
            a = linear(tl(z).reshape(T, d), W[p + "attention.dense.weight"], W[p + "attention.dense.bias"])
            a = record(hooks, b + "hook_attn_out", a)
            u2 = layer_norm(x, W[p + "post_attention_layernorm.weight"], W[p + "post_attention_layernorm.bias"], eps)
            u2 = record(hooks, b + "ln2.hook_normalized", u2)
            h = record(hooks, b + "mlp.hook_pre",
                       linear(u2, W[p + "mlp.dense_h_to_4h.weight"], W[p + "mlp.dense_h_to_4h.bias"]))
            h = record(hooks, b + "mlp.hook_post", act(h))
            m = linear(h, W[p + "mlp.dense_4h_to_h.weight"], W[p + "mlp.dense_4h_to_h.bias"])
            m = record(hooks, b + "hook_mlp_out", m)
            x = m + a + x  # use_parallel_residual
            x = record(hooks, b + "hook_resid_post", x)
        u = layer_norm(x, W["gpt_neox.final_layer_norm.weight"], W["gpt_neox.final_layer_norm.bias"], eps)
        u = record(hooks, "ln_final.hook_normalized", u)
        record(hooks, "logits", linear(u, W["embed_out.weight"]))
        return hooks

    if mt == "gpt_neo":
        d, L, H = cfg["hidden_size"], cfg["num_layers"], cfg["num_heads"]
        dh, eps = d // H, cfg["layer_norm_epsilon"]
        kinds = [k for kinds, n in cfg["attention_types"] for _ in range(n) for k in kinds]
        x = W["transformer.wte.weight"][ids] + W["transformer.wpe.weight"][:T]
        for l in range(L):
            p, b = "transformer.h.%d." % l, "blocks.%d." % l
            x = record(hooks, b + "hook_resid_pre", x)
            u = layer_norm(x, W[p + "ln_1.weight"], W[p + "ln_1.bias"], eps)
            u = record(hooks, b + "ln1.hook_normalized", u)
            q = heads(linear(u, W[p + "attn.attention.q_proj.weight"]), H, dh)
            k = heads(linear(u, W[p + "attn.attention.k_proj.weight"]), H, dh)
            v = heads(linear(u, W[p + "attn.attention.v_proj.weight"]), H, dh)
            q, k, v = (record_heads(hooks, b + "attn.hook_" + n, t) for n, t in zip("qkv", (q, k, v)))
            window = cfg["window_size"] if kinds[l] == "local" else 0
            z = attention(q, k, v, 1.0, window=window, hooks=hooks, pre=b)  # GPT-Neo: no 1/√dh
            z = record_heads(hooks, b + "attn.hook_z", z)
            a = linear(tl(z).reshape(T, d), W[p + "attn.attention.out_proj.weight"], W[p + "attn.attention.out_proj.bias"])
            a = record(hooks, b + "hook_attn_out", a)
            x = x + a
            x = record(hooks, b + "hook_resid_mid", x)
            u2 = layer_norm(x, W[p + "ln_2.weight"], W[p + "ln_2.bias"], eps)
            u2 = record(hooks, b + "ln2.hook_normalized", u2)
            h = record(hooks, b + "mlp.hook_pre", linear(u2, W[p + "mlp.c_fc.weight"], W[p + "mlp.c_fc.bias"]))
            h = record(hooks, b + "mlp.hook_post", gelu_tanh(h))
            m = linear(h, W[p + "mlp.c_proj.weight"], W[p + "mlp.c_proj.bias"])
            m = record(hooks, b + "hook_mlp_out", m)
            x = x + m
            x = record(hooks, b + "hook_resid_post", x)
        u = layer_norm(x, W["transformer.ln_f.weight"], W["transformer.ln_f.bias"], eps)
        u = record(hooks, "ln_final.hook_normalized", u)
        record(hooks, "logits", u @ W["transformer.wte.weight"].T)
        return hooks

    # Llama and the families written as deltas from it.
    d, L, H = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"]
    n_kv = cfg.get("num_key_value_heads", H)
    dh = cfg.get("head_dim", d // H)
    eps = cfg["rms_norm_eps"]
    gemma = mt in ("gemma", "gemma2")
    norm = gemma_rms_norm if gemma else rms_norm
    rot = int(dh * cfg.get("partial_rotary_factor", 1.0))
    inv, mscale = rope_inv_freq(rot, cfg.get("rope_theta", 10000.0), cfg.get("rope_scaling")), 1.0
    scaling = cfg.get("rope_scaling") or {}
    if scaling.get("rope_type", scaling.get("type")) == "longrope":
        inv, mscale = longrope(cfg, scaling, rot, cfg.get("rope_theta", 10000.0), len(ids))
    act = gelu_tanh if gemma else silu
    scale = cfg["query_pre_attn_scalar"] ** -0.5 if mt == "gemma2" else 1 / math.sqrt(dh)
    softcap = cfg.get("attn_logit_softcapping") or 0.0 if mt == "gemma2" else 0.0
    bias_qkv = mt == "qwen2" or cfg.get("attention_bias", False)
    bias_o = cfg.get("attention_bias", False) and mt != "qwen2"
    x = W["model.embed_tokens.weight"][ids]
    if gemma:
        x = x * math.sqrt(d)
    for l in range(L):
        p, b = "model.layers.%d." % l, "blocks.%d." % l
        x = record(hooks, b + "hook_resid_pre", x)
        u = norm(x, W[p + "input_layernorm.weight"], eps)
        u = record(hooks, b + "ln1.hook_normalized", u)
        if mt == "phi3":
            qkv = linear(u, W[p + "self_attn.qkv_proj.weight"])
            q, k, v = qkv[:, :H * dh], qkv[:, H * dh:H * dh + n_kv * dh], qkv[:, H * dh + n_kv * dh:]
        else:
            bq = W.get(p + "self_attn.q_proj.bias") if bias_qkv else None
            bk = W.get(p + "self_attn.k_proj.bias") if bias_qkv else None
            bv = W.get(p + "self_attn.v_proj.bias") if bias_qkv else None
            q = linear(u, W[p + "self_attn.q_proj.weight"], bq)
            k = linear(u, W[p + "self_attn.k_proj.weight"], bk)
            v = linear(u, W[p + "self_attn.v_proj.weight"], bv)
        q, k, v = heads(q, H, dh), heads(k, n_kv, dh), heads(v, n_kv, dh)
        q, k, v = (record_heads(hooks, b + "attn.hook_" + n, t) for n, t in zip("qkv", (q, k, v)))
        q, k = apply_rope(q, rot, inv, mscale), apply_rope(k, rot, inv, mscale)
        q, k = (record_heads(hooks, b + "attn.hook_rot_" + n, t) for n, t in zip("qk", (q, k)))
        window = 0
        if mt in ("mistral", "phi3") and cfg.get("sliding_window"):
            window = cfg["sliding_window"]
        if mt == "gemma2" and l % 2 == 0:
            window = cfg["sliding_window"]
        z = attention(q, k, v, scale, window=window, softcap=softcap, hooks=hooks, pre=b)
        z = record_heads(hooks, b + "attn.hook_z", z)
        a = linear(tl(z).reshape(T, H * dh), W[p + "self_attn.o_proj.weight"],
                   W.get(p + "self_attn.o_proj.bias") if bias_o else None)
        if mt == "gemma2":
            a = norm(a, W[p + "post_attention_layernorm.weight"], eps)
        a = record(hooks, b + "hook_attn_out", a)
        x = x + a
        x = record(hooks, b + "hook_resid_mid", x)
        pre_mlp = p + ("pre_feedforward_layernorm.weight" if mt == "gemma2" else "post_attention_layernorm.weight")
        u2 = norm(x, W[pre_mlp], eps)
        u2 = record(hooks, b + "ln2.hook_normalized", u2)
        if mt == "phi3":
            gate, up = linear(u2, W[p + "mlp.gate_up_proj.weight"]).chunk(2, dim=-1)
        else:
            gate, up = linear(u2, W[p + "mlp.gate_proj.weight"]), linear(u2, W[p + "mlp.up_proj.weight"])
        gate = record(hooks, b + "mlp.hook_pre", gate)
        up = record(hooks, b + "mlp.hook_pre_linear", up)
        h = record(hooks, b + "mlp.hook_post", act(gate) * up)
        m = linear(h, W[p + "mlp.down_proj.weight"])
        if mt == "gemma2":
            m = norm(m, W[p + "post_feedforward_layernorm.weight"], eps)
        m = record(hooks, b + "hook_mlp_out", m)
        x = x + m
        x = record(hooks, b + "hook_resid_post", x)
    u = norm(x, W["model.norm.weight"], eps)
    u = record(hooks, "ln_final.hook_normalized", u)
    head = W["lm_head.weight"] if "lm_head.weight" in W and not cfg.get("tie_word_embeddings", False) else W["model.embed_tokens.weight"]
    logits = u @ head.T
    if mt == "gemma2" and cfg.get("final_logit_softcapping"):
        c = cfg["final_logit_softcapping"]
        logits = torch.tanh(logits / c) * c
    record(hooks, "logits", logits)
    return hooks


def main():
    qkv = sys.argv[1] if len(sys.argv) > 1 else "build/qkv"
    os.makedirs(OUT, exist_ok=True)
    for name, (arch, opts) in CASES.items():
        # Only the case's own files: the gradient, claims and experiments fixtures beside them come from
        # other scripts.
        for f in ("case.json", "expected.safetensors"):
            if os.path.exists(os.path.join(OUT, name, f)):
                os.remove(os.path.join(OUT, name, f))
        with tempfile.TemporaryDirectory() as tmp:
            args = ["init", "--arch", arch, "--preset", "tiny", "--seed", "7", "--out", tmp] + opts
            subprocess.run([qkv] + args, check=True, stdout=subprocess.DEVNULL)
            cfg = json.load(open(os.path.join(tmp, "config.json")))
            W = read_checkpoint(tmp)
        hooks = forward(cfg, W, TOKENS)
        os.makedirs(os.path.join(OUT, name), exist_ok=True)
        write_safetensors(os.path.join(OUT, name, "expected.safetensors"), hooks)
        pattern = [h for h in hooks if h.endswith("hook_pattern")]
        sharp = float(np.mean([hooks[h].max(-1).values.mean().item() for h in pattern]))
        with open(os.path.join(OUT, name, "case.json"), "w") as f:
            json.dump({"init": [a for a in args if a not in ("--out", tmp)],
                       "tokens": TOKENS, "hooks": len(hooks), "mean_max_attention": round(sharp, 3)}, f, indent=1)
            f.write("\n")
        print("%-24s %3d hooks, mean max attention %.3f" % (name, len(hooks), sharp))


if __name__ == "__main__":
    main()
