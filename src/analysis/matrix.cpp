#include "qkv/analysis/matrix.hpp"

#include <cmath>
#include <string>

#include "qkv/error.hpp"
#include "qkv/gemm.hpp"

namespace qkv::analysis {

Matrix transpose(const Matrix& m) {
  Matrix t(m.cols, m.rows);
  for (int i = 0; i < m.rows; i++)
    for (int j = 0; j < m.cols; j++) t(j, i) = m(i, j);
  return t;
}

Matrix matmul(const Matrix& A, const Matrix& B, bool tA, bool tB) {
  const int M = tA ? A.cols : A.rows, K = tA ? A.rows : A.cols;
  const int K2 = tB ? B.cols : B.rows, N = tB ? B.rows : B.cols;
  if (K != K2)
    data_error("matmul: inner sizes differ (" + std::to_string(K) + " vs " + std::to_string(K2) + ")");
  Matrix C(M, N);
  if (M == 0 || N == 0) return C;
  if (K == 0) return C;
  // Small products (most per-head [dh, dh] ones) in plain loops: a threaded BLIS call costs more than the
  // arithmetic there, and far more when the machine is busy (its threads wait for each other).
  if (double(M) * N * K < double(1 << 18)) {
    for (int i = 0; i < M; i++)
      for (int p = 0; p < K; p++) {
        const double a = tA ? A(p, i) : A(i, p);
        for (int j = 0; j < N; j++) C(i, j) += a * (tB ? B(j, p) : B(p, j));
      }
    return C;
  }
  gemm<double>(tA, tB, M, N, K, 1.0, A.a.data(), A.cols, B.a.data(), B.cols, 0.0, C.a.data(), N);
  return C;
}

Matrix gram(const Matrix& m) { return matmul(m, m, true, false); }

double frobenius(const Matrix& m) {
  double s = 0;
  for (double x : m.a) s += x * x;
  return std::sqrt(s);
}

double frobenius_distance(const Matrix& a, const Matrix& b) {
  double s = 0;
  for (size_t i = 0; i < a.a.size(); i++) s += (a.a[i] - b.a[i]) * (a.a[i] - b.a[i]);
  return std::sqrt(s);
}

double max_abs_difference(const Matrix& a, const Matrix& b) {
  double m = 0;
  for (size_t i = 0; i < a.a.size(); i++) m = std::max(m, std::abs(a.a[i] - b.a[i]));
  return m;
}

double trace_of_product(const Matrix& A, const Matrix& B) {
  if (A.cols != B.rows || A.rows != B.cols) data_error("trace_of_product: shapes do not make a square product");
  double s = 0;
  for (int i = 0; i < A.rows; i++)
    for (int j = 0; j < A.cols; j++) s += A(i, j) * B(j, i);
  return s;
}

}  // namespace qkv::analysis

namespace qkv::analysis {
Matrix block(const Matrix& m, int r0, int c0, int nr, int nc) {
  Matrix b(nr, nc);
  for (int i = 0; i < nr; i++)
    for (int j = 0; j < nc; j++) b(i, j) = m(r0 + i, c0 + j);
  return b;
}
}  // namespace qkv::analysis
