// Gradients with respect to activations for Python (qkv.Model.run_with_cache(incl_bwd=True)): the metric
// from its Python description, one training forward and backward (include/qkv/lm_grad.hpp) with the GIL
// released, each gradient moved into the array that owns it.
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include "py_model.hpp"

namespace qkv_py {
namespace {

// f(logits as an array of `shape`) -> (value, dvalue/dlogits of the same shape), the gradient copied into dl.
double call_metric(const py::object& fn, const std::vector<float>& logits, const std::vector<int64_t>& shape,
                   std::vector<float>& dl) {
  py::gil_scoped_acquire gil;
  py::array_t<float> arr(shape);
  std::copy(logits.begin(), logits.end(), arr.mutable_data());
  py::object r = fn(arr);
  if (!py::isinstance<py::tuple>(r) || py::len(r) != 2)
    qkv::usage_error("metric: a callable metric returns (value, dvalue_dlogits), got " +
                     std::string(py::str(r.get_type().attr("__name__"))));
  const double value = py::cast<double>(r.cast<py::tuple>()[0]);
  auto g = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(r.cast<py::tuple>()[1]);
  if (!g) throw py::error_already_set();
  const std::vector<int64_t> got(g.shape(), g.shape() + g.ndim());
  if (got != shape)
    qkv::usage_error("metric: dvalue_dlogits has shape " + qkv::shape_string(got) + ", expected " +
                     qkv::shape_string(shape));
  std::copy_n(g.data(), size_t(arr.size()), dl.data());
  return value;
}

// A metric from Python: ("logit_diff", answer, wrong, position), ("loss", positions or None) or
// ("callable", f) with f(logits float32 [T, V]) -> (value, dvalue/dlogits [T, V]).
qkv::LogitMetric metric_of(const py::tuple& spec, const std::vector<int>& ids) {
  const std::string kind = spec[0].cast<std::string>();
  if (kind == "logit_diff")
    return qkv::logit_diff_metric(spec[1].cast<int>(), spec[2].cast<int>(), spec[3].cast<int>());
  if (kind == "loss")
    return qkv::next_token_loss_metric(ids, spec[1].is_none() ? std::vector<int>{} : spec[1].cast<std::vector<int>>());
  if (kind != "callable") qkv::usage_error("metric: unknown kind '" + kind + "'");
  py::object fn = spec[1];
  qkv::LogitMetric m;
  m.description = "a Python metric";
  m.fn = [fn](const std::vector<float>& logits, int T, int V, std::vector<float>& dl) {
    return call_metric(fn, logits, {T, V}, dl);
  };
  return m;
}

// A callable metric of a batch's logits [B, T, V] (padding rows 0), as run_with_grads_batch takes it.
qkv::BatchLogitMetric batch_callable(py::object fn) {
  return [fn](const std::vector<float>& logits, int B, int T, int V, std::vector<float>& dl) {
    return call_metric(fn, logits, {B, T, V}, dl);
  };
}

// (value, logits of the training forward, {hook name: gradient}, (training forward s, backward s)) for the
// hooks in `names` (None: all; the seconds are 0 for a batch); a batch
// [B, T] (with its mask) runs each sequence's real tokens by themselves, the built-in metrics per sequence
// (summed), a callable on the whole [B, T, V].
py::tuple grads(const ModelPtr& m, const py::array_t<int64_t, py::array::c_style | py::array::forcecast>& tokens,
                const py::tuple& spec, const std::optional<std::vector<std::string>>& names,
                const std::optional<py::array>& mask) {
  const Tokens tk = tokens_from(tokens, mask);
  const std::vector<int>& ids = tk.ids;
  std::set<std::string> keep;
  if (names)
    for (const auto& n : *names) {
      if (n != "logits" && !m->hook_set.count(n))
        qkv::usage_error("names: '" + n + "' is not a hook point of this model (model.hook_names lists them)");
      keep.insert(n);
    }
  const bool callable = spec[0].cast<std::string>() == "callable";
  qkv::GradRun r;
  if (tk.batch) {
    std::function<qkv::LogitMetric(const std::vector<int>&)> per_seq;
    qkv::BatchLogitMetric whole;
    if (callable) whole = batch_callable(spec[1]);
    else per_seq = [&spec](const std::vector<int>& seq) {
      py::gil_scoped_acquire gil;
      return metric_of(spec, seq);
    };
    const qkv::LmParams& params = m->grad_params();
    py::gil_scoped_release nogil;
    std::function<bool(const std::string&)> pred;
    if (names) pred = [&](const std::string& n) { return keep.count(n) > 0; };
    r = qkv::run_with_grads_batch(params, ids, tk.batch, tk.mask, per_seq, whole, pred);
  } else {
    const qkv::LogitMetric metric = metric_of(spec, ids);
    const qkv::LmParams& params = m->grad_params();
    py::gil_scoped_release nogil;
    std::function<bool(const std::string&)> pred;
    if (names) pred = [&](const std::string& n) { return keep.count(n) > 0; };
    r = qkv::run_with_grads(params, ids, metric, pred);
  }
  py::dict out;
  for (auto& [name, t] : r.grads) out[py::str(name)] = adopt(std::move(t));
  qkv::Tensor logits(tk.shape({int64_t(m->lm.arch.vocab_size)}));
  std::copy(r.logits.begin(), r.logits.end(), logits.data());
  return py::make_tuple(r.value, adopt(std::move(logits)), out, py::make_tuple(r.forward_seconds, r.backward_seconds));
}

}  // namespace

void bind_grad(py::module_& mod) {
  mod.def("grads", &grads, py::arg("model"), py::arg("tokens"), py::arg("metric"), py::arg("names") = py::none(),
          py::arg("mask") = py::none(),
          "(value, logits, {hook: ∂metric/∂activation}, (forward s, backward s)) from one training forward and backward (see "
          "qkv.Model.run_with_cache's incl_bwd).");
}

}  // namespace qkv_py
