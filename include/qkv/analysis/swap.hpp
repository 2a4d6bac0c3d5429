// Seed 000's swap check: exchanging the query and key maps entirely (matrix and bias) transposes the
// raw score matrix — an identity that tests the slicing, not the model; exchanging only the matrices
// gives neither S nor Sᵀ; and after the causal mask and the softmax no transpose relation is left.
#pragma once
#include <string>
#include <vector>

#include "qkv/analysis/matrix.hpp"
#include "qkv/lm.hpp"

namespace qkv::analysis {

struct SwapResult {
  int layer = 0, head = 0, T = 0;
  Matrix S;              // [T, T] q·kᵀ/√dh recomputed here from u and the sliced maps
  Matrix S_full;         // q' = u·W_K + b_K, k' = u·W_Q + b_Q
  Matrix S_matrices;     // q'' = u·W_K + b_Q, k'' = u·W_Q + b_K (biases left where they sit)
  double S_vs_model_max_abs = 0;   // S against the model's own scores: the slicing is right
  double full_vs_ST_max_abs = 0;   // must be rounding: the identity holds
  double full_vs_ST_rel = 0;
  double matrices_vs_S_rel = 0;    // ‖S_matrices − S‖_F/‖S‖_F
  double matrices_vs_ST_rel = 0;   // ‖S_matrices − Sᵀ‖_F/‖S‖_F: both well above rounding = "neither"
  // After the causal mask and the row softmax (A = pattern(S)):
  double pattern_full_vs_AT_rel = 0;  // ‖pattern(S_full) − Aᵀ‖_F/‖A‖_F
  double pattern_full_vs_A_rel = 0;   // ‖pattern(S_full) − A‖_F/‖A‖_F
  double column_sum_max_dev = 0;      // max_j |Σ_i A_ij − 1|: rows of A sum to 1, columns do not
  std::string family;                 // config.json's model_type
  bool rotated =
      false;  // every q and k rotated to its own position (the swap moves the maps, not the positions)
  bool has_bias = true;  // without Q/K biases the matrices-only swap IS the full swap (S_matrices = Sᵀ)
  double scale = 0;      // the model's multiplier of q·k
};

// Any family: q = R_i(u W_Q + b_Q), k = R_j(u W_K^g + b_K^g) from the model's own maps (g the head's KV
// group), scaled by the model's scale; the full swap exchanges maps and biases and keeps each row's
// rotation at its own position, so S_full = Sᵀ still; the pattern after the swap uses the model's own
// mask (window) and soft-cap. S_vs_model_max_abs: against hook_attn_scores on the visible keys.
SwapResult swap_query_key(const Model& model, const std::vector<int>& ids, int layer, int head);

}  // namespace qkv::analysis
