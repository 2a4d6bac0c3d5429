// Seed 004's backward pass as claims: one head and the attention sublayer against central differences
// (gradcheck, model-independent), and this model's own backward — its norms, rotation, head layout, MLP —
// on its architecture in miniature (gradcheck_model, through lm_train.hpp).
#include <algorithm>
#include <cmath>

#include "analysis/claims/claim.hpp"
#include "analysis/claims/context.hpp"
#include "qkv/error.hpp"
#include "qkv/lm_train.hpp"

namespace qkv::analysis::detail {
namespace {

constexpr double kGradErr = 1e-6;
constexpr double kRowSum = 1e-12;

Claim gradcheck(TourContext& ctx, Builder b) {
  const TourOptions& o = ctx.o;
  const AttentionShape shape{o.grad_T, o.grad_d, o.grad_H};
  shape.validate();
  TourResult& r = ctx.r;
  r.grad_head = gradcheck_head(o.grad_T, o.grad_d / o.grad_H, o.seed + 1);
  r.grad_sublayer = gradcheck_sublayer(shape, o.seed + 2);
  double worst = 0;
  std::string worst_name;
  for (const auto* g : {&r.grad_head, &r.grad_sublayer})
    for (const auto& [name, e] : g->max_abs_error) {
      b.m((g == &r.grad_head ? "head." : "sublayer.") + name, e);
      if (e >= worst) worst = e, worst_name = name;
    }
  const double rows = std::max(r.grad_head.ds_row_sum_max_abs, r.grad_sublayer.ds_row_sum_max_abs);
  b.m("max_abs_error", worst).m("ds_row_sum_max_abs", rows);
  return b.done(worst < kGradErr && rows <= kRowSum,
                std::to_string(r.grad_head.max_abs_error.size() + r.grad_sublayer.max_abs_error.size()) +
                    " gradients vs central differences (T=" + std::to_string(o.grad_T) + ", d=" +
                    std::to_string(o.grad_d) + ", H=" + std::to_string(o.grad_H) + ", double): worst " +
                    sci(worst) + " (" + worst_name + "); largest |Σ_j dS_ij| " + sci(rows),
                "holds when every max |analytic − numeric| < " + sci(kGradErr) +
                    " and every row of dS sums to 0 within " + sci(kRowSum),
                "model-independent: random inputs in double");
}

// The architecture in miniature: the same kinds (norm, rotary pairing and fraction, GQA ratio, Q/K/V layout,
// biases, MLP, windows, soft-caps, post-norms, residual, tying) at d = 16, 2 layers, dh = 4, 24 tokens.
Arch miniature(const Arch& a) {
  Arch s = a;
  s.vocab_size = 24, s.d = 16, s.n_layer = 2, s.n_ctx = 16;
  const int g = std::max(1, a.H / std::max(1, a.n_kv));
  s.n_kv = std::min(a.n_kv, 2);
  s.H = s.n_kv * std::min(g, 2);
  // head_dim tied to d / H where the family ties it (fused Q/K/V layouts), else 4 (not d / H, as Gemma's)
  s.dh = a.qkv_layout != QkvLayout::Separate || a.H * a.dh == a.d ? s.d / s.H : 4;
  if (a.rotary()) s.rotary_dim = std::max(2, 2 * int(std::lround(0.5 * s.dh * a.rotary_dim / a.dh)));
  if (a.d_ff) s.d_ff = 24;
  if (std::abs(a.attn_scale - 1 / std::sqrt(double(a.dh))) < 1e-12)
    s.attn_scale = 1 / std::sqrt(double(s.dh));
  s.window.clear();
  if (!a.window.empty())
    for (int l = 0; l < s.n_layer; l++) s.window.push_back(a.window_of(l % a.n_layer) > 0 ? 3 : 0);
  return s;
}

Claim gradcheck_model(TourContext& ctx, Builder b) {
  const Arch s = miniature(ctx.a);
  LmLayout L;
  try {
    s.validate("the miniature");
    L = lm_layout(s);
  } catch (const Error& e) {
    return b.na(std::string("no miniature of this architecture: ") + e.what());
  }
  std::vector<double> p = lm_gradcheck_params(L, ctx.o.seed + 2);
  const std::vector<int> ids = {3, 17, 5, 3, 17, 9, 0, 23}, targets = {17, 5, -1, 17, 9, 2, 23, 1};
  LmActs<double> acts;
  auto loss = [&] {
    lm_train_forward(L, p.data(), ids, acts);
    return lm_cross_entropy(acts.logits, targets, s.vocab_size);
  };
  std::vector<double> g(size_t(L.size), 0.0);
  lm_train_forward(L, p.data(), ids, acts);
  lm_train_backward(L, p.data(), targets, acts, g.data());
  // Up to 6 coordinates of every tensor, spread over it: (f(p + h) − f(p − h)) / 2h with h = 1e-6.
  double worst = 0, scale = 0;
  int checked = 0;
  for (size_t i = 0; i < L.table.size(); i++) {
    int64_t n = 1;
    for (int64_t x : L.table[i].shape) n *= x;
    for (int k = 0; k < 6 && k < n; k++) {
      const size_t j = size_t(L.offset[i] + (n <= 6 ? k : (k * 7919 + 13) % n));
      const double keep = p[j], h = 1e-6;
      p[j] = keep + h;
      const double up = loss();
      p[j] = keep - h;
      const double down = loss();
      p[j] = keep;
      const double numeric = (up - down) / (2 * h);
      worst = std::max(worst, std::abs(numeric - g[j]));
      scale = std::max(scale, std::abs(numeric));
      checked++;
    }
  }
  const bool held = worst <= 1e-8 + 1e-6 * scale;
  return b.m("max_abs_error", worst)
      .m("largest_gradient", scale)
      .m("coordinates", checked)
      .done(held,
            std::to_string(checked) + " coordinates of all " + std::to_string(L.table.size()) +
                " tensors of a " + s.model_type + " in miniature (d 16, " + std::to_string(s.H) + "/" +
                std::to_string(s.n_kv) + " heads of " + std::to_string(s.dh) +
                ", 2 layers): max |analytic − central| " + num(worst) + " (largest gradient " + num(scale) +
                ")",
            "holds when the max error ≤ 1e-8 + 1e-6 × the largest gradient, in double",
            "the family backward that `qkv train` uses (src/model/lm_backward.cpp), on this architecture's "
            "kinds at "
            "small sizes (the full model's parameters are too many for central differences)" +
                std::string(held ? "" : ": it does NOT match"));
}

}  // namespace

std::vector<ClaimUnit> gradient_claims() {
  return {
      {"gradcheck", "seed 004", "The backward through one head; every row of ∂L/∂S sums to exactly zero.",
       nullptr, gradcheck},
      {"gradcheck_model", "seed 004",
       "This model's own backward (its norms, rotation, head layout, MLP) matches finite differences.",
       nullptr, gradcheck_model},
  };
}

}  // namespace qkv::analysis::detail
