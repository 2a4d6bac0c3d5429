// Text helpers, colour maps, heatmaps and grids of heatmaps (see include/qkv/report/svg.hpp).
// GCC 12 reports a false -Wrestrict inside std::string's operator+ (GCC bug 105651) for the
// `"<tag attr=\"" + value` chains below; it is a compiler bug, not a real overlap.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic ignored "-Wrestrict"
#endif
#include "qkv/report/svg.hpp"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <limits>

#include "qkv/error.hpp"

namespace qkv::report {

namespace svg_detail {

std::string px(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  std::string s(buf);
  if (s.size() > 2 && s.compare(s.size() - 2, 2, ".0") == 0) s.resize(s.size() - 2);
  if (s == "-0") s = "0";
  return s;
}

std::string svg_open(int width, int height, const std::string& label) {
  std::string o = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(width) + "\" height=\"" +
                  std::to_string(height) + "\" viewBox=\"0 0 " + std::to_string(width) + " " +
                  std::to_string(height) + "\" font-family=\"" + kFontFamily + "\" role=\"img\"";
  if (!label.empty()) o += " aria-label=\"" + escape_xml(label) + "\"";
  return o + ">\n";
}

}  // namespace svg_detail

using namespace svg_detail;

// ---- text ------------------------------------------------------------------------------------------

namespace {

// Decodes one UTF-8 sequence at s[i]; returns the code point and advances i, or returns -1 (and
// advances past one byte) when the bytes there are not a valid, shortest-form encoding.
long decode_utf8(std::string_view s, size_t& i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) return s[i++], b0;
  int len = 0;
  long cp = 0, min = 0;
  if ((b0 & 0xE0) == 0xC0) len = 2, cp = b0 & 0x1F, min = 0x80;
  else if ((b0 & 0xF0) == 0xE0) len = 3, cp = b0 & 0x0F, min = 0x800;
  else if ((b0 & 0xF8) == 0xF0) len = 4, cp = b0 & 0x07, min = 0x10000;
  else return i++, -1;
  if (i + len > s.size()) return i++, -1;
  for (int k = 1; k < len; k++) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) return i++, -1;
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i++, -1;
  i += len;
  return cp;
}

bool xml_char_ok(long cp) {
  return cp == 0x9 || cp == 0xA || cp == 0xD || (cp >= 0x20 && cp <= 0xD7FF) ||
         (cp >= 0xE000 && cp <= 0xFFFD) || (cp >= 0x10000 && cp <= 0x10FFFF);
}

}  // namespace

std::string escape_xml(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 16);
  size_t i = 0;
  while (i < s.size()) {
    const size_t start = i;
    const long cp = decode_utf8(s, i);
    if (cp < 0 || !xml_char_ok(cp)) {
      out += "\xEF\xBF\xBD";  // U+FFFD
      continue;
    }
    switch (cp) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out.append(s.substr(start, i - start));
    }
  }
  return out;
}

double text_width(std::string_view s, double font_px) {
  double w = 0;
  size_t i = 0;
  while (i < s.size()) {
    const long cp = decode_utf8(s, i);
    if (cp >= 0x1100 && cp != 0x2423 && !(cp >= 0x2000 && cp <= 0x206F)) w += 1.0;  // wide (CJK, emoji)
    else if (cp == 'i' || cp == 'l' || cp == '.' || cp == ',' || cp == ' ' || cp == '1') w += 0.38;
    else if ((cp >= 'A' && cp <= 'Z') || cp == 'm' || cp == 'w') w += 0.72;
    else w += 0.58;
  }
  return w * font_px;
}

std::string fmt_num(double v, int sig) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  if (std::fabs(v) < 1e6 && v == std::round(v)) {
    std::snprintf(buf, sizeof buf, "%.0f", v);
  } else {
    std::snprintf(buf, sizeof buf, "%.*g", std::max(1, sig), v);
  }
  std::string s(buf);
  // "1e+04" -> "1e4", "2.5e-05" -> "2.5e-5"
  if (const size_t e = s.find('e'); e != std::string::npos) {
    std::string mant = s.substr(0, e), ex = s.substr(e + 1);
    const bool neg = !ex.empty() && ex[0] == '-';
    if (!ex.empty() && (ex[0] == '+' || ex[0] == '-')) ex.erase(0, 1);
    while (ex.size() > 1 && ex[0] == '0') ex.erase(0, 1);
    s = mant + "e" + (neg ? "-" : "") + ex;
  }
  if (s == "-0") s = "0";
  return s;
}

std::vector<double> nice_ticks(double lo, double hi, int target) {
  std::vector<double> t;
  if (!std::isfinite(lo) || !std::isfinite(hi)) return t;
  if (lo > hi) std::swap(lo, hi);
  if (hi - lo <= 0) return {lo};
  const double raw = (hi - lo) / std::max(1, target);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double f = raw / mag;
  const double step = (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * mag;
  const double eps = step * 1e-9;
  for (double k = std::ceil((lo - eps) / step); k * step <= hi + eps; k += 1) {
    double v = k * step;
    if (std::fabs(v) < eps) v = 0;
    t.push_back(v);
    if (t.size() > 1000) break;
  }
  return t;
}

// ---- colours ---------------------------------------------------------------------------------------

std::string Rgb::hex() const {
  char buf[8];
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", r, g, b);
  return buf;
}

double Rgb::luminance() const {
  auto lin = [](uint8_t c) {
    const double x = c / 255.0;
    return x <= 0.04045 ? x / 12.92 : std::pow((x + 0.055) / 1.055, 2.4);
  };
  return 0.2126 * lin(r) + 0.7152 * lin(g) + 0.0722 * lin(b);
}

namespace {

template <size_t N>
Rgb interpolate(const uint32_t (&stops)[N], double t) {  // t in [0, 1]
  const double p = std::clamp(t, 0.0, 1.0) * (N - 1);
  const size_t k = std::min(static_cast<size_t>(p), N - 2);
  const double f = p - k;
  auto ch = [&](int shift) {
    const double a = (stops[k] >> shift) & 0xFF, b = (stops[k + 1] >> shift) & 0xFF;
    return static_cast<uint8_t>(std::lround(a + (b - a) * f));
  };
  return {ch(16), ch(8), ch(0)};
}

constexpr uint32_t kViridis[] = {0x440154, 0x472c7a, 0x3b518b, 0x2c718e, 0x21908d,
                                 0x27ad81, 0x5cc863, 0xaadc32, 0xfde725};
constexpr uint32_t kRdBu[] = {0x053061, 0x2166ac, 0x4393c3, 0x92c5de, 0xf7f7f7,
                              0xf4a582, 0xd6604d, 0xb2182b, 0x67001f};
constexpr const char* kOkabeIto[] = {"#0072b2", "#e69f00", "#009e73", "#d55e00",
                                     "#cc79a7", "#56b4e9", "#000000", "#b8a000"};

}  // namespace

Rgb sequential_color(double t) { return interpolate(kViridis, std::isnan(t) ? 0.0 : t); }
Rgb diverging_color(double t) { return interpolate(kRdBu, std::isnan(t) ? 0.5 : (t + 1) / 2); }
std::string series_color(size_t i) { return kOkabeIto[i % std::size(kOkabeIto)]; }

Rgb ColorRange::color(double v) const {
  if (scale == ColorScale::Diverging) {
    // Centred on 0 when the range straddles it; otherwise linear over [vmin, vmax] -> [-1, 1].
    if (vmin < 0 && vmax > 0) return diverging_color(v < 0 ? -v / vmin : v / vmax);
    return diverging_color(2 * (v - vmin) / (vmax - vmin) - 1);
  }
  return sequential_color((v - vmin) / (vmax - vmin));
}

namespace {

ColorRange resolve(ColorScale scale, std::optional<double> fix_lo, std::optional<double> fix_hi,
                   const std::vector<const HeatmapSpec*>& specs) {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo, absmax = 0;
  for (const HeatmapSpec* s : specs)
    for (double v : s->values)
      if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v), absmax = std::max(absmax, std::fabs(v));
  const bool any = lo <= hi;
  if (!any) lo = 0, hi = 1;
  ColorRange r;
  r.scale = scale == ColorScale::Auto ? (lo < 0 || (fix_lo && *fix_lo < 0) ? ColorScale::Diverging
                                                                           : ColorScale::Sequential)
                                      : scale;
  if (r.scale == ColorScale::Diverging) {
    const double m = absmax > 0 ? absmax : 1;
    r.vmin = -m, r.vmax = m;
  } else if (lo >= 0 && hi <= 1) {
    r.vmin = 0, r.vmax = 1;
  } else {
    r.vmin = lo, r.vmax = hi;
  }
  if (fix_lo) r.vmin = *fix_lo;
  if (fix_hi) r.vmax = *fix_hi;
  if (!(r.vmax > r.vmin)) {  // degenerate: all equal, or a bad fixed range
    const double c = std::isfinite(r.vmin) ? r.vmin : 0;
    const double d = std::max(1e-12, std::fabs(c) * 0.5 + (c == 0 ? 1 : 0));
    r.vmin = c - d, r.vmax = c + d;
    if (fix_lo && !fix_hi) r.vmin = c, r.vmax = c + 2 * d;
    if (fix_hi && !fix_lo) r.vmax = c, r.vmin = c - 2 * d;
  }
  return r;
}

void check(const HeatmapSpec& s, const std::string& what) {
  if (s.values.size() != s.rows * s.cols)
    data_error(what + ": " + std::to_string(s.values.size()) + " values for a " + std::to_string(s.rows) +
               "×" + std::to_string(s.cols) + " matrix");
  if (!s.row_labels.empty() && s.row_labels.size() != s.rows)
    data_error(what + ": " + std::to_string(s.row_labels.size()) + " row labels for " +
               std::to_string(s.rows) + " rows");
  if (!s.col_labels.empty() && s.col_labels.size() != s.cols)
    data_error(what + ": " + std::to_string(s.col_labels.size()) + " column labels for " +
               std::to_string(s.cols) + " columns");
}

// Value written inside a cell: 2 decimals for |v| < 10, fewer beyond.
std::string cell_text(double v) {
  char buf[32];
  const double a = std::fabs(v);
  std::snprintf(buf, sizeof buf, a < 10 ? "%.2f" : a < 100 ? "%.1f" : "%.0f", v);
  std::string s(buf);
  if (s.find_first_not_of("-0.") == std::string::npos && s[0] == '-') s.erase(0, 1);
  return s;
}

struct Square {
  double x, y, s;
};

// A diagonal hatch (lines x + y = k·6) clipped to each square: continuous across adjacent masked cells.
void hatch(std::string& o, const std::vector<Square>& sq) {
  if (sq.empty()) return;
  constexpr double sp = 6;
  std::string d;
  for (const Square& q : sq) {
    for (double c = std::ceil((q.x + q.y) / sp) * sp; c <= q.x + q.y + 2 * q.s; c += sp) {
      const double xa = std::max(q.x, c - q.y - q.s), xb = std::min(q.x + q.s, c - q.y);
      if (xb - xa < 0.5) continue;
      d += "M" + px(xa) + " " + px(c - xa) + "L" + px(xb) + " " + px(c - xb);
    }
  }
  if (!d.empty()) o += "<path d=\"" + d + "\" stroke=\"#b3b3b3\" stroke-width=\"1\" fill=\"none\"/>\n";
}

std::string tooltip(const HeatmapSpec& s, size_t r, size_t c) {
  const double v = s.at(r, c);
  std::string t = s.row_labels.empty() ? "row " + std::to_string(r) : s.row_labels[r];
  t += " → ";
  t += s.col_labels.empty() ? "col " + std::to_string(c) : s.col_labels[c];
  t += ": ";
  t += std::isfinite(v) ? fmt_num(v, 4) : "masked (" + fmt_num(v) + ")";
  if (!s.row_labels.empty() || !s.col_labels.empty())
    t += " (row " + std::to_string(r) + ", col " + std::to_string(c) + ")";
  return escape_xml(t);
}

// The cells of `s` at (x0, y0), `cell` px each. Titles: one <title> per cell; otherwise runs of equal
// colour in a row are merged into one rect. Masked cells: grey with a hatch.
void draw_cells(std::string& o, const HeatmapSpec& s, const ColorRange& range, int x0, int y0, int cell,
                bool titles, bool annotate) {
  std::vector<Square> masked;
  std::vector<std::string> fills(s.cols);
  o += "<g shape-rendering=\"crispEdges\">\n";
  for (size_t r = 0; r < s.rows; r++) {
    for (size_t c = 0; c < s.cols; c++) {
      const double v = s.at(r, c);
      fills[c] = std::isfinite(v) ? range.color(v).hex() : kMaskedFill;
      if (!std::isfinite(v)) masked.push_back({double(x0 + int(c) * cell), double(y0 + int(r) * cell), double(cell)});
    }
    const int y = y0 + int(r) * cell;
    for (size_t c = 0; c < s.cols;) {
      size_t e = c + 1;
      if (!titles)
        while (e < s.cols && fills[e] == fills[c]) e++;
      o += "<rect x=\"" + std::to_string(x0 + int(c) * cell) + "\" y=\"" + std::to_string(y) +
           "\" width=\"" + std::to_string(int(e - c) * cell) + "\" height=\"" + std::to_string(cell) +
           "\" fill=\"" + fills[c] + "\"";
      if (titles) o += "><title>" + tooltip(s, r, c) + "</title></rect>\n";
      else o += "/>\n";
      c = e;
    }
  }
  o += "</g>\n";
  if (cell >= 4) hatch(o, masked);
  if (annotate) {
    const double fs = std::min(11.0, std::floor(cell * 0.3));
    std::string t;
    for (size_t r = 0; r < s.rows; r++)
      for (size_t c = 0; c < s.cols; c++) {
        const double v = s.at(r, c);
        if (!std::isfinite(v)) continue;
        const bool dark = range.color(v).luminance() < 0.33;
        t += "<text x=\"" + px(x0 + (c + 0.5) * cell) + "\" y=\"" + px(y0 + (r + 0.5) * cell) +
             "\" dy=\"0.35em\" fill=\"" + (dark ? "#ffffff" : "#1a1a1a") + "\">" + cell_text(v) + "</text>\n";
      }
    o += "<g font-size=\"" + px(fs) + "\" text-anchor=\"middle\" pointer-events=\"none\">\n" + t + "</g>\n";
  }
  o += "<rect x=\"" + std::to_string(x0) + "\" y=\"" + std::to_string(y0) + "\" width=\"" +
       std::to_string(int(s.cols) * cell) + "\" height=\"" + std::to_string(int(s.rows) * cell) +
       "\" fill=\"none\" stroke=\"#9a9a9a\" stroke-width=\"1\" shape-rendering=\"crispEdges\"/>\n";
}

bool annotations_fit(const HeatmapSpec& s, int cell) {
  if (!s.show_values || cell < 24) return false;
  const double fs = std::min(11.0, std::floor(cell * 0.3));
  for (double v : s.values)
    if (std::isfinite(v) && text_width(cell_text(v), fs) > cell - 4) return false;
  return true;
}

bool any_masked(const std::vector<const HeatmapSpec*>& specs) {
  for (const HeatmapSpec* s : specs)
    for (double v : s->values)
      if (!std::isfinite(v)) return true;
  return false;
}

// A vertical colour bar with ticks at (x, y), `h` px tall; returns the width it used. With `masked`,
// a hatched "masked" swatch goes below it (see colorbar_extra_height).
constexpr int kBarW = 12;
constexpr int kSwatchH = 26;
int colorbar(std::string& o, const ColorRange& range, int x, int y, int h, const std::string& label,
             bool masked) {
  const int n = std::clamp(h / 2, 2, 96);
  o += "<g shape-rendering=\"crispEdges\">\n";
  for (int i = 0; i < n; i++) {  // top = vmax
    const double t = (n - 1 - i + 0.5) / n;
    const double v = range.vmin + t * (range.vmax - range.vmin);
    const double y0 = y + double(h) * i / n, y1 = y + double(h) * (i + 1) / n;
    o += "<rect x=\"" + std::to_string(x) + "\" y=\"" + px(y0) + "\" width=\"" + std::to_string(kBarW) +
         "\" height=\"" + px(y1 - y0 + (i + 1 < n ? 0.5 : 0)) + "\" fill=\"" + range.color(v).hex() + "\"/>\n";
  }
  o += "<rect x=\"" + std::to_string(x) + "\" y=\"" + std::to_string(y) + "\" width=\"" +
       std::to_string(kBarW) + "\" height=\"" + std::to_string(h) +
       "\" fill=\"none\" stroke=\"#9a9a9a\"/>\n</g>\n";
  std::vector<double> ticks = nice_ticks(range.vmin, range.vmax, std::max(2, h / 40));
  if (ticks.size() < 2) ticks = {range.vmin, range.vmax};
  double tw = 0;
  o += "<g font-size=\"10\" fill=\"#333333\">\n";
  for (double t : ticks) {
    const double ty = y + (range.vmax - t) / (range.vmax - range.vmin) * h;
    const std::string s = fmt_num(t, 3);
    tw = std::max(tw, text_width(s, 10));
    o += "<line x1=\"" + std::to_string(x + kBarW) + "\" x2=\"" + std::to_string(x + kBarW + 4) +
         "\" y1=\"" + px(ty) + "\" y2=\"" + px(ty) + "\" stroke=\"#555555\"/>";
    o += "<text x=\"" + std::to_string(x + kBarW + 7) + "\" y=\"" + px(ty) + "\" dy=\"0.35em\">" + s +
         "</text>\n";
  }
  o += "</g>\n";
  int w = kBarW + 7 + int(std::ceil(tw));
  if (!label.empty()) {
    const double lx = x + w + 14, ly = y + h / 2.0;
    o += "<text x=\"" + px(lx) + "\" y=\"" + px(ly) + "\" font-size=\"11\" fill=\"#333333\" text-anchor=\"middle\" transform=\"rotate(90 " +
         px(lx) + " " + px(ly) + ")\">" + escape_xml(label) + "</text>\n";
    w += 20;
    w = std::max(w, kBarW);
  }
  if (masked) {
    const int sy = y + h + 10;
    o += "<rect x=\"" + std::to_string(x) + "\" y=\"" + std::to_string(sy) + "\" width=\"" +
         std::to_string(kBarW) + "\" height=\"" + std::to_string(kBarW) + "\" fill=\"" + kMaskedFill +
         "\" stroke=\"#9a9a9a\" shape-rendering=\"crispEdges\"/>\n";
    hatch(o, {{double(x), double(sy), double(kBarW)}});
    o += "<text x=\"" + std::to_string(x + kBarW + 5) + "\" y=\"" + px(sy + kBarW / 2.0) +
         "\" dy=\"0.35em\" font-size=\"10\" fill=\"#333333\">masked</text>\n";
    w = std::max(w, kBarW + 5 + int(text_width("masked", 10)) + 2);
  }
  return w;
}

// Cuts a label to `n` code points, marking the cut with "…".
std::string truncate(const std::string& s, size_t n) {
  size_t cps = 0;
  for (size_t i = 0; i < s.size(); i++)
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80 && cps++ == n) return s.substr(0, i) + "…";
  return s;
}

constexpr size_t kMaxLabel = 16;  // code points shown of a row/column label (the tooltip has all)

// A compact panel: cells, border, caption below; returns its height.
int compact_panel(std::string& o, const HeatmapSpec& s, const ColorRange& range, int x, int y, int box,
                  int cell) {
  const int mw = cell * int(s.cols), mh = cell * int(s.rows);
  const int mx = x + (box - mw) / 2;
  const bool titles = s.rows * s.cols <= 1024;
  o += "<g>";
  if (!s.title.empty()) o += "<title>" + escape_xml(s.title) + "</title>";
  o += "\n";
  draw_cells(o, s, range, mx, y, cell, titles, false);
  o += "</g>\n";
  int h = mh;
  if (!s.title.empty()) {
    const size_t fit = std::max<size_t>(3, size_t(box / (0.6 * 10)));
    o += "<text x=\"" + px(x + box / 2.0) + "\" y=\"" + std::to_string(y + mh + 12) +
         "\" font-size=\"10\" fill=\"#333333\" text-anchor=\"middle\">" + escape_xml(truncate(s.title, fit)) +
         "</text>\n";
    h += 16;
  }
  return h;
}

int compact_cell(const HeatmapSpec& s, int box) {
  return std::max(1, box / int(std::max<size_t>(1, std::max(s.rows, s.cols))));
}

}  // namespace

void HeatmapSpec::set_values(const std::vector<std::vector<double>>& m) {
  rows = m.size();
  cols = m.empty() ? 0 : m[0].size();
  values.clear();
  values.reserve(rows * cols);
  for (size_t r = 0; r < rows; r++) {
    if (m[r].size() != cols)
      data_error("heatmap: row " + std::to_string(r) + " has " + std::to_string(m[r].size()) +
                 " values, row 0 has " + std::to_string(cols));
    values.insert(values.end(), m[r].begin(), m[r].end());
  }
}

ColorRange resolve_range(const HeatmapSpec& spec) { return resolve(spec.scale, spec.vmin, spec.vmax, {&spec}); }

std::string heatmap_svg(const HeatmapSpec& s) {
  check(s, "heatmap" + (s.title.empty() ? std::string() : " '" + s.title + "'"));
  const ColorRange range = resolve_range(s);
  constexpr int m = 8;  // outer margin
  std::string o;

  if (s.rows == 0 || s.cols == 0) {
    const int w = std::max(160, int(2 * m + text_width(s.title, 14)));
    o += "<text x=\"" + std::to_string(m) + "\" y=\"" + std::to_string(m + 14) +
         "\" font-size=\"14\" font-weight=\"600\">" + escape_xml(s.title) + "</text>\n";
    o += "<text x=\"" + std::to_string(m) + "\" y=\"" + std::to_string(m + 38) +
         "\" font-size=\"11\" fill=\"#666666\">(empty matrix)</text>\n";
    return svg_open(w, 56, s.title) + o + "</svg>\n";
  }

  if (s.compact) {
    const int cell = s.cell_px > 0 ? s.cell_px : compact_cell(s, s.compact_px);
    const int box = std::max(cell * int(std::max(s.rows, s.cols)), s.cell_px > 0 ? 0 : s.compact_px);
    const int h = compact_panel(o, s, range, 2, 2, box, cell);
    return svg_open(box + 4, h + 4, s.title) + o + "</svg>\n";
  }

  const int cell = s.cell_px > 0 ? s.cell_px
                                 : std::clamp(int(520 / std::max(s.rows, s.cols)), 4, 44);
  const double fs = cell >= 12 ? 11 : 10;
  const int step_r = std::max(1, int(std::ceil((fs + 2) / cell)));
  const bool steep = cell < 20;  // column labels at -90° (dense) or -45°
  const int step_c = std::max(1, int(std::ceil((fs + 2) / (steep ? cell : cell * 0.7071))));
  const int mw = cell * int(s.cols), mh = cell * int(s.rows);

  std::vector<std::string> rl(s.rows), cl(s.cols);
  double rl_w = 0, cl_w = 0;
  if (!s.row_labels.empty())
    for (size_t r = 0; r < s.rows; r += step_r)
      rl[r] = truncate(s.row_labels[r], kMaxLabel), rl_w = std::max(rl_w, text_width(rl[r], fs));
  std::vector<double> cw(s.cols, 0);
  if (!s.col_labels.empty())
    for (size_t c = 0; c < s.cols; c += step_c)
      cl[c] = truncate(s.col_labels[c], kMaxLabel), cw[c] = text_width(cl[c], fs), cl_w = std::max(cl_w, cw[c]);

  const int title_h = s.title.empty() ? 0 : 24;
  const int col_title_h = s.col_title.empty() ? 0 : 16;
  const int col_lab_h = s.col_labels.empty() ? 0 : int(std::ceil(steep ? cl_w : (cl_w + fs) * 0.7071)) + 6;
  const int row_title_w = s.row_title.empty() ? 0 : 18;
  const int row_lab_w = s.row_labels.empty() ? 0 : int(std::ceil(rl_w)) + 6;
  const int left = m + row_title_w + row_lab_w;
  const int top = m + title_h + col_title_h + col_lab_h;

  // Matrix, labels, titles.
  draw_cells(o, s, range, left, top, cell, true, annotations_fit(s, cell));
  double right = left + mw;
  if (!s.row_labels.empty()) {
    o += "<g font-size=\"" + px(fs) + "\" fill=\"#222222\" text-anchor=\"end\">\n";
    for (size_t r = 0; r < s.rows; r += step_r)
      o += "<text x=\"" + std::to_string(left - 4) + "\" y=\"" + px(top + (r + 0.5) * cell) +
           "\" dy=\"0.35em\" xml:space=\"preserve\">" + escape_xml(rl[r]) + "</text>\n";
    o += "</g>\n";
  }
  if (!s.col_labels.empty()) {
    o += "<g font-size=\"" + px(fs) + "\" fill=\"#222222\">\n";
    for (size_t c = 0; c < s.cols; c += step_c) {
      const double cx = left + (c + 0.5) * cell;
      const double x = steep ? cx + fs * 0.35 : cx - fs * 0.2, y = top - 4;
      right = std::max(right, steep ? x : x + (cw[c] + fs * 0.5) * 0.7071);
      o += "<text x=\"" + px(x) + "\" y=\"" + px(y) + "\" transform=\"rotate(" + (steep ? "-90 " : "-45 ") +
           px(x) + " " + px(y) + ")\" xml:space=\"preserve\">" + escape_xml(cl[c]) + "</text>\n";
    }
    o += "</g>\n";
  }
  if (!s.title.empty())
    o += "<text x=\"" + std::to_string(m) + "\" y=\"" + std::to_string(m + 15) +
         "\" font-size=\"14\" font-weight=\"600\" fill=\"#111111\">" + escape_xml(s.title) + "</text>\n";
  if (!s.col_title.empty())
    o += "<text x=\"" + px(left + mw / 2.0) + "\" y=\"" + std::to_string(m + title_h + 11) +
         "\" font-size=\"11\" font-style=\"italic\" fill=\"#555555\" text-anchor=\"middle\">" +
         escape_xml(s.col_title) + " →</text>\n";
  if (!s.row_title.empty()) {
    const double x = m + 11, y = top + mh / 2.0;
    o += "<text x=\"" + px(x) + "\" y=\"" + px(y) + "\" font-size=\"11\" font-style=\"italic\" fill=\"#555555\" text-anchor=\"middle\" transform=\"rotate(-90 " +
         px(x) + " " + px(y) + ")\">" + escape_xml(s.row_title) + " →</text>\n";
  }

  // Colour bar beside the matrix.
  const bool masked = any_masked({&s});
  const int bar_h = std::max(mh, 120);
  const int bar_x = left + mw + 16;
  const int bw = colorbar(o, range, bar_x, top, bar_h, s.value_label, masked);
  right = std::max(right, double(bar_x + bw));
  const double w = std::max(right + m, 2 * m + text_width(s.title, 14));
  const int h = top + bar_h + (masked ? kSwatchH : 6) + m;
  return svg_open(int(std::ceil(w)), h, s.title) + o + "</svg>\n";
}

std::string grid_svg(const GridSpec& g) {
  std::vector<const HeatmapSpec*> ps;
  for (size_t i = 0; i < g.panels.size(); i++) {
    check(g.panels[i], "grid panel " + std::to_string(i));
    ps.push_back(&g.panels[i]);
  }
  constexpr int m = 8, gap = 14;
  const size_t n = g.panels.size();
  size_t cols = g.cols ? g.cols : !g.col_titles.empty() ? g.col_titles.size()
                                                       : size_t(std::ceil(std::sqrt(double(n))));
  cols = std::max<size_t>(1, cols);
  const size_t rows = (n + cols - 1) / cols;
  const int box = std::max(8, g.panel_px);
  bool captions = false;
  for (const auto& p : g.panels) captions = captions || !p.title.empty();
  const int cap_h = captions ? 16 : 0;

  const int title_h = g.title.empty() ? 0 : 24;
  const int col_t_h = g.col_titles.empty() ? 0 : 16;
  double rt_w = 0;
  for (const auto& t : g.row_titles) rt_w = std::max(rt_w, text_width(t, 11));
  const int row_t_w = g.row_titles.empty() ? 0 : int(std::ceil(rt_w)) + 10;
  const int left = m + row_t_w, top = m + title_h + col_t_h;
  const int grid_w = int(cols) * box + int(cols - 1) * gap;
  const int grid_h = int(rows) * (box + cap_h) + int(rows ? rows - 1 : 0) * gap;

  std::string o;
  const ColorRange shared = resolve(g.scale, g.vmin, g.vmax, ps);
  for (size_t i = 0; i < n; i++) {
    const auto& p = g.panels[i];
    const int x = left + int(i % cols) * (box + gap), y = top + int(i / cols) * (box + cap_h + gap);
    if (p.rows == 0 || p.cols == 0) continue;
    const ColorRange r = g.shared_scale ? shared : resolve_range(p);
    compact_panel(o, p, r, x, y, box, compact_cell(p, box));
  }
  o += "<g font-size=\"11\" fill=\"#333333\">\n";
  for (size_t c = 0; c < std::min(cols, g.col_titles.size()); c++)
    o += "<text x=\"" + px(left + c * (box + gap) + box / 2.0) + "\" y=\"" + std::to_string(top - 5) +
         "\" text-anchor=\"middle\" font-weight=\"600\">" + escape_xml(g.col_titles[c]) + "</text>\n";
  for (size_t r = 0; r < std::min(rows, g.row_titles.size()); r++)
    o += "<text x=\"" + std::to_string(left - 8) + "\" y=\"" + px(top + r * (box + cap_h + gap) + box / 2.0) +
         "\" dy=\"0.35em\" text-anchor=\"end\" font-weight=\"600\">" + escape_xml(g.row_titles[r]) + "</text>\n";
  o += "</g>\n";
  if (!g.title.empty())
    o += "<text x=\"" + std::to_string(m) + "\" y=\"" + std::to_string(m + 15) +
         "\" font-size=\"14\" font-weight=\"600\" fill=\"#111111\">" + escape_xml(g.title) + "</text>\n";

  double right = left + grid_w;
  int h = top + grid_h + m;
  if (g.shared_scale && n > 0) {
    const bool masked = any_masked(ps);
    const int bar_h = std::clamp(grid_h, 80, 360);
    const int bar_x = left + grid_w + 18;
    right = bar_x + colorbar(o, shared, bar_x, top, bar_h, g.value_label, masked);
    h = std::max(h, top + bar_h + (masked ? kSwatchH : 6) + m);
  }
  const double w = std::max(right + m, 2 * m + text_width(g.title, 14));
  return svg_open(int(std::ceil(w)), h, g.title) + o + "</svg>\n";
}

}  // namespace qkv::report
