// Each family's config.json reader and tensor-name table (arch.hpp). A family is a few deltas from the
// description; nothing else in qkv knows family names.
#include "qkv/arch.hpp"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <map>
#include <cmath>

#include "qkv/error.hpp"
#include "io/io_util.hpp"
#include "qkv/io/config_json.hpp"

namespace qkv {

using nlohmann::json;

namespace {

std::string describe(const json& v) { return io::detail::describe_json(v); }

// Typed reads of config keys: absent -> fallback; present with the wrong type -> error naming the key.
struct Keys {
  const json& j;
  const std::string& where;
  [[noreturn]] void wrong(const std::string& key, const char* expected, const json& v) const {
    data_error(where + ": config key \"" + key + "\": expected " + expected + ", found " + describe(v));
  }
  const json* find(const std::string& key) const {
    const auto it = j.find(key);
    return it == j.end() || it->is_null() ? nullptr : &*it;
  }
  bool has(const std::string& key) const { return find(key) != nullptr; }
  int integer(const std::string& key, int fallback) const {
    const json* v = find(key);
    if (!v) return fallback;
    if (!v->is_number_integer()) wrong(key, "an integer", *v);
    if (v->is_number_unsigned() ? v->get<uint64_t>() > uint64_t(INT_MAX)
                                : (v->get<int64_t>() < INT_MIN || v->get<int64_t>() > INT_MAX))
      wrong(key, "an integer in the 32-bit range", *v);
    return v->get<int>();
  }
  int required_int(const std::string& key) const {
    if (!has(key)) data_error(where + ": config key \"" + key + "\" is missing");
    return integer(key, 0);
  }
  double number(const std::string& key, double fallback) const {
    const json* v = find(key);
    if (!v) return fallback;
    if (!v->is_number()) wrong(key, "a number", *v);
    return v->get<double>();
  }
  bool boolean(const std::string& key, bool fallback) const {
    const json* v = find(key);
    if (!v) return fallback;
    if (!v->is_boolean()) wrong(key, "true or false", *v);
    return v->get<bool>();
  }
  std::string string(const std::string& key, const std::string& fallback) const {
    const json* v = find(key);
    if (!v) return fallback;
    if (!v->is_string()) wrong(key, "a string", *v);
    return v->get<std::string>();
  }
};

MlpKind activation(const Keys& k, const std::string& key, const std::string& fallback, bool gated) {
  const std::string a = k.string(key, fallback);
  if (gated) {
    if (a == "silu" || a == "swish") return MlpKind::SwiGLU;
    if (a == "gelu_pytorch_tanh" || a == "gelu_new" || a == "gelu_tanh") return MlpKind::GeGLU;
  } else {
    if (a == "gelu_new" || a == "gelu_pytorch_tanh" || a == "gelu_fast") return MlpKind::GeluTanh;
    if (a == "gelu") return MlpKind::Gelu;
  }
  data_error(k.where + ": config key \"" + key + "\" is \"" + a + "\", which qkv does not implement for this family (" +
             (gated ? "expected silu or gelu_pytorch_tanh" : "expected gelu_new or gelu") + ")");
}

void read_rope(const Keys& k, Arch& a, const char* theta_key = "rope_theta") {
  a.pos = PosKind::Rotary;
  a.rope_theta = k.number(theta_key, 10000.0);
  const json* rs = k.find("rope_scaling");
  if (!rs) return;
  if (!rs->is_object()) k.wrong("rope_scaling", "null or an object", *rs);
  std::string type;
  for (const char* key : {"rope_type", "type"})
    if (const auto it = rs->find(key); it != rs->end() && it->is_string()) type = it->get<std::string>();
  const Keys sub{*rs, k.where + ": rope_scaling"};
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
  } else {
    data_error(k.where + ": config key \"rope_scaling\" has type \"" + type +
               "\", which qkv does not support (supported: default, linear, llama3)");
  }
}

// The Llama-style core most families share: names, heads, RMSNorm, rotary, SwiGLU.
void read_llama_like(const Keys& k, Arch& a) {
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

void sliding(const Keys& k, Arch& a, bool every_layer) {
  const int w = k.integer("sliding_window", 0);
  if (w < 0) data_error(k.where + ": config key \"sliding_window\" is negative");
  a.window.assign(size_t(std::max(a.n_layer, 0)), 0);
  if (w > 0)
    for (int l = 0; l < a.n_layer; l++)
      if (every_layer || l % 2 == 0) a.window[size_t(l)] = w;
}

Arch read_gpt2(const json& j, const std::string& where) {
  const GPT2Config c = io::config_from_json(j, where);
  Arch a;
  a.vocab_size = c.vocab_size, a.d = c.n_embd, a.n_layer = c.n_layer, a.n_ctx = c.n_positions;
  a.H = a.n_kv = c.n_head, a.dh = c.head_dim();
  a.d_ff = c.attn_only ? 0 : c.mlp_dim();
  a.norm = NormKind::LayerNorm, a.norm_bias = true, a.norm_eps = c.layer_norm_epsilon;
  a.pos = PosKind::Learned;
  a.qkv_layout = QkvLayout::Gpt2Thirds;
  a.qkv_bias = a.o_bias = a.mlp_bias = true;
  a.mlp = c.attn_only ? MlpKind::None : MlpKind::GeluTanh;
  a.tied_embeddings = true;
  return a;
}

Arch read_family(const json& j, const std::string& where, const std::string& type) {
  const Keys k{j, where};
  Arch a;
  if (type == "gpt2") return read_gpt2(j, where);
  if (type == "llama" || type == "mistral" || type == "qwen2") {
    read_llama_like(k, a);
    if (type == "mistral") sliding(k, a, true);
    if (type == "qwen2") {
      a.qkv_bias = true;  // Qwen2: biases on Q, K and V only
      a.o_bias = false;
      if (k.boolean("use_sliding_window", false))
        data_error(where + ": config key \"use_sliding_window\" is true; qkv does not implement Qwen2's per-layer "
                           "sliding windows (max_window_layers)");
    }
  } else if (type == "gemma" || type == "gemma2") {
    read_llama_like(k, a);
    a.norm = NormKind::RMSNormPlusOne;
    a.embed_scale = true;
    a.tied_embeddings = k.boolean("tie_word_embeddings", true);
    a.mlp = activation(k, k.has("hidden_activation") ? "hidden_activation" : "hidden_act", "gelu_pytorch_tanh", true);
    if (type == "gemma2") {
      a.post_norms = true;
      a.attn_scale = 1.0 / std::sqrt(k.number("query_pre_attn_scalar", a.dh));
      a.attn_softcap = k.number("attn_logit_softcapping", 0.0);
      a.final_softcap = k.number("final_logit_softcapping", 0.0);
      sliding(k, a, false);
    }
  } else if (type == "phi3") {
    read_llama_like(k, a);
    a.qkv_layout = QkvLayout::Stacked;
    a.gate_up_fused = true;
    a.qkv_bias = a.o_bias = a.mlp_bias = false;
    a.rotary_dim = int(a.dh * k.number("partial_rotary_factor", 1.0));
    sliding(k, a, true);
  } else if (type == "gpt_neox") {
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
  } else if (type == "gpt_neo") {
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
    // attention_types: [[["global", "local"], n], …] expands to one kind per layer.
    const int w = k.integer("window_size", 256);
    a.window.clear();
    if (const json* at = k.find("attention_types")) {
      if (!at->is_array()) k.wrong("attention_types", "a list of [[kinds…], repeat]", *at);
      for (const json& item : *at) {
        if (!item.is_array() || item.size() != 2 || !item[0].is_array() || !item[1].is_number_integer() ||
            item[1].get<int64_t>() < 0 || item[1].get<int64_t>() > 4096)
          k.wrong("attention_types", "a list of [[kinds…], repeat]", item);
        for (int64_t r = 0; r < item[1].get<int64_t>(); r++)
          for (const json& kind : item[0]) {
            if (kind == "global") a.window.push_back(0);
            else if (kind == "local") a.window.push_back(w);
            else k.wrong("attention_types", "\"global\" or \"local\"", kind);
          }
      }
      if (int(a.window.size()) != a.n_layer)
        data_error(where + ": config key \"attention_types\" expands to " + std::to_string(a.window.size()) +
                   " layers, but num_layers is " + std::to_string(a.n_layer));
    } else {
      a.window.assign(size_t(std::max(a.n_layer, 0)), 0);
    }
  }
  return a;
}

}  // namespace

std::vector<double> rope_inv_freq(const Arch& a) {
  const int half = a.rotary_dim / 2;
  std::vector<double> inv(static_cast<size_t>(half));
  for (int i = 0; i < half; i++) inv[size_t(i)] = 1.0 / std::pow(a.rope_theta, double(2 * i) / a.rotary_dim);
  const RopeScaling& s = a.rope_scaling;
  if (s.type == "linear") {
    for (auto& f : inv) f /= s.factor;
  } else if (s.type == "llama3") {
    // Llama 3.1: long wavelengths slowed by `factor`, short ones kept, a smooth blend between.
    const double old = s.original_max_position_embeddings;
    const double low_wl = old / s.low_freq_factor, high_wl = old / s.high_freq_factor;
    for (auto& f : inv) {
      const double wl = 2 * M_PI / f;
      if (wl > low_wl) {
        f = f / s.factor;
      } else if (wl >= high_wl) {
        const double smooth = (old / wl - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        f = (1 - smooth) * f / s.factor + smooth * f;
      }
    }
  }
  return inv;
}

const std::vector<std::string>& supported_model_types() {
  static const std::vector<std::string> t = {"gpt2", "llama", "mistral", "qwen2", "gemma",
                                             "gemma2", "gpt_neox", "phi3", "gpt_neo"};
  return t;
}

Arch arch_from_config(const json& j, const std::string& where) {
  if (!j.is_object()) data_error(where + ": config: expected a JSON object, found " + describe(j));
  const Keys k{j, where};
  const std::string type = k.string("model_type", "gpt2");
  bool known = false;
  for (const auto& t : supported_model_types()) known = known || t == type;
  if (!known) {
    std::string list;
    for (const auto& t : supported_model_types()) list += (list.empty() ? "" : ", ") + t;
    data_error(where + ": config key \"model_type\" is \"" + type + "\", which qkv does not support (supported: " +
               list + ")");
  }
  Arch a = read_family(j, where, type);
  a.model_type = type;
  if (const auto it = j.find("architectures"); it != j.end() && it->is_array() && !it->empty() && (*it)[0].is_string())
    a.architecture = (*it)[0].get<std::string>();
  if (a.attn_scale == 0 && a.dh > 0) a.attn_scale = 1.0 / std::sqrt(double(a.dh));
  if (a.window.empty()) a.window.assign(size_t(std::max(a.n_layer, 0)), 0);
  a.validate(where);
  return a;
}

void Arch::validate(const std::string& where) const {
  auto bad = [&](const std::string& key, long long v, const std::string& want) {
    data_error(where + ": " + key + " is " + std::to_string(v) + ", expected " + want);
  };
  if (vocab_size < 1 || vocab_size > (1 << 24)) bad("vocab_size", vocab_size, "1 .. 16777216");
  if (d < 1 || d > (1 << 16)) bad("hidden size", d, "1 .. 65536");
  if (n_layer < 1 || n_layer > 1024) bad("the layer count", n_layer, "1 .. 1024");
  if (n_ctx < 1 || n_ctx > (1 << 24)) bad("the context length", n_ctx, "1 .. 16777216");
  if (H < 1 || H > 4096) bad("num_attention_heads", H, "1 .. 4096");
  if (n_kv < 1 || n_kv > H) bad("num_key_value_heads", n_kv, "1 .. num_attention_heads (" + std::to_string(H) + ")");
  if (H % n_kv != 0)
    data_error(where + ": num_key_value_heads " + std::to_string(n_kv) + " does not divide num_attention_heads " +
               std::to_string(H) + " (each key/value head serves a whole group of query heads)");
  if (dh < 1 || dh > (1 << 16)) bad("head_dim", dh, "1 .. 65536");
  if ((qkv_layout == QkvLayout::Gpt2Thirds || qkv_layout == QkvLayout::NeoxPerHead) && H * dh != d)
    data_error(where + ": head_dim " + std::to_string(dh) + " × " + std::to_string(H) + " heads != hidden size " +
               std::to_string(d) + " (this family's fused Q/K/V layout requires it)");
  if (mlp != MlpKind::None && (d_ff < 1 || d_ff > (1 << 20))) bad("intermediate_size", d_ff, "1 .. 1048576");
  if (!(norm_eps > 0 && norm_eps < 1)) data_error(where + ": the norm epsilon is " + std::to_string(norm_eps) + ", expected (0, 1)");
  if (pos == PosKind::Rotary) {
    if (rotary_dim < 2 || rotary_dim > dh || rotary_dim % 2)
      bad("the rotary dimension", rotary_dim, "an even number in 2 .. head_dim (" + std::to_string(dh) + ")");
    if (!(rope_theta > 1)) data_error(where + ": rope_theta is " + std::to_string(rope_theta) + ", expected > 1");
    if (rope_scaling.type != "" && !(rope_scaling.factor > 0))
      data_error(where + ": rope_scaling.factor must be > 0");
    if (rope_scaling.type == "llama3" && !(rope_scaling.high_freq_factor > rope_scaling.low_freq_factor))
      data_error(where + ": rope_scaling: high_freq_factor must exceed low_freq_factor");
  }
  if (!(attn_scale > 0) || !std::isfinite(attn_scale)) data_error(where + ": the attention scale must be > 0");
  if (attn_softcap < 0 || final_softcap < 0) data_error(where + ": soft-caps must be >= 0");
  if (int(window.size()) != n_layer) data_error(where + ": one window per layer expected");
}

std::vector<std::string> Arch::describe() const {
  auto norm_name = [&] {
    switch (norm) {
      case NormKind::LayerNorm: return std::string(norm_bias ? "LayerNorm (weight and bias)" : "LayerNorm (no bias)");
      case NormKind::RMSNorm: return std::string("RMSNorm x/rms(x)·w");
      case NormKind::RMSNormPlusOne: return std::string("RMSNorm x/rms(x)·(1 + w) (Gemma)");
    }
    return std::string();
  };
  auto fmt = [](double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%g", v);
    return std::string(b);
  };
  std::vector<std::string> out;
  out.push_back("family      " + model_type + (architecture.empty() ? "" : " (" + architecture + ")"));
  out.push_back("shape       vocab " + std::to_string(vocab_size) + ", d " + std::to_string(d) + ", layers " +
                std::to_string(n_layer) + ", context " + std::to_string(n_ctx));
  std::string att = std::to_string(H) + " query heads × " + std::to_string(dh);
  if (n_kv == H) att += ", multi-head (each head its own K and V)";
  else if (n_kv == 1) att += ", multi-query (1 K/V head shared by all)";
  else att += ", grouped-query: " + std::to_string(n_kv) + " K/V heads, each shared by " + std::to_string(H / n_kv) + " query heads";
  out.push_back("attention   " + att);
  const char* layout[] = {"separate q/k/v projections", "GPT-2's fused c_attn, sliced into thirds",
                          "GPT-NeoX's fused query_key_value, interleaved per head", "Phi-3's stacked qkv_proj rows [Q; K; V]"};
  out.push_back("Q/K/V       " + std::string(layout[int(qkv_layout)]) + (qkv_bias ? ", with biases" : ", no biases") +
                (o_bias ? "; W_O with bias" : "; W_O without bias"));
  std::string sc = "scores      q·k × " + fmt(attn_scale);
  if (attn_scale == 1.0) sc += " (not divided by √d_k)";
  else if (std::abs(attn_scale * std::sqrt(double(dh)) - 1) < 1e-12) sc += " (1/√d_k)";
  if (attn_softcap > 0) sc += ", soft-capped at " + fmt(attn_softcap);
  out.push_back(sc);
  int local = 0;
  for (int w : window) local += w > 0;
  if (local)
    out.push_back("windows     " + std::to_string(local) + " of " + std::to_string(n_layer) +
                  " layers see only the last " + std::to_string(*std::max_element(window.begin(), window.end())) +
                  " positions (sliding window)");
  if (pos == PosKind::Learned) {
    out.push_back("positions   learned absolute embeddings (wpe), added to the row");
  } else {
    std::string r = "positions   rotary on q and k, θ = " + fmt(rope_theta) + ", " +
                    (pairing == RotaryPairing::Half ? "pairs (i, i + r/2) (rotate_half)" : "adjacent pairs (2i, 2i+1)");
    if (rotary_dim != dh) r += ", partial: " + std::to_string(rotary_dim) + " of " + std::to_string(dh) + " dims";
    if (!rope_scaling.type.empty()) r += ", scaling " + rope_scaling.type + " ×" + fmt(rope_scaling.factor);
    out.push_back(r);
  }
  out.push_back("norm        " + norm_name() + ", eps " + fmt(norm_eps) + (post_norms ? "; also after attention and after the MLP" : ""));
  const char* mlps[] = {"GELU (tanh)", "GELU (erf)", "SwiGLU: down(silu(gate)·up)", "GeGLU: down(gelu_tanh(gate)·up)", "none (attention-only)"};
  out.push_back("MLP         " + std::string(mlps[int(mlp)]) + (mlp != MlpKind::None ? ", width " + std::to_string(d_ff) : "") +
                (gate_up_fused ? ", gate and up fused" : ""));
  out.push_back(std::string("residual    ") + (parallel_residual ? "parallel: x + attn(ln1(x)) + mlp(ln2(x))" : "sequential"));
  out.push_back(std::string("embeddings  ") + (tied_embeddings ? "tied (unembedding = embeddingᵀ)" : "separate lm_head") +
                (embed_scale ? ", scaled by √d" : "") + (final_softcap > 0 ? ", logits soft-capped at " + fmt(final_softcap) : ""));
  return out;
}

json Arch::to_json() const {
  const char* norms[] = {"layernorm", "rmsnorm", "rmsnorm_plus_one"};
  const char* mlps[] = {"gelu_tanh", "gelu", "swiglu", "geglu", "none"};
  const char* layouts[] = {"separate", "gpt2_thirds", "neox_per_head", "stacked"};
  json j = {{"model_type", model_type}, {"vocab_size", vocab_size}, {"d", d}, {"n_layer", n_layer},
            {"n_ctx", n_ctx}, {"H", H}, {"n_kv", n_kv}, {"head_dim", dh}, {"d_ff", d_ff},
            {"norm", norms[int(norm)]}, {"norm_eps", norm_eps}, {"norm_bias", norm_bias},
            {"positions", pos == PosKind::Learned ? "learned" : "rotary"}, {"qkv_layout", layouts[int(qkv_layout)]},
            {"qkv_bias", qkv_bias}, {"o_bias", o_bias}, {"mlp_bias", mlp_bias}, {"attn_scale", attn_scale},
            {"attn_softcap", attn_softcap}, {"final_softcap", final_softcap}, {"window", window},
            {"mlp", mlps[int(mlp)]}, {"parallel_residual", parallel_residual}, {"post_norms", post_norms},
            {"tied_embeddings", tied_embeddings}, {"embed_scale", embed_scale}};
  if (pos == PosKind::Rotary) {
    j["rotary_dim"] = rotary_dim;
    j["rope_theta"] = rope_theta;
    j["rotary_pairing"] = pairing == RotaryPairing::Half ? "half" : "adjacent";
    if (!rope_scaling.type.empty()) j["rope_scaling"] = {{"type", rope_scaling.type}, {"factor", rope_scaling.factor}};
  }
  return j;
}

// ---- the tensor-name tables ----

const char* role_name(Role r) {
  static const char* names[] = {"wte",   "wpe",         "lnf_w",      "lnf_b", "lm_head", "ln1_w",  "ln1_b",
                                "ln2_w", "ln2_b",       "post_attn_w", "post_mlp_w", "wq", "wk",     "wv",
                                "bq",    "bk",          "bv",         "wqkv",  "bqkv",    "wo",     "bo",
                                "w_up",  "b_up",        "w_gate",     "b_gate", "w_gate_up", "w_down", "b_down"};
  static_assert(std::size(names) == kRoles, "one name per role");
  return names[int(r)];
}

std::vector<TensorSpec> tensor_table(const Arch& a) {
  std::vector<TensorSpec> t;
  const int64_t d = a.d, V = a.vocab_size, q = a.q_dim(), kv = a.kv_dim(), ff = a.d_ff;
  auto add = [&](std::string name, std::vector<int64_t> shape, Role role, int layer = -1) {
    t.push_back({std::move(name), std::move(shape), layer, role});
  };
  const std::string& mt = a.model_type;
  if (mt == "gpt2") {
    add("wte.weight", {V, d}, Role::wte);
    add("wpe.weight", {a.n_ctx, d}, Role::wpe);
    for (int l = 0; l < a.n_layer; l++) {
      const std::string p = "h." + std::to_string(l) + ".";
      add(p + "ln_1.weight", {d}, Role::ln1_w, l);
      add(p + "ln_1.bias", {d}, Role::ln1_b, l);
      add(p + "attn.c_attn.weight", {d, 3 * d}, Role::wqkv, l);
      add(p + "attn.c_attn.bias", {3 * d}, Role::bqkv, l);
      add(p + "attn.c_proj.weight", {d, d}, Role::wo, l);
      add(p + "attn.c_proj.bias", {d}, Role::bo, l);
      if (a.attn_only()) continue;
      add(p + "ln_2.weight", {d}, Role::ln2_w, l);
      add(p + "ln_2.bias", {d}, Role::ln2_b, l);
      add(p + "mlp.c_fc.weight", {d, ff}, Role::w_up, l);
      add(p + "mlp.c_fc.bias", {ff}, Role::b_up, l);
      add(p + "mlp.c_proj.weight", {ff, d}, Role::w_down, l);
      add(p + "mlp.c_proj.bias", {d}, Role::b_down, l);
    }
    add("ln_f.weight", {d}, Role::lnf_w);
    add("ln_f.bias", {d}, Role::lnf_b);
    return t;
  }
  if (mt == "gpt_neox") {
    add("gpt_neox.embed_in.weight", {V, d}, Role::wte);
    for (int l = 0; l < a.n_layer; l++) {
      const std::string p = "gpt_neox.layers." + std::to_string(l) + ".";
      add(p + "input_layernorm.weight", {d}, Role::ln1_w, l);
      add(p + "input_layernorm.bias", {d}, Role::ln1_b, l);
      add(p + "post_attention_layernorm.weight", {d}, Role::ln2_w, l);
      add(p + "post_attention_layernorm.bias", {d}, Role::ln2_b, l);
      add(p + "attention.query_key_value.weight", {3 * d, d}, Role::wqkv, l);
      if (a.qkv_bias) add(p + "attention.query_key_value.bias", {3 * d}, Role::bqkv, l);
      add(p + "attention.dense.weight", {d, d}, Role::wo, l);
      if (a.o_bias) add(p + "attention.dense.bias", {d}, Role::bo, l);
      add(p + "mlp.dense_h_to_4h.weight", {ff, d}, Role::w_up, l);
      add(p + "mlp.dense_h_to_4h.bias", {ff}, Role::b_up, l);
      add(p + "mlp.dense_4h_to_h.weight", {d, ff}, Role::w_down, l);
      add(p + "mlp.dense_4h_to_h.bias", {d}, Role::b_down, l);
    }
    add("gpt_neox.final_layer_norm.weight", {d}, Role::lnf_w);
    add("gpt_neox.final_layer_norm.bias", {d}, Role::lnf_b);
    if (!a.tied_embeddings) add("embed_out.weight", {V, d}, Role::lm_head);
    return t;
  }
  if (mt == "gpt_neo") {
    add("transformer.wte.weight", {V, d}, Role::wte);
    add("transformer.wpe.weight", {a.n_ctx, d}, Role::wpe);
    for (int l = 0; l < a.n_layer; l++) {
      const std::string p = "transformer.h." + std::to_string(l) + ".";
      add(p + "ln_1.weight", {d}, Role::ln1_w, l);
      add(p + "ln_1.bias", {d}, Role::ln1_b, l);
      add(p + "attn.attention.q_proj.weight", {d, d}, Role::wq, l);
      add(p + "attn.attention.k_proj.weight", {d, d}, Role::wk, l);
      add(p + "attn.attention.v_proj.weight", {d, d}, Role::wv, l);
      add(p + "attn.attention.out_proj.weight", {d, d}, Role::wo, l);
      add(p + "attn.attention.out_proj.bias", {d}, Role::bo, l);
      add(p + "ln_2.weight", {d}, Role::ln2_w, l);
      add(p + "ln_2.bias", {d}, Role::ln2_b, l);
      add(p + "mlp.c_fc.weight", {ff, d}, Role::w_up, l);
      add(p + "mlp.c_fc.bias", {ff}, Role::b_up, l);
      add(p + "mlp.c_proj.weight", {d, ff}, Role::w_down, l);
      add(p + "mlp.c_proj.bias", {d}, Role::b_down, l);
    }
    add("transformer.ln_f.weight", {d}, Role::lnf_w);
    add("transformer.ln_f.bias", {d}, Role::lnf_b);
    if (!a.tied_embeddings) add("lm_head.weight", {V, d}, Role::lm_head);
    return t;
  }
  // The Llama-style families: model.embed_tokens, model.layers.{l}.…, model.norm, lm_head.
  add("model.embed_tokens.weight", {V, d}, Role::wte);
  for (int l = 0; l < a.n_layer; l++) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {d}, Role::ln1_w, l);
    if (a.qkv_layout == QkvLayout::Stacked) {
      add(p + "self_attn.qkv_proj.weight", {q + 2 * kv, d}, Role::wqkv, l);
    } else {
      add(p + "self_attn.q_proj.weight", {q, d}, Role::wq, l);
      add(p + "self_attn.k_proj.weight", {kv, d}, Role::wk, l);
      add(p + "self_attn.v_proj.weight", {kv, d}, Role::wv, l);
      if (a.qkv_bias) {
        add(p + "self_attn.q_proj.bias", {q}, Role::bq, l);
        add(p + "self_attn.k_proj.bias", {kv}, Role::bk, l);
        add(p + "self_attn.v_proj.bias", {kv}, Role::bv, l);
      }
    }
    add(p + "self_attn.o_proj.weight", {d, q}, Role::wo, l);
    if (a.o_bias) add(p + "self_attn.o_proj.bias", {d}, Role::bo, l);
    if (a.post_norms) {
      add(p + "post_attention_layernorm.weight", {d}, Role::post_attn_w, l);
      add(p + "pre_feedforward_layernorm.weight", {d}, Role::ln2_w, l);
      add(p + "post_feedforward_layernorm.weight", {d}, Role::post_mlp_w, l);
    } else {
      add(p + "post_attention_layernorm.weight", {d}, Role::ln2_w, l);
    }
    if (a.gate_up_fused) {
      add(p + "mlp.gate_up_proj.weight", {2 * ff, d}, Role::w_gate_up, l);
    } else {
      add(p + "mlp.gate_proj.weight", {ff, d}, Role::w_gate, l);
      add(p + "mlp.up_proj.weight", {ff, d}, Role::w_up, l);
      if (a.mlp_bias) {
        add(p + "mlp.gate_proj.bias", {ff}, Role::b_gate, l);
        add(p + "mlp.up_proj.bias", {ff}, Role::b_up, l);
      }
    }
    add(p + "mlp.down_proj.weight", {d, ff}, Role::w_down, l);
    if (a.mlp_bias) add(p + "mlp.down_proj.bias", {d}, Role::b_down, l);
  }
  add("model.norm.weight", {d}, Role::lnf_w);
  if (!a.tied_embeddings) add("lm_head.weight", {V, d}, Role::lm_head);
  return t;
}

// ---- configs as Hugging Face writes them, for `qkv init --arch` ----

json default_config(const std::string& type, const std::string& preset) {
  const bool tiny = preset == "tiny";
  if (preset != "tiny" && preset != "small") usage_error("--preset: expected tiny or small, found '" + preset + "'");
  // tiny: a few hundred thousand parameters, for tests; small: GPT-2-small-like sizes, for benchmarks.
  const int V = tiny ? 512 : 32000, d = tiny ? 64 : 768, L = tiny ? 2 : 12, H = tiny ? 4 : 12, ff = tiny ? 160 : 2048;
  const int ctx = tiny ? 128 : 2048;
  json j;
  if (type == "gpt2") {
    GPT2Config c;
    if (tiny) c.n_layer = 2, c.n_head = 4, c.n_embd = 64, c.n_positions = 128, c.vocab_size = 512;
    return io::config_to_json(c);
  }
  if (type == "llama" || type == "mistral" || type == "qwen2" || type == "gemma" || type == "gemma2" || type == "phi3") {
    static const std::map<std::string, std::string> archs = {
        {"llama", "LlamaForCausalLM"}, {"mistral", "MistralForCausalLM"}, {"qwen2", "Qwen2ForCausalLM"},
        {"gemma", "GemmaForCausalLM"}, {"gemma2", "Gemma2ForCausalLM"}, {"phi3", "Phi3ForCausalLM"}};
    j = {{"model_type", type}, {"architectures", {archs.at(type)}}, {"vocab_size", V}, {"hidden_size", d},
         {"num_hidden_layers", L}, {"num_attention_heads", H}, {"num_key_value_heads", tiny ? 2 : 4},
         {"intermediate_size", ff}, {"max_position_embeddings", ctx}, {"rms_norm_eps", 1e-6},
         {"rope_theta", 10000.0}, {"hidden_act", "silu"}, {"tie_word_embeddings", false},
         {"attention_bias", false}, {"bos_token_id", 1}, {"eos_token_id", 2}, {"torch_dtype", "float32"}};
    if (type == "llama") {
      j["rope_scaling"] = nullptr;
      j["mlp_bias"] = false;
    }
    if (type == "mistral") j["sliding_window"] = tiny ? 16 : 4096;
    if (type == "qwen2") {
      j["use_sliding_window"] = false;
      j["tie_word_embeddings"] = true;
      j["rope_theta"] = 1000000.0;
    }
    if (type == "gemma" || type == "gemma2") {
      j["head_dim"] = tiny ? 32 : 256;  // not d / H: Gemma's head size is its own
      j["num_key_value_heads"] = type == "gemma" ? 1 : 2;
      j["hidden_act"] = "gelu_pytorch_tanh";
      j["hidden_activation"] = "gelu_pytorch_tanh";
      j["tie_word_embeddings"] = true;
      j["bos_token_id"] = 2, j["eos_token_id"] = 1;
    }
    if (type == "gemma2") {
      j["query_pre_attn_scalar"] = tiny ? 24 : 256;
      j["attn_logit_softcapping"] = tiny ? 5.0 : 50.0;  // tiny: low enough that random scores reach it
      j["final_logit_softcapping"] = tiny ? 3.0 : 30.0;
      j["sliding_window"] = tiny ? 8 : 4096;
    }
    if (type == "phi3") {
      j["num_key_value_heads"] = H;
      j["sliding_window"] = tiny ? 12 : 2047;
      if (tiny) j["partial_rotary_factor"] = 0.5;
    }
    return j;
  }
  if (type == "gpt_neox")
    return {{"model_type", "gpt_neox"}, {"architectures", {"GPTNeoXForCausalLM"}}, {"vocab_size", V},
            {"hidden_size", d}, {"num_hidden_layers", L}, {"num_attention_heads", H}, {"intermediate_size", 4 * d},
            {"max_position_embeddings", ctx}, {"layer_norm_eps", 1e-5}, {"rotary_pct", 0.25},
            {"rotary_emb_base", 10000}, {"hidden_act", "gelu"}, {"use_parallel_residual", true},
            {"tie_word_embeddings", false}, {"bos_token_id", 0}, {"eos_token_id", 0}, {"torch_dtype", "float32"}};
  if (type == "gpt_neo")
    return {{"model_type", "gpt_neo"}, {"architectures", {"GPTNeoForCausalLM"}}, {"vocab_size", V},
            {"hidden_size", d}, {"num_layers", L}, {"num_heads", H}, {"intermediate_size", nullptr},
            {"max_position_embeddings", ctx}, {"layer_norm_epsilon", 1e-5}, {"activation_function", "gelu_new"},
            {"attention_types", {{{"global", "local"}, L / 2}}}, {"window_size", tiny ? 8 : 256},
            {"bos_token_id", 50256}, {"eos_token_id", 50256}, {"torch_dtype", "float32"}};
  std::string list;
  for (const auto& t : supported_model_types()) list += (list.empty() ? "" : ", ") + t;
  usage_error("--arch: '" + type + "' is not a family qkv knows (" + list + ")");
}

}  // namespace qkv
