"""An independent GPT-2 forward in NumPy float64, written from the Hugging Face model's definition
(not from qkv's code): the test's reference for what an edit of one activation does to the logits.

Reads config.json and model.safetensors itself (8-byte header length, JSON header, raw little-endian
data). zero_v=(layer, head) zeroes that head's value vectors, as a hook on blocks.L.attn.hook_v does."""
import json
import math
import pathlib
import struct

import numpy as np

_DTYPES = {"F32": np.float32, "F64": np.float64, "F16": np.float16}


def read_safetensors(path):
    data = pathlib.Path(path).read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        arr = np.frombuffer(body[a:b], dtype=_DTYPES[t["dtype"]]).reshape(t["shape"])
        out[name[len("transformer."):] if name.startswith("transformer.") else name] = arr.astype(np.float64)
    return out


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def gelu_new(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def forward(model_dir, ids, zero_v=None):
    """logits [T, vocab] (float64) of the GPT-2 in model_dir for ids, optionally with one head's v zeroed."""
    d = pathlib.Path(model_dir)
    cfg = json.loads((d / "config.json").read_text())
    W = read_safetensors(d / "model.safetensors")
    H, eps = cfg["n_head"], cfg.get("layer_norm_epsilon", 1e-5)
    ids = np.asarray(ids)
    T = len(ids)
    x = W["wte.weight"][ids] + W["wpe.weight"][:T]
    D = x.shape[1]
    dh = D // H
    mask = np.tril(np.ones((T, T), dtype=bool))
    for l in range(cfg["n_layer"]):
        p = "h.%d." % l
        u = layer_norm(x, W[p + "ln_1.weight"], W[p + "ln_1.bias"], eps)
        qkv = u @ W[p + "attn.c_attn.weight"] + W[p + "attn.c_attn.bias"]  # Conv1D: x·W + b, [T, 3d]
        q, k, v = (qkv[:, i * D:(i + 1) * D].reshape(T, H, dh).transpose(1, 0, 2) for i in range(3))
        if zero_v is not None and zero_v[0] == l:
            v = v.copy()
            v[zero_v[1]] = 0
        S = q @ k.transpose(0, 2, 1) / math.sqrt(dh)
        S = np.where(mask, S, -np.inf)
        A = np.exp(S - S.max(-1, keepdims=True))
        A /= A.sum(-1, keepdims=True)
        z = (A @ v).transpose(1, 0, 2).reshape(T, D)
        x = x + z @ W[p + "attn.c_proj.weight"] + W[p + "attn.c_proj.bias"]
        if p + "mlp.c_fc.weight" in W:
            u2 = layer_norm(x, W[p + "ln_2.weight"], W[p + "ln_2.bias"], eps)
            h = gelu_new(u2 @ W[p + "mlp.c_fc.weight"] + W[p + "mlp.c_fc.bias"])
            x = x + h @ W[p + "mlp.c_proj.weight"] + W[p + "mlp.c_proj.bias"]
    x = layer_norm(x, W["ln_f.weight"], W["ln_f.bias"], eps)
    return x @ W.get("lm_head.weight", W["wte.weight"]).T
