// Batched generation (generate.hpp's generate_batch): prompts of different lengths, left-padded and decoded
// together with per-sequence K/V caches, give token for token what generate() gives for each prompt alone,
// greedy and sampled (per-sequence seeds), on every family; stop ids per sequence; hooks and steering see
// arrays with a leading B axis; bad batches are usage errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "qkv/arch.hpp"
#include "qkv/error.hpp"
#include "qkv/generate.hpp"
#include "qkv/lm.hpp"
#include "generate_fixture.hpp"

namespace fs = std::filesystem;

namespace qkv {
namespace {

using gentest::unsteered;

Model tiny(const std::string& type, uint64_t seed = 21) { return gentest::tiny(type, seed, "bgen"); }

// Prompts of lengths 7, 2, 5 and 1 (so three of the four are padded in the prefill), different ids.
std::vector<std::vector<int>> prompts_for(const Model& m) {
  std::vector<std::vector<int>> p;
  int k = 0;
  for (int n : {7, 2, 5, 1}) {
    std::vector<int> ids;
    for (int i = 0; i < n; i++) ids.push_back((k++ * 131 + 7) % m.arch.vocab_size);
    p.push_back(ids);
  }
  return p;
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

TEST(GenerateBatch, GreedyEqualsEachPromptAloneOnEveryFamily) {
  for (const std::string& type : supported_model_types()) {
    SCOPED_TRACE(type);
    const Model m = tiny(type);
    const auto prompts = prompts_for(m);
    GenerateOptions o;
    o.max_new_tokens = 24;
    const BatchGenerateResult r = generate_batch(m, prompts, o);
    ASSERT_EQ(r.seqs.size(), prompts.size());
    EXPECT_EQ(r.steps, 23);
    std::set<std::vector<int>> distinct;
    for (size_t b = 0; b < prompts.size(); b++) {
      const GenerateResult alone = generate(m, prompts[b], o);
      EXPECT_EQ(r.seqs[b].tokens, alone.tokens) << "sequence " << b;
      EXPECT_EQ(r.seqs[b].stop_reason, "max_new_tokens");
      distinct.insert(r.seqs[b].tokens);
    }
    EXPECT_EQ(distinct.size(), prompts.size()) << "the sequences must differ for the comparison to mean much";
    EXPECT_GT(r.tokens_per_second(), 0);
  }
}

TEST(GenerateBatch, SampledWithPerSequenceSeedsEqualsEachPromptAlone) {
  for (const std::string& type : {std::string("llama"), std::string("gpt2"), std::string("gemma2"),
                                  std::string("phi3")}) {
    SCOPED_TRACE(type);
    const Model m = tiny(type);
    const auto prompts = prompts_for(m);
    GenerateOptions o;
    o.max_new_tokens = 20;
    o.sampling = {1.5, 40, 0.95, 0};
    const std::vector<uint64_t> seeds = {5, 6, 5, 11};
    const BatchGenerateResult r = generate_batch(m, prompts, o, seeds);
    for (size_t b = 0; b < prompts.size(); b++) {
      GenerateOptions one = o;
      one.sampling.seed = seeds[b];
      EXPECT_EQ(r.seqs[b].tokens, generate(m, prompts[b], one).tokens) << "sequence " << b;
    }
    // one seed for all: each as generated alone with that seed
    o.sampling.seed = 9;
    const BatchGenerateResult same = generate_batch(m, prompts, o);
    EXPECT_EQ(same.seqs[3].tokens, generate(m, prompts[3], o).tokens);
    EXPECT_NE(same.seqs[3].tokens, r.seqs[3].tokens) << "the seed changed nothing";
  }
}

TEST(GenerateBatch, EachSequenceStopsOnItsOwn) {
  const Model m = tiny("qwen2");
  const auto prompts = prompts_for(m);
  GenerateOptions o;
  o.max_new_tokens = 16;
  const std::vector<int> first = generate(m, prompts[0], o).tokens;
  o.stop_ids = {first[3]};
  const BatchGenerateResult r = generate_batch(m, prompts, o);
  bool any_stopped = false, any_ran = false;
  for (size_t b = 0; b < prompts.size(); b++) {
    const GenerateResult alone = generate(m, prompts[b], o);
    EXPECT_EQ(r.seqs[b].tokens, alone.tokens) << "sequence " << b;
    EXPECT_EQ(r.seqs[b].stop_reason, alone.stop_reason) << "sequence " << b;
    any_stopped = any_stopped || alone.stop_reason == "stop_id";
    any_ran = any_ran || alone.stop_reason == "max_new_tokens";
  }
  EXPECT_TRUE(any_stopped && any_ran) << "want one sequence stopped early and one running on";
  // the callback stops sequence 1 after 2 tokens, the others run on
  o.stop_ids.clear();
  int n = 0;
  const BatchGenerateResult c = generate_batch(m, prompts, o, {}, [&n](int b, int) { return b != 1 || ++n < 2; });
  EXPECT_EQ(c.seqs[1].tokens.size(), 2u);
  EXPECT_EQ(c.seqs[1].stop_reason, "callback");
  EXPECT_EQ(c.seqs[0].tokens.size(), 16u);
}

TEST(GenerateBatch, HooksAndSteeringSeeALeadingBatchAxis) {
  const Model m = tiny("mistral");
  const auto prompts = prompts_for(m);
  const int64_t B = int64_t(prompts.size()), H = m.arch.H, d = m.arch.d;
  std::vector<std::vector<int64_t>> pattern, resid;
  Hooks h;
  h.wants = [](const std::string& n) { return n == "blocks.0.attn.hook_pattern" || n == "blocks.1.hook_resid_pre"; };
  h.fn = [&](const std::string& n, ActView v) {
    (n == "blocks.1.hook_resid_pre" ? resid : pattern).push_back(v.shape);
    if (n == "blocks.0.attn.hook_pattern" && v.shape[2] == 1)  // a step: each row sums to 1, padding keys 0
      for (int64_t b = 0; b < B; b++) {
        const int64_t Tk = v.shape[3], padding = 7 - int64_t(prompts[size_t(b)].size());
        double sum = 0;
        for (int64_t j = 0; j < Tk; j++) {
          const float p = v.data[(b * H + 0) * Tk + j];
          sum += p;
          if (j < padding) {
            EXPECT_EQ(p, 0.0f) << "sequence " << b << " sees padding key " << j;
          }
        }
        EXPECT_NEAR(sum, 1.0, 1e-5);
      }
  };
  GenerateOptions o;
  o.max_new_tokens = 3;
  o.hooks = &h;
  generate_batch(m, prompts, o);
  EXPECT_EQ(pattern, (std::vector<std::vector<int64_t>>{{B, H, 7, 7}, {B, H, 1, 8}, {B, H, 1, 9}}));
  EXPECT_EQ(resid, (std::vector<std::vector<int64_t>>{{B, 7, d}, {B, 1, d}, {B, 1, d}}));
  // steering in a batch = steering each prompt alone
  Steer s{"blocks.1.hook_resid_pre", std::vector<float>(size_t(d)), 3.0f, "v"};
  for (int j = 0; j < d; j++) s.vec[size_t(j)] = float(std::sin(0.7 * j + 1));
  GenerateOptions st;
  st.max_new_tokens = 12;
  st.steer = {s};
  const BatchGenerateResult r = generate_batch(m, prompts, st);
  for (size_t b = 0; b < prompts.size(); b++) EXPECT_EQ(r.seqs[b].tokens, generate(m, prompts[b], st).tokens);
  EXPECT_NE(r.seqs[0].tokens, generate(m, prompts[0], unsteered(12)).tokens) << "the steering changed nothing";
}

TEST(GenerateBatch, BadBatchesAreUsageErrors) {
  const Model m = tiny("gpt2");
  auto prompts = prompts_for(m);
  GenerateOptions o;
  o.max_new_tokens = m.arch.n_ctx - 6;  // the longest prompt (7) does not fit
  EXPECT_EQ(kind_of([&] { generate_batch(m, prompts, o); }), ErrorKind::Usage);
  o.max_new_tokens = m.arch.n_ctx - 7;  // fits exactly
  EXPECT_NO_THROW(generate_batch(m, prompts, o));
  o.max_new_tokens = 2;
  EXPECT_EQ(kind_of([&] { generate_batch(m, {}, o); }), ErrorKind::Usage) << "no prompts";
  EXPECT_EQ(kind_of([&] { generate_batch(m, {{1, 2}, {}}, o); }), ErrorKind::Usage) << "an empty prompt";
  EXPECT_EQ(kind_of([&] { generate_batch(m, prompts, o, {1, 2}); }), ErrorKind::Usage) << "2 seeds for 4";
  EXPECT_EQ(kind_of([&] { generate_batch(m, {{1, m.arch.vocab_size}}, o); }), ErrorKind::Usage) << "id outside";
  // unpad_batch: the real runs of a padded [B, T]
  const std::vector<int> ids = {9, 9, 1, 2, 3, 4, 9, 9};
  EXPECT_EQ(unpad_batch(ids, 2, {0, 0, 1, 1, 1, 1, 0, 0}), (std::vector<std::vector<int>>{{1, 2}, {3, 4}}));
  EXPECT_EQ(unpad_batch(ids, 2, {}), (std::vector<std::vector<int>>{{9, 9, 1, 2}, {3, 4, 9, 9}}));
  EXPECT_EQ(kind_of([&] { unpad_batch(ids, 2, {1, 1, 1}); }), ErrorKind::Usage) << "mask of the wrong size";
  EXPECT_EQ(kind_of([&] { unpad_batch(ids, 2, {1, 1, 1, 1, 0, 0, 0, 0}); }), ErrorKind::Usage) << "an all-padding row";
  EXPECT_EQ(kind_of([&] { unpad_batch(ids, 2, {1, 0, 1, 1, 1, 1, 1, 1}); }), ErrorKind::Usage) << "a hole";
  EXPECT_EQ(kind_of([&] { unpad_batch(ids, 3, {}); }), ErrorKind::Usage) << "8 ids in 3 rows";
  try {
    unpad_batch(ids, 2, {1, 1, 1, 1, 0, 0, 0, 0});
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("attention_mask: sequence 1 has no real token"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace qkv
