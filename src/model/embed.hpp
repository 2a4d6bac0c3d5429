// The start both forwards share (forward.cpp's traced one, inference.cpp's fast one), private to
// src/model: the input's checks and x = wte[ids] + wpe[positions].
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "qkv/error.hpp"
#include "qkv/model.hpp"

namespace qkv::model_detail {

// Refuses what the model cannot embed: no tokens, more tokens than positions, an id outside the
// vocabulary. Called before any buffer is sized by T.
inline void check_input_ids(const GPT2Config& c, const std::vector<int>& ids) {
  const int T = int(ids.size()), V = c.vocab_size;
  if (T < 1) usage_error("no tokens: the input is empty");
  if (T > c.n_positions)
    usage_error(std::to_string(T) + " tokens, but the model has only " + std::to_string(c.n_positions) +
                " positions (n_positions); shorten the input");
  for (int t = 0; t < T; t++)
    if (ids[size_t(t)] < 0 || ids[size_t(t)] >= V)
      usage_error("token id " + std::to_string(ids[size_t(t)]) + " at position " + std::to_string(t) +
                  " is outside the vocabulary [0, " + std::to_string(V) + ")");
}

// x [T, d] = wte[ids] + wpe[0..T), ids already checked. One float add an element, so the result is the
// same whether `parallel` spreads the rows over OpenMP threads or not.
inline void embed_tokens(const GPT2& m, const std::vector<int>& ids, float* x, bool parallel) {
  const int T = int(ids.size()), d = m.config.n_embd;
  const float* wte = m.params.data() + m.wte;
  const float* wpe = m.params.data() + m.wpe;
#pragma omp parallel for schedule(static) if (parallel)
  for (int t = 0; t < T; t++) {
    const float* e = wte + int64_t(ids[size_t(t)]) * d;
    const float* p = wpe + int64_t(t) * d;
    float* xt = x + int64_t(t) * d;
#pragma omp simd
    for (int j = 0; j < d; j++) xt[j] = e[j] + p[j];
  }
}

}  // namespace qkv::model_detail
