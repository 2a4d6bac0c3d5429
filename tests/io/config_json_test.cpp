#include "qkv/io/config_json.hpp"

#include <gtest/gtest.h>

#include "io/io_test_util.hpp"

namespace qkv::io {
namespace {

using test::expect_data_error;
using test::TempDir;
using test::write_raw;

// The config.json of Hugging Face's released "gpt2" (abridged to the keys that matter plus some noise).
const char* kHfGpt2 = R"({
  "activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1,
  "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256, "initializer_range": 0.02,
  "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": 1024, "n_embd": 768, "n_head": 12,
  "n_layer": 12, "n_positions": 1024, "resid_pdrop": 0.1, "summary_type": "cls_index",
  "task_specific_params": {"text-generation": {"do_sample": true, "max_length": 50}}, "vocab_size": 50257
})";

TEST(ConfigJson, ReadsHuggingFaceGpt2) {
  TempDir tmp;
  write_raw(tmp.path("config.json"), kHfGpt2);
  const GPT2Config c = read_config_json(tmp.path("config.json"));
  EXPECT_EQ(c.vocab_size, 50257);
  EXPECT_EQ(c.n_positions, 1024);
  EXPECT_EQ(c.n_embd, 768);
  EXPECT_EQ(c.n_layer, 12);
  EXPECT_EQ(c.n_head, 12);
  EXPECT_EQ(c.n_inner, 0);
  EXPECT_EQ(c.layer_norm_epsilon, 1e-5);
  EXPECT_FALSE(c.attn_only);
}

TEST(ConfigJson, RoundTripAndNCtxFallback) {
  TempDir tmp;
  GPT2Config c;
  c.vocab_size = 100;
  c.n_positions = 32;
  c.n_embd = 48;
  c.n_layer = 3;
  c.n_head = 6;
  c.n_inner = 100;
  c.layer_norm_epsilon = 1.25e-6;
  c.attn_only = true;
  write_config_json(tmp.path("c.json"), c);
  const GPT2Config r = read_config_json(tmp.path("c.json"));
  EXPECT_EQ(r.vocab_size, 100);
  EXPECT_EQ(r.n_positions, 32);
  EXPECT_EQ(r.n_embd, 48);
  EXPECT_EQ(r.n_layer, 3);
  EXPECT_EQ(r.n_head, 6);
  EXPECT_EQ(r.n_inner, 100);
  EXPECT_EQ(r.layer_norm_epsilon, 1.25e-6);
  EXPECT_TRUE(r.attn_only);
  EXPECT_EQ(tmp.entries(), std::vector<std::string>{"c.json"});

  // The same JSON held as a string (as in safetensors __metadata__["config"]).
  const auto j = nlohmann::json::parse(config_to_json(c).dump());
  EXPECT_TRUE(j.at("n_inner") == 100);
  EXPECT_EQ(config_from_json(j, "meta").n_head, 6);
  GPT2Config d;
  EXPECT_TRUE(config_to_json(d).at("n_inner").is_null());

  const GPT2Config f = config_from_json(nlohmann::json::parse(R"({"n_ctx": 77, "n_inner": null})"), "x");
  EXPECT_EQ(f.n_positions, 77);
  EXPECT_EQ(f.n_inner, 0);
}

class ConfigBad : public ::testing::Test {
 protected:
  void expect_bad(const std::string& text, std::initializer_list<std::string> parts) {
    const std::string path = tmp_.path("config.json");
    write_raw(path, text);
    expect_data_error([&] { read_config_json(path); }, {path});
    expect_data_error([&] { read_config_json(path); }, parts);
  }
  TempDir tmp_;
};

TEST_F(ConfigBad, Missing) {
  expect_data_error([&] { read_config_json(tmp_.path("none.json")); }, {"none.json", "cannot open"});
}
TEST_F(ConfigBad, Empty) { expect_bad("", {"not valid JSON"}); }
TEST_F(ConfigBad, NotJson) { expect_bad("{\"n_embd\": 768,", {"not valid JSON"}); }
TEST_F(ConfigBad, NotObject) { expect_bad("[768]", {"expected a JSON object", "found array"}); }
TEST_F(ConfigBad, WrongTypes) {
  expect_bad(R"({"n_embd": "768"})", {"\"n_embd\"", "expected an integer", "found string \"768\""});
  expect_bad(R"({"n_head": 12.5})", {"\"n_head\"", "expected an integer", "found number 12.5"});
  expect_bad(R"({"n_layer": 4294967296})", {"\"n_layer\"", "32-bit range"});
  expect_bad(R"({"n_inner": "big"})", {"\"n_inner\"", "null or an integer", "found string"});
  expect_bad(R"({"layer_norm_epsilon": "1e-5"})", {"\"layer_norm_epsilon\"", "expected a number"});
  expect_bad(R"({"qkv_attn_only": 1})", {"\"qkv_attn_only\"", "expected a boolean", "found number 1"});
  expect_bad(R"({"activation_function": 3})", {"\"activation_function\"", "expected a string"});
}
TEST_F(ConfigBad, DeeplyNestedValueIsAnErrorNotAStackOverflow) {
  expect_bad("{\"n_embd\":" + std::string(1000000, '[') + std::string(1000000, ']') + "}",
             {"\"n_embd\"", "expected an integer", "found array [[[...]]]"});
}
TEST_F(ConfigBad, WrongActivation) {
  expect_bad(R"({"activation_function": "relu"})", {"\"activation_function\" is \"relu\"", "expected \"gelu_new\""});
}
TEST_F(ConfigBad, WrongModelType) {
  expect_bad(R"({"model_type": "llama"})", {"\"model_type\" is \"llama\"", "expected \"gpt2\""});
}
TEST_F(ConfigBad, HeadsDoNotDivideEmbedding) {
  expect_bad(R"({"n_embd": 768, "n_head": 7})", {"n_head 7 does not divide n_embd 768"});
}
TEST_F(ConfigBad, OutOfRange) {
  expect_bad(R"({"n_layer": 0})", {"n_layer is 0"});
  expect_bad(R"({"layer_norm_epsilon": -1})", {"layer_norm_epsilon"});
}

TEST(ConfigJsonWrite, UnwritableDirectory) {
  TempDir tmp;
  const std::string path = tmp.path("gone/config.json");
  expect_data_error([&] { write_config_json(path, GPT2Config{}); }, {path, "No such file or directory"});
  EXPECT_TRUE(tmp.entries().empty());
}

}  // namespace
}  // namespace qkv::io
