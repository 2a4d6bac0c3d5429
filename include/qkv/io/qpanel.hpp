// Rows of a ggml weight (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K…Q6_K, IQ4_NL, IQ4_XS) expanded to float32
// for a GEMM over many rows of activations (a prefill): the fused kernels' vector decoders (io/qmatmul.hpp) on the ISA
// path in use (flash_path(): QKV_ISA), each value bit-identical to dequantize_row. The forward expands a panel of rows
// that fits the core's L2, multiplies it by float32 activations through BLIS, and reuses the buffer: the weight is
// never held as float32 whole. src/io/qpanel*.cpp.
#pragma once
#include "qkv/io/gguf_quant.hpp"

namespace qkv::io {

// out [r1 − r0, K] = rows [r0, r1) of W (each row ggml_row_size(t, K) bytes). Throws qkv::Error (Data) for
// a type without a decoder or a K that is not whole blocks (as qmatmul).
void dequantize_panel(GgmlType t, const void* W, int r0, int r1, int K, float* out);

}  // namespace qkv::io
