"""The weights by TransformerLens's names (issue 25, items 5 and 6): W_Q … b_U, cfg, QK / OV, on the bundled
GPT-2 and on the nine families' tiny checkpoints, each checked against the forward's own activations
(the weights must reproduce hook_q, hook_k, hook_v, hook_attn_out, the embedding and the logits)."""
import json
import math
import struct

import numpy as np
import pytest

import qkv
from conftest import BUNDLED, FAMILIES, TEXT, run_cli


def read_safetensors(path):
    """{name: float32 array} from a safetensors file, read here with NumPy (F32 / F16 / BF16)."""
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        buf = raw[8 + n + b:8 + n + e]
        if info["dtype"] == "BF16":
            a = (np.frombuffer(buf, "<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            a = np.frombuffer(buf, {"F32": "<f4", "F16": "<f2"}[info["dtype"]]).astype(np.float32)
        out[name] = a.reshape(info["shape"])
    return out


def close(got, want, rel=1e-5):
    """got within rel × the largest |want| of want, everywhere."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape
    err = np.max(np.abs(got - want))
    assert err <= rel * max(1.0, np.max(np.abs(want))), "max |diff| %.3g" % err


# ---- the seeds' exercise on the bundled GPT-2 ---------------------------------------------------------------

def test_the_seeds_exercise_in_one_cell(model, tokens):
    # Slice GPT-2's c_attn [d, 3d] into thirds, head h = columns h·dh .. (h+1)·dh of the first third:
    c_attn = read_safetensors(BUNDLED / "model.safetensors")["h.0.attn.c_attn.weight"]
    b_attn = read_safetensors(BUNDLED / "model.safetensors")["h.0.attn.c_attn.bias"]
    cfg = model.cfg
    d, H, dh = cfg.d_model, cfg.n_heads, cfg.d_head
    W_Q = c_attn[:, :d].reshape(d, H, dh).transpose(1, 0, 2)          # [H, d, dh]
    assert np.array_equal(model.W_Q[0], W_Q)                          # bit for bit: a view of c_attn
    assert np.array_equal(model.W_K[0], c_attn[:, d:2 * d].reshape(d, H, dh).transpose(1, 0, 2))
    assert np.array_equal(model.W_V[0], c_attn[:, 2 * d:].reshape(d, H, dh).transpose(1, 0, 2))
    assert np.array_equal(model.b_Q[0], b_attn[:d].reshape(H, dh))
    # … and reproduce hook_q from the ln1 output:
    _, cache = model.run_with_cache(tokens)
    u = cache["blocks.0.ln1.hook_normalized"]                          # [T, d]
    q = np.einsum("td,hde->the", u, model.W_Q[0]) + model.b_Q[0]       # [T, H, dh]
    close(q, cache["blocks.0.attn.hook_q"])


def test_bundled_gpt2_weights_are_views_of_the_file(model):
    state = model.state_dict()
    for name in ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_O", "ln1_w", "ln1_b", "W_E", "W_pos", "W_U"):
        a = getattr(model, name)
        assert not a.flags.owndata and not a.flags.writeable, name
        with pytest.raises(ValueError):
            a[(0,) * a.ndim] = 1.0
    assert np.shares_memory(model.W_Q, state["h.0.attn.c_attn.weight"])
    assert np.shares_memory(model.ln1_w, state["h.0.ln_1.weight"])
    assert np.array_equal(model.ln1_b[1], state["h.1.ln_1.bias"])
    assert np.shares_memory(model.W_U, state["wte.weight"])          # tied: W_U is W_Eᵀ
    assert np.array_equal(model.W_U, model.W_E.T)
    assert model.b_U.shape == (model.cfg.d_vocab,) and not model.b_U.any()


# ---- every family -----------------------------------------------------------------------------------------

def rms_plus_one(x, w, eps):
    """Gemma's RMSNorm, x · rsqrt(mean(x²) + eps) · (1 + w), in float64."""
    x = np.asarray(x, np.float64)
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * (1.0 + w)


@pytest.mark.parametrize("arch", FAMILIES)
def test_weights_reproduce_the_forward(family_model, arch):
    m = family_model(arch)
    cfg = m.cfg
    L, H, K, d, dh, V = cfg.n_layers, cfg.n_heads, cfg.n_key_value_heads, cfg.d_model, cfg.d_head, cfg.d_vocab
    assert m.W_Q.shape == (L, H, d, dh) and m.W_K.shape == (L, K, d, dh) and m.W_V.shape == (L, K, d, dh)
    assert m.W_O.shape == (L, H, dh, d) and m.b_Q.shape == (L, H, dh) and m.b_K.shape == (L, K, dh)
    assert m.b_O.shape == (L, d) and m.W_E.shape == (V, d) and m.W_U.shape == (d, V) and m.b_U.shape == (V,)
    ids = np.array([3, 57, 14, 92, 0, 57, 14, 92, 41, 100, 7, 57, 511, 8, 57, 14, 92, 250, 1, 57]) % V
    _, cache = m.run_with_cache(ids)
    state = m.state_dict()
    for l in range(L):
        b = "blocks.%d." % l
        u = cache[b + "ln1.hook_normalized"]
        for W, B, hook in ((m.W_Q, m.b_Q, "q"), (m.W_K, m.b_K, "k"), (m.W_V, m.b_V, "v")):
            close(np.einsum("td,hde->the", u, W[l]) + B[l], cache[b + "attn.hook_" + hook])
        z = cache[b + "attn.hook_z"]
        out = np.einsum("the,hed->td", z.astype(np.float64), m.W_O[l]) + m.b_O[l]
        if cfg.post_norms:
            out = rms_plus_one(out, m.ln1_post_w[l], cfg.eps)
        close(out, cache[b + "hook_attn_out"])
    x0 = m.W_E[ids].astype(np.float64)
    if cfg.positional_embedding_type == "standard":
        x0 = x0 + m.W_pos[:len(ids)]
    if cfg.embed_scale:
        x0 = x0 * np.float32(np.sqrt(d))
    close(x0, cache["blocks.0.hook_resid_pre"])
    logits = cache["ln_final.hook_normalized"].astype(np.float64) @ m.W_U + m.b_U
    if cfg.final_softcap:
        logits = cfg.final_softcap * np.tanh(logits / cfg.final_softcap)
    close(logits, cache["logits"])


_ACT = {"gelu_new": lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3))),
        "gelu_pytorch_tanh": lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3))),
        "gelu": lambda x: 0.5 * x * (1 + np.vectorize(math.erf)(x / np.sqrt(2))),
        "silu": lambda x: x / (1 + np.exp(-x))}


@pytest.mark.parametrize("arch", FAMILIES)
def test_mlp_weights_reproduce_the_mlp(family_model, arch):
    """W_in, W_gate, W_out, b_in, b_out (TransformerLens's names) recompute mlp.hook_pre, hook_pre_linear,
    hook_post and hook_mlp_out from ln2.hook_normalized in float64 on every family (Phi-3's fused
    gate_up_proj, GPT-2's Conv1D included)."""
    m = family_model(arch)
    cfg = m.cfg
    L, d, ff = cfg.n_layers, cfg.d_model, cfg.d_mlp
    assert m.W_in.shape == (L, d, ff) and m.W_out.shape == (L, ff, d)
    assert m.b_in.shape == (L, ff) and m.b_out.shape == (L, d)
    if cfg.gated_mlp:
        assert m.W_gate.shape == (L, d, ff)
    else:
        with pytest.raises(qkv.Error, match="not gated"):
            m.W_gate
    _, cache = m.run_with_cache(np.array([3, 57, 14, 92, 0, 57, 14, 92, 41, 100, 7, 57]) % cfg.d_vocab)
    state = m.state_dict()
    act = _ACT[cfg.act_fn]
    for l in range(L):
        u = cache["blocks.%d.ln2.hook_normalized" % l].astype(np.float64)
        pre = u @ m.W_in[l] + m.b_in[l]
        post = act(u @ m.W_gate[l]) * pre if cfg.gated_mlp else act(pre)
        out = post @ m.W_out[l] + m.b_out[l]
        b = "blocks.%d.mlp." % l  # TransformerLens's MLP hooks: hook_pre is the gate's when gated
        close(u @ m.W_gate[l] if cfg.gated_mlp else pre, cache[b + "hook_pre"], rel=1e-4)
        if cfg.gated_mlp:
            close(pre, cache[b + "hook_pre_linear"], rel=1e-4)
        close(post, cache[b + "hook_post"], rel=1e-4)
        if cfg.post_norms:
            out = rms_plus_one(out, m.ln2_post_w[l], cfg.eps)
        close(out, cache["blocks.%d.hook_mlp_out" % l], rel=1e-4)


def norm(x, w, b, cfg, plus_one):
    """The model's norm of rows x with weight w and bias b, in float64."""
    x = np.asarray(x, np.float64)
    if cfg.normalization_type == "LN":
        x = x - x.mean(-1, keepdims=True)
    y = x / np.sqrt((x * x).mean(-1, keepdims=True) + cfg.eps)
    return y * ((1.0 + w) if plus_one else w) + b


@pytest.mark.parametrize("arch", FAMILIES)
def test_norm_weights_reproduce_the_norms(family_model, arch):
    """ln1_w/b and ln2_w/b (TransformerLens's blocks.L.ln1.w, …) recompute ln1.hook_normalized from
    hook_resid_pre and ln2.hook_normalized from hook_resid_mid (resid_pre in a parallel block) on every
    family; Gemma 2's ln1_post_w / ln2_post_w are checked in the two tests above, other models refuse them."""
    m = family_model(arch)
    cfg = m.cfg
    L, d = cfg.n_layers, cfg.d_model
    for name in ("ln1_w", "ln1_b", "ln2_w", "ln2_b"):
        assert getattr(m, name).shape == (L, d), name
    if cfg.normalization_type == "RMS":
        assert not m.ln1_b.any() and not m.ln2_b.any()
    if cfg.post_norms:
        assert m.ln1_post_w.shape == (L, d) and m.ln2_post_w.shape == (L, d)
    else:
        for name in ("ln1_post_w", "ln2_post_w"):
            with pytest.raises(qkv.Error, match=name + ": .* has no post-norms"):
                getattr(m, name)
    _, cache = m.run_with_cache(np.array([3, 57, 14, 92, 0, 57, 14, 92, 41, 100, 7, 57]) % cfg.d_vocab)
    plus_one = m.config["norm"] == "rmsnorm_plus_one"
    for l in range(L):
        b = "blocks.%d." % l
        close(norm(cache[b + "hook_resid_pre"], m.ln1_w[l], m.ln1_b[l], cfg, plus_one),
              cache[b + "ln1.hook_normalized"], rel=1e-4)
        mid = cache[b + ("hook_resid_pre" if cfg.parallel_attn_mlp else "hook_resid_mid")]
        close(norm(mid, m.ln2_w[l], m.ln2_b[l], cfg, plus_one), cache[b + "ln2.hook_normalized"], rel=1e-4)


def test_an_attention_only_model_has_no_mlp_weights(model):
    for name in ("W_in", "W_out", "b_in", "b_out", "W_gate"):
        with pytest.raises(qkv.Error, match="attention-only"):
            getattr(model, name)
    for name in ("ln2_w", "ln2_b"):
        with pytest.raises(qkv.Error, match=name + r": .* has no ln2 \(it is attention-only\)"):
            getattr(model, name)
    assert model.ln1_w.shape == (model.cfg.n_layers, model.cfg.d_model)


@pytest.mark.parametrize("arch", FAMILIES)
def test_cfg_has_transformer_lens_names(family_model, arch):
    m = family_model(arch)
    c, old = m.cfg, m.config
    assert {k: c[k] for k in old} == old  # today's keys kept
    assert (c.n_layers, c.n_heads, c.d_model, c.d_head, c.n_key_value_heads, c.d_vocab, c.n_ctx, c.d_mlp) == \
        (old["n_layer"], old["H"], old["d"], old["head_dim"], old["n_kv"], old["vocab_size"], old["n_ctx"], old["d_ff"])
    want = {"gpt2": ("gelu_new", "LN", "standard"), "gpt_neo": ("gelu_new", "LN", "standard"),
            "gpt_neox": ("gelu", "LN", "rotary"), "gemma": ("gelu_pytorch_tanh", "RMS", "rotary"),
            "gemma2": ("gelu_pytorch_tanh", "RMS", "rotary")}.get(arch, ("silu", "RMS", "rotary"))
    assert (c.act_fn, c.normalization_type, c.positional_embedding_type) == want
    assert c.rotary_dim == (old.get("rotary_dim") if want[2] == "rotary" else None)
    assert c["n_heads"] == c.n_heads
    with pytest.raises(AttributeError):
        c.no_such_key


def test_cfg_of_an_attention_only_model(tmp_path):
    run_cli("init", "--preset", "tiny", "--attn-only", "--out", tmp_path)
    c = qkv.load(str(tmp_path)).cfg
    assert c.attn_only and c.d_mlp is None and c.act_fn is None


@pytest.mark.parametrize("arch", FAMILIES)
def test_qk_and_ov_are_factored_circuits(family_model, arch):
    m = family_model(arch)
    c = m.cfg
    layer, head = c.n_layers - 1, c.n_heads - 1
    g = head // (c.n_heads // c.n_key_value_heads)
    qk, ov = m.QK(layer, head), m.OV(layer, head)
    want_qk = m.W_Q[layer, head].astype(np.float64) @ m.W_K[layer, g].T
    want_ov = m.W_V[layer, g].astype(np.float64) @ m.W_O[layer, head]
    close(qk.AB, want_qk, 1e-12)
    close(ov.AB, want_ov, 1e-12)
    for fm, full in ((qk, want_qk), (ov, want_ov)):
        U, S, Vh = fm.svd()
        assert U.shape == (c.d_model, c.d_head) and S.shape == (c.d_head,) and Vh.shape == (c.d_head, c.d_model)
        close(U @ np.diag(S) @ Vh, full, 1e-10)
        close(S, np.linalg.svd(full, compute_uv=False)[:c.d_head], 1e-10)
        assert fm.norm() == pytest.approx(np.linalg.norm(full), rel=1e-10)
        ev = np.linalg.eigvals(full)
        ev = ev[np.argsort(-np.abs(ev))][:c.d_head]
        got = fm.eigenvalues
        got = got[np.argsort(-np.abs(got))]
        close(np.sort_complex(got).real, np.sort_complex(ev).real, 1e-8)
    assert qk.T.shape == (c.d_model, c.d_model) and (qk @ np.eye(c.d_model)).shape == (c.d_model, c.d_model)


@pytest.mark.parametrize("arch", ["llama", "mistral", "gemma", "phi3"])
def test_rotary_qk_at_an_offset_gives_the_scores(family_model, arch):
    # No Q/K biases in these families: the score of query i and key j is scale · u_i · QK(i − j) · u_jᵀ.
    m = family_model(arch)
    ids = np.arange(5, 25) % m.cfg.d_vocab
    _, cache = m.run_with_cache(ids)
    layer, head = 1, 3
    u = cache["blocks.%d.ln1.hook_normalized" % layer].astype(np.float64)
    S = cache["blocks.%d.attn.hook_attn_scores" % layer][head]
    window = m.cfg.window[layer] if m.cfg.window else 0
    checked = 0
    for i in range(len(ids)):
        for j in range(i + 1):
            if window and i - j >= window:
                continue
            got = m.cfg.attn_scale * (u[i] @ m.QK(layer, head, offset=i - j).AB @ u[j])
            assert got == pytest.approx(float(S[i, j]), abs=1e-4 * max(1.0, np.abs(S[np.isfinite(S)]).max()))
            checked += 1
    assert checked > 50
    assert not np.allclose(m.QK(layer, head, 3).AB, m.QK(layer, head, 0).AB)


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_bf16_weights_are_float32_copies(family_dir, family_model, arch):
    m = family_model(arch, "--dtype", "bf16")
    stored = read_safetensors(family_dir(arch, "--dtype", "bf16") / "model.safetensors")
    assert set(m.weight_dtypes().values()) == {"BF16"}
    W_Q = m.W_Q
    assert W_Q.dtype == np.float32 and W_Q.flags.owndata and not W_Q.flags.writeable
    c = m.cfg
    want = stored["model.layers.1.self_attn.q_proj.weight"].reshape(c.n_heads, c.d_head, c.d_model).transpose(0, 2, 1)
    assert np.array_equal(W_Q[1], want)
    assert np.array_equal(m.state_dict()["model.layers.1.self_attn.q_proj.weight"],
                          stored["model.layers.1.self_attn.q_proj.weight"])


def test_quantized_gguf_weights_are_dequantized(family_dir, tmp_path):
    src = family_dir("llama")
    run_cli("convert", "--to", "gguf", "--type", "q8_0", src, tmp_path / "m.gguf")
    m = qkv.load(str(tmp_path / "m.gguf"))
    assert "Q8_0" in m.weight_dtypes().values()
    ids = np.arange(3, 15)
    _, cache = m.run_with_cache(ids)
    u = cache["blocks.1.ln1.hook_normalized"]
    for W, hook in ((m.W_Q, "q"), (m.W_K, "k"), (m.W_V, "v")):
        assert W.flags.owndata
        close(np.einsum("td,hde->the", u, W[1]), cache["blocks.1.attn.hook_" + hook])
    # dequantized, so near (not equal to) the F32 source
    f32 = qkv.load(str(src))
    assert 0 < np.abs(m.W_Q - f32.W_Q).max() < 0.02 * np.abs(f32.W_Q).max()


def test_weight_errors_are_qkv_errors(family_model):
    m = family_model("llama")
    with pytest.raises(qkv.Error, match="rotary"):
        m.W_pos
    with pytest.raises(qkv.Error, match="layer 9"):
        m.QK(9, 0)
    with pytest.raises(qkv.Error, match="head 4"):
        m.OV(0, 4)
    with pytest.raises(qkv.Error, match="offset"):
        m.QK(0, 0, offset=-1)
    with pytest.raises(qkv.Error):
        qkv.FactoredMatrix(np.zeros((3, 2)), np.zeros((3, 2)))


def test_stacks_over_shards_equal_each_layer(family_model):
    # Four layers in three shard files: the layers do not lie one distance apart, so the stack is a copy,
    # while each layer's own array is still a view of its shard.
    m = family_model("llama", "--set", "num_hidden_layers=4", "--shards", "3")
    for kind in ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_O"):
        stacked = getattr(m, kind)
        for l in range(4):
            one = qkv._qkv.weight(m._m, kind, l)
            assert np.array_equal(stacked[l], one), (kind, l)
            assert kind.startswith("b_") or not one.flags.owndata
    assert m.W_Q.flags.owndata  # a copy: the shards are separate mappings
