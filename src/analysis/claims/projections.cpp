// Seed 000's "check yourself" as claims: reproduce q, k, v from the model's own maps of the normalised row
// (project(), at layer 0 and the chosen head's layer), the two traps (the raw row — LayerNorm's or
// RMSNorm's form —, the dropped bias) and the per-head cut.
#include <algorithm>
#include <limits>

#include "analysis/claims/claim.hpp"
#include "analysis/claims/context.hpp"

namespace qkv::analysis::detail {
namespace {

constexpr double kProjectionRelTol = 1e-4;  // own q, k, v vs the model's: float rounding
constexpr double kTrapRel = 0.1;            // a trap "worth an order of magnitude": ≥ 10% relative error

std::string shape_str(const std::vector<int64_t>& s) {
  std::string o = "[";
  for (size_t i = 0; i < s.size(); i++) o += (i ? ", " : "") + std::to_string(s[i]);
  return o + "]";
}

std::string layer_list(const TourContext& ctx) {
  std::string s;
  for (int l : ctx.r.projection_layers) s += (s.empty() ? "" : ", ") + std::to_string(l);
  return s;
}

Claim projections(TourContext& ctx, Builder b) {
  const auto& ps = ctx.projections();
  double worst_rel = 0, worst_abs = 0, ln_diff = 0;
  for (const auto& p : ps)
    for (const ProjectionPart* q : {&p.q, &p.k, &p.v}) {
      worst_abs = std::max(worst_abs, q->max_abs_diff);
      worst_rel = std::max(worst_rel, q->max_abs_diff / std::max(1e-30, q->max_abs));
      ln_diff = std::max(ln_diff, p.ln_max_abs_diff);
    }
  const ProjectionResult& p0 = ps[0];
  const Arch& a = ctx.a;
  b.m("max_abs_diff", worst_abs)
      .m("max_rel_diff", worst_rel)
      .m("ln_1_max_abs_diff", ln_diff)
      .m("tokens", ctx.r.T);
  b.t("layers", layer_list(ctx))
      .t("weight_shape", shape_str(p0.weight_shape))
      .t("layout", p0.layout)
      .t("norm", p0.norm);
  const std::string maps = a.qkv_layout == QkvLayout::Gpt2Thirds
                               ? "c_attn " + shape_str(p0.weight_shape) + " -> 3 × [" + std::to_string(a.d) +
                                     ", " + std::to_string(a.d) + "]"
                               : p0.layout + " (Q: " + shape_str(p0.weight_shape) + ")";
  const bool held = worst_rel <= kProjectionRelTol;
  return b.done(held,
                maps + "; own q, k, v from " + p0.norm + "(x)" +
                    (a.qkv_bias ? " with biases" : " (no biases)") + " vs the model's at layer(s) " +
                    layer_list(ctx) + ": max |diff| " + sci(worst_abs) + " (" + sci(worst_rel) +
                    " of max |value|)",
                "holds when max |own − model| ≤ " + sci(kProjectionRelTol) +
                    " × max |value| for q, k and v at layer 0 and the chosen head's layer (float rounding)",
                held ? "" : "the hand-made maps do not reproduce the model's q, k, v");
}

// ln_trap and rmsnorm_trap: the same measurement, the raw row x fed to the maps instead of norm(x), at layer
// 0 (the seed's h[0]) and at the chosen head's layer; the two ids say which norm the model has.
Claim norm_trap(TourContext& ctx, Builder b) {
  const auto& ps = ctx.projections();
  const ProjectionResult &p0 = ps[0], &pc = ps.back();
  double all_min = std::numeric_limits<double>::infinity();
  const ProjectionResult* worst = &p0;
  for (const auto& p : ps) {
    const double m = std::min({p.q.ln_trap_rel, p.k.ln_trap_rel, p.v.ln_trap_rel});
    if (m < all_min) all_min = m, worst = &p;
  }
  b.m("q_rel_err", p0.q.ln_trap_rel).m("k_rel_err", p0.k.ln_trap_rel).m("v_rel_err", p0.v.ln_trap_rel);
  b.m("min_with_chosen_layer", all_min);
  b.m("chosen_layer_q_rel_err", pc.q.ln_trap_rel).m("chosen_layer_k_rel_err", pc.k.ln_trap_rel);
  b.m("chosen_layer_v_rel_err", pc.v.ln_trap_rel);
  const bool held = all_min >= kTrapRel, rms = ctx.a.norm != NormKind::LayerNorm;
  auto three = [](const ProjectionResult& p) {
    return "q " + num(p.q.ln_trap_rel) + ", k " + num(p.k.ln_trap_rel) + ", v " + num(p.v.ln_trap_rel);
  };
  std::string summary = "layer 0, raw row instead of " + p0.norm + "(row): ‖err‖/‖true‖ " + three(p0);
  if (ps.size() > 1) summary += "; layer " + std::to_string(pc.layer) + ": " + three(pc);
  std::string note;
  if (held)
    note = rms ? "RMSNorm does not centre: the trap is the per-row scale 1/rms(x) and the norm's weight, "
                 "large here"
               : "the residual row is not on ln_1's scale, so skipping the LayerNorm changes q, k, v grossly";
  else
    note = "does not hold on this model: at layer " + std::to_string(worst->layer) +
           " the raw row gives q, k, v within " + num(all_min) + " of " + p0.norm + "(row)" +
           (rms ? " — RMSNorm does not centre, so the trap is only a per-row rescaling (1/rms(x) and the "
                  "norm's weight), "
                  "and the residual there is already near the norm's scale"
                : ": the residual row is close to the LayerNorm's scale there");
  return b.done(held, summary,
                "holds when the relative error ‖trap − true‖_F/‖true‖_F is ≥ " + num(kTrapRel) +
                    " for each of q, k and v at layer 0 and at the chosen head's layer",
                note);
}

std::optional<std::string> layernorm_only(const Arch& a) {
  if (a.norm == NormKind::LayerNorm) return std::nullopt;
  return std::string(
      "this model normalises with RMSNorm: the trap is measured in its RMSNorm form, as rmsnorm_trap");
}
std::optional<std::string> rmsnorm_only(const Arch& a) {
  if (a.norm != NormKind::LayerNorm) return std::nullopt;
  return std::string("this model uses LayerNorm: the trap is measured as ln_trap");
}
std::optional<std::string> has_qkv_bias(const Arch& a) {
  if (a.qkv_bias) return std::nullopt;
  return std::string("this model has no Q/K/V biases: nothing to drop");
}

Claim bias_trap(TourContext& ctx, Builder b) {
  const ProjectionResult& p0 = ctx.projections()[0];
  const double mx = std::max({p0.q.bias_trap_rel, p0.k.bias_trap_rel, p0.v.bias_trap_rel});
  b.m("q_rel_err", p0.q.bias_trap_rel).m("k_rel_err", p0.k.bias_trap_rel).m("v_rel_err", p0.v.bias_trap_rel);
  b.m("b_Q_norm", p0.q.bias_norm).m("b_K_norm", p0.k.bias_norm).m("b_V_norm", p0.v.bias_norm);
  const bool held = mx >= kTrapRel;
  const bool zero = p0.q.bias_norm == 0 && p0.k.bias_norm == 0 && p0.v.bias_norm == 0;
  return b.done(held,
                "layer 0, bias dropped: ‖err‖/‖true‖ q " + num(p0.q.bias_trap_rel) + ", k " +
                    num(p0.k.bias_trap_rel) + ", v " + num(p0.v.bias_trap_rel) + " (‖b‖ " +
                    num(p0.q.bias_norm) + ", " + num(p0.k.bias_norm) + ", " + num(p0.v.bias_norm) + ")" +
                    (ctx.a.o_bias ? "" : "; this family has no bias on O"),
                "holds when dropping the bias changes q, k or v at layer 0 by ≥ " + num(kTrapRel) +
                    " (relative Frobenius)",
                held   ? ""
                : zero ? "does not hold on this model: its biases are exactly zero (random init), so "
                         "dropping them changes "
                         "nothing; the claim is about trained weights"
                       : "does not hold on this model: its layer-0 biases are too small to matter");
}

Claim multi_head_slices(TourContext& ctx, Builder b) {
  const auto& ps = ctx.projections();
  const Arch& a = ctx.a;
  double heads_diff = 0, scale = 0, wrong = std::numeric_limits<double>::infinity();
  for (const auto& p : ps) {
    heads_diff = std::max(heads_diff, p.heads_max_abs_diff);
    scale = std::max({scale, p.q.max_abs, p.k.max_abs, p.v.max_abs});
    wrong = std::min(wrong, p.interleaved_cut_rel);
  }
  b.m("heads", a.H).m("dh", a.dh).m("d", a.d).m("kv_heads", a.n_kv).m("heads_max_abs_diff", heads_diff);
  b.m("interleaved_cut_rel_min", wrong);
  const bool ends = heads_diff <= kProjectionRelTol * std::max(1e-30, scale);
  const bool discriminates = a.H == 1 || wrong >= kTrapRel;
  const std::string widths =
      std::to_string(a.H) + " × " + std::to_string(a.dh) + " = " + std::to_string(a.q_dim()) +
      (a.q_dim() == a.d ? "" : " (≠ d = " + std::to_string(a.d) + ": this family's head size is its own)") +
      (a.n_kv < a.H ? "; K and V: " + std::to_string(a.n_kv) + " × " + std::to_string(a.dh) + " = " +
                          std::to_string(a.kv_dim())
                    : "");
  return b.done(ends && discriminates,
                widths + "; head h = columns [h·dh, (h+1)·dh): max |diff| vs the model's heads " +
                    sci(heads_diff) + (a.H > 1 ? "; a wrong (interleaved) cut is off by " + num(wrong) : ""),
                "holds when the contiguous column blocks [h·dh, (h+1)·dh) of each map's output (H·dh wide "
                "for Q, n_kv·dh "
                "for K and V) match the model's heads to " +
                    sci(kProjectionRelTol) + " × max |value|, and (H > 1) an interleaved cut is off by ≥ " +
                    num(kTrapRel),
                ends && discriminates ? "" : "the per-head cut does not match this model's heads");
}

}  // namespace

std::vector<ClaimUnit> projection_claims() {
  return {
      {"projections", "seed 000",
       "Slice c_attn (and its bias) into thirds and reproduce q, k and v yourself from ln_1(row): three "
       "learned affine "
       "maps of the normalised row, worked out on the spot.",
       nullptr, projections},
      {"ln_trap", "seed 000",
       "Feed the maps ln_1(row), not the raw row: a trap worth an order of magnitude if you hit it.",
       layernorm_only, norm_trap},
      {"rmsnorm_trap", "seed 000",
       "Feed the maps the normalised row, not the raw row: a trap worth an order of magnitude (its RMSNorm "
       "form).",
       rmsnorm_only, norm_trap},
      {"bias_trap", "seed 000", "Don't drop the bias: the other trap worth an order of magnitude.",
       has_qkv_bias, bias_trap},
      {"multi_head_slices", "seed 000",
       "Each third is all heads laid end to end (12 × 64 = 768): cutting them apart is multi-head attention.",
       nullptr, multi_head_slices},
  };
}

}  // namespace qkv::analysis::detail
