// The fused causal attention (flash.hpp): every kernel path this CPU can run (portable, AVX2, AVX-512,
// NEON; each forced in turn, the others skipped with a message) against the double reference over many
// shapes and softmax temperatures, multi-head and grouped-query; the reference backward against central
// finite differences in double; each path's vectorised exp against double exp.
#include "qkv/flash.hpp"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "qkv/error.hpp"

namespace qkv {
namespace {

std::vector<float> randn(size_t n, unsigned seed, double stddev = 1.0) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> dist(0.0, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(dist(rng));
  return v;
}

// max |a - b| / max |b|
double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  double scale = 1e-30, err = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    scale = std::max(scale, std::abs(static_cast<double>(b[i])));
    err = std::max(err, std::abs(static_cast<double>(a[i]) - b[i]));
    if (std::isnan(a[i])) return std::numeric_limits<double>::infinity();
  }
  return err / scale;
}

// Forces one path per instantiation (skipped, saying so, where this CPU cannot run it); restores the
// automatic choice after each test.
class FlashKernels : public ::testing::TestWithParam<FlashPath> {
 protected:
  void SetUp() override {
    flash_force_path(FlashPath::Auto);
    if (!flash_path_supported(GetParam()))
      GTEST_SKIP() << "the " << flash_path_name(GetParam()) << " path cannot run on this CPU/build (best here: "
                   << flash_path_name() << ")";
    flash_force_path(GetParam());
    ASSERT_EQ(flash_path(), GetParam());
  }
  void TearDown() override { flash_force_path(FlashPath::Auto); }
};

struct Case {
  int H, T, dh;
  float scale;
  int n_kv = 0;  // 0: H (multi-head, the entry points without _gqa)
};

// Runs fast forward + backward and the reference on one case; checks everything within tol.
void check_case(const Case& c, unsigned seed, double tol_fwd, double tol_bwd) {
  const bool gqa = c.n_kv != 0;
  const int n_kv = gqa ? c.n_kv : c.H;
  const size_t n = static_cast<size_t>(c.H) * c.T * c.dh, nkv = static_cast<size_t>(n_kv) * c.T * c.dh;
  const auto q = randn(n, seed), k = randn(nkv, seed + 1), v = randn(nkv, seed + 2), dz = randn(n, seed + 3);
  std::vector<float> z(n), lse(static_cast<size_t>(c.H) * c.T), zr(n), lser(lse.size());
  if (gqa) {
    flash_attention_forward_gqa(q.data(), k.data(), v.data(), z.data(), lse.data(), c.H, n_kv, c.T, c.dh,
                                c.scale);
    flash_attention_forward_reference_gqa(q.data(), k.data(), v.data(), zr.data(), lser.data(), c.H, n_kv, c.T,
                                          c.dh, c.scale);
  } else {
    flash_attention_forward(q.data(), k.data(), v.data(), z.data(), lse.data(), c.H, c.T, c.dh, c.scale);
    flash_attention_forward_reference(q.data(), k.data(), v.data(), zr.data(), lser.data(), c.H, c.T, c.dh,
                                      c.scale);
  }
  EXPECT_LE(rel_err(z, zr), tol_fwd) << "z";
  // lse is compared relative to max(1, |lse|): for T = 1 with tiny scores it is ~0.
  double lse_err = 0.0;
  for (size_t i = 0; i < lse.size(); ++i)
    lse_err = std::max(
        lse_err, std::abs(static_cast<double>(lse[i]) - lser[i]) / std::max(1.0, std::abs(double(lser[i]))));
  EXPECT_LE(lse_err, tol_fwd) << "lse";

  std::vector<float> dq(n, NAN), dk(nkv, NAN), dv(nkv, NAN), dqr(n), dkr(nkv), dvr(nkv);
  if (gqa) {
    flash_attention_backward_gqa(q.data(), k.data(), v.data(), z.data(), lse.data(), dz.data(), dq.data(),
                                 dk.data(), dv.data(), c.H, n_kv, c.T, c.dh, c.scale);
    flash_attention_backward_reference_gqa(q.data(), k.data(), v.data(), zr.data(), lser.data(), dz.data(),
                                           dqr.data(), dkr.data(), dvr.data(), c.H, n_kv, c.T, c.dh, c.scale);
  } else {
    flash_attention_backward(q.data(), k.data(), v.data(), z.data(), lse.data(), dz.data(), dq.data(),
                             dk.data(), dv.data(), c.H, c.T, c.dh, c.scale);
    flash_attention_backward_reference(q.data(), k.data(), v.data(), zr.data(), lser.data(), dz.data(),
                                       dqr.data(), dkr.data(), dvr.data(), c.H, c.T, c.dh, c.scale);
  }
  // dq and dk come from dS = P ∘ (dP - D), a difference of terms of size |dP| <= ‖dz_i‖‖v_j‖ that cancel
  // when a row is near one-hot; in fp32 its error is ~1e-7·|dP| whatever the size of the result. So
  // their max error must be within tol of max |dq|, or within tol/10 of the bound
  // |dq| <= 2·scale·max|dP|·max|k| (|dk| likewise with q). The near-one-hot rows at T <= 3 need the latter.
  // (With n_kv < H, dk sums H / n_kv query heads: the bound grows by that factor.)
  double dz_n = 0.0, v_n = 0.0, k_max = 0.0, q_max = 0.0;
  for (size_t r = 0; r < n / c.dh; ++r) {
    double a = 0.0;
    for (int d = 0; d < c.dh; ++d) a += double(dz[r * c.dh + d]) * dz[r * c.dh + d];
    dz_n = std::max(dz_n, std::sqrt(a));
  }
  for (size_t r = 0; r < nkv / c.dh; ++r) {
    double b = 0.0;
    for (int d = 0; d < c.dh; ++d) b += double(v[r * c.dh + d]) * v[r * c.dh + d];
    v_n = std::max(v_n, std::sqrt(b));
  }
  for (size_t i = 0; i < nkv; ++i) k_max = std::max(k_max, std::abs(double(k[i])));
  for (size_t i = 0; i < n; ++i) q_max = std::max(q_max, std::abs(double(q[i])));
  const double dP_max = dz_n * v_n;
  auto max_abs = [](const std::vector<float>& x) {
    double m = 0.0;
    for (float e : x) m = std::max(m, std::abs(double(e)));
    return m;
  };
  auto max_diff = [](const std::vector<float>& a, const std::vector<float>& b) {
    double m = 0.0;
    for (size_t i = 0; i < a.size(); ++i) {
      if (std::isnan(a[i])) return std::numeric_limits<double>::infinity();
      m = std::max(m, std::abs(double(a[i]) - b[i]));
    }
    return m;
  };
  const double eq = max_diff(dq, dqr), ek = max_diff(dk, dkr);
  const double bq = 2 * c.scale * dP_max * k_max, bk = 2 * c.scale * dP_max * q_max * (c.H / n_kv);
  EXPECT_TRUE(eq <= tol_bwd * max_abs(dqr) || eq <= 0.1 * tol_bwd * bq)
      << "dq: " << eq << " of " << max_abs(dqr);
  EXPECT_TRUE(ek <= tol_bwd * max_abs(dkr) || ek <= 0.1 * tol_bwd * bk)
      << "dk: " << ek << " of " << max_abs(dkr);
  EXPECT_LE(rel_err(dv, dvr), tol_bwd) << "dv";
}

TEST_P(FlashKernels, MatchesReferenceOverShapesAndTemperatures) {
  unsigned seed = 1;
  for (int H : {1, 3})
    for (int T : {1, 2, 3, 7, 16, 17, 64, 127, 200})
      for (int dh : {1, 7, 16, 33, 64, 80})
        // soft (scores ~N(0, 0.3²)), GPT-2's 1/sqrt(dh), and peaked (scores ~N(0, 10²): rows near one-hot)
        for (float temp : {0.3f, 1.0f, 10.0f}) {
          const Case c{H, T, dh, temp / std::sqrt(static_cast<float>(dh))};
          SCOPED_TRACE("H=" + std::to_string(H) + " T=" + std::to_string(T) + " dh=" + std::to_string(dh) +
                       " scale=" + std::to_string(c.scale));
          check_case(c, seed += 7, 1e-5, 1e-5);
        }
}

TEST_P(FlashKernels, MatchesReferenceOnLongerSequences) {
  // Several key tiles / blocks per row, uneven tails, threads sharing a head.
  for (const Case& c : {Case{2, 777, 64, 0.125f}, Case{1, 1000, 33, 0.2f}, Case{12, 97, 64, 0.125f}}) {
    SCOPED_TRACE("T=" + std::to_string(c.T) + " dh=" + std::to_string(c.dh));
    check_case(c, 1234, 1e-5, 1e-5);
  }
}

TEST_P(FlashKernels, GroupedQueryMatchesReference) {
  // Query head h reads key/value head h / (H / n_kv); dk, dv sum over each group. n_kv = H and n_kv = 1
  // (multi-query) are the edges; T and dh as in the grid above (T = 1, odd, past a block; odd dh).
  unsigned seed = 5;
  for (auto [H, n_kv] : {std::pair{4, 2}, std::pair{6, 3}, std::pair{3, 1}, std::pair{2, 2}})
    for (int T : {1, 7, 64, 150})
      for (int dh : {7, 16, 64}) {
        const Case c{H, T, dh, 1.0f / std::sqrt(static_cast<float>(dh)), n_kv};
        SCOPED_TRACE("H=" + std::to_string(H) + " n_kv=" + std::to_string(n_kv) + " T=" + std::to_string(T) +
                     " dh=" + std::to_string(dh));
        check_case(c, seed += 11, 1e-5, 1e-5);
      }
}

TEST_P(FlashKernels, GroupedQueryWithOneGroupEqualsMultiHead) {
  // n_kv = H through the _gqa entry points gives bit for bit what the multi-head ones give.
  const int H = 3, T = 53, dh = 24;
  const size_t n = static_cast<size_t>(H) * T * dh;
  const auto q = randn(n, 71), k = randn(n, 72), v = randn(n, 73), dz = randn(n, 74);
  std::vector<float> z1(n), z2(n), l1(H * T), l2(H * T), g1(3 * n), g2(3 * n);
  flash_attention_forward(q.data(), k.data(), v.data(), z1.data(), l1.data(), H, T, dh, 0.2f);
  flash_attention_forward_gqa(q.data(), k.data(), v.data(), z2.data(), l2.data(), H, H, T, dh, 0.2f);
  EXPECT_EQ(z1, z2);
  EXPECT_EQ(l1, l2);
  flash_attention_backward(q.data(), k.data(), v.data(), z1.data(), l1.data(), dz.data(), g1.data(),
                           g1.data() + n, g1.data() + 2 * n, H, T, dh, 0.2f);
  flash_attention_backward_gqa(q.data(), k.data(), v.data(), z1.data(), l1.data(), dz.data(), g2.data(),
                               g2.data() + n, g2.data() + 2 * n, H, H, T, dh, 0.2f);
  EXPECT_EQ(g1, g2);
}

// The last Tq queries alone (a run wanting only its last rows, lm_forward's trimmed last block) give the
// full forward's rows bit for bit: one row, a few, a whole block and more, a start inside a key tile and on
// a block edge, grouped heads and an odd head size.
TEST_P(FlashKernels, LastRowsAreTheFullForwardsRows) {
  unsigned seed = 300;
  for (auto [T, Tq] : {std::pair{1, 1}, std::pair{9, 9}, std::pair{100, 9}, std::pair{440, 9}, std::pair{512, 9},
                       std::pair{300, 1}, std::pair{300, 150}, std::pair{333, 145}, std::pair{200, 200}})
    for (int dh : {24, 64}) {
      const int H = 4, n_kv = 2;
      SCOPED_TRACE("T=" + std::to_string(T) + " Tq=" + std::to_string(Tq) + " dh=" + std::to_string(dh));
      const size_t n = size_t(H) * T * dh, per = size_t(T) * dh, last = size_t(Tq) * dh;
      const auto q = randn(n, seed++), k = randn(n / 2, seed++), v = randn(n / 2, seed++);
      std::vector<float> z(n), lse(size_t(H) * T), ql(size_t(H) * last), zl(ql.size()), lsel(size_t(H) * Tq);
      const float scale = 1.0f / std::sqrt(float(dh));
      flash_attention_forward_gqa(q.data(), k.data(), v.data(), z.data(), lse.data(), H, n_kv, T, dh, scale);
      for (int h = 0; h < H; h++) std::copy_n(q.data() + h * per + per - last, last, ql.data() + h * last);
      flash_attention_forward_last(ql.data(), k.data(), v.data(), zl.data(), lsel.data(), H, n_kv, T, Tq, dh, scale);
      for (int h = 0; h < H; h++) {
        EXPECT_TRUE(std::equal(zl.begin() + h * last, zl.begin() + (h + 1) * last, z.begin() + h * per + per - last))
            << "head " << h;
        EXPECT_TRUE(std::equal(lsel.begin() + h * Tq, lsel.begin() + (h + 1) * Tq, lse.begin() + h * T + T - Tq))
            << "head " << h;
      }
    }
  float x = 0.0f;
  EXPECT_THROW(flash_attention_forward_last(&x, &x, &x, &x, &x, 1, 1, 4, 5, 1, 1.0f), Error);
  EXPECT_THROW(flash_attention_forward_last(&x, &x, &x, &x, &x, 1, 1, 4, 0, 1, 1.0f), Error);
}

// The backward's bits do not depend on timing. Heads the threads share (H not a multiple of the team) sum
// dq over per-thread partials in thread order, so each key block must go to the same thread every run: with
// blocks handed out dynamically, 5 threads on this machine's 2 cores gave a different last bit in most runs.
TEST_P(FlashKernels, BackwardBitsDoNotDependOnTiming) {
  const int H = 3, T = 100, dh = 24;
  const size_t n = static_cast<size_t>(H) * T * dh;
  const auto q = randn(n, 81), k = randn(n, 82), v = randn(n, 83), dz = randn(n, 84);
  std::vector<float> z(n), l(H * T);
  flash_attention_forward(q.data(), k.data(), v.data(), z.data(), l.data(), H, T, dh, 0.2f);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(5);  // more threads than heads and than cores: every head shared, threads preempted
  std::vector<float> first;
  for (int run = 0; run < 12; ++run) {
    std::vector<float> g(3 * n);
    flash_attention_backward(q.data(), k.data(), v.data(), z.data(), l.data(), dz.data(), g.data(),
                             g.data() + n, g.data() + 2 * n, H, T, dh, 0.2f);
    if (run == 0) first = g;
    else if (g != first) ADD_FAILURE() << "run " << run << " differs from run 0";
  }
  omp_set_num_threads(threads);
}

TEST_P(FlashKernels, ExpIsAccurate) {
  std::vector<float> x, y;
  // Dense sweep over the range the kernels use (x = S - max <= 0, slightly > 0 from rounding).
  const int n = 1 << 22;
  for (int i = 0; i <= n; ++i) x.push_back(-87.3f + (87.3f + 1.0f) * static_cast<float>(i) / n);
  // 10^5 consecutive floats either side of odd multiples of ln2 / 2 (the range reduction's seams).
  for (float c : {-0.34657359f, 0.34657359f, -1.0397208f, -10.744781f, -50.6000443f})
    for (float dir : {-1.0f, 1.0f}) {
      float t = c;
      for (int s = 0; s < 100000; ++s) x.push_back(t = std::nextafter(t, dir * 100.0f));
    }
  y.resize(x.size());
  if (!flash_detail::vexp(x.data(), y.data(), static_cast<int>(x.size())))
    GTEST_SKIP() << "the " << flash_path_name() << " path has no vector exp";
  double worst = 0.0;
  float worst_x = 0.0f;
  for (size_t i = 0; i < x.size(); ++i) {
    const double e = std::exp(static_cast<double>(x[i]));
    const double rel = std::abs(y[i] - e) / e;
    if (rel > worst) worst = rel, worst_x = x[i];
  }
  EXPECT_LT(worst, 2e-7) << "at x = " << worst_x;
  // Edges: tails that would be denormal flush to 0, -inf -> 0, NaN propagates, 0 -> 1 exactly; an odd
  // count exercises the tail of a vector.
  const float edge[5] = {-87.4f, -std::numeric_limits<float>::infinity(), std::nanf(""), 0.0f, -1000.0f};
  float out[5];
  ASSERT_TRUE(flash_detail::vexp(edge, out, 5));
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[1], 0.0f);
  EXPECT_TRUE(std::isnan(out[2]));
  EXPECT_EQ(out[3], 1.0f);
  EXPECT_EQ(out[4], 0.0f);
}

TEST_P(FlashKernels, RowsAreCausal) {
  // Changing the last key and value must not change any output row but the last.
  const int H = 1, T = 70, dh = 20;
  const size_t n = static_cast<size_t>(H) * T * dh;
  auto q = randn(n, 5), k = randn(n, 6), v = randn(n, 7);
  std::vector<float> z1(n), z2(n), lse1(T), lse2(T);
  flash_attention_forward(q.data(), k.data(), v.data(), z1.data(), lse1.data(), H, T, dh, 0.3f);
  for (int d = 0; d < dh; ++d) {
    k[static_cast<size_t>(T - 1) * dh + d] += 5.0f;
    v[static_cast<size_t>(T - 1) * dh + d] -= 3.0f;
  }
  flash_attention_forward(q.data(), k.data(), v.data(), z2.data(), lse2.data(), H, T, dh, 0.3f);
  for (size_t i = 0; i < static_cast<size_t>(T - 1) * dh; ++i) ASSERT_EQ(z1[i], z2[i]) << i;
  bool last_changed = false;
  for (size_t i = static_cast<size_t>(T - 1) * dh; i < n; ++i) last_changed |= z1[i] != z2[i];
  EXPECT_TRUE(last_changed);
}

INSTANTIATE_TEST_SUITE_P(Flash, FlashKernels,
                         ::testing::Values(FlashPath::Portable, FlashPath::Avx2, FlashPath::Avx512,
                                           FlashPath::Neon),
                         [](const ::testing::TestParamInfo<FlashPath>& p) {
                           return std::string(flash_path_name(p.param));
                         });

TEST(Flash, SaysWhichPathsRunHere) {
  // The automatic choice is the best supported path; forcing an unsupported one is a usage error.
  std::string ran, missing;
  for (FlashPath p : {FlashPath::Portable, FlashPath::Avx2, FlashPath::Avx512, FlashPath::Neon}) {
    (flash_path_supported(p) ? ran : missing) += std::string(" ") + flash_path_name(p);
    if (!flash_path_supported(p)) {
      EXPECT_THROW(flash_force_path(p), Error);
    }
  }
  EXPECT_TRUE(flash_path_supported(FlashPath::Portable));
  const FlashPath best = flash_path();
  EXPECT_NE(best, FlashPath::Auto);
  const char* isa = std::getenv("QKV_ISA");  // QKV_ISA, when set, names the automatic path instead
  if (isa && *isa && std::string(isa) != "auto") {
    EXPECT_STREQ(flash_path_name(best), isa);
  } else if (flash_path_supported(FlashPath::Avx512)) {
    EXPECT_EQ(best, FlashPath::Avx512);
  }
  for (const char* name : {"auto", "portable", "avx2", "avx512", "neon"})
    EXPECT_STREQ(flash_path_name(flash_path_from_name(name)), name);
  EXPECT_THROW(flash_path_from_name("sse"), Error);
  std::cout << "[ paths    ] ran:" << ran << "; cannot run here:" << (missing.empty() ? " none" : missing)
            << "; automatic: " << flash_path_name(best) << "\n";
  flash_force_portable(true);  // the older hooks still work
  EXPECT_EQ(flash_path(), FlashPath::Portable);
  EXPECT_FALSE(flash_uses_avx512());
  flash_force_portable(false);
  EXPECT_EQ(flash_path(), best);
}

TEST(Flash, RejectsBadSizes) {
  float x = 0.0f;
  EXPECT_THROW(flash_attention_forward(&x, &x, &x, &x, &x, 1, 0, 1, 1.0f), Error);
  EXPECT_THROW(flash_attention_forward(&x, &x, &x, &x, &x, 0, 1, 1, 1.0f), Error);
  EXPECT_THROW(flash_attention_backward(&x, &x, &x, &x, &x, &x, &x, &x, &x, 1, 1, 0, 1.0f), Error);
  // n_kv must divide H
  EXPECT_THROW(flash_attention_forward_gqa(&x, &x, &x, &x, &x, 4, 3, 1, 1, 1.0f), Error);
  EXPECT_THROW(flash_attention_forward_gqa(&x, &x, &x, &x, &x, 4, 0, 1, 1, 1.0f), Error);
  EXPECT_THROW(flash_attention_backward_gqa(&x, &x, &x, &x, &x, &x, &x, &x, &x, 2, 4, 1, 1, 1.0f), Error);
}

// ---- the reference itself ----

std::vector<double> randn64(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> dist(0.0, 1.0);
  std::vector<double> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

class FlashReferenceGroups : public ::testing::TestWithParam<int> {};

TEST_P(FlashReferenceGroups, BackwardMatchesCentralDifferences) {
  // n_kv = H (multi-head, the old entry point) and n_kv = 1 (every query head shares one k, v).
  const int H = 2, T = 4, dh = 3, n_kv = GetParam();
  const double scale = 0.7;
  const size_t n = static_cast<size_t>(H) * T * dh, nkv = static_cast<size_t>(n_kv) * T * dh;
  std::vector<double> q = randn64(n, 11), k = randn64(nkv, 12), v = randn64(nkv, 13), g = randn64(n, 14);
  // L = Σ g ∘ z, so dL/dz = g.
  auto loss = [&]() {
    std::vector<double> z(n), lse(static_cast<size_t>(H) * T);
    if (n_kv == H)
      flash_detail::reference_forward_f64(q.data(), k.data(), v.data(), z.data(), lse.data(), H, T, dh, scale);
    else
      flash_detail::reference_forward_f64(q.data(), k.data(), v.data(), z.data(), lse.data(), H, n_kv, T, dh,
                                          scale);
    double L = 0.0;
    for (size_t i = 0; i < n; ++i) L += g[i] * z[i];
    return L;
  };
  std::vector<double> dq(n), dk(nkv), dv(nkv);
  if (n_kv == H)
    flash_detail::reference_backward_f64(q.data(), k.data(), v.data(), g.data(), dq.data(), dk.data(),
                                         dv.data(), nullptr, H, T, dh, scale);
  else
    flash_detail::reference_backward_f64(q.data(), k.data(), v.data(), g.data(), dq.data(), dk.data(),
                                         dv.data(), nullptr, H, n_kv, T, dh, scale);
  const double eps = 1e-5;
  int checked = 0;
  for (auto [x, dx, name] : {std::tuple{&q, &dq, "dq"}, std::tuple{&k, &dk, "dk"}, std::tuple{&v, &dv, "dv"}})
    for (size_t i = 0; i < x->size(); ++i) {
      const double x0 = (*x)[i];
      (*x)[i] = x0 + eps;
      const double Lp = loss();
      (*x)[i] = x0 - eps;
      const double Lm = loss();
      (*x)[i] = x0;
      const double fd = (Lp - Lm) / (2 * eps);
      EXPECT_NEAR((*dx)[i], fd, 1e-8 * std::max(1.0, std::abs(fd))) << name << "[" << i << "]";
      ++checked;
    }
  EXPECT_EQ(checked, static_cast<int>(n + 2 * nkv));
  // dk of the last key of each head: only the last query sees it; its gradient must not be 0 by accident.
  EXPECT_GT(std::abs(dk[static_cast<size_t>(T - 1) * dh]), 1e-6);
}

INSTANTIATE_TEST_SUITE_P(FlashReference, FlashReferenceGroups, ::testing::Values(2, 1));

TEST(FlashReference, RowsOfDSSumToZero) {
  const int H = 3, T = 9, dh = 5;
  const size_t n = static_cast<size_t>(H) * T * dh;
  const auto q = randn64(n, 21), k = randn64(n, 22), v = randn64(n, 23), dz = randn64(n, 24);
  std::vector<double> dq(n), dk(n), dv(n), dS(static_cast<size_t>(H) * T * T);
  flash_detail::reference_backward_f64(q.data(), k.data(), v.data(), dz.data(), dq.data(), dk.data(),
                                       dv.data(), dS.data(), H, T, dh, 0.5);
  double max_abs = 0.0;
  for (int r = 0; r < H * T; ++r) {
    double s = 0.0;
    for (int j = 0; j < T; ++j)
      s += dS[static_cast<size_t>(r) * T + j],
          max_abs = std::max(max_abs, std::abs(dS[static_cast<size_t>(r) * T + j]));
    EXPECT_NEAR(s, 0.0, 1e-12) << "row " << r;
  }
  EXPECT_GT(max_abs, 1e-3);  // the rows are not trivially zero
  // Causal: entries above the diagonal are exactly zero.
  for (int h = 0; h < H; ++h)
    for (int i = 0; i < T; ++i)
      for (int j = i + 1; j < T; ++j) EXPECT_EQ(dS[(static_cast<size_t>(h) * T + i) * T + j], 0.0);
}

}  // namespace
}  // namespace qkv
