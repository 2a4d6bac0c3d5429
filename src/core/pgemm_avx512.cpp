// The avx512 micro-kernel of pgemm.hpp: pgemm_simd.hpp over simd_avx512.hpp (16 lanes: tiles of 8 rows × 32
// columns, 512 k steps a pass), target attribute only; pgemm.cpp calls it only on the avx512 path (QKV_ISA).
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define QKV_SIMD __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma")))

#include "simd_avx512.hpp"
#include "pgemm_simd.hpp"

QKV_PGEMM_DEFINE(avx512, 8, 2, 512)
#endif
