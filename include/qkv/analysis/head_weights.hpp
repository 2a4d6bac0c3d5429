// One head's maps, read out of a model of any family (DESIGN.md's conventions). GPT-2's fused weights:
//   c_attn.weight [d, 3d]: columns [0,d) W_Q, [d,2d) W_K, [2d,3d) W_V; head h = columns [h·dh, (h+1)·dh)
//   c_attn.bias   [3d]:    b_Q | b_K | b_V, sliced the same way
//   c_proj.weight [d, d]:  rows [h·dh, (h+1)·dh) are head h's W_O (merge puts head h's z there)
// Other layouts (separate q/k/v_proj, NeoX's per-head interleave, Phi-3's stacked rows) through qkv_maps.
#pragma once
#include <vector>

#include "qkv/analysis/matrix.hpp"
#include "qkv/lm.hpp"

namespace qkv::analysis {

struct HeadWeights {
  Matrix W_Q, W_K, W_V;               // [d, dh]
  std::vector<double> b_Q, b_K, b_V;  // [dh]
  Matrix W_O;                         // [dh, d]
};

// u [T, d] · W [d, dh] + b (b may be empty): one head's q, k or v, computed here, not by the model.
Matrix project_rows(const Matrix& u, const Matrix& W, const std::vector<double>& b);

// Throws a usage qkv::Error "--layer: 7 is outside [0, 2) ..." / "--head: ..." naming the valid range.
void check_layer(const Model& m, int layer);
void check_head(const Model& m, int layer, int head);
// The multiplier the block's first norm applies per coordinate: w (LayerNorm, RMSNorm) or 1 + w (Gemma).
std::vector<double> norm_scale(const Model& m, const Weight& w);
// The maps come from qkv_maps (GPT-2's thirds, NeoX's per-head interleave, Phi-3's stacked rows or
// separate q/k/v_proj, undone), W_O from o_proj / dense / c_proj. Query head h reads key/value head
// h / (H / n_kv): its W_K, W_V and b_K, b_V are that group's (identical for every head of a group).
// fold_ln_1: row i of W_Q, W_K, W_V times norm_scale(ln1)[i] (TransformerLens's fold_ln for the weights, so
// the circuits see what the norm's scale does; its bias and the centring are not folded).
HeadWeights head_weights(const Model& m, int layer, int head, bool fold_ln_1 = false);
// Every head of a layer at once (qkv_maps read once): heads[h].
std::vector<HeadWeights> layer_head_weights(const Model& m, int layer, bool fold_ln_1 = false);

// The forward's activations at block `layer` (run_with_cache, every layer materialised): x = hook_resid_pre,
// u = ln1.hook_normalized [T, d]; q [T, H, dh], k, v [T, n_kv, dh] before rotation, rot_q / rot_k after
// (equal to q / k without rotary); the scores hook (scaled, soft-capped, masked: -inf) [H, T, T].
struct LayerInput {
  int T = 0;
  Matrix x, u;
  std::vector<float> q, k, v, rot_q, rot_k, scores;
};
LayerInput layer_input(const Model& m, const std::vector<int>& ids, int layer);

// One head's rows [T, dh] out of a [T, n, dh] activation.
Matrix head_rows(const std::vector<float>& act, int T, int n, int dh, int head);
// Rows [T, dh] rotated to positions 0 .. T-1 with the model's own rotation (no-op without rotary), in double:
// each row is rotated by apply_rotary's cos/sin at that position (the rotation matrix applied in double).
Matrix rotate_rows(const Arch& a, const Matrix& x);
// The model's mask and soft-cap for layer l: S [T, T] scaled scores -> the pattern, in double
// (key j visible iff j <= i and, with a window w, i - j < w; soft-cap c·tanh(S/c) first).
Matrix attention_pattern(const Arch& a, int layer, const Matrix& S);
bool visible(const Arch& a, int layer, int i, int j);

}  // namespace qkv::analysis
