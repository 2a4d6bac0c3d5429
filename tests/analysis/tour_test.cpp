// qkv tour on the random-weight GPT-2 fixtures (read as any model is, through load_lm): every claim present
// in the one order, each verdict consistent with its measured numbers and stated criterion, n/a only where
// the architecture makes the claim moot and always with the reason, and the verdicts a random model must get
// (identities hold, the trained-weight claims do not). The other families: tour_families_test.cpp.
#include "qkv/analysis/tour.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <set>

#include "qkv/error.hpp"
#include "qkv/model_files.hpp"

namespace qkv::analysis {
namespace {

const std::string kFixtures = std::string(QKV_SOURCE_DIR) + "/tests/reference/fixtures/";

TourOptions small_options(const Model& m) {
  TourOptions o;
  o.text_ids = repeated_random_tokens(m.arch.vocab_size, 6, 1, 42)[0];
  o.batch = 2;
  o.baseline_samples = 8;
  o.saturate.rows = 32;
  return o;
}

std::string text_measure(const Claim& c, const std::string& key) {
  for (const auto& m : c.measured)
    if (m.key == key) return m.text;
  return "";
}

// The verdict recomputed from the measured numbers by the criterion each claim states.
bool expected_verdict(const Claim& c) {
  auto n = [&](const std::string& k) { return c.number(k); };
  const std::string& id = c.id;
  if (id == "projections") return n("max_rel_diff") <= 1e-4;
  if (id == "ln_trap" || id == "rmsnorm_trap") return n("min_with_chosen_layer") >= 0.1;
  if (id == "bias_trap") return std::max({n("q_rel_err"), n("k_rel_err"), n("v_rel_err")}) >= 0.1;
  if (id == "multi_head_slices") return n("heads") == 1 || n("interleaved_cut_rel_min") >= 0.1;
  if (id == "scores_asymmetric") return n("asym_rel") >= 0.1;
  if (id == "swap_full_transposes") return n("full_vs_ST_rel") <= 1e-9;
  if (id == "rope_swap_transposes")
    return n("full_vs_ST_rel") <= 1e-9 && n("S_vs_model_rel") <= 1e-4 &&
           n("unrotated_swap_vs_ST_rel") >= 0.01;
  if (id == "swap_matrices_only_neither") return n("vs_S_rel") >= 0.01 && n("vs_ST_rel") >= 0.01;
  if (id == "softmax_breaks_transpose") return n("pattern_full_vs_AT_rel") >= 0.1;
  if (id == "rope_relative")
    return n("equal_offset_rel_spread") <= 1e-5 && n("different_offset_rel_spread") >= 1e-3;
  if (id == "qk_circuit_position_dependent") return n("delta_1") >= 0.01;
  if (id == "gqa_shared_kv")
    return n("shared_value_rel_err") <= 1e-5 && n("query_max_abs_diff") > 0 && n("pattern_max_abs_diff") > 0;
  if (id == "kv_cache_exact") return n("logits_rel_diff") <= 1e-5;
  if (id == "previous_token_head" || id == "induction_head") return n("score") >= 0.8;
  if (id == "k_composition")
    return text_measure(c, "top_source") == text_measure(c, "source_expected") && n("top_z") >= 3.0;
  if (id == "qk_ov_fail_separately")
    return n("loss_qk_ablated") - n("loss_intact") >= 0.01 &&
           n("loss_ov_ablated") - n("loss_intact") >= 0.01 && n("ov_pattern_max_abs_diff") == 0;
  if (id == "soft_dictionary_example") return n("max_abs_vs_seed") <= 0.005;
  if (id == "running_example") return n("matching") == n("stated") && n("stated") == 21;
  if (id == "attn_params_4d2")
    return n("layers_matching") == n("layers") && n("weights_rel_4d2") <= 0.01 &&
           std::fabs(n("gpt2_small_millions") - 2.4) <= 0.05;
  if (id == "sqrt_dk") return n("max_weight_raw") >= 0.9 && n("median_grad_ratio") <= 0.1;
  if (id == "no_scale_saturates")
    return n("mean_max_weight_unscaled") > n("mean_max_weight_scaled") &&
           n("softmax_jacobian_unscaled") < n("softmax_jacobian_scaled");
  if (id == "gradcheck") return n("max_abs_error") < 1e-6 && n("ds_row_sum_max_abs") <= 1e-12;
  if (id == "gradcheck_model") return n("max_abs_error") <= 1e-8 + 1e-6 * n("largest_gradient");
  if (id == "qk_where_v_what")
    return n("induction_score_clean") - n("induction_score_k_patched") >= 0.1 &&
           n("loss_k_patched") - n("loss_clean") >= 0.01 && n("pattern_max_abs_diff_v") == 0 &&
           n("z_max_abs_diff_v") > 0 && n("loss_v_patched") - n("loss_clean") >= 0.01;
  if (id == "k_composition_causal")
    return n("loss_receiver_k_patched") - n("loss_clean") >= 0.01 && n("share_of_receiver_effect") >= 0.5;
  if (id == "ov_fault_separate")
    return n("pattern_max_abs_diff_v") == 0 && n("induction_score_v_patched") >= 0.8 &&
           n("direct_logit_clean") > 0 && n("direct_logit_v_patched") <= 0.5 * n("direct_logit_clean") &&
           n("loss_rise_v") >= 0.01;
  ADD_FAILURE() << "unknown claim " << id;
  return false;
}

// Every claim in the one order; verdicts by the stated criteria; n/a with a reason.
void check_claims(const TourResult& r) {
  ASSERT_EQ(r.claims.size(), tour_claim_ids().size());
  for (size_t i = 0; i < r.claims.size(); i++) {
    const Claim& c = r.claims[i];
    SCOPED_TRACE(c.id);
    EXPECT_EQ(c.id, tour_claim_ids()[i]);
    EXPECT_FALSE(c.seed.empty());
    EXPECT_FALSE(c.source.empty());
    if (!c.applies) {
      EXPECT_FALSE(c.held);
      EXPECT_EQ(c.summary, "n/a");
      EXPECT_FALSE(c.note.empty()) << "n/a without a reason";
      continue;
    }
    EXPECT_FALSE(c.criterion.empty());
    EXPECT_FALSE(c.summary.empty());
    EXPECT_EQ(c.held, expected_verdict(c)) << c.summary;
    if (!c.held) EXPECT_FALSE(c.note.empty()) << "does not hold but says not why";
  }
}

void check_tour(const std::string& name) {
  SCOPED_TRACE(name);
  const Model m = load_lm(kFixtures + name);
  const TourResult r = tour(m, small_options(m));
  check_claims(r);
  EXPECT_EQ(r.arch.model_type, "gpt2");
  // GPT-2: learned positions, LayerNorm, multi-head attention, biases, ÷√d_k — exactly these are moot.
  const std::set<std::string> moot = {
      "rmsnorm_trap",     "rope_swap_transposes", "rope_relative",   "qk_circuit_position_dependent",
      "gqa_shared_kv",    "no_scale_saturates",   "qk_where_v_what", "k_composition_causal",
      "ov_fault_separate"};  // the last three: no induction head on random weights
  for (const Claim& c : r.claims) EXPECT_EQ(c.applies, !moot.count(c.id)) << c.id << ": " << c.note;
  // The chosen heads: the induction head in a layer after the first, the previous-token head before it.
  EXPECT_GE(r.induction.layer, 1);
  EXPECT_LT(r.previous.layer, r.induction.layer);
  double best = -1;
  for (const auto& h : r.heads.heads)
    if (h.layer >= 1) best = std::max(best, h.induction);
  EXPECT_EQ(r.heads.heads[size_t(r.induction.layer) * r.H + r.induction.head].induction, best);
  // What a random-weight model must give: the identities hold, the trained-weight claims do not.
  for (const char* id :
       {"projections", "ln_trap", "multi_head_slices", "scores_asymmetric", "swap_full_transposes",
        "softmax_breaks_transpose", "kv_cache_exact", "soft_dictionary_example", "running_example",
        "attn_params_4d2", "gradcheck", "gradcheck_model"})
    EXPECT_TRUE(r.claim(id)->held) << id << ": " << r.claim(id)->summary;
  for (const char* id : {"previous_token_head", "induction_head"}) EXPECT_FALSE(r.claim(id)->held) << id;
  // Evidence for the pictures.
  EXPECT_EQ(r.patterns.size(), size_t(r.L * r.H));
  for (const auto& p : r.patterns) EXPECT_EQ(p.size(), size_t(r.T * r.T));
  EXPECT_EQ(r.head_asym.size(), size_t(r.L * r.H));
  EXPECT_EQ(r.scores.S.rows, r.T);
  EXPECT_EQ(r.swap.S.rows, r.T);
  EXPECT_FALSE(r.circuits.compositions.empty());
  EXPECT_FALSE(r.saturate.empty());
  EXPECT_EQ(r.saturate.back().dk, 1024);
  EXPECT_EQ(r.ablation.ov_pattern_max_abs_diff, 0.0);
  EXPECT_TRUE(r.offsets.empty());  // learned positions: no offset chart
  // The 4d² claim read the model's own tensors: c_attn [d, 3d] + c_proj [d, d] = 4d² weights, 4d biases.
  const Claim* p = r.claim("attn_params_4d2");
  EXPECT_EQ(p->number("weights_from_tensors"), 4.0 * r.d * r.d);
  EXPECT_EQ(p->number("biases_from_tensors"), 4.0 * r.d);
  EXPECT_EQ(p->number("gpt2_small_weights"), 2359296.0);
  EXPECT_EQ(p->number("gpt2_small_biases"), 3072.0);
}

TEST(Tour, TinyFixture) {
  check_tour("tiny");
}
TEST(Tour, TinyAttnOnlyFixture) {
  check_tour("tiny_attn_only");
}
TEST(Tour, LlmcBinFixture) {
  check_tour("tiny.bin");
}

// A model whose Q/K/V biases are all zero (as at init): the bias trap is exactly 0 and the matrices-only swap
// IS the full swap — both must say "does not hold" with the number, not pass.
TEST(Tour, ZeroBiasesDoNotPassTheBiasClaims) {
  Model m = load_lm(kFixtures + "tiny_attn_only");
  auto zeros = std::make_shared<std::vector<float>>(size_t(3 * m.arch.d), 0.0f);
  for (auto& b : m.blocks) {
    ASSERT_EQ(b.bqkv.numel(), 3 * m.arch.d);
    b.bqkv.data = zeros->data(), b.bqkv.type = WeightType::F32;
  }
  m.keep_alive.push_back(zeros);
  const TourResult r = tour(m, small_options(m));
  const Claim* bias = r.claim("bias_trap");
  EXPECT_FALSE(bias->held);
  EXPECT_EQ(bias->number("q_rel_err"), 0.0);
  EXPECT_NE(bias->note.find("zero"), std::string::npos) << bias->note;
  const Claim* swap = r.claim("swap_matrices_only_neither");
  EXPECT_FALSE(swap->held);
  EXPECT_LT(swap->number("vs_ST_rel"), 1e-12);
  EXPECT_NE(swap->note.find("zero"), std::string::npos) << swap->note;
  EXPECT_TRUE(r.claim("swap_full_transposes")->held);
}

TEST(Tour, RejectsBadOptions) {
  const Model m = load_lm(kFixtures + "tiny");
  TourOptions o = small_options(m);
  o.text_ids = {3};
  EXPECT_THROW(tour(m, o), Error);
  o.text_ids.assign(17, 1);  // the fixture has 16 positions
  EXPECT_THROW(tour(m, o), Error);
  o = small_options(m);
  o.text_ids[0] = 101;  // outside the vocabulary
  EXPECT_THROW(tour(m, o), Error);
  o = small_options(m);
  o.n = 9;  // 2 × 9 > 16
  EXPECT_THROW(tour(m, o), Error);
  o = small_options(m);
  o.batch = 0;
  EXPECT_THROW(tour(m, o), Error);
}

TEST(Tour, DefaultTextFitsTheBudget) {
  auto bytes = [](const std::string& s) { return std::vector<int>(s.begin(), s.end()); };
  const std::string t = default_tour_text(bytes, 60);
  EXPECT_FALSE(t.empty());
  EXPECT_LE(t.size(), 60u);
  EXPECT_GE(t.size(), 40u);
  EXPECT_EQ(default_tour_text(bytes, 1), "");
}

// The inputs as the CLI resolves them: the default text through the tokenizer (with labels), random ids
// without one, and the errors naming the option.
TEST(Tour, InputResolution) {
  const Model m = load_lm(std::string(QKV_SOURCE_DIR) + "/models/induction");
  const auto tok = tokenizer_for_model(std::string(QKV_SOURCE_DIR) + "/models/induction");
  ASSERT_TRUE(tok.has_value());
  const TourInput in = tour_input(m.arch, &*tok, {}, "", -2, 0, 4, 0);
  EXPECT_EQ(in.text, "The cat sat on the mat. The cat sat on the mat.");
  EXPECT_EQ(in.options.text_ids, tok->encode(in.text));
  ASSERT_EQ(in.labels.size(), in.options.text_ids.size());
  EXPECT_EQ(in.labels[3], "␣");
  EXPECT_EQ(in.options.bos, -1);  // the bundled byte vocabulary has no <|endoftext|>
  const TourInput raw = tour_input(m.arch, nullptr, {}, "", -1, 0, 4, 5);
  EXPECT_EQ(raw.options.text_ids, repeated_random_tokens(m.arch.vocab_size, 25, 1, 1005)[0]);
  EXPECT_EQ(raw.labels[0], "#" + std::to_string(raw.options.text_ids[0]));
  EXPECT_THROW(tour_input(m.arch, nullptr, {7}, "", -1, 0, 4, 0), Error);
  try {
    tour_input(m.arch, nullptr, {}, "", -1, 65, 4, 0);  // 2 × 65 > 128 positions
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Usage);
    EXPECT_NE(std::string(e.what()).find("--seq-len: 65 is outside [2, 64]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(tour_input(m.arch, nullptr, {}, "", 256, 0, 4, 0), Error);  // --bos outside the vocabulary
}

}  // namespace
}  // namespace qkv::analysis
