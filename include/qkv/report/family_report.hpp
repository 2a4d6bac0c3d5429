// The family tour's HTML report: the claims (verdicts, n/a with reasons), every head's pattern, the
// chosen head's S beside Sᵀ on the rotated q and k, and — on rotary models — one q, k pair's score as a
// function of the offset i − j. One self-contained file.
#pragma once
#include <string>
#include <vector>

#include "qkv/analysis/family_tour.hpp"
#include "qkv/report/html.hpp"

namespace qkv::report {

HtmlPage family_tour_page(const analysis::FamilyTourResult& r, const Arch& arch, const std::string& model);

// Creates `dir` if needed and writes dir/index.html atomically; returns its path.
std::string write_family_tour_report(const analysis::FamilyTourResult& r, const Arch& arch, const std::string& model,
                                     const std::string& dir);

// Two models' tours side by side (`qkv tour --model A --compare B`): a claims table with both verdicts
// per claim id (green: holds on both, amber: on one only, red: on neither, plain: n/a on both), then each
// model's own report (its page's sections) in two columns.
struct TourSide {
  std::string model;    // the checkpoint path
  std::string family;   // config.json's model_type
  std::vector<analysis::Claim> claims;
  HtmlPage page{""};    // its own report page (tour_page or family_tour_page)
};
HtmlPage compare_page(const TourSide& a, const TourSide& b);

}  // namespace qkv::report
