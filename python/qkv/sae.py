"""Sparse autoencoders in SAELens's format, spliced into qkv's forward as SAELens's HookedSAETransformer does:

    sae = qkv.SAE.load("my-sae")                         # cfg.json + sae_weights.safetensors (SAELens)
    feats = sae.encode(cache["blocks.1.hook_resid_pre"])  # [T, d_sae]
    logits = model.run_with_saes(tokens, saes=[sae])     # the model continuing from the reconstruction
    logits, cache = model.run_with_cache_with_saes(tokens, saes=[sae])
    cache["blocks.1.hook_resid_pre.hook_sae_acts_post"]   # the features as the forward made them
    with model.saes([sae], use_error_term=True):          # every forward (generate too), until the block ends
        model.generate("When Mary", max_new_tokens=8, fwd_hooks=[(
            "blocks.1.hook_resid_pre.hook_sae_acts_post", lambda f, hook: f * [[1] * 5 + [0] + [1] * 58])])

Architectures: "standard" (ReLU), "jumprelu" (ReLU where the pre-activation exceeds `threshold`) and
"topk" (the k largest pre-activations, ReLU'd). An SAE on hook_z reads each position's heads flattened
([T, n_heads · d_head], SAELens's hook_z reshaping) and writes them back in [T, n_heads, d_head].

The splice is a forward hook on the SAE's hook point (qkv/added_hooks.py): the activation is replaced by
the SAE's reconstruction, or, with use_error_term=True, by the activation plus the change the hooks on the
features made to the reconstruction (x + decode(edited) − decode(features)): nothing edited, nothing
changes, bit for bit. Feature hooks are named "<hook point>.hook_sae_acts_post" and run on float32
[..., d_sae] arrays. The SAE's arithmetic is float32 NumPy (x − b_dec) @ W_enc + b_enc, f @ W_dec + b_dec."""

import contextlib as _contextlib
import json as _json
import os as _os

import numpy as _np

from . import _qkv
from . import hooks as _hooks
from .hooks import HookPoint as _HookPoint

CFG_FILE, WEIGHTS_FILE = "cfg.json", "sae_weights.safetensors"  # SAELens's file names
_PARTS = ("hook_sae_input", "hook_sae_acts_pre", "hook_sae_acts_post", "hook_sae_recons", "hook_sae_error",
          "hook_sae_output")


def _usage(message):
    from . import _usage as u
    return u(message)


def _data(message):
    from . import Error
    e = Error(message)
    e.exit_code, e.kind = 1, "data"
    return e


class SAE:
    """A sparse autoencoder: W_enc [d_in, d_sae], b_enc [d_sae], W_dec [d_sae, d_in], b_dec [d_in] (float32),
    `threshold` [d_sae] for jumprelu, `k` for topk, at `hook_name`; see this module's docstring."""

    def __init__(self, W_enc, b_enc, W_dec, b_dec, hook_name, architecture="standard", threshold=None, k=None,
                 apply_b_dec_to_input=True, where="SAE"):
        self.W_enc, self.b_enc, self.W_dec, self.b_dec = (_np.ascontiguousarray(a, dtype=_np.float32)
                                                          for a in (W_enc, b_enc, W_dec, b_dec))
        self.hook_name, self.architecture = str(hook_name), str(architecture)
        self.threshold = None if threshold is None else _np.ascontiguousarray(threshold, dtype=_np.float32)
        self.k = None if k is None else int(k)
        self.apply_b_dec_to_input = bool(apply_b_dec_to_input)
        self._check(where)

    def _check(self, where):
        """qkv.Error (data) naming `where` and the tensor when the shapes or the architecture do not fit."""
        if self.W_enc.ndim != 2:
            raise _data("%s: W_enc is %s, expected [d_in, d_sae]" % (where, self.W_enc.shape))
        d_in, d_sae = self.W_enc.shape
        want = {"b_enc": (d_sae,), "W_dec": (d_sae, d_in), "b_dec": (d_in,)}
        if self.architecture == "jumprelu":
            if self.threshold is None:
                raise _data("%s: a jumprelu SAE needs the tensor 'threshold'" % where)
            want["threshold"] = (d_sae,)
        elif self.architecture == "topk":
            if self.k is None or not 0 < self.k <= d_sae:
                raise _data("%s: a topk SAE needs k in [1, %d], got %r" % (where, d_sae, self.k))
        elif self.architecture != "standard":
            raise _data("%s: architecture %r: qkv runs standard, jumprelu and topk SAEs" % (where, self.architecture))
        for name, shape in want.items():
            if getattr(self, name).shape != shape:
                raise _data("%s: %s is %s, expected %s (d_in %d, d_sae %d)" % (
                    where, name, getattr(self, name).shape, shape, d_in, d_sae))

    @property
    def d_in(self):
        return self.W_enc.shape[0]

    @property
    def d_sae(self):
        return self.W_enc.shape[1]

    def __repr__(self):
        return "<qkv.SAE %s at %s: %d -> %d>" % (self.architecture, self.hook_name, self.d_in, self.d_sae)

    # -- files

    @classmethod
    def load(cls, path):
        """An SAE from SAELens's directory layout: cfg.json (architecture, d_in, d_sae, hook_name — at the top or
        in "metadata" —, apply_b_dec_to_input, k or activation_fn_kwargs.k for topk) and
        sae_weights.safetensors (W_enc, b_enc, W_dec, b_dec, threshold; F32, F16 or BF16).
        qkv.Error (data) naming the file and key for anything missing or inconsistent."""
        path = _os.fspath(path)
        cfg_path, weights_path = _os.path.join(path, CFG_FILE), _os.path.join(path, WEIGHTS_FILE)
        try:
            with open(cfg_path, encoding="utf-8") as f:
                cfg = _json.load(f)
        except (OSError, ValueError) as e:
            raise _data("%s: cannot read the SAE's config: %s" % (cfg_path, e)) from None
        if not isinstance(cfg, dict):
            raise _data("%s: expected a JSON object" % cfg_path)
        hook = cfg.get("hook_name") or (cfg.get("metadata") or {}).get("hook_name")
        if not isinstance(hook, str):
            raise _data("%s: no hook_name (at the top or in \"metadata\")" % cfg_path)
        norm = cfg.get("normalize_activations", "none")
        if norm not in (None, "none"):
            raise _data("%s: normalize_activations %r: qkv runs SAEs without activation normalization" % (cfg_path, norm))
        arch = cfg.get("architecture", "standard")
        k = cfg.get("k", (cfg.get("activation_fn_kwargs") or {}).get("k"))
        w = _qkv.read_safetensors(weights_path)
        missing = [n for n in ("W_enc", "b_enc", "W_dec", "b_dec") + (("threshold",) if arch == "jumprelu" else ())
                   if n not in w]
        if missing:
            raise _data("%s: no tensor %s" % (weights_path, ", ".join(missing)))
        sae = cls(w["W_enc"], w["b_enc"], w["W_dec"], w["b_dec"], hook, arch, w.get("threshold"), k,
                  cfg.get("apply_b_dec_to_input", True), where=weights_path)
        for key in ("d_in", "d_sae"):
            if key in cfg and cfg[key] != getattr(sae, key):
                raise _data("%s: %s is %r but the weights say %d" % (cfg_path, key, cfg[key], getattr(sae, key)))
        return sae

    def save(self, path, dtype="F32"):
        """Writes SAELens's layout into directory `path`: the weights (F32, F16 or BF16) first, cfg.json last,
        so that an interrupted save never leaves a directory that loads."""
        path = _os.fspath(path)
        _os.makedirs(path, exist_ok=True)
        tensors = [("W_enc", self.W_enc), ("b_enc", self.b_enc), ("W_dec", self.W_dec), ("b_dec", self.b_dec)]
        if self.threshold is not None:
            tensors.append(("threshold", self.threshold))
        _qkv.write_safetensors(_os.path.join(path, WEIGHTS_FILE), tensors, {"format": "pt"}, dtype)
        cfg = {"architecture": self.architecture, "d_in": self.d_in, "d_sae": self.d_sae,
               "apply_b_dec_to_input": self.apply_b_dec_to_input, "normalize_activations": "none",
               "dtype": {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}[dtype],
               "metadata": {"hook_name": self.hook_name}}
        if self.k is not None:
            cfg["k"] = self.k
        tmp = _os.path.join(path, CFG_FILE + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            _json.dump(cfg, f, indent=2)
        _os.replace(tmp, _os.path.join(path, CFG_FILE))

    # -- arithmetic

    def _rows(self, x):
        """x as rows [..., d_in] (hook_z's heads flattened); qkv.Error when its width does not fit."""
        x = _np.asarray(x, dtype=_np.float32)
        if x.ndim >= 1 and x.shape[-1] == self.d_in:
            return x
        if x.ndim >= 2 and x.shape[-2] * x.shape[-1] == self.d_in:
            return x.reshape(x.shape[:-2] + (self.d_in,))
        raise _usage("%r reads rows of %d, got an array %s" % (self, self.d_in, x.shape))

    def encode_pre(self, x):
        """The pre-activations (x − b_dec) @ W_enc + b_enc, float32 [..., d_sae]."""
        rows = self._rows(x)
        if self.apply_b_dec_to_input:
            rows = rows - self.b_dec
        return rows @ self.W_enc + self.b_enc

    def activate(self, pre):
        """The features from the pre-activations: ReLU, JumpReLU (ReLU where pre > threshold) or TopK."""
        acts = _np.maximum(pre, 0.0, dtype=_np.float32)
        if self.architecture == "jumprelu":
            acts = acts * (pre > self.threshold)
        elif self.architecture == "topk":
            keep = _np.argpartition(-pre, self.k - 1, axis=-1)[..., :self.k]
            acts = _np.zeros_like(acts)
            _np.put_along_axis(acts, keep, _np.maximum(_np.take_along_axis(pre, keep, -1), 0.0), -1)
        return acts.astype(_np.float32)

    def encode(self, x):
        """The features of activations x [..., d_in] (or hook_z [..., n_heads, d_head]): float32 [..., d_sae]."""
        return self.activate(self.encode_pre(x))

    def decode(self, features):
        """The reconstruction features @ W_dec + b_dec, float32 [..., d_in]."""
        return (_np.asarray(features, dtype=_np.float32) @ self.W_dec + self.b_dec).astype(_np.float32)

    def __call__(self, x):
        """decode(encode(x)), in x's shape."""
        x = _np.asarray(x)
        return self.decode(self.encode(x)).reshape(x.shape)


def _splice(sae, use_error_term, feature_hooks, record):
    """The forward hook that runs `sae` at its hook point (see the module docstring); record: None, or a
    dict the SAE's parts are written into under "<hook>.hook_sae_…"."""
    acts_name = sae.hook_name + ".hook_sae_acts_post"

    def hook(x, point):
        x = _np.asarray(x)
        rows = sae._rows(x)  # [..., d_in]: hook_z's heads flattened
        pre = sae.encode_pre(rows)
        acts = sae.activate(pre)
        clean = sae.decode(acts)
        edited = acts
        for fn in feature_hooks:
            r = fn(edited, _HookPoint(acts_name))
            if r is not None:
                if _np.shape(r) != acts.shape:
                    raise _usage("fwd_hooks: the hook for %s returned shape %s, expected %s"
                                 % (acts_name, _np.shape(r), acts.shape))
                edited = _np.asarray(r, dtype=_np.float32)
        recon = clean if edited is acts and not feature_hooks else sae.decode(edited)
        out = (rows + (recon - clean)) if use_error_term else recon
        out = out.astype(_np.float32).reshape(x.shape)
        if record is not None:
            parts = (rows, pre, edited, recon, rows - clean if use_error_term else None, out)
            for name, a in zip(_PARTS, parts):
                if a is not None:
                    record[sae.hook_name + "." + name] = _np.array(a, dtype=_np.float32)
        return out

    return hook


class SaesMixin:
    """qkv.Model's SAE splicing: saes() blocks, run_with_saes, run_with_cache_with_saes (SAELens's names), and
    sae_attribution (each feature's effect on a metric from one backward)."""

    def _checked_saes(self, saes):
        """saes (one SAE or several) as a list; qkv.Error (usage) for a non-SAE, a hook point the model
        lacks, or two SAEs at one point."""
        saes = [saes] if isinstance(saes, SAE) else list(saes)
        seen = set()
        for s in saes:
            if not isinstance(s, SAE):
                raise _usage("saes: expected qkv.SAE objects, got %r" % (s,))
            if s.hook_name not in self._all_names:
                raise _usage("%r: %r is not a hook point of this model (model.hook_names lists them)" % (s, s.hook_name))
            if s.hook_name in seen:
                raise _usage("saes: two SAEs at %s" % s.hook_name)
            seen.add(s.hook_name)
        return saes

    def _sae_hooks(self, saes, use_error_term, fwd_hooks, record=None):
        """(the splice hooks, the other fwd_hooks): feature hooks ("<hook>.hook_sae_acts_post") go to their SAE."""
        saes = self._checked_saes(saes)
        feature = {s.hook_name + ".hook_sae_acts_post": [] for s in saes}
        rest = []
        for h in fwd_hooks:
            name, fn = _hooks.pair(h, "fwd_hooks")
            if isinstance(name, str) and name in feature:
                feature[name].append(fn)
            else:
                rest.append((name, fn))
        splices = [(s.hook_name, _splice(s, use_error_term, feature[s.hook_name + ".hook_sae_acts_post"], record))
                   for s in saes]
        return splices, rest

    @_contextlib.contextmanager
    def saes(self, saes, use_error_term=False, fwd_hooks=()):
        """A `with` block in which every forward of the model (model(...), run_with_hooks, run_with_cache,
        generate) runs through the SAEs (hooks on the model, removed on leaving). fwd_hooks may name the
        features, "<hook>.hook_sae_acts_post"."""
        splices, rest = self._sae_hooks(saes, use_error_term, fwd_hooks)
        with self.hooks(fwd_hooks=splices + rest):
            yield self

    def run_with_saes(self, tokens, saes, use_error_term=False, fwd_hooks=(), **kwargs):
        """model(tokens, **kwargs) with the SAEs spliced in (and fwd_hooks, feature hooks included)."""
        with self.saes(saes, use_error_term, fwd_hooks):
            return self(tokens, **kwargs)

    def run_with_cache_with_saes(self, tokens, saes, use_error_term=False, fwd_hooks=(), **kwargs):
        """run_with_cache with the SAEs spliced in: (logits, cache), the cache also holding each SAE's
        "<hook>.hook_sae_input", "hook_sae_acts_pre", "hook_sae_acts_post" (after feature hooks),
        "hook_sae_recons", "hook_sae_error" (use_error_term) and "hook_sae_output", float32."""
        record = {}
        splices, rest = self._sae_hooks(saes, use_error_term, fwd_hooks, record)
        with self.hooks(fwd_hooks=splices + rest):
            logits, cache = self.run_with_cache(tokens, **kwargs)
        cache.update(record)
        return logits, cache

    def sae_attribution(self, tokens, saes, metric, attention_mask=None):
        """Every feature's effect on `metric` estimated from one backward (attribution patching over SAE
        features): {hook name: {"features" f, "grad" ∂metric/∂f, "attribution" −f·∂metric/∂f}}, float32
        [..., T, d_sae] each. The SAEs sit with their error term, so the forward is the model's own and
        ∂metric/∂f is the engine's gradient at the hook point through W_decᵀ; "attribution" estimates the
        change of the metric when a feature is zeroed at a position. Like incl_bwd's gradients, the features
        come from the training forward (equal to the inference forward's to float32 rounding). metric as
        run_with_cache(incl_bwd=True)'s
        (qkv.logit_diff, qkv.loss or f(logits) -> (value, grad))."""
        saes = self._checked_saes(saes)  # no splice: with the error term the forward is the model's own
        _, cache = self.run_with_cache(tokens, names=[s.hook_name for s in saes], incl_bwd=True, metric=metric,
                                       attention_mask=attention_mask)
        out = {}
        for s in saes:
            f = s.encode(cache[s.hook_name])
            g = (s._rows(cache[s.hook_name + "_grad"]) @ s.W_dec.T).astype(_np.float32)
            out[s.hook_name] = {"features": f, "grad": g, "attribution": (-f * g).astype(_np.float32)}
        return out

