"""Batches: several sequences padded to one length, with the attention mask that says which tokens are real.

    tokens, mask = model.to_tokens(["When Mary and John", "The cat"], padding_side="left")
    logits, cache = model.run_with_cache(tokens, attention_mask=mask)   # logits [B, T, V], hook_q [B, T, H, dh]

The engine runs the batch as one forward: every weight's product over all B·T rows at once, attention per
sequence. Positions come from the mask (a left-padded sequence's first real token is position 0) and a
query sees only keys of its own run of real tokens, so each sequence's real positions equal its own
single-sequence run (to rounding: the products have other shapes). Padding positions hold values of no
meaning (they attend among themselves); each sequence's real tokens must be one contiguous run.
"""

import numpy as _np


def _usage(message):
    from . import _usage as u
    return u(message)


def to_tokens(model, texts, padding_side="right", bos=None, pad_id=0):
    """(tokens int32 [B, T], attention_mask bool [B, T]) from a list of texts or of token-id lists (a single
    text or id list: B = 1). bos as model.tokenize's (None/False: none, True: <|endoftext|>, an int: that
    id). Padding (`pad_id`, masked out) goes on the right or the left."""
    if padding_side not in ("right", "left"):
        raise _usage("padding_side: %r is not 'right' or 'left'" % (padding_side,))
    if isinstance(texts, str) or (len(texts) > 0 and isinstance(texts[0], (int, _np.integer))):
        texts = [texts]
    if len(texts) == 0:
        raise _usage("to_tokens: no sequences")
    seqs = []
    for t in texts:
        if isinstance(t, str):
            ids = model.tokenize(t, bos=bos)
        else:
            ids = _np.asarray(t, dtype=_np.int64).reshape(-1)
            if not (bos is None or bos is False):
                ids = _np.concatenate([model.tokenize("", bos=bos).astype(_np.int64), ids])
        if len(ids) == 0:
            raise _usage("to_tokens: sequence %d has no tokens" % len(seqs))
        seqs.append(_np.asarray(ids, dtype=_np.int32))
    T = max(len(s) for s in seqs)
    tokens = _np.full((len(seqs), T), pad_id, dtype=_np.int32)
    mask = _np.zeros((len(seqs), T), dtype=bool)
    for b, s in enumerate(seqs):
        lo = 0 if padding_side == "right" else T - len(s)
        tokens[b, lo:lo + len(s)] = s
        mask[b, lo:lo + len(s)] = True
    return tokens, mask


def forward_tokens(model, tokens, attention_mask):
    """(ids int64 [T] or [B, T], mask or None, labels for the arrays) for the forward calls: a text is one
    sequence; a list of texts is a right-padded batch with its mask; arrays as given (2-D: a batch)."""
    from . import _ids
    if isinstance(tokens, (list, tuple)) and len(tokens) > 0 and isinstance(tokens[0], str):
        if attention_mask is not None:
            raise _usage("attention_mask: a list of texts makes its own; give token ids [B, T] with a mask instead")
        ids, attention_mask = to_tokens(model, tokens)
        return ids.astype(_np.int64), attention_mask, None
    if not isinstance(tokens, str) and _np.ndim(tokens) == 2:
        a = _np.asarray(tokens)
        if not _np.issubdtype(a.dtype, _np.integer):
            raise _usage("tokens: expected integer token ids, got dtype %s" % a.dtype)
        if attention_mask is not None:
            attention_mask = _np.asarray(attention_mask)
            if attention_mask.shape != a.shape:
                raise _usage("attention_mask: shape %s is not the tokens' %s" % (attention_mask.shape, a.shape))
        return a.astype(_np.int64, copy=False), attention_mask, None
    if attention_mask is not None:
        raise _usage("attention_mask: only with a batch of token ids [B, T]")
    ids = _ids(model, tokens)
    return ids, None, (model, ids)


def next_token_loss(logits, ids, mask, per_token):
    """The next-token cross-entropy of `ids` under `logits` [.., T, V] in float64 (log-sum-exp shifted by
    each row's max, as lm_cross_entropy in C++): per position [.., T − 1] (0 where the position or its
    target is padding) or their mean over the counted positions, as TransformerLens's lm_cross_entropy_loss."""
    ids = _np.asarray(ids)
    if ids.shape[-1] < 2:
        raise _usage("loss: needs at least 2 tokens (position p predicts token p + 1), got %d" % ids.shape[-1])
    z = _np.asarray(logits, dtype=_np.float64)[..., :-1, :]
    mx = z.max(-1, keepdims=True)
    lse = _np.log(_np.exp(z - mx).sum(-1)) + mx[..., 0]
    target = _np.take_along_axis(z, ids[..., 1:, None].astype(_np.int64), -1)[..., 0]
    per = lse - target
    if mask is not None:
        keep = _np.logical_and(mask[..., :-1], mask[..., 1:])
        per = _np.where(keep, per, 0.0)
        count = int(keep.sum())
    else:
        count = per.size
    if per_token:
        return per
    return float(per.sum() / count) if count else 0.0
