"""The activation-store reader without the engine: `from qkv_store import Store` loads python/qkv/store.py
(which `import qkv` also offers as `qkv.open_store`, raising qkv.Error) with NumPy only. See that file."""
import importlib.util as _util
import os as _os

_spec = _util.spec_from_file_location(
    "_qkv_store", _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "qkv", "store.py"))
_impl = _util.module_from_spec(_spec)
_spec.loader.exec_module(_impl)
Store, bf16_to_float32 = _impl.Store, _impl.bf16_to_float32
__all__ = ["Store", "bf16_to_float32"]
