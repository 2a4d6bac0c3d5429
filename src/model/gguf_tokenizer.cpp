// Tokenizers <-> GGUF metadata for every family (include/qkv/io/gguf_family.hpp): a Hugging Face
// tokenizer.json, or GPT-2's own vocab.json + merges.txt, written as llama.cpp's converter writes
// tokenizer.ggml.*; and read back — GPT-2's pipeline as the vocab.json + merges.txt it stands for, every
// other one by rebuilding the tokenizer.json it stands for (then run by Tokenizer::from_hf_json, the
// implementation checked against npm's tokenizers).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>
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
const char* const kEndOfText = "<|endoftext|>";

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

bool valid_json_string(const std::string& s) {
  try {
    (void)json(s).dump(-1, ' ', false, json::error_handler_t::strict);
    return true;
  } catch (const json::exception&) {
    return false;
  }
}

// ---- writing: a tokenizer's files -> tokenizer.ggml.* ----

// The vocabulary padded to the model's rows: every token string and llama.cpp's type for it.
struct GgufVocab {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
};

void check_fits(const std::string& file, int n, int vocab_size) {
  if (n > vocab_size)
    data_error(file + ": the tokenizer has " + std::to_string(n) + " tokens, more than the model's vocab_size " +
               std::to_string(vocab_size));
}

// A tokenizer.json's vocabulary and added tokens (special: control; others: user-defined), then
// "[PADn]" rows of type unused up to vocab_size, as llama.cpp's converter pads.
GgufVocab hf_vocab(const json& j, const json& model, int vocab_size) {
  GgufVocab v{std::vector<std::string>(size_t(vocab_size)), std::vector<int32_t>(size_t(vocab_size), kNormal)};
  std::vector<char> have(size_t(vocab_size), 0);
  for (const auto& [t, id] : model.at("vocab").items()) {
    const int64_t i = id.get<int64_t>();
    v.tokens[size_t(i)] = t;
    have[size_t(i)] = 1;
  }
  if (j.contains("added_tokens") && j["added_tokens"].is_array())
    for (const json& a : j["added_tokens"]) {
      const int64_t i = a.at("id").get<int64_t>();
      v.tokens[size_t(i)] = a.at("content").get<std::string>();
      have[size_t(i)] = 1;
      v.types[size_t(i)] = a.value("special", false) ? kControl : kUserDefined;
    }
  for (int i = 0; i < vocab_size; ++i)
    if (!have[size_t(i)]) v.tokens[size_t(i)] = "[PAD" + std::to_string(i) + "]", v.types[size_t(i)] = kUnused;
  return v;
}

// What a tokenizer.json's normalizer, pre-tokenizer and decoder say about which of llama.cpp's two
// tokenizer models it is.
struct Pipeline {
  bool byte_level = false, metaspace = false, prepend = false, replace_space = false, digits = false,
       byte_level_regex = false;
  std::string split_regex;
};

Pipeline read_pipeline(const json& j) {
  Pipeline p;
  for (const char* part : {"normalizer", "pre_tokenizer", "decoder"}) {
    if (!j.contains(part)) continue;
    const bool pre = std::string(part) == "pre_tokenizer", norm = std::string(part) == "normalizer";
    walk(j[part], [&](const json& o) {
      const std::string t = o.value("type", "");
      if (t == "ByteLevel") {
        p.byte_level = true;
        if (pre && o.value("use_regex", true)) p.byte_level_regex = true;
      }
      if (t == "Digits" && pre) p.digits = o.value("individual_digits", false);
      if (t == "Metaspace") {
        p.metaspace = true;
        if (pre && o.value("prepend_scheme", "always") != "never" && o.value("add_prefix_space", true))
          p.prepend = true;
      }
      if (t == "Prepend" && o.value("prepend", "") == kSpace) p.prepend = true;
      if (t == "Replace" && norm && o.value("content", "") == kSpace) p.replace_space = true;
      if (t == "Split" && o.contains("pattern") && o["pattern"].contains("Regex"))
        p.split_regex = o["pattern"]["Regex"];
    });
  }
  return p;
}

// Merges as (left, right) (tokenizer.json has them as "left right" strings or as pairs).
std::vector<std::pair<std::string, std::string>> hf_merges(const json& model, const std::string& file) {
  std::vector<std::pair<std::string, std::string>> merges;
  if (!model.contains("merges")) return merges;
  for (const json& m : model["merges"]) {
    if (m.is_array() && m.size() == 2) {
      merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const auto sp = s.find(' ', 1);
      if (sp == std::string::npos) data_error(file + ": key 'model.merges': merge \"" + s + "\" has no space");
      merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else {
      data_error(file + ": key 'model.merges': expected strings or pairs");
    }
  }
  return merges;
}

// llama.cpp's name for a byte-level pre-tokenizer, or an error naming the file.
std::string byte_level_pre(const Pipeline& p, const std::string& file) {
  if (p.split_regex == kLlama3Regex && !p.digits) return "llama-bpe";
  if (p.split_regex == kQwen2Regex && !p.digits) return "qwen2";
  if (p.split_regex.empty() && p.byte_level_regex && p.digits)
    return "smollm";  // SmolLM: Digits (individual) + GPT-2's ByteLevel regex
  if (p.split_regex.empty() && p.byte_level_regex) return "gpt-2";
  data_error(file +
             ": key 'pre_tokenizer': the pre-tokenizer is not one llama.cpp names (llama-bpe, qwen2, smollm, "
             "gpt-2); qkv cannot write it as tokenizer.ggml.pre");
}

void set_byte_level(io::GgufMetadata& md, const GgufVocab& v, const std::string& pre,
                    const std::vector<std::string>& merges) {
  md.set("tokenizer.ggml.model", std::string("gpt2"));
  md.set("tokenizer.ggml.pre", pre);
  md.set("tokenizer.ggml.tokens", io::gguf_string_array(v.tokens));
  md.set("tokenizer.ggml.token_type", io::gguf_int32_array(v.types));
  md.set("tokenizer.ggml.merges", io::gguf_string_array(merges));
}

std::vector<std::string> joined_merges(const std::vector<std::pair<std::string, std::string>>& merges,
                                       const std::string& file) {
  std::vector<std::string> ms;
  for (const auto& [l, r] : merges) {
    if (l.find(' ') != std::string::npos || r.find(' ') != std::string::npos)
      data_error(file +
                 ": key 'model.merges': a merge part contains a space, which GGUF's \"left right\" form cannot "
                 "hold");
    ms.push_back(l + " " + r);
  }
  return ms;
}

// SentencePiece: scores instead of merges. A token's score is minus the rank of the first merge that
// makes it (0 for tokens no merge makes), so "every split of a token into two tokens, by descending
// score" — how Hugging Face turns a SentencePiece model into merges — gives the same merge order back.
std::vector<float> merge_scores(const GgufVocab& v, const std::vector<std::pair<std::string, std::string>>& merges,
                                const std::string& file) {
  const size_t n = v.tokens.size();
  std::unordered_map<std::string, int> id_of;
  for (size_t i = 0; i < n; ++i) id_of.emplace(v.tokens[i], int(i));
  std::vector<float> scores(n, 0.0f);
  std::vector<char> scored(n, 0);
  for (size_t r = 0; r < merges.size(); ++r) {
    const auto it = id_of.find(merges[r].first + merges[r].second);
    if (it == id_of.end())
      data_error(file + ": key 'model.merges': merge " + std::to_string(r) + " makes a token not in the vocabulary");
    if (!scored[size_t(it->second)]) scores[size_t(it->second)] = -float(r + 1), scored[size_t(it->second)] = 1;
    if (float(r + 1) > 16777216.0f) data_error(file + ": more than 2^24 merges cannot be stored as float scores");
  }
  // Tokens no merge makes come after every merged one (their splits, if any, merge last).
  for (size_t i = 0; i < n; ++i)
    if (!scored[i]) scores[i] = -float(merges.size() + 1);
  return scores;
}

void set_sentencepiece(io::GgufMetadata& md, GgufVocab v, const json& model,
                       const std::vector<std::pair<std::string, std::string>>& merges, bool prepend,
                       const std::string& file) {
  const std::vector<float> scores = merge_scores(v, merges, file);
  const std::string unk = model.contains("unk_token") && model["unk_token"].is_string()
                              ? model["unk_token"].get<std::string>()
                              : "";
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    if (v.types[i] != kNormal) continue;
    if (!unk.empty() && v.tokens[i] == unk)
      v.types[i] = kUnknown;
    else if (is_byte_token(v.tokens[i]))
      v.types[i] = kByte;
  }
  md.set("tokenizer.ggml.model", std::string("llama"));
  md.set("tokenizer.ggml.pre", std::string("default"));
  md.set("tokenizer.ggml.tokens", io::gguf_string_array(v.tokens));
  io::GgufArray sc{io::GgufType::FLOAT32, {}};
  for (float s : scores) sc.items.emplace_back(s);
  md.set("tokenizer.ggml.scores", io::GgufValue(std::move(sc)));
  md.set("tokenizer.ggml.token_type", io::gguf_int32_array(v.types));
  md.set("tokenizer.ggml.add_space_prefix", prepend);
}

int index_of(const std::vector<std::string>& tokens, const std::string& s) {
  if (s.empty()) return -1;
  const auto it = std::find(tokens.begin(), tokens.end(), s);
  return it == tokens.end() ? -1 : int(it - tokens.begin());
}

// BOS/EOS as qkv's reader resolves them, the unknown token, tokenizer_config.json's pad token and
// add_eos_token, and whether BOS is added.
void set_special_ids(io::GgufMetadata& md, const std::string& dir, const Tokenizer& tok, const json& model,
                     const std::vector<std::string>& tokens) {
  if (tok.bos_id() >= 0) md.set("tokenizer.ggml.bos_token_id", uint32_t(tok.bos_id()));
  if (tok.eos_id() >= 0) md.set("tokenizer.ggml.eos_token_id", uint32_t(tok.eos_id()));
  if (model.contains("unk_token") && model["unk_token"].is_string())
    if (const int unk = index_of(tokens, model["unk_token"]); unk >= 0)
      md.set("tokenizer.ggml.unknown_token_id", uint32_t(unk));
  bool add_eos = false;
  std::error_code ec;
  const fs::path tc = fs::path(dir) / "tokenizer_config.json";
  if (fs::exists(tc, ec)) {
    const json c = read_json(tc.string());
    if (c.is_object() && c.contains("add_eos_token") && c["add_eos_token"].is_boolean()) add_eos = c["add_eos_token"];
    if (c.is_object() && c.contains("pad_token"))
      if (const int pad = index_of(tokens, special_content(c["pad_token"])); pad >= 0)
        md.set("tokenizer.ggml.padding_token_id", uint32_t(pad));
  }
  md.set("tokenizer.ggml.add_bos_token", tok.adds_bos());
  md.set("tokenizer.ggml.add_eos_token", add_eos);
}

// dir/tokenizer.json (+ tokenizer_config.json): byte-level BPE or SentencePiece-style BPE.
int tokenizer_json_metadata(io::GgufMetadata& md, const std::string& dir, int vocab_size) {
  const std::string file = (fs::path(dir) / "tokenizer.json").string();
  const json j = read_json(file);
  // qkv's own reader first: it names anything malformed, and gives BOS/EOS as Hugging Face resolves them.
  const Tokenizer tok = Tokenizer::from_dir(dir);
  if (!j.contains("model") || !j["model"].is_object() || j["model"].value("type", "BPE") != "BPE")
    data_error(file + ": key 'model': only BPE tokenizers are written to GGUF by qkv");
  const json& model = j["model"];
  check_fits(file, tok.vocab_size(), vocab_size);
  const GgufVocab v = hf_vocab(j, model, vocab_size);
  const Pipeline p = read_pipeline(j);
  const bool spm = !p.byte_level && (model.value("byte_fallback", false) || p.metaspace || p.replace_space);
  if (!p.byte_level && !spm)
    data_error(file +
               ": neither a byte-level BPE (ByteLevel) nor a SentencePiece-style BPE (Metaspace or ▁ normalizer "
               "with byte_fallback): not representable as a GGUF tokenizer");
  const auto merges = hf_merges(model, file);
  if (p.byte_level)
    set_byte_level(md, v, byte_level_pre(p, file), joined_merges(merges, file));
  else
    set_sentencepiece(md, v, model, merges, p.prepend, file);
  set_special_ids(md, dir, tok, model, v.tokens);
  return tok.vocab_size();
}

// GPT-2's own files (vocab.json + merges.txt, or encoder.json + vocab.bpe): as llama.cpp's GPT2Model
// converter writes them — every token normal but <|endoftext|> (control, and BOS/EOS/unknown), the merges
// in rank order, GPT-2's pre-tokenizer, no BOS added.
int gpt2_files_metadata(io::GgufMetadata& md, const std::string& dir, int vocab_size) {
  const Tokenizer tok = Tokenizer::from_dir(dir);
  const int n = tok.vocab_size();
  check_fits(dir, n, vocab_size);
  GgufVocab v{std::vector<std::string>(size_t(vocab_size)), std::vector<int32_t>(size_t(vocab_size), kNormal)};
  int eot = -1;
  for (int i = 0; i < vocab_size; ++i) {
    if (i >= n) {
      v.tokens[size_t(i)] = "[PAD" + std::to_string(i) + "]", v.types[size_t(i)] = kUnused;
      continue;
    }
    v.tokens[size_t(i)] = tok.token_string(i);
    if (v.tokens[size_t(i)] == kEndOfText) {
      v.types[size_t(i)] = kControl;
      if (eot < 0) eot = i;
    }
  }
  // The merges as the tokenizer holds them (its own writer gives them in rank order, one per line).
  Scratch scratch;
  tok.write_files(scratch.path.string());
  std::ifstream in(scratch.path / "merges.txt", std::ios::binary);
  std::vector<std::string> merges;
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line.rfind("#version", 0) != 0) merges.push_back(line);
  set_byte_level(md, v, "gpt-2", merges);
  if (eot >= 0)
    for (const char* k : {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                          "tokenizer.ggml.unknown_token_id"})
      md.set(k, uint32_t(eot));
  md.set("tokenizer.ggml.add_bos_token", false);
  md.set("tokenizer.ggml.add_eos_token", false);
  return n;
}

// ---- reading: tokenizer.ggml.* -> the files it stands for ----

// The metadata's vocabulary without llama.cpp's padding, with the special ids and flags.
struct MetaVocab {
  std::string kind, pre;
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  int bos = -1, eos = -1, unk = -1;
  bool add_bos = false, add_eos = false;
};

MetaVocab read_meta_vocab(const io::GgufFile& f) {
  const io::GgufMetadata& md = f.metadata();
  const std::string& path = f.path();
  MetaVocab v;
  v.kind = md.get_string("tokenizer.ggml.model");
  v.pre = md.has("tokenizer.ggml.pre") ? md.get_string("tokenizer.ggml.pre") : "default";
  v.tokens = md.get_string_array("tokenizer.ggml.tokens");
  v.types.assign(v.tokens.size(), kNormal);
  if (md.has("tokenizer.ggml.token_type")) {
    const io::GgufArray& t = md.get_array("tokenizer.ggml.token_type", io::GgufType::INT32);
    if (t.items.size() != v.tokens.size())
      data_error(path + ": key 'tokenizer.ggml.token_type' has " + std::to_string(t.items.size()) +
                 " entries, 'tokenizer.ggml.tokens' has " + std::to_string(v.tokens.size()));
    for (size_t i = 0; i < v.tokens.size(); ++i) v.types[i] = std::get<int32_t>(t.items[i].v);
  }
  // llama.cpp's padding up to the model's rows: trailing unused "[PADn]" tokens.
  while (!v.tokens.empty() && v.types[v.tokens.size() - 1] == kUnused &&
         v.tokens.back() == "[PAD" + std::to_string(v.tokens.size() - 1) + "]")
    v.tokens.pop_back(), v.types.pop_back();
  if (v.tokens.empty()) data_error(path + ": key 'tokenizer.ggml.tokens' is empty");
  const int n = int(v.tokens.size());
  auto id_key = [&](const char* k) -> int {
    if (!md.has(k)) return -1;
    const int64_t x = md.get_int(k);
    if (x < 0 || x >= n)
      data_error(path + ": key '" + std::string(k) + "' is " + std::to_string(x) + ", outside the " +
                 std::to_string(n) + " tokens");
    return int(x);
  };
  v.bos = id_key("tokenizer.ggml.bos_token_id"), v.eos = id_key("tokenizer.ggml.eos_token_id");
  v.unk = id_key("tokenizer.ggml.unknown_token_id");
  v.add_bos = md.has("tokenizer.ggml.add_bos_token") ? md.get_bool("tokenizer.ggml.add_bos_token") : v.kind == "llama";
  v.add_eos = md.has("tokenizer.ggml.add_eos_token") && md.get_bool("tokenizer.ggml.add_eos_token");
  return v;
}

// GPT-2's byte-level pre-tokenizer as a tokenizer.json spells it.
json byte_level_json(bool use_regex) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", use_regex}};
}

// A byte-level (tokenizer.ggml.model "gpt2") tokenizer's normalizer, pre-tokenizer, decoder and merges.
void byte_level_parts(const io::GgufFile& f, const MetaVocab& v, json& doc, json& bpe, json& merges) {
  const io::GgufMetadata& md = f.metadata();
  const std::string& pre = v.pre;
  if (md.has("tokenizer.ggml.merges"))
    for (const std::string& m : md.get_string_array("tokenizer.ggml.merges")) merges.push_back(m);
  json split;
  if (pre == "llama-bpe" || pre == "llama3" || pre == "smaug-bpe")
    split = kLlama3Regex;
  else if (pre == "qwen2")
    split = kQwen2Regex;
  else if (pre != "gpt-2" && pre != "default" && pre != "smollm")
    data_error(f.path() + ": key 'tokenizer.ggml.pre' is '" + pre + "'; qkv knows gpt-2, llama-bpe, qwen2 and smollm");
  doc["normalizer"] = pre == "qwen2" ? json{{"type", "NFC"}} : json(nullptr);
  if (pre == "smollm")  // every digit on its own, then GPT-2's byte-level regex
    doc["pre_tokenizer"] = {{"type", "Sequence"},
                            {"pretokenizers", {{{"type", "Digits"}, {"individual_digits", true}}, byte_level_json(true)}}};
  else if (split.is_null())
    doc["pre_tokenizer"] = byte_level_json(true);
  else
    doc["pre_tokenizer"] = {
        {"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", {{"Regex", split}}}, {"behavior", "Isolated"}, {"invert", false}},
          byte_level_json(false)}}};
  doc["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  bpe["fuse_unk"] = false, bpe["byte_fallback"] = false;
  bpe["ignore_merges"] = pre == "llama-bpe" || pre == "llama3";
}

// Every split of a normal or user-defined token into two tokens, by descending score of the token (ties:
// token id), then by the ids of the two parts: Hugging Face's conversion of a SentencePiece model into
// merges. (Gemma's "▁▁" runs are both an added token and a merge result.)
json sentencepiece_merges(const io::GgufFile& f, const MetaVocab& v) {
  const io::GgufMetadata& md = f.metadata();
  const int n = int(v.tokens.size());
  if (!md.has("tokenizer.ggml.scores")) data_error(f.path() + ": key 'tokenizer.ggml.scores' is missing (a llama tokenizer)");
  const io::GgufArray& sa = md.get_array("tokenizer.ggml.scores", io::GgufType::FLOAT32);
  if (sa.items.size() < size_t(n))
    data_error(f.path() + ": key 'tokenizer.ggml.scores' has " + std::to_string(sa.items.size()) +
               " entries, fewer than the " + std::to_string(n) + " tokens");
  struct M {
    float score;
    int id, l, r;
  };
  std::unordered_map<std::string_view, int> id_of;  // the tokens are unique (vocab_and_added checked)
  id_of.reserve(size_t(n));
  for (int i = 0; i < n; ++i) id_of.emplace(v.tokens[size_t(i)], i);
  std::vector<M> ms;
  for (int i = 0; i < n; ++i) {
    if (v.types[size_t(i)] != kNormal && v.types[size_t(i)] != kUserDefined) continue;
    const std::string_view t = v.tokens[size_t(i)];
    for (size_t c : char_cuts(v.tokens[size_t(i)])) {
      const auto l = id_of.find(t.substr(0, c)), r = id_of.find(t.substr(c));
      if (l != id_of.end() && r != id_of.end()) ms.push_back({std::get<float>(sa.items[size_t(i)].v), i, l->second, r->second});
    }
  }
  std::stable_sort(ms.begin(), ms.end(), [](const M& a, const M& b) {
    if (a.score != b.score) return a.score > b.score;
    if (a.id != b.id) return a.id < b.id;
    return std::pair(a.l, a.r) < std::pair(b.l, b.r);
  });
  json merges = json::array();
  for (const M& m : ms) merges.push_back(json::array({v.tokens[size_t(m.l)], v.tokens[size_t(m.r)]}));
  return merges;
}

// A SentencePiece-style (tokenizer.ggml.model "llama") tokenizer's normalizer, decoder and merges.
void sentencepiece_parts(const io::GgufFile& f, const MetaVocab& v, json& doc, json& bpe, json& merges) {
  const io::GgufMetadata& md = f.metadata();
  merges = sentencepiece_merges(f, v);
  const bool prefix = !md.has("tokenizer.ggml.add_space_prefix") || md.get_bool("tokenizer.ggml.add_space_prefix");
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
}

// The vocabulary object (checked for duplicates) and the added tokens (control and user-defined ones).
void vocab_and_added(const std::string& path, const MetaVocab& v, json& vocab, json& added) {
  for (int i = 0; i < int(v.tokens.size()); ++i) {
    if (!vocab.emplace(v.tokens[size_t(i)], i).second)
      data_error(path + ": key 'tokenizer.ggml.tokens': token " + std::to_string(i) + " " +
                 json(v.tokens[size_t(i)]).dump(-1, ' ', true, json::error_handler_t::replace) + " appears twice");
    const int32_t t = v.types[size_t(i)];
    if (t == kControl || t == kUserDefined)
      added.push_back({{"id", i},
                       {"content", v.tokens[size_t(i)]},
                       {"single_word", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"normalized", false},
                       {"special", t == kControl}});
  }
}

// The tokenizer.json and tokenizer_config.json a GGUF's tokenizer.ggml.* metadata stands for.
std::pair<json, json> rebuild_hf_files(const io::GgufFile& f) {
  const MetaVocab v = read_meta_vocab(f);
  json vocab = json::object(), added = json::array(), merges = json::array();
  vocab_and_added(f.path(), v, vocab, added);
  json doc = {{"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr}, {"added_tokens", added}};
  json bpe = {{"type", "BPE"},
              {"dropout", nullptr},
              {"continuing_subword_prefix", nullptr},
              {"end_of_word_suffix", nullptr},
              {"unk_token", v.unk >= 0 ? json(v.tokens[size_t(v.unk)]) : json(nullptr)}};
  if (v.kind == "gpt2")
    byte_level_parts(f, v, doc, bpe, merges);
  else if (v.kind == "llama")
    sentencepiece_parts(f, v, doc, bpe, merges);
  else
    data_error(f.path() + ": key 'tokenizer.ggml.model' is '" + v.kind + "'; qkv reads the gpt2 and llama tokenizers");
  doc["post_processor"] = nullptr;
  bpe["vocab"] = std::move(vocab);
  bpe["merges"] = std::move(merges);
  doc["model"] = std::move(bpe);
  json cfg = {{"add_bos_token", v.add_bos && v.bos >= 0}, {"add_eos_token", v.add_eos && v.eos >= 0}};
  if (v.bos >= 0) cfg["bos_token"] = v.tokens[size_t(v.bos)];
  if (v.eos >= 0) cfg["eos_token"] = v.tokens[size_t(v.eos)];
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

// GPT-2's own pipeline from tokenizer.ggml.tokens + merges, through the vocab.json + merges.txt they
// stand for (errors name the GGUF key, not the scratch files).
Tokenizer gpt2_files_tokenizer(const io::GgufFile& f) {
  const io::GgufMetadata& md = f.metadata();
  MetaVocab v;
  v.tokens = md.get_string_array("tokenizer.ggml.tokens");
  if (md.has("tokenizer.ggml.token_type")) {
    const io::GgufArray& types = md.get_array("tokenizer.ggml.token_type", io::GgufType::INT32);
    if (types.items.size() != v.tokens.size())
      data_error(f.path() + ": key 'tokenizer.ggml.token_type' has " + std::to_string(types.items.size()) +
                 " entries, 'tokenizer.ggml.tokens' has " + std::to_string(v.tokens.size()));
    while (!v.tokens.empty() && std::get<int32_t>(types.items[v.tokens.size() - 1].v) == kUnused &&
           v.tokens.back() == "[PAD" + std::to_string(v.tokens.size() - 1) + "]")
      v.tokens.pop_back();
  }
  std::vector<std::string> merges;
  if (md.has("tokenizer.ggml.merges")) merges = md.get_string_array("tokenizer.ggml.merges");
  std::set<std::string> seen;
  std::string vocab = "{\n";
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    const std::string& t = v.tokens[i];
    if (!valid_json_string(t))
      data_error(f.path() + ": key 'tokenizer.ggml.tokens': token " + std::to_string(i) + " is not valid UTF-8");
    if (!seen.insert(t).second)
      data_error(f.path() + ": key 'tokenizer.ggml.tokens': token " + std::to_string(i) + " " +
                 json(t).dump(-1, ' ', true, json::error_handler_t::replace) + " appears twice");
    vocab += "  " + json(t).dump() + ": " + std::to_string(i) + (i + 1 < v.tokens.size() ? ",\n" : "\n");
  }
  vocab += "}\n";
  std::string merges_txt = "#version: 0.2\n";
  for (size_t i = 0; i < merges.size(); ++i) {
    if (merges[i].find_first_of("\r\n") != std::string::npos)
      data_error(f.path() + ": key 'tokenizer.ggml.merges': merge " + std::to_string(i) + " contains a line break");
    merges_txt += merges[i] + "\n";
  }
  Scratch scratch;
  const std::string vj = (scratch.path / "vocab.json").string(), mt = (scratch.path / "merges.txt").string();
  io::write_file_atomic(vj, vocab);
  io::write_file_atomic(mt, merges_txt);
  try {
    return Tokenizer::from_files(vj, mt);
  } catch (const Error& e) {
    std::string what = e.what();
    for (const auto& [tmp, key] : {std::pair{vj, "tokenizer.ggml.tokens"}, std::pair{mt, "tokenizer.ggml.merges"}})
      if (auto p = what.find(tmp); p != std::string::npos) what.replace(p, tmp.size(), f.path() + ": key '" + key + "'");
    data_error(what);
  }
}

}  // namespace

int gguf_tokenizer_metadata(io::GgufMetadata& md, const std::string& dir, int vocab_size) {
  std::error_code ec;
  if (dir.empty()) return 0;
  const fs::path d(dir);
  if (fs::exists(d / "tokenizer.json", ec)) return tokenizer_json_metadata(md, dir, vocab_size);
  const bool hf = fs::exists(d / "vocab.json", ec) && fs::exists(d / "merges.txt", ec);
  const bool openai = fs::exists(d / "encoder.json", ec) && fs::exists(d / "vocab.bpe", ec);
  if (!hf && !openai) return 0;
  return gpt2_files_metadata(md, dir, vocab_size);
}

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
        what.replace(p, tmp.size(), path + " (tokenizer.ggml.* rebuilt as " + fs::path(tmp).filename().string() + ")");
    data_error(what);
  }
}

std::optional<Tokenizer> gguf_tokenizer(const io::GgufFile& f) {
  const io::GgufMetadata& md = f.metadata();
  if (!md.has("tokenizer.ggml.model")) return std::nullopt;
  const std::string& model = md.get_string("tokenizer.ggml.model");
  if (model == "none" || model == "no_vocab") return std::nullopt;  // llama.cpp's "no tokenizer"
  const std::string pre = md.has("tokenizer.ggml.pre") ? md.get_string("tokenizer.ggml.pre") : "default";
  if (model == "gpt2" && (pre == "gpt-2" || pre == "default")) return gpt2_files_tokenizer(f);
  if (model == "gpt2" || model == "llama") return gguf_hf_tokenizer(f);
  data_error(f.path() + ": key 'tokenizer.ggml.model' is '" + model +
             "'; qkv reads the gpt2 (byte-level BPE) and llama (SentencePiece) tokenizers");
}

std::optional<Tokenizer> gguf_tokenizer(const std::string& path) {
  return gguf_tokenizer(io::GgufFile::open(path));
}

}  // namespace qkv
