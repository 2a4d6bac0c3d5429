// Activation, attribution and path patching for Python (qkv.patch): the same sweeps and the same JSON
// documents as `qkv patch --hook … --json` and `qkv patch --path … --json` (report/patch_json.hpp), the GIL
// released while the engine runs.
#include <pybind11/stl.h>

#include "py_model.hpp"
#include "qkv/analysis/attribution_patching.hpp"
#include "qkv/report/patch_json.hpp"

namespace qkv_py {
namespace {

namespace an = qkv::analysis;
using Ids = py::array_t<int64_t, py::array::c_style | py::array::forcecast>;

// metric: ("logit_diff", answer, wrong, position) or ("loss", positions) — the loss of the clean input's next
// token at each position, as the CLI's --loss-positions.
an::PatchMetric patch_metric(const py::tuple& spec, const std::vector<int>& clean) {
  an::PatchMetric mt;
  if (spec[0].cast<std::string>() == "logit_diff") {
    mt.kind = an::PatchMetric::Kind::LogitDiff;
    mt.answer = spec[1].cast<int>();
    mt.wrong = spec[2].cast<int>();
    mt.position = spec[3].cast<int>();
    if (mt.position >= int(clean.size()) || mt.position < -1)
      qkv::usage_error("position: " + std::to_string(mt.position) + " is outside [0, " + std::to_string(clean.size()) +
                       ") (-1: the last)");
    return mt;
  }
  mt.kind = an::PatchMetric::Kind::Loss;
  mt.loss_positions = spec[1].cast<std::vector<int>>();
  for (int p : mt.loss_positions) {
    if (p < 0 || p + 1 >= int(clean.size()))
      qkv::usage_error("loss_positions: " + std::to_string(p) + " is outside [0, " + std::to_string(clean.size() - 1) +
                       ") (a loss position predicts the clean input's next token)");
    mt.targets.push_back(clean[size_t(p) + 1]);
  }
  return mt;
}

an::PatchDirection direction_of(const std::string& direction) {
  if (direction == "noising") return an::PatchDirection::Noising;
  if (direction != "denoising") qkv::usage_error("direction: '" + direction + "' is not noising or denoising");
  return an::PatchDirection::Denoising;
}

py::object patch(const ModelPtr& m, const Ids& clean_a, const Ids& corrupt_a, const std::string& hook,
                 const py::tuple& metric_spec, const std::string& direction, bool per_position,
                 const std::string& method) {
  const std::vector<int> clean = ids_from(clean_a), corrupt = ids_from(corrupt_a);
  if (method != "activation" && method != "attribution")
    qkv::usage_error("method: '" + method + "' is not activation or attribution");
  an::SweepOptions o;
  o.hook = hook;
  o.per_position = per_position;
  o.direction = direction_of(direction);
  o.metric = patch_metric(metric_spec, clean);
  const nlohmann::json inputs = {{"clean", clean}, {"corrupt", corrupt}, {"tokens", clean.size()}};
  nlohmann::json j;
  if (method == "attribution") {
    const qkv::LmParams& params = m->grad_params();
    py::gil_scoped_release nogil;
    j = qkv::report::attribution_sweep_json(an::attribution_sweep(m->lm, params, clean, corrupt, o), o.metric, inputs, "");
  } else {
    py::gil_scoped_release nogil;
    j = qkv::report::patch_sweep_json(an::patch_sweep(m->lm, clean, corrupt, o), o.metric, inputs, "");
  }
  return to_py(j);
}

// One path SENDER:RECEIVER:q|k|v, as `qkv patch --path … --json`.
py::object path_patch(const ModelPtr& m, const Ids& clean_a, const Ids& corrupt_a, const std::string& path,
                      const py::tuple& metric_spec, const std::string& direction) {
  const std::vector<int> clean = ids_from(clean_a), corrupt = ids_from(corrupt_a);
  const an::PathSpec spec = an::parse_path_spec("path", path);
  const an::PatchDirection dir = direction_of(direction);
  const an::PatchMetric metric = patch_metric(metric_spec, clean);
  const nlohmann::json inputs = {{"clean", clean}, {"corrupt", corrupt}, {"tokens", clean.size()}};
  nlohmann::json j;
  {
    py::gil_scoped_release nogil;
    j = qkv::report::path_patch_json(an::path_patch(m->lm, clean, corrupt, spec, dir, metric), path, metric, inputs);
  }
  return to_py(j);
}

// Every edge between heads, as `qkv patch --attribution --edges --json`.
py::object edge_attribution(const ModelPtr& m, const Ids& clean_a, const Ids& corrupt_a, const py::tuple& metric_spec,
                            const std::string& direction) {
  const std::vector<int> clean = ids_from(clean_a), corrupt = ids_from(corrupt_a);
  const an::PatchDirection dir = direction_of(direction);
  const an::PatchMetric metric = patch_metric(metric_spec, clean);
  const nlohmann::json inputs = {{"clean", clean}, {"corrupt", corrupt}, {"tokens", clean.size()}};
  const qkv::LmParams& params = m->grad_params();
  nlohmann::json j;
  {
    py::gil_scoped_release nogil;
    j = qkv::report::edge_attribution_json(an::edge_attribution(m->lm, params, clean, corrupt, dir, metric), metric,
                                           inputs);
  }
  return to_py(j);
}

}  // namespace

void bind_patch(py::module_& mod) {
  mod.def("patch", &patch, py::arg("model"), py::arg("clean"), py::arg("corrupt"), py::arg("hook"), py::arg("metric"),
          py::arg("direction"), py::arg("per_position"), py::arg("method"),
          "`qkv patch --hook … --json` (--attribution with method='attribution') as a dict (see qkv.patch).");
  mod.def("path_patch", &path_patch, py::arg("model"), py::arg("clean"), py::arg("corrupt"), py::arg("path"),
          py::arg("metric"), py::arg("direction"), "`qkv patch --path … --json` as a dict (see qkv.patch).");
  mod.def("edge_attribution", &edge_attribution, py::arg("model"), py::arg("clean"), py::arg("corrupt"),
          py::arg("metric"), py::arg("direction"), "`qkv patch --attribution --edges --json` as a dict (see qkv.patch).");
}

}  // namespace qkv_py
