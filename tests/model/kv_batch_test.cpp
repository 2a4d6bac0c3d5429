// run() with a batch and a K/V cache (kv_batch.cpp): a left-padded prefill of prompts of different lengths,
// then steps of one token per sequence, gives each sequence's logits as its own cached run gives them
// (to rounding), on every family; every later run must be all real.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "qkv/arch.hpp"
#include "qkv/error.hpp"
#include "qkv/lm.hpp"
#include "model/family_cases.hpp"

namespace qkv {
namespace {

TEST(KvBatch, BatchedCachedStepsEqualEachSequencesOwnCachedRun) {
  for (const std::string& type : supported_model_types()) {
    SCOPED_TRACE(type);
    const Model m = family_cases::random_tiny(type, "kvb", 3);
    const int V = m.arch.vocab_size, B = 3, T = 6;
    const std::vector<int> lens = {6, 2, 4};
    std::vector<int> ids(size_t(B) * T, 0);
    std::vector<uint8_t> mask(size_t(B) * T, 0);
    for (int b = 0; b < B; b++)
      for (int t = T - lens[size_t(b)]; t < T; t++) {
        ids[size_t(b) * T + t] = (b * 53 + t * 17 + 5) % V;
        mask[size_t(b) * T + t] = 1;
      }
    KvCache bc;
    RunState bs;
    RunOptions bo;
    bo.batch = B;
    bo.cache = &bc;
    bo.last_only = true;
    bo.attention_mask = &mask;
    std::vector<std::vector<float>> got = {run(m, ids, bs, bo)};
    bo.attention_mask = nullptr;
    for (int step = 0; step < 3; step++) got.push_back(run(m, {(step * 7 + 1) % V, (step * 11 + 2) % V, 3 % V}, bs, bo));
    EXPECT_EQ(bc.len, T + 3);
    for (int b = 0; b < B; b++) {
      KvCache c;
      RunState s;
      RunOptions o;
      o.cache = &c;
      o.last_only = true;
      const std::vector<int> prompt(ids.begin() + b * T + (T - lens[size_t(b)]), ids.begin() + (b + 1) * T);
      std::vector<std::vector<float>> want = {run(m, prompt, s, o)};
      for (int step = 0; step < 3; step++)
        want.push_back(run(m, {std::vector<int>{(step * 7 + 1) % V, (step * 11 + 2) % V, 3 % V}[size_t(b)]}, s, o));
      for (size_t r = 0; r < want.size(); r++) {
        float worst = 0, big = 0;
        for (int v = 0; v < V; v++) {
          worst = std::max(worst, std::abs(got[r][size_t(b) * V + v] - want[r][size_t(v)]));
          big = std::max(big, std::abs(want[r][size_t(v)]));
        }
        EXPECT_LE(worst, 2e-5f * big) << "sequence " << b << " run " << r;
      }
    }
    // padding after a real token, with a cache: refused, the cache unchanged
    std::vector<uint8_t> late(size_t(B), 1);
    late[1] = 0;
    bo.attention_mask = &late;
    EXPECT_THROW(run(m, {1, 1, 1}, bs, bo), Error);
    EXPECT_EQ(bc.len, T + 3);
  }
}

}  // namespace
}  // namespace qkv
