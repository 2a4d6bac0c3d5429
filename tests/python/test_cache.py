# run_with_cache's ActivationCache: TransformerLens's shorthand keys (get_act_name's documented examples),
# the stacks across layers and heads checked against the engine's own hooks (Σ_h head result + b_O is the
# engine's hook_attn_out; on Gemma 2 after its post-attention norm), batches, and the errors.
import numpy as np
import pytest

import qkv

from conftest import FAMILIES, TEXT

IDS = np.array([1, 5, 9, 2, 5, 9, 3, 7, 1, 5, 9, 2], dtype=np.int32)  # the tiny families have no tokenizer


@pytest.mark.parametrize("args, name", [
    (("k", 6, "a"), "blocks.6.attn.hook_k"),
    (("pre", 2), "blocks.2.mlp.hook_pre"),
    (("embed",), "hook_embed"),
    (("normalized", 27, "ln2"), "blocks.27.ln2.hook_normalized"),
    (("k6",), "blocks.6.attn.hook_k"),
    (("scale4ln1",), "blocks.4.ln1.hook_scale"),
    (("pre5",), "blocks.5.mlp.hook_pre"),
    (("attn", 0), "blocks.0.attn.hook_pattern"),
    (("attn_logits", 1), "blocks.1.attn.hook_attn_scores"),
    (("query", 3), "blocks.3.attn.hook_q"),
    (("mlp_post", 1), "blocks.1.mlp.hook_post"),
    (("resid_pre", 3), "blocks.3.hook_resid_pre"),
    (("resid_mid", 0, "b"), "blocks.0.hook_resid_mid"),
    (("attn_out", 2), "blocks.2.hook_attn_out"),
    (("normalized",), "ln_final.hook_normalized"),
    (("blocks.0.attn.hook_q",), "blocks.0.attn.hook_q"),
])
def test_get_act_name_follows_transformer_lens(args, name):
    assert qkv.get_act_name(*args) == name


def test_shorthand_keys_are_the_same_arrays(model, tokens):
    _, cache = model.run_with_cache(tokens)
    assert isinstance(cache, qkv.ActivationCache) and isinstance(cache, dict)
    assert cache["pattern", 0] is cache["blocks.0.attn.hook_pattern"]
    assert cache["q", -1] is cache["blocks.%d.attn.hook_q" % (model.config["n_layer"] - 1)]
    assert cache["k1"] is cache["blocks.1.attn.hook_k"]
    assert cache["normalized", 1, "ln1"] is cache["blocks.1.ln1.hook_normalized"]
    assert cache["normalized"] is cache["ln_final.hook_normalized"]
    assert "logits" in cache and ("pattern", 0) not in cache  # `in` is the dict's: full names only
    with pytest.raises(KeyError, match="blocks.0.mlp.hook_pre"):
        cache["pre", 0]  # the bundled model has no MLP
    with pytest.raises(qkv.Error, match="outside the model's 2 layers"):
        cache["pattern", 2]
    with pytest.raises(KeyError):
        cache[3]


def test_names_filter_is_names(model, tokens):
    _, a = model.run_with_cache(tokens, names=lambda n: n.endswith("hook_pattern"))
    _, b = model.run_with_cache(tokens, names_filter=lambda n: n.endswith("hook_pattern"))
    assert list(a) == list(b) and all(np.array_equal(a[k], b[k]) for k in a)
    with pytest.raises(qkv.Error, match="not both"):
        model.run_with_cache(tokens, names=["logits"], names_filter=["logits"])


def test_accumulated_resid_and_stack_activation(family_model):
    m = family_model("gpt2")
    _, cache = m.run_with_cache(IDS)
    n = m.config["n_layer"]
    stack, labels = cache.accumulated_resid(incl_mid=True, return_labels=True)
    want = [l for i in range(n) for l in ("%d_pre" % i, "%d_mid" % i)] + ["final_post"]
    assert labels == want
    for row, label in zip(stack, labels):
        name = "blocks.%d.hook_resid_post" % (n - 1) if label == "final_post" else \
            "blocks.%s.hook_resid_%s" % tuple(label.split("_"))
        assert np.array_equal(row, cache[name])
    assert cache.accumulated_resid(layer=1, return_labels=True)[1] == ["0_pre", "1_pre"]
    assert cache.accumulated_resid(layer=-1).shape == (n + 1,) + cache["resid_pre", 0].shape
    pat = cache.stack_activation("pattern")
    assert pat.shape == (n,) + cache["pattern", 0].shape
    assert all(np.array_equal(pat[l], cache["pattern", l]) for l in range(n))
    assert cache.stack_activation("pattern", layer=1).shape[0] == 1
    with pytest.raises(qkv.Error, match="outside"):
        cache.stack_activation("pattern", layer=n + 1)


@pytest.mark.parametrize("arch", FAMILIES)
def test_head_results_sum_to_attn_out(family_model, arch):
    m = family_model(arch)
    _, cache = m.run_with_cache(IDS)
    n, H = m.config["n_layer"], m.cfg.n_heads
    res, labels = cache.stack_head_results(return_labels=True)
    assert res.shape == (n * H,) + cache["attn_out", 0].shape and labels[H + 1] == "L1H1"
    for l in range(n):
        total = res[l * H:(l + 1) * H].astype(np.float64).sum(0) + m.b_O[l]
        if m.config["post_norms"]:  # Gemma 2: hook_attn_out is after post_attention_layernorm (RMS, 1 + w)
            w = m.state_dict()["model.layers.%d.post_attention_layernorm.weight" % l].astype(np.float64)
            total = total / np.sqrt((total ** 2).mean(-1, keepdims=True) + m.config["norm_eps"]) * (1 + w)
        out = cache["attn_out", l]
        assert np.abs(total - out).max() <= 1e-4 * max(1.0, np.abs(out).max()), arch


def test_batches(model):
    ids, mask = model.to_tokens([TEXT, "When Mary and John"])
    _, cache = model.run_with_cache(ids, attention_mask=mask)
    assert cache["pattern", 0].shape[0] == 2
    res = cache.stack_head_results()
    assert res.shape[:2] == (model.config["n_layer"] * model.cfg.n_heads, 2)
    with pytest.raises(qkv.Error, match="2 sequences"):
        cache.remove_batch_dim()
    _, one = model.run_with_cache(ids[:1], attention_mask=mask[:1])
    single = one.remove_batch_dim()
    assert set(single) == set(one) and all(np.array_equal(single[k], one[k][0]) for k in one)
    assert single["pattern", 1].ndim == 3
    logits, tl = model.run_with_cache(ids[:1], attention_mask=mask[:1], remove_batch_dim=True)  # TransformerLens's
    assert logits.shape[0] == 1 and set(tl) == set(single) and all(np.array_equal(tl[k], single[k]) for k in single)
    with model.hooks(fwd_hooks=[("blocks.0.hook_resid_pre", lambda x, hook: None)]):   # the hooked path too
        _, hooked = model.run_with_cache(ids[:1], attention_mask=mask[:1], remove_batch_dim=True)
    assert all(np.array_equal(hooked[k], single[k]) for k in single)
    with pytest.raises(qkv.Error, match="2 sequences"):
        model.run_with_cache(ids, attention_mask=mask, remove_batch_dim=True)


@pytest.mark.parametrize("arch", FAMILIES)
def test_decomposition_and_logit_attribution_add_up(family_model, arch):
    """decompose_resid sums to the final residual; its logit attributions plus ln_final_b's part are the
    engine's logits (through Gemma 2's final soft-cap): the recomputed norm scale is the engine's."""
    m = family_model(arch)
    logits, cache = m.run_with_cache(IDS)
    n = m.config["n_layer"]
    stack, labels = cache.decompose_resid(return_labels=True)
    rotary = m.config["positions"] == "rotary"
    assert labels == ["embed"] + ([] if rotary else ["pos_embed"]) + \
        ["%d_%s_out" % (l, k) for l in range(n) for k in ("attn", "mlp")]
    final = cache["resid_post", -1]
    assert np.abs(stack.astype(np.float64).sum(0) - final).max() <= 1e-4 * max(1.0, np.abs(final).max())
    cap = m.config.get("final_softcap", 0)
    for tok in (3, 7):
        total = cache.logit_attrs(stack, tok).sum(0) + m.ln_final_b.astype(np.float64) @ m.W_U[:, tok]
        if cap:
            total = cap * np.tanh(total / cap)
        assert np.abs(total - logits[:, tok]).max() <= 1e-4 * max(1.0, np.abs(logits).max()), arch
    if not cap:
        diff = cache.logit_attrs(stack, 3, incorrect_tokens=7).sum(0) + \
            m.ln_final_b.astype(np.float64) @ (m.W_U[:, 3] - m.W_U[:, 7])
        assert np.abs(diff - (logits[:, 3] - logits[:, 7])).max() <= 1e-4 * max(1.0, np.abs(logits).max())
    assert cache.decompose_resid(layer=1, mode="attn", incl_embeds=False).shape[0] == 1


def test_attribution_in_a_batch_and_on_the_bundled_model(model):
    ids, mask = model.to_tokens([TEXT, "When Mary and John went"])
    logits, cache = model.run_with_cache(ids, attention_mask=mask)
    stack, labels = cache.decompose_resid(return_labels=True)
    assert labels == ["embed", "pos_embed", "0_attn_out", "1_attn_out"]  # attention only
    nxt = np.concatenate([ids[:, 1:], ids[:, :1]], 1)  # each position's next token (a per-position id array)
    attrs = cache.logit_attrs(stack, nxt)
    assert attrs.shape == (4,) + ids.shape
    total = attrs.sum(0) + np.einsum("d,dbt->bt", model.ln_final_b.astype(np.float64), model.W_U[:, nxt])
    want = np.take_along_axis(logits, nxt[..., None], -1)[..., 0]
    assert np.abs(total - want)[mask].max() <= 1e-4 * max(1.0, np.abs(logits).max())
    with pytest.raises(qkv.Error, match="stack's components"):
        cache.apply_ln_to_stack(stack[:, :1])
    with pytest.raises(qkv.Error, match="mode"):
        cache.decompose_resid(mode="heads")


def _close(a, b, arch=""):
    scale = max(1.0, float(np.abs(b).max()))
    assert a.shape == b.shape and np.abs(np.asarray(a, np.float64) - b).max() <= 1e-4 * scale, arch


@pytest.mark.parametrize("arch", FAMILIES)
def test_apply_ln_is_the_engines_final_norm(family_model, arch):
    """accumulated_resid(apply_ln=True)'s last component, through ln_final's weight and bias, is the engine's
    ln_final.hook_normalized; the other stacks apply the same scales."""
    m = family_model(arch)
    _, cache = m.run_with_cache(IDS)
    w = m.ln_final_w.astype(np.float64) + (1.0 if m.config["norm"] == "rmsnorm_plus_one" else 0.0)
    acc = cache.accumulated_resid(apply_ln=True)
    assert acc.dtype == np.float64
    _close(acc[-1] * w + m.ln_final_b, cache["ln_final.hook_normalized"], arch)
    dec = cache.decompose_resid(apply_ln=True)
    _close(dec.sum(0) * w + m.ln_final_b, cache["ln_final.hook_normalized"], arch)
    heads = cache.stack_head_results(incl_remainder=True, apply_ln=True)
    _close(heads.sum(0) * w + m.ln_final_b, cache["ln_final.hook_normalized"], arch)


@pytest.mark.parametrize("arch", ["gpt2", "gpt_neox", "gemma"])
def test_mlp_input_and_the_remainder(family_model, arch):
    """mlp_input stacks what the MLP reads (resid_mid; resid_pre where attention and MLP run in parallel);
    the remainder completes the heads to the residual the layer reads."""
    m = family_model(arch)
    _, cache = m.run_with_cache(IDS)
    mlp_reads = "resid_pre" if m.config["parallel_residual"] else "resid_mid"
    stack, labels = cache.accumulated_resid(layer=1, mlp_input=True, return_labels=True)
    assert labels == ["0_pre", "1_pre"] + ([] if m.config["parallel_residual"] else ["1_mid"])
    assert np.array_equal(stack[-1], cache[mlp_reads, 1])
    _close(cache.decompose_resid(layer=1, mlp_input=True).sum(0), cache[mlp_reads, 1], arch)
    _close(cache.decompose_resid(layer=1).sum(0), cache["resid_pre", 1], arch)
    res, labels = cache.stack_head_results(layer=1, incl_remainder=True, return_labels=True)
    assert labels[-1] == "remainder" and len(labels) == m.cfg.n_heads + 1
    _close(res.sum(0), cache["resid_pre", 1], arch)


@pytest.mark.parametrize("pos", [3, -1, (1, 5), slice(2, None), [0, 4, 6]])
def test_pos_slice_keeps_those_positions(model, pos):
    _, cache = model.run_with_cache(TEXT)
    index = slice(*pos) if isinstance(pos, tuple) else pos
    for stack in ("accumulated_resid", "decompose_resid", "stack_head_results"):
        for ln in (False, True):
            full = getattr(cache, stack)(apply_ln=ln)
            part = getattr(cache, stack)(apply_ln=ln, pos_slice=pos)
            want = full[:, index] if not isinstance(pos, list) else full[:, np.asarray(pos)]
            assert part.shape == want.shape and np.allclose(part, want, rtol=1e-12, atol=0), (stack, ln)
    ids, mask = model.to_tokens([TEXT, TEXT])
    _, batch = model.run_with_cache(ids, attention_mask=mask)
    assert np.allclose(batch.accumulated_resid(apply_ln=True, pos_slice=pos)[:, 0],
                       cache.accumulated_resid(apply_ln=True, pos_slice=pos), rtol=1e-5, atol=1e-6)
    with pytest.raises(qkv.Error, match="pos_slice"):
        cache.accumulated_resid(pos_slice=1000)
