// The fused dequantize-and-multiply kernels (qkv/io/qmatmul.hpp) alone, as a decoding step uses them: a
// 2816 × 1024 weight (Llama-246M's MLP) of every type read from memory (24 copies, cycled, so that no
// copy is in the cache), one row of x, on every path this CPU runs; best of 5 wall times, and of 5
// process CPU times (all threads: on a shared machine, the time the kernel actually ran). QKV_THREADS
// as qkv's.
//   build/qmatmul_bench [M [N [COPIES]]]   (N 256, COPIES 1: a matrix that stays in L2 — the kernel's
//   arithmetic alone)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <random>
#include <vector>

#include "qkv/flash.hpp"
#include "qkv/gemm.hpp"
#include "qkv/io/qmatmul.hpp"

static double cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

int main(int argc, char** argv) {
  using qkv::io::GgmlType;
  const int M = argc > 1 ? std::atoi(argv[1]) : 1, N = argc > 2 ? std::atoi(argv[2]) : 2816, K = 1024;
  const int copies = argc > 3 ? std::atoi(argv[3]) : 24;
  std::mt19937 rng(1);
  std::normal_distribution<float> g;
  std::vector<float> w(std::size_t(N) * K), x(std::size_t(M) * K), y(std::size_t(M) * N);
  for (auto& v : w) v = g(rng);
  for (auto& v : x) v = g(rng);
  std::printf("threads %d, N %d, K %d, M %d\n", qkv::gemm_threads(), N, K, M);
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q2_K,
                     GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ4_NL,
                     GgmlType::IQ4_XS, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1}) {
    const std::size_t rb = qkv::io::ggml_row_size(t, K), mat = rb * N;
    std::vector<unsigned char> q(mat * copies);
    for (int n = 0; n < N; ++n) qkv::io::quantize_row(t, w.data() + std::size_t(n) * K, q.data() + rb * n, K);
    for (int c = 1; c < copies; ++c) std::copy_n(q.data(), mat, q.data() + c * mat);
    for (qkv::FlashPath p : {qkv::FlashPath::Portable, qkv::FlashPath::Avx2, qkv::FlashPath::Avx512, qkv::FlashPath::Neon}) {
      if (!qkv::flash_path_supported(p)) continue;
      qkv::flash_force_path(p);
      double best = 1e9, best_cpu = 1e9;
      for (int r = 0; r < 5; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        const double c0 = cpu_seconds();
        for (int c = 0; c < copies; ++c)
          qkv::io::qmatmul(t, q.data() + c * mat, N, K, x.data(), K, M, y.data(), N, false);
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / copies);
        best_cpu = std::min(best_cpu, (cpu_seconds() - c0) / copies);
      }
      std::printf("%-5s %-8s %8.1f us %6.1f GB/s %6.2f G weights/s   cpu %8.1f us\n", qkv::io::ggml_type_name(t).c_str(),
                  qkv::flash_path_name(p), best * 1e6, mat / best / 1e9, double(N) * K / best / 1e9, best_cpu * 1e6);
    }
  }
  qkv::flash_force_path(qkv::FlashPath::Auto);
}
