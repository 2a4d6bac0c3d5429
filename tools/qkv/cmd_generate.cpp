// qkv generate — continue a text on any family and format, through the forward's K/V cache, greedy or
// sampled, optionally steered (--steer HOOK:FILE.npy:COEF); the text streamed as it comes, or --json.
// qkv generate --prompts FILE — one prompt per line, decoded together in batches (generate_batch).
// qkv steer — a contrastive steering vector (positive minus negative texts' mean activation) as .npy.
#include <chrono>
#include <cmath>
#include <iostream>
#include <iterator>
#include <optional>

#include <unistd.h>

#include "cli.hpp"
#include "model_input.hpp"
#include "qkv/analysis/steer.hpp"
#include "qkv/peak.hpp"
#include "qkv/error.hpp"
#include "qkv/generate.hpp"
#include "qkv/io/mapped_file.hpp"
#include "qkv/io/npy.hpp"

namespace qkv::cli {
namespace {

struct GenerateArgs {
  ModelArgs m;
  int max_new_tokens = 32;
  Sampling sampling;
  std::vector<std::string> steer;
  std::string stop;
  std::string prompts, prompt_ids;  // --prompts / --prompt-ids FILE: one prompt per line, batched
  int batch_size = 8;
  bool ignore_eos = false, json = false, bandwidth = false;
};

// "HOOK:FILE.npy:COEF" (FILE may itself hold ':'): the vector read from FILE, flattened in C order.
Steer parse_steer(const std::string& s) {
  const size_t a = s.find(':'), b = s.rfind(':');
  if (a == std::string::npos || a == b || a == 0 || b == a + 1 || b + 1 == s.size())
    usage_error("--steer: expected HOOK:FILE.npy:COEF (e.g. blocks.1.hook_resid_pre:v.npy:4), got '" + s +
                "'");
  Steer st;
  st.hook = s.substr(0, a);
  st.source = s.substr(a + 1, b - a - 1);
  st.coef = float(parse_numbers("--steer", s.substr(b + 1), 1)[0]);
  const io::NpyArray v = io::read_npy(st.source);
  st.vec.reserve(v.data.size());
  for (double x : v.data) st.vec.push_back(float(x));
  return st;
}

// Bytes at the end of s that begin a UTF-8 character not yet complete (held back when streaming).
size_t incomplete_utf8_tail(const std::string& s) {
  for (size_t back = 1; back <= std::min<size_t>(3, s.size()); back++) {
    const unsigned char c = static_cast<unsigned char>(s[s.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return need > back ? back : 0;
  }
  return 0;
}

// The new text as it grows: decoded with the prompt before it (so a Metaspace tokenizer keeps the space
// of the first new word), cut after --stop's text when it appears; what is complete is printed at once.
class TextStream {
 public:
  TextStream(const Tokenizer& tok, std::vector<int> prompt, std::string stop, bool print)
      : tok_(tok), prompt_(std::move(prompt)), stop_(std::move(stop)), print_(print) {}
  // Adds a token; false once the stop text has appeared.
  bool add(int id) {
    ids_.push_back(id);
    text_ = tok_.decode_after(prompt_, ids_);
    bool go = true;
    if (!stop_.empty()) {
      const size_t at = text_.find(stop_);
      if (at != std::string::npos) text_.resize(at + stop_.size()), go = false;
    }
    emit(go ? text_.size() - incomplete_utf8_tail(text_) : text_.size());
    return go;
  }
  void finish() { emit(text_.size()); }
  const std::string& text() const { return text_; }

 private:
  void emit(size_t upto) {
    if (!print_ || upto <= printed_) return;
    std::cout << text_.substr(printed_, upto - printed_) << std::flush;
    printed_ = upto;
  }
  const Tokenizer& tok_;
  std::vector<int> prompt_, ids_;
  std::string stop_, text_;
  size_t printed_ = 0;
  bool print_;
};

// The options both forms share: length, sampling, steering, and the tokenizer's EOS as a stop id.
GenerateOptions generate_options(const GenerateArgs& a, const LoadedLM& m) {
  GenerateOptions o;
  o.max_new_tokens = a.max_new_tokens;
  o.sampling = a.sampling;
  for (const std::string& s : a.steer) o.steer.push_back(parse_steer(s));
  if (!a.stop.empty() && !m.tokenizer)
    usage_error("--stop: " + m.path + " has no tokenizer to turn tokens into text");
  const int eos = m.tokenizer && !a.ignore_eos ? m.tokenizer->eos_id() : -1;
  if (eos >= 0) o.stop_ids.push_back(eos);
  return o;
}

// The stop reason as the CLI names it: --stop's text, the tokenizer's EOS, or generate()'s own.
std::string stop_reason(bool stopped_by_text, const std::string& engine) {
  return stopped_by_text ? "stop_text" : engine == "stop_id" ? "eos" : engine;
}

nlohmann::json steer_json(const GenerateOptions& o) {
  nlohmann::json steer = nlohmann::json::array();
  for (const Steer& s : o.steer) steer.push_back({{"hook", s.hook}, {"file", s.source}, {"coef", s.coef}});
  return steer;
}

void run_generate(const GenerateArgs& a) {
  const LoadedLM m = load_lm_arg(a.m);
  const std::vector<int> prompt = input_ids(m, a.m);
  GenerateOptions o = generate_options(a, m);
  const Tokenizer* tok = m.tokenizer ? &*m.tokenizer : nullptr;
  const int eos = o.stop_ids.empty() ? -1 : o.stop_ids[0];
  std::optional<TextStream> text;
  if (tok) text.emplace(*tok, prompt, a.stop, !a.json);
  bool stopped_by_text = false;
  o.on_token = [&](int id) {
    if (id == eos) return true;  // the EOS itself is not shown
    if (!text) {
      if (!a.json) std::cout << id << " " << std::flush;
      return true;
    }
    stopped_by_text = !text->add(id);
    return !stopped_by_text;
  };
  const GenerateResult r = generate(m.model, prompt, o);
  if (text) text->finish();
  const std::string reason = stop_reason(stopped_by_text, r.stop_reason);
  if (a.json) {
    // Decoding against the machine's limit: the weights' bytes per token at the triad bandwidth
    // measured now (--bandwidth), on the GEMM threads (peak.hpp, as qkv bench peak).
    const int64_t bytes = weight_bytes_per_token(m.model);
    const double gbps = a.bandwidth ? measure_bandwidth().best_gbps : 0.0;
    const auto limit = [&](double v) { return a.bandwidth ? nlohmann::json(v) : nlohmann::json(nullptr); };
    print_json({{"model", m.path},
                {"prompt_tokens", prompt.size()},
                {"tokens", r.tokens},
                {"text", text ? nlohmann::json(text->text()) : nlohmann::json(nullptr)},
                {"stop_reason", reason},
                {"prefill_ms", r.prefill_ms},
                {"decode_ms", r.decode_ms},
                {"tokens_per_second", r.tokens_per_second()},
                {"weight_bytes_per_token", bytes},
                {"triad_gb_per_s", limit(gbps)},
                {"bandwidth_fraction", limit(gbps > 0 ? r.tokens_per_second() * double(bytes) / (gbps * 1e9) : 0)},
                {"temperature", a.sampling.temperature},
                {"top_k", a.sampling.top_k},
                {"top_p", a.sampling.top_p},
                {"seed", a.sampling.seed},
                {"steer", steer_json(o)}});
    return;
  }
  std::cout << "\n" << std::flush;
  std::fprintf(stderr, "[%zu new tokens (%s) after %zu; prefill %.1f ms, decode %.1f tokens/s]\n",
               r.tokens.size(), reason.c_str(), prompt.size(), r.prefill_ms, r.tokens_per_second());
}

// The prompts of --prompts (texts, through the tokenizer) or --prompt-ids (comma-separated ids): one per
// non-blank line (a trailing \r dropped), each checked against the vocabulary; errors name the line.
struct Prompts {
  std::vector<std::vector<int>> ids;
  std::vector<std::string> lines;
};
Prompts read_prompts(const GenerateArgs& a, const LoadedLM& m) {
  const bool texts = !a.prompts.empty();
  const std::string arg = texts ? "--prompts" : "--prompt-ids", file = texts ? a.prompts : a.prompt_ids;
  if (texts && !m.tokenizer)
    usage_error("--prompts: " + m.path + " has no tokenizer beside it; give --prompt-ids (token ids per line)");
  const std::string all = file == "-" ? std::string(std::istreambuf_iterator<char>(std::cin), {}) : [&] {
    const io::MappedFile f = io::MappedFile::open(file);
    return std::string(reinterpret_cast<const char*>(f.data()), f.size());
  }();
  Prompts out;
  size_t at = 0;
  for (int line = 1; at < all.size(); line++) {
    size_t end = all.find('\n', at);
    if (end == std::string::npos) end = all.size();
    std::string l = all.substr(at, end - at);
    at = end + 1;
    if (!l.empty() && l.back() == '\r') l.pop_back();
    if (l.find_first_not_of(" \t") == std::string::npos) continue;
    const std::string where = arg + ": " + (file == "-" ? "stdin" : file) + " line " + std::to_string(line);
    std::vector<int> ids = texts ? m.tokenizer->encode(l) : parse_ints(where, l);
    if (ids.empty()) usage_error(where + " is empty after tokenization");
    for (int id : ids)
      if (id < 0 || id >= m.model.arch.vocab_size)
        usage_error(where + ": id " + std::to_string(id) + " is outside the vocabulary [0, " +
                    std::to_string(m.model.arch.vocab_size) + ")");
    const int64_t ctx = m.model.arch.n_ctx;
    if (int64_t(ids.size()) + a.max_new_tokens > ctx)
      usage_error(where + " is " + std::to_string(ids.size()) + " tokens and --max-new-tokens " +
                  std::to_string(a.max_new_tokens) + " more, but the model's context is " + std::to_string(ctx) +
                  " positions; " +
                  (int64_t(ids.size()) < ctx ? "shorten the line or ask for at most " +
                                                   std::to_string(ctx - int64_t(ids.size())) + " new tokens"
                                             : std::string("shorten the line")));
    out.ids.push_back(std::move(ids));
    out.lines.push_back(l);
  }
  if (out.ids.empty()) usage_error(arg + ": " + (file == "-" ? "stdin" : file) + " has no prompt (one per non-blank line)");
  return out;
}

// Refuses a --batch-size whose K/V cache (every layer's keys and values of `longest` + --max-new-tokens
// positions per sequence, float32) would take more than half the machine's memory: a usage error with the
// numbers instead of an allocation the machine cannot hold.
void check_batch_memory(const GenerateArgs& a, const Model& m, const std::vector<std::vector<int>>& prompts) {
  size_t longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, p.size());
  const double B = double(std::min<size_t>(prompts.size(), size_t(a.batch_size)));
  const double bytes = B * m.arch.n_layer * 2.0 * m.arch.kv_dim() * double(longest + size_t(a.max_new_tokens)) * 4;
  const double mem = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGESIZE));
  if (mem > 0 && bytes > mem / 2)
    usage_error("--batch-size " + std::to_string(a.batch_size) + ": the K/V cache of a batch would take " +
                std::to_string(int64_t(bytes / (1 << 20))) + " MiB, more than half of this machine's " +
                std::to_string(int64_t(mem / (1 << 20))) + " MiB; use a smaller --batch-size");
}

// After each batch when there are several: prompts done and tokens/s so far on stderr, one line redrawn
// in place on a terminal, a line per tenth otherwise (CI logs), as qkv sweep and qkv train show theirs.
void show_batch_progress(size_t done, size_t total, size_t tokens, double ms) {
  static const bool tty = isatty(STDERR_FILENO);
  static int last_decile = -1;
  char line[160];
  std::snprintf(line, sizeof line, "generate: %zu/%zu prompts, %zu new tokens, %.1f tokens/s end to end", done, total, tokens,
                ms > 0 ? double(tokens) / (ms / 1000.0) : 0.0);
  if (tty) {
    std::fprintf(stderr, "\r%s\033[K%s", line, done == total ? "\n" : "");
  } else if (int(10.0 * double(done) / double(total)) != last_decile) {
    last_decile = int(10.0 * double(done) / double(total));
    std::fprintf(stderr, "%s\n", line);
  }
}

// --prompts / --prompt-ids: the prompts in batches of --batch-size through generate_batch, each sampled
// with --seed as if alone (so line b continues as `qkv generate` on that line alone does, to rounding);
// the results in file order once all are done, or one JSON document with --json.
void run_generate_batched(const GenerateArgs& a) {
  if (a.batch_size < 1) usage_error("--batch-size: " + std::to_string(a.batch_size) + " is not >= 1");
  if (a.bandwidth) usage_error("--bandwidth: measured for one prompt only; leave out --prompts/--prompt-ids");
  const LoadedLM m = load_lm_arg(a.m);
  const Prompts in = read_prompts(a, m);
  const std::vector<std::vector<int>>& prompts = in.ids;
  check_batch_memory(a, m.model, prompts);
  const GenerateOptions o = generate_options(a, m);
  const Tokenizer* tok = m.tokenizer ? &*m.tokenizer : nullptr;
  const int eos = o.stop_ids.empty() ? -1 : o.stop_ids[0];
  nlohmann::json seqs = nlohmann::json::array();
  double prefill_ms = 0, decode_ms = 0;
  size_t decoded = 0, produced = 0;
  for (size_t from = 0; from < prompts.size(); from += size_t(a.batch_size)) {
    const std::vector<std::vector<int>> part(prompts.begin() + long(from),
                                             prompts.begin() + long(std::min(prompts.size(), from + size_t(a.batch_size))));
    std::vector<TextStream> text;
    if (tok)
      for (const auto& p : part) text.emplace_back(*tok, p, a.stop, false);
    std::vector<bool> by_text(part.size(), false);
    const BatchGenerateResult r = generate_batch(m.model, part, o, {}, [&](int b, int id) {
      if (id == eos || !tok) return true;
      by_text[size_t(b)] = !text[size_t(b)].add(id);
      return !by_text[size_t(b)];
    });
    prefill_ms += r.prefill_ms, decode_ms += r.decode_ms;
    for (size_t b = 0; b < part.size(); b++) {
      const GenerateResult& g = r.seqs[b];
      produced += g.tokens.size(), decoded += g.tokens.empty() ? 0 : g.tokens.size() - 1;
      seqs.push_back({{"prompt_tokens", part[b].size()},
                      {"tokens", g.tokens},
                      {"text", tok ? nlohmann::json(text[b].text()) : nlohmann::json(nullptr)},
                      {"stop_reason", stop_reason(by_text[b], g.stop_reason)}});
    }
    if (prompts.size() > size_t(a.batch_size))
      show_batch_progress(seqs.size(), prompts.size(), produced, prefill_ms + decode_ms);
  }
  const double tps = decode_ms > 0 ? double(decoded) / (decode_ms / 1000.0) : 0.0;
  if (a.json) {
    print_json({{"model", m.path}, {"prompts", prompts.size()}, {"batch_size", a.batch_size},
                {"sequences", seqs}, {"prefill_ms", prefill_ms}, {"decode_ms", decode_ms},
                {"tokens_per_second", tps}, {"temperature", a.sampling.temperature},
                {"top_k", a.sampling.top_k}, {"top_p", a.sampling.top_p}, {"seed", a.sampling.seed},
                {"steer", steer_json(o)}});
    return;
  }
  // Each prompt as its line, then its continuation (new ids after " | " without a tokenizer).
  for (size_t b = 0; b < seqs.size(); b++) {
    std::cout << "== " << b + 1 << " (" << seqs[b]["stop_reason"].get<std::string>() << ")\n" << in.lines[b];
    if (tok) std::cout << seqs[b]["text"].get<std::string>();
    else
      for (size_t i = 0; i < seqs[b]["tokens"].size(); i++) std::cout << (i ? " " : " | ") << seqs[b]["tokens"][i].get<int>();
    std::cout << "\n";
  }
  std::cout << std::flush;
  std::fprintf(stderr, "[%zu prompts in batches of %d: %zu new tokens; prefill %.1f ms, decode %.1f tokens/s]\n",
               prompts.size(), a.batch_size, produced, prefill_ms, tps);
}

struct SteerArgs {
  ModelArgs m;
  std::vector<std::string> positive, negative, positive_tokens, negative_tokens;
  std::string hook, out;
  bool json = false;
};

// The texts of one side as the tokenizer makes them (a BOS it adds left out of the mean), then the id lists.
std::vector<analysis::SteerText> side(const LoadedLM& m, const std::vector<std::string>& texts,
                                      const std::vector<std::string>& ids, const std::string& name) {
  std::vector<analysis::SteerText> out;
  if (!texts.empty() && !m.tokenizer)
    usage_error("--" + name + ": " + m.path + " has no tokenizer beside it; give --" + name +
                "-tokens instead");
  for (const std::string& t : texts) {
    analysis::SteerText s{m.tokenizer->encode(t), 0};
    if (s.ids.empty()) usage_error("--" + name + ": the text '" + t + "' is empty after tokenization");
    s.from = m.tokenizer->adds_bos() && s.ids[0] == m.tokenizer->bos_id() ? 1 : 0;
    out.push_back(std::move(s));
  }
  for (const std::string& t : ids) out.push_back({parse_ints("--" + name + "-tokens", t), 0});
  return out;
}

void run_steer(const SteerArgs& a) {
  const LoadedLM m = load_lm_arg(a.m);
  const auto pos = side(m, a.positive, a.positive_tokens, "positive");
  const auto neg = side(m, a.negative, a.negative_tokens, "negative");
  const std::vector<float> v = analysis::steering_vector(m.model, a.hook, pos, neg);
  io::write_npy(a.out, {int64_t(v.size())}, v.data());
  double norm = 0;
  for (float x : v) norm += double(x) * x;
  norm = std::sqrt(norm);
  if (a.json) {
    print_json({{"hook", a.hook},
                {"out", a.out},
                {"width", v.size()},
                {"norm", norm},
                {"positive", pos.size()},
                {"negative", neg.size()}});
    return;
  }
  std::printf("wrote %s: %s, %zu values, norm %.6g (%zu positive, %zu negative texts)\n", a.out.c_str(),
              a.hook.c_str(), v.size(), norm, pos.size(), neg.size());
}

void register_generate(CLI::App& app) {
  {
    auto* cmd = app.add_subcommand(
        "generate",
        "Continue a text (any family and format) through the K/V cache: greedy, or sampled with a seed; "
        "steering "
        "vectors at any hook point (--steer); the text streamed to stdout as it comes (docs/generate.md)");
    auto a = std::make_shared<GenerateArgs>();
    add_model_option(cmd, a->m);
    add_input_options(cmd, a->m);
    cmd->add_option(
        "--max-new-tokens", a->max_new_tokens,
        "how many tokens to add (default 32); the prompt plus these must fit the model's context");
    cmd->add_option("--temperature", a->sampling.temperature,
                    "0 (default): greedy, the most likely token; > 0: sample");
    cmd->add_option("--top-k", a->sampling.top_k, "sample among the K most likely tokens only (0: all)");
    cmd->add_option("--top-p", a->sampling.top_p,
                    "sample among the most likely tokens whose probability sums to P (1: all)");
    cmd->add_option("--seed", a->sampling.seed,
                    "random seed of the sampling: the same seed, the same tokens (default 0)");
    cmd->add_option(
        "--steer", a->steer,
        "HOOK:FILE.npy:COEF — add COEF × the vector in FILE to HOOK's activation at every position of every "
        "step, prompt included (repeatable; qkv steer makes such vectors)");
    cmd->add_option("--stop", a->stop, "stop once the new text contains this text (the text ends with it)");
    cmd->add_flag("--ignore-eos", a->ignore_eos, "go on past the tokenizer's end-of-sequence token");
    cmd->add_flag("--json", a->json,
                  "JSON (nothing streamed): {\"tokens\": new ids, \"text\", \"stop_reason\", \"prefill_ms\", "
                  "\"decode_ms\", \"tokens_per_second\", \"weight_bytes_per_token\", \"triad_gb_per_s\", "
                  "\"bandwidth_fraction\" (the last two null without --bandwidth), ...}");
    cmd->add_flag("--bandwidth", a->bandwidth,
                  "with --json: measure the memory bandwidth (STREAM triad as qkv bench peak, best of 5) after decoding and give "
                  "tokens/s × weight bytes per token / bandwidth, the fraction of the physical limit reached");
    cmd->add_option("--prompts", a->prompts,
                    "a text file of prompts (- for stdin), one per non-blank line, generated in batches (--batch-size) with the "
                    "same options; line b continues as generate --text LINE alone does, to rounding");
    cmd->add_option("--prompt-ids", a->prompt_ids,
                    "as --prompts, each line comma-separated token ids (e.g. 464,3290,318)");
    cmd->add_option("--batch-size", a->batch_size,
                    "with --prompts/--prompt-ids: prompts decoded together through one K/V cache (default 8)");
    for (const char* one : {"--text", "--tokens", "--prompt-ids"}) cmd->get_option("--prompts")->excludes(one);
    for (const char* one : {"--text", "--tokens"}) cmd->get_option("--prompt-ids")->excludes(one);
    cmd->callback([a] {
      if (!a->prompts.empty() || !a->prompt_ids.empty())
        run_generate_batched(*a);
      else
        run_generate(*a);
    });
  }
  {
    auto* cmd = app.add_subcommand("steer",
                                   "A contrastive steering vector: the mean activation at HOOK over the "
                                   "positive texts minus that over the "
                                   "negative ones (each text's mean over its positions first), written as a "
                                   "float32 .npy for generate --steer");
    auto a = std::make_shared<SteerArgs>();
    add_model_option(cmd, a->m);
    cmd->add_option("--positive", a->positive,
                    "texts to steer towards (one value each; a BOS the tokenizer adds is not averaged)");
    cmd->add_option("--negative", a->negative, "texts to steer away from");
    cmd->add_option("--positive-tokens", a->positive_tokens,
                    "positive texts as token ids, e.g. 5,6,7 (one value each)");
    cmd->add_option("--negative-tokens", a->negative_tokens, "negative texts as token ids");
    cmd->add_option("--hook", a->hook, "the hook point, e.g. blocks.1.hook_resid_pre")->required();
    cmd->add_option("--out", a->out,
                    "the .npy to write (float32, one value per activation element of a position)")
        ->required();
    cmd->add_flag("--json", a->json,
                  "JSON: {\"hook\", \"out\", \"width\", \"norm\", \"positive\", \"negative\"}");
    cmd->callback([a] { run_steer(*a); });
  }
}

}  // namespace

QKV_COMMAND(22, register_generate);

}  // namespace qkv::cli
