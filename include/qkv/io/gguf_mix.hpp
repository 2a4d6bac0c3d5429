// llama-quantize's file types ("mixes"): which ggml type each tensor of a GGUF gets when a model is
// quantized to Q4_K_M, Q3_K_S, Q4_0, …. llama-quantize does not give every matrix the named type: the
// output (and a tied token embedding) goes to Q6_K, and the K mixes give some layers' attn_v / attn_qkv and
// ffn_down, and attn_output, more bits. qkv convert writes the same choices, tensor by tensor, so a file
// it writes as Q4_K_M has the types llama.cpp's own Q4_K_M file of that model has (checked against
// llama.cpp's llama_model_quantize in tests/gguf/llama/quantize_types.py), and `--pure` gives every matrix
// the base type (llama-quantize --pure).
//
// The rules (llama.cpp's src/llama-quant.cpp, llama_tensor_get_type_impl, release of node-llama-cpp
// 3.21.1), for the dense families qkv writes (no experts, no Falcon):
//   output.weight, and token_embd.weight when there is no output.weight: Q6_K (Q8_0 stays Q8_0; Q8_0 when
//     the rows are not whole blocks of the base type)
//   attn_v / attn_qkv of layer i of n (use_more_bits(i, n): i < n/8, i >= 7n/8 or (i - n/8) % 3 == 2):
//     Q2_K: Q4_K if n_head / n_head_kv >= 4 else Q3_K; Q3_K_M: Q5_K for i < 2, else Q4_K; Q3_K_L: Q5_K;
//     IQ4_NL, IQ4_XS: Q5_K if n_head / n_head_kv >= 4; Q4_K_M, Q5_K_M: Q6_K if use_more_bits;
//     Q4_K_S: Q5_K for i < 4; then, for a 70B model (llama: 80 layers with grouped K/V; qwen2: 80 layers),
//     Q3_K and Q4_K become Q5_K
//   ffn_down of layer i of n: Q2_K: Q3_K; Q3_K_M: Q5_K for i < n/16, else Q4_K; Q3_K_L: Q5_K;
//     Q4_K_M, Q5_K_M: Q6_K if use_more_bits; IQ4_NL, IQ4_XS: Q5_K for i < n/8; Q4_K_S: Q5_K for i < n/8
//   attn_output: Q2_K: Q3_K; Q3_K_M: Q4_K; Q3_K_L: Q5_K
//   everything else: the base type. Then, for rows that are not whole blocks of the chosen type,
//   gguf_tensor_type's fallbacks.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "qkv/io/gguf_quant.hpp"

namespace qkv::io {

struct GgufMix {
  std::string
      name;  // as llama-quantize names it: "Q4_K_M", "Q8_0", "F16"; a bare K type for qkv's own pure ones
  uint32_t file_type;  // general.file_type (llama.cpp's LLAMA_FTYPE_*)
  GgmlType base;       // the type of every matrix no rule names
  bool pure = false;   // every matrix `base` (llama-quantize --pure)
  int rules = -1;      // index in the rule table (-1: none: F32, F16, BF16, pure)
};

// Parses a --type name, case-insensitive: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k_s,
// q3_k_m, q3_k_l, q4_k_s, q4_k_m, q5_k_s, q5_k_m, q6_k, iq4_nl, iq4_xs (llama-quantize's mixes), and
// q3_k, q4_k, q5_k (every matrix that type: llama-quantize has no file type of these names). `pure`: every
// matrix the base type. nullopt for anything else.
std::optional<GgufMix> parse_gguf_mix(const std::string& name, bool pure);
// "f32, f16, …": every name parse_gguf_mix accepts, for usage messages.
std::string gguf_mix_names();

// llama.cpp's name of a general.file_type value ("Q4_K_M"), or "file type N" for one it does not name.
std::string gguf_file_type_name(int64_t file_type);

// What the rules need to know about the model.
struct GgufMixModel {
  std::string architecture;  // general.architecture
  int n_layer = 0, n_head = 1, n_head_kv = 1;
  bool tied = false;  // no output.weight: token_embd is also the unembedding
};

// The type of the 2-D tensor `name` (llama.cpp's name, "blk.3.attn_v.weight") with rows of ne0 values.
GgmlType gguf_mix_tensor_type(const GgufMix& mix, const GgufMixModel& model, const std::string& name,
                              uint64_t ne0);

// The type a 2-D tensor with rows of ne0 values gets when `requested` is asked for: llama-quantize's
// fallbacks when ne0 is not a whole number of blocks (IQ4_XS -> IQ4_NL, Q2_K / Q3_K -> Q4_0,
// Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0), then F16 (where llama-quantize stops with an error for
// the 32-value types, qkv keeps F16).
GgmlType gguf_tensor_type(GgmlType requested, uint64_t ne0);

}  // namespace qkv::io
