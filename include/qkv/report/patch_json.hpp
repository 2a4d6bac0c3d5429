// `qkv patch --json` for a hook sweep, built once here so that the CLI (tools/qkv/cmd_patch.cpp) and Python
// (qkv.patch) return the same document: activation patching's, and attribution patching's with each site's
// first-order `estimate` beside the same keys.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "qkv/analysis/attribution_patching.hpp"
#include "qkv/analysis/patching.hpp"

namespace qkv::report {

// inputs: {"clean": ids, "corrupt": ids, "tokens": T}; svg: the heatmap's path, or "" for none.
nlohmann::json patch_sweep_json(const analysis::SweepResult& r, const analysis::PatchMetric& metric,
                                const nlohmann::json& inputs, const std::string& svg);
// The same keys ("method": "attribution"), each site with "estimate" (metric = base metric + estimate),
// and "backwards" (training forward + backward passes).
nlohmann::json attribution_sweep_json(const analysis::AttributionPatchResult& r, const analysis::PatchMetric& metric,
                                      const nlohmann::json& inputs, const std::string& svg);

}  // namespace qkv::report
