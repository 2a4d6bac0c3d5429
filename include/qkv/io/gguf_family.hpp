// Every family qkv writes as llama.cpp's GGUF architectures, both ways (implemented in src/model/
// gguf_family.cpp and gguf_tokenizer.cpp, the model layer, since they need Model and Tokenizer).
//
//   GGUF architecture   Hugging Face model_type        notes
//   gpt2                gpt2                           Conv1D matrices transposed; learned positions (F32)
//   llama               llama, mistral                 Q and K rows permuted (below)
//   qwen2               qwen2                          Q/K/V biases
//   gemma               gemma                          norm weights stored as 1 + w
//   gemma2              gemma2                         + post norms, soft-caps, sliding window
//   phi3                phi3                           fused attn_qkv and ffn_up (gate rows first)
//
// Tensor names as llama.cpp's converter (convert_hf_to_gguf.py) writes them: token_embd,
// position_embd (gpt2), blk.N.attn_norm (.weight, .bias), blk.N.attn_q / attn_k / attn_v (.weight, .bias),
// blk.N.attn_qkv (gpt2, phi3), blk.N.attn_output, blk.N.post_attention_norm (gemma2), blk.N.ffn_norm,
// blk.N.ffn_gate / ffn_up / ffn_down, blk.N.post_ffw_norm (gemma2), output_norm, output (absent when the
// embedding is tied). Matrices are stored as nn.Linear keeps them (ne[0] = in-features): GPT-2's Conv1D
// [in, out] matrices are transposed on write and loaded as [out, in] views.
//
// Tensor types as llama.cpp's converter and llama-quantize choose them: 1-D tensors and position_embd.weight
// F32 whatever the requested type; other 2-D weights as the requested file type says (io/gguf_mix.hpp:
// Q4_K_M gives some layers' attn_v and ffn_down Q6_K, the output Q6_K, …), with gguf_tensor_type's fallbacks.
// A model without a tokenizer is written with tokenizer.ggml.model = "none" and A.vocab_size (llama.cpp
// refuses a file without the key, and sizes its dummy vocabulary from A.vocab_size).
//
// The llama permutation: llama.cpp rotates adjacent pairs (2i, 2i + 1) ("NORM" rope), Hugging Face
// rotates (i, i + dh/2) (rotate_half). Its converter therefore reorders the rows of W_Q, W_K (and their
// biases) within each head: stored row 2i + s = Hugging Face row s·dh/2 + i (s = 0, 1). qkv undoes it on
// load (those two tensors are copied once, in their stored type), so a llama GGUF computes in Hugging
// Face's layout — hooks q/k, scores, patterns and logits equal the directory's bit for bit — and says so
// in Model::source.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "qkv/io/gguf.hpp"
#include "qkv/io/gguf_mix.hpp"
#include "qkv/lm.hpp"
#include "qkv/tokenizer.hpp"

namespace qkv {

// The GGUF architectures load_gguf_lm reads: gpt2, llama, qwen2, gemma, gemma2, phi3.
const std::vector<std::string>& gguf_family_architectures();

// The GGUF architecture a family is written as ("llama" for mistral); throws qkv::Error (Usage) naming
// the family for one qkv cannot write (gpt_neox, gpt_neo).
std::string gguf_architecture_of(const Arch& arch);

// The type each tensor was stored as, in file order.
struct GgufTensorChoice {
  std::string name;
  io::GgmlType type;
  std::vector<uint64_t> ne;
};

// Loads a GGUF of one of gguf_family_architectures(): the Arch from the metadata (gpt2: through the
// GPT-2 row of the family table, as its config.json would give it; qkv.attn_only = true for qkv's
// attention-only models), every tensor checked (name, dims, type) before anything is read; F32/F16/BF16
// tensors used in place when aligned, quantized ones kept as stored and dequantized per use. A gpt2
// file's output.weight is accepted only when it equals token_embd.weight (older converters wrote the tied
// copy). Throws qkv::Error naming the file and the key or tensor for a missing/out-of-range key, a
// missing/mis-shaped/unexpected tensor, an unsupported type, or NaN/Inf weights.
Model load_gguf_lm(const std::string& path);

// Writes `model` (any family gguf_architecture_of accepts) as llama.cpp lays that architecture out, its
// 2-D weights as `mix` says (io/gguf_mix.hpp; position_embd F32), 1-D tensors F32;
// and the tokenizer of `tokenizer_dir` (gguf_tokenizer_metadata), or tokenizer.ggml.model = "none" when
// it has none ("" for none). Atomic. Returns each tensor's type, in file order; `tokenizer_tokens`, when
// given, receives the tokenizer's own vocabulary size (0: none).
std::vector<GgufTensorChoice> save_gguf_lm(const Model& model, const std::string& tokenizer_dir,
                                           const std::string& path, const io::GgufMix& mix,
                                           const std::string& name = "", int* tokenizer_tokens = nullptr);
// Every matrix `type` (llama-quantize --pure; general.file_type the type's own or its _S mix's).
std::vector<GgufTensorChoice> save_gguf_lm(const Model& model, const std::string& tokenizer_dir,
                                           const std::string& path, io::GgmlType type,
                                           const std::string& name = "", int* tokenizer_tokens = nullptr);

// The tokenizer of dir as llama.cpp's converter stores it, from dir/tokenizer.json (+
// tokenizer_config.json), else GPT-2's own files (vocab.json + merges.txt, or encoder.json + vocab.bpe:
// model "gpt2", pre "gpt-2", tokens, token_type 3 for <|endoftext|>, merges, bos/eos/unknown =
// <|endoftext|>); from a tokenizer.json:
//  - byte-level BPE (GPT-2, Llama 3, Qwen2): tokenizer.ggml.model = "gpt2", pre = "gpt-2" / "llama-bpe"
//    / "qwen2" (from the pre-tokenizer's regex), tokens, token_type, merges;
//  - SentencePiece-style BPE (Metaspace/Prepend + byte_fallback: Llama 2, Mistral, Gemma):
//    model = "llama", tokens, scores, token_type (1 normal, 2 unknown, 3 control, 4 user-defined,
//    6 byte), add_space_prefix;
// plus bos/eos/unknown/padding ids and add_bos_token / add_eos_token. Rows beyond the tokenizer up to
// `vocab_size` are padded with "[PADn]" tokens of type 5 (unused), as llama.cpp does. Returns the
// tokenizer's own vocabulary size (before the padding), or 0 (writing nothing) when dir has no tokenizer
// files; throws qkv::Error naming the file and key for a tokenizer it cannot represent.
int gguf_tokenizer_metadata(io::GgufMetadata& md, const std::string& dir, int vocab_size);

// The tokenizer in a GGUF's metadata; nullopt when the file has no tokenizer.ggml.model key or it is
// "none". "gpt2" with pre "gpt-2" (or "default"): GPT-2's own pipeline, rebuilt as vocab.json +
// merges.txt (trailing [PADn] tokens of type 5 dropped), so a GPT-2 directory's tokenizer comes back as
// it was; "llama", and "gpt2" with another pre-tokenizer: gguf_hf_tokenizer. Throws qkv::Error naming
// the file and key for another tokenizer model or bad data.
std::optional<Tokenizer> gguf_tokenizer(const io::GgufFile& f);
std::optional<Tokenizer> gguf_tokenizer(const std::string& path);

// The tokenizer in a GGUF's metadata rebuilt as the Hugging Face tokenizer.json it came from and run by
// Tokenizer::from_hf_json.
Tokenizer gguf_hf_tokenizer(const io::GgufFile& f);
// Writes that rebuilt tokenizer.json + tokenizer_config.json into dir (qkv convert of a GGUF input).
void gguf_write_hf_tokenizer(const io::GgufFile& f, const std::string& dir);

}  // namespace qkv
