#include "model_input.hpp"

#include "cli.hpp"
#include "qkv/error.hpp"
#include "qkv/model_files.hpp"

namespace qkv::cli {

void add_model_option(CLI::App* cmd, ModelArgs& a) {
  cmd->add_option(
      "--model", a.model,
      "checkpoint of any family: a Hugging Face directory, a .safetensors file, an llm.c .bin or a "
      ".gguf (default: $QKV_MODEL, else the bundled models/induction)");
}

void add_input_options(CLI::App* cmd, ModelArgs& a) {
  auto* t = cmd->add_option("--text", a.text, "input text (tokenized with the model's tokenizer)");
  auto* k = cmd->add_option("--tokens", a.tokens, "input token ids, e.g. 464,3290,318");
  t->excludes(k);
}

namespace {

std::string model_path(const ModelArgs& a) {
  std::string p = a.model.empty() ? default_model_path() : a.model;
  if (p.empty()) usage_error("--model is required: no bundled model was found and $QKV_MODEL is not set");
  return p;
}

// ids from --tokens, else the text through the tokenizer; checked against the vocabulary and context.
std::vector<int> ids_for(const ModelArgs& a, const std::optional<Tokenizer>& tok, const std::string& path, int V, int P,
                         const std::string& fallback_text) {
  std::vector<int> ids;
  if (!a.tokens.empty()) {
    ids = parse_ints("--tokens", a.tokens);
  } else {
    const std::string& text = a.text.empty() ? fallback_text : a.text;
    if (text.empty()) usage_error("no input: give --text or --tokens");
    if (!tok) usage_error(path + " has no tokenizer beside it; give --tokens instead of --text");
    ids = tok->encode(text);
    if (ids.empty()) usage_error("--text: the text is empty after tokenization");
  }
  for (size_t i = 0; i < ids.size(); i++)
    if (ids[i] < 0 || ids[i] >= V)
      usage_error("--tokens: id " + std::to_string(ids[i]) + " at position " + std::to_string(i) +
                  " is outside the vocabulary [0, " + std::to_string(V) + ")");
  if (int(ids.size()) > P)
    usage_error("the input is " + std::to_string(ids.size()) + " tokens but the model has " + std::to_string(P) +
                " positions; shorten it (nothing is truncated silently)");
  return ids;
}

}  // namespace

LoadedLM load_lm_arg(const ModelArgs& a) {
  LoadedLM m;
  m.path = model_path(a);
  m.model = load_lm(m.path);
  m.tokenizer = tokenizer_for_model(m.path);
  if (m.tokenizer && m.tokenizer->vocab_size() > m.model.arch.vocab_size)
    data_error(m.path + ": tokenizer has " + std::to_string(m.tokenizer->vocab_size()) +
               " tokens but the model's vocab_size is " + std::to_string(m.model.arch.vocab_size));
  return m;
}

std::vector<int> input_ids(const LoadedLM& m, const ModelArgs& a, const std::string& fallback_text) {
  return ids_for(a, m.tokenizer, m.path, m.model.arch.vocab_size, m.model.arch.n_ctx, fallback_text);
}

std::vector<std::string> token_labels(const LoadedLM& m, const std::vector<int>& ids) {
  std::vector<std::string> out;
  for (int id : ids) out.push_back(m.tokenizer ? token_label(*m.tokenizer, id) : "#" + std::to_string(id));
  return out;
}

}  // namespace qkv::cli
