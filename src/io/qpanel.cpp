// Panel expansion (qpanel.hpp): the dispatch to the path in use and the portable path (qblock_decode.hpp's
// plain loops, which the baseline compiler vectorises; NEON builds take it too). The vector paths:
// qpanel_avx2.cpp, qpanel_avx512.cpp (both qpanel_simd.hpp).
#include "qkv/io/qpanel.hpp"

#include <string>

#include "qkv/error.hpp"
#include "qkv/flash.hpp"
#include "qkv/io/qmatmul.hpp"

#define QKV_SIMD
#include "io/qmatmul_simd.hpp"
#include "io/qpanel_simd.hpp"

namespace qkv::io {

namespace qdetail {
bool qpanel_avx2(GgmlType, const void*, int, int, int, float*);
bool qpanel_avx512(GgmlType, const void*, int, int, int, float*);
}  // namespace qdetail

namespace {
struct NoStore {  // the plain decoders hand over a tile, never vectors
  float* tile;
};
bool qpanel_portable(GgmlType t, const void* W, int r0, int r1, int K, float* out) {
  return qdetail::simd_panel<qdetail::PlainDecoders, NoStore>(t, W, r0, r1, K, out);
}
}  // namespace

void dequantize_panel(GgmlType t, const void* W, int r0, int r1, int K, float* out) {
  if (!qmatmul_supports(t)) data_error("dequantize_panel: tensor type " + ggml_type_name(t) + " has no decoder");
  const int64_t bs = ggml_type_traits(uint32_t(t))->block_size;
  if (K % bs != 0)
    data_error("dequantize_panel: a row of " + std::to_string(K) + " values is not whole " + ggml_type_name(t) +
               " blocks of " + std::to_string(bs));
  if (r1 <= r0) return;
  switch (flash_path()) {
    case FlashPath::Avx512:
      qdetail::qpanel_avx512(t, W, r0, r1, K, out);
      return;
    case FlashPath::Avx2:
      qdetail::qpanel_avx2(t, W, r0, r1, K, out);
      return;
    default:
      qpanel_portable(t, W, r0, r1, K, out);
  }
}

}  // namespace qkv::io
