// One head's maps, sliced out of GPT-2's fused weights by hand (DESIGN.md's conventions):
//   c_attn.weight [d, 3d]: columns [0,d) W_Q, [d,2d) W_K, [2d,3d) W_V; head h = columns [h·dh, (h+1)·dh)
//   c_attn.bias   [3d]:    b_Q | b_K | b_V, sliced the same way
//   c_proj.weight [d, d]:  rows [h·dh, (h+1)·dh) are head h's W_O (merge puts head h's z there)
#pragma once
#include <vector>

#include "qkv/analysis/matrix.hpp"
#include "qkv/model.hpp"

namespace qkv::analysis {

struct HeadWeights {
  Matrix W_Q, W_K, W_V;               // [d, dh]
  std::vector<double> b_Q, b_K, b_V;  // [dh]
  Matrix W_O;                         // [dh, d]
};

// Throws a usage qkv::Error "--layer: 7 is outside [0, 2) ..." / "--head: ..." naming the valid range.
void check_layer(const GPT2& m, int layer);
void check_head(const GPT2& m, int layer, int head);

// fold_ln_1: multiply row i of W_Q, W_K, W_V by ln_1.weight[i] (TransformerLens's fold_ln for the
// weights, so the circuits see what the LayerNorm's scale does; its bias and the centring are not folded).
HeadWeights head_weights(const GPT2& m, int layer, int head, bool fold_ln_1 = false);

// The residual row entering block `layer` and its ln_1, for the input ids, from the model's forward.
struct LayerInput {
  int T = 0;
  Matrix x;  // [T, d] hook_resid_pre
  Matrix u;  // [T, d] ln_1(x) as the model computed it
};
LayerInput layer_input(const GPT2& m, const std::vector<int>& ids, int layer, Activations& acts);

// u [T, d] · W [d, dh] + b (b may be empty): one head's q, k or v, computed here, not by the model.
Matrix project_rows(const Matrix& u, const Matrix& W, const std::vector<double>& b);

// [T, T] matrix of q_i·k_j / √dh.
Matrix score_matrix(const Matrix& q, const Matrix& k);

// softmax of each row over the allowed keys j ≤ i (the causal mask), in double.
Matrix causal_pattern(const Matrix& S);

}  // namespace qkv::analysis
