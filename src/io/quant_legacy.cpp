// Quantizers of the older 32-value types Q4_1, Q5_0 and Q5_1 (their dequantizers are quant.cpp's rows_q4_1
// and rows_q5), exactly as ggml's quantize_row_q4_1_ref / q5_0_ref / q5_1_ref compute them (learned from
// ggml-quants.c, not copied): llama.cpp still writes Q5_0 / Q5_1 where a K-quant does not fit a row (rows
// not a whole number of 256) and in older files.
//
//   Q4_1 / Q5_1: d = (max − min)/15 (31), m = min; q = (x − min)/d rounded (Q4_1 clamped to 15).
//   Q5_0: d = the value of largest magnitude / −16; q = x/d + 16 rounded, clamped to 31 (as Q4_0 with 16).
//   Bound per value: half a step for a rounded value, one step for Q5_0's clamped opposite extreme, plus
//   the binary16 rounding of d (× the largest code) and of m.
#include "quant_blocks.hpp"

namespace qkv::io::detail {

namespace {

constexpr int QK = 32;

// The 5th bits of 32 codes into qh (value j's in bit j) and their low nibbles into qs (as rows_q5 reads them).
void pack5(const uint8_t* L, unsigned char* qh_at, unsigned char* qs) {
  uint32_t qh = 0;
  for (int j = 0; j < QK / 2; ++j) {
    qs[j] = uint8_t((L[j] & 0x0F) | ((L[j + QK / 2] & 0x0F) << 4));
    qh |= uint32_t((L[j] & 0x10) >> 4) << j;
    qh |= uint32_t((L[j + QK / 2] & 0x10) >> 4) << (j + QK / 2);
  }
  std::memcpy(qh_at, &qh, 4);
}

// Q4_1 (top 15) and Q5_1 (top 31): the min and the step over the block.
void quant_with_min(const float* x, unsigned char* b, int64_t nb, bool five) {
  const std::size_t size = five ? 24 : 20;
  for (int64_t i = 0; i < nb; ++i, x += QK, b += size) {
    float min = x[0], max = x[0];
    for (int j = 1; j < QK; ++j) min = std::min(min, x[j]), max = std::max(max, x[j]);
    const float d = (max - min) / (five ? 31.0f : 15.0f);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    put_half(b, float_to_f16(d));
    put_half(b + 2, float_to_f16(min));
    uint8_t L[QK];
    for (int j = 0; j < QK; ++j) {
      const float v = (x[j] - min) * id;
      L[j] = five ? uint8_t(v + 0.5f) : uint8_t(std::min(15, int(int8_t(v + 0.5f))));
    }
    if (five) {
      pack5(L, b + 4, b + 8);
    } else {
      for (int j = 0; j < QK / 2; ++j) b[4 + j] = uint8_t(L[j] | (L[j + QK / 2] << 4));
    }
  }
}

}  // namespace

void quant_q4_1(const float* x, unsigned char* b, int64_t nb) {
  quant_with_min(x, b, nb, false);
}

void quant_q5_1(const float* x, unsigned char* b, int64_t nb) {
  quant_with_min(x, b, nb, true);
}

void quant_q5_0(const float* x, unsigned char* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += QK, b += 22) {
    const float d = signed_absmax(x, QK) / -16.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    put_half(b, float_to_f16(d));
    uint8_t L[QK];
    for (int j = 0; j < QK; ++j) L[j] = uint8_t(std::min(31, int(int8_t(x[j] * id + 16.5f))));
    pack5(L, b + 2, b + 6);
  }
}

}  // namespace qkv::io::detail
