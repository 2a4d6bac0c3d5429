// pgemm.hpp's micro-kernel and the loops around it, over one vector interface (simd_avx2.hpp,
// simd_avx512.hpp: Isa with W lanes); pgemm_avx2.cpp and pgemm_avx512.cpp instantiate it with their
// target attribute (QKV_SIMD). A tile of MR rows × NR = NV·W columns lives in MR·NV registers; each k step
// loads NV vectors of the packed panel and broadcasts MR values of A from its interleaved copy.
#pragma once

#include <algorithm>
#include <array>
#include <utility>

namespace qkv::flash_detail {
namespace {

// C[i, 0:NV·W) (+)= Σ_k ap[k, i] · bp[k, 0:NV·W) for i < R, k in order; C from its own values when acc.
// ap holds the rows' k steps interleaved, 8 floats a step (pack_a), bp the panel's group, S vectors a k
// step (S = NV but for a panel's last, narrower columns, which read the first NV of a group's S).
template <int R, int NV, int S = NV>
QKV_SIMD void pgemm_tile(int kc, const float* ap, const float* bp, float* c, long ldc, bool acc) {
  using V = typename Isa::V;
  constexpr int W = Isa::W;
  V t[R][NV];
#pragma GCC unroll 16
  for (int i = 0; i < R; i++)
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++) t[i][v] = acc ? Isa::load(c + i * ldc + v * W) : Isa::zero();
  for (int k = 0; k < kc; k++) {
    V b[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++) b[v] = Isa::load(bp + (k * S + v) * W);
#pragma GCC unroll 16
    for (int i = 0; i < R; i++) {
      const V x = Isa::set1(ap[8 * k + i]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; v++) t[i][v] = Isa::fmadd(x, b[v], t[i][v]);
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < R; i++)
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++) Isa::store(c + i * ldc + v * W, t[i][v]);
}

using PgemmTileFn = void (*)(int, const float*, const float*, float*, long, bool);

template <int NV, int... R>
constexpr auto pgemm_tiles(std::integer_sequence<int, R...>) {
  return std::array<PgemmTileFn, sizeof...(R)>{&pgemm_tile<R + 1, NV>...};
}

// A group's first v < NV vectors of columns (a panel's last columns, a multiple of W): all 8 packed rows in
// one tile where its 8·v accumulators fit beside the MR·NV of the full tile (an 8 × 8 AVX2 tile keeps
// 8 FMA chains in flight where 4 × 8 would have 4), else tiles of MR rows.
template <int MR, int NV>
constexpr int pgemm_edge_rows(int v) {
  return 8 * v <= MR * NV ? 8 : MR;
}

template <int MR, int NV, int... V>
constexpr auto pgemm_edge_tiles(std::integer_sequence<int, V...>) {
  return std::array<PgemmTileFn, sizeof...(V)>{&pgemm_tile<pgemm_edge_rows<MR, NV>(V + 1), V + 1, NV>...};
}

// 8 rows of 8 floats (row stride ld) -> 8 columns of dst (row stride ldd): the 8 × 8 transpose.
QKV_SIMD inline void transpose8(const float* src, long ld, float* dst, long ldd) {
  __m256 r[8], t[8];
  for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(src + i * ld);
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
    r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  for (int i = 0; i < 4; i++) {
    _mm256_storeu_ps(dst + i * ldd, _mm256_permute2f128_ps(r[i], r[i + 4], 0x20));
    _mm256_storeu_ps(dst + (i + 4) * ldd, _mm256_permute2f128_ps(r[i], r[i + 4], 0x31));
  }
}

// A's rows [i, i + rows) × [k0, k0 + kc) -> ap[k][8] (rows ≥ `rows` unused). `more`: 8 rows exist from
// the first (the 8 × 8 transposes may read them), else one by one.
QKV_SIMD inline void pack_a(const float* a, long lda, int rows, bool more, int kc, float* ap) {
  int k = 0;
  if (more)
    for (; k + 8 <= kc; k += 8) transpose8(a + k, lda, ap + 8 * k, 8);
  for (; k < kc; k++)
    for (int r = 0; r < rows; r++) ap[8 * k + r] = a[r * lda + k];
}

// C [M, n] (+)= A [M, K] · the packed panel bp (pgemm.hpp's layout for groups of NR = NV·W columns), KC k
// steps at a time (the panel's KC × n floats stay in L2 while A's rows pass). Each block of 8 rows × KC of
// A is interleaved into ap once (MR strided rows read directly would share L1 sets when the row stride is a
// multiple of 4 KiB, as d = 1024 makes it), then each group of the panel takes tiles of MR rows (MR divides
// 8). A group cut by n to whole vectors goes straight to C through narrower tiles (pgemm.cpp ends the threads'
// shares on vectors, not groups); other cut tiles through a local tile (their rows through a smaller kernel).
template <int MR, int NV, int KC>
QKV_SIMD void pgemm_panel(int M, int n, int K, const float* A, long lda, const float* bp, bool accumulate, float* C,
                          long ldc) {
  static_assert(8 % MR == 0, "a tile's rows divide the 8 rows packed together");
  constexpr int NR = NV * Isa::W;
  static constexpr auto tiles = pgemm_tiles<NV>(std::make_integer_sequence<int, MR>{});
  static constexpr auto edge_tiles = pgemm_edge_tiles<MR, NV>(std::make_integer_sequence<int, NV - 1>{});
  const int groups = (n + NR - 1) / NR;
  alignas(64) float edge[MR * NR];
  alignas(64) float ap[8 * KC];
  for (int k0 = 0; k0 < K; k0 += KC) {
    const int kc = std::min(KC, K - k0);
    const bool acc = accumulate || k0 > 0;
    for (int i0 = 0; i0 < M; i0 += 8) {
      const int rows8 = std::min(8, M - i0);
      pack_a(A + i0 * lda + k0, lda, rows8, i0 + 8 <= M, kc, ap);
      for (int g = 0; g < groups; g++) {
        const float* b = bp + (long(g) * K + k0) * NR;
        const int cols = std::min(NR, n - g * NR);
        if (cols < NR && cols % Isa::W == 0 && rows8 == 8) {  // narrower tiles straight into C
          const int v = cols / Isa::W, er = pgemm_edge_rows<MR, NV>(v);
          for (int r0 = 0; r0 < 8; r0 += er) edge_tiles[v - 1](kc, ap + r0, b, C + (i0 + r0) * ldc + g * NR, ldc, acc);
          continue;
        }
        for (int r0 = 0; r0 < rows8; r0 += MR) {
          const int rows = std::min(MR, rows8 - r0);
          float* c = C + (i0 + r0) * ldc + g * NR;
          if (rows == MR && cols == NR) {
            pgemm_tile<MR, NV>(kc, ap + r0, b, c, ldc, acc);
            continue;
          }
          if (acc)
            for (int r = 0; r < rows; r++) std::copy_n(c + r * ldc, cols, edge + r * NR);
          tiles[rows - 1](kc, ap + r0, b, edge, NR, acc);
          for (int r = 0; r < rows; r++) std::copy_n(edge + r * NR, cols, c + r * ldc);
        }
      }
    }
  }
}

// pgemm_pack_rows: rows [n, K] -> groups of nr columns; 8 × 8 blocks through registers, the rest one by one.
QKV_SIMD void pgemm_pack_rows_simd(const float* rows, long ld, int n, int K, int nr, float* dst) {
  const int groups = (n + nr - 1) / nr;
  for (int g = 0; g < groups; g++) {
    float* d = dst + long(g) * K * nr;
    for (int r0 = 0; r0 < nr; r0 += 8) {
      const int live = std::min(8, n - g * nr - r0);  // rows of this block inside n
      const float* src = rows + (long(g) * nr + r0) * ld;
      int k = 0;
      if (live == 8)
        for (; k + 8 <= K; k += 8) transpose8(src + k, ld, d + long(k) * nr + r0, nr);
      for (; k < K; k++)
        for (int r = 0; r < 8; r++) d[long(k) * nr + r0 + r] = r < live ? src[r * ld + k] : 0.0f;
    }
  }
}

}  // namespace
}  // namespace qkv::flash_detail

// The two functions pgemm.cpp's table calls, for one ISA: its tile (MR rows × NV vectors) and pass (KC).
#define QKV_PGEMM_DEFINE(isa, MR, NV, KC)                                                                      \
  namespace qkv::flash_detail {                                                                              \
  void pgemm_panel_##isa(int M, int n, int K, const float* A, long lda, const float* bp, bool acc, float* C, \
                         long ldc) {                                                                         \
    pgemm_panel<MR, NV, KC>(M, n, K, A, lda, bp, acc, C, ldc);                                               \
  }                                                                                                          \
  void pgemm_pack_rows_##isa(const float* rows, long ld, int n, int K, int nr, float* dst) {                 \
    pgemm_pack_rows_simd(rows, ld, n, K, nr, dst);                                                           \
  }                                                                                                          \
  }
