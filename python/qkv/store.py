"""Read the activation stores `qkv sweep --save HOOK` writes (docs/sweep.md), with NumPy only.

A store is a directory holding `manifest.json` (written when the sweep finishes) and
`shards/<hook>/cNNNNNN.npy`, one file per chunk of consecutive windows, shape
[windows in the chunk, *the shape `qkv dump` writes for one window]. A sweep that was stopped has no
manifest yet; its finished chunks are listed by `chunks/cNNNNNN.json` and can be read the same way
(`Store(path, partial=True)`).

    from qkv_store import Store          # or: qkv.open_store("sweep-out") (errors: qkv.Error)
    s = Store("sweep-out")
    for first_window, x in s.iter_shards("blocks.0.attn.hook_z"):   # x: float32 [n, T, H, dh]
        ...
    for rows in s.iter_rows("blocks.1.hook_resid_post"):             # [n * T, d]: one row per token
        ...

bfloat16 shards (`--save-dtype bf16`) are stored as '<u2' holding the upper 16 bits of each float32;
they are widened back to float32 exactly (`bf16_to_float32`).
"""

from __future__ import annotations

import glob
import json
import os
from typing import Iterator, Tuple

import numpy as np

__all__ = ["Store", "bf16_to_float32"]


def bf16_to_float32(bits: np.ndarray) -> np.ndarray:
    """uint16 bfloat16 bit patterns -> float32 (exact: bf16 is the top half of a float32)."""
    bits = np.asarray(bits)
    if bits.dtype != np.uint16:
        raise TypeError(f"bfloat16 bits must be uint16, got {bits.dtype}")
    return (bits.astype(np.uint32) << 16).view(np.float32)


class Store:
    """One sweep output directory."""

    def __init__(self, path: str, partial: bool = False):
        self.path = path
        manifest = os.path.join(path, "manifest.json")
        if os.path.exists(manifest):
            with open(manifest) as f:
                m = json.load(f)
            self.complete = True
        elif partial:
            m = self._from_chunks(path)
            self.complete = False
        else:
            raise FileNotFoundError(f"{manifest}: no manifest (the sweep has not finished; "
                                    "pass partial=True to read the chunks done so far)")
        self.manifest = m
        self.dtype = m["dtype"]
        self.window = int(m["window"])
        self.stride = int(m["stride"])
        self.model_hash = m["model_hash"]
        self.hooks = sorted(m["hooks"])

    @staticmethod
    def _from_chunks(path: str) -> dict:
        with open(os.path.join(path, "sweep.json")) as f:
            plan = json.load(f)
        hooks = {h: {"window_shape": plan["save_shapes"][h], "shards": []} for h in plan["save"]}
        for rec_path in sorted(glob.glob(os.path.join(path, "chunks", "c*.json"))):
            with open(rec_path) as f:
                rec = json.load(f)
            for h, s in rec["shards"].items():
                hooks[h]["shards"].append({"file": s["file"], "shape": s["shape"],
                                           "windows": rec["windows"], "tokens": rec["tokens"]})
        return {"dtype": plan["save_dtype"], "window": plan["window"], "stride": plan["stride"],
                "model_hash": plan["model_hash"], "hooks": hooks}

    def shards(self, hook: str) -> list:
        if hook not in self.manifest["hooks"]:
            raise KeyError(f"{hook}: not in this store (it has {', '.join(self.hooks)})")
        return self.manifest["hooks"][hook]["shards"]

    def window_shape(self, hook: str) -> Tuple[int, ...]:
        return tuple(self.manifest["hooks"][hook]["window_shape"])

    def _load(self, shard: dict, mmap: bool) -> np.ndarray:
        a = np.load(os.path.join(self.path, shard["file"]), mmap_mode="r" if mmap else None)
        if list(a.shape) != list(shard["shape"]):
            raise ValueError(f"{shard['file']}: shape {a.shape}, manifest says {shard['shape']}")
        if self.dtype == "bfloat16":
            return bf16_to_float32(a)
        if a.dtype != np.float32:
            raise ValueError(f"{shard['file']}: dtype {a.dtype}, manifest says float32")
        return a

    def iter_shards(self, hook: str, mmap: bool = False) -> Iterator[Tuple[int, np.ndarray]]:
        """(first window id, float32 [n, *window_shape]) per shard, in window order."""
        for s in self.shards(hook):
            yield int(s["windows"][0]), self._load(s, mmap)

    def iter_windows(self, hook: str) -> Iterator[Tuple[int, int, np.ndarray]]:
        """(window id, first token of the window in the stream, float32 [*window_shape])."""
        for w0, x in self.iter_shards(hook, mmap=True):
            for k in range(x.shape[0]):
                w = w0 + k
                yield w, w * self.stride, np.asarray(x[k], dtype=np.float32)

    def iter_rows(self, hook: str) -> Iterator[np.ndarray]:
        """Token-major hooks ([T, ...] per window): [n * T, prod(rest)] per shard, one row per token
        (overlapping windows, stride < window, repeat tokens)."""
        shape = self.window_shape(hook)
        if len(shape) < 1 or shape[0] != self.window:
            raise ValueError(f"{hook}: per-window shape {shape} is not token-major")
        for _, x in self.iter_shards(hook):
            yield x.reshape(x.shape[0] * x.shape[1], -1)

    def load(self, hook: str) -> np.ndarray:
        """Every window of a hook as one array [n_windows, *window_shape] (fits in memory or not: careful)."""
        parts = [x for _, x in self.iter_shards(hook)]
        return np.concatenate(parts, axis=0) if parts else np.zeros((0,) + self.window_shape(hook), np.float32)
