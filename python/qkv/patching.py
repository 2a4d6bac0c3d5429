"""Activation and attribution patching from Python: `qkv.patch(...)` is `qkv patch --hook … --json`
(`--attribution` with method="attribution"), the same dict."""

from . import _qkv
from .grad import _token


def patch(model, clean, corrupt, hook="attn.hook_z", answer=None, wrong=None, position=-1, loss_positions=None,
          direction="noising", per_position=False, method="activation"):
    """Every site (layer × head [× position]) of `hook` patched, as `qkv patch --hook HOOK --json`.

    clean, corrupt: texts or token ids of equal length. hook: "attn.hook_z" (every layer), "attn.hook_result",
    "hook_resid_pre", "blocks.1.attn.hook_v" (one layer), … as the CLI's --hook. The metric: answer and wrong
    (token ids or one-token texts) at `position` (−1: the last), or loss_positions, the mean loss of the
    clean input's next token at those positions. direction: "noising" (run clean, patch corrupt in) or
    "denoising". method: "activation" (one forward per site) or "attribution" (every site estimated from
    one backward, (source − base activation) · ∂metric/∂activation: each site gains "estimate").

    Returns {"hook", "kind", "method", "direction", "metric", "inputs", "clean", "corrupt", "sites": [{"layer",
    "head", "pos", "metric", "normalised"(, "estimate")}, …], …} — normalised 0 = corrupt, 1 = clean."""
    from . import _ids, _model, _usage
    m = _model(model)
    c, k = _ids(model, clean), _ids(model, corrupt)
    if answer is not None or wrong is not None:
        if answer is None or wrong is None:
            raise _usage("answer and wrong go together (a logit difference)")
        if loss_positions is not None:
            raise _usage("loss_positions: give either answer/wrong or loss_positions")
        spec = ("logit_diff", _token(model, answer, "answer"), _token(model, wrong, "wrong"), int(position))
    elif loss_positions is not None:
        spec = ("loss", [int(p) for p in loss_positions])
    else:
        raise _usage("no metric: give answer= and wrong= (a logit difference) or loss_positions=")
    return _qkv.patch(m, c, k, str(hook), spec, str(direction), bool(per_position), str(method))
