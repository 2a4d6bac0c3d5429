"""Python hooks as the engine runs them (run_with_hooks, generate): the (name, fn) pairs checked and
expanded, and the object a hook gets for its name.

A pair's name is a hook point's name or, as in TransformerLens, a filter: a predicate over the model's
hook names (`lambda name: name.endswith("hook_z")`), which hooks every point it accepts. fn is called as
fn(activation, hook), where `hook` is a HookPoint: the name itself (a str: `hook == "blocks.0.attn.hook_q"`,
`hook.endswith(...)`) with TransformerLens's HookPoint attributes `hook.name` and `hook.layer()`, so hook
functions written for either library run unchanged."""

import re as _re

_BLOCK = _re.compile(r"^blocks\.(\d+)\.")
# Why bwd_hooks and add_hook(dir="bwd") are refused.
NO_BACKWARD = "qkv runs forward hooks only (gradients at every hook point come from run_with_cache(incl_bwd=True))"


def _usage(message):
    from . import _usage as u
    return u(message)


class HookPoint(str):
    """A hook point's name as hooks receive it: a str, with TransformerLens's `.name` and `.layer()`."""

    @property
    def name(self):
        """The full hook name (TransformerLens's HookPoint.name)."""
        return str(self)

    def layer(self):
        """The block index of a `blocks.L.…` hook (TransformerLens's HookPoint.layer()); qkv.Error for the
        hooks outside the blocks (ln_final.hook_normalized, logits)."""
        m = _BLOCK.match(self)
        if not m:
            raise _usage("%s is not inside a block: it has no layer" % self)
        return int(m.group(1))


def engine_hooks(model, fwd_hooks, wrap_activation):
    """[(hook name, call(arr, name)), ...] for the engine from [(name or filter, fn), ...]: each fn gets
    wrap_activation(arr, name) and the HookPoint. qkv.Error for a malformed pair, a fn that is not
    callable, or a filter that accepts no hook point of this model."""
    hooks = []
    for h in fwd_hooks:
        name, fn = pair(h, "fwd_hooks")
        hooks.extend((n, _call(fn, wrap_activation)) for n in points(model, name, fn, "fwd_hooks"))
    return hooks


def pair(h, where):
    """h as a (name, fn) pair; qkv.Error naming `where` for anything else."""
    if not isinstance(h, (tuple, list)) or len(h) != 2:
        raise _usage("%s: expected (name, fn) pairs, got %r" % (where, h))
    return tuple(h)


def points(model, name, fn, where, known_only=False):
    """The hook point names fn goes to: `name`, or every point a filter accepts. qkv.Error naming `where`
    when fn is not callable, a filter accepts none, or (known_only) `name` is not one of the model's
    (otherwise the engine says so when it runs)."""
    if not callable(fn):
        raise _usage("%s: the function for %r is not callable: %r" % (where, name, fn))
    if callable(name):
        names = [n for n in model._all_names if name(n)]
        if not names:
            raise _usage("%s: the filter %r accepts none of the model's hook points (model.hook_names)"
                         % (where, name))
        return names
    if known_only and name not in model._all_names:
        raise _usage("%s: %r is not a hook point of this model (model.hook_names lists them)" % (where, name))
    return [str(name)]


def _call(fn, wrap_activation):
    """The engine's callback for fn."""
    def call(arr, n):
        return fn(wrap_activation(arr, n), HookPoint(n))
    return call
