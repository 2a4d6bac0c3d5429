// AVX-512 decoders of ggml blocks for the fused kernels (qmatmul_avx512.cpp): the same values as
// qblock_decode.hpp's plain loops (dequantize_row's arithmetic: an int converted to float, times the
// block's float scale, minus its float min for Q4_K — each a separately rounded IEEE operation), written
// with intrinsics because the compiler's vectorisation of those loops was 2–4× slower. The includer
// defines QKV_SIMD and includes <immintrin.h> and qblock_decode.hpp.
#pragma once

#include "io/qblock_decode_x86.hpp"

namespace qkv::io::qdetail {
namespace {

// 16 bytes -> 16 int32 lanes (zero-extended)
QKV_SIMD inline __m512i u8x16(const unsigned char* p) {
  return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

}  // namespace
}  // namespace qkv::io::qdetail

#include "io/qblock_decode_bytes.hpp"

namespace qkv::io::qdetail {
namespace {

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

// Q8_0, Q4_0, Q4_K (and Q2_K, Q3_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS: qblock_decode_bytes.hpp) hand their vectors
// straight to the accumulators (kDirect): acc(ja, wa, jb, wb).
// Zen 4 runs every 512-bit shuffle (VPERMPS, VPMOVZXBD, VBROADCASTSS from a register) on one unit, one per
// cycle, which bounds these decoders; so a tile's block scales are converted first and stored, and each is
// then broadcast from memory (EVEX embedded broadcast: the load unit, no shuffle). The empty asm keeps the
// compiler from forwarding the stored values into register broadcasts. Q4_0 +24 %, Q4_K +16 % (one thread,
// L2-resident rows, bench/qmatmul_bench.cpp's shape). (QKV_SCALES_IN_MEMORY: qblock_decode_x86.hpp.)

struct DecQ8_0Avx512 {
  static constexpr int kBlock = 32;
  static constexpr std::size_t kBytes = 34;
  static constexpr bool kDirect = true;
  template <class F>
  QKV_SIMD static void visit(const unsigned char* row, int64_t k0, int L, F& acc) {
    const unsigned char* b = row + std::size_t(k0 / kBlock) * kBytes;
    alignas(32) float ds[kTile / kBlock];
    for (int i = 0; i < L / kBlock; ++i) ds[i] = f16c_scale(b + i * kBytes);
    QKV_SCALES_IN_MEMORY();
    for (int i = 0; i < L; i += kBlock, b += kBytes) {
      const __m512 d = _mm512_set1_ps(ds[i / kBlock]);
      const __m512i q0 = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2)));
      const __m512i q1 = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 18)));
      acc(i, _mm512_mul_ps(_mm512_cvtepi32_ps(q0), d), i + 16, _mm512_mul_ps(_mm512_cvtepi32_ps(q1), d));
    }
  }
};

// The 4-bit decoders look their weights up: a table of the 16 values a nibble can stand for, each
// computed as dequantize_row does (float(q − 8)·d; (d·sc)·float(q) − dmin·m), one vector per block or
// sub-block, and VPERMPS picks lane i's weight by the low 4 bits of its index — a zero-extended byte
// whose low nibble is the weight's (and, shifted right by 4, the high nibble's): one instruction where
// converting each nibble took four.
QKV_SIMD inline __m512 iota16() {
  return _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
}

struct DecQ4_0Avx512 {
  static constexpr int kBlock = 32;
  static constexpr std::size_t kBytes = 18;
  static constexpr bool kDirect = true;
  template <class F>
  QKV_SIMD static void visit(const unsigned char* row, int64_t k0, int L, F& acc) {
    const unsigned char* b = row + std::size_t(k0 / kBlock) * kBytes;
    alignas(32) float ds[kTile / kBlock];
    for (int i = 0; i < L / kBlock; ++i) ds[i] = f16c_scale(b + i * kBytes);
    QKV_SCALES_IN_MEMORY();
    const __m512 values = _mm512_sub_ps(iota16(), _mm512_set1_ps(8.0f));  // float(q − 8), exact
    for (int i = 0; i < L; i += kBlock, b += kBytes) {
      const __m512 table = _mm512_mul_ps(values, _mm512_set1_ps(ds[i / kBlock]));
      const __m512i q = u8x16(b + 2);
      acc(i, _mm512_permutexvar_ps(q, table), i + 16, _mm512_permutexvar_ps(_mm512_srli_epi32(q, 4), table));
    }
  }
};

// Each sub-block's table (d·sc)·q − dmin·m, q = 0..15, by one FMA: d·sc has at most 17 significant bits
// (an 11-bit half times a 6-bit integer) and q 4, so (d·sc)·q is exact and the fused result is
// dequantize_row's separately rounded one. The scales of all L / 256 blocks are decoded first (as AVX2's).
struct DecQ4_KAvx512 {
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
    const __m512 values = iota16();
    for (int i = 0; i < nb; ++i, b += kBytes)
      for (int c = 0; c < 4; ++c) {
        const float *s = ds + 8 * i + 2 * c, *m = ms + 8 * i + 2 * c;
        const __m512 t1 = _mm512_fmsub_ps(_mm512_set1_ps(s[0]), values, _mm512_set1_ps(m[0]));
        const __m512 t2 = _mm512_fmsub_ps(_mm512_set1_ps(s[1]), values, _mm512_set1_ps(m[1]));
        for (int h = 0; h < 2; ++h) {
          const __m512i q = u8x16(b + 16 + 32 * c + 16 * h);
          const int j = kBlock * i + 64 * c + 16 * h;
          acc(j, _mm512_permutexvar_ps(q, t1), j + 32, _mm512_permutexvar_ps(_mm512_srli_epi32(q, 4), t2));
        }
      }
  }
};

// The float side of qblock_decode_bytes.hpp's decoders: 16 lanes.
struct Avx512Lanes {
  static constexpr int W = 16;
  QKV_SIMD static __m512 set1f(float v) { return _mm512_set1_ps(v); }
  QKV_SIMD static __m512 mul(__m512 a, __m512 b) { return _mm512_mul_ps(a, b); }
  QKV_SIMD static __m512 subf(__m512 a, __m512 b) { return _mm512_sub_ps(a, b); }
  QKV_SIMD static __m512 addf(__m512 a, __m512 b) { return _mm512_add_ps(a, b); }
  template <int G>  // int8 lanes 16G.. of 32 as floats
  QKV_SIMD static __m512 widen(__m256i v) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(v, G)));
  }
};

struct Avx512Decoders : PlainDecoders {
  using F16 = DecF16Avx512;
  using BF16 = DecBF16Avx512;
  using Q8_0 = DecQ8_0Avx512;
  using Q4_0 = DecQ4_0Avx512;
  using Q4_K = DecQ4_KAvx512;
  using Q2_K = DecQ2_KBytes<Avx512Lanes>;
  using Q3_K = DecQ3_KBytes<Avx512Lanes>;
  using Q5_K = DecQ5_KBytes<Avx512Lanes>;
  using Q6_K = DecQ6_KBytes<Avx512Lanes>;
  using IQ4_NL = DecIQ4_NLBytes<Avx512Lanes>;
  using IQ4_XS = DecIQ4_XSBytes<Avx512Lanes>;
  using Q4_1 = DecLegacy32Bytes<Avx512Lanes, 20, 0, 4, true>;
  using Q5_0 = DecLegacy32Bytes<Avx512Lanes, 22, 2, 6, false>;
  using Q5_1 = DecLegacy32Bytes<Avx512Lanes, 24, 4, 8, true>;
};

}  // namespace
}  // namespace qkv::io::qdetail
