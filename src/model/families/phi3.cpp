// Phi-3: the Llama-style core with Q, K and V stacked in one qkv_proj ([Q; K; V] rows), gate and up fused in
// gate_up_proj, partial rotary, a sliding window on every layer, no biases.
#include "model/families/common.hpp"

namespace qkv::family_rows {
namespace {

void read(const ConfigKeys& k, Arch& a) {
  read_llama_like(k, a);
  a.qkv_layout = QkvLayout::Stacked;
  a.gate_up_fused = true;
  a.qkv_bias = a.o_bias = a.mlp_bias = false;
  a.rotary_dim = int(a.dh * k.number("partial_rotary_factor", 1.0));
  sliding(k, a, true);
}

nlohmann::json default_config(bool tiny) {
  nlohmann::json j = llama_like_config("phi3", "Phi3ForCausalLM", tiny);
  j["num_key_value_heads"] = preset_sizes(tiny).H;
  j["sliding_window"] = tiny ? 12 : 2047;
  if (tiny) j["partial_rotary_factor"] = 0.5;
  return j;
}

}  // namespace

Family phi3() {
  return {"phi3", "Phi-3", "Phi3ForCausalLM", "phi3", "", read, llama_like_tensors, default_config};
}

}  // namespace qkv::family_rows
