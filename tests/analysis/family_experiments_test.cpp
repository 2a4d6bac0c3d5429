// The experiments over the family engine (the `const Model&` overloads of project, scores, swap,
// scan_heads, circuits and ablate_head) on a random checkpoint of every family:
//  - against tests/reference/check_family_experiments.py (float64 PyTorch forward written from each
//    family's definition, full d×d and [V, V] products, numpy eigvals, rotation matrices built there);
//  - their identities (the full swap transposes S exactly, OV ablation leaves the pattern bit-identical,
//    the maps reproduce the forward's q, k, v);
//  - on GPT-2, the family path gives the GPT-2 path's numbers (two independent slicings of c_attn).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "qkv/analysis/ablate.hpp"
#include "qkv/analysis/circuits.hpp"
#include "qkv/analysis/head_detector.hpp"
#include "qkv/analysis/projections.hpp"
#include "qkv/analysis/scores.hpp"
#include "qkv/analysis/swap.hpp"
#include "qkv/error.hpp"

namespace fs = std::filesystem;

namespace qkv::analysis {
namespace {

nlohmann::json reference() {
  std::ifstream f(std::string(QKV_SOURCE_DIR) + "/tests/reference/fixtures/families/experiments.json");
  EXPECT_TRUE(f.good()) << "run /usr/bin/python3 tests/reference/check_family_experiments.py build/qkv";
  return nlohmann::json::parse(f);
}

// The checkpoint check_family_experiments.py asked `qkv init` for (same config, seed and dtype).
Model family_checkpoint(const std::string& type, const std::string& tag) {
  nlohmann::json cfg = default_config(type, "tiny");
  cfg["initializer_range"] = 0.2;
  const std::string dir = (fs::temp_directory_path() / ("qkv_family_experiments_" + tag + type + "_" + std::to_string(::getpid()))).string();
  write_random_checkpoint(dir, cfg, WeightType::F32, 1, 3);
  Model m = load_lm(dir);
  fs::remove_all(dir);  // the mapping stays valid after its files are unlinked (POSIX)
  return m;
}

double rel_near(double got, double want) { return std::abs(got - want) / std::max(1.0, std::abs(want)); }

TEST(FamilyExperiments, NumbersMatchAnIndependentComputation) {
  const nlohmann::json want = reference();
  const auto tokens = want["tokens"].get<std::vector<int>>();
  const auto repeated = want["repeated"].get<std::vector<std::vector<int>>>();
  const int n = want["n"].get<int>();
  ASSERT_EQ(want["families"].size(), supported_model_types().size());
  for (const auto& [type, rec] : want["families"].items()) {
    SCOPED_TRACE(type);
    const Model m = family_checkpoint(type, "ref_");
    const Arch& a = m.arch;
    const int l = rec["layer"].get<int>(), H = a.H, L = a.n_layer;

    const ProjectionResult p = project(m, tokens, l);
    const ProjectionPart* parts[3] = {&p.q, &p.k, &p.v};
    const char* names[3] = {"q", "k", "v"};
    for (int i = 0; i < 3; i++) {
      const auto& r = rec["project"][names[i]];
      EXPECT_NEAR(parts[i]->ln_trap_rel, r["ln_trap_rel"].get<double>(), 1e-5) << names[i];
      EXPECT_NEAR(parts[i]->bias_trap_rel, r["bias_trap_rel"].get<double>(), 1e-5) << names[i];
      EXPECT_NEAR(parts[i]->bias_norm, r["bias_norm"].get<double>(), 1e-6) << names[i];
      EXPECT_LT(parts[i]->max_abs_diff, 1e-5) << names[i] << ": the maps do not reproduce the forward";
    }
    EXPECT_NEAR(p.interleaved_cut_rel, rec["project"]["interleaved_cut_rel"].get<double>(), 1e-5);
    EXPECT_LT(p.ln_max_abs_diff, 1e-5);

    const auto& rs = rec["scores"];
    const ScoresResult s = score_asymmetry(m, tokens, l, rs["head"].get<int>());
    EXPECT_EQ(s.rotated, a.rotary());
    EXPECT_NEAR(s.asym_rel, rs["asym_rel"].get<double>(), 1e-4);
    EXPECT_NEAR(s.M.norm, rs["M_norm"].get<double>(), 1e-5);
    EXPECT_NEAR(s.M.antisym_share, rs["M_antisym_share"].get<double>(), 1e-5);
    for (const auto& [key, got] : std::vector<std::pair<std::string, double>>{
             {"share_xx", s.share_xx}, {"share_xb", s.share_xb}, {"share_bx", s.share_bx}, {"share_bb", s.share_bb},
             {"bias_share", s.bias_share}, {"bias_share_softmax", s.bias_share_softmax}})
      EXPECT_NEAR(got, rs[key].get<double>(), 1e-4) << key;
    EXPECT_LT(s.reconstruction_max_abs, 1e-5);
    EXPECT_LT(s.S_vs_hook_max_abs, 1e-5);

    const auto& rw = rec["swap"];
    const SwapResult w = swap_query_key(m, tokens, l, rw["head"].get<int>());
    EXPECT_EQ(w.full_vs_ST_max_abs, 0.0) << "the full swap must transpose S exactly";
    EXPECT_LT(w.S_vs_model_max_abs, 1e-5);
    for (const auto& [key, got] : std::vector<std::pair<std::string, double>>{
             {"matrices_vs_S_rel", w.matrices_vs_S_rel}, {"matrices_vs_ST_rel", w.matrices_vs_ST_rel},
             {"pattern_full_vs_AT_rel", w.pattern_full_vs_AT_rel}, {"pattern_full_vs_A_rel", w.pattern_full_vs_A_rel},
             {"column_sum_max_dev", w.column_sum_max_dev}})
      EXPECT_NEAR(got, rw[key].get<double>(), 1e-4) << key;

    const HeadScan scan = scan_heads(m, repeated, n, -1, {});
    ASSERT_EQ(scan.heads.size(), size_t(L) * H);
    for (size_t i = 0; i < scan.heads.size(); i++) {
      EXPECT_NEAR(scan.heads[i].previous_token, rec["heads"]["previous_token"][i].get<double>(), 1e-5) << i;
      EXPECT_NEAR(scan.heads[i].duplicate_token, rec["heads"]["duplicate_token"][i].get<double>(), 1e-5) << i;
      EXPECT_NEAR(scan.heads[i].induction, rec["heads"]["induction"][i].get<double>(), 1e-5) << i;
      EXPECT_NEAR(scan.heads[i].induction_detector, rec["heads"]["induction_detector"][i].get<double>(), 1e-5) << i;
    }

    CircuitsOptions co;
    co.baseline_samples = 0;
    const CircuitsResult c = circuits(m, co);
    ASSERT_EQ(c.heads.size(), rec["circuits"]["heads"].size());
    for (size_t i = 0; i < c.heads.size(); i++) {
      const auto& r = rec["circuits"]["heads"][i];
      EXPECT_NEAR(c.heads[i].qk_norm, r["qk_norm"].get<double>(), 1e-5 * std::max(1.0, r["qk_norm"].get<double>())) << i;
      EXPECT_NEAR(c.heads[i].qk_antisym_share, r["qk_antisym_share"].get<double>(), 1e-5) << i;
      EXPECT_NEAR(c.heads[i].ov_norm, r["ov_norm"].get<double>(), 1e-5 * std::max(1.0, r["ov_norm"].get<double>())) << i;
      EXPECT_NEAR(c.heads[i].copying, r["copying"].get<double>(), 1e-4) << i;
    }
    ASSERT_EQ(c.compositions.size(), rec["circuits"]["compositions"].size());
    for (size_t i = 0; i < c.compositions.size(); i++) {
      const auto& r = rec["circuits"]["compositions"][i];
      const Composition& x = c.compositions[i];
      ASSERT_EQ(x.l1, r[0].get<int>());
      ASSERT_EQ(x.h1, r[1].get<int>());
      ASSERT_EQ(x.l2, r[2].get<int>());
      ASSERT_EQ(x.h2, r[3].get<int>());
      EXPECT_NEAR(x.q, r[4].get<double>(), 1e-5);
      EXPECT_NEAR(x.k, r[5].get<double>(), 1e-5);
      EXPECT_NEAR(x.v, r[6].get<double>(), 1e-5);
    }
    ASSERT_EQ(c.group_compositions.size(), rec["circuits"]["groups"].size());
    EXPECT_EQ(c.group_compositions.empty(), a.n_kv == a.H);
    for (size_t i = 0; i < c.group_compositions.size(); i++) {
      const auto& r = rec["circuits"]["groups"][i];
      const GroupComposition& x = c.group_compositions[i];
      ASSERT_EQ(x.g2, r[3].get<int>());
      EXPECT_NEAR(x.k, r[4].get<double>(), 1e-5);
      EXPECT_NEAR(x.v, r[5].get<double>(), 1e-5);
    }

    const auto& ra = rec["ablate"];
    const AblationResult ab = ablate_head(m, repeated, n, -1, l, ra["head"].get<int>());
    EXPECT_LT(rel_near(ab.loss_intact, ra["intact"].get<double>()), 1e-5);
    EXPECT_LT(rel_near(ab.loss_qk, ra["qk"].get<double>()), 1e-5);
    EXPECT_LT(rel_near(ab.loss_ov, ra["ov"].get<double>()), 1e-5);
    EXPECT_LT(rel_near(ab.loss_first_half, ra["first_half"].get<double>()), 1e-5);
    EXPECT_EQ(ab.ov_pattern_max_abs_diff, 0.0) << "OV ablation must not touch the pattern";
    EXPECT_GT(ab.qk_pattern_max_abs_diff, 0.0);
    EXPECT_LT(ab.intact_vs_model_max_abs, 1e-4);
  }
}

// GPT-2 through the family engine (qkv_maps' reading of c_attn, the family forward's hooks) against the
// GPT-2 path (head_weights' own slicing, class GPT2's forward): the same numbers to float rounding.
TEST(FamilyExperiments, Gpt2FamilyPathMatchesTheGpt2Path) {
  const std::string dir = std::string(QKV_SOURCE_DIR) + "/tests/reference/fixtures/tiny";
  const GPT2 g = load_model(dir);
  const Model m = load_lm(dir);
  const std::vector<int> ids = {3, 57, 14, 92, 0, 57, 14, 92, 41, 100, 7, 57};
  const ProjectionResult p1 = project(g, ids, 1), p2 = project(m, ids, 1);
  EXPECT_NEAR(p1.q.ln_trap_rel, p2.q.ln_trap_rel, 1e-6);
  EXPECT_NEAR(p1.v.bias_trap_rel, p2.v.bias_trap_rel, 1e-6);
  EXPECT_NEAR(p1.interleaved_cut_rel, p2.interleaved_cut_rel, 1e-6);
  const ScoresResult s1 = score_asymmetry(g, ids, 1, 2), s2 = score_asymmetry(m, ids, 1, 2);
  EXPECT_FALSE(s2.rotated);
  EXPECT_LT(max_abs_difference(s1.S, s2.S), 1e-5);
  EXPECT_NEAR(s1.asym_rel, s2.asym_rel, 1e-5);
  EXPECT_NEAR(s1.M.antisym_share, s2.M.antisym_share, 1e-9);
  EXPECT_NEAR(s1.share_bx, s2.share_bx, 1e-5);
  EXPECT_NEAR(s1.share_xb, s2.share_xb, 1e-5);
  EXPECT_NEAR(s1.bias_share_softmax, s2.bias_share_softmax, 1e-5);
  const SwapResult w1 = swap_query_key(g, ids, 1, 1), w2 = swap_query_key(m, ids, 1, 1);
  EXPECT_NEAR(w1.matrices_vs_ST_rel, w2.matrices_vs_ST_rel, 1e-6);
  EXPECT_NEAR(w1.pattern_full_vs_AT_rel, w2.pattern_full_vs_AT_rel, 1e-6);
  const auto seqs = repeated_random_tokens(g.config.vocab_size, 6, 2, 0);
  const HeadScan h1 = scan_heads(g, seqs, 6, -1, ids), h2 = scan_heads(m, seqs, 6, -1, ids);
  for (size_t i = 0; i < h1.heads.size(); i++) {
    EXPECT_NEAR(h1.heads[i].induction, h2.heads[i].induction, 1e-5);
    EXPECT_NEAR(h1.heads[i].text_previous_token, h2.heads[i].text_previous_token, 1e-5);
  }
  CircuitsOptions co;
  co.baseline_samples = 4;
  const CircuitsResult c1 = circuits(g, co), c2 = circuits(m, co);
  ASSERT_EQ(c1.heads.size(), c2.heads.size());
  for (size_t i = 0; i < c1.heads.size(); i++) {
    EXPECT_NEAR(c1.heads[i].qk_norm, c2.heads[i].qk_norm, 1e-6 * c1.heads[i].qk_norm);
    EXPECT_NEAR(c1.heads[i].ov_norm, c2.heads[i].ov_norm, 1e-6 * c1.heads[i].ov_norm);
    EXPECT_NEAR(c1.heads[i].copying, c2.heads[i].copying, 1e-6);
  }
  ASSERT_EQ(c1.compositions.size(), c2.compositions.size());
  for (size_t i = 0; i < c1.compositions.size(); i++) {
    EXPECT_NEAR(c1.compositions[i].q, c2.compositions[i].q, 1e-9);
    EXPECT_NEAR(c1.compositions[i].k, c2.compositions[i].k, 1e-9);
    EXPECT_NEAR(c1.compositions[i].v, c2.compositions[i].v, 1e-9);
  }
  EXPECT_EQ(c1.baseline.k_mean, c2.baseline.k_mean);
  EXPECT_TRUE(c2.group_compositions.empty());
  const AblationResult a1 = ablate_head(g, seqs, 6, -1, 1, 0), a2 = ablate_head(m, seqs, 6, -1, 1, 0);
  EXPECT_NEAR(a1.loss_intact, a2.loss_intact, 1e-5);
  EXPECT_NEAR(a1.loss_qk, a2.loss_qk, 1e-5);
  EXPECT_NEAR(a1.loss_ov, a2.loss_ov, 1e-5);
}

// Bad arguments name the option and the valid range (usage errors), on the family path too.
TEST(FamilyExperiments, OutOfRangeLayerAndHeadAreUsageErrors) {
  const Model m = family_checkpoint("llama", "range_");
  try {
    score_asymmetry(m, {1, 2, 3}, 0, 9);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Usage);
    EXPECT_NE(std::string(e.what()).find("--head: 9 is outside [0, 4)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(project(m, {1, 2, 3}, 2), Error);
}

}  // namespace
}  // namespace qkv::analysis
