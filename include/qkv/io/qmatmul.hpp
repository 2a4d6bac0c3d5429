// Fused dequantize-and-multiply for few rows: y = x · Wᵀ with W stored as ggml blocks (F32, F16, BF16, Q8_0, Q4_0,
// Q4_1, Q5_0, Q5_1, Q2_K…Q6_K, IQ4_NL, IQ4_XS) and x float32 [M, K], M small (a decoding step, a short prompt). Each
// block is dequantized on the fly into a tile of at most 256 floats that stays in L1 (the same arithmetic as
// dequantize_row: bit-identical weights) and multiplied with the float32 activations; the activations are never
// quantized, so the result is a float32 product on the dequantized weights, up to summation order. Paths as the
// attention kernels (flash.hpp): portable, AVX2 + FMA, AVX-512, NEON, the one in use being flash_path() (QKV_ISA or
// flash_force_path choose it). src/io/qmatmul*.cpp.
#pragma once
#include <cstdint>

#include "qkv/io/gguf_quant.hpp"

namespace qkv::io {

// Rows of x the fused kernels take in one call; larger products dequantize tiles and go to BLIS.
constexpr int kQMatmulMaxRows = 8;

// Whether the fused kernel multiplies this type (every type qkv dequantizes: F32, F16, BF16, Q8_0, Q4_0,
// Q4_1, Q5_0, Q5_1, Q2_K…Q6_K, IQ4_NL, IQ4_XS).
bool qmatmul_supports(GgmlType t);

// y[m·ldy + n] (+)= Σ_k W[n, k] · x[m·ldx + k] for m < M, n < N (accumulate: added to y, else stored).
// W: N rows of K values, each row ggml_row_size(t, K) bytes (K a multiple of the block size). Split over
// the GEMM threads when large enough and not already inside an OpenMP region. Throws qkv::Error (Data)
// for an unsupported type or a K that is not whole blocks.
void qmatmul(GgmlType t, const void* W, int N, int K, const float* x, int ldx, int M, float* y, int ldy,
             bool accumulate);

// The slow twin: every weight from dequantize_value, products summed in double.
void qmatmul_reference(GgmlType t, const void* W, int N, int K, const float* x, int ldx, int M, float* y,
                       int ldy, bool accumulate);

}  // namespace qkv::io
