// GPT-2 checkpoints as llama.cpp's `gpt2` GGUF architecture, both ways (implemented in src/model/
// gguf_gpt2.cpp, the model layer, since it needs GPT2 and Tokenizer).
//
// Names and layout as llama.cpp's convert_hf_to_gguf.py (GPT2Model) writes them:
//   wte → token_embd.weight, wpe → position_embd.weight, ln_f → output_norm,
//   h.N.ln_1 → blk.N.attn_norm, h.N.attn.c_attn → blk.N.attn_qkv, h.N.attn.c_proj → blk.N.attn_output,
//   h.N.ln_2 → blk.N.ffn_norm, h.N.mlp.c_fc → blk.N.ffn_up, h.N.mlp.c_proj → blk.N.ffn_down.
// HF's Conv1D weights ([in, out]) are transposed to [out, in], so ne[0] = in-features as llama.cpp
// stores them. Metadata: general.architecture = "gpt2", gpt2.{block_count, context_length,
// embedding_length, feed_forward_length, attention.head_count, attention.layer_norm_epsilon},
// general.file_type, general.quantization_version, and, when the model has a tokenizer,
// tokenizer.ggml.{model = "gpt2", pre = "gpt-2", tokens, token_type, merges, bos/eos/unknown_token_id}.
// qkv's attention-only models add the key qkv.attn_only = true (llama.cpp cannot run those).
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "qkv/io/gguf.hpp"
#include "qkv/model.hpp"
#include "qkv/tokenizer.hpp"

namespace qkv {

// The type each tensor was stored as (quantized types fall back when ne[0] is not a whole number of
// blocks: Q4_K → Q4_0 → F16, Q6_K → Q8_0 → F16, Q8_0/Q4_0 → F16; 1-D tensors always stay F32).
struct GgufTensorChoice {
  std::string name;
  io::GgmlType type;
  std::vector<uint64_t> ne;
};

// The type a 2-D tensor with rows of ne0 values gets when `requested` is asked for.
io::GgmlType gguf_gpt2_tensor_type(io::GgmlType requested, uint64_t ne0);

// Writes `model` (and `tokenizer`'s vocabulary and merges, when given) as a gpt2 GGUF at `path`
// (atomically). Returns the type chosen for each tensor, in file order.
std::vector<GgufTensorChoice> save_gguf_gpt2(const GPT2& model, const Tokenizer* tokenizer,
                                             const std::string& path, io::GgmlType type,
                                             const std::string& name = "");

// Loads a gpt2 GGUF, dequantizing every tensor (tensor by tensor, row by row) into GPT2's fp32 table.
// Throws qkv::Error naming the file and key or tensor when the architecture is not gpt2, a key is
// missing or out of range, a tensor is missing, has the wrong shape or an unsupported type, an
// unexpected tensor is present (output.weight is accepted only when it equals token_embd.weight),
// or a weight is NaN/Inf.
GPT2 load_gguf_gpt2(const std::string& path);

// The tokenizer in the GGUF metadata (tokenizer.ggml.model = "gpt2": tokens + merges); nullopt when the
// file has no tokenizer.ggml.model key. Trailing [PAD…] tokens of type UNUSED (llama.cpp's padding up to
// the model's vocab_size) are dropped. Throws naming the key for another tokenizer model or bad data.
std::optional<Tokenizer> gguf_tokenizer(const io::GgufFile& f);
std::optional<Tokenizer> gguf_tokenizer(const std::string& path);

}  // namespace qkv
