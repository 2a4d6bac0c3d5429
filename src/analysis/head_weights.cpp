#include "qkv/analysis/head_weights.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "qkv/error.hpp"

namespace qkv::analysis {

Matrix project_rows(const Matrix& u, const Matrix& W, const std::vector<double>& b) {
  Matrix y = matmul(u, W);
  if (!b.empty())
    for (int t = 0; t < y.rows; t++)
      for (int e = 0; e < y.cols; e++) y(t, e) += b[size_t(e)];
  return y;
}

void check_layer(const Model& m, int layer) {
  const int L = m.arch.n_layer;
  if (layer < 0 || layer >= L)
    usage_error("--layer: " + std::to_string(layer) + " is outside [0, " + std::to_string(L) + ") (the model has " +
                std::to_string(L) + " layers)");
}

void check_head(const Model& m, int layer, int head) {
  check_layer(m, layer);
  const int H = m.arch.H;
  if (head < 0 || head >= H)
    usage_error("--head: " + std::to_string(head) + " is outside [0, " + std::to_string(H) + ") (the model has " +
                std::to_string(H) + " heads per layer)");
}

std::vector<double> norm_scale(const Model& m, const Weight& w) {
  const int d = m.arch.d;
  std::vector<float> f(size_t(d), 1.0f);
  if (w.present()) w.read(0, d, f.data());
  std::vector<double> s(static_cast<size_t>(d));
  for (int i = 0; i < d; i++) s[size_t(i)] = m.arch.norm == NormKind::RMSNormPlusOne ? 1.0 + double(f[size_t(i)]) : double(f[size_t(i)]);
  return s;
}

std::vector<HeadWeights> layer_head_weights(const Model& m, int layer, bool fold) {
  check_layer(m, layer);
  const Arch& a = m.arch;
  const int d = a.d, dh = a.dh, H = a.H, G = a.H / a.n_kv, qd = a.q_dim();
  const QkvMaps maps = qkv_maps(m, layer);
  const BlockWeights& bw = m.blocks[size_t(layer)];
  const std::vector<double> s = fold ? norm_scale(m, bw.ln1_w) : std::vector<double>(size_t(d), 1.0);
  std::vector<float> wo(size_t(bw.wo.numel()));
  bw.wo.read(0, bw.wo.numel(), wo.data());
  std::vector<HeadWeights> out(static_cast<size_t>(H));
  for (int h = 0; h < H; h++) {
    const int g = h / G;
    HeadWeights& w = out[size_t(h)];
    w.W_Q = Matrix(d, dh), w.W_K = Matrix(d, dh), w.W_V = Matrix(d, dh), w.W_O = Matrix(dh, d);
    for (int e = 0; e < dh; e++)
      for (int i = 0; i < d; i++) {  // the maps are nn.Linear [out, in]: W[i, e] = map[e-th output row, i]
        w.W_Q(i, e) = s[size_t(i)] * maps.Wq[size_t(h * dh + e) * d + i];
        w.W_K(i, e) = s[size_t(i)] * maps.Wk[size_t(g * dh + e) * d + i];
        w.W_V(i, e) = s[size_t(i)] * maps.Wv[size_t(g * dh + e) * d + i];
      }
    w.b_Q.assign(size_t(dh), 0.0), w.b_K.assign(size_t(dh), 0.0), w.b_V.assign(size_t(dh), 0.0);
    if (!maps.bq.empty())
      for (int e = 0; e < dh; e++) {
        w.b_Q[size_t(e)] = maps.bq[size_t(h * dh + e)];
        w.b_K[size_t(e)] = maps.bk[size_t(g * dh + e)];
        w.b_V[size_t(e)] = maps.bv[size_t(g * dh + e)];
      }
    // W_O: z [.., H·dh] -> [.., d]. nn.Linear stores [d, H·dh]; GPT-2's Conv1D c_proj stores [H·dh, d].
    for (int e = 0; e < dh; e++)
      for (int j = 0; j < d; j++)
        w.W_O(e, j) = bw.wo.in_out ? wo[size_t(h * dh + e) * d + j] : wo[size_t(j) * qd + size_t(h * dh + e)];
  }
  return out;
}

HeadWeights head_weights(const Model& m, int layer, int head, bool fold) {
  check_head(m, layer, head);
  return layer_head_weights(m, layer, fold)[size_t(head)];
}

LayerInput layer_input(const Model& m, const std::vector<int>& ids, int layer) {
  check_layer(m, layer);
  const Arch& a = m.arch;
  const std::string b = "blocks." + std::to_string(layer) + ".";
  const auto cache = run_with_cache(m, ids, [&](const std::string& n) { return n.rfind(b, 0) == 0; });
  LayerInput in;
  const int T = int(ids.size()), d = a.d;
  in.T = T;
  in.x = Matrix(T, d), in.u = Matrix(T, d);
  const Tensor& x = cache.at(b + "hook_resid_pre");
  const Tensor& u = cache.at(b + "ln1.hook_normalized");
  for (size_t i = 0; i < size_t(T) * d; i++) in.x.a[i] = x.data()[i], in.u.a[i] = u.data()[i];
  auto copy = [&](const std::string& name) {
    const Tensor& t = cache.at(b + name);
    return std::vector<float>(t.data(), t.data() + t.numel());
  };
  in.q = copy("attn.hook_q"), in.k = copy("attn.hook_k"), in.v = copy("attn.hook_v");
  in.rot_q = a.rotary() ? copy("attn.hook_rot_q") : in.q;
  in.rot_k = a.rotary() ? copy("attn.hook_rot_k") : in.k;
  in.scores = copy("attn.hook_attn_scores");
  return in;
}

Matrix head_rows(const std::vector<float>& act, int T, int n, int dh, int head) {
  Matrix r(T, dh);
  for (int t = 0; t < T; t++)
    for (int e = 0; e < dh; e++) r(t, e) = act[(size_t(t) * n + size_t(head)) * dh + size_t(e)];
  return r;
}

Matrix rotate_rows(const Arch& a, const Matrix& x) {
  if (!a.rotary()) return x;
  const int T = x.rows, dh = x.cols;
  Matrix y(T, dh);
  std::vector<float> e(static_cast<size_t>(dh));
  for (int t = 0; t < T; t++) {
    // column j of R_t: e_j rotated to position t by the forward's own rotation (cos and sin as it uses them)
    for (int j = 0; j < dh; j++) {
      std::fill(e.begin(), e.end(), 0.0f);
      e[size_t(j)] = 1.0f;
      apply_rotary(a, e.data(), 1, &t);
      for (int i = 0; i < dh; i++) y(t, i) += double(e[size_t(i)]) * x(t, j);
    }
  }
  return y;
}

bool visible(const Arch& a, int layer, int i, int j) {
  const int w = a.window_of(layer);
  return j <= i && (w <= 0 || i - j < w);
}

Matrix attention_pattern(const Arch& a, int layer, const Matrix& S) {
  Matrix A(S.rows, S.cols);
  const double cap = a.attn_softcap;
  for (int i = 0; i < S.rows; i++) {
    double mx = -std::numeric_limits<double>::infinity();
    auto s = [&](int j) { return cap > 0 ? cap * std::tanh(S(i, j) / cap) : S(i, j); };
    for (int j = 0; j < S.cols; j++)
      if (visible(a, layer, i, j)) mx = std::max(mx, s(j));
    double sum = 0;
    for (int j = 0; j < S.cols; j++)
      if (visible(a, layer, i, j)) sum += A(i, j) = std::exp(s(j) - mx);
    for (int j = 0; j < S.cols; j++) A(i, j) /= sum;
  }
  return A;
}

}  // namespace qkv::analysis
