// What several families' rows share (src/model/families/*.cpp): activation names, rotary keys, sliding
// windows, and the Llama-style core (reader, tensors, default config) that six families build on.
#pragma once
#include <string>
#include <nlohmann/json.hpp>

#include "qkv/family.hpp"

namespace qkv::family_rows {

// hidden_act-style key -> the MLP kind (gated: SwiGLU / GeGLU; else GELU tanh / erf); error naming the key.
MlpKind activation(const ConfigKeys& k, const std::string& key, const std::string& fallback, bool gated);
// Rotary positions: θ from `theta_key`, rope_scaling (default, linear, llama3).
void read_rope(const ConfigKeys& k, Arch& a, const char* theta_key = "rope_theta");
// sliding_window on every layer, or on even layers only (Gemma 2).
void sliding(const ConfigKeys& k, Arch& a, bool every_layer);

// The Llama-style core: names, heads, RMSNorm, rotary, SwiGLU, separate q/k/v_proj, optional biases.
void read_llama_like(const ConfigKeys& k, Arch& a);
// model.embed_tokens, model.layers.{l}.{input_layernorm, self_attn.*, post_attention_layernorm, mlp.*},
// model.norm, lm_head — with Phi-3's stacked qkv_proj and gate_up_proj and Gemma 2's post-norms as the
// Arch says.
void llama_like_tensors(const Arch& a, TensorList& t);
// A Llama-style config.json of this model_type and architecture name; rows tweak it.
nlohmann::json llama_like_config(const std::string& model_type, const std::string& architecture, bool tiny);

// Sizes every default config shares: tiny (tests) or small (benchmarks).
struct PresetSizes {
  int V, d, L, H, ff, ctx;
};
PresetSizes preset_sizes(bool tiny);

// The rows, one per family file.
Family gpt2();
Family llama();
Family mistral();
Family qwen2();
Family gemma();
Family gemma2();
Family gpt_neox();
Family phi3();
Family gpt_neo();

}  // namespace qkv::family_rows
