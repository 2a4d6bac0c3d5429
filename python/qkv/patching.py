"""Activation, attribution and path patching from Python: `qkv.patch(...)` is `qkv patch --hook … --json`
(`--attribution` with method="attribution", `--attribution --edges` with edges=True) or `qkv patch --path …
--json` (method="path"), the same dict."""

from . import _qkv
from .grad import _token


def _metric_spec(model, answer, wrong, position, loss_positions):
    """The engine's metric: a logit difference or the clean input's next-token loss at some positions."""
    from . import _usage
    if answer is not None or wrong is not None:
        if answer is None or wrong is None:
            raise _usage("answer and wrong go together (a logit difference)")
        if loss_positions is not None:
            raise _usage("loss_positions: give either answer/wrong or loss_positions")
        return ("logit_diff", _token(model, answer, "answer"), _token(model, wrong, "wrong"), int(position))
    if loss_positions is not None:
        return ("loss", [int(p) for p in loss_positions])
    raise _usage("no metric: give answer= and wrong= (a logit difference) or loss_positions=")


def patch(model, clean, corrupt, hook=None, answer=None, wrong=None, position=-1, loss_positions=None,
          direction="noising", per_position=False, method="activation", path=None, edges=False):
    """Every site (layer × head [× position]) of `hook` patched, as `qkv patch --hook HOOK --json`; or one
    path, as `qkv patch --path PATH --json`.

    clean, corrupt: texts or token ids of equal length. hook: "attn.hook_z" (every layer; the default),
    "attn.hook_result", "hook_resid_pre", "blocks.1.attn.hook_v" (one layer), … as the CLI's --hook. The
    metric: answer and wrong (token ids or one-token texts) at `position` (−1: the last), or loss_positions,
    the mean loss of the clean input's next token at those positions. direction: "noising" (run clean, patch
    corrupt in) or "denoising". method:

    - "activation": one forward per site. Returns {"hook", "kind", "method", "direction", "metric",
      "inputs", "clean", "corrupt", "sites": [{"layer", "head", "pos", "metric", "normalised"}, …], …},
      normalised 0 = corrupt, 1 = clean.
    - "attribution": every site estimated from one backward, (source − base activation) · ∂metric/∂activation:
      the same dict, each site with "estimate", and "backwards". With edges=True (`--attribution --edges`;
      no hook) the edges between heads instead: {"method": "edge_attribution", …, "edges": [{"sender_layer",
      "sender_head", "receiver_layer", "receiver_head", "input", "estimate", "normalised"}, …]}
      (docs/patching.md).
    - "path": `path` = "SENDER:RECEIVER:q|k|v" with heads as LAYER.HEAD ("0.1:1.0:k"): the sender's output
      swapped only in the receiver's q, k or v input. Returns {"path", "direction", "metric", "inputs",
      "clean", "corrupt", "patched", "normalised", "receiver_only", "receiver_only_normalised",
      "fraction_of_receiver_effect", "delta_norm", "forwards"}."""
    from . import _ids, _model, _usage
    m = _model(model)
    c, k = _ids(model, clean), _ids(model, corrupt)
    spec = _metric_spec(model, answer, wrong, position, loss_positions)
    if method not in ("activation", "attribution", "path"):
        raise _usage("method: %r is not activation, attribution or path" % (method,))
    if edges and method != "attribution":
        raise _usage("edges: edge attribution patching is method=\"attribution\", edges=True")
    if method == "path" or edges:
        if hook is not None or per_position:
            raise _usage("%s: between heads; give no hook or per_position" % ("path" if method == "path" else "edges"))
    if method == "path":
        if path is None:
            raise _usage("method=\"path\" needs path=\"SENDER:RECEIVER:q|k|v\" (heads as LAYER.HEAD, e.g. 0.1:1.0:k)")
        return _qkv.path_patch(m, c, k, str(path), spec, str(direction))
    if path is not None:
        raise _usage("path: only with method=\"path\"")
    if edges:
        return _qkv.edge_attribution(m, c, k, spec, str(direction))
    hook = "attn.hook_z" if hook is None else hook
    return _qkv.patch(m, c, k, str(hook), spec, str(direction), bool(per_position), str(method))
