# model(tokens, return_type="loss"|"both", loss_per_token=...): TransformerLens's call, checked against the
# independent float64 NumPy GPT-2 (numpy_gpt2.py) and, in batches, against each sequence alone.
import numpy as np
import pytest

import numpy_gpt2
import qkv

from conftest import BUNDLED, TEXT


def reference_loss(logits, ids):
    """Per-position next-token cross-entropy, float64, from scratch."""
    z = np.asarray(logits, dtype=np.float64)[:-1]
    z = z - z.max(-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
    return -logp[np.arange(len(ids) - 1), np.asarray(ids)[1:]]


def test_loss_matches_a_float64_numpy_forward(model, tokens):
    want = reference_loss(numpy_gpt2.forward(BUNDLED, tokens), tokens)
    per = model(tokens, return_type="loss", loss_per_token=True)
    assert per.shape == (len(tokens) - 1,) and per.dtype == np.float64
    assert np.abs(per - want).max() <= 1e-4
    loss = model(tokens, return_type="loss")
    assert isinstance(loss, float) and abs(loss - want.mean()) <= 1e-5
    logits, both = model(tokens, return_type="both")
    assert np.array_equal(logits, model(tokens)) and both == loss
    assert model(tokens, return_type=None) is None


@pytest.mark.parametrize("side", ["right", "left"])
def test_batch_loss_counts_only_real_tokens(model, side):
    texts = [TEXT, "When Mary and John went"]
    ids, mask = model.to_tokens(texts, padding_side=side)
    per = model(ids, attention_mask=mask, return_type="loss", loss_per_token=True)
    assert per.shape == (2, ids.shape[1] - 1)
    alone = [model(t, return_type="loss", loss_per_token=True) for t in texts]
    for row, m, a in zip(per, mask, alone):
        keep = np.logical_and(m[:-1], m[1:])
        assert keep.sum() == len(a) and np.abs(row[keep] - a).max() <= 1e-4 and (row[~keep] == 0).all()
    mean = model(ids, attention_mask=mask, return_type="loss")
    assert abs(mean - np.concatenate(alone).mean()) <= 1e-5


def test_loss_errors(model, tokens):
    with pytest.raises(qkv.Error, match="return_type"):
        model(tokens, return_type="probs")
    with pytest.raises(qkv.Error, match="at least 2 tokens"):
        model(tokens[:1], return_type="loss")
