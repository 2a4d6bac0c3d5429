#include "qkv/analysis/swap.hpp"

#include <algorithm>
#include <cmath>

#include "qkv/analysis/head_weights.hpp"

namespace qkv::analysis {

SwapResult swap_query_key(const Model& model, const std::vector<int>& ids, int layer, int head) {
  check_head(model, layer, head);
  const Arch& a = model.arch;
  const LayerInput in = layer_input(model, ids, layer);
  const HeadWeights w = head_weights(model, layer, head);
  SwapResult r;
  r.layer = layer, r.head = head, r.T = in.T, r.family = a.model_type, r.rotated = a.rotary(), r.has_bias = a.qkv_bias;
  r.scale = a.attn_scale;
  const int T = in.T;
  auto scores = [&](const Matrix& q, const Matrix& k) {
    Matrix S = matmul(rotate_rows(a, q), rotate_rows(a, k), false, true);
    for (double& s : S.a) s *= r.scale;
    return S;
  };
  const Matrix q = project_rows(in.u, w.W_Q, w.b_Q), k = project_rows(in.u, w.W_K, w.b_K);
  r.S = scores(q, k);
  r.S_full = scores(/*q'=*/k, /*k'=*/q);
  r.S_matrices = scores(project_rows(in.u, w.W_K, w.b_Q), project_rows(in.u, w.W_Q, w.b_K));

  for (int i = 0; i < T; i++)
    for (int j = 0; j < T; j++)
      if (visible(a, layer, i, j)) {
        const double s = a.attn_softcap > 0 ? a.attn_softcap * std::tanh(r.S(i, j) / a.attn_softcap) : r.S(i, j);
        r.S_vs_model_max_abs = std::max(r.S_vs_model_max_abs, std::abs(s - double(in.scores[(size_t(head) * T + i) * T + j])));
      }

  const Matrix ST = transpose(r.S);
  const double nS = frobenius(r.S);
  r.full_vs_ST_max_abs = max_abs_difference(r.S_full, ST);
  if (nS > 0) {
    r.full_vs_ST_rel = frobenius_distance(r.S_full, ST) / nS;
    r.matrices_vs_S_rel = frobenius_distance(r.S_matrices, r.S) / nS;
    r.matrices_vs_ST_rel = frobenius_distance(r.S_matrices, ST) / nS;
  }
  const Matrix A = attention_pattern(a, layer, r.S), AT = transpose(A);
  const Matrix A_full = attention_pattern(a, layer, r.S_full);
  const double nA = frobenius(A);
  r.pattern_full_vs_AT_rel = frobenius_distance(A_full, AT) / nA;
  r.pattern_full_vs_A_rel = frobenius_distance(A_full, A) / nA;
  for (int j = 0; j < T; j++) {
    double col = 0;
    for (int i = 0; i < T; i++) col += A(i, j);
    r.column_sum_max_dev = std::max(r.column_sum_max_dev, std::abs(col - 1.0));
  }
  return r;
}

}  // namespace qkv::analysis
