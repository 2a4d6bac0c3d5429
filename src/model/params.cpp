#include <cmath>
#include <random>
#include <string>

#include "qkv/error.hpp"
#include "qkv/model.hpp"

namespace qkv {

std::vector<ParamSpec> gpt2_param_table(const GPT2Config& c) {
  const int64_t d = c.n_embd, V = c.vocab_size, P = c.n_positions, I = c.mlp_dim();
  std::vector<ParamSpec> t;
  auto add = [&](std::string name, std::vector<int64_t> shape, bool decay) {
    t.push_back({std::move(name), std::move(shape), 0, 0, decay});
  };
  add("wte.weight", {V, d}, true);
  add("wpe.weight", {P, d}, false);
  for (int l = 0; l < c.n_layer; l++) {
    const std::string h = "h." + std::to_string(l) + ".";
    add(h + "ln_1.weight", {d}, false);
    add(h + "ln_1.bias", {d}, false);
    add(h + "attn.c_attn.weight", {d, 3 * d}, true);
    add(h + "attn.c_attn.bias", {3 * d}, false);
    add(h + "attn.c_proj.weight", {d, d}, true);
    add(h + "attn.c_proj.bias", {d}, false);
    if (!c.attn_only) {
      add(h + "ln_2.weight", {d}, false);
      add(h + "ln_2.bias", {d}, false);
      add(h + "mlp.c_fc.weight", {d, I}, true);
      add(h + "mlp.c_fc.bias", {I}, false);
      add(h + "mlp.c_proj.weight", {I, d}, true);
      add(h + "mlp.c_proj.bias", {d}, false);
    }
  }
  add("ln_f.weight", {d}, false);
  add("ln_f.bias", {d}, false);
  int64_t offset = 0;
  for (auto& s : t) {
    s.numel = TensorT<float>::count(s.shape);
    s.offset = offset;
    offset += s.numel;
  }
  return t;
}

GPT2::GPT2(const GPT2Config& c) : config(c) {
  config.validate("config");
  table = gpt2_param_table(config);
  params.assign(size_t(table.back().offset + table.back().numel), 0.0f);
  wte = spec("wte.weight").offset;
  wpe = spec("wpe.weight").offset;
  lnf_w = spec("ln_f.weight").offset;
  lnf_b = spec("ln_f.bias").offset;
  for (int l = 0; l < config.n_layer; l++) {
    const std::string h = "h." + std::to_string(l) + ".";
    LayerOffsets o{spec(h + "ln_1.weight").offset,        spec(h + "ln_1.bias").offset,
                   spec(h + "attn.c_attn.weight").offset, spec(h + "attn.c_attn.bias").offset,
                   spec(h + "attn.c_proj.weight").offset, spec(h + "attn.c_proj.bias").offset};
    if (!config.attn_only) {
      o.ln2_w = spec(h + "ln_2.weight").offset;
      o.ln2_b = spec(h + "ln_2.bias").offset;
      o.W_fc = spec(h + "mlp.c_fc.weight").offset;
      o.b_fc = spec(h + "mlp.c_fc.bias").offset;
      o.W_proj = spec(h + "mlp.c_proj.weight").offset;
      o.b_proj = spec(h + "mlp.c_proj.bias").offset;
    }
    layers.push_back(o);
  }
}

const ParamSpec& GPT2::spec(const std::string& name) const {
  for (const auto& s : table)
    if (s.name == name) return s;
  usage_error("no parameter named '" + name + "' in this model (" + std::to_string(config.n_layer) + " layers" +
              (config.attn_only ? ", attention-only" : "") + ")");
}

AttentionParams<float> GPT2::attention(int l, const float* b) const {
  const LayerOffsets& o = layers.at(size_t(l));
  return {b + o.ln1_w, b + o.ln1_b, b + o.W_attn, b + o.b_attn, b + o.W_O, b + o.b_O};
}

MlpParams<float> GPT2::mlp(int l, const float* b) const {
  const LayerOffsets& o = layers.at(size_t(l));
  return {b + o.ln2_w, b + o.ln2_b, b + o.W_fc, b + o.b_fc, b + o.W_proj, b + o.b_proj};
}

void init_gpt2(GPT2& m, uint64_t seed, bool sinusoidal_positions) {
  std::mt19937_64 rng(seed);
  const double proj_std = 0.02 / std::sqrt(2.0 * m.config.n_layer);
  for (const ParamSpec& s : m.table) {
    float* p = m.params.data() + s.offset;
    const bool is_ln_weight = s.name.find("ln_") != std::string::npos && s.name.ends_with(".weight");
    if (is_ln_weight) {
      std::fill(p, p + s.numel, 1.0f);
    } else if (s.shape.size() == 1) {
      std::fill(p, p + s.numel, 0.0f);
    } else {
      const bool residual = s.name.ends_with("c_proj.weight");
      std::normal_distribution<double> dist(0.0, residual ? proj_std : 0.02);
      for (int64_t i = 0; i < s.numel; i++) p[i] = static_cast<float>(dist(rng));
    }
  }
  if (sinusoidal_positions) {
    // wpe[pos, 2i] = sin(pos / 10000^(2i/d)), wpe[pos, 2i+1] = cos(…), scaled to RMS 0.02.
    const int d = m.config.n_embd;
    float* wpe = m.params.data() + m.wpe;
    for (int pos = 0; pos < m.config.n_positions; pos++)
      for (int j = 0; j < d; j++) {
        const double angle = pos / std::pow(10000.0, double(j - j % 2) / d);
        wpe[int64_t(pos) * d + j] = float(0.02 * std::sqrt(2.0) * (j % 2 ? std::cos(angle) : std::sin(angle)));
      }
  }
}

AttentionGrads<float> GPT2::attention_grads(int l, float* b) const {
  const LayerOffsets& o = layers.at(size_t(l));
  return {b + o.ln1_w, b + o.ln1_b, b + o.W_attn, b + o.b_attn, b + o.W_O, b + o.b_O};
}

MlpGrads<float> GPT2::mlp_grads(int l, float* b) const {
  const LayerOffsets& o = layers.at(size_t(l));
  return {b + o.ln2_w, b + o.ln2_b, b + o.W_fc, b + o.b_fc, b + o.W_proj, b + o.b_proj};
}

}  // namespace qkv
