#include "qkv/analysis/head_weights.hpp"

#include <cmath>
#include <limits>
#include <string>

#include "qkv/error.hpp"

namespace qkv::analysis {

void check_layer(const GPT2& m, int layer) {
  const int L = m.config.n_layer;
  if (layer < 0 || layer >= L)
    usage_error("--layer: " + std::to_string(layer) + " is outside [0, " + std::to_string(L) + ") (the model has " +
                std::to_string(L) + " layers)");
}

void check_head(const GPT2& m, int layer, int head) {
  check_layer(m, layer);
  const int H = m.config.n_head;
  if (head < 0 || head >= H)
    usage_error("--head: " + std::to_string(head) + " is outside [0, " + std::to_string(H) + ") (the model has " +
                std::to_string(H) + " heads per layer)");
}

HeadWeights head_weights(const GPT2& m, int layer, int head, bool fold_ln_1) {
  check_head(m, layer, head);
  const int d = m.config.n_embd, dh = m.config.head_dim();
  const AttentionParams<float> p = m.attention(layer, m.params.data());
  HeadWeights w;
  w.W_Q = Matrix(d, dh), w.W_K = Matrix(d, dh), w.W_V = Matrix(d, dh), w.W_O = Matrix(dh, d);
  w.b_Q.resize(size_t(dh)), w.b_K.resize(size_t(dh)), w.b_V.resize(size_t(dh));
  const int c0 = head * dh;  // first column of the head inside each third
  for (int i = 0; i < d; i++) {
    const double s = fold_ln_1 ? double(p.ln_w[i]) : 1.0;
    const float* row = p.W_attn + int64_t(i) * 3 * d;
    for (int e = 0; e < dh; e++) {
      w.W_Q(i, e) = s * row[c0 + e];
      w.W_K(i, e) = s * row[d + c0 + e];
      w.W_V(i, e) = s * row[2 * d + c0 + e];
    }
  }
  for (int e = 0; e < dh; e++) {
    w.b_Q[size_t(e)] = p.b_attn[c0 + e];
    w.b_K[size_t(e)] = p.b_attn[d + c0 + e];
    w.b_V[size_t(e)] = p.b_attn[2 * d + c0 + e];
  }
  for (int e = 0; e < dh; e++)
    for (int j = 0; j < d; j++) w.W_O(e, j) = p.W_O[int64_t(c0 + e) * d + j];
  return w;
}

LayerInput layer_input(const GPT2& m, const std::vector<int>& ids, int layer, Activations& acts) {
  check_layer(m, layer);
  forward(m, ids, acts);
  const int T = acts.T, d = m.config.n_embd;
  LayerInput in;
  in.T = T;
  in.x = Matrix(T, d);
  in.u = Matrix(T, d);
  const auto& x = acts.resid[size_t(layer)];
  const auto& u = acts.attn[size_t(layer)].u;
  for (size_t i = 0; i < size_t(T) * d; i++) in.x.a[i] = x[i], in.u.a[i] = u[i];
  return in;
}

Matrix project_rows(const Matrix& u, const Matrix& W, const std::vector<double>& b) {
  Matrix y = matmul(u, W);
  if (!b.empty())
    for (int t = 0; t < y.rows; t++)
      for (int e = 0; e < y.cols; e++) y(t, e) += b[size_t(e)];
  return y;
}

Matrix score_matrix(const Matrix& q, const Matrix& k) {
  Matrix S = matmul(q, k, false, true);
  const double scale = 1.0 / std::sqrt(double(q.cols));
  for (double& s : S.a) s *= scale;
  return S;
}

Matrix causal_pattern(const Matrix& S) {
  Matrix A(S.rows, S.cols);
  for (int i = 0; i < S.rows; i++) {
    double mx = -std::numeric_limits<double>::infinity();
    for (int j = 0; j <= i && j < S.cols; j++) mx = std::max(mx, S(i, j));
    double sum = 0;
    for (int j = 0; j <= i && j < S.cols; j++) sum += A(i, j) = std::exp(S(i, j) - mx);
    for (int j = 0; j <= i && j < S.cols; j++) A(i, j) /= sum;
  }
  return A;
}

}  // namespace qkv::analysis
