// The optimiser, schedule and loop: small enough to run in seconds, strict enough to fail.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include <cmath>

#include "qkv/error.hpp"
#include <algorithm>
#include <nlohmann/json.hpp>

#include "qkv/train/train_lm.hpp"

namespace qkv {
namespace {

// A small GPT-2 config.json for the family trainer.
nlohmann::json small_config(bool attn_only, int d = 32) {
  return {{"model_type", "gpt2"}, {"vocab_size", 256}, {"n_positions", 64}, {"n_ctx", 64}, {"n_embd", d},
          {"n_layer", 2},         {"n_head", 4},        {"qkv_attn_only", attn_only}};
}

TEST(AdamW, OneStepMatchesTheFormulaWithAndWithoutDecay) {
  LmParams m = init_lm(small_config(true), 0);
  std::fill(m.params.begin(), m.params.end(), 0.5f);
  TrainSettings s;
  s.weight_decay = 0.1;
  AdamW opt(lm_decay_mask(m.layout), s);
  std::vector<float> g(m.params.size(), 0.25f);
  opt.step(m.params.data(), g, 0.01);
  // First step: m̂ = g, v̂ = g², update = g/(|g| + ε) ≈ 1; decayed params also lose lr·λ·θ.
  const double plain = 0.5 - 0.01 * (0.25 / (0.25 + 1e-8));
  const double decayed = plain - 0.01 * 0.1 * 0.5;
  EXPECT_NEAR(m.at("h.0.ln_1.weight")[0], plain, 1e-7);           // LayerNorm: no decay
  EXPECT_NEAR(m.at("h.0.attn.c_attn.bias")[0], plain, 1e-7);      // bias: no decay
  EXPECT_NEAR(m.at("wpe.weight")[0], plain, 1e-7);                // learned positions: no decay
  EXPECT_NEAR(m.at("h.0.attn.c_attn.weight")[0], decayed, 1e-7);  // matrix: decay
  EXPECT_NEAR(m.at("wte.weight")[0], decayed, 1e-7);
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
  LmParams m = init_lm(small_config(false), 1);
  TrainSettings s;
  s.steps = 120;
  s.batch = 8;
  s.warmup = 10;
  s.lr = 3e-3;
  s.threads = 2;
  const auto h = train_lm(m, text_data(tokens, 32), s, 0, nullptr);
  EXPECT_GT(h.front().loss, 5.0);
  EXPECT_LT(h.back().loss, 1.5) << "loss fell only to " << h.back().loss;
}

// The induction preset reduced (d 64, sequences of 64, batch 8, 500 steps: ~5 s on one thread) on the
// bundled model's data mix: the loss must fall by at least 0.5 nats from the uniform ln 256 ≈ 5.55 (it
// reached 4.7 at 400 steps when measured). The full recipe's circuit is checked by BundledModel.* and
// by tests/train/retrain_bundled.sh.
TEST(Train, ReducedInductionPresetLossFalls) {
  LmParams m = init_lm(small_config(true, 64), 0, {.sinusoidal_positions = true});
  TrainSettings s;
  s.steps = 500;
  s.batch = 8;
  s.lr = 3e-3;
  s.weight_decay = 0.01;
  s.threads = 1;
  const auto h = train_lm(m, induction_data(256, 64), s, 0, nullptr);
  auto mean = [&](size_t from, size_t to) {
    double sum = 0;
    for (size_t i = from; i < to; i++) sum += h[i].loss;
    return sum / double(to - from);
  };
  const double first = mean(0, 10), last = mean(h.size() - 50, h.size());
  EXPECT_GT(first, 5.4);
  EXPECT_LT(last, first - 0.5) << "loss fell from " << first << " to " << last;
}

TEST(Train, DeterministicForAFixedSeedAndThreadCount) {
  auto run = [](int threads) {
    LmParams m = init_lm(small_config(true), 7);
    TrainSettings s;
    s.steps = 5;
    s.batch = 6;
    s.seed = 3;
    s.threads = threads;
    train_lm(m, induction_data(256, 32), s, 0, nullptr);
    return m.params;
  };
  EXPECT_EQ(run(2), run(2));
  EXPECT_EQ(run(1), run(1));
}

// Every kind: targets are the next token where set, never at the last position, and some positions
// carry no loss (random filler / the first period).
void check_targets(const Sample& s, int T, int vocab) {
  ASSERT_EQ(s.ids.size(), size_t(T));
  ASSERT_EQ(s.targets.size(), size_t(T));
  for (size_t t = 0; t + 1 < s.ids.size(); t++)
    if (s.targets[t] >= 0) {
      EXPECT_EQ(s.targets[t], s.ids[t + 1]);
    }
  EXPECT_EQ(s.targets.back(), -1);
  for (int id : s.ids) EXPECT_TRUE(id >= 0 && id < vocab);
}

TEST(Data, PeriodicSequencesRepeatTheirFirstPeriodAndScoreEveryLaterToken) {
  auto data = induction_data(50, 40, parse_induction_mix("periodic=1"));
  std::mt19937_64 rng(5);
  std::set<int> periods;
  for (int i = 0; i < 50; i++) {
    const Sample s = data(rng);
    check_targets(s, 40, 50);
    int n = 0;  // the first scored position is the period
    while (s.targets[size_t(n)] < 0) n++;
    periods.insert(n);
    EXPECT_GE(n, 3);
    EXPECT_LE(n, 20);
    for (int t = n; t < 40; t++) EXPECT_EQ(s.ids[size_t(t)], s.ids[size_t(t - n)]);
    for (int t = n; t + 1 < 40; t++) EXPECT_GE(s.targets[size_t(t)], 0);
  }
  EXPECT_GE(periods.size(), 8u) << "the period must vary, or position alone would find the repeat";
}

TEST(Data, SkipChainsScoreOnlyWhereThePreviousTokenIsNew) {
  auto data = induction_data(256, 64, parse_induction_mix("skip=1"));
  std::mt19937_64 rng(9);
  std::map<int, int> g;  // learned from the samples: x[t+1] = g(x[t-1]) wherever scored
  int scored = 0;
  for (int i = 0; i < 40; i++) {
    const Sample s = data(rng);
    check_targets(s, 64, 256);
    for (int t = 1; t + 1 < 64; t++) {
      if (s.targets[size_t(t)] < 0) continue;
      scored++;
      const int prev = s.ids[size_t(t) - 1];
      for (int j = 0; j + 1 < t; j++) EXPECT_NE(s.ids[size_t(j)], prev) << "a replayed previous token is scored";
      auto [it, fresh] = g.emplace(prev, s.ids[size_t(t) + 1]);
      if (!fresh) {
        EXPECT_EQ(it->second, s.ids[size_t(t) + 1]) << "g is not one function";
      }
    }
  }
  EXPECT_GT(scored, 40 * 20);
}

TEST(Data, CopiedSegmentsRecurAndMixWeightsParse) {
  auto data = induction_data(50, 40, parse_induction_mix("copies=1"));
  std::mt19937_64 rng(5);
  int repeated = 0;
  for (int i = 0; i < 50; i++) {
    const Sample s = data(rng);
    check_targets(s, 40, 50);
    bool found = false;  // some 3-gram occurs twice (copies are at least 3 tokens)
    for (size_t a = 0; a + 3 <= s.ids.size() && !found; a++)
      for (size_t b = a + 1; b + 3 <= s.ids.size() && !found; b++)
        found = std::equal(s.ids.begin() + long(a), s.ids.begin() + long(a) + 3, s.ids.begin() + long(b));
    repeated += found;
  }
  EXPECT_GE(repeated, 45) << repeated;
  EXPECT_EQ(to_string(parse_induction_mix("skip=2,periodic=1")), "probe=0,copies=0,skip=2,periodic=1,recall=0");
  for (const char* bad : {"", "skip", "skip=-1", "skip=x", "bogus=1", "skip=0", "skip=1,periodic=2000"})
    EXPECT_THROW(parse_induction_mix(bad), Error) << bad;
}

TEST(Data, RecallRewardsMatchingTheCurrentTokenNotThePreviousOne) {
  auto data = induction_data(256, 128, parse_induction_mix("recall=1"));
  std::mt19937_64 rng(3);
  std::map<int, int> h;  // the global bigram, learned from the samples
  int recalled = 0, bigram = 0, shifted_right = 0;
  for (int i = 0; i < 200; i++) {
    const Sample s = data(rng);
    check_targets(s, 128, 256);
    for (int t = 1; t + 1 < 128; t++) {
      if (s.targets[size_t(t)] < 0) continue;
      // Induction: the token occurred before, and every earlier occurrence was followed by the target.
      int earlier = 0, followed = 0;
      for (int j = 0; j < t; j++)
        if (s.ids[size_t(j)] == s.ids[size_t(t)]) earlier++, followed += s.ids[size_t(j) + 1] == s.targets[size_t(t)];
      if (earlier > 0 && followed == earlier) {
        recalled++;
        // The shifted circuit: the last earlier occurrence m of the PREVIOUS token predicts x[m+2].
        for (int m = t - 2; m >= 0; m--)
          if (s.ids[size_t(m)] == s.ids[size_t(t) - 1]) {
            shifted_right += s.ids[size_t(m) + 2] == s.targets[size_t(t)];
            break;
          }
      } else {
        bigram++;  // otherwise the global bigram: one function of the current token across all samples
        auto [it, fresh] = h.emplace(s.ids[size_t(t)], s.targets[size_t(t)]);
        if (!fresh) {
          EXPECT_EQ(it->second, s.targets[size_t(t)]) << "a scored step neither recalls nor follows one bigram";
        }
      }
    }
  }
  EXPECT_GT(recalled, 200 * 15);
  EXPECT_GT(bigram, 200 * 15);
  EXPECT_LT(shifted_right, recalled / 5) << "matching the previous token predicts too many targets";
}

}  // namespace
}  // namespace qkv
