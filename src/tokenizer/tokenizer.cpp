// GPT-2 byte-level BPE: loading and validating the vocabulary and merges, the merge loop, the cache.
// (tokenizer.json is loaded in hf_tokenizer.cpp and shares the merge loop and the cache.)
#include "qkv/tokenizer.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <shared_mutex>
#include <sstream>
#include <unordered_map>
#include <utility>

#include "qkv/error.hpp"
#include "qkv/io/atomic_file.hpp"
#include "qkv/io/mapped_file.hpp"
#include "tokenizer/detail.hpp"
#include "tokenizer/impl.hpp"

namespace qkv {

namespace td = tokenizer_detail;

namespace {

// Words longer than this are not cached (they are rare and would bloat the cache).
constexpr size_t kMaxCachedWordBytes = 256;
// The cache is cleared when it reaches this many words, bounding its memory on unbounded input.
constexpr size_t kMaxCachedWords = 1 << 18;

using td::pair_key;
using td::StringHash;

std::string quote_str(std::string_view s, size_t max_bytes = 80) {
  std::string out = "\"";
  out.append(s.substr(0, max_bytes));
  if (s.size() > max_bytes) out += "...";
  return out + "\"";
}

// Through io::MappedFile: a directory or a FIFO is rejected at once instead of read or waited on.
std::string read_file(const std::string& path) {
  const io::MappedFile f = io::MappedFile::open(path);
  return std::string(reinterpret_cast<const char*>(f.data()), f.size());
}

// ---- vocab.json: a SAX parse, so duplicate keys are seen and every error can name its line ----

// A char iterator over the file that records the last character the JSON lexer read.
struct TrackingIterator {
  using iterator_category = std::forward_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;
  const char* p = nullptr;
  const char** last_read = nullptr;
  reference operator*() const {
    *last_read = p;
    return *p;
  }
  TrackingIterator& operator++() {
    ++p;
    return *this;
  }
  TrackingIterator operator++(int) {
    TrackingIterator t = *this;
    ++p;
    return t;
  }
  bool operator==(const TrackingIterator& o) const { return p == o.p; }
  bool operator!=(const TrackingIterator& o) const { return p != o.p; }
};

struct VocabEntry {
  std::string token;
  int64_t id;
  int line;
};

class VocabSax {
 public:
  using json = nlohmann::json;
  VocabSax(const std::string& file, const char* begin, const char* const* last_read)
      : file_(file), counted_to_(begin), last_read_(last_read) {}

  std::vector<VocabEntry> entries;

  bool null() { return bad_value("null"); }
  bool boolean(bool v) { return bad_value(v ? "true" : "false"); }
  bool number_integer(json::number_integer_t v) {  // only negative integers arrive here
    if (depth_ != 1) return bad_value(std::to_string(v));
    fail("token " + quote_str(key_) + ": expected an id >= 0, found " + std::to_string(v));
  }
  bool number_unsigned(json::number_unsigned_t v) {
    if (depth_ != 1) return bad_value(std::to_string(v));
    if (v > static_cast<json::number_unsigned_t>(std::numeric_limits<int>::max())) {
      fail("token " + quote_str(key_) + ": expected an id that fits in int, found " + std::to_string(v));
    }
    entries.push_back({key_, static_cast<int64_t>(v), key_line_});
    return true;
  }
  bool number_float(json::number_float_t, const json::string_t& s) { return bad_value(s); }
  bool string(json::string_t& s) { return bad_value("the string " + quote_str(s)); }
  bool binary(json::binary_t&) { return bad_value("binary data"); }
  bool start_object(std::size_t) {
    if (depth_ != 0) return bad_value("an object");
    depth_ = 1;
    return true;
  }
  bool end_object() {
    depth_ = 2;  // the one object is closed; anything after it is a parse error anyway
    return true;
  }
  bool start_array(std::size_t) { return bad_value("an array"); }
  bool end_array() { return true; }
  bool key(json::string_t& k) {
    key_ = k;
    key_line_ = line_now();
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::json::exception& ex) {
    data_error(file_ + ": not valid JSON, expected a JSON object of token -> id, found: " + ex.what());
  }

 private:
  [[noreturn]] void fail(const std::string& what) {
    data_error(file_ + ": line " + std::to_string(key_line_) + ": " + what);
  }
  bool bad_value(const std::string& found) {
    if (depth_ == 0) data_error(file_ + ": expected a JSON object of token -> id, found " + found);
    fail("token " + quote_str(key_) + ": expected an integer id, found " + found);
  }
  // Line of the character the lexer read last (it has just finished the current key).
  int line_now() {
    const char* p = *last_read_;
    if (p != nullptr && p > counted_to_) {
      line_ += static_cast<int>(std::count(counted_to_, p, '\n'));
      counted_to_ = p;
    }
    return line_;
  }

  const std::string& file_;
  const char* counted_to_;
  const char* const* last_read_;
  int line_ = 1;
  int depth_ = 0;
  std::string key_;
  int key_line_ = 0;
};

std::vector<VocabEntry> parse_vocab(const std::string& file, const std::string& text) {
  const char* last_read = nullptr;
  VocabSax sax(file, text.data(), &last_read);
  TrackingIterator first{text.data(), &last_read}, end{text.data() + text.size(), &last_read};
  nlohmann::json::sax_parse(first, end, &sax);
  return std::move(sax.entries);
}

}  // namespace

// ---- the tokenizer proper ----

void Tokenizer::Impl::check_id(int id, const char* where) const {
  if (id < 0 || id >= static_cast<int>(token_strings.size())) {
    data_error(std::string(where) + ": token id out of range, expected 0.." +
               std::to_string(static_cast<int>(token_strings.size()) - 1) + ", found " + std::to_string(id));
  }
}

bool Tokenizer::Impl::cached(std::string_view word, std::vector<int>& out) const {
  if (word.size() > kMaxCachedWordBytes) return false;
  std::shared_lock lock(cache_mutex);
  auto it = cache.find(word);
  if (it == cache.end()) return false;
  out.insert(out.end(), it->second.begin(), it->second.end());
  return true;
}

void Tokenizer::Impl::remember(std::string_view word, const int* ids, size_t n) const {
  if (word.size() > kMaxCachedWordBytes) return;
  std::vector<int> v(ids, ids + n);
  std::unique_lock lock(cache_mutex);
  if (cache.size() >= kMaxCachedWords) cache.clear();
  cache.emplace(std::string(word), std::move(v));
}

void Tokenizer::Impl::encode_word(std::string_view word, std::vector<int>& out) const {
  if (word.size() == 1) {
    out.push_back(byte_id[static_cast<unsigned char>(word[0])]);
    return;
  }
  if (cached(word, out)) return;
  const size_t first = out.size();
  std::vector<int> sym(word.size());
  for (size_t i = 0; i < word.size(); ++i) sym[i] = byte_id[static_cast<unsigned char>(word[i])];
  bpe_ids(sym, /*hf_order=*/false, out);
  remember(word, out.data() + first, out.size() - first);
}

// OpenAI's bpe(): repeatedly take the adjacent pair of lowest merge rank and merge every occurrence
// of it, left to right. Here the symbols are a linked list over the word's bytes and the candidate
// pairs sit in a min-heap keyed by (rank, position), so a word of n bytes costs O(n log n) rather
// than the O(n^2) of rescanning. All heap entries of one rank are one bigram; they are merged as a
// batch in position order and the pairs they create are pushed only after the batch, which keeps
// the result identical to OpenAI's loop even for merge tables whose ranks are not monotone.
//
// Hugging Face's Word::merge_all instead merges one pair at a time, lowest (rank, position) first,
// pushing the pairs a merge creates at once (hf_order). The two agree whenever ranks are monotone.
void Tokenizer::Impl::bpe_ids(std::vector<int>& ids, bool hf_order, std::vector<int>& out) const {
  struct Symbol {
    int id;    // -1 once merged into its left neighbour
    int prev;  // -1 at the start
    int next;  // -1 at the end
  };
  struct Candidate {
    int rank;
    int pos;  // the left symbol
    int left, right, result;
  };
  const auto later = [](const Candidate& a, const Candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  };

  const int n = static_cast<int>(ids.size());
  if (n == 0) return;
  std::vector<Symbol> sym(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) sym[i] = {ids[i], i - 1, i + 1 < n ? i + 1 : -1};

  std::vector<Candidate> heap, created;
  const auto candidate = [&](int pos, std::vector<Candidate>& into) {
    if (pos < 0) return;
    const int nx = sym[pos].next;
    if (nx < 0) return;
    auto it = merge_of.find(pair_key(sym[pos].id, sym[nx].id));
    if (it != merge_of.end())
      into.push_back({it->second.rank, pos, sym[pos].id, sym[nx].id, it->second.result});
  };
  const auto push = [&](int pos) {
    const size_t before = heap.size();
    candidate(pos, heap);
    if (heap.size() > before) std::push_heap(heap.begin(), heap.end(), later);
  };
  for (int i = 0; i + 1 < n; ++i) candidate(i, heap);
  std::make_heap(heap.begin(), heap.end(), later);

  while (!heap.empty()) {
    const int rank = heap.front().rank;
    created.clear();
    while (!heap.empty() && heap.front().rank == rank) {
      std::pop_heap(heap.begin(), heap.end(), later);
      const Candidate c = heap.back();
      heap.pop_back();
      const int nx = sym[c.pos].next;
      if (sym[c.pos].id != c.left || nx < 0 || sym[nx].id != c.right) continue;  // stale
      sym[c.pos].id = c.result;
      sym[c.pos].next = sym[nx].next;
      if (sym[nx].next >= 0) sym[sym[nx].next].prev = c.pos;
      sym[nx].id = -1;
      if (hf_order) {
        push(sym[c.pos].prev);
        push(c.pos);
        break;  // the heap decides again: a created pair may rank before this rank's others
      }
      created.push_back({0, c.pos, 0, 0, 0});  // positions only; pairs are looked up after the batch
    }
    for (const Candidate& m : created) {
      if (sym[m.pos].id < 0) continue;  // (a merged symbol is never a later right side in its batch)
      push(sym[m.pos].prev);
      push(m.pos);
    }
  }
  for (int i = 0; i >= 0; i = sym[i].next) out.push_back(sym[i].id);
}

// ---- construction ----

Tokenizer Tokenizer::from_files(const std::string& vocab_json, const std::string& merges_txt) {
  auto impl = std::make_shared<Impl>();

  // Vocabulary: ids must be exactly 0..n-1, each token once.
  const std::vector<VocabEntry> entries = parse_vocab(vocab_json, read_file(vocab_json));
  const size_t n = entries.size();
  std::unordered_map<std::string, int, StringHash, std::equal_to<>> id_of;
  id_of.reserve(n);
  std::vector<int> line_of_id(n, 0);
  impl->token_strings.resize(n);
  for (const VocabEntry& e : entries) {
    const std::string at = vocab_json + ": line " + std::to_string(e.line) + ": token " + quote_str(e.token);
    if (e.token.empty()) data_error(at + ": expected a non-empty token string, found an empty one");
    if (e.id >= static_cast<int64_t>(n)) {
      data_error(at + ": id out of range, expected 0.." + std::to_string(static_cast<int64_t>(n) - 1) +
                 " (the file has " + std::to_string(n) + " tokens), found " + std::to_string(e.id));
    }
    const int id = static_cast<int>(e.id);
    if (line_of_id[id] != 0) {
      data_error(at + ": duplicate id, expected each id once, found " + std::to_string(id) +
                 " also on line " + std::to_string(line_of_id[id]) + " for token " +
                 quote_str(impl->token_strings[id]));
    }
    auto [it, fresh] = id_of.emplace(e.token, id);
    if (!fresh) {
      data_error(at + ": duplicate token, expected each token once, found it again (first with id " +
                 std::to_string(it->second) + " on line " + std::to_string(line_of_id[it->second]) + ")");
    }
    line_of_id[id] = e.line;
    impl->token_strings[id] = e.token;
  }
  impl->token_bytes.reserve(n);
  for (const std::string& s : impl->token_strings) impl->token_bytes.push_back(td::symbols_to_bytes(s));
  for (int b = 0; b < 256; ++b) {
    const std::string sym = td::byte_symbol(static_cast<unsigned char>(b));
    auto it = id_of.find(sym);
    if (it == id_of.end()) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", b);
      data_error(vocab_json + ": missing a byte token, expected all 256 byte-level tokens, found no " +
                 quote_str(sym) + " (byte " + hex + ")");
    }
    impl->byte_id[b] = it->second;
  }

  // Merges: "left right" per line, in rank order; an optional "#version" first line; blank lines
  // only at the end.
  const std::string text = read_file(merges_txt);
  std::unordered_map<uint64_t, int> line_of_merge;
  size_t pos = 0;
  int line_no = 0;
  int blank_line = 0;  // first blank line seen, 0 if none yet
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    std::string_view line(text.data() + pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const std::string at = merges_txt + ": line " + std::to_string(line_no);
    if (line_no == 1 && line.starts_with("#version")) continue;
    if (line.empty()) {
      if (blank_line == 0) blank_line = line_no;
      continue;
    }
    if (blank_line != 0) {
      data_error(merges_txt + ": line " + std::to_string(blank_line) +
                 ": bad merge line, expected two tokens separated by one space, found an empty line");
    }
    const size_t sp = line.find(' ');
    if (sp == std::string_view::npos || sp == 0 || sp + 1 == line.size() ||
        line.find(' ', sp + 1) != std::string_view::npos) {
      data_error(at + ": bad merge line, expected two tokens separated by one space, found " +
                 quote_str(line));
    }
    const std::string_view left = line.substr(0, sp), right = line.substr(sp + 1);
    auto l = id_of.find(left), r = id_of.find(right);
    if (l == id_of.end())
      data_error(at + ": unknown token, expected a token of " + vocab_json + ", found " + quote_str(left));
    if (r == id_of.end())
      data_error(at + ": unknown token, expected a token of " + vocab_json + ", found " + quote_str(right));
    std::string merged(left);
    merged += right;
    auto m = id_of.find(merged);
    if (m == id_of.end()) {
      data_error(at + ": merged token not in vocabulary, expected " + quote_str(merged) + " in " +
                 vocab_json + ", found no such token");
    }
    const uint64_t key = pair_key(l->second, r->second);
    auto [it, fresh] = line_of_merge.emplace(key, line_no);
    if (!fresh) {
      data_error(at + ": duplicate merge, expected each pair once, found " + quote_str(line) +
                 " also on line " + std::to_string(it->second));
    }
    const int rank = static_cast<int>(impl->merges.size());
    impl->merges.emplace_back(l->second, r->second);
    impl->merge_of.emplace(key, Impl::Merge{rank, m->second});
  }
  // GPT-2's BOS and EOS are both <|endoftext|> (Hugging Face's GPT2Tokenizer); it never adds them.
  if (auto e = id_of.find("<|endoftext|>"); e != id_of.end()) impl->bos = impl->eos = e->second;
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::from_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path d(dir);
  std::error_code ec;
  const auto exists = [&](const char* name) { return fs::is_regular_file(d / name, ec); };
  if (exists("tokenizer.json")) {
    return from_hf_json((d / "tokenizer.json").string(),
                        exists("tokenizer_config.json") ? (d / "tokenizer_config.json").string() : "");
  }
  if (exists("vocab.json") && exists("merges.txt")) {
    return from_files((d / "vocab.json").string(), (d / "merges.txt").string());
  }
  if (exists("encoder.json") && exists("vocab.bpe")) {
    return from_files((d / "encoder.json").string(), (d / "vocab.bpe").string());
  }
  std::string found;
  for (const char* name : {"tokenizer_config.json", "vocab.json", "merges.txt", "encoder.json", "vocab.bpe"}) {
    if (exists(name)) found += std::string(found.empty() ? "" : ", ") + name;
  }
  if (!fs::is_directory(d, ec)) found = "no such directory";
  data_error(dir +
             ": no tokenizer files, expected tokenizer.json, vocab.json + merges.txt or encoder.json + vocab.bpe, found " +
             (found.empty() ? std::string("none of them") : found));
}

Tokenizer Tokenizer::byte_level() {
  auto impl = std::make_shared<Impl>();
  for (int b = 0; b < 256; ++b) {
    impl->token_strings.push_back(td::byte_symbol(static_cast<unsigned char>(b)));
    impl->token_bytes.emplace_back(1, static_cast<char>(b));
    impl->byte_id[b] = b;
  }
  impl->describe = "bytes (256 tokens)";
  return Tokenizer(std::move(impl));
}

// ---- use ----

std::vector<int> Tokenizer::encode(std::string_view utf8_text) const {
  return encode(utf8_text, Bos::Auto);
}

std::vector<int> Tokenizer::encode(std::string_view utf8_text, Bos bos) const {
  if (impl_->hf) return td::encode_hf(*impl_, utf8_text, bos);
  std::vector<std::string_view> words;
  td::pretokenize(utf8_text, words);
  std::vector<int> ids;
  ids.reserve(utf8_text.size() / 3 + 2);
  if (bos == Bos::Yes) ids.push_back(td::bos_id_or_throw(*impl_));
  for (std::string_view w : words) impl_->encode_word(w, ids);
  return ids;
}

bool Tokenizer::gpt2_pretokenizer() const {
  return !impl_->hf;
}

bool Tokenizer::bos_added(Bos bos) const {
  if (bos == Bos::No) return false;
  if (bos == Bos::Yes) return true;
  return !impl_->prefix.empty() && impl_->prefix.front() == impl_->bos;
}

int Tokenizer::bos_id() const {
  return impl_->bos;
}

int Tokenizer::eos_id() const {
  return impl_->eos;
}

std::string Tokenizer::description() const {
  return impl_->describe;
}

std::string Tokenizer::decode(const std::vector<int>& ids) const {
  if (impl_->hf) return td::decode_hf(*impl_, ids);
  std::string out;
  for (int id : ids) {
    impl_->check_id(id, "decode");
    out += impl_->token_bytes[static_cast<size_t>(id)];
  }
  return out;
}

std::string Tokenizer::decode_generated(const std::vector<int>& ids) const {
  std::string out;
  std::vector<int> run;
  for (int id : ids) {
    if (id >= 0 && id < vocab_size()) {
      run.push_back(id);
      continue;
    }
    out += decode(run) + "<|id " + std::to_string(id) + "|>";
    run.clear();
  }
  return out + decode(run);
}

std::string Tokenizer::decode_after(const std::vector<int>& prompt, const std::vector<int>& ids) const {
  std::vector<int> all = prompt;
  all.insert(all.end(), ids.begin(), ids.end());
  const std::string base = decode_generated(prompt), full = decode_generated(all);
  return full.compare(0, base.size(), base) == 0 ? full.substr(base.size()) : decode_generated(ids);
}

std::string Tokenizer::token_string(int id) const {
  impl_->check_id(id, "token_string");
  return impl_->token_strings[static_cast<size_t>(id)];
}

std::string Tokenizer::token_text(int id) const {
  impl_->check_id(id, "token_text");
  return impl_->token_bytes[static_cast<size_t>(id)];
}

int Tokenizer::vocab_size() const {
  return static_cast<int>(impl_->token_strings.size());
}

void Tokenizer::write_files(const std::string& dir) const {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) data_error(dir + ": cannot create directory: " + ec.message());
  if (impl_->hf) {
    for (const std::string& f : impl_->source_files)
      io::write_file_atomic((fs::path(dir) / fs::path(f).filename()).string(), read_file(f));
    return;
  }
  // One entry per line, in id order, so a reader's error line numbers point somewhere useful.
  std::string vocab = "{\n";
  for (size_t id = 0; id < impl_->token_strings.size(); ++id) {
    vocab += "  " + nlohmann::json(impl_->token_strings[id]).dump() + ": " + std::to_string(id);
    vocab += id + 1 < impl_->token_strings.size() ? ",\n" : "\n";
  }
  vocab += "}\n";
  std::string merges = "#version: 0.2\n";
  for (const auto& [left, right] : impl_->merges) {
    merges += impl_->token_strings[static_cast<size_t>(left)] + " " +
              impl_->token_strings[static_cast<size_t>(right)] + "\n";
  }
  io::write_file_atomic((fs::path(dir) / "vocab.json").string(), vocab);
  io::write_file_atomic((fs::path(dir) / "merges.txt").string(), merges);
}

}  // namespace qkv
