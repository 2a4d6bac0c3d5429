// NEON decoders of ggml blocks for the fused kernels (qmatmul_neon.cpp): the same values as
// qblock_decode.hpp's plain loops (dequantize_row's arithmetic), handed straight to the accumulators
// (kDirect) instead of through a tile. The includer defines QKV_SIMD (empty) and includes <arm_neon.h>
// and qblock_decode.hpp.
#pragma once

namespace qkv::io::qdetail {
namespace {

// Q6_K: q = (ql's nibble | qh's 2-bit field << 4) − 32 in int8 lanes, 16 at a time (one int8 scale's
// weights), widened to int32, converted and multiplied by (d·sc): x = (d·sc)·float(q − 32) (rows_q6_k).
// (qh >> s & 3) << 4 is written (qh << 4 − s) & 0x30.
struct DecQ6_KNeon {
  static constexpr int kBlock = 256;
  static constexpr std::size_t kBytes = 210;
  static constexpr bool kDirect = true;
  template <class F>
  static void visit(const unsigned char* row, int64_t k0, int, F& acc) {
    const unsigned char* b = row + std::size_t(k0 / kBlock) * kBytes;
    const float d = half_to_float(u16_at(b + 208));
    const uint8x16_t lo4 = vdupq_n_u8(15), hi2 = vdupq_n_u8(0x30);
    const int8x16_t k32 = vdupq_n_s8(32);
    for (int n = 0; n < 2; ++n) {
      const unsigned char* ql = b + 64 * n;
      const unsigned char* qh = b + 128 + 32 * n;
      const auto* sc = reinterpret_cast<const int8_t*>(b + 192 + 8 * n);
      for (int h = 0; h < 2; ++h) {
        const uint8x16_t a = vld1q_u8(ql + 16 * h), c = vld1q_u8(ql + 32 + 16 * h), e = vld1q_u8(qh + 16 * h);
        const uint8x16_t q[4] = {vorrq_u8(vandq_u8(a, lo4), vandq_u8(vshlq_n_u8(e, 4), hi2)),
                                 vorrq_u8(vandq_u8(c, lo4), vandq_u8(vshlq_n_u8(e, 2), hi2)),
                                 vorrq_u8(vshrq_n_u8(a, 4), vandq_u8(e, hi2)),
                                 vorrq_u8(vshrq_n_u8(c, 4), vandq_u8(vshrq_n_u8(e, 2), hi2))};
        for (int r = 0; r < 4; ++r) {  // weights 128n + 32r + 16h .. +15, scale sc[h + 2r]
          const float32x4_t s = vdupq_n_f32(d * float(sc[h + 2 * r]));
          const int8x16_t v = vsubq_s8(vreinterpretq_s8_u8(q[r]), k32);
          const int16x8_t v0 = vmovl_s8(vget_low_s8(v)), v1 = vmovl_high_s8(v);
          const auto w = [&](int32x4_t i) { return vmulq_f32(s, vcvtq_f32_s32(i)); };
          const int j = 128 * n + 32 * r + 16 * h;
          acc(j, w(vmovl_s16(vget_low_s16(v0))), j + 4, w(vmovl_high_s16(v0)));
          acc(j + 8, w(vmovl_s16(vget_low_s16(v1))), j + 12, w(vmovl_high_s16(v1)));
        }
      }
    }
  }
};

struct NeonDecoders : PlainDecoders {
  using Q6_K = DecQ6_KNeon;
};

}  // namespace
}  // namespace qkv::io::qdetail
