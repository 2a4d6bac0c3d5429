// What quant.cpp (the types qkv reads and writes since the start), quant_low_k.cpp (Q2_K, Q3_K) and
// quant_iq4.cpp (IQ4_NL, IQ4_XS) share:
// the half loads and stores, the quantizers' scale rounding and nearest-code search, and the per-type
// row, value and quantize functions quant.cpp dispatches to (private to src/io).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "io_util.hpp"
#include "qkv/io/half.hpp"

namespace qkv::io::detail {

inline float half_at(const unsigned char* p) {
  return f16_to_float(load_le<uint16_t>(p));
}

inline void put_half(unsigned char* p, uint16_t h) {
  std::memcpy(p, &h, 2);
}

// The smallest binary16 h >= 0 with f16_to_float(h) * k >= target (target >= 0, finite); `what` names the
// scale in the error when it overflows binary16.
uint16_t half_at_least(float target, float k, const char* what);

// The value of largest magnitude of x[0..n), sign kept, the first on ties (ggml's Q4_0 / Q5_0 scale).
inline float signed_absmax(const float* x, int n) {
  float e = 0.0f;
  for (int j = 0; j < n; ++j)
    if (std::fabs(x[j]) > std::fabs(e)) e = x[j];
  return e;
}

// The code L in [lo, hi] whose reconstruction rec(L) is nearest to x, starting from the rounded guess.
template <class Rec>
int best_code(float x, float guess, int lo, int hi, Rec rec) {
  int L = std::isfinite(guess) ? int(std::clamp(std::nearbyint(guess), float(lo), float(hi))) : lo;
  float err = std::fabs(rec(L) - x);
  for (int c : {L - 1, L + 1}) {
    if (c < lo || c > hi) continue;
    const float e = std::fabs(rec(c) - x);
    if (e < err) err = e, L = c;
  }
  return L;
}

// The K-quants' search for a min and a scale per sub-block (Q2_K, Q4_K, Q5_K): 256 values in `subs`
// sub-blocks, codes 0..top, mins m·dmin and scales s·d with m, s integers in 0..grid (binary16 dmin, d).
// Mins first, rounded up so that −dmin·m ≤ the sub-block's lowest value (0 when none is negative), then
// scales that reach its highest value from there; each value takes the code whose reconstruction
// (d·s)·q − dmin·m is nearest. |x − x̂| ≤ s·d/2 ≤ ((max − min(0, min))/top + d + dmin/top)/2.
struct KScales {
  uint16_t d = 0, dmin = 0;  // binary16
  int s[16] = {}, m[16] = {};
  uint8_t L[256] = {};
};
KScales k_scales_with_mins(const float* x, int subs, int top, int grid);

// Q2_K and Q3_K (quant_low_k.cpp): nb blocks of 256 values.
void rows_q2_k(const unsigned char* b, float* y, int64_t nb);
void rows_q3_k(const unsigned char* b, float* y, int64_t nb);
float value_q2_k(const unsigned char* p, int64_t i);
float value_q3_k(const unsigned char* p, int64_t i);
void quant_q2_k(const float* x, unsigned char* b, int64_t nb);
void quant_q3_k(const float* x, unsigned char* b, int64_t nb);

// Q4_1, Q5_0, Q5_1 quantizers (quant_legacy.cpp; their rows are quant.cpp's).
void quant_q4_1(const float* x, unsigned char* b, int64_t nb);
void quant_q5_0(const float* x, unsigned char* b, int64_t nb);
void quant_q5_1(const float* x, unsigned char* b, int64_t nb);

// IQ4_NL (blocks of 32) and IQ4_XS (blocks of 256) (quant_iq4.cpp).
void rows_iq4_nl(const unsigned char* b, float* y, int64_t nb);
void rows_iq4_xs(const unsigned char* b, float* y, int64_t nb);
float value_iq4_nl(const unsigned char* p, int64_t i);
float value_iq4_xs(const unsigned char* p, int64_t i);
void quant_iq4_nl(const float* x, unsigned char* b, int64_t nb);
void quant_iq4_xs(const float* x, unsigned char* b, int64_t nb);

}  // namespace qkv::io::detail
