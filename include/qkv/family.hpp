// The family table: one row per model family qkv runs. A row is everything family-specific in qkv —
// how its config.json reads into an Arch, its tensors by role, its llama.cpp GGUF architecture, the
// config `qkv init --arch` writes. Everything else (the forward, the backward, the experiments, the
// tour, the loaders) reads the Arch and the roles and never a family's name.
//
// Adding a family that uses existing mechanisms (norms, rotary kinds, Q/K/V layouts, MLP kinds…) is a
// row: a file in src/model/families/ with its reader, tensor list and default config, one line in
// src/model/family.cpp's list, a case in tests/reference/make_family_fixtures.py and its fixture.
#pragma once
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "qkv/arch.hpp"

namespace qkv {

// Typed reads of config.json keys for a family's reader: an absent (or null) key gives the fallback, a
// key of the wrong type an error naming `where` and the key.
struct ConfigKeys {
  const nlohmann::json& j;
  const std::string& where;
  [[noreturn]] void wrong(const std::string& key, const char* expected, const nlohmann::json& v) const;
  const nlohmann::json* find(const std::string& key) const;
  bool has(const std::string& key) const { return find(key) != nullptr; }
  int integer(const std::string& key, int fallback) const;  // in the 32-bit range
  int required_int(const std::string& key) const;
  // integer(key, fallback), which must lie in [lo, hi]: "KEY is V, expected lo .. hi" otherwise.
  int integer_in(const std::string& key, int fallback, int lo, int hi) const;
  double number(const std::string& key, double fallback) const;
  bool boolean(const std::string& key, bool fallback) const;
  std::string string(const std::string& key, const std::string& fallback) const;
};

// A family's tensors in checkpoint order, as its reader's Arch says (optional biases, tied embeddings…).
struct TensorList {
  std::vector<TensorSpec> specs;
  void add(std::string name, std::vector<int64_t> shape, Role role, int layer = -1) {
    specs.push_back({std::move(name), std::move(shape), layer, role});
  }
};

// How init_lm (lm_train.hpp) draws a fresh model's matrices and embeddings from N(0, 0.02), the residual
// outputs' from N(0, 0.02/√(2·n_layer)): each tensor from its own double-precision normal (GPT-2's, the
// draw the first bundled model was made with) or one float stream over the whole table (the rest).
enum class InitDraw { per_tensor_double, one_float_stream };

struct Family {
  std::string model_type;         // config.json's model_type: "gpt2", "llama", …
  std::string title;              // for help texts: "Llama (2, 3, 3.1; SmolLM, TinyLlama)"
  std::string hf_architecture;    // config.json's architectures[0] as Hugging Face writes it
  std::string gguf_architecture;  // llama.cpp's general.architecture; "" when qkv has no GGUF mapping
  // Hugging Face checkpoints may prefix every tensor name with this (GPT-2's "transformer."); "" none.
  std::string optional_prefix;
  // config.json -> the architecture: every family key this family reads, typed, errors naming the key.
  void (*read)(const ConfigKeys& keys, Arch& arch);
  // The tensors a checkpoint of this architecture holds, by role (exactly these, no more).
  void (*tensors)(const Arch& arch, TensorList& out);
  // The config.json `qkv init --arch` starts from: "tiny" (tests: a few hundred thousand parameters)
  // or "small" (benchmarks: GPT-2-small-like sizes).
  nlohmann::json (*default_config)(bool tiny);
  InitDraw init_draw = InitDraw::one_float_stream;
};

// Every family, in the order help texts list them.
const std::vector<Family>& families();
// The row for a model_type; qkv::Error (Data) naming `where` and listing the known families otherwise.
const Family& family(const std::string& model_type, const std::string& where);
// "gpt2, llama, mistral, …": the families as a help text or an error lists them.
std::string family_list();

}  // namespace qkv
