"""Activation and attribution patching from Python (issue 25, item 3): qkv.patch is `qkv patch --json`, the
attribution estimates are (source − base activation) · gradient recomputed here from run_with_cache's
activations and gradients, and on both bundled models the estimates rank sites as activation patching
does where the README says they do (examples/attribution_vs_activation.py)."""
import json
import pathlib
import sys

import numpy as np
import pytest

import qkv
from conftest import BUNDLED, SOURCE, run_cli

sys.path.insert(0, str(SOURCE / "examples"))
import attribution_vs_activation as study  # noqa: E402

LLAMA = SOURCE / "models" / "induction-llama"


def inputs(model):
    return study.task(model)


@pytest.mark.parametrize("method", ["activation", "attribution"])
@pytest.mark.parametrize("hook,per_position", [("attn.hook_z", False), ("attn.hook_pattern", True),
                                               ("hook_resid_pre", True), ("blocks.1.attn.hook_k", False)])
def test_python_is_the_cli(model, method, hook, per_position):
    clean, corrupt, loss = inputs(model)
    args = ["patch", "--model", BUNDLED, "--clean-tokens", ",".join(map(str, clean)), "--corrupt-tokens",
            ",".join(map(str, corrupt)), "--hook", hook, "--loss-positions", ",".join(map(str, loss)), "--json"]
    if per_position:
        args.append("--per-position")
    if method == "attribution":
        args.append("--attribution")
    want = json.loads(run_cli(*args).stdout)
    got = qkv.patch(model, clean, corrupt, hook, loss_positions=loss, per_position=per_position, method=method)
    for d in (want, got):
        d.pop("seconds")
    assert got == want
    assert got["method"] == method and ("estimate" in got["sites"][0]) == (method == "attribution")


def site_slice(kind, a, head, pos):
    """The site's slice of an activation, as patching defines it."""
    if kind == "heads":
        return a[slice(None) if pos is None else pos, head]
    if kind == "pattern":
        return a[head, slice(None) if pos is None else pos]
    return a[slice(None) if pos is None else pos]


@pytest.mark.parametrize("path", [BUNDLED, LLAMA])
@pytest.mark.parametrize("direction", ["noising", "denoising"])
@pytest.mark.parametrize("hook,per_position", [("attn.hook_z", False), ("attn.hook_v", True),
                                               ("attn.hook_pattern", True), ("hook_attn_out", True)])
def test_estimates_are_activation_difference_times_gradient(path, direction, hook, per_position):
    m = qkv.load(str(path))
    clean, corrupt, loss = inputs(m)
    got = qkv.patch(m, clean, corrupt, hook, answer=int(clean[15]), wrong=int(corrupt[3]), position=14,
                    direction=direction, per_position=per_position, method="attribution")
    T = 15  # the runs end at the metric's position
    base, src = (clean, corrupt) if direction == "noising" else (corrupt, clean)
    metric = qkv.logit_diff(int(clean[15]), int(corrupt[3]), position=14)
    _, bc = m.run_with_cache(base[:T], incl_bwd=True, metric=metric, materialise_all=True)
    _, sc = m.run_with_cache(src[:T], materialise_all=True)
    assert got["tokens_run"] == T and got["backwards"] == 1 and got["forwards"] == 2
    base_metric = got["clean"] if direction == "noising" else got["corrupt"]
    for s in got["sites"]:
        name = "blocks.%d.%s" % (s["layer"], hook)
        if s["pos"] is not None and s["pos"] >= T:
            assert s["estimate"] == 0
            continue
        d = site_slice(got["kind"], sc[name].astype(np.float64) - bc[name], s["head"], s["pos"])
        g = site_slice(got["kind"], bc[name + "_grad"].astype(np.float64), s["head"], s["pos"])
        want = float(np.sum(d * g))
        assert s["estimate"] == pytest.approx(want, rel=1e-6, abs=1e-9 * max(1.0, np.abs(d * g).sum()))
        assert s["metric"] == pytest.approx(base_metric + s["estimate"], rel=1e-12, abs=1e-12)
    assert any(abs(s["estimate"]) > 1e-3 for s in got["sites"])


@pytest.mark.parametrize("path", [BUNDLED, LLAMA])
def test_attribution_ranks_heads_as_activation_patching_does(path):
    # The README's claim (docs/python.md): denoising, the estimates of hook_z per head and per position rank
    # the sites as activation patching does (ρ > 0.8, most of the top decile shared); noising from the clean
    # run, where the loss is saturated near 0, they do not (ρ ≈ 0.5).
    m = qkv.load(str(path))
    _, _, rho, _, top = study.compare(m, "attn.hook_z", True, "denoising")
    assert rho > 0.8 and top >= 0.7
    _, _, rho_noising, _, _ = study.compare(m, "attn.hook_z", True, "noising")
    assert rho_noising < 0.7


def test_patch_errors(model):
    clean, corrupt, loss = inputs(model)
    with pytest.raises(qkv.Error, match="no metric"):
        qkv.patch(model, clean, corrupt)
    with pytest.raises(qkv.Error, match="go together"):
        qkv.patch(model, clean, corrupt, answer=1)
    with pytest.raises(qkv.Error, match="method"):
        qkv.patch(model, clean, corrupt, loss_positions=loss, method="magic")
    with pytest.raises(qkv.Error, match="equal length"):
        qkv.patch(model, clean, corrupt[:-1], loss_positions=loss, method="attribution")
    with pytest.raises(qkv.Error, match="no hook point"):
        qkv.patch(model, clean, corrupt, "attn.hook_nope", loss_positions=loss, method="attribution")
    with pytest.raises(qkv.Error, match="position"):
        qkv.patch(model, clean, corrupt, answer=1, wrong=2, position=len(clean), method="attribution")
    with pytest.raises(qkv.Error, match="loss_positions"):
        qkv.patch(model, clean, corrupt, loss_positions=[len(clean) - 1])
    with pytest.raises(qkv.Error, match="direction"):
        qkv.patch(model, clean, corrupt, loss_positions=loss, direction="sideways")
    r = run_cli("patch", "--model", BUNDLED, "--repeated", "5", "--path", "0.1:1.0:k", "--attribution", check=False)
    assert r.returncode == 2 and "qkv: error: --attribution" in r.stderr
