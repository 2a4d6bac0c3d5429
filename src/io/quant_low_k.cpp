// Q2_K and Q3_K, the 2- and 3-bit K-quants of llama.cpp's Q2_K and Q3_K_S/M/L files: row dequantizers
// laid out as ggml's dequantize_row_q2_K / q3_K loops (same float operations, same order: ggml's values
// bit for bit), their element-wise twins from the block definitions alone, and simple quantizers (no
// iterative search; a stated bound per sub-block, as quant.cpp's Q4_K and Q6_K).
//
//   Q2_K 256 values, 84 bytes: u8 scales[16]; u8 qs[64]; half d, dmin.  16 sub-blocks of 16: scales[j]
//        holds sub-block j's 4-bit scale (low nibble) and 4-bit min (high nibble); value e of 128-chunk n
//        is the 2-bit field j = (e % 128) / 32 of qs[32n + e % 32]:  x = (d·sc)·q − dmin·m
//   Q3_K 256 values, 110 bytes: u8 hmask[32]; u8 qs[64]; u8 scales[12]; half d.  16 sub-blocks of 16 with
//        6-bit scales (low 4 bits in the nibbles of scales[0..7], j < 8 low and j ≥ 8 high; top 2 bits
//        in the 2-bit field j / 4 of scales[8 + j % 4]), stored + 32; q the 2-bit field as Q2_K's, minus 4
//        unless bit e / 32 of hmask[e % 32] is set:  x = (d·(sc − 32))·q
#include "quant_blocks.hpp"

namespace qkv::io::detail {

namespace {

constexpr int64_t QK_K = 256;
constexpr std::size_t kQ2_K = 84, kQ2K_qs = 16, kQ2K_d = 80;
constexpr std::size_t kQ3_K = 110, kQ3K_qs = 32, kQ3K_scales = 96, kQ3K_d = 108;

// Q3_K's 6-bit scale j (0..15), as stored (0..63; the value is this − 32).
int scale_q3_k(const unsigned char* scales, int j) {
  const int low = j < 8 ? (scales[j] & 0xF) : (scales[j - 8] >> 4);
  return low | (((scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4);
}

// Packs 256 2-bit codes as both types store them: qs[32n + l] holds values 128n + l + 32f in field f.
void pack_2bit(const uint8_t* L, unsigned char* qs) {
  for (int n = 0; n < 2; ++n)
    for (int l = 0; l < 32; ++l) {
      const uint8_t* c = L + 128 * n + l;
      qs[32 * n + l] = uint8_t((c[0] & 3) | ((c[32] & 3) << 2) | ((c[64] & 3) << 4) | ((c[96] & 3) << 6));
    }
}

}  // namespace

void rows_q2_k(const unsigned char* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += kQ2_K) {
    const float d = half_at(b + kQ2K_d), dmin = half_at(b + kQ2K_d + 2);
    const unsigned char* q = b + kQ2K_qs;
    int is = 0;
    for (int n = 0; n < 2; ++n, q += 32) {
      for (int shift = 0; shift < 8; shift += 2) {
        for (int half = 0; half < 2; ++half) {
          const unsigned char sc = b[is++];
          const float dl = d * float(sc & 0xF), ml = dmin * float(sc >> 4);
          for (int l = 0; l < 16; ++l) *y++ = dl * float((q[l + 16 * half] >> shift) & 3) - ml;
        }
      }
    }
  }
}

void rows_q3_k(const unsigned char* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += kQ3_K) {
    const float d_all = half_at(b + kQ3K_d);
    const unsigned char* hm = b;
    const unsigned char* q = b + kQ3K_qs;
    int scales[16];
    for (int j = 0; j < 16; ++j) scales[j] = scale_q3_k(b + kQ3K_scales, j);
    int is = 0;
    unsigned m = 1;
    for (int n = 0; n < 2; ++n, q += 32) {
      for (int shift = 0; shift < 8; shift += 2, m <<= 1) {
        for (int half = 0; half < 2; ++half) {
          const float dl = d_all * float(scales[is++] - 32);
          for (int l = 16 * half; l < 16 * half + 16; ++l)
            *y++ = dl * float(((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4));
        }
      }
    }
  }
}

float value_q2_k(const unsigned char* p, int64_t i) {  // sub-block e/16; the 2-bit field (e%128)/32
  const unsigned char* b = p + std::size_t(i / QK_K) * kQ2_K;
  const int e = int(i % QK_K), n = e / 128, field = (e % 128) / 32;
  const int q = (b[kQ2K_qs + 32 * n + e % 32] >> (2 * field)) & 3;
  const unsigned char sc = b[e / 16];
  return half_at(b + kQ2K_d) * float(sc & 0xF) * float(q) - half_at(b + kQ2K_d + 2) * float(sc >> 4);
}

float value_q3_k(const unsigned char* p, int64_t i) {  // Q2_K's field, − 4 unless the high bit is set
  const unsigned char* b = p + std::size_t(i / QK_K) * kQ3_K;
  const int e = int(i % QK_K), n = e / 128, field = (e % 128) / 32;
  const int low = (b[kQ3K_qs + 32 * n + e % 32] >> (2 * field)) & 3;
  const bool high = (b[e % 32] >> (e / 32)) & 1;
  return half_at(b + kQ3K_d) * float(scale_q3_k(b + kQ3K_scales, e / 16) - 32) * float(low - (high ? 0 : 4));
}

// Per sub-block of 16 (k_scales_with_mins, codes 0..3 on 4-bit grids): |x − x̂| ≤ s/2 with
// s ≤ (max − min(0, min))/3 + d + dmin/3.
void quant_q2_k(const float* x, unsigned char* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += QK_K, b += kQ2_K) {
    const KScales k = k_scales_with_mins(x, 16, 3, 15);
    for (int j = 0; j < 16; ++j) b[j] = uint8_t(k.s[j] | (k.m[j] << 4));
    pack_2bit(k.L, b + kQ2K_qs);
    put_half(b + kQ2K_d, k.d);
    put_half(b + kQ2K_d + 2, k.dmin);
  }
}

// Per sub-block of 16: the scale s ≥ max|x|/3 rounded up onto d's grid (positive scales only, 1..31 of
// the 6-bit −32..31); each value takes the nearest code in −4..3. |x − x̂| ≤ s/2 with s ≤ max|x|/3 + d.
void quant_q3_k(const float* x, unsigned char* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += QK_K, b += kQ3_K) {
    float need[16], max_need = 0;
    for (int j = 0; j < 16; ++j) {
      float amax = 0;
      for (int l = 0; l < 16; ++l) amax = std::max(amax, std::fabs(x[16 * j + l]));
      need[j] = amax / 3.0f;
      max_need = std::max(max_need, need[j]);
    }
    const uint16_t hd = half_at_least(max_need, 31.0f, "scale");
    const float d = f16_to_float(hd);
    std::memset(b, 0, kQ3_K);
    uint8_t L[QK_K];
    for (int j = 0; j < 16; ++j) {
      int sc = d > 0 ? std::clamp(int(std::ceil(need[j] / d)), 0, 31) : 0;
      while (sc < 31 && d * float(sc) < need[j]) ++sc;
      const int stored = sc + 32;
      b[kQ3K_scales + j % 8] |= uint8_t((stored & 0xF) << (j < 8 ? 0 : 4));
      b[kQ3K_scales + 8 + j % 4] |= uint8_t((stored >> 4) << (2 * (j / 4)));
      const float s = d * float(sc);
      for (int l = 0; l < 16; ++l) {
        const float v = x[16 * j + l];
        const int q = s > 0 ? best_code(v, v / s, -4, 3, [&](int c) { return s * float(c); }) : 0;
        const int e = 16 * j + l;
        if (q >= 0) b[e % 32] |= uint8_t(1u << (e / 32));  // the high bit: no − 4
        L[e] = uint8_t(q >= 0 ? q : q + 4);
      }
    }
    pack_2bit(L, b + kQ3K_qs);
    put_half(b + kQ3K_d, hd);
  }
}

}  // namespace qkv::io::detail
