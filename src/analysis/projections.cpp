#include "qkv/analysis/projections.hpp"

#include <algorithm>
#include <cmath>

#include "qkv/analysis/head_weights.hpp"

namespace qkv::analysis {
namespace {

double rel(const Matrix& trap, const Matrix& truth) {
  return frobenius_distance(trap, truth) / frobenius(truth);
}

}  // namespace

ProjectionResult project(const Model& model, const std::vector<int>& ids, int layer) {
  check_layer(model, layer);
  const Arch& a = model.arch;
  const LayerInput in = layer_input(model, ids, layer);
  const BlockWeights& bw = model.blocks[size_t(layer)];
  ProjectionResult r;
  r.layer = layer, r.T = in.T, r.d = a.d, r.H = a.H, r.dh = a.dh, r.n_kv = a.n_kv, r.family = a.model_type;
  r.has_bias = a.qkv_bias;
  const int T = r.T, d = r.d, dh = r.dh;
  const char* layouts[] = {"separate q_proj / k_proj / v_proj", "GPT-2's c_attn thirds", "GPT-NeoX's per-head interleave",
                           "Phi-3's stacked qkv_proj rows"};
  r.layout = layouts[int(a.qkv_layout)];
  const Weight& wq = a.qkv_layout == QkvLayout::Separate ? bw.wq : bw.wqkv;
  r.weight_shape = wq.shape;
  const Weight& bq = a.qkv_layout == QkvLayout::Separate ? bw.bq : bw.bqkv;
  if (bq.present()) r.bias_shape = bq.shape;

  // the norm written out, in double
  const bool layernorm = a.norm == NormKind::LayerNorm;
  r.norm = layernorm ? "LayerNorm" : a.norm == NormKind::RMSNorm ? "RMSNorm" : "RMSNorm·(1 + w)";
  const std::vector<double> w = norm_scale(model, bw.ln1_w);
  std::vector<float> bvec(size_t(d), 0.0f);
  if (bw.ln1_b.present()) bw.ln1_b.read(0, d, bvec.data());
  Matrix u(T, d);
  for (int t = 0; t < T; t++) {
    double mean = 0, var = 0;
    if (layernorm) {
      for (int i = 0; i < d; i++) mean += in.x(t, i);
      mean /= d;
    }
    for (int i = 0; i < d; i++) var += (in.x(t, i) - mean) * (in.x(t, i) - mean);
    const double rstd = 1.0 / std::sqrt(var / d + a.norm_eps);
    for (int i = 0; i < d; i++) u(t, i) = (in.x(t, i) - mean) * rstd * w[size_t(i)] + bvec[size_t(i)];
  }
  r.ln_max_abs_diff = max_abs_difference(u, in.u);

  // q, k, v = rows · Wᵀ + b with the model's own maps, plain loops
  const QkvMaps maps = qkv_maps(model, layer);
  auto apply = [&](const Matrix& rows, const std::vector<float>& W, const std::vector<float>& b, int n, bool bias) {
    Matrix y(T, n);
    for (int t = 0; t < T; t++)
      for (int o = 0; o < n; o++) {
        double s = bias && !b.empty() ? double(b[size_t(o)]) : 0.0;
        for (int i = 0; i < d; i++) s += rows(t, i) * double(W[size_t(o) * d + i]);
        y(t, o) = s;
      }
    return y;
  };
  const std::vector<float>* Ws[3] = {&maps.Wq, &maps.Wk, &maps.Wv};
  const std::vector<float>* bs[3] = {&maps.bq, &maps.bk, &maps.bv};
  const std::vector<float>* hooks[3] = {&in.q, &in.k, &in.v};  // [T, heads, dh]
  ProjectionPart* parts[3] = {&r.q, &r.k, &r.v};
  double interleaved_num = 0, interleaved_den = 0;
  for (int which = 0; which < 3; which++) {
    const int heads = which == 0 ? a.H : a.n_kv, n = heads * dh;
    const Matrix truth = apply(u, *Ws[which], *bs[which], n, true);
    const Matrix raw = apply(in.x, *Ws[which], *bs[which], n, true);
    const Matrix nobias = apply(u, *Ws[which], *bs[which], n, false);
    ProjectionPart& part = *parts[which];
    const std::vector<float>& mh = *hooks[which];
    for (int t = 0; t < T; t++)
      for (int h = 0; h < heads; h++)
        for (int e = 0; e < dh; e++) {
          const double model_v = mh[(size_t(t) * heads + h) * dh + e];
          const double diff = std::abs(truth(t, h * dh + e) - model_v);
          part.max_abs_diff = std::max(part.max_abs_diff, diff);
          part.max_abs = std::max(part.max_abs, std::abs(model_v));
          r.heads_max_abs_diff = std::max(r.heads_max_abs_diff, diff);
          const double wrong = truth(t, e * heads + h);  // the wrong cut: heads interleaved
          interleaved_num += (wrong - model_v) * (wrong - model_v);
          interleaved_den += model_v * model_v;
        }
    part.ln_trap_rel = rel(raw, truth);
    part.bias_trap_rel = rel(nobias, truth);
    double bn = 0;
    for (float x : *bs[which]) bn += double(x) * x;
    part.bias_norm = std::sqrt(bn);
  }
  r.interleaved_cut_rel = interleaved_den > 0 ? std::sqrt(interleaved_num / interleaved_den) : 0.0;
  return r;
}

}  // namespace qkv::analysis
