// GPT-2 <-> llama.cpp's gpt2 GGUF (names, layout and metadata in include/qkv/io/gguf_gpt2.hpp).
#include "qkv/io/gguf_gpt2.hpp"

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "qkv/error.hpp"
#include "qkv/io/atomic_file.hpp"
#include "qkv/io/gguf_family.hpp"

namespace fs = std::filesystem;

namespace qkv {
namespace {

using io::GgmlType;

constexpr int32_t kTokenNormal = 1, kTokenControl = 3, kTokenUnused = 5;  // llama.cpp's TokenType
const char* const kEndOfText = "<|endoftext|>";

bool starts_with(const std::string& s, const std::string& p) {
  return s.rfind(p, 0) == 0;
}

// HF GPT-2 name -> (GGUF name, whether llama.cpp's converter transposes it).
std::pair<std::string, bool> gguf_name(const std::string& hf) {
  static const std::map<std::string, std::pair<std::string, bool>> block = {
      {"ln_1.weight", {"attn_norm.weight", false}},         {"ln_1.bias", {"attn_norm.bias", false}},
      {"attn.c_attn.weight", {"attn_qkv.weight", true}},    {"attn.c_attn.bias", {"attn_qkv.bias", false}},
      {"attn.c_proj.weight", {"attn_output.weight", true}}, {"attn.c_proj.bias", {"attn_output.bias", false}},
      {"ln_2.weight", {"ffn_norm.weight", false}},          {"ln_2.bias", {"ffn_norm.bias", false}},
      {"mlp.c_fc.weight", {"ffn_up.weight", true}},         {"mlp.c_fc.bias", {"ffn_up.bias", false}},
      {"mlp.c_proj.weight", {"ffn_down.weight", true}},     {"mlp.c_proj.bias", {"ffn_down.bias", false}},
  };
  if (hf == "wte.weight") return {"token_embd.weight", false};
  if (hf == "wpe.weight") return {"position_embd.weight", false};
  if (hf == "ln_f.weight") return {"output_norm.weight", false};
  if (hf == "ln_f.bias") return {"output_norm.bias", false};
  if (starts_with(hf, "h.")) {
    const auto dot = hf.find('.', 2);
    const auto it = block.find(hf.substr(dot + 1));
    if (dot != std::string::npos && it != block.end())
      return {"blk." + hf.substr(2, dot - 2) + "." + it->second.first, it->second.second};
  }
  data_error("gguf: no llama.cpp name for GPT-2 parameter " + hf);
}

// The GGUF dims of a parameter: transposed [in, out] -> ne = {in, out}; otherwise ne = reversed shape.
std::vector<uint64_t> gguf_ne(const ParamSpec& s, bool transposed) {
  if (transposed) return {uint64_t(s.shape[0]), uint64_t(s.shape[1])};
  return std::vector<uint64_t>(s.shape.rbegin(), s.shape.rend());
}

uint32_t file_type(GgmlType t) {  // llama.cpp's LlamaFileType for a whole-model type
  switch (t) {
    case GgmlType::F32:
      return 0;
    case GgmlType::F16:
      return 1;
    case GgmlType::Q4_0:
      return 2;
    case GgmlType::Q8_0:
      return 7;
    case GgmlType::Q4_K:
      return 14;  // MOSTLY_Q4_K_S: every quantized tensor Q4_K
    case GgmlType::Q6_K:
      return 18;
    case GgmlType::BF16:
      return 32;
    default:
      return 0;
  }
}

int64_t block_of(GgmlType t) {
  return io::ggml_type_traits(uint32_t(t))->block_size;
}

// Lines of merges.txt (without the "#version" line) of a tokenizer, via its own writer.
std::vector<std::string> tokenizer_merges(const Tokenizer& tok, const fs::path& dir) {
  tok.write_files(dir.string());
  std::ifstream in(dir / "merges.txt", std::ios::binary);
  std::vector<std::string> out;
  std::string line;
  while (std::getline(in, line))
    if (!line.empty() && !starts_with(line, "#version")) out.push_back(line);
  return out;
}

// A private scratch directory, removed when it goes out of scope.
struct ScratchDir {
  fs::path path;
  ScratchDir() {
    static std::atomic<int> counter{0};
    path = fs::temp_directory_path() /
           ("qkv-gguf-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::error_code ec;
    fs::remove_all(path, ec);
    fs::create_directories(path, ec);
    if (ec) data_error(path.string() + ": cannot create a scratch directory: " + ec.message());
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// A FLOAT32 key read back as the shortest decimal that rounds to the same float (1e-5 stays 1e-5, not
// 9.99999974737875e-06), so configs print as they were written; the float the kernels use is unchanged.
double shortest_decimal(double x) {
  const float f = float(x);
  if (double(f) != x || !std::isfinite(f)) return x;
  for (int p = 1; p <= 9; ++p) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.*g", p, double(f));
    const double d = std::strtod(buf, nullptr);
    if (float(d) == f) return d;
  }
  return x;
}

bool valid_json_string(const std::string& s) {
  try {
    (void)nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::strict);
    return true;
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

void check_finite(const GPT2& m, const std::string& file) {
  for (const auto& s : m.table) {
    const float* p = m.params.data() + s.offset;
    for (int64_t i = 0; i < s.numel; i++)
      if (!std::isfinite(p[i]))
        data_error(file + ": tensor " + s.name + " holds " + (std::isnan(p[i]) ? "NaN" : "Inf") +
                   " at flat index " + std::to_string(i) + "; refusing to compute with it");
  }
}

}  // namespace

io::GgmlType gguf_gpt2_tensor_type(io::GgmlType requested, uint64_t ne0) {
  std::vector<GgmlType> chain = {requested};
  if (requested == GgmlType::Q4_K) chain.push_back(GgmlType::Q4_0);
  if (requested == GgmlType::Q6_K) chain.push_back(GgmlType::Q8_0);
  chain.push_back(GgmlType::F16);
  for (GgmlType t : chain)
    if (ne0 % uint64_t(block_of(t)) == 0) return t;
  return GgmlType::F16;
}

std::vector<GgufTensorChoice> save_gguf_gpt2(const GPT2& model, const Tokenizer* tokenizer,
                                             const std::string& path, io::GgmlType type,
                                             const std::string& name) {
  const GPT2Config& c = model.config;
  io::GgufMetadata md(path);
  md.set("general.architecture", std::string("gpt2"));
  md.set("general.type", std::string("model"));
  md.set("general.name", name.empty() ? fs::path(path).stem().string() : name);
  md.set("gpt2.block_count", uint32_t(c.n_layer));
  md.set("gpt2.context_length", uint32_t(c.n_positions));
  md.set("gpt2.embedding_length", uint32_t(c.n_embd));
  md.set("gpt2.feed_forward_length", uint32_t(c.attn_only ? 0 : c.mlp_dim()));
  md.set("gpt2.attention.head_count", uint32_t(c.n_head));
  md.set("gpt2.attention.layer_norm_epsilon", float(c.layer_norm_epsilon));
  if (c.attn_only) md.set("qkv.attn_only", true);
  md.set("general.file_type", file_type(type));
  md.set("general.quantization_version", uint32_t(2));
  if (tokenizer) {
    const int n_tok = tokenizer->vocab_size();
    if (n_tok > c.vocab_size)
      data_error(path + ": the tokenizer has " + std::to_string(n_tok) +
                 " tokens, more than the model's vocab_size " + std::to_string(c.vocab_size));
    std::vector<std::string> tokens;
    std::vector<int32_t> types;
    int eot = -1;
    for (int i = 0; i < c.vocab_size; ++i) {
      if (i < n_tok) {
        tokens.push_back(tokenizer->token_string(i));
        const bool control = tokens.back() == kEndOfText;
        if (control && eot < 0) eot = i;
        types.push_back(control ? kTokenControl : kTokenNormal);
      } else {  // llama.cpp pads the vocabulary up to the model's rows the same way
        tokens.push_back("[PAD" + std::to_string(i) + "]");
        types.push_back(kTokenUnused);
      }
    }
    ScratchDir scratch;
    md.set("tokenizer.ggml.model", std::string("gpt2"));
    md.set("tokenizer.ggml.pre", std::string("gpt-2"));
    md.set("tokenizer.ggml.tokens", io::gguf_string_array(tokens));
    md.set("tokenizer.ggml.token_type", io::gguf_int32_array(types));
    md.set("tokenizer.ggml.merges", io::gguf_string_array(tokenizer_merges(*tokenizer, scratch.path)));
    if (eot >= 0) {
      md.set("tokenizer.ggml.bos_token_id", uint32_t(eot));
      md.set("tokenizer.ggml.eos_token_id", uint32_t(eot));
      md.set("tokenizer.ggml.unknown_token_id", uint32_t(eot));
    }
  }

  std::vector<io::GgufWriteTensor> tensors;
  std::vector<GgufTensorChoice> choices;
  std::vector<float> buf;
  for (const ParamSpec& s : model.table) {
    const auto [gname, transposed] = gguf_name(s.name);
    const std::vector<uint64_t> ne = gguf_ne(s, transposed);
    const float* src = model.params.data() + s.offset;
    if (transposed) {  // HF [in, out] -> [out, in], rows of in-features
      const int64_t in = s.shape[0], out = s.shape[1];
      buf.resize(size_t(s.numel));
      for (int64_t i = 0; i < in; ++i)
        for (int64_t o = 0; o < out; ++o) buf[size_t(o * in + i)] = src[i * out + o];
      src = buf.data();
    }
    const GgmlType t = ne.size() == 1 ? GgmlType::F32 : gguf_gpt2_tensor_type(type, ne[0]);
    try {
      tensors.push_back(io::make_gguf_tensor(gname, t, ne, src));
    } catch (const Error& e) {
      data_error(path + ": " + e.what());
    }
    choices.push_back({gname, t, ne});
  }
  io::write_gguf(path, md, tensors);
  return choices;
}

GPT2 load_gguf_gpt2(const std::string& path) {
  const io::GgufFile f = io::GgufFile::open(path);
  const io::GgufMetadata& md = f.metadata();
  const std::string& arch = md.get_string("general.architecture");
  if (arch != "gpt2")
    data_error(path + ": key 'general.architecture' is '" + arch +
               "'; qkv loads GGUF files of architecture gpt2 only");
  constexpr int64_t kMax = 1 << 24;
  GPT2Config c;
  c.n_layer = int(md.get_int_in("gpt2.block_count", 1, 4096));
  c.n_positions = int(md.get_int_in("gpt2.context_length", 1, kMax));
  c.n_embd = int(md.get_int_in("gpt2.embedding_length", 1, kMax));
  c.n_head = int(md.get_int_in("gpt2.attention.head_count", 1, kMax));
  c.layer_norm_epsilon = shortest_decimal(md.get_float("gpt2.attention.layer_norm_epsilon"));
  c.attn_only = md.has("qkv.attn_only") && md.get_bool("qkv.attn_only");
  if (!c.attn_only) {
    const int64_t ff = md.get_int_in("gpt2.feed_forward_length", 1, kMax);
    c.n_inner = ff == 4 * int64_t(c.n_embd) ? 0 : int(ff);
  }
  const io::GgufTensorInfo& emb = f.tensor("token_embd.weight");
  if (emb.ne.size() != 2 || emb.ne[0] != uint64_t(c.n_embd) || emb.ne[1] == 0 || emb.ne[1] > uint64_t(kMax))
    data_error(path + ": tensor 'token_embd.weight' has ne " +
               shape_string(std::vector<int64_t>(emb.ne.begin(), emb.ne.end())) + ", expected [" +
               std::to_string(c.n_embd) + ", vocab_size]");
  c.vocab_size = int(emb.ne[1]);
  c.validate(path);

  // Every tensor checked against the table before the parameter buffer is allocated.
  const std::vector<ParamSpec> table = gpt2_param_table(c);
  std::vector<const io::GgufTensorInfo*> found;
  std::set<std::string> used;
  for (const ParamSpec& s : table) {
    const auto [gname, transposed] = gguf_name(s.name);
    const io::GgufTensorInfo* t = f.find(gname);
    if (!t) data_error(path + ": tensor '" + gname + "' (" + s.name + ") is missing");
    const std::vector<uint64_t> want = gguf_ne(s, transposed);
    if (t->ne != want)
      data_error(path + ": tensor '" + gname + "' has ne " +
                 shape_string(std::vector<int64_t>(t->ne.begin(), t->ne.end())) + ", expected " +
                 shape_string(std::vector<int64_t>(want.begin(), want.end())) + " from the metadata");
    if (!io::ggml_type_traits(uint32_t(t->type))->dequantizes)
      data_error(path + ": tensor '" + gname + "' has type " + io::ggml_type_name(t->type) +
                 ", which qkv does not dequantize (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K, Q4_1, Q5_0, Q5_1, Q5_K)");
    found.push_back(t);
    used.insert(gname);
  }
  for (const auto& t : f.tensors())
    if (!used.count(t.name) && t.name != "output.weight")
      data_error(path + ": unexpected tensor '" + t.name + "' (not a GPT-2 parameter for this metadata" +
                 (c.attn_only ? ", which is attention-only" : "") + ")");

  GPT2 m(c);
  std::vector<float> buf;
  std::map<std::string, int> type_count;
  for (size_t k = 0; k < table.size(); ++k) {
    const ParamSpec& s = table[k];
    const io::GgufTensorInfo& t = *found[k];
    ++type_count[io::ggml_type_name(t.type)];
    float* dst = m.params.data() + s.offset;
    if (!gguf_name(s.name).second) {
      f.read_f32(t, dst);
      continue;
    }
    buf.resize(size_t(s.numel));
    f.read_f32(t, buf.data());  // [out, in] -> HF [in, out]
    const int64_t in = s.shape[0], out = s.shape[1];
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < in; ++i) dst[i * out + o] = buf[size_t(o * in + i)];
  }
  if (const io::GgufTensorInfo* out = f.find("output.weight")) {  // tied unembedding: accept a true copy only
    if (out->ne != emb.ne)
      data_error(path + ": tensor 'output.weight' has a different shape than 'token_embd.weight'");
    if (!io::ggml_type_traits(uint32_t(out->type))->dequantizes)
      data_error(path + ": tensor 'output.weight' has type " + io::ggml_type_name(out->type) +
                 ", which qkv does not dequantize");
    buf.resize(size_t(out->numel()));
    f.read_f32(*out, buf.data());
    if (!std::equal(buf.begin(), buf.end(), m.params.begin() + m.wte))
      data_error(path +
                 ": tensor 'output.weight' differs from 'token_embd.weight'; qkv supports GPT-2's tied "
                 "unembedding only");
  }
  std::string types;
  for (const auto& [n, k] : type_count) types += (types.empty() ? "" : ", ") + std::to_string(k) + " " + n;
  m.source = path + " (GGUF v" + std::to_string(f.version()) + ", gpt2; tensors " + types + ")";
  check_finite(m, path);
  return m;
}

std::optional<Tokenizer> gguf_tokenizer(const io::GgufFile& f) {
  const io::GgufMetadata& md = f.metadata();
  if (!md.has("tokenizer.ggml.model")) return std::nullopt;
  const std::string& model = md.get_string("tokenizer.ggml.model");
  // SentencePiece-style, and byte-level BPE with another pre-tokenizer than GPT-2's: the families' path.
  if (model == "llama" ||
      (model == "gpt2" && md.has("tokenizer.ggml.pre") && md.get_string("tokenizer.ggml.pre") != "gpt-2" &&
       md.get_string("tokenizer.ggml.pre") != "default"))
    return gguf_hf_tokenizer(f);
  if (model != "gpt2")
    data_error(f.path() + ": key 'tokenizer.ggml.model' is '" + model +
               "'; qkv reads the gpt2 (byte-level BPE) and llama (SentencePiece) tokenizers");
  std::vector<std::string> tokens = md.get_string_array("tokenizer.ggml.tokens");
  if (md.has("tokenizer.ggml.token_type")) {
    const io::GgufArray& types = md.get_array("tokenizer.ggml.token_type", io::GgufType::INT32);
    if (types.items.size() != tokens.size())
      data_error(f.path() + ": key 'tokenizer.ggml.token_type' has " + std::to_string(types.items.size()) +
                 " entries, 'tokenizer.ggml.tokens' has " + std::to_string(tokens.size()));
    while (!tokens.empty() && std::get<int32_t>(types.items[tokens.size() - 1].v) == kTokenUnused &&
           tokens.back() == "[PAD" + std::to_string(tokens.size() - 1) + "]")
      tokens.pop_back();
  }
  std::vector<std::string> merges;
  if (md.has("tokenizer.ggml.merges")) merges = md.get_string_array("tokenizer.ggml.merges");
  std::set<std::string> seen;
  std::string vocab = "{\n";
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (!valid_json_string(tokens[i]))
      data_error(f.path() + ": key 'tokenizer.ggml.tokens': token " + std::to_string(i) +
                 " is not valid UTF-8");
    if (!seen.insert(tokens[i]).second)
      data_error(f.path() + ": key 'tokenizer.ggml.tokens': token " + std::to_string(i) + " " +
                 nlohmann::json(tokens[i]).dump(-1, ' ', true, nlohmann::json::error_handler_t::replace) +
                 " appears twice");
    vocab += "  " + nlohmann::json(tokens[i]).dump(-1, ' ', false, nlohmann::json::error_handler_t::strict) +
             ": " + std::to_string(i) + (i + 1 < tokens.size() ? ",\n" : "\n");
  }
  vocab += "}\n";
  std::string merges_txt = "#version: 0.2\n";
  for (size_t i = 0; i < merges.size(); ++i) {
    if (merges[i].find('\n') != std::string::npos || merges[i].find('\r') != std::string::npos)
      data_error(f.path() + ": key 'tokenizer.ggml.merges': merge " + std::to_string(i) +
                 " contains a line break");
    merges_txt += merges[i] + "\n";
  }
  ScratchDir scratch;
  const std::string vj = (scratch.path / "vocab.json").string(), mt = (scratch.path / "merges.txt").string();
  io::write_file_atomic(vj, vocab);
  io::write_file_atomic(mt, merges_txt);
  try {
    return Tokenizer::from_files(vj, mt);
  } catch (const Error& e) {  // name the GGUF, not the scratch files
    std::string what = e.what();
    for (const auto& [tmp, key] :
         {std::pair{vj, "tokenizer.ggml.tokens"}, std::pair{mt, "tokenizer.ggml.merges"}})
      if (auto p = what.find(tmp); p != std::string::npos)
        what.replace(p, tmp.size(), f.path() + ": key '" + key + "'");
    data_error(what);
  }
}

std::optional<Tokenizer> gguf_tokenizer(const std::string& path) {
  return gguf_tokenizer(io::GgufFile::open(path));
}

}  // namespace qkv
