#!/usr/bin/env python3
"""Writes the GGUF fuzz seeds (fuzz/corpus/gguf/): small valid files (every metadata value type, nested
arrays, every tensor type qkv knows, custom alignment, version 2, a tiny gpt2 model with a tokenizer, a tiny
llama (SentencePiece tokenizer; also with Llama 3.1's rope_freqs) and phi3 (byte-level BPE))
and one of each malformed kind docs/robustness.md lists. Standard library only; deterministic.
Run from anywhere:  python3 fuzz/make_gguf_corpus.py
"""
import os
import random
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus", "gguf")
rng = random.Random(18)

# (block size, bytes per block) of the ggml types the seeds use
TYPES = {0: (1, 4), 1: (1, 2), 2: (32, 18), 8: (32, 34), 12: (256, 144), 14: (256, 210), 30: (1, 2), 13: (256, 176)}


def s(x):
    b = x.encode() if isinstance(x, str) else x
    return struct.pack("<Q", len(b)) + b


def val(t, v):
    if t == 8:
        return s(v)
    if t == 9:
        et, items = v
        return struct.pack("<IQ", et, len(items)) + b"".join(val(et, i) for i in items)
    fmt = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}[t]
    return struct.pack("<" + fmt, v)


def gguf(kvs, tensors, version=3, alignment=32, raw_offsets=None):
    """kvs: [(key, type, value)]; tensors: [(name, ne, type, bytes)]."""
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for k, t, v in kvs:
        out += s(k) + struct.pack("<I", t) + val(t, v)
    off, offs = 0, []
    for i, (name, ne, t, data) in enumerate(tensors):
        o = raw_offsets[i] if raw_offsets else off
        out += s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne) + struct.pack("<IQ", t, o)
        offs.append(o)
        off += len(data) + (-len(data)) % alignment
    out += b"\0" * ((-len(out)) % alignment)
    for name, ne, t, data in tensors:
        out += data + b"\0" * ((-len(data)) % alignment)
    return out


def tensor(name, ne, t):
    bs, ts = TYPES[t]
    n = 1
    for d in ne:
        n *= d
    data = bytes(rng.randrange(64) for _ in range(n // bs * ts))  # small bytes: finite halves
    return (name, ne, t, data)


def f32(name, ne, scale=0.02, value=None):
    n = 1
    for d in ne:
        n *= d
    vals = [value if value is not None else rng.gauss(0, scale) for _ in range(n)]
    return (name, ne, 0, struct.pack("<%df" % n, *vals))


def put(name, data):
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)


def tiny_gpt2(with_tokenizer=True, ffn=True):
    d, V, P, L = 32, 8, 4, 1
    kvs = [("general.architecture", 8, "gpt2"), ("gpt2.block_count", 4, L), ("gpt2.context_length", 4, P),
           ("gpt2.embedding_length", 4, d), ("gpt2.feed_forward_length", 4, 4 * d if ffn else 0),
           ("gpt2.attention.head_count", 4, 2), ("gpt2.attention.layer_norm_epsilon", 6, 1e-5)]
    if not ffn:
        kvs.append(("qkv.attn_only", 7, True))
    if with_tokenizer:
        toks = ["a", "b", "c", "Ġ", "ab", "Ġa", "<|endoftext|>", "[PAD7]"]
        kvs += [("tokenizer.ggml.model", 8, "gpt2"), ("tokenizer.ggml.tokens", 9, (8, toks)),
                ("tokenizer.ggml.token_type", 9, (5, [1, 1, 1, 1, 1, 1, 3, 5])),
                ("tokenizer.ggml.merges", 9, (8, ["a b", "Ġ a"]))]
    ts = [f32("token_embd.weight", [d, V]), f32("position_embd.weight", [d, P]),
          f32("blk.0.attn_norm.weight", [d], value=1.0), f32("blk.0.attn_norm.bias", [d], value=0.0),
          tensor("blk.0.attn_qkv.weight", [d, 3 * d], 8), f32("blk.0.attn_qkv.bias", [3 * d]),
          tensor("blk.0.attn_output.weight", [d, d], 2), f32("blk.0.attn_output.bias", [d])]
    if ffn:
        ts += [f32("blk.0.ffn_norm.weight", [d], value=1.0), f32("blk.0.ffn_norm.bias", [d], value=0.0),
               tensor("blk.0.ffn_up.weight", [d, 4 * d], 1), f32("blk.0.ffn_up.bias", [4 * d]),
               tensor("blk.0.ffn_down.weight", [4 * d, d], 30), f32("blk.0.ffn_down.bias", [d])]
    ts += [f32("output_norm.weight", [d], value=1.0), f32("output_norm.bias", [d], value=0.0)]
    return gguf(kvs, ts)


def tiny_family(arch, extra=()):
    """A one-layer llama (SentencePiece tokenizer) or phi3 (byte-level BPE, llama-bpe pre) of mixed types;
    `extra` tensors appended."""
    d, V, P, H, KV, dh, ff = 32, 8, 4, 2, 1, 16, 32
    kvs = [("general.architecture", 8, arch), (arch + ".block_count", 4, 1), (arch + ".context_length", 4, P),
           (arch + ".embedding_length", 4, d), (arch + ".feed_forward_length", 4, ff),
           (arch + ".attention.head_count", 4, H), (arch + ".attention.head_count_kv", 4, KV),
           (arch + ".rope.freq_base", 6, 10000.0), (arch + ".attention.layer_norm_rms_epsilon", 6, 1e-6)]
    if arch == "llama":
        toks = ["<unk>", "<s>", "</s>", "\u2581", "a", "b", "\u2581a", "ab"]
        kvs += [("tokenizer.ggml.model", 8, "llama"), ("tokenizer.ggml.tokens", 9, (8, toks)),
                ("tokenizer.ggml.scores", 9, (6, [0, 0, 0, -3, -3, -3, -1, -2])),
                ("tokenizer.ggml.token_type", 9, (5, [2, 3, 3, 1, 1, 1, 1, 1])),
                ("tokenizer.ggml.bos_token_id", 4, 1), ("tokenizer.ggml.eos_token_id", 4, 2),
                ("tokenizer.ggml.unknown_token_id", 4, 0), ("tokenizer.ggml.add_space_prefix", 7, True)]
        ts = [f32("token_embd.weight", [d, V]), f32("blk.0.attn_norm.weight", [d], value=1.0),
              tensor("blk.0.attn_q.weight", [d, H * dh], 8), tensor("blk.0.attn_k.weight", [d, KV * dh], 1),
              tensor("blk.0.attn_v.weight", [d, KV * dh], 2), f32("blk.0.attn_output.weight", [H * dh, d]),
              f32("blk.0.ffn_norm.weight", [d], value=1.0), tensor("blk.0.ffn_gate.weight", [d, ff], 30),
              tensor("blk.0.ffn_up.weight", [d, ff], 8), tensor("blk.0.ffn_down.weight", [ff, d], 8),
              f32("output_norm.weight", [d], value=1.0), f32("output.weight", [d, V])]
    else:
        kvs += [(arch + ".rope.dimension_count", 4, 8), (arch + ".attention.sliding_window", 4, 2)]
        toks = ["a", "b", "c", "\u0120", "ab", "\u0120a", "<|end|>", "[PAD7]"]
        kvs += [("tokenizer.ggml.model", 8, "gpt2"), ("tokenizer.ggml.pre", 8, "llama-bpe"),
                ("tokenizer.ggml.tokens", 9, (8, toks)), ("tokenizer.ggml.token_type", 9, (5, [1, 1, 1, 1, 1, 1, 3, 5])),
                ("tokenizer.ggml.merges", 9, (8, ["a b", "\u0120 a"])), ("tokenizer.ggml.bos_token_id", 4, 6)]
        ts = [f32("token_embd.weight", [d, V]), f32("blk.0.attn_norm.weight", [d], value=1.0),
              tensor("blk.0.attn_qkv.weight", [d, (H + 2 * KV) * dh], 8), f32("blk.0.attn_output.weight", [H * dh, d]),
              f32("blk.0.ffn_norm.weight", [d], value=1.0), tensor("blk.0.ffn_up.weight", [d, 2 * ff], 2),
              tensor("blk.0.ffn_down.weight", [ff, d], 1), f32("output_norm.weight", [d], value=1.0)]
    return gguf(kvs, ts + list(extra))


def main():
    if os.path.isdir(OUT):
        for n in os.listdir(OUT):
            os.remove(os.path.join(OUT, n))
    every = [("u8", 0, 200), ("i8", 1, -3), ("u16", 2, 60000), ("i16", 3, -300), ("u32", 4, 7), ("i32", 5, -7),
             ("f32", 6, 0.5), ("bool", 7, True), ("str", 8, "héllo"), ("u64", 10, 2**63), ("i64", 11, -2**40),
             ("f64", 12, 0.1), ("arr", 9, (8, ["x", "", "ĠĠ"])), ("nested", 9, (9, [(5, [1, 2]), (5, [])]))]
    put("ok_metadata_every_type", gguf(every, []))
    put("ok_every_tensor_type", gguf([("general.architecture", 8, "x")],
                                     [tensor("t%d" % t, [TYPES[t][0] * 2, 2], t) for t in sorted(TYPES)]))
    put("ok_alignment_64", gguf([("general.alignment", 4, 64)], [tensor("a", [32], 8), tensor("b", [3], 0)], alignment=64))
    put("ok_version_2", gguf([("k", 8, "v")], [tensor("a", [4], 0)], version=2))
    put("ok_scalar_and_empty", gguf([], [tensor("s", [], 0), tensor("e", [0, 3], 0)]))
    put("ok_gpt2_tiny", tiny_gpt2())
    put("ok_gpt2_attn_only_no_tokenizer", tiny_gpt2(with_tokenizer=False, ffn=False))
    good = gguf([("general.architecture", 8, "x")], [tensor("a", [8], 0), tensor("b", [4, 2], 1)])
    put("bad_truncated_header", good[:20])
    put("bad_truncated_data", good[:-8])
    put("bad_magic", b"GGML" + good[4:])
    put("bad_version_1", good[:4] + struct.pack("<I", 1) + good[8:])
    put("bad_version_big_endian", good[:4] + struct.pack(">I", 3) + good[8:])
    put("bad_huge_kv_count", good[:16] + struct.pack("<Q", 2**62) + good[24:])
    put("bad_huge_tensor_count", good[:8] + struct.pack("<Q", 2**62) + good[16:])
    put("bad_string_past_end", b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 2**40) + b"key")
    put("bad_unknown_value_type", b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + s("k") + struct.pack("<I", 13))
    put("bad_huge_array", b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + s("k") + struct.pack("<IIQ", 9, 4, 2**61))
    put("bad_bool_2", b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + s("k") + struct.pack("<IB", 7, 2))
    put("bad_duplicate_key", gguf([("k", 0, 1), ("k", 0, 2)], []))
    put("bad_alignment_48", gguf([("general.alignment", 4, 48)], [tensor("a", [4], 0)]))
    put("bad_offset_out_of_file", gguf([], [tensor("a", [8], 0)], raw_offsets=[4096]))
    put("bad_overlap", gguf([], [tensor("a", [16], 0), tensor("b", [8], 0)], raw_offsets=[0, 32]))
    put("bad_misaligned", gguf([], [tensor("a", [8], 0), tensor("b", [8], 0)], raw_offsets=[0, 48]))
    put("bad_unknown_type", gguf([], [("a", [8], 99, b"\0" * 32)]))
    put("bad_not_whole_blocks", gguf([], [("a", [16], 8, b"\0" * 34)]))
    put("bad_duplicate_tensor", gguf([], [tensor("a", [8], 0), tensor("a", [8], 0)]))
    put("bad_gpt2_wrong_arch", tiny_gpt2().replace(b"gpt2", b"gptx", 1))
    # The families (include/qkv/io/gguf_family.hpp); drawn last so the seeds above stay as they were.
    put("ok_llama_tiny", tiny_family("llama"))
    put("ok_phi3_tiny", tiny_family("phi3"))
    put("bad_llama_missing_tensor", tiny_family("llama").replace(b"blk.0.ffn_gate.weight", b"blk.0.ffn_gxte.weight", 1))
    # Llama 3.1's rope scaling as llama.cpp stores it: one F32 factor per rotary frequency (head 16: 8).
    freqs = [1.0, 1.0, 1.7, 3.2, 6.5, 8.0, 8.0, 8.0]
    put("ok_llama_rope_freqs", tiny_family("llama", [("rope_freqs.weight", [8], 0, struct.pack("<8f", *freqs))]))
    put("bad_llama_rope_freqs_zero",
        tiny_family("llama", [("rope_freqs.weight", [8], 0, struct.pack("<8f", *freqs[:3], 0.0, *freqs[4:]))]))
    # Q2_K and Q3_K (llama.cpp's Q2_K / Q3_K_* files), read since; drawn after the rest for the same reason.
    TYPES.update({10: (256, 84), 11: (256, 110)})
    put("ok_low_k_types", gguf([("general.architecture", 8, "x")], [tensor("q2", [256, 2], 10), tensor("q3", [256, 2], 11)]))
    # IQ4_NL and IQ4_XS, read since (after the rest again).
    TYPES.update({20: (32, 18), 23: (256, 136)})
    put("ok_iq4_types", gguf([("general.architecture", 8, "x")], [tensor("nl", [64, 2], 20), tensor("xs", [256, 2], 23)]))
    # Q4_1, Q5_0, Q5_1 (quantized since; read before, no seed held them).
    TYPES.update({3: (32, 20), 6: (32, 22), 7: (32, 24)})
    put("ok_legacy_types", gguf([("general.architecture", 8, "x")],
                                [tensor("q41", [32, 2], 3), tensor("q50", [64], 6), tensor("q51", [32, 3], 7)]))


if __name__ == "__main__":
    main()
