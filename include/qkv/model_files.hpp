// What sits beside a checkpoint: its tokenizer, and the bundled default model.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "qkv/tokenizer.hpp"

namespace qkv {

// The tokenizer of a model: a directory's own tokenizer.json (+ tokenizer_config.json), preferred, or
// vocab.json + merges.txt (or encoder.json + vocab.bpe); or those files beside a .safetensors / .bin
// file. nullopt when there are none. The directory needs no weights.
std::optional<Tokenizer> tokenizer_for_model(const std::string& model_path);

// The model every command uses without --model: $QKV_MODEL, else the bundled models/induction
// (found beside the source tree the binary was built from). Empty when neither exists.
std::string default_model_path();

// A token as a label for tables and pictures: its text with a space shown as ␣ and newlines as ↵.
std::string token_label(const Tokenizer& tok, int id);

}  // namespace qkv
