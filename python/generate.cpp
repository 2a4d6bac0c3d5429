// Generation and steering vectors for Python (qkv/__init__.py's Model.generate and qkv.steering_vector):
// the engine's generate() with Python hooks called at every step, the GIL released while it computes.
#include "qkv/generate.hpp"

#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstring>
#include <map>

#include "generate_binding.hpp"
#include "qkv/analysis/steer.hpp"
#include "qkv/error.hpp"

namespace py = pybind11;

void call_python_hooks(const std::vector<py::object>& fns, const py::object& act, float* buf, const std::string& name,
                       const std::vector<int64_t>& shape) {
  int64_t numel = 1;
  for (int64_t x : shape) numel *= x;
  const py::str pyname(name);
  for (const py::object& fn : fns) {
    py::object r = fn(act, pyname);
    if (r.is_none() || r.is(act)) continue;
    auto rep = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(r);
    if (!rep) throw py::error_already_set();
    std::vector<int64_t> got(rep.shape(), rep.shape() + rep.ndim());
    if (got != shape)
      qkv::usage_error("fwd_hooks: the hook for '" + name + "' returned shape " + qkv::shape_string(got) +
                       ", expected " + qkv::shape_string(shape));
    std::memmove(buf, rep.data(), size_t(numel) * sizeof(float));
  }
}

namespace {

using IdArray = py::array_t<int64_t, py::array::c_style | py::array::forcecast>;

std::vector<int> ids_of(const IdArray& a, const char* what) {
  if (a.ndim() != 1) qkv::usage_error(std::string(what) + ": expected a 1-D array of token ids");
  std::vector<int> ids(size_t(a.shape(0)));
  for (size_t i = 0; i < ids.size(); i++) {
    const int64_t v = a.data()[i];
    if (v < 0 || v > INT32_MAX)
      qkv::usage_error(std::string(what) + ": id " + std::to_string(v) + " at position " + std::to_string(i) +
                       " is not a token id");
    ids[i] = int(v);
  }
  if (ids.empty()) qkv::usage_error(std::string(what) + ": no tokens");
  return ids;
}

py::str lenient(const std::string& s) {
  PyObject* o = PyUnicode_DecodeUTF8(s.data(), Py_ssize_t(s.size()), "replace");
  if (!o) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(o);
}

// Python hooks for every step: fn(activation, name) gets a float32 array that owns a copy of the step's
// activation (the engine's buffers grow from step to step, so a view could dangle once kept); what the
// hook writes into it, or returns in its place (same shape), goes back into the forward.
qkv::Hooks python_hooks(const std::map<std::string, std::vector<py::object>>& by_name) {
  qkv::Hooks h;
  h.wants = [&by_name](const std::string& n) { return by_name.count(n) > 0; };
  h.fn = [&by_name](const std::string& n, qkv::ActView v) {
    py::gil_scoped_acquire gil;
    py::array_t<float> act(std::vector<py::ssize_t>(v.shape.begin(), v.shape.end()));
    float* buf = act.mutable_data();
    std::memcpy(buf, v.data, size_t(v.numel()) * sizeof(float));
    call_python_hooks(by_name.at(n), act, buf, n, v.shape);
    std::memcpy(v.data, buf, size_t(v.numel()) * sizeof(float));
  };
  return h;
}

using HookList = std::vector<std::pair<std::string, py::object>>;
using SteerList =
    std::vector<std::tuple<std::string, py::array_t<float, py::array::c_style | py::array::forcecast>, double>>;

// The hooks by name, checked (an unknown hook point or something not callable: qkv.Error).
std::map<std::string, std::vector<py::object>> hooks_by_name(const ModelRef& m, const HookList& hooks) {
  std::map<std::string, std::vector<py::object>> by_name;
  for (const auto& [n, fn] : hooks) {
    if (!m.hooks->count(n))
      qkv::usage_error("fwd_hooks: '" + n +
                       "' is not a hook point of this model (model.hook_names lists them)");
    if (!PyCallable_Check(fn.ptr())) qkv::usage_error("fwd_hooks: the hook for '" + n + "' is not callable");
    by_name[n].push_back(fn);
  }
  return by_name;
}

// Everything generate() takes but the hooks, as Model.generate's arguments say.
qkv::GenerateOptions options_of(const ModelRef& m, int max_new_tokens, double temperature, int top_k, double top_p,
                                uint64_t seed, const SteerList& steer, bool stop_at_eos) {
  qkv::GenerateOptions o;
  o.max_new_tokens = max_new_tokens;
  o.sampling = {temperature, top_k, top_p, seed};
  for (const auto& [hook, vec, coef] : steer)
    o.steer.push_back({hook, std::vector<float>(vec.data(), vec.data() + vec.size()), float(coef),
                       "steer[" + std::to_string(o.steer.size()) + "] (" + hook + ")"});
  if (stop_at_eos && m.tok && m.tok->eos_id() >= 0) o.stop_ids.push_back(m.tok->eos_id());
  return o;
}

// `qkv generate --json`'s dict for one sequence's result.
py::dict result_dict(const ModelRef& m, const std::vector<int>& prompt, const qkv::GenerateResult& r) {
  py::dict out;
  out["tokens"] = py::array_t<int32_t>(py::ssize_t(r.tokens.size()), r.tokens.data());
  if (m.tok) {  // the new text, decoded after the prompt (a Metaspace tokenizer keeps the first word's space)
    std::vector<int> shown = r.tokens;
    if (r.stop_reason == "stop_id") shown.pop_back();
    out["text"] = lenient(m.tok->decode_after(prompt, shown));
  } else {
    out["text"] = py::none();
  }
  out["stop_reason"] = r.stop_reason == "stop_id" ? "eos" : r.stop_reason;
  out["prompt_tokens"] = prompt.size();
  out["prefill_ms"] = r.prefill_ms;
  out["decode_ms"] = r.decode_ms;
  out["tokens_per_second"] = r.tokens_per_second();
  return out;
}

// Model.generate of a batch: ids [B, T] (mask [B, T] of 1 real / 0 padding, or None) unpadded and generated
// together (generate_batch); one dict per row, each with the batch's "batch_tokens_per_second".
py::list generate_batch_py(const ModelRef& m, const IdArray& tokens, const py::object& mask, int max_new_tokens,
                           double temperature, int top_k, double top_p, const std::vector<uint64_t>& seeds,
                           const HookList& hooks, const SteerList& steer, bool stop_at_eos) {
  if (tokens.ndim() != 2) qkv::usage_error("tokens: expected ids [B, T]");
  const int B = int(tokens.shape(0));
  std::vector<int> flat;
  for (py::ssize_t i = 0; i < tokens.size(); i++) {
    const int64_t v = tokens.data()[i];
    if (v < 0 || v > INT32_MAX)
      qkv::usage_error("tokens: id " + std::to_string(v) + " at [" + std::to_string(i / tokens.shape(1)) + ", " +
                       std::to_string(i % tokens.shape(1)) + "] is not a token id");
    flat.push_back(int(v));
  }
  std::vector<uint8_t> mk;
  if (!mask.is_none()) {
    auto a = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(mask);
    if (!a) throw py::error_already_set();
    if (a.ndim() != 2 || a.shape(0) != tokens.shape(0) || a.shape(1) != tokens.shape(1))
      qkv::usage_error("attention_mask: shape " + qkv::shape_string(std::vector<int64_t>(a.shape(), a.shape() + a.ndim())) +
                       ", but the tokens are " + qkv::shape_string(std::vector<int64_t>(tokens.shape(), tokens.shape() + 2)));
    for (py::ssize_t i = 0; i < a.size(); i++) {
      if (a.data()[i] != 0 && a.data()[i] != 1) qkv::usage_error("attention_mask: values must be 0 or 1");
      mk.push_back(uint8_t(a.data()[i]));
    }
  }
  const std::vector<std::vector<int>> prompts = qkv::unpad_batch(flat, B, mk);
  const auto by_name = hooks_by_name(m, hooks);
  qkv::GenerateOptions o = options_of(m, max_new_tokens, temperature, top_k, top_p, 0, steer, stop_at_eos);
  const qkv::Hooks h = python_hooks(by_name);
  if (!by_name.empty()) o.hooks = &h;
  std::vector<uint64_t> sd = seeds;
  if (sd.size() == 1) sd.assign(prompts.size(), seeds[0]);
  if (sd.size() != prompts.size())
    qkv::usage_error("seed: " + std::to_string(seeds.size()) + " seeds for " + std::to_string(prompts.size()) +
                     " prompts (one for all, or one per prompt)");
  qkv::BatchGenerateResult r;
  {
    py::gil_scoped_release nogil;
    r = qkv::generate_batch(*m.lm, prompts, o, sd);
  }
  py::list out;
  for (size_t b = 0; b < prompts.size(); b++) {
    py::dict d = result_dict(m, prompts[b], r.seqs[b]);
    d["batch_tokens_per_second"] = r.tokens_per_second();
    out.append(d);
  }
  return out;
}

py::dict generate_py(const ModelRef& m, const IdArray& tokens, int max_new_tokens, double temperature, int top_k,
                     double top_p, uint64_t seed, const HookList& hooks, const SteerList& steer, bool stop_at_eos) {
  const std::vector<int> prompt = ids_of(tokens, "tokens");
  const auto by_name = hooks_by_name(m, hooks);
  qkv::GenerateOptions o = options_of(m, max_new_tokens, temperature, top_k, top_p, seed, steer, stop_at_eos);
  const qkv::Hooks h = python_hooks(by_name);
  if (!by_name.empty()) o.hooks = &h;
  qkv::GenerateResult r;
  {
    py::gil_scoped_release nogil;
    r = qkv::generate(*m.lm, prompt, o);
  }
  return result_dict(m, prompt, r);
}

// One side's texts: a str is tokenized (a BOS the tokenizer adds is left out of the mean), ids are used
// whole.
std::vector<qkv::analysis::SteerText> steer_texts(const ModelRef& m, const py::list& items,
                                                  const char* side) {
  std::vector<qkv::analysis::SteerText> out;
  for (const py::handle& it : items) {
    if (py::isinstance<py::str>(it)) {
      if (!m.tok)
        qkv::usage_error(std::string(side) + ": the model has no tokenizer; give token ids instead of text");
      qkv::analysis::SteerText t{m.tok->encode(it.cast<std::string>()), 0};
      if (t.ids.empty()) qkv::usage_error(std::string(side) + ": a text is empty after tokenization");
      t.from = m.tok->adds_bos() && t.ids[0] == m.tok->bos_id() ? 1 : 0;
      out.push_back(std::move(t));
    } else {
      out.push_back({ids_of(IdArray::ensure(it), side), 0});
    }
  }
  return out;
}

}  // namespace

void bind_generate(py::module_& mod, std::function<ModelRef(py::handle)> model_of) {
  mod.def(
      "generate",
      [model_of](
          py::handle model, const IdArray& tokens, int max_new_tokens, double temperature, int top_k,
          double top_p, uint64_t seed, const std::vector<std::pair<std::string, py::object>>& hooks,
          const std::vector<std::tuple<
              std::string, py::array_t<float, py::array::c_style | py::array::forcecast>, double>>& steer,
          bool stop_at_eos) {
        return generate_py(model_of(model), tokens, max_new_tokens, temperature, top_k, top_p, seed, hooks,
                           steer, stop_at_eos);
      },
      py::arg("model"), py::arg("tokens"), py::arg("max_new_tokens"), py::arg("temperature"),
      py::arg("top_k"), py::arg("top_p"), py::arg("seed"), py::arg("hooks"), py::arg("steer"),
      py::arg("stop_at_eos"),
      "generate() of the engine (see qkv.Model.generate): a dict like `qkv generate --json`.");
  mod.def(
      "generate_batch",
      [model_of](py::handle model, const IdArray& tokens, const py::object& mask, int max_new_tokens,
                 double temperature, int top_k, double top_p, const std::vector<uint64_t>& seeds,
                 const HookList& hooks, const SteerList& steer, bool stop_at_eos) {
        return generate_batch_py(model_of(model), tokens, mask, max_new_tokens, temperature, top_k, top_p, seeds,
                                 hooks, steer, stop_at_eos);
      },
      py::arg("model"), py::arg("tokens"), py::arg("attention_mask"), py::arg("max_new_tokens"),
      py::arg("temperature"), py::arg("top_k"), py::arg("top_p"), py::arg("seeds"), py::arg("hooks"),
      py::arg("steer"), py::arg("stop_at_eos"),
      "generate_batch() of the engine (see qkv.Model.generate): ids [B, T] and a mask, one dict per row.");
  mod.def(
      "steering_vector",
      [model_of](py::handle model, const std::string& hook, const py::list& positive,
                 const py::list& negative) {
        const ModelRef m = model_of(model);
        const auto pos = steer_texts(m, positive, "positive"), neg = steer_texts(m, negative, "negative");
        std::vector<float> v;
        {
          py::gil_scoped_release nogil;
          v = qkv::analysis::steering_vector(*m.lm, hook, pos, neg);
        }
        return py::array_t<float>(py::ssize_t(v.size()), v.data());
      },
      py::arg("model"), py::arg("hook"), py::arg("positive"), py::arg("negative"),
      "`qkv steer`'s vector as float32 [width] (see qkv.steering_vector).");
}
