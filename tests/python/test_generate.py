"""model.generate and qkv.steering_vector (issue 26) against the CLI's qkv generate / qkv steer, against
greedy decoding over full forwards done here with model(), and against hooks written by hand."""
import json

import numpy as np
import pytest

import qkv
from conftest import BUNDLED, run_cli

PROMPT = "xkq8vz3jw|xkq8vz3jw|x"
HOOK = "blocks.1.hook_resid_pre"


def cli_json(*args):
    return json.loads(run_cli("generate", "--model", BUNDLED, *args, "--json").stdout)


def test_greedy_equals_full_forwards_and_the_cli(model):
    ids = model.tokenize(PROMPT)
    out = model.generate(ids, max_new_tokens=12)
    assert out.dtype == np.int32 and np.array_equal(out[:len(ids)], ids)
    seq = list(ids)
    for _ in range(12):  # greedy over full forwards of the whole sequence (no cache)
        seq.append(int(np.argmax(model(np.array(seq))[-1])))
    assert list(out) == seq
    j = cli_json("--text", PROMPT, "--max-new-tokens", "12")
    assert j["tokens"] == seq[len(ids):]
    assert model.generate(PROMPT, max_new_tokens=12) == PROMPT + j["text"]
    d = model.generate(PROMPT, max_new_tokens=12, return_dict=True)
    assert list(d["tokens"]) == j["tokens"] and d["text"] == j["text"] and d["stop_reason"] == "max_new_tokens"
    assert d["prompt_tokens"] == len(ids) and d["tokens_per_second"] > 0


def test_sampling_reproducible_and_as_the_cli(model):
    # (the bundled model is sure of most bytes: a hot temperature and no nucleus so that seeds differ)
    kw = dict(max_new_tokens=20, temperature=2.0, top_k=50, top_p=0.99, seed=5, return_dict=True)
    a = model.generate("hello world", **kw)["tokens"]
    assert list(a) == list(model.generate("hello world", **kw)["tokens"])
    assert list(a) != list(model.generate("hello world", **dict(kw, seed=6))["tokens"])
    j = cli_json("--text", "hello world", "--max-new-tokens", "20", "--temperature", "2", "--top-k", "50",
                 "--top-p", "0.99", "--seed", "5")
    assert list(a) == j["tokens"]


def test_transformer_lens_do_sample(model):
    kw = dict(max_new_tokens=20, top_k=50, top_p=0.99, seed=5, return_dict=True)
    greedy = model.generate("hello world", **kw)["tokens"]
    assert list(model.generate("hello world", temperature=2.0, do_sample=False, verbose=True, **kw)["tokens"]) == list(greedy)
    hot = model.generate("hello world", temperature=2.0, **kw)["tokens"]
    assert list(model.generate("hello world", temperature=2.0, do_sample=True, **kw)["tokens"]) == list(hot)
    assert list(hot) != list(greedy)
    kw = dict(max_new_tokens=40, seed=0, return_dict=True)  # a seed at which 1.0 leaves the greedy path
    one = model.generate("hello world", temperature=1.0, **kw)["tokens"]
    assert list(one) != list(model.generate("hello world", **kw)["tokens"])
    assert list(model.generate("hello world", do_sample=True, **kw)["tokens"]) == list(one)  # TL's default 1.0


def test_hooks_run_at_every_step(model):
    ids = model.tokenize("abcabc")
    shapes, kept = [], []

    def record(p, name):
        shapes.append(p.shape)
        kept.append(p)  # kept past the step: the array owns its memory

    model.generate(ids, max_new_tokens=4, fwd_hooks=[("blocks.1.attn.hook_pattern", record)])
    H, T = model.config["H"], len(ids)
    assert shapes == [(H, T, T), (H, 1, T + 1), (H, 1, T + 2), (H, 1, T + 3)]
    assert all(np.allclose(k.sum(-1), 1, atol=1e-5) for k in kept)
    assert kept[0].hook_name == "blocks.1.attn.hook_pattern"

    # A zeroed head while the model writes = the same edit in every full forward of the sequence.
    def zero(z, name):
        z[:, 1, :] = 0

    out = model.generate(ids, max_new_tokens=10, fwd_hooks=[("blocks.1.attn.hook_z", zero)])
    seq = list(ids)
    for _ in range(10):
        logits = model.run_with_hooks(np.array(seq), fwd_hooks=[("blocks.1.attn.hook_z", zero)])
        seq.append(int(np.argmax(logits[-1])))
    assert list(out) == seq
    assert list(out) != list(model.generate(ids, max_new_tokens=10)), "zeroing the induction head changed nothing"


def test_steering_equals_adding_by_hand_and_the_cli(model, tmp_path):
    v = qkv.steering_vector(model, positive=["aaaa aaaa", "bbbb"], negative=["zzzz", "yyyy yyyy"], hook=HOOK)
    run_cli("steer", "--model", BUNDLED, "--positive", "aaaa aaaa", "bbbb", "--negative", "zzzz", "yyyy yyyy",
            "--hook", HOOK, "--out", tmp_path / "v.npy")
    assert v.dtype == np.float32 and np.array_equal(v, np.load(tmp_path / "v.npy"))
    # the definition: per text the mean over positions, then the mean over texts, positive minus negative
    def mean(texts):
        return np.mean([model.run_with_cache(t, names=[HOOK])[1][HOOK].astype(np.float64).mean(0) for t in texts], 0)
    want = mean(["aaaa aaaa", "bbbb"]) - mean(["zzzz", "yyyy yyyy"])
    assert np.abs(v - want).max() <= 1e-5 * np.abs(want).max()

    steered = model.generate("hello world, hello", max_new_tokens=16, steer=[(HOOK, v, 8.0)])

    def add(x, name):
        x += 8.0 * v

    by_hand = model.generate("hello world, hello", max_new_tokens=16, fwd_hooks=[(HOOK, add)])
    assert steered == by_hand
    assert steered != model.generate("hello world, hello", max_new_tokens=16)
    j = cli_json("--text", "hello world, hello", "--max-new-tokens", "16", "--steer", "%s:%s:8" % (HOOK, tmp_path / "v.npy"))
    assert steered == "hello world, hello" + j["text"]


def test_batches_of_prompts(model):
    a, b = model.tokenize("abcabc"), model.tokenize("hello")
    outs = model.generate([a, b], max_new_tokens=5)
    assert [list(o) for o in outs] == [list(model.generate(a, max_new_tokens=5)), list(model.generate(b, max_new_tokens=5))]
    pad = 0
    batch = np.full((2, 8), pad, dtype=np.int64)
    batch[0, 8 - len(a):] = a  # left-padded
    batch[1, :len(b)] = b      # right-padded
    outs = model.generate(batch, max_new_tokens=5, pad_id=pad)
    assert [list(o) for o in outs] == [list(model.generate(a, max_new_tokens=5)), list(model.generate(b, max_new_tokens=5))]
    assert model.generate(["ab", "cd"], max_new_tokens=2) == [model.generate("ab", max_new_tokens=2),
                                                              model.generate("cd", max_new_tokens=2)]


@pytest.mark.parametrize("arch", ["gpt2", "llama", "mistral", "qwen2", "gemma", "gemma2", "gpt_neox", "phi3", "gpt_neo"])
def test_a_batch_equals_each_prompt_alone_on_every_family(family_model, arch):
    """Prompts of lengths 6, 1, 3 generated as one batch (left-padded, B rows per step) = each alone:
    greedy, and sampled with a seed per prompt; one engine call whose dicts carry the batch's rate."""
    m = family_model(arch)
    V = m.config["vocab_size"]
    prompts = [[(7 * i + 3) % V for i in range(6)], [11 % V], [(5 * i + 1) % V for i in range(3)]]
    outs = m.generate(prompts, max_new_tokens=12, stop_at_eos=False)
    alone = [m.generate(p, max_new_tokens=12, stop_at_eos=False) for p in prompts]
    assert [list(o) for o in outs] == [list(a) for a in alone]
    # (Gemma 2's final soft-cap saturates at this init: a continuation may repeat one token)
    assert len({tuple(o[-12:]) for o in outs}) >= 2, "the continuations should differ"
    kw = dict(max_new_tokens=12, temperature=1.5, top_k=40, stop_at_eos=False)
    outs = m.generate(prompts, seed=[3, 4, 3], **kw)
    assert [list(o) for o in outs] == [list(m.generate(p, seed=s, **kw)) for p, s in zip(prompts, [3, 4, 3])]
    tokens, mask = m.to_tokens(prompts, padding_side="right")  # right padding is re-laid on the left
    d = m.generate(tokens, attention_mask=mask, max_new_tokens=12, stop_at_eos=False, return_dict=True)
    assert [list(x["tokens"]) for x in d] == [list(a[len(p):]) for a, p in zip(alone, prompts)]
    assert d[0]["batch_tokens_per_second"] > 0 and d[1]["prompt_tokens"] == 1


def test_hooks_in_a_batch_see_a_leading_batch_axis(model):
    prompts = ["abcabc", "hello", "x"]
    shapes = []

    def record(p, name):
        shapes.append(p.shape)

    def zero(z, name):
        z[:, :, 1, :] = 0  # [B, T, H, dh]: head 1 of every sequence

    outs = model.generate(prompts, max_new_tokens=3, fwd_hooks=[("blocks.1.attn.hook_pattern", record)],
                          stop_at_eos=False)
    H, T = model.config["H"], max(len(model.tokenize(p)) for p in prompts)
    assert shapes == [(3, H, T, T), (3, H, 1, T + 1), (3, H, 1, T + 2)]
    assert outs == [model.generate(p, max_new_tokens=3, stop_at_eos=False) for p in prompts]
    zeroed = model.generate(prompts, max_new_tokens=8, fwd_hooks=[("blocks.1.attn.hook_z", zero)])
    def zero_one(z, name):
        z[:, 1, :] = 0  # [T, H, dh]

    assert zeroed == [model.generate(p, max_new_tokens=8, fwd_hooks=[("blocks.1.attn.hook_z", zero_one)]) for p in prompts]
    assert zeroed != model.generate(prompts, max_new_tokens=8), "zeroing the head changed nothing"


@pytest.mark.parametrize("kwargs, match", [
    (dict(tokens=np.ones((2, 3), np.int64), attention_mask=np.ones((2, 4))), "attention_mask: shape"),
    (dict(tokens=np.ones((2, 3), np.int64), attention_mask=[[1, 1, 1], [0, 0, 0]]), "sequence 1 has no real token"),
    (dict(tokens=np.ones((2, 3), np.int64), attention_mask=[[1, 0, 1], [1, 1, 1]]), "one contiguous run"),
    (dict(tokens=np.ones((2, 3), np.int64), pad_id=1), "sequence 0 has no real token"),
    (dict(tokens=[[1] * 100, [2, 3]], max_new_tokens=40), "longest prompt is 100 tokens"),
    (dict(tokens=[[1, 2], [3]], seed=[1, 2, 3]), "3 seeds for 2 prompts"),
    (dict(tokens=[[1, 2], [3, 99999]]), "outside the vocabulary"),
])
def test_bad_batches_are_a_qkv_error(model, kwargs, match):
    kwargs = dict(kwargs)
    with pytest.raises(qkv.Error, match=match):
        model.generate(kwargs.pop("tokens"), **kwargs)


@pytest.mark.parametrize("kwargs, match", [
    (dict(max_new_tokens=200), "context is 128"),
    (dict(max_new_tokens=0), "--max-new-tokens"),
    (dict(temperature=-1.0), "--temperature"),
    (dict(temperature=1.0, top_p=0.0), "--top-p"),
    (dict(temperature=1.0, top_k=-1), "--top-k"),
    (dict(steer=[("blocks.9.hook_resid_pre", np.zeros(128), 1.0)]), "not a hook point"),
    (dict(steer=[(HOOK, np.zeros(7), 1.0)]), "7 values, but"),
    (dict(steer=[("blocks.0.attn.hook_pattern", np.zeros(7), 1.0)]), "not one row per position"),
    (dict(steer=[(HOOK, np.zeros(128))]), "triples"),
    (dict(fwd_hooks=[("nope", lambda a, n: None)]), "not a hook point"),
    (dict(fwd_hooks=[(HOOK, lambda a, n: np.zeros(3, np.float32))]), "returned shape"),
])
def test_bad_input_is_a_qkv_error(model, kwargs, match):
    with pytest.raises(qkv.Error, match=match):
        model.generate("hello", **kwargs)


def test_bad_steering_vector_input(model):
    with pytest.raises(qkv.Error, match="no texts"):
        qkv.steering_vector(model, positive=[], negative=["a"], hook=HOOK)
    with pytest.raises(qkv.Error, match="not a hook point"):
        qkv.steering_vector(model, positive=["a"], negative=["b"], hook="nope")
    with pytest.raises(qkv.Error, match="vocabulary"):
        qkv.steering_vector(model, positive=[[1, 9999]], negative=["b"], hook=HOOK)


def test_an_exception_in_a_hook_propagates(model):
    def boom(a, n):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        model.generate("hello", max_new_tokens=3, fwd_hooks=[(HOOK, boom)])
