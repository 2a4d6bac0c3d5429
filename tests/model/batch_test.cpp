// Batches (RunOptions::batch, attention_mask): on every family, each sequence's real positions of a padded
// batch — left or right — equal its own single-sequence run at every hook point, the batch's hooks lead
// with B, and bad masks are usage errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "qkv/error.hpp"
#include "qkv/lm.hpp"

namespace fs = std::filesystem;

namespace qkv {
namespace {

// One row of `hook`'s batch array (leading B) against the single run's array, over the real span [s, e):
// rows t of [B, T, …] arrays; the [s, e) × [s, e) block of [B, H, T, T] ones. Returns max |diff| / max |single|.
double compare(const std::string& hook, const Tensor& batch, const Tensor& single, int b, int s, int e) {
  const bool square = hook.find("hook_pattern") != std::string::npos || hook.find("hook_attn_scores") != std::string::npos;
  const std::vector<int64_t>& bs = batch.shape();
  double err = 0, scale = 0;
  if (square) {
    const int64_t H = bs[1], T = bs[2], n = e - s;
    for (int64_t h = 0; h < H; h++)
      for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++) {
          const float x = batch[((b * H + h) * T + s + i) * T + s + j], y = single[(h * n + i) * n + j];
          if (std::isinf(y)) {
            EXPECT_EQ(x, y) << hook << ": masked stays -inf";
            continue;
          }
          err = std::max(err, double(std::abs(x - y)));
          scale = std::max(scale, double(std::abs(y)));
        }
  } else {
    const int64_t T = bs[1], row = batch.numel() / (bs[0] * T);
    for (int64_t i = 0; i < int64_t(e - s) * row; i++) {
      const float x = batch[(b * T + s) * row + i], y = single[i];
      err = std::max(err, double(std::abs(x - y)));
      scale = std::max(scale, double(std::abs(y)));
    }
  }
  return scale > 0 ? err / scale : err;
}

std::string tiny(const std::string& type) {
  nlohmann::json cfg = default_config(type, "tiny");
  cfg["initializer_range"] = 0.2;
  const std::string dir = (fs::temp_directory_path() / ("qkv_batch_" + type + "_" + std::to_string(::getpid()))).string();
  write_random_checkpoint(dir, cfg, WeightType::F32, 1, 5);
  return dir;
}

TEST(Batch, PaddedSequencesEqualTheirOwnRunsOnEveryFamily) {
  for (const std::string& type : supported_model_types()) {
    SCOPED_TRACE(type);
    const std::string dir = tiny(type);
    const Model m = load_lm(dir);
    const int V = m.arch.vocab_size;
    // three sequences of 19, 12 and 7 real tokens; windows and soft-caps of the tiny presets bite at 19
    std::vector<std::vector<int>> seqs;
    for (int n : {19, 12, 7}) {
      std::vector<int> s;
      for (int i = 0; i < n; i++) s.push_back((i * 131 + 7 * n) % V);
      seqs.push_back(s);
    }
    const int B = 3, T = 19;
    for (bool left : {false, true}) {
      SCOPED_TRACE(left ? "left padding" : "right padding");
      std::vector<int> ids(size_t(B) * T, 0);
      std::vector<uint8_t> mask(ids.size(), 0);
      std::vector<std::pair<int, int>> span;
      for (int b = 0; b < B; b++) {
        const int n = int(seqs[size_t(b)].size()), s = left ? T - n : 0;
        span.push_back({s, s + n});
        for (int i = 0; i < n; i++) ids[size_t(b) * T + s + i] = seqs[size_t(b)][size_t(i)], mask[size_t(b) * T + s + i] = 1;
      }
      const auto batch = run_with_cache_batch(m, ids, B, mask);
      double worst = 0;
      for (int b = 0; b < B; b++) {
        const auto single = run_with_cache(m, seqs[size_t(b)]);
        ASSERT_EQ(single.size(), batch.size());
        for (const auto& [name, t] : single) {
          const Tensor& bt = batch.at(name);
          ASSERT_EQ(bt.shape()[0], B) << name;
          worst = std::max(worst, compare(name, bt, t, b, span[size_t(b)].first, span[size_t(b)].second));
        }
      }
      EXPECT_LE(worst, 1e-5);
      std::printf("  %-9s %-5s padding: worst %.2e of the largest magnitude\n", type.c_str(), left ? "left" : "right", worst);
    }
    fs::remove_all(dir);
  }
}

// Without padding the batch is the single runs stacked, and its hooks lead with B in TransformerLens's layouts.
TEST(Batch, UnpaddedBatchShapesAndValues) {
  const std::string dir = tiny("llama");
  const Model m = load_lm(dir);
  const int B = 2, T = 10;
  std::vector<int> ids;
  for (int i = 0; i < B * T; i++) ids.push_back((i * 37 + 3) % m.arch.vocab_size);
  const auto batch = run_with_cache_batch(m, ids, B, {});
  const int H = m.arch.H, K = m.arch.n_kv, dh = m.arch.dh, d = m.arch.d;
  EXPECT_EQ(batch.at("blocks.0.attn.hook_q").shape(), (std::vector<int64_t>{B, T, H, dh}));
  EXPECT_EQ(batch.at("blocks.0.attn.hook_k").shape(), (std::vector<int64_t>{B, T, K, dh}));
  EXPECT_EQ(batch.at("blocks.1.attn.hook_pattern").shape(), (std::vector<int64_t>{B, H, T, T}));
  EXPECT_EQ(batch.at("blocks.1.hook_resid_post").shape(), (std::vector<int64_t>{B, T, d}));
  EXPECT_EQ(batch.at("logits").shape(), (std::vector<int64_t>{B, T, m.arch.vocab_size}));
  for (int b = 0; b < B; b++) {
    const auto one = run_with_cache(m, std::vector<int>(ids.begin() + b * T, ids.begin() + (b + 1) * T));
    for (const auto& [name, t] : one) EXPECT_LE(compare(name, batch.at(name), t, b, 0, T), 1e-5) << name;
  }
  // the fused path (nothing asks for a pattern) agrees with its single runs too
  RunState st;
  RunOptions o;
  o.batch = B;
  const std::vector<float> logits = run(m, ids, st, o);
  for (int b = 0; b < B; b++) {
    RunState s1;
    const std::vector<float> one = run(m, std::vector<int>(ids.begin() + b * T, ids.begin() + (b + 1) * T), s1);
    for (size_t i = 0; i < one.size(); i++) EXPECT_NEAR(logits[b * one.size() + i], one[i], 1e-5);
  }
  fs::remove_all(dir);
}

TEST(Batch, BadMasksAreUsageErrors) {
  const std::string dir = tiny("gpt2");
  const Model m = load_lm(dir);
  const std::vector<int> ids(12, 1);
  RunState st;
  RunOptions o;
  o.batch = 2;
  const std::vector<uint8_t> holes = {1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, empty_row = {0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1},
                             short_mask = {1, 1, 1};
  for (const auto* mask : {&holes, &empty_row, &short_mask}) {
    o.attention_mask = mask;
    try {
      run(m, ids, st, o);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.exit_code(), 2);
      EXPECT_NE(std::string(e.what()).find("attention_mask"), std::string::npos) << e.what();
    }
  }
  o.attention_mask = nullptr;
  o.batch = 5;  // 12 ids do not split into 5 sequences
  EXPECT_THROW(run(m, ids, st, o), Error);
  o.batch = 2;
  KvCache cache;
  o.cache = &cache;  // a batch with a cache pads on the left only (what follows the padding is generated)
  const std::vector<uint8_t> right = {1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1};
  o.attention_mask = &right;
  EXPECT_THROW(run(m, ids, st, o), Error);
  EXPECT_EQ(cache.len, 0);
  o.attention_mask = nullptr;
  run(m, ids, st, o);
  o.batch = 3;  // the cache holds 2 sequences now
  EXPECT_THROW(run(m, std::vector<int>(3, 1), st, o), Error);
  o.batch = 2;
  o.cache = nullptr;
  o.batch = 0;
  o.attention_mask = &holes;
  EXPECT_THROW(run(m, ids, st, o), Error);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace qkv
