// Two models' tours side by side (tour_report.hpp's compare_page): every claim with both verdicts, then each
// model's own report in two columns.
#include "qkv/report/tour_report.hpp"

namespace qkv::report {
namespace {

namespace an = qkv::analysis;

std::string verdict(const an::Claim* c) {
  return !c ? "-" : !c->applies ? "n/a" : c->held ? "holds" : "does not hold";
}
std::string measured(const an::Claim* c) {
  return !c ? std::string() : c->applies ? c->summary : c->note;
}
std::string side_name(const TourSide& s) {
  return s.info.model + " (" + s.r.arch.model_type + ")";
}

}  // namespace

HtmlPage compare_page(const TourSide& a, const TourSide& b) {
  HtmlPage page("qkv tour — " + side_name(a) + " beside " + side_name(b));
  page.add_raw(
      "<style>body { max-width: none; } .side { display: flex; gap: 2rem; align-items: flex-start; }"
      " .side .col { flex: 1 1 0; min-width: 0; overflow-x: auto; }"
      " .side h2 { font-size: 1.15rem; } .side svg { max-width: 100%; height: auto; }"
      " .side table { font-size: .78rem; } .side td, .side th { padding: 3px 5px; }</style>\n");
  page.add_paragraph(
      "The seeds' claims measured on two models by the same tour: each claim's verdict on both, by the "
      "same criterion (stated in each model's own table below). A claim that does not apply to a model "
      "(n/a) says why there.");
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> classes;
  int both = 0, one = 0, neither = 0, moot = 0;
  for (const std::string& id : an::tour_claim_ids()) {
    const an::Claim *x = a.r.claim(id), *y = b.r.claim(id);
    rows.push_back({id, verdict(x), verdict(y), measured(x), measured(y)});
    const bool ax = x && x->applies, ay = y && y->applies, hx = ax && x->held, hy = ay && y->held;
    std::string cls;
    if (!ax || !ay)
      moot++;
    else {
      cls = hx && hy ? "held" : hx || hy ? "warn" : "failed";
      (hx && hy ? both : hx || hy ? one : neither)++;
    }
    classes.push_back(cls);
  }
  page.add_heading("Claims, side by side");
  page.add_paragraph("Of the claims that apply to both models: " + std::to_string(both) +
                     " hold on both (green), " + std::to_string(one) + " on one only (amber), " +
                     std::to_string(neither) + " on neither (red). " + std::to_string(moot) +
                     " do not apply to one model or both (plain; the reason is in the row).");
  page.add_table(
      {"claim", side_name(a), side_name(b), "measured on " + a.info.model, "measured on " + b.info.model},
      rows, classes);
  page.add_heading("Each model's report");
  page.add_raw("<div class=\"side\"><div class=\"col\"><h2>" + escape_xml(side_name(a)) + "</h2>\n" +
               tour_page(a.r, a.info).body() + "</div><div class=\"col\"><h2>" + escape_xml(side_name(b)) +
               "</h2>\n" + tour_page(b.r, b.info).body() + "</div></div>\n");
  return page;
}

}  // namespace qkv::report
