# TransformerLens's module tree over qkv.Model (qkv/modules.py): model.blocks[l].attn.W_Q and friends are
# the model's own weights, hook points found through the tree add and remove the model's hooks, and what a
# model does not have (an MLP, a post-norm, a hook) is missing from its tree as it is from TransformerLens's.
import numpy as np
import pytest

import qkv
from conftest import FAMILIES


@pytest.fixture
def m(model):
    """The bundled (attention-only GPT-2) model, with every added hook removed after the test."""
    yield model
    model.reset_hooks(including_permanent=True)


def same(a, b):
    return a.shape == b.shape and np.array_equal(a, b)


@pytest.mark.parametrize("arch", FAMILIES)
def test_the_tree_holds_the_models_weights(family_model, arch):
    m = family_model(arch)
    cfg = m.cfg
    assert len(m.blocks) == cfg.n_layers
    for l in range(cfg.n_layers):
        blk = m.blocks[l]
        for k in ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O"):
            assert same(getattr(blk.attn, k), getattr(m, k)[l]), (k, l)
        for k in ("W_in", "W_out", "b_in", "b_out") + (("W_gate",) if cfg.gated_mlp else ()):
            assert same(getattr(blk.mlp, k), getattr(m, k)[l]), (k, l)
        assert not cfg.gated_mlp or not hasattr(blk.mlp, "W_gate") or same(blk.mlp.W_gate, m.W_gate[l])
        for ln in ("ln1", "ln2"):
            assert same(getattr(blk, ln).w, getattr(m, ln + "_w")[l]) and same(getattr(blk, ln).b, getattr(m, ln + "_b")[l])
        assert hasattr(blk, "ln1_post") == bool(cfg.post_norms)
        if cfg.post_norms:
            assert same(blk.ln1_post.w, m.ln1_post_w[l]) and same(blk.ln2_post.w, m.ln2_post_w[l])
    assert m.blocks[-1] is m.blocks[cfg.n_layers - 1]
    assert same(m.ln_final.w, m.ln_final_w) and same(m.ln_final.b, m.ln_final_b)
    assert same(m.embed.W_E, m.W_E) and same(m.unembed.W_U, m.W_U) and same(m.unembed.b_U, m.b_U)
    if cfg.positional_embedding_type == "standard":
        assert same(m.pos_embed.W_P, m.W_pos)
    else:
        with pytest.raises(qkv.Error, match="rotary"):
            m.pos_embed.W_P
    if not cfg.gated_mlp:
        assert not hasattr(m.blocks[0].mlp, "W_gate")


def test_the_tree_views_the_file_as_the_stacks_do(m):
    state = m.state_dict()
    assert np.shares_memory(m.blocks[0].attn.W_Q, state["h.0.attn.c_attn.weight"])
    assert np.shares_memory(m.blocks[1].ln1.w, state["h.1.ln_1.weight"])


def test_an_attention_only_block_has_no_mlp_and_no_ln2(m):
    blk = m.blocks[0]
    assert "mlp" not in dir(blk) and "ln2" not in dir(blk)
    with pytest.raises(AttributeError, match="has no 'mlp'"):
        blk.mlp
    assert not hasattr(blk, "ln2")
    with pytest.raises(AttributeError, match="hook_nonsense"):
        blk.attn.hook_nonsense


def test_dir_lists_children_weights_and_hooks(m):
    names = dir(m.blocks[1])
    assert {"attn", "ln1", "hook_resid_pre", "hook_attn_out", "hook_resid_post"} <= set(names)
    assert {"W_Q", "b_O", "hook_z", "hook_pattern"} <= set(dir(m.blocks[1].attn))
    assert m.blocks[1].hook_points() == [n for n in m.hook_names if n.startswith("blocks.1.")]
    assert list(m.hook_dict) == m.hook_names + (["logits"] if "logits" not in m.hook_names else [])


def zero_head0(z, hook):
    z[:, 0, :] = 0


def test_a_hook_point_of_the_tree_adds_and_removes_the_models_hooks(m, tokens):
    base = m(tokens)
    want = m.run_with_hooks(tokens, fwd_hooks=[("blocks.1.attn.hook_z", zero_head0)])
    point = m.blocks[1].attn.hook_z
    assert isinstance(point, qkv.ModelHookPoint) and point == "blocks.1.attn.hook_z" and point.layer() == 1
    point.add_hook(zero_head0)
    assert np.array_equal(m(tokens), want)
    seen = []
    m.hook_dict["blocks.0.hook_resid_pre"].add_hook(lambda x, hook: seen.append(hook.name))
    m.blocks[0].hook_resid_post.add_hook(lambda x, hook: seen.append(hook.name), is_permanent=True)
    point.remove_hooks()                                 # this point's only: the others stay
    assert np.array_equal(m(tokens), base)
    assert seen == ["blocks.0.hook_resid_pre", "blocks.0.hook_resid_post"]
    m.blocks[0].hook_resid_pre.remove_hooks()
    m.blocks[0].hook_resid_post.remove_hooks()           # permanent: kept
    seen.clear()
    m(tokens)
    assert seen == ["blocks.0.hook_resid_post"]
    m.blocks[0].hook_resid_post.remove_hooks(including_permanent=True)
    seen.clear()
    m(tokens)
    assert seen == []


def test_the_tree_refuses_backward_hooks(m):
    with pytest.raises(qkv.Error, match="forward hooks only"):
        m.blocks[0].attn.hook_q.add_hook(zero_head0, dir="bwd")
    with pytest.raises(qkv.Error, match="forward hooks only"):
        m.blocks[0].attn.hook_q.remove_hooks(dir="bwd")
