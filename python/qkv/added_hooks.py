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

from . import hooks as _hooks


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
            raise _usage("add_hook: dir=%r: %s" % (dir, _hooks.NO_BACKWARD))
        names = _hooks.points(self, name, hook, "add_hook", known_only=True)
        new = [_Added(n, hook, bool(is_permanent), self._hook_level) for n in names]
        self._added = new + list(self._added) if prepend else list(self._added) + new

    def add_perma_hook(self, name, hook, dir="fwd"):
        """add_hook(name, hook, dir, is_permanent=True)."""
        self.add_hook(name, hook, dir=dir, is_permanent=True)

    def reset_hooks(self, including_permanent=False):
        """Removes the added hooks (the permanent ones too with including_permanent=True)."""
        self._added = [h for h in self._added if h.permanent and not including_permanent]

    def _remove_added(self, name, dir, including_permanent):
        """Removes the hooks added at hook point `name` (ModelHookPoint.remove_hooks)."""
        if dir not in ("fwd", "both"):
            raise _usage("remove_hooks: dir=%r: %s" % (dir, _hooks.NO_BACKWARD))
        self._added = [h for h in self._added if h.name != name or (h.permanent and not including_permanent)]

    @_contextlib.contextmanager
    def hooks(self, fwd_hooks=(), bwd_hooks=(), reset_hooks_end=True):
        """A `with` block in which fwd_hooks [(name or filter, fn), ...] are added; on leaving it (also by
        an exception) they and every other non-permanent hook added inside the block are removed, unless
        reset_hooks_end=False. Yields the model."""
        if bwd_hooks:
            raise _usage("hooks: bwd_hooks: " + _hooks.NO_BACKWARD)
        pairs = [_hooks.pair(h, "hooks: fwd_hooks") for h in fwd_hooks]
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
