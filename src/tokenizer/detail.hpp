// Internals of the tokenizer that tests look at directly.
#pragma once
#include <array>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace qkv::tokenizer_detail {

// OpenAI's bytes_to_unicode(): byte -> code point. Printable Latin-1 bytes map to themselves, the
// other 68 bytes to U+0100.. in byte order (so space 0x20 -> U+0120 'Ġ', newline 0x0A -> U+010A 'Ċ').
const std::array<char32_t, 256>& bytes_to_unicode();
// UTF-8 of bytes_to_unicode()[b]: the vocabulary string of the single-byte token b.
std::string byte_symbol(unsigned char b);
// A vocabulary string back to the bytes it stands for. Characters outside the 256-character
// alphabet (none in GPT-2's vocabulary) stand for their own UTF-8 bytes.
std::string symbols_to_bytes(std::string_view token_string);

// Splits text into GPT-2 pre-tokens ("words") in order; the words concatenate to text exactly.
// Valid UTF-8 is split by GPT-2's regex; each run of bytes that is not valid UTF-8 becomes a word.
void pretokenize(std::string_view text, std::vector<std::string_view>& words);
// A PCRE2 pattern (UTF + UCP, JIT when available) compiled once and shared by threads.
class Pattern {
 public:
  // what names the pattern in errors, e.g. "tokenizer.json: pre_tokenizer.pattern.Regex".
  Pattern(const std::string& pattern, const std::string& what);
  ~Pattern();
  Pattern(const Pattern&) = delete;
  Pattern& operator=(const Pattern&) = delete;
  // Appends the non-empty, non-overlapping matches [start, end) in text, left to right. Invalid
  // UTF-8 is never matched.
  void find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& matches) const;
  bool jit() const { return jit_; }

  // One thread's matching state: the next non-empty match at or after off.
  class Matcher {
   public:
    explicit Matcher(const Pattern& p);
    ~Matcher();
    Matcher(const Matcher&) = delete;
    Matcher& operator=(const Matcher&) = delete;
    bool find(std::string_view text, size_t off, size_t& start, size_t& end);

   private:
    const Pattern& p_;
    void* md_ = nullptr;
  };

 private:
  void* code_ = nullptr;
  bool jit_ = false;
};
// GPT-2's pattern (also the ByteLevel pre-tokenizer's with use_regex).
const Pattern& gpt2_regex();

// Whether PCRE2 JIT-compiled the pattern on this machine (informational).
bool pretokenizer_uses_jit();

}  // namespace qkv::tokenizer_detail
