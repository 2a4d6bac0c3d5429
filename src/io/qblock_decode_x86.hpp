// What the AVX2 and AVX-512 decoders of ggml blocks share (qblock_decode_avx2.hpp and
// qblock_decode_avx512.hpp include it first; SSE, AVX2 and F16C instructions only, so each ISA's
// translation unit compiles it for its own target): the binary16 scale of a block, Q4_K's 8 scales and
// mins of a block decoded 8 at a time, and the barrier that keeps stored scales in memory. The includer
// defines QKV_SIMD and includes <immintrin.h> and qblock_decode.hpp.
#pragma once

namespace qkv::io::qdetail {
namespace {

// A block's binary16 scale by VCVTPH2PS (exact for every value, as half_to_float).
QKV_SIMD inline float f16c_scale(const unsigned char* p) {
  return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(u16_at(p))));
}

// A tile's scales are converted first and stored, and each is then broadcast from memory (VBROADCASTSS
// from memory, or AVX-512's embedded broadcast, is a load: no shuffle unit). The empty asm keeps the
// compiler from forwarding the stored values into register broadcasts.
#define QKV_SCALES_IN_MEMORY() asm volatile("" ::: "memory")

// d·sc (ds) and dmin·m (ms) of a Q4_K block's 8 sub-blocks, stored: the 6-bit fields of its 12 scale bytes
// u0, u1, u2 gathered four at a time in 32-bit lanes (ggml's kmask shuffle; the same fields as scale_min):
// [u0 & 0x3f.., (u2 & 0x0f..) | (u0 >> 2 & 0x30..), u1 & 0x3f.., (u2 >> 4 & 0x0f..) | (u1 >> 2 & 0x30..)],
// widened, converted and multiplied 8 at a time — each product the IEEE one of dequantize_row. Reads
// bytes 4..19 of the block (its scales and 4 bytes of its nibbles).
QKV_SIMD inline void q4k_scales(const unsigned char* b, float* ds, float* ms) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 4));
  const __m128i p = _mm_shuffle_epi32(v, _MM_SHUFFLE(1, 1, 0, 0));                                 // u0 u0 u1 u1
  const __m128i q = _mm_srlv_epi32(_mm_shuffle_epi32(v, _MM_SHUFFLE(2, 2, 2, 2)), _mm_setr_epi32(0, 0, 0, 4));
  const __m128i lo = _mm_and_si128(p, _mm_set1_epi32(0x3f3f3f3f));
  const __m128i hi = _mm_or_si128(_mm_and_si128(q, _mm_set1_epi32(0x0f0f0f0f)),
                                  _mm_and_si128(_mm_srli_epi32(p, 2), _mm_set1_epi32(0x30303030)));
  const __m128i f = _mm_blend_epi32(lo, hi, 0b1010);  // sc[0..7], m[0..7]
  const __m128 dd = _mm_cvtph_ps(_mm_cvtsi32_si128(int(uint32_t(u16_at(b)) | uint32_t(u16_at(b + 2)) << 16)));
  const __m256 d = _mm256_broadcastss_ps(dd), dmin = _mm256_broadcastss_ps(_mm_movehdup_ps(dd));
  _mm256_store_ps(ds, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(f))));
  _mm256_store_ps(ms, _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(f, 8)))));
}

// The scales and mins of nb consecutive Q4_K blocks (ds, ms: 8 each per block), then the barrier that keeps
// them in memory for the broadcasts.
QKV_SIMD inline void q4k_scales_of_blocks(const unsigned char* b, int nb, float* ds, float* ms) {
  for (int i = 0; i < nb; ++i) q4k_scales(b + i * DecQ4_K::kBytes, ds + 8 * i, ms + 8 * i);
  QKV_SCALES_IN_MEMORY();
}

}  // namespace
}  // namespace qkv::io::qdetail
