"""The weights by TransformerLens's names, `model.cfg`, and the QK / OV circuits of a head.

Which arrays are views (no copy) and which are copies:
  * every array is read-only (`.copy()` to edit one); the model stays alive while an array views it;
  * a tensor the checkpoint stores as F32 (safetensors, llm.c .bin, an F32 GGUF) is viewed where it lies:
    W_Q, W_K, W_V, W_O, b_Q, b_K, b_V, b_O, W_in, W_gate, W_out, b_in, b_out, the norms' ln1_w, ln1_b,
    ln2_w, ln2_b, ln1_post_w, ln2_post_w of one layer, W_E, W_pos and W_U are strided windows over the
    stored tensor whatever the layout (GPT-2's c_attn thirds and
    Conv1D [in, out], NeoX's per-head interleave, Phi-3's stacked rows and gate_up_proj halves,
    separate q/k/v_proj);
  * the [n_layers, …] stacks are views when the layers lie one constant distance apart in memory (qkv's
    own files, any 2-layer model), else copies;
  * F16, BF16 and quantized GGUF tensors (every type qkv reads: Q8_0, Q4_0, Q2_K…Q6_K, …) are dequantized
    into float32 copies;
  * biases the model does not have (b_Q of Llama, b_U everywhere) are zeros, as in TransformerLens.
"""

import numpy as _np

from . import _qkv
from .factored import FactoredMatrix

_ACT_FN = {"gelu_tanh": "gelu_new", "gelu": "gelu", "swiglu": "silu", "geglu": "gelu_pytorch_tanh", "none": None}
_NORM = {"layernorm": "LN", "rmsnorm": "RMS", "rmsnorm_plus_one": "RMS"}


class Config(dict):
    """The architecture as a dict whose keys also read as attributes (`cfg.n_heads`, `cfg["n_heads"]`).

    qkv's own keys (model_type, d, n_layer, H, n_kv, head_dim, d_ff, norm, positions, …) and
    TransformerLens's: n_layers, n_heads, d_model, d_head, n_key_value_heads (an int for every model,
    = n_heads without grouped-query attention; TransformerLens leaves it None then), d_vocab, n_ctx,
    d_mlp (None when attention-only), act_fn (gelu_new, gelu, silu, gelu_pytorch_tanh), gated_mlp,
    normalization_type (LN or RMS; Gemma's RMS scales by 1 + w), positional_embedding_type (standard
    or rotary), rotary_dim (None with learned positions), rotary_base, eps, attn_only,
    parallel_attn_mlp. qkv's attn_scale is the multiplier of q·k (TransformerLens's is its inverse)."""

    def __getattr__(self, name):
        """cfg.key is cfg["key"]."""
        try:
            return self[name]
        except KeyError:
            raise AttributeError("cfg has no key %r" % name) from None


def _config(arch):
    """Config from qkv's architecture dict (Arch::to_json) plus TransformerLens's names."""
    c = Config(arch)
    rotary = arch["positions"] == "rotary"
    attn_only = arch["mlp"] == "none"
    c.update(n_layers=arch["n_layer"], n_heads=arch["H"], d_model=arch["d"], d_head=arch["head_dim"],
             n_key_value_heads=arch["n_kv"], d_vocab=arch["vocab_size"], n_ctx=arch["n_ctx"],
             d_mlp=None if attn_only else arch["d_ff"], act_fn=_ACT_FN[arch["mlp"]],
             gated_mlp=arch["mlp"] in ("swiglu", "geglu"), normalization_type=_NORM[arch["norm"]],
             positional_embedding_type="rotary" if rotary else "standard",
             rotary_dim=arch.get("rotary_dim") if rotary else None,
             rotary_base=arch.get("rope_theta") if rotary else None, eps=arch["norm_eps"],
             attn_only=attn_only, parallel_attn_mlp=arch["parallel_residual"])
    return c


def _read_only(a):
    """a, not writeable (views already are; copies are made so, so that a cached copy stays true)."""
    a.flags.writeable = False
    return a


def _weight_property(kind, doc):
    """A property reading weight `kind` once (views and copies alike are cached; all read-only)."""

    def get(self):
        cache = self.__dict__.setdefault("_weights", {})
        if kind not in cache:
            cache[kind] = _read_only(_qkv.weight(self._m, kind))
        return cache[kind]

    get.__doc__ = doc
    return property(get)


class WeightsMixin:
    """qkv.Model's weights (see this module's docstring for views and copies)."""

    W_Q = _weight_property("W_Q", "float32 [n_layers, n_heads, d_model, d_head]: q = u @ W_Q[l, h] + b_Q[l, h].")
    W_K = _weight_property("W_K", "float32 [n_layers, n_key_value_heads, d_model, d_head] (one per key/value head).")
    W_V = _weight_property("W_V", "float32 [n_layers, n_key_value_heads, d_model, d_head] (one per key/value head).")
    W_O = _weight_property("W_O", "float32 [n_layers, n_heads, d_head, d_model]: attn_out = Σ_h z[:, h] @ W_O[l, h] + b_O[l].")
    b_Q = _weight_property("b_Q", "float32 [n_layers, n_heads, d_head] (zeros when the model has no Q bias).")
    b_K = _weight_property("b_K", "float32 [n_layers, n_key_value_heads, d_head] (zeros without a K bias).")
    b_V = _weight_property("b_V", "float32 [n_layers, n_key_value_heads, d_head] (zeros without a V bias).")
    b_O = _weight_property("b_O", "float32 [n_layers, d_model] (zeros without an output bias).")
    W_in = _weight_property("W_in", "float32 [n_layers, d_model, d_mlp]: the MLP's up_proj / c_fc (qkv.Error on an "
                            "attention-only model).")
    W_gate = _weight_property("W_gate", "float32 [n_layers, d_model, d_mlp]: a gated MLP's gate_proj (SwiGLU, GeGLU): "
                              "post = act(u @ W_gate) · (u @ W_in + b_in); qkv.Error when the MLP is not gated.")
    W_out = _weight_property("W_out", "float32 [n_layers, d_mlp, d_model]: mlp_out = post @ W_out + b_out.")
    b_in = _weight_property("b_in", "float32 [n_layers, d_mlp] (zeros without an up bias).")
    b_out = _weight_property("b_out", "float32 [n_layers, d_model] (zeros without a down bias).")
    ln1_w = _weight_property("ln1_w", "float32 [n_layers, d_model], the weight of the norm before attention as stored "
                             "(TransformerLens's blocks.L.ln1.w; Gemma's forward scales by 1 + w).")
    ln1_b = _weight_property("ln1_b", "float32 [n_layers, d_model], its bias (zeros for RMSNorm).")
    ln2_w = _weight_property("ln2_w", "float32 [n_layers, d_model], the weight of the norm before the MLP "
                             "(blocks.L.ln2.w; qkv.Error on an attention-only model).")
    ln2_b = _weight_property("ln2_b", "float32 [n_layers, d_model], its bias (zeros for RMSNorm).")
    ln1_post_w = _weight_property("ln1_post_w", "float32 [n_layers, d_model], Gemma 2's norm of the attention output "
                                  "(blocks.L.ln1_post.w; scales by 1 + w); qkv.Error on other models.")
    ln2_post_w = _weight_property("ln2_post_w", "float32 [n_layers, d_model], Gemma 2's norm of the MLP output "
                                  "(blocks.L.ln2_post.w); qkv.Error on other models.")
    W_E = _weight_property("W_E", "float32 [d_vocab, d_model], the token embedding as stored (Gemma's forward scales it by √d_model).")
    W_pos = _weight_property("W_pos", "float32 [n_ctx, d_model], learned positions (qkv.Error on a rotary model).")
    W_U = _weight_property("W_U", "float32 [d_model, d_vocab]: logits = ln_final @ W_U + b_U (W_Eᵀ when tied).")
    b_U = _weight_property("b_U", "float32 [d_vocab] zeros (no family qkv runs has an unembedding bias).")
    ln_final_w = _weight_property("ln_final_w", "float32 [d_model], the final norm's weight as stored "
                                  "(TransformerLens's ln_final.w; Gemma's forward scales by 1 + w).")
    ln_final_b = _weight_property("ln_final_b", "float32 [d_model], the final norm's bias (zeros for RMSNorm).")

    @property
    def cfg(self):
        """The architecture with TransformerLens's names beside qkv's own (see qkv.weights.Config)."""
        return _config(self._m.config)

    def state_dict(self):
        """Every tensor by the checkpoint's own name, as stored (F32: read-only views; others dequantized)."""
        return {n: _read_only(a) for n, a in _qkv.state_dict(self._m).items()}

    def weight_dtypes(self):
        """Every tensor's stored dtype by name ("F32", "BF16", "Q4_K", …): which W_* are views."""
        return dict(_qkv.weight_dtypes(self._m))

    def _head(self, layer, head):
        """(layer, head, its key/value head) checked against the model."""
        c = self._m.config
        layer, head = int(layer), int(head)
        if not 0 <= layer < c["n_layer"]:
            from . import _usage
            raise _usage("layer %d is outside [0, %d)" % (layer, c["n_layer"]))
        if not 0 <= head < c["H"]:
            from . import _usage
            raise _usage("head %d is outside [0, %d)" % (head, c["H"]))
        return layer, head, head // (c["H"] // c["n_kv"])

    def QK(self, layer, head, offset=0):
        """The QK circuit of a head, W_Q · W_Kᵀ [d_model, d_model], as a FactoredMatrix (A = W_Q [d_model,
        d_head], B = W_Kᵀ of its key/value head): the score of query u_i and key u_j is u_i · QK · u_jᵀ
        times the attention scale, biases left out (as TransformerLens's QK).

        Rotary models: the circuit at a query–key distance `offset` = i − j ≥ 0, W_Q · R(offset) · W_Kᵀ with
        R the model's own rotation (rows of W_Q rotated to position `offset`); offset 0 is the unrotated
        W_Q · W_Kᵀ. Learned positions: the offset does not enter."""
        layer, head, g = self._head(layer, head)
        Wq = self._m_weight("W_Q", layer)[head]
        if self._m.config["positions"] == "rotary" and int(offset) != 0:
            Wq = _qkv.rotate(self._m, _np.ascontiguousarray(Wq), int(offset))
        elif int(offset) < 0:
            from . import _usage
            raise _usage("offset %d: a query–key distance is >= 0" % int(offset))
        return FactoredMatrix(Wq, self._m_weight("W_K", layer)[g].T)

    def OV(self, layer, head):
        """The OV circuit of a head, W_V · W_O [d_model, d_model], as a FactoredMatrix (A = W_V of its
        key/value head [d_model, d_head], B = W_O [d_head, d_model]): what attending to a position writes."""
        layer, head, g = self._head(layer, head)
        return FactoredMatrix(self._m_weight("W_V", layer)[g], self._m_weight("W_O", layer)[head])

    def tokens_to_residual_directions(self, tokens):
        """The residual directions whose dot product with the final norm's output is each token's logit:
        W_U[:, token] (TransformerLens's name) — float32 [d_model] for one token (an id or a one-token
        text), [..., d_model] for ids [...] (the final norm's weight is not folded in; see logit_attrs)."""
        from .grad import _token
        if isinstance(tokens, (str, int, _np.integer)):
            return _np.array(self.W_U[:, _token(self, tokens, "tokens_to_residual_directions")])
        ids = _np.asarray(tokens)
        if ids.dtype.kind not in "iu" or ((ids < 0) | (ids >= self.W_U.shape[1])).any():
            from . import _usage
            raise _usage("tokens_to_residual_directions: expected token ids in [0, %d), got %r"
                         % (self.W_U.shape[1], tokens))
        return _np.moveaxis(self.W_U[:, ids], 0, -1)

    def accumulated_bias(self, layer, mlp_input=False, include_mlp_biases=True):
        """The sum of the biases the blocks below `layer` add to the residual: b_O and (with
        include_mlp_biases) b_out of layers 0 … layer-1, plus layer's b_O with mlp_input (what its MLP
        reads; not in GPT-NeoX's parallel block, whose MLP reads resid_pre) — float32 [d_model], as
        TransformerLens's. On Gemma 2 the outputs pass a post-norm first, so there is no such sum: qkv.Error."""
        c = self.cfg
        if not 0 <= int(layer) <= c.n_layers:
            from . import _usage
            raise _usage("accumulated_bias: layer %d is outside [0, %d]" % (int(layer), c.n_layers))
        if c.post_norms:
            from . import _usage
            raise _usage("accumulated_bias: this model's post-norms rescale each block's output, bias included")
        total = _np.zeros(c.d_model, _np.float64)
        own = mlp_input and int(layer) < c.n_layers and not c.parallel_attn_mlp  # a parallel MLP reads resid_pre
        for l in range(int(layer) + (1 if own else 0)):
            total += self._m_weight("b_O", l)
            if include_mlp_biases and not c.attn_only and l < int(layer):
                total += self._m_weight("b_out", l)
        return total.astype(_np.float32)

    def _m_weight(self, kind, layer):
        """One layer's weight (a view where the stacked one would be a copy)."""
        return _read_only(_qkv.weight(self._m, kind, int(layer)))
