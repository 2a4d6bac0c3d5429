"""Metrics for gradients with respect to activations (`model.run_with_cache(tokens, incl_bwd=True,
metric=...)`, `qkv dump --grad`): each is a scalar function of the logits [T, vocab] with its gradient.

    qkv.logit_diff(answer, wrong, position=-1)   logits[position, answer] − logits[position, wrong]
    qkv.loss(positions=None)                     mean next-token loss of the input at those positions
                                                 (None: every position but the last)
    f(logits) -> (value, dvalue_dlogits)         any function of your own, in NumPy

The first two run inside the engine; a callable is called once with the logits (float32 [T, vocab], a
copy) and must return the value and an array of the logits' shape. Every metric object is also such a
callable, so `qkv.logit_diff(5, 7)(logits)` gives (value, gradient) in NumPy.
"""

import numpy as _np


def _usage(message):
    from . import _usage as u
    return u(message)


class logit_diff:
    """logits[position, answer] − logits[position, wrong] (position −1: the last; answer and wrong are token
    ids or texts that the model's tokenizer makes one token)."""

    def __init__(self, answer, wrong, position=-1):
        """answer, wrong: token ids or one-token texts; position: an index into the tokens (negative from the end)."""
        self.answer, self.wrong, self.position = answer, wrong, int(position)

    def __repr__(self):
        """As constructed."""
        return "qkv.logit_diff(%r, %r, position=%d)" % (self.answer, self.wrong, self.position)

    def _spec(self, model):
        """The engine's description: token texts made ids with the model's tokenizer."""
        return ("logit_diff", _token(model, self.answer, "answer"), _token(model, self.wrong, "wrong"), self.position)

    def __call__(self, logits):
        """(value, dvalue/dlogits) in NumPy, for integer answer and wrong."""
        logits = _np.asarray(logits)
        g = _np.zeros(logits.shape, _np.float32)
        g[self.position, self.answer] += 1
        g[self.position, self.wrong] -= 1
        return float(logits[self.position, self.answer]) - float(logits[self.position, self.wrong]), g


class loss:
    """The mean next-token cross-entropy of the input itself at `positions` (None: every position but the
    last; position p predicts token p + 1)."""

    def __init__(self, positions=None):
        """positions: None, or a list of positions in [0, T − 1)."""
        self.positions = None if positions is None else [int(p) for p in _np.atleast_1d(positions)]

    def __repr__(self):
        """As constructed."""
        return "qkv.loss(positions=%r)" % (self.positions,)

    def _spec(self, model):
        """The engine's description."""
        return ("loss", self.positions)


def _token(model, t, what):
    """A token id from an id or a one-token text."""
    if isinstance(t, str):
        ids = model.tokenize(t)
        if len(ids) != 1:
            raise _usage("%s: %r is %d tokens, not one (give a token id instead)" % (what, t, len(ids)))
        return int(ids[0])
    if not isinstance(t, (int, _np.integer)):
        raise _usage("%s: expected a token id or a one-token text, got %r" % (what, t))
    return int(t)


def _metric_spec(model, metric):
    """What _qkv.grads takes for a metric object or a callable."""
    if metric is None:
        raise _usage("incl_bwd=True needs metric=: qkv.logit_diff(A, B), qkv.loss() or f(logits) -> (value, grad)")
    if hasattr(metric, "_spec"):
        return metric._spec(model)
    if callable(metric):
        return ("callable", metric)
    raise _usage("metric: expected qkv.logit_diff, qkv.loss or a callable, got %r" % (metric,))
