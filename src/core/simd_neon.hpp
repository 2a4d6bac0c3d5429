// The aarch64 NEON vector interface (4 lanes) of the ISA-generic kernels: flash_kernels_simd.hpp and
// rowops_simd.hpp. The includer defines QKV_SIMD (empty) and includes <arm_neon.h>.
#pragma once

namespace qkv::flash_detail {
namespace {

struct Isa {
  using V = float32x4_t;
  static constexpr int W = 4;
  static constexpr int kQV = 3, kRB = 8;     // query-lane micro-kernels: 8 rows × 12 lanes
  static constexpr int kAcc = 24, kDNV = 4;  // d-lane micro-kernels: 6×4, 8×3, 12×2 or 24×1 vectors

  static V load(const float* p) { return vld1q_f32(p); }
  static void store(float* p, V x) { vst1q_f32(p, x); }
  static V set1(float x) { return vdupq_n_f32(x); }
  static V zero() { return vdupq_n_f32(0.0f); }
  static V fmadd(V a, V b, V c) { return vfmaq_f32(c, a, b); }
  static V add(V a, V b) { return vaddq_f32(a, b); }
  static V sub(V a, V b) { return vsubq_f32(a, b); }
  static V mul(V a, V b) { return vmulq_f32(a, b); }
  static V max(V a, V b) { return vmaxq_f32(a, b); }  // NaN in either -> NaN
  static V min(V a, V b) { return vminq_f32(a, b); }
  static V div(V a, V b) { return vdivq_f32(a, b); }
  static float hsum(V x) { return vaddvq_f32(x); }
  static V lane_index(int base) {
    const float i[4] = {0, 1, 2, 3};
    return vaddq_f32(vld1q_f32(i), vdupq_n_f32(static_cast<float>(base)));
  }
  static V mask_lt_inf(V idx, float lim, V x) {
    return vbslq_f32(vcltq_f32(idx, vdupq_n_f32(lim)), vdupq_n_f32(-__builtin_inff()), x);
  }
  static V keep_ge(V idx, float lim, V x) {
    return vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(x), vcgeq_f32(idx, vdupq_n_f32(lim))));
  }
  // exp as in flash_kernels_avx2.cpp: inputs above 88 taken as 88; below ln FLT_MIN -> 0; NaN -> NaN.
  static V exp(V x) {
    const V lo = vdupq_n_f32(-87.33654f);
    const uint32x4_t keep = vmvnq_u32(vcltq_f32(x, lo));  // x >= lo or NaN
    x = vminq_f32(vmaxq_f32(x, lo), vdupq_n_f32(88.0f));   // NaN stays NaN
    const V n = vrndnq_f32(vmulq_f32(x, vdupq_n_f32(1.44269502f)));
    V r = vfmsq_f32(x, n, vdupq_n_f32(0x1.62e43p-1f));
    r = vfmsq_f32(r, n, vdupq_n_f32(-0x1.05c61p-29f));
    V p = vdupq_n_f32(1.0f / 5040.0f);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 720.0f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 120.0f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 24.0f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 6.0f), p, r);
    p = vfmaq_f32(vdupq_n_f32(0.5f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
    const int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23);
    const V y = vmulq_f32(p, vreinterpretq_f32_s32(e));
    return vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(y), keep));
  }
};

}  // namespace
}  // namespace qkv::flash_detail
