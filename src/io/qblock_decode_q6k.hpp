// The x86 Q6_K decoder for the fused kernels, once for AVX2 and AVX-512 (qblock_decode_avx2.hpp and
// qblock_decode_avx512.hpp include it after their f16c_scale): q = (ql's nibble | qh's 2-bit field << 4)
// − 32 in int32 lanes, x = (d·sc)·float(q − 32) with one int8 scale per 16 weights (rows_q6_k; the same
// IEEE operations, so the same bits). (qh >> s & 3) << 4 is written (qh << 4 − s) & 0x30. I is the ISA's
// integer lanes: VI, VF, W lanes, load (W bytes zero-extended), set1, and_, or_, shl<n>, shr<n>, sub,
// to_float, set1f, mul.
#pragma once

namespace qkv::io::qdetail {
namespace {

template <class I>
struct DecQ6_KSimd {
  static constexpr int kBlock = 256;
  static constexpr std::size_t kBytes = 210;
  static constexpr bool kDirect = true;
  using VI = typename I::VI;
  template <class F>
  QKV_SIMD static void visit(const unsigned char* row, int64_t k0, int, F& acc) {
    constexpr int W = I::W;
    const unsigned char* b = row + std::size_t(k0 / kBlock) * kBytes;
    const float d = f16c_scale(b + 208);
    const VI lo4 = I::set1(15), hi2 = I::set1(0x30), k32 = I::set1(32);
    for (int n = 0; n < 2; ++n) {
      const unsigned char* ql = b + 64 * n;
      const unsigned char* qh = b + 128 + 32 * n;
      const auto* sc = reinterpret_cast<const int8_t*>(b + 192 + 8 * n);
      for (int h = 0; h < 32 / W; ++h) {
        const VI a = I::load(ql + W * h), c = I::load(ql + 32 + W * h), e = I::load(qh + W * h);
        const VI q0 = I::or_(I::and_(a, lo4), I::and_(I::template shl<4>(e), hi2));
        const VI q1 = I::or_(I::and_(c, lo4), I::and_(I::template shl<2>(e), hi2));
        const VI q2 = I::or_(I::template shr<4>(a), I::and_(e, hi2));
        const VI q3 = I::or_(I::template shr<4>(c), I::and_(I::template shr<2>(e), hi2));
        const auto w = [&](VI q, int s) QKV_SIMD {
          return I::mul(I::set1f(d * float(sc[s])), I::to_float(I::sub(q, k32)));
        };
        const int j = 128 * n + W * h, s = W * h / 16;  // lanes j.. share scale s (16 weights per scale)
        acc(j, w(q0, s), j + 32, w(q1, s + 2));
        acc(j + 64, w(q2, s + 4), j + 96, w(q3, s + 6));
      }
    }
  }
};

}  // namespace
}  // namespace qkv::io::qdetail
