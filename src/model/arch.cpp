// The architecture as data (arch.hpp): its validation, its description in words and as JSON, the rotary
// frequencies, the role names. The families' readers and tensor lists are rows of the family table
// (family.hpp, src/model/families/).
#include "qkv/arch.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <nlohmann/json.hpp>

#include "qkv/error.hpp"

namespace qkv {

using nlohmann::json;

std::vector<double> rope_inv_freq(const Arch& a, int seq_len) {
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
  if (s.type == "longrope") {
    const std::vector<double>& ext = seq_len > s.original_max_position_embeddings ? s.long_factor : s.short_factor;
    for (size_t i = 0; i < ext.size() && i < inv.size(); i++) inv[i] /= ext[i];
  }
  for (size_t i = 0; i < s.freq_factors.size() && i < inv.size(); i++) inv[i] /= s.freq_factors[i];
  return inv;
}

double rope_attention_factor(const Arch& a) {
  return a.rope_scaling.type == "longrope" ? a.rope_scaling.attention_factor : 1.0;
}

void Arch::check_longrope(const std::string& where) const {
  const RopeScaling& s = rope_scaling;
  for (const auto* f : {&s.short_factor, &s.long_factor}) {
    const char* name = f == &s.short_factor ? "short_factor" : "long_factor";
    if (f->size() != size_t(rotary_dim / 2))
      data_error(where + ": rope_scaling." + name + " has " + std::to_string(f->size()) + " values for " +
                 std::to_string(rotary_dim / 2) + " rotary frequencies");
    for (size_t i = 0; i < f->size(); i++)
      if (!((*f)[i] > 0) || !std::isfinite((*f)[i]))
        data_error(where + ": rope_scaling." + name + "[" + std::to_string(i) + "] is " + std::to_string((*f)[i]) +
                   ", expected a finite number > 0");
  }
  if (s.original_max_position_embeddings < 1)
    data_error(where + ": original_max_position_embeddings is " + std::to_string(s.original_max_position_embeddings) +
               ", expected >= 1");
  if (!(s.attention_factor > 0) || !std::isfinite(s.attention_factor))
    data_error(where + ": the longrope attention factor is " + std::to_string(s.attention_factor) +
               ", expected a finite number > 0");
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
    if (rope_scaling.type == "longrope") check_longrope(where);
    const auto& ff = rope_scaling.freq_factors;
    if (!ff.empty() && ff.size() != size_t(rotary_dim / 2))
      data_error(where + ": " + std::to_string(ff.size()) + " rope frequency factors for " +
                 std::to_string(rotary_dim / 2) + " rotary frequencies");
    for (size_t i = 0; i < ff.size(); i++)
      if (!(ff[i] > 0) || !std::isfinite(ff[i]))
        data_error(where + ": rope frequency factor " + std::to_string(i) + " is " + std::to_string(ff[i]) +
                   ", expected a finite number > 0");
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
    if (rope_scaling.type == "longrope")
      r += ", longrope: short factors up to " + std::to_string(rope_scaling.original_max_position_embeddings) +
           " positions, long ones beyond, cos and sin × " + fmt(rope_scaling.attention_factor);
    else if (!rope_scaling.type.empty())
      r += ", scaling " + rope_scaling.type + " ×" + fmt(rope_scaling.factor);
    if (!rope_scaling.freq_factors.empty()) r += ", each frequency ÷ its factor (GGUF rope_freqs)";
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
    if (rope_scaling.type == "llama3")
      j["rope_scaling"].update({{"low_freq_factor", rope_scaling.low_freq_factor},
                                {"high_freq_factor", rope_scaling.high_freq_factor},
                                {"original_max_position_embeddings", rope_scaling.original_max_position_embeddings}});
    if (rope_scaling.type == "longrope")
      j["rope_scaling"].update({{"short_factor", rope_scaling.short_factor},
                                {"long_factor", rope_scaling.long_factor},
                                {"attention_factor", rope_scaling.attention_factor},
                                {"original_max_position_embeddings", rope_scaling.original_max_position_embeddings}});
    if (!rope_scaling.freq_factors.empty()) j["rope_freq_factors"] = rope_scaling.freq_factors;
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

}  // namespace qkv
