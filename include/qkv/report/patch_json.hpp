// `qkv patch --json` for a hook sweep, built once here so that the CLI (tools/qkv/cmd_patch.cpp) and Python
// (qkv.patch) return the same document: activation patching's, and attribution patching's with each site's
// first-order `estimate` beside the same keys.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "qkv/analysis/attribution_patching.hpp"
#include "qkv/analysis/edge_attribution.hpp"
#include "qkv/analysis/patching.hpp"

namespace qkv::report {

// inputs: {"clean": ids, "corrupt": ids, "tokens": T}; svg: the heatmap's path, or "" for none.
nlohmann::json patch_sweep_json(const analysis::SweepResult& r, const analysis::PatchMetric& metric,
                                const nlohmann::json& inputs, const std::string& svg);
// The same keys ("method": "attribution"), each site with "estimate" (metric = base metric + estimate),
// and "backwards" (training forward + backward passes).
nlohmann::json attribution_sweep_json(const analysis::AttributionPatchResult& r, const analysis::PatchMetric& metric,
                                      const nlohmann::json& inputs, const std::string& svg);

// `qkv patch --path … --json`: one path SENDER:RECEIVER:q|k|v (as given) against the receiver's whole input.
nlohmann::json path_patch_json(const analysis::PathResult& r, const std::string& path, const analysis::PatchMetric& metric,
                               const nlohmann::json& inputs);

// `qkv patch --attribution --edges --json` (docs/patching.md): {"method": "edge_attribution", "direction",
// "metric", "inputs", "clean", "corrupt", "tokens_run", "last_row_only", "forwards", "backwards", "seconds",
// "edges": [{"sender_layer", "sender_head", "receiver_layer", "receiver_head", "input", "estimate",
// "normalised"}, …]}.
nlohmann::json edge_attribution_json(const analysis::EdgeAttributionResult& r, const analysis::PatchMetric& metric,
                                     const nlohmann::json& inputs);

}  // namespace qkv::report
