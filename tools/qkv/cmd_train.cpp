// qkv train — train a GPT-2 in C++: the induction preset that makes the bundled model, or a user's text.
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli.hpp"
#include "qkv/error.hpp"
#include "qkv/io/atomic_file.hpp"
#include "qkv/io/config_json.hpp"
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
  std::string arch;  // a family (config.json's model_type); empty or gpt2: the GPT-2 trainer
  LmInductionRecipe recipe;  // --arch with --preset induction
  bool steps_given = false;  // --steps on the command line (the --arch preset's default is its own)
  bool recipe_given = false; // --d-ff, --rope-theta or --shared-embedding on the command line
  int seq_len = 0, eval_n = 0;
  int n_embd = 0, n_head = 0, n_layer = 0;  // preset overrides
  std::string alphabet = "bytes";
  std::string mix = "skip=1,recall=2,probe=2";  // induction preset: the data's kinds and weights
  bool sinusoidal = true;                   // start wpe as sinusoids (still learned)       // induction preset: which tokens the random sequences use
  TrainSettings s;
};

// The bundled model's recipe: a 2-layer attention-only GPT-2 on bytes, where induction forms.
GPT2Config induction_config() {
  GPT2Config c;
  c.vocab_size = 256;
  c.n_positions = 128;
  c.n_embd = 128;
  c.n_layer = 2;
  c.n_head = 4;  // heads of 32: with 16 the QK and OV circuits are too low-rank to separate 256 bytes
  c.attn_only = true;
  return c;
}

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
  nlohmann::json j = {{"preset", a.preset}, {"arch", a.arch.empty() ? "gpt2" : a.arch},      {"data", a.data},  {"init", a.init},         {"mix", a.preset.empty() ? "" : to_string(parse_induction_mix(a.mix))},
                      {"alphabet", a.preset.empty() ? "" : a.alphabet}, {"sinusoidal_init", a.sinusoidal},
                      {"n_embd", a.n_embd}, {"n_head", a.n_head}, {"n_layer", a.n_layer}, {"eval_n", a.eval_n},         {"seq_len", a.seq_len},
                      {"steps", s.steps},        {"batch", s.batch},       {"lr", s.lr},
                      {"min_lr_ratio", s.min_lr_ratio}, {"warmup", s.warmup}, {"weight_decay", s.weight_decay},
                      {"beta1", s.beta1},        {"beta2", s.beta2},       {"clip", s.clip},
                      {"seed", s.seed},          {"threads", s.threads}, {"threads_used", training_threads(s)}};
  if (!a.arch.empty() && a.arch != "gpt2") j["d_ff"] = a.recipe.d_ff, j["rope_theta"] = a.recipe.rope_theta,
                                            j["shared_embedding"] = a.recipe.shared_embedding;
  return j.dump();
}

// --arch NAME (not GPT-2): the same presets and data on a model of that family (lm_train.hpp).
void run_train_family(TrainArgs a) {
  nlohmann::json config;
  Tokenizer tok = Tokenizer::byte_level();
  DataSource data;
  if (a.preset == "induction") {
    config = induction_family_config(a.arch, a.recipe);
    if (a.n_embd || a.n_head || a.n_layer)
      usage_error("--n-embd / --n-head / --n-layer apply to the GPT-2 preset; with --arch " + a.arch +
                  " give --config with the family's own config.json instead");
    if (!a.seq_len) a.seq_len = 128;
    if (!a.eval_n) a.eval_n = 50;
    // The Llama preset's recipe (models/induction-llama/README.md): the circuit forms by step ~800, so
    // 2000 steps (half the GPT-2 preset's) reach the targets.
    if (!a.steps_given) a.s.steps = 2000;
  } else {
    if (!a.config.empty()) {
      const io::MappedFile f = io::MappedFile::open(a.config);
      const char* b = reinterpret_cast<const char*>(f.data());
      config = nlohmann::json::parse(b, b + f.size(), nullptr, false);
      if (config.is_discarded()) data_error(a.config + ": not valid JSON");
    } else {
      config = default_config(a.arch, "tiny");
      config["vocab_size"] = 256;  // bytes
    }
    if (!a.tokenizer.empty()) tok = Tokenizer::from_dir(a.tokenizer);
  }
  const std::string where = a.config.empty() ? "--arch " + a.arch : a.config;
  const Arch arch = arch_from_config(config, where);
  if (arch.model_type != a.arch)
    usage_error(where + ": model_type is \"" + arch.model_type + "\" but --arch is " + a.arch);
  if (a.preset.empty()) {
    if (tok.vocab_size() > arch.vocab_size)
      usage_error("the tokenizer has " + std::to_string(tok.vocab_size()) + " tokens but the config's vocab_size is " +
                  std::to_string(arch.vocab_size));
    const io::MappedFile f = io::MappedFile::open(a.data);
    const std::string text(reinterpret_cast<const char*>(f.data()), f.size());
    if (!a.seq_len) a.seq_len = std::min(128, arch.n_ctx);
    data = text_data(tok.encode(text), a.seq_len);
    if (!a.eval_n && 2 * 20 <= arch.n_ctx) a.eval_n = 20;
  } else if (a.alphabet == "bytes") {
    data = induction_data(arch.vocab_size, a.seq_len, parse_induction_mix(a.mix));
  } else {
    std::vector<int> printable;
    for (int c = 0; c < 128; c++)
      if (std::isalnum(c) || c == ' ' || c == '.') printable.push_back(c);
    data = induction_data(printable, a.seq_len, parse_induction_mix(a.mix));
  }
  if (a.seq_len > arch.n_ctx)
    usage_error("--seq-len " + std::to_string(a.seq_len) + " exceeds the model's context " + std::to_string(arch.n_ctx));
  if (a.eval_n > 0 && 2 * a.eval_n > arch.n_ctx) a.eval_n = 0;
  std::error_code ec;
  fs::create_directories(a.out, ec);
  if (ec || !fs::is_directory(a.out)) data_error(a.out + ": cannot create the output directory");

  LmParams model = init_lm(config, a.s.seed);
  if (a.preset == "induction") shared_embedding_init(model, a.recipe.shared_embedding, a.s.seed);
  if (!a.init.empty()) {
    const Model start = load_lm(a.init);
    if (start.arch.model_type != arch.model_type || tensor_table(start.arch).size() != model.layout.table.size())
      data_error(a.init + ": --init is a " + start.arch.model_type + " model of another shape than the one being trained");
    for (size_t i = 0; i < model.layout.table.size(); i++)
      if (start.table[i].shape != model.layout.table[i].shape)
        data_error(a.init + ": tensor " + start.table[i].name + " differs in shape from the model being trained");
    model = lm_params_from(start, config);
  }
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

void run_train(TrainArgs a) {
  if (a.preset.empty() == a.data.empty()) usage_error("train: give either --preset induction or --data FILE");
  const bool family = !a.arch.empty() && a.arch != "gpt2";
  if (a.recipe_given && !(family && a.preset == "induction"))
    usage_error("--d-ff, --rope-theta and --shared-embedding shape the induction preset of a family: give them with "
                "--preset induction and --arch NAME (not gpt2)");
  if (family) return run_train_family(std::move(a));
  GPT2Config config;
  Tokenizer tok = Tokenizer::byte_level();
  DataSource data;
  if (a.preset == "induction") {
    config = induction_config();
    if (a.n_embd) config.n_embd = a.n_embd;
    if (a.n_head) config.n_head = a.n_head;
    if (a.n_layer) config.n_layer = a.n_layer;
    try {
      config.validate("--preset induction");
    } catch (const Error& e) {
      usage_error(e.what());
    }
    if (!a.seq_len) a.seq_len = 128;
    if (!a.eval_n) a.eval_n = 50;
    if (a.seq_len > config.n_positions) usage_error("--seq-len: at most n_positions = " + std::to_string(config.n_positions) + " for this preset");
    if (a.alphabet == "bytes") {
      data = induction_data(config.vocab_size, a.seq_len, parse_induction_mix(a.mix));
    } else {
      // Letters, digits, space and full stop: 64 printable bytes, so text a person types is in range.
      std::vector<int> printable;
      for (int c = 0; c < 128; c++)
        if (std::isalnum(c) || c == ' ' || c == '.') printable.push_back(c);
      data = induction_data(printable, a.seq_len, parse_induction_mix(a.mix));
    }
  } else {
    if (a.config.empty()) usage_error("--data needs --config CONFIG.json (the model's shape)");
    config = io::read_config_json(a.config);
    if (!a.tokenizer.empty()) tok = Tokenizer::from_dir(a.tokenizer);
    if (tok.vocab_size() > config.vocab_size)
      usage_error("the tokenizer has " + std::to_string(tok.vocab_size()) + " tokens but --config's vocab_size is " +
                  std::to_string(config.vocab_size));
    const io::MappedFile f = io::MappedFile::open(a.data);  // rejects directories and FIFOs at once
    const std::string text(reinterpret_cast<const char*>(f.data()), f.size());
    if (!a.seq_len) a.seq_len = std::min(128, config.n_positions);
    if (a.seq_len > config.n_positions)
      usage_error("--seq-len " + std::to_string(a.seq_len) + " exceeds n_positions " + std::to_string(config.n_positions));
    data = text_data(tok.encode(text), a.seq_len);
    if (!a.eval_n && 2 * 20 <= config.n_positions) a.eval_n = 20;
  }
  std::error_code ec;
  fs::create_directories(a.out, ec);
  if (ec || !fs::is_directory(a.out)) data_error(a.out + ": cannot create the output directory");

  GPT2 model(config);
  if (a.init.empty()) {
    init_gpt2(model, a.s.seed, a.sinusoidal);
  } else {
    GPT2 start = load_model(a.init);
    const GPT2Config& c = start.config;
    if (c.vocab_size != config.vocab_size || c.n_positions != config.n_positions || c.n_embd != config.n_embd ||
        c.n_layer != config.n_layer || c.n_head != config.n_head || c.mlp_dim() != config.mlp_dim() ||
        c.attn_only != config.attn_only)
      data_error(a.init + ": --init's shape (" + std::to_string(c.n_layer) + " layers, " + std::to_string(c.n_head) +
                 " heads, d " + std::to_string(c.n_embd) + ", vocab " + std::to_string(c.vocab_size) +
                 ") differs from the model being trained");
    start.config = config;
    model = std::move(start);
  }
  std::cerr << "training " << model.num_parameters() << " parameters (" << config.n_layer << " layers × "
            << config.n_head << " heads of " << config.head_dim() << (config.attn_only ? ", attention-only" : "")
            << ") for " << a.s.steps << " steps of " << a.s.batch << " × " << a.seq_len << " tokens\n";
  const auto history = train(model, data, a.s, a.eval_n, [&](const TrainRecord& r) { progress(r, a.s.steps); });

  const fs::path out(a.out);
  OutputSet files;
  io::write_config_json(files.add((out / "config.json").string()), config);
  files.add((out / "vocab.json").string());
  files.add((out / "merges.txt").string());
  tok.write_files(a.out);
  save_model(model, files.add((out / "model.safetensors").string()),
             {{"qkv_train", settings_json(a)}, {"qkv_final_loss", std::to_string(history.back().loss)}});
  write_train_csv(files.add((out / "train.csv").string()), history);
  write_train_svg(files.add((out / "loss.svg").string()), history, a.eval_n);
  files.commit();
  const TrainRecord& last = history.back();
  std::cout << "wrote " << a.out << "/ (model.safetensors, config.json, vocab.json, merges.txt, train.csv, loss.svg)\n"
            << "final loss " << report::fmt(last.loss, 3) << " after " << last.step << " steps in "
            << hms(last.seconds) << "\n";
  if (last.evaluated)
    std::cout << "in-context loss on " << a.eval_n << "-token random sequences repeated twice: first half "
              << report::fmt(last.eval.first_half, 3) << ", repeated half " << report::fmt(last.eval.repeated_half, 3)
              << " nats\n";
}

void register_train(CLI::App& app) {
  auto* cmd = app.add_subcommand("train", "Train a GPT-2 in C++ (--preset induction makes the bundled model)");
  auto a = std::make_shared<TrainArgs>();
  // The recipe for the bundled model (models/induction/README.md).
  a->s.steps = 4000;
  a->s.batch = 16;
  a->s.lr = 3e-3;
  a->s.weight_decay = 0.01;
  cmd->add_option("--preset", a->preset, "induction: 2-layer attention-only, bytes, recurring random segments")
      ->check(CLI::IsMember({"induction"}));
  cmd->add_option("--data", a->data, "train on this text file instead (needs --config)");
  cmd->add_option("--arch", a->arch,
                  "the family to train (config.json's model_type: llama, mistral, qwen2, gemma, gemma2, gpt_neox, "
                  "phi3, gpt_neo; default gpt2)");
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
  cmd->add_option("--sinusoidal-init", a->sinusoidal, "start position embeddings as sinusoids (true/false)");
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
    a->recipe_given = cmd->count("--d-ff") + cmd->count("--rope-theta") + cmd->count("--shared-embedding") > 0;
    run_train(*a);
  });
}

}  // namespace

QKV_COMMAND(90, register_train);

}  // namespace qkv::cli
