// The modern families as llama.cpp's GGUF architectures, both ways (implemented in src/model/
// gguf_family.cpp and gguf_tokenizer.cpp, the model layer, since they need Model and Tokenizer).
//
//   GGUF architecture   Hugging Face model_type        notes
//   llama               llama, mistral                 Q and K rows permuted (below)
//   qwen2               qwen2                          Q/K/V biases
//   gemma               gemma                          norm weights stored as 1 + w
//   gemma2              gemma2                         + post norms, soft-caps, sliding window
//   phi3                phi3                           fused attn_qkv and ffn_up (gate rows first)
//
// Tensor names as llama.cpp's converter (convert_hf_to_gguf.py) writes them: token_embd, blk.N.attn_norm,
// blk.N.attn_q / attn_k / attn_v (.weight, .bias), blk.N.attn_qkv (phi3), blk.N.attn_output,
// blk.N.post_attention_norm (gemma2), blk.N.ffn_norm, blk.N.ffn_gate / ffn_up / ffn_down,
// blk.N.post_ffw_norm (gemma2), output_norm, output (absent when the embedding is tied). Matrices are
// stored as nn.Linear keeps them (ne[0] = in-features).
//
// The llama permutation: llama.cpp rotates adjacent pairs (2i, 2i + 1) ("NORM" rope), Hugging Face
// rotates (i, i + dh/2) (rotate_half). Its converter therefore reorders the rows of W_Q, W_K (and their
// biases) within each head: stored row 2i + s = Hugging Face row s·dh/2 + i (s = 0, 1). qkv undoes it on
// load (those two tensors are copied once, in their stored type), so a llama GGUF computes in Hugging
// Face's layout — hooks q/k, scores, patterns and logits equal the directory's bit for bit — and says so
// in Model::source.
#pragma once
#include <string>
#include <vector>

#include "qkv/io/gguf.hpp"
#include "qkv/io/gguf_gpt2.hpp"
#include "qkv/lm.hpp"
#include "qkv/tokenizer.hpp"

namespace qkv {

// The GGUF architectures load_gguf_lm reads: llama, qwen2, gemma, gemma2, phi3.
const std::vector<std::string>& gguf_family_architectures();

// The GGUF architecture a family is written as ("llama" for mistral); throws qkv::Error (Usage) naming
// the family for one qkv cannot write (gpt_neox, gpt_neo; gpt2 goes through save_gguf_gpt2).
std::string gguf_architecture_of(const Arch& arch);

// Loads a GGUF of one of gguf_family_architectures(): the Arch from the metadata, every tensor checked
// (name, dims, type) before anything is read; F32/F16/BF16 tensors used in place when aligned, quantized
// ones dequantized once into fp32 (tensor by tensor). Throws qkv::Error naming the file and the key or
// tensor for a missing/out-of-range key, a missing/mis-shaped/unexpected tensor, an unsupported type,
// or NaN/Inf weights.
Model load_gguf_lm(const std::string& path);

// Writes `model` (any family gguf_architecture_of accepts) as llama.cpp lays that architecture out, its
// 2-D weights as `type` (with the fallbacks of gguf_gpt2_tensor_type), 1-D tensors F32; and, when
// `tokenizer_dir` holds a tokenizer.json, its tokenizer as tokenizer.ggml.* metadata
// (gguf_tokenizer_metadata). Atomic. Returns each tensor's type, in file order.
std::vector<GgufTensorChoice> save_gguf_lm(const Model& model, const std::string& tokenizer_dir,
                                           const std::string& path, io::GgmlType type,
                                           const std::string& name = "");

// The tokenizer of dir/tokenizer.json (+ tokenizer_config.json) as llama.cpp's converter stores it:
//  - byte-level BPE (GPT-2, Llama 3, Qwen2): tokenizer.ggml.model = "gpt2", pre = "gpt-2" / "llama-bpe"
//    / "qwen2" (from the pre-tokenizer's regex), tokens, token_type, merges;
//  - SentencePiece-style BPE (Metaspace/Prepend + byte_fallback: Llama 2, Mistral, Gemma):
//    model = "llama", tokens, scores, token_type (1 normal, 2 unknown, 3 control, 4 user-defined,
//    6 byte), add_space_prefix;
// plus bos/eos/unknown/padding ids and add_bos_token / add_eos_token. Rows beyond the tokenizer up to
// `vocab_size` are padded with "[PADn]" tokens of type 5 (unused), as llama.cpp does. Returns false
// (writing nothing) when dir has no tokenizer.json; throws qkv::Error naming the file and key for a
// tokenizer.json it cannot represent.
bool gguf_tokenizer_metadata(io::GgufMetadata& md, const std::string& dir, int vocab_size);

// The tokenizer in a GGUF's metadata for tokenizer.ggml.model "llama", or "gpt2" with a pre-tokenizer
// other than "gpt-2" (those two go through gguf_tokenizer(), which handles GPT-2's own): rebuilt as the
// Hugging Face tokenizer.json it came from and run by Tokenizer::from_hf_json.
Tokenizer gguf_hf_tokenizer(const io::GgufFile& f);
// Writes that rebuilt tokenizer.json + tokenizer_config.json into dir (qkv convert of a GGUF input).
void gguf_write_hf_tokenizer(const io::GgufFile& f, const std::string& dir);

}  // namespace qkv
