# Hooks that stay on the model (qkv/added_hooks.py: add_hook, add_perma_hook, reset_hooks, hooks()), as
# TransformerLens users write them: every forward runs them until they are removed, the cache holds what
# they left, and the experiments that cannot run them refuse instead of leaving them out.
import numpy as np
import pytest

import qkv
from conftest import FAMILIES

Z1 = "blocks.1.attn.hook_z"


@pytest.fixture
def m(model):
    """The bundled model, with every added hook removed after the test (the fixture is shared)."""
    yield model
    model.reset_hooks(including_permanent=True)


def zero_head0(z, hook):
    z[:, 0, :] = 0


def test_an_added_hook_runs_in_every_forward_until_reset(m, tokens):
    base = m(tokens)
    hooked = m.run_with_hooks(tokens, fwd_hooks=[(Z1, zero_head0)])
    assert not np.array_equal(base, hooked)
    m.add_hook(Z1, zero_head0)
    assert np.array_equal(m(tokens), hooked)
    assert np.array_equal(m.run_with_hooks(tokens), hooked)
    assert m(tokens, return_type="loss") == m.run_with_hooks(tokens, return_type="loss")
    assert m(tokens, return_type="loss") != m.run_with_hooks(tokens, return_type="loss", fwd_hooks=[
        (Z1, lambda z, hook: z * 3)])
    m.reset_hooks()
    assert np.array_equal(m(tokens), base)


def test_the_cache_holds_what_the_hooks_left(m, tokens):
    m.add_hook(Z1, zero_head0)
    logits, cache = m.run_with_cache(tokens, names=[Z1, "blocks.1.hook_attn_out"])
    assert sorted(cache) == sorted([Z1, "blocks.1.hook_attn_out"])
    assert np.all(cache[Z1][:, 0] == 0) and np.any(cache[Z1][:, 1] != 0)
    assert np.array_equal(logits, m(tokens))
    m.reset_hooks()
    _, plain = m.run_with_cache(tokens, names=[Z1])
    assert np.any(plain[Z1][:, 0] != 0)


@pytest.mark.parametrize("arch", FAMILIES)
def test_a_hook_that_changes_nothing_gives_the_materialised_cache_bit_for_bit(family_model, arch):
    fm = family_model(arch)
    ids = np.arange(3, 14)
    try:
        _, ref = fm.run_with_cache(ids, materialise_all=True)
        fm.add_hook(lambda n: True, lambda a, hook: None)
        _, cache = fm.run_with_cache(ids)
        _, one_layer = fm.run_with_cache(ids, layers=[0])
    finally:
        fm.reset_hooks()
    assert sorted(cache) == sorted(ref)
    assert [n for n in ref if not np.array_equal(ref[n], cache[n])] == []
    assert all(not n.startswith("blocks.") or n.startswith("blocks.0.") for n in one_layer) and len(one_layer) > 1


def test_a_batch_with_added_hooks(m):
    toks, mask = m.to_tokens(["When Mary and John went", "a b"])
    _, ref = m.run_with_cache(toks, attention_mask=mask, materialise_all=True)
    m.add_hook(lambda n: True, lambda a, hook: None)
    logits, cache = m.run_with_cache(toks, attention_mask=mask)
    assert logits.shape[0] == 2 and [n for n in ref if not np.array_equal(ref[n], cache[n])] == []


def test_order_prepend_filters_and_permanence(m, tokens):
    calls = []
    m.add_hook(Z1, lambda z, hook: calls.append("a"))
    m.add_perma_hook(Z1, lambda z, hook: calls.append("perma"))
    m.add_hook(Z1, lambda z, hook: calls.append("first"), prepend=True)
    m.add_hook(lambda n: n.endswith("hook_z"), lambda z, hook: calls.append(hook.name))
    m(tokens)
    assert calls == ["blocks.0.attn.hook_z", "first", "a", "perma", Z1]
    m.run_with_hooks(tokens, fwd_hooks=[(Z1, lambda z, hook: calls.append("call's own"))])
    assert calls[-2:] == [Z1, "call's own"]
    m.reset_hooks()
    calls.clear()
    m(tokens)
    assert calls == ["perma"]
    m.reset_hooks(including_permanent=True)
    calls.clear()
    m(tokens)
    assert calls == []


def test_the_hooks_block_removes_what_it_added(m, tokens):
    base = m(tokens)
    calls = []
    m.add_hook(Z1, lambda z, hook: calls.append("outside"))
    with m.hooks(fwd_hooks=[(Z1, zero_head0)]) as same:
        assert same is m
        with m.hooks():
            m.add_hook(Z1, lambda z, hook: calls.append("inner"))
        m.add_hook(Z1, lambda z, hook: calls.append("inside"))
        inside = m(tokens)
    assert calls == ["outside", "inside"]
    assert not np.array_equal(inside, base)
    calls.clear()
    with pytest.raises(RuntimeError):
        with m.hooks(fwd_hooks=[(Z1, zero_head0)]):
            raise RuntimeError("a hook's experiment failed")
    assert np.array_equal(m(tokens), base) and calls == ["outside"]
    with m.hooks(fwd_hooks=[(Z1, zero_head0)], reset_hooks_end=False):
        pass
    assert np.array_equal(m(tokens), inside)


def test_run_with_hooks_can_leave_its_hooks_on(m, tokens):
    hooked = m.run_with_hooks(tokens, fwd_hooks=[(Z1, zero_head0)], reset_hooks_end=False)
    assert np.array_equal(m(tokens), hooked)


def test_generate_runs_the_added_hooks(m, tokens):
    by_arg = m.generate(tokens, max_new_tokens=4, fwd_hooks=[(Z1, zero_head0)])
    m.add_hook(Z1, zero_head0)
    assert np.array_equal(m.generate(tokens, max_new_tokens=4), by_arg)
    batch = m.generate([tokens, tokens], max_new_tokens=4)
    assert all(np.array_equal(b, by_arg) for b in batch)


def test_errors(m, tokens):
    with pytest.raises(qkv.Error, match="not a hook point"):
        m.add_hook("blocks.0.attn.hook_zz", zero_head0)
    with pytest.raises(qkv.Error, match="accepts none"):
        m.add_hook(lambda n: False, zero_head0)
    with pytest.raises(qkv.Error, match="not callable"):
        m.add_hook(Z1, 3)
    with pytest.raises(qkv.Error, match="forward hooks only"):
        m.add_hook(Z1, zero_head0, dir="bwd")
    with pytest.raises(qkv.Error, match="forward hooks only"):
        m.run_with_hooks(tokens, bwd_hooks=[(Z1, zero_head0)])
    with pytest.raises(qkv.Error, match="forward hooks only"):
        with m.hooks(bwd_hooks=[(Z1, zero_head0)]):
            pass
    with pytest.raises(qkv.Error, match="pairs"):
        with m.hooks(fwd_hooks=[Z1]):
            pass
    with pytest.raises(qkv.Error, match="return_type"):
        m.run_with_hooks(tokens, return_type="probs")
    assert np.array_equal(m(tokens), m.run_with_hooks(tokens))  # nothing was left on the model
    m.add_hook(Z1, zero_head0)
    for run, name in [(lambda: qkv.patch(m, tokens, tokens), "qkv.patch"),
                      (lambda: qkv.heads(m), "qkv.heads"),
                      (lambda: m.run_with_cache(tokens, incl_bwd=True, metric=qkv.loss()), "incl_bwd")]:
        with pytest.raises(qkv.Error, match="cannot run Python hooks") as e:
            run()
        assert name in str(e.value) and Z1 in str(e.value) and e.value.exit_code == 2


@pytest.mark.parametrize("arch", ["gpt2", "phi3"])
def test_mlp_neurons_can_be_hooked_and_steered(family_model, arch):
    """mlp.hook_post (the MLP's neurons) edited in a hook changes hook_mlp_out by exactly that edit through
    W_out; generate steers it (Phi-3: the fused gate_up_proj's strided gate goes through a copy)."""
    fm = family_model(arch)
    ids = np.arange(3, 12)
    _, base = fm.run_with_cache(ids)

    def kill(post, hook):
        post[:, 5] = 0

    with fm.hooks(fwd_hooks=[("blocks.0.mlp.hook_post", kill)]):
        _, cache = fm.run_with_cache(ids, names=["blocks.0.mlp.hook_post", "blocks.0.hook_mlp_out"])
    want = base["blocks.0.hook_mlp_out"] - np.outer(base["blocks.0.mlp.hook_post"][:, 5], fm.W_out[0][5])
    assert np.all(cache["blocks.0.mlp.hook_post"][:, 5] == 0)
    if not fm.cfg.post_norms:
        assert np.abs(cache["blocks.0.hook_mlp_out"] - want).max() <= 1e-5 * max(1, np.abs(want).max())

    def double_gate(pre, hook):
        return pre * 2

    doubled = fm.run_with_hooks(ids, fwd_hooks=[("blocks.0.mlp.hook_pre", double_gate)])
    assert not np.array_equal(doubled, fm(ids))
    seen = []
    v = np.linspace(-1, 1, fm.cfg.d_mlp).astype(np.float32)
    fm.generate(ids, max_new_tokens=1, steer=[("blocks.1.mlp.hook_post", v, 4.0)], stop_at_eos=False,
                fwd_hooks=[("blocks.1.mlp.hook_post", lambda post, hook: seen.append(post.copy()))])
    want = base["blocks.1.mlp.hook_post"] + 4.0 * v  # steering adds before the hooks see it
    assert seen[0].shape == want.shape and np.abs(seen[0] - want).max() <= 1e-5 * np.abs(want).max()
