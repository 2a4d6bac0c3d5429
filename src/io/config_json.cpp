#include "qkv/io/config_json.hpp"

#include <climits>

#include "io_util.hpp"
#include "qkv/error.hpp"
#include "qkv/io/atomic_file.hpp"
#include "qkv/io/mapped_file.hpp"

namespace qkv::io {

using nlohmann::json;

namespace {

std::string describe(const json& v) { return detail::describe_json(v); }

[[noreturn]] void wrong_type(const std::string& where, const char* key, const char* expected, const json& v) {
  data_error(where + ": config key \"" + key + "\": expected " + expected + ", found " + describe(v));
}

// Sets `out` when `key` is present; it must be an integer in int range.
bool get_int(const json& j, const std::string& where, const char* key, int* out) {
  const auto it = j.find(key);
  if (it == j.end()) return false;
  if (!it->is_number_integer()) wrong_type(where, key, "an integer", *it);
  if (it->is_number_unsigned() ? it->get<uint64_t>() > static_cast<uint64_t>(INT_MAX)
                               : (it->get<int64_t>() < INT_MIN || it->get<int64_t>() > INT_MAX))
    wrong_type(where, key, "an integer in the 32-bit range", *it);
  *out = it->get<int>();
  return true;
}

}  // namespace

GPT2Config config_from_json(const json& j, const std::string& where) {
  if (!j.is_object()) data_error(where + ": config: expected a JSON object, found " + describe(j));
  GPT2Config c;
  if (const auto it = j.find("model_type"); it != j.end()) {
    if (!it->is_string()) wrong_type(where, "model_type", "a string", *it);
    if (it->get_ref<const std::string&>() != "gpt2")
      data_error(where + ": config key \"model_type\" is \"" + it->get<std::string>() + "\", expected \"gpt2\"");
  }
  get_int(j, where, "vocab_size", &c.vocab_size);
  if (!get_int(j, where, "n_positions", &c.n_positions)) get_int(j, where, "n_ctx", &c.n_positions);
  get_int(j, where, "n_embd", &c.n_embd);
  get_int(j, where, "n_layer", &c.n_layer);
  get_int(j, where, "n_head", &c.n_head);
  if (const auto it = j.find("n_inner"); it != j.end() && !it->is_null()) {
    if (!it->is_number_integer()) wrong_type(where, "n_inner", "null or an integer", *it);
    get_int(j, where, "n_inner", &c.n_inner);
  }
  if (const auto it = j.find("layer_norm_epsilon"); it != j.end()) {
    if (!it->is_number()) wrong_type(where, "layer_norm_epsilon", "a number", *it);
    c.layer_norm_epsilon = it->get<double>();
  }
  if (const auto it = j.find("activation_function"); it != j.end()) {
    if (!it->is_string()) wrong_type(where, "activation_function", "a string", *it);
    if (it->get_ref<const std::string&>() != "gelu_new")
      data_error(where + ": config key \"activation_function\" is \"" + it->get<std::string>() +
                 "\", expected \"gelu_new\" (the only activation qkv implements)");
  }
  if (const auto it = j.find("qkv_attn_only"); it != j.end()) {
    if (!it->is_boolean()) wrong_type(where, "qkv_attn_only", "a boolean", *it);
    c.attn_only = it->get<bool>();
  }
  c.validate(where);
  return c;
}

json config_to_json(const GPT2Config& c) {
  json j;
  j["model_type"] = "gpt2";
  j["architectures"] = json::array({"GPT2LMHeadModel"});
  j["vocab_size"] = c.vocab_size;
  j["n_positions"] = c.n_positions;
  j["n_ctx"] = c.n_positions;
  j["n_embd"] = c.n_embd;
  j["n_layer"] = c.n_layer;
  j["n_head"] = c.n_head;
  j["n_inner"] = c.n_inner > 0 ? json(c.n_inner) : json(nullptr);
  j["layer_norm_epsilon"] = c.layer_norm_epsilon;
  j["activation_function"] = "gelu_new";
  j["qkv_attn_only"] = c.attn_only;
  return j;
}

GPT2Config read_config_json(const std::string& path) {
  const MappedFile file = MappedFile::open(path);
  const char* p = reinterpret_cast<const char*>(file.data());
  json j;
  try {
    j = json::parse(p, p + file.size());
  } catch (const json::exception& e) {
    data_error(path + ": not valid JSON: " + e.what());
  }
  return config_from_json(j, path);
}

void write_config_json(const std::string& path, const GPT2Config& config) {
  write_file_atomic(path, config_to_json(config).dump(2) + "\n");
}

}  // namespace qkv::io
