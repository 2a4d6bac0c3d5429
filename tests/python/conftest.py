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

# The nine families qkv runs, each as a tiny random checkpoint from `qkv init --arch A --preset tiny`
# (initializer_range 0.2 so that attention is peaked and every path matters, as the reference fixtures do).
FAMILIES = ["gpt2", "llama", "mistral", "qwen2", "gemma", "gemma2", "gpt_neox", "phi3", "gpt_neo"]


@pytest.fixture(scope="session")
def family_dir(tmp_path_factory):
    """family_dir(arch, *init_args) -> the directory of a tiny checkpoint of that family (made once)."""
    made = {}

    def make(arch, *args):
        key = (arch,) + tuple(map(str, args))
        if key not in made:
            out = tmp_path_factory.mktemp("family_" + arch)
            run_cli("init", "--arch", arch, "--preset", "tiny", "--seed", "7", "--set", "initializer_range=0.2",
                    *args, "--out", out)
            made[key] = out
        return made[key]

    return make


@pytest.fixture(scope="session")
def family_model(family_dir):
    """family_model(arch, *init_args) -> qkv.load of family_dir's checkpoint (loaded once)."""
    loaded = {}

    def load(arch, *args):
        key = (arch,) + tuple(map(str, args))
        if key not in loaded:
            loaded[key] = qkv.load(str(family_dir(arch, *args)))
        return loaded[key]

    return load
