#include "model_input.hpp"

#include "cli.hpp"
#include "qkv/error.hpp"
#include "qkv/model_files.hpp"

namespace qkv::cli {

void add_model_option(CLI::App* cmd, ModelArgs& a) {
  cmd->add_option("--model", a.model,
                  "checkpoint: a Hugging Face directory, a .safetensors file or an llm.c .bin "
                  "(default: $QKV_MODEL, else the bundled models/induction)");
}

void add_input_options(CLI::App* cmd, ModelArgs& a) {
  auto* t = cmd->add_option("--text", a.text, "input text (tokenized with the model's tokenizer)");
  auto* k = cmd->add_option("--tokens", a.tokens, "input token ids, e.g. 464,3290,318");
  t->excludes(k);
}

LoadedModel load_model_arg(const ModelArgs& a) {
  LoadedModel m;
  m.path = a.model.empty() ? default_model_path() : a.model;
  if (m.path.empty())
    usage_error("--model is required: no bundled model was found and $QKV_MODEL is not set");
  m.model = load_model(m.path);
  m.tokenizer = tokenizer_for_model(m.path);
  if (m.tokenizer && m.tokenizer->vocab_size() > m.model.config.vocab_size)
    data_error(m.path + ": tokenizer has " + std::to_string(m.tokenizer->vocab_size()) +
               " tokens but the model's vocab_size is " + std::to_string(m.model.config.vocab_size));
  return m;
}

std::vector<int> input_ids(const LoadedModel& m, const ModelArgs& a, const std::string& fallback_text) {
  std::vector<int> ids;
  if (!a.tokens.empty()) {
    ids = parse_ints("--tokens", a.tokens);
  } else {
    const std::string& text = a.text.empty() ? fallback_text : a.text;
    if (text.empty()) usage_error("no input: give --text or --tokens");
    if (!m.tokenizer)
      usage_error(m.path + " has no tokenizer beside it (vocab.json + merges.txt); give --tokens instead of --text");
    ids = m.tokenizer->encode(text);
    if (ids.empty()) usage_error("--text: the text is empty after tokenization");
  }
  const int V = m.model.config.vocab_size, P = m.model.config.n_positions;
  for (size_t i = 0; i < ids.size(); i++)
    if (ids[i] < 0 || ids[i] >= V)
      usage_error("--tokens: id " + std::to_string(ids[i]) + " at position " + std::to_string(i) +
                  " is outside the vocabulary [0, " + std::to_string(V) + ")");
  if (int(ids.size()) > P)
    usage_error("the input is " + std::to_string(ids.size()) + " tokens but the model has " + std::to_string(P) +
                " positions; shorten it (nothing is truncated silently)");
  return ids;
}

std::vector<std::string> token_labels(const LoadedModel& m, const std::vector<int>& ids) {
  std::vector<std::string> out;
  for (int id : ids) out.push_back(m.tokenizer ? token_label(*m.tokenizer, id) : "#" + std::to_string(id));
  return out;
}

}  // namespace qkv::cli
