// Hugging Face tokenizer.json (+ tokenizer_config.json): loading with errors that name the file and
// the key, and encoding exactly as the `tokenizers` library does for BPE models (see tokenizer.hpp).
#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/stringpiece.h>

#include <algorithm>
#include <cctype>
#include <functional>
#include <optional>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "qkv/error.hpp"
#include "qkv/io/mapped_file.hpp"
#include "qkv/tokenizer.hpp"
#include "tokenizer/detail.hpp"
#include "tokenizer/impl.hpp"

namespace qkv {
namespace tokenizer_detail {

using json = nlohmann::json;

namespace {

constexpr const char* kSpace = "\xE2\x96\x81";  // ▁ U+2581, SentencePiece's space
// Ids above this are refused (a vocabulary is at most a few hundred thousand tokens; this bounds
// the allocation a malformed file can ask for).
constexpr int64_t kMaxId = 16 * 1024 * 1024;

std::string read_whole(const std::string& path) {
  const io::MappedFile f = io::MappedFile::open(path);
  return std::string(reinterpret_cast<const char*>(f.data()), f.size());
}

std::string found_kind(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return v.get<bool>() ? "true" : "false";
    case json::value_t::string: {
      std::string s = v.get<std::string>();
      if (s.size() > 60) s = s.substr(0, 60) + "...";
      return "the string " + json(s).dump();
    }
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    default: return v.dump();
  }
}

// A JSON value with its file and key path, for errors like
// "dir/tokenizer.json: model.merges[12]: unknown token, expected ..., found ...".
struct Node {
  const json& v;
  const std::string& file;
  std::string key;

  [[noreturn]] void fail(const std::string& what) const {
    data_error(file + ": " + (key.empty() ? std::string("top level") : key) + ": " + what);
  }
  [[noreturn]] void expected(const std::string& what) const { fail("expected " + what + ", found " + found_kind(v)); }
  bool has(const char* k) const { return v.is_object() && v.contains(k) && !v.at(k).is_null(); }
  Node at(const char* k) const {
    if (!v.is_object()) expected("an object");
    auto it = v.find(k);
    const std::string sub = key.empty() ? k : key + "." + k;
    if (it == v.end()) data_error(file + ": " + sub + ": missing key");
    return {*it, file, sub};
  }
  Node at(size_t i) const { return {v.at(i), file, key + "[" + std::to_string(i) + "]"}; }
  std::string str() const {
    if (!v.is_string()) expected("a string");
    return v.get<std::string>();
  }
  bool boolean() const {
    if (!v.is_boolean()) expected("true or false");
    return v.get<bool>();
  }
  bool boolean_or(const char* k, bool dflt) const { return has(k) ? at(k).boolean() : dflt; }
  std::string str_or(const char* k, const std::string& dflt) const { return has(k) ? at(k).str() : dflt; }
  int64_t integer() const {
    if (!v.is_number_integer()) expected("an integer");
    return v.get<int64_t>();
  }
  const json& arr() const {
    if (!v.is_array()) expected("an array");
    return v;
  }
  const json& obj() const {
    if (!v.is_object()) expected("an object");
    return v;
  }
  std::string type() const { return at("type").str(); }
};

json parse_json(const std::string& file) {
  const std::string text = read_whole(file);
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    data_error(file + ": not valid JSON: " + e.what());
  }
}

// ---- Unicode helpers ----

size_t utf8_len(unsigned char c0) {
  return c0 < 0x80 ? 1 : (c0 >> 5) == 0x6 ? 2 : (c0 >> 4) == 0xE ? 3 : (c0 >> 3) == 0x1E ? 4 : 1;
}

// Offset of the first byte that is not valid UTF-8, or npos.
size_t invalid_utf8_at(std::string_view s) {
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    char32_t cp, min;
    if ((c >> 5) == 0x6) len = 2, cp = c & 0x1F, min = 0x80;
    else if ((c >> 4) == 0xE) len = 3, cp = c & 0x0F, min = 0x800;
    else if ((c >> 3) == 0x1E) len = 4, cp = c & 0x07, min = 0x10000;
    else return i;
    if (i + len > n) return i;
    for (size_t k = 1; k < len; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += len;
  }
  return std::string_view::npos;
}

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  if (from.empty() || s.find(from) == std::string::npos) return;
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  for (size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
    out.append(s, pos, hit - pos);
    out.append(to);
  }
  out.append(s, pos, std::string::npos);
  s = std::move(out);
}

bool ascii_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// ---- pipeline pieces ----

enum class Behavior { Isolated, Removed, MergedWithPrevious, MergedWithNext, Contiguous };

struct NormStep {
  enum Kind { Prepend, Replace, Unicode } kind;
  std::string a, b;                        // Prepend: a; Replace: a -> b (literal)
  std::shared_ptr<const Pattern> re;       // Replace with a Regex pattern
  const icu::Normalizer2* form = nullptr;  // Unicode
};

struct PreStep {
  enum Kind { Split, ByteLevel, Metaspace } kind = Split;
  std::string literal;  // Split with a String pattern (also Metaspace's split on the replacement)
  std::shared_ptr<const Pattern> re;
  Behavior behavior = Behavior::Isolated;
  bool invert = false;
  bool add_prefix_space = false, use_regex = false;  // ByteLevel
  std::string replacement;                           // Metaspace
  enum Scheme { Always, First, Never } scheme = Always;
  bool split = true;
};

struct AddedToken {
  std::string content;  // as matched (normalized tokens: their content normalized)
  int id;
  bool lstrip, rstrip, single_word;
};

// Byte trie over added-token contents: the longest token at a position in O(its length).
struct Trie {
  std::unordered_map<uint64_t, int> edges;  // (node << 8 | byte) -> child
  std::vector<int> token;                    // node -> index into tokens, -1
  std::vector<AddedToken> tokens;
  std::array<bool, 256> first{};
  Trie() : token{-1} {}
  bool empty() const { return tokens.empty(); }
  void add(AddedToken t) {
    if (t.content.empty()) return;
    int node = 0;
    for (unsigned char c : t.content) {
      const uint64_t k = (static_cast<uint64_t>(node) << 8) | c;
      auto it = edges.find(k);
      if (it == edges.end()) {
        it = edges.emplace(k, static_cast<int>(token.size())).first;
        token.push_back(-1);
      }
      node = it->second;
    }
    first[static_cast<unsigned char>(t.content[0])] = true;
    token[node] = static_cast<int>(tokens.size());
    tokens.push_back(std::move(t));
  }
};

bool word_char_before(std::string_view s, size_t pos) {
  if (pos == 0) return false;
  size_t i = pos - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  const auto c = static_cast<unsigned char>(s[i]);
  return c >= 0x80 || std::isalnum(c) || c == '_';
}
bool word_char_at(std::string_view s, size_t pos) {
  if (pos >= s.size()) return false;
  const auto c = static_cast<unsigned char>(s[pos]);
  return c >= 0x80 || std::isalnum(c) || c == '_';
}

// Splits text on the trie's tokens (leftmost, then longest; lstrip/rstrip absorb whitespace;
// single_word tokens only between non-word characters): emit(offset, piece, -1) for text between
// tokens, emit(offset, content, id) for a token.
template <class F>
void split_added(const Trie& trie, std::string_view text, F&& emit) {
  const size_t n = text.size();
  size_t piece = 0, pos = 0;
  while (pos < n) {
    if (!trie.first[static_cast<unsigned char>(text[pos])]) {
      ++pos;
      continue;
    }
    int node = 0, best = -1;
    size_t best_end = 0;
    for (size_t i = pos; i < n; ++i) {
      auto it = trie.edges.find((static_cast<uint64_t>(node) << 8) | static_cast<unsigned char>(text[i]));
      if (it == trie.edges.end()) break;
      node = it->second;
      if (trie.token[node] >= 0) best = trie.token[node], best_end = i + 1;
    }
    if (best >= 0) {
      const AddedToken& t = trie.tokens[best];
      if (t.single_word && (word_char_before(text, pos) || word_char_at(text, best_end))) best = -1;
    }
    if (best < 0) {
      ++pos;
      continue;
    }
    const AddedToken& t = trie.tokens[best];
    size_t s = pos, e = best_end;
    if (t.lstrip)
      while (s > piece && ascii_space(text[s - 1])) --s;
    if (t.rstrip)
      while (e < n && ascii_space(text[e])) ++e;
    if (s > piece) emit(piece, text.substr(piece, s - piece), -1);
    emit(s, text.substr(s, e - s), t.id);
    piece = pos = e;
  }
  if (piece < n) emit(piece, text.substr(piece), -1);
}

// Hugging Face's SplitDelimiterBehavior over a word's matches.
void split_by(const std::string& word, const std::vector<std::pair<size_t, size_t>>& m, Behavior b, bool invert,
              std::vector<std::string>& out) {
  struct Piece {
    size_t s, e;
    bool match;
  };
  std::vector<Piece> ps;
  size_t off = 0;
  for (const auto& [s, e] : m) {
    if (s > off) ps.push_back({off, s, invert});
    ps.push_back({s, e, !invert});
    off = e;
  }
  if (off < word.size()) ps.push_back({off, word.size(), invert});
  std::vector<std::pair<size_t, size_t>> res;
  switch (b) {
    case Behavior::Isolated:
      for (const Piece& p : ps) res.emplace_back(p.s, p.e);
      break;
    case Behavior::Removed:
      for (const Piece& p : ps)
        if (!p.match) res.emplace_back(p.s, p.e);
      break;
    case Behavior::MergedWithPrevious: {
      bool prev_match = false;
      for (const Piece& p : ps) {
        if (p.match && !prev_match && !res.empty()) res.back().second = p.e;
        else res.emplace_back(p.s, p.e);
        prev_match = p.match;
      }
      break;
    }
    case Behavior::MergedWithNext: {
      bool prev_match = false;
      for (size_t i = ps.size(); i-- > 0;) {
        const Piece& p = ps[i];
        if (p.match && !prev_match && !res.empty()) res.back().first = p.s;
        else res.emplace_back(p.s, p.e);
        prev_match = p.match;
      }
      std::reverse(res.begin(), res.end());
      break;
    }
    case Behavior::Contiguous: {
      bool prev_match = false;
      for (const Piece& p : ps) {
        if (p.match && prev_match && !res.empty()) res.back().second = p.e;
        else res.emplace_back(p.s, p.e);
        prev_match = p.match;
      }
      break;
    }
  }
  for (const auto& [s, e] : res)
    if (e > s) out.push_back(word.substr(s, e - s));
}

void find_literal(std::string_view s, std::string_view lit, std::vector<std::pair<size_t, size_t>>& m) {
  if (lit.empty()) return;
  for (size_t hit = s.find(lit); hit != std::string_view::npos; hit = s.find(lit, hit + lit.size()))
    m.emplace_back(hit, hit + lit.size());
}

}  // namespace

struct HfPipeline {
  std::vector<NormStep> norm;
  std::vector<PreStep> pre;
  Trie raw, normalized;  // added tokens matched in the raw text / in the normalized pieces
  bool byte_level = false;
  bool byte_fallback = false;
  int unk = -1;
  bool fuse_unk = false;
  bool ignore_merges = false;
  IdMap vocab;  // char mode: vocab string -> id; byte mode: token bytes -> id
  std::array<int, 256> fallback{};
  size_t strip_leading = 0;     // decoder: spaces stripped from the start of the whole text
  bool join_with_space = false;  // no decoder: HF joins the tokens with spaces

  std::string normalize(std::string_view s) const;
  void pretokenize(std::string s, bool first, std::vector<std::string>& words) const;
  void model(const Tokenizer::Impl& impl, std::string_view word, std::vector<int>& out) const;
};

void destroy(const HfPipeline* p) {
  delete p;
}

std::string HfPipeline::normalize(std::string_view in) const {
  std::string s(in);
  for (const NormStep& n : norm) {
    switch (n.kind) {
      case NormStep::Prepend:
        if (!s.empty()) s.insert(0, n.a);
        break;
      case NormStep::Replace:
        if (n.re) {
          std::vector<std::pair<size_t, size_t>> m;
          n.re->find_all(s, m);
          if (m.empty()) break;
          std::string out;
          size_t off = 0;
          for (const auto& [a, b] : m) out.append(s, off, a - off).append(n.b), off = b;
          out.append(s, off, std::string::npos);
          s = std::move(out);
        } else {
          replace_all(s, n.a, n.b);
        }
        break;
      case NormStep::Unicode: {
        bool ascii = true;
        for (char c : s) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
        if (ascii) break;  // every normal form leaves ASCII as it is
        UErrorCode st = U_ZERO_ERROR;
        std::string out;
        icu::StringByteSink<std::string> sink(&out);
        n.form->normalizeUTF8(0, icu::StringPiece(s.data(), static_cast<int32_t>(s.size())), sink, nullptr, st);
        if (U_FAILURE(st)) data_error(std::string("tokenizer: Unicode normalization failed: ") + u_errorName(st));
        s = std::move(out);
        break;
      }
    }
  }
  return s;
}

void HfPipeline::pretokenize(std::string s, bool first, std::vector<std::string>& words) const {
  std::vector<std::string> cur, next;
  cur.push_back(std::move(s));
  std::vector<std::pair<size_t, size_t>> m;
  for (const PreStep& p : pre) {
    next.clear();
    for (size_t wi = 0; wi < cur.size(); ++wi) {
      std::string& w = cur[wi];
      const bool is_first = first && wi == 0;
      m.clear();
      switch (p.kind) {
        case PreStep::Split:
          if (p.re) p.re->find_all(w, m);
          else find_literal(w, p.literal, m);
          split_by(w, m, p.behavior, p.invert, next);
          break;
        case PreStep::ByteLevel:
          if (p.add_prefix_space && !w.empty() && w[0] != ' ') w = " " + w;
          if (p.use_regex) {
            gpt2_regex().find_all(w, m);
            split_by(w, m, Behavior::Isolated, false, next);
          } else if (!w.empty()) {
            next.push_back(std::move(w));
          }
          break;
        case PreStep::Metaspace:
          replace_all(w, " ", p.replacement);
          if (!w.empty() && !w.starts_with(p.replacement) &&
              (p.scheme == PreStep::Always || (p.scheme == PreStep::First && is_first)))
            w.insert(0, p.replacement);
          if (p.split) {
            find_literal(w, p.replacement, m);
            split_by(w, m, Behavior::MergedWithNext, false, next);
          } else if (!w.empty()) {
            next.push_back(std::move(w));
          }
          break;
      }
    }
    std::swap(cur, next);
    if (cur.empty()) return;
  }
  for (std::string& w : cur)
    if (!w.empty()) words.push_back(std::move(w));
}

void HfPipeline::model(const Tokenizer::Impl& impl, std::string_view word, std::vector<int>& out) const {
  if (word.empty()) return;
  if (ignore_merges) {
    auto it = vocab.find(word);
    if (it != vocab.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (impl.cached(word, out)) return;
  std::vector<int> sym;
  sym.reserve(word.size());
  int unk_pending = -1;  // HF: an unknown run is added when the next known character arrives
  const auto flush_unk = [&] {
    if (unk_pending >= 0) sym.push_back(unk_pending), unk_pending = -1;
  };
  const auto unknown = [&] {
    if (unk < 0) return;  // no unk token: HF drops the character
    if (unk_pending >= 0 && !fuse_unk) sym.push_back(unk_pending);
    unk_pending = unk;
  };
  if (byte_level) {
    for (char c : word) {
      const int id = impl.byte_id[static_cast<unsigned char>(c)];
      if (id >= 0) {
        flush_unk();
        sym.push_back(id);
      } else {
        unknown();
      }
    }
  } else {
    for (size_t i = 0; i < word.size();) {
      size_t len = std::min(utf8_len(static_cast<unsigned char>(word[i])), word.size() - i);
      const std::string_view ch = word.substr(i, len);
      i += len;
      auto it = vocab.find(ch);
      if (it != vocab.end()) {
        flush_unk();
        sym.push_back(it->second);
        continue;
      }
      if (byte_fallback) {
        bool all = true;
        for (char c : ch) all = all && fallback[static_cast<unsigned char>(c)] >= 0;
        if (all) {  // (HF adds them without flushing a pending unknown run first)
          for (char c : ch) sym.push_back(fallback[static_cast<unsigned char>(c)]);
          continue;
        }
      }
      unknown();
    }
  }
  flush_unk();
  const size_t first = out.size();
  impl.bpe_ids(sym, /*hf_order=*/true, out);
  impl.remember(word, out.data() + first, out.size() - first);
}

int bos_id_or_throw(const Tokenizer::Impl& impl) {
  if (impl.bos < 0)
    usage_error("the tokenizer has no BOS token (no bos_token in tokenizer_config.json or special_tokens_map.json, "
                "and no post-processor that adds one), so BOS cannot be added");
  return impl.bos;
}

std::vector<int> encode_hf(const Tokenizer::Impl& impl, std::string_view text, Bos bos) {
  if (const size_t bad = invalid_utf8_at(text); bad != std::string_view::npos)
    data_error("tokenizer: text is not valid UTF-8 at byte " + std::to_string(bad) +
               " (a tokenizer.json tokenizer reads Unicode text, as Hugging Face's does)");
  const HfPipeline& p = *impl.hf;
  std::vector<int> ids;
  ids.reserve(text.size() / 3 + 4);
  const bool prefix_has_bos = !impl.prefix.empty() && impl.prefix.front() == impl.bos;
  if (bos == Bos::Yes && !prefix_has_bos) ids.push_back(bos_id_or_throw(impl));
  for (size_t i = 0; i < impl.prefix.size(); ++i)
    if (!(bos == Bos::No && i == 0 && prefix_has_bos)) ids.push_back(impl.prefix[i]);

  std::vector<std::string> words;
  const auto run = [&](std::string s, bool first) {
    words.clear();
    p.pretokenize(std::move(s), first, words);
    for (const std::string& w : words) p.model(impl, w, ids);
  };
  split_added(p.raw, text, [&](size_t off, std::string_view piece, int id) {
    if (id >= 0) {
      ids.push_back(id);
      return;
    }
    std::string s = p.normalize(piece);
    if (p.normalized.empty()) {
      run(std::move(s), off == 0);
      return;
    }
    split_added(p.normalized, s, [&](size_t off2, std::string_view sub, int id2) {
      if (id2 >= 0) ids.push_back(id2);
      else run(std::string(sub), off == 0 && off2 == 0);
    });
  });
  ids.insert(ids.end(), impl.suffix.begin(), impl.suffix.end());
  return ids;
}

std::string decode_hf(const Tokenizer::Impl& impl, const std::vector<int>& ids) {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    impl.check_id(ids[i], "decode");
    if (impl.hf->join_with_space && i > 0) out += ' ';
    out += impl.token_bytes[static_cast<size_t>(ids[i])];
  }
  size_t k = 0;
  while (k < impl.hf->strip_leading && k < out.size() && out[k] == ' ') ++k;
  return out.substr(k);
}

namespace {

Behavior behavior_of(const Node& n) {
  const std::string b = n.str();
  if (b == "Isolated") return Behavior::Isolated;
  if (b == "Removed") return Behavior::Removed;
  if (b == "MergedWithPrevious") return Behavior::MergedWithPrevious;
  if (b == "MergedWithNext") return Behavior::MergedWithNext;
  if (b == "Contiguous") return Behavior::Contiguous;
  n.fail("unsupported split behavior \"" + b + "\", expected Isolated, Removed, MergedWithPrevious, MergedWithNext or Contiguous");
}

// A {"String": s} or {"Regex": r} pattern.
void pattern_of(const Node& n, std::string& literal, std::shared_ptr<const Pattern>& re) {
  if (n.has("String")) {
    literal = n.at("String").str();
  } else if (n.has("Regex")) {
    const Node r = n.at("Regex");
    re = std::make_shared<const Pattern>(r.str(), r.file + ": " + r.key);
  } else {
    n.expected("{\"String\": ...} or {\"Regex\": ...}");
  }
}

void add_normalizer(const Node& n, HfPipeline& p) {
  if (n.v.is_null()) return;
  const std::string t = n.type();
  if (t == "Sequence") {
    const Node list = n.at("normalizers");
    for (size_t i = 0; i < list.arr().size(); ++i) add_normalizer(list.at(i), p);
  } else if (t == "Prepend") {
    p.norm.push_back({NormStep::Prepend, n.at("prepend").str(), "", nullptr, nullptr});
  } else if (t == "Replace") {
    NormStep s{NormStep::Replace, "", n.at("content").str(), nullptr, nullptr};
    pattern_of(n.at("pattern"), s.a, s.re);
    p.norm.push_back(std::move(s));
  } else if (t == "NFC" || t == "NFD" || t == "NFKC" || t == "NFKD") {
    UErrorCode st = U_ZERO_ERROR;
    const icu::Normalizer2* f = t == "NFC"    ? icu::Normalizer2::getNFCInstance(st)
                                : t == "NFD"  ? icu::Normalizer2::getNFDInstance(st)
                                : t == "NFKC" ? icu::Normalizer2::getNFKCInstance(st)
                                              : icu::Normalizer2::getNFKDInstance(st);
    if (U_FAILURE(st) || f == nullptr) n.fail(std::string("ICU has no ") + t + " normalizer: " + u_errorName(st));
    p.norm.push_back({NormStep::Unicode, "", "", nullptr, f});
  } else {
    n.at("type").fail("unsupported normalizer \"" + t + "\", expected Sequence, Prepend, Replace, NFC, NFD, NFKC or NFKD");
  }
}

PreStep::Scheme scheme_of(const Node& n) {
  if (n.has("prepend_scheme")) {
    const Node s = n.at("prepend_scheme");
    const std::string v = s.str();
    if (v == "always") return PreStep::Always;
    if (v == "first") return PreStep::First;
    if (v == "never") return PreStep::Never;
    s.fail("unsupported prepend_scheme \"" + v + "\", expected always, first or never");
  }
  return n.boolean_or("add_prefix_space", true) ? PreStep::Always : PreStep::Never;
}

void add_pre_tokenizer(const Node& n, HfPipeline& p) {
  if (n.v.is_null()) return;
  const std::string t = n.type();
  if (t == "Sequence") {
    const Node list = n.at("pretokenizers");
    for (size_t i = 0; i < list.arr().size(); ++i) add_pre_tokenizer(list.at(i), p);
  } else if (t == "Split") {
    PreStep s;
    s.kind = PreStep::Split;
    pattern_of(n.at("pattern"), s.literal, s.re);
    s.behavior = behavior_of(n.at("behavior"));
    s.invert = n.boolean_or("invert", false);
    p.pre.push_back(std::move(s));
  } else if (t == "ByteLevel") {
    PreStep s;
    s.kind = PreStep::ByteLevel;
    s.add_prefix_space = n.boolean_or("add_prefix_space", true);
    s.use_regex = n.boolean_or("use_regex", true);
    p.pre.push_back(std::move(s));
    p.byte_level = true;
  } else if (t == "Metaspace") {
    PreStep s;
    s.kind = PreStep::Metaspace;
    s.replacement = n.str_or("replacement", kSpace);
    if (s.replacement.empty()) n.at("replacement").fail("expected one character, found an empty string");
    s.scheme = scheme_of(n);
    s.split = n.boolean_or("split", true);
    p.pre.push_back(std::move(s));
  } else if (t == "Digits") {
    PreStep s;
    s.kind = PreStep::Split;
    const bool individual = n.boolean_or("individual_digits", false);
    s.re = std::make_shared<const Pattern>(individual ? R"(\p{N})" : R"(\p{N}+)", n.file + ": " + n.key);
    p.pre.push_back(std::move(s));
  } else {
    n.at("type").fail("unsupported pre-tokenizer \"" + t +
                      "\", expected Sequence, Split, ByteLevel, Metaspace or Digits");
  }
}

// Per-token decoder transforms and the whole-text strip, applied to token_bytes at load.
struct Decoder {
  bool byte_level = false, byte_fallback = false, none = false;
  std::vector<std::pair<std::string, std::string>> replace;
  size_t strip_token = 0;  // Strip before Fuse: per token
  size_t strip_text = 0;   // Strip after Fuse, or Metaspace's prefix
  bool fused = false;
};

void add_decoder(const Node& n, Decoder& d) {
  if (n.v.is_null()) {
    d.none = true;
    return;
  }
  const std::string t = n.type();
  if (t == "Sequence") {
    const Node list = n.at("decoders");
    for (size_t i = 0; i < list.arr().size(); ++i) add_decoder(list.at(i), d);
  } else if (t == "ByteLevel") {
    d.byte_level = true;
  } else if (t == "ByteFallback") {
    d.byte_fallback = true;
  } else if (t == "Fuse") {
    d.fused = true;
  } else if (t == "Replace") {
    const Node pat = n.at("pattern");
    if (!pat.has("String")) pat.fail("unsupported decoder pattern, expected {\"String\": ...}");
    d.replace.emplace_back(pat.at("String").str(), n.at("content").str());
  } else if (t == "Strip") {
    const std::string content = n.str_or("content", " ");
    if (content != " ") n.at("content").fail("unsupported Strip content, expected \" \"");
    const int64_t start = n.has("start") ? n.at("start").integer() : 0;
    if (start < 0 || start > 64) n.at("start").fail("expected 0..64, found " + std::to_string(start));
    (d.fused ? d.strip_text : d.strip_token) = static_cast<size_t>(start);
  } else if (t == "Metaspace") {
    d.replace.emplace_back(n.str_or("replacement", kSpace), " ");
    if (scheme_of(n) != PreStep::Never) d.strip_text = 1;
  } else {
    n.at("type").fail("unsupported decoder \"" + t +
                      "\", expected Sequence, ByteLevel, ByteFallback, Fuse, Replace, Strip or Metaspace");
  }
}

std::string decode_token(const Decoder& d, const std::string& s) {
  if (d.none) return s;
  if (d.byte_level) return symbols_to_bytes(s);
  if (d.byte_fallback && s.size() == 6 && s.starts_with("<0x") && s[5] == '>' && std::isxdigit(static_cast<unsigned char>(s[3])) &&
      std::isxdigit(static_cast<unsigned char>(s[4])))
    return std::string(1, static_cast<char>(std::stoi(s.substr(3, 2), nullptr, 16)));
  std::string out = s;
  for (const auto& [from, to] : d.replace) replace_all(out, from, to);
  size_t k = 0;
  while (k < d.strip_token && k < out.size() && out[k] == ' ') ++k;
  return out.substr(k);
}

// A bos_token/eos_token entry: a string, {"content": "..."} or null.
std::optional<std::string> special_name(const Node& n) {
  if (n.v.is_null()) return std::nullopt;
  if (n.v.is_string()) return n.v.get<std::string>();
  if (n.v.is_object()) return n.at("content").str();
  n.expected("a string, {\"content\": ...} or null");
}

}  // namespace
}  // namespace tokenizer_detail

namespace tokenizer_detail {
namespace {

// What from_hf_json builds, step by step: the implementation and its HF pipeline, the vocabulary by
// string, the added tokens' names and the id range.
struct HfBuild {
  HfBuild(const std::string& f, const std::string& c, Node r) : file(f), config_file(c), root(std::move(r)) {}
  const std::string& file;
  const std::string& config_file;
  Node root;
  json cfg;  // tokenizer_config.json, or null
  std::shared_ptr<Tokenizer::Impl> impl = std::make_shared<Tokenizer::Impl>();
  std::unique_ptr<HfPipeline> pipe = std::make_unique<HfPipeline>();
  IdMap by_string;
  std::vector<std::pair<std::string, int>> added_names;
  size_t n = 0;  // ids 0 .. n-1
};

// model: type BPE (no dropout, no subword prefix or suffix), its flags, and the vocabulary with the added
// tokens' ids (n = the largest id + 1; each vocabulary id once).
void read_vocabulary(HfBuild& b, const Node& model) {
  const std::string& file = b.file;
  HfPipeline& p = *b.pipe;
  const std::string type = model.has("type") ? model.at("type").str() : (model.has("merges") ? "BPE" : "");
  if (type != "BPE")
    (model.has("type") ? model.at("type") : model)
        .fail("unsupported model type \"" + type + "\", expected BPE (WordPiece, Unigram and WordLevel are not supported)");
  if (model.has("dropout")) {
    const Node d = model.at("dropout");
    if (!d.v.is_number() || d.v.get<double>() != 0.0) d.fail("unsupported: BPE dropout, expected null or 0");
  }
  for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (model.has(k) && !model.at(k).str().empty()) model.at(k).fail("unsupported: expected null or \"\"");
  p.byte_fallback = model.boolean_or("byte_fallback", false);
  p.fuse_unk = model.boolean_or("fuse_unk", false);
  p.ignore_merges = model.boolean_or("ignore_merges", false);

  const Node vocab = model.at("vocab");
  int64_t max_id = -1;
  std::vector<std::pair<std::string, int>> entries;
  entries.reserve(vocab.obj().size());
  for (auto it = vocab.v.begin(); it != vocab.v.end(); ++it) {
    const auto entry = [&] { return Node{it.value(), file, vocab.key + "." + json(it.key()).dump()}; };
    if (!it.value().is_number_integer()) entry().integer();  // throws, naming the key
    const int64_t id = it.value().get<int64_t>();
    if (id < 0 || id > kMaxId) entry().fail("id out of range, expected 0.." + std::to_string(kMaxId) + ", found " + std::to_string(id));
    max_id = std::max(max_id, id);
    entries.emplace_back(it.key(), static_cast<int>(id));
  }
  static const json kNoAddedTokens = json::array();
  const Node added = b.root.has("added_tokens") ? b.root.at("added_tokens") : Node{kNoAddedTokens, file, "added_tokens"};
  for (size_t i = 0; i < added.arr().size(); ++i) {
    const Node id = added.at(i).at("id");
    if (id.integer() < 0 || id.integer() > kMaxId)
      id.fail("id out of range, expected 0.." + std::to_string(kMaxId) + ", found " + std::to_string(id.integer()));
    max_id = std::max(max_id, id.integer());
  }
  if (max_id < 0) vocab.fail("expected a non-empty vocabulary, found none");
  b.n = static_cast<size_t>(max_id) + 1;
  const size_t n = b.n;
  b.impl->token_strings.assign(n, "");
  std::vector<char> seen(n, 0);
  IdMap& by_string = b.by_string;
  by_string.reserve(entries.size());
  for (const auto& [tok, id] : entries) {
    if (seen[id]) vocab.fail("duplicate id " + std::to_string(id) + ", expected each id once (tokens " +
                             json(b.impl->token_strings[id]).dump() + " and " + json(tok).dump() + ")");
    seen[id] = 1;
    b.impl->token_strings[id] = tok;
    by_string.emplace(tok, id);
  }

}

// The added tokens (tokenizer_config.json's split_special_tokens: special ones are plain text), matched
// before the pipeline, normalized or raw as each says.
void read_added_tokens(HfBuild& b) {
  const std::string& file = b.file;
  HfPipeline& p = *b.pipe;
  static const json kNoAddedTokens = json::array();
  const Node added = b.root.has("added_tokens") ? b.root.at("added_tokens") : Node{kNoAddedTokens, file, "added_tokens"};
  const bool split_special = !b.config_file.empty() && Node{b.cfg, b.config_file, ""}.boolean_or("split_special_tokens", false);
  for (size_t i = 0; i < added.arr().size(); ++i) {
    const Node a = added.at(i);
    const int id = static_cast<int>(a.at("id").integer());
    const std::string content = a.at("content").str();
    if (content.empty()) a.at("content").fail("expected a non-empty token, found an empty string");
    b.impl->token_strings[id] = content;  // (HF: an added token's content wins over the vocabulary's string)
    AddedToken t{content, id, a.boolean_or("lstrip", false), a.boolean_or("rstrip", false),
                     a.boolean_or("single_word", false)};
    b.added_names.emplace_back(content, id);
    if (split_special && a.boolean_or("special", false)) continue;  // matched as plain text
    if (a.boolean_or("normalized", false)) {
      t.content = p.normalize(content);
      p.normalized.add(std::move(t));
    } else {
      p.raw.add(std::move(t));
    }
  }

}

// The merges, in rank order (a repeated pair takes its last rank, as HF's map does), and the unknown token.
void read_merges(HfBuild& build, const Node& model) {
  HfPipeline& p = *build.pipe;
  const IdMap& by_string = build.by_string;
  const Node merges = model.at("merges");
  build.impl->merges.reserve(merges.arr().size());
  build.impl->merge_of.reserve(merges.v.size());
  std::string left, right;
  for (size_t i = 0; i < merges.v.size(); ++i) {
    const json& mv = merges.v[i];
    // The fast path: ["left", "right"] with both strings.
    if (mv.is_array() && mv.size() == 2 && mv[0].is_string() && mv[1].is_string()) {
      const std::string& a = mv[0].get_ref<const std::string&>();
      const std::string& b = mv[1].get_ref<const std::string&>();
      auto l = by_string.find(a), r = by_string.find(b);
      if (l != by_string.end() && r != by_string.end()) {
        left = a;
        left += b;
        if (auto res = by_string.find(left); res != by_string.end()) {
          const int rank = static_cast<int>(build.impl->merges.size());
          build.impl->merges.emplace_back(l->second, r->second);
          build.impl->merge_of.insert_or_assign(pair_key(l->second, r->second), Tokenizer::Impl::Merge{rank, res->second});
          continue;
        }
      }
    }
    const Node m = merges.at(i);  // the general path, and every error with its key
    if (m.v.is_string()) {
      const std::string s = m.v.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        m.expected("\"left right\" (two tokens separated by one space)");
      left = s.substr(0, sp), right = s.substr(sp + 1);
    } else if (m.v.is_array() && m.v.size() == 2) {
      left = m.at(size_t{0}).str(), right = m.at(size_t{1}).str();
    } else {
      m.expected("\"left right\" or [\"left\", \"right\"]");
    }
    auto l = by_string.find(left), r = by_string.find(right), res = by_string.find(left + right);
    if (l == by_string.end()) m.fail("unknown token, expected a token of model.vocab, found " + json(left).dump());
    if (r == by_string.end()) m.fail("unknown token, expected a token of model.vocab, found " + json(right).dump());
    if (res == by_string.end())
      m.fail("merged token not in vocabulary, expected " + json(left + right).dump() + " in model.vocab, found no such token");
    const int rank = static_cast<int>(build.impl->merges.size());
    build.impl->merges.emplace_back(l->second, r->second);
    // HF collects the merges into a map: a repeated pair takes its last rank.
    build.impl->merge_of.insert_or_assign(pair_key(l->second, r->second), Tokenizer::Impl::Merge{rank, res->second});
  }
  if (model.has("unk_token")) {
    const Node u = model.at("unk_token");
    auto it = by_string.find(u.str());
    if (it == by_string.end()) u.fail("unknown token, expected a token of model.vocab, found " + json(u.str()).dump());
    p.unk = it->second;
  }

}

// The byte-level alphabet (every byte's symbol) and the byte-fallback tokens <0xNN>.
void read_alphabet(HfBuild& build) {
  HfPipeline& p = *build.pipe;
  const IdMap& by_string = build.by_string;
  build.impl->byte_id.fill(-1);
  if (p.byte_level) {
    for (int b = 0; b < 256; ++b)
      if (auto it = by_string.find(byte_symbol(static_cast<unsigned char>(b))); it != by_string.end())
        build.impl->byte_id[b] = it->second;
    p.vocab.reserve(by_string.size());
    for (const auto& [tok, id] : by_string) p.vocab.emplace(symbols_to_bytes(tok), id);
  }
  p.fallback.fill(-1);
  if (p.byte_fallback)
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      if (auto it = by_string.find(name); it != by_string.end()) p.fallback[b] = it->second;
    }

}

// The post-processor's template: the ids before (prefix) and after (suffix) the text.
void read_post_processor(const HfBuild& b, std::vector<int>& prefix, std::vector<int>& suffix) {
  const Node& root = b.root;
  const size_t n = b.n;
  if (root.has("post_processor")) {
    std::function<void(const Node&)> post = [&](const Node& pp) {
      const std::string t = pp.type();
      if (t == "Sequence") {
        const Node list = pp.at("processors");
        for (size_t i = 0; i < list.arr().size(); ++i) post(list.at(i));
      } else if (t == "TemplateProcessing") {
        const Node single = pp.at("single");
        const Node specials = pp.at("special_tokens");
        bool after = false;
        for (size_t i = 0; i < single.arr().size(); ++i) {
          const Node piece = single.at(i);
          if (piece.has("Sequence")) {
            after = true;
          } else if (piece.has("SpecialToken")) {
            const std::string name = piece.at("SpecialToken").at("id").str();
            if (!specials.obj().contains(name)) piece.fail("special token " + json(name).dump() + " not in special_tokens");
            const Node ids = specials.at(name.c_str()).at("ids");
            for (size_t k = 0; k < ids.arr().size(); ++k) {
              const Node idn = ids.at(k);
              if (idn.integer() < 0 || idn.integer() >= static_cast<int64_t>(n))
                idn.fail("token id out of range, expected 0.." + std::to_string(n - 1));
              (after ? suffix : prefix).push_back(static_cast<int>(idn.integer()));
            }
          } else {
            piece.expected("{\"Sequence\": ...} or {\"SpecialToken\": ...}");
          }
        }
      } else if (t == "RobertaProcessing" || t == "BertProcessing") {
        for (const char* k : {"cls", "sep"}) {
          const Node e = pp.at(k);
          if (!e.v.is_array() || e.v.size() != 2) e.expected("[token, id]");
          const int64_t id = e.at(size_t{1}).integer();
          if (id < 0 || id >= static_cast<int64_t>(n)) e.fail("token id out of range");
          (k[0] == 'c' ? prefix : suffix).push_back(static_cast<int>(id));
        }
      } else if (t != "ByteLevel") {
        pp.at("type").fail("unsupported post-processor \"" + t +
                           "\", expected TemplateProcessing, ByteLevel, RobertaProcessing, BertProcessing or Sequence");
      }
    };
    post(root.at("post_processor"));
  }
}

// BOS/EOS: tokenizer_config.json (+ special_tokens_map.json), else the post-processor's template.
void read_bos_eos(HfBuild& b) {
  const std::string& file = b.file;
  const std::string& config_file = b.config_file;
  const json& cfg = b.cfg;
  const IdMap& by_string = b.by_string;
  const auto id_of = [&](const std::string& name) -> int {
    for (const auto& [c, id] : b.added_names)
      if (c == name) return id;
    auto it = by_string.find(name);
    return it == by_string.end() ? -1 : it->second;
  };
  std::vector<int> prefix, suffix;
  read_post_processor(b, prefix, suffix);
  std::optional<std::string> bos_name, eos_name;
  std::optional<bool> add_bos, add_eos;
  const auto read_names = [&](const Node& c) {
    if (!bos_name && c.has("bos_token")) bos_name = special_name(c.at("bos_token"));
    if (!eos_name && c.has("eos_token")) eos_name = special_name(c.at("eos_token"));
  };
  std::string config_dir;
  if (!config_file.empty()) {
    const Node c{cfg, config_file, ""};
    read_names(c);
    if (c.has("add_bos_token")) add_bos = c.at("add_bos_token").boolean();
    if (c.has("add_eos_token")) add_eos = c.at("add_eos_token").boolean();
    b.impl->source_files.push_back(config_file);
    config_dir = std::filesystem::path(config_file).parent_path().string();
  } else {
    config_dir = std::filesystem::path(file).parent_path().string();
  }
  {
    const std::filesystem::path stm = std::filesystem::path(config_dir.empty() ? "." : config_dir) / "special_tokens_map.json";
    std::error_code ec;
    if (std::filesystem::is_regular_file(stm, ec)) {
      const json m = parse_json(stm.string());
      read_names(Node{m, stm.string(), ""});
    }
  }
  const auto resolve = [&](const std::optional<std::string>& name, const char* key) -> int {
    if (!name) return -1;
    const int id = id_of(*name);
    if (id < 0)
      data_error((config_file.empty() ? file : config_file) + ": " + key + ": unknown token, expected a token of " + file +
                 ", found " + json(*name).dump());
    return id;
  };
  b.impl->bos = resolve(bos_name, "bos_token");
  b.impl->eos = resolve(eos_name, "eos_token");
  if (b.impl->bos < 0 && !prefix.empty()) b.impl->bos = prefix.front();
  if (b.impl->eos < 0 && !suffix.empty()) b.impl->eos = suffix.back();
  if (add_bos || add_eos) {
    // transformers' LlamaTokenizerFast/GemmaTokenizerFast (and PreTrainedTokenizerFast given these
    // keys) rebuild the template: [BOS if add_bos_token] text [EOS if add_eos_token].
    const bool with_bos = add_bos ? *add_bos : (!prefix.empty() && prefix.front() == b.impl->bos);
    const bool with_eos = add_eos ? *add_eos : (!suffix.empty() && suffix.back() == b.impl->eos);
    if (with_bos && b.impl->bos < 0) data_error(config_file + ": add_bos_token: true, but there is no bos_token");
    if (with_eos && b.impl->eos < 0) data_error(config_file + ": add_eos_token: true, but there is no eos_token");
    prefix.clear(), suffix.clear();
    if (with_bos) prefix.push_back(b.impl->bos);
    if (with_eos) suffix.push_back(b.impl->eos);
  }
  b.impl->prefix = std::move(prefix);
  b.impl->suffix = std::move(suffix);

}

// One line for `qkv tokenize` and `qkv info`: the kind, the pipeline's steps, the added tokens, BOS.
std::string describe(const HfBuild& b) {
  const HfPipeline& p = *b.pipe;
  const size_t n = b.n;
  std::string d = "tokenizer.json BPE, " + std::to_string(n) + " tokens";
  d += p.byte_level ? ", byte-level" : ", characters";
  if (p.byte_fallback) d += " + byte fallback";
  for (const NormStep& s : p.norm) {
    if (s.kind == NormStep::Unicode) d += ", Unicode normalizer";
    else if (s.kind == NormStep::Prepend) d += ", prepends " + json(s.a).dump();
  }
  for (const PreStep& s : p.pre)
    if (s.kind == PreStep::Split && s.re) d += ", split regex";
    else if (s.kind == PreStep::Metaspace) d += ", Metaspace";
  if (p.ignore_merges) d += ", ignore_merges";
  d += ", " + std::to_string(b.added_names.size()) + " added tokens";
  d += b.impl->bos >= 0 ? ", BOS " + b.impl->token_strings[b.impl->bos] : ", no BOS token";
  return d;

}

}  // namespace
}  // namespace tokenizer_detail

Tokenizer Tokenizer::from_hf_json(const std::string& file, const std::string& config_file) {
  namespace td = tokenizer_detail;
  const td::json doc = td::parse_json(file);
  td::HfBuild b(file, config_file, td::Node{doc, file, ""});
  b.root.obj();
  b.impl->source_files.push_back(file);
  td::HfPipeline& p = *b.pipe;
  const td::Node model = b.root.at("model");
  model.obj();
  td::read_vocabulary(b, model);
  if (b.root.has("normalizer")) td::add_normalizer(b.root.at("normalizer"), p);
  if (b.root.has("pre_tokenizer")) td::add_pre_tokenizer(b.root.at("pre_tokenizer"), p);
  td::Decoder dec;
  static const td::json kNull;
  td::add_decoder(b.root.has("decoder") ? b.root.at("decoder") : td::Node{kNull, file, "decoder"}, dec);
  if (!config_file.empty()) {
    b.cfg = td::parse_json(config_file);
    td::Node{b.cfg, config_file, ""}.obj();
  }
  td::read_added_tokens(b);
  td::read_merges(b, model);
  td::read_alphabet(b);
  b.impl->token_bytes.resize(b.n);  // decoding
  for (size_t id = 0; id < b.n; ++id) b.impl->token_bytes[id] = td::decode_token(dec, b.impl->token_strings[id]);
  p.strip_leading = dec.strip_text;
  p.join_with_space = dec.none;
  td::read_bos_eos(b);
  b.impl->describe = td::describe(b);
  if (!p.byte_level) p.vocab = std::move(b.by_string);
  b.impl->hf.reset(b.pipe.release());
  return Tokenizer(std::move(b.impl));
}

}  // namespace qkv
