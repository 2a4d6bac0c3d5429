// Seed 000's "check yourself": slice the Q/K/V weights by hand (GPT-2's c_attn into thirds), reproduce
// q, k, v from the norm of the row, compare with the model's own forward, and measure the two traps
// (raw row, dropped bias).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "qkv/lm.hpp"

namespace qkv::analysis {

struct ProjectionPart {  // one of q, k, v
  double max_abs_diff = 0;    // hand-made vs the model's trace, over all heads and tokens
  double max_abs = 0;         // largest |value| of the model's, for scale
  double ln_trap_rel = 0;     // ‖(x·W + b) − (u·W + b)‖_F / ‖u·W + b‖_F: the raw row instead of ln_1(row)
  double bias_trap_rel = 0;   // ‖u·W − (u·W + b)‖_F / ‖u·W + b‖_F: the bias dropped
  double bias_norm = 0;       // ‖b‖ of this third
};

struct ProjectionResult {
  int layer = 0, T = 0, d = 0, H = 0, dh = 0;
  std::vector<int64_t> weight_shape;  // the stored tensor that holds Q (GPT-2: c_attn [d, 3d])
  std::vector<int64_t> bias_shape;    // its bias (GPT-2: [3d]); empty without
  double ln_max_abs_diff = 0;         // norm1(x) computed here vs the model's u
  ProjectionPart q, k, v;
  // Head h = columns [h·dh, (h+1)·dh) of each third: the largest difference between column block h of the
  // hand-made third and the model's head h (over q, k, v). A wrong cut (heads interleaved, column e·H + h)
  // is measured too, as ‖wrong − true‖/‖true‖, to show the check can fail.
  double heads_max_abs_diff = 0;
  double interleaved_cut_rel = 0;
  // The family, where its Q/K/V live, its norm, K/V heads, biases.
  std::string family;        // config.json's model_type
  std::string layout, norm;  // e.g. "separate q_proj / k_proj / v_proj", "RMSNorm"
  int n_kv = 0;
  bool has_bias = true;
};

// The check on a model of any family: the norm written out here (LayerNorm, RMSNorm, Gemma's
// x̂·(1 + w)) and the model's own Q/K/V maps (qkv_maps undoes the fused layouts), against its forward's
// ln1.hook_normalized and hook_q / hook_k / hook_v (before rotation). weight_shape: the stored tensor
// that holds Q (the fused one, or q_proj); k and v have n_kv heads; the bias trap is 0 without biases.
ProjectionResult project(const Model& model, const std::vector<int>& ids, int layer);

}  // namespace qkv::analysis
