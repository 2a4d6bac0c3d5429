// `qkv patch --json` for hook sweeps (patch_json.hpp).
#include "qkv/report/patch_json.hpp"

#include <cmath>

namespace qkv::report {

namespace an = qkv::analysis;

nlohmann::json patch_sweep_json(const an::SweepResult& r, const an::PatchMetric& metric,
                                const nlohmann::json& inputs, const std::string& svg) {
  nlohmann::json sites = nlohmann::json::array();
  for (size_t i = 0; i < r.sites.size(); i++) {
    const auto& s = r.sites[i];
    sites.push_back({{"layer", s.layer},
                     {"head", s.head < 0 ? nlohmann::json(nullptr) : nlohmann::json(s.head)},
                     {"pos", s.pos < 0 ? nlohmann::json(nullptr) : nlohmann::json(s.pos)},
                     {"metric", r.metric[i]},
                     {"normalised", std::isfinite(r.normalised[i]) ? nlohmann::json(r.normalised[i])
                                                                   : nlohmann::json(nullptr)}});
  }
  return {{"hook", r.hook},
          {"kind", r.kind},
          {"method", "activation"},
          {"direction", an::direction_name(r.direction)},
          {"metric", metric.describe()},
          {"inputs", inputs},
          {"clean", r.clean},
          {"corrupt", r.corrupt},
          {"tokens_run", r.T_run},
          {"last_row_only", r.last_only},
          {"forwards", r.forwards},
          {"sites_skipped", r.sites_skipped},
          {"seconds", r.seconds},
          {"sites", sites},
          {"svg", svg.empty() ? nlohmann::json(nullptr) : nlohmann::json(svg)}};
}

nlohmann::json attribution_sweep_json(const an::AttributionPatchResult& r, const an::PatchMetric& metric,
                                      const nlohmann::json& inputs, const std::string& svg) {
  nlohmann::json j = patch_sweep_json(r, metric, inputs, svg);
  j["method"] = "attribution";
  j["backwards"] = r.backwards;
  for (size_t i = 0; i < r.sites.size(); i++) j["sites"][i]["estimate"] = r.estimate[i];
  return j;
}

}  // namespace qkv::report
