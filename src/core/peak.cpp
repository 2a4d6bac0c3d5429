// The machine's limits (peak.hpp): the FMA loop of each ISA on every GEMM thread, dispatched at run time
// to the file compiled for that ISA, and the STREAM-style triad. The portable loop is here: the baseline
// compiler's c·a + b on 8-float arrays (a multiply and an add, -ffp-contract=off: not an FMA instruction).
#include "qkv/peak.hpp"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "qkv/error.hpp"
#include "qkv/gemm.hpp"

namespace qkv {
namespace peak_detail {

float fma_loop_portable(long iters, float a, float b) {
  constexpr int kAcc = 6, kW = 8;  // 6 × 8 floats: 12 SSE registers on a baseline x86-64 build
  float c[kAcc][kW];
  for (int i = 0; i < kAcc; ++i)
    for (int j = 0; j < kW; ++j) c[i][j] = float(i * kW + j);
  for (long n = 0; n < iters; ++n) {
    for (int i = 0; i < kAcc; ++i)
      for (int j = 0; j < kW; ++j) c[i][j] = c[i][j] * a + b;
  }
  float s = 0;
  for (int i = 0; i < kAcc; ++i)
    for (int j = 0; j < kW; ++j) s += c[i][j];
  return s;
}

FmaShape fma_shape(FlashPath p) {
  switch (p) {
    case FlashPath::Avx512:
      return {fma_loop_avx512, 16, 16};
    case FlashPath::Avx2:
      return {fma_loop_avx2, 8, 12};
    case FlashPath::Neon:
      return {fma_loop_neon, 4, 16};
    default:
      return {fma_loop_portable, 8, 6};
  }
}

}  // namespace peak_detail

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Seconds for every thread to run `iters` iterations of the loop at once.
double run_threads(peak_detail::FmaLoop loop, long iters, int threads) {
  volatile float sink = 0;
  const auto t0 = Clock::now();
#pragma omp parallel num_threads(threads)
  {
    // a and b keep every chain bounded (|c| → b / (1 − a) = 1): no overflow, no denormals
    const float r = loop(iters, 0.999f, 0.001f);
    if (r == 12345.0f) sink = r;
  }
  (void)sink;
  return since(t0);
}

// The last-level cache in MiB from sysfs (sysconf's figure is wrong in some VMs: 320 MiB for 32 here);
// 32 when unknown.
double llc_mib() {
  std::ifstream in("/sys/devices/system/cpu/cpu0/cache/index3/size");
  long v = 0;
  std::string unit;  // "32768K"
  if (!(in >> v) || v <= 0) return 32;
  in >> unit;
  return unit == "M" ? double(v) : unit == "G" ? v * 1024.0 : v / 1024.0;
}

long double_to_iters(double x) {
  return std::max<long>(1000, long(x));
}

}  // namespace

FmaPeak measure_fma_peak(FlashPath p, int repeats, double seconds) {
  if (p == FlashPath::Auto) p = flash_path();
  if (!flash_path_supported(p))
    usage_error(std::string("bench peak: this CPU cannot run the ") + flash_path_name(p) + " FMA loop");
  const peak_detail::FmaShape s = peak_detail::fma_shape(p);
  const int threads = gemm_threads();
  // calibrate: grow the iteration count until a run takes a fifth of the target, then scale
  long iters = 10000;
  double t = run_threads(s.loop, iters, threads);
  while (t < seconds / 5) {
    iters *= 4;
    t = run_threads(s.loop, iters, threads);
  }
  iters = double_to_iters(double(iters) * seconds / t);
  std::vector<double> gf;
  const double flops = 2.0 * threads * double(iters) * s.accumulators * s.lanes;
  for (int r = 0; r < std::max(1, repeats); ++r) gf.push_back(flops / run_threads(s.loop, iters, threads) * 1e-9);
  return FmaPeak{*std::max_element(gf.begin(), gf.end()), median(gf), threads, s.lanes, s.accumulators};
}

Bandwidth measure_bandwidth(int repeats, double array_mib) {
  if (array_mib <= 0) array_mib = std::clamp(4.0 * llc_mib(), 128.0, 512.0);
  const long n = long(array_mib * (1 << 20) / sizeof(float));
  const int threads = gemm_threads();
  std::unique_ptr<float[]> a(new float[size_t(n)]), b(new float[size_t(n)]), c(new float[size_t(n)]);
  float *A = a.get(), *B = b.get(), *C = c.get();
  // first touch by the same static split the triad uses: each thread's pages are its own
#pragma omp parallel for schedule(static) num_threads(threads)
  for (long i = 0; i < n; ++i) A[i] = 0, B[i] = 1.0f, C[i] = 2.0f;
  std::vector<double> gbps;
  const float s = 3.0f;
  for (int r = 0; r <= std::max(1, repeats); ++r) {
    const auto t0 = Clock::now();
#pragma omp parallel for schedule(static) num_threads(threads)
    for (long i = 0; i < n; ++i) A[i] = B[i] + s * C[i];
    const double t = since(t0);
    if (r > 0) gbps.push_back(3.0 * sizeof(float) * double(n) / t * 1e-9);  // run 0: the warm-up
  }
  if (A[n / 2] != 7.0f) data_error("bench peak: the triad computed a wrong value");
  return Bandwidth{median(gbps), *std::max_element(gbps.begin(), gbps.end()), array_mib, threads};
}

}  // namespace qkv
