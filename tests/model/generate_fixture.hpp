// What generate_test.cpp and generate_batch_test.cpp share: a tiny random checkpoint of a family with
// spread logits, and options with only a token budget.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "qkv/arch.hpp"
#include "qkv/generate.hpp"
#include "qkv/lm.hpp"

namespace qkv::gentest {

// Options with only a token budget (no steering, default sampling).
inline GenerateOptions unsteered(int n) {
  GenerateOptions o;
  o.max_new_tokens = n;
  return o;
}

// A tiny random checkpoint of the family, with larger weights than the default so that the logits are
// spread (Gemma 2's less: its final soft-cap would saturate many logits at once, ties the argmax breaks
// alike with and without the cache, a continuation that repeats one token). `tag` keeps the test
// programs' temporary directories apart.
inline Model tiny(const std::string& type, uint64_t seed = 21, const std::string& tag = "gen") {
  nlohmann::json cfg = default_config(type, "tiny");
  cfg["initializer_range"] = type == "gemma2" ? 0.05 : 0.2;
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("qkv_" + tag + "_" + type + "_" + std::to_string(::getpid())))
                              .string();
  write_random_checkpoint(dir, cfg, WeightType::F32, 1, seed);
  Model m = load_lm(dir);
  std::filesystem::remove_all(dir);  // the weights are read into memory or kept mapped (the mapping outlives the unlink)
  return m;
}

}  // namespace qkv::gentest
