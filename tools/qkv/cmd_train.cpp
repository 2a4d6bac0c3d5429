// qkv train — train a model of any family in C++: the induction presets that make the bundled models, or a
// user's text.
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>

#include "cli.hpp"
#include <nlohmann/json.hpp>

#include "qkv/error.hpp"
#include "qkv/family.hpp"
#include "qkv/flash.hpp"
#include "qkv/gemm.hpp"
#include "qkv/io/atomic_file.hpp"
#include "qkv/io/mapped_file.hpp"
#include "qkv/model_files.hpp"
#include "qkv/report/table.hpp"
#include "qkv/lm.hpp"
#include "qkv/train/train.hpp"
#include "qkv/train/train_lm.hpp"
#include "output_set.hpp"
#include "train_report.hpp"

namespace fs = std::filesystem;

namespace qkv::cli {
namespace {

struct TrainArgs {
  std::string preset, data, config, tokenizer, out, init;
  std::string arch = "gpt2";  // the family (config.json's model_type)
  LmInductionRecipe recipe;  // --arch with --preset induction
  bool arch_given = false;   // --arch on the command line (else --config's model_type, else gpt2)
  bool steps_given = false;  // --steps on the command line (the --arch preset's default is its own)
  bool recipe_given = false; // --d-ff, --rope-theta or --shared-embedding on the command line
  int seq_len = 0, eval_n = 0;
  int n_embd = 0, n_head = 0, n_layer = 0;  // preset overrides
  std::string alphabet = "bytes";
  std::string mix = "skip=1,recall=2,probe=2";  // induction preset: the data's kinds and weights
  std::optional<bool> sinusoidal;           // learned positions start as sinusoids (default: GPT-2 only)
  TrainSettings s;
};

std::string hms(double seconds) {
  const int s = int(seconds + 0.5);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%d:%02d", s / 60, s % 60);
  return buf;
}

// One line, redrawn in place on a terminal; every 10% as its own line otherwise (CI logs).
void progress(const TrainRecord& r, int steps) {
  static const bool tty = isatty(STDERR_FILENO);
  const double frac = double(r.step) / steps;
  const double left = r.seconds / frac - r.seconds;
  const int width = 24, filled = int(frac * width);
  // The latest evaluation: the in-context loss and the circuit's two head scores as they form.
  static std::string watched;
  if (r.evaluated) {
    char w[160];
    std::snprintf(w, sizeof w, "  | in-context %+.2f, prev-token %.2f, induction %.2f (shifted %.2f)",
                  r.eval.in_context(), r.heads.previous_token, r.heads.induction, r.heads.induction_shifted);
    watched = w;
  }
  char line[384];
  std::snprintf(line, sizeof line, "step %5d/%d [%s%s] loss %.3f  %.1fk tok/s  %s elapsed, %s left%s", r.step, steps,
                std::string(size_t(filled), '#').c_str(), std::string(size_t(width - filled), '.').c_str(), r.loss,
                r.tokens_per_second / 1000, hms(r.seconds).c_str(), hms(left).c_str(), watched.c_str());
  if (tty) {
    std::fprintf(stderr, "\r%s\033[K", line);
    if (r.step == steps) std::fprintf(stderr, "\n");
  } else if (r.step == 1 || r.step == steps || (r.step * 10 / steps) != ((r.step - 1) * 10 / steps)) {
    std::fprintf(stderr, "%s\n", line);
  }
}

std::string settings_json(const TrainArgs& a) {
  const TrainSettings& s = a.s;
  nlohmann::json j = {{"preset", a.preset}, {"arch", a.arch},      {"data", a.data},  {"init", a.init},         {"mix", a.preset.empty() ? "" : to_string(parse_induction_mix(a.mix))},
                      {"alphabet", a.preset.empty() ? "" : a.alphabet}, {"sinusoidal_init", a.sinusoidal.value_or(a.arch == "gpt2")},
                      {"n_embd", a.n_embd}, {"n_head", a.n_head}, {"n_layer", a.n_layer}, {"eval_n", a.eval_n},         {"seq_len", a.seq_len},
                      {"steps", s.steps},        {"batch", s.batch},       {"lr", s.lr},
                      {"min_lr_ratio", s.min_lr_ratio}, {"warmup", s.warmup}, {"weight_decay", s.weight_decay},
                      {"beta1", s.beta1},        {"beta2", s.beta2},       {"clip", s.clip},
                      {"seed", s.seed},          {"threads", s.threads}, {"threads_used", training_threads(s)},
                      // What else fixes the float sums' order: qkv's kernel path and BLIS's micro-kernel. A rerun
                      // reproduces the tensors byte for byte only with all three the same (tests/train/retrain_*.sh).
                      {"isa", flash_path_name()}, {"blis_kernel", gemm_kernel()}};
  if (a.arch != "gpt2") j["d_ff"] = a.recipe.d_ff, j["rope_theta"] = a.recipe.rope_theta,
                                            j["shared_embedding"] = a.recipe.shared_embedding;
  return j.dump();
}

// The model's config.json: the preset's (the family's tiny config reshaped to the bundled models' size; for
// GPT-2 the first bundled model's attention-only shape, --n-embd/--n-head/--n-layer applied), --config's, or
// the family's tiny default on bytes.
nlohmann::json train_config(TrainArgs& a) {
  const bool gpt2 = a.arch == "gpt2";
  if (a.preset == "induction") {
    if ((a.n_embd || a.n_head || a.n_layer) && !gpt2)
      usage_error("--n-embd / --n-head / --n-layer apply to the GPT-2 preset; with --arch " + a.arch +
                  " give --config with the family's own config.json instead");
    nlohmann::json j = induction_family_config(a.arch, a.recipe);
    if (gpt2) {
      j["qkv_attn_only"] = true;  // the first bundled model: attention only, heads of 32
      if (a.n_embd) j["n_embd"] = a.n_embd;
      if (a.n_head) j["n_head"] = a.n_head;
      if (a.n_layer) j["n_layer"] = a.n_layer;
    }
    if (!a.seq_len) a.seq_len = 128;
    if (!a.eval_n) a.eval_n = 50;
    // The Llama preset's recipe (models/induction-llama/README.md): the circuit forms by step ~800, so
    // 2000 steps (half the GPT-2 preset's) reach the targets.
    if (!a.steps_given && !gpt2) a.s.steps = 2000;
    return j;
  }
  if (a.n_embd || a.n_head || a.n_layer)
    usage_error("--n-embd / --n-head / --n-layer reshape --preset induction; with --data give --config");
  if (a.config.empty()) {
    nlohmann::json j = default_config(a.arch, "tiny");
    j["vocab_size"] = 256;  // bytes
    return j;
  }
  const io::MappedFile f = io::MappedFile::open(a.config);
  const char* b = reinterpret_cast<const char*>(f.data());
  nlohmann::json j = nlohmann::json::parse(b, b + f.size(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) data_error(a.config + ": not a JSON object");
  if (!a.arch_given && j.contains("model_type") && j["model_type"].is_string()) a.arch = j["model_type"];
  return j;
}

// The training sequences: the induction preset's mix over bytes or printable characters, or windows of
// --data's text through --tokenizer (bytes by default).
DataSource train_data(TrainArgs& a, const Arch& arch, const Tokenizer& tok) {
  if (a.preset.empty()) {
    if (tok.vocab_size() > arch.vocab_size)
      usage_error("the tokenizer has " + std::to_string(tok.vocab_size()) + " tokens but the config's vocab_size is " +
                  std::to_string(arch.vocab_size));
    const io::MappedFile f = io::MappedFile::open(a.data);  // rejects directories and FIFOs at once
    const std::string text(reinterpret_cast<const char*>(f.data()), f.size());
    if (!a.seq_len) a.seq_len = std::min(128, arch.n_ctx);
    if (!a.eval_n && 2 * 20 <= arch.n_ctx) a.eval_n = 20;
    return text_data(tok.encode(text), a.seq_len);
  }
  if (a.alphabet == "bytes") return induction_data(arch.vocab_size, a.seq_len, parse_induction_mix(a.mix));
  // Letters, digits, space and full stop: 64 printable bytes, so text a person types is in range.
  std::vector<int> printable;
  for (int c = 0; c < 128; c++)
    if (std::isalnum(c) || c == ' ' || c == '.') printable.push_back(c);
  return induction_data(printable, a.seq_len, parse_induction_mix(a.mix));
}

// The starting weights: the family's init (sinusoidal positions where asked), the family preset's shared
// embedding direction, or --init's checkpoint (same family and shapes).
LmParams start_weights(const TrainArgs& a, const nlohmann::json& config, const Arch& arch) {
  LmInit init;
  init.sinusoidal_positions = a.sinusoidal.value_or(arch.model_type == "gpt2");
  LmParams model = init_lm(config, a.s.seed, init);
  if (a.preset == "induction" && arch.model_type != "gpt2")
    shared_embedding_init(model, a.recipe.shared_embedding, a.s.seed);
  if (a.init.empty()) return model;
  const Model start = load_lm(a.init);
  bool same = start.arch.model_type == arch.model_type && start.table.size() == model.layout.table.size();
  for (size_t i = 0; same && i < model.layout.table.size(); i++)
    same = start.table[i].name == model.layout.table[i].name && start.table[i].shape == model.layout.table[i].shape;
  if (!same)
    data_error(a.init + ": --init's shape (a " + start.arch.model_type + " model of " + std::to_string(start.arch.n_layer) +
               " layers, d " + std::to_string(start.arch.d) + ", vocab " + std::to_string(start.arch.vocab_size) +
               ") differs from the model being trained");
  return lm_params_from(start, config);
}

void report_result(const TrainArgs& a, const std::vector<TrainRecord>& history) {
  const TrainRecord& last = history.back();
  std::cout << "wrote " << a.out << "/ (model.safetensors, config.json, vocab.json, merges.txt, train.csv, loss.svg)\n"
            << "final loss " << report::fmt(last.loss, 3) << " after " << last.step << " steps in "
            << hms(last.seconds) << "\n";
  if (last.evaluated)
    std::cout << "in-context loss on " << a.eval_n << "-token random sequences repeated twice: first half "
              << report::fmt(last.eval.first_half, 3) << ", repeated half " << report::fmt(last.eval.repeated_half, 3)
              << " nats; previous-token head 0." << last.heads.previous_token_head << " "
              << report::fmt(last.heads.previous_token, 3) << ", induction head " << last.heads.induction_layer << "."
              << last.heads.induction_head << " " << report::fmt(last.heads.induction, 3) << "\n";
}

// One trainer for every family (lm_train.hpp): the presets, --data, --init; the outputs written together.
void run_train(TrainArgs a) {
  if (a.preset.empty() == a.data.empty()) usage_error("train: give either --preset induction or --data FILE");
  const bool family_preset = a.preset == "induction" && a.arch != "gpt2";
  if (a.recipe_given && !family_preset)
    usage_error("--d-ff, --rope-theta and --shared-embedding shape the induction preset of a family: give them with "
                "--preset induction and --arch NAME (not gpt2)");
  const nlohmann::json config = train_config(a);
  const std::string where = !a.config.empty() && a.preset.empty() ? a.config : "--arch " + a.arch;
  Arch arch;
  try {
    arch = arch_from_config(config, where);
  } catch (const Error& e) {
    if (a.config.empty()) usage_error(e.what());  // the preset's shape flags made a model that cannot be
    throw;
  }
  if (arch.model_type != a.arch)
    usage_error(where + ": model_type is \"" + arch.model_type + "\" but --arch is " + a.arch);
  const Tokenizer tok = a.tokenizer.empty() ? Tokenizer::byte_level() : Tokenizer::from_dir(a.tokenizer);
  const DataSource data = train_data(a, arch, tok);
  if (a.seq_len > arch.n_ctx)
    usage_error("--seq-len " + std::to_string(a.seq_len) + " exceeds the model's context " + std::to_string(arch.n_ctx));
  if (a.eval_n > 0 && 2 * a.eval_n > arch.n_ctx) a.eval_n = 0;
  std::error_code ec;
  fs::create_directories(a.out, ec);
  if (ec || !fs::is_directory(a.out)) data_error(a.out + ": cannot create the output directory");

  LmParams model = start_weights(a, config, arch);
  std::cerr << "training a " << arch.model_type << " model of " << model.layout.size << " parameters (" << arch.n_layer
            << " layers × " << arch.H << " query heads of " << arch.dh << ", " << arch.n_kv << " key/value heads"
            << (arch.attn_only() ? ", attention-only" : "") << ") for " << a.s.steps << " steps of " << a.s.batch << " × "
            << a.seq_len << " tokens\n";
  const auto history = train_lm(model, data, a.s, a.eval_n, [&](const TrainRecord& r) { progress(r, a.s.steps); });

  const fs::path out(a.out);
  OutputSet files;
  nlohmann::json cj = config;
  cj["torch_dtype"] = "float32";
  io::write_file_atomic(files.add((out / "config.json").string()), cj.dump(2) + "\n");
  files.add((out / "vocab.json").string());
  files.add((out / "merges.txt").string());
  tok.write_files(a.out);
  save_lm(model, files.add((out / "model.safetensors").string()),
          {{"qkv_train", settings_json(a)}, {"qkv_final_loss", std::to_string(history.back().loss)}});
  write_train_csv(files.add((out / "train.csv").string()), history);
  write_train_svg(files.add((out / "loss.svg").string()), history, a.eval_n);
  files.commit();
  report_result(a, history);
}

void register_train(CLI::App& app) {
  auto* cmd = app.add_subcommand("train", "Train a model of any family in C++ (--preset induction makes the bundled models)");
  auto a = std::make_shared<TrainArgs>();
  // The recipe for the bundled model (models/induction/README.md).
  a->s.steps = 4000;
  a->s.batch = 16;
  a->s.lr = 3e-3;
  a->s.weight_decay = 0.01;
  cmd->add_option("--preset", a->preset, "induction: 2-layer attention-only, bytes, recurring random segments")
      ->check(CLI::IsMember({"induction"}));
  cmd->add_option("--data", a->data, "train on this text file instead (shape: --config, else the family's tiny config on bytes)");
  cmd->add_option("--arch", a->arch,
                  "the family to train (config.json's model_type: " + family_list() + "; default gpt2, or --config's)");
  cmd->add_option("--d-ff", a->recipe.d_ff, "--arch with --preset induction: the MLP's width")->check(CLI::Range(1, 65536));
  cmd->add_option("--rope-theta", a->recipe.rope_theta, "--arch with --preset induction: rotary θ")
      ->check(CLI::Range(2.0, 1e9));
  cmd->add_option("--shared-embedding", a->recipe.shared_embedding,
                  "--arch with --preset induction: start every token embedding with one shared random vector, this "
                  "many times their RMS (a rotary model's position-only attention needs it)")
      ->check(CLI::Range(0.0, 100.0));
  cmd->add_option("--config", a->config, "config.json giving the model's shape (with --data)");
  cmd->add_option("--tokenizer", a->tokenizer, "directory with vocab.json + merges.txt (default: bytes)");
  cmd->add_option("--out", a->out, "output directory")->required();
  cmd->add_option("--init", a->init, "start from this checkpoint's weights instead of a random init (same shape)");
  cmd->add_option("--n-embd", a->n_embd, "override the preset's width")->check(CLI::Range(1, 4096));
  cmd->add_option("--n-head", a->n_head, "override the preset's heads per layer")->check(CLI::Range(1, 256));
  cmd->add_option("--n-layer", a->n_layer, "override the preset's layers")->check(CLI::Range(1, 64));
  cmd->add_option("--alphabet", a->alphabet, "induction preset: printable (64: letters, digits, space, .) or bytes (256)")
      ->check(CLI::IsMember({"printable", "bytes"}));
  cmd->add_option("--mix", a->mix,
                  "induction preset: the data's kinds and weights, from probe, copies, skip, periodic, recall "
                  "(default skip=1,recall=2,probe=2; see include/qkv/train/train.hpp)");
  cmd->add_option("--sinusoidal-init", a->sinusoidal, "start learned position embeddings as sinusoids (true/false; default true for gpt2)");
  cmd->add_option("--steps", a->s.steps, "optimiser steps (default 4000; 2000 with --arch and --preset induction)")->check(CLI::Range(1, 10000000));
  cmd->add_option("--batch", a->s.batch, "sequences per step")->check(CLI::Range(1, 4096));
  cmd->add_option("--seq-len", a->seq_len, "tokens per sequence")->check(CLI::Range(8, 1 << 16));
  cmd->add_option("--lr", a->s.lr, "peak learning rate")->check(CLI::Range(1e-8, 10.0));
  cmd->add_option("--warmup", a->s.warmup, "warm-up steps")->check(CLI::Range(0, 10000000));
  cmd->add_option("--weight-decay", a->s.weight_decay, "AdamW decoupled weight decay")->check(CLI::Range(0.0, 10.0));
  cmd->add_option("--clip", a->s.clip, "gradient-norm clip (0 = off)")->check(CLI::Range(0.0, 1e6));
  cmd->add_option("--seed", a->s.seed, "random seed (initialisation and data)");
  cmd->add_option("--threads", a->s.threads, "threads (0 = all cores); fixed threads give identical results")
      ->check(CLI::Range(0, 1024));
  cmd->add_option("--eval-every", a->s.eval_every, "steps between in-context loss evaluations")
      ->check(CLI::Range(1, 10000000));
  cmd->callback([a, cmd] {
    a->steps_given = cmd->count("--steps") > 0;
    a->arch_given = cmd->count("--arch") > 0;
    a->recipe_given = cmd->count("--d-ff") + cmd->count("--rope-theta") + cmd->count("--shared-embedding") > 0;
    run_train(*a);
  });
}

}  // namespace

QKV_COMMAND(90, register_train);

}  // namespace qkv::cli
