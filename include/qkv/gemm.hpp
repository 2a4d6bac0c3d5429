// GEMM for every projection: BLIS, configured on purpose.
//
// Debian's BLIS 0.9 detects this AVX-512 CPU as `haswell` (about 140 GFLOP/s on 2 cores) because its
// skx test for two FMA units fails under virtualisation; forced to `skx` it reaches about 280 GFLOP/s
// at n = 2048. gemm_init() therefore selects skx when the CPU has the AVX-512 subsets skx needs and
// the user has not chosen BLIS_ARCH_TYPE, and sets the thread count (QKV_THREADS, else all cores).
#pragma once
#include <string>

namespace qkv {

// Row-major C[M,N] = alpha * op(A)[M,K] · op(B)[K,N] + beta * C. op(X) = Xᵀ when trans is true;
// lda/ldb/ldc are the row strides of the matrices as stored.
template <class T>
void gemm(bool transA, bool transB, int M, int N, int K, T alpha, const T* A, int lda, const T* B, int ldb, T beta,
          T* C, int ldc);

// The same product with a matrix–vector kernel when M or N is 1 (else gemm()): BLIS's gemm packs the
// whole matrix for a single row (measured 0.4 GB/s on a 2816 × 1024 weight, one thread), its gemv reads
// it once (10 GB/s); large ones are split over the threads by outputs. Equal to gemm()'s result to
// rounding, not bit for bit (another summation order): the forward uses it for one-row products
// (a decoding step, last-position logits), where nothing is compared bit for bit with more rows.
template <class T>
void gemm_skinny(bool transA, bool transB, int M, int N, int K, T alpha, const T* A, int lda, const T* B, int ldb,
                 T beta, T* C, int ldc);

// The slow twin: three loops, accumulating in double.
template <class T>
void gemm_reference(bool transA, bool transB, int M, int N, int K, T alpha, const T* A, int lda, const T* B,
                    int ldb, T beta, T* C, int ldc);

void gemm_init();                 // idempotent; called by gemm() on first use
std::string gemm_backend();       // e.g. "BLIS 0.9.0, kernel skx, 2 threads"
std::string gemm_kernel();        // BLIS's sub-configuration in use ("skx", "zen3", "haswell", "generic"): the
                                  // one for the ISA in use (QKV_ISA), unless BLIS_ARCH_TYPE is set
int gemm_threads();

}  // namespace qkv
