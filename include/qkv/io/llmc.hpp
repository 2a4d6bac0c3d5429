// llm.c's GPT-2 checkpoint (gpt2_*.bin): 256 int32 header
//   [0] 20240326 magic, [1] version (3 = fp32, 5 = bf16), [2] max_seq_len, [3] vocab_size,
//   [4] num_layers, [5] num_heads, [6] channels, [7] padded_vocab_size,
// then the parameters, each kind for all layers at once, matrices stored [out, in]:
//   wte (Vp, C), wpe (maxT, C), ln1w (L, C), ln1b (L, C), qkvw (L, 3C, C), qkvb (L, 3C),
//   attprojw (L, C, C), attprojb (L, C), ln2w (L, C), ln2b (L, C), fcw (L, 4C, C), fcb (L, 4C),
//   fcprojw (L, C, 4C), fcprojb (L, C), lnfw (C), lnfb (C).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "qkv/config.hpp"

namespace qkv::io {

struct NamedTensor {
  std::string name;  // Hugging Face GPT-2 name without "transformer.", e.g. "h.0.attn.c_attn.weight"
  std::vector<int64_t> shape;
  std::vector<float> data;
};

struct LlmcCheckpoint {
  GPT2Config config;  // n_inner = 0 (4 * n_embd), layer_norm_epsilon = 1e-5, attn_only = false
  int version;        // 3 or 5
  int padded_vocab_size;
  std::vector<NamedTensor> tensors;  // Hugging Face names and layout ([in, out] Conv1D weights)
};

// Where each tensor lies in an llm.c file, once the header and the file size have been checked: its
// Hugging Face name, its shape as llm.c stores it (matrices [out, in]; wte only its first vocab_size of
// padded_vocab_size rows) and the index of its first parameter after the header. Views of the file need
// nothing more (load_lm maps the file and reads the tensors in place: llm.c's [out, in] is nn.Linear's).
struct LlmcTensor {
  std::string name;                   // Hugging Face name, as in LlmcCheckpoint
  std::vector<int64_t> stored_shape;  // as llm.c stores it
  int64_t index = 0;                  // first parameter's index (bytes: 1024 + index * element size)
  bool transposed = false;            // Hugging Face holds it [in, out] (Conv1D), llm.c [out, in]
};
struct LlmcLayout {
  GPT2Config config;
  int version = 0;  // 3 fp32, 5 bf16
  int padded_vocab_size = 0;
  std::vector<LlmcTensor> tensors;  // Hugging Face order, as read_llmc returns them
};
LlmcLayout llmc_layout(const unsigned char* data, int64_t size, const std::string& path);

// Tensors in order wte.weight [V, C] (padding rows dropped), wpe.weight [maxT, C], then per layer
// h.{l}.ln_1.{weight,bias} [C], attn.c_attn.weight [C, 3C], attn.c_attn.bias [3C],
// attn.c_proj.weight [C, C], attn.c_proj.bias [C], ln_2.{weight,bias} [C], mlp.c_fc.weight [C, 4C],
// mlp.c_fc.bias [4C], mlp.c_proj.weight [4C, C], mlp.c_proj.bias [C], then ln_f.{weight,bias} [C].
// The file size must equal exactly what the header implies; it is checked before anything is allocated.
LlmcCheckpoint read_llmc(const std::string& path);

// The inverse: `get(hf_name)` returns the tensor in Hugging Face layout (names as above); weights are
// transposed back to [out, in], wte is padded with zero rows to `padded_vocab_size`, and version 5
// stores bf16 rounded to nearest even. Configs llm.c cannot express (attn_only, n_inner != 4 * n_embd)
// are rejected. Atomic.
void write_llmc(const std::string& path, const GPT2Config& config,
                const std::function<const float*(const std::string& hf_name)>& get, int version,
                int padded_vocab_size);

}  // namespace qkv::io
