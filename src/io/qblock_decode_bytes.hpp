// The x86 decoders of the K-quants but Q4_K (Q2_K, Q3_K, Q5_K, Q6_K), of IQ4_NL / IQ4_XS and of Q4_1 / Q5_0 / Q5_1
// for the fused kernels, once for AVX2 and AVX-512 (qblock_decode_avx2.hpp and qblock_decode_avx512.hpp include it
// after their f16c_scale): the bit work — Q2_K/Q3_K's 2-bit field f of qs[32n + l] (value 128n + 32f + l) and Q3_K's
// high bit (bit 4n + f of hmask[l]), Q5_K's nibbles and 5th bits, Q6_K's nibbles and 2-bit fields — on 32 byte lanes
// at once, the int8 codes then widened W at a time (I::widen<G>: lanes W·G.. as floats). Each weight is
// dequantize_row's (rows_q2_k, rows_q3_k, rows_q5_k, rows_q6_k): an int converted to float, times the sub-block's
// float scale (minus its float min for Q2_K and Q5_K), the same IEEE operations, so the same bits. The scales of a
// block are computed first, 8 at a time, and kept in memory (qblock_decode_x86.hpp's barrier) for the broadcasts. I
// is the ISA's float lanes: W, set1f, mul, subf, addf, widen. (On int32 lanes, as before, Q3_K and Q6_K ran at
// 60–75 % of the speed of this.) IQ4_NL / IQ4_XS look their nibbles up in the codebook (PSHUFB); Q4_1 / Q5_0 / Q5_1
// take their 5th bits from the 32-bit qh (fifth_bits32) and add the min or subtract 16.
#pragma once

namespace qkv::io::qdetail {
namespace {

// 8 bytes of v (from byte 0 or 8) widened, converted and multiplied by d: d·float(byte) in 8 float lanes.
template <int From>
QKV_SIMD QKV_FORCE_INLINE __m256 times_bytes(float d, __m128i v) {
  return _mm256_mul_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(v, From))));
}

// Q2_K's 16 d·sc (dl) and dmin·m (ml): the nibbles of its 16 scale bytes, 8 at a time.
QKV_SIMD QKV_FORCE_INLINE void q2k_scales(const unsigned char* b, float d, float dmin, float* dl, float* ml) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b)), k15 = _mm_set1_epi8(15);
  const __m128i sc = _mm_and_si128(v, k15), m = _mm_and_si128(_mm_srli_epi16(v, 4), k15);
  _mm256_store_ps(dl, times_bytes<0>(d, sc));
  _mm256_store_ps(dl + 8, times_bytes<8>(d, sc));
  _mm256_store_ps(ml, times_bytes<0>(dmin, m));
  _mm256_store_ps(ml + 8, times_bytes<8>(dmin, m));
  QKV_SCALES_IN_MEMORY();
}

// Q3_K's 16 d·(sc − 32): low 4 bits from the nibbles of bytes 0..7 (scales 0..7 low, 8..15 high), the top
// 2 bits of scale 4k + i from bits 2k of byte 8 + i (bytes 8..11 in every 32-bit lane, shifted by 0, 2,
// 4, 6). The 12 bytes are loaded as 8 + 4: a load of 16 would read past the last block of a tensor (and
// a copy through the stack stalls on store forwarding).
QKV_SIMD QKV_FORCE_INLINE void q3k_scales(const unsigned char* b, float d, float* dl) {
  int32_t hi4;
  std::memcpy(&hi4, b + 8, 4);
  const __m128i v = _mm_insert_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b)), hi4, 2);
  const __m128i k15 = _mm_set1_epi8(15);
  const __m128i low = _mm_unpacklo_epi64(_mm_and_si128(v, k15), _mm_and_si128(_mm_srli_epi16(v, 4), k15));
  const __m128i top =
      _mm_and_si128(_mm_srlv_epi32(_mm_shuffle_epi32(v, _MM_SHUFFLE(2, 2, 2, 2)), _mm_setr_epi32(0, 2, 4, 6)),
                    _mm_set1_epi8(3));
  const __m128i sc = _mm_sub_epi8(_mm_or_si128(low, _mm_slli_epi32(top, 4)), _mm_set1_epi8(32));  // −32..31
  const __m256 dd = _mm256_set1_ps(d);
  _mm256_store_ps(dl, _mm256_mul_ps(dd, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc))));
  _mm256_store_ps(dl + 8, _mm256_mul_ps(dd, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(sc, 8)))));
  QKV_SCALES_IN_MEMORY();
}

// The 2-bit field F of 32 bytes (epi16 shifts: the bits a byte receives from its neighbour lie above
// the mask).
template <int F>
QKV_SIMD QKV_FORCE_INLINE __m256i field2(__m256i a) {
  return _mm256_and_si256(_mm256_srli_epi16(a, 2 * F), _mm256_set1_epi8(3));
}

// Bit H of each of 32 bytes moved to bit P: 1 << P or 0 (epi16 shifts: the bits a byte receives from its
// neighbour never land on bit P).
template <int H, int P>
QKV_SIMD QKV_FORCE_INLINE __m256i bit_at(__m256i e) {
  if constexpr (H <= P)
    return _mm256_and_si256(_mm256_slli_epi16(e, P - H), _mm256_set1_epi8(char(1 << P)));
  else
    return _mm256_and_si256(_mm256_srli_epi16(e, H - P), _mm256_set1_epi8(char(1 << P)));
}

// 32 int8 weight codes of values j.. (sub-blocks of Sub values from s) to the accumulators, W lanes at a
// time: w(lanes, scale index) turns the widened, converted lanes into weights.
template <class I, int Sub = 16, int G = 0, class Acc, class Wt>
QKV_SIMD QKV_FORCE_INLINE void emit32(__m256i q, int j, int s, Acc& acc, const Wt& w) {
  constexpr int W = I::W;
  if constexpr (G < 32 / W) {
    acc(j + W * G, w(I::template widen<G>(q), s + W * G / Sub), j + W * (G + 1),
        w(I::template widen<G + 1>(q), s + W * (G + 1) / Sub));
    emit32<I, Sub, G + 2>(q, j, s, acc, w);
  }
}

template <class I>
struct DecQ2_KBytes {
  static constexpr int kBlock = 256;
  static constexpr std::size_t kBytes = 84;
  static constexpr bool kDirect = true;
  template <class F>
  QKV_SIMD static QKV_FORCE_INLINE void visit(const unsigned char* row, int64_t k0, int, F& acc) {
    const unsigned char* b = row + std::size_t(k0 / kBlock) * kBytes;
    const float d = f16c_scale(b + 80), dmin = f16c_scale(b + 82);
    alignas(32) float dl[16], ml[16];
    q2k_scales(b, d, dmin, dl, ml);
    const auto w = [&](auto q, int t)
                       QKV_SIMD QKV_LAMBDA_INLINE { return I::subf(I::mul(I::set1f(dl[t]), q), I::set1f(ml[t])); };
    for (int n = 0; n < 2; ++n) {
      const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16 + 32 * n));
      emit32<I>(field2<0>(a), 128 * n, 8 * n, acc, w);
      emit32<I>(field2<1>(a), 128 * n + 32, 8 * n + 2, acc, w);
      emit32<I>(field2<2>(a), 128 * n + 64, 8 * n + 4, acc, w);
      emit32<I>(field2<3>(a), 128 * n + 96, 8 * n + 6, acc, w);
    }
  }
};

template <class I>
struct DecQ3_KBytes {
  static constexpr int kBlock = 256;
  static constexpr std::size_t kBytes = 110;
  static constexpr bool kDirect = true;
  // q − 4·!high of field F, high bit H, as int8: −4..3
  template <int F, int H>
  QKV_SIMD static QKV_FORCE_INLINE __m256i code(__m256i a, __m256i e) {
    return _mm256_sub_epi8(_mm256_or_si256(field2<F>(a), bit_at<H, 2>(e)), _mm256_set1_epi8(4));
  }
  template <int N, class Acc, class Wt>
  QKV_SIMD static QKV_FORCE_INLINE void chunk(const unsigned char* b, __m256i e, Acc& acc, const Wt& w) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 32 + 32 * N));
    emit32<I>(code<0, 4 * N>(a, e), 128 * N, 8 * N, acc, w);
    emit32<I>(code<1, 4 * N + 1>(a, e), 128 * N + 32, 8 * N + 2, acc, w);
    emit32<I>(code<2, 4 * N + 2>(a, e), 128 * N + 64, 8 * N + 4, acc, w);
    emit32<I>(code<3, 4 * N + 3>(a, e), 128 * N + 96, 8 * N + 6, acc, w);
  }
  template <class F>
  QKV_SIMD static QKV_FORCE_INLINE void visit(const unsigned char* row, int64_t k0, int, F& acc) {
    const unsigned char* b = row + std::size_t(k0 / kBlock) * kBytes;
    alignas(32) float dl[16];
    q3k_scales(b + 96, f16c_scale(b + 108), dl);
    const auto w = [&](auto q, int t) QKV_SIMD QKV_LAMBDA_INLINE { return I::mul(I::set1f(dl[t]), q); };
    const __m256i e = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b));
    chunk<0>(b, e, acc, w);
    chunk<1>(b, e, acc, w);
  }
};

// Q5_K: Q4_K's nibbles and 6-bit scales and mins (q4k_scales), the 5th bit of value l of sub-block j
// from bit j of qh[l]; x = (d·sc)·float(q) − dmin·m per sub-block of 32 (rows_q5_k).
template <class I>
struct DecQ5_KBytes {
  static constexpr int kBlock = 256;
  static constexpr std::size_t kBytes = 176;
  static constexpr bool kDirect = true;
  template <int C, class Acc, class Wt>
  QKV_SIMD static QKV_FORCE_INLINE void chunk(const unsigned char* b, __m256i e, Acc& acc, const Wt& w) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 48 + 32 * C)),
                  k15 = _mm256_set1_epi8(15);
    const __m256i lo = _mm256_or_si256(_mm256_and_si256(a, k15), bit_at<2 * C, 4>(e));
    const __m256i hi =
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 4), k15), bit_at<2 * C + 1, 4>(e));
    emit32<I, 32>(lo, 64 * C, 2 * C, acc, w);
    emit32<I, 32>(hi, 64 * C + 32, 2 * C + 1, acc, w);
  }
  template <class F>
  QKV_SIMD static QKV_FORCE_INLINE void visit(const unsigned char* row, int64_t k0, int, F& acc) {
    const unsigned char* b = row + std::size_t(k0 / kBlock) * kBytes;
    alignas(32) float ds[8], ms[8];
    q4k_scales(b, ds, ms);
    QKV_SCALES_IN_MEMORY();
    const auto w = [&](auto q, int t)
                       QKV_SIMD QKV_LAMBDA_INLINE { return I::subf(I::mul(I::set1f(ds[t]), q), I::set1f(ms[t])); };
    const __m256i e = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16));
    chunk<0>(b, e, acc, w);
    chunk<1>(b, e, acc, w);
    chunk<2>(b, e, acc, w);
    chunk<3>(b, e, acc, w);
  }
};

// Q6_K: q = (ql's nibble | qh's 2-bit field << 4) − 32 on 32 byte lanes ((qh >> s & 3) << 4 written
// (qh << 4 − s) & 0x30: the bits a byte receives from its neighbour miss 0x30), x = (d·sc)·float(q)
// with one int8 scale per 16 weights (rows_q6_k).
template <class I>
struct DecQ6_KBytes {
  static constexpr int kBlock = 256;
  static constexpr std::size_t kBytes = 210;
  static constexpr bool kDirect = true;
  // With 8 float lanes (AVX2), passes of 2 rows: 4 spill (qmatmul_bench 4 256 1: 6.1 -> 7.9 GB/s).
  static constexpr int kMaxRows = I::W == 8 ? 2 : 4;
  template <int N, class Acc, class Wt>
  QKV_SIMD static QKV_FORCE_INLINE void half(const unsigned char* b, Acc& acc, const Wt& w) {
    const auto ld = [&](int at)
                        QKV_SIMD QKV_LAMBDA_INLINE { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + at)); };
    const __m256i a = ld(64 * N), c = ld(64 * N + 32), e = ld(128 + 32 * N);
    const __m256i k15 = _mm256_set1_epi8(15), k30 = _mm256_set1_epi8(0x30), k32 = _mm256_set1_epi8(32);
    const auto code = [&](__m256i lo, __m256i hi) QKV_SIMD QKV_LAMBDA_INLINE {
      return _mm256_sub_epi8(_mm256_or_si256(lo, _mm256_and_si256(hi, k30)), k32);
    };
    emit32<I>(code(_mm256_and_si256(a, k15), _mm256_slli_epi16(e, 4)), 128 * N, 8 * N, acc, w);
    emit32<I>(code(_mm256_and_si256(c, k15), _mm256_slli_epi16(e, 2)), 128 * N + 32, 8 * N + 2, acc, w);
    emit32<I>(code(_mm256_and_si256(_mm256_srli_epi16(a, 4), k15), e), 128 * N + 64, 8 * N + 4, acc, w);
    emit32<I>(code(_mm256_and_si256(_mm256_srli_epi16(c, 4), k15), _mm256_srli_epi16(e, 2)), 128 * N + 96,
              8 * N + 6, acc, w);
  }
  template <class F>
  QKV_SIMD static QKV_FORCE_INLINE void visit(const unsigned char* row, int64_t k0, int, F& acc) {
    const unsigned char* b = row + std::size_t(k0 / kBlock) * kBytes;
    const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 192));
    const __m256 d = _mm256_set1_ps(f16c_scale(b + 208));
    alignas(32) float dl[16];
    _mm256_store_ps(dl, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc))));
    _mm256_store_ps(dl + 8,
                    _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(sc, 8)))));
    QKV_SCALES_IN_MEMORY();
    const auto w = [&](auto q, int t) QKV_SIMD QKV_LAMBDA_INLINE { return I::mul(I::set1f(dl[t]), q); };
    half<0>(b, acc, w);
    half<1>(b, acc, w);
  }
};

// IQ4_NL / IQ4_XS: 32 values (16 bytes of nibbles: value j low in byte j, j + 16 high) looked up in the
// codebook by PSHUFB on byte lanes, x = s·float(K[q]) (rows_iq4_nl, rows_iq4_xs).
// The 32 nibbles of 16 bytes in value order: value j the low nibble of byte j, value j + 16 its high one.
QKV_SIMD QKV_FORCE_INLINE __m256i nibbles32(const unsigned char* qs) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)), k15 = _mm_set1_epi8(15);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), k15), _mm_and_si128(v, k15));
}

QKV_SIMD QKV_FORCE_INLINE __m256i iq4_codes32(const unsigned char* qs) {
  const __m128i book = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4Values));
  return _mm256_shuffle_epi8(_mm256_set_m128i(book, book), nibbles32(qs));
}

template <class I>
struct DecIQ4_NLBytes {
  static constexpr int kBlock = 32;
  static constexpr std::size_t kBytes = 18;
  static constexpr bool kDirect = true;
  template <class F>
  QKV_SIMD static QKV_FORCE_INLINE void visit(const unsigned char* row, int64_t k0, int L, F& acc) {
    const unsigned char* b = row + std::size_t(k0 / kBlock) * kBytes;
    for (int i = 0; i < L / kBlock; ++i, b += kBytes) {
      const float d = f16c_scale(b);
      const auto w = [&](auto q, int) QKV_SIMD QKV_LAMBDA_INLINE { return I::mul(I::set1f(d), q); };
      emit32<I, 32>(iq4_codes32(b + 2), kBlock * i, 0, acc, w);
    }
  }
};

template <class I>
struct DecIQ4_XSBytes {
  static constexpr int kBlock = 256;
  static constexpr std::size_t kBytes = 136;
  static constexpr bool kDirect = true;
  template <class F>
  QKV_SIMD static QKV_FORCE_INLINE void visit(const unsigned char* row, int64_t k0, int, F& acc) {
    const unsigned char* b = row + std::size_t(k0 / kBlock) * kBytes;
    const float d = f16c_scale(b);
    alignas(32) float dl[8];
    for (int sub = 0; sub < 8; ++sub) dl[sub] = d * float(iq4xs_ls(b, sub) - 32);
    QKV_SCALES_IN_MEMORY();
    const auto w = [&](auto q, int t) QKV_SIMD QKV_LAMBDA_INLINE { return I::mul(I::set1f(dl[t]), q); };
    for (int sub = 0; sub < 8; ++sub) emit32<I, 32>(iq4_codes32(b + 8 + 16 * sub), 32 * sub, sub, acc, w);
  }
};

// Q5_0 / Q5_1's 32-bit qh as 32 bytes, 0x10 where value j's bit is set: byte j of the broadcast picks
// qh's byte j / 8 (PSHUFB within each 128-bit half), then bit j % 8 of it.
QKV_SIMD QKV_FORCE_INLINE __m256i fifth_bits32(const unsigned char* qh_at) {
  int32_t qh;
  std::memcpy(&qh, qh_at, 4);
  const __m256i pick = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3,
                                        3, 3, 3, 3, 3);
  const __m256i bit = _mm256_set1_epi64x(int64_t(0x8040201008040201ull));
  const __m256i v = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32(qh), pick), bit);
  return _mm256_and_si256(_mm256_cmpeq_epi8(v, bit), _mm256_set1_epi8(0x10));
}

// Q4_1 / Q5_0 / Q5_1: x = float(q)·d + m (Q4_1, Q5_1) or float(q − 16)·d (Q5_0), 32 values a block
// (rows_q4_1, rows_q5).
template <class I, int Bytes, int QhAt, int QsAt, bool WithMin>
struct DecLegacy32Bytes {
  static constexpr int kBlock = 32;
  static constexpr std::size_t kBytes = Bytes;
  static constexpr bool kDirect = true;
  template <class F>
  QKV_SIMD static QKV_FORCE_INLINE void visit(const unsigned char* row, int64_t k0, int L, F& acc) {
    const unsigned char* b = row + std::size_t(k0 / kBlock) * kBytes;
    for (int i = 0; i < L / kBlock; ++i, b += kBytes) {
      const float d = f16c_scale(b), m = WithMin ? f16c_scale(b + 2) : 0.0f;
      __m256i q = nibbles32(b + QsAt);
      if constexpr (QhAt > 0) q = _mm256_or_si256(q, fifth_bits32(b + QhAt));
      if constexpr (WithMin) {
        const auto w = [&](auto v, int) QKV_SIMD QKV_LAMBDA_INLINE { return I::addf(I::mul(v, I::set1f(d)), I::set1f(m)); };
        emit32<I, 32>(q, kBlock * i, 0, acc, w);
      } else {
        const auto w = [&](auto v, int) QKV_SIMD QKV_LAMBDA_INLINE { return I::mul(v, I::set1f(d)); };
        emit32<I, 32>(_mm256_sub_epi8(q, _mm256_set1_epi8(16)), kBlock * i, 0, acc, w);
      }
    }
  }
};

}  // namespace
}  // namespace qkv::io::qdetail
