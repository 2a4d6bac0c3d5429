// GPT-Neo: learned positions, LayerNorm, separate q/k/v projections without biases, scores not divided by
// √dh, GELU (tanh) MLP, and attention_types alternating global and local (sliding-window) layers.
#include <algorithm>

#include "model/families/common.hpp"
#include "qkv/error.hpp"

namespace qkv::family_rows {
namespace {

// attention_types: [[["global", "local"], n], …] expands to one window per layer (0: global).
void read_windows(const ConfigKeys& k, Arch& a) {
  const int w = k.integer("window_size", 256);
  a.window.clear();
  const nlohmann::json* at = k.find("attention_types");
  if (!at) {
    a.window.assign(size_t(std::max(a.n_layer, 0)), 0);
    return;
  }
  if (!at->is_array()) k.wrong("attention_types", "a list of [[kinds…], repeat]", *at);
  for (const nlohmann::json& item : *at) {
    if (!item.is_array() || item.size() != 2 || !item[0].is_array() || !item[1].is_number_integer() ||
        item[1].get<int64_t>() < 0 || item[1].get<int64_t>() > 4096)
      k.wrong("attention_types", "a list of [[kinds…], repeat]", item);
    for (int64_t r = 0; r < item[1].get<int64_t>(); r++)
      for (const nlohmann::json& kind : item[0]) {
        if (kind == "global")
          a.window.push_back(0);
        else if (kind == "local")
          a.window.push_back(w);
        else
          k.wrong("attention_types", "\"global\" or \"local\"", kind);
      }
  }
  if (int(a.window.size()) != a.n_layer)
    data_error(k.where + ": config key \"attention_types\" expands to " + std::to_string(a.window.size()) +
               " layers, but num_layers is " + std::to_string(a.n_layer));
}

void read(const ConfigKeys& k, Arch& a) {
  a.vocab_size = k.required_int("vocab_size");
  a.d = k.required_int("hidden_size");
  a.n_layer = k.required_int("num_layers");
  a.H = a.n_kv = k.required_int("num_heads");
  a.dh = a.H > 0 ? a.d / a.H : 0;
  a.d_ff = k.integer("intermediate_size", 4 * a.d);
  a.n_ctx = k.integer("max_position_embeddings", 2048);
  a.norm = NormKind::LayerNorm, a.norm_bias = true, a.norm_eps = k.number("layer_norm_epsilon", 1e-5);
  a.pos = PosKind::Learned;
  a.qkv_layout = QkvLayout::Separate;
  a.qkv_bias = false, a.o_bias = true, a.mlp_bias = true;
  a.attn_scale = 1.0;  // GPT-Neo does not divide by √dh
  a.mlp = activation(k, "activation_function", "gelu_new", false);
  a.tied_embeddings = k.boolean("tie_word_embeddings", true);
  read_windows(k, a);
}

void tensors(const Arch& a, TensorList& t) {
  const int64_t d = a.d, ff = a.d_ff;
  t.add("transformer.wte.weight", {a.vocab_size, d}, Role::wte);
  t.add("transformer.wpe.weight", {a.n_ctx, d}, Role::wpe);
  for (int l = 0; l < a.n_layer; l++) {
    const std::string p = "transformer.h." + std::to_string(l) + ".";
    t.add(p + "ln_1.weight", {d}, Role::ln1_w, l);
    t.add(p + "ln_1.bias", {d}, Role::ln1_b, l);
    t.add(p + "attn.attention.q_proj.weight", {d, d}, Role::wq, l);
    t.add(p + "attn.attention.k_proj.weight", {d, d}, Role::wk, l);
    t.add(p + "attn.attention.v_proj.weight", {d, d}, Role::wv, l);
    t.add(p + "attn.attention.out_proj.weight", {d, d}, Role::wo, l);
    t.add(p + "attn.attention.out_proj.bias", {d}, Role::bo, l);
    t.add(p + "ln_2.weight", {d}, Role::ln2_w, l);
    t.add(p + "ln_2.bias", {d}, Role::ln2_b, l);
    t.add(p + "mlp.c_fc.weight", {ff, d}, Role::w_up, l);
    t.add(p + "mlp.c_fc.bias", {ff}, Role::b_up, l);
    t.add(p + "mlp.c_proj.weight", {d, ff}, Role::w_down, l);
    t.add(p + "mlp.c_proj.bias", {d}, Role::b_down, l);
  }
  t.add("transformer.ln_f.weight", {d}, Role::lnf_w);
  t.add("transformer.ln_f.bias", {d}, Role::lnf_b);
  if (!a.tied_embeddings) t.add("lm_head.weight", {a.vocab_size, d}, Role::lm_head);
}

nlohmann::json default_config(bool tiny) {
  const PresetSizes s = preset_sizes(tiny);
  return {{"model_type", "gpt_neo"},
          {"architectures", {"GPTNeoForCausalLM"}},
          {"vocab_size", s.V},
          {"hidden_size", s.d},
          {"num_layers", s.L},
          {"num_heads", s.H},
          {"intermediate_size", nullptr},
          {"max_position_embeddings", s.ctx},
          {"layer_norm_epsilon", 1e-5},
          {"activation_function", "gelu_new"},
          {"attention_types", {{{"global", "local"}, s.L / 2}}},
          {"window_size", tiny ? 8 : 256},
          {"bos_token_id", 50256},
          {"eos_token_id", 50256},
          {"torch_dtype", "float32"}};
}

}  // namespace

Family gpt_neo() {
  return {"gpt_neo", "GPT-Neo", "GPTNeoForCausalLM", "", "", read, tensors, default_config};
}

}  // namespace qkv::family_rows
