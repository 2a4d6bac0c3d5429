// GPT-NeoX (Pythia): LayerNorm with bias, partial rotary (rotary_pct), Q, K and V fused in one
// query_key_value whose output is viewed [H, 3, dh] (per head q, k, v), GELU (erf) MLP, parallel residual.
#include "model/families/common.hpp"

namespace qkv::family_rows {
namespace {

void read(const ConfigKeys& k, Arch& a) {
  a.vocab_size = k.required_int("vocab_size");
  a.d = k.required_int("hidden_size");
  a.n_layer = k.required_int("num_hidden_layers");
  a.H = a.n_kv = k.required_int("num_attention_heads");
  a.dh = a.H > 0 ? a.d / a.H : 0;
  a.d_ff = k.integer("intermediate_size", 4 * a.d);
  a.n_ctx = k.integer("max_position_embeddings", 2048);
  a.norm = NormKind::LayerNorm, a.norm_bias = true, a.norm_eps = k.number("layer_norm_eps", 1e-5);
  read_rope(k, a, k.has("rope_theta") ? "rope_theta" : "rotary_emb_base");
  a.rotary_dim = int(a.dh * k.number("rotary_pct", 0.25));
  a.qkv_layout = QkvLayout::NeoxPerHead;
  a.qkv_bias = a.o_bias = k.boolean("attention_bias", true);
  a.mlp_bias = true;
  a.mlp = activation(k, "hidden_act", "gelu", false);
  a.parallel_residual = k.boolean("use_parallel_residual", true);
  a.tied_embeddings = k.boolean("tie_word_embeddings", false);
}

void tensors(const Arch& a, TensorList& t) {
  const int64_t d = a.d, ff = a.d_ff;
  t.add("gpt_neox.embed_in.weight", {a.vocab_size, d}, Role::wte);
  for (int l = 0; l < a.n_layer; l++) {
    const std::string p = "gpt_neox.layers." + std::to_string(l) + ".";
    t.add(p + "input_layernorm.weight", {d}, Role::ln1_w, l);
    t.add(p + "input_layernorm.bias", {d}, Role::ln1_b, l);
    t.add(p + "post_attention_layernorm.weight", {d}, Role::ln2_w, l);
    t.add(p + "post_attention_layernorm.bias", {d}, Role::ln2_b, l);
    t.add(p + "attention.query_key_value.weight", {3 * d, d}, Role::wqkv, l);
    if (a.qkv_bias) t.add(p + "attention.query_key_value.bias", {3 * d}, Role::bqkv, l);
    t.add(p + "attention.dense.weight", {d, d}, Role::wo, l);
    if (a.o_bias) t.add(p + "attention.dense.bias", {d}, Role::bo, l);
    t.add(p + "mlp.dense_h_to_4h.weight", {ff, d}, Role::w_up, l);
    t.add(p + "mlp.dense_h_to_4h.bias", {ff}, Role::b_up, l);
    t.add(p + "mlp.dense_4h_to_h.weight", {d, ff}, Role::w_down, l);
    t.add(p + "mlp.dense_4h_to_h.bias", {d}, Role::b_down, l);
  }
  t.add("gpt_neox.final_layer_norm.weight", {d}, Role::lnf_w);
  t.add("gpt_neox.final_layer_norm.bias", {d}, Role::lnf_b);
  if (!a.tied_embeddings) t.add("embed_out.weight", {a.vocab_size, d}, Role::lm_head);
}

nlohmann::json default_config(bool tiny) {
  const PresetSizes s = preset_sizes(tiny);
  return {{"model_type", "gpt_neox"},
          {"architectures", {"GPTNeoXForCausalLM"}},
          {"vocab_size", s.V},
          {"hidden_size", s.d},
          {"num_hidden_layers", s.L},
          {"num_attention_heads", s.H},
          {"intermediate_size", 4 * s.d},
          {"max_position_embeddings", s.ctx},
          {"layer_norm_eps", 1e-5},
          {"rotary_pct", 0.25},
          {"rotary_emb_base", 10000},
          {"hidden_act", "gelu"},
          {"use_parallel_residual", true},
          {"tie_word_embeddings", false},
          {"bos_token_id", 0},
          {"eos_token_id", 0},
          {"torch_dtype", "float32"}};
}

}  // namespace

Family gpt_neox() {
  return {"gpt_neox", "GPT-NeoX (Pythia)", "GPTNeoXForCausalLM", "", "", read, tensors, default_config};
}

}  // namespace qkv::family_rows
