// Direct logit attribution and corpus sweeps for Python (qkv.attribute, qkv.sweep): the same analyses and the
// same JSON documents as `qkv attribute --json` (report/attribute_json.hpp) and `qkv sweep --json`
// (report/sweep_report.hpp, which also writes the sweep's files), the GIL released while the engine runs.
#include <pybind11/stl.h>

#include "py_model.hpp"
#include "qkv/analysis/attribution.hpp"
#include "qkv/analysis/sweep.hpp"
#include "qkv/report/attribute_json.hpp"
#include "qkv/report/sweep_report.hpp"

namespace qkv_py {
namespace {

namespace an = qkv::analysis;
namespace sw = qkv::analysis::sweep;
using Ids = py::array_t<int64_t, py::array::c_style | py::array::forcecast>;

py::object attribute(const ModelPtr& m, const Ids& tokens, int answer, int wrong, int position) {
  const std::vector<int> ids = ids_from(tokens);
  const int V = m->lm.arch.vocab_size;
  for (auto [what, id] : {std::pair{"answer", answer}, std::pair{"wrong", wrong}})
    if (id < 0 || id >= V)
      qkv::usage_error(std::string(what) + ": token " + std::to_string(id) + " is outside the vocabulary [0, " +
                       std::to_string(V) + ")");
  if (position < -1 || position >= int(ids.size()))
    qkv::usage_error("position: " + std::to_string(position) + " is outside [0, " + std::to_string(ids.size()) +
                     ") (-1: the last)");
  nlohmann::json j;
  {
    py::gil_scoped_release nogil;
    const an::AttributionResult r = an::attribute(m->lm, ids, answer, wrong, position);
    j = qkv::report::attribute_json(r, ids, [&](int id) { return m->labels({id})[0]; });
  }
  return to_py(j);
}

// opts: the CLI's flags by name (sweep.hpp's Options), already checked for types by qkv/research.py.
py::object sweep(const ModelPtr& m, const py::dict& opts) {
  sw::Options o;
  o.out = opts["out"].cast<std::string>();
  o.corpus = opts["corpus"].cast<std::vector<std::string>>();
  o.tokens_files = opts["tokens_files"].cast<std::vector<std::string>>();
  const std::string td = opts["token_dtype"].cast<std::string>(), sd = opts["save_dtype"].cast<std::string>();
  if (td != "uint16" && td != "uint32") qkv::usage_error("token_dtype: '" + td + "' is not uint16 or uint32");
  if (sd != "float32" && sd != "bf16") qkv::usage_error("save_dtype: '" + sd + "' is not float32 or bf16");
  o.token_dtype = td == "uint32" ? sw::TokenDtype::U32 : sw::TokenDtype::U16;
  o.save_bf16 = sd == "bf16";
  o.window = opts["window"].cast<int>();
  o.stride = opts["stride"].cast<int>();
  o.max_offset = opts["max_offset"].cast<int>();
  o.chunk_windows = opts["chunk_windows"].cast<int>();
  o.save = opts["save"].cast<std::vector<std::string>>();
  o.shard_mb = opts["shard_mb"].cast<double>();
  o.resume = opts["resume"].cast<bool>();
  o.max_windows = opts["max_windows"].cast<int64_t>();
  nlohmann::json j;
  {
    py::gil_scoped_release nogil;
    static const volatile int never = 0;
    const sw::RunResult r = sw::run_sweep(m->lm, m->path, m->tok, o, sw::Comm{}, nullptr, &never);
    qkv::report::write_sweep_outputs(o.out, r, m->lm.arch.n_layer, m->lm.arch.H);
    j = qkv::report::sweep_stats_json(r);
  }
  return to_py(j);
}

}  // namespace

void bind_research(py::module_& mod) {
  mod.def("attribute", &attribute, py::arg("model"), py::arg("tokens"), py::arg("answer"), py::arg("wrong"),
          py::arg("position"), "`qkv attribute --json` as a dict (see qkv.attribute).");
  mod.def("sweep", &sweep, py::arg("model"), py::arg("options"), "`qkv sweep --json` as a dict (see qkv.sweep).");
}

}  // namespace qkv_py
