// --model, --text and --tokens: shared by every command that reads a model.
#pragma once
#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

#include "qkv/lm.hpp"
#include "qkv/tokenizer.hpp"

namespace qkv::cli {

struct ModelArgs {
  std::string model;   // empty: the default model
  std::string text;    // --text
  std::string tokens;  // --tokens 1,2,3
};

void add_model_option(CLI::App* cmd, ModelArgs& a);
void add_input_options(CLI::App* cmd, ModelArgs& a);  // --text / --tokens (mutually exclusive)

// A model of any family (lm.hpp) and the tokenizer beside it: what every command reads.
struct LoadedLM {
  std::string path;
  Model model;
  std::optional<Tokenizer> tokenizer;
};
LoadedLM load_lm_arg(const ModelArgs& a);
// ids from --tokens, else --text through the model's tokenizer, else `fallback_text` (if non-empty).
std::vector<int> input_ids(const LoadedLM& m, const ModelArgs& a, const std::string& fallback_text = "");
// One label per id (token_label; "#id" without a tokenizer).
std::vector<std::string> token_labels(const LoadedLM& m, const std::vector<int>& ids);

}  // namespace qkv::cli
