#include "qkv/analysis/eigen.hpp"

#include <cmath>
#include <limits>
#include <string>

#include "qkv/error.hpp"

namespace qkv::analysis {
namespace {

using cd = std::complex<double>;

// A -> Q A Qᵀ upper Hessenberg, Q a product of Householder reflections (the eigenvalues are kept).
void to_hessenberg(Matrix& A) {
  const int n = A.rows;
  for (int k = 0; k + 2 < n; k++) {
    double norm = 0;
    for (int i = k + 1; i < n; i++) norm += A(i, k) * A(i, k);
    norm = std::sqrt(norm);
    if (norm == 0) continue;
    const double alpha = A(k + 1, k) > 0 ? -norm : norm;
    std::vector<double> v(size_t(n), 0.0);  // reflection I − 2vvᵀ/(vᵀv) maps column k below k+1 to alpha·e
    v[size_t(k) + 1] = A(k + 1, k) - alpha;
    for (int i = k + 2; i < n; i++) v[size_t(i)] = A(i, k);
    double vv = 0;
    for (double x : v) vv += x * x;
    if (vv == 0) continue;
    for (int j = 0; j < n; j++) {  // from the left: rows k+1..n-1
      double s = 0;
      for (int i = k + 1; i < n; i++) s += v[size_t(i)] * A(i, j);
      s *= 2 / vv;
      for (int i = k + 1; i < n; i++) A(i, j) -= s * v[size_t(i)];
    }
    for (int i = 0; i < n; i++) {  // from the right: columns k+1..n-1
      double s = 0;
      for (int j = k + 1; j < n; j++) s += A(i, j) * v[size_t(j)];
      s *= 2 / vv;
      for (int j = k + 1; j < n; j++) A(i, j) -= s * v[size_t(j)];
    }
    for (int i = k + 2; i < n; i++) A(i, k) = 0;
  }
}

}  // namespace

std::vector<cd> eigenvalues(const Matrix& A0) {
  if (A0.rows != A0.cols) data_error("eigenvalues: the matrix is " + std::to_string(A0.rows) + "×" +
                                     std::to_string(A0.cols) + ", not square");
  for (double x : A0.a)
    if (!std::isfinite(x)) data_error("eigenvalues: the matrix holds NaN or Inf");
  const int n = A0.rows;
  Matrix R = A0;
  to_hessenberg(R);
  std::vector<cd> H(size_t(n) * n);
  for (size_t i = 0; i < H.size(); i++) H[i] = R.a[i];
  auto h = [&](int i, int j) -> cd& { return H[size_t(i) * n + j]; };
  double scale = 0;
  for (double x : A0.a) scale = std::max(scale, std::abs(x));
  const double eps = std::numeric_limits<double>::epsilon();

  std::vector<cd> eig;
  std::vector<cd> c(static_cast<size_t>(n)), s(static_cast<size_t>(n));
  int hi = n - 1, iter = 0, total = 0;
  while (hi >= 0) {
    int l = hi;  // the active window is [l, hi]: every subdiagonal inside it is non-negligible
    while (l > 0) {
      const double sub = std::abs(h(l, l - 1));
      double tol = eps * (std::abs(h(l - 1, l - 1)) + std::abs(h(l, l)));
      if (tol == 0) tol = eps * scale;
      if (sub <= tol) {
        h(l, l - 1) = 0;
        break;
      }
      l--;
    }
    if (l == hi) {
      eig.push_back(h(hi, hi));
      hi--;
      iter = 0;
      continue;
    }
    if (++total > 100 * n + 100) data_error("eigenvalues: QR did not converge");
    // Wilkinson shift: the trailing 2×2's eigenvalue nearer to its last diagonal entry; every 10th
    // iteration without deflation an exceptional shift breaks cycles.
    const cd a = h(hi - 1, hi - 1), b = h(hi - 1, hi), cc = h(hi, hi - 1), d = h(hi, hi);
    cd mu;
    if (++iter % 10 == 0) {
      mu = d + cd(1.5 * std::abs(cc), 0.5 * std::abs(cc));
    } else {
      const cd half_tr = (a + d) / 2.0, disc = std::sqrt(half_tr * half_tr - (a * d - b * cc));
      const cd m1 = half_tr + disc, m2 = half_tr - disc;
      mu = std::abs(m1 - d) < std::abs(m2 - d) ? m1 : m2;
    }
    // One QR step on the window: H − μI = QR (Givens from the left), then RQ + μI (from the right).
    for (int k = l; k <= hi; k++) h(k, k) -= mu;
    for (int k = l; k < hi; k++) {
      const cd x = h(k, k), y = h(k + 1, k);
      const double r = std::hypot(std::abs(x), std::abs(y));
      c[size_t(k)] = r == 0 ? cd(1) : x / r;
      s[size_t(k)] = r == 0 ? cd(0) : y / r;
      for (int j = k; j <= hi; j++) {
        const cd p = h(k, j), q = h(k + 1, j);
        h(k, j) = std::conj(c[size_t(k)]) * p + std::conj(s[size_t(k)]) * q;
        h(k + 1, j) = -s[size_t(k)] * p + c[size_t(k)] * q;
      }
    }
    for (int k = l; k < hi; k++) {
      for (int i = l; i <= std::min(k + 2, hi); i++) {
        const cd p = h(i, k), q = h(i, k + 1);
        h(i, k) = p * c[size_t(k)] + q * s[size_t(k)];
        h(i, k + 1) = -p * std::conj(s[size_t(k)]) + q * std::conj(c[size_t(k)]);
      }
    }
    for (int k = l; k <= hi; k++) h(k, k) += mu;
  }
  return eig;
}

}  // namespace qkv::analysis
