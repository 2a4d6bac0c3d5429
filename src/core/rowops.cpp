// Row kernels (rowops.hpp): the portable rows, the dispatch on the attention path, the double twins.
// The vector rows are in rowops_avx2.cpp and rowops_avx512.cpp (from rowops_simd.hpp).
#include "qkv/rowops.hpp"

#include <algorithm>
#include <cmath>

#include "qkv/flash.hpp"

namespace qkv {

namespace flash_detail {
// rowops_avx2.cpp / rowops_avx512.cpp (stubs off x86-64; called only on their path)
void layernorm_row_avx2(float* y, const float* x, const float* w, const float* b, int d, float eps);
void gelu_bias_row_avx2(float* h, const float* b, int n);
void layernorm_row_avx512(float* y, const float* x, const float* w, const float* b, int d, float eps);
void gelu_bias_row_avx512(float* h, const float* b, int n);
}  // namespace flash_detail

namespace {

// Row loops go to OpenMP threads only when there is enough work to pay for waking them.
constexpr long kParallelElems = 1 << 15;

// The `omp simd` reductions let the compiler keep several partial sums (a fixed order for a given
// build); two passes for the variance.
void layernorm_row_portable(float* y, const float* x, const float* w, const float* b, int d, float eps) {
  float s = 0;
#pragma omp simd reduction(+ : s)
  for (int j = 0; j < d; j++) s += x[j];
  const float m = s / float(d);
  float var = 0;
#pragma omp simd reduction(+ : var)
  for (int j = 0; j < d; j++) var += (x[j] - m) * (x[j] - m);
  const float r = 1.0f / std::sqrt(var / float(d) + eps);
#pragma omp simd
  for (int j = 0; j < d; j++) y[j] = (x[j] - m) * r * w[j] + b[j];
}

void gelu_bias_row_portable(float* h, const float* b, int n) {
  constexpr float k0 = 0.7978845608028654f, k1 = 0.044715f;
  for (int j = 0; j < n; j++) {
    const float x = h[j] + b[j];
    const float e = std::min(-2.0f * (k0 * (x + k1 * x * x * x)), 88.0f);
    h[j] = x / (1.0f + std::exp(e));
  }
}

using LayerNormRow = void (*)(float*, const float*, const float*, const float*, int, float);
using GeluRow = void (*)(float*, const float*, int);

LayerNormRow layernorm_row_for(FlashPath p) {
  switch (p) {
    case FlashPath::Avx512:
      return flash_detail::layernorm_row_avx512;
    case FlashPath::Avx2:
      return flash_detail::layernorm_row_avx2;
    default:
      return layernorm_row_portable;
  }
}
GeluRow gelu_row_for(FlashPath p) {
  switch (p) {
    case FlashPath::Avx512:
      return flash_detail::gelu_bias_row_avx512;
    case FlashPath::Avx2:
      return flash_detail::gelu_bias_row_avx2;
    default:
      return gelu_bias_row_portable;
  }
}

}  // namespace

void layernorm_rows(float* y, const float* x, const float* w, const float* b, int N, int d, float eps) {
  const LayerNormRow row = layernorm_row_for(flash_path());
#pragma omp parallel for schedule(static) if (long(N) * d >= kParallelElems)
  for (int i = 0; i < N; i++) row(y + long(i) * d, x + long(i) * d, w, b, d, eps);
}

void gelu_bias_rows(float* h, const float* b, int N, int n) {
  const GeluRow row = gelu_row_for(flash_path());
#pragma omp parallel for schedule(static) if (long(N) * n >= kParallelElems)
  for (int i = 0; i < N; i++) row(h + long(i) * n, b, n);
}

namespace rowops_detail {
void layernorm_row_f64(double* y, const double* x, const double* w, const double* b, int d, double eps) {
  double s = 0;
  for (int j = 0; j < d; j++) s += x[j];
  const double m = s / d;
  double var = 0;
  for (int j = 0; j < d; j++) var += (x[j] - m) * (x[j] - m);
  const double r = 1.0 / std::sqrt(var / d + eps);
  for (int j = 0; j < d; j++) y[j] = (x[j] - m) * r * w[j] + b[j];
}
// 0.5·x·(1 + tanh y) written as x / (1 + e^{-2y}): the tanh form loses every digit to cancellation
// in 1 + tanh y far in the negative tail (y = -15: 1 + tanh y = 1.9e-13, double's ulp of 1 is 2.2e-16).
void gelu_bias_row_f64(double* h, const double* b, int n) {
  const double c = std::sqrt(2.0 / M_PI);
  for (int j = 0; j < n; j++) {
    const double x = h[j] + b[j];
    h[j] = x / (1.0 + std::exp(-2.0 * c * (x + 0.044715 * x * x * x)));
  }
}
}  // namespace rowops_detail

}  // namespace qkv
