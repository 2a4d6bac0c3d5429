// qkv generate — continue a text on any family and format, through the forward's K/V cache, greedy or
// sampled, optionally steered (--steer HOOK:FILE.npy:COEF); the text streamed as it comes, or --json.
// qkv steer — a contrastive steering vector (positive minus negative texts' mean activation) as .npy.
#include <chrono>
#include <cmath>
#include <iostream>
#include <optional>

#include "cli.hpp"
#include "model_input.hpp"
#include "qkv/analysis/steer.hpp"
#include "qkv/peak.hpp"
#include "qkv/error.hpp"
#include "qkv/generate.hpp"
#include "qkv/io/npy.hpp"

namespace qkv::cli {
namespace {

struct GenerateArgs {
  ModelArgs m;
  int max_new_tokens = 32;
  Sampling sampling;
  std::vector<std::string> steer;
  std::string stop;
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

void run_generate(const GenerateArgs& a) {
  const LoadedLM m = load_lm_arg(a.m);
  const std::vector<int> prompt = input_ids(m, a.m);
  GenerateOptions o;
  o.max_new_tokens = a.max_new_tokens;
  o.sampling = a.sampling;
  for (const std::string& s : a.steer) o.steer.push_back(parse_steer(s));
  const Tokenizer* tok = m.tokenizer ? &*m.tokenizer : nullptr;
  if (!a.stop.empty() && !tok)
    usage_error("--stop: " + m.path + " has no tokenizer to turn tokens into text");
  const int eos = tok && !a.ignore_eos ? tok->eos_id() : -1;
  if (eos >= 0) o.stop_ids.push_back(eos);
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
  const std::string reason = stopped_by_text              ? "stop_text"
                             : r.stop_reason == "stop_id" ? "eos"
                                                          : r.stop_reason;
  if (a.json) {
    // Decoding against the machine's limit: the weights' bytes per token at the triad bandwidth
    // measured now (--bandwidth), on the GEMM threads (peak.hpp, as qkv bench peak).
    const int64_t bytes = weight_bytes_per_token(m.model);
    const std::optional<Bandwidth> triad = a.bandwidth ? std::optional(measure_bandwidth()) : std::nullopt;
    const auto limit = [&](double v) { return triad ? nlohmann::json(v) : nlohmann::json(nullptr); };
    nlohmann::json steer = nlohmann::json::array();
    for (const Steer& s : o.steer) steer.push_back({{"hook", s.hook}, {"file", s.source}, {"coef", s.coef}});
    print_json({{"model", m.path},
                {"prompt_tokens", prompt.size()},
                {"tokens", r.tokens},
                {"text", text ? nlohmann::json(text->text()) : nlohmann::json(nullptr)},
                {"stop_reason", reason},
                {"prefill_ms", r.prefill_ms},
                {"decode_ms", r.decode_ms},
                {"tokens_per_second", r.tokens_per_second()},
                {"weight_bytes_per_token", bytes},
                {"triad_gb_per_s", limit(triad ? triad->best_gbps : 0)},
                {"bandwidth_fraction", limit(triad ? r.tokens_per_second() * double(bytes) / (triad->best_gbps * 1e9) : 0)},
                {"temperature", a.sampling.temperature},
                {"top_k", a.sampling.top_k},
                {"top_p", a.sampling.top_p},
                {"seed", a.sampling.seed},
                {"steer", steer}});
    return;
  }
  std::cout << "\n" << std::flush;
  std::fprintf(stderr, "[%zu new tokens (%s) after %zu; prefill %.1f ms, decode %.1f tokens/s]\n",
               r.tokens.size(), reason.c_str(), prompt.size(), r.prefill_ms, r.tokens_per_second());
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
    cmd->callback([a] { run_generate(*a); });
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
