# Hooks as TransformerLens writes them: a name filter hooks every point it accepts, and the second argument
# is a qkv.HookPoint (the name as a str, with .name and .layer()); the results equal those of explicit names.
import numpy as np
import pytest

import qkv


def test_hook_point_is_the_name_with_transformer_lens_attributes():
    h = qkv.HookPoint("blocks.3.attn.hook_z")
    assert h == "blocks.3.attn.hook_z" and isinstance(h, str) and h.name == "blocks.3.attn.hook_z"
    assert h.layer() == 3 and h.endswith("hook_z")
    with pytest.raises(qkv.Error, match="not inside a block"):
        qkv.HookPoint("ln_final.hook_normalized").layer()


def test_a_filter_hooks_every_point_it_accepts(model, tokens):
    seen = []

    def ablate(z, hook):
        seen.append((type(hook), hook.name, hook.layer()))
        if hook.layer() == 1:
            z[:, 0, :] = 0

    def ablate_one(z, name):
        z[:, 0, :] = 0

    by_filter = model.run_with_hooks(tokens, fwd_hooks=[(lambda n: n.endswith("hook_z"), ablate)])
    by_name = model.run_with_hooks(tokens, fwd_hooks=[("blocks.1.attn.hook_z", ablate_one)])
    assert seen == [(qkv.HookPoint, "blocks.0.attn.hook_z", 0), (qkv.HookPoint, "blocks.1.attn.hook_z", 1)]
    assert np.array_equal(by_filter, by_name) and not np.array_equal(by_name, model(tokens))


def test_generate_takes_filters_and_hook_points(model, tokens):
    names = set()

    def record(a, hook):
        names.add(hook.name)

    model.generate(tokens, max_new_tokens=2, fwd_hooks=[(lambda n: "hook_pattern" in n, record)])
    assert names == {"blocks.0.attn.hook_pattern", "blocks.1.attn.hook_pattern"}
    names.clear()
    model.generate([tokens, tokens[:5]], max_new_tokens=2, fwd_hooks=[(lambda n: n == "blocks.1.attn.hook_z", record)])
    assert names == {"blocks.1.attn.hook_z"}


def test_hook_errors(model, tokens):
    with pytest.raises(qkv.Error, match="accepts none of the model's hook points"):
        model.run_with_hooks(tokens, fwd_hooks=[(lambda n: n.endswith("hook_nothing"), print)])
    with pytest.raises(qkv.Error, match="not callable"):
        model.run_with_hooks(tokens, fwd_hooks=[("blocks.0.attn.hook_z", 3)])
    with pytest.raises(qkv.Error, match="pairs"):
        model.run_with_hooks(tokens, fwd_hooks=[("blocks.0.attn.hook_z",)])
