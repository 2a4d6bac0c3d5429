// The pieces several family rows share (common.hpp).
#include "model/families/common.hpp"

#include <algorithm>
#include <cmath>

#include "qkv/error.hpp"

namespace qkv::family_rows {

using nlohmann::json;

MlpKind activation(const ConfigKeys& k, const std::string& key, const std::string& fallback, bool gated) {
  const std::string a = k.string(key, fallback);
  if (gated) {
    if (a == "silu" || a == "swish") return MlpKind::SwiGLU;
    if (a == "gelu_pytorch_tanh" || a == "gelu_new" || a == "gelu_tanh") return MlpKind::GeGLU;
  } else {
    if (a == "gelu_new" || a == "gelu_pytorch_tanh" || a == "gelu_fast") return MlpKind::GeluTanh;
    if (a == "gelu") return MlpKind::Gelu;
  }
  data_error(k.where + ": config key \"" + key + "\" is \"" + a +
             "\", which qkv does not implement for this family (" +
             (gated ? "expected silu or gelu_pytorch_tanh" : "expected gelu_new or gelu") + ")");
}

// Phi-3's longrope, as Hugging Face computes it: the factor arrays from rope_scaling, the original length
// from the top level (its absence: max_position_embeddings, no extension), attention_factor from
// rope_scaling or else √(1 + ln(max / original) / ln(original)) (1 when max <= original). Needs a.n_ctx.
void read_longrope(const ConfigKeys& k, const ConfigKeys& sub, Arch& a) {
  RopeScaling& r = a.rope_scaling;
  r.type = "longrope";
  for (const char* key : {"short_factor", "long_factor"}) {
    const json* f = sub.find(key);
    if (!f || !f->is_array()) sub.wrong(key, "an array of numbers", f ? *f : json());
    std::vector<double>& out = std::string(key) == "short_factor" ? r.short_factor : r.long_factor;
    for (const json& x : *f) {
      if (!x.is_number()) sub.wrong(key, "an array of numbers", *f);
      out.push_back(x.get<double>());
    }
  }
  r.original_max_position_embeddings = k.integer("original_max_position_embeddings", a.n_ctx);
  if (r.original_max_position_embeddings < 1)
    data_error(k.where + ": config key \"original_max_position_embeddings\" must be >= 1");
  const double scale = double(a.n_ctx) / r.original_max_position_embeddings;
  const double original = r.original_max_position_embeddings;
  r.factor = scale;
  r.attention_factor = sub.find("attention_factor") ? sub.number("attention_factor", 1.0)
                       : scale <= 1                 ? 1.0
                                                    : std::sqrt(1 + std::log(scale) / std::log(original));
}

void read_rope(const ConfigKeys& k, Arch& a, const char* theta_key) {
  a.pos = PosKind::Rotary;
  a.rope_theta = k.number(theta_key, 10000.0);
  const json* rs = k.find("rope_scaling");
  if (!rs) return;
  if (!rs->is_object()) k.wrong("rope_scaling", "null or an object", *rs);
  std::string type;
  for (const char* key : {"rope_type", "type"})
    if (const auto it = rs->find(key); it != rs->end() && it->is_string()) type = it->get<std::string>();
  const std::string sub_where = k.where + ": rope_scaling";
  const ConfigKeys sub{*rs, sub_where};
  if (type == "default" || type.empty()) return;
  if (type == "linear") {
    a.rope_scaling.type = "linear";
    a.rope_scaling.factor = sub.number("factor", 1.0);
  } else if (type == "llama3") {
    a.rope_scaling.type = "llama3";
    a.rope_scaling.factor = sub.number("factor", 8.0);
    a.rope_scaling.low_freq_factor = sub.number("low_freq_factor", 1.0);
    a.rope_scaling.high_freq_factor = sub.number("high_freq_factor", 4.0);
    a.rope_scaling.original_max_position_embeddings = sub.integer("original_max_position_embeddings", 8192);
  } else if (type == "longrope" || type == "su") {  // "su": Phi-3's first configs' name for it
    read_longrope(k, sub, a);
  } else {
    data_error(k.where + ": config key \"rope_scaling\" has type \"" + type +
               "\", which qkv does not support (supported: default, linear, llama3, longrope)");
  }
}

void sliding(const ConfigKeys& k, Arch& a, bool every_layer) {
  const int w = k.integer("sliding_window", 0);
  if (w < 0) data_error(k.where + ": config key \"sliding_window\" is negative");
  a.window.assign(size_t(std::max(a.n_layer, 0)), 0);
  if (w > 0)
    for (int l = 0; l < a.n_layer; l++)
      if (every_layer || l % 2 == 0) a.window[size_t(l)] = w;
}

void read_llama_like(const ConfigKeys& k, Arch& a) {
  a.vocab_size = k.required_int("vocab_size");
  a.d = k.required_int("hidden_size");
  a.n_layer = k.required_int("num_hidden_layers");
  a.H = k.required_int("num_attention_heads");
  a.n_kv = k.integer("num_key_value_heads", a.H);
  a.dh = k.integer("head_dim", a.H > 0 ? a.d / a.H : 0);
  a.d_ff = k.required_int("intermediate_size");
  a.n_ctx = k.integer("max_position_embeddings", 2048);
  a.norm = NormKind::RMSNorm;
  a.norm_eps = k.number("rms_norm_eps", 1e-6);
  read_rope(k, a);
  a.rotary_dim = a.dh;
  a.qkv_layout = QkvLayout::Separate;
  a.qkv_bias = k.boolean("attention_bias", false);
  a.o_bias = a.qkv_bias;
  a.mlp_bias = k.boolean("mlp_bias", false);
  a.mlp = activation(k, "hidden_act", "silu", true);
  a.tied_embeddings = k.boolean("tie_word_embeddings", false);
}

void llama_like_tensors(const Arch& a, TensorList& t) {
  const int64_t d = a.d, V = a.vocab_size, q = a.q_dim(), kv = a.kv_dim(), ff = a.d_ff;
  t.add("model.embed_tokens.weight", {V, d}, Role::wte);
  for (int l = 0; l < a.n_layer; l++) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    t.add(p + "input_layernorm.weight", {d}, Role::ln1_w, l);
    if (a.qkv_layout == QkvLayout::Stacked) {
      t.add(p + "self_attn.qkv_proj.weight", {q + 2 * kv, d}, Role::wqkv, l);
    } else {
      t.add(p + "self_attn.q_proj.weight", {q, d}, Role::wq, l);
      t.add(p + "self_attn.k_proj.weight", {kv, d}, Role::wk, l);
      t.add(p + "self_attn.v_proj.weight", {kv, d}, Role::wv, l);
      if (a.qkv_bias) {
        t.add(p + "self_attn.q_proj.bias", {q}, Role::bq, l);
        t.add(p + "self_attn.k_proj.bias", {kv}, Role::bk, l);
        t.add(p + "self_attn.v_proj.bias", {kv}, Role::bv, l);
      }
    }
    t.add(p + "self_attn.o_proj.weight", {d, q}, Role::wo, l);
    if (a.o_bias) t.add(p + "self_attn.o_proj.bias", {d}, Role::bo, l);
    if (a.post_norms) {
      t.add(p + "post_attention_layernorm.weight", {d}, Role::post_attn_w, l);
      t.add(p + "pre_feedforward_layernorm.weight", {d}, Role::ln2_w, l);
      t.add(p + "post_feedforward_layernorm.weight", {d}, Role::post_mlp_w, l);
    } else {
      t.add(p + "post_attention_layernorm.weight", {d}, Role::ln2_w, l);
    }
    if (a.gate_up_fused) {
      t.add(p + "mlp.gate_up_proj.weight", {2 * ff, d}, Role::w_gate_up, l);
    } else {
      t.add(p + "mlp.gate_proj.weight", {ff, d}, Role::w_gate, l);
      t.add(p + "mlp.up_proj.weight", {ff, d}, Role::w_up, l);
      if (a.mlp_bias) {
        t.add(p + "mlp.gate_proj.bias", {ff}, Role::b_gate, l);
        t.add(p + "mlp.up_proj.bias", {ff}, Role::b_up, l);
      }
    }
    t.add(p + "mlp.down_proj.weight", {d, ff}, Role::w_down, l);
    if (a.mlp_bias) t.add(p + "mlp.down_proj.bias", {d}, Role::b_down, l);
  }
  t.add("model.norm.weight", {d}, Role::lnf_w);
  if (!a.tied_embeddings) t.add("lm_head.weight", {V, d}, Role::lm_head);
}

PresetSizes preset_sizes(bool tiny) {
  if (tiny) return {512, 64, 2, 4, 160, 128};
  return {32000, 768, 12, 12, 2048, 2048};
}

json llama_like_config(const std::string& type, const std::string& architecture, bool tiny) {
  const PresetSizes s = preset_sizes(tiny);
  return {{"model_type", type},
          {"architectures", {architecture}},
          {"vocab_size", s.V},
          {"hidden_size", s.d},
          {"num_hidden_layers", s.L},
          {"num_attention_heads", s.H},
          {"num_key_value_heads", tiny ? 2 : 4},
          {"intermediate_size", s.ff},
          {"max_position_embeddings", s.ctx},
          {"rms_norm_eps", 1e-6},
          {"rope_theta", 10000.0},
          {"hidden_act", "silu"},
          {"tie_word_embeddings", false},
          {"attention_bias", false},
          {"bos_token_id", 1},
          {"eos_token_id", 2},
          {"torch_dtype", "float32"}};
}

}  // namespace qkv::family_rows
