// The AVX2 + FMA loop of peak.hpp: 12 ymm accumulators, each an independent chain acc = acc·a + b
// (2 FMA pipes × 4-cycle latency need 8; 12 of the 16 ymm registers leave room for a and b).
// Target attribute only (no -m flag); peak.cpp calls it only when the CPU has AVX2 and FMA.
#include "qkv/peak.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

namespace qkv::peak_detail {
__attribute__((target("avx2,fma"))) float fma_loop_avx2(long iters, float a, float b) {
  const __m256 va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b);
  __m256 c[12];
  for (int i = 0; i < 12; ++i) c[i] = _mm256_set1_ps(float(i));
  for (long n = 0; n < iters; ++n) {
#define QKV_STEP(i) c[i] = _mm256_fmadd_ps(c[i], va, vb);
    QKV_STEP(0) QKV_STEP(1) QKV_STEP(2) QKV_STEP(3) QKV_STEP(4) QKV_STEP(5)
    QKV_STEP(6) QKV_STEP(7) QKV_STEP(8) QKV_STEP(9) QKV_STEP(10) QKV_STEP(11)
#undef QKV_STEP
  }
  __m256 s = _mm256_setzero_ps();
  for (int i = 0; i < 12; ++i) s = _mm256_add_ps(s, c[i]);
  alignas(32) float o[8];
  _mm256_store_ps(o, s);
  return o[0] + o[1] + o[2] + o[3] + o[4] + o[5] + o[6] + o[7];
}
}  // namespace qkv::peak_detail

#else
namespace qkv::peak_detail {
float fma_loop_avx2(long, float, float) { return 0; }
}  // namespace qkv::peak_detail
#endif
