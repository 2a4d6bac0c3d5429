// The machine's physical limits, measured: the FMA throughput of one instruction set on every GEMM thread
// (a register-resident loop of independent fused multiply-adds, one file per ISA compiled for it:
// src/core/peak_fma_*.cpp) and the memory bandwidth (a STREAM-style triad a = b + s·c on arrays far larger
// than the last-level cache, all threads). `qkv bench peak` prints them; every bench reports its fraction
// of the FMA peak of the ISA in use (flash_path(): QKV_ISA) beside the SGEMM figure.
#pragma once
#include "qkv/flash.hpp"

namespace qkv {

struct FmaPeak {
  double gflops = 0;         // the fastest run, all threads together (a peak: what the machine can do)
  double median_gflops = 0;  // the median run (lower when other processes share the cores)
  int threads = 0;       // gemm_threads()
  int lanes = 0;         // floats per vector
  int accumulators = 0;  // independent FMA chains per thread
};

// FMA throughput of path p (portable: the baseline compiler's a·b + c on 8-float arrays, not an FMA
// instruction), the best and the median of `repeats` runs of about `seconds` each. Throws qkv::Error (usage) when this CPU
// cannot run p.
// Many short runs and the best of them: on a shared machine a run that no other process interrupted is
// the one that shows the machine's limit.
FmaPeak measure_fma_peak(FlashPath p, int repeats = 15, double seconds = 0.02);

struct Bandwidth {
  double gbps = 0;        // median triad rate, counting 3 × 4 bytes per element (STREAM's convention)
  double best_gbps = 0;   // the fastest run (STREAM reports this one)
  double array_mib = 0;   // each of the three arrays
  int threads = 0;
};

// The triad over three float arrays of `array_mib` MiB each (default: 4 × the last-level cache, within
// [128, 512] MiB), first touched by the threads that use them, median of `repeats` runs after one warm-up.
Bandwidth measure_bandwidth(int repeats = 5, double array_mib = 0);

namespace peak_detail {
// One thread's register-resident loop: `iters` iterations of `accumulators` independent FMAs on
// `lanes`-wide vectors; returns a value that depends on every accumulator (so nothing is elided).
// The avx512/avx2/neon ones live in their own files, each compiled for its ISA by target attribute.
using FmaLoop = float (*)(long iters, float a, float b);
float fma_loop_portable(long iters, float a, float b);
float fma_loop_avx2(long iters, float a, float b);
float fma_loop_avx512(long iters, float a, float b);
float fma_loop_neon(long iters, float a, float b);
struct FmaShape {
  FmaLoop loop;
  int lanes, accumulators;
};
FmaShape fma_shape(FlashPath p);
}  // namespace peak_detail

}  // namespace qkv
