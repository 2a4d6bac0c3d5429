// Seed 000's induction circuit and seed 003's separation, on the heads the scan picked: a previous-token
// head, an induction head after it, K-composition between them (per KV group too under GQA), and QK and OV
// ablated separately (each breaks the copying; the pattern is bit-identical under the OV ablation).
#include <algorithm>
#include <cmath>
#include <limits>

#include "analysis/claims/claim.hpp"
#include "analysis/claims/context.hpp"

namespace qkv::analysis::detail {
namespace {

constexpr double kHeadScore = 0.8;     // previous-token / induction score of a head "that is one"
constexpr double kCompositionZ = 3.0;  // K-composition: ≥ baseline mean + 3 standard deviations
constexpr double kLossRise = 0.01;     // ablation raises the repeated-half loss by ≥ 0.01 nats

Claim previous_token_head(TourContext& ctx, Builder b) {
  const HeadScores& s = ctx.scan(ctx.r.previous);
  const int upto = std::max(1, ctx.cl);
  b.t("head", head_name(ctx.r.previous)).m("score", s.previous_token).m("text_score", s.text_previous_token);
  b.m("searched_layers", upto);
  const bool held = s.previous_token >= kHeadScore;
  const std::string layers = upto == 1 ? "layer 0" : "layers 0–" + std::to_string(upto - 1);
  return b.done(held,
                "best in " + layers + ": head " + head_name(ctx.r.previous) + ", previous-token score " +
                    num(s.previous_token) + " on repeated random tokens (" + num(s.text_previous_token) +
                    " on the text)",
                "holds when some head in a layer before the chosen induction head's (" + layers +
                    ") has TransformerLens's previous-token score ≥ " + num(kHeadScore),
                held ? ""
                     : "no previous-token head on this model (random weights spread attention; the claim is "
                       "about trained ones)");
}

Claim induction_head(TourContext& ctx, Builder b) {
  const TourResult& r = ctx.r;
  const Arch& a = ctx.a;
  const HeadScores& s = ctx.scan(r.induction);
  b.t("head", ctx.chosen)
      .m("score", s.induction)
      .m("detector_score", s.induction_detector)
      .m("text_score", s.text_induction);
  b.m("seq_len", r.n).m("batch", r.batch);
  // Where a copying head that is not an induction head attends instead: one token further on.
  const HeadScores* shifted = nullptr;
  for (const auto& h : r.heads.heads)
    if (h.layer >= std::min(1, r.L - 1) && (!shifted || h.induction_shifted > shifted->induction_shifted))
      shifted = &h;
  b.t("shifted_head", head_name(shifted->layer, shifted->head))
      .m("shifted_score", shifted->induction_shifted);
  const bool held = s.induction >= kHeadScore;
  const int w = a.window_of(ctx.cl);
  std::string note;
  if (held)
    note = "";
  else if (r.L < 2)
    note = "one layer: an induction head needs an earlier head to compose with";
  else if (w > 0 && w < r.n)
    note = "layer " + std::to_string(ctx.cl) + " attends within a window of " + std::to_string(w) +
           " < n = " + std::to_string(r.n) + ": the earlier copy is out of its sight";
  else if (shifted->induction_shifted >= kHeadScore)
    note = "no induction head; instead head " + head_name(shifted->layer, shifted->head) +
           " attends ONE TOKEN FURTHER (score " + num(shifted->induction_shifted) +
           " on the (2 − n) diagonal): it matches the previous token, and copies the next "
           "one from what a previous-token head wrote there — a shifted copying circuit, not the seed's";
  else
    note = "no induction head on this model (the claim is about trained weights)";
  return b.done(held,
                "best in " + std::string(r.L >= 2 ? "layers ≥ 1" : "layer 0") + ": head " + ctx.chosen +
                    ", induction score " + num(s.induction) + " (mean of the (1 − n) diagonal on " +
                    std::to_string(r.batch) + " random sequences of " + std::to_string(r.n) +
                    " repeated twice)",
                "holds when some head" + std::string(r.L >= 2 ? " in a layer after the first" : "") +
                    " has induction score ≥ " + num(kHeadScore),
                note);
}

std::optional<std::string> two_layers(const Arch& a) {
  if (a.n_layer >= 2) return std::nullopt;
  return std::string("one layer: no earlier head to compose with");
}

// Under GQA the group's shared key lens: one number per (source, group).
std::string group_composition(TourContext& ctx, Builder& b) {
  const Arch& a = ctx.a;
  const int G = a.H / a.n_kv, cg = ctx.ch / G;
  const CircuitsResult& cr = ctx.circuits();
  const GroupComposition* gt = nullptr;
  for (const auto& c : cr.group_compositions)
    if (c.l2 == ctx.cl && c.g2 == cg && (!gt || c.k > gt->k)) gt = &c;
  if (!gt) return "";
  const double gz =
      cr.baseline.kg_std > 0 ? (gt->k - cr.baseline.kg_mean) / cr.baseline.kg_std : std::nan("");
  b.m("group_top_score", gt->k).m("group_top_z", gz).t("group_top_source", head_name(gt->l1, gt->h1));
  return "; into the shared key lens of KV group " + std::to_string(cg) + " (one number for its " +
         std::to_string(G) + " heads): top " + head_name(gt->l1, gt->h1) + " = " + num(gt->k) +
         " (z = " + num(gz) + ")";
}

Claim k_composition(TourContext& ctx, Builder b) {
  const CircuitsResult& cr = ctx.circuits();
  const CompositionBaseline& bl = cr.baseline;
  const HeadRef& prev = ctx.r.previous;
  const Composition* top = nullptr;
  double prev_k = std::numeric_limits<double>::quiet_NaN();
  for (const auto& c : cr.compositions)
    if (c.l2 == ctx.cl && c.h2 == ctx.ch) {
      if (!top || c.k > top->k) top = &c;
      if (c.l1 == prev.layer && c.h1 == prev.head) prev_k = c.k;
    }
  const std::string top_name = top ? head_name(top->l1, top->h1) : "";
  b.t("target", ctx.chosen).t("source_expected", head_name(prev)).t("top_source", top_name);
  b.m("top_score", top ? top->k : std::nan("")).m("expected_source_score", prev_k);
  b.m("baseline_mean", bl.k_mean).m("baseline_std", bl.k_std).m("baseline_samples", bl.samples);
  const double z = top && bl.k_std > 0 ? (top->k - bl.k_mean) / bl.k_std : std::nan("");
  b.m("top_z", z);
  const std::string group = ctx.a.n_kv < ctx.a.H ? group_composition(ctx, b) : "";
  const bool same = top && top->l1 == prev.layer && top->h1 == prev.head;
  const bool held = same && z >= kCompositionZ;
  std::string note;
  if (!same)
    note = "does not hold on this model: the strongest K-composition comes from " + top_name +
           ", not from the previous-token head " + head_name(prev);
  else if (!held)
    note = "does not hold on this model: the composition is within the random baseline's spread";
  return b.done(held,
                "into " + ctx.chosen + ": top K-composition from " + top_name + " = " +
                    num(top ? top->k : std::nan("")) + " (from the previous-token head " + head_name(prev) +
                    ": " + num(prev_k) + "); random baseline " + num(bl.k_mean) + " ± " + num(bl.k_std) +
                    " (z = " + num(z) + ")" + group,
                "holds when the top K-composition source of the chosen induction head is the top "
                "previous-token head and "
                "its score ≥ baseline mean + " +
                    num(kCompositionZ) +
                    " × std (through W_Q^h W_K^gᵀ at offset 0, the norm's "
                    "weight folded in)",
                note);
}

Claim qk_ov_fail_separately(TourContext& ctx, Builder b) {
  const AblationResult& a = ctx.ablation();
  const double dqk = a.loss_qk - a.loss_intact, dov = a.loss_ov - a.loss_intact;
  b.t("head", ctx.chosen)
      .m("loss_intact", a.loss_intact)
      .m("loss_qk_ablated", a.loss_qk)
      .m("loss_ov_ablated", a.loss_ov);
  b.m("loss_first_half", a.loss_first_half).m("ov_pattern_max_abs_diff", a.ov_pattern_max_abs_diff);
  b.m("qk_pattern_max_abs_diff", a.qk_pattern_max_abs_diff);
  const bool held = dqk >= kLossRise && dov >= kLossRise && a.ov_pattern_max_abs_diff == 0;
  std::string note;
  if (a.ov_pattern_max_abs_diff != 0)
    note = "the pattern changed under OV ablation: the ablation is wrong";
  else if (!held)
    note = "does not hold on this model: ablating " +
           std::string(dqk < kLossRise && dov < kLossRise ? "either side"
                       : dqk < kLossRise                  ? "the QK side"
                                                          : "the OV side") +
           " does not raise the loss by " + num(kLossRise) + " (Δ QK " + num(dqk) + ", Δ OV " + num(dov) +
           " nats): the head does no copying work that the loss depends on";
  auto signed_num = [](double v) { return (v >= 0 ? "+" : "") + num(v); };
  return b.done(held,
                "head " + ctx.chosen + ", repeated-half loss: intact " + num(a.loss_intact, 4) +
                    ", QK ablated " + num(a.loss_qk, 4) + " (" + signed_num(dqk) + "), OV ablated " +
                    num(a.loss_ov, 4) + " (" + signed_num(dov) +
                    "); pattern under OV ablation max |Δ| = " + num(a.ov_pattern_max_abs_diff),
                "holds when ablating QK (uniform pattern) and ablating OV (zero values) each raise the "
                "repeated-half loss by ≥ " +
                    num(kLossRise) + " nats and the pattern is bit-identical under OV ablation",
                note);
}

}  // namespace

std::vector<ClaimUnit> circuit_claims() {
  return {
      {"previous_token_head", "seed 000",
       "An earlier previous-token head: every row attends to the one immediately above it.", nullptr,
       previous_token_head},
      {"induction_head", "seed 000",
       "An induction head finds the earlier A and attends to the B after it, continuing a repeated pattern.",
       nullptr, induction_head},
      {"k_composition", "seed 000",
       "The induction head's key is built from the previous-token head's output: K-composition between them.",
       two_layers, k_composition},
      {"qk_ov_fail_separately", "seed 003",
       "QK decides where a head reads, OV what it writes: they are separate and fail separately.", nullptr,
       qk_ov_fail_separately},
  };
}

}  // namespace qkv::analysis::detail
