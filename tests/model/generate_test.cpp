// Generation (generate.hpp): greedy through the K/V cache = greedy over full forwards, token for token,
// on every family; sampling reproducible by seed and the same with or without the cache; the sampling
// rule's distribution; steering = adding the vector by hand in a hook; hooks at every step; errors.
#include "qkv/generate.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "qkv/error.hpp"
#include "qkv/lm.hpp"
#include "generate_fixture.hpp"
#include "qkv/arch.hpp"

namespace fs = std::filesystem;

namespace qkv {
namespace {

using gentest::unsteered;

Model tiny(const std::string& type, uint64_t seed = 21) { return gentest::tiny(type, seed, "gen"); }

std::vector<int> prompt_for(const Model& m, int n) {
  std::vector<int> ids;
  for (int i = 0; i < n; i++) ids.push_back((i * 131 + 7) % m.arch.vocab_size);
  return ids;
}

// The satisfying thing about an argmax comparison is that one flipped token changes every later one.
TEST(Generate, GreedyWithTheCacheEqualsGreedyOverFullForwardsOnEveryFamily) {
  const std::vector<std::string> types = supported_model_types();
  EXPECT_EQ(types.size(), 9u);
  for (const std::string& type : types) {
    SCOPED_TRACE(type);
    const Model m = tiny(type);
    const std::vector<int> prompt = prompt_for(m, 7);
    GenerateOptions o;
    o.max_new_tokens = 40;
    const GenerateResult r = generate(m, prompt, o);
    const std::vector<int> slow = generate_uncached(m, prompt, 40, o.sampling);
    EXPECT_EQ(r.tokens, slow);
    EXPECT_EQ(r.stop_reason, "max_new_tokens");
    EXPECT_GE(std::set<int>(r.tokens.begin(), r.tokens.end()).size(), 3u)
        << "a degenerate continuation proves little";
    // Without the context (each new token run alone) the choice differs: the cache carries the context.
    std::vector<int> alone;
    int id = prompt.back();
    for (int i = 0; i < 40; i++) {
      RunState st;
      const std::vector<float>& l = run(m, {id}, st);
      id = int(std::max_element(l.begin(), l.end()) - l.begin());
      alone.push_back(id);
    }
    EXPECT_NE(alone, r.tokens);
  }
}

TEST(Generate, SamplingIsReproducibleBySeedAndTheSameWithoutTheCache) {
  for (const std::string& type : {std::string("llama"), std::string("gpt2"), std::string("gemma2")}) {
    SCOPED_TRACE(type);
    const Model m = tiny(type);
    const std::vector<int> prompt = prompt_for(m, 5);
    GenerateOptions o;
    o.max_new_tokens = 30;
    o.sampling = {1.0, 50, 0.95, 7};
    const GenerateResult a = generate(m, prompt, o), b = generate(m, prompt, o);
    EXPECT_EQ(a.tokens, b.tokens);
    EXPECT_EQ(a.tokens, generate_uncached(m, prompt, 30, o.sampling));
    o.sampling.seed = 8;
    EXPECT_NE(generate(m, prompt, o).tokens, a.tokens) << "another seed, other tokens";
  }
}

TEST(Generate, SampleNextFollowsTheStatedRule) {
  std::mt19937_64 rng(1);
  // greedy: the first of equal maxima, no draw taken
  const float tie[] = {0.5f, 2.0f, 2.0f, -1.0f};
  EXPECT_EQ(sample_next(tie, 4, {}, rng), 1);
  EXPECT_EQ(rng(), std::mt19937_64(1)()) << "greedy consumed randomness";
  // top_k = 1 at any temperature: the argmax; ties at the k-th value go to the lower id
  EXPECT_EQ(sample_next(tie, 4, {5.0, 1, 1.0, 0}, rng), 1);
  // p = 0.5, 0.3, 0.2: top_p 0.7 keeps the first two (0.5 < 0.7 <= 0.8), renormalised 5/8, 3/8
  const float z[] = {float(std::log(0.3)), float(std::log(0.5)), float(std::log(0.2))};
  const int n = 200000;
  auto freq = [&](Sampling s) {
    std::vector<double> c(3, 0);
    for (int i = 0; i < n; i++) c[size_t(sample_next(z, 3, s, rng))] += 1.0 / n;
    return c;
  };
  const auto all = freq({1.0, 0, 1.0, 0});
  EXPECT_NEAR(all[0], 0.3, 0.005);  // binomial sd ~0.001
  EXPECT_NEAR(all[1], 0.5, 0.005);
  EXPECT_NEAR(all[2], 0.2, 0.005);
  const auto nucleus = freq({1.0, 0, 0.7, 0});
  EXPECT_NEAR(nucleus[1], 5.0 / 8, 0.005);
  EXPECT_NEAR(nucleus[0], 3.0 / 8, 0.005);
  EXPECT_EQ(nucleus[2], 0.0);
  const auto k2 = freq({1.0, 2, 1.0, 0});
  EXPECT_EQ(k2[2], 0.0);
  EXPECT_NEAR(k2[1], 5.0 / 8, 0.005);
  // temperature 2: p ∝ p^(1/2)
  const auto hot = freq({2.0, 0, 1.0, 0});
  const double s = std::sqrt(0.3) + std::sqrt(0.5) + std::sqrt(0.2);
  EXPECT_NEAR(hot[1], std::sqrt(0.5) / s, 0.005);
}

// Steering adds coef × v at every position of every step: the same tokens as a hook that adds it by hand,
// and as full forwards with the vector added at every position; not the unsteered tokens.
TEST(Generate, SteeringEqualsAddingTheVectorByHand) {
  for (const std::string& type : {std::string("llama"), std::string("gpt_neox"), std::string("gpt2")}) {
    SCOPED_TRACE(type);
    const Model m = tiny(type);
    const std::vector<int> prompt = prompt_for(m, 6);
    const int d = m.arch.d;
    Steer s{"blocks.1.hook_resid_pre", std::vector<float>(size_t(d)), 3.0f, "v"};
    for (int j = 0; j < d; j++) s.vec[size_t(j)] = float(std::sin(0.7 * j + 1));
    GenerateOptions steered;
    steered.max_new_tokens = 24;
    steered.steer = {s};
    const GenerateResult a = generate(m, prompt, steered);
    Hooks by_hand;
    int calls = 0;
    by_hand.wants = [&](const std::string& n) { return n == s.hook; };
    by_hand.fn = [&](const std::string&, ActView v) {
      calls++;
      for (int64_t t = 0; t < v.shape[0]; t++)
        for (int j = 0; j < d; j++) v.data[t * d + j] += 3.0f * s.vec[size_t(j)];
    };
    GenerateOptions hand;
    hand.max_new_tokens = 24;
    hand.hooks = &by_hand;
    EXPECT_EQ(generate(m, prompt, hand).tokens, a.tokens);
    EXPECT_EQ(calls, 24) << "the prefill and 23 one-token steps";
    const Hooks sh = steering_hooks(m, {s}, nullptr);
    EXPECT_EQ(generate_uncached(m, prompt, 24, {}, &sh), a.tokens);
    EXPECT_NE(generate(m, prompt, unsteered(24)).tokens, a.tokens) << "the steering changed nothing";
    // one forward: bit for bit the hand-added one
    RunState s1, s2;
    RunOptions o1, o2;
    o1.hooks = &sh;
    o2.hooks = &by_hand;
    const std::vector<float> l1 = run(m, prompt, s1, o1), l2 = run(m, prompt, s2, o2);
    EXPECT_EQ(0, std::memcmp(l1.data(), l2.data(), l1.size() * sizeof(float)));
  }
}

TEST(Generate, HooksRunAtEveryStepOnThatStepsActivations) {
  const Model m = tiny("mistral");
  const std::vector<int> prompt = prompt_for(m, 5);
  std::vector<std::vector<int64_t>> shapes;
  Hooks h;
  h.wants = [](const std::string& n) { return n == "blocks.0.attn.hook_pattern"; };
  h.fn = [&](const std::string&, ActView v) { shapes.push_back(v.shape); };
  GenerateOptions o;
  o.max_new_tokens = 4;
  o.hooks = &h;
  generate(m, prompt, o);
  const int64_t H = m.arch.H;
  const std::vector<std::vector<int64_t>> want = {{H, 5, 5}, {H, 1, 6}, {H, 1, 7}, {H, 1, 8}};
  EXPECT_EQ(shapes, want);
}

TEST(Generate, StopIdsAndTheCallbackEndGeneration) {
  const Model m = tiny("qwen2");
  const std::vector<int> prompt = prompt_for(m, 4);
  GenerateOptions o;
  o.max_new_tokens = 20;
  const std::vector<int> all = generate(m, prompt, o).tokens;
  o.stop_ids = {all[5]};
  const GenerateResult r = generate(m, prompt, o);
  const size_t first = size_t(std::find(all.begin(), all.end(), all[5]) - all.begin());
  EXPECT_EQ(r.tokens, std::vector<int>(all.begin(), all.begin() + long(first) + 1));
  EXPECT_EQ(r.stop_reason, "stop_id");
  o.stop_ids.clear();
  int seen = 0;
  o.on_token = [&](int) { return ++seen < 3; };
  const GenerateResult c = generate(m, prompt, o);
  EXPECT_EQ(c.tokens.size(), 3u);
  EXPECT_EQ(c.stop_reason, "callback");
  EXPECT_GE(c.prefill_ms, 0);
  EXPECT_GT(c.tokens_per_second(), 0);
}

ErrorKind kind_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.kind();
  }
  ADD_FAILURE() << "no qkv::Error";
  return ErrorKind::Data;
}

TEST(Generate, BadInputIsAQkvError) {
  const Model m = tiny("gemma");
  const std::vector<int> prompt = prompt_for(m, 4);
  auto gen = [&](GenerateOptions o) { return [&m, &prompt, o] { generate(m, prompt, o); }; };
  GenerateOptions o;
  o.max_new_tokens = m.arch.n_ctx - 3;  // 4 + n_ctx - 3 > n_ctx
  EXPECT_EQ(kind_of(gen(o)), ErrorKind::Usage);
  o.max_new_tokens = m.arch.n_ctx - 4;  // fits exactly: no error
  EXPECT_NO_THROW(gen(o)());
  o.max_new_tokens = 0;
  EXPECT_EQ(kind_of(gen(o)), ErrorKind::Usage);
  o.max_new_tokens = 2;
  for (Sampling s : {Sampling{-1.0}, Sampling{NAN}, Sampling{INFINITY}, Sampling{1.0, -1},
                     Sampling{1.0, 0, 0.0}, Sampling{1.0, 0, 1.5}, Sampling{1.0, 0, NAN}}) {
    o.sampling = s;
    EXPECT_EQ(kind_of(gen(o)), ErrorKind::Usage) << s.temperature << " " << s.top_k << " " << s.top_p;
  }
  o.sampling = {};
  o.steer = {{"blocks.9.hook_resid_pre", std::vector<float>(size_t(m.arch.d)), 1.0f, "v.npy"}};
  EXPECT_EQ(kind_of(gen(o)), ErrorKind::Usage) << "unknown hook";
  o.steer = {{"blocks.0.attn.hook_pattern", std::vector<float>(8), 1.0f, "v.npy"}};
  EXPECT_EQ(kind_of(gen(o)), ErrorKind::Usage) << "not one row per position";
  o.steer = {{"blocks.0.hook_resid_post", std::vector<float>(size_t(m.arch.d) + 1), 1.0f, "v.npy"}};
  EXPECT_EQ(kind_of(gen(o)), ErrorKind::Data) << "wrong length";
  try {
    gen(o)();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("v.npy"), std::string::npos) << e.what();
  }
  o.steer = {{"blocks.0.attn.hook_z", std::vector<float>(size_t(m.arch.q_dim()), NAN), 1.0f, "v.npy"}};
  EXPECT_EQ(kind_of(gen(o)), ErrorKind::Data) << "not finite";
  o.steer.clear();
  EXPECT_EQ(kind_of([&] { generate(m, {m.arch.vocab_size}, GenerateOptions{}); }), ErrorKind::Usage)
      << "id outside";
  EXPECT_EQ(kind_of([&] { generate(m, {}, GenerateOptions{}); }), ErrorKind::Usage) << "empty prompt";
}

}  // namespace
}  // namespace qkv

namespace qkv {
namespace {

// weight_bytes_per_token: every f32 tensor of the checkpoint's table once, but the embeddings (one row
// each) — Llama's separate lm_head; GPT-2's tied wte read whole as the unembedding, wpe one row.
TEST(Generate, WeightBytesPerTokenCountsWhatAStepReads) {
  for (const std::string type : {"llama", "gpt2"}) {
    const Model m = tiny(type);
    int64_t all = 0;
    for (const TensorSpec& t : m.table) {
      int64_t n = 1;
      for (int64_t s : t.shape) n *= s;
      all += n;
    }
    const int64_t d = m.arch.d;
    const int64_t expected =
        type == "llama" ? all - int64_t(m.arch.vocab_size) * d + d : all - int64_t(m.arch.n_ctx) * d + d;
    EXPECT_EQ(weight_bytes_per_token(m), 4 * expected) << type;
  }
}

}  // namespace
}  // namespace qkv
