// The aarch64 NEON fused dequantize-and-multiply kernels (qmatmul.hpp): qmatmul_simd.hpp over
// simd_neon.hpp (4 lanes), with qblock_decode_neon.hpp's Q6_K decoder (the other types: the plain loops,
// vectorised by the compiler). Checked under qemu-aarch64 (tests/arm); not timed on ARM hardware.
#if defined(__aarch64__) && defined(__ARM_NEON)
#include <arm_neon.h>

#define QKV_SIMD

#include "core/simd_neon.hpp"
#include "io/qmatmul_simd.hpp"
#include "io/qblock_decode_neon.hpp"

namespace qkv::io::qdetail {
bool qmatmul_neon(GgmlType t, const void* W, int n0, int n1, int K, const float* x, int ldx, int M, float* y,
                  int ldy, bool accumulate) {
  return simd_qmatmul<flash_detail::Isa, NeonDecoders>(t, W, n0, n1, K, x, ldx, M, y, ldy, accumulate);
}
}  // namespace qkv::io::qdetail

#else

#include "qkv/io/gguf_quant.hpp"
namespace qkv::io::qdetail {
bool qmatmul_neon(GgmlType, const void*, int, int, int, const float*, int, int, float*, int, bool) {
  return false;
}
}  // namespace qkv::io::qdetail

#endif
