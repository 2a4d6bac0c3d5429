// The AVX-512 panel expansion of qpanel.hpp: qpanel_simd.hpp over qblock_decode_avx512.hpp's decoders,
// target attribute only; qpanel.cpp calls it only on the avx512 path.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

// GCC 12 reports the _mm512_undefined_*() inside its own conversion intrinsics as maybe-uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#define QKV_SIMD __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma,f16c")))

#include "core/simd_avx512.hpp"
#include "io/qmatmul_simd.hpp"
#include "io/qblock_decode_avx512.hpp"
#include "io/qpanel_simd.hpp"

namespace qkv::io::qdetail {
namespace {
struct Avx512Store {
  float* tile;
  QKV_SIMD void operator()(int ja, __m512 a, int jb, __m512 b) const {
    _mm512_storeu_ps(tile + ja, a);
    _mm512_storeu_ps(tile + jb, b);
  }
};
}  // namespace
bool qpanel_avx512(GgmlType t, const void* W, int r0, int r1, int K, float* out) {
  return simd_panel<Avx512Decoders, Avx512Store>(t, W, r0, r1, K, out);
}
}  // namespace qkv::io::qdetail

#else
#include "qkv/io/gguf_quant.hpp"
namespace qkv::io::qdetail {
bool qpanel_avx512(GgmlType, const void*, int, int, int, float*) { return false; }
}  // namespace qkv::io::qdetail
#endif
