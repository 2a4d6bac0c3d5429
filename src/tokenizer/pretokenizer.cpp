// GPT-2's pre-tokenizer regex through PCRE2, and the bytes_to_unicode alphabet.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <memory>
#include <utility>
#include <vector>
#include <string>

#include "qkv/error.hpp"
#include "tokenizer/detail.hpp"

namespace qkv::tokenizer_detail {
namespace {

// The pattern of OpenAI's encoder.py, verbatim.
constexpr const char* kPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

}  // namespace

const Pattern& gpt2_regex() {
  static const Pattern r(kPattern, "GPT-2's pre-tokenizer pattern");
  return r;
}

const std::array<char32_t, 256>& bytes_to_unicode() {
  static const std::array<char32_t, 256> table = [] {
    std::array<char32_t, 256> t{};
    auto printable = [](int b) {
      return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) t[b] = printable(b) ? static_cast<char32_t>(b) : next++;
    return t;
  }();
  return table;
}

std::string byte_symbol(unsigned char b) {
  std::string s;
  append_utf8(s, bytes_to_unicode()[b]);
  return s;
}

std::string symbols_to_bytes(std::string_view token) {
  // Inverse of bytes_to_unicode over its range U+0000..U+0143; -1 where no byte maps there.
  static const std::array<int, 324> inverse = [] {
    std::array<int, 324> inv;
    inv.fill(-1);
    for (int b = 0; b < 256; ++b) inv[bytes_to_unicode()[b]] = b;
    return inv;
  }();
  std::string out;
  out.reserve(token.size());
  size_t i = 0;
  while (i < token.size()) {
    const auto c0 = static_cast<unsigned char>(token[i]);
    size_t len = c0 < 0x80 ? 1 : (c0 >> 5) == 0x6 ? 2 : (c0 >> 4) == 0xE ? 3 : (c0 >> 3) == 0x1E ? 4 : 1;
    if (i + len > token.size()) len = 1;
    char32_t cp = len == 1 ? c0 : len == 2 ? (c0 & 0x1F) : len == 3 ? (c0 & 0x0F) : (c0 & 0x07);
    for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(token[i + k]) & 0x3F);
    if (cp < inverse.size() && inverse[cp] >= 0 && (len > 1 || c0 < 0x80)) {
      out += static_cast<char>(inverse[cp]);
    } else {
      out.append(token.substr(i, len));  // not in the alphabet: the character's own bytes
    }
    i += len;
  }
  return out;
}


Pattern::Pattern(const std::string& pattern, const std::string& what) {
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  // MATCH_INVALID_UTF: invalid UTF-8 in the subject is never matched (and never an error), so
  // any byte string can be split; the unmatched runs are left between the matches.
  auto* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                             PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &err_offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    data_error(what + ": PCRE2 cannot compile the pattern at offset " + std::to_string(err_offset) + ": " +
               reinterpret_cast<const char*>(msg));
  }
  jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;  // else the interpreter runs it
  code_ = code;
}

Pattern::~Pattern() {
  pcre2_code_free(static_cast<pcre2_code*>(code_));
}

Pattern::Matcher::Matcher(const Pattern& p) : p_(p) {
  md_ = pcre2_match_data_create_from_pattern(static_cast<pcre2_code*>(p.code_), nullptr);
  if (md_ == nullptr) data_error("tokenizer: out of memory for PCRE2 match data");
}

Pattern::Matcher::~Matcher() {
  pcre2_match_data_free(static_cast<pcre2_match_data*>(md_));
}

bool Pattern::Matcher::find(std::string_view text, size_t off, size_t& start, size_t& end) {
  auto* code = static_cast<pcre2_code*>(p_.code_);
  auto* md = static_cast<pcre2_match_data*>(md_);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const size_t n = text.size();
  while (off < n) {
    const int rc = pcre2_match(code, subject, n, off, 0, md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) return false;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      data_error("tokenizer: pre-tokenizer regex failed at byte " + std::to_string(off) + ": " +
                 reinterpret_cast<const char*>(msg));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    start = ov[0], end = ov[1];
    if (start < off || end < start || end > n)
      data_error("tokenizer: regex made a backward match at byte " + std::to_string(off));
    if (end > start) return true;
    // An empty match: go on after one character (Hugging Face drops empty pieces).
    off = start + 1;
    while (off < n && (static_cast<unsigned char>(text[off]) & 0xC0) == 0x80) ++off;
  }
  return false;
}

void Pattern::find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& matches) const {
  Matcher m(*this);
  size_t start = 0, end = 0;
  for (size_t off = 0; m.find(text, off, start, end); off = end) matches.emplace_back(start, end);
}

void pretokenize(std::string_view text, std::vector<std::string_view>& words) {
  // The pattern matches every character of valid UTF-8, so the gaps between matches are exactly
  // the runs of invalid UTF-8: each becomes a word of its own.
  Pattern::Matcher m(gpt2_regex());
  size_t off = 0, start = 0, end = 0;
  while (m.find(text, off, start, end)) {
    if (start > off) words.push_back(text.substr(off, start - off));
    words.push_back(text.substr(start, end - start));
    off = end;
  }
  if (off < text.size()) words.push_back(text.substr(off));
}

bool pretokenizer_uses_jit() {
  return gpt2_regex().jit();
}

}  // namespace qkv::tokenizer_detail
