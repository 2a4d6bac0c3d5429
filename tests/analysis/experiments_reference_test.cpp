// qkv's experiments against numbers computed independently with numpy (tests/reference/
// check_experiments.py, full [d, d] and [V, V] products, numpy eigvals, TransformerLens-style masks) on
// the committed fixture models, loaded as any model is (load_lm). The C++ side runs the fp32 forward, so
// tolerances are ~1e-4 relative.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "qkv/analysis/ablate.hpp"
#include "qkv/analysis/circuits.hpp"
#include "qkv/analysis/head_detector.hpp"
#include "qkv/analysis/projections.hpp"
#include "qkv/analysis/scores.hpp"
#include "qkv/analysis/swap.hpp"
#include "qkv/lm.hpp"

namespace qkv::analysis {
namespace {

const std::string kFixtures = std::string(QKV_SOURCE_DIR) + "/tests/reference/fixtures/";

struct Case {
  std::string name;
  Model model;
  nlohmann::json ref;
};

// The fixtures, and the bundled trained model (whose reference numbers must be regenerated when it is).
std::string model_dir(const std::string& name) {
  return name == "induction" ? std::string(QKV_SOURCE_DIR) + "/models/induction" : kFixtures + name;
}

std::string fnv1a64(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  uint64_t h = 0xcbf29ce484222325ull;
  char buf[1 << 16];
  while (f.read(buf, sizeof buf) || f.gcount() > 0) {
    for (std::streamsize i = 0; i < f.gcount(); i++) h = (h ^ uint8_t(buf[i])) * 0x100000001b3ull;
    if (!f) break;
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

const Case& fixture(const std::string& name) {
  static std::map<std::string, Case> cache;
  auto it = cache.find(name);
  if (it == cache.end()) {
    Case c{name, load_lm(model_dir(name)), {}};
    std::ifstream f(kFixtures + "experiments/" + name + ".json");
    EXPECT_TRUE(f.good()) << "run /usr/bin/python3 tests/reference/check_experiments.py";
    c.ref = nlohmann::json::parse(f);
    // The numbers are for one checkpoint: a retrained model without regenerated numbers fails here, clearly.
    EXPECT_EQ(c.ref.value("model_fnv1a64", ""), fnv1a64(model_dir(name) + "/model.safetensors"))
        << name << ": the reference numbers were computed from another checkpoint; run "
        << "/usr/bin/python3 tests/reference/check_experiments.py";
    it = cache.emplace(name, std::move(c)).first;
  }
  return it->second;
}

std::vector<int> ints(const nlohmann::json& j) { return j.get<std::vector<int>>(); }

// |got − want| ≤ rel·|want| + abs
void near(double got, const nlohmann::json& want, double rel, double abs, const std::string& what) {
  const double w = want.get<double>();
  EXPECT_NEAR(got, w, rel * std::abs(w) + abs) << what;
}

class Reference : public ::testing::TestWithParam<std::string> {};

TEST_P(Reference, Project) {
  const Case& c = fixture(GetParam());
  const auto ids = ints(c.ref["tokens"]);
  for (int l = 0; l < c.model.arch.n_layer; l++) {
    const ProjectionResult r = project(c.model, ids, l);
    const auto& want = c.ref["project"][size_t(l)];
    const ProjectionPart* parts[3] = {&r.q, &r.k, &r.v};
    const char* names[3] = {"q", "k", "v"};
    for (int i = 0; i < 3; i++) {
      const std::string at = GetParam() + " layer " + std::to_string(l) + " " + names[i];
      near(parts[i]->ln_trap_rel, want[names[i]]["ln_trap_rel"], 1e-4, 1e-6, at + " ln trap");
      near(parts[i]->bias_trap_rel, want[names[i]]["bias_trap_rel"], 1e-4, 1e-6, at + " bias trap");
      EXPECT_LT(parts[i]->max_abs_diff, 1e-5 * std::max(1.0, parts[i]->max_abs)) << at;
    }
    EXPECT_LT(r.heads_max_abs_diff, 1e-4);
    EXPECT_LT(r.ln_max_abs_diff, 1e-5);
  }
}

TEST_P(Reference, Scores) {
  const Case& c = fixture(GetParam());
  const auto ids = ints(c.ref["tokens"]);
  for (const auto& want : c.ref["scores"]) {
    const int l = want["layer"], h = want["head"];
    const std::string at = GetParam() + " " + std::to_string(l) + "." + std::to_string(h);
    const ScoresResult r = score_asymmetry(c.model, ids, l, h);
    near(r.asym_rel, want["asym_rel"], 1e-4, 1e-6, at + " asym_rel");
    near(r.max_asym, want["max_asym"], 1e-4, 1e-5, at + " max_asym");
    EXPECT_EQ(r.max_i, want["max_i"].get<int>()) << at;
    EXPECT_EQ(r.max_j, want["max_j"].get<int>()) << at;
    near(r.M.norm, want["M_norm"], 1e-10, 0, at + " ‖M‖");  // from the same fp32 weights: double exact
    near(r.M.antisym_share, want["antisym_share"], 1e-9, 0, at + " antisym share");
    for (const char* k : {"share_xx", "share_xb", "share_bx", "share_bb", "bias_share", "bias_share_softmax"}) {
      const double got = std::string(k) == "share_xx"   ? r.share_xx
                         : std::string(k) == "share_xb" ? r.share_xb
                         : std::string(k) == "share_bx" ? r.share_bx
                         : std::string(k) == "share_bb" ? r.share_bb
                         : std::string(k) == "bias_share" ? r.bias_share
                                                          : r.bias_share_softmax;
      near(got, want[k], 1e-4, 1e-6, at + " " + k);
    }
    EXPECT_LT(r.reconstruction_max_abs, 1e-4) << at;
  }
}

TEST_P(Reference, Swap) {
  const Case& c = fixture(GetParam());
  const auto ids = ints(c.ref["tokens"]);
  for (const auto& want : c.ref["swap"]) {
    const int l = want["layer"], h = want["head"];
    const std::string at = GetParam() + " " + std::to_string(l) + "." + std::to_string(h);
    const SwapResult r = swap_query_key(c.model, ids, l, h);
    EXPECT_LT(r.full_vs_ST_max_abs, 1e-12) << at;
    EXPECT_LT(r.S_vs_model_max_abs, 1e-4) << at;
    near(r.matrices_vs_S_rel, want["matrices_vs_S_rel"], 1e-4, 1e-6, at);
    near(r.matrices_vs_ST_rel, want["matrices_vs_ST_rel"], 1e-4, 1e-6, at);
    near(r.pattern_full_vs_AT_rel, want["pattern_full_vs_AT_rel"], 1e-4, 1e-6, at);
    near(r.pattern_full_vs_A_rel, want["pattern_full_vs_A_rel"], 1e-4, 1e-6, at);
    near(r.column_sum_max_dev, want["column_sum_max_dev"], 1e-4, 1e-6, at);
  }
}

TEST_P(Reference, Heads) {
  const Case& c = fixture(GetParam());
  std::vector<std::vector<int>> rep;
  for (const auto& s : c.ref["repeated"]) rep.push_back(ints(s));
  const HeadScan scan = scan_heads(c.model, rep, c.ref["n_repeat"], -1, ints(c.ref["tokens"]));
  ASSERT_EQ(scan.heads.size(), c.ref["heads"].size());
  for (const auto& want : c.ref["heads"]) {
    const int l = want["layer"], h = want["head"];
    const HeadScores& s = scan.heads[size_t(l) * c.model.arch.H + h];
    const std::string at = GetParam() + " " + std::to_string(l) + "." + std::to_string(h);
    near(s.previous_token, want["previous_token"], 1e-4, 1e-6, at + " previous");
    near(s.duplicate_token, want["duplicate_token"], 1e-4, 1e-6, at + " duplicate");
    near(s.induction, want["induction"], 1e-4, 1e-6, at + " induction");
    near(s.induction_detector, want["induction_detector"], 1e-4, 1e-6, at + " induction detector");
    near(s.induction_shifted, want["induction_shifted"], 1e-4, 1e-6, at + " induction shifted");
    near(s.text_previous_token, want["text_previous_token"], 1e-4, 1e-6, at + " text previous");
    near(s.text_duplicate_token, want["text_duplicate_token"], 1e-4, 1e-6, at + " text duplicate");
    near(s.text_induction, want["text_induction"], 1e-4, 1e-6, at + " text induction");
  }
}

TEST_P(Reference, Circuits) {
  const Case& c = fixture(GetParam());
  const CircuitsResult r = circuits(c.model);
  ASSERT_EQ(r.heads.size(), c.ref["circuits"].size());
  for (size_t i = 0; i < r.heads.size(); i++) {
    const auto& want = c.ref["circuits"][i];
    const HeadCircuit& got = r.heads[i];
    ASSERT_EQ(got.layer, want["layer"].get<int>());
    ASSERT_EQ(got.head, want["head"].get<int>());
    const std::string at = GetParam() + " " + std::to_string(got.layer) + "." + std::to_string(got.head);
    near(got.qk_norm, want["qk_norm"], 1e-10, 0, at + " ‖QK‖");
    near(got.ov_norm, want["ov_norm"], 1e-10, 0, at + " ‖OV‖");
    // numpy's eigvals of the whole [V, V] matrix (with ~V spurious near-zero eigenvalues) vs ours of [dh, dh]
    near(got.copying, want["copying"], 1e-8, 1e-10, at + " copying");
  }
  ASSERT_EQ(r.compositions.size(), c.ref["composition"].size());
  for (size_t i = 0; i < r.compositions.size(); i++) {
    const auto& want = c.ref["composition"][i];
    const Composition& got = r.compositions[i];
    ASSERT_EQ(got.l1, want["src"][0].get<int>());
    ASSERT_EQ(got.h1, want["src"][1].get<int>());
    ASSERT_EQ(got.l2, want["dst"][0].get<int>());
    ASSERT_EQ(got.h2, want["dst"][1].get<int>());
    near(got.q, want["q"], 1e-10, 0, "q-comp");
    near(got.k, want["k"], 1e-10, 0, "k-comp");
    near(got.v, want["v"], 1e-10, 0, "v-comp");
  }
  // The random baseline sits near where the model's random-weight heads are, well below 1.
  EXPECT_GT(r.baseline.q_mean, 0.05);
  EXPECT_LT(r.baseline.q_mean, 0.6);
}

TEST_P(Reference, Ablate) {
  const Case& c = fixture(GetParam());
  std::vector<std::vector<int>> rep;
  for (const auto& s : c.ref["repeated"]) rep.push_back(ints(s));
  for (const auto& want : c.ref["ablate"]) {
    const int l = want["layer"], h = want["head"];
    const std::string at = GetParam() + " " + std::to_string(l) + "." + std::to_string(h);
    const AblationResult r = ablate_head(c.model, rep, c.ref["n_repeat"], -1, l, h);
    near(r.loss_intact, want["intact"], 1e-5, 1e-6, at + " intact");
    near(r.loss_qk, want["qk"], 1e-5, 1e-6, at + " QK ablated");
    near(r.loss_ov, want["ov"], 1e-5, 1e-6, at + " OV ablated");
    EXPECT_EQ(r.ov_pattern_max_abs_diff, 0.0) << at;   // zeroing values cannot move the pattern
    EXPECT_GT(r.qk_pattern_max_abs_diff, 0.01) << at;  // a uniform pattern is not the head's
    EXPECT_EQ(r.intact_vs_model_max_abs, 0.0) << at;   // hooks that edit nothing change no bit
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Reference, ::testing::Values("tiny", "tiny_attn_only"));
INSTANTIATE_TEST_SUITE_P(Bundled, Reference, ::testing::Values("induction"));

}  // namespace
}  // namespace qkv::analysis
