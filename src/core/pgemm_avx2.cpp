// The avx2 micro-kernel of pgemm.hpp: pgemm_simd.hpp over simd_avx2.hpp (8 lanes: tiles of 4 rows × 24
// columns, 512 k steps a pass), target attribute only; pgemm.cpp calls it only on the avx2 path (QKV_ISA).
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define QKV_SIMD __attribute__((target("avx2,fma")))

#include "simd_avx2.hpp"
#include "pgemm_simd.hpp"

QKV_PGEMM_DEFINE(avx2, 4, 3, 512)
#endif
