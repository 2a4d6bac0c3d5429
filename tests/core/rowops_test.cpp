// The row kernels of the fast forward (rowops.hpp) on every path this CPU runs (forced through
// flash_force_path; the others skipped with a message) against their double twins, over row lengths
// around every vector width (1, 7, 8, 15, 16, 17, ..., GPT-2's 768 and 3072, Llama's 2816) and values far
// into GELU's and SiLU's tails: LayerNorm, bias + GELU, RMSNorm (w and 1 + w), rotary (rotate_half and
// adjacent pairs, full and partial) and the gated activations (SwiGLU, GeGLU).
#include "qkv/rowops.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "qkv/flash.hpp"
#include "path_fixture.hpp"

namespace qkv {
namespace {

class RowOps : public PathTest {};

std::vector<float> randn(size_t n, unsigned seed, double mean, double sd) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> dist(mean, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = float(dist(rng));
  return v;
}

TEST_P(RowOps, LayerNormMatchesDouble) {
  unsigned seed = 3;
  for (int d : {1, 2, 7, 8, 9, 15, 16, 17, 31, 33, 64, 100, 768, 769})
    for (int N : {1, 5, 300}) {  // 300 × 768 rows go to the OpenMP threads
      const auto x = randn(size_t(N) * d, seed++, 0.5, 3.0), w = randn(d, seed++, 1.0, 0.2),
                 b = randn(d, seed++, 0.0, 0.5);
      std::vector<float> y(x.size(), NAN);
      layernorm_rows(y.data(), x.data(), w.data(), b.data(), N, d, 1e-5f);
      const std::vector<double> wd(w.begin(), w.end()), bd(b.begin(), b.end());
      // Per row, float rounding of x - mean is magnified by 1/σ: the bound is a few ulps of
      // (|mean| + max |x - mean|) / σ · max |w| + |b|. (d = 2 rows with close values are ill-conditioned.)
      double worst = 0;
      for (int i = 0; i < N; i++) {
        std::vector<double> xd(x.begin() + long(i) * d, x.begin() + long(i + 1) * d), yd(d);
        rowops_detail::layernorm_row_f64(yd.data(), xd.data(), wd.data(), bd.data(), d, 1e-5);
        double m = 0, spread = 0, var = 0, wmax = 0, bmax = 0;
        for (double e : xd) m += e / d;
        for (int j = 0; j < d; j++)
          spread = std::max(spread, std::abs(xd[j] - m)), var += (xd[j] - m) * (xd[j] - m) / d,
          wmax = std::max(wmax, std::abs(wd[j])), bmax = std::max(bmax, std::abs(bd[j]));
        const double bound = 2e-6 * ((std::abs(m) + spread) / std::sqrt(var + 1e-5) * wmax + bmax);
        for (int j = 0; j < d; j++) {
          const float got = y[size_t(i) * d + j];
          ASSERT_FALSE(std::isnan(got)) << "d=" << d << " row " << i;
          worst = std::max(worst, std::abs(got - yd[j]) / bound);
        }
      }
      EXPECT_LE(worst, 1.0) << "d=" << d << " N=" << N << ": max error / bound";
    }
}

TEST_P(RowOps, GeluWithBiasMatchesDouble) {
  unsigned seed = 40;
  for (int n : {1, 3, 8, 15, 16, 17, 33, 100, 3072, 3073})
    for (int N : {1, 40}) {
      // values to ±25: both tails (the capped exponent on the negative side) and the bend near 0
      auto h = randn(size_t(N) * n, seed++, 0.0, 6.0);
      const auto b = randn(n, seed++, 0.0, 1.0);
      const std::vector<float> h0 = h;
      gelu_bias_rows(h.data(), b.data(), N, n);
      const std::vector<double> bd(b.begin(), b.end());
      for (int i = 0; i < N; i++) {
        std::vector<double> hd(h0.begin() + long(i) * n, h0.begin() + long(i + 1) * n);
        rowops_detail::gelu_bias_row_f64(hd.data(), bd.data(), n);
        for (int j = 0; j < n; j++) {
          const double got = h[size_t(i) * n + j], want = hd[j];
          // relative to the result: in the negative tail x·σ(2y) ≈ x·e^{2y} magnifies the float rounding
          // of y (a few ulps) by 2|y| (up to 88, the cap); past the cap the result is < 1e-36 either way
          const double x = double(h0[size_t(i) * n + j]) + b[j];
          const double two_y = 2 * 0.7978845608028654 * std::abs(x + 0.044715 * x * x * x);
          ASSERT_LE(std::abs(got - want), (2e-6 + 5e-7 * std::min(two_y, 88.0)) * std::abs(want) + 1e-30)
              << "n=" << n << " x=" << h0[size_t(i) * n + j] + b[j] << " got " << got << " want " << want;
        }
      }
    }
}

TEST_P(RowOps, RmsNormMatchesDouble) {
  unsigned seed = 70;
  for (bool one_plus : {false, true})
    for (int d : {1, 2, 7, 8, 9, 15, 16, 17, 31, 33, 64, 100, 1024, 1025, 2816})
      for (int N : {1, 5, 100}) {  // 100 × 1024 rows go to the OpenMP threads
        const auto x = randn(size_t(N) * d, seed++, 0.3, 2.0), w = randn(d, seed++, one_plus ? 0.0 : 1.0, 0.5);
        std::vector<float> y(x.size(), NAN), inplace = x;
        rmsnorm_rows(y.data(), x.data(), w.data(), N, d, 1e-6f, one_plus);
        rmsnorm_rows(inplace.data(), inplace.data(), w.data(), N, d, 1e-6f, one_plus);  // y = x, as Gemma's post-norms
        const std::vector<double> wd(w.begin(), w.end());
        for (int i = 0; i < N; i++) {
          std::vector<double> xd(x.begin() + long(i) * d, x.begin() + long(i + 1) * d), yd(d);
          rowops_detail::rmsnorm_row_f64(yd.data(), xd.data(), wd.data(), d, 1e-6, one_plus);
          double ss = 0;
          for (double e : xd) ss += e * e;
          const double r = 1 / std::sqrt(ss / d + 1e-6);
          for (int j = 0; j < d; j++) {
            // a few ulps of |x·r|·|w| (of |x·r|·(1 + |w|) for 1 + w: the float sum 1 + w rounds)
            const double bound = 4e-6 * std::abs(xd[j] * r) * (one_plus ? 1 + std::abs(wd[j]) : std::abs(wd[j])) + 1e-30;
            const float got = y[size_t(i) * d + j];
            ASSERT_LE(std::abs(got - yd[j]), bound) << "d=" << d << " 1+w=" << one_plus << " row " << i << " j " << j;
            ASSERT_EQ(got, inplace[size_t(i) * d + j]) << "in place differs: d=" << d;
          }
        }
      }
}

TEST_P(RowOps, RotaryMatchesDouble) {
  unsigned seed = 90;
  // (dh, r): full rotation at vector widths and odd halves, partial (Phi's r < dh), r = 2
  for (auto [dh, r] : std::vector<std::pair<int, int>>{{64, 64}, {128, 128}, {256, 256}, {80, 32}, {64, 16},
                                                       {14, 14}, {34, 34}, {50, 18}, {8, 2}, {96, 48}})
    for (bool adjacent : {false, true})
      for (auto [H, T] : std::vector<std::pair<int, int>>{{1, 1}, {3, 7}, {16, 64}}) {
        const int half = r / 2, P = T + 5;  // the tables cover positions 0 .. P-1; rows take shuffled ones
        std::vector<float> cs(size_t(P) * half), sn(size_t(P) * half);
        for (int p = 0; p < P; p++)
          for (int i = 0; i < half; i++) {
            const double ang = p * std::pow(10000.0, -2.0 * i / r);
            cs[size_t(p) * half + i] = float(std::cos(ang)), sn[size_t(p) * half + i] = float(std::sin(ang));
          }
        std::vector<int> pos(T);
        for (int t = 0; t < T; t++) pos[t] = (t * 7 + 3) % P;
        const auto x0 = randn(size_t(H) * T * dh, seed++, 0.0, 3.0);
        auto x = x0;
        rotary_rows(x.data(), H, T, dh, r, adjacent, cs.data(), sn.data(), pos.data());
        const std::vector<double> cd(cs.begin(), cs.end()), sd(sn.begin(), sn.end());
        for (int h = 0; h < H; h++)
          for (int t = 0; t < T; t++) {
            const size_t o = (size_t(h) * T + t) * dh;
            std::vector<double> pd(x0.begin() + long(o), x0.begin() + long(o + dh));
            rowops_detail::rotary_row_f64(pd.data(), cd.data() + size_t(pos[t]) * half, sd.data() + size_t(pos[t]) * half,
                                          r, adjacent);
            for (int j = 0; j < dh; j++) {
              // each output is x0·c ∓ x1·s: two products and a sum rounded, |c|, |s| <= 1
              const int partner = j >= r ? j : adjacent ? (j ^ 1) : (j < half ? j + half : j - half);
              const double bound = j >= r ? 0.0 : 2.5e-7 * (std::abs(x0[o + j]) + std::abs(x0[o + partner]));
              ASSERT_LE(std::abs(x[o + j] - pd[j]), bound)
                  << "dh=" << dh << " r=" << r << " adjacent=" << adjacent << " h=" << h << " t=" << t << " j=" << j;
            }
          }
      }
}

TEST_P(RowOps, GatedActivationsMatchDouble) {
  unsigned seed = 120;
  for (GateAct act : {GateAct::Silu, GateAct::GeluTanh})
    for (int n : {1, 3, 8, 15, 16, 17, 33, 100, 2816, 2817})
      for (int N : {1, 30}) {
        // g to ±30: both tails (the capped exponent on the negative side) and the bend near 0; g sits in
        // the second half of rows of 2n (the fused gate-up projection's layout)
        const auto g = randn(size_t(N) * 2 * n, seed++, 0.0, 7.0), h0 = randn(size_t(N) * n, seed++, 0.0, 2.0);
        auto h = h0;
        gated_rows(h.data(), g.data() + n, 2 * n, N, n, act);
        for (int i = 0; i < N; i++) {
          std::vector<double> hd(h0.begin() + long(i) * n, h0.begin() + long(i + 1) * n);
          const std::vector<double> gd(g.begin() + long(i) * 2 * n + n, g.begin() + long(i + 1) * 2 * n);
          rowops_detail::gated_row_f64(hd.data(), gd.data(), n, act);
          for (int j = 0; j < n; j++) {
            const double gv = gd[j], want = hd[j], got = h[size_t(i) * n + j];
            // relative to the result: in the negative tail g·σ(s) ≈ g·e^{s} magnifies the float rounding of
            // s (a few ulps) by |s| (up to 88, the cap); past the cap the result is < 1e-36 · |h| either way
            const double s = act == GateAct::Silu ? std::abs(gv)
                                                  : 2 * 0.7978845608028654 * std::abs(gv + 0.044715 * gv * gv * gv);
            ASSERT_LE(std::abs(got - want), (2e-6 + 5e-7 * std::min(s, 88.0)) * std::abs(want) + 1e-30)
                << "n=" << n << " act=" << int(act) << " g=" << gv << " got " << got << " want " << want;
          }
        }
      }
}

INSTANTIATE_TEST_SUITE_P(RowOps, RowOps,
                         ::testing::Values(FlashPath::Portable, FlashPath::Avx2, FlashPath::Avx512,
                                           FlashPath::Neon),
                         [](const ::testing::TestParamInfo<FlashPath>& p) {
                           return std::string(flash_path_name(p.param));
                         });

}  // namespace
}  // namespace qkv
