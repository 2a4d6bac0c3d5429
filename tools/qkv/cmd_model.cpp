// qkv info | run — a checkpoint, its tokenizer and its next-token distribution. (`qkv dump`, every
// activation the model computes, is in cmd_dump.cpp; `qkv tokenize` in cmd_tokenize.cpp.)
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>

#include "cli.hpp"
#include "model_input.hpp"
#include "output_set.hpp"
#include "qkv/error.hpp"
#include "qkv/lm.hpp"
#include "qkv/lm_train.hpp"
#include "qkv/tokenizer.hpp"
#include "qkv/io/atomic_file.hpp"
#include "qkv/io/mapped_file.hpp"
#include "qkv/io/npy.hpp"
#include "qkv/model_files.hpp"
#include "qkv/report/table.hpp"

namespace fs = std::filesystem;

namespace qkv::cli {
namespace {

void run_info(const ModelArgs& a, bool json) {
  const LoadedLM m = load_lm_arg(a);
  const Arch& c = m.model.arch;
  if (json) {
    nlohmann::json t = nlohmann::json::array();
    for (const auto& s : m.model.table) {
      const Weight& w = m.model.weight(s.name);
      t.push_back({{"name", w.name},
                   {"shape", s.shape},
                   {"dtype", weight_type_name(w)},
                   {"role", role_name(s.role)}});
    }
    nlohmann::json cfg = c.to_json();
    // The GPT-2 keys earlier versions printed, kept for scripts that read them.
    cfg["n_embd"] = c.d, cfg["n_layer"] = c.n_layer, cfg["n_head"] = c.H, cfg["n_positions"] = c.n_ctx;
    cfg["mlp_dim"] = c.d_ff, cfg["attn_only"] = c.attn_only(), cfg["layer_norm_epsilon"] = c.norm_eps;
    print_json({{"source", m.model.source},
                {"parameters", m.model.num_parameters()},
                {"architecture", c.describe()},
                {"config", cfg},
                {"tokenizer", m.tokenizer ? nlohmann::json(m.tokenizer->vocab_size()) : nlohmann::json(nullptr)},
                {"tensors", t}});
    return;
  }
  std::string n = std::to_string(m.model.num_parameters());
  for (int i = int(n.size()) - 3; i > 0; i -= 3) n.insert(size_t(i), ",");
  std::cout << "model       " << m.model.source << "\nparameters  " << n << "\n";
  for (const std::string& line : c.describe()) std::cout << line << "\n";
  std::cout << "tokenizer   " << (m.tokenizer ? std::to_string(m.tokenizer->vocab_size()) + " tokens" : "none beside the model")
            << "\n\n";
  report::Table t({"tensor", "shape", "dtype", "role"});
  for (const auto& s : m.model.table) {
    const Weight& w = m.model.weight(s.name);
    t.add({w.name, shape_string(s.shape), weight_type_name(w), role_name(s.role)});
  }
  std::cout << t.str();
}

void run_run(const ModelArgs& a, int top, bool json) {
  const LoadedLM m = load_lm_arg(a);
  const std::vector<int> ids = input_ids(m, a);
  // The family forward with no hooks: fused attention, only the last position's logits.
  RunState st;
  RunOptions opt;
  opt.last_only = true;
  const std::vector<float>& logits = run(m.model, ids, st, opt);
  const int V = m.model.arch.vocab_size;
  const float* last = logits.data();
  std::vector<double> p(static_cast<size_t>(V));
  const double mx = *std::max_element(last, last + V);
  double sum = 0;
  for (int j = 0; j < V; j++) sum += p[size_t(j)] = std::exp(double(last[j]) - mx);
  for (auto& x : p) x /= sum;
  std::vector<int> order(static_cast<size_t>(V));
  for (int j = 0; j < V; j++) order[size_t(j)] = j;
  top = std::min(top, V);
  std::partial_sort(order.begin(), order.begin() + top, order.end(),
                    [&](int x, int y) { return p[size_t(x)] > p[size_t(y)]; });
  if (json) {
    nlohmann::json j = nlohmann::json::array();
    for (int i = 0; i < top; i++) {
      const int id = order[size_t(i)];
      j.push_back({{"id", id},
                   {"token", m.tokenizer ? m.tokenizer->token_string(id) : ""},
                   {"probability", p[size_t(id)]},
                   {"logit", last[id]}});
    }
    print_json({{"tokens", ids.size()}, {"top", j}});
    return;
  }
  std::cout << "next token after " << ids.size() << " tokens:\n\n";
  report::Table t({"rank", "id", "token", "probability", "logit"});
  for (int i = 0; i < top; i++) {
    const int id = order[size_t(i)];
    t.add({std::to_string(i + 1), std::to_string(id), m.tokenizer ? token_label(*m.tokenizer, id) : "",
           report::fmt(p[size_t(id)], 4), report::fmt(last[id], 3)});
  }
  std::cout << t.str();
}

}  // namespace

void register_model_commands(CLI::App& app) {
  {
    auto* cmd = app.add_subcommand("info", "A checkpoint's format, config, parameter count and tensor table");
    auto a = std::make_shared<ModelArgs>();
    auto json = std::make_shared<bool>(false);
    add_model_option(cmd, *a);
    cmd->add_flag("--json", *json, "JSON output");
    cmd->callback([a, json] { run_info(*a, *json); });
  }
  {
    auto* cmd = app.add_subcommand("run", "The next-token distribution after a text: the top K tokens");
    auto a = std::make_shared<ModelArgs>();
    auto top = std::make_shared<int>(10);
    auto json = std::make_shared<bool>(false);
    add_model_option(cmd, *a);
    cmd->add_option("text", a->text, "the text");
    cmd->add_option("--tokens", a->tokens, "token ids instead of text, e.g. 464,3290");
    cmd->add_option("--top", *top, "how many tokens to show")->check(CLI::Range(1, 1000));
    cmd->add_flag("--json", *json, "JSON output");
    cmd->callback([a, top, json] { run_run(*a, *top, *json); });
  }
}

QKV_COMMAND(20, register_model_commands);

}  // namespace qkv::cli

namespace qkv::cli {

// qkv init — a randomly initialised checkpoint of any family, written as a Hugging Face directory; how
// the tests and benchmarks get GPT-2-small-shaped (or Llama-, Qwen2-, …) checkpoints without a download.
std::string families_list() {
  std::string s;
  for (const std::string& t : supported_model_types()) s += (s.empty() ? "" : ", ") + t;
  return s;
}

struct InitArgs {
  std::string out, preset = "small", tokenizer;
  int n_layer = 0, n_head = 0, n_embd = 0, n_positions = 0, vocab_size = 0;
  bool attn_only = false;
  uint64_t seed = 0;
  std::string arch, dtype = "f32";
  std::vector<std::string> sets;
  int shards = 1;
};

// GPT-2 of a named size (small 124M … xl, distil, tiny), with GPT-2's initialisation (the family trainer's
// init_lm: N(0, 0.02), residual outputs scaled by 1/√(2·n_layer), LayerNorm at identity, biases 0).
void init_gpt2_preset(const InitArgs& a) {
  nlohmann::json c = default_config("gpt2", "small");
  auto set = [&](const char* key, int v) {
    if (v) c[key] = v;
  };
  if (a.preset == "medium") c["n_layer"] = 24, c["n_head"] = 16, c["n_embd"] = 1024;
  if (a.preset == "large") c["n_layer"] = 36, c["n_head"] = 20, c["n_embd"] = 1280;
  if (a.preset == "xl") c["n_layer"] = 48, c["n_head"] = 25, c["n_embd"] = 1600;
  if (a.preset == "distil") c["n_layer"] = 6;
  if (a.preset == "tiny") c["n_layer"] = 2, c["n_head"] = 4, c["n_embd"] = 64, c["vocab_size"] = 256;
  if (a.preset == "tiny") c["n_positions"] = c["n_ctx"] = 128;
  set("n_layer", a.n_layer), set("n_head", a.n_head), set("n_embd", a.n_embd), set("vocab_size", a.vocab_size);
  if (a.n_positions) c["n_positions"] = c["n_ctx"] = a.n_positions;
  c["qkv_attn_only"] = a.attn_only;
  try {
    arch_from_config(c, "qkv init");
  } catch (const Error& e) {
    usage_error(e.what());
  }
  std::optional<Tokenizer> tok;
  if (!a.tokenizer.empty()) {
    tok = Tokenizer::from_dir(a.tokenizer);
    if (tok->vocab_size() > c["vocab_size"].get<int>())
      usage_error("--tokenizer has " + std::to_string(tok->vocab_size()) + " tokens, more than --vocab-size " +
                  std::to_string(c["vocab_size"].get<int>()));
  }
  const LmParams p = init_lm(c, a.seed);
  std::error_code ec;
  fs::create_directories(a.out, ec);
  if (ec || !fs::is_directory(a.out)) data_error(a.out + ": cannot create the output directory");
  OutputSet files;
  io::write_file_atomic(files.add((fs::path(a.out) / "config.json").string()), c.dump(2) + "\n");
  save_lm(p, files.add((fs::path(a.out) / "model.safetensors").string()), {{"qkv_init_seed", std::to_string(a.seed)}});
  if (tok) {
    files.add((fs::path(a.out) / "vocab.json").string());
    files.add((fs::path(a.out) / "merges.txt").string());
    tok->write_files(a.out);
  }
  files.commit();
  std::cout << "wrote " << a.out << "/ (" << p.params.size() << " parameters" << (tok ? ", tokenizer" : "") << ")\n";
}

void register_init(CLI::App& app) {
  auto* cmd = app.add_subcommand("init",
                                 "Write a randomly initialised checkpoint (HF directory): GPT-2 of a chosen "
                                 "size, or any family with --arch (" +
                                     families_list() + ")");
  using Args = InitArgs;
  auto a = std::make_shared<Args>();
  // qkv init --arch: any family's config.json with the user's overrides, and random weights.
  auto init_family = [](const Args& a) {
    const std::string arch = a.arch.empty() ? "gpt2" : a.arch;
    if (a.preset != "tiny" && a.preset != "small")
      usage_error("--preset " + a.preset + ": with --arch, the presets are tiny and small");
    if (a.n_layer || a.n_head || a.n_embd || a.n_positions || a.vocab_size || a.attn_only || !a.tokenizer.empty())
      usage_error("--arch: set sizes with --set KEY=VALUE (the family's own config keys), not --n-layer/--n-head/…");
    nlohmann::json cfg = default_config(arch, a.preset);
    for (const std::string& kv : a.sets) {
      const size_t eq = kv.find('=');
      if (eq == std::string::npos || eq == 0) usage_error("--set: expected KEY=VALUE, found '" + kv + "'");
      const std::string key = kv.substr(0, eq), val = kv.substr(eq + 1);
      nlohmann::json v = nlohmann::json::parse(val, nullptr, /*allow_exceptions=*/false);
      cfg[key] = v.is_discarded() ? nlohmann::json(val) : v;
    }
    if (arch == "gpt2" && a.preset == "tiny") cfg["initializer_range"] = cfg.value("initializer_range", 0.02);
    const WeightType dt = a.dtype == "f16" ? WeightType::F16 : a.dtype == "bf16" ? WeightType::BF16 : WeightType::F32;
    try {
      arch_from_config(cfg, "--set");
    } catch (const Error& e) {
      usage_error(std::string("qkv init --arch ") + arch + ": " + e.what());
    }
    write_random_checkpoint(a.out, cfg, dt, a.shards, a.seed);
    const Model m = load_lm(a.out);
    std::cout << "wrote " << a.out << "/ (" << arch << ", " << m.num_parameters() << " parameters, " << a.dtype
              << (a.shards > 1 ? ", " + std::to_string(a.shards) + " shards" : "") << ")\n";
  };
  cmd->add_option("--out", a->out, "output directory (config.json + model.safetensors)")->required();
  cmd->add_option("--preset", a->preset,
                  "small (124M), medium, large, xl, distil, or tiny (with --arch: tiny or small)")
      ->check(CLI::IsMember({"small", "medium", "large", "xl", "distil", "tiny"}));
  cmd->add_option("--n-layer", a->n_layer, "override the preset")->check(CLI::Range(1, 1024));
  cmd->add_option("--n-head", a->n_head, "override the preset")->check(CLI::Range(1, 1024));
  cmd->add_option("--n-embd", a->n_embd, "override the preset")->check(CLI::Range(1, 65536));
  cmd->add_option("--n-positions", a->n_positions, "override the preset")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--vocab-size", a->vocab_size, "override the preset")->check(CLI::Range(1, 1 << 24));
  cmd->add_flag("--attn-only", a->attn_only, "blocks without ln_2 and MLP");
  cmd->add_option("--tokenizer", a->tokenizer, "copy vocab/merges files from this directory beside the weights");
  cmd->add_option("--seed", a->seed, "random seed");
  cmd->add_option("--arch", a->arch,
                  "a family, written exactly as Hugging Face lays it out: " + families_list() +
                      " (with --preset tiny or small)");
  cmd->add_option("--set", a->sets,
                  "KEY=VALUE: override any config.json key (VALUE as JSON, else a string), "
                  "e.g. --set num_key_value_heads=2; repeatable");
  cmd->add_option("--dtype", a->dtype, "f32, f16 or bf16 (with --arch)")
      ->check(CLI::IsMember({"f32", "f16", "bf16"}));
  cmd->add_option("--shards", a->shards,
                  "split the weights over N files + model.safetensors.index.json (with --arch)")
      ->check(CLI::Range(1, 1000));
  cmd->callback([a, init_family] {
    if (!a->arch.empty() || !a->sets.empty() || a->dtype != "f32" || a->shards != 1) {
      init_family(*a);
      return;
    }
    init_gpt2_preset(*a);
  });
}

QKV_COMMAND(25, register_init);

}  // namespace qkv::cli
