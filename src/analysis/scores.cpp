#include "qkv/analysis/scores.hpp"

#include <algorithm>
#include <cmath>

#include "qkv/analysis/head_weights.hpp"

namespace qkv::analysis {

BilinearNorms bilinear_norms(const Matrix& W_Q, const Matrix& W_K) {
  const Matrix Gq = gram(W_Q), Gk = gram(W_K);     // [dh, dh]
  const Matrix C = matmul(W_K, W_Q, true, false);  // W_KᵀW_Q [dh, dh]
  const double n2 = trace_of_product(Gq, Gk);      // ‖M‖²
  const double tMM = trace_of_product(C, C);       // tr(M·M)
  BilinearNorms b;
  b.norm = std::sqrt(std::max(0.0, n2));
  if (n2 > 0) {
    b.antisym_share = std::sqrt(std::max(0.0, 2 * n2 - 2 * tMM)) / (2 * b.norm);
    b.sym_share = std::sqrt(std::max(0.0, 2 * n2 + 2 * tMM)) / (2 * b.norm);
  }
  return b;
}

ScoresResult score_asymmetry(const Model& model, const std::vector<int>& ids, int layer, int head) {
  check_head(model, layer, head);
  const Arch& a = model.arch;
  const LayerInput in = layer_input(model, ids, layer);
  const HeadWeights w = head_weights(model, layer, head);
  ScoresResult r;
  r.layer = layer, r.head = head, r.T = in.T, r.d = a.d, r.dh = a.dh, r.family = a.model_type, r.rotated = a.rotary();
  r.scale = a.attn_scale, r.kv_head = head / (a.H / a.n_kv);
  const int T = r.T, dh = r.dh;
  const Matrix q = head_rows(in.rot_q, T, a.H, dh, head), k = head_rows(in.rot_k, T, a.n_kv, dh, r.kv_head);
  r.S = matmul(q, k, false, true);
  for (double& s : r.S.a) s *= r.scale;
  for (int i = 0; i < T; i++)
    for (int j = 0; j < T; j++)
      if (visible(a, layer, i, j)) {
        const double s = a.attn_softcap > 0 ? a.attn_softcap * std::tanh(r.S(i, j) / a.attn_softcap) : r.S(i, j);
        r.S_vs_hook_max_abs = std::max(r.S_vs_hook_max_abs, std::abs(s - double(in.scores[(size_t(head) * T + i) * T + j])));
      }

  const double nS = frobenius(r.S);
  r.asym_rel = nS > 0 ? frobenius_distance(r.S, transpose(r.S)) / nS : 0.0;
  for (int i = 0; i < T; i++)
    for (int j = 0; j < i; j++) {
      const double diff = std::abs(r.S(i, j) - r.S(j, i));
      if (diff > r.max_asym) r.max_asym = diff, r.max_i = i, r.max_j = j;
    }
  r.S_ij = r.S(r.max_i, r.max_j);
  r.S_ji = r.S(r.max_j, r.max_i);
  r.M = bilinear_norms(w.W_Q, w.W_K);

  // The four parts, each side rotated to its own position: q_i = R_i(u_i W_Q) + R_i b_Q, k_j likewise.
  const Matrix qx = rotate_rows(a, project_rows(in.u, w.W_Q, {})), kx = rotate_rows(a, project_rows(in.u, w.W_K, {}));
  Matrix bq(T, dh), bk(T, dh);
  for (int t = 0; t < T; t++)
    for (int e = 0; e < dh; e++) bq(t, e) = w.b_Q[size_t(e)], bk(t, e) = w.b_K[size_t(e)];
  const Matrix bqr = rotate_rows(a, bq), bkr = rotate_rows(a, bk);
  auto scaled = [&](Matrix m) {
    for (double& s : m.a) s *= r.scale;
    return m;
  };
  const Matrix xx = scaled(matmul(qx, kx, false, true)), xb = scaled(matmul(qx, bkr, false, true));
  const Matrix bx = scaled(matmul(bqr, kx, false, true)), bb = scaled(matmul(bqr, bkr, false, true));
  double n_bias = 0, n_bias_seen = 0, n_S_seen = 0;
  for (int i = 0; i < T; i++) {
    double bias_mean = 0, S_mean = 0;
    int n = 0;
    for (int j = 0; j < T; j++)
      if (visible(a, layer, i, j)) bias_mean += r.S(i, j) - xx(i, j), S_mean += r.S(i, j), n++;
    bias_mean /= n, S_mean /= n;
    for (int j = 0; j < T; j++) {
      const double bias_part = xb(i, j) + bx(i, j) + bb(i, j);
      n_bias += bias_part * bias_part;
      if (visible(a, layer, i, j)) {
        const double c = r.S(i, j) - xx(i, j) - bias_mean;
        n_bias_seen += c * c;
        n_S_seen += (r.S(i, j) - S_mean) * (r.S(i, j) - S_mean);
      }
      r.reconstruction_max_abs = std::max(r.reconstruction_max_abs, std::abs(xx(i, j) + bias_part - r.S(i, j)));
    }
  }
  if (nS > 0) {
    r.share_xx = frobenius(xx) / nS;
    r.share_xb = frobenius(xb) / nS;
    r.share_bx = frobenius(bx) / nS;
    r.share_bb = frobenius(bb) / nS;
    r.bias_share = std::sqrt(n_bias) / nS;
  }
  if (n_S_seen > 0) r.bias_share_softmax = std::sqrt(n_bias_seen / n_S_seen);
  return r;
}

}  // namespace qkv::analysis
