"""Batches from Python (issue 25, item 1): to_tokens with padding on either side, model / run_with_cache /
run_with_hooks on [B, T] with the mask, each sequence's real positions equal to its own single run on every
family, the gradients of a batch equal to each sequence's, and bad input raising qkv.Error."""
import numpy as np
import pytest

import qkv
from conftest import FAMILIES

SEQS = [[5, 9, 13, 5, 9, 13, 2, 7, 11, 3, 5, 9, 13, 4], [8, 1, 8, 1, 3, 8, 1], [4, 6, 2, 10, 12, 4, 6, 2, 10]]


def span(mask, b):
    """The real positions [s, e) of row b of a mask."""
    idx = np.flatnonzero(mask[b])
    return idx[0], idx[-1] + 1


def real_part(name, batch_arr, b, s, e):
    """Sequence b's real part of a batch array: rows s..e of [B, T, …], the [s:e, s:e] block of [B, H, T, T]."""
    a = batch_arr[b]
    if name.endswith("hook_pattern") or name.endswith("hook_attn_scores"):
        return a[:, s:e, s:e]
    return a[s:e]


def close(got, want, rel=1e-5):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape
    fin = np.isfinite(want)
    assert np.array_equal(fin, np.isfinite(got))
    scale = max(1e-30, np.abs(want[fin]).max()) if fin.any() else 1
    assert np.abs(got[fin] - want[fin]).max() <= rel * scale


def test_to_tokens_pads_and_masks(model):
    toks, mask = model.to_tokens(SEQS)
    assert toks.dtype == np.int32 and mask.dtype == bool and toks.shape == mask.shape == (3, 14)
    assert list(toks[1, :7]) == SEQS[1] and not mask[1, 7:].any() and mask[1, :7].all()
    toks, mask = model.to_tokens(SEQS, padding_side="left")
    assert list(toks[2, 5:]) == SEQS[2] and not mask[2, :5].any()
    toks, mask = model.to_tokens(["abc", "de"], bos=7)
    assert list(toks[0]) == [7] + list(model.tokenize("abc")) and list(mask[1]) == [True, True, True, False]
    with pytest.raises(qkv.Error, match="padding_side"):
        model.to_tokens(SEQS, padding_side="middle")


@pytest.mark.parametrize("arch", FAMILIES)
@pytest.mark.parametrize("side", ["right", "left"])
def test_each_sequence_equals_its_own_run(family_model, arch, side):
    m = family_model(arch)
    toks, mask = m.to_tokens(SEQS, padding_side=side)
    logits, cache = m.run_with_cache(toks, attention_mask=mask)
    assert logits.shape == (3, 14, m.cfg.d_vocab)
    assert cache["blocks.0.attn.hook_q"].shape == (3, 14, m.cfg.n_heads, m.cfg.d_head)
    assert cache["blocks.0.attn.hook_k"].shape == (3, 14, m.cfg.n_key_value_heads, m.cfg.d_head)
    assert cache["blocks.1.attn.hook_pattern"].shape == (3, m.cfg.n_heads, 14, 14)
    for b, seq in enumerate(SEQS):
        s, e = span(mask, b)
        _, one = m.run_with_cache(np.array(seq))
        assert sorted(one) == sorted(cache)
        for name, arr in one.items():
            close(real_part(name, cache[name], b, s, e), arr)
    # the plain forward and the hooked one give the same logits
    close(m(toks, attention_mask=mask), logits)
    close(m.run_with_hooks(toks, attention_mask=mask), logits)


def test_hooks_see_and_edit_the_batch(family_model):
    m = family_model("llama")
    toks, mask = m.to_tokens(SEQS, padding_side="left")
    seen = {}

    def look(a, name):
        seen[name] = a.shape

    def zero_head(v, name):
        v[:, :, 1, :] = 0

    m.run_with_hooks(toks, fwd_hooks=[("blocks.0.attn.hook_v", look), ("blocks.1.attn.hook_pattern", look),
                                      ("blocks.1.hook_resid_pre", look)], attention_mask=mask)
    c = m.cfg
    assert seen == {"blocks.0.attn.hook_v": (3, 14, c.n_key_value_heads, c.d_head),
                    "blocks.1.attn.hook_pattern": (3, c.n_heads, 14, 14), "blocks.1.hook_resid_pre": (3, 14, c.d_model)}
    edited = m.run_with_hooks(toks, fwd_hooks=[("blocks.0.attn.hook_v", zero_head)], attention_mask=mask)
    for b, seq in enumerate(SEQS):
        s, e = span(mask, b)
        one = m.run_with_hooks(np.array(seq), fwd_hooks=[("blocks.0.attn.hook_v", lambda v, n: v.__setitem__(
            (slice(None), 1), 0))])
        close(edited[b, s:e], one)


@pytest.mark.parametrize("arch", ["gpt2", "gemma2", "gpt_neox"])
def test_batch_gradients_equal_each_sequences(family_model, arch):
    m = family_model(arch)
    toks, mask = m.to_tokens(SEQS, padding_side="left")
    metric = qkv.logit_diff(3, 8, position=-1)
    _, cache = m.run_with_cache(toks, attention_mask=mask, incl_bwd=True, metric=metric)
    for b, seq in enumerate(SEQS):
        s, e = span(mask, b)
        _, one = m.run_with_cache(np.array(seq), incl_bwd=True, metric=metric)
        for name in one:
            if name.endswith("_grad"):
                g = cache[name]
                close(real_part(name[:-5], g, b, s, e), one[name])
                pad = np.ones(g.shape[1:], bool)
                if name[:-5].endswith(("hook_pattern", "hook_attn_scores")):
                    pad[:, s:e, s:e] = False
                else:
                    pad[s:e] = False
                assert not g[b][pad].any(), name  # padding has no gradient
    # a callable sees the batch's logits [B, T, V]
    calls = []

    def f(logits):
        calls.append(logits.shape)
        g = np.zeros_like(logits)
        g[:, -1, 3] = 1
        return float(logits[:, -1, 3].sum()), g

    _, c2 = m.run_with_cache(toks, attention_mask=mask, incl_bwd=True, metric=f, names=["blocks.0.hook_resid_pre"])
    assert calls == [(3, 14, m.cfg.d_vocab)] and c2["blocks.0.hook_resid_pre_grad"].shape == (3, 14, m.cfg.d_model)


def test_a_list_of_texts_is_a_batch(model):
    logits, cache = model.run_with_cache(["abcab", "ab"])
    assert logits.shape[:2] == (2, 5)
    close(logits[1, :2], model(model.tokenize("ab")))


def test_bad_batches_raise(model):
    toks, mask = model.to_tokens(SEQS)
    with pytest.raises(qkv.Error, match="attention_mask"):
        model(toks, attention_mask=mask[:, :5])
    holes = mask.copy()
    holes[0, 3] = False
    with pytest.raises(qkv.Error, match="contiguous"):
        model(toks, attention_mask=holes)
    empty = mask.copy()
    empty[1] = False
    with pytest.raises(qkv.Error, match="no real token"):
        model.run_with_cache(toks, attention_mask=empty)
    with pytest.raises(qkv.Error, match="attention_mask"):
        model(np.array(SEQS[0]), attention_mask=np.ones(14, bool))
    with pytest.raises(qkv.Error, match="outside the vocabulary"):
        model(np.full((2, 3), 10 ** 6))
    with pytest.raises(qkv.Error):
        model(np.zeros((2, 0), np.int64))
