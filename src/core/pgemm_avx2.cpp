// The avx2 micro-kernel of pgemm.hpp: pgemm_simd.hpp over simd_avx2.hpp (8 lanes: tiles of 4 rows × 24
// columns), target attribute only; pgemm.cpp calls it only on the avx2 path (flash_path(): QKV_ISA).
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define QKV_SIMD __attribute__((target("avx2,fma")))

#include "simd_avx2.hpp"
#include "pgemm_simd.hpp"

namespace qkv::flash_detail {
void pgemm_panel_avx2(int M, int n, int K, const float* A, long lda, const float* bp, bool acc, float* C, long ldc) {
  pgemm_panel<4, 3, 256>(M, n, K, A, lda, bp, acc, C, ldc);
}
void pgemm_pack_rows_avx2(const float* rows, long ld, int n, int K, int nr, float* dst) {
  pgemm_pack_rows_simd(rows, ld, n, K, nr, dst);
}
}  // namespace qkv::flash_detail

#else
namespace qkv::flash_detail {
void pgemm_panel_avx2(int, int, int, const float*, long, const float*, bool, float*, long) {}
void pgemm_pack_rows_avx2(const float*, long, int, int, int, float*) {}
}  // namespace qkv::flash_detail
#endif
