#!/usr/bin/env python3
"""Writes the fuzz seed corpora (fuzz/corpus/<target>/) and the small GPT-2 tokenizer subset
(fuzz/data/tokenizer/) that the tokenizer_encode target and tests/cli/robustness_test.sh use.

Standard library only; deterministic. Run from anywhere:  python3 fuzz/make_corpus.py [GPT2_TOKENIZER_DIR]
GPT2_TOKENIZER_DIR (default ../shared/gpt2-tokenizer beside the repository) holds OpenAI's encoder.json
and vocab.bpe; only the first MERGES merges are kept. Without it the tokenizer data is left as it is.
Seeds are small (the whole corpus stays well under 1 MB): valid files of every format with a few
parameters each, and one or two of each malformed kind that docs/robustness.md lists.
"""
import json
import os
import random
import shutil
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus")
MERGES = 3000
rng = random.Random(8)


def put(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogateescape")
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


# ---- safetensors ----
def st(header, data=b"", raw_header=None, length=None):
    h = raw_header if raw_header is not None else json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - (8 + len(h)) % 8) % 8) if raw_header is None else b""
    n = len(h) if length is None else length
    return struct.pack("<Q", n) + h + data


def f32(vals):
    return struct.pack("<%df" % len(vals), *vals)


def f16(vals):
    return struct.pack("<%de" % len(vals), *vals)


def bf16(vals):
    return b"".join(struct.pack("<f", v)[2:] for v in vals)


def safetensors_seeds():
    t = "safetensors"
    a = f32([1.0, -2.0, 0.5, 3.25, 0.0, -0.0])
    put(t, "ok_f32", st({"a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}}, a))
    put(t, "ok_meta_scalar_empty", st({"__metadata__": {"format": "pt", "k": "v"},
                                       "s": {"dtype": "F32", "shape": [], "data_offsets": [0, 4]},
                                       "e": {"dtype": "F32", "shape": [0, 5], "data_offsets": [4, 4]}}, f32([7.0])))
    put(t, "ok_f16_bf16", st({"h": {"dtype": "F16", "shape": [3], "data_offsets": [0, 6]},
                              "b": {"dtype": "BF16", "shape": [2], "data_offsets": [6, 10]}},
                             f16([1.0, 65504.0, -0.0]) + bf16([1.0, -3.0])))
    put(t, "ok_out_of_order", st({"z": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]},
                                  "y": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, f32([1, 2])))
    put(t, "ok_empty_header", st({}))
    put(t, "bad_empty", b"")
    put(t, "bad_tiny", b"abc")
    put(t, "bad_len_past_end", st(None, raw_header=b"{}", length=1000))
    put(t, "bad_len_2_63", st(None, raw_header=b"{}", length=1 << 63))
    put(t, "bad_not_utf8", st(None, raw_header=b'{"\xff": 1}'))
    put(t, "bad_not_json", st(None, raw_header=b'{"t": nope}'))
    put(t, "bad_not_object", st(None, raw_header=b"[1, 2]"))
    put(t, "bad_dtype", st({"a": {"dtype": "F12", "shape": [1], "data_offsets": [0, 4]}}, f32([1])))
    put(t, "bad_past_end", st({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, f32([1])))
    put(t, "bad_overlap", st({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                              "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, f32([1, 2, 3])))
    put(t, "bad_hole", st({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                           "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}}, f32([1, 2, 3])))
    put(t, "bad_shape_bytes", st({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, f32([1, 2])))
    put(t, "bad_negative_shape", st({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}, f32([1])))
    put(t, "bad_overflow_shape", st({"a": {"dtype": "F32", "shape": [4294967296, 4294967296],
                                           "data_offsets": [0, 0]}}))
    put(t, "bad_trailing", st({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, f32([1, 2])))
    put(t, "bad_duplicate", st(None, raw_header=b'{"a":{"dtype":"F32","shape":[],"data_offsets":[0,4]},'
                                                 b'"a":{"dtype":"F32","shape":[],"data_offsets":[0,4]}}  ') + f32([1]))


# ---- GPT-2 in safetensors with the config in __metadata__ (load_lm) ----
def gpt2_table(V, P, d, L, attn_only, inner=0):
    I = inner or 4 * d
    t = [("wte.weight", [V, d]), ("wpe.weight", [P, d])]
    for l in range(L):
        h = "h.%d." % l
        t += [(h + "ln_1.weight", [d]), (h + "ln_1.bias", [d]), (h + "attn.c_attn.weight", [d, 3 * d]),
              (h + "attn.c_attn.bias", [3 * d]), (h + "attn.c_proj.weight", [d, d]), (h + "attn.c_proj.bias", [d])]
        if not attn_only:
            t += [(h + "ln_2.weight", [d]), (h + "ln_2.bias", [d]), (h + "mlp.c_fc.weight", [d, I]),
                  (h + "mlp.c_fc.bias", [I]), (h + "mlp.c_proj.weight", [I, d]), (h + "mlp.c_proj.bias", [d])]
    return t + [("ln_f.weight", [d]), ("ln_f.bias", [d])]


def numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def gpt2_st(V=5, P=3, d=4, L=1, H=2, attn_only=False, prefix="", extra=(), config=True, drop=None,
            reshape=None, poison=None):
    cfg = {"model_type": "gpt2", "vocab_size": V, "n_positions": P, "n_embd": d, "n_layer": L, "n_head": H,
           "n_inner": None, "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new",
           "qkv_attn_only": attn_only}
    header = {"__metadata__": {"format": "pt", "config": json.dumps(cfg)}} if config else {}
    data = b""
    tensors = gpt2_table(V, P, d, L, attn_only) + list(extra)
    for name, shape in tensors:
        if name == drop:
            continue
        if reshape and name == reshape[0]:
            shape = reshape[1]
        vals = [1.0 if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name == "ln_f.weight"
                else round(rng.uniform(-0.1, 0.1), 3) for _ in range(numel(shape))]
        if poison and name == poison[0]:
            vals[0] = poison[1]
        b = f32(vals)
        header[prefix + name] = {"dtype": "F32", "shape": shape, "data_offsets": [len(data), len(data) + len(b)]}
        data += b
    return st(header, data)


def model_seeds():
    t = "model_safetensors"
    put(t, "ok_full", gpt2_st())
    put(t, "ok_attn_only", gpt2_st(attn_only=True, L=2, d=2, H=1))
    put(t, "ok_prefixed_with_buffers", gpt2_st(prefix="transformer.", extra=[("h.0.attn.bias", [1, 1, 3, 3])]))
    put(t, "bad_no_config", gpt2_st(config=False))
    put(t, "bad_missing_tensor", gpt2_st(drop="h.0.attn.c_proj.weight"))
    put(t, "bad_shape_vs_config", gpt2_st(reshape=("h.0.attn.c_attn.weight", [12, 4])))
    put(t, "bad_unexpected_tensor", gpt2_st(extra=[("h.7.foo", [2])]))
    put(t, "bad_nan", gpt2_st(poison=("h.0.attn.c_attn.bias", float("nan"))))
    put(t, "bad_inf", gpt2_st(poison=("wte.weight", float("inf"))))
    put(t, "bad_heads_do_not_divide", gpt2_st(H=3))


# ---- llm.c ----
def llmc(V=3, Vp=4, T=2, L=1, H=1, C=2, version=3, magic=20240326, cut=0, extra=b"", hdr=None):
    h = [magic, version, T, V, L, H, C, Vp] + [0] * 248
    if hdr:
        for i, v in hdr.items():
            h[i] = v
    n = Vp * C + T * C + L * (C + C + 3 * C * C + 3 * C + C * C + C + C + C + 4 * C * C + 4 * C + 4 * C * C + C) + 2 * C
    vals = [round(rng.uniform(-0.5, 0.5), 3) for _ in range(n)]
    body = f32(vals) if version == 3 else bf16(vals)
    out = struct.pack("<256i", *h) + body + extra
    return out[:len(out) - cut] if cut else out


def llmc_seeds():
    t = "llmc"
    put(t, "ok_v3", llmc())
    put(t, "ok_v5_bf16", llmc(version=5, L=2, V=2, Vp=2))
    put(t, "bad_empty", b"")
    put(t, "bad_magic", llmc(magic=12345))
    put(t, "bad_version", llmc(hdr={1: 4}))
    put(t, "bad_zero_heads", llmc(hdr={5: 0}))
    put(t, "bad_heads_do_not_divide", llmc(hdr={5: 3}))
    put(t, "bad_truncated", llmc(cut=5))
    put(t, "bad_trailing", llmc(extra=b"\0\0\0\0"))
    put(t, "bad_huge_dims", llmc(hdr={3: 2**31 - 1, 7: 2**31 - 1, 6: 65536, 5: 1}))
    put(t, "bad_padded_below_vocab", llmc(hdr={7: 1}))


# ---- config.json ----
def config_seeds():
    t = "config_json"
    base = {"model_type": "gpt2", "vocab_size": 101, "n_positions": 16, "n_ctx": 16, "n_embd": 24, "n_layer": 2,
            "n_head": 3, "n_inner": None, "layer_norm_epsilon": 1e-05, "activation_function": "gelu_new",
            "qkv_attn_only": False}
    put(t, "ok_tiny", json.dumps(base, indent=2))
    put(t, "ok_defaults", "{}")
    put(t, "ok_n_ctx_only", json.dumps({"n_ctx": 8, "n_embd": 8, "n_head": 2, "n_inner": 16}))
    put(t, "bad_empty", "")
    put(t, "bad_not_json", '{"n_embd": 768,')
    put(t, "bad_not_object", "[768]")
    put(t, "bad_wrong_type", json.dumps(dict(base, n_embd="24")))
    put(t, "bad_float_int", json.dumps(dict(base, n_layer=2.5)))
    put(t, "bad_heads", json.dumps(dict(base, n_head=5)))
    put(t, "bad_range", json.dumps(dict(base, vocab_size=0, n_embd=1 << 40)))
    put(t, "bad_activation", json.dumps(dict(base, activation_function="relu")))
    put(t, "bad_nested", "[" * 2000 + "]" * 2000)


# ---- .npy ----
def npy(descr, shape, data=b"", major=1, fortran=False, raw=None, cut=0, extra=b""):
    sh = "(" + "".join("%d, " % s for s in shape).rstrip(", ") + ("," if len(shape) == 1 else "") + ")"
    d = raw if raw is not None else "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (
        descr, "True" if fortran else "False", sh)
    d = d.encode()
    pre = 10 if major == 1 else 12
    d += b" " * ((64 - (pre + len(d) + 1) % 64) % 64) + b"\n"
    ln = struct.pack("<H", len(d)) if major == 1 else struct.pack("<I", len(d))
    out = b"\x93NUMPY" + bytes([major, 0]) + ln + d + data + extra
    return out[:len(out) - cut] if cut else out


def npy_seeds():
    t = "npy"
    put(t, "ok_f4_2x3", npy("<f4", [2, 3], f32([1, 2, 3, 4, 5, 6])))
    put(t, "ok_i4_v2", npy("<i4", [3], struct.pack("<3i", 1, -2, 3), major=2))
    put(t, "ok_f2_scalar_v3", npy("<f2", [], f16([1.5]), major=3))
    put(t, "ok_u1_empty", npy("|u1", [0, 4]))
    put(t, "ok_b1", npy("|b1", [2], b"\x00\x01"))
    put(t, "ok_f8_i8", npy("<f8", [1], struct.pack("<d", 2.5)))
    put(t, "bad_magic", b"PK\x03\x04 not npy at all")
    put(t, "bad_fortran", npy("<f4", [1], f32([1]), fortran=True))
    put(t, "bad_big_endian", npy(">f4", [1], b"\x3f\x80\0\0"))
    put(t, "bad_negative", npy("<f4", [], raw="{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }"))
    put(t, "bad_overflow", npy("<f4", [2**40, 2**40]))
    put(t, "bad_truncated", npy("<f4", [4], f32([1, 2, 3])))
    put(t, "bad_trailing", npy("<f4", [1], f32([1]), extra=b"xx"))
    put(t, "bad_header_len", b"\x93NUMPY\x02\x00\xff\xff\xff\xff{}")


# ---- tokenizer ----
def tokenizer_seeds():
    b2u = bytes_to_unicode()
    byte_vocab = {b2u[b]: b for b in range(256)}
    sep = "\n@@@@\n"
    v = dict(byte_vocab)
    for tok in ["Ġt", "Ġa", "he", "in", "Ġth", "Ġthe"]:
        v[tok] = len(v)
    merges = "#version: 0.2\nĠ t\nĠ a\nh e\ni n\nĠt h\nĠth e\n"
    vj = json.dumps(v, ensure_ascii=False)
    t = "tokenizer_files"
    put(t, "ok_small", vj + sep + merges + sep + "the cat in the hat, then a theme")
    put(t, "ok_bytes_only", json.dumps(byte_vocab, ensure_ascii=False) + sep + "" + sep + "héllo\xff\xfe wörld")
    put(t, "ok_crlf_no_version", vj + sep + "Ġ t\r\nĠ a\r\n\r\n" + sep + " t a")
    put(t, "bad_not_json", '{"a": 1,,}' + sep + sep)
    put(t, "bad_missing_byte", '{"a": 0}' + sep + sep)
    put(t, "bad_duplicate_id", vj[:-1] + ', "zz": 3}' + sep + merges + sep)
    put(t, "bad_merge_line", vj + sep + "#version: 0.2\nĠ t x\n" + sep)
    put(t, "bad_unknown_merge", vj + sep + "#version: 0.2\nq z\n" + sep)
    t = "tokenizer_encode"
    put(t, "english", "The quick brown fox jumps over the lazy dog. It's 2024; we've won't they'll I'd")
    put(t, "unicode", "Здравствуй, мир! 你好，世界 🤗🤗 naïve café ＡＢＣ １２３")
    put(t, "whitespace", "a  b\t\tc\n\n\nd   \r\n  e    ")
    put(t, "invalid_utf8", b"ok \xff\xfe\xc3\x28 \xe2\x82 \xf0\x90\x28\xbc end \xed\xa0\x80")
    put(t, "numbers_punct", "1234567890 3.14159 -42 $100,000!!! ??? ... <|endoftext|>")
    put(t, "empty", b"")
    put(t, "nul_bytes", b"\x00\x00a\x00b")


def tokenizer_data(src):
    enc_path, bpe_path = os.path.join(src, "encoder.json"), os.path.join(src, "vocab.bpe")
    if not (os.path.isfile(enc_path) and os.path.isfile(bpe_path)):
        print("make_corpus: %s has no encoder.json + vocab.bpe; fuzz/data/tokenizer left as it is" % src)
        return
    b2u = bytes_to_unicode()
    enc = json.load(open(enc_path, encoding="utf-8"))
    byte_syms = sorted(b2u.values(), key=lambda s: enc[s])
    vocab = {s: i for i, s in enumerate(byte_syms)}
    lines = open(bpe_path, encoding="utf-8").read().split("\n")[1:MERGES + 1]
    for line in lines:
        a, b = line.split(" ")
        vocab.setdefault(a + b, len(vocab))
    out = os.path.join(HERE, "data", "tokenizer")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "vocab.json"), "w", encoding="utf-8") as f:
        f.write("{\n" + ",\n".join("  %s: %d" % (json.dumps(k, ensure_ascii=False), v)
                                   for k, v in sorted(vocab.items(), key=lambda kv: kv[1])) + "\n}\n")
    with open(os.path.join(out, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "\n".join(lines) + "\n")
    print("make_corpus: fuzz/data/tokenizer: %d tokens, %d merges" % (len(vocab), len(lines)))


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "..", "shared", "gpt2-tokenizer")
    if os.path.isdir(CORPUS):
        shutil.rmtree(CORPUS)
    safetensors_seeds()
    model_seeds()
    llmc_seeds()
    config_seeds()
    npy_seeds()
    tokenizer_seeds()
    tokenizer_data(src)
    total = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(CORPUS) for f in fs)
    print("make_corpus: %d bytes of seeds in fuzz/corpus" % total)


if __name__ == "__main__":
    main()
