"""What the cache derives rather than holds, as TransformerLens's ActivationCache offers it: the norms'
scales (cache["blocks.0.ln1.hook_scale"], cache["scale"]), each head's result
(compute_head_results: blocks.L.attn.hook_result), each MLP neuron's result (get_neuron_results,
stack_neuron_results). qkv's engine has no hook at these points — its norms and its W_O / W_out products
run fused — so they are computed here from the cached hooks and the weights: a scale in float64 from the
residual its norm reads (stored float32), a head's result z[…, h, :] @ W_O[l, h] and a neuron's
post[…, n] · W_out[l, n] in float32. They are read-only facts about the run: editing them changes nothing."""

import re as _re

import numpy as _np

_SCALE = _re.compile(r"^(?:blocks\.(\d+)\.(ln1|ln2)|ln_final)\.hook_scale$")


def _usage(message):
    from . import _usage as u
    return u(message)


class ResultsMixin:
    """ActivationCache's derived entries; needs cache.py's _norm_input, _layer, _stop and _components."""

    def _scale_of(self, x):
        """The norm's scale of rows x: sqrt(variance + eps) (LayerNorm) or sqrt(mean square + eps) (RMSNorm),
        float64 [..., 1]."""
        x = _np.asarray(x, dtype=_np.float64)
        eps = float(self.model.config["norm_eps"])
        if self.model.config["norm"] == "layernorm":
            return _np.sqrt(x.var(-1, keepdims=True) + eps)
        return _np.sqrt((x * x).mean(-1, keepdims=True) + eps)

    def _derived(self, full):
        """The derived entry `full` (a norm's hook_scale), or None."""
        m = _SCALE.match(full)
        if m:
            layer = None if m.group(1) is None else int(m.group(1))
            if layer is not None and not layer < self._n_layers():
                return None
            if m.group(2) == "ln2" and self.model.cfg.attn_only:
                return None
            return self._scale_of(self._norm_input(layer, m.group(2) == "ln2")).astype(_np.float32)
        return None

    def compute_head_results(self):
        """Adds blocks.L.attn.hook_result, each head's output z[…, h, :] @ W_O[l, h] (float32 [..., T,
        n_heads, d_model]; hook_attn_out is its sum over heads plus b_O, before Gemma 2's post-norm),
        for every layer, as TransformerLens's compute_head_results does."""
        n, H = self._n_layers(), self.model.cfg.n_heads
        parts, _ = self._head_results(n, None)  # layer by layer, head by head: [..., T, d_model] each
        for l in range(n):
            self["blocks.%d.attn.hook_result" % l] = _np.stack(parts[l * H:(l + 1) * H], axis=-2).astype(_np.float32)

    def get_neuron_results(self, layer, neuron_slice=None, pos_slice=None):
        """Each MLP neuron's output post[…, n] · W_out[layer, n]: float32 [..., T, neurons, d_model];
        hook_mlp_out is its sum over all neurons plus b_out (before Gemma 2's post-norm). neuron_slice: an
        int, a (start, stop[, step]) tuple, a slice or a list of neurons; pos_slice as the stacks'."""
        from .cache import _pos
        l = self._layer(layer)
        if self.model.cfg.attn_only:
            raise _usage("get_neuron_results: this model is attention-only: it has no MLP neurons")
        post = _pos(_np.asarray(self["post", l]), pos_slice)  # [..., T, d_mlp]
        neurons = _neurons(neuron_slice, post.shape[-1])
        W_out = _np.asarray(self.model._m_weight("W_out", l))[neurons]  # [n, d]
        return (post[..., neurons, None] * W_out).astype(_np.float32)

    def stack_neuron_results(self, layer, pos_slice=None, neuron_slice=None, return_labels=False,
                             incl_remainder=False, apply_ln=False):
        """The neurons of layers 0 … layer-1 (layer=-1: all) stacked: float32 [layers · neurons, ..., T,
        d_model], labels "L0N0", "L0N1", …; neuron_slice picks the same neurons in every layer.
        incl_remainder adds "remainder", the residual at `layer` minus the neurons' sum; apply_ln as
        the other stacks' (float64 then). Large: every neuron is a [T, d_model] array."""
        last = self._stop("stack_neuron_results", layer)
        parts, labels = [], []
        ids = _np.arange(self.model.cfg.d_mlp)[_neurons(neuron_slice, self.model.cfg.d_mlp)]
        for l in range(last):
            r = self.get_neuron_results(l, neuron_slice, pos_slice)  # [..., T, n, d]
            parts.extend(_np.moveaxis(r, -2, 0))
            labels.extend("L%dN%d" % (l, n) for n in _np.atleast_1d(ids))
        return self._components(parts, labels, "stack_neuron_results", last, incl_remainder, pos_slice, apply_ln,
                                return_labels)

    def get_full_resid_decomposition(self, layer=None, mlp_input=False, expand_neurons=True, apply_ln=False,
                                     pos_slice=None, return_labels=False):
        """The residual stream `layer` reads (None: the final one) split as finely as it goes, as
        TransformerLens's: every head's result below it ("L0H0", …; with mlp_input also `layer`'s own heads,
        unless attention and MLP run in parallel), every neuron's result ("L0N0", …; or each layer's
        "L_mlp_out" with expand_neurons=False), "embed", "pos_embed" (learned positions) and "bias" (the
        accumulated b_O and b_out) — float32 [components, ..., T, d_model] summing to that residual;
        apply_ln and pos_slice as the other stacks'. qkv.Error on Gemma 2 (its post-norms rescale each
        block's output, so the outputs do not split into heads and neurons)."""
        from .cache import _pos
        n = self._n_layers()
        last = n if layer is None or layer == -1 else self._stop("get_full_resid_decomposition", layer)
        if self.model.cfg.post_norms:
            raise _usage("get_full_resid_decomposition: this model's post-norms rescale each block's output")
        own = mlp_input and last < n and not self.model.cfg.parallel_attn_mlp
        parts, labels = [], []
        heads, head_labels = self._head_results(last + (1 if own else 0), pos_slice)
        parts += heads
        labels += head_labels
        for l in range(last if not self.model.cfg.attn_only else 0):
            if expand_neurons:
                r = _np.moveaxis(self.get_neuron_results(l, pos_slice=pos_slice), -2, 0)
                parts.extend(r)
                labels.extend("L%dN%d" % (l, i) for i in range(r.shape[0]))
            else:
                parts.append(_pos(_np.asarray(self["mlp_out", l]), pos_slice) - self.model.b_out[l])
                labels.append("%d_mlp_out" % l)
        embeds, embed_labels = self._embeds()
        parts += [_pos(e, pos_slice) for e in embeds]
        labels += embed_labels
        bias = self.model.accumulated_bias(last, mlp_input=mlp_input)
        parts.append(_np.broadcast_to(bias, parts[-1].shape).astype(_np.float32))
        labels.append("bias")
        stack = _np.stack(parts)
        if apply_ln:
            stack = self.apply_ln_to_stack(stack, last, mlp_input, pos_slice)
        return (stack, labels) if return_labels else stack


def _neurons(neuron_slice, d_mlp):
    """neuron_slice as an index that keeps the neuron axis: None all, an int [n:n+1], a (start, stop[,
    step]) tuple or a slice, a list; qkv.Error outside [0, d_mlp)."""
    if neuron_slice is None:
        return slice(None)
    if isinstance(neuron_slice, tuple):
        return slice(*neuron_slice)
    if isinstance(neuron_slice, slice):
        return neuron_slice
    ids = _np.atleast_1d(_np.asarray(neuron_slice))
    if ids.dtype.kind not in "iu" or ids.ndim != 1:
        raise _usage("neuron_slice %r: expected an int, a tuple, a slice or a list of neurons" % (neuron_slice,))
    if ((ids < -d_mlp) | (ids >= d_mlp)).any():
        raise _usage("neuron_slice %r: the MLP has %d neurons" % (neuron_slice, d_mlp))
    return ids
