// The bundled model (models/induction) holds what issue 5 promises, measured on held-out sequences the
// training never drew (their own seeds): a previous-token head in layer 0, an induction head in layer 1,
// K-composition from the first into the second the largest into that head, and copying in context.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>

#include "qkv/analysis/circuits.hpp"
#include "qkv/analysis/head_detector.hpp"
#include "qkv/io/safetensors.hpp"
#include "qkv/lm.hpp"
#include "qkv/train/train_lm.hpp"

namespace qkv {
namespace {

const std::string kBundled = std::string(QKV_SOURCE_DIR) + "/models/induction";

struct Bundled {
  Model model = load_lm(kBundled);
  analysis::HeadScan scan;
  Bundled() {
    const int n = 50;
    scan = analysis::scan_heads(model, analysis::repeated_random_tokens(model.arch.vocab_size, n, 16, 987654321), n,
                                -1, {});
  }
  const analysis::HeadScores& best(int layer, double analysis::HeadScores::*score) const {
    const analysis::HeadScores* b = nullptr;
    for (const auto& h : scan.heads)
      if (h.layer == layer && (!b || h.*score > b->*score)) b = &h;
    return *b;
  }
};

const Bundled& bundled() {
  static const Bundled b;
  return b;
}

TEST(BundledModel, IsTheTwoLayerAttentionOnlyPreset) {
  const Arch& a = bundled().model.arch;
  EXPECT_EQ(a.model_type, "gpt2");
  EXPECT_EQ(a.n_layer, 2);
  EXPECT_TRUE(a.attn_only());
  EXPECT_EQ(a.vocab_size, 256);
}

TEST(BundledModel, HasAPreviousTokenHeadInLayerZero) {
  const auto& h = bundled().best(0, &analysis::HeadScores::previous_token);
  EXPECT_GE(h.previous_token, 0.8) << "best layer-0 head " << h.head;
}

// Mean attention on the key `back` tokens before each query, over held-out sequences.
double offset_score(const Model& m, const std::vector<std::vector<int>>& seqs, int layer, int head, int back) {
  double sum = 0;
  int rows = 0;
  const std::string hook = "blocks." + std::to_string(layer) + ".attn.hook_pattern";
  for (const auto& ids : seqs) {
    const auto cache = run_with_cache(m, ids, [&](const std::string& n) { return n == hook; });
    const int T = int(ids.size());
    const float* A = cache.at(hook).data() + size_t(head) * T * T;
    for (int i = back; i < T; i++, rows++) sum += A[size_t(i) * T + (i - back)];
  }
  return sum / rows;
}

// The seeds' two-head circuit: an induction head in layer 1 (row i of the repeat attends to i − n + 1,
// the token after the earlier copy of the current one), whose keys are built by a previous-token head
// in layer 0 — the largest K-composition into it, well above random factors of the same shapes. And
// not the shifted circuit earlier recipes grew (attending to i − n + 2 by matching the previous token).
TEST(BundledModel, LayerOneHasAnInductionHeadKComposedWithAPreviousTokenHead) {
  const Bundled& b = bundled();
  const auto& ind = b.best(1, &analysis::HeadScores::induction);
  EXPECT_GE(ind.induction, 0.8) << "best layer-1 head " << ind.head;
  EXPECT_LT(ind.induction_shifted, 0.1) << "head 1." << ind.head << " also attends one token further on";
  const analysis::CircuitsResult r = analysis::circuits(b.model);
  const analysis::Composition* top_k = nullptr;
  for (const auto& c : r.compositions)
    if (c.l2 == 1 && c.h2 == ind.head && (!top_k || c.k > top_k->k)) top_k = &c;
  ASSERT_TRUE(top_k);
  EXPECT_EQ(top_k->h1, b.best(0, &analysis::HeadScores::previous_token).head)
      << "the largest K-composition into 1." << ind.head << " comes from 0." << top_k->h1
      << ", not the best previous-token head";
  const auto seqs = analysis::repeated_random_tokens(b.model.arch.vocab_size, 50, 4, 55);
  EXPECT_GE(offset_score(b.model, seqs, 0, top_k->h1, 1), 0.8) << "K-composition source 0." << top_k->h1;
  EXPECT_GT(top_k->k, r.baseline.k_mean + 3 * r.baseline.k_std);
}

TEST(BundledModel, RecordsTheSettingsItWasMadeWith) {
  // The preset is deterministic for a thread count (Train.DeterministicForAFixedSeedAndThreadCount); the
  // checkpoint records the settings that remake it.
  const auto file = io::SafetensorsFile::open(kBundled + "/model.safetensors");
  ASSERT_TRUE(file.metadata().count("qkv_train"));
  const std::string meta = file.metadata().at("qkv_train");
  EXPECT_NE(meta.find("\"preset\":\"induction\""), std::string::npos) << meta;
  EXPECT_NE(meta.find("\"mix\":\"probe=2,copies=0,skip=1,periodic=0,recall=2\""), std::string::npos) << meta;
  EXPECT_NE(meta.find("\"steps\":4000"), std::string::npos) << meta;
  EXPECT_NE(meta.find("\"threads_used\":"), std::string::npos) << "the thread count that reproduces it: " << meta;
}

TEST(BundledModel, CopiesInContext) {
  const Model& m = bundled().model;
  std::ifstream config(kBundled + "/config.json");
  const LmParams p = lm_params_from(m, nlohmann::json::parse(config));
  const InContextLoss l = lm_in_context_loss(p, 50, 32, 424242);
  EXPECT_LE(l.repeated_half, 0.3);
  EXPECT_GE(l.first_half, 2.0);
}

}  // namespace
}  // namespace qkv
