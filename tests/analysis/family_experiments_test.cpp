// The experiments (project, scores, swap,
// scan_heads, circuits and ablate_head) on a random checkpoint of every family:
//  - against tests/reference/check_family_experiments.py (float64 PyTorch forward written from each
//    family's definition, full d×d and [V, V] products, numpy eigvals, rotation matrices built there);
//  - their identities (the full swap transposes S exactly, OV ablation leaves the pattern bit-identical,
//    the maps reproduce the forward's q, k, v).
// GPT-2's own fixtures against check_experiments.py: experiments_reference_test.cpp.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
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
    // The parts are recomputed in double from the float32 rows, S comes from the forward's float32 q and k:
    // they differ by float32 rounding, relative to the largest score (GPT-Neo's, unscaled, reach 46).
    double S_max = 1;
    for (double e : s.S.a) S_max = std::max(S_max, std::abs(e));
    EXPECT_LT(s.reconstruction_max_abs, 1e-6 * S_max) << "largest |S| " << S_max;
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
    EXPECT_EQ(ab.intact_vs_model_max_abs, 0.0) << "hooks that edit nothing must change no bit";
  }
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
