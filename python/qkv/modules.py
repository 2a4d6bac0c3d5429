"""TransformerLens's module tree over a qkv.Model, so code that walks it runs unchanged:

    model.blocks[0].attn.W_Q                    # = model.W_Q[0] (a view where that is one)
    model.blocks[-1].ln2.w, model.ln_final.b    # the norms' weights and biases
    model.blocks[1].attn.hook_z.add_hook(fn)    # = model.add_hook("blocks.1.attn.hook_z", fn)
    model.hook_dict["blocks.0.mlp.hook_post"].remove_hooks()

Each node reads its weights from the model's stacked arrays (the layer's slice) and names its hook points
as ModelHookPoint: the hook's name (a HookPoint, the str hooks receive) bound to the model, with
TransformerLens's add_hook and remove_hooks. Nothing here holds state of its own: hooks live on the model
(qkv/added_hooks.py), weights in the checkpoint (qkv/weights.py)."""

from .hooks import HookPoint


class ModelHookPoint(HookPoint):
    """A hook point of one model: its name (HookPoint: a str with .name and .layer()) and add_hook /
    remove_hooks, which add to and remove from the model's hooks (model.add_hook, model.reset_hooks)."""

    def __new__(cls, name, model):
        p = super().__new__(cls, name)
        p._model = model
        return p

    def add_hook(self, hook, dir="fwd", is_permanent=False, prepend=False):
        """model.add_hook(this name, hook, dir, is_permanent, prepend)."""
        self._model.add_hook(str(self), hook, dir=dir, is_permanent=is_permanent, prepend=prepend)

    def remove_hooks(self, dir="fwd", including_permanent=False):
        """Removes the hooks added at this point (the permanent ones too with including_permanent=True)."""
        self._model._remove_added(str(self), dir, including_permanent)


class Module:
    """One node of the tree (a block, its attn, mlp, ln1, …): `weights` maps an attribute to the model's
    stacked weight and the layer to take (or None for a whole-model weight); attributes hook_* are the
    model's hook points under `prefix`; `children` are the nodes below."""

    def __init__(self, model, prefix, weights=(), children=()):
        self._model, self._prefix = model, prefix
        self._weights = dict(weights)
        self._children = dict(children)

    def __repr__(self):
        return "<qkv module %s>" % (self._prefix.rstrip(".") or "model")

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        if name in self._children:
            return self._children[name]
        if name in self._weights:
            kind, layer = self._weights[name]
            w = getattr(self._model, kind)
            return w if layer is None else w[layer]
        if name.startswith("hook_") and self._prefix + name in self._model._all_names:
            return ModelHookPoint(self._prefix + name, self._model)
        raise AttributeError("%s has no %r: it has %s" % (self, name, ", ".join(self.__dir__()) or "nothing"))

    def __dir__(self):
        hooks = [n[len(self._prefix):] for n in self._model._all_names
                 if n.startswith(self._prefix) and "." not in n[len(self._prefix):]]
        return list(self._children) + list(self._weights) + hooks

    def hook_points(self):
        """The ModelHookPoints at and below this node, in forward order."""
        return [ModelHookPoint(n, self._model) for n in self._model._all_names if n.startswith(self._prefix)]


_ATTN = ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O")
_MLP = ("W_in", "W_gate", "W_out", "b_in", "b_out")


def block(model, layer):
    """blocks[layer]: attn, mlp (not on an attention-only model), ln1, ln2 (with an MLP), Gemma 2's
    ln1_post and ln2_post, and the block's own hook points (hook_resid_pre, hook_attn_out, …)."""
    c = model.config
    p = "blocks.%d." % layer

    def node(name, weights):
        return name, Module(model, p + name + ".", weights)

    children = [node("attn", {k: (k, layer) for k in _ATTN}), node("ln1", {"w": ("ln1_w", layer), "b": ("ln1_b", layer)})]
    if c["mlp"] != "none":
        children += [node("mlp", {k: (k, layer) for k in _MLP if k != "W_gate" or model.cfg.gated_mlp}),
                     node("ln2", {"w": ("ln2_w", layer), "b": ("ln2_b", layer)})]
    if model.cfg.post_norms:
        children += [node("ln1_post", {"w": ("ln1_post_w", layer)}), node("ln2_post", {"w": ("ln2_post_w", layer)})]
    return Module(model, p, children=children)


class ModulesMixin:
    """qkv.Model's blocks, embed, pos_embed, unembed, ln_final and hook_dict (TransformerLens's names)."""

    @property
    def blocks(self):
        """The blocks as TransformerLens's modules: blocks[l].attn.W_Q, .ln1.w, .mlp.hook_post, … (a tuple)."""
        if "_blocks" not in self.__dict__:
            self._blocks = tuple(block(self, l) for l in range(int(self.config["n_layer"])))
        return self._blocks

    @property
    def embed(self):
        """embed.W_E (the token embedding)."""
        return Module(self, "embed.", {"W_E": ("W_E", None)})

    @property
    def pos_embed(self):
        """pos_embed.W_P (learned positions; qkv.Error on a rotary model)."""
        return Module(self, "pos_embed.", {"W_P": ("W_pos", None)})

    @property
    def unembed(self):
        """unembed.W_U, unembed.b_U."""
        return Module(self, "unembed.", {"W_U": ("W_U", None), "b_U": ("b_U", None)})

    @property
    def ln_final(self):
        """ln_final.w, ln_final.b, ln_final.hook_normalized."""
        return Module(self, "ln_final.", {"w": ("ln_final_w", None), "b": ("ln_final_b", None)})

    @property
    def hook_dict(self):
        """Every hook point by name, as ModelHookPoints (TransformerLens's model.hook_dict)."""
        return {n: ModelHookPoint(n, self) for n in self._all_names}
