// The avx2 row kernels of rowops.hpp: rowops_simd.hpp over simd_avx2.hpp, target attribute only (no
// -m flag); rowops.cpp calls them only on the avx2 attention path (flash_path(): QKV_ISA).
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define QKV_SIMD __attribute__((target("avx2,fma")))

#include "simd_avx2.hpp"

namespace qkv::flash_detail {
namespace {
QKV_SIMD inline __m256 swap_pairs(__m256 x) { return _mm256_permute_ps(x, 0xB1); }  // lanes (2i, 2i + 1) exchanged
}  // namespace
}  // namespace qkv::flash_detail

#include "rowops_simd.hpp"

namespace qkv::flash_detail {
void layernorm_row_avx2(float* y, const float* x, const float* w, const float* b, int d, float eps) {
  simd_layernorm_row(y, x, w, b, d, eps);
}
void gelu_bias_row_avx2(float* h, const float* b, int n) {
  simd_gelu_bias_row(h, b, n);
}
void rmsnorm_row_avx2(float* y, const float* x, const float* w, int d, float eps, bool one_plus_w) {
  simd_rmsnorm_row(y, x, w, d, eps, one_plus_w);
}
void rotary_half_row_avx2(float* p, const float* c, const float* s, int r) { simd_rotary_half_row(p, c, s, r); }
void rotary_adjacent_row_avx2(float* p, const float* c2, const float* s2, int r) {
  simd_rotary_adjacent_row(p, c2, s2, r);
}
void gated_row_avx2(float* h, const float* g, int n, bool gelu) { simd_gated_row(h, g, n, gelu); }
}  // namespace qkv::flash_detail

#else

namespace qkv::flash_detail {
void layernorm_row_avx2(float*, const float*, const float*, const float*, int, float) {}
void gelu_bias_row_avx2(float*, const float*, int) {}
void rmsnorm_row_avx2(float*, const float*, const float*, int, float, bool) {}
void rotary_half_row_avx2(float*, const float*, const float*, int) {}
void rotary_adjacent_row_avx2(float*, const float*, const float*, int) {}
void gated_row_avx2(float*, const float*, int, bool) {}
}  // namespace qkv::flash_detail

#endif
