// qkv._qkv: the engine for Python (pybind11). The public API and its docstrings live in qkv/__init__.py,
// which wraps these functions; this file converts arguments, releases the GIL around every computation,
// and hands the engine's buffers to NumPy without copying where they can outlive the call:
//   run_with_cache  each cached Tensor is moved into a capsule that the array keeps alive;
//   run / hooks     arrays view the run's RunState, kept alive (shared_ptr) by every array that views it.
// qkv::Error becomes qkv.Error (a ValueError) with the CLI's message and `exit_code` (1 data, 2 usage).
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>

#include "generate_binding.hpp"
#include "qkv/analysis/head_weights.hpp"
#include "qkv/analysis/tour.hpp"
#include "qkv/error.hpp"
#include "qkv/lm.hpp"
#include "qkv/model_files.hpp"
#include "qkv/report/experiments_json.hpp"
#include "qkv/report/svg.hpp"
#include "qkv/report/tour_report.hpp"
#include "py_model.hpp"

namespace py = pybind11;
namespace an = qkv::analysis;

namespace {

using namespace qkv_py;

py::array run_plain(PyModel& m, const py::array_t<int64_t, py::array::c_style | py::array::forcecast>& tokens,
                    const std::optional<py::array>& mask) {
  const Tokens tk = tokens_from(tokens, mask);
  auto st = std::make_shared<qkv::RunState>();
  qkv::RunOptions opt;
  opt.batch = tk.batch;
  opt.attention_mask = tk.mask_ptr();
  const std::vector<float>* logits;
  {
    py::gil_scoped_release nogil;
    logits = &qkv::run(m.lm, tk.ids, *st, opt);
  }
  return view_of(const_cast<float*>(logits->data()), tk.shape({int64_t(m.lm.arch.vocab_size)}), st);
}

// names: the hook names to keep (None: all, and "logits"); the engine computes nothing else into memory.
py::tuple run_cache(PyModel& m, const py::array_t<int64_t, py::array::c_style | py::array::forcecast>& tokens,
                   const std::optional<std::vector<std::string>>& names, bool materialise_all,
                   const std::optional<py::array>& mask) {
  const Tokens tk = tokens_from(tokens, mask);
  std::set<std::string> keep;
  if (names)
    for (const auto& n : *names) {
      if (n != "logits" && !m.hook_set.count(n))
        qkv::usage_error("names: '" + n + "' is not a hook point of this model (model.hook_names lists them)");
      keep.insert(n);
    }
  std::map<std::string, qkv::Tensor> cache;
  {
    py::gil_scoped_release nogil;
    std::function<bool(const std::string&)> pred;
    if (names) pred = [&](const std::string& n) { return keep.count(n) > 0; };
    cache = tk.batch ? qkv::run_with_cache_batch(m.lm, tk.ids, tk.batch, tk.mask, pred, materialise_all)
                     : qkv::run_with_cache(m.lm, tk.ids, pred, materialise_all);
  }
  // The logits always come back (the forward computes them anyway); in the dict only when asked for.
  auto it = cache.find("logits");
  if (it == cache.end()) qkv::data_error("run_with_cache: the engine returned no logits");
  py::array logits = adopt(std::move(it->second));
  cache.erase(it);
  py::dict out;
  for (auto& [name, t] : cache)
    if (!names || keep.count(name)) out[py::str(name)] = adopt(std::move(t));
  if (!names || keep.count("logits")) out["logits"] = logits;
  return py::make_tuple(logits, out);
}

// Whether [p, p + n) lies inside one of the run's buffers.
bool inside(const qkv::RunState& st, const float* p, int64_t n) {
  for (const std::vector<float>* b :
       {&st.x, &st.u, &st.xin, &st.q, &st.k, &st.v, &st.a, &st.m, &st.g, &st.lse, &st.logits, &st.S, &st.qkv})
    if (!b->empty() && p >= b->data() && p + n <= b->data() + b->size()) return true;
  return false;
}

// hooks: (name, fn) pairs; fn(activation, name) edits the engine's buffer in place or returns a replacement.
py::array run_hooks(PyModel& m, const py::array_t<int64_t, py::array::c_style | py::array::forcecast>& tokens,
                    const std::vector<std::pair<std::string, py::object>>& hooks, const std::optional<py::array>& mask) {
  const Tokens tk = tokens_from(tokens, mask);
  std::map<std::string, std::vector<py::object>> by_name;
  for (const auto& [n, fn] : hooks) {
    if (!m.hook_set.count(n))
      qkv::usage_error("fwd_hooks: '" + n + "' is not a hook point of this model (model.hook_names lists them)");
    if (!PyCallable_Check(fn.ptr())) qkv::usage_error("fwd_hooks: the hook for '" + n + "' is not callable");
    by_name[n].push_back(fn);
  }
  auto st = std::make_shared<qkv::RunState>();
  qkv::Hooks h;
  h.wants = [&](const std::string& n) { return by_name.count(n) > 0; };
  h.fn = [&](const std::string& n, qkv::ActView v) {
    py::gil_scoped_acquire gil;
    // The engine's own buffer (RunState) is handed out as is; a temporary it made for this call (q, k, v
    // in [T, H, dh] order) would dangle if the hook kept the array, so that one comes as an owned copy
    // whose edits are written back.
    const bool in_state = inside(*st, v.data, v.numel());
    py::array act = in_state ? view_of(v.data, v.shape, st) : adopt([&] {
      qkv::Tensor t(v.shape);
      std::memcpy(t.data(), v.data, size_t(v.numel()) * sizeof(float));
      return t;
    }());
    float* buf = static_cast<float*>(act.mutable_data());
    call_python_hooks(by_name.at(n), act, buf, n, v.shape);
    if (!in_state) std::memcpy(v.data, buf, size_t(v.numel()) * sizeof(float));
  };
  qkv::RunOptions opt;
  opt.hooks = &h;
  opt.batch = tk.batch;
  opt.attention_mask = tk.mask_ptr();
  const std::vector<float>* logits;
  {
    py::gil_scoped_release nogil;
    logits = &qkv::run(m.lm, tk.ids, *st, opt);
  }
  return view_of(const_cast<float*>(logits->data()), tk.shape({int64_t(m.lm.arch.vocab_size)}), st);
}

// The C++ side of examples/bench_cache.py: seconds of each of `reps` calls of qkv::run_with_cache (every
// hook point kept), with nothing of Python in the loop.
std::vector<double> time_cache(PyModel& m, const py::array_t<int64_t, py::array::c_style | py::array::forcecast>& tokens,
                               int reps) {
  const std::vector<int> ids = ids_from(tokens);
  std::vector<double> out;
  py::gil_scoped_release nogil;
  for (int r = 0; r < reps; r++) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto cache = qkv::run_with_cache(m.lm, ids, nullptr);
    out.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return out;
}

// ---- experiments (every family, the CLI's JSON) --------------------------------------------------------

std::vector<int> opt_ids(const std::optional<py::array_t<int64_t, py::array::c_style | py::array::forcecast>>& t) {
  return t ? ids_from(*t) : std::vector<int>{};
}
using OptIds = std::optional<py::array_t<int64_t, py::array::c_style | py::array::forcecast>>;

py::object exp_project(PyModel& m, int layer, const OptIds& tokens) {
  an::check_layer(m.lm, layer);
  const auto ids = qkv::report::experiment_ids(m.lm.arch, m.tokenizer(), opt_ids(tokens));
  nlohmann::json j;
  {
    py::gil_scoped_release nogil;
    j = qkv::report::project_json(an::project(m.lm, ids, layer));
  }
  return to_py(j);
}

py::object exp_scores(PyModel& m, int layer, int head, const OptIds& tokens) {
  an::check_head(m.lm, layer, head);
  const auto ids = qkv::report::experiment_ids(m.lm.arch, m.tokenizer(), opt_ids(tokens));
  nlohmann::json j;
  {
    py::gil_scoped_release nogil;
    j = qkv::report::scores_json(an::score_asymmetry(m.lm, ids, layer, head), m.labels(ids));
  }
  return to_py(j);
}

py::object exp_swap(PyModel& m, int layer, int head, const OptIds& tokens) {
  an::check_head(m.lm, layer, head);
  const auto ids = qkv::report::experiment_ids(m.lm.arch, m.tokenizer(), opt_ids(tokens));
  nlohmann::json j;
  {
    py::gil_scoped_release nogil;
    j = qkv::report::swap_json(an::swap_query_key(m.lm, ids, layer, head));
  }
  return to_py(j);
}

py::object exp_heads(PyModel& m, int seq_len, int batch, uint64_t seed, int bos, const OptIds& tokens) {
  if (batch < 1) qkv::usage_error("batch: " + std::to_string(batch) + " must be at least 1");
  const qkv::Arch& c = m.lm.arch;
  const int n = qkv::report::repeated_length(c, seq_len, bos, 1);
  const std::vector<int> text = opt_ids(tokens);
  nlohmann::json j;
  {
    py::gil_scoped_release nogil;
    const auto seqs = an::repeated_random_tokens(c.vocab_size, n, batch, seed, bos);
    j = qkv::report::heads_json(an::scan_heads(m.lm, seqs, n, bos, text), n, batch, seed, bos);
  }
  return to_py(j);
}

py::object exp_ablate(PyModel& m, int layer, int head, int seq_len, int batch, uint64_t seed, int bos) {
  an::check_head(m.lm, layer, head);
  if (batch < 1) qkv::usage_error("batch: " + std::to_string(batch) + " must be at least 1");
  const qkv::Arch& c = m.lm.arch;
  const int n = qkv::report::repeated_length(c, seq_len, bos, 2);
  nlohmann::json j;
  {
    py::gil_scoped_release nogil;
    const auto seqs = an::repeated_random_tokens(c.vocab_size, n, batch, seed, bos);
    j = qkv::report::ablate_json(an::ablate_head(m.lm, seqs, n, bos, layer, head), seed);
  }
  return to_py(j);
}

py::object exp_circuits(PyModel& m, bool fold_ln, int samples, uint64_t seed) {
  if (samples < 0) qkv::usage_error("samples: " + std::to_string(samples) + " must be >= 0");
  an::CircuitsOptions o;
  o.fold_ln = fold_ln;
  o.baseline_samples = samples;
  o.seed = seed;
  nlohmann::json j;
  {
    py::gil_scoped_release nogil;
    j = qkv::report::circuits_json(an::circuits(m.lm, o));
  }
  return to_py(j);
}

py::object exp_tour(PyModel& m, const OptIds& tokens, const std::string& text, const std::optional<std::string>& out,
                    int seq_len, int batch, uint64_t seed, int bos, const std::optional<py::function>& progress) {
  if (batch < 1) qkv::usage_error("batch: " + std::to_string(batch) + " must be at least 1");
  an::TourInput in = an::tour_input(m.lm.arch, m.tokenizer(), opt_ids(tokens), text, bos, seq_len, batch, seed);
  if (progress)
    in.options.progress = [&progress](int i, int total, const std::string& what) {
      py::gil_scoped_acquire gil;
      (*progress)(i, total, what);
    };
  const qkv::report::TourReportInfo info{m.path, in.labels, in.text};
  nlohmann::json j;
  {
    py::gil_scoped_release nogil;
    const an::TourResult r = an::tour(m.lm, in.options);
    const std::string html = out ? qkv::report::write_tour_report(r, info, *out) : "";
    j = qkv::report::tour_json(r, info, html);
  }
  return to_py(j);
}

// ---- pictures --------------------------------------------------------------------------------------

qkv::report::ColorScale scale_of(const std::string& s) {
  if (s == "auto") return qkv::report::ColorScale::Auto;
  if (s == "sequential") return qkv::report::ColorScale::Sequential;
  if (s == "diverging") return qkv::report::ColorScale::Diverging;
  qkv::usage_error("scale: '" + s + "' is not one of auto, sequential, diverging");
}

void fill_spec(qkv::report::HeatmapSpec& s, const py::array_t<double, py::array::c_style | py::array::forcecast>& v) {
  if (v.ndim() != 2) qkv::usage_error("heatmap: expected a 2-D array, got " + std::to_string(v.ndim()) + " dimensions");
  s.rows = size_t(v.shape(0));
  s.cols = size_t(v.shape(1));
  s.values.assign(v.data(), v.data() + v.size());
}

std::string heatmap(const py::array_t<double, py::array::c_style | py::array::forcecast>& v,
                    const std::vector<std::string>& row_labels, const std::vector<std::string>& col_labels,
                    const std::string& title, const std::string& row_title, const std::string& col_title,
                    const std::string& value_label, const std::string& scale) {
  qkv::report::HeatmapSpec s;
  fill_spec(s, v);
  s.row_labels = row_labels;
  s.col_labels = col_labels;
  s.title = title;
  s.row_title = row_title;
  s.col_title = col_title;
  s.value_label = value_label;
  s.scale = scale_of(scale);
  return qkv::report::heatmap_svg(s);
}

std::string grid(const py::array_t<double, py::array::c_style | py::array::forcecast>& v,
                 const std::vector<std::string>& titles, const std::string& title, const std::string& value_label,
                 const std::string& scale) {
  if (v.ndim() != 3) qkv::usage_error("grid: expected a 3-D array [panels, rows, cols]");
  qkv::report::GridSpec g;
  g.title = title;
  g.value_label = value_label;
  g.scale = scale_of(scale);
  const size_t P = size_t(v.shape(0)), R = size_t(v.shape(1)), C = size_t(v.shape(2));
  for (size_t p = 0; p < P; p++) {
    qkv::report::HeatmapSpec s;
    s.rows = R;
    s.cols = C;
    s.values.assign(v.data() + p * R * C, v.data() + (p + 1) * R * C);
    s.title = p < titles.size() ? titles[p] : "";
    g.panels.push_back(std::move(s));
  }
  return qkv::report::grid_svg(g);
}

}  // namespace

PYBIND11_MODULE(_qkv, mod) {
  mod.doc() = "qkv's engine (C++). Use the `qkv` package, which wraps this module.";

  static py::exception<qkv::Error> error(mod, "Error", PyExc_ValueError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const qkv::Error& e) {
      py::object inst = py::handle(error.ptr())(py::str(e.what()));
      inst.attr("exit_code") = e.exit_code();
      inst.attr("kind") = e.kind() == qkv::ErrorKind::Usage ? "usage" : "data";
      PyErr_SetObject(error.ptr(), inst.ptr());
    }
  });

  py::class_<PyModel, ModelPtr>(mod, "Model", "A loaded checkpoint (see qkv.load).")
      .def(py::init([](const std::optional<std::string>& path) {
             py::gil_scoped_release nogil;
             return std::make_shared<PyModel>(path);
           }),
           py::arg("path") = py::none(), "Loads a checkpoint (None: the bundled model).")
      .def_readonly("path", &PyModel::path, "The checkpoint path.")
      .def_property_readonly("source", [](const PyModel& m) { return m.lm.source; }, "What was loaded, in words.")
      .def_property_readonly("config", [](const PyModel& m) { return to_py(m.lm.arch.to_json()); },
                             "The architecture as a dict (qkv info's config).")
      .def_property_readonly("num_parameters", [](const PyModel& m) { return m.lm.num_parameters(); },
                             "The parameter count.")
      .def_readonly("hook_names", &PyModel::hooks, "Every hook point, in forward order.")
      .def_property_readonly("has_tokenizer", [](const PyModel& m) { return bool(m.tok); },
                             "Whether a tokenizer sits beside the checkpoint.")
      .def_property_readonly("tokenizer_size", [](const PyModel& m) { return m.tok ? m.tok->vocab_size() : 0; },
                             "The tokenizer's vocabulary size (0 without one).")
      .def("encode",
           [](const PyModel& m, const std::string& text) {
             const std::vector<int> ids = m.need_tokenizer().encode(text);
             return py::array_t<int32_t>(py::ssize_t(ids.size()), ids.data());
           },
           py::arg("text"), "Token ids of a text, int32.")
      .def("token_texts",
           [](const PyModel& m, const std::vector<int>& ids) {
             const qkv::Tokenizer& t = m.need_tokenizer();
             py::list out;
             for (int id : ids) {
               if (id < 0 || id >= t.vocab_size())
                 qkv::usage_error("tokens: id " + std::to_string(id) + " is outside the tokenizer's [0, " +
                                  std::to_string(t.vocab_size()) + ")");
               out.append(lenient_str(t.token_text(id)));
             }
             return out;
           },
           py::arg("ids"), "The text of each token (bytes that are not UTF-8 by themselves as U+FFFD).")
      .def("token_string",
           [](const PyModel& m, int id) {
             const qkv::Tokenizer& t = m.need_tokenizer();
             if (id < 0 || id >= t.vocab_size()) qkv::usage_error("token id " + std::to_string(id) + " is out of range");
             return lenient_str(t.token_string(id));
           },
           py::arg("id"), "The vocabulary string of one token (e.g. 'Ġthe').")
      .def("labels",
           [](const PyModel& m, const std::vector<int>& ids) {
             py::list out;
             for (const auto& s : m.labels(ids)) out.append(lenient_str(s));
             return out;
           },
           py::arg("ids"), "Token labels as the report draws them (␣ for a space; #id without a tokenizer).")
      .def("run", &run_plain, py::arg("tokens"), py::arg("mask") = py::none(),
           "logits [T, vocab] or [B, T, vocab] for a batch (a view of the run's buffer).")
      .def("run_with_cache", &run_cache, py::arg("tokens"), py::arg("names") = py::none(),
           py::arg("materialise_all") = false, py::arg("mask") = py::none(),
           "(logits, cache dict): the kept activations, each array owning the engine's tensor.")
      .def("run_with_hooks", &run_hooks, py::arg("tokens"), py::arg("hooks"), py::arg("mask") = py::none(),
           "logits with Python hooks called on the engine's buffers.");

  qkv_py::bind_weights(mod);
  qkv_py::bind_grad(mod);
  qkv_py::bind_patch(mod);
  qkv_py::bind_research(mod);
  qkv_py::bind_safetensors(mod);
  bind_generate(mod, [](py::handle h) {  // python/generate.cpp: generate, steering_vector
    const PyModel& m = h.cast<const PyModel&>();
    return ModelRef{&m.lm, m.tokenizer(), &m.hook_set};
  });
  mod.def("time_run_with_cache", &time_cache, py::arg("model"), py::arg("tokens"), py::arg("reps"),
          "Seconds of each of `reps` C++ run_with_cache calls (every hook point), for examples/bench_cache.py.");
  mod.def("project", &exp_project, py::arg("model"), py::arg("layer"), py::arg("tokens") = py::none(),
          "`qkv project --json` as a dict (see qkv.project).");
  mod.def("scores", &exp_scores, py::arg("model"), py::arg("layer"), py::arg("head"), py::arg("tokens") = py::none(),
          "`qkv scores --json` as a dict (see qkv.scores).");
  mod.def("swap", &exp_swap, py::arg("model"), py::arg("layer"), py::arg("head"), py::arg("tokens") = py::none(),
          "`qkv swap --json` as a dict (see qkv.swap).");
  mod.def("heads", &exp_heads, py::arg("model"), py::arg("seq_len"), py::arg("batch"), py::arg("seed"), py::arg("bos"),
          py::arg("tokens") = py::none(),
          "`qkv heads --json` as a dict (see qkv.heads).");
  mod.def("ablate", &exp_ablate, py::arg("model"), py::arg("layer"), py::arg("head"), py::arg("seq_len"),
          py::arg("batch"), py::arg("seed"), py::arg("bos"),
          "`qkv ablate --json` as a dict (see qkv.ablate).");
  mod.def("circuits", &exp_circuits, py::arg("model"), py::arg("fold_ln"), py::arg("samples"), py::arg("seed"),
          "`qkv circuits --json` as a dict (see qkv.circuits).");
  mod.def("tour", &exp_tour, py::arg("model"), py::arg("tokens"), py::arg("text"), py::arg("out"), py::arg("seq_len"),
          py::arg("batch"), py::arg("seed"), py::arg("bos"), py::arg("progress"),
          "`qkv tour --json` as a dict (see qkv.tour).");
  mod.def("heatmap_svg", &heatmap, py::arg("values"), py::arg("row_labels"), py::arg("col_labels"), py::arg("title"),
          py::arg("row_title"), py::arg("col_title"), py::arg("value_label"), py::arg("scale"),
          "The report's heatmap (src/report/svg.cpp) of a 2-D array, as an <svg> string.");
  mod.def("grid_svg", &grid, py::arg("values"), py::arg("titles"), py::arg("title"), py::arg("value_label"),
          py::arg("scale"), "The report's grid of small heatmaps of a 3-D array [panels, rows, cols].");
}
