// The avx512 row kernels of rowops.hpp: rowops_simd.hpp over simd_avx512.hpp, target attribute only (no
// -m flag); rowops.cpp calls them only on the avx512 attention path (flash_path()).
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define QKV_SIMD __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma")))

#include "simd_avx512.hpp"
#include "rowops_simd.hpp"

namespace qkv::flash_detail {
void layernorm_row_avx512(float* y, const float* x, const float* w, const float* b, int d, float eps) {
  simd_layernorm_row(y, x, w, b, d, eps);
}
void gelu_bias_row_avx512(float* h, const float* b, int n) {
  simd_gelu_bias_row(h, b, n);
}
}  // namespace qkv::flash_detail

#else

namespace qkv::flash_detail {
void layernorm_row_avx512(float*, const float*, const float*, const float*, int, float) {}
void gelu_bias_row_avx512(float*, const float*, int) {}
}  // namespace qkv::flash_detail

#endif
