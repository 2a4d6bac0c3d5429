// The family table (family.hpp) and what reads it: config.json -> Arch, the tensor list, `qkv init`'s
// configs, the help lists. The rows live in src/model/families/, one file per family (or per group of
// close relatives); this file only lists them.
#include "qkv/family.hpp"

#include <climits>
#include <cmath>

#include "io/io_util.hpp"
#include "model/families/common.hpp"
#include "qkv/error.hpp"

namespace qkv {

using nlohmann::json;

const std::vector<Family>& families() {
  static const std::vector<Family> rows = {
      family_rows::gpt2(),     family_rows::llama(), family_rows::mistral(),
      family_rows::qwen2(),    family_rows::gemma(), family_rows::gemma2(),
      family_rows::gpt_neox(), family_rows::phi3(),  family_rows::gpt_neo()};
  return rows;
}

std::string family_list() {
  std::string list;
  for (const Family& f : families()) list += (list.empty() ? "" : ", ") + f.model_type;
  return list;
}

const Family& family(const std::string& model_type, const std::string& where) {
  for (const Family& f : families())
    if (f.model_type == model_type) return f;
  data_error(where + ": config key \"model_type\" is \"" + model_type +
             "\", which qkv does not support (supported: " + family_list() + ")");
}

const std::vector<std::string>& supported_model_types() {
  static const std::vector<std::string> types = [] {
    std::vector<std::string> t;
    for (const Family& f : families()) t.push_back(f.model_type);
    return t;
  }();
  return types;
}

// ---- ConfigKeys ----

void ConfigKeys::wrong(const std::string& key, const char* expected, const json& v) const {
  data_error(where + ": config key \"" + key + "\": expected " + expected + ", found " +
             io::detail::describe_json(v));
}

const json* ConfigKeys::find(const std::string& key) const {
  const auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

int ConfigKeys::integer(const std::string& key, int fallback) const {
  const json* v = find(key);
  if (!v) return fallback;
  if (!v->is_number_integer()) wrong(key, "an integer", *v);
  if (v->is_number_unsigned() ? v->get<uint64_t>() > uint64_t(INT_MAX)
                              : (v->get<int64_t>() < INT_MIN || v->get<int64_t>() > INT_MAX))
    wrong(key, "an integer in the 32-bit range", *v);
  return v->get<int>();
}

int ConfigKeys::integer_in(const std::string& key, int fallback, int lo, int hi) const {
  const int v = integer(key, fallback);
  if (v < lo || v > hi)
    data_error(where + ": " + key + " is " + std::to_string(v) + ", expected " + std::to_string(lo) + " .. " +
               std::to_string(hi));
  return v;
}

int ConfigKeys::required_int(const std::string& key) const {
  if (!has(key)) data_error(where + ": config key \"" + key + "\" is missing");
  return integer(key, 0);
}

double ConfigKeys::number(const std::string& key, double fallback) const {
  const json* v = find(key);
  if (!v) return fallback;
  if (!v->is_number()) wrong(key, "a number", *v);
  return v->get<double>();
}

bool ConfigKeys::boolean(const std::string& key, bool fallback) const {
  const json* v = find(key);
  if (!v) return fallback;
  if (!v->is_boolean()) wrong(key, "true or false", *v);
  return v->get<bool>();
}

std::string ConfigKeys::string(const std::string& key, const std::string& fallback) const {
  const json* v = find(key);
  if (!v) return fallback;
  if (!v->is_string()) wrong(key, "a string", *v);
  return v->get<std::string>();
}

// ---- what reads the table ----

Arch arch_from_config(const json& j, const std::string& where) {
  if (!j.is_object())
    data_error(where + ": config: expected a JSON object, found " + io::detail::describe_json(j));
  const ConfigKeys k{j, where};
  const Family& f = family(k.string("model_type", "gpt2"), where);
  Arch a;
  f.read(k, a);
  a.model_type = f.model_type;
  if (const auto it = j.find("architectures");
      it != j.end() && it->is_array() && !it->empty() && (*it)[0].is_string())
    a.architecture = (*it)[0].get<std::string>();
  if (a.attn_scale == 0 && a.dh > 0) a.attn_scale = 1.0 / std::sqrt(double(a.dh));
  if (a.window.empty()) a.window.assign(size_t(std::max(a.n_layer, 0)), 0);
  a.validate(where);
  return a;
}

std::vector<TensorSpec> tensor_table(const Arch& a) {
  TensorList t;
  family(a.model_type, "tensor_table").tensors(a, t);
  return t.specs;
}

json default_config(const std::string& type, const std::string& preset) {
  if (preset != "tiny" && preset != "small")
    usage_error("--preset: expected tiny or small, found '" + preset + "'");
  for (const Family& f : families())
    if (f.model_type == type) return f.default_config(preset == "tiny");
  usage_error("--arch: '" + type + "' is not a family qkv knows (" + family_list() + ")");
}

}  // namespace qkv
