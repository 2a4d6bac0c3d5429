#include <algorithm>
#include <cmath>

#include "qkv/train/train.hpp"

namespace qkv {

AdamW::AdamW(std::vector<uint8_t> decay, const TrainSettings& s) : s_(s), decay_(std::move(decay)) {
  m_.assign(decay_.size(), 0.0f);
  v_.assign(decay_.size(), 0.0f);
}

// θ ← θ − lr · (m̂ / (√v̂ + ε) + λ·θ) for decayed parameters, without the λ·θ term otherwise
// (Loshchilov & Hutter's decoupled weight decay).
void AdamW::step(float* p, const std::vector<float>& g, double lr) {
  t_++;
  const double b1 = s_.beta1, b2 = s_.beta2;
  const double c1 = 1.0 - std::pow(b1, double(t_)), c2 = 1.0 - std::pow(b2, double(t_));
  const int64_t n = int64_t(m_.size());
  for (int64_t i = 0; i < n; i++) {
    m_[size_t(i)] = float(b1 * m_[size_t(i)] + (1 - b1) * g[size_t(i)]);
    v_[size_t(i)] = float(b2 * v_[size_t(i)] + (1 - b2) * double(g[size_t(i)]) * g[size_t(i)]);
    const double mhat = m_[size_t(i)] / c1, vhat = v_[size_t(i)] / c2;
    double update = mhat / (std::sqrt(vhat) + s_.adam_eps);
    if (decay_[size_t(i)]) update += s_.weight_decay * p[i];
    p[i] = float(p[i] - lr * update);
  }
}

double learning_rate(const TrainSettings& s, int step) {
  if (step < s.warmup) return s.lr * double(step + 1) / double(s.warmup);
  const double progress = s.steps > s.warmup ? double(step - s.warmup) / double(s.steps - s.warmup) : 1.0;
  const double cosine = 0.5 * (1.0 + std::cos(M_PI * std::min(1.0, progress)));
  return s.lr * (s.min_lr_ratio + (1.0 - s.min_lr_ratio) * cosine);
}

double clip_grad_norm(std::vector<float>& g, double clip) {
  double sq = 0;
  for (float x : g) sq += double(x) * x;
  const double norm = std::sqrt(sq);
  if (clip > 0 && norm > clip) {
    const float scale = float(clip / norm);
    for (float& x : g) x *= scale;
  }
  return norm;
}

}  // namespace qkv
