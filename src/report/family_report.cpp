// The family tour's report (family_report.hpp).
#include "qkv/report/family_report.hpp"

#include <cmath>
#include <filesystem>

#include "qkv/error.hpp"

namespace qkv::report {

namespace an = qkv::analysis;

HtmlPage family_tour_page(const an::FamilyTourResult& r, const Arch& a, const std::string& model) {
  HtmlPage page("qkv tour — " + model + " (" + a.model_type + ")");
  std::string desc;
  for (const std::string& line : a.describe()) desc += "<br><code>" + escape_xml(line) + "</code>";
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
  for (int tr = 0; tr < 2; tr++) {
    HeatmapSpec s;
    s.rows = s.cols = size_t(T);
    s.values.resize(size_t(T) * T);
    for (int i = 0; i < T; i++)
      for (int j = 0; j < T; j++) s.values[size_t(i) * T + j] = tr ? r.S[size_t(j) * T + i] : r.S[size_t(i) * T + j];
    s.title = tr ? "Sᵀ" : std::string("S = q·kᵀ") + (a.rotary() ? " on the rotated q and k" : "");
    s.row_title = "query i", s.col_title = "key j", s.value_label = "raw score";
    s.scale = ColorScale::Diverging;
    s.show_values = false;
    page.add_svg(heatmap_svg(s));
  }
  if (!r.offsets.empty()) {
    page.add_heading("One q, k pair at every offset");
    LineChartSpec lc;
    lc.title = "score of one fixed q, k pair rotated to positions (Δ, 0)";
    lc.x_label = "offset i − j";
    lc.y_label = "q·k";
    Series s;
    s.name = "head " + std::to_string(r.chosen.layer) + "." + std::to_string(r.chosen.head);
    for (size_t i = 0; i < r.offsets.size(); i++) s.x.push_back(r.offsets[i]), s.y.push_back(r.offset_score[i]);
    s.markers = false;
    lc.series.push_back(s);
    page.add_svg(line_chart_svg(lc), "With rotary positions the same two vectors score differently at every offset, and "
                                     "identically at every absolute position with the same offset (rope_relative).");
  }
  return page;
}

std::string write_family_tour_report(const an::FamilyTourResult& r, const Arch& arch, const std::string& model,
                                     const std::string& dir) {
  return write_page_in_dir(family_tour_page(r, arch, model), dir);
}

}  // namespace qkv::report
