// eigenvalues(): known spectra (companion matrices, rotations hidden by an orthogonal similarity, a
// Jordan block) and trace identities on random matrices.
#include "qkv/analysis/eigen.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "qkv/error.hpp"

namespace qkv::analysis {
namespace {

using cd = std::complex<double>;

// Every expected eigenvalue is matched by a distinct computed one within tol.
void expect_spectrum(std::vector<cd> got, std::vector<cd> want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (const cd& w : want) {
    auto it = std::min_element(got.begin(), got.end(), [&](cd a, cd b) { return std::abs(a - w) < std::abs(b - w); });
    EXPECT_LT(std::abs(*it - w), tol) << "expected " << w << ", nearest " << *it;
    got.erase(it);
  }
}

// Companion matrix of the monic polynomial with these (real or conjugate-paired) roots.
Matrix companion(const std::vector<cd>& roots) {
  std::vector<cd> p = {1};  // coefficients, highest first
  for (const cd& r : roots) {
    std::vector<cd> q(p.size() + 1, 0);
    for (size_t i = 0; i < p.size(); i++) q[i] += p[i], q[i + 1] -= r * p[i];
    p = q;
  }
  const int n = int(roots.size());
  Matrix C(n, n);
  for (int j = 0; j < n; j++) C(0, j) = -p[size_t(j) + 1].real();
  for (int i = 1; i < n; i++) C(i, i - 1) = 1;
  return C;
}

TEST(Eigen, CompanionMatrixRoots) {
  const std::vector<cd> roots = {1.0, 2.0, 3.0, cd(0, 1), cd(0, -1), cd(-0.5, 2), cd(-0.5, -2)};
  expect_spectrum(eigenvalues(companion(roots)), roots, 1e-8);
}

TEST(Eigen, RotationsBehindAnOrthogonalSimilarity) {
  std::mt19937_64 rng(3);
  std::normal_distribution<double> N(0, 1);
  const int n = 9;
  Matrix D(n, n);
  std::vector<cd> want;
  for (int b = 0; b + 1 < n; b += 2) {  // 2×2 blocks [[a, w], [−w, a]]: a ± i·w
    const double a = N(rng), w = 0.1 + std::abs(N(rng));
    D(b, b) = a, D(b, b + 1) = w, D(b + 1, b) = -w, D(b + 1, b + 1) = a;
    want.push_back(cd(a, w)), want.push_back(cd(a, -w));
  }
  D(n - 1, n - 1) = -3, want.push_back(-3);
  std::vector<double> v(static_cast<size_t>(n));
  double vv = 0;
  for (double& x : v) x = N(rng), vv += x * x;
  Matrix P(n, n);  // Householder: orthogonal and symmetric
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++) P(i, j) = (i == j) - 2 * v[size_t(i)] * v[size_t(j)] / vv;
  expect_spectrum(eigenvalues(matmul(matmul(P, D), P)), want, 1e-10);
}

TEST(Eigen, RandomMatricesKeepTheTraceIdentities) {
  std::mt19937_64 rng(4);
  std::normal_distribution<double> N(0, 1);
  for (int n : {1, 2, 3, 8, 31, 64}) {
    Matrix A(n, n);
    for (double& x : A.a) x = N(rng);
    const auto lam = eigenvalues(A);
    ASSERT_EQ(int(lam.size()), n);
    const Matrix A2 = matmul(A, A), A3 = matmul(A2, A);
    cd s1 = 0, s2 = 0, s3 = 0;
    for (const cd& l : lam) s1 += l, s2 += l * l, s3 += l * l * l;
    double t1 = 0, t2 = 0, t3 = 0;
    for (int i = 0; i < n; i++) t1 += A(i, i), t2 += A2(i, i), t3 += A3(i, i);
    EXPECT_NEAR(s1.real(), t1, 1e-9 * n) << n;
    EXPECT_NEAR(s2.real(), t2, 1e-8 * n * n) << n;
    EXPECT_NEAR(s3.real(), t3, 1e-7 * n * n * n) << n;
    EXPECT_NEAR(s1.imag(), 0, 1e-9 * n);
  }
}

TEST(Eigen, JordanBlockZeroAndErrors) {
  Matrix J(2, 2);
  J(0, 0) = 2, J(0, 1) = 1, J(1, 1) = 2;
  expect_spectrum(eigenvalues(J), {2.0, 2.0}, 1e-7);
  expect_spectrum(eigenvalues(Matrix(4, 4)), {0.0, 0.0, 0.0, 0.0}, 1e-300);
  EXPECT_TRUE(eigenvalues(Matrix(0, 0)).empty());
  EXPECT_THROW(eigenvalues(Matrix(2, 3)), Error);
  Matrix bad(2, 2);
  bad(0, 0) = std::nan("");
  EXPECT_THROW(eigenvalues(bad), Error);
}

}  // namespace
}  // namespace qkv::analysis
