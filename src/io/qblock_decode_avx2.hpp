// AVX2 (+ F16C) decoders of ggml blocks for the fused kernels (qmatmul_avx2.cpp): the same values as
// qblock_decode.hpp's plain loops (dequantize_row's arithmetic: an int converted to float, times the
// block's float scale, minus its float min for Q4_K — each a separately rounded IEEE operation), written
// with intrinsics because the compiler's vectorisation of those loops was 2–4× slower. The includer
// defines QKV_SIMD and includes <immintrin.h> and qblock_decode.hpp.
#pragma once

#include "io/qblock_decode_x86.hpp"

namespace qkv::io::qdetail {
namespace {

// 8 bytes -> 8 int32 lanes (zero- or sign-extended)
QKV_SIMD inline __m256i u8x8(const unsigned char* p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}
QKV_SIMD inline __m256i i8x8(const unsigned char* p) {
  return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

}  // namespace
}  // namespace qkv::io::qdetail

#include "io/qblock_decode_bytes.hpp"

namespace qkv::io::qdetail {
namespace {

struct DecF16Avx2 {
  static constexpr int kBlock = 1;
  static constexpr std::size_t kBytes = 2;
  QKV_SIMD static const float* run(const unsigned char* row, int64_t k0, int L, float* tile) {
    const unsigned char* p = row + 2 * k0;
    int j = 0;
    for (; j + 8 <= L; j += 8)  // VCVTPH2PS: exact for every binary16 value
      _mm256_store_ps(tile + j, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2 * j))));
    for (; j < L; ++j) tile[j] = half_to_float(u16_at(p + 2 * j));
    return tile;
  }
};

struct DecBF16Avx2 {
  static constexpr int kBlock = 1;
  static constexpr std::size_t kBytes = 2;
  QKV_SIMD static const float* run(const unsigned char* row, int64_t k0, int L, float* tile) {
    const unsigned char* p = row + 2 * k0;
    int j = 0;
    for (; j + 8 <= L; j += 8) {
      const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2 * j)));
      _mm256_store_ps(tile + j, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
    }
    for (; j < L; ++j) {
      const uint32_t bits = uint32_t(u16_at(p + 2 * j)) << 16;
      std::memcpy(tile + j, &bits, 4);
    }
    return tile;
  }
};

// Q8_0, Q4_0, Q4_K (and Q2_K, Q3_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS: qblock_decode_bytes.hpp) hand their vectors
// straight to the accumulators (kDirect): acc(ja, wa, jb, wb).
struct DecQ8_0Avx2 {
  static constexpr int kBlock = 32;
  static constexpr std::size_t kBytes = 34;
  static constexpr bool kDirect = true;
  template <class F>
  QKV_SIMD static void visit(const unsigned char* row, int64_t k0, int L, F& acc) {
    const unsigned char* b = row + std::size_t(k0 / kBlock) * kBytes;
    for (int i = 0; i < L; i += kBlock, b += kBytes) {
      const __m256 d = _mm256_set1_ps(f16c_scale(b));
      for (int h = 0; h < 4; h += 2)
        acc(i + 8 * h, _mm256_mul_ps(_mm256_cvtepi32_ps(i8x8(b + 2 + 8 * h)), d), i + 8 * h + 8,
            _mm256_mul_ps(_mm256_cvtepi32_ps(i8x8(b + 10 + 8 * h)), d));
    }
  }
};

struct DecQ4_0Avx2 {
  static constexpr int kBlock = 32;
  static constexpr std::size_t kBytes = 18;
  static constexpr bool kDirect = true;
  template <class F>
  QKV_SIMD static void visit(const unsigned char* row, int64_t k0, int L, F& acc) {
    const unsigned char* b = row + std::size_t(k0 / kBlock) * kBytes;
    const __m256i mask = _mm256_set1_epi32(15), eight = _mm256_set1_epi32(8);
    for (int i = 0; i < L; i += kBlock, b += kBytes) {
      const __m256 d = _mm256_set1_ps(f16c_scale(b));
      for (int h = 0; h < 2; ++h) {
        const __m256i q = u8x8(b + 2 + 8 * h);
        const __m256i lo = _mm256_sub_epi32(_mm256_and_si256(q, mask), eight);
        const __m256i hi = _mm256_sub_epi32(_mm256_srli_epi32(q, 4), eight);
        acc(i + 8 * h, _mm256_mul_ps(_mm256_cvtepi32_ps(lo), d), i + 16 + 8 * h,
            _mm256_mul_ps(_mm256_cvtepi32_ps(hi), d));
      }
    }
  }
};

// The scales and mins of all L / 256 blocks decoded first, 8 at a time, and stored (q4k_scales): decoded
// per block they stalled it (+25 %, one thread, L2-resident rows); each then broadcast from memory. Each
// weight (d·sc)·q − dmin·m by one FMA: d·sc has at most 17 significant bits (an 11-bit half times a 6-bit
// integer) and q 4, so (d·sc)·q is exact and the fused subtraction rounds as dequantize_row's separate one
// (for infinite or NaN scales too: the exact product is then the rounded one).
struct DecQ4_KAvx2 {
  static constexpr int kBlock = 256;
  static constexpr std::size_t kBytes = 144;
  static constexpr bool kDirect = true;
  static constexpr int kSpan = 16 * kBlock;
  template <class F>
  QKV_SIMD static void visit(const unsigned char* row, int64_t k0, int L, F& acc) {
    const unsigned char* b = row + std::size_t(k0 / kBlock) * kBytes;
    alignas(32) float ds[kSpan / 32], ms[kSpan / 32];
    const int nb = L / kBlock;
    q4k_scales_of_blocks(b, nb, ds, ms);
    const __m256i mask = _mm256_set1_epi32(15);
    for (int i = 0; i < nb; ++i, b += kBytes)
      for (int c = 0; c < 4; ++c) {
        const float *s = ds + 8 * i + 2 * c, *m = ms + 8 * i + 2 * c;
        const __m256 d1 = _mm256_broadcast_ss(s), m1 = _mm256_broadcast_ss(m);
        const __m256 d2 = _mm256_broadcast_ss(s + 1), m2 = _mm256_broadcast_ss(m + 1);
        for (int h = 0; h < 4; ++h) {
          const __m256i q = u8x8(b + 16 + 32 * c + 8 * h);
          const __m256 lo = _mm256_cvtepi32_ps(_mm256_and_si256(q, mask));
          const __m256 hi = _mm256_cvtepi32_ps(_mm256_srli_epi32(q, 4));
          const int j = kBlock * i + 64 * c + 8 * h;
          acc(j, _mm256_fmsub_ps(d1, lo, m1), j + 32, _mm256_fmsub_ps(d2, hi, m2));
        }
      }
  }
};

// The float side of qblock_decode_bytes.hpp's decoders: 8 lanes.
struct Avx2Lanes {
  static constexpr int W = 8;
  QKV_SIMD static __m256 set1f(float v) { return _mm256_set1_ps(v); }
  QKV_SIMD static __m256 mul(__m256 a, __m256 b) { return _mm256_mul_ps(a, b); }
  QKV_SIMD static __m256 subf(__m256 a, __m256 b) { return _mm256_sub_ps(a, b); }
  QKV_SIMD static __m256 addf(__m256 a, __m256 b) { return _mm256_add_ps(a, b); }
  template <int G>  // int8 lanes 8G.. of 32 as floats
  QKV_SIMD static __m256 widen(__m256i v) {
    const __m128i h = _mm256_extracti128_si256(v, G / 2);
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(G % 2 ? _mm_srli_si128(h, 8) : h));
  }
};

struct Avx2Decoders : PlainDecoders {
  using F16 = DecF16Avx2;
  using BF16 = DecBF16Avx2;
  using Q8_0 = DecQ8_0Avx2;
  using Q4_0 = DecQ4_0Avx2;
  using Q4_K = DecQ4_KAvx2;
  using Q2_K = DecQ2_KBytes<Avx2Lanes>;
  using Q3_K = DecQ3_KBytes<Avx2Lanes>;
  using Q5_K = DecQ5_KBytes<Avx2Lanes>;
  using Q6_K = DecQ6_KBytes<Avx2Lanes>;
  using IQ4_NL = DecIQ4_NLBytes<Avx2Lanes>;
  using IQ4_XS = DecIQ4_XSBytes<Avx2Lanes>;
  using Q4_1 = DecLegacy32Bytes<Avx2Lanes, 20, 0, 4, true>;
  using Q5_0 = DecLegacy32Bytes<Avx2Lanes, 22, 2, 6, false>;
  using Q5_1 = DecLegacy32Bytes<Avx2Lanes, 24, 4, 8, true>;
};

}  // namespace
}  // namespace qkv::io::qdetail
