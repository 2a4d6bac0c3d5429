// `qkv attribute --json` (direct logit attribution and the logit lens), built once here so that the CLI
// (tools/qkv/cmd_attribute.cpp) and Python (qkv.attribute) return the same document.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/analysis/attribution.hpp"

namespace qkv::report {

// ids: the input; label(id): a token's label as the report shows it (the lens's "top_label").
nlohmann::json attribute_json(const analysis::AttributionResult& r, const std::vector<int>& ids,
                              const std::function<std::string(int)>& label);

}  // namespace qkv::report
