// GGUF: the (de)quantizers against their element-wise twins and hand-built blocks, the quantizers'
// stated bounds, reader/writer round trips (all 13 value types, nested arrays, every tensor type,
// alignment), and every malformed-file case docs/robustness.md lists.
#include "qkv/io/gguf.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>

#include "io/io_test_util.hpp"
#include "qkv/io/half.hpp"

namespace qkv::io {
namespace {

using test::TempDir;

const GgmlType kSupported[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0,
                               GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,
                               GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K,
                               GgmlType::IQ4_NL, GgmlType::IQ4_XS};
// Dequantized too (read only): what llama.cpp's Q4_K_M / Q5_K_M files also hold.
const GgmlType kReadable[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0,
                              GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q4_1,
                              GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q5_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS};

int64_t block(GgmlType t) {
  return ggml_type_traits(uint32_t(t))->block_size;
}

bool same_bits_or_both_nan(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, 4) == 0;
}

// ---- dequantizers: fast rows == slow twin on arbitrary bytes ----

TEST(GgufQuant, FastRowEqualsElementwiseTwinOnRandomBytes) {
  std::mt19937 rng(7);
  for (GgmlType t : kReadable) {
    const int64_t n = 4 * 256;  // whole blocks of every type
    std::vector<unsigned char> bytes(ggml_row_size(t, n));
    for (int rep = 0; rep < 20; ++rep) {
      for (auto& b : bytes) b = static_cast<unsigned char>(rng());
      if (rep % 2 == 0) {  // keep halves finite half the time (random exponents are mostly fine anyway)
        for (size_t i = 0; i < bytes.size(); ++i)
          if (i % 2 == 1) bytes[i] &= 0x3f;
      }
      std::vector<float> fast(static_cast<size_t>(n));
      dequantize_row(t, bytes.data(), fast.data(), n);
      for (int64_t i = 0; i < n; ++i)
        ASSERT_TRUE(same_bits_or_both_nan(fast[size_t(i)], dequantize_value(t, bytes.data(), i)))
            << ggml_type_name(t) << " value " << i << ": " << fast[size_t(i)] << " vs "
            << dequantize_value(t, bytes.data(), i);
    }
  }
}

TEST(GgufQuant, UnalignedSourceGivesTheSameValues) {
  std::mt19937 rng(3);
  for (GgmlType t : kReadable) {
    const int64_t n = 256;
    std::vector<unsigned char> a(ggml_row_size(t, n)), b(a.size() + 1);
    for (auto& x : a) x = static_cast<unsigned char>(rng() & 0x3f);
    std::memcpy(b.data() + 1, a.data(), a.size());
    std::vector<float> ya(static_cast<size_t>(n)), yb(static_cast<size_t>(n));
    dequantize_row(t, a.data(), ya.data(), n);
    dequantize_row(t, b.data() + 1, yb.data(), n);
    EXPECT_EQ(0, std::memcmp(ya.data(), yb.data(), ya.size() * 4)) << ggml_type_name(t);
  }
}

void put_half(unsigned char* p, float x) {
  const uint16_t h = float_to_f16(x);
  std::memcpy(p, &h, 2);
}

// The read-only types from their definitions (gguf_quant.hpp / quant.cpp), one block each with chosen bits.
TEST(GgufQuant, HandBuiltReadOnlyBlocks) {
  {  // Q4_1: d = 0.5, m = -1; byte j = (j+1) | (15-j)<<4 -> x_j = 0.5(j+1) - 1, x_{j+16} = 0.5(15-j) - 1
    unsigned char b[20];
    put_half(b, 0.5f);
    put_half(b + 2, -1.0f);
    for (int j = 0; j < 16; ++j) b[4 + j] = static_cast<unsigned char>(((j + 1) & 15) | ((15 - j) << 4));
    float y[32];
    dequantize_row(GgmlType::Q4_1, b, y, 32);
    for (int j = 0; j < 16; ++j) {
      EXPECT_EQ(y[j], 0.5f * float((j + 1) & 15) - 1.0f) << j;
      EXPECT_EQ(y[j + 16], 0.5f * float(15 - j) - 1.0f) << j;
    }
  }
  for (bool with_min : {false, true}) {  // Q5_0 / Q5_1: qh = 0x80000001 sets the 5th bit of values 0 and 31
    unsigned char b[24] = {};
    put_half(b, 2.0f);
    const int qh_at = with_min ? 4 : 2;
    if (with_min) put_half(b + 2, 0.25f);
    b[qh_at] = 0x01, b[qh_at + 3] = 0x80;
    for (int j = 0; j < 16; ++j) b[qh_at + 4 + j] = static_cast<unsigned char>(3 | (j << 4));
    float y[32];
    dequantize_row(with_min ? GgmlType::Q5_1 : GgmlType::Q5_0, b, y, 32);
    for (int e = 0; e < 32; ++e) {
      const int q = (e < 16 ? 3 : e - 16) + ((e == 0 || e == 31) ? 16 : 0);
      EXPECT_EQ(y[e], with_min ? 2.0f * float(q) + 0.25f : 2.0f * float(q - 16))
          << (with_min ? "Q5_1 " : "Q5_0 ") << e;
    }
  }
  {  // Q5_K: d = 1, dmin = 0.5; sub-block j: scale j + 1, min j (6-bit packing of Q4_K); nibbles 5 / 9;
     // qh[l] = 0b10100101: the 5th bit for sub-blocks 0, 2, 5 and 7
    unsigned char b[176] = {};
    put_half(b, 1.0f);
    put_half(b + 2, 0.5f);
    unsigned char* sc = b + 4;
    for (int j = 0; j < 4; ++j)
      sc[j] = static_cast<unsigned char>(j + 1), sc[j + 4] = static_cast<unsigned char>(j);
    for (int j = 4; j < 8; ++j) sc[j + 4] = static_cast<unsigned char>((j + 1) | (j << 4));  // low 4 bits
    for (int l = 0; l < 32; ++l) b[16 + l] = 0xA5;
    for (int k = 0; k < 128; ++k) b[48 + k] = 0x95;  // low nibble 5, high nibble 9
    float y[256];
    dequantize_row(GgmlType::Q5_K, b, y, 256);
    for (int e = 0; e < 256; ++e) {
      const int j = e / 32;
      const int q = ((j % 2 == 0) ? 5 : 9) + (((0xA5 >> j) & 1) ? 16 : 0);
      EXPECT_EQ(y[e], 1.0f * float(j + 1) * float(q) - 0.5f * float(j)) << "Q5_K " << e;
    }
  }
}

// Q2_K and Q3_K from ggml's block structs (block_q2_K: scales[16], qs[64], d, dmin; block_q3_K: hmask[32],
// qs[64], scales[12], d), one block each with chosen bits.
TEST(GgufQuant, HandBuiltQ2_KBlock) {
  // d = 0.5, dmin = 0.25; sub-block j: scale (j % 15) + 1, min j; qs[32n + l] = 0b11100100: field f = f,
  // so value e has q = (e % 128) / 32
  unsigned char b[84];
  for (int j = 0; j < 16; ++j) b[j] = static_cast<unsigned char>((j % 15 + 1) | (j << 4));
  for (int k = 0; k < 64; ++k) b[16 + k] = 0xE4;
  put_half(b + 80, 0.5f);
  put_half(b + 82, 0.25f);
  float y[256];
  dequantize_row(GgmlType::Q2_K, b, y, 256);
  for (int e = 0; e < 256; ++e) {
    const int j = e / 16, q = (e % 128) / 32;
    EXPECT_EQ(y[e], 0.5f * float(j % 15 + 1) * float(q) - 0.25f * float(j)) << "Q2_K " << e;
  }
}

TEST(GgufQuant, HandBuiltQ3_KBlock) {
  // d = 2; 6-bit scale of sub-block j = 32 + j − 8 (so −8..7): low 4 bits in the nibbles of scales[j % 8],
  // top 2 bits in field j / 4 of scales[8 + j % 4]; hmask[l] = 0b01010101 sets the high bit of the
  // 32-value groups 0, 2, 4, 6; every 2-bit field 3 (qs 0xFF): q = 3, or 3 − 4 = −1 without the bit
  unsigned char b[110] = {};
  for (int l = 0; l < 32; ++l) b[l] = 0x55;
  for (int k = 0; k < 64; ++k) b[32 + k] = 0xFF;
  for (int j = 0; j < 16; ++j) {
    const int stored = 32 + j - 8;
    b[96 + j % 8] |= static_cast<unsigned char>((stored & 15) << (j < 8 ? 0 : 4));
    b[96 + 8 + j % 4] |= static_cast<unsigned char>((stored >> 4) << (2 * (j / 4)));
  }
  put_half(b + 108, 2.0f);
  float y[256];
  dequantize_row(GgmlType::Q3_K, b, y, 256);
  for (int e = 0; e < 256; ++e) {
    const int j = e / 16, q = (e / 32) % 2 == 0 ? 3 : -1;
    EXPECT_EQ(y[e], 2.0f * float(j - 8) * float(q)) << "Q3_K " << e;
  }
}

// IQ4_NL / IQ4_XS from ggml's block structs (block_iq4_nl: d, qs[16]; block_iq4_xs: d, scales_h, scales_l[4],
// qs[128]) and its codebook kvalues_iq4nl.
TEST(GgufQuant, HandBuiltIQ4Blocks) {
  const int K[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
  {  // d = 0.5; byte j = j | (15 − j) << 4: value j is K[j], value j + 16 is K[15 − j]
    unsigned char b[18];
    put_half(b, 0.5f);
    for (int j = 0; j < 16; ++j) b[2 + j] = static_cast<unsigned char>(j | ((15 - j) << 4));
    float y[32];
    dequantize_row(GgmlType::IQ4_NL, b, y, 32);
    for (int j = 0; j < 16; ++j) {
      EXPECT_EQ(y[j], 0.5f * float(K[j])) << j;
      EXPECT_EQ(y[j + 16], 0.5f * float(K[15 - j])) << j;
    }
  }
  // IQ4_XS: d = 0.25; sub-block s has ls = 32 + s − 4 (so ls − 32 = s − 4): low nibble s % 2 of
  // scales_l[s / 2], top bits 2s of scales_h; every byte of qs 0x5A: low nibble 10, high 5
  unsigned char b[136] = {};
  put_half(b, 0.25f);
  uint16_t h = 0;
  for (int s = 0; s < 8; ++s) {
    const int ls = 32 + s - 4;
    b[4 + s / 2] |= static_cast<unsigned char>((ls & 15) << (4 * (s % 2)));
    h = static_cast<uint16_t>(h | ((ls >> 4) << (2 * s)));
  }
  std::memcpy(b + 2, &h, 2);
  for (int k = 0; k < 128; ++k) b[8 + k] = 0x5A;
  float y[256];
  dequantize_row(GgmlType::IQ4_XS, b, y, 256);
  for (int e = 0; e < 256; ++e)
    EXPECT_EQ(y[e], 0.25f * float(e / 32 - 4) * float(K[e % 32 < 16 ? 10 : 5])) << "IQ4_XS " << e;
}

TEST(GgufQuant, HandBuiltQ8_0Block) {
  unsigned char b[34];
  put_half(b, 0.5f);
  for (int j = 0; j < 32; ++j) b[2 + j] = static_cast<unsigned char>(int8_t(j * 8 - 128));
  float y[32];
  dequantize_row(GgmlType::Q8_0, b, y, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], 0.5f * float(j * 8 - 128)) << j;
}

TEST(GgufQuant, HandBuiltQ4_0Block) {
  unsigned char b[18];
  put_half(b, 2.0f);
  for (int j = 0; j < 16; ++j) b[2 + j] = static_cast<unsigned char>(j | ((15 - j) << 4));
  float y[32];
  dequantize_row(GgmlType::Q4_0, b, y, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 2.0f * float(j - 8)) << j;            // low nibbles: values 0..15
    EXPECT_EQ(y[j + 16], 2.0f * float(15 - j - 8)) << j;  // high nibbles: values 16..31
  }
}

TEST(GgufQuant, HandBuiltQ4_KBlock) {
  // d = 1, dmin = 0.5; sub-block j has scale sc_j = 40 + j and min m_j = 33 + 3j (6 bits each, so
  // sub-blocks 4..7 need the split encoding); quant of value e is e % 16.
  unsigned char b[144] = {};
  put_half(b, 1.0f);
  put_half(b + 2, 0.5f);
  int sc[8], mn[8];
  for (int j = 0; j < 8; ++j) sc[j] = 40 + j, mn[j] = 33 + 3 * j;
  unsigned char* s = b + 4;
  for (int j = 0; j < 4; ++j) {
    s[j] = static_cast<unsigned char>(sc[j] | ((sc[j + 4] >> 4) << 6));
    s[j + 4] = static_cast<unsigned char>(mn[j] | ((mn[j + 4] >> 4) << 6));
    s[j + 8] = static_cast<unsigned char>((sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4));
  }
  unsigned char* qs = b + 16;
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l)
      qs[32 * c + l] = static_cast<unsigned char>(((64 * c + l) % 16) | (((64 * c + 32 + l) % 16) << 4));
  float y[256];
  dequantize_row(GgmlType::Q4_K, b, y, 256);
  for (int e = 0; e < 256; ++e) {
    const int j = e / 32;
    EXPECT_EQ(y[e], float(sc[j]) * float(e % 16) - 0.5f * float(mn[j])) << e;
  }
}

TEST(GgufQuant, HandBuiltQ6_KBlock) {
  // d = 0.25, scale of sub-block j (16 values) = j - 8, 6-bit quant of value e = (7 e) % 64.
  unsigned char b[210] = {};
  int q[256];
  for (int e = 0; e < 256; ++e) q[e] = (7 * e) % 64;
  for (int n = 0; n < 2; ++n)
    for (int l = 0; l < 32; ++l) {
      const int q1 = q[128 * n + l], q2 = q[128 * n + l + 32], q3 = q[128 * n + l + 64],
                q4 = q[128 * n + l + 96];
      b[64 * n + l] = static_cast<unsigned char>((q1 & 15) | ((q3 & 15) << 4));
      b[64 * n + l + 32] = static_cast<unsigned char>((q2 & 15) | ((q4 & 15) << 4));
      b[128 + 32 * n + l] =
          static_cast<unsigned char>((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
    }
  for (int j = 0; j < 16; ++j) b[192 + j] = static_cast<unsigned char>(int8_t(j - 8));
  put_half(b + 208, 0.25f);
  float y[256];
  dequantize_row(GgmlType::Q6_K, b, y, 256);
  for (int e = 0; e < 256; ++e) EXPECT_EQ(y[e], 0.25f * float(e / 16 - 8) * float(q[e] - 32)) << e;
}

// ---- quantizers ----

TEST(GgufQuant, Q8_0MatchesGgmlReference) {
  // amax 127 -> d = 1 exactly, qs = round(x) (halves away from zero, as roundf).
  float x[32];
  for (int j = 0; j < 32; ++j) x[j] = float(j) * 4.0f - 64.5f;
  x[5] = 127.0f;
  unsigned char b[34];
  quantize_row(GgmlType::Q8_0, x, b, 32);
  uint16_t d;
  std::memcpy(&d, b, 2);
  EXPECT_EQ(f16_to_float(d), 1.0f);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(int8_t(b[2 + j]), int(std::round(x[j]))) << j;
  EXPECT_EQ(int8_t(b[2 + 0]), -65);  // -64.5 rounds away from zero
}

TEST(GgufQuant, Q4_0MatchesGgmlReference) {
  // x_j = j - 16: the largest magnitude is -16 (first), so d = -16 / -8 = 2 and q_j = min(15, (int)((j-16)/2
  // + 8.5)).
  float x[32];
  for (int j = 0; j < 32; ++j) x[j] = float(j - 16);
  unsigned char b[18];
  quantize_row(GgmlType::Q4_0, x, b, 32);
  uint16_t d;
  std::memcpy(&d, b, 2);
  EXPECT_EQ(f16_to_float(d), 2.0f);
  for (int j = 0; j < 32; ++j) {
    const int want = std::min(15, int(float(j - 16) * 0.5f + 8.5f));
    const int got = j < 16 ? (b[2 + j] & 15) : (b[2 + j - 16] >> 4);
    EXPECT_EQ(got, want) << j;
  }
  float y[32];
  dequantize_row(GgmlType::Q4_0, b, y, 32);
  EXPECT_EQ(y[0], -16.0f);
  EXPECT_EQ(y[31], 14.0f);  // +15 clamps to code 15 -> 7 * 2
}

TEST(GgufQuant, AllZeroBlocksStayZero) {
  std::vector<float> x(256, 0.0f), y(256, 1.0f);
  for (GgmlType t : kSupported) {
    std::vector<unsigned char> b(ggml_row_size(t, 256));
    quantize_row(t, x.data(), b.data(), 256);
    dequantize_row(t, b.data(), y.data(), 256);
    for (float v : y) ASSERT_EQ(v, 0.0f) << ggml_type_name(t);
  }
}

// The bound each type states (include/qkv/io/gguf_quant.hpp), per block, from the original values.
double stated_bound(GgmlType t, const float* x, int64_t b0, int64_t len, const unsigned char* block) {
  double amax = 0, lo = 0, hi = -INFINITY;
  for (int64_t i = 0; i < len; ++i)
    amax = std::max(amax, double(std::fabs(x[b0 + i]))), lo = std::min(lo, double(x[b0 + i])),
    hi = std::max(hi, double(x[b0 + i]));
  auto half = [&](size_t off) {
    uint16_t h;
    std::memcpy(&h, block + off, 2);
    return double(f16_to_float(h));
  };
  switch (t) {
    case GgmlType::F32:
      return 0;
    case GgmlType::F16:
      return amax * std::ldexp(1.0, -11) + 6e-8;
    case GgmlType::BF16:
      return amax * std::ldexp(1.0, -8);
    // d/2, plus 127 × d's fp16 rounding (relative 2^-11, or 2^-25 absolute where d is subnormal or
    // underflows)
    case GgmlType::Q8_0:
      return amax / 254 + amax * std::ldexp(1.0, -11) + 127 * std::ldexp(1.0, -25);
    // one step (the clamp at +7) plus 7 × d's fp16 rounding (relative 2^-11), or 8 × 2^-25 absolute
    case GgmlType::Q4_0:
      return amax / 8 * (1 + std::ldexp(1.0, -8)) + 8 * std::ldexp(1.0, -25);
    case GgmlType::Q4_K:
      return 0.5 * ((hi - lo) / 15 + half(0) + half(2) / 15) * (1 + 1e-5) + 1e-30;
    case GgmlType::Q6_K:
      return 0.5 * (amax / 31 + half(208)) * (1 + 1e-5) + 1e-30;
    case GgmlType::Q2_K:
      return 0.5 * ((hi - lo) / 3 + half(80) + half(82) / 3) * (1 + 1e-5) + 1e-30;
    case GgmlType::Q5_K:
      return 0.5 * ((hi - lo) / 31 + half(0) + half(2) / 31) * (1 + 1e-5) + 1e-30;
    // 14 × the step: the step |d| ≥ amax/127 rounded up to binary16 (IQ4_NL), within d of amax/127 (IQ4_XS)
    // half a step (Q5_0's clamped extreme: one), plus d's binary16 rounding × the largest code, and m's
    case GgmlType::Q4_1:
      return ((hi - lo) / 30 + (hi - lo + std::fabs(lo)) * std::ldexp(1.0, -11) + 32 * std::ldexp(1.0, -25)) *
             (1 + 1e-5);
    case GgmlType::Q5_1:
      return ((hi - lo) / 62 + (hi - lo + std::fabs(lo)) * std::ldexp(1.0, -11) + 32 * std::ldexp(1.0, -25)) *
             (1 + 1e-5);
    case GgmlType::Q5_0:
      return amax / 16 * (1 + std::ldexp(1.0, -7)) + 16 * std::ldexp(1.0, -25);
    case GgmlType::IQ4_NL:
      return 14 * (amax / 127 * (1 + std::ldexp(1.0, -10)) + std::ldexp(1.0, -24)) * (1 + 1e-5) + 1e-30;
    case GgmlType::IQ4_XS:
      return 14 * (amax / 127 + half(0)) * (1 + 1e-5) + 1e-30;
    case GgmlType::Q3_K:
      return 0.5 * (amax / 3 + half(108)) * (1 + 1e-5) + 1e-30;
    default:
      return 0;
  }
}

TEST(GgufQuant, QuantizersStayWithinTheirStatedBounds) {
  std::mt19937 rng(11);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (GgmlType t : kSupported) {
    const bool by32 = t == GgmlType::Q4_K || t == GgmlType::Q5_K || t == GgmlType::IQ4_XS;
    const int64_t B = block(t), sub = by32 ? 32 : B == 256 ? 16 : B;
    for (int kind = 0; kind < 6; ++kind) {
      std::vector<float> x(1024);
      for (size_t i = 0; i < x.size(); ++i) {
        float v = g(rng);
        if (kind == 1) v = std::fabs(v) + 3.0f;   // all positive, away from 0
        if (kind == 2) v = -std::fabs(v) - 3.0f;  // all negative
        if (kind == 3) v *= 1e-6f;                // tiny (fp16 subnormal scales)
        if (kind == 4) v *= 1000.0f;
        if (kind == 5 && i % 97 == 0) v = 50.0f;  // outliers
        x[i] = v;
      }
      std::vector<unsigned char> q(ggml_row_size(t, 1024));
      quantize_row(t, x.data(), q.data(), 1024);
      std::vector<float> y(1024);
      dequantize_row(t, q.data(), y.data(), 1024);
      const size_t tsz = ggml_type_traits(uint32_t(t))->type_size;
      for (int64_t i = 0; i < 1024; ++i) {
        const int64_t bi = i / B, s0 = i / sub * sub;
        const double bound = stated_bound(t, x.data(), s0, sub, q.data() + size_t(bi) * tsz);
        ASSERT_LE(std::fabs(double(y[size_t(i)]) - double(x[size_t(i)])), bound)
            << ggml_type_name(t) << " kind " << kind << " value " << i << " x " << x[size_t(i)] << " y "
            << y[size_t(i)];
      }
    }
  }
}

TEST(GgufQuant, NonFiniteInputIsAnError) {
  std::vector<float> x(256, 1.0f);
  x[7] = NAN;
  for (GgmlType t : kSupported) {
    if (t == GgmlType::F32) continue;  // stored as given
    std::vector<unsigned char> b(ggml_row_size(t, 256));
    EXPECT_THROW(quantize_row(t, x.data(), b.data(), 256), Error) << ggml_type_name(t);
  }
}

TEST(GgufQuant, TypeNamesParse) {
  EXPECT_EQ(parse_ggml_type("q4_k"), GgmlType::Q4_K);
  EXPECT_EQ(parse_ggml_type("F16"), GgmlType::F16);
  EXPECT_EQ(parse_ggml_type("Q3_k"), GgmlType::Q3_K);
  EXPECT_EQ(parse_ggml_type("q5_k"), GgmlType::Q5_K);
  EXPECT_EQ(parse_ggml_type("Q5_0"), GgmlType::Q5_0);
  EXPECT_FALSE(parse_ggml_type("iq2_xxs").has_value());
  EXPECT_FALSE(parse_ggml_type("q8_k").has_value());
  EXPECT_EQ(ggml_type_traits(14)->type_size, 210u);
  EXPECT_FALSE(ggml_type_traits(4).has_value());  // removed Q4_2
}

// ---- reader / writer round trips ----

GgufMetadata every_type() {
  GgufMetadata md;
  md.set("general.architecture", std::string("test"));
  md.set("u8", uint8_t(200));
  md.set("i8", int8_t(-100));
  md.set("u16", uint16_t(60000));
  md.set("i16", int16_t(-30000));
  md.set("u32", uint32_t(4000000000u));
  md.set("i32", int32_t(-2000000000));
  md.set("f32", 1.5f);
  md.set("bool", true);
  md.set("string", std::string("héllo \xe2\x9c\x93"));
  md.set("u64", uint64_t(18000000000000000000ull));
  md.set("i64", int64_t(-9000000000000000000ll));
  md.set("f64", 0.1);
  md.set("strings", gguf_string_array({"a", "", "ĠĠ"}));
  GgufArray inner1{GgufType::INT32, {int32_t(1), int32_t(2)}}, inner2{GgufType::INT32, {}};
  md.set("nested", GgufArray{GgufType::ARRAY, {inner1, inner2}});
  md.set("empty", GgufArray{GgufType::FLOAT64, {}});
  return md;
}

TEST(GgufFile, RoundTripsEveryValueTypeAndTensorType) {
  TempDir tmp;
  GgufMetadata md = every_type();
  std::vector<GgufWriteTensor> ts;
  std::mt19937 rng(5);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<std::vector<float>> src;
  for (GgmlType t : kSupported) {
    src.emplace_back(512 * 3);
    for (float& v : src.back()) v = g(rng);
    ts.push_back(make_gguf_tensor("w." + ggml_type_name(t), t, {512, 3}, src.back().data()));
  }
  float one = 3.25f;
  ts.push_back(make_gguf_tensor("scalar", GgmlType::F32, {}, &one));
  ts.push_back(make_gguf_tensor("empty", GgmlType::F32, {0, 4}, nullptr));
  const std::string p = tmp.path("m.gguf");
  write_gguf(p, md, ts);
  const GgufFile f = GgufFile::open(p);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.data_offset() % 32, 0u);
  ASSERT_EQ(f.metadata().size(), md.size());
  for (size_t i = 0; i < md.size(); ++i) {
    EXPECT_EQ(f.metadata().entries()[i].first, md.entries()[i].first);
    EXPECT_TRUE(f.metadata().entries()[i].second == md.entries()[i].second) << md.entries()[i].first;
  }
  // Typed getters, and errors naming the file and key.
  EXPECT_EQ(f.metadata().get_int("i16"), -30000);
  EXPECT_EQ(f.metadata().get_int("u32"), 4000000000);
  EXPECT_EQ(f.metadata().get_float("f64"), 0.1);
  EXPECT_EQ(f.metadata().get_string_array("strings")[2], "ĠĠ");
  test::expect_data_error([&] { f.metadata().get_int("u64"); }, {p, "'u64'", "INT64_MAX"});
  test::expect_data_error([&] { f.metadata().get_string("f32"); },
                          {p, "'f32'", "expected STRING, found FLOAT32"});
  test::expect_data_error([&] { f.metadata().get_int("nope"); }, {p, "'nope'", "missing"});
  test::expect_data_error([&] { f.metadata().get_int_in("u8", 0, 10); }, {"'u8'", "200", "[0, 10]"});

  ASSERT_EQ(f.tensors().size(), ts.size());
  for (size_t i = 0; i < ts.size(); ++i) {
    const GgufTensorInfo& t = f.tensors()[i];
    EXPECT_EQ(t.name, ts[i].name);
    EXPECT_EQ(t.type, ts[i].type);
    EXPECT_EQ(t.ne, ts[i].ne);
    EXPECT_EQ(t.offset % 32, 0u);
    EXPECT_EQ(t.nbytes, ts[i].data.size());
    EXPECT_TRUE(t.nbytes == 0 || std::memcmp(t.data, ts[i].data.data(), t.nbytes) == 0) << t.name;
  }
  for (size_t k = 0; k < src.size(); ++k) {  // read_f32 == row dequantization of what was written
    const GgufTensorInfo& t = f.tensors()[k];
    std::vector<float> y(size_t(t.numel())), want(size_t(t.numel()));
    f.read_f32(t, y.data());
    for (int r = 0; r < 3; ++r)
      dequantize_row(t.type, ts[k].data.data() + size_t(r) * ggml_row_size(t.type, 512),
                     want.data() + r * 512, 512);
    EXPECT_EQ(0, std::memcmp(y.data(), want.data(), y.size() * 4)) << t.name;
    if (t.type == GgmlType::F32) {
      EXPECT_EQ(0, std::memcmp(y.data(), src[k].data(), y.size() * 4));
    }
  }
  {  // read_rows streams the same values as read_f32
    const GgufTensorInfo& t = f.tensor("w.Q6_K");
    ASSERT_EQ(t.rows(), 3);
    std::vector<float> all(size_t(t.numel())), row(512);
    f.read_f32(t, all.data());
    f.read_rows(t, 2, 1, row.data());
    EXPECT_EQ(0, std::memcmp(row.data(), all.data() + 1024, 512 * 4));
    test::expect_data_error([&] { f.read_rows(t, 2, 2, row.data()); },
                            {p, "'w.Q6_K'", "rows [2, 4) are outside its 3 rows"});
  }
  EXPECT_EQ(f.tensor("scalar").numel(), 1);
  EXPECT_EQ(f.tensor("empty").numel(), 0);
  EXPECT_EQ(f.tensor("w.Q4_K").shape(), (std::vector<int64_t>{3, 512}));
  test::expect_data_error([&] { f.tensor("nope"); }, {p, "'nope'", "missing"});
}

TEST(GgufFile, CustomAlignmentPadsEveryTensor) {
  TempDir tmp;
  GgufMetadata md;
  md.set("general.alignment", uint32_t(256));
  std::vector<float> x(32, 1.0f);
  std::vector<GgufWriteTensor> ts = {make_gguf_tensor("a", GgmlType::Q8_0, {32}, x.data()),
                                     make_gguf_tensor("b", GgmlType::F16, {3}, x.data())};
  const std::string p = tmp.path("a.gguf");
  write_gguf(p, md, ts);
  const GgufFile f = GgufFile::open(p);
  EXPECT_EQ(f.alignment(), 256u);
  EXPECT_EQ(f.data_offset() % 256, 0u);
  EXPECT_EQ(f.tensors()[1].offset, 256u);
  EXPECT_EQ(test::read_raw(p).size(),
            f.data_offset() + 512);  // the last tensor is padded too, as llama.cpp does
}

TEST(GgufFile, WriterRejectsBadTensors) {
  TempDir tmp;
  std::vector<float> x(64, 0.0f);
  GgufMetadata md;
  auto w = [&](std::vector<GgufWriteTensor> ts) { write_gguf(tmp.path("w.gguf"), md, ts); };
  test::expect_data_error(
      [&] {
        w({make_gguf_tensor("a", GgmlType::F32, {2}, x.data()),
           make_gguf_tensor("a", GgmlType::F32, {2}, x.data())});
      },
      {"'a'", "twice"});
  test::expect_data_error([&] { make_gguf_tensor("q", GgmlType::Q4_K, {64}, x.data()); },
                          {"'q'", "block size 256"});
  test::expect_data_error([&] { w({make_gguf_tensor(std::string(64, 'n'), GgmlType::F32, {2}, x.data())}); },
                          {"names must be"});
  GgufWriteTensor bad = make_gguf_tensor("b", GgmlType::F32, {2}, x.data());
  bad.data.pop_back();
  test::expect_data_error([&] { w({bad}); }, {"'b'", "holds 7 bytes"});
  EXPECT_FALSE(std::filesystem::exists(tmp.path("w.gguf")));
}

// ---- malformed files: a builder, a valid base file, and one mutation per failure kind ----

struct Bytes {
  std::string s;
  template <class T>
  Bytes& put(T v) {
    s.append(reinterpret_cast<const char*>(&v), sizeof v);
    return *this;
  }
  Bytes& str(const std::string& x) {
    put<uint64_t>(x.size());
    s += x;
    return *this;
  }
  Bytes& pad(size_t a) {
    s.append((a - s.size() % a) % a, '\0');
    return *this;
  }
};

struct TensorSpec {
  std::string name = "t";
  std::vector<uint64_t> ne = {8};
  uint32_t type = 0;
  uint64_t offset = 0;
};

// header + one kv ("general.architecture" = "x") + the tensors, padded, + `data` bytes of data.
std::string file_with(const std::vector<TensorSpec>& ts, size_t data, uint32_t version = 3) {
  Bytes b;
  b.s = "GGUF";
  b.put<uint32_t>(version).put<uint64_t>(ts.size()).put<uint64_t>(1);
  b.str("general.architecture").put<uint32_t>(8).str("x");
  for (const auto& t : ts) {
    b.str(t.name).put<uint32_t>(uint32_t(t.ne.size()));
    for (uint64_t d : t.ne) b.put<uint64_t>(d);
    b.put<uint32_t>(t.type).put<uint64_t>(t.offset);
  }
  b.pad(32);
  b.s.append(data, '\x01');
  return b.s;
}

// Writes `bytes`, opens it, and expects a qkv::Error (Data) whose message has every fragment.
void expect_bad(const std::string& bytes, std::initializer_list<std::string> fragments) {
  TempDir tmp;
  const std::string p = tmp.path("bad.gguf");
  test::write_raw(p, bytes);
  try {
    GgufFile::open(p);
    ADD_FAILURE() << "accepted a malformed file; expected an error with " << *fragments.begin();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Data);
    const std::string what = e.what();
    EXPECT_NE(what.find(p), std::string::npos) << what;
    for (const auto& f : fragments)
      EXPECT_NE(what.find(f), std::string::npos) << "missing '" << f << "' in: " << what;
  }
}

TEST(GgufMalformed, TheBaseFileIsValid) {
  TempDir tmp;
  test::write_raw(tmp.path("ok.gguf"), file_with({{"a", {8}, 0, 0}, {"b", {4, 2}, 1, 32}}, 64));
  const GgufFile f = GgufFile::open(tmp.path("ok.gguf"));
  EXPECT_EQ(f.tensors().size(), 2u);
  test::write_raw(tmp.path("v2.gguf"), file_with({{"a", {8}, 0, 0}}, 32, 2));
  EXPECT_EQ(GgufFile::open(tmp.path("v2.gguf")).version(), 2u);
}

TEST(GgufMalformed, EveryTruncationIsAnError) {
  const std::string good = file_with({{"a", {8}, 0, 0}, {"b", {4, 2}, 1, 32}}, 64);
  TempDir tmp;
  const std::string p = tmp.path("cut.gguf");
  for (size_t n = 0; n < good.size() - 64 + 32 + 16; ++n) {  // every cut up to inside tensor b's data
    test::write_raw(p, good.substr(0, n));
    EXPECT_THROW(GgufFile::open(p), Error) << "prefix of " << n << " bytes";
  }
}

TEST(GgufMalformed, HeaderCases) {
  std::string f = file_with({}, 0);
  expect_bad("", {"truncated", "magic"});
  expect_bad("GGML" + f.substr(4), {"not a GGUF file", "'GGML'"});
  expect_bad(file_with({}, 0, 1), {"version 1"});
  expect_bad(file_with({}, 0, 4), {"version 4", "2 and 3"});
  expect_bad(file_with({}, 0, 0x03000000), {"big-endian"});
  std::string huge_kv = f;
  const uint64_t big = 1ull << 60;
  std::memcpy(huge_kv.data() + 16, &big, 8);
  expect_bad(huge_kv, {"key-value count 1152921504606846976", "cannot fit"});
  std::string huge_t = f;
  std::memcpy(huge_t.data() + 8, &big, 8);
  expect_bad(huge_t, {"tensor count 1152921504606846976", "cannot fit"});
}

std::string file_with_kv(const std::function<void(Bytes&)>& kv, uint64_t n_kv = 1) {
  Bytes b;
  b.s = "GGUF";
  b.put<uint32_t>(3).put<uint64_t>(0).put<uint64_t>(n_kv);
  kv(b);
  return b.s;
}

TEST(GgufMalformed, MetadataCases) {
  expect_bad(file_with_kv([](Bytes& b) { b.put<uint64_t>(1ull << 40).s += std::string(20, 'k'); }),
             {"string length 1099511627776", "past the end"});
  expect_bad(file_with_kv([](Bytes& b) { b.str("k").put<uint32_t>(13).put<uint32_t>(0); }),
             {"'k'", "unknown value type 13"});
  expect_bad(file_with_kv([](Bytes& b) { b.str("k").put<uint32_t>(8).put<uint64_t>(100).s += "abc"; }),
             {"'k'", "string length 100"});
  expect_bad(
      file_with_kv([](Bytes& b) { b.str("k").put<uint32_t>(9).put<uint32_t>(4).put<uint64_t>(1ull << 62); }),
      {"'k'", "array of 4611686018427387904 UINT32 values cannot fit"});
  expect_bad(file_with_kv([](Bytes& b) { b.str("k").put<uint32_t>(9).put<uint32_t>(77).put<uint64_t>(1); }),
             {"'k'", "unknown array element type 77"});
  expect_bad(file_with_kv([](Bytes& b) { b.str("k").put<uint32_t>(7).put<uint8_t>(2); }),
             {"'k'", "BOOL value 2"});
  expect_bad(file_with_kv(
                 [](Bytes& b) {
                   b.str("k").put<uint32_t>(0).put<uint8_t>(1).str("k").put<uint32_t>(0).put<uint8_t>(1);
                 },
                 2),
             {"'k'", "appears twice"});
  expect_bad(file_with_kv([](Bytes& b) { b.str("").put<uint32_t>(0).put<uint8_t>(1); }), {"empty key"});
  expect_bad(file_with_kv([](Bytes& b) { b.str("k\xff").put<uint32_t>(0).put<uint8_t>(1); }),
             {"not valid UTF-8"});
  expect_bad(file_with_kv([](Bytes& b) {
               b.str("k").put<uint32_t>(9);
               for (int i = 0; i < 40; ++i) b.put<uint32_t>(9).put<uint64_t>(1);
               b.put<uint32_t>(0).put<uint64_t>(0);
             }),
             {"'k'", "nested deeper than 16"});
  expect_bad(file_with_kv([](Bytes& b) { b.str("general.alignment").put<uint32_t>(4).put<uint32_t>(48); }),
             {"'general.alignment'", "power of two"});
  expect_bad(file_with_kv([](Bytes& b) { b.str("general.alignment").put<uint32_t>(10).put<uint64_t>(64); }),
             {"'general.alignment'", "expected UINT32, found UINT64"});
  expect_bad(file_with_kv([](Bytes& b) { b.str("k").put<uint32_t>(12).put<uint32_t>(0); }),
             {"'k'", "truncated"});
}

TEST(GgufMalformed, TensorCases) {
  expect_bad(file_with({{"a", {8}, 0, 0}, {"b", {8}, 0, 16}}, 64),
             {"'b'", "offset 16 is not a multiple of the alignment 32"});
  expect_bad(file_with({{"a", {8}, 0, 0}, {"b", {16}, 0, 32}}, 64), {"'b'", "run past its end"});
  expect_bad(file_with({{"a", {16}, 0, 0}, {"b", {8}, 0, 32}}, 96), {"'a'", "'b'", "overlap"});
  expect_bad(file_with({{"a", {8}, 0, 1ull << 63}}, 64), {"'a'", "run past its end"});
  expect_bad(file_with({{"a", {8}, 4, 0}}, 64), {"'a'", "unknown ggml type 4"});
  expect_bad(file_with({{"a", {8}, 99, 0}}, 64), {"'a'", "unknown ggml type 99"});
  expect_bad(file_with({{"a", {16}, 8, 0}}, 64), {"'a'", "ne[0] = 16", "Q8_0", "block size 32"});
  expect_bad(file_with({{"a", {1, 1, 1, 1, 1}, 0, 0}}, 64), {"'a'", "5 dims"});
  expect_bad(file_with({{"a", {1ull << 62, 1ull << 62}, 0, 0}}, 64), {"'a'", "overflows int64"});
  expect_bad(file_with({{"a", {1ull << 60, 2}, 0, 0}}, 64), {"'a'", "run past its end"});
  expect_bad(file_with({{"a", {1ull << 61, 2}, 0, 0}}, 64), {"'a'", "byte size overflows"});
  expect_bad(file_with({{"a", {8}, 0, 0}, {"a", {8}, 0, 32}}, 64), {"'a'", "appears twice"});
  expect_bad(file_with({{"", {8}, 0, 0}}, 64), {"empty tensor name"});
  expect_bad(file_with({{std::string(64, 'x'), {8}, 0, 0}}, 64), {"at most 63"});
  std::string no_data = file_with({{"a", {8}, 0, 0}}, 0);
  expect_bad(no_data.substr(0, no_data.size() - 8), {"data section would start"});
}

TEST(GgufMalformed, UnsupportedTypeOpensButDoesNotDequantize) {
  TempDir tmp;
  test::write_raw(tmp.path("q8k.gguf"), file_with({{"a", {256}, 15, 0}}, 320));  // Q8_K: 292 bytes
  const GgufFile f = GgufFile::open(tmp.path("q8k.gguf"));
  std::vector<float> y(256);
  test::expect_data_error([&] { f.read_f32(f.tensors()[0], y.data()); },
                          {"'a'", "Q8_K", "does not dequantize"});
}

}  // namespace
}  // namespace qkv::io
