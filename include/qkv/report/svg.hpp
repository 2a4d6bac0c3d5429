// Dependency-free SVG rendering: heatmaps of attention patterns and scores, grids of heads, line and
// bar charts. Every function returns one self-contained <svg> element as a string (UTF-8, well-formed
// XML, no ids, no external references), usable as a .svg file or inlined in an HtmlPage.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace qkv::report {

// ---- text ------------------------------------------------------------------------------------------

// Escapes & < > " ' for XML/HTML text and attribute values. Bytes that are not valid UTF-8 (stray
// continuation bytes, truncated or overlong sequences, surrogates, > U+10FFFF) and control characters
// that XML 1.0 forbids are each replaced by U+FFFD, so any byte string yields a well-formed document.
std::string escape_xml(std::string_view s);

// Rough rendered width in px of UTF-8 text in a sans-serif font of `font_px` (for layout only).
double text_width(std::string_view s, double font_px);

// Number formatting used on axes and in tooltips: `sig` significant digits, no trailing zeros,
// "-0" shown as "0", non-finite values as "nan" / "inf" / "-inf".
std::string fmt_num(double v, int sig = 4);

// About `target` "nice" tick values (1, 2, 5 × 10^k steps) inside [lo, hi], ascending.
std::vector<double> nice_ticks(double lo, double hi, int target = 5);

// ---- colours ---------------------------------------------------------------------------------------

struct Rgb {
  uint8_t r = 0, g = 0, b = 0;
  std::string hex() const;  // "#rrggbb"
  double luminance() const;  // relative luminance in [0, 1] (sRGB), to pick black or white text on it
  bool operator==(const Rgb&) const = default;
};

// Viridis-like sequential map, interpolated from 9 stops: t = 0 -> #440154 (dark purple),
// t = 1 -> #fde725 (yellow). t is clamped to [0, 1]; NaN gives the t = 0 colour.
Rgb sequential_color(double t);
// Blue-white-red diverging map (RdBu, 9 stops): t = -1 -> #053061, 0 -> #f7f7f7, 1 -> #67001f.
// t is clamped to [-1, 1]; NaN gives white.
Rgb diverging_color(double t);
// Categorical palette for series (Okabe-Ito, colour-blind safe), cycling.
std::string series_color(size_t i);

inline constexpr const char* kMaskedFill = "#e3e3e3";  // masked cells: this grey with a diagonal hatch

// ---- heatmaps --------------------------------------------------------------------------------------

enum class ColorScale {
  Auto,        // Diverging if any finite value is < 0, else Sequential
  Sequential,  // viridis; default range [0, 1] if all values lie there, else [min, max]
  Diverging,   // blue-white-red, centred on 0; default range ±max|v|
};

struct HeatmapSpec {
  size_t rows = 0, cols = 0;
  std::vector<double> values;           // row-major, rows × cols; NaN and ±inf are drawn as masked
  std::vector<std::string> row_labels;  // empty, or one per row (UTF-8 tokens, e.g. "␣the")
  std::vector<std::string> col_labels;  // empty, or one per column
  std::string title;
  std::string row_title;    // axis caption beside the row labels, e.g. "query"
  std::string col_title;    // axis caption above the column labels, e.g. "key"
  std::string value_label;  // colour bar caption, e.g. "attention weight"
  ColorScale scale = ColorScale::Auto;
  std::optional<double> vmin, vmax;  // fix the colour range (values outside are clamped)
  int cell_px = 0;                   // 0: adaptive (about 44 px for 3×3 down to 4 px at 128×128)
  bool show_values = true;           // write the value inside each cell when the cells are big enough
  bool compact = false;  // small multiple: cells only (plus `title` as a caption), no labels or colour bar
  int compact_px = 100;  // compact mode: side of the matrix in px when cell_px is 0

  // Fills rows, cols and values from a list of rows; throws qkv::Error if the rows are ragged.
  void set_values(const std::vector<std::vector<double>>& m);
  double at(size_t r, size_t c) const { return values[r * cols + c]; }
};

// The colour range a spec resolves to: the scale chosen by Auto, and vmin < vmax.
struct ColorRange {
  ColorScale scale = ColorScale::Sequential;
  double vmin = 0, vmax = 1;
  Rgb color(double v) const;  // the fill for a finite value
};
ColorRange resolve_range(const HeatmapSpec& spec);

// One heatmap. Each cell carries a <title> "row label → col label: value (row i, col j)" that a
// browser shows on hover (masked cells say "masked"). Rows/columns whose labels would collide are
// thinned to every k-th label; column labels are rotated. Throws qkv::Error if values or labels do
// not match rows × cols.
std::string heatmap_svg(const HeatmapSpec& spec);

// A grid of small heatmaps, e.g. layer × head: panels are laid out row-major, `cols` per row, each
// drawn in compact mode with its `title` as caption. Row/column titles ("layer 0", "head 3") label
// the grid's margins.
struct GridSpec {
  std::string title;
  std::vector<HeatmapSpec> panels;
  size_t cols = 0;                      // panels per grid row; 0: col_titles.size(), else ⌈√n⌉
  std::vector<std::string> row_titles;  // optional, one per grid row
  std::vector<std::string> col_titles;  // optional, one per grid column
  int panel_px = 110;                   // side of each panel's matrix
  bool shared_scale = true;  // one colour range over all panels and one colour bar; else per panel
  ColorScale scale = ColorScale::Auto;
  std::optional<double> vmin, vmax;  // with shared_scale: fix the common range
  std::string value_label;           // colour bar caption
};
std::string grid_svg(const GridSpec& spec);

// ---- charts ----------------------------------------------------------------------------------------

enum class AxisScale { Linear, Log2, Log10 };

struct Series {
  std::string name;
  std::vector<double> x, y;  // same length; non-finite points (and ≤ 0 on a log axis) break the line
  std::string color;         // "" = palette colour by index
  bool markers = true;       // draw points (with hover titles) when the series has ≤ 80 points
  bool dashed = false;
};

struct LineChartSpec {
  std::string title, x_label, y_label;
  std::vector<Series> series;
  AxisScale x_scale = AxisScale::Linear, y_scale = AxisScale::Linear;
  std::optional<double> xmin, xmax, ymin, ymax;  // fix axis ranges
  int width = 640, height = 380;                 // whole image, px
};
// Throws qkv::Error if a series has x and y of different lengths.
std::string line_chart_svg(const LineChartSpec& spec);

struct BarChartSpec {
  std::string title, value_label;    // value_label captions the value axis
  std::vector<std::string> labels;   // one per bar, drawn top to bottom in this order
  std::vector<double> values;
  std::vector<std::string> colors;   // optional, one per bar ("" = default)
  int width = 640;
  int bar_px = 18;                   // height of one bar row
  int sig = 3;                       // significant digits of the value written beside each bar
};
// Horizontal bars from 0 (negative values extend left). Throws qkv::Error on size mismatches.
std::string bar_chart_svg(const BarChartSpec& spec);

// Shared by the renderers (svg*.cpp, html*.cpp); not part of the stable API.
namespace svg_detail {
inline constexpr const char* kFontFamily =
    "system-ui, -apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', 'DejaVu Sans', Arial, sans-serif";
std::string px(double v);  // a coordinate: at most one decimal, no trailing ".0"
// "<svg xmlns=... width height viewBox font-family role aria-label>" (the caller closes it).
std::string svg_open(int width, int height, const std::string& label);
}  // namespace svg_detail

}  // namespace qkv::report
