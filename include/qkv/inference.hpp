// The fast inference forward of GPT-2: ids -> logits with no trace, no backward cache and no T×T matrix.
//
// Per block (the same maths as forward() in model.hpp, arranged for speed):
//   u = ln_1(x)                                  fused row kernel (OpenMP over rows)
//   qkv = u·W_attn            (BLIS)             then q, k, v [H, T, dh] = split(qkv) + b_attn
//   z = flash_attention(q, k, v)                 flash.hpp: online softmax, causal tiles skipped
//   x += b_O;  x += merge(z)·W_O                 the residual add is the GEMM's beta = 1
//   u = ln_2(x);  h = u·W_fc (BLIS);  h = gelu(h + b_fc)   (gelu(x) = x·σ(2·√(2/π)(x + 0.044715x³)))
//   x += b_proj;  x += h·W_proj                  beta = 1 again
// then logits = ln_f(x)·wteᵀ, for every row or only the last.
//
// Every buffer lives in InferenceState, sized once for a largest T; later calls with T <= max_T allocate
// nothing (tests/model/inference_test.cpp counts operator new). Only one block runs at a time and nothing
// is kept for a backward, so one set of buffers serves every block.
#pragma once
#include <vector>

#include "qkv/config.hpp"
#include "qkv/model.hpp"

namespace qkv {

struct InferenceState {
  InferenceState() = default;
  // Buffers for up to max_T tokens of a model with this config. full_logits = false keeps room for
  // one row of logits only (GPT-2 small at T = 1024: 206 MB less), for callers that pass last_only.
  InferenceState(const GPT2Config& config, int max_T, bool full_logits = true) {
    reserve(config, max_T, full_logits);
  }
  void reserve(const GPT2Config& config, int max_T, bool full_logits = true);

  GPT2Config config;  // the shape the buffers were sized for
  int max_T = 0;
  bool full_logits = true;
  std::vector<float> x;        // [T, d] residual stream
  std::vector<float> u;        // [T, d] ln_1(x), ln_2(x), ln_f(x)
  std::vector<float> qkv;      // [T, 3d]
  std::vector<float> q, k, v;  // [H, T, dh] each
  std::vector<float> z;        // [H, T, dh]
  std::vector<float> zm;       // [T, d] merged heads
  std::vector<float> h;        // [T, inner] MLP hidden (absent for attention-only models)
  std::vector<float> lse;      // [H, T] the flash kernel's log-sum-exp (unused by inference)
  std::vector<float> logits;   // [T, vocab], or [1, vocab] after a last_only call
};

// ids [T] -> logits [T, vocab] (last_only: [1, vocab], the logits after the last token), a reference
// into st.logits. Same checks and errors as forward(): 1 <= T <= n_positions, ids in [0, vocab).
// Sizes st for this model if it does not fit (that call allocates; later ones do not).
const std::vector<float>& forward_fast(const GPT2& model, const std::vector<int>& ids, InferenceState& st,
                                       bool last_only = false);

// FLOPs of forward_fast (multiply-adds × 2 of the GEMMs and of causal attention; elementwise ops not
// counted), for GFLOP/s figures.
double forward_flops(const GPT2Config& config, int T, bool last_only = false);

}  // namespace qkv
