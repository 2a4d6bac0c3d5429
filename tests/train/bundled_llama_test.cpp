// The second bundled model (models/induction-llama, issue 15): the induction preset on a Llama-shaped
// model — rotary, RMSNorm, SwiGLU, 2 key/value heads for 4 query heads, bytes — loaded the ordinary way
// (load_lm, as `qkv run/tour --model` do) and measured on held-out sequences the training never drew,
// with the head detector's definitions (train_lm.hpp: lm_scan_heads) on the family forward.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "qkv/io/safetensors.hpp"
#include "qkv/model_files.hpp"
#include "qkv/train/train_lm.hpp"

namespace qkv {
namespace {

const std::string kDir = std::string(QKV_SOURCE_DIR) + "/models/induction-llama";

struct BundledLlama {
  nlohmann::json config;
  Model model;
  LmParams params;
  std::vector<analysis::HeadScores> heads;
  BundledLlama() {
    std::ifstream f(kDir + "/config.json");
    config = nlohmann::json::parse(f);
    model = load_lm(kDir);
    params = lm_params_from(model, config);
    const int n = 50;
    heads = lm_scan_heads(params, analysis::repeated_random_tokens(256, n, 16, 987654321), n);
  }
  const analysis::HeadScores& best(int layer, double analysis::HeadScores::*score) const {
    const analysis::HeadScores* b = nullptr;
    for (const auto& h : heads)
      if (h.layer == layer && (!b || h.*score > b->*score)) b = &h;
    return *b;
  }
};

const BundledLlama& bundled() {
  static const BundledLlama b;
  return b;
}

TEST(BundledLlama, IsAnHfLlamaWithGqaRotaryAndRmsNorm) {
  const Arch& a = bundled().model.arch;
  EXPECT_EQ(bundled().config.at("model_type"), "llama");
  EXPECT_EQ(a.model_type, "llama");
  EXPECT_EQ(a.n_layer, 2);
  EXPECT_EQ(a.H, 4);
  EXPECT_EQ(a.n_kv, 2);
  EXPECT_TRUE(a.rotary());
  EXPECT_EQ(a.norm, NormKind::RMSNorm);
  EXPECT_EQ(a.vocab_size, 256);
  const auto tok = tokenizer_for_model(kDir);
  ASSERT_TRUE(tok.has_value()) << "no tokenizer files beside the model";
  EXPECT_EQ(tok->encode("ab"), (std::vector<int>{tok->encode("a")[0], tok->encode("b")[0]}))
      << "a byte vocabulary";
}

TEST(BundledLlama, HasAPreviousTokenHeadInLayerZero) {
  const auto& h = bundled().best(0, &analysis::HeadScores::previous_token);
  std::printf("previous-token head 0.%d: %.3f\n", h.head, h.previous_token);
  EXPECT_GE(h.previous_token, 0.8) << "best layer-0 head " << h.head;
}

TEST(BundledLlama, HasAnInductionHeadInLayerOne) {
  const auto& h = bundled().best(1, &analysis::HeadScores::induction);
  for (const auto& x : bundled().heads)
    if (x.layer == 1)
      std::printf("head 1.%d: induction %.3f (shifted %.3f)\n", x.head, x.induction, x.induction_shifted);
  EXPECT_GE(h.induction, 0.8) << "best layer-1 head " << h.head;
  EXPECT_LT(h.induction_shifted, 0.1) << "head 1." << h.head << " also attends one token further on";
}

TEST(BundledLlama, CopiesInContext) {
  const InContextLoss l = lm_in_context_loss(bundled().params, 50, 32, 424242);
  std::printf("in-context loss: first half %.3f, repeated half %.3f nats\n", l.first_half, l.repeated_half);
  EXPECT_LE(l.repeated_half, 0.3);
  EXPECT_GE(l.first_half, 2.0);
}

TEST(BundledLlama, TheFamilyForwardAndTheTrainingForwardAgreeOnIt) {
  const std::vector<int> ids = analysis::repeated_random_tokens(256, 40, 1, 7)[0];
  RunState st;
  const std::vector<float> want = run(bundled().model, ids, st);
  LmActs<float> acts;
  const std::vector<float>& got =
      lm_train_forward(bundled().params.layout, bundled().params.params.data(), ids, acts);
  ASSERT_EQ(got.size(), want.size());
  double err = 0;
  for (size_t i = 0; i < got.size(); i++) err = std::max(err, double(std::abs(got[i] - want[i])));
  EXPECT_LE(err, 1e-3);
}

TEST(BundledLlama, RecordsTheSettingsItWasMadeWith) {
  const auto file = io::SafetensorsFile::open(kDir + "/model.safetensors");
  ASSERT_TRUE(file.metadata().count("qkv_train"));
  const std::string meta = file.metadata().at("qkv_train");
  EXPECT_NE(meta.find("\"preset\":\"induction\""), std::string::npos) << meta;
  EXPECT_NE(meta.find("\"arch\":\"llama\""), std::string::npos) << meta;
  EXPECT_NE(meta.find("\"threads_used\":"), std::string::npos) << meta;
}

}  // namespace
}  // namespace qkv
