// The fused dequantize-and-multiply kernels (qkv/io/qmatmul.hpp) on every path this CPU runs, against
// their slow twin (dequantize_value, sums in double): every type, odd sizes, 1..8 rows of x, strided x
// and y, accumulate or not; and the weights they use bit-identical to dequantize_value's.
#include "qkv/io/qmatmul.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "qkv/error.hpp"
#include "qkv/flash.hpp"

namespace {

using qkv::FlashPath;
using qkv::io::GgmlType;

const GgmlType kTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0,
                           GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K,
                           GgmlType::IQ4_NL, GgmlType::IQ4_XS, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1};

std::vector<unsigned char> random_weights(GgmlType t, int N, int K, std::mt19937& rng) {
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> w(std::size_t(N) * K);
  for (auto& v : w) v = g(rng);
  const std::size_t rb = qkv::io::ggml_row_size(t, K);
  std::vector<unsigned char> q(rb * N);
  for (int n = 0; n < N; ++n) qkv::io::quantize_row(t, w.data() + std::size_t(n) * K, q.data() + rb * n, K);
  return q;
}

std::vector<FlashPath> paths() {
  std::vector<FlashPath> p;
  for (FlashPath c : {FlashPath::Portable, FlashPath::Avx2, FlashPath::Avx512, FlashPath::Neon})
    if (qkv::flash_path_supported(c)) p.push_back(c);
  return p;
}

struct PathGuard {
  explicit PathGuard(FlashPath p) { qkv::flash_force_path(p); }
  ~PathGuard() { qkv::flash_force_path(FlashPath::Auto); }
};

// |fused - twin| within float summation error: a bound on sum |w x| times the chain length's epsilon.
void expect_close(GgmlType t, const std::vector<unsigned char>& W, int N, int K, const std::vector<float>& x,
                  int ldx, int M, const std::vector<float>& got, const std::vector<float>& want, int ldy,
                  const std::string& what) {
  const std::size_t rb = qkv::io::ggml_row_size(t, K);
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      double mag = 0;
      for (int k = 0; k < K; ++k)
        mag += std::fabs(double(qkv::io::dequantize_value(t, W.data() + rb * n, k)) *
                         x[std::size_t(m) * ldx + k]);
      const double tol = (double(K) / 8 + 16) * 6e-8 * (mag + 1.0);
      const std::size_t i = std::size_t(m) * ldy + n;
      ASSERT_NEAR(got[i], want[i], tol) << what << " m=" << m << " n=" << n;
    }
}

TEST(QMatmul, MatchesTwinOnEveryPathTypeAndShape) {
  std::mt19937 rng(7);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (GgmlType t : kTypes) {
    const int bs = int(qkv::io::ggml_type_traits(uint32_t(t))->block_size);
    const std::vector<int> Ks =
        bs == 1 ? std::vector<int>{1, 7, 37, 300, 513} : std::vector<int>{bs, 3 * bs, 9 * bs};
    for (int K : Ks)
      for (int N : {1, 5, 7, 33}) {
        const auto W = random_weights(t, N, K, rng);
        for (int M : {1, 2, 3, 4, 5, 8}) {
          const int ldx = K + 3, ldy = N + 2;
          std::vector<float> x(std::size_t(M) * ldx), y0(std::size_t(M) * ldy);
          for (auto& v : x) v = g(rng);
          for (auto& v : y0) v = g(rng);
          for (bool acc : {false, true}) {
            std::vector<float> want = y0;
            qkv::io::qmatmul_reference(t, W.data(), N, K, x.data(), ldx, M, want.data(), ldy, acc);
            for (FlashPath p : paths()) {
              PathGuard guard(p);
              std::vector<float> got = y0;
              qkv::io::qmatmul(t, W.data(), N, K, x.data(), ldx, M, got.data(), ldy, acc);
              const std::string what = qkv::io::ggml_type_name(t) + " " + qkv::flash_path_name(p) +
                                       " N=" + std::to_string(N) + " K=" + std::to_string(K) +
                                       " M=" + std::to_string(M) + (acc ? " acc" : "");
              expect_close(t, W, N, K, x, ldx, M, got, want, ldy, what);
              for (int m = 0; m < M; ++m)  // the padding between rows of y untouched
                for (int n = N; n < ldy; ++n)
                  ASSERT_EQ(got[std::size_t(m) * ldy + n], y0[std::size_t(m) * ldy + n]);
            }
          }
        }
      }
  }
}

// A decoding step's shape, large enough to be split over the threads (an odd row count: unequal
// shares), on every type and path.
TEST(QMatmul, OneRowSplitOverThreadsMatchesTwin) {
  std::mt19937 rng(5);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (GgmlType t : kTypes) {
    const int N = 1027, K = 512;
    const auto W = random_weights(t, N, K, rng);
    std::vector<float> x(K), want(N);
    for (auto& v : x) v = g(rng);
    qkv::io::qmatmul_reference(t, W.data(), N, K, x.data(), K, 1, want.data(), N, false);
    for (FlashPath p : paths()) {
      PathGuard guard(p);
      std::vector<float> got(N);
      qkv::io::qmatmul(t, W.data(), N, K, x.data(), K, 1, got.data(), N, false);
      expect_close(t, W, N, K, x, K, 1, got, want, N,
                   qkv::io::ggml_type_name(t) + " " + qkv::flash_path_name(p));
    }
  }
}

// x = the unit vectors e_k for k = k0, k0 + step, … < K, on every path: y[n] must be W[n, k] exactly, so
// every weight the kernel uses is dequantize_value's.
void expect_unit_columns(GgmlType t, const std::vector<unsigned char>& W, int N, int K, int k0, int step) {
  const std::size_t rb = qkv::io::ggml_row_size(t, K);
  for (FlashPath p : paths()) {
    PathGuard guard(p);
    for (int k = k0; k < K; k += step) {
      std::vector<float> x(K, 0.0f), y(N);
      x[k] = 1.0f;
      qkv::io::qmatmul(t, W.data(), N, K, x.data(), K, 1, y.data(), N, false);
      for (int n = 0; n < N; ++n)
        ASSERT_EQ(y[n], qkv::io::dequantize_value(t, W.data() + rb * n, k))
            << qkv::io::ggml_type_name(t) << " " << qkv::flash_path_name(p) << " n=" << n << " k=" << k;
    }
  }
}

// Rows longer than a decoder's span (Q4_K's visits take 16 blocks, 4096 values, at a time: qmatmul_simd.hpp),
// so that a row is several visits, the later ones at k0 > 0: against the twin, and unit vectors in the last
// visit's blocks give the weights themselves.
TEST(QMatmul, RowsLongerThanADecodersSpan) {
  std::mt19937 rng(13);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (GgmlType t : kTypes) {
    const int N = 3, K = 19 * 256;  // Q4_K: one visit of 16 blocks, then one of 3
    const auto W = random_weights(t, N, K, rng);
    for (int M : {1, 2, 5}) {
      std::vector<float> x(std::size_t(M) * K), want(std::size_t(M) * N);
      for (auto& v : x) v = g(rng);
      qkv::io::qmatmul_reference(t, W.data(), N, K, x.data(), K, M, want.data(), N, false);
      for (FlashPath p : paths()) {
        PathGuard guard(p);
        std::vector<float> got(std::size_t(M) * N);
        qkv::io::qmatmul(t, W.data(), N, K, x.data(), K, M, got.data(), N, false);
        expect_close(t, W, N, K, x, K, M, got, want, N,
                     qkv::io::ggml_type_name(t) + " " + qkv::flash_path_name(p) + " M=" + std::to_string(M));
      }
    }
    expect_unit_columns(t, W, N, K, 16 * 256 - 7, 5);
  }
}

// x = a unit vector e_k: y[n] = W[n, k] exactly, so every weight the kernel uses is dequantize_value's.
TEST(QMatmul, UsesExactlyTheDequantizedWeights) {
  std::mt19937 rng(11);
  for (GgmlType t : kTypes) {
    const int N = 3, K = 512;
    const auto W = random_weights(t, N, K, rng);
    expect_unit_columns(t, W, N, K, 0, 1);
  }
}

// Every finite binary16 bit pattern decodes as io::f16_to_float does: rows of 32 of them, each column
// picked by a unit vector.
TEST(QMatmul, EveryFiniteHalfDecodesExactly) {
  std::vector<uint16_t> h;
  for (uint32_t b = 0; b < 65536; ++b)
    if ((b & 0x7c00u) != 0x7c00u) h.push_back(uint16_t(b));
  const int K = 32, N = int(h.size()) / K;
  ASSERT_EQ(h.size() % K, 0u);
  std::vector<float> x(K), y(N);
  for (FlashPath p : paths()) {
    PathGuard guard(p);
    for (int k = 0; k < K; ++k) {
      std::fill(x.begin(), x.end(), 0.0f);
      x[k] = 1.0f;
      qkv::io::qmatmul(GgmlType::F16, h.data(), N, K, x.data(), K, 1, y.data(), 1 * N, false);
      for (int n = 0; n < N; ++n)
        ASSERT_EQ(y[n], qkv::io::dequantize_value(GgmlType::F16, h.data(), int64_t(n) * K + k))
            << qkv::flash_path_name(p) << " " << n << " " << k;
    }
  }
}

TEST(QMatmul, RefusesTypesWithoutKernelAndPartialBlocks) {
  std::vector<unsigned char> W(64);
  float x[64] = {}, y[1];
  EXPECT_THROW(qkv::io::qmatmul(GgmlType::Q8_K, W.data(), 1, 256, x, 256, 1, y, 1, false), qkv::Error);
  EXPECT_THROW(qkv::io::qmatmul(GgmlType::Q8_0, W.data(), 1, 48, x, 48, 1, y, 1, false), qkv::Error);
}

}  // namespace
