"""The cache `Model.run_with_cache` returns, indexed as TransformerLens's ActivationCache is.

`ActivationCache` is a dict {hook name: Activation}: every dict operation works on the full names
(`cache["blocks.0.attn.hook_pattern"]`, `cache.keys()`, `"logits" in cache`). Lookups also take
TransformerLens's shorthand, resolved by `get_act_name` (the same rules as `transformer_lens.utils`):

    cache["pattern", 0]          blocks.0.attn.hook_pattern
    cache["q", -1]               the last layer's hook_q (negative layers count from the end)
    cache["resid_post", 1]       blocks.1.hook_resid_post
    cache["normalized", 0, "ln1"]  blocks.0.ln1.hook_normalized
    cache["k6"], cache["pre2"]   blocks.6.attn.hook_k, blocks.2.mlp.hook_pre

(a missing hook is a KeyError naming what the key resolved to; incl_bwd's gradients keep their full names,
"blocks.0.attn.hook_z_grad"). It stacks activations across layers and heads as TransformerLens does
(`stack_activation`, `accumulated_resid`, `stack_head_results`, `decompose_resid`, `remove_batch_dim`) and
attributes logits directly (`apply_ln_to_stack`, `logit_attrs`). Computed here, from the cached hooks and
the weights: the per-head products z[…, h, :] @ W_O[l, h] (float32) and the norms' scales (float64, from
the residual each norm reads: qkv's hooks hold no scale). qkv/cache_results.py adds what TransformerLens's
cache derives too: `cache["blocks.0.ln1.hook_scale"]` (and `cache["scale", 0, "ln1"]`, `cache["scale"]`
for ln_final), `compute_head_results`, `get_neuron_results`, `stack_neuron_results`. The stacks take TransformerLens's `apply_ln`
(the norm that reads the residual at `layer` applied to every component, apply_ln_to_stack) and
`pos_slice` (an int, a (start, stop[, step]) tuple, a slice or a list of positions, on the position
axis); `batch_slice` is not offered: index the arrays."""

import re as _re

import numpy as _np

from .cache_results import ResultsMixin as _ResultsMixin


def _usage(message):
    from . import _usage as u
    return u(message)


def _pos(a, pos_slice, axis=-2):
    """a with only the positions pos_slice names on `axis` (TransformerLens's Slice): None all, an int
    that one (the axis dropped), a (start, stop[, step]) tuple or a slice, a list or array of positions."""
    if pos_slice is None:
        return a
    if isinstance(pos_slice, tuple):
        pos_slice = slice(*pos_slice)
    elif not isinstance(pos_slice, (int, _np.integer, slice)):
        pos_slice = _np.asarray(pos_slice)
    index = [slice(None)] * a.ndim
    index[axis] = pos_slice
    try:
        return a[tuple(index)]
    except IndexError as e:
        raise _usage("pos_slice %r: %s (the sequence has %d positions)" % (pos_slice, e, a.shape[axis])) from None


# Shorthand names and where in a block they live (TransformerLens's tables).
_NAME_ALIAS = {"attn": "pattern", "attn_logits": "attn_scores", "key": "k", "query": "q", "value": "v",
               "mlp_pre": "pre", "mlp_mid": "mid", "mlp_post": "post"}
_SUBLAYER_OF = dict.fromkeys(["q", "k", "v", "z", "rot_q", "rot_k", "result", "pattern", "attn_scores"], "attn")
_SUBLAYER_OF.update(dict.fromkeys(["pre", "post", "mid", "pre_linear"], "mlp"))
_SUBLAYER_ALIAS = {"a": "attn", "attention": "attn", "m": "mlp", "b": "", "block": "", "blocks": ""}
_NORM_NAMES = ("scale", "normalized")
_SHORT = _re.compile(r"([a-z]+)(\d+)([a-z]?.*)")


def get_act_name(name, layer=None, layer_type=None):
    """The hook name TransformerLens's `utils.get_act_name` gives: get_act_name("k", 6) ->
    "blocks.6.attn.hook_k", ("pre", 2) -> "blocks.2.mlp.hook_pre", ("normalized", 0, "ln2") ->
    "blocks.0.ln2.hook_normalized", ("normalized") -> "ln_final.hook_normalized", ("k6") ->
    "blocks.6.attn.hook_k"; a full name ("blocks.0.attn.hook_q", "hook_embed") is returned as is."""
    if not isinstance(name, str):
        raise _usage("get_act_name: the name must be a string, got %r" % (name,))
    if ("." in name or name.startswith("hook_")) and layer is None and layer_type is None:
        return name
    short = _SHORT.fullmatch(name)
    if short:
        name, layer, layer_type = short.group(1), int(short.group(2)), short.group(3) or None
    name = _NAME_ALIAS.get(name, name)
    sub = _SUBLAYER_OF.get(name, _SUBLAYER_ALIAS.get(layer_type, layer_type))
    full = ("blocks.%d." % int(layer) if layer is not None else "") + (sub + "." if sub else "") + "hook_" + name
    return "ln_final." + full if name in _NORM_NAMES and layer is None else full


class ActivationCache(_ResultsMixin, dict):
    """{hook name: Activation} from `Model.run_with_cache`; see this module's docstring for the shorthand
    keys and the stacking methods. `model` is the Model the activations came from, `tokens` the ids of the
    forward ([T], or [B, T] for a batch)."""

    def __init__(self, items, model, tokens):
        super().__init__(items)
        self.model = model
        self.tokens = _np.asarray(tokens)

    @property
    def batched(self):
        """Whether the arrays lead with a batch axis (the forward ran ids [B, T])."""
        return self.tokens.ndim == 2

    def __repr__(self):
        return "ActivationCache(%d hooks%s; keys() lists them)" % (len(self), ", batched" if self.batched else "")

    def _n_layers(self):
        return int(self.model.config["n_layer"])

    def _layer(self, layer):
        """A layer index, negative ones counted from the end."""
        n = self._n_layers()
        l = int(layer)
        if not -n <= l < n:
            raise _usage("layer %d is outside the model's %d layers (negative counts from the end)" % (l, n))
        return l + n if l < 0 else l

    def _stop(self, what, layer):
        """The exclusive end of a stack: layer (0 … n_layers), None or -1 for every layer."""
        n = self._n_layers()
        last = n if layer is None or layer == -1 else int(layer)
        if not 0 <= last <= n:
            raise _usage("%s: layer %d is outside [0, %d] (-1: every layer)" % (what, last, n))
        return last

    def __missing__(self, key):
        if isinstance(key, tuple):
            if not 1 <= len(key) <= 3:
                raise KeyError("%r: expected (name, layer[, layer type])" % (key,))
            name = key[0]
            layer = self._layer(key[1]) if len(key) > 1 and key[1] is not None else None
            full = get_act_name(name, layer, key[2] if len(key) > 2 else None)
        elif isinstance(key, str):
            full = get_act_name(key)
        else:
            raise KeyError(key)
        if full != key and dict.__contains__(self, full):
            return dict.__getitem__(self, full)
        derived = self._derived(full)
        if derived is not None:
            return derived
        raise KeyError("%r (%s) is not in this cache: it holds %d hooks, e.g. %s" %
                       (key, full, len(self), ", ".join(list(self)[:3])))

    def stack_activation(self, name, layer=-1, sublayer_type=None):
        """The activation `name` (shorthand, as cache[name, l]) of layers 0 … layer-1 stacked on a new
        axis 0 (layer=-1: every layer): float32 [n_layers, …]."""
        last = self._stop("stack_activation", layer)
        return _np.stack([_np.asarray(self[name, l, sublayer_type]) for l in range(last)])

    def accumulated_resid(self, layer=None, incl_mid=False, apply_ln=False, pos_slice=None, mlp_input=False,
                          return_labels=False):
        """The residual stream as layers 0 … layer read it: resid_pre of each (with incl_mid also the
        resid_mid of each layer below `layer`; with mlp_input that of `layer` itself, what its MLP reads)
        and, when layer is the last + 1 (None or -1: so), the last layer's resid_post — float32
        [components, …]; labels "0_pre", "0_mid", …, "final_post" (where attention and MLP run in
        parallel there is no resid_mid: the MLP reads resid_pre). pos_slice keeps those positions;
        apply_ln divides every component by the scale of the norm reading the residual at `layer` (the
        final norm for None; ln2 with mlp_input), as TransformerLens's logit lens does (float64)."""
        n = self._n_layers()
        last = self._stop("accumulated_resid", layer)
        parts, labels = [], []
        for l in range(last + 1):
            if l == n:
                parts.append(self["resid_post", n - 1])
                labels.append("final_post")
                continue
            parts.append(self["resid_pre", l])
            labels.append("%d_pre" % l)
            if ((incl_mid and l < last) or (mlp_input and l == last)) and not self.model.config["parallel_residual"]:
                parts.append(self["resid_mid", l])
                labels.append("%d_mid" % l)
        stack = _pos(_np.stack([_np.asarray(p) for p in parts]), pos_slice)
        if apply_ln:
            stack = self.apply_ln_to_stack(stack, last, mlp_input, pos_slice)
        return (stack, labels) if return_labels else stack

    def stack_head_results(self, layer=-1, return_labels=False, incl_remainder=False, pos_slice=None,
                           apply_ln=False):
        """Each head's output z[…, h, :] @ W_O[l, h] for the heads of layers 0 … layer-1 (layer=-1: all),
        computed in float32 from the cached hook_z: [n_layers · n_heads, …, T, d_model]; labels "L0H0",
        "L0H1", … with return_labels. hook_attn_out is a layer's sum plus b_O (on Gemma 2 that sum then
        passes the post-attention norm). incl_remainder adds "remainder", the residual at `layer` (what
        its ln1 reads; the final one for -1) minus the heads' sum; pos_slice and apply_ln as
        accumulated_resid's."""
        last = self._stop("stack_head_results", layer)
        parts, labels = self._head_results(last, pos_slice)
        return self._components(parts, labels, "stack_head_results", last, incl_remainder, pos_slice, apply_ln,
                                return_labels)

    def _head_results(self, last, pos_slice):
        """([z[…, h, :] @ W_O[l, h] for the heads of layers below `last`], their labels "L0H0", …)."""
        parts, labels = [], []
        for l in range(last):
            z = _pos(_np.asarray(self["z", l]), pos_slice, -3)  # [..., T, H, dh]
            W_O = self.model._m_weight("W_O", l)  # [H, dh, d]
            for h in range(W_O.shape[0]):
                parts.append(z[..., h, :] @ W_O[h])
                labels.append("L%dH%d" % (l, h))
        return parts, labels

    def _components(self, parts, labels, what, last, incl_remainder, pos_slice, apply_ln, return_labels):
        """The stack of per-component outputs (heads, neurons) below layer `last`: with incl_remainder also
        "remainder", the residual `last` reads minus their sum; apply_ln as the other stacks'."""
        if not parts:
            raise _usage("%s: no layers below layer %d" % (what, last))
        if incl_remainder:
            resid = _pos(self._norm_input(last, False), pos_slice)
            parts.append((resid.astype(_np.float64) - _np.sum(parts, axis=0, dtype=_np.float64)).astype(_np.float32))
            labels.append("remainder")
        stack = _np.stack(parts)
        if apply_ln:
            stack = self.apply_ln_to_stack(stack, last, False, pos_slice)
        return (stack, labels) if return_labels else stack

    def decompose_resid(self, layer=None, mlp_input=False, mode="all", apply_ln=False, pos_slice=None,
                        incl_embeds=True, return_labels=False):
        """The final residual stream (layer=None) or the one layer `layer` reads, split into what wrote it:
        "embed" (the token embedding, as the forward scales it) and "pos_embed" (learned positions: the rest
        of resid_pre 0; a rotary model has none), then each layer's "L_attn_out" and "L_mlp_out" (mode
        "attn" or "mlp": only those) — float32 [components, …, T, d_model] summing to that residual.
        mlp_input: the residual layer's MLP reads instead (its own attn_out added, unless attention and
        MLP run in parallel); pos_slice and apply_ln as accumulated_resid's."""
        if mode not in ("all", "attn", "mlp"):
            raise _usage("decompose_resid: mode must be 'all', 'attn' or 'mlp', got %r" % (mode,))
        last = self._stop("decompose_resid", layer)
        parts, labels = [], []
        if incl_embeds:
            parts, labels = self._embeds()
        kinds = [k for k in ("attn", "mlp") if mode in ("all", k) and not (k == "mlp" and self.model.cfg.attn_only)]
        for l in range(last):
            for kind in kinds:
                parts.append(_np.asarray(self["%s_out" % kind, l]))
                labels.append("%d_%s_out" % (l, kind))
        if mlp_input and last < self._n_layers() and "attn" in kinds and not self.model.config["parallel_residual"]:
            parts.append(_np.asarray(self["attn_out", last]))
            labels.append("%d_attn_out" % last)
        if not parts:
            raise _usage("decompose_resid: nothing to stack (no layers below %d and no embeddings)" % last)
        stack = _pos(_np.stack(parts), pos_slice)
        if apply_ln:
            stack = self.apply_ln_to_stack(stack, last, mlp_input, pos_slice)
        return (stack, labels) if return_labels else stack

    def _embeds(self):
        """[embed, pos_embed] (or [embed] on a rotary model), labels."""
        resid0 = _np.asarray(self["resid_pre", 0])
        if self.model.config["positions"] == "rotary":
            return [resid0], ["embed"]
        embed = self.model.W_E[self.tokens].astype(_np.float32)
        return [embed, (resid0 - embed).astype(_np.float32)], ["embed", "pos_embed"]

    def _norm_input(self, layer, mlp_input):
        """The residual the norm reads: the final one (layer None, -1 or n_layers), else layer's ln1 (resid_pre)
        or, with mlp_input, its ln2 (resid_mid; resid_pre where attention and MLP run in parallel)."""
        n = self._n_layers()
        if layer is None or layer == -1 or layer == n:
            return _np.asarray(self["resid_post", n - 1])
        l = self._layer(layer)
        if mlp_input and not self.model.config["parallel_residual"]:
            return _np.asarray(self["resid_mid", l])
        return _np.asarray(self["resid_pre", l])

    def apply_ln_to_stack(self, residual_stack, layer=None, mlp_input=False, pos_slice=None):
        """The components of a residual stream ([components, …, T, d_model], e.g. decompose_resid's) as the
        norm that reads it sees them, without its weight and bias: centred (LayerNorm) and divided by the
        norm's scale, sqrt(mean-square (or variance) + eps) of the residual in the cache, recomputed here in
        float64 (qkv's hooks hold no scale). Their sum is that norm's output before w and b. float64.
        pos_slice: the positions the stack holds (the scales are taken at those)."""
        x = _pos(self._norm_input(layer, mlp_input), pos_slice).astype(_np.float64)
        stack = _np.asarray(residual_stack, dtype=_np.float64)
        if stack.shape[1:] != x.shape:
            raise _usage("apply_ln_to_stack: the stack's components are %s, the residual they add to is %s" %
                         (stack.shape[1:], x.shape))
        if self.model.config["norm"] == "layernorm":
            stack = stack - stack.mean(-1, keepdims=True)
        return stack / self._scale_of(x)

    def logit_attrs(self, residual_stack, tokens, incorrect_tokens=None):
        """Each component's direct contribution to the logit of `tokens` (minus `incorrect_tokens`'s): the
        final norm applied (apply_ln_to_stack) and its weight (Gemma: 1 + w), dotted with W_U's column —
        float64 [components, …, T]. tokens: an id or a one-token text (at every position), or ids [.., T].
        Summed over decompose_resid's components, plus ln_final_b's part, it is the logit before any
        final soft-cap."""
        scaled = self.apply_ln_to_stack(residual_stack)
        w = self.model.ln_final_w.astype(_np.float64)
        if self.model.config["norm"] == "rmsnorm_plus_one":
            w = w + 1.0
        direction = self._unembed(tokens, w)
        if incorrect_tokens is not None:
            direction = direction - self._unembed(incorrect_tokens, w)
        return (scaled * direction).sum(-1)

    def _unembed(self, tokens, w):
        """w ⊙ W_U[:, tokens], the tokens' axes first: [d] or [.., T, d]."""
        from .grad import _token
        if isinstance(tokens, (str, int, _np.integer)):
            ids = _token(self.model, tokens, "logit_attrs")
        else:
            ids = _np.asarray(tokens)
        return _np.moveaxis(self.model.W_U[:, ids].astype(_np.float64), 0, -1) * w

    def remove_batch_dim(self):
        """The same cache with the leading batch axis of size 1 dropped from every array (a batch of one
        [1, T, …] -> [T, …]); qkv.Error when the batch is not one sequence."""
        if not self.batched:
            return self
        first = next(iter(self.values()))
        if first.shape[0] != 1:
            raise _usage("remove_batch_dim: the batch holds %d sequences, not 1" % first.shape[0])
        return ActivationCache({k: v[0] for k, v in self.items()}, self.model, self.tokens[0])
