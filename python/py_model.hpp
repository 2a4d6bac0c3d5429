// What the binding's files share (module.cpp, weights.cpp, grad.cpp): the loaded model as Python holds it,
// and the conversions between the engine's values and Python's. Everything is inline: one header, no
// library of its own.
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstring>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/error.hpp"
#include "qkv/lm.hpp"
#include "qkv/lm_grad.hpp"
#include "qkv/lm_train.hpp"
#include "qkv/model_files.hpp"
#include "qkv/tokenizer.hpp"

namespace qkv_py {

namespace py = pybind11;

// ---- conversions -----------------------------------------------------------------------------------

// UTF-8 that may be cut inside a character (a byte-level token) as str, bad bytes as U+FFFD.
inline py::str lenient_str(const std::string& s) {
  PyObject* o = PyUnicode_DecodeUTF8(s.data(), Py_ssize_t(s.size()), "replace");
  if (!o) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(o);
}

// A JSON document as Python objects; strings whose bytes are not UTF-8 (a byte-level token's label) get U+FFFD,
// as the CLI's --json prints them (error_handler_t::replace).
inline py::object to_py(const nlohmann::json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null: return py::none();
    case nlohmann::json::value_t::boolean: return py::bool_(j.get<bool>());
    case nlohmann::json::value_t::number_integer: return py::int_(j.get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: return py::int_(j.get<uint64_t>());
    case nlohmann::json::value_t::number_float: return py::float_(j.get<double>());
    case nlohmann::json::value_t::string: return lenient_str(j.get_ref<const std::string&>());
    case nlohmann::json::value_t::array: {
      py::list l;
      for (const auto& e : j) l.append(to_py(e));
      return l;
    }
    case nlohmann::json::value_t::object: {
      py::dict d;
      for (auto it = j.begin(); it != j.end(); ++it) d[py::str(it.key())] = to_py(it.value());
      return d;
    }
    default: return py::none();
  }
}

inline std::vector<int> ids_from(const py::array_t<int64_t, py::array::c_style | py::array::forcecast>& a) {
  if (a.ndim() != 1) qkv::usage_error("tokens: expected a 1-D array of token ids, got " + std::to_string(a.ndim()) + " dimensions");
  std::vector<int> ids(size_t(a.shape(0)));
  for (size_t i = 0; i < ids.size(); i++) {
    const int64_t v = a.data()[i];
    if (v < 0 || v > INT32_MAX)
      qkv::usage_error("tokens: id " + std::to_string(v) + " at position " + std::to_string(i) + " is not a token id");
    ids[i] = int(v);
  }
  if (ids.empty()) qkv::usage_error("tokens: no tokens");
  return ids;
}

// Token ids as the engine takes them: one sequence (ids [T], batch 0) or a batch (ids [B, T] row-major,
// batch B) with its attention mask ([B·T] of 0 / 1, or empty: every token real).
struct Tokens {
  std::vector<int> ids;
  int batch = 0, T = 0;
  std::vector<uint8_t> mask;
  // The shape of a per-token array with trailing dims: [T, …] or [B, T, …].
  std::vector<int64_t> shape(std::initializer_list<int64_t> tail) const {
    std::vector<int64_t> s;
    if (batch) s.push_back(batch);
    s.push_back(T);
    s.insert(s.end(), tail);
    return s;
  }
  const std::vector<uint8_t>* mask_ptr() const { return mask.empty() ? nullptr : &mask; }
};

// tokens: int ids [T] (one sequence) or [B, T] (a batch); mask: None, or [B, T] (bool or 0/1) with a batch.
inline Tokens tokens_from(const py::array_t<int64_t, py::array::c_style | py::array::forcecast>& a,
                          const std::optional<py::array>& mask) {
  Tokens t;
  if (a.ndim() == 1) {
    if (mask && !mask->is_none())
      qkv::usage_error("attention_mask: only with a batch of token ids [B, T]");
    t.ids = ids_from(a);
    t.T = int(t.ids.size());
    return t;
  }
  if (a.ndim() != 2)
    qkv::usage_error("tokens: expected token ids [T] or a batch [B, T], got " + std::to_string(a.ndim()) + " dimensions");
  t.batch = int(a.shape(0));
  t.T = int(a.shape(1));
  if (t.batch < 1 || t.T < 1) qkv::usage_error("tokens: an empty batch");
  t.ids.resize(size_t(a.size()));
  for (size_t i = 0; i < t.ids.size(); i++) {
    const int64_t v = a.data()[i];
    if (v < 0 || v > INT32_MAX)
      qkv::usage_error("tokens: id " + std::to_string(v) + " at [" + std::to_string(i / size_t(t.T)) + ", " +
                       std::to_string(i % size_t(t.T)) + "] is not a token id");
    t.ids[i] = int(v);
  }
  if (mask && !mask->is_none()) {
    auto m = py::array_t<uint8_t, py::array::c_style | py::array::forcecast>::ensure(*mask);
    if (!m) throw py::error_already_set();
    if (m.ndim() != 2 || m.shape(0) != a.shape(0) || m.shape(1) != a.shape(1))
      qkv::usage_error("attention_mask: shape " + qkv::shape_string(std::vector<int64_t>(m.shape(), m.shape() + m.ndim())) +
                       " is not the tokens' [" + std::to_string(t.batch) + ", " + std::to_string(t.T) + "]");
    t.mask.assign(m.data(), m.data() + m.size());
    for (auto& x : t.mask) x = x ? 1 : 0;
  }
  return t;
}

inline std::vector<py::ssize_t> shape_of(const std::vector<int64_t>& s) { return {s.begin(), s.end()}; }

// A Tensor moved into the array's owner: no copy.
inline py::array adopt(qkv::Tensor&& t) {
  auto* p = new qkv::Tensor(std::move(t));
  py::capsule owner(p, [](void* v) { delete static_cast<qkv::Tensor*>(v); });
  return py::array_t<float>(shape_of(p->shape()), p->data(), owner);
}

// An array viewing memory of a run, which it keeps alive.
inline py::array view_of(float* data, const std::vector<int64_t>& shape, const std::shared_ptr<qkv::RunState>& st) {
  auto* keep = new std::shared_ptr<qkv::RunState>(st);
  py::capsule owner(keep, [](void* v) { delete static_cast<std::shared_ptr<qkv::RunState>*>(v); });
  return py::array_t<float>(shape_of(shape), data, owner);
}

// ---- the model -------------------------------------------------------------------------------------

struct PyModel {
  std::string path;
  qkv::Model lm;
  std::optional<qkv::Tokenizer> tok;
  std::vector<std::string> hooks;  // hook_names(lm)
  std::set<std::string> hook_set;

  explicit PyModel(const std::optional<std::string>& p) {
    path = p ? *p : qkv::default_model_path();
    if (path.empty()) qkv::usage_error("qkv.load: no path given, no bundled model was found and $QKV_MODEL is not set");
    lm = qkv::load_lm(path);
    tok = qkv::tokenizer_for_model(path);
    if (tok && tok->vocab_size() > lm.arch.vocab_size)
      qkv::data_error(path + ": tokenizer has " + std::to_string(tok->vocab_size()) +
                      " tokens but the model's vocab_size is " + std::to_string(lm.arch.vocab_size));
    hooks = qkv::hook_names(lm);
    hook_set = {hooks.begin(), hooks.end()};
  }

  // The weights as one flat float32 buffer for the training forward and backward (gradients), made on
  // first use and kept: a second copy of the weights beside the checkpoint's mapping.
  const qkv::LmParams& grad_params() {
    std::lock_guard<std::mutex> lock(flat_mu);
    if (!flat) flat = std::make_shared<const qkv::LmParams>(qkv::grad_params(lm));
    return *flat;
  }
  std::shared_ptr<const qkv::LmParams> flat;
  std::mutex flat_mu;

  const qkv::Tokenizer* tokenizer() const { return tok ? &*tok : nullptr; }
  const qkv::Tokenizer& need_tokenizer() const {
    if (!tok) qkv::usage_error(path + " has no tokenizer beside it (vocab.json + merges.txt); give token ids instead of text");
    return *tok;
  }
  std::vector<std::string> labels(const std::vector<int>& ids) const {
    std::vector<std::string> out;
    for (int id : ids) out.push_back(tok && id < tok->vocab_size() ? qkv::token_label(*tok, id) : "#" + std::to_string(id));
    return out;
  }
};

using ModelPtr = std::shared_ptr<PyModel>;

// The bindings other files add to the module (each file one subject).
void bind_weights(py::module_& mod);  // weights.cpp: W_Q … b_U, state_dict
void bind_grad(py::module_& mod);     // grad.cpp: gradients with respect to activations
void bind_patch(py::module_& mod);    // patch.cpp: activation, attribution and path patching
void bind_research(py::module_& mod);  // research.cpp: direct logit attribution, corpus sweeps
void bind_safetensors(py::module_& mod);  // safetensors.cpp: read and write safetensors files (SAEs)

}  // namespace qkv_py
