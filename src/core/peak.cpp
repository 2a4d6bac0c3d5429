// The machine's limits (peak.hpp): the FMA loop of each ISA on every GEMM thread, dispatched at run time
// to the file compiled for that ISA, and the STREAM-style triad. The portable loop is here: the baseline
// compiler's c·a + b on 8-float arrays (a multiply and an add, -ffp-contract=off: not an FMA instruction).
#include "qkv/peak.hpp"

#include <omp.h>
#include <time.h>
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

// CPU seconds of the calling thread: the time it actually ran, not the time other processes held its core.
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// Every thread runs `iters` iterations of the loop at once; the result is the sum over threads of
// iterations per CPU second of that thread. Timing each thread by its own CPU time makes the figure the
// cores' FMA rate even when other processes share them (wall time there measured anything from 1 % to
// 100 % of it); with one thread per core the sum is the machine's.
double iters_per_second(peak_detail::FmaLoop loop, long iters, int threads) {
  double rate = 0;
#pragma omp parallel num_threads(threads) reduction(+ : rate)
  {
    const double t0 = thread_cpu_seconds();
    // a and b keep every chain bounded (|c| → b / (1 − a) = 1): no overflow, no denormals
    const float r = loop(iters, 0.999f, 0.001f);
    const double t = std::max(thread_cpu_seconds() - t0, 1e-9);
    rate += r == 12345.0f ? 0.0 : double(iters) / t;  // r is used: the loop cannot be dropped
  }
  return rate;
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
  while (double(iters) * threads / iters_per_second(s.loop, iters, threads) < seconds / 5) iters *= 4;
  iters = double_to_iters(double(iters) * seconds / (double(iters) * threads / iters_per_second(s.loop, iters, threads)));
  std::vector<double> gf;
  const double flops_per_iter = 2.0 * s.accumulators * s.lanes;
  for (int r = 0; r < std::max(1, repeats); ++r) gf.push_back(flops_per_iter * iters_per_second(s.loop, iters, threads) * 1e-9);
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
