#include "qkv/analysis/saturate.hpp"

#include <algorithm>
#include <cmath>
#include <random>

#include "qkv/error.hpp"
#include "qkv/gemm.hpp"
#include "qkv/ops.hpp"

namespace qkv {
namespace {

double stddev(const std::vector<double>& v) {
  double m = 0, s = 0;
  for (double x : v) m += x;
  m /= double(v.size());
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / double(v.size()));
}

// Mean largest weight and mean ‖dS‖ of softmax rows of `scores` [rows, n] for upstream gradient dA.
void softmax_stats(const std::vector<double>& scores, const std::vector<double>& dA, int rows, int n, double* max_w,
                   double* onehot, double* grad) {
  std::vector<double> A(scores.size()), dS(scores.size());
  softmax_forward(A.data(), scores.data(), rows, n);
  softmax_backward(dS.data(), dA.data(), A.data(), rows, n);
  double mw = 0, gn = 0, oh = 0;
  for (int r = 0; r < rows; r++) {
    const double m = *std::max_element(A.begin() + int64_t(r) * n, A.begin() + int64_t(r + 1) * n);
    mw += m;
    oh += m > 0.99;
    double s = 0;
    for (int j = 0; j < n; j++) s += dS[size_t(r) * n + j] * dS[size_t(r) * n + j];
    gn += std::sqrt(s);
  }
  *max_w = mw / rows;
  *onehot = oh / rows;
  *grad = gn / rows;
}

}  // namespace

std::vector<SaturateRow> saturate(const SaturateOptions& o) {
  if (o.dk_min < 1 || o.dk_max < o.dk_min || o.dk_max > (1 << 16))
    usage_error("saturate: d_k range must satisfy 1 <= min <= max <= 65536");
  if (o.keys < 1 || o.rows < 1 || o.keys > 100000 || o.rows > 100000)
    usage_error("saturate: keys and rows must be in 1 .. 100000");
  std::mt19937_64 rng(o.seed);
  std::normal_distribution<double> N01(0.0, 1.0);
  std::vector<SaturateRow> out;
  for (int dk = o.dk_min; dk <= o.dk_max; dk *= 2) {
    std::vector<double> q(size_t(o.rows) * dk), k(size_t(o.keys) * dk), raw(size_t(o.rows) * o.keys),
        dA(raw.size());
    for (auto& x : q) x = N01(rng);
    for (auto& x : k) x = N01(rng);
    for (auto& x : dA) x = N01(rng);
    // raw [rows, keys] = q·kᵀ: every query row against the same keys.   torch: q @ k.T
    gemm<double>(false, true, o.rows, o.keys, dk, 1.0, q.data(), dk, k.data(), dk, 0.0, raw.data(), o.keys);
    std::vector<double> scaled(raw);
    for (auto& s : scaled) s /= std::sqrt(double(dk));
    SaturateRow row;
    row.dk = dk;
    row.std_raw = stddev(raw);
    row.std_scaled = stddev(scaled);
    softmax_stats(raw, dA, o.rows, o.keys, &row.max_weight_raw, &row.onehot_raw, &row.grad_norm_raw);
    softmax_stats(scaled, dA, o.rows, o.keys, &row.max_weight_scaled, &row.onehot_scaled, &row.grad_norm_scaled);
    out.push_back(row);
    if (dk > o.dk_max / 2) break;  // no overflow past dk_max
  }
  return out;
}

}  // namespace qkv
