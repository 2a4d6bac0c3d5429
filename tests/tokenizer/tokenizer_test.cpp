// GPT-2 tokenizer: byte-exact against gpt-3-encoder's ids, against a slow transcription of OpenAI's
// bpe(), round trips on arbitrary bytes, file round trips, validation errors, and no quadratic blowup.
#include "qkv/tokenizer.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "qkv/error.hpp"
#include "tokenizer/detail.hpp"

namespace fs = std::filesystem;
using qkv::Tokenizer;
namespace td = qkv::tokenizer_detail;

namespace {

const std::string kGpt2Dir = std::string(QKV_SHARED_DIR) + "/gpt2-tokenizer";

bool have_gpt2() {
  return fs::is_regular_file(kGpt2Dir + "/encoder.json") && fs::is_regular_file(kGpt2Dir + "/vocab.bpe");
}

#define REQUIRE_GPT2()                                                                        \
  do {                                                                                        \
    if (!have_gpt2())                                                                         \
      GTEST_SKIP() << "GPT-2 tokenizer files not found in " << kGpt2Dir                       \
                   << " (expected encoder.json + vocab.bpe); the shared data is not present"; \
  } while (0)

const Tokenizer& gpt2() {
  static const Tokenizer t = Tokenizer::from_dir(kGpt2Dir);
  return t;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_text(const fs::path& path, const std::string& s) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << s;
  ASSERT_TRUE(out.good()) << path;
}

// A fresh directory under the system temp dir, removed when the test ends.
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name) {
    path = fs::temp_directory_path() / ("qkv_tokenizer_test_" + std::to_string(::getpid()) + "_" + name);
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string operator/(const std::string& f) const { return (path / f).string(); }
};

// The message of the qkv::Error that fn throws ("" and a test failure if it throws none).
std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const qkv::Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a qkv::Error";
  return "";
}

// ---- OpenAI's bpe(), transcribed naively over strings: the slow reference ----

using Ranks = std::map<std::pair<std::string, std::string>, int>;

std::vector<std::string> slow_bpe(std::vector<std::string> word, const Ranks& ranks) {
  while (word.size() > 1) {
    int best = -1;
    std::pair<std::string, std::string> bigram;
    for (size_t i = 0; i + 1 < word.size(); ++i) {
      auto it = ranks.find({word[i], word[i + 1]});
      if (it != ranks.end() && (best < 0 || it->second < best)) {
        best = it->second;
        bigram = it->first;
      }
    }
    if (best < 0) break;
    std::vector<std::string> merged;
    for (size_t i = 0; i < word.size();) {
      if (i + 1 < word.size() && word[i] == bigram.first && word[i + 1] == bigram.second) {
        merged.push_back(word[i] + word[i + 1]);
        i += 2;
      } else {
        merged.push_back(word[i]);
        i += 1;
      }
    }
    word = std::move(merged);
  }
  return word;
}

std::vector<std::string> byte_symbols(const std::string& bytes) {
  std::vector<std::string> out;
  for (unsigned char c : bytes) out.push_back(td::byte_symbol(c));
  return out;
}

// Strings that exercise every alternative of the pattern and every byte class.
std::vector<std::string> tricky_strings() {
  return {
      "",
      " ",
      "a",
      "Hello world",
      "I'm sure they'll say it's what we'd've done, isn't it? You're right, we've seen it.",
      "'s 't 're 've 'm 'll 'd 'S 'T 'RE ''s '' ' x'sx",
      "12345678901234567890 3.14159 -42 1e-10 0x7FFF ½ ² Ⅻ ٣٤٥",
      "   leading and trailing   ",
      "a\tb\nc\r\nd\n\n\ne  \t \n f",
      "\n\n\n",
      "                                                            many spaces",
      "emoji: 🙂🚀 and ❤️ 👩‍👩‍👧‍👦 🇩🇪",
      "日本語のテキストも扱えます。 中文 한국어",
      "Привет, мир! Как дела?",
      "Ünïcödé ströng wïth dïäcrïtïcs",
      "math: ∀x∈ℝ, ∑ᵢ xᵢ² ≥ 0",
      "mixed: abc123def 456ghi ___ --- ... !!! ???",
      "\xc2\xa0non-breaking\xc2\xa0spaces\xe3\x80\x80ideographic",
      "zero\x00byte\x01\x02\x7f",
      "<|endoftext|>",
      "https://example.org/path?q=1&r=2 email@example.com",
      "\xff\xfe invalid \xc3 utf8 \xe2\x82 here \xf0\x9f\x99",
      "\xed\xa0\x80 surrogate \xf4\x90\x80\x80 beyond",
  };
}

}  // namespace

// ---- bytes_to_unicode and the pre-tokenizer ----

TEST(BytesToUnicode, MatchesOpenAIsTable) {
  const auto& t = td::bytes_to_unicode();
  EXPECT_EQ(t['!'], U'!');
  EXPECT_EQ(t['~'], U'~');
  EXPECT_EQ(t[0xA1], U'\u00A1');
  EXPECT_EQ(t[0xAC], U'\u00AC');
  EXPECT_EQ(t[0xAE], U'\u00AE');
  EXPECT_EQ(t[0xFF], U'\u00FF');
  EXPECT_EQ(t[0x00], U'\u0100');  // first unprintable byte
  EXPECT_EQ(t[' '], U'\u0120');   // Ġ
  EXPECT_EQ(t['\n'], U'\u010A');  // Ċ
  EXPECT_EQ(t[0x7F], U'\u0121');
  EXPECT_EQ(t[0xAD], U'\u0143');  // last one: soft hyphen
  std::set<char32_t> distinct(t.begin(), t.end());
  EXPECT_EQ(distinct.size(), 256u);
  for (int b = 0; b < 256; ++b) {
    EXPECT_EQ(td::symbols_to_bytes(td::byte_symbol(static_cast<unsigned char>(b))),
              std::string(1, static_cast<char>(b)));
  }
}

TEST(PreTokenizer, SplitsLikeGpt2) {
  auto split = [](std::string_view s) {
    std::vector<std::string_view> w;
    td::pretokenize(s, w);
    return std::vector<std::string>(w.begin(), w.end());
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(split("Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(split("I'm here's"), (V{"I", "'m", " here", "'s"}));
  EXPECT_EQ(split("a  b"), (V{"a", " ", " b"}));  // \s+(?!\S) leaves the last space to the word
  EXPECT_EQ(split("a  \n"), (V{"a", "  \n"}));    // trailing whitespace stays one run
  EXPECT_EQ(split("x 123 4.5!!"), (V{"x", " 123", " 4", ".", "5", "!!"}));
  EXPECT_EQ(split("日本語。"), (V{"日本語", "。"}));
  EXPECT_EQ(split(""), V{});
  // Invalid UTF-8 becomes words of its own; the valid parts split as usual.
  EXPECT_EQ(split("ab\xff\xfe cd"), (V{"ab", "\xff\xfe", " cd"}));
  EXPECT_EQ(split("\xc3"), (V{"\xc3"}));
  EXPECT_EQ(split("x\xe2\x82"), (V{"x", "\xe2\x82"}));
}

TEST(PreTokenizer, WordsConcatenateToAnyInput) {
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 2000; ++trial) {
    std::string s(rng() % 64, '\0');
    for (char& c : s) c = static_cast<char>(rng() % 256);
    std::vector<std::string_view> words;
    td::pretokenize(s, words);
    std::string joined;
    for (auto w : words) {
      EXPECT_FALSE(w.empty());
      joined += w;
    }
    ASSERT_EQ(joined, s) << "trial " << trial;
  }
}

// ---- GPT-2 itself ----

TEST(Gpt2, ReferenceIdsByteExact) {
  REQUIRE_GPT2();
  const std::string path = kGpt2Dir + "/reference.jsonl";
  std::ifstream in(path);
  ASSERT_TRUE(in) << "cannot open " << path;
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line);
    const std::string text = j.at("text").get<std::string>();
    const std::vector<int> ids = j.at("ids").get<std::vector<int>>();
    EXPECT_EQ(gpt2().encode(text), ids) << "text: " << text;
    EXPECT_EQ(gpt2().decode(ids), text);
    ++n;
  }
  EXPECT_EQ(n, 20) << "reference.jsonl changed size; this test expects its 20 lines";
}

TEST(Gpt2, KnownTokens) {
  REQUIRE_GPT2();
  const Tokenizer& t = gpt2();
  EXPECT_EQ(t.vocab_size(), 50257);
  EXPECT_EQ(t.token_string(262), "Ġthe");
  EXPECT_EQ(t.token_text(262), " the");
  EXPECT_EQ(t.token_string(198), "Ċ");
  EXPECT_EQ(t.token_text(198), "\n");
  EXPECT_EQ(t.token_string(50256), "<|endoftext|>");
  EXPECT_EQ(t.token_text(50256), "<|endoftext|>");
  EXPECT_EQ(t.encode("Hello world"), (std::vector<int>{15496, 995}));
  // Special tokens are plain text to encode(), as in OpenAI's encoder.py.
  EXPECT_NE(t.encode("<|endoftext|>"), std::vector<int>{50256});
  // Each byte alone is its byte-level token.
  for (int b = 0; b < 256; ++b) {
    const std::string s(1, static_cast<char>(b));
    const auto ids = t.encode(s);
    ASSERT_EQ(ids.size(), 1u) << b;
    EXPECT_EQ(t.token_text(ids[0]), s);
  }
  // Both file layouts give the same tokenizer.
  const Tokenizer same = Tokenizer::from_files(kGpt2Dir + "/encoder.json", kGpt2Dir + "/vocab.bpe");
  EXPECT_EQ(same.encode("The quick brown fox"), t.encode("The quick brown fox"));
}

TEST(Gpt2, DecodeRejectsOutOfRangeIds) {
  REQUIRE_GPT2();
  std::string msg = error_of([] { gpt2().decode({15496, 50257}); });
  EXPECT_NE(msg.find("50257"), std::string::npos) << msg;
  msg = error_of([] { gpt2().decode({-1}); });
  EXPECT_NE(msg.find("-1"), std::string::npos) << msg;
  msg = error_of([] { gpt2().token_string(99999); });
  EXPECT_NE(msg.find("99999"), std::string::npos) << msg;
  msg = error_of([] { gpt2().token_text(-7); });
  EXPECT_NE(msg.find("-7"), std::string::npos) << msg;
}

TEST(Gpt2, RoundTripsTrickyAndRandomStrings) {
  REQUIRE_GPT2();
  const Tokenizer& t = gpt2();
  for (const std::string& s : tricky_strings()) EXPECT_EQ(t.decode(t.encode(s)), s) << s;
  std::mt19937 rng(42);
  // Arbitrary bytes, mostly invalid UTF-8.
  for (int trial = 0; trial < 1000; ++trial) {
    std::string s(rng() % 200, '\0');
    for (char& c : s) c = static_cast<char>(rng() % 256);
    ASSERT_EQ(t.decode(t.encode(s)), s) << "random bytes, trial " << trial;
  }
  // Valid UTF-8 over a wide range of code points, with spaces and digits mixed in.
  const char32_t ranges[][2] = {{0x20, 0x7E},     {0xA0, 0x24F},      {0x370, 0x4FF},
                                {0x600, 0x6FF},   {0x3000, 0x30FF},   {0x4E00, 0x9FFF},
                                {0xAC00, 0xD7A3}, {0x1F300, 0x1FAFF}, {0x2000, 0x206F}};
  for (int trial = 0; trial < 500; ++trial) {
    std::string s;
    const int len = static_cast<int>(rng() % 60);
    for (int i = 0; i < len; ++i) {
      const auto& r = ranges[rng() % std::size(ranges)];
      const char32_t c = r[0] + rng() % (r[1] - r[0] + 1);
      if (c < 0x80) {
        s += static_cast<char>(c);
      } else if (c < 0x800) {
        s += static_cast<char>(0xC0 | (c >> 6));
        s += static_cast<char>(0x80 | (c & 0x3F));
      } else if (c < 0x10000) {
        s += static_cast<char>(0xE0 | (c >> 12));
        s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
        s += static_cast<char>(0x80 | (c & 0x3F));
      } else {
        s += static_cast<char>(0xF0 | (c >> 18));
        s += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
        s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
        s += static_cast<char>(0x80 | (c & 0x3F));
      }
      if (rng() % 5 == 0) s += ' ';
    }
    ASSERT_EQ(t.decode(t.encode(s)), s) << "random UTF-8, trial " << trial;
  }
}

// The fast merge loop against OpenAI's bpe() on GPT-2's own merges. Letters only, so each test word
// is one pre-token and encode() is bpe() of it.
TEST(Gpt2, MergeLoopMatchesSlowBpe) {
  REQUIRE_GPT2();
  Ranks ranks;
  {
    std::istringstream merges(read_text(kGpt2Dir + "/vocab.bpe"));
    std::string line;
    std::getline(merges, line);  // #version
    int rank = 0;
    while (std::getline(merges, line)) {
      if (line.empty()) continue;
      const size_t sp = line.find(' ');
      ranks.emplace(std::make_pair(line.substr(0, sp), line.substr(sp + 1)), rank++);
    }
    ASSERT_EQ(rank, 50000);
  }
  const auto vocab = nlohmann::json::parse(read_text(kGpt2Dir + "/encoder.json"));
  std::mt19937 rng(7);
  const std::string alphabet = "abcdefghijklmnopqrstuvwxyzeeeeaaaoooiiinnsstt";
  for (int trial = 0; trial < 2000; ++trial) {
    std::string word = rng() % 2 ? " " : "";
    const int len = 1 + static_cast<int>(rng() % 30);
    for (int i = 0; i < len; ++i) word += alphabet[rng() % alphabet.size()];
    std::vector<int> expected;
    for (const std::string& piece : slow_bpe(byte_symbols(word), ranks))
      expected.push_back(vocab.at(piece).get<int>());
    ASSERT_EQ(gpt2().encode(word), expected) << "word \"" << word << "\"";
  }
}

TEST(Gpt2, WriteFilesThenFromDirReproducesIt) {
  REQUIRE_GPT2();
  TempDir dir("gpt2_copy");
  gpt2().write_files(dir.path.string());
  EXPECT_TRUE(read_text(dir / "merges.txt").starts_with("#version: 0.2\n"));
  EXPECT_FALSE(fs::exists(dir / "vocab.json.tmp"));
  EXPECT_FALSE(fs::exists(dir / "merges.txt.tmp"));
  const Tokenizer copy = Tokenizer::from_dir(dir.path.string());
  ASSERT_EQ(copy.vocab_size(), gpt2().vocab_size());
  for (int id = 0; id < copy.vocab_size(); ++id)
    ASSERT_EQ(copy.token_string(id), gpt2().token_string(id)) << id;
  EXPECT_EQ(read_text(dir / "merges.txt").substr(14),
            read_text(kGpt2Dir + "/vocab.bpe").substr(read_text(kGpt2Dir + "/vocab.bpe").find('\n') + 1));
  for (const std::string& s : tricky_strings()) EXPECT_EQ(copy.encode(s), gpt2().encode(s)) << s;
}

TEST(Gpt2, ConcurrentEncodesAgree) {
  REQUIRE_GPT2();
  std::vector<std::string> texts;
  std::mt19937 rng(99);
  for (int i = 0; i < 200; ++i) {
    std::string s;
    for (int w = 0; w < 50; ++w) s += " w" + std::to_string(rng() % 1000) + (rng() % 3 ? "ing" : "ed");
    texts.push_back(s);
  }
  const Tokenizer fresh = Tokenizer::from_dir(kGpt2Dir);  // its own empty cache
  std::vector<std::vector<std::vector<int>>> results(4);
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      for (const auto& s : texts) results[k].push_back(fresh.encode(s));
    });
  }
  for (auto& th : threads) th.join();
  for (size_t i = 0; i < texts.size(); ++i) {
    const auto expected = gpt2().encode(texts[i]);
    for (int k = 0; k < 4; ++k) ASSERT_EQ(results[k][i], expected) << "thread " << k << " text " << i;
  }
}

// Not a benchmark: shows that long words and long texts cost about linear time. A quadratic merge
// loop takes minutes on the 200 KB words; the bounds are 50x what this takes on a laptop.
TEST(Gpt2, LongInputsAreNotQuadratic) {
  REQUIRE_GPT2();
  using clock = std::chrono::steady_clock;
  const auto seconds = [](clock::time_point a) {
    return std::chrono::duration<double>(clock::now() - a).count();
  };
  const Tokenizer t = Tokenizer::from_dir(kGpt2Dir);  // cold cache

  const std::string one_letter(200'000, 'a');
  auto t0 = clock::now();
  auto ids = t.encode(one_letter);
  const double s_letter = seconds(t0);
  EXPECT_EQ(t.decode(ids), one_letter);
  EXPECT_LT(s_letter, 5.0);

  std::mt19937 rng(5);
  std::string random_word(200'000, 'a');
  for (char& c : random_word) c = static_cast<char>('a' + rng() % 26);
  t0 = clock::now();
  ids = t.encode(random_word);
  const double s_random = seconds(t0);
  EXPECT_EQ(t.decode(ids), random_word);
  EXPECT_LT(s_random, 5.0);

  const std::string spaces(1'000'000, ' ');
  t0 = clock::now();
  ids = t.encode(spaces + "x");
  const double s_spaces = seconds(t0);
  EXPECT_EQ(t.decode(ids), spaces + "x");
  EXPECT_LT(s_spaces, 5.0);

  // ~1 MB of text-like input: words from a small vocabulary, numbers, punctuation, newlines.
  const std::vector<std::string> words = {
      "the",     "attention", "query",  "key",     "value",       "head",  "layer", "of",
      "and",     "residual",  "stream", "softmax", "Transformer", "GPT",   "token", "is",
      "données", "注意力",    "🙂",   "x_1",     "W_Q",         "isn't", "we'll"};
  std::string text;
  while (text.size() < 1'000'000) {
    text += words[rng() % words.size()];
    const unsigned r = rng() % 20;
    text += r == 0 ? ".\n" : r == 1 ? ", " : r == 2 ? " " + std::to_string(rng() % 100000) + " " : " ";
  }
  t0 = clock::now();
  ids = t.encode(text);
  const double s_cold = seconds(t0);
  t0 = clock::now();
  ids = t.encode(text);
  const double s_warm = seconds(t0);
  EXPECT_EQ(t.decode(ids), text);
  EXPECT_LT(s_cold, 10.0);
  std::printf("[ info ] 200 KB one-letter word %.3f s; 200 KB random word %.3f s; 1 MB of spaces %.3f s\n",
              s_letter, s_random, s_spaces);
  std::printf(
      "[ info ] %.2f MB text -> %zu tokens: cold %.3f s (%.2f M tokens/s), warm %.3f s (%.2f M tokens/s), "
      "jit %s\n",
      static_cast<double>(text.size()) / 1e6, ids.size(), s_cold,
      static_cast<double>(ids.size()) / s_cold / 1e6, s_warm, static_cast<double>(ids.size()) / s_warm / 1e6,
      td::pretokenizer_uses_jit() ? "yes" : "no");
}

// ---- the byte-level tokenizer ----

TEST(ByteLevel, IsTheBytesToUnicodeAlphabet) {
  const Tokenizer t = Tokenizer::byte_level();
  ASSERT_EQ(t.vocab_size(), 256);
  EXPECT_EQ(t.token_string(' '), "Ġ");
  EXPECT_EQ(t.token_string('\n'), "Ċ");
  EXPECT_EQ(t.token_string(0), "Ā");
  EXPECT_EQ(t.token_string('A'), "A");
  EXPECT_EQ(t.token_string(0xFF), "ÿ");
  EXPECT_EQ(t.token_string(0xAD), "Ń");
  for (int b = 0; b < 256; ++b) EXPECT_EQ(t.token_text(b), std::string(1, static_cast<char>(b)));
  std::mt19937 rng(3);
  for (int trial = 0; trial < 300; ++trial) {
    std::string s(rng() % 100, '\0');
    for (char& c : s) c = static_cast<char>(rng() % 256);
    const auto ids = t.encode(s);
    ASSERT_EQ(ids.size(), s.size());
    for (size_t i = 0; i < s.size(); ++i) ASSERT_EQ(ids[i], static_cast<unsigned char>(s[i]));
    ASSERT_EQ(t.decode(ids), s);
  }
  for (const std::string& s : tricky_strings()) EXPECT_EQ(t.decode(t.encode(s)), s);
}

TEST(ByteLevel, WriteFilesThenFromDirReproducesIt) {
  TempDir dir("byte_level");
  const Tokenizer t = Tokenizer::byte_level();
  t.write_files(dir.path.string());
  EXPECT_EQ(read_text(dir / "merges.txt"), "#version: 0.2\n");
  const auto vocab = nlohmann::json::parse(read_text(dir / "vocab.json"));
  EXPECT_EQ(vocab.size(), 256u);
  EXPECT_EQ(vocab.at("Ġ").get<int>(), 32);
  const Tokenizer back = Tokenizer::from_dir(dir.path.string());
  ASSERT_EQ(back.vocab_size(), 256);
  for (int id = 0; id < 256; ++id) EXPECT_EQ(back.token_string(id), t.token_string(id));
  for (const std::string& s : tricky_strings()) EXPECT_EQ(back.encode(s), t.encode(s));
  // Writing again over existing files works (rename replaces them).
  back.write_files(dir.path.string());
  EXPECT_EQ(Tokenizer::from_dir(dir.path.string()).vocab_size(), 256);
}

// ---- a synthetic vocabulary: exactness for any merge order, and long words ----

namespace {

// 256 byte tokens plus `extra` (in order), one entry per line.
std::string vocab_json(const std::vector<std::string>& extra) {
  std::string s = "{\n";
  int id = 0;
  for (int b = 0; b < 256; ++b)
    s += "  " + nlohmann::json(td::byte_symbol(static_cast<unsigned char>(b))).dump() + ": " +
         std::to_string(id++) + ",\n";
  for (const auto& e : extra) s += "  " + nlohmann::json(e).dump() + ": " + std::to_string(id++) + ",\n";
  s.resize(s.size() - 2);
  return s + "\n}\n";
}

}  // namespace

TEST(Synthetic, MergeLoopMatchesSlowBpeForShuffledRanks) {
  // Random merges over {a, b, c}, ranks shuffled so a merge may outrank the merges that build its
  // parts: OpenAI's loop must still be followed exactly (batches of one bigram, left to right).
  std::mt19937 rng(2024);
  for (int table = 0; table < 20; ++table) {
    std::vector<std::string> tokens = {"a", "b", "c"};
    std::set<std::string> known(tokens.begin(), tokens.end());
    std::vector<std::pair<std::string, std::string>> merges;
    std::set<std::pair<std::string, std::string>> seen;
    while (merges.size() < 40) {
      const std::string& l = tokens[rng() % tokens.size()];
      const std::string& r = tokens[rng() % tokens.size()];
      if ((l + r).size() > 8 || !seen.insert({l, r}).second) continue;
      merges.emplace_back(l, r);
      if (known.insert(l + r).second) tokens.push_back(l + r);
    }
    std::shuffle(merges.begin(), merges.end(), rng);
    std::vector<std::string> extra;
    for (const auto& t : tokens)
      if (t.size() > 1) extra.push_back(t);
    TempDir dir("synthetic_" + std::to_string(table));
    write_text(dir.path / "vocab.json", vocab_json(extra));
    std::string mtxt = "#version: 0.2\n";
    Ranks ranks;
    for (const auto& [l, r] : merges) {
      ranks.emplace(std::make_pair(l, r), static_cast<int>(ranks.size()));
      mtxt += l + " " + r + "\n";
    }
    write_text(dir.path / "merges.txt", mtxt);
    const Tokenizer t = Tokenizer::from_dir(dir.path.string());
    for (int trial = 0; trial < 300; ++trial) {
      std::string word(1 + rng() % 24, 'a');
      for (char& c : word) c = static_cast<char>('a' + rng() % 3);
      std::vector<int> expected;
      for (const auto& piece : slow_bpe(byte_symbols(word), ranks)) {
        const auto it = std::find(extra.begin(), extra.end(), piece);
        expected.push_back(piece.size() == 1 ? static_cast<unsigned char>(piece[0])
                                             : 256 + static_cast<int>(it - extra.begin()));
      }
      ASSERT_EQ(t.encode(word), expected) << "table " << table << ", word " << word;
    }
  }
}

TEST(Synthetic, LongRepeatedWordIsFast) {
  // Merges a a, aa aa, ... up to a^1024: a 200 KB word of 'a' needs ~200K merges.
  std::vector<std::string> extra;
  std::string merges = "#version: 0.2\n";
  for (std::string s = "a"; s.size() < 1024; s += s) {
    merges += s + " " + s + "\n";
    extra.push_back(s + s);
  }
  TempDir dir("long_word");
  write_text(dir.path / "vocab.json", vocab_json(extra));
  write_text(dir.path / "merges.txt", merges);
  const Tokenizer t = Tokenizer::from_dir(dir.path.string());
  const std::string word(200'000 + 3, 'a');
  const auto t0 = std::chrono::steady_clock::now();
  const auto ids = t.encode(word);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 5.0);
  EXPECT_EQ(t.decode(ids), word);
  // 200003 = 195 * 1024 + 323 = 195 * 1024 + 256 + 64 + 2 + 1.
  EXPECT_EQ(ids.size(), 195u + 4u);
  EXPECT_EQ(t.token_text(ids.front()).size(), 1024u);
  EXPECT_EQ(t.token_text(ids.back()), "a");
}

// ---- malformed files ----

namespace {

struct BadFiles : ::testing::Test {
  TempDir dir{"bad_files"};
  std::string load(const std::string& vocab, const std::string& merges) {
    write_text(dir.path / "vocab.json", vocab);
    write_text(dir.path / "merges.txt", merges);
    return error_of([&] { Tokenizer::from_files(dir / "vocab.json", dir / "merges.txt"); });
  }
};

#define EXPECT_HAS(msg, part) EXPECT_NE((msg).find(part), std::string::npos) << "message: " << (msg)

}  // namespace

TEST_F(BadFiles, VocabNotJson) {
  std::string msg = load("{\"a\": 1,,}", "");
  EXPECT_HAS(msg, "vocab.json");
  EXPECT_HAS(msg, "not valid JSON");
  msg = load("", "");
  EXPECT_HAS(msg, "vocab.json");
  msg = load("[1, 2]", "");
  EXPECT_HAS(msg, "vocab.json");
  EXPECT_HAS(msg, "expected a JSON object");
  msg = load(vocab_json({}) + "x", "");
  EXPECT_HAS(msg, "not valid JSON");
}

TEST_F(BadFiles, VocabBadIds) {
  // Byte tokens are lines 2..257 of vocab_json(); the first extra token is line 258.
  std::string v = vocab_json({"ab", "cd"});
  std::string msg = load(v.replace(v.find("\"cd\": 257"), 9, "\"cd\": 256"), "");
  EXPECT_HAS(msg, "vocab.json: line 259");
  EXPECT_HAS(msg, "duplicate id");
  EXPECT_HAS(msg, "line 258");

  v = vocab_json({"ab", "ab"});
  msg = load(v, "");
  EXPECT_HAS(msg, "vocab.json: line 259");
  EXPECT_HAS(msg, "duplicate token");

  v = vocab_json({"ab"});
  msg = load(v.replace(v.find("\"ab\": 256"), 9, "\"ab\": 999"), "");
  EXPECT_HAS(msg, "vocab.json: line 258");
  EXPECT_HAS(msg, "999");

  v = vocab_json({"ab"});
  msg = load(v.replace(v.find("\"ab\": 256"), 9, "\"ab\": -3"), "");
  EXPECT_HAS(msg, "vocab.json: line 258");
  EXPECT_HAS(msg, "-3");

  v = vocab_json({"ab"});
  msg = load(v.replace(v.find("\"ab\": 256"), 9, "\"ab\": 2.5"), "");
  EXPECT_HAS(msg, "vocab.json: line 258");
  EXPECT_HAS(msg, "expected an integer id");

  v = vocab_json({"ab"});
  msg = load(v.replace(v.find("\"ab\": 256"), 9, "\"ab\": \"256\""), "");
  EXPECT_HAS(msg, "vocab.json: line 258");

  msg = load("{\"a\": 0}", "");
  EXPECT_HAS(msg, "vocab.json");
  EXPECT_HAS(msg, "byte");
}

TEST_F(BadFiles, BadMergeLines) {
  const std::string v = vocab_json({"ab", "abc"});
  write_text(dir.path / "vocab.json", v);
  write_text(dir.path / "merges.txt", "#version: 0.2\na b\nab c\n");
  EXPECT_NO_THROW(Tokenizer::from_files(dir / "vocab.json", dir / "merges.txt"))
      << "the valid base case must load";
  write_text(dir.path / "merges.txt",
             "a b\r\nab c\r\n\n\n");  // no #version line, CRLF, blank lines at the end
  EXPECT_EQ(Tokenizer::from_files(dir / "vocab.json", dir / "merges.txt").encode("abc"),
            std::vector<int>{257});

  std::string msg = load(v, "#version: 0.2\na b\nabc\n");
  EXPECT_HAS(msg, "merges.txt: line 3");
  EXPECT_HAS(msg, "bad merge line");
  msg = load(v, "#version: 0.2\na b c\n");
  EXPECT_HAS(msg, "merges.txt: line 2");
  EXPECT_HAS(msg, "bad merge line");
  msg = load(v, "#version: 0.2\na  b\n");
  EXPECT_HAS(msg, "merges.txt: line 2");
  msg = load(v, "#version: 0.2\na b\n\nab c\n");
  EXPECT_HAS(msg, "merges.txt: line 3");
  msg = load(v, "#version: 0.2\nzz b\n");
  EXPECT_HAS(msg, "merges.txt: line 2");
  EXPECT_HAS(msg, "unknown token");
  EXPECT_HAS(msg, "\"zz\"");
  msg = load(v, "#version: 0.2\na x\n");
  EXPECT_HAS(msg, "merges.txt: line 2");
  EXPECT_HAS(msg, "\"ax\"");
  msg = load(v, "#version: 0.2\na b\nab c\na b\n");
  EXPECT_HAS(msg, "merges.txt: line 4");
  EXPECT_HAS(msg, "duplicate merge");
}

TEST_F(BadFiles, MissingFiles) {
  std::string msg = error_of([&] { Tokenizer::from_files(dir / "nope.json", dir / "merges.txt"); });
  EXPECT_HAS(msg, "nope.json");
  write_text(dir.path / "vocab.json", vocab_json({}));
  msg = error_of([&] { Tokenizer::from_files(dir / "vocab.json", dir / "absent.txt"); });
  EXPECT_HAS(msg, "absent.txt");
  // from_dir with only half of a pair: names the directory, the files it looked for, what it found.
  msg = error_of([&] { Tokenizer::from_dir(dir.path.string()); });
  EXPECT_HAS(msg, dir.path.string());
  EXPECT_HAS(msg, "vocab.json + merges.txt");
  EXPECT_HAS(msg, "encoder.json + vocab.bpe");
  EXPECT_HAS(msg, "found vocab.json");
  msg = error_of([&] { Tokenizer::from_dir(dir / "no_such_dir"); });
  EXPECT_HAS(msg, "no_such_dir");
  EXPECT_HAS(msg, "no such directory");
  // The OpenAI names are found too.
  fs::rename(dir.path / "vocab.json", dir.path / "encoder.json");
  write_text(dir.path / "vocab.bpe", "#version: 0.2\n");
  EXPECT_EQ(Tokenizer::from_dir(dir.path.string()).vocab_size(), 256);
}
