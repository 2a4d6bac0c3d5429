// The avx2 row kernels of rowops.hpp: rowops_simd.hpp over simd_avx2.hpp, target attribute only (no
// -m flag); rowops.cpp calls them only on the avx2 attention path (flash_path()).
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define QKV_SIMD __attribute__((target("avx2,fma")))

#include "simd_avx2.hpp"
#include "rowops_simd.hpp"

namespace qkv::flash_detail {
void layernorm_row_avx2(float* y, const float* x, const float* w, const float* b, int d, float eps) {
  simd_layernorm_row(y, x, w, b, d, eps);
}
void gelu_bias_row_avx2(float* h, const float* b, int n) {
  simd_gelu_bias_row(h, b, n);
}
}  // namespace qkv::flash_detail

#else

namespace qkv::flash_detail {
void layernorm_row_avx2(float*, const float*, const float*, const float*, int, float) {}
void gelu_bias_row_avx2(float*, const float*, int) {}
}  // namespace qkv::flash_detail

#endif
