// The AVX-512 vector interface (16 lanes) for rowops_simd.hpp; its exp is also the one the hand-written
// AVX-512 attention kernels (flash_kernels.cpp) use. The includer defines QKV_SIMD (the target
// attribute) and includes <immintrin.h>.
#pragma once

namespace qkv::flash_detail {
namespace {

struct Isa {
  using V = __m512;
  static constexpr int W = 16;

  QKV_SIMD static V load(const float* p) { return _mm512_loadu_ps(p); }
  QKV_SIMD static void store(float* p, V x) { _mm512_storeu_ps(p, x); }
  QKV_SIMD static V set1(float x) { return _mm512_set1_ps(x); }
  QKV_SIMD static V zero() { return _mm512_setzero_ps(); }
  QKV_SIMD static V fmadd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  QKV_SIMD static V add(V a, V b) { return _mm512_add_ps(a, b); }
  QKV_SIMD static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  QKV_SIMD static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  QKV_SIMD static V div(V a, V b) { return _mm512_div_ps(a, b); }
  QKV_SIMD static V min(V a, V b) { return _mm512_maskz_min_ps(0xFFFF, a, b); }
  // Pairwise over the 16 lanes. (Through memory: GCC 12 warns on the _mm512_undefined_* inside the
  // unmasked extract/min intrinsics, hence also maskz_min.)
  QKV_SIMD static float hsum(V x) {
    alignas(64) float t[16];
    _mm512_store_ps(t, x);
    for (int w = 8; w >= 1; w /= 2)
      for (int i = 0; i < w; ++i) t[i] += t[i + w];
    return t[0];
  }
  // exp(x) for x <= 88: x = n ln2 + r, |r| <= ln2/2, e^r by its degree-7 Taylor polynomial (truncation
  // < 6e-9 relative) in Horner form with FMA, then scalef by 2^n. Max relative error 7.9e-8, measured
  // over every float in [-87.33, 0.5] against double exp. Results below FLT_MIN (x < ln FLT_MIN) are
  // 0 (no denormals); -inf -> 0; NaN -> NaN (the second operand of max).
  QKV_SIMD static V exp(V x) {
    const __m512 lo = _mm512_set1_ps(-87.33654f);
    const __mmask16 keep = _mm512_cmp_ps_mask(x, lo, _CMP_NLT_UQ);
    x = _mm512_maskz_max_ps(0xFFFF, lo, x);
    const __m512 n = _mm512_maskz_roundscale_ps(0xFFFF, _mm512_mul_ps(x, _mm512_set1_ps(1.44269502f)),
                                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.62e43p-1f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-0x1.05c61p-29f), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_maskz_scalef_ps(keep, p, n);
  }
};

}  // namespace
}  // namespace qkv::flash_detail
