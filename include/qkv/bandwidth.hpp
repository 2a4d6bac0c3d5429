// The machine's memory bandwidth as STREAM's triad measures it: a[i] = b[i] + s·c[i] over three arrays
// much larger than the last-level cache, split over OpenMP threads, best of several passes; the bytes
// counted are STREAM's (two reads and one write of 8 bytes per element, the write-allocate not counted).
// The physical limit of decoding: bytes of weights read per token / this bandwidth (qkv generate --json).
// src/core/bandwidth.cpp.
#pragma once
#include <cstdint>

namespace qkv {

struct TriadResult {
  double gb_per_s = 0;       // 1e9 bytes per second, best pass
  int threads = 1;
  int64_t array_bytes = 0;   // each of the three arrays
  int passes = 0;
};

// Three arrays of `array_bytes` each (rounded down to whole doubles; ≥ 4 × the last-level cache to
// measure memory, not cache), `passes` timed passes after one untimed first touch, on `threads` threads
// (0: the GEMM threads, gemm_threads()).
TriadResult triad_bandwidth(int threads = 0, int64_t array_bytes = int64_t(128) << 20, int passes = 5);

}  // namespace qkv
