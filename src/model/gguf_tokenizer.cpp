// Tokenizers <-> GGUF metadata for the modern families (include/qkv/io/gguf_family.hpp): a Hugging Face
// tokenizer.json written as llama.cpp's converter writes tokenizer.ggml.*, and read back by rebuilding
// the tokenizer.json it stands for (then run by Tokenizer::from_hf_json, the implementation checked
// against npm's tokenizers).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_map>

#include "qkv/error.hpp"
#include "qkv/io/atomic_file.hpp"
#include "qkv/io/gguf_family.hpp"
#include "qkv/io/mapped_file.hpp"

namespace fs = std::filesystem;

namespace qkv {
namespace {

using nlohmann::json;

// llama.cpp's token types (SentencePiece's, plus BYTE).
constexpr int32_t kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6;
const char* const kSpace = "\xe2\x96\x81";  // ▁

// The pre-tokenizer regexes llama.cpp knows by name (tokenizer.ggml.pre), as the Hugging Face
// tokenizer.json files of those models spell them.
const char* const kLlama3Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";
const char* const kQwen2Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";

json read_json(const std::string& path) {
  const io::MappedFile f = io::MappedFile::open(path);
  const char* p = reinterpret_cast<const char*>(f.data());
  try {
    return json::parse(p, p + f.size());
  } catch (const json::exception& e) {
    data_error(path + ": not valid JSON: " + e.what());
  }
}

// Every object of a normalizer / pre-tokenizer / decoder tree, depth first.
void walk(const json& j, const std::function<void(const json&)>& fn) {
  if (j.is_object()) {
    fn(j);
    for (const auto& [k, v] : j.items()) walk(v, fn);
  } else if (j.is_array()) {
    for (const auto& v : j) walk(v, fn);
  }
}

std::string special_content(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string())
    return v["content"].get<std::string>();
  return "";
}

// A private scratch directory, removed when it goes out of scope.
struct Scratch {
  fs::path path;
  Scratch() {
    static std::atomic<int> counter{0};
    path = fs::temp_directory_path() /
           ("qkv-gguf-tok-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::error_code ec;
    fs::remove_all(path, ec);
    fs::create_directories(path, ec);
    if (ec) data_error(path.string() + ": cannot create a scratch directory: " + ec.message());
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// UTF-8 character boundaries of s (byte offsets, excluding 0 and size).
std::vector<size_t> char_cuts(const std::string& s) {
  std::vector<size_t> c;
  for (size_t i = 1; i < s.size(); ++i)
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) c.push_back(i);
  return c;
}

bool is_byte_token(const std::string& s) {
  return s.size() == 6 && s.compare(0, 3, "<0x") == 0 && s[5] == '>' &&
         std::isxdigit(static_cast<unsigned char>(s[3])) && std::isxdigit(static_cast<unsigned char>(s[4]));
}

}  // namespace

bool gguf_tokenizer_metadata(io::GgufMetadata& md, const std::string& dir, int vocab_size) {
  std::error_code ec;
  if (dir.empty()) return false;
  const fs::path tj = fs::path(dir) / "tokenizer.json";
  if (!fs::exists(tj, ec)) return false;
  const std::string file = tj.string();
  const json j = read_json(file);
  // qkv's own reader first: it names anything malformed, and gives BOS/EOS as Hugging Face resolves them.
  const Tokenizer tok = Tokenizer::from_dir(dir);
  if (!j.contains("model") || !j["model"].is_object() || j["model"].value("type", "BPE") != "BPE")
    data_error(file + ": key 'model': only BPE tokenizers are written to GGUF by qkv");
  const json& model = j["model"];
  const int n = tok.vocab_size();
  if (n > vocab_size)
    data_error(file + ": the tokenizer has " + std::to_string(n) +
               " tokens, more than the model's vocab_size " + std::to_string(vocab_size));
  std::vector<std::string> tokens(static_cast<size_t>(vocab_size));
  std::vector<int32_t> types(static_cast<size_t>(vocab_size), kNormal);
  std::vector<char> have(static_cast<size_t>(vocab_size), 0);
  for (const auto& [t, id] : model.at("vocab").items()) {
    const int64_t i = id.get<int64_t>();
    tokens[size_t(i)] = t;
    have[size_t(i)] = 1;
  }
  if (j.contains("added_tokens") && j["added_tokens"].is_array())
    for (const json& a : j["added_tokens"]) {
      const int64_t i = a.at("id").get<int64_t>();
      tokens[size_t(i)] = a.at("content").get<std::string>();
      have[size_t(i)] = 1;
      types[size_t(i)] = a.value("special", false) ? kControl : kUserDefined;
    }
  for (int i = 0; i < vocab_size; ++i)
    if (!have[size_t(i)]) tokens[size_t(i)] = "[PAD" + std::to_string(i) + "]", types[size_t(i)] = kUnused;

  // Which of llama.cpp's two tokenizer models this is.
  bool byte_level = false, metaspace = false, prepend = false, replace_space = false, digits = false,
       byte_level_regex = false;
  std::string split_regex;
  for (const char* part : {"normalizer", "pre_tokenizer", "decoder"})
    if (j.contains(part))
      walk(j[part], [&](const json& o) {
        const std::string t = o.value("type", "");
        if (t == "ByteLevel") {
          byte_level = true;
          if (std::string(part) == "pre_tokenizer" && o.value("use_regex", true)) byte_level_regex = true;
        }
        if (t == "Digits" && std::string(part) == "pre_tokenizer")
          digits = o.value("individual_digits", false);
        if (t == "Metaspace") {
          metaspace = true;
          if (std::string(part) == "pre_tokenizer" && o.value("prepend_scheme", "always") != "never" &&
              o.value("add_prefix_space", true))
            prepend = true;
        }
        if (t == "Prepend" && o.value("prepend", "") == kSpace) prepend = true;
        if (t == "Replace" && std::string(part) == "normalizer" && o.value("content", "") == kSpace)
          replace_space = true;
        if (t == "Split" && o.contains("pattern") && o["pattern"].contains("Regex"))
          split_regex = o["pattern"]["Regex"];
      });
  const bool spm = !byte_level && (model.value("byte_fallback", false) || metaspace || replace_space);
  if (!byte_level && !spm)
    data_error(file +
               ": neither a byte-level BPE (ByteLevel) nor a SentencePiece-style BPE (Metaspace or ▁ "
               "normalizer with byte_fallback): not representable as a GGUF tokenizer");
  // Merges as "left right" strings (tokenizer.json has them as strings or as pairs).
  std::vector<std::pair<std::string, std::string>> merges;
  if (model.contains("merges"))
    for (const json& m : model["merges"]) {
      if (m.is_array() && m.size() == 2) {
        merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
      } else if (m.is_string()) {
        const std::string s = m.get<std::string>();
        const auto sp = s.find(' ', 1);
        if (sp == std::string::npos)
          data_error(file + ": key 'model.merges': merge \"" + s + "\" has no space");
        merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
      } else {
        data_error(file + ": key 'model.merges': expected strings or pairs");
      }
    }
  if (byte_level) {
    std::string pre;
    if (split_regex == kLlama3Regex && !digits)
      pre = "llama-bpe";
    else if (split_regex == kQwen2Regex && !digits)
      pre = "qwen2";
    else if (split_regex.empty() && byte_level_regex && digits)
      pre = "smollm";  // SmolLM: Digits (individual) + GPT-2's ByteLevel regex
    else if (split_regex.empty() && byte_level_regex)
      pre = "gpt-2";
    else
      data_error(file +
                 ": key 'pre_tokenizer': the pre-tokenizer is not one llama.cpp names (llama-bpe, qwen2, "
                 "smollm, gpt-2); "
                 "qkv cannot write it as tokenizer.ggml.pre");
    std::vector<std::string> ms;
    for (const auto& [l, r] : merges) {
      if (l.find(' ') != std::string::npos || r.find(' ') != std::string::npos)
        data_error(file +
                   ": key 'model.merges': a merge part contains a space, which GGUF's \"left right\" form "
                   "cannot hold");
      ms.push_back(l + " " + r);
    }
    md.set("tokenizer.ggml.model", std::string("gpt2"));
    md.set("tokenizer.ggml.pre", pre);
    md.set("tokenizer.ggml.tokens", io::gguf_string_array(tokens));
    md.set("tokenizer.ggml.token_type", io::gguf_int32_array(types));
    md.set("tokenizer.ggml.merges", io::gguf_string_array(ms));
  } else {
    // SentencePiece: scores instead of merges. A token's score is minus the rank of the first merge that
    // makes it (0 for tokens no merge makes), so "every split of a token into two tokens, by descending
    // score" — how Hugging Face turns a SentencePiece model into merges — gives the same merge order back.
    std::unordered_map<std::string, int> id_of;
    for (int i = 0; i < vocab_size; ++i) id_of.emplace(tokens[size_t(i)], i);
    std::vector<float> scores(static_cast<size_t>(vocab_size), 0.0f);
    std::vector<char> scored(static_cast<size_t>(vocab_size), 0);
    for (size_t r = 0; r < merges.size(); ++r) {
      const auto it = id_of.find(merges[r].first + merges[r].second);
      if (it == id_of.end())
        data_error(file + ": key 'model.merges': merge " + std::to_string(r) +
                   " makes a token not in the vocabulary");
      if (!scored[size_t(it->second)])
        scores[size_t(it->second)] = -float(r + 1), scored[size_t(it->second)] = 1;
      if (float(r + 1) > 16777216.0f)
        data_error(file + ": more than 2^24 merges cannot be stored as float scores");
    }
    // Tokens no merge makes come after every merged one (their splits, if any, merge last).
    for (int i = 0; i < vocab_size; ++i)
      if (!scored[size_t(i)]) scores[size_t(i)] = -float(merges.size() + 1);
    const std::string unk = model.contains("unk_token") && model["unk_token"].is_string()
                                ? model["unk_token"].get<std::string>()
                                : "";
    for (int i = 0; i < vocab_size; ++i) {
      if (types[size_t(i)] != kNormal) continue;
      if (!unk.empty() && tokens[size_t(i)] == unk)
        types[size_t(i)] = kUnknown;
      else if (is_byte_token(tokens[size_t(i)]))
        types[size_t(i)] = kByte;
    }
    md.set("tokenizer.ggml.model", std::string("llama"));
    md.set("tokenizer.ggml.pre", std::string("default"));
    md.set("tokenizer.ggml.tokens", io::gguf_string_array(tokens));
    io::GgufArray sc{io::GgufType::FLOAT32, {}};
    for (float s : scores) sc.items.emplace_back(s);
    md.set("tokenizer.ggml.scores", io::GgufValue(std::move(sc)));
    md.set("tokenizer.ggml.token_type", io::gguf_int32_array(types));
    md.set("tokenizer.ggml.add_space_prefix", prepend);
  }
  if (tok.bos_id() >= 0) md.set("tokenizer.ggml.bos_token_id", uint32_t(tok.bos_id()));
  if (tok.eos_id() >= 0) md.set("tokenizer.ggml.eos_token_id", uint32_t(tok.eos_id()));
  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    const std::string unk = model["unk_token"];
    for (int i = 0; i < vocab_size; ++i)
      if (tokens[size_t(i)] == unk) {
        md.set("tokenizer.ggml.unknown_token_id", uint32_t(i));
        break;
      }
  }
  bool add_eos = false;
  const fs::path tc = fs::path(dir) / "tokenizer_config.json";
  if (fs::exists(tc, ec)) {
    const json c = read_json(tc.string());
    if (c.is_object() && c.contains("add_eos_token") && c["add_eos_token"].is_boolean())
      add_eos = c["add_eos_token"];
    if (c.is_object() && c.contains("pad_token")) {
      const std::string pad = special_content(c["pad_token"]);
      for (int i = 0; i < vocab_size && !pad.empty(); ++i)
        if (tokens[size_t(i)] == pad) {
          md.set("tokenizer.ggml.padding_token_id", uint32_t(i));
          break;
        }
    }
  }
  md.set("tokenizer.ggml.add_bos_token", tok.adds_bos());
  md.set("tokenizer.ggml.add_eos_token", add_eos);
  return true;
}

namespace {

// The tokenizer.json and tokenizer_config.json a GGUF's tokenizer.ggml.* metadata stands for.
std::pair<json, json> rebuild_hf_files(const io::GgufFile& f) {
  const io::GgufMetadata& md = f.metadata();
  const std::string& path = f.path();
  const std::string& kind = md.get_string("tokenizer.ggml.model");
  const std::string pre = md.has("tokenizer.ggml.pre") ? md.get_string("tokenizer.ggml.pre") : "default";
  std::vector<std::string> tokens = md.get_string_array("tokenizer.ggml.tokens");
  std::vector<int32_t> types(tokens.size(), kNormal);
  if (md.has("tokenizer.ggml.token_type")) {
    const io::GgufArray& t = md.get_array("tokenizer.ggml.token_type", io::GgufType::INT32);
    if (t.items.size() != tokens.size())
      data_error(path + ": key 'tokenizer.ggml.token_type' has " + std::to_string(t.items.size()) +
                 " entries, 'tokenizer.ggml.tokens' has " + std::to_string(tokens.size()));
    for (size_t i = 0; i < tokens.size(); ++i) types[i] = std::get<int32_t>(t.items[i].v);
  }
  // llama.cpp's padding up to the model's rows: trailing unused "[PADn]" tokens.
  while (!tokens.empty() && types[tokens.size() - 1] == kUnused &&
         tokens.back() == "[PAD" + std::to_string(tokens.size() - 1) + "]")
    tokens.pop_back(), types.pop_back();
  if (tokens.empty()) data_error(path + ": key 'tokenizer.ggml.tokens' is empty");
  const int n = int(tokens.size());
  auto id_key = [&](const char* k) -> int {
    if (!md.has(k)) return -1;
    const int64_t v = md.get_int(k);
    if (v < 0 || v >= n)
      data_error(path + ": key '" + std::string(k) + "' is " + std::to_string(v) + ", outside the " +
                 std::to_string(n) + " tokens");
    return int(v);
  };
  const int bos = id_key("tokenizer.ggml.bos_token_id"), eos = id_key("tokenizer.ggml.eos_token_id");
  const int unk = id_key("tokenizer.ggml.unknown_token_id");
  const bool add_bos =
      md.has("tokenizer.ggml.add_bos_token") ? md.get_bool("tokenizer.ggml.add_bos_token") : kind == "llama";
  const bool add_eos = md.has("tokenizer.ggml.add_eos_token") && md.get_bool("tokenizer.ggml.add_eos_token");

  json vocab = json::object(), added = json::array(), merges = json::array();
  for (int i = 0; i < n; ++i) {
    if (!vocab.emplace(tokens[size_t(i)], i).second)
      data_error(path + ": key 'tokenizer.ggml.tokens': token " + std::to_string(i) + " " +
                 json(tokens[size_t(i)]).dump(-1, ' ', true, json::error_handler_t::replace) +
                 " appears twice");
    const int32_t t = types[size_t(i)];
    if (t == kControl || t == kUserDefined)
      added.push_back({{"id", i},
                       {"content", tokens[size_t(i)]},
                       {"single_word", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"normalized", false},
                       {"special", t == kControl}});
  }
  json doc = {{"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr}, {"added_tokens", added}};
  json bpe = {{"type", "BPE"},
              {"dropout", nullptr},
              {"continuing_subword_prefix", nullptr},
              {"end_of_word_suffix", nullptr},
              {"unk_token", unk >= 0 ? json(tokens[size_t(unk)]) : json(nullptr)}};
  if (kind == "gpt2") {
    if (md.has("tokenizer.ggml.merges"))
      for (const std::string& m : md.get_string_array("tokenizer.ggml.merges")) merges.push_back(m);
    json split;
    if (pre == "llama-bpe" || pre == "llama3" || pre == "smaug-bpe")
      split = kLlama3Regex;
    else if (pre == "qwen2")
      split = kQwen2Regex;
    else if (pre != "gpt-2" && pre != "default" && pre != "smollm")
      data_error(path + ": key 'tokenizer.ggml.pre' is '" + pre +
                 "'; qkv knows gpt-2, llama-bpe, qwen2 and smollm");
    if (pre == "smollm") {  // every digit on its own, then GPT-2's byte-level regex
      doc["normalizer"] = nullptr;
      doc["pre_tokenizer"] = {{"type", "Sequence"},
                              {"pretokenizers",
                               {{{"type", "Digits"}, {"individual_digits", true}},
                                {{"type", "ByteLevel"},
                                 {"add_prefix_space", false},
                                 {"trim_offsets", true},
                                 {"use_regex", true}}}}};
    } else if (split.is_null()) {
      doc["normalizer"] = nullptr;
      doc["pre_tokenizer"] = {
          {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
    } else {
      doc["normalizer"] = pre == "qwen2" ? json{{"type", "NFC"}} : json(nullptr);
      doc["pre_tokenizer"] = {
          {"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Split"}, {"pattern", {{"Regex", split}}}, {"behavior", "Isolated"}, {"invert", false}},
            {{"type", "ByteLevel"},
             {"add_prefix_space", false},
             {"trim_offsets", true},
             {"use_regex", false}}}}};
    }
    doc["decoder"] = {
        {"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
    bpe["fuse_unk"] = false, bpe["byte_fallback"] = false,
    bpe["ignore_merges"] = pre == "llama-bpe" || pre == "llama3";
  } else if (kind == "llama") {
    if (!md.has("tokenizer.ggml.scores"))
      data_error(path + ": key 'tokenizer.ggml.scores' is missing (a llama tokenizer)");
    const io::GgufArray& sa = md.get_array("tokenizer.ggml.scores", io::GgufType::FLOAT32);
    if (sa.items.size() < size_t(n))
      data_error(path + ": key 'tokenizer.ggml.scores' has " + std::to_string(sa.items.size()) +
                 " entries, fewer than the " + std::to_string(n) + " tokens");
    // Every split of a token into two tokens, by descending score of the token (ties: token id),
    // then by the ids of the two parts: Hugging Face's conversion of a SentencePiece model into merges.
    struct M {
      float score;
      int id, l, r;
    };
    std::vector<M> ms;
    for (int i = 0; i < n; ++i) {
      // Normal and user-defined tokens (Gemma's "▁▁" runs are both an added token and a merge result).
      if (types[size_t(i)] != kNormal && types[size_t(i)] != kUserDefined) continue;
      const std::string& t = tokens[size_t(i)];
      for (size_t c : char_cuts(t)) {
        const auto l = vocab.find(t.substr(0, c)), r = vocab.find(t.substr(c));
        if (l != vocab.end() && r != vocab.end())
          ms.push_back({std::get<float>(sa.items[size_t(i)].v), i, int(*l), int(*r)});
      }
    }
    std::stable_sort(ms.begin(), ms.end(), [](const M& a, const M& b) {
      if (a.score != b.score) return a.score > b.score;
      if (a.id != b.id) return a.id < b.id;
      return std::pair(a.l, a.r) < std::pair(b.l, b.r);
    });
    for (const M& m : ms) merges.push_back(json::array({tokens[size_t(m.l)], tokens[size_t(m.r)]}));
    const bool prefix =
        !md.has("tokenizer.ggml.add_space_prefix") || md.get_bool("tokenizer.ggml.add_space_prefix");
    json norm = json::array();
    if (prefix) norm.push_back({{"type", "Prepend"}, {"prepend", kSpace}});
    norm.push_back({{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kSpace}});
    doc["normalizer"] = {{"type", "Sequence"}, {"normalizers", norm}};
    doc["pre_tokenizer"] = nullptr;
    json dec = json::array({{{"type", "Replace"}, {"pattern", {{"String", kSpace}}}, {"content", " "}},
                            {{"type", "ByteFallback"}},
                            {{"type", "Fuse"}}});
    if (prefix) dec.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
    doc["decoder"] = {{"type", "Sequence"}, {"decoders", dec}};
    bpe["fuse_unk"] = true, bpe["byte_fallback"] = true, bpe["ignore_merges"] = false;
  } else {
    data_error(path + ": key 'tokenizer.ggml.model' is '" + kind +
               "'; qkv reads the gpt2 and llama tokenizers");
  }
  doc["post_processor"] = nullptr;
  bpe["vocab"] = std::move(vocab);
  bpe["merges"] = std::move(merges);
  doc["model"] = std::move(bpe);
  json cfg = {{"add_bos_token", add_bos && bos >= 0}, {"add_eos_token", add_eos && eos >= 0}};
  if (bos >= 0) cfg["bos_token"] = tokens[size_t(bos)];
  if (eos >= 0) cfg["eos_token"] = tokens[size_t(eos)];
  return {std::move(doc), std::move(cfg)};
}

void write_hf_files(const io::GgufFile& f, const fs::path& dir, std::string& tj, std::string& tc) {
  const auto [doc, cfg] = rebuild_hf_files(f);
  tj = (dir / "tokenizer.json").string(), tc = (dir / "tokenizer_config.json").string();
  std::string text;
  try {
    text = doc.dump(-1, ' ', false, json::error_handler_t::strict);
  } catch (const json::exception&) {
    data_error(f.path() + ": key 'tokenizer.ggml.tokens' holds a token that is not valid UTF-8");
  }
  io::write_file_atomic(tj, text);
  io::write_file_atomic(tc, cfg.dump());
}

}  // namespace

void gguf_write_hf_tokenizer(const io::GgufFile& f, const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  std::string tj, tc;
  write_hf_files(f, dir, tj, tc);
}

Tokenizer gguf_hf_tokenizer(const io::GgufFile& f) {
  const std::string& path = f.path();
  Scratch scratch;
  std::string tj, tc;
  write_hf_files(f, scratch.path, tj, tc);
  try {
    return Tokenizer::from_hf_json(tj, tc);
  } catch (const Error& e) {  // name the GGUF, not the scratch files
    std::string what = e.what();
    for (const std::string& tmp : {tj, tc})
      for (auto p = what.find(tmp); p != std::string::npos; p = what.find(tmp))
        what.replace(p, tmp.size(),
                     path + " (tokenizer.ggml.* rebuilt as " + fs::path(tmp).filename().string() + ")");
    data_error(what);
  }
}

}  // namespace qkv
