// The bytes of weights one decoding step reads (generate.hpp's weight_bytes_per_token): every matrix and
// norm vector once, one row of each embedding; a tied unembedding reads the whole token embedding.
#include <algorithm>

#include "qkv/generate.hpp"
#include "qkv/io/gguf_quant.hpp"

namespace qkv {

namespace {

int64_t bytes_of(const Weight& w, int64_t n) {
  switch (w.type) {
    case WeightType::F32:
      return n * 4;
    case WeightType::F16:
    case WeightType::BF16:
      return n * 2;
    default:
      return int64_t(io::ggml_row_size(io::GgmlType(w.ggml_type), n));
  }
}

}  // namespace

int64_t weight_bytes_per_token(const Model& m) {
  int64_t total = 0;
  for (int r = 0; r < kRoles; r++)
    for (size_t l = 0; l < (r < kTopRoles ? size_t(1) : m.blocks.size()); l++) {
      const Weight& w = role_slot(m, m.blocks, Role(r), int(l));
      if (!w.present()) continue;
      const int64_t n = w.numel();
      const int64_t rows = w.shape.empty() ? 1 : w.shape[0];
      const bool embedding = is_embedding(Role(r)) && !(Role(r) == Role::wte && !m.lm_head.present());
      total += bytes_of(w, embedding ? n / std::max<int64_t>(rows, 1) : n);
    }
  return total;
}

}  // namespace qkv
