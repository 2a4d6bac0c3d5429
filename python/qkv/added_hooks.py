"""Hooks that stay on the model (TransformerLens's add_hook, reset_hooks, hooks()): every forward of the
model runs them — model(tokens), run_with_hooks (before the call's own fwd_hooks), run_with_cache (the
cache then holds what the hooks left) and generate (at every step) — until they are removed.

    model.add_hook("blocks.0.attn.hook_z", zero_head)          # a name, or a filter name -> bool
    with model.hooks(fwd_hooks=[(lambda n: n.endswith("hook_v"), scale)]):
        logits = model(tokens)                                   # hooked; removed on leaving the block
    model.reset_hooks()                                          # all but the permanent ones

The experiments that run the engine's own forward (qkv.patch, attribute, sweep, heads, tour, …) and
run_with_cache(incl_bwd=True), whose gradients come from the training forward, cannot run Python hooks:
they raise qkv.Error while any are on the model instead of silently leaving them out."""

import contextlib as _contextlib


def _usage(message):
    from . import _usage as u
    return u(message)


class _Added:
    """One added hook: its hook point's name, the function, permanent or not, and the hooks() block
    (nesting depth, 0 outside any) it was added in."""

    __slots__ = ("name", "fn", "permanent", "level")

    def __init__(self, name, fn, permanent, level):
        self.name, self.fn, self.permanent, self.level = name, fn, permanent, level


class HooksMixin:
    """qkv.Model's added hooks; needs self._all_names (every hook point of the model, in forward order)."""

    _added = ()      # the added hooks (_Added) in the order they run: per hook point, prepended first
    _hook_level = 0  # how many hooks() blocks are open

    def add_hook(self, name, hook, dir="fwd", is_permanent=False, prepend=False):
        """Adds fn(activation, hook) at hook point `name` (or at every point a filter name -> bool accepts)
        to every later forward of this model, as run_with_hooks runs it. is_permanent: reset_hooks()
        keeps it unless including_permanent=True. prepend: it runs before the hooks already there.
        dir must be "fwd": qkv has no backward hooks (run_with_cache(incl_bwd=True) gives gradients)."""
        if dir != "fwd":
            raise _usage("add_hook: dir=%r: qkv runs forward hooks only (gradients at every hook point come "
                         "from run_with_cache(incl_bwd=True))" % (dir,))
        if not callable(hook):
            raise _usage("add_hook: the function for %r is not callable: %r" % (name, hook))
        if callable(name):
            names = [n for n in self._all_names if name(n)]
            if not names:
                raise _usage("add_hook: the filter %r accepts none of the model's hook points (model.hook_names)"
                             % (name,))
        elif isinstance(name, str) and name in self._all_names:
            names = [name]
        else:
            raise _usage("add_hook: %r is not a hook point of this model (model.hook_names lists them)" % (name,))
        new = [_Added(n, hook, bool(is_permanent), self._hook_level) for n in names]
        self._added = new + list(self._added) if prepend else list(self._added) + new

    def add_perma_hook(self, name, hook, dir="fwd"):
        """add_hook(name, hook, dir, is_permanent=True)."""
        self.add_hook(name, hook, dir=dir, is_permanent=True)

    def reset_hooks(self, including_permanent=False):
        """Removes the added hooks (the permanent ones too with including_permanent=True)."""
        self._added = [h for h in self._added if h.permanent and not including_permanent]

    @_contextlib.contextmanager
    def hooks(self, fwd_hooks=(), bwd_hooks=(), reset_hooks_end=True):
        """A `with` block in which fwd_hooks [(name or filter, fn), ...] are added; on leaving it (also by
        an exception) they and every other non-permanent hook added inside the block are removed, unless
        reset_hooks_end=False. Yields the model."""
        if bwd_hooks:
            raise _usage("hooks: bwd_hooks: qkv runs forward hooks only (gradients at every hook point come "
                         "from run_with_cache(incl_bwd=True))")
        pairs = _pairs(fwd_hooks, "hooks")
        self._hook_level += 1
        level = self._hook_level
        try:
            for name, fn in pairs:
                self.add_hook(name, fn)
            yield self
        finally:
            self._hook_level -= 1
            if reset_hooks_end:
                self._added = [h for h in self._added if h.permanent or h.level < level]

    def _with_added(self, fwd_hooks):
        """The added hooks as (name, fn) pairs, followed by fwd_hooks (run_with_hooks' and generate's own)."""
        return [(h.name, h.fn) for h in self._added] + list(fwd_hooks)

    def _no_added_hooks(self, what):
        """qkv.Error when hooks are on the model: `what` runs the engine's own forward, which cannot run them."""
        if self._added:
            raise _usage("%s runs the engine's own forward, which cannot run Python hooks, and %d hook(s) are on "
                         "this model (%s): remove them first with model.reset_hooks(including_permanent=True)"
                         % (what, len(self._added), ", ".join(sorted({h.name for h in self._added}))))


def _pairs(fwd_hooks, where):
    """fwd_hooks checked as (name, fn) pairs (qkv.Error naming `where` otherwise)."""
    pairs = []
    for h in fwd_hooks:
        if not isinstance(h, (tuple, list)) or len(h) != 2:
            raise _usage("%s: fwd_hooks: expected (name, fn) pairs, got %r" % (where, h))
        pairs.append(tuple(h))
    return pairs
