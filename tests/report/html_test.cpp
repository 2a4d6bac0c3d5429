#include "qkv/report/html.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "qkv/error.hpp"
#include "qkv/report/svg.hpp"
#include "report/xml_check.hpp"

namespace qkv::report {
namespace {

namespace fs = std::filesystem;
using qkv::test::parse_xml;

struct TempDir {
  fs::path path;
  TempDir() {
    std::string t = (fs::temp_directory_path() / "qkv_report_XXXXXX").string();
    path = ::mkdtemp(t.data());
  }
  ~TempDir() { fs::remove_all(path); }
  std::vector<std::string> listing() const {
    std::vector<std::string> v;
    for (const auto& e : fs::directory_iterator(path)) v.push_back(e.path().filename().string());
    std::sort(v.begin(), v.end());
    return v;
  }
};

std::string read(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The demo page of the report layer: every kind of figure, with the seeds' kind of data. Written to
// $QKV_REPORT_DEMO when set (scripts/screenshot.sh renders it), otherwise only checked.
HtmlPage demo_page() {
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<std::string> tok = {"The", "␣cat", "␣sat", "␣on", "␣the", "␣mat", ".", "␣The",
                                        "␣cat", "␣climb", "ed", "␣the"};
  const size_t T = tok.size();
  // A previous-token + same-token mixture, causal: row i over keys 0..i.
  auto pattern = [&](double prev, double same, double temp) {
    HeatmapSpec h;
    h.rows = h.cols = T;
    for (size_t i = 0; i < T; i++) {
      std::vector<double> s(T, -inf);
      double m = -inf;
      for (size_t j = 0; j <= i; j++) {
        s[j] = (j + 1 == i ? prev : 0) + (j != i && tok[j] == tok[i] ? same : 0) + 0.3 * std::sin(3.0 * i + j);
        s[j] /= temp;
        m = std::max(m, s[j]);
      }
      double z = 0;
      for (size_t j = 0; j <= i; j++) z += std::exp(s[j] - m);
      for (size_t j = 0; j < T; j++) h.values.push_back(j <= i ? std::exp(s[j] - m) / z : -inf);
    }
    return h;
  };
  HtmlPage page("qkv report — demo");
  page.add_paragraph("Every figure on this page is inline SVG; hover a cell to read its exact value.");
  page.add_heading("Attention pattern");
  HeatmapSpec a = pattern(3.0, 2.0, 1.0);
  a.row_labels = a.col_labels = tok;
  a.title = "Layer 1, head 6: A = softmax(S)";
  a.row_title = "query";
  a.col_title = "key";
  a.value_label = "attention weight";
  page.add_svg(heatmap_svg(a), "Each row sums to 1; grey hatched cells are masked (future tokens).");

  page.add_heading("All heads");
  GridSpec g;
  g.title = "Attention patterns, 3 layers × 4 heads";
  for (int l = 0; l < 3; l++) g.row_titles.push_back("layer " + std::to_string(l));
  for (int h = 0; h < 4; h++) g.col_titles.push_back("head " + std::to_string(h));
  for (int i = 0; i < 12; i++) {
    HeatmapSpec p = pattern(0.8 * (i % 4), 0.9 * (i / 4), 0.4 + 0.3 * (i % 3));
    p.title = "L" + std::to_string(i / 4) + "H" + std::to_string(i % 4);
    g.panels.push_back(p);
  }
  g.value_label = "attention weight";
  page.add_svg(grid_svg(g), "One shared colour scale; L1H1 and L2H3 look one token back.");

  page.add_heading("Asymmetry of the scores");
  HeatmapSpec d;
  d.rows = d.cols = T;
  for (size_t i = 0; i < T; i++)
    for (size_t j = 0; j < T; j++) d.values.push_back(2.5 * std::sin(0.7 * i - 0.4 * j) - 2.5 * std::sin(0.7 * j - 0.4 * i));
  d.row_labels = d.col_labels = tok;
  d.title = "S − Sᵀ (layer 0, head 3)";
  d.value_label = "score difference";
  page.add_svg(heatmap_svg(d), "Diverging scale centred on 0: red where i attends to j more than j to i.");

  page.add_heading("√d_k");
  LineChartSpec c;
  c.title = "Without the division, scores grow like √d_k";
  c.x_label = "d_k";
  c.y_label = "std of the scores";
  c.x_scale = AxisScale::Log2;
  Series raw, scaled, ref;
  raw.name = "q·k", scaled.name = "q·k / √d_k", ref.name = "√d_k";
  ref.dashed = true, ref.markers = false;
  for (int dk = 2; dk <= 1024; dk *= 2) {
    raw.x.push_back(dk), raw.y.push_back(std::sqrt(dk) * (1 + 0.04 * std::sin(dk)));
    scaled.x.push_back(dk), scaled.y.push_back(1 + 0.04 * std::sin(dk));
    ref.x.push_back(dk), ref.y.push_back(std::sqrt(dk));
  }
  c.series = {raw, scaled, ref};
  page.add_svg(line_chart_svg(c));

  page.add_heading("Ranked heads");
  BarChartSpec b;
  b.title = "Previous-token score, top heads";
  b.value_label = "mean attention on token i−1";
  b.labels = {"L1H1", "L2H3", "L0H2", "L2H1", "L1H3", "L0H0", "L2H0"};
  b.values = {0.83, 0.71, 0.44, 0.31, 0.12, 0.05, -0.02};
  page.add_svg(bar_chart_svg(b));

  page.add_heading("Checks");
  page.add_table({"claim", "measured", "expected", "verdict"},
                 {{"rows of A sum to 1", "1.0000", "1", "held"},
                  {"std(q·k) ≈ √d_k at d_k = 64", "7.98", "8", "held"},
                  {"max |S − Sᵀ| < 1e-6", "4.93", "0", "failed"},
                  {"flash = reference", "3.1e-7", "< 1e-5", "held"}},
                 {"held", "held", "failed", "held"});
  return page;
}

TEST(HtmlPage, DemoPageIsWellFormedAndSelfContained) {
  const HtmlPage page = demo_page();
  const std::string html = page.str();
  const auto d = parse_xml(html, true);
  ASSERT_TRUE(d.ok()) << d.error;
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_EQ(d.elements[0].name, "html");
  EXPECT_EQ(d.all("svg").size(), 6u);   // 5 figures + the line chart's clip viewport
  EXPECT_EQ(d.all("figure").size(), 5u);
  EXPECT_EQ(html.find("http://"), std::string::npos);
  EXPECT_EQ(html.find("https://"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("<link"), std::string::npos);
  EXPECT_EQ(html.find("url("), std::string::npos);
  EXPECT_EQ(html.find("@import"), std::string::npos);
  if (const char* out = std::getenv("QKV_REPORT_DEMO")) page.write(out);
}

TEST(HtmlPage, EscapesTextAndKeepsTrustedHtml) {
  HtmlPage p("<title> & \"x\"");
  p.add_heading("<script src=\"http://evil.example/x.js\"></script>", 2);
  p.add_paragraph("a < b && c > d");
  p.add_paragraph("<code>S</code> is trusted", false);
  p.add_table({"h<1>", "n"}, {{"<img src=x onerror=alert(1)>", "1.5"}, {"\xff", "-2e-3"}}, {"failed\"><script>", ""});
  const std::string html = p.str();
  const auto d = parse_xml(html, true);
  ASSERT_TRUE(d.ok()) << d.error;
  EXPECT_TRUE(d.all("script").empty());
  EXPECT_TRUE(d.all("img").empty());
  EXPECT_EQ(d.all("h2")[0]->text, "<script src=\"http://evil.example/x.js\"></script>");  // shown, not run
  EXPECT_EQ(d.all("title")[0]->text, "<title> & \"x\"");
  EXPECT_EQ(d.all("p")[0]->text, "a < b && c > d");
  ASSERT_EQ(d.all("code").size(), 1u);
  EXPECT_EQ(d.all("code")[0]->text, "S");
  EXPECT_EQ(d.all("td")[0]->text, "<img src=x onerror=alert(1)>");
  EXPECT_EQ(d.all("td")[2]->text, "\xEF\xBF\xBD");
  EXPECT_EQ(d.all("tr")[1]->attrs.at("class"), "failed\"><script>");
}

TEST(HtmlPage, TableClassesAndNumericColumns) {
  HtmlPage p("t");
  p.add_table({"claim", "value"}, {{"a", "0.5"}, {"b", "-1e-3"}, {"c", "12%"}}, {"held", "failed", ""});
  const auto d = parse_xml(p.str(), true);
  ASSERT_TRUE(d.ok()) << d.error;
  const auto trs = d.all("tr");
  ASSERT_EQ(trs.size(), 4u);
  EXPECT_EQ(trs[1]->attrs.at("class"), "held");
  EXPECT_EQ(trs[2]->attrs.at("class"), "failed");
  EXPECT_EQ(trs[3]->attrs.count("class"), 0u);
  const auto tds = d.all("td");
  EXPECT_EQ(tds[0]->attrs.count("class"), 0u);
  EXPECT_EQ(tds[1]->attrs.at("class"), "num");
  EXPECT_EQ(tds[5]->attrs.at("class"), "num");
  EXPECT_THROW(p.add_table({"x"}, {{"1"}}, {"a", "b"}), qkv::Error);
}

TEST(HtmlPage, SvgLosesItsNamespaceInline) {
  HtmlPage p("t");
  HeatmapSpec h;
  h.set_values({{1}});
  p.add_svg(heatmap_svg(h), "cap & tion");
  const std::string html = p.str();
  EXPECT_EQ(html.find("xmlns"), std::string::npos);
  const auto d = parse_xml(html, true);
  ASSERT_TRUE(d.ok()) << d.error;
  EXPECT_EQ(d.all("figcaption")[0]->text, "cap & tion");
}

TEST(HtmlPage, WriteIsAtomic) {
  TempDir dir;
  HtmlPage p("atomic");
  p.add_paragraph("hello");
  const fs::path out = dir.path / "report.html";
  p.write(out.string());
  EXPECT_EQ(read(out), p.str());
  EXPECT_EQ(dir.listing(), std::vector<std::string>{"report.html"}) << "no temporary file left";
  // Overwriting replaces the whole content.
  HtmlPage q("second");
  q.write(out.string());
  EXPECT_EQ(read(out), q.str());
  EXPECT_EQ(dir.listing(), std::vector<std::string>{"report.html"});
}

TEST(HtmlPage, WriteFailureThrowsAndLeavesNothing) {
  TempDir dir;
  HtmlPage p("fails");
  p.add_paragraph(std::string(100000, 'x'));
  // The directory does not exist.
  const std::string missing = (dir.path / "no_such_dir" / "r.html").string();
  try {
    p.write(missing);
    FAIL() << "no exception";
  } catch (const qkv::Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind(missing + ": ", 0), 0u) << e.what();
    EXPECT_EQ(e.kind(), ErrorKind::Data);
  }
  // The parent is a regular file.
  std::ofstream(dir.path / "file.txt") << "keep";
  EXPECT_THROW(p.write((dir.path / "file.txt" / "r.html").string()), qkv::Error);
  // The target is a directory: the temporary file is written, then the rename fails; it must be
  // removed (this case works as root too, where permission bits would not stop the write).
  fs::create_directory(dir.path / "taken.html");
  fs::create_directory(dir.path / "taken.html" / "sub");
  EXPECT_THROW(p.write((dir.path / "taken.html").string()), qkv::Error);
  EXPECT_EQ(dir.listing(), (std::vector<std::string>{"file.txt", "taken.html"}));
  EXPECT_EQ(read(dir.path / "file.txt"), "keep");
  // A read-only directory (skipped as root, which ignores permission bits).
  if (::geteuid() != 0) {
    fs::create_directory(dir.path / "ro");
    fs::permissions(dir.path / "ro", fs::perms::owner_read | fs::perms::owner_exec);
    EXPECT_THROW(p.write((dir.path / "ro" / "r.html").string()), qkv::Error);
    EXPECT_TRUE(fs::is_empty(dir.path / "ro"));
    fs::permissions(dir.path / "ro", fs::perms::owner_all);
  }
}

}  // namespace
}  // namespace qkv::report
