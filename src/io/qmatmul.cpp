// Fused dequantize-and-multiply (qmatmul.hpp): checks, the split over threads, the dispatch to the path
// in use (flash_path(): QKV_ISA / flash_force_path), the portable path and the double-precision twin.
// The vector kernels: qmatmul_avx2.cpp, qmatmul_avx512.cpp, qmatmul_neon.cpp (all qmatmul_simd.hpp).
#include "qkv/io/qmatmul.hpp"

#include <omp.h>

#include <algorithm>
#include <string>
#include <vector>

#include "qkv/error.hpp"
#include "qkv/flash.hpp"
#include "qkv/gemm.hpp"

#define QKV_SIMD
#include "io/qmatmul_simd.hpp"

namespace qkv::io {

namespace qdetail {
using Kernel = bool (*)(GgmlType, const void*, int, int, int, const float*, int, int, float*, int, bool);
bool qmatmul_avx2(GgmlType, const void*, int, int, int, const float*, int, int, float*, int, bool);
bool qmatmul_avx512(GgmlType, const void*, int, int, int, const float*, int, int, float*, int, bool);
bool qmatmul_neon(GgmlType, const void*, int, int, int, const float*, int, int, float*, int, bool);
}  // namespace qdetail

namespace {

// Eight lanes as plain arrays: loops the compiler may vectorise for the baseline target; each lane is
// a separate product and sum (no contraction: -ffp-contract=off under -std=c++20).
struct PortableIsa {
  struct V {
    float v[8];
  };
  static constexpr int W = 8;
  static V load(const float* p) {
    V r;
    for (int i = 0; i < 8; ++i) r.v[i] = p[i];
    return r;
  }
  static V zero() { return V{}; }
  static V fmadd(V a, V b, V c) {
    for (int i = 0; i < 8; ++i) c.v[i] += a.v[i] * b.v[i];
    return c;
  }
  static V add(V a, V b) {
    for (int i = 0; i < 8; ++i) a.v[i] += b.v[i];
    return a;
  }
  static float hsum(V x) {
    return ((x.v[0] + x.v[4]) + (x.v[2] + x.v[6])) + ((x.v[1] + x.v[5]) + (x.v[3] + x.v[7]));
  }
};

bool qmatmul_portable(GgmlType t, const void* W, int n0, int n1, int K, const float* x, int ldx, int M,
                      float* y, int ldy, bool accumulate) {
  return qdetail::simd_qmatmul<PortableIsa>(t, W, n0, n1, K, x, ldx, M, y, ldy, accumulate);
}

qdetail::Kernel kernel_for(FlashPath p) {
  switch (p) {
    case FlashPath::Avx512:
      return qdetail::qmatmul_avx512;
    case FlashPath::Avx2:
      return qdetail::qmatmul_avx2;
    case FlashPath::Neon:
      return qdetail::qmatmul_neon;
    default:
      return qmatmul_portable;
  }
}

void check(GgmlType t, int K) {
  if (!qmatmul_supports(t)) data_error("qmatmul: tensor type " + ggml_type_name(t) + " has no fused kernel");
  const int64_t bs = ggml_type_traits(uint32_t(t))->block_size;
  if (K % bs != 0)
    data_error("qmatmul: a row of " + std::to_string(K) + " values is not whole " + ggml_type_name(t) +
               " blocks of " + std::to_string(bs));
}

}  // namespace

bool qmatmul_supports(GgmlType t) {
  switch (t) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::BF16:
    case GgmlType::Q8_0:
    case GgmlType::Q4_0:
    case GgmlType::Q2_K:
    case GgmlType::Q3_K:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
    case GgmlType::IQ4_NL:
    case GgmlType::IQ4_XS:
    case GgmlType::Q4_1:
    case GgmlType::Q5_0:
    case GgmlType::Q5_1:
      return true;
    default:
      return false;
  }
}

void qmatmul(GgmlType t, const void* W, int N, int K, const float* x, int ldx, int M, float* y, int ldy,
             bool accumulate) {
  if (N <= 0 || M <= 0) return;
  check(t, K);
  const qdetail::Kernel fn = kernel_for(flash_path());
  // Below ~1 MFLOP a second thread costs more than it saves (as gemm.cpp's matrix–vector split).
  const int threads =
      omp_get_level() == 0 && double(N) * K * M >= 5e5 ? std::min(gemm_threads(), std::max(1, N / 16)) : 1;
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int s = 0; s < threads; ++s) {
    const int n0 = int(int64_t(N) * s / threads), n1 = int(int64_t(N) * (s + 1) / threads);
    fn(t, W, n0, n1, K, x, ldx, M, y, ldy, accumulate);
  }
}

void qmatmul_reference(GgmlType t, const void* W, int N, int K, const float* x, int ldx, int M, float* y,
                       int ldy, bool accumulate) {
  check(t, K);
  const std::size_t rb = ggml_row_size(t, K);
  for (int n = 0; n < N; ++n) {
    const auto* row = static_cast<const unsigned char*>(W) + std::size_t(n) * rb;
    for (int m = 0; m < M; ++m) {
      double s = 0;
      for (int k = 0; k < K; ++k)
        s += double(dequantize_value(t, row, k)) * double(x[std::size_t(m) * ldx + k]);
      float& out = y[std::size_t(m) * ldy + n];
      out = float(accumulate ? double(out) + s : s);
    }
  }
}

}  // namespace qkv::io
