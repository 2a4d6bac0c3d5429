// qkv convert --to gguf --type T IN OUT — a checkpoint (any format load_lm reads) written as llama.cpp's
// GGUF, fp32, fp16 or quantized, with its tokenizer in the metadata (or tokenizer.ggml.model = "none"):
// GPT-2, Llama, Mistral, Qwen2, Gemma, Gemma 2, Phi-3 as llama.cpp's gpt2 / llama / qwen2 / gemma / gemma2
// / phi3 (include/qkv/io/gguf_family.hpp).
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <iostream>
#include <map>

#include "cli.hpp"
#include "qkv/error.hpp"
#include "qkv/family.hpp"
#include "qkv/io/gguf_family.hpp"
#include "qkv/lm.hpp"
#include "qkv/model_files.hpp"
#include "qkv/report/table.hpp"

namespace fs = std::filesystem;

namespace qkv::cli {
namespace {

// A private directory for a GGUF input's tokenizer rebuilt as tokenizer.json, removed afterwards.
struct ScratchTokenizerDir {
  fs::path path;
  ScratchTokenizerDir() {
    static std::atomic<int> n{0};
    path = fs::temp_directory_path() /
           ("qkv-convert-tok-" + std::to_string(::getpid()) + "-" + std::to_string(n++));
    std::error_code ec;
    fs::remove_all(path, ec);
    fs::create_directories(path, ec);
  }
  ~ScratchTokenizerDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

void run_convert(const std::string& to, const std::string& type_arg, bool pure, const std::string& in,
                 const std::string& out, bool json) {
  if (to != "gguf") usage_error("--to " + to + ": qkv converts to gguf only");
  const auto mix = io::parse_gguf_mix(type_arg, pure);
  if (!mix) usage_error("--type " + type_arg + ": expected one of " + io::gguf_mix_names());
  if (out.size() < 5 || out.compare(out.size() - 5, 5, ".gguf") != 0)
    usage_error(out +
                ": the output name must end in .gguf (that is how qkv recognises the format when loading)");
  std::error_code ec;
  if (fs::exists(in, ec) && fs::exists(out, ec) && fs::equivalent(in, out, ec))
    usage_error(out + ": the output would overwrite the input");
  // Every family through the family engine; the tokenizer beside the checkpoint (tokenizer.json, or GPT-2's
  // vocab.json + merges.txt: gguf_tokenizer_metadata reads whichever is there), or a GGUF input's own (its
  // metadata rebuilt as a tokenizer.json first).
  const Model lm = load_lm(in);
  std::error_code e2;
  std::string tok_dir = fs::is_directory(in, e2) ? in : fs::path(in).parent_path().string();
  if (tok_dir.empty()) tok_dir = ".";
  std::unique_ptr<ScratchTokenizerDir> scratch;
  if (in.size() > 5 && in.compare(in.size() - 5, 5, ".gguf") == 0 && !fs::is_directory(in, e2)) {
    tok_dir.clear();
    const io::GgufFile f = io::GgufFile::open(in);
    const io::GgufMetadata& md = f.metadata();
    if (md.has("tokenizer.ggml.model") && md.get_string("tokenizer.ggml.model") != "none" &&
        md.get_string("tokenizer.ggml.model") != "no_vocab") {
      scratch = std::make_unique<ScratchTokenizerDir>();
      gguf_write_hf_tokenizer(f, scratch->path.string());
      tok_dir = scratch->path.string();
    }
  }
  int tokens = 0;
  const std::vector<GgufTensorChoice> choices =
      save_gguf_lm(lm, tok_dir, out, *mix, fs::path(in).filename().string(), &tokens);
  const auto size = fs::file_size(out, ec);
  std::map<std::string, int> counts;
  for (const auto& c : choices) ++counts[io::ggml_type_name(c.type)];
  if (json) {
    nlohmann::json t = nlohmann::json::array();
    for (const auto& c : choices)
      t.push_back({{"name", c.name}, {"type", io::ggml_type_name(c.type)}, {"ne", c.ne}});
    print_json({{"input", in},
                {"output", out},
                {"type", mix->name},
                {"pure", mix->pure},
                {"file_type", mix->file_type},
                {"bytes", ec ? 0 : size},
                {"tokenizer", tokens ? nlohmann::json(tokens) : nlohmann::json(nullptr)},
                {"tensors", t}});
    return;
  }
  report::Table t({"tensor", "type", "ne (innermost first)"});
  for (const auto& c : choices) {
    std::string ne;
    for (size_t i = 0; i < c.ne.size(); ++i) ne += (i ? ", " : "") + std::to_string(c.ne[i]);
    t.add({c.name, io::ggml_type_name(c.type), "[" + ne + "]"});
  }
  std::cout << t.str() << "wrote " << out << " as " << mix->name << (mix->pure ? " (pure)" : "") << " ("
            << (ec ? 0 : size) << " bytes, " << choices.size()
            << " tensors:";
  for (const auto& [n, k] : counts) std::cout << " " << k << " " << n;
  std::cout << "; tokenizer " << (tokens ? std::to_string(tokens) + " tokens" : "none") << ")\n";
}

// A metadata value as JSON: 64-bit integers as decimal strings (JavaScript numbers cannot hold them),
// arrays as JSON arrays (element types in the entry), floats as the exact double of their value.
nlohmann::json value_json(const io::GgufValue& v) {
  return std::visit(
      [](const auto& x) -> nlohmann::json {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, io::GgufArray>) {
          nlohmann::json a = nlohmann::json::array();
          for (const auto& it : x.items) a.push_back(value_json(it));
          return a;
        } else if constexpr (std::is_same_v<T, uint64_t> || std::is_same_v<T, int64_t>) {
          return std::to_string(x);
        } else if constexpr (std::is_same_v<T, float>) {
          return double(x);
        } else {
          return x;
        }
      },
      v.v);
}

std::string preview(const io::GgufValue& v) {
  if (const auto* a = std::get_if<io::GgufArray>(&v.v)) {
    std::string s = "[" + std::to_string(a->items.size()) + " " + io::gguf_type_name(a->type) + "]";
    for (size_t i = 0; i < a->items.size() && i < 3; ++i) s += (i ? ", " : " ") + preview(a->items[i]);
    return s + (a->items.size() > 3 ? ", ..." : "");
  }
  std::string s = value_json(v).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

void run_gguf_info(const std::string& path, bool json) {
  const io::GgufFile f = io::GgufFile::open(path);
  if (json) {
    nlohmann::json md = nlohmann::json::array(), ts = nlohmann::json::array();
    for (const auto& [k, v] : f.metadata().entries()) {
      nlohmann::json e = {{"key", k},
                          {"type", uint32_t(v.type())},
                          {"type_name", io::gguf_type_name(v.type())},
                          {"value", value_json(v)}};
      if (const auto* a = std::get_if<io::GgufArray>(&v.v)) e["element_type"] = uint32_t(a->type);
      md.push_back(e);
    }
    for (const auto& t : f.tensors())
      ts.push_back({{"name", t.name},
                    {"type", uint32_t(t.type)},
                    {"type_name", io::ggml_type_name(t.type)},
                    {"ne", t.ne},
                    {"offset", t.offset},
                    {"nbytes", t.nbytes}});
    const nlohmann::json j = {{"path", path},
                              {"version", f.version()},
                              {"alignment", f.alignment()},
                              {"data_offset", f.data_offset()},
                              {"metadata", md},
                              {"tensors", ts}};
    std::cout << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return;
  }
  std::cout << path << ": GGUF v" << f.version() << ", alignment " << f.alignment() << ", data at byte "
            << f.data_offset() << ", " << f.metadata().size() << " keys, " << f.tensors().size()
            << " tensors\n\n";
  report::Table k({"key", "type", "value"});
  for (const auto& [key, v] : f.metadata().entries()) k.add({key, io::gguf_type_name(v.type()), preview(v)});
  std::cout << k.str() << "\n";
  report::Table t({"tensor", "type", "ne (innermost first)", "offset", "bytes"});
  for (const auto& x : f.tensors()) {
    std::string ne;
    for (size_t i = 0; i < x.ne.size(); ++i) ne += (i ? ", " : "") + std::to_string(x.ne[i]);
    t.add({x.name, io::ggml_type_name(x.type), "[" + ne + "]", std::to_string(x.offset),
           std::to_string(x.nbytes)});
  }
  std::cout << t.str();
}

}  // namespace

void register_gguf_info(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "gguf-info", "A GGUF file's header, metadata (every key) and tensor table, as qkv reads it");
  auto path = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  cmd->add_option("FILE", *path, ".gguf file")->required();
  cmd->add_flag("--json", *json, "JSON (64-bit integers as strings)");
  cmd->callback([=] { run_gguf_info(*path, *json); });
}

QKV_COMMAND(27, register_gguf_info);

// The families the family table gives a GGUF architecture: "gpt2, llama, mistral, …".
std::string gguf_families() {
  std::string s;
  for (const Family& f : families())
    if (!f.gguf_architecture.empty()) s += (s.empty() ? "" : ", ") + f.model_type;
  return s;
}

void register_convert(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "convert", "Write a checkpoint (" + gguf_families() +
                     ") as a llama.cpp GGUF: f32, f16, bf16, or quantized as llama-quantize does it (q4_k_m, …)");
  auto to = std::make_shared<std::string>("gguf");
  auto type = std::make_shared<std::string>("f32");
  auto in = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  auto pure = std::make_shared<bool>(false);
  cmd->add_option("--to", *to, "output format (gguf)");
  cmd->add_option(
      "--type", *type,
      "file type: " + io::gguf_mix_names() +
          ". The quantized ones are llama-quantize's: the output matrix Q6_K, and the K mixes (q3_k_m, q4_k_m, "
          "…) more bits for some layers' attn_v, ffn_down and attn_output (docs/gguf.md); q3_k, q4_k, q5_k: "
          "every matrix that type. 1-D tensors and GPT-2's position_embd stay f32; rows not a whole number of "
          "blocks fall back as llama-quantize's do (q4_k→q5_0, q5_k→q5_1, q6_k→q8_0, q2_k/q3_k→q4_0, "
          "iq4_xs→iq4_nl), then f16");
  cmd->add_flag("--pure", *pure, "every matrix the --type's base type (llama-quantize --pure)");
  cmd->add_option("IN", *in, "checkpoint: HF directory, .safetensors, .gguf or llm.c .bin")->required();
  cmd->add_option("OUT", *out, "output .gguf file (written atomically)")->required();
  cmd->add_flag("--json", *json, "JSON output");
  cmd->callback([=] { run_convert(*to, *type, *pure, *in, *out, *json); });
}

QKV_COMMAND(26, register_convert);

}  // namespace qkv::cli
