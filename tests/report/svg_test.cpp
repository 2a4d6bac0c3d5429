#include "qkv/report/svg.hpp"
// GCC 12 reports a false -Wrestrict inside std::string's operator+ (GCC bug 105651) for the
// `"<tag attr=\"" + value` chains below; it is a compiler bug, not a real overlap.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic ignored "-Wrestrict"
#endif

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "qkv/error.hpp"
#include "report/xml_check.hpp"

namespace qkv::report {
namespace {

using qkv::test::parse_xml;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

size_t count(const std::string& s, const std::string& sub) {
  size_t n = 0;
  for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) n++;
  return n;
}

// A causal T×T pattern: row i spreads its weight over keys 0..i, the rest masked (-inf).
HeatmapSpec causal(size_t T, bool labels = true) {
  HeatmapSpec h;
  h.rows = h.cols = T;
  for (size_t r = 0; r < T; r++)
    for (size_t c = 0; c < T; c++) h.values.push_back(c <= r ? (c + 1.0) / ((r + 1) * (r + 2) / 2.0) : -kInf);
  if (labels)
    for (size_t t = 0; t < T; t++) h.row_labels.push_back("t" + std::to_string(t)), h.col_labels.push_back("t" + std::to_string(t));
  h.title = "pattern";
  return h;
}

// ---- the checker itself must reject what it claims to -------------------------------------------------

TEST(XmlCheck, RejectsMalformedDocuments) {
  EXPECT_TRUE(parse_xml("<a x=\"1\"><b/>t &amp; &#x2423;</a>").ok());
  for (const char* bad : {"<a><b></a></b>", "<a>", "<a x=1/>", "<a x=\"1\" x=\"2\"/>", "<a>&foo;</a>",
                          "<a>&amp</a>", "<a>x < y</a>", "<a/><b/>", "<a x=\"<\"/>", "text", "<a>\x01</a>",
                          "<a>\xff</a>", "<a>\xed\xa0\x80</a>", "<a>&#0;</a>", "<a>1 > 0</a>"})
    EXPECT_FALSE(parse_xml(bad).ok()) << bad;
  const auto d = parse_xml("<svg><text>a &lt;b&gt; &amp; &#39;c&#39;</text></svg>");
  ASSERT_TRUE(d.ok()) << d.error;
  EXPECT_EQ(d.all("text")[0]->text, "a <b> & 'c'");
}

// ---- escaping ---------------------------------------------------------------------------------------

TEST(EscapeXml, EscapesMarkupCharacters) {
  EXPECT_EQ(escape_xml("<script>alert('x') & \"y\"</script>"),
            "&lt;script&gt;alert(&#39;x&#39;) &amp; &quot;y&quot;&lt;/script&gt;");
  EXPECT_EQ(escape_xml(""), "");
  EXPECT_EQ(escape_xml("&amp;"), "&amp;amp;");
}

TEST(EscapeXml, KeepsValidUtf8) {
  for (const char* s : {"␣the", "Ġcat", "café", "日本", "😀", "÷√d_k", "tab\there", "line\nbreak"})
    EXPECT_EQ(escape_xml(s), s);
}

TEST(EscapeXml, ReplacesInvalidBytesAndForbiddenCharacters) {
  const std::string fffd = "\xEF\xBF\xBD";
  EXPECT_EQ(escape_xml("a\xff" "b"), "a" + fffd + "b");                  // never valid
  EXPECT_EQ(escape_xml("a\xc3"), "a" + fffd);                           // truncated at the end
  EXPECT_EQ(escape_xml("\xc3(x"), fffd + "(x");                          // bad continuation
  EXPECT_EQ(escape_xml("\xc0\xaf"), fffd + fffd);                        // overlong '/'
  EXPECT_EQ(escape_xml("\xed\xa0\x80"), fffd + fffd + fffd);             // UTF-16 surrogate
  EXPECT_EQ(escape_xml("\xf4\x90\x80\x80"), fffd + fffd + fffd + fffd);  // > U+10FFFF
  EXPECT_EQ(escape_xml(std::string("a\0b\x01\x1b", 5)), "a" + fffd + "b" + fffd + fffd);
  EXPECT_EQ(escape_xml("\xef\xbf\xbf"), fffd);  // U+FFFF is not an XML character
  // Whatever the bytes, the result is well-formed text.
  std::string all;
  for (int b = 0; b < 256; b++) all += char(b);
  EXPECT_TRUE(parse_xml("<a>" + escape_xml(all) + "</a>").ok());
}

// ---- numbers and ticks ------------------------------------------------------------------------------

TEST(FmtNum, ShortForms) {
  EXPECT_EQ(fmt_num(0.5), "0.5");
  EXPECT_EQ(fmt_num(1024), "1024");
  EXPECT_EQ(fmt_num(-0.0), "0");
  EXPECT_EQ(fmt_num(0.123456), "0.1235");
  EXPECT_EQ(fmt_num(2.5e-9), "2.5e-9");
  EXPECT_EQ(fmt_num(-kInf), "-inf");
  EXPECT_EQ(fmt_num(kNaN), "nan");
}

TEST(NiceTicks, OneTwoFiveSteps) {
  const auto t = nice_ticks(0, 1, 5);
  ASSERT_EQ(t.size(), 6u);
  EXPECT_DOUBLE_EQ(t.front(), 0);
  EXPECT_DOUBLE_EQ(t.back(), 1);
  const auto s = nice_ticks(-3.7, 3.7, 5);
  EXPECT_EQ(s, (std::vector<double>{-3, -2, -1, 0, 1, 2, 3}));
  EXPECT_EQ(nice_ticks(2, 2), std::vector<double>{2});
  EXPECT_TRUE(nice_ticks(0, kInf).empty());
}

// ---- colours ----------------------------------------------------------------------------------------

TEST(Colors, SequentialEndpointsAndClamping) {
  EXPECT_EQ(sequential_color(0).hex(), "#440154");
  EXPECT_EQ(sequential_color(1).hex(), "#fde725");
  EXPECT_EQ(sequential_color(-5), sequential_color(0));
  EXPECT_EQ(sequential_color(7), sequential_color(1));
  EXPECT_EQ(sequential_color(0.5).hex(), "#21908d");  // the middle stop
  // Lightness rises monotonically: a sequential map must read as "more".
  double prev = -1;
  for (int i = 0; i <= 100; i++) {
    const double l = sequential_color(i / 100.0).luminance();
    EXPECT_GT(l, prev) << i;
    prev = l;
  }
}

TEST(Colors, DivergingEndpointsAndCentre) {
  EXPECT_EQ(diverging_color(-1).hex(), "#053061");
  EXPECT_EQ(diverging_color(0).hex(), "#f7f7f7");
  EXPECT_EQ(diverging_color(1).hex(), "#67001f");
  EXPECT_EQ(diverging_color(-9), diverging_color(-1));
  const Rgb neg = diverging_color(-0.5), pos = diverging_color(0.5);
  EXPECT_GT(neg.b, neg.r);  // negative is blue
  EXPECT_GT(pos.r, pos.b);  // positive is red
  for (int i = 1; i <= 20; i++) {  // lighter towards 0 on both sides
    EXPECT_LT(diverging_color(i / 20.0).luminance(), diverging_color((i - 1) / 20.0).luminance()) << i;
    EXPECT_LT(diverging_color(-i / 20.0).luminance(), diverging_color(-(i - 1) / 20.0).luminance()) << i;
  }
}

TEST(Colors, RangeResolution) {
  HeatmapSpec h;
  h.set_values({{0.2, 0.8}, {0.0, 1.0}});
  ColorRange r = resolve_range(h);
  EXPECT_EQ(r.scale, ColorScale::Sequential);
  EXPECT_EQ(r.vmin, 0);
  EXPECT_EQ(r.vmax, 1);

  h.set_values({{-2, 0.5}, {1, 4}});
  r = resolve_range(h);
  EXPECT_EQ(r.scale, ColorScale::Diverging);  // Auto: a negative value means signed data
  EXPECT_EQ(r.vmin, -4);
  EXPECT_EQ(r.vmax, 4);
  EXPECT_EQ(r.color(0).hex(), "#f7f7f7");
  EXPECT_EQ(r.color(4).hex(), "#67001f");
  EXPECT_EQ(r.color(-4).hex(), "#053061");

  h.set_values({{3, 5}, {7, 9}});
  r = resolve_range(h);
  EXPECT_EQ(r.scale, ColorScale::Sequential);
  EXPECT_EQ(r.vmin, 3);
  EXPECT_EQ(r.vmax, 9);

  h.vmin = 0, h.vmax = 18;  // fixed range
  r = resolve_range(h);
  EXPECT_EQ(r.vmin, 0);
  EXPECT_EQ(r.vmax, 18);
  EXPECT_EQ(r.color(18).hex(), "#fde725");
  EXPECT_EQ(r.color(100).hex(), "#fde725");  // clamped

  h = {};
  h.set_values({{5, 5}});  // degenerate: still a valid range
  r = resolve_range(h);
  EXPECT_LT(r.vmin, r.vmax);
  h.set_values({{-kInf, kNaN}});  // nothing finite
  r = resolve_range(h);
  EXPECT_LT(r.vmin, r.vmax);
}

// ---- heatmaps ---------------------------------------------------------------------------------------

TEST(Heatmap, WellFormedAtAllSizes) {
  for (size_t T : {1u, 3u, 12u, 40u, 128u}) {
    const std::string svg = heatmap_svg(causal(T));
    const auto d = parse_xml(svg);
    ASSERT_TRUE(d.ok()) << T << ": " << d.error;
    EXPECT_EQ(d.elements[0].name, "svg");
    EXPECT_EQ(d.elements[0].attrs.at("xmlns"), "http://www.w3.org/2000/svg");
    EXPECT_EQ(d.all("title").size(), T * T) << "one hover title per cell";
    const int w = std::stoi(d.elements[0].attrs.at("width")), h = std::stoi(d.elements[0].attrs.at("height"));
    EXPECT_GT(w, 100);
    EXPECT_GT(h, 100);
    EXPECT_LT(w, 900) << T;
    EXPECT_LT(h, 900) << T;
  }
  // Non-square, without labels, no title.
  HeatmapSpec h;
  h.set_values({{1, -2, 3, -4, 5}, {0, 0, 0, 0, 0}});
  h.title = "";
  const auto d = parse_xml(heatmap_svg(h));
  ASSERT_TRUE(d.ok()) << d.error;
  EXPECT_EQ(d.all("title").size(), 10u);
  EXPECT_EQ(d.all("title")[1]->text, "row 0 → col 1: -2");
}

TEST(Heatmap, EmptyMatrixRendersAPlaceholder) {
  HeatmapSpec h;
  h.title = "nothing";
  const auto d = parse_xml(heatmap_svg(h));
  ASSERT_TRUE(d.ok()) << d.error;
}

TEST(Heatmap, MismatchedSizesThrow) {
  HeatmapSpec h;
  h.rows = 2, h.cols = 2, h.values = {1, 2, 3};
  EXPECT_THROW(heatmap_svg(h), qkv::Error);
  h.values.push_back(4);
  h.row_labels = {"a"};
  EXPECT_THROW(heatmap_svg(h), qkv::Error);
  EXPECT_THROW(h.set_values({{1, 2}, {3}}), qkv::Error);
}

TEST(Heatmap, HoverTitlesNameTokensAndValues) {
  HeatmapSpec h = causal(3);
  h.row_labels = {"␣the", "␣cat", "␣sat"};
  h.col_labels = h.row_labels;
  const auto d = parse_xml(heatmap_svg(h));
  ASSERT_TRUE(d.ok()) << d.error;
  const auto titles = d.all("title");
  ASSERT_EQ(titles.size(), 9u);
  EXPECT_EQ(titles[3]->text, "␣cat → ␣the: 0.3333 (row 1, col 0)");
  EXPECT_EQ(titles[1]->text, "␣the → ␣cat: masked (-inf) (row 0, col 1)");
}

TEST(Heatmap, MaskedCellsAreGreyAndHatched) {
  HeatmapSpec h = causal(5);
  h.values[1] = kNaN;  // NaN counts as masked too (it is already -inf; set another)
  h.values[24] = kNaN;
  const std::string svg = heatmap_svg(h);
  const auto d = parse_xml(svg);
  ASSERT_TRUE(d.ok()) << d.error;
  size_t grey = 0, titled_masked = 0;
  for (const auto* r : d.all("rect"))
    if (r->attrs.count("fill") && r->attrs.at("fill") == kMaskedFill) grey++;
  for (const auto* t : d.all("title")) titled_masked += t->text.find("masked") != std::string::npos;
  EXPECT_EQ(titled_masked, 10u + 1u);  // 10 above the diagonal, plus the NaN on it
  EXPECT_EQ(grey, 11u + 1u);           // the cells plus the legend swatch
  bool hatch = false, legend = false;
  for (const auto* p : d.all("path")) hatch = hatch || p->attrs.at("stroke") == "#b3b3b3";
  for (const auto* t : d.all("text")) legend = legend || t->text == "masked";
  EXPECT_TRUE(hatch);
  EXPECT_TRUE(legend);
  // And without masked cells: no swatch, no hatch.
  HeatmapSpec full;
  full.set_values({{0.5, 0.5}, {0.1, 0.9}});
  const std::string s2 = heatmap_svg(full);
  EXPECT_EQ(count(s2, kMaskedFill), 0u);
  EXPECT_EQ(count(s2, "<path"), 0u);
}

// (hover title, fill) of every cell: the rects that carry a <title>.
std::vector<std::pair<std::string, std::string>> cells(const qkv::test::XmlDoc& d) {
  std::vector<std::pair<std::string, std::string>> v;
  for (const auto& e : d.elements)
    if (e.name == "title" && e.parent >= 0 && d.elements[e.parent].name == "rect")
      v.emplace_back(e.text, d.elements[e.parent].attrs.at("fill"));
  return v;
}

std::vector<std::string> texts(const qkv::test::XmlDoc& d) {
  std::vector<std::string> v;
  for (const auto* t : d.all("text")) v.push_back(t->text);
  return v;
}

bool has(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

TEST(Heatmap, CellColoursFollowTheScale) {
  HeatmapSpec h;
  h.set_values({{0, 1}, {0.5, 0.25}});
  auto d = parse_xml(heatmap_svg(h));
  ASSERT_TRUE(d.ok()) << d.error;
  auto c = cells(d);
  ASSERT_EQ(c.size(), 4u);
  EXPECT_EQ(c[0].second, "#440154");
  EXPECT_EQ(c[1].second, "#fde725");
  EXPECT_EQ(c[2].second, "#21908d");

  h.scale = ColorScale::Diverging;  // forced, with a fixed range
  h.vmin = -1, h.vmax = 1;
  d = parse_xml(heatmap_svg(h));
  ASSERT_TRUE(d.ok()) << d.error;
  c = cells(d);
  EXPECT_EQ(c[0].second, "#f7f7f7");
  EXPECT_EQ(c[1].second, "#67001f");

  HeatmapSpec s;  // S − Sᵀ: antisymmetric, Auto picks diverging, 0 is white, extremes are the ends
  s.set_values({{0, 2, -1}, {-2, 0, 0.5}, {1, -0.5, 0}});
  d = parse_xml(heatmap_svg(s));
  ASSERT_TRUE(d.ok()) << d.error;
  c = cells(d);
  EXPECT_EQ(c[0].second, "#f7f7f7");
  EXPECT_EQ(c[1].second, "#67001f");
  EXPECT_EQ(c[3].second, "#053061");
}

TEST(Heatmap, ColourBarHasTicks) {
  const auto d = parse_xml(heatmap_svg(causal(4)));
  ASSERT_TRUE(d.ok()) << d.error;
  const auto t = texts(d);
  for (const char* tick : {"0", "0.2", "0.4", "0.6", "0.8", "1"}) EXPECT_TRUE(has(t, tick)) << tick;
}

TEST(Heatmap, ValuesWrittenInBigCellsOnly) {
  HeatmapSpec h;
  h.set_values({{0.07, 0.31, 0.62}});
  auto t = texts(parse_xml(heatmap_svg(h)));
  EXPECT_TRUE(has(t, "0.07"));
  EXPECT_TRUE(has(t, "0.62"));
  h.show_values = false;
  t = texts(parse_xml(heatmap_svg(h)));
  EXPECT_FALSE(has(t, "0.62"));
  t = texts(parse_xml(heatmap_svg(causal(64))));  // cells too small for text
  EXPECT_FALSE(has(t, "0.50"));
}

TEST(Heatmap, HostileLabelsAreEscaped) {
  HeatmapSpec h;
  h.set_values({{0.5, 0.5}, {0.25, 0.75}});
  h.row_labels = {"<script>alert(1)</script>", "a & b \"q\" 'r'"};
  h.col_labels = {"\xff\xfe bad", "]]> <!-- x"};
  h.title = "<b>title</b> & co";
  h.value_label = "</svg>";
  h.row_title = "q<";
  h.col_title = "k&";
  const std::string svg = heatmap_svg(h);
  const auto d = parse_xml(svg);
  ASSERT_TRUE(d.ok()) << d.error;
  EXPECT_TRUE(d.all("script").empty());
  EXPECT_TRUE(d.all("b").empty());
  EXPECT_EQ(svg.find("<script"), std::string::npos);
  const auto t = texts(d);
  EXPECT_TRUE(has(t, "<script>alert(1)…")) << "labels are cut at 16 code points";
  EXPECT_TRUE(has(t, "a & b \"q\" 'r'"));
  EXPECT_TRUE(has(t, "\xEF\xBF\xBD\xEF\xBF\xBD bad"));
  EXPECT_TRUE(has(t, "<b>title</b> & co"));
  EXPECT_TRUE(has(t, "</svg>"));
  EXPECT_EQ(cells(d)[0].first, "<script>alert(1)</script> → \xEF\xBF\xBD\xEF\xBF\xBD bad: 0.5 (row 0, col 0)");
}

TEST(Heatmap, DenseLabelsAreThinned) {
  const auto d = parse_xml(heatmap_svg(causal(128)));
  ASSERT_TRUE(d.ok()) << d.error;
  size_t labels = 0;
  for (const auto& s : texts(d)) labels += s.size() > 1 && s[0] == 't';
  EXPECT_GT(labels, 2u * 16);  // some of each axis
  EXPECT_LT(labels, 2u * 64);  // but far from all 256
  const auto t = texts(d);
  EXPECT_TRUE(has(t, "t0"));
  // 12 tokens: every label shown.
  const auto d12 = parse_xml(heatmap_svg(causal(12)));
  size_t n12 = 0;
  for (const auto& s : texts(d12)) n12 += s.size() > 1 && s[0] == 't';
  EXPECT_EQ(n12, 24u);
}

TEST(Heatmap, CompactModeHasNoLabels) {
  HeatmapSpec h = causal(12);
  h.compact = true;
  h.title = "L0 H3";
  const auto d = parse_xml(heatmap_svg(h));
  ASSERT_TRUE(d.ok()) << d.error;
  const auto t = texts(d);
  EXPECT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0], "L0 H3");
  EXPECT_LE(std::stoi(d.elements[0].attrs.at("width")), 110);
  // 128×128 in compact mode: one pixel per cell, runs merged, no per-cell titles.
  HeatmapSpec big = causal(128, false);
  big.compact = true;
  const std::string svg = heatmap_svg(big);
  EXPECT_TRUE(parse_xml(svg).ok());
  EXPECT_LT(svg.size(), 128u * 128u * 40u);
}

// ---- grids ------------------------------------------------------------------------------------------

TEST(Grid, LayerByHead) {
  GridSpec g;
  g.title = "all heads";
  for (int l = 0; l < 3; l++) g.row_titles.push_back("layer " + std::to_string(l));
  for (int hd = 0; hd < 4; hd++) g.col_titles.push_back("head " + std::to_string(hd));
  for (int i = 0; i < 12; i++) {
    HeatmapSpec p = causal(6, false);
    p.title = "L" + std::to_string(i / 4) + "H" + std::to_string(i % 4);
    g.panels.push_back(p);
  }
  g.value_label = "attention";
  const auto d = parse_xml(grid_svg(g));
  ASSERT_TRUE(d.ok()) << d.error;
  const auto t = texts(d);
  for (const char* s : {"all heads", "layer 2", "head 3", "L2H3", "attention", "masked", "1"})
    EXPECT_TRUE(has(t, s)) << s;
  EXPECT_EQ(cells(d).size(), 12u * 36u);
  // Shared scale: the same value has the same colour in every panel.
  g.panels[0].values[0] = 0.5;  // panel 0 has a different maximum; irrelevant with [0, 1]
  EXPECT_TRUE(parse_xml(grid_svg(g)).ok());
  g.shared_scale = false;
  const auto d2 = parse_xml(grid_svg(g));
  ASSERT_TRUE(d2.ok()) << d2.error;
  EXPECT_FALSE(has(texts(d2), "attention")) << "no common colour bar";
  GridSpec empty;
  EXPECT_TRUE(parse_xml(grid_svg(empty)).ok());
}

// ---- charts -----------------------------------------------------------------------------------------

TEST(LineChart, Log2AxisTicksAndLegend) {
  LineChartSpec c;
  c.title = "std of q·k";
  c.x_label = "d_k";
  c.y_label = "std";
  c.x_scale = AxisScale::Log2;
  Series raw, scaled;
  raw.name = "raw <q·k>", scaled.name = "scaled & ok";
  for (int dk = 2; dk <= 1024; dk *= 2) {
    raw.x.push_back(dk), raw.y.push_back(std::sqrt(double(dk)));
    scaled.x.push_back(dk), scaled.y.push_back(1.0);
  }
  raw.x.push_back(0), raw.y.push_back(1);  // not drawable on a log axis: skipped
  raw.x.push_back(4096), raw.y.push_back(kNaN);
  c.series = {raw, scaled};
  const std::string svg = line_chart_svg(c);
  const auto d = parse_xml(svg);
  ASSERT_TRUE(d.ok()) << d.error;
  const auto t = texts(d);
  for (const char* s : {"2", "4", "8", "16", "32", "64", "128", "256", "512", "1024", "raw <q·k>", "scaled & ok",
                        "d_k (log₂)", "std"})
    EXPECT_TRUE(has(t, s)) << s;
  EXPECT_EQ(d.all("circle").size(), 2u * 10 + 2);  // markers with titles + 2 legend markers
  EXPECT_EQ(svg.find("nan\""), std::string::npos);
  EXPECT_EQ(svg.find("inf\""), std::string::npos);
}

TEST(LineChart, Log10AndLinearAndDegenerate) {
  LineChartSpec c;
  c.y_scale = AxisScale::Log10;
  c.series.resize(1);
  c.series[0].name = "loss", c.series[0].x = {0, 100, 200, 300}, c.series[0].y = {10.9, 6.2, 4.1, 3.3};
  auto d = parse_xml(line_chart_svg(c));
  ASSERT_TRUE(d.ok()) << d.error;
  EXPECT_TRUE(has(texts(d), "5")) << "1-2-5 ticks when the range spans less than a decade";
  c.y_scale = AxisScale::Linear;
  c.series[0].y = {1, 1, 1, 1};
  EXPECT_TRUE(parse_xml(line_chart_svg(c)).ok());
  c.series.clear();
  EXPECT_TRUE(parse_xml(line_chart_svg(c)).ok());
  c.series.resize(1);
  c.series[0].x = {1, 2}, c.series[0].y = {1};
  EXPECT_THROW(line_chart_svg(c), qkv::Error);
}

TEST(BarChart, RankedScoresWithNegativesAndHostileLabels) {
  BarChartSpec b;
  b.title = "induction score";
  b.value_label = "score";
  b.labels = {"L1H6", "L0H3 <&>", "L2H0", "nan head"};
  b.values = {0.91, 0.42, -0.17, kNaN};
  const std::string svg = bar_chart_svg(b);
  const auto d = parse_xml(svg);
  ASSERT_TRUE(d.ok()) << d.error;
  const auto t = texts(d);
  for (const char* s : {"L1H6", "L0H3 <&>", "0.91", "-0.17", "nan", "score", "induction score"})
    EXPECT_TRUE(has(t, s)) << s;
  size_t bars = 0;
  for (const auto* r : d.all("rect")) bars += r->attrs.at("fill") == "#4c78a8";
  EXPECT_EQ(bars, 3u);
  b.colors = {"#000"};
  EXPECT_THROW(bar_chart_svg(b), qkv::Error);
  b.colors.clear();
  b.values.pop_back();
  EXPECT_THROW(bar_chart_svg(b), qkv::Error);
  EXPECT_TRUE(parse_xml(bar_chart_svg(BarChartSpec{})).ok());
}

}  // namespace
}  // namespace qkv::report
