// Patching and attribution (patching.hpp, attribution.hpp): against an independent float64 NumPy
// implementation (tests/reference/check_patching.py -> fixtures/patching/*.json), bit-identity of a
// patch to the activation's own value on every hook of several families, DLA terms adding up, errors.
#include "qkv/analysis/patching.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "qkv/analysis/attribution.hpp"
#include "qkv/error.hpp"
#include "qkv/lm.hpp"

namespace qkv::analysis {
namespace {

namespace fs = std::filesystem;
const std::string kFixtures = std::string(QKV_SOURCE_DIR) + "/tests/reference/fixtures/";

PatchMetric metric_of(const nlohmann::json& m) {
  PatchMetric p;
  if (m["kind"] == "logit_diff") {
    p.kind = PatchMetric::Kind::LogitDiff;
    p.position = m["position"], p.answer = m["answer"], p.wrong = m["wrong"];
  } else {
    p.kind = PatchMetric::Kind::Loss;
    p.loss_positions = m["positions"].get<std::vector<int>>();
    p.targets = m["targets"].get<std::vector<int>>();
  }
  return p;
}

void near(double got, double want, const std::string& what) {
  EXPECT_NEAR(got, want, 2e-4 * (1 + std::fabs(want))) << what;
}

class PatchingReference : public ::testing::TestWithParam<std::string> {};

TEST_P(PatchingReference, SweepsPathsAndAttributionMatchNumpy) {
  std::ifstream f(kFixtures + "patching/" + GetParam() + ".json");
  ASSERT_TRUE(f) << "run /usr/bin/python3 tests/reference/check_patching.py";
  const auto ref = nlohmann::json::parse(f);
  const Model m = load_lm(kFixtures + GetParam());
  const auto clean = ref["clean"].get<std::vector<int>>(), corrupt = ref["corrupt"].get<std::vector<int>>();
  int n_sites = 0;
  for (const auto& s : ref["sweeps"]) {
    const std::string what = s["hook"].get<std::string>() + " " + s["direction"].get<std::string>() + " " +
                             s["metric"].get<std::string>();
    SCOPED_TRACE(what);
    SweepOptions o;
    o.hook = s["hook"];
    o.per_position = s["per_position"];
    o.direction = s["direction"] == "noising" ? PatchDirection::Noising : PatchDirection::Denoising;
    o.metric = metric_of(ref["metrics"][s["metric"].get<std::string>()]);
    const SweepResult r = patch_sweep(m, clean, corrupt, o);
    near(r.clean, s["clean"], "clean");
    near(r.corrupt, s["corrupt"], "corrupt");
    ASSERT_EQ(r.sites.size(), s["sites"].size());
    for (size_t i = 0; i < r.sites.size(); i++) {
      const auto& w = s["sites"][i];
      ASSERT_EQ(r.sites[i].layer, w[0].get<int>());
      ASSERT_EQ(r.sites[i].head, w[1].get<int>());
      ASSERT_EQ(r.sites[i].pos, w[2].get<int>());
      near(r.metric[i], w[3], "site " + std::to_string(i));
      n_sites++;
    }
    EXPECT_EQ(r.forwards + r.sites_skipped, 2 + int(r.sites.size()));
  }
  EXPECT_GE(n_sites, 200);
  for (const auto& p : ref["paths"]) {
    PathSpec s{p["sender"][0], p["sender"][1], p["receiver"][0], p["receiver"][1],
               p["input"].get<std::string>()[0]};
    const auto dir = p["direction"] == "noising" ? PatchDirection::Noising : PatchDirection::Denoising;
    const PathResult r =
        path_patch(m, clean, corrupt, s, dir, metric_of(ref["metrics"][p["metric"].get<std::string>()]));
    near(r.clean, p["clean"], "path clean");
    near(r.corrupt, p["corrupt"], "path corrupt");
    near(r.metric, p["value"], "path value");
    near(r.receiver_metric, p["receiver_value"], "receiver value");
    // the path is a real intervention on these random weights, not a no-op
    EXPECT_GT(std::fabs(double(p["value"]) -
                        (dir == PatchDirection::Noising ? double(p["clean"]) : double(p["corrupt"]))),
              1e-6);
  }
  for (const auto& d : ref["dla"]) {
    const AttributionResult r =
        attribute(m, d["tokens"].get<std::vector<int>>(), d["answer"], d["wrong"], d["position"]);
    near(r.logit_diff, d["logit_diff"], "logit diff");
    ASSERT_EQ(r.terms.size(), d["terms"].size());
    for (const auto& t : r.terms) {
      ASSERT_TRUE(d["terms"].contains(t.name)) << t.name;
      near(t.value, d["terms"][t.name], "term " + t.name);
    }
    EXPECT_LT(std::fabs(r.sum_minus_logit_diff), 1e-4 * (1 + std::fabs(r.logit_diff)));
    ASSERT_EQ(r.lens.size(), d["lens"].size());
    for (size_t i = 0; i < r.lens.size(); i++) {
      near(r.lens[i].logit_diff, d["lens"][i]["logit_diff"], "lens " + std::to_string(i));
      EXPECT_EQ(r.lens[i].answer_rank, d["lens"][i]["answer_rank"].get<int>());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PatchingReference, ::testing::Values("tiny", "tiny_attn_only"));

// A random checkpoint of a family (lm.hpp's writer), for the properties that must hold on every family;
// its directory is removed once loaded (the model keeps its mapping of the unlinked file).
Model family_model(const std::string& type, uint64_t seed) {
  const std::string dir = (fs::temp_directory_path() / ("qkv_patching_" + type + "_" + std::to_string(::getpid()))).string();
  fs::remove_all(dir);
  write_random_checkpoint(dir, default_config(type, "tiny"), WeightType::F32, 1, seed);
  Model m = load_lm(dir);
  fs::remove_all(dir);
  return m;
}

std::vector<int> tokens(int T, int V) {
  std::vector<int> ids;
  for (int t = 0; t < T; t++) ids.push_back((t * 37 + 11) % V);
  return ids;
}

class PatchingFamilies : public ::testing::TestWithParam<std::string> {};

// Copying an activation's own value back changes nothing, bit for bit, at every hook point of the model.
TEST_P(PatchingFamilies, PatchingOwnValueIsBitIdentical) {
  const std::string type = GetParam();
  const Model m = type == "induction" ? load_lm(std::string(QKV_SOURCE_DIR) + "/models/induction")
                                      : family_model(type, 3);
  const auto ids = tokens(12, m.arch.vocab_size);
  const PatchedRun base = run_patched(m, ids, {}, [](const std::string&) { return true; });
  int hooks = 0;
  for (const auto& name : hook_names(m)) {
    if (name == "logits" || name == "ln_final.hook_normalized") continue;
    SCOPED_TRACE(name);
    const Tensor& own = base.acts.at(name);
    for (int head : {-1, 0})
      for (int pos : {-1, 5}) {
        const bool rows = own.rank() == 2;
        if (rows && head >= 0) continue;
        const PatchedRun p = run_patched(m, ids, {Patch{name, head, pos, &own}});
        ASSERT_EQ(p.logits.size(), base.logits.size());
        EXPECT_EQ(0, std::memcmp(p.logits.data(), base.logits.data(), base.logits.size() * sizeof(float)));
      }
    hooks++;
  }
  EXPECT_GE(hooks, 2 * 8);
  // and a patch from a different run does change the logits (the test above can fail)
  auto other = ids;
  other[2] = (other[2] + 1) % m.arch.vocab_size;
  const PatchedRun o =
      run_patched(m, other, {}, [](const std::string& n) { return n == "blocks.0.hook_resid_pre"; });
  const PatchedRun p =
      run_patched(m, ids, {Patch{"blocks.0.hook_resid_pre", -1, 2, &o.acts.at("blocks.0.hook_resid_pre")}});
  EXPECT_NE(0, std::memcmp(p.logits.data(), base.logits.data(), base.logits.size() * sizeof(float)));
}

// The DLA terms add up to the model's logit difference; per-head terms add up to attn_out.
TEST_P(PatchingFamilies, AttributionTermsSumToTheLogitDifference) {
  const std::string type = GetParam();
  const Model m = type == "induction" ? load_lm(std::string(QKV_SOURCE_DIR) + "/models/induction")
                                      : family_model(type, 4);
  const auto ids = tokens(10, m.arch.vocab_size);
  const AttributionResult r = attribute(m, ids, ids[3], ids[4], 8);
  EXPECT_EQ(r.position, 8);
  if (m.arch.final_softcap > 0) {
    EXPECT_TRUE(std::isnan(r.sum_minus_logit_diff));
  } else {
    EXPECT_LT(std::fabs(r.sum_minus_logit_diff), 1e-4 * (1 + std::fabs(r.logit_diff)))
        << r.sum_terms << " vs " << r.logit_diff;
    EXPECT_GT(std::fabs(r.logit_diff), 1e-6);
    // the logit lens after the last layer is the model's own logit difference
    EXPECT_NEAR(r.lens.back().logit_diff, r.logit_diff, 1e-4 * (1 + std::fabs(r.logit_diff)));
  }
  if (r.per_head) {
    EXPECT_LT(r.heads_vs_attn_out_max_abs, 1e-4);
  }
  EXPECT_EQ(int(r.lens.size()), m.arch.n_layer + 1);
}

// Path patching on every family: identical runs change nothing bit for bit (Δ = 0 exactly); different runs
// move the metric through each of q, k and v (receiver k/v heads are key/value heads under GQA).
TEST_P(PatchingFamilies, PathPatchingIsExactAndMoves) {
  const std::string type = GetParam();
  const Model m = type == "induction" ? load_lm(std::string(QKV_SOURCE_DIR) + "/models/induction")
                                      : family_model(type, 5);
  const auto ids = tokens(12, m.arch.vocab_size);
  auto other = ids;
  for (int t = 0; t < 6; t++) other[size_t(t)] = (other[size_t(t)] + 5) % m.arch.vocab_size;
  PatchMetric ld;
  ld.answer = ids[3], ld.wrong = ids[4];
  for (char in : {'q', 'k', 'v'}) {
    SCOPED_TRACE(std::string(1, in));
    const PathSpec s{0, 0, m.arch.n_layer - 1, in == 'q' ? m.arch.H - 1 : m.arch.n_kv - 1, in};
    const PathResult same = path_patch(m, ids, ids, s, PatchDirection::Noising, ld);
    EXPECT_EQ(same.metric, same.clean);
    EXPECT_EQ(same.delta_norm, 0.0);
    const PathResult r = path_patch(m, ids, other, s, PatchDirection::Noising, ld);
    EXPECT_GT(r.delta_norm, 0.0);
    EXPECT_NE(r.metric, r.clean);
    EXPECT_EQ(r.forwards, 6);
  }
}

INSTANTIATE_TEST_SUITE_P(All, PatchingFamilies,
                         ::testing::Values("induction", "gpt2", "llama", "gemma2", "gpt_neox", "qwen2"));

// Path patching with identical clean and corrupt runs changes nothing (Δ is exactly zero); a sweep
// with identical runs gives the clean metric at every site, bit for bit.
TEST(Patching, IdenticalRunsChangeNothing) {
  const Model m = load_lm(std::string(QKV_SOURCE_DIR) + "/models/induction");
  const auto ids = tokens(20, m.arch.vocab_size);
  PatchMetric lm;
  lm.kind = PatchMetric::Kind::Loss;
  for (int t = 10; t < 19; t++) lm.loss_positions.push_back(t), lm.targets.push_back(ids[size_t(t) + 1]);
  const PathResult r = path_patch(m, ids, ids, {0, 1, 1, 0, 'k'}, PatchDirection::Noising, lm);
  EXPECT_EQ(r.metric, r.clean);
  EXPECT_EQ(r.delta_norm, 0.0);
  SweepOptions o;
  o.hook = "attn.hook_pattern";
  o.metric = lm;
  o.per_position = true;
  const SweepResult s = patch_sweep(m, ids, ids, o);
  for (double v : s.metric) EXPECT_EQ(v, s.clean);
  EXPECT_EQ(s.T_run, 19);
  EXPECT_EQ(s.sites_skipped, 8 * 1);  // positions 19 and after: one per layer × head
}

TEST(Patching, ErrorsNameTheProblem) {
  const Model m = load_lm(std::string(QKV_SOURCE_DIR) + "/models/induction");
  const auto ids = tokens(8, m.arch.vocab_size);
  auto shorter = ids;
  shorter.pop_back();
  SweepOptions o;
  o.hook = "attn.hook_v";
  o.metric.answer = 1, o.metric.wrong = 2;
  try {
    patch_sweep(m, ids, shorter, o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Usage);
    EXPECT_NE(std::string(e.what()).find("equal length"), std::string::npos) << e.what();
  }
  o.hook = "attn.hook_nope";
  EXPECT_THROW(patch_sweep(m, ids, ids, o), Error);
  o.hook = "blocks.7.attn.hook_v";
  EXPECT_THROW(patch_sweep(m, ids, ids, o), Error);
  EXPECT_THROW(path_patch(m, ids, ids, {1, 0, 0, 0, 'k'}, PatchDirection::Noising, o.metric),
               Error);  // sender after receiver
  EXPECT_THROW(path_patch(m, ids, ids, {0, 0, 1, 9, 'k'}, PatchDirection::Noising, o.metric), Error);
  EXPECT_THROW(attribute(m, ids, -1, 2), Error);
  EXPECT_THROW(attribute(m, ids, 1, 2, 8), Error);
}

}  // namespace
}  // namespace qkv::analysis
