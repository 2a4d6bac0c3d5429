// IQ4_NL and IQ4_XS, llama.cpp's non-linear 4-bit types (IQ4_XS is a common choice of today's GGUF
// releases): a nibble indexes ggml's 16-value codebook kvalues_iq4nl, then × the (sub-)block's scale. Row
// dequantizers laid out as ggml's dequantize_row_iq4_nl / iq4_xs (same float operations: ggml's values bit
// for bit), their element-wise twins, and simple quantizers (no iterative search; a stated bound).
//
//   IQ4_NL  32 values, 18 bytes: half d; u8 qs[16].  x_j = d·K[qs_j & 15], x_{j+16} = d·K[qs_j >> 4]
//   IQ4_XS 256 values, 136 bytes: half d; u16 scales_h; u8 scales_l[4]; u8 qs[128].  8 sub-blocks of 32:
//          6-bit ls_b = (nibble b % 2 of scales_l[b / 2]) | (bits 2b, 2b + 1 of scales_h) << 4, dl = d·(ls −
//          32); qs[16b..16b + 15] hold the sub-block as IQ4_NL holds a block
#include "quant_blocks.hpp"

namespace qkv::io::detail {

namespace {

constexpr int64_t QK_K = 256;
constexpr std::size_t kIQ4_NL = 18, kIQ4_XS = 136, kXS_qs = 8;
// ggml-common.h's kvalues_iq4nl, ascending.
constexpr int8_t kValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

int ls_iq4_xs(const unsigned char* b, int sub) {
  const int low = (b[4 + sub / 2] >> (4 * (sub % 2))) & 0xF;
  return low | (((load_le<uint16_t>(b + 2) >> (2 * sub)) & 3) << 4);
}

// 32 values as IQ4_NL lays them out (value j in the low nibble of qs[j], j + 16 in the high one) with step s.
void rows32(const unsigned char* qs, float s, float* y) {
  for (int j = 0; j < 16; ++j) {
    y[j] = s * float(kValues[qs[j] & 0xF]);
    y[j + 16] = s * float(kValues[qs[j] >> 4]);
  }
}

// The codes of 32 values for the step s (the quantizers pick |s|·127 ≥ max|x|, s negative when the value of
// largest magnitude is positive, so that it maps to −127, the codebook's longer end): the nearest codebook
// entry of each value, the lower code on ties.
void codes32(const float* x, float s, unsigned char* qs) {
  uint8_t L[32];
  for (int j = 0; j < 32; ++j) {
    int best = 0;
    for (int c = 1; c < 16; ++c)
      if (std::fabs(s * float(kValues[c]) - x[j]) < std::fabs(s * float(kValues[best]) - x[j])) best = c;
    L[j] = uint8_t(best);
  }
  for (int j = 0; j < 16; ++j) qs[j] = uint8_t(L[j] | (L[j + 16] << 4));
}

}  // namespace

void rows_iq4_nl(const unsigned char* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += kIQ4_NL, y += 32) rows32(b + 2, half_at(b), y);
}

void rows_iq4_xs(const unsigned char* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += kIQ4_XS) {
    const float d = half_at(b);
    for (int sub = 0; sub < 8; ++sub, y += 32)
      rows32(b + kXS_qs + 16 * sub, d * float(ls_iq4_xs(b, sub) - 32), y);
  }
}

float value_iq4_nl(const unsigned char* p, int64_t i) {  // the nibble of value e: low for e < 16
  const unsigned char* b = p + std::size_t(i / 32) * kIQ4_NL;
  const int e = int(i % 32);
  const int q = e < 16 ? (b[2 + e] & 0xF) : (b[2 + e - 16] >> 4);
  return half_at(b) * float(kValues[q]);
}

float value_iq4_xs(const unsigned char* p, int64_t i) {  // sub-block e / 32, laid out as one IQ4_NL block
  const unsigned char* b = p + std::size_t(i / QK_K) * kIQ4_XS;
  const int e = int(i % QK_K), sub = e / 32, r = e % 32;
  const unsigned char byte = b[kXS_qs + 16 * sub + r % 16];
  const int q = r < 16 ? (byte & 0xF) : (byte >> 4);
  return (half_at(b) * float(ls_iq4_xs(b, sub) - 32)) * float(kValues[q]);
}

// d = the block's extreme / −127 on binary16 (rounded away from 0). |x − x̂| ≤ 14·|d|: half the widest gap
// of the codebook (24, between 89 and 113) is 12, and values past 113·|d| on the short side are at most
// 127·|d|.
void quant_iq4_nl(const float* x, unsigned char* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 32, b += kIQ4_NL) {
    const float e = signed_absmax(x, 32);
    uint16_t h = half_at_least(std::fabs(e), 127.0f, "scale");
    if (e > 0) h |= 0x8000;  // negative: the extreme maps to −127
    put_half(b, h);
    codes32(x, f16_to_float(h), b + 2);
  }
}

// Per sub-block of 32: |dl| ≥ max|x|/127 on d's grid (d·k, k in 1..31, d rounded up so that k = 31
// reaches the largest), dl negative when the extreme is positive (ls − 32 = −k). |x − x̂| ≤ 14·|dl|,
// |dl| ≤ max|x|/127 + d.
void quant_iq4_xs(const float* x, unsigned char* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += QK_K, b += kIQ4_XS) {
    float ext[8], max_need = 0;
    for (int sub = 0; sub < 8; ++sub) {
      ext[sub] = signed_absmax(x + 32 * sub, 32);
      max_need = std::max(max_need, std::fabs(ext[sub]) / 127.0f);
    }
    const uint16_t hd = half_at_least(max_need, 31.0f, "scale");
    const float d = f16_to_float(hd);
    std::memset(b, 0, kIQ4_XS);
    put_half(b, hd);
    uint16_t scales_h = 0;
    for (int sub = 0; sub < 8; ++sub) {
      const float need = std::fabs(ext[sub]) / 127.0f;
      int k = d > 0 ? std::clamp(int(std::ceil(need / d)), 0, 31) : 0;
      while (k < 31 && d * float(k) < need) ++k;
      const int ls = (ext[sub] > 0 ? -k : k) + 32;
      b[4 + sub / 2] |= uint8_t((ls & 0xF) << (4 * (sub % 2)));
      scales_h = uint16_t(scales_h | ((ls >> 4) << (2 * sub)));
      codes32(x + 32 * sub, d * float(ls - 32), b + kXS_qs + 16 * sub);
    }
    std::memcpy(b + 2, &scales_h, 2);
  }
}

}  // namespace qkv::io::detail
