// A Mathematical Framework for Transformer Circuits, on a checkpoint of any family: each head's QK circuit
// W_Q W_Kᵀ and OV circuit W_V W_O, their norms, OV's copying score, and the Q-, K- and V-composition
// scores between heads of different layers against a random baseline. Everything is computed from
// the small factors: no [d, d] circuit matrix and no [V, V] matrix is ever formed.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "qkv/analysis/matrix.hpp"
#include "qkv/lm.hpp"

namespace qkv::analysis {

// ‖A B‖_F for A [d, r], B [r, e]: √tr((AᵀA)(B Bᵀ)).
double low_rank_norm(const Matrix& A, const Matrix& B);
// ‖(A1 B1)(A2 B2)‖_F / (‖A1 B1‖_F ‖A2 B2‖_F) with every product taken on the small side:
// ‖A1 C B2‖² = tr(Cᵀ (A1ᵀA1) C (B2 B2ᵀ)), C = B1 A2 [r1, r2].
double composition_score(const Matrix& A1, const Matrix& B1, const Matrix& A2, const Matrix& B2);

struct HeadCircuit {
  int layer = 0, head = 0;
  double qk_norm = 0;          // ‖W_Q W_Kᵀ‖_F
  double qk_antisym_share = 0; // ‖M − Mᵀ‖/(2‖M‖) of M = W_Q W_Kᵀ
  double ov_norm = 0;          // ‖W_V W_O‖_F
  // Σλ / Σ|λ| over the eigenvalues of the full OV circuit W_E W_V W_O W_U ([V, V]); its nonzero
  // eigenvalues are those of the [dh, dh] matrix W_O W_U W_E W_V. 1 = copies its input token.
  double copying = 0;
};

// left = OV of the earlier head (l1, h1); right = the later head's QK (Q: W_QK, K: W_QKᵀ) or OV (V).
struct Composition {
  int l1 = 0, h1 = 0, l2 = 0, h2 = 0;
  double q = 0, k = 0, v = 0;
};

struct CompositionBaseline {  // the same scores for Gaussian factors of the same shapes
  int samples = 0;
  double q_mean = 0, q_std = 0, k_mean = 0, k_std = 0, v_mean = 0, v_std = 0;
  double kg_mean = 0, kg_std = 0, vg_mean = 0, vg_std = 0;  // GroupComposition's scores (family path, GQA only)
};

// Grouped-query attention: the heads of a KV group g share one key lens W_K^g and one value lens W_V^g, so
// what an earlier head writes into them is ONE number per group, whatever query head later reads:
// k = ‖OV1 · W_K^g‖_F / (‖OV1‖_F ‖W_K^g‖_F), v likewise with W_V^g (the per-head K- and V-composition
// scores still differ within a group, through each head's W_Q and W_O).
struct GroupComposition {
  int l1 = 0, h1 = 0, l2 = 0, g2 = 0;
  double k = 0, v = 0;
};

// The composition scores of `samples` Gaussian factor sets of these shapes (std::mt19937_64 seeded with
// seed).
CompositionBaseline composition_baseline(int d, int dh, int samples, uint64_t seed);

struct CircuitsOptions {
  bool fold_ln = true;    // fold ln_1's weight into W_Q, W_K, W_V and ln_f's into W_U (TransformerLens's fold_ln)
  bool copying = true;    // needs W_Uᵀ W_E, one [d, d] product over the vocabulary
  int baseline_samples = 32;
  uint64_t seed = 0;
  int target_layer = -1;  // >= 0 computes only the compositions INTO that layer (the tour's)
};

struct CircuitsResult {
  CircuitsOptions options;
  std::vector<HeadCircuit> heads;          // layer-major
  std::vector<Composition> compositions;   // every (l1, h1) → (l2, h2) with l1 < l2
  CompositionBaseline baseline;
  std::string family;  // config.json's model_type
  int H = 0, n_kv = 0;
  std::vector<GroupComposition> group_compositions;  // GQA only (n_kv < H): every (l1, h1) → (l2, group)
};

// From the model's own maps (head_weights(const Model&, …)): query head h's QK circuit is
// W_Q^h W_K^gᵀ with g = h / (H / n_kv) — at offset 0; with rotary it is W_Q^h R_Δ W_K^gᵀ (the tour's
// qk_circuit_position_dependent) — its OV circuit W_V^g W_O^h. fold_ln folds the first norm's multiplier
// (w, or Gemma's 1 + w) into the maps and the final norm's into W_U; W_U is lm_head (or the tied embedding).
// Every score from [dh, dh] factors: no [d, d] circuit and no [V, V] matrix is formed.
CircuitsResult circuits(const Model& model, const CircuitsOptions& options = {});

}  // namespace qkv::analysis
