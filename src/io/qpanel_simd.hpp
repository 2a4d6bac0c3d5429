// Rows of a ggml weight expanded to float32 (qpanel.hpp) with the fused kernels' decoders
// (qblock_decode*.hpp, the arithmetic of dequantize_row: every value bit-identical to it): a tile of at most
// kTile values at a time, decoded into the panel. The includer defines QKV_SIMD, includes the ISA's decoders
// and defines `Store` (acc(ja, wa, jb, wb): stores the ISA's vectors, unaligned, at tile + ja, + jb).
#pragma once
#include <cstdint>
#include <cstring>

#include "io/qblock_decode.hpp"
#include "qkv/io/gguf_quant.hpp"

namespace qkv::io::qdetail {
namespace {

// Each tile is decoded straight into the panel: the vector decoders' Store writes unaligned, and a tile
// decoder (F16, BF16, the plain ones) writes its tile there when that is 64-byte aligned (its aligned
// stores; rows of a 64-byte-aligned panel with K a multiple of 16 always are). Else, and for F32 (whose
// decoder returns the row itself), through the L1 tile and a copy.
template <class Dec, class Store>
QKV_SIMD void panel_rows(const unsigned char* W, int r0, int r1, int K, float* out) {
  const std::size_t rb = std::size_t(K / Dec::kBlock) * Dec::kBytes;
  alignas(64) float tile[kTile];
  for (int r = r0; r < r1; ++r) {
    const unsigned char* row = W + std::size_t(r) * rb;
    float* o = out + std::size_t(r - r0) * K;
    for (int k0 = 0; k0 < K; k0 += kTile) {
      const int L = std::min(kTile, K - k0);
      float* dst = o + k0;
      if constexpr (requires { Dec::kDirect; }) {
        Store st{dst};
        Dec::visit(row, k0, L, st);
      } else {
        const bool aligned = reinterpret_cast<std::uintptr_t>(dst) % 64 == 0;
        const float* got = Dec::run(row, k0, L, aligned ? dst : tile);
        if (got != dst) std::memcpy(dst, got, std::size_t(L) * 4);
      }
    }
  }
}

// Rows [r0, r1) of W (K values each) into out [r1 − r0, K]; false for a type without a decoder.
template <class D, class Store>
QKV_SIMD bool simd_panel(GgmlType t, const void* Wv, int r0, int r1, int K, float* out) {
  const auto* W = static_cast<const unsigned char*>(Wv);
  switch (t) {
    case GgmlType::F32:
      return panel_rows<typename D::F32, Store>(W, r0, r1, K, out), true;
    case GgmlType::F16:
      return panel_rows<typename D::F16, Store>(W, r0, r1, K, out), true;
    case GgmlType::BF16:
      return panel_rows<typename D::BF16, Store>(W, r0, r1, K, out), true;
    case GgmlType::Q8_0:
      return panel_rows<typename D::Q8_0, Store>(W, r0, r1, K, out), true;
    case GgmlType::Q4_0:
      return panel_rows<typename D::Q4_0, Store>(W, r0, r1, K, out), true;
    case GgmlType::Q2_K:
      return panel_rows<typename D::Q2_K, Store>(W, r0, r1, K, out), true;
    case GgmlType::Q3_K:
      return panel_rows<typename D::Q3_K, Store>(W, r0, r1, K, out), true;
    case GgmlType::Q4_K:
      return panel_rows<typename D::Q4_K, Store>(W, r0, r1, K, out), true;
    case GgmlType::Q5_K:
      return panel_rows<typename D::Q5_K, Store>(W, r0, r1, K, out), true;
    case GgmlType::IQ4_NL:
      return panel_rows<typename D::IQ4_NL, Store>(W, r0, r1, K, out), true;
    case GgmlType::Q4_1:
      return panel_rows<typename D::Q4_1, Store>(W, r0, r1, K, out), true;
    case GgmlType::Q5_0:
      return panel_rows<typename D::Q5_0, Store>(W, r0, r1, K, out), true;
    case GgmlType::Q5_1:
      return panel_rows<typename D::Q5_1, Store>(W, r0, r1, K, out), true;
    case GgmlType::IQ4_XS:
      return panel_rows<typename D::IQ4_XS, Store>(W, r0, r1, K, out), true;
    case GgmlType::Q6_K:
      return panel_rows<typename D::Q6_K, Store>(W, r0, r1, K, out), true;
    default:
      return false;
  }
}

}  // namespace
}  // namespace qkv::io::qdetail
