// The avx512 micro-kernel of pgemm.hpp: pgemm_simd.hpp over simd_avx512.hpp (16 lanes: tiles of 8 rows × 32
// columns), target attribute only; pgemm.cpp calls it only on the avx512 path (flash_path(): QKV_ISA).
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define QKV_SIMD __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma")))

#include "simd_avx512.hpp"
#include "pgemm_simd.hpp"

namespace qkv::flash_detail {
void pgemm_panel_avx512(int M, int n, int K, const float* A, long lda, const float* bp, bool acc, float* C, long ldc) {
  pgemm_panel<8, 2, 512>(M, n, K, A, lda, bp, acc, C, ldc);
}
void pgemm_pack_rows_avx512(const float* rows, long ld, int n, int K, int nr, float* dst) {
  pgemm_pack_rows_simd(rows, ld, n, K, nr, dst);
}
}  // namespace qkv::flash_detail

#else
namespace qkv::flash_detail {
void pgemm_panel_avx512(int, int, int, const float*, long, const float*, bool, float*, long) {}
void pgemm_pack_rows_avx512(const float*, long, int, int, int, float*) {}
}  // namespace qkv::flash_detail
#endif
