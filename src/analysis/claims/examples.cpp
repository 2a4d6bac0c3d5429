// The seeds' worked examples and counts as claims: the bank example by hand (seed 004), the running example
// "the cat climbed the" (seed 004, model-independent), and seed 001's "about 4d² parameters", read from this
// model's own tensor table against the shape table's prediction.
#include <cmath>
#include <nlohmann/json.hpp>

#include "analysis/claims/claim.hpp"
#include "analysis/claims/context.hpp"
#include "qkv/analysis/running_example.hpp"
#include "qkv/analysis/shapes.hpp"
#include "qkv/analysis/soft_dictionary.hpp"

namespace qkv::analysis::detail {
namespace {

constexpr double k4d2Rel = 0.01;  // "about 4d²": the four matrices' weights within 1% of 4d²

Claim soft_dictionary_example(TourContext&, Builder b) {
  const SoftDictionaryResult sd = soft_dictionary(bank_example());
  const double want_w[3] = {0.07, 0.31, 0.62}, want_o[2] = {0.85, 0.15};
  double err = 0;
  for (int j = 0; j < 3; j++) err = std::max(err, std::fabs(sd.weights[0][size_t(j)] - want_w[j]));
  for (int j = 0; j < 2; j++) err = std::max(err, std::fabs(sd.output[0][size_t(j)] - want_o[j]));
  b.m("a_sat", sd.weights[0][0]).m("a_bank", sd.weights[0][1]).m("a_river", sd.weights[0][2]);
  b.m("out_river", sd.output[0][0]).m("out_money", sd.output[0][1]).m("max_abs_vs_seed", err);
  return b.done(err <= 0.005,
                "a = [" + num(sd.weights[0][0]) + ", " + num(sd.weights[0][1]) + ", " +
                    num(sd.weights[0][2]) + "], Σ a·v = [" + num(sd.output[0][0]) + ", " +
                    num(sd.output[0][1]) + "]",
                "holds when every number matches the seed's two-decimal values within 0.005",
                "model-independent: the seed's worked example, recomputed with the library's softmax");
}

Claim running_example_claim(TourContext&, Builder b) {
  const auto checks = running_example_checks();
  const RunningExample ex = running_example();
  int ok = 0;
  std::string first_bad;
  for (const auto& c : checks) {
    b.m(c.id, c.computed);
    ok += c.ok();
    if (!c.ok() && first_bad.empty())
      first_bad = c.id + " = " + num(c.computed, 4) + " (seed " + num(c.seed, 4) + ")";
  }
  b.m("matching", ok).m("stated", double(checks.size()));
  const auto& a = ex.heads[0].A;
  const bool held = ok == int(checks.size());
  return b.done(
      held,
      std::to_string(ok) + " of " + std::to_string(checks.size()) + " stated numbers match; last row [" +
          num(a[4][0], 2) + ", " + num(a[4][1], 2) + ", " + num(a[4][2], 3) + ", " + num(a[4][3], 3) + ", " +
          num(a[4][4], 2) + "], the → ␣climb " + num(a[0][2], 3),
      "holds when every number the seed states (σ, u and q of the last row, its 10 weights with and without "
      "÷√d_k, the 94%, the 0.66, the unchanged last row under the mask) rounds to the seed's printed value",
      held ? "model-independent. X's rows 1-4 are reconstructed (the seed prints only row 5): " +
                 running_example_rule()
           : "the first that does not match: " + first_bad);
}

// Why the weights are not 4d² on this model: grouped-query attention, or heads narrower or wider than d.
std::string not_4d2(const Arch& a, double ratio) {
  std::string why;
  if (a.n_kv < a.H)
    why = "grouped-query attention gives K and V n_kv·d_k = " + std::to_string(a.kv_dim()) + " columns";
  if (a.q_dim() != a.d)
    why += std::string(why.empty() ? "" : ", and ") + "the heads are H·d_k = " + std::to_string(a.q_dim()) +
           " wide, not d";
  return "does not hold on this model: " + (why.empty() ? "the count differs" : why) +
         ", so the four matrices hold " + num(ratio) +
         " × 4d² = d·(2·H·d_k + 2·n_kv·d_k); the seed's count is for multi-head attention with H·d_k = d";
}

Claim attn_params_4d2(TourContext& ctx, Builder b) {
  const Arch& a = ctx.a;
  const ShapesResult sh = attention_shapes(attention_dims(a, ctx.r.T));
  int matching = 0;
  TensorCount t0;
  for (int l = 0; l < a.n_layer; l++) {
    const TensorCount t = attention_tensor_count(ctx.model.table, l);
    if (l == 0) t0 = t;
    matching += t.weights == sh.params.weights() && t.biases == sh.params.biases();
  }
  // GPT-2 small, the seed's "roughly 2.4 million per layer": its family's tensor table at its own sizes.
  const Arch small = arch_from_config(default_config("gpt2", "small"), "GPT-2 small");
  const TensorCount gs = attention_tensor_count(tensor_table(small), 0);
  const double gs_m = double(gs.weights + gs.biases) / 1e6;
  const double ratio = double(t0.weights) / double(sh.four_d2), rel = std::fabs(ratio - 1);
  b.m("d", a.d).m("four_d2", double(sh.four_d2)).m("weights_from_tensors", double(t0.weights));
  b.m("biases_from_tensors", double(t0.biases)).m("weights_from_shapes", double(sh.params.weights()));
  b.m("biases_from_shapes", double(sh.params.biases())).m("layers_matching", matching).m("layers", a.n_layer);
  b.m("weights_rel_4d2", rel)
      .m("gpt2_small_weights", double(gs.weights))
      .m("gpt2_small_biases", double(gs.biases));
  b.m("gpt2_small_millions", gs_m);
  const bool held = matching == a.n_layer && rel <= k4d2Rel && std::fabs(gs_m - 2.4) <= 0.05;
  std::string note;
  if (held)
    note = "biases add " + num(100.0 * double(t0.biases) / double(sh.four_d2), 2) +
           "% on top; grouped-query attention "
           "would make the weights (2 + 2·n_kv/H)·d²";
  else if (matching != a.n_layer)
    note = "the tensors do not hold what the shape table predicts: see the measured numbers";
  else if (rel > k4d2Rel)
    note = not_4d2(a, ratio);
  else
    note = "GPT-2 small's count does not round to 2.4 million";
  return b.done(held,
                "d = " + std::to_string(a.d) + ": 4d² = " + std::to_string(sh.four_d2) +
                    "; the tensors of each layer hold " + std::to_string(t0.weights) + " weights + " +
                    std::to_string(t0.biases) + " biases (" + std::to_string(matching) + " of " +
                    std::to_string(a.n_layer) +
                    " layers as the shape table predicts); GPT-2 small: " + std::to_string(gs.weights) +
                    " + " + std::to_string(gs.biases) + " = " + num(gs_m, 3) + " million",
                "holds when every layer's attention tensors hold exactly the weights and biases the shape "
                "table predicts "
                "from (d, H, n_kv, d_head), those weights are within " +
                    num(100 * k4d2Rel) +
                    "% of 4d², and GPT-2 small's "
                    "count (its tensor table) rounds to 2.4 million",
                note);
}

}  // namespace

std::vector<ClaimUnit> example_claims() {
  return {
      {"soft_dictionary_example", "seed 004",
       "The bank example by hand: a = softmax(q·k/√2) = [0.07, 0.31, 0.62], Σ a·v = [0.85, 0.15].", nullptr,
       soft_dictionary_example},
      {"running_example", "seed 004",
       "\"the cat climbed the\", head 1: the last row's weights ≈ [0.011, 0.035, 0.622, 0.319, 0.014] (94% "
       "on ␣climb + "
       "ed), without ÷√d_k ≈ [0.002, 0.012, 0.707, 0.275, 0.003]; unmasked, the puts 0.66 on ␣climb.",
       nullptr, running_example_claim},
      {"attn_params_4d2", "seed 001",
       "The four matrices of an attention layer (W_Q, W_K, W_V, W_O) hold about 4d² parameters: roughly 2.4 "
       "million per "
       "layer in GPT-2 small.",
       nullptr, attn_params_4d2},
  };
}

}  // namespace qkv::analysis::detail
