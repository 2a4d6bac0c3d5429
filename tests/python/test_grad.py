"""Gradients with respect to activations from Python (issue 25, item 2): run_with_cache(incl_bwd=True,
metric=...) against float64 PyTorch autograd at every hook point of every family
(tests/reference/make_grad_fixtures.py), the built-in metrics against the same metric as a callable,
and `qkv dump --grad` against Python."""
import json

import numpy as np
import pytest

import qkv
from conftest import BUNDLED, SOURCE, TEXT, run_cli
from test_weights import read_safetensors

FX = SOURCE / "tests" / "reference" / "fixtures" / "families"
CASES = sorted(p.name for p in FX.iterdir() if (p / "grads.safetensors").exists())
GRAD_METRIC = json.load(open(FX / "grad_metric.json")) if (FX / "grad_metric.json").exists() else {}


def fixture_metric(ids):
    """make_grad_fixtures.py's metric as a NumPy callable: mean next-token loss + a logit difference."""
    def f(logits):
        z = logits.astype(np.float64)
        T = len(ids)
        lse = np.log(np.exp(z - z.max(-1, keepdims=True)).sum(-1)) + z.max(-1)
        p = np.exp(z - lse[:, None])
        loss = np.mean(lse[:T - 1] - z[np.arange(T - 1), ids[1:]])
        g = np.zeros_like(z)
        g[:T - 1] = p[:T - 1]
        g[np.arange(T - 1), ids[1:]] -= 1
        g /= T - 1
        P, A, B = GRAD_METRIC["position"], GRAD_METRIC["answer"], GRAD_METRIC["wrong"]
        g[P, A] += 1
        g[P, B] -= 1
        return loss + z[P, A] - z[P, B], g
    return f


def test_every_family_has_a_gradient_fixture():
    assert len(CASES) >= 12, "run tests/reference/make_grad_fixtures.py"


@pytest.mark.parametrize("case", CASES)
def test_gradients_match_float64_autograd(case, tmp_path):
    c = json.load(open(FX / case / "case.json"))
    run_cli(*c["init"], "--out", tmp_path)
    m = qkv.load(str(tmp_path))
    ids = np.array(c["tokens"])
    want = read_safetensors(FX / case / "grads.safetensors")
    _, cache = m.run_with_cache(ids, incl_bwd=True, metric=fixture_metric(ids))
    got = {n[:-len("_grad")]: a for n, a in cache.items() if n.endswith("_grad")}
    assert sorted(got) == sorted(n for n in want if n != "metric")
    for name, g in got.items():
        w = want[name]
        assert g.shape == w.shape, name
        scale = np.abs(w).max()
        assert scale > 0, name
        assert np.abs(g - w).max() <= 5e-5 * scale, name
    # every hook of the forward has its gradient beside it
    assert sorted(got) == sorted(n for n in cache if not n.endswith("_grad"))


def test_builtin_metrics_equal_the_same_metric_as_a_callable(model, tokens):
    _, a = model.run_with_cache(tokens, incl_bwd=True, metric=qkv.logit_diff(5, 7, position=-2))
    _, b = model.run_with_cache(tokens, incl_bwd=True, metric=qkv.logit_diff(5, 7, position=-2))
    _, c = model.run_with_cache(tokens, incl_bwd=True, metric=lambda z: qkv.logit_diff(5, 7, position=-2)(z))
    for n in a:
        if n.endswith("_grad"):
            assert np.array_equal(a[n], b[n]) and np.array_equal(a[n], c[n]), n
    T = len(tokens)
    # the metric reads position T − 2: nothing after it has a gradient, the logits' gradient is the seed
    assert not a["blocks.1.hook_resid_post_grad"][T - 1].any()
    assert a["blocks.1.hook_resid_post_grad"][T - 2].any()
    seed = np.zeros_like(a["logits_grad"])
    seed[T - 2, 5], seed[T - 2, 7] = 1, -1
    assert np.array_equal(a["logits_grad"], seed)
    # the loss: a callable of the same mean next-token loss agrees to float32 rounding
    _, d = model.run_with_cache(tokens, incl_bwd=True, metric=qkv.loss(positions=[2, 4]))

    def loss24(z):
        z = z.astype(np.float64)
        g = np.zeros_like(z)
        val = 0
        for p in (2, 4):
            e = np.exp(z[p] - z[p].max())
            val += (np.log(e.sum()) + z[p].max() - z[p, tokens[p + 1]]) / 2
            g[p] = e / e.sum() / 2
            g[p, tokens[p + 1]] -= 0.5
        return val, g
    _, e = model.run_with_cache(tokens, incl_bwd=True, metric=loss24)
    for n in d:
        if n.endswith("_grad"):
            assert np.allclose(d[n], e[n], rtol=0, atol=1e-6 * max(1, np.abs(e[n]).max())), n


def test_token_texts_as_answers():
    m = qkv.load(str(BUNDLED))
    ids = m.tokenize("abcab")
    _, a = m.run_with_cache(ids, incl_bwd=True, metric=qkv.logit_diff("c", "a"))
    _, b = m.run_with_cache(ids, incl_bwd=True, metric=qkv.logit_diff(int(m.tokenize("c")[0]), int(m.tokenize("a")[0])))
    assert np.array_equal(a["blocks.0.hook_resid_pre_grad"], b["blocks.0.hook_resid_pre_grad"])


def test_names_pick_the_gradients_too(model, tokens):
    names = ["blocks.0.attn.hook_q", "blocks.1.hook_resid_pre"]
    _, cache = model.run_with_cache(tokens, names=names, incl_bwd=True, metric=qkv.loss())
    assert sorted(cache) == sorted(names + [n + "_grad" for n in names])
    _, full = model.run_with_cache(tokens, incl_bwd=True, metric=qkv.loss())
    for n in names:
        assert np.array_equal(cache[n + "_grad"], full[n + "_grad"])
        assert cache[n + "_grad"].hook_name == n + "_grad"


def test_dump_grad_writes_what_python_caches(model, tokens, tmp_path):
    tok = ",".join(map(str, tokens))
    run_cli("dump", "--model", BUNDLED, "--tokens", tok, "--out", tmp_path, "--grad", "--answer", "5", "--wrong", "7",
            "--position", "4")
    files = {p.stem: np.load(p) for p in tmp_path.glob("*.npy")}
    _, cache = model.run_with_cache(tokens, incl_bwd=True, metric=qkv.logit_diff(5, 7, position=4),
                                    materialise_all=True)
    assert sorted(files) == sorted(list(cache) + ["tokens"])
    for n, a in cache.items():
        assert np.array_equal(files[n], a), n
    run_cli("dump", "--model", BUNDLED, "--tokens", tok, "--out", tmp_path / "l", "--grad", "--loss-positions", "1,3")
    _, cl = model.run_with_cache(tokens, incl_bwd=True, metric=qkv.loss([1, 3]))
    assert np.array_equal(np.load(tmp_path / "l" / "blocks.0.attn.hook_pattern_grad.npy"),
                          cl["blocks.0.attn.hook_pattern_grad"])


def test_bad_metrics_raise(model, tokens):
    with pytest.raises(qkv.Error, match="metric"):
        model.run_with_cache(tokens, incl_bwd=True)
    with pytest.raises(qkv.Error, match="position"):
        model.run_with_cache(tokens, incl_bwd=True, metric=qkv.logit_diff(1, 2, position=len(tokens)))
    with pytest.raises(qkv.Error, match="vocabulary"):
        model.run_with_cache(tokens, incl_bwd=True, metric=qkv.logit_diff(1, 10 ** 6))
    with pytest.raises(qkv.Error, match="loss position"):
        model.run_with_cache(tokens, incl_bwd=True, metric=qkv.loss([len(tokens) - 1]))
    with pytest.raises(qkv.Error, match="shape"):
        model.run_with_cache(tokens, incl_bwd=True, metric=lambda z: (0.0, np.zeros(3)))
    with pytest.raises(qkv.Error, match="returns"):
        model.run_with_cache(tokens, incl_bwd=True, metric=lambda z: 0.0)
    with pytest.raises(ZeroDivisionError):
        model.run_with_cache(tokens, incl_bwd=True, metric=lambda z: 1 / 0)
    with pytest.raises(qkv.Error, match="not a hook"):
        model.run_with_cache(tokens, names=["nope"], incl_bwd=True, metric=qkv.loss())
    with pytest.raises(qkv.Error, match="not one"):
        model.run_with_cache(tokens, incl_bwd=True, metric=qkv.logit_diff("ab", "a"))  # 2 tokens
