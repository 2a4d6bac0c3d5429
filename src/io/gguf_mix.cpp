// llama-quantize's file types as a table (include/qkv/io/gguf_mix.hpp states the rules in words).
#include "qkv/io/gguf_mix.hpp"

#include <cctype>
#include <cstdio>
#include <iterator>
#include <utility>

namespace qkv::io {
namespace {

// When a rule applies to layer i of n.
enum class When { Always, Below2, Below4, FirstEighth, FirstSixteenth, MoreBits, Gqa4 };

struct Rule {
  When when;
  GgmlType type;
};

// One llama-quantize file type: its name, general.file_type, base type and per-category rules (the first
// rule that applies wins; none: the base type).
struct MixRow {
  const char* name;
  uint32_t file_type;
  GgmlType base;
  bool mixes;      // false: every matrix `base` (F32/F16/BF16: nothing is quantized; q3_k etc.: pure)
  Rule attn_v[2];  // attn_v.weight and attn_qkv.weight
  Rule ffn_down[2];
  GgmlType attn_output;  // F32: no rule
};

constexpr GgmlType kNone = GgmlType::F32;
constexpr Rule kNo = {When::Always, kNone};

const MixRow kMixes[] = {
    {"F32", 0, GgmlType::F32, false, {kNo, kNo}, {kNo, kNo}, kNone},
    {"F16", 1, GgmlType::F16, false, {kNo, kNo}, {kNo, kNo}, kNone},
    {"BF16", 32, GgmlType::BF16, false, {kNo, kNo}, {kNo, kNo}, kNone},
    {"Q8_0", 7, GgmlType::Q8_0, true, {kNo, kNo}, {kNo, kNo}, kNone},
    {"Q4_0", 2, GgmlType::Q4_0, true, {kNo, kNo}, {kNo, kNo}, kNone},
    {"Q4_1", 3, GgmlType::Q4_1, true, {kNo, kNo}, {kNo, kNo}, kNone},
    {"Q5_0", 8, GgmlType::Q5_0, true, {kNo, kNo}, {kNo, kNo}, kNone},
    {"Q5_1", 9, GgmlType::Q5_1, true, {kNo, kNo}, {kNo, kNo}, kNone},
    {"Q2_K",
     10,
     GgmlType::Q2_K,
     true,
     {{When::Gqa4, GgmlType::Q4_K}, {When::Always, GgmlType::Q3_K}},
     {{When::Always, GgmlType::Q3_K}, kNo},
     GgmlType::Q3_K},
    {"Q3_K_S", 11, GgmlType::Q3_K, true, {kNo, kNo}, {kNo, kNo}, kNone},
    {"Q3_K_M",
     12,
     GgmlType::Q3_K,
     true,
     {{When::Below2, GgmlType::Q5_K}, {When::Always, GgmlType::Q4_K}},
     {{When::FirstSixteenth, GgmlType::Q5_K}, {When::Always, GgmlType::Q4_K}},
     GgmlType::Q4_K},
    {"Q3_K_L",
     13,
     GgmlType::Q3_K,
     true,
     {{When::Always, GgmlType::Q5_K}, kNo},
     {{When::Always, GgmlType::Q5_K}, kNo},
     GgmlType::Q5_K},
    {"Q4_K_S",
     14,
     GgmlType::Q4_K,
     true,
     {{When::Below4, GgmlType::Q5_K}, kNo},
     {{When::FirstEighth, GgmlType::Q5_K}, kNo},
     kNone},
    {"Q4_K_M",
     15,
     GgmlType::Q4_K,
     true,
     {{When::MoreBits, GgmlType::Q6_K}, kNo},
     {{When::MoreBits, GgmlType::Q6_K}, kNo},
     kNone},
    {"Q5_K_S", 16, GgmlType::Q5_K, true, {kNo, kNo}, {kNo, kNo}, kNone},
    {"Q5_K_M",
     17,
     GgmlType::Q5_K,
     true,
     {{When::MoreBits, GgmlType::Q6_K}, kNo},
     {{When::MoreBits, GgmlType::Q6_K}, kNo},
     kNone},
    {"Q6_K", 18, GgmlType::Q6_K, true, {kNo, kNo}, {kNo, kNo}, kNone},
    {"IQ4_NL",
     25,
     GgmlType::IQ4_NL,
     true,
     {{When::Gqa4, GgmlType::Q5_K}, kNo},
     {{When::FirstEighth, GgmlType::Q5_K}, kNo},
     kNone},
    {"IQ4_XS",
     30,
     GgmlType::IQ4_XS,
     true,
     {{When::Gqa4, GgmlType::Q5_K}, kNo},
     {{When::FirstEighth, GgmlType::Q5_K}, kNo},
     kNone},
    // qkv's own: llama-quantize has no file type of these names; general.file_type says the _S mix.
    {"Q3_K", 11, GgmlType::Q3_K, false, {kNo, kNo}, {kNo, kNo}, kNone},
    {"Q4_K", 14, GgmlType::Q4_K, false, {kNo, kNo}, {kNo, kNo}, kNone},
    {"Q5_K", 16, GgmlType::Q5_K, false, {kNo, kNo}, {kNo, kNo}, kNone},
};

bool more_bits(int i, int n) {
  return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

bool applies(When w, int i, int n, const GgufMixModel& m) {
  switch (w) {
    case When::Always:
      return true;
    case When::Below2:
      return i < 2;
    case When::Below4:
      return i < 4;
    case When::FirstEighth:
      return i < n / 8;
    case When::FirstSixteenth:
      return i < n / 16;
    case When::MoreBits:
      return more_bits(i, n);
    case When::Gqa4:
      return m.n_head_kv > 0 && m.n_head / m.n_head_kv >= 4;
  }
  return false;
}

GgmlType first_rule(const Rule (&rules)[2], int i, int n, const GgufMixModel& m, GgmlType otherwise) {
  for (const Rule& r : rules)
    if (r.type != kNone && applies(r.when, i, n, m)) return r.type;
  return otherwise;
}

bool contains(const std::string& s, const char* part) {
  return s.find(part) != std::string::npos;
}

// llama.cpp's model type 70B, the one size its rules single out.
bool is_70b(const GgufMixModel& m) {
  return m.n_layer == 80 &&
         ((m.architecture == "llama" && m.n_head != m.n_head_kv) || m.architecture == "qwen2");
}

GgmlType mixed_type(const MixRow& row, const GgufMixModel& m, const std::string& name, uint64_t ne0) {
  const bool output = name == "output.weight" || (m.tied && name == "token_embd.weight");
  if (output) {
    if (ne0 % uint64_t(ggml_type_traits(uint32_t(row.base))->block_size) != 0) return GgmlType::Q8_0;
    return row.base == GgmlType::Q8_0 ? GgmlType::Q8_0 : GgmlType::Q6_K;
  }
  int layer = 0;
  std::sscanf(name.c_str(), "blk.%d.", &layer);  // tensors are taken in layer order, as llama-quantize's
  if (contains(name, "attn_v.weight") || contains(name, "attn_qkv.weight")) {
    GgmlType t = first_rule(row.attn_v, layer, m.n_layer, m, row.base);
    if (is_70b(m) && (t == GgmlType::Q3_K || t == GgmlType::Q4_K)) t = GgmlType::Q5_K;
    return t;
  }
  if (contains(name, "ffn_down")) return first_rule(row.ffn_down, layer, m.n_layer, m, row.base);
  if (contains(name, "attn_output.weight") && row.attn_output != kNone) return row.attn_output;
  return row.base;
}

}  // namespace

std::optional<GgufMix> parse_gguf_mix(const std::string& name, bool pure) {
  std::string u;
  for (char c : name) u += char(std::toupper(static_cast<unsigned char>(c)));
  for (size_t i = 0; i < std::size(kMixes); ++i) {
    const MixRow& r = kMixes[i];
    if (u != r.name) continue;
    const bool mixes = r.mixes && !pure;
    const bool quantized = r.base != GgmlType::F32 && r.base != GgmlType::F16 && r.base != GgmlType::BF16;
    return GgufMix{r.name, r.file_type, r.base, quantized && !mixes, mixes ? int(i) : -1};
  }
  return std::nullopt;
}

std::string gguf_mix_names() {
  std::string s;
  for (const MixRow& r : kMixes) {
    std::string l = r.name;
    for (char& c : l) c = char(std::tolower(static_cast<unsigned char>(c)));
    s += (s.empty() ? "" : ", ") + l;
  }
  return s;
}

std::string gguf_file_type_name(int64_t file_type) {
  for (const MixRow& r : kMixes)
    if (int64_t(r.file_type) == file_type)
      return r.name;  // the first row: llama.cpp's name, not qkv's pure one
  // The ones qkv reads some tensors of but does not write (llama.h's llama_ftype).
  static const std::pair<int, const char*> kOthers[] = {
      {4, "Q4_1_SOME_F16"}, {19, "IQ2_XXS"}, {20, "IQ2_XS"}, {21, "Q2_K_S"}, {22, "IQ3_XS"},
      {23, "IQ3_XXS"},      {24, "IQ1_S"},   {26, "IQ3_S"},  {27, "IQ3_M"},  {28, "IQ2_S"},
      {29, "IQ2_M"},        {31, "IQ1_M"},   {36, "TQ1_0"},  {37, "TQ2_0"},  {38, "MXFP4_MOE"},
      {39, "NVFP4"},        {40, "Q1_0"},    {41, "Q2_0"}};
  for (const auto& [ft, name] : kOthers)
    if (ft == file_type) return name;
  return "file type " + std::to_string(file_type);
}

GgmlType gguf_mix_tensor_type(const GgufMix& mix, const GgufMixModel& model, const std::string& name,
                              uint64_t ne0) {
  const GgmlType t = mix.rules < 0 ? mix.base : mixed_type(kMixes[mix.rules], model, name, ne0);
  return gguf_tensor_type(t, ne0);
}

GgmlType gguf_tensor_type(GgmlType requested, uint64_t ne0) {
  static const std::pair<GgmlType, GgmlType> kFallback[] = {
      {GgmlType::IQ4_XS, GgmlType::IQ4_NL}, {GgmlType::Q2_K, GgmlType::Q4_0},
      {GgmlType::Q3_K, GgmlType::Q4_0},     {GgmlType::Q4_K, GgmlType::Q5_0},
      {GgmlType::Q5_K, GgmlType::Q5_1},     {GgmlType::Q6_K, GgmlType::Q8_0}};
  auto fits = [&](GgmlType t) { return ne0 % uint64_t(ggml_type_traits(uint32_t(t))->block_size) == 0; };
  if (fits(requested)) return requested;
  for (const auto& [from, to] : kFallback)
    if (from == requested && fits(to)) return to;
  return GgmlType::F16;
}

}  // namespace qkv::io
