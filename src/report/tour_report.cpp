// The tour's index.html (tour_report.hpp): the claims table, then one section per picture the claims have
// evidence for on this model — whatever its family.
#include "qkv/report/tour_report.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "qkv/error.hpp"
#include "qkv/report/svg.hpp"

namespace qkv::report {
namespace {

namespace an = qkv::analysis;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::string hn(int l, int h) {
  return std::to_string(l) + "." + std::to_string(h);
}
std::string hn(const an::HeadRef& h) {
  return h.valid() ? hn(h.layer, h.head) : "none";
}

// Several SVGs side by side (wrapping), each with a small caption below.
std::string row_of(const std::vector<std::pair<std::string, std::string>>& figs) {
  std::string o =
      "<div style=\"display:flex;flex-wrap:wrap;gap:18px 28px;align-items:flex-start;margin:1em 0\">\n";
  for (const auto& [svg, cap] : figs) {
    o += "<div>" + svg;
    if (!cap.empty())
      o += "<div style=\"color:#57606a;font-size:.85rem;max-width:30em\">" + escape_xml(cap) + "</div>";
    o += "</div>\n";
  }
  return o + "</div>\n";
}

HeatmapSpec pattern_spec(const std::vector<float>& A, int T, const std::vector<std::string>& labels,
                         const std::string& title, int cell) {
  HeatmapSpec s;
  s.rows = s.cols = size_t(T);
  s.values.resize(size_t(T) * T);
  for (int i = 0; i < T; i++)
    for (int j = 0; j < T; j++) s.values[size_t(i) * T + j] = j > i ? kNaN : double(A[size_t(i) * T + j]);
  s.row_labels = s.col_labels = labels;
  s.title = title;
  s.row_title = "query";
  s.col_title = "key";
  s.value_label = "attention weight";
  s.scale = ColorScale::Sequential;
  s.vmin = 0, s.vmax = 1;
  s.cell_px = cell;
  s.show_values = false;
  return s;
}

HeatmapSpec matrix_spec(const an::Matrix& M, const std::vector<std::string>& labels, const std::string& title,
                        double range, int cell, bool transpose) {
  HeatmapSpec s;
  s.rows = size_t(M.rows), s.cols = size_t(M.cols);
  s.values.resize(s.rows * s.cols);
  for (int i = 0; i < M.rows; i++)
    for (int j = 0; j < M.cols; j++) s.values[size_t(i) * s.cols + j] = transpose ? M(j, i) : M(i, j);
  s.row_labels = s.col_labels = labels;
  s.title = title;
  s.row_title = "i (query row)";
  s.col_title = "j (key row)";
  s.value_label = "score";
  s.scale = ColorScale::Diverging;
  s.vmin = -range, s.vmax = range;
  s.cell_px = cell;
  s.show_values = false;
  return s;
}

int cell_for(int T, int target_px) {
  return std::clamp(target_px / std::max(1, T), 4, 28);
}

bool measured(const an::TourResult& r, const std::string& id) {
  const an::Claim* c = r.claim(id);
  return c && c->applies;
}

// Every head's pattern as a small multiple, layer × head, drawn here rather than with grid_svg: no per-cell
// hover titles and colours quantised to 12 levels so that runs merge, which keeps a 144-head model's
// overview at about a megabyte. One <title> per panel names the head.
std::string pattern_overview_svg(const an::TourResult& r) {
  const int T = r.T, L = r.L, H = r.H;
  const int cell = std::max(1, 76 / std::max(1, T));
  const int box = cell * T, gap = 10, left = 58, top = 44;
  const int W = left + H * (box + gap) + 10, Ht = top + L * (box + gap) + 10;
  std::string o = svg_detail::svg_open(W, Ht, "attention patterns of every head, layer × head");
  o += "<text x=\"" + std::to_string(left) +
       "\" y=\"16\" font-size=\"13\" font-weight=\"600\">attention patterns, layer × head "
       "(rows: query, columns: key; yellow = 1)</text>\n";
  for (int h = 0; h < H; h++)
    o += "<text x=\"" + std::to_string(left + h * (box + gap) + box / 2) +
         "\" y=\"36\" font-size=\"10\" "
         "text-anchor=\"middle\" fill=\"#333333\">head " +
         std::to_string(h) + "</text>\n";
  const int levels = 12;
  auto level = [&](const std::vector<float>& A, int i, int j) {
    return std::clamp(int(std::lround(A[size_t(i) * T + j] * (levels - 1))), 0, levels - 1);
  };
  for (int l = 0; l < L; l++) {
    const int y0 = top + l * (box + gap);
    o += "<text x=\"" + std::to_string(left - 6) + "\" y=\"" + std::to_string(y0 + box / 2) +
         "\" dy=\"0.35em\" font-size=\"10\" text-anchor=\"end\" fill=\"#333333\">layer " + std::to_string(l) +
         "</text>\n";
    for (int h = 0; h < H; h++) {
      const int x0 = left + h * (box + gap);
      const auto& A = r.patterns[size_t(l) * H + h];
      o += "<g shape-rendering=\"crispEdges\"><title>head " + hn(l, h) + "</title>\n";
      o += "<rect x=\"" + std::to_string(x0) + "\" y=\"" + std::to_string(y0) + "\" width=\"" +
           std::to_string(box) + "\" height=\"" + std::to_string(box) + "\" fill=\"" +
           std::string(kMaskedFill) + "\"/>\n";
      for (int i = 0; i < T; i++)
        for (int j = 0; j <= i;) {
          const int q = level(A, i, j);
          int e = j + 1;
          while (e <= i && level(A, i, e) == q) e++;
          o += "<rect x=\"" + std::to_string(x0 + j * cell) + "\" y=\"" + std::to_string(y0 + i * cell) +
               "\" width=\"" + std::to_string((e - j) * cell) + "\" height=\"" + std::to_string(cell) +
               "\" fill=\"" + sequential_color(double(q) / (levels - 1)).hex() + "\"/>\n";
          j = e;
        }
      o += "</g>\n";
      if ((l == r.induction.layer && h == r.induction.head) ||
          (l == r.previous.layer && h == r.previous.head))
        o += "<rect x=\"" + std::to_string(x0 - 2) + "\" y=\"" + std::to_string(y0 - 2) + "\" width=\"" +
             std::to_string(box + 4) + "\" height=\"" + std::to_string(box + 4) +
             "\" fill=\"none\" stroke=\"#cf222e\" stroke-width=\"2\"/>\n";
    }
  }
  return o + "</svg>\n";
}

// The claims as one table: the claim and the seed's sentence, what was measured, the verdict with its
// criterion and note. Rows carry the page's "held"/"failed" classes (green / red); n/a rows are plain.
void claims_table(HtmlPage& page, const an::TourResult& r) {
  std::string t =
      "<table>\n<thead><tr><th>#</th><th style=\"width:30%\">claim — what the seed says</th>"
      "<th style=\"width:34%\">measured on this model</th><th>verdict — by this "
      "criterion</th></tr></thead>\n<tbody>\n";
  int i = 0;
  for (const auto& c : r.claims) {
    const char* cls = !c.applies ? "" : c.held ? "held" : "failed";
    t += std::string("<tr class=\"") + cls + "\"><td>" + std::to_string(++i) + "</td>";
    t += "<td><code>" + escape_xml(c.id) + "</code><br/><span style=\"color:#57606a\">" +
         escape_xml(c.source) + ": “" + escape_xml(c.seed) + "”</span></td>";
    t += "<td>" + escape_xml(c.summary) + "</td>";
    t += std::string("<td><strong class=\"") + cls + "\">" +
         (!c.applies ? "n/a"
          : c.held   ? "holds"
                     : "does not hold") +
         "</strong>";
    if (!c.criterion.empty()) t += "<br/><small>" + escape_xml(c.criterion) + "</small>";
    if (!c.note.empty()) t += "<br/><small><em>" + escape_xml(c.note) + "</em></small>";
    t += "</td></tr>\n";
  }
  page.add_raw(t + "</tbody>\n</table>\n");
}

void intro(HtmlPage& page, const an::TourResult& r, const TourReportInfo& info) {
  const Arch& a = r.arch;
  const int na = int(r.claims.size()) - r.applicable_count();
  std::string desc;
  for (const std::string& line : a.describe()) desc += "<br/><code>" + escape_xml(line) + "</code>";
  page.add_paragraph(
      escape_xml(
          "Every claim of the seeds, measured on this " + a.model_type + " model (" + std::to_string(r.L) +
          " layer(s), " + std::to_string(r.H) + " query heads" +
          (r.n_kv < r.H ? " sharing " + std::to_string(r.n_kv) + " key/value heads" : "") + " of " +
          std::to_string(r.dh) + ", d = " + std::to_string(r.d) + "): " + std::to_string(r.held_count()) +
          " of " + std::to_string(r.applicable_count()) + " applicable claims hold" +
          (na ? "; " + std::to_string(na) + " do not apply to this architecture (the reason is given)" : "") +
          ". The chosen head (top induction score" + (r.L >= 2 ? " in layers ≥ 1" : "") + ") is " +
          hn(r.induction) + "; the previous-token head it should compose with is " + hn(r.previous) +
          ". Tour text: " + std::to_string(r.T) + " tokens" +
          (info.text.empty() ? " (random ids repeated: the model has no tokenizer, or --tokens)"
                             : ": “" + info.text + "”") +
          ". Head scores use " + std::to_string(r.batch) + " random sequences of " + std::to_string(r.n) +
          " tokens repeated twice" + (r.bos >= 0 ? " after BOS " + std::to_string(r.bos) : std::string()) +
          " (seed " + std::to_string(r.seed) + "). Ran in " + fmt_num(r.seconds, 3) + " s.") +
          desc,
      false);
}

void patterns_section(HtmlPage& page, const an::TourResult& r, const std::vector<std::string>& labels) {
  const int T = r.T, L = r.L, H = r.H, G = r.H / std::max(1, r.n_kv);
  page.add_heading("Every head's attention pattern on the tour text");
  page.add_paragraph(
      "Rows are queries, columns keys; the causal mask" +
      std::string(r.arch.window.empty() ? "" : " (and any window)") +
      " hides what a row cannot see (hatched). Each row sums to 1. Hover over a cell for the token pair and "
      "the weight." +
      (G > 1 ? " Heads of one KV group read the same keys and values; their patterns still differ because "
               "their queries do."
             : ""));
  auto title = [&](int l, int h) {
    std::string t = "head " + hn(l, h) + (G > 1 ? " (kv " + std::to_string(h / G) + ")" : "");
    if (l == r.induction.layer && h == r.induction.head)
      t += " — the chosen (induction) head";
    else if (l == r.previous.layer && h == r.previous.head)
      t += " — the previous-token head";
    return t;
  };
  if (L * H <= 16) {
    const int cell = cell_for(T, H <= 2 ? 520 : 300);
    for (int l = 0; l < L; l++) {
      std::vector<std::pair<std::string, std::string>> figs;
      for (int h = 0; h < H; h++)
        figs.push_back(
            {heatmap_svg(pattern_spec(r.patterns[size_t(l) * H + h], T, labels, title(l, h), cell)), ""});
      page.add_heading("layer " + std::to_string(l), 3);
      page.add_raw(row_of(figs));
    }
    return;
  }
  page.add_svg(pattern_overview_svg(r),
               "All " + std::to_string(L * H) +
                   " heads (the two chosen heads framed in red); their labelled patterns follow.");
  const int cell = cell_for(T, 520);
  std::vector<std::pair<std::string, std::string>> figs;
  for (const an::HeadRef& h : {r.induction, r.previous})
    if (h.valid())
      figs.push_back({heatmap_svg(pattern_spec(r.patterns[size_t(h.layer) * H + h.head], T, labels,
                                               title(h.layer, h.head), cell)),
                      ""});
  page.add_raw(row_of(figs));
}

void scores_section(HtmlPage& page, const an::TourResult& r, const std::vector<std::string>& labels) {
  const an::Matrix& S = r.scores.S;
  if (S.rows == 0) return;
  const bool rot = r.arch.rotary();
  page.add_heading("Scores are not symmetric: head " + hn(r.induction) + "'s S beside Sᵀ");
  double range = 0, drange = 0;
  for (double v : S.a) range = std::max(range, std::fabs(v));
  an::Matrix D(S.rows, S.cols);
  for (int i = 0; i < S.rows; i++)
    for (int j = 0; j < S.cols; j++)
      D(i, j) = S(i, j) - S(j, i), drange = std::max(drange, std::fabs(D(i, j)));
  if (range == 0) range = 1;
  if (drange == 0) drange = 1;
  const int cell = cell_for(r.T, 320);
  page.add_paragraph(
      std::string("Raw scores S = scale·q·kᵀ before the mask and the softmax, on the tour text") +
      (rot ? ", on the ROTATED q and k: each side is rotated to its own position before the dot product, and "
             "S still is not symmetric"
           : "") +
      ". ‖S − Sᵀ‖_F/‖S‖_F = " + fmt_num(r.scores.asym_rel, 3) + "; the antisymmetric share of W_Q W_Kᵀ" +
      (rot ? " (offset 0)" : "") + " is " + fmt_num(r.scores.M.antisym_share, 3) +
      " (0 = symmetric, ≈ 0.71 for a random matrix).");
  page.add_raw(row_of(
      {{heatmap_svg(matrix_spec(S, labels, "S", range, cell, false)), "S_ij: query i's score for key j"},
       {heatmap_svg(matrix_spec(S, labels, "Sᵀ", range, cell, true)), "Sᵀ_ij = S_ji (same colour scale)"},
       {heatmap_svg(matrix_spec(D, labels, "S − Sᵀ", drange, cell, false)),
        "antisymmetric part ×2: zero would mean S = Sᵀ"}}));
  if (r.swap.S.rows == 0) return;
  std::string only = r.arch.qkv_bias
                         ? "; swapping only the matrices lands " + fmt_num(r.swap.matrices_vs_S_rel, 3) +
                               " from S and " + fmt_num(r.swap.matrices_vs_ST_rel, 3) + " from Sᵀ"
                         : " (no Q/K biases: swapping only the matrices is the same swap)";
  page.add_paragraph("The swap check on this head: swapping Q and K entirely (matrix and bias" +
                     std::string(rot ? ", each row keeping its own rotation" : "") + ") gives Sᵀ to " +
                     fmt_num(r.swap.full_vs_ST_rel, 2) + " (relative)" + only +
                     "; after mask and softmax the full swap's pattern is " +
                     fmt_num(r.swap.pattern_full_vs_AT_rel, 3) + " (relative) away from Aᵀ.");
}

void offsets_section(HtmlPage& page, const an::TourResult& r) {
  if (r.offsets.empty()) return;
  page.add_heading("One q, k pair at every offset");
  LineChartSpec lc;
  lc.title = "head " + hn(r.induction) + ": one q, k pair rotated to (p + Δ, p)";
  lc.x_label = "offset i − j";
  lc.y_label = "q·k";
  Series s{"key at 0", {}, {}, "", false, false};
  for (size_t i = 0; i < r.offsets.size(); i++) s.x.push_back(r.offsets[i]), s.y.push_back(r.offset_score[i]);
  lc.series.push_back(s);
  if (!r.offset_score_shifted.empty() && r.offset_shift > 0) {
    Series t{"key at " + std::to_string(r.offset_shift), {}, {}, "", false, true};
    for (size_t i = 0; i < r.offsets.size(); i++)
      t.x.push_back(r.offsets[i]), t.y.push_back(r.offset_score_shifted[i]);
    lc.series.push_back(t);
  }
  page.add_svg(line_chart_svg(lc),
               "With rotary positions the same two vectors score differently at every offset Δ = i − j, "
               "and identically at every absolute position with the same offset: the dashed line (key "
               "moved to position " +
                   std::to_string(r.offset_shift) + ") lies on the solid one (rope_relative).");
}

void heads_section(HtmlPage& page, const an::TourResult& r) {
  const int L = r.L, H = r.H;
  page.add_heading("Which heads are previous-token and induction heads");
  std::vector<std::string> rl, cl;
  for (int l = 0; l < L; l++) rl.push_back("layer " + std::to_string(l));
  for (int h = 0; h < H; h++) cl.push_back("head " + std::to_string(h));
  auto spec = [&](const std::string& title, double an::HeadScores::*field) {
    HeatmapSpec s;
    s.rows = size_t(L), s.cols = size_t(H);
    for (const auto& hs : r.heads.heads) s.values.push_back(hs.*field);
    s.row_labels = rl, s.col_labels = cl;
    s.title = title;
    s.value_label = "score";
    s.scale = ColorScale::Sequential;
    s.vmin = 0, s.vmax = 1;
    s.cell_px = std::clamp(560 / std::max(1, H), 28, 56);
    s.show_values = true;
    return s;
  };
  page.add_paragraph("TransformerLens's head detector on " + std::to_string(r.batch) +
                     " random sequences of " + std::to_string(r.n) +
                     " tokens, each repeated twice. Previous-token: attention mass on i − 1; "
                     "induction: mean weight on the (1 − n) diagonal of the repeated half. A head with ≥ 0.8 "
                     "counts as one.");
  page.add_raw(row_of({{heatmap_svg(spec("previous-token score", &an::HeadScores::previous_token)), ""},
                       {heatmap_svg(spec("induction score", &an::HeadScores::induction)), ""}}));
}

void composition_section(HtmlPage& page, const an::TourResult& r) {
  if (r.circuits.compositions.empty()) return;
  page.add_heading("K-composition: which earlier head builds the induction head's keys");
  // Rows: every source head present; columns: every target head present (all layers ≥ 1 on a small model,
  // the chosen head's layer on a big one).
  std::vector<std::pair<int, int>> srcs, dsts;
  for (const auto& c : r.circuits.compositions) {
    if (std::find(srcs.begin(), srcs.end(), std::make_pair(c.l1, c.h1)) == srcs.end())
      srcs.push_back({c.l1, c.h1});
    if (std::find(dsts.begin(), dsts.end(), std::make_pair(c.l2, c.h2)) == dsts.end())
      dsts.push_back({c.l2, c.h2});
  }
  std::sort(srcs.begin(), srcs.end());
  std::sort(dsts.begin(), dsts.end());
  HeatmapSpec s;
  for (const auto& [l, h] : srcs) s.row_labels.push_back(hn(l, h));
  for (const auto& [l, h] : dsts) s.col_labels.push_back(hn(l, h));
  s.rows = srcs.size(), s.cols = dsts.size();
  s.values.assign(s.rows * s.cols, kNaN);
  double mx = 0;
  for (const auto& c : r.circuits.compositions) {
    const size_t i = size_t(std::find(srcs.begin(), srcs.end(), std::make_pair(c.l1, c.h1)) - srcs.begin());
    const size_t j = size_t(std::find(dsts.begin(), dsts.end(), std::make_pair(c.l2, c.h2)) - dsts.begin());
    s.values[i * s.cols + j] = c.k;
    mx = std::max(mx, c.k);
  }
  s.title = "K-composition score";
  s.row_title = "source head (its OV)";
  s.col_title = "target head (its W_K side)";
  s.value_label = "‖W_OV·W_QKᵀ‖/(‖·‖‖·‖)";
  s.scale = ColorScale::Sequential;
  s.vmin = 0, s.vmax = std::max(mx, 1e-12);
  s.cell_px = std::clamp(600 / int(std::max(s.rows, s.cols)), 9, 44);
  s.show_values = s.rows * s.cols <= 400;
  const auto& b = r.circuits.baseline;
  page.add_paragraph(
      "Composition ‖left·right‖_F/(‖left‖_F‖right‖_F) with left = the source head's OV circuit and right = "
      "the target's QK circuit transposed (the first norm's weight folded in" +
      std::string(r.arch.rotary() ? "; at offset 0" : "") + "). Random factors of the same shapes give " +
      fmt_num(b.k_mean, 3) + " ± " + fmt_num(b.k_std, 3) + " (" + std::to_string(b.samples) +
      " samples). Hatched: the source is not in an earlier layer.");
  page.add_svg(heatmap_svg(s), "Column " + hn(r.induction) + " is the chosen induction head; row " +
                                   hn(r.previous) + " the previous-token head it is expected to read from.");
}

void ablation_section(HtmlPage& page, const an::TourResult& r) {
  if (!measured(r, "qk_ov_fail_separately")) return;
  const auto& a = r.ablation;
  page.add_heading("QK and OV fail separately: ablating head " + hn(r.induction));
  BarChartSpec bc;
  bc.title = "mean cross-entropy on the repeated half (nats)";
  bc.value_label = "loss (nats)";
  bc.labels = {"intact", "QK ablated (uniform pattern)", "OV ablated (values zeroed)",
               "first half, intact (nothing to copy)"};
  bc.values = {a.loss_intact, a.loss_qk, a.loss_ov, a.loss_first_half};
  bc.colors = {"#1a7f37", "#0072b2", "#d55e00", "#8c959f"};
  bc.width = 720;
  bc.bar_px = 24;
  bc.sig = 4;
  page.add_svg(bar_chart_svg(bc),
               "Under OV ablation the head's pattern differs from the intact one by at most " +
                   fmt_num(a.ov_pattern_max_abs_diff, 3) + " (it must be identical); under QK ablation by " +
                   fmt_num(a.qk_pattern_max_abs_diff, 3) + ".");
}

void sqrt_dk_section(HtmlPage& page, const an::TourResult& r) {
  if (r.saturate.empty()) return;
  page.add_heading("Why divide by √d_k");
  Series wr{"max weight, raw", {}, {}, "#d55e00", true, false},
      ws{"max weight, ÷√d_k", {}, {}, "#0072b2", true, false};
  Series oh{"rows > 0.99, raw", {}, {}, "#d55e00", true, true};
  Series gr{"‖dS‖, raw", {}, {}, "#d55e00", true, false}, gs{"‖dS‖, ÷√d_k", {}, {}, "#0072b2", true, false};
  for (const auto& row : r.saturate) {
    wr.x.push_back(row.dk), wr.y.push_back(row.max_weight_raw);
    ws.x.push_back(row.dk), ws.y.push_back(row.max_weight_scaled);
    oh.x.push_back(row.dk), oh.y.push_back(row.onehot_raw);
    gr.x.push_back(row.dk), gr.y.push_back(row.grad_norm_raw);
    gs.x.push_back(row.dk), gs.y.push_back(row.grad_norm_scaled);
  }
  LineChartSpec w;
  w.title = "softmax rows go one-hot without the division";
  w.x_label = "d_k";
  w.y_label = "mean largest weight / share of rows";
  w.series = {wr, ws, oh};
  w.x_scale = AxisScale::Log2;
  w.ymin = 0, w.ymax = 1;
  w.width = 520, w.height = 340;
  LineChartSpec g;
  g.title = "and the gradient through them vanishes";
  g.x_label = "d_k";
  g.y_label = "mean ‖∂L/∂scores‖ per row";
  g.series = {gr, gs};
  g.x_scale = AxisScale::Log2;
  g.y_scale = AxisScale::Log10;
  g.width = 520, g.height = 340;
  page.add_paragraph("Random q, k ~ N(0, 1) in d_k dimensions, softmax over " +
                     std::to_string(r.saturate_keys) +
                     " keys (seed 004's two-line argument: Var(q·k) = d_k).");
  page.add_raw(row_of({{line_chart_svg(w), ""}, {line_chart_svg(g), ""}}));
}

void gradcheck_section(HtmlPage& page, const an::TourResult& r) {
  if (r.grad_head.max_abs_error.empty()) return;
  page.add_heading("The backward pass, against central differences");
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> cls;
  for (const auto* g : {&r.grad_head, &r.grad_sublayer})
    for (const auto& [name, e] : g->max_abs_error) {
      rows.push_back({g == &r.grad_head ? "one head" : "attention sublayer", name, fmt_num(e, 3)});
      cls.push_back(e < 1e-6 ? "held" : "failed");
    }
  page.add_table({"of", "gradient", "max |analytic − numeric|"}, rows, cls);
  if (const an::Claim* c = r.claim("gradcheck_model"); c && c->applies)
    page.add_paragraph(
        "This model's own backward, on its architecture in miniature (gradcheck_model): " + c->summary + ".");
}

}  // namespace

HtmlPage tour_page(const an::TourResult& r, const TourReportInfo& info) {
  std::vector<std::string> labels = info.labels;
  if (labels.empty())
    for (int id : r.text_ids) labels.push_back("#" + std::to_string(id));
  if (int(labels.size()) != r.T)
    data_error("tour report: " + std::to_string(labels.size()) + " token labels for " + std::to_string(r.T) +
               " tokens");
  HtmlPage page("qkv tour — " + (info.model.empty() ? std::string("model") : info.model) + " (" +
                r.arch.model_type + ")");
  intro(page, r, info);
  page.add_heading("Claims");
  page.add_paragraph(
      "Green: the claim holds on this model by the stated criterion. Red: it does not, with the number and "
      "the reason. Plain: n/a, the claim is moot on this architecture (the reason is given). Several claims "
      "are about trained weights and are expected to fail on a random-weight model.");
  claims_table(page, r);
  patterns_section(page, r, labels);
  scores_section(page, r, labels);
  offsets_section(page, r);
  heads_section(page, r);
  composition_section(page, r);
  ablation_section(page, r);
  sqrt_dk_section(page, r);
  gradcheck_section(page, r);
  return page;
}

std::string write_tour_report(const an::TourResult& r, const TourReportInfo& info, const std::string& dir) {
  return write_page_in_dir(tour_page(r, info), dir);
}

}  // namespace qkv::report
