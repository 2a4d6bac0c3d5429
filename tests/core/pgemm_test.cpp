// The packed GEMM (pgemm.hpp) on every path with a micro-kernel this CPU runs (avx512, avx2; the others
// skipped with a message): bit for bit against its slow twin (one std::fma per k, in order, which is what
// the kernel promises), to rounding against gemm_reference's double sums, over shapes cut everywhere by
// the tiles (rows around 4 and 8, columns around 24 and 32, k around 8, 256 and 512); the same bits from both
// packers (B stored [N, K] or [K, N]), on both x86 paths, on one thread and on all.
#include "qkv/pgemm.hpp"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <random>
#include <vector>

#include "qkv/error.hpp"
#include "qkv/flash.hpp"
#include "path_fixture.hpp"
#include "qkv/gemm.hpp"

namespace qkv {
namespace {

class Pgemm : public PathTest {};

std::vector<float> randu(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// B [N, K] (rows) or [K, N] (cols), packed by pgemm's own helpers.
PackB packer(const std::vector<float>& B, int N, int K, bool rows) {
  return [&B, N, K, rows](int j0, int n, int nr, float* dst) {
    if (rows) pgemm_pack_rows(B.data() + long(j0) * K, K, n, K, nr, dst);
    else pgemm_pack_cols(B.data(), N, j0, n, K, nr, dst);
  };
}

// The twin: C(i, j) = fma(A(i, k), B(k, j), C) for k = 0 … K − 1, from 0 or from C.
std::vector<float> twin(const std::vector<float>& A, const std::vector<float>& Bnk, std::vector<float> C, int M,
                        int N, int K, bool acc) {
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      float c = acc ? C[size_t(i) * N + j] : 0.0f;
      for (int k = 0; k < K; k++) c = std::fma(A[size_t(i) * K + k], Bnk[size_t(j) * K + k], c);
      C[size_t(i) * N + j] = c;
    }
  return C;
}

std::vector<float> transposed(const std::vector<float>& B, int R, int C) {
  std::vector<float> t(B.size());
  for (int r = 0; r < R; r++)
    for (int c = 0; c < C; c++) t[size_t(c) * R + r] = B[size_t(r) * C + c];
  return t;
}

TEST_P(Pgemm, EqualsItsTwinBitForBitAndDoubleToRounding) {
  unsigned seed = 1;
  for (int M : {1, 3, 4, 5, 7, 8, 9, 12, 13, 17, 50})
    for (int N : {1, 15, 16, 23, 24, 25, 31, 32, 33, 40, 48, 49, 70})  // 16, 40, 48: whole vectors past a group
      for (int K : {1, 7, 8, 9, 255, 256, 257, 513, 600}) {
        const auto A = randu(size_t(M) * K, seed++), B = randu(size_t(N) * K, seed++),
                   C0 = randu(size_t(M) * N, seed++);
        const auto Bkn = transposed(B, N, K);
        for (bool acc : {false, true})
          for (bool rows : {true, false}) {
            std::vector<float> C = C0;
            pgemm(M, N, K, A.data(), K, packer(rows ? B : Bkn, N, K, rows), acc, C.data(), N);
            const auto want = twin(A, B, C0, M, N, K, acc);
            std::vector<float> ref = C0;
            gemm_reference<float>(false, true, M, N, K, 1.0f, A.data(), K, B.data(), K, acc ? 1.0f : 0.0f,
                                  ref.data(), N);
            for (size_t e = 0; e < C.size(); e++) {
              ASSERT_EQ(C[e], want[e]) << "M=" << M << " N=" << N << " K=" << K << " acc=" << acc << " rows=" << rows
                                       << " element " << e;
              ASSERT_NEAR(C[e], ref[e], 2e-7 * (K + 2) * 2) << "M=" << M << " N=" << N << " K=" << K;
            }
          }
      }
}

// Row strides beyond the row (A and C inside wider matrices), and large enough for the threads, whose shares
// end on whole vectors inside a group (700 and 1024 columns with AVX2's groups of 24 and AVX-512's of 32),
// or past the last whole vector (9 columns: 8 and 1).
TEST_P(Pgemm, StridedAndThreadedSameBits) {
  for (int N : {9, 700, 1024}) {
    const int M = N < 100 ? 1000 : 70, K = 300, lda = 320, ldc = N + 31;
    const auto A = randu(size_t(M) * lda, 7), B = randu(size_t(N) * K, 8);
    std::vector<float> C1(size_t(M) * ldc, 5.0f), C2 = C1;
    pgemm(M, N, K, A.data(), lda, packer(B, N, K, true), false, C1.data(), ldc);
#pragma omp parallel num_threads(2)
    {
#pragma omp single
      pgemm(M, N, K, A.data(), lda, packer(B, N, K, true), false, C2.data(), ldc);  // in a region: 1 thread
    }
    EXPECT_EQ(C1, C2);
    for (int i = 0; i < M; i++)
      for (int j = N; j < ldc; j++) ASSERT_EQ(C1[size_t(i) * ldc + j], 5.0f) << "wrote past column N";
    std::vector<float> Ad(size_t(M) * K);
    for (int i = 0; i < M; i++)
      for (int k = 0; k < K; k++) Ad[size_t(i) * K + k] = A[size_t(i) * lda + k];
    const auto want = twin(Ad, B, std::vector<float>(size_t(M) * N), M, N, K, false);
    for (int i = 0; i < M; i++)
      for (int j = 0; j < N; j++)
        ASSERT_EQ(C1[size_t(i) * ldc + j], want[size_t(i) * N + j]) << i << "," << j;
  }
}

TEST_P(Pgemm, EmptyAndZeroDepth) {
  std::vector<float> C(12, 3.0f);
  pgemm(0, 4, 5, nullptr, 5, [](int, int, int, float*) { FAIL() << "packed for no rows"; }, false, C.data(), 4);
  EXPECT_EQ(C, std::vector<float>(12, 3.0f));
  pgemm(3, 4, 0, nullptr, 1, [](int, int, int, float*) {}, true, C.data(), 4);
  EXPECT_EQ(C, std::vector<float>(12, 3.0f));
  pgemm(3, 4, 0, nullptr, 1, [](int, int, int, float*) {}, false, C.data(), 4);
  EXPECT_EQ(C, std::vector<float>(12, 0.0f));
}

INSTANTIATE_TEST_SUITE_P(Paths, Pgemm, ::testing::Values(FlashPath::Avx512, FlashPath::Avx2),
                         [](const auto& info) { return std::string(flash_path_name(info.param)); });

// The two x86 paths pack different widths and run different tiles, yet sum in the same order.
TEST(PgemmPaths, Avx512AndAvx2GiveTheSameBits) {
  if (!flash_path_supported(FlashPath::Avx512) || !flash_path_supported(FlashPath::Avx2))
    GTEST_SKIP() << "needs both the avx512 and the avx2 path";
  const int M = 37, N = 101, K = 513;
  const auto A = randu(size_t(M) * K, 11), B = randu(size_t(N) * K, 12);
  std::vector<std::vector<float>> out;
  for (FlashPath p : {FlashPath::Avx512, FlashPath::Avx2}) {
    flash_force_path(p);
    out.emplace_back(size_t(M) * N);
    pgemm(M, N, K, A.data(), K, packer(B, N, K, true), false, out.back().data(), N);
  }
  flash_force_path(FlashPath::Auto);
  EXPECT_EQ(out[0], out[1]);
}

TEST(PgemmPaths, PortablePathHasNoKernel) {
  flash_force_path(FlashPath::Portable);
  EXPECT_FALSE(pgemm_supported());
  EXPECT_EQ(pgemm_nr(), 0);
  float c = 0;
  EXPECT_THROW(pgemm(1, 1, 1, &c, 1, [](int, int, int, float*) {}, false, &c, 1), Error);
  flash_force_path(FlashPath::Auto);
}

}  // namespace
}  // namespace qkv
