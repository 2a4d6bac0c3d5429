// GPT-2's byte-level BPE tokenizer, exact: the same ids as OpenAI's encoder.py for every text.
//
// text --pre-tokenizer regex--> words --bytes_to_unicode--> symbols --BPE merges by rank--> ids
//
// The pre-tokenizer is GPT-2's pattern run by PCRE2 (UTF + UCP, JIT when available):
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// Input that is not valid UTF-8 still encodes: each run of bytes that is not valid UTF-8 becomes a
// word of its own, so decode(encode(s)) == s for any byte string s.
// Special tokens such as <|endoftext|> are not recognised in text (as in OpenAI's encoder.py); they
// still decode.
//
// A Tokenizer is immutable after construction and safe to use from many threads at once; copies
// share the vocabulary and the per-word cache.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace qkv {

class Tokenizer {
 public:
  // vocab_json: a JSON object {token string: id} with ids exactly 0..n-1 (HF vocab.json / OpenAI
  // encoder.json). merges_txt: one merge "left right" per line in rank order, an optional
  // "#version" first line (HF merges.txt / OpenAI vocab.bpe). Throws qkv::Error naming the file
  // (and line) for anything malformed.
  static Tokenizer from_files(const std::string& vocab_json, const std::string& merges_txt);
  // dir holds vocab.json + merges.txt (Hugging Face names) or encoder.json + vocab.bpe (OpenAI's).
  static Tokenizer from_dir(const std::string& dir);
  // 256 tokens, token id = byte value, token string = bytes_to_unicode(byte), no merges.
  static Tokenizer byte_level();

  std::vector<int> encode(std::string_view utf8_text) const;
  // Concatenated bytes of the tokens; throws qkv::Error naming an id outside [0, vocab_size()).
  std::string decode(const std::vector<int>& ids) const;
  // The vocabulary string of one token, e.g. "Ġthe" for 262.
  std::string token_string(int id) const;
  // The bytes one token stands for, e.g. " the" for 262.
  std::string token_text(int id) const;
  int vocab_size() const;

  // Writes dir/vocab.json (ordered by id) and dir/merges.txt ("#version: 0.2" first line), each
  // through a temporary file and a rename. Creates dir if needed.
  void write_files(const std::string& dir) const;

  struct Impl;

 private:
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

}  // namespace qkv
