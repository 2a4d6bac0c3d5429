// Line charts (loss curves, √d_k curves) and horizontal bar charts (ranked heads).
// GCC 12 reports a false -Wrestrict inside std::string's operator+ (GCC bug 105651) for the
// `"<tag attr=\"" + value` chains below; it is a compiler bug, not a real overlap.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic ignored "-Wrestrict"
#endif
#include <algorithm>
#include <cmath>
#include <limits>

#include "qkv/error.hpp"
#include "qkv/report/svg.hpp"

namespace qkv::report {

using namespace svg_detail;

namespace {

constexpr int kM = 8;  // outer margin

double base_of(AxisScale s) { return s == AxisScale::Log2 ? 2.0 : 10.0; }

// One axis: data range [lo, hi] (positive for log scales) mapped onto pixels [p0, p1].
struct Axis {
  AxisScale scale = AxisScale::Linear;
  double lo = 0, hi = 1, p0 = 0, p1 = 1;
  double t(double v) const { return scale == AxisScale::Linear ? v : std::log(v) / std::log(base_of(scale)); }
  double map(double v) const { return p0 + (t(v) - t(lo)) / (t(hi) - t(lo)) * (p1 - p0); }
  bool ok(double v) const { return std::isfinite(v) && (scale == AxisScale::Linear || v > 0); }
};

// The data range of an axis: fixed ends win; linear `nice` ranges are widened to tick values;
// log ranges get a little padding in log space.
void fit(Axis& a, const std::vector<double>& vals, std::optional<double> fix_lo, std::optional<double> fix_hi,
         bool nice) {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (double v : vals)
    if (a.ok(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  const bool log = a.scale != AxisScale::Linear;
  if (!(lo <= hi)) lo = log ? 1 : 0, hi = log ? base_of(a.scale) : 1;
  if (log) {
    const double b = base_of(a.scale);
    if (lo == hi) lo /= b, hi *= b;
    else if (nice) {
      const double pad = std::pow(b, 0.04 * (a.t(hi) - a.t(lo)));
      lo /= pad, hi *= pad;
    }
  } else {
    if (lo == hi) {
      const double d = lo == 0 ? 1 : std::fabs(lo) * 0.1;
      lo -= d, hi += d;
    }
    if (nice) {
      const auto tk = nice_ticks(lo, hi, 5);
      if (tk.size() >= 2) {
        const double step = tk[1] - tk[0];
        lo = std::floor(lo / step + 1e-9) * step;
        hi = std::ceil(hi / step - 1e-9) * step;
      }
    }
  }
  if (fix_lo && (!log || *fix_lo > 0)) lo = *fix_lo;
  if (fix_hi && (!log || *fix_hi > 0)) hi = *fix_hi;
  if (!(hi > lo)) hi = log ? lo * base_of(a.scale) : lo + 1;
  a.lo = lo, a.hi = hi;
}

std::vector<double> ticks_of(const Axis& a, int target) {
  target = std::max(2, target);
  if (a.scale == AxisScale::Linear) return nice_ticks(a.lo, a.hi, target);
  const double b = base_of(a.scale);
  const double e0 = std::ceil(a.t(a.lo) - 1e-9), e1 = std::floor(a.t(a.hi) + 1e-9);
  std::vector<double> t;
  const int step = std::max(1, int(std::ceil((e1 - e0 + 1) / target)));
  for (double e = e0; e <= e1; e += step) t.push_back(std::pow(b, e));
  if (t.size() < 2 && a.scale == AxisScale::Log10) {
    t.clear();
    for (double e = e0 - 1; e <= e1; e++)
      for (double mlt : {1.0, 2.0, 5.0}) {
        const double v = mlt * std::pow(10.0, e);
        if (v >= a.lo * (1 - 1e-9) && v <= a.hi * (1 + 1e-9)) t.push_back(v);
      }
  }
  if (t.size() < 2) {
    t.clear();
    for (double v : nice_ticks(a.lo, a.hi, target))
      if (v > 0) t.push_back(v);
  }
  return t;
}

std::string line(double x1, double y1, double x2, double y2, const char* stroke) {
  return "<line x1=\"" + px(x1) + "\" y1=\"" + px(y1) + "\" x2=\"" + px(x2) + "\" y2=\"" + px(y2) +
         "\" stroke=\"" + stroke + "\"/>";
}

std::string truncate_label(const std::string& s, size_t n) {
  size_t cps = 0;
  for (size_t i = 0; i < s.size(); i++)
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80 && cps++ == n) return s.substr(0, i) + "…";
  return s;
}

}  // namespace

std::string line_chart_svg(const LineChartSpec& spec) {
  std::vector<double> xs, ys;
  for (const Series& s : spec.series) {
    if (s.x.size() != s.y.size())
      data_error("line chart '" + spec.title + "': series '" + s.name + "' has " + std::to_string(s.x.size()) +
                 " x values and " + std::to_string(s.y.size()) + " y values");
    xs.insert(xs.end(), s.x.begin(), s.x.end());
    ys.insert(ys.end(), s.y.begin(), s.y.end());
  }
  const int W = std::max(240, spec.width), H = std::max(160, spec.height);
  Axis ax{spec.x_scale}, ay{spec.y_scale};
  fit(ax, xs, spec.xmin, spec.xmax, false);
  fit(ay, ys, spec.ymin, spec.ymax, true);

  // Layout: title, y tick labels and caption on the left, x ticks and caption below, legend right.
  const int title_h = spec.title.empty() ? 0 : 26;
  const int top = kM + title_h + 6;
  const int bottom = H - kM - 16 - (spec.x_label.empty() ? 0 : 18);
  const std::vector<double> ty = ticks_of(ay, std::max(2, (bottom - top) / 45));
  double ytw = 0;
  for (double v : ty) ytw = std::max(ytw, text_width(fmt_num(v, 4), 10));
  double legend_w = 0;
  for (const Series& s : spec.series) legend_w = std::max(legend_w, text_width(truncate_label(s.name, 28), 11));
  const bool legend = !spec.series.empty() && legend_w > 0;
  const int left = kM + (spec.y_label.empty() ? 0 : 18) + int(std::ceil(ytw)) + 8;
  const int right = W - kM - (legend ? int(std::ceil(legend_w)) + 38 : 0) - 10;
  ax.p0 = left, ax.p1 = std::max(left + 40, right);
  ay.p0 = bottom, ay.p1 = top;
  const std::vector<double> tx =
      ticks_of(ax, std::max(2, int((ax.p1 - ax.p0) / (spec.x_scale == AxisScale::Linear ? 70 : 36))));

  std::string o;
  // Grid, ticks, tick labels.
  o += "<g shape-rendering=\"crispEdges\">\n";
  for (double v : tx) o += line(ax.map(v), top, ax.map(v), bottom, "#e6e6e6") + "\n";
  for (double v : ty) o += line(ax.p0, ay.map(v), ax.p1, ay.map(v), "#e6e6e6") + "\n";
  o += line(ax.p0, bottom, ax.p1, bottom, "#888888") + line(ax.p0, top, ax.p0, bottom, "#888888") + "\n";
  o += "</g>\n<g font-size=\"10\" fill=\"#333333\">\n";
  for (double v : tx)
    o += "<text x=\"" + px(ax.map(v)) + "\" y=\"" + std::to_string(bottom + 14) + "\" text-anchor=\"middle\">" +
         fmt_num(v, 4) + "</text>\n";
  for (double v : ty)
    o += "<text x=\"" + std::to_string(left - 6) + "\" y=\"" + px(ay.map(v)) +
         "\" dy=\"0.35em\" text-anchor=\"end\">" + fmt_num(v, 4) + "</text>\n";
  o += "</g>\n";
  auto scale_note = [](AxisScale s) {
    return s == AxisScale::Log2 ? std::string(" (log₂)") : s == AxisScale::Log10 ? std::string(" (log₁₀)") : "";
  };
  if (!spec.x_label.empty())
    o += "<text x=\"" + px((ax.p0 + ax.p1) / 2) + "\" y=\"" + std::to_string(bottom + 32) +
         "\" font-size=\"11\" fill=\"#333333\" text-anchor=\"middle\">" +
         escape_xml(spec.x_label + scale_note(spec.x_scale)) + "</text>\n";
  if (!spec.y_label.empty()) {
    const double x = kM + 10, y = (top + bottom) / 2.0;
    o += "<text x=\"" + px(x) + "\" y=\"" + px(y) + "\" font-size=\"11\" fill=\"#333333\" text-anchor=\"middle\" transform=\"rotate(-90 " +
         px(x) + " " + px(y) + ")\">" + escape_xml(spec.y_label + scale_note(spec.y_scale)) + "</text>\n";
  }
  if (!spec.title.empty())
    o += "<text x=\"" + std::to_string(kM) + "\" y=\"" + std::to_string(kM + 15) +
         "\" font-size=\"14\" font-weight=\"600\" fill=\"#111111\">" + escape_xml(spec.title) + "</text>\n";

  // Series, clipped to the plot area (a nested <svg> clips without needing an id).
  const double pad = 5;
  o += "<svg x=\"" + px(ax.p0 - pad) + "\" y=\"" + px(top - pad) + "\" width=\"" + px(ax.p1 - ax.p0 + 2 * pad) +
       "\" height=\"" + px(bottom - top + 2 * pad) + "\" viewBox=\"" + px(ax.p0 - pad) + " " + px(top - pad) + " " +
       px(ax.p1 - ax.p0 + 2 * pad) + " " + px(bottom - top + 2 * pad) + "\" overflow=\"hidden\">\n";
  for (size_t i = 0; i < spec.series.size(); i++) {
    const Series& s = spec.series[i];
    const std::string col = escape_xml(s.color.empty() ? series_color(i) : s.color);
    std::string d;
    bool pen = false;
    for (size_t k = 0; k < s.x.size(); k++) {
      if (!ax.ok(s.x[k]) || !ay.ok(s.y[k])) {
        pen = false;
        continue;
      }
      d += (pen ? "L" : "M") + px(ax.map(s.x[k])) + " " + px(ay.map(s.y[k]));
      pen = true;
    }
    o += "<g>";
    if (!s.name.empty()) o += "<title>" + escape_xml(s.name) + "</title>";
    if (!d.empty())
      o += "<path d=\"" + d + "\" fill=\"none\" stroke=\"" + col + "\" stroke-width=\"2\" stroke-linejoin=\"round\"" +
           (s.dashed ? " stroke-dasharray=\"6 4\"" : "") + "/>\n";
    if (s.markers && s.x.size() <= 80)
      for (size_t k = 0; k < s.x.size(); k++) {
        if (!ax.ok(s.x[k]) || !ay.ok(s.y[k])) continue;
        o += "<circle cx=\"" + px(ax.map(s.x[k])) + "\" cy=\"" + px(ay.map(s.y[k])) + "\" r=\"3.2\" fill=\"" + col +
             "\" stroke=\"#ffffff\" stroke-width=\"1\"><title>" +
             escape_xml(s.name + ": x = " + fmt_num(s.x[k], 6) + ", y = " + fmt_num(s.y[k], 6)) +
             "</title></circle>\n";
      }
    o += "</g>\n";
  }
  o += "</svg>\n";

  if (legend) {
    const double lx = ax.p1 + 16;
    o += "<g font-size=\"11\" fill=\"#222222\">\n";
    for (size_t i = 0; i < spec.series.size(); i++) {
      const Series& s = spec.series[i];
      const std::string col = escape_xml(s.color.empty() ? series_color(i) : s.color);
      const double y = top + 8 + 18.0 * i;
      o += "<line x1=\"" + px(lx) + "\" y1=\"" + px(y) + "\" x2=\"" + px(lx + 20) + "\" y2=\"" + px(y) +
           "\" stroke=\"" + col + "\" stroke-width=\"2\"" + (s.dashed ? " stroke-dasharray=\"6 4\"" : "") + "/>";
      if (s.markers) o += "<circle cx=\"" + px(lx + 10) + "\" cy=\"" + px(y) + "\" r=\"3.2\" fill=\"" + col + "\"/>";
      o += "<text x=\"" + px(lx + 26) + "\" y=\"" + px(y) + "\" dy=\"0.35em\">" +
           escape_xml(truncate_label(s.name, 28)) + "</text>\n";
    }
    o += "</g>\n";
  }
  const double w = std::max(double(W), 2 * kM + text_width(spec.title, 14));
  return svg_open(int(std::ceil(w)), H, spec.title) + o + "</svg>\n";
}

std::string bar_chart_svg(const BarChartSpec& spec) {
  if (spec.labels.size() != spec.values.size())
    data_error("bar chart '" + spec.title + "': " + std::to_string(spec.labels.size()) + " labels for " +
               std::to_string(spec.values.size()) + " values");
  if (!spec.colors.empty() && spec.colors.size() != spec.values.size())
    data_error("bar chart '" + spec.title + "': " + std::to_string(spec.colors.size()) + " colours for " +
               std::to_string(spec.values.size()) + " values");
  const size_t n = spec.values.size();
  const int W = std::max(240, spec.width);
  const int row = std::max(8, spec.bar_px);
  const double fs = std::clamp(row * 0.6, 8.0, 11.0);

  double lo = 0, hi = 0, lab_w = 0, val_w = 0;
  bool neg = false, pos = false;
  std::vector<std::string> labels(n), texts(n);
  for (size_t i = 0; i < n; i++) {
    const double v = spec.values[i];
    labels[i] = truncate_label(spec.labels[i], 40);
    texts[i] = fmt_num(v, spec.sig);
    lab_w = std::max(lab_w, text_width(labels[i], fs));
    val_w = std::max(val_w, text_width(texts[i], 10));
    if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v), neg = neg || v < 0, pos = pos || v > 0;
  }
  if (!(hi > lo)) hi = 1;
  const int title_h = spec.title.empty() ? 0 : 26;
  const int top = kM + title_h + 4;
  const double left = kM + std::ceil(lab_w) + 10;
  const double room = std::ceil(val_w) + 8;
  const double a0 = left + (neg ? room : 0), a1 = W - kM - (pos || !neg ? room : 0);
  Axis ax{AxisScale::Linear, lo, hi, a0, std::max(a0 + 20, a1)};
  const int bottom = top + row * int(n);

  std::string o;
  const std::vector<double> tx = ticks_of(ax, std::max(2, int((ax.p1 - ax.p0) / 80)));
  o += "<g shape-rendering=\"crispEdges\">\n";
  for (double v : tx) o += line(ax.map(v), top, ax.map(v), bottom, v == 0 ? "#888888" : "#ececec") + "\n";
  o += line(ax.p0, bottom, ax.p1, bottom, "#888888") + "\n</g>\n";
  o += "<g font-size=\"10\" fill=\"#333333\" text-anchor=\"middle\">\n";
  for (double v : tx)
    o += "<text x=\"" + px(ax.map(v)) + "\" y=\"" + std::to_string(bottom + 14) + "\">" + fmt_num(v, 4) + "</text>\n";
  o += "</g>\n";

  const double zero = ax.map(0);
  const double bh = std::max(4.0, std::round(row * 0.7));
  for (size_t i = 0; i < n; i++) {
    const double v = spec.values[i];
    const double yc = top + (i + 0.5) * row;
    o += "<g><title>" + escape_xml(spec.labels[i] + ": " + fmt_num(v, 6)) + "</title>";
    o += "<text x=\"" + px(left - 8) + "\" y=\"" + px(yc) + "\" dy=\"0.35em\" font-size=\"" + px(fs) +
         "\" fill=\"#222222\" text-anchor=\"end\" xml:space=\"preserve\">" + escape_xml(labels[i]) + "</text>";
    if (std::isfinite(v)) {
      const double x = ax.map(v);
      const std::string col = spec.colors.empty() || spec.colors[i].empty() ? "#4c78a8" : escape_xml(spec.colors[i]);
      o += "<rect x=\"" + px(std::min(x, zero)) + "\" y=\"" + px(yc - bh / 2) + "\" width=\"" +
           px(std::max(std::fabs(x - zero), v != 0 ? 1.0 : 0.0)) + "\" height=\"" + px(bh) + "\" fill=\"" + col + "\"/>";
      o += "<text x=\"" + px(v < 0 ? x - 4 : x + 4) + "\" y=\"" + px(yc) + "\" dy=\"0.35em\" font-size=\"10\" fill=\"#333333\"" +
           (v < 0 ? " text-anchor=\"end\"" : "") + ">" + texts[i] + "</text>";
    } else {
      o += "<text x=\"" + px(zero + 4) + "\" y=\"" + px(yc) + "\" dy=\"0.35em\" font-size=\"10\" fill=\"#999999\">" +
           texts[i] + "</text>";
    }
    o += "</g>\n";
  }
  int h = bottom + 20;
  if (!spec.value_label.empty()) {
    o += "<text x=\"" + px((ax.p0 + ax.p1) / 2) + "\" y=\"" + std::to_string(bottom + 32) +
         "\" font-size=\"11\" fill=\"#333333\" text-anchor=\"middle\">" + escape_xml(spec.value_label) + "</text>\n";
    h += 18;
  }
  if (!spec.title.empty())
    o += "<text x=\"" + std::to_string(kM) + "\" y=\"" + std::to_string(kM + 15) +
         "\" font-size=\"14\" font-weight=\"600\" fill=\"#111111\">" + escape_xml(spec.title) + "</text>\n";
  const double w = std::max(double(W), 2 * kM + text_width(spec.title, 14));
  return svg_open(int(std::ceil(w)), h + kM, spec.title) + o + "</svg>\n";
}

}  // namespace qkv::report
