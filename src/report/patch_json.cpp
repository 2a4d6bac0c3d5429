// `qkv patch --json` for hook sweeps, paths and edges (patch_json.hpp).
#include "qkv/report/patch_json.hpp"

#include <cmath>

namespace qkv::report {

namespace an = qkv::analysis;
using nlohmann::json;

namespace {

json finite(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

// The keys every patching document has: what was compared and the two unpatched runs' metrics.
json common(an::PatchDirection direction, const an::PatchMetric& metric, const json& inputs, double clean,
            double corrupt) {
  return {{"direction", an::direction_name(direction)},
          {"metric", metric.describe()},
          {"inputs", inputs},
          {"clean", clean},
          {"corrupt", corrupt}};
}

}  // namespace

json patch_sweep_json(const an::SweepResult& r, const an::PatchMetric& metric, const json& inputs,
                      const std::string& svg) {
  json sites = json::array();
  for (size_t i = 0; i < r.sites.size(); i++) {
    const auto& s = r.sites[i];
    sites.push_back({{"layer", s.layer},
                     {"head", s.head < 0 ? json(nullptr) : json(s.head)},
                     {"pos", s.pos < 0 ? json(nullptr) : json(s.pos)},
                     {"metric", r.metric[i]},
                     {"normalised", finite(r.normalised[i])}});
  }
  json j = common(r.direction, metric, inputs, r.clean, r.corrupt);
  j.update({{"hook", r.hook},
            {"kind", r.kind},
            {"method", "activation"},
            {"tokens_run", r.T_run},
            {"last_row_only", r.last_only},
            {"forwards", r.forwards},
            {"sites_skipped", r.sites_skipped},
            {"seconds", r.seconds},
            {"sites", sites},
            {"svg", svg.empty() ? json(nullptr) : json(svg)}});
  return j;
}

json attribution_sweep_json(const an::AttributionPatchResult& r, const an::PatchMetric& metric, const json& inputs,
                            const std::string& svg) {
  json j = patch_sweep_json(r, metric, inputs, svg);
  j["method"] = "attribution";
  j["backwards"] = r.backwards;
  for (size_t i = 0; i < r.sites.size(); i++) j["sites"][i]["estimate"] = r.estimate[i];
  return j;
}

json path_patch_json(const an::PathResult& r, const std::string& path, const an::PatchMetric& metric,
                     const json& inputs) {
  json j = common(r.direction, metric, inputs, r.clean, r.corrupt);
  j.update({{"path", path},
            {"patched", r.metric},
            {"normalised", finite(r.normalised)},
            {"receiver_only", r.receiver_metric},
            {"receiver_only_normalised", finite(r.receiver_normalised)},
            {"fraction_of_receiver_effect", finite(an::fraction_of_receiver_effect(r))},
            {"delta_norm", r.delta_norm},
            {"forwards", r.forwards}});
  return j;
}

json edge_attribution_json(const an::EdgeAttributionResult& r, const an::PatchMetric& metric, const json& inputs) {
  json edges = json::array();
  for (const auto& e : r.edges)
    edges.push_back({{"sender_layer", e.sender_layer},
                     {"sender_head", e.sender_head},
                     {"receiver_layer", e.receiver_layer},
                     {"receiver_head", e.receiver_head},
                     {"input", std::string(1, e.input)},
                     {"estimate", e.estimate},
                     {"normalised", finite(e.normalised)}});
  json j = common(r.direction, metric, inputs, r.clean, r.corrupt);
  j.update({{"method", "edge_attribution"},
            {"tokens_run", r.T_run},
            {"last_row_only", r.last_only},
            {"forwards", r.forwards},
            {"backwards", r.backwards},
            {"seconds", r.seconds},
            {"edges", edges}});
  return j;
}

}  // namespace qkv::report
