// Every fast op against its slow twin (float, many shapes incl. odd ones and 1), and every backward
// against central finite differences in double.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <tuple>
#include <vector>

#include "qkv/error.hpp"
#include "qkv/gemm.hpp"
#include "qkv/gradcheck.hpp"
#include "qkv/mlp.hpp"
#include "qkv/ops.hpp"

namespace qkv {
namespace {

template <class T>
std::vector<T> randn(size_t n, uint64_t seed, double stddev = 1.0) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> dist(0.0, stddev);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(dist(rng));
  return v;
}

template <class T>
double max_rel(const std::vector<T>& a, const std::vector<T>& b) {
  double scale = 1e-30, m = 0;
  for (size_t i = 0; i < a.size(); i++) scale = std::max(scale, std::abs(double(b[i])));
  for (size_t i = 0; i < a.size(); i++) {
    if (std::isinf(double(a[i])) || std::isinf(double(b[i]))) {
      if (a[i] != b[i]) return INFINITY;
      continue;
    }
    m = std::max(m, std::abs(double(a[i]) - double(b[i])));
  }
  return m / scale;
}

constexpr double kFloatTol = 2e-5;  // relative to the largest magnitude: float rounding over sums of ≤ 200 terms

struct Shape {
  int T, d, H;
};
const Shape kShapes[] = {{1, 1, 1}, {1, 6, 2}, {3, 5, 1}, {7, 12, 3}, {16, 24, 4}, {33, 18, 6}, {64, 64, 2}, {5, 9, 9}};

TEST(Gemm, MatchesReferenceForEveryTransposeAndOddSizes) {
  for (auto [M, N, K] : {std::tuple{1, 1, 1}, {3, 5, 7}, {17, 1, 33}, {64, 65, 63}, {128, 96, 200}})
    for (bool tA : {false, true})
      for (bool tB : {false, true}) {
        auto A = randn<float>(size_t(M) * K, 1), B = randn<float>(size_t(K) * N, 2);
        auto C1 = randn<float>(size_t(M) * N, 3), C2 = C1;
        const int lda = tA ? M : K, ldb = tB ? K : N;
        gemm<float>(tA, tB, M, N, K, 0.5f, A.data(), lda, B.data(), ldb, 2.0f, C1.data(), N);
        gemm_reference<float>(tA, tB, M, N, K, 0.5f, A.data(), lda, B.data(), ldb, 2.0f, C2.data(), N);
        EXPECT_LT(max_rel(C1, C2), kFloatTol) << M << "x" << N << "x" << K << " tA=" << tA << " tB=" << tB;
      }
}

// gemm_skinny: one row or one column through gemv (split over threads when large): every transpose,
// strided operands, beta = 0 ignoring what C held (NaN), the double version too.
TEST(Gemm, SkinnyOneRowOrOneColumnMatchesReference) {
  for (auto [M, N, K] : {std::tuple{1, 37, 19}, {23, 1, 41}, {1, 3000, 700}, {2500, 1, 900}, {1, 1, 5000}, {5, 7, 3}})
    for (bool tA : {false, true})
      for (bool tB : {false, true})
        for (float beta : {0.0f, 2.0f}) {
          const int lda = (tA ? M : K) + 3, ldb = (tB ? K : N) + 2, ldc = N + 1;
          auto A = randn<float>(size_t(tA ? K : M) * lda, 1), B = randn<float>(size_t(tB ? N : K) * ldb, 2);
          auto C1 = randn<float>(size_t(M) * ldc, 3);
          if (beta == 0) std::fill(C1.begin(), C1.end(), NAN);
          auto C2 = C1;
          gemm_skinny<float>(tA, tB, M, N, K, 0.5f, A.data(), lda, B.data(), ldb, beta, C1.data(), ldc);
          gemm_reference<float>(tA, tB, M, N, K, 0.5f, A.data(), lda, B.data(), ldb, beta, C2.data(), ldc);
          for (int i = 0; i < M; i++)  // the padding column of C stays as it was (NaN or its value)
            for (int j = N; j < ldc; j++) {
              EXPECT_TRUE(std::isnan(C1[size_t(i) * ldc + j]) == std::isnan(C2[size_t(i) * ldc + j]));
              C1[size_t(i) * ldc + j] = C2[size_t(i) * ldc + j] = 0;
            }
          EXPECT_LT(max_rel(C1, C2), kFloatTol) << M << "x" << N << "x" << K << " tA=" << tA << " tB=" << tB << " beta=" << beta;
          std::vector<double> Ad(A.begin(), A.end()), Bd(B.begin(), B.end()), D1(C2.size(), 1.0), D2 = D1;
          gemm_skinny<double>(tA, tB, M, N, K, 0.5, Ad.data(), lda, Bd.data(), ldb, 1.0, D1.data(), ldc);
          gemm_reference<double>(tA, tB, M, N, K, 0.5, Ad.data(), lda, Bd.data(), ldb, 1.0, D2.data(), ldc);
          double e = 0;
          for (size_t i = 0; i < D1.size(); i++) e = std::max(e, std::abs(D1[i] - D2[i]));
          EXPECT_LT(e, 1e-10);
        }
}

TEST(Gemm, BackendIsBlisAndNamesItsKernel) {
  const std::string b = gemm_backend();
  EXPECT_NE(b.find("BLIS"), std::string::npos) << b;
  EXPECT_NE(b.find("kernel"), std::string::npos) << b;
}

TEST(Ops, FastMatchesReferenceForward) {
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(testing::Message() << "T=" << s.T << " d=" << s.d << " H=" << s.H);
    const int T = s.T, d = s.d, H = s.H, dh = d / H;
    auto x = randn<float>(size_t(T) * d, 10), w = randn<float>(d, 11), b = randn<float>(d, 12);
    std::vector<float> y1(x.size()), y2(x.size()), m1(T), m2(T), r1(T), r2(T);
    layernorm_forward(y1.data(), m1.data(), r1.data(), x.data(), w.data(), b.data(), T, d, 1e-5);
    ref::layernorm_forward(y2.data(), m2.data(), r2.data(), x.data(), w.data(), b.data(), T, d, 1e-5);
    EXPECT_LT(max_rel(y1, y2), kFloatTol);
    EXPECT_LT(max_rel(r1, r2), kFloatTol);

    auto W = randn<float>(size_t(d) * 3 * d, 13), bias = randn<float>(3 * size_t(d), 14);
    std::vector<float> qkv1(size_t(T) * 3 * d), qkv2(qkv1.size());
    affine_forward(qkv1.data(), x.data(), W.data(), bias.data(), T, d, 3 * d);
    ref::affine_forward(qkv2.data(), x.data(), W.data(), bias.data(), T, d, 3 * d);
    EXPECT_LT(max_rel(qkv1, qkv2), kFloatTol);
    affine_forward(qkv1.data(), x.data(), W.data(), static_cast<const float*>(nullptr), T, d, 3 * d);
    ref::affine_forward(qkv2.data(), x.data(), W.data(), static_cast<const float*>(nullptr), T, d, 3 * d);
    EXPECT_LT(max_rel(qkv1, qkv2), kFloatTol);

    std::vector<float> q1(size_t(T) * d), k1(q1.size()), v1(q1.size()), q2(q1.size()), k2(q1.size()), v2(q1.size());
    split_qkv_forward(q1.data(), k1.data(), v1.data(), qkv2.data(), T, d, H);
    ref::split_qkv_forward(q2.data(), k2.data(), v2.data(), qkv2.data(), T, d, H);
    EXPECT_EQ(q1, q2);
    EXPECT_EQ(k1, k2);
    EXPECT_EQ(v1, v2);
    std::vector<float> back(qkv2.size());
    split_qkv_backward(back.data(), q1.data(), k1.data(), v1.data(), T, d, H);
    EXPECT_EQ(back, qkv2) << "split's backward is its inverse";

    std::vector<float> S1(size_t(H) * T * T), S2(S1.size());
    const float scale = 1.0f / std::sqrt(float(dh));
    scores_forward(S1.data(), q1.data(), k1.data(), H, T, dh, scale);
    ref::scores_forward(S2.data(), q1.data(), k1.data(), H, T, dh, scale);
    EXPECT_LT(max_rel(S1, S2), kFloatTol);
    causal_mask_forward(S1.data(), H, T);
    ref::causal_mask_forward(S2.data(), H, T);
    std::vector<float> A1(S1.size()), A2(S1.size());
    softmax_forward(A1.data(), S1.data(), int64_t(H) * T, T);
    ref::softmax_forward(A2.data(), S2.data(), int64_t(H) * T, T);
    EXPECT_LT(max_rel(A1, A2), kFloatTol);
    for (int h = 0; h < H; h++)
      for (int i = 0; i < T; i++) {
        double row = 0;
        for (int j = 0; j < T; j++) {
          row += A1[(size_t(h) * T + i) * T + j];
          if (j > i) {
            EXPECT_EQ(A1[(size_t(h) * T + i) * T + j], 0.0f);
          }
        }
        EXPECT_NEAR(row, 1.0, 1e-6);
      }

    std::vector<float> z1(q1.size()), z2(q1.size());
    mix_forward(z1.data(), A1.data(), v1.data(), H, T, dh);
    ref::mix_forward(z2.data(), A1.data(), v1.data(), H, T, dh);
    EXPECT_LT(max_rel(z1, z2), kFloatTol);
    std::vector<float> y3(size_t(T) * d), y4(y3.size()), zb(z1.size());
    merge_heads_forward(y3.data(), z1.data(), T, d, H);
    ref::merge_heads_forward(y4.data(), z1.data(), T, d, H);
    EXPECT_EQ(y3, y4);
    merge_heads_backward(zb.data(), y3.data(), T, d, H);
    EXPECT_EQ(zb, z1) << "merge's backward is its inverse";

    std::vector<float> g1(qkv1.size()), g2(qkv1.size());
    gelu_forward(g1.data(), qkv1.data(), int64_t(g1.size()));
    ref::gelu_forward(g2.data(), qkv1.data(), int64_t(g2.size()));
    EXPECT_LT(max_rel(g1, g2), kFloatTol);
  }
}

TEST(Ops, SoftmaxIsStableForHugeScores) {
  std::vector<float> S = {1000.0f, 1001.0f, -1000.0f, 88.0f, 89.0f, 90.0f}, A(6);
  softmax_forward(A.data(), S.data(), 2, 3);
  for (float a : A) EXPECT_TRUE(std::isfinite(a));
  EXPECT_NEAR(A[0], 1.0 / (1.0 + std::exp(1.0)), 1e-6);
  EXPECT_NEAR(A[2], 0.0, 1e-30);
  EXPECT_NEAR(A[5], 1.0 / (1.0 + std::exp(-1.0) + std::exp(-2.0)), 1e-6);
}

TEST(Ops, FastMatchesReferenceBackward) {
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(testing::Message() << "T=" << s.T << " d=" << s.d << " H=" << s.H);
    const int T = s.T, d = s.d, H = s.H, dh = d / H;
    auto x = randn<float>(size_t(T) * d, 20), w = randn<float>(d, 21), b = randn<float>(d, 22);
    auto dy = randn<float>(x.size(), 23);
    std::vector<float> y(x.size()), mean(T), rstd(T);
    layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), T, d, 1e-5);
    std::vector<float> dx1(x.size(), 0.5f), dx2 = dx1, dw1(d), dw2(d), db1(d), db2(d);
    layernorm_backward(dx1.data(), dw1.data(), db1.data(), dy.data(), x.data(), w.data(), mean.data(), rstd.data(), T, d);
    ref::layernorm_backward(dx2.data(), dw2.data(), db2.data(), dy.data(), x.data(), w.data(), mean.data(), rstd.data(), T, d);
    EXPECT_LT(max_rel(dx1, dx2), 1e-4);
    EXPECT_LT(max_rel(dw1, dw2), kFloatTol);
    EXPECT_LT(max_rel(db1, db2), kFloatTol);

    auto W = randn<float>(size_t(d) * 3 * d, 24), dq = randn<float>(size_t(T) * 3 * d, 25);
    std::vector<float> ax1(x.size()), ax2(x.size()), aW1(W.size()), aW2(W.size()), ab1(3 * d), ab2(3 * d);
    affine_backward(ax1.data(), aW1.data(), ab1.data(), dq.data(), x.data(), W.data(), T, d, 3 * d);
    ref::affine_backward(ax2.data(), aW2.data(), ab2.data(), dq.data(), x.data(), W.data(), T, d, 3 * d);
    EXPECT_LT(max_rel(ax1, ax2), kFloatTol);
    EXPECT_LT(max_rel(aW1, aW2), kFloatTol);
    EXPECT_LT(max_rel(ab1, ab2), kFloatTol);

    auto q = randn<float>(size_t(T) * d, 26), k = randn<float>(q.size(), 27), v = randn<float>(q.size(), 28);
    auto dS = randn<float>(size_t(H) * T * T, 29), dz = randn<float>(q.size(), 30);
    std::vector<float> dq1(q.size()), dq2(q.size()), dk1(q.size()), dk2(q.size());
    scores_backward(dq1.data(), dk1.data(), dS.data(), q.data(), k.data(), H, T, dh, 0.3f);
    ref::scores_backward(dq2.data(), dk2.data(), dS.data(), q.data(), k.data(), H, T, dh, 0.3f);
    EXPECT_LT(max_rel(dq1, dq2), kFloatTol);
    EXPECT_LT(max_rel(dk1, dk2), kFloatTol);

    std::vector<float> S(dS.size()), A(dS.size());
    scores_forward(S.data(), q.data(), k.data(), H, T, dh, 0.3f);
    causal_mask_forward(S.data(), H, T);
    softmax_forward(A.data(), S.data(), int64_t(H) * T, T);
    std::vector<float> dA1(A.size()), dA2(A.size()), dv1(q.size()), dv2(q.size());
    mix_backward(dA1.data(), dv1.data(), dz.data(), A.data(), v.data(), H, T, dh);
    ref::mix_backward(dA2.data(), dv2.data(), dz.data(), A.data(), v.data(), H, T, dh);
    EXPECT_LT(max_rel(dA1, dA2), kFloatTol);
    EXPECT_LT(max_rel(dv1, dv2), kFloatTol);
    std::vector<float> dS1(A.size()), dS2(A.size());
    softmax_backward(dS1.data(), dA1.data(), A.data(), int64_t(H) * T, T);
    ref::softmax_backward(dS2.data(), dA1.data(), A.data(), int64_t(H) * T, T);
    EXPECT_LT(max_rel(dS1, dS2), 1e-4);

    std::vector<float> gx1(x.size()), gx2(x.size());
    gelu_backward(gx1.data(), dy.data(), x.data(), int64_t(x.size()));
    ref::gelu_backward(gx2.data(), dy.data(), x.data(), int64_t(x.size()));
    EXPECT_LT(max_rel(gx1, gx2), kFloatTol);
  }
}

// Each backward in double against central differences of L = Σ dy ⊙ forward(...).
constexpr double kGradTol = 1e-7;  // double precision: rounding / h ≈ 1e-16·|L| / 1e-6

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); i++) s += a[i] * b[i];
  return s;
}

TEST(Gradcheck, LayerNorm) {
  for (auto shape : {std::pair{1, 1}, {1, 5}, {3, 7}, {4, 16}}) {
    // Plain variables, not a structured binding: `loss` captures them, which clang 14 does not allow.
    const int N = shape.first, d = shape.second;
    auto x = randn<double>(size_t(N) * d, 40), w = randn<double>(d, 41), b = randn<double>(d, 42);
    auto dy = randn<double>(x.size(), 43);
    std::vector<double> y(x.size()), mean(N), rstd(N);
    auto loss = [&] {
      layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, d, 1e-5);
      return dot(dy, y);
    };
    loss();
    std::vector<double> dx(x.size()), dw(d), db(d);
    layernorm_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), mean.data(), rstd.data(), N, d);
    EXPECT_LT(max_abs_diff(dx, central_difference(loss, x)), kGradTol) << N << "x" << d;
    EXPECT_LT(max_abs_diff(dw, central_difference(loss, w)), kGradTol);
    EXPECT_LT(max_abs_diff(db, central_difference(loss, b)), kGradTol);
  }
}

TEST(Gradcheck, AffineAndGelu) {
  const int N = 3, in = 5, out = 7;
  auto x = randn<double>(N * in, 50), W = randn<double>(in * out, 51), b = randn<double>(out, 52);
  auto dy = randn<double>(N * out, 53);
  std::vector<double> y(N * out), g(N * out);
  auto loss = [&] {
    affine_forward(y.data(), x.data(), W.data(), b.data(), N, in, out);
    gelu_forward(g.data(), y.data(), int64_t(y.size()));
    return dot(dy, g);
  };
  loss();
  std::vector<double> dyg(y.size()), dx(x.size()), dW(W.size()), db(b.size());
  gelu_backward(dyg.data(), dy.data(), y.data(), int64_t(y.size()));
  affine_backward(dx.data(), dW.data(), db.data(), dyg.data(), x.data(), W.data(), N, in, out);
  EXPECT_LT(max_abs_diff(dx, central_difference(loss, x)), kGradTol);
  EXPECT_LT(max_abs_diff(dW, central_difference(loss, W)), kGradTol);
  EXPECT_LT(max_abs_diff(db, central_difference(loss, b)), kGradTol);
}

TEST(Gradcheck, OneHeadIncludingTEqualsOne) {
  for (auto [T, dk] : {std::pair{1, 1}, {1, 4}, {3, 2}, {5, 3}, {8, 8}}) {
    const GradcheckResult r = gradcheck_head(T, dk, 7);
    ASSERT_EQ(r.max_abs_error.size(), 4u);
    for (const auto& [name, err] : r.max_abs_error) EXPECT_LT(err, kGradTol) << name << " T=" << T << " dk=" << dk;
    EXPECT_LT(r.ds_row_sum_max_abs, 1e-12) << "rows of dS sum to zero";
  }
}

TEST(Gradcheck, WholeSublayerOddDAndSeveralHeadCounts) {
  for (const AttentionShape& s : {AttentionShape{1, 4, 1}, AttentionShape{4, 5, 1}, AttentionShape{3, 6, 2},
                                  AttentionShape{5, 9, 3}, AttentionShape{2, 8, 8}}) {
    const GradcheckResult r = gradcheck_sublayer(s, 11);
    ASSERT_GE(r.max_abs_error.size(), 6u);
    for (const auto& [name, err] : r.max_abs_error)
      EXPECT_LT(err, kGradTol) << name << " T=" << s.T << " d=" << s.d << " H=" << s.H;
    EXPECT_LT(r.ds_row_sum_max_abs, 1e-12);
  }
}

// A gradient check that cannot fail is no check: a wrong backward (the softmax Jacobian without its
// row-mean term) must be caught.
TEST(Gradcheck, CatchesABrokenSoftmaxBackward) {
  const int T = 4;
  auto S = randn<double>(T * T, 60), dA = randn<double>(T * T, 61);
  std::vector<double> A(S.size()), dS(S.size());
  auto loss = [&] {
    softmax_forward(A.data(), S.data(), T, T);
    return dot(dA, A);
  };
  loss();
  std::vector<double> wrong(S.size());
  for (size_t i = 0; i < S.size(); i++) wrong[i] = A[i] * dA[i];  // missing "− rowsum(dA ⊙ A)"
  EXPECT_GT(max_abs_diff(wrong, central_difference(loss, S)), 1e-3);
  loss();  // central_difference leaves A at the last perturbed point
  softmax_backward(dS.data(), dA.data(), A.data(), T, T);
  EXPECT_LT(max_abs_diff(dS, central_difference(loss, S)), kGradTol);
}

TEST(Sublayer, FastMatchesReferenceAndTraceIsConsistent) {
  for (const Shape& sh : kShapes) {
    AttentionShape s{sh.T, sh.d, sh.H};
    SCOPED_TRACE(testing::Message() << "T=" << s.T << " d=" << s.d << " H=" << s.H);
    const int d = s.d;
    auto x = randn<float>(size_t(s.T) * d, 70), ln_w = randn<float>(d, 71), ln_b = randn<float>(d, 72);
    auto W = randn<float>(size_t(d) * 3 * d, 73, 0.5), b = randn<float>(3 * size_t(d), 74);
    auto WO = randn<float>(size_t(d) * d, 75, 0.5), bO = randn<float>(d, 76);
    AttentionParams<float> p{ln_w.data(), ln_b.data(), W.data(), b.data(), WO.data(), bO.data()};
    AttentionCache<float> c1, c2;
    std::vector<float> o1(x.size()), o2(x.size());
    attention_sublayer_forward(o1.data(), x.data(), p, s, c1);
    attention_sublayer_forward_reference(o2.data(), x.data(), p, s, c2);
    EXPECT_LT(max_rel(o1, o2), 1e-4);
    EXPECT_LT(max_rel(c1.A, c2.A), 1e-4);
    EXPECT_LT(max_rel(c1.S, c2.S), 1e-4);
    // S in the trace is unmasked: entries above the diagonal are finite scores.
    if (s.T > 1) {
      EXPECT_TRUE(std::isfinite(c1.S[1]));
    }
  }
}

TEST(Sublayer, RejectsHeadsThatDoNotDivideWidth) {
  AttentionShape s{2, 6, 4};
  EXPECT_THROW(s.validate(), Error);
}

}  // namespace
}  // namespace qkv

namespace qkv {
namespace {

TEST(Gradcheck, MlpSublayer) {
  for (auto [T, d, inner] : {std::tuple{1, 3, 5}, {4, 6, 24}, {3, 5, 7}}) {
    auto x = randn<double>(size_t(T) * d, 80), ln_w = randn<double>(d, 81, 0.3), ln_b = randn<double>(d, 82);
    for (auto& w : ln_w) w += 1;
    auto W_fc = randn<double>(size_t(d) * inner, 83), b_fc = randn<double>(inner, 84);
    auto W_proj = randn<double>(size_t(inner) * d, 85), b_proj = randn<double>(d, 86);
    auto dout = randn<double>(x.size(), 87);
    MlpParams<double> p{ln_w.data(), ln_b.data(), W_fc.data(), b_fc.data(), W_proj.data(), b_proj.data()};
    MlpShape s{T, d, inner, 1e-5};
    MlpCache<double> c;
    std::vector<double> out(x.size());
    auto loss = [&] {
      mlp_sublayer_forward(out.data(), x.data(), p, s, c);
      return dot(dout, out);
    };
    loss();
    std::vector<double> dx(x.size()), dln_w(d), dln_b(d), dW_fc(W_fc.size()), db_fc(inner), dW_proj(W_proj.size()),
        db_proj(d);
    MlpGrads<double> g{dln_w.data(), dln_b.data(), dW_fc.data(), db_fc.data(), dW_proj.data(), db_proj.data()};
    mlp_sublayer_backward(dx.data(), g, dout.data(), x.data(), p, s, c);
    EXPECT_LT(max_abs_diff(dx, central_difference(loss, x)), kGradTol);
    EXPECT_LT(max_abs_diff(dln_w, central_difference(loss, ln_w)), kGradTol);
    EXPECT_LT(max_abs_diff(dln_b, central_difference(loss, ln_b)), kGradTol);
    EXPECT_LT(max_abs_diff(dW_fc, central_difference(loss, W_fc)), kGradTol);
    EXPECT_LT(max_abs_diff(db_fc, central_difference(loss, b_fc)), kGradTol);
    EXPECT_LT(max_abs_diff(dW_proj, central_difference(loss, W_proj)), kGradTol);
    EXPECT_LT(max_abs_diff(db_proj, central_difference(loss, b_proj)), kGradTol);
  }
}

}  // namespace
}  // namespace qkv
