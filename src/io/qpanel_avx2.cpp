// The AVX2 (+ F16C) panel expansion of qpanel.hpp: qpanel_simd.hpp over qblock_decode_avx2.hpp's
// decoders, target attribute only; qpanel.cpp calls it only on the avx2 path.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define QKV_SIMD __attribute__((target("avx2,fma,f16c")))

#include "core/simd_avx2.hpp"
#include "io/qmatmul_simd.hpp"
#include "io/qblock_decode_avx2.hpp"
#include "io/qpanel_simd.hpp"

namespace qkv::io::qdetail {
namespace {
struct Avx2Store {
  float* tile;
  QKV_SIMD void operator()(int ja, __m256 a, int jb, __m256 b) const {
    _mm256_storeu_ps(tile + ja, a);
    _mm256_storeu_ps(tile + jb, b);
  }
};
}  // namespace
bool qpanel_avx2(GgmlType t, const void* W, int r0, int r1, int K, float* out) {
  return simd_panel<Avx2Decoders, Avx2Store>(t, W, r0, r1, K, out);
}
}  // namespace qkv::io::qdetail

#else
#include "qkv/io/gguf_quant.hpp"
namespace qkv::io::qdetail {
bool qpanel_avx2(GgmlType, const void*, int, int, int, float*) { return false; }
}  // namespace qkv::io::qdetail
#endif
