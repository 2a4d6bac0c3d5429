// The tour's index.html on the fixture models: well-formed, self-contained (no network, no external script),
// the claims table with one coloured row per claim, and the pictures the report promises.
#include "qkv/report/tour_report.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "qkv/error.hpp"
#include "report/xml_check.hpp"

namespace qkv::report {
namespace {

namespace fs = std::filesystem;
namespace an = qkv::analysis;
const std::string kFixtures = std::string(QKV_SOURCE_DIR) + "/tests/reference/fixtures/";

an::TourResult small_tour(const GPT2& m) {
  an::TourOptions o;
  o.text_ids = an::repeated_random_tokens(m.config.vocab_size, 6, 1, 7)[0];
  o.batch = 2;
  o.baseline_samples = 8;
  o.saturate.rows = 32;
  return an::tour(m, o);
}

void check_page(const std::string& name) {
  SCOPED_TRACE(name);
  const GPT2 m = load_model(kFixtures + name);
  const an::TourResult r = small_tour(m);
  TourReportInfo info;
  info.model = name;
  for (size_t i = 0; i < r.text_ids.size(); i++) info.labels.push_back(i % 2 ? "␣the<&>" : "tok\"" + std::to_string(i));
  const std::string html = tour_page(r, info).str();
  const auto doc = qkv::test::parse_xml(html, true);
  ASSERT_TRUE(doc.ok()) << doc.error;
  // Self-contained: no network reference, no external or inline script, no external stylesheet.
  EXPECT_EQ(html.find("https://"), std::string::npos);
  for (size_t p = html.find("http://"); p != std::string::npos; p = html.find("http://", p + 1))
    EXPECT_EQ(html.compare(p, 33, "http://www.w3.org/2000/svg\" width"), 0) << html.substr(p, 60);
  EXPECT_TRUE(doc.all("script").empty());
  EXPECT_TRUE(doc.all("link").empty());
  for (const auto& e : doc.elements)
    for (const auto& [k, v] : e.attrs) {
      EXPECT_EQ(v.find("https://"), std::string::npos) << e.name << " " << k << "=" << v;
      if (k == "src" || k == "href") ADD_FAILURE() << e.name << " refers to " << v;
      if (v.find("http://") != std::string::npos) {
        EXPECT_EQ(v, "http://www.w3.org/2000/svg") << e.name << " " << k;
      }
    }
  // The claims table: one row per claim, coloured by verdict, in order.
  std::vector<const qkv::test::XmlElement*> rows;
  for (const auto* tr : doc.all("tr"))
    if (tr->attrs.count("class")) rows.push_back(tr);
  ASSERT_EQ(rows.size(), r.claims.size() + r.grad_head.max_abs_error.size() + r.grad_sublayer.max_abs_error.size());
  for (size_t i = 0; i < r.claims.size(); i++) EXPECT_EQ(rows[i]->attrs.at("class"), !r.claims[i].applies ? "" : r.claims[i].held ? "held" : "failed");
  for (const auto& c : r.claims) EXPECT_NE(html.find(escape_xml(c.summary)), std::string::npos) << c.id;
  // Pictures: one labelled pattern per head (the fixtures are small), S, Sᵀ, S − Sᵀ, two head-score maps,
  // the composition map, the ablation bars, two √d_k charts.
  size_t svgs = 0;  // top-level <svg> elements (a figure may nest one inside, e.g. for a hatch)
  for (size_t i = 0; i < doc.elements.size(); i++) {
    if (doc.elements[i].name != "svg") continue;
    bool nested = false;
    for (int p = doc.elements[i].parent; p >= 0; p = doc.elements[size_t(p)].parent) nested |= doc.elements[size_t(p)].name == "svg";
    svgs += !nested;
  }
  EXPECT_EQ(svgs, size_t(r.L * r.H) + 3 + 2 + 1 + 1 + 2);
  EXPECT_NE(html.find("tok&quot;0"), std::string::npos);   // token labels reach the axes, escaped
  EXPECT_NE(html.find("␣the&lt;&amp;&gt;"), std::string::npos);
  EXPECT_NE(html.find("S − Sᵀ"), std::string::npos);
  EXPECT_NE(html.find("K-composition score"), std::string::npos);
  EXPECT_NE(html.find("d_k (log₂)"), std::string::npos);
}

TEST(TourReport, TinyIsWellFormedAndSelfContained) { check_page("tiny"); }
TEST(TourReport, TinyAttnOnlyIsWellFormedAndSelfContained) { check_page("tiny_attn_only"); }

TEST(TourReport, LabelCountMustMatch) {
  const GPT2 m = load_model(kFixtures + "tiny");
  const an::TourResult r = small_tour(m);
  TourReportInfo info;
  info.labels = {"a", "b"};
  EXPECT_THROW(tour_page(r, info), Error);
}

TEST(TourReport, WritesIndexAtomicallyAndFailsOnUnwritableDir) {
  const GPT2 m = load_model(kFixtures + "tiny");
  const an::TourResult r = small_tour(m);
  std::string t = (fs::temp_directory_path() / "qkv_tour_XXXXXX").string();
  const fs::path dir = ::mkdtemp(t.data());
  const std::string path = write_tour_report(r, {}, (dir / "out" / "nested").string());
  EXPECT_TRUE(fs::is_regular_file(path));
  EXPECT_EQ(fs::path(path).filename(), "index.html");
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_TRUE(qkv::test::parse_xml(ss.str(), true).ok());
  // A file where the directory should be: error, nothing written.
  { std::ofstream(dir / "file") << "x"; }
  EXPECT_THROW(write_tour_report(r, {}, (dir / "file").string()), Error);
  if (::geteuid() != 0) {  // root ignores permissions
    fs::create_directory(dir / "ro");
    fs::permissions(dir / "ro", fs::perms::owner_read | fs::perms::owner_exec);
    EXPECT_THROW(write_tour_report(r, {}, (dir / "ro").string()), Error);
    EXPECT_TRUE(fs::is_empty(dir / "ro"));
    fs::permissions(dir / "ro", fs::perms::owner_all);
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace qkv::report
