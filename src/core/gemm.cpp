#include "qkv/gemm.hpp"

#include "qkv/flash.hpp"

#include <blis.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

namespace qkv {
namespace {

std::once_flag g_once;
int g_threads = 1;

#if defined(__x86_64__) || defined(__i386__)
bool cpu_has_skx_subset() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
}
bool cpu_is_amd() {
  __builtin_cpu_init();
  return __builtin_cpu_is("amd");
}
// AMD family 19h (Zen 3, Zen 4): Zen 4's AVX-512 runs each 512-bit operation as two 256-bit halves,
// so it has no more FMA throughput than AVX2, and its single 512-bit shuffle unit slows skx's kernel.
bool cpu_is_amd_family_19h() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!cpu_is_amd() || !__get_cpuid(1, &a, &b, &c, &d)) return false;
  return ((a >> 8) & 0xf) + ((a >> 20) & 0xff) == 0x19;
}
#else
bool cpu_has_skx_subset() { return false; }
bool cpu_is_amd() { return false; }
bool cpu_is_amd_family_19h() { return false; }
#endif

// BLIS's sub-configuration for the ISA qkv's own kernels run (flash_path(): QKV_ISA), so that QKV_ISA
// forces BLIS's kernel too: avx512 -> skx (BLIS would pick haswell on CPUs it does not know, e.g. Zen 4/5)
// except on Zen 4, where zen3's AVX2 kernel is faster (a 512-token prefill of the 246 M Llama GGUF, 2
// threads, QKV_ISA=avx512: bf16 1318 -> 1124 ms, q4_K 1464 -> 1165, q4_0 1426 -> 1092; docs/performance.md),
// avx2 -> zen3 on AMD, haswell elsewhere (the same 6 × 16 AVX2 micro-kernel; zen3's blocksizes suit AMD's
// caches), portable -> generic (BLIS's reference kernels, no vector ISA). -1: leave BLIS's own choice
// (neon: BLIS picks its ARM config). A BLIS_ARCH_TYPE the user set wins over all of this.
int blis_arch_for(FlashPath p) {
  switch (p) {
    case FlashPath::Avx512:
      if (cpu_is_amd_family_19h()) return int(BLIS_ARCH_ZEN3);
      return cpu_has_skx_subset() ? int(BLIS_ARCH_SKX) : -1;
    case FlashPath::Avx2:
      return cpu_is_amd() ? int(BLIS_ARCH_ZEN3) : int(BLIS_ARCH_HASWELL);
    case FlashPath::Portable:
      return int(BLIS_ARCH_GENERIC);
    default:
      return -1;
  }
}

trans_t trans(bool t) { return t ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE; }

// Inside any OpenMP region (e.g. the trainer's threads over sequences) BLIS must not start a nested
// team of its own: libgomp does not pool nested teams, so every call would create threads (measured:
// >100x slower). There BLIS runs single-threaded; elsewhere with the global thread count.
// Small products run single-threaded too: below about 4 MFLOP, waking a second thread costs more
// than it saves (measured: a 2-layer d=64 forward over 128 tokens took 291 ms with 2 BLIS threads per
// call, 1.3 ms with 1).
//
// BLIS's small-matrix ("sup") path is off: its AVX2 kernels (haswell, zen3) pick a different kernel for a
// transposed B (a dot-product one that sums each output's k terms in another order), so the same product
// with the weight stored [in, out] (a GPT-2 Conv1D directory) or [out, in] (its GGUF, llm.c) would differ
// in the last bits. The packed path puts both layouts into the same panels, so the numbers do not depend
// on how a checkpoint stores its matrices, on every kernel (skx has no sup kernels).
rntm_t* runtime(rntm_t* local, int M, int N, int K) {
  bli_rntm_init(local);
  bli_rntm_set_num_threads(omp_get_level() == 0 && double(M) * N * K >= 2e6 ? g_threads : 1, local);
  bli_rntm_disable_l3_sup(local);
  return local;
}

// One row (M = 1) or one column (N = 1) is a matrix–vector product, done by BLIS's gemv: its gemm packs
// the whole matrix for one row (measured 0.4 GB/s on a 2816 × 1024 weight, one thread, against gemv's
// 10 GB/s), and a decoding step is one row through every weight. gemv is not threaded in BLIS, so large
// products outside a parallel region are split into g_threads slices of the outputs here.
// op(A) [M, K] is read at (i, k) -> A[i·ra + k·ca], op(B) [K, N] at (k, j) -> B[k·rb + j·cb].
template <class T, class Gemv>
bool try_gemv(Gemv gemv, bool tA, bool tB, int M, int N, int K, T alpha, const T* A, int lda, const T* B, int ldb,
              T beta, T* C, int ldc) {
  if ((M != 1 && N != 1) || K <= 0) return false;
  const inc_t ra = tA ? 1 : lda, ca = tA ? lda : 1, rb = tB ? 1 : ldb, cb = tB ? ldb : 1;
  const bool row = M == 1;  // y = op(B)ᵀ a (outputs along N), else y = op(A) b (outputs along M)
  const int n_out = row ? N : M;
  const int slices = omp_get_level() == 0 && double(M) * N * K >= 2e6 ? std::min(g_threads, std::max(1, n_out / 64)) : 1;
#pragma omp parallel for schedule(static) num_threads(slices) if (slices > 1)
  for (int s = 0; s < slices; s++) {
    const int o0 = int(int64_t(n_out) * s / slices), o1 = int(int64_t(n_out) * (s + 1) / slices);
    T a = alpha, b = beta;
    if (row)
      gemv(BLIS_TRANSPOSE, BLIS_NO_CONJUGATE, K, o1 - o0, &a, const_cast<T*>(B) + int64_t(o0) * cb, rb, cb,
           const_cast<T*>(A), ca, &b, C + o0, 1);
    else
      gemv(BLIS_NO_TRANSPOSE, BLIS_NO_CONJUGATE, o1 - o0, K, &a, const_cast<T*>(A) + int64_t(o0) * ra, ra, ca,
           const_cast<T*>(B), rb, &b, C + int64_t(o0) * ldc, ldc);
  }
  return true;
}

}  // namespace

void gemm_init() {
  std::call_once(g_once, [] {
    // Must happen before BLIS's first call: BLIS reads BLIS_ARCH_TYPE once, when it initialises.
    if (std::getenv("BLIS_ARCH_TYPE") == nullptr) {
      const int arch = blis_arch_for(flash_path());
      if (arch >= 0) setenv("BLIS_ARCH_TYPE", std::to_string(arch).c_str(), 0);
    }
    int n = static_cast<int>(std::thread::hardware_concurrency());
    if (const char* env = std::getenv("QKV_THREADS")) n = std::atoi(env);
    g_threads = n < 1 ? 1 : n;
    bli_init();
    bli_thread_set_num_threads(g_threads);
  });
}

int gemm_threads() {
  gemm_init();
  return g_threads;
}

std::string gemm_kernel() {
  gemm_init();
  return bli_arch_string(bli_arch_query_id());
}

std::string gemm_backend() {
  gemm_init();
  return std::string("BLIS ") + bli_info_get_version_str() + ", kernel " + bli_arch_string(bli_arch_query_id()) +
         ", " + std::to_string(g_threads) + " threads";
}

template <>
void gemm<float>(bool tA, bool tB, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
                 int ldb, float beta, float* C, int ldc) {
  if (M <= 0 || N <= 0) return;
  gemm_init();
  rntm_t local;
  bli_sgemm_ex(trans(tA), trans(tB), M, N, K, &alpha, const_cast<float*>(A), lda, 1, const_cast<float*>(B), ldb, 1,
               &beta, C, ldc, 1, nullptr, runtime(&local, M, N, K));
}

template <>
void gemm<double>(bool tA, bool tB, int M, int N, int K, double alpha, const double* A, int lda, const double* B,
                  int ldb, double beta, double* C, int ldc) {
  if (M <= 0 || N <= 0) return;
  gemm_init();
  rntm_t local;
  bli_dgemm_ex(trans(tA), trans(tB), M, N, K, &alpha, const_cast<double*>(A), lda, 1, const_cast<double*>(B), ldb,
               1, &beta, C, ldc, 1, nullptr, runtime(&local, M, N, K));
}

template <>
void gemm_skinny<float>(bool tA, bool tB, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
                        int ldb, float beta, float* C, int ldc) {
  if (M <= 0 || N <= 0) return;
  gemm_init();
  if (!try_gemv<float>(bli_sgemv, tA, tB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc))
    gemm<float>(tA, tB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

template <>
void gemm_skinny<double>(bool tA, bool tB, int M, int N, int K, double alpha, const double* A, int lda,
                         const double* B, int ldb, double beta, double* C, int ldc) {
  if (M <= 0 || N <= 0) return;
  gemm_init();
  if (!try_gemv<double>(bli_dgemv, tA, tB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc))
    gemm<double>(tA, tB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

template <class T>
void gemm_reference(bool tA, bool tB, int M, int N, int K, T alpha, const T* A, int lda, const T* B, int ldb, T beta,
                    T* C, int ldc) {
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      double acc = 0;
      for (int p = 0; p < K; p++) {
        double a = tA ? A[p * lda + i] : A[i * lda + p];
        double b = tB ? B[j * ldb + p] : B[p * ldb + j];
        acc += a * b;
      }
      double c = beta == T(0) ? 0.0 : double(beta) * C[i * ldc + j];
      C[i * ldc + j] = static_cast<T>(double(alpha) * acc + c);
    }
}

template void gemm_reference<float>(bool, bool, int, int, int, float, const float*, int, const float*, int, float,
                                    float*, int);
template void gemm_reference<double>(bool, bool, int, int, int, double, const double*, int, const double*, int,
                                     double, double*, int);

}  // namespace qkv
