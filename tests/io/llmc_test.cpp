#include "qkv/io/llmc.hpp"

#include <gtest/gtest.h>

#include <map>

#include "io/io_test_util.hpp"
#include "qkv/io/half.hpp"

namespace qkv::io {
namespace {

using test::bytes_of;
using test::expect_data_error;
using test::TempDir;
using test::write_raw;

GPT2Config tiny_config() {
  GPT2Config c;
  c.vocab_size = 5;
  c.n_positions = 3;
  c.n_embd = 4;
  c.n_layer = 2;
  c.n_head = 2;
  return c;
}

// llm.c's parameter order with its [out, in] shapes, for a config: (llm.c name, rows, cols per layer, layered)
struct LlmcParam {
  const char* name;
  int64_t rows, cols;
  bool layered;
};
std::vector<LlmcParam> llmc_params(const GPT2Config& c, int64_t Vp) {
  const int64_t C = c.n_embd;
  return {{"wte", Vp, C, false},      {"wpe", c.n_positions, C, false}, {"ln1w", 1, C, true},
          {"ln1b", 1, C, true},       {"qkvw", 3 * C, C, true},         {"qkvb", 1, 3 * C, true},
          {"attprojw", C, C, true},   {"attprojb", 1, C, true},         {"ln2w", 1, C, true},
          {"ln2b", 1, C, true},       {"fcw", 4 * C, C, true},          {"fcb", 1, 4 * C, true},
          {"fcprojw", C, 4 * C, true}, {"fcprojb", 1, C, true},         {"lnfw", 1, C, false},
          {"lnfb", 1, C, false}};
}

std::string header_bytes(std::vector<int32_t> h) {
  h.resize(256, 0);
  return bytes_of(h);
}

// Writes an llm.c file by hand in llm.c's own layout: parameter kind k, layer l, row r, col c holds
// value(k, l, r, c) = k*1000 + l*100 + r + c/8 (exactly representable in bf16 too for small sizes:
// we only compare fp32 here).
float value(int k, int64_t l, int64_t r, int64_t c) {
  return static_cast<float>(k * 1000 + l * 100) + static_cast<float>(r) + static_cast<float>(c) / 8.0f;
}

TEST(Llmc, ReadsLlmcLayoutIntoHuggingFaceNamesAndTransposes) {
  TempDir tmp;
  const GPT2Config c = tiny_config();
  const int64_t Vp = 8;
  std::vector<float> params;
  const auto ps = llmc_params(c, Vp);
  for (int k = 0; k < static_cast<int>(ps.size()); ++k)
    for (int64_t l = 0; l < (ps[k].layered ? c.n_layer : 1); ++l)
      for (int64_t r = 0; r < ps[k].rows; ++r)
        for (int64_t col = 0; col < ps[k].cols; ++col) params.push_back(value(k, l, r, col));
  const std::string path = tmp.path("gpt2_tiny.bin");
  write_raw(path, header_bytes({20240326, 3, 3, 5, 2, 2, 4, 8}) + bytes_of(params));

  const LlmcCheckpoint ck = read_llmc(path);
  EXPECT_EQ(ck.version, 3);
  EXPECT_EQ(ck.padded_vocab_size, 8);
  EXPECT_EQ(ck.config.vocab_size, 5);
  EXPECT_EQ(ck.config.n_positions, 3);
  EXPECT_EQ(ck.config.n_embd, 4);
  EXPECT_EQ(ck.config.n_layer, 2);
  EXPECT_EQ(ck.config.n_head, 2);
  ASSERT_EQ(ck.tensors.size(), 2u + 12u * 2u + 2u);
  std::map<std::string, const NamedTensor*> by;
  for (const auto& t : ck.tensors) by[t.name] = &t;
  EXPECT_EQ(ck.tensors.front().name, "wte.weight");
  EXPECT_EQ(ck.tensors[1].name, "wpe.weight");
  EXPECT_EQ(ck.tensors[2].name, "h.0.ln_1.weight");
  EXPECT_EQ(ck.tensors[14].name, "h.1.ln_1.weight");
  EXPECT_EQ(ck.tensors.back().name, "ln_f.bias");

  const NamedTensor& wte = *by.at("wte.weight");
  EXPECT_EQ(wte.shape, (std::vector<int64_t>{5, 4}));  // padding rows dropped
  ASSERT_EQ(wte.data.size(), 20u);
  EXPECT_EQ(wte.data[4 * 4 + 3], value(0, 0, 4, 3));
  EXPECT_EQ(by.at("wpe.weight")->shape, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(by.at("wpe.weight")->data[2 * 4 + 1], value(1, 0, 2, 1));

  // c_attn: llm.c qkvw[l] is [3C, C] (out, in); HF is [C, 3C]: hf[i][o] = llmc[o][i]
  const NamedTensor& qkv1 = *by.at("h.1.attn.c_attn.weight");
  EXPECT_EQ(qkv1.shape, (std::vector<int64_t>{4, 12}));
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t o = 0; o < 12; ++o) ASSERT_EQ(qkv1.data[i * 12 + o], value(4, 1, o, i)) << i << "," << o;
  EXPECT_EQ(by.at("h.1.attn.c_attn.bias")->shape, std::vector<int64_t>{12});
  EXPECT_EQ(by.at("h.1.attn.c_attn.bias")->data[11], value(5, 1, 0, 11));
  EXPECT_EQ(by.at("h.0.attn.c_proj.weight")->data[1 * 4 + 3], value(6, 0, 3, 1));
  EXPECT_EQ(by.at("h.0.mlp.c_fc.weight")->shape, (std::vector<int64_t>{4, 16}));
  EXPECT_EQ(by.at("h.0.mlp.c_fc.weight")->data[2 * 16 + 13], value(10, 0, 13, 2));
  EXPECT_EQ(by.at("h.1.mlp.c_proj.weight")->shape, (std::vector<int64_t>{16, 4}));
  EXPECT_EQ(by.at("h.1.mlp.c_proj.weight")->data[13 * 4 + 2], value(12, 1, 2, 13));
  EXPECT_EQ(by.at("h.1.ln_2.bias")->data[3], value(9, 1, 0, 3));
  EXPECT_EQ(by.at("ln_f.weight")->data[0], value(14, 0, 0, 0));
  EXPECT_EQ(by.at("ln_f.bias")->data[3], value(15, 0, 0, 3));
}

TEST(Llmc, WriteThenReadRoundTripsFp32AndBf16) {
  TempDir tmp;
  const GPT2Config c = tiny_config();
  // Read the hand-made layout once to get HF tensors, then write and read back both versions.
  std::vector<float> params;
  const auto ps = llmc_params(c, 8);
  for (int k = 0; k < static_cast<int>(ps.size()); ++k)
    for (int64_t l = 0; l < (ps[k].layered ? c.n_layer : 1); ++l)
      for (int64_t r = 0; r < ps[k].rows; ++r)
        for (int64_t col = 0; col < ps[k].cols; ++col) params.push_back(value(k, l, r, col) + 0.3f);
  const std::string src = tmp.path("src.bin");
  const std::string original = header_bytes({20240326, 3, 3, 5, 2, 2, 4, 8}) + bytes_of(params);
  write_raw(src, original);
  const LlmcCheckpoint ck = read_llmc(src);
  std::map<std::string, const float*> get;
  for (const auto& t : ck.tensors) get[t.name] = t.data.data();
  auto getter = [&](const std::string& n) -> const float* {
    auto it = get.find(n);
    return it == get.end() ? nullptr : it->second;
  };

  const std::string out3 = tmp.path("out3.bin");
  write_llmc(out3, ck.config, getter, 3, 8);
  // Padding rows of wte were dropped on reading and come back as zeros.
  std::string expect = original;
  std::memset(expect.data() + 1024 + 5 * 4 * 4, 0, 3 * 4 * 4);
  EXPECT_EQ(test::read_raw(out3), expect);

  const std::string out5 = tmp.path("out5.bin");
  write_llmc(out5, ck.config, getter, 5, 8);
  const LlmcCheckpoint b = read_llmc(out5);
  EXPECT_EQ(b.version, 5);
  EXPECT_EQ(test::read_raw(out5).size(), 1024u + params.size() * 2);
  ASSERT_EQ(b.tensors.size(), ck.tensors.size());
  for (std::size_t i = 0; i < b.tensors.size(); ++i) {
    EXPECT_EQ(b.tensors[i].name, ck.tensors[i].name);
    EXPECT_EQ(b.tensors[i].shape, ck.tensors[i].shape);
    for (std::size_t j = 0; j < b.tensors[i].data.size(); ++j)
      ASSERT_EQ(b.tensors[i].data[j], bf16_to_float(float_to_bf16(ck.tensors[i].data[j]))) << b.tensors[i].name;
  }
  EXPECT_EQ(tmp.entries().size(), 3u);  // no temporaries left
}

TEST(Llmc, WriteRejectsWhatLlmcCannotHold) {
  TempDir tmp;
  const std::string path = tmp.path("x.bin");
  std::vector<float> zeros(1000, 0.0f);
  auto all = [&](const std::string&) -> const float* { return zeros.data(); };
  GPT2Config c = tiny_config();
  expect_data_error([&] { write_llmc(path, c, all, 4, 8); }, {path, "version 4"});
  expect_data_error([&] { write_llmc(path, c, all, 3, 4); }, {path, "padded_vocab_size 4 is less than vocab_size 5"});
  expect_data_error([&] { write_llmc(path, c, [&](const std::string& n) -> const float* {
                                       return n == "h.1.mlp.c_fc.bias" ? nullptr : zeros.data();
                                     }, 3, 8); },
                    {path, "\"h.1.mlp.c_fc.bias\" was not provided"});
  c.attn_only = true;
  expect_data_error([&] { write_llmc(path, c, all, 3, 8); }, {path, "attention-only"});
  c.attn_only = false;
  c.n_inner = 20;
  expect_data_error([&] { write_llmc(path, c, all, 3, 8); }, {path, "n_inner is 20"});
  EXPECT_TRUE(tmp.entries().empty());
  c.n_inner = 0;
  const std::string bad_dir = tmp.path("nope/x.bin");
  expect_data_error([&] { write_llmc(bad_dir, c, all, 3, 8); }, {bad_dir, "No such file or directory"});
  EXPECT_TRUE(tmp.entries().empty());
}

class LlmcBad : public ::testing::Test {
 protected:
  void expect_bad(const std::string& bytes, std::initializer_list<std::string> parts) {
    const std::string path = tmp_.path("bad.bin");
    write_raw(path, bytes);
    expect_data_error([&] { read_llmc(path); }, {path});
    expect_data_error([&] { read_llmc(path); }, parts);
  }
  TempDir tmp_;
};

// tiny: maxT 3, V 5, L 2, H 2, C 4, Vp 8 -> 8*4 + 3*4 + 2*(12*16 + 13*4) + 2*4 = 540 parameters
constexpr int64_t kTinyParams = 540;

TEST_F(LlmcBad, EmptyAndTiny) {
  expect_bad("", {"file is 0 bytes", "expected at least 1024"});
  expect_bad(bytes_of(int32_t{20240326}), {"file is 4 bytes", "expected at least 1024"});
}
TEST_F(LlmcBad, BadMagic) {
  expect_bad(header_bytes({12345, 3, 3, 5, 2, 2, 4, 8}) + std::string(kTinyParams * 4, '\0'),
             {"bad magic 12345", "expected 20240326"});
}
TEST_F(LlmcBad, UnknownVersion) {
  expect_bad(header_bytes({20240326, 4, 3, 5, 2, 2, 4, 8}) + std::string(kTinyParams * 4, '\0'),
             {"unknown version 4", "expected 3 (fp32) or 5 (bf16)"});
}
TEST_F(LlmcBad, ZeroHeads) {
  expect_bad(header_bytes({20240326, 3, 3, 5, 2, 0, 4, 8}), {"num_heads is 0", "expected a positive value"});
}
TEST_F(LlmcBad, NegativeDim) {
  expect_bad(header_bytes({20240326, 3, 3, 5, -2, 2, 4, 8}), {"num_layers is -2"});
}
TEST_F(LlmcBad, HeadsDoNotDivideChannels) {
  expect_bad(header_bytes({20240326, 3, 3, 5, 2, 3, 4, 8}), {"num_heads 3 does not divide channels 4"});
}
TEST_F(LlmcBad, PaddedBelowVocab) {
  expect_bad(header_bytes({20240326, 3, 3, 5, 2, 2, 4, 4}), {"padded_vocab_size 4 is less than vocab_size 5"});
}
TEST_F(LlmcBad, HugeDimsAreRejectedNotAllocated) {
  // GPT-2-XL-sized claims on a 1 KiB file: must fail on the size check, not try to allocate.
  expect_bad(header_bytes({20240326, 3, 1024, 50257, 48, 25, 1600, 50304}),
             {"file is 1024 bytes, expected 6", "truncated"});
  expect_bad(header_bytes({20240326, 3, 1024, 50257, 2000, 25, 1600, 50304}), {"n_layer is 2000"});
}
TEST_F(LlmcBad, Truncated) {
  expect_bad(header_bytes({20240326, 3, 3, 5, 2, 2, 4, 8}) + std::string(kTinyParams * 4 - 1, '\0'),
             {"file is 3183 bytes, expected 3184", "truncated"});
  expect_bad(header_bytes({20240326, 5, 3, 5, 2, 2, 4, 8}) + std::string(kTinyParams * 4, '\0'),
             {"file is 3184 bytes, expected 2104", "1080 trailing bytes"});
}
TEST_F(LlmcBad, TrailingBytes) {
  expect_bad(header_bytes({20240326, 3, 3, 5, 2, 2, 4, 8}) + std::string(kTinyParams * 4 + 2, '\0'),
             {"file is 3186 bytes, expected 3184", "2 trailing bytes"});
}

}  // namespace
}  // namespace qkv::io
