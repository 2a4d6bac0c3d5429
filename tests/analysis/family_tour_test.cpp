// The family tour on a random checkpoint of every family (qkv init --arch's layout): the arithmetic
// claims hold on each (they are identities of the maps and the mask, so a failure is a bug in qkv),
// and every claim has a verdict or an n/a with its reason.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "qkv/analysis/family_tour.hpp"

namespace fs = std::filesystem;

namespace qkv::analysis {
namespace {

TEST(FamilyTour, ArithmeticClaimsHoldOnEveryFamily) {
  for (const std::string& type : supported_model_types()) {
    SCOPED_TRACE(type);
    nlohmann::json cfg = default_config(type, "tiny");
    cfg["initializer_range"] = 0.2;
    const std::string dir = (fs::temp_directory_path() / ("qkv_family_tour_" + type + "_" + std::to_string(::getpid()))).string();
    write_random_checkpoint(dir, cfg, WeightType::F32, 1, 3);
    const Model m = load_lm(dir);
    const FamilyTourResult r = family_tour(m, {});
    std::map<std::string, const Claim*> by_id;
    for (const Claim& c : r.claims) {
      by_id[c.id] = &c;
      if (!c.applies) EXPECT_FALSE(c.note.empty()) << c.id << ": n/a without a reason";
      else EXPECT_FALSE(c.criterion.empty()) << c.id << ": a verdict without a criterion";
    }
    for (const char* id : {"projections", "swap_full_transposes", "kv_cache_exact", "gradcheck", "gradcheck_model"}) {
      ASSERT_TRUE(by_id.count(id)) << id;
      EXPECT_TRUE(by_id[id]->applies && by_id[id]->held) << id << ": " << by_id[id]->summary << " " << by_id[id]->note;
    }
    for (const char* id : {"rope_relative", "rope_swap_transposes", "qk_circuit_position_dependent"}) {
      ASSERT_TRUE(by_id.count(id)) << id;
      EXPECT_EQ(by_id[id]->applies, m.arch.rotary()) << id;
      if (m.arch.rotary()) EXPECT_TRUE(by_id[id]->held) << id << ": " << by_id[id]->summary;
    }
    ASSERT_TRUE(by_id.count("gqa_shared_kv"));
    EXPECT_EQ(by_id["gqa_shared_kv"]->applies, m.arch.n_kv < m.arch.H);
    if (m.arch.n_kv < m.arch.H) EXPECT_TRUE(by_id["gqa_shared_kv"]->held) << by_id["gqa_shared_kv"]->summary;
    EXPECT_EQ(by_id["rmsnorm_trap"]->applies, m.arch.norm != NormKind::LayerNorm);
    if (m.arch.norm != NormKind::LayerNorm) EXPECT_TRUE(by_id["rmsnorm_trap"]->held) << by_id["rmsnorm_trap"]->summary;
    EXPECT_EQ(by_id["no_scale_saturates"]->applies, type == "gpt_neo");
    // The circuit claims are measured on every family (verdicts; on random weights they honestly fail).
    for (const char* id : {"previous_token_head", "induction_head", "k_composition", "qk_ov_fail_separately",
                           "softmax_breaks_transpose"}) {
      ASSERT_TRUE(by_id.count(id)) << id;
      EXPECT_TRUE(by_id[id]->applies) << id << ": " << by_id[id]->note;
    }
    EXPECT_EQ(by_id["qk_ov_fail_separately"]->number("ov_pattern_max_abs_diff"), 0.0);
    EXPECT_TRUE(by_id["softmax_breaks_transpose"]->held);
    EXPECT_EQ(by_id["swap_matrices_only_neither"]->applies, m.arch.qkv_bias);
    EXPECT_EQ(by_id["bias_trap"]->applies, m.arch.qkv_bias);
    EXPECT_EQ(by_id.count("ln_trap") == 1, m.arch.norm == NormKind::LayerNorm);
    if (by_id.count("ln_trap")) EXPECT_TRUE(by_id["ln_trap"]->held);
    fs::remove_all(dir);
  }
}

// The maps the projection claim recomputes q from come from the layout: the same bytes read as another
// family's fused layout give other matrices (so a wrong layout could not pass the claim unnoticed).
TEST(FamilyTour, QkvMapsDependOnTheLayout) {
  nlohmann::json cfg = default_config("gpt_neox", "tiny");
  cfg["initializer_range"] = 0.2;
  const std::string dir = (fs::temp_directory_path() / ("qkv_family_tour_layout_" + std::to_string(::getpid()))).string();
  write_random_checkpoint(dir, cfg, WeightType::F32, 1, 5);
  Model m = load_lm(dir);
  m.arch.qkv_layout = QkvLayout::Stacked;  // the same bytes read as Phi-3's stacked rows
  const QkvMaps wrong = qkv_maps(m, 0);
  m.arch.qkv_layout = QkvLayout::NeoxPerHead;
  const QkvMaps right = qkv_maps(m, 0);
  EXPECT_NE(wrong.Wq, right.Wq);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace qkv::analysis

namespace qkv::analysis {
namespace {

// qkv's numbers for the family claims against tests/reference/check_family_claims.py (float64 PyTorch,
// R_Δ built from the rotary definition, full d×d products): same checkpoints, same text, same head.
TEST(FamilyTour, NumbersMatchAnIndependentComputation) {
  std::ifstream f(std::string(QKV_SOURCE_DIR) + "/tests/reference/fixtures/families/claims.json");
  ASSERT_TRUE(f.good()) << "run /usr/bin/python3 tests/reference/check_family_claims.py build/qkv";
  const nlohmann::json want = nlohmann::json::parse(f);
  const std::vector<int> tokens = want["tokens"].get<std::vector<int>>();
  for (const auto& [type, rec] : want["families"].items()) {
    SCOPED_TRACE(type);
    nlohmann::json cfg = default_config(type, "tiny");
    cfg["initializer_range"] = 0.2;
    const std::string dir = (fs::temp_directory_path() / ("qkv_family_claims_" + type + "_" + std::to_string(::getpid()))).string();
    write_random_checkpoint(dir, cfg, WeightType::F32, 1, 3);
    const Model m = load_lm(dir);
    FamilyTourOptions o;
    o.text_ids = tokens;
    const FamilyTourResult r = family_tour(m, o);
    ASSERT_EQ(r.chosen.layer, rec["layer"].get<int>());
    const int h = r.chosen.head, G = m.arch.H / m.arch.n_kv;
    std::map<std::string, const Claim*> c;
    for (const Claim& cl : r.claims) c[cl.id] = &cl;
    EXPECT_NEAR(c["scores_asymmetric"]->number("asym_rel"), rec["asym_rel"][size_t(h)].get<double>(), 1e-4);
    if (!rec["raw_row_rel"].is_null())
      EXPECT_NEAR(c["rmsnorm_trap"]->number("raw_row_rel_err"), rec["raw_row_rel"].get<double>(), 1e-5);
    if (m.arch.rotary()) {
      const auto& qd = rec["qk_delta"][size_t(h)];
      const char* keys[] = {"delta_1", "delta_4", "delta_16", "delta_64"};
      for (int i = 0; i < 4; i++)
        EXPECT_NEAR(c["qk_circuit_position_dependent"]->number(keys[i]), qd[size_t(i)].get<double>(), 1e-5) << keys[i];
    }
    if (G > 1) {
      const auto& g = rec["gqa"][size_t(h / G)];
      EXPECT_NEAR(c["gqa_shared_kv"]->number("query_max_abs_diff"), g["query_max_abs_diff"].get<double>(), 1e-4);
      EXPECT_NEAR(c["gqa_shared_kv"]->number("pattern_max_abs_diff"), g["pattern_max_abs_diff"].get<double>(), 1e-5);
    }
    if (rec.contains("no_scale")) {
      EXPECT_NEAR(c["no_scale_saturates"]->number("mean_max_weight_unscaled"), rec["no_scale"]["unscaled"][0].get<double>(), 1e-5);
      EXPECT_NEAR(c["no_scale_saturates"]->number("mean_max_weight_scaled"), rec["no_scale"]["scaled"][0].get<double>(), 1e-5);
      EXPECT_NEAR(c["no_scale_saturates"]->number("softmax_jacobian_unscaled"), rec["no_scale"]["unscaled"][1].get<double>(), 1e-5);
      EXPECT_NEAR(c["no_scale_saturates"]->number("softmax_jacobian_scaled"), rec["no_scale"]["scaled"][1].get<double>(), 1e-5);
    }
    fs::remove_all(dir);
  }
}

}  // namespace
}  // namespace qkv::analysis

namespace qkv::analysis {
namespace {

// The circuit claims of the family tour on a TRAINED model: the bundled induction model (GPT-2, read as a
// family Model, so every number comes from qkv_maps, the family forward's hooks and the Model overloads of
// circuits / ablate) — the verdicts the GPT-2 tour gives it must come out here too.
TEST(FamilyTour, InductionCircuitHoldsOnTheTrainedModelThroughTheFamilyPath) {
  const Model m = load_lm(std::string(QKV_SOURCE_DIR) + "/models/induction");
  const FamilyTourResult r = family_tour(m, {});
  for (const char* id : {"previous_token_head", "induction_head", "k_composition", "qk_ov_fail_separately"}) {
    const Claim* c = nullptr;
    for (const Claim& x : r.claims)
      if (x.id == id) c = &x;
    ASSERT_NE(c, nullptr) << id;
    EXPECT_TRUE(c->applies && c->held) << id << ": " << c->summary << " / " << c->note;
    RecordProperty(id, c->summary);
  }
}

}  // namespace
}  // namespace qkv::analysis

namespace qkv::analysis {
namespace {

// The second bundled model (models/induction-llama: rotary, GQA 4/2, RMSNorm, SwiGLU) carries the
// circuit the seeds describe, and the causal claims measure it by patching as on the GPT-2 model.
TEST(FamilyTour, BundledLlamaHoldsTheCircuitAndTheCausalClaims) {
  const Model m = load_lm(std::string(QKV_SOURCE_DIR) + "/models/induction-llama");
  const FamilyTourResult r = family_tour(m, {});
  std::map<std::string, const Claim*> by_id;
  for (const Claim& c : r.claims) by_id[c.id] = &c;
  for (const char* id : {"previous_token_head", "induction_head", "k_composition", "qk_ov_fail_separately",
                         "qk_where_v_what", "k_composition_causal", "ov_fault_separate", "gqa_shared_kv",
                         "rope_relative", "kv_cache_exact", "gradcheck_model"}) {
    ASSERT_TRUE(by_id.count(id)) << id;
    EXPECT_TRUE(by_id[id]->applies && by_id[id]->held) << id << ": " << by_id[id]->summary << " " << by_id[id]->note;
  }
  EXPECT_EQ(r.previous.layer, 0);
  EXPECT_EQ(r.chosen.layer, 1);
}

}  // namespace
}  // namespace qkv::analysis
