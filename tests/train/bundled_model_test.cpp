// The bundled model (models/induction) holds what issue 5 promises, measured on held-out sequences the
// training never drew (their own seeds): a previous-token head in layer 0, an induction head in layer 1,
// K-composition from the first into the second the largest into that head, and copying in context.
#include <gtest/gtest.h>

#include <algorithm>

#include "qkv/analysis/circuits.hpp"
#include "qkv/analysis/head_detector.hpp"
#include "qkv/io/safetensors.hpp"
#include "qkv/train/train.hpp"

namespace qkv {
namespace {

const std::string kBundled = std::string(QKV_SOURCE_DIR) + "/models/induction";

struct Bundled {
  GPT2 model = load_model(kBundled);
  analysis::HeadScan scan;
  Bundled() {
    const int n = 50;
    scan = analysis::scan_heads(model, analysis::repeated_random_tokens(model.config.vocab_size, n, 16, 987654321), n,
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
  const GPT2Config& c = bundled().model.config;
  EXPECT_EQ(c.n_layer, 2);
  EXPECT_TRUE(c.attn_only);
  EXPECT_EQ(c.vocab_size, 256);
}

TEST(BundledModel, HasAPreviousTokenHeadInLayerZero) {
  const auto& h = bundled().best(0, &analysis::HeadScores::previous_token);
  EXPECT_GE(h.previous_token, 0.8) << "best layer-0 head " << h.head;
}

// What the bundled model does instead of the seed's induction head — measured, so that a retrained
// model that changes it fails here and its README and issue note get rewritten. Its layer-1 heads copy
// the repeated half (CopiesInContext) but attend ONE TOKEN FURTHER than an induction head: row i of
// the repeat looks at i − n + 2, not i − n + 1. They find it by matching the PREVIOUS token (read at
// the query from a previous-token head: Q-composition) against a layer-0 head that attends three back
// (at the key: K-composition), and copy the next token from what a previous-token head wrote at the
// position they attend to. Issue 5's target (an induction head ≥ 0.8) is not met by this model.
double offset_score(const GPT2& m, const std::vector<std::vector<int>>& seqs, int layer, int head, int back) {
  double sum = 0;
  int rows = 0;
  Activations a;
  for (const auto& ids : seqs) {
    forward(m, ids, a);
    const int T = int(ids.size());
    const float* A = a.attn[size_t(layer)].A.data() + size_t(head) * T * T;
    for (int i = back; i < T; i++, rows++) sum += A[size_t(i) * T + (i - back)];
  }
  return sum / rows;
}

TEST(BundledModel, LayerOneCopiesOneTokenFurtherOnThanAnInductionHead) {
  const Bundled& b = bundled();
  const auto& shifted = b.best(1, &analysis::HeadScores::induction_shifted);
  const auto& ind = b.best(1, &analysis::HeadScores::induction);
  EXPECT_GE(shifted.induction_shifted, 0.8) << "best layer-1 head " << shifted.head;
  EXPECT_LT(ind.induction, 0.1) << "layer 1 now has an induction head (" << ind.head
                                << "): issue 5's target may be met; update this test and models/induction/README.md";
  // Its query side composes with a previous-token head, its key side with a three-back head.
  const analysis::CircuitsResult r = analysis::circuits(b.model);
  const analysis::Composition *top_q = nullptr, *top_k = nullptr;
  for (const auto& c : r.compositions) {
    if (c.l2 != 1 || c.h2 != shifted.head) continue;
    if (!top_q || c.q > top_q->q) top_q = &c;
    if (!top_k || c.k > top_k->k) top_k = &c;
  }
  ASSERT_TRUE(top_q && top_k);
  const auto seqs = analysis::repeated_random_tokens(b.model.config.vocab_size, 50, 4, 55);
  EXPECT_GE(offset_score(b.model, seqs, 0, top_q->h1, 1), 0.8) << "Q-composition source 0." << top_q->h1;
  EXPECT_GE(offset_score(b.model, seqs, 0, top_k->h1, 3), 0.8) << "K-composition source 0." << top_k->h1;
  EXPECT_GT(top_q->q, r.baseline.q_mean + 3 * r.baseline.q_std);
  EXPECT_GT(top_k->k, r.baseline.k_mean + 3 * r.baseline.k_std);
}

TEST(BundledModel, RecordsTheSettingsItWasMadeWith) {
  // The preset is deterministic for a thread count (Train.DeterministicForAFixedSeedAndThreadCount); the
  // checkpoint records the settings that remake it.
  const auto file = io::SafetensorsFile::open(kBundled + "/model.safetensors");
  ASSERT_TRUE(file.metadata().count("qkv_train"));
  const std::string meta = file.metadata().at("qkv_train");
  EXPECT_NE(meta.find("\"preset\":\"induction\""), std::string::npos) << meta;
  EXPECT_NE(meta.find("\"mix\":\"probe=0,copies=0,skip=1,periodic=1\""), std::string::npos) << meta;
  EXPECT_NE(meta.find("\"steps\":4000"), std::string::npos) << meta;
}

TEST(BundledModel, CopiesInContext) {
  const InContextLoss l = in_context_loss(bundled().model, 50, 32, 424242);
  EXPECT_LE(l.repeated_half, 0.3);
  EXPECT_GE(l.first_half, 2.0);
}

}  // namespace
}  // namespace qkv
