// Eigenvalues of a small real nonsymmetric matrix (the [dh, dh] cores of the OV circuits): Householder
// reduction to Hessenberg form, then complex single-shift QR (Wilkinson shifts, Givens rotations,
// deflation at negligible subdiagonals). O(n³) per sweep; meant for n up to a few hundred.
#pragma once
#include <complex>
#include <vector>

#include "qkv/analysis/matrix.hpp"

namespace qkv::analysis {

// Throws qkv::Error if the matrix is not square, holds NaN/Inf, or QR does not converge.
std::vector<std::complex<double>> eigenvalues(const Matrix& A);

}  // namespace qkv::analysis
