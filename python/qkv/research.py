"""The CLI's research commands from Python, dicts shaped like their --json and arrays as NumPy:

    qkv.attribute(model, tokens, answer, wrong, position=-1)    `qkv attribute --json`: DLA and the logit lens
    qkv.sweep(model, out, tokens_files=[...] or corpus=[...])   `qkv sweep --json`, writing the same files
    qkv.open_store(out)                                         a sweep's activation store, read as NumPy
    qkv.rank_agreement(a, b, k)                                 Spearman's ρ and the top-k overlap of two effects

(`qkv.patch` in qkv/patching.py does activation, attribution and path patching.) Bad input raises qkv.Error.
"""
import contextlib as _contextlib
import os as _os

import numpy as _np

from . import _qkv
from . import store as _store
from .grad import _token


def attribute(model, tokens, answer, wrong, position=-1):
    """`qkv attribute --json`: the logit difference logit[answer] − logit[wrong] at `position` (−1: the last)
    split over the embedding, every head, attention bias and MLP (the final norm's scale frozen), checked to
    add up ("sum_minus_logit_diff"), and the logit lens after every layer.

    tokens: a text or token ids; answer, wrong: token ids or one-token texts. Returns {"tokens", "position",
    "answer", "wrong", "logit_diff", "sum_terms", "sum_minus_logit_diff", "norm_scale", "per_head",
    "heads_vs_attn_out_max_abs", "note", "terms": [{"name", "kind", "layer", "head", "value"}, …], "lens":
    [{"where", "layer", "logit_diff", "top_token", "top_label", "answer_rank"}, …]}."""
    from . import _ids, _model
    m = _model(model)
    return _qkv.attribute(m, _ids(model, tokens), _token(model, answer, "answer"), _token(model, wrong, "wrong"),
                          int(position))


def _paths(xs, name):
    """A list of file paths from one path or several."""
    from . import _usage
    if xs is None:
        return []
    if isinstance(xs, (str, _os.PathLike)):
        xs = [xs]
    try:
        return [_os.fspath(x) for x in xs]
    except TypeError:
        raise _usage("%s: expected file paths, got %r" % (name, xs)) from None


def sweep(model, out, corpus=None, tokens_files=None, token_dtype="uint16", window=0, stride=0, max_offset=32,
          save=(), save_dtype="float32", shard_mb=256, chunk_windows=0, max_windows=0, resume=False):
    """`qkv sweep --out OUT … --json` in this process (one rank): per-head statistics over the windows of a
    corpus (text files, tokenized with the model's tokenizer) or of token files (raw uint16/uint32 ids or
    llm.c's .bin), and with `save` the activations of those hooks for every window (an activation store,
    read with qkv.open_store(out)). Writes what the CLI writes into `out` (stats.json, stats.csv, the
    heatmaps, chunks/, shards/, manifest.json) and returns stats.json's dict: {"model_hash", "n_tokens",
    "window", "stride", "max_offset", "windows", "query_rows", "heads": [{"layer", "head",
    "previous_token", "duplicate_token", "induction", "entropy", "sink", "dla", "offset"}, …]}.

    window 0: the model's context; stride 0: the window; chunk_windows 0: from shard_mb when saving, else 64;
    max_windows 0: all. resume: finish a sweep already in `out` (same arguments). docs/sweep.md says more."""
    from . import _model
    opts = {"out": _os.fspath(out), "corpus": _paths(corpus, "corpus"), "tokens_files": _paths(tokens_files, "tokens_files"),
            "token_dtype": str(token_dtype), "save_dtype": str(save_dtype), "window": int(window), "stride": int(stride),
            "max_offset": int(max_offset), "chunk_windows": int(chunk_windows), "save": [str(s) for s in (
                [save] if isinstance(save, str) else save)], "shard_mb": float(shard_mb), "resume": bool(resume),
            "max_windows": int(max_windows)}
    return _qkv.sweep(_model(model), opts)


@_contextlib.contextmanager
def _as_error():
    """Turns the store reader's errors (a missing file, a hook not stored, a bad shard) into qkv.Error (data)."""
    from . import Error
    try:
        yield
    except Error:
        raise
    except (OSError, KeyError, ValueError, TypeError) as e:
        err = Error(str(e.args[0]) if isinstance(e, KeyError) and e.args else str(e))
        err.exit_code, err.kind = 1, "data"
        raise err from e


class Store(_store.Store):
    """An activation store written by `qkv sweep --save` or qkv.sweep(save=…) (python/qkv/store.py's reader):
    `.hooks`, `.window`, `.stride`, `.load(hook)` → float32 [windows, *window_shape], `.iter_shards(hook)`,
    `.iter_windows(hook)`, `.iter_rows(hook)`; bf16 stores widened to float32. Errors are qkv.Error."""

    def __init__(self, path, partial=False):
        """path: the sweep's out directory; partial: read a stopped sweep's finished chunks (no manifest yet)."""
        with _as_error():
            super().__init__(_os.fspath(path), partial)

    def shards(self, hook):
        """The manifest's shards of `hook` (qkv.Error when the store has no such hook)."""
        with _as_error():
            return super().shards(hook)

    def _load(self, shard, mmap):
        """One shard as float32 (qkv.Error for a missing or malformed file)."""
        with _as_error():
            return super()._load(shard, mmap)

    def iter_rows(self, hook):
        """As the reader's, the not-token-major error a qkv.Error."""
        with _as_error():
            shape = self.window_shape(hook)
            if len(shape) < 1 or shape[0] != self.window:
                raise ValueError("%s: per-window shape %s is not token-major" % (hook, shape))
        return super().iter_rows(hook)


def open_store(path, partial=False):
    """The activation store in a sweep's out directory as a qkv.Store (see there)."""
    return Store(path, partial)


def _ranks(x):
    """Ranks 1..n of x, ties given their average rank."""
    x = _np.asarray(x, dtype=_np.float64)
    order = _np.argsort(x, kind="stable")
    r = _np.empty(len(x))
    r[order] = _np.arange(1, len(x) + 1)
    for v in _np.unique(x):
        tied = x == v
        if tied.sum() > 1:
            r[tied] = r[tied].mean()
    return r


def rank_agreement(a, b, k=None):
    """How well effects b rank the sites as effects a do (e.g. a = activation patching's change of the metric
    per site, b = attribution patching's estimates): {"n", "spearman": Spearman's ρ of a and b (ties averaged;
    nan when either is constant), "k", "top_k_overlap": the share of the k largest |a| among the k largest |b|}.
    k None: 3 for up to 16 sites, else a tenth of them (at least 3)."""
    from . import _usage
    a, b = _np.asarray(a, dtype=_np.float64).ravel(), _np.asarray(b, dtype=_np.float64).ravel()
    if a.shape != b.shape or a.size < 2:
        raise _usage("rank_agreement: expected two equally long lists of at least 2 effects, got %d and %d" % (a.size, b.size))
    if not (_np.isfinite(a).all() and _np.isfinite(b).all()):
        raise _usage("rank_agreement: the effects must be finite")
    n = a.size
    k = (3 if n <= 16 else max(3, n // 10)) if k is None else int(k)
    if not 1 <= k <= n:
        raise _usage("rank_agreement: k = %d is outside [1, %d]" % (k, n))
    ra, rb = _ranks(a), _ranks(b)
    rho = float(_np.corrcoef(ra, rb)[0, 1]) if ra.std() > 0 and rb.std() > 0 else float("nan")
    top = len(set(_np.argsort(-_np.abs(a), kind="stable")[:k]) & set(_np.argsort(-_np.abs(b), kind="stable")[:k])) / k
    return {"n": n, "spearman": rho, "k": k, "top_k_overlap": top}
