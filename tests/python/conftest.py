# pytest fixtures for the Python module: run with the build's package on the path, e.g.
#   PYTHONPATH=build/python /usr/bin/python3 -m pytest tests/python
# (scripts/test.sh does). The CLI binary the tests compare against is the same build's qkv.
import os
import pathlib
import subprocess

import pytest

import qkv

SOURCE = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(qkv.__file__).resolve().parents[2]  # BUILD/python/qkv/__init__.py
QKV = BUILD / "qkv"
BUNDLED = SOURCE / "models" / "induction"
TEXT = "When Mary and John went to the store, John gave a drink to Mary. When Mary and John"


def run_cli(*args, check=True):
    """Runs the build's qkv binary; returns the CompletedProcess (text mode)."""
    if not QKV.exists():
        pytest.fail("%s not found: the tests compare the module with the CLI of the same build" % QKV)
    r = subprocess.run([str(QKV), *map(str, args)], capture_output=True, text=True, env=dict(os.environ))
    if check and r.returncode != 0:
        raise AssertionError("qkv %s failed (%d): %s" % (" ".join(map(str, args)), r.returncode, r.stderr))
    return r


@pytest.fixture(scope="session")
def model():
    return qkv.load(str(BUNDLED))


@pytest.fixture(scope="session")
def tokens(model):
    return model.tokenize(TEXT)
