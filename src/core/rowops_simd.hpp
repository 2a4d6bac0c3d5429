// The row kernels of rowops.hpp written once over the vector interface (simd_avx2.hpp,
// simd_avx512.hpp); included by rowops_avx2.cpp and rowops_avx512.cpp, each with its Isa and QKV_SIMD.
// Lane-parallel partial sums, reduced in a fixed order: results are deterministic for a given path.
#pragma once

#include <algorithm>
#include <cmath>

namespace qkv::flash_detail {
namespace {

// y [d] = (x - mean) / sqrt(var + eps) · w + b   (two passes for the variance, as the portable row)
QKV_SIMD void simd_layernorm_row(float* y, const float* x, const float* w, const float* b, int d, float eps) {
  constexpr int W = Isa::W;
  using V = Isa::V;
  V s = Isa::zero();
  int j = 0;
  for (; j + W <= d; j += W) s = Isa::add(s, Isa::load(x + j));
  float sum = Isa::hsum(s);
  for (; j < d; ++j) sum += x[j];
  const float m = sum / float(d);
  const V mv = Isa::set1(m);
  V q = Isa::zero();
  for (j = 0; j + W <= d; j += W) {
    const V c = Isa::sub(Isa::load(x + j), mv);
    q = Isa::fmadd(c, c, q);
  }
  float var = Isa::hsum(q);
  for (; j < d; ++j) var += (x[j] - m) * (x[j] - m);
  const float r = 1.0f / std::sqrt(var / float(d) + eps);
  const V rv = Isa::set1(r);
  for (j = 0; j + W <= d; j += W)
    Isa::store(y + j, Isa::fmadd(Isa::mul(Isa::sub(Isa::load(x + j), mv), rv), Isa::load(w + j), Isa::load(b + j)));
  for (; j < d; ++j) y[j] = (x[j] - m) * r * w[j] + b[j];
}

// h [n] = gelu(h + b), tanh form x / (1 + e^{-2y}), y = √(2/π)(x + 0.044715 x³), -2y capped at 88.
QKV_SIMD void simd_gelu_bias_row(float* h, const float* b, int n) {
  constexpr int W = Isa::W;
  using V = Isa::V;
  constexpr float k0 = 0.7978845608028654f, k1 = 0.044715f;
  const V vk0 = Isa::set1(k0), vk1 = Isa::set1(k1), m2 = Isa::set1(-2.0f), cap = Isa::set1(88.0f),
          one = Isa::set1(1.0f);
  int j = 0;
  for (; j + W <= n; j += W) {
    const V x = Isa::add(Isa::load(h + j), Isa::load(b + j));
    const V x3 = Isa::mul(Isa::mul(x, x), x);
    const V e = Isa::min(Isa::mul(m2, Isa::mul(vk0, Isa::add(x, Isa::mul(vk1, x3)))), cap);
    Isa::store(h + j, Isa::div(x, Isa::add(one, Isa::exp(e))));
  }
  for (; j < n; ++j) {
    const float x = h[j] + b[j];
    const float e = std::min(-2.0f * (k0 * (x + k1 * x * x * x)), 88.0f);
    h[j] = x / (1.0f + std::exp(e));
  }
}

}  // namespace
}  // namespace qkv::flash_detail
