// The NEON loop of peak.hpp: 16 float32x4 accumulators, each an independent chain acc = acc·a + b
// (vfmaq_f32; up to 4 FMA pipes of 4-cycle latency on recent cores). Built only on aarch64.
#include "qkv/peak.hpp"

#if defined(__aarch64__)
#include <arm_neon.h>

namespace qkv::peak_detail {
float fma_loop_neon(long iters, float a, float b) {
  const float32x4_t va = vdupq_n_f32(a), vb = vdupq_n_f32(b);
  float32x4_t c[16];
  for (int i = 0; i < 16; ++i) c[i] = vdupq_n_f32(float(i));
  for (long n = 0; n < iters; ++n) {
#define QKV_STEP(i) c[i] = vfmaq_f32(vb, c[i], va);
    QKV_STEP(0) QKV_STEP(1) QKV_STEP(2) QKV_STEP(3) QKV_STEP(4) QKV_STEP(5) QKV_STEP(6) QKV_STEP(7)
    QKV_STEP(8) QKV_STEP(9) QKV_STEP(10) QKV_STEP(11) QKV_STEP(12) QKV_STEP(13) QKV_STEP(14) QKV_STEP(15)
#undef QKV_STEP
  }
  float32x4_t s = vdupq_n_f32(0);
  for (int i = 0; i < 16; ++i) s = vaddq_f32(s, c[i]);
  return vaddvq_f32(s);
}
}  // namespace qkv::peak_detail

#else
namespace qkv::peak_detail {
float fma_loop_neon(long, float, float) { return 0; }
}  // namespace qkv::peak_detail
#endif
