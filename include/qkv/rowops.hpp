// Row kernels of the fast inference forward (inference.hpp): LayerNorm and bias + GELU, vectorised for
// the attention kernels' path (flash.hpp: AVX-512, AVX2 + FMA, else the portable loops), so
// flash_force_path picks these too. Rows go to OpenMP threads when there are enough of them.
// Strict IEEE; the vector exp is flash.hpp's (< 2e-7 relative), the portable one std::exp.
#pragma once

namespace qkv {

// y [N, d] = (x - mean) / sqrt(var + eps) · w + b per row of x [N, d]; w, b [d].
// torch: F.layer_norm(x, (d,), w, b, eps)
void layernorm_rows(float* y, const float* x, const float* w, const float* b, int N, int d, float eps);

// h [N, n] = gelu(h + b) in place, b [n]; the tanh approximation written as x / (1 + e^{-2y}),
// y = √(2/π)(x + 0.044715 x³) (−2y capped at 88, where the result is 0 to float precision).
// torch: F.gelu(h + b, approximate="tanh")
void gelu_bias_rows(float* h, const float* b, int N, int n);

namespace rowops_detail {
// The slow twins in double, for tests: one row each.
void layernorm_row_f64(double* y, const double* x, const double* w, const double* b, int d, double eps);
void gelu_bias_row_f64(double* h, const double* b, int n);
}  // namespace rowops_detail

}  // namespace qkv
