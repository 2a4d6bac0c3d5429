"""`import qkv` against the CLI and an independent NumPy forward (issue 17)."""
import json
import pathlib
import threading
import time

import numpy as np
import pytest

import qkv
from conftest import BUNDLED, TEXT, run_cli
import numpy_gpt2


def same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes()


def owner(a):
    """The object at the end of an array's .base chain."""
    while isinstance(a, np.ndarray) and a.base is not None:
        a = a.base
    return a


# ---- the cache is `qkv dump`, bit for bit ------------------------------------------------------------

def test_cache_equals_dump_bit_for_bit(model, tokens, tmp_path):
    run_cli("dump", "--model", BUNDLED, "--tokens", ",".join(map(str, tokens)), "--out", tmp_path)
    dumped = {p.stem: np.load(p) for p in tmp_path.glob("*.npy")}
    assert np.array_equal(dumped.pop("tokens"), tokens)
    logits, cache = model.run_with_cache(tokens)
    assert sorted(cache) == sorted(dumped), "names differ from qkv dump's files"
    for name, arr in dumped.items():
        assert arr.dtype == np.float32
        assert same_bits(np.asarray(cache[name]), arr), name
    assert same_bits(np.asarray(logits), dumped["logits"])


def test_names_list_predicate_and_layers(model, tokens):
    _, full = model.run_with_cache(tokens)
    # Layer 0's pattern asked for: layer 0 runs as in the full run, so its pattern has the same bits.
    name = "blocks.0.attn.hook_pattern"
    logits, c = model.run_with_cache(tokens, names=[name])
    assert list(c) == [name]
    assert same_bits(np.asarray(c[name]), np.asarray(full[name]))
    # Layer 1 then runs in the fused kernel (no pattern there): the logits agree to rounding, not bits.
    assert np.abs(logits - full["logits"]).max() < 1e-4 * np.abs(full["logits"]).max()
    _, c = model.run_with_cache(tokens, names=lambda n: n.endswith("hook_q"))
    assert sorted(c) == sorted(n for n in full if n.endswith("hook_q")) and len(c) == model.config["n_layer"]
    _, c = model.run_with_cache(tokens, layers=[0])
    assert not any(n.startswith("blocks.1.") for n in c) and any(n.startswith("blocks.0.") for n in c)
    assert "logits" in c
    # No pattern asked for: the fused attention runs everywhere, as in a plain forward.
    logits, c = model.run_with_cache(tokens, names=["blocks.1.hook_resid_post"])
    assert same_bits(np.asarray(logits), np.asarray(model(tokens)))
    r, f = c["blocks.1.hook_resid_post"], full["blocks.1.hook_resid_post"]
    assert np.abs(r - f).max() < 1e-4 * np.abs(f).max()
    # materialise_all: the values no longer depend on what else was asked for.
    _, c = model.run_with_cache(tokens, names=["blocks.1.hook_resid_post"], materialise_all=True)
    assert same_bits(np.asarray(c["blocks.1.hook_resid_post"]), np.asarray(f))


def test_layers_with_materialise_all_equal_dump_layers(model, tokens, tmp_path):
    run_cli("dump", "--model", BUNDLED, "--tokens", ",".join(map(str, tokens)), "--layers", "1", "--out", tmp_path)
    dumped = {p.stem: np.load(p) for p in tmp_path.glob("*.npy") if p.stem != "tokens"}
    _, c = model.run_with_cache(tokens, layers=[1], materialise_all=True)
    assert sorted(c) == sorted(dumped)
    for name, arr in dumped.items():
        assert same_bits(np.asarray(c[name]), arr), name


def test_shapes(model, tokens):
    cfg = model.config
    T, H, dh, d = len(tokens), cfg["H"], cfg["head_dim"], cfg["d"]
    logits, c = model.run_with_cache(tokens)
    assert logits.shape == (T, cfg["vocab_size"]) and logits.dtype == np.float32
    assert c["blocks.0.attn.hook_pattern"].shape == (H, T, T)
    assert c["blocks.0.attn.hook_q"].shape == (T, H, dh)
    assert c["blocks.0.hook_resid_pre"].shape == (T, d)
    assert np.allclose(c["blocks.0.attn.hook_pattern"].sum(-1), 1, atol=1e-5)


# ---- hooks -------------------------------------------------------------------------------------------

def test_identity_hooks_change_nothing(model, tokens):
    # Hooked everywhere, the engine materialises every pattern: compare with a run that hooks the same
    # points with hooks that do nothing (and with the full cache, which asks for the same points).
    clean = np.asarray(model.run_with_hooks(tokens, fwd_hooks=[(n, lambda a, n: None) for n in model.hook_names])).copy()
    assert same_bits(clean, np.asarray(model.run_with_cache(tokens)[0]))
    seen = []

    def give_back(act, name):
        seen.append(name)
        return act.copy()  # a replacement equal to what it received

    def rewrite_in_place(act, name):
        act[...] = act.copy()

    hooks = [(n, give_back) for n in model.hook_names] + [(n, rewrite_in_place) for n in model.hook_names]
    patched = model.run_with_hooks(tokens, fwd_hooks=hooks)
    assert same_bits(np.asarray(patched), clean)
    assert seen == model.hook_names  # every hook point is reachable, in forward order


@pytest.mark.parametrize("layer,head", [(0, 1), (1, 0)])
def test_zeroing_a_heads_v_matches_numpy(model, tokens, layer, head):
    def zero(v, name):
        v[:, head, :] = 0  # in place, in the engine's buffer

    clean = np.asarray(model(tokens), dtype=np.float64)
    patched = np.asarray(model.run_with_hooks(tokens, fwd_hooks=[("blocks.%d.attn.hook_v" % layer, zero)]),
                         dtype=np.float64)
    ref_clean = numpy_gpt2.forward(BUNDLED, tokens)
    ref_patched = numpy_gpt2.forward(BUNDLED, tokens, zero_v=(layer, head))
    scale = np.abs(ref_clean).max()
    assert np.abs(clean - ref_clean).max() < 1e-4 * scale
    change, ref_change = patched - clean, ref_patched - ref_clean
    assert np.abs(ref_change).max() > 1e-2 * scale, "the edit must matter for the test to mean anything"
    assert np.abs(change - ref_change).max() < 1e-4 * scale
    # Returning the edited copy instead of editing in place gives the same logits, bit for bit.
    again = model.run_with_hooks(tokens, fwd_hooks=[("blocks.%d.attn.hook_v" % layer,
                                                     lambda v, n: np.where(np.arange(v.shape[1])[None, :, None] == head, 0, v))])
    assert same_bits(np.asarray(again, dtype=np.float64), patched)


def test_hook_gets_the_engines_buffer(model, tokens):
    info = {}

    def look(act, name):
        info["owndata"] = act.flags.owndata
        info["writeable"] = act.flags.writeable
        info["owner"] = type(owner(act)).__name__
        info["name"] = act.hook_name
        info["shape"] = act.shape

    model.run_with_hooks(tokens, fwd_hooks=[("blocks.0.attn.hook_z", look)])
    assert info == {"owndata": False, "writeable": True, "owner": "PyCapsule", "name": "blocks.0.attn.hook_z",
                    "shape": (len(tokens), model.config["H"], model.config["head_dim"])}


def test_cache_arrays_are_not_copies(model, tokens):
    logits, c = model.run_with_cache(tokens)
    for name, a in c.items():
        assert isinstance(a, qkv.Activation) and isinstance(a, np.ndarray)
        assert not a.flags.owndata and a.flags.c_contiguous, name
        assert type(owner(a)).__name__ == "PyCapsule", name  # the engine's Tensor, moved, not copied
    assert c["logits"] is logits
    plain = model(tokens)
    assert not plain.flags.owndata and type(owner(plain)).__name__ == "PyCapsule"


# ---- errors --------------------------------------------------------------------------------------------

def test_errors_are_qkv_error_with_the_clis_message(tmp_path):
    assert issubclass(qkv.Error, ValueError)
    missing = tmp_path / "nope.safetensors"
    with pytest.raises(qkv.Error) as e:
        qkv.load(str(missing))
    cli = run_cli("info", "--model", missing, check=False)
    assert cli.returncode == e.value.exit_code == 1
    assert cli.stderr.strip() == "qkv: error: " + str(e.value)
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all")
    with pytest.raises(qkv.Error, match="bad.safetensors"):
        qkv.load(str(bad))


def test_bad_input_raises(model, tokens):
    V, P = model.config["vocab_size"], model.config["n_ctx"]
    for bad in ([V], [-1], [], np.zeros(P + 1, dtype=np.int32), [[[1, 2]]], [0.5, 1.5], [[0.5, 1.5]]):
        with pytest.raises(qkv.Error):
            model(bad)
    with pytest.raises(qkv.Error, match="not a hook point"):
        model.run_with_cache(tokens, names=["blocks.9.attn.hook_q"])
    with pytest.raises(qkv.Error, match="not a hook point"):
        model.run_with_hooks(tokens, fwd_hooks=[("nope", lambda a, n: None)])
    with pytest.raises(qkv.Error, match="returned shape"):
        model.run_with_hooks(tokens, fwd_hooks=[("blocks.0.hook_resid_pre", lambda a, n: a[:1])])
    with pytest.raises(qkv.Error):
        model.run_with_cache(tokens, layers=[5])

    class Boom(Exception):
        pass

    def boom(a, n):
        raise Boom("from the hook")

    with pytest.raises(Boom):
        model.run_with_hooks(tokens, fwd_hooks=[("blocks.1.hook_resid_pre", boom)])
    assert same_bits(np.asarray(model(tokens)), np.asarray(model(tokens)))  # still fine
    with pytest.raises(qkv.Error):
        qkv.scores(model, layer=7, head=0)


# ---- tokens ------------------------------------------------------------------------------------------------

def test_tokenize_matches_the_cli(model):
    ids = model.tokenize(TEXT)
    assert ids.dtype == np.int32
    cli = json.loads(run_cli("tokenize", "--model", BUNDLED, "--json", TEXT).stdout)
    assert ids.tolist() == cli["ids"]
    assert "".join(model.to_str_tokens(ids)) == TEXT
    assert model.to_str_tokens(TEXT) == model.to_str_tokens(ids)
    assert model.tokenize("ab", bos=7).tolist()[0] == 7
    assert model.to_single_token("J") == model.tokenize("J")[0] and len(model.tokenize("J")) == 1  # byte-level
    with pytest.raises(qkv.Error, match="'Jo' is 2 tokens"):
        model.to_single_token("Jo")


# ---- threads ----------------------------------------------------------------------------------------------

def test_threads_run_forwards_in_parallel(model, tokens):
    want = np.asarray(model.run_with_cache(tokens)[0]).copy()
    out = [None] * 4

    def work(i):
        out[i] = np.asarray(model.run_with_cache(tokens)[0]).copy()

    ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert all(same_bits(o, want) for o in out)


# ---- experiments: the CLI's --json ------------------------------------------------------------------------

def close(a, b, path="$"):
    """Recursive equality of JSON-like values, floats to 1e-9 relative (thread-count summation order)."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and sorted(a) == sorted(b), path
        for k in a:
            close(a[k], b[k], path + "." + k)
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            close(x, y, "%s[%d]" % (path, i))
    elif isinstance(a, float) or isinstance(b, float):
        assert a == pytest.approx(b, rel=1e-9, abs=1e-12), path
    else:
        assert a == b, path


@pytest.mark.parametrize("call,args", [
    (lambda m: qkv.heads(m, batch=2), ["heads", "--batch", "2"]),
    (lambda m: qkv.circuits(m, samples=4), ["circuits", "--samples", "4"]),
    (lambda m: qkv.scores(m, 1, 2), ["scores", "--layer", "1", "--head", "2"]),
    (lambda m: qkv.swap(m, 0, 1, "a b a b"), ["swap", "--layer", "0", "--head", "1", "--text", "a b a b"]),
    (lambda m: qkv.project(m, 1), ["project", "--layer", "1"]),
    (lambda m: qkv.ablate(m, 1, 0, seq_len=10, batch=2), ["ablate", "--layer", "1", "--head", "0", "--seq-len", "10", "--batch", "2"]),
])
def test_experiments_match_the_cli_json(model, call, args):
    got = call(model)
    want = json.loads(run_cli(*args, "--model", BUNDLED, "--json").stdout)
    close(got, want)


def test_tour_matches_the_cli(model, tmp_path):
    got = qkv.tour(model, out=str(tmp_path / "py"), batch=2)
    want = json.loads(run_cli("tour", "--model", BUNDLED, "--json", "--quiet", "--batch", "2",
                              "--out", tmp_path / "cli").stdout)
    assert (tmp_path / "py" / "index.html").exists()
    for k in ("layers", "heads", "text", "repeated", "chosen", "held", "total"):
        close(got[k], want[k], k)
    assert [(c["id"], c["held"], c["applies"]) for c in got["claims"]] == \
        [(c["id"], c["held"], c["applies"]) for c in want["claims"]]
    assert qkv.tour(model, batch=2)["report"] is None


# ---- Jupyter ---------------------------------------------------------------------------------------------

def test_repr_html_is_the_reports_heatmap(model, tokens):
    _, c = model.run_with_cache(tokens, names=["blocks.1.attn.hook_pattern", "blocks.0.hook_resid_post"])
    grid = c["blocks.1.attn.hook_pattern"]._repr_html_()
    assert grid.startswith("<svg") and "head 3" in grid
    assert c["blocks.0.hook_resid_post"]._repr_html_().startswith("<svg")
    _, c = model.run_with_cache("When Mary and John", names=lambda n: n.startswith("blocks.1.attn.hook_"))
    one = c["blocks.1.attn.hook_pattern"][0]._repr_html_()  # one head: the tokens on both axes
    assert one.startswith("<svg") and "<title>W → h: 0 (row 0, col 1)</title>" in one and "␣" in one
    assert "masked" in c["blocks.1.attn.hook_attn_scores"][0]._repr_html_()  # -inf above the diagonal


def test_the_gil_is_released_while_the_engine_computes(model):
    started, count = threading.Event(), 0
    t = threading.Thread(target=lambda: (started.set(), qkv.heads(model, batch=128)))
    t.start()
    started.wait()
    t0 = time.perf_counter()
    while t.is_alive():  # wakes up only if the other thread's C++ call let go of the GIL
        time.sleep(0.002)
        count += 1
    elapsed = time.perf_counter() - t0
    assert elapsed > 0.1, "the call was too short to tell"
    assert count >= 10, "%d Python steps in %.2f s beside the engine" % (count, elapsed)


# ---- other families ----------------------------------------------------------------------------------------

def test_another_family_caches_every_hook_point_as_dump(tmp_path):
    run_cli("init", "--arch", "llama", "--preset", "tiny", "--dtype", "bf16", "--out", tmp_path / "llama")
    m = qkv.load(str(tmp_path / "llama"))
    assert m.config["model_type"] == "llama" and "blocks.0.attn.hook_rot_q" in m.hook_names
    ids = np.arange(1, 12) % m.config["vocab_size"]
    run_cli("dump", "--model", tmp_path / "llama", "--tokens", ",".join(map(str, ids)), "--out", tmp_path / "dump")
    dumped = {p.stem: np.load(p) for p in (tmp_path / "dump").glob("*.npy") if p.stem != "tokens"}
    _, cache = m.run_with_cache(ids)
    assert sorted(cache) == sorted(dumped)
    for name, arr in dumped.items():
        assert same_bits(np.asarray(cache[name]), arr), name
    seen = []
    m.run_with_hooks(ids, fwd_hooks=[(n, lambda a, n: seen.append(n)) for n in m.hook_names])
    assert seen == m.hook_names
    # The experiments take every family: the same JSON as the CLI's (qkv heads / project / scores --json).
    tok = ",".join(map(str, ids))
    for got, args in ((qkv.heads(m), ["heads"]),
                      (qkv.project(m, 1, tokens=ids), ["project", "--layer", "1", "--tokens", tok]),
                      (qkv.scores(m, 1, 3, tokens=ids), ["scores", "--layer", "1", "--head", "3", "--tokens", tok])):
        want = json.loads(run_cli(*args, "--model", tmp_path / "llama", "--json").stdout)
        assert got == want, args[0]
    got = qkv.tour(m, out=str(tmp_path / "report"))
    want = json.loads(run_cli("tour", "--model", tmp_path / "llama", "--json", "--quiet", "--out", tmp_path / "cli").stdout)
    assert got["family"] == "llama" and got["report"] == str(tmp_path / "report" / "index.html")
    assert (tmp_path / "report" / "index.html").exists() and qkv.tour(m)["report"] is None
    assert [(c["id"], c["held"], c["applies"]) for c in got["claims"]] == \
        [(c["id"], c["held"], c["applies"]) for c in want["claims"]]


def test_every_function_has_a_docstring():
    import inspect
    missing = [n for n in qkv.__all__ if not (getattr(qkv, n).__doc__ or "").strip()]
    for cls in (qkv.Model, qkv.Activation):
        for n, f in vars(cls).items():
            if callable(f) or isinstance(f, property):
                if not (f.__doc__ or "").strip():
                    missing.append(cls.__name__ + "." + n)
    for n, f in inspect.getmembers(qkv._qkv, callable):
        if not n.startswith("_") and not (f.__doc__ or "").strip():
            missing.append("_qkv." + n)
    assert missing == []
