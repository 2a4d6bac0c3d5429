// The AVX-512 fused dequantize-and-multiply kernels (qmatmul.hpp): qmatmul_simd.hpp over
// simd_avx512.hpp and qblock_decode_avx512.hpp, target attribute only (no -m flag); qmatmul.cpp calls them only on the avx512 path.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

// GCC 12 reports the _mm512_undefined_*() inside its own conversion intrinsics as maybe-uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#define QKV_SIMD __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma,f16c")))

#include "core/simd_avx512.hpp"
#include "io/qmatmul_simd.hpp"
#include "io/qblock_decode_avx512.hpp"

namespace qkv::io::qdetail {
namespace {
// simd_avx512.hpp's vectors with a horizontal sum in registers: its hsum goes through memory (a store,
// then scalar adds), which cost ~8 % of a Q4_K row of 1024 weights at one row of x.
struct DotIsa : flash_detail::Isa {
  QKV_SIMD static float hsum(V x) {
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(x),
                                   _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)));
  }
};
}  // namespace

bool qmatmul_avx512(GgmlType t, const void* W, int n0, int n1, int K, const float* x, int ldx, int M, float* y,
                  int ldy, bool accumulate) {
  return simd_qmatmul<DotIsa, Avx512Decoders>(t, W, n0, n1, K, x, ldx, M, y, ldy, accumulate);
}
}  // namespace qkv::io::qdetail

#else

#include "qkv/io/gguf_quant.hpp"
namespace qkv::io::qdetail {
bool qmatmul_avx512(GgmlType, const void*, int, int, int, const float*, int, int, float*, int, bool) {
  return false;
}
}  // namespace qkv::io::qdetail

#endif
