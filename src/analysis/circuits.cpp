#include "qkv/analysis/circuits.hpp"

#include <algorithm>
#include <cmath>
#include <random>

#include "qkv/analysis/eigen.hpp"
#include "qkv/analysis/head_weights.hpp"
#include "qkv/analysis/scores.hpp"

namespace qkv::analysis {
namespace {

double sq_frobenius_of_product_core(const Matrix& G1, const Matrix& C, const Matrix& G2) {
  // tr(Cᵀ G1 C G2) = Σ_ij (G1 C)_ij (C G2)_ij  (G1 symmetric)
  const Matrix L = matmul(G1, C), R = matmul(C, G2);
  double s = 0;
  for (size_t i = 0; i < L.a.size(); i++) s += L.a[i] * R.a[i];
  return std::max(0.0, s);
}

double mean_std(const std::vector<double>& v, double* sd) {
  double m = 0, s = 0;
  for (double x : v) m += x;
  m /= double(v.size());
  for (double x : v) s += (x - m) * (x - m);
  *sd = v.size() > 1 ? std::sqrt(s / double(v.size() - 1)) : 0.0;
  return m;
}

}  // namespace

double low_rank_norm(const Matrix& A, const Matrix& B) {
  return std::sqrt(std::max(0.0, trace_of_product(gram(A), matmul(B, B, false, true))));
}

double composition_score(const Matrix& A1, const Matrix& B1, const Matrix& A2, const Matrix& B2) {
  const double num = sq_frobenius_of_product_core(gram(A1), matmul(B1, A2), matmul(B2, B2, false, true));
  const double den = low_rank_norm(A1, B1) * low_rank_norm(A2, B2);
  return den > 0 ? std::sqrt(num) / den : 0.0;
}

CompositionBaseline composition_baseline(int d, int dh, int samples, uint64_t seed) {
  // Gaussian factors of the same shapes (the scores do not depend on their scale).
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> N(0, 1);
  auto gaussian = [&](int rows, int cols) {
    Matrix x(rows, cols);
    for (double& v : x.a) v = N(rng);
    return x;
  };
  std::vector<double> qs, ks, vs;
  for (int s = 0; s < samples; s++) {
    const Matrix V1 = gaussian(d, dh), O1 = gaussian(dh, d), Q2 = gaussian(d, dh), K2 = gaussian(d, dh);
    const Matrix V2 = gaussian(d, dh), O2 = gaussian(dh, d);
    qs.push_back(composition_score(V1, O1, Q2, transpose(K2)));
    ks.push_back(composition_score(V1, O1, K2, transpose(Q2)));
    vs.push_back(composition_score(V1, O1, V2, O2));
  }
  CompositionBaseline b;
  b.samples = samples;
  if (samples > 0) {
    b.q_mean = mean_std(qs, &b.q_std);
    b.k_mean = mean_std(ks, &b.k_std);
    b.v_mean = mean_std(vs, &b.v_std);
  }
  return b;
}

CircuitsResult circuits(const Model& m, const CircuitsOptions& opt) {
  const Arch& a = m.arch;
  const int L = a.n_layer, H = a.H, d = a.d, dh = a.dh, G = a.H / a.n_kv, V = a.vocab_size;
  if (opt.target_layer >= L) check_layer(m, opt.target_layer);
  CircuitsResult r;
  r.options = opt;
  r.family = a.model_type, r.H = H, r.n_kv = a.n_kv;
  struct HeadFactors {
    HeadWeights w;
    Matrix G_Q, G_K, G_V, G_O;
    double qk = 0, ov = 0;
  };
  std::vector<std::vector<HeadFactors>> layers(static_cast<size_t>(L));
  for (int l = 0; l < L; l++)
    for (HeadWeights& w : layer_head_weights(m, l, opt.fold_ln)) {
      HeadFactors f;
      f.G_Q = gram(w.W_Q), f.G_K = gram(w.W_K), f.G_V = gram(w.W_V), f.G_O = matmul(w.W_O, w.W_O, false, true);
      f.ov = std::sqrt(std::max(0.0, trace_of_product(f.G_V, f.G_O)));
      f.w = std::move(w);
      layers[size_t(l)].push_back(std::move(f));
    }

  // W_U W_E [d, d] = lm_headᵀ · embed (tied: embedᵀ · embed), the final norm's multiplier folded into its
  // rows.
  Matrix UE;
  if (opt.copying) {
    // Σ over the vocabulary in chunks of rows (a [V, d] double copy of a large vocabulary would be GBs).
    const Weight& Wu = m.lm_head.present() ? m.lm_head : m.wte;
    UE = Matrix(d, d);
    const int chunk = 1024;
    std::vector<float> fu, fe;
    for (int v0 = 0; v0 < V; v0 += chunk) {
      const int nv = std::min(chunk, V - v0);
      fu.resize(size_t(nv) * d), fe.resize(size_t(nv) * d);
      Wu.read(int64_t(v0) * d, int64_t(nv) * d, fu.data());
      m.wte.read(int64_t(v0) * d, int64_t(nv) * d, fe.data());
      Matrix U(nv, d), E(nv, d);
      for (size_t i = 0; i < fu.size(); i++) U.a[i] = fu[i], E.a[i] = fe[i];
      const Matrix part = matmul(U, E, true, false);  // U_chunkᵀ E_chunk [d, d]
      for (size_t i = 0; i < UE.a.size(); i++) UE.a[i] += part.a[i];
    }
    const double es = a.embed_scale ? std::sqrt(double(d)) : 1.0;
    const std::vector<double> lnf = opt.fold_ln ? norm_scale(m, m.lnf_w) : std::vector<double>(size_t(d), 1.0);
    for (int i = 0; i < d; i++)
      for (int j = 0; j < d; j++) UE(i, j) *= lnf[size_t(i)] * es;
  }
  for (int l = 0; l < L; l++)
    for (int h = 0; h < H; h++) {
      const HeadFactors& f = layers[size_t(l)][size_t(h)];
      HeadCircuit c;
      c.layer = l, c.head = h;
      const BilinearNorms qk = bilinear_norms(f.w.W_Q, f.w.W_K);
      c.qk_norm = qk.norm, c.qk_antisym_share = qk.antisym_share;
      c.ov_norm = f.ov;
      if (opt.copying) {
        const Matrix core = matmul(f.w.W_O, matmul(UE, f.w.W_V));  // W_O W_U W_E W_V [dh, dh]
        double sum = 0, sum_abs = 0;
        for (const auto& lam : eigenvalues(core)) sum += lam.real(), sum_abs += std::abs(lam);
        c.copying = sum_abs > 0 ? sum / sum_abs : 0.0;
      }
      r.heads.push_back(c);
      layers[size_t(l)][size_t(h)].qk = qk.norm;
    }

  // Per pair: ‖OV1 · right‖² = tr(Cᵀ G_V1 C G2), C = W_O^h1 · (the later head's input-side factor) [dh, dh].
  auto ratio = [](double sq, double den) { return den > 0 ? std::sqrt(std::max(0.0, sq)) / den : 0.0; };
  for (int l2 = 0; l2 < L; l2++) {
    if (opt.target_layer >= 0 && l2 != opt.target_layer) continue;
    for (int l1 = 0; l1 < l2; l1++)
      for (int h1 = 0; h1 < H; h1++) {
        const HeadFactors& s = layers[size_t(l1)][size_t(h1)];
        for (int h2 = 0; h2 < H; h2++) {
          const HeadFactors& t = layers[size_t(l2)][size_t(h2)];
          const Matrix Cq = matmul(s.w.W_O, t.w.W_Q), Ck = matmul(s.w.W_O, t.w.W_K), Cv = matmul(s.w.W_O, t.w.W_V);
          r.compositions.push_back({l1, h1, l2, h2, ratio(sq_frobenius_of_product_core(s.G_V, Cq, t.G_K), s.ov * t.qk),
                                    ratio(sq_frobenius_of_product_core(s.G_V, Ck, t.G_Q), s.ov * t.qk),
                                    ratio(sq_frobenius_of_product_core(s.G_V, Cv, t.G_O), s.ov * t.ov)});
        }
        if (G > 1)
          for (int g = 0; g < a.n_kv; g++) {
            const HeadFactors& t = layers[size_t(l2)][size_t(g * G)];  // any head of the group: same W_K^g, W_V^g
            Matrix I(dh, dh);
            for (int e = 0; e < dh; e++) I(e, e) = 1;
            const Matrix Ck = matmul(s.w.W_O, t.w.W_K), Cv = matmul(s.w.W_O, t.w.W_V);
            const double nk = std::sqrt(std::max(0.0, [&] { double x = 0; for (int e = 0; e < dh; e++) x += t.G_K(e, e); return x; }()));
            const double nv = std::sqrt(std::max(0.0, [&] { double x = 0; for (int e = 0; e < dh; e++) x += t.G_V(e, e); return x; }()));
            r.group_compositions.push_back({l1, h1, l2, g, ratio(sq_frobenius_of_product_core(s.G_V, Ck, I), s.ov * nk),
                                            ratio(sq_frobenius_of_product_core(s.G_V, Cv, I), s.ov * nv)});
          }
      }
  }
  r.baseline = composition_baseline(d, dh, opt.baseline_samples, opt.seed);
  if (G > 1 && opt.baseline_samples > 0) {  // the group scores' own baseline: ‖V1 O1 X‖/(‖V1 O1‖‖X‖), X [d, dh]
    std::mt19937_64 rng(opt.seed + 1);
    std::normal_distribution<double> N(0, 1);
    auto gaussian = [&](int rows, int cols) {
      Matrix x(rows, cols);
      for (double& v : x.a) v = N(rng);
      return x;
    };
    Matrix I(dh, dh);
    for (int e = 0; e < dh; e++) I(e, e) = 1;
    std::vector<double> ks, vs;
    for (int s = 0; s < opt.baseline_samples; s++) {
      const Matrix V1 = gaussian(d, dh), O1 = gaussian(dh, d);
      ks.push_back(composition_score(V1, O1, gaussian(d, dh), I));
      vs.push_back(composition_score(V1, O1, gaussian(d, dh), I));
    }
    r.baseline.kg_mean = mean_std(ks, &r.baseline.kg_std);
    r.baseline.vg_mean = mean_std(vs, &r.baseline.vg_std);
  }
  return r;
}

}  // namespace qkv::analysis
