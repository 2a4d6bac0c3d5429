// AVX2 + FMA kernels of the fused causal attention (flash.hpp): the ISA-generic kernels of
// flash_kernels_simd.hpp over 8-lane ymm vectors. Every vector function carries the target attribute,
// so the file needs no -m flag; flash.cpp calls these only when avx2_available() says the CPU has it.
// Micro-kernels: 6 rows × 2 vectors (12 accumulators + 2 loads + 1 broadcast of the 16 ymm registers).
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>

#define QKV_SIMD __attribute__((target("avx2,fma")))
#define QKV_SIMD_ITEM QKV_SIMD __attribute__((noinline))

#include "simd_avx2.hpp"
#include "flash_kernels_simd.hpp"

namespace qkv::flash_detail {

// CPUID leaf 1, ECX bit 29 (clang 14's __builtin_cpu_supports does not know "f16c"). The dequantizing
// kernels of the AVX2 and AVX-512 paths (src/io/qmatmul_*.cpp) convert f16 scales with F16C.
bool f16c_available() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
}

bool avx2_available() {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c_available();
}
void forward_avx2(const float* q, const float* k, const float* v, float* z, float* lse, int H, int n_kv, int T,
                  int q0, int dh, float scale) {
  simd_forward(q, k, v, z, lse, H, n_kv, T, q0, dh, scale);
}
void backward_avx2(const float* q, const float* k, const float* v, const float* z, const float* lse,
                   const float* dz, float* dq, float* dk, float* dv, int H, int T, int dh, float scale) {
  simd_backward(q, k, v, z, lse, dz, dq, dk, dv, H, T, dh, scale);
}
bool vexp_avx2(const float* x, float* y, int n) {
  return simd_vexp(x, y, n);
}
}  // namespace qkv::flash_detail

#else  // not x86-64 with GCC/Clang: no AVX2 path.

namespace qkv::flash_detail {
bool avx2_available() {
  return false;
}
void forward_avx2(const float*, const float*, const float*, float*, float*, int, int, int, int, int, float) {}
void backward_avx2(const float*, const float*, const float*, const float*, const float*, const float*, float*,
                   float*, float*, int, int, int, float) {}
bool vexp_avx2(const float*, float*, int) {
  return false;
}
}  // namespace qkv::flash_detail

#endif
