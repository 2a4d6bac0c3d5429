// Phi-3's longrope (Arch::rope_scaling.type == "longrope"): read from config.json as Hugging Face reads it,
// the short/long rule by the sequence's length, the attention factor, bad configs named, and the GGUF round
// trip (rope_factors_long/short, phi3.rope.scaling.*). The numbers themselves are checked elsewhere: the
// float64 PyTorch forward and autograd (fixtures phi3_longrope, phi3_longrope_short) and llama.cpp
// (tests/gguf/llama/check.mjs).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>

#include "io/io_test_util.hpp"
#include "qkv/arch.hpp"
#include "qkv/error.hpp"
#include "qkv/io/gguf_family.hpp"
#include "qkv/lm.hpp"
#include "qkv/model_files.hpp"

namespace fs = std::filesystem;

namespace qkv {
namespace {

using io::test::TempDir;

// The tiny Phi-3 (16-wide heads rotating 8 dims: 4 frequencies) extended from `original` to 64 positions.
nlohmann::json phi3_config(int original) {
  nlohmann::json cfg = default_config("phi3", "tiny");
  cfg["initializer_range"] = 0.2;
  cfg["rope_scaling"] = {{"type", "longrope"},
                         {"short_factor", {1.0, 1.25, 2.5, 4.0}},
                         {"long_factor", {1.5, 3.0, 9.0, 30.0}}};
  cfg["original_max_position_embeddings"] = original;
  cfg["max_position_embeddings"] = 64;
  return cfg;
}

Model make(const TempDir& tmp, const std::string& name, const nlohmann::json& cfg) {
  write_random_checkpoint(tmp.path(name), cfg, WeightType::F32, 1, 5);
  return load_lm(tmp.path(name));
}

std::vector<float> logits(const Model& m, int T) {
  std::vector<int> ids;
  for (int t = 0; t < T; ++t) ids.push_back((t * 37 + 11) % m.arch.vocab_size);
  RunState st;
  return run(m, ids, st);
}

void expect_error(const std::function<void()>& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing: " << part;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(Longrope, ShortFactorsUpToTheOriginalLengthLongOnesBeyond) {
  TempDir tmp;
  const Model m = make(tmp, "p", phi3_config(8));
  const Arch& a = m.arch;
  ASSERT_EQ(a.rope_scaling.type, "longrope");
  // Hugging Face's default attention factor: √(1 + ln(64 / 8) / ln 8) = √2.
  EXPECT_NEAR(a.rope_scaling.attention_factor, std::sqrt(2.0), 1e-15);
  EXPECT_EQ(rope_attention_factor(a), a.rope_scaling.attention_factor);
  const std::vector<double> s = rope_inv_freq(a, 8), l = rope_inv_freq(a, 9);
  const double shorts[] = {1.0, 1.25, 2.5, 4.0}, longs[] = {1.5, 3.0, 9.0, 30.0};
  for (int i = 0; i < 4; ++i) {
    const double plain = 1.0 / std::pow(10000.0, 2.0 * i / 8);
    EXPECT_DOUBLE_EQ(s[size_t(i)], plain / shorts[i]) << i;
    EXPECT_DOUBLE_EQ(l[size_t(i)], plain / longs[i]) << i;
  }
  // A forward of 8 positions rotates by the short factors, one of 9 by the long ones: its first 8
  // positions' logits differ from the 8-position forward's.
  const auto a8 = logits(m, 8), a9 = logits(m, 9);
  const size_t V = size_t(a.vocab_size);
  double moved = 0;
  for (size_t i = V; i < 8 * V; ++i) moved = std::max(moved, double(std::fabs(a8[i] - a9[i])));
  EXPECT_GT(moved, 1e-3);
  // Not extended (max = original): attention factor 1; an explicit one is taken as given.
  nlohmann::json cfg = phi3_config(64);
  EXPECT_EQ(make(tmp, "same", cfg).arch.rope_scaling.attention_factor, 1.0);
  cfg["rope_scaling"]["attention_factor"] = 1.25;
  cfg["rope_scaling"]["type"] = "su";  // Phi-3's first configs' name for it
  EXPECT_EQ(make(tmp, "given", cfg).arch.rope_scaling.attention_factor, 1.25);
}

TEST(Longrope, BadConfigsAreNamed) {
  TempDir tmp;
  auto with = [&](const char* key, const nlohmann::json& v) {
    nlohmann::json cfg = phi3_config(8);
    cfg["rope_scaling"][key] = v;
    return cfg;
  };
  expect_error([&] { make(tmp, "a", with("short_factor", {1.0, 2.0})); },
               "rope_scaling.short_factor has 2 values for 4 rotary frequencies");
  expect_error([&] { make(tmp, "b", with("long_factor", {1.0, 2.0, 0.0, 3.0})); }, "rope_scaling.long_factor[2] is 0");
  expect_error([&] { make(tmp, "c", with("long_factor", "x")); }, "long_factor");
  nlohmann::json cfg = phi3_config(8);
  cfg["rope_scaling"].erase("short_factor");
  expect_error([&] { make(tmp, "d", cfg); }, "short_factor");
  cfg = phi3_config(0);
  expect_error([&] { make(tmp, "e", cfg); }, "original_max_position_embeddings");
}

TEST(Longrope, TravelsThroughGgufAsLlamaCppWritesIt) {
  TempDir tmp;
  const Model hf = make(tmp, "p", phi3_config(8));
  const auto choices = save_gguf_lm(hf, "", tmp.path("p.gguf"), io::GgmlType::F32);
  ASSERT_GE(choices.size(), 2u);
  EXPECT_EQ(choices[0].name, "rope_factors_long.weight");
  EXPECT_EQ(choices[1].name, "rope_factors_short.weight");
  EXPECT_EQ(choices[0].ne, std::vector<uint64_t>{4});
  const io::GgufFile f = io::GgufFile::open(tmp.path("p.gguf"));
  EXPECT_EQ(f.metadata().get_int("phi3.rope.scaling.original_context_length"), 8);
  EXPECT_NEAR(f.metadata().get_float("phi3.rope.scaling.attn_factor"), std::sqrt(2.0), 1e-7);
  const Model gg = load_lm(tmp.path("p.gguf"));
  EXPECT_EQ(gg.arch.rope_scaling.type, "longrope");
  EXPECT_EQ(gg.arch.rope_scaling.long_factor, hf.arch.rope_scaling.long_factor);  // exact in float32
  EXPECT_EQ(gg.arch.rope_scaling.short_factor, hf.arch.rope_scaling.short_factor);
  EXPECT_EQ(gg.arch.rope_scaling.original_max_position_embeddings, 8);
  for (int T : {8, 20}) {  // short and long factors; the attention factor as float32 moves the last bits
    const auto a = logits(hf, T), b = logits(gg, T);
    double d = 0;
    for (size_t i = 0; i < a.size(); ++i) d = std::max(d, double(std::fabs(a[i] - b[i])));
    EXPECT_LT(d, 1e-4) << T;
  }
  // llama.cpp reads the factors in phi3 files only: a llama with longrope is refused, nothing written.
  nlohmann::json lcfg = default_config("llama", "tiny");
  lcfg["rope_scaling"] = {{"type", "longrope"},
                          {"short_factor", nlohmann::json::array()},
                          {"long_factor", nlohmann::json::array()}};
  const int half = make(tmp, "plain", default_config("llama", "tiny")).arch.rotary_dim / 2;
  for (int i = 0; i < half; ++i) lcfg["rope_scaling"]["short_factor"].push_back(1.0 + i);
  lcfg["rope_scaling"]["long_factor"] = lcfg["rope_scaling"]["short_factor"];
  lcfg["original_max_position_embeddings"] = 16;
  const Model llama = make(tmp, "l", lcfg);
  expect_error([&] { save_gguf_lm(llama, "", tmp.path("l.gguf"), io::GgmlType::F32); }, "phi3 only");
  EXPECT_FALSE(fs::exists(tmp.path("l.gguf")));
}

}  // namespace
}  // namespace qkv
