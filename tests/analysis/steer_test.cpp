// steering_vector (analysis/steer.hpp) against the definition computed here from run_with_cache: each
// text's mean over its positions (from `from` on), the mean over texts, positive minus negative.
#include "qkv/analysis/steer.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "qkv/error.hpp"
#include "qkv/lm.hpp"
#include "qkv/arch.hpp"

namespace fs = std::filesystem;

namespace qkv::analysis {
namespace {

Model tiny(const std::string& type) {
  nlohmann::json cfg = default_config(type, "tiny");
  const std::string dir =
      (fs::temp_directory_path() / ("qkv_steer_" + type + "_" + std::to_string(::getpid()))).string();
  write_random_checkpoint(dir, cfg, WeightType::F32, 1, 5);
  Model m = load_lm(dir);
  fs::remove_all(dir);
  return m;
}

// The definition, in double, from the activations run_with_cache copies out.
std::vector<double> by_definition(const Model& m, const std::string& hook, const std::vector<SteerText>& pos,
                                  const std::vector<SteerText>& neg) {
  auto side = [&](const std::vector<SteerText>& texts) {
    std::vector<double> acc;
    for (const SteerText& t : texts) {
      const Tensor a = run_with_cache(m, t.ids, [&](const std::string& n) { return n == hook; }).at(hook);
      const int64_t T = a.shape()[0], w = a.numel() / T;
      acc.resize(size_t(w), 0.0);
      for (int64_t j = 0; j < w; j++) {
        double s = 0;
        for (int64_t p = t.from; p < T; p++) s += a.data()[p * w + j];
        acc[size_t(j)] += s / double(T - t.from) / double(texts.size());
      }
    }
    return acc;
  };
  std::vector<double> p = side(pos), n = side(neg);
  for (size_t j = 0; j < p.size(); j++) p[j] -= n[j];
  return p;
}

TEST(SteeringVector, IsTheMeanDifferenceOfPerTextPositionMeans) {
  for (const std::string& type : {std::string("llama"), std::string("gpt2"), std::string("phi3")}) {
    SCOPED_TRACE(type);
    const Model m = tiny(type);
    const std::vector<SteerText> pos = {{{1, 2, 3, 4, 5}, 1}, {{9, 8, 7}, 0}};
    const std::vector<SteerText> neg = {{{11, 12, 13, 14}, 0}, {{20, 21}, 0}, {{30, 31, 32, 33, 34, 35}, 2}};
    for (const std::string hook : {"blocks.1.hook_resid_pre", "blocks.0.attn.hook_z", "blocks.1.attn.hook_v",
                                   "ln_final.hook_normalized", "blocks.1.hook_resid_post"}) {
      SCOPED_TRACE(hook);
      const std::vector<float> v = steering_vector(m, hook, pos, neg);
      const std::vector<double> want = by_definition(m, hook, pos, neg);
      ASSERT_EQ(v.size(), want.size());
      double err = 0, scale = 0;
      for (size_t j = 0; j < v.size(); j++) {
        err = std::max(err, std::abs(double(v[j]) - want[j]));
        scale = std::max(scale, std::abs(want[j]));
      }
      EXPECT_GT(scale, 1e-3);
      EXPECT_LE(err, 1e-5 * scale);
    }
    // leaving the first position out changes the vector (so `from` is honoured)
    const std::vector<float> a =
        steering_vector(m, "blocks.1.hook_resid_pre", {{{1, 2, 3}, 0}}, {{{4, 5}, 0}});
    const std::vector<float> b =
        steering_vector(m, "blocks.1.hook_resid_pre", {{{1, 2, 3}, 1}}, {{{4, 5}, 0}});
    EXPECT_NE(a, b);
  }
}

TEST(SteeringVector, BadInputIsAUsageError) {
  const Model m = tiny("qwen2");
  const std::vector<SteerText> one = {{{1, 2}, 0}};
  auto usage = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return e.kind() == ErrorKind::Usage;
    }
    return false;
  };
  EXPECT_TRUE(usage([&] { steering_vector(m, "blocks.0.hook_resid_pre", {}, one); }));
  EXPECT_TRUE(usage([&] { steering_vector(m, "blocks.0.hook_resid_pre", one, {}); }));
  EXPECT_TRUE(usage([&] { steering_vector(m, "blocks.7.hook_resid_pre", one, one); }));
  EXPECT_TRUE(usage([&] { steering_vector(m, "blocks.0.attn.hook_pattern", one, one); }));
  EXPECT_TRUE(usage([&] { steering_vector(m, "blocks.0.hook_resid_pre", {{{1, 2}, 2}}, one); }));
  EXPECT_TRUE(usage([&] { steering_vector(m, "blocks.0.hook_resid_pre", {{{1, 99999}, 0}}, one); }));
}

}  // namespace
}  // namespace qkv::analysis
