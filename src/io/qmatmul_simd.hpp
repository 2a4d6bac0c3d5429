// The fused dequantize-and-multiply kernel (qmatmul.hpp) over an ISA's vector interface `Isa` (load,
// fmadd, add, zero, hsum, W lanes): one row of W at a time, one tile of kTile weights decoded by the
// type's decoder (qblock_decode.hpp), then multiplied into up to 4 rows of x with two accumulators each.
// The includer defines QKV_SIMD and Isa, then includes this file inside its namespace's scope.
#pragma once
#include <algorithm>
#include <cstddef>

#include "io/qblock_decode.hpp"
#include "qkv/io/gguf_quant.hpp"

namespace qkv::io::qdetail {
namespace {

// The accumulators of one row of W against MR rows of x, for decoders that hand over their vectors
// directly (Dec::kDirect: visit(row, k0, L, acc) calls acc(ja, wa, jb, wb) with the weights at columns
// ja.. and jb.. of the tile), so no tile is written and read back.
template <class Isa, int MR>
struct Accum {
  typename Isa::V a0[MR], a1[MR];
  const float* xk;
  int ldx;
  QKV_SIMD QKV_FORCE_INLINE void operator()(int ja, typename Isa::V wa, int jb, typename Isa::V wb) {
    for (int m = 0; m < MR; ++m) {
      a0[m] = Isa::fmadd(wa, Isa::load(xk + std::size_t(m) * ldx + ja), a0[m]);
      a1[m] = Isa::fmadd(wb, Isa::load(xk + std::size_t(m) * ldx + jb), a1[m]);
    }
  }
  QKV_SIMD inline typename Isa::V total(int m) const { return Isa::add(a0[m], a1[m]); }
};

// One row of x (a decoding step): successive calls alternate between two pairs of accumulators, four
// FMA chains instead of two, so that the FMA latency does not bound a row (the branch alternates, and
// is predicted).
template <class Isa>
struct Accum<Isa, 1> {
  typename Isa::V a0[1], a1[1], c0, c1;
  const float* xk;
  int ldx;
  bool odd;
  QKV_SIMD QKV_FORCE_INLINE void operator()(int ja, typename Isa::V wa, int jb, typename Isa::V wb) {
    if (odd) {
      c0 = Isa::fmadd(wa, Isa::load(xk + ja), c0);
      c1 = Isa::fmadd(wb, Isa::load(xk + jb), c1);
    } else {
      a0[0] = Isa::fmadd(wa, Isa::load(xk + ja), a0[0]);
      a1[0] = Isa::fmadd(wb, Isa::load(xk + jb), a1[0]);
    }
    odd = !odd;
  }
  QKV_SIMD inline typename Isa::V total(int) const {
    return Isa::add(Isa::add(a0[0], a1[0]), Isa::add(c0, c1));
  }
};

template <class Dec>
constexpr bool direct() {
  if constexpr (requires { Dec::kDirect; }) return Dec::kDirect;
  return false;
}

// How many values of a row a decoder takes per visit (or run): kTile, or its own kSpan, a multiple of
// kTile, when seeing several blocks at once gains (Q4_K decodes the scales of all its blocks first, so that
// their latency does not stall each block; visit then gets L ≤ kSpan).
template <class Dec>
constexpr int span() {
  if constexpr (requires { Dec::kSpan; }) return Dec::kSpan;
  return kTile;
}

// One pass over rows [n0, n1) of W for MR rows of x.
template <class Isa, class Dec, int MR>
QKV_SIMD void rows_pass(const unsigned char* W, std::size_t row_bytes, int n0, int n1, int K, const float* x,
                        int ldx, float* y, int ldy, bool accumulate) {
  using V = typename Isa::V;
  constexpr int VW = Isa::W;
  alignas(64) float tile[kTile];
  for (int n = n0; n < n1; ++n) {
    const unsigned char* row = W + std::size_t(n) * row_bytes;
    Accum<Isa, MR> acc;
    V(&a0)[MR] = acc.a0;
    V(&a1)[MR] = acc.a1;
    float t[MR];
    for (int m = 0; m < MR; ++m) a0[m] = Isa::zero(), a1[m] = Isa::zero(), t[m] = 0.0f;
    if constexpr (MR == 1) acc.c0 = Isa::zero(), acc.c1 = Isa::zero(), acc.odd = false;
    acc.ldx = ldx;
    for (int k0 = 0; k0 < K; k0 += span<Dec>()) {
      const int L = std::min(span<Dec>(), K - k0);
      const float* xk = x + k0;
      acc.xk = xk;
      if constexpr (direct<Dec>()) {
        Dec::visit(row, k0, L, acc);
      } else {
        const float* w = Dec::run(row, k0, L, tile);
        int j = 0;
        for (; j + 2 * VW <= L; j += 2 * VW) acc(j, Isa::load(w + j), j + VW, Isa::load(w + j + VW));
        for (; j < L; ++j)
          for (int m = 0; m < MR; ++m) t[m] += w[j] * xk[std::size_t(m) * ldx + j];
      }
    }
    for (int m = 0; m < MR; ++m) {
      const float s = Isa::hsum(acc.total(m)) + t[m];
      float& out = y[std::size_t(m) * ldy + n];
      out = accumulate ? out + s : s;
    }
  }
}

// Rows of x per pass: 4 (the accumulators of 4 rows fit the 16 registers of AVX2), or fewer where a
// decoder says so (Dec::kMaxRows: its bit work and 8 accumulators would spill).
template <class Dec>
constexpr int rows_per_pass() {
  if constexpr (requires { Dec::kMaxRows; }) return Dec::kMaxRows;
  return 4;
}

// Rows of x in passes of at most rows_per_pass.
template <class Isa, class Dec>
QKV_SIMD void rows_all(const unsigned char* W, int n0, int n1, int K, const float* x, int ldx, int M,
                       float* y, int ldy, bool accumulate) {
  const std::size_t rb = std::size_t(K / Dec::kBlock) * Dec::kBytes;
  constexpr int kRows = rows_per_pass<Dec>();
  for (int m0 = 0; m0 < M; m0 += kRows) {
    const float* xm = x + std::size_t(m0) * ldx;
    float* ym = y + std::size_t(m0) * ldy;
    switch (std::min(kRows, M - m0)) {
      case 1:
        rows_pass<Isa, Dec, 1>(W, rb, n0, n1, K, xm, ldx, ym, ldy, accumulate);
        break;
      case 2:
        rows_pass<Isa, Dec, 2>(W, rb, n0, n1, K, xm, ldx, ym, ldy, accumulate);
        break;
      case 3:
        rows_pass<Isa, Dec, 3>(W, rb, n0, n1, K, xm, ldx, ym, ldy, accumulate);
        break;
      default:
        rows_pass<Isa, Dec, 4>(W, rb, n0, n1, K, xm, ldx, ym, ldy, accumulate);
        break;
    }
  }
}

// The decoders of qblock_decode.hpp, one per type; an ISA's file may replace some with its own.
struct PlainDecoders {
  using F32 = DecF32;
  using F16 = DecF16;
  using BF16 = DecBF16;
  using Q8_0 = DecQ8_0;
  using Q4_0 = DecQ4_0;
  using Q2_K = DecQ2_K;
  using Q3_K = DecQ3_K;
  using Q4_K = DecQ4_K;
  using Q5_K = DecQ5_K;
  using IQ4_NL = DecIQ4_NL;
  using Q4_1 = DecQ4_1;
  using Q5_0 = DecQ5_0;
  using Q5_1 = DecQ5_1;
  using IQ4_XS = DecIQ4_XS;
  using Q6_K = DecQ6_K;
};

// The entry each ISA's file exports: the type's decoder picked, rows [n0, n1) of W done. False for a type
// without a decoder.
template <class Isa, class D = PlainDecoders>
QKV_SIMD bool simd_qmatmul(GgmlType t, const void* Wv, int n0, int n1, int K, const float* x, int ldx, int M,
                           float* y, int ldy, bool accumulate) {
  const auto* W = static_cast<const unsigned char*>(Wv);
  switch (t) {
    case GgmlType::F32:
      return rows_all<Isa, typename D::F32>(W, n0, n1, K, x, ldx, M, y, ldy, accumulate), true;
    case GgmlType::F16:
      return rows_all<Isa, typename D::F16>(W, n0, n1, K, x, ldx, M, y, ldy, accumulate), true;
    case GgmlType::BF16:
      return rows_all<Isa, typename D::BF16>(W, n0, n1, K, x, ldx, M, y, ldy, accumulate), true;
    case GgmlType::Q8_0:
      return rows_all<Isa, typename D::Q8_0>(W, n0, n1, K, x, ldx, M, y, ldy, accumulate), true;
    case GgmlType::Q4_0:
      return rows_all<Isa, typename D::Q4_0>(W, n0, n1, K, x, ldx, M, y, ldy, accumulate), true;
    case GgmlType::Q2_K:
      return rows_all<Isa, typename D::Q2_K>(W, n0, n1, K, x, ldx, M, y, ldy, accumulate), true;
    case GgmlType::Q3_K:
      return rows_all<Isa, typename D::Q3_K>(W, n0, n1, K, x, ldx, M, y, ldy, accumulate), true;
    case GgmlType::Q4_K:
      return rows_all<Isa, typename D::Q4_K>(W, n0, n1, K, x, ldx, M, y, ldy, accumulate), true;
    case GgmlType::Q5_K:
      return rows_all<Isa, typename D::Q5_K>(W, n0, n1, K, x, ldx, M, y, ldy, accumulate), true;
    case GgmlType::IQ4_NL:
      return rows_all<Isa, typename D::IQ4_NL>(W, n0, n1, K, x, ldx, M, y, ldy, accumulate), true;
    case GgmlType::Q4_1:
      return rows_all<Isa, typename D::Q4_1>(W, n0, n1, K, x, ldx, M, y, ldy, accumulate), true;
    case GgmlType::Q5_0:
      return rows_all<Isa, typename D::Q5_0>(W, n0, n1, K, x, ldx, M, y, ldy, accumulate), true;
    case GgmlType::Q5_1:
      return rows_all<Isa, typename D::Q5_1>(W, n0, n1, K, x, ldx, M, y, ldy, accumulate), true;
    case GgmlType::IQ4_XS:
      return rows_all<Isa, typename D::IQ4_XS>(W, n0, n1, K, x, ldx, M, y, ldy, accumulate), true;
    case GgmlType::Q6_K:
      return rows_all<Isa, typename D::Q6_K>(W, n0, n1, K, x, ldx, M, y, ldy, accumulate), true;
    default:
      return false;
  }
}

}  // namespace
}  // namespace qkv::io::qdetail
