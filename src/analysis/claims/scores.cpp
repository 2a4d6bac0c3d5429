// Seed 000's falsifiable claim and its swap check, on the chosen head's raw scores S = scale·q·kᵀ (the
// forward's rotated q and k on rotary models): S ≠ Sᵀ; swapping the Q and K lenses entirely transposes S
// (an identity: it checks the slicing — and, with rotary positions, that each row keeps its rotation);
// swapping only the matrices gives neither; after the mask and the softmax no transpose relation is left.
#include <algorithm>
#include <cmath>

#include "analysis/claims/claim.hpp"
#include "analysis/claims/context.hpp"

namespace qkv::analysis::detail {
namespace {

constexpr double kAsymRel = 0.1;       // ‖S − Sᵀ‖/‖S‖ clearly non-zero
constexpr double kIdentityRel = 1e-9;  // the full swap: rounding only (double)
constexpr double kNeitherRel = 0.01;   // matrices-only swap: ≥ 1% away from both S and Sᵀ
constexpr double kPatternRel = 0.1;    // the full swap's pattern vs Aᵀ
constexpr double kForwardRel = 1e-4;   // S recomputed here vs the forward's scores (float rounding)

std::string rotated(const Arch& a) {
  return a.rotary() ? " (rotated q and k)" : "";
}

Claim scores_asymmetric(TourContext& ctx, Builder b) {
  const ScoresResult& s = ctx.scores();
  const auto& all = ctx.r.head_asym;
  const double mn = *std::min_element(all.begin(), all.end());
  int above = 0;
  for (double x : all) above += x >= kAsymRel;
  b.t("head", ctx.chosen)
      .m("asym_rel", s.asym_rel)
      .m("max_asym", s.max_asym)
      .m("max_i", s.max_i)
      .m("max_j", s.max_j);
  b.m("S_ij", s.S_ij).m("S_ji", s.S_ji).m("M_antisym_share", s.M.antisym_share).m("bias_share", s.bias_share);
  b.m("min_asym_rel_all_heads", mn).m("heads_asymmetric", above).m("heads_total", double(all.size()));
  const bool held = s.asym_rel >= kAsymRel;
  return b.done(held,
                "head " + ctx.chosen + rotated(ctx.a) + ": ‖S − Sᵀ‖/‖S‖ = " + num(s.asym_rel) +
                    " (largest |S_ij − S_ji| = " + num(s.max_asym) + " at i=" + std::to_string(s.max_i) +
                    ", j=" + std::to_string(s.max_j) + "); W_Q W_Kᵀ" + (ctx.a.rotary() ? " (offset 0)" : "") +
                    " antisymmetric share " + num(s.M.antisym_share) + "; " + std::to_string(above) + "/" +
                    std::to_string(all.size()) + " heads ≥ " + num(kAsymRel),
                "holds when the chosen head's ‖S − Sᵀ‖_F/‖S‖_F ≥ " + num(kAsymRel) +
                    " on the tour text (raw scores, before mask and softmax)",
                held ? (s.M.antisym_share > 0.5
                            ? "W_Q W_Kᵀ is far from symmetric (≈ 0.71 is what a random matrix gives: "
                              "nothing pushes it to be symmetric)"
                            : "")
                     : "the chosen head's scores are nearly symmetric on this text");
}

Claim swap_full_transposes(TourContext& ctx, Builder b) {
  const SwapResult& w = ctx.swap();
  b.t("head", ctx.chosen).m("full_vs_ST_rel", w.full_vs_ST_rel).m("full_vs_ST_max_abs", w.full_vs_ST_max_abs);
  b.m("S_vs_model_max_abs", w.S_vs_model_max_abs);
  const bool held = w.full_vs_ST_rel <= kIdentityRel;
  return b.done(held,
                "head " + ctx.chosen + (ctx.a.rotary() ? " (each row rotated at its own position)" : "") +
                    ": ‖S_swapped − Sᵀ‖/‖S‖ = " + sci(w.full_vs_ST_rel) + " (max |diff| " +
                    sci(w.full_vs_ST_max_abs) + ")",
                "holds when ‖S_swapped − Sᵀ‖_F/‖S‖_F ≤ " + sci(kIdentityRel) + " (double rounding)",
                held ? "an identity (the dot product commutes): it checks the slicing, not the model"
                     : "the swap does not transpose S: the slicing is wrong");
}

std::optional<std::string> rotary_only(const Arch& a) {
  if (a.rotary()) return std::nullopt;
  return std::string(
      "positions are learned embeddings added to the row: no rotation to carry through the swap");
}

// With rotary positions the lenses are swapped and each row keeps the rotation of its own position: S' = Sᵀ
// still. Falsifiable twice over: the scores recomputed here with the rotation must be the forward's, and the
// same swap on the unrotated q and k must NOT give Sᵀ (the check sees the rotation).
Claim rope_swap_transposes(TourContext& ctx, Builder b) {
  const SwapResult& w = ctx.swap();
  const Arch& a = ctx.a;
  const int T = ctx.r.T, dh = a.dh;
  const std::vector<float> q = ctx.head_rows(ctx.cl, "attn.hook_q", ctx.ch);
  const std::vector<float> k = ctx.head_rows(ctx.cl, "attn.hook_k", ctx.ch / (a.H / a.n_kv));
  double num2 = 0, den2 = 0, smax = 0;
  for (int i = 0; i < T; i++)
    for (int j = 0; j < T; j++) {
      double s = 0;
      for (int e = 0; e < dh; e++) s += double(q[size_t(i) * dh + e]) * k[size_t(j) * dh + e];
      s *= w.scale;
      num2 += (s - w.S(i, j)) * (s - w.S(i, j)), den2 += w.S(i, j) * w.S(i, j);
      smax = std::max(smax, std::abs(w.S(i, j)));
    }
  const double unrotated = den2 > 0 ? std::sqrt(num2 / den2) : 0;
  const double fwd = w.S_vs_model_max_abs / std::max(1e-30, smax);
  b.t("head", ctx.chosen).m("full_vs_ST_rel", w.full_vs_ST_rel).m("S_vs_model_rel", fwd);
  b.m("unrotated_swap_vs_ST_rel", unrotated);
  const bool held = w.full_vs_ST_rel <= kIdentityRel && fwd <= kForwardRel && unrotated >= kNeitherRel;
  return b.done(
      held,
      "head " + ctx.chosen +
          ": maps and biases swapped, each row rotated at its own position: ‖S' − Sᵀ‖/‖S‖ = " +
          sci(w.full_vs_ST_rel) + "; S recomputed with the rotation vs the forward's: " + sci(fwd) +
          " of max |S|; the same swap without the rotation misses Sᵀ by " + num(unrotated),
      "holds when ‖S' − Sᵀ‖_F/‖S‖_F ≤ " + sci(kIdentityRel) + ", the recomputed S is the forward's to " +
          sci(kForwardRel) + " × max |S|, and the unrotated swap is ≥ " + num(kNeitherRel) +
          " (relative) from Sᵀ",
      held ? "an identity again: the rotation belongs to the position, not to the lens, so swapping the "
             "lenses "
             "still transposes S"
           : "the rotated swap does not transpose S, or the recomputed rotation is not the forward's");
}

std::optional<std::string> has_qk_bias(const Arch& a) {
  if (a.qkv_bias) return std::nullopt;
  return std::string(
      "this model has no Q/K biases: swapping the matrices alone IS the full swap (no cross terms)");
}

Claim swap_matrices_only_neither(TourContext& ctx, Builder b) {
  const SwapResult& w = ctx.swap();
  const ProjectionResult& p = ctx.projections().back();
  const double x = w.matrices_vs_S_rel, y = w.matrices_vs_ST_rel;
  b.t("head", ctx.chosen).m("vs_S_rel", x).m("vs_ST_rel", y);
  b.m("layer_b_Q_norm", p.q.bias_norm).m("layer_b_K_norm", p.k.bias_norm);
  const bool held = x >= kNeitherRel && y >= kNeitherRel;
  const bool zero_bias = p.q.bias_norm == 0 && p.k.bias_norm == 0;
  return b.done(
      held,
      "head " + ctx.chosen + rotated(ctx.a) + ": ‖S'' − S‖/‖S‖ = " + num(x) + ", ‖S'' − Sᵀ‖/‖S‖ = " + num(y),
      "holds when the matrices-only swap S'' is ≥ " + num(kNeitherRel) +
          " away (relative) from both S and Sᵀ",
      held ? ""
      : zero_bias
          ? "does not hold on this model: b_Q and b_K are exactly zero (random init), so the matrices-only "
            "swap IS the full swap and equals Sᵀ; the claim needs trained (non-zero) biases"
          : "does not hold on this model: the biases are too small for the cross terms to show");
}

Claim softmax_breaks_transpose(TourContext& ctx, Builder b) {
  const SwapResult& w = ctx.swap();
  const Arch& a = ctx.a;
  b.t("head", ctx.chosen).m("pattern_full_vs_AT_rel", w.pattern_full_vs_AT_rel);
  b.m("pattern_full_vs_A_rel", w.pattern_full_vs_A_rel).m("column_sum_max_dev", w.column_sum_max_dev);
  const bool held = w.pattern_full_vs_AT_rel >= kPatternRel;
  return b.done(
      held,
      "head " + ctx.chosen + ": pattern of the full swap (the model's own mask" +
          (a.window_of(ctx.cl) > 0 ? " and window" : "") + (a.attn_softcap > 0 ? ", soft-cap" : "") +
          ") vs Aᵀ: " + num(w.pattern_full_vs_AT_rel) +
          " (relative); rows of A sum to 1, its columns miss 1 by up to " + num(w.column_sum_max_dev),
      "holds when ‖softmax(mask(S_swapped)) − Aᵀ‖_F/‖A‖_F ≥ " + num(kPatternRel),
      held ? "structural: the mask keeps j ≤ i and the softmax normalises rows, neither survives a transpose"
           : "the swapped pattern is close to Aᵀ on this text");
}

}  // namespace

std::vector<ClaimUnit> score_claims() {
  return {
      {"scores_asymmetric", "seed 000", "Row i's score for row j is not row j's score for row i: S ≠ Sᵀ.",
       nullptr, scores_asymmetric},
      {"swap_full_transposes", "seed 000",
       "Swap the query and key projections entirely (matrix and bias): S comes out exactly transposed.",
       nullptr, swap_full_transposes},
      {"rope_swap_transposes", "issue 15",
       "The full swap still transposes S with rotary positions: each row keeps the rotation of its own "
       "position.",
       rotary_only, rope_swap_transposes},
      {"swap_matrices_only_neither", "seed 000",
       "Swap only the matrices and leave each bias where it sits: the cross terms survive, giving neither S "
       "nor Sᵀ.",
       has_qk_bias, swap_matrices_only_neither},
      {"softmax_breaks_transpose", "seed 000",
       "After the causal mask and the row-wise softmax the transpose relation is gone.", nullptr,
       softmax_breaks_transpose},
  };
}

}  // namespace qkv::analysis::detail
