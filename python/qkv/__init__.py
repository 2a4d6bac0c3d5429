"""qkv from Python: the C++ engine's forward, activations as NumPy arrays, hooks, and the experiments.

    import qkv
    model = qkv.load()                      # the bundled model (or a path: HF dir, .safetensors, llm.c .bin, .gguf)
    tokens = model.tokenize("When Mary and John went to the store")
    logits, cache = model.run_with_cache(tokens)
    cache["blocks.1.attn.hook_pattern"]     # float32 [H, T, T]; shows as a heatmap in Jupyter

    def zero_head(v, name):                 # v: the engine's own buffer [T, n_kv, dh], writable
        v[:, 2, :] = 0
    logits = model.run_with_hooks(tokens, fwd_hooks=[("blocks.0.attn.hook_v", zero_head)])

    qkv.heads(model), qkv.circuits(model), qkv.tour(model)   # dicts shaped like the CLI's --json
    qkv.patch(model, clean, corrupt, answer=..., wrong=..., method="activation"|"attribution"|"path")
    qkv.attribute(model, tokens, answer, wrong), qkv.sweep(model, out, ...), qkv.open_store(out)

    model.W_Q[0]                            # [n_heads, d_model, d_head]: a view of c_attn's first third
    model.cfg.n_heads, model.QK(1, 3).svd() # TransformerLens's names; circuits as FactoredMatrix

Bad input raises qkv.Error (a ValueError) with the CLI's message. The GIL is released while the engine
computes. See docs/python.md.
"""

import sys as _sys

import numpy as _np

from . import _qkv
from ._qkv import Error

Error.__module__ = "qkv"
Error.__doc__ = """Bad input (a ValueError): the message the CLI prints after 'qkv: error: ', with `exit_code`
(1 bad data, 2 bad usage, as the CLI's) and `kind` ("data" / "usage")."""


def _usage(message):
    """A qkv.Error for bad usage (exit code 2), raised from the Python side."""
    e = Error(message)
    e.exit_code, e.kind = 2, "usage"
    return e

from . import batch as _batch
from . import grad as _grad
from . import hooks as _hooks
from .cache import ActivationCache, get_act_name
from .hooks import _BLOCK, HookPoint
from .factored import FactoredMatrix
from .grad import logit_diff, loss
from .patching import patch
from .research import Store, attribute, open_store, rank_agreement, sweep
from .weights import WeightsMixin as _WeightsMixin
from .added_hooks import HooksMixin as _HooksMixin
from .modules import ModelHookPoint, ModulesMixin as _ModulesMixin
from .sae import SAE, SaesMixin as _SaesMixin

__all__ = ["Error", "Model", "Activation", "FactoredMatrix", "logit_diff", "loss", "patch", "attribute", "sweep",
           "open_store", "Store", "rank_agreement", "load", "heads", "circuits", "scores", "swap", "project", "ablate",
           "tour", "heatmap", "steering_vector", "ActivationCache", "get_act_name", "HookPoint", "ModelHookPoint", "SAE"]


# ---- arrays that draw themselves ---------------------------------------------------------------------

_MAX_CELLS = 128  # a heatmap shows at most this many rows and columns (larger arrays: the top-left corner)


def heatmap(values, row_labels=None, col_labels=None, title="", row_title="", col_title="", value_label="",
            scale="auto"):
    """The report's SVG heatmap (src/report/svg.cpp) of a 2-D array, as an `<svg>` string.

    NaN and ±inf cells are drawn masked (hatched grey). `scale` is "auto" (diverging when any value is
    negative), "sequential" or "diverging"."""
    v = _np.asarray(values, dtype=_np.float64)
    return _qkv.heatmap_svg(v, list(row_labels or []), list(col_labels or []), title, row_title, col_title,
                            value_label, scale)


class Activation(_np.ndarray):
    """A float32 NumPy array from the engine (a view: no copy) that knows its hook name and its tokens.

    It is an ordinary `numpy.ndarray` in every respect (`torch.from_numpy` takes it); in Jupyter it
    displays as the report's heatmap: a pattern or scores [H, T, T] as one panel per head, a [T, T]
    slice with the tokens on both axes, any other array as a matrix (first 128 rows and columns)."""

    def __array_finalize__(self, obj):
        """Views and copies keep the hook name and the tokens."""
        self.hook_name = getattr(obj, "hook_name", None)
        self._tokens = getattr(obj, "_tokens", None)  # (model, ids): the labels are made when drawn

    @property
    def labels(self):
        """The tokens' labels as the report draws them (␣ for a space), or None."""
        if self._tokens is None:
            return None
        model, ids = self._tokens
        return model._labels(ids)

    def _repr_html_(self):
        """Jupyter's rich display: the report's SVG heatmap (see the class docstring)."""
        try:
            return self._svg()
        except Exception as e:  # never break the notebook's display: fall back to the text repr
            return "<pre>" + _html_escape(repr(_np.asarray(self))) + "\n(" + _html_escape(str(e)) + ")</pre>"

    def _svg(self):
        """The SVG for _repr_html_: a grid of heads for [H, T, T], else one matrix."""
        a = _np.asarray(self, dtype=_np.float64)
        name = self.hook_name or ""
        labels = self.labels
        is_tt = name.endswith("hook_pattern") or name.endswith("hook_attn_scores")
        value_label = "attention weight" if name.endswith("hook_pattern") else "value"
        if a.ndim == 3 and is_tt:
            titles = ["head %d" % h for h in range(a.shape[0])]
            return _qkv.grid_svg(a[:, :_MAX_CELLS, :_MAX_CELLS], titles, name, value_label, "auto")
        if a.ndim == 3:  # [T, H, dh] -> [T, H·dh]
            a = a.reshape(a.shape[0], -1)
        if a.ndim == 1:
            a = a.reshape(1, -1)
        if a.ndim != 2:
            raise ValueError("no picture for a %d-D array" % a.ndim)
        rows = cols = None
        if labels is not None and len(labels) == a.shape[0]:
            rows = labels[:_MAX_CELLS]
        if labels is not None and a.shape[0] == a.shape[1] and len(labels) == a.shape[1]:
            cols = labels[:_MAX_CELLS]
        title = name + (" (first %d × %d)" % (min(a.shape[0], _MAX_CELLS), min(a.shape[1], _MAX_CELLS))
                        if max(a.shape) > _MAX_CELLS else "")
        tt = is_tt or (cols is not None)
        return heatmap(a[:_MAX_CELLS, :_MAX_CELLS], rows, cols, title, "query" if tt else "token",
                       "key" if tt else "", value_label)


def _html_escape(s):
    """s with & < > escaped for HTML text."""
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _activation(arr, name, tokens):
    """arr (no copy) as an Activation named `name`; tokens: (model, ids) for the labels."""
    a = arr.view(Activation)
    a.hook_name = name
    a._tokens = tokens
    return a


# ---- the model -----------------------------------------------------------------------------------------



class Model(_WeightsMixin, _HooksMixin, _ModulesMixin, _SaesMixin):
    """A loaded checkpoint. Create it with `qkv.load(path)`.

    Its weights by TransformerLens's names (W_Q, …, b_U, cfg, QK, OV, state_dict) come from
    qkv/weights.py, which says which arrays are views and which are copies; hooks that stay on it
    (add_hook, reset_hooks, hooks()) from qkv/added_hooks.py; TransformerLens's module tree over both
    (blocks[l].attn.W_Q, blocks[l].attn.hook_z.add_hook, hook_dict, ln_final) from qkv/modules.py; sparse
    autoencoders spliced into the forward (saes(), run_with_saes, run_with_cache_with_saes) from qkv/sae.py."""

    def __init__(self, path=None):
        """Loads `path` (None: the bundled model, or $QKV_MODEL); see `qkv.load`."""
        self._m = _qkv.Model(path)
        self._hook_names = list(self._m.hook_names)
        self._all_names = self._hook_names + ([] if "logits" in self._hook_names else ["logits"])

    def __repr__(self):
        """The path, family and shape of the model."""
        c = self.config
        return "<qkv.Model %s: %s, %d layers, %d heads of %d, d=%d, %d parameters>" % (
            self.path, c.get("model_type"), c.get("n_layer"), c.get("H"), c.get("head_dim"), c.get("d"),
            self.num_parameters)

    @property
    def path(self):
        """The path the model was loaded from."""
        return self._m.path

    @property
    def config(self):
        """The architecture as a dict (the family, d, n_layer, H, n_kv, dh, norms, position kind, ...)."""
        return self._m.config

    @property
    def num_parameters(self):
        """The number of parameters."""
        return self._m.num_parameters

    @property
    def hook_names(self):
        """Every hook point of this model, in forward order (TransformerLens's names)."""
        return list(self._hook_names)

    @property
    def has_tokenizer(self):
        """Whether a tokenizer (vocab.json + merges.txt) sits beside the checkpoint."""
        return self._m.has_tokenizer

    # -- tokens

    def tokenize(self, text, bos=None):
        """Token ids of `text` as `np.ndarray[int32]` (GPT-2's byte-level BPE, exactly).

        bos: None or False: nothing prepended (the CLI's behaviour); True: the tokenizer's
        <|endoftext|>; an int: that id. qkv.Error when the model has no tokenizer."""
        ids = self._m.encode(str(text))
        if bos is None or bos is False:
            return ids
        if bos is True:
            n = self._m.tokenizer_size
            if n == 0 or self._m.token_string(n - 1) != "<|endoftext|>":
                raise _usage("bos=True: the tokenizer has no <|endoftext|> token; give the BOS id")
            bos = n - 1
        return _np.concatenate([_np.array([int(bos)], dtype=_np.int32), ids])

    def to_str_tokens(self, tokens):
        """The text of each token (a list of str): `tokens` is a text (tokenized first) or ids."""
        return self._m.token_texts(list(_ids(self, tokens)))

    def to_single_token(self, text):
        """The id of `text` when it is exactly one token (TransformerLens's to_single_token); qkv.Error
        naming how many tokens it is otherwise."""
        return _grad._token(self, str(text), "to_single_token")

    def to_string(self, tokens):
        """The decoded text of token ids."""
        return "".join(self.to_str_tokens(tokens))

    def _labels(self, ids):
        """Token labels as the report draws them."""
        return self._m.labels(list(ids))

    # -- forward

    def to_tokens(self, texts, padding_side="right", bos=None):
        """(tokens int32 [B, T], attention_mask bool [B, T]): texts (or token-id lists) padded to one length
        on the right or the left (see qkv.batch). bos as tokenize's."""
        return _batch.to_tokens(self, texts, padding_side=padding_side, bos=bos)

    def __call__(self, tokens, attention_mask=None, return_type="logits", loss_per_token=False):
        """logits float32 [T, vocab] for `tokens` (a text or token ids [T]): the engine's forward (with the
        hooks on the model, add_hook's, if there are any);
        a batch (ids [B, T] with attention_mask, or a list of texts): [B, T, vocab].

        return_type (TransformerLens's): "logits"; "loss", the mean next-token cross-entropy of the input
        itself (position p predicts token p + 1; in a batch only where both are real tokens), computed in
        float64 from the float32 logits; "both": (logits, loss); None: nothing. loss_per_token=True gives
        the loss of each position instead, float64 [T − 1] ([B, T − 1], 0 where masked)."""
        if return_type not in ("logits", "loss", "both", None):
            raise _usage("return_type: expected 'logits', 'loss', 'both' or None, got %r" % (return_type,))
        ids, mask, labels = _batch.forward_tokens(self, tokens, attention_mask)
        if self._added:  # hooks on the model (add_hook): run_with_hooks' forward
            logits = self._hooked_run(ids, mask, labels, [])
        else:
            logits = self._m.run(ids, mask)
        return self._returned(logits, ids, mask, return_type, loss_per_token)

    def _returned(self, logits, ids, mask, return_type, loss_per_token):
        """What __call__ and run_with_hooks return for return_type (checked by them before the forward)."""
        if return_type == "logits" or return_type is None:
            return logits if return_type else None
        loss = _batch.next_token_loss(logits, ids, mask, loss_per_token)
        return loss if return_type == "loss" else (logits, loss)

    def _hooked_run(self, ids, mask, labels, fwd_hooks):
        """Logits of the engine's hooked forward: the added hooks, then fwd_hooks."""
        hooks = _hooks.engine_hooks(self, self._with_added(fwd_hooks), lambda arr, n: _activation(arr, n, labels))
        return _activation(self._m.run_with_hooks(ids, hooks, mask), "logits", labels)

    def run_with_cache(self, tokens, names=None, layers=None, materialise_all=False, incl_bwd=False, metric=None,
                       attention_mask=None, names_filter=None, remove_batch_dim=False):
        """(logits, cache): logits float32 [T, vocab]; cache a qkv.ActivationCache, a dict {hook name:
        float32 array} with exactly the names and shapes `qkv dump` writes for the same tokens (and
        "logits"), that also takes TransformerLens's shorthand keys (cache["pattern", 0], cache["q", -1])
        and stacks across layers and heads (accumulated_resid, stack_head_results; see qkv.cache).

        A batch (token ids [B, T] with attention_mask [B, T], from to_tokens; or a list of texts): every
        array gains the leading B (hook_q [B, T, H, dh], hook_pattern [B, H, T, T], logits [B, T, V]); see
        qkv.batch. With incl_bwd the built-in metrics apply to each sequence's own real tokens (position
        −1: its last real token) and are summed; a callable gets the logits [B, T, V] (padding rows 0).

        incl_bwd=True: the cache also holds NAME_grad beside every kept NAME, the gradient of `metric` with
        respect to that activation (what `qkv dump --grad` writes): metric is qkv.logit_diff(A, B,
        position=-1), qkv.loss(positions=None) or f(logits) -> (value, dvalue_dlogits). The gradients
        come from the training forward and backward over a float32 copy of the weights (made once per
        model and kept).

        names: None (every hook point), a list of hook names, or a predicate name -> bool
        (names_filter: the same, by TransformerLens's name for it; give one of the two).
        layers: None, or block indices whose `blocks.L.` hook points are kept (others still are).
        What is not asked for is not kept in memory; with no pattern or scores asked for at a layer its
        attention runs in the fused kernel (equal to ~1e-7, not bit for bit, to the materialised path).
        materialise_all=True runs every layer's attention materialised whatever was asked for, so each
        value is bit for bit the one `qkv dump` (also with --layers) writes, whatever else was kept.
        The arrays own the engine's tensors (no copy); each is an `Activation` (an ndarray that
        displays as a heatmap in Jupyter).
        remove_batch_dim=True (TransformerLens's): a batch of one ([1, T]) gives the cache without its
        leading axis (cache.remove_batch_dim(); the logits keep theirs, as there)."""
        if names_filter is not None:
            if names is not None:
                raise _usage("run_with_cache: give names or names_filter, not both")
            names = names_filter
        ids, mask, labels = _batch.forward_tokens(self, tokens, attention_mask)
        keep = self._kept(names, layers)
        if self._added:
            if incl_bwd:
                self._no_added_hooks("run_with_cache(incl_bwd=True) (its gradients come from the training forward)")
            logits, cache = self._hooked_cache(ids, mask, labels, keep)
            return logits, (cache.remove_batch_dim() if remove_batch_dim else cache)
        spec = _grad._metric_spec(self, metric) if incl_bwd else None
        raw_logits, raw = self._m.run_with_cache(ids, keep, bool(materialise_all), mask)
        logits = _activation(raw_logits, "logits", labels)
        cache = ActivationCache({n: (logits if n == "logits" else _activation(raw[n], n, labels))
                                 for n in self._all_names if n in raw}, self, ids)
        if incl_bwd:
            _, _, grads, _ = _qkv.grads(self._m, ids, spec, keep, mask)
            for n in self._all_names:
                if n in grads and (keep is None or n in keep):
                    cache[n + "_grad"] = _activation(grads[n], n + "_grad", labels)
        return logits, (cache.remove_batch_dim() if remove_batch_dim else cache)

    def _kept(self, names, layers):
        """run_with_cache's names and layers as the list of hook names to keep (None: every one)."""
        all_names = self._all_names
        if names is None:
            keep = None  # everything: the engine's own default
        elif callable(names):
            keep = [n for n in all_names if names(n)]
        elif isinstance(names, str):
            keep = [names]
        else:
            keep = list(names)
        if layers is not None:
            if isinstance(layers, int):
                layers = [layers]
            wanted = set()
            for l in layers:
                l = int(l)
                if not 0 <= l < self.config["n_layer"]:
                    raise _usage("layers: layer %d is outside [0, %d)" % (l, self.config["n_layer"]))
                wanted.add(l)
            keep = [n for n in (all_names if keep is None else keep)
                    if not _BLOCK.match(n) or int(_BLOCK.match(n).group(1)) in wanted]
        return keep

    def _hooked_cache(self, ids, mask, labels, keep):
        """run_with_cache with hooks on the model: the hooked forward, each kept activation copied after
        every hook on it ran (so the cache holds what the forward went on with)."""
        kept = {}
        wanted = [n for n in (self._all_names if keep is None else keep) if n != "logits"]

        def grab(a, hook):
            kept[str(hook)] = _activation(_np.array(a, copy=True), str(hook), labels)

        logits = self._hooked_run(ids, mask, labels, [(n, grab) for n in wanted])
        kept["logits"] = logits
        return logits, ActivationCache({n: kept[n] for n in self._all_names if n in kept and
                                        (keep is None or n in keep)}, self, ids)

    def run_with_hooks(self, tokens, fwd_hooks=(), attention_mask=None, return_type="logits", loss_per_token=False,
                       bwd_hooks=(), reset_hooks_end=True):
        """logits float32 [T, vocab] with Python hooks in the forward (a batch: [B, T, vocab], each hook's
        activation with the leading B, as run_with_cache's arrays). return_type and loss_per_token as
        __call__'s ("loss": the loss of the hooked forward). Hooks on the model (add_hook) run first.
        reset_hooks_end=False leaves fwd_hooks on the model afterwards (model.add_hook); bwd_hooks: none
        (qkv.Error), gradients come from run_with_cache(incl_bwd=True).

        fwd_hooks: [(hook name, fn), ...]; fn(activation, hook) is called when the forward reaches that
        hook point (the name may be a filter, a predicate over hook names, as in TransformerLens; `hook`
        is a qkv.HookPoint, the name as a str with `.name` and `.layer()`: see qkv.hooks), with
        `activation` a writable float32 array viewing the engine's own buffer: edit it in place
        (`activation[:, h] = 0`), or return an array of the same shape to replace it (None keeps it).
        Several hooks on one name run in the given order. The view is valid during the call; the forward
        reuses the buffer afterwards (`activation.copy()` to keep it). An exception in a hook stops the
        forward and propagates."""
        if bwd_hooks:
            raise _usage("run_with_hooks: bwd_hooks: " + _hooks.NO_BACKWARD)
        if return_type not in ("logits", "loss", "both", None):
            raise _usage("return_type: expected 'logits', 'loss', 'both' or None, got %r" % (return_type,))
        ids, mask, labels = _batch.forward_tokens(self, tokens, attention_mask)
        logits = self._hooked_run(ids, mask, labels, list(fwd_hooks))
        if not reset_hooks_end:
            for name, fn in fwd_hooks:
                self.add_hook(name, fn)
        return self._returned(logits, ids, mask, return_type, loss_per_token)


    def generate(self, tokens, max_new_tokens=16, temperature=0.0, top_k=0, top_p=1.0, seed=0, fwd_hooks=(),
                 steer=(), stop_at_eos=True, pad_id=None, return_dict=False, attention_mask=None, do_sample=None,
                 verbose=False):
        """Continues `tokens` through the engine's K/V cache (docs/generate.md): the prompt and the new tokens.

        tokens: a text or ids [T] (or [1, T]). temperature 0: greedy (the lowest id among equal maxima);
        > 0: sampled from softmax(logits / temperature) within the top_k logits (0: all) and the top_p
        nucleus (1: all), reproducible by seed. The prompt plus max_new_tokens must fit the context.
        stop_at_eos: stop after the tokenizer's EOS token. TransformerLens's do_sample: False is greedy
        whatever the temperature, True samples (at temperature 1.0 when it is 0); verbose is accepted
        and changes nothing (qkv draws no progress bar here).
        fwd_hooks: [(name, fn), ...] run at EVERY step on that step's activation, fn(activation, hook)
        as in run_with_hooks (edit in place or return a replacement); the prefill step sees the prompt's
        rows [T, ...], each later step one row [1, ...] (a pattern [H, 1, positions so far]; ln_final and
        logits only the last row). `activation` owns a copy that is written back, so keeping it is safe.
        steer: [(hook, vector, coef), ...] adds coef × vector at every position of every step, before
        the hooks (what `qkv generate --steer` does).
        Returns: a text gives that text followed by the new text; ids give int32 [T + new]
        (as TransformerLens's and Hugging Face's generate); return_dict=True gives `qkv generate
        --json`'s dict instead: {"tokens": the new ids, "text", "stop_reason", "prefill_ms",
        "decode_ms", "tokens_per_second", "prompt_tokens"}.

        A batch — a list of texts / id lists, or ids [B, T] with an attention_mask [B, T] (1 real, 0
        padding; each row's real tokens one run, padded on either side) or a `pad_id` (stripped from both
        ends of each row) — is generated together: the prompts left-padded into one prefill, then every
        step decodes the B sequences through one product per weight (docs/generate.md), each sampled and
        stopped on its own, so each row gives what it gives alone (to rounding). seed: one for all, or a
        list of one per prompt (sequence b with seed s gives the tokens it gives alone with seed s).
        Hooks and steering see [B, ...] arrays (the prefill's padded [B, T_longest, ...], then
        [B, 1, ...]; padding rows and a stopped sequence's rows mean nothing). Returns a list with one
        result per prompt, as above (ids: the prompt's real tokens followed by the new ones); a dict also
        has "batch_tokens_per_second", the whole batch's decoding rate."""
        if do_sample is not None:
            temperature = (float(temperature) or 1.0) if do_sample else 0.0
        batch = attention_mask is not None or (
            isinstance(tokens, (list, tuple)) and tokens and not isinstance(tokens[0], (int, _np.integer)))
        if not batch and not isinstance(tokens, str):
            a = _np.asarray(tokens)
            batch = a.ndim == 2 and a.shape[0] != 1
            if not batch and pad_id is not None:
                a = a.reshape(-1) if a.ndim == 2 else a
                keep = _np.nonzero(a != pad_id)[0]
                a = a[keep[0]:keep[-1] + 1] if keep.size else a[:0]
            tokens = a
        fwd_hooks = self._with_added(fwd_hooks)  # the hooks on the model (add_hook) first
        if batch:
            return self._generate_batch(tokens, attention_mask, pad_id, max_new_tokens, temperature, top_k, top_p,
                                        seed, fwd_hooks, steer, stop_at_eos, return_dict)
        ids = _ids(self, tokens)
        labels = (self, ids)
        hooks = _hooks.engine_hooks(self, fwd_hooks, lambda arr, n: _activation(arr, n, labels))
        d = _qkv.generate(self._m, ids, int(max_new_tokens), float(temperature), int(top_k), float(top_p), int(seed),
                          hooks, _steer_triples(steer), bool(stop_at_eos))
        if return_dict:
            return d
        if isinstance(tokens, str):
            return tokens + (d["text"] or "")
        return _np.concatenate([ids.astype(_np.int32), d["tokens"]])

    def _generate_batch(self, tokens, attention_mask, pad_id, max_new_tokens, temperature, top_k, top_p, seed,
                        fwd_hooks, steer, stop_at_eos, return_dict):
        """generate() of a batch: (ids [B, T], mask) from the texts / id lists or the padded array, one
        engine call (generate_batch), one result per prompt."""
        texts = None
        if isinstance(tokens, (list, tuple)) and tokens and not isinstance(tokens[0], (int, _np.integer)):
            if attention_mask is not None:
                raise _usage("attention_mask: a list of prompts makes its own; give token ids [B, T] with a mask")
            texts = [t if isinstance(t, str) else None for t in tokens]
            seqs = [_ids(self, t) for t in tokens]
            T = max(len(x) for x in seqs)
            ids = _np.zeros((len(seqs), T), dtype=_np.int64)
            mask = _np.zeros((len(seqs), T), dtype=_np.int64)
            for b, x in enumerate(seqs):
                ids[b, T - len(x):] = x
                mask[b, T - len(x):] = 1
        else:
            ids = _np.asarray(tokens)
            if ids.ndim == 1:
                ids = ids.reshape(1, -1)
            if ids.ndim != 2 or ids.size == 0:
                raise _usage("tokens: expected token ids [B, T], got shape %s" % (ids.shape,))
            if not _np.issubdtype(ids.dtype, _np.integer):
                raise _usage("tokens: expected integer token ids, got dtype %s" % ids.dtype)
            mask = attention_mask
            if mask is None and pad_id is not None:  # the pad id stripped from both ends of each row
                real = ids != pad_id
                first = _np.where(real.any(1), real.argmax(1), ids.shape[1])
                last = ids.shape[1] - real[:, ::-1].argmax(1)
                col = _np.arange(ids.shape[1])
                mask = (col >= first[:, None]) & (col < last[:, None])
        hooks = _hooks.engine_hooks(self, fwd_hooks, lambda arr, n: _activation(arr, n, None))
        seeds = [int(x) for x in seed] if isinstance(seed, (list, tuple, _np.ndarray)) else [int(seed)]
        ds = _qkv.generate_batch(self._m, _np.ascontiguousarray(ids, dtype=_np.int64), mask, int(max_new_tokens),
                                 float(temperature), int(top_k), float(top_p), seeds, hooks, _steer_triples(steer),
                                 bool(stop_at_eos))
        if return_dict:
            return ds
        out = []
        for b, d in enumerate(ds):
            if texts is not None and texts[b] is not None:
                out.append(texts[b] + (d["text"] or ""))
            else:
                row = ids[b] if mask is None else ids[b][_np.asarray(mask[b]).astype(bool)]
                out.append(_np.concatenate([row.astype(_np.int32), d["tokens"]]))
        return out


def _steer_triples(steer):
    """[(hook, vector, coef), ...] checked (qkv.Error for anything else), vectors as float32 [width]."""
    steers = []
    for s in steer:
        if not isinstance(s, (tuple, list)) or len(s) != 3:
            raise _usage("steer: expected (hook, vector, coef) triples, got %r" % (s,))
        steers.append((str(s[0]), _np.asarray(s[1], dtype=_np.float32).reshape(-1), float(s[2])))
    return steers


def steering_vector(model, positive, negative, hook):
    """`qkv steer`'s contrastive vector at `hook` as float32 [width] (docs/generate.md): each text's
    activation at the hook averaged over its positions (a BOS the tokenizer adds left out), those means
    averaged over the texts, positive minus negative. positive / negative: lists of texts or token ids.
    Use it with model.generate(..., steer=[(hook, v, coef)])."""
    def side(xs, name):
        if isinstance(xs, str):
            xs = [xs]
        out = []
        for x in xs:
            out.append(x if isinstance(x, str) else _np.asarray(x, dtype=_np.int64).reshape(-1))
        if not out:
            raise _usage("%s: no texts" % name)
        return out
    return _qkv.steering_vector(_model(model), str(hook), side(positive, "positive"), side(negative, "negative"))


def _ids(model, tokens):
    """Token ids as int64 [T] from a text, a list, or an array of shape [T] or [1, T]."""
    if isinstance(tokens, str):
        return model.tokenize(tokens).astype(_np.int64)
    a = _np.asarray(tokens)
    if a.ndim == 2 and a.shape[0] == 1:
        a = a[0]
    if a.ndim != 1:
        raise _usage("tokens: expected a text or token ids of shape [T] (or [1, T]), got shape %s" % (a.shape,))
    if a.size == 0:
        raise _usage("tokens: no tokens")
    if not _np.issubdtype(a.dtype, _np.integer):
        raise _usage("tokens: expected integer token ids, got dtype %s" % a.dtype)
    return a.astype(_np.int64, copy=False)


def _opt_ids(model, tokens):
    """None, or token ids as _ids makes them."""
    return None if tokens is None else _ids(model, tokens)


def load(path=None):
    """Loads a checkpoint and returns a `Model`.

    path: a checkpoint of any family: a Hugging Face directory (config.json + model.safetensors, or
    sharded), a .safetensors file written by qkv, an llm.c .bin or a .gguf; None: $QKV_MODEL, else the
    bundled models/induction. The tokenizer beside it (vocab.json + merges.txt, tokenizer.json, or a
    GGUF's own) is loaded too. Same formats and errors as the CLI's
    --model (qkv.Error naming the file and tensor)."""
    return Model(path)


def _model(m):
    """The engine's model inside a qkv.Model for an experiment that runs the engine's own forward (qkv.Error
    for anything else, and while Python hooks are on the model: they would be left out; the error names
    the calling function)."""
    if not isinstance(m, Model):
        raise _usage("expected a qkv.Model (from qkv.load), got %s" % type(m).__name__)
    m._no_added_hooks("qkv." + _sys._getframe(1).f_code.co_name)
    return m._m


# ---- the experiments (every family): dicts shaped like the CLI's --json ----------------------------------

def project(model, layer=0, tokens=None):
    """`qkv project --layer L --json`: q, k, v recomputed from the block's norm of x with the model's own
    Q/K/V maps (GPT-2's c_attn sliced into thirds by hand), against the forward; the raw-row and
    dropped-bias traps. tokens: text or ids (default: the CLI's sentence)."""
    return _qkv.project(_model(model), int(layer), _opt_ids(model, tokens))


def scores(model, layer=0, head=0, tokens=None):
    """`qkv scores --json`: the raw scores S of one head against Sᵀ, W_Q W_Kᵀ's antisymmetric share,
    and the biases' share of S."""
    return _qkv.scores(_model(model), int(layer), int(head), _opt_ids(model, tokens))


def swap(model, layer=0, head=0, tokens=None):
    """`qkv swap --json`: swapping the query and key maps (fully: Sᵀ; matrices only: neither; after the
    softmax: no relation)."""
    return _qkv.swap(_model(model), int(layer), int(head), _opt_ids(model, tokens))


def heads(model, seq_len=0, batch=4, seed=0, bos=-1, tokens=None):
    """`qkv heads --json`: previous-token, duplicate-token and induction scores of every head on `batch`
    seeded random sequences of `seq_len` tokens (0: min(50, what fits)) repeated twice, with `bos`
    (-1: none) prepended; with `tokens` (text or ids) also the scores on that text."""
    return _qkv.heads(_model(model), int(seq_len), int(batch), int(seed), int(bos), _opt_ids(model, tokens))


def ablate(model, layer=0, head=0, seq_len=0, batch=4, seed=0, bos=-1):
    """`qkv ablate --json`: one head's loss on repeated random sequences with its QK side (uniform
    pattern) or its OV side (zero values) ablated."""
    return _qkv.ablate(_model(model), int(layer), int(head), int(seq_len), int(batch), int(seed), int(bos))


def circuits(model, fold_ln=True, samples=32, seed=0):
    """`qkv circuits --json`: per head the QK and OV circuits' norms and OV copying; Q/K/V-composition
    scores of every pair of heads against a random baseline of `samples` draws."""
    return _qkv.circuits(_model(model), bool(fold_ln), int(samples), int(seed))


def tour(model, tokens=None, out=None, seq_len=0, batch=4, seed=0, bos=None, progress=None):
    """`qkv tour --json`: every claim of the seeds measured on a model of any family, with a verdict per
    claim — or "applies": False with the reason in "note" when the architecture makes it moot.

    tokens: the tour text (text or ids; default: the CLI's default text). out: a directory to write
    the HTML report into (index.html; None: no report, "report" is None). bos: None (<|endoftext|>
    when the tokenizer has it), -1 (none) or an id. progress: None or fn(i, total, step)."""
    text = tokens if isinstance(tokens, str) else ""
    b = -2 if bos is None else int(bos)
    return _qkv.tour(_model(model), _opt_ids(model, tokens), text, None if out is None else str(out), int(seq_len),
                     int(batch), int(seed), b, progress)
