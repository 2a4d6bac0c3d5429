// The reference cases of tests/reference/fixtures/families/<case>/ (make_family_fixtures.py): how each
// checkpoint was made (`qkv init` arguments, deterministic) and its tokens, and the checkpoint remade from
// them with write_random_checkpoint. Shared by the forward's test (families_test.cpp) and the gradients'
// (lm_grad_test.cpp).
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "qkv/lm.hpp"

namespace qkv::family_cases {

inline const std::string kFx = std::string(QKV_SOURCE_DIR) + "/tests/reference/fixtures/families/";

struct Case {
  std::string name;
  std::vector<std::string> init;  // qkv init arguments (without --out)
  std::vector<int> tokens;
};

inline std::vector<Case> cases() {
  std::vector<Case> out;
  for (const auto& e : std::filesystem::directory_iterator(kFx)) {
    if (!e.is_directory()) continue;  // claims.json (check_family_claims.py) sits beside the cases
    std::ifstream f(e.path() / "case.json");
    const nlohmann::json j = nlohmann::json::parse(f);
    out.push_back({e.path().filename().string(), j["init"].get<std::vector<std::string>>(),
                   j["tokens"].get<std::vector<int>>()});
  }
  std::sort(out.begin(), out.end(), [](const Case& a, const Case& b) { return a.name < b.name; });
  return out;
}

// A random tiny checkpoint of family `type` (default_config's "tiny", initializer_range 0.2 so that every
// op moves the logits), written to a directory named after `tag`, the family and this process, loaded and
// the directory removed (the mapping stays valid).
inline Model random_tiny(const std::string& type, const std::string& tag, uint64_t seed) {
  nlohmann::json cfg = default_config(type, "tiny");
  cfg["initializer_range"] = 0.2;
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("qkv_" + tag + "_" + type + "_" + std::to_string(::getpid()))).string();
  write_random_checkpoint(dir, cfg, WeightType::F32, 1, seed);
  Model m = load_lm(dir);
  std::filesystem::remove_all(dir);
  return m;
}

// Remakes the case's checkpoint as `qkv init` does: the same config and the same random draws, in a
// directory named after `tag`, the case and this process.
inline std::string make_checkpoint(const Case& c, const std::string& tag = "families") {
  std::string arch = "gpt2", preset = "tiny", dtype = "f32";
  int shards = 1;
  uint64_t seed = 0;
  std::vector<std::pair<std::string, std::string>> sets;
  for (size_t i = 1; i + 1 < c.init.size(); i += 2) {
    const std::string& k = c.init[i];
    const std::string& v = c.init[i + 1];
    if (k == "--arch") arch = v;
    else if (k == "--preset") preset = v;
    else if (k == "--dtype") dtype = v;
    else if (k == "--shards") shards = std::stoi(v);
    else if (k == "--seed") seed = std::stoull(v);
    else if (k == "--set") sets.push_back({v.substr(0, v.find('=')), v.substr(v.find('=') + 1)});
    else ADD_FAILURE() << c.name << ": unknown init argument " << k;
  }
  nlohmann::json cfg = default_config(arch, preset);
  for (const auto& [k, v] : sets) {
    nlohmann::json j = nlohmann::json::parse(v, nullptr, false);
    cfg[k] = j.is_discarded() ? nlohmann::json(v) : j;
  }
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("qkv_" + tag + "_" + c.name + "_" + std::to_string(::getpid())))
          .string();
  std::filesystem::remove_all(dir);
  write_random_checkpoint(dir, cfg, dtype == "bf16" ? WeightType::BF16 : dtype == "f16" ? WeightType::F16 : WeightType::F32,
                          shards, seed);
  return dir;
}

}  // namespace qkv::family_cases
