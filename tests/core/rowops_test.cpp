// The row kernels of the fast forward (rowops.hpp) on every path this CPU runs (forced through
// flash_force_path; the others skipped with a message) against their double twins, over row lengths
// around every vector width (1, 7, 8, 15, 16, 17, ..., GPT-2's 768 and 3072) and values far into
// GELU's tails.
#include "qkv/rowops.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "qkv/flash.hpp"

namespace qkv {
namespace {

class RowOps : public ::testing::TestWithParam<FlashPath> {
 protected:
  void SetUp() override {
    flash_force_path(FlashPath::Auto);
    if (!flash_path_supported(GetParam()))
      GTEST_SKIP() << "the " << flash_path_name(GetParam()) << " path cannot run on this CPU/build";
    flash_force_path(GetParam());
  }
  void TearDown() override { flash_force_path(FlashPath::Auto); }
};

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

INSTANTIATE_TEST_SUITE_P(RowOps, RowOps,
                         ::testing::Values(FlashPath::Portable, FlashPath::Avx2, FlashPath::Avx512,
                                           FlashPath::Neon),
                         [](const ::testing::TestParamInfo<FlashPath>& p) {
                           return std::string(flash_path_name(p.param));
                         });

}  // namespace
}  // namespace qkv
