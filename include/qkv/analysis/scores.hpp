// Seed 000's falsifiable claim: the raw score matrix S (before the mask and the softmax) is not
// symmetric, because the bilinear form M = W_Q^h W_K^hᵀ is not, and the biases make it affine.
#pragma once
#include <string>
#include <vector>

#include "qkv/analysis/matrix.hpp"
#include "qkv/lm.hpp"

namespace qkv::analysis {

// Norm facts of M = W_Q W_Kᵀ ([d, d]) computed from the [dh, dh] factors only:
//   ‖M‖_F² = tr((W_QᵀW_Q)(W_KᵀW_K)),  tr(M·M) = tr((W_KᵀW_Q)²),  ‖M − Mᵀ‖_F² = 2‖M‖_F² − 2 tr(M·M).
struct BilinearNorms {
  double norm = 0;            // ‖M‖_F
  double antisym_share = 0;   // ‖M − Mᵀ‖_F / (2‖M‖_F): 0 symmetric, 1 antisymmetric, ≈ 0.71 for a random M
  double sym_share = 0;       // ‖M + Mᵀ‖_F / (2‖M‖_F); sym² + antisym² = 1
};
BilinearNorms bilinear_norms(const Matrix& W_Q, const Matrix& W_K);

struct ScoresResult {
  int layer = 0, head = 0, T = 0, d = 0, dh = 0;
  Matrix S;                    // [T, T] the model's scaled, unmasked scores q_i·k_j/√dh
  double asym_rel = 0;         // ‖S − Sᵀ‖_F / ‖S‖_F
  double max_asym = 0;         // max |S_ij − S_ji|
  int max_i = 0, max_j = 0;    // where (i > j: the query i's score for the earlier key j)
  double S_ij = 0, S_ji = 0;
  BilinearNorms M;
  // q_i·k_j = x-x + x-b + b-x + b-b with q = u·W_Q + b_Q, k = u·W_K + b_K (each [T, T], scaled):
  //   xx = (uW_Q)(uW_K)ᵀ, xb = (uW_Q)·b_K (constant along a row), bx = b_Q·(uW_K) (constant down a
  //   column), bb = b_Q·b_K (constant). Each part's ‖·‖_F / ‖S‖_F:
  double share_xx = 0, share_xb = 0, share_bx = 0, share_bb = 0;
  double bias_share = 0;             // ‖S − xx‖_F / ‖S‖_F: everything the biases add
  // What the softmax sees of a row is the row minus its mean over the allowed keys j ≤ i, so xb and bb
  // (constant along a row) vanish from the pattern: ‖centred bx‖ / ‖centred S‖ over j ≤ i, the only
  // share of the biases that moves attention.
  double bias_share_softmax = 0;
  double reconstruction_max_abs = 0;  // max |xx + xb + bx + bb − S|: the slicing checked against the model
  std::string family;                 // config.json's model_type
  bool rotated = false;               // S = scale·(R_i q_i)·(R_j k_j): the forward's rotated q and k
  double scale = 0;  // the model's multiplier of q·k (1/√dh, query_pre_attn_scalar^-½, or 1)
  int kv_head = 0;   // the key/value head the query head reads (GQA: head / (H / n_kv))
  double S_vs_hook_max_abs =
      0;  // S (soft-capped when the model caps) vs hook_attn_scores on the visible keys
};

// Any family: S from the forward's rotated q and k (hook_rot_q / hook_rot_k; hook_q / hook_k without
// rotary), scaled by the model's own scale, before the soft-cap, the mask and the softmax. The four parts
// are computed here from the model's own maps, each side rotated to its position (rotation is linear:
// R(uW + b) = R(uW) + R(b)); with rotary, x-b and b-b are no longer constant along a row. M = W_Q W_Kᵀ
// is the circuit at offset 0 (R_0 = I). bias_share_softmax: ‖row-centred (S − xx)‖/‖row-centred S‖ over
// the visible keys (on learned positions only b-x varies along a row, so it is ‖centred b-x‖/‖centred S‖).
ScoresResult score_asymmetry(const Model& model, const std::vector<int>& ids, int layer, int head);

}  // namespace qkv::analysis
