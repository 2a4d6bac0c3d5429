// ggml's tensor types: block sizes, and the (de)quantizers qkv implements, with the semantics ggml's
// ggml-common.h / ggml-quants.c define (learned from them, not copied).
//
// Blocks (QK_K = 256), all little-endian, half = IEEE binary16:
//   Q8_0  32 values, 34 bytes: half d; int8 qs[32].                       x_i = d · qs_i
//   Q4_0  32 values, 18 bytes: half d; u8 qs[16].                         x_j = d · ((qs_j & 15) − 8),
//                                                                         x_{j+16} = d · ((qs_j >> 4) − 8)
//   Q4_K 256 values, 144 bytes: half d, dmin; u8 scales[12]; u8 qs[128].  8 sub-blocks of 32 with 6-bit
//        scale sc_j and min m_j packed in `scales` (get_scale_min_k4); value e of 64-chunk c:
//        x = (d·sc)·q − dmin·m, q the low nibble of qs[32c + e%32] for e%64 < 32, else the high nibble
//   Q6_K 256 values, 210 bytes: u8 ql[128]; u8 qh[64]; int8 scales[16]; half d.  16 sub-blocks of 16:
//        x_e = (d·scales[e/16])·(q_e − 32), q_e 6 bits: 4 low from ql, 2 high from qh (see quant.cpp)
//   Q2_K 256 values, 84 bytes: u8 scales[16]; u8 qs[64]; half d, dmin.  16 sub-blocks of 16, 4-bit scale
//        and min in the nibbles of scales[j], 2-bit q: x = (d·sc)·q − dmin·m
//   Q3_K 256 values, 110 bytes: u8 hmask[32]; u8 qs[64]; u8 scales[12]; half d.  16 sub-blocks of 16,
//        6-bit scales, 2-bit q with a high bit in hmask: x = (d·(sc − 32))·(q − 4·!high)  (quant_low_k.cpp)
// F32, F16 and BF16 are one value per "block".
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace qkv::io {

// ggml_type numbers as the format stores them. Only the ones listed have known block sizes in qkv; of
// those, F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, the K-quants Q2_K…Q6_K, IQ4_NL and IQ4_XS can be
// dequantized and quantized (Q8_1, Q8_K, I8…F64 neither).
enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ4_NL = 20,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  BF16 = 30,
};

struct GgmlTypeTraits {
  const char* name;       // "Q4_K" as ggml names it
  int64_t block_size;     // values per block
  std::size_t type_size;  // bytes per block
  bool supported;         // qkv dequantizes and quantizes it
  bool dequantizes;       // qkv dequantizes it (today: exactly the supported ones)
};

// nullopt for a type number qkv does not know (its block size is then unknown too).
std::optional<GgmlTypeTraits> ggml_type_traits(uint32_t type);
std::string ggml_type_name(GgmlType t);
// "F32, F16, Q4_0, …": the types qkv dequantizes (or, with quantizes, also quantizes), in ggml's order; for
// error messages, from the traits table.
std::string ggml_type_list(bool quantizes);
// Parses "f32", "F16", "q4_k", ... (case-insensitive); nullopt when it is not a supported type.
std::optional<GgmlType> parse_ggml_type(const std::string& s);
// Bytes of a row of n values (n a multiple of the block size, checked by the caller).
std::size_t ggml_row_size(GgmlType t, int64_t n);

// Fast row dequantizer: n values (a multiple of the block size) from `src` (any alignment) into y.
// Throws qkv::Error (Data) for a type qkv does not dequantize.
void dequantize_row(GgmlType t, const void* src, float* y, int64_t n);
// The slow twin: each value computed on its own from the block definition above (no shared loop
// structure with dequantize_row). Bit-identical to dequantize_row by construction of the arithmetic.
float dequantize_value(GgmlType t, const void* src, int64_t i);

// Quantizes n values (a multiple of the block size) into `dst` (ggml_row_size(t, n) bytes).
//   F16/BF16: round to nearest even. Q8_0, Q4_0, Q4_1, Q5_0, Q5_1: exactly ggml's quantize_row_*_ref.
//   Q2_K…Q6_K: a simpler scale search than ggml's (no iterative refinement), producing valid blocks with
//   this guarantee, per sub-block of 16 (Q2_K, Q3_K, Q6_K) / 32 (Q4_K, Q5_K) values x with stored step
//   s = d·sc: |x − x̂| ≤ s/2 (plus float rounding), where s ≤ (max − min(0, min))/15 + d + dmin/15 (Q4_K;
//   a min below 0 is represented by dmin·m ≥ −min), the same with 31 (Q5_K) and with 3 (Q2_K),
//   s ≤ max|x|/3 + d (Q3_K) and s ≤ max|x|/31 + d (Q6_K).
//   IQ4_NL, IQ4_XS: the value of largest magnitude of a block (IQ4_NL) or sub-block of 32 (IQ4_XS) mapped to
//   the codebook's −127, each value to its nearest entry: |x − x̂| ≤ 14·|s|, s the stored step, with
//   |s| ≤ max|x|/127 (rounded up to binary16) for IQ4_NL and ≤ max|x|/127 + d for IQ4_XS.
// Throws qkv::Error (Data) on a non-finite value or a scale that overflows binary16.
void quantize_row(GgmlType t, const float* x, void* dst, int64_t n);

}  // namespace qkv::io
