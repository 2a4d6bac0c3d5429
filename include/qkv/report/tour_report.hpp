// The tour's HTML report: the claims table (verdict colours) and the pictures behind the claims — every
// head's pattern on the tour text, the chosen head's S beside Sᵀ and S − Sᵀ, the head scores as layer ×
// head heatmaps, the K-composition scores, the ablation, the √d_k curves. One self-contained file.
#pragma once
#include <string>
#include <vector>

#include "qkv/analysis/tour.hpp"
#include "qkv/report/html.hpp"

namespace qkv::report {

struct TourReportInfo {
  std::string model;                // the checkpoint path, shown in the title
  std::vector<std::string> labels;  // one per tour-text token (e.g. "␣the"); empty: "#id"
  std::string text;                 // the tour text, when it came from text
};

// Throws qkv::Error when labels are given but their count differs from the text's tokens.
HtmlPage tour_page(const analysis::TourResult& r, const TourReportInfo& info);

// Creates `dir` if needed and writes dir/index.html atomically; returns its path. qkv::Error (data) naming
// the path when the directory cannot be created or written (no partial file is left).
std::string write_tour_report(const analysis::TourResult& r, const TourReportInfo& info, const std::string& dir);

}  // namespace qkv::report
