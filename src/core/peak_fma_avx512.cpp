// The AVX-512 FMA loop of peak.hpp: 16 zmm accumulators, each an independent chain acc = acc·a + b
// (Zen 5 and Intel cores have 2 FMA pipes of 4-cycle latency: 8 chains fill them, 16 leave room).
// Target attribute only (no -m flag); peak.cpp calls it only when the CPU has AVX-512.
#include "qkv/peak.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

namespace qkv::peak_detail {
__attribute__((target("avx512f"))) float fma_loop_avx512(long iters, float a, float b) {
  const __m512 va = _mm512_set1_ps(a), vb = _mm512_set1_ps(b);
  __m512 c[16];
  for (int i = 0; i < 16; ++i) c[i] = _mm512_set1_ps(float(i));
  for (long n = 0; n < iters; ++n) {
    // an empty asm on every accumulator keeps them in registers and the chains in the loop
#define QKV_STEP(i) c[i] = _mm512_fmadd_ps(c[i], va, vb);
    QKV_STEP(0) QKV_STEP(1) QKV_STEP(2) QKV_STEP(3) QKV_STEP(4) QKV_STEP(5) QKV_STEP(6) QKV_STEP(7)
    QKV_STEP(8) QKV_STEP(9) QKV_STEP(10) QKV_STEP(11) QKV_STEP(12) QKV_STEP(13) QKV_STEP(14) QKV_STEP(15)
#undef QKV_STEP
  }
  __m512 s = _mm512_setzero_ps();
  for (int i = 0; i < 16; ++i) s = _mm512_add_ps(s, c[i]);
  return _mm512_reduce_add_ps(s);
}
}  // namespace qkv::peak_detail

#else
namespace qkv::peak_detail {
float fma_loop_avx512(long, float, float) { return 0; }
}  // namespace qkv::peak_detail
#endif
