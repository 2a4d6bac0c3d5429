#!/usr/bin/env python3
"""llama-quantize as the peer of `qkv convert --type MIX`: for every family qkv writes and every file type
(llama.cpp's ftypes Q8_0 … IQ4_XS and its K mixes Q3_K_S … Q5_K_M), the type of every tensor in qkv's file
equals the type llama.cpp's own llama_model_quantize gives it when it quantizes qkv's f32 file of the same
model — and general.file_type too. llama.cpp's library is the one npm node-llama-cpp ships (its C API
through ctypes: nothing is built); the files are read by a GGUF header reader written here, not qkv's.

The models (Mistral is written as llama): 16 layers (so that the layer rules — the first eighth, the first
sixteenth, llama.cpp's use_more_bits — pick different layers), 256 wide with MLPs of 512 (whole K blocks),
tied and untied embeddings, fused and separate Q/K/V, grouped K/V with 4 query heads per K/V head (the rules
that depend on it) and without; a 64-wide Llama whose rows are not whole K blocks (the fallbacks); and an
80-layer Llama with grouped K/V, the one size llama.cpp's rules single out (70B).

Usage: quantize_types.py QKV_BINARY WORK_DIR LIBLLAMA_DIR
Prints one line per check ("ok ..." / "FAIL ..."); exit 0 when every check holds.
"""
import ctypes
import glob
import os
import struct
import subprocess
import sys
from collections import Counter

# llama.h's llama_ftype values of the file types compared (the names qkv convert --type takes).
FTYPES = {"q8_0": 7, "q4_0": 2, "q4_1": 3, "q5_0": 8, "q5_1": 9, "q2_k": 10, "q3_k_s": 11, "q3_k_m": 12,
          "q3_k_l": 13, "q4_k_s": 14, "q4_k_m": 15, "q5_k_s": 16, "q5_k_m": 17, "q6_k": 18, "iq4_nl": 25,
          "iq4_xs": 30}
# ggml's type numbers, for the report.
GGML = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0", 10: "Q2_K", 11: "Q3_K",
        12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 20: "IQ4_NL", 23: "IQ4_XS", 30: "BF16"}

WIDE = ["hidden_size=256", "intermediate_size=512", "num_hidden_layers=16", "vocab_size=512"]
MODELS = [
    ("gpt2", ["n_embd=256", "n_head=4", "n_layer=16", "vocab_size=512"]),
    ("llama", WIDE + ["num_attention_heads=8", "num_key_value_heads=2"]),
    ("llama-mha", WIDE + ["num_attention_heads=4", "num_key_value_heads=4"]),
    ("qwen2", WIDE + ["num_attention_heads=8", "num_key_value_heads=2"]),
    ("gemma", WIDE + ["num_attention_heads=4", "num_key_value_heads=1", "head_dim=64"]),
    ("gemma2", WIDE + ["num_attention_heads=4", "num_key_value_heads=2", "head_dim=64"]),
    ("phi3", WIDE + ["num_attention_heads=4", "num_key_value_heads=4"]),
    ("llama-narrow", ["hidden_size=64", "intermediate_size=160", "num_hidden_layers=8", "vocab_size=96",
                      "num_attention_heads=4", "num_key_value_heads=1"]),
    # Llama 2 70B's depth and grouping (80 layers, 8 query heads per K/V head), narrow: llama.cpp's 70B rule.
    ("llama-70b", ["hidden_size=256", "intermediate_size=256", "num_hidden_layers=80", "vocab_size=64",
                   "num_attention_heads=8", "num_key_value_heads=1"], ["q4_k_m", "q3_k_m", "q4_k_s"]),
]


class QuantizeParams(ctypes.Structure):
    # llama.h's llama_model_quantize_params, as in the llama.cpp release node-llama-cpp 3.21.1 ships.
    _fields_ = [("nthread", ctypes.c_int32), ("ftype", ctypes.c_int32), ("output_tensor_type", ctypes.c_int32),
                ("token_embedding_type", ctypes.c_int32), ("allow_requantize", ctypes.c_bool),
                ("quantize_output_tensor", ctypes.c_bool), ("only_copy", ctypes.c_bool), ("pure", ctypes.c_bool),
                ("keep_split", ctypes.c_bool), ("dry_run", ctypes.c_bool), ("imatrix", ctypes.c_void_p),
                ("kv_overrides", ctypes.c_void_p), ("tt_overrides", ctypes.c_void_p),
                ("prune_layers", ctypes.c_void_p), ("max_buf_size", ctypes.c_size_t)]


def read_gguf_types(path):
    """{tensor name: ggml type} and general.file_type from a GGUF header (v2/v3, little-endian)."""
    with open(path, "rb") as f:
        b = f.read(1 << 22)
    if b[:4] != b"GGUF":
        raise ValueError(f"{path}: not a GGUF file")
    pos = 8
    n_tensors, n_kv = struct.unpack_from("<QQ", b, pos)
    pos += 16
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    def string(p):
        n = struct.unpack_from("<Q", b, p)[0]
        return b[p + 8:p + 8 + n].decode(), p + 8 + n

    def skip(t, p):
        if t == 8:
            return string(p)[1]
        if t == 9:
            et, n = struct.unpack_from("<IQ", b, p)
            p += 12
            for _ in range(n):
                p = skip(et, p)
            return p
        return p + sizes[t]

    file_type = None
    for _ in range(n_kv):
        key, pos = string(pos)
        t = struct.unpack_from("<I", b, pos)[0]
        pos += 4
        if key == "general.file_type":
            file_type = struct.unpack_from("<I", b, pos)[0]
        pos = skip(t, pos)
    types = {}
    for _ in range(n_tensors):
        name, pos = string(pos)
        nd = struct.unpack_from("<I", b, pos)[0]
        pos += 4 + 8 * nd
        types[name] = struct.unpack_from("<I", b, pos)[0]
        pos += 12
    return types, file_type


def main():
    if len(sys.argv) != 4:
        print(__doc__.strip().splitlines()[-2], file=sys.stderr)
        return 2
    qkv, work, libdir = sys.argv[1:]
    libs = sorted(glob.glob(os.path.join(libdir, "libllama*.so")))
    if not libs:
        print(f"FAIL no libllama*.so in {libdir}")
        return 1
    lib = ctypes.CDLL(libs[0])
    lib.llama_model_quantize_default_params.restype = QuantizeParams
    lib.llama_model_quantize.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(QuantizeParams)]
    lib.llama_model_quantize.restype = ctypes.c_uint32
    lib.llama_log_set.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    quiet = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)(lambda *a: None)
    lib.llama_log_set(quiet, None)
    lib.llama_backend_init()
    defaults = lib.llama_model_quantize_default_params()
    # The struct layout is the pinned release's: its defaults say so (ftype Q8_0, no type overrides, the
    # output quantized, rows kept in memory up to 8 GiB).
    if (defaults.ftype != 7 or defaults.output_tensor_type != defaults.token_embedding_type or
            not defaults.quantize_output_tensor or defaults.pure or defaults.max_buf_size != 8 << 30):
        print("FAIL llama_model_quantize_params does not have the pinned release's layout")
        return 1
    failed = checks = 0
    run = lambda *a: subprocess.run([qkv, *a], check=True, capture_output=True, text=True).stdout
    for label, sets, *only in MODELS:
        ftypes = {k: v for k, v in FTYPES.items() if not only or k in only[0]}
        arch = label.split("-")[0]
        d = os.path.join(work, label)
        run("init", "--arch", arch, "--preset", "tiny", "--out", d, "--seed", "1",
            *[x for s in sets for x in ("--set", s)])
        f32 = d + ".f32.gguf"
        run("convert", "--type", "f32", d, f32)
        mixed = 0
        for name, ftype in ftypes.items():
            ours, theirs = f"{d}.{name}.gguf", f"{d}.{name}.llama.gguf"
            run("convert", "--type", name, d, ours)
            p = QuantizeParams.from_buffer_copy(defaults)
            p.ftype, p.nthread = ftype, 2
            if lib.llama_model_quantize(f32.encode(), theirs.encode(), ctypes.byref(p)) != 0:
                print(f"FAIL {label} {name}: llama_model_quantize failed")
                failed += 1
                continue
            (a, fa), (b, fb) = read_gguf_types(ours), read_gguf_types(theirs)
            diff = [f"{k}: qkv {GGML.get(a.get(k), a.get(k))}, llama.cpp {GGML.get(b.get(k), b.get(k))}"
                    for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
            counts = Counter(GGML.get(t, t) for k, t in b.items() if t != 0)
            mixed += len(counts) > 1
            good = not diff and fa == fb == ftype
            checks += 1
            failed += not good
            print(f"{'ok  ' if good else 'FAIL'} quantize {label} {name}: {len(b)} tensors the same types "
                  f"({', '.join(f'{n} {t}' for t, n in sorted(counts.items()))}), file_type {fb}"
                  if good else f"FAIL quantize {label} {name}: file_type qkv {fa}, llama.cpp {fb}; "
                  + "; ".join(diff[:6]))
            for x in (ours, theirs):
                os.remove(x)
        # The check can fail: llama.cpp mixes types in most of these files, so equal tables are not a given.
        if mixed < min(8, len(ftypes)):
            print(f"FAIL quantize {label}: llama.cpp mixed types in only {mixed} of {len(ftypes)} files")
            failed += 1
    print(f"{checks} files compared; " + (f"{failed} check(s) failed" if failed else "every check holds"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
