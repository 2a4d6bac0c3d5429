// ggml tensor types: traits, row dequantizers (fast) with their element-wise twins (slow), quantizers.
// Semantics from ggml's ggml-common.h (block structs) and ggml-quants.c (dequantize_row_*,
// quantize_row_*_ref); see include/qkv/io/gguf_quant.hpp for the block layouts.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>

#include "qkv/error.hpp"
#include "qkv/io/gguf_quant.hpp"
#include "qkv/io/half.hpp"
#include "quant_blocks.hpp"

namespace qkv::io {

using detail::best_code;
using detail::half_at;
using detail::half_at_least;
using detail::load_le;
using detail::put_half;

namespace {

constexpr int64_t QK = 32;  // QK8_0 = QK4_0
constexpr int64_t QK_K = 256;

// Byte offsets inside the blocks.
constexpr std::size_t kQ8_0 = 34, kQ4_0 = 18, kQ4_K = 144, kQ6_K = 210;
constexpr std::size_t kQ4_1 = 20, kQ5_0 = 22, kQ5_1 = 24, kQ5_K = 176;
constexpr std::size_t kQ5K_qh = 16, kQ5K_qs = 48;
constexpr std::size_t kQ4K_scales = 4, kQ4K_qs = 16;
constexpr std::size_t kQ6K_qh = 128, kQ6K_scales = 192, kQ6K_d = 208;

// Q4_K's 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes: sub-blocks 0..3 keep them in
// the low 6 bits of bytes j and j+4; sub-blocks 4..7 keep their low 4 bits in the nibbles of byte j+4
// and their top 2 bits in the top 2 bits of bytes j-4 (scale) and j (min).
void scale_min_k4(int j, const unsigned char* q, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

[[noreturn]] void unsupported(GgmlType t, const char* what) {
  data_error(std::string("tensor type ") + ggml_type_name(t) + " has no " + what +
             " in qkv (dequantized: " + ggml_type_list(false) + "; quantized: " + ggml_type_list(true) + ")");
}

// ---- fast rows: one pass per block, laid out as ggml's dequantize_row_* loops ----

void rows_q8_0(const unsigned char* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += kQ8_0, y += QK) {
    const float d = half_at(b);
    const auto* qs = reinterpret_cast<const int8_t*>(b + 2);
    for (int j = 0; j < QK; ++j) y[j] = float(qs[j]) * d;
  }
}

void rows_q4_0(const unsigned char* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += kQ4_0, y += QK) {
    const float d = half_at(b);
    const unsigned char* qs = b + 2;
    for (int j = 0; j < QK / 2; ++j) {
      y[j] = float((qs[j] & 0x0F) - 8) * d;
      y[j + QK / 2] = float((qs[j] >> 4) - 8) * d;
    }
  }
}

void rows_q4_k(const unsigned char* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += kQ4_K) {
    const float d = half_at(b), dmin = half_at(b + 2);
    const unsigned char* scales = b + kQ4K_scales;
    const unsigned char* q = b + kQ4K_qs;
    for (int c = 0; c < 4; ++c, q += 32) {
      int sc, m;
      scale_min_k4(2 * c, scales, &sc, &m);
      const float d1 = d * float(sc), m1 = dmin * float(m);
      scale_min_k4(2 * c + 1, scales, &sc, &m);
      const float d2 = d * float(sc), m2 = dmin * float(m);
      for (int l = 0; l < 32; ++l) *y++ = d1 * float(q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * float(q[l] >> 4) - m2;
    }
  }
}

void rows_q6_k(const unsigned char* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += kQ6_K) {
    const float d = half_at(b + kQ6K_d);
    const unsigned char* ql = b;
    const unsigned char* qh = b + kQ6K_qh;
    const auto* sc = reinterpret_cast<const int8_t*>(b + kQ6K_scales);
    for (int n = 0; n < 2; ++n, y += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * float(sc[is]) * float(q1);
        y[l + 32] = d * float(sc[is + 2]) * float(q2);
        y[l + 64] = d * float(sc[is + 4]) * float(q3);
        y[l + 96] = d * float(sc[is + 6]) * float(q4);
      }
    }
  }
}

// The 32-value types with a min or a 5th bit, and Q5_K (ggml's dequantize_row_q4_1 / q5_0 / q5_1 / q5_k;
// their quantizers: quant_legacy.cpp and quant_q4k_like):
//   Q4_1  32 values, 20 bytes: half d, m; u8 qs[16].             x_j = d·(qs_j & 15) + m, x_{j+16} = d·(qs_j
//   >> 4) + m Q5_0  32 values, 22 bytes: half d; u32 qh; u8 qs[16].        5-bit q = nibble | (bit j (resp. j
//   + 16) of qh) << 4;
//                                                                x = d·(q − 16)
//   Q5_1  32 values, 24 bytes: half d, m; u32 qh; u8 qs[16].     x = d·q + m
//   Q5_K 256 values, 176 bytes: half d, dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]. As Q4_K, the 5th bit of
//        value l of 64-chunk c in bit 2c (low nibbles) or 2c + 1 (high nibbles) of qh[l]: x = (d·sc)·q −
//        dmin·m
void rows_q4_1(const unsigned char* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += kQ4_1, y += QK) {
    const float d = half_at(b), m = half_at(b + 2);
    const unsigned char* qs = b + 4;
    for (int j = 0; j < QK / 2; ++j) {
      y[j] = float(qs[j] & 0x0F) * d + m;
      y[j + QK / 2] = float(qs[j] >> 4) * d + m;
    }
  }
}

void rows_q5(const unsigned char* b, float* y, int64_t nb, bool with_min) {
  const std::size_t size = with_min ? kQ5_1 : kQ5_0, qh_at = with_min ? 4 : 2;
  for (int64_t i = 0; i < nb; ++i, b += size, y += QK) {
    const float d = half_at(b), m = with_min ? half_at(b + 2) : 0.0f;
    const uint32_t qh = load_le<uint32_t>(b + qh_at);
    const unsigned char* qs = b + qh_at + 4;
    for (int j = 0; j < QK / 2; ++j) {
      const int h0 = int(((qh >> j) << 4) & 0x10), h1 = int((qh >> (j + 12)) & 0x10);
      const int x0 = (qs[j] & 0x0F) | h0, x1 = (qs[j] >> 4) | h1;
      if (with_min) {
        y[j] = float(x0) * d + m;
        y[j + QK / 2] = float(x1) * d + m;
      } else {
        y[j] = float(x0 - 16) * d;
        y[j + QK / 2] = float(x1 - 16) * d;
      }
    }
  }
}

void rows_q5_k(const unsigned char* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += kQ5_K) {
    const float d = half_at(b), dmin = half_at(b + 2);
    const unsigned char* scales = b + kQ4K_scales;
    const unsigned char* qh = b + kQ5K_qh;
    const unsigned char* q = b + kQ5K_qs;
    unsigned u1 = 1, u2 = 2;
    for (int c = 0; c < 4; ++c, q += 32, u1 <<= 2, u2 <<= 2) {
      int sc, m;
      scale_min_k4(2 * c, scales, &sc, &m);
      const float d1 = d * float(sc), m1 = dmin * float(m);
      scale_min_k4(2 * c + 1, scales, &sc, &m);
      const float d2 = d * float(sc), m2 = dmin * float(m);
      for (int l = 0; l < 32; ++l) *y++ = d1 * float((q[l] & 0xF) + ((qh[l] & u1) ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * float((q[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
    }
  }
}

// ---- quantizer helpers ----

void check_finite(const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i])) data_error("quantize: value " + std::to_string(i) + " is not finite");
}

void quant_q8_0(const float* x, unsigned char* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += QK, b += kQ8_0) {
    float amax = 0.0f;
    for (int j = 0; j < QK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    put_half(b, float_to_f16(d));
    for (int j = 0; j < QK; ++j)
      b[2 + j] = static_cast<unsigned char>(static_cast<int8_t>(std::round(x[j] * id)));
  }
}

void quant_q4_0(const float* x, unsigned char* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += QK, b += kQ4_0) {
    const float d = detail::signed_absmax(x, QK) / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    put_half(b, float_to_f16(d));
    for (int j = 0; j < QK / 2; ++j) {
      const float x0 = x[j] * id, x1 = x[j + QK / 2] * id;
      const uint8_t xi0 = uint8_t(std::min<int>(15, static_cast<int8_t>(x0 + 8.5f)));
      const uint8_t xi1 = uint8_t(std::min<int>(15, static_cast<int8_t>(x1 + 8.5f)));
      b[2 + j] = uint8_t(xi0 | (xi1 << 4));
    }
  }
}

// Q4_K (4-bit codes) and Q5_K (5-bit: the 5th bit of value l of sub-block j in bit j of qh[l]): the same
// 6-bit scales and mins, `top` = 15 or 31 the largest code.
void quant_q4k_like(const float* x, unsigned char* b, int64_t nb, bool five) {
  const std::size_t size = five ? kQ5_K : kQ4_K, qs_at = five ? kQ5K_qs : kQ4K_qs;
  for (int64_t i = 0; i < nb; ++i, x += QK_K, b += size) {
    const detail::KScales k = detail::k_scales_with_mins(x, 8, five ? 31 : 15, 63);
    std::memset(b, 0, size);
    put_half(b, k.d);
    put_half(b + 2, k.dmin);
    unsigned char* scales = b + kQ4K_scales;
    for (int j = 0; j < 4; ++j) {
      scales[j] = uint8_t((k.s[j] & 63) | ((k.s[j + 4] >> 4) << 6));
      scales[j + 4] = uint8_t((k.m[j] & 63) | ((k.m[j + 4] >> 4) << 6));
      scales[j + 8] = uint8_t((k.s[j + 4] & 15) | ((k.m[j + 4] & 15) << 4));
    }
    if (five)
      for (int e = 0; e < QK_K; ++e)
        if (k.L[e] > 15) b[kQ5K_qh + e % 32] |= uint8_t(1u << (e / 32));
    unsigned char* qs = b + qs_at;
    for (int c = 0; c < 4; ++c)
      for (int l = 0; l < 32; ++l)
        qs[32 * c + l] = uint8_t((k.L[64 * c + l] & 15) | ((k.L[64 * c + 32 + l] & 15) << 4));
  }
}

void quant_q6_k(const float* x, unsigned char* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += QK_K, b += kQ6_K) {
    float amax[16], need_max = 0;
    for (int j = 0; j < 16; ++j) {
      amax[j] = 0;
      for (int l = 0; l < 16; ++l) amax[j] = std::max(amax[j], std::fabs(x[16 * j + l]));
      need_max = std::max(need_max, amax[j] / 31.0f);
    }
    const uint16_t hd = half_at_least(need_max, 127.0f, "scale");
    const float d = f16_to_float(hd);
    int sc[16];
    uint8_t Q[QK_K];
    for (int j = 0; j < 16; ++j) {
      sc[j] = d > 0 ? std::clamp(int(std::ceil(amax[j] / 31.0f / d)), 0, 127) : 0;
      while (sc[j] < 127 && d * float(sc[j]) * 31.0f < amax[j]) ++sc[j];
      const float s = d * float(sc[j]);
      for (int l = 0; l < 16; ++l) {
        const float v = x[16 * j + l];
        const int q = s > 0 ? best_code(v, v / s, -32, 31, [&](int c) { return s * float(c); }) : 0;
        Q[16 * j + l] = uint8_t(q + 32);
      }
    }
    unsigned char* ql = b;
    unsigned char* qh = b + kQ6K_qh;
    for (int n = 0; n < 2; ++n) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t q1 = Q[128 * n + l], q2 = Q[128 * n + l + 32], q3 = Q[128 * n + l + 64],
                      q4 = Q[128 * n + l + 96];
        ql[64 * n + l] = uint8_t((q1 & 15) | ((q3 & 15) << 4));
        ql[64 * n + l + 32] = uint8_t((q2 & 15) | ((q4 & 15) << 4));
        qh[32 * n + l] = uint8_t((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
      }
    }
    for (int j = 0; j < 16; ++j) b[kQ6K_scales + j] = static_cast<unsigned char>(static_cast<int8_t>(sc[j]));
    put_half(b + kQ6K_d, hd);
  }
}

}  // namespace

namespace detail {

KScales k_scales_with_mins(const float* x, int subs, int top, int grid) {
  const int len = QK_K / subs;
  KScales k;
  float lo[16], hi[16], max_min = 0;
  for (int j = 0; j < subs; ++j) {
    lo[j] = 0.0f, hi[j] = -INFINITY;
    for (int l = 0; l < len; ++l) lo[j] = std::min(lo[j], x[len * j + l]), hi[j] = std::max(hi[j], x[len * j + l]);
    max_min = std::max(max_min, -lo[j]);
  }
  k.dmin = half_at_least(max_min, float(grid), "min scale");
  const float dmin = f16_to_float(k.dmin);
  float m_eff[16], need[16], max_need = 0;
  for (int j = 0; j < subs; ++j) {
    k.m[j] = dmin > 0 ? std::clamp(int(std::ceil(-lo[j] / dmin)), 0, grid) : 0;
    while (k.m[j] < grid && dmin * float(k.m[j]) < -lo[j]) ++k.m[j];
    m_eff[j] = dmin * float(k.m[j]);
    need[j] = (hi[j] + m_eff[j]) / float(top);
    max_need = std::max(max_need, need[j]);
  }
  k.d = half_at_least(max_need, float(grid), "scale");
  const float d = f16_to_float(k.d);
  for (int j = 0; j < subs; ++j) {
    k.s[j] = d > 0 ? std::clamp(int(std::ceil(need[j] / d)), 0, grid) : 0;
    while (k.s[j] < grid && d * float(k.s[j]) * float(top) - m_eff[j] < hi[j]) ++k.s[j];
    const float s = d * float(k.s[j]), m = m_eff[j];
    for (int l = 0; l < len; ++l) {
      const float v = x[len * j + l];
      k.L[len * j + l] =
          s > 0 ? uint8_t(best_code(v, (v + m) / s, 0, top, [&](int q) { return s * float(q) - m; })) : 0;
    }
  }
  return k;
}

uint16_t half_at_least(float target, float k, const char* what) {
  if (!(target > 0)) return 0;
  uint16_t h = float_to_f16(target / k);
  while (f16_to_float(h) * k < target) {
    if (h >= 0x7bff)
      data_error(std::string("quantize: the ") + what +
                 " of a block overflows binary16 (values beyond ~4e6)");
    ++h;
  }
  if (h >= 0x7c00)
    data_error(std::string("quantize: the ") + what + " of a block overflows binary16 (values beyond ~4e6)");
  return h;
}

}  // namespace detail

std::optional<GgmlTypeTraits> ggml_type_traits(uint32_t type) {
  switch (type) {
    case 0:
      return GgmlTypeTraits{"F32", 1, 4, true, true};
    case 1:
      return GgmlTypeTraits{"F16", 1, 2, true, true};
    case 2:
      return GgmlTypeTraits{"Q4_0", 32, 18, true, true};
    case 3:
      return GgmlTypeTraits{"Q4_1", 32, 20, true, true};
    case 6:
      return GgmlTypeTraits{"Q5_0", 32, 22, true, true};
    case 7:
      return GgmlTypeTraits{"Q5_1", 32, 24, true, true};
    case 8:
      return GgmlTypeTraits{"Q8_0", 32, 34, true, true};
    case 9:
      return GgmlTypeTraits{"Q8_1", 32, 36, false, false};
    case 10:
      return GgmlTypeTraits{"Q2_K", 256, 84, true, true};
    case 11:
      return GgmlTypeTraits{"Q3_K", 256, 110, true, true};
    case 12:
      return GgmlTypeTraits{"Q4_K", 256, 144, true, true};
    case 13:
      return GgmlTypeTraits{"Q5_K", 256, 176, true, true};
    case 14:
      return GgmlTypeTraits{"Q6_K", 256, 210, true, true};
    case 15:
      return GgmlTypeTraits{"Q8_K", 256, 292, false, false};
    case 20:
      return GgmlTypeTraits{"IQ4_NL", 32, 18, true, true};
    case 23:
      return GgmlTypeTraits{"IQ4_XS", 256, 136, true, true};
    case 24:
      return GgmlTypeTraits{"I8", 1, 1, false, false};
    case 25:
      return GgmlTypeTraits{"I16", 1, 2, false, false};
    case 26:
      return GgmlTypeTraits{"I32", 1, 4, false, false};
    case 27:
      return GgmlTypeTraits{"I64", 1, 8, false, false};
    case 28:
      return GgmlTypeTraits{"F64", 1, 8, false, false};
    case 30:
      return GgmlTypeTraits{"BF16", 1, 2, true, true};
    default:
      return std::nullopt;
  }
}

std::string ggml_type_name(GgmlType t) {
  const auto tr = ggml_type_traits(uint32_t(t));
  return tr ? tr->name : "type " + std::to_string(uint32_t(t));
}

std::string ggml_type_list(bool quantizes) {
  std::string s;
  for (uint32_t t = 0; t < 64; ++t) {
    const auto tr = ggml_type_traits(t);
    if (tr && (quantizes ? tr->supported : tr->dequantizes))
      s += (s.empty() ? "" : ", ") + std::string(tr->name);
  }
  return s;
}

std::optional<GgmlType> parse_ggml_type(const std::string& s) {
  std::string u;
  for (char c : s) u += char(std::toupper(static_cast<unsigned char>(c)));
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1,
                     GgmlType::Q5_0, GgmlType::Q5_1,
                     GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K,
                     GgmlType::IQ4_NL, GgmlType::IQ4_XS})
    if (u == ggml_type_name(t)) return t;
  return std::nullopt;
}

std::size_t ggml_row_size(GgmlType t, int64_t n) {
  const auto tr = ggml_type_traits(uint32_t(t));
  if (!tr) data_error("unknown ggml type " + std::to_string(uint32_t(t)));
  return std::size_t(n / tr->block_size) * tr->type_size;
}

void dequantize_row(GgmlType t, const void* src, float* y, int64_t n) {
  const auto* p = static_cast<const unsigned char*>(src);
  switch (t) {
    case GgmlType::F32:
      std::memcpy(y, p, std::size_t(n) * 4);
      return;
    case GgmlType::F16:
      for (int64_t i = 0; i < n; ++i) y[i] = f16_to_float(load_le<uint16_t>(p + 2 * i));
      return;
    case GgmlType::BF16:
      for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_float(load_le<uint16_t>(p + 2 * i));
      return;
    case GgmlType::Q8_0:
      rows_q8_0(p, y, n / QK);
      return;
    case GgmlType::Q4_0:
      rows_q4_0(p, y, n / QK);
      return;
    case GgmlType::Q4_K:
      rows_q4_k(p, y, n / QK_K);
      return;
    case GgmlType::Q6_K:
      rows_q6_k(p, y, n / QK_K);
      return;
    case GgmlType::Q4_1:
      rows_q4_1(p, y, n / QK);
      return;
    case GgmlType::Q5_0:
      rows_q5(p, y, n / QK, false);
      return;
    case GgmlType::Q5_1:
      rows_q5(p, y, n / QK, true);
      return;
    case GgmlType::Q5_K:
      rows_q5_k(p, y, n / QK_K);
      return;
    case GgmlType::Q2_K:
      detail::rows_q2_k(p, y, n / QK_K);
      return;
    case GgmlType::Q3_K:
      detail::rows_q3_k(p, y, n / QK_K);
      return;
    case GgmlType::IQ4_NL:
      detail::rows_iq4_nl(p, y, n / QK);
      return;
    case GgmlType::IQ4_XS:
      detail::rows_iq4_xs(p, y, n / QK_K);
      return;
    default:
      unsupported(t, "dequantizer");
  }
}

float dequantize_value(GgmlType t, const void* src, int64_t i) {
  const auto* p = static_cast<const unsigned char*>(src);
  switch (t) {
    case GgmlType::F32:
      return load_le<float>(p + 4 * i);
    case GgmlType::F16:
      return f16_to_float(load_le<uint16_t>(p + 2 * i));
    case GgmlType::BF16:
      return bf16_to_float(load_le<uint16_t>(p + 2 * i));
    case GgmlType::Q8_0: {  // block i/32, value i%32: d · qs
      const unsigned char* b = p + std::size_t(i / QK) * kQ8_0;
      return float(int8_t(b[2 + i % QK])) * half_at(b);
    }
    case GgmlType::Q4_0: {  // values 0..15 in the low nibbles, 16..31 in the high nibbles, offset 8
      const unsigned char* b = p + std::size_t(i / QK) * kQ4_0;
      const int e = int(i % QK);
      const int q = e < 16 ? (b[2 + e] & 15) : (b[2 + e - 16] >> 4);
      return float(q - 8) * half_at(b);
    }
    case GgmlType::Q4_K: {  // chunk c of 64 = sub-blocks 2c (low nibbles) and 2c+1 (high nibbles)
      const unsigned char* b = p + std::size_t(i / QK_K) * kQ4_K;
      const int e = int(i % QK_K), j = e / 32, c = e / 64;
      const unsigned char byte = b[kQ4K_qs + 32 * c + e % 32];
      const int q = (j % 2 == 0) ? (byte & 15) : (byte >> 4);
      int sc, m;
      scale_min_k4(j, b + kQ4K_scales, &sc, &m);
      return half_at(b) * float(sc) * float(q) - half_at(b + 2) * float(m);
    }
    case GgmlType::Q6_K: {  // half n of 128; quarter r/32 picks ql's nibble (low for 0,1) and qh's 2-bit
                            // field
      const unsigned char* b = p + std::size_t(i / QK_K) * kQ6_K;
      const int e = int(i % QK_K), n = e / 128, r = e % 128, quarter = r / 32, l = r % 32;
      const unsigned char lo_byte = b[64 * n + l + (quarter % 2) * 32];
      const int low = quarter < 2 ? (lo_byte & 15) : (lo_byte >> 4);
      const int high = (b[kQ6K_qh + 32 * n + l] >> (2 * quarter)) & 3;
      const int q = (low | (high << 4)) - 32;
      const auto scale = int8_t(b[kQ6K_scales + e / 16]);
      return half_at(b + kQ6K_d) * float(scale) * float(q);
    }
    case GgmlType::Q4_1: {  // as Q4_0 without the offset, plus the block's min m
      const unsigned char* b = p + std::size_t(i / QK) * kQ4_1;
      const int e = int(i % QK);
      const int q = e < 16 ? (b[4 + e] & 15) : (b[4 + e - 16] >> 4);
      return float(q) * half_at(b) + half_at(b + 2);
    }
    case GgmlType::Q5_0:
    case GgmlType::Q5_1: {  // value e: its nibble, and bit e of the 32-bit qh as the 5th bit
      const bool with_min = t == GgmlType::Q5_1;
      const unsigned char* b = p + std::size_t(i / QK) * (with_min ? kQ5_1 : kQ5_0);
      const unsigned char* qh = b + (with_min ? 4 : 2);
      const int e = int(i % QK);
      const int nib = e < 16 ? (qh[4 + e] & 15) : (qh[4 + e - 16] >> 4);
      const int q = nib | (((qh[e / 8] >> (e % 8)) & 1) << 4);
      return with_min ? float(q) * half_at(b) + half_at(b + 2) : float(q - 16) * half_at(b);
    }
    case GgmlType::Q5_K: {  // Q4_K's nibble and scales, the 5th bit in bit j of qh[e % 32] (j = sub-block)
      const unsigned char* b = p + std::size_t(i / QK_K) * kQ5_K;
      const int e = int(i % QK_K), j = e / 32, c = e / 64;
      const unsigned char byte = b[kQ5K_qs + 32 * c + e % 32];
      const int q = ((j % 2 == 0) ? (byte & 15) : (byte >> 4)) + (((b[kQ5K_qh + e % 32] >> j) & 1) ? 16 : 0);
      int sc, m;
      scale_min_k4(j, b + kQ4K_scales, &sc, &m);
      return half_at(b) * float(sc) * float(q) - half_at(b + 2) * float(m);
    }
    case GgmlType::Q2_K:
      return detail::value_q2_k(p, i);
    case GgmlType::Q3_K:
      return detail::value_q3_k(p, i);
    case GgmlType::IQ4_NL:
      return detail::value_iq4_nl(p, i);
    case GgmlType::IQ4_XS:
      return detail::value_iq4_xs(p, i);
    default:
      unsupported(t, "dequantizer");
  }
}

void quantize_row(GgmlType t, const float* x, void* dst, int64_t n) {
  auto* p = static_cast<unsigned char*>(dst);
  if (t != GgmlType::F32) check_finite(x, n);
  switch (t) {
    case GgmlType::F32:
      std::memcpy(p, x, std::size_t(n) * 4);
      return;
    case GgmlType::F16:
      for (int64_t i = 0; i < n; ++i) put_half(p + 2 * i, float_to_f16(x[i]));
      return;
    case GgmlType::BF16:
      for (int64_t i = 0; i < n; ++i) put_half(p + 2 * i, float_to_bf16(x[i]));
      return;
    case GgmlType::Q8_0:
      quant_q8_0(x, p, n / QK);
      return;
    case GgmlType::Q4_0:
      quant_q4_0(x, p, n / QK);
      return;
    case GgmlType::Q4_K:
      quant_q4k_like(x, p, n / QK_K, false);
      return;
    case GgmlType::Q5_K:
      quant_q4k_like(x, p, n / QK_K, true);
      return;
    case GgmlType::Q6_K:
      quant_q6_k(x, p, n / QK_K);
      return;
    case GgmlType::Q2_K:
      detail::quant_q2_k(x, p, n / QK_K);
      return;
    case GgmlType::Q3_K:
      detail::quant_q3_k(x, p, n / QK_K);
      return;
    case GgmlType::IQ4_NL:
      detail::quant_iq4_nl(x, p, n / QK);
      return;
    case GgmlType::Q4_1:
      detail::quant_q4_1(x, p, n / QK);
      return;
    case GgmlType::Q5_0:
      detail::quant_q5_0(x, p, n / QK);
      return;
    case GgmlType::Q5_1:
      detail::quant_q5_1(x, p, n / QK);
      return;
    case GgmlType::IQ4_XS:
      detail::quant_iq4_xs(x, p, n / QK_K);
      return;
    default:
      unsupported(t, "quantizer");
  }
}

}  // namespace qkv::io
