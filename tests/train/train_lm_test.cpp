// Training a family model (train_lm.hpp): the loop learns, is deterministic for a seed and thread count,
// the preset's config is the family's own, and the shared-embedding init adds one vector to every row.
#include "qkv/train/train_lm.hpp"

#include <gtest/gtest.h>

namespace qkv {
namespace {

nlohmann::json small_llama() {
  nlohmann::json c = induction_family_config("llama");
  c["hidden_size"] = 32, c["intermediate_size"] = 32, c["max_position_embeddings"] = 64;
  return c;
}

TEST(TrainLm, InductionPresetConfigIsTheFamilysOwn) {
  const Arch a = arch_from_config(induction_family_config("llama"), "test");
  EXPECT_EQ(a.model_type, "llama");
  EXPECT_EQ(a.vocab_size, 256);
  EXPECT_EQ(a.d, 128);
  EXPECT_EQ(a.n_layer, 2);
  EXPECT_EQ(a.H, 4);
  EXPECT_EQ(a.n_kv, 2);
  EXPECT_EQ(a.dh, 32);
  EXPECT_TRUE(a.rotary());
  EXPECT_EQ(a.norm, NormKind::RMSNorm);
  EXPECT_EQ(a.mlp, MlpKind::SwiGLU);
  for (const std::string& t : supported_model_types()) {
    SCOPED_TRACE(t);
    const Arch f = arch_from_config(induction_family_config(t), t);
    EXPECT_EQ(f.vocab_size, 256);
    EXPECT_EQ(f.n_layer, 2);
    EXPECT_EQ(f.window_of(0), 0);
  }
}

TEST(TrainLm, SharedEmbeddingInitAddsOneVectorToEveryRow) {
  LmParams a = init_lm(small_llama(), 4), b = a;
  shared_embedding_init(b, 1.0, 4);
  const int d = a.arch().d;
  const float* ea = a.params.data() + a.layout.wte;
  const float* eb = b.params.data() + b.layout.wte;
  double norm = 0;
  for (int j = 0; j < d; j++) {
    const float c = eb[j] - ea[j];
    norm += double(c) * c;
    for (int v = 1; v < a.arch().vocab_size; v++) EXPECT_NEAR(eb[v * d + j] - ea[v * d + j], c, 1e-8);
  }
  EXPECT_GT(norm, 0.0);
}

TEST(TrainLm, ReducedLlamaInductionLossFalls) {
  LmParams p = init_lm(small_llama(), 0);
  shared_embedding_init(p, 1.0, 0);
  TrainSettings s;
  s.steps = 150;
  s.batch = 8;
  s.lr = 3e-3;
  s.weight_decay = 0.01;
  s.threads = 1;
  const auto h = train_lm(p, induction_data(256, 48), s, 0, nullptr);
  auto mean = [&](size_t from, size_t to) {
    double sum = 0;
    for (size_t i = from; i < to; i++) sum += h[i].loss;
    return sum / double(to - from);
  };
  const double first = mean(0, 10), last = mean(h.size() - 20, h.size());
  EXPECT_GT(first, 5.4);
  EXPECT_LT(last, first - 0.5) << "loss fell from " << first << " to " << last;
}

TEST(TrainLm, DeterministicForAFixedSeedAndThreadCount) {
  auto run = [](int threads) {
    LmParams p = init_lm(small_llama(), 7);
    TrainSettings s;
    s.steps = 4;
    s.batch = 6;
    s.seed = 3;
    s.threads = threads;
    train_lm(p, induction_data(256, 32), s, 0, nullptr);
    return p.params;
  };
  EXPECT_EQ(run(2), run(2));
  EXPECT_EQ(run(1), run(1));
}

}  // namespace
}  // namespace qkv
