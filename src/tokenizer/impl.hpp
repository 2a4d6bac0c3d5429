// Tokenizer::Impl, shared by the GPT-2 files loader (tokenizer.cpp) and the Hugging Face
// tokenizer.json loader (hf_tokenizer.cpp).
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "qkv/tokenizer.hpp"

namespace qkv {

namespace tokenizer_detail {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using IdMap = std::unordered_map<std::string, int, StringHash, std::equal_to<>>;

inline uint64_t pair_key(int left, int right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

struct HfPipeline;  // hf_tokenizer.cpp: normalizers, pre-tokenizers, added tokens, BPE options
void destroy(const HfPipeline* p);
struct HfPipelineDelete {
  void operator()(const HfPipeline* p) const { destroy(p); }
};

}  // namespace tokenizer_detail

struct Tokenizer::Impl {
  struct Merge {
    int rank;
    int result;
  };

  std::vector<std::string> token_strings;        // id -> vocabulary string ("Ġthe", "▁the", "<0x0A>")
  std::vector<std::string> token_bytes;          // id -> the bytes it stands for (" the")
  std::array<int, 256> byte_id{};                // byte -> id of its single-byte token (byte-level BPE)
  std::vector<std::pair<int, int>> merges;       // rank -> (left id, right id)
  std::unordered_map<uint64_t, Merge> merge_of;  // pair_key(left, right) -> rank and merged id

  // Hugging Face tokenizer.json: everything around the BPE model (null for GPT-2's own files).
  std::unique_ptr<const tokenizer_detail::HfPipeline, tokenizer_detail::HfPipelineDelete> hf;
  int bos = -1, eos = -1;            // -1: none
  std::vector<int> prefix, suffix;   // what Bos::Auto puts around the text (HF's post-processor)
  std::string describe = "GPT-2 byte-level BPE";
  std::vector<std::string> source_files;  // tokenizer.json (+ tokenizer_config.json) for write_files

  mutable std::shared_mutex cache_mutex;
  mutable std::unordered_map<std::string, std::vector<int>, tokenizer_detail::StringHash, std::equal_to<>> cache;

  // GPT-2: one pre-token's bytes -> ids (cached).
  void encode_word(std::string_view word, std::vector<int>& out) const;
  // The merge loop over initial symbol ids `sym` (consumed). hf_order: merge one pair at a time,
  // lowest (rank, position) first, as Hugging Face's Word::merge_all; otherwise OpenAI's bpe()
  // (every occurrence of the best bigram at once). Appends the result to out.
  void bpe_ids(std::vector<int>& sym, bool hf_order, std::vector<int>& out) const;
  // Cache helpers for words of at most kMaxCachedWordBytes bytes.
  bool cached(std::string_view word, std::vector<int>& out) const;
  void remember(std::string_view word, const int* ids, size_t n) const;

  void check_id(int id, const char* where) const;
};

namespace tokenizer_detail {
// hf_tokenizer.cpp: encode and decode through the tokenizer.json pipeline (impl.hf set).
std::vector<int> encode_hf(const Tokenizer::Impl& impl, std::string_view text, Bos bos);
std::string decode_hf(const Tokenizer::Impl& impl, const std::vector<int>& ids);
// impl.bos, or a qkv::Error (kind Usage) saying the tokenizer has no BOS token.
int bos_id_or_throw(const Tokenizer::Impl& impl);
}  // namespace tokenizer_detail

}  // namespace qkv
