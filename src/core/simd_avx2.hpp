// The AVX2 + FMA vector interface (8 lanes) of the ISA-generic kernels: flash_kernels_simd.hpp and
// rowops_simd.hpp. The includer defines QKV_SIMD (the target attribute) and includes <immintrin.h>.
#pragma once

namespace qkv::flash_detail {
namespace {

struct Isa {
  using V = __m256;
  static constexpr int W = 8;
  static constexpr int kQV = 2, kRB = 6;   // query-lane micro-kernels: 6 rows × 16 lanes
  static constexpr int kAcc = 12, kDNV = 2;  // d-lane micro-kernels: 6 × 2 or 12 × 1 vectors

  QKV_SIMD static V load(const float* p) { return _mm256_loadu_ps(p); }
  QKV_SIMD static void store(float* p, V x) { _mm256_storeu_ps(p, x); }
  QKV_SIMD static V set1(float x) { return _mm256_set1_ps(x); }
  QKV_SIMD static V zero() { return _mm256_setzero_ps(); }
  QKV_SIMD static V fmadd(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  QKV_SIMD static V add(V a, V b) { return _mm256_add_ps(a, b); }
  QKV_SIMD static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  QKV_SIMD static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  // max(a, b); a NaN in b is kept (MAXPS returns its second operand when either is NaN).
  QKV_SIMD static V max(V a, V b) { return _mm256_max_ps(a, b); }
  QKV_SIMD static V min(V a, V b) { return _mm256_min_ps(a, b); }
  QKV_SIMD static V div(V a, V b) { return _mm256_div_ps(a, b); }
  // ((x0 + x4) + (x2 + x6)) + ((x1 + x5) + (x3 + x7))
  QKV_SIMD static float hsum(V x) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)));
  }
  // {base, base + 1, ..., base + 7}
  QKV_SIMD static V lane_index(int base) {
    return _mm256_add_ps(_mm256_set_ps(7, 6, 5, 4, 3, 2, 1, 0), _mm256_set1_ps(static_cast<float>(base)));
  }
  // x with the lanes where idx < lim set to -inf
  QKV_SIMD static V mask_lt_inf(V idx, float lim, V x) {
    const V m = _mm256_cmp_ps(idx, _mm256_set1_ps(lim), _CMP_LT_OQ);
    return _mm256_blendv_ps(x, _mm256_set1_ps(-__builtin_inff()), m);
  }
  // x where idx >= lim, else 0
  QKV_SIMD static V keep_ge(V idx, float lim, V x) {
    return _mm256_and_ps(x, _mm256_cmp_ps(idx, _mm256_set1_ps(lim), _CMP_GE_OQ));
  }
  // exp(x) as the AVX-512 exp512 (same reduction and degree-7 polynomial), 2^n built in the exponent
  // bits. Inputs above 88 are taken as 88 (the kernels use x <= ~0); below ln FLT_MIN -> 0; -inf -> 0;
  // NaN -> NaN.
  QKV_SIMD static V exp(V x) {
    const V lo = _mm256_set1_ps(-87.33654f);
    const V keep = _mm256_cmp_ps(x, lo, _CMP_NLT_UQ);  // x >= lo or NaN
    x = _mm256_max_ps(lo, x);                           // NaN stays NaN (second operand)
    x = _mm256_min_ps(_mm256_set1_ps(88.0f), x);
    const V n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269502f)),
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    V r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e43p-1f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-0x1.05c61p-29f), r);
    V p = _mm256_set1_ps(1.0f / 5040.0f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_and_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(e)), keep);
  }
};

}  // namespace
}  // namespace qkv::flash_detail
