// Small dense double matrices for the analyses: the per-head factors W_Q^h, W_K^h, ... and products of
// them. Row-major; products go through gemm<double> (BLIS), norms accumulate in double.
#pragma once
#include <cstddef>
#include <vector>

namespace qkv::analysis {
using std::size_t;

struct Matrix {
  int rows = 0, cols = 0;
  std::vector<double> a;  // [rows, cols]
  Matrix() = default;
  Matrix(int r, int c) : rows(r), cols(c), a(size_t(r) * size_t(c), 0.0) {}
  double& operator()(int i, int j) { return a[size_t(i) * size_t(cols) + size_t(j)]; }
  double operator()(int i, int j) const { return a[size_t(i) * size_t(cols) + size_t(j)]; }
};

Matrix transpose(const Matrix& m);
// op(A)·op(B), op = transpose when the flag is set. Throws qkv::Error when the inner sizes differ.
Matrix matmul(const Matrix& A, const Matrix& B, bool transA = false, bool transB = false);
Matrix gram(const Matrix& m);  // mᵀm [cols, cols]
double frobenius(const Matrix& m);
double frobenius_distance(const Matrix& a, const Matrix& b);  // ‖a − b‖_F (same shapes)
double max_abs_difference(const Matrix& a, const Matrix& b);
double trace_of_product(const Matrix& A, const Matrix& B);  // tr(A·B) = Σ_ij A_ij B_ji, without forming A·B

}  // namespace qkv::analysis

namespace qkv::analysis {
// A copy of rows [r0, r0 + nr) × columns [c0, c0 + nc).
Matrix block(const Matrix& m, int r0, int c0, int nr, int nc);
}  // namespace qkv::analysis
