// aarch64 NEON kernels of the fused causal attention (flash.hpp): the ISA-generic kernels of
// flash_kernels_simd.hpp over 4-lane float32x4_t vectors (NEON is part of every aarch64 CPU: no
// run-time check needed). Micro-kernels: 8 rows × 3 vectors (24 accumulators of the 32 registers).
// Checked for correctness under qemu-aarch64 (tests/arm, scripts/test.sh); its speed on real ARM
// hardware has not been measured.
#if defined(__aarch64__) && defined(__ARM_NEON)
#include <arm_neon.h>

#define QKV_SIMD
#define QKV_SIMD_ITEM __attribute__((noinline))

#include "simd_neon.hpp"
#include "flash_kernels_simd.hpp"

namespace qkv::flash_detail {
bool neon_available() {
  return true;
}
void forward_neon(const float* q, const float* k, const float* v, float* z, float* lse, int H, int n_kv, int T,
                  int q0, int dh, float scale) {
  simd_forward(q, k, v, z, lse, H, n_kv, T, q0, dh, scale);
}
void backward_neon(const float* q, const float* k, const float* v, const float* z, const float* lse,
                   const float* dz, float* dq, float* dk, float* dv, int H, int T, int dh, float scale) {
  simd_backward(q, k, v, z, lse, dz, dq, dk, dv, H, T, dh, scale);
}
bool vexp_neon(const float* x, float* y, int n) {
  return simd_vexp(x, y, n);
}
}  // namespace qkv::flash_detail

#else  // not aarch64: no NEON path.

namespace qkv::flash_detail {
bool neon_available() {
  return false;
}
void forward_neon(const float*, const float*, const float*, float*, float*, int, int, int, int, int, float) {}
void backward_neon(const float*, const float*, const float*, const float*, const float*, const float*, float*,
                   float*, float*, int, int, int, float) {}
bool vexp_neon(const float*, float*, int) {
  return false;
}
}  // namespace qkv::flash_detail

#endif
