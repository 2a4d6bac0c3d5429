// The optimiser, schedule and loop: small enough to run in seconds, strict enough to fail.
#include <gtest/gtest.h>

#include <cmath>

#include "qkv/train/train.hpp"

namespace qkv {
namespace {

GPT2Config small_config(bool attn_only) {
  GPT2Config c;
  c.vocab_size = 256;
  c.n_positions = 64;
  c.n_embd = 32;
  c.n_layer = 2;
  c.n_head = 4;
  c.attn_only = attn_only;
  return c;
}

TEST(AdamW, OneStepMatchesTheFormulaWithAndWithoutDecay) {
  GPT2 m(small_config(true));
  for (size_t i = 0; i < m.params.size(); i++) m.params[i] = 0.5f;
  TrainSettings s;
  s.weight_decay = 0.1;
  AdamW opt(m, s);
  std::vector<float> g(m.params.size(), 0.25f);
  opt.step(m, g, 0.01);
  // First step: m̂ = g, v̂ = g², update = g/(|g| + ε) ≈ 1; decayed params also lose lr·λ·θ.
  const double plain = 0.5 - 0.01 * (0.25 / (0.25 + 1e-8));
  const double decayed = plain - 0.01 * 0.1 * 0.5;
  EXPECT_NEAR(m.param("h.0.ln_1.weight")[0], plain, 1e-7);           // LayerNorm: no decay
  EXPECT_NEAR(m.param("h.0.attn.c_attn.bias")[0], plain, 1e-7);      // bias: no decay
  EXPECT_NEAR(m.param("h.0.attn.c_attn.weight")[0], decayed, 1e-7);  // matrix: decay
  EXPECT_NEAR(m.param("wte.weight")[0], decayed, 1e-7);
  EXPECT_EQ(opt.steps_taken(), 1);
}

TEST(Schedule, WarmupThenCosineToTheFloor) {
  TrainSettings s;
  s.lr = 1e-3;
  s.warmup = 10;
  s.steps = 110;
  s.min_lr_ratio = 0.1;
  EXPECT_NEAR(learning_rate(s, 0), 1e-4, 1e-12);
  EXPECT_NEAR(learning_rate(s, 9), 1e-3, 1e-12);
  EXPECT_NEAR(learning_rate(s, 10), 1e-3, 1e-12);
  EXPECT_NEAR(learning_rate(s, 60), 0.55e-3, 1e-9);  // halfway: midpoint of lr and floor
  EXPECT_NEAR(learning_rate(s, 110), 1e-4, 1e-12);
}

TEST(Clip, ScalesToTheBoundAndReportsTheNormBefore) {
  std::vector<float> g = {3, 4};
  EXPECT_NEAR(clip_grad_norm(g, 1.0), 5.0, 1e-12);
  EXPECT_NEAR(g[0], 0.6, 1e-7);
  EXPECT_NEAR(g[1], 0.8, 1e-7);
  std::vector<float> h = {0.3f, 0.4f};
  clip_grad_norm(h, 1.0);
  EXPECT_EQ(h[0], 0.3f);
}

// A reduced training run: a periodic text is learnable in a few dozen steps; the loss must fall from
// the uniform ln 256 ≈ 5.5 to below 1.5 nats.
TEST(Train, LossFallsOnALearnableTextWithinSeconds) {
  std::vector<int> tokens;
  const std::string text = "the cat sat on the mat. ";
  for (int r = 0; r < 200; r++)
    for (char c : text) tokens.push_back(static_cast<unsigned char>(c));
  GPT2 m(small_config(false));
  init_gpt2(m, 1);
  TrainSettings s;
  s.steps = 120;
  s.batch = 8;
  s.warmup = 10;
  s.lr = 3e-3;
  s.threads = 2;
  const auto h = train(m, text_data(tokens, 32), s, 0, nullptr);
  EXPECT_GT(h.front().loss, 5.0);
  EXPECT_LT(h.back().loss, 1.5) << "loss fell only to " << h.back().loss;
}

TEST(Train, DeterministicForAFixedSeedAndThreadCount) {
  auto run = [](int threads) {
    GPT2 m(small_config(true));
    init_gpt2(m, 7);
    TrainSettings s;
    s.steps = 5;
    s.batch = 6;
    s.seed = 3;
    s.threads = threads;
    train(m, induction_data(256, 32), s, 0, nullptr);
    return m.params;
  };
  EXPECT_EQ(run(2), run(2));
  EXPECT_EQ(run(1), run(1));
}

TEST(Data, InductionSequencesRepeatAndTargetsAreOnlyThePredictableNextTokens) {
  auto data = induction_data(50, 40);
  std::mt19937_64 rng(5);
  int repeated = 0;
  for (int i = 0; i < 50; i++) {
    const Sample s = data(rng);
    ASSERT_EQ(s.ids.size(), 40u);
    int predictable = 0;
    for (size_t t = 0; t + 1 < s.ids.size(); t++) {
      if (s.targets[t] < 0) continue;
      EXPECT_EQ(s.targets[t], s.ids[t + 1]);
      predictable++;
    }
    EXPECT_GT(predictable, 0);
    EXPECT_LT(predictable, 39) << "random filler must carry no loss";
    EXPECT_EQ(s.targets.back(), -1);
    for (int id : s.ids) EXPECT_TRUE(id >= 0 && id < 50);
    // Some 3-gram occurs twice (a copied segment: copies are at least 3 tokens).
    bool found = false;
    for (size_t a = 0; a + 3 <= s.ids.size() && !found; a++)
      for (size_t b = a + 1; b + 3 <= s.ids.size() && !found; b++)
        found = std::equal(s.ids.begin() + long(a), s.ids.begin() + long(a) + 3, s.ids.begin() + long(b));
    repeated += found;
  }
  EXPECT_GE(repeated, 25) << repeated;  // all but the skip-bigram chains (3 in 8) hold a copied 3-gram: ~31 of 50
}

}  // namespace
}  // namespace qkv
