// The family tour's report (family_report.hpp).
#include "qkv/report/family_report.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "qkv/error.hpp"

namespace qkv::report {

namespace an = qkv::analysis;

HtmlPage family_tour_page(const an::FamilyTourResult& r, const Arch& a, const std::string& model) {
  HtmlPage page("qkv tour — " + model + " (" + a.model_type + ")");
  std::string desc;
  for (const std::string& line : a.describe()) desc += "<br/><code>" + escape_xml(line) + "</code>";
  page.add_paragraph("The seeds' claims on a " + escape_xml(a.model_type) + " model: which still hold with " +
                         "its positions, heads and norm, measured on its own Q/K/V maps and its one forward." + desc,
                     false);
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> classes;
  for (const auto& c : r.claims) {
    rows.push_back({c.id, c.source, !c.applies ? "n/a" : c.held ? "holds" : "does not hold",
                    c.applies ? c.summary : c.note, c.criterion});
    classes.push_back(!c.applies ? "" : c.held ? "held" : "failed");
  }
  page.add_heading("Claims");
  page.add_paragraph(std::to_string(r.held_count()) + " of " + std::to_string(r.applicable_count()) +
                     " applicable claims hold; " + std::to_string(r.claims.size() - size_t(r.applicable_count())) +
                     " do not apply to this model (the reason is given).");
  page.add_table({"claim", "source", "verdict", "measured", "criterion"}, rows, classes);

  const int T = r.T;
  page.add_heading("Every head's pattern");
  GridSpec g;
  g.title = "attention pattern A on the tour text (" + std::to_string(T) + " tokens)";
  for (int l = 0; l < a.n_layer; l++) g.row_titles.push_back("layer " + std::to_string(l));
  for (int h = 0; h < a.H; h++)
    g.col_titles.push_back("head " + std::to_string(h) + (a.n_kv < a.H ? " (kv " + std::to_string(h / (a.H / a.n_kv)) + ")" : ""));
  g.cols = size_t(a.H);
  for (size_t i = 0; i < r.patterns.size(); i++) {
    HeatmapSpec p;
    p.rows = p.cols = size_t(T);
    p.values.assign(r.patterns[i].begin(), r.patterns[i].end());
    p.title = std::to_string(i / size_t(a.H)) + "." + std::to_string(i % size_t(a.H));
    g.panels.push_back(std::move(p));
  }
  g.scale = ColorScale::Sequential;
  g.vmin = 0, g.vmax = 1;
  g.value_label = "attention weight";
  page.add_svg(grid_svg(g), a.n_kv < a.H ? "Heads of one KV group read the same keys and values; their patterns still differ "
                                            "because their queries do."
                                          : "");

  page.add_heading("S beside Sᵀ (head " + std::to_string(r.chosen.layer) + "." + std::to_string(r.chosen.head) + ")");
  {
    GridSpec sg;
    sg.title = std::string("raw S = q·kᵀ") + (a.rotary() ? " on the ROTATED q and k" : "") + ", unmasked";
    sg.cols = 2;
    sg.col_titles = {"S (row i = query, column j = key)", "Sᵀ"};
    sg.panel_px = std::min(360, std::max(160, 7 * T));
    double mx = 0;
    for (double v : r.S) mx = std::max(mx, std::abs(v));
    for (int tr = 0; tr < 2; tr++) {
      HeatmapSpec s;
      s.rows = s.cols = size_t(T);
      s.values.resize(size_t(T) * T);
      for (int i = 0; i < T; i++)
        for (int j = 0; j < T; j++) s.values[size_t(i) * T + j] = tr ? r.S[size_t(j) * T + i] : r.S[size_t(i) * T + j];
      s.title = tr ? "Sᵀ" : "S";
      s.show_values = false;
      sg.panels.push_back(std::move(s));
    }
    sg.scale = ColorScale::Diverging;
    sg.vmin = -mx, sg.vmax = mx;
    sg.value_label = "raw score";
    page.add_svg(grid_svg(sg), std::string("Row i's score for row j is not row j's score for row i") +
                                   (a.rotary() ? ": with rotary positions each side is rotated to its own position before the "
                                                 "dot product, and S still is not symmetric (scores_asymmetric)."
                                               : " (scores_asymmetric)."));
  }
  if (!r.offsets.empty()) {
    page.add_heading("One q, k pair at every offset");
    LineChartSpec lc;
    lc.title = "head " + std::to_string(r.chosen.layer) + "." + std::to_string(r.chosen.head) + ": one q, k pair rotated to (p + Δ, p)";
    lc.x_label = "offset i − j";
    lc.y_label = "q·k";
    Series s;
    s.name = "key at 0";
    for (size_t i = 0; i < r.offsets.size(); i++) s.x.push_back(r.offsets[i]), s.y.push_back(r.offset_score[i]);
    s.markers = false;
    lc.series.push_back(s);
    if (!r.offset_score_shifted.empty() && r.offset_shift > 0) {
      Series t;
      t.name = "key at " + std::to_string(r.offset_shift);
      for (size_t i = 0; i < r.offsets.size(); i++) t.x.push_back(r.offsets[i]), t.y.push_back(r.offset_score_shifted[i]);
      t.markers = false, t.dashed = true;
      lc.series.push_back(t);
    }
    page.add_svg(line_chart_svg(lc), "With rotary positions the same two vectors score differently at every offset Δ = i − j, "
                                     "and identically at every absolute position with the same offset: the dashed line (key "
                                     "moved to position " + std::to_string(r.offset_shift) + ") lies on the solid one (rope_relative).");
  }
  return page;
}

std::string write_family_tour_report(const an::FamilyTourResult& r, const Arch& arch, const std::string& model,
                                     const std::string& dir) {
  return write_page_in_dir(family_tour_page(r, arch, model), dir);
}

}  // namespace qkv::report

namespace qkv::report {

HtmlPage compare_page(const TourSide& a, const TourSide& b) {
  HtmlPage page("qkv tour — " + a.model + " (" + a.family + ") beside " + b.model + " (" + b.family + ")");
  page.add_raw("<style>body { max-width: none; } .side { display: flex; gap: 2rem; align-items: flex-start; }"
               " .side .col { flex: 1 1 0; min-width: 0; overflow-x: auto; }"
               " .side h2 { font-size: 1.15rem; } .side svg { max-width: 100%; height: auto; }</style>\n");
  page.add_paragraph("The seeds' claims measured on two models by the same tour: each claim's verdict on both, by the "
                     "same criterion (stated in each model's own table below). A claim that does not apply to a model "
                     "(n/a) says why there.");
  std::vector<std::string> ids;
  auto add_ids = [&](const std::vector<analysis::Claim>& cs) {
    for (const auto& c : cs)
      if (std::find(ids.begin(), ids.end(), c.id) == ids.end()) ids.push_back(c.id);
  };
  add_ids(a.claims), add_ids(b.claims);
  auto find = [](const std::vector<analysis::Claim>& cs, const std::string& id) -> const analysis::Claim* {
    for (const auto& c : cs)
      if (c.id == id) return &c;
    return nullptr;
  };
  auto verdict = [](const analysis::Claim* c) {
    return !c ? std::string("not measured by this tour") : !c->applies ? "n/a" : c->held ? "holds" : "does not hold";
  };
  auto measured = [](const analysis::Claim* c) { return !c ? std::string() : c->applies ? c->summary : c->note; };
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> classes;
  int both = 0, one = 0, neither = 0, single = 0;
  for (const std::string& id : ids) {
    const analysis::Claim *x = find(a.claims, id), *y = find(b.claims, id);
    rows.push_back({id, verdict(x), verdict(y), measured(x), measured(y)});
    const bool ax = x && x->applies, ay = y && y->applies, hx = ax && x->held, hy = ay && y->held;
    std::string cls;
    if (!x || !y) single++;  // only one tour measures it: no comparison
    else if (ax && ay) {
      cls = hx && hy ? "held" : hx || hy ? "warn" : "failed";
      (hx && hy ? both : hx || hy ? one : neither)++;
    }
    classes.push_back(cls);
  }
  page.add_heading("Claims, side by side");
  page.add_paragraph("Of the claims both tours measure and that apply to both models: " + std::to_string(both) +
                     " hold on both (green), " + std::to_string(one) + " on one only (amber), " + std::to_string(neither) +
                     " on neither (red). " + std::to_string(single) +
                     " claims are measured by one tour only (the GPT-2 tour's seed examples; the rotary, GQA and RMSNorm "
                     "claims of the family tour).");
  page.add_table({"claim", a.model + " (" + a.family + ")", b.model + " (" + b.family + ")", "measured on " + a.model,
                  "measured on " + b.model},
                 rows, classes);
  page.add_heading("Each model's report");
  page.add_raw("<div class=\"side\"><div class=\"col\"><h2>" + escape_xml(a.model) + " (" + escape_xml(a.family) + ")</h2>\n" + a.page.body() +
               "</div><div class=\"col\"><h2>" + escape_xml(b.model) + " (" + escape_xml(b.family) + ")</h2>\n" + b.page.body() +
               "</div></div>\n");
  return page;
}

}  // namespace qkv::report
