// AVX-512 decoders of ggml blocks for the fused kernels (qmatmul_avx512.cpp): the same values as
// qblock_decode.hpp's plain loops (dequantize_row's arithmetic: an int converted to float, times the
// block's float scale, minus its float min for Q4_K — each a separately rounded IEEE operation), written
// with intrinsics because the compiler's vectorisation of those loops was 2–4× slower. The includer
// defines QKV_SIMD and includes <immintrin.h> and qblock_decode.hpp.
#pragma once

namespace qkv::io::qdetail {
namespace {

// 16 bytes -> 16 int32 lanes (zero-extended)
QKV_SIMD inline __m512i u8x16(const unsigned char* p) {
  return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

struct DecF16Avx512 {
  static constexpr int kBlock = 1;
  static constexpr std::size_t kBytes = 2;
  QKV_SIMD static const float* run(const unsigned char* row, int64_t k0, int L, float* tile) {
    const unsigned char* p = row + 2 * k0;
    int j = 0;
    for (; j + 16 <= L; j += 16)  // VCVTPH2PS: exact for every binary16 value
      _mm512_store_ps(tile + j, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2 * j))));
    for (; j < L; ++j) tile[j] = half_to_float(u16_at(p + 2 * j));
    return tile;
  }
};

struct DecBF16Avx512 {
  static constexpr int kBlock = 1;
  static constexpr std::size_t kBytes = 2;
  QKV_SIMD static const float* run(const unsigned char* row, int64_t k0, int L, float* tile) {
    const unsigned char* p = row + 2 * k0;
    int j = 0;
    for (; j + 16 <= L; j += 16) {
      const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2 * j)));
      _mm512_store_ps(tile + j, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
    }
    for (; j < L; ++j) {
      const uint32_t bits = uint32_t(u16_at(p + 2 * j)) << 16;
      std::memcpy(tile + j, &bits, 4);
    }
    return tile;
  }
};

// Q8_0, Q4_0 and Q4_K hand their vectors straight to the accumulators (kDirect): acc(ja, wa, jb, wb).
struct DecQ8_0Avx512 {
  static constexpr int kBlock = 32;
  static constexpr std::size_t kBytes = 34;
  static constexpr bool kDirect = true;
  template <class F>
  QKV_SIMD static void visit(const unsigned char* row, int64_t k0, int L, F& acc) {
    const unsigned char* b = row + std::size_t(k0 / kBlock) * kBytes;
    for (int i = 0; i < L; i += kBlock, b += kBytes) {
      const __m512 d = _mm512_set1_ps(half_to_float(u16_at(b)));
      const __m512i q0 = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2)));
      const __m512i q1 = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 18)));
      acc(i, _mm512_mul_ps(_mm512_cvtepi32_ps(q0), d), i + 16, _mm512_mul_ps(_mm512_cvtepi32_ps(q1), d));
    }
  }
};

struct DecQ4_0Avx512 {
  static constexpr int kBlock = 32;
  static constexpr std::size_t kBytes = 18;
  static constexpr bool kDirect = true;
  template <class F>
  QKV_SIMD static void visit(const unsigned char* row, int64_t k0, int L, F& acc) {
    const unsigned char* b = row + std::size_t(k0 / kBlock) * kBytes;
    const __m512i mask = _mm512_set1_epi32(15), eight = _mm512_set1_epi32(8);
    for (int i = 0; i < L; i += kBlock, b += kBytes) {
      const __m512 d = _mm512_set1_ps(half_to_float(u16_at(b)));
      const __m512i q = u8x16(b + 2);
      const __m512i lo = _mm512_sub_epi32(_mm512_and_si512(q, mask), eight);
      const __m512i hi = _mm512_sub_epi32(_mm512_srli_epi32(q, 4), eight);
      acc(i, _mm512_mul_ps(_mm512_cvtepi32_ps(lo), d), i + 16, _mm512_mul_ps(_mm512_cvtepi32_ps(hi), d));
    }
  }
};

struct DecQ4_KAvx512 {
  static constexpr int kBlock = 256;
  static constexpr std::size_t kBytes = 144;
  static constexpr bool kDirect = true;
  template <class F>
  QKV_SIMD static void visit(const unsigned char* row, int64_t k0, int, F& acc) {
    const unsigned char* b = row + std::size_t(k0 / kBlock) * kBytes;
    const float d = half_to_float(u16_at(b)), dmin = half_to_float(u16_at(b + 2));
    const __m512i mask = _mm512_set1_epi32(15);
    for (int c = 0; c < 4; ++c) {
      int sc, m;
      scale_min(2 * c, b + 4, &sc, &m);
      const __m512 d1 = _mm512_set1_ps(d * float(sc)), m1 = _mm512_set1_ps(dmin * float(m));
      scale_min(2 * c + 1, b + 4, &sc, &m);
      const __m512 d2 = _mm512_set1_ps(d * float(sc)), m2 = _mm512_set1_ps(dmin * float(m));
      for (int h = 0; h < 2; ++h) {
        const __m512i q = u8x16(b + 16 + 32 * c + 16 * h);
        const __m512 lo = _mm512_cvtepi32_ps(_mm512_and_si512(q, mask));
        const __m512 hi = _mm512_cvtepi32_ps(_mm512_srli_epi32(q, 4));
        acc(64 * c + 16 * h, _mm512_sub_ps(_mm512_mul_ps(d1, lo), m1), 64 * c + 32 + 16 * h,
            _mm512_sub_ps(_mm512_mul_ps(d2, hi), m2));
      }
    }
  }
};

struct Avx512Decoders : PlainDecoders {
  using F16 = DecF16Avx512;
  using BF16 = DecBF16Avx512;
  using Q8_0 = DecQ8_0Avx512;
  using Q4_0 = DecQ4_0Avx512;
  using Q4_K = DecQ4_KAvx512;
};

}  // namespace
}  // namespace qkv::io::qdetail
