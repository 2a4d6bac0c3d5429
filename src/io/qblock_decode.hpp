// Decoders of ggml blocks into a float tile for the fused kernels (qmatmul_simd.hpp): the arithmetic of
// quant.cpp's dequantize_row (each weight bit-identical to it), written as plain fixed-length loops that
// every ISA's translation unit compiles, and vectorises, for its own target (the includer defines
// QKV_SIMD). Decoder::run(row, k0, L, tile) returns the values [k0, k0 + L) of a row: k0 a multiple of
// kTile, L ≤ kTile a multiple of kBlock; F32 returns a pointer into the row itself.
#pragma once
#include <cstdint>
#include <cstring>

// For the helpers the fused kernels call per vector (accumulating, widening, decoding a chunk): inlined
// whatever the size of the unrolled decoder. GCC left some as calls, their accumulators in memory, in the
// AVX2 decoders of Q3_K, Q5_K and Q6_K, which then ran at half of their AVX-512 twins' rate.
#define QKV_FORCE_INLINE __attribute__((always_inline)) inline
#define QKV_LAMBDA_INLINE __attribute__((always_inline))

namespace qkv::io::qdetail {
namespace {

constexpr int kTile = 256;

QKV_SIMD inline uint16_t u16_at(const unsigned char* p) {
  return uint16_t(p[0] | (p[1] << 8));
}

// IEEE binary16 -> binary32, exact for every value: the exponent and mantissa moved into place and
// scaled by 2^112 (exact for normals and subnormals alike), infinities and NaNs built directly.
QKV_SIMD inline float half_to_float(uint16_t h) {
  const uint32_t em = h & 0x7fffu;
  uint32_t bits = em << 13;
  float f;
  std::memcpy(&f, &bits, 4);
  f *= 0x1p112f;
  std::memcpy(&bits, &f, 4);
  if (em >= 0x7c00u) bits = 0x7f800000u | ((em & 0x3ffu) << 13);
  bits |= uint32_t(h & 0x8000u) << 16;
  std::memcpy(&f, &bits, 4);
  return f;
}

struct DecF32 {
  static constexpr int kBlock = 1;
  static constexpr std::size_t kBytes = 4;
  QKV_SIMD static const float* run(const unsigned char* row, int64_t k0, int, float*) {
    return reinterpret_cast<const float*>(row) + k0;
  }
};

struct DecF16 {
  static constexpr int kBlock = 1;
  static constexpr std::size_t kBytes = 2;
  QKV_SIMD static const float* run(const unsigned char* row, int64_t k0, int L, float* tile) {
    uint16_t h[kTile];
    std::memcpy(h, row + 2 * k0, std::size_t(L) * 2);
    for (int j = 0; j < L; ++j) tile[j] = half_to_float(h[j]);
    return tile;
  }
};

struct DecBF16 {
  static constexpr int kBlock = 1;
  static constexpr std::size_t kBytes = 2;
  QKV_SIMD static const float* run(const unsigned char* row, int64_t k0, int L, float* tile) {
    uint16_t h[kTile];
    std::memcpy(h, row + 2 * k0, std::size_t(L) * 2);
    for (int j = 0; j < L; ++j) {
      const uint32_t bits = uint32_t(h[j]) << 16;
      std::memcpy(tile + j, &bits, 4);
    }
    return tile;
  }
};

// x = d · qs (rows_q8_0)
struct DecQ8_0 {
  static constexpr int kBlock = 32;
  static constexpr std::size_t kBytes = 34;
  QKV_SIMD static const float* run(const unsigned char* row, int64_t k0, int L, float* tile) {
    const unsigned char* b = row + std::size_t(k0 / kBlock) * kBytes;
    for (int i = 0; i < L / kBlock; ++i, b += kBytes, tile += kBlock) {
      const float d = half_to_float(u16_at(b));
      int8_t qs[kBlock];
      std::memcpy(qs, b + 2, kBlock);
      for (int j = 0; j < kBlock; ++j) tile[j] = float(qs[j]) * d;
    }
    return tile - L;
  }
};

// x_j = d · ((qs_j & 15) − 8), x_{j+16} = d · ((qs_j >> 4) − 8) (rows_q4_0)
struct DecQ4_0 {
  static constexpr int kBlock = 32;
  static constexpr std::size_t kBytes = 18;
  QKV_SIMD static const float* run(const unsigned char* row, int64_t k0, int L, float* tile) {
    const unsigned char* b = row + std::size_t(k0 / kBlock) * kBytes;
    for (int i = 0; i < L / kBlock; ++i, b += kBytes, tile += kBlock) {
      const float d = half_to_float(u16_at(b));
      uint8_t qs[kBlock / 2];
      std::memcpy(qs, b + 2, kBlock / 2);
      for (int j = 0; j < kBlock / 2; ++j) {
        tile[j] = float((qs[j] & 0x0F) - 8) * d;
        tile[j + kBlock / 2] = float((qs[j] >> 4) - 8) * d;
      }
    }
    return tile - L;
  }
};

// Q4_1 / Q5_0 / Q5_1: 32 values, nibble j low and j + 16 high in qs[j], Q5's 5th bit of value j in bit j of
// the 32-bit qh; x = d·q + m (Q4_1, Q5_1) or d·(q − 16) (Q5_0) (quant.cpp's rows_q4_1, rows_q5).
template <int Bytes, int QhAt, int QsAt, bool WithMin>
struct DecLegacy32 {
  static constexpr int kBlock = 32;
  static constexpr std::size_t kBytes = Bytes;
  QKV_SIMD static const float* run(const unsigned char* row, int64_t k0, int L, float* tile) {
    const unsigned char* b = row + std::size_t(k0 / kBlock) * kBytes;
    for (int i = 0; i < L / kBlock; ++i, b += kBytes, tile += kBlock) {
      const float d = half_to_float(u16_at(b)), m = WithMin ? half_to_float(u16_at(b + 2)) : 0.0f;
      uint32_t qh = 0;
      if constexpr (QhAt > 0) std::memcpy(&qh, b + QhAt, 4);
      for (int j = 0; j < 16; ++j) {
        const int q0 = (b[QsAt + j] & 0x0F) | int(((qh >> j) << 4) & 0x10);
        const int q1 = (b[QsAt + j] >> 4) | int((qh >> (j + 12)) & 0x10);
        if constexpr (WithMin) {
          tile[j] = float(q0) * d + m;
          tile[j + 16] = float(q1) * d + m;
        } else {
          tile[j] = float(q0 - 16) * d;
          tile[j + 16] = float(q1 - 16) * d;
        }
      }
    }
    return tile - L;
  }
};
using DecQ4_1 = DecLegacy32<20, 0, 4, true>;
using DecQ5_0 = DecLegacy32<22, 2, 6, false>;
using DecQ5_1 = DecLegacy32<24, 4, 8, true>;

// Q4_K's 6-bit scale and min of sub-block j (quant.cpp's scale_min_k4).
QKV_SIMD inline void scale_min(int j, const unsigned char* q, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// x = (d·sc)·q − dmin·m per sub-block of 32 (rows_q4_k)
struct DecQ4_K {
  static constexpr int kBlock = 256;
  static constexpr std::size_t kBytes = 144;
  QKV_SIMD static const float* run(const unsigned char* row, int64_t k0, int, float* tile) {
    const unsigned char* b = row + std::size_t(k0 / kBlock) * kBytes;
    const float d = half_to_float(u16_at(b)), dmin = half_to_float(u16_at(b + 2));
    uint8_t q[128];
    std::memcpy(q, b + 16, 128);
    float* y = tile;
    for (int c = 0; c < 4; ++c, y += 64) {
      int sc, m;
      scale_min(2 * c, b + 4, &sc, &m);
      const float d1 = d * float(sc), m1 = dmin * float(m);
      scale_min(2 * c + 1, b + 4, &sc, &m);
      const float d2 = d * float(sc), m2 = dmin * float(m);
      const uint8_t* qc = q + 32 * c;
      for (int l = 0; l < 32; ++l) y[l] = d1 * float(qc[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) y[32 + l] = d2 * float(qc[l] >> 4) - m2;
    }
    return tile;
  }
};

// Q4_K's layout plus qh[32]: the 5th bit of value l of sub-block j in bit j of qh[l] (rows_q5_k)
struct DecQ5_K {
  static constexpr int kBlock = 256;
  static constexpr std::size_t kBytes = 176;
  QKV_SIMD static const float* run(const unsigned char* row, int64_t k0, int, float* tile) {
    const unsigned char* b = row + std::size_t(k0 / kBlock) * kBytes;
    const float d = half_to_float(u16_at(b)), dmin = half_to_float(u16_at(b + 2));
    uint8_t qh[32], q[128];
    std::memcpy(qh, b + 16, 32);
    std::memcpy(q, b + 48, 128);
    float* y = tile;
    for (int c = 0; c < 4; ++c, y += 64) {
      int sc, m;
      scale_min(2 * c, b + 4, &sc, &m);
      const float d1 = d * float(sc), m1 = dmin * float(m);
      scale_min(2 * c + 1, b + 4, &sc, &m);
      const float d2 = d * float(sc), m2 = dmin * float(m);
      const uint8_t* qc = q + 32 * c;
      for (int l = 0; l < 32; ++l) y[l] = d1 * float((qc[l] & 0xF) | (((qh[l] >> (2 * c)) & 1) << 4)) - m1;
      for (int l = 0; l < 32; ++l) y[32 + l] = d2 * float((qc[l] >> 4) | (((qh[l] >> (2 * c + 1)) & 1) << 4)) - m2;
    }
    return tile;
  }
};

// x = (d·sc)·q − dmin·m per sub-block of 16; sc and m the nibbles of scales[j], q the 2-bit field f of
// qs[32n + l] for value 128n + 32f + l (rows_q2_k, quant_low_k.cpp)
struct DecQ2_K {
  static constexpr int kBlock = 256;
  static constexpr std::size_t kBytes = 84;
  QKV_SIMD static const float* run(const unsigned char* row, int64_t k0, int, float* tile) {
    const unsigned char* b = row + std::size_t(k0 / kBlock) * kBytes;
    const float d = half_to_float(u16_at(b + 80)), dmin = half_to_float(u16_at(b + 82));
    uint8_t q[64];
    std::memcpy(q, b + 16, 64);
    for (int n = 0; n < 2; ++n)
      for (int f = 0; f < 4; ++f)
        for (int h = 0; h < 2; ++h) {
          const uint8_t sc = b[8 * n + 2 * f + h];
          const float dl = d * float(sc & 0xF), ml = dmin * float(sc >> 4);
          const uint8_t* qq = q + 32 * n + 16 * h;
          float* y = tile + 128 * n + 32 * f + 16 * h;
          for (int l = 0; l < 16; ++l) y[l] = dl * float((qq[l] >> (2 * f)) & 3) - ml;
        }
    return tile;
  }
};

// x = (d·(sc − 32))·(q − 4·!high) per sub-block of 16: Q2_K's 2-bit field, the high bit of value
// 128n + 32f + l in bit 4n + f of hmask[l], 6-bit scales packed in 12 bytes (rows_q3_k, quant_low_k.cpp)
struct DecQ3_K {
  static constexpr int kBlock = 256;
  static constexpr std::size_t kBytes = 110;
  QKV_SIMD static const float* run(const unsigned char* row, int64_t k0, int, float* tile) {
    const unsigned char* b = row + std::size_t(k0 / kBlock) * kBytes;
    const float d = half_to_float(u16_at(b + 108));
    uint8_t hm[32], q[64], s[12];
    std::memcpy(hm, b, 32);
    std::memcpy(q, b + 32, 64);
    std::memcpy(s, b + 96, 12);
    for (int n = 0; n < 2; ++n)
      for (int f = 0; f < 4; ++f)
        for (int h = 0; h < 2; ++h) {
          const int j = 8 * n + 2 * f + h;
          const int sc =
              ((j < 8 ? s[j] : s[j - 8] >> 4) & 0xF) | (((s[8 + j % 4] >> (2 * (j / 4))) & 3) << 4);
          const float dl = d * float(sc - 32);
          const uint8_t* qq = q + 32 * n + 16 * h;
          const uint8_t* hh = hm + 16 * h;
          float* y = tile + 128 * n + 32 * f + 16 * h;
          for (int l = 0; l < 16; ++l)
            y[l] = dl * float(((qq[l] >> (2 * f)) & 3) - (((hh[l] >> (4 * n + f)) & 1) ? 0 : 4));
        }
    return tile;
  }
};

// ggml's IQ4_NL / IQ4_XS codebook (quant_iq4.cpp's kValues).
constexpr int8_t kIq4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// 32 values as IQ4_NL lays them out: x_j = s·K[qs_j & 15], x_{j+16} = s·K[qs_j >> 4] (rows_iq4_nl)
QKV_SIMD inline void iq4_rows32(const unsigned char* qs, float s, float* y) {
  for (int j = 0; j < 16; ++j) {
    y[j] = s * float(kIq4Values[qs[j] & 0xF]);
    y[j + 16] = s * float(kIq4Values[qs[j] >> 4]);
  }
}

struct DecIQ4_NL {
  static constexpr int kBlock = 32;
  static constexpr std::size_t kBytes = 18;
  QKV_SIMD static const float* run(const unsigned char* row, int64_t k0, int L, float* tile) {
    const unsigned char* b = row + std::size_t(k0 / kBlock) * kBytes;
    for (int i = 0; i < L / kBlock; ++i, b += kBytes) iq4_rows32(b + 2, half_to_float(u16_at(b)), tile + kBlock * i);
    return tile;
  }
};

// IQ4_XS's 6-bit ls of sub-block `sub`: nibble sub % 2 of scales_l[sub / 2] (bytes 4..7), bits 2·sub.. of
// scales_h (bytes 2, 3) on top.
QKV_SIMD inline int iq4xs_ls(const unsigned char* b, int sub) {
  return ((b[4 + sub / 2] >> (4 * (sub % 2))) & 0xF) | (((u16_at(b + 2) >> (2 * sub)) & 3) << 4);
}

// 8 sub-blocks of 32 with dl = d·(ls − 32), each laid out as an IQ4_NL block (rows_iq4_xs)
struct DecIQ4_XS {
  static constexpr int kBlock = 256;
  static constexpr std::size_t kBytes = 136;
  QKV_SIMD static const float* run(const unsigned char* row, int64_t k0, int, float* tile) {
    const unsigned char* b = row + std::size_t(k0 / kBlock) * kBytes;
    const float d = half_to_float(u16_at(b));
    for (int sub = 0; sub < 8; ++sub) iq4_rows32(b + 8 + 16 * sub, d * float(iq4xs_ls(b, sub) - 32), tile + 32 * sub);
    return tile;
  }
};

// x = (d·sc)·(q − 32), q 6 bits from ql's nibble and qh's 2-bit field (rows_q6_k)
struct DecQ6_K {
  static constexpr int kBlock = 256;
  static constexpr std::size_t kBytes = 210;
  QKV_SIMD static const float* run(const unsigned char* row, int64_t k0, int, float* tile) {
    const unsigned char* b = row + std::size_t(k0 / kBlock) * kBytes;
    const float d = half_to_float(u16_at(b + 208));
    uint8_t qs[192];
    std::memcpy(qs, b, 192);
    for (int n = 0; n < 2; ++n) {
      const uint8_t* ql = qs + 64 * n;
      const uint8_t* qh = qs + 128 + 32 * n;
      const auto* sc = reinterpret_cast<const int8_t*>(b + 192 + 8 * n);
      float* y = tile + 128 * n;
      for (int half = 0; half < 2; ++half) {
        const float s1 = d * float(sc[half]), s2 = d * float(sc[half + 2]);
        const float s3 = d * float(sc[half + 4]), s4 = d * float(sc[half + 6]);
        for (int l = 16 * half; l < 16 * half + 16; ++l) {
          y[l] = s1 * float(((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
          y[l + 32] = s2 * float(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
          y[l + 64] = s3 * float(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
          y[l + 96] = s4 * float(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
        }
      }
    }
    return tile;
  }
};

}  // namespace
}  // namespace qkv::io::qdetail
