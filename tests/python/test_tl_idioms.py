# docs/python.md's "Coming from TransformerLens" table, executed: every code span in its qkv column runs
# on the bundled Llama twin, so a row that stops being true (a renamed method, a changed signature) fails
# here instead of misleading a TransformerLens user.
import re

import numpy as np
import pytest

import qkv
from conftest import BUNDLED

DOC = BUNDLED.parent.parent / "docs" / "python.md"
TEXT = "When Mary and John went to the store, John gave a drink to"


def qkv_column_spans():
    """The code spans of the table's second column, row by row, in order."""
    section = DOC.read_text().split("### Coming from TransformerLens", 1)[1].split("\n### ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| Transformer")]
    assert len(rows) >= 15, "the table lost rows"
    return [span for row in rows for span in re.findall(r"`([^`]+)`", row.split(" | ")[1])]


@pytest.fixture
def namespace(tmp_path):
    path = str(BUNDLED.parent / "induction-llama")
    model = qkv.load(path)
    tokens = model.tokenize(TEXT)
    _, cache = model.run_with_cache(tokens)
    d = model.cfg.d_model
    rng = np.random.default_rng(0)
    sae = qkv.SAE(rng.normal(size=(d, 64)), np.zeros(64), rng.normal(size=(64, d)), np.zeros(d), "blocks.1.hook_resid_pre")
    sae.save(tmp_path / "sae")
    yield {"qkv": qkv, "np": np, "path": path, "model": model, "text": TEXT, "tokens": tokens, "cache": cache,
           "sae": sae, "sae_dir": str(tmp_path / "sae"),
           "stack": cache.decompose_resid(), "name": "blocks.0.attn.hook_z", "fn": lambda a, hook: None,
           "clean": "When Mary and John went, John gave it to", "corrupt": "When John and Mary went, Mary gave it to"}
    model.reset_hooks(including_permanent=True)


def test_every_qkv_call_in_the_table_runs(namespace):
    spans = qkv_column_spans()
    assert "qkv.load(path)" in spans and any(s.startswith("qkv.patch(") for s in spans)
    for span in spans:
        try:
            eval(compile(span, "docs/python.md", "eval"), namespace)
        except Exception as e:  # noqa: BLE001 - the span and what it raised, whatever it was
            pytest.fail("docs/python.md, Coming from TransformerLens: `%s` raised %r" % (span, e))
