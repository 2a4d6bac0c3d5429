// AVX-512 kernels of the fused causal attention (flash.hpp). Every function that uses AVX-512 carries
// the QKV_AVX512 target attribute; flash.cpp calls them only when avx512_available() says the CPU has it.
//
// Layout: a tile of scores is kept transposed, Sᵀ[key j][query i], with 16 queries in the lanes of a
// zmm register. Row-wise softmax statistics (max, sum, lse, D) are then plain lane-wise vector ops
// with no horizontal reductions, and all five products are register-blocked rank-1 updates:
//   Sᵀ  = K Qᵀ        rows = keys,    lanes = queries   (broadcast k[j][d], load Qᵀ[d][i..i+16))
//   Oᵀ += Vᵀ Pᵀ       rows = d,       lanes = queries   (broadcast v[j][d], load Pᵀ[j][i..i+16))
//   dPᵀ = V dzᵀ       like Sᵀ
//   dV += Pᵀ dz       rows = keys,    lanes = d         (broadcast Pᵀ[j][i], load dz[i][d..d+16))
//   dK += dSᵀ q       like dV
//   dQ += dS K        rows = queries, lanes = d         (broadcast dSᵀ[j][i], load K[j][d..d+16))
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <new>
#include <vector>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define QKV_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma")))
// An AVX-512 function called from a plain function's OpenMP region (see "Forward" below).
#define QKV_AVX512_ITEM QKV_AVX512 __attribute__((noinline))
#define QKV_SIMD QKV_AVX512
#include "simd_avx512.hpp"

namespace qkv::flash_detail {

namespace {

using std::size_t;

constexpr int kBr = 48;        // lanes of the micro-kernels: 3 vectors of 16 queries
constexpr int kQV = kBr / 16;  // vectors per kBr lanes
constexpr int kBrF = 144;      // queries per block in the forward (a multiple of kBr; 48/96/144 measured)
constexpr int kBcF = 48;       // keys per tile in the forward (Sᵀ tile 27 KB stays in L1)
constexpr int kBcB = 48;       // keys (and queries) per block in the backward: a multiple of 24, the row
                               // blocking of the dK/dV/dQ micro-kernels

// A 64-byte aligned float buffer.
struct Buf {
  float* p = nullptr;
  explicit Buf(size_t n)
      : p(static_cast<float*>(::operator new(std::max<size_t>(n, 1) * sizeof(float), std::align_val_t(64)))) {
  }
  ~Buf() { ::operator delete(p, std::align_val_t(64)); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  float* data() const { return p; }
};

// Grow-only per-thread scratch, 64-byte aligned: the forward allocates on a thread's first call (or a
// larger dh) only, so a steady-state caller such as run() (lm.hpp) allocates nothing.
// OpenMP's pooled threads keep theirs between calls; each is freed when its thread exits.
struct Scratch {
  float* p = nullptr;
  size_t cap = 0;
  float* get(size_t n) {
    if (n > cap) {
      ::operator delete(p, std::align_val_t(64));
      p = nullptr;
      p = static_cast<float*>(::operator new(n * sizeof(float), std::align_val_t(64)));
      cap = n;
    }
    return p;
  }
  ~Scratch() { ::operator delete(p, std::align_val_t(64)); }
};
thread_local Scratch tls_fwd_qt, tls_fwd_ot, tls_fwd_s;

// exp(x): simd_avx512.hpp's Isa::exp (the one AVX-512 exp; rowops_avx512.cpp uses it too) — x = n ln2 + r,
// |r| <= ln2/2, e^r by its degree-7 Taylor polynomial with FMA, then scalef by 2^n. Max relative error
// 7.9e-8 over every float in [-87.33, 0.5] against double exp; below ln FLT_MIN -> 0; -inf -> 0; NaN -> NaN.
QKV_AVX512 inline __m512 exp512(__m512 x) {
  return Isa::exp(x);
}

enum Mode { kStore, kAdd, kScaleAdd };

// Micro-kernel with A row-contiguous: C[r][16v..16v+16) (=|+=) Σ_{k<K} A[r*lda + k] · B[k*ldb + 16v ..].
template <int R, int NV, Mode M>
QKV_AVX512 inline void mk_rows(const float* A, size_t lda, const float* B, size_t ldb, float* C, size_t ldc,
                               int K) {
  __m512 acc[R][NV];
#pragma GCC unroll 32
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v)
      acc[r][v] = M == kStore ? _mm512_setzero_ps() : _mm512_loadu_ps(C + r * ldc + 16 * v);
  for (int k = 0; k < K; ++k) {
    __m512 b[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) b[v] = _mm512_loadu_ps(B + k * ldb + 16 * v);
#pragma GCC unroll 32
    for (int r = 0; r < R; ++r) {
      const __m512 a = _mm512_set1_ps(A[r * lda + k]);
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(a, b[v], acc[r][v]);
    }
  }
#pragma GCC unroll 32
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) _mm512_storeu_ps(C + r * ldc + 16 * v, acc[r][v]);
}

// Micro-kernel with A column-contiguous: C[r][16v..) = (alpha[v] ·) C[r][16v..) + Σ_k A[r + k*lda] · B[k*ldb
// + 16v ..].
template <int R, int NV, Mode M>
QKV_AVX512 inline void mk_cols(const float* A, size_t lda, const float* B, size_t ldb, float* C, size_t ldc,
                               int K, const float* alpha) {
  __m512 acc[R][NV];
#pragma GCC unroll 32
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
      acc[r][v] = M == kStore ? _mm512_setzero_ps() : _mm512_loadu_ps(C + r * ldc + 16 * v);
      if (M == kScaleAdd) acc[r][v] = _mm512_mul_ps(acc[r][v], _mm512_loadu_ps(alpha + 16 * v));
    }
  for (int k = 0; k < K; ++k) {
    __m512 b[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) b[v] = _mm512_loadu_ps(B + k * ldb + 16 * v);
#pragma GCC unroll 32
    for (int r = 0; r < R; ++r) {
      const __m512 a = _mm512_set1_ps(A[r + k * lda]);
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(a, b[v], acc[r][v]);
    }
  }
#pragma GCC unroll 32
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) _mm512_storeu_ps(C + r * ldc + 16 * v, acc[r][v]);
}

// C[rows][kBr lanes] (=|+=) A·B over any number of rows (8 at a time, then the rest), lanes = 3 vectors.
template <Mode M>
QKV_AVX512 void lanes_rows(const float* A, size_t lda, const float* B, size_t ldb, float* C, size_t ldc,
                           int K, int rows) {
  int r = 0;
  for (; r + 8 <= rows; r += 8) mk_rows<8, kQV, M>(A + r * lda, lda, B, ldb, C + r * ldc, ldc, K);
  switch (rows - r) {
    case 7:
      mk_rows<7, kQV, M>(A + r * lda, lda, B, ldb, C + r * ldc, ldc, K);
      break;
    case 6:
      mk_rows<6, kQV, M>(A + r * lda, lda, B, ldb, C + r * ldc, ldc, K);
      break;
    case 5:
      mk_rows<5, kQV, M>(A + r * lda, lda, B, ldb, C + r * ldc, ldc, K);
      break;
    case 4:
      mk_rows<4, kQV, M>(A + r * lda, lda, B, ldb, C + r * ldc, ldc, K);
      break;
    case 3:
      mk_rows<3, kQV, M>(A + r * lda, lda, B, ldb, C + r * ldc, ldc, K);
      break;
    case 2:
      mk_rows<2, kQV, M>(A + r * lda, lda, B, ldb, C + r * ldc, ldc, K);
      break;
    case 1:
      mk_rows<1, kQV, M>(A + r * lda, lda, B, ldb, C + r * ldc, ldc, K);
      break;
    default:
      break;
  }
}

// Oᵀ[d][48 lanes] = alpha · Oᵀ[d][lanes] + Σ_{j<K} V[j*ldv + d] Pᵀ[j][lanes], for d < dh; Pᵀ, Oᵀ rows ld
// apart.
QKV_AVX512 void lanes_cols_scaleadd(const float* V, size_t ldv, const float* P, float* O, size_t ld, int K,
                                    int dh, const float* alpha) {
  int r = 0;
  for (; r + 8 <= dh; r += 8) mk_cols<8, kQV, kScaleAdd>(V + r, ldv, P, ld, O + r * ld, ld, K, alpha);
  const float* a = V + r;
  float* o = O + r * ld;
  switch (dh - r) {
    case 7:
      mk_cols<7, kQV, kScaleAdd>(a, ldv, P, ld, o, ld, K, alpha);
      break;
    case 6:
      mk_cols<6, kQV, kScaleAdd>(a, ldv, P, ld, o, ld, K, alpha);
      break;
    case 5:
      mk_cols<5, kQV, kScaleAdd>(a, ldv, P, ld, o, ld, K, alpha);
      break;
    case 4:
      mk_cols<4, kQV, kScaleAdd>(a, ldv, P, ld, o, ld, K, alpha);
      break;
    case 3:
      mk_cols<3, kQV, kScaleAdd>(a, ldv, P, ld, o, ld, K, alpha);
      break;
    case 2:
      mk_cols<2, kQV, kScaleAdd>(a, ldv, P, ld, o, ld, K, alpha);
      break;
    case 1:
      mk_cols<1, kQV, kScaleAdd>(a, ldv, P, ld, o, ld, K, alpha);
      break;
    default:
      break;
  }
}

// C[rows][16·NV) += A·B with lanes over d; rows a multiple of R; A row- or column-contiguous.
template <bool kRowsA, int R, int NV>
QKV_AVX512 void d_lanes_chunk(const float* A, size_t lda, const float* B, size_t ldb, float* C, size_t ldc,
                              int K, int rows) {
  for (int r = 0; r < rows; r += R) {
    if constexpr (kRowsA)
      mk_rows<R, NV, kAdd>(A + r * lda, lda, B, ldb, C + r * ldc, ldc, K);
    else
      mk_cols<R, NV, kAdd>(A + r, lda, B, ldb, C + r * ldc, ldc, K, nullptr);
  }
}

// C[rows][dhp] += A·B with lanes over d (dhp a multiple of 16), rows a multiple of 24. Columns go in
// chunks of up to 4 vectors, rows blocked to keep 24 accumulators.
template <bool kRowsA>
QKV_AVX512 void d_lanes_add(const float* A, size_t lda, const float* B, size_t ldb, float* C, size_t ldc,
                            int K, int rows, int dhp) {
  for (int c = 0; c < dhp;) {
    const int nv = std::min(4, (dhp - c) / 16);
    switch (nv) {
      case 4:
        d_lanes_chunk<kRowsA, 6, 4>(A, lda, B + c, ldb, C + c, ldc, K, rows);
        break;
      case 3:
        d_lanes_chunk<kRowsA, 8, 3>(A, lda, B + c, ldb, C + c, ldc, K, rows);
        break;
      case 2:
        d_lanes_chunk<kRowsA, 12, 2>(A, lda, B + c, ldb, C + c, ldc, K, rows);
        break;
      default:
        d_lanes_chunk<kRowsA, 24, 1>(A, lda, B + c, ldb, C + c, ldc, K, rows);
        break;
    }
    c += 16 * nv;
  }
}

// Lane index vectors 0..15, 16..31, 32..47 of a query block.
QKV_AVX512 inline __m512 lane_index(int v) {
  return _mm512_add_ps(_mm512_set_ps(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                       _mm512_set1_ps(static_cast<float>(16 * v)));
}

}  // namespace

bool f16c_available();  // flash_kernels_avx2.cpp

bool avx512_available() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("fma") && f16c_available();
}

QKV_AVX512 bool vexp_avx512(const float* x, float* y, int n) {
  int i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, exp512(_mm512_loadu_ps(x + i)));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1u);
    _mm512_mask_storeu_ps(y + i, m, exp512(_mm512_maskz_loadu_ps(m, x + i)));
  }
  return true;
}

// ---------------------------------------------------------------------------------------------------
// Forward. Work item = (head, query block of kBrF rows), dynamic schedule; items go head by head, each
// head's long blocks first, so the threads work on one head at a time and share its K and V in the
// cache (12-14 % faster at T = 4096 on 2 threads than head-interleaved items).
//   Sᵀ = K Qᵀ·scale (masked); m' = max(m, max_j Sᵀ); Pᵀ = exp(Sᵀ - m'); alpha = exp(m - m')
//   l = alpha l + Σ_j Pᵀ;  Oᵀ = alpha Oᵀ + Vᵀ Pᵀ;   finally z = Oᵀᵀ / l,  lse = m + log l
// The products run on 48-lane chunks of the block, so a K/V tile is reused by kBrF/48 chunks.
//
// The OpenMP parallel regions live in plain functions (forward_avx512, backward_avx512) that call one
// QKV_AVX512 function per work item, with only pointers and integers in its signature. clang outlines
// a `#pragma omp parallel` region into a function without the enclosing function's target attribute,
// so a region holding AVX-512 vectors does not compile there ("AVX vector return ... without 'avx512f'
// enabled changes the ABI"); GCC accepts either form. noinline: the item must stay a separate
// AVX-512 function whatever the compiler decides (neither compiler inlines a target function into a
// caller without the target, but the contract is stated rather than left to heuristics).

// One work item w of the forward; Qt, Ot: [dh][kBrF], S: [kBcF][kBrF], this thread's scratch.
// Query head h reads key/value head h / (H / n_kv). The queries are rows q0 .. T - 1 (q, z hold T - q0
// rows a head); blocks start at q0, keys in tiles from 0 whatever q0 is, so a row's sums are the same
// whichever rows come with it.
QKV_AVX512_ITEM void forward_item(const float* q, const float* k, const float* v, float* z, float* lse, int H,
                                  int n_kv, int T, int q0, int dh, float scale, long w, float* Qt, float* Ot,
                                  float* S) {
  constexpr int NV = kBrF / 16;
  const int Tq = T - q0, nqb = (Tq + kBrF - 1) / kBrF;
  alignas(64) float m[kBrF], l[kBrF], alpha[kBrF];
  const int h = static_cast<int>(w / nqb), qb = nqb - 1 - static_cast<int>(w % nqb);
  const int i0 = q0 + qb * kBrF, nq = std::min(kBrF, T - i0), kend = i0 + nq;
  const int nch = (nq + kBr - 1) / kBr, nv = nch * kQV;  // 48-lane chunks / vectors with real queries
  const size_t base = static_cast<size_t>(h) * Tq * dh;  // head h's rows q0 .. T - 1
  const size_t kvbase = static_cast<size_t>(h / (H / n_kv)) * T * dh;
  const float *qh = q + base, *kh = k + kvbase, *vh = v + kvbase;
  // Qᵀ[d][r] = scale q[i0 + r][d], zero past T.
  for (int r = 0; r < kBrF; ++r)
    for (int d = 0; d < dh; ++d)
      Qt[static_cast<size_t>(d) * kBrF + r] =
          r < nq ? scale * qh[static_cast<size_t>(i0 - q0 + r) * dh + d] : 0.0f;
  std::memset(Ot, 0, sizeof(float) * dh * kBrF);
  for (int u = 0; u < NV; ++u) {
    _mm512_store_ps(m + 16 * u, _mm512_set1_ps(-std::numeric_limits<float>::infinity()));
    _mm512_store_ps(l + 16 * u, _mm512_setzero_ps());
  }
  for (int j0 = 0; j0 < kend; j0 += kBcF) {
    const int nk = std::min(kBcF, kend - j0);
    for (int c = 0; c < nch; ++c)  // chunk c only sees keys < i0 + 48(c+1)
      lanes_rows<kStore>(kh + static_cast<size_t>(j0) * dh, dh, Qt + kBr * c, kBrF, S + kBr * c, kBrF, dh,
                         std::min(nk, i0 + kBr * (c + 1) - j0));
    const bool diag = j0 + nk - 1 > i0;  // some key of the tile is after some query of the block
    __m512 mx[NV], sum[NV];
    for (int u = 0; u < nv; ++u) mx[u] = _mm512_load_ps(m + 16 * u);
    for (int j = 0; j < nk; ++j) {
      float* s = S + static_cast<size_t>(j) * kBrF;
      if (diag && j0 + j > i0) {  // mask lanes i0 + lane < j0 + j (rows past a chunk's end included)
        const int lim = j0 + j - i0;
        for (int u = 0; u < nv; ++u) {
          const __mmask16 mk =
              _mm512_cmp_ps_mask(lane_index(u), _mm512_set1_ps(static_cast<float>(lim)), _CMP_LT_OQ);
          const __m512 cur = 16 * u + 16 <= lim ? _mm512_setzero_ps() : _mm512_load_ps(s + 16 * u);
          _mm512_store_ps(s + 16 * u, _mm512_mask_blend_ps(
                                          mk, cur, _mm512_set1_ps(-std::numeric_limits<float>::infinity())));
        }
      }
      for (int u = 0; u < nv; ++u) mx[u] = _mm512_maskz_max_ps(0xFFFF, mx[u], _mm512_load_ps(s + 16 * u));
    }
    for (int u = 0; u < nv; ++u) {
      const __m512 a = exp512(_mm512_sub_ps(_mm512_load_ps(m + 16 * u), mx[u]));
      _mm512_store_ps(alpha + 16 * u, a);
      _mm512_store_ps(m + 16 * u, mx[u]);
      sum[u] = _mm512_mul_ps(_mm512_load_ps(l + 16 * u), a);
    }
    for (int j = 0; j < nk; ++j) {
      float* s = S + static_cast<size_t>(j) * kBrF;
      for (int u = 0; u < nv; ++u) {
        const __m512 p = exp512(_mm512_sub_ps(_mm512_load_ps(s + 16 * u), mx[u]));
        _mm512_store_ps(s + 16 * u, p);
        sum[u] = _mm512_add_ps(sum[u], p);
      }
    }
    for (int u = 0; u < nv; ++u) _mm512_store_ps(l + 16 * u, sum[u]);
    for (int c = 0; c < nch; ++c)
      lanes_cols_scaleadd(vh + static_cast<size_t>(j0) * dh, dh, S + kBr * c, Ot + kBr * c, kBrF,
                          std::min(nk, i0 + kBr * (c + 1) - j0), dh, alpha + kBr * c);
  }
  for (int r = 0; r < nq; ++r) {
    float* zr = z + base + static_cast<size_t>(i0 - q0 + r) * dh;
    for (int d = 0; d < dh; ++d) zr[d] = Ot[static_cast<size_t>(d) * kBrF + r] / l[r];
    lse[static_cast<size_t>(h) * Tq + i0 - q0 + r] = m[r] + std::log(l[r]);
  }
}

// Not QKV_AVX512: see above. Called only when avx512_available().
void forward_avx512(const float* q, const float* k, const float* v, float* z, float* lse, int H, int n_kv,
                    int T, int q0, int dh, float scale) {
  const int nqb = (T - q0 + kBrF - 1) / kBrF;
  const long items = static_cast<long>(H) * nqb;
#pragma omp parallel
  {
    // This thread's scratch (grow-only, kept between calls).
    float* const Qt = tls_fwd_qt.get(static_cast<size_t>(dh) * kBrF);
    float* const Ot = tls_fwd_ot.get(static_cast<size_t>(dh) * kBrF);
    float* const S = tls_fwd_s.get(static_cast<size_t>(kBcF) * kBrF);
#pragma omp for schedule(dynamic, 1)
    for (long w = 0; w < items; ++w) forward_item(q, k, v, z, lse, H, n_kv, T, q0, dh, scale, w, Qt, Ot, S);
  }
}

// ---------------------------------------------------------------------------------------------------
// Backward. Per head:
//  1. pack: scale·Qᵀ and dzᵀ per query block [dh][kBr]; scale·q, dz, K, V as [Tp][dhp] zero-padded
//     rows; lse (+inf past T, so P = 0 there) and D_i = dz_i·z_i.
//  2. for each key block, for each query block at or below the diagonal:
//       Sᵀ = K Qᵀ, dPᵀ = V dzᵀ, Pᵀ = exp(Sᵀ - lse) (masked), dSᵀ = Pᵀ ∘ (dPᵀ - D)
//       dV += Pᵀ dz, dK += dSᵀ (scale q) into block-local buffers; dQ += dS K into a [Tp][dhp] buffer.
//  3. dq = scale · dQ.
// Heads are dealt out whole to threads (no synchronisation); the H mod threads heads left over are
// shared: key blocks split between threads with a dQ buffer each, summed at the end.
// Extra memory per thread: 6·Tp·dhp (packs) + Tp·dhp (dQ) + small tiles.

struct BwdShape {
  int T, dh, nqb, nkb, Tp, dhp;
  size_t blk, pad;
  explicit BwdShape(int T_, int dh_)
      : T(T_),
        dh(dh_),
        nqb((T_ + kBr - 1) / kBr),
        nkb((T_ + kBcB - 1) / kBcB),
        Tp(nqb * kBr),
        dhp((dh_ + 15) / 16 * 16),
        blk(static_cast<size_t>(dh_) * kBr),
        pad(static_cast<size_t>(Tp) * dhp) {}
};

struct BwdPack {
  Buf Qt, dzT, qs, dzp, kp, vp, lsep, Dp;
  explicit BwdPack(const BwdShape& s)
      : Qt(s.nqb * s.blk),
        dzT(s.nqb * s.blk),
        qs(s.pad),
        dzp(s.pad),
        kp(s.pad),
        vp(s.pad),
        lsep(s.Tp),
        Dp(s.Tp) {}
};

struct BwdTiles {
  Buf dKl, dVl, P, dS;
  explicit BwdTiles(const BwdShape& s)
      : dKl(static_cast<size_t>(kBcB) * s.dhp),
        dVl(static_cast<size_t>(kBcB) * s.dhp),
        P(static_cast<size_t>(kBcB) * kBr),
        dS(static_cast<size_t>(kBcB) * kBr) {}
};

// Packs query block qb of one head (pointers already offset to the head).
QKV_AVX512_ITEM void bwd_pack_block(const BwdShape& sh, const BwdPack& pk, int qb, const float* q,
                                    const float* k, const float* v, const float* z, const float* lse,
                                    const float* dz, float scale) {
  const int dh = sh.dh, dhp = sh.dhp;
  for (int r = 0; r < kBr; ++r) {
    const int i = qb * kBr + r;
    const bool in = i < sh.T;
    const size_t src = static_cast<size_t>(i) * dh, dst = static_cast<size_t>(i) * dhp;
    float D = 0.0f;
    for (int d = 0; d < dhp; ++d) {
      const bool ok = in && d < dh;
      const float qv = ok ? scale * q[src + d] : 0.0f, dzv = ok ? dz[src + d] : 0.0f;
      pk.qs.p[dst + d] = qv;
      pk.dzp.p[dst + d] = dzv;
      pk.kp.p[dst + d] = ok ? k[src + d] : 0.0f;
      pk.vp.p[dst + d] = ok ? v[src + d] : 0.0f;
      if (d < dh) {
        pk.Qt.p[qb * sh.blk + static_cast<size_t>(d) * kBr + r] = qv;
        pk.dzT.p[qb * sh.blk + static_cast<size_t>(d) * kBr + r] = dzv;
      }
      if (ok) D += dzv * z[src + d];
    }
    pk.lsep.p[i] = in ? lse[i] : std::numeric_limits<float>::infinity();
    pk.Dp.p[i] = D;
  }
}

// Key block kb of one head: accumulates into dQ [Tp][dhp], writes dk, dv rows (offset to the head).
QKV_AVX512_ITEM void bwd_key_block(const BwdShape& sh, const BwdPack& pk, const BwdTiles& tl, int kb,
                                   float* dQ, float* dk, float* dv) {
  static_assert(kBcB == kBr && kBr % 24 == 0, "square blocks, rows a multiple of every micro-kernel height");
  const int dh = sh.dh, dhp = sh.dhp;
  const int j0 = kb * kBcB, nk = std::min(kBcB, sh.T - j0);
  float *P = tl.P.p, *dS = tl.dS.p;
  std::memset(tl.dKl.p, 0, sizeof(float) * kBcB * dhp);
  std::memset(tl.dVl.p, 0, sizeof(float) * kBcB * dhp);
  const float *kblk = pk.kp.p + static_cast<size_t>(j0) * dhp,
              *vblk = pk.vp.p + static_cast<size_t>(j0) * dhp;
  for (int qb = j0 / kBr; qb < sh.nqb; ++qb) {
    const int i0 = qb * kBr;
    lanes_rows<kStore>(kblk, dhp, pk.Qt.p + qb * sh.blk, kBr, P, kBr, dh, kBcB);    // Sᵀ
    lanes_rows<kStore>(vblk, dhp, pk.dzT.p + qb * sh.blk, kBr, dS, kBr, dh, kBcB);  // dPᵀ
    __m512 L[kQV], Dv[kQV], idx[kQV];
    for (int u = 0; u < kQV; ++u) {
      L[u] = _mm512_loadu_ps(pk.lsep.p + i0 + 16 * u);
      Dv[u] = _mm512_loadu_ps(pk.Dp.p + i0 + 16 * u);
      idx[u] = lane_index(u);
    }
    for (int j = 0; j < kBcB; ++j) {
      float *p = P + static_cast<size_t>(j) * kBr, *ds = dS + static_cast<size_t>(j) * kBr;
      const __m512 lim = _mm512_set1_ps(static_cast<float>(j0 + j - i0));
      for (int u = 0; u < kQV; ++u) {
        // valid iff key j0+j < T and j0+j <= i0+lane
        const __mmask16 ok = j < nk ? _mm512_cmp_ps_mask(idx[u], lim, _CMP_GE_OQ) : __mmask16(0);
        const __m512 pv = _mm512_maskz_mov_ps(ok, exp512(_mm512_sub_ps(_mm512_load_ps(p + 16 * u), L[u])));
        _mm512_store_ps(p + 16 * u, pv);
        _mm512_store_ps(ds + 16 * u, _mm512_mul_ps(pv, _mm512_sub_ps(_mm512_load_ps(ds + 16 * u), Dv[u])));
      }
    }
    d_lanes_add<true>(P, kBr, pk.dzp.p + static_cast<size_t>(i0) * dhp, dhp, tl.dVl.p, dhp, kBr, kBcB, dhp);
    d_lanes_add<true>(dS, kBr, pk.qs.p + static_cast<size_t>(i0) * dhp, dhp, tl.dKl.p, dhp, kBr, kBcB, dhp);
    d_lanes_add<false>(dS, kBr, kblk, dhp, dQ + static_cast<size_t>(i0) * dhp, dhp, nk, kBr, dhp);
  }
  for (int j = 0; j < nk; ++j) {
    const size_t dst = static_cast<size_t>(j0 + j) * dh;
    std::memcpy(dk + dst, tl.dKl.p + static_cast<size_t>(j) * dhp, sizeof(float) * dh);
    std::memcpy(dv + dst, tl.dVl.p + static_cast<size_t>(j) * dhp, sizeof(float) * dh);
  }
}

// Head h whole, on one thread (pointers offset to the head): pack, every key block into this thread's
// dQ [Tp][dhp], then dq = scale · dQ.
QKV_AVX512_ITEM void bwd_head(const BwdShape& sh, const BwdPack& pk, const BwdTiles& tl, const float* q,
                              const float* k, const float* v, const float* z, const float* lse,
                              const float* dz, float* dq, float* dk, float* dv, float* dQ, float scale) {
  for (int qb = 0; qb < sh.nqb; ++qb) bwd_pack_block(sh, pk, qb, q, k, v, z, lse, dz, scale);
  std::memset(dQ, 0, sizeof(float) * sh.pad);
  for (int kb = 0; kb < sh.nkb; ++kb) bwd_key_block(sh, pk, tl, kb, dQ, dk, dv);
  for (int i = 0; i < sh.T; ++i)
    for (int d = 0; d < sh.dh; ++d)
      dq[static_cast<size_t>(i) * sh.dh + d] = scale * dQ[static_cast<size_t>(i) * sh.dhp + d];
}

// Row i of a shared head's dq (offset to the head): scale · the sum of the nt threads' dQ rows.
QKV_AVX512_ITEM void bwd_sum_dq_row(const BwdShape& sh, float* const* dQ_all, int nt, int i, float* dq,
                                    float scale) {
  for (int d = 0; d < sh.dh; ++d) {
    float s = 0.0f;
    for (int t = 0; t < nt; ++t) s += dQ_all[t][static_cast<size_t>(i) * sh.dhp + d];
    dq[static_cast<size_t>(i) * sh.dh + d] = scale * s;
  }
}

// Not QKV_AVX512 (see the forward): the parallel regions only call the AVX-512 functions above.
void backward_avx512(const float* q, const float* k, const float* v, const float* z, const float* lse,
                     const float* dz, float* dq, float* dk, float* dv, int H, int T, int dh, float scale) {
  const BwdShape sh(T, dh);
  const size_t hs = static_cast<size_t>(T) * dh;  // one head's [T, dh]
  std::vector<float*> dQ_all(omp_get_max_threads(), nullptr);
  BwdPack* shared = nullptr;
#pragma omp parallel
  {
    const int tid = omp_get_thread_num(), nt = omp_get_num_threads();
    const int solo = H / nt * nt;  // heads [0, solo) go whole to threads
    Buf dQ(sh.pad);
    BwdTiles tl(sh);
    dQ_all[tid] = dQ.p;
    if (solo > 0) {
      BwdPack own(sh);
      for (int h = tid; h < solo; h += nt) {
        const size_t base = h * hs;
        bwd_head(sh, own, tl, q + base, k + base, v + base, z + base, lse + static_cast<size_t>(h) * T,
                 dz + base, dq + base, dk + base, dv + base, dQ.p, scale);
      }
    }
    if (solo < H) {
#pragma omp single
      shared = new BwdPack(sh);
      // implicit barrier: everyone sees `shared` and dQ_all
      for (int h = solo; h < H; ++h) {
        const size_t base = h * hs;
        std::memset(dQ.p, 0, sizeof(float) * sh.pad);
#pragma omp for schedule(static)
        for (int qb = 0; qb < sh.nqb; ++qb)
          bwd_pack_block(sh, *shared, qb, q + base, k + base, v + base, z + base,
                         lse + static_cast<size_t>(h) * T, dz + base, scale);
        // Round-robin, not dynamic: each thread sums the dq of its own key blocks, added in thread order
        // below, so which thread takes which block must not depend on timing (dynamic gave a dq that
        // differed in its last bits from run to run on a loaded machine: flash_test's GQA-equals-MHA check).
#pragma omp for schedule(static, 1)
        for (int kb = 0; kb < sh.nkb; ++kb) bwd_key_block(sh, *shared, tl, kb, dQ.p, dk + base, dv + base);
#pragma omp for schedule(static)
        for (int i = 0; i < T; ++i) bwd_sum_dq_row(sh, dQ_all.data(), nt, i, dq + base, scale);
      }
    }
  }
  delete shared;
}

}  // namespace qkv::flash_detail

#else  // not x86-64 with GCC/Clang: no AVX-512 path; flash.cpp falls back to the portable one.

namespace qkv::flash_detail {
bool avx512_available() {
  return false;
}
bool vexp_avx512(const float*, float*, int) {
  return false;
}
void forward_avx512(const float*, const float*, const float*, float*, float*, int, int, int, int, int, float) {}
void backward_avx512(const float*, const float*, const float*, const float*, const float*, const float*,
                     float*, float*, float*, int, int, int, float) {}
}  // namespace qkv::flash_detail

#endif
