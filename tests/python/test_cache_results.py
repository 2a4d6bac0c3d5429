# What the cache derives (qkv/cache_results.py) and the weights' sums (tokens_to_residual_directions,
# accumulated_bias), checked against what the engine computed: the norms' scales give back the engine's
# normalized rows, and the residual stream is rebuilt from the embeddings, every head's result, every
# neuron's result and the accumulated biases, on every family.
import numpy as np
import pytest

import qkv
from conftest import FAMILIES

IDS = np.array([3, 57, 14, 92, 0, 57, 14, 92, 41, 100, 7, 57])


def close(got, want, rel=1e-4):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    err = np.abs(got - want).max() / max(np.abs(want).max(), 1e-30)
    assert err <= rel, err


@pytest.mark.parametrize("arch", FAMILIES)
def test_hook_scale_gives_back_the_normalized_rows(family_model, arch):
    m = family_model(arch)
    cfg = m.cfg
    _, cache = m.run_with_cache(IDS % cfg.d_vocab)
    plus = 1.0 if m.config["norm"] == "rmsnorm_plus_one" else 0.0

    def check(x, scale, w, b, normalized):
        x = np.asarray(x, np.float64)
        if cfg.normalization_type == "LN":
            x = x - x.mean(-1, keepdims=True)
        assert scale.shape == x.shape[:-1] + (1,) and scale.dtype == np.float32
        close(x / scale * (w + plus) + b, normalized)

    for l in range(cfg.n_layers):
        b = "blocks.%d." % l
        scale = cache[b + "ln1.hook_scale"]
        assert np.array_equal(scale, cache["scale", l, "ln1"])
        check(cache[b + "hook_resid_pre"], scale, m.ln1_w[l], m.ln1_b[l], cache[b + "ln1.hook_normalized"])
        mid = cache[b + ("hook_resid_pre" if cfg.parallel_attn_mlp else "hook_resid_mid")]
        check(mid, cache[b + "ln2.hook_scale"], m.ln2_w[l], m.ln2_b[l], cache[b + "ln2.hook_normalized"])
    assert np.array_equal(cache["scale"], cache["ln_final.hook_scale"])
    check(cache["blocks.%d.hook_resid_post" % (cfg.n_layers - 1)], cache["scale"], m.ln_final_w, m.ln_final_b,
          cache["ln_final.hook_normalized"])


@pytest.mark.parametrize("arch", FAMILIES)
def test_heads_neurons_and_biases_rebuild_the_residual_stream(family_model, arch):
    """resid_pre of every layer = the embeddings + every head's and neuron's result below it + the
    accumulated biases (resid_mid: + that layer's heads and b_O), and each layer's results sum to
    hook_attn_out / hook_mlp_out; Gemma 2, whose post-norms rescale the sums, through its norm."""
    m = family_model(arch)
    cfg = m.cfg
    _, cache = m.run_with_cache(IDS % cfg.d_vocab)
    cache.compute_head_results()
    total = sum(cache.decompose_resid(layer=0, return_labels=False).astype(np.float64))
    for l in range(cfg.n_layers):
        heads = cache["result", l].astype(np.float64).sum(-2)           # [T, d]
        neurons = cache.get_neuron_results(l).astype(np.float64).sum(-2)
        if cfg.post_norms:
            with pytest.raises(qkv.Error, match="post-norms"):
                m.accumulated_bias(l)
            continue
        close(heads + m.b_O[l], cache["attn_out", l])
        close(neurons + m.b_out[l], cache["mlp_out", l])
        close(total + m.accumulated_bias(l), cache["resid_pre", l])
        if not cfg.parallel_attn_mlp:
            close(total + heads + m.accumulated_bias(l, mlp_input=True), cache["resid_mid", l])
        total = total + heads + neurons
    if not cfg.post_norms:
        close(total + m.accumulated_bias(cfg.n_layers), cache["resid_post", cfg.n_layers - 1])
        assert np.array_equal(m.accumulated_bias(1, include_mlp_biases=False), m.b_O[0])


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_stack_neuron_results_slices_and_labels(family_model, arch):
    m = family_model(arch)
    cfg = m.cfg
    _, cache = m.run_with_cache(IDS % cfg.d_vocab)
    full = cache.get_neuron_results(1)
    assert full.shape == (len(IDS), cfg.d_mlp, cfg.d_model)
    assert np.array_equal(cache.get_neuron_results(1, neuron_slice=5), full[:, 5:6])
    assert np.array_equal(cache.get_neuron_results(1, neuron_slice=[7, 2]), full[:, [7, 2]])
    assert np.array_equal(cache.get_neuron_results(1, neuron_slice=(0, 6, 2), pos_slice=-1), full[-1, 0:6:2])
    stack, labels = cache.stack_neuron_results(-1, neuron_slice=[3, 9], return_labels=True, incl_remainder=True)
    assert labels == ["L0N3", "L0N9", "L1N3", "L1N9", "remainder"] and stack.shape == (5, len(IDS), cfg.d_model)
    assert np.array_equal(stack[3], full[:, 9])
    close(stack.astype(np.float64).sum(0), cache["resid_post", 1])
    ln = cache.stack_neuron_results(2, neuron_slice=[3], apply_ln=True)
    close(ln, cache.apply_ln_to_stack(cache.stack_neuron_results(2, neuron_slice=[3])))
    with pytest.raises(qkv.Error, match="neuron_slice"):
        cache.get_neuron_results(0, neuron_slice=[cfg.d_mlp])


def test_tokens_to_residual_directions(model, family_model):
    m = family_model("gpt2")
    ids = np.array([[1, 5], [7, 7]])
    assert np.array_equal(m.tokens_to_residual_directions(ids), m.W_U[:, ids].transpose(1, 2, 0))
    assert np.array_equal(m.tokens_to_residual_directions(5), m.W_U[:, 5])
    assert np.array_equal(model.tokens_to_residual_directions("M"), model.W_U[:, model.to_single_token("M")])
    with pytest.raises(qkv.Error, match="token ids"):
        m.tokens_to_residual_directions([m.cfg.d_vocab])


def test_an_attention_only_cache_has_no_neurons_and_no_ln2_scale(model, tokens):
    _, cache = model.run_with_cache(tokens)
    with pytest.raises(qkv.Error, match="attention-only"):
        cache.get_neuron_results(0)
    with pytest.raises(KeyError):
        cache["blocks.0.ln2.hook_scale"]
    assert cache["blocks.1.ln1.hook_scale"].shape == (len(tokens), 1)
    with pytest.raises(KeyError):
        cache["blocks.7.ln1.hook_scale"]


def test_a_batch_derives_what_each_sequence_does(family_model):
    m = family_model("gpt2")
    ids = np.stack([IDS, IDS[::-1]]) % m.cfg.d_vocab
    _, batch = m.run_with_cache(ids)
    batch.compute_head_results()
    for b in range(2):
        _, one = m.run_with_cache(ids[b])
        one.compute_head_results()
        close(batch["blocks.1.ln2.hook_scale"][b], one["blocks.1.ln2.hook_scale"], rel=1e-5)
        close(batch["result", 1][b], one["result", 1], rel=1e-5)
        close(batch.get_neuron_results(0, neuron_slice=[4, 1])[b], one.get_neuron_results(0, neuron_slice=[4, 1]), rel=1e-5)
        close(batch.stack_neuron_results(1, neuron_slice=2)[:, b], one.stack_neuron_results(1, neuron_slice=2), rel=1e-5)


@pytest.mark.parametrize("arch", FAMILIES)
def test_the_full_decomposition_sums_to_the_residual(family_model, arch):
    m = family_model(arch)
    cfg = m.cfg
    _, cache = m.run_with_cache(IDS % cfg.d_vocab)
    if cfg.post_norms:
        with pytest.raises(qkv.Error, match="post-norms"):
            cache.get_full_resid_decomposition()
        return
    H, L, ff = cfg.n_heads, cfg.n_layers, cfg.d_mlp
    stack, labels = cache.get_full_resid_decomposition(return_labels=True)
    assert labels[:2] == ["L0H0", "L0H1"] and "L%dN%d" % (L - 1, ff - 1) in labels and labels[-1] == "bias"
    embeds = 2 if cfg.positional_embedding_type == "standard" else 1
    assert stack.shape == (L * H + L * ff + embeds + 1, len(IDS), cfg.d_model) and len(labels) == len(stack)
    close(stack.astype(np.float64).sum(0), cache["resid_post", L - 1])
    coarse, cl = cache.get_full_resid_decomposition(layer=1, mlp_input=True, expand_neurons=False, return_labels=True)
    assert "0_mlp_out" in cl and ("L1H0" in cl) != bool(cfg.parallel_attn_mlp)
    close(coarse.astype(np.float64).sum(0), cache["resid_pre" if cfg.parallel_attn_mlp else "resid_mid", 1])
    last = cache.get_full_resid_decomposition(layer=1, pos_slice=-1, apply_ln=True)
    close(last, cache.apply_ln_to_stack(cache.get_full_resid_decomposition(layer=1)[:, -1:], layer=1,
                                        pos_slice=[-1])[:, 0])
