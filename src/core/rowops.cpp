// Row kernels (rowops.hpp): the portable rows, the dispatch on the attention path (a table of each
// path's rows), the double twins. The vector rows are in rowops_avx2.cpp and rowops_avx512.cpp (from
// rowops_simd.hpp); NEON builds take the portable rows, which the compiler vectorises.
#include "qkv/rowops.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "qkv/flash.hpp"

namespace qkv {

namespace flash_detail {
// rowops_avx2.cpp / rowops_avx512.cpp (stubs off x86-64; called only on their path)
#define QKV_ROWOPS_DECLARE(isa)                                                                               \
  void layernorm_row_##isa(float* y, const float* x, const float* w, const float* b, int d, float eps);      \
  void gelu_bias_row_##isa(float* h, const float* b, int n);                                                  \
  void rmsnorm_row_##isa(float* y, const float* x, const float* w, int d, float eps, bool one_plus_w);       \
  void rotary_half_row_##isa(float* p, const float* c, const float* s, int r);                               \
  void rotary_adjacent_row_##isa(float* p, const float* c2, const float* s2, int r);                         \
  void gated_row_##isa(float* h, const float* g, int n, bool gelu);
QKV_ROWOPS_DECLARE(avx2)
QKV_ROWOPS_DECLARE(avx512)
#undef QKV_ROWOPS_DECLARE
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

void rmsnorm_row_portable(float* y, const float* x, const float* w, int d, float eps, bool one_plus_w) {
  float ss = 0;
#pragma omp simd reduction(+ : ss)
  for (int j = 0; j < d; j++) ss += x[j] * x[j];
  const float r = 1.0f / std::sqrt(ss / float(d) + eps);
  if (one_plus_w) {
#pragma omp simd
    for (int j = 0; j < d; j++) y[j] = (x[j] * r) * (1.0f + w[j]);
  } else {
#pragma omp simd
    for (int j = 0; j < d; j++) y[j] = (x[j] * r) * w[j];
  }
}

void rotary_half_row_portable(float* p, const float* c, const float* s, int r) {
  const int half = r / 2;
  for (int i = 0; i < half; i++) {
    const float x0 = p[i], x1 = p[i + half];
    p[i] = x0 * c[i] - x1 * s[i];
    p[i + half] = x1 * c[i] + x0 * s[i];
  }
}

// c2, s2 [r]: the expanded tables of rotary_rows (c2[2i] = c2[2i+1] = c_i, s2[2i] = −s_i, s2[2i+1] = s_i)
void rotary_adjacent_row_portable(float* p, const float* c2, const float* s2, int r) {
  for (int j = 0; j + 1 < r; j += 2) {
    const float x0 = p[j], x1 = p[j + 1];
    p[j] = x0 * c2[j] + x1 * s2[j];
    p[j + 1] = x1 * c2[j + 1] + x0 * s2[j + 1];
  }
}

void gated_row_portable(float* h, const float* g, int n, bool gelu) {
  constexpr float k0 = 0.7978845608028654f, k1 = 0.044715f;
  for (int j = 0; j < n; j++) {
    const float gv = g[j];
    const float s = gelu ? -2.0f * (k0 * (gv + k1 * gv * gv * gv)) : -gv;
    h[j] *= gv / (1.0f + std::exp(s < 88.0f ? s : 88.0f));
  }
}

struct RowKernels {
  void (*layernorm)(float*, const float*, const float*, const float*, int, float);
  void (*gelu_bias)(float*, const float*, int);
  void (*rmsnorm)(float*, const float*, const float*, int, float, bool);
  void (*rotary_half)(float*, const float*, const float*, int);
  void (*rotary_adjacent)(float*, const float*, const float*, int);
  void (*gated)(float*, const float*, int, bool);
};

constexpr RowKernels kPortable{layernorm_row_portable,   gelu_bias_row_portable,       rmsnorm_row_portable,
                               rotary_half_row_portable, rotary_adjacent_row_portable, gated_row_portable};
constexpr RowKernels kAvx2{flash_detail::layernorm_row_avx2,   flash_detail::gelu_bias_row_avx2,
                           flash_detail::rmsnorm_row_avx2,     flash_detail::rotary_half_row_avx2,
                           flash_detail::rotary_adjacent_row_avx2, flash_detail::gated_row_avx2};
constexpr RowKernels kAvx512{flash_detail::layernorm_row_avx512,   flash_detail::gelu_bias_row_avx512,
                             flash_detail::rmsnorm_row_avx512,     flash_detail::rotary_half_row_avx512,
                             flash_detail::rotary_adjacent_row_avx512, flash_detail::gated_row_avx512};

// The rows of the attention path in use (QKV_ISA forces it): AVX-512, AVX2, else the portable rows.
const RowKernels& kernels() {
  const FlashPath p = flash_path();
  return p == FlashPath::Avx512 ? kAvx512 : p == FlashPath::Avx2 ? kAvx2 : kPortable;
}

}  // namespace

void layernorm_rows(float* y, const float* x, const float* w, const float* b, int N, int d, float eps) {
  const auto row = kernels().layernorm;
#pragma omp parallel for schedule(static) if (long(N) * d >= kParallelElems)
  for (int i = 0; i < N; i++) row(y + long(i) * d, x + long(i) * d, w, b, d, eps);
}

void gelu_bias_rows(float* h, const float* b, int N, int n) {
  const auto row = kernels().gelu_bias;
#pragma omp parallel for schedule(static) if (long(N) * n >= kParallelElems)
  for (int i = 0; i < N; i++) row(h + long(i) * n, b, n);
}

void rmsnorm_rows(float* y, const float* x, const float* w, int N, int d, float eps, bool one_plus_w) {
  const auto row = kernels().rmsnorm;
#pragma omp parallel for schedule(static) if (long(N) * d >= kParallelElems)
  for (int i = 0; i < N; i++) row(y + long(i) * d, x + long(i) * d, w, d, eps, one_plus_w);
}

void rotary_rows(float* x, int H, int T, int dh, int r, bool adjacent, const float* cs, const float* sn,
                 const int* pos) {
  const int half = r / 2;
  if (half < 1) return;
  const RowKernels& k = kernels();
  if (!adjacent) {
#pragma omp parallel for schedule(static) if (long(H) * T * dh >= kParallelElems)
    for (long ht = 0; ht < long(H) * T; ht++) {
      const long t = pos[ht % T];
      k.rotary_half(x + ht * dh, cs + t * half, sn + t * half, r);
    }
    return;
  }
  // adjacent pairs: the tables of the rows' positions expanded once (c_i twice, −s_i then s_i)
  std::vector<float> c2(size_t(T) * 2 * half), s2(size_t(T) * 2 * half);
  for (int t = 0; t < T; t++)
    for (int i = 0; i < half; i++) {
      const float c = cs[long(pos[t]) * half + i], s = sn[long(pos[t]) * half + i];
      c2[size_t(t) * 2 * half + 2 * i] = c2[size_t(t) * 2 * half + 2 * i + 1] = c;
      s2[size_t(t) * 2 * half + 2 * i] = -s;
      s2[size_t(t) * 2 * half + 2 * i + 1] = s;
    }
#pragma omp parallel for schedule(static) if (long(H) * T * dh >= kParallelElems)
  for (long ht = 0; ht < long(H) * T; ht++) {
    const long t = ht % T;
    k.rotary_adjacent(x + ht * dh, c2.data() + t * 2 * half, s2.data() + t * 2 * half, 2 * half);
  }
}

void gated_rows(float* h, const float* g, int ldg, int N, int n, GateAct act) {
  const auto row = kernels().gated;
  const bool gelu = act == GateAct::GeluTanh;
#pragma omp parallel for schedule(static) if (long(N) * n >= kParallelElems)
  for (int i = 0; i < N; i++) row(h + long(i) * n, g + long(i) * ldg, n, gelu);
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
void rmsnorm_row_f64(double* y, const double* x, const double* w, int d, double eps, bool one_plus_w) {
  double ss = 0;
  for (int j = 0; j < d; j++) ss += x[j] * x[j];
  const double r = 1.0 / std::sqrt(ss / d + eps);
  for (int j = 0; j < d; j++) y[j] = x[j] * r * (one_plus_w ? 1.0 + w[j] : w[j]);
}
void rotary_row_f64(double* p, const double* c, const double* s, int r, bool adjacent) {
  const int half = r / 2;
  for (int i = 0; i < half; i++) {
    const int i0 = adjacent ? 2 * i : i, i1 = adjacent ? 2 * i + 1 : i + half;
    const double x0 = p[i0], x1 = p[i1];
    p[i0] = x0 * c[i] - x1 * s[i];
    p[i1] = x1 * c[i] + x0 * s[i];
  }
}
// silu g·σ(g) and the tanh GELU g·σ(2y) as g / (1 + e^{-s}), uncapped (double's exp overflows to inf: 0)
void gated_row_f64(double* h, const double* g, int n, GateAct act) {
  const double c = std::sqrt(2.0 / M_PI);
  for (int j = 0; j < n; j++) {
    const double s = act == GateAct::Silu ? g[j] : 2.0 * c * (g[j] + 0.044715 * g[j] * g[j] * g[j]);
    h[j] *= g[j] / (1.0 + std::exp(-s));
  }
}
}  // namespace rowops_detail

}  // namespace qkv
