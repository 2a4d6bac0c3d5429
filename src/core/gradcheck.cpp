#include "qkv/gradcheck.hpp"

#include <algorithm>
#include <cmath>
#include <random>

#include "qkv/ops.hpp"

namespace qkv {

std::vector<double> central_difference(const std::function<double()>& loss, std::vector<double>& p, double h) {
  std::vector<double> g(p.size());
  for (size_t i = 0; i < p.size(); i++) {
    const double old = p[i];
    p[i] = old + h;
    const double up = loss();
    p[i] = old - h;
    const double down = loss();
    p[i] = old;
    g[i] = (up - down) / (2 * h);
  }
  return g;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); i++) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

namespace {

std::vector<double> randn(size_t n, std::mt19937_64& rng, double stddev = 1.0) {
  std::normal_distribution<double> dist(0.0, stddev);
  std::vector<double> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); i++) s += a[i] * b[i];
  return s;
}

double max_row_sum(const std::vector<double>& dS, int64_t rows, int cols) {
  double m = 0;
  for (int64_t r = 0; r < rows; r++) {
    double s = 0;
    for (int j = 0; j < cols; j++) s += dS[r * cols + j];
    m = std::max(m, std::abs(s));
  }
  return m;
}

// A third of a [rows, 3d] matrix (or of a [3d] vector when rows == 1): columns [part·d, (part+1)·d).
std::vector<double> third(const std::vector<double>& m, int rows, int d, int part) {
  std::vector<double> out;
  for (int r = 0; r < rows; r++)
    out.insert(out.end(), m.begin() + r * 3 * d + part * d, m.begin() + r * 3 * d + (part + 1) * d);
  return out;
}

}  // namespace

GradcheckResult gradcheck_head(int T, int dk, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<double> Q = randn(size_t(T) * dk, rng), K = randn(size_t(T) * dk, rng), V = randn(size_t(T) * dk, rng);
  const std::vector<double> dO = randn(size_t(T) * dk, rng);
  const double scale = 1.0 / std::sqrt(double(dk));
  std::vector<double> S(size_t(T) * T), A(S.size()), O(size_t(T) * dk);
  auto forward = [&] {
    scores_forward(S.data(), Q.data(), K.data(), 1, T, dk, scale);
    causal_mask_forward(S.data(), 1, T);
    softmax_forward(A.data(), S.data(), T, T);
    mix_forward(O.data(), A.data(), V.data(), 1, T, dk);
    return dot(dO, O);
  };
  forward();
  std::vector<double> dA(S.size()), dS(S.size()), dQ(Q.size()), dK(K.size()), dV(V.size());
  mix_backward(dA.data(), dV.data(), dO.data(), A.data(), V.data(), 1, T, dk);
  softmax_backward(dS.data(), dA.data(), A.data(), T, T);
  scores_backward(dQ.data(), dK.data(), dS.data(), Q.data(), K.data(), 1, T, dk, scale);

  // dS numerically: perturb the (unmasked) scores themselves and rerun softmax and mix.
  const std::vector<double> S0 = S;
  std::vector<double> Sp = S0;
  auto from_scores = [&] {
    std::vector<double> Ap(Sp.size()), Op(O.size());
    softmax_forward(Ap.data(), Sp.data(), T, T);
    mix_forward(Op.data(), Ap.data(), V.data(), 1, T, dk);
    return dot(dO, Op);
  };
  std::vector<double> dS_num = central_difference(from_scores, Sp);
  for (int i = 0; i < T; i++)  // masked entries are -inf: their derivative is 0 by definition
    for (int j = i + 1; j < T; j++) dS_num[size_t(i) * T + j] = 0;

  GradcheckResult r;
  r.max_abs_error.push_back({"dQ", max_abs_diff(dQ, central_difference(forward, Q))});
  r.max_abs_error.push_back({"dK", max_abs_diff(dK, central_difference(forward, K))});
  r.max_abs_error.push_back({"dV", max_abs_diff(dV, central_difference(forward, V))});
  r.max_abs_error.push_back({"dS", max_abs_diff(dS, dS_num)});
  r.ds_row_sum_max_abs = max_row_sum(dS, T, T);
  return r;
}

GradcheckResult gradcheck_sublayer(const AttentionShape& s, uint64_t seed) {
  s.validate();
  std::mt19937_64 rng(seed);
  const int T = s.T, d = s.d;
  std::vector<double> x = randn(size_t(T) * d, rng), ln_w = randn(d, rng, 0.3), ln_b = randn(d, rng, 0.3),
                      W_attn = randn(size_t(d) * 3 * d, rng, 0.7), b_attn = randn(3 * size_t(d), rng, 0.3),
                      W_O = randn(size_t(d) * d, rng, 0.5), b_O = randn(d, rng, 0.3);
  for (auto& w : ln_w) w += 1.0;
  const std::vector<double> dout = randn(size_t(T) * d, rng);
  AttentionParams<double> p{ln_w.data(), ln_b.data(), W_attn.data(), b_attn.data(), W_O.data(), b_O.data()};
  AttentionCache<double> cache;
  std::vector<double> out(x.size());
  auto loss = [&] {
    attention_sublayer_forward(out.data(), x.data(), p, s, cache);
    return dot(dout, out);
  };
  loss();
  std::vector<double> dx(x.size()), dln_w(d), dln_b(d), dW_attn(W_attn.size()), db_attn(b_attn.size()),
      dW_O(W_O.size()), db_O(d);
  AttentionGrads<double> g{dln_w.data(), dln_b.data(), dW_attn.data(), db_attn.data(), dW_O.data(), db_O.data()};
  attention_sublayer_backward(dx.data(), g, dout.data(), x.data(), p, s, cache);
  const double ds_rows = max_row_sum(cache.dS, int64_t(s.H) * T, T);

  const auto nW_attn = central_difference(loss, W_attn), nb_attn = central_difference(loss, b_attn);
  GradcheckResult r;
  r.max_abs_error.push_back({"dx", max_abs_diff(dx, central_difference(loss, x))});
  const char* parts[3] = {"Q", "K", "V"};
  for (int part = 0; part < 3; part++)
    r.max_abs_error.push_back({std::string("dW_") + parts[part],
                               max_abs_diff(third(dW_attn, d, d, part), third(nW_attn, d, d, part))});
  for (int part = 0; part < 3; part++)
    r.max_abs_error.push_back({std::string("db_") + parts[part],
                               max_abs_diff(third(db_attn, 1, d, part), third(nb_attn, 1, d, part))});
  r.max_abs_error.push_back({"dW_O", max_abs_diff(dW_O, central_difference(loss, W_O))});
  r.max_abs_error.push_back({"db_O", max_abs_diff(db_O, central_difference(loss, b_O))});
  r.max_abs_error.push_back({"dln_1.weight", max_abs_diff(dln_w, central_difference(loss, ln_w))});
  r.max_abs_error.push_back({"dln_1.bias", max_abs_diff(dln_b, central_difference(loss, ln_b))});
  r.ds_row_sum_max_abs = ds_rows;
  return r;
}

}  // namespace qkv
