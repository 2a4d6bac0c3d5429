// Checkpoint loading and saving. Every format ends in the same place: GPT-2's table (params.cpp),
// checked tensor by tensor against what the file holds.
#include <cmath>
#include <filesystem>
#include <algorithm>
#include <fstream>
#include <set>
#include <nlohmann/json.hpp>

#include "qkv/error.hpp"
#include "qkv/io/config_json.hpp"
#include "qkv/io/llmc.hpp"
#include "qkv/io/safetensors.hpp"
#include "qkv/model.hpp"

namespace fs = std::filesystem;

namespace qkv {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// HF buffers that are not weights: the causal mask and its fill value.
bool is_buffer(const std::string& name) { return ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias"); }

void check_finite(const GPT2& m, const std::string& file) {
  for (const auto& s : m.table) {
    const float* p = m.params.data() + s.offset;
    for (int64_t i = 0; i < s.numel; i++)
      if (!std::isfinite(p[i]))
        data_error(file + ": tensor " + s.name + " holds " + (std::isnan(p[i]) ? "NaN" : "Inf") + " at flat index " +
                   std::to_string(i) + "; refusing to compute with it");
  }
}

GPT2 from_safetensors(const io::SafetensorsFile& f, const GPT2Config& config, const std::string& file) {
  // Check every tensor against the table BEFORE allocating: a config may claim sizes the file does
  // not hold, and the parameter buffer must never be larger than what the file actually contains.
  const std::vector<ParamSpec> table = gpt2_param_table(config);
  std::vector<const io::TensorInfo*> found;
  std::set<std::string> used;
  for (const auto& s : table) {
    const io::TensorInfo* t = f.find(s.name);
    if (!t) t = f.find("transformer." + s.name);
    if (!t) data_error(file + ": tensor " + s.name + " is missing (expected shape " + shape_string(s.shape) + ")");
    if (t->shape != s.shape)
      data_error(file + ": tensor " + t->name + " has shape " + shape_string(t->shape) + ", expected " +
                 shape_string(s.shape) + " from the config");
    found.push_back(t);
    used.insert(t->name);
  }
  GPT2 m(config);
  for (size_t i = 0; i < table.size(); i++) f.read_f32(*found[i], m.params.data() + table[i].offset);
  for (const auto& t : f.tensors()) {
    if (used.count(t.name)) continue;
    std::string bare = t.name.rfind("transformer.", 0) == 0 ? t.name.substr(12) : t.name;
    if (is_buffer(bare)) continue;
    if (bare == "lm_head.weight") {  // GPT-2 ties the unembedding to wte; accept only a true copy
      if (t.shape != m.spec("wte.weight").shape)
        data_error(file + ": tensor lm_head.weight has shape " + shape_string(t.shape) + ", expected " +
                   shape_string(m.spec("wte.weight").shape) + " (tied to wte.weight)");
      std::vector<float> lm(size_t(t.numel()));
      f.read_f32(t, lm.data());
      if (!std::equal(lm.begin(), lm.end(), m.params.begin() + m.wte))
        data_error(file + ": lm_head.weight differs from wte.weight; qkv supports GPT-2's tied unembedding only");
      continue;
    }
    data_error(file + ": unexpected tensor " + t.name + " " + shape_string(t.shape) +
               " (not a GPT-2 parameter for this config" + (config.attn_only ? ", which is attention-only" : "") + ")");
  }
  return m;
}

}  // namespace

GPT2 load_model(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) data_error(path + ": no such file or directory");
  GPT2 m;
  if (fs::is_directory(path, ec)) {
    const std::string st = (fs::path(path) / "model.safetensors").string();
    const std::string cj = (fs::path(path) / "config.json").string();
    if (!fs::exists(st)) data_error(path + ": a model directory needs model.safetensors (not found)");
    if (!fs::exists(cj)) data_error(path + ": a model directory needs config.json (not found)");
    const GPT2Config config = io::read_config_json(cj);
    const auto f = io::SafetensorsFile::open(st);
    m = from_safetensors(f, config, st);
    m.source = path + " (Hugging Face directory: config.json + model.safetensors)";
    check_finite(m, st);
  } else if (ends_with(path, ".safetensors")) {
    const auto f = io::SafetensorsFile::open(path);
    GPT2Config config;
    const auto it = f.metadata().find("config");
    const std::string beside = (fs::path(path).parent_path() / "config.json").string();
    if (it != f.metadata().end()) {
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(it->second);
      } catch (const nlohmann::json::exception& e) {
        data_error(path + ": __metadata__ config is not JSON: " + e.what());
      }
      config = io::config_from_json(j, path + " __metadata__ config");
    } else if (fs::exists(beside)) {
      config = io::read_config_json(beside);
    } else {
      data_error(path + ": no config: neither __metadata__[\"config\"] nor a config.json beside it");
    }
    m = from_safetensors(f, config, path);
    m.source = path + " (safetensors" + std::string(it != f.metadata().end() ? ", config in __metadata__" : "") + ")";
    check_finite(m, path);
  } else if (ends_with(path, ".gguf")) {  // llama.cpp's format: load_lm (src/model/gguf_family.cpp)
    usage_error(path + ": GGUF files load through the family engine (load_lm), not the GPT2 class");
  } else if (ends_with(path, ".bin")) {
    io::LlmcCheckpoint ck = io::read_llmc(path);
    m = GPT2(ck.config);
    for (const auto& t : ck.tensors) {
      const ParamSpec& s = m.spec(t.name);
      if (t.shape != s.shape)
        data_error(path + ": tensor " + t.name + " has shape " + shape_string(t.shape) + ", expected " +
                   shape_string(s.shape));
      std::copy(t.data.begin(), t.data.end(), m.params.begin() + s.offset);
    }
    m.source = path + " (llm.c checkpoint, version " + std::to_string(ck.version) +
               (ck.version == 5 ? " bf16" : " fp32") + ", padded vocab " + std::to_string(ck.padded_vocab_size) + ")";
    check_finite(m, path);
  } else {
    usage_error(path + ": unknown model format; expected a directory, a .safetensors file, a .gguf file or an llm.c .bin file");
  }
  return m;
}

void save_model(const GPT2& m, const std::string& path, const std::map<std::string, std::string>& metadata) {
  std::vector<io::WriteTensor> ts;
  for (const auto& s : m.table) ts.push_back({s.name, s.shape, m.params.data() + s.offset});
  std::map<std::string, std::string> meta = metadata;
  meta["format"] = "pt";
  meta["config"] = io::config_to_json(m.config).dump();
  io::write_safetensors(path, ts, meta);
}

}  // namespace qkv
