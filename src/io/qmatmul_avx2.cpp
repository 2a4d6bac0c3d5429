// The AVX2 + FMA fused dequantize-and-multiply kernels (qmatmul.hpp): qmatmul_simd.hpp over
// simd_avx2.hpp and qblock_decode_avx2.hpp, target attribute only (no -m flag; F16C as every
// AVX2 CPU has it); qmatmul.cpp calls them only on the avx2 path.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define QKV_SIMD __attribute__((target("avx2,fma,f16c")))

#include "core/simd_avx2.hpp"
#include "io/qmatmul_simd.hpp"
#include "io/qblock_decode_avx2.hpp"

namespace qkv::io::qdetail {
bool qmatmul_avx2(GgmlType t, const void* W, int n0, int n1, int K, const float* x, int ldx, int M, float* y,
                  int ldy, bool accumulate) {
  return simd_qmatmul<flash_detail::Isa, Avx2Decoders>(t, W, n0, n1, K, x, ldx, M, y, ldy, accumulate);
}
}  // namespace qkv::io::qdetail

#else

#include "qkv/io/gguf_quant.hpp"
namespace qkv::io::qdetail {
bool qmatmul_avx2(GgmlType, const void*, int, int, int, const float*, int, int, float*, int, bool) {
  return false;
}
}  // namespace qkv::io::qdetail

#endif
