"""python/qkv_store.py against things it did not write.

Always: a hand-made store (manifest and partial chunk records), and bf16 widening against torch's own
bfloat16. With a real sweep (tests/cli/sweep_test.sh sets QKV_BIN, QKV_SWEEP_F32, QKV_SWEEP_BF16 and
QKV_SWEEP_TOKENS): every window read back equals what `qkv dump` writes for the same tokens, byte for
byte, and the bf16 store equals torch's rounding of the float32 store.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
from qkv_store import Store, bf16_to_float32  # noqa: E402

F32 = os.environ.get("QKV_SWEEP_F32")
BF16 = os.environ.get("QKV_SWEEP_BF16")
QKV = os.environ.get("QKV_BIN")
TOKENS = os.environ.get("QKV_SWEEP_TOKENS")
needs_sweep = pytest.mark.skipif(not (F32 and BF16 and QKV and TOKENS),
                                 reason="run by tests/cli/sweep_test.sh, which makes the stores")
needs_f32_store = pytest.mark.skipif(not (F32 and QKV and TOKENS),
                                     reason="run by tests/cli/sweep_test.sh, which makes the stores")
TOKEN_DTYPE = np.uint32 if os.environ.get("QKV_SWEEP_TOKEN_DTYPE") == "uint32" else np.uint16


def test_bf16_widening_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 1 << 16, size=4096, dtype=np.uint16)
    bits[:4] = [0x0000, 0x8000, 0x7F80, 0xFF80]  # ±0, ±inf
    ours = bf16_to_float32(bits)
    theirs = torch.from_numpy(bits.view(np.int16).copy()).view(torch.bfloat16).float().numpy()
    nan = np.isnan(theirs)
    assert np.array_equal(np.isnan(ours), nan)
    assert np.array_equal(ours[~nan].view(np.uint32), theirs[~nan].view(np.uint32))
    with pytest.raises(TypeError):
        bf16_to_float32(np.zeros(3, np.float32))


def _hand_made(tmp_path, with_manifest):
    os.makedirs(tmp_path / "shards" / "h" / "x")
    os.makedirs(tmp_path / "chunks")
    a = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)
    b = -np.arange(1 * 3 * 4, dtype=np.float32).reshape(1, 3, 4)
    np.save(tmp_path / "shards/h/x/c000000.npy", a)
    np.save(tmp_path / "shards/h/x/c000001.npy", b)
    shards = [{"file": "shards/h/x/c000000.npy", "shape": [2, 3, 4], "windows": [0, 2], "tokens": [0, 5]},
              {"file": "shards/h/x/c000001.npy", "shape": [1, 3, 4], "windows": [2, 3], "tokens": [4, 7]}]
    plan = {"save": ["h/x"], "save_shapes": {"h/x": [3, 4]}, "save_dtype": "float32", "window": 3,
            "stride": 2, "model_hash": "0" * 16}
    (tmp_path / "sweep.json").write_text(json.dumps(plan))
    for c, s in enumerate(shards):
        rec = {"windows": s["windows"], "tokens": s["tokens"],
               "shards": {"h/x": {"file": s["file"], "shape": s["shape"], "dtype": "float32"}}}
        (tmp_path / "chunks" / f"c{c:06d}.json").write_text(json.dumps(rec))
    if with_manifest:
        m = {"dtype": "float32", "window": 3, "stride": 2, "model_hash": "0" * 16,
             "hooks": {"h/x": {"window_shape": [3, 4], "shards": shards}}}
        (tmp_path / "manifest.json").write_text(json.dumps(m))
    return np.concatenate([a, b])


@pytest.mark.parametrize("with_manifest", [True, False])
def test_hand_made_store(tmp_path, with_manifest):
    expected = _hand_made(tmp_path, with_manifest)
    if not with_manifest:
        with pytest.raises(FileNotFoundError):
            Store(str(tmp_path))
    s = Store(str(tmp_path), partial=not with_manifest)
    assert s.complete == with_manifest
    assert s.hooks == ["h/x"] and s.window_shape("h/x") == (3, 4)
    assert np.array_equal(s.load("h/x"), expected)
    wins = list(s.iter_windows("h/x"))
    assert [(w, t) for w, t, _ in wins] == [(0, 0), (1, 2), (2, 4)]
    assert all(np.array_equal(x, expected[w]) for w, _, x in wins)
    rows = np.concatenate(list(s.iter_rows("h/x")))
    assert np.array_equal(rows, expected.reshape(9, 4))
    with pytest.raises(KeyError):
        s.shards("nope")


@needs_f32_store
def test_windows_equal_qkv_dump(tmp_path):
    s = Store(F32)
    tokens = np.fromfile(TOKENS, dtype=TOKEN_DTYPE)
    n = s.manifest["n_windows"]
    model = os.environ.get("QKV_SWEEP_MODEL", "")  # the checkpoint swept (default: the bundled model)
    if not model:
        assert s.hooks == ["blocks.0.attn.hook_z", "blocks.1.hook_resid_post"]
    by_window = {h: {w: (t, x) for w, t, x in s.iter_windows(h) if w in (0, 17, n - 1)} for h in s.hooks}
    for w in (0, 17, n - 1):
        ids = tokens[w * s.stride: w * s.stride + s.window]
        out = tmp_path / f"dump{w}"
        subprocess.run([QKV, "dump", "--tokens", ",".join(map(str, ids)), "--out", str(out)] +
                       (["--model", model] if model else []), check=True,
                       stdout=subprocess.DEVNULL)
        for h in s.hooks:
            t, x = by_window[h][w]
            assert t == w * s.stride
            d = np.load(out / f"{h}.npy")
            assert d.dtype == x.dtype and d.shape == x.shape, h
            assert d.tobytes() == x.tobytes(), f"window {w}, {h}"
    # Every window once, in order; token-major rows.
    assert [w for w, _, _ in s.iter_windows(s.hooks[0])] == list(range(n))
    rows = next(s.iter_rows("blocks.1.hook_resid_post"))
    assert rows.shape[1] == s.window_shape("blocks.1.hook_resid_post")[1]


@needs_sweep
def test_bf16_store_is_torch_rounding_of_the_float32_store():
    torch = pytest.importorskip("torch")
    f32, bf = Store(F32), Store(BF16)
    assert bf.dtype == "bfloat16" and bf.manifest["n_windows"] == 16
    for h in bf.hooks:
        x = f32.load(h)[:16]
        y = bf.load(h)
        want = torch.from_numpy(x.copy()).to(torch.bfloat16).float().numpy()
        assert y.dtype == np.float32
        assert y.tobytes() == want.tobytes(), h
        assert not np.array_equal(x, y)  # it did round
