// The fused dequantize-and-multiply kernels (qkv/io/qmatmul.hpp) on aarch64, without BLIS or GoogleTest:
// built by Debian's cross compiler and run under qemu-aarch64 (tests/arm/run.sh). The portable and NEON
// paths, forced in turn, against the double twin (qmatmul_reference) for every type, odd sizes and
// 1..8 rows of x; and with unit vectors for x, the weights used bit-identical to dequantize_value's.
// Exit 0 only if all pass.
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "qkv/flash.hpp"
#include "qkv/io/qmatmul.hpp"

namespace qkv {
int gemm_threads() {  // gemm.cpp (BLIS) is not in this build; the kernels split over two threads
  return 2;
}
}  // namespace qkv

namespace {

using qkv::FlashPath;
using qkv::io::GgmlType;

int g_failures = 0, g_checks = 0;

void expect(bool ok, const std::string& what) {
  ++g_checks;
  if (!ok && ++g_failures <= 20) std::printf("FAIL %s\n", what.c_str());
}

std::vector<unsigned char> weights(GgmlType t, int N, int K, std::mt19937& rng) {
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> w(size_t(N) * K);
  for (auto& v : w) v = g(rng);
  const size_t rb = qkv::io::ggml_row_size(t, K);
  std::vector<unsigned char> q(rb * N);
  for (int n = 0; n < N; ++n) qkv::io::quantize_row(t, w.data() + size_t(n) * K, q.data() + rb * n, K);
  return q;
}

void check_shape(GgmlType t, FlashPath p, int N, int K, int M, std::mt19937& rng) {
  std::normal_distribution<float> g(0.0f, 1.0f);
  const auto W = weights(t, N, K, rng);
  std::vector<float> x(size_t(M) * K), got(size_t(M) * N), want(size_t(M) * N);
  for (auto& v : x) v = g(rng);
  qkv::io::qmatmul_reference(t, W.data(), N, K, x.data(), K, M, want.data(), N, false);
  qkv::flash_force_path(p);
  qkv::io::qmatmul(t, W.data(), N, K, x.data(), K, M, got.data(), N, false);
  const double tol = (double(K) / 4 + 16) * 6e-8 * 4.0 * K;  // |w| ~ |x| ~ N(0,1): Σ|wx| well under 4K
  for (size_t i = 0; i < got.size(); ++i)
    expect(std::fabs(double(got[i]) - want[i]) <= tol,
           qkv::io::ggml_type_name(t) + " " + qkv::flash_path_name(p) + " K=" + std::to_string(K) +
               " M=" + std::to_string(M) + " i=" + std::to_string(i));
  const size_t rb = qkv::io::ggml_row_size(t, K);
  for (int k = 0; k < K; k += 7) {  // unit vectors: the weights themselves, bit for bit
    std::vector<float> e(K, 0.0f), y(N);
    e[k] = 1.0f;
    qkv::io::qmatmul(t, W.data(), N, K, e.data(), K, 1, y.data(), N, false);
    for (int n = 0; n < N; ++n)
      expect(y[n] == qkv::io::dequantize_value(t, W.data() + rb * n, k),
             qkv::io::ggml_type_name(t) + " " + qkv::flash_path_name(p) + " weight " + std::to_string(k));
  }
  qkv::flash_force_path(FlashPath::Auto);
}

}  // namespace

int main() {
  std::mt19937 rng(5);
  for (FlashPath p : {FlashPath::Portable, FlashPath::Neon}) {
    if (!qkv::flash_path_supported(p)) continue;
    for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0,
                       GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K,
                       GgmlType::IQ4_NL, GgmlType::IQ4_XS, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1}) {
      const int bs = int(qkv::io::ggml_type_traits(uint32_t(t))->block_size);
      for (int K : bs == 1 ? std::vector<int>{5, 37, 300} : std::vector<int>{bs, 3 * bs})
        for (int M : {1, 3, 4, 8}) check_shape(t, p, 33, K, M, rng);
    }
  }
  std::printf("qmatmul on aarch64: %d checks, %d failures (neon path %s)\n", g_checks, g_failures,
              qkv::flash_path_supported(FlashPath::Neon) ? "run" : "NOT available");
  return g_failures == 0 && qkv::flash_path_supported(FlashPath::Neon) ? 0 : 1;
}
