// STREAM's triad (bandwidth.hpp): every thread first-touches and then streams its own static share of
// the three arrays, so on a multi-socket machine each share sits in its thread's memory.
#include "qkv/bandwidth.hpp"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <memory>

#include "qkv/gemm.hpp"

namespace qkv {

TriadResult triad_bandwidth(int threads, int64_t array_bytes, int passes) {
  TriadResult r;
  r.threads = threads > 0 ? threads : gemm_threads();
  const int64_t n = std::max<int64_t>(1024, array_bytes / 8);
  r.array_bytes = n * 8;
  r.passes = std::max(1, passes);
  std::unique_ptr<double[]> a(new double[n]), b(new double[n]), c(new double[n]);
  double* A = a.get();
  const double* B = b.get();
  const double* C = c.get();
#pragma omp parallel for schedule(static) num_threads(r.threads)
  for (int64_t i = 0; i < n; ++i) a[i] = 0.0, b[i] = 1.0, c[i] = 2.0;
  double best = 1e30;
  for (int p = 0; p < r.passes; ++p) {
    const double s = 0.5 + p;
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel for schedule(static) num_threads(r.threads)
    for (int64_t i = 0; i < n; ++i) A[i] = B[i] + s * C[i];
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, dt);
  }
  volatile double sink = A[n / 2];  // the stores are used
  (void)sink;
  r.gb_per_s = 3.0 * double(r.array_bytes) / best / 1e9;
  return r;
}

}  // namespace qkv
