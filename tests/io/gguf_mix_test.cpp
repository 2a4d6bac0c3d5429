// llama-quantize's file types (io/gguf_mix.hpp) on hand-written expectations: the layers a real 32-layer
// Q4_K_M file gives Q6_K, the 70B and grouped-K/V rules, tied embeddings, the output's fallback and the
// names. (Every family and file type against llama.cpp's own quantizer: tests/gguf/llama/quantize_types.py.)
#include "qkv/io/gguf_mix.hpp"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace qkv::io {
namespace {

std::string blk(int i, const char* t) {
  return "blk." + std::to_string(i) + "." + t + ".weight";
}

GgmlType type_of(const char* mix, const GgufMixModel& m, const std::string& name, uint64_t ne0 = 4096) {
  return gguf_mix_tensor_type(*parse_gguf_mix(mix, false), m, name, ne0);
}

TEST(GgufMix, Q4KMGivesTheLayersOfALlama7bFileQ6K) {
  // Llama 2 7B's Q4_K_M: attn_v and ffn_down Q6_K in layers 0-3, every third from 6 to 27, 28-31.
  const std::set<int> six = {0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31};
  const GgufMixModel m{"llama", 32, 32, 32, false};
  for (int i = 0; i < 32; ++i) {
    const GgmlType want = six.count(i) ? GgmlType::Q6_K : GgmlType::Q4_K;
    EXPECT_EQ(type_of("q4_k_m", m, blk(i, "attn_v")), want) << i;
    EXPECT_EQ(type_of("q4_k_m", m, blk(i, "ffn_down")), want) << i;
    EXPECT_EQ(type_of("q4_k_m", m, blk(i, "attn_q")), GgmlType::Q4_K) << i;
    EXPECT_EQ(type_of("Q4_K_M", m, blk(i, "ffn_gate")), GgmlType::Q4_K) << i;
  }
  EXPECT_EQ(type_of("q4_k_m", m, "output.weight"), GgmlType::Q6_K);
  EXPECT_EQ(type_of("q4_k_m", m, "token_embd.weight"), GgmlType::Q4_K);  // untied: the base type
}

TEST(GgufMix, LayerRulesOfTheOtherKMixes) {
  const GgufMixModel m{"llama", 32, 32, 8, false};
  // Q3_K_M: attn_v Q5_K in the first two layers, Q4_K after; ffn_down Q5_K in the first 32/16 = 2.
  EXPECT_EQ(type_of("q3_k_m", m, blk(1, "attn_v")), GgmlType::Q5_K);
  EXPECT_EQ(type_of("q3_k_m", m, blk(2, "attn_v")), GgmlType::Q4_K);
  EXPECT_EQ(type_of("q3_k_m", m, blk(1, "ffn_down")), GgmlType::Q5_K);
  EXPECT_EQ(type_of("q3_k_m", m, blk(2, "ffn_down")), GgmlType::Q4_K);
  EXPECT_EQ(type_of("q3_k_m", m, blk(7, "attn_output")), GgmlType::Q4_K);
  EXPECT_EQ(type_of("q3_k_m", m, blk(7, "attn_k")), GgmlType::Q3_K);
  // Q4_K_S: attn_v Q5_K in the first 4 layers, ffn_down in the first 32/8 = 4.
  EXPECT_EQ(type_of("q4_k_s", m, blk(3, "attn_v")), GgmlType::Q5_K);
  EXPECT_EQ(type_of("q4_k_s", m, blk(4, "attn_v")), GgmlType::Q4_K);
  EXPECT_EQ(type_of("q4_k_s", m, blk(3, "ffn_down")), GgmlType::Q5_K);
  EXPECT_EQ(type_of("q4_k_s", m, blk(4, "ffn_down")), GgmlType::Q4_K);
  // Q2_K with 4 query heads per K/V head: attn_v Q4_K; with 1, Q3_K.
  EXPECT_EQ(type_of("q2_k", m, blk(9, "attn_v")), GgmlType::Q4_K);
  EXPECT_EQ(type_of("q2_k", GgufMixModel{"llama", 32, 32, 32, false}, blk(9, "attn_v")), GgmlType::Q3_K);
  EXPECT_EQ(type_of("q2_k", m, blk(9, "ffn_down")), GgmlType::Q3_K);
  EXPECT_EQ(type_of("q2_k", m, blk(9, "ffn_up")), GgmlType::Q2_K);
  // Fused Q/K/V counts as attn_v.
  EXPECT_EQ(type_of("q3_k_l", GgufMixModel{"phi3", 32, 32, 32, false}, blk(5, "attn_qkv")), GgmlType::Q5_K);
  // The legacy types only move the output.
  EXPECT_EQ(type_of("q4_0", m, blk(0, "attn_v")), GgmlType::Q4_0);
  EXPECT_EQ(type_of("q4_0", m, "output.weight"), GgmlType::Q6_K);
  EXPECT_EQ(type_of("q8_0", m, "output.weight"), GgmlType::Q8_0);
}

TEST(GgufMix, SeventyBAndTiedEmbeddings) {
  // Llama 2 70B (80 layers, grouped K/V): every attn_v Q3_K / Q4_K becomes Q5_K; LLaMA 65B (80 layers, no
  // grouping) keeps them.
  EXPECT_EQ(type_of("q4_k_m", GgufMixModel{"llama", 80, 64, 8, false}, blk(11, "attn_v")), GgmlType::Q5_K);
  EXPECT_EQ(type_of("q4_k_m", GgufMixModel{"llama", 80, 64, 64, false}, blk(11, "attn_v")), GgmlType::Q4_K);
  EXPECT_EQ(type_of("q4_k_m", GgufMixModel{"qwen2", 80, 64, 8, false}, blk(11, "attn_v")), GgmlType::Q5_K);
  EXPECT_EQ(type_of("q4_k_m", GgufMixModel{"qwen2", 80, 64, 8, false}, blk(12, "attn_v")), GgmlType::Q6_K);
  EXPECT_EQ(type_of("q4_k_m", GgufMixModel{"qwen2", 80, 64, 8, false}, blk(11, "ffn_down")), GgmlType::Q4_K);
  // Tied (GPT-2, Gemma): the token embedding is the output, Q6_K; Q8_0 when its rows are not whole blocks.
  const GgufMixModel tied{"gemma", 18, 8, 1, true};
  EXPECT_EQ(type_of("q4_k_m", tied, "token_embd.weight", 2048), GgmlType::Q6_K);
  EXPECT_EQ(type_of("q4_k_m", tied, "token_embd.weight", 2112), GgmlType::Q8_0);
  EXPECT_EQ(type_of("q4_0", tied, "token_embd.weight", 96), GgmlType::Q8_0);
  EXPECT_EQ(type_of("q4_0", tied, "token_embd.weight", 48), GgmlType::F16);
}

TEST(GgufMix, NamesFileTypesAndPure) {
  const auto m = parse_gguf_mix("Q4_K_M", false);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->name, "Q4_K_M");
  EXPECT_EQ(m->file_type, 15u);
  EXPECT_EQ(m->base, GgmlType::Q4_K);
  EXPECT_FALSE(m->pure);
  const auto p = parse_gguf_mix("q4_k_m", true);  // --pure: every matrix Q4_K, the same file type
  ASSERT_TRUE(p);
  EXPECT_TRUE(p->pure);
  EXPECT_EQ(p->file_type, 15u);
  const GgufMixModel llama{"llama", 32, 32, 32, false};
  EXPECT_EQ(gguf_mix_tensor_type(*p, llama, blk(0, "attn_v"), 4096), GgmlType::Q4_K);
  EXPECT_EQ(gguf_mix_tensor_type(*p, llama, "output.weight", 4096), GgmlType::Q4_K);
  EXPECT_EQ(gguf_mix_tensor_type(*p, llama, "output.weight", 4160), GgmlType::Q5_0);  // still falls back
  // q3_k, q4_k, q5_k: qkv's names for every matrix that type (llama-quantize has no such file type).
  const auto k = parse_gguf_mix("q4_k", false);
  ASSERT_TRUE(k);
  EXPECT_EQ(gguf_mix_tensor_type(*k, llama, "output.weight", 4096), GgmlType::Q4_K);
  EXPECT_EQ(k->file_type, 14u);
  EXPECT_EQ(parse_gguf_mix("f16", false)->file_type, 1u);
  EXPECT_FALSE(parse_gguf_mix("f16", true)->pure);  // nothing is quantized
  EXPECT_EQ(parse_gguf_mix("iq4_xs", false)->file_type, 30u);
  for (const char* bad : {"q4_k_x", "q8_k", "", "q4_k_m "}) EXPECT_FALSE(parse_gguf_mix(bad, false)) << bad;
  EXPECT_NE(gguf_mix_names().find("q4_k_m"), std::string::npos);
  // general.file_type by llama.cpp's names, qkv's pure q4_k file named as llama.cpp would (Q4_K_S).
  EXPECT_EQ(gguf_file_type_name(15), "Q4_K_M");
  EXPECT_EQ(gguf_file_type_name(14), "Q4_K_S");
  EXPECT_EQ(gguf_file_type_name(0), "F32");
  EXPECT_EQ(gguf_file_type_name(23), "IQ3_XXS");
  EXPECT_EQ(gguf_file_type_name(5), "file type 5");
  EXPECT_EQ(gguf_file_type_name(-1), "file type -1");
}

}  // namespace
}  // namespace qkv::io
