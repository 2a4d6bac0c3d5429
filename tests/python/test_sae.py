# Sparse autoencoders (qkv/sae.py) in SAELens's format, spliced into the forward: an SAE that reconstructs
# exactly leaves every family's logits bit for bit, the error term restores the model, a feature edit moves
# the activation by exactly its decoder row, and the arithmetic is SAELens's (written out again here in
# float64, independently of the module). Files are written here in SAELens's layout: none are downloaded.
import json

import numpy as np
import pytest

import qkv
from conftest import FAMILIES

IDS = np.array([3, 57, 14, 92, 0, 57, 14, 92, 41, 100, 7, 57])


def identity(d, hook):
    """An SAE that reconstructs exactly: features relu(x), relu(−x); decoder +I, −I (one term per output)."""
    eye = np.eye(d, dtype=np.float32)
    return qkv.SAE(np.hstack([eye, -eye]), np.zeros(2 * d), np.vstack([eye, -eye]), np.zeros(d), hook,
                   apply_b_dec_to_input=False)


def random_sae(d, hook, d_sae=64, seed=0, **kw):
    rng = np.random.default_rng(seed)
    return qkv.SAE(rng.normal(size=(d, d_sae)) * 0.3, rng.normal(size=d_sae) * 0.1, rng.normal(size=(d_sae, d)) * 0.3,
                   rng.normal(size=d) * 0.1, hook, **kw)


@pytest.mark.parametrize("arch", FAMILIES)
def test_an_exact_sae_leaves_the_logits_bit_for_bit(family_model, arch):
    m = family_model(arch)
    cfg = m.cfg
    ids = IDS % cfg.d_vocab
    plain = m(ids)
    resid = identity(cfg.d_model, "blocks.1.hook_resid_pre")
    z = identity(cfg.n_heads * cfg.d_head, "blocks.0.attn.hook_z")  # hook_z: heads flattened and put back
    assert np.array_equal(m.run_with_saes(ids, [resid, z]), plain)
    changed = m.run_with_saes(ids, [random_sae(cfg.d_model, "blocks.1.hook_resid_pre")])
    assert not np.allclose(changed, plain)


def test_the_error_term_restores_the_model_and_a_feature_edit_moves_by_its_decoder_row(family_model):
    m = family_model("llama")
    d = m.cfg.d_model
    sae = random_sae(d, "blocks.1.hook_resid_pre")
    assert np.array_equal(m.run_with_saes(IDS, [sae], use_error_term=True), m(IDS))
    _, cache = m.run_with_cache(IDS)
    acts = sae.encode(cache["blocks.1.hook_resid_pre"])
    j = int(np.argmax(acts.sum(0)))  # a feature that fires

    def zero_j(f, hook):
        assert hook == "blocks.1.hook_resid_pre.hook_sae_acts_post" and f.shape == (len(IDS), sae.d_sae)
        f[:, j] = 0

    edited = m.run_with_saes(IDS, [sae], use_error_term=True, fwd_hooks=[("blocks.1.hook_resid_pre.hook_sae_acts_post", zero_j)])
    by_hand = m.run_with_hooks(IDS, fwd_hooks=[("blocks.1.hook_resid_pre",
                                                lambda x, hook: x - np.outer(acts[:, j], sae.W_dec[j]))])
    assert not np.allclose(edited, m(IDS))
    np.testing.assert_allclose(edited, by_hand, rtol=1e-4, atol=1e-4 * np.abs(by_hand).max())


def saelens_encode(sae, x):
    """SAELens's encode, written out in float64: (x − b_dec) @ W_enc + b_enc, then the activation."""
    x = np.asarray(x, np.float64) - (sae.b_dec if sae.apply_b_dec_to_input else 0)
    pre = x @ sae.W_enc.astype(np.float64) + sae.b_enc
    if sae.architecture == "jumprelu":
        return np.where(pre > sae.threshold, np.maximum(pre, 0), 0)
    if sae.architecture == "topk":
        out = np.zeros_like(pre)
        for r in range(pre.shape[0]):
            top = np.argsort(pre[r])[::-1][:sae.k]
            out[r, top] = np.maximum(pre[r, top], 0)
        return out
    return np.maximum(pre, 0)


@pytest.mark.parametrize("kw", [{}, {"architecture": "jumprelu", "threshold": np.full(64, 0.2)},
                                {"architecture": "topk", "k": 5}, {"apply_b_dec_to_input": False}])
def test_encode_and_decode_are_saelens(kw):
    sae = random_sae(16, "blocks.0.hook_resid_pre", **kw)
    x = np.random.default_rng(1).normal(size=(9, 16)).astype(np.float32)
    f = sae.encode(x)
    want = saelens_encode(sae, x)
    np.testing.assert_allclose(f, want, rtol=1e-5, atol=1e-5)
    assert (f > 0).sum() == (want > 0).sum()
    if kw.get("architecture") == "topk":
        assert ((f > 0).sum(1) <= 5).all()
    np.testing.assert_allclose(sae.decode(f), want @ sae.W_dec + sae.b_dec, rtol=1e-4, atol=1e-4)
    assert sae(x).shape == x.shape


def test_the_cache_holds_each_part_of_the_sae(family_model):
    m = family_model("gpt2")
    hook = "blocks.1.hook_resid_pre"
    sae = random_sae(m.cfg.d_model, hook)
    _, plain = m.run_with_cache(IDS)
    _, cache = m.run_with_cache_with_saes(IDS, [sae])
    p = hook + ".hook_sae_"
    assert np.array_equal(cache[p + "input"], plain[hook])
    np.testing.assert_allclose(cache[p + "acts_post"], sae.encode(plain[hook]), rtol=1e-6)
    assert np.array_equal(cache[p + "output"], cache[hook]) and np.array_equal(cache[p + "recons"], cache[hook])
    assert p + "error" not in cache
    _, err = m.run_with_cache_with_saes(IDS, [sae], use_error_term=True)
    np.testing.assert_allclose(err[p + "recons"] + err[p + "error"], plain[hook], rtol=1e-5, atol=1e-5)
    assert np.array_equal(err[hook], plain[hook])
    assert not m._added  # the splice is gone after the call


def test_a_saes_block_covers_every_forward_and_generate(model):
    d = model.cfg.d_model
    text = "When Mary and John went to the store"
    plain = model.generate(text, max_new_tokens=6)
    with model.saes([identity(d, "blocks.1.hook_resid_pre")]):
        assert model.generate(text, max_new_tokens=6) == plain
    base = model(text)
    with model.saes(random_sae(d, "blocks.1.hook_resid_pre", d_sae=8)):
        inside = model(text)
        assert not np.allclose(inside, base)
        assert np.array_equal(model.run_with_hooks(text), inside)  # every forward runs the splice
    assert not model._added and np.array_equal(model(text), base)
    assert model.generate(text, max_new_tokens=6) == plain


def test_a_batch_runs_each_sequence_as_alone(family_model):
    m = family_model("llama")
    sae = random_sae(m.cfg.d_model, "blocks.0.hook_resid_post")
    ids = np.stack([IDS, IDS[::-1]])
    batch = m.run_with_saes(ids, [sae], attention_mask=np.ones_like(ids, dtype=bool))
    for b in range(2):
        np.testing.assert_allclose(batch[b], m.run_with_saes(ids[b], [sae]), rtol=1e-5, atol=1e-5)


def test_save_and_load_in_saelens_layout(tmp_path):
    sae = random_sae(16, "blocks.0.hook_resid_pre", architecture="jumprelu", threshold=np.full(64, 0.1))
    sae.save(tmp_path / "s")
    cfg = json.loads((tmp_path / "s" / "cfg.json").read_text())
    assert cfg["architecture"] == "jumprelu" and cfg["d_in"] == 16 and cfg["metadata"]["hook_name"] == sae.hook_name
    back = qkv.SAE.load(tmp_path / "s")
    for name in ("W_enc", "b_enc", "W_dec", "b_dec", "threshold"):
        assert np.array_equal(getattr(back, name), getattr(sae, name)), name
    # an older SAELens layout: hook_name at the top, topk's k in activation_fn_kwargs, BF16 weights
    old = tmp_path / "old"
    old.mkdir()
    w = random_sae(16, "x", d_sae=32)
    qkv._qkv.write_safetensors(str(old / "sae_weights.safetensors"), [
        ("W_enc", w.W_enc), ("b_enc", w.b_enc), ("W_dec", w.W_dec), ("b_dec", w.b_dec)], {}, "BF16")
    (old / "cfg.json").write_text(json.dumps({"architecture": "topk", "hook_name": "blocks.1.attn.hook_z", "d_in": 16,
                                              "d_sae": 32, "activation_fn_kwargs": {"k": 3}}))
    s = qkv.SAE.load(old)
    assert s.k == 3 and s.hook_name == "blocks.1.attn.hook_z"
    assert np.abs(s.W_enc - w.W_enc).max() <= 2 ** -8 * np.abs(w.W_enc).max() and not np.array_equal(s.W_enc, w.W_enc)


def write(dirpath, cfg, tensors):
    dirpath.mkdir()
    qkv._qkv.write_safetensors(str(dirpath / "sae_weights.safetensors"), list(tensors.items()), {}, "F32")
    (dirpath / "cfg.json").write_text(cfg if isinstance(cfg, str) else json.dumps(cfg))
    return dirpath


GOOD = {"W_enc": np.zeros((4, 6)), "b_enc": np.zeros(6), "W_dec": np.zeros((6, 4)), "b_dec": np.zeros(4)}


@pytest.mark.parametrize("cfg, tensors, match", [
    ("{not json", GOOD, "cfg.json: cannot read"),
    ({"architecture": "standard"}, GOOD, "no hook_name"),
    ({"hook_name": "h", "architecture": "gated"}, GOOD, "architecture 'gated'"),
    ({"hook_name": "h", "normalize_activations": "layer_norm"}, GOOD, "normalize_activations"),
    ({"hook_name": "h"}, {k: v for k, v in GOOD.items() if k != "b_dec"}, "no tensor b_dec"),
    ({"hook_name": "h"}, dict(GOOD, W_dec=np.zeros((4, 6))), r"W_dec is \(4, 6\), expected \(6, 4\)"),
    ({"hook_name": "h", "architecture": "jumprelu"}, GOOD, "no tensor threshold"),
    ({"hook_name": "h", "architecture": "topk"}, GOOD, "needs k"),
    ({"hook_name": "h", "d_sae": 7}, GOOD, "d_sae is 7 but the weights say 6"),
])
def test_bad_sae_files_are_data_errors_naming_the_file(tmp_path, cfg, tensors, match):
    d = write(tmp_path / "sae", cfg, tensors)
    with pytest.raises(qkv.Error, match=match) as e:
        qkv.SAE.load(d)
    assert e.value.exit_code == 1 and str(tmp_path) in str(e.value)


def test_a_missing_or_truncated_sae_is_a_data_error(tmp_path):
    with pytest.raises(qkv.Error, match="cfg.json") as e:
        qkv.SAE.load(tmp_path)
    assert e.value.exit_code == 1
    d = write(tmp_path / "t", {"hook_name": "h"}, GOOD)
    raw = (d / "sae_weights.safetensors").read_bytes()
    (d / "sae_weights.safetensors").write_bytes(raw[:-10])
    with pytest.raises(qkv.Error, match="sae_weights.safetensors") as e:
        qkv.SAE.load(d)
    assert e.value.exit_code == 1


def test_misplaced_saes_are_usage_errors(model, tokens):
    d = model.cfg.d_model
    for saes, match in [([identity(d, "blocks.9.hook_resid_pre")], "not a hook point"),
                        ([identity(d, "blocks.0.hook_resid_pre")] * 2, "two SAEs"),
                        ([identity(d + 1, "blocks.0.hook_resid_pre")], "reads rows of"),
                        (["not an sae"], "expected qkv.SAE")]:
        with pytest.raises(qkv.Error, match=match) as e:
            model.run_with_saes(tokens, saes)
        assert e.value.exit_code == 2
        assert not model._added
    sae = identity(d, "blocks.0.hook_resid_pre")
    with pytest.raises(qkv.Error, match=r"returned shape \(3, 256\), expected") as e:
        model.run_with_saes(tokens, [sae], fwd_hooks=[("blocks.0.hook_resid_pre.hook_sae_acts_post", lambda f, h: f[:3])])
    assert not model._added


@pytest.mark.parametrize("arch", ["gpt2", "llama", "gemma2"])
def test_feature_gradients_match_central_differences_through_the_splice(family_model, arch):
    """sae_attribution's ∂metric/∂f against the metric of the spliced forward (error term on) with one
    feature at one position moved by ±h: the engine's backward through W_decᵀ is the feature's gradient."""
    m = family_model(arch)
    hook = "blocks.1.hook_resid_pre"
    sae = random_sae(m.cfg.d_model, hook, d_sae=32, seed=3)
    ids = IDS % m.cfg.d_vocab
    metric = qkv.logit_diff(5, 9)
    a = m.sae_attribution(ids, [sae], metric)[hook]
    assert np.array_equal(a["attribution"], -a["features"] * a["grad"])
    _, cache = m.run_with_cache(ids)
    # the features of the training forward the gradients come from: the inference forward's to rounding
    np.testing.assert_allclose(a["features"], sae.encode(cache[hook]), rtol=1e-5, atol=1e-5 * np.abs(a["features"]).max())
    h = 0.05
    for p, j in zip(*np.unravel_index(np.argsort(-np.abs(a["grad"]), axis=None)[:3], a["grad"].shape)):
        def moved(delta):
            def hook_fn(f, hook):
                f[p, j] += delta
            logits = m.run_with_saes(ids, [sae], use_error_term=True,
                                     fwd_hooks=[(hook + ".hook_sae_acts_post", hook_fn)])
            return metric(logits)[0]
        fd = (moved(h) - moved(-h)) / (2 * h)
        assert abs(fd - a["grad"][p, j]) <= 0.02 * abs(a["grad"][p, j]) + 1e-4, (p, j, fd, a["grad"][p, j])
