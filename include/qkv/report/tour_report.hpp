// The tour's one report writer, for a model of any family: the HTML report (the claims table with verdict
// colours, then the pictures each claim has evidence for — every head's pattern on the tour text, the chosen
// head's S beside Sᵀ and S − Sᵀ (on the rotated q and k of a rotary model), the score of one q, k pair
// against the offset i − j (rotary models), the head scores, the K-composition scores, the ablation, the
// √d_k curves, the gradient checks), the text table, the JSON, and two models side by side (--compare).
#pragma once
#include <nlohmann/json.hpp>
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
std::string write_tour_report(const analysis::TourResult& r, const TourReportInfo& info,
                              const std::string& dir);

// One toured model, for the side-by-side page.
struct TourSide {
  const analysis::TourResult& r;
  TourReportInfo info;
};
// Two models' tours side by side (`qkv tour --model A --compare B`): a claims table with both verdicts per
// claim (green: holds on both, amber: on one only, red: on neither, plain: n/a on either), then each model's
// own report in two columns.
HtmlPage compare_page(const TourSide& a, const TourSide& b);

// `qkv tour`'s text: the model and the chosen heads, each claim (verdict, the seed's sentence, what was
// measured, the criterion, the note), a verdict table and the count. `report`: the HTML file written.
std::string tour_text(const analysis::TourResult& r, const TourReportInfo& info, const std::string& report);
// Both models' verdicts per claim and each one's count.
std::string compare_text(const TourSide& a, const TourSide& b, const std::string& report);

// Each claim: id, held, applies (false: n/a, the note says why), measured, criterion, seed, source, summary,
// note.
nlohmann::json claims_json(const std::vector<analysis::Claim>& claims);
// `qkv tour --json`: the model, its family and architecture, the text, the repeated sequences, the chosen
// heads, the counts (held, applicable, total) and the claims. report: the HTML file written ("" = none:
// null).
nlohmann::json tour_json(const analysis::TourResult& r, const TourReportInfo& info,
                         const std::string& report);

}  // namespace qkv::report
