// The family tour's report and the side-by-side comparison (family_report.hpp): well-formed, self-contained
// pages; on a rotary model S beside Sᵀ on the rotated q and k and the score-vs-offset chart, on a model
// with learned positions no offset chart; the comparison's table carries both verdicts of every claim id.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>

#include "qkv/analysis/family_tour.hpp"
#include "qkv/report/family_report.hpp"
#include "report/xml_check.hpp"

namespace fs = std::filesystem;

namespace qkv::report {
namespace {

namespace an = qkv::analysis;

struct Toured {
  Model model;
  an::FamilyTourResult r;
};

Toured toured(const std::string& type) {
  nlohmann::json cfg = default_config(type, "tiny");
  cfg["initializer_range"] = 0.2;
  const std::string dir = (fs::temp_directory_path() / ("qkv_family_report_" + type + "_" + std::to_string(::getpid()))).string();
  write_random_checkpoint(dir, cfg, WeightType::F32, 1, 3);
  Toured t{load_lm(dir), {}};
  fs::remove_all(dir);
  an::FamilyTourOptions o;
  o.text_ids = {5, 17, 300, 42, 9, 17, 300, 42, 77, 120};
  t.r = an::family_tour(t.model, o);
  return t;
}

TEST(FamilyReport, RotaryPageShowsSBesideSTransposeAndTheOffsetChart) {
  const Toured t = toured("llama");
  const std::string html = family_tour_page(t.r, t.model.arch, "tiny-llama").str();
  const auto doc = qkv::test::parse_xml(html, true);
  ASSERT_TRUE(doc.ok()) << doc.error;
  EXPECT_TRUE(doc.all("script").empty());
  EXPECT_NE(html.find("S beside Sᵀ"), std::string::npos);
  EXPECT_NE(html.find("on the ROTATED q and k"), std::string::npos);
  EXPECT_NE(html.find("offset i − j"), std::string::npos);
  // every claim is in the table, n/a ones with their reason
  for (const auto& c : t.r.claims) EXPECT_NE(html.find(escape_xml(c.applies ? c.summary : c.note)), std::string::npos) << c.id;
  EXPECT_EQ(t.r.offsets.size(), t.r.offset_score.size());
  EXPECT_FALSE(t.r.offsets.empty());
  // the dashed series (key moved to offset_shift) lies on the solid one: the score depends on i − j only
  ASSERT_EQ(t.r.offset_score_shifted.size(), t.r.offsets.size());
  EXPECT_GT(t.r.offset_shift, 0);
  double mx = 0, spread = 0;
  for (size_t i = 0; i < t.r.offsets.size(); i++) {
    mx = std::max(mx, std::abs(t.r.offset_score[i]));
    spread = std::max(spread, std::abs(t.r.offset_score[i] - t.r.offset_score_shifted[i]));
  }
  EXPECT_LT(spread, 1e-5 * mx);
  EXPECT_NE(html.find("key at " + std::to_string(t.r.offset_shift)), std::string::npos);
}

TEST(FamilyReport, LearnedPositionsHaveNoOffsetChart) {
  const Toured t = toured("gpt_neo");
  const std::string html = family_tour_page(t.r, t.model.arch, "tiny-neo").str();
  ASSERT_TRUE(qkv::test::parse_xml(html, true).ok());
  EXPECT_EQ(html.find("offset i − j"), std::string::npos);
  EXPECT_EQ(html.find("ROTATED"), std::string::npos);
}

TEST(FamilyReport, ComparePutsBothVerdictsSideBySide) {
  const Toured a = toured("llama"), b = toured("gpt_neox");
  TourSide x{"tiny-llama", "llama", a.r.claims, family_tour_page(a.r, a.model.arch, "tiny-llama")};
  TourSide y{"tiny-neox", "gpt_neox", b.r.claims, family_tour_page(b.r, b.model.arch, "tiny-neox")};
  y.claims.push_back(an::Claim{});  // a claim only one tour measures
  y.claims.back().id = "only_here";
  y.claims.back().held = true;
  const std::string html = compare_page(x, y).str();
  const auto doc = qkv::test::parse_xml(html, true);
  ASSERT_TRUE(doc.ok()) << doc.error;
  // the first table: one row per claim id of either tour, [id, verdict a, verdict b, measured a, measured b]
  const auto tables = doc.all("table");
  ASSERT_FALSE(tables.empty());
  int rows = 0;
  const qkv::test::XmlElement* second_table = tables.size() > 1 ? tables[1] : nullptr;
  for (const auto* tr : doc.all("tr")) {
    if (second_table && tr > second_table) break;  // document order: the first table's rows only
    std::vector<const qkv::test::XmlElement*> cells;
    for (const auto& e : doc.elements)
      if (e.name == "td" && &doc.elements[size_t(e.parent)] == tr) cells.push_back(&e);
    if (cells.size() != 5) continue;
    rows++;
    if (cells[0]->text == "only_here") {
      EXPECT_EQ(cells[1]->text, "not measured by this tour");
      EXPECT_EQ(tr->attrs.count("class") ? tr->attrs.at("class") : "", "");
    }
    if (cells[0]->text == "rope_relative") {
      EXPECT_EQ(cells[1]->text, "holds");
      EXPECT_EQ(cells[2]->text, "holds");
      EXPECT_EQ(tr->attrs.at("class"), "held");
    }
    if (cells[0]->text == "gqa_shared_kv") {  // GQA on llama, MHA on NeoX
      EXPECT_EQ(cells[1]->text, "holds");
      EXPECT_EQ(cells[2]->text, "n/a");
    }
  }
  std::set<std::string> ids;
  for (const auto* cs : {&x.claims, &y.claims})
    for (const auto& c : *cs) ids.insert(c.id);
  EXPECT_EQ(rows, int(ids.size()));  // the union of both tours' ids (NeoX adds ln_trap; only_here)
  EXPECT_NE(html.find("tiny-llama (llama)"), std::string::npos);
  EXPECT_NE(html.find("tiny-neox (gpt_neox)"), std::string::npos);
}

}  // namespace
}  // namespace qkv::report
