// The tour's one report writer (tour_report.hpp) on GPT-2 fixtures and on random models of other families:
// well-formed, self-contained pages (no network, no script); the claims table with one coloured row per claim
// (n/a rows plain, with their reason); the pictures each model has evidence for (S beside Sᵀ on the rotated q
// and k and the offset chart on a rotary model, none of those on learned positions); the side-by-side page;
// the text and the JSON.
#include "qkv/report/tour_report.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "qkv/error.hpp"
#include "report/xml_check.hpp"

namespace qkv::report {
namespace {

namespace fs = std::filesystem;
namespace an = qkv::analysis;
const std::string kFixtures = std::string(QKV_SOURCE_DIR) + "/tests/reference/fixtures/";

an::TourResult small_tour(const Model& m, const std::vector<int>& ids = {}) {
  an::TourOptions o;
  o.text_ids = ids.empty() ? an::repeated_random_tokens(m.arch.vocab_size, 6, 1, 7)[0] : ids;
  o.batch = 2;
  o.baseline_samples = 8;
  o.saturate.rows = 32;
  return an::tour(m, o);
}

struct Toured {
  Model model;
  an::TourResult r;
};

Toured toured_family(const std::string& type) {
  nlohmann::json cfg = default_config(type, "tiny");
  cfg["initializer_range"] = 0.2;
  const std::string dir =
      (fs::temp_directory_path() / ("qkv_tour_report_" + type + "_" + std::to_string(::getpid()))).string();
  write_random_checkpoint(dir, cfg, WeightType::F32, 1, 3);
  Toured t{load_lm(dir), {}};
  fs::remove_all(dir);
  t.r = small_tour(t.model, {5, 17, 300, 42, 9, 17, 300, 42, 77, 120});
  return t;
}

size_t top_level_svgs(const qkv::test::XmlDoc& doc) {  // a figure may nest an <svg> inside (a hatch)
  size_t n = 0;
  for (size_t i = 0; i < doc.elements.size(); i++) {
    if (doc.elements[i].name != "svg") continue;
    bool nested = false;
    for (int p = doc.elements[i].parent; p >= 0; p = doc.elements[size_t(p)].parent)
      nested |= doc.elements[size_t(p)].name == "svg";
    n += !nested;
  }
  return n;
}

void expect_self_contained(const std::string& html, const qkv::test::XmlDoc& doc) {
  EXPECT_EQ(html.find("https://"), std::string::npos);
  for (size_t p = html.find("http://"); p != std::string::npos; p = html.find("http://", p + 1))
    EXPECT_EQ(html.compare(p, 33, "http://www.w3.org/2000/svg\" width"), 0) << html.substr(p, 60);
  EXPECT_TRUE(doc.all("script").empty());
  EXPECT_TRUE(doc.all("link").empty());
  for (const auto& e : doc.elements)
    for (const auto& [k, v] : e.attrs) {
      EXPECT_EQ(v.find("https://"), std::string::npos) << e.name << " " << k << "=" << v;
      if (k == "src" || k == "href") ADD_FAILURE() << e.name << " refers to " << v;
      if (v.find("http://") != std::string::npos)
        EXPECT_EQ(v, "http://www.w3.org/2000/svg") << e.name << " " << k;
    }
}

void check_page(const std::string& name) {
  SCOPED_TRACE(name);
  const Model m = load_lm(kFixtures + name);
  const an::TourResult r = small_tour(m);
  TourReportInfo info;
  info.model = name;
  for (size_t i = 0; i < r.text_ids.size(); i++)
    info.labels.push_back(i % 2 ? "␣the<&>" : "tok\"" + std::to_string(i));
  const std::string html = tour_page(r, info).str();
  const auto doc = qkv::test::parse_xml(html, true);
  ASSERT_TRUE(doc.ok()) << doc.error;
  expect_self_contained(html, doc);
  // The claims table: one row per claim, coloured by verdict (n/a plain), in order; then the gradcheck table.
  std::vector<const qkv::test::XmlElement*> rows;
  for (const auto* tr : doc.all("tr"))
    if (tr->attrs.count("class")) rows.push_back(tr);
  ASSERT_EQ(rows.size(),
            r.claims.size() + r.grad_head.max_abs_error.size() + r.grad_sublayer.max_abs_error.size());
  for (size_t i = 0; i < r.claims.size(); i++)
    EXPECT_EQ(rows[i]->attrs.at("class"), !r.claims[i].applies ? ""
                                          : r.claims[i].held   ? "held"
                                                               : "failed")
        << r.claims[i].id;
  for (const auto& c : r.claims)
    EXPECT_NE(html.find(escape_xml(c.applies ? c.summary : c.note)), std::string::npos) << c.id;
  // Pictures: one labelled pattern per head (the fixtures are small), S, Sᵀ, S − Sᵀ, two head-score maps, the
  // composition map, the ablation bars, two √d_k charts; no offset chart (learned positions).
  EXPECT_EQ(top_level_svgs(doc), size_t(r.L * r.H) + 3 + 2 + 1 + 1 + 2);
  EXPECT_NE(html.find("tok&quot;0"), std::string::npos);  // token labels reach the axes, escaped
  EXPECT_NE(html.find("␣the&lt;&amp;&gt;"), std::string::npos);
  EXPECT_NE(html.find("S − Sᵀ"), std::string::npos);
  EXPECT_NE(html.find("K-composition score"), std::string::npos);
  EXPECT_NE(html.find("d_k (log₂)"), std::string::npos);
  EXPECT_EQ(html.find("offset i − j"), std::string::npos);
  EXPECT_EQ(html.find("ROTATED"), std::string::npos);
}

TEST(TourReport, TinyIsWellFormedAndSelfContained) {
  check_page("tiny");
}
TEST(TourReport, TinyAttnOnlyIsWellFormedAndSelfContained) {
  check_page("tiny_attn_only");
}

TEST(TourReport, RotaryPageShowsSBesideSTransposeAndTheOffsetChart) {
  const Toured t = toured_family("llama");
  const std::string html = tour_page(t.r, {"tiny-llama", {}, ""}).str();
  const auto doc = qkv::test::parse_xml(html, true);
  ASSERT_TRUE(doc.ok()) << doc.error;
  expect_self_contained(html, doc);
  EXPECT_NE(html.find("S beside Sᵀ"), std::string::npos);
  EXPECT_NE(html.find("on the ROTATED q and k"), std::string::npos);
  EXPECT_NE(html.find("offset i − j"), std::string::npos);
  EXPECT_NE(html.find("key at " + std::to_string(t.r.offset_shift)), std::string::npos);
  EXPECT_NE(html.find("(kv 1)"), std::string::npos);  // GQA: each head's KV group in its title
  EXPECT_NE(html.find("tiny-llama (llama)"), std::string::npos);
  // every claim is in the table, n/a ones with their reason
  for (const auto& c : t.r.claims)
    EXPECT_NE(html.find(escape_xml(c.applies ? c.summary : c.note)), std::string::npos) << c.id;
  // patterns, S/Sᵀ/S − Sᵀ, the offset chart, head scores, composition, ablation, √d_k
  EXPECT_EQ(top_level_svgs(doc), size_t(t.r.L * t.r.H) + 3 + 1 + 2 + 1 + 1 + 2);
}

TEST(TourReport, LearnedPositionsHaveNoOffsetChart) {
  const Toured t = toured_family("gpt_neo");
  const std::string html = tour_page(t.r, {"tiny-neo", {}, ""}).str();
  ASSERT_TRUE(qkv::test::parse_xml(html, true).ok());
  EXPECT_EQ(html.find("offset i − j"), std::string::npos);
  EXPECT_EQ(html.find("ROTATED"), std::string::npos);
  EXPECT_NE(html.find("no_scale_saturates"), std::string::npos);
}

TEST(TourReport, LabelCountMustMatch) {
  const Model m = load_lm(kFixtures + "tiny");
  const an::TourResult r = small_tour(m);
  TourReportInfo info;
  info.labels = {"a", "b"};
  EXPECT_THROW(tour_page(r, info), Error);
}

TEST(TourReport, WritesIndexAtomicallyAndFailsOnUnwritableDir) {
  const Model m = load_lm(kFixtures + "tiny");
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

// Two models side by side: one row per claim with both verdicts (green on both, amber on one, red on neither,
// plain where either is n/a), then both reports.
TEST(TourReport, ComparePutsBothVerdictsSideBySide) {
  const Toured a = toured_family("llama"), b = toured_family("gpt_neox");
  const TourSide x{a.r, {"tiny-llama", {}, ""}}, y{b.r, {"tiny-neox", {}, ""}};
  const std::string html = compare_page(x, y).str();
  const auto doc = qkv::test::parse_xml(html, true);
  ASSERT_TRUE(doc.ok()) << doc.error;
  expect_self_contained(html, doc);
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
    EXPECT_EQ(cells[0]->text, an::tour_claim_ids()[size_t(rows)]);
    rows++;
    const std::string cls = tr->attrs.count("class") ? tr->attrs.at("class") : "";
    if (cells[0]->text == "rope_relative") {
      EXPECT_EQ(cells[1]->text, "holds");
      EXPECT_EQ(cells[2]->text, "holds");
      EXPECT_EQ(cls, "held");
    }
    if (cells[0]->text == "gqa_shared_kv") {  // GQA on llama, MHA on NeoX
      EXPECT_EQ(cells[1]->text, "holds");
      EXPECT_EQ(cells[2]->text, "n/a");
      EXPECT_EQ(cls, "");
    }
    if (cells[0]->text == "ln_trap") {  // RMSNorm on llama, LayerNorm on NeoX
      EXPECT_EQ(cells[1]->text, "n/a");
      EXPECT_EQ(cells[2]->text, "holds");
    }
  }
  EXPECT_EQ(rows, int(an::tour_claim_ids().size()));
  EXPECT_NE(html.find("tiny-llama (llama)"), std::string::npos);
  EXPECT_NE(html.find("tiny-neox (gpt_neox)"), std::string::npos);
  const std::string text = compare_text(x, y, "r/index.html");
  EXPECT_NE(text.find("gqa_shared_kv"), std::string::npos);
  EXPECT_NE(text.find("applicable claims hold"), std::string::npos);
}

// The text and the JSON carry every claim with its verdict, and the counts agree.
TEST(TourReport, TextAndJson) {
  const Toured t = toured_family("qwen2");
  const TourReportInfo info{"tiny-qwen2", {}, ""};
  const std::string text = tour_text(t.r, info, "out/index.html");
  for (const auto& c : t.r.claims) EXPECT_NE(text.find(c.id), std::string::npos) << c.id;
  EXPECT_NE(text.find(std::to_string(t.r.held_count()) + " of " + std::to_string(t.r.applicable_count()) +
                      " applicable claims hold"),
            std::string::npos);
  const nlohmann::json j = tour_json(t.r, info, "");
  EXPECT_EQ(j["family"], "qwen2");
  EXPECT_TRUE(j["report"].is_null());
  EXPECT_EQ(j["claims"].size(), an::tour_claim_ids().size());
  EXPECT_EQ(j["held"], t.r.held_count());
  EXPECT_EQ(j["applicable"], t.r.applicable_count());
  EXPECT_EQ(j["text"]["labels"].size(), t.r.text_ids.size());
  int held = 0, applicable = 0;
  for (const auto& c : j["claims"]) held += c["held"].get<bool>(), applicable += c["applies"].get<bool>();
  EXPECT_EQ(held, t.r.held_count());
  EXPECT_EQ(applicable, t.r.applicable_count());
}

}  // namespace
}  // namespace qkv::report
