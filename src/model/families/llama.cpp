// Llama (2, 3, 3.1's llama3 rope scaling; SmolLM, TinyLlama), Mistral (a sliding window on every layer)
// and Qwen2 (biases on Q, K and V only): the Llama-style core of common.cpp with their deltas.
#include "model/families/common.hpp"
#include "qkv/error.hpp"

namespace qkv::family_rows {
namespace {

void read_llama(const ConfigKeys& k, Arch& a) {
  read_llama_like(k, a);
}

void read_mistral(const ConfigKeys& k, Arch& a) {
  read_llama_like(k, a);
  sliding(k, a, true);
}

void read_qwen2(const ConfigKeys& k, Arch& a) {
  read_llama_like(k, a);
  a.qkv_bias = true;  // Qwen2: biases on Q, K and V only
  a.o_bias = false;
  if (k.boolean("use_sliding_window", false))
    data_error(k.where +
               ": config key \"use_sliding_window\" is true; qkv does not implement Qwen2's per-layer "
               "sliding windows (max_window_layers)");
}

nlohmann::json llama_config(bool tiny) {
  nlohmann::json j = llama_like_config("llama", "LlamaForCausalLM", tiny);
  j["rope_scaling"] = nullptr;
  j["mlp_bias"] = false;
  return j;
}

nlohmann::json mistral_config(bool tiny) {
  nlohmann::json j = llama_like_config("mistral", "MistralForCausalLM", tiny);
  j["sliding_window"] = tiny ? 16 : 4096;
  return j;
}

nlohmann::json qwen2_config(bool tiny) {
  nlohmann::json j = llama_like_config("qwen2", "Qwen2ForCausalLM", tiny);
  j["use_sliding_window"] = false;
  j["tie_word_embeddings"] = true;
  j["rope_theta"] = 1000000.0;
  return j;
}

}  // namespace

Family llama() {
  return {"llama",
          "Llama (2, 3, 3.1; SmolLM, TinyLlama)",
          "LlamaForCausalLM",
          "llama",
          "",
          read_llama,
          llama_like_tensors,
          llama_config};
}
Family mistral() {
  return {"mistral", "Mistral",    "MistralForCausalLM", "llama",
          "",        read_mistral, llama_like_tensors,   mistral_config};
}
Family qwen2() {
  return {"qwen2", "Qwen2", "Qwen2ForCausalLM", "qwen2", "", read_qwen2, llama_like_tensors, qwen2_config};
}

}  // namespace qkv::family_rows
