// The fused causal attention kernels (flash.hpp) written once over a small vector interface, for the
// ISAs without a hand-written file: AVX2 + FMA (flash_kernels_avx2.cpp, 8 lanes) and aarch64 NEON
// (flash_kernels_neon.cpp, 4 lanes). The AVX-512 kernels (flash_kernels.cpp) follow the same design.
//
// The including file defines, before including this header:
//   QKV_SIMD       the target attribute of every function here that uses vectors (may be empty)
//   QKV_SIMD_ITEM  QKV_SIMD plus noinline, for the work items called from OpenMP regions
//   struct Isa     (in namespace qkv::flash_detail::{anonymous}) the vector type V, lanes W, the micro-kernel shapes (kQV, kRB, kAcc, kDNV) and the
//                  ops load, store, set1, zero, fmadd, add, sub, mul, max, exp, lane_index,
//                  mask_lt_inf (lanes where idx < lim become -inf) and keep_ge (lanes where idx >= lim
//                  keep x, the rest 0).
// Everything lands in an anonymous namespace: each ISA's copy is private to its translation unit.
//
// Layout (as in flash_kernels.cpp): a tile of scores is kept transposed, Sᵀ[key j][query i], queries in
// the lanes, so row statistics are lane-wise and all five products are register-blocked rank-1 updates:
//   Sᵀ  = K Qᵀ, dPᵀ = V dzᵀ   rows = keys, lanes = queries     (mk_rows, kRB rows × kQV vectors)
//   Oᵀ += Vᵀ Pᵀ               rows = d,    lanes = queries     (mk_cols, kRB rows × kQV vectors)
//   dV += Pᵀ dz, dK += dSᵀ q   rows = keys, lanes = d           (mk_rows, kAcc accumulators)
//   dQ += dS K                 rows = queries, lanes = d        (mk_cols, kAcc accumulators)
#pragma once

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <new>
#include <vector>

namespace qkv::flash_detail {
namespace {

using std::size_t;
using V = Isa::V;
constexpr int W = Isa::W;
constexpr int kQV = Isa::kQV;    // vectors per query-lane micro-kernel
constexpr int kRB = Isa::kRB;    // rows per query-lane micro-kernel
constexpr int kVL = W * kQV;     // query lanes per micro-kernel call
constexpr int kAcc = Isa::kAcc;  // accumulators of the d-lane micro-kernels (rows × vectors)
constexpr int kDNV = Isa::kDNV;  // at most this many vectors across d per d-lane micro-kernel
constexpr int kBrF = 144;        // queries per block in the forward
constexpr int kBcF = 48;         // keys per tile in the forward
constexpr int kBr = 48;          // queries (and keys) per block in the backward
constexpr float kInf = std::numeric_limits<float>::infinity();
static_assert(kBrF % kVL == 0 && kBr % kVL == 0 && kBr % W == 0, "blocks are whole micro-kernel chunks");

template <int NV>
constexpr bool rows_divide() {
  if constexpr (NV == 0)
    return true;
  else
    return kBr % (kAcc / NV) == 0 && kAcc % NV == 0 && rows_divide<NV - 1>();
}
static_assert(rows_divide<kDNV>(), "the backward's blocks are a multiple of every d-lane micro-kernel height");

struct Buf {
  float* p = nullptr;
  explicit Buf(size_t n)
      : p(static_cast<float*>(::operator new(std::max<size_t>(n, 1) * sizeof(float), std::align_val_t(64)))) {
  }
  ~Buf() { ::operator delete(p, std::align_val_t(64)); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
};

// Grow-only per-thread scratch (see flash_kernels.cpp): steady-state forward calls allocate nothing.
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
thread_local Scratch tls_qt, tls_ot, tls_s;

enum Mode { kStore, kAdd, kScaleAdd };

// C[r][W·v ..] (=|+=) Σ_{k<K} A[r*lda + k] · B[k*ldb + W·v ..]   (A row-contiguous)
template <int R, int NV, Mode M>
QKV_SIMD inline void mk_rows(const float* A, size_t lda, const float* B, size_t ldb, float* C, size_t ldc,
                             int K) {
  V acc[R][NV];
#pragma GCC unroll 32
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) acc[r][v] = M == kStore ? Isa::zero() : Isa::load(C + r * ldc + W * v);
  for (int k = 0; k < K; ++k) {
    V b[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) b[v] = Isa::load(B + k * ldb + W * v);
#pragma GCC unroll 32
    for (int r = 0; r < R; ++r) {
      const V a = Isa::set1(A[r * lda + k]);
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[r][v] = Isa::fmadd(a, b[v], acc[r][v]);
    }
  }
#pragma GCC unroll 32
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) Isa::store(C + r * ldc + W * v, acc[r][v]);
}

// C[r][W·v ..] = (alpha ·) C[r][..] + Σ_{k<K} A[r + k*lda] · B[k*ldb + W·v ..]   (A column-contiguous)
template <int R, int NV, Mode M>
QKV_SIMD inline void mk_cols(const float* A, size_t lda, const float* B, size_t ldb, float* C, size_t ldc,
                             int K, const float* alpha) {
  V acc[R][NV];
#pragma GCC unroll 32
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
      acc[r][v] = M == kStore ? Isa::zero() : Isa::load(C + r * ldc + W * v);
      if (M == kScaleAdd) acc[r][v] = Isa::mul(acc[r][v], Isa::load(alpha + W * v));
    }
  for (int k = 0; k < K; ++k) {
    V b[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) b[v] = Isa::load(B + k * ldb + W * v);
#pragma GCC unroll 32
    for (int r = 0; r < R; ++r) {
      const V a = Isa::set1(A[r + k * lda]);
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[r][v] = Isa::fmadd(a, b[v], acc[r][v]);
    }
  }
#pragma GCC unroll 32
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) Isa::store(C + r * ldc + W * v, acc[r][v]);
}

// The last rows (< R) of a row-blocked product: mk_rows / mk_cols with exactly n rows.
template <int R, Mode M>
QKV_SIMD void tail_rows(int n, const float* A, size_t lda, const float* B, size_t ldb, float* C, size_t ldc,
                        int K) {
  if constexpr (R > 0) {
    if (n == R)
      mk_rows<R, kQV, M>(A, lda, B, ldb, C, ldc, K);
    else
      tail_rows<R - 1, M>(n, A, lda, B, ldb, C, ldc, K);
  }
}
template <int R>
QKV_SIMD void tail_cols_scaleadd(int n, const float* A, size_t lda, const float* B, size_t ldb, float* C,
                                 size_t ldc, int K, const float* alpha) {
  if constexpr (R > 0) {
    if (n == R)
      mk_cols<R, kQV, kScaleAdd>(A, lda, B, ldb, C, ldc, K, alpha);
    else
      tail_cols_scaleadd<R - 1>(n, A, lda, B, ldb, C, ldc, K, alpha);
  }
}

// C[rows][kVL lanes] (=|+=) A·B, A row-contiguous, any number of rows.
template <Mode M>
QKV_SIMD void lanes_rows(const float* A, size_t lda, const float* B, size_t ldb, float* C, size_t ldc, int K,
                         int rows) {
  int r = 0;
  for (; r + kRB <= rows; r += kRB) mk_rows<kRB, kQV, M>(A + r * lda, lda, B, ldb, C + r * ldc, ldc, K);
  if (r < rows) tail_rows<kRB - 1, M>(rows - r, A + r * lda, lda, B, ldb, C + r * ldc, ldc, K);
}

// Oᵀ[d][kVL lanes] = alpha · Oᵀ[d][..] + Σ_{j<K} V[j*ldv + d] Pᵀ[j][..], for d < dh.
QKV_SIMD void lanes_cols_scaleadd(const float* Vm, size_t ldv, const float* P, float* O, size_t ld, int K,
                                  int dh, const float* alpha) {
  int r = 0;
  for (; r + kRB <= dh; r += kRB) mk_cols<kRB, kQV, kScaleAdd>(Vm + r, ldv, P, ld, O + r * ld, ld, K, alpha);
  if (r < dh) tail_cols_scaleadd<kRB - 1>(dh - r, Vm + r, ldv, P, ld, O + r * ld, ld, K, alpha);
}

// C[rows][W·NV) += A·B with lanes over d, rows a multiple of R = kAcc / NV.
template <bool kRowsA, int NV>
QKV_SIMD void d_lanes_chunk(const float* A, size_t lda, const float* B, size_t ldb, float* C, size_t ldc,
                            int K, int rows) {
  constexpr int R = kAcc / NV;
  for (int r = 0; r < rows; r += R) {
    if constexpr (kRowsA)
      mk_rows<R, NV, kAdd>(A + r * lda, lda, B, ldb, C + r * ldc, ldc, K);
    else
      mk_cols<R, NV, kAdd>(A + r, lda, B, ldb, C + r * ldc, ldc, K, nullptr);
  }
}
template <bool kRowsA, int NV>
QKV_SIMD void d_lanes_pick(int nv, const float* A, size_t lda, const float* B, size_t ldb, float* C,
                           size_t ldc, int K, int rows) {
  if constexpr (NV > 0) {
    if (nv == NV)
      d_lanes_chunk<kRowsA, NV>(A, lda, B, ldb, C, ldc, K, rows);
    else
      d_lanes_pick<kRowsA, NV - 1>(nv, A, lda, B, ldb, C, ldc, K, rows);
  }
}

// C[rows][dhp] += A·B with lanes over d (dhp a multiple of W), rows = kBr; columns in chunks of up to
// kDNV vectors.
template <bool kRowsA>
QKV_SIMD void d_lanes_add(const float* A, size_t lda, const float* B, size_t ldb, float* C, size_t ldc, int K,
                          int rows, int dhp) {
  for (int c = 0; c < dhp;) {
    const int nv = std::min(kDNV, (dhp - c) / W);
    d_lanes_pick<kRowsA, kDNV>(nv, A, lda, B + c, ldb, C + c, ldc, K, rows);
    c += W * nv;
  }
}

// ---------------------------------------------------------------------------------------------------
// Forward. Work item = (head, query block of kBrF rows); items go head by head, each head's long blocks
// first, so the threads share one head's K and V in the cache (see flash_kernels.cpp). For each key tile:
//   Sᵀ = K Qᵀ·scale (masked); m' = max(m, max_j Sᵀ); Pᵀ = exp(Sᵀ - m'); alpha = exp(m - m')
//   l = alpha l + Σ_j Pᵀ;  Oᵀ = alpha Oᵀ + Vᵀ Pᵀ;   finally z = Oᵀᵀ / l,  lse = m + log l
// Query head h reads key/value head h / (H / n_kv). Products run on kVL-lane chunks of the block; a
// chunk only sees the keys up to its last query (causal tiles and chunk tails skipped). The queries are
// rows q0 .. T - 1 (q, z hold T - q0 rows a head); blocks start at q0, key tiles at 0 whatever q0 is.
QKV_SIMD_ITEM void forward_item(const float* q, const float* k, const float* v, float* z, float* lse, int H,
                                int n_kv, int T, int q0, int dh, float scale, long w, float* Qt, float* Ot,
                                float* S) {
  const int Tq = T - q0, nqb = (Tq + kBrF - 1) / kBrF;
  alignas(64) float m[kBrF], l[kBrF], alpha[kBrF];
  const int h = static_cast<int>(w / nqb), qb = nqb - 1 - static_cast<int>(w % nqb);
  const int i0 = q0 + qb * kBrF, nq = std::min(kBrF, T - i0), kend = i0 + nq;
  const int nch = (nq + kVL - 1) / kVL, nv = nch * kQV;  // chunks / vectors with real queries
  const size_t base = static_cast<size_t>(h) * Tq * dh;  // head h's rows q0 .. T - 1
  const size_t kvbase = static_cast<size_t>(h / (H / n_kv)) * T * dh;
  const float *qh = q + base, *kh = k + kvbase, *vh = v + kvbase;
  for (int r = 0; r < kBrF; ++r)  // Qᵀ[d][r] = scale q[i0 + r][d], zero past T
    for (int d = 0; d < dh; ++d)
      Qt[static_cast<size_t>(d) * kBrF + r] = r < nq ? scale * qh[static_cast<size_t>(i0 - q0 + r) * dh + d] : 0.0f;
  std::memset(Ot, 0, sizeof(float) * dh * kBrF);
  for (int r = 0; r < kBrF; ++r) m[r] = -kInf, l[r] = 0.0f;
  for (int j0 = 0; j0 < kend; j0 += kBcF) {
    const int nk = std::min(kBcF, kend - j0);
    for (int c = 0; c < nch; ++c)
      lanes_rows<kStore>(kh + static_cast<size_t>(j0) * dh, dh, Qt + kVL * c, kBrF, S + kVL * c, kBrF, dh,
                         std::min(nk, i0 + kVL * (c + 1) - j0));
    const bool diag = j0 + nk - 1 > i0;  // some key of the tile is after some query of the block
    for (int u = 0; u < nv; ++u) {
      // Lanes i0 + lane < j0 + j are masked (rows past a chunk's end included: never computed).
      const V idx = Isa::lane_index(W * u);
      V mx = Isa::load(m + W * u);
      for (int j = 0; j < nk; ++j) {
        float* s = S + static_cast<size_t>(j) * kBrF + W * u;
        if (diag && j0 + j > i0) {
          const int lim = j0 + j - i0;
          const V cur = W * u + W <= lim ? Isa::zero() : Isa::load(s);
          Isa::store(s, Isa::mask_lt_inf(idx, static_cast<float>(lim), cur));
        }
        mx = Isa::max(mx, Isa::load(s));
      }
      const V a = Isa::exp(Isa::sub(Isa::load(m + W * u), mx));
      Isa::store(alpha + W * u, a);
      Isa::store(m + W * u, mx);
      V sum = Isa::mul(Isa::load(l + W * u), a);
      for (int j = 0; j < nk; ++j) {
        float* s = S + static_cast<size_t>(j) * kBrF + W * u;
        const V p = Isa::exp(Isa::sub(Isa::load(s), mx));
        Isa::store(s, p);
        sum = Isa::add(sum, p);
      }
      Isa::store(l + W * u, sum);
    }
    for (int c = 0; c < nch; ++c)
      lanes_cols_scaleadd(vh + static_cast<size_t>(j0) * dh, dh, S + kVL * c, Ot + kVL * c, kBrF,
                          std::min(nk, i0 + kVL * (c + 1) - j0), dh, alpha + kVL * c);
  }
  for (int r = 0; r < nq; ++r) {
    float* zr = z + base + static_cast<size_t>(i0 - q0 + r) * dh;
    for (int d = 0; d < dh; ++d) zr[d] = Ot[static_cast<size_t>(d) * kBrF + r] / l[r];
    lse[static_cast<size_t>(h) * Tq + i0 - q0 + r] = m[r] + std::log(l[r]);
  }
}

// Not QKV_SIMD: the OpenMP region lives in a plain function and calls one vector function per item
// (clang outlines a parallel region without the enclosing function's target attribute).
void simd_forward(const float* q, const float* k, const float* v, float* z, float* lse, int H, int n_kv, int T,
                  int q0, int dh, float scale) {
  const int nqb = (T - q0 + kBrF - 1) / kBrF;
  const long items = static_cast<long>(H) * nqb;
#pragma omp parallel
  {
    float* const Qt = tls_qt.get(static_cast<size_t>(dh) * kBrF);
    float* const Ot = tls_ot.get(static_cast<size_t>(dh) * kBrF);
    float* const S = tls_s.get(static_cast<size_t>(kBcF) * kBrF);
#pragma omp for schedule(dynamic, 1)
    for (long w = 0; w < items; ++w) forward_item(q, k, v, z, lse, H, n_kv, T, q0, dh, scale, w, Qt, Ot, S);
  }
}

// ---------------------------------------------------------------------------------------------------
// Backward, as in flash_kernels.cpp. Per head:
//  1. pack: scale·Qᵀ and dzᵀ per query block [dh][kBr]; scale·q, dz, K, V as [Tp][dhp] zero-padded
//     rows; lse (+inf past T, so P = 0 there) and D_i = dz_i·z_i.
//  2. for each key block, for each query block at or below the diagonal:
//       Sᵀ = K Qᵀ, dPᵀ = V dzᵀ, Pᵀ = exp(Sᵀ - lse) (masked), dSᵀ = Pᵀ ∘ (dPᵀ - D)
//       dV += Pᵀ dz, dK += dSᵀ (scale q) into block-local buffers; dQ += dS K into a [Tp][dhp] buffer.
//  3. dq = scale · dQ.
// Heads go whole to threads; the H mod threads left over are shared by key blocks, a dQ buffer each.

struct BwdShape {
  int T, dh, nqb, Tp, dhp;
  size_t blk, pad;
  explicit BwdShape(int T_, int dh_)
      : T(T_),
        dh(dh_),
        nqb((T_ + kBr - 1) / kBr),
        Tp(nqb * kBr),
        dhp((dh_ + W - 1) / W * W),
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
      : dKl(static_cast<size_t>(kBr) * s.dhp),
        dVl(static_cast<size_t>(kBr) * s.dhp),
        P(static_cast<size_t>(kBr) * kBr),
        dS(static_cast<size_t>(kBr) * kBr) {}
};

QKV_SIMD_ITEM void bwd_pack_block(const BwdShape& sh, const BwdPack& pk, int qb, const float* q,
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
    pk.lsep.p[i] = in ? lse[i] : kInf;
    pk.Dp.p[i] = D;
  }
}

QKV_SIMD_ITEM void bwd_key_block(const BwdShape& sh, const BwdPack& pk, const BwdTiles& tl, int kb, float* dQ,
                                 float* dk, float* dv) {
  constexpr int NQ = kBr / W;  // vectors across a block's queries
  const int dh = sh.dh, dhp = sh.dhp;
  const int j0 = kb * kBr, nk = std::min(kBr, sh.T - j0);
  float *P = tl.P.p, *dS = tl.dS.p;
  std::memset(tl.dKl.p, 0, sizeof(float) * kBr * dhp);
  std::memset(tl.dVl.p, 0, sizeof(float) * kBr * dhp);
  const float *kblk = pk.kp.p + static_cast<size_t>(j0) * dhp, *vblk = pk.vp.p + static_cast<size_t>(j0) * dhp;
  for (int qb = kb; qb < sh.nqb; ++qb) {
    const int i0 = qb * kBr;
    for (int c = 0; c < kBr / kVL; ++c) {
      lanes_rows<kStore>(kblk, dhp, pk.Qt.p + qb * sh.blk + kVL * c, kBr, P + kVL * c, kBr, dh, kBr);    // Sᵀ
      lanes_rows<kStore>(vblk, dhp, pk.dzT.p + qb * sh.blk + kVL * c, kBr, dS + kVL * c, kBr, dh, kBr);  // dPᵀ
    }
    for (int u = 0; u < NQ; ++u) {
      const V L = Isa::load(pk.lsep.p + i0 + W * u), Dv = Isa::load(pk.Dp.p + i0 + W * u);
      const V idx = Isa::lane_index(W * u);
      for (int j = 0; j < kBr; ++j) {
        float *p = P + static_cast<size_t>(j) * kBr + W * u, *ds = dS + static_cast<size_t>(j) * kBr + W * u;
        // valid iff key j0+j < T and j0+j <= i0+lane
        const float lim = j < nk ? static_cast<float>(j0 + j - i0) : kInf;
        const V pv = Isa::keep_ge(idx, lim, Isa::exp(Isa::sub(Isa::load(p), L)));
        Isa::store(p, pv);
        Isa::store(ds, Isa::mul(pv, Isa::sub(Isa::load(ds), Dv)));
      }
    }
    d_lanes_add<true>(P, kBr, pk.dzp.p + static_cast<size_t>(i0) * dhp, dhp, tl.dVl.p, dhp, kBr, kBr, dhp);
    d_lanes_add<true>(dS, kBr, pk.qs.p + static_cast<size_t>(i0) * dhp, dhp, tl.dKl.p, dhp, kBr, kBr, dhp);
    d_lanes_add<false>(dS, kBr, kblk, dhp, dQ + static_cast<size_t>(i0) * dhp, dhp, nk, kBr, dhp);
  }
  for (int j = 0; j < nk; ++j) {
    const size_t dst = static_cast<size_t>(j0 + j) * dh;
    std::memcpy(dk + dst, tl.dKl.p + static_cast<size_t>(j) * dhp, sizeof(float) * dh);
    std::memcpy(dv + dst, tl.dVl.p + static_cast<size_t>(j) * dhp, sizeof(float) * dh);
  }
}

QKV_SIMD_ITEM void bwd_head(const BwdShape& sh, const BwdPack& pk, const BwdTiles& tl, const float* q,
                            const float* k, const float* v, const float* z, const float* lse, const float* dz,
                            float* dq, float* dk, float* dv, float* dQ, float scale) {
  for (int qb = 0; qb < sh.nqb; ++qb) bwd_pack_block(sh, pk, qb, q, k, v, z, lse, dz, scale);
  std::memset(dQ, 0, sizeof(float) * sh.pad);
  for (int kb = 0; kb < sh.nqb; ++kb) bwd_key_block(sh, pk, tl, kb, dQ, dk, dv);
  for (int i = 0; i < sh.T; ++i)
    for (int d = 0; d < sh.dh; ++d)
      dq[static_cast<size_t>(i) * sh.dh + d] = scale * dQ[static_cast<size_t>(i) * sh.dhp + d];
}

QKV_SIMD_ITEM void bwd_sum_dq_row(const BwdShape& sh, float* const* dQ_all, int nt, int i, float* dq,
                                  float scale) {
  for (int d = 0; d < sh.dh; ++d) {
    float s = 0.0f;
    for (int t = 0; t < nt; ++t) s += dQ_all[t][static_cast<size_t>(i) * sh.dhp + d];
    dq[static_cast<size_t>(i) * sh.dh + d] = scale * s;
  }
}

// Not QKV_SIMD (see simd_forward).
void simd_backward(const float* q, const float* k, const float* v, const float* z, const float* lse,
                   const float* dz, float* dq, float* dk, float* dv, int H, int T, int dh, float scale) {
  const BwdShape sh(T, dh);
  const size_t hs = static_cast<size_t>(T) * dh;
  std::vector<float*> dQ_all(omp_get_max_threads(), nullptr);
  BwdPack* shared = nullptr;
#pragma omp parallel
  {
    const int tid = omp_get_thread_num(), nt = omp_get_num_threads();
    const int solo = H / nt * nt;
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
      for (int h = solo; h < H; ++h) {
        const size_t base = h * hs;
        std::memset(dQ.p, 0, sizeof(float) * sh.pad);
#pragma omp for schedule(static)
        for (int qb = 0; qb < sh.nqb; ++qb)
          bwd_pack_block(sh, *shared, qb, q + base, k + base, v + base, z + base,
                         lse + static_cast<size_t>(h) * T, dz + base, scale);
        // Round-robin, not dynamic: each thread sums the dq of its own key blocks, and those partial sums
        // are added in thread order below, so which thread takes which block must not depend on timing
        // (dynamic gave a dq that differed in its last bits from run to run on a loaded machine).
#pragma omp for schedule(static, 1)
        for (int kb = 0; kb < sh.nqb; ++kb) bwd_key_block(sh, *shared, tl, kb, dQ.p, dk + base, dv + base);
#pragma omp for schedule(static)
        for (int i = 0; i < T; ++i) bwd_sum_dq_row(sh, dQ_all.data(), nt, i, dq + base, scale);
      }
    }
  }
  delete shared;
}

QKV_SIMD bool simd_vexp(const float* x, float* y, int n) {
  int i = 0;
  for (; i + W <= n; i += W) Isa::store(y + i, Isa::exp(Isa::load(x + i)));
  if (i < n) {
    alignas(64) float t[W] = {};
    std::memcpy(t, x + i, sizeof(float) * (n - i));
    Isa::store(t, Isa::exp(Isa::load(t)));
    std::memcpy(y + i, t, sizeof(float) * (n - i));
  }
  return true;
}

}  // namespace
}  // namespace qkv::flash_detail
