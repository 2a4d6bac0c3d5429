// The row kernels of rowops.hpp written once over the vector interface (simd_avx2.hpp,
// simd_avx512.hpp); included by rowops_avx2.cpp and rowops_avx512.cpp, each with its Isa, QKV_SIMD and
// swap_pairs (lanes (2i, 2i + 1) exchanged). Each row is the portable row's arithmetic (rowops.cpp)
// lane by lane: the same roundings, no FMA where the portable row has none, so only the reductions'
// order (partial sums per lane) differs from it.
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

// y [d] = x · r · w (or · (1 + w)), r = 1 / sqrt(Σx² / d + eps)
QKV_SIMD void simd_rmsnorm_row(float* y, const float* x, const float* w, int d, float eps, bool one_plus_w) {
  constexpr int W = Isa::W;
  using V = Isa::V;
  V q0 = Isa::zero(), q1 = Isa::zero();
  int j = 0;
  for (; j + 2 * W <= d; j += 2 * W) {
    const V a = Isa::load(x + j), b = Isa::load(x + j + W);
    q0 = Isa::fmadd(a, a, q0);
    q1 = Isa::fmadd(b, b, q1);
  }
  for (; j + W <= d; j += W) {
    const V a = Isa::load(x + j);
    q0 = Isa::fmadd(a, a, q0);
  }
  float ss = Isa::hsum(Isa::add(q0, q1));
  for (; j < d; ++j) ss += x[j] * x[j];
  const float r = 1.0f / std::sqrt(ss / float(d) + eps);
  const V rv = Isa::set1(r), one = Isa::set1(1.0f);
  if (one_plus_w) {
    for (j = 0; j + W <= d; j += W)
      Isa::store(y + j, Isa::mul(Isa::mul(Isa::load(x + j), rv), Isa::add(one, Isa::load(w + j))));
    for (; j < d; ++j) y[j] = (x[j] * r) * (1.0f + w[j]);
  } else {
    for (j = 0; j + W <= d; j += W) Isa::store(y + j, Isa::mul(Isa::mul(Isa::load(x + j), rv), Isa::load(w + j)));
    for (; j < d; ++j) y[j] = (x[j] * r) * w[j];
  }
}

// p [r] rotated, pairs (i, i + r/2): p_i = x0·c − x1·s, p_{i+r/2} = x1·c + x0·s; c, s [r/2]
QKV_SIMD void simd_rotary_half_row(float* p, const float* c, const float* s, int r) {
  constexpr int W = Isa::W;
  using V = Isa::V;
  const int half = r / 2;
  int i = 0;
  for (; i + W <= half; i += W) {
    const V x0 = Isa::load(p + i), x1 = Isa::load(p + i + half), cv = Isa::load(c + i), sv = Isa::load(s + i);
    Isa::store(p + i, Isa::sub(Isa::mul(x0, cv), Isa::mul(x1, sv)));
    Isa::store(p + i + half, Isa::add(Isa::mul(x1, cv), Isa::mul(x0, sv)));
  }
  for (; i < half; ++i) {
    const float x0 = p[i], x1 = p[i + half];
    p[i] = x0 * c[i] - x1 * s[i];
    p[i + half] = x1 * c[i] + x0 * s[i];
  }
}

// p [r] rotated, pairs (2i, 2i + 1), by the expanded tables c2 [r] = (c0, c0, c1, c1, ...) and
// s2 [r] = (−s0, s0, −s1, s1, ...): p = p·c2 + swap_pairs(p)·s2 (x0·c + (−x1·s) is x0·c − x1·s exactly)
QKV_SIMD void simd_rotary_adjacent_row(float* p, const float* c2, const float* s2, int r) {
  constexpr int W = Isa::W;
  using V = Isa::V;
  int j = 0;
  for (; j + W <= r; j += W) {
    const V x = Isa::load(p + j);
    Isa::store(p + j, Isa::add(Isa::mul(x, Isa::load(c2 + j)), Isa::mul(swap_pairs(x), Isa::load(s2 + j))));
  }
  for (; j + 1 < r; j += 2) {
    const float x0 = p[j], x1 = p[j + 1];
    p[j] = x0 * c2[j] + x1 * s2[j];
    p[j + 1] = x1 * c2[j + 1] + x0 * s2[j + 1];
  }
}

// h [n] ·= g / (1 + e^{min(−s, 88)}), s = g (silu) or 2·√(2/π)(g + 0.044715 g³) (tanh GELU)
QKV_SIMD void simd_gated_row(float* h, const float* g, int n, bool gelu) {
  constexpr int W = Isa::W;
  using V = Isa::V;
  constexpr float k0 = 0.7978845608028654f, k1 = 0.044715f;
  const V vk0 = Isa::set1(k0), vk1 = Isa::set1(k1), m2 = Isa::set1(-2.0f), cap = Isa::set1(88.0f),
          one = Isa::set1(1.0f), zero = Isa::zero();
  int j = 0;
  for (; j + W <= n; j += W) {
    const V gv = Isa::load(g + j);
    const V s = gelu ? Isa::mul(m2, Isa::mul(vk0, Isa::add(gv, Isa::mul(Isa::mul(Isa::mul(vk1, gv), gv), gv))))
                     : Isa::sub(zero, gv);
    const V e = Isa::exp(Isa::min(s, cap));
    Isa::store(h + j, Isa::mul(Isa::load(h + j), Isa::div(gv, Isa::add(one, e))));
  }
  for (; j < n; ++j) {
    const float gv = g[j];
    const float s = gelu ? -2.0f * (k0 * (gv + k1 * gv * gv * gv)) : -gv;
    h[j] *= gv / (1.0f + std::exp(s < 88.0f ? s : 88.0f));
  }
}

}  // namespace
}  // namespace qkv::flash_detail
