// Direct logit attribution and the logit lens on the family forward (lm.hpp). Pure, no printing;
// docs/patching.md states the definitions.
//
// The logit difference of two tokens at one position, logit[A] − logit[B] = norm_f(x)·(W_U[A] − W_U[B]),
// is split over the residual stream's parts x = embed + Σ_l (Σ_h z_h·W_O_h + b_O,l) + Σ_l mlp_out_l with
// the final norm's scale FROZEN at the run's value (TransformerLens's apply_ln_to_stack): for
// LayerNorm each part c contributes ((c − mean(c))/σ ⊙ γ)·(W_U[A] − W_U[B]), σ = sqrt(var(x) + eps)
// of the whole x; for RMSNorm (c/rms(x) ⊙ γ)·(…); the norm's bias β·(W_U[A] − W_U[B]) is a term of its
// own. The terms then add up to the logit difference (checked: sum_minus_logit_diff).
#pragma once
#include <string>
#include <vector>

#include "qkv/lm.hpp"

namespace qkv::analysis {

struct AttributionTerm {
  std::string name;  // "embed", "L1H2", "attn_bias L1", "attn L1" (post-norm models), "mlp L0", "ln_final bias"
  std::string kind;  // "embed", "head", "attn_bias", "attn", "mlp", "norm_bias"
  int layer = -1, head = -1;
  double value = 0;  // its share of the logit difference
};

struct LensRow {
  std::string where;  // "embed" or "blocks.l.hook_resid_post"
  int layer = -1;     // -1 for the embedding
  double logit_diff = 0;  // norm_f (its own scale, not frozen) of the residual there, unembedded
  int top_token = 0;      // the argmax over the vocabulary there
  int answer_rank = 0;    // 1 = the answer token is the argmax
};

struct AttributionResult {
  int position = 0, answer = 0, wrong = 0, T = 0;
  double logit_diff = 0;            // from the model's own logits
  double sum_terms = 0;             // Σ terms
  double sum_minus_logit_diff = 0;  // the decomposition's check (float rounding; nan with a final soft-cap)
  double norm_scale = 0;            // the frozen 1/σ (LayerNorm) or 1/rms (RMSNorm) at the position
  double heads_vs_attn_out_max_abs = 0;  // Σ_h z_h·W_O_h + b_O against hook_attn_out (per-head models)
  bool per_head = true;             // false for post-norm models (Gemma 2): one term per attention layer
  std::string note;
  std::vector<AttributionTerm> terms;
  std::vector<LensRow> lens;
};

// position −1: the last. answer, wrong: token ids. Errors (Usage) name the bad argument.
AttributionResult attribute(const Model& model, const std::vector<int>& ids, int answer, int wrong, int position = -1);

}  // namespace qkv::analysis
