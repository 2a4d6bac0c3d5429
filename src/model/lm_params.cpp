// A trainable family model (lm_train.hpp): initialisation, copying from a loaded model, the Model view
// that run() reads, and saving with the family's tensor names.
#include <cmath>
#include <random>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "qkv/error.hpp"
#include "qkv/family.hpp"
#include "qkv/io/safetensors.hpp"
#include "qkv/lm_train.hpp"

namespace qkv {

float* LmParams::at(const std::string& name) {
  for (size_t i = 0; i < layout.table.size(); i++)
    if (layout.table[i].name == name) return params.data() + layout.offset[i];
  usage_error("no tensor named " + name + " in this " + layout.arch.model_type + " model");
}

namespace {
void sinusoidal_positions(float* wpe, int positions, int d) {
  for (int pos = 0; pos < positions; pos++)
    for (int j = 0; j < d; j++) {
      const double angle = pos / std::pow(10000.0, double(j - j % 2) / d);
      wpe[int64_t(pos) * d + j] = float(0.02 * std::sqrt(2.0) * (j % 2 ? std::cos(angle) : std::sin(angle)));
    }
}

// The residual stream's writers (attention's W_O, the MLP's down projection): σ / √(2·n_layer).
bool residual_output(Role r) { return r == Role::wo || r == Role::w_down; }

void draw_per_tensor_double(LmParams& p, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const double resid_sd = 0.02 / std::sqrt(2.0 * p.arch().n_layer);
  for (size_t i = 0; i < p.layout.table.size(); i++) {
    const TensorSpec& s = p.layout.table[i];
    if (s.shape.size() != 2) continue;
    float* w = p.params.data() + p.layout.offset[i];
    std::normal_distribution<double> normal(0.0, residual_output(s.role) ? resid_sd : 0.02);
    for (int64_t j = 0, n = s.shape[0] * s.shape[1]; j < n; j++) w[j] = static_cast<float>(normal(rng));
  }
}

void draw_one_float_stream(LmParams& p, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  const float resid = 1.0f / std::sqrt(2.0f * float(p.arch().n_layer));
  for (size_t i = 0; i < p.layout.table.size(); i++) {
    const TensorSpec& s = p.layout.table[i];
    if (s.shape.size() != 2) continue;
    float* w = p.params.data() + p.layout.offset[i];
    const float scale = residual_output(s.role) ? resid : 1.0f;
    for (int64_t j = 0, n = s.shape[0] * s.shape[1]; j < n; j++) w[j] = normal(rng) * scale;
  }
}
}  // namespace

LmParams init_lm(const nlohmann::json& config, uint64_t seed, const LmInit& options) {
  LmParams p;
  const Arch arch = arch_from_config(config, "train config");
  p.config = config;
  p.layout = lm_layout(arch);
  p.params.assign(size_t(p.layout.size), 0.0f);  // biases stay 0
  for (size_t i = 0; i < p.layout.table.size(); i++)
    if (is_norm_weight(p.layout.table[i].role)) {
      float* w = p.params.data() + p.layout.offset[i];
      std::fill(w, w + p.layout.table[i].shape[0], arch.norm == NormKind::RMSNormPlusOne ? 0.0f : 1.0f);
    }
  if (family(arch.model_type, "train config").init_draw == InitDraw::per_tensor_double)
    draw_per_tensor_double(p, seed);
  else
    draw_one_float_stream(p, seed);
  if (options.sinusoidal_positions && p.layout.wpe >= 0)
    sinusoidal_positions(p.params.data() + p.layout.wpe, arch.n_ctx, arch.d);
  return p;
}

std::vector<double> lm_gradcheck_params(const LmLayout& L, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> N(0, 1);
  std::vector<double> p(size_t(L.size));
  for (size_t i = 0; i < L.table.size(); i++) {
    const TensorSpec& s = L.table[i];
    int64_t n = 1;
    for (int64_t x : s.shape) n *= x;
    const double base = is_norm_weight(s.role) && L.arch.norm != NormKind::RMSNormPlusOne ? 1.0 : 0.0;
    const double sd = s.shape.size() == 2 ? 0.3 : 0.2;
    for (int64_t j = 0; j < n; j++) p[size_t(L.offset[i] + j)] = base + sd * N(rng);
  }
  return p;
}

LmParams lm_params_from(const Model& m, const nlohmann::json& config) {
  LmParams p;
  p.config = config;
  p.layout = lm_layout(m.arch);
  p.params.assign(size_t(p.layout.size), 0.0f);
  for (size_t i = 0; i < p.layout.table.size(); i++) {
    const TensorSpec& s = p.layout.table[i];
    const Weight& w = m.weight(s.name);
    float* dst = p.params.data() + p.layout.offset[i];
    // The layout keeps the family's layout (GPT-2: Conv1D [in, out]); a file that stores a matrix the other
    // way (llm.c's [out, in]) is transposed on the way in.
    const bool want_in_out = p.layout.in_out && s.shape.size() == 2 && !is_embedding(s.role);
    if (s.shape.size() != 2 || w.in_out == want_in_out) {
      w.read(0, w.numel(), dst);
      continue;
    }
    const int64_t r = w.shape.at(0), c = w.shape.at(1);
    std::vector<float> tmp(size_t(w.numel()));
    w.read(0, w.numel(), tmp.data());
    for (int64_t i0 = 0; i0 < r; i0++)
      for (int64_t j = 0; j < c; j++) dst[j * r + i0] = tmp[size_t(i0 * c + j)];
  }
  return p;
}

Model lm_view(const LmParams& p) {
  Model m;
  const LmLayout& L = p.layout;
  m.arch = L.arch;
  m.source = "trainable parameters in memory";
  m.table = L.table;
  m.blocks.resize(size_t(L.arch.n_layer));
  auto make = [&](size_t i) {
    const TensorSpec& s = L.table[i];
    Weight w;
    w.data = p.params.data() + L.offset[i];
    w.type = WeightType::F32;
    w.shape = s.shape;
    w.name = s.name;
    w.in_out = L.in_out && s.shape.size() == 2 && !is_embedding(s.role);
    return w;
  };
  for (size_t i = 0; i < L.table.size(); i++) {
    const TensorSpec& s = L.table[i];
    m.index[s.name] = i;
    Weight w = make(i);
    role_slot(m, m.blocks, s.role, s.layer) = w;
  }
  return m;
}

void save_lm(const LmParams& p, const std::string& path, const std::map<std::string, std::string>& metadata) {
  std::vector<io::WriteTensor> ts;
  for (size_t i = 0; i < p.layout.table.size(); i++)
    ts.push_back({p.layout.table[i].name, p.layout.table[i].shape, p.params.data() + p.layout.offset[i]});
  std::map<std::string, std::string> meta = metadata;
  meta["format"] = "pt";
  io::write_safetensors(path, ts, meta, io::DType::F32);
}

std::vector<uint8_t> lm_decay_mask(const LmLayout& L) {
  std::vector<uint8_t> mask(size_t(L.size), 0);
  for (size_t i = 0; i < L.table.size(); i++) {
    const TensorSpec& s = L.table[i];
    if (s.shape.size() != 2 || s.role == Role::wpe) continue;
    int64_t n = s.shape[0] * s.shape[1];
    std::fill(mask.begin() + L.offset[i], mask.begin() + L.offset[i] + n, uint8_t{1});
  }
  return mask;
}

}  // namespace qkv
